/* hetserve — placement planning from measured costs (`hetserve plan`).
 *
 * Given a profile (sched/costs.h), the engines it measured, a traffic description (a request
 * rate and a length histogram) and a latency objective, hs_plan_make predicts each candidate
 * plan's latency and throughput and picks one:
 *   single    every request on one engine, whole model (one candidate per measured engine);
 *   buckets   requests up to a length threshold on engine a, longer ones on engine b (every
 *             ordered pair, every bucket boundary);
 *   layers    one lane whose first `cut` layers run on a, the rest on b (every pair, every cut);
 *   modules   one lane with attention on a and FFN on b (every pair);
 * each split sequential (a batch runs its stages one after the other, one batch in flight) and
 * pipelined (placement.pipeline: each engine running one batch at a time, so batch k's stages on
 * b overlap batch k+1's on a; three batches in flight, each formed when a is free, as the server
 * runs it).
 * Splits are offered only between engines measured in the same dtype.
 *
 * The model, kept simple so that its output can be checked by hand:
 *   service time of a batch (n sequences, bucket S) on a lane =
 *     single:  the profile's whole-model time at (n, S) (compute, sync, copies, overhead);
 *     split:   the sum of each stage's measured (compute + sync) on its engine, plus at every
 *              boundary the giving stage's copy_out, the taking engine's batch_begin (embed
 *              copy_in) and the taking stage's copy_in, plus the first engine's executor overhead
 *              (its whole-model time minus its stages' sum), shared among the engines' runs
 *              by their length. A pipelined split's batch is that chain of runs, each holding
 *              its engine (the copies out hold neither), and waits when the other batch holds
 *              the engine it needs next.
 *   Cells the profile lacks are interpolated (costs.h).
 *   On engines that compute ragged batches (cpu) a batch's time follows its real tokens: the
 *   time above at its mean length, interpolated between the measured buckets around it.
 *   latency: the plan served in simulation by hetserve's own router and scheduler (sched/sim.h:
 *     the stepped scheduler, with its admission, windows, buckets, deadlines and learned
 *     service-time model; Poisson arrivals at the rate, lengths from the histogram, a fixed
 *     seed, the first tenth a warm-up), each batch taking the service time above times the
 *     engine's measured serving tax, plus the measured overhead per request; P50/P99 of
 *     arrival-to-answer. A lane loaded at or past its capacity, or a plan that answers less
 *     than 99 % of the requests, has no finite latency.
 *   capacity: the rate at which the busiest lane's full batches (batch_max) of the traffic's
 *     lengths take all its time, with its tax (a pipelined split: the busier engine's runs of
 *     them); on ragged engines at the real lengths.
 * The batch window of each plan is chosen from a few candidates (the one with the lowest P99),
 * then its batch sizes per bucket: the padded-token cap of a batch (the configuration's, 4096,
 * 2048 or 1024; a 256-token bucket's batches of at most 16, 8 or 4 sequences while short buckets
 * keep batch_max) with the lowest P99.
 * The chosen plan: among plans whose P99 meets the objective with every lane under 90 % busy,
 * the one using the fewest engines, then the lowest P99; when none meets it, the lowest P99.
 * Not modelled unless measured and given (tax, overhead_ms): HTTP and tokenization time, CPU
 * engines sharing cores with them and with other work; not modelled: priorities, more than one
 * slot on one engine (a CPU engine's slots share its cores; engines on disjoint cores are the
 * way to run batches side by side, each profiled as an engine of its own).
 */
#ifndef HS_SCHED_PLAN_H
#define HS_SCHED_PLAN_H

#include <stdbool.h>

#include "core/status.h"
#include "sched/costs.h"
#include "sched/sched.h"
#include "sched/sim.h"

#define HS_TRAFFIC_MAX_LENGTHS 64
#define HS_PLAN_MAX            256
#define HS_PLAN_MAX_BUCKETS    16

/* Requests of one sequence each, at rate_per_s, of these lengths with these shares (sum 1). */
struct hs_traffic {
    double rate_per_s;
    int n;
    int tokens[HS_TRAFFIC_MAX_LENGTHS];
    double share[HS_TRAFFIC_MAX_LENGTHS];
    /* Optional: the arrivals of a capture (server/capture.h, hs_capture_traffic_parse), by arrival
     * time from 0, with their sequences, priorities and deadlines. The plan's simulation replays
     * them, back to back, instead of Poisson arrivals at rate_per_s (then sequences per second,
     * with the histogram over sequences). n = 0: none. Owned: hs_traffic_free. */
    struct hs_sim_traffic captured;
};

