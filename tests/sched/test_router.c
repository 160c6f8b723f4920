/* Router: rules, least predicted completion, split, failover cap, breakers, retry budget,
 * cascade hook (judged by sched/cascade.h), fallback — over a scheduler whose lanes run a test
 * runner. Breakers are driven with an explicit clock, so no test sleeps or asserts a duration; runs
 * that must be in flight are held by a gate the test opens. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/router.h"
#include "sched/sched.h"

#define DIM 2
#define MS  1000000LL

struct runner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gated;
    int entered, running, running_max;
};

static hs_status run(void *ctx, int slot, const struct hs_batch *b, float *out,
                     struct hs_batch_timing *t, struct hs_error *err)
{
    (void)slot;
    (void)err;
    struct runner *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->entered++;
    c->running++;
    if (c->running > c->running_max) c->running_max = c->running;
    pthread_cond_broadcast(&c->cv);
    while (c->gated) pthread_cond_wait(&c->cv, &c->mu);
    c->running--;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < b->n_seqs * DIM; i++) out[i] = 1.0f;
    t->copy_in_ns = t->compute_ns = t->copy_out_ns = 1;
    return HS_STATUS_OK;
}

static void gate(struct runner *c, bool closed)
{
    pthread_mutex_lock(&c->mu);
    c->gated = closed;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void wait_entered(struct runner *c, int n)
{
    pthread_mutex_lock(&c->mu);
    while (c->entered < n) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* Lanes: 0 = model m on engine a, 1 = m on b, 2 = m2 on a. */
struct fixture {
    struct runner r[3];
    struct hs_sched *s;
    struct hs_router *rt;
};

static struct hs_lane_opts lane(struct runner *c, const char *engine, const char *model, int slots)
{
    struct hs_lane_opts o = {
        .engine = engine,
        .model = model,
        .dim = DIM,
        .seq_max = 128,
        .batch_window_us = 0,
        .batch_max = 32,
        .batch_max_tokens = 4096,
        .n_buckets = 2,
        .buckets = {16, 64},
        .queue_max = 64,
        .shed_batch_ratio = 0.75,
        .throughput_init_tokens_per_s = 1000,
        .throughput_ewma_alpha = 0.2,
        .slots = slots,
        .runner = {run, c},
    };
    return o;
}

static struct hs_router_opts base_opts(void)
{
    struct hs_router_opts o;
    memset(&o, 0, sizeof o);
    /* routes: 0 "ra" = lane 0, 1 "rb" = lane 1, 2 "both" = lanes 0 and 1, 3 "m2" = lane 2 */
    const char *names[] = {"ra", "rb", "both", "m2"};
    for (int i = 0; i < 4; i++) {
        struct hs_route *r = &o.routes[i];
        snprintf(r->name, sizeof r->name, "%s", names[i]);
        r->kind = HS_ROUTE_KIND_LANES;
        r->split_route = r->shadow_route = r->failover_route = -1;
    }
    o.routes[0].n_lanes = 1, o.routes[0].lanes[0] = 0;
    o.routes[1].n_lanes = 1, o.routes[1].lanes[0] = 1;
    o.routes[2].n_lanes = 2, o.routes[2].lanes[0] = 0, o.routes[2].lanes[1] = 1;
    o.routes[3].n_lanes = 1, o.routes[3].lanes[0] = 2;
    o.n_routes = 4;
    o.default_route = 0;
    o.fallback_lane = -1;
    o.breaker = (struct hs_breaker_opts){.window_requests = 4,
                                         .min_requests = 4,
                                         .error_ratio_max = 0.5,
                                         .latency_max_ms = 0,
                                         .open_ms = 100,
                                         .half_open_probes = 2};
    o.retry_budget_ratio = 0;
    o.retry_budget_max = 0;
    return o;
}

static void fixture_init(struct fixture *f, const struct hs_router_opts *ro, int slots)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 3; i++) {
        pthread_mutex_init(&f->r[i].mu, NULL);
        pthread_cond_init(&f->r[i].cv, NULL);
    }
    struct hs_lane_opts lanes[3] = {lane(&f->r[0], "a", "m", slots), lane(&f->r[1], "b", "m", 1),
                                    lane(&f->r[2], "a", "m2", 1)};
    struct hs_error err;
    if (hs_sched_create(lanes, 3, NULL, &f->s, &err)) fail_msg("sched: %s", err.msg);
    if (hs_router_create(f->s, ro, &f->rt, &err)) fail_msg("router: %s", err.msg);
}

