/* src/ops/gfl.c: PP-PicoDet's GFL box decode, with hs_nms_multiclass and hs_gfl_to_image after
 * it, against its reference, rapid-layout's PPPostProcess.__call__ on head outputs of the
 * detector's shape for a small input (tests/golden/gfl/picodet_small.json,
 * tools/golden/gen_gfl.py: a fractional stride-64 grid, a per-stride top-k that cuts), and its
 * rules case by case: the expectation over the bins, the anchor centres, top-k order, a bad
 * shape; and the detector's input (hs_ocr_det_prep_fixed) against rapid-layout's PPPreProcess
 * (tests/golden/gfl/prep_skimage_page_48x64.f32). */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "ops/gfl.h"
#include "ops/ocr.h"

static float *floats_of(json_t *rows, int width, int *n)
{
    *n = (int)json_array_size(rows);
    float *v = hs_malloc(sizeof(float) * (size_t)width * (size_t)(*n ? *n : 1));
    assert_non_null(v);
    for (int i = 0; i < *n; i++) {
        json_t *r = json_array_get(rows, i);
        assert_int_equal((int)json_array_size(r), width);
        for (int k = 0; k < width; k++)
            v[(size_t)i * width + k] = (float)json_number_value(json_array_get(r, k));
    }
    return v;
}

static void matches_the_reference(void **state)
{
    (void)state;
    json_error_t je;
    json_t *g = json_load_file(hs_test_path("tests/golden/gfl/picodet_small.json"), 0, &je);
    if (!g) fail_msg("tests/golden/gfl/picodet_small.json: %s", je.text);
    json_t *pr = json_object_get(g, "params"), *in = json_object_get(g, "input");
    json_t *im = json_object_get(g, "image");
    const struct hs_gfl_shape sh = {
        .in_h = (int)json_integer_value(json_array_get(in, 0)),
        .in_w = (int)json_integer_value(json_array_get(in, 1)),
        .n_classes = (int)json_integer_value(json_object_get(g, "classes")),
        .reg_max = (int)json_integer_value(json_object_get(g, "reg_max")),
        .top_k = (int)json_integer_value(json_object_get(pr, "top_k")),
    };
    const struct hs_nms_params np = {
        .score_thresh = (float)json_number_value(json_object_get(pr, "score_thresh")),
        .iou_thresh = (float)json_number_value(json_object_get(pr, "iou_thresh")),
        .candidates_max = (int)json_integer_value(json_object_get(pr, "candidates_max")),
        .keep_max = (int)json_integer_value(json_object_get(pr, "keep_max")),
    };
    json_t *st = json_object_get(g, "strides");
    const int nl = (int)json_array_size(st);
    assert_int_equal(nl, 4);
    struct hs_gfl_level lv[4];
    float *owned[8];
    int n_max = 0, cut = 0;
    for (int l = 0; l < nl; l++) {
        int ns = 0, nd = 0;
        lv[l].stride = (int)json_integer_value(json_array_get(st, l));
        owned[2 * l] =
            floats_of(json_array_get(json_object_get(g, "scores"), l), sh.n_classes, &ns);
        owned[2 * l + 1] =
            floats_of(json_array_get(json_object_get(g, "dists"), l), 4 * (sh.reg_max + 1), &nd);
        lv[l].scores = owned[2 * l];
        lv[l].dists = owned[2 * l + 1];
        assert_int_equal(ns, hs_gfl_level_anchors(&sh, lv[l].stride));
        assert_int_equal(nd, ns);
        if (ns > n_max) n_max = ns;
        cut += ns > sh.top_k;
    }
    assert_int_equal(hs_gfl_level_anchors(&sh, 64), 2); /* 64 x 96: ceil(1) x ceil(1.5) */
    assert_true(cut >= 2);                              /* the top-k cuts the finer levels */
    const int m = hs_gfl_candidates_max(&sh, lv, nl);
    float *boxes = hs_malloc(sizeof(float) * 4 * (size_t)m);
    float *scores = hs_malloc(sizeof(float) * (size_t)sh.n_classes * (size_t)m);
    int *scratch = hs_malloc(sizeof(int) * hs_gfl_scratch_ints(n_max));
    int *nscratch = hs_malloc(sizeof(int) * hs_nms_scratch_ints(m));
    struct hs_det *out = hs_malloc(sizeof *out * (size_t)m * (size_t)sh.n_classes);
    assert_true(boxes && scores && scratch && nscratch && out);
    struct hs_error err = {0};
    int n = 0, got = 0;
    assert_int_equal(hs_gfl_decode(&sh, lv, nl, boxes, scores, &n, scratch, &err), 0);
    assert_int_equal(n, m);
    assert_int_equal(hs_nms_multiclass(boxes, scores, n, sh.n_classes, &np, out, m * sh.n_classes,
                                       &got, nscratch),
                     0);
    hs_gfl_to_image(out, got, sh.in_w, sh.in_h, (int)json_integer_value(json_array_get(im, 1)),
                    (int)json_integer_value(json_array_get(im, 0)));
    json_t *dets = json_object_get(g, "dets");
    assert_int_equal(got, (int)json_array_size(dets));
    assert_true(got >= 10);
    for (int i = 0; i < got; i++) {
        json_t *k = json_array_get(dets, i);
        assert_int_equal(out[i].cls, (int)json_integer_value(json_object_get(k, "class")));
        assert_true(fabs(out[i].score - json_number_value(json_object_get(k, "score"))) < 1e-6);
        for (int c = 0; c < 4; c++) {
            const double want = json_number_value(json_array_get(json_object_get(k, "box"), c));
            if (fabs(out[i].box[c] - want) > 1e-3)
                fail_msg("det %d side %d: %g, the reference %g", i, c, out[i].box[c], want);
        }
    }
    for (int i = 0; i < 2 * nl; i++) hs_free(owned[i]);
    hs_free(boxes);
    hs_free(scores);
    hs_free(scratch);
    hs_free(nscratch);
    hs_free(out);
    json_decref(g);
}

