/* The scheduler's lifecycle: lanes from their options, threads, drain, shutdown, and the
 * stats calls (sched.h). */
#include "sched/sched-impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

/* The scheduler's clock: monotonic time, or a stepped scheduler's simulated time. */
int64_t hs__sched_now(const struct hs_sched *s)
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

void hs__cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_ns)
{
    if (at_ns == INT64_MAX) {
        pthread_cond_wait(c, m);
        return;
    }
    struct timespec ts = {.tv_sec = at_ns / 1000000000LL, .tv_nsec = at_ns % 1000000000LL};
    pthread_cond_timedwait(c, m, &ts);
}

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
    /* preemption: one more slot, the last; not simulated (a stepped scheduler runs no stages) */
    L->preempt_slot = -1;
    L->o.preempt = o->preempt && o->fair && !L->s->stepped;
    if (L->o.preempt) {
        if (o->runner.gate)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "lane %s: preempt with a gated runner (a pipelined split)",
                                L->engine);
        if (L->n_slots + 1 > HS_SCHED_MAX_SLOTS)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "lane %s: preempt needs slots < %d (one more slot)", L->engine,
                                HS_SCHED_MAX_SLOTS);
        L->preempt_slot = L->n_slots++;
    }
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
    L->started_ns = hs__sched_now(L->s);
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
            if (pthread_create(&L->slots[k].thread, NULL, hs__lane_main, &L->slots[k]) != 0)
                st =
                    hs_error_set(err, HS_STATUS_INTERNAL, "scheduler: cannot start batcher thread");
            else
                L->slots[k].started = true;
        }
    }
    if (st == HS_STATUS_OK && !stepped) {
        if (pthread_create(&s->reaper, NULL, hs__reaper_main, s) != 0)
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
                hs__lane_fail_locked(L, L->q[p][b].head->req, HS_STATUS_SHUTDOWN, 0, &c, "%s", msg);
    for (int k = 0; running && L->slots && k < L->n_slots; k++) {
        struct slot *sl = &L->slots[k];
        for (int q = 0; q < sl->n_taken; q++)
            if (!atomic_load(&sl->taken[q]->req->answered))
                hs__lane_fail_locked(L, sl->taken[q]->req, HS_STATUS_SHUTDOWN, 0, &c, "%s", msg);
    }
    pthread_mutex_unlock(&L->mu);
    hs__chain_flush(&c);
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
                hs__lane_fail_locked(L, sl->taken[q]->req, HS_STATUS_SHUTDOWN, 0, &c,
                                     "server shutting down while engine %s was hung", L->engine);
            pthread_mutex_unlock(&L->mu);
            hs__chain_flush(&c);
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
                hs__batch_end(&L->slots[k], s->step_now, HS_STATUS_SHUTDOWN,
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
            hs__cond_wait_until(&L->idle_cv, &L->mu, until);
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
    out->preempt_batches = L->preempt_batches;
    out->paused_ns = L->paused_ns;
    out->paused_max_ns = L->paused_max_ns;
    out->preempt_wait_ns = L->preempt_wait_ns;
    out->preempt_wait_max_ns = L->preempt_wait_max_ns;
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
    int b = hs__lane_bucket_of(L, n_tokens);
    return b < 0 ? 0 : L->shape_seq[b];
}

int64_t hs_sched_now(const struct hs_sched *s)
{
    return hs__sched_now(s);
}
