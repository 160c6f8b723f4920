/* The engine's own int8 GEMM, acc[rows, n] (s32) = x[rows, k] (u8) * W[n, k]^T (s8), on weights
 * packed once, in two kernels chosen by what the CPU reports (hs__cpu_qgemm_isa):
 *
 * - AVX-512 VNNI (Ice Lake / Sapphire Rapids-class Xeons, Zen 4): vpdpbusd multiplies 4 u8 x s8
 *   pairs and adds their sum to an int32 lane, 64 products an instruction, with no intermediate
 *   rounding or saturation. A block of 8 rows x 3 panels (48 columns) keeps 24 accumulators in
 *   zmm registers; each k-quad loads 3 panel vectors and broadcasts 8 rows' 4 source bytes.
 * - AVX2 + FMA without an int8 dot product (Zen 3, Haswell to Cascade Lake without VNNI):
 *   vpmaddubsw (u8 x s8, pairs k = 2i, 2i + 1 summed in int16: the pairing and the saturation
 *   bound of oneDNN's AVX2 kernels, which the pair-safe weight scales of hs__ql_weights_make
 *   keep from saturating), vpmaddwd by ones (the two pairs of a quad into int32) and vpaddd
 *   into 8 accumulators of a 4-row x 16-column block: two multiply uops per 32 products.
 *
 * Why not oneDNN 2.6's int8 matmul: on AVX2 it lost to this at every size measured
 * (qlinear.c, QL_OWN_ROWS_DEFAULT), and on both classes a layer here runs quantization, GEMM and
 * epilogue as worksharing loops of one parallel region of the engine's team, where each oneDNN
 * call forks and joins its own (at a few rows most of a small batch's time: 14 % of a 1x16
 * MiniLM batch's samples in libgomp waits, 4 % in libdnnl's driver, on AVX2).
 *
 * Both kernels read the same panels of 16 output columns, k-quad-major ([n/16][k/4][16][4]
 * bytes, zero-padded past n): one 64-byte vector holds 16 columns x 4 inputs (AVX2 loads it as
 * two halves of 8 columns). Every accumulator is an exact integer sum, so the result is
 * bit-identical to oneDNN's whichever kernel, thread or block computes it. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/qlinear.h"
#include "engine/cpu/vnni512.h"

#define QP 16 /* columns a panel */
#define QM 4  /* rows an AVX2 block */
#define VM 8  /* rows a VNNI block */
#define VP 3  /* panels a VNNI block */

int64_t hs__cpu_qgemm_pack_bytes(int n, int k)
{
    return (int64_t)((n + QP - 1) / QP) * QP * (int64_t)k;
}

