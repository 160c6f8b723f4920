/* The profiler (model/profile.h): its statistics on known samples, and a quick profile of the
 * default model on a CPU engine checked for structure and sanity (every stage kind in every
 * cell, positive times, enough repetitions, the stage medians adding up to about the whole
 * model, the engine kind's memory estimates close to the bytes actually allocated). */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/profile.h"

static void stats_of_known_samples(void **state)
{
    (void)state;
    double v[20];
    for (int i = 0; i < 20; i++) v[i] = 20 - i; /* 20 .. 1, unsorted on purpose */
    double rel = 0;
    json_t *s = hs_profile_stats(v, 20, 5, 0.05, &rel);
    assert_int_equal(json_integer_value(json_object_get(s, "n")), 20);
    assert_true(fabs(json_real_value(json_object_get(s, "median_ms")) - 10.5) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(s, "p10_ms")) - 2.9) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(s, "p90_ms")) - 18.1) < 1e-9);
    /* ranks 10 -+ 0.98 sqrt(20): 5 and 16, so the interval is [5, 16]: half-width 5.5 */
    assert_true(fabs(json_real_value(json_object_get(s, "ci95_ms")) - 5.5) < 1e-9);
    assert_true(fabs(rel - 5.5 / 10.5) < 1e-9);
    assert_false(json_is_true(json_object_get(s, "met")));
    json_decref(s);

    for (int i = 0; i < 20; i++) v[i] = 1.0 + 0.001 * i; /* tight */
    s = hs_profile_stats(v, 20, 5, 0.05, &rel);
    assert_true(json_is_true(json_object_get(s, "met")));
    json_decref(s);
    /* too few samples for an interval: reported, never met */
    s = hs_profile_stats(v, 3, 1, 0.05, &rel);
    assert_true(isinf(rel));
    assert_true(json_is_null(json_object_get(s, "ci95_ms")));
    assert_false(json_is_true(json_object_get(s, "met")));
    json_decref(s);
}

static double median_of(json_t *cell_kind, const char *series)
{
    json_t *s = json_object_get(cell_kind, series);
    assert_non_null(s);
    return json_real_value(json_object_get(s, "median_ms"));
}

static void check_series(json_t *c, const char *const *names, int n_names, int n_min)
{
    for (int i = 0; i < n_names; i++) {
        json_t *s = json_object_get(c, names[i]);
        if (!s) fail_msg("series %s missing", names[i]);
        assert_true(json_integer_value(json_object_get(s, "n")) >= n_min);
        assert_true(json_real_value(json_object_get(s, "median_ms")) >= 0);
        assert_true(json_real_value(json_object_get(s, "p10_ms")) <=
                    json_real_value(json_object_get(s, "p90_ms")));
        assert_true(json_is_boolean(json_object_get(s, "met")));
    }
}

/* estimate within frac of measured (both > 0) and 1 KB (allocator bookkeeping, which matters
 * where a stage packs nothing: f32 without the small-M panels), or both (nearly) nothing */
static void close_bytes(json_int_t measured, json_int_t estimate, double frac, const char *what)
{
    if (measured < 4096 && estimate < 4096) return;
    if (fabs((double)(measured - estimate)) > frac * (double)measured + 1024)
        fail_msg("%s: estimate %lld, measured %lld", what, (long long)estimate,
                 (long long)measured);
}

