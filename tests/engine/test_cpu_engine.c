/* CPU engine: kernels and whole stages against a naive double-precision reference encoder on
 * random weights (several shapes, F32/F16/BF16 weights, mean and CLS pooling), batch
 * invariance, input validation and injected faults. */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/lease.h"
#include "engine/cpu/qlinear.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "refmodel.h"

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

/* The vector math at every width this CPU has (SSE2, AVX2, AVX-512), against libm in double:
 * each activation over row lengths that end inside a vector and on its edge, and the softmax
 * numerators and their sum. */
/* The packed small-M GEMM against a double-precision reference: every tail (rows not a
 * multiple of the micro-kernel's, columns not of the panel's), with and without bias and
 * activation, 1 and 2 threads; and a row's result does not depend on the rows around it. */
static void kernels_small_gemm_matches_reference(void **state)
{
    (void)state;
    if (!hs__cpu_small_gemm_available()) skip();
    static const int shapes[][3] = {{1, 24, 8}, {3, 37, 19},  {4, 48, 64},  {5, 100, 33},
                                    {9, 31, 7}, {16, 72, 40}, {19, 129, 50}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        float *x = malloc(sizeof(float) * (size_t)rows * k), *w = malloc(sizeof(float) * n * k);
        float *bias = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * (rows * n + 1));
        float *y1 = malloc(sizeof(float) * n), *pad = malloc(sizeof(float) * 2 * 8 * k);
        for (int i = 0; i < rows * k; i++) x[i] = (float)((i * 7919) % 201 - 100) / 50.0f;
        for (int i = 0; i < n * k; i++) w[i] = (float)((i * 104729) % 199 - 99) / 80.0f;
        for (int i = 0; i < n; i++) bias[i] = (float)(i % 13) - 6.0f;
        float *packed = hs__cpu_pack_weights(w, n, k);
        assert_non_null(packed);
        for (int threads = 1; threads <= 2; threads++)
            for (int var = 0; var < 2; var++) {
                const int act = var ? HS_ACT_RELU : -1;
                y[rows * n] = 4321.0f; /* past the output: must stay */
                hs__cpu_small_gemm(x, packed, var ? bias : NULL, y, rows, n, k, act, threads, pad);
                assert_true(y[rows * n] == 4321.0f);
                for (int r = 0; r < rows; r++) {
                    for (int j = 0; j < n; j++) {
                        double ref = var ? bias[j] : 0.0;
                        for (int kk = 0; kk < k; kk++)
                            ref += (double)x[(size_t)r * k + kk] * (double)w[(size_t)j * k + kk];
                        if (var && ref < 0) ref = 0;
                        if (!(fabs(y[(size_t)r * n + j] - ref) <= 1e-4 * fmax(1.0, fabs(ref))))
                            fail_msg("%dx%dx%d threads %d var %d: y[%d,%d] = %g, want %g", rows, n,
                                     k, threads, var, r, j, (double)y[(size_t)r * n + j], ref);
                    }
                    /* the same row alone: bit-equal */
                    hs__cpu_small_gemm(x + (size_t)r * k, packed, var ? bias : NULL, y1, 1, n, k,
                                       act, 1, pad);
                    assert_memory_equal(y1, y + (size_t)r * n, sizeof(float) * n);
                }
            }
        /* an activation in the kernel's epilogue: the same bits as the GEMM, then the row pass
         * (hs__cpu_activation at this CPU's width) */
        for (int act = HS_ACT_GELU_ERF; act <= HS_ACT_SILU; act++) {
            float *y2 = malloc(sizeof(float) * (size_t)rows * n);
            hs__cpu_small_gemm(x, packed, bias, y, rows, n, k, act, 2, pad);
            hs__cpu_small_gemm(x, packed, bias, y2, rows, n, k, -1, 2, pad);
            for (int r = 0; r < rows; r++)
                hs__cpu_activation(y2 + (size_t)r * n, n, (enum hs_act_fn)act);
            if (memcmp(y, y2, sizeof(float) * (size_t)rows * n))
                fail_msg("%dx%dx%d act %d: the fused activation differs from the row pass", rows, n,
                         k, act);
            free(y2);
        }
        hs_free_aligned(packed);
        free(x), free(w), free(bias), free(y), free(y1), free(pad);
    }
}

