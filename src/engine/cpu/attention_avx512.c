/* Self-attention for one (sequence, head) with AVX-512 register blocking, for head sizes 32
 * and 64 (MiniLM, bge-small, BERT-base). Scores are computed for 4 queries x 64 keys at a time
 * in 16 accumulators from K transposed once per (sequence, head) by gathers; softmax runs on the
 * score rows; P.V accumulates 4 queries x head_dim in registers over the unnormalized
 * exponentials, and each output row is scaled by its 1 / sum once. The accumulators are named
 * variables, not arrays, so they stay in registers whatever gcc's unrolling (at -O2 gcc 12 kept
 * the arrays on the stack). Without AVX-512 the AVX2 kernel (attention_avx2.c)
 * takes head sizes that are multiples of 16; the portable attn_head in kernels.c stays the path
 * for the rest. The int8 lanes' variant (hs__cpu_attn_q8, AVX-512 VNNI, for CPUs without a bf16
 * dot product) computes Q.K^T with vpdpbusd on queries and keys quantized per (token, head),
 * the softmax in f32, and P.V with vpdpwssd on P in 15 bits and V in int8 steps per (sequence,
 * head, channel) up to PV16_MAX keys (in f32 past them). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu/kernels.h"
#include "engine/cpu/softmax512.h"
#include "engine/cpu/vnni512.h"

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
                                      const float *bk, float *kt)
{
    const __m512i step =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(stride));
    for (int j = 0; j < lp; j += 16) {
        const int n = len - j < 16 ? (len - j > 0 ? len - j : 0) : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        const float *kj = k0 + (size_t)(n > 0 ? j : 0) * stride;
        for (int c = 0; c < D; c++) {
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, kj + c, 4);
            if (bk) v = _mm512_maskz_add_ps(m, v, _mm512_set1_ps(bk[c]));
            _mm512_storeu_ps(kt + (size_t)c * lp + j, v);
        }
    }
}

/* Scores of QB queries (q0..q3, already scaled) x KB keys from column jb of K^T into
 * s [QB][lp]. */
AVX512 static inline void scores_block(const float *q0, const float *q1, const float *q2,
                                       const float *q3, const float *kt, int lp, int jb, int D,
                                       float *s)
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
#define HS__S(r)                                                                                   \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb, a##r##0);                                            \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 16, a##r##1);                                       \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 32, a##r##2);                                       \
    _mm512_storeu_ps(s + (size_t)(r)*lp + jb + 48, a##r##3);
    HS__S(0) HS__S(1) HS__S(2) HS__S(3)
#undef HS__S
}

/* V's rows of head h side by side in vt [len][D], plus bv when not NULL: in place, one every
 * 3 * hidden floats, a head's rows fall into a few L1 sets (MiniLM: 4608 bytes apart, 8 of 64
 * sets) and evict each other while P.V reads them for every block of queries. Then the next
 * head's Q, K and V rows, into L2 while this one computes: a batch's q | k | v rows were written
 * by its QKV GEMM long before (beyond L2 at 32 x 128), a row's head is two lines, and rows 4608
 * bytes apart defeat the hardware's streams; reading them in took a sixth of this kernel's
 * samples at 32 x 128. */
AVX512 static inline void stage_v(const int D, const float *qkv, int t0, int len, int h, int hidden,
                                  const float *bv, float *vt)
{
    const int stride = 3 * hidden;
    if (vt && bv)
        for (int j = 0; j < len; j++) {
            const float *r = qkv + (size_t)(t0 + j) * stride + 2 * hidden + h * D;
            for (int c = 0; c < D; c += 16)
                _mm512_storeu_ps(vt + (size_t)j * D + c,
                                 _mm512_add_ps(_mm512_loadu_ps(r + c), _mm512_loadu_ps(bv + c)));
        }
    else if (vt)
        for (int j = 0; j < len; j++)
            memcpy(vt + (size_t)j * D, qkv + (size_t)(t0 + j) * stride + 2 * hidden + h * D,
                   sizeof(float) * (size_t)D);
    if ((h + 1) * D < hidden)
        for (int j = 0; j < len; j++) {
            const char *r = (const char *)(qkv + (size_t)(t0 + j) * stride + (h + 1) * D);
            for (int b = 0; b < D * 4; b += 64) {
                _mm_prefetch(r + b, _MM_HINT_T1);
                _mm_prefetch(r + (size_t)hidden * 4 + b, _MM_HINT_T1);
                _mm_prefetch(r + (size_t)hidden * 8 + b, _MM_HINT_T1);
            }
        }
}

