/* The profiler (profile.h): stage kinds of a lane through the engine interface. */
#include "model/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "model/executor.h"

void hs_profile_opts_defaults(struct hs_profile_opts *o)
{
    if (o->target_rel <= 0) o->target_rel = 0.05;
    if (o->cell_cap_s <= 0) o->cell_cap_s = 1.0;
    if (o->n_min <= 0) o->n_min = 8; /* the fewest with a distribution-free 95 % interval */
    if (o->n_max < o->n_min) o->n_max = o->n_min > 1000 ? o->n_min : 1000;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q of sorted v[0..n) by linear interpolation. */
static double quantile(const double *v, int n, double q)
{
    const double pos = q * (n - 1);
    const int i = (int)pos;
    return i + 1 < n ? v[i] + (v[i + 1] - v[i]) * (pos - i) : v[n - 1];
}

/* The distribution-free 95 % interval of the median: the order statistics of ranks
 * n/2 -+ 1.96 sqrt(n) / 2 (binomial, normal approximation). Half its width, or infinity when n
 * is too small for both ranks to exist. */
static double median_ci_half(const double *v, int n)
{
    const double spread = 0.98 * sqrt((double)n);
    const int lo = (int)floor(n / 2.0 - spread);      /* 1-based rank */
    const int hi = (int)ceil(n / 2.0 + 1.0 + spread); /* 1-based rank */
    if (lo < 1 || hi > n) return INFINITY;
    return (v[hi - 1] - v[lo - 1]) / 2.0;
}

static double ci_rel_of(double *ms, int n)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    const double med = quantile(ms, n, 0.5), half = median_ci_half(ms, n);
    return med > 0 ? half / med : half == 0 ? 0 : INFINITY;
}

/* Rounded to 6 significant digits: the JSON stays readable and no figure claims more. */
static json_t *num(double v)
{
    char b[32];
    snprintf(b, sizeof b, "%.6g", v);
    return json_real(strtod(b, NULL));
}

json_t *hs_profile_stats(double *ms, int n, int n_min, double target_rel, double *rel)
{
    json_t *o = json_object();
    if (n <= 0) {
        json_object_set_new(o, "n", json_integer(0));
        if (rel) *rel = INFINITY;
        return o;
    }
    const double r = ci_rel_of(ms, n), half = median_ci_half(ms, n);
    if (rel) *rel = r;
    json_object_set_new(o, "n", json_integer(n));
    json_object_set_new(o, "median_ms", num(quantile(ms, n, 0.5)));
    json_object_set_new(o, "p10_ms", num(quantile(ms, n, 0.1)));
    json_object_set_new(o, "p90_ms", num(quantile(ms, n, 0.9)));
    json_object_set_new(o, "ci95_ms", isfinite(half) ? num(half) : json_null());
    json_object_set_new(o, "ci_rel", isfinite(r) ? num(r) : json_null());
    json_object_set_new(o, "met", json_boolean(n >= n_min && r <= target_rel));
    return o;
}

/* Samples of one cell: four series of the same length. */
enum { S_COMPUTE, S_SYNC, S_COPY_IN, S_COPY_OUT, S_COUNT };
static const char *const series_name[S_COUNT] = {"compute", "sync", "copy_in", "copy_out"};

struct samples {
    double *v[S_COUNT];
    int n, cap;
};

static bool samples_push(struct samples *s, const double x[S_COUNT])
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        for (int k = 0; k < S_COUNT; k++) {
            double *nv = hs_realloc(s->v[k], sizeof(double) * (size_t)cap);
            if (!nv) return false;
            s->v[k] = nv;
        }
        s->cap = cap;
    }
    for (int k = 0; k < S_COUNT; k++) s->v[k][s->n] = x[k];
    s->n++;
    return true;
}

static void samples_free(struct samples *s)
{
    for (int k = 0; k < S_COUNT; k++) hs_free(s->v[k]);
    memset(s, 0, sizeof *s);
}

