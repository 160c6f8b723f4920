/* Vector exp, GELU (erf and tanh), SiLU and the softmax numerators for the CPU kernels, in GCC
 * vector types of HS_VL floats. No include guard: kernels.c includes it once per width, with
 * HS_VL (lanes), HS_VT (the target attribute whose registers hold them) and HS_VN (the name
 * suffix) defined; it undefines them. Every width runs the same operations, so the widths'
 * results agree to rounding. Selects are bit masks at the native width (wider generic vectors
 * would compare lane by lane in scalar code); a row's tail runs through a zero-padded copy, so
 * every element takes the same instructions.
 * exp: |rel err| < 2e-7 on [-87, 88] (clamped outside); erf: Abramowitz & Stegun 7.1.28,
 * |abs err| <= 3e-7. */
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef float HS_VN(vf) __attribute__((vector_size(4 * HS_VL)));
typedef int32_t HS_VN(vi) __attribute__((vector_size(4 * HS_VL)));
/* unaligned loads and stores go through this one */
typedef float HS_VN(vfu) __attribute__((vector_size(4 * HS_VL), aligned(4), may_alias));
typedef int32_t HS_VN(viu) __attribute__((vector_size(4 * HS_VL), aligned(4), may_alias));

#define VF      HS_VN(vf)
#define VI      HS_VN(vi)
#define VFU     HS_VN(vfu)
#define VIU     HS_VN(viu)
#define HS__VFN static inline __attribute__((always_inline)) HS_VT

HS__VFN VF HS_VN(v_sel)(VI m, VF a, VF b) /* m ? a : b, lane by lane */
{
    return (VF)((m & (VI)a) | (~m & (VI)b));
}

HS__VFN VF HS_VN(v_splat)(float a)
{
    return (VF){0} + a;
}

/* max(a, b) and min(a, b) lane by lane, b where either is NaN (x86's maxps / minps: with the
 * bound as a, a NaN b goes through). One instruction, where the compare-and-select of v_sel is
 * two and longer on the dependency chain (the clamps of exp: 10 % of GELU). */
#if defined(__x86_64__) && HS_VL == 16
#define HS__VMAX(a, b) ((VF)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define HS__VMIN(a, b) ((VF)_mm512_min_ps((__m512)(a), (__m512)(b)))
#elif defined(__x86_64__) && HS_VL == 8
#define HS__VMAX(a, b) ((VF)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define HS__VMIN(a, b) ((VF)_mm256_min_ps((__m256)(a), (__m256)(b)))
#elif defined(__x86_64__) && HS_VL == 4
#define HS__VMAX(a, b) ((VF)_mm_max_ps((__m128)(a), (__m128)(b)))
#define HS__VMIN(a, b) ((VF)_mm_min_ps((__m128)(a), (__m128)(b)))
#else
#define HS__VMAX(a, b) HS_VN(v_sel)((b) > (a), (b), (a))
#define HS__VMIN(a, b) HS_VN(v_sel)((b) < (a), (b), (a))
#endif

HS__VFN VF HS_VN(v_exp)(VF x)
{
    x = HS__VMAX(HS_VN(v_splat)(-87.0f), x);
    x = HS__VMIN(HS_VN(v_splat)(88.0f), x);
    /* round to nearest by the 1.5 * 2^23 trick */
    const VF n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    VF r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    VF p = HS_VN(v_splat)(1.0f / 5040.0f);
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const VI bits = (__builtin_convertvector(n, VI) + 127) << 23;
    return p * (VF)bits;
}

/* erf by Abramowitz & Stegun 7.1.28: 1 - 1 / (1 + a1 x + ... + a6 x^6)^16, |abs err| <= 3e-7,
 * no exp (7.1.26, the form before, took an exp and a division: 2x the time on AVX2, whose
 * dependency chain it was). v erf(v / sqrt 2) is even, so GELU = 0.5 (v + |v|) - 0.5 |v| r with
 * r = erfc(|v| / sqrt 2) = 1 / p: no sign to carry, and no cancellation for negative v, where it
 * is -0.5 |v| r. GELU is bound by its operation count on the vector ports, so the constants take
 * what would be operations: the polynomial runs in |v| itself (a_i / sqrt(2)^i), and every
 * coefficient, 1 included, carries 2^(1/16), so that its 16th power is 2 p and |v| / (2 p) is the
 * term: 14 operations, where the scaled argument, a clamp and a separate 0.5 took 18. No clamp:
 * past |v| ~ 17 the power overflows to inf and the term is exactly 0 (erfc is 0 in float there);
 * before it, the term is at least 5e-38, never subnormal. +-inf gives NaN, as it did. */
