#include "engine/cpu/kernels.h"

#include <dnnl.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef HS_NO_CLONES /* ThreadSanitizer builds: an ifunc resolver runs before TSan is set up */
#define HS_CLONES
#else
#define HS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

/* exp, erf, tanh for the kernels: vmath.h, once per vector width, each compiled for the ISA
 * whose registers hold that width (one zmm, one ymm, one xmm), chosen at run time. */
#pragma GCC diagnostic ignored "-Wpsabi" /* the vector helpers are always inlined */
#define HS_VL    16
#define HS_VT    __attribute__((target("avx512f")))
#define HS_VN(x) x##_512
#include "engine/cpu/vmath.h"
#define HS_VL    8
#define HS_VT    __attribute__((target("avx2,fma")))
#define HS_VN(x) x##_256
#include "engine/cpu/vmath.h"
#define HS_VL 4
#define HS_VT
#define HS_VN(x) x##_128
#include "engine/cpu/vmath.h"

/* Which width this CPU takes: 2 = AVX-512, 1 = AVX2 + FMA, 0 = SSE2. */
static int vmath_best(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f")                                 ? 2
           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                             : 0;
}

static int vmath_chosen = -1; /* -1: not yet looked up */

static int vmath_isa(void)
{
    int v = __atomic_load_n(&vmath_chosen, __ATOMIC_RELAXED);
    if (v < 0) {
        v = vmath_best();
        __atomic_store_n(&vmath_chosen, v, __ATOMIC_RELAXED);
    }
    return v;
}

int hs__cpu_vmath_use(int width)
{
    const int best = vmath_best();
    const int v = width < 0 || width > best ? best : width;
    __atomic_store_n(&vmath_chosen, v, __ATOMIC_RELAXED);
    return v;
}

static void act_rows(float *x, int64_t n, enum hs_act_fn act)
{
    switch (vmath_isa()) {
    case 2:
        act_rows_512(x, n, act);
        break;
    case 1:
        act_rows_256(x, n, act);
        break;
    default:
        act_rows_128(x, n, act);
    }
}

void hs__cpu_dequant_block(const int32_t *acc, int lda, const struct hs_qgemm_epi *e, int r0,
                           int c0, int rows, int cols)
{
    const float *comp = e->comp ? e->comp + c0 : NULL;
    const float *bias = e->bias ? e->bias + c0 : NULL, *sw = e->sw + c0;
    const struct hs_qrow *sx = e->sx + r0;
    float *y = e->y + (size_t)r0 * (size_t)e->ldy + c0;
    switch (vmath_isa()) {
    case 2:
        dequant_block_512(acc, lda, sx, rows, comp, sw, bias, cols, e->act, y, e->ldy);
        break;
    case 1:
        dequant_block_256(acc, lda, sx, rows, comp, sw, bias, cols, e->act, y, e->ldy);
        break;
    default:
        dequant_block_128(acc, lda, sx, rows, comp, sw, bias, cols, e->act, y, e->ldy);
    }
}

/* s[j] = exp(s[j] - mx) for j in [0, n); returns their sum. */
static float exp_sub_sum(float *s, int n, float mx)
{
    switch (vmath_isa()) {
    case 2:
        return exp_sub_sum_512(s, n, mx);
    case 1:
        return exp_sub_sum_256(s, n, mx);
    default:
        return exp_sub_sum_128(s, n, mx);
    }
}

float hs__cpu_exp_sub_sum(float *s, int n, float mx)
{
    return exp_sub_sum(s, n, mx);
}

void hs__cpu_activation(float *x, int64_t n, enum hs_act_fn act)
{
    act_rows(x, n, act);
}

HS_CLONES
static void bias_act_row(float *y, const float *bias, int n, int act)
{
    if (bias)
        for (int j = 0; j < n; j++) y[j] += bias[j];
    if (act >= 0) act_rows(y, n, (enum hs_act_fn)act);
}

void hs__cpu_bias_act_row(float *y, const float *bias, int n, int act)
{
    bias_act_row(y, bias, n, act);
}

int hs__cpu_linear(const float *x, const float *w, const float *bias, float *y, int rows, int n,
                   int k, int act, int threads)
{
    /* oneDNN's sgemm is row-major: y = x * w^T with w stored [n, k] */
    dnnl_status_t st = dnnl_sgemm('N', 'T', rows, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
    if (st != dnnl_success) return -1;
    if (!bias && act < 0) return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) bias_act_row(y + (int64_t)r * n, bias, n, act);
    return 0;
}

