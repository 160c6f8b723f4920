#include "sched/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

/* ---------------------------------------------------------------------------------------------
 * requests
 */

static const char *const ts_names[] = {
#define HS__TS_NAME(name, text) text,
    HS_TS_TABLE(HS__TS_NAME)
#undef HS__TS_NAME
};

const char *hs_ts_name(enum hs_ts i)
{
    return (unsigned)i < HS_TS_COUNT ? ts_names[i] : "?";
}

int hs_priority_parse(const char *s)
{
    if (!s) return -1;
    if (strcmp(s, "interactive") == 0) return HS_PRIORITY_INTERACTIVE;
    if (strcmp(s, "batch") == 0) return HS_PRIORITY_BATCH;
    return -1;
}

const char *hs_priority_name(enum hs_priority p)
{
    return p == HS_PRIORITY_BATCH ? "batch" : "interactive";
}

void hs_request_init(struct hs_request *r)
{
    atomic_init(&r->refs, 1);
    atomic_init(&r->pending, 0);
    atomic_init(&r->answered, 0);
    r->status = HS_STATUS_OK;
    r->msg[0] = '\0';
    r->retry_after_s = 0;
    r->lane = -1;
    r->batch_id = 0;
    r->predicted_s = 0;
    r->predicted_bias = 1;
    r->in_batch_timeout = 0;
    r->link = NULL;
    r->link_drop = 0;
    r->n_tokens = 0;
    for (int i = 0; i < r->n_seqs; i++) {
        r->seqs[i].req = r;
        r->seqs[i].index = i;
        r->seqs[i].queued = 0;
        r->seqs[i].next = r->seqs[i].prev = NULL;
        r->n_tokens += r->seqs[i].n_tokens;
    }
}

void hs_request_ref(struct hs_request *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void hs_request_unref(struct hs_request *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1 && r->release) r->release(r, r->ctx);
}

/* ---------------------------------------------------------------------------------------------
 * lanes
 */

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
 * terms; while they do not vary enough the fixed cost is taken as 0 (seconds per token only). */
struct cost_fit {
    double w, sp, st, spp, spt; /* sums of weights, P, T, P^2, P*T */
    double fixed_s, per_token_s;
    bool measured;
};

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
    /* the running batch's particulars, from batch_begin to batch_end */
    int run_b, run_n, run_shape_b;
    int64_t run_formed_ns, run_tokens;
    uint64_t run_batch_id;
    bool stepping; /* stepped scheduler: a batch is out with the simulator */
    bool gated;    /* holds the lane's entry (runner.gate) */
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

    double throughput; /* tokens/s estimate */
    bool measured;
    struct cost_fit fit[HS_SCHED_MAX_BUCKETS]; /* batch seconds vs padded tokens, per bucket */
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

/* The scheduler's clock: monotonic time, or a stepped scheduler's simulated time. */
static int64_t sched_now(const struct hs_sched *s)
{
    return s->stepped ? s->step_now : hs_now_ns();
}

static void cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_ns)
{
    if (at_ns == INT64_MAX) {
        pthread_cond_wait(c, m);
        return;
    }
    struct timespec ts = {.tv_sec = at_ns / 1000000000LL, .tv_nsec = at_ns % 1000000000LL};
    pthread_cond_timedwait(c, m, &ts);
}

static void list_push(struct list *l, struct hs_seq *q)
{
    q->next = NULL;
    q->prev = l->tail;
    if (l->tail)
        l->tail->next = q;
    else
        l->head = q;
    l->tail = q;
    l->n++;
    l->tokens += q->n_tokens;
}

static void list_remove(struct list *l, struct hs_seq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        l->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        l->tail = q->prev;
    q->next = q->prev = NULL;
    l->n--;
    l->tokens -= q->n_tokens;
}

/* Removes a queued sequence from its list and the lane's counters (lock held). */
static void lane_unqueue(struct lane *L, struct hs_seq *q)
{
    enum hs_priority p = q->req->priority;
    list_remove(&L->q[p][q->bucket], q);
    q->queued = 0;
    L->queued_seqs--;
    L->queued_by_prio[p]--;
    L->queued_tokens -= q->n_tokens;
    L->queued_tokens_by_prio[p] -= q->n_tokens;
}

/* Requests to notify after the lock is released, chained through r->link. link_drop bits:
 * 1 = call done, 2 = drop the scheduler's reference. */
struct chain {
    struct hs_request *head;
};

static void chain_add(struct chain *c, struct hs_request *r, int bits)
{
    if (!bits) return;
    if (!r->link_drop) {
        r->link = c->head;
        c->head = r;
    }
    r->link_drop |= bits;
}

static void chain_flush(struct chain *c)
{
    struct hs_request *r = c->head;
    c->head = NULL;
    while (r) {
        struct hs_request *next = r->link;
        int bits = r->link_drop;
        r->link = NULL;
        r->link_drop = 0;
        if ((bits & 1) && r->done) r->done(r, r->ctx);
        if (bits & 2) hs_request_unref(r);
        r = next;
    }
}

/* Fails r (lock held): claims the answer, removes every queued sequence of r. */
static void lane_fail_locked(struct lane *L, struct hs_request *r, hs_status st, double retry_s,
                             struct chain *c, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void lane_fail_locked(struct lane *L, struct hs_request *r, hs_status st, double retry_s,
                             struct chain *c, const char *fmt, ...)
{
    int bits = 0;
    int expect = 0;
    if (atomic_compare_exchange_strong(&r->answered, &expect, 1)) {
        r->status = st;
        r->retry_after_s = retry_s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->msg, sizeof r->msg, fmt, ap);
        va_end(ap);
        bits |= 1;
    }
    int removed = 0;
    for (int i = 0; i < r->n_seqs; i++) {
        if (r->seqs[i].queued) {
            lane_unqueue(L, &r->seqs[i]);
            removed++;
        }
    }
    if (removed && atomic_fetch_sub(&r->pending, removed) == removed) bits |= 2;
    chain_add(c, r, bits);
}

/* Shape of a batch of n real sequences from bucket b. */
static int lane_shape_batch(const struct lane *L, int b, int n)
{
    if (!L->n_sizes[b]) return n;
    for (int i = 0; i < L->n_sizes[b]; i++)
        if (L->sizes[b][i] >= n) return L->sizes[b][i];
    return n; /* unreachable: cap_seqs is itself an allowed size */
}

/* Predicted seconds of one batch of P real tokens from bucket b (lock held). Until the bucket
 * has run a batch, the lane's overall throughput (or the configured initial one) stands in.
 * Real tokens, not padded ones: the CPU engine computes ragged batches, and for an engine that
 * pads, a bucket's real and padded tokens differ by a steady factor the fit absorbs. */
static double lane_batch_s(const struct lane *L, int b, double tokens)
{
    const struct cost_fit *f = &L->fit[b];
    if (f->measured) return f->fixed_s + f->per_token_s * tokens;
    return L->throughput > 0 ? tokens / L->throughput : 0.0;
}

/* Learns from a batch of P real tokens that took t seconds (lock held). One observation moves
 * the line at most to 8x its prediction, so a single stalled batch (a preempted thread, a page
 * fault storm) cannot make the lane look hopeless; a lasting slowdown is still learned within a
 * few batches. */
static void fit_solve(struct cost_fit *f);

