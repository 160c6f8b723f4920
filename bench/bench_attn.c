/* bench_attn: the CPU engine's f32 attention (hs__cpu_attention, the kernel a BERT-shaped lane
 * runs) on one thread, with denormal floats flushed (what the engine sets on its threads,
 * core/threads.h) and kept (IEEE), on two kinds of score rows:
 *
 *   spread: q and k uniform in [-1, 1), scores within a few units of each other;
 *   peaked: queries along a common direction and the last key of every sequence along it too,
 *           ~110 above the others (a sink at [SEP], far beyond exp's range): the other keys'
 *           weights are ~1e-38, and P.V adds their products with V, denormal, into accumulators
 *           that hold nothing larger until the last key.
 *
 *   bench_attn [--len L] [--heads H] [--head-dim 32|64] [--seqs N] [--seconds S] [--int8]
 *
 * --int8 times the int8 lanes' kernel instead (hs__cpu_attn_q8: int8 Q.K^T, int16 P.V, AVX-512
 * VNNI), on spread rows, flushed; its line's max_abs_diff is against the f32 kernel's result.
 *
 * Prints one JSON line per case: median ms per call over the sequences, GFLOP/s (Q.K^T and P.V,
 * 4 * len^2 * head_dim a (sequence, head)), and the maximum |difference| between the flushed and
 * the kept result (0 on spread rows: nothing there is denormal). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/cpu/kernels.h"

static unsigned rng = 12345u;
static float urand(void) /* [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* The int8 kernel over every (sequence, head), as the engine's attention loop calls it. */
static void run_q8(const float *qkv, float *ctx, const int32_t *off, int seqs,
                   const struct hs_attn_shape *sh, float *scr)
{
    for (int s = 0; s < seqs; s++)
        for (int h = 0; h < sh->heads; h++)
            hs__cpu_attn_q8(qkv, ctx, off[s], off[s + 1] - off[s], h, sh->ctx_stride, sh->head_dim,
                            scr);
}

static double run(const float *qkv, float *ctx, const int32_t *off, int seqs,
                  const struct hs_attn_shape *sh, float *scr, int len, double seconds, int q8)
{
    double t[256];
    int n = 0;
    const int64_t end = hs_now_ns() + (int64_t)(seconds * 1e9);
    do {
        const int64_t t0 = hs_now_ns();
        if (q8)
            run_q8(qkv, ctx, off, seqs, sh, scr);
        else
            hs__cpu_attention(qkv, ctx, off, seqs, sh, scr, len, 1, NULL, 0);
        t[n++] = (double)(hs_now_ns() - t0) / 1e6;
    } while (n < 256 && (n < 3 || hs_now_ns() < end));
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv)
{
    int len = 128, heads = 12, d = 32, seqs = 8, q8 = 0;
    double seconds = 1.0;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--int8")) {
            q8 = 1;
            i--;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "bench_attn: %s needs a value\n", argv[i]);
            return 2;
        } else if (!strcmp(argv[i], "--len"))
            len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heads"))
            heads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--head-dim"))
            d = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seqs"))
            seqs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_attn [--len L] [--heads H] [--head-dim 32|64] "
                            "[--seqs N] [--seconds S] [--int8]\n");
            return 2;
        }
    }
    if (len < 2 || len > 4096 || heads < 1 || heads > 64 || (d != 32 && d != 64) || seqs < 1 ||
        seqs > 64) {
        fprintf(stderr, "bench_attn: out of range\n");
        return 2;
    }
    omp_set_num_threads(1);
    const int hidden = heads * d, stride = 3 * hidden;
    const size_t rows = (size_t)seqs * len;
    float *qkv = hs_malloc_aligned(sizeof(float) * rows * stride, 64);
    float *a = hs_malloc_aligned(sizeof(float) * rows * hidden, 64);
    float *b = hs_malloc_aligned(sizeof(float) * rows * hidden, 64);
    float *scr = hs_malloc_aligned(sizeof(float) * (size_t)hs__cpu_attn_scratch_floats(d, len), 64);
    int32_t *off = malloc(sizeof(int32_t) * (size_t)(seqs + 1));
    if (!qkv || !a || !b || !scr || !off) return 1;
    for (int s = 0; s <= seqs; s++) off[s] = s * len;
    const struct hs_attn_shape sh = {.heads = heads,
                                     .kv_heads = heads,
                                     .head_dim = d,
                                     .stride = stride,
                                     .k_off = hidden,
                                     .v_off = 2 * hidden,
                                     .ctx_stride = hidden};
    const unsigned mxcsr = _mm_getcsr();
    if (q8) {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
            fprintf(stderr, "bench_attn: --int8 needs AVX-512 VNNI\n");
            return 2;
        }
        for (size_t i = 0; i < rows * stride; i++) qkv[i] = urand();
        _mm_setcsr(mxcsr | 0x8040u);
        const double ms = run(qkv, b, off, seqs, &sh, scr, len, seconds, 1);
        run(qkv, a, off, seqs, &sh, scr, len, 0.0, 0);
        _mm_setcsr(mxcsr);
        printf("{\"kernel\":\"int8\",\"rows\":\"spread\",\"len\":%d,\"heads\":%d,"
               "\"head_dim\":%d,\"seqs\":%d,\"ms\":%.4f,\"gflops\":%.2f,"
               "\"max_abs_diff\":%.3g}\n",
               len, heads, d, seqs, ms, 4.0 * seqs * heads * (double)len * len * d / ms / 1e6,
               max_diff(a, b, rows * hidden));
    }
    for (int peaked = 0; !q8 && peaked < 2; peaked++) {
        for (size_t i = 0; i < rows * stride; i++) qkv[i] = urand();
        if (peaked) /* queries 1 + noise in every channel; the last key 110 / sqrt(d) in each:
                     * it scores ~110, the others ~N(0, 0.6) */
            for (size_t r = 0; r < rows; r++)
                for (int c = 0; c < hidden; c++) {
                    float *q = qkv + r * stride;
                    q[c] = 1.0f + 0.3f * q[c];
                    if (r % (size_t)len == (size_t)len - 1)
                        q[hidden + c] = 110.0f * sqrtf((float)d) / (float)d;
                }
        double ms[2];
        for (int keep = 0; keep < 2; keep++) {
            _mm_setcsr(keep ? mxcsr & ~0x8040u : mxcsr | 0x8040u);
            ms[keep] = run(qkv, keep ? b : a, off, seqs, &sh, scr, len, seconds, 0);
        }
        _mm_setcsr(mxcsr);
        const double diff = max_diff(a, b, rows * hidden);
        const double flop = 4.0 * seqs * heads * (double)len * len * d;
        for (int keep = 0; keep < 2; keep++)
            printf("{\"rows\":\"%s\",\"denormals\":\"%s\",\"len\":%d,\"heads\":%d,\"head_dim\":%d,"
                   "\"seqs\":%d,\"ms\":%.4f,\"gflops\":%.2f,\"max_abs_diff\":%.3g}\n",
                   peaked ? "peaked" : "spread", keep ? "kept" : "flushed", len, heads, d, seqs,
                   ms[keep], flop / ms[keep] / 1e6, diff);
    }
    hs_free_aligned(qkv);
    hs_free_aligned(a);
    hs_free_aligned(b);
    hs_free_aligned(scr);
    free(off);
    return 0;
}
