/* Fair shares between tenants (sched.h "Fair shares"), on the stepped scheduler so that every
 * batch is exact: the start-time fair order, the bounds fair_batch_us puts on a batch, weights,
 * shedding by share, and over_share (a tenant past its share of what the lane serves waits
 * behind the tenants within theirs). */
#include "sched/treq.h"

#include <math.h>
#include <string.h>

/* Fair shares, stepped so that every batch is exact. A floods 10x (40 requests) before B and C
 * send 4 each: in fair order B's and C's are batched with A's first ones, not after A's backlog
 * (arrival order, fair off, runs them last). Admission predicts C's wait from its own share,
 * and a full queue sheds A's newest for C. */
static struct treq *fair_req(int tenant, double weight, int64_t deadline)
{
    int lens[1] = {10};
    struct treq *t = treq_new(1, lens, tenant, HS_PRIORITY_INTERACTIVE, 0);
    t->r.tenant = tenant;
    t->r.weight = weight;
    t->r.deadline_ns = deadline;
    return t;
}

/* As fair_req, one sequence of len tokens. */
static struct treq *fair_req_len(int tenant, int len, int64_t deadline)
{
    struct treq *t = treq_new(1, &len, tenant, HS_PRIORITY_INTERACTIVE, 0);
    t->r.tenant = tenant;
    t->r.weight = 1;
    t->r.deadline_ns = deadline;
    return t;
}

/* Runs n batches of 1 ms each on the stepped lane (*now: the clock). */
static void fair_run(struct hs_sched *s, int n, int64_t *now)
{
    for (int i = 0; i < n; i++) {
        struct hs_sched_step b;
        int64_t wake;
        assert_true(hs_sched_step_begin(s, &b, &wake));
        *now += 1000000LL;
        hs_sched_step_clock(s, *now);
        hs_sched_step_end(s, b.lane, b.slot, HS_STATUS_OK, NULL);
    }
}

static int fair_done(struct treq **r, int n)
{
    int d = 0;
    for (int i = 0; i < n; i++) d += treq_is_done(r[i]);
    return d;
}

