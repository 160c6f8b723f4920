/* hetbench ab's pure parts: reading response rows, cosine and label agreement, bootstrap
 * intervals, per-class summaries of paired requests. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "hetbench/ab.h"
#include "hetbench/stats.h"

static hs_status parse(const char *s, struct hs_bench_ab_rows *r)
{
    return hs_bench_ab_rows_parse(s, strlen(s), r);
}

static void rows_of_each_shape(void **state)
{
    (void)state;
    struct hs_bench_ab_rows r;
    /* OpenAI */
    assert_int_equal(
        parse("{\"object\":\"list\",\"data\":[{\"index\":0,\"embedding\":[1,0,0]},"
              "{\"index\":1,\"embedding\":[0,2.5,0]}],\"usage\":{\"prompt_tokens\":4}}",
              &r),
        HS_STATUS_OK);
    assert_true(r.n == 2 && r.dim == 3 && !r.label);
    assert_true(r.vec[4] == 2.5f);
    hs_bench_ab_rows_free(&r);
    /* TEI /embed */
    assert_int_equal(parse("[[0.5,-1],[3,4]]", &r), HS_STATUS_OK);
    assert_true(r.n == 2 && r.dim == 2 && r.vec[1] == -1.0f);
    hs_bench_ab_rows_free(&r);
    /* /predict, one input and several: the first (top) label of each */
    assert_int_equal(parse("[{\"label\":\"positive\",\"score\":0.9},{\"label\":\"negative\","
                           "\"score\":0.1}]",
                           &r),
                     HS_STATUS_OK);
    assert_true(r.n == 1 && r.dim == 0);
    assert_string_equal(r.label[0], "positive");
    hs_bench_ab_rows_free(&r);
    assert_int_equal(
        parse("[[{\"label\":\"a\",\"score\":0.6}],[{\"label\":\"b\",\"score\":0.7}]]", &r),
        HS_STATUS_OK);
    assert_true(r.n == 2);
    assert_string_equal(r.label[1], "b");
    hs_bench_ab_rows_free(&r);
    /* not rows */
    static const char *bad[] = {"",
                                "{",
                                "{\"error\":\"x\"}",
                                "[]",
                                "[[1,2],[3]]",
                                "[[1],\"x\"]",
                                "[[]]",
                                "{\"data\":[{}]}",
                                "[[1],[{\"label\":\"a\"}]]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_not_equal(parse(bad[i], &r), HS_STATUS_OK);
        hs_bench_ab_rows_free(&r);
    }
}

static void cosine_and_agreement(void **state)
{
    (void)state;
    struct hs_bench_ab_rows a, b, c, la, lb, lc;
    assert_int_equal(parse("[[1,0],[1,1]]", &a), 0);
    assert_int_equal(parse("[[2,0],[1,0]]", &b), 0);
    assert_int_equal(parse("[[1,0,0]]", &c), 0);
    /* the worst row: [1,1] against [1,0] */
    assert_true(fabs(hs_bench_ab_cosine_min(&a, &b) - sqrt(0.5)) < 1e-9);
    assert_true(hs_bench_ab_cosine_min(&a, &a) == 1);
    assert_true(isnan(hs_bench_ab_cosine_min(&a, &c)));
    assert_int_equal(parse("[[{\"label\":\"x\"}],[{\"label\":\"y\"}]]", &la), 0);
    assert_int_equal(parse("[[{\"label\":\"x\"}],[{\"label\":\"z\"}]]", &lb), 0);
    assert_int_equal(parse("[{\"label\":\"x\"}]", &lc), 0);
    assert_int_equal(hs_bench_ab_labels_agree(&la, &la), 1);
    assert_int_equal(hs_bench_ab_labels_agree(&la, &lb), 0);
    assert_int_equal(hs_bench_ab_labels_agree(&la, &lc), 0);
    assert_int_equal(hs_bench_ab_labels_agree(&la, &a), -1);
    assert_true(isnan(hs_bench_ab_cosine_min(&la, &lb)));
    hs_bench_ab_rows_free(&a);
    hs_bench_ab_rows_free(&b);
    hs_bench_ab_rows_free(&c);
    hs_bench_ab_rows_free(&la);
    hs_bench_ab_rows_free(&lb);
    hs_bench_ab_rows_free(&lc);
}

