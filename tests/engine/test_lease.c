/* Cores lent between CPU engines (engine/cpu/lease.h), the table alone: an idle owner lends, a
 * busy or waiting one does not; a preempting borrower's claim makes the owner's next round
 * yield until the claim has been over for the idle time, never past HS_CPU_LEASE_YIELD_MAX_NS,
 * and lets the preemptor borrow while the owner waits; the counters count it. Cores 1000-1003
 * (the table's entries; no thread is pinned anywhere). */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "core/clock.h"
#include "engine/cpu/lease.h"
#include "engine/engine.h"

struct owner {
    int core;
    atomic_int state; /* 0 not started, 1 about to take, 2 holding the core, 3 dropped */
    int64_t took_ns;
};

static void *owner_round(void *p)
{
    struct owner *o = p;
    atomic_store(&o->state, 1);
    hs__cpu_lease_take(o->core);
    o->took_ns = hs_now_ns();
    atomic_store(&o->state, 2);
    hs__cpu_lease_drop(o->core);
    atomic_store(&o->state, 3);
    return NULL;
}

static void lending_waits_for_idle_owners(void **state)
{
    (void)state;
    const int core = 1000;
    assert_false(hs__cpu_lease_watched(core));
    assert_false(hs__cpu_lease_borrow(core, 0)); /* nobody borrows it: not in the table */
    hs__cpu_lease_watch(core);
    assert_true(hs__cpu_lease_watched(core));
    assert_false(hs__cpu_lease_preempted(core));
    hs__cpu_lease_take(core);
    assert_false(hs__cpu_lease_borrow(core, 0)); /* its owner runs */
    hs__cpu_lease_drop(core);
    assert_false(hs__cpu_lease_borrow(core, 1000000000LL)); /* ran within the idle time */
    assert_true(hs__cpu_lease_borrow(core, 0));
    assert_false(hs__cpu_lease_borrow(core, 0)); /* lent already */
    /* without a preempting borrower the preemptor's calls do nothing */
    assert_false(hs__cpu_lease_borrow_first(core));
    hs__cpu_lease_claim(core);
    hs__cpu_lease_unclaim(core);
    /* the owner waits for the loan to end */
    struct owner o = {.core = core};
    pthread_t th;
    pthread_create(&th, NULL, owner_round, &o);
    while (atomic_load(&o.state) == 0) usleep(100);
    usleep(20000);
    assert_int_equal(atomic_load(&o.state), 1);
    hs__cpu_lease_return(core);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&o.state), 3);
    struct hs_cpu_lease_stats s;
    assert_true(hs_engine_cpu_lease_stats(core, &s));
    assert_int_equal(s.lent_stages, 1);
    assert_int_equal(s.waits, 1);
    assert_true(s.wait_max_ns >= 15000000);
    assert_int_equal(s.yields, 0);
    assert_int_equal(s.claims, 0);
}