static void fair_shares_between_tenants(void **state)
{
    (void)state;
    struct hs_lane_opts o = treq_lane_opts();
    o.batch_max = 4;
    o.throughput_init_tokens_per_s = 10000;
    struct hs_error err;
    const int64_t t0 = 1000000000LL, far = t0 + 1000000000000LL;
    for (int fair = 0; fair < 2; fair++) {
        o.fair = fair;
        struct hs_sched *s;
        int64_t now = t0;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[40], *b[4], *c[4], *a2, *c2;
        for (int i = 0; i < 40; i++) {
            a[i] = fair_req(1, 1, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        for (int i = 0; i < 4; i++) {
            b[i] = fair_req(2, 1, far);
            c[i] = fair_req(3, 1, far);
            assert_int_equal(hs_sched_submit(s, &b[i]->r), HS_STATUS_OK);
            assert_int_equal(hs_sched_submit(s, &c[i]->r), HS_STATUS_OK);
        }
        /* the wait admission predicts: a new tenant D's share against one more of A's */
        a2 = fair_req(1, 1, far);
        c2 = fair_req(4, 1, far);
        bool fits;
        double wa = hs_sched_lane_predict(s, 0, &a2->r, &fits);
        double wc = hs_sched_lane_predict(s, 0, &c2->r, &fits);
        if (fair)
            assert_true(wc < 0.25 * wa);
        else
            assert_true(fabs(wc - wa) < 1e-12);
        /* three batches of 4: all of B's and C's (fair), none of them (arrival order) */
        fair_run(s, 3, &now);
        assert_int_equal(fair_done(b, 4) + fair_done(c, 4), fair ? 8 : 0);
        assert_int_equal(fair_done(a, 40), fair ? 4 : 12);
        fair_run(s, 9, &now);
        assert_int_equal(fair_done(a, 40) + fair_done(b, 4) + fair_done(c, 4), 48);
        hs_sched_destroy(s);
        for (int i = 0; i < 40; i++) treq_free(a[i]);
        for (int i = 0; i < 4; i++) {
            treq_free(b[i]);
            treq_free(c[i]);
        }
        treq_free(a2);
        treq_free(c2);
    }

    /* two buckets, A's short sequences sparse (1 in 8): a batch of them spans much of A's
     * backlog in the fair order, yet a newcomer D joins the next batch of the other bucket */
    {
        o.fair = true;
        struct hs_sched *s;
        int64_t now = t0;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[40], *d;
        for (int i = 0; i < 40; i++) {
            int len[1] = {i % 8 ? 20 : 10};
            a[i] = treq_new(1, len, 1, HS_PRIORITY_INTERACTIVE, 0);
            a[i]->r.tenant = 1;
            a[i]->r.deadline_ns = far;
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        fair_run(s, 1, &now); /* bucket 16: the 4 short ones */
        assert_int_equal(fair_done(a, 40), 4);
        int len[1] = {20};
        d = treq_new(1, len, 4, HS_PRIORITY_INTERACTIVE, 0);
        d->r.tenant = 4;
        d->r.deadline_ns = far;
        assert_int_equal(hs_sched_submit(s, &d->r), HS_STATUS_OK);
        fair_run(s, 1, &now);
        assert_int_equal(treq_is_done(d), 1);
        hs_sched_destroy(s);
        for (int i = 0; i < 40; i++) treq_free(a[i]);
        treq_free(d);
    }

    /* a request's sequences go in one turn: E's three join A's first in the first batch */
    {
        o.fair = true;
        struct hs_sched *s;
        int64_t now = t0;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[10], *e;
        for (int i = 0; i < 10; i++) {
            a[i] = fair_req(1, 1, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        int lens[3] = {10, 10, 10};
        e = treq_new(3, lens, 5, HS_PRIORITY_INTERACTIVE, 0);
        e->r.tenant = 5;
        e->r.deadline_ns = far;
        assert_int_equal(hs_sched_submit(s, &e->r), HS_STATUS_OK);
        fair_run(s, 1, &now);
        assert_int_equal(treq_is_done(e), 1);
        assert_int_equal(fair_done(a, 10), 1);
        hs_sched_destroy(s);
        for (int i = 0; i < 10; i++) treq_free(a[i]);
        treq_free(e);
    }

    /* a batch forms from one bucket: A's batch of bucket 32 stops at half a full batch's
     * predicted time (8 x 32 tokens: 25.6 ms; 6 of A's 2 ms sequences) while B waits in bucket 16
     * with a lower tag than A's later ones, and B runs next; without B, a full batch of 8 */
    for (int with_b = 0; with_b < 2; with_b++) {
        o.fair = true;
        o.batch_max = 8;
        struct hs_sched *s;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[20], *b = NULL;
        for (int i = 0; i < 20; i++) {
            int len[1] = {20};
            a[i] = treq_new(1, len, 1, HS_PRIORITY_INTERACTIVE, 0);
            a[i]->r.tenant = 1;
            a[i]->r.deadline_ns = far;
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        hs_sched_step_clock(s, t0 + 1000000LL); /* B is the younger: A's bucket goes first */
        if (with_b) {
            b = fair_req(2, 1, far);
            assert_int_equal(hs_sched_submit(s, &b->r), HS_STATUS_OK);
        }
        struct hs_sched_step st;
        int64_t wake, now = t0 + 1000000LL;
        assert_true(hs_sched_step_begin(s, &st, &wake));
        assert_int_equal(st.n_seqs, with_b ? 6 : 8);
        assert_int_equal(st.shape_seq, 32);
        now += 12000000LL;
        hs_sched_step_clock(s, now);
        hs_sched_step_end(s, st.lane, st.slot, HS_STATUS_OK, NULL);
        if (with_b) {
            fair_run(s, 1, &now);
            assert_int_equal(treq_is_done(b), 1);
            assert_int_equal(fair_done(a, 20), 6);
        }
        fair_run(s, with_b ? 2 : 2, &now);
        assert_int_equal(fair_done(a, 20), 20);
        hs_sched_destroy(s);
        for (int i = 0; i < 20; i++) treq_free(a[i]);
        if (b) treq_free(b);
    }
    o.batch_max = 4;

    /* fair_batch_us (2.5 ms: 25 tokens here) cuts the work of a tenant that runs ahead: more
     * than a full batch (4 x 16 padded tokens in bucket 16) past the virtual time, or past the
     * next start tag of another tenant active within the last second. A floods buckets 16 and 32
     * (two 16-token requests then one 30-token, tags 62 apart per round), B sends three 10-token
     * requests (tags 0, 10, 20; B's finish tag 30): the first batch (A0 B0 B10 A16) stays whole
     * though it runs 5.2 ms (no sequence past 30); the second is B20 alone, as A62 is past B's
     * next start (30) and would take the batch past 2.5 ms */
    {
        o.fair = true;
        o.fair_batch_us = 2500;
        struct hs_sched *s;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[12], *b[3];
        for (int i = 0; i < 12; i++) {
            a[i] = fair_req_len(1, i % 3 == 2 ? 30 : 16, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        for (int i = 0; i < 3; i++) {
            b[i] = fair_req_len(2, 10, far);
            assert_int_equal(hs_sched_submit(s, &b[i]->r), HS_STATUS_OK);
        }
        struct hs_sched_step st;
        int64_t wake, now = t0;
        assert_true(hs_sched_step_begin(s, &st, &wake));
        assert_int_equal(st.shape_seq, 16);
        assert_int_equal(st.n_seqs, 4); /* near the virtual time: not cut */
        now += 6400000LL;               /* 64 padded tokens at 10 per ms */
        hs_sched_step_clock(s, now);
        hs_sched_step_end(s, st.lane, st.slot, HS_STATUS_OK, NULL);
        assert_int_equal(fair_done(b, 3), 2);
        assert_true(hs_sched_step_begin(s, &st, &wake));
        assert_int_equal(st.shape_seq, 16);
        assert_int_equal(st.n_seqs, 1); /* A62 is past B's next start: cut */
        now += 1600000LL;
        hs_sched_step_clock(s, now);
        hs_sched_step_end(s, st.lane, st.slot, HS_STATUS_OK, NULL);
        assert_int_equal(fair_done(b, 3), 3);
        hs_sched_destroy(s);
        for (int i = 0; i < 12; i++) treq_free(a[i]);
        for (int i = 0; i < 3; i++) treq_free(b[i]);
        o.fair_batch_us = 0;
    }

    /* A flood held near the virtual time (admission's share keeps it to a few in flight, so it
     * never gets a full batch ahead): with B active within the last second but nothing of B's
     * queued, fair_batch_us still cuts A's batch (A0 A16: 32 tokens past 2.5 ms: A0 alone, then
     * A16 alone, ...); once B was last seen more than a second ago, A's batch is whole */
    for (int b_recent = 0; b_recent < 2; b_recent++) {
        o.fair = true;
        o.fair_batch_us = 2500;
        struct hs_sched *s;
        int64_t now = t0;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *b = fair_req_len(2, 10, far), *a[4];
        assert_int_equal(hs_sched_submit(s, &b->r), HS_STATUS_OK);
        fair_run(s, 1, &now); /* B's request runs alone */
        assert_int_equal(treq_is_done(b), 1);
        now += b_recent ? 100000000LL : 1500000000LL; /* 0.1 s or 1.5 s later */
        hs_sched_step_clock(s, now);
        for (int i = 0; i < 4; i++) {
            a[i] = fair_req_len(1, 16, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        struct hs_sched_step st;
        int64_t wake;
        assert_true(hs_sched_step_begin(s, &st, &wake));
        assert_int_equal(st.n_seqs, b_recent ? 1 : 4);
        now += 2000000LL;
        hs_sched_step_clock(s, now);
        hs_sched_step_end(s, st.lane, st.slot, HS_STATUS_OK, NULL);
        fair_run(s, b_recent ? 3 : 0, &now);
        assert_int_equal(fair_done(a, 4), 4);
        hs_sched_destroy(s);
        treq_free(b);
        for (int i = 0; i < 4; i++) treq_free(a[i]);
        o.fair_batch_us = 0;
    }

    /* weights 2:1 under saturation: 2:1 service, 16 and 8 sequences of 24 */
    o.fair = true;
    struct hs_sched *s;
    int64_t now = t0;
    assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
    struct treq *heavy[30], *light[30];
    for (int i = 0; i < 30; i++) {
        heavy[i] = fair_req(1, 2, far);
        light[i] = fair_req(2, 1, far);
        assert_int_equal(hs_sched_submit(s, &light[i]->r), HS_STATUS_OK);
        assert_int_equal(hs_sched_submit(s, &heavy[i]->r), HS_STATUS_OK);
    }
    fair_run(s, 6, &now);
    assert_int_equal(fair_done(heavy, 30), 16);
    assert_int_equal(fair_done(light, 30), 8);
    hs_sched_destroy(s);
    for (int i = 0; i < 30; i++) {
        treq_free(heavy[i]);
        treq_free(light[i]);
    }

    /* a full queue (40): C's request sheds A's last one; A's next is refused, C's is not */
    o.queue_max = 40;
    for (int fair = 0; fair < 2; fair++) {
        o.fair = fair;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *a[41], *c1;
        for (int i = 0; i < 40; i++) {
            a[i] = fair_req(1, 1, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        c1 = fair_req(3, 1, far);
        a[40] = fair_req(1, 1, far);
        assert_int_equal(hs_sched_submit(s, &c1->r), fair ? HS_STATUS_OK : HS_STATUS_OVERLOADED);
        assert_int_equal(hs_sched_submit(s, &a[40]->r), HS_STATUS_OVERLOADED);
        if (fair) {
            assert_int_equal(treq_is_done(a[39]), 1);
            assert_int_equal(a[39]->r.status, HS_STATUS_OVERLOADED);
            assert_non_null(strstr(a[39]->r.msg, "fair share"));
        }
        hs_sched_destroy(s);
        for (int i = 0; i < 41; i++) treq_free(a[i]);
        treq_free(c1);
    }
}

/* Runs the next batch, which takes fixed_ns plus per_token_ns a token of the stepped clock
 * (*now); returns its sequences. */
static int step_batch(struct hs_sched *s, int64_t *now, int64_t fixed_ns, int64_t per_token_ns)
{
    struct hs_sched_step b;
    int64_t wake;
    assert_true(hs_sched_step_begin(s, &b, &wake));
    *now += fixed_ns + per_token_ns * b.tokens;
    hs_sched_step_clock(s, *now);
    hs_sched_step_end(s, b.lane, b.slot, HS_STATUS_OK, NULL);
    return b.n_seqs;
}

/* over_share 1.25: A has had the lane to itself for a while B was active (three batches of 4 x
 * 10 tokens back to back: the lane busy all the time, A with almost all it served), so A is past
 * its share. A's next 8 requests start a full batch past the virtual time: B's 3, sent after
 * them, run first, in a batch of their own (B's batch takes none of A's work), then A's. When
 * nothing but A's work is queued, the virtual time is at A's next tag, and B's next request,
 * starting there, still goes first (alone). Without fair_batch_us, a batch of A's work while B
 * is active stops at twice the batch's fixed cost: on a lane whose batches cost 100 ms whatever
 * they hold, A's batches stay whole; on one whose batches cost 2 ms plus 2 ms a token, A runs a
 * sequence a batch. With over_share 0 (start-time fair order alone) B's 3 share their first
 * batch with A's work. */
static void over_share_waits_behind_shares(void **state)
{
    (void)state;
    struct hs_lane_opts o = treq_lane_opts();
    o.fair = true;
    o.batch_max = 4;
    o.throughput_init_tokens_per_s = 10000;
    struct hs_error err;
    const int64_t t0 = 1000000000LL, far = t0 + 1000000000000LL;
    for (int run = 0; run < 3; run++) { /* off; on, flat costs; on, costs by token */
        const bool on = run > 0;
        const int64_t fixed = run == 2 ? 2000000LL : 100000000LL;
        const int64_t per_token = run == 2 ? 2000000LL : 0;
        const int whole = run == 2 ? 1 : 4; /* A's batches while B is active */
        o.over_share = on ? 1.25 : 0;
        struct hs_sched *s;
        int64_t now = t0;
        assert_int_equal(hs_sched_create_stepped(&o, 1, NULL, t0, &s, &err), HS_STATUS_OK);
        struct treq *b0 = fair_req(2, 1, far), *a[20], *b[4] = {NULL};
        assert_int_equal(hs_sched_submit(s, &b0->r), HS_STATUS_OK);
        assert_int_equal(step_batch(s, &now, fixed, per_token), 1);
        for (int i = 0; i < 12; i++) {
            a[i] = fair_req(1, 1, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        for (int i = 0; i < 3; i++) assert_int_equal(step_batch(s, &now, fixed, per_token), 4);
        assert_int_equal(fair_done(a, 12), 12);
        for (int i = 12; i < 20; i++) {
            a[i] = fair_req(1, 1, far);
            assert_int_equal(hs_sched_submit(s, &a[i]->r), HS_STATUS_OK);
        }
        for (int i = 0; i < 3; i++) {
            b[i] = fair_req(2, 1, far);
            assert_int_equal(hs_sched_submit(s, &b[i]->r), HS_STATUS_OK);
        }
        const int n = step_batch(s, &now, fixed, per_token);
        if (on) {
            assert_int_equal(n, 3);
            assert_int_equal(fair_done(b, 3), 3);
            assert_int_equal(fair_done(a + 12, 8), 0);
            /* A's turn, nobody else queued */
            assert_int_equal(step_batch(s, &now, fixed, per_token), whole);
            assert_int_equal(fair_done(a + 12, 8), whole);
            b[3] = fair_req(2, 1, far);
            assert_int_equal(hs_sched_submit(s, &b[3]->r), HS_STATUS_OK);
            assert_int_equal(step_batch(s, &now, fixed, per_token), 1);
            assert_int_equal(treq_is_done(b[3]), 1);
            assert_int_equal(fair_done(a + 12, 8), whole);
            while (fair_done(a + 12, 8) < 8)
                assert_int_equal(step_batch(s, &now, fixed, per_token), whole);
        } else {
            assert_int_equal(n, 4);
            assert_true(fair_done(a + 12, 8) >= 1); /* interleaved with A's */
            while (fair_done(a + 12, 8) + fair_done(b, 3) < 11)
                step_batch(s, &now, fixed, per_token);
        }
        assert_int_equal(fair_done(a, 20), 20);
        hs_sched_destroy(s);
        treq_free(b0);
        for (int i = 0; i < 20; i++) treq_free(a[i]);
        for (int i = 0; i < 4; i++)
            if (b[i]) treq_free(b[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fair_shares_between_tenants),
        cmocka_unit_test(over_share_waits_behind_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
