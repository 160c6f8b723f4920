/* Image decoding (libjpeg-turbo's TurboJPEG API, libspng) and bilinear resizing. */
#include "ops/image.h"

#include <math.h>
#include <string.h>

#include <spng.h>
#include <turbojpeg.h>

#include "core/alloc.h"

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

enum hs_image_format hs_image_sniff(const uint8_t *data, size_t n)
{
    if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return HS_IMAGE_JPEG;
    if (n >= 8 && memcmp(data, png_sig, 8) == 0) return HS_IMAGE_PNG;
    return HS_IMAGE_UNKNOWN;
}

static void limits_fill(const struct hs_image_limits *in, struct hs_image_limits *out)
{
    *out = in ? *in : (struct hs_image_limits){0};
    if (out->max_bytes <= 0) out->max_bytes = HS_IMAGE_MAX_BYTES_DEFAULT;
    if (out->max_pixels <= 0) out->max_pixels = HS_IMAGE_MAX_PIXELS_DEFAULT;
    if (out->max_side <= 0) out->max_side = HS_IMAGE_MAX_SIDE_DEFAULT;
}

/* The checks every decoder makes on the header's dimensions, before allocating pixels. */
static hs_status check_dims(const char *fmt, int64_t w, int64_t h, const struct hs_image_limits *l,
                            struct hs_error *err)
{
    if (w < 1 || h < 1)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s image has no pixels (%lldx%lld)", fmt,
                            (long long)w, (long long)h);
    if (w > l->max_side || h > l->max_side)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s image is %lldx%lld: a side is over the limit of %d pixels", fmt,
                            (long long)w, (long long)h, l->max_side);
    if (w * h > l->max_pixels)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s image is %lldx%lld = %lld pixels, over the limit of %lld", fmt,
                            (long long)w, (long long)h, (long long)(w * h),
                            (long long)l->max_pixels);
    return HS_STATUS_OK;
}

static hs_status check_bytes(const char *fmt, size_t n, const struct hs_image_limits *l,
                             struct hs_error *err)
{
    if ((int64_t)n > l->max_bytes)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s image is %zu bytes, over the limit of %lld", fmt, n,
                            (long long)l->max_bytes);
    return HS_STATUS_OK;
}

hs_status hs_image_alloc(struct hs_image *img, int w, int h, struct hs_error *err)
{
    *img = (struct hs_image){0};
    if (w < 1 || h < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "image of %dx%d pixels", w, h);
    img->px = hs_malloc((size_t)w * (size_t)h * 3);
    if (!img->px)
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a %dx%d image", w, h);
    img->w = w;
    img->h = h;
    return HS_STATUS_OK;
}

void hs_image_free(struct hs_image *img)
{
    if (!img) return;
    hs_free(img->px);
    *img = (struct hs_image){0};
}

hs_status hs_image_decode_jpeg(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                               struct hs_image *out, struct hs_error *err)
{
    *out = (struct hs_image){0};
    struct hs_image_limits l;
    limits_fill(limits, &l);
    hs_status s = check_bytes("JPEG", n, &l, err);
    if (s) return s;
    if (n > (size_t)0xffffffffu) /* the API takes an unsigned long, but be explicit */
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "JPEG image too large");
    tjhandle tj = tjInitDecompress();
    if (!tj) return hs_error_set(err, HS_STATUS_NO_MEMORY, "JPEG: cannot create a decompressor");
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, data, (unsigned long)n, &w, &h, &subsamp, &colorspace) != 0) {
        s = hs_error_set(err, HS_STATUS_INVALID_INPUT, "corrupt JPEG image: %s",
                         tjGetErrorStr2(tj));
        goto done;
    }
    if ((s = check_dims("JPEG", w, h, &l, err))) goto done;
    if ((s = hs_image_alloc(out, w, h, err))) goto done;
    /* warnings (a truncated file, extraneous bytes) are errors: an image decoded half-way would
     * be recognised as something it is not; progressive scans are capped (a hostile file can
     * hold thousands, each a full pass) */
    if (tjDecompress2(tj, data, (unsigned long)n, out->px, w, w * 3, h, TJPF_RGB,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
        s = hs_error_set(err, HS_STATUS_INVALID_INPUT, "corrupt or truncated JPEG image: %s",
                         tjGetErrorStr2(tj));
        hs_image_free(out);
    }
done:
    tjDestroy(tj);
    return s;
}

hs_status hs_image_decode_png(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                              struct hs_image *out, struct hs_error *err)
{
    *out = (struct hs_image){0};
    struct hs_image_limits l;
    limits_fill(limits, &l);
    hs_status s = check_bytes("PNG", n, &l, err);
    if (s) return s;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return hs_error_set(err, HS_STATUS_NO_MEMORY, "PNG: cannot create a decoder");
    int r;
    /* ancillary chunks (text, ICC, ...) are skipped beyond these sizes instead of buffered */
    spng_set_chunk_limits(ctx, 1u << 20, 4u << 20);
    /* a backstop: the configured limits are checked below, with a clearer message */
    spng_set_image_limits(ctx, 65535, 65535);
    spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
    if ((r = spng_set_png_buffer(ctx, data, n)) != 0) goto fail;
    struct spng_ihdr ihdr;
    if ((r = spng_get_ihdr(ctx, &ihdr)) != 0) goto fail;
    if ((s = check_dims("PNG", ihdr.width, ihdr.height, &l, err))) goto done;
    size_t bytes = 0;
    if ((r = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &bytes)) != 0) goto fail;
    if (bytes != (size_t)ihdr.width * ihdr.height * 3) {
        s = hs_error_set(err, HS_STATUS_INTERNAL, "PNG: unexpected decoded size %zu", bytes);
        goto done;
    }
    if ((s = hs_image_alloc(out, (int)ihdr.width, (int)ihdr.height, err))) goto done;
    if ((r = spng_decode_image(ctx, out->px, bytes, SPNG_FMT_RGB8, 0)) != 0) {
        hs_image_free(out);
        goto fail;
    }
    goto done;