int hs__cpu_linear_acc(const float *x, const float *w, float *y, int rows, int n, int k)
{
    return dnnl_sgemm('N', 'T', rows, n, k, 1.0f, x, k, w, k, 1.0f, y, n) == dnnl_success ? 0 : -1;
}

/* LayerNorm of one row: x = (x + y + bias - mean) * rstd * g + beta, with any of y, bias and
 * beta NULL. The portable form; ln_row_512 below is the same with AVX-512. */
HS_CLONES
static void ln_row_any(float *x, const float *y, const float *bias, const float *g,
                       const float *beta, int n, float eps)
{
    float mean = 0.0f;
    if (y && bias) {
        for (int j = 0; j < n; j++) x[j] = x[j] + y[j] + bias[j];
    } else if (y) {
        for (int j = 0; j < n; j++) x[j] = x[j] + y[j];
    } else if (bias) {
        for (int j = 0; j < n; j++) x[j] = x[j] + bias[j];
    }
#pragma omp simd reduction(+ : mean)
    for (int j = 0; j < n; j++) mean += x[j];
    mean /= (float)n;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int j = 0; j < n; j++) {
        float d = x[j] - mean;
        var += d * d;
    }
    var /= (float)n;
    float rstd = 1.0f / sqrtf(var + eps);
    if (beta)
        for (int j = 0; j < n; j++) x[j] = (x[j] - mean) * rstd * g[j] + beta[j];
    else
        for (int j = 0; j < n; j++) x[j] = (x[j] - mean) * rstd * g[j];
}

/* ln_row in three passes of AVX-512 (a masked tail for n not a multiple of 16): the residual
 * add stores x and sums it in one pass, the variance is a second over x - mean, the normalize a
 * third, each reduction on two accumulators. The portable form's four passes, its reductions on
 * one accumulator each (a chain of adds the row long), took 155 ns a 384-wide row in L2 against
 * 85 here (one thread). Sums in another order, so results differ from ln_row_any by rounding;
 * a row's result still depends on the row alone. */
__attribute__((target("avx512f"))) static void ln_row_512(float *x, const float *y,
                                                          const float *bias, const float *g,
                                                          const float *beta, int n, float eps)
{
    const int full = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1u);
    const int add = y || bias;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
#define HS__SUM(j, m, acc)                                                                         \
    do {                                                                                           \
        __m512 v = _mm512_maskz_loadu_ps(m, x + (j));                                              \
        if (y) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y + (j)));                            \
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + (j)));                      \
        if (add) _mm512_mask_storeu_ps(x + (j), m, v);                                             \
        acc = _mm512_add_ps(acc, v);                                                               \
    } while (0)
    int j = 0;
    for (; j + 32 <= full; j += 32) {
        HS__SUM(j, (__mmask16)0xffff, s0);
        HS__SUM(j + 16, (__mmask16)0xffff, s1);
    }
    if (j < full) HS__SUM(j, (__mmask16)0xffff, s0);
    if (tail) HS__SUM(full, tail, s1);
#undef HS__SUM
    const float mean = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / (float)n;
    const __m512 vm = _mm512_set1_ps(mean);
    s0 = s1 = _mm512_setzero_ps();
    for (j = 0; j + 32 <= full; j += 32) {
        const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + j), vm);
        const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm);
        s0 = _mm512_fmadd_ps(d0, d0, s0);
        s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
    if (j < full) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j), vm);
        s0 = _mm512_fmadd_ps(d, d, s0);
    }
    if (tail) {
        const __m512 d = _mm512_maskz_sub_ps(tail, _mm512_maskz_loadu_ps(tail, x + full), vm);
        s1 = _mm512_fmadd_ps(d, d, s1);
    }
    const float var = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / (float)n;
    const __m512 rstd = _mm512_set1_ps(1.0f / sqrtf(var + eps));
    for (j = 0; j < n; j += 16) {
        const __mmask16 m = j < full ? (__mmask16)0xffff : tail;
        const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm), rstd);
        const __m512 gv = _mm512_maskz_loadu_ps(m, g + j);
        _mm512_mask_storeu_ps(x + j, m,
                              beta ? _mm512_fmadd_ps(d, gv, _mm512_maskz_loadu_ps(m, beta + j))
                                   : _mm512_mul_ps(d, gv));
    }
}

static void ln_row(float *x, const float *y, const float *bias, const float *g, const float *beta,
                   int n, float eps)
{
    if (vmath_isa() == 2)
        ln_row_512(x, y, bias, g, beta, n, eps);
    else
        ln_row_any(x, y, bias, g, beta, n, eps);
}