static void fixture_free(struct fixture *f)
{
    for (int i = 0; i < 3; i++) gate(&f->r[i], false);
    hs_router_free(f->rt);
    hs_sched_destroy(f->s);
    for (int i = 0; i < 3; i++) {
        pthread_mutex_destroy(&f->r[i].mu);
        pthread_cond_destroy(&f->r[i].cv);
    }
}

/* A request of one sequence of n tokens, never submitted unless a test does. */
struct treq {
    struct hs_request r;
    struct hs_seq seq;
    int32_t ids[128];
    float out[DIM];
};

static void treq_init(struct treq *t, int n, const char *model, enum hs_priority p)
{
    memset(t, 0, sizeof *t);
    t->seq.ids = t->ids;
    t->seq.n_tokens = n;
    t->r.n_seqs = 1;
    t->r.seqs = &t->seq;
    t->r.out = t->out;
    t->r.model = model;
    t->r.priority = p;
    t->r.deadline_ns = hs_now_ns() + 600000 * MS;
    hs_request_init(&t->r);
}

static const char *hdr_value;
static const char *hdr(void *ctx, const char *name)
{
    (void)ctx;
    return !strcmp(name, "X-Tier") ? hdr_value : NULL;
}

static void decide(struct fixture *f, struct treq *t, const char *task, const char *key,
                   int64_t now, struct hs_route_decision *d)
{
    struct hs_route_query q = {
        .req = &t->r, .task = task, .key = key, .header = hdr, .header_ctx = NULL};
    hs_router_decide(f->rt, &q, now, d);
}

static void rules_and_fallback(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.rules[0] = (struct hs_route_rule){.route = 1, .priority = -1, .task = "embed"};
    snprintf(o.rules[0].header, sizeof o.rules[0].header, "X-Tier");
    snprintf(o.rules[0].value, sizeof o.rules[0].value, "gold");
    o.rules[1] = (struct hs_route_rule){.route = 1, .priority = HS_PRIORITY_BATCH};
    o.rules[2] = (struct hs_route_rule){.route = 0, .priority = -1, .tokens_max = 16};
    o.rules[3] = (struct hs_route_rule){.route = 1, .priority = -1, .tokens_min = 17};
    o.n_rules = 4;
    o.default_route = -1;
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct treq t;
    struct hs_route_decision d;
    int64_t now = hs_now_ns();

    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.status, HS_STATUS_OK);
    assert_int_equal(d.lane, 0);
    assert_int_equal(d.rule, 2);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_RULE);
    treq_init(&t, 40, "m", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.lane, 1);
    assert_int_equal(d.rule, 3);
    treq_init(&t, 10, "m", HS_PRIORITY_BATCH);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.rule, 1);
    /* header + task: both must hold */
    hdr_value = "gold";
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.rule, 2);
    decide(&f, &t, "embed", NULL, now, &d);
    assert_int_equal(d.rule, 0);
    assert_int_equal(d.lane, 1);
    hdr_value = "silver";
    decide(&f, &t, "embed", NULL, now, &d);
    assert_int_equal(d.rule, 2);
    hdr_value = NULL;
    /* model m2: no rule's route serves it, no default: the single-engine fallback */
    treq_init(&t, 10, "m2", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.status, HS_STATUS_OK);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_FALLBACK);
    assert_int_equal(d.lane, 2);
    treq_init(&t, 10, "nope", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, "embeddings", NULL, now, &d);
    assert_int_equal(d.status, HS_STATUS_NOT_FOUND);
    fixture_free(&f);
}

