/* Self-attention for one (sequence, head) with bf16 products (avx512_bf16), for the reduced
 * precision lanes (int8, bf16) and head sizes 32 and 64. Q.K^T and P.V run as VDPBF16PS, two
 * products per fp32 lane; scores, softmax and the accumulators stay fp32. K is packed once per
 * (sequence, head) as channel pairs [d/2][lp][2] and V as key pairs [lp/2][d][2], so one
 * 32-bit broadcast of a q (or p) pair feeds 16 lanes. The f32 lane keeps attention_avx512.c. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu/kernels.h"
#include "engine/cpu/softmax512.h"

#define QB 4
#define KB 64

#define LOWP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* Softmax of one score row over its len real keys, written back as bf16 over the row's own
 * storage (element j at byte 2j; each block is loaded before its narrower store), zero from
 * len to the next even count so P.V may run over whole key pairs. */
LOWP_TARGET static void softmax_to_bf16(float *row, int len, int lp)
{
    const int full = len / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (len - full)) - 1);
    const __m512 inv = _mm512_set1_ps(hs__softmax_num512(row, len));
    uint16_t *pb = (uint16_t *)row;
    for (int j = 0; j < full; j += 16) {
        __m256bh b = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(row + j), inv));
        _mm256_storeu_si256((__m256i *)(pb + j), (__m256i)b);
    }
    if (tail) {
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), inv);
        __m256bh b = _mm512_cvtneps_pbh(v);
        _mm256_mask_storeu_epi16(pb + full, tail, (__m256i)b);
    }
    if (len & 1) pb[len] = 0; /* the pair partner of an odd last key */
}