/* Whether a cell has enough passes: after n_min, the first of the target met, the time cap or
 * n_max. The interval is checked on a copy every few passes (sorting is not free for the
 * microsecond stages). */
static bool cell_done(const struct samples *s, const struct hs_profile_opts *o, int64_t t_start,
                      double *scratch)
{
    if (s->n < o->n_min) return false;
    if (s->n >= o->n_max || (double)(hs_now_ns() - t_start) / 1e9 >= o->cell_cap_s) return true;
    if (s->n > 16 && s->n % (s->n / 8) != 0) return false;
    memcpy(scratch, s->v[S_COMPUTE], sizeof(double) * (size_t)s->n);
    return ci_rel_of(scratch, s->n) <= o->target_rel;
}

struct lane_run {
    const struct hs_model *m;
    hs_engine_t e;
    enum hs_dtype lane_dtype;
    void **prep;          /* [n_stages] */
    enum hs_dtype *dtype; /* [n_stages] */
    void *ws;
    /* each kind's input as the model gives it (captured by the warm-up): every stage of a pass
     * starts from it, so repeated passes never drift into values no request produces (an
     * attention applied to its own output, again and again, ends in underflowing scores that
     * run many times slower) */
    float *in_hidden[HS_STAGE_COUNT], *in_pooled;
    float *out_hidden, *out_pooled; /* copy-out targets */
    struct hs_batch b;
    int32_t *ids, *lengths, *offsets;
};

static double ms_since(int64_t t0)
{
    return (double)(hs_now_ns() - t0) / 1e6;
}

/* One pass over the stages of kind `kind`: its four samples in x. */
static hs_status kind_pass(struct lane_run *r, enum hs_stage_kind kind, double x[S_COUNT],
                           struct hs_error *err)
{
    hs_status st = HS_STATUS_OK;
    int64_t t0;
    const enum hs_act_buf in_buf =
        kind == HS_STAGE_NORMALIZE ? HS_ACT_BUF_POOLED : HS_ACT_BUF_HIDDEN;
    const float *in = kind == HS_STAGE_NORMALIZE ? r->in_pooled : r->in_hidden[kind];
    int count = 0;
    x[S_COMPUTE] = x[S_SYNC] = 0;
    for (int i = 0; i < r->m->n_stages; i++) {
        const struct hs_stage *sg = &r->m->stages[i];
        if (sg->kind != kind) continue;
        /* the copy-in: timed once per pass, repeated untimed before every further stage */
        t0 = hs_now_ns();
        if (kind == HS_STAGE_EMBED)
            st = hs_engine_batch_begin(r->e, r->ws, &r->b, err);
        else
            st = hs_engine_act_write(r->e, r->ws, in_buf, in, err);
        if (count == 0) x[S_COPY_IN] = ms_since(t0);
        if (st) return st;
        t0 = hs_now_ns();
        st = hs_engine_run_stage(r->e, r->ws, sg, r->prep[i], err);
        const int64_t t1 = hs_now_ns();
        if (!st) st = hs_engine_sync(r->e, r->ws, err);
        x[S_COMPUTE] += (double)(t1 - t0) / 1e6;
        x[S_SYNC] += ms_since(t1);
        if (st) return st;
        count++;
    }
    if (count > 1) x[S_COMPUTE] /= count, x[S_SYNC] /= count;
    const bool pooled = kind == HS_STAGE_POOL || kind == HS_STAGE_NORMALIZE;
    t0 = hs_now_ns();
    st = hs_engine_act_read(r->e, r->ws, pooled ? HS_ACT_BUF_POOLED : HS_ACT_BUF_HIDDEN,
                            pooled ? r->out_pooled : r->out_hidden, err);
    x[S_COPY_OUT] = ms_since(t0);
    return st;
}

