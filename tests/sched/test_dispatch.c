/* Dispatch: one answer per accepted job, retry on an engine failure within the budget, shadow
 * copies compared and reported, the failover cap — over a scheduler whose lanes run a test
 * runner that computes each row from its tokens (row = (sum of ids, length), or swapped on a
 * swapping lane) and fails when told to. Nothing sleeps: tests wait for the owner's memory to be
 * let go of by every request, which happens only once each has been answered and released. */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/dispatch.h"

#define DIM 2
#define MS  1000000LL

struct runner {
    pthread_mutex_t mu;
    int fail_next; /* batches to fail (HS_STATUS_ENGINE) */
    bool fail_all;
    bool swap; /* rows (length, sum) instead of (sum, length) */
    int batches;
};

static hs_status run(void *ctx, int slot, const struct hs_batch *b, float *out,
                     struct hs_batch_timing *t, struct hs_error *err)
{
    (void)slot;
    struct runner *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->batches++;
    bool fail = c->fail_all || c->fail_next > 0;
    if (c->fail_next > 0) c->fail_next--;
    bool swap = c->swap;
    pthread_mutex_unlock(&c->mu);
    if (fail) return hs_error_set(err, HS_STATUS_ENGINE, "injected failure");
    for (int i = 0; i < b->n_seqs; i++) {
        float sum = 0;
        for (int k = b->offsets[i]; k < b->offsets[i] + b->lengths[i]; k++) sum += (float)b->ids[k];
        float len = (float)b->lengths[i];
        out[i * DIM + 0] = swap ? len : sum;
        out[i * DIM + 1] = swap ? sum : len;
    }
    t->copy_in_ns = t->compute_ns = t->copy_out_ns = 1;
    return HS_STATUS_OK;
}

static void runner_set(struct runner *c, int fail_next, bool fail_all)
{
    pthread_mutex_lock(&c->mu);
    c->fail_next = fail_next;
    c->fail_all = fail_all;
    pthread_mutex_unlock(&c->mu);
}

static int runner_pending_failures(struct runner *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->fail_next;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* The owner: counts held references and answers; memory from the C heap, freed at the end. */
struct owner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held, answers;
    void *blocks[1024];
    int n_blocks;
};

static void *owner_alloc(void *ctx, size_t bytes)
{
    struct owner *o = ctx;
    if (o->n_blocks == 1024) return NULL;
    return o->blocks[o->n_blocks++] = hs_calloc(1, bytes);
}

static void owner_hold(void *ctx)
{
    struct owner *o = ctx;
    pthread_mutex_lock(&o->mu);
    o->held++;
    pthread_mutex_unlock(&o->mu);
}

