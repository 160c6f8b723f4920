#include "ops/gfl.h"

#include <math.h>
#include <string.h>

int hs_gfl_level_anchors(const struct hs_gfl_shape *sh, int stride)
{
    if (stride < 1) return 0;
    const int fw = (sh->in_w + stride - 1) / stride, fh = (sh->in_h + stride - 1) / stride;
    return fw * fh;
}

int hs_gfl_candidates_max(const struct hs_gfl_shape *sh, const struct hs_gfl_level *lv,
                          int n_levels)
{
    int m = 0;
    for (int l = 0; l < n_levels; l++) {
        const int n = hs_gfl_level_anchors(sh, lv[l].stride);
        m += sh->top_k > 0 && n > sh->top_k ? sh->top_k : n;
    }
    return m;
}

static float best_score(const float *s, int nc)
{
    float b = s[0];
    for (int c = 1; c < nc; c++)
        if (s[c] > b) b = s[c];
    return b;
}

/* a before b: higher best score, then the higher index */
static int before(const float *scores, int nc, int a, int b)
{
    const float sa = best_score(scores + (size_t)a * nc, nc);
    const float sb = best_score(scores + (size_t)b * nc, nc);
    return sa > sb || (sa == sb && a > b);
}

/* Stable merge sort of idx[n] by before(), with tmp[n]. */
static void sort_desc(int *idx, int *tmp, int n, const float *scores, int nc)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = before(scores, nc, idx[j], idx[i]) ? idx[j++] : idx[i++];
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

/* the expectation of softmax(logits[bins]) over 0..bins-1 */
static double side_distance(const float *logits, int bins)
{
    float mx = logits[0];
    for (int b = 1; b < bins; b++)
        if (logits[b] > mx) mx = logits[b];
    double sum = 0, ex = 0;
    for (int b = 0; b < bins; b++) {
        const double e = exp((double)logits[b] - mx);
        sum += e;
        ex += e * b;
    }
    return ex / sum;
}

hs_status hs_gfl_decode(const struct hs_gfl_shape *sh, const struct hs_gfl_level *lv, int n_levels,
                        float *boxes, float *scores, int *n_out, int *scratch, struct hs_error *err)
{
    *n_out = 0;
    if (sh->in_w < 1 || sh->in_h < 1 || sh->n_classes < 1 || sh->reg_max < 1 || sh->reg_max > 64 ||
        sh->top_k < 0 || n_levels < 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "gfl decode: bad shape (input %dx%d, %d classes, reg_max %d)", sh->in_w,
                            sh->in_h, sh->n_classes, sh->reg_max);
    const int nc = sh->n_classes, bins = sh->reg_max + 1;
    for (int l = 0; l < n_levels; l++) {
        const int s = lv[l].stride;
        if (s < 1) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "gfl decode: stride %d", s);
        const int fw = (sh->in_w + s - 1) / s, n = hs_gfl_level_anchors(sh, s);
        int *idx = scratch, *tmp = scratch + n;
        for (int i = 0; i < n; i++) idx[i] = i;
        sort_desc(idx, tmp, n, lv[l].scores, nc);
        const int k = sh->top_k > 0 && n > sh->top_k ? sh->top_k : n;
        for (int j = 0; j < k; j++) {
            const int a = idx[j];
            const double cx = (a % fw + 0.5) * s, cy = (a / fw + 0.5) * s;
            const float *d = lv[l].dists + (size_t)a * 4 * bins;
            float *b = boxes + 4 * (size_t)*n_out;
            b[0] = (float)(cx - side_distance(d, bins) * s);
            b[1] = (float)(cy - side_distance(d + bins, bins) * s);
            b[2] = (float)(cx + side_distance(d + 2 * bins, bins) * s);
            b[3] = (float)(cy + side_distance(d + 3 * bins, bins) * s);
            memcpy(scores + (size_t)*n_out * nc, lv[l].scores + (size_t)a * nc,
                   sizeof(float) * (size_t)nc);
            (*n_out)++;
        }
    }
    return HS_STATUS_OK;
}

static float clip(float v, float hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

void hs_gfl_to_image(struct hs_det *d, int n, int in_w, int in_h, int img_w, int img_h)
{
    const float sx = (float)in_w / (float)img_w, sy = (float)in_h / (float)img_h;
    for (int i = 0; i < n; i++) {
        float *b = d[i].box;
        b[0] = clip(b[0], (float)in_w) / sx;
        b[2] = clip(b[2], (float)in_w) / sx;
        b[1] = clip(b[1], (float)in_h) / sy;
        b[3] = clip(b[3], (float)in_h) / sy;
    }
}
