/* CPU engine: whole stages against a naive double-precision reference encoder on random weights
 * (several shapes, F32/F16/BF16 weights, mean and CLS pooling, small and large batches), batch
 * invariance, input validation, injected faults, layer splits and lent cores. The kernels on
 * their own: test_cpu_kernels.c. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/lease.h"
#include "engine/cpu/qlinear.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "refmodel.h"

/* Runs lens[] random sequences as one batch and each alone on an engine made with opts; checks
 * both against the reference and against each other. */
static void check_model_opts(struct rand_model *rm, const int *lens, int n,
                             const struct hs_engine_opts *opts)
{
    const int H = rm->model.config.dims.hidden;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(opts, &e, &err), 0);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = n, .seq_max = 160};
    hs_status st = hs_executor_create(&rm->model, &plan, &xo, &x, &err);
    if (st) fail_msg("executor_create: %s", err.msg);

    int total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)total), offsets[65], lengths[64];
    offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        lengths[i] = lens[i];
        offsets[i + 1] = offsets[i] + lens[i];
    }
    for (int t = 0; t < total; t++) ids[t] = rand_id(97);
    float *batched = malloc(sizeof(float) * (size_t)n * H), *alone = malloc(sizeof(float) * H);
    double *ref = malloc(sizeof(double) * H);
    struct hs_batch b = {.n_seqs = n,
                         .seq_max = 160,
                         .n_tokens = total,
                         .ids = ids,
                         .lengths = lengths,
                         .offsets = offsets};
    st = hs_executor_run(x, 0, &b, batched, NULL, &err);
    if (st) fail_msg("run: %s", err.msg);
    for (int i = 0; i < n; i++) {
        ref_encode(rm, ids + offsets[i], lens[i], ref, NULL);
        double cs = cosine_fd(batched + (size_t)i * H, ref, H);
        double maxdiff = 0;
        for (int j = 0; j < H; j++)
            maxdiff = fmax(maxdiff, fabs(batched[(size_t)i * H + j] - ref[j]));
        if (cs < 0.99999 || maxdiff > 1e-4)
            fail_msg("seq %d (len %d): cosine %.8f, max |diff| %.3g vs reference", i, lens[i], cs,
                     maxdiff);
        int32_t off1[2] = {0, lens[i]}, len1[1] = {lens[i]};
        struct hs_batch one = {.n_seqs = 1,
                               .seq_max = 160,
                               .n_tokens = lens[i],
                               .ids = ids + offsets[i],
                               .lengths = len1,
                               .offsets = off1};
        st = hs_executor_run(x, 0, &one, alone, NULL, &err);
        if (st) fail_msg("run alone: %s", err.msg);
        for (int j = 0; j < H; j++)
            if (fabsf(alone[j] - batched[(size_t)i * H + j]) > 1e-5f)
                fail_msg("batch invariance: seq %d dim %d: %g alone vs %g batched", i, j, alone[j],
                         batched[(size_t)i * H + j]);
    }
    free(ids), free(batched), free(alone), free(ref);
    hs_executor_free(x);
    hs_engine_destroy(e);
}

static void check_model(struct rand_model *rm, const int *lens, int n, int threads)
{
    check_model_opts(rm, lens, n, &(struct hs_engine_opts){.threads = threads});
}

/* Batches past the packed small-M kernel's rows (set to 16 here; MiniLM's 32 x 128 is such a
 * batch): QKV on sgemm with the bias added by the attention kernel, the output layers
 * accumulating into the residual stream, the FFN's input layer on the packed kernel (in
 * super-blocks past 256 rows, one thread), and short sequences alone on the packed kernel:
 * each against the reference, head sizes 32 and 64. */
static void encoder_matches_reference_large_batch(void **state)
{
    (void)state;
    int lens[] = {1, 7, 16, 33, 128, 3, 64, 100};
    for (int hd = 32; hd <= 64; hd += 32) {
        struct rand_model *rm = rand_model_new(2 * hd, 2, 4 * hd, 2, HS_POOL_MEAN, HS_DTYPE_F32);
        for (int threads = 1; threads <= 2; threads++)
            check_model_opts(
                rm, lens, 8,
                &(struct hs_engine_opts){.threads = threads, .cpu_small_gemm_rows = 16});
        rand_model_free(rm);
    }
}

static void encoder_matches_reference_f32_mean(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(64, 4, 128, 2, HS_POOL_MEAN, HS_DTYPE_F32);
    int lens[] = {1, 7, 16, 33, 128, 3, 64};
    check_model(rm, lens, 7, 2);
    check_model(rm, lens, 7, 1);
    rand_model_free(rm);
}

static void encoder_matches_reference_f16_cls(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(96, 3, 160, 3, HS_POOL_CLS, HS_DTYPE_F16);
    int lens[] = {5, 150, 2, 40};
    check_model(rm, lens, 4, 2);
    rand_model_free(rm);
}

static void encoder_matches_reference_head64(void **state)
{
    (void)state; /* head size 64 (BERT-base's) takes the AVX-512 attention kernel too */
    struct rand_model *rm = rand_model_new(128, 2, 256, 2, HS_POOL_MEAN, HS_DTYPE_F32);
    int lens[] = {1, 17, 70, 129};
    check_model(rm, lens, 4, 2);
    rand_model_free(rm);
}

static void encoder_matches_reference_bf16(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_BF16);
    int lens[] = {9, 1, 31};
    check_model(rm, lens, 3, 2);
    rand_model_free(rm);
}