static void owner_let_go(void *ctx)
{
    struct owner *o = ctx;
    pthread_mutex_lock(&o->mu);
    o->held--;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Each job counts its own answers in job_answers[] (by id) and the owner's total. */
static int job_answers[256];

static void owner_done(struct hs_job *j, void *ctx)
{
    struct owner *o = ctx;
    pthread_mutex_lock(&o->mu);
    job_answers[j->id]++;
    o->answers++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void owner_init(struct owner *o)
{
    memset(o, 0, sizeof *o);
    memset(job_answers, 0, sizeof job_answers);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
}

static void wait_answers(struct owner *o, int n)
{
    pthread_mutex_lock(&o->mu);
    while (o->answers < n) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

/* Every request of every released job has let go: shadows included, all answered. */
static void wait_let_go(struct owner *o)
{
    pthread_mutex_lock(&o->mu);
    while (o->held > 0) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

static void owner_free(struct owner *o)
{
    for (int i = 0; i < o->n_blocks; i++) hs_free(o->blocks[i]);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
}

/* Lanes 0 ("a") and 1 ("b") serve model m. */
struct fixture {
    struct runner r[2];
    struct hs_sched *s;
    struct hs_router *rt;
    struct hs_dispatch *d;
    struct owner o;
};

static struct hs_lane_opts lane(struct runner *c, const char *engine)
{
    return (struct hs_lane_opts){
        .engine = engine,
        .model = "m",
        .dim = DIM,
        .seq_max = 128,
        .batch_window_us = 0,
        .batch_max = 32,
        .batch_max_tokens = 4096,
        .n_buckets = 2,
        .buckets = {16, 64},
        .queue_max = 256,
        .shed_batch_ratio = 0.75,
        .throughput_init_tokens_per_s = 1e6,
        .throughput_ewma_alpha = 0.2,
        .slots = 1,
        .runner = {run, c},
    };
}

/* Routes: 0 "a" = lane 0, 1 "b" = lane 1, 2 "both" = lanes 0 and 1. */
static struct hs_router_opts base_opts(void)
{
    struct hs_router_opts o;
    memset(&o, 0, sizeof o);
    const char *names[] = {"a", "b", "both"};
    for (int i = 0; i < 3; i++) {
        struct hs_route *r = &o.routes[i];
        snprintf(r->name, sizeof r->name, "%s", names[i]);
        r->kind = HS_ROUTE_KIND_LANES;
        r->split_route = r->shadow_route = r->failover_route = -1;
    }
    o.routes[0].n_lanes = 1, o.routes[0].lanes[0] = 0;
    o.routes[1].n_lanes = 1, o.routes[1].lanes[0] = 1;
    o.routes[2].n_lanes = 2, o.routes[2].lanes[0] = 0, o.routes[2].lanes[1] = 1;
    o.n_routes = 3;
    o.default_route = 0;
    o.fallback_lane = -1;
    o.breaker = (struct hs_breaker_opts){.window_requests = 4,
                                         .min_requests = 4,
                                         .error_ratio_max = 0.5,
                                         .open_ms = 600000, /* stays open for the test */
                                         .half_open_probes = 1};
    return o;
}

static void fixture_init(struct fixture *f, const struct hs_router_opts *ro)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 2; i++) pthread_mutex_init(&f->r[i].mu, NULL);
    struct hs_lane_opts lanes[2] = {lane(&f->r[0], "a"), lane(&f->r[1], "b")};
    struct hs_error err;
    if (hs_sched_create(lanes, 2, NULL, &f->s, &err)) fail_msg("sched: %s", err.msg);
    if (hs_router_create(f->s, ro, &f->rt, &err)) fail_msg("router: %s", err.msg);
    if (hs_dispatch_create(f->s, f->rt, &f->d, &err)) fail_msg("dispatch: %s", err.msg);
    owner_init(&f->o);
}

static void fixture_free(struct fixture *f)
{
    hs_sched_destroy(f->s);
    hs_dispatch_free(f->d);
    hs_router_free(f->rt);
    owner_free(&f->o);
    for (int i = 0; i < 2; i++) pthread_mutex_destroy(&f->r[i].mu);
}

/* A job of n sequences; sequence i has i + 3 tokens with ids base + k. */
struct tjob {
    struct hs_job j;
    struct hs_seq seqs[8];
    int32_t ids[8][16];
};

static void tjob_init(struct fixture *f, struct tjob *t, uint64_t id, int n, int base)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i + 3; k++) t->ids[i][k] = base + k;
        t->seqs[i].ids = t->ids[i];
        t->seqs[i].n_tokens = i + 3;
    }
    t->j.owner = (struct hs_job_owner){.alloc = owner_alloc,
                                       .hold = owner_hold,
                                       .let_go = owner_let_go,
                                       .done = owner_done,
                                       .ctx = &f->o};
    t->j.id = id;
    t->j.model = "m";
    t->j.task = "embed";
    t->j.priority = HS_PRIORITY_INTERACTIVE;
    t->j.deadline_ns = hs_now_ns() + 600000 * MS;
    t->j.n_seqs = n;
    t->j.seqs = t->seqs;
}

/* The runner's row for sequence i of a tjob (unswapped). */
static void expect_rows(const struct tjob *t)
{
    for (int i = 0; i < t->j.n_seqs; i++) {
        float sum = 0;
        for (int k = 0; k < t->seqs[i].n_tokens; k++) sum += (float)t->ids[i][k];
        assert_true(t->j.out[i * DIM + 0] == sum);
        assert_true(t->j.out[i * DIM + 1] == (float)t->seqs[i].n_tokens);
    }
}

static void answered_exactly_once(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    struct fixture f;
    fixture_init(&f, &o);
    static struct tjob t[20];
    for (int i = 0; i < 20; i++) {
        tjob_init(&f, &t[i], (uint64_t)i, 1 + i % 8, 100 * i);
        assert_int_equal(hs_dispatch_submit(f.d, &t[i].j), HS_STATUS_OK);
    }
    wait_answers(&f.o, 20);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(t[i].j.status, HS_STATUS_OK);
        assert_true(t[i].j.routed);
        assert_int_equal(t[i].j.lane, 0);
        assert_int_equal(t[i].j.dim, DIM);
        assert_true(t[i].j.ts[HS_TS_COPY_OUT] >= t[i].j.ts[HS_TS_ROUTED]);
        expect_rows(&t[i]);
        hs_job_release(&t[i].j);
    }
    wait_let_go(&f.o);
    hs_sched_drain(f.s, -1);
    for (int i = 0; i < 20; i++) assert_int_equal(job_answers[i], 1);
    assert_int_equal(f.o.answers, 20);

    /* refused by the router (a deadline no lane can meet): never answered, the reason says why */
    struct tjob late;
    tjob_init(&f, &late, 200, 1, 0);
    late.j.deadline_ns = hs_now_ns() - 1;
    assert_int_equal(hs_dispatch_submit(f.d, &late.j), HS_STATUS_OVERLOADED);
    assert_true(late.j.routed);
    assert_non_null(strstr(late.j.msg, "deadline"));
    /* a job without inputs is a bad job */
    struct tjob empty;
    tjob_init(&f, &empty, 201, 0, 0);
    assert_int_equal(hs_dispatch_submit(f.d, &empty.j), HS_STATUS_INVALID_ARGUMENT);
    hs_job_release(&late.j);
    hs_job_release(&empty.j);
    wait_let_go(&f.o);
    assert_int_equal(job_answers[200] + job_answers[201], 0);
    fixture_free(&f);
}

