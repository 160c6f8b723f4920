/* hetserve — the scheduler: per-engine bounded queues, dynamic batchers, deadlines.
 *
 * A struct hs_sched owns N lanes. A lane is one engine queue serving one model instance, with
 * `slots` batcher threads (its quota: batches in flight at once, each on its own executor
 * slot). hs_sched_submit_lane admits a request to a given lane or rejects it (full queue, or
 * predicted completion past the deadline or past wait_max_ms: HS_STATUS_OVERLOADED with
 * retry_after_s = predicted drain time), and enqueues each of its sequences in the length bucket
 * that fits it. An idle lane (nothing queued or running) admits whatever fits, so that a
 * prediction gone wrong is corrected by measuring a batch instead of refusing forever. The
 * policies that choose the lane live in sched/router.h; hs_sched_submit is the router-less
 * shortcut (the lane serving the model with the earliest predicted completion).
 *
 * Service-time model, per lane and bucket: a batch of P padded tokens takes fixed + per_token * P
 * seconds, fitted by exponentially weighted least squares over the bucket's recent batches
 * (weight decaying by 1 - throughput_ewma_alpha per batch; one observation moves it at most to
 * 8x its prediction); until a bucket has a batch, the lane's overall throughput stands in.
 * hs_sched_lane_predict turns it into a request's predicted completion time: the queued work
 * ahead of it at its priority and its own, cut into the batches the batcher will form (full ones
 * of the bucket's largest shape, then one partial), the rest of the running batches, shared by
 * the slots, plus the batching window when its batch will not be full and will wait for it (not
 * on a lane of one slot unless batch_window_when_idle: it forms when the batch ahead ends), times
 * the lane's bias
 * factor. Every request answered OK is checked against its prediction (hs_lane_stats.pred_*),
 * and the bias factor follows the model's mean error (an EWMA of observed / unbiased
 * prediction, within [0.5, 4]): what batch timings cannot show, such as CPU time the HTTP
 * threads take from the engine under load. A request whose deadline would pass while its batch
 * runs is answered HS_STATUS_TIMEOUT when the batch forms, without computing it.
 *
 * Batching, per lane: a batch is formed from one bucket when
 *   (a) no batch runs on the lane (the engine idles: nothing to gather for; the next batch
 *       gathers while this one runs), unless batch_window_when_idle, or
 *   (b) the bucket's oldest sequence has waited batch_window_us, or
 *   (c) the bucket holds batch_max sequences, or batch_max_tokens padded tokens;
 * sequences are padded to their bucket's length only, never to the longest queued. When the lane
 * has a shape whitelist, every batch has a whitelisted (batch, seq) shape: seq is the smallest
 * allowed length >= the bucket, batch the smallest allowed size >= the sequences taken, filled
 * with one-token pad sequences whose outputs are discarded. Interactive sequences go first; a
 * batch may be topped up with batch-class sequences of the same bucket.
 *
 * Deadlines: a reaper thread wakes at the earliest deadline of a queued or running request and
 * fails the request (HS_STATUS_TIMEOUT) at once, removing all its queued sequences; sequences
 * already in a batch finish (a hung engine's too, eventually) and their rows are discarded.
 * Overload: batch-class requests may fill only shed_batch_ratio of the queue, and an interactive
 * request that finds the queue full evicts queued batch-class requests (answered
 * HS_STATUS_OVERLOADED) to make room.
 *
 * Fair shares (hs_lane_opts.fair): every queued request gets a start tag (its sequences share
 * it), max(the lane's virtual time, its tenant's last finish tag), and its tenant's finish tag
 * moves on by its tokens over the tenant's weight (start-time fair queuing); the virtual time is
 * the smallest tag still queued (past the last batch's when nothing is). Each priority list is
 * kept in tag order, so a batch takes from tenants in proportion to their weights whatever the
 * order of arrival (a tenant idle until now starts at the virtual time: no credit for idling);
 * priorities still come first, and the bucket batched first is the one whose head has the
 * smallest tag. Admission predicts a request's wait from the work ahead of it in that order (its
 * tenant's share), and a full queue sheds the request last in the order when it is behind the
 * newcomer (the tenant most over its share) instead of refusing the newcomer. With
 * fair_batch_us, batches stay short while several tenants are active. With over_share, a tenant
 * past its share of what a contended lane served recently starts its requests a full batch past
 * the virtual time: the tenants within their shares go first, in batches of their own. With
 * one tenant the tags follow the arrivals and nothing differs from FIFO.
 *
 * Preemption (hs_lane_opts.preempt, fair lanes): with one slot per lane a light tenant's request
 * that arrives while a flood's batch runs waits for all of it. A preempting lane has one more
 * slot, whose batcher forms a batch only while another slot's batch runs, and only from work
 * that is owed: sequences of tenants with nothing in a running batch and not running ahead
 * (tagged within one full batch of their bucket past the virtual time, the rule fair_batch_us
 * cuts by), interactive first, the bucket with the smallest such tag; the batch stays short
 * (fair_batch_us when set, else a quarter of a full batch's predicted time; one sequence at
 * least) and forms at once, without a window. The runner runs it ahead of the others: they
 * wait at their next stage boundary until it ends (model/executor.h, hs_executor_opts.preempt).
 * It preempts only a batch with more predicted time left than the owed work's first sequence
 * alone would take (else the owed work waits for it and goes into the next batch, at a full
 * batch's efficiency), and a batch is paused at most for about its own predicted time (no
 * preemption once its pauses reach it), which bounds how long a tenant's sequence in it waits
 * for others' batches.
 * The predictor counts a paused batch's time left as its own plus the preempting batch's (its
 * time paused is not its progress), the slots sharing work are the lane's own (the preempting
 * one adds no engine), and a batch learns its cost without the time it was paused.
 *
 * Threads: hs_sched_submit and the stats calls are thread-safe. done / release callbacks run on
 * scheduler threads (or the submitting thread for an eviction), never while a scheduler lock
 * is held, so they may call back into the scheduler.
 */