void hs__cpu_residual_ln_row(float *x, const float *y, const float *bias, const float *g,
                             const float *beta, int n, float eps)
{
    ln_row(x, y, bias, g, beta, n, eps);
}

void hs__cpu_residual_ln(float *x, const float *y, const float *bias, const float *g,
                         const float *beta, int rows, int n, float eps, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++)
        ln_row(x + (int64_t)r * n, y ? y + (int64_t)r * n : NULL, bias, g, beta, n, eps);
}

HS_CLONES
static void embed_row(float *x, const float *w, const float *p, const float *t, int n)
{
    for (int j = 0; j < n; j++) x[j] = w[j] + p[j] + t[j];
}

HS_CLONES
static void embed_row2(float *x, const float *w, const float *p, int n)
{
    for (int j = 0; j < n; j++) x[j] = w[j] + p[j];
}

void hs__cpu_embed(float *x, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                   int n_tokens, const float *word, const float *pos, const float *type,
                   const float *g, const float *beta, int hidden, float eps, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < n_tokens; t++) {
        float *row = x + (int64_t)t * hidden;
        int tt = type_ids ? type_ids[t] : 0;
        const float *wr = word + (int64_t)ids[t] * hidden;
        if (type && pos)
            embed_row(row, wr, pos + (int64_t)pos_ids[t] * hidden, type + (int64_t)tt * hidden,
                      hidden);
        else if (pos || type)
            embed_row2(row, wr,
                       pos ? pos + (int64_t)pos_ids[t] * hidden : type + (int64_t)tt * hidden,
                       hidden);
        else
            memcpy(row, wr, sizeof(float) * (size_t)hidden);
        if (g) ln_row(row, NULL, NULL, g, beta, hidden, eps);
    }
}

int64_t hs__cpu_attn_scratch_floats(int head_dim, int seq_max)
{
    /* K transposed [head_dim, seq_max] + one score row [seq_max], padded to 64 bytes; or the
     * AVX-512 kernel's larger blocks */
    int64_t n = (int64_t)head_dim * seq_max + seq_max;
    int64_t m = hs__cpu_attn_avx512_scratch_floats(head_dim, seq_max);
    if (m > n) n = m;
    m = hs__cpu_attn_avx2_scratch_floats(head_dim, seq_max);
    if (m > n) n = m;
    return (n + 15) & ~(int64_t)15;
}

/* One (sequence, head): softmax(q k^T / sqrt(d)) v for every query row of the sequence, over the
 * keys a query may see: [lo, hi) = every key, or those at or before it (causal), or those within
 * `window` of it. */
HS_CLONES
static void attn_head(const float *qkv, float *ctx, int t0, int len, const struct hs_attn_shape *a,
                      int h, float *kt, float *s, const float *rel)
{
    const int stride = a->stride, d = a->head_dim;
    const int kvh = h / (a->heads / a->kv_heads);
    const int q_off = h * d, k_off = a->k_off + kvh * d, v_off = a->v_off + kvh * d;
    const float scale = 1.0f / sqrtf((float)d);
    for (int j = 0; j < len; j++) {
        const float *k = qkv + (int64_t)(t0 + j) * stride + k_off;
        for (int c = 0; c < d; c++) kt[(int64_t)c * len + j] = k[c];
    }
    for (int i = 0; i < len; i++) {
        int lo = 0, hi = len;
        if (a->causal) hi = i + 1;
        if (a->window > 0) {
            lo = i - a->window > 0 ? i - a->window : 0;
            if (i + a->window + 1 < hi) hi = i + a->window + 1;
        }
        const float *q = qkv + (int64_t)(t0 + i) * stride + q_off;
        for (int j = 0; j < len; j++) s[j] = 0.0f;
        for (int c = 0; c < d; c++) {
            const float qc = q[c] * scale;
            const float *kr = kt + (int64_t)c * len;
            for (int j = 0; j < len; j++) s[j] += qc * kr[j];
        }
        if (rel) { /* MPNet: rel points at the bias of relative position 0 */
            const float *ri = rel - i;
            for (int j = 0; j < len; j++) s[j] += ri[j];
        }
        float mx = s[lo];
#pragma omp simd reduction(max : mx)
        for (int j = lo + 1; j < hi; j++) mx = s[j] > mx ? s[j] : mx;
        const float sum = exp_sub_sum(s + lo, hi - lo, mx);
        const float inv = 1.0f / sum;
        float *o = ctx + (int64_t)(t0 + i) * a->ctx_stride + h * d;
        for (int c = 0; c < d; c++) o[c] = 0.0f;
        for (int j = lo; j < hi; j++) {
            const float pj = s[j] * inv;
            const float *v = qkv + (int64_t)(t0 + j) * stride + v_off;
            for (int c = 0; c < d; c++) o[c] += pj * v[c];
        }
    }
}