static void lane_learn(struct lane *L, int b, double padded, double t)
{
    struct cost_fit *f = &L->fit[b];
    if (f->measured) {
        double pred = f->fixed_s + f->per_token_s * padded;
        if (pred > 0 && t > 8 * pred) t = 8 * pred;
        double keep = 1.0 - L->o.throughput_ewma_alpha;
        f->w *= keep;
        f->sp *= keep;
        f->st *= keep;
        f->spp *= keep;
        f->spt *= keep;
    }
    f->w += 1;
    f->sp += padded;
    f->st += t;
    f->spp += padded * padded;
    f->spt += padded * t;
    f->measured = true;
    fit_solve(f);
}

/* The line through the fit's weighted sums (lock held). */
static void fit_solve(struct cost_fit *f)
{
    /* slope and intercept, when the batch sizes seen vary by more than ~10 % */
    double mean_p = f->sp / f->w, mean_t = f->st / f->w;
    double var_p = f->spp / f->w - mean_p * mean_p;
    double cov = f->spt / f->w - mean_p * mean_t;
    if (var_p > 0.01 * mean_p * mean_p && cov > 0) {
        double slope = cov / var_p, icept = mean_t - slope * mean_p;
        if (icept >= 0) {
            f->per_token_s = slope;
            f->fixed_s = icept;
            return;
        }
    }
    f->fixed_s = 0;
    f->per_token_s = f->sp > 0 ? f->st / f->sp : 0;
}

/* Predicted seconds to run n sequences of bucket b holding `tokens` real tokens, in the batches
 * the batcher cuts them into (at most cap_seqs each). */
static double lane_bucket_s(const struct lane *L, int b, int n, int64_t tokens)
{
    if (n <= 0) return 0;
    int batches = (n + L->cap_seqs[b] - 1) / L->cap_seqs[b];
    const struct cost_fit *f = &L->fit[b];
    if (f->measured) return batches * f->fixed_s + f->per_token_s * (double)tokens;
    return lane_batch_s(L, b, (double)tokens);
}

/* Predicted seconds until the work queued at priorities <= upto, plus own[b] more sequences per
 * bucket (own may be NULL), and the running batches are done, the slots sharing it (lock held).
 * A request of its own also waits for its batch to form: the batching window, unless its bucket
 * will hold a full batch. */
static double lane_backlog_s(const struct lane *L, int upto, const int *own,
                             const int64_t *own_tokens, int64_t now)
{
    double queued = 0, running = 0, window = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        int n = own ? own[b] : 0;
        int64_t tokens = own ? own_tokens[b] : 0;
        for (int p = 0; p <= upto && p < HS_PRIORITY_COUNT; p++) {
            n += L->q[p][b].n;
            tokens += L->q[p][b].tokens;
        }
        queued += lane_bucket_s(L, b, n, tokens);
        if (own && own[b] && n % L->cap_seqs[b]) window = L->o.batch_window_us * 1e-6;
    }
    for (int i = 0; i < L->n_slots; i++) {
        const struct slot *sl = &L->slots[i];
        if (!sl->run_start_ns) continue;
        double elapsed = (double)(now - sl->run_start_ns) / 1e9;
        /* A batch past its prediction (slow or hung engine) is assumed to need as long again;
         * before the lane's first measurement the configured initial speed is trusted. */
        if (elapsed < sl->run_pred_s)
            running += sl->run_pred_s - elapsed;
        else if (L->measured)
            running += elapsed;
    }
    return ((queued + running) / L->n_slots + window) * atomic_load(&L->pred_bias);
}

static int lane_bucket_of(const struct lane *L, int n_tokens)
{
    for (int b = 0; b < L->n_buckets; b++)
        if (n_tokens <= L->bucket_len[b]) return L->shape_seq[b] > 0 ? b : -1;
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * the batcher
 */

/* Picks the bucket to batch now (lock held): -1 when none is due; *wake gets the next due time. */
static int lane_pick(struct lane *L, int64_t now, bool draining, int64_t *wake)
{
    int best = -1, best_prio = HS_PRIORITY_COUNT;
    int64_t best_oldest = INT64_MAX;
    int64_t window_ns = (int64_t)L->o.batch_window_us * 1000;
    *wake = INT64_MAX;
    for (int b = 0; b < L->n_buckets; b++) {
        int count = 0, top = HS_PRIORITY_COUNT;
        int64_t oldest = INT64_MAX;
        for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
            struct list *l = &L->q[p][b];
            if (!l->n) continue;
            count += l->n;
            if (top == HS_PRIORITY_COUNT) top = p;
            if (l->head->enqueued_ns < oldest) oldest = l->head->enqueued_ns;
        }
        if (!count) continue;
        int64_t due = oldest + window_ns;
        if (count >= L->cap_seqs[b] || now >= due || draining) {
            if (top < best_prio || (top == best_prio && oldest < best_oldest)) {
                best = b;
                best_prio = top;
                best_oldest = oldest;
            }
        } else if (due < *wake) {
            *wake = due;
        }
    }
    return best;
}

/* Takes up to cap sequences of bucket b into the slot, interactive first, failing expired ones
 * (lock held). */
static int lane_take(struct lane *L, struct slot *sl, int b, int64_t now, struct chain *c)
{
    /* Under a backlog (this slot's previous batch was followed by this one at once), a request
     * that would still be in the batch at its deadline is answered now instead of spending
     * engine time on rows nobody will read (the batch's predicted duration, from the sequences
     * it is about to take). Not after an idle spell: that batch always runs, so that a
     * prediction gone wrong meets a measurement instead of refusing work forever. */
    int queued = 0;
    int64_t tokens = 0;
    for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
        queued += L->q[p][b].n;
        tokens += L->q[p][b].tokens;
    }
    if (queued > L->cap_seqs[b]) tokens = tokens * L->cap_seqs[b] / queued;
    double batch_s = lane_batch_s(L, b, (double)tokens);
    int64_t cutoff = now + (int64_t)(batch_s * 1e9);
    int n = 0;
    while (n < L->cap_seqs[b]) {
        struct hs_seq *q = NULL;
        for (int p = 0; p < HS_PRIORITY_COUNT && !q; p++) q = L->q[p][b].head;
        if (!q) break;
        struct hs_request *r = q->req;
        if (r->deadline_ns <= now) {
            lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                             "deadline passed while queued (waited %.1f ms)",
                             hs_ns_to_ms(now - q->enqueued_ns));
            continue;
        }
        if (r->deadline_ns < cutoff && sl->backlog_since_ns) {
            lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                             "deadline (%.1f ms away) would pass during its batch (predicted "
                             "%.1f ms; waited %.1f ms)",
                             hs_ns_to_ms(r->deadline_ns - now), batch_s * 1e3,
                             hs_ns_to_ms(now - q->enqueued_ns));
            continue;
        }
        lane_unqueue(L, q);
        sl->taken[n++] = q;
    }
    return n;
}

const double hs_sched_pred_bounds[HS_SCHED_PRED_BUCKETS] = {0.25, 0.5, 0.8, 1.25, 2, 4};

/* Whether a batch that has run ran_s seconds is the engine's fault when a deadline passes in it:
 * only past twice its prediction (a request that spent its time queued under overload and ran
 * out during a normal batch is the load's doing, and must not open the engine's breaker). */
static bool slot_overran(const struct slot *sl, double ran_s)
{
    return ran_s > 2 * sl->run_pred_s;
}