/* Full-length sequences of vocabulary ids: [CLS] w ... w [SEP], the same every run. */
static hs_status fill_batch(struct lane_run *r, int batch, int seq, struct hs_error *err)
{
    int32_t special[4];
    int n = 0, full = 0;
    hs_status st = hs_model_tokenize(r->m, "", 0, special, 4, &n, &full, err);
    if (st) return st;
    const int vocab = r->m->config.dims.vocab;
    uint32_t lcg = 12345;
    for (int s = 0; s < batch; s++) {
        int32_t *row = r->ids + (size_t)s * seq;
        for (int t = 0; t < seq; t++) {
            lcg = lcg * 1664525u + 1013904223u;
            row[t] = vocab > 2000 ? 1000 + (int32_t)((lcg >> 8) % (uint32_t)(vocab - 1000))
                                  : (int32_t)((lcg >> 8) % (uint32_t)vocab);
        }
        if (n >= 2) row[0] = special[0], row[seq - 1] = special[n - 1];
        r->lengths[s] = seq;
        r->offsets[s] = s * seq;
    }
    r->offsets[batch] = batch * seq;
    r->b = (struct hs_batch){.n_seqs = batch,
                             .seq_max = seq,
                             .n_tokens = batch * seq,
                             .ids = r->ids,
                             .lengths = r->lengths,
                             .offsets = r->offsets};
    return HS_STATUS_OK;
}

static json_t *cell_json(struct samples *s, const struct hs_profile_opts *o, double *rel)
{
    json_t *c = json_object();
    for (int k = 0; k < S_COUNT; k++)
        json_object_set_new(
            c, series_name[k],
            hs_profile_stats(s->v[k], s->n, o->n_min, o->target_rel, k == S_COMPUTE ? rel : NULL));
    return c;
}

