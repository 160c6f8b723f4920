/* The cascade policy (sched/cascade.h): exactly the inputs below the threshold escalate, and the
 * escalation cap holds at every point of a stream. */
#include "testutil.h"

#include <pthread.h>

#include "sched/cascade.h"

static void escalates_exactly_below_threshold(void **state)
{
    (void)state;
    struct hs_cascade c;
    struct hs_error err = {0};
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.9, 1.0}, &err), 0);
    const double conf[] = {0.5, 0.89999, 0.9, 0.95, 1.0, 0.6, 0.9000001};
    const enum hs_cascade_decision want[] = {HS_CASCADE_BIG,   HS_CASCADE_BIG,   HS_CASCADE_SMALL,
                                             HS_CASCADE_SMALL, HS_CASCADE_SMALL, HS_CASCADE_BIG,
                                             HS_CASCADE_SMALL};
    for (size_t i = 0; i < sizeof conf / sizeof conf[0]; i++)
        assert_int_equal(hs_cascade_decide(&c, conf[i]), want[i]);
    struct hs_cascade_stats st;
    hs_cascade_stats(&c, &st);
    assert_int_equal(st.decisions, 7);
    assert_int_equal(st.escalated, 3);
    assert_int_equal(st.capped, 0);
    assert_string_equal(hs_cascade_decision_name(HS_CASCADE_CAPPED), "capped");
    hs_cascade_destroy(&c);
}

static void cap_holds_at_every_point(void **state)
{
    (void)state;
    const double ratios[] = {0.0, 0.1, 0.25, 0.5, 0.999};
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++) {
        struct hs_cascade c;
        assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.9, ratios[r]}, NULL), 0);
        int64_t esc = 0, capped = 0;
        for (int i = 1; i <= 1000; i++) {
            /* every other input is unsure, and runs of 10 unsure ones */
            double conf = (i % 2 == 0 || (i / 10) % 7 == 3) ? 0.5 : 0.99;
            enum hs_cascade_decision d = hs_cascade_decide(&c, conf);
            if (conf >= 0.9)
                assert_int_equal(d, HS_CASCADE_SMALL);
            else
                assert_true(d == HS_CASCADE_BIG || d == HS_CASCADE_CAPPED);
            esc += d == HS_CASCADE_BIG;
            capped += d == HS_CASCADE_CAPPED;
            assert_true((double)esc <= ratios[r] * i + 1e-9);
            /* capped only when escalating would have broken the cap */
            if (d == HS_CASCADE_CAPPED) assert_true((double)(esc + 1) > ratios[r] * i);
        }
        struct hs_cascade_stats st;
        hs_cascade_stats(&c, &st);
        assert_int_equal(st.escalated, esc);
        assert_int_equal(st.capped, capped);
        if (ratios[r] == 0.0)
            assert_int_equal(esc, 0);
        else
            assert_true(esc > 0);
        hs_cascade_destroy(&c);
    }
}

static void bad_options(void **state)
{
    (void)state;
    struct hs_cascade c;
    struct hs_error err = {0};
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.0, 1.0}, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){1.5, 1.0}, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.9, -0.1}, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.9, 1.1}, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_cascade_init(NULL, &(struct hs_cascade_opts){0.9, 1.0}, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

static void *decide_many(void *arg)
{
    struct hs_cascade *c = arg;
    for (int i = 0; i < 10000; i++) hs_cascade_decide(c, (i % 3) ? 0.1 : 0.99);
    return NULL;
}

/* From many threads at once the counters stay exact and the cap still holds overall. */
static void thread_safe(void **state)
{
    (void)state;
    struct hs_cascade c;
    assert_int_equal(hs_cascade_init(&c, &(struct hs_cascade_opts){0.5, 0.3}, NULL), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, decide_many, &c);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    struct hs_cascade_stats st;
    hs_cascade_stats(&c, &st);
    assert_int_equal(st.decisions, 40000);
    assert_true(st.escalated <= 0.3 * 40000 + 1e-9);
    assert_int_equal(st.escalated + st.capped, 4 * (10000 - 3334));
    hs_cascade_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escalates_exactly_below_threshold),
        cmocka_unit_test(cap_holds_at_every_point),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(thread_safe),
    };
    return cmocka_run_group_tests_name("cascade", tests, NULL, NULL);
}