fail:
    s = hs_error_set(err, HS_STATUS_INVALID_INPUT, "corrupt or truncated PNG image: %s",
                     spng_strerror(r));
done:
    spng_ctx_free(ctx);
    return s;
}

hs_status hs_image_decode(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                          struct hs_image *out, struct hs_error *err)
{
    *out = (struct hs_image){0};
    switch (hs_image_sniff(data, n)) {
    case HS_IMAGE_JPEG:
        return hs_image_decode_jpeg(data, n, limits, out, err);
    case HS_IMAGE_PNG:
        return hs_image_decode_png(data, n, limits, out, err);
    default:
        break;
    }
    return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                        "not an image this server decodes (%zu bytes; JPEG or PNG expected)", n);
}

/* ---- bilinear resize ---- */

enum { COEF_BITS = 11, COEF_ONE = 1 << COEF_BITS };

/* For each destination coordinate along one axis: the first source index and the fixed-point
 * weight of it (the next index gets COEF_ONE minus it), as OpenCV computes them. */
static void axis_coefs(int src, int dst, int *idx, int16_t *w0)
{
    const double scale = (double)src / dst;
    for (int d = 0; d < dst; d++) {
        double f = (d + 0.5) * scale - 0.5;
        int i = (int)floor(f);
        f -= i;
        if (i < 0) {
            i = 0;
            f = 0;
        }
        if (i >= src - 1) {
            i = src - 1;
            f = 0;
        }
        idx[d] = i;
        long v = lrint((1.0 - f) * COEF_ONE);
        w0[d] = (int16_t)(v < 0 ? 0 : v > COEF_ONE ? COEF_ONE : v);
    }
}

static void hpass(const struct hs_image *src, int sy, int dst_w, const int *xi, const int16_t *xw,
                  int32_t *o)
{
    const uint8_t *sr = src->px + (size_t)sy * src->w * 3;
    for (int x = 0; x < dst_w; x++) {
        const int i0 = xi[x], i1 = i0 + 1 < src->w ? i0 + 1 : i0;
        const int32_t a = xw[x], b = COEF_ONE - a;
        for (int c = 0; c < 3; c++) o[x * 3 + c] = sr[i0 * 3 + c] * a + sr[i1 * 3 + c] * b;
    }
}

hs_status hs_image_resize(const struct hs_image *src, int dst_w, int dst_h, struct hs_image *dst,
                          struct hs_error *err)
{
    *dst = (struct hs_image){0};
    if (!src || !src->px || src->w < 1 || src->h < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "resize of an empty image");
    if (dst_w < 1 || dst_h < 1 || dst_w > HS_IMAGE_MAX_SIDE_DEFAULT * 2 ||
        dst_h > HS_IMAGE_MAX_SIDE_DEFAULT * 2)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "resize to %dx%d", dst_w, dst_h);
    hs_status s = hs_image_alloc(dst, dst_w, dst_h, err);
    if (s) return s;
    int *xi = hs_malloc(sizeof(int) * (size_t)(dst_w + dst_h));
    int16_t *xw = hs_malloc(sizeof(int16_t) * (size_t)(dst_w + dst_h));
    int32_t *rows = hs_malloc(sizeof(int32_t) * (size_t)dst_w * 3 * 2);
    if (!xi || !xw || !rows) {
        hs_free(xi);
        hs_free(xw);
        hs_free(rows);
        hs_image_free(dst);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory to resize to %dx%d", dst_w, dst_h);
    }
    int *yi = xi + dst_w;
    int16_t *yw = xw + dst_w;
    axis_coefs(src->w, dst_w, xi, xw);
    axis_coefs(src->h, dst_h, yi, yw);
    int32_t *r0 = rows, *r1 = rows + (size_t)dst_w * 3;
    int have0 = -1, have1 = -1; /* source rows held in r0, r1 */
    for (int y = 0; y < dst_h; y++) {
        const int sy0 = yi[y], sy1 = sy0 + 1 < src->h ? sy0 + 1 : sy0;
        if (have1 == sy0 && have0 != sy0) { /* moving down one row: reuse the second */
            int32_t *t = r0;
            r0 = r1;
            r1 = t;
            have0 = have1;
            have1 = -1;
        }
        if (have0 != sy0) {
            hpass(src, sy0, dst_w, xi, xw, r0);
            have0 = sy0;
        }
        if (have1 != sy1) {
            hpass(src, sy1, dst_w, xi, xw, r1);
            have1 = sy1;
        }
        const int32_t a = yw[y], b = COEF_ONE - a;
        uint8_t *d = dst->px + (size_t)y * dst_w * 3;
        /* OpenCV's vertical step in 16-bit halves: rows down by 4 bits, high halves of the
         * products, then 2 more bits, rounded (the rounding its SIMD path has) */
        for (int x = 0; x < dst_w * 3; x++) {
            int32_t v = (((a * (r0[x] >> 4)) >> 16) + ((b * (r1[x] >> 4)) >> 16) + 2) >> 2;
            d[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    hs_free(xi);
    hs_free(xw);
    hs_free(rows);
    return HS_STATUS_OK;
}
