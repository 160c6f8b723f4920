/* hetsoak's pure parts: the response parser (its verdict decides "answered twice" and "never
 * answered"), body shapes, the id set, Prometheus samples, the load profile, the histogram. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "soak/soak.h"

static enum hs_soak_parse parse(const char *s, struct hs_soak_resp *r)
{
    char msg[128];
    return hs_soak_resp_parse(s, strlen(s), r, msg, sizeof msg);
}

static void response_whole_and_in_pieces(void **state)
{
    (void)state;
    const char *resp = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                       "X-Request-Id: 12345\r\nRetry-After: 2\r\ncontent-length: 5\r\n\r\nhello";
    struct hs_soak_resp r;
    assert_int_equal(parse(resp, &r), HS_SOAK_PARSE_DONE);
    assert_int_equal(r.status, 429);
    assert_true(r.has_id && r.id == 12345);
    assert_int_equal(r.retry_after_s, 2);
    assert_int_equal((int)r.content_bytes, 5);
    assert_int_equal(r.total_bytes, strlen(resp));
    assert_false(r.close);
    /* every prefix is incomplete, never malformed */
    char msg[128];
    for (size_t n = 0; n < strlen(resp); n++)
        assert_int_equal(hs_soak_resp_parse(resp, n, &r, msg, sizeof msg), HS_SOAK_PARSE_MORE);
    /* bytes after the response are left for the caller: a second answer shows up there */
    char two[512];
    snprintf(two, sizeof two, "%s%s", resp, resp);
    assert_int_equal(parse(two, &r), HS_SOAK_PARSE_DONE);
    assert_int_equal(r.total_bytes, strlen(resp));
}

static void response_headers(void **state)
{
    (void)state;
    struct hs_soak_resp r;
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", &r),
                     HS_SOAK_PARSE_DONE);
    assert_true(r.close && r.status == 200 && !r.has_id && r.retry_after_s == -1);
    assert_int_equal(parse("HTTP/1.0 504 Gateway Timeout\r\nContent-Length: 2\r\n\r\n{}", &r),
                     HS_SOAK_PARSE_DONE);
    assert_int_equal(r.status, 504);
    /* a status line without a reason phrase */
    assert_int_equal(parse("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", &r), HS_SOAK_PARSE_DONE);
}

static void response_malformed(void **state)
{
    (void)state;
    static const char *bad[] = {
        "HTTX/1.1 200 OK\r\n",
        "hello",
        "HTTP/1.1 200 OK\r\n\r\n",                                            /* no length */
        "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",                       /* status */
        "HTTP/1.1 99 OK\r\nContent-Length: 0\r\n\r\n",                        /* status */
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",                      /* length */
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", /* two */
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n",
    };
    struct hs_soak_resp r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse(bad[i], &r) != HS_SOAK_PARSE_MALFORMED) fail_msg("accepted: %s", bad[i]);
}

static void body_shapes(void **state)
{
    (void)state;
#define OK(ep, s, n)  assert_true(hs_soak_body_ok(ep, s, strlen(s), n))
#define BAD(ep, s, n) assert_false(hs_soak_body_ok(ep, s, strlen(s), n))
    const char *openai2 = "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,"
                          "\"embedding\":[0.1,0.2]},{\"object\":\"embedding\",\"index\":1,"
                          "\"embedding\":[0.3,0.4]}],\"model\":\"m\",\"usage\":{}}";
    OK(HS_SOAK_EP_OPENAI, openai2, 2);
    BAD(HS_SOAK_EP_OPENAI, openai2, 1);
    BAD(HS_SOAK_EP_OPENAI, "{\"error\":{}}", 1);
    OK(HS_SOAK_EP_TEI, "[[0.1,0.2],[0.3,-1e-05]]", 2);
    OK(HS_SOAK_EP_TEI, "[[0.1,0.2]]", 1);
    BAD(HS_SOAK_EP_TEI, "[[0.1,0.2]]", 2);
    BAD(HS_SOAK_EP_TEI, "[[0.1,0.2]", 1);
    OK(HS_SOAK_EP_PREDICT, "[{\"label\":\"pos\",\"score\":0.9},{\"label\":\"neg\",\"score\":0.1}]",
       1);
    OK(HS_SOAK_EP_PREDICT,
       "[[{\"label\":\"pos\",\"score\":0.9}],[{\"label\":\"neg\",\"score\":1}]]", 2);
    BAD(HS_SOAK_EP_PREDICT, "[[{\"label\":\"pos\",\"score\":0.9}]]", 2);
    OK(HS_SOAK_EP_TOKENIZE, "[[{\"id\":101,\"text\":\"[CLS]\",\"special\":true}]]", 1);
    BAD(HS_SOAK_EP_TOKENIZE, "[]", 1);
    BAD(HS_SOAK_EP_TEI, "[[0.1]]", 0);
#undef OK
#undef BAD
}

static void ids_seen_once(void **state)
{
    (void)state;
    struct hs_soak_idset s = {0};
    assert_int_equal(hs_soak_idset_add(&s, 1), 1);
    assert_int_equal(hs_soak_idset_add(&s, 1), 0);
    assert_int_equal(hs_soak_idset_add(&s, 64), 1);
    assert_int_equal(hs_soak_idset_add(&s, 63), 1);
    assert_int_equal(hs_soak_idset_add(&s, 5000000), 1); /* grows, keeps what it had */
    assert_int_equal(hs_soak_idset_add(&s, 64), 0);
    assert_int_equal(hs_soak_idset_add(&s, 5000000), 0);
    assert_int_equal(hs_soak_idset_add(&s, 4999999), 1);
    assert_int_equal(hs_soak_idset_add(&s, 0), -1);
    assert_int_equal(hs_soak_idset_add(&s, HS_SOAK_ID_MAX + 1), -1);
    hs_soak_idset_free(&s);
}

