/* hetserve — non-maximum suppression, the last op of a detector pipeline (DESIGN.md: ops/).
 *
 * Hard NMS as detectors' reference post-processing does it (PaddleDetection's PicoDet /
 * rapid-layout's hard_nms, the usual YOLO one per class): the candidates of a class scoring above
 * score_thresh, best first (ties: the lower index first), at most candidates_max of them; the
 * best is kept and every remaining one whose IoU with it exceeds iou_thresh is dropped; again
 * with the best remaining, until keep_max are kept or none remain. IoU is
 * intersection / (area_a + area_b - intersection + 1e-5), the reference's epsilon, in double;
 * widths and heights below zero count as zero. Boxes are corners (x1, y1, x2, y2).
 *
 * Nothing here allocates: the caller passes scratch of hs_nms_scratch_ints(n) ints, planned at
 * load time for its largest candidate count. Thread-safe (no state).
 */
#ifndef HS_OPS_NMS_H
#define HS_OPS_NMS_H

#include <stddef.h>

#include "core/status.h"

struct hs_nms_params {
    float score_thresh; /* a class's candidates score above this */
    float iou_thresh;   /* a candidate overlapping a kept box by more is suppressed */
    int candidates_max; /* per class, the best this many are considered (0: all) */
    int keep_max;       /* per class, at most this many are kept (0: all) */
};

/* one detection: class, score, corners */
struct hs_det {
    int cls;
    float score;
    float box[4];
};

/* ints of scratch hs_nms_hard and hs_nms_multiclass need for n candidates */
static inline size_t hs_nms_scratch_ints(int n)
{
    return n > 0 ? 3 * (size_t)n : 1;
}

/* IoU of two corner boxes, as the reference computes it (with its epsilon). */
double hs_nms_iou(const float *a, const float *b);

/* One class: boxes[n][4], scores[n] (stride score_stride floats between candidates, 1 for a
 * plain array). Writes the kept candidates' indices to keep[] (room for n), best first, and
 * returns how many. */
int hs_nms_hard(const float *boxes, const float *scores, size_t score_stride, int n,
                const struct hs_nms_params *p, int *keep, int *scratch);

/* Every class: scores[n][n_classes] (row-major, one row a candidate), boxes[n][4]. Class by
 * class in order, each class's kept detections best first, into out[out_max]; *n_out = how
 * many. HS_STATUS_INVALID_INPUT for a negative n or n_classes < 1, HS_STATUS_TOO_LONG when more
 * than out_max would be kept (out holds the first out_max). */
hs_status hs_nms_multiclass(const float *boxes, const float *scores, int n, int n_classes,
                            const struct hs_nms_params *p, struct hs_det *out, int out_max,
                            int *n_out, int *scratch);

#endif
