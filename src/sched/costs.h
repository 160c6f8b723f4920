/* hetserve — measured costs: a `hetserve profile` file (docs/PROFILE.md, format
 * "hetserve-profile", version 1) read back for placement planning.
 *
 * hs_costs_parse reads the JSON into fixed tables: per lane (model, engine, dtype) that was
 * measured, per (batch, bucket) cell, per stage kind the medians of compute, sync, copy_in and
 * copy_out (per stage of that kind) and the stage count, and the whole model's times through the
 * executor. Fields the planner does not use are not read; fields a later version 1 file adds are
 * ignored. A file that is not a version 1 profile, or whose used fields are missing, of the wrong
 * type, or out of range (times: 0 to 1e9 ms), is refused with HS_STATUS_CORRUPT and a message
 * naming the label and the JSON path (`p.json: lanes[0].cells[2].stages.attn.compute.median_ms:
 * ...`). Lanes that were skipped (no device, not built) are kept with ok = false and no cells.
 *
 * hs_costs_stage_ms and hs_costs_whole_ms answer for any (batch, bucket): the measured cell when
 * there is one; else from the cells of the smallest measured bucket >= bucket (the largest when
 * none is, scaled by bucket / largest), linear in the batch between the two measured batches around
 * it (beyond the largest: along the last two; with one batch: in proportion). Queries are
 * thread-safe (read-only).
 */
#ifndef HS_SCHED_COSTS_H
#define HS_SCHED_COSTS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define HS_COSTS_MAX_LANES 16
#define HS_COSTS_MAX_CELLS 64

enum hs_cost_kind {
    HS_COST_EMBED,
    HS_COST_ATTN,
    HS_COST_FFN,
    HS_COST_POOL,
    HS_COST_NORMALIZE,
    HS_COST_KINDS
};

/* "embed", "attn", "ffn", "pool", "normalize" */
const char *hs_cost_kind_name(enum hs_cost_kind k);

/* Medians, milliseconds (per stage for the stage kinds). */
struct hs_cost_times {
    double compute_ms, sync_ms, copy_in_ms, copy_out_ms;
};

struct hs_cost_cell {
    int batch, bucket;
    int count[HS_COST_KINDS]; /* stages of each kind in the model */
    struct hs_cost_times stage[HS_COST_KINDS];
    struct hs_cost_times whole; /* compute (with sync), copy_in, copy_out */
    double whole_overhead_ms;   /* the executor's own bookkeeping (0 when absent) */
    double whole_p90_ms;        /* p90 of the whole model's compute (0 when absent) */
};

struct hs_cost_lane {
    char model[128], engine[32], kind[16], dtype[8];
    int device, threads;
    bool ok; /* measured ("status": "ok") */
    int n_cells;
    struct hs_cost_cell cells[HS_COSTS_MAX_CELLS];
};

struct hs_costs {
    char created[40];
    char config[256]; /* the configuration profiled; "" = the default */
    int cores_online;
    double load_avg_start, load_avg_end; /* the machine's 1-minute load around the run */
    int n_lanes;
    struct hs_cost_lane lanes[HS_COSTS_MAX_LANES];
};

/* Parses a profile (text of len bytes; label names it in messages) into *out, which the caller
 * allocates (it is large: hs_malloc it). HS_STATUS_CORRUPT naming the path of the first fault,
 * HS_STATUS_NO_MEMORY. Thread-safe. */
hs_status hs_costs_parse(const char *text, size_t len, const char *label, struct hs_costs *out,
                         struct hs_error *err);
/* Reads and parses a file (HS_STATUS_IO when unreadable). */
hs_status hs_costs_load(const char *path, struct hs_costs *out, struct hs_error *err);

/* The measured lane of engine (and model, dtype when not NULL); NULL when none is measured. */
const struct hs_cost_lane *hs_costs_lane(const struct hs_costs *c, const char *engine,
                                         const char *model, const char *dtype);

/* Per-stage time of kind k (compute + sync) at (batch, bucket), and the kind's copies. */
struct hs_cost_times hs_costs_stage(const struct hs_cost_lane *l, enum hs_cost_kind k, int batch,
                                    int bucket);
/* Stages of kind k in the lane's model. */
int hs_costs_count(const struct hs_cost_lane *l, enum hs_cost_kind k);
/* The whole model's batch time at (batch, bucket): compute + copy_in + copy_out + overhead. */
double hs_costs_whole_ms(const struct hs_cost_lane *l, int batch, int bucket);

/* The distinct buckets l measured, ascending, into out (room for HS_COSTS_MAX_CELLS); their
 * count. */
int hs_costs_buckets(const struct hs_cost_lane *l, int *out);
/* A batch's time on an engine that computes ragged batches (its time follows the real tokens,
 * not the padded shape), at its sequences' mean length len: at(ctx, S), the batch's time at a
 * measured bucket S, interpolated linearly in the length between the measured buckets around
 * len (buckets: hs_costs_buckets'; below the smallest, along the first two but never under the
 * smallest's time scaled by the length; at or past the largest, or with one bucket, at(ctx,
 * ceil(len)), which the cost queries extrapolate). */
double hs_costs_ragged(const int *buckets, int n, double len, double (*at)(void *ctx, int bucket),
                       void *ctx);
/* The same interpolation in two steps, for several times at once: where len falls among the
 * buckets (hs_costs_ragged_at: the buckets lo and hi to ask, equal when one is enough), then the
 * time from those two answers (hs_costs_ragged_mix). */
struct hs_ragged_at {
    int lo, hi;
    double w, floor; /* t(lo) + w * (t(hi) - t(lo)), at least t(lo) * floor */
};
struct hs_ragged_at hs_costs_ragged_at(const int *buckets, int n, double len);
double hs_costs_ragged_mix(const struct hs_ragged_at *r, double t_lo, double t_hi);

#endif
