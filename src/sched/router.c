#include "sched/router.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

static const char *const policy_names[] = {
#define HS__POLICY_NAME(name, text) text,
    HS_ROUTE_POLICY_TABLE(HS__POLICY_NAME)
#undef HS__POLICY_NAME
};

const char *hs_route_policy_name(enum hs_route_policy p)
{
    return (unsigned)p < HS_ROUTE_POLICY_COUNT ? policy_names[p] : "?";
}

const char *hs_breaker_state_name(enum hs_breaker_state s)
{
    switch (s) {
    case HS_BREAKER_OPEN:
        return "open";
    case HS_BREAKER_HALF_OPEN:
        return "half_open";
    default:
        return "closed";
    }
}

const double hs_router_cos_bounds[HS_ROUTER_COS_BUCKETS] = {0.9,     0.99,     0.999, 0.9999,
                                                            0.99999, 0.999999, 1.0};

struct breaker {
    char engine[64];
    enum hs_breaker_state state;
    unsigned char ring[HS_BREAKER_MAX_WINDOW]; /* 1 = failure */
    int ring_n, ring_pos, ring_fail;
    int64_t opened_ns;
    int probes_admitted, probes_ok;
    int64_t opened, closed, half_opened, failures, successes;
};

struct route_state {
    uint64_t split_n, shadow_n; /* low-discrepancy sequence positions */
    struct hs_route_stats st;
};

struct hs_router {
    struct hs_sched *s;
    struct hs_router_opts o;
    pthread_mutex_t mu;
    int n_engines;
    struct breaker br[HS_SCHED_MAX_LANES];
    int lane_engine[HS_SCHED_MAX_LANES];
    bool lane_off[HS_SCHED_MAX_LANES];               /* hs_router_set_lane_enabled */
    struct route_state rs[HS_ROUTER_MAX_ROUTES + 1]; /* [n_routes] = fallback */
    double retry_tokens;
    hs_cascade_fn cascade_fn;
    void *cascade_ctx;
};

/* ---------------------------------------------------------------------------------------------
 * creation
 */

static bool route_ref_ok(const struct hs_router_opts *o, int r, bool allow_none)
{
    return (allow_none && r == -1) || (r >= 0 && r < o->n_routes);
}