/* a_i 2^(1/16) / sqrt(2)^i, with s = sqrt(2)^i */
#define HS__ERF_C(a, s) ((float)((a)*1.0442737824274138 / (s)))
HS__VFN VF HS_VN(v_gelu_erf)(VF v)
{
    const VF av = (VF)((VI)v & 0x7fffffff);
    VF p = HS_VN(v_splat)(HS__ERF_C(0.0000430638, 8.0));
    p = p * av + HS__ERF_C(0.0002765672, 5.6568542494923802);
    p = p * av + HS__ERF_C(0.0001520143, 4.0);
    p = p * av + HS__ERF_C(0.0092705272, 2.8284271247461903);
    p = p * av + HS__ERF_C(0.0422820123, 2.0);
    p = p * av + HS__ERF_C(0.0705230784, 1.4142135623730951);
    p = p * av + 1.0442737824274138f;
    p = p * p; /* ^16 */
    p = p * p;
    p = p * p;
    p = p * p;
    return 0.5f * (v + av) - av / p;
}
#undef HS__ERF_C

HS__VFN VF HS_VN(v_gelu_tanh)(VF v)
{
    VF c = 0.79788456080286536f * (v + 0.044715f * v * v * v);
    const VF lo = HS_VN(v_splat)(-9.0f), hi = HS_VN(v_splat)(9.0f);
    c = HS_VN(v_sel)(c < lo, lo, c);
    c = HS_VN(v_sel)(c > hi, hi, c);
    const VF e = HS_VN(v_exp)(2.0f * c);
    return 0.5f * v * (1.0f + (e - 1.0f) / (e + 1.0f));
}

HS__VFN VF HS_VN(v_silu)(VF v)
{
    return v / (1.0f + HS_VN(v_exp)(-v));
}

HS__VFN VF HS_VN(v_relu)(VF v)
{
    const VF z = {0};
    return HS_VN(v_sel)(v > z, v, z);
}

/* One vector through act (act < 0: as it is), for an epilogue that holds it in registers; a row
 * loop takes act_rows, whose switch stands outside the loop. */
HS__VFN VF HS_VN(v_act)(VF v, int act)
{
    switch (act) {
    case HS_ACT_GELU_ERF:
        return HS_VN(v_gelu_erf)(v);
    case HS_ACT_GELU_TANH:
        return HS_VN(v_gelu_tanh)(v);
    case HS_ACT_RELU:
        return HS_VN(v_relu)(v);
    case HS_ACT_SILU:
        return HS_VN(v_silu)(v);
    }
    return v;
}

#define HS__ACT_LOOP(FN)                                                                           \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + HS_VL <= n; i += HS_VL) {                                                       \
            *(VFU *)(x + i) = FN(*(const VFU *)(x + i));                                           \
        }                                                                                          \
        if (i < n) {                                                                               \
            float buf[HS_VL] = {0};                                                                \
            memcpy(buf, x + i, sizeof(float) * (size_t)(n - i));                                   \
            *(VFU *)buf = FN(*(const VFU *)buf);                                                   \
            memcpy(x + i, buf, sizeof(float) * (size_t)(n - i));                                   \
        }                                                                                          \
    } while (0)

/* LOOP(f) for the activation act (a row loop each, the switch outside it); else the statement
 * none. */
#define HS__ACT_SWITCH(act, LOOP, none)                                                            \
    switch (act) {                                                                                 \
    case HS_ACT_GELU_ERF:                                                                          \
        LOOP(HS_VN(v_gelu_erf));                                                                   \
        break;                                                                                     \
    case HS_ACT_GELU_TANH:                                                                         \
        LOOP(HS_VN(v_gelu_tanh));                                                                  \
        break;                                                                                     \
    case HS_ACT_RELU:                                                                              \
        LOOP(HS_VN(v_relu));                                                                       \
        break;                                                                                     \
    case HS_ACT_SILU:                                                                              \
        LOOP(HS_VN(v_silu));                                                                       \
        break;                                                                                     \
    default:                                                                                       \
        none;                                                                                      \
    }
