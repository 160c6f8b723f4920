/* Unit tests of the built-in CPU ops (src/ops/): decoders on bad input and limits, resize,
 * geometry (hull, minimum-area rectangle, offset, polygon mean, perspective, crops), DB boxes on
 * drawn maps (a bar, a ring, specks), reading order, CTC dictionaries and decoding, the op table.
 * The comparisons with the reference's own functions are in test_ops_golden.c. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "ops/ctc.h"
#include "ops/db.h"
#include "ops/geom.h"
#include "ops/image.h"
#include "ops/ocr.h"
#include "ops/ops.h"

static uint8_t *golden(const char *name, size_t *n)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/ocr/%s", name);
    return (uint8_t *)hs_test_read_file(hs_test_path(rel), n);
}

static void decode_refuses_bad_input(void **state)
{
    (void)state;
    struct hs_image img;
    struct hs_error err = {0};
    const uint8_t junk[] = "GIF89a not an image we decode";
    assert_int_equal(hs_image_decode(junk, sizeof junk, NULL, &img, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "JPEG or PNG"));
    assert_null(img.px);
    assert_int_equal(hs_image_decode(junk, 0, NULL, &img, &err), HS_STATUS_INVALID_INPUT);
    const char *files[] = {"small.jpg", "small.png"};
    for (int f = 0; f < 2; f++) {
        size_t n;
        uint8_t *b = golden(files[f], &n);
        const int64_t live = hs_alloc_live();
        /* truncated: at several lengths, never a half image */
        for (size_t cut = 8; cut < n; cut += n / 7) {
            hs_error_clear(&err);
            hs_status s = hs_image_decode(b, cut, NULL, &img, &err);
            assert_int_equal(s, HS_STATUS_INVALID_INPUT);
            assert_true(strlen(err.msg) > 0);
            assert_null(img.px);
        }
        /* corrupt: bytes flipped in the middle of the data */
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        for (size_t i = n / 3; i < n / 3 + 40; i++) c[i] ^= 0x5a;
        hs_status s = hs_image_decode(c, n, NULL, &img, &err);
        if (s == HS_STATUS_OK) { /* a JPEG may decode flipped entropy bytes into other pixels */
            assert_int_equal(f, 0);
            hs_image_free(&img);
        } else {
            assert_int_equal(s, HS_STATUS_INVALID_INPUT);
        }
        /* limits: pixels, side, bytes */
        struct hs_image_limits l = {.max_pixels = 100};
        assert_int_equal(hs_image_decode(b, n, &l, &img, &err), HS_STATUS_INVALID_INPUT);
        assert_non_null(strstr(err.msg, "over the limit of 100"));
        l = (struct hs_image_limits){.max_side = 50};
        assert_int_equal(hs_image_decode(b, n, &l, &img, &err), HS_STATUS_INVALID_INPUT);
        assert_non_null(strstr(err.msg, "limit of 50 pixels"));
        l = (struct hs_image_limits){.max_bytes = 64};
        assert_int_equal(hs_image_decode(b, n, &l, &img, &err), HS_STATUS_INVALID_INPUT);
        assert_non_null(strstr(err.msg, "bytes, over the limit of 64"));
        /* out of memory for the pixels: a clean refusal */
        hs_alloc_fail_after(0);
        s = hs_image_decode(b, n, NULL, &img, &err);
        hs_alloc_fail_after(-1);
        assert_true(s == HS_STATUS_NO_MEMORY);
        assert_null(img.px);
        assert_int_equal(hs_alloc_live(), live);
        /* and the file itself decodes */
        assert_int_equal(hs_image_decode(b, n, NULL, &img, &err), HS_STATUS_OK);
        assert_int_equal(img.w, 71);
        assert_int_equal(img.h, 45);
        hs_image_free(&img);
        free(c);
        free(b);
    }
}