hs_status hs_router_create(struct hs_sched *s, const struct hs_router_opts *o,
                           struct hs_router **out, struct hs_error *err)
{
    *out = NULL;
    int n_lanes = hs_sched_lane_count(s);
    if (o->n_routes < 0 || o->n_routes > HS_ROUTER_MAX_ROUTES || o->n_rules < 0 ||
        o->n_rules > HS_ROUTER_MAX_RULES)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "router: too many routes or rules");
    for (int i = 0; i < o->n_routes; i++) {
        const struct hs_route *r = &o->routes[i];
        if (r->kind == HS_ROUTE_KIND_CASCADE) {
            if (!route_ref_ok(o, r->cascade_small, false) ||
                !route_ref_ok(o, r->cascade_big, false) ||
                o->routes[r->cascade_small].kind != HS_ROUTE_KIND_LANES ||
                o->routes[r->cascade_big].kind != HS_ROUTE_KIND_LANES)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "route %s: a cascade needs a small and a big route of lanes",
                                    r->name);
            continue;
        }
        if (r->n_lanes < 1 || r->n_lanes > HS_ROUTE_MAX_LANES)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "route %s: 1..%d lanes", r->name,
                                HS_ROUTE_MAX_LANES);
        const char *model = NULL;
        for (int k = 0; k < r->n_lanes; k++) {
            if (r->lanes[k] < 0 || r->lanes[k] >= n_lanes)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "route %s: bad lane %d",
                                    r->name, r->lanes[k]);
            const char *m = hs_sched_lane_opts(s, r->lanes[k])->model;
            if (model && strcmp(model, m))
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "route %s: lanes serve different models (%s, %s)", r->name,
                                    model, m);
            model = m;
        }
        int refs[3] = {r->split_route, r->shadow_route, r->failover_route};
        for (int k = 0; k < 3; k++) {
            if (!route_ref_ok(o, refs[k], true) || refs[k] == i ||
                (refs[k] >= 0 && o->routes[refs[k]].kind != HS_ROUTE_KIND_LANES))
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "route %s: split, shadow and failover must name another route "
                                    "of lanes",
                                    r->name);
        }
        if (r->split_ratio < 0 || r->split_ratio > 1 || r->shadow_ratio < 0 ||
            r->shadow_ratio > 1 || r->failover_ratio_max < 0 || r->failover_ratio_max > 1)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "route %s: ratios must be in [0, 1]", r->name);
    }
    for (int i = 0; i < o->n_rules; i++)
        if (!route_ref_ok(o, o->rules[i].route, false))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "rule %d: bad route", i);
    if (!route_ref_ok(o, o->default_route, true))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "router: bad default route");
    if (o->fallback_lane < -1 || o->fallback_lane >= n_lanes)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "router: bad fallback lane");
    const struct hs_breaker_opts *b = &o->breaker;
    if (b->window_requests < 1 || b->window_requests > HS_BREAKER_MAX_WINDOW ||
        b->min_requests < 1 || b->error_ratio_max <= 0 || b->error_ratio_max > 1 ||
        b->latency_max_ms < 0 || b->open_ms < 0 || b->half_open_probes < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "router: breaker window_requests 1..%d, min_requests >= 1, "
                            "error_ratio_max in (0, 1], half_open_probes >= 1",
                            HS_BREAKER_MAX_WINDOW);
    if (o->retry_budget_ratio < 0 || o->retry_budget_max < 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "router: negative retry budget");

    struct hs_router *rt = hs_calloc(1, sizeof *rt);
    if (!rt) return hs_error_set(err, HS_STATUS_NO_MEMORY, "router");
    rt->s = s;
    rt->o = *o;
    pthread_mutex_init(&rt->mu, NULL);
    for (int l = 0; l < n_lanes; l++) {
        const char *e = hs_sched_lane_opts(s, l)->engine;
        int k = 0;
        while (k < rt->n_engines && strcmp(rt->br[k].engine, e)) k++;
        if (k == rt->n_engines)
            snprintf(rt->br[rt->n_engines++].engine, sizeof rt->br[0].engine, "%s", e);
        rt->lane_engine[l] = k;
    }
    for (int i = 0; i <= o->n_routes; i++) rt->rs[i].st.shadow_cos_min = 1.0;
    rt->retry_tokens = o->retry_budget_max;
    *out = rt;
    return HS_STATUS_OK;
}

void hs_router_free(struct hs_router *rt)
{
    if (!rt) return;
    pthread_mutex_destroy(&rt->mu);
    hs_free(rt);
}

/* ---------------------------------------------------------------------------------------------
 * breakers (lock held)
 */

static void breaker_reset_window(struct breaker *b)
{
    b->ring_n = b->ring_pos = b->ring_fail = 0;
}

static void breaker_open(struct breaker *b, int64_t now)
{
    b->state = HS_BREAKER_OPEN;
    b->opened_ns = now;
    b->opened++;
    b->probes_admitted = b->probes_ok = 0;
    breaker_reset_window(b);
}

/* Current state; open turns half-open once open_ms passed. */
static enum hs_breaker_state breaker_state(struct hs_router *rt, struct breaker *b, int64_t now)
{
    if (b->state == HS_BREAKER_OPEN &&
        now - b->opened_ns >= (int64_t)rt->o.breaker.open_ms * 1000000) {
        b->state = HS_BREAKER_HALF_OPEN;
        b->probes_admitted = b->probes_ok = 0;
        b->half_opened++;
    }
    return b->state;
}

/* Whether the lane may take a request now; *probe: only as a half-open probe. */
static bool lane_admissible(struct hs_router *rt, int lane, int64_t now, bool *probe)
{
    struct breaker *b = &rt->br[rt->lane_engine[lane]];
    *probe = false;
    switch (breaker_state(rt, b, now)) {
    case HS_BREAKER_CLOSED:
        return true;
    case HS_BREAKER_HALF_OPEN:
        *probe = true;
        return b->probes_admitted < rt->o.breaker.half_open_probes;
    default:
        return false;
    }
}

