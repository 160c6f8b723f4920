/* hetserve — the body shared by the image decoder harnesses (fuzz_jpeg.c, fuzz_png.c): one
 * format's decoder, with limits of 4 M pixels and 4096 pixels a side so that a hostile header
 * cannot make a run slow.
 * Checks: a refused image says why (HS_STATUS_INVALID_INPUT with a message, or NO_MEMORY) and
 * leaves no pixels; an accepted one has sides in [1, 4096], at most the pixel limit, and every
 * pixel byte is read (so a sanitizer sees a short buffer); the sniffing decoder (hs_image_decode)
 * gives the same answer; nothing leaks. Each input runs once more with allocations failing from
 * the n-th on (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#ifndef HS_FUZZ_IMAGE_H
#define HS_FUZZ_IMAGE_H

#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "ops/image.h"

typedef hs_status (*fuzz_image_decode_fn)(const uint8_t *data, size_t n,
                                          const struct hs_image_limits *limits,
                                          struct hs_image *out, struct hs_error *err);

static volatile unsigned fuzz_image_sink;

static int fuzz_image_check(fuzz_image_decode_fn decode, const uint8_t *data, size_t size, int oom)
{
    const int64_t live = hs_alloc_live();
    const struct hs_image_limits lim = {
        .max_bytes = 1 << 20, .max_pixels = 4 << 20, .max_side = 4096};
    struct hs_image img;
    struct hs_error err = {0};
    hs_status s = decode(data, size, &lim, &img, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(img.px == NULL && img.w == 0 && img.h == 0);
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT || s == HS_STATUS_NO_MEMORY);
        FUZZ_CHECK(err.msg[0] != 0);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    FUZZ_CHECK(img.w >= 1 && img.h >= 1 && img.w <= 4096 && img.h <= 4096);
    FUZZ_CHECK((int64_t)img.w * img.h <= lim.max_pixels);
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)img.w * img.h * 3; i++) sum += img.px[i];
    fuzz_image_sink = sum;
    if (!oom) { /* the sniffing entry point agrees */
        struct hs_image again;
        FUZZ_CHECK(hs_image_decode(data, size, &lim, &again, &err) == HS_STATUS_OK);
        FUZZ_CHECK(again.w == img.w && again.h == img.h);
        FUZZ_CHECK(memcmp(again.px, img.px, (size_t)img.w * img.h * 3) == 0);
        hs_image_free(&again);
    }
    hs_image_free(&img);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}

static int fuzz_image_run(fuzz_image_decode_fn decode, const uint8_t *data, size_t size)
{
    fuzz_image_check(decode, data, size, 0);
    fuzz_fail_allocs(data, size);
    fuzz_image_check(decode, data, size, 1);
    fuzz_fail_allocs_end();
    return 0;
}

#endif