static void kernels_vmath_every_width(void **state)
{
    (void)state;
    static const int ns[] = {1, 3, 4, 5, 8, 15, 16, 17, 31, 33, 130, 2001};
    float xs[2002], y[2002]; /* one past the longest row, for the guard */
    for (int i = 0; i < 2002; i++) xs[i] = -10.0f + 0.0101f * (float)((i * 37) % 2001);
    const int best = hs__cpu_vmath_use(-1);
    for (int w = 0; w <= best; w++) {
        assert_int_equal(hs__cpu_vmath_use(w), w);
        /* GELU far out, where its erfc term's power overflows (no clamp): v itself for
         * positive v, a finite value below 1e-20 in size for negative (the clamped form gave
         * -1.5e22 at -1e38) */
        {
            static const float far[] = {12.0f, 17.0f, 17.5f, 20.0f, 1e6f, 1e38f};
            float g[2 * sizeof far / sizeof far[0]];
            const int nf = (int)(sizeof far / sizeof far[0]);
            for (int i = 0; i < nf; i++) g[i] = far[i], g[nf + i] = -far[i];
            hs__cpu_activation(g, 2 * nf, HS_ACT_GELU_ERF);
            for (int i = 0; i < nf; i++) {
                if (!(g[i] == far[i]) || !isfinite(g[nf + i]) || !(fabsf(g[nf + i]) < 1e-20f))
                    fail_msg("width %d: GELU(%g) = %g, GELU(%g) = %g", w, (double)far[i],
                             (double)g[i], -(double)far[i], (double)g[nf + i]);
            }
        }
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni];
            for (int act = HS_ACT_GELU_ERF; act <= HS_ACT_SILU; act++) {
                memcpy(y, xs, sizeof y);
                y[n] = 1234.5f; /* past the row: must stay */
                hs__cpu_activation(y, n, (enum hs_act_fn)act);
                assert_true(y[n] == 1234.5f);
                for (int i = 0; i < n; i++) {
                    const double v = xs[i];
                    double r = 0;
                    switch ((enum hs_act_fn)act) {
                    case HS_ACT_GELU_ERF:
                        r = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
                        break;
                    case HS_ACT_GELU_TANH:
                        r = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                        break;
                    case HS_ACT_RELU:
                        r = v > 0 ? v : 0;
                        break;
                    case HS_ACT_SILU:
                        r = v / (1.0 + exp(-v));
                        break;
                    }
                    if (!(fabs(y[i] - r) <= 2e-6 * fmax(1.0, fabs(r))))
                        fail_msg("width %d act %d n %d: f(%g) = %g, want %g", w, act, n, v,
                                 (double)y[i], r);
                }
            }
            /* exp(s - mx) and the sum, on scores in [-20, 0] around the max */
            const float mx = 3.0f;
            for (int i = 0; i < n; i++) y[i] = mx - 20.0f * (float)((i * 13) % 101) / 100.0f;
            y[n] = 1234.5f;
            const float sum = hs__cpu_exp_sub_sum(y, n, mx);
            assert_true(y[n] == 1234.5f);
            double want = 0.0;
            for (int i = 0; i < n; i++) {
                const double e = exp((double)(mx - 20.0f * (float)((i * 13) % 101) / 100.0f) - mx);
                want += e;
                assert_true(fabs(y[i] - e) <= 1e-6 * e);
            }
            assert_true(fabs(sum - want) <= 1e-5 * want);
        }
    }
    hs__cpu_vmath_use(-1);
}

/* Uniform in [-amp/2, amp/2), the same numbers for the same seed. */
static void fill_rand(float *v, size_t n, uint32_t seed, float amp)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = amp * ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
}

/* The AVX2 and AVX-512 attention kernels (each where the CPU has it) against attention in
 * double on random q | k | v rows: lengths that fill and leave part of their query and key
 * blocks (AVX2 6 x 16, AVX-512 4 x 64 and 16-key gathers), both head sizes, several heads side
 * by side (a wrong head offset shows), and a sequence that does not start at row 0. */
