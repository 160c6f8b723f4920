/* hetserve — images for the built-in CPU ops (ops/): decoding and resizing.
 *
 * An image is 8-bit, interleaved, 3 channels in RGB order, rows packed (stride = 3 * w). Models
 * that were trained on another channel order (PP-OCR: BGR, as OpenCV reads files) say so to the
 * op that turns the image into a tensor (ops/ocr.h), never here.
 *
 * Decoders face outside bytes: every limit (encoded size, width, height, pixel count) is checked
 * before any pixel memory is allocated, and a corrupt, truncated or oversized image is refused
 * with HS_STATUS_INVALID_INPUT and a message saying what is wrong, never decoded half-way.
 */
#ifndef HS_OPS_IMAGE_H
#define HS_OPS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct hs_image {
    int w, h;
    uint8_t *px; /* [h][w][3] RGB, owned (hs_image_free) */
};

/* Limits on an encoded image; 0 in a field = its default below. */
struct hs_image_limits {
    int64_t max_bytes;  /* encoded size */
    int64_t max_pixels; /* w * h */
    int max_side;       /* max(w, h) */
};
#define HS_IMAGE_MAX_BYTES_DEFAULT  (32ll << 20)
#define HS_IMAGE_MAX_PIXELS_DEFAULT (40ll * 1000 * 1000)
#define HS_IMAGE_MAX_SIDE_DEFAULT   16384

enum hs_image_format { HS_IMAGE_UNKNOWN, HS_IMAGE_JPEG, HS_IMAGE_PNG };

/* The format the bytes claim by their signature (JPEG: FF D8 FF, PNG: its 8-byte signature). */
enum hs_image_format hs_image_sniff(const uint8_t *data, size_t n);

/* Decodes a JPEG (libjpeg-turbo) or PNG (libspng) image into out (RGB; alpha dropped, grey
 * expanded, 16-bit PNG reduced to 8). limits may be NULL (defaults). HS_STATUS_INVALID_INPUT
 * with a message for an unknown format, a corrupt or truncated file, or one over a limit;
 * HS_STATUS_NO_MEMORY when the pixels cannot be allocated. On failure out is {0}. Thread-safe. */
hs_status hs_image_decode(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                          struct hs_image *out, struct hs_error *err);
/* The same for one format (the fuzz harnesses call them directly). */
hs_status hs_image_decode_jpeg(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                               struct hs_image *out, struct hs_error *err);
hs_status hs_image_decode_png(const uint8_t *data, size_t n, const struct hs_image_limits *limits,
                              struct hs_image *out, struct hs_error *err);

/* Allocates a w x h image (pixels uninitialised). HS_STATUS_INVALID_ARGUMENT for w or h < 1. */
hs_status hs_image_alloc(struct hs_image *img, int w, int h, struct hs_error *err);
void hs_image_free(struct hs_image *img);

/* Bilinear resize of src into dst (allocated here, dst_w x dst_h), with pixel centres at +0.5
 * and the edge pixels repeated, in 11-bit fixed point per axis with the rounding of OpenCV's
 * INTER_LINEAR for 8-bit images (tests/golden/ocr: identical to cv2.resize on downscales, a
 * level apart on a few pixels of a 2x upscale). */
hs_status hs_image_resize(const struct hs_image *src, int dst_w, int dst_h, struct hs_image *dst,
                          struct hs_error *err);

#endif
