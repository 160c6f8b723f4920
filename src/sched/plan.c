/* Placement planning from measured costs (plan.h). */
#include "sched/plan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/log.h"
#include "sched/sim.h"

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
    if (!isfinite(sum))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "traffic: the weights' sum overflows");
    for (int i = 0; i < t->n; i++) t->share[i] /= sum;
    return HS_STATUS_OK;
}

hs_status hs_traffic_parse_lines(const char *name, const char *data, size_t len, const int *buckets,
                                 int n_buckets, struct hs_traffic *t, struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    double first = 0, last = 0;
    long n = 0, lineno = 0;
    double counts[HS_TRAFFIC_MAX_LENGTHS] = {0};
    for (int i = 0; i < n_buckets && i < HS_TRAFFIC_MAX_LENGTHS; i++)
        t->tokens[t->n++] = buckets[i];
    if (t->n == 0) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: no buckets", name);
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (data + at)) : len - at;
        char line[256];
        lineno++;
        if (ll >= sizeof line)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%ld: line longer than %zu bytes",
                                name, lineno, sizeof line - 1);
        memcpy(line, data + at, ll);
        line[ll] = '\0';
        at += ll + 1;
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') continue;
        char *end, *end2;
        errno = 0;
        double ts = strtod(s, &end);
        long tok = end == s ? 0 : strtol(end, &end2, 10);
        if (end == s || !isfinite(ts) || tok < 1 || tok > 1 << 20 || end2 == end || errno) {
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s:%ld: expected '<seconds> <tokens>'", name, lineno);
        }
        while (isspace((unsigned char)*end2)) end2++;
        if (*end2)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s:%ld: expected '<seconds> <tokens>', not '%.20s' after them",
                                name, lineno, end2);
        if (n == 0 || ts < first) first = ts;
        if (n == 0 || ts > last) last = ts;
        int b = 0;
        while (b + 1 < t->n && t->tokens[b] < tok) b++;
        counts[b] += 1;
        n++;
    }
    if (n < 2 || !(last > first) || !isfinite(last - first))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s: a trace needs at least two requests at different times", name);
    t->rate_per_s = (double)(n - 1) / (last - first);
    if (!(t->rate_per_s > 0) || !isfinite(t->rate_per_s))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: the requests span no time", name);
    for (int i = 0; i < t->n; i++) t->share[i] = counts[i] / (double)n;
    return HS_STATUS_OK;
}

hs_status hs_traffic_load(const char *path, const int *buckets, int n_buckets, struct hs_traffic *t,
                          struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    char *data;
    size_t len;
    hs_status st = hs_read_file(path, 0, &data, &len, err);
    if (st) return st;
    st = hs_traffic_parse_lines(path, data, len, buckets, n_buckets, t, err);
    hs_free(data);
    return st;
}