static void kernels_attention_match_reference(void **state)
{
    (void)state;
    __builtin_cpu_init();
    static const int lens[] = {1, 2, 5, 6, 7, 13, 16, 17, 33, 64, 65, 130};
    static const int ds[] = {32, 64};
    const int heads = 3;
    const struct {
        int (*run)(const float *, float *, int, int, int, int, int, float *);
        int present;
    } kernels[] = {
        {hs__cpu_attn_avx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
        {hs__cpu_attn_avx512, __builtin_cpu_supports("avx512f")},
    };
    int ran = 0;
    for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++)
        for (size_t di = 0; di < 2 && kernels[ki].present; di++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int d = ds[di], len = lens[li], hidden = heads * d, t0 = 3;
                const size_t rows = (size_t)(t0 + len), stride = 3 * (size_t)hidden;
                float *qkv = malloc(sizeof(float) * rows * stride);
                float *a = calloc(rows * (size_t)hidden, sizeof(float));
                double *sc = malloc(sizeof(double) * (size_t)len);
                float *scr =
                    malloc(sizeof(float) * (size_t)hs__cpu_attn_scratch_floats(d, len + 3));
                assert_non_null(qkv);
                assert_non_null(a);
                assert_non_null(sc);
                assert_non_null(scr);
                fill_rand(qkv, rows * stride, 777u + (uint32_t)(d * 1000 + len), 3.0f);
                for (int h = 0; h < heads; h++)
                    assert_int_equal(kernels[ki].run(qkv, a, t0, len, h, hidden, d, scr), 0);
                ran++;
                double err = 0.0, ref = 0.0;
                for (int h = 0; h < heads; h++)
                    for (int i = 0; i < len; i++) {
                        const float *q = qkv + (size_t)(t0 + i) * stride + (size_t)h * d;
                        double mx = -INFINITY, sum = 0.0;
                        for (int j = 0; j < len; j++) {
                            const float *k =
                                qkv + (size_t)(t0 + j) * stride + hidden + (size_t)h * d;
                            double dot = 0.0;
                            for (int c = 0; c < d; c++) dot += (double)q[c] * k[c];
                            sc[j] = dot / sqrt((double)d);
                            mx = fmax(mx, sc[j]);
                        }
                        for (int j = 0; j < len; j++) sum += (sc[j] = exp(sc[j] - mx));
                        for (int c = 0; c < d; c++) {
                            double o = 0.0;
                            for (int j = 0; j < len; j++)
                                o += sc[j] / sum *
                                     qkv[(size_t)(t0 + j) * stride + 2 * (size_t)hidden +
                                         (size_t)h * d + c];
                            const float got = a[(size_t)(t0 + i) * hidden + (size_t)h * d + c];
                            err = fmax(err, fabs(got - o));
                            ref = fmax(ref, fabs(o));
                        }
                    }
                for (size_t i = 0; i < (size_t)t0 * hidden; i++) assert_true(a[i] == 0.0f);
                assert_true(ref > 0.05);
                if (!(err <= 1e-5 * ref))
                    fail_msg("kernel %zu d %d len %d: error %g of %g", ki, d, len, err, ref);
                free(qkv);
                free(a);
                free(sc);
                free(scr);
            }
    if (!ran) skip();
    assert_int_equal(hs__cpu_attn_avx2(NULL, NULL, 0, 1, 0, 72, 24, NULL), -1);
    assert_int_equal(hs__cpu_attn_avx512(NULL, NULL, 0, 1, 0, 72, 24, NULL), -1);
}

typedef int (*attn_kernel)(const float *, float *, int, int, int, int, int, float *);

/* A reduced-precision attention kernel against the f32 one on random q | k | v rows of 3 heads
 * side by side, the sequence starting at row 3 (rows before it must stay untouched): returns the
 * largest error over the largest f32 output. zeros: head 1's key 1 and query 2 set to zero
 * first (len > 2), and *zero_query_err the largest error of that query's outputs. */
