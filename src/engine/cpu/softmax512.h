/* hetserve — the AVX-512 softmax pieces the attention kernels share (attention_avx512.c, f32;
 * attention_lowp.c, bf16 products). Internal to engine/cpu; include after <immintrin.h>. */
#ifndef HS_ENGINE_CPU_SOFTMAX512_H
#define HS_ENGINE_CPU_SOFTMAX512_H

#include <immintrin.h>
#include <math.h>

/* c5 r^5 + c4 r^4 + ... + c0, by Horner's rule in multiply-adds. */
__attribute__((target("avx512f"))) static inline __m512
hs__poly5_512(__m512 r, float c5, float c4, float c3, float c2, float c1, float c0)
{
    __m512 p = _mm512_set1_ps(c5);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c1));
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(c0));
}

/* exp(x) for x <= 0 (a softmax numerator's s - max), clamped at -87: 2^n times a degree-5
 * polynomial of the remainder r of x / ln 2, |r| <= ln 2 / 2, fitted for relative error
 * (1.7e-7 evaluated in float; the degree-7 Taylor series it replaces was 1e-9 before rounding,
 * beyond what float holds, and two multiply-adds a vector more). */
__attribute__((target("avx512f"))) static inline __m512 hs__exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    const __m512 p =
        hs__poly5_512(r, 0.00829027034342289f, 0.041897933930158615f, 0.1666763722896576f,
                      0.4999915063381195f, 0.9999997019767761f, 1.0f);
    return _mm512_scalef_ps(p, n);
}

/* 2^x for x <= 0 (a softmax numerator in base 2), clamped at -126 (2^-126, the least normal
 * float): 2^n times a degree-5 polynomial of the remainder r = x - n, |r| <= 1/2, fitted for
 * relative error (2.3e-7 evaluated in float). Scores already in base 2 (the queries times
 * log2(e) / sqrt(d)) skip exp's multiply by log2(e) and its two-part reduction: 9 operations a
 * vector against 11. */
__attribute__((target("avx512f"))) static inline __m512 hs__exp2_512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    const __m512 p = hs__poly5_512(r, 0.00132764713f, 0.00967554096f, 0.0555071309f, 0.240221202f,
                                   0.693146944f, 1.00000012f);
    return _mm512_scalef_ps(p, n);
}

/* m[r] = the maximum of score row r's len real keys, in every lane, for `rows` rows `lp` floats
 * apart, side by side (their reductions independent chains; rows is a constant at the call). */
__attribute__((target("avx512f"), always_inline)) static inline void
hs__rows_max512(const float *s, size_t lp, int len, const int rows, __m512 *m)
{
    const int full = len / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (len - full)) - 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < rows; r++) m[r] = ninf;
    for (int j = 0; j < full; j += 16)
        for (int r = 0; r < rows; r++) m[r] = _mm512_max_ps(m[r], _mm512_loadu_ps(s + r * lp + j));
    if (tail)
        for (int r = 0; r < rows; r++)
            m[r] = _mm512_max_ps(m[r], _mm512_mask_loadu_ps(ninf, tail, s + r * lp + full));
    for (int r = 0; r < rows; r++) m[r] = _mm512_set1_ps(_mm512_reduce_max_ps(m[r]));
}

/* `rows` score rows `lp` floats apart, each over its len real keys, become exp(s - max) in place
 * (base2: 2^(s - max), for scores in base 2), side by side (inv[r]: row r's 1 / sum; what lies
 * past len is not read or written), so that their maxima and sums reduce as independent chains:
 * one row at a time, each row's reductions and division were a chain after the one before
 * (f32 kernel, 4 rows: 6-9 % of its time at 128 keys). rows is a constant at the call. */
__attribute__((target("avx512f"), always_inline)) static inline void
hs__softmax_rows512(float *s, size_t lp, int len, const int rows, const int base2, float *inv)
{
    const int full = len / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (len - full)) - 1);
    __m512 m[8], sum[8]; /* rows <= 8 */
    hs__rows_max512(s, lp, len, rows, m);
    for (int r = 0; r < rows; r++) sum[r] = _mm512_setzero_ps();
    for (int j = 0; j < full; j += 16)
        for (int r = 0; r < rows; r++) {
            const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + r * lp + j), m[r]);
            const __m512 e = base2 ? hs__exp2_512(d) : hs__exp512(d);
            _mm512_storeu_ps(s + r * lp + j, e);
            sum[r] = _mm512_add_ps(sum[r], e);
        }
    for (int r = 0; tail && r < rows; r++) {
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + r * lp + full), m[r]);
        const __m512 e = _mm512_maskz_mov_ps(tail, base2 ? hs__exp2_512(d) : hs__exp512(d));
        _mm512_mask_storeu_ps(s + r * lp + full, tail, e);
        sum[r] = _mm512_add_ps(sum[r], e);
    }
    for (int r = 0; r < rows; r++) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
}

/* The same for one row; returns its 1 / sum. */
__attribute__((target("avx512f"))) static inline float hs__softmax_num512(float *row, int len)
{
    float inv;
    hs__softmax_rows512(row, 0, len, 1, 0, &inv);
    return inv;
}

#endif
