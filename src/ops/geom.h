/* hetserve — plane geometry for the OCR glue ops: convex hull, minimum-area rectangle, polygon
 * offset (DB's "unclip"), polygon masks, perspective transforms and crops.
 *
 * Coordinates are pixels, x right and y down, a pixel's centre at its integer coordinates (as
 * OpenCV's contours, rectangles and warps have them).
 */
#ifndef HS_OPS_GEOM_H
#define HS_OPS_GEOM_H

#include <stdint.h>

#include "core/status.h"
#include "ops/image.h"

struct hs_pt {
    double x, y;
};

/* Convex hull of pts (n >= 0) into out (room for 2 * n points), in one turning order, no
 * collinear points; returns its point count (0, 1 or 2 for degenerate input). pts is reordered. */
int hs_geom_hull(struct hs_pt *pts, int n, struct hs_pt *out);

/* The rectangle of least area holding the convex polygon hull[n] (hs_geom_hull's output): its
 * corners and side lengths (w along the first corner's edge, h across). n of 1 or 2 gives a
 * rectangle of zero height. Returns 0, or -1 for n < 1. */
int hs_geom_min_area_rect(const struct hs_pt *hull, int n, struct hs_pt corner[4], double *w,
                          double *h);

/* DB's box of a point set: the minimum-area rectangle of pts' hull, its corners ordered top-left,
 * top-right, bottom-right, bottom-left as PaddleOCR's get_mini_boxes orders them (by x, then by
 * y within the left and the right pair); *short_side is the rectangle's shorter side. pts is
 * reordered; scratch has room for 2 * n points. Returns -1 when n < 1. */
int hs_geom_mini_box(struct hs_pt *pts, int n, struct hs_pt *scratch, struct hs_pt box[4],
                     double *short_side);

/* Offsets the closed polygon poly[n] outwards by delta with round joins, as the Clipper library's
 * ClipperOffset (arc tolerance 0.25, coordinates truncated to integers first) does, into out
 * (room for max points); returns the point count, or -1 when out is too small. */
int hs_geom_offset(const struct hs_pt *poly, int n, double delta, struct hs_pt *out, int max);

/* Area (positive) and perimeter of the polygon poly[n]. */
double hs_geom_area(const struct hs_pt *poly, int n);
double hs_geom_perimeter(const struct hs_pt *poly, int n);

/* Mean of map[h][w] over the pixels of the polygon poly[n] (vertices truncated to integers,
 * pixels on its edges included, as cv2.fillPoly draws it), restricted to the polygon's bounding
 * box clipped to the map. 0 when no pixel is covered. */
double hs_geom_poly_mean(const float *map, int w, int h, const struct hs_pt *poly, int n);

/* The 3x3 perspective transform m (row-major, m[8] = 1) taking src[i] to dst[i]; -1 when the
 * points are degenerate. */
int hs_geom_perspective(const struct hs_pt src[4], const struct hs_pt dst[4], double m[9]);

/* PaddleOCR's crop of a text box: the quadrilateral quad (top-left, top-right, bottom-right,
 * bottom-left) warped to a w x h upright image, w and h the longer of its opposite sides
 * (truncated), bicubic at the exact source positions with edge pixels repeated, as OpenCV 5's
 * cv2.warpPerspective (INTER_CUBIC, BORDER_REPLICATE) computes it; a crop at least 1.5 times taller
 * than wide is turned a quarter counter- clockwise. HS_STATUS_INVALID_INPUT for a box under one
 * pixel. */
hs_status hs_image_crop_quad(const struct hs_image *img, const struct hs_pt quad[4],
                             struct hs_image *out, struct hs_error *err);

#endif
