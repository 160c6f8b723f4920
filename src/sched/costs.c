/* Reading a `hetserve profile` file back (costs.h). */
#include "sched/costs.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"

static const char *const kind_names[HS_COST_KINDS] = {"embed", "attn", "ffn", "pool", "normalize"};

const char *hs_cost_kind_name(enum hs_cost_kind k)
{
    return k >= 0 && k < HS_COST_KINDS ? kind_names[k] : "?";
}

#define PATH_BYTES 160

/* path.key (or path[index] when key is NULL) into p, cut short when too long */
static const char *sub(char p[PATH_BYTES], const char *path, const char *key, size_t index)
{
    int r = key ? snprintf(p, PATH_BYTES, "%s.%s", path, key)
                : snprintf(p, PATH_BYTES, "%s[%zu]", path, index);
    if (r < 0 || r >= PATH_BYTES) memcpy(p + PATH_BYTES - 4, "...", 4);
    return p;
}

struct rd {
    const char *label;
    struct hs_error *err;
};

static __attribute__((format(printf, 3, 4))) hs_status bad(struct rd *r, const char *path,
                                                           const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hs_error_set(r->err, HS_STATUS_CORRUPT, "%s: %s: %s", r->label, path, msg);
}

/* o[key] as a finite number >= 0 into *v; optional: absent (or null) leaves *v as it is. */
static hs_status num(struct rd *r, json_t *o, const char *path, const char *key, bool optional,
                     double *v)
{
    char p[PATH_BYTES];
    sub(p, path, key, 0);
    json_t *j = json_object_get(o, key);
    if ((!j || json_is_null(j)) && optional) return HS_STATUS_OK;
    if (!json_is_number(j)) return bad(r, p, "expected a number");
    double x = json_number_value(j);
    if (!isfinite(x) || x < 0 || x > 1e9) return bad(r, p, "%g is out of range [0, 1e9]", x);
    *v = x;
    return HS_STATUS_OK;
}

/* o[key] as an integer in [lo, hi]. */
static hs_status integer(struct rd *r, json_t *o, const char *path, const char *key, long long lo,
                         long long hi, int *v)
{
    char p[PATH_BYTES];
    sub(p, path, key, 0);
    json_t *j = json_object_get(o, key);
    if (!json_is_integer(j)) return bad(r, p, "expected an integer");
    long long x = json_integer_value(j);
    if (x < lo || x > hi) return bad(r, p, "%lld is out of range [%lld, %lld]", x, lo, hi);
    *v = (int)x;
    return HS_STATUS_OK;
}

/* o[key] as a string of fewer than cap bytes; optional: absent or null gives "". */
static hs_status str(struct rd *r, json_t *o, const char *path, const char *key, bool optional,
                     char *out, size_t cap)
{
    char p[PATH_BYTES];
    sub(p, path, key, 0);
    json_t *j = json_object_get(o, key);
    out[0] = 0;
    if ((!j || json_is_null(j)) && optional) return HS_STATUS_OK;
    if (!json_is_string(j)) return bad(r, p, "expected a string");
    if (json_string_length(j) >= cap || strlen(json_string_value(j)) != json_string_length(j))
        return bad(r, p, "longer than %zu bytes or holding a NUL", cap - 1);
    memcpy(out, json_string_value(j), json_string_length(j) + 1);
    return HS_STATUS_OK;
}

/* A statistic's median: o[key].median_ms. */
static hs_status median(struct rd *r, json_t *o, const char *path, const char *key, double *v)
{
    char p[PATH_BYTES];
    sub(p, path, key, 0);
    json_t *s = json_object_get(o, key);
    if (!json_is_object(s)) return bad(r, p, "expected a statistic (an object)");
    return num(r, s, p, "median_ms", false, v);
}

static hs_status times(struct rd *r, json_t *o, const char *path, struct hs_cost_times *t)
{
    hs_status st = median(r, o, path, "compute", &t->compute_ms);
    if (!st && json_object_get(o, "sync")) st = median(r, o, path, "sync", &t->sync_ms);
    if (!st) st = median(r, o, path, "copy_in", &t->copy_in_ms);
    if (!st) st = median(r, o, path, "copy_out", &t->copy_out_ms);
    return st;
}