static double attn_vs_f32(attn_kernel run, int d, int len, uint32_t seed, int zeros,
                          double *zero_query_err)
{
    const int heads = 3, hidden = heads * d, t0 = 3;
    const size_t rows = (size_t)(t0 + len), stride = 3 * (size_t)hidden;
    float *qkv = malloc(sizeof(float) * rows * stride);
    float *a = calloc(rows * (size_t)hidden, sizeof(float));
    float *b = calloc(rows * (size_t)hidden, sizeof(float));
    float *scr = malloc(sizeof(float) * (size_t)hs__cpu_attn_scratch_floats(d, len + 3));
    assert_non_null(qkv);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(scr);
    fill_rand(qkv, rows * stride, seed + (uint32_t)(d * 1000 + len), 3.0f);
    zeros = zeros && len > 2;
    if (zeros) {
        memset(qkv + (size_t)(t0 + 1) * stride + hidden + d, 0, sizeof(float) * d);
        memset(qkv + (size_t)(t0 + 2) * stride + d, 0, sizeof(float) * d);
    }
    for (int h = 0; h < heads; h++) {
        assert_int_equal(hs__cpu_attn_avx512(qkv, a, t0, len, h, hidden, d, scr), 0);
        assert_int_equal(run(qkv, b, t0, len, h, hidden, d, scr), 0);
    }
    double err = 0.0, ref = 0.0;
    for (size_t i = (size_t)t0 * hidden; i < rows * (size_t)hidden; i++) {
        err = fmax(err, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs((double)a[i]));
    }
    for (size_t i = 0; i < (size_t)t0 * hidden; i++) assert_true(b[i] == 0.0f);
    assert_true(ref > 0.05);
    if (zero_query_err) {
        *zero_query_err = 0.0;
        for (int c = 0; zeros && c < d; c++) {
            const size_t o = (size_t)(t0 + 2) * hidden + (size_t)d + c;
            *zero_query_err = fmax(*zero_query_err, fabs((double)a[o] - b[o]));
        }
    }
    free(qkv);
    free(a);
    free(b);
    free(scr);
    return err / ref;
}

/* The bf16 attention kernel against the f32 one: every length class (one key, odd counts, a
 * partial and several 64-key blocks), both head sizes, and several heads side by side so a
 * wrong head offset or pair layout shows. */
static void kernels_bf16_attention_tracks_f32(void **state)
{
    (void)state;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) skip();
    static const int lens[] = {1, 2, 7, 33, 64, 65, 130};
    static const int ds[] = {32, 64};
    for (size_t di = 0; di < 2; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            assert_true(attn_vs_f32(hs__cpu_attn_bf16, ds[di], lens[li], 12345u, 0, NULL) <= 0.02);
    assert_int_equal(hs__cpu_attn_bf16(NULL, NULL, 0, 1, 0, 48, 48, NULL), -1);
}

/* The int8 Q.K^T attention kernel (AVX-512 VNNI) against the f32 one: the same length classes
 * and past 512 keys (where its P.V goes from int16 to f32), both head sizes, heads side by
 * side; and a zero key row (its scale 0) and a zero query row, whose outputs must be the mean
 * of V, as in f32 (within half an int8 step of V, |v| <= 1.5, where P.V runs in int16). */
static void kernels_q8_attention_tracks_f32(void **state)
{
    (void)state;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
        skip();
    static const int lens[] = {1, 2, 7, 16, 33, 64, 65, 130, 511, 512, 513, 600};
    static const int ds[] = {32, 64};
    double worst = 0.0;
    for (size_t di = 0; di < 2; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int d = ds[di], len = lens[li];
            double zq = 0.0;
            const double e = attn_vs_f32(hs__cpu_attn_q8, d, len, 4242u, 1, &zq);
            worst = fmax(worst, e);
            if (!(e <= 0.01)) fail_msg("d %d len %d: error %g of the range against f32", d, len, e);
            if (!(zq <= (len <= 512 ? 1.5 / 254 : 1e-5)))
                fail_msg("d %d len %d: the zero query is %g off", d, len, zq);
        }
    print_message("q8 attention: worst error %.4g of the output's range\n", worst);
    assert_int_equal(hs__cpu_attn_q8(NULL, NULL, 0, 1, 0, 48, 48, NULL), -1);
}

/* The vector row quantizers (AVX-512, AVX2) against the definition, bit for bit: over lengths
 * that end inside a 16- / 64-value step and on its edge, with and without smoothing, s8 and u8;
 * round to nearest even, saturated to [-128, 127] (the scale keeps every value within +-127). */