/* Compares an answered request's time in the scheduler with what admission predicted. */
static void lane_check_prediction(struct lane *L, const struct hs_request *r, int64_t now)
{
    if (r->predicted_s <= 0 || !r->ts[HS_TS_ENQUEUED]) return;
    double ratio = (double)(now - r->ts[HS_TS_ENQUEUED]) / 1e9 / r->predicted_s;
    if (ratio <= 0) return;
    /* the bias learns from the raw model's error: observed / (predicted / bias used) */
    double raw = ratio * r->predicted_bias, b = atomic_load(&L->pred_bias), nb;
    do {
        nb = b + 0.02 * (raw - b);
        nb = nb < 0.5 ? 0.5 : nb > 4 ? 4 : nb;
    } while (!atomic_compare_exchange_weak(&L->pred_bias, &b, nb));
    int i = 0;
    while (i < HS_SCHED_PRED_BUCKETS && ratio > hs_sched_pred_bounds[i]) i++;
    atomic_fetch_add(&L->pred_hist[i], 1);
    double x = fabs(log(ratio)), cur = atomic_load(&L->pred_log_abs_sum);
    while (!atomic_compare_exchange_weak(&L->pred_log_abs_sum, &cur, cur + x)) {
    }
}

/* Starts the batch of the n sequences the slot took from bucket b: its input arrays (none on a
 * stepped scheduler, which runs no engine), its id, and its start and predicted duration for the
 * predictor and the reaper. */
static void batch_begin(struct slot *sl, int b, int n, int64_t formed_ns, struct hs_batch *batch)
{
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    int shape_b = lane_shape_batch(L, b, n);
    int shape_s = L->shape_seq[b];
    int64_t tokens = 0;
    for (int i = 0; i < n; i++) tokens += sl->taken[i]->n_tokens;
    memset(batch, 0, sizeof *batch);
    if (!s->stepped) {
        int32_t off = 0;
        bool typed = false; /* some sequence has token types (a pair): the batch carries them */
        for (int i = 0; i < n; i++) typed |= sl->taken[i]->type_ids != NULL;
        for (int i = 0; i < shape_b; i++) {
            sl->offsets[i] = off;
            if (i < n) {
                struct hs_seq *q = sl->taken[i];
                memcpy(sl->ids + off, q->ids, (size_t)q->n_tokens * sizeof(int32_t));
                if (q->type_ids)
                    memcpy(sl->type_ids + off, q->type_ids, (size_t)q->n_tokens * sizeof(int32_t));
                else if (typed)
                    memset(sl->type_ids + off, 0, (size_t)q->n_tokens * sizeof(int32_t));
                sl->lengths[i] = q->n_tokens;
            } else {
                sl->ids[off] = L->o.pad_id;
                sl->type_ids[off] = 0;
                sl->lengths[i] = 1;
            }
            off += sl->lengths[i];
        }
        sl->offsets[shape_b] = off;
        *batch = (struct hs_batch){
            .n_seqs = shape_b,
            .seq_max = shape_s,
            .n_tokens = off,
            .ids = sl->ids,
            .type_ids = typed ? sl->type_ids : NULL,
            .lengths = sl->lengths,
            .offsets = sl->offsets,
        };
        batch->batch_class = n > 0;
        for (int i = 0; i < n; i++) { /* a remote engine's timeout and priority */
            if (!batch->deadline_ns || sl->taken[i]->req->deadline_ns < batch->deadline_ns)
                batch->deadline_ns = sl->taken[i]->req->deadline_ns;
            if (sl->taken[i]->req->priority != HS_PRIORITY_BATCH) batch->batch_class = 0;
        }
    }
    sl->run_b = b;
    sl->run_n = n;
    sl->run_shape_b = shape_b;
    sl->run_formed_ns = formed_ns;
    sl->run_tokens = tokens;
    sl->run_batch_id = atomic_fetch_add(&s->batch_seq, 1) + 1;
    pthread_mutex_lock(&L->mu);
    sl->run_start_ns = sched_now(s);
    sl->run_pred_s = lane_batch_s(L, b, (double)tokens);
    pthread_mutex_unlock(&L->mu);
}

/* Ends the slot's batch, which the engine finished at `end` with status st (t: its timing, err
 * its error): answers its requests, reports the batch, learns its cost. */
static void batch_end(struct slot *sl, int64_t end, hs_status st, const struct hs_batch_timing *t,
                      const struct hs_error *err)
{
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    const int b = sl->run_b, n = sl->run_n, shape_b = sl->run_shape_b, shape_s = L->shape_seq[b];
    const int64_t start = sl->run_start_ns, formed_ns = sl->run_formed_ns, tokens = sl->run_tokens;
    const uint64_t batch_id = sl->run_batch_id;
    sl->last_end_ns = end;

    int64_t copy_out_end = end;
    int64_t compute_end = end - t->copy_out_ns;
    int64_t copy_in_end = start + t->copy_in_ns;
    if (compute_end < start) compute_end = start;
    if (copy_in_end > compute_end) copy_in_end = compute_end;

    struct chain c = {NULL};
    if (st != HS_STATUS_OK) {
        if (st != HS_STATUS_SHUTDOWN)
            hs_log_error("lane %s/%s: batch %llu (%dx%d) failed: %s", L->engine, L->model,
                         (unsigned long long)batch_id, shape_b, shape_s, err->msg);
        pthread_mutex_lock(&L->mu);
        /* a runner that gave up at the deadline (a remote worker): blamed as the reaper's
         * in-batch timeouts are (slot_overran) */
        bool blame = st == HS_STATUS_TIMEOUT && slot_overran(sl, (double)(end - start) / 1e9);
        for (int i = 0; i < n; i++) {
            struct hs_request *r = sl->taken[i]->req;
            if (st == HS_STATUS_TIMEOUT && !atomic_load(&r->answered)) r->in_batch_timeout = blame;
            lane_fail_locked(L, r, st, 0, &c, "engine %s failed: %s", L->engine,
                             err->msg[0] ? err->msg : hs_status_str(st));
        }
        pthread_mutex_unlock(&L->mu);
        chain_flush(&c);
    }
    /* Under the lane's lock, as the reaper: a request the reaper already answered (deadline
     * passed during the batch) belongs to its HTTP thread from then on, so neither its result
     * nor its times are written; and once n_taken is 0 the reaper no longer reads sl->taken,
     * whose requests may be freed by the unrefs below. */
    struct hs_request **done_reqs = sl->done;
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < n; i++) {
        struct hs_seq *q = sl->taken[i];
        struct hs_request *r = q->req;
        done_reqs[i] = r;
        if (atomic_load(&r->answered)) continue;
        if (st == HS_STATUS_OK && r->out)
            memcpy(r->out + (size_t)q->index * (size_t)L->o.dim, sl->out + (size_t)i * L->o.dim,
                   (size_t)L->o.dim * sizeof(float));
        /* A multi-sequence request keeps the times of its last batch. */
        r->ts[HS_TS_BATCHED] = formed_ns;
        if (t->hop_ns > 0)
            r->ts[HS_TS_HOP] = start + (t->hop_ns < t->copy_in_ns ? t->hop_ns : t->copy_in_ns);
        r->ts[HS_TS_COPY_IN] = copy_in_end;
        r->ts[HS_TS_COMPUTE] = compute_end;
        r->ts[HS_TS_COPY_OUT] = copy_out_end;
        r->batch_id = batch_id;
        r->n_boundaries = t->n_boundaries;
        r->wait_ns = t->wait_ns;
        for (int k = 0; k < t->n_boundaries && k < HS_BATCH_MAX_BOUNDARIES; k++) {
            r->boundary_copy_ns[k] = t->boundary_copy_ns[k];
            r->boundary_sync_ns[k] = t->boundary_sync_ns[k];
        }
    }
    sl->n_taken = 0;
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i < n; i++) {
        struct hs_request *r = done_reqs[i];
        if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&r->answered, &expect, 1)) {
                r->status = HS_STATUS_OK;
                lane_check_prediction(L, r, sched_now(s));
                if (r->done) r->done(r, r->ctx);
            }
            hs_request_unref(r);
        }
    }

    if (s->obs.on_batch) {
        struct hs_batch_report rep = {
            .lane = L->idx,
            .slot = sl->idx,
            .batch_id = batch_id,
            .n_seqs = n,
            .shape_batch = shape_b,
            .shape_seq = shape_s,
            .tokens = tokens,
            .padded_tokens = (int64_t)shape_b * shape_s,
            .formed_ns = formed_ns,
            .copy_in_end_ns = copy_in_end,
            .compute_end_ns = compute_end,
            .copy_out_end_ns = copy_out_end,
            .status = st,
            .n_handovers = t->n_handovers,
            .handovers = t->handovers,
        };
        s->obs.on_batch(s->obs.ctx, &rep);
    }

    pthread_mutex_lock(&L->mu);
    sl->run_start_ns = 0;
    L->busy_ns += end - start;
    L->batches++;
    if (st == HS_STATUS_OK && end > start) {
        double a = L->o.throughput_ewma_alpha;
        double x = (double)tokens / ((double)(end - start) / 1e9);
        L->throughput = L->measured ? a * x + (1.0 - a) * L->throughput : x;
        L->measured = true;
        int64_t from =
            sl->backlog_since_ns && sl->backlog_since_ns < start ? sl->backlog_since_ns : start;
        lane_learn(L, b, (double)tokens, (double)(end - from) / 1e9);
    }
    pthread_mutex_unlock(&L->mu);
}