/* Route "both": the lane without a running batch wins; none in time -> OVERLOADED. */
static void least_predicted_completion(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.default_route = 2;
    struct fixture f;
    fixture_init(&f, &o, 1);
    gate(&f.r[0], true);
    struct treq busy, t;
    treq_init(&busy, 60, "m", HS_PRIORITY_INTERACTIVE);
    assert_int_equal(hs_sched_submit_lane(f.s, 0, &busy.r), HS_STATUS_OK);
    wait_entered(&f.r[0], 1); /* a 64-token batch runs on lane 0 */
    struct hs_route_decision d;
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, NULL, NULL, hs_now_ns(), &d);
    assert_int_equal(d.status, HS_STATUS_OK);
    assert_int_equal(d.lane, 1);
    assert_non_null(strstr(d.reason, "predicted"));
    /* 16 tokens at 1000 tokens/s cannot be answered within 1 ms, but lane 1 is idle: an idle
     * lane takes what fits (a prediction is only corrected by running a batch) */
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    t.r.deadline_ns = hs_now_ns() + 1 * MS;
    decide(&f, &t, NULL, NULL, hs_now_ns(), &d);
    assert_int_equal(d.status, HS_STATUS_OK);
    assert_int_equal(d.lane, 1);
    /* both lanes busy: none in time -> OVERLOADED */
    gate(&f.r[1], true);
    struct treq busy1;
    treq_init(&busy1, 60, "m", HS_PRIORITY_INTERACTIVE);
    assert_int_equal(hs_sched_submit_lane(f.s, 1, &busy1.r), HS_STATUS_OK);
    wait_entered(&f.r[1], 1);
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    t.r.deadline_ns = hs_now_ns() + 1 * MS;
    decide(&f, &t, NULL, NULL, hs_now_ns(), &d);
    assert_int_equal(d.status, HS_STATUS_OVERLOADED);
    assert_true(d.retry_after_s > 0);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 2, &st);
    assert_int_equal(st.shed, 1);
    gate(&f.r[0], false);
    gate(&f.r[1], false);
    hs_request_unref(&busy.r); /* the scheduler's reference goes when it answers */
    hs_request_unref(&busy1.r);
    hs_sched_drain(f.s, -1);
    fixture_free(&f);
}

static void split_sticky_and_even(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.routes[0].split_route = 1;
    o.routes[0].split_ratio = 0.3;
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct treq t;
    struct hs_route_decision d;
    int n_split = 0;
    for (int i = 0; i < 100; i++) {
        treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
        decide(&f, &t, NULL, NULL, hs_now_ns(), &d);
        n_split += d.policy == HS_ROUTE_POLICY_SPLIT;
        assert_int_equal(d.lane, d.policy == HS_ROUTE_POLICY_SPLIT ? 1 : 0);
    }
    assert_true(n_split >= 29 && n_split <= 31);
    /* one key, one side, every time; different keys reach both sides */
    int sides[2] = {0, 0};
    for (int k = 0; k < 40; k++) {
        char key[16];
        snprintf(key, sizeof key, "user-%d", k);
        int first = -1;
        for (int i = 0; i < 3; i++) {
            treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
            decide(&f, &t, NULL, key, hs_now_ns(), &d);
            if (first < 0) first = d.lane;
            assert_int_equal(d.lane, first);
        }
        sides[first]++;
    }
    assert_true(sides[0] > 0 && sides[1] > 0);
    fixture_free(&f);
}

static void report(struct fixture *f, int lane, bool probe, hs_status st, int64_t now)
{
    hs_router_on_result(f->rt, lane, probe, st, 0, false, now);
}

/* Errors open the breaker; blocked traffic fails over within the cap; half-open probes close
 * it; a failed probe re-opens it. */
static void breaker_and_failover_cap(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.routes[1].failover_route = 0;
    o.routes[1].failover_ratio_max = 0.3;
    o.default_route = 1;
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct treq t;
    struct hs_route_decision d;
    int64_t now = 1000 * MS;
    struct hs_breaker_stats bs;
    int eng_b = 1; /* engines are numbered in lane order: a, b */
    /* overload and queue timeouts are not the engine's fault */
    for (int i = 0; i < 8; i++) report(&f, 1, false, HS_STATUS_OVERLOADED, now);
    report(&f, 1, false, HS_STATUS_OK, now);
    report(&f, 1, false, HS_STATUS_OK, now);
    report(&f, 1, false, HS_STATUS_ENGINE, now);
    hs_router_breaker_stats(f.rt, eng_b, now, &bs);
    assert_string_equal(bs.engine, "b");
    assert_int_equal(bs.state, HS_BREAKER_CLOSED);
    report(&f, 1, false, HS_STATUS_ENGINE, now); /* 2 of 4 failed: open */
    hs_router_breaker_stats(f.rt, eng_b, now, &bs);
    assert_int_equal(bs.state, HS_BREAKER_OPEN);

    int failed_over = 0, refused = 0;
    for (int i = 0; i < 100; i++) {
        treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
        decide(&f, &t, NULL, NULL, now, &d);
        if (d.status == HS_STATUS_OK) {
            assert_int_equal(d.policy, HS_ROUTE_POLICY_FAILOVER);
            assert_int_equal(d.lane, 0);
            failed_over++;
        } else {
            assert_int_equal(d.status, HS_STATUS_OVERLOADED);
            assert_true(d.retry_after_s > 0);
            refused++;
        }
        assert_true(failed_over <= 0.3 * (i + 1)); /* the cap holds at every moment */
    }
    assert_int_equal(failed_over, 30);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 1, &st);
    assert_int_equal(st.blocked, 100);
    assert_int_equal(st.failed_over, 30);

    /* half-open after open_ms: two probes, then nothing until they report */
    now += 100 * MS;
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    assert_true(d.probe);
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_not_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    report(&f, 1, true, HS_STATUS_ENGINE, now); /* a probe fails: open again */
    hs_router_breaker_stats(f.rt, eng_b, now, &bs);
    assert_int_equal(bs.state, HS_BREAKER_OPEN);
    assert_int_equal(bs.opened, 2);

    now += 100 * MS;
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    report(&f, 1, true, HS_STATUS_OK, now);
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    report(&f, 1, true, HS_STATUS_OVERLOADED, now); /* never reached the engine: place back */
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_PROBE);
    report(&f, 1, true, HS_STATUS_OK, now);
    hs_router_breaker_stats(f.rt, eng_b, now, &bs);
    assert_int_equal(bs.state, HS_BREAKER_CLOSED);
    assert_int_equal(bs.closed, 1);
    decide(&f, &t, NULL, NULL, now, &d);
    assert_int_equal(d.policy, HS_ROUTE_POLICY_DEFAULT);
    assert_int_equal(d.lane, 1);
    /* a timeout inside a running batch (hung engine) and slow batches are failures too */
    for (int i = 0; i < 4; i++)
        hs_router_on_result(f.rt, 1, false, HS_STATUS_TIMEOUT, 0, true, now);
    hs_router_breaker_stats(f.rt, eng_b, now, &bs);
    assert_int_equal(bs.state, HS_BREAKER_OPEN);
    fixture_free(&f);
}

