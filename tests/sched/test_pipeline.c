/* sched/pipeline: items through stages in order, each answered exactly once; batches formed
 * up to batch_max within the window; a blocked stage fills the queues before it until admission
 * refuses (backpressure, nothing lost); a stage's failure and a passed deadline end an item
 * with their status and message; shutdown answers what is queued and finishes what runs. */
#include "testutil.h"

#include <math.h>
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
        {.name = "add",
         .run = add1,
         .ctx = NULL,
         .workers = 2,
         .queue_max = 16,
         .batch_max = 4,
         .window_us = 0},
        {.name = "mul",
         .run = times3,
         .ctx = NULL,
         .workers = 1,
         .queue_max = 4,
         .batch_max = 8,
         .window_us = 200},
        {.name = "add2",
         .run = add1,
         .ctx = NULL,
         .workers = 3,
         .queue_max = 2,
         .batch_max = 1,
         .window_us = 0},
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
        {.name = "first",
         .run = add1,
         .ctx = NULL,
         .workers = 1,
         .queue_max = 3,
         .batch_max = 1,
         .window_us = 0},
        {.name = "slow",
         .run = gated,
         .ctx = &g,
         .workers = 1,
         .queue_max = 2,
         .batch_max = 2,
         .window_us = 0},
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
        {.name = "slow",
         .run = slow,
         .ctx = NULL,
         .workers = 1,
         .queue_max = 8,
         .batch_max = 1,
         .window_us = 0},
        {.name = "next",
         .run = add1,
         .ctx = NULL,
         .workers = 1,
         .queue_max = 8,
         .batch_max = 1,
         .window_us = 0},
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

/* the cap: one more fallback item only while the share after it stays within ratio_max, over a
 * window that slides (the oldest dropped) */
static void cap_arithmetic(void **state)
{
    (void)state;
    struct hs_pipeline_cap c;
    hs_pipeline_cap_init(&c, 0.3, 10);
    assert_false(hs_pipeline_cap_admits(&c)); /* 1 of 1 > 0.3 */
    for (int i = 0; i < 2; i++) hs_pipeline_cap_record(&c, false);
    assert_false(hs_pipeline_cap_admits(&c)); /* 1 of 3 = 0.33 */
    hs_pipeline_cap_record(&c, false);
    assert_true(hs_pipeline_cap_admits(&c)); /* 1 of 4 */
    hs_pipeline_cap_record(&c, true);
    assert_false(hs_pipeline_cap_admits(&c)); /* 2 of 5 */
    hs_pipeline_cap_record(&c, false);
    hs_pipeline_cap_record(&c, false);
    assert_true(hs_pipeline_cap_admits(&c)); /* 2 of 7 = 0.286 */
    hs_pipeline_cap_record(&c, true);
    for (int i = 0; i < 3; i++) hs_pipeline_cap_record(&c, false);
    assert_int_equal(c.n, 10); /* full: f f f T f f T f f f */
    assert_true(fabs(hs_pipeline_cap_share(&c) - 0.2) < 1e-12);
    /* full window: the oldest (f) goes, so 3 of 10 */
    assert_true(hs_pipeline_cap_admits(&c));
    hs_pipeline_cap_record(&c, true); /* f f T f f T f f f T */
    assert_int_equal(c.n, 10);
    assert_int_equal(c.fb, 3);
    assert_false(hs_pipeline_cap_admits(&c)); /* drops an f: 4 of 10 */
    hs_pipeline_cap_record(&c, false);        /* f T f f T f f f T f */
    hs_pipeline_cap_record(&c, false);        /* T f f T f f f T f f */
    assert_true(hs_pipeline_cap_admits(&c));  /* drops the T: 3 of 10 */
    /* any sequence that records a fallback only when admitted: every window within the cap */
    const double ratios[] = {0.05, 0.3, 0.5, 1.0};
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++) {
        hs_pipeline_cap_init(&c, ratios[r], 20);
        unsigned char seq[2000];
        unsigned x = 12345;
        for (int i = 0; i < 2000; i++) {
            x = x * 1103515245u + 12345u;
            const bool want = (x >> 16) % 3 != 0; /* overloaded two times in three */
            seq[i] = want && hs_pipeline_cap_admits(&c);
            hs_pipeline_cap_record(&c, seq[i]);
        }
        int fb = 0, total = 0;
        for (int i = 0; i < 2000; i++) {
            fb += seq[i];
            total += seq[i];
            if (i >= 20) fb -= seq[i - 20];
            const int n = i + 1 < 20 ? i + 1 : 20;
            assert_true(fb <= ratios[r] * n + 1e-9);
        }
        assert_true(total > 0); /* and it does fall back */
        if (ratios[r] == 1.0) assert_true(total > 1000);
    }
    hs_pipeline_cap_init(&c, 1.0, 1000); /* clamped to the window's room */
    assert_int_equal(c.window, HS_PIPELINE_CAP_WINDOW);
}

