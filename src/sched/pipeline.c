/* Pipelines of stages with bounded queues (see pipeline.h). */
#include "sched/pipeline.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"

struct slot {
    void *item;
    int64_t deadline_ns;
    int64_t enq_ns;
};

struct stage {
    struct hs_pipeline_stage spec;
    struct hs_pipeline *p;
    int index;
    struct slot *ring; /* queue_max slots */
    int head, count;
    pthread_cond_t not_empty, not_full;
    pthread_t *threads;
    int n_threads;
    int stop; /* set by destroy once the stages before have stopped: exit when empty */
    struct hs_pipeline_stage_stats stats;
};

struct hs_pipeline {
    pthread_mutex_t mu; /* guards every queue, the stats and stopping */
    int n;
    struct stage st[HS_PIPELINE_MAX_STAGES];
    hs_pipeline_done_fn done;
    void *done_ctx;
    int stopping;
};

static void timespec_at(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

static void cond_init(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

/* queue operations, under p->mu */
static void q_push(struct stage *s, void *item, int64_t deadline_ns)
{
    const int i = (s->head + s->count) % s->spec.queue_max;
    s->ring[i] = (struct slot){item, deadline_ns, hs_now_ns()};
    s->count++;
    pthread_cond_signal(&s->not_empty);
}

static struct slot q_pop(struct stage *s)
{
    struct slot x = s->ring[s->head];
    s->head = (s->head + 1) % s->spec.queue_max;
    s->count--;
    pthread_cond_signal(&s->not_full);
    return x;
}

static void finish(struct hs_pipeline *p, void *item, hs_status s, const struct hs_error *err)
{
    p->done(p->done_ctx, item, s, err);
}

static void *worker(void *arg)
{
    struct stage *s = arg;
    struct hs_pipeline *p = s->p;
    struct slot batch[HS_PIPELINE_MAX_BATCH];
    void *items[HS_PIPELINE_MAX_BATCH];
    hs_status st[HS_PIPELINE_MAX_BATCH];
    struct hs_error *errs = hs_calloc(HS_PIPELINE_MAX_BATCH, sizeof *errs);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!s->count && !s->stop) pthread_cond_wait(&s->not_empty, &p->mu);
        if (!s->count && s->stop) break;
        /* one in hand: wait up to the window for a fuller batch */
        if (s->spec.window_us > 0 && s->count < s->spec.batch_max && !s->stop) {
            struct timespec ts;
            timespec_at(hs_now_ns() + s->spec.window_us * 1000, &ts);
            while (s->count < s->spec.batch_max && !s->stop &&
                   pthread_cond_timedwait(&s->not_empty, &p->mu, &ts) == 0) {
            }
        }
        int n = 0;
        const int64_t now = hs_now_ns();
        while (s->count && n < s->spec.batch_max) {
            struct slot x = q_pop(s);
            s->stats.queue_ns += now - x.enq_ns;
            if (x.deadline_ns && now > x.deadline_ns) { /* late: ends here, named */
                s->stats.items_failed++;
                struct hs_error e;
                hs_error_set(&e, HS_STATUS_TIMEOUT, "deadline passed waiting for stage %s",
                             s->spec.name);
                pthread_mutex_unlock(&p->mu);
                finish(p, x.item, HS_STATUS_TIMEOUT, &e);
                pthread_mutex_lock(&p->mu);
                continue;
            }
            batch[n] = x;
            items[n++] = x.item;
        }
        if (!n) continue;
        s->stats.items_in += n;
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < n; i++) {
            st[i] = HS_STATUS_OK;
            if (errs) hs_error_clear(&errs[i]);
        }
        const int64_t t0 = hs_now_ns();
        if (errs) {
            s->spec.run(s->spec.ctx, items, n, st, errs);
        } else {
            for (int i = 0; i < n; i++) st[i] = HS_STATUS_NO_MEMORY;
        }
        const int64_t dt = hs_now_ns() - t0;
        pthread_mutex_lock(&p->mu);
        s->stats.batches++;
        s->stats.batch_items += n;
        if (n > s->stats.batch_size_max) s->stats.batch_size_max = n;
        s->stats.run_ns += dt;
        struct stage *next = s->index + 1 < p->n ? &p->st[s->index + 1] : NULL;
        for (int i = 0; i < n; i++) {
            if (st[i] != HS_STATUS_OK || !next) {
                if (st[i] != HS_STATUS_OK)
                    s->stats.items_failed++;
                else
                    s->stats.items_out++;
                pthread_mutex_unlock(&p->mu);
                struct hs_error e;
                if (errs)
                    e = errs[i];
                else
                    hs_error_set(&e, HS_STATUS_NO_MEMORY, "stage %s: out of memory", s->spec.name);
                if (st[i] != HS_STATUS_OK && !e.msg[0])
                    hs_error_set(&e, st[i], "stage %s failed", s->spec.name);
                finish(p, items[i], st[i], st[i] != HS_STATUS_OK ? &e : NULL);
                pthread_mutex_lock(&p->mu);
                continue;
            }
            /* backpressure: wait for room in the next queue; at shutdown the next stage's
             * workers still drain it, so the wait ends */
            while (next->count == next->spec.queue_max) pthread_cond_wait(&next->not_full, &p->mu);
            s->stats.items_out++;
            q_push(next, items[i], batch[i].deadline_ns);
        }
    }
    pthread_mutex_unlock(&p->mu);
    hs_free(errs);
    return NULL;
}