/* Which kernel hs__cpu_attention runs for a shape on this CPU. */
enum attn_path { ATTN_PORTABLE, ATTN_AVX512, ATTN_BF16, ATTN_Q8, ATTN_AVX2 };

static enum attn_path attn_path(const struct hs_attn_shape *a)
{
    const int heads = a->heads, head_dim = a->head_dim, hidden = heads * head_dim;
    __builtin_cpu_init();
    /* the AVX-512 kernels: full bidirectional attention over BERT's q | k | v rows only */
    const int plain = !a->causal && a->window == 0 && a->kv_heads == heads &&
                      a->stride == 3 * hidden && a->k_off == hidden && a->v_off == 2 * hidden &&
                      a->ctx_stride == hidden;
    if (plain && __builtin_cpu_supports("avx512f") && (head_dim == 32 || head_dim == 64)) {
        if (!a->lowp) return ATTN_AVX512;
        if (__builtin_cpu_supports("avx512bf16")) return ATTN_BF16;
        if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            return ATTN_Q8;
        return ATTN_AVX512;
    }
    /* otherwise (no AVX-512, or other head sizes): the AVX2 kernel, head sizes that are
     * multiples of 16 */
    if (plain && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        head_dim % 16 == 0)
        return ATTN_AVX2;
    return ATTN_PORTABLE;
}

int hs__cpu_attn_takes_bias(const struct hs_attn_shape *a, int has_rel_bias)
{
    return !has_rel_bias && !a->lowp && attn_path(a) == ATTN_AVX512;
}

int hs__cpu_attention(const float *qkv, float *ctx, const int32_t *offsets, int n_seqs,
                      const struct hs_attn_shape *a, float *scratch, int seq_max, int threads,
                      const float *rel_bias, int rel_span)
{
    if (a->qkv_bias && !hs__cpu_attn_takes_bias(a, rel_bias != NULL)) return -1;
    const int64_t rel_row = 2 * (int64_t)rel_span - 1;
    const int heads = a->heads, head_dim = a->head_dim, hidden = heads * head_dim;
    const int64_t per_thread = hs__cpu_attn_scratch_floats(head_dim, seq_max);
    const int pairs = n_seqs * heads;
    const enum attn_path path = attn_path(a);
#pragma omp parallel num_threads(threads)
    {
        int tid = omp_get_thread_num();
        float *kt = scratch + per_thread * tid;
        float *s = kt + (int64_t)head_dim * seq_max;
#pragma omp for schedule(dynamic, 1) nowait /* (the region's end is the barrier) */
        for (int p = 0; p < pairs; p++) {
            int seq = p / heads, h = p % heads;
            int t0 = offsets[seq], len = offsets[seq + 1] - offsets[seq];
            /* the vector kernels have no relative bias: MPNet takes the portable one */
            const float *rel = rel_bias ? rel_bias + h * rel_row + rel_span - 1 : NULL;
            int done = -1;
            if (!rel) switch (path) {
                case ATTN_AVX512:
                    done = hs__cpu_attn_avx512_bias(qkv, ctx, t0, len, h, hidden, head_dim,
                                                    a->qkv_bias, kt);
                    break;
                case ATTN_BF16:
                    done = hs__cpu_attn_bf16(qkv, ctx, t0, len, h, hidden, head_dim, kt);
                    break;
                case ATTN_Q8:
                    done = hs__cpu_attn_q8(qkv, ctx, t0, len, h, hidden, head_dim, kt);
                    break;
                case ATTN_AVX2:
                    done = hs__cpu_attn_avx2(qkv, ctx, t0, len, h, hidden, head_dim, kt);
                    break;
                case ATTN_PORTABLE:
                    break;
                }
            if (done != 0) attn_head(qkv, ctx, t0, len, a, h, kt, s, rel);
        }
    }
    return 0;
}

HS_CLONES
static void pool_mean_seq(const float *x, float *out, int len, int hidden)
{
    for (int c = 0; c < hidden; c++) out[c] = 0.0f;
    for (int t = 0; t < len; t++) {
        const float *row = x + (int64_t)t * hidden;
        for (int c = 0; c < hidden; c++) out[c] += row[c];
    }
    const float inv = 1.0f / (float)len;
    for (int c = 0; c < hidden; c++) out[c] *= inv;
}

