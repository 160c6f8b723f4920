/* CPU engine: kernels and whole stages against a naive double-precision reference encoder on
 * random weights (several shapes, F32/F16/BF16 weights, mean and CLS pooling), batch
 * invariance, input validation and injected faults. */
#include "testutil.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/engine.h"
#include "model/executor.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

/* ---- a random encoder held as fp32 arrays plus a tensor view in the chosen dtype ---- */
struct rand_model {
    struct hs_model model;
    struct hs_encoder_dims dims;
    float *f32[64 * HS_W_COUNT];   /* fp32 values per (stage, role), the reference reads these */
    void *stored[64 * HS_W_COUNT]; /* what the tensor points to */
};

static void set_w(struct rand_model *rm, int si, int role, int64_t rows, int64_t cols, float scale,
                  float offset, enum hs_dtype dt)
{
    int64_t n = rows * cols;
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = offset + scale * frand();
    void *st = f;
    if (dt != HS_DTYPE_F32) {
        uint16_t *h = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            if (dt == HS_DTYPE_F16) {
                h[i] = hs_fp32_to_fp16(f[i]);
                f[i] = hs_fp16_to_fp32(h[i]);
            } else {
                uint32_t b;
                memcpy(&b, &f[i], 4);
                h[i] = (uint16_t)(b >> 16);
                f[i] = hs_bf16_to_fp32(h[i]);
            }
        }
        st = h;
    }
    rm->f32[si * HS_W_COUNT + role] = f;
    rm->stored[si * HS_W_COUNT + role] = st;
    struct hs_tensor *t = &rm->model.stages[si].w[role];
    t->dtype = dt;
    t->ndim = cols > 1 ? 2 : 1;
    t->shape[0] = cols > 1 ? rows : n;
    t->shape[1] = cols;
    t->data = st;
    t->bytes = (size_t)n * hs_dtype_size(dt);
}

