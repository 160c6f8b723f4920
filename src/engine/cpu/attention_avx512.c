/* Self-attention for one (sequence, head) with AVX-512 register blocking, for head sizes 32
 * and 64 (MiniLM, bge-small, BERT-base). Scores are computed for 4 queries x 64 keys at a time
 * in 16 accumulators from K transposed once per (sequence, head); softmax runs on the score
 * rows; P.V accumulates 4 queries x head_dim in registers. Without AVX-512 the AVX2 kernel
 * (attention_avx2.c) takes head sizes that are multiples of 16; the portable attn_head in
 * kernels.c stays the path for the rest. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/cpu/kernels.h"

#define QB 4
#define KB 64

/* Scratch per thread (floats): K^T [d][lp] + scores [QB][lp], lp = len rounded up to 64. */
int64_t hs__cpu_attn_avx512_scratch_floats(int head_dim, int seq_max)
{
    int64_t lp = ((int64_t)seq_max + KB - 1) / KB * KB;
    return (int64_t)head_dim * lp + QB * lp + 16;
}

__attribute__((target("avx512f"))) static inline __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#define HS__DEFINE_ATTN(D)                                                                         \
    __attribute__((target("avx512f"))) static void attn_d##D(                                      \
        const float *qkv, float *ctx, int t0, int len, int h, int hidden, float *scratch)          \
    {                                                                                              \
        enum { ND = D / 16 };                                                                      \
        const int stride = 3 * hidden;                                                             \
        const int lp = (len + KB - 1) / KB * KB;                                                   \
        float *kt = scratch, *s = scratch + (size_t)D * lp;                                        \
        const float scale = 1.0f / sqrtf((float)D);                                                \
        for (int j = 0; j < len; j++) {                                                            \
            const float *k = qkv + (size_t)(t0 + j) * stride + hidden + h * D;                     \
            for (int c = 0; c < D; c++) kt[(size_t)c * lp + j] = k[c];                             \
        }                                                                                          \
        for (int c = 0; c < D; c++)                                                                \
            for (int j = len; j < lp; j++) kt[(size_t)c * lp + j] = 0.0f;                          \
        for (int i0 = 0; i0 < len; i0 += QB) {                                                     \
            const int qn = len - i0 < QB ? len - i0 : QB;                                          \
            const float *q[QB];                                                                    \
            for (int qi = 0; qi < QB; qi++)                                                        \
                q[qi] = qkv + (size_t)(t0 + i0 + (qi < qn ? qi : 0)) * stride + h * D;             \
            /* scores: QB queries x KB keys per block */                                           \
            for (int jb = 0; jb < lp; jb += KB) {                                                  \
                __m512 acc[QB][4];                                                                 \
                for (int qi = 0; qi < QB; qi++)                                                    \
                    for (int v = 0; v < 4; v++) acc[qi][v] = _mm512_setzero_ps();                  \
                for (int c = 0; c < D; c++) {                                                      \
                    const float *kr = kt + (size_t)c * lp + jb;                                    \
                    __m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16);                \
                    __m512 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);           \
                    for (int qi = 0; qi < QB; qi++) {                                              \
                        __m512 b = _mm512_set1_ps(q[qi][c]);                                       \
                        acc[qi][0] = _mm512_fmadd_ps(b, k0, acc[qi][0]);                           \
                        acc[qi][1] = _mm512_fmadd_ps(b, k1, acc[qi][1]);                           \
                        acc[qi][2] = _mm512_fmadd_ps(b, k2, acc[qi][2]);                           \
                        acc[qi][3] = _mm512_fmadd_ps(b, k3, acc[qi][3]);                           \
                    }                                                                              \
                }                                                                                  \
                const __m512 vs = _mm512_set1_ps(scale);                                           \
                for (int qi = 0; qi < QB; qi++)                                                    \
                    for (int v = 0; v < 4; v++)                                                    \
                        _mm512_storeu_ps(s + (size_t)qi * lp + jb + 16 * v,                        \
                                         _mm512_mul_ps(acc[qi][v], vs));                           \
            }                                                                                      \
            /* softmax over the len real keys of each row (padding beyond len is ignored) */       \
            const int full = len / 16 * 16;                                                        \
            const __mmask16 tail = (__mmask16)((1u << (len - full)) - 1);                          \
            for (int qi = 0; qi < qn; qi++) {                                                      \
                float *row = s + (size_t)qi * lp;                                                  \
                __m512 mx = _mm512_set1_ps(-INFINITY);                                             \
                for (int j = 0; j < full; j += 16)                                                 \
                    mx = _mm512_max_ps(mx, _mm512_loadu_ps(row + j));                              \
                if (tail)                                                                          \
                    mx = _mm512_max_ps(                                                            \
                        mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, row + full));    \
                const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));                         \
                __m512 sum = _mm512_setzero_ps();                                                  \
                for (int j = 0; j < full; j += 16) {                                               \
                    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(row + j), m));                 \
                    _mm512_storeu_ps(row + j, e);                                                  \
                    sum = _mm512_add_ps(sum, e);                                                   \
                }                                                                                  \
                if (tail) {                                                                        \
                    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + full), m));  \
                    e = _mm512_maskz_mov_ps(tail, e);                                              \
                    _mm512_mask_storeu_ps(row + full, tail, e);                                    \
                    sum = _mm512_add_ps(sum, e);                                                   \
                }                                                                                  \
                const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));               \
                for (int j = 0; j < full; j += 16)                                                 \
                    _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), inv));       \
                if (tail)                                                                          \
                    _mm512_mask_storeu_ps(                                                         \
                        row + full, tail,                                                          \
                        _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), inv));              \
            }                                                                                      \
            /* P.V: QB queries x D outputs in registers */                                         \
            __m512 o[QB][ND];                                                                      \
            for (int qi = 0; qi < QB; qi++)                                                        \
                for (int v = 0; v < ND; v++) o[qi][v] = _mm512_setzero_ps();                       \
            for (int j = 0; j < len; j++) {                                                        \
                const float *vr = qkv + (size_t)(t0 + j) * stride + 2 * hidden + h * D;            \
                __m512 vv[ND];                                                                     \
                for (int v = 0; v < ND; v++) vv[v] = _mm512_loadu_ps(vr + 16 * v);                 \
                for (int qi = 0; qi < QB; qi++) {                                                  \
                    __m512 p = _mm512_set1_ps(s[(size_t)qi * lp + j]);                             \
                    for (int v = 0; v < ND; v++) o[qi][v] = _mm512_fmadd_ps(p, vv[v], o[qi][v]);   \
                }                                                                                  \
            }                                                                                      \
            for (int qi = 0; qi < qn; qi++) {                                                      \
                float *out = ctx + (size_t)(t0 + i0 + qi) * hidden + h * D;                        \
                for (int v = 0; v < ND; v++) _mm512_storeu_ps(out + 16 * v, o[qi][v]);             \
            }                                                                                      \
        }                                                                                          \
    }

HS__DEFINE_ATTN(32)
HS__DEFINE_ATTN(64)

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
