/* The OCR pipeline on sched/pipeline: one stage per step, each with its own workers and batch
 * shape (see ocr.h, hs_ocr_pipeline_create). */
#include "model/ocr.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "core/clock.h"

/* ---- any stages in order (hs_ocr_stages_create) ---- */

/* a stage's time into the job's: by its index, and where the stage says in job->t */
static void took(const struct hs_ocr_stage_ctx *c, struct hs_ocr_job *j, int64_t ns)
{
    j->stage_ns[c->index] += ns;
    if (c->st->t_off) *(int64_t *)((char *)&j->t + c->st->t_off - 1) += ns;
}

static void gen_op(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    const struct hs_ocr_stage_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        st[i] = c->st->op->run(c->st->params, &j->d, &errs[i]);
        took(c, j, hs_now_ns() - t0);
    }
}

static void gen_detect(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    const struct hs_ocr_stage_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        st[i] = hs_ocr_det(c->m, &j->d, &errs[i]);
        took(c, j, hs_now_ns() - t0);
        j->stage_engine[c->index] = hs_engine_name(c->m->det_engine);
    }
}

static void gen_classify(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    const struct hs_ocr_stage_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        st[i] = hs_ocr_cls(c->m, &j->d, &errs[i]);
        took(c, j, hs_now_ns() - t0);
        j->stage_engine[c->index] = hs_engine_name(c->m->cls_engine);
    }
}

/* a layout detector's halves, one image a run each */
static void gen_half(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs,
                     bool head)
{
    const struct hs_ocr_stage_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        st[i] = head ? hs_layout_head(c->m, &j->d, &errs[i])
                     : hs_layout_backbone(c->m, &j->d, &errs[i]);
        took(c, j, hs_now_ns() - t0);
        j->stage_engine[c->index] = hs_engine_name(head ? c->m->head_engine : c->m->bb_engine);
    }
}

static void gen_backbone(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    gen_half(ctx, items, n, st, errs, false);
}

static void gen_head(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    gen_half(ctx, items, n, st, errs, true);
}

/* the crops of all n requests batched together (fan-in), each given back its own outputs */
static void gen_recognize(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    const struct hs_ocr_stage_ctx *c = ctx;
    struct hs_op_data *ds[HS_PIPELINE_MAX_BATCH];
    for (int i = 0; i < n; i++) ds[i] = &((struct hs_ocr_job *)items[i])->d;
    const int64_t t0 = hs_now_ns();
    struct hs_error e = {0};
    hs_status s = hs_ocr_rec_many(c->m, ds, n, &e);
    const int64_t dt = hs_now_ns() - t0;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        took(c, j, dt); /* the batch's time: each request waited for all of it */
        j->rec_batch_images = n;
        j->stage_engine[c->index] = hs_engine_name(c->m->rec_engine);
        st[i] = s;
        if (s) errs[i] = e;
    }
}

/* a request's work in the crop stages' cost lines: its text crops */
static double crops_of(const void *item)
{
    return ((const struct hs_ocr_job *)item)->d.n_boxes;
}

#define K(x) HS_OP_KIND_##x
static const struct hs_ocr_graph_io graph_ios[] = {
    {"detect", HS_OCR_SLOT_DET, "detector input -> probability map, one image a run (DBNet)",
     K(TENSOR), K(MAP), 1, 1, 32, gen_detect},
    {"recognize", HS_OCR_SLOT_REC,
     "text crops -> per-crop sequence probabilities, the crops of many requests "
     "batched (CTC recognizer)",
     K(CROPS), K(SEQ), HS_PIPELINE_MAX_BATCH, 6, 1, gen_recognize},
    {"classify", HS_OCR_SLOT_CLS,
     "text crops -> the same crops, those upside down turned (direction classifier)", K(CROPS),
     K(CROPS), HS_PIPELINE_MAX_BATCH, 6, 0, gen_classify},
    {"backbone", HS_OCR_SLOT_BACKBONE,
     "detector input -> feature maps, one image a run (a detector's first half: PP-PicoDet's "
     "backbone and neck)",
     K(TENSOR), K(FEATS), 1, 1, 0, gen_backbone},
    {"head", HS_OCR_SLOT_HEAD,
     "feature maps -> head outputs, one image a run (a detector's second half: per stride "
     "class scores and box side distributions)",
     K(FEATS), K(HEAD), 1, 1, 0, gen_head},
};
#undef K

int hs_ocr_graph_io_count(void)
{
    return (int)(sizeof graph_ios / sizeof graph_ios[0]);
}

const struct hs_ocr_graph_io *hs_ocr_graph_io_at(int i)
{
    return i >= 0 && i < hs_ocr_graph_io_count() ? &graph_ios[i] : NULL;
}