/* Softmax of the qn (<= QB) score rows in s [QB][lp] (the scores of QB queries over len keys)
 * and P.V: QB queries x D outputs (2 or 4 vectors each) in registers over the unnormalized
 * exponentials, each output row scaled by its 1 / sum and written at out + r * hidden. */
AVX512 static inline __attribute__((always_inline)) void softmax_pv(const int D, const int base2,
                                                                    const float *vt, float *s,
                                                                    int lp, int len, int qn,
                                                                    float *out0, int hidden)
{
    float inv[QB]; /* (rows past qn: queries the caller scored as copies of a real one) */
    hs__softmax_rows512(s, (size_t)lp, len, QB, base2, inv);
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
        float *out = out0 + (size_t)(r)*hidden;                                                    \
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

/* One (sequence, head); D (32 or 64) is a constant at each call, so the P.V block's second
 * pair of output vectors folds away for 32. bias (NULL: none), the QKV layer's [3 * hidden],
 * is added to q, k and v as they are read: to each block's queries, to K as it is transposed, to
 * V as it is staged. Each sum is the one a bias pass over the rows would have stored, so the
 * result is the same bits, without that pass over the batch's q | k | v rows (beyond L2 in a
 * large batch). */
AVX512 static inline __attribute__((always_inline)) void attn(const int D, const float *qkv,
                                                              float *ctx, int t0, int len, int h,
                                                              int hidden, const float *bias,
                                                              float *scratch)
{
    const int stride = 3 * hidden;
    const int lp = (len + KB - 1) / KB * KB;
    float *kt = scratch, *vt = scratch + (size_t)D * lp, *s = vt + (size_t)D * lp;
    /* the queries times log2(e) / sqrt(D): scores in base 2 for the softmax (hs__exp2_512) */
    const __m512 qmul = _mm512_set1_ps(1.44269504088896341f / sqrtf((float)D));
    const float *bq = bias ? bias + h * D : NULL;
    transpose_k(qkv + (size_t)t0 * stride + hidden + h * D, stride, len, lp, D,
                bias ? bias + hidden + h * D : NULL, kt);
    stage_v(D, qkv, t0, len, h, hidden, bias ? bias + 2 * hidden + h * D : NULL, vt);
    float qb[QB][64] __attribute__((aligned(64))); /* a block's queries (D <= 64), scaled */
    for (int i0 = 0; i0 < len; i0 += QB) {
        const int qn = len - i0 < QB ? len - i0 : QB;
        const float *q[QB];
        for (int qi = 0; qi < QB; qi++) {
            const float *qr = qkv + (size_t)(t0 + i0 + (qi < qn ? qi : 0)) * stride + h * D;
            for (int c = 0; c < D; c += 16) {
                __m512 v = _mm512_loadu_ps(qr + c);
                if (bq) v = _mm512_add_ps(v, _mm512_loadu_ps(bq + c));
                _mm512_store_ps(&qb[qi][c], _mm512_mul_ps(v, qmul));
            }
            q[qi] = qb[qi];
        }
        for (int jb = 0; jb < lp; jb += KB) scores_block(q[0], q[1], q[2], q[3], kt, lp, jb, D, s);
        softmax_pv(D, 1, vt, s, lp, len, qn, ctx + (size_t)(t0 + i0) * hidden + h * D, hidden);
    }
}

/* ---- int8 Q.K^T (hs__cpu_attn_q8): AVX-512 VNNI ---- */

/* n (<= 16) rows of D floats (stride floats apart) as int8, each with its own symmetric scale
 * max |x| / 127, written times mul to sc[r] (0 for a zero row), stored in q (qstride bytes a row)
 * plus flip (0: s8; 0x80: u8, q + 128). The 16 row maxima are reduced side by side by a shuffle
 * tree, with one division for all: reduced one row at a time, with a division each, the
 * quantization of Q and K took as many samples as the int8 products. */
VNNI_TARGET static inline __attribute__((always_inline)) void
q8_rows(const int D, const float *x, size_t stride, int n, uint8_t *q, int qstride, float *sc,
        float mul, int flip)
{
    __m512 m[16];
    for (int r = 0; r < 16; r++) {
        m[r] = _mm512_setzero_ps();
        if (r < n)
            for (int c = 0; c < D; c += 16)
                m[r] = _mm512_max_ps(m[r], _mm512_abs_ps(_mm512_loadu_ps(x + r * stride + c)));
    }
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++) /* row 2i in lanes 0-7, 2i + 1 in 8-15 */
        t[i] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* row 4i + b in block b */
        u[i] = _mm512_max_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
    const __m512 w01 =
        _mm512_max_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xEE));
    const __m512 w23 =
        _mm512_max_ps(_mm512_shuffle_ps(u[2], u[3], 0x44), _mm512_shuffle_ps(u[2], u[3], 0xEE));
    const __m512 f = /* row 4i + b in lane 4b + i */
        _mm512_max_ps(_mm512_shuffle_ps(w01, w23, 0x88), _mm512_shuffle_ps(w01, w23, 0xDD));
    const __m512 amax = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
    const __mmask16 live = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
    float inv[16];
    _mm512_storeu_ps(inv, _mm512_maskz_div_ps(live, _mm512_set1_ps(127.0f), amax));
    _mm512_mask_storeu_ps(sc, (__mmask16)((1u << n) - 1u),
                          _mm512_mul_ps(amax, _mm512_set1_ps(mul / 127.0f)));
    const __m128i fl = _mm_set1_epi8((char)flip);
    for (int r = 0; r < n; r++) {
        const __m512 vi = _mm512_set1_ps(inv[r]);
        for (int c = 0; c < D; c += 16) {
            const __m512i v =
                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + r * stride + c), vi));
            _mm_storeu_si128((__m128i *)(void *)(q + (size_t)r * qstride + c),
                             _mm_xor_si128(_mm512_cvtsepi32_epi8(v), fl));
        }
    }
}