static void slow150(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)items, (void)n, (void)st, (void)errs;
    struct timespec ts = {0, 150000000};
    nanosleep(&ts, NULL);
}

static void mark9(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)st, (void)errs;
    for (int i = 0; i < n; i++) {
        struct item *x = items[i];
        x->path = x->path * 10 + 9;
    }
}

/* an overloaded primary (its queue full) sends to the fallback under the cap; beyond it,
 * HS_STATUS_OVERLOADED naming the cap; nothing lost or answered twice */
static void failover_capped(void **state)
{
    (void)state;
    struct sink k = {0};
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    const struct hs_pipeline_stage st = {.name = "model",
                                         .run = gated,
                                         .ctx = &g,
                                         .workers = 1,
                                         .queue_max = 2,
                                         .batch_max = 1,
                                         .fallback = mark9,
                                         .ratio_max = 0.5};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[8];
    for (int i = 0; i < 8; i++) it[i] = (struct item){.v = i};
    assert_int_equal(hs_pipeline_submit(p, &it[0], 0, &err), HS_STATUS_OK);
    for (int i = 0; i < 5000 && !atomic_load(&g.running); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&g.running), 1); /* item 0 runs (1 of 1 on the primary) */
    assert_int_equal(hs_pipeline_submit(p, &it[1], 0, &err), HS_STATUS_OK);
    assert_int_equal(hs_pipeline_submit(p, &it[2], 0, &err), HS_STATUS_OK); /* queue full */
    assert_int_equal(hs_pipeline_submit(p, &it[3], 0, &err), HS_STATUS_OK); /* fallback: 1 of 2 */
    for (int i = 0; i < 5000 && atomic_load(&k.n) < 1; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&k.n), 1);
    assert_int_equal(it[3].path, 9);
    /* 2 of 3 > 0.5: refused, with why */
    assert_int_equal(hs_pipeline_submit(p, &it[4], 0, &err), HS_STATUS_OVERLOADED);
    assert_non_null(strstr(err.msg, "stage model: overloaded"));
    assert_non_null(strstr(err.msg, "ratio_max 0.50"));
    struct hs_pipeline_stage_stats x;
    hs_pipeline_stage_stats(p, 0, &x);
    assert_int_equal(x.failovers, 1);
    assert_int_equal(x.refused, 1);
    assert_int_equal(x.queued, 2);
    assert_true(fabs(x.fallback_share - 0.5) < 1e-12);
    open_gate(&g);
    wait_for(&k, 4);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.n), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(it[i].status, HS_STATUS_OK);
    assert_int_equal(atomic_load(&it[4].done), 0);
    assert_int_equal(atomic_load(&k.twice), 0);
}

static struct item *g_fail_first; /* the item failfirst fails */
static void failfirst(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        if (items[i] == g_fail_first) {
            st[i] = HS_STATUS_ENGINE;
            hs_error_set(&errs[i], st[i], "engine broke");
        }
}

/* the stage's timeout: an item that waited past it ends HS_STATUS_TIMEOUT naming the stage, or,
 * with a fallback, runs there; a batch that ran past it ends its items; a failed item is
 * retried on the fallback under the cap */