static struct rand_model *rand_model_new(int hidden, int heads, int inter, int layers,
                                         enum hs_pool_mode pool, enum hs_dtype dt)
{
    struct rand_model *rm = calloc(1, sizeof *rm);
    struct hs_encoder_dims *d = &rm->model.config.dims;
    *d = (struct hs_encoder_dims){.hidden = hidden,
                                  .heads = heads,
                                  .head_dim = hidden / heads,
                                  .intermediate = inter,
                                  .layers = layers,
                                  .vocab = 97,
                                  .max_positions = 160,
                                  .type_vocab = 2,
                                  .ln_eps = 1e-12f,
                                  .act = HS_ACT_GELU_ERF,
                                  .pool = pool,
                                  .normalize = true};
    rm->model.config.max_seq_len = 160;
    rm->model.name = "random";
    rm->model.n_stages = 1 + 2 * layers + 2;
    rm->model.stages = calloc((size_t)rm->model.n_stages, sizeof(struct hs_stage));
    for (int i = 0; i < rm->model.n_stages; i++) {
        struct hs_stage *st = &rm->model.stages[i];
        st->dims = d;
        st->layer = -1;
        if (i == 0) {
            st->kind = HS_STAGE_EMBED;
            set_w(rm, i, HS_W_WORD_EMB, d->vocab, hidden, 1.0f, 0, dt);
            set_w(rm, i, HS_W_POS_EMB, d->max_positions, hidden, 0.5f, 0, dt);
            set_w(rm, i, HS_W_TYPE_EMB, 2, hidden, 0.5f, 0, dt);
            set_w(rm, i, HS_W_EMB_LN_G, hidden, 1, 0.2f, 1.0f, dt);
            set_w(rm, i, HS_W_EMB_LN_B, hidden, 1, 0.1f, 0, dt);
        } else if (i <= 2 * layers) {
            st->layer = (i - 1) / 2;
            float ws = 1.0f / sqrtf((float)hidden);
            if (i % 2) {
                st->kind = HS_STAGE_ATTN;
                set_w(rm, i, HS_W_Q, hidden, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_Q_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_K, hidden, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_K_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_V, hidden, hidden, ws, 0, dt);
                set_w(rm, i, HS_W_V_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_ATTN_OUT, hidden, hidden, ws, 0, dt);
                set_w(rm, i, HS_W_ATTN_OUT_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_ATTN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                set_w(rm, i, HS_W_ATTN_LN_B, hidden, 1, 0.1f, 0, dt);
            } else {
                st->kind = HS_STAGE_FFN;
                set_w(rm, i, HS_W_FFN_IN, inter, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_FFN_IN_B, inter, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_OUT, hidden, inter, 1.0f / sqrtf((float)inter), 0, dt);
                set_w(rm, i, HS_W_FFN_OUT_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                set_w(rm, i, HS_W_FFN_LN_B, hidden, 1, 0.1f, 0, dt);
            }
        } else if (i == 2 * layers + 1) {
            st->kind = HS_STAGE_POOL;
        } else {
            st->kind = HS_STAGE_NORMALIZE;
        }
        snprintf(st->name, sizeof st->name, "%s%d", hs_stage_kind_name(st->kind), st->layer);
    }
    return rm;
}

static void rand_model_free(struct rand_model *rm)
{
    for (int i = 0; i < 64 * HS_W_COUNT; i++) {
        if (rm->stored[i] != rm->f32[i]) free(rm->stored[i]);
        free(rm->f32[i]);
    }
    free(rm->model.stages);
    free(rm);
}

/* ---- naive reference in double precision ---- */
static void ref_ln(double *x, const float *g, const float *b, int n, double eps)
{
    double mean = 0, var = 0;
    for (int j = 0; j < n; j++) mean += x[j];
    mean /= n;
    for (int j = 0; j < n; j++) var += (x[j] - mean) * (x[j] - mean);
    var /= n;
    for (int j = 0; j < n; j++) x[j] = (x[j] - mean) / sqrt(var + eps) * g[j] + b[j];
}

static void ref_encode(struct rand_model *rm, const int32_t *ids, int len, double *out)
{
    const struct hs_encoder_dims *d = &rm->model.config.dims;
    const int H = d->hidden, I = d->intermediate, D = d->head_dim;
#define W(si, role) rm->f32[(si)*HS_W_COUNT + (role)]
    double *x = calloc((size_t)len * H, sizeof(double));
    double *q = calloc((size_t)len * H, sizeof(double)),
           *k = calloc((size_t)len * H, sizeof(double));
    double *v = calloc((size_t)len * H, sizeof(double)),
           *c = calloc((size_t)len * H, sizeof(double));
    double *f = calloc((size_t)len * I, sizeof(double)), *s = calloc((size_t)len, sizeof(double));
    for (int t = 0; t < len; t++) {
        for (int j = 0; j < H; j++)
            x[t * H + j] = (double)W(0, HS_W_WORD_EMB)[ids[t] * H + j] +
                           W(0, HS_W_POS_EMB)[t * H + j] + W(0, HS_W_TYPE_EMB)[j];
        ref_ln(x + t * H, W(0, HS_W_EMB_LN_G), W(0, HS_W_EMB_LN_B), H, d->ln_eps);
    }
    for (int l = 0; l < d->layers; l++) {
        int a = 1 + 2 * l, ff = 2 + 2 * l;
        for (int t = 0; t < len; t++)
            for (int o = 0; o < H; o++) {
                double sq = W(a, HS_W_Q_B)[o], sk = W(a, HS_W_K_B)[o], sv = W(a, HS_W_V_B)[o];
                for (int i = 0; i < H; i++) {
                    sq += x[t * H + i] * W(a, HS_W_Q)[o * H + i];
                    sk += x[t * H + i] * W(a, HS_W_K)[o * H + i];
                    sv += x[t * H + i] * W(a, HS_W_V)[o * H + i];
                }
                q[t * H + o] = sq, k[t * H + o] = sk, v[t * H + o] = sv;
            }
        for (int h = 0; h < d->heads; h++)
            for (int i = 0; i < len; i++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    double dot = 0;
                    for (int e = 0; e < D; e++) dot += q[i * H + h * D + e] * k[j * H + h * D + e];
                    s[j] = dot / sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < len; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < len; j++) acc += s[j] / sum * v[j * H + h * D + e];
                    c[i * H + h * D + e] = acc;
                }
            }
        for (int t = 0; t < len; t++) {
            double row[1024];
            for (int o = 0; o < H; o++) {
                double acc = W(a, HS_W_ATTN_OUT_B)[o];
                for (int i = 0; i < H; i++) acc += c[t * H + i] * W(a, HS_W_ATTN_OUT)[o * H + i];
                row[o] = x[t * H + o] + acc;
            }
            ref_ln(row, W(a, HS_W_ATTN_LN_G), W(a, HS_W_ATTN_LN_B), H, d->ln_eps);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
        for (int t = 0; t < len; t++) {
            for (int o = 0; o < I; o++) {
                double acc = W(ff, HS_W_FFN_IN_B)[o];
                for (int i = 0; i < H; i++) acc += x[t * H + i] * W(ff, HS_W_FFN_IN)[o * H + i];
                f[t * I + o] = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
            }
            double row[1024];
            for (int o = 0; o < H; o++) {
                double acc = W(ff, HS_W_FFN_OUT_B)[o];
                for (int i = 0; i < I; i++) acc += f[t * I + i] * W(ff, HS_W_FFN_OUT)[o * I + i];
                row[o] = x[t * H + o] + acc;
            }
            ref_ln(row, W(ff, HS_W_FFN_LN_G), W(ff, HS_W_FFN_LN_B), H, d->ln_eps);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
    }
#undef W
    double norm = 0;
    for (int j = 0; j < H; j++) {
        double acc = 0;
        if (d->pool == HS_POOL_CLS)
            acc = x[j];
        else {
            for (int t = 0; t < len; t++) acc += x[t * H + j];
            acc /= len;
        }
        out[j] = acc;
        norm += acc * acc;
    }
    for (int j = 0; j < H; j++) out[j] /= sqrt(norm);
    free(x), free(q), free(k), free(v), free(c), free(f), free(s);
}

static double cosine_fd(const float *a, const double *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* Runs lens[] random sequences as one batch and each alone; checks both against the reference
 * and against each other. */
static void check_model(struct rand_model *rm, const int *lens, int n, int threads)
{
    const int H = rm->model.config.dims.hidden;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = threads}, &e, &err),
                     0);
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
    for (int t = 0; t < total; t++) ids[t] = (int32_t)(rng_state % 97), frand();
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
        ref_encode(rm, ids + offsets[i], lens[i], ref);
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

static void kernels_gelu_and_exp(void **state)
{
    (void)state;
    float xs[2001];
    for (int i = 0; i < 2001; i++) xs[i] = -10.0f + 0.01f * (float)i;
    float y[2001];
    memcpy(y, xs, sizeof y);
    hs__cpu_activation(y, 2001, HS_ACT_GELU_ERF);
    for (int i = 0; i < 2001; i++) {
        double r = 0.5 * xs[i] * (1.0 + erf(xs[i] / sqrt(2.0)));
        assert_true(fabs(y[i] - r) <= 2e-6 * fmax(1.0, fabs(r)));
    }
    memcpy(y, xs, sizeof y);
    hs__cpu_activation(y, 2001, HS_ACT_GELU_TANH);
    for (int i = 0; i < 2001; i++) {
        double v = xs[i];
        double r = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        assert_true(fabs(y[i] - r) <= 2e-6 * fmax(1.0, fabs(r)));
    }
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

static void layer_split_equals_single_engine(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(64, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t a = NULL, b = NULL;
    assert_int_equal(
        hs_engine_cpu_create(&(struct hs_engine_opts){.name = "a", .threads = 1}, &a, &err), 0);
    assert_int_equal(
        hs_engine_cpu_create(&(struct hs_engine_opts){.name = "b", .threads = 1}, &b, &err), 0);
    struct hs_placement single, split;
    hs_placement_single(&rm->model, a, &single);
    hs_placement_layers(&rm->model, a, 2, b, &split);
    split.engine[rm->model.n_stages - 1] = a; /* normalize back on a: a second boundary */
    struct hs_executor *x1 = NULL, *x2 = NULL;
    struct hs_executor_opts xo = {.batch_max = 3, .seq_max = 64};
    assert_int_equal(hs_executor_create(&rm->model, &single, &xo, &x1, &err), 0);
    assert_int_equal(hs_executor_create(&rm->model, &split, &xo, &x2, &err), 0);
    int32_t ids[60], off[4] = {0, 20, 45, 60}, len[3] = {20, 25, 15};
    for (int i = 0; i < 60; i++) ids[i] = (i * 7) % 97;
    struct hs_batch bt = {
        .n_seqs = 3, .seq_max = 64, .n_tokens = 60, .ids = ids, .lengths = len, .offsets = off};
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
    cpu_set_t after; /* the calling thread now runs on the engine's core only */
    assert_int_equal(sched_getaffinity(0, sizeof after, &after), 0);
    assert_int_equal(CPU_COUNT(&after), 1);
    assert_true(CPU_ISSET(core, &after));
    sched_setaffinity(0, sizeof before, &before);
    hs_executor_free(x);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_gelu_and_exp),
        cmocka_unit_test(encoder_matches_reference_f32_mean),
        cmocka_unit_test(encoder_matches_reference_f16_cls),
        cmocka_unit_test(encoder_matches_reference_head64),
        cmocka_unit_test(encoder_matches_reference_bf16),
        cmocka_unit_test(bad_batches_are_rejected),
        cmocka_unit_test(layer_split_equals_single_engine),
        cmocka_unit_test(core_set_pins_the_team),
    };
    return cmocka_run_group_tests_name("cpu_engine", tests, NULL, NULL);
}
