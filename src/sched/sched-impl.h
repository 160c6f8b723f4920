/* hetserve — the scheduler's internals, shared by the files behind sched.h (and included by no
 * other).
 *
 *   sched.c     lifecycle: lanes from their options, threads, drain, shutdown, stats
 *   queue.c     the lane queue (lists per priority and bucket), failing requests, the reaper
 *   svcmodel.c  the service-time model and predicted completion
 *   batcher.c   forming, running and ending batches; the batcher threads
 *   admit.c     routing (router-less) and admission
 *   stepped.c   stepped mode (a discrete-event simulation drives the same code)
 *   request.c   requests' names and reference counts
 *
 * Locking: a lane's fields below its mutex are read and written with L->mu held (the functions
 * marked "lock held" expect it); requests are answered after it is released, through a chain.
 */
#ifndef HS_SCHED_SCHED_IMPL_H
#define HS_SCHED_SCHED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sched/costline.h"
#include "sched/sched.h"

struct list {
    struct hs_seq *head, *tail;
    int n;
    int64_t tokens; /* real tokens of its sequences */
};

struct lane;

/* A batch's service time as a line in its real tokens, T = fixed + per_token * P, fitted by
 * exponentially weighted least squares over the bucket's recent batches (each new batch has
 * weight 1, older ones decay by (1 - alpha) per batch). Batch sizes vary with the load (one
 * sequence at a time when quiet, full batches under overload), which is what separates the two
 * terms; while they do not vary enough the fixed cost is taken as 0 (seconds per token only):
 * struct hs_cost_line (costline.h), one per bucket (struct lane's fit). */

/* One batcher thread of a lane with its batch buffers (sized once). */
struct slot {
    struct lane *L;
    int idx;
    pthread_t thread;
    bool started;
    int32_t *ids, *lengths, *offsets;
    int32_t *type_ids; /* the batch's token types (a pair's second segment is 1) */
    float *out;
    struct hs_seq **taken;
    struct hs_request **done; /* the taken sequences' requests, while their batch completes */
    /* the running batch, read by the reaper and the predictor under the lane lock */
    int n_taken;
    int64_t run_start_ns; /* 0 = idle */
    double run_pred_s;    /* predicted duration */
    /* end of this slot's previous batch (its engine call) when the next one was due at once (a
     * backlog): the time between the two (answering its requests, forming the next) is part of
     * what a batch costs under a backlog; 0 otherwise */
    int64_t backlog_since_ns;
    int64_t last_end_ns; /* end of the last engine call */
    /* the running batch's particulars, from hs__batch_begin to hs__batch_end */
    int run_b, run_n, run_shape_b;
    int64_t run_formed_ns, run_tokens;
    uint64_t run_batch_id;
    bool stepping; /* stepped scheduler: a batch is out with the simulator */
    bool gated;    /* holds the lane's entry (runner.gate) */
    /* the running batch's tenants (hs__tenant_slot bits; 0 when idle), for the preempting
     * slot's rule, and its time paused by the preempting slot's batches that ended */
    uint64_t run_tenants;
    int64_t run_paused_ns;
};

struct lane {
    struct hs_sched *s;
    int idx;
    bool abandoned; /* a batcher was still in its engine at destroy: never freed */
    struct hs_lane_opts o;
    char engine[64], model[128];

    int n_buckets;
    int bucket_len[HS_SCHED_MAX_BUCKETS];
    int shape_seq[HS_SCHED_MAX_BUCKETS]; /* padded length of a batch from this bucket; 0 = none */
    int cap_seqs[HS_SCHED_MAX_BUCKETS];  /* most real sequences a batch from it takes */
    int n_sizes[HS_SCHED_MAX_BUCKETS];   /* whitelisted batch sizes for shape_seq, ascending */
    int sizes[HS_SCHED_MAX_BUCKETS][HS_SCHED_MAX_SHAPES];

    int n_slots;
    struct slot *slots;
    int preempt_slot; /* the preempting slot's index (o.preempt: n_slots - 1), or -1 */
    /* preemption totals (hs_lane_stats) */
    int64_t preempt_batches, paused_ns, paused_max_ns, preempt_wait_ns, preempt_wait_max_ns;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* batcher: work arrived or stop */
    pthread_cond_t idle_cv; /* drain: lane became empty and idle */

    struct list q[HS_PRIORITY_COUNT][HS_SCHED_MAX_BUCKETS];
    int queued_seqs;
    int queued_by_prio[HS_PRIORITY_COUNT];
    int64_t queued_tokens;
    int64_t queued_tokens_by_prio[HS_PRIORITY_COUNT];
    int running_seqs, running_batches;
    bool stop;
    /* fair shares (o.fair): the virtual time and each tenant's last finish tag */
    double vtime;
    double tenant_tag[HS_SCHED_MAX_TENANTS];
    int64_t tenant_seen_ns[HS_SCHED_MAX_TENANTS]; /* its last request's arrival */
    double tenant_weight[HS_SCHED_MAX_TENANTS];   /* its last request's weight */
    /* the finish tag of its requests queued past its share (over_share), which follow each
     * other in tag order like its others do */
    double over_tag[HS_SCHED_MAX_TENANTS];
    /* tokens each tenant had served, decayed (hs__lane_served; o.over_share) */
    double tenant_used[HS_SCHED_MAX_TENANTS];
    int64_t tenant_used_ns[HS_SCHED_MAX_TENANTS];
    double busy_recent; /* engine seconds of the lane's batches, decayed the same way */
    int64_t busy_recent_ns;

