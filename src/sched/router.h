/* hetserve — the router: which engine lane serves a request, and why.
 *
 * Routes. A route is a set of lanes (one model resident on one or more engines). A request that
 * takes a route goes to the route's lane with the earliest predicted completion
 * (hs_sched_lane_predict: queued work + running batches + its own work, from the per-bucket
 * service-time model learned online); when even that lane would finish after the request's
 * deadline, the request is rejected at admission (HS_STATUS_OVERLOADED with a retry time).
 * A route may also carry:
 *   split     a share of its traffic goes to another route (A/B, canary): sticky by the
 *             request's key when it has one (hash of the key), else spread evenly;
 *   shadow    a sampled share is copied to another route; the copy's result is discarded and
 *             only compared (cosine) with the answer: live cross-engine numerical checking;
 *   failover  when every lane of the route is blocked by an open breaker, its traffic may go to
 *             another route, but at most ratio_max of it (failed over <= ratio_max x requests
 *             that found the route blocked, at all times); the rest is rejected, so a healthy
 *             engine never receives an avalanche.
 * A route of kind HS_ROUTE_KIND_CASCADE names a small and a big route: decide() sends the
 * request to the small route and marks the decision with the cascade. Judging the small result
 * is not the router's: the predict path registers the judge (hs_router_set_cascade_fn), which
 * applies its classification head and the one cascade policy, sched/cascade.h (threshold and
 * running escalation cap, configured by the config's cascade section). hs_router_judge runs
 * the judge on a request's small result and counts its decisions on the cascade route;
 * hs_router_escalate then places the escalated inputs on the big route. Endpoints without a
 * judgement simply keep the small route's answer.
 *
 * Rules. An ordered list; the first rule whose conditions all hold (longest sequence within
 * [tokens_min, tokens_max], task, priority, a request header's value, model) names the route;
 * else the default route. Rules naming a route of another model than the request's are skipped.
 *
 * Protection. One circuit breaker per engine, fed with request outcomes
 * (hs_router_on_result): engine errors, timeouts inside a batch that overran twice its predicted
 * time and batches slower than latency_max_ms are failures. Closed -> open when, over the last
 * window_requests outcomes (at least min_requests), the failure share reaches error_ratio_max; open
 * -> half- open after open_ms; half-open admits half_open_probes probe requests (a half-open
 * lane takes the first requests it can answer within their deadline, even where another lane
 * predicts earlier: its estimate may have gone pessimistic while it was away): all succeed ->
 * closed, one fails -> open again. Retries (a request that failed with an engine error, sent once
 * more to another lane or the failover route) draw from a budget: every routed request deposits
 * budget_ratio tokens up to budget_max, a retry takes one; without a token, no retry. When
 * routing itself fails (no route serves the model, no lane fits the request), the single-engine
 * fallback serves it: the fallback lane (or the model's first lane), breakers ignored.
 *
 * Every decision records its route, lane, policy and a one-line reason for responses, metrics
 * and traces. Thread-safe: one mutex guards the router's state; decide() reads lane predictions
 * (lane locks) under it, which is safe because the scheduler never calls out while holding a
 * lane lock.
 */
#ifndef HS_SCHED_ROUTER_H
#define HS_SCHED_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/cascade.h"
#include "sched/request.h"
#include "sched/sched.h"

#define HS_ROUTER_MAX_ROUTES  16
#define HS_ROUTER_MAX_RULES   32
#define HS_ROUTE_MAX_LANES    32
#define HS_BREAKER_MAX_WINDOW 256

enum hs_route_kind {
    HS_ROUTE_KIND_LANES,   /* earliest predicted completion among its lanes */
    HS_ROUTE_KIND_CASCADE, /* small route first, big route when the judge escalates */
};

/* Why a request went where it went. */
#define HS_ROUTE_POLICY_TABLE(X)                                                                   \
    X(DEFAULT, "default")   /* no rule matched: the default route */                               \
    X(RULE, "rule")         /* a rule matched */                                                   \
    X(SPLIT, "split")       /* the route's split sent it to the other route */                     \
    X(FAILOVER, "failover") /* the route's engines were blocked by open breakers */                \
    X(PROBE, "probe")       /* a half-open breaker's probe */                                      \
    X(RETRY, "retry")       /* sent again after an engine failure */                               \
    X(ESCALATE, "escalate") /* a cascade's big route */                                            \
    X(FALLBACK, "fallback") /* routing failed: the single-engine fallback */

enum hs_route_policy {
#define HS__POLICY_ENUM(name, text) HS_ROUTE_POLICY_##name,
    HS_ROUTE_POLICY_TABLE(HS__POLICY_ENUM)
#undef HS__POLICY_ENUM
        HS_ROUTE_POLICY_COUNT
};