/* "rate=40;16:0.6,64:0.3,256:0.1" (rate in requests per second; tokens:weight, weights
 * normalized) or a captured trace file, one request per line: "<seconds> <tokens>" (rate = the
 * lines over the time they span; lengths binned by the buckets). HS_STATUS_INVALID_INPUT saying
 * what is wrong (a file's errors name the file and line: "T:3: ..."). hs_traffic_parse_lines
 * reads the trace's text (data[len], name for messages); hs_traffic_load reads the file. */
hs_status hs_traffic_parse(const char *spec, struct hs_traffic *t, struct hs_error *err);
hs_status hs_traffic_parse_lines(const char *name, const char *data, size_t len, const int *buckets,
                                 int n_buckets, struct hs_traffic *t, struct hs_error *err);
hs_status hs_traffic_load(const char *path, const int *buckets, int n_buckets, struct hs_traffic *t,
                          struct hs_error *err);
/* Releases t's captured arrivals (nothing else is owned). */
void hs_traffic_free(struct hs_traffic *t);

enum hs_plan_kind { HS_PLAN_SINGLE, HS_PLAN_BUCKETS, HS_PLAN_LAYERS, HS_PLAN_MODULES };

struct hs_plan {
    enum hs_plan_kind kind;
    const struct hs_cost_lane *a, *b; /* b: NULL for single */
    int threshold;                    /* buckets: longest sequence (tokens) on a */
    int cut;                          /* layers: layers [0, cut) on a */
    bool pipelined;                   /* layers, modules: each engine one batch at a time,
                                         batches overlapping (placement.pipeline) */
    int slots;                        /* batches in flight on its lane(s): 1, a pipeline 3 */
    int window_us;                    /* batch window chosen */
    int tokens_max;                   /* padded tokens per batch chosen (batch_max_tokens): the
                                         batch size of each bucket, batch_max at most */
    char name[128];
    /* predictions at the traffic's rate */
    double p50_ms, p99_ms; /* infinity when a lane is past its capacity */
    double capacity_rps;   /* rate at which the busiest lane saturates */
    double busy[2];        /* share of each lane's time busy at the rate (a pipelined split:
                              of each engine's, a then b) */
    double batch_mean[2];  /* mean sequences per batch */
    int engines;           /* engines it uses */
    bool meets;            /* P99 within the objective and every lane under 90 % busy */
};

struct hs_plan_opts {
    double slo_ms; /* P99 objective */
    int batch_max; /* sequences per batch */
    int n_buckets; /* the server's buckets, ascending (seq_max last) */
    int buckets[HS_PLAN_MAX_BUCKETS];
    int layers;       /* the model's layers (from the profile's attn count when 0) */
    int sim_requests; /* simulated requests per plan and window; default 20000 */
    unsigned kinds;   /* 1 << hs_plan_kind: only these may be chosen; 0 = any */
    int pipeline;     /* splits that may be chosen: 0 either, 1 pipelined only, -1 not */
    /* the lanes' admission and learning options (the configuration's: queue_max, wait_max_ms,
     * shed_batch_ratio, batch_max_tokens, throughput_init_tokens_per_s, throughput_ewma_alpha);
     * buckets, batch_max, windows and slots are the plan's */
    struct hs_lane_opts lane;
    double timeout_ms; /* a request's deadline (the configuration's limits.timeout_ms) */
    /* measured on this machine while serving (bench/sim/calibrate.py): per engine, how much
     * slower its batches run than profiled; and the time a request spends outside the
     * scheduler, added to every latency */
    int n_tax;
    char tax_engine[8][32];
    double tax[8];
    double overhead_ms;
};

/* "single", "buckets", "layers", "modules"; -1 when none */
int hs_plan_kind_parse(const char *s);

struct hs_plan_result {
    int n;
    struct hs_plan plans[HS_PLAN_MAX];
    int chosen;      /* index into plans */
    int best_single; /* the single-engine plan with the lowest P99 (-1 none) */
};

/* Predicts every candidate plan over the measured lanes of costs (of one model) for traffic t
 * and chooses one. HS_STATUS_INVALID_INPUT when no lane is measured. out is large: hs_malloc
 * it. Deterministic (a fixed seed). */
hs_status hs_plan_make(const struct hs_costs *costs, const struct hs_traffic *t,
                       const struct hs_plan_opts *o, struct hs_plan_result *out,
                       struct hs_error *err);

/* Predicted batch time (ms) of n sequences of bucket S on plan p's lane `lane` (0 or 1). */
double hs_plan_batch_ms(const struct hs_plan *p, int lane, int n, int bucket);

#endif