    double throughput; /* tokens/s estimate */
    bool measured;
    struct hs_cost_line fit[HS_SCHED_MAX_BUCKETS]; /* batch seconds vs padded tokens, per bucket */
    /* prediction check: completion time / predicted, of requests answered OK */
    atomic_int_fast64_t pred_hist[HS_SCHED_PRED_BUCKETS + 1];
    _Atomic double pred_log_abs_sum; /* sum of |ln(observed / predicted)| */
    /* systematic error of the model (what batches' timings do not show: CPU taken by the HTTP
     * threads, the order buckets are served in): EWMA of observed / raw predicted wait, which
     * every prediction is multiplied by; in [0.5, 4] */
    _Atomic double pred_bias;
    int64_t busy_ns, batches, started_ns;

    int cap_batch, cap_tokens; /* batch buffer sizes */
};

struct hs_sched {
    int n;
    struct lane *lanes[HS_SCHED_MAX_LANES];
    struct hs_sched_observer obs;
    atomic_bool draining;
    atomic_uint_fast64_t batch_seq;

    pthread_t reaper;
    bool reaper_started;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    int64_t reap_at;
    uint64_t kick;
    bool stop;
    /* stepped (hs_sched_create_stepped): no threads, the caller's clock */
    bool stepped;
    int64_t step_now;
};

/* Requests to notify after the lock is released, chained through r->link. link_drop bits:
 * 1 = call done, 2 = drop the scheduler's reference. */
struct chain {
    struct hs_request *head;
};

/* --- sched.c --- */

/* The scheduler's clock: monotonic time, or a stepped scheduler's simulated time. */
int64_t hs__sched_now(const struct hs_sched *s);
/* Waits on c until at_ns on the monotonic clock (INT64_MAX: no limit). */
void hs__cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_ns);

/* --- queue.c --- */

/* The tenant slot of r (0 .. HS_SCHED_MAX_TENANTS - 1: tenants share modulo). */
int hs__tenant_slot(const struct hs_request *r);

void hs__list_push(struct list *l, struct hs_seq *q);
/* The start tag r's first sequence would get on L now (fair shares; lock held); over: its
 * tenant is past its share (hs__lane_over_share, computed once per submit by the caller), which
 * starts it a full batch past the virtual time. */
double hs__lane_tag_of(const struct lane *L, const struct hs_request *r, bool over);
/* Whether r's tenant had more than o.over_share times its weighted share of the tokens L served
 * over about the last second while another tenant was active (lock held; false when
 * over_share is 0). */
bool hs__lane_over_share(const struct lane *L, const struct hs_request *r, int64_t now);
/* A batch took q (lock held): its tenant's served tokens grow by q's. */
void hs__lane_served(struct lane *L, const struct hs_seq *q, int64_t now);
/* A batch ended at now after own_s seconds of engine time (lock held). */
void hs__lane_busy(struct lane *L, double own_s, int64_t now);
/* Queues r's sequences (lock held): at the tail, or in fair order with their tags (over as
 * for hs__lane_tag_of); sets r->over_share. */
void hs__lane_enqueue(struct lane *L, struct hs_request *r, bool over, int64_t now);
/* A batch took its sequences, the last with tag last_tag (lock held): the virtual time moves
 * on to the smallest tag still queued (every bucket's, so that a batch from a bucket whose
 * sequences are sparse in the fair order does not move it past the others' work), or past the
 * batch when nothing is. */
void hs__lane_took(struct lane *L, double last_tag);
/* Fair shares across buckets: a batch forms from one bucket, so the sequences it takes past
 * the tag of the work another tenant waits with in another bucket would run ahead of that work
 * (a flood's batch of long inputs ahead of a light tenant's short one). For each list but those
 * of the batch's bucket: its lowest tag, that sequence's tenant, and the lowest tag of another
 * tenant's sequence in it (INFINITY: none). */
struct fair_bounds {
    int bucket; /* the batch's, left out */
    double head[HS_PRIORITY_COUNT][HS_SCHED_MAX_BUCKETS];
    int tenant[HS_PRIORITY_COUNT][HS_SCHED_MAX_BUCKETS];
    double other[HS_PRIORITY_COUNT][HS_SCHED_MAX_BUCKETS];
};
void hs__lane_fair_bounds(const struct lane *L, int b, struct fair_bounds *fb);
/* The tag past which a batch from fb->bucket takes none of q's tenant's sequences: the lowest
 * tag of another tenant's work at q's priority or above in another bucket (INFINITY: none). */
double hs__lane_fair_bound(const struct lane *L, const struct fair_bounds *fb,
                           const struct hs_seq *q);
/* Whether tenant slot t sent work to L within the last second (lock held): active, for the
 * fair order's bounds. */