static void lane_run_batch(struct slot *sl, int b, int n, int64_t formed_ns)
{
    struct lane *L = sl->L;
    struct hs_batch batch;
    batch_begin(sl, b, n, formed_ns, &batch);
    struct hs_batch_timing t = {0};
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = L->o.runner.run(L->o.runner.ctx, sl->idx, &batch, sl->out, &t, &err);
    batch_end(sl, hs_now_ns(), st, &t, &err);
}

/* One step of a slot's batcher (lane lock held): picks the bucket due now and takes its
 * sequences into the slot, failing expired and doomed ones into c. Returns the sequences taken,
 * counted as running (0: every one failed; hand them to slot_done and try again), or -1 when
 * nothing is due: the slot is no longer under a backlog and *wake is the next time something
 * may be. */
static int slot_take(struct slot *sl, int64_t now, bool draining, int *bucket, int64_t *wake,
                     struct chain *c)
{
    struct lane *L = sl->L;
    int b = lane_pick(L, now, draining, wake);
    if (b < 0) {
        sl->backlog_since_ns = 0;
        return -1;
    }
    int n = lane_take(L, sl, b, now, c);
    sl->n_taken = n;
    L->running_seqs += n;
    L->running_batches += n > 0;
    *bucket = b;
    return n;
}

/* The slot's batch of n sequences is over (lane lock held): under a backlog from its end when
 * it ran one. */
static void slot_done(struct slot *sl, int n)
{
    struct lane *L = sl->L;
    L->running_seqs -= n;
    L->running_batches -= n > 0;
    sl->backlog_since_ns = n > 0 ? sl->last_end_ns : 0;
}

/* A batcher with nothing due (lane lock held): says the lane is idle when nothing is queued,
 * then sleeps until wake or new work. */
static void slot_idle_wait(struct lane *L, int64_t wake)
{
    if (!L->queued_seqs) pthread_cond_broadcast(&L->idle_cv);
    cond_wait_until(&L->cv, &L->mu, wake);
}

static void *lane_main(void *arg)
{
    struct slot *sl = arg;
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    const struct hs_runner *ru = &L->o.runner;
    pthread_mutex_lock(&L->mu);
    while (!L->stop) {
        int64_t now = hs_now_ns(), wake;
        struct chain c = {NULL};
        int b;
        /* a gated lane: hold its entry before forming a batch, once one is due */
        if (ru->gate && !sl->gated) {
            if (lane_pick(L, now, atomic_load(&s->draining), &wake) < 0) {
                sl->backlog_since_ns = 0;
                slot_idle_wait(L, wake);
                continue;
            }
            pthread_mutex_unlock(&L->mu);
            ru->gate(ru->ctx, sl->idx);
            pthread_mutex_lock(&L->mu);
            sl->gated = true;
            continue; /* what is due may have grown, or gone to another slot, meanwhile */
        }
        int n = slot_take(sl, now, atomic_load(&s->draining), &b, &wake, &c);
        if (n < 0) {
            if (sl->gated) { /* nothing left to form: the entry goes to the next slot */
                sl->gated = false;
                pthread_mutex_unlock(&L->mu);
                ru->ungate(ru->ctx, sl->idx);
                pthread_mutex_lock(&L->mu);
                continue;
            }
            slot_idle_wait(L, wake);
            continue;
        }
        const bool run = n > 0;
        if (run) sl->gated = false; /* the run takes the entry over */
        pthread_mutex_unlock(&L->mu);
        chain_flush(&c);
        if (run) lane_run_batch(sl, b, n, now);
        pthread_mutex_lock(&L->mu);
        slot_done(sl, n);
    }
    if (sl->gated) {
        sl->gated = false;
        pthread_mutex_unlock(&L->mu);
        ru->ungate(ru->ctx, sl->idx);
        pthread_mutex_lock(&L->mu);
    }
    pthread_cond_broadcast(&L->idle_cv);
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * the reaper: deadlines of queued sequences
 */

static int64_t lane_reap(struct lane *L, int64_t now, struct chain *c)
{
    int64_t next = INT64_MAX;
    pthread_mutex_lock(&L->mu);
    for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
        for (int b = 0; b < L->n_buckets; b++) {
        restart:
            for (struct hs_seq *q = L->q[p][b].head; q; q = q->next) {
                struct hs_request *r = q->req;
                if (r->deadline_ns <= now) {
                    lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                                     "deadline passed while queued (waited %.1f ms)",
                                     hs_ns_to_ms(now - q->enqueued_ns));
                    goto restart; /* the failure may have unlinked q's neighbours */
                }
                if (r->deadline_ns < next) next = r->deadline_ns;
            }
        }
    }
    /* Requests in a running batch: answered at their deadline even when the engine hangs; the
     * batch's rows for them are discarded when it finishes. */
    for (int i = 0; i < L->n_slots; i++) {
        struct slot *sl = &L->slots[i];
        for (int k = 0; k < sl->n_taken; k++) {
            struct hs_request *r = sl->taken[k]->req;
            if (atomic_load(&r->answered)) continue;
            if (r->deadline_ns <= now) {
                /* the engine's breaker hears of it only when the batch overran (slot_overran) */
                double ran_s = (double)(now - sl->run_start_ns) / 1e9;
                r->in_batch_timeout = slot_overran(sl, ran_s);
                lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                                 "deadline passed while engine %s ran its batch (%.1f ms%s)",
                                 L->engine, ran_s * 1e3,
                                 r->in_batch_timeout ? ", past twice its predicted time" : "");
            } else if (r->deadline_ns < next)
                next = r->deadline_ns;
        }
    }
    pthread_mutex_unlock(&L->mu);
    return next;
}