static void bad_batches_are_rejected(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = 1}, &e, &err), 0);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = 2, .seq_max = 16, .tokens_max = 20};
    assert_int_equal(hs_executor_create(&rm->model, &plan, &xo, &x, &err), 0);
    int32_t ids[40] = {0}, off[3] = {0, 10, 20}, len[2] = {10, 10};
    float out[64];
    struct hs_batch b = {
        .n_seqs = 2, .seq_max = 16, .n_tokens = 20, .ids = ids, .lengths = len, .offsets = off};
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), HS_STATUS_OK);
    ids[3] = 97; /* outside the vocabulary */
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "vocabulary"));
    ids[3] = 0;
    int32_t off2[3] = {0, 17, 20}, len2[2] = {17, 3}; /* longer than seq_max */
    b.offsets = off2, b.lengths = len2;
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), HS_STATUS_INVALID_ARGUMENT);
    b.offsets = off, b.lengths = len;
    assert_int_equal(hs_executor_run(x, 1, &b, out, NULL, &err), HS_STATUS_INVALID_ARGUMENT);
    /* injected engine fault: reported, counted, and the engine works again afterwards */
    hs_engine_set_fault(e, &(struct hs_engine_fault){.fail_next = 1});
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), HS_STATUS_ENGINE);
    assert_non_null(strstr(err.msg, "injected"));
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), HS_STATUS_OK);
    struct hs_engine_stats stats;
    hs_engine_stats(e, &stats);
    assert_true(stats.errors >= 2);
    assert_true(stats.batches >= 2);
    hs_executor_free(x);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

/* Two one-thread CPU engines "a" and "b". */
static void two_engines(hs_engine_t *a, hs_engine_t *b)
{
    struct hs_error err = {0};
    assert_int_equal(
        hs_engine_cpu_create(&(struct hs_engine_opts){.name = "a", .threads = 1}, a, &err), 0);
    assert_int_equal(
        hs_engine_cpu_create(&(struct hs_engine_opts){.name = "b", .threads = 1}, b, &err), 0);
}

/* A batch of three sequences (20, 25 and 15 tokens) in ids (60 tokens), for the split tests. */
static struct hs_batch three_seqs(int32_t ids[60])
{
    static const int32_t off[4] = {0, 20, 45, 60}, len[3] = {20, 25, 15};
    for (int i = 0; i < 60; i++) ids[i] = (i * 7) % 97;
    return (struct hs_batch){
        .n_seqs = 3, .seq_max = 64, .n_tokens = 60, .ids = ids, .lengths = len, .offsets = off};
}

/* One sequence (25 tokens) inside three_seqs' ids: its second sequence. */
static struct hs_batch one_seq(int32_t ids[60])
{
    static const int32_t off[2] = {0, 25}, len[1] = {25};
    return (struct hs_batch){.n_seqs = 1,
                             .seq_max = 64,
                             .n_tokens = 25,
                             .ids = ids + 20,
                             .lengths = len,
                             .offsets = off};
}

/* A cpu engine of `threads` threads in *e and an int8 executor of rm's model on it. */
static struct hs_executor *int8_executor(struct rand_model *rm, int threads, int batch_max,
                                         int seq_max, hs_engine_t *e)
{
    struct hs_error err = {0};
    assert_int_equal(
        hs_engine_cpu_create(&(struct hs_engine_opts){.name = "e", .threads = threads}, e, &err),
        0);
    struct hs_placement pl;
    hs_placement_single(&rm->model, *e, &pl);
    const struct hs_executor_opts xo = {
        .batch_max = batch_max, .seq_max = seq_max, .dtype = HS_DTYPE_I8};
    struct hs_executor *x = NULL;
    assert_int_equal(hs_executor_create(&rm->model, &pl, &xo, &x, &err), 0);
    return x;
}

/* A whole int8 model (QKV with bias, the residual LayerNorm epilogues, the chained FFN) on the
 * engine's own kernel (AVX2 or AVX-512 VNNI) and on oneDNN's matmul, 1 and 2 threads, one
 * sequence and three: the same bits. */
static void int8_model_own_kernel_equals_onednn(void **state)
{
    (void)state;
    if (!hs__ql_dtype_fast(HS_DTYPE_I8) || hs__ql_own_isa() == HS_QGEMM_NONE) skip();
    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    for (int threads = 1; threads <= 2; threads++) {
        hs_engine_t e = NULL;
        struct hs_executor *x = int8_executor(rm, threads, 3, 64, &e);
        int32_t ids[60];
        struct hs_batch three = three_seqs(ids);
        struct hs_batch one = one_seq(ids);
        const struct hs_batch *bs[2] = {&three, &one};
        for (int k = 0; k < 2; k++) {
            float want[3 * 64], got[3 * 64];
            hs__ql_set_own_rows(0);
            assert_int_equal(hs_executor_run(x, 0, bs[k], want, NULL, &err), 0);
            hs__ql_set_own_rows(-1);
            assert_int_equal(hs_executor_run(x, 0, bs[k], got, NULL, &err), 0);
            assert_memory_equal(want, got, sizeof(float) * (size_t)bs[k]->n_seqs * 64);
        }
        hs_executor_free(x);
        hs_engine_destroy(e);
    }
    rand_model_free(rm);
}