/* Route "both" (lanes 0 and 1), a budget of one retry and no refill. */
static void engine_failure_retried_within_budget(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.default_route = 2;
    o.retry_budget_max = 1;
    o.retry_budget_ratio = 0;
    struct fixture f;
    fixture_init(&f, &o);
    struct hs_route_stats st;

    /* both lanes idle and unmeasured: lane 0 wins the tie and fails; the retry runs on 1 */
    runner_set(&f.r[0], 1, false);
    struct tjob t;
    tjob_init(&f, &t, 1, 3, 7);
    assert_int_equal(hs_dispatch_submit(f.d, &t.j), HS_STATUS_OK);
    wait_answers(&f.o, 1);
    assert_int_equal(t.j.status, HS_STATUS_OK);
    assert_int_equal(t.j.lane, 1);
    assert_int_equal(t.j.dec.policy, HS_ROUTE_POLICY_RETRY);
    assert_non_null(strstr(t.j.dec.reason, "retry"));
    expect_rows(&t);
    assert_int_equal(job_answers[1], 1);
    hs_router_route_stats(f.rt, 2, &st);
    assert_int_equal(st.retries, 1);
    struct hs_breaker_stats bs;
    hs_router_breaker_stats(f.rt, 0, hs_now_ns(), &bs); /* the failure reached the breaker */
    assert_int_equal(bs.failures, 1);
    hs_job_release(&t.j);

    /* the budget is spent: a failure is the answer, and the other lane is never tried */
    runner_set(&f.r[0], 1, false);
    runner_set(&f.r[1], 1, false);
    struct tjob u;
    tjob_init(&f, &u, 2, 2, 9);
    assert_int_equal(hs_dispatch_submit(f.d, &u.j), HS_STATUS_OK);
    wait_answers(&f.o, 2);
    assert_int_equal(u.j.status, HS_STATUS_ENGINE);
    assert_null(u.j.out);
    assert_int_not_equal(u.j.dec.policy, HS_ROUTE_POLICY_RETRY);
    assert_int_equal(runner_pending_failures(&f.r[0]) + runner_pending_failures(&f.r[1]), 1);
    assert_int_equal(job_answers[2], 1);
    hs_router_route_stats(f.rt, 2, &st);
    assert_int_equal(st.retries, 1);
    assert_int_equal(st.retries_denied, 1);
    hs_job_release(&u.j);
    wait_let_go(&f.o);
    hs_sched_drain(f.s, -1);
    fixture_free(&f);
}

/* A route with one lane and no failover is never retried, whatever the budget. */
static void single_lane_route_not_retried(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.retry_budget_max = 10;
    o.retry_budget_ratio = 1;
    struct fixture f;
    fixture_init(&f, &o);
    runner_set(&f.r[0], 1, false);
    struct tjob t;
    tjob_init(&f, &t, 1, 1, 5);
    assert_int_equal(hs_dispatch_submit(f.d, &t.j), HS_STATUS_OK);
    wait_answers(&f.o, 1);
    assert_int_equal(t.j.status, HS_STATUS_ENGINE);
    assert_int_equal(t.j.lane, 0);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 0, &st);
    assert_int_equal(st.retries + st.retries_denied, 0);
    hs_job_release(&t.j);
    wait_let_go(&f.o);
    pthread_mutex_lock(&f.r[1].mu);
    assert_int_equal(f.r[1].batches, 0);
    pthread_mutex_unlock(&f.r[1].mu);
    hs_sched_drain(f.s, -1);
    fixture_free(&f);
}

/* Route "a" shadowed to route "b" at ratio 1; lane 1 swaps its rows, so each row's cosine is
 * known: 2 s l / (s^2 + l^2). The answer is never the copy's. */
