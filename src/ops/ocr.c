/* PP-OCR's tensor preparation (see ocr.h). */
#include "ops/ocr.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"

void hs_ocr_det_size(int w, int h, int limit_side_len, int *out_w, int *out_h)
{
    double ratio = 1.0;
    const int m = w > h ? w : h;
    if (limit_side_len > 0 && m > limit_side_len) ratio = (double)limit_side_len / m;
    int rh = (int)(h * ratio), rw = (int)(w * ratio);
    /* Python's round: half to even, as nearbyint in the default rounding mode */
    rh = (int)(nearbyint(rh / 32.0) * 32);
    rw = (int)(nearbyint(rw / 32.0) * 32);
    *out_h = rh > 32 ? rh : 32;
    *out_w = rw > 32 ? rw : 32;
}

/* float32 as numpy computes (x * float32(1/255) - mean) / std */
static const float det_mean[3] = {0.485f, 0.456f, 0.406f}, det_std[3] = {0.229f, 0.224f, 0.225f};

hs_status hs_ocr_det_prep(const struct hs_image *img, int limit_side_len, float **out, int *out_w,
                          int *out_h, struct hs_error *err)
{
    *out = NULL;
    struct hs_image padded = {0};
    const struct hs_image *src = img;
    hs_status s;
    if (img->w + img->h < 64) {
        const int pw = img->w > 32 ? img->w : 32, ph = img->h > 32 ? img->h : 32;
        if ((s = hs_image_alloc(&padded, pw, ph, err))) return s;
        memset(padded.px, 0, (size_t)pw * ph * 3);
        for (int y = 0; y < img->h; y++)
            memcpy(padded.px + (size_t)y * pw * 3, img->px + (size_t)y * img->w * 3,
                   (size_t)img->w * 3);
        src = &padded;
    }
    int w, h;
    hs_ocr_det_size(src->w, src->h, limit_side_len, &w, &h);
    s = hs_ocr_det_prep_fixed(src, w, h, out, err);
    if (!s) {
        *out_w = w;
        *out_h = h;
    }
    hs_image_free(&padded);
    return s;
}

hs_status hs_ocr_det_prep_fixed(const struct hs_image *src, int w, int h, float **out,
                                struct hs_error *err)
{
    *out = NULL;
    struct hs_image rs = {0};
    hs_status s;
    if ((s = hs_image_resize(src, w, h, &rs, err))) goto done;
    float *t = hs_malloc(sizeof(float) * 3 * (size_t)w * h);
    if (!t) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a %dx%d detector input", w, h);
        goto done;
    }
    const float scale = 1.0f / 255.0f;
    const size_t plane = (size_t)w * h;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) /* channel c of BGR is RGB's 2 - c */
            t[c * plane + i] = ((float)rs.px[i * 3 + (2 - c)] * scale - det_mean[c]) / det_std[c];
    *out = t;
done:
    hs_image_free(&rs);
    return s;
}

int hs_ocr_rec_width(double max_ratio, int height, int base_w)
{
    const double base = (double)base_w / height;
    return (int)(height * (max_ratio > base ? max_ratio : base));
}

hs_status hs_ocr_rec_prep(const struct hs_image *crop, int height, int width, float *dst,
                          struct hs_error *err)
{
    const size_t plane = (size_t)height * width;
    memset(dst, 0, sizeof(float) * 3 * plane);
    const double ratio = (double)crop->w / crop->h;
    const double cw = ceil(height * ratio);
    const int rw = cw > width ? width : (int)cw;
    struct hs_image rs;
    hs_status s = hs_image_resize(crop, rw < 1 ? 1 : rw, height, &rs, err);
    if (s) return s;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < rs.w; x++)
            for (int c = 0; c < 3; c++) {
                const float v = (float)rs.px[((size_t)y * rs.w + x) * 3 + (2 - c)] / 255.0f;
                dst[c * plane + (size_t)y * width + x] = (v - 0.5f) / 0.5f;
            }
    hs_image_free(&rs);
    return HS_STATUS_OK;
}

void hs_image_rotate180(struct hs_image *img)
{
    const size_t n = (size_t)img->w * img->h;
    for (size_t i = 0, j = n - 1; i < j; i++, j--)
        for (int c = 0; c < 3; c++) {
            uint8_t t = img->px[i * 3 + c];
            img->px[i * 3 + c] = img->px[j * 3 + c];
            img->px[j * 3 + c] = t;
        }
}