/* An int8 batch large enough that each thread's slice runs in parts of a few hundred tokens
 * (cpu_engine.c: SUB_TOKENS), each part through the whole stage before the next: every
 * sequence's embedding is the same bits as the sequence alone, on 1 and 2 threads. */
static void int8_batch_in_parts_equals_alone(void **state)
{
    (void)state;
    if (!hs__ql_dtype_fast(HS_DTYPE_I8)) skip();
    struct rand_model *rm = rand_model_new(64, 4, 128, 2, HS_POOL_MEAN, HS_DTYPE_F32);
    enum { NS = 7, SEQ = 160 }; /* (the model's positions) */
    static const int32_t len[NS] = {150, 90, 120, 160, 7, 60, 141};
    int32_t off[NS + 1] = {0};
    for (int i = 0; i < NS; i++) off[i + 1] = off[i] + len[i];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)off[NS]);
    float *all = malloc(sizeof(float) * NS * 64), *one = malloc(sizeof(float) * 64);
    assert_true(ids && all && one);
    for (int i = 0; i < off[NS]; i++) ids[i] = (i * 13 + 5) % 97;
    struct hs_error err = {0};
    for (int threads = 1; threads <= 2; threads++) {
        hs_engine_t e = NULL;
        struct hs_executor *x = int8_executor(rm, threads, NS, SEQ, &e);
        const struct hs_batch b = {.n_seqs = NS,
                                   .seq_max = SEQ,
                                   .n_tokens = off[NS],
                                   .ids = ids,
                                   .lengths = len,
                                   .offsets = off};
        assert_int_equal(hs_executor_run(x, 0, &b, all, NULL, &err), 0);
        for (int i = 0; i < NS; i++) {
            const int32_t o1[2] = {0, len[i]};
            const struct hs_batch b1 = {.n_seqs = 1,
                                        .seq_max = SEQ,
                                        .n_tokens = len[i],
                                        .ids = ids + off[i],
                                        .lengths = len + i,
                                        .offsets = o1};
            assert_int_equal(hs_executor_run(x, 0, &b1, one, NULL, &err), 0);
            assert_memory_equal(one, all + (size_t)i * 64, sizeof(float) * 64);
        }
        hs_executor_free(x);
        hs_engine_destroy(e);
    }
    free(ids);
    free(all);
    free(one);
    rand_model_free(rm);
}

static void layer_split_equals_single_engine(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t a = NULL, b = NULL;
    two_engines(&a, &b);
    struct hs_placement single, split;
    hs_placement_single(&rm->model, a, &single);
    hs_placement_layers(&rm->model, a, 2, b, &split);
    split.engine[rm->model.n_stages - 1] = a; /* normalize back on a: a second boundary */
    struct hs_executor *x1 = NULL, *x2 = NULL;
    struct hs_executor_opts xo = {.batch_max = 3, .seq_max = 64};
    assert_int_equal(hs_executor_create(&rm->model, &single, &xo, &x1, &err), 0);
    assert_int_equal(hs_executor_create(&rm->model, &split, &xo, &x2, &err), 0);
    int32_t ids[60];
    struct hs_batch bt = three_seqs(ids);
    float o1[3 * 64], o2[3 * 64];
    struct hs_exec_timing t;
    assert_int_equal(hs_executor_run(x1, 0, &bt, o1, &t, &err), 0);
    assert_int_equal(t.n_transfers, 0);
    assert_int_equal(hs_executor_run(x2, 0, &bt, o2, &t, &err), 0);
    assert_int_equal(t.n_transfers, 2);
    for (int i = 0; i < 3 * 64; i++) assert_true(fabsf(o1[i] - o2[i]) <= 1e-6f);
    hs_executor_free(x1);
    hs_executor_free(x2);
    hs_engine_destroy(a);
    hs_engine_destroy(b);
    rand_model_free(rm);
}

/* A pipelined split: each engine runs one batch at a time. Two slots running batches at once on
 * a module split (every layer hands over twice) answer as one engine does, and a batch that
 * finds the first engine held waits for it (counted in wait_ns) instead of sharing it. */
struct pipe_run {
    struct hs_executor *x;
    int slot, rounds;
    const struct hs_batch *b;
    float out[3 * 64];
    int64_t wait_ns;
    hs_status st;
};

static void *pipe_thread(void *p)
{
    struct pipe_run *r = p;
    struct hs_error err = {0};
    for (int i = 0; i < r->rounds && !r->st; i++) {
        struct hs_exec_timing t;
        r->st = hs_executor_run(r->x, r->slot, r->b, r->out, &t, &err);
        r->wait_ns += t.wait_ns;
    }
    return NULL;
}