static void resize_identity_and_constant(void **state)
{
    (void)state;
    struct hs_image a, b;
    struct hs_error err = {0};
    assert_int_equal(hs_image_alloc(&a, 13, 7, &err), HS_STATUS_OK);
    for (int i = 0; i < 13 * 7 * 3; i++) a.px[i] = (uint8_t)(i * 37);
    assert_int_equal(hs_image_resize(&a, 13, 7, &b, &err), HS_STATUS_OK);
    assert_memory_equal(a.px, b.px, 13 * 7 * 3);
    hs_image_free(&b);
    memset(a.px, 77, 13 * 7 * 3);
    assert_int_equal(hs_image_resize(&a, 50, 3, &b, &err), HS_STATUS_OK);
    for (int i = 0; i < 50 * 3 * 3; i++) assert_int_equal(b.px[i], 77);
    hs_image_free(&b);
    assert_int_equal(hs_image_resize(&a, 0, 3, &b, &err), HS_STATUS_INVALID_ARGUMENT);
    hs_image_free(&a);
}

static void hull_and_rectangle(void **state)
{
    (void)state;
    /* a 10 x 4 grid of points: hull is its 4 corners, the rectangle 9 x 3 */
    struct hs_pt pts[40], hull[80], c[4];
    int n = 0;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 10; x++) pts[n++] = (struct hs_pt){x + 5, y + 2};
    const int h = hs_geom_hull(pts, n, hull);
    assert_int_equal(h, 4);
    double w, hh;
    assert_int_equal(hs_geom_min_area_rect(hull, h, c, &w, &hh), 0);
    assert_true(fabs(w * hh - 27) < 1e-9);
    assert_true(fabs(fmin(w, hh) - 3) < 1e-9);
    /* a rotated rectangle's corners give back the same rectangle */
    const double a = 0.3, L = 20, T = 5;
    struct hs_pt r[4] = {{0, 0},
                         {L * cos(a), L * sin(a)},
                         {L * cos(a) - T * sin(a), L * sin(a) + T * cos(a)},
                         {-T * sin(a), T * cos(a)}};
    struct hs_pt scratch[8], box[4];
    double side;
    assert_int_equal(hs_geom_mini_box(r, 4, scratch, box, &side), 0);
    assert_true(fabs(side - T) < 1e-9);
    /* box order: first corner the top-left one (least x of the left pair's upper) */
    assert_true(box[0].x < box[1].x && box[3].x < box[2].x);
    assert_true(fabs(hs_geom_area(box, 4) - L * T) < 1e-6);
    /* degenerate: one point */
    struct hs_pt one = {3, 3};
    assert_int_equal(hs_geom_mini_box(&one, 1, scratch, box, &side), 0);
    assert_true(side == 0);
}

static void offset_grows_rectangle(void **state)
{
    (void)state;
    struct hs_pt r[4] = {{10, 10}, {50, 10}, {50, 20}, {10, 20}}, out[256], scratch[512], box[4];
    const int n = hs_geom_offset(r, 4, 3.0, out, 256);
    assert_true(n > 8); /* rounded corners */
    double side;
    assert_int_equal(hs_geom_mini_box(out, n, scratch, box, &side), 0);
    assert_true(fabs(box[0].x - 7) < 1e-9 && fabs(box[0].y - 7) < 1e-9);
    assert_true(fabs(box[2].x - 53) < 1e-9 && fabs(box[2].y - 23) < 1e-9);
    /* every point at distance about 3 from the rectangle */
    for (int i = 0; i < n; i++) {
        const double dx = fmax(fmax(10 - out[i].x, out[i].x - 50), 0),
                     dy = fmax(fmax(10 - out[i].y, out[i].y - 20), 0);
        assert_true(fabs(hypot(dx, dy) - 3) < 0.75);
    }
    /* the same rectangle clockwise gives the same polygon's box */
    struct hs_pt rc[4] = {r[3], r[2], r[1], r[0]};
    const int n2 = hs_geom_offset(rc, 4, 3.0, out, 256);
    assert_int_equal(n2, n);
    assert_int_equal(hs_geom_offset(r, 4, 3.0, out, 4), -1); /* out too small */
}

