/* hetbench's pure parts: workload (RNG, distributions, texts, corpus, loopback rule) and stats. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "hetbench/images.h"
#include "hetbench/stats.h"
#include "hetbench/workload.h"

static void lengths_parse_valid(void **state)
{
    (void)state;
    struct hs_bench_lengths l;
    struct hs_error err = {0};
    assert_int_equal(hs_bench_lengths_parse("80:8-32,20:200-256", &l, &err), HS_STATUS_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.c[0].name, "8-32");
    assert_true(l.c[0].weight == 80 && l.c[0].words_min == 8 && l.c[0].words_max == 32);
    assert_string_equal(l.c[1].name, "200-256");
    assert_true(l.c[1].words_min == 200 && l.c[1].words_max == 256);
    assert_true(l.weight_total == 100);

    assert_int_equal(hs_bench_lengths_parse("short=0.5:16,long=1.5:100-120", &l, &err), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.c[0].name, "short");
    assert_true(l.c[0].words_min == 16 && l.c[0].words_max == 16);
    assert_string_equal(l.c[1].name, "long");
    assert_true(l.weight_total == 2.0);

    assert_int_equal(hs_bench_lengths_parse("1:7", &l, &err), 0);
    assert_string_equal(l.c[0].name, "7");
}

static void lengths_parse_invalid(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "80",
        "80:",
        "0:1-2",
        "-1:1-2",
        "80:5-3",
        "80:0-3",
        "x:1-2",
        "1:1-2,",
        ",1:1-2",
        "1:1-2,,1:3",
        "1:1-2,1:1-2",
        "1:a-b",
        "1:1-",
        "1:-4",
        "bad name=1:2",
        "1:1-2x",
        "nan:1-2",
        "1:1-2,2:3,3:4,4:5,5:6,6:7,7:8,8:9,9:10,10:11,11:12,12:13,13:14,14:15,15:16,16:17,17:18",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct hs_bench_lengths l;
        struct hs_error err = {0};
        if (hs_bench_lengths_parse(bad[i], &l, &err) != HS_STATUS_INVALID_ARGUMENT)
            fail_msg("accepted bad --lengths '%s'", bad[i]);
        assert_true(strlen(err.msg) > 0);
    }
}

static void weighted_picks_follow_weights(void **state)
{
    (void)state;
    struct hs_bench_lengths l;
    assert_int_equal(hs_bench_lengths_parse("80:8-32,20:200-256", &l, NULL), 0);
    struct hs_bench_rng r;
    hs_bench_rng_seed(&r, 42);
    int n = 200000, counts[2] = {0, 0};
    for (int i = 0; i < n; i++) counts[hs_bench_lengths_pick(&l, &r)]++;
    assert_true(fabs((double)counts[0] / n - 0.8) < 0.01);

    struct hs_bench_mix m;
    assert_int_equal(hs_bench_mix_parse("interactive:70,batch:30", &m, NULL), 0);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.name[1], "batch");
    int pc[2] = {0, 0};
    for (int i = 0; i < n; i++) pc[hs_bench_mix_pick(&m, &r)]++;
    assert_true(fabs((double)pc[0] / n - 0.7) < 0.01);

    assert_int_equal(hs_bench_mix_parse("interactive", &m, NULL), 0);
    assert_true(m.n == 1 && m.weight[0] == 1.0);
    assert_int_equal(hs_bench_mix_parse("a:0", &m, NULL), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_bench_mix_parse("a b", &m, NULL), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_bench_mix_parse("a,", &m, NULL), HS_STATUS_INVALID_ARGUMENT);
}

static void rng_is_seeded_and_uniform(void **state)
{
    (void)state;
    struct hs_bench_rng a, b;
    hs_bench_rng_seed(&a, 7);
    hs_bench_rng_seed(&b, 7);
    for (int i = 0; i < 1000; i++) assert_true(hs_bench_rng_next(&a) == hs_bench_rng_next(&b));
    hs_bench_rng_seed(&b, 8);
    assert_true(hs_bench_rng_next(&a) != hs_bench_rng_next(&b));
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = hs_bench_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
        sum += u;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.01);
    for (int i = 0; i < 10000; i++) {
        uint32_t v = hs_bench_rng_range(&a, 8, 32);
        assert_true(v >= 8 && v <= 32);
    }
    assert_int_equal(hs_bench_rng_range(&a, 5, 5), 5);
}

static void poisson_interarrival_mean(void **state)
{
    (void)state;
    /* Exponential gaps: mean 1/rate, standard deviation 1/rate. With n = 400k samples the
     * standard error of the mean is 0.16 %; 1 % is > 6 sigma, so the test is not flaky. */
    const double rates[] = {1.0, 250.0, 5000.0};
    for (size_t k = 0; k < sizeof rates / sizeof rates[0]; k++) {
        struct hs_bench_rng r;
        hs_bench_rng_seed(&r, 1234 + k);
        const int n = 400000;
        double sum = 0, sum2 = 0;
        for (int i = 0; i < n; i++) {
            double g = hs_bench_rng_exp(&r, rates[k]);
            assert_true(g >= 0 && isfinite(g));
            sum += g;
            sum2 += g * g;
        }
        double mean = sum / n, sd = sqrt(sum2 / n - mean * mean), want = 1.0 / rates[k];
        assert_true(fabs(mean - want) / want < 0.01);
        assert_true(fabs(sd - want) / want < 0.02);
    }
}