const char *hs_route_policy_name(enum hs_route_policy p);

enum hs_breaker_state {
    HS_BREAKER_CLOSED,
    HS_BREAKER_OPEN,
    HS_BREAKER_HALF_OPEN,
};

const char *hs_breaker_state_name(enum hs_breaker_state s);

struct hs_route {
    char name[32];
    enum hs_route_kind kind;
    int n_lanes; /* HS_ROUTE_KIND_LANES: scheduler lanes, all of one model */
    int lanes[HS_ROUTE_MAX_LANES];
    int split_route;    /* -1 = none */
    double split_ratio; /* share of traffic sent to split_route, [0, 1] */
    int shadow_route;   /* -1 = none */
    double shadow_ratio;
    int failover_route; /* -1 = none */
    double failover_ratio_max;
    /* HS_ROUTE_KIND_CASCADE: routes of its two stages (threshold and cap: the judge's) */
    int cascade_small, cascade_big;
};

struct hs_route_rule {
    int route;
    int tokens_min, tokens_max; /* on the longest sequence; 0 = unbounded */
    char task[32];              /* "" = any ("embeddings", "embed", "predict") */
    int priority;               /* -1 = any */
    char header[64];            /* "" = no header condition */
    char value[128];            /* the header's value; "" = merely present */
};

struct hs_breaker_opts {
    int window_requests;    /* outcomes remembered (<= HS_BREAKER_MAX_WINDOW) */
    int min_requests;       /* outcomes needed before the breaker may open */
    double error_ratio_max; /* failure share that opens it */
    int latency_max_ms;     /* a batch slower than this is a failure; 0 = off */
    int open_ms;            /* open -> half-open */
    int half_open_probes;   /* probes admitted in half-open; all must succeed to close */
};

struct hs_router_opts {
    int n_routes;
    struct hs_route routes[HS_ROUTER_MAX_ROUTES];
    int n_rules;
    struct hs_route_rule rules[HS_ROUTER_MAX_RULES];
    int default_route; /* -1 = none: requests no rule takes use the fallback */
    int fallback_lane; /* -1 = the first lane serving the request's model */
    struct hs_breaker_opts breaker;
    double retry_budget_ratio; /* tokens deposited per routed request */
    double retry_budget_max;   /* bucket size (and initial fill) */
};

/* What the router looks at. */
struct hs_route_query {
    const struct hs_request *req; /* seqs (n_tokens), priority, deadline_ns, model */
    const char *task;             /* endpoint family, e.g. "embeddings" */
    const char *key;              /* sticky key (client request id); NULL = none */
    /* (optional) value of a request header, NULL when absent */
    const char *(*header)(void *ctx, const char *name);
    void *header_ctx;
};

struct hs_route_decision {
    hs_status status;     /* OK, or why rejected (OVERLOADED, NOT_FOUND, TOO_LONG) */
    double retry_after_s; /* for OVERLOADED */
    int route;            /* route taken; -1 = fallback */
    int lane;             /* lane to submit to; -1 when rejected */
    enum hs_route_policy policy;
    int rule;           /* matching rule, -1 = none */
    bool probe;         /* admitted as a half-open probe: report its outcome */
    double predicted_s; /* predicted completion on lane */
    int cascade_route;  /* the cascade route it came through, -1 = none */
    int shadow_route;   /* -1 = no shadow copy */
    int shadow_lane;
    char reason[256];
};

/* Judges a request's small result (set by the predict path): out[i] receives the decision for
 * input i (sched/cascade.h: small, big = escalate, capped). rows: [n, dim] outputs of the small
 * stage; cascade: the cascade route the request came through, NULL when none. Called without
 * router locks held, from the thread that calls hs_router_judge. */
typedef void (*hs_cascade_fn)(void *ctx, const struct hs_route *cascade, const float *rows, int n,
                              int dim, enum hs_cascade_decision *out);

struct hs_route_stats {
    int64_t routed[HS_SCHED_MAX_LANES][HS_ROUTE_POLICY_COUNT];
    int64_t shed;        /* rejected by the router (429) */
    int64_t blocked;     /* requests that found every lane behind an open breaker */
    int64_t failed_over; /* of those, sent to the failover route */
    int64_t retries, retries_denied;
    int64_t cascades;           /* requests routed through the cascade (to its small route) */
    int64_t escalated;          /* inputs the judge escalated */
    int64_t escalations_denied; /* inputs kept small by the cap, or the big route refused */
    int64_t shadow_sent, shadow_failed, shadow_compared; /* compared: sequences */
    double shadow_cos_min, shadow_cos_sum;
#define HS_ROUTER_COS_BUCKETS 7
    int64_t shadow_cos_hist[HS_ROUTER_COS_BUCKETS + 1]; /* cumulative counts, see bounds */
};

