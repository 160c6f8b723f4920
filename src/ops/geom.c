/* Plane geometry for the OCR glue ops (see geom.h). */
#include "ops/geom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static double cross(struct hs_pt o, struct hs_pt a, struct hs_pt b)
{
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

static int pt_cmp(const void *pa, const void *pb)
{
    const struct hs_pt *a = pa, *b = pb;
    if (a->x != b->x) return a->x < b->x ? -1 : 1;
    if (a->y != b->y) return a->y < b->y ? -1 : 1;
    return 0;
}

/* Andrew's monotone chain. In screen coordinates (y down) a positive cross product turns
 * clockwise on screen; the chain keeps the turns of one sign and drops collinear points. */
int hs_geom_hull(struct hs_pt *pts, int n, struct hs_pt *out)
{
    if (n <= 0) return 0;
    qsort(pts, (size_t)n, sizeof *pts, pt_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) { /* drop exact duplicates */
        if (m && pts[m - 1].x == pts[i].x && pts[m - 1].y == pts[i].y) continue;
        pts[m++] = pts[i];
    }
    n = m;
    if (n < 3) {
        memcpy(out, pts, sizeof *pts * (size_t)n);
        return n;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        while (k >= 2 && cross(out[k - 2], out[k - 1], pts[i]) <= 0) k--;
        out[k++] = pts[i];
    }
    for (int i = n - 2, t = k + 1; i >= 0; i--) {
        while (k >= t && cross(out[k - 2], out[k - 1], pts[i]) <= 0) k--;
        out[k++] = pts[i];
    }
    return k - 1;
}

int hs_geom_min_area_rect(const struct hs_pt *hull, int n, struct hs_pt corner[4], double *w,
                          double *h)
{
    if (n < 1) return -1;
    if (n == 1) {
        for (int i = 0; i < 4; i++) corner[i] = hull[0];
        *w = *h = 0;
        return 0;
    }
    double best = INFINITY;
    for (int e = 0; e < n; e++) {
        const struct hs_pt a = hull[e], b = hull[(e + 1) % n];
        double ux = b.x - a.x, uy = b.y - a.y, len = hypot(ux, uy);
        if (len == 0) continue;
        ux /= len;
        uy /= len;
        /* extents along the edge (u) and across it (v = u turned a quarter) */
        double umin = INFINITY, umax = -INFINITY, vmin = INFINITY, vmax = -INFINITY;
        for (int i = 0; i < n; i++) {
            const double dx = hull[i].x - a.x, dy = hull[i].y - a.y;
            const double pu = dx * ux + dy * uy, pv = -dx * uy + dy * ux;
            if (pu < umin) umin = pu;
            if (pu > umax) umax = pu;
            if (pv < vmin) vmin = pv;
            if (pv > vmax) vmax = pv;
        }
        const double area = (umax - umin) * (vmax - vmin);
        if (!isfinite(best) || area < best - 1e-9 * (1 + best)) {
            best = area;
            const double us[4] = {umin, umax, umax, umin}, vs[4] = {vmin, vmin, vmax, vmax};
            for (int i = 0; i < 4; i++) {
                corner[i].x = a.x + us[i] * ux - vs[i] * uy;
                corner[i].y = a.y + us[i] * uy + vs[i] * ux;
            }
            *w = umax - umin;
            *h = vmax - vmin;
        }
    }
    return 0;
}

int hs_geom_mini_box(struct hs_pt *pts, int n, struct hs_pt *scratch, struct hs_pt box[4],
                     double *short_side)
{
    if (n < 1) return -1;
    int m = hs_geom_hull(pts, n, scratch);
    struct hs_pt c[4];
    double w, h;
    if (hs_geom_min_area_rect(scratch, m, c, &w, &h)) return -1;
    /* sort the corners by x (insertion sort: four points, stable) */
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && c[j].x < c[j - 1].x; j--) {
            struct hs_pt t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    int i1, i2, i3, i4;
    if (c[1].y > c[0].y) {
        i1 = 0;
        i4 = 1;
    } else {
        i1 = 1;
        i4 = 0;
    }
    if (c[3].y > c[2].y) {
        i2 = 2;
        i3 = 3;
    } else {
        i2 = 3;
        i3 = 2;
    }
    box[0] = c[i1];
    box[1] = c[i2];
    box[2] = c[i3];
    box[3] = c[i4];
    *short_side = w < h ? w : h;
    return 0;
}

double hs_geom_area(const struct hs_pt *p, int n)
{
    double a = 0;
    for (int i = 0; i < n; i++) {
        const struct hs_pt q = p[i], r = p[(i + 1) % n];
        a += q.x * r.y - r.x * q.y;
    }
    return fabs(a) / 2;
}

double hs_geom_perimeter(const struct hs_pt *p, int n)
{
    double l = 0;
    for (int i = 0; i < n; i++) l += hypot(p[(i + 1) % n].x - p[i].x, p[(i + 1) % n].y - p[i].y);
    return l;
}

/* Clipper's rounding of a coordinate: half away from zero. */
static double cround(double v)
{
    return v < 0 ? (double)(int64_t)(v - 0.5) : (double)(int64_t)(v + 0.5);
}

int hs_geom_offset(const struct hs_pt *poly, int n, double delta, struct hs_pt *out, int max)
{
    if (n < 1 || n > 64) return -1;
    struct hs_pt src[64];
    int m = 0;
    for (int i = 0; i < n; i++) { /* integer coordinates (truncated), no repeated points */
        struct hs_pt p = {(double)(int64_t)poly[i].x, (double)(int64_t)poly[i].y};
        if (m && src[m - 1].x == p.x && src[m - 1].y == p.y) continue;
        src[m++] = p;
    }
    while (m > 1 && src[m - 1].x == src[0].x && src[m - 1].y == src[0].y) m--;
    if (m < 3) return 0;
    /* Clipper orients closed paths to a non-negative area (its Orientation() true) */
    double a2 = 0;
    for (int i = 0; i < m; i++) {
        const struct hs_pt q = src[i], r = src[(i + 1) % m];
        a2 += q.x * r.y - r.x * q.y;
    }
    if (a2 < 0)
        for (int i = 0, j = m - 1; i < j; i++, j--) {
            struct hs_pt t = src[i];
            src[i] = src[j];
            src[j] = t;
        }
    struct hs_pt nrm[64];
    for (int j = 0; j < m; j++) {
        const struct hs_pt p1 = src[j], p2 = src[(j + 1) % m];
        double dx = p2.x - p1.x, dy = p2.y - p1.y, f = 1.0 / hypot(dx, dy);
        nrm[j] = (struct hs_pt){dy * f, -dx * f};
    }
    const double ad = fabs(delta);
    double tol = 0.25;
    if (tol > ad * 0.25) tol = ad * 0.25;
    double steps = M_PI / acos(1 - tol / ad);
    if (steps > ad * M_PI) steps = ad * M_PI;
    double s_sin = sin(2 * M_PI / steps), s_cos = cos(2 * M_PI / steps);
    const double steps_per_rad = steps / (2 * M_PI);
    if (delta < 0) s_sin = -s_sin;
    int o = 0;
#define PUSH(X, Y)                                                                                 \
    do {                                                                                           \
        if (o >= max) return -1;                                                                   \
        out[o++] = (struct hs_pt){cround(X), cround(Y)};                                           \
    } while (0)
    for (int j = 0, k = m - 1; j < m; k = j, j++) {
        double sin_a = nrm[k].x * nrm[j].y - nrm[j].x * nrm[k].y;
        const double cos_a = nrm[k].x * nrm[j].x + nrm[j].y * nrm[k].y;
        if (fabs(sin_a * delta) < 1.0) {
            if (cos_a > 0) {
                PUSH(src[j].x + nrm[k].x * delta, src[j].y + nrm[k].y * delta);
                continue;
            }
        } else if (sin_a > 1.0)
            sin_a = 1.0;
        else if (sin_a < -1.0)
            sin_a = -1.0;
        if (sin_a * delta < 0) {
            PUSH(src[j].x + nrm[k].x * delta, src[j].y + nrm[k].y * delta);
            PUSH(src[j].x, src[j].y);
            PUSH(src[j].x + nrm[j].x * delta, src[j].y + nrm[j].y * delta);
            continue;
        }
        const double a = atan2(sin_a, cos_a);
        int st = (int)cround(steps_per_rad * fabs(a));
        if (st < 1) st = 1;
        double x = nrm[k].x, y = nrm[k].y;
        for (int i = 0; i < st; i++) {
            PUSH(src[j].x + x * delta, src[j].y + y * delta);
            const double x2 = x;
            x = x * s_cos - s_sin * y;
            y = x2 * s_sin + y * s_cos;
        }
        PUSH(src[j].x + nrm[j].x * delta, src[j].y + nrm[j].y * delta);
    }
#undef PUSH
    return o;
}

double hs_geom_poly_mean(const float *map, int w, int h, const struct hs_pt *poly, int n)
{
    if (n < 3 || n > 64 || w < 1 || h < 1) return 0;
    double fxmin = INFINITY, fxmax = -INFINITY, fymin = INFINITY, fymax = -INFINITY;
    for (int i = 0; i < n; i++) {
        fxmin = fmin(fxmin, poly[i].x);
        fxmax = fmax(fxmax, poly[i].x);
        fymin = fmin(fymin, poly[i].y);
        fymax = fmax(fymax, poly[i].y);
    }
    const int xmin = (int)fmin(fmax(floor(fxmin), 0), w - 1),
              xmax = (int)fmin(fmax(ceil(fxmax), 0), w - 1);
    const int ymin = (int)fmin(fmax(floor(fymin), 0), h - 1),
              ymax = (int)fmin(fmax(ceil(fymax), 0), h - 1);
    /* vertices relative to the box, truncated toward zero as numpy's astype(int32) */
    struct hs_pt v[64];
    int vy_min = INT32_MAX, vy_max = INT32_MIN;
    for (int i = 0; i < n; i++) {
        v[i].x = (double)(int64_t)(poly[i].x - xmin);
        v[i].y = (double)(int64_t)(poly[i].y - ymin);
        if (v[i].y < vy_min) vy_min = (int)v[i].y;
        if (v[i].y > vy_max) vy_max = (int)v[i].y;
    }
    const int bw = xmax - xmin + 1, bh = ymax - ymin + 1;
    double sum = 0;
    int64_t cnt = 0;
    for (int y = vy_min < 0 ? 0 : vy_min; y <= vy_max && y < bh; y++) {
        /* the polygon's span on this row: every edge that meets the row, endpoints included */
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n; i++) {
            const struct hs_pt a = v[i], b = v[(i + 1) % n];
            if ((y < a.y && y < b.y) || (y > a.y && y > b.y)) continue;
            if (a.y == b.y) {
                lo = fmin(lo, fmin(a.x, b.x));
                hi = fmax(hi, fmax(a.x, b.x));
            } else {
                const double x = a.x + (b.x - a.x) * (y - a.y) / (b.y - a.y);
                lo = fmin(lo, x);
                hi = fmax(hi, x);
            }
        }
        if (lo > hi) continue;
        int x0 = (int)floor(lo + 0.5), x1 = (int)floor(hi + 0.5);
        if (x0 < 0) x0 = 0;
        if (x1 > bw - 1) x1 = bw - 1;
        const float *row = map + (size_t)(ymin + y) * w + xmin;
        for (int x = x0; x <= x1; x++) {
            sum += row[x];
            cnt++;
        }
    }
    return cnt ? sum / (double)cnt : 0;
}