static size_t count_words(const char *s)
{
    size_t n = 0;
    for (const char *p = s; *p; p++)
        if (*p != ' ' && (p == s || p[-1] == ' ')) n++;
    return n;
}

static void text_generation_within_bounds(void **state)
{
    (void)state;
    struct hs_bench_words w;
    hs_bench_words_builtin(&w);
    assert_true(w.n >= 200);
    struct hs_bench_lengths l;
    assert_int_equal(hs_bench_lengths_parse("80:8-32,20:200-256", &l, NULL), 0);
    struct hs_bench_rng r;
    hs_bench_rng_seed(&r, 99);
    int64_t live = hs_alloc_live();
    struct hs_bench_buf t = {0};
    uint32_t seen_min[2] = {UINT32_MAX, UINT32_MAX}, seen_max[2] = {0, 0};
    for (int i = 0; i < 5000; i++) {
        int k = hs_bench_lengths_pick(&l, &r);
        uint32_t want = hs_bench_rng_range(&r, l.c[k].words_min, l.c[k].words_max);
        t.len = 0;
        assert_int_equal(hs_bench_text_gen(&w, &r, want, &t), 0);
        size_t got = count_words(t.p);
        assert_int_equal(got, want);
        assert_true(got >= l.c[k].words_min && got <= l.c[k].words_max);
        assert_int_equal(t.p[t.len - 1], '.');
        if (got < seen_min[k]) seen_min[k] = (uint32_t)got;
        if (got > seen_max[k]) seen_max[k] = (uint32_t)got;
    }
    /* Both ends of each range are reached. */
    assert_true(seen_min[0] == 8 && seen_max[0] == 32);
    assert_true(seen_min[1] == 200 && seen_max[1] == 256);
    hs_bench_buf_free(&t);
    assert_int_equal(hs_alloc_live(), live);

    /* Same seed, same text. */
    struct hs_bench_buf a = {0}, b = {0};
    hs_bench_rng_seed(&r, 5);
    hs_bench_text_gen(&w, &r, 20, &a);
    hs_bench_rng_seed(&r, 5);
    hs_bench_text_gen(&w, &r, 20, &b);
    assert_string_equal(a.p, b.p);
    hs_bench_buf_free(&a);
    hs_bench_buf_free(&b);
}

