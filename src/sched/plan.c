/* Placement planning from measured costs (plan.h). */
#include "sched/plan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

/* ---------------------------------------------------------------------------------------------
 * traffic
 */

hs_status hs_traffic_parse(const char *spec, struct hs_traffic *t, struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    const char *p = spec;
    if (strncmp(p, "rate=", 5))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "traffic: expected rate=R;TOKENS:WEIGHT,..., e.g. "
                            "rate=40;16:0.6,64:0.4, not '%.40s'",
                            spec);
    char *end;
    t->rate_per_s = strtod(p + 5, &end);
    if (end == p + 5 || !(t->rate_per_s > 0) || !isfinite(t->rate_per_s) || *end != ';')
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "traffic: rate must be a positive number followed by ';'");
    double sum = 0;
    for (p = end + 1; *p;) {
        long tok = strtol(p, &end, 10);
        if (end == p || *end != ':' || tok < 1 || tok > 1 << 20)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "traffic: expected TOKENS:WEIGHT at '%.20s'", p);
        p = end + 1;
        double w = strtod(p, &end);
        if (end == p || !(w >= 0) || !isfinite(w) || (*end && *end != ','))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "traffic: expected a weight >= 0 at '%.20s'", p);
        if (t->n == HS_TRAFFIC_MAX_LENGTHS)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT, "traffic: more than %d lengths",
                                HS_TRAFFIC_MAX_LENGTHS);
        t->tokens[t->n] = (int)tok;
        t->share[t->n++] = w;
        sum += w;
        p = *end ? end + 1 : end;
    }
    if (t->n == 0 || !(sum > 0))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "traffic: no lengths with weight");
    for (int i = 0; i < t->n; i++) t->share[i] /= sum;
    return HS_STATUS_OK;
}

hs_status hs_traffic_load(const char *path, const int *buckets, int n_buckets, struct hs_traffic *t,
                          struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "cannot open traffic trace %s", path);
    char line[256];
    double first = 0, last = 0;
    long n = 0, lineno = 0;
    double counts[HS_TRAFFIC_MAX_LENGTHS] = {0};
    for (int i = 0; i < n_buckets && i < HS_TRAFFIC_MAX_LENGTHS; i++)
        t->tokens[t->n++] = buckets[i];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') continue;
        char *end;
        double ts = strtod(s, &end);
        long tok = strtol(end, &end, 10);
        if (!isfinite(ts) || tok < 1) {
            fclose(f);
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s:%ld: expected '<seconds> <tokens>'", path, lineno);
        }
        if (n == 0 || ts < first) first = ts;
        if (n == 0 || ts > last) last = ts;
        int b = 0;
        while (b + 1 < t->n && t->tokens[b] < tok) b++;
        counts[b] += 1;
        n++;
    }
    fclose(f);
    if (n < 2 || !(last > first))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s: a trace needs at least two requests at different times", path);
    t->rate_per_s = (double)(n - 1) / (last - first);
    for (int i = 0; i < t->n; i++) t->share[i] = counts[i] / (double)n;
    return HS_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * service times
 */

static double cstage(const struct hs_cost_lane *l, enum hs_cost_kind k, int n, int s)
{
    return hs_costs_stage(l, k, n, s).compute_ms;
}

/* the kind whose output the final read takes: normalize when the model has it, else pool */
static enum hs_cost_kind last_kind(const struct hs_cost_lane *l)
{
    return hs_costs_count(l, HS_COST_NORMALIZE) > 0 ? HS_COST_NORMALIZE : HS_COST_POOL;
}

/* the executor's own time on l: its whole-model time less its stages and end copies */
static double overhead_ms(const struct hs_cost_lane *l, int n, int s)
{
    double sum = hs_costs_stage(l, HS_COST_EMBED, n, s).copy_in_ms +
                 hs_costs_stage(l, last_kind(l), n, s).copy_out_ms;
    for (int k = 0; k < HS_COST_KINDS; k++)
        sum += hs_costs_count(l, (enum hs_cost_kind)k) * cstage(l, (enum hs_cost_kind)k, n, s);
    double o = hs_costs_whole_ms(l, n, s) - sum;
    return o > 0 ? o : 0;
}

