/* sched/pipeline: items through stages in order, each answered exactly once; batches formed
 * up to batch_max within the window; a blocked stage fills the queues before it until admission
 * refuses (backpressure, nothing lost); a stage's failure and a passed deadline end an item
 * with their status and message; shutdown answers what is queued and finishes what runs. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "sched/pipeline.h"

struct item {
    int v;
    int path; /* stages run, as digits */
    atomic_int done;
    hs_status status;
    char msg[512];
};

struct sink {
    atomic_int n;
    atomic_int twice; /* an item answered twice */
};

static void on_done(void *ctx, void *it, hs_status s, const struct hs_error *err)
{
    struct sink *k = ctx;
    struct item *x = it;
    if (atomic_fetch_add(&x->done, 1)) atomic_fetch_add(&k->twice, 1);
    x->status = s;
    if (err) snprintf(x->msg, sizeof x->msg, "%s", err->msg);
    atomic_fetch_add(&k->n, 1);
}

static void wait_for(struct sink *k, int n)
{
    for (int i = 0; i < 5000 && atomic_load(&k->n) < n; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void add1(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)st, (void)errs;
    for (int i = 0; i < n; i++) {
        struct item *x = items[i];
        x->v += 1;
        x->path = x->path * 10 + 1;
    }
}

static void times3(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx;
    for (int i = 0; i < n; i++) {
        struct item *x = items[i];
        if (x->v % 7 == 0) { /* fails some, with its reason */
            st[i] = HS_STATUS_INVALID_INPUT;
            hs_error_set(&errs[i], st[i], "item %d is a multiple of 7", x->v);
            continue;
        }
        x->v *= 3;
        x->path = x->path * 10 + 2;
    }
}

static void in_order_once_each(void **state)
{
    (void)state;
    struct sink k = {0};
    const struct hs_pipeline_stage st[3] = {
        {"add", add1, NULL, 2, 16, 4, 0},
        {"mul", times3, NULL, 1, 4, 8, 200},
        {"add2", add1, NULL, 3, 2, 1, 0},
    };
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(st, 3, on_done, &k, &p, &err), HS_STATUS_OK);
    enum { N = 300 };
    static struct item it[N];
    int admitted = 0;
    for (int i = 0; i < N; i++) {
        it[i] = (struct item){.v = i};
        while (hs_pipeline_submit(p, &it[i], 0, &err) == HS_STATUS_OVERLOADED) {
            assert_non_null(strstr(err.msg, "queue full"));
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        admitted++;
    }
    wait_for(&k, admitted);
    assert_int_equal(atomic_load(&k.n), N);
    int failed = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&it[i].done), 1);
        if ((i + 1) % 7 == 0) {
            assert_int_equal(it[i].status, HS_STATUS_INVALID_INPUT);
            assert_non_null(strstr(it[i].msg, "multiple of 7"));
            assert_int_equal(it[i].path, 1); /* stopped at the failing stage */
            failed++;
        } else {
            assert_int_equal(it[i].status, HS_STATUS_OK);
            assert_int_equal(it[i].v, (i + 1) * 3 + 1);
            assert_int_equal(it[i].path, 121);
        }
    }
    struct hs_pipeline_stage_stats s1;
    hs_pipeline_stage_stats(p, 1, &s1);
    assert_int_equal(s1.items_in, N);
    assert_int_equal(s1.items_failed, failed);
    assert_int_equal(s1.items_out, N - failed);
    assert_true(s1.batch_size_max <= 8);
    assert_true(s1.batches >= N / 8);
    /* the 200 us window and a burst of 300 form batches bigger than one */
    assert_true(s1.batch_size_max > 1);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.twice), 0);
}

/* a stage that waits for a gate */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    atomic_int running;
};

