/* The model stages of a layout detector split in two (PP-PicoDet, model/ocr.h: graph kinds
 * backbone and head): the backbone graph takes the fixed-size input (layout_prep) and gives its
 * neck's feature maps, the head graph takes those and gives, per stride, the class scores and
 * then the side distributions that gfl_decode reads. The two may run on different engines: what
 * passes between them is the request's feature maps (struct hs_op_data feats). */
#include <string.h>

#include "core/alloc.h"
#include "model/ocr.h"

/* one graph run of m's slot graph on in[n_in] into fresh outputs out[n_out], each with room for
 * caps[k] floats (no more than the caller's bound on that output) */
static hs_status run_into(hs_engine_t e, void *graph, const struct hs_graph_tensor *in, int n_in,
                          struct hs_op_tensor *out, int n_out, const size_t *caps,
                          struct hs_error *err)
{
    struct hs_graph_tensor to[HS_OP_TENSORS_MAX];
    for (int k = 0; k < n_out; k++) {
        out[k] = (struct hs_op_tensor){0};
        to[k] = (struct hs_graph_tensor){hs_malloc(sizeof(float) * caps[k]), 0, {0}, caps[k]};
        out[k].data = to[k].data;
        if (!to[k].data) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for outputs");
    }
    hs_status s = hs_engine_graph_run(e, graph, in, n_in, to, n_out, err);
    for (int k = 0; k < n_out && !s; k++) {
        if (to[k].rank < 1 || to[k].rank > 4)
            return hs_error_set(err, HS_STATUS_ENGINE, "graph output %d of rank %d (1 .. 4)", k,
                                to[k].rank);
        out[k].rank = to[k].rank;
        memcpy(out[k].shape, to[k].shape, sizeof(int64_t) * (size_t)to[k].rank);
    }
    return s;
}

/* anchors (cells) of stride s on a w x h input */
static size_t cells(int w, int h, int s)
{
    return (size_t)((w + s - 1) / s) * (size_t)((h + s - 1) / s);
}

hs_status hs_layout_backbone(const struct hs_ocr_models *m, struct hs_op_data *d,
                             struct hs_error *err)
{
    if (!d->det_in) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "backbone: no input");
    for (int k = 0; k < d->n_feats; k++) hs_free(d->feats[k].data);
    /* the neck's maps at strides 8, 16, 32 and 32 (the stride-64 one is made in the head), each
     * with room for up to 256 channels */
    static const int strides[HS_LAYOUT_FEATS] = {8, 16, 32, 32};
    size_t caps[HS_LAYOUT_FEATS];
    for (int k = 0; k < HS_LAYOUT_FEATS; k++) caps[k] = 256 * cells(d->det_w, d->det_h, strides[k]);
    d->n_feats = HS_LAYOUT_FEATS;
    struct hs_graph_tensor ti = {
        d->det_in, 4, {1, 3, d->det_h, d->det_w}, 3 * (size_t)d->det_w * d->det_h};
    return run_into(m->bb_engine, m->bb, &ti, 1, d->feats, HS_LAYOUT_FEATS, caps, err);
}

hs_status hs_layout_head(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err)
{
    if (d->n_feats != HS_LAYOUT_FEATS)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "head: %d feature maps (%d)",
                            d->n_feats, HS_LAYOUT_FEATS);
    struct hs_graph_tensor ti[HS_LAYOUT_FEATS];
    for (int k = 0; k < HS_LAYOUT_FEATS; k++) {
        const struct hs_op_tensor *f = &d->feats[k];
        size_t n = 1;
        ti[k] = (struct hs_graph_tensor){f->data, f->rank, {0}, 0};
        for (int r = 0; r < f->rank; r++) n *= (size_t)(ti[k].shape[r] = f->shape[r]);
        ti[k].cap = n;
    }
    for (int k = 0; k < d->n_head; k++) hs_free(d->head[k].data);
    /* per stride 8 .. 64 its scores [1, n, classes <= 64], then its distributions
     * [1, n, 4 x bins <= 4 x 65] */
    const int nl = HS_LAYOUT_HEAD / 2;
    size_t caps[HS_LAYOUT_HEAD];
    for (int l = 0; l < nl; l++) {
        caps[l] = 64 * cells(d->det_w, d->det_h, 8 << l);
        caps[nl + l] = 4 * 65 * cells(d->det_w, d->det_h, 8 << l);
    }
    d->n_head = HS_LAYOUT_HEAD;
    return run_into(m->head_engine, m->head, ti, HS_LAYOUT_FEATS, d->head, HS_LAYOUT_HEAD, caps,
                    err);
}