static inline bool hs__lane_tenant_active(const struct lane *L, int t, int64_t now)
{
    return L->tenant_seen_ns[t] && now - L->tenant_seen_ns[t] < 1000000000LL;
}

/* Whether more than one tenant sent work to L within the last second (lock held). */
bool hs__lane_shared(const struct lane *L, int64_t now);
/* Removes a queued sequence from its list and the lane's counters (lock held). */
void hs__lane_unqueue(struct lane *L, struct hs_seq *q);
/* Calls done and drops references of the chained requests (no lock held). */
void hs__chain_flush(struct chain *c);
/* Fails r (lock held): claims the answer, removes every queued sequence of r. */
void hs__lane_fail_locked(struct lane *L, struct hs_request *r, hs_status st, double retry_s,
                          struct chain *c, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Fails q's request with HS_STATUS_TIMEOUT when its deadline has passed by now (lock held);
 * true when it did (q's neighbours in its list may then be gone too). */
bool hs__lane_fail_expired(struct lane *L, const struct hs_seq *q, int64_t now, struct chain *c);
/* Shape of a batch of n real sequences from bucket b. */
int hs__lane_shape_batch(const struct lane *L, int b, int n);
/* The bucket a sequence of n_tokens goes to; -1 when none fits. */
int hs__lane_bucket_of(const struct lane *L, int n_tokens);
/* Fails L's requests whose deadline passed by now (queued or in a running batch) into c;
 * returns the next deadline. */
int64_t hs__lane_reap(struct lane *L, int64_t now, struct chain *c);
/* The reaper thread (arg: the scheduler). */
void *hs__reaper_main(void *arg);

/* --- svcmodel.c --- */

/* Predicted seconds of one batch of P real tokens from bucket b (lock held). */
double hs__lane_batch_s(const struct lane *L, int b, double tokens);
/* Learns from a batch of P real tokens that took t seconds (lock held). */
void hs__lane_learn(struct lane *L, int b, double padded, double t);
/* Predicted seconds until the work queued at priorities < upto, and at upto with a tag up to
 * upto_tag (INFINITY: all of it), plus own[b] more sequences per bucket (own may be NULL), and
 * the running batches are done (lock held). */
double hs__lane_backlog_s(const struct lane *L, int upto, double upto_tag, const int *own,
                          const int64_t *own_tokens, int64_t now);
/* Compares an answered request's time in the scheduler with what admission predicted. */
void hs__lane_check_prediction(struct lane *L, const struct hs_request *r, int64_t now);
/* Predicted seconds until r would be answered on L (lock held; over as for hs__lane_tag_of);
 * -1 when it does not fit. */
double hs__lane_predict_locked(const struct lane *L, const struct hs_request *r, bool over,
                               int64_t now);

/* --- batcher.c --- */

/* Whether a batch forms now without waiting for the window: the lane has no batch running and
 * batch_window_when_idle is off (lock held). */
static inline bool hs__lane_window_skipped(const struct lane *L)
{
    return !L->o.batch_window_when_idle && !L->running_batches;
}

/* Whether a batch that has run ran_s seconds is the engine's fault when a deadline passes in it. */
bool hs__slot_overran(const struct slot *sl, double ran_s);
/* Seconds the slot's running batch has run of its own work by now: since it began, less the
 * time the preempting slot's batches held it paused (lock held). */
double hs__slot_ran_s(const struct lane *L, const struct slot *sl, int64_t now);
/* Whether the preempting slot may run a batch of need_s predicted seconds now (lock held):
 * another slot's batch runs that has more than need_s predicted time left (else waiting for it
 * costs less, and the owed work goes into the next batch, at a full batch's efficiency) and has
 * not yet been paused for as long as its own predicted time (a batch is at most paused about
 * that long: past it, the owed work waits for it to end, so that a tenant's sequence in a paused
 * batch is not held there by the other tenants' batches of one, each costing its fixed time). */
bool hs__lane_preemptible(const struct lane *L, double need_s, int64_t now);
/* Slots that add engine time: all but the preempting one. */
static inline int hs__lane_work_slots(const struct lane *L)
{
    return L->preempt_slot >= 0 ? L->n_slots - 1 : L->n_slots;
}
/* Starts the batch of the n sequences the slot took from bucket b (no lock held). */
void hs__batch_begin(struct slot *sl, int b, int n, int64_t formed_ns, struct hs_batch *batch);
/* Ends the slot's batch, which the engine finished at `end` with status st (no lock held). */
void hs__batch_end(struct slot *sl, int64_t end, hs_status st, const struct hs_batch_timing *t,
                   const struct hs_error *err);
/* One step of a slot's batcher (lock held): the sequences taken (0: all failed), or -1 when
 * nothing is due (*wake: the next time something may be). */
int hs__slot_take(struct slot *sl, int64_t now, bool draining, int *bucket, int64_t *wake,
                  struct chain *c);
/* The slot's batch of n sequences is over (lock held). */
void hs__slot_done(struct slot *sl, int n);
/* A batcher thread (arg: its slot). */
void *hs__lane_main(void *arg);

#endif