static void profile_one_lane(const char *dir, enum hs_dtype dtype)
{
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    if (hs_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
    hs_engine_t e = NULL;
    struct hs_engine_opts eo = {.name = "prof0", .threads = 1};
    if (hs_engine_create("cpu", &eo, &e, &err)) fail_msg("%s", err.msg);
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    if (!(caps.dtypes & (1u << dtype))) {
        printf("test_profile: %s skipped: this CPU has no fast path for it\n",
               hs_compute_dtype_name(dtype));
        hs_engine_destroy(e);
        hs_model_free(m);
        return;
    }
    struct hs_profile_opts o = {.n_batches = 2,
                                .batches = {1, 4},
                                .n_buckets = 2,
                                .buckets = {16, 32},
                                .n_min = 3,
                                .cell_cap_s = 0.05};
    json_t *lane = NULL;
    const int64_t live = hs_alloc_live();
    if (hs_profile_lane(m, e, dtype, &o, &lane, &err)) fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(lane, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(lane, "dtype")),
                        hs_compute_dtype_name(dtype));

    static const char *const kinds[] = {"embed", "attn", "ffn", "pool", "normalize"};
    static const char *const series[] = {"compute", "sync", "copy_in", "copy_out"};
    static const char *const whole_series[] = {"compute", "overhead", "copy_in", "copy_out"};
    json_t *stages = json_object_get(lane, "stages");
    for (int k = 0; k < 5; k++) {
        json_t *sj = json_object_get(stages, kinds[k]);
        if (!sj) fail_msg("stage kind %s missing from stages", kinds[k]);
        if (k == 1 || k == 2) {
            assert_int_equal(json_integer_value(json_object_get(sj, "count")),
                             m->config.dims.layers);
            close_bytes(json_integer_value(json_object_get(sj, "weights_bytes")),
                        json_integer_value(json_object_get(sj, "weights_estimate_bytes")), 0.05,
                        kinds[k]);
            assert_true(json_integer_value(json_object_get(sj, "weights_bytes")) > 0);
        }
    }
    json_t *ws = json_object_get(lane, "workspace");
    close_bytes(json_integer_value(json_object_get(ws, "bytes")),
                json_integer_value(json_object_get(ws, "activations_estimate_bytes")) +
                    json_integer_value(json_object_get(ws, "scratch_estimate_bytes")),
                0.10, "workspace");

    json_t *cells = json_object_get(lane, "cells");
    assert_int_equal(json_array_size(cells), 4);
    for (size_t i = 0; i < json_array_size(cells); i++) {
        json_t *cell = json_array_get(cells, i);
        json_t *ks = json_object_get(cell, "stages");
        double sum = 0;
        for (int k = 0; k < 5; k++) {
            json_t *c = json_object_get(ks, kinds[k]);
            if (!c) fail_msg("cell %zu: stage kind %s missing", i, kinds[k]);
            check_series(c, series, 4, o.n_min);
            assert_true(median_of(c, "compute") > 0);
            assert_true(median_of(c, "copy_out") > 0);
            sum += (median_of(c, "compute") + median_of(c, "sync")) *
                   (double)json_integer_value(json_object_get(c, "count"));
        }
        json_t *whole = json_object_get(cell, "whole");
        assert_non_null(whole);
        check_series(whole, whole_series, 4, o.n_min);
        const double w = median_of(whole, "compute");
        assert_true(w > 0);
        /* generous (other work shares this machine, sanitizer builds time differently): it
         * catches a profiler that times stages on inputs the model never gives them (that was 5x)
         */
        if (!(sum > 0.25 * w && sum < 4.0 * w))
            fail_msg("cell %zu: stage medians add to %.4f ms, the whole model takes %.4f ms", i,
                     sum, w);
    }
    json_decref(lane);
    /* everything the profile made (preparations, workspace, executor) is released */
    assert_int_equal(hs_alloc_live(), live);
    hs_engine_destroy(e);
    hs_model_free(m);
}

static bool have_model(const char *dir)
{
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/model.safetensors", dir);
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("test_profile: skipped: no model at %s (make setup)\n", dir);
        return false;
    }
    fclose(f);
    return true;
}

static void quick_profile_default_model(void **state)
{
    (void)state;
    const char *dir = hs_test_model_dir();
    if (!have_model(dir)) skip();
    profile_one_lane(dir, HS_DTYPE_F32);
    profile_one_lane(dir, HS_DTYPE_BF16);
}

static void bad_grid_is_refused(void **state)
{
    (void)state;
    const char *dir = hs_test_model_dir();
    if (!have_model(dir)) skip();
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    if (hs_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
    hs_engine_t e = NULL;
    if (hs_engine_create("cpu", &(struct hs_engine_opts){.threads = 1}, &e, &err))
        fail_msg("%s", err.msg);
    struct hs_profile_opts o = {.n_batches = 1, .batches = {1}, .n_buckets = 1, .buckets = {4096}};
    json_t *lane = NULL;
    assert_int_equal(hs_profile_lane(m, e, HS_DTYPE_F32, &o, &lane, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_null(lane);
    assert_non_null(strstr(err.msg, "no shape"));
    hs_engine_destroy(e);
    hs_model_free(m);
}

int main(void)
{
    json_set_alloc_funcs(hs_malloc, hs_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stats_of_known_samples),
        cmocka_unit_test(quick_profile_default_model),
        cmocka_unit_test(bad_grid_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