static void retry_budget(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    o.default_route = 2; /* lanes 0 and 1 */
    o.retry_budget_max = 2;
    o.retry_budget_ratio = 0.5;
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct treq t;
    struct hs_route_decision d, d2;
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    struct hs_route_query q = {.req = &t.r};
    int64_t now = hs_now_ns();
    hs_router_decide(f.rt, &q, now, &d);
    int sent = 0;
    for (int i = 0; i < 5; i++) {
        hs_router_retry(f.rt, &q, &d, now, &d2);
        if (d2.status == HS_STATUS_OK) {
            assert_int_not_equal(d2.lane, d.lane);
            assert_int_equal(d2.policy, HS_ROUTE_POLICY_RETRY);
            sent++;
        }
    }
    assert_int_equal(sent, 2); /* the bucket's two tokens */
    /* every routed request refills half a token */
    hs_router_decide(f.rt, &q, now, &d);
    hs_router_decide(f.rt, &q, now, &d);
    hs_router_retry(f.rt, &q, &d, now, &d2);
    assert_int_equal(d2.status, HS_STATUS_OK);
    hs_router_retry(f.rt, &q, &d, now, &d2);
    assert_int_equal(d2.status, HS_STATUS_OVERLOADED);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 2, &st);
    assert_int_equal(st.retries, 3);
    assert_int_equal(st.retries_denied, 4);
    fixture_free(&f);
}

/* The predict path's judge in miniature: row[0] is the small model's confidence, decided by
 * the one cascade policy (sched/cascade.h). */
static void judge(void *ctx, const struct hs_route *c, const float *rows, int n, int dim,
                  enum hs_cascade_decision *out)
{
    assert_non_null(c);
    assert_int_equal(c->kind, HS_ROUTE_KIND_CASCADE);
    for (int i = 0; i < n; i++) out[i] = hs_cascade_decide(ctx, rows[(size_t)i * dim]);
}

/* A cascade route: small route first; the judge (threshold 0.8, cap 0.25) decides per input;
 * escalations go to the big route and are counted on the cascade route. */