static void stage_timeouts(void **state)
{
    (void)state;
    for (int with_fb = 0; with_fb < 2; with_fb++) {
        struct sink k = {0};
        const struct hs_pipeline_stage st = {.name = "slow",
                                             .run = slow, /* 20 ms a batch */
                                             .workers = 1,
                                             .queue_max = 16,
                                             .batch_max = 1,
                                             .timeout_us = 70000,
                                             .fallback = with_fb ? mark9 : NULL,
                                             .ratio_max = 1.0};
        struct hs_pipeline *p;
        struct hs_error err = {0};
        assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
        static struct item it[10];
        for (int i = 0; i < 10; i++) {
            it[i] = (struct item){.v = i};
            assert_int_equal(hs_pipeline_submit(p, &it[i], 0, &err), HS_STATUS_OK);
        }
        wait_for(&k, 10);
        assert_int_equal(atomic_load(&k.n), 10);
        int timed_out = 0, fell = 0;
        for (int i = 0; i < 10; i++) {
            if (it[i].status == HS_STATUS_TIMEOUT) {
                timed_out++;
                assert_non_null(strstr(it[i].msg, "stage slow: "));
                assert_non_null(strstr(it[i].msg, "timeout_ms 70"));
            }
            fell += it[i].path == 9;
        }
        struct hs_pipeline_stage_stats x;
        hs_pipeline_stage_stats(p, 0, &x);
        if (with_fb) { /* the late ones ran on the fallback, none ended */
            assert_int_equal(timed_out, 0);
            assert_true(fell >= 1);
            assert_int_equal(x.failovers, fell);
        } else {
            assert_true(timed_out >= 1); /* 10 x 20 ms do not fit in 70 */
            assert_int_equal(x.timeouts, timed_out);
        }
        hs_pipeline_destroy(p);
        assert_int_equal(atomic_load(&k.twice), 0);
    }
    /* a batch that runs past the timeout */
    struct sink k = {0};
    const struct hs_pipeline_stage st = {
        .name = "slow",
        .run = slow150,
        .workers = 1,
        .queue_max = 4,
        .batch_max = 1,
        .timeout_us = 40000}; /* not the few ms a wake-up takes on a loaded machine */
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item one;
    one = (struct item){.v = 1};
    assert_int_equal(hs_pipeline_submit(p, &one, 0, &err), HS_STATUS_OK);
    wait_for(&k, 1);
    assert_int_equal(one.status, HS_STATUS_TIMEOUT);
    assert_non_null(strstr(one.msg, "stage slow: its batch ran"));
    hs_pipeline_destroy(p);
    /* a failure on the primary is retried on the fallback */
    struct sink k2 = {0};
    const struct hs_pipeline_stage sf = {.name = "model",
                                         .run = failfirst,
                                         .workers = 1,
                                         .queue_max = 4,
                                         .batch_max = 1,
                                         .fallback = mark9,
                                         .ratio_max = 0.5};
    assert_int_equal(hs_pipeline_create(&sf, 1, on_done, &k2, &p, &err), HS_STATUS_OK);
    static struct item f[3];
    for (int i = 0; i < 3; i++) f[i] = (struct item){.v = i};
    g_fail_first = &f[0]; /* 1 of 2 run: admitted */
    assert_int_equal(hs_pipeline_submit(p, &f[0], 0, &err), HS_STATUS_OK);
    wait_for(&k2, 1);
    assert_int_equal(f[0].status, HS_STATUS_OK);
    assert_int_equal(f[0].path, 9);
    g_fail_first = &f[1]; /* 2 of 4: admitted */
    assert_int_equal(hs_pipeline_submit(p, &f[1], 0, &err), HS_STATUS_OK);
    wait_for(&k2, 2);
    assert_int_equal(f[1].path, 9);
    g_fail_first = &f[2]; /* 3 of 6 = 0.5: admitted; the cap is the share, not a count */
    assert_int_equal(hs_pipeline_submit(p, &f[2], 0, &err), HS_STATUS_OK);
    wait_for(&k2, 3);
    assert_int_equal(f[2].status, HS_STATUS_OK);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k2.twice), 0);
}

static atomic_int g_broken_runs;
static void broken(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)items;
    atomic_fetch_add(&g_broken_runs, 1);
    for (int i = 0; i < n; i++) {
        st[i] = HS_STATUS_ENGINE;
        hs_error_set(&errs[i], st[i], "engine broke");
    }
}

/* a primary whose last batches all failed opens its breaker: items go to the fallback without
 * trying it (under the cap) */
static void breaker_opens(void **state)
{
    (void)state;
    struct sink k = {0};
    const struct hs_pipeline_stage st = {.name = "model",
                                         .run = broken,
                                         .workers = 1,
                                         .queue_max = 8,
                                         .batch_max = 1,
                                         .fallback = mark9,
                                         .ratio_max = 1.0};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[10];
    for (int i = 0; i < 10; i++) {
        it[i] = (struct item){.v = i};
        assert_int_equal(hs_pipeline_submit(p, &it[i], 0, &err), HS_STATUS_OK);
        wait_for(&k, i + 1); /* one at a time */
        assert_int_equal(it[i].status, HS_STATUS_OK);
        assert_int_equal(it[i].path, 9); /* each failed over, or sent over at once */
    }
    assert_int_equal(atomic_load(&g_broken_runs), HS_PIPELINE_BREAKER_FAILS);
    struct hs_pipeline_stage_stats x;
    hs_pipeline_stage_stats(p, 0, &x);
    assert_int_equal(x.breaker_open, 1);
    assert_int_equal(x.failovers, 10);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.twice), 0);
}