static void poly_mean_and_perspective(void **state)
{
    (void)state;
    float map[10 * 10];
    for (int i = 0; i < 100; i++) map[i] = (i % 10) >= 5 ? 1.0f : 0.0f; /* right half 1 */
    struct hs_pt left[4] = {{0, 0}, {4, 0}, {4, 9}, {0, 9}},
                 all[4] = {{0, 0}, {9, 0}, {9, 9}, {0, 9}};
    assert_true(hs_geom_poly_mean(map, 10, 10, left, 4) == 0);
    assert_true(fabs(hs_geom_poly_mean(map, 10, 10, all, 4) - 0.5) < 1e-9);
    struct hs_pt src[4] = {{0, 0}, {10, 0}, {10, 5}, {0, 5}},
                 dst[4] = {{3, 4}, {23, 4}, {23, 14}, {3, 14}};
    double m[9];
    assert_int_equal(hs_geom_perspective(src, dst, m), 0);
    assert_true(fabs(m[0] - 2) < 1e-9 && fabs(m[4] - 2) < 1e-9 && fabs(m[2] - 3) < 1e-9);
    struct hs_pt flat[4] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
    assert_int_equal(hs_geom_perspective(flat, dst, m), -1);
}

static void crop_turns_tall_boxes(void **state)
{
    (void)state;
    struct hs_image img, c;
    struct hs_error err = {0};
    assert_int_equal(hs_image_alloc(&img, 40, 60, &err), HS_STATUS_OK);
    for (int y = 0; y < 60; y++)
        for (int x = 0; x < 40; x++)
            for (int k = 0; k < 3; k++) img.px[(y * 40 + x) * 3 + k] = (uint8_t)(y < 30 ? 10 : 200);
    /* an upright 20 x 10 box: copied as is */
    struct hs_pt wide[4] = {{5, 5}, {25, 5}, {25, 15}, {5, 15}};
    assert_int_equal(hs_image_crop_quad(&img, wide, &c, &err), HS_STATUS_OK);
    assert_int_equal(c.w, 20);
    assert_int_equal(c.h, 10);
    assert_int_equal(c.px[0], 10);
    hs_image_free(&c);
    /* a tall box (10 x 40): turned a quarter counter-clockwise, the top (dark) to the left */
    struct hs_pt tall[4] = {{10, 10}, {20, 10}, {20, 50}, {10, 50}};
    assert_int_equal(hs_image_crop_quad(&img, tall, &c, &err), HS_STATUS_OK);
    assert_int_equal(c.w, 40);
    assert_int_equal(c.h, 10);
    assert_int_equal(c.px[(5 * 40 + 2) * 3], 10);
    assert_int_equal(c.px[(5 * 40 + 37) * 3], 200);
    hs_image_free(&c);
    struct hs_pt dot[4] = {{3, 3}, {3.5, 3}, {3.5, 3.5}, {3, 3.5}};
    assert_int_equal(hs_image_crop_quad(&img, dot, &c, &err), HS_STATUS_INVALID_INPUT);
    hs_image_free(&img);
}

static void draw(float *m, int w, int x0, int y0, int x1, int y1, float v)
{
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) m[y * w + x] = v;
}