const struct hs_ocr_graph_io *hs_ocr_graph_io_find(const char *name)
{
    for (int i = 0; i < hs_ocr_graph_io_count(); i++)
        if (!strcmp(graph_ios[i].name, name)) return &graph_ios[i];
    return NULL;
}

const struct hs_ocr_graph_io *hs_ocr_graph_io_for(enum hs_op_kind in)
{
    for (int i = 0; i < hs_ocr_graph_io_count(); i++)
        if (graph_ios[i].in == in) return &graph_ios[i];
    return NULL;
}

hs_status hs_ocr_models_slot_load(struct hs_ocr_models *m, const struct hs_ocr_graph_io *io,
                                  hs_engine_t e, const char *path, int batch_max, int batch_fixed,
                                  const int *shapes, int n_shapes, struct hs_error *err)
{
    for (int k = 0; k <= HS_PIPELINE_MAX_BATCH; k++) atomic_init(&m->rec_runs[k], 0);
    for (int k = 0; k < 16; k++) atomic_init(&m->rec_width_runs[k], 0);
    for (int k = 0; k < 16 * 16; k++) atomic_init(&m->det_side_runs[k / 16][k % 16], 0);
    atomic_init(&m->rec_pad_rows, 0);
    atomic_init(&m->det_runs, 0);
    const int rows = batch_max > 0 ? batch_max : io->rows_default;
    if (n_shapes > 16) n_shapes = 16;
    void **graph = NULL;
    switch (io->slot) {
    case HS_OCR_SLOT_DET:
        m->det_engine = e;
        graph = &m->det;
        m->n_det_sides = n_shapes;
        for (int k = 0; k < n_shapes; k++) m->det_sides[k] = shapes[k];
        break;
    case HS_OCR_SLOT_REC:
        m->rec_engine = e;
        graph = &m->rec;
        m->rec_batch = rows;
        m->rec_batch_fixed = batch_fixed;
        m->n_rec_widths = n_shapes;
        for (int k = 0; k < n_shapes; k++) m->rec_widths[k] = shapes[k];
        break;
    case HS_OCR_SLOT_CLS:
        m->cls_engine = e;
        graph = &m->cls;
        m->cls_batch = rows;
        break;
    case HS_OCR_SLOT_BACKBONE:
        m->bb_engine = e;
        graph = &m->bb;
        break;
    case HS_OCR_SLOT_HEAD:
        m->head_engine = e;
        graph = &m->head;
        break;
    }
    *graph = NULL;
    return hs_engine_graph_load(e, path, graph, err);
}

static void **slot_graph(struct hs_ocr_models *m, const struct hs_ocr_graph_io *io)
{
    switch (io->slot) {
    case HS_OCR_SLOT_DET:
        return &m->det;
    case HS_OCR_SLOT_REC:
        return &m->rec;
    case HS_OCR_SLOT_CLS:
        return &m->cls;
    case HS_OCR_SLOT_BACKBONE:
        return &m->bb;
    default:
        return &m->head;
    }
}

hs_engine_t hs_ocr_models_slot_engine(const struct hs_ocr_models *m,
                                      const struct hs_ocr_graph_io *io)
{
    switch (io->slot) {
    case HS_OCR_SLOT_DET:
        return m->det_engine;
    case HS_OCR_SLOT_REC:
        return m->rec_engine;
    case HS_OCR_SLOT_CLS:
        return m->cls_engine;
    case HS_OCR_SLOT_BACKBONE:
        return m->bb_engine;
    default:
        return m->head_engine;
    }
}

void hs_ocr_models_slot_release(struct hs_ocr_models *m, const struct hs_ocr_graph_io *io)
{
    void **g = slot_graph(m, io);
    if (*g) hs_engine_graph_release(hs_ocr_models_slot_engine(m, io), *g);
    *g = NULL;
}