static double breaker_reopen_s(struct hs_router *rt, int lane, int64_t now)
{
    const struct breaker *b = &rt->br[rt->lane_engine[lane]];
    if (b->state != HS_BREAKER_OPEN) return 0;
    double left = (double)(b->opened_ns + (int64_t)rt->o.breaker.open_ms * 1000000 - now) / 1e9;
    return left > 0 ? left : 0;
}

/* ---------------------------------------------------------------------------------------------
 * decisions
 */

static void reason(struct hs_route_decision *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void reason(struct hs_route_decision *d, const char *fmt, ...)
{
    size_t n = strlen(d->reason);
    if (n >= sizeof d->reason - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason + n, sizeof d->reason - n, fmt, ap);
    va_end(ap);
}

static const char *lane_engine(const struct hs_router *rt, int lane)
{
    return hs_sched_lane_opts(rt->s, lane)->engine;
}

static const char *lane_model(const struct hs_router *rt, int lane)
{
    return hs_sched_lane_opts(rt->s, lane)->model;
}

static const char *route_model(const struct hs_router *rt, int route)
{
    const struct hs_route *r = &rt->o.routes[route];
    if (r->kind == HS_ROUTE_KIND_CASCADE) r = &rt->o.routes[r->cascade_small];
    return lane_model(rt, r->lanes[0]);
}

static bool model_ok(const struct hs_router *rt, int route, const struct hs_request *req)
{
    return !req->model || !strcmp(req->model, route_model(rt, route));
}

/* Position in [0, 1) of the request for a ratio: the key's hash when given (sticky), else the
 * route's low-discrepancy sequence (spreads evenly even over few requests). */
static double ratio_point(const char *key, uint64_t *counter)
{
    if (key && *key) {
        uint64_t h = 1469598103934665603ULL;
        for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
            h ^= *p;
            h *= 1099511628211ULL;
        }
        h ^= h >> 33; /* FNV's low bits are weak: mix before scaling */
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        return (double)(h >> 11) / 9007199254740992.0;
    }
    uint64_t n = (*counter)++;
    double x = (double)n * 0.6180339887498949;
    return x - floor(x);
}

static bool rule_matches(const struct hs_route_rule *ru, const struct hs_route_query *q,
                         int longest)
{
    if (ru->tokens_min > 0 && longest < ru->tokens_min) return false;
    if (ru->tokens_max > 0 && longest > ru->tokens_max) return false;
    if (ru->task[0] && (!q->task || strcmp(ru->task, q->task))) return false;
    if (ru->priority >= 0 && (int)q->req->priority != ru->priority) return false;
    if (ru->header[0]) {
        const char *v = q->header ? q->header(q->header_ctx, ru->header) : NULL;
        if (!v) return false;
        if (ru->value[0] && strcmp(v, ru->value)) return false;
    }
    return true;
}

/* Earliest predicted completion among route's lanes that fit r and whose breaker admits it, or
 * a half-open lane's probe first (never for a shadow) (lock held; the predictions take the lane
 * locks, which never wait on the router). Returns the lane or -1; *blocked: some lane fit but
 * its breaker refused. */
