/* DB post-processing (see db.h). */
#include "ops/db.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

/* A growable array of points with one range per contour. */
struct contours {
    struct hs_pt *pts;
    int n, cap;
    int *start; /* contour c is pts[start[c] .. start[c + 1]) */
    int nc, ccap;
};

static int pts_push(struct contours *c, int x, int y)
{
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 1024;
        struct hs_pt *p = hs_realloc(c->pts, sizeof *p * (size_t)cap);
        if (!p) return -1;
        c->pts = p;
        c->cap = cap;
    }
    c->pts[c->n++] = (struct hs_pt){x, y};
    return 0;
}

static int contour_begin(struct contours *c)
{
    if (c->nc + 2 > c->ccap) {
        int cap = c->ccap ? c->ccap * 2 : 64;
        int *s = hs_realloc(c->start, sizeof *s * (size_t)cap);
        if (!s) return -1;
        c->start = s;
        c->ccap = cap;
    }
    c->start[c->nc] = c->n;
    c->start[c->nc + 1] = c->n;
    return 0;
}

static void contour_end(struct contours *c)
{
    c->nc++;
    c->start[c->nc] = c->n;
}

/* Collects the contours of bitmap bm[h][w] (1 = text): for each 8-connected region its border
 * pixels (those with a 4-neighbour outside it), for each hole of a region (a 4-connected
 * background part not reaching the edge) the region's pixels next to it. Both in raster order
 * of their first pixel. */
static int find_contours(const uint8_t *bm, int w, int h, struct contours *c)
{
    const size_t np = (size_t)w * h;
    int32_t *lab = hs_calloc(np, sizeof *lab);
    int32_t *stack = hs_malloc(sizeof *stack * np);
    int32_t *memb = hs_malloc(sizeof *memb * np); /* the pixels of the part being filled */
    int rc = -1;
    if (!lab || !stack || !memb) goto out;
    int next_fg = 1, next_bg = -1; /* regions > 0, background parts < 0 */
    for (size_t s0 = 0; s0 < np; s0++) {
        if (lab[s0]) continue;
        const int fg = bm[s0] != 0;
        const int id = fg ? next_fg++ : next_bg--;
        int sp = 0, edge = 0, nm = 0;
        const int hole_region = (!fg && s0 >= (size_t)w) ? lab[s0 - w] : 0;
        stack[sp++] = (int32_t)s0;
        lab[s0] = id;
        if (fg && contour_begin(c)) goto out;
        if (!fg && hole_region > 0 && contour_begin(c)) goto out;
        while (sp) {
            const int p = stack[--sp], x = p % w, y = p / w;
            memb[nm++] = p;
            if (x == 0 || y == 0 || x == w - 1 || y == h - 1) edge = 1;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    if (!dx && !dy) continue;
                    if (!fg && dx && dy) continue; /* background: 4-connected */
                    const int xx = x + dx, yy = y + dy;
                    if (xx < 0 || yy < 0 || xx >= w || yy >= h) continue;
                    const int q = yy * w + xx;
                    if ((bm[q] != 0) != fg || lab[q]) continue;
                    lab[q] = id;
                    stack[sp++] = q;
                }
            if (fg) { /* a border pixel: a 4-neighbour outside the region (or the image) */
                const int border = x == 0 || y == 0 || x == w - 1 || y == h - 1 || !bm[p - 1] ||
                                   !bm[p + 1] || !bm[p - w] || !bm[p + w];
                if (border && pts_push(c, x, y)) goto out;
            }
        }
        if (fg) contour_end(c);
        if (!fg && hole_region > 0) {
            if (edge) { /* not a hole: it reaches the image's edge */
                c->n = c->start[c->nc];
                continue;
            }
            /* a hole: the pixels of the surrounding region next to it */
            for (int m = 0; m < nm; m++) {
                const int p = memb[m], x = p % w, y = p / w;
                const int nb[4][2] = {{x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
                for (int k = 0; k < 4; k++) {
                    const int q = nb[k][1] * w + nb[k][0];
                    if (lab[q] == hole_region && pts_push(c, nb[k][0], nb[k][1])) goto out;
                }
            }
            contour_end(c);
        }
    }
    rc = 0;
out:
    hs_free(lab);
    hs_free(stack);
    hs_free(memb);
    return rc;
}

hs_status hs_db_boxes(const float *map, int mw, int mh, int src_w, int src_h,
                      const struct hs_db_params *p, struct hs_text_box **boxes, int *n,
                      struct hs_error *err)
{
    *boxes = NULL;
    *n = 0;
    if (mw < 1 || mh < 1 || src_w < 1 || src_h < 1 || (int64_t)mw * mh > (1ll << 28))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "DB map %dx%d for an image %dx%d", mw,
                            mh, src_w, src_h);
    const size_t np = (size_t)mw * mh;
    uint8_t *bm = hs_malloc(np);
    struct contours c = {0};
    struct hs_pt *scratch = NULL;
    struct hs_text_box *out = NULL;
    hs_status s = HS_STATUS_NO_MEMORY;
    if (!bm) goto done;
    for (size_t i = 0; i < np; i++) bm[i] = map[i] > p->thresh;
    if (find_contours(bm, mw, mh, &c)) goto done;
    const int nc = c.nc < p->max_candidates ? c.nc : p->max_candidates;
    scratch = hs_malloc(sizeof *scratch * (size_t)(2 * (c.n > 256 ? c.n : 256) + 8));
    out = hs_malloc(sizeof *out * (size_t)(nc ? nc : 1));
    if (!scratch || !out) goto done;
    int k = 0;
    for (int ci = 0; ci < nc; ci++) {
        struct hs_pt *pts = c.pts + c.start[ci];
        const int cn = c.start[ci + 1] - c.start[ci];
        struct hs_pt box[4], grown[256], box2[4];
        double side;
        if (cn < 1 || hs_geom_mini_box(pts, cn, scratch, box, &side)) continue;
        if (side < p->min_size) continue;
        const double score = hs_geom_poly_mean(map, mw, mh, box, 4);
        if (p->box_thresh > score) continue;
        const double per = hs_geom_perimeter(box, 4);
        if (per <= 0) continue;
        const double dist = hs_geom_area(box, 4) * p->unclip_ratio / per;
        const int gn = hs_geom_offset(box, 4, dist, grown, 256);
        if (gn < 1) continue;
        if (hs_geom_mini_box(grown, gn, scratch, box2, &side)) continue;
        if (side < p->min_size + 2) continue;
        struct hs_text_box *b = &out[k++];
        for (int i = 0; i < 4; i++) {
            /* numpy's round: half to even (the default rounding mode of nearbyint) */
            double x = nearbyint(box2[i].x / mw * src_w), y = nearbyint(box2[i].y / mh * src_h);
            b->p[i].x = fmin(fmax(x, 0), src_w);
            b->p[i].y = fmin(fmax(y, 0), src_h);
        }
        b->score = (float)score;
    }
    *boxes = out;
    *n = k;
    out = NULL;
    s = HS_STATUS_OK;
done:
    if (s) hs_error_set(err, s, "no memory for the DB post-processing of a %dx%d map", mw, mh);
    hs_free(bm);
    hs_free(c.pts);
    hs_free(c.start);
    hs_free(scratch);
    hs_free(out);
    return s;
}