/* one hand-over from kind `from` on engine x to kind `to` on engine y */
static double handover_ms(const struct hs_cost_lane *x, enum hs_cost_kind from,
                          const struct hs_cost_lane *y, enum hs_cost_kind to, int n, int s)
{
    return hs_costs_stage(x, from, n, s).copy_out_ms +
           hs_costs_stage(y, HS_COST_EMBED, n, s).copy_in_ms +
           hs_costs_stage(y, to, n, s).copy_in_ms;
}

static int model_layers(const struct hs_cost_lane *l)
{
    return hs_costs_count(l, HS_COST_ATTN);
}

double hs_plan_batch_ms(const struct hs_plan *p, int lane, int n, int s)
{
    const struct hs_cost_lane *a = p->a, *b = p->b;
    if (p->kind == HS_PLAN_SINGLE) return hs_costs_whole_ms(a, n, s);
    if (p->kind == HS_PLAN_BUCKETS) return hs_costs_whole_ms(lane ? b : a, n, s);
    const int layers = model_layers(a);
    enum hs_cost_kind last = last_kind(b);
    double t = cstage(a, HS_COST_EMBED, n, s) + cstage(b, HS_COST_POOL, n, s) +
               hs_costs_count(b, HS_COST_NORMALIZE) * cstage(b, HS_COST_NORMALIZE, n, s) +
               hs_costs_stage(a, HS_COST_EMBED, n, s).copy_in_ms +
               hs_costs_stage(b, last, n, s).copy_out_ms + overhead_ms(a, n, s);
    if (p->kind == HS_PLAN_LAYERS) {
        t += p->cut * (cstage(a, HS_COST_ATTN, n, s) + cstage(a, HS_COST_FFN, n, s));
        t += (layers - p->cut) * (cstage(b, HS_COST_ATTN, n, s) + cstage(b, HS_COST_FFN, n, s));
        t += handover_ms(a, HS_COST_FFN, b, HS_COST_ATTN, n, s);
    } else { /* modules */
        t += layers * (cstage(a, HS_COST_ATTN, n, s) + cstage(b, HS_COST_FFN, n, s));
        t += layers * handover_ms(a, HS_COST_ATTN, b, HS_COST_FFN, n, s);
        t += (layers - 1) * handover_ms(b, HS_COST_FFN, a, HS_COST_ATTN, n, s);
    }
    return t;
}

/* ---------------------------------------------------------------------------------------------
 * the queue: a simulation of one lane's batcher
 */

