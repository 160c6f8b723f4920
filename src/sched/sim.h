/* hetserve — simulated serving: traffic through hetserve's own dispatch, router and scheduler
 * (stepped on a simulated clock, sched/sched.h), with every batch's duration given by a cost
 * function instead of an engine. The fleet simulator `hetsim` (tools/hetsim, docs/SIM.md) and
 * `hetserve plan` (sched/plan.h) predict with it.
 *
 * The simulation is discrete-event and single-threaded: arrivals, batch ends, batching windows
 * and deadlines, in time order; at each one the real code decides (hs_dispatch_submit: route,
 * admit or shed, retry, failover), forms batches (hs_sched_step_begin) and learns from them.
 * Nothing runs a model.
 *
 * Results: per class (the traffic's classes), and per tenant when the traffic has tenants, the
 * count, answered OK, refused (429), timed out (504), P50/P90/P99/mean/max of OK latencies; per
 * lane group (an engine and its copies) its busy share overall and per time bin (a batch counts
 * from its start to its end, waits for a resource included); per resource (batch_segments) its busy
 * share; the router's shed, failover and retry counts. Not thread-safe; every allocation through
 * hs_malloc.
 */
#ifndef HS_SCHED_SIM_H
#define HS_SCHED_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/costs.h"
#include "sched/router.h"
#include "sched/sched.h"

#define HS_SIM_MAX_CLASSES   16
#define HS_SIM_MAX_GROUPS    16
#define HS_SIM_MAX_SEGMENTS  128
#define HS_SIM_MAX_RESOURCES 8
#define HS_SIM_MAX_TENANTS   16

/* One request of the traffic. */
struct hs_sim_arrival {
    double at_s;       /* arrival, seconds from the start */
    int cls;           /* index into the traffic's class names */
    int n_inputs;      /* sequences */
    int32_t *tokens;   /* [n_inputs] token lengths, [CLS] and [SEP] included */
    int priority;      /* enum hs_priority */
    double timeout_ms; /* 0 = the setup's default */
    bool warmup;       /* runs, but is left out of the statistics */
    int tenant;        /* 1 + index into the traffic's tenants; 0 = none (the default tenant) */
};

struct hs_sim_traffic {
    int n_classes;
    char class_name[HS_SIM_MAX_CLASSES][32];
    size_t n;
    /* tenants (API keys' tenants, hs_job.tenant / .weight): each one's share of the lanes'
     * fair order (scheduler.fair) is its weight; 0 tenants = every request the default one */
    int n_tenants;
    char tenant_name[HS_SIM_MAX_TENANTS][32];
    double tenant_weight[HS_SIM_MAX_TENANTS];
    struct hs_sim_arrival *a; /* [n], by arrival time */
    int32_t *token_store;     /* backing of every a[i].tokens (freed with the traffic) */
};

void hs_sim_traffic_free(struct hs_sim_traffic *t);

/* What is simulated: the scheduler's lanes and the router's routes over them, and what a batch
 * costs. */
struct hs_sim_setup {
    int n_lanes;
    const struct hs_lane_opts *lanes;    /* [n_lanes]; runners are not called */
    const struct hs_router_opts *router; /* over those lanes */
    const char *model;                   /* the model every request asks for */
    /* seconds the batch b (formed on lane b->lane) runs */
    double (*batch_s)(void *ctx, const struct hs_sched_step *b);
    void *batch_ctx;
    /* Optional (a pipelined split): the batch as a chain of segments instead, each on one of
     * n_resources shared resources (engines) or on none (-1: a copy that holds nothing). A
     * segment starts when the one before it has ended and its resource is free; a resource runs
     * one segment at a time, first come first served (the executor's engine hold). Fills
     * resource[] and seconds[] (at most max) and returns the count; 0 = this batch has no
     * segments (batch_s then). */
    int (*batch_segments)(void *ctx, const struct hs_sched_step *b, int *resource, double *seconds,
                          int max);
    int n_resources;
    char resource_name[HS_SIM_MAX_RESOURCES][32];
    /* a gated lane (hs_runner.gate_open) forms a batch only when resource gate[l] - 1 is free
     * and nobody waits for it (a pipelined split: its first engine); 0 = not gated */
    int gate[HS_SCHED_MAX_LANES];
    /* lanes grouped for utilization (an engine and its copies): lane_group[l] in [0, n_groups) */
    int n_groups;
    char group_name[HS_SIM_MAX_GROUPS][32];
    int lane_group[HS_SCHED_MAX_LANES];
    double overhead_ms;        /* added to every answer: what happens outside the scheduler */
    double default_timeout_ms; /* a request's deadline when its arrival has none (0: 10 s) */
    /* auth.share_inflight: admission's in-flight share between the traffic's tenants
     * (hs_share_verdict, sched.h), as the server applies it to its keys' tenants; 0 = off */
    int share_inflight;
    double bin_s; /* utilization time bins (0 = 1 s) */
};

struct hs_sim_class_result {
    int64_t n, ok, shed, timeout, other;
    double p50_ms, p90_ms, p99_ms, mean_ms, max_ms;
};

struct hs_sim_group_result {
    char name[32];
    int lanes;       /* lanes in the group (an engine's copies) */
    double busy_s;   /* summed over them */
    double util;     /* busy_s / (lanes * span) */
    int64_t batches; /* formed */
    double mean_batch_seqs;
    int n_bins;
    double *util_bins; /* [n_bins]: busy share of its lanes in each bin */
};

struct hs_sim_result {
    double span_s; /* first arrival to last answer */
    int n_classes;
    char class_name[HS_SIM_MAX_CLASSES][32];
    struct hs_sim_class_result cls[HS_SIM_MAX_CLASSES];
    struct hs_sim_class_result all;
    int n_tenants; /* the traffic's: each tenant's requests, as a class */
    char tenant_name[HS_SIM_MAX_TENANTS][32];
    struct hs_sim_class_result tenant[HS_SIM_MAX_TENANTS];
    int64_t tenant_share_refused[HS_SIM_MAX_TENANTS]; /* of its shed: share_inflight's refusals */
    int n_groups;
    struct hs_sim_group_result grp[HS_SIM_MAX_GROUPS];
    double bin_s;
    int64_t router_shed, failed_over, retries, events;
    /* the setup's resources: each one's busy share of the span */
    int n_resources;
    char resource_name[HS_SIM_MAX_RESOURCES][32];
    double resource_util[HS_SIM_MAX_RESOURCES];
};

void hs_sim_result_free(struct hs_sim_result *r);

/* Runs the traffic through the setup. HS_STATUS_INVALID_ARGUMENT for a setup the scheduler or
 * router refuses (err says why); *out is filled on success (free with hs_sim_result_free). */
hs_status hs_sim_run(const struct hs_sim_setup *s, const struct hs_sim_traffic *t,
                     struct hs_sim_result *out, struct hs_error *err);

#endif