static void *reaper_main(void *arg)
{
    struct hs_sched *s = arg;
    pthread_mutex_lock(&s->rmu);
    while (!s->stop) {
        uint64_t kick = s->kick;
        pthread_mutex_unlock(&s->rmu);
        int64_t now = hs_now_ns(), next = INT64_MAX;
        for (int i = 0; i < s->n; i++) {
            struct chain c = {NULL};
            int64_t t = lane_reap(s->lanes[i], now, &c);
            chain_flush(&c);
            if (t < next) next = t;
        }
        pthread_mutex_lock(&s->rmu);
        if (s->stop) break;
        if (s->kick != kick) continue; /* a submit raced with the scan: look again */
        s->reap_at = next;
        cond_wait_until(&s->rcv, &s->rmu, next);
    }
    pthread_mutex_unlock(&s->rmu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * creation
 */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static hs_status lane_setup(struct lane *L, const struct hs_lane_opts *o, struct hs_error *err)
{
    L->o = *o;
    snprintf(L->engine, sizeof L->engine, "%s", o->engine ? o->engine : "engine");
    snprintf(L->model, sizeof L->model, "%s", o->model ? o->model : "model");
    L->o.engine = L->engine;
    L->o.model = L->model;
    if (!o->runner.run && !L->s->stepped)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "lane %s: no runner", L->engine);
    if (!o->runner.gate != !o->runner.ungate)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "lane %s: gate without ungate",
                            L->engine);
    if (o->dim <= 0 || o->seq_max <= 0 || o->batch_max <= 0 || o->batch_max_tokens <= 0 ||
        o->batch_window_us < 0 || o->queue_max <= 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "lane %s: dim, seq_max, batch_max, batch_max_tokens, queue_max must "
                            "be > 0 and batch_window_us >= 0",
                            L->engine);
    if (o->shed_batch_ratio <= 0 || o->shed_batch_ratio > 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "lane %s: shed_batch_ratio must be in (0, 1]", L->engine);
    if (o->throughput_init_tokens_per_s <= 0 || o->throughput_ewma_alpha <= 0 ||
        o->throughput_ewma_alpha > 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "lane %s: throughput_init_tokens_per_s must be > 0 and "
                            "throughput_ewma_alpha in (0, 1]",
                            L->engine);
    if (o->n_buckets < 0 || o->n_buckets > HS_SCHED_MAX_BUCKETS - 1 || o->n_shapes < 0 ||
        o->n_shapes > HS_SCHED_MAX_SHAPES)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "lane %s: too many buckets/shapes",
                            L->engine);

    /* buckets: ascending, capped at seq_max, seq_max appended */
    L->n_buckets = 0;
    for (int i = 0; i < o->n_buckets; i++) {
        int len = o->buckets[i];
        if (len <= 0 || (i > 0 && len <= o->buckets[i - 1]))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "lane %s: buckets must be positive and ascending", L->engine);
        if (len >= o->seq_max) break;
        L->bucket_len[L->n_buckets++] = len;
    }
    L->bucket_len[L->n_buckets++] = o->seq_max;
    if (o->n_shapes) {
        /* With a whitelist the buckets are its distinct sequence lengths: two buckets mapping
         * to one allowed length would only split batches that could run together. */
        int lens[HS_SCHED_MAX_SHAPES], n = 0;
        for (int i = 0; i < o->n_shapes; i++) {
            int sl = o->shapes[i].seq;
            if (o->shapes[i].batch <= 0 || sl <= 0)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "lane %s: whitelist shapes must be positive", L->engine);
            bool seen = false;
            for (int k = 0; k < n; k++) seen |= lens[k] == sl;
            if (!seen && sl <= o->seq_max) lens[n++] = sl;
        }
        qsort(lens, (size_t)n, sizeof(int), cmp_int);
        if (n > HS_SCHED_MAX_BUCKETS) n = HS_SCHED_MAX_BUCKETS;
        memcpy(L->bucket_len, lens, (size_t)n * sizeof(int));
        L->n_buckets = n;
    }

    int max_shape_tokens = 0;
    L->cap_batch = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        int len = L->bucket_len[b];
        if (!o->n_shapes) {
            L->shape_seq[b] = len;
            L->n_sizes[b] = 0;
            int cap = o->batch_max_tokens / len;
            if (cap > o->batch_max) cap = o->batch_max;
            if (cap < 1) cap = 1;
            L->cap_seqs[b] = cap;
        } else {
            int seq = len;
            L->shape_seq[b] = seq;
            L->n_sizes[b] = 0;
            for (int i = 0; i < o->n_shapes; i++)
                if (o->shapes[i].seq == seq) L->sizes[b][L->n_sizes[b]++] = o->shapes[i].batch;
            qsort(L->sizes[b], (size_t)L->n_sizes[b], sizeof(int), cmp_int);
            /* The largest allowed size within the batch limits; the whitelist wins when even
             * its smallest size exceeds them (the engine declared it can run it). */
            int cap = L->sizes[b][0];
            for (int i = 0; i < L->n_sizes[b]; i++) {
                int sz = L->sizes[b][i];
                if (sz <= o->batch_max && (int64_t)sz * seq <= o->batch_max_tokens) cap = sz;
            }
            L->cap_seqs[b] = cap;
        }
        int shape_b = L->n_sizes[b] ? L->sizes[b][L->n_sizes[b] - 1] : L->cap_seqs[b];
        if (shape_b > L->cap_batch) L->cap_batch = shape_b;
        if (shape_b * L->shape_seq[b] > max_shape_tokens)
            max_shape_tokens = shape_b * L->shape_seq[b];
    }
    if (L->cap_batch == 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "lane %s: no whitelisted shape fits any bucket", L->engine);
    L->cap_tokens = max_shape_tokens;
    if (o->slots < 0 || o->slots > HS_SCHED_MAX_SLOTS)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "lane %s: slots must be 0..%d",
                            L->engine, HS_SCHED_MAX_SLOTS);
    L->n_slots = o->slots > 0 ? o->slots : 1;
    L->o.slots = L->n_slots;
    L->slots = hs_calloc((size_t)L->n_slots, sizeof *L->slots);
    if (!L->slots) return hs_error_set(err, HS_STATUS_NO_MEMORY, "lane %s: slots", L->engine);
    for (int i = 0; i < L->n_slots; i++) {
        struct slot *sl = &L->slots[i];
        sl->L = L;
        sl->idx = i;
        sl->ids = hs_malloc((size_t)L->cap_tokens * sizeof(int32_t));
        sl->type_ids = hs_malloc((size_t)L->cap_tokens * sizeof(int32_t));
        sl->lengths = hs_malloc((size_t)L->cap_batch * sizeof(int32_t));
        sl->offsets = hs_malloc(((size_t)L->cap_batch + 1) * sizeof(int32_t));
        sl->out = hs_malloc((size_t)L->cap_batch * (size_t)o->dim * sizeof(float));
        sl->taken = hs_malloc((size_t)L->cap_batch * sizeof(*sl->taken));
        sl->done = hs_malloc((size_t)L->cap_batch * sizeof(*sl->done));
        if (!sl->ids || !sl->type_ids || !sl->lengths || !sl->offsets || !sl->out || !sl->taken ||
            !sl->done)
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "lane %s: batch buffers", L->engine);
    }
    L->throughput = o->throughput_init_tokens_per_s;
    atomic_init(&L->pred_bias, 1.0);
    L->started_ns = sched_now(L->s);
    return HS_STATUS_OK;
}

static void lane_free(struct lane *L)
{
    if (!L) return;
    for (int i = 0; L->slots && i < L->n_slots; i++) {
        struct slot *sl = &L->slots[i];
        hs_free(sl->ids);
        hs_free(sl->type_ids);
        hs_free(sl->lengths);
        hs_free(sl->offsets);
        hs_free(sl->out);
        hs_free(sl->taken);
        hs_free(sl->done);
    }
    hs_free(L->slots);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    pthread_cond_destroy(&L->idle_cv);
    hs_free(L);
}