#ifndef HS_SCHED_SCHED_H
#define HS_SCHED_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/runner.h"
#include "engine/stage.h"
#include "sched/request.h"

#define HS_SCHED_MAX_LANES    64
#define HS_SCHED_MAX_BUCKETS  16
#define HS_SCHED_MAX_SHAPES   64
#define HS_SCHED_MAX_SLOTS    HS_RUNNER_MAX_SLOTS
#define HS_SCHED_PRED_BUCKETS 6
#define HS_SCHED_MAX_TENANTS  64   /* tenants a lane tells apart (others share modulo) */
#define HS_FAIR_USED_TAU_S    0.25 /* time constant of the served tokens over_share weighs */
#define HS_FAIR_BUSY_MIN      0.75 /* engine share of that time over_share needs to apply */

struct hs_shape {
    int batch;
    int seq;
};

struct hs_lane_opts {
    const char *engine; /* label, e.g. "cpu0" */
    const char *model;  /* label and routing key, e.g. "all-MiniLM-L6-v2" */
    int dim;            /* output floats per sequence */
    int seq_max;        /* longest sequence the model takes (tokens) */
    int32_t pad_id;     /* token id of the pad sequences whitelisted shapes need */
    int batch_window_us;
    /* wait batch_window_us even on an idle lane (no batch running), the old rule; false: an idle
     * lane batches what is queued at once and the window only gathers while a batch runs */
    bool batch_window_when_idle;
    int batch_max;        /* sequences per batch */
    int batch_max_tokens; /* padded tokens (batch * seq) per batch */
    int n_buckets;        /* ascending lengths; seq_max is appended when larger than the last */
    int buckets[HS_SCHED_MAX_BUCKETS];
    int n_shapes; /* 0 = any shape */
    struct hs_shape shapes[HS_SCHED_MAX_SHAPES];
    int queue_max;           /* sequences queued at most */
    int wait_max_ms;         /* refuse a request whose predicted wait is longer, even before its
                                deadline (not on an idle lane); 0 = the deadline alone */
    double shed_batch_ratio; /* share of queue_max that batch-class requests may fill */
    double throughput_init_tokens_per_s; /* prediction before the first batch is measured */
    double throughput_ewma_alpha;        /* weight of the newest batch in the estimates */
    int slots;                           /* batches in flight at once (quota); 0 = 1 */
    /* fair shares between tenants (hs_request.tenant, .weight): inside each priority class the
     * queue is in start-time fair order, not arrival order (see "Fair shares" above) */
    bool fair;
    /* with fair: while more than one tenant sent work in the last second, a batch stops growing
     * once its predicted time would pass this (one sequence at least), so that a light tenant's
     * request waits for short batches, not for a flood's full ones; 0 = batch_max alone */
    int fair_batch_us;
    /* with fair: while the lane is contended (its batches kept the engine busy at least
     * HS_FAIR_BUSY_MIN of the recent time), the heaviest tenant (per weight), once it had more
     * than this times its weighted share (its weight over the active tenants') of the tokens the
     * lane served recently (a sum decayed with time constant HS_FAIR_USED_TAU_S), is past its
     * share: each of its requests starts a full batch (the lane's largest) past the virtual time
     * (after its earlier ones so placed; its finish tag moves on from its own turn, so the lead
     * is the request's, not the tenant's), so that the work of the tenants
     * within their shares goes first (a light tenant's burst is not interleaved with a flood
     * held to a few requests in flight by admission, whose tags stay near the virtual time),
     * and a batch that starts with their work takes none of it; it still gets every turn they
     * leave, in batches cut at fair_batch_us or, without it, at twice the batch's fixed cost
     * while another tenant is active (hs_request.over_share says which requests were queued
     * so). Above 1, a margin:
     * tenants that all get what they ask for hover near their shares. 0 = off (start-time fair
     * order alone) */
    double over_share;
    /* with fair: one more slot (the runner's slot `slots`, so the runner takes slots + 1) that
     * preempts (see "Preemption" above); threads only (a stepped scheduler ignores it) */
    bool preempt;
    struct hs_runner runner; /* runs the lane's batches (engine/runner.h) */
};