static int pick_lane(struct hs_router *rt, int route, const struct hs_route_query *q, int exclude,
                     bool shadow, int64_t now, bool *blocked, bool *probe, double *pred)
{
    const struct hs_route *r = &rt->o.routes[route];
    int best = -1, probe_lane = -1;
    bool best_probe = false;
    double probe_pred = 0;
    *blocked = false;
    for (int k = 0; k < r->n_lanes; k++) {
        int l = r->lanes[k];
        if (l == exclude) continue;
        if (rt->lane_off[l]) { /* no worker behind it now: as good as blocked */
            *blocked = true;
            continue;
        }
        bool fits;
        double w = hs_sched_lane_predict(rt->s, l, q->req, &fits);
        if (!fits) continue;
        bool pr;
        if (!lane_admissible(rt, l, now, &pr)) {
            *blocked = true;
            continue;
        }
        /* A half-open lane is probed by the first request it can answer in time (or while
         * idle), even when another lane predicts earlier: a lane whose estimate went pessimistic
         * while it was away (a frozen worker's late answers) would otherwise never be probed and
         * stay half-open for good. */
        if (pr && !shadow && probe_lane < 0 &&
            (now + (int64_t)(w * 1e9) <= q->req->deadline_ns || hs_sched_lane_idle(rt->s, l))) {
            probe_lane = l;
            probe_pred = w;
        }
        /* A closed lane wins over a probe at equal cost: probes are for testing, not load. */
        if (best < 0 || w < *pred || (w == *pred && best_probe && !pr)) {
            best = l;
            *pred = w;
            best_probe = pr;
        }
    }
    if (probe_lane >= 0) {
        *pred = probe_pred;
        *probe = true;
        return probe_lane;
    }
    *probe = best_probe;
    return best;
}

/* Commits a lane choice (lock held): probe accounting and counters. */
static void commit(struct hs_router *rt, struct hs_route_decision *d, int route, int lane,
                   bool probe, double pred, enum hs_route_policy policy)
{
    d->status = HS_STATUS_OK;
    d->route = route;
    d->lane = lane;
    d->probe = probe;
    d->predicted_s = pred;
    d->policy = policy == HS_ROUTE_POLICY_DEFAULT || policy == HS_ROUTE_POLICY_RULE ||
                        policy == HS_ROUTE_POLICY_SPLIT
                    ? (probe ? HS_ROUTE_POLICY_PROBE : policy)
                    : policy;
    if (probe) rt->br[rt->lane_engine[lane]].probes_admitted++;
    struct route_state *rs = &rt->rs[route < 0 ? rt->o.n_routes : route];
    rs->st.routed[lane][d->policy]++;
    reason(d, "%s%s on %s (predicted %.1f ms)", d->reason[0] ? "; " : "",
           route < 0 ? "fallback" : rt->o.routes[route].name, lane_engine(rt, lane), pred * 1e3);
}

static void reject(struct hs_router *rt, struct hs_route_decision *d, int route, hs_status st,
                   double retry_s, const char *what)
{
    d->status = st;
    d->lane = -1;
    d->route = route;
    d->retry_after_s = retry_s;
    if (st == HS_STATUS_OVERLOADED) rt->rs[route < 0 ? rt->o.n_routes : route].st.shed++;
    reason(d, "%s%s", d->reason[0] ? "; " : "", what);
}

/* Single-engine fallback (lock held): the fallback lane when it serves the model, else the
 * model's first lane; breakers ignored. */
static void fallback(struct hs_router *rt, const struct hs_route_query *q,
                     struct hs_route_decision *d, const char *why)
{
    int n = hs_sched_lane_count(rt->s);
    int lane = -1;
    int fl = rt->o.fallback_lane;
    if (fl >= 0 && (!q->req->model || !strcmp(q->req->model, lane_model(rt, fl)))) lane = fl;
    for (int l = 0; l < n && lane < 0; l++)
        if (!q->req->model || !strcmp(q->req->model, lane_model(rt, l))) lane = l;
    reason(d, "%s%s", d->reason[0] ? "; " : "", why);
    if (lane < 0) {
        reject(rt, d, -1, HS_STATUS_NOT_FOUND, 0, "no engine serves the model");
        return;
    }
    commit(rt, d, -1, lane, false, hs_sched_lane_predict(rt->s, lane, q->req, NULL),
           HS_ROUTE_POLICY_FALLBACK);
}

static void decide_shadow(struct hs_router *rt, const struct hs_route_query *q, int route,
                          int exclude, int64_t now, struct hs_route_decision *d)
{
    const struct hs_route *r = &rt->o.routes[route];
    if (r->shadow_route < 0 || r->shadow_ratio <= 0) return;
    if (ratio_point(NULL, &rt->rs[route].shadow_n) >= r->shadow_ratio) return;
    bool blocked, probe;
    double pred = 0;
    /* A shadow never probes a breaker nor displaces real work: closed lanes only. */
    int lane = pick_lane(rt, r->shadow_route, q, exclude, true, now, &blocked, &probe, &pred);
    if (lane < 0 || probe) return;
    d->shadow_route = r->shadow_route;
    d->shadow_lane = lane;
    rt->rs[route].st.shadow_sent++;
}