static hs_status sched_create(const struct hs_lane_opts *lanes, int n,
                              const struct hs_sched_observer *observer, bool stepped,
                              int64_t now_ns, struct hs_sched **out, struct hs_error *err)
{
    *out = NULL;
    if (n <= 0 || n > HS_SCHED_MAX_LANES)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "scheduler: %d lanes (1..%d)", n,
                            HS_SCHED_MAX_LANES);
    struct hs_sched *s = hs_calloc(1, sizeof *s);
    if (!s) return hs_error_set(err, HS_STATUS_NO_MEMORY, "scheduler");
    if (observer) s->obs = *observer;
    s->stepped = stepped;
    s->step_now = now_ns;
    atomic_init(&s->draining, false);
    atomic_init(&s->batch_seq, 0);
    pthread_mutex_init(&s->rmu, NULL);
    cond_init_monotonic(&s->rcv);
    s->reap_at = INT64_MAX;
    hs_status st = HS_STATUS_OK;
    for (int i = 0; i < n; i++) {
        struct lane *L = hs_calloc(1, sizeof *L);
        if (!L) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "scheduler lane");
            break;
        }
        L->s = s;
        L->idx = i;
        pthread_mutex_init(&L->mu, NULL);
        cond_init_monotonic(&L->cv);
        cond_init_monotonic(&L->idle_cv);
        s->lanes[s->n++] = L;
        st = lane_setup(L, &lanes[i], err);
        if (st != HS_STATUS_OK) break;
    }
    for (int i = 0; st == HS_STATUS_OK && !stepped && i < s->n; i++) {
        struct lane *L = s->lanes[i];
        for (int k = 0; st == HS_STATUS_OK && k < L->n_slots; k++) {
            if (pthread_create(&L->slots[k].thread, NULL, lane_main, &L->slots[k]) != 0)
                st =
                    hs_error_set(err, HS_STATUS_INTERNAL, "scheduler: cannot start batcher thread");
            else
                L->slots[k].started = true;
        }
    }
    if (st == HS_STATUS_OK && !stepped) {
        if (pthread_create(&s->reaper, NULL, reaper_main, s) != 0)
            st = hs_error_set(err, HS_STATUS_INTERNAL, "scheduler: cannot start reaper thread");
        else
            s->reaper_started = true;
    }
    if (st != HS_STATUS_OK) {
        hs_sched_destroy(s);
        return st;
    }
    *out = s;
    return HS_STATUS_OK;
}

hs_status hs_sched_create(const struct hs_lane_opts *lanes, int n,
                          const struct hs_sched_observer *observer, struct hs_sched **out,
                          struct hs_error *err)
{
    return sched_create(lanes, n, observer, false, 0, out, err);
}

hs_status hs_sched_create_stepped(const struct hs_lane_opts *lanes, int n,
                                  const struct hs_sched_observer *observer, int64_t now_ns,
                                  struct hs_sched **out, struct hs_error *err)
{
    if (now_ns <= 0) {
        *out = NULL;
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "stepped scheduler: clock must start > 0");
    }
    return sched_create(lanes, n, observer, true, now_ns, out, err);
}

/* Answers every queued request of L, and with running those of its running batches not yet
 * answered, HS_STATUS_SHUTDOWN with msg. */
static void lane_answer_all(struct lane *L, bool running, const char *msg)
{
    struct chain c = {NULL};
    pthread_mutex_lock(&L->mu);
    for (int p = 0; p < HS_PRIORITY_COUNT; p++)
        for (int b = 0; b < L->n_buckets; b++)
            while (L->q[p][b].head)
                lane_fail_locked(L, L->q[p][b].head->req, HS_STATUS_SHUTDOWN, 0, &c, "%s", msg);
    for (int k = 0; running && L->slots && k < L->n_slots; k++) {
        struct slot *sl = &L->slots[k];
        for (int q = 0; q < sl->n_taken; q++)
            if (!atomic_load(&sl->taken[q]->req->answered))
                lane_fail_locked(L, sl->taken[q]->req, HS_STATUS_SHUTDOWN, 0, &c, "%s", msg);
    }
    pthread_mutex_unlock(&L->mu);
    chain_flush(&c);
}

void hs_sched_destroy(struct hs_sched *s)
{
    if (!s) return;
    atomic_store(&s->draining, true);
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        pthread_mutex_lock(&L->mu);
        L->stop = true;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
    }
    /* A batcher inside a hung engine call never returns: each gets until a common deadline,
     * then is left running, detached, with its lane (and the scheduler) never freed, and the
     * requests of its batch are answered here. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HS_SCHED_STOP_WAIT_MS / 1000;
    until.tv_nsec += (long)(HS_SCHED_STOP_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    bool abandoned_any = false;
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        for (int k = 0; L->slots && k < L->n_slots; k++) {
            struct slot *sl = &L->slots[k];
            if (!sl->started) continue;
            if (pthread_timedjoin_np(sl->thread, NULL, &until) == 0) continue;
            pthread_detach(sl->thread);
            L->abandoned = true;
            abandoned_any = true;
            struct chain c = {NULL};
            pthread_mutex_lock(&L->mu);
            hs_log_error("lane %s/%s: a batch is still running %d ms after shutdown began; its "
                         "engine is abandoned",
                         L->engine, L->model, HS_SCHED_STOP_WAIT_MS);
            for (int q = 0; q < sl->n_taken; q++)
                lane_fail_locked(L, sl->taken[q]->req, HS_STATUS_SHUTDOWN, 0, &c,
                                 "server shutting down while engine %s was hung", L->engine);
            pthread_mutex_unlock(&L->mu);
            chain_flush(&c);
        }
    }
    pthread_mutex_lock(&s->rmu);
    s->stop = true;
    pthread_cond_broadcast(&s->rcv);
    pthread_mutex_unlock(&s->rmu);
    if (s->reaper_started) pthread_join(s->reaper, NULL);
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        for (int k = 0; s->stepped && k < L->n_slots; k++)
            if (L->slots[k].stepping) {
                struct hs_error e;
                hs_error_set(&e, HS_STATUS_SHUTDOWN, "scheduler destroyed");
                L->slots[k].stepping = false;
                batch_end(&L->slots[k], s->step_now, HS_STATUS_SHUTDOWN,
                          &(struct hs_batch_timing){0}, &e);
            }
        lane_answer_all(L, false, "server shutting down");
        if (!L->abandoned) lane_free(L);
    }
    if (abandoned_any) return; /* its threads may still read the scheduler */
    pthread_mutex_destroy(&s->rmu);
    pthread_cond_destroy(&s->rcv);
    hs_free(s);
}

/* ---------------------------------------------------------------------------------------------
 * routing and admission
 */

/* Predicted seconds until r would be answered on L (lock held); -1 when it does not fit. */
static double lane_predict_locked(const struct lane *L, const struct hs_request *r, int64_t now)
{
    int own[HS_SCHED_MAX_BUCKETS] = {0};
    int64_t own_tokens[HS_SCHED_MAX_BUCKETS] = {0};
    for (int i = 0; i < r->n_seqs; i++) {
        int len = r->seqs[i].n_tokens;
        int b = len >= 1 && len <= L->o.seq_max ? lane_bucket_of(L, len) : -1;
        if (b < 0) return -1;
        own[b]++;
        own_tokens[b] += len;
    }
    int upto = (unsigned)r->priority < HS_PRIORITY_COUNT ? (int)r->priority : 0;
    return lane_backlog_s(L, upto, own, own_tokens, now);
}

double hs_sched_lane_predict(struct hs_sched *s, int lane, const struct hs_request *r, bool *fits)
{
    if (lane < 0 || lane >= s->n) {
        if (fits) *fits = false;
        return 0;
    }
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    double w = lane_predict_locked(L, r, sched_now(s));
    pthread_mutex_unlock(&L->mu);
    if (fits) *fits = w >= 0;
    return w < 0 ? 0 : w;
}

