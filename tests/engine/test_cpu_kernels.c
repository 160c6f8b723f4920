/* CPU engine kernels on their own: the vector math, the packed small-M GEMM, the attention
 * kernels (f32, with the QKV bias, bf16, int8) and the int8 quantizers, epilogues and GEMM
 * kernels, each against a double-precision reference or the path it replaces. The whole engine:
 * test_cpu_engine.c. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/qlinear.h"

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
    /* (300 rows: super-blocks of 64 rows on AVX-512, the last one short) */
    static const int shapes[][3] = {{1, 24, 8}, {3, 37, 19},  {4, 48, 64},   {5, 100, 33},
                                    {9, 31, 7}, {16, 72, 40}, {19, 129, 50}, {300, 70, 40}};
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

/* The f32 AVX-512 kernel adding the QKV bias as it reads q, k and v: the same bits as adding it
 * to the rows first, for lengths that fill and leave part of a query block, a 16-key gather and
 * a 64-key block, both head sizes; and which shapes hs__cpu_attention takes a bias for. */
static void kernels_attention_bias_in_kernel(void **state)
{
    (void)state;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) skip();
    static const int lens[] = {1, 3, 5, 17, 64, 65, 130};
    const int heads = 3, t0 = 2;
    for (int d = 32; d <= 64; d += 32)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int len = lens[li], hidden = heads * d;
            const size_t rows = (size_t)(t0 + len), stride = 3 * (size_t)hidden;
            float *qkv = malloc(sizeof(float) * rows * stride);
            float *with = malloc(sizeof(float) * rows * stride);
            float *bias = malloc(sizeof(float) * stride);
            float *a = calloc(rows * (size_t)hidden, sizeof(float));
            float *b = calloc(rows * (size_t)hidden, sizeof(float));
            float *scr = malloc(sizeof(float) * (size_t)hs__cpu_attn_scratch_floats(d, len + 2));
            assert_non_null(qkv);
            assert_non_null(with);
            assert_non_null(bias);
            assert_non_null(a);
            assert_non_null(b);
            assert_non_null(scr);
            fill_rand(qkv, rows * stride, 4242u + (uint32_t)(d * 1000 + len), 3.0f);
            fill_rand(bias, stride, 99u + (uint32_t)len, 2.0f);
            for (size_t r = 0; r < rows; r++)
                for (size_t j = 0; j < stride; j++)
                    with[r * stride + j] = qkv[r * stride + j] + bias[j];
            for (int h = 0; h < heads; h++) {
                assert_int_equal(hs__cpu_attn_avx512_bias(qkv, a, t0, len, h, hidden, d, bias, scr),
                                 0);
                assert_int_equal(hs__cpu_attn_avx512(with, b, t0, len, h, hidden, d, scr), 0);
            }
            if (memcmp(a, b, sizeof(float) * rows * (size_t)hidden))
                fail_msg("d %d len %d: the bias in the kernel differs from the bias in the rows", d,
                         len);
            free(qkv), free(with), free(bias), free(a), free(b), free(scr);
        }
    struct hs_attn_shape sh = {.heads = 2,
                               .kv_heads = 2,
                               .head_dim = 32,
                               .stride = 192,
                               .k_off = 64,
                               .v_off = 128,
                               .ctx_stride = 64};
    assert_true(hs__cpu_attn_takes_bias(&sh, 0));
    assert_false(hs__cpu_attn_takes_bias(&sh, 1)); /* a relative bias: the portable kernel */
    sh.lowp = 1;
    assert_false(hs__cpu_attn_takes_bias(&sh, 0));
    sh.qkv_bias = (const float[192]){0};
    int32_t off[2] = {0, 1};
    assert_int_equal(hs__cpu_attention(NULL, NULL, off, 1, &sh, NULL, 1, 1, NULL, 0), -1);
    sh.lowp = 0, sh.causal = 1;
    assert_false(hs__cpu_attn_takes_bias(&sh, 0));
}

/* An output layer adding into the residual stream (sgemm with beta 1, then the LayerNorm adding
 * the bias) against the product in a buffer of its own and the residual LayerNorm reading it. */