static hs_status cell(struct rd *r, json_t *o, const char *path, struct hs_cost_cell *c)
{
    if (!json_is_object(o)) return bad(r, path, "expected an object");
    char p[PATH_BYTES];
    hs_status st = integer(r, o, path, "batch", 1, 1 << 20, &c->batch);
    if (!st) st = integer(r, o, path, "bucket", 1, 1 << 20, &c->bucket);
    json_t *stages = json_object_get(o, "stages");
    sub(p, path, "stages", 0);
    if (!st && !json_is_object(stages)) st = bad(r, p, "expected an object");
    for (int k = 0; !st && k < HS_COST_KINDS; k++) {
        char kp[PATH_BYTES];
        sub(kp, p, kind_names[k], 0);
        json_t *s = json_object_get(stages, kind_names[k]);
        if (!s) continue; /* a model without that kind (no normalize) */
        if (!json_is_object(s)) st = bad(r, kp, "expected an object");
        if (!st) st = integer(r, s, kp, "count", 0, 4096, &c->count[k]);
        if (!st) st = times(r, s, kp, &c->stage[k]);
    }
    json_t *whole = json_object_get(o, "whole");
    sub(p, path, "whole", 0);
    if (!st && !json_is_object(whole)) st = bad(r, p, "expected an object");
    if (!st) st = times(r, whole, p, &c->whole);
    if (!st && json_object_get(whole, "overhead"))
        st = median(r, whole, p, "overhead", &c->whole_overhead_ms);
    json_t *wc = json_object_get(whole, "compute");
    if (!st) st = num(r, wc, p, "p90_ms", true, &c->whole_p90_ms);
    return st;
}

static hs_status lane(struct rd *r, json_t *o, const char *path, struct hs_cost_lane *l)
{
    if (!json_is_object(o)) return bad(r, path, "expected an object");
    char status[64], p[PATH_BYTES];
    hs_status st = str(r, o, path, "model", false, l->model, sizeof l->model);
    if (!st) st = str(r, o, path, "engine", false, l->engine, sizeof l->engine);
    if (!st) st = str(r, o, path, "kind", true, l->kind, sizeof l->kind);
    if (!st) st = str(r, o, path, "dtype", true, l->dtype, sizeof l->dtype);
    if (!st) st = str(r, o, path, "status", false, status, sizeof status);
    if (!st && json_object_get(o, "device"))
        st = integer(r, o, path, "device", 0, 1 << 16, &l->device);
    if (st) return st;
    l->ok = !strcmp(status, "ok");
    if (!l->ok) return HS_STATUS_OK;
    if (json_object_get(o, "threads")) st = integer(r, o, path, "threads", 0, 1 << 16, &l->threads);
    json_t *cells = json_object_get(o, "cells");
    sub(p, path, "cells", 0);
    if (!st && !json_is_array(cells)) st = bad(r, p, "expected a list");
    if (!st && json_array_size(cells) > HS_COSTS_MAX_CELLS)
        st = bad(r, p, "more than %d cells", HS_COSTS_MAX_CELLS);
    if (!st && json_array_size(cells) == 0) st = bad(r, p, "a measured lane has no cells");
    for (size_t i = 0; !st && i < json_array_size(cells); i++) {
        char cp[PATH_BYTES];
        sub(cp, p, NULL, i);
        struct hs_cost_cell *c = &l->cells[l->n_cells];
        st = cell(r, json_array_get(cells, i), cp, c);
        for (int k = 0; !st && k < l->n_cells; k++)
            if (l->cells[k].batch == c->batch && l->cells[k].bucket == c->bucket)
                st = bad(r, cp, "shape %d x %d given twice", c->batch, c->bucket);
        l->n_cells++;
    }
    return st;
}