static void words_from_file(void **state)
{
    (void)state;
    const char *path = hs_test_write_temp("alpha beta\n gamma\n\n", 19, ".txt");
    struct hs_bench_words w;
    struct hs_error err = {0};
    assert_int_equal(hs_bench_words_load(path, &w, &err), 0);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.w[2], "gamma");
    hs_bench_words_free(&w);
    const char *empty = hs_test_write_temp(" \n", 2, ".txt");
    assert_int_equal(hs_bench_words_load(empty, &w, &err), HS_STATUS_INVALID_INPUT);
    assert_int_equal(hs_bench_words_load("/nonexistent/words", &w, &err), HS_STATUS_IO);
}

static void json_escaping(void **state)
{
    (void)state;
    struct hs_bench_buf b = {0};
    assert_int_equal(hs_bench_buf_append_json_str(&b, "a\"b\\c\n\x01 \xc3\xa9"), 0);
    assert_string_equal(b.p, "\"a\\\"b\\\\c\\u000a\\u0001 \xc3\xa9\"");
    hs_bench_buf_free(&b);
}

static void corpus_tags_and_classes(void **state)
{
    (void)state;
    const char text[] = "short\thello world\r\nlong\ta much longer text here\n\nshort\thi\n"
                        "untagged line\n";
    char *data = hs_malloc(sizeof text);
    memcpy(data, text, sizeof text);
    struct hs_bench_corpus c;
    struct hs_error err = {0};
    assert_int_equal(hs_bench_corpus_parse(data, sizeof text - 1, &c, &err), 0);
    assert_int_equal(c.n_texts, 4);
    assert_int_equal(c.n_classes, 3);
    assert_string_equal(c.class_name[0], "short");
    assert_string_equal(c.class_name[2], "all");
    assert_int_equal(c.class_count[0], 2);
    assert_string_equal(c.text[0], "hello world");
    assert_string_equal(c.text[3], "untagged line");
    struct hs_bench_rng r;
    hs_bench_rng_seed(&r, 3);
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < 40000; i++) {
        int k = hs_bench_corpus_pick_class(&c, &r);
        counts[k]++;
        const char *t = hs_bench_corpus_pick_text(&c, k, &r);
        if (k == 1) assert_string_equal(t, "a much longer text here");
    }
    assert_true(fabs(counts[0] / 40000.0 - 0.5) < 0.02);
    hs_bench_corpus_free(&c);

    int64_t live = hs_alloc_live();
    for (int64_t n = 0; n < 4; n++) { /* every allocation failure is reported and leaks nothing */
        data = hs_malloc(sizeof text);
        memcpy(data, text, sizeof text);
        hs_alloc_fail_after(n);
        assert_int_equal(hs_bench_corpus_parse(data, sizeof text - 1, &c, &err),
                         HS_STATUS_NO_MEMORY);
        hs_alloc_fail_after(-1);
        hs_bench_corpus_free(&c);
        assert_int_equal(hs_alloc_live(), live);
    }

    char *empty = hs_malloc(2);
    memcpy(empty, "\n", 2);
    assert_int_equal(hs_bench_corpus_parse(empty, 1, &c, &err), HS_STATUS_INVALID_INPUT);
    hs_bench_corpus_free(&c);
}

static void percentiles_nearest_rank(void **state)
{
    (void)state;
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i; /* unsorted on purpose */
    hs_bench_sort(v, 100);
    assert_true(v[0] == 1 && v[99] == 100);
    assert_true(hs_bench_percentile(v, 100, 50) == 50);
    assert_true(hs_bench_percentile(v, 100, 95) == 95);
    assert_true(hs_bench_percentile(v, 100, 99) == 99);
    assert_true(hs_bench_percentile(v, 100, 99.5) == 100);
    assert_true(hs_bench_percentile(v, 100, 100) == 100);
    assert_true(hs_bench_percentile(v, 100, 0) == 1);
    double four[] = {10, 20, 30, 40};
    assert_true(hs_bench_percentile(four, 4, 50) == 20);
    assert_true(hs_bench_percentile(four, 4, 51) == 30);
    assert_true(hs_bench_percentile(four, 4, 95) == 40);
    double one[] = {7};
    assert_true(hs_bench_percentile(one, 1, 50) == 7 && hs_bench_percentile(one, 1, 99) == 7);
    assert_true(hs_bench_percentile(NULL, 0, 50) == 0);
}