static void int8_row_quantizers_match_reference(void **state)
{
    (void)state;
    __builtin_cpu_init();
    static const int ks[] = {1, 7, 16, 63, 64, 65, 85, 100, 128, 384, 1000, 1536};
    float *x = malloc(sizeof(float) * 1536), *mul = malloc(sizeof(float) * 1536);
    uint8_t *q = malloc(1536);
    int ran = 0;
    for (int isa = 1; isa <= 2; isa++) {
        if (isa == 2 && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")))
            continue;
        if (isa == 1 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
            continue;
        ran++;
        unsigned seed = 7;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int var = 0; var < 8; var++) {
                const int k = ks[ki], zp = var & 1 ? 128 : 0;
                const float *m = var & 2 ? mul : NULL;
                for (int j = 0; j < k; j++) {
                    seed = seed * 1103515245u + 12345u;
                    x[j] = (float)((int)(seed >> 8) % 20001 - 10000) / (var & 4 ? 3.0f : 100.0f);
                    mul[j] = 0.5f + (float)(j % 7) * 0.1f;
                }
                const float sc = hs__ql_quant_row(isa, x, m, q, k, zp);
                float amax = 0.0f;
                for (int j = 0; j < k; j++) amax = fmaxf(amax, fabsf(m ? x[j] * m[j] : x[j]));
                assert_true(sc == amax / 127.0f);
                const float inv = 127.0f / amax;
                for (int j = 0; j < k; j++) {
                    int r = (int)nearbyintf((m ? x[j] * m[j] : x[j]) * inv);
                    r = r > 127 ? 127 : r < -128 ? -128 : r;
                    const uint8_t want = (uint8_t)((uint8_t)(int8_t)r ^ (uint8_t)zp);
                    if (q[j] != want)
                        fail_msg("isa %d k %d var %d: value %d quantized to %d, want %d", isa, k,
                                 var, j, q[j], want);
                }
            }
    }
    free(x), free(mul), free(q);
    if (!ran) skip();
}

/* The int8 layer with the residual LayerNorm as its epilogue (hs__ql_run_resid_ln) against the
 * layer into y, then hs__cpu_residual_ln: equal to the bit, alone and as the second layer of a
 * chained pair (its input quantized by the first's epilogue), for row counts below a bucket,
 * across GEMM chunks and with either thread count. */
static void int8_resid_ln_epilogue_equals_unfused(void **state)
{
    (void)state;
    struct hs_error err = {0};
    enum { K = 96, N = 64, MID = 160 };
    static const int rows_list[] = {7, 300};
    float *w1 = malloc(sizeof(float) * MID * K), *w2 = malloc(sizeof(float) * N * MID);
    float *wo = malloc(sizeof(float) * N * K);
    float b1[MID], bias[N], g[N], beta[N];
    assert_non_null(w1);
    assert_non_null(w2);
    assert_non_null(wo);
    fill_rand(w1, (size_t)MID * K, 1u, 0.4f);
    fill_rand(w2, (size_t)N * MID, 2u, 0.4f);
    fill_rand(wo, (size_t)N * K, 3u, 0.4f);
    fill_rand(b1, MID, 4u, 0.2f);
    fill_rand(bias, N, 5u, 0.2f);
    fill_rand(g, N, 6u, 2.0f);
    fill_rand(beta, N, 7u, 0.5f);
    struct hs_ql_weights qa, qb, qo;
    assert_int_equal(hs__ql_weights_make(HS_DTYPE_I8, w1, MID, K, NULL, &qa, &err), 0);
    assert_int_equal(hs__ql_weights_make(HS_DTYPE_I8, w2, N, MID, NULL, &qb, &err), 0);
    assert_int_equal(hs__ql_weights_make(HS_DTYPE_I8, wo, N, K, NULL, &qo, &err), 0);
    assert_true(hs__ql_chainable(&qa, &qb));
    struct hs_ql_cache *c = NULL;
    assert_int_equal(hs__ql_cache_create(1, &c, &err), 0);
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
        for (int nt = 1; nt <= 2; nt++) {
            const int rows = rows_list[ri];
            const size_t pr = (size_t)rows + HS_QL_ROW_PAD;
            float *x = malloc(sizeof(float) * (size_t)rows * K);
            float *mid = malloc(sizeof(float) * (size_t)rows * MID);
            float *y = malloc(sizeof(float) * (size_t)rows * N);
            float *want = malloc(sizeof(float) * (size_t)rows * N);
            float *got = malloc(sizeof(float) * (size_t)rows * N);
            void *qsrc = malloc((size_t)hs__ql_src_bytes(rows, MID));
            void *qmid = malloc(pr * MID);
            float *sx = malloc(sizeof(float) * pr);
            int32_t *acc = malloc(sizeof(int32_t) * pr * MID);
            assert_true(x && mid && y && want && got && qsrc && qmid && sx && acc);
            fill_rand(x, (size_t)rows * K, 8u + (uint32_t)rows, 6.0f);
            fill_rand(want, (size_t)rows * N, 9u + (uint32_t)rows, 3.0f);
            memcpy(got, want, sizeof(float) * (size_t)rows * N);
            /* one layer */
            assert_int_equal(
                hs__ql_run(c, 0, &qo, x, NULL, y, rows, -1, nt, qsrc, sx, acc, NULL, NULL, &err),
                0);
            hs__cpu_residual_ln(want, y, bias, g, beta, rows, N, 1e-5f, nt);
            const struct hs_ql_resid_ln ln = {got, bias, g, beta, 1e-5f};
            assert_int_equal(hs__ql_run_resid_ln(c, 0, &qo, x, rows, nt, qsrc, sx, acc, &ln, &err),
                             0);
            assert_memory_equal(got, want, sizeof(float) * (size_t)rows * N);
            /* the second layer of a chained pair */
            assert_int_equal(hs__ql_run(c, 0, &qa, x, b1, mid, rows, HS_ACT_GELU_ERF, nt, qsrc, sx,
                                        acc, NULL, NULL, &err),
                             0);
            assert_int_equal(
                hs__ql_run(c, 0, &qb, mid, NULL, y, rows, -1, nt, qsrc, sx, acc, NULL, NULL, &err),
                0);
            hs__cpu_residual_ln(want, y, bias, g, beta, rows, N, 1e-5f, nt);
            assert_int_equal(hs__ql_run(c, 0, &qa, x, b1, NULL, rows, HS_ACT_GELU_ERF, nt, qsrc, sx,
                                        acc, &qb, qmid, &err),
                             0);
            assert_int_equal(
                hs__ql_run_resid_ln(c, 0, &qb, NULL, rows, nt, qmid, sx, acc, &ln, &err), 0);
            assert_memory_equal(got, want, sizeof(float) * (size_t)rows * N);
            free(x);
            free(mid);
            free(y);
            free(want);
            free(got);
            free(qsrc);
            free(qmid);
            free(sx);
            free(acc);
        }
    /* no norm, or a layer whose epilogue is oneDNN's: refused */
    const struct hs_ql_resid_ln no_g = {bias, bias, NULL, NULL, 1e-5f};
    assert_int_equal(hs__ql_run_resid_ln(c, 0, &qo, NULL, 1, 1, NULL, NULL, NULL, &no_g, &err), -1);
    hs__ql_cache_free(c);
    hs__ql_weights_free(&qa);
    hs__ql_weights_free(&qb);
    hs__ql_weights_free(&qo);
    free(w1);
    free(w2);
    free(wo);
}

/* The int8 layer on inputs at the top of their range against weights whose large values sit
 * side by side: where the CPU has no int8 dot product (AVX2), the GEMM sums the products of an
 * input pair (k = 2i, 2i + 1) in int16 and the u8 source is 255 there, so a pair of large
 * same-signed weights would saturate. Rows of period 4 [small, L, L, small] put the large
 * weights across pairs (an odd-aligned pairing would saturate), rows [L, L, ...] inside them
 * (the scale must shrink). Every result is within int8's rounding of the fp32 product. */
static void int8_pairs_do_not_saturate(void **state)
{
    (void)state;
    if (!hs__ql_dtype_fast(HS_DTYPE_I8)) skip();
    struct hs_error err = {0};
    enum { K = 256, N = 48, ROWS = 20 };
    float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * ROWS * K);
    float *y = malloc(sizeof(float) * ROWS * N);
    void *qsrc = malloc((size_t)hs__ql_src_bytes(ROWS, K));
    float *sx = malloc(sizeof(float) * (ROWS + HS_QL_ROW_PAD));
    int32_t *acc = malloc(sizeof(int32_t) * (ROWS + HS_QL_ROW_PAD) * N);
    assert_true(w && x && y && qsrc && sx && acc);
    for (int j = 0; j < N; j++) {
        const float sign = j % 2 ? -1.0f : 1.0f, big = 0.5f + 0.01f * (float)j;
        for (int i = 0; i < K; i++) {
            const int across = (j / 2) % 2 == 0, ph = i % 4;
            const int large = across ? (ph == 1 || ph == 2) : 1;
            w[(size_t)j * K + i] = sign * (large ? big : 0.004f);
        }
    }
    for (int r = 0; r < ROWS; r++) /* all at the row's max (u8 255), or alternating signs */
        for (int i = 0; i < K; i++)
            x[(size_t)r * K + i] = r % 3 == 2 ? (i % 2 ? -2.0f : 2.0f) : 1.0f + (float)r;
    struct hs_ql_weights q;
    assert_int_equal(hs__ql_weights_make(HS_DTYPE_I8, w, N, K, NULL, &q, &err), 0);
    struct hs_ql_cache *c = NULL;
    assert_int_equal(hs__ql_cache_create(1, &c, &err), 0);
    for (int t = 0; t < 4; t++) { /* 1 and 2 threads; oneDNN's matmul, then the default kernel */
        const int nt = 1 + t % 2;
        hs__ql_set_own_rows(t < 2 ? 0 : -1);
        assert_int_equal(
            hs__ql_run(c, 0, &q, x, NULL, y, ROWS, -1, nt, qsrc, sx, acc, NULL, NULL, &err), 0);
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < N; j++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < K; i++) {
                    const double p = (double)x[(size_t)r * K + i] * w[(size_t)j * K + i];
                    ref += p;
                    mag += fabs(p);
                }
                /* int8 rounding: well under 2 % of the products' magnitude; a saturated pair
                 * sum loses about half of it */
                if (fabs((double)y[(size_t)r * N + j] - ref) > 0.02 * mag)
                    fail_msg("row %d channel %d: %g, want %g (|products| %g)", r, j,
                             (double)y[(size_t)r * N + j], ref, mag);
            }
    }
    hs__ql_cache_free(c);
    hs__ql_weights_free(&q);
    free(w);
    free(x);
    free(y);
    free(qsrc);
    free(sx);
    free(acc);
}

