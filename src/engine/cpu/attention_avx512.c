/* Self-attention for one (sequence, head) with AVX-512 register blocking, for head sizes 32
 * and 64 (MiniLM, bge-small, BERT-base). Scores are computed for 4 queries x 64 keys at a time
 * in 16 accumulators from K transposed once per (sequence, head) by gathers; softmax runs on the
 * score rows; P.V accumulates 4 queries x head_dim in registers over the unnormalized
 * exponentials, and each output row is scaled by its 1 / sum once. The accumulators are named
 * variables, not arrays, so they stay in registers whatever gcc's unrolling (at -O2 gcc 12 kept
 * the arrays on the stack). Without AVX-512 the AVX2 kernel (attention_avx2.c)
 * takes head sizes that are multiples of 16; the portable attn_head in kernels.c stays the path
 * for the rest. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/cpu/kernels.h"
#include "engine/cpu/softmax512.h"

#define QB 4
#define KB 64

/* Scratch per thread (floats): K^T [d][lp] + V [lp][d] + scores [QB][lp], lp = len rounded up
 * to 64. */
int64_t hs__cpu_attn_avx512_scratch_floats(int head_dim, int seq_max)
{
    int64_t lp = ((int64_t)seq_max + KB - 1) / KB * KB;
    return 2 * (int64_t)head_dim * lp + QB * lp + 16;
}

#define AVX512 __attribute__((target("avx512f")))

/* K^T [D][lp] of head h, 16 keys a gather, zeros past len (element-wise copies, a store to a
 * new line each, cost more than the gathers). */
AVX512 static inline void transpose_k(const float *k0, int stride, int len, int lp, int D,
                                      float *kt)
{
    const __m512i step =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(stride));
    for (int j = 0; j < lp; j += 16) {
        const int n = len - j < 16 ? (len - j > 0 ? len - j : 0) : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        const float *kj = k0 + (size_t)(n > 0 ? j : 0) * stride;
        for (int c = 0; c < D; c++)
            _mm512_storeu_ps(kt + (size_t)c * lp + j,
                             _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, kj + c, 4));
    }
}

/* Scores of QB queries (q0..q3) x KB keys from column jb of K^T, scaled, into s [QB][lp]. */
AVX512 static inline void scores_block(const float *q0, const float *q1, const float *q2,
                                       const float *q3, const float *kt, int lp, int jb, int D,
                                       float scale, float *s)
{
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    __m512 a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    for (int c = 0; c < D; c++) {
        const float *kr = kt + (size_t)c * lp + jb;
        const __m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16);
        const __m512 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);
        __m512 b;
#define HS__Q(r)                                                                                   \
    b = _mm512_set1_ps(q##r[c]);                                                                   \
    a##r##0 = _mm512_fmadd_ps(b, k0, a##r##0);                                                     \
    a##r##1 = _mm512_fmadd_ps(b, k1, a##r##1);                                                     \
    a##r##2 = _mm512_fmadd_ps(b, k2, a##r##2);                                                     \
    a##r##3 = _mm512_fmadd_ps(b, k3, a##r##3);
        HS__Q(0) HS__Q(1) HS__Q(2) HS__Q(3)
#undef HS__Q
    }
    const __m512 vs = _mm512_set1_ps(scale);
#define HS__S(r)                                                                                   \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb, _mm512_mul_ps(a##r##0, vs));                         \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 16, _mm512_mul_ps(a##r##1, vs));                    \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 32, _mm512_mul_ps(a##r##2, vs));                    \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 48, _mm512_mul_ps(a##r##3, vs));
    HS__S(0) HS__S(1) HS__S(2) HS__S(3)
#undef HS__S
}

/* One (sequence, head); D (32 or 64) is a constant at each call, so the P.V block's second
 * pair of output vectors folds away for 32. */