/* One formed batch, reported to the observer after it ran. */
struct hs_batch_report {
    int lane;
    int slot;
    uint64_t batch_id;
    int n_seqs;      /* real sequences */
    int shape_batch; /* incl. pad sequences */
    int shape_seq;
    int64_t tokens;        /* real tokens */
    int64_t padded_tokens; /* shape_batch * shape_seq */
    int64_t formed_ns, copy_in_end_ns, compute_end_ns, copy_out_end_ns;
    hs_status status;
    /* a split placement's hand-overs (batch_timing's; NULL / 0 for one engine) */
    int n_handovers;
    const struct hs_batch_handover *handovers;
};

/* (optional) notified on the batcher thread after every batch, outside locks. */
struct hs_sched_observer {
    void (*on_batch)(void *ctx, const struct hs_batch_report *r);
    void *ctx;
};

struct hs_lane_stats {
    int queued_seqs;
    int64_t queued_tokens;
    int running_seqs;
    int running_batches;
    double throughput_tokens_per_s; /* current estimate */
    int64_t busy_ns;                /* inside runner.run */
    int64_t batches;
    int64_t started_ns; /* lane creation time */
    /* admission's prediction checked: for requests answered OK, (time from enqueue to answer) /
     * (predicted wait), counted per bucket of hs_sched_pred_bounds (the last: above them all) */
    int64_t pred_count[HS_SCHED_PRED_BUCKETS + 1];
    int64_t pred_total;
    double pred_log_abs_sum; /* sum of |ln(observed / predicted)| */
    double pred_bias;        /* factor correcting the model's systematic error (1 = none) */
    /* preemption (hs_lane_opts.preempt): batches the preempting slot ran, the time other slots'
     * batches were paused for them (summed over the paused batches; the longest pause of one),
     * and the preempting batches' waits for the stages in flight (sum, longest) */
    int64_t preempt_batches;
    int64_t paused_ns, paused_max_ns;
    int64_t preempt_wait_ns, preempt_wait_max_ns;
};