#define HS__DEFINE_ATTN_BF16(D)                                                                    \
    LOWP_TARGET static void attn_bf16_d##D(const float *qkv, float *ctx, int t0, int len, int h,   \
                                           int hidden, float *scratch)                             \
    {                                                                                              \
        enum { ND = D / 16, D2 = D / 2 };                                                          \
        const int stride = 3 * hidden;                                                             \
        const int lp = (len + KB - 1) / KB * KB;                                                   \
        uint32_t *kp = (uint32_t *)scratch;  /* [D2][lp] channel pairs */                          \
        uint32_t *vp = kp + (size_t)D2 * lp; /* [lp/2][D] key pairs */                             \
        float *s = scratch + (size_t)D * lp; /* [QB][lp] */                                        \
        const float scale = 1.0f / sqrtf((float)D);                                                \
        /* keys past len give scores softmax never reads: K needs no padding */                    \
        for (int j = 0; j < len; j++) {                                                            \
            const float *k = qkv + (size_t)(t0 + j) * stride + hidden + h * D;                     \
            uint32_t w[D2];                                                                        \
            for (int c = 0; c < D; c += 32)                                                        \
                _mm512_storeu_si512(w + c / 2,                                                     \
                                    (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + c + 16),      \
                                                                 _mm512_loadu_ps(k + c)));         \
            for (int c2 = 0; c2 < D2; c2++) kp[(size_t)c2 * lp + j] = w[c2];                       \
        }                                                                                          \
        /* V as (key 2i, key 2i + 1) pairs per channel; an odd last key pairs with zero */         \
        for (int j = 0; j < len; j += 2) {                                                         \
            const float *v0 = qkv + (size_t)(t0 + j) * stride + 2 * hidden + h * D;                \
            const float *v1 = v0 + stride;                                                         \
            for (int c = 0; c < D; c += 16) {                                                      \
                __m512i lo =                                                                       \
                    _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(v0 + c)));   \
                __m512i hi = j + 1 < len ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(      \
                                               _mm512_loadu_ps(v1 + c)))                           \
                                         : _mm512_setzero_si512();                                 \
                _mm512_storeu_si512(vp + (size_t)(j / 2) * D + c,                                  \
                                    _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));               \
            }                                                                                      \
        }                                                                                          \
        for (int i0 = 0; i0 < len; i0 += QB) {                                                     \
            const int qn = len - i0 < QB ? len - i0 : QB;                                          \
            uint32_t qb[QB][D2]; /* scaled q as bf16 pairs */                                      \
            for (int qi = 0; qi < QB; qi++) {                                                      \
                const float *q = qkv + (size_t)(t0 + i0 + (qi < qn ? qi : 0)) * stride + h * D;    \
                const __m512 vs = _mm512_set1_ps(scale);                                           \
                for (int c = 0; c < D; c += 32)                                                    \
                    _mm512_storeu_si512(qb[qi] + c / 2,                                            \
                                        (__m512i)_mm512_cvtne2ps_pbh(                              \
                                            _mm512_mul_ps(_mm512_loadu_ps(q + c + 16), vs),        \
                                            _mm512_mul_ps(_mm512_loadu_ps(q + c), vs)));           \
            }                                                                                      \
            for (int jb = 0; jb < lp; jb += KB) {                                                  \
                __m512 acc[QB][4];                                                                 \
                for (int qi = 0; qi < QB; qi++)                                                    \
                    for (int v = 0; v < 4; v++) acc[qi][v] = _mm512_setzero_ps();                  \
                for (int c2 = 0; c2 < D2; c2++) {                                                  \
                    const uint32_t *kr = kp + (size_t)c2 * lp + jb;                                \
                    __m512bh k0 = (__m512bh)_mm512_loadu_si512(kr);                                \
                    __m512bh k1 = (__m512bh)_mm512_loadu_si512(kr + 16);                           \
                    __m512bh k2 = (__m512bh)_mm512_loadu_si512(kr + 32);                           \
                    __m512bh k3 = (__m512bh)_mm512_loadu_si512(kr + 48);                           \
                    for (int qi = 0; qi < QB; qi++) {                                              \
                        __m512bh b = (__m512bh)_mm512_set1_epi32((int)qb[qi][c2]);                 \
                        acc[qi][0] = _mm512_dpbf16_ps(acc[qi][0], b, k0);                          \
                        acc[qi][1] = _mm512_dpbf16_ps(acc[qi][1], b, k1);                          \
                        acc[qi][2] = _mm512_dpbf16_ps(acc[qi][2], b, k2);                          \
                        acc[qi][3] = _mm512_dpbf16_ps(acc[qi][3], b, k3);                          \
                    }                                                                              \
                }                                                                                  \
                for (int qi = 0; qi < QB; qi++)                                                    \
                    for (int v = 0; v < 4; v++)                                                    \
                        _mm512_storeu_ps(s + (size_t)qi * lp + jb + 16 * v, acc[qi][v]);           \
            }                                                                                      \
            for (int qi = 0; qi < QB; qi++) {                                                      \
                if (qi < qn)                                                                       \
                    softmax_to_bf16(s + (size_t)qi * lp, len, lp);                                 \
                else                                                                               \
                    memset(s + (size_t)qi * lp, 0, (size_t)lp * sizeof(uint16_t));                 \
            }                                                                                      \
            __m512 o[QB][ND];                                                                      \
            for (int qi = 0; qi < QB; qi++)                                                        \
                for (int v = 0; v < ND; v++) o[qi][v] = _mm512_setzero_ps();                       \
            for (int j2 = 0; j2 < (len + 1) / 2; j2++) {                                           \
                const uint32_t *vr = vp + (size_t)j2 * D;                                          \
                __m512bh vv[ND];                                                                   \
                for (int v = 0; v < ND; v++) vv[v] = (__m512bh)_mm512_loadu_si512(vr + 16 * v);    \
                for (int qi = 0; qi < QB; qi++) {                                                  \
                    uint32_t pp;                                                                   \
                    memcpy(&pp, (const uint16_t *)(s + (size_t)qi * lp) + 2 * j2, sizeof pp);      \
                    __m512bh b = (__m512bh)_mm512_set1_epi32((int)pp);                             \
                    for (int v = 0; v < ND; v++) o[qi][v] = _mm512_dpbf16_ps(o[qi][v], b, vv[v]);  \
                }                                                                                  \
            }                                                                                      \
            for (int qi = 0; qi < qn; qi++) {                                                      \
                float *out = ctx + (size_t)(t0 + i0 + qi) * hidden + h * D;                        \
                for (int v = 0; v < ND; v++) _mm512_storeu_ps(out + 16 * v, o[qi][v]);             \
            }                                                                                      \
        }                                                                                          \
    }

HS__DEFINE_ATTN_BF16(32)
HS__DEFINE_ATTN_BF16(64)

int hs__cpu_attn_bf16(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                      float *scratch)
{
    if (d == 32)
        attn_bf16_d32(qkv, ctx, t0, len, h, hidden, scratch);
    else if (d == 64)
        attn_bf16_d64(qkv, ctx, t0, len, h, hidden, scratch);
    else
        return -1;
    return 0;
}