/* K of head h quantized per key (s8, scale sk[j] times `scale`: the scores' 1 / sqrt(D), with
 * log2(e) for base 2), each key row first into kq [lp][D], then as k-quad panels kp [D/4][lp]
 * (the 4 bytes of channels 4c..4c+3 of key j at kp[c * lp + j]: one vector, 16 keys of a quad,
 * against a broadcast 4-byte quad of a query) by 16-key gathers; ck[j] = 128 * the sum of key
 * j's values, what a u8 query's + 128 adds to its dot product. Keys from len to lp are zero. */
VNNI_TARGET static inline void pack_k8(const int D, const float *k0, int stride, int len, int lp,
                                       float scale, uint8_t *kq, int32_t *kp, int32_t *ck,
                                       float *sk)
{
    for (int j = 0; j < len; j += 16)
        q8_rows(D, k0 + (size_t)j * stride, (size_t)stride, len - j < 16 ? len - j : 16,
                kq + (size_t)j * D, D, sk + j, scale, 0);
    memset(kq + (size_t)len * D, 0, (size_t)(lp - len) * D);
    for (int j = len; j < lp; j++) sk[j] = 0.0f;
    const __m512i rows =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(D / 4));
    const __m512i u128 = _mm512_set1_epi8((char)0x80);
    for (int j = 0; j < lp; j += 16) {
        const int *base = (const int *)(const void *)(kq + (size_t)j * D);
        __m512i sum = _mm512_setzero_si512();
        for (int c = 0; c < D / 4; c++) {
            const __m512i v = _mm512_i32gather_epi32(rows, base + c, 4);
            _mm512_storeu_si512(kp + (size_t)c * lp + j, v);
            sum = hs__dpbusd(sum, u128, v);
        }
        _mm512_storeu_si512(ck + j, sum);
    }
}

/* Scores of QB queries (u8 quads qd [QB][D/4], scales sq) x KB keys from column jb of kp, into
 * s [QB][lp]: (acc - ck[j]) * sk[j] * sq[r]. */