static void preempting_borrower_comes_first(void **state)
{
    (void)state;
    const int core = 1001;
    hs__cpu_lease_watch_preempt(core);
    assert_true(hs__cpu_lease_watched(core));
    assert_true(hs__cpu_lease_preempted(core));
    /* a running owner: the claim does not take the core from its round ... */
    hs__cpu_lease_take(core);
    hs__cpu_lease_claim(core);
    assert_false(hs__cpu_lease_borrow_first(core));
    hs__cpu_lease_drop(core);
    /* ... but once the round ended the preemptor has it though the owner ran just now */
    assert_true(hs__cpu_lease_borrow_first(core));
    /* the owner's next round yields: it waits for the loan, and after the return, while the
     * claim stands (bound lifted: this machine may stall the test for longer than 20 ms) */
    hs__cpu_lease_set_yield_max(3600LL * 1000000000LL);
    struct owner o = {.core = core};
    pthread_t th;
    pthread_create(&th, NULL, owner_round, &o);
    while (atomic_load(&o.state) == 0) usleep(100);
    usleep(5000);
    hs__cpu_lease_return(core);
    usleep(5000);
    assert_int_equal(atomic_load(&o.state), 1);
    /* the preemptor's next stage borrows it again past the waiting owner (a plain borrower
     * would not: an owner waits) */
    assert_false(hs__cpu_lease_borrow(core, 0));
    assert_true(hs__cpu_lease_borrow_first(core));
    hs__cpu_lease_return(core);
    const int64_t end = hs_now_ns();
    hs__cpu_lease_unclaim(core);
    pthread_join(th, NULL);
    hs__cpu_lease_set_yield_max(0);
    assert_int_equal(atomic_load(&o.state), 3);
    /* the owner went on only once the claim had been over for the idle time */
    assert_true(o.took_ns - end >= HS_CPU_LEASE_IDLE_NS);
    struct hs_cpu_lease_stats s;
    assert_true(hs_engine_cpu_lease_stats(core, &s));
    assert_int_equal(s.claims, 1);
    assert_int_equal(s.claims_lent, 2);
    assert_int_equal(s.lent_stages, 2);
    assert_int_equal(s.yields, 1);
    assert_true(s.yield_ns >= HS_CPU_LEASE_IDLE_NS);
    /* a claim over for longer than the idle time holds nobody up */
    usleep(1000);
    const int64_t t0 = hs_now_ns();
    hs__cpu_lease_take(core);
    hs__cpu_lease_drop(core);
    assert_true(hs_now_ns() - t0 < HS_CPU_LEASE_YIELD_MAX_NS);
    assert_true(hs_engine_cpu_lease_stats(core, &s));
    assert_int_equal(s.yields, 1);
}

static void yield_is_bounded(void **state)
{
    (void)state;
    const int core = 1002;
    hs__cpu_lease_watch_preempt(core);
    /* a preemptor that never stops (a latency lane in overload): the owner's round waits at
     * most HS_CPU_LEASE_YIELD_MAX_NS, then runs, and the preemptor cannot borrow meanwhile */
    hs__cpu_lease_claim(core);
    struct owner o = {.core = core};
    const int64_t t0 = hs_now_ns();
    pthread_t th;
    pthread_create(&th, NULL, owner_round, &o);
    pthread_join(th, NULL);
    const int64_t waited = o.took_ns - t0;
    assert_true(waited >= HS_CPU_LEASE_YIELD_MAX_NS);
    assert_true(waited < 100LL * HS_CPU_LEASE_YIELD_MAX_NS); /* it did not wait for the claim */
    hs__cpu_lease_take(core);
    assert_false(hs__cpu_lease_borrow_first(core));
    hs__cpu_lease_drop(core);
    hs__cpu_lease_unclaim(core);
    struct hs_cpu_lease_stats s;
    assert_true(hs_engine_cpu_lease_stats(core, &s));
    assert_true(s.yields >= 1);
    assert_true(s.yield_max_ns >= HS_CPU_LEASE_YIELD_MAX_NS);
    printf("# a claim that never ends held the owner %.1f ms (bound %.0f ms)\n", waited / 1e6,
           HS_CPU_LEASE_YIELD_MAX_NS / 1e6);
}

static void out_of_range_cores_are_ignored(void **state)
{
    (void)state;
    hs__cpu_lease_watch_preempt(-1);
    hs__cpu_lease_watch_preempt(HS_CPU_LEASE_CORES);
    assert_false(hs__cpu_lease_preempted(-1));
    assert_false(hs__cpu_lease_preempted(HS_CPU_LEASE_CORES));
    assert_false(hs__cpu_lease_borrow_first(HS_CPU_LEASE_CORES));
    hs__cpu_lease_claim(-1);
    hs__cpu_lease_unclaim(HS_CPU_LEASE_CORES);
    struct hs_cpu_lease_stats s;
    assert_false(hs_engine_cpu_lease_stats(1003, &s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lending_waits_for_idle_owners),
        cmocka_unit_test(preempting_borrower_comes_first),
        cmocka_unit_test(yield_is_bounded),
        cmocka_unit_test(out_of_range_cores_are_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
