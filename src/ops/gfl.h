/* hetserve — PP-PicoDet's box decode (generalized focal loss, GFL), the op between a detector's
 * head and NMS (DESIGN.md: ops/), as its reference post-processing does it (PaddleDetection's
 * PicoDet / rapid-layout's PPPostProcess):
 *
 * The head gives per stride s a level of ceil(in_h / s) x ceil(in_w / s) anchors, row-major,
 * each with class scores [n_classes] (sigmoid applied) and a distribution [4][reg_max + 1] of
 * logits over the distance of each side (left, top, right, bottom) in units of s. A side's
 * distance is the expectation of softmax(logits) over the bins 0..reg_max, times s; the box is
 * the anchor centre ((col + 0.5) s, (row + 0.5) s) minus / plus the distances. Per level only the
 * top_k anchors by their best class score are kept (0: all), best first (ties: the higher index
 * first, as the reference's reversed ascending sort); levels follow each other in order.
 *
 * The result is the input of hs_nms_multiclass (ops/nms.h): boxes[m][4] in input pixels and
 * scores[m][n_classes]. Nothing here allocates: the caller passes scratch of
 * hs_gfl_scratch_ints(largest level's anchor count) ints. Thread-safe (no state).
 */
#ifndef HS_OPS_GFL_H
#define HS_OPS_GFL_H

#include <stddef.h>

#include "core/status.h"
#include "ops/nms.h"

/* One level of a head's outputs. */
struct hs_gfl_level {
    int stride;
    const float *scores; /* [n][n_classes] */
    const float *dists;  /* [n][4][reg_max + 1] */
};

struct hs_gfl_shape {
    int in_w, in_h; /* the detector's input */
    int n_classes;  /* >= 1 */
    int reg_max;    /* bins per side - 1 (PicoDet: 7) */
    int top_k;      /* per level, the best this many anchors are kept (0: all) */
};

/* anchors of a level of stride s on the shape's input */
int hs_gfl_level_anchors(const struct hs_gfl_shape *sh, int stride);

/* ints of scratch hs_gfl_decode needs for a level of n anchors */
static inline size_t hs_gfl_scratch_ints(int n)
{
    return n > 0 ? 2 * (size_t)n : 1;
}

/* Candidates the decode gives at most: the sum over levels of min(top_k, anchors). */
int hs_gfl_candidates_max(const struct hs_gfl_shape *sh, const struct hs_gfl_level *lv,
                          int n_levels);

/* Decodes n_levels levels into boxes[][4] and scores[][n_classes] (room for
 * hs_gfl_candidates_max), *n_out = how many. HS_STATUS_INVALID_ARGUMENT for a bad shape
 * (sizes < 1, reg_max outside [1, 64], a stride < 1). */
hs_status hs_gfl_decode(const struct hs_gfl_shape *sh, const struct hs_gfl_level *lv, int n_levels,
                        float *boxes, float *scores, int *n_out, int *scratch,
                        struct hs_error *err);

/* Detections in input pixels -> the image's: clipped to the input, then scaled by
 * image / input per axis, as the reference does. */
void hs_gfl_to_image(struct hs_det *d, int n, int in_w, int in_h, int img_w, int img_h);

#endif