VNNI_TARGET static inline __attribute__((always_inline)) void
scores8_block(const int D, const int32_t *qd, const float *sq, const int32_t *kp, const int32_t *ck,
              const float *sk, int lp, int jb, float *s)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    __m512i a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    for (int c = 0; c < D / 4; c++) {
        const int32_t *kr = kp + (size_t)c * lp + jb;
        const __m512i k0 = _mm512_loadu_si512(kr), k1 = _mm512_loadu_si512(kr + 16);
        const __m512i k2 = _mm512_loadu_si512(kr + 32), k3 = _mm512_loadu_si512(kr + 48);
        __m512i b;
#define HS__Q(r)                                                                                   \
    b = _mm512_set1_epi32(qd[(r) * (D / 4) + c]);                                                  \
    a##r##0 = hs__dpbusd(a##r##0, b, k0);                                                          \
    a##r##1 = hs__dpbusd(a##r##1, b, k1);                                                          \
    a##r##2 = hs__dpbusd(a##r##2, b, k2);                                                          \
    a##r##3 = hs__dpbusd(a##r##3, b, k3);
        HS__Q(0) HS__Q(1) HS__Q(2) HS__Q(3)
#undef HS__Q
    }
#define HS__S(r, v)                                                                                \
    _mm512_storeu_ps(                                                                              \
        s + (size_t)(r)*lp + jb + 16 * (v),                                                        \
        _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a##r##v, c##v)), k##v),    \
                      q##r));
    const __m512i c0 = _mm512_loadu_si512(ck + jb), c1 = _mm512_loadu_si512(ck + jb + 16);
    const __m512i c2 = _mm512_loadu_si512(ck + jb + 32), c3 = _mm512_loadu_si512(ck + jb + 48);
    const __m512 k0 = _mm512_loadu_ps(sk + jb), k1 = _mm512_loadu_ps(sk + jb + 16);
    const __m512 k2 = _mm512_loadu_ps(sk + jb + 32), k3 = _mm512_loadu_ps(sk + jb + 48);
    const __m512 q0 = _mm512_set1_ps(sq[0]), q1 = _mm512_set1_ps(sq[1]);
    const __m512 q2 = _mm512_set1_ps(sq[2]), q3 = _mm512_set1_ps(sq[3]);
#define HS__SR(r) HS__S(r, 0) HS__S(r, 1) HS__S(r, 2) HS__S(r, 3)
    HS__SR(0) HS__SR(1) HS__SR(2) HS__SR(3)
#undef HS__SR
#undef HS__S
}

/* ---- P.V in int16 (the int8 lanes, sequences up to PV16_MAX keys) ---- */

/* Keys up to which P.V runs in int16: P in 15 bits (exp(s - max) <= 1 times 32767) against V in
 * int8 steps, each product at most 32767 * 127, so 516 keys' sums stay within int32. */
#define PV16_MAX 512

VNNI_TARGET static inline __m512i dpwssd(__m512i c, __m512i a, __m512i b)
{
    __asm__("vpdpwssd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));
    return c;
}

/* V of head h quantized per channel (sv[c] = max over the keys |v[c]| / 127) as key pairs
 * vq [len/2][D]: the s16 values of keys 2i and 2i + 1 in the low and high half of one int32 (an
 * odd last key pairs with zero). */
VNNI_TARGET static inline __attribute__((always_inline)) void
pack_v16(const int D, const float *v0, int stride, int len, int32_t *vq, float *sv)
{
    __m512 m[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    for (int j = 0; j < len; j++)
        for (int v = 0; v < D / 16; v++)
            m[v] = _mm512_max_ps(m[v],
                                 _mm512_abs_ps(_mm512_loadu_ps(v0 + (size_t)j * stride + 16 * v)));
    __m512 inv[4];
    for (int v = 0; v < D / 16; v++) {
        const __mmask16 live = _mm512_cmp_ps_mask(m[v], _mm512_setzero_ps(), _CMP_GT_OQ);
        inv[v] = _mm512_maskz_div_ps(live, _mm512_set1_ps(127.0f), m[v]);
        _mm512_storeu_ps(sv + 16 * v, _mm512_mul_ps(m[v], _mm512_set1_ps(1.0f / 127.0f)));
    }
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    for (int j = 0; j < len; j += 2) {
        const float *r0 = v0 + (size_t)j * stride, *r1 = r0 + stride;
        for (int v = 0; v < D / 16; v++) {
            const __m512i a =
                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(r0 + 16 * v), inv[v]));
            const __m512i b =
                j + 1 < len
                    ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(r1 + 16 * v), inv[v]))
                    : _mm512_setzero_si512();
            _mm512_storeu_si512(
                vq + (size_t)(j / 2) * D + 16 * v,
                _mm512_or_si512(_mm512_and_si512(a, lo16), _mm512_slli_epi32(b, 16)));
        }
    }
}

