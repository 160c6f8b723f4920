/* hs_ocr_stages_create (model/ocr.h): a pipeline of any stages in order, here op stages only (no
 * engine needed): each item runs every op exactly as the ops run alone, each stage's time lands
 * in job->stage_ns[its index], a bad image ends its own item with the decoder's error and the
 * rest go on; and the graph-kind table that model stages are found by. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "model/ocr.h"

struct done_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    hs_status st[8];
    char msg[8][600];
};

static void on_done(void *ctx, void *item, hs_status s, const struct hs_error *err)
{
    struct done_ctx *dc = ctx;
    struct hs_ocr_job *j = item;
    const int i = (int)(intptr_t)j->user;
    pthread_mutex_lock(&dc->mu);
    dc->st[i] = s;
    snprintf(dc->msg[i], sizeof dc->msg[i], "%s", s && err ? err->msg : "");
    dc->n++;
    pthread_cond_signal(&dc->cv);
    pthread_mutex_unlock(&dc->mu);
}

static void op_stages_run_as_the_ops(void **state)
{
    (void)state;
    size_t n = 0;
    uint8_t *png = (uint8_t *)hs_test_read_file(hs_test_path("tests/golden/ocr/page.png"), &n);
    assert_non_null(png);
    struct hs_ocr_params p = HS_OCR_PARAMS_DEFAULT;
    struct hs_error err = {0};
    /* the reference: the two ops called alone */
    struct hs_op_data ref = {.bytes = png, .n_bytes = n};
    assert_int_equal(hs_op_find("image_decode")->run(&p, &ref, &err), HS_STATUS_OK);
    assert_int_equal(hs_op_find("det_prep")->run(&p, &ref, &err), HS_STATUS_OK);

    struct hs_ocr_stage st[2] = {
        {.name = "decode",
         .op = hs_op_find("image_decode"),
         .params = &p,
         .workers = 2,
         .queue_max = 4},
        {.name = "det_prep",
         .op = hs_op_find("det_prep"),
         .params = &p,
         .workers = 1,
         .queue_max = 2,
         .requests_max = 3,
         .window_us = 1000},
    };
    struct done_ctx dc = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct hs_pipeline *pl = NULL;
    assert_int_equal(hs_ocr_stages_create(st, 2, on_done, &dc, &pl, &err), HS_STATUS_OK);
    assert_int_equal(hs_pipeline_stage_count(pl), 2);
    assert_string_equal(hs_pipeline_stage_name(pl, 1), "det_prep");
    static const uint8_t junk[] = "not an image";
    struct hs_ocr_job jobs[6];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 6; i++) {
        jobs[i].user = (void *)(intptr_t)i;
        jobs[i].d.bytes = i == 3 ? junk : png;
        jobs[i].d.n_bytes = i == 3 ? sizeof junk : n;
        hs_status s;
        while ((s = hs_pipeline_submit(pl, &jobs[i], 0, &err)) == HS_STATUS_OVERLOADED) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(s, HS_STATUS_OK);
    }
    pthread_mutex_lock(&dc.mu);
    while (dc.n < 6) pthread_cond_wait(&dc.cv, &dc.mu);
    pthread_mutex_unlock(&dc.mu);
    struct hs_pipeline_stage_stats x;
    hs_pipeline_stage_stats(pl, 0, &x);
    assert_int_equal(x.items_in, 6);
    assert_int_equal(x.items_failed, 1);
    hs_pipeline_stage_stats(pl, 1, &x);
    assert_int_equal(x.items_in, 5); /* the bad image never reached it */
    hs_pipeline_destroy(pl);
    for (int i = 0; i < 6; i++) {
        struct hs_op_data *d = &jobs[i].d;
        if (i == 3) {
            assert_int_equal(dc.st[i], HS_STATUS_INVALID_INPUT);
            assert_true(dc.msg[i][0]);
        } else {
            assert_int_equal(dc.st[i], HS_STATUS_OK);
            assert_int_equal(d->det_w, ref.det_w);
            assert_int_equal(d->det_h, ref.det_h);
            assert_memory_equal(d->det_in, ref.det_in,
                                sizeof(float) * 3 * (size_t)ref.det_w * ref.det_h);
            assert_true(jobs[i].stage_ns[0] > 0 && jobs[i].stage_ns[1] > 0);
            assert_null(jobs[i].stage_engine[0]); /* op stages run on no engine */
        }
        hs_op_data_free(d);
    }
    hs_op_data_free(&ref);
    free(png);
    /* no stages, or too many: refused */
    assert_int_equal(hs_ocr_stages_create(st, 0, on_done, &dc, &pl, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

static void graph_kinds(void **state)
{
    (void)state;
    assert_int_equal(hs_ocr_graph_io_count(), 5);
    const struct hs_ocr_graph_io *det = hs_ocr_graph_io_for(HS_OP_KIND_TENSOR);
    assert_non_null(det);
    assert_string_equal(det->name, "detect");
    assert_int_equal(det->out, HS_OP_KIND_MAP);
    assert_int_equal(det->rows_max, 1);
    assert_int_equal(det->shape_step, 32);
    /* crops are read by the recognizer unless a stage says classify */
    assert_string_equal(hs_ocr_graph_io_for(HS_OP_KIND_CROPS)->name, "recognize");
    assert_int_equal(hs_ocr_graph_io_find("recognize")->out, HS_OP_KIND_SEQ);
    assert_int_equal(hs_ocr_graph_io_find("classify")->slot, HS_OCR_SLOT_CLS);
    assert_int_equal(hs_ocr_graph_io_find("classify")->out, HS_OP_KIND_CROPS);
    assert_null(hs_ocr_graph_io_find("yolo"));
    assert_null(hs_ocr_graph_io_for(HS_OP_KIND_IMAGE)); /* an image goes through det_prep */
    /* a detector split in two: a tensor is the OCR detector's unless a stage says backbone;
     * the backbone's feature maps are read by the head, whose outputs by gfl_decode */
    const struct hs_ocr_graph_io *bb = hs_ocr_graph_io_find("backbone");
    assert_int_equal(bb->in, HS_OP_KIND_TENSOR);
    assert_int_equal(bb->out, HS_OP_KIND_FEATS);
    assert_int_equal(bb->slot, HS_OCR_SLOT_BACKBONE);
    assert_string_equal(hs_ocr_graph_io_for(HS_OP_KIND_FEATS)->name, "head");
    assert_int_equal(hs_ocr_graph_io_find("head")->out, hs_op_find("gfl_decode")->in);
    assert_int_equal(hs_ocr_graph_io_find("head")->slot, HS_OCR_SLOT_HEAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(op_stages_run_as_the_ops),
        cmocka_unit_test(graph_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