/* The own u8 x s8 kernels (qgemm.c: AVX2, and AVX-512 VNNI where the CPU has it) against
 * integer sums, tail rows, a partial last panel and a partial last panel group included, then a
 * whole int8 layer through the engine's kernel and through oneDNN's matmul: the same bits
 * (exact s32 sums either way). */
static void int8_own_kernel_equals_reference_and_onednn(void **state)
{
    (void)state;
    if (!hs__ql_dtype_fast(HS_DTYPE_I8) || hs__ql_own_isa() == HS_QGEMM_NONE) skip();
    /* widths: one partial panel; 3 panels, the last partial (one VNNI group); 5 panels (a
     * whole group and a partial one of 2) */
    enum { K = 96, MAXN = 72, MAXR = 37 };
    const int k_rows[] = {1, 3, 4, 5, 8, 9, 16, 37}, k_n[] = {12, 40, MAXN};
    int8_t w[MAXN * K];
    uint8_t x[(MAXR + 4) * K];
    uint32_t seed = 7;
    for (int i = 0; i < MAXN * K; i++) { /* |w| <= 64: a pair stays within int16 */
        seed = seed * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(seed >> 24) % 129 - 64);
    }
    for (int i = 0; i < (MAXR + 4) * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (uint8_t)(seed >> 24);
    }
    assert_null(hs__cpu_qgemm_pack(w, MAXN, K - 1)); /* k must be a multiple of 4 */
    int32_t acc[MAXR * MAXN];
    int kernels = 0;
    for (int isa = HS_QGEMM_AVX2; isa <= HS_QGEMM_VNNI512; isa++) {
        if (!hs__cpu_qgemm_runs(isa)) continue;
        kernels++;
        for (size_t ni = 0; ni < sizeof k_n / sizeof k_n[0]; ni++) {
            const int n = k_n[ni];
            int8_t *packed = hs__cpu_qgemm_pack(w, n, K);
            assert_non_null(packed);
            for (size_t t = 0; t < sizeof k_rows / sizeof k_rows[0]; t++)
                for (int nt = 1; nt <= 2; nt++) {
                    const int rows = k_rows[t];
                    memset(acc, 0x5a, sizeof acc);
                    hs__cpu_qgemm(isa, x, packed, acc, rows, n, K, nt, NULL);
                    for (int r = 0; r < rows; r++)
                        for (int j = 0; j < n; j++) {
                            int32_t ref = 0;
                            for (int i = 0; i < K; i++) ref += (int32_t)x[r * K + i] * w[j * K + i];
                            if (acc[r * n + j] != ref)
                                fail_msg("kernel %d n %d rows %d threads %d: [%d][%d] = %d, want "
                                         "%d",
                                         isa, n, rows, nt, r, j, acc[r * n + j], ref);
                        }
                    if (rows < MAXR) /* past rows: untouched */
                        assert_int_equal(acc[rows * n], 0x5a5a5a5a);
                }
            hs_free_aligned(packed);
        }
    }
    assert_true(kernels >= 1);

    /* a whole layer, float in and out: own kernel and oneDNN give the same bits */
    enum { LK = 384, LN = 200, LROWS = 70 };
    struct hs_error err = {0};
    float *lw = malloc(sizeof(float) * LN * LK), *lx = malloc(sizeof(float) * LROWS * LK);
    float *bias = malloc(sizeof(float) * LN), *y0 = malloc(sizeof(float) * LROWS * LN);
    float *y1 = malloc(sizeof(float) * LROWS * LN);
    void *qsrc = malloc((size_t)hs__ql_src_bytes(LROWS, LK));
    float *sx = malloc(sizeof(float) * (LROWS + HS_QL_ROW_PAD));
    int32_t *lacc = malloc(sizeof(int32_t) * (LROWS + HS_QL_ROW_PAD) * LN);
    assert_true(lw && lx && bias && y0 && y1 && qsrc && sx && lacc);
    fill_rand(lw, (size_t)LN * LK, 11, 0.1f);
    fill_rand(lx, (size_t)LROWS * LK, 12, 2.0f);
    fill_rand(bias, LN, 13, 0.5f);
    struct hs_ql_weights q;
    assert_int_equal(hs__ql_weights_make(HS_DTYPE_I8, lw, LN, LK, NULL, &q, &err), 0);
    assert_non_null(q.own);
    assert_null(q.packed); /* oneDNN's copy waits for a call that needs it */
    struct hs_ql_cache *c = NULL;
    assert_int_equal(hs__ql_cache_create(1, &c, &err), 0);
    for (int rows = 1; rows <= LROWS; rows += 23)
        for (int nt = 1; nt <= 2; nt++) {
            hs__ql_set_own_rows(0); /* oneDNN's matmul */
            assert_int_equal(hs__ql_run(c, 0, &q, lx, bias, y0, rows, HS_ACT_GELU_ERF, nt, qsrc, sx,
                                        lacc, NULL, NULL, &err),
                             0);
            assert_non_null(q.packed);
            hs__ql_set_own_rows(-1); /* the default: the own kernel */
            assert_true(hs__ql_own_rows() >= rows);
            assert_int_equal(hs__ql_run(c, 0, &q, lx, bias, y1, rows, HS_ACT_GELU_ERF, nt, qsrc, sx,
                                        lacc, NULL, NULL, &err),
                             0);
            assert_memory_equal(y0, y1, sizeof(float) * (size_t)rows * LN);
        }
    hs__ql_cache_free(c);
    hs__ql_weights_free(&q);
    free(lw);
    free(lx);
    free(bias);
    free(y0);
    free(y1);
    free(qsrc);
    free(sx);
    free(lacc);
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
        cmocka_unit_test(kernels_gelu_and_exp),
        cmocka_unit_test(kernels_small_gemm_matches_reference),
        cmocka_unit_test(kernels_vmath_every_width),
        cmocka_unit_test(kernels_attention_match_reference),
        cmocka_unit_test(kernels_q8_attention_tracks_f32),
        cmocka_unit_test(kernels_bf16_attention_tracks_f32),
        cmocka_unit_test(int8_row_quantizers_match_reference),
        cmocka_unit_test(int8_resid_ln_epilogue_equals_unfused),
        cmocka_unit_test(int8_pairs_do_not_saturate),
        cmocka_unit_test(int8_own_kernel_equals_reference_and_onednn),
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
        cmocka_unit_test(preparations_are_shared_between_engines),
        cmocka_unit_test(f32_workspace_refuses_reduced_stages),
        cmocka_unit_test(borrowed_cores_are_lent_and_returned),
        cmocka_unit_test(preempting_borrower_takes_a_busy_core),
    };
    return cmocka_run_group_tests_name("cpu_engine", tests, NULL, NULL);
}