/* 32767 * 2^x for x <= 0 (a base-2 softmax numerator on the 15-bit grid of P.V): 2^n times a
 * degree-4 polynomial of r = x - n, |r| <= 1/2, fitted for relative error (2.7e-6 evaluated in
 * float, at most 0.12 of a grid step) with the 32767 in its coefficients. Degree 4 and no clamp
 * where the f32 softmax's 2^x has degree 5 and one: the numerators are rounded to 1 / 32767
 * next, and the scores are finite (products of int8 sums and finite scales), so a very negative
 * x only makes scalef's result 0. */
VNNI_TARGET static inline __m512 exp2_s15(__m512 x)
{
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(313.58353f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1832.2606f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(7872.188f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(22711.523f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(32766.977f));
    return _mm512_scalef_ps(p, n);
}

/* The QB score rows of s [QB][lp] (base 2: pack_k8 folds log2(e) into the key scales) as their
 * softmax numerators in s16, 32767 * 2^(s - max) rounded, each over its row's own storage
 * (value j at byte 2j; each block is loaded before its narrower store), zero at len when len is
 * odd; inv[r] = 1 / the sum of row r's unrounded numerators. The rows go side by side, so that
 * their maxima and sums reduce as independent chains: one row at a time, each row's reductions
 * and division were a chain that took a tenth of the kernel's samples. Rows past qn (queries
 * past the sequence, which q8_rows scored 0) are computed too and never read. Each numerator
 * goes to s16 in the pass that makes it (a second pass over the fp32 row was 5 % of the kernel's
 * samples). */
VNNI_TARGET static inline __attribute__((always_inline)) void softmax_to_s16(float *s, int lp,
                                                                             int len, float *inv)
{
    const int full = len / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (len - full)) - 1);
    __m512 m[QB], sum[QB];
    hs__rows_max512(s, (size_t)lp, len, QB, m);
    for (int r = 0; r < QB; r++) sum[r] = _mm512_setzero_ps();
    /* 32 a step, packed by vpackssdw (saturating, as vpmovsdw: the same values) and put in
     * order by one vpermq: 2 shuffle-port operations where two vpmovsdw take 4 */
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    int j = 0;
    for (; j + 32 <= full; j += 32)
        for (int r = 0; r < QB; r++) {
            float *row = s + (size_t)r * lp;
            const __m512 e0 = exp2_s15(_mm512_sub_ps(_mm512_loadu_ps(row + j), m[r]));
            const __m512 e1 = exp2_s15(_mm512_sub_ps(_mm512_loadu_ps(row + j + 16), m[r]));
            sum[r] = _mm512_add_ps(_mm512_add_ps(sum[r], e0), e1);
            const __m512i w = _mm512_packs_epi32(_mm512_cvtps_epi32(e0), _mm512_cvtps_epi32(e1));
            _mm512_storeu_si512((void *)((int16_t *)(void *)row + j),
                                _mm512_permutexvar_epi64(order, w));
        }
    for (; j < full; j += 16)
        for (int r = 0; r < QB; r++) {
            float *row = s + (size_t)r * lp;
            const __m512 e = exp2_s15(_mm512_sub_ps(_mm512_loadu_ps(row + j), m[r]));
            sum[r] = _mm512_add_ps(sum[r], e);
            _mm256_storeu_si256((__m256i *)(void *)((int16_t *)(void *)row + j),
                                _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(e)));
        }
    for (int r = 0; tail && r < QB; r++) {
        float *row = s + (size_t)r * lp;
        const __m512 e = _mm512_maskz_mov_ps(
            tail, exp2_s15(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + full), m[r])));
        sum[r] = _mm512_add_ps(sum[r], e);
        _mm256_mask_storeu_epi16((int16_t *)(void *)row + full, tail,
                                 _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(e)));
    }
    for (int r = 0; r < QB; r++) {
        if (len & 1) ((int16_t *)(void *)(s + (size_t)r * lp))[len] = 0;
        inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
    }
}

/* softmax_pv with P in s16 and V in vq (pack_v16): QB queries x D outputs in int32 registers,
 * each output scaled by sv[c] / the sum of the row's numerators (softmax_to_s16: 32767 times those
 * of the softmax). */
