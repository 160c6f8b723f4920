/* hetsim — the fleet simulator's core: hetserve's own router, dispatch and scheduler (stepped on
 * a simulated clock, sched/sched.h) over a fleet described by a hetserve configuration, with
 * each engine's batch times taken from measured costs (a `hetserve profile`).
 *
 * A fleet is a configuration whose engines may be multiplied: `copies[e]` lanes per model on
 * engine e (independent workers of one type, as a remote engine's worker slots, or none), each
 * routed as the configuration routes e. The simulation is discrete-event and single-threaded:
 * arrivals, batch ends, batching windows and deadlines, in time order; at each one the real code
 * decides (hs_dispatch_submit: route, admit or shed, retry, failover), forms batches
 * (hs_sched_step_begin) and learns from them. A batch of n sequences with T real tokens in
 * bucket S lasts the engine's measured time for that shape: hs_costs_whole_ms interpolated over
 * the measured buckets around the batch's mean length (ragged engines, such as cpu, compute
 * real tokens) or at the padded shape (others). Nothing runs a model.
 *
 * Results: per class (the traffic's classes) the count, answered OK, refused (429), timed out
 * (504), P50/P99/mean of OK latencies; per engine its busy share overall and per time bin; the
 * router's shed and failover counts. Not thread-safe; every allocation through hs_malloc.
 */
#ifndef HS_TOOLS_HETSIM_SIM_H
#define HS_TOOLS_HETSIM_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/costs.h"
#include "server/config.h"

#define HS_SIM_MAX_CLASSES  16
#define HS_SIM_MAX_ENGINES  HS_CONFIG_MAX_ENGINES
#define HS_SIM_MAX_PROFILES 8

/* One request of the traffic. */
struct hs_sim_arrival {
    double at_s;       /* arrival, seconds from the start */
    int cls;           /* index into the traffic's class names */
    int n_inputs;      /* sequences */
    int32_t *tokens;   /* [n_inputs] token lengths, [CLS] and [SEP] included */
    int priority;      /* enum hs_priority */
    double timeout_ms; /* 0 = the configuration's default */
    bool warmup;       /* runs, but is left out of the statistics */
};

struct hs_sim_traffic {
    int n_classes;
    char class_name[HS_SIM_MAX_CLASSES][32];
    size_t n;
    struct hs_sim_arrival *a; /* [n], by arrival time */
    int32_t *token_store;     /* backing of every a[i].tokens */
};

void hs_sim_traffic_free(struct hs_sim_traffic *t);

struct hs_sim_fleet {
    const struct hs_config *cfg; /* engines, models, routes, batching, scheduler */
    const struct hs_model_config *models[HS_CONFIG_MAX_MODELS]; /* each model's config */
    const char *model_names[HS_CONFIG_MAX_MODELS];              /* served names */
    /* lanes per model on each engine: its copies (0: absent; a route naming only absent engines
     * uses the model's other lanes, as a route whose lanes all failed their check) */
    int copies[HS_SIM_MAX_ENGINES];
    /* each engine's measured costs: the profile lane its batches take their times from */
    const struct hs_cost_lane *cost[HS_SIM_MAX_ENGINES];
    /* per engine, the factor its batches take over their profiled time while serving (0 = 1): the
     * CPU the server's HTTP threads and the clients take from the engine, measured by comparing
     * a served run's engine busy time with the simulation's (bench/sim/validate.sh) */
    double tax[HS_SIM_MAX_ENGINES];
    double overhead_ms; /* added to every answer: what happens outside the scheduler (HTTP,
                           tokenizing, sending), a constant */
    double bin_s;       /* utilization time bins (0 = 1 s) */
};

struct hs_sim_class_result {
    int64_t n, ok, shed, timeout, other;
    double p50_ms, p90_ms, p99_ms, mean_ms, max_ms;
};

struct hs_sim_engine_result {
    char name[32];
    int copies;
    double busy_s;   /* summed over its copies */
    double util;     /* busy_s / (copies * span) */
    int64_t batches; /* formed */
    double mean_batch_seqs;
    int n_bins;
    double *util_bins; /* [n_bins]: busy share of its copies in each bin */
};

struct hs_sim_result {
    double span_s; /* first arrival to last answer */
    int n_classes;
    char class_name[HS_SIM_MAX_CLASSES][32];
    struct hs_sim_class_result cls[HS_SIM_MAX_CLASSES];
    struct hs_sim_class_result all;
    int n_engines;
    struct hs_sim_engine_result eng[HS_SIM_MAX_ENGINES];
    double bin_s;
    int64_t router_shed, failed_over, retries, events;
};

void hs_sim_result_free(struct hs_sim_result *r);

/* Batch seconds of n sequences holding `tokens` real tokens, padded to (shape_batch,
 * shape_seq), on an engine measured as l (ragged: time follows the real tokens). */
double hs_sim_batch_s(const struct hs_cost_lane *l, bool ragged, int n, int64_t tokens,
                      int shape_batch, int shape_seq);

/* Runs the traffic through the fleet. HS_STATUS_INVALID_ARGUMENT / INVALID_INPUT name what the
 * fleet lacks (an engine without costs, a route the config cannot build); *out is filled on
 * success (free with hs_sim_result_free). */
hs_status hs_sim_run(const struct hs_sim_fleet *f, const struct hs_sim_traffic *t,
                     struct hs_sim_result *out, struct hs_error *err);

#endif