static const char *METRICS =
    "# HELP hetserve_route_blocked_total Requests that found ...\n"
    "# TYPE hetserve_route_blocked_total counter\n"
    "hetserve_route_blocked_total{route=\"short\"} 10\n"
    "hetserve_route_blocked_total{route=\"long\"} 40\n"
    "hetserve_route_blocked_total_extra{route=\"long\"} 1000\n"
    "hetserve_route_retries_total{route=\"long\",outcome=\"sent\"} 3\n"
    "hetserve_route_retries_total{route=\"long\",outcome=\"denied\"} 4\n"
    "hetserve_route_retries_total{route=\"longer\",outcome=\"sent\"} 100\n"
    "hetserve_cascade_decisions_total 7\n"
    "hetserve_requests_total{engine=\"cpu_a\",model=\"m\",outcome=\"ok\"} 1.5e3\n";

static void metric_sums(void **state)
{
    (void)state;
    bool found;
    assert_true(hs_soak_metric_sum(METRICS, "hetserve_route_blocked_total", NULL, &found) == 50);
    assert_true(found);
    assert_true(
        hs_soak_metric_sum(METRICS, "hetserve_route_blocked_total", "route=\"long\"", NULL) == 40);
    /* exact pairs: route="long" is not route="longer" */
    assert_true(hs_soak_metric_sum(METRICS, "hetserve_route_retries_total",
                                   "route=\"long\",outcome=\"sent\"", NULL) == 3);
    assert_true(
        hs_soak_metric_sum(METRICS, "hetserve_route_retries_total", "route=\"long\"", NULL) == 7);
    assert_true(hs_soak_metric_sum(METRICS, "hetserve_cascade_decisions_total", "", NULL) == 7);
    assert_true(hs_soak_metric_sum(METRICS, "hetserve_requests_total", NULL, NULL) == 1500);
    assert_true(hs_soak_metric_sum(METRICS, "hetserve_route", NULL, &found) == 0);
    assert_false(found);
    assert_true(
        hs_soak_metric_sum(METRICS, "hetserve_route_blocked_total", "route=\"x\"", &found) == 0);
    assert_false(found);
}

struct seen {
    char v[4][64];
    double x[4];
    int n;
};

static void collect(void *ctx, const char *label_value, double v)
{
    struct seen *s = ctx;
    if (s->n < 4) {
        snprintf(s->v[s->n], sizeof s->v[0], "%s", label_value);
        s->x[s->n++] = v;
    }
}

static void metric_each_label(void **state)
{
    (void)state;
    struct seen s = {0};
    hs_soak_metric_each(METRICS, "hetserve_route_blocked_total", "route", collect, &s);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.v[0], "short");
    assert_string_equal(s.v[1], "long");
    assert_true(s.x[0] == 10 && s.x[1] == 40);
    struct seen o = {0};
    hs_soak_metric_each(METRICS, "hetserve_route_retries_total", "outcome", collect, &o);
    assert_int_equal(o.n, 3);
    assert_string_equal(o.v[1], "denied");
}

static void load_profile_swings(void **state)
{
    (void)state;
    assert_true(fabs(hs_soak_load_factor(0, 60, 0.5, 3) - 0.5) < 1e-9);
    assert_true(fabs(hs_soak_load_factor(30, 60, 0.5, 3) - 3.0) < 1e-9);
    assert_true(fabs(hs_soak_load_factor(60, 60, 0.5, 3) - 0.5) < 1e-9);
    assert_true(fabs(hs_soak_load_factor(15, 60, 0.5, 3) - 1.75) < 1e-9);
    for (double t = 0; t < 200; t += 0.7) {
        double f = hs_soak_load_factor(t, 60, 0.5, 3);
        assert_true(f >= 0.5 - 1e-9 && f <= 3 + 1e-9);
    }
}

static void histogram_percentiles(void **state)
{
    (void)state;
    struct hs_soak_hist h = {0};
    assert_true(hs_soak_hist_pct(&h, 50) == 0);
    for (int i = 1; i <= 1000; i++) hs_soak_hist_add(&h, i / 10.0); /* 0.1 .. 100 ms */
    double p50 = hs_soak_hist_pct(&h, 50), p99 = hs_soak_hist_pct(&h, 99);
    /* bucket bounds: within a quarter octave (19 %) above the true value */
    assert_true(p50 >= 50 && p50 <= 50 * 1.19);
    assert_true(p99 >= 99 && p99 <= 100);
    assert_true(hs_soak_hist_pct(&h, 100) == 100);
    assert_true(h.n == 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(response_whole_and_in_pieces),
        cmocka_unit_test(response_headers),
        cmocka_unit_test(response_malformed),
        cmocka_unit_test(body_shapes),
        cmocka_unit_test(ids_seen_once),
        cmocka_unit_test(metric_sums),
        cmocka_unit_test(metric_each_label),
        cmocka_unit_test(load_profile_swings),
        cmocka_unit_test(histogram_percentiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