VNNI_TARGET static inline __attribute__((always_inline)) void
softmax_pv16(const int D, const int32_t *vq, const float *sv, float *s, int lp, int len, int qn,
             float *out0, int hidden)
{
    float inv[QB];
    softmax_to_s16(s, lp, len, inv);
    const __m512i z = _mm512_setzero_si512();
    __m512i o00 = z, o01 = z, o02 = z, o03 = z, o10 = z, o11 = z, o12 = z, o13 = z;
    __m512i o20 = z, o21 = z, o22 = z, o23 = z, o30 = z, o31 = z, o32 = z, o33 = z;
    const int32_t *p0 = (const int32_t *)(const void *)s,
                  *p1 = (const int32_t *)(const void *)(s + lp);
    const int32_t *p2 = (const int32_t *)(const void *)(s + 2 * (size_t)lp);
    const int32_t *p3 = (const int32_t *)(const void *)(s + 3 * (size_t)lp);
    const int32_t *vr = vq;
    for (int j2 = 0; j2 < (len + 1) / 2; j2++, vr += D) {
        const __m512i v0 = _mm512_loadu_si512(vr), v1 = _mm512_loadu_si512(vr + 16);
        const __m512i v2 = D > 32 ? _mm512_loadu_si512(vr + 32) : z;
        const __m512i v3 = D > 32 ? _mm512_loadu_si512(vr + 48) : z;
        __m512i p;
#define HS__P(r)                                                                                   \
    p = _mm512_set1_epi32(p##r[j2]);                                                               \
    o##r##0 = dpwssd(o##r##0, p, v0);                                                              \
    o##r##1 = dpwssd(o##r##1, p, v1);                                                              \
    if (D > 32) {                                                                                  \
        o##r##2 = dpwssd(o##r##2, p, v2);                                                          \
        o##r##3 = dpwssd(o##r##3, p, v3);                                                          \
    }
        HS__P(0) HS__P(1) HS__P(2) HS__P(3)
#undef HS__P
    }
    const __m512 s0 = _mm512_loadu_ps(sv), s1 = _mm512_loadu_ps(sv + 16);
    const __m512 s2 = D > 32 ? _mm512_loadu_ps(sv + 32) : _mm512_setzero_ps();
    const __m512 s3 = D > 32 ? _mm512_loadu_ps(sv + 48) : _mm512_setzero_ps();
#define HS__O(r)                                                                                   \
    if (qn > r) {                                                                                  \
        float *out = out0 + (size_t)(r)*hidden;                                                    \
        const __m512 vi = _mm512_set1_ps(inv[r]);                                                  \
        _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(o##r##0), _mm512_mul_ps(s0, vi)));  \
        _mm512_storeu_ps(out + 16,                                                                 \
                         _mm512_mul_ps(_mm512_cvtepi32_ps(o##r##1), _mm512_mul_ps(s1, vi)));       \
        if (D > 32) {                                                                              \
            _mm512_storeu_ps(out + 32,                                                             \
                             _mm512_mul_ps(_mm512_cvtepi32_ps(o##r##2), _mm512_mul_ps(s2, vi)));   \
            _mm512_storeu_ps(out + 48,                                                             \
                             _mm512_mul_ps(_mm512_cvtepi32_ps(o##r##3), _mm512_mul_ps(s3, vi)));   \
        }                                                                                          \
    }
    HS__O(0) HS__O(1) HS__O(2) HS__O(3)
#undef HS__O
}

/* One (sequence, head) with int8 Q.K^T: scratch as vt [len][D] | s [QB][lp] | kp | kq | ck | sk
 * (within hs__cpu_attn_avx512_scratch_floats). */
VNNI_TARGET static inline __attribute__((always_inline)) void attn_q8(const int D, const float *qkv,
                                                                      float *ctx, int t0, int len,
                                                                      int h, int hidden,
                                                                      float *scratch)
{
    const int stride = 3 * hidden;
    const int lp = (len + KB - 1) / KB * KB;
    float *vt = scratch, *s = vt + (size_t)D * lp;
    int32_t *kp = (int32_t *)(s + (size_t)QB * lp);
    uint8_t *kq = (uint8_t *)(kp + (size_t)D / 4 * lp);
    int32_t *ck = (int32_t *)(kq + (size_t)D * lp);
    float *sk = (float *)(ck + lp);
    /* the scores in base 2: log2(e) / sqrt(D) in the key scales */
    pack_k8(D, qkv + (size_t)t0 * stride + hidden + h * D, stride, len, lp,
            1.44269504088896341f / sqrtf((float)D), kq, kp, ck, sk);
    const int pv16 = len <= PV16_MAX;
    int32_t *vq = (int32_t *)vt; /* pv16: V's pairs [len/2][D] and its channel scales */
    float *sv = vt + (size_t)(len + 1) / 2 * D;
    if (pv16) pack_v16(D, qkv + (size_t)t0 * stride + 2 * hidden + h * D, stride, len, vq, sv);
    stage_v(D, qkv, t0, len, h, hidden, NULL, pv16 ? NULL : vt);
    int32_t qd[16 * (D / 4)]; /* 16 queries' u8 quads, and their scales */
    float sq[16];
    for (int i16 = 0; i16 < len; i16 += 16) {
        const int n = len - i16 < 16 ? len - i16 : 16;
        if (n < 16) { /* the queries past len score zero (and are not written) */
            memset(qd + n * (D / 4), 0x80, sizeof(int32_t) * (size_t)(16 - n) * (D / 4));
            memset(sq + n, 0, sizeof(float) * (size_t)(16 - n));
        }
        q8_rows(D, qkv + (size_t)(t0 + i16) * stride + h * D, (size_t)stride, n, (uint8_t *)qd, D,
                sq, 1.0f, 0x80);
        for (int i0 = i16; i0 < i16 + n; i0 += QB) {
            const int qn = len - i0 < QB ? len - i0 : QB;
            for (int jb = 0; jb < lp; jb += KB)
                scores8_block(D, qd + (i0 - i16) * (D / 4), sq + (i0 - i16), kp, ck, sk, lp, jb, s);
            float *out = ctx + (size_t)(t0 + i0) * hidden + h * D;
            if (pv16)
                softmax_pv16(D, vq, sv, s, lp, len, qn, out, hidden);
            else
                softmax_pv(D, 1, vt, s, lp, len, qn, out, hidden);
        }
    }
}

/* The entry point `name` of kernel `k` (attn or attn_q8): one copy for each head size, so that D
 * is a constant inside it; -1 for other head sizes. */
#define HS__ATTN_ENTRY(name, k, TARGET)                                                            \
    TARGET static void k##_d32(const float *qkv, float *ctx, int t0, int len, int h, int hidden,   \
                               float *scratch)                                                     \
    {                                                                                              \
        k(32, qkv, ctx, t0, len, h, hidden, scratch);                                              \
    }                                                                                              \
    TARGET static void k##_d64(const float *qkv, float *ctx, int t0, int len, int h, int hidden,   \
                               float *scratch)                                                     \
    {                                                                                              \
        k(64, qkv, ctx, t0, len, h, hidden, scratch);                                              \
    }                                                                                              \
    int name(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,              \
             float *scratch)                                                                       \
    {                                                                                              \
        if (d != 32 && d != 64) return -1;                                                         \
        (d == 32 ? k##_d32 : k##_d64)(qkv, ctx, t0, len, h, hidden, scratch);                      \
        return 0;                                                                                  \
    }

HS__ATTN_ENTRY(hs__cpu_attn_q8, attn_q8, VNNI_TARGET)

/* The f32 kernel's entry points, with the QKV bias (hs__cpu_attn_avx512_bias) and without. */
AVX512 static void attn_d32(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                            const float *bias, float *scratch)
{
    attn(32, qkv, ctx, t0, len, h, hidden, bias, scratch);
}
AVX512 static void attn_d64(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                            const float *bias, float *scratch)
{
    attn(64, qkv, ctx, t0, len, h, hidden, bias, scratch);
}
int hs__cpu_attn_avx512_bias(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                             int d, const float *bias, float *scratch)
{
    if (d != 32 && d != 64) return -1;
    (d == 32 ? attn_d32 : attn_d64)(qkv, ctx, t0, len, h, hidden, bias, scratch);
    return 0;
}
int hs__cpu_attn_avx512(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                        float *scratch)
{
    return hs__cpu_attn_avx512_bias(qkv, ctx, t0, len, h, hidden, d, NULL, scratch);
}