hs_status hs_sched_lane_seed(struct hs_sched *s, int lane, int seq_len, double tokens1, double t1_s,
                             double tokens2, double t2_s)
{
    if (lane < 0 || lane >= s->n || !(tokens1 > 0) || !(tokens2 > tokens1) || !(t1_s > 0) ||
        !(t2_s > 0))
        return HS_STATUS_INVALID_ARGUMENT;
    struct lane *L = s->lanes[lane];
    int b = 0;
    while (b < L->n_buckets && L->bucket_len[b] != seq_len) b++;
    if (b == L->n_buckets) return HS_STATUS_NOT_FOUND;
    pthread_mutex_lock(&L->mu);
    struct cost_fit *f = &L->fit[b];
    /* two observations of weight 1/2: the first real batch (weight 1) outweighs them */
    f->w = 1;
    f->sp = 0.5 * (tokens1 + tokens2);
    f->st = 0.5 * (t1_s + t2_s);
    f->spp = 0.5 * (tokens1 * tokens1 + tokens2 * tokens2);
    f->spt = 0.5 * (tokens1 * t1_s + tokens2 * t2_s);
    f->measured = true;
    fit_solve(f);
    pthread_mutex_unlock(&L->mu);
    return HS_STATUS_OK;
}

void hs_sched_lane_fit(struct hs_sched *s, int lane, int seq_len, double *fixed_s,
                       double *per_token_s)
{
    *fixed_s = *per_token_s = 0;
    if (lane < 0 || lane >= s->n) return;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    for (int b = 0; b < L->n_buckets; b++)
        if (L->bucket_len[b] == seq_len && L->fit[b].measured) {
            *fixed_s = L->fit[b].fixed_s;
            *per_token_s = L->fit[b].per_token_s;
        }
    pthread_mutex_unlock(&L->mu);
}

bool hs_sched_lane_idle(struct hs_sched *s, int lane)
{
    if (lane < 0 || lane >= s->n) return false;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    bool idle = !L->queued_seqs && !L->running_batches;
    pthread_mutex_unlock(&L->mu);
    return idle;
}

double hs_sched_lane_drain_s(struct hs_sched *s, int lane)
{
    if (lane < 0 || lane >= s->n) return 0;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    double w = lane_backlog_s(L, HS_PRIORITY_COUNT - 1, NULL, NULL, sched_now(s));
    pthread_mutex_unlock(&L->mu);
    return w;
}

/* The router-less choice: among lanes serving r's model, the earliest predicted completion. */
static int route(struct hs_sched *s, const struct hs_request *r)
{
    int best = -1;
    double best_wait = 0;
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        if (r->model && strcmp(r->model, L->model) != 0) continue;
        bool fits;
        double w = hs_sched_lane_predict(s, i, r, &fits);
        if (!fits) w = 1e30; /* still a candidate: submit names what does not fit */
        if (best < 0 || w < best_wait) {
            best = i;
            best_wait = w;
        }
    }
    return best;
}

static hs_status reject(struct hs_request *r, hs_status st, double retry_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static hs_status reject(struct hs_request *r, hs_status st, double retry_s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->status = st;
    r->retry_after_s = retry_s;
    return st;
}

/* Evicts the newest batch-class request (lock held); false when there is none. */
static bool lane_evict_one(struct lane *L, struct chain *c)
{
    struct hs_seq *victim = NULL;
    for (int b = 0; b < L->n_buckets; b++) {
        struct hs_seq *q = L->q[HS_PRIORITY_BATCH][b].tail;
        if (q && (!victim || q->enqueued_ns > victim->enqueued_ns)) victim = q;
    }
    if (!victim) return false;
    double retry = lane_backlog_s(L, HS_PRIORITY_COUNT - 1, NULL, NULL, sched_now(L->s));
    lane_fail_locked(L, victim->req, HS_STATUS_OVERLOADED, retry, c,
                     "shed under overload to make room for interactive requests");
    return true;
}

hs_status hs_sched_submit(struct hs_sched *s, struct hs_request *r)
{
    if ((unsigned)r->priority >= HS_PRIORITY_COUNT) r->priority = HS_PRIORITY_INTERACTIVE;
    int li = route(s, r);
    if (li < 0)
        return reject(r, HS_STATUS_NOT_FOUND, 0, "no engine serves model '%s'",
                      r->model ? r->model : "");
    return hs_sched_submit_lane(s, li, r);
}

hs_status hs_sched_submit_lane(struct hs_sched *s, int li, struct hs_request *r)
{
    int64_t now = sched_now(s);
    if (atomic_load(&s->draining))
        return reject(r, HS_STATUS_SHUTDOWN, 0, "server is shutting down");
    if ((unsigned)r->priority >= HS_PRIORITY_COUNT) r->priority = HS_PRIORITY_INTERACTIVE;
    if (li < 0 || li >= s->n) return reject(r, HS_STATUS_NOT_FOUND, 0, "no engine lane %d", li);
    struct lane *L = s->lanes[li];
    r->lane = li;
    r->ts[HS_TS_ROUTED] = now;
    if (r->n_seqs <= 0) return reject(r, HS_STATUS_INVALID_INPUT, 0, "request has no input");
    for (int i = 0; i < r->n_seqs; i++) {
        int len = r->seqs[i].n_tokens;
        if (len < 1) return reject(r, HS_STATUS_INVALID_INPUT, 0, "input %d is empty", i);
        if (len > L->o.seq_max)
            return reject(r, HS_STATUS_TOO_LONG, 0,
                          "input %d has %d tokens; model %s takes at most %d", i, len, L->model,
                          L->o.seq_max);
        int b = lane_bucket_of(L, len);
        if (b < 0)
            return reject(r, HS_STATUS_TOO_LONG, 0,
                          "input %d has %d tokens; no shape engine %s allows fits it", i, len,
                          L->engine);
        r->seqs[i].bucket = b;
    }
    if (r->deadline_ns <= now)
        return reject(r, HS_STATUS_TIMEOUT, 0, "deadline passed before the request was queued");
    if (r->n_seqs > L->o.queue_max)
        return reject(r, HS_STATUS_OVERLOADED, 0,
                      "request has %d inputs; the queue holds at most %d", r->n_seqs,
                      L->o.queue_max);

    struct chain c = {NULL};
    hs_status st = HS_STATUS_OK;
    pthread_mutex_lock(&L->mu);
    int limit = L->o.queue_max;
    if (r->priority == HS_PRIORITY_BATCH) {
        limit = (int)(L->o.queue_max * L->o.shed_batch_ratio);
        if (limit < 1) limit = 1;
    } else {
        while (L->queued_seqs + r->n_seqs > limit && lane_evict_one(L, &c)) {
        }
    }
    double wait_s = lane_predict_locked(L, r, now);
    /* Retry-After: until everything queued, this request included, has run. */
    double drain_s = lane_backlog_s(L, HS_PRIORITY_COUNT - 1, NULL, NULL, now);
    if (drain_s < wait_s) drain_s = wait_s;
    /* An idle lane takes any request that fits: it is the only way a prediction that went wrong
     * (a stalled batch, a changed machine) is corrected, by running a batch and measuring it. */
    bool idle = !L->queued_seqs && !L->running_batches;
    double wait_max_s = L->o.wait_max_ms > 0 ? L->o.wait_max_ms * 1e-3 : 0;
    if (L->queued_seqs + r->n_seqs > limit) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s,
                    "queue full (%d of %d sequences queued for %s)", L->queued_seqs, limit,
                    L->engine);
    } else if (!idle && now + (int64_t)(wait_s * 1e9) > r->deadline_ns) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s,
                    "predicted wait %.0f ms exceeds the deadline (%.0f ms left)", wait_s * 1e3,
                    hs_ns_to_ms(r->deadline_ns - now));
    } else if (!idle && wait_max_s > 0 && wait_s > wait_max_s) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s - wait_max_s,
                    "predicted wait %.0f ms exceeds the admission limit of %d ms on %s",
                    wait_s * 1e3, L->o.wait_max_ms, L->engine);
    } else {
        r->predicted_s = wait_s;
        r->predicted_bias = atomic_load(&L->pred_bias);
        atomic_store(&r->pending, r->n_seqs);
        atomic_store(&r->answered, 0);
        hs_request_ref(r);
        r->ts[HS_TS_ENQUEUED] = sched_now(s);
        for (int i = 0; i < r->n_seqs; i++) {
            struct hs_seq *q = &r->seqs[i];
            q->enqueued_ns = now;
            q->queued = 1;
            list_push(&L->q[r->priority][q->bucket], q);
            L->queued_seqs++;
            L->queued_by_prio[r->priority]++;
            L->queued_tokens += q->n_tokens;
            L->queued_tokens_by_prio[r->priority] += q->n_tokens;
        }
        if (L->n_slots > 1)
            pthread_cond_broadcast(&L->cv);
        else
            pthread_cond_signal(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    chain_flush(&c);
    if (st != HS_STATUS_OK) return st;

    pthread_mutex_lock(&s->rmu);
    s->kick++;
    if (r->deadline_ns < s->reap_at) {
        s->reap_at = r->deadline_ns;
        pthread_cond_signal(&s->rcv);
    }
    pthread_mutex_unlock(&s->rmu);
    return HS_STATUS_OK;
}

hs_status hs_sched_drain(struct hs_sched *s, int timeout_ms)
{
    atomic_store(&s->draining, true);
    int64_t until = timeout_ms < 0 ? INT64_MAX : hs_now_ns() + (int64_t)timeout_ms * 1000000;
    hs_status st = HS_STATUS_OK;
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        pthread_mutex_lock(&L->mu);
        pthread_cond_broadcast(&L->cv);
        while ((L->queued_seqs || L->running_seqs) && !L->stop) {
            if (hs_now_ns() >= until) {
                st = HS_STATUS_TIMEOUT;
                break;
            }
            cond_wait_until(&L->idle_cv, &L->mu, until);
        }
        pthread_mutex_unlock(&L->mu);
    }
    return st;
}

