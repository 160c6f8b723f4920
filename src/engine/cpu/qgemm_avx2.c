/* The int8 GEMM of CPUs without an int8 dot product (AVX2 + FMA, the u8-source class of
 * qlinear.c): acc[rows, n] (s32) = x[rows, k] (u8) * W[n, k]^T (s8), on weights packed once.
 *
 * oneDNN 2.6's AVX2 int8 matmul loses to this at every size measured (qlinear.c,
 * QL_OWN_ROWS_DEFAULT): at a few rows a large part of each call is outside its kernel (a 1x16
 * MiniLM batch: 14 % of the samples in libgomp waits, 4 % in libdnnl's driver), and at 32x128
 * its kernels ran the GEMMs at 86 % of its own 2048^3 rate, this one at about 100 %.
 *
 * The weights are packed at prepare into panels of 16 output columns, k-quad-major
 * ([n/16][k/4][16][4] bytes, zero-padded past n): one 32-byte load holds 8 columns x 4 inputs.
 * A 4-row x 16-column block broadcasts each row's 4 source bytes and runs vpmaddubsw (u8 x s8,
 * pairs k = 2i, 2i + 1 summed in int16: the pairing and the saturation bound of oneDNN's AVX2
 * kernels, which the pair-safe weight scales of hs__ql_weights_make keep from saturating),
 * vpmaddwd by ones (the two pairs of a quad into int32) and vpaddd into 8 accumulators: two
 * multiply uops per 32 products, the class's int8 peak. Every accumulator is an exact integer
 * sum, so the result is bit-identical to oneDNN's whichever kernel, thread or block computes
 * it. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/qlinear.h"

#define QP 16 /* columns a panel */
#define QM 4  /* rows a block */

int64_t hs__cpu_qgemm_avx2_pack_bytes(int n, int k)
{
    return (int64_t)((n + QP - 1) / QP) * QP * (int64_t)k;
}

int8_t *hs__cpu_qgemm_avx2_pack(const int8_t *w, int n, int k)
{
    if (n <= 0 || k <= 0 || k % 4) return NULL;
    int8_t *p = hs_malloc_aligned((size_t)hs__cpu_qgemm_avx2_pack_bytes(n, k), 64);
    if (!p) return NULL;
    const int panels = (n + QP - 1) / QP, kq = k / 4;
    for (int pi = 0; pi < panels; pi++)
        for (int q = 0; q < kq; q++) {
            int8_t *dst = p + ((size_t)pi * kq + q) * QP * 4;
            for (int c = 0; c < QP; c++) {
                const int col = pi * QP + c;
                for (int b = 0; b < 4; b++)
                    dst[c * 4 + b] = col < n ? w[(size_t)col * k + (size_t)q * 4 + b] : 0;
            }
        }
    return p;
}

void hs__cpu_qgemm_avx2_unpack(const int8_t *packed, int n, int k, int8_t *w)
{
    const int kq = k / 4;
    for (int j = 0; j < n; j++)
        for (int q = 0; q < kq; q++)
            memcpy(w + (size_t)j * k + (size_t)q * 4,
                   packed + (((size_t)(j / QP) * kq + q) * QP + (size_t)(j % QP)) * 4, 4);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void qk_4x16(const uint8_t *x, int ldx, const int8_t *wp,
                                                        int kq, int32_t *y, int ldy, int rows,
                                                        int cols)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
    __m256i c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    const uint8_t *x0 = x, *x1 = x + ldx, *x2 = x + 2 * (size_t)ldx, *x3 = x + 3 * (size_t)ldx;
    for (int q = 0; q < kq; q++) {
        const int8_t *b = wp + (size_t)q * QP * 4;
        _mm_prefetch((const char *)(b + 8 * QP * 4), _MM_HINT_T0);
        const __m256i b0 = _mm256_load_si256((const __m256i *)(const void *)b);
        const __m256i b1 = _mm256_load_si256((const __m256i *)(const void *)(b + 32));
        int32_t s;
        __m256i a, t;
#define HS__ROW(r)                                                                                 \
    memcpy(&s, x##r + 4 * (size_t)q, 4);                                                           \
    a = _mm256_set1_epi32(s);                                                                      \
    t = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones);                                      \
    c##r##0 = _mm256_add_epi32(c##r##0, t);                                                        \
    t = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones);                                      \
    c##r##1 = _mm256_add_epi32(c##r##1, t);
        HS__ROW(0) HS__ROW(1) HS__ROW(2) HS__ROW(3)
#undef HS__ROW
    }
    const __m256i acc[QM][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    for (int r = 0; r < rows; r++) {
        int32_t *yr = y + (size_t)r * ldy;
        if (cols == QP) {
            _mm256_storeu_si256((__m256i *)(void *)yr, acc[r][0]);
            _mm256_storeu_si256((__m256i *)(void *)(yr + 8), acc[r][1]);
        } else {
            int32_t tmp[QP];
            _mm256_storeu_si256((__m256i *)(void *)tmp, acc[r][0]);
            _mm256_storeu_si256((__m256i *)(void *)(tmp + 8), acc[r][1]);
            memcpy(yr, tmp, sizeof(int32_t) * (size_t)cols);
        }
    }
}

static int has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static void qk_4x16(const uint8_t *x, int ldx, const int8_t *wp, int kq, int32_t *y, int ldy,
                    int rows, int cols)
{
    (void)x, (void)ldx, (void)wp, (void)kq, (void)y, (void)ldy, (void)rows, (void)cols;
}
static int has_avx2(void)
{
    return 0;
}
#endif

int hs__cpu_qgemm_avx2_available(void)
{
    static int cached = -1;
    if (cached < 0) cached = has_avx2();
    return cached;
}

void hs__cpu_qgemm_avx2_team(const uint8_t *x, const int8_t *packed, int32_t *acc, int rows, int n,
                             int k, int threads)
{
    const int panels = (n + QP - 1) / QP, mblocks = (rows + QM - 1) / QM, kq = k / 4;
    const int tasks = panels * mblocks;
    /* as hs__cpu_small_gemm: chunks of one panel's row blocks, taken in turn */
    int chunk = tasks / (4 * (threads > 0 ? threads : 1));
    chunk = chunk > mblocks ? mblocks : chunk < 1 ? 1 : chunk;
#pragma omp for schedule(dynamic, chunk)
    for (int t = 0; t < tasks; t++) {
        const int pi = t / mblocks, mb = t % mblocks;
        const int r0 = mb * QM, nr = rows - r0 < QM ? rows - r0 : QM;
        const int c0 = pi * QP, nc = n - c0 < QP ? n - c0 : QP;
        /* (a tail block reads the source's padding rows; their sums are not stored) */
        qk_4x16(x + (size_t)r0 * k, k, packed + (size_t)pi * kq * QP * 4, kq,
                acc + (size_t)r0 * n + c0, n, nr, nc);
    }
}

void hs__cpu_qgemm_avx2(const uint8_t *x, const int8_t *packed, int32_t *acc, int rows, int n,
                        int k, int threads)
{
#pragma omp parallel num_threads(threads) if (threads > 1)
    hs__cpu_qgemm_avx2_team(x, packed, acc, rows, n, k, threads);
}