hs_status hs_costs_parse(const char *text, size_t len, const char *label, struct hs_costs *out,
                         struct hs_error *err)
{
    struct rd r = {.label = label ? label : "profile", .err = err};
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (strstr(je.text, "memory"))
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", r.label);
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s:%d: not JSON: %s", r.label, je.line,
                            je.text);
    }
    char fmt[32];
    int version = 0;
    hs_status st = json_is_object(root) ? HS_STATUS_OK : bad(&r, "(top level)", "not an object");
    if (!st) st = str(&r, root, "", "format", false, fmt, sizeof fmt);
    if (!st && strcmp(fmt, "hetserve-profile"))
        st = bad(&r, ".format", "'%s' is not hetserve-profile", fmt);
    if (!st) st = integer(&r, root, "", "version", 0, 1 << 20, &version);
    if (!st && version != 1)
        st = bad(&r, ".version", "version %d (this build reads version 1)", version);
    if (!st) st = str(&r, root, "", "created", true, out->created, sizeof out->created);
    if (!st) st = str(&r, root, "", "config", true, out->config, sizeof out->config);
    json_t *m = json_object_get(root, "machine");
    if (!st && json_is_object(m)) {
        double cores = 0;
        st = num(&r, m, ".machine", "cores_online", true, &cores);
        out->cores_online = cores < 1e6 ? (int)cores : 0;
        if (!st) st = num(&r, m, ".machine", "load_avg_1m_start", true, &out->load_avg_start);
        if (!st) st = num(&r, m, ".machine", "load_avg_1m_end", true, &out->load_avg_end);
    }
    json_t *lanes = json_object_get(root, "lanes");
    if (!st && !json_is_array(lanes)) st = bad(&r, ".lanes", "expected a list");
    if (!st && json_array_size(lanes) > HS_COSTS_MAX_LANES)
        st = bad(&r, ".lanes", "more than %d lanes", HS_COSTS_MAX_LANES);
    for (size_t i = 0; !st && i < json_array_size(lanes); i++) {
        char p[64];
        snprintf(p, sizeof p, "lanes[%zu]", i);
        st = lane(&r, json_array_get(lanes, i), p, &out->lanes[out->n_lanes++]);
    }
    json_decref(root);
    return st;
}

hs_status hs_costs_load(const char *path, struct hs_costs *out, struct hs_error *err)
{
    char *buf;
    size_t len;
    hs_status st = hs_read_file(path, 0, &buf, &len, err);
    if (st) return st == HS_STATUS_NOT_FOUND ? HS_STATUS_IO : st;
    st = hs_costs_parse(buf, len, path, out, err);
    hs_free(buf);
    return st;
}

const struct hs_cost_lane *hs_costs_lane(const struct hs_costs *c, const char *engine,
                                         const char *model, const char *dtype)
{
    for (int i = 0; i < c->n_lanes; i++) {
        const struct hs_cost_lane *l = &c->lanes[i];
        if (l->ok && !strcmp(l->engine, engine) && (!model || !strcmp(l->model, model)) &&
            (!dtype || !strcmp(l->dtype, dtype)))
            return l;
    }
    return NULL;
}

/* The cells interpolation reads: the measured bucket (smallest >= bucket, else the largest) and
 * in it the cells just below and above batch (lo, hi; -1 where none). */
static int pick_bucket(const struct hs_cost_lane *l, int bucket)
{
    int best = -1, largest = -1;
    for (int i = 0; i < l->n_cells; i++) {
        int b = l->cells[i].bucket;
        if (b >= bucket && (best < 0 || b < best)) best = b;
        if (b > largest) largest = b;
    }
    return best >= 0 ? best : largest;
}

static double interp_in(const struct hs_cost_lane *l, int batch, int b, void *ctx,
                        double (*value)(const struct hs_cost_cell *, void *));

/* value(cell) at batch, linear between the measured batches of bucket (see costs.h). */
static double interp(const struct hs_cost_lane *l, int batch, int bucket, void *ctx,
                     double (*value)(const struct hs_cost_cell *, void *))
{
    int b = pick_bucket(l, bucket);
    /* longer than any measured bucket: in proportion to the tokens */
    double scale = b > 0 && b < bucket ? (double)bucket / (double)b : 1.0;
    return scale * interp_in(l, batch, b, ctx, value);
}