static void summaries_count_and_filter(void **state)
{
    (void)state;
    struct hs_bench_record rec[8];
    const int32_t status[8] = {200,
                               200,
                               429,
                               504,
                               500,
                               HS_BENCH_OUTCOME_CONN,
                               HS_BENCH_OUTCOME_TIMEOUT,
                               HS_BENCH_OUTCOME_DROPPED};
    for (int i = 0; i < 8; i++) {
        hs_bench_record_init(&rec[i]);
        rec[i].status = status[i];
        rec[i].latency_ns = (i + 1) * 1000000LL;
        rec[i].items = 2;
        rec[i].cls = (uint16_t)(i % 2);
    }
    rec[0].tokens = 10;
    double scratch[8];
    struct hs_bench_summary s;
    hs_bench_summarize(rec, 8, HS_BENCH_ANY, HS_BENCH_ANY, scratch, &s);
    assert_int_equal(s.n, 8);
    assert_int_equal(s.n_2xx, 2);
    assert_true(s.n_429 == 1 && s.n_504 == 1 && s.n_other_http == 1);
    assert_true(s.n_conn == 1 && s.n_timeout == 1 && s.n_dropped == 1);
    assert_int_equal(s.items_2xx, 4);
    assert_true(s.tokens_2xx == 10 && s.n_tokens_known == 1);
    assert_true(s.p50_ms == 1 && s.max_ms == 2 && s.mean_ms == 1.5);

    hs_bench_summarize(rec, 8, 1, HS_BENCH_ANY, scratch, &s);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.n_2xx, 1);
    assert_true(s.p99_ms == 2);

    rec[1].warmup = 1;
    hs_bench_summarize(rec, 8, HS_BENCH_ANY, HS_BENCH_ANY, scratch, &s);
    assert_int_equal(s.n, 7);
    assert_int_equal(s.n_2xx, 1);
}

static void server_timing_header(void **state)
{
    (void)state;
    struct hs_bench_st_names names = {0};
    struct hs_bench_record r;
    hs_bench_record_init(&r);
    hs_bench_server_timing_parse("queue;dur=0.5, compute;desc=\"a, b;dur=9\";dur=3.25,cache, "
                                 "total;dur=4",
                                 &names, &r);
    assert_int_equal(names.n, 3);
    assert_string_equal(names.name[0], "queue");
    assert_string_equal(names.name[1], "compute");
    assert_string_equal(names.name[2], "total");
    assert_true(r.st_ms[0] == 0.5f && r.st_ms[1] == 3.25f && r.st_ms[2] == 4.0f);
    assert_true(isnan(r.st_ms[3]));
    struct hs_bench_record r2;
    hs_bench_record_init(&r2);
    hs_bench_server_timing_parse("total;dur=7", &names, &r2);
    assert_int_equal(names.n, 3);
    assert_true(r2.st_ms[2] == 7.0f && isnan(r2.st_ms[0]));

    double scratch[2], p50, p95;
    r.status = r2.status = 200;
    struct hs_bench_record both[2] = {r, r2};
    assert_int_equal(hs_bench_st_percentiles(both, 2, 2, scratch, &p50, &p95), 2);
    assert_true(p50 == 4 && p95 == 7);
    assert_int_equal(hs_bench_st_percentiles(both, 2, 0, scratch, &p50, &p95), 1);
}