/* Places the request on route (lock held), with failover when its lanes are blocked. */
static void place(struct hs_router *rt, const struct hs_route_query *q, int route,
                  enum hs_route_policy policy, int64_t now, struct hs_route_decision *d)
{
    const struct hs_route *r = &rt->o.routes[route];
    bool blocked, probe;
    double pred = 0;
    int lane = pick_lane(rt, route, q, -1, false, now, &blocked, &probe, &pred);
    if (lane < 0 && !blocked) {
        fallback(rt, q, d, "no lane of the route fits the request");
        return;
    }
    if (lane < 0) {
        struct route_state *rs = &rt->rs[route];
        rs->st.blocked++;
        double reopen = breaker_reopen_s(rt, r->lanes[0], now);
        if (r->failover_route < 0) {
            reject(rt, d, route, HS_STATUS_OVERLOADED, reopen,
                   "every engine of the route has an open circuit breaker");
            return;
        }
        /* The cap: failed over <= ratio_max x blocked requests, checked before counting. */
        if ((double)(rs->st.failed_over + 1) > r->failover_ratio_max * (double)rs->st.blocked) {
            reject(rt, d, route, HS_STATUS_OVERLOADED, reopen,
                   "engine breaker open and the failover cap is reached");
            return;
        }
        lane = pick_lane(rt, r->failover_route, q, -1, false, now, &blocked, &probe, &pred);
        if (lane < 0) {
            reject(rt, d, route, HS_STATUS_OVERLOADED, reopen,
                   "engine breaker open and the failover route cannot take it");
            return;
        }
        rs->st.failed_over++;
        reason(d, "%sbreaker open on %s: failover", d->reason[0] ? "; " : "", r->name);
        route = r->failover_route;
        policy = HS_ROUTE_POLICY_FAILOVER;
    }
    int64_t left = q->req->deadline_ns - now;
    /* as the scheduler's admission: an idle lane takes what fits, so that a prediction gone
     * wrong is corrected by a measurement instead of refusing forever */
    if ((double)left < pred * 1e9 && (left <= 0 || !hs_sched_lane_idle(rt->s, lane))) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "predicted completion %.0f ms on %s exceeds the deadline (%.0f "
                 "ms left)",
                 pred * 1e3, lane_engine(rt, lane), (double)left / 1e6);
        double drain = hs_sched_lane_drain_s(rt->s, lane);
        reject(rt, d, route, HS_STATUS_OVERLOADED, drain > pred ? drain : pred, msg);
        return;
    }
    commit(rt, d, route, lane, probe, pred, policy);
    decide_shadow(rt, q, route, lane, now, d);
}

static void decision_init(struct hs_route_decision *d)
{
    memset(d, 0, sizeof *d);
    d->route = d->lane = d->rule = d->cascade_route = d->shadow_route = d->shadow_lane = -1;
}

void hs_router_decide(struct hs_router *rt, const struct hs_route_query *q, int64_t now,
                      struct hs_route_decision *d)
{
    decision_init(d);
    const struct hs_request *req = q->req;
    int longest = 0;
    for (int i = 0; i < req->n_seqs; i++)
        if (req->seqs[i].n_tokens > longest) longest = req->seqs[i].n_tokens;

    pthread_mutex_lock(&rt->mu);
    rt->retry_tokens += rt->o.retry_budget_ratio;
    if (rt->retry_tokens > rt->o.retry_budget_max) rt->retry_tokens = rt->o.retry_budget_max;