/* Upper bounds of the prediction-ratio buckets (fixed by the metrics schema). */
extern const double hs_sched_pred_bounds[HS_SCHED_PRED_BUCKETS];

struct hs_sched;

/* Creates the scheduler with n lanes and starts the batcher and reaper threads. Options are
 * copied (label strings too). HS_STATUS_INVALID_ARGUMENT names the bad option. */
hs_status hs_sched_create(const struct hs_lane_opts *lanes, int n,
                          const struct hs_sched_observer *observer, struct hs_sched **out,
                          struct hs_error *err);
/* Stops the threads; requests still queued are answered HS_STATUS_SHUTDOWN. A batch still in
 * its engine after HS_SCHED_STOP_WAIT_MS (a hung device) is answered HS_STATUS_SHUTDOWN too and
 * its thread left behind, detached; its lane and the scheduler's memory are then not freed, so
 * that the thread can finish safely if the device ever returns. */
#define HS_SCHED_STOP_WAIT_MS 2000
void hs_sched_destroy(struct hs_sched *s);

/* Routes and admits r (prepared with hs_request_init; every sequence 1..seq_max tokens).
 * HS_STATUS_OK: r->done will be called exactly once. Any error: done is never called and r's
 * status, msg (and retry_after_s for HS_STATUS_OVERLOADED) say why:
 *   NOT_FOUND     no lane serves r->model
 *   TOO_LONG      a sequence fits no bucket / whitelisted shape
 *   OVERLOADED    queue full, or predicted wait past the deadline
 *   TIMEOUT       deadline already passed
 *   SHUTDOWN      draining
 * The lane is the one serving r->model with the earliest predicted completion. */
hs_status hs_sched_submit(struct hs_sched *s, struct hs_request *r);
/* As hs_sched_submit on a lane the caller chose (the router). NOT_FOUND for a bad index. A
 * request is submitted at most once; a retry elsewhere is a new request. */
hs_status hs_sched_submit_lane(struct hs_sched *s, int lane, struct hs_request *r);

/* Predicted seconds from now until r (not yet submitted; its sequences' n_tokens and its
 * priority set) would be answered on lane: the queued work ahead of it at its priority and the
 * rest of the running batches, shared by the slots, plus its own padded work. *fits receives
 * false when a sequence fits no shape of the lane. Thread-safe. */
double hs_sched_lane_predict(struct hs_sched *s, int lane, const struct hs_request *r, bool *fits);
/* Seeds the service-time line of lane's bucket of length seq_len from measured costs (a
 * `hetserve profile`): a batch of tokens1 real tokens took t1_s seconds, one of tokens2 took
 * t2_s (tokens2 > tokens1). The batches that run refine it and soon replace it. NOT_FOUND when
 * the lane has no such bucket, INVALID_ARGUMENT for nonsense. Thread-safe. */
hs_status hs_sched_lane_seed(struct hs_sched *s, int lane, int seq_len, double tokens1, double t1_s,
                             double tokens2, double t2_s);
/* The current line of that bucket (0, 0 until it has one). Thread-safe. */
void hs_sched_lane_fit(struct hs_sched *s, int lane, int seq_len, double *fixed_s,
                       double *per_token_s);
/* True when lane has nothing queued and no batch running: admission then takes any request
 * that fits, whatever the prediction (the router follows the same rule). Thread-safe. */
bool hs_sched_lane_idle(struct hs_sched *s, int lane);

/* Admission's in-flight share between tenants (auth.share_inflight), one rule for the server's
 * keys (server/auth.c) and the simulator: while `total` requests are in flight, at least
 * share_inflight, a tenant with `mine` in flight that is past its weighted share of
 * share_inflight (at least 1: weight over its own plus others_weight, the weights of the other
 * tenants with work in flight) and strictly the heaviest (mine / weight above heaviest_other,
 * the largest in-flight over weight of the others: at a tie the lighter newcomer is admitted)
 * runs as batch class; past twice share_inflight it is refused. share_inflight 0: always
 * admitted. */