void hs_sched_abort(struct hs_sched *s, const char *msg)
{
    atomic_store(&s->draining, true);
    for (int i = 0; i < s->n; i++) lane_answer_all(s->lanes[i], true, msg);
}

/* ---------------------------------------------------------------------------------------------
 * introspection
 */

int hs_sched_lane_count(const struct hs_sched *s)
{
    return s->n;
}

const struct hs_lane_opts *hs_sched_lane_opts(const struct hs_sched *s, int lane)
{
    return lane >= 0 && lane < s->n ? &s->lanes[lane]->o : NULL;
}

void hs_sched_lane_stats(struct hs_sched *s, int lane, struct hs_lane_stats *out)
{
    memset(out, 0, sizeof *out);
    if (lane < 0 || lane >= s->n) return;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    out->queued_seqs = L->queued_seqs;
    out->queued_tokens = L->queued_tokens;
    out->running_seqs = L->running_seqs;
    out->running_batches = L->running_batches;
    out->throughput_tokens_per_s = L->throughput;
    out->busy_ns = L->busy_ns;
    out->batches = L->batches;
    out->started_ns = L->started_ns;
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i <= HS_SCHED_PRED_BUCKETS; i++) {
        out->pred_count[i] = atomic_load(&L->pred_hist[i]);
        out->pred_total += out->pred_count[i];
    }
    out->pred_log_abs_sum = atomic_load(&L->pred_log_abs_sum);
    out->pred_bias = atomic_load(&L->pred_bias);
}

int hs_sched_lane_seq_shape(const struct hs_sched *s, int lane, int n_tokens)
{
    if (lane < 0 || lane >= s->n || n_tokens < 1) return 0;
    const struct lane *L = s->lanes[lane];
    if (n_tokens > L->o.seq_max) return 0;
    int b = lane_bucket_of(L, n_tokens);
    return b < 0 ? 0 : L->shape_seq[b];
}

/* ---------------------------------------------------------------------------------------------
 * stepped: the scheduler driven by a discrete-event simulation
 */

void hs_sched_step_clock(struct hs_sched *s, int64_t now_ns)
{
    if (s->stepped && now_ns > s->step_now) s->step_now = now_ns;
}

int64_t hs_sched_now(const struct hs_sched *s)
{
    return sched_now(s);
}

bool hs_sched_step_begin(struct hs_sched *s, struct hs_sched_step *out, int64_t *wake)
{
    *wake = INT64_MAX;
    if (!s->stepped) return false;
    const int64_t now = s->step_now;
    const bool draining = atomic_load(&s->draining);
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        const struct hs_runner *ru = &L->o.runner;
        for (int k = 0; k < L->n_slots; k++) {
            struct slot *sl = &L->slots[k];
            if (sl->stepping) continue;
            /* a gated lane forms a batch only when one could start now: the simulation says
             * when its entry frees (an event, after which this is asked again) */
            if (ru->gate_open && !ru->gate_open(ru->ctx)) break;
            /* as a batcher thread's loop (lane_main) */
            for (;;) {
                int64_t due;
                struct chain c = {NULL};
                int b;
                pthread_mutex_lock(&L->mu);
                int n = slot_take(sl, now, draining, &b, &due, &c);
                if (n == 0) slot_done(sl, 0);
                pthread_mutex_unlock(&L->mu);
                chain_flush(&c);
                if (n < 0) {
                    if (due < *wake) *wake = due;
                    break;
                }
                if (n == 0) continue;
                struct hs_batch batch;
                batch_begin(sl, b, n, now, &batch);
                sl->stepping = true;
                *out = (struct hs_sched_step){
                    .lane = i,
                    .slot = k,
                    .n_seqs = n,
                    .shape_batch = sl->run_shape_b,
                    .shape_seq = L->shape_seq[b],
                    .tokens = sl->run_tokens,
                    .predicted_s = sl->run_pred_s,
                };
                return true;
            }
        }
    }
    return false;
}

void hs_sched_step_end(struct hs_sched *s, int lane, int slot, hs_status st,
                       const struct hs_batch_timing *t)
{
    if (!s->stepped || lane < 0 || lane >= s->n) return;
    struct lane *L = s->lanes[lane];
    if (slot < 0 || slot >= L->n_slots || !L->slots[slot].stepping) return;
    struct slot *sl = &L->slots[slot];
    struct hs_error err;
    hs_error_clear(&err);
    if (st != HS_STATUS_OK) hs_error_set(&err, st, "simulated failure");
    sl->stepping = false;
    const int n = sl->run_n;
    batch_end(sl, s->step_now, st, t ? t : &(struct hs_batch_timing){0}, &err);
    pthread_mutex_lock(&L->mu);
    slot_done(sl, n);
    pthread_mutex_unlock(&L->mu);
}

int64_t hs_sched_step_reap(struct hs_sched *s)
{
    int64_t next = INT64_MAX;
    for (int i = 0; s->stepped && i < s->n; i++) {
        struct chain c = {NULL};
        int64_t t = lane_reap(s->lanes[i], s->step_now, &c);
        chain_flush(&c);
        if (t < next) next = t;
    }
    return next;
}