static void bad_specs(void **state)
{
    (void)state;
    struct sink k = {0};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    const struct hs_pipeline_stage bad = {
        .name = "x", .run = add1, .workers = 1, .queue_max = 4, .batch_max = 65};
    assert_int_equal(hs_pipeline_create(&bad, 1, on_done, &k, &p, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "(x)"));
    assert_int_equal(hs_pipeline_create(&bad, 0, on_done, &k, &p, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

/* simulated engines for the routed stage: the same step, one 2 ms a batch, one 12 ms */
static void on_fast(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)st, (void)errs;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < n; i++) ((struct item *)items[i])->path = 1;
}

static void on_slow(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)st, (void)errs;
    struct timespec ts = {0, 12000000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < n; i++) ((struct item *)items[i])->path = 2;
}

/* a stage routed over two engines: predicted sends most of a burst to the one its cost lines
 * say finishes first (both measured by a few items first), round_robin alternates; each item
 * once, the per-route stats adding up to the stage's */
static void routes_split_work(void **state)
{
    (void)state;
    for (int rr = 0; rr < 2; rr++) {
        struct sink k = {0};
        struct hs_pipeline_stage st = {.name = "rec",
                                       .run = on_fast,
                                       .workers = 1,
                                       .queue_max = 64,
                                       .batch_max = 1,
                                       .n_routes = 2,
                                       .policy =
                                           rr ? HS_PIPELINE_ROUND_ROBIN : HS_PIPELINE_PREDICTED};
        st.routes[0] = (struct hs_pipeline_route){"fast", on_fast, NULL, 0, 0};
        st.routes[1] = (struct hs_pipeline_route){"slow", on_slow, NULL, 0, 2};
        struct hs_pipeline *p;
        struct hs_error err = {0};
        assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
        assert_string_equal(hs_pipeline_route_name(p, 0, 1), "slow");
        assert_null(hs_pipeline_route_name(p, 0, 2));
        static struct item it[64];
        for (int i = 0; i < 64; i++) it[i] = (struct item){.v = i};
        for (int i = 0; i < 4; i++) { /* one at a time: both routes measured */
            assert_int_equal(hs_pipeline_submit(p, &it[i], 0, &err), HS_STATUS_OK);
            wait_for(&k, i + 1);
        }
        struct hs_pipeline_stage_stats x;
        hs_pipeline_stage_stats(p, 0, &x);
        assert_int_equal(x.n_routes, 2);
        assert_true(x.route[0].batches >= 1 && x.route[1].batches >= 1);
        assert_true(x.route[1].batch_s > x.route[0].batch_s);
        for (int i = 4; i < 64; i++)
            assert_int_equal(hs_pipeline_submit(p, &it[i], 0, &err), HS_STATUS_OK);
        wait_for(&k, 64);
        int on[3] = {0};
        for (int i = 4; i < 64; i++) on[it[i].path]++;
        if (rr) {
            assert_int_equal(on[1], 30);
            assert_int_equal(on[2], 30);
        } else { /* 3x the items a second (6x a batch, the slow one's of 2): most go there */
            assert_true(on[1] >= 40);
        }
        hs_pipeline_stage_stats(p, 0, &x);
        assert_int_equal(x.items_in, 64);
        assert_int_equal(x.route[0].items + x.route[1].items, 64);
        assert_int_equal(x.route[0].batches + x.route[1].batches, x.batches);
        hs_pipeline_destroy(p);
        assert_int_equal(atomic_load(&k.n), 64);
        assert_int_equal(atomic_load(&k.twice), 0);
    }
}

static void fail_all(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)ctx, (void)items;
    for (int i = 0; i < n; i++) {
        st[i] = HS_STATUS_ENGINE;
        hs_error_set(&errs[i], st[i], "engine broke");
    }
}

/* a route whose batches all fail opens its breaker: the next items go to the other route; what
 * it failed ends with its error without a fallback */