static void kernels_linear_acc_residual_ln(void **state)
{
    (void)state;
    const int rows = 37, n = 48, k = 80;
    float *x = malloc(sizeof(float) * rows * k), *w = malloc(sizeof(float) * n * k);
    float *h1 = malloc(sizeof(float) * rows * n), *h2 = malloc(sizeof(float) * rows * n);
    float *y = malloc(sizeof(float) * rows * n), *bias = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n), *beta = malloc(sizeof(float) * n);
    fill_rand(x, (size_t)rows * k, 11u, 1.0f);
    fill_rand(w, (size_t)n * k, 12u, 0.5f);
    fill_rand(h1, (size_t)rows * n, 13u, 2.0f);
    fill_rand(bias, (size_t)n, 14u, 1.0f);
    fill_rand(g, (size_t)n, 15u, 1.0f);
    fill_rand(beta, (size_t)n, 16u, 1.0f);
    memcpy(h2, h1, sizeof(float) * rows * n);
    assert_int_equal(hs__cpu_linear(x, w, NULL, y, rows, n, k, -1, 1), 0);
    hs__cpu_residual_ln(h1, y, bias, g, beta, rows, n, 1e-12f, 1);
    assert_int_equal(hs__cpu_linear_acc(x, w, h2, rows, n, k), 0);
    hs__cpu_residual_ln(h2, NULL, bias, g, beta, rows, n, 1e-12f, 2);
    double err = 0.0;
    for (int i = 0; i < rows * n; i++) err = fmax(err, fabs((double)h1[i] - h2[i]));
    if (!(err <= 1e-5)) fail_msg("accumulated into the residual: max |diff| %g", err);
    free(x), free(w), free(h1), free(h2), free(y), free(bias), free(g), free(beta);
}

/* The residual LayerNorm at every vector width this CPU has (AVX-512's own three-pass form,
 * AVX2 / SSE2 the portable one) against a double-precision reference: widths that end inside a
 * vector, on its edge and past two, and each of y, bias and beta present or NULL. */
static void kernels_residual_ln_matches_reference(void **state)
{
    (void)state;
    static const int ns[] = {1, 5, 16, 17, 31, 32, 33, 48, 383, 384, 390};
    const int rows = 3, nmax = 390;
    float *x0 = malloc(sizeof(float) * rows * nmax), *x = malloc(sizeof(float) * rows * nmax);
    float *y = malloc(sizeof(float) * rows * nmax), *bias = malloc(sizeof(float) * nmax);
    float *g = malloc(sizeof(float) * nmax), *beta = malloc(sizeof(float) * nmax);
    fill_rand(x0, (size_t)rows * nmax, 21u, 2.0f);
    fill_rand(y, (size_t)rows * nmax, 22u, 1.0f);
    fill_rand(bias, (size_t)nmax, 23u, 0.5f);
    fill_rand(g, (size_t)nmax, 24u, 1.0f);
    fill_rand(beta, (size_t)nmax, 25u, 1.0f);
    for (int i = 0; i < rows; i++) x0[i * nmax] += 30.0f; /* an outlier: the mean is not ~0 */
    const int best = hs__cpu_vmath_use(-1);
    for (int w = 0; w <= best; w++) {
        assert_int_equal(hs__cpu_vmath_use(w), w);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int v = 0; v < 8; v++) {
                const int n = ns[ni];
                const float *yy = v & 1 ? y : NULL, *bb = v & 2 ? bias : NULL;
                const float *be = v & 4 ? beta : NULL;
                for (int r = 0; r < rows; r++)
                    memcpy(x + (size_t)r * n, x0 + (size_t)r * nmax, sizeof(float) * (size_t)n);
                /* y rows n apart, as the kernel reads them */
                float *yr = yy ? malloc(sizeof(float) * rows * (size_t)n) : NULL;
                for (int r = 0; yr && r < rows; r++)
                    memcpy(yr + (size_t)r * n, y + (size_t)r * nmax, sizeof(float) * (size_t)n);
                hs__cpu_residual_ln(x, yr, bb, g, be, rows, n, 1e-5f, 1);
                for (int r = 0; r < rows; r++) {
                    double mean = 0.0, var = 0.0, d[390];
                    for (int j = 0; j < n; j++) {
                        d[j] = (double)x0[r * nmax + j] + (yy ? y[r * nmax + j] : 0.0) +
                               (bb ? bias[j] : 0.0);
                        mean += d[j];
                    }
                    mean /= n;
                    for (int j = 0; j < n; j++) var += (d[j] - mean) * (d[j] - mean);
                    var /= n;
                    for (int j = 0; j < n; j++) {
                        const double want =
                            (d[j] - mean) / sqrt(var + 1e-5) * g[j] + (be ? beta[j] : 0.0);
                        const double got = x[(size_t)r * n + j];
                        if (!(fabs(got - want) <= 2e-5 * (1.0 + fabs(want))))
                            fail_msg("width %d, n %d, y %d bias %d beta %d, row %d [%d]: %.7g, "
                                     "want %.7g",
                                     w, n, !!yy, !!bb, !!be, r, j, got, want);
                    }
                }
                free(yr);
            }
    }
    hs__cpu_vmath_use(-1);
    free(x0), free(x), free(y), free(bias), free(g), free(beta);
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

/* The row quantizers (portable, AVX2, AVX-512) against the definition, bit for bit: over
 * lengths that end inside a 16- / 64-value step and on its edge, with and without smoothing, s8
 * (symmetric) and u8 (asymmetric, with a zero point), on rows of both signs and of one sign
 * (GELU's outputs: the u8 range starts at zero); round to nearest even. And what the
 * quantization promises: every value within half a step of s * (q - zp). */
