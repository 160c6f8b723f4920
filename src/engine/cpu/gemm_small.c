/* Small-M GEMM with pre-packed weights (AVX-512, and AVX2 + FMA).
 *
 * For the few-token batches of interactive queries (M = tokens <= a few dozen), a general
 * sgemm spends much of its time packing the weight matrix on every call, and at so few rows it
 * streams the weights from memory at a low rate. Here the weights are packed once at stage
 * preparation into panels of output columns, k-major ([n/panel][k][panel], zero-padded), and a
 * register-blocked micro-kernel streams each panel once per block of rows of X:
 *   - AVX-512: panels of 32 columns, 8 x 32 blocks (16 accumulators, two weight loads and eight
 *     broadcasts per k);
 *   - AVX2 + FMA: panels of 24 columns, 4 x 24 blocks (12 accumulators, three weight loads and
 *     four broadcasts per k), which tile the 16-token query with no padded rows.
 * Its epilogue adds the bias and the activation to the accumulators, so the layer with one (the
 * FFN's input) also takes this kernel in large batches on AVX-512 (act_k below), there in
 * super-blocks of 64 rows that stay in L2 while every panel streams past them.
 * Each output is one FMA chain over k in order, whatever the rows, threads or tile position, so
 * a row's result does not depend on what else is in the batch. */
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"

#define MR_MAX  8  /* the most rows a micro-kernel reads (the pad holds MR_MAX rows a thread) */
#define SB_ROWS 64 /* rows a super-block (hs__cpu_small_gemm) */

/* Both kernels apply the activation to their accumulators before storing them, with the same
 * vector functions as hs__cpu_activation at their width (vmath.h; its row loops go unused
 * here). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wpsabi" /* the vector helpers are always inlined */
#define HS_VL    16
#define HS_VT    __attribute__((target("avx512f")))
#define HS_VN(x) x##_512
#include "engine/cpu/vmath.h"
#define HS_VL    8
#define HS_VT    __attribute__((target("avx2,fma")))
#define HS_VN(x) x##_256
#include "engine/cpu/vmath.h"
#pragma GCC diagnostic pop

static int has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static int has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int hs__cpu_small_gemm_panel(void)
{
    return has_avx512() ? 32 : has_avx2() ? 24 : 0;
}

int hs__cpu_small_gemm_available(void)
{
    return hs__cpu_small_gemm_panel() > 0;
}

/* Up to how many rows the packed kernel beats oneDNN's sgemm, by the ISA class oneDNN finds
 * (its sgemm's kernels differ by it), the first entry at or below it. Measured with bench_cpu
 * (MiniLM, 2 threads; the single-sequence path splits each GEMM across the threads, a batch
 * gives each thread its own slice of sequences): on an AMX machine sgemm overtakes at about
 * 64 rows; on AVX-512 without AMX (Zen 4) the packed kernel stays ahead to 256 rows and
 * beyond (1x128: about 1.4x less CPU time than sgemm), and sgemm wins at 2,048 rows a thread
 * (32x128). On AVX2 + FMA (Zen 3), where the 4 x 24 kernel runs, it is ahead to 512 rows
 * (1x16: 4.9 -> 2.9 ms, 1x128: 19.3 -> 17.8 ms, 8x64: 69 -> 66 ms), even at 1,024 - 2,048, and
 * 5 % behind at 32x128: at a few rows sgemm streams the model's weights (42 MB for MiniLM,
 * more than the L3) at a low rate and packs them on every call. Below AVX2 there is none.
 * act_k: a layer with an activation (the FFN's input layer) and at most this many inputs takes
 * the packed kernel at every batch size, since its epilogue adds the bias and the activation
 * while the block is in registers, where sgemm needs a pass over its output after it. On
 * AVX-512 without AMX (Intel Xeon, VNNI), one thread, 2,048 rows: MiniLM's FFN input (k = 384)
 * 17.0-17.2 ms packed (in 64-row super-blocks) against 18.4-19.1 for sgemm and the pass;
 * BERT-base's (k = 768) 66-68 ms against 64-66.5, so there it stays on sgemm. 0: not measured. */
static const struct {
    dnnl_cpu_isa_t isa;
    int rows;
    int act_k;
} small_rows_by_isa[] = {
    {dnnl_cpu_isa_avx512_core_amx, 64, 0},
    {dnnl_cpu_isa_avx512_core, 256, 512},
    {dnnl_cpu_isa_avx2, 512, 0},
};

/* The table's entry for this CPU; -1 where the packed kernel does not run. */
static int small_entry(void)
{
    if (!hs__cpu_small_gemm_available()) return -1;
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    for (size_t i = 0; i < sizeof small_rows_by_isa / sizeof small_rows_by_isa[0]; i++) {
        const unsigned want = (unsigned)small_rows_by_isa[i].isa;
        if ((isa & want) == want) return (int)i;
    }
    return -1;
}

