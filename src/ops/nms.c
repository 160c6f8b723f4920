#include "ops/nms.h"

#include <string.h>

double hs_nms_iou(const float *a, const float *b)
{
    const double l = a[0] > b[0] ? a[0] : b[0], t = a[1] > b[1] ? a[1] : b[1];
    const double r = a[2] < b[2] ? a[2] : b[2], d = a[3] < b[3] ? a[3] : b[3];
    const double iw = r - l > 0 ? r - l : 0, ih = d - t > 0 ? d - t : 0;
    const double aw = (double)a[2] - a[0], ah = (double)a[3] - a[1];
    const double bw = (double)b[2] - b[0], bh = (double)b[3] - b[1];
    const double area_a = (aw > 0 ? aw : 0) * (ah > 0 ? ah : 0);
    const double area_b = (bw > 0 ? bw : 0) * (bh > 0 ? bh : 0);
    const double inter = iw * ih;
    return inter / (area_a + area_b - inter + 1e-5);
}

/* a before b: higher score, then lower index */
static int before(const float *scores, size_t stride, int a, int b)
{
    const float sa = scores[(size_t)a * stride], sb = scores[(size_t)b * stride];
    return sa > sb || (sa == sb && a < b);
}

/* Stable merge sort of idx[n] by before(), with tmp[n]. */
static void sort_desc(int *idx, int *tmp, int n, const float *scores, size_t stride)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = before(scores, stride, idx[j], idx[i]) ? idx[j++] : idx[i++];
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

int hs_nms_hard(const float *boxes, const float *scores, size_t score_stride, int n,
                const struct hs_nms_params *p, int *keep, int *scratch)
{
    int *cand = scratch, *tmp = scratch + (n > 0 ? n : 0);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (scores[(size_t)i * score_stride] > p->score_thresh) cand[m++] = i;
    sort_desc(cand, tmp, m, scores, score_stride);
    if (p->candidates_max > 0 && m > p->candidates_max) m = p->candidates_max;
    int kept = 0;
    for (int i = 0; i < m; i++) {
        if (cand[i] < 0) continue; /* suppressed */
        const int cur = cand[i];
        keep[kept++] = cur;
        if (p->keep_max > 0 && kept == p->keep_max) break;
        for (int j = i + 1; j < m; j++)
            if (cand[j] >= 0 &&
                hs_nms_iou(boxes + 4 * (size_t)cand[j], boxes + 4 * (size_t)cur) > p->iou_thresh)
                cand[j] = -1;
    }
    return kept;
}

hs_status hs_nms_multiclass(const float *boxes, const float *scores, int n, int n_classes,
                            const struct hs_nms_params *p, struct hs_det *out, int out_max,
                            int *n_out, int *scratch)
{
    *n_out = 0;
    if (n < 0 || n_classes < 1) return HS_STATUS_INVALID_INPUT;
    int *keep = scratch + 2 * (size_t)n;
    for (int c = 0; c < n_classes; c++) {
        const int k = hs_nms_hard(boxes, scores + c, (size_t)n_classes, n, p, keep, scratch);
        for (int i = 0; i < k; i++) {
            if (*n_out == out_max) return HS_STATUS_TOO_LONG;
            struct hs_det *d = &out[(*n_out)++];
            d->cls = c;
            d->score = scores[(size_t)keep[i] * (size_t)n_classes + (size_t)c];
            memcpy(d->box, boxes + 4 * (size_t)keep[i], sizeof d->box);
        }
    }
    return HS_STATUS_OK;
}
