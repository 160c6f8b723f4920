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
    /* rank the stages (each quantized alone) only when every stage quantized misses the target:
     * for serve's quantize: auto, whose server start waits for the search. Unranked stages
     * report damage_mean and cos_min -1 (not measured). */
    bool rank_lazily;
    /* (optional) called with a line of progress text */
    void (*progress)(void *ctx, const char *line);
    void *progress_ctx;
};

struct hs_quant_stage {
    int index; /* stage index in the model */
    char name[32];
    double damage_mean; /* 1 - mean cosine with only this stage quantized (calibration part);
                           -1: not measured (rank_lazily) */
    double cos_min;     /* worst cosine with only this stage quantized; -1: not measured */
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

/* Writes only the plan of r into dir (which must exist): quant.safetensors (when the plan
 * smooths) and then quant.json, each to a temporary renamed over the final name (core/file.h),
 * so that a failed write (a full disk, a read-only folder) leaves no half-written plan; an older
 * quant.safetensors is removed when the new plan has none. */
hs_status hs_quant_write_plan(const struct hs_model *m, const struct hs_quant_report *r,
                              const char *dir, struct hs_error *err);

/* Reads <dir>/quant.json into *out. HS_STATUS_NOT_FOUND when there is none; HS_STATUS_CORRUPT
 * with the reason when it is malformed or names stages the model lacks. */
hs_status hs_quant_load(const struct hs_model *m, const char *dir, struct hs_quant_plan *out,
                        struct hs_error *err);

/* Reads <dir>/quant.safetensors when present: F32 [hidden] tensors "layer<i>.attn.smooth" and
 * "layer<i>.ffn.smooth" become the stages' HS_W_SMOOTH weights (m->quant_weights keeps the
 * mapping). HS_STATUS_CORRUPT naming the tensor when one has the wrong dtype or shape. */
hs_status hs_quant_attach_smoothing(struct hs_model *m, const char *dir, struct hs_error *err);

/* ---- quantization at load (models[].quantize: auto; quant_auto.c) ---- */

/* Whether a lane computing in dtype wants a plan (int8: bf16 and f16 need none). */
bool hs_quant_dtype_needs_plan(enum hs_dtype dtype);

/* Calibration texts, one per non-empty line of path; NULL = the built-in set (the committed
 * data/calib/calib.txt, compiled in). Free with hs_quant_calib_free. */
hs_status hs_quant_calib_texts(const char *path, char ***texts, int *n, struct hs_error *err);
void hs_quant_calib_free(char **texts, int n);

struct hs_quant_auto_opts {
    enum hs_dtype dtype;   /* the lane's (default 0 = F32: int8) */
    const char *cache_dir; /* where plans of folders it cannot write go; NULL or "" = none */
    int threads;           /* of the search's CPU engine; 0 = every core */
    void (*progress)(void *ctx, const char *line); /* (optional) the search's progress */
    void *progress_ctx;
};

struct hs_quant_auto_info {
    char dir[4096];           /* the folder holding the plan used: the model's or a cache folder */
    bool reused;              /* found there (an earlier start made it); no search ran */
    double seconds;           /* the search and the write; 0 when reused */
    int n_linear, n_keep_f32; /* attention / FFN stages, and those the plan keeps in f32 */
    double smooth_alpha, act_percentile;
    double cos_min, cos_mean; /* held-out agreement with the plan */
    bool target_met;
};

/* Gives model m a plan for o->dtype when it has none (m->quant NULL or for another dtype). The
 * plan lives next to the model when its folder is writable, else in
 * <cache_dir>/<model>-<hash of its weights and of the calibration set>/; one already there is
 * reused (info->reused). Otherwise it runs hs_quant_search on a CPU engine with the built-in
 * calibration set (what `hetserve quantize` runs), writes the plan there (hs_quant_write_plan:
 * whole or not at all) and reads it back, so that m then holds exactly what a later start reads.
 * Errors: the folder is not writable and no cache folder is given, or the cache folder cannot be
 * made (HS_STATUS_IO, saying so), the CPU has no path for the dtype (HS_STATUS_UNSUPPORTED), the
 * search or the write failed. Not thread-safe with users of m (call before any executor). */
hs_status hs_quant_auto(struct hs_model *m, const struct hs_quant_auto_opts *o,
                        struct hs_quant_auto_info *info, struct hs_error *err);

/* Reads the plan in dir (quant.json and, when present, quant.safetensors) into m, replacing the
 * plan and the smoothing m had. HS_STATUS_NOT_FOUND when dir has no quant.json. */
hs_status hs_quant_use(struct hs_model *m, const char *dir, struct hs_error *err);

#endif