void hs__cpu_pool(const float *x, float *out, const int32_t *offsets, int n_seqs, int hidden,
                  enum hs_pool_mode mode, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int s = 0; s < n_seqs; s++) {
        const float *base = x + (int64_t)offsets[s] * hidden;
        float *o = out + (int64_t)s * hidden;
        if (mode == HS_POOL_CLS)
            memcpy(o, base, sizeof(float) * (size_t)hidden);
        else if (mode == HS_POOL_LAST)
            memcpy(o, base + (int64_t)(offsets[s + 1] - offsets[s] - 1) * hidden,
                   sizeof(float) * (size_t)hidden);
        else
            pool_mean_seq(base, o, offsets[s + 1] - offsets[s], hidden);
    }
}

HS_CLONES
static void l2_row(float *x, int n)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    float norm = sqrtf(ss);
    float inv = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
    for (int j = 0; j < n; j++) x[j] *= inv;
}

void hs__cpu_l2_normalize(float *x, int rows, int n, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) l2_row(x + (int64_t)r * n, n);
}

void hs__cpu_rope_table(float *cs, int positions, int rot_dim, float theta, float div)
{
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        /* float32 throughout, as HF computes inv_freq and position * inv_freq */
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
        if (div > 0.0f && div != 1.0f) inv /= div;
        for (int p = 0; p < positions; p++) {
            const float f = (float)p * inv;
            cs[(int64_t)p * rot_dim + i] = cosf(f);
            cs[(int64_t)p * rot_dim + half + i] = sinf(f);
        }
    }
}

HS_CLONES
static void rope_head(float *x, const float *cs, int half)
{
    const float *c = cs, *sn = cs + half;
    for (int i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * sn[i];
        x[i + half] = b * c[i] + a * sn[i];
    }
}

void hs__cpu_rope(float *qkv, const int32_t *offsets, int n_seqs, int stride, int n_heads,
                  int head_dim, int rot_dim, const float *cs, int threads)
{
    const int t_begin = offsets[0], t_end = offsets[n_seqs];
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = t_begin; t < t_end; t++) {
        int s = 0; /* the token's sequence: offsets are few, a scan is cheap */
        while (offsets[s + 1] <= t) s++;
        const float *row_cs = cs + (int64_t)(t - offsets[s]) * rot_dim;
        float *row = qkv + (int64_t)t * stride;
        for (int h = 0; h < n_heads; h++)
            rope_head(row + (int64_t)h * head_dim, row_cs, rot_dim / 2);
    }
}

HS_CLONES
static void glu_row(float *ug, float *out, int n, enum hs_act_fn act)
{
    act_rows(ug + n, n, act);
    for (int j = 0; j < n; j++) out[j] = ug[n + j] * ug[j];
}

void hs__cpu_glu(float *ug, float *out, int rows, int n, enum hs_act_fn act, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) glu_row(ug + (int64_t)r * 2 * n, out + (int64_t)r * n, n, act);
}

/* RMSNorm of one row, in float32 as HF's (x * rsqrt(mean(x^2) + eps), then * g). */
HS_CLONES
static void rms_row(float *dst, const float *x, const float *g, int n, float eps)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int j = 0; j < n; j++) dst[j] = g[j] * (x[j] * r);
}

void hs__cpu_norm(float *dst, const float *src, const float *g, const float *beta, int rows, int n,
                  float eps, enum hs_norm_kind kind, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *d = dst + (int64_t)r * n;
        const float *x = src + (int64_t)r * n;
        if (!g) {
            if (d != x) memcpy(d, x, sizeof(float) * (size_t)n);
        } else if (kind == HS_NORM_RMS) {
            rms_row(d, x, g, n, eps);
        } else {
            if (d != x) memcpy(d, x, sizeof(float) * (size_t)n);
            ln_row(d, NULL, NULL, g, beta, n, eps);
        }
    }
}

HS_CLONES
static void add_row(float *x, const float *y, const float *bias, int n)
{
    if (bias)
        for (int j = 0; j < n; j++) x[j] += y[j] + bias[j];
    else
        for (int j = 0; j < n; j++) x[j] += y[j];
}

void hs__cpu_residual_add(float *x, const float *y, const float *bias, int rows, int n, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) add_row(x + (int64_t)r * n, y + (int64_t)r * n, bias, n);
}

void hs__cpu_head_rms(float *x, int t_begin, int t_end, int stride, int n_heads, int head_dim,
                      const float *g, float eps, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = t_begin; t < t_end; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)t * stride + (int64_t)h * head_dim;
            rms_row(v, v, g, head_dim, eps);
        }
}
