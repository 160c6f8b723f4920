/* Small-M GEMM with pre-packed weights (AVX-512).
 *
 * For the few-token batches of interactive queries (M = tokens <= a few dozen), a general
 * sgemm spends much of its time packing the weight matrix on every call. Here the weights are
 * packed once at stage preparation into panels of 32 output columns, k-major
 * ([n/32][k][32], zero-padded), and a register-blocked 8x32 micro-kernel streams each panel
 * once per 8 rows of X: 16 accumulators, two weight loads and eight broadcasts per k. */
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"

#define PANEL 32
#define MR    8

int hs__cpu_small_gemm_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* Up to how many rows the packed kernel beats oneDNN's sgemm, by the ISA class oneDNN finds
 * (its sgemm's kernels differ by it), the first entry at or below it. Measured with bench_cpu
 * (MiniLM, 2 threads; the single-sequence path splits each GEMM across the threads, a batch
 * gives each thread its own slice of sequences): on an AMX machine sgemm overtakes at about
 * 64 rows; on AVX-512 without AMX (Zen 4) the packed kernel stays ahead to 256 rows and
 * beyond (1x128: about 1.4x less CPU time than sgemm), and sgemm wins at 2,048 rows a thread
 * (32x128). Below AVX-512 the kernel is not built. */
static const struct {
    dnnl_cpu_isa_t isa;
    int rows;
} small_rows_by_isa[] = {
    {dnnl_cpu_isa_avx512_core_amx, 64},
    {dnnl_cpu_isa_avx512_core, 256},
};

int hs__cpu_small_gemm_rows_default(void)
{
    if (!hs__cpu_small_gemm_available()) return 0;
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    for (size_t i = 0; i < sizeof small_rows_by_isa / sizeof small_rows_by_isa[0]; i++) {
        const unsigned want = (unsigned)small_rows_by_isa[i].isa;
        if ((isa & want) == want) return small_rows_by_isa[i].rows;
    }
    return 0;
}

float *hs__cpu_pack_weights(const float *w, int n, int k)
{
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

__attribute__((target("avx512f"))) static void ukernel(const float *x, int ldx, const float *wp,
                                                       int k, float *y, int ldy, int rows, int cols,
                                                       const float *bias)
{
    __m512 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51, a60, a61, a70, a71;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = _mm512_setzero_ps();
    a40 = a41 = a50 = a51 = a60 = a61 = a70 = a71 = _mm512_setzero_ps();
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    const float *x4 = x + 4 * ldx, *x5 = x + 5 * ldx, *x6 = x + 6 * ldx, *x7 = x + 7 * ldx;
    for (int kk = 0; kk < k; kk++) {
        _mm_prefetch((const char *)(wp + (size_t)(kk + 8) * PANEL), _MM_HINT_T0);
        _mm_prefetch((const char *)(wp + (size_t)(kk + 8) * PANEL + 16), _MM_HINT_T0);
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
    __m512 acc[MR][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31},
                         {a40, a41}, {a50, a51}, {a60, a61}, {a70, a71}};
    __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < rows; r++) {
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, m0, _mm512_add_ps(acc[r][0], b0));
        _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16, m1, _mm512_add_ps(acc[r][1], b1));
    }
}

void hs__cpu_small_gemm(const float *x, const float *packed, const float *bias, float *y, int rows,
                        int n, int k, int act, int threads, float *pad)
{
    const int panels = (n + PANEL - 1) / PANEL;
    const int mblocks = (rows + MR - 1) / MR;
    const int tasks = panels * mblocks;
    /* Threads take chunks of consecutive tasks in turn (a chunk is one weight panel's row blocks
     * where there are enough panels, about four chunks a thread otherwise): a panel is read from
     * memory once, and a thread descheduled on a shared machine leaves the chunks it has not
     * started to the others instead of holding up a static share. Which thread computes a
     * block does not change its result. */
    int chunk = tasks / (4 * (threads > 0 ? threads : 1));
    chunk = chunk > mblocks ? mblocks : chunk < 1 ? 1 : chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk)
    for (int t = 0; t < tasks; t++) {
        const int pi = t / mblocks, mb = t % mblocks;
        const int r0 = mb * MR, nr = rows - r0 < MR ? rows - r0 : MR;
        const int c0 = pi * PANEL, nc = n - c0 < PANEL ? n - c0 : PANEL;
        const float *xs = x + (size_t)r0 * k;
        if (nr < MR) {
            /* tail rows: the kernel always reads 8 rows, so give it a zero-padded copy */
            float *buf = pad + (size_t)omp_get_thread_num() * MR * (size_t)k;
            memcpy(buf, xs, sizeof(float) * (size_t)nr * k);
            memset(buf + (size_t)nr * k, 0, sizeof(float) * (size_t)(MR - nr) * k);
            xs = buf;
        }
        float *ys = y + (size_t)r0 * n + c0;
        ukernel(xs, k, packed + (size_t)pi * PANEL * k, k, ys, n, nr, nc, bias ? bias + c0 : NULL);
        if (act >= 0)
            for (int r = 0; r < nr; r++)
                hs__cpu_activation(ys + (size_t)r * n, nc, (enum hs_act_fn)act);
    }
}