/* One shape: every kind, then the whole model. Appends the cell to cells. */
static hs_status profile_shape(struct lane_run *r, struct hs_executor *exec, int batch, int seq,
                               const struct hs_profile_opts *o, json_t *cells, char *line,
                               size_t line_cap, struct hs_error *err)
{
    hs_status st = fill_batch(r, batch, seq, err);
    if (st) return st;
    /* warm-up through the whole model, capturing each kind's input where it first sees one */
    st = hs_engine_batch_begin(r->e, r->ws, &r->b, err);
    bool seen[HS_STAGE_COUNT] = {false};
    for (int i = 0; !st && i < r->m->n_stages; i++) {
        const enum hs_stage_kind kind = r->m->stages[i].kind;
        if (!seen[kind] && kind != HS_STAGE_EMBED) {
            seen[kind] = true;
            st = hs_engine_sync(r->e, r->ws, err);
            if (!st)
                st = kind == HS_STAGE_NORMALIZE
                         ? hs_engine_act_read(r->e, r->ws, HS_ACT_BUF_POOLED, r->in_pooled, err)
                         : hs_engine_act_read(r->e, r->ws, HS_ACT_BUF_HIDDEN, r->in_hidden[kind],
                                              err);
        }
        if (!st) st = hs_engine_run_stage(r->e, r->ws, &r->m->stages[i], r->prep[i], err);
    }
    if (!st) st = hs_engine_sync(r->e, r->ws, err);
    if (st) return st;

    json_t *cell = json_object(), *kinds = json_object();
    json_object_set_new(cell, "batch", json_integer(batch));
    json_object_set_new(cell, "bucket", json_integer(seq));
    json_object_set_new(cell, "tokens", json_integer((json_int_t)batch * seq));
    json_object_set_new(cell, "stages", kinds);
    json_array_append_new(cells, cell);
    size_t used = (size_t)snprintf(line, line_cap, "%-10s %-5s %3d x %-4d", hs_engine_name(r->e),
                                   hs_compute_dtype_name(r->lane_dtype), batch, seq);
    /* cell_done sorts a copy of at most n_max samples here */
    double *scratch = hs_malloc(sizeof(double) * (size_t)o->n_max);
    if (!scratch) return hs_error_set(err, HS_STATUS_NO_MEMORY, "profile: out of memory");
    struct samples s = {0};
    double x[S_COUNT], rel;
    for (int k = 0; k < HS_STAGE_COUNT && !st; k++) {
        samples_free(&s);
        const enum hs_stage_kind kind = (enum hs_stage_kind)k;
        int count = 0;
        for (int i = 0; i < r->m->n_stages; i++) count += r->m->stages[i].kind == kind;
        if (!count) continue;
        st = kind_pass(r, kind, x, err); /* untimed */
        const int64_t t_start = hs_now_ns();
        while (!st) {
            st = kind_pass(r, kind, x, err);
            if (st) break;
            if (!samples_push(&s, x))
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "profile: out of memory");
            if (!st && cell_done(&s, o, t_start, scratch)) break;
        }
        if (st) break;
        json_t *c = cell_json(&s, o, &rel);
        json_object_set_new(c, "count", json_integer(count));
        json_object_set_new(kinds, hs_stage_kind_name(kind), c);
        json_t *med = json_object_get(json_object_get(c, "compute"), "median_ms");
        if (used < line_cap)
            used += (size_t)snprintf(line + used, line_cap - used, " %s %.3g",
                                     hs_stage_kind_name(kind), json_real_value(med));
    }
    /* the whole model through the executor, as the server runs a batch */
    float *out =
        st ? NULL : hs_malloc(sizeof(float) * (size_t)batch * hs_pooled_dim(&r->m->config.dims));
    if (!st && !out) st = hs_error_set(err, HS_STATUS_NO_MEMORY, "profile: out of memory");
    if (!st) {
        samples_free(&s);
        struct hs_exec_timing t;
        st = hs_executor_run(exec, 0, &r->b, out, &t, err); /* untimed */
        const int64_t t_start = hs_now_ns();
        while (!st) {
            const int64_t t0 = hs_now_ns();
            st = hs_executor_run(exec, 0, &r->b, out, &t, err);
            if (st) break;
            const double total = ms_since(t0);
            double w[S_COUNT] = {[S_COMPUTE] = (double)t.compute_ns / 1e6,
                                 [S_SYNC] = total - (double)(t.compute_ns + t.copy_in_ns +
                                                             t.copy_out_ns + t.transfer_ns) /
                                                        1e6,
                                 [S_COPY_IN] = (double)t.copy_in_ns / 1e6,
                                 [S_COPY_OUT] = (double)t.copy_out_ns / 1e6};
            /* "sync" of the whole model: what the executor's own bookkeeping around its calls
             * costs (its compute includes the engine's sync) */
            if (!samples_push(&s, w))
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "profile: out of memory");
            if (!st && cell_done(&s, o, t_start, scratch)) break;
        }
        if (!st) {
            json_t *c = cell_json(&s, o, &rel);
            json_object_set(c, "overhead", json_object_get(c, "sync"));
            json_object_del(c, "sync");
            json_object_set_new(cell, "whole", c);
            json_t *med = json_object_get(json_object_get(c, "compute"), "median_ms");
            if (used < line_cap && isfinite(rel))
                snprintf(line + used, line_cap - used, " | whole %.4g ms (n %d, CI95 +-%.1f %%)",
                         json_real_value(med), s.n, rel * 100);
            else if (used < line_cap)
                snprintf(line + used, line_cap - used, " | whole %.4g ms (n %d, too few for a CI)",
                         json_real_value(med), s.n);
        }
    }
    hs_free(out);
    hs_free(scratch);
    samples_free(&s);
    return st;
}

static void run_free(struct lane_run *r)
{
    if (r->prep)
        for (int i = 0; i < r->m->n_stages; i++) hs_engine_stage_release(r->e, r->prep[i]);
    hs_engine_ws_destroy(r->e, r->ws);
    hs_free(r->prep);
    hs_free(r->dtype);
    for (int k = 0; k < HS_STAGE_COUNT; k++) hs_free_aligned(r->in_hidden[k]);
    hs_free_aligned(r->in_pooled);
    hs_free_aligned(r->out_hidden);
    hs_free_aligned(r->out_pooled);
    hs_free(r->ids);
    hs_free(r->lengths);
    hs_free(r->offsets);
}