void hs_traffic_free(struct hs_traffic *t)
{
    hs_sim_traffic_free(&t->captured);
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

static int model_layers(const struct hs_cost_lane *l)
{
    return hs_costs_count(l, HS_COST_ATTN);
}

/* Room for the segments of a split of up to PLAN_MAX_LAYERS layers (modules: four per layer);
 * deeper models get no split candidates. */
#define PLAN_MAX_LAYERS 256
#define PLAN_MAX_SEGS   (4 * PLAN_MAX_LAYERS + 4)

/* A split plan's batch of n sequences at bucket s as the executor runs it, in order: each run of
 * stages on engine a (resource 0) or b (1), with the taking engine's batch_begin and copy in at
 * its start, and between them the copy out of the giving engine (-1: it holds neither engine).
 * The first engine's executor overhead is shared among the engines' runs by their length. Their
 * sum is the batch's time; a pipelined split holds an engine for its own runs only. Returns the
 * count (at most max; 0 for a plan that is not a split). */
static int split_segments(const struct hs_plan *p, int n, int s, int *res, double *ms, int max)
{
    const struct hs_cost_lane *a = p->a, *b = p->b;
    if (p->kind != HS_PLAN_LAYERS && p->kind != HS_PLAN_MODULES) return 0;
    const int layers = model_layers(a);
    const enum hs_cost_kind last = last_kind(b);
    const double tail = cstage(b, HS_COST_POOL, n, s) +
                        hs_costs_count(b, HS_COST_NORMALIZE) * cstage(b, HS_COST_NORMALIZE, n, s);
    const double begin_a = hs_costs_stage(a, HS_COST_EMBED, n, s).copy_in_ms;
    const double begin_b = hs_costs_stage(b, HS_COST_EMBED, n, s).copy_in_ms;
    int k = 0;
#define SEG(r, t)                                                                                  \
    do {                                                                                           \
        if (k < max) res[k] = (r), ms[k] = (t);                                                    \
        k++;                                                                                       \
    } while (0)
    if (p->kind == HS_PLAN_LAYERS) {
        SEG(0, begin_a + cstage(a, HS_COST_EMBED, n, s) +
                   p->cut * (cstage(a, HS_COST_ATTN, n, s) + cstage(a, HS_COST_FFN, n, s)));
        SEG(-1, hs_costs_stage(a, HS_COST_FFN, n, s).copy_out_ms);
        SEG(1,
            begin_b + hs_costs_stage(b, HS_COST_ATTN, n, s).copy_in_ms +
                (layers - p->cut) * (cstage(b, HS_COST_ATTN, n, s) + cstage(b, HS_COST_FFN, n, s)) +
                tail);
    } else { /* modules: attention on a, FFN on b, layer by layer */
        for (int l = 0; l < layers; l++) {
            SEG(0, (l ? begin_a + hs_costs_stage(a, HS_COST_ATTN, n, s).copy_in_ms
                      : begin_a + cstage(a, HS_COST_EMBED, n, s)) +
                       cstage(a, HS_COST_ATTN, n, s));
            SEG(-1, hs_costs_stage(a, HS_COST_ATTN, n, s).copy_out_ms);
            SEG(1, begin_b + hs_costs_stage(b, HS_COST_FFN, n, s).copy_in_ms +
                       cstage(b, HS_COST_FFN, n, s) + (l + 1 == layers ? tail : 0));
            if (l + 1 < layers) SEG(-1, hs_costs_stage(b, HS_COST_FFN, n, s).copy_out_ms);
        }
    }
    SEG(-1, hs_costs_stage(b, last, n, s).copy_out_ms);
#undef SEG
    if (k > max) return 0;
    double on_engines = 0;
    for (int i = 0; i < k; i++) on_engines += res[i] >= 0 ? ms[i] : 0;
    const double ov = overhead_ms(a, n, s);
    for (int i = 0; i < k && on_engines > 0; i++)
        if (res[i] >= 0) ms[i] += ov * ms[i] / on_engines;
    return k;
}

double hs_plan_batch_ms(const struct hs_plan *p, int lane, int n, int s)
{
    if (p->kind == HS_PLAN_SINGLE) return hs_costs_whole_ms(p->a, n, s);
    if (p->kind == HS_PLAN_BUCKETS) return hs_costs_whole_ms(lane ? p->b : p->a, n, s);
    int res[PLAN_MAX_SEGS];
    double ms[PLAN_MAX_SEGS], t = 0;
    const int k = split_segments(p, n, s, res, ms, PLAN_MAX_SEGS);
    for (int i = 0; i < k; i++) t += ms[i];
    return t;
}

/* A split's time per batch on each engine (ms; [0] a, [1] b): what bounds a pipeline. */
static void split_engine_ms(const struct hs_plan *p, int n, int s, double out[2])
{
    int res[PLAN_MAX_SEGS];
    double ms[PLAN_MAX_SEGS];
    const int k = split_segments(p, n, s, res, ms, PLAN_MAX_SEGS);
    out[0] = out[1] = 0;
    for (int i = 0; i < k; i++)
        if (res[i] >= 0) out[res[i]] += ms[i];
}

/* ---------------------------------------------------------------------------------------------
 * latency: the plan's lanes simulated through the scheduler's and router's own code (sched/sim.h)
 */

struct plan_sim {
    const struct hs_plan *p;
    double tax[2];     /* per lane */
    double eng_tax[2]; /* a split's engines, a and b */
    int n_buckets;     /* the profile's measured buckets (of the plan's first engine) */
    int buckets[HS_COSTS_MAX_CELLS];
};

/* Engines that compute ragged batches (cpu): their time follows the real tokens. */
static bool ragged(const struct hs_plan *p)
{
    return !strcmp(p->a->kind, "cpu") && (!p->b || !strcmp(p->b->kind, "cpu"));
}

struct plan_at {
    const struct hs_plan *p;
    int lane, n;
};

static double plan_at(void *ctx, int bucket)
{
    const struct plan_at *a = ctx;
    return hs_plan_batch_ms(a->p, a->lane, a->n, bucket);
}

static double plan_batch_s(void *ctx, const struct hs_sched_step *b)
{
    const struct plan_sim *c = ctx;
    const int lane = c->p->kind == HS_PLAN_BUCKETS ? b->lane : 0;
    struct plan_at a = {c->p, lane, b->n_seqs};
    double ms =
        ragged(c->p) && b->n_seqs > 0
            ? hs_costs_ragged(c->buckets, c->n_buckets, (double)b->tokens / b->n_seqs, plan_at, &a)
            : hs_plan_batch_ms(c->p, lane, b->shape_batch, b->shape_seq);
    return ms / 1e3 * c->tax[lane];
}

/* A pipelined split's batch as its runs on engines a (0) and b (1) and the copies between them
 * (sim.h's batch_segments), each at the batch's real tokens on ragged engines, times the
 * serving tax of its engine (a copy: the lane's). */
static int plan_batch_segments(void *ctx, const struct hs_sched_step *b, int *res, double *s,
                               int max)
{
    const struct plan_sim *c = ctx;
    struct hs_ragged_at at = {.lo = b->shape_seq, .hi = b->shape_seq};
    int n = b->shape_batch;
    if (ragged(c->p) && b->n_seqs > 0) {
        n = b->n_seqs;
        at = hs_costs_ragged_at(c->buckets, c->n_buckets, (double)b->tokens / b->n_seqs);
    }
    int r0[PLAN_MAX_SEGS], r1[PLAN_MAX_SEGS];
    double m0[PLAN_MAX_SEGS], m1[PLAN_MAX_SEGS];
    const int k = split_segments(c->p, n, at.lo, r0, m0, PLAN_MAX_SEGS);
    if (k > max || (at.hi != at.lo && split_segments(c->p, n, at.hi, r1, m1, PLAN_MAX_SEGS) != k))
        return 0;
    for (int i = 0; i < k; i++) {
        const double t = hs_costs_ragged_mix(&at, m0[i], at.hi != at.lo ? m1[i] : m0[i]);
        res[i] = r0[i];
        s[i] = t / 1e3 * (r0[i] >= 0 ? c->eng_tax[r0[i]] : c->tax[0]);
    }
    return k;
}

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

/* The traffic as arrivals: o->sim_requests Poisson arrivals at t's rate, lengths drawn from its
 * histogram (a fixed seed), the first tenth a warm-up. */
static hs_status plan_traffic(const struct hs_traffic *t, const struct hs_plan_opts *o,
                              struct hs_sim_traffic *out)
{
    memset(out, 0, sizeof *out);
    out->n_classes = 1;
    snprintf(out->class_name[0], sizeof out->class_name[0], "all");
    const struct hs_sim_traffic *cap = &t->captured;
    if (cap->n > 0) {
        /* the capture again and again, each copy one mean gap after the one before, until
         * there are sim_requests arrivals (the capture once at least) */
        const double span = cap->a[cap->n - 1].at_s - cap->a[0].at_s;
        const double period = cap->n > 1 ? span * (double)cap->n / (double)(cap->n - 1) : 1.0;
        const size_t reps = ((size_t)o->sim_requests + cap->n - 1) / cap->n;
        out->n = (reps ? reps : 1) * cap->n;
        out->a = hs_calloc(out->n, sizeof *out->a);
        if (!out->a) return HS_STATUS_NO_MEMORY;
        for (size_t i = 0; i < out->n; i++) {
            out->a[i] = cap->a[i % cap->n]; /* tokens stay the capture's (token_store NULL) */
            out->a[i].at_s =
                cap->a[i % cap->n].at_s - cap->a[0].at_s + (double)(i / cap->n) * period;
            out->a[i].cls = 0;
            out->a[i].warmup = i < out->n / 10;
        }
        return HS_STATUS_OK;
    }
    out->n = (size_t)o->sim_requests;
    out->a = hs_calloc(out->n, sizeof *out->a);
    out->token_store = hs_calloc(out->n, sizeof *out->token_store);
    if (!out->a || !out->token_store) return HS_STATUS_NO_MEMORY;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    double at = 0;
    for (size_t i = 0; i < out->n; i++) {
        at += -log(rng_unit(&seed)) / t->rate_per_s;
        double u = rng_unit(&seed), acc = 0;
        int k = 0;
        while (k + 1 < t->n && (acc += t->share[k]) < u) k++;
        while (t->share[k] <= 0 && k > 0) k--; /* rounding at the top */
        out->token_store[i] = t->tokens[k];
        out->a[i] = (struct hs_sim_arrival){.at_s = at,
                                            .n_inputs = 1,
                                            .tokens = &out->token_store[i],
                                            .priority = HS_PRIORITY_INTERACTIVE,
                                            .warmup = i < out->n / 10};
    }
    return HS_STATUS_OK;
}

static double tax_of(const struct hs_plan_opts *o, const struct hs_cost_lane *l)
{
    for (int i = 0; l && i < o->n_tax; i++)
        if (!strcmp(o->tax_engine[i], l->engine)) return o->tax[i];
    return 1.0;
}

/* The serving tax of plan p's lane l: its engine's, or for a split lane its two engines' weighted
 * by the layers each runs (modules: every layer on both, half each). */
static double lane_tax(const struct hs_plan *p, const struct hs_plan_opts *o, int l)
{
    const double ta = tax_of(o, p->a), tb = tax_of(o, p->b);
    if (p->kind == HS_PLAN_BUCKETS) return l ? tb : ta;
    if (p->kind == HS_PLAN_LAYERS) {
        const int layers = model_layers(p->a);
        return (p->cut * ta + (layers - p->cut) * tb) / layers;
    }
    if (p->kind == HS_PLAN_MODULES) return 0.5 * (ta + tb);
    return ta;
}

/* Simulates plan p (one lane, or two with a length rule for buckets) on traffic tr with batch
 * window window_us: P50/P99 of answered requests, each lane's busy share and mean batch. A plan
 * that answers less than 99 % of its requests (the rest refused at admission or timed out) has
 * no finite latency. */
static hs_status simulate(struct hs_plan *p, const struct hs_sim_traffic *tr,
                          const struct hs_plan_opts *o, int window_us, struct hs_error *err)
{
    const int lanes = p->kind == HS_PLAN_BUCKETS ? 2 : 1;
    struct hs_lane_opts lo[2];
    struct hs_router_opts *ro = hs_calloc(1, sizeof *ro);
    if (!ro) return hs_error_set(err, HS_STATUS_NO_MEMORY, "plan: out of memory");
    struct plan_sim ps = {
        p, {lane_tax(p, o, 0), lane_tax(p, o, 1)}, {tax_of(o, p->a), tax_of(o, p->b)}, 0, {0}};
    ps.n_buckets = hs_costs_buckets(p->a, ps.buckets);
    struct hs_sim_setup su = {.n_lanes = lanes,
                              .lanes = lo,
                              .router = ro,
                              .model = "m",
                              .batch_s = plan_batch_s,
                              .batch_ctx = &ps,
                              .n_groups = lanes,
                              .overhead_ms = o->overhead_ms,
                              .default_timeout_ms = o->timeout_ms};
    if (p->pipelined) {
        su.batch_segments = plan_batch_segments;
        su.n_resources = 2;
        su.gate[0] = 1; /* a batch forms when engine a can take it (runner.gate) */
        snprintf(su.resource_name[0], sizeof su.resource_name[0], "%s", p->a->engine);
        snprintf(su.resource_name[1], sizeof su.resource_name[1], "%s", p->b->engine);
    }
    for (int l = 0; l < lanes; l++) {
        lo[l] = o->lane;
        lo[l].engine = l ? p->b->engine : p->a->engine;
        lo[l].model = "m";
        lo[l].dim = 1;
        lo[l].seq_max = o->buckets[o->n_buckets - 1];
        lo[l].batch_window_us = window_us;
        lo[l].batch_max = o->batch_max;
        if (p->tokens_max > 0) lo[l].batch_max_tokens = p->tokens_max;
        lo[l].n_buckets = o->n_buckets - 1; /* the last is seq_max, which lanes append */
        memcpy(lo[l].buckets, o->buckets, sizeof(int) * (size_t)lo[l].n_buckets);
        lo[l].n_shapes = 0;
        lo[l].slots = p->slots > 0 ? p->slots : 1;
        lo[l].runner = (struct hs_runner){0};
        snprintf(su.group_name[l], sizeof su.group_name[l], "%s", lo[l].engine);
        su.lane_group[l] = l;
        struct hs_route *r = &ro->routes[ro->n_routes++];
        snprintf(r->name, sizeof r->name, "lane%d", l);
        r->kind = HS_ROUTE_KIND_LANES;
        r->n_lanes = 1;
        r->lanes[0] = l;
        r->split_route = r->shadow_route = r->failover_route = -1;
    }
    if (lanes == 2)
        ro->rules[ro->n_rules++] =
            (struct hs_route_rule){.route = 0, .tokens_max = p->threshold, .priority = -1};
    ro->default_route = lanes - 1;
    ro->fallback_lane = -1;
    ro->breaker = (struct hs_breaker_opts){.window_requests = 20,
                                           .min_requests = 10,
                                           .error_ratio_max = 0.5,
                                           .open_ms = 5000,
                                           .half_open_probes = 1};
    struct hs_sim_result r;
    hs_status st = hs_sim_run(&su, tr, &r, err);
    hs_free(ro);
    if (st) return st;
    p->window_us = window_us;
    for (int l = 0; l < 2; l++) {
        p->busy[l] = p->pipelined ? r.resource_util[l] : l < lanes ? r.grp[l].util : 0;
        p->batch_mean[l] = l < lanes ? r.grp[l].mean_batch_seqs : 0;
    }
    hs_log(HS_LOG_DEBUG,
           "plan %s window %d us: %lld requests, %lld ok (P50 %.1f, P99 %.1f, max %.1f ms), %lld "
           "refused, %lld timed out",
           p->name, window_us, (long long)r.all.n, (long long)r.all.ok, r.all.p50_ms, r.all.p99_ms,
           r.all.max_ms, (long long)r.all.shed, (long long)r.all.timeout);
    if (r.all.n == 0 || (double)r.all.ok < 0.99 * (double)r.all.n) {
        p->p50_ms = p->p99_ms = INFINITY;
    } else {
        p->p50_ms = r.all.p50_ms;
        p->p99_ms = r.all.p99_ms;
    }
    hs_sim_result_free(&r);
    return HS_STATUS_OK;
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

/* Time of a full batch (n sequences) of `len`-token sequences on plan p's lane l, ms: out[0]
 * the lane's, or for a pipelined split each engine's runs (out[0] a, out[1] b). Ragged engines
 * (cpu) at the real length, between the measured buckets mb[0..nmb); others padded to the
 * bucket. */
static void full_batch_ms(const struct hs_plan *p, int l, const struct hs_plan_opts *o,
                          const int *mb, int nmb, int len, int n, double out[2])
{
    const int padded = o->buckets[bucket_of(o, len)];
    const struct hs_ragged_at at = ragged(p) ? hs_costs_ragged_at(mb, nmb, len)
                                             : (struct hs_ragged_at){.lo = padded, .hi = padded};
    double v[2][2] = {{0, 0}, {0, 0}};
    for (int k = 0; k < (at.hi != at.lo ? 2 : 1); k++) {
        const int S = k ? at.hi : at.lo;
        if (p->pipelined)
            split_engine_ms(p, n, S, v[k]);
        else
            v[k][0] = hs_plan_batch_ms(p, l, n, S);
    }
    for (int e = 0; e < 2; e++) out[e] = hs_costs_ragged_mix(&at, v[0][e], v[1][e]);
}

/* Predicts p at traffic t (as arrivals: tr) with batch window window_us. */
static hs_status predict(struct hs_plan *p, const struct hs_traffic *t,
                         const struct hs_sim_traffic *tr, const struct hs_plan_opts *o,
                         int window_us, struct hs_error *err)
{
    const int n = p->kind == HS_PLAN_BUCKETS ? 2 : 1;
    int mb[HS_COSTS_MAX_CELLS];
    const int nmb = hs_costs_buckets(p->a, mb);
    /* per lane: its share of the requests and ms of each engine's time per request in full
     * batches of its own lengths */
    double share[2] = {0, 0}, per[2][2] = {{0, 0}, {0, 0}};
    for (int i = 0; i < t->n; i++) {
        if (!(t->share[i] > 0)) continue;
        const int l = p->kind == HS_PLAN_BUCKETS && t->tokens[i] > p->threshold;
        /* a full batch: batch_max sequences, or fewer where the padded-token cap binds */
        const int cap = p->tokens_max > 0 ? p->tokens_max : o->lane.batch_max_tokens;
        const int padded = o->buckets[bucket_of(o, t->tokens[i])];
        int full = cap / padded < o->batch_max ? cap / padded : o->batch_max;
        if (full < 1) full = 1;
        double ms[2];
        full_batch_ms(p, l, o, mb, nmb, t->tokens[i], full, ms);
        share[l] += t->share[i];
        for (int e = 0; e < 2; e++) per[l][e] += t->share[i] * ms[e] / full;
    }
    p->window_us = window_us;
    p->capacity_rps = INFINITY;
    bool saturated = false;
    for (int l = 0; l < n; l++) {
        p->busy[l] = p->batch_mean[l] = 0;
        if (!(share[l] > 0)) continue;
        /* a pipelined split: its busier engine's */
        const double per_req =
            p->pipelined ? fmax(per[l][0] * tax_of(o, p->a), per[l][1] * tax_of(o, p->b)) / share[l]
                         : per[l][0] * lane_tax(p, o, l) / share[l];
        const double cap = per_req > 0 ? 1000.0 / per_req / share[l] : INFINITY;
        if (cap < p->capacity_rps) p->capacity_rps = cap;
        if (share[l] * t->rate_per_s * per_req / 1000.0 >= 0.98) saturated = true;
    }
    if (saturated) {
        p->busy[0] = 1;
        p->p50_ms = p->p99_ms = INFINITY;
        return HS_STATUS_OK;
    }
    return simulate(p, tr, o, window_us, err);
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
        snprintf(p->name, sizeof p->name, "layers 0-%d on %s, %d-%d on %s%s", p->cut - 1,
                 p->a->engine, p->cut, layers - 1, p->b->engine, p->pipelined ? ", pipelined" : "");
        break;
    case HS_PLAN_MODULES:
        snprintf(p->name, sizeof p->name, "attention on %s, ffn on %s%s", p->a->engine,
                 p->b->engine, p->pipelined ? ", pipelined" : "");
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
    /* lane options a caller left unset: the server's defaults */
    if (o.lane.queue_max <= 0) o.lane.queue_max = 1024;
    if (!(o.lane.shed_batch_ratio > 0)) o.lane.shed_batch_ratio = 0.75;
    if (o.lane.batch_max_tokens <= 0) o.lane.batch_max_tokens = 8192;
    if (!(o.lane.throughput_init_tokens_per_s > 0)) o.lane.throughput_init_tokens_per_s = 20000;
    if (!(o.lane.throughput_ewma_alpha > 0)) o.lane.throughput_ewma_alpha = 0.2;
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
            /* a split needs each engine's stages measured (a lane of published numbers has only
             * whole-model times) */
            if (model_layers(ls[i]) <= 0 || model_layers(ls[j]) <= 0) continue;
            if (layers > PLAN_MAX_LAYERS) continue;
            /* each split sequential (one batch in flight) and pipelined (two, each engine
             * running one at a time) */
            for (int piped = 0; piped < 2; piped++) {
                for (int c = 1; c < layers && nc < HS_PLAN_MAX; c++)
                    cand[nc++] = (struct hs_plan){.kind = HS_PLAN_LAYERS,
                                                  .a = ls[i],
                                                  .b = ls[j],
                                                  .cut = c,
                                                  .pipelined = piped,
                                                  .slots = piped ? 3 : 1,
                                                  .engines = 2};
                /* a pipelined module split's runs must fit the simulation's segments */
                if (nc < HS_PLAN_MAX && (!piped || 4 * layers + 1 <= HS_SIM_MAX_SEGMENTS))
                    cand[nc++] = (struct hs_plan){.kind = HS_PLAN_MODULES,
                                                  .a = ls[i],
                                                  .b = ls[j],
                                                  .pipelined = piped,
                                                  .slots = piped ? 3 : 1,
                                                  .engines = 2};
            }
        }
    struct hs_sim_traffic tr;
    if (plan_traffic(t, &o, &tr)) {
        hs_sim_traffic_free(&tr);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "plan: out of memory");
    }
    static const int windows_us[] = {0, 1000, 2000, 5000};
    static const int tokens_caps[] = {4096, 2048, 1024};
    hs_status st = HS_STATUS_OK;
    for (int c = 0; c < nc && !st; c++) {
        struct hs_plan best = cand[c];
        name_plan(&best, layers);
        best.tokens_max = o.lane.batch_max_tokens;
        for (size_t w = 0; w < sizeof windows_us / sizeof windows_us[0] && !st; w++) {
            struct hs_plan p = best;
            st = predict(&p, t, &tr, &o, windows_us[w], err);
            if (w == 0 || p.p99_ms < best.p99_ms) best = p;
        }
        /* then the batch sizes per bucket at that window: smaller caps on padded tokens shorten
         * the long buckets' batches (less for a short request to wait behind), the short
         * buckets' stay at batch_max */
        for (size_t k = 0; k < sizeof tokens_caps / sizeof tokens_caps[0] && !st; k++) {
            if (tokens_caps[k] >= o.lane.batch_max_tokens) continue;
            struct hs_plan p = best;
            p.tokens_max = tokens_caps[k];
            st = predict(&p, t, &tr, &o, best.window_us, err);
            if (p.p99_ms < 0.98 * best.p99_ms) best = p; /* a clear gain, else the config's */
        }
        best.meets = best.p99_ms <= o.slo_ms && best.busy[0] < 0.9 && best.busy[1] < 0.9;
        out->plans[out->n++] = best;
    }
    hs_sim_traffic_free(&tr);
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
        const bool split = p->kind == HS_PLAN_LAYERS || p->kind == HS_PLAN_MODULES;
        if (split && ((o.pipeline > 0 && !p->pipelined) || (o.pipeline < 0 && p->pipelined)))
            continue;
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