hs_status hs_pipeline_create(const struct hs_pipeline_stage *stages, int n_stages,
                             hs_pipeline_done_fn done, void *done_ctx, struct hs_pipeline **out,
                             struct hs_error *err)
{
    *out = NULL;
    if (n_stages < 1 || n_stages > HS_PIPELINE_MAX_STAGES || !done)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "a pipeline has 1 to %d stages",
                            HS_PIPELINE_MAX_STAGES);
    for (int i = 0; i < n_stages; i++) {
        const struct hs_pipeline_stage *s = &stages[i];
        if (!s->run || s->workers < 1 || s->workers > 64 || s->queue_max < 1 ||
            s->queue_max > 1000000 || s->batch_max < 1 || s->batch_max > HS_PIPELINE_MAX_BATCH ||
            s->window_us < 0)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "pipeline stage %d (%s): needs a function, workers in [1, 64], "
                                "queue_max >= 1, batch_max in [1, %d], window_us >= 0",
                                i, s->name ? s->name : "?", HS_PIPELINE_MAX_BATCH);
    }
    struct hs_pipeline *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a pipeline");
    pthread_mutex_init(&p->mu, NULL);
    p->done = done;
    p->done_ctx = done_ctx;
    hs_status s = HS_STATUS_OK;
    for (int i = 0; i < n_stages && !s; i++) {
        struct stage *st = &p->st[i];
        st->spec = stages[i];
        st->p = p;
        st->index = i;
        cond_init(&st->not_empty);
        cond_init(&st->not_full);
        st->ring = hs_calloc((size_t)stages[i].queue_max, sizeof *st->ring);
        st->threads = hs_calloc((size_t)stages[i].workers, sizeof *st->threads);
        p->n = i + 1;
        if (!st->ring || !st->threads)
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for pipeline stage %s",
                             stages[i].name);
    }
    for (int i = 0; i < p->n && !s; i++) {
        struct stage *st = &p->st[i];
        for (int k = 0; k < st->spec.workers; k++) {
            if (pthread_create(&st->threads[k], NULL, worker, st)) {
                s = hs_error_set(err, HS_STATUS_INTERNAL, "cannot start pipeline stage %s",
                                 st->spec.name);
                break;
            }
            st->n_threads++;
        }
    }
    if (s) {
        hs_pipeline_destroy(p);
        return s;
    }
    *out = p;
    return HS_STATUS_OK;
}

hs_status hs_pipeline_submit(struct hs_pipeline *p, void *item, int64_t deadline_ns,
                             struct hs_error *err)
{
    struct stage *s = &p->st[0];
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return hs_error_set(err, HS_STATUS_SHUTDOWN, "pipeline is shutting down");
    }
    if (s->count == s->spec.queue_max) {
        pthread_mutex_unlock(&p->mu);
        return hs_error_set(err, HS_STATUS_OVERLOADED, "pipeline stage %s: queue full (%d)",
                            s->spec.name, s->spec.queue_max);
    }
    q_push(s, item, deadline_ns);
    pthread_mutex_unlock(&p->mu);
    return HS_STATUS_OK;
}

void hs_pipeline_destroy(struct hs_pipeline *p)
{
    if (!p) return;
    /* stop admission; answer what waits in front of the first stage; the stages then drain
     * the rest in order (items already past the first queue finish their journey) */
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    struct stage *s0 = &p->st[0];
    while (s0->count) {
        struct slot x = q_pop(s0);
        pthread_mutex_unlock(&p->mu);
        struct hs_error e;
        hs_error_set(&e, HS_STATUS_SHUTDOWN, "pipeline shut down before stage %s", s0->spec.name);
        finish(p, x.item, HS_STATUS_SHUTDOWN, &e);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    /* stage by stage: when a stage's workers have exited, nothing more enters the next */
    for (int i = 0; i < p->n; i++) {
        struct stage *st = &p->st[i];
        pthread_mutex_lock(&p->mu);
        st->stop = 1;
        pthread_cond_broadcast(&st->not_empty);
        pthread_mutex_unlock(&p->mu);
        for (int k = 0; k < st->n_threads; k++) pthread_join(st->threads[k], NULL);
    }
    for (int i = 0; i < p->n; i++) {
        struct stage *st = &p->st[i];
        pthread_cond_destroy(&st->not_empty);
        pthread_cond_destroy(&st->not_full);
        hs_free(st->ring);
        hs_free(st->threads);
    }
    pthread_mutex_destroy(&p->mu);
    hs_free(p);
}

void hs_pipeline_stage_stats(struct hs_pipeline *p, int stage, struct hs_pipeline_stage_stats *out)
{
    memset(out, 0, sizeof *out);
    if (stage < 0 || stage >= p->n) return;
    pthread_mutex_lock(&p->mu);
    *out = p->st[stage].stats;
    out->queued = p->st[stage].count;
    pthread_mutex_unlock(&p->mu);
}

int hs_pipeline_stage_count(const struct hs_pipeline *p)
{
    return p->n;
}

const char *hs_pipeline_stage_name(const struct hs_pipeline *p, int stage)
{
    return stage >= 0 && stage < p->n ? p->st[stage].spec.name : NULL;
}