hs_status hs_profile_lane(const struct hs_model *m, hs_engine_t e, enum hs_dtype dtype,
                          const struct hs_profile_opts *opts, json_t **out, struct hs_error *err)
{
    struct hs_profile_opts o = *opts;
    hs_profile_opts_defaults(&o);
    *out = NULL;
    /* the grid this lane takes: buckets the model can hold, shapes within the token limit */
    int batch_max = 0, seq_max = 0, tokens_max = 0;
    for (int bi = 0; bi < o.n_batches; bi++)
        for (int si = 0; si < o.n_buckets; si++) {
            const int b = o.batches[bi], s = o.buckets[si];
            if (b < 1 || s < 2 || s > m->config.max_seq_len) continue;
            if (o.tokens_max > 0 && b * s > o.tokens_max) continue;
            if (b > batch_max) batch_max = b;
            if (s > seq_max) seq_max = s;
            if (b * s > tokens_max) tokens_max = b * s;
        }
    if (!batch_max)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "profile: no shape of the grid fits model %s (max %d tokens)", m->name,
                            m->config.max_seq_len);

    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor_opts xo = {
        .batch_max = batch_max, .tokens_max = tokens_max, .seq_max = seq_max, .dtype = dtype};
    struct lane_run r = {.m = m, .e = e, .lane_dtype = dtype};
    const size_t H = (size_t)m->config.dims.hidden;
    r.prep = hs_calloc((size_t)m->n_stages, sizeof(void *));
    r.dtype = hs_calloc((size_t)m->n_stages, sizeof(enum hs_dtype));
    bool host_ok = true;
    for (int k = 0; k < HS_STAGE_COUNT; k++) { /* every kind that reads hidden */
        if (k == HS_STAGE_EMBED || k == HS_STAGE_NORMALIZE) continue;
        r.in_hidden[k] = hs_malloc_aligned(sizeof(float) * (size_t)tokens_max * H, 64);
        host_ok &= r.in_hidden[k] != NULL;
    }
    r.out_hidden = hs_malloc_aligned(sizeof(float) * (size_t)tokens_max * H, 64);
    const size_t P = (size_t)hs_pooled_dim(&m->config.dims); /* a pooled row (SPLADE: vocab) */
    r.in_pooled = hs_malloc_aligned(sizeof(float) * (size_t)batch_max * P, 64);
    r.out_pooled = hs_malloc_aligned(sizeof(float) * (size_t)batch_max * P, 64);
    r.ids = hs_malloc(sizeof(int32_t) * (size_t)tokens_max);
    r.lengths = hs_malloc(sizeof(int32_t) * (size_t)batch_max);
    r.offsets = hs_malloc(sizeof(int32_t) * (size_t)(batch_max + 1));
    if (!host_ok || !r.prep || !r.dtype || !r.out_hidden || !r.in_pooled || !r.out_pooled ||
        !r.ids || !r.lengths || !r.offsets) {
        run_free(&r);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "profile: out of memory");
    }

    const struct hs_engine_kind *kind = hs_engine_kind_find(hs_engine_kind(e));
    json_t *lane = json_object(), *stages = json_object(), *cells = json_array();
    json_object_set_new(lane, "model", json_string(m->name));
    json_object_set_new(lane, "engine", json_string(hs_engine_name(e)));
    json_object_set_new(lane, "kind", json_string(hs_engine_kind(e)));
    json_object_set_new(lane, "dtype", json_string(hs_compute_dtype_name(dtype)));
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    json_object_set_new(lane, "threads", json_integer(caps.threads));
    json_object_set_new(lane, "status", json_string("ok"));

    /* memory: each stage's preparation, measured alone, and the engine kind's estimate */
    hs_status st = HS_STATUS_OK;
    int64_t prep_bytes[HS_STAGE_COUNT] = {0}, prep_est[HS_STAGE_COUNT] = {0};
    int counts[HS_STAGE_COUNT] = {0};
    uint32_t dtypes = 0;
    for (int i = 0; i < m->n_stages && !st; i++) {
        const struct hs_stage *sg = &m->stages[i];
        r.dtype[i] = hs_executor_stage_dtype(m, &plan, &xo, i);
        dtypes |= 1u << r.dtype[i];
        const int64_t b0 = hs_alloc_live_bytes();
        st = hs_engine_stage_prepare(e, sg, r.dtype[i], &r.prep[i], err);
        prep_bytes[sg->kind] += hs_alloc_live_bytes() - b0;
        prep_est[sg->kind] += hs_engine_kind_stage_bytes(kind, sg->kind, sg->dims, r.dtype[i]);
        counts[sg->kind]++;
    }
    struct hs_ws_spec spec = {.batch_max = batch_max,
                              .tokens_max = tokens_max,
                              .seq_max = seq_max,
                              .dims = &m->config.dims,
                              .dtypes = dtypes};
    int64_t ws_bytes = 0, est_act = 0, est_scratch = 0;
    if (!st) {
        const int64_t b0 = hs_alloc_live_bytes();
        st = hs_engine_ws_create(e, &spec, &r.ws, err);
        ws_bytes = hs_alloc_live_bytes() - b0;
        hs_engine_kind_ws_bytes(kind, &spec, caps.threads, &est_act, &est_scratch);
    }
    for (int k = 0; k < HS_STAGE_COUNT; k++) {
        if (!counts[k]) continue;
        json_t *sj = json_object();
        json_object_set_new(sj, "count", json_integer(counts[k]));
        json_object_set_new(sj, "weights_bytes", json_integer(prep_bytes[k]));
        json_object_set_new(sj, "weights_estimate_bytes", json_integer(prep_est[k]));
        json_t *dts = json_array();
        for (int i = 0; i < m->n_stages; i++)
            if ((int)m->stages[i].kind == k) {
                bool dup = false;
                for (size_t j = 0; j < json_array_size(dts); j++)
                    dup |= !strcmp(json_string_value(json_array_get(dts, j)),
                                   hs_compute_dtype_name(r.dtype[i]));
                if (!dup)
                    json_array_append_new(dts, json_string(hs_compute_dtype_name(r.dtype[i])));
            }
        json_object_set_new(sj, "dtypes", dts);
        json_object_set_new(stages, hs_stage_kind_name((enum hs_stage_kind)k), sj);
    }
    json_object_set_new(lane, "stages", stages);
    json_t *wsj = json_object();
    json_object_set_new(wsj, "batch_max", json_integer(batch_max));
    json_object_set_new(wsj, "seq_max", json_integer(seq_max));
    json_object_set_new(wsj, "tokens_max", json_integer(tokens_max));
    json_object_set_new(wsj, "bytes", json_integer(ws_bytes));
    json_object_set_new(wsj, "activations_estimate_bytes", json_integer(est_act));
    json_object_set_new(wsj, "scratch_estimate_bytes", json_integer(est_scratch));
    json_object_set_new(lane, "workspace", wsj);

    struct hs_executor *x = NULL;
    if (!st) st = hs_executor_create(m, &plan, &xo, &x, err);
    char line[512];
    for (int bi = 0; bi < o.n_batches && !st; bi++)
        for (int si = 0; si < o.n_buckets && !st; si++) {
            const int b = o.batches[bi], s = o.buckets[si];
            if (b < 1 || s < 2 || s > seq_max || b > batch_max || b * s > tokens_max) continue;
            st = profile_shape(&r, x, b, s, &o, cells, line, sizeof line, err);
            if (!st && o.progress) o.progress(o.progress_ctx, line);
        }
    json_object_set_new(lane, "cells", cells);
    hs_executor_free(x);
    run_free(&r);
    if (st) {
        json_decref(lane);
        return st;
    }
    *out = lane;
    return HS_STATUS_OK;
}