enum hs_share_verdict { HS_SHARE_ADMIT, HS_SHARE_DEMOTE, HS_SHARE_REFUSE };
enum hs_share_verdict hs_share_verdict(int share_inflight, int total, int mine, double weight,
                                       double others_weight, double heaviest_other);
/* Predicted seconds to run everything queued on lane (Retry-After hints). Thread-safe. */
double hs_sched_lane_drain_s(struct hs_sched *s, int lane);

/* Stops admitting (submit answers HS_STATUS_SHUTDOWN), batches what is queued without waiting
 * for windows, and returns once every lane is empty and idle or timeout_ms passed (< 0: no
 * limit). Returns HS_STATUS_TIMEOUT in the latter case. */
hs_status hs_sched_drain(struct hs_sched *s, int timeout_ms);
/* Answers every request still queued or in a running batch with HS_STATUS_SHUTDOWN and msg,
 * and refuses new ones; running batches finish (or not) on their own, writing into no answered
 * request. The scheduler stays valid until hs_sched_destroy. */
void hs_sched_abort(struct hs_sched *s, const char *msg);

/* The scheduler's clock: hs_now_ns, or a stepped scheduler's simulated time. Thread-safe. */
int64_t hs_sched_now(const struct hs_sched *s);

int hs_sched_lane_count(const struct hs_sched *s);
const struct hs_lane_opts *hs_sched_lane_opts(const struct hs_sched *s, int lane);
void hs_sched_lane_stats(struct hs_sched *s, int lane, struct hs_lane_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Stepped mode: the same scheduler, its admission, predictions, batching, deadlines and
 * learning, driven by a discrete-event simulation (hetsim) instead of threads and the monotonic
 * clock. No thread is started; the caller owns the clock (nanoseconds, > 0, never going back)
 * and calls, at every event: hs_sched_step_clock, then submit / end / reap as the event is, then
 * hs_sched_step_begin until it returns false (the batches the idle slots' batchers would form
 * now; each runs, in the simulation, until the caller ends it). Runners are not called and may
 * be absent; requests need no token ids and no `out`. Single-threaded: every call from one
 * thread; hs_sched_destroy answers what is still queued or out with SHUTDOWN.
 */

/* A batch formed on a stepped scheduler, running until hs_sched_step_end. */
struct hs_sched_step {
    int lane, slot;
    int n_seqs;                 /* real sequences */
    int shape_batch, shape_seq; /* padded shape (pad sequences included) */
    int64_t tokens;             /* real tokens */
    double predicted_s;         /* the lane's predicted duration */
};

hs_status hs_sched_create_stepped(const struct hs_lane_opts *lanes, int n,
                                  const struct hs_sched_observer *observer, int64_t now_ns,
                                  struct hs_sched **out, struct hs_error *err);
void hs_sched_step_clock(struct hs_sched *s, int64_t now_ns);
/* The next batch an idle slot would form now: true with *b filled, or false with *wake the next
 * time one may be due without new work (a batching window; INT64_MAX: none). */
bool hs_sched_step_begin(struct hs_sched *s, struct hs_sched_step *b, int64_t *wake);
/* The batch on (lane, slot) ended now with status st (t: its timing split, may be NULL). */
void hs_sched_step_end(struct hs_sched *s, int lane, int slot, hs_status st,
                       const struct hs_batch_timing *t);
/* Answers the requests whose deadline has passed (the reaper); returns the next deadline. */
int64_t hs_sched_step_reap(struct hs_sched *s);

/* Shape a sequence of n_tokens would be batched in on lane (bucket length, or whitelisted
 * length); 0 when none fits. For tests and diagnostics. */
int hs_sched_lane_seq_shape(const struct hs_sched *s, int lane, int n_tokens);

#endif