static void db_boxes_of_drawn_maps(void **state)
{
    (void)state;
    enum { W = 96, H = 64 };
    float *m = calloc(W * H, sizeof(float));
    draw(m, W, 10, 10, 49, 17, 0.9f); /* a bar 40 x 8 */
    draw(m, W, 70, 40, 71, 41, 0.9f); /* a speck: under min_size */
    draw(m, W, 60, 10, 90, 12, 0.2f); /* under the threshold */
    struct hs_db_params p = HS_DB_PARAMS_DEFAULT;
    struct hs_text_box *b;
    int n;
    struct hs_error err = {0};
    /* map 96 x 64 for an image twice the size */
    assert_int_equal(hs_db_boxes(m, W, H, 2 * W, 2 * H, &p, &b, &n, &err), HS_STATUS_OK);
    assert_int_equal(n, 1);
    /* the bar 39 x 7 (pixel centres), grown by 39*7*1.6/92 = 4.75 a side, doubled */
    const double d = 39.0 * 7 * 1.6 / 92;
    assert_true(fabs(b[0].p[0].x - 2 * (10 - d)) <= 2.0);
    assert_true(fabs(b[0].p[2].x - 2 * (49 + d)) <= 2.0);
    assert_true(fabs(b[0].p[2].y - 2 * (17 + d)) <= 2.0);
    assert_true(fabs(b[0].score - 0.9f) < 1e-6);
    hs_free(b);
    /* a ring: its outer border and its hole are both contours (RETR_LIST); the hole's box
     * scores low (its inside is empty) and is dropped by box_thresh */
    memset(m, 0, sizeof(float) * W * H);
    draw(m, W, 20, 10, 60, 50, 0.9f);
    draw(m, W, 30, 20, 50, 40, 0.0f);
    assert_int_equal(hs_db_boxes(m, W, H, W, H, &p, &b, &n, &err), HS_STATUS_OK);
    assert_int_equal(n, 1);
    hs_free(b);
    p.box_thresh = 0.1;
    assert_int_equal(hs_db_boxes(m, W, H, W, H, &p, &b, &n, &err), HS_STATUS_OK);
    assert_int_equal(n, 2);
    hs_free(b);
    /* empty map: no boxes, no error */
    memset(m, 0, sizeof(float) * W * H);
    assert_int_equal(hs_db_boxes(m, W, H, W, H, &p, &b, &n, &err), HS_STATUS_OK);
    assert_int_equal(n, 0);
    hs_free(b);
    assert_int_equal(hs_db_boxes(m, 0, H, W, H, &p, &b, &n, &err), HS_STATUS_INVALID_ARGUMENT);
    free(m);
}

/* random maps of every small size: noise, blobs, stripes; boxes stay inside the image */
static void db_random_maps(void **state)
{
    (void)state;
    uint32_t r = 12345;
#define RND() (r = r * 1664525u + 1013904223u, r >> 8)
    for (int it = 0; it < 300; it++) {
        const int w = 1 + (int)(RND() % 90), h = 1 + (int)(RND() % 70);
        float *m = malloc(sizeof(float) * (size_t)w * h);
        const int mode = it % 3;
        for (int i = 0; i < w * h; i++) {
            const int x = i % w, y = i / w;
            float v = (float)(RND() % 1000) / 1000.0f;
            if (mode == 1) v = ((x / 5 + y / 3) % 2) ? v : 0.9f;
            if (mode == 2) v = (y % 4 < 2) ? 0.95f : 0.1f;
            m[i] = v;
        }
        struct hs_db_params p = HS_DB_PARAMS_DEFAULT;
        p.box_thresh = (double)(RND() % 100) / 100.0;
        struct hs_text_box *b;
        int n;
        struct hs_error err = {0};
        const int sw = 1 + (int)(RND() % 500), sh = 1 + (int)(RND() % 500);
        assert_int_equal(hs_db_boxes(m, w, h, sw, sh, &p, &b, &n, &err), HS_STATUS_OK);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) {
                assert_true(b[i].p[k].x >= 0 && b[i].p[k].x <= sw);
                assert_true(b[i].p[k].y >= 0 && b[i].p[k].y <= sh);
            }
        n = hs_db_filter_sort(b, n, sw, sh);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) assert_true(b[i].p[k].x <= sw - 1 && b[i].p[k].y <= sh - 1);
        hs_free(b);
        free(m);
    }
#undef RND
}

static struct hs_text_box tb(double x, double y, double w, double h)
{
    struct hs_text_box b = {{{x + w, y + h}, {x, y + h}, {x, y}, {x + w, y}}, 0.9f};
    return b;
}