static void loopback_only(void **state)
{
    (void)state;
    static const char *good[] = {"localhost",       "LocalHost", "127.0.0.1", "127.1.2.3",
                                 "127.255.255.254", "::1",       "[::1]"};
    static const char *bad[] = {"",
                                "example.com",
                                "10.0.0.1",
                                "128.0.0.1",
                                "0.0.0.0",
                                "127.1",
                                "127.0.0.1.example.com",
                                "localhost.example.com",
                                "::",
                                "[::2]",
                                "192.168.1.1",
                                "::ffff:127.0.0.1",
                                "0177.0.0.1",
                                " 127.0.0.1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!hs_bench_host_is_loopback(good[i])) fail_msg("refused loopback '%s'", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (hs_bench_host_is_loopback(bad[i])) fail_msg("accepted non-loopback '%s'", bad[i]);
    assert_false(hs_bench_host_is_loopback(NULL));
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* --images: JPEG and PNG found by their first bytes, other files skipped, name order */
static void images_folder(void **state)
{
    (void)state;
    static const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3};
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 9};
    assert_int_equal(hs_bench_body_kind_sniff(jpg, sizeof jpg), HS_BENCH_BODY_JPEG);
    assert_int_equal(hs_bench_body_kind_sniff(png, sizeof png), HS_BENCH_BODY_PNG);
    assert_int_equal(hs_bench_body_kind_sniff(png, 7), HS_BENCH_BODY_OCTET);
    assert_int_equal(hs_bench_body_kind_sniff((const uint8_t *)"GIF89a", 6), HS_BENCH_BODY_OCTET);
    assert_int_equal(hs_bench_body_kind_of_ctype(NULL), HS_BENCH_BODY_JSON);
    assert_int_equal(hs_bench_body_kind_of_ctype("Image/JPEG; q=1"), HS_BENCH_BODY_JPEG);
    assert_int_equal(hs_bench_body_kind_of_ctype("application/json"), HS_BENCH_BODY_JSON);
    assert_int_equal(hs_bench_body_kind_of_ctype("image/gif"), HS_BENCH_BODY_OCTET);
    assert_string_equal(hs_bench_body_ctype(HS_BENCH_BODY_PNG), "image/png");

    char dir[] = "/tmp/hetbench-images-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    struct hs_bench_images im;
    struct hs_error err = {0};
    assert_int_equal(hs_bench_images_load(dir, 1 << 20, &im, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "no JPEG or PNG"));
    hs_bench_images_free(&im);
    snprintf(path, sizeof path, "%s/b.png", dir);
    write_bytes(path, png, sizeof png);
    snprintf(path, sizeof path, "%s/a.jpg", dir);
    write_bytes(path, jpg, sizeof jpg);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_bytes(path, "hello", 5);
    assert_int_equal(hs_bench_images_load(dir, 1 << 20, &im, &err), HS_STATUS_OK);
    assert_int_equal(im.n, 2);
    assert_int_equal(im.skipped, 1);
    assert_string_equal(im.im[0].name, "a.jpg");
    assert_int_equal(im.im[0].kind, HS_BENCH_BODY_JPEG);
    assert_int_equal(im.im[0].len, sizeof jpg);
    assert_memory_equal(im.im[0].bytes, jpg, sizeof jpg);
    assert_int_equal(im.im[1].kind, HS_BENCH_BODY_PNG);
    struct hs_bench_rng r;
    hs_bench_rng_seed(&r, 1);
    int seen[2] = {0};
    for (int i = 0; i < 200; i++) seen[hs_bench_images_pick(&im, &r) - im.im]++;
    assert_true(seen[0] > 60 && seen[1] > 60);
    hs_bench_images_free(&im);
    /* a file over the limit is an error naming it */
    assert_int_equal(hs_bench_images_load(dir, 8, &im, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "b.png"));
    hs_bench_images_free(&im);
    const char *names[] = {"a.jpg", "b.png", "notes.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lengths_parse_valid),
        cmocka_unit_test(lengths_parse_invalid),
        cmocka_unit_test(weighted_picks_follow_weights),
        cmocka_unit_test(rng_is_seeded_and_uniform),
        cmocka_unit_test(poisson_interarrival_mean),
        cmocka_unit_test(text_generation_within_bounds),
        cmocka_unit_test(words_from_file),
        cmocka_unit_test(json_escaping),
        cmocka_unit_test(corpus_tags_and_classes),
        cmocka_unit_test(percentiles_nearest_rank),
        cmocka_unit_test(summaries_count_and_filter),
        cmocka_unit_test(server_timing_header),
        cmocka_unit_test(loopback_only),
        cmocka_unit_test(images_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
