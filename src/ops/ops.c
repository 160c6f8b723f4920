/* The op table (see ops.h). */
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "ops/geom.h"
#include "ops/gfl.h"
#include "ops/ocr.h"

void hs_op_data_free(struct hs_op_data *d)
{
    if (!d) return;
    hs_image_free(&d->image);
    hs_free(d->det_in);
    hs_free(d->det_map);
    if (d->crops)
        for (int i = 0; i < d->n_boxes; i++) hs_image_free(&d->crops[i]);
    hs_free(d->crops);
    hs_free(d->boxes);
    hs_free(d->rec_probs);
    if (d->lines)
        for (int i = 0; i < d->n_lines; i++) hs_free(d->lines[i].text);
    hs_free(d->lines);
    hs_free(d->rotated);
    for (int i = 0; i < d->n_feats; i++) hs_free(d->feats[i].data);
    for (int i = 0; i < d->n_head; i++) hs_free(d->head[i].data);
    hs_free(d->cand_boxes);
    hs_free(d->cand_scores);
    hs_free(d->dets);
    const uint8_t *b = d->bytes;
    size_t n = d->n_bytes;
    *d = (struct hs_op_data){0};
    d->bytes = b;
    d->n_bytes = n;
}

static hs_status range(struct hs_error *err, const char *key, double v, double lo, double hi)
{
    if (v >= lo && v <= hi) return HS_STATUS_OK;
    return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s = %g: must be in [%g, %g]", key, v, lo,
                        hi);
}

/* ---- image_decode: bytes -> image ---- */

static hs_status decode_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    hs_status s;
    if ((s = range(err, "image_max_bytes", (double)p->limits.max_bytes, 0, 1ll << 31))) return s;
    if ((s = range(err, "image_max_pixels", (double)p->limits.max_pixels, 0, 1ll << 30))) return s;
    return range(err, "image_max_side", p->limits.max_side, 0, 65535);
}

static hs_status decode_run(const struct hs_ocr_params *p, struct hs_op_data *d,
                            struct hs_error *err)
{
    if (!d->bytes || !d->n_bytes)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "no image bytes");
    hs_image_free(&d->image);
    return hs_image_decode(d->bytes, d->n_bytes, &p->limits, &d->image, err);
}

/* ---- det_prep: image -> det_in ---- */

static hs_status det_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    return range(err, "limit_side_len", p->det_limit_side_len, 32, 8192);
}

static hs_status det_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    if (!d->image.px)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "det_prep: no decoded image");
    hs_free(d->det_in);
    d->det_in = NULL;
    return hs_ocr_det_prep(&d->image, p->det_limit_side_len, &d->det_in, &d->det_w, &d->det_h, err);
}

/* ---- db_post: det_map -> boxes (in the image's pixels, reading order) ---- */

static hs_status db_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    hs_status s;
    if ((s = range(err, "thresh", p->db.thresh, 0, 1))) return s;
    if ((s = range(err, "box_thresh", p->db.box_thresh, 0, 1))) return s;
    if ((s = range(err, "unclip_ratio", p->db.unclip_ratio, 0, 10))) return s;
    if ((s = range(err, "db_max_candidates", p->db.max_candidates, 1, 100000))) return s;
    return range(err, "db_min_size", p->db.min_size, 0, 1000);
}

static hs_status db_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    if (!d->det_map || !d->image.px)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "db_post: no detector map");
    hs_free(d->boxes);
    d->boxes = NULL;
    hs_status s = hs_db_boxes(d->det_map, d->det_w, d->det_h, d->image.w, d->image.h, &p->db,
                              &d->boxes, &d->n_boxes, err);
    if (s) return s;
    d->n_boxes = hs_db_filter_sort(d->boxes, d->n_boxes, d->image.w, d->image.h);
    return HS_STATUS_OK;
}

/* ---- crop: image + boxes -> crops ---- */

static hs_status crop_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    (void)p;
    (void)err;
    return HS_STATUS_OK;
}

static hs_status crop_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    (void)p;
    if (!d->image.px || (d->n_boxes && !d->boxes))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "crop: no image or boxes");
    d->crops = hs_calloc((size_t)(d->n_boxes ? d->n_boxes : 1), sizeof *d->crops);
    if (!d->crops) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for text crops");
    for (int i = 0; i < d->n_boxes; i++) {
        hs_status s = hs_image_crop_quad(&d->image, d->boxes[i].p, &d->crops[i], err);
        if (s) return s;
    }
    return HS_STATUS_OK;
}

/* ---- ctc_decode: rec_probs -> lines ---- */