static void filter_sort_reading_order(void **state)
{
    (void)state;
    struct hs_text_box b[5] = {tb(100, 52, 50, 20), tb(10, 50, 60, 20), tb(10, 10, 80, 20),
                               tb(5, 100, 3, 20), tb(-5, 90, 400, 20)};
    const int n = hs_db_filter_sort(b, 5, 300, 200);
    assert_int_equal(n, 4); /* the 3-pixel-wide box is dropped */
    /* corners reordered: top-left first */
    assert_true(b[0].p[0].x == 10 && b[0].p[0].y == 10 && b[0].p[2].x == 90);
    /* y 50 and 52 are one line: left to right */
    assert_true(b[1].p[0].x == 10 && b[2].p[0].x == 100);
    /* clipped to the image */
    assert_true(b[3].p[0].x == 0 && b[3].p[1].x == 299);
}

static void ctc_dict_and_decode(void **state)
{
    (void)state;
    struct hs_ctc_dict d;
    struct hs_error err = {0};
    const char text[] = "a\nb\r\n\xe4\xb8\xad\n";
    assert_int_equal(hs_ctc_dict_parse(text, sizeof text - 1, true, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.n, 5);
    assert_string_equal(d.tok[2], "b");
    assert_string_equal(d.tok[3], "\xe4\xb8\xad");
    assert_string_equal(d.tok[4], " ");
    /* steps: a a blank a b space b -> "aab b" */
    const int seq[] = {1, 1, 0, 1, 2, 4, 2};
    float probs[7 * 5] = {0};
    for (int t = 0; t < 7; t++) {
        for (int c = 0; c < 5; c++) probs[t * 5 + c] = 0.05f;
        probs[t * 5 + seq[t]] = 0.8f;
    }
    char out[64];
    float score;
    assert_int_equal(hs_ctc_decode(probs, 7, 5, &d, out, sizeof out, &score, &err), HS_STATUS_OK);
    assert_string_equal(out, "aab b");
    assert_true(fabs(score - 0.8f) < 1e-6);
    assert_int_equal(hs_ctc_decode(probs, 7, 5, &d, out, 3, &score, &err), HS_STATUS_TOO_LONG);
    assert_int_equal(hs_ctc_decode(probs, 7, 6, &d, out, sizeof out, &score, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "6 classes"));
    /* all blanks: empty text, score 0 */
    for (int t = 0; t < 7; t++) probs[t * 5] = 0.9f;
    assert_int_equal(hs_ctc_decode(probs, 7, 5, &d, out, sizeof out, &score, &err), HS_STATUS_OK);
    assert_string_equal(out, "");
    assert_true(score == 0);
    hs_ctc_dict_free(&d);
    assert_int_equal(hs_ctc_dict_parse("", 0, true, &d, &err), HS_STATUS_INVALID_INPUT);
    assert_int_equal(hs_ctc_dict_parse("\xff\n", 2, true, &d, &err), HS_STATUS_INVALID_INPUT);
    assert_int_equal(hs_ctc_dict_load("/nonexistent/dict.txt", true, &d, &err),
                     HS_STATUS_NOT_FOUND);
}

static void det_sizes(void **state)
{
    (void)state;
    int w, h;
    hs_ocr_det_size(1920, 1080, 960, &w, &h);
    assert_int_equal(w, 960);
    assert_int_equal(h, 544); /* 540 / 32 = 16.875 -> 17 */
    hs_ocr_det_size(300, 120, 960, &w, &h);
    assert_int_equal(w, 288); /* 9.375 -> 9 */
    assert_int_equal(h, 128); /* 3.75 -> 4 */
    hs_ocr_det_size(10, 10, 960, &w, &h);
    assert_int_equal(w, 32);
    assert_int_equal(h, 32);
    hs_ocr_det_size(80, 48, 960, &w, &h); /* 48 / 32 = 1.5 -> 2 (half to even) */
    assert_int_equal(h, 64);
    hs_ocr_det_size(80, 80, 960, &w, &h); /* 2.5 -> 2 */
    assert_int_equal(w, 64);
    assert_int_equal(hs_ocr_rec_width(3.0, 48, 320), 320);
    assert_int_equal(hs_ocr_rec_width(10.0, 48, 320), 480);
}

/* gfl_decode then nms on a drawn head: one stride-8 level of a 16 x 16 input (2 x 2 anchors),
 * two classes; anchor 0 scores 0.9 for class 1 with every side's distribution peaked at bin 1
 * (8 px): the box (-4, -4, 12, 12) clipped to the input, scaled to the 32 x 32 image. */
static void layout_ops(void **state)
{
    (void)state;
    struct hs_ocr_params p = HS_OCR_PARAMS_DEFAULT;
    struct hs_error err = {0};
    struct hs_op_data d = {0};
    assert_int_equal(hs_op_find("gfl_decode")->run(&p, &d, &err), HS_STATUS_INVALID_ARGUMENT);
    d.det_w = d.det_h = 16;
    d.image = (struct hs_image){.w = 32, .h = 32, .px = hs_calloc(32 * 32 * 3, 1)};
    d.n_head = 2;
    d.head[0] = (struct hs_op_tensor){hs_calloc(4 * 2, sizeof(float)), 3, {1, 4, 2}};
    d.head[1] = (struct hs_op_tensor){hs_calloc(4 * 32, sizeof(float)), 3, {1, 4, 32}};
    d.head[0].data[1] = 0.9f;
    d.head[0].data[2 * 3] = 0.2f;
    for (int a = 0; a < 4; a++)
        for (int side = 0; side < 4; side++) d.head[1].data[a * 32 + side * 8 + 1] = 30.0f;
    assert_int_equal(hs_op_find("gfl_decode")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.n_cands, 4);
    assert_int_equal(d.n_classes, 2);
    assert_int_equal(hs_op_find("nms")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.n_dets, 1);
    assert_int_equal(d.dets[0].cls, 1);
    assert_float_equal(d.dets[0].score, 0.9f, 1e-6);
    const float want[4] = {0, 0, 24, 24};
    for (int k = 0; k < 4; k++) assert_float_equal(d.dets[0].box[k], want[k], 1e-3);
    /* a head whose anchors are not the input's is the engine's fault, said */
    d.head[0].shape[1] = d.head[1].shape[1] = 3;
    assert_int_equal(hs_op_find("gfl_decode")->run(&p, &d, &err), HS_STATUS_ENGINE);
    assert_non_null(strstr(err.msg, "anchors"));
    /* layout_prep: the image at the fixed size, whatever its own */
    p.layout_w = 64;
    p.layout_h = 48;
    assert_int_equal(hs_op_find("layout_prep")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.det_w, 64);
    assert_int_equal(d.det_h, 48);
    assert_non_null(d.det_in);
    hs_op_data_free(&d);
}

static void op_table(void **state)
{
    (void)state;
    const char *names[] = {"image_decode", "det_prep",    "db_post",    "crop",
                           "ctc_decode",   "layout_prep", "gfl_decode", "nms"};
    for (int i = 0; i < 8; i++) assert_non_null(hs_op_find(names[i]));
    assert_null(hs_op_find("nms_of_nothing"));
    assert_int_equal(hs_op_count(), 8);
    char buf[256];
    hs_op_names(buf, sizeof buf);
    assert_non_null(strstr(buf, "db_post"));
    struct hs_ocr_params p = HS_OCR_PARAMS_DEFAULT;
    struct hs_error err = {0};
    for (int i = 0; i < hs_op_count(); i++) {
        const struct hs_op *op = hs_op_at(i);
        hs_status s = op->check(&p, &err);
        /* ctc_decode needs its dictionary */
        assert_int_equal(s, strcmp(op->name, "ctc_decode") ? HS_STATUS_OK
                                                           : HS_STATUS_INVALID_ARGUMENT);
    }
    p.db.thresh = 2;
    assert_int_equal(hs_op_find("db_post")->check(&p, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "thresh"));
    /* the kinds: each op reads what the one before it in the OCR chain gives, the detector and
     * recognizer graphs between them */
    assert_int_equal(hs_op_find("image_decode")->in, HS_OP_KIND_BYTES);
    assert_int_equal(hs_op_find("det_prep")->in, hs_op_find("image_decode")->out);
    assert_int_equal(hs_op_find("det_prep")->out, HS_OP_KIND_TENSOR);
    assert_int_equal(hs_op_find("db_post")->in, HS_OP_KIND_MAP);
    assert_int_equal(hs_op_find("crop")->in, hs_op_find("db_post")->out);
    assert_int_equal(hs_op_find("crop")->also, HS_OP_KIND_IMAGE);
    assert_int_equal(hs_op_find("ctc_decode")->in, HS_OP_KIND_SEQ);
    assert_int_equal(hs_op_find("ctc_decode")->out, HS_OP_KIND_TEXT);
    assert_string_equal(hs_op_kind_str(HS_OP_KIND_CROPS), "text crops");
    assert_non_null(strstr(hs_op_find("ctc_decode")->params, "dict"));
    /* the layout chain: image -> fixed-size tensor; head outputs -> candidates -> detections */
    assert_int_equal(hs_op_find("layout_prep")->in, HS_OP_KIND_IMAGE);
    assert_int_equal(hs_op_find("layout_prep")->out, HS_OP_KIND_TENSOR);
    assert_int_equal(hs_op_find("gfl_decode")->in, HS_OP_KIND_HEAD);
    assert_int_equal(hs_op_find("nms")->in, hs_op_find("gfl_decode")->out);
    assert_int_equal(hs_op_find("nms")->out, HS_OP_KIND_DETS);
    assert_int_equal(hs_op_find("nms")->also, HS_OP_KIND_IMAGE);
    p.nms.iou_thresh = 1.5f;
    assert_int_equal(hs_op_find("nms")->check(&p, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "iou_thresh"));
    p = (struct hs_ocr_params)HS_OCR_PARAMS_DEFAULT;
    /* the ops in a row on an image: decode, det_prep; db_post on a drawn map; crop */
    size_t n;
    uint8_t *bytes = golden("page.png", &n);
    struct hs_op_data d = {.bytes = bytes, .n_bytes = n};
    p = (struct hs_ocr_params)HS_OCR_PARAMS_DEFAULT;
    assert_int_equal(hs_op_find("image_decode")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(hs_op_find("det_prep")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.det_w, 288);
    d.det_map = hs_calloc((size_t)d.det_w * d.det_h, sizeof(float));
    draw(d.det_map, d.det_w, 20, 20, 120, 40, 0.95f);
    assert_int_equal(hs_op_find("db_post")->run(&p, &d, &err), HS_STATUS_OK);
    assert_int_equal(d.n_boxes, 1);
    assert_int_equal(hs_op_find("crop")->run(&p, &d, &err), HS_STATUS_OK);
    assert_true(d.crops[0].w > d.crops[0].h);
    hs_op_data_free(&d);
    assert_ptr_equal(d.bytes, bytes);
    free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decode_refuses_bad_input),
        cmocka_unit_test(resize_identity_and_constant),
        cmocka_unit_test(hull_and_rectangle),
        cmocka_unit_test(offset_grows_rectangle),
        cmocka_unit_test(poly_mean_and_perspective),
        cmocka_unit_test(crop_turns_tall_boxes),
        cmocka_unit_test(db_boxes_of_drawn_maps),
        cmocka_unit_test(db_random_maps),
        cmocka_unit_test(filter_sort_reading_order),
        cmocka_unit_test(ctc_dict_and_decode),
        cmocka_unit_test(det_sizes),
        cmocka_unit_test(op_table),
        cmocka_unit_test(layout_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