static void pipelined_split_holds_each_engine(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t a = NULL, b = NULL;
    two_engines(&a, &b);
    struct hs_placement single, modules, layers;
    hs_placement_single(&rm->model, a, &single);
    hs_placement_modules(&rm->model, a, b, &modules);
    hs_placement_layers(&rm->model, a, 1, b, &layers);
    struct hs_executor *x1 = NULL, *xm = NULL, *xl = NULL, *xs = NULL;
    struct hs_executor_opts xo = {.batch_max = 3, .seq_max = 64, .slots = 2, .pipeline = true};
    assert_int_equal(hs_executor_create(&rm->model, &single, &xo, &x1, &err), 0);
    assert_int_equal(hs_executor_create(&rm->model, &modules, &xo, &xm, &err), 0);
    assert_int_equal(hs_executor_create(&rm->model, &layers, &xo, &xl, &err), 0);
    xo.pipeline = false;
    assert_int_equal(hs_executor_create(&rm->model, &layers, &xo, &xs, &err), 0);
    int32_t ids[60];
    struct hs_batch bt = three_seqs(ids);
    float ref[3 * 64];
    struct hs_exec_timing t;
    assert_int_equal(hs_executor_run(x1, 0, &bt, ref, &t, &err), 0);
    assert_true(t.wait_ns == 0); /* one engine: nothing to hold */

    /* two slots at once on the module split: the answers of one engine */
    struct pipe_run r[2] = {{.x = xm, .slot = 0, .rounds = 20, .b = &bt},
                            {.x = xm, .slot = 1, .rounds = 20, .b = &bt}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&th[k], NULL, pipe_thread, &r[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(r[k].st, HS_STATUS_OK);
        for (int i = 0; i < 3 * 64; i++) assert_true(fabsf(ref[i] - r[k].out[i]) <= 1e-6f);
    }

    /* engine a hangs 150 ms in each of its three stages (embed, layer 0's attention and FFN):
     * pipelined, the batch that comes second to a waits for the first to leave it; without the
     * pipeline both run on a at once and neither waits */
    for (int piped = 1; piped >= 0; piped--) {
        hs_engine_set_fault(a, &(struct hs_engine_fault){.hang_ms = 150});
        struct pipe_run h[2] = {{.x = piped ? xl : xs, .slot = 0, .rounds = 1, .b = &bt},
                                {.x = piped ? xl : xs, .slot = 1, .rounds = 1, .b = &bt}};
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&th[k], NULL, pipe_thread, &h[k]), 0);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        hs_engine_set_fault(a, NULL);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(h[k].st, HS_STATUS_OK);
            for (int i = 0; i < 3 * 64; i++) assert_true(fabsf(ref[i] - h[k].out[i]) <= 1e-6f);
        }
        int64_t most = h[0].wait_ns > h[1].wait_ns ? h[0].wait_ns : h[1].wait_ns;
        if (piped)
            assert_true(most >= 200000000); /* at least most of the other's 450 ms on a */
        else
            assert_true(h[0].wait_ns == 0 && h[1].wait_ns == 0);
    }

    /* the entry (hs_executor_gate): a gated slot's run starts on the first engine without
     * waiting; a refused batch and ungate give the entry back (else the next gate would block
     * for ever); no effect on an executor without a pipeline */
    assert_true(hs_executor_pipelined(xl) && !hs_executor_pipelined(xs) &&
                !hs_executor_pipelined(x1));
    hs_executor_gate(xl, 0);
    assert_int_equal(hs_executor_run(xl, 0, &bt, r[0].out, &t, &err), 0);
    assert_true(t.wait_ns == 0);
    hs_executor_gate(xl, 1);
    struct hs_batch too_big = bt;
    too_big.n_seqs = 4;
    assert_int_equal(hs_executor_run(xl, 1, &too_big, r[0].out, &t, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    hs_executor_gate(xl, 0);
    hs_executor_ungate(xl, 0);
    hs_executor_gate(xl, 1);
    assert_int_equal(hs_executor_run(xl, 1, &bt, r[1].out, &t, &err), 0);
    for (int i = 0; i < 3 * 64; i++) assert_true(fabsf(ref[i] - r[1].out[i]) <= 1e-6f);
    hs_executor_gate(xs, 0); /* no pipeline: nothing held */
    assert_int_equal(hs_executor_run(xs, 1, &bt, r[1].out, &t, &err), 0);
    hs_executor_free(x1);
    hs_executor_free(xm);
    hs_executor_free(xl);
    hs_executor_free(xs);
    hs_engine_destroy(a);
    hs_engine_destroy(b);
    rand_model_free(rm);
}

struct pin_run {
    struct hs_executor *x;
    const struct hs_batch *b;
    float *out;
    hs_status st;
    cpu_set_t after;
};

static void *pin_run_main(void *arg)
{
    struct pin_run *p = arg;
    struct hs_error err = {0};
    p->st = hs_executor_run(p->x, 0, p->b, p->out, NULL, &err);
    CPU_ZERO(&p->after);
    pthread_getaffinity_np(pthread_self(), sizeof p->after, &p->after);
    return NULL;
}

static void core_set_pins_the_team(void **state)
{
    (void)state;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    struct hs_engine_opts bad = {.threads = 1, .n_cores = 1, .cores = {100000}};
    assert_int_equal(hs_engine_cpu_create(&bad, &e, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "core"));
    cpu_set_t before;
    assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
    int core = -1;
    for (int i = 0; i < CPU_SETSIZE && core < 0; i++)
        if (CPU_ISSET(i, &before)) core = i;
    struct hs_engine_opts opts = {.threads = 1, .n_cores = 1, .cores = {core}};
    assert_int_equal(hs_engine_cpu_create(&opts, &e, &err), 0);
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    assert_int_equal(caps.threads, 1);
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    assert_int_equal(hs_executor_create(&rm->model, &plan,
                                        &(struct hs_executor_opts){.batch_max = 1, .seq_max = 8},
                                        &x, &err),
                     0);
    int32_t ids[4] = {1, 2, 3, 4}, off[2] = {0, 4}, len[1] = {4};
    float out[32];
    struct hs_batch b = {
        .n_seqs = 1, .seq_max = 8, .n_tokens = 4, .ids = ids, .lengths = len, .offsets = off};
    assert_int_equal(hs_executor_run(x, 0, &b, out, NULL, &err), 0);
    cpu_set_t after; /* the process's first thread keeps its cores: later threads inherit them */
    assert_int_equal(sched_getaffinity(0, sizeof after, &after), 0);
    assert_true(CPU_EQUAL(&after, &before));
    /* any other calling thread (a batcher) now runs on the engine's core only */
    struct pin_run pr = {.x = x, .b = &b, .out = out};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pin_run_main, &pr), 0);
    pthread_join(th, NULL);
    assert_int_equal(pr.st, 0);
    assert_int_equal(CPU_COUNT(&pr.after), 1);
    assert_true(CPU_ISSET(core, &pr.after));
    hs_executor_free(x);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