static void order_corners(struct hs_pt p[4])
{
    int imin = 0, imax = 0;
    for (int i = 1; i < 4; i++) {
        if (p[i].x + p[i].y < p[imin].x + p[imin].y) imin = i;
        if (p[i].x + p[i].y > p[imax].x + p[imax].y) imax = i;
    }
    if (imin == imax) imax = imin == 3 ? 2 : 3; /* all equal: any order */
    struct hs_pt rest[2];
    int r = 0;
    for (int i = 0; i < 4 && r < 2; i++)
        if (i != imin && i != imax) rest[r++] = p[i];
    const double d0 = rest[0].y - rest[0].x, d1 = rest[1].y - rest[1].x;
    struct hs_pt o[4] = {p[imin], d1 < d0 ? rest[1] : rest[0], p[imax],
                         d1 < d0 ? rest[0] : rest[1]};
    if (d1 == d0) { /* argmin and argmax both the first */
        o[1] = rest[0];
        o[3] = rest[0];
    }
    memcpy(p, o, sizeof o);
}

int hs_db_filter_sort(struct hs_text_box *b, int n, int src_w, int src_h)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct hs_text_box t = b[i];
        order_corners(t.p);
        for (int j = 0; j < 4; j++) {
            t.p[j].x = (double)(int)fmin(fmax(t.p[j].x, 0), src_w - 1);
            t.p[j].y = (double)(int)fmin(fmax(t.p[j].y, 0), src_h - 1);
        }
        const int rw = (int)hypot(t.p[0].x - t.p[1].x, t.p[0].y - t.p[1].y);
        const int rh = (int)hypot(t.p[0].x - t.p[3].x, t.p[0].y - t.p[3].y);
        if (rw <= 3 || rh <= 3) continue;
        b[k++] = t;
    }
    /* stable sort by (y, x) of the first corner (insertion sort: a page has tens of boxes) */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0; j--) {
            const struct hs_pt a = b[j - 1].p[0], c = b[j].p[0];
            if (!(c.y < a.y || (c.y == a.y && c.x < a.x))) break;
            struct hs_text_box t = b[j];
            b[j] = b[j - 1];
            b[j - 1] = t;
        }
    /* then boxes on the same line (first corners within 10 pixels of height) left to right */
    for (int i = 0; i < k - 1; i++)
        for (int j = i; j >= 0; j--) {
            if (fabs(b[j + 1].p[0].y - b[j].p[0].y) < 10 && b[j + 1].p[0].x < b[j].p[0].x) {
                struct hs_text_box t = b[j];
                b[j] = b[j + 1];
                b[j + 1] = t;
            } else
                break;
        }
    return k;
}