static void int8_row_quantizers_match_reference(void **state)
{
    (void)state;
    __builtin_cpu_init();
    static const int ks[] = {1, 7, 16, 63, 64, 65, 85, 100, 128, 384, 1000, 1536};
    float *x = malloc(sizeof(float) * 1536), *mul = malloc(sizeof(float) * 1536);
    uint8_t *q = malloc(1536);
    for (int isa = 0; isa <= 2; isa++) {
        if (isa == 2 && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")))
            continue;
        if (isa == 1 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
            continue;
        unsigned seed = 7;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int var = 0; var < 16; var++) {
                const int k = ks[ki], u8 = var & 1;
                const float *m = var & 2 ? mul : NULL;
                for (int j = 0; j < k; j++) {
                    seed = seed * 1103515245u + 12345u;
                    x[j] = (float)((int)(seed >> 8) % 20001 - 10000) / (var & 4 ? 3.0f : 100.0f);
                    if (var & 8) x[j] = fabsf(x[j]) * 0.1f - 0.17f; /* GELU-like: mostly >= 0 */
                    mul[j] = 0.5f + (float)(j % 7) * 0.1f;
                }
                const struct hs_qrow got = hs__ql_quant_row(isa, x, m, q, k, u8);
                float mn = 0.0f, mx = 0.0f;
                for (int j = 0; j < k; j++) {
                    const float v = m ? x[j] * m[j] : x[j];
                    mn = fminf(mn, v);
                    mx = fmaxf(mx, v);
                }
                const float amax = fmaxf(mx, -mn), inv = u8 ? 255.0f / (mx - mn) : 127.0f / amax;
                const int zp = u8 ? (int)nearbyintf(-mn * inv) : 0;
                const float s = u8 ? (mx - mn) / 255.0f : amax / 127.0f;
                if (got.s != s || got.sz != s * (float)zp)
                    fail_msg("isa %d k %d var %d: scale %g / %g, want %g / %g", isa, k, var,
                             (double)got.s, (double)got.sz, (double)s, (double)(s * (float)zp));
                for (int j = 0; j < k; j++) {
                    const float v = m ? x[j] * m[j] : x[j];
                    int r = (int)nearbyintf(v * inv) + zp;
                    r = u8 ? (r < 0     ? 0
                              : r > 255 ? 255
                                        : r)
                           : (r > 127    ? 127
                              : r < -128 ? -128
                                         : r);
                    const uint8_t want = u8 ? (uint8_t)r : (uint8_t)(int8_t)r;
                    if (q[j] != want)
                        fail_msg("isa %d k %d var %d: value %d quantized to %d, want %d", isa, k,
                                 var, j, q[j], want);
                    const float back = s * (float)((u8 ? (int)q[j] : (int)(int8_t)q[j]) - zp);
                    if (!(fabsf(back - v) <= 0.5f * s * 1.0001f + 1e-6f * fabsf(v)))
                        fail_msg("isa %d k %d var %d: value %d is %g, comes back as %g", isa, k,
                                 var, j, (double)v, (double)back);
                }
            }
    }
    /* a zero row: scale 0, every value the zero point 0 */
    memset(x, 0, sizeof(float) * 64);
    const struct hs_qrow z = hs__ql_quant_row(0, x, NULL, q, 64, 1);
    assert_true(z.s == 0.0f && z.sz == 0.0f && q[0] == 0 && q[63] == 0);
    free(x), free(mul), free(q);
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
            struct hs_qrow *sx = malloc(sizeof(struct hs_qrow) * pr);
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
    struct hs_qrow *sx = malloc(sizeof(struct hs_qrow) * (ROWS + HS_QL_ROW_PAD));
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
    struct hs_qrow *sx = malloc(sizeof(struct hs_qrow) * (LROWS + HS_QL_ROW_PAD));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_gelu_and_exp),
        cmocka_unit_test(kernels_small_gemm_matches_reference),
        cmocka_unit_test(kernels_attention_bias_in_kernel),
        cmocka_unit_test(kernels_linear_acc_residual_ln),
        cmocka_unit_test(kernels_residual_ln_matches_reference),
        cmocka_unit_test(kernels_vmath_every_width),
        cmocka_unit_test(kernels_attention_match_reference),
        cmocka_unit_test(kernels_q8_attention_tracks_f32),
        cmocka_unit_test(kernels_bf16_attention_tracks_f32),
        cmocka_unit_test(int8_row_quantizers_match_reference),
        cmocka_unit_test(int8_resid_ln_epilogue_equals_unfused),
        cmocka_unit_test(int8_pairs_do_not_saturate),
        cmocka_unit_test(int8_own_kernel_equals_reference_and_onednn),
    };
    return cmocka_run_group_tests_name("cpu_kernels", tests, NULL, NULL);
}