/* A model on two CPU engines holds each stage's weights once per dtype: the second engine's
 * prepare returns the first's preparation, and it lives until both released it. */
/* An engine's team flushes denormals (core/threads.h), the master and every worker, though the
 * thread that runs the batch did not ask for it and its pooled worker was started without. */
static void engine_team_flushes_denormals(void **state)
{
    (void)state;
#if defined(__x86_64__)
    const unsigned csr = _mm_getcsr(), bits = 0x8040u;
    /* a pooled worker without them first (the master's team of 2, which the engine reuses) */
#pragma omp parallel num_threads(2)
    _mm_setcsr(_mm_getcsr() & ~bits);
    struct rand_model *rm = rand_model_new(32, 1, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    int lens[] = {5, 9};
    check_model(rm, lens, 2, 2);
    rand_model_free(rm);
    assert_int_equal(_mm_getcsr() & bits, bits);
    /* the master clears its own again, so a worker started now would inherit none: the team's
     * pooled worker still has them */
    _mm_setcsr(csr & ~bits);
    unsigned worker = 0;
#pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) worker = _mm_getcsr() & bits;
    }
    _mm_setcsr(csr);
    assert_int_equal(worker, bits);
#else
    skip();
#endif
}

static void preparations_are_shared_between_engines(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F16);
    struct hs_error err = {0};
    hs_engine_t a = NULL, b = NULL;
    two_engines(&a, &b);
    int alive0 = 0, alive = 0;
    int64_t hits0 = 0, hits = 0;
    hs_engine_prep_counts(&alive0, &hits0);
    const struct hs_stage *st = &rm->model.stages[1];
    void *pa = NULL, *pb = NULL, *pc = NULL;
    assert_int_equal(hs_engine_stage_prepare(a, st, HS_DTYPE_F32, &pa, &err), 0);
    assert_int_equal(hs_engine_stage_prepare(b, st, HS_DTYPE_F32, &pb, &err), 0);
    assert_ptr_equal(pa, pb);
    hs_engine_prep_counts(&alive, &hits);
    assert_int_equal(alive, alive0 + 1);
    assert_int_equal(hits, hits0 + 1);
    /* another dtype is another preparation */
    struct hs_engine_caps caps;
    hs_engine_caps(a, &caps);
    if (caps.dtypes & (1u << HS_DTYPE_BF16)) {
        assert_int_equal(hs_engine_stage_prepare(b, st, HS_DTYPE_BF16, &pc, &err), 0);
        assert_ptr_not_equal(pc, pa);
        hs_engine_stage_release(b, pc);
    }
    hs_engine_stage_release(a, pa);
    hs_engine_prep_counts(&alive, NULL);
    assert_int_equal(alive, alive0 + 1); /* b still holds it */
    hs_engine_destroy(a);                /* its creator may go first */
    hs_engine_stage_release(b, pb);
    hs_engine_prep_counts(&alive, NULL);
    assert_int_equal(alive, alive0);
    hs_engine_destroy(b);
    rand_model_free(rm);
}

/* A workspace made for f32 stages holds no int8 / bf16 buffers; a reduced-precision stage run
 * on it is refused with a reason, not run on missing memory. */
static void f32_workspace_refuses_reduced_stages(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = 1}, &e, &err), 0);
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    if (!(caps.dtypes & (1u << HS_DTYPE_BF16))) {
        hs_engine_destroy(e);
        rand_model_free(rm);
        skip();
    }
    struct hs_ws_spec spec = {.batch_max = 1,
                              .tokens_max = 8,
                              .seq_max = 8,
                              .dims = &rm->model.config.dims,
                              .dtypes = 1u << HS_DTYPE_F32};
    void *ws = NULL, *p_embed = NULL, *p_attn = NULL;
    assert_int_equal(hs_engine_ws_create(e, &spec, &ws, &err), 0);
    assert_int_equal(hs_engine_stage_prepare(e, &rm->model.stages[0], HS_DTYPE_F32, &p_embed, &err),
                     0);
    assert_int_equal(hs_engine_stage_prepare(e, &rm->model.stages[1], HS_DTYPE_BF16, &p_attn, &err),
                     0);
    int32_t ids[4] = {1, 2, 3, 4}, off[2] = {0, 4}, len[1] = {4};
    struct hs_batch b = {
        .n_seqs = 1, .seq_max = 8, .n_tokens = 4, .ids = ids, .lengths = len, .offsets = off};
    assert_int_equal(hs_engine_batch_begin(e, ws, &b, &err), 0);
    assert_int_equal(hs_engine_run_stage(e, ws, &rm->model.stages[0], p_embed, &err), 0);
    assert_int_equal(hs_engine_run_stage(e, ws, &rm->model.stages[1], p_attn, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "f32 only"));
    hs_engine_stage_release(e, p_embed);
    hs_engine_stage_release(e, p_attn);
    hs_engine_ws_destroy(e, ws);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