static void cascade_hook_and_cap(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    struct hs_route *c = &o.routes[o.n_routes++];
    snprintf(c->name, sizeof c->name, "casc");
    c->kind = HS_ROUTE_KIND_CASCADE;
    c->split_route = c->shadow_route = c->failover_route = -1;
    c->cascade_small = 0;
    c->cascade_big = 1;
    o.default_route = 4;
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct hs_route_decision d, d2;
    enum hs_cascade_decision dec[1];
    struct treq t;
    treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
    struct hs_route_query q = {.req = &t.r};
    hs_router_decide(f.rt, &q, hs_now_ns(), &d);
    assert_int_equal(hs_router_judge(f.rt, &d, t.out, 1, DIM, dec), HS_STATUS_NOT_FOUND);

    struct hs_cascade policy;
    struct hs_error err = {0};
    assert_int_equal(hs_cascade_init(&policy, &(struct hs_cascade_opts){0.8, 0.25}, &err),
                     HS_STATUS_OK);
    hs_router_set_cascade_fn(f.rt, judge, &policy);
    void *jctx;
    assert_ptr_equal(hs_router_cascade_fn(f.rt, &jctx), judge);
    assert_ptr_equal(jctx, &policy);
    int escalated = 0, capped = 0;
    for (int i = 0; i < 20; i++) {
        treq_init(&t, 10, "m", HS_PRIORITY_INTERACTIVE);
        hs_router_decide(f.rt, &q, hs_now_ns(), &d);
        assert_int_equal(d.lane, 0); /* the small route first */
        assert_int_equal(d.cascade_route, 4);
        float row[DIM] = {0.5f, 0}; /* every input unsure */
        assert_int_equal(hs_router_judge(f.rt, &d, row, 1, DIM, dec), HS_STATUS_OK);
        if (dec[0] == HS_CASCADE_CAPPED) capped++;
        if (dec[0] != HS_CASCADE_BIG) continue;
        hs_router_escalate(f.rt, &q, &d, hs_now_ns(), &d2);
        assert_int_equal(d2.status, HS_STATUS_OK);
        assert_int_equal(d2.lane, 1);
        assert_int_equal(d2.policy, HS_ROUTE_POLICY_ESCALATE);
        escalated++;
    }
    assert_int_equal(escalated, 5); /* the cap: 0.25 x 20 */
    assert_int_equal(capped, 15);
    struct hs_route_stats st;
    hs_router_route_stats(f.rt, 4, &st);
    assert_int_equal(st.cascades, 21);
    assert_int_equal(st.escalated, 5);
    assert_int_equal(st.escalations_denied, 15);
    /* Not a cascade decision: nothing to escalate to. */
    d.cascade_route = -1;
    hs_router_escalate(f.rt, &q, &d, hs_now_ns(), &d2);
    assert_int_equal(d2.status, HS_STATUS_INVALID_ARGUMENT);
    hs_cascade_destroy(&policy);
    fixture_free(&f);
}

/* slots = 2: two batches of one lane run at once. */
static void lane_slots_run_concurrently(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    struct fixture f;
    fixture_init(&f, &o, 2);
    gate(&f.r[0], true);
    struct treq a, b;
    treq_init(&a, 10, "m", HS_PRIORITY_INTERACTIVE);
    treq_init(&b, 60, "m", HS_PRIORITY_INTERACTIVE); /* another bucket: another batch */
    assert_int_equal(hs_sched_submit_lane(f.s, 0, &a.r), HS_STATUS_OK);
    assert_int_equal(hs_sched_submit_lane(f.s, 0, &b.r), HS_STATUS_OK);
    wait_entered(&f.r[0], 2);
    struct hs_lane_stats ls;
    hs_sched_lane_stats(f.s, 0, &ls);
    assert_int_equal(ls.running_batches, 2);
    gate(&f.r[0], false);
    hs_sched_drain(f.s, -1);
    assert_int_equal(f.r[0].running_max, 2);
    hs_request_unref(&a.r);
    hs_request_unref(&b.r);
    fixture_free(&f);
}

static void bad_options_rejected(void **state)
{
    (void)state;
    struct hs_router_opts o = base_opts();
    struct fixture f;
    fixture_init(&f, &o, 1);
    struct hs_router *rt = NULL;
    struct hs_error err;
    struct hs_router_opts bad = base_opts();
    bad.routes[2].lanes[1] = 2; /* lanes of two models */
    assert_int_equal(hs_router_create(f.s, &bad, &rt, &err), HS_STATUS_INVALID_ARGUMENT);
    bad = base_opts();
    bad.routes[0].failover_route = 0; /* itself */
    assert_int_equal(hs_router_create(f.s, &bad, &rt, &err), HS_STATUS_INVALID_ARGUMENT);
    bad = base_opts();
    bad.routes[0].split_ratio = 1.5;
    assert_int_equal(hs_router_create(f.s, &bad, &rt, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_null(rt);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rules_and_fallback),
        cmocka_unit_test(least_predicted_completion),
        cmocka_unit_test(split_sticky_and_even),
        cmocka_unit_test(breaker_and_failover_cap),
        cmocka_unit_test(retry_budget),
        cmocka_unit_test(cascade_hook_and_cap),
        cmocka_unit_test(lane_slots_run_concurrently),
        cmocka_unit_test(bad_options_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