static void decodes_by_hand(void **state)
{
    (void)state;
    /* one 16 x 8 input at stride 8: two anchors, 1 class, reg_max 1 (two bins a side) */
    const struct hs_gfl_shape sh = {.in_w = 16, .in_h = 8, .n_classes = 1, .reg_max = 1};
    const float sc[2] = {0.25f, 0.75f};
    /* anchor 0: every side's bins equal -> distance 0.5 bins; anchor 1: bin 1 certain-ish */
    float d[2][8] = {{0}};
    for (int k = 0; k < 4; k++) d[1][2 * k + 1] = 40.0f;
    const struct hs_gfl_level lv = {.stride = 8, .scores = sc, .dists = &d[0][0]};
    float boxes[8], scores[2];
    int scratch[4], n = 0;
    struct hs_error err = {0};
    assert_int_equal(hs_gfl_decode(&sh, &lv, 1, boxes, scores, &n, scratch, &err), 0);
    assert_int_equal(n, 2);
    /* best first: anchor 1 (centre 12, 4), distances 8 */
    assert_true(scores[0] == 0.75f && scores[1] == 0.25f);
    const float want[8] = {4, -4, 20, 12, 0, 0, 8, 8};
    for (int i = 0; i < 8; i++) assert_true(fabsf(boxes[i] - want[i]) < 1e-4f);
    /* top_k 1 keeps the best only */
    const struct hs_gfl_shape one = {
        .in_w = 16, .in_h = 8, .n_classes = 1, .reg_max = 1, .top_k = 1};
    assert_int_equal(hs_gfl_candidates_max(&one, &lv, 1), 1);
    assert_int_equal(hs_gfl_decode(&one, &lv, 1, boxes, scores, &n, scratch, &err), 0);
    assert_int_equal(n, 1);
    assert_true(scores[0] == 0.75f);
    /* back to a 32 x 16 image: clipped to the input, then doubled */
    struct hs_det det = {.cls = 0, .score = 1, .box = {-3, -4, 20, 12}};
    hs_gfl_to_image(&det, 1, 16, 8, 32, 16);
    const float img[4] = {0, 0, 32, 16};
    for (int i = 0; i < 4; i++) assert_true(fabsf(det.box[i] - img[i]) < 1e-5f);
}

static void refuses_a_bad_shape(void **state)
{
    (void)state;
    const float sc[1] = {0};
    const float d[8] = {0};
    int scratch[2], n = 5;
    float boxes[4], scores[1];
    struct hs_error err = {0};
    const struct hs_gfl_level lv = {.stride = 8, .scores = sc, .dists = d};
    const struct hs_gfl_shape bad[] = {
        {.in_w = 0, .in_h = 8, .n_classes = 1, .reg_max = 1},
        {.in_w = 8, .in_h = 8, .n_classes = 0, .reg_max = 1},
        {.in_w = 8, .in_h = 8, .n_classes = 1, .reg_max = 0},
        {.in_w = 8, .in_h = 8, .n_classes = 1, .reg_max = 65},
        {.in_w = 8, .in_h = 8, .n_classes = 1, .reg_max = 1, .top_k = -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hs_gfl_decode(&bad[i], &lv, 1, boxes, scores, &n, scratch, &err),
                         HS_STATUS_INVALID_ARGUMENT);
        assert_int_equal(n, 0);
    }
    const struct hs_gfl_shape ok = {.in_w = 8, .in_h = 8, .n_classes = 1, .reg_max = 1};
    const struct hs_gfl_level zero = {.stride = 0, .scores = sc, .dists = d};
    assert_int_equal(hs_gfl_decode(&ok, &zero, 1, boxes, scores, &n, scratch, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

static void prep_matches_the_reference(void **state)
{
    (void)state;
    size_t n = 0, rn = 0;
    uint8_t *jpg =
        (uint8_t *)hs_test_read_file(hs_test_path("tests/data/ocr/skimage_page.jpg"), &n);
    float *ref = (float *)hs_test_read_file(
        hs_test_path("tests/golden/gfl/prep_skimage_page_48x64.f32"), &rn);
    const int w = 48, h = 64;
    assert_int_equal(rn, sizeof(float) * 3 * w * h);
    const struct hs_image_limits lim = {0, 0, 0};
    struct hs_image img = {0};
    struct hs_error err = {0};
    assert_int_equal(hs_image_decode(jpg, n, &lim, &img, &err), HS_STATUS_OK);
    float *t = NULL;
    assert_int_equal(hs_ocr_det_prep_fixed(&img, w, h, &t, &err), HS_STATUS_OK);
    double md = 0, sum = 0;
    for (int k = 0; k < 3 * w * h; k++) {
        const double d = fabs((double)t[k] - ref[k]);
        md = fmax(md, d);
        sum += d;
    }
    print_message("layout prep %dx%d: max diff %.4f, mean %.5f\n", w, h, md, sum / (3 * w * h));
    /* identical here; one 8-bit level (1/255/0.224 = 0.0175) for another JPEG decoder build */
    assert_true(md < 0.018);
    assert_true(sum / (3 * w * h) < 0.001);
    hs_free(t);
    hs_image_free(&img);
    free(jpg);
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_reference),
        cmocka_unit_test(decodes_by_hand),
        cmocka_unit_test(refuses_a_bad_shape),
        cmocka_unit_test(prep_matches_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
