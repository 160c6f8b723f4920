/* hetserve — Prometheus metrics, one schema for every engine, labelled engine and model.
 *
 *   hetserve_queue_length{engine,model}                 sequences queued (gauge)
 *   hetserve_queue_tokens{engine,model}                 tokens queued (gauge)
 *   hetserve_requests_total{engine,model,outcome}       ok | error | timeout | rejected
 *   hetserve_request_duration_seconds{engine,model}     histogram, received -> response ready
 *   hetserve_stage_duration_seconds{engine,model,stage} histogram per request stage
 *   hetserve_batch_size{engine,model}                   histogram, real sequences per batch
 *   hetserve_batch_tokens{engine,model}                 histogram, padded tokens per batch
 *   hetserve_batch_padding_waste_ratio{engine,model}    1 - real / padded tokens, cumulative
 *   hetserve_engine_busy_ratio{engine,model}            time running batches / time up
 *   hetserve_engine_tokens_per_second{engine,model}     measured throughput (EWMA)
 *   hetserve_tokens_total{engine,model}                 real tokens computed (rate() = tokens/s)
 *   hetserve_batches_total{engine,model}
 * and, from the router (hs_metrics_set_router):
 *   hetserve_routed_total{route,engine,model,policy}     requests placed, by the decision's policy
 *   hetserve_route_shed_total{route}                     rejected by the router (429)
 *   hetserve_route_blocked_total{route}                  found every engine's breaker open
 *   hetserve_route_failed_over_total{route}              of those, sent to the failover route
 *   hetserve_route_retries_total{route,outcome}          sent | denied
 *   hetserve_route_escalations_total{route,outcome}      inputs: escalated | denied
 *   hetserve_shadow_requests_total{route,outcome}        sent | failed
 *   hetserve_shadow_cosine{route}                        histogram of answer-vs-shadow cosines
 *   hetserve_shadow_cosine_min{route}                    lowest cosine seen (1 when none)
 *   hetserve_breaker_state{engine}                       0 closed, 1 open, 2 half-open
 *   hetserve_breaker_transitions_total{engine,to}        open | half_open | closed
 * Requests that never reached a lane (bad input, unknown model) count under engine="none".
 * Recording is lock-free (atomics) and safe from any thread.
 */
#ifndef HS_SERVER_METRICS_H
#define HS_SERVER_METRICS_H

#include <stdint.h>

#include "core/status.h"
#include "sched/sched.h"
#include "server/json.h"

/* The latency histograms' bucket bounds, seconds (hetserve_request_duration_seconds and the
 * tenants' hetserve_tenant_request_duration_seconds): fixed by the exposition schema. */
#define HS_METRICS_LAT_BUCKETS 16
extern const double hs_metrics_lat_bounds[HS_METRICS_LAT_BUCKETS];

enum hs_outcome {
    HS_OUTCOME_OK,
    HS_OUTCOME_ERROR,
    HS_OUTCOME_TIMEOUT,
    HS_OUTCOME_REJECTED,
    HS_OUTCOME_COUNT
};

struct hs_metrics;

/* One label set per lane of s (engine, model names are read from the lane options). */
hs_status hs_metrics_create(struct hs_sched *s, struct hs_metrics **out, struct hs_error *err);
void hs_metrics_free(struct hs_metrics *m);

/* A request ended. lane -1 = never routed. ts: the request's stage timestamps (0 = not
 * reached); latency runs from ts[RECEIVED] to the last stage reached. */
void hs_metrics_request(struct hs_metrics *m, int lane, enum hs_outcome o, const int64_t *ts);
/* A batch ran (observer callback of the scheduler). */
void hs_metrics_batch(struct hs_metrics *m, const struct hs_batch_report *r);
/* Adds the router's counters to the exposition (rt outlives m, or is unset first). */
struct hs_router;
void hs_metrics_set_router(struct hs_metrics *m, struct hs_router *rt);
/* Prometheus text exposition format 0.0.4 of everything, appended to out. */
void hs_metrics_render(struct hs_metrics *m, struct hs_buf *out);

#endif