struct sim_lane {
    double rate_per_s;                 /* the lane's share of the rate */
    double share[HS_PLAN_MAX_BUCKETS]; /* its lengths, by bucket (sum 1) */
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double rng_unit(uint64_t *s)
{
    return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Simulates `count` requests on lane `lane` of p; fills latencies (ms, past the warm-up) and
 * returns how many, with the busy share and mean batch. -1 when out of memory. */
static int simulate(const struct hs_plan *p, int lane, const struct sim_lane *sl,
                    const struct hs_plan_opts *o, int window_us, int count, double *lat,
                    double *busy, double *batch_mean)
{
    const int nb = o->n_buckets, bmax = o->batch_max;
    double *arr = hs_malloc(sizeof(double) * (size_t)count);
    int *bk = hs_malloc(sizeof(int) * (size_t)count);
    int *qi = hs_malloc(sizeof(int) * (size_t)count * (size_t)nb); /* per bucket: indexes */
    double *svc = hs_malloc(sizeof(double) * (size_t)nb * (size_t)(bmax + 1));
    int head[HS_PLAN_MAX_BUCKETS] = {0}, len[HS_PLAN_MAX_BUCKETS] = {0};
    if (!arr || !bk || !qi || !svc) {
        hs_free(arr), hs_free(bk), hs_free(qi), hs_free(svc);
        return -1;
    }
    for (int b = 0; b < nb; b++)
        for (int n = 1; n <= bmax; n++)
            svc[b * (bmax + 1) + n] =
                sl->share[b] > 0 ? hs_plan_batch_ms(p, lane, n, o->buckets[b]) : 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(lane + 1) * 0x100000001b3ull;
    double now = 0;
    for (int i = 0; i < count; i++) {
        now += -log(rng_unit(&seed)) / sl->rate_per_s * 1000.0;
        double u = rng_unit(&seed), acc = 0;
        int b = 0;
        while (b + 1 < nb && (acc += sl->share[b]) < u) b++;
        while (sl->share[b] <= 0 && b > 0) b--; /* rounding at the top */
        arr[i] = now;
        bk[i] = b;
        qi[(size_t)b * (size_t)count + (size_t)len[b]++] = i;
    }
    const double window_ms = window_us / 1000.0;
    double free_at = 0, busy_ms = 0;
    int n_lat = 0, warm = count / 10, batches = 0, done = 0;
    while (done < count) {
        /* the next batch: the bucket ready first once the lane is free */
        int best = -1;
        double start = 0;
        for (int b = 0; b < nb; b++) {
            if (head[b] >= len[b]) continue;
            const int *q = qi + (size_t)b * (size_t)count;
            double ready = arr[q[head[b]]] + window_ms;
            if (head[b] + bmax - 1 < len[b] && arr[q[head[b] + bmax - 1]] < ready)
                ready = arr[q[head[b] + bmax - 1]];
            double st = ready > free_at ? ready : free_at;
            if (best < 0 || st < start) best = b, start = st;
        }
        const int *q = qi + (size_t)best * (size_t)count;
        int n = 0;
        while (n < bmax && head[best] + n < len[best] && arr[q[head[best] + n]] <= start) n++;
        if (n == 0) n = 1; /* cannot happen: the oldest is at or before start */
        double t = svc[best * (bmax + 1) + n];
        double end = start + t;
        for (int k = 0; k < n; k++) {
            int i = q[head[best] + k];
            if (i >= warm) lat[n_lat++] = end - arr[i];
        }
        head[best] += n;
        done += n;
        busy_ms += t;
        batches++;
        free_at = end;
    }
    *busy = free_at > 0 ? busy_ms / free_at : 0;
    *batch_mean = batches ? (double)count / batches : 0;
    hs_free(arr), hs_free(bk), hs_free(qi), hs_free(svc);
    return n_lat;
}

/* ---------------------------------------------------------------------------------------------
 * candidates
 */

static int bucket_of(const struct hs_plan_opts *o, int tokens)
{
    int b = 0;
    while (b + 1 < o->n_buckets && o->buckets[b] < tokens) b++;
    return b;
}

/* The lanes of p: their share of the rate and lengths. */
static int plan_lanes(const struct hs_plan *p, const struct hs_traffic *t,
                      const struct hs_plan_opts *o, struct sim_lane lanes[2])
{
    memset(lanes, 0, 2 * sizeof lanes[0]);
    int n = p->kind == HS_PLAN_BUCKETS ? 2 : 1;
    for (int i = 0; i < t->n; i++) {
        int lane = p->kind == HS_PLAN_BUCKETS && t->tokens[i] > p->threshold;
        lanes[lane].share[bucket_of(o, t->tokens[i])] += t->share[i];
        lanes[lane].rate_per_s += t->share[i] * t->rate_per_s;
    }
    for (int l = 0; l < n; l++)
        for (int b = 0; b < o->n_buckets && lanes[l].rate_per_s > 0; b++)
            lanes[l].share[b] /= lanes[l].rate_per_s / t->rate_per_s;
    return n;
}

/* Predicts p at traffic t with batch window window_us. */
static hs_status predict(struct hs_plan *p, const struct hs_traffic *t,
                         const struct hs_plan_opts *o, int window_us, double *lat,
                         struct hs_error *err)
{
    struct sim_lane lanes[2];
    int n = plan_lanes(p, t, o, lanes);
    p->window_us = window_us;
    p->capacity_rps = INFINITY;
    int total = 0;
    bool saturated = false;
    for (int l = 0; l < n; l++) {
        p->busy[l] = p->batch_mean[l] = 0;
        if (lanes[l].rate_per_s <= 0) continue;
        /* ms of lane time per request in full batches, for its own mix */
        double per_req = 0;
        for (int b = 0; b < o->n_buckets; b++)
            if (lanes[l].share[b] > 0)
                per_req += lanes[l].share[b] * hs_plan_batch_ms(p, l, o->batch_max, o->buckets[b]) /
                           o->batch_max;
        double share_of_all = lanes[l].rate_per_s / t->rate_per_s;
        double cap = per_req > 0 ? 1000.0 / per_req / share_of_all : INFINITY;
        if (cap < p->capacity_rps) p->capacity_rps = cap;
        if (lanes[l].rate_per_s * per_req / 1000.0 >= 0.98) {
            saturated = true;
            p->busy[l] = 1;
            continue;
        }
        int got = simulate(p, l, &lanes[l], o, window_us, o->sim_requests, lat + total, &p->busy[l],
                           &p->batch_mean[l]);
        if (got < 0) return hs_error_set(err, HS_STATUS_NO_MEMORY, "plan: out of memory");
        total += got;
    }
    if (saturated || total == 0) {
        p->p50_ms = p->p99_ms = INFINITY;
        return HS_STATUS_OK;
    }
    qsort(lat, (size_t)total, sizeof *lat, cmp_double);
    p->p50_ms = lat[(size_t)(0.50 * (total - 1))];
    p->p99_ms = lat[(size_t)(0.99 * (total - 1))];
    return HS_STATUS_OK;
}

static void name_plan(struct hs_plan *p, int layers)
{
    switch (p->kind) {
    case HS_PLAN_SINGLE:
        snprintf(p->name, sizeof p->name, "all on %s", p->a->engine);
        break;
    case HS_PLAN_BUCKETS:
        snprintf(p->name, sizeof p->name, "<= %d tokens on %s, longer on %s", p->threshold,
                 p->a->engine, p->b->engine);
        break;
    case HS_PLAN_LAYERS:
        snprintf(p->name, sizeof p->name, "layers 0-%d on %s, %d-%d on %s", p->cut - 1,
                 p->a->engine, p->cut, layers - 1, p->b->engine);
        break;
    case HS_PLAN_MODULES:
        snprintf(p->name, sizeof p->name, "attention on %s, ffn on %s", p->a->engine, p->b->engine);
        break;
    }
}

hs_status hs_plan_make(const struct hs_costs *costs, const struct hs_traffic *t,
                       const struct hs_plan_opts *opts, struct hs_plan_result *out,
                       struct hs_error *err)
{
    struct hs_plan_opts o = *opts;
    if (o.sim_requests <= 0) o.sim_requests = 20000;
    if (o.batch_max <= 0) o.batch_max = 32;
    if (o.n_buckets <= 0 || o.n_buckets > HS_PLAN_MAX_BUCKETS)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "plan: 1..%d buckets",
                            HS_PLAN_MAX_BUCKETS);
    memset(out, 0, sizeof *out);
    out->chosen = out->best_single = -1;
    const struct hs_cost_lane *ls[HS_COSTS_MAX_LANES];
    int n = 0;
    for (int i = 0; i < costs->n_lanes; i++)
        if (costs->lanes[i].ok && costs->lanes[i].n_cells > 0 &&
            !strcmp(costs->lanes[i].model, costs->lanes[0].model))
            ls[n++] = &costs->lanes[i];
    if (n == 0) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "plan: no measured lane");
    const int layers = o.layers > 0 ? o.layers : model_layers(ls[0]);
    struct hs_plan cand[HS_PLAN_MAX];
    int nc = 0;
    for (int i = 0; i < n && nc < HS_PLAN_MAX; i++)
        cand[nc++] = (struct hs_plan){.kind = HS_PLAN_SINGLE, .a = ls[i], .engines = 1};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j || !strcmp(ls[i]->engine, ls[j]->engine)) continue;
            for (int k = 0; k + 1 < o.n_buckets && nc < HS_PLAN_MAX; k++) {
                double lo = 0;
                for (int q = 0; q < t->n; q++) lo += t->tokens[q] <= o.buckets[k] ? t->share[q] : 0;
                if (lo <= 0 || lo >= 1) continue; /* one side would get nothing */
                cand[nc++] = (struct hs_plan){.kind = HS_PLAN_BUCKETS,
                                              .a = ls[i],
                                              .b = ls[j],
                                              .threshold = o.buckets[k],
                                              .engines = 2};
            }
            if (strcmp(ls[i]->dtype, ls[j]->dtype)) continue; /* a split computes in one dtype */
            for (int c = 1; c < layers && nc < HS_PLAN_MAX; c++)
                cand[nc++] = (struct hs_plan){
                    .kind = HS_PLAN_LAYERS, .a = ls[i], .b = ls[j], .cut = c, .engines = 2};
            if (nc < HS_PLAN_MAX)
                cand[nc++] =
                    (struct hs_plan){.kind = HS_PLAN_MODULES, .a = ls[i], .b = ls[j], .engines = 2};
        }
    double *lat = hs_malloc(sizeof(double) * (size_t)o.sim_requests * 2);
    if (!lat) return hs_error_set(err, HS_STATUS_NO_MEMORY, "plan: out of memory");
    static const int windows_us[] = {0, 1000, 2000, 5000};
    hs_status st = HS_STATUS_OK;
    for (int c = 0; c < nc && !st; c++) {
        struct hs_plan best = cand[c];
        name_plan(&best, layers);
        for (size_t w = 0; w < sizeof windows_us / sizeof windows_us[0] && !st; w++) {
            struct hs_plan p = best;
            st = predict(&p, t, &o, windows_us[w], lat, err);
            if (w == 0 || p.p99_ms < best.p99_ms) best = p;
        }
        best.meets = best.p99_ms <= o.slo_ms && best.busy[0] < 0.9 && best.busy[1] < 0.9;
        out->plans[out->n++] = best;
    }
    hs_free(lat);
    if (st) return st;
    if (nc == 0 || (o.kinds && !(o.kinds & ((1u << HS_PLAN_MODULES) * 2 - 1))))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "plan: no candidate");
    for (int i = 0; i < out->n; i++) {
        const struct hs_plan *p = &out->plans[i];
        if (p->kind == HS_PLAN_SINGLE &&
            (out->best_single < 0 || p->p99_ms < out->plans[out->best_single].p99_ms ||
             (isinf(p->p99_ms) && p->capacity_rps > out->plans[out->best_single].capacity_rps)))
            out->best_single = i;
        if (o.kinds && !(o.kinds & (1u << p->kind))) continue;
        int c = out->chosen;
        const struct hs_plan *q = c >= 0 ? &out->plans[c] : NULL;
        bool better =
            !q || (p->meets && !q->meets) ||
            (p->meets == q->meets && p->meets &&
             (p->engines < q->engines || (p->engines == q->engines && p->p99_ms < q->p99_ms))) ||
            (!p->meets && !q->meets &&
             (p->p99_ms < q->p99_ms ||
              (isinf(p->p99_ms) && isinf(q->p99_ms) && p->capacity_rps > q->capacity_rps)));
        if (better) out->chosen = i;
    }
    if (out->chosen < 0)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "plan: no candidate of the kinds asked for (splits need two engines "
                            "measured in one dtype)");
    return HS_STATUS_OK;
}

int hs_plan_kind_parse(const char *s)
{
    static const char *const names[] = {"single", "buckets", "layers", "modules"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}