/* The first two cores this process may use; false (the test skipped, saying why) without two. */
static bool first_two_cores(int cores[2], const char *what)
{
    cpu_set_t avail;
    assert_int_equal(sched_getaffinity(0, sizeof avail, &avail), 0);
    int n = 0;
    for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
        if (CPU_ISSET(i, &avail)) cores[n++] = i;
    if (n < 2) printf("# skipped: %s needs two cores, this process may use %d\n", what, n);
    return n == 2;
}

/* engines[].borrow_cores: an engine pinned to core c1 that may borrow core c0 runs its stages on
 * both while c0's own engine is idle, gets the same numbers as without borrowing (f32, bf16,
 * int8; a batch of several sequences and one alone), and gives the core back at each stage's
 * end: the owner's batches, run from another thread meanwhile, answer as they do alone. */
struct owner_run {
    struct hs_executor *x;
    const struct hs_batch *b;
    const float *want;
    int rounds, bad;
    hs_status st;
};

static void *owner_thread(void *p)
{
    struct owner_run *r = p;
    struct hs_error err = {0};
    float out[64];
    for (int i = 0; i < r->rounds && !r->st; i++) {
        r->st = hs_executor_run(r->x, 0, r->b, out, NULL, &err);
        for (int j = 0; j < 64 && !r->st; j++) r->bad += out[j] != r->want[j];
    }
    return NULL;
}

static void borrowed_cores_are_lent_and_returned(void **state)
{
    (void)state;
    int cores[2];
    if (!first_two_cores(cores, "borrowing")) return;
    struct hs_error err = {0};
    hs_engine_t owner = NULL, borrower = NULL, alone = NULL, bad = NULL;
    struct hs_engine_opts oo = {.name = "owner", .threads = 1, .n_cores = 1, .cores = {cores[0]}};
    struct hs_engine_opts bo = {.name = "borrower",
                                .threads = 1,
                                .n_cores = 1,
                                .cores = {cores[1]},
                                .n_borrow_cores = 1,
                                .borrow_cores = {cores[0]}};
    struct hs_engine_opts ao = {.name = "alone", .threads = 1, .n_cores = 1, .cores = {cores[1]}};
    /* refused: borrowing its own core, borrowing while unpinned */
    struct hs_engine_opts own = bo;
    own.borrow_cores[0] = cores[1];
    assert_int_equal(hs_engine_cpu_create(&own, &bad, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "own"));
    struct hs_engine_opts unpinned = bo;
    unpinned.n_cores = 0;
    assert_int_equal(hs_engine_cpu_create(&unpinned, &bad, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "pinned"));
    assert_int_equal(hs_engine_cpu_create(&oo, &owner, &err), 0);
    assert_int_equal(hs_engine_cpu_create(&bo, &borrower, &err), 0);
    assert_int_equal(hs_engine_cpu_create(&ao, &alone, &err), 0);
    struct hs_engine_caps caps;
    hs_engine_caps(alone, &caps);
    cpu_set_t before;
    sched_getaffinity(0, sizeof before, &before);

    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    const enum hs_dtype dts[] = {HS_DTYPE_F32, HS_DTYPE_BF16, HS_DTYPE_I8};
    for (int d = 0; d < 3; d++) {
        if (!(caps.dtypes & (1u << dts[d]))) {
            printf("# %s: skipped, this CPU does not compute in it\n",
                   hs_compute_dtype_name(dts[d]));
            continue;
        }
        struct hs_placement pb, pa, po;
        hs_placement_single(&rm->model, borrower, &pb);
        hs_placement_single(&rm->model, alone, &pa);
        hs_placement_single(&rm->model, owner, &po);
        struct hs_executor_opts xo = {.batch_max = 3, .seq_max = 64, .dtype = dts[d]};
        struct hs_executor *xb = NULL, *xa = NULL, *xo1 = NULL;
        assert_int_equal(hs_executor_create(&rm->model, &pb, &xo, &xb, &err), 0);
        assert_int_equal(hs_executor_create(&rm->model, &pa, &xo, &xa, &err), 0);
        assert_int_equal(hs_executor_create(&rm->model, &po, &xo, &xo1, &err), 0);
        int32_t ids[60];
        struct hs_batch three = three_seqs(ids);
        struct hs_batch one = one_seq(ids);
        const struct hs_batch *bs[2] = {&three, &one};
        for (int k = 0; k < 2; k++) {
            float want[3 * 64], got[3 * 64];
            const int m = bs[k]->n_seqs * 64;
            struct hs_cpu_lease_stats s0 = {0}, s1 = {0};
            assert_true(hs_engine_cpu_lease_stats(cores[0], &s0));
            assert_int_equal(hs_executor_run(xa, 0, bs[k], want, NULL, &err), 0);
            usleep(1000); /* the owner idle past HS_CPU_LEASE_IDLE_NS */
            assert_int_equal(hs_executor_run(xb, 0, bs[k], got, NULL, &err), 0);
            assert_true(hs_engine_cpu_lease_stats(cores[0], &s1));
            assert_true(s1.lent_stages > s0.lent_stages);
            for (int i = 0; i < m; i++)
                if (fabsf(got[i] - want[i]) > 1e-6f)
                    fail_msg("%s, %d sequence(s): borrowing changed value %d: %g vs %g",
                             hs_compute_dtype_name(dts[d]), bs[k]->n_seqs, i, got[i], want[i]);
        }
        /* rounds of one sequence each (a layer stage lent per round): the same values, more
         * loans */
        {
            float want[3 * 64], got1[3 * 64], got2[3 * 64];
            struct hs_cpu_lease_stats a0, a1, a2;
            assert_int_equal(hs_executor_run(xa, 0, &three, want, NULL, &err), 0);
            usleep(1000);
            hs_engine_cpu_lease_stats(cores[0], &a0);
            assert_int_equal(hs_executor_run(xb, 0, &three, got1, NULL, &err), 0);
            hs_engine_cpu_lease_stats(cores[0], &a1);
            hs__cpu_set_round_flop(1);
            usleep(1000);
            assert_int_equal(hs_executor_run(xb, 0, &three, got2, NULL, &err), 0);
            hs_engine_cpu_lease_stats(cores[0], &a2);
            hs__cpu_set_round_flop(0);
            /* 4 layers x 2 stages: 2 more rounds each, unless the owner was busy at one */
            assert_true(a2.lent_stages - a1.lent_stages > a1.lent_stages - a0.lent_stages);
            for (int i = 0; i < 3 * 64; i++)
                if (fabsf(got1[i] - want[i]) > 1e-6f || fabsf(got2[i] - want[i]) > 1e-6f)
                    fail_msg("%s: rounds changed value %d: %g / %g vs %g",
                             hs_compute_dtype_name(dts[d]), i, got1[i], got2[i], want[i]);
        }
        /* the owner's batches from another thread while the borrower runs: both unchanged */
        float own_want[64];
        assert_int_equal(hs_executor_run(xo1, 0, &one, own_want, NULL, &err), 0);
        float three_want[3 * 64], got[3 * 64];
        assert_int_equal(hs_executor_run(xa, 0, &three, three_want, NULL, &err), 0);
        struct owner_run orun = {.x = xo1, .b = &one, .want = own_want, .rounds = 40};
        pthread_t th;
        pthread_create(&th, NULL, owner_thread, &orun);
        int diff = 0;
        for (int r = 0; r < 20; r++) {
            assert_int_equal(hs_executor_run(xb, 0, &three, got, NULL, &err), 0);
            for (int i = 0; i < 3 * 64; i++) diff += fabsf(got[i] - three_want[i]) > 1e-6f;
        }
        pthread_join(th, NULL);
        assert_int_equal(orun.st, 0);
        assert_int_equal(orun.bad, 0);
        assert_int_equal(diff, 0);
        struct hs_cpu_lease_stats s;
        hs_engine_cpu_lease_stats(cores[0], &s);
        printf("# %s: core %d lent for %lld stages (%.1f ms); the owner waited %lld times, "
               "longest %.3f ms\n",
               hs_compute_dtype_name(dts[d]), cores[0], (long long)s.lent_stages,
               (double)s.lent_ns / 1e6, (long long)s.waits, (double)s.wait_max_ns / 1e6);
        hs_executor_free(xb);
        hs_executor_free(xa);
        hs_executor_free(xo1);
    }
    sched_setaffinity(0, sizeof before, &before);
    rand_model_free(rm);
    hs_engine_destroy(owner);
    hs_engine_destroy(borrower);
    hs_engine_destroy(alone);
}