static double interp_in(const struct hs_cost_lane *l, int batch, int b, void *ctx,
                        double (*value)(const struct hs_cost_cell *, void *))
{
    const struct hs_cost_cell *lo = NULL, *hi = NULL, *top = NULL, *below = NULL;
    for (int i = 0; i < l->n_cells; i++) {
        const struct hs_cost_cell *c = &l->cells[i];
        if (c->bucket != b) continue;
        if (c->batch <= batch && (!lo || c->batch > lo->batch)) lo = c;
        if (c->batch >= batch && (!hi || c->batch < hi->batch)) hi = c;
        if (!top || c->batch > top->batch) top = c;
    }
    if (!top) return 0;
    if (lo && hi && lo == hi) return value(lo, ctx);
    if (lo && hi) {
        double f = (double)(batch - lo->batch) / (double)(hi->batch - lo->batch);
        return value(lo, ctx) + f * (value(hi, ctx) - value(lo, ctx));
    }
    if (hi) return value(hi, ctx) * (double)batch / (double)hi->batch; /* below the smallest */
    for (int i = 0; i < l->n_cells; i++) { /* above the largest: along the last two */
        const struct hs_cost_cell *c = &l->cells[i];
        if (c->bucket == b && c != top && (!below || c->batch > below->batch)) below = c;
    }
    if (!below) return value(top, ctx) * (double)batch / (double)top->batch;
    double slope = (value(top, ctx) - value(below, ctx)) / (double)(top->batch - below->batch);
    if (slope < 0) slope = 0;
    return value(top, ctx) + slope * (double)(batch - top->batch);
}

struct kq {
    enum hs_cost_kind k;
    int field; /* 0 compute + sync, 1 copy_in, 2 copy_out */
};

static double stage_value(const struct hs_cost_cell *c, void *ctx)
{
    const struct kq *q = ctx;
    const struct hs_cost_times *t = &c->stage[q->k];
    return q->field == 0   ? t->compute_ms + t->sync_ms
           : q->field == 1 ? t->copy_in_ms
                           : t->copy_out_ms;
}

struct hs_cost_times hs_costs_stage(const struct hs_cost_lane *l, enum hs_cost_kind k, int batch,
                                    int bucket)
{
    struct hs_cost_times t = {0};
    struct kq q = {k, 0};
    t.compute_ms = interp(l, batch, bucket, &q, stage_value);
    q.field = 1;
    t.copy_in_ms = interp(l, batch, bucket, &q, stage_value);
    q.field = 2;
    t.copy_out_ms = interp(l, batch, bucket, &q, stage_value);
    return t;
}

int hs_costs_count(const struct hs_cost_lane *l, enum hs_cost_kind k)
{
    return l->n_cells ? l->cells[0].count[k] : 0;
}

static double whole_value(const struct hs_cost_cell *c, void *ctx)
{
    (void)ctx;
    return c->whole.compute_ms + c->whole.sync_ms + c->whole.copy_in_ms + c->whole.copy_out_ms +
           c->whole_overhead_ms;
}

double hs_costs_whole_ms(const struct hs_cost_lane *l, int batch, int bucket)
{
    return interp(l, batch, bucket, NULL, whole_value);
}

int hs_costs_buckets(const struct hs_cost_lane *l, int *out)
{
    int nb = 0;
    for (int i = 0; i < l->n_cells; i++) {
        int v = l->cells[i].bucket, k = 0;
        while (k < nb && out[k] < v) k++;
        if (k < nb && out[k] == v) continue;
        memmove(out + k + 1, out + k, (size_t)(nb - k) * sizeof *out);
        out[k] = v;
        nb++;
    }
    return nb;
}

struct hs_ragged_at hs_costs_ragged_at(const int *b, int nb, double len)
{
    if (nb < 2 || len >= b[nb - 1])
        return (struct hs_ragged_at){.lo = (int)ceil(len), .hi = (int)ceil(len)};
    int k = 0;
    while (k + 2 < nb && len > b[k + 1]) k++;
    return (struct hs_ragged_at){b[k], b[k + 1], (len - b[k]) / (b[k + 1] - b[k]),
                                 len < b[0] ? len / b[0] : 0};
}

double hs_costs_ragged_mix(const struct hs_ragged_at *r, double t_lo, double t_hi)
{
    if (r->hi == r->lo) return t_lo;
    double t = t_lo + r->w * (t_hi - t_lo);
    return t < t_lo * r->floor ? t_lo * r->floor : t;
}

double hs_costs_ragged(const int *b, int nb, double len, double (*at)(void *ctx, int bucket),
                       void *ctx)
{
    const struct hs_ragged_at r = hs_costs_ragged_at(b, nb, len);
    const double t0 = at(ctx, r.lo);
    return hs_costs_ragged_mix(&r, t0, r.hi == r.lo ? t0 : at(ctx, r.hi));
}