int hs_geom_perspective(const struct hs_pt src[4], const struct hs_pt dst[4], double m[9])
{
    /* the 8 unknowns m0..m7 of x' = (m0 x + m1 y + m2) / (m6 x + m7 y + 1), y' likewise */
    double a[8][9];
    for (int i = 0; i < 4; i++) {
        const double x = src[i].x, y = src[i].y, u = dst[i].x, v = dst[i].y;
        const double r0[9] = {x, y, 1, 0, 0, 0, -x * u, -y * u, u};
        const double r1[9] = {0, 0, 0, x, y, 1, -x * v, -y * v, v};
        memcpy(a[i], r0, sizeof r0);
        memcpy(a[i + 4], r1, sizeof r1);
    }
    for (int c = 0; c < 8; c++) {
        int p = c;
        for (int r = c + 1; r < 8; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        if (fabs(a[p][c]) < 1e-12) return -1;
        if (p != c)
            for (int k = 0; k < 9; k++) {
                double t = a[c][k];
                a[c][k] = a[p][k];
                a[p][k] = t;
            }
        for (int r = 0; r < 8; r++) {
            if (r == c) continue;
            const double f = a[r][c] / a[c][c];
            for (int k = c; k < 9; k++) a[r][k] -= f * a[c][k];
        }
    }
    for (int i = 0; i < 8; i++) m[i] = a[i][8] / a[i][i];
    m[8] = 1;
    return 0;
}

/* OpenCV's bicubic weights (A = -0.75, in float) for a fraction t of a pixel. */
static void cubic_coefs(float t, float c[4])
{
    const float A = -0.75f;
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    c[3] = 1.f - c[0] - c[1] - c[2];
}

hs_status hs_image_crop_quad(const struct hs_image *img, const struct hs_pt q[4],
                             struct hs_image *out, struct hs_error *err)
{
    *out = (struct hs_image){0};
    const double wa = hypot(q[0].x - q[1].x, q[0].y - q[1].y),
                 wb = hypot(q[2].x - q[3].x, q[2].y - q[3].y);
    const double ha = hypot(q[0].x - q[3].x, q[0].y - q[3].y),
                 hb = hypot(q[1].x - q[2].x, q[1].y - q[2].y);
    const int w = (int)fmax(wa, wb), h = (int)fmax(ha, hb);
    if (w < 1 || h < 1)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "text box of %dx%d pixels", w, h);
    if ((int64_t)w * h > HS_IMAGE_MAX_PIXELS_DEFAULT)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "text box of %dx%d pixels", w, h);
    const struct hs_pt rect[4] = {{0, 0}, {w, 0}, {w, h}, {0, h}};
    double m[9];
    if (hs_geom_perspective(rect, q, m)) /* destination pixel -> source position */
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "degenerate text box");
    struct hs_image dst;
    hs_status s = hs_image_alloc(&dst, w, h, err);
    if (s) return s;
    /* exact source positions (OpenCV 5's warps no longer snap them to 1/32 of a pixel),
     * weights and sums in float, rounded to nearest */
    const int sw = img->w, sh = img->h;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const double wd = m[6] * x + m[7] * y + m[8];
            const double iw = wd ? 1.0 / wd : 0;
            double fx = (m[0] * x + m[1] * y + m[2]) * iw, fy = (m[3] * x + m[4] * y + m[5]) * iw;
            fx = fmin(fmax(fx, -1e6), 1e6);
            fy = fmin(fmax(fy, -1e6), 1e6);
            const float sx = (float)fx, sy = (float)fy;
            const int ix = (int)floorf(sx), iy = (int)floorf(sy);
            float cx[4], cy[4];
            cubic_coefs(sx - (float)ix, cx);
            cubic_coefs(sy - (float)iy, cy);
            float acc[3] = {0, 0, 0};
            for (int j = 0; j < 4; j++) {
                int yy = iy - 1 + j;
                yy = yy < 0 ? 0 : yy >= sh ? sh - 1 : yy;
                const uint8_t *row = img->px + (size_t)yy * sw * 3;
                float r[3] = {0, 0, 0};
                for (int i = 0; i < 4; i++) {
                    int xx = ix - 1 + i;
                    xx = xx < 0 ? 0 : xx >= sw ? sw - 1 : xx;
                    for (int c = 0; c < 3; c++) r[c] += cx[i] * row[xx * 3 + c];
                }
                for (int c = 0; c < 3; c++) acc[c] += cy[j] * r[c];
            }
            uint8_t *d = dst.px + ((size_t)y * w + x) * 3;
            for (int c = 0; c < 3; c++) {
                const long v = lrintf(acc[c]);
                d[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    if ((double)h / w >= 1.5) { /* numpy's rot90: a quarter turn counter-clockwise */
        struct hs_image r;
        if ((s = hs_image_alloc(&r, h, w, err))) {
            hs_image_free(&dst);
            return s;
        }
        for (int y = 0; y < w; y++)
            for (int x = 0; x < h; x++)
                memcpy(r.px + ((size_t)y * h + x) * 3, dst.px + ((size_t)x * w + (w - 1 - y)) * 3,
                       3);
        hs_image_free(&dst);
        dst = r;
    }
    *out = dst;
    return HS_STATUS_OK;
}