static void shadow_compared_and_reported(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.routes[0].shadow_route = 1;
    o.routes[0].shadow_ratio = 1.0;
    struct fixture f;
    fixture_init(&f, &o);
    f.r[1].swap = true;
    static struct tjob t[4];
    double want_sum = 0, want_min = 1;
    int rows = 0;
    for (int i = 0; i < 4; i++) {
        tjob_init(&f, &t[i], (uint64_t)i, 2 + i, 1 + i);
        assert_int_equal(hs_dispatch_submit(f.d, &t[i].j), HS_STATUS_OK);
        for (int s = 0; s < t[i].j.n_seqs; s++) {
            double sum = 0, len = t[i].seqs[s].n_tokens;
            for (int k = 0; k < len; k++) sum += t[i].ids[s][k];
            double c = 2 * sum * len / (sum * sum + len * len);
            want_sum += c;
            if (c < want_min) want_min = c;
            rows++;
        }
    }
    wait_answers(&f.o, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t[i].j.status, HS_STATUS_OK);
        assert_int_equal(t[i].j.lane, 0);
        expect_rows(&t[i]); /* the answer's rows, not the swapped copy's */
        hs_job_release(&t[i].j);
    }
    wait_let_go(&f.o); /* the copies too */
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 0, &st);
    assert_int_equal(st.shadow_sent, 4);
    assert_int_equal(st.shadow_failed, 0);
    assert_int_equal(st.shadow_compared, rows);
    assert_true(fabs(st.shadow_cos_sum - want_sum) < 1e-6);
    assert_true(fabs(st.shadow_cos_min - want_min) < 1e-6);
    for (int i = 0; i < 4; i++) assert_int_equal(job_answers[i], 1); /* copies answer nobody */

    /* a failed copy is reported as failed, and the answer stands */
    runner_set(&f.r[1], 1, false);
    struct tjob u;
    tjob_init(&f, &u, 10, 1, 3);
    assert_int_equal(hs_dispatch_submit(f.d, &u.j), HS_STATUS_OK);
    wait_answers(&f.o, 5);
    assert_int_equal(u.j.status, HS_STATUS_OK);
    hs_job_release(&u.j);
    wait_let_go(&f.o);
    hs_router_route_stats(f.rt, 0, &st);
    assert_int_equal(st.shadow_sent, 5);
    assert_int_equal(st.shadow_failed, 1);
    assert_int_equal(st.shadow_compared, rows);
    hs_sched_drain(f.s, -1);
    fixture_free(&f);
}

/* Route "b" fails over to "a" at most for 30 % of the traffic its open breaker blocks; the
 * breaker is opened by failures the dispatch reports. */
static void failover_cap_respected(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.default_route = 1;
    o.routes[1].failover_route = 0;
    o.routes[1].failover_ratio_max = 0.3;
    struct fixture f;
    fixture_init(&f, &o);
    runner_set(&f.r[1], 0, true);
    static struct tjob t[104];
    for (int i = 0; i < 4; i++) {
        tjob_init(&f, &t[i], (uint64_t)i, 1, i);
        assert_int_equal(hs_dispatch_submit(f.d, &t[i].j), HS_STATUS_OK);
        wait_answers(&f.o, i + 1);
        assert_int_equal(t[i].j.status, HS_STATUS_ENGINE);
    }
    struct hs_breaker_stats bs;
    hs_router_breaker_stats(f.rt, 1, hs_now_ns(), &bs);
    assert_int_equal(bs.state, HS_BREAKER_OPEN);

    int accepted = 0, refused = 0;
    for (int i = 4; i < 104; i++) {
        tjob_init(&f, &t[i], (uint64_t)i, 1, i);
        hs_status st = hs_dispatch_submit(f.d, &t[i].j);
        if (st == HS_STATUS_OK) {
            assert_int_equal(t[i].j.dec.policy, HS_ROUTE_POLICY_FAILOVER);
            assert_int_equal(t[i].j.dec.lane, 0);
            accepted++;
        } else {
            assert_int_equal(st, HS_STATUS_OVERLOADED);
            assert_true(t[i].j.retry_after_s > 0);
            refused++;
        }
        assert_true(accepted <= 0.3 * (i - 3)); /* at every moment */
    }
    assert_int_equal(accepted, 30);
    assert_int_equal(refused, 70);
    wait_answers(&f.o, 4 + accepted);
    int answers = 0;
    for (int i = 0; i < 104; i++) {
        answers += job_answers[i];
        assert_int_equal(job_answers[i], i < 4 || t[i].j.dec.status == HS_STATUS_OK ? 1 : 0);
        if (i >= 4 && job_answers[i]) assert_int_equal(t[i].j.status, HS_STATUS_OK);
        hs_job_release(&t[i].j);
    }
    assert_int_equal(answers, 34);
    wait_let_go(&f.o);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 1, &st);
    assert_int_equal(st.blocked, 100);
    assert_int_equal(st.failed_over, 30);
    hs_sched_drain(f.s, -1);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answered_exactly_once),
        cmocka_unit_test(engine_failure_retried_within_budget),
        cmocka_unit_test(single_lane_route_not_retried),
        cmocka_unit_test(shadow_compared_and_reported),
        cmocka_unit_test(failover_cap_respected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