static void gated(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)items, (void)n, (void)st, (void)errs;
    struct gate *g = ctx;
    atomic_fetch_add(&g->running, 1);
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void open_gate(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void backpressure_then_admission_refuses(void **state)
{
    (void)state;
    struct sink k = {0};
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    /* stage 0 queue 3 batch 1, stage 1 (gated) queue 2 batch 2 */
    const struct hs_pipeline_stage st[2] = {
        {"first", add1, NULL, 1, 3, 1, 0},
        {"slow", gated, &g, 1, 2, 2, 0},
    };
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(st, 2, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[64];
    int admitted = 0, refused = 0;
    for (int i = 0; i < 64; i++) {
        it[i] = (struct item){.v = i};
        hs_status s = hs_pipeline_submit(p, &it[i], 0, &err);
        if (s == HS_STATUS_OK)
            admitted++;
        else {
            assert_int_equal(s, HS_STATUS_OVERLOADED);
            refused++;
        }
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL);
    }
    /* held: 2 in the gated batch, 2 in its queue, 1 in stage 0's hands, 3 in its queue */
    assert_true(admitted <= 2 + 2 + 1 + 3);
    assert_true(refused >= 64 - 8);
    assert_int_equal(atomic_load(&k.n), 0);
    open_gate(&g);
    wait_for(&k, admitted);
    assert_int_equal(atomic_load(&k.n), admitted);
    for (int i = 0; i < admitted; i++) assert_int_equal(it[i].status, HS_STATUS_OK);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.twice), 0);
}

static void slow(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)items, (void)n, (void)st, (void)errs;
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
}

static void deadlines_and_shutdown(void **state)
{
    (void)state;
    struct sink k = {0};
    const struct hs_pipeline_stage st[2] = {
        {"slow", slow, NULL, 1, 8, 1, 0},
        {"next", add1, NULL, 1, 8, 1, 0},
    };
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(st, 2, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[6];
    const int64_t dl = hs_now_ns() + 100 * 1000000LL; /* 20 ms runs: not all six fit */
    for (int i = 0; i < 6; i++) {
        it[i] = (struct item){.v = i};
        assert_int_equal(hs_pipeline_submit(p, &it[i], dl, &err), HS_STATUS_OK);
    }
    wait_for(&k, 6);
    int timed_out = 0;
    for (int i = 0; i < 6; i++) {
        if (it[i].status == HS_STATUS_TIMEOUT) {
            timed_out++;
            assert_non_null(strstr(it[i].msg, "deadline passed waiting for stage"));
        }
    }
    assert_true(timed_out >= 1);
    assert_true(it[0].status == HS_STATUS_OK);
    /* shutdown: the one running finishes, the queued ones are answered SHUTDOWN */
    static struct item late[5];
    atomic_store(&k.n, 0);
    struct hs_pipeline_stage_stats base;
    hs_pipeline_stage_stats(p, 0, &base);
    for (int i = 0; i < 5; i++) {
        late[i] = (struct item){.v = i};
        assert_int_equal(hs_pipeline_submit(p, &late[i], 0, &err), HS_STATUS_OK);
    }
    for (int i = 0; i < 5000; i++) { /* until the first is running */
        struct hs_pipeline_stage_stats s0;
        hs_pipeline_stage_stats(p, 0, &s0);
        if (s0.items_in >= base.items_in + 1) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.n), 5);
    int shut = 0, ok = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(atomic_load(&late[i].done), 1);
        shut += late[i].status == HS_STATUS_SHUTDOWN;
        ok += late[i].status == HS_STATUS_OK;
    }
    assert_true(ok >= 1 && shut >= 1 && ok + shut == 5);
    assert_int_equal(atomic_load(&k.twice), 0);
}

static void bad_specs(void **state)
{
    (void)state;
    struct sink k = {0};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    const struct hs_pipeline_stage bad = {"x", add1, NULL, 1, 4, 65, 0};
    assert_int_equal(hs_pipeline_create(&bad, 1, on_done, &k, &p, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "(x)"));
    assert_int_equal(hs_pipeline_create(&bad, 0, on_done, &k, &p, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(in_order_once_each),
        cmocka_unit_test(backpressure_then_admission_refuses),
        cmocka_unit_test(deadlines_and_shutdown),
        cmocka_unit_test(bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