AVX512 static inline __attribute__((always_inline)) void
attn(const int D, const float *qkv, float *ctx, int t0, int len, int h, int hidden, float *scratch)
{
    const int stride = 3 * hidden;
    const int lp = (len + KB - 1) / KB * KB;
    float *kt = scratch, *vt = scratch + (size_t)D * lp, *s = vt + (size_t)D * lp;
    const float scale = 1.0f / sqrtf((float)D);
    transpose_k(qkv + (size_t)t0 * stride + hidden + h * D, stride, len, lp, D, kt);
    /* V's rows side by side: in place, one every 3 * hidden floats, a head's rows fall into a
     * few L1 sets (MiniLM: 4608 bytes apart, 8 of 64 sets) and evict each other while P.V
     * reads them for every block of queries */
    for (int j = 0; j < len; j++)
        memcpy(vt + (size_t)j * D, qkv + (size_t)(t0 + j) * stride + 2 * hidden + h * D,
               sizeof(float) * (size_t)D);
    /* the next head's K and V rows, into L2 while this one computes: a batch's q | k | v rows
     * were written by its QKV GEMM long before (beyond L2 at 32 x 128), a row's head is two
     * lines, and rows 4608 bytes apart defeat the hardware's streams; reading them in took a
     * sixth of this kernel's samples at 32 x 128 */
    if ((h + 1) * D < hidden)
        for (int j = 0; j < len; j++) {
            const char *r = (const char *)(qkv + (size_t)(t0 + j) * stride + hidden + (h + 1) * D);
            for (int b = 0; b < D * 4; b += 64) {
                _mm_prefetch(r + b, _MM_HINT_T1);
                _mm_prefetch(r + (size_t)hidden * 4 + b, _MM_HINT_T1);
            }
        }
    for (int i0 = 0; i0 < len; i0 += QB) {
        const int qn = len - i0 < QB ? len - i0 : QB;
        const float *q[QB];
        for (int qi = 0; qi < QB; qi++)
            q[qi] = qkv + (size_t)(t0 + i0 + (qi < qn ? qi : 0)) * stride + h * D;
        for (int jb = 0; jb < lp; jb += KB)
            scores_block(q[0], q[1], q[2], q[3], kt, lp, jb, D, scale, s);
        float inv[QB] = {0};
        for (int qi = 0; qi < qn; qi++) inv[qi] = hs__softmax_num512(s + (size_t)qi * lp, len);
        /* P.V: QB queries x D outputs (2 or 4 vectors each) in registers */
        const __m512 z = _mm512_setzero_ps();
        __m512 o00 = z, o01 = z, o02 = z, o03 = z, o10 = z, o11 = z, o12 = z, o13 = z;
        __m512 o20 = z, o21 = z, o22 = z, o23 = z, o30 = z, o31 = z, o32 = z, o33 = z;
        const float *s0 = s, *s1 = s + lp, *s2 = s + 2 * (size_t)lp, *s3 = s + 3 * (size_t)lp;
        const float *vr = vt;
        for (int j = 0; j < len; j++, vr += D) {
            const __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16);
            const __m512 v2 = D > 32 ? _mm512_loadu_ps(vr + 32) : z;
            const __m512 v3 = D > 32 ? _mm512_loadu_ps(vr + 48) : z;
            __m512 p;
#define HS__P(r)                                                                                   \
    p = _mm512_set1_ps(s##r[j]);                                                                   \
    o##r##0 = _mm512_fmadd_ps(p, v0, o##r##0);                                                     \
    o##r##1 = _mm512_fmadd_ps(p, v1, o##r##1);                                                     \
    if (D > 32) {                                                                                  \
        o##r##2 = _mm512_fmadd_ps(p, v2, o##r##2);                                                 \
        o##r##3 = _mm512_fmadd_ps(p, v3, o##r##3);                                                 \
    }
            HS__P(0) HS__P(1) HS__P(2) HS__P(3)
#undef HS__P
        }
#define HS__O(r)                                                                                   \
    if (qn > r) {                                                                                  \
        float *out = ctx + (size_t)(t0 + i0 + r) * hidden + h * D;                                 \
        const __m512 vi = _mm512_set1_ps(inv[r]);                                                  \
        _mm512_storeu_ps(out, _mm512_mul_ps(o##r##0, vi));                                         \
        _mm512_storeu_ps(out + 16, _mm512_mul_ps(o##r##1, vi));                                    \
        if (D > 32) {                                                                              \
            _mm512_storeu_ps(out + 32, _mm512_mul_ps(o##r##2, vi));                                \
            _mm512_storeu_ps(out + 48, _mm512_mul_ps(o##r##3, vi));                                \
        }                                                                                          \
    }
        HS__O(0) HS__O(1) HS__O(2) HS__O(3)
#undef HS__O
    }
}

AVX512 static void attn_d32(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                            float *scratch)
{
    attn(32, qkv, ctx, t0, len, h, hidden, scratch);
}

AVX512 static void attn_d64(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                            float *scratch)
{
    attn(64, qkv, ctx, t0, len, h, hidden, scratch);
}

int hs__cpu_attn_avx512(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                        float *scratch)
{
    if (d == 32)
        attn_d32(qkv, ctx, t0, len, h, hidden, scratch);
    else if (d == 64)
        attn_d64(qkv, ctx, t0, len, h, hidden, scratch);
    else
        return -1;
    return 0;
}