static hs_status ctc_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    if (!p->dict) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "ctc_decode needs a dict");
    return range(err, "drop_score", p->drop_score, 0, 1);
}

static hs_status ctc_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    if (d->n_boxes && !d->rec_probs)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "ctc_decode: no recognizer output");
    d->lines = hs_calloc((size_t)(d->n_boxes ? d->n_boxes : 1), sizeof *d->lines);
    if (!d->lines) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for text lines");
    const size_t cap = (size_t)d->rec_t * 8 + 1;
    char *buf = hs_malloc(cap);
    if (!buf) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for text lines");
    d->n_lines = 0;
    hs_status s = HS_STATUS_OK;
    for (int i = 0; i < d->n_boxes && !s; i++) {
        float score = 0;
        s = hs_ctc_decode(d->rec_probs + (size_t)i * d->rec_t * d->rec_c, d->rec_t, d->rec_c,
                          p->dict, buf, cap, &score, err);
        if (s || score < p->drop_score) continue;
        struct hs_ocr_line *l = &d->lines[d->n_lines];
        if (!(l->text = hs_strdup(buf))) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for text lines");
            break;
        }
        l->box = d->boxes[i];
        l->score = score;
        l->rotated = d->rotated ? d->rotated[i] : 0;
        d->n_lines++;
    }
    hs_free(buf);
    return s;
}

/* ---- layout_prep: image -> det_in at the layout detector's fixed size ---- */

static hs_status lprep_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    hs_status s;
    if ((s = range(err, "input_w", p->layout_w, 32, 8192))) return s;
    return range(err, "input_h", p->layout_h, 32, 8192);
}

static hs_status lprep_run(const struct hs_ocr_params *p, struct hs_op_data *d,
                           struct hs_error *err)
{
    if (!d->image.px)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "layout_prep: no decoded image");
    hs_free(d->det_in);
    d->det_in = NULL;
    d->det_w = p->layout_w;
    d->det_h = p->layout_h;
    return hs_ocr_det_prep_fixed(&d->image, p->layout_w, p->layout_h, &d->det_in, err);
}

/* ---- gfl_decode: head outputs -> candidates (strides 8, 16, 32, ... by level) ---- */

static hs_status gfl_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    return range(err, "top_k", p->gfl_top_k, 0, 1 << 20);
}

static hs_status gfl_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    const int nl = d->n_head / 2;
    if (nl < 1 || d->n_head % 2 || nl > HS_OP_TENSORS_MAX / 2)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "gfl_decode: %d head outputs (scores and distributions per stride)",
                            d->n_head);
    struct hs_gfl_level lv[HS_OP_TENSORS_MAX / 2];
    struct hs_gfl_shape sh = {d->det_w, d->det_h, 0, 0, p->gfl_top_k};
    int most = 1;
    for (int l = 0; l < nl; l++) {
        const struct hs_op_tensor *sc = &d->head[l], *di = &d->head[nl + l];
        const int stride = 8 << l;
        if (sc->rank != 3 || di->rank != 3 || sc->shape[1] != di->shape[1] || di->shape[2] % 4 ||
            di->shape[2] < 8 || (l && sc->shape[2] != sh.n_classes))
            return hs_error_set(err, HS_STATUS_ENGINE,
                                "gfl_decode: head outputs of stride %d are not [1, n, classes] "
                                "and [1, n, 4 x bins]",
                                stride);
        sh.n_classes = (int)sc->shape[2];
        sh.reg_max = (int)di->shape[2] / 4 - 1;
        if (sc->shape[1] != hs_gfl_level_anchors(&sh, stride))
            return hs_error_set(err, HS_STATUS_ENGINE,
                                "gfl_decode: %lld anchors at stride %d, the %dx%d input has %d",
                                (long long)sc->shape[1], stride, d->det_w, d->det_h,
                                hs_gfl_level_anchors(&sh, stride));
        if (sc->shape[1] > most) most = (int)sc->shape[1];
        lv[l] = (struct hs_gfl_level){stride, sc->data, di->data};
    }
    const int cap = hs_gfl_candidates_max(&sh, lv, nl);
    hs_free(d->cand_boxes);
    hs_free(d->cand_scores);
    d->cand_boxes = hs_malloc(sizeof(float) * 4 * (size_t)(cap ? cap : 1));
    d->cand_scores = hs_malloc(sizeof(float) * (size_t)sh.n_classes * (size_t)(cap ? cap : 1));
    int *scratch = hs_malloc(sizeof(int) * hs_gfl_scratch_ints(most));
    hs_status s = HS_STATUS_OK;
    if (!d->cand_boxes || !d->cand_scores || !scratch)
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for box candidates");
    else
        s = hs_gfl_decode(&sh, lv, nl, d->cand_boxes, d->cand_scores, &d->n_cands, scratch, err);
    d->n_classes = sh.n_classes;
    hs_free(scratch);
    return s;
}