    int route = -1;
    enum hs_route_policy policy = HS_ROUTE_POLICY_DEFAULT;
    for (int i = 0; i < rt->o.n_rules && route < 0; i++) {
        const struct hs_route_rule *ru = &rt->o.rules[i];
        if (!model_ok(rt, ru->route, req) || !rule_matches(ru, q, longest)) continue;
        route = ru->route;
        d->rule = i;
        policy = HS_ROUTE_POLICY_RULE;
        reason(d, "rule %d -> %s", i, rt->o.routes[route].name);
    }
    if (route < 0 && rt->o.default_route >= 0 && model_ok(rt, rt->o.default_route, req)) {
        route = rt->o.default_route;
        reason(d, "default -> %s", rt->o.routes[route].name);
    }
    if (route < 0) {
        fallback(rt, q, d, "no route serves the request");
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    if (rt->o.routes[route].kind == HS_ROUTE_KIND_CASCADE) {
        d->cascade_route = route;
        rt->rs[route].st.cascades++;
        route = rt->o.routes[route].cascade_small;
        reason(d, "; cascade small -> %s", rt->o.routes[route].name);
    }
    const struct hs_route *r = &rt->o.routes[route];
    if (r->split_route >= 0 && r->split_ratio > 0 &&
        ratio_point(q->key, &rt->rs[route].split_n) < r->split_ratio) {
        reason(d, "; split %.0f%% -> %s", r->split_ratio * 100, rt->o.routes[r->split_route].name);
        route = r->split_route;
        policy = HS_ROUTE_POLICY_SPLIT;
    }
    place(rt, q, route, policy, now, d);
    pthread_mutex_unlock(&rt->mu);
}

void hs_router_retry(struct hs_router *rt, const struct hs_route_query *q,
                     const struct hs_route_decision *prev, int64_t now, struct hs_route_decision *d)
{
    decision_init(d);
    d->cascade_route = prev->cascade_route;
    pthread_mutex_lock(&rt->mu);
    int from = prev->route;
    struct route_state *rs = &rt->rs[from < 0 ? rt->o.n_routes : from];
    snprintf(d->reason, sizeof d->reason, "retry after engine %s failed",
             prev->lane >= 0 ? lane_engine(rt, prev->lane) : "?");
    if (rt->retry_tokens < 1.0) {
        rs->st.retries_denied++;
        reject(rt, d, from, HS_STATUS_OVERLOADED, 0, "retry budget exhausted");
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    bool blocked, probe;
    double pred = 0;
    int route = from, lane = -1;
    if (from >= 0) {
        lane = pick_lane(rt, from, q, prev->lane, false, now, &blocked, &probe, &pred);
        int fo = rt->o.routes[from].failover_route;
        if ((lane < 0 || probe) && fo >= 0) {
            route = fo;
            lane = pick_lane(rt, fo, q, prev->lane, false, now, &blocked, &probe, &pred);
        }
    }
    /* A retry goes to a healthy engine only: never a probe, never past the deadline. */
    if (lane < 0 || probe || (double)(q->req->deadline_ns - now) < pred * 1e9) {
        rs->st.retries_denied++;
        d->status = HS_STATUS_NOT_FOUND;
        d->lane = -1;
        reason(d, "; no other engine can take it in time");
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    rt->retry_tokens -= 1.0;
    rs->st.retries++;
    commit(rt, d, route, lane, false, pred, HS_ROUTE_POLICY_RETRY);
    pthread_mutex_unlock(&rt->mu);
}

void hs_router_escalate(struct hs_router *rt, const struct hs_route_query *q,
                        const struct hs_route_decision *prev, int64_t now,
                        struct hs_route_decision *d)
{
    decision_init(d);
    int c = prev->cascade_route;
    if (c < 0 || c >= rt->o.n_routes || rt->o.routes[c].kind != HS_ROUTE_KIND_CASCADE) {
        d->status = HS_STATUS_INVALID_ARGUMENT;
        snprintf(d->reason, sizeof d->reason, "not a cascade decision");
        return;
    }
    pthread_mutex_lock(&rt->mu);
    const struct hs_route *cr = &rt->o.routes[c];
    struct route_state *rs = &rt->rs[c];
    d->cascade_route = c;
    snprintf(d->reason, sizeof d->reason, "cascade %s escalates", cr->name);
    bool blocked, probe;
    double pred = 0;
    int lane = pick_lane(rt, cr->cascade_big, q, -1, false, now, &blocked, &probe, &pred);
    if (lane < 0) {
        /* The judge counted these inputs as escalated; they stay small after all. */
        rs->st.escalated -= q->req->n_seqs;
        rs->st.escalations_denied += q->req->n_seqs;
        reject(rt, d, c, HS_STATUS_OVERLOADED, 0, "the big route cannot take it");
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    commit(rt, d, cr->cascade_big, lane, probe, pred, HS_ROUTE_POLICY_ESCALATE);
    pthread_mutex_unlock(&rt->mu);
}

hs_status hs_router_judge(struct hs_router *rt, const struct hs_route_decision *prev,
                          const float *rows, int n, int dim, enum hs_cascade_decision *out)
{
    pthread_mutex_lock(&rt->mu);
    hs_cascade_fn fn = rt->cascade_fn;
    void *ctx = rt->cascade_ctx;
    int c = prev->cascade_route;
    if (c >= rt->o.n_routes || (c >= 0 && rt->o.routes[c].kind != HS_ROUTE_KIND_CASCADE)) c = -1;
    pthread_mutex_unlock(&rt->mu);
    if (!fn) return HS_STATUS_NOT_FOUND;
    /* The judge takes its own policy's lock: never call it under the router's. */
    fn(ctx, c >= 0 ? &rt->o.routes[c] : NULL, rows, n, dim, out);
    if (c < 0) return HS_STATUS_OK;
    int64_t escalated = 0, capped = 0;
    for (int i = 0; i < n; i++) {
        escalated += out[i] == HS_CASCADE_BIG;
        capped += out[i] == HS_CASCADE_CAPPED;
    }
    pthread_mutex_lock(&rt->mu);
    rt->rs[c].st.escalated += escalated;
    rt->rs[c].st.escalations_denied += capped;
    pthread_mutex_unlock(&rt->mu);
    return HS_STATUS_OK;
}

void hs_router_set_cascade_fn(struct hs_router *rt, hs_cascade_fn fn, void *ctx)
{
    pthread_mutex_lock(&rt->mu);
    rt->cascade_fn = fn;
    rt->cascade_ctx = ctx;
    pthread_mutex_unlock(&rt->mu);
}

hs_cascade_fn hs_router_cascade_fn(struct hs_router *rt, void **ctx)
{
    pthread_mutex_lock(&rt->mu);
    hs_cascade_fn fn = rt->cascade_fn;
    if (ctx) *ctx = rt->cascade_ctx;
    pthread_mutex_unlock(&rt->mu);
    return fn;
}

/* ---------------------------------------------------------------------------------------------
 * outcomes
 */

void hs_router_on_result(struct hs_router *rt, int lane, bool probe, hs_status status,
                         int64_t batch_ns, bool in_batch_timeout, int64_t now)
{
    if (lane < 0 || lane >= hs_sched_lane_count(rt->s)) return;
    bool failure;
    if (status == HS_STATUS_ENGINE || (status == HS_STATUS_TIMEOUT && in_batch_timeout))
        failure = true;
    else if (status == HS_STATUS_OK)
        failure = rt->o.breaker.latency_max_ms > 0 &&
                  batch_ns > (int64_t)rt->o.breaker.latency_max_ms * 1000000;
    else
        failure = false; /* overload, queue timeout, shutdown: not the engine's doing */
    bool counts = status == HS_STATUS_OK || failure;

    pthread_mutex_lock(&rt->mu);
    struct breaker *b = &rt->br[rt->lane_engine[lane]];
    enum hs_breaker_state state = breaker_state(rt, b, now);
    if (!counts) {
        /* A probe that never reached the engine gives its place back. */
        if (probe && state == HS_BREAKER_HALF_OPEN && b->probes_admitted > 0) b->probes_admitted--;
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    if (failure)
        b->failures++;
    else
        b->successes++;
    if (state == HS_BREAKER_CLOSED) {
        const struct hs_breaker_opts *o = &rt->o.breaker;
        int w = o->window_requests;
        if (b->ring_n == w) {
            b->ring_fail -= b->ring[b->ring_pos];
        } else {
            b->ring_n++;
        }
        b->ring[b->ring_pos] = failure;
        b->ring_fail += failure;
        b->ring_pos = (b->ring_pos + 1) % w;
        if (b->ring_n >= o->min_requests &&
            (double)b->ring_fail >= o->error_ratio_max * (double)b->ring_n)
            breaker_open(b, now);
    } else if (state == HS_BREAKER_HALF_OPEN && probe) {
        if (failure) {
            breaker_open(b, now);
        } else if (++b->probes_ok >= rt->o.breaker.half_open_probes) {
            b->state = HS_BREAKER_CLOSED;
            b->closed++;
            breaker_reset_window(b);
        }
    }
    /* Open, or a straggler in half-open: the engine's next verdict comes from probes. */
    pthread_mutex_unlock(&rt->mu);
}

void hs_router_on_shadow(struct hs_router *rt, int route, bool ok, const double *cos, int n)
{
    if (route < 0 || route >= rt->o.n_routes) return;
    pthread_mutex_lock(&rt->mu);
    struct hs_route_stats *st = &rt->rs[route].st;
    if (!ok) st->shadow_failed++;
    for (int i = 0; ok && i < n; i++) {
        double c = cos[i];
        st->shadow_compared++;
        st->shadow_cos_sum += c;
        if (c < st->shadow_cos_min) st->shadow_cos_min = c;
        int k = 0;
        while (k < HS_ROUTER_COS_BUCKETS && c > hs_router_cos_bounds[k]) k++;
        st->shadow_cos_hist[k]++;
    }
    pthread_mutex_unlock(&rt->mu);
}

/* ---------------------------------------------------------------------------------------------
 * introspection
 */

void hs_router_set_lane_enabled(struct hs_router *rt, int lane, bool enabled)
{
    if (lane < 0 || lane >= HS_SCHED_MAX_LANES) return;
    pthread_mutex_lock(&rt->mu);
    rt->lane_off[lane] = !enabled;
    pthread_mutex_unlock(&rt->mu);
}

const struct hs_router_opts *hs_router_opts(const struct hs_router *rt)
{
    return &rt->o;
}

int hs_router_route_count(const struct hs_router *rt)
{
    return rt->o.n_routes;
}

const char *hs_router_route_name(const struct hs_router *rt, int route)
{
    return route >= 0 && route < rt->o.n_routes ? rt->o.routes[route].name : "fallback";
}

int hs_router_find_route(const struct hs_router *rt, const char *name)
{
    for (int i = 0; i < rt->o.n_routes; i++)
        if (!strcmp(rt->o.routes[i].name, name)) return i;
    return -1;
}

void hs_router_route_stats(struct hs_router *rt, int route, struct hs_route_stats *out)
{
    if (route < 0 || route >= rt->o.n_routes) route = rt->o.n_routes;
    pthread_mutex_lock(&rt->mu);
    *out = rt->rs[route].st;
    pthread_mutex_unlock(&rt->mu);
}

void hs_router_fallback_stats(struct hs_router *rt, struct hs_route_stats *out)
{
    hs_router_route_stats(rt, -1, out);
}

int hs_router_engine_count(const struct hs_router *rt)
{
    return rt->n_engines;
}

void hs_router_breaker_stats(struct hs_router *rt, int engine, int64_t now,
                             struct hs_breaker_stats *out)
{
    memset(out, 0, sizeof *out);
    if (engine < 0 || engine >= rt->n_engines) return;
    pthread_mutex_lock(&rt->mu);
    struct breaker *b = &rt->br[engine];
    snprintf(out->engine, sizeof out->engine, "%s", b->engine);
    out->state = breaker_state(rt, b, now);
    out->opened = b->opened;
    out->closed = b->closed;
    out->half_opened = b->half_opened;
    out->failures = b->failures;
    out->successes = b->successes;
    pthread_mutex_unlock(&rt->mu);
}
