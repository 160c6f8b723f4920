/* Self-attention for one (sequence, head) with AVX2 + FMA register blocking, for head sizes
 * that are multiples of 16 (MiniLM's 32, BERT-base's 64): the path of machines without
 * AVX-512, where the portable attn_head in kernels.c runs its score and P.V loops through
 * memory. K is transposed once per (sequence, head); scores are computed for 6 queries x 16
 * keys at a time in 12 accumulators, softmax runs on the score rows (the vector exp of
 * kernels.c), and P.V accumulates 6 queries x 16 outputs in registers, scaling by the
 * softmax's 1 / sum once at the end. Full bidirectional attention over BERT's q | k | v rows. */
#include <immintrin.h>
#include <math.h>

#include "engine/cpu/kernels.h"

#define QB 6
#define KB 16

/* Scratch (floats): K^T [d][lp] + scores [QB][lp], lp = len rounded up to 16. */
int64_t hs__cpu_attn_avx2_scratch_floats(int head_dim, int seq_max)
{
    const int64_t lp = ((int64_t)seq_max + KB - 1) / KB * KB;
    return (int64_t)head_dim * lp + QB * lp + 16;
}

__attribute__((target("avx2,fma"))) static float row_max(const float *row, int len)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= len; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float mx = _mm_cvtss_f32(h);
    for (; j < len; j++) mx = row[j] > mx ? row[j] : mx;
    return mx;
}

__attribute__((target("avx2,fma"))) int hs__cpu_attn_avx2(const float *qkv, float *ctx, int t0,
                                                          int len, int h, int hidden, int d,
                                                          float *scratch)
{
    if (d <= 0 || d % 16) return -1;
    const int stride = 3 * hidden;
    const int lp = (len + KB - 1) / KB * KB;
    float *kt = scratch, *s = scratch + (size_t)d * lp;
    const float scale = 1.0f / sqrtf((float)d);
    for (int j = 0; j < len; j++) {
        const float *k = qkv + (size_t)(t0 + j) * stride + hidden + (size_t)h * d;
        for (int c = 0; c < d; c++) kt[(size_t)c * lp + j] = k[c];
    }
    for (int c = 0; c < d; c++)
        for (int j = len; j < lp; j++) kt[(size_t)c * lp + j] = 0.0f;
    const __m256 vs = _mm256_set1_ps(scale);
    for (int i0 = 0; i0 < len; i0 += QB) {
        const int qn = len - i0 < QB ? len - i0 : QB;
        const float *q[QB];
        for (int qi = 0; qi < QB; qi++) /* rows past the end repeat the first: not stored */
            q[qi] = qkv + (size_t)(t0 + i0 + (qi < qn ? qi : 0)) * stride + (size_t)h * d;
        /* scores: QB queries x KB keys per block (padding keys score 0 and are ignored) */
        for (int jb = 0; jb < lp; jb += KB) {
            __m256 acc[QB][2];
            for (int qi = 0; qi < QB; qi++) acc[qi][0] = acc[qi][1] = _mm256_setzero_ps();
            const float *kr = kt + jb;
            for (int c = 0; c < d; c++, kr += lp) {
                const __m256 k0 = _mm256_loadu_ps(kr), k1 = _mm256_loadu_ps(kr + 8);
                for (int qi = 0; qi < QB; qi++) {
                    const __m256 b = _mm256_broadcast_ss(q[qi] + c);
                    acc[qi][0] = _mm256_fmadd_ps(b, k0, acc[qi][0]);
                    acc[qi][1] = _mm256_fmadd_ps(b, k1, acc[qi][1]);
                }
            }
            for (int qi = 0; qi < QB; qi++) {
                _mm256_storeu_ps(s + (size_t)qi * lp + jb, _mm256_mul_ps(acc[qi][0], vs));
                _mm256_storeu_ps(s + (size_t)qi * lp + jb + 8, _mm256_mul_ps(acc[qi][1], vs));
            }
        }
        /* softmax numerators over the len real keys; 1 / sum is applied to the outputs */
        float inv[QB];
        for (int qi = 0; qi < QB; qi++) {
            float *row = s + (size_t)qi * lp;
            inv[qi] = qi < qn ? 1.0f / hs__cpu_exp_sub_sum(row, len, row_max(row, len)) : 0.0f;
        }
        /* P.V: QB queries x 16 outputs in registers, per 16 columns of the head */
        for (int c0 = 0; c0 < d; c0 += 16) {
            __m256 o[QB][2];
            for (int qi = 0; qi < QB; qi++) o[qi][0] = o[qi][1] = _mm256_setzero_ps();
            const float *vr = qkv + (size_t)t0 * stride + 2 * (size_t)hidden + (size_t)h * d + c0;
            for (int j = 0; j < len; j++, vr += stride) {
                const __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
                for (int qi = 0; qi < QB; qi++) {
                    const __m256 p = _mm256_broadcast_ss(s + (size_t)qi * lp + j);
                    o[qi][0] = _mm256_fmadd_ps(p, v0, o[qi][0]);
                    o[qi][1] = _mm256_fmadd_ps(p, v1, o[qi][1]);
                }
            }
            for (int qi = 0; qi < qn; qi++) {
                float *out = ctx + (size_t)(t0 + i0 + qi) * hidden + (size_t)h * d + c0;
                const __m256 vi = _mm256_set1_ps(inv[qi]);
                _mm256_storeu_ps(out, _mm256_mul_ps(o[qi][0], vi));
                _mm256_storeu_ps(out + 8, _mm256_mul_ps(o[qi][1], vi));
            }
        }
    }
    return 0;
}