/* ---- nms: candidates -> detections in the image's pixels ---- */

static hs_status nms_check(const struct hs_ocr_params *p, struct hs_error *err)
{
    hs_status s;
    if ((s = range(err, "score_thresh", p->nms.score_thresh, 0, 1))) return s;
    if ((s = range(err, "iou_thresh", p->nms.iou_thresh, 0, 1))) return s;
    if ((s = range(err, "candidates_max", p->nms.candidates_max, 0, 1 << 20))) return s;
    return range(err, "keep_max", p->nms.keep_max, 0, 1 << 20);
}

static hs_status nms_run(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err)
{
    if (!d->image.px || (d->n_cands && (!d->cand_boxes || !d->cand_scores)))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "nms: no image or candidates");
    const int nc = d->n_classes > 0 ? d->n_classes : 1;
    const int per =
        p->nms.keep_max > 0 && p->nms.keep_max < d->n_cands ? p->nms.keep_max : d->n_cands;
    const int out_max = per * nc > 0 ? per * nc : 1;
    hs_free(d->dets);
    d->dets = hs_malloc(sizeof *d->dets * (size_t)out_max);
    int *scratch = hs_malloc(sizeof(int) * hs_nms_scratch_ints(d->n_cands));
    hs_status s = HS_STATUS_OK;
    if (!d->dets || !scratch)
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for detections");
    else if ((s = hs_nms_multiclass(d->cand_boxes, d->cand_scores, d->n_cands, nc, &p->nms, d->dets,
                                    out_max, &d->n_dets, scratch)))
        s = hs_error_set(err, s, "nms: %d candidates of %d classes", d->n_cands, nc);
    else
        hs_gfl_to_image(d->dets, d->n_dets, d->det_w, d->det_h, d->image.w, d->image.h);
    hs_free(scratch);
    return s;
}

#define K(x) HS_OP_KIND_##x
static const struct hs_op ops[] = {
    {"image_decode", "encoded JPEG / PNG bytes -> RGB image (limits: image_max_*)", K(BYTES),
     K(IMAGE), K(NONE), "", decode_check, decode_run},
    {"det_prep", "image -> detector input (longer side <= limit_side_len, x32, normalized)",
     K(IMAGE), K(TENSOR), K(NONE), "limit_side_len", det_check, det_run},
    {"db_post", "detector map -> text boxes (DB: binarize, contours, unclip, reading order)",
     K(MAP), K(BOXES), K(IMAGE), "thresh box_thresh unclip_ratio", db_check, db_run},
    {"crop", "image + text boxes -> upright text crops (perspective, bicubic)", K(BOXES), K(CROPS),
     K(IMAGE), "", crop_check, crop_run},
    {"ctc_decode", "recognizer output -> text lines (CTC greedy, dictionary, drop_score)", K(SEQ),
     K(TEXT), K(BOXES), "dict drop_score", ctc_check, ctc_run},
    {"layout_prep", "image -> detector input at a fixed input_w x input_h (plain resize, BGR)",
     K(IMAGE), K(TENSOR), K(NONE), "input_w input_h", lprep_check, lprep_run},
    {"gfl_decode", "detector head outputs -> box candidates (GFL, the top_k best a stride)",
     K(HEAD), K(CANDS), K(NONE), "top_k", gfl_check, gfl_run},
    {"nms", "box candidates -> detections in image pixels (per-class hard NMS)", K(CANDS), K(DETS),
     K(IMAGE), "score_thresh iou_thresh candidates_max keep_max labels", nms_check, nms_run},
};
#undef K

const char *hs_op_kind_str(enum hs_op_kind k)
{
#define HS_OP_KIND_STR(e, s) s,
    static const char *const names[] = {HS_OP_KINDS(HS_OP_KIND_STR)};
#undef HS_OP_KIND_STR
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

int hs_op_count(void)
{
    return (int)(sizeof ops / sizeof ops[0]);
}

const struct hs_op *hs_op_at(int i)
{
    return i >= 0 && i < hs_op_count() ? &ops[i] : NULL;
}

const struct hs_op *hs_op_find(const char *name)
{
    for (int i = 0; i < hs_op_count(); i++)
        if (strcmp(ops[i].name, name) == 0) return &ops[i];
    return NULL;
}

void hs_op_names(char *buf, size_t n)
{
    size_t o = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < hs_op_count() && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", ops[i].name);
}