#define HS__ACT_ID(v) (v)

HS_VT static void HS_VN(act_rows)(float *x, int64_t n,
                                  enum hs_act_fn act){HS__ACT_SWITCH(act, HS__ACT_LOOP, (void)0)}

/* An int8 GEMM block's accumulators back to fp32, while they are in L1: y[r][j] =
 * act(float(acc[r][j]) * (sx[r].s * sw[j]) + (bias[j] - sx[r].sz * comp[j])) for rows x cols
 * (comp and bias may be NULL: zeros; kernels.h, hs_qgemm_epi). One expression, so that it
 * contracts to two fused multiply-adds where the width has them; y may be acc itself (each vector
 * is read before it is written). Every int8 epilogue goes through it, whichever kernel made the
 * sums, so they agree bit for bit. */
#define HS__DQ_VEC(FN, av, cv, wv, bv, f)                                                          \
    VF f = FN(__builtin_convertvector((av), VF) * (s * (wv)) + ((bv)-sz * (cv)))
#define HS__DQ_LOOP(FN)                                                                            \
    for (int r = 0; r < rows; r++) {                                                               \
        const int32_t *a = acc + (size_t)r * (size_t)lda;                                          \
        float *yr = y + (size_t)r * (size_t)ldy;                                                   \
        const float s = sx[r].s, sz = sx[r].sz;                                                    \
        int j = 0;                                                                                 \
        for (; j + HS_VL <= cols; j += HS_VL) {                                                    \
            const VF zf = {0};                                                                     \
            HS__DQ_VEC(FN, (VI) * (const VIU *)(a + j),                                            \
                       comp ? (VF) * (const VFU *)(comp + j) : zf, (VF) * (const VFU *)(sw + j),   \
                       bias ? (VF) * (const VFU *)(bias + j) : zf, f);                             \
            *(VFU *)(yr + j) = f;                                                                  \
        }                                                                                          \
        if (j < cols) { /* the tail through zero-padded copies */                                  \
            const size_t m = (size_t)(cols - j);                                                   \
            VI av = {0};                                                                           \
            VF wv = {0}, bv = {0}, cv = {0};                                                       \
            memcpy(&av, a + j, sizeof(int32_t) * m);                                               \
            memcpy(&wv, sw + j, sizeof(float) * m);                                                \
            if (comp) memcpy(&cv, comp + j, sizeof(float) * m);                                    \
            if (bias) memcpy(&bv, bias + j, sizeof(float) * m);                                    \
            HS__DQ_VEC(FN, av, cv, wv, bv, f);                                                     \
            memcpy(yr + j, &f, sizeof(float) * m);                                                 \
        }                                                                                          \
    }

HS_VT static void HS_VN(dequant_block)(const int32_t *acc, int lda, const struct hs_qrow *sx,
                                       int rows, const float *comp, const float *sw,
                                       const float *bias, int cols, int act, float *y, int ldy){
    HS__ACT_SWITCH(act, HS__DQ_LOOP, HS__DQ_LOOP(HS__ACT_ID))}

#undef HS__DQ_LOOP
#undef HS__DQ_VEC
#undef HS__ACT_SWITCH
#undef HS__ACT_ID

HS_VT static float HS_VN(exp_sub_sum)(float *s, int n, float mx)
{
    VF acc = {0};
    int j = 0;
    for (; j + HS_VL <= n; j += HS_VL) {
        const VF v = HS_VN(v_exp)(*(const VFU *)(s + j) - mx);
        *(VFU *)(s + j) = v;
        acc += v;
    }
    float sum = 0.0f;
    for (int l = 0; l < HS_VL; l++) sum += acc[l];
    if (j < n) {
        float buf[HS_VL] = {0};
        memcpy(buf, s + j, sizeof(float) * (size_t)(n - j));
        *(VFU *)buf = HS_VN(v_exp)(*(const VFU *)buf - mx);
        memcpy(s + j, buf, sizeof(float) * (size_t)(n - j));
        for (int l = 0; l < n - j; l++) sum += buf[l];
    }
    return sum;
}

#undef HS__ACT_LOOP
#undef HS__VFN
#undef HS__VMAX
#undef HS__VMIN
#undef VF
#undef VI
#undef VFU
#undef VIU
#undef HS_VL
#undef HS_VT
#undef HS_VN