int hs__cpu_small_gemm_act_k_default(void)
{
    const int i = small_entry();
    return i < 0 ? 0 : small_rows_by_isa[i].act_k;
}

int hs__cpu_small_gemm_rows_default(void)
{
    const int i = small_entry();
    return i < 0 ? 0 : small_rows_by_isa[i].rows;
}

float *hs__cpu_pack_weights(const float *w, int n, int k)
{
    const int PANEL = hs__cpu_small_gemm_panel();
    if (PANEL <= 0) return NULL;
    const int panels = (n + PANEL - 1) / PANEL;
    float *p = hs_malloc_aligned(sizeof(float) * (size_t)panels * PANEL * (size_t)k, 64);
    if (!p) return NULL;
    for (int pi = 0; pi < panels; pi++) {
        float *dst = p + (size_t)pi * PANEL * k;
        for (int kk = 0; kk < k; kk++)
            for (int c = 0; c < PANEL; c++) {
                int col = pi * PANEL + c;
                dst[(size_t)kk * PANEL + c] = col < n ? w[(size_t)col * k + kk] : 0.0f;
            }
    }
    return p;
}

#define PANEL 32
__attribute__((target("avx512f"))) static void ukernel_avx512(const float *x, int ldx,
                                                              const float *wp, int k, float *y,
                                                              int ldy, int rows, int cols,
                                                              const float *bias, int act)
{
    __m512 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51, a60, a61, a70, a71;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = _mm512_setzero_ps();
    a40 = a41 = a50 = a51 = a60 = a61 = a70 = a71 = _mm512_setzero_ps();
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    const float *x4 = x + 4 * ldx, *x5 = x + 5 * ldx, *x6 = x + 6 * ldx, *x7 = x + 7 * ldx;
    for (int kk = 0; kk < k; kk++) {
        _mm_prefetch((const char *)(wp + (size_t)(kk + 8) * PANEL), _MM_HINT_T0);
        _mm_prefetch((const char *)(wp + (size_t)(kk + 8) * PANEL + 16), _MM_HINT_T0);
        /* and into L2 from 96 k further on (12 KiB; past the panel's end, into the next one,
         * which this thread takes next): the weights come from L3 or memory each batch, and
         * the hardware's stream alone did not keep up (1 x 16 2.0 -> 1.8 ms, 1 x 128 12.0 ->
         * 11.4, distances 48-192 alike) */
        _mm_prefetch((const char *)(wp + (size_t)(kk + 96) * PANEL), _MM_HINT_T1);
        _mm_prefetch((const char *)(wp + (size_t)(kk + 96) * PANEL + 16), _MM_HINT_T1);
        const __m512 w0 = _mm512_load_ps(wp + (size_t)kk * PANEL);
        const __m512 w1 = _mm512_load_ps(wp + (size_t)kk * PANEL + 16);
        __m512 b;
#define HS__ROW(r)                                                                                 \
    b = _mm512_set1_ps(x##r[kk]);                                                                  \
    a##r##0 = _mm512_fmadd_ps(b, w0, a##r##0);                                                     \
    a##r##1 = _mm512_fmadd_ps(b, w1, a##r##1);
        HS__ROW(0) HS__ROW(1) HS__ROW(2) HS__ROW(3) HS__ROW(4) HS__ROW(5) HS__ROW(6) HS__ROW(7)
#undef HS__ROW
    }
    __m512 acc[8][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31},
                        {a40, a41}, {a50, a51}, {a60, a61}, {a70, a71}};
    __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < rows; r++) {
        const __m512 o0 = (__m512)v_act_512((vf_512)_mm512_add_ps(acc[r][0], b0), act);
        const __m512 o1 = (__m512)v_act_512((vf_512)_mm512_add_ps(acc[r][1], b1), act);
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, m0, o0);
        _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16, m1, o1);
    }
}

#undef PANEL

/* AVX2: 4 rows x 24 columns. Columns past cols (the last panel's zero padding) are computed
 * and not stored. */