static void route_breaker(void **state)
{
    (void)state;
    struct sink k = {0};
    struct hs_pipeline_stage st = {.name = "rec",
                                   .run = fail_all,
                                   .workers = 1,
                                   .queue_max = 16,
                                   .batch_max = 1,
                                   .n_routes = 2,
                                   .policy = HS_PIPELINE_ROUND_ROBIN};
    st.routes[0] = (struct hs_pipeline_route){"broken", fail_all, NULL, 0, 0};
    st.routes[1] = (struct hs_pipeline_route){"ok", add1, NULL, 0, 0};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[16];
    for (int i = 0; i < 16; i++) it[i] = (struct item){.v = i};
    int n = 0, failed = 0;
    for (; n < 6; n++) { /* in turn: three batches fail on "broken" */
        assert_int_equal(hs_pipeline_submit(p, &it[n], 0, &err), HS_STATUS_OK);
        wait_for(&k, n + 1);
    }
    struct hs_pipeline_stage_stats x;
    hs_pipeline_stage_stats(p, 0, &x);
    assert_int_equal(x.route[0].breaker_open, 1);
    assert_int_equal(x.breaker_open, 0);
    for (; n < 16; n++) {
        assert_int_equal(hs_pipeline_submit(p, &it[n], 0, &err), HS_STATUS_OK);
        wait_for(&k, n + 1);
    }
    for (int i = 0; i < 16; i++) failed += it[i].status != HS_STATUS_OK;
    assert_int_equal(failed, 3);
    for (int i = 6; i < 16; i++) assert_int_equal(it[i].status, HS_STATUS_OK);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.twice), 0);
}

/* simulated engines whose batch takes 1 ms a unit (an item's v), marking which ran it */
static void per_unit(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    (void)st, (void)errs;
    long ms = 0;
    for (int i = 0; i < n; i++) ms += ((struct item *)items[i])->v;
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
    for (int i = 0; i < n; i++) ((struct item *)items[i])->path = *(const int *)ctx;
}

static double v_units(const void *item)
{
    return ((const struct item *)item)->v;
}

/* the routes count the stage's units (their cost lines learn batch time against them), and a
 * running 30-unit batch's predicted rest sends the next item to the idle route */
static void routes_weigh_units(void **state)
{
    (void)state;
    struct sink k = {0};
    static const int one = 1, two = 2;
    struct hs_pipeline_stage st = {.name = "rec",
                                   .run = per_unit,
                                   .workers = 1,
                                   .queue_max = 8,
                                   .batch_max = 1,
                                   .n_routes = 2,
                                   .units = v_units};
    st.routes[0] = (struct hs_pipeline_route){"a", per_unit, (void *)&one, 0, 0};
    st.routes[1] = (struct hs_pipeline_route){"b", per_unit, (void *)&two, 0, 0};
    struct hs_pipeline *p;
    struct hs_error err = {0};
    assert_int_equal(hs_pipeline_create(&st, 1, on_done, &k, &p, &err), HS_STATUS_OK);
    static struct item it[6];
    const int v[6] = {2, 2, 4, 4, 30, 1};
    for (int i = 0; i < 6; i++) it[i] = (struct item){.v = v[i]};
    for (int i = 0; i < 4; i++) { /* one at a time: both routes measured, 2 and 4 units */
        assert_int_equal(hs_pipeline_submit(p, &it[i], 0, &err), HS_STATUS_OK);
        wait_for(&k, i + 1);
    }
    struct hs_pipeline_stage_stats x;
    hs_pipeline_stage_stats(p, 0, &x);
    assert_true(x.route[0].batches >= 1 && x.route[1].batches >= 1);
    assert_int_equal(x.route[0].units + x.route[1].units, 12);
    assert_int_equal(hs_pipeline_submit(p, &it[4], 0, &err), HS_STATUS_OK);
    for (int i = 0; i < 5000 && x.route[0].queued + x.route[1].queued; i++) {
        struct timespec ts = {0, 100000}; /* till the 30-unit batch runs */
        nanosleep(&ts, NULL);
        hs_pipeline_stage_stats(p, 0, &x);
    }
    assert_int_equal(hs_pipeline_submit(p, &it[5], 0, &err), HS_STATUS_OK);
    wait_for(&k, 6);
    assert_true(it[4].path == 1 || it[4].path == 2);
    assert_int_not_equal(it[5].path, it[4].path);
    hs_pipeline_destroy(p);
    assert_int_equal(atomic_load(&k.twice), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(in_order_once_each),
        cmocka_unit_test(backpressure_then_admission_refuses),
        cmocka_unit_test(deadlines_and_shutdown),
        cmocka_unit_test(bad_specs),
        cmocka_unit_test(cap_arithmetic),
        cmocka_unit_test(failover_capped),
        cmocka_unit_test(stage_timeouts),
        cmocka_unit_test(breaker_opens),
        cmocka_unit_test(routes_split_work),
        cmocka_unit_test(route_breaker),
        cmocka_unit_test(routes_weigh_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
