/* hetsim — a fleet: a hetserve configuration whose engines may be multiplied, with each
 * engine's batch times from measured costs, simulated by sched/sim.h.
 *
 * `copies[e]` lanes per model on engine e (independent workers of one type, as a remote engine's
 * worker slots; 0: absent, and a route naming only absent engines uses the model's other lanes,
 * as a route whose lanes all failed their check), each routed as the configuration routes e
 * (server/topology.h: the server's own translation). A batch on engine e lasts
 * hs_fleet_batch_s(cost[e], ...) times tax[e].
 */
#ifndef HS_TOOLS_HETSIM_FLEET_H
#define HS_TOOLS_HETSIM_FLEET_H

#include <stdbool.h>
#include <stdint.h>

#include "model/config.h"
#include "sched/costs.h"
#include "sched/sim.h"
#include "server/config.h"

#define HS_FLEET_MAX_ENGINES HS_CONFIG_MAX_ENGINES

struct hs_sim_fleet {
    const struct hs_config *cfg; /* engines, models, routes, batching, scheduler, limits */
    const struct hs_model_config *models[HS_CONFIG_MAX_MODELS]; /* each model's config */
    const char *model_names[HS_CONFIG_MAX_MODELS];              /* served names */
    int copies[HS_FLEET_MAX_ENGINES];
    /* each engine's measured costs: the profile lane its batches take their times from */
    const struct hs_cost_lane *cost[HS_FLEET_MAX_ENGINES];
    /* per engine, the factor its batches take over their profiled time while serving (0 = 1): the
     * CPU the server's HTTP threads and the clients take from the engine, measured by comparing
     * a served run's engine busy time with the simulation's (bench/sim/validate.sh) */
    double tax[HS_FLEET_MAX_ENGINES];
    double overhead_ms; /* added to every answer: what happens outside the scheduler (HTTP,
                           tokenizing, sending), a constant */
    double bin_s;       /* utilization time bins (0 = 1 s) */
};

/* Batch seconds of n sequences holding `tokens` real tokens, padded to (shape_batch,
 * shape_seq), on an engine measured as l (buckets, nb: hs_costs_buckets(l)): the profile's
 * whole-model time at the batch's mean real length (hs_costs_ragged) when the engine computes
 * ragged batches (the cpu kind), else at the padded shape. */
double hs_fleet_batch_s(const struct hs_cost_lane *l, const int *buckets, int nb, bool ragged,
                        int n, int64_t tokens, int shape_batch, int shape_seq);

/* Simulates the traffic on the fleet; out's groups are the configured engines, in order.
 * HS_STATUS_INVALID_ARGUMENT / INVALID_INPUT name what the fleet lacks (an engine without costs,
 * no copy at all, a route the config cannot build). */
hs_status hs_sim_fleet_run(const struct hs_sim_fleet *f, const struct hs_sim_traffic *t,
                           struct hs_sim_result *out, struct hs_error *err);

#endif