__attribute__((target("avx2,fma"))) static void ukernel_avx2(const float *x, int ldx,
                                                             const float *wp, int k, float *y,
                                                             int ldy, int rows, int cols,
                                                             const float *bias, int act)
{
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
    __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    for (int kk = 0; kk < k; kk++) {
        const float *b = wp + (size_t)kk * 24;
        _mm_prefetch((const char *)(b + 8 * 24), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 8 * 24 + 16), _MM_HINT_T0);
        const __m256 w0 = _mm256_load_ps(b), w1 = _mm256_load_ps(b + 8);
        const __m256 w2 = _mm256_load_ps(b + 16);
        __m256 t;
#define HS__ROW(r)                                                                                 \
    t = _mm256_broadcast_ss(x##r + kk);                                                            \
    a##r##0 = _mm256_fmadd_ps(t, w0, a##r##0);                                                     \
    a##r##1 = _mm256_fmadd_ps(t, w1, a##r##1);                                                     \
    a##r##2 = _mm256_fmadd_ps(t, w2, a##r##2);
        HS__ROW(0) HS__ROW(1) HS__ROW(2) HS__ROW(3)
#undef HS__ROW
    }
    const __m256 acc[4][3] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22}, {a30, a31, a32}};
    float bb[24] = {0};
    if (bias) memcpy(bb, bias, sizeof(float) * (size_t)(cols < 24 ? cols : 24));
    const __m256 bv[3] = {_mm256_loadu_ps(bb), _mm256_loadu_ps(bb + 8), _mm256_loadu_ps(bb + 16)};
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * ldy;
        for (int v = 0; v < 3; v++) {
            const __m256 o = (__m256)v_act_256((vf_256)_mm256_add_ps(acc[r][v], bv[v]), act);
            const int left = cols - 8 * v; /* columns of this vector to store */
            if (left >= 8) {
                _mm256_storeu_ps(yr + 8 * v, o);
            } else if (left > 0) {
                float tmp[8];
                _mm256_storeu_ps(tmp, o);
                memcpy(yr + 8 * v, tmp, sizeof(float) * (size_t)left);
            }
        }
    }
}

void hs__cpu_small_gemm(const float *x, const float *packed, const float *bias, float *y, int rows,
                        int n, int k, int act, int threads, float *pad)
{
    const int wide = has_avx512();
    const int PANEL = wide ? 32 : 24, MR = wide ? 8 : 4;
    const int panels = (n + PANEL - 1) / PANEL;
    const int mblocks = (rows + MR - 1) / MR;
    /* Row blocks a super-block. AVX-512, more than 256 rows, k <= 512: all panels run over 64
     * rows before the next 64, which stay in L1 / L2 (96 KiB at k = 384) while the panels
     * stream past them. At 2,048 rows and k = 384 (one thread) that took MiniLM's FFN input
     * layer from 130 to 141 GFLOP/s. At k = 1536 (a 192 KiB panel, held in L2 while the rows
     * stream) it lost 3 %, and at 128 rows (1 x 128, both threads) 3 %, as the weights then
     * stream from memory once a super-block: those keep one super-block, as before. */
    const int sbm = wide && k <= 512 && rows > 4 * SB_ROWS ? SB_ROWS / MR : mblocks;
    const int sbs = (mblocks + sbm - 1) / sbm;
    const int tasks = sbs * panels * sbm;
    /* Guided chunks of whole panels (all their row blocks, in turn: a panel is read from memory
     * once): the first chunk a thread takes is its share of the rest, so each thread streams a
     * long run of consecutive panels, which the hardware prefetcher follows, and the chunks
     * shrink towards the end, so a thread descheduled on a shared machine leaves what it has
     * not started to the others. A few rows are bound by that stream (the weights come from L3
     * or memory each batch): with chunks of one panel's row blocks taken in turn, as before,
     * each thread's run broke at every chunk, and two threads ran a 16-row int8 GEMM only
     * 1.4x faster than one. Which thread computes a block does not change its result. */
#pragma omp parallel for num_threads(threads) schedule(guided, sbm)
    for (int t = 0; t < tasks; t++) {
        const int sb = t / (panels * sbm), in = t % (panels * sbm);
        const int pi = in / sbm, mb = sb * sbm + in % sbm;
        if (mb >= mblocks) continue; /* the last super-block's missing rows */
        const int r0 = mb * MR, nr = rows - r0 < MR ? rows - r0 : MR;
        const int c0 = pi * PANEL, nc = n - c0 < PANEL ? n - c0 : PANEL;
        const float *xs = x + (size_t)r0 * k;
        if (nr < MR) {
            /* tail rows: the kernel always reads MR rows, so give it a zero-padded copy */
            float *buf = pad + (size_t)omp_get_thread_num() * MR_MAX * (size_t)k;
            memcpy(buf, xs, sizeof(float) * (size_t)nr * k);
            memset(buf + (size_t)nr * k, 0, sizeof(float) * (size_t)(MR - nr) * k);
            xs = buf;
        }
        float *ys = y + (size_t)r0 * n + c0;
        const float *wp = packed + (size_t)pi * PANEL * k;
        /* bias and activation in the kernel's epilogue */
        if (wide)
            ukernel_avx512(xs, k, wp, k, ys, n, nr, nc, bias ? bias + c0 : NULL, act);
        else
            ukernel_avx2(xs, k, wp, k, ys, n, nr, nc, bias ? bias + c0 : NULL, act);
    }
}
