/* A test request for the scheduler tests: up to 40 sequences of up to 300 tokens, answered
 * into a DIM-wide output, with its done and release callbacks counted. */
#ifndef HS_TESTS_SCHED_TREQ_H
#define HS_TESTS_SCHED_TREQ_H

#include "testutil.h"

#include <pthread.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/sched.h"

#define DIM 4

struct treq {
    struct hs_request r;
    struct hs_seq seqs[40];
    int32_t ids[40][300];
    float out[40 * DIM];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, released;
};

static inline void treq_done(struct hs_request *r, void *ctx)
{
    struct treq *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->done++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    (void)r;
}

static inline void treq_release(struct hs_request *r, void *ctx)
{
    struct treq *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->released++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    (void)r;
}

/* lens: n sequences; ids of sequence i are base + i*1000 + k. */
static inline struct treq *treq_new(int n, const int *lens, int base, enum hs_priority p,
                                    int timeout_ms)
{
    struct treq *t = hs_calloc(1, sizeof *t);
    assert_non_null(t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < lens[i]; k++) t->ids[i][k] = base + i * 1000 + k;
        t->seqs[i].ids = t->ids[i];
        t->seqs[i].n_tokens = lens[i];
    }
    t->r.n_seqs = n;
    t->r.seqs = t->seqs;
    t->r.out = t->out;
    t->r.priority = p;
    t->r.deadline_ns = hs_now_ns() + (int64_t)timeout_ms * 1000000;
    t->r.done = treq_done;
    t->r.release = treq_release;
    t->r.ctx = t;
    hs_request_init(&t->r);
    return t;
}

static inline void treq_wait(struct treq *t)
{
    pthread_mutex_lock(&t->mu);
    while (!t->done) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static inline int treq_is_done(struct treq *t)
{
    pthread_mutex_lock(&t->mu);
    int d = t->done;
    pthread_mutex_unlock(&t->mu);
    return d;
}

/* Drops the owner's reference and waits until the scheduler dropped its own. */
static inline void treq_free(struct treq *t)
{
    hs_request_unref(&t->r);
    pthread_mutex_lock(&t->mu);
    while (!t->released) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    assert_int_equal(t->done <= 1, 1);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    hs_free(t);
}

/* A lane of test0 serving model m: buckets 16 .. 256, no runner (the caller sets one, or drives
 * a stepped scheduler). */
static inline struct hs_lane_opts treq_lane_opts(void)
{
    struct hs_lane_opts o = {
        .engine = "test0",
        .model = "m",
        .dim = DIM,
        .seq_max = 256,
        .pad_id = 0,
        .batch_window_us = 1000,
        .batch_max = 32,
        .batch_max_tokens = 8192,
        .n_buckets = 5,
        .buckets = {16, 32, 64, 128, 256},
        .queue_max = 1024,
        .shed_batch_ratio = 0.75,
        .throughput_init_tokens_per_s = 1e9,
        .throughput_ewma_alpha = 0.2,
    };
    return o;
}

#endif
