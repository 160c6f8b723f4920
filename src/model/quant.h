/* hetserve — quantization plans: which stages of a model keep f32 in a reduced-precision lane.
 *
 * An int8 lane quantizes the linear layers of every attention and FFN stage (engine/cpu/
 * qlinear.h). Some stages lose more than others; a plan names those that stay in f32 so that
 * the whole model meets a target agreement with its f32 reference. hs_quant_search measures
 * it: with calibration texts it
 *   1. computes f32 reference embeddings,
 *   2. quantizes each stage alone and measures its damage (1 - cosine to the reference, mean
 *      and worst over the calibration part),
 *   3. quantizes every stage, then moves stages back to f32, most damaging first, until the
 *      held-out part (every `heldout_every`-th text, never used for step 2) meets the target.
 * The plan is stored as quant.json in a model folder (hs_quant_write); hs_model_load reads it,
 * and every executor whose dtype is the plan's applies it (executor.h). Format, version 1:
 *   {"format": "hetserve-quant", "version": 1, "dtype": "int8",
 *    "weights": "per-channel symmetric",
 *    "activations": "per-token dynamic" | "per-tensor static (percentile P of calibration inputs)",
 *    "keep_f32": ["layer5.ffn", ...],
 *    "target": {"cos_min": .., "cos_mean": ..}, "heldout": {"count", "cos_min", "cos_mean"},
 *    "stages": [{"name", "damage_mean", "cos_min", "keep_f32"}, ...]}
 */
#ifndef HS_MODEL_QUANT_H
#define HS_MODEL_QUANT_H

#include <stdbool.h>

#include "core/status.h"
#include "engine/engine.h"

struct hs_model;

#define HS_QUANT_MAX_STAGES 128

/* A plan as the executor uses it (also the part of quant.json that loading reads). */
struct hs_quant_plan {
    enum hs_dtype dtype;                /* the lanes it applies to */
    bool keep_f32[HS_QUANT_MAX_STAGES]; /* by stage index of the model */
};

struct hs_quant_opts {
    enum hs_dtype dtype; /* default (0 = F32 is not a reduced dtype): HS_DTYPE_I8 */
    double cos_min;      /* target on the held-out texts; default 0.99 */
    double cos_mean;     /* default 0.998 */
    int heldout_every;   /* every Nth text is held out; default 3 */
    /* (optional) called with a line of progress text */
    void (*progress)(void *ctx, const char *line);
    void *progress_ctx;
};

struct hs_quant_stage {
    int index; /* stage index in the model */
    char name[32];
    double damage_mean; /* 1 - mean cosine with only this stage quantized (calibration part) */
    double cos_min;     /* worst cosine with only this stage quantized */
    bool keep_f32;
};

struct hs_quant_report {
    int n_calib, n_heldout;
    int n_stages; /* linear stages (attention and FFN) */
    struct hs_quant_stage stages[HS_QUANT_MAX_STAGES];
    double all_cos_min, all_cos_mean;     /* every stage quantized, held-out part */
    double final_cos_min, final_cos_mean; /* with the plan, held-out part */
    bool target_met;
    struct hs_quant_opts opts;
    struct hs_quant_plan plan;
    double smooth_alpha;   /* int8: strength of the input smoothing chosen (0 = none) */
    float *smooth;         /* [n_stages * hidden] smoothing divisors, or NULL; owned: free with
                              hs_quant_report_clear */
    double act_percentile; /* int8: 0 = activations per token (dynamic); else the percentile of
                              the calibration inputs that set static per-layer scales */
    float *act_scale;      /* [n_stages * 2] those scales, or NULL; owned like smooth */
};

/* Frees what a report owns. */
void hs_quant_report_clear(struct hs_quant_report *r);

/* Searches a plan for model m on engine e (which must compute in opts->dtype) with n texts.
 * Needs at least 2 * heldout_every texts. For int8 it first measures the largest input of
 * every channel of every attention / FFN stage on the calibration part and picks the smoothing
 * strength alpha (SmoothQuant: s = amax^alpha / wmax^(1 - alpha)) that serves the held-out part
 * best, none included; then whether activations are quantized per token when a layer runs or
 * with one static scale per layer (from the 100th, 99.999th or 99.99th percentile of the
 * calibration inputs), again by the held-out result; the chosen divisors and scales stay attached
 * to m's stages (HS_W_SMOOTH, pointing into out->smooth: keep the report alive while m is used).
 * Allocates per call; not for the serving path. */
hs_status hs_quant_search(struct hs_model *m, hs_engine_t e, const char *const *texts, int n,
                          const struct hs_quant_opts *opts, struct hs_quant_report *out,
                          struct hs_error *err);

/* Writes out_dir: the model folder's files (hard links where possible, else copies) and
 * quant.json with the report. out_dir must not exist or be empty. */
hs_status hs_quant_write(const struct hs_model *m, const struct hs_quant_report *r,
                         const char *out_dir, struct hs_error *err);

/* Reads <dir>/quant.json into *out. HS_STATUS_NOT_FOUND when there is none; HS_STATUS_CORRUPT
 * with the reason when it is malformed or names stages the model lacks. */
hs_status hs_quant_load(const struct hs_model *m, const char *dir, struct hs_quant_plan *out,
                        struct hs_error *err);

/* Reads <dir>/quant.safetensors when present: F32 [hidden] tensors "layer<i>.attn.smooth" and
 * "layer<i>.ffn.smooth" become the stages' HS_W_SMOOTH weights (m->quant_weights keeps the
 * mapping). HS_STATUS_CORRUPT naming the tensor when one has the wrong dtype or shape. */
hs_status hs_quant_attach_smoothing(struct hs_model *m, const char *dir, struct hs_error *err);

#endif