/* engines[].borrow_preempt: a latency engine on core c0 that preempts core c1 gets c1 while
 * c1's own engine runs a long batch (that engine yields at its round boundaries), and both
 * answer as they do alone, f32 and int8 where the CPU has it; /metrics' counters count the
 * yields and the loans. */
struct batch_loop {
    struct hs_executor *x;
    const struct hs_batch *b;
    const float *want;
    atomic_int *stop;
    int runs, bad;
    hs_status st;
};

static void *batch_loop_thread(void *p)
{
    struct batch_loop *r = p;
    struct hs_error err = {0};
    float out[3 * 64];
    const int m = r->b->n_seqs * 64;
    while (!atomic_load(r->stop) && !r->st) {
        r->st = hs_executor_run(r->x, 0, r->b, out, NULL, &err);
        for (int j = 0; j < m && !r->st; j++) r->bad += fabsf(out[j] - r->want[j]) > 1e-6f;
        r->runs++;
    }
    return NULL;
}

static void preempting_borrower_takes_a_busy_core(void **state)
{
    (void)state;
    int cores[2];
    if (!first_two_cores(cores, "preempting")) return;
    struct hs_error err = {0};
    hs_engine_t batch = NULL, latency = NULL, alone = NULL;
    struct hs_engine_opts bo = {.name = "batch", .threads = 1, .n_cores = 1, .cores = {cores[1]}};
    struct hs_engine_opts lo = {.name = "latency",
                                .threads = 1,
                                .n_cores = 1,
                                .cores = {cores[0]},
                                .n_borrow_cores = 1,
                                .borrow_cores = {cores[1]},
                                .borrow_preempt = true};
    struct hs_engine_opts ao = {.name = "alone", .threads = 1, .n_cores = 1, .cores = {cores[0]}};
    assert_int_equal(hs_engine_cpu_create(&bo, &batch, &err), 0);
    assert_int_equal(hs_engine_cpu_create(&lo, &latency, &err), 0);
    assert_int_equal(hs_engine_cpu_create(&ao, &alone, &err), 0);
    assert_true(hs__cpu_lease_preempted(cores[1]));
    struct hs_engine_caps caps;
    hs_engine_caps(alone, &caps);
    cpu_set_t before;
    sched_getaffinity(0, sizeof before, &before);
    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    const enum hs_dtype dts[] = {HS_DTYPE_F32, HS_DTYPE_I8};
    hs__cpu_set_round_flop(1); /* the batch engine's stages in rounds of one sequence */
    for (int d = 0; d < 2; d++) {
        if (!(caps.dtypes & (1u << dts[d]))) continue;
        struct hs_placement pb, pl, pa;
        hs_placement_single(&rm->model, batch, &pb);
        hs_placement_single(&rm->model, latency, &pl);
        hs_placement_single(&rm->model, alone, &pa);
        struct hs_executor_opts xo = {.batch_max = 3, .seq_max = 64, .dtype = dts[d]};
        struct hs_executor *xb = NULL, *xl = NULL, *xa = NULL;
        assert_int_equal(hs_executor_create(&rm->model, &pb, &xo, &xb, &err), 0);
        assert_int_equal(hs_executor_create(&rm->model, &pl, &xo, &xl, &err), 0);
        assert_int_equal(hs_executor_create(&rm->model, &pa, &xo, &xa, &err), 0);
        int32_t ids[60];
        struct hs_batch three = three_seqs(ids);
        struct hs_batch one = one_seq(ids);
        float three_want[3 * 64], one_want[64], got[64];
        assert_int_equal(hs_executor_run(xa, 0, &three, three_want, NULL, &err), 0);
        assert_int_equal(hs_executor_run(xa, 0, &one, one_want, NULL, &err), 0);
        struct hs_cpu_lease_stats s0, s1;
        assert_true(hs_engine_cpu_lease_stats(cores[1], &s0));
        atomic_int stop = 0;
        struct batch_loop bl = {.x = xb, .b = &three, .want = three_want, .stop = &stop};
        pthread_t th;
        pthread_create(&th, NULL, batch_loop_thread, &bl);
        int diff = 0, requests = 0;
        /* bursts of 30 requests until one of them was lent the core, at most 3: on a machine
         * whose other work holds the cores, the batch engine's thread can be descheduled
         * mid-round for a whole burst, and a preemptor never waits for a running owner */
        for (int burst = 0; burst < 3; burst++) {
            for (int r = 0; r < 30; r++, requests++) {
                assert_int_equal(hs_executor_run(xl, 0, &one, got, NULL, &err), 0);
                for (int i = 0; i < 64; i++) diff += fabsf(got[i] - one_want[i]) > 1e-6f;
                usleep(500); /* the batch lane runs alone between requests */
            }
            assert_true(hs_engine_cpu_lease_stats(cores[1], &s1));
            if (s1.claims_lent > s0.claims_lent && s1.yields > s0.yields) break;
        }
        atomic_store(&stop, 1);
        pthread_join(th, NULL);
        assert_int_equal(bl.st, 0);
        assert_int_equal(bl.bad, 0);
        assert_int_equal(diff, 0);
        assert_true(hs_engine_cpu_lease_stats(cores[1], &s1));
        /* every stage of the latency engine claimed core c1; the batch engine yielded, and the
         * latency engine ran stages on the core it yielded */
        assert_true(s1.claims - s0.claims >= requests);
        assert_true(s1.claims_lent > s0.claims_lent);
        assert_true(s1.yields > s0.yields);
        printf("# %s: %d batches ran meanwhile; %lld of %lld latency stages got core %d; the "
               "batch engine yielded %lld times, longest %.3f ms\n",
               hs_compute_dtype_name(dts[d]), bl.runs, (long long)(s1.claims_lent - s0.claims_lent),
               (long long)(s1.claims - s0.claims), cores[1], (long long)(s1.yields - s0.yields),
               (double)s1.yield_max_ns / 1e6);
        hs_executor_free(xb);
        hs_executor_free(xl);
        hs_executor_free(xa);
    }
    hs__cpu_set_round_flop(0);
    sched_setaffinity(0, sizeof before, &before);
    rand_model_free(rm);
    hs_engine_destroy(batch);
    hs_engine_destroy(latency);
    hs_engine_destroy(alone);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encoder_matches_reference_large_batch),
        cmocka_unit_test(int8_model_own_kernel_equals_onednn),
        cmocka_unit_test(int8_batch_in_parts_equals_alone),
        cmocka_unit_test(encoder_matches_reference_f32_mean),
        cmocka_unit_test(encoder_matches_reference_f16_cls),
        cmocka_unit_test(encoder_matches_reference_head64),
        cmocka_unit_test(encoder_matches_reference_bf16),
        cmocka_unit_test(bad_batches_are_rejected),
        cmocka_unit_test(layer_split_equals_single_engine),
        cmocka_unit_test(pipelined_split_holds_each_engine),
        cmocka_unit_test(core_set_pins_the_team),
        cmocka_unit_test(engine_team_flushes_denormals),
        cmocka_unit_test(preparations_are_shared_between_engines),
        cmocka_unit_test(f32_workspace_refuses_reduced_stages),
        cmocka_unit_test(borrowed_cores_are_lent_and_returned),
        cmocka_unit_test(preempting_borrower_takes_a_busy_core),
    };
    return cmocka_run_group_tests_name("cpu_engine", tests, NULL, NULL);
}