hs_status hs_ocr_stages_create(struct hs_ocr_stage *stages, int n, hs_pipeline_done_fn done,
                               void *done_ctx, struct hs_pipeline **out, struct hs_error *err)
{
    if (n < 1 || n > HS_PIPELINE_MAX_STAGES)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "a pipeline of %d stages (1 .. %d)", n,
                            HS_PIPELINE_MAX_STAGES);
    struct hs_pipeline_stage st[HS_PIPELINE_MAX_STAGES];
    for (int i = 0; i < n; i++) {
        struct hs_ocr_stage *g = &stages[i];
        g->ctx[0] = (struct hs_ocr_stage_ctx){g, g->m, i};
        g->ctx[1] = (struct hs_ocr_stage_ctx){g, g->fb, i};
        const bool fb = g->io && g->fb;
        const int ri = g->requests_max > 0 ? g->requests_max : 1;
        const int nr = g->io && g->n_routes > 0 ? g->n_routes : 0;
        if (nr > HS_PIPELINE_MAX_ROUTES)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "stage %s: %d routes (at most %d)",
                                g->name, nr, HS_PIPELINE_MAX_ROUTES);
        st[i] = (struct hs_pipeline_stage){
            .name = g->name,
            .run = g->io ? g->io->run : gen_op,
            .ctx = &g->ctx[0],
            .workers = g->workers > 0 ? g->workers : 1,
            .queue_max = g->queue_max > 0 ? g->queue_max : 64,
            .batch_max = ri,
            .window_us = ri > 1 ? g->window_us : 0,
            .timeout_us = g->timeout_us,
            .fallback = fb ? g->io->run : NULL,
            .fallback_ctx = fb ? &g->ctx[1] : NULL,
            .ratio_max = g->ratio_max,
            .n_routes = nr,
            .policy = g->policy,
            .units = g->io && g->io->in == HS_OP_KIND_CROPS ? crops_of : NULL,
        };
        for (int k = 0; k < nr; k++) {
            g->ctx[2 + k] = (struct hs_ocr_stage_ctx){g, g->routes[k], i};
            st[i].routes[k] = (struct hs_pipeline_route){
                .name = hs_engine_name(hs_ocr_models_slot_engine(g->routes[k], g->io)),
                .run = g->io->run,
                .ctx = &g->ctx[2 + k]};
        }
        if (nr) st[i].ctx = &g->ctx[2];
        if (g->io && !nr) { /* its one engine, by name in the stats */
            st[i].n_routes = 1;
            st[i].routes[0] = (struct hs_pipeline_route){
                .name = hs_engine_name(hs_ocr_models_slot_engine(g->m, g->io)),
                .run = g->io->run,
                .ctx = &g->ctx[0]};
        }
    }
    return hs_pipeline_create(st, n, done, done_ctx, out, err);
}

hs_status hs_ocr_pipeline_create(const struct hs_ocr_models *m,
                                 const struct hs_ocr_pipeline_opts *o,
                                 struct hs_ocr_stage stages[HS_PIPELINE_MAX_STAGES],
                                 hs_pipeline_done_fn done, void *done_ctx, struct hs_pipeline **out,
                                 struct hs_error *err)
{
    const int w = o->cpu_workers > 0 ? o->cpu_workers : 1;
    const int q = o->queue_max > 0 ? o->queue_max : 64;
    int n = 0;
#define T(f) (offsetof(struct hs_ocr_timings, f) + 1)
#define OP(nm, op_, f)                                                                             \
    (struct hs_ocr_stage){.name = nm,                                                              \
                          .op = hs_op_find(op_),                                                   \
                          .params = &m->params,                                                    \
                          .workers = w,                                                            \
                          .queue_max = q,                                                          \
                          .t_off = T(f)}
    stages[n++] = OP("decode", "image_decode", decode);
    stages[n++] = OP("det_prep", "det_prep", det_prep);
    stages[n++] = (struct hs_ocr_stage){.name = "det",
                                        .io = hs_ocr_graph_io_find("detect"),
                                        .m = m,
                                        .fb = o->det_fb,
                                        .workers = 1,
                                        .queue_max = q,
                                        .timeout_us = o->det_timeout_us,
                                        .ratio_max = o->det_ratio_max,
                                        .t_off = T(det)};
    stages[n++] = OP("db_post", "db_post", db_post);
    stages[n++] = OP("crop", "crop", crop);
    if (m->cls)
        stages[n++] = (struct hs_ocr_stage){.name = "cls",
                                            .io = hs_ocr_graph_io_find("classify"),
                                            .m = m,
                                            .workers = 1,
                                            .queue_max = q,
                                            .t_off = T(cls)};
    stages[n++] = (struct hs_ocr_stage){.name = "rec",
                                        .io = hs_ocr_graph_io_find("recognize"),
                                        .m = m,
                                        .fb = o->rec_fb,
                                        .workers = 1,
                                        .queue_max = q,
                                        .requests_max = o->rec_images,
                                        .window_us = o->rec_window_us,
                                        .timeout_us = o->rec_timeout_us,
                                        .ratio_max = o->rec_ratio_max,
                                        .t_off = T(rec)};
    stages[n++] = OP("ctc", "ctc_decode", ctc);
#undef OP
#undef T
    return hs_ocr_stages_create(stages, n, done, done_ctx, out, err);
}