int8_t *hs__cpu_qgemm_pack(const int8_t *w, int n, int k)
{
    if (n <= 0 || k <= 0 || k % 4) return NULL;
    int8_t *p = hs_malloc_aligned((size_t)hs__cpu_qgemm_pack_bytes(n, k), 64);
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

void hs__cpu_qgemm_unpack(const int8_t *packed, int n, int k, int8_t *w)
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

/* A block of MR (<= VM) rows x NP (<= VP) panels; MR and NP are constants at each call, so the
 * conditions fold away and the 24 accumulators are named registers (arrays of them were kept on
 * the stack by gcc 12). Rows past `rows` read row 0 again (their sums are not stored), so x is
 * never read past its last row. cols: the last panel's columns (the others are whole). */
VNNI_TARGET static inline __attribute__((always_inline)) void
vk_block(const int MR, const int NP, const uint8_t *x, int ldx, const int8_t *wp, int kq,
         int32_t *y, int ldy, int rows, int cols)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z;
    __m512i c30 = z, c31 = z, c32 = z, c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z;
    __m512i c60 = z, c61 = z, c62 = z, c70 = z, c71 = z, c72 = z;
#define HS__XR(r) const uint8_t *x##r = x + (r < rows ? (size_t)(r)*ldx : 0)
    HS__XR(0);
    HS__XR(1);
    HS__XR(2);
    HS__XR(3);
    HS__XR(4);
    HS__XR(5);
    HS__XR(6);
    HS__XR(7);
#undef HS__XR
    const size_t pstride = (size_t)kq * QP * 4;
    const int8_t *w0 = wp, *w1 = wp + pstride, *w2 = wp + 2 * pstride;
    for (int q = 0; q < kq; q++) {
        const size_t o = (size_t)q * QP * 4;
        const __m512i b0 = _mm512_load_si512((const void *)(w0 + o));
        const __m512i b1 = NP > 1 ? _mm512_load_si512((const void *)(w1 + o)) : z;
        const __m512i b2 = NP > 2 ? _mm512_load_si512((const void *)(w2 + o)) : z;
        int32_t s;
        __m512i a;
#define HS__ROW(r)                                                                                 \
    if (MR > r) {                                                                                  \
        memcpy(&s, x##r + 4 * (size_t)q, 4);                                                       \
        a = _mm512_set1_epi32(s);                                                                  \
        c##r##0 = hs__dpbusd(c##r##0, a, b0);                                                      \
        if (NP > 1) c##r##1 = hs__dpbusd(c##r##1, a, b1);                                          \
        if (NP > 2) c##r##2 = hs__dpbusd(c##r##2, a, b2);                                          \
    }
        HS__ROW(0) HS__ROW(1) HS__ROW(2) HS__ROW(3) HS__ROW(4) HS__ROW(5) HS__ROW(6) HS__ROW(7)
#undef HS__ROW
    }
    const __mmask16 last = (__mmask16)((1u << cols) - 1u), all = (__mmask16)0xffff;
#define HS__ST(r)                                                                                  \
    if (MR > r && rows > r) {                                                                      \
        int32_t *yr = y + (size_t)(r)*ldy;                                                         \
        _mm512_mask_storeu_epi32(yr, NP == 1 ? last : all, c##r##0);                               \
        if (NP > 1) _mm512_mask_storeu_epi32(yr + QP, NP == 2 ? last : all, c##r##1);              \
        if (NP > 2) _mm512_mask_storeu_epi32(yr + 2 * QP, last, c##r##2);                          \
    }
    HS__ST(0) HS__ST(1) HS__ST(2) HS__ST(3) HS__ST(4) HS__ST(5) HS__ST(6) HS__ST(7)
#undef HS__ST
}

/* The block of MR rows for np (1-3) panels, each shape its own constant instance. */
VNNI_TARGET static inline __attribute__((always_inline)) void
vk_panels(const int MR, const uint8_t *x, int ldx, const int8_t *wp, int kq, int32_t *y, int ldy,
          int rows, int np, int cols)
{
    if (np == 3)
        vk_block(MR, 3, x, ldx, wp, kq, y, ldy, rows, cols);
    else if (np == 2)
        vk_block(MR, 2, x, ldx, wp, kq, y, ldy, rows, cols);
    else
        vk_block(MR, 1, x, ldx, wp, kq, y, ldy, rows, cols);
}

/* One task of the VNNI kernel: up to VM rows x up to VP panels, on an 8- or 4-row block. */
VNNI_TARGET static void vk_task(const uint8_t *x, int ldx, const int8_t *wp, int kq, int32_t *y,
                                int ldy, int rows, int np, int cols)
{
    if (rows > 4)
        vk_panels(8, x, ldx, wp, kq, y, ldy, rows, np, cols);
    else
        vk_panels(4, x, ldx, wp, kq, y, ldy, rows, np, cols);
}

static int cpu_has(int isa)
{
    __builtin_cpu_init();
    if (isa == HS_QGEMM_VNNI512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static void qk_4x16(const uint8_t *x, int ldx, const int8_t *wp, int kq, int32_t *y, int ldy,
                    int rows, int cols)
{
    (void)x, (void)ldx, (void)wp, (void)kq, (void)y, (void)ldy, (void)rows, (void)cols;
}
static void vk_task(const uint8_t *x, int ldx, const int8_t *wp, int kq, int32_t *y, int ldy,
                    int rows, int np, int cols)
{
    (void)x, (void)ldx, (void)wp, (void)kq, (void)y, (void)ldy, (void)rows, (void)np, (void)cols;
}
static int cpu_has(int isa)
{
    (void)isa;
    return 0;
}
#endif

int hs__cpu_qgemm_isa(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = cpu_has(HS_QGEMM_VNNI512) ? HS_QGEMM_VNNI512
                 : cpu_has(HS_QGEMM_AVX2)  ? HS_QGEMM_AVX2
                                           : HS_QGEMM_NONE;
    return cached;
}

int hs__cpu_qgemm_runs(int isa)
{
    static int cached[3] = {-1, -1, -1}; /* [isa] (the CPU does not change under the process) */
    if (isa != HS_QGEMM_VNNI512 && isa != HS_QGEMM_AVX2) return 0;
    int v = __atomic_load_n(&cached[isa], __ATOMIC_RELAXED);
    if (v < 0) {
        v = cpu_has(isa);
        __atomic_store_n(&cached[isa], v, __ATOMIC_RELAXED);
    }
    return v;
}

void hs__cpu_qgemm_team(int isa, const uint8_t *x, const int8_t *packed, int32_t *acc, int rows,
                        int n, int k, const struct hs_qgemm_epi *epi, int barrier)
{
    const int panels = (n + QP - 1) / QP, kq = k / 4;
    const size_t pbytes = (size_t)kq * QP * 4;
    const int vnni = isa == HS_QGEMM_VNNI512;
    const int bm = vnni ? VM : QM, bp = vnni ? VP : 1;
    const int mblocks = (rows + bm - 1) / bm, groups = (panels + bp - 1) / bp;
    const int tasks = groups * mblocks;
    /* as hs__cpu_small_gemm: guided chunks of whole panel groups (their row blocks, in turn:
     * a group's weights stay in L1 / L2 while its row blocks go by) */
#pragma omp for schedule(guided, mblocks) nowait
    for (int t = 0; t < tasks; t++) {
        const int g = t / mblocks, mb = t % mblocks;
        const int r0 = mb * bm, nr = rows - r0 < bm ? rows - r0 : bm;
        const int p0 = g * bp, np = panels - p0 < bp ? panels - p0 : bp;
        const int c0 = p0 * QP, lastc = n - (p0 + np - 1) * QP < QP ? n - (p0 + np - 1) * QP : QP;
        const uint8_t *xs = x + (size_t)r0 * k;
        int32_t *ys = acc + (size_t)r0 * n + c0;
        if (vnni)
            vk_task(xs, k, packed + (size_t)p0 * pbytes, kq, ys, n, nr, np, lastc);
        else /* (a tail block reads the source's padding rows; their sums are not stored) */
            qk_4x16(xs, k, packed + (size_t)p0 * pbytes, kq, ys, n, nr, lastc);
        if (epi) hs__cpu_dequant_block(ys, n, epi, r0, c0, nr, (np - 1) * QP + lastc);
    }
    if (barrier) {
#pragma omp barrier
    }
}

void hs__cpu_qgemm(int isa, const uint8_t *x, const int8_t *packed, int32_t *acc, int rows, int n,
                   int k, int threads, const struct hs_qgemm_epi *epi)
{
#pragma omp parallel num_threads(threads) if (threads > 1)
    hs__cpu_qgemm_team(isa, x, packed, acc, rows, n, k, epi, 0);
}