/* Upper bounds of the shadow cosine histogram buckets (fixed by the metrics schema). */
extern const double hs_router_cos_bounds[HS_ROUTER_COS_BUCKETS];

struct hs_breaker_stats {
    char engine[64];
    enum hs_breaker_state state;
    int64_t opened, closed, half_opened; /* transitions */
    int64_t failures, successes;
};

struct hs_router;

/* Checks the options against s (lane indexes, route references, ratios) and builds the router.
 * HS_STATUS_INVALID_ARGUMENT names the fault. s must outlive the router. */
hs_status hs_router_create(struct hs_sched *s, const struct hs_router_opts *o,
                           struct hs_router **out, struct hs_error *err);
void hs_router_free(struct hs_router *rt);

/* Decides where q->req goes (it is not submitted). Always fills d; d->status OK means submit
 * to d->lane. now_ns: the clock breakers are judged by (hs_now_ns in production). */
void hs_router_decide(struct hs_router *rt, const struct hs_route_query *q, int64_t now_ns,
                      struct hs_route_decision *d);
/* After an engine failure of the request decided by prev: a decision for one more try on
 * another lane (same route, else its failover route) when the retry budget has a token.
 * d->status is OVERLOADED (budget) or NOT_FOUND (nowhere else) when it may not. */
void hs_router_retry(struct hs_router *rt, const struct hs_route_query *q,
                     const struct hs_route_decision *prev, int64_t now_ns,
                     struct hs_route_decision *d);
/* Runs the registered judge on the small result (rows [n, dim]) of the request decided by prev,
 * filling out[n], and counts escalated and capped inputs on prev's cascade route (when it came
 * through one). HS_STATUS_NOT_FOUND (out untouched) when no judge is registered. */
hs_status hs_router_judge(struct hs_router *rt, const struct hs_route_decision *prev,
                          const float *rows, int n, int dim, enum hs_cascade_decision *out);
/* For a decision that came through a cascade: a decision on its big route for q (the
 * escalated inputs, prepared for the big route's model). d->status OVERLOADED when the big
 * route cannot take them (every lane blocked or none fits); INVALID_ARGUMENT when prev did not
 * come through a cascade. The escalation cap is the judge's, applied before. */
void hs_router_escalate(struct hs_router *rt, const struct hs_route_query *q,
                        const struct hs_route_decision *prev, int64_t now_ns,
                        struct hs_route_decision *d);
void hs_router_set_cascade_fn(struct hs_router *rt, hs_cascade_fn fn, void *ctx);
/* The registered judge (NULL when none) and its ctx. */
hs_cascade_fn hs_router_cascade_fn(struct hs_router *rt, void **ctx);

/* A submitted request's outcome on lane (status as answered; batch_ns: time its last batch ran,
 * 0 unknown; in_batch_timeout: it timed out while its batch ran). probe: d->probe of its
 * decision. Feeds the lane engine's breaker. Requests the router rejected are not reported;
 * a decided request that could not be submitted is reported with its submit status. */
void hs_router_on_result(struct hs_router *rt, int lane, bool probe, hs_status status,
                         int64_t batch_ns, bool in_batch_timeout, int64_t now_ns);
/* A shadow copy finished: cosine of each of its n rows with the answer's (n = 0 and ok false
 * when the copy failed or could not be compared). */
void hs_router_on_shadow(struct hs_router *rt, int route, bool ok, const double *cosines, int n);

/* Takes a lane out of every choice (false) or back (true): a remote lane whose worker slot is
 * empty. Decisions count a disabled lane as blocked. Thread-safe. */
void hs_router_set_lane_enabled(struct hs_router *rt, int lane, bool enabled);

const struct hs_router_opts *hs_router_opts(const struct hs_router *rt);
int hs_router_route_count(const struct hs_router *rt);
const char *hs_router_route_name(const struct hs_router *rt, int route); /* "fallback" for -1 */
int hs_router_find_route(const struct hs_router *rt, const char *name);  /* -1 when none */
void hs_router_route_stats(struct hs_router *rt, int route, struct hs_route_stats *out);
/* Stats of the fallback pseudo-route (requests routed with route -1). */
void hs_router_fallback_stats(struct hs_router *rt, struct hs_route_stats *out);
int hs_router_engine_count(const struct hs_router *rt);
void hs_router_breaker_stats(struct hs_router *rt, int engine, int64_t now_ns,
                             struct hs_breaker_stats *out);

#endif