static void bootstrap_intervals(void **state)
{
    (void)state;
    enum { N = 200, R = 500 };
    double v[N], w[N], scratch[2 * N + R];
    for (int i = 0; i < N; i++) v[i] = i + 1, w[i] = 2 * (i + 1);
    struct hs_bench_ci c, d, ratio;
    hs_bench_bootstrap_percentile(v, N, 50, R, 7, scratch, &c);
    assert_true(c.est == 100 && c.lo <= c.est && c.est <= c.hi);
    assert_true(c.lo > 80 && c.hi < 120 && c.hi - c.lo > 1);
    /* a fixed seed gives the same interval; v is left alone */
    hs_bench_bootstrap_percentile(v, N, 50, R, 7, scratch, &d);
    assert_true(d.lo == c.lo && d.hi == c.hi && v[0] == 1 && v[N - 1] == N);
    /* paired: B is exactly twice A, in every resample too */
    hs_bench_bootstrap_ratio(v, w, N, 99, R, 3, scratch, &ratio);
    assert_true(ratio.est == 2 && ratio.lo == 2 && ratio.hi == 2);
    /* nothing to estimate from; no resamples */
    hs_bench_bootstrap_percentile(v, 0, 50, R, 1, scratch, &c);
    assert_true(c.est == 0 && c.lo == 0 && c.hi == 0);
    hs_bench_bootstrap_percentile(v, N, 99, 0, 1, scratch, &c);
    assert_true(c.est == 198 && c.lo == 198 && c.hi == 198);
}

static void summaries_of_pairs(void **state)
{
    (void)state;
    struct hs_bench_ab_pair p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = (struct hs_bench_ab_pair){.status = {200, 200},
                                         .latency_ms = {10.0 + i, 20.0 + 2 * i},
                                         .cosine = 1.0 - 0.001 * i,
                                         .agree = -1,
                                         .cls = (uint16_t)(i % 2)};
    }
    p[1].status[1] = 413;
    p[1].cosine = NAN;
    p[3].status[1] = HS_BENCH_OUTCOME_TIMEOUT;
    p[3].cosine = NAN;
    p[5].status[1] = 413;
    p[5].cosine = NAN;
    p[4].agree = 1;
    p[2].agree = 0;
    struct hs_bench_ab_summary s;
    assert_int_equal(hs_bench_ab_summarize(p, 6, HS_BENCH_ANY, 100, 1, &s), HS_STATUS_OK);
    assert_true(s.n == 6 && s.n_both == 3 && s.side[0].n_2xx == 6 && s.side[1].n_2xx == 3);
    assert_int_equal(s.side[0].n_status, 0);
    assert_int_equal(s.side[1].n_status, 2);
    assert_true(s.side[1].status[0] == 413 && s.side[1].status_n[0] == 2);
    assert_true(s.side[1].status[1] == HS_BENCH_OUTCOME_TIMEOUT && s.side[1].status_n[1] == 1);
    assert_true(s.n_cosine == 3 && fabs(s.cos_min - 0.996) < 1e-12 && s.n_cos_below == 2);
    assert_true(fabs(s.cos_mean - 0.998) < 1e-12);
    assert_true(s.n_labels == 2 && s.n_agree == 1);
    assert_true(s.side[0].p50_ms.est == 12 && s.ratio_p50.est > 1);
    /* class 1 (requests 1, 3, 5): B never answered 2xx */
    assert_int_equal(hs_bench_ab_summarize(p, 6, 1, 100, 1, &s), HS_STATUS_OK);
    assert_true(s.n == 3 && s.n_both == 0 && s.n_cosine == 0 && isnan(s.cos_min));
    assert_true(s.side[1].p50_ms.est == 0 && s.ratio_p99.est == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_of_each_shape),
        cmocka_unit_test(cosine_and_agreement),
        cmocka_unit_test(bootstrap_intervals),
        cmocka_unit_test(summaries_of_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
