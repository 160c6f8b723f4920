/* The OCR pipeline on sched/pipeline: one stage per step, each with its own workers and batch
 * shape (see ocr.h, hs_ocr_pipeline_create). */
#include "model/ocr.h"

#include <stddef.h>

#include "core/clock.h"

/* an op and where its time goes in struct hs_ocr_timings */
struct op_slot {
    const char *op;
    size_t off;
};

/* each stage's function: the items are struct hs_ocr_job */
static void run_ops(const struct hs_ocr_models *m, void **items, int n, hs_status *st,
                    struct hs_error *errs, const struct op_slot *ops, int n_ops)
{
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        for (int k = 0; k < n_ops && !st[i]; k++) {
            const int64_t t0 = hs_now_ns();
            st[i] = hs_op_find(ops[k].op)->run(&m->params, &j->d, &errs[i]);
            *(int64_t *)((char *)&j->t + ops[k].off) += hs_now_ns() - t0;
        }
    }
}

static void stage_decode(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    static const struct op_slot ops[] = {
        {"image_decode", offsetof(struct hs_ocr_timings, decode)},
        {"det_prep", offsetof(struct hs_ocr_timings, det_prep)},
    };
    run_ops(ctx, items, n, st, errs, ops, 2);
}

static void stage_det(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        const struct hs_ocr_models *m = ctx;
        st[i] = hs_ocr_det(m, &j->d, &errs[i]);
        j->t.det += hs_now_ns() - t0;
        j->det_engine = hs_engine_name(m->det_engine);
    }
}

static void stage_post(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    static const struct op_slot ops[] = {
        {"db_post", offsetof(struct hs_ocr_timings, db_post)},
        {"crop", offsetof(struct hs_ocr_timings, crop)},
    };
    run_ops(ctx, items, n, st, errs, ops, 2);
}

static void stage_cls(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        const int64_t t0 = hs_now_ns();
        st[i] = hs_ocr_cls(ctx, &j->d, &errs[i]);
        j->t.cls += hs_now_ns() - t0;
    }
}

static void stage_rec(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    struct hs_op_data *ds[HS_PIPELINE_MAX_BATCH];
    for (int i = 0; i < n; i++) ds[i] = &((struct hs_ocr_job *)items[i])->d;
    const int64_t t0 = hs_now_ns();
    struct hs_error e = {0};
    const struct hs_ocr_models *m = ctx;
    hs_status s = hs_ocr_rec_many(m, ds, n, &e);
    const int64_t dt = hs_now_ns() - t0;
    for (int i = 0; i < n; i++) {
        struct hs_ocr_job *j = items[i];
        j->t.rec += dt; /* the batch's time: each request waited for all of it */
        j->rec_batch_images = n;
        j->rec_engine = hs_engine_name(m->rec_engine);
        st[i] = s;
        if (s) errs[i] = e;
    }
}

static void stage_ctc(void *ctx, void **items, int n, hs_status *st, struct hs_error *errs)
{
    static const struct op_slot ops[] = {{"ctc_decode", offsetof(struct hs_ocr_timings, ctc)}};
    run_ops(ctx, items, n, st, errs, ops, 1);
}

hs_status hs_ocr_pipeline_create(const struct hs_ocr_models *m,
                                 const struct hs_ocr_pipeline_opts *o, hs_pipeline_done_fn done,
                                 void *done_ctx, struct hs_pipeline **out, struct hs_error *err)
{
    void *c = (void *)m;
    const int w = o->cpu_workers > 0 ? o->cpu_workers : 1;
    const int q = o->queue_max > 0 ? o->queue_max : 64;
    const int ri = o->rec_images > 0 ? o->rec_images : 1;
    struct hs_pipeline_stage st[6];
    int n = 0;
#define CPU(nm, fn)                                                                                \
    (struct hs_pipeline_stage){                                                                    \
        .name = nm, .run = fn, .ctx = c, .workers = w, .queue_max = q, .batch_max = 1}
    st[n++] = CPU("decode", stage_decode);
    st[n++] = (struct hs_pipeline_stage){.name = "det",
                                         .run = stage_det,
                                         .ctx = c,
                                         .workers = 1,
                                         .queue_max = q,
                                         .batch_max = 1,
                                         .timeout_us = o->det_timeout_us,
                                         .fallback = o->det_fb ? stage_det : NULL,
                                         .fallback_ctx = (void *)o->det_fb,
                                         .ratio_max = o->det_ratio_max};
    st[n++] = CPU("db_post", stage_post);
    if (m->cls)
        st[n++] = (struct hs_pipeline_stage){"cls", stage_cls, c, 1, q, 1, 0, 0, 0, 0, 0, 0};
    st[n++] = (struct hs_pipeline_stage){.name = "rec",
                                         .run = stage_rec,
                                         .ctx = c,
                                         .workers = 1,
                                         .queue_max = q,
                                         .batch_max = ri,
                                         .window_us = ri > 1 ? o->rec_window_us : 0,
                                         .timeout_us = o->rec_timeout_us,
                                         .fallback = o->rec_fb ? stage_rec : NULL,
                                         .fallback_ctx = (void *)o->rec_fb,
                                         .ratio_max = o->rec_ratio_max};
    st[n++] = CPU("ctc", stage_ctc);
#undef CPU
    return hs_pipeline_create(st, n, done, done_ctx, out, err);
}
