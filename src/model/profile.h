/* hetserve — the profiler: measured cost of every stage kind of a lane over a grid of shapes.
 *
 * A lane (model, engine, dtype) is profiled through the engine interface, on the path the
 * executor takes: its stages are prepared in the dtype the executor would give each one (the
 * model's quantization plan included), one workspace is made for the grid's largest shape, and
 * for every (batch, bucket) shape of the grid and every stage kind (embed, attn, ffn, pool,
 * normalize) the profiler repeats a pass over that kind's stages and records, each on its own:
 *   compute   time inside hs_engine_run_stage (mean over the kind's stages in the pass);
 *   sync      time inside the hs_engine_sync that follows each stage (on a synchronous engine the
 *             call's own cost; on an asynchronous one the wait: compute + sync is the stage);
 *   copy_in   moving the kind's input onto the engine: token ids (embed: batch_begin), the
 *             hidden state (attn, ffn, pool: act_write), the pooled vectors (normalize);
 *   copy_out  moving its output off: hidden (embed, attn, ffn: act_read) or pooled (pool,
 *             normalize).
 * The whole model is timed per shape as well, through hs_executor_run on an executor of the lane.
 * Sequences are full-length (every one as long as the bucket), of vocabulary ids.
 *
 * Repetition: a cell (shape, kind) repeats until the 95 % confidence interval of its compute
 * median (distribution-free, from order statistics) is within target_rel of the median, with at
 * least n_min passes, or until cell_cap_s seconds or n_max passes; one untimed pass comes first.
 * Each statistic records n, median, p10, p90, the interval's half-width and whether the target
 * was met.
 *
 * Memory: the bytes each stage kind's preparations take (measured as the allocator's live
 * bytes across hs_engine_stage_prepare, beside the engine kind's estimate) and the workspace at
 * the grid's largest shape (measured and estimated).
 *
 * The result is a jansson object, one lane of the profile JSON (docs/PROFILE.md). Runs on the
 * calling thread; allocates freely (not for the serving path).
 */
#ifndef HS_MODEL_PROFILE_H
#define HS_MODEL_PROFILE_H

#include <jansson.h>
#include <stdbool.h>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

#define HS_PROFILE_MAX_GRID 16

struct hs_profile_opts {
    int n_batches;
    int batches[HS_PROFILE_MAX_GRID]; /* sequences per batch */
    int n_buckets;
    int buckets[HS_PROFILE_MAX_GRID]; /* sequence lengths (tokens); above max_seq_len: skipped */
    int tokens_max;    /* shapes with more batch x bucket tokens are skipped; 0 = no limit */
    double target_rel; /* CI half-width / median to reach; default 0.05 */
    double cell_cap_s; /* time cap per (shape, kind); default 1 */
    int n_min;         /* passes at least; default 8 (the fewest with a 95 % interval) */
    int n_max;         /* passes at most; default 1000 */
    /* (optional) called with one line of progress per shape */
    void (*progress)(void *ctx, const char *line);
    void *progress_ctx;
};

/* Fills defaults for the zero fields of o (not the grid). */
void hs_profile_opts_defaults(struct hs_profile_opts *o);

/* Profiles model m on engine e computing in dtype; *out receives the lane's JSON object
 * (caller owns it: json_decref). Errors: the engine's or the executor's status and message. */
hs_status hs_profile_lane(const struct hs_model *m, hs_engine_t e, enum hs_dtype dtype,
                          const struct hs_profile_opts *o, json_t **out, struct hs_error *err);

/* The statistics of n samples (milliseconds; sorted in place) as a JSON object {n, median_ms,
 * p10_ms, p90_ms, ci95_ms, ci_rel, met}; met: n >= n_min and the interval's half-width is at most
 * target_rel of the median. *rel receives ci_rel (infinity when n is too small for an
 * interval). */
json_t *hs_profile_stats(double *ms, int n, int n_min, double target_rel, double *rel);

#endif
