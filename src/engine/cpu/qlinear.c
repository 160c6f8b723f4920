/* Reduced-precision linear layers (int8, bf16) on oneDNN's matmul primitive: see qlinear.h. */
#include "engine/cpu/qlinear.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"

#ifdef HS_NO_CLONES /* ThreadSanitizer builds: an ifunc resolver runs before TSan is set up */
#define HS_CLONES
#else
#define HS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

/* One oneDNN CPU engine for the process: it carries no state beyond the device. */
static dnnl_engine_t g_engine;
static dnnl_status_t g_engine_status = dnnl_runtime_error;
static pthread_once_t g_engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void)
{
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
}

static dnnl_engine_t cpu_engine(void)
{
    pthread_once(&g_engine_once, engine_init);
    return g_engine_status == dnnl_success ? g_engine : NULL;
}

/* Whether the CPU sums int8 products in int32 (VNNI's vpdpbusd, AMX): oneDNN's kernels
 * without it (AVX2) multiply u8 x s8 pairs with vpmaddubsw, whose int16 pair sum saturates. */
static int have_int8_dot(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
}

int hs__ql_dtype_fast(enum hs_dtype dtype)
{
    __builtin_cpu_init();
    /* AMX implies the AVX-512 paths below; the checks name what oneDNN's kernels need. int8
     * also runs on AVX2 (oneDNN's u8 x s8 kernels, on a u8 source and weights whose pairs
     * cannot saturate: hs__ql_weights_make). */
    if (dtype == HS_DTYPE_I8)
        return have_int8_dot() || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    if (dtype == HS_DTYPE_BF16) return __builtin_cpu_supports("avx512bf16");
    return 0;
}

/* The own kernel (qgemm.c) that runs this CPU's int8 layers, or HS_QGEMM_NONE: its VNNI kernel
 * where the CPU has AVX-512 VNNI but no AMX (oneDNN's AMX tiles are several times a vector
 * kernel's rate), its AVX2 kernel without an int8 dot product. */
int hs__ql_own_isa(void)
{
    static int cached = -1; /* (the CPU does not change under the process) */
    if (cached < 0) {
        __builtin_cpu_init();
        const int amx = __builtin_cpu_supports("amx-int8");
        const int isa = hs__cpu_qgemm_isa();
        cached = isa == HS_QGEMM_VNNI512 && amx                ? HS_QGEMM_NONE
                 : isa == HS_QGEMM_VNNI512 || !have_int8_dot() ? isa
                                                               : HS_QGEMM_NONE;
    }
    return cached;
}

int hs__ql_src_u8(void)
{
    static int cached = -1;
    if (cached < 0) cached = !have_int8_dot() || hs__ql_own_isa() != HS_QGEMM_NONE;
    return cached;
}

/* Whether the weights' scales keep AVX2's int16 pair sums from saturating (no int8 dot
 * product: hs__ql_weights_make). */
static int pairs_safe(void)
{
    static int cached = -1;
    if (cached < 0) cached = !have_int8_dot();
    return cached;
}

/* The source: int8 as u8 (asymmetric, with a zero point per row: hs__ql_quant_row) for the own
 * kernels and for CPUs without an int8 dot product, which oneDNN 2.x multiplies with its u8 x s8
 * kernels directly: given s8, those kernels shift the source themselves and sum the weights'
 * columns again on every call, in scalar code (most of an int8 batch's time on AVX2); the
 * weights' column sums are made once per weight (hs_ql_weights.comp) and the epilogue takes the
 * zero point's share off. s8 where oneDNN runs every layer on VNNI or AMX. */
static dnnl_data_type_t src_type(enum hs_dtype d)
{
    return d == HS_DTYPE_I8 ? (hs__ql_src_u8() ? dnnl_u8 : dnnl_s8) : dnnl_bf16;
}

static dnnl_data_type_t wei_type(enum hs_dtype d)
{
    return d == HS_DTYPE_I8 ? dnnl_s8 : dnnl_bf16;
}

static dnnl_data_type_t acc_type(enum hs_dtype d)
{
    return d == HS_DTYPE_I8 ? dnnl_s32 : dnnl_f32;
}

/* Rows a primitive is made for: few buckets, each at most HS_QL_ROW_PAD - 1 rows too many. */
static int row_bucket(int rows)
{
    if (rows <= 16) return 16;
    if (rows <= 256) return (rows + 15) & ~15;
    if (rows <= 2048) return (rows + 63) & ~63;
    return (rows + 255) & ~255;
}

int64_t hs__ql_src_bytes(int rows, int k)
{
    return ((int64_t)rows + HS_QL_ROW_PAD) * k * 2; /* bf16 is the wider of the two */
}

/* What a primitive computes after the GEMM. fused = 0: the accumulators (s32 for int8, f32 for
 * bf16) and nothing else; the epilogue runs afterwards, in C, one pass per row. fused = 1
 * (bf16): the epilogue runs inside oneDNN's kernel while the accumulators are in registers: the
 * bias (a binary add of a [1, n] row) and the activation (an eltwise post-op). int8 cannot be
 * fused so: its per-token source scale is an [mb, 1] column, which oneDNN 2.x's brgemm kernels
 * do not broadcast (they fall back to the reference kernel, ~100x slower). */
struct ql_epi {
    int fused;
    int bias;     /* fused: a bias is added */
    int act;      /* fused: enum hs_act_fn, or -1 */
    int dst_bf16; /* fused: y is written in bf16 (the next bf16 layer's input), not fp32 */
};
/* The GEMM alone: accumulators out, no epilogue. */
static const struct ql_epi ql_plain = {0, 0, -1, 0};

static int eltwise_alg(int act, dnnl_alg_kind_t *alg, float *alpha)
{
    *alpha = 0.0f;
    switch (act) {
    case HS_ACT_GELU_ERF:
        *alg = dnnl_eltwise_gelu_erf;
        return 1;
    case HS_ACT_GELU_TANH:
        *alg = dnnl_eltwise_gelu_tanh;
        return 1;
    case HS_ACT_RELU:
        *alg = dnnl_eltwise_relu;
        return 1;
    case HS_ACT_SILU:
        *alg = dnnl_eltwise_swish, *alpha = 1.0f;
        return 1;
    }
    return 0;
}

/* The post-op list of a fused epilogue (argument order: bias, activation). */
static dnnl_status_t set_epilogue(dnnl_primitive_attr_t attr, int n, const struct ql_epi *epi)
{
    dnnl_post_ops_t po = NULL;
    dnnl_status_t s = dnnl_post_ops_create(&po);
    dnnl_memory_desc_t row;
    dnnl_dims_t rd = {1, n};
    if (s == dnnl_success && epi->bias) {
        s = dnnl_memory_desc_init_by_tag(&row, 2, rd, dnnl_f32, dnnl_ab);
        if (s == dnnl_success) s = dnnl_post_ops_append_binary(po, dnnl_binary_add, &row);
    }
    dnnl_alg_kind_t alg;
    float alpha;
    if (s == dnnl_success && epi->act >= 0) {
        if (!eltwise_alg(epi->act, &alg, &alpha))
            s = dnnl_unimplemented;
        else
            s = dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, 0.0f);
    }
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (po) dnnl_post_ops_destroy(po);
    return s;
}

/* The matmul's descriptor for mb rows; weights_md NULL = let oneDNN choose the layout. */
static dnnl_status_t make_pd(enum hs_dtype dtype, int mb, int n, int k,
                             const dnnl_memory_desc_t *weights_md, const struct ql_epi *epi,
                             dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_dims_t sd = {mb, k}, wd = {k, n}, dd = {mb, n};
    const dnnl_data_type_t dst_type =
        epi->fused ? (epi->dst_bf16 ? dnnl_bf16 : dnnl_f32) : acc_type(dtype);
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&smd, 2, sd, src_type(dtype), dnnl_ab);
    if (s == dnnl_success) {
        if (weights_md)
            wmd = *weights_md;
        else
            s = dnnl_memory_desc_init_by_tag(&wmd, 2, wd, wei_type(dtype), dnnl_format_tag_any);
    }
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dst_type, dnnl_ab);
    dnnl_matmul_desc_t md;
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &smd, &wmd, NULL, &dmd);
    dnnl_primitive_attr_t attr = NULL;
    if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
    /* each (primitive, thread slot) gets its own scratchpad: concurrent use stays safe */
    if (s == dnnl_success)
        s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && epi->fused) s = set_epilogue(attr, n, epi);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &md, attr, cpu_engine(), NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

static inline uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    b += 0x7fffu + ((b >> 16) & 1u); /* round to nearest even (inputs are finite) */
    return (uint16_t)(b >> 16);
}

/* Whether an int8 layer of input width k gets the own kernels' panels (qgemm.c): where one runs
 * this CPU's layers (own_isa), k a multiple of their 4-input steps. */
static int own_kernel_takes(int k)
{
    return hs__ql_own_isa() != HS_QGEMM_NONE && k % 4 == 0;
}

/* Packs plain ([n, k] int8 or bf16) into the blocked layout oneDNN's matmul wants: learns the
 * layout from a representative primitive, then reorders into it. Sets w->md, then w->packed. */
static dnnl_status_t onednn_pack(struct hs_ql_weights *out, const void *plain)
{
    const enum hs_dtype dtype = out->dtype;
    const int n = out->n, k = out->k;
    void *packed = NULL;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_memory_desc_t user_md;
    dnnl_dims_t wd = {k, n};
    /* (the weights' layout depends on the source type and the ISA, not on the epilogue) */
    dnnl_status_t s = make_pd(dtype, 256, n, k, NULL, &ql_plain, &pd);
    const dnnl_memory_desc_t *packed_md =
        s == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    if (s == dnnl_success && !packed_md) s = dnnl_runtime_error;
    if (s == dnnl_success) {
        out->md = hs_malloc(sizeof(dnnl_memory_desc_t));
        packed = hs_malloc_aligned(dnnl_memory_desc_get_size(packed_md) + 64, 64);
        if (!out->md || !packed)
            s = dnnl_out_of_memory;
        else
            memcpy(out->md, packed_md, sizeof(dnnl_memory_desc_t));
    }
    /* [n, k] row-major is the {k, n} matrix in "ba" order */
    if (s == dnnl_success)
        s = dnnl_memory_desc_init_by_tag(&user_md, 2, wd, wei_type(dtype), dnnl_ba);
    if (s == dnnl_success) s = dnnl_memory_create(&from, &user_md, cpu_engine(), (void *)plain);
    if (s == dnnl_success) s = dnnl_memory_create(&to, out->md, cpu_engine(), packed);
    if (s == dnnl_success)
        s = dnnl_reorder_primitive_desc_create(&rpd, &user_md, cpu_engine(), out->md, cpu_engine(),
                                               NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&reorder, rpd);
    if (s == dnnl_success) s = dnnl_stream_create(&stream, cpu_engine(), dnnl_stream_default_flags);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        s = dnnl_primitive_execute(reorder, stream, 2, args);
        if (s == dnnl_success) s = dnnl_stream_wait(stream);
    }
    if (stream) dnnl_stream_destroy(stream);
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (from) dnnl_memory_destroy(from);
    if (to) dnnl_memory_destroy(to);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (s == dnnl_success)
        __atomic_store_n(&out->packed, packed, __ATOMIC_RELEASE);
    else
        hs_free_aligned(packed);
    return s;
}

/* w's oneDNN packing, made on first use where the own kernels hold the weights (it runs
 * every int8 layer there by default, so most processes never pay for the second copy): the
 * plain weights are unpacked from its panels. Thread-safe; 0 or -1. */
static int ensure_onednn_packed(const struct hs_ql_weights *cw)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct hs_ql_weights *w = (struct hs_ql_weights *)cw; /* (only the lazy fields change) */
    if (__atomic_load_n(&w->packed, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&lock);
    dnnl_status_t s = dnnl_success;
    if (!w->packed) {
        int8_t *plain = w->own ? hs_malloc_aligned((size_t)w->n * (size_t)w->k, 64) : NULL;
        if (plain) {
            hs__cpu_qgemm_unpack(w->own, w->n, w->k, plain);
            hs_free(w->md);
            w->md = NULL;
            s = onednn_pack(w, plain);
        } else {
            s = dnnl_out_of_memory;
        }
        hs_free_aligned(plain);
    }
    pthread_mutex_unlock(&lock);
    return s == dnnl_success ? 0 : -1;
}

/* One weight channel in int8 steps of s: round half away from zero, clamped to +-127. */
static void quant_channel(const float *row, int k, float s, int8_t *q)
{
    for (int i = 0; i < k; i++) {
        const float v = row[i] / s;
        const int r = (int)(v + (v >= 0.0f ? 0.5f : -0.5f));
        q[i] = (int8_t)(r > 127 ? 127 : (r < -127 ? -127 : r));
    }
}

/* Without an int8 dot product the GEMM sums the products of an input pair (k = 2i, 2i + 1) in
 * int16 (vpmaddubsw): with the u8 source at most 255 each, a pair of weights of one sign must
 * stay within 128 steps together (255 * 128 < 32767). The scale is chosen so: per channel, the
 * larger of max|w| and the largest same-signed pair sum is 127 steps (rounding adds at most
 * one). Most channels keep nearly all of int8's range; a channel's largest weight loses the
 * steps of its neighbour's. (Tried and dropped: per channel, whichever of this and max|w| / 127
 * with the few pairs above 128 steps shrunk has the smaller squared error, on a grid between
 * them: the golden cosines moved within noise, for ten times the quantization time.) */
static float pair_safe_span(const float *row, int k, float amax)
{
    float span = amax;
    for (int i = 0; i + 1 < k; i += 2)
        if ((row[i] > 0.0f) == (row[i + 1] > 0.0f)) {
            const float p = fabsf(row[i]) + fabsf(row[i + 1]);
            span = p > span ? p : span;
        }
    return span;
}

hs_status hs__ql_weights_make(enum hs_dtype dtype, const float *w, int n, int k,
                              const float *smooth, struct hs_ql_weights *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (dtype != HS_DTYPE_I8 && dtype != HS_DTYPE_BF16)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cpu: no %s linear layers",
                            hs_compute_dtype_name(dtype));
    if (!cpu_engine()) return hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN engine unavailable");
    out->dtype = dtype;
    out->n = n;
    out->k = k;
    const size_t esz = dtype == HS_DTYPE_I8 ? 1 : 2;
    void *plain = hs_malloc_aligned((size_t)n * (size_t)k * esz, 64);
    if (!plain) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (weights)");
    if (dtype == HS_DTYPE_I8) {
        const int u8 = hs__ql_src_u8(), pairs = pairs_safe();
        out->scale = hs_malloc_aligned(sizeof(float) * (size_t)n, 64);
        /* what the u8 source's zero point adds to each accumulator, per step of it */
        if (u8) out->comp = hs_malloc_aligned(sizeof(float) * (size_t)n, 64);
        if (!out->scale || (u8 && !out->comp)) {
            hs_free_aligned(plain);
            hs__ql_weights_free(out);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (scales)");
        }
        if (smooth) {
            out->inv_smooth = hs_malloc_aligned(sizeof(float) * (size_t)k, 64);
            if (!out->inv_smooth) {
                hs_free_aligned(plain);
                hs__ql_weights_free(out);
                return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (smoothing)");
            }
            for (int i = 0; i < k; i++) {
                if (!(smooth[i] > 0.0f) || smooth[i] > 1e30f) {
                    hs_free_aligned(plain);
                    hs__ql_weights_free(out);
                    return hs_error_set(err, HS_STATUS_CORRUPT,
                                        "cpu: smoothing factor %d is %g (must be > 0)", i,
                                        (double)smooth[i]);
                }
                out->inv_smooth[i] = 1.0f / smooth[i];
            }
        }
        float *row = hs_malloc(sizeof(float) * (size_t)k);
        if (!row) {
            hs_free_aligned(plain);
            hs__ql_weights_free(out);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (weights)");
        }
        int8_t *q = plain;
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < k; i++) row[i] = w[(size_t)j * k + i] * (smooth ? smooth[i] : 1.0f);
            float amax = 0.0f;
            for (int i = 0; i < k; i++)
                amax = row[i] > amax ? row[i] : (-row[i] > amax ? -row[i] : amax);
            const float span = pairs ? pair_safe_span(row, k, amax) : amax;
            const float sc = span > 0.0f ? span / 127.0f : 1.0f;
            quant_channel(row, k, sc, q + (size_t)j * k);
            out->scale[j] = sc;
            int32_t sum = 0;
            for (int i = 0; i < k; i++) sum += q[(size_t)j * k + i];
            if (u8) out->comp[j] = sc * (float)sum;
        }
        hs_free(row);
    } else {
        uint16_t *b = plain;
        for (size_t i = 0; i < (size_t)n * (size_t)k; i++) b[i] = to_bf16(w[i]);
    }
    dnnl_status_t s = dnnl_success;
    /* the own kernels' panels; oneDNN's packing then waits for a call that needs it
     * (ensure_onednn_packed) */
    if (dtype == HS_DTYPE_I8 && own_kernel_takes(k) &&
        !(out->own = hs__cpu_qgemm_pack(plain, n, k)))
        s = dnnl_out_of_memory;
    if (s == dnnl_success && !out->own) s = onednn_pack(out, plain);
    hs_free_aligned(plain);
    if (s != dnnl_success) {
        hs__ql_weights_free(out);
        if (s == dnnl_out_of_memory)
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (packed weights)");
        return hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN cannot pack %s weights %dx%d (%d)",
                            hs_compute_dtype_name(dtype), n, k, (int)s);
    }
    return HS_STATUS_OK;
}

int64_t hs__ql_weights_bytes(enum hs_dtype dtype, int n, int k)
{
    /* the packed copy (oneDNN's blocked layout + 64, or the own kernel's panels, where oneDNN's
     * waits for a call that needs it) and, int8, the per-channel scales, the u8 source's column
     * sums and the smoothing multipliers; the plain staging copy is freed once packed */
    if (dtype != HS_DTYPE_I8) return 2 * (int64_t)n * k + 64;
    int64_t b = own_kernel_takes(k) ? hs__cpu_qgemm_pack_bytes(n, k) : (int64_t)n * k + 64;
    return b + (int64_t)sizeof(float) * (n + k) +
           (hs__ql_src_u8() ? (int64_t)sizeof(float) * n : 0);
}

void hs__ql_weights_free(struct hs_ql_weights *w)
{
    if (!w) return;
    hs_free_aligned(w->packed);
    hs_free_aligned(w->scale);
    hs_free_aligned(w->inv_smooth);
    hs_free_aligned(w->comp);
    hs_free_aligned(w->own);
    hs_free(w->md);
    memset(w, 0, sizeof *w);
}

/* ---- the per-workspace primitive cache ---- */

struct ql_slot {
    dnnl_memory_t src, wei, dst, scratch;
    dnnl_memory_t bias; /* the fused epilogue's bias (NULL where unused) */
    void *scratch_buf;
};

struct ql_entry {
    enum hs_dtype dtype;
    int n, k, mb;
    struct ql_epi epi; /* as asked for: epi.fused is what was asked, fused what was made */
    int fused;
    dnnl_primitive_t prim;
    struct ql_slot *slot; /* [slots] */
};

struct hs_ql_cache {
    pthread_mutex_t lock; /* guards the entry list; a slot's resources are its thread's alone */
    int slots;
    dnnl_stream_t *stream; /* [slots] */
    int n, cap;
    struct ql_entry **entries;
};

hs_status hs__ql_cache_create(int slots, struct hs_ql_cache **out, struct hs_error *err)
{
    *out = NULL;
    if (!cpu_engine()) return hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN engine unavailable");
    struct hs_ql_cache *c = hs_calloc(1, sizeof *c);
    if (!c) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
    pthread_mutex_init(&c->lock, NULL);
    c->slots = slots < 1 ? 1 : slots;
    c->stream = hs_calloc((size_t)c->slots, sizeof *c->stream);
    if (!c->stream) {
        hs__ql_cache_free(c);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
    }
    for (int i = 0; i < c->slots; i++)
        if (dnnl_stream_create(&c->stream[i], cpu_engine(), dnnl_stream_default_flags)) {
            hs__ql_cache_free(c);
            return hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN stream");
        }
    *out = c;
    return HS_STATUS_OK;
}

static void entry_free(struct ql_entry *e, int slots)
{
    if (!e) return;
    for (int i = 0; e->slot && i < slots; i++) {
        struct ql_slot *s = &e->slot[i];
        if (s->src) dnnl_memory_destroy(s->src);
        if (s->wei) dnnl_memory_destroy(s->wei);
        if (s->dst) dnnl_memory_destroy(s->dst);
        if (s->scratch) dnnl_memory_destroy(s->scratch);
        if (s->bias) dnnl_memory_destroy(s->bias);
        hs_free_aligned(s->scratch_buf);
    }
    hs_free(e->slot);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    hs_free(e);
}

void hs__ql_cache_free(struct hs_ql_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) entry_free(c->entries[i], c->slots);
    hs_free(c->entries);
    for (int i = 0; c->stream && i < c->slots; i++)
        if (c->stream[i]) dnnl_stream_destroy(c->stream[i]);
    hs_free(c->stream);
    pthread_mutex_destroy(&c->lock);
    hs_free(c);
}

static dnnl_status_t plain_memory(dnnl_memory_t *m, dnnl_dim_t d0, dnnl_dim_t d1)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {d0, d1};
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&md, 2, d, dnnl_f32, dnnl_ab);
    if (s == dnnl_success) s = dnnl_memory_create(m, &md, cpu_engine(), DNNL_MEMORY_NONE);
    return s;
}

/* Makes the primitive for (w's dtype and shape, mb rows, epilogue) with memory objects for
 * every slot. A fused epilogue oneDNN refuses falls back to the unfused primitive. */
static struct ql_entry *entry_make(const struct hs_ql_cache *c, const struct hs_ql_weights *w,
                                   int mb, const struct ql_epi *epi)
{
    struct ql_entry *e = hs_calloc(1, sizeof *e);
    if (!e) return NULL;
    e->dtype = w->dtype;
    e->n = w->n;
    e->k = w->k;
    e->mb = mb;
    e->epi = *epi;
    e->slot = hs_calloc((size_t)c->slots, sizeof *e->slot);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s =
        e->slot ? make_pd(w->dtype, mb, w->n, w->k, w->md, epi, &pd) : dnnl_out_of_memory;
    e->fused = epi->fused && s == dnnl_success;
    if (s != dnnl_success && s != dnnl_out_of_memory && epi->fused) {
        s = make_pd(w->dtype, mb, w->n, w->k, w->md, &ql_plain, &pd);
    }
    if (s == dnnl_success) s = dnnl_primitive_create(&e->prim, pd);
    for (int i = 0; s == dnnl_success && i < c->slots; i++) {
        struct ql_slot *sl = &e->slot[i];
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        const dnnl_memory_desc_t *dmd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        const dnnl_memory_desc_t *pmd =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        s = dnnl_memory_create(&sl->src, smd, cpu_engine(), DNNL_MEMORY_NONE);
        if (s == dnnl_success)
            s = dnnl_memory_create(&sl->wei, w->md, cpu_engine(), DNNL_MEMORY_NONE);
        if (s == dnnl_success)
            s = dnnl_memory_create(&sl->dst, dmd, cpu_engine(), DNNL_MEMORY_NONE);
        if (s == dnnl_success && e->fused && epi->bias) s = plain_memory(&sl->bias, 1, w->n);
        const size_t sp = pmd ? dnnl_memory_desc_get_size(pmd) : 0;
        if (s == dnnl_success && sp > 0) {
            sl->scratch_buf = hs_malloc_aligned(sp, 64);
            if (!sl->scratch_buf) s = dnnl_out_of_memory;
            if (s == dnnl_success)
                s = dnnl_memory_create(&sl->scratch, pmd, cpu_engine(), sl->scratch_buf);
        }
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) {
        entry_free(e, c->slots);
        return NULL;
    }
    return e;
}

static struct ql_entry *lookup(struct hs_ql_cache *c, const struct hs_ql_weights *w, int mb,
                               const struct ql_epi *epi)
{
    pthread_mutex_lock(&c->lock);
    struct ql_entry *found = NULL;
    for (int i = 0; i < c->n && !found; i++) {
        struct ql_entry *e = c->entries[i];
        if (e->mb == mb && e->n == w->n && e->k == w->k && e->dtype == w->dtype &&
            e->epi.fused == epi->fused && e->epi.bias == epi->bias && e->epi.act == epi->act &&
            e->epi.dst_bf16 == epi->dst_bf16)
            found = e;
    }
    if (!found && (c->n < c->cap ||
                   (c->entries = hs_realloc(c->entries, sizeof *c->entries *
                                                            (size_t)(c->cap = c->cap * 2 + 16))))) {
        found = entry_make(c, w, mb, epi);
        if (found) c->entries[c->n++] = found;
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* A row's quantization from its range (hs__ql_quant_row): u8 asymmetric, or s8 symmetric. *inv:
 * what a value is multiplied by to give its steps; *zp: the zero point. {0, 0} (and *inv 0) for
 * a zero row, or one whose range is NaN. */
static struct hs_qrow row_params(float mn, float mx, int u8, float *inv, int *zp)
{
    const float lo = mn < 0.0f ? mn : 0.0f, hi = mx > 0.0f ? mx : 0.0f;
    struct hs_qrow r = {0.0f, 0.0f};
    *inv = 0.0f;
    *zp = 0;
    if (u8) {
        const float span = hi - lo;
        if (!(span > 0.0f)) return r;
        *inv = 255.0f / span;
        *zp = (int)nearbyintf(-lo * *inv);
        r.s = span / 255.0f;
        r.sz = r.s * (float)*zp;
    } else {
        const float amax = hi > -lo ? hi : -lo;
        if (!(amax > 0.0f)) return r;
        *inv = 127.0f / amax;
        r.s = amax / 127.0f;
    }
    return r;
}

/* The running min and max over x[from, k) (times mul): the vector quantizers' scalar ends. */
static void range_tail(const float *x, const float *mul, int from, int k, float *mn, float *mx)
{
    for (int j = from; j < k; j++) {
        const float v = x[j] * (mul ? mul[j] : 1.0f);
        *mn = v < *mn ? v : *mn;
        *mx = v > *mx ? v : *mx;
    }
}

/* x[from, k) (times mul) in steps of 1 / inv plus zp, to nearest even as the vector parts: u8
 * clamped to [0, 255], s8 to [-128, 127]. */
static void quant_tail(const float *x, const float *mul, uint8_t *q, int from, int k, float inv,
                       int zp, int u8)
{
    for (int j = from; j < k; j++) {
        int r = (int)nearbyintf(x[j] * (mul ? mul[j] : 1.0f) * inv) + zp;
        if (u8)
            q[j] = (uint8_t)(r < 0 ? 0 : (r > 255 ? 255 : r));
        else
            q[j] = (uint8_t)(int8_t)(r < -128 ? -128 : (r > 127 ? 127 : r));
    }
}

/* A quantizer's middle: the range, given the vector part's min and max over x[0, from), ends
 * with the rest; then the row's parameters. A zero row is written out whole (every q the zero
 * point 0): 1 then. */
static int row_setup(const float *x, const float *mul, uint8_t *q, int from, int k, float mn,
                     float mx, int u8, struct hs_qrow *r, float *inv, int *zp)
{
    range_tail(x, mul, from, k, &mn, &mx);
    *r = row_params(mn, mx, u8, inv, zp);
    if (r->s != 0.0f) return 0;
    memset(q, 0, (size_t)k);
    return 1;
}

/* The portable quantizer (hs__ql_quant_row, isa 0). */
static struct hs_qrow quant_row(const float *x, const float *mul, uint8_t *q, int k, int u8)
{
    struct hs_qrow r;
    float inv;
    int zp;
    if (!row_setup(x, mul, q, 0, k, 0.0f, 0.0f, u8, &r, &inv, &zp))
        quant_tail(x, mul, q, 0, k, inv, zp, u8);
    return r;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* quant_row with AVX-512: gcc does not vectorize the float min / max reductions above (minps is
 * not its min for NaN and -0), which made quantization 40 % of an int8 batch. The same bytes. */
__attribute__((target("avx512f,avx512bw"))) static struct hs_qrow
quant_row_avx512(const float *x, const float *mul, uint8_t *q, int k, int u8)
{
    /* four running minima and maxima: one was a chain of the max's latency per vector */
    __m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0, n3 = n0, m0 = n0, m1 = n0, m2 = n0, m3 = n0;
    int i = 0;
#define HS__LD(o)                                                                                  \
    (mul ? _mm512_mul_ps(_mm512_loadu_ps(x + i + (o)), _mm512_loadu_ps(mul + i + (o)))             \
         : _mm512_loadu_ps(x + i + (o)))
    for (; i + 64 <= k; i += 64) {
        const __m512 a = HS__LD(0), b = HS__LD(16), c = HS__LD(32), d = HS__LD(48);
        n0 = _mm512_min_ps(n0, a), m0 = _mm512_max_ps(m0, a);
        n1 = _mm512_min_ps(n1, b), m1 = _mm512_max_ps(m1, b);
        n2 = _mm512_min_ps(n2, c), m2 = _mm512_max_ps(m2, c);
        n3 = _mm512_min_ps(n3, d), m3 = _mm512_max_ps(m3, d);
    }
    for (; i + 16 <= k; i += 16) {
        const __m512 a = HS__LD(0);
        n0 = _mm512_min_ps(n0, a), m0 = _mm512_max_ps(m0, a);
    }
#undef HS__LD
    const float mn =
        _mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(n0, n1), _mm512_min_ps(n2, n3)));
    const float mx =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    struct hs_qrow r;
    float inv;
    int zp;
    if (row_setup(x, mul, q, i, k, mn, mx, u8, &r, &inv, &zp)) return r;
    const __m512 vinv = _mm512_set1_ps(inv);
    /* 64 values a step: vpackssdw to int16, the zero point added there (saturating), and
     * vpackuswb (u8) or vpacksswb (s8), with one vpermd for the lane order */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i z16 = _mm512_set1_epi16((short)zp), z32 = _mm512_set1_epi32(zp);
    i = 0;
#define HS__CV(o)                                                                                  \
    _mm512_cvtps_epi32(_mm512_mul_ps(                                                              \
        mul ? _mm512_mul_ps(_mm512_loadu_ps(x + i + (o)), _mm512_loadu_ps(mul + i + (o)))          \
            : _mm512_loadu_ps(x + i + (o)),                                                        \
        vinv))
    for (; i + 64 <= k; i += 64) {
        const __m512i ab = _mm512_packs_epi32(HS__CV(0), HS__CV(16));
        const __m512i cd = _mm512_packs_epi32(HS__CV(32), HS__CV(48));
        const __m512i b =
            u8 ? _mm512_packus_epi16(_mm512_adds_epi16(ab, z16), _mm512_adds_epi16(cd, z16))
               : _mm512_packs_epi16(ab, cd);
        _mm512_storeu_si512((void *)(q + i), _mm512_permutexvar_epi32(order, b));
    }
    for (; i + 16 <= k; i += 16) {
        const __m512i r16 = HS__CV(0);
        const __m128i b = u8 ? _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_add_epi32(r16, z32),
                                                                       _mm512_setzero_si512()))
                             : _mm512_cvtsepi32_epi8(r16);
        _mm_storeu_si128((__m128i *)(void *)(q + i), b);
    }
#undef HS__CV
    quant_tail(x, mul, q, i, k, inv, zp, u8);
    return r;
}

/* The same with AVX2 (gcc leaves quant_row's reductions scalar there too: 6 % of an int8
 * batch). 32 values a step: four vectors of int32 packed with saturation to int16, the zero
 * point added there, then to bytes, whose lane order vpermd restores. */
__attribute__((target("avx2,fma"))) static struct hs_qrow
quant_row_avx2(const float *x, const float *mul, uint8_t *q, int k, int u8)
{
    __m256 vmin = _mm256_setzero_ps(), vmax = vmin;
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (mul) v = _mm256_mul_ps(v, _mm256_loadu_ps(mul + i));
        vmin = _mm256_min_ps(vmin, v);
        vmax = _mm256_max_ps(vmax, v);
    }
    __m128 h = _mm_min_ps(_mm256_castps256_ps128(vmin), _mm256_extractf128_ps(vmin, 1));
    h = _mm_min_ps(h, _mm_movehl_ps(h, h));
    h = _mm_min_ss(h, _mm_shuffle_ps(h, h, 1));
    const float mn = _mm_cvtss_f32(h);
    h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float mx = _mm_cvtss_f32(h);
    struct hs_qrow r;
    float inv;
    int zp;
    if (row_setup(x, mul, q, i, k, mn, mx, u8, &r, &inv, &zp)) return r;
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i z16 = _mm256_set1_epi16((short)zp),
                  order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (i = 0; i + 32 <= k; i += 32) {
        __m256i c[4];
        for (int v = 0; v < 4; v++) {
            __m256 f = _mm256_loadu_ps(x + i + 8 * v);
            if (mul) f = _mm256_mul_ps(f, _mm256_loadu_ps(mul + i + 8 * v));
            c[v] = _mm256_cvtps_epi32(_mm256_mul_ps(f, vinv));
        }
        const __m256i ab = _mm256_packs_epi32(c[0], c[1]), cd = _mm256_packs_epi32(c[2], c[3]);
        const __m256i b =
            u8 ? _mm256_packus_epi16(_mm256_adds_epi16(ab, z16), _mm256_adds_epi16(cd, z16))
               : _mm256_packs_epi16(ab, cd);
        _mm256_storeu_si256((__m256i *)(void *)(q + i), _mm256_permutevar8x32_epi32(b, order));
    }
    quant_tail(x, mul, q, i, k, inv, zp, u8);
    return r;
}

static int have_avx512bw(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512bw") ? 1 : 0;
    }
    return cached;
}

#else
static struct hs_qrow quant_row_avx512(const float *x, const float *mul, uint8_t *q, int k, int u8)
{
    return quant_row(x, mul, q, k, u8);
}
static struct hs_qrow quant_row_avx2(const float *x, const float *mul, uint8_t *q, int k, int u8)
{
    return quant_row(x, mul, q, k, u8);
}
static int have_avx512bw(void)
{
    return 0;
}
#endif

/* The same with a fixed scale: values beyond +-127 steps saturate. */
HS_CLONES
static void quant_row_static(const float *x, const float *mul, uint8_t *q, int k, float inv_scale,
                             int zp)
{
    for (int i = 0; i < k; i++) {
        float v = x[i] * (mul ? mul[i] : 1.0f) * inv_scale;
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        q[i] = (uint8_t)((int)(v + (v >= 0.0f ? 0.5f : -0.5f)) + zp);
    }
}

HS_CLONES
static void bf16_row(const float *x, uint16_t *b, int k)
{
    for (int i = 0; i < k; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u += 0x7fffu + ((u >> 16) & 1u);
        b[i] = (uint16_t)(u >> 16);
    }
}

/* An int8 row's accumulators (less the u8 source's zero point times w->comp) scaled back to fp32,
 * plus bias and through act when given, in one pass: the own kernel's block epilogue on one row. */
static void dequant_row(const int32_t *acc, const struct hs_ql_weights *w, struct hs_qrow sx,
                        const float *bias, int act, float *y, int n)
{
    const struct hs_qgemm_epi e = {w->comp, w->scale, &sx, bias, act, y, n};
    hs__cpu_dequant_block(acc, n, &e, 0, 0, 1, n);
}

/* The largest row count <= rows that is its own bucket: a primitive of exactly that many rows
 * can write y in place. 0 when rows is below the smallest bucket. */
static int exact_rows(int rows)
{
    if (rows < 16) return 0;
    if (rows <= 256) return rows & ~15;
    if (rows <= 2048) return rows & ~63;
    return rows & ~255;
}

/* Rows per GEMM chunk of the unfused path: about 192 KiB of accumulators per thread (with the
 * weights, inside a 1 MiB L2), a bucket size (a multiple of 16, at most 256 per thread).
 * Measured on Zen 4 (MiniLM int8, 32 x 128, cpu-clock samples): against one GEMM over all rows,
 * the dequant epilogue took 45 % and the GEMM kernels 15 % fewer samples; 64 KiB chunks were
 * a little slower than 192. */
static int chunk_rows(int n, int nt)
{
    int r = (192 * 1024 / 4 / (n > 0 ? n : 1)) & ~15;
    r = r < 16 ? 16 : (r > 256 ? 256 : r);
    return r * (nt > 1 ? nt : 1);
}

/* Up to how many rows the engine's own kernel (qgemm.c) runs an int8 layer instead of oneDNN's
 * matmul, where it holds the weights (hs__ql_own_isa). Measured with bench_cpu --dtype int8
 * --int8-own-rows 0 against the default, the same binary interleaved, MiniLM, 2 threads:
 * - AVX2 (AMD EPYC Zen 3, no VNNI): 1x16 1.78 -> 1.36 ms, 1x64 5.8 -> 5.1, 1x128 11.7 -> 10.6,
 *   4x128 48 -> 42, 32x128 389 -> 350 (before its AVX2 quantizer);
 * - AVX-512 VNNI (Intel Xeon, no AMX; both on the u8 source): 1x4 0.53-0.66 -> 0.41 ms, 1x8
 *   0.67-0.73 -> 0.55; from 1x16 to 32x128 within this VM's noise of each other (3 rounds,
 *   min_ms 1x16 0.66 vs 0.68, 8x128 33-39 vs 32-45, 32x128 146-191 vs 146-179).
 * oneDNN 2.6 wins nowhere: a bound only for a later oneDNN or a CPU class that measures
 * otherwise (AMX keeps oneDNN: hs__ql_own_isa). */
#define QL_OWN_ROWS_DEFAULT (1 << 30)
static int g_own_rows = -1; /* < 0: the default */

int hs__ql_own_rows(void)
{
    const int r = __atomic_load_n(&g_own_rows, __ATOMIC_RELAXED);
    return r < 0 ? QL_OWN_ROWS_DEFAULT : r;
}

void hs__ql_set_own_rows(int rows)
{
    __atomic_store_n(&g_own_rows, rows < 0 ? -1 : rows, __ATOMIC_RELAXED);
}

/* One execution of e; dst: fp32 y (fused) or the accumulators. */
static dnnl_status_t execute(struct hs_ql_cache *c, int slot, struct ql_entry *e,
                             const struct hs_ql_weights *w, void *src, const float *bias, void *dst)
{
    struct ql_slot *sl = &e->slot[slot];
    dnnl_stream_t st = c->stream[slot];
    dnnl_exec_arg_t args[5];
    int na = 0;
    dnnl_status_t s = dnnl_memory_set_data_handle_v2(sl->src, src, st);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle_v2(sl->wei, w->packed, st);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle_v2(sl->dst, dst, st);
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, sl->src};
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, sl->wei};
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DST, sl->dst};
    if (sl->scratch) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sl->scratch};
    if (s == dnnl_success && sl->bias) {
        s = dnnl_memory_set_data_handle_v2(sl->bias, (void *)bias, st);
        args[na++] =
            (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, sl->bias};
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, st, na, args);
    if (s == dnnl_success) s = dnnl_stream_wait(st);
    return s;
}

struct hs_qrow hs__ql_quant_row(int isa, const float *x, const float *mul, uint8_t *q, int k,
                                int u8)
{
    if (isa == 2) return quant_row_avx512(x, mul, q, k, u8);
    if (isa == 1) return quant_row_avx2(x, mul, q, k, u8);
    return quant_row(x, mul, q, k, u8);
}

/* One row of x quantized for w's input (its smoothing, static or per-token scale) or rounded
 * to bf16; returns the int8 row's quantization. */
static struct hs_qrow quant_input(const struct hs_ql_weights *w, const float *x, void *q, int isa)
{
    const int k = w->k;
    if (w->dtype != HS_DTYPE_I8) {
        bf16_row(x, q, k);
        return (struct hs_qrow){0.0f, 0.0f};
    }
    const int u8 = w->comp != NULL; /* a u8 source (hs__ql_src_u8) */
    if (w->act_scale > 0.0f) {      /* static: symmetric, the u8 source's zero point 128 */
        const int zp = u8 ? 128 : 0;
        quant_row_static(x, w->inv_smooth, q, k, 1.0f / w->act_scale, zp);
        return (struct hs_qrow){w->act_scale, w->act_scale * (float)zp};
    }
    return hs__ql_quant_row(isa, x, w->inv_smooth, q, k, u8);
}

int hs__ql_chainable(const struct hs_ql_weights *w, const struct hs_ql_weights *next)
{
    return next && w->dtype == next->dtype && next->k == w->n &&
           (w->dtype == HS_DTYPE_BF16 || (w->dtype == HS_DTYPE_I8 && !next->inv_smooth));
}

/* 0 for success; else -1 with the message: dnnl_runtime_error stands for a primitive of mb
 * rows oneDNN could not make, anything else for a failed execution. */
static int ql_status(dnnl_status_t s, const struct hs_ql_weights *w, int mb, struct hs_error *err)
{
    if (s == dnnl_success) return 0;
    if (s == dnnl_runtime_error)
        hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN cannot make a %s %dx%dx%d matmul",
                     hs_compute_dtype_name(w->dtype), mb, w->n, w->k);
    else
        hs_error_set(err, HS_STATUS_ENGINE, "cpu: oneDNN %s matmul failed (%d)",
                     hs_compute_dtype_name(w->dtype), (int)s);
    return -1;
}

/* What an unfused layer does with each row of its accumulators (int8, or bf16 whose fused
 * epilogue oneDNN refused). */
struct ql_epilogue {
    const struct hs_ql_weights *w, *next;
    const float *bias;
    int act, isa;
    int32_t *acc;       /* the chunk's accumulators, row 0 = the chunk's first */
    float *y;           /* plain output rows (NULL with next or ln) */
    struct hs_qrow *sx; /* per-row input quantization; with next, overwritten by next's */
    void *qnext;
    const struct hs_ql_resid_ln *ln;
};

/* Row r of the chunk that starts at row r0. */
static void epilogue_row(const struct ql_epilogue *e, int r0, int r)
{
    const struct hs_ql_weights *w = e->w;
    const int n = w->n, i8 = w->dtype == HS_DTYPE_I8;
    const int32_t *a = e->acc + (size_t)r * n;
    const size_t row = (size_t)(r0 + r);
    if (e->next) { /* the row never leaves L1 in fp32: it goes out as next's input */
        float v[n];
        if (i8)
            dequant_row(a, w, e->sx[row], e->bias, e->act, v, n);
        else {
            memcpy(v, (const float *)a, sizeof(float) * (size_t)n);
            hs__cpu_bias_act_row(v, e->bias, n, e->act);
        }
        e->sx[row] = quant_input(e->next, v, (char *)e->qnext + row * n * (i8 ? 1 : 2), e->isa);
        return;
    }
    if (e->ln) { /* the row goes from L1 into the residual and its LayerNorm */
        float v[n];
        dequant_row(a, w, e->sx[row], NULL, -1, v, n);
        hs__cpu_residual_ln_row(e->ln->x + row * n, v, e->ln->bias, e->ln->g, e->ln->beta, n,
                                e->ln->eps);
        return;
    }
    float *yr = e->y + row * n;
    if (i8)
        dequant_row(a, w, e->sx[row], e->bias, e->act, yr, n);
    else {
        memcpy(yr, (const float *)a, sizeof(float) * (size_t)n);
        hs__cpu_bias_act_row(yr, e->bias, n, e->act);
    }
}

/* Row r of a chunk whose GEMM blocks the own kernel already turned into fp32 (dequantized, bias
 * and activation: hs__cpu_dequant_block) in the accumulator buffer: the rest of epilogue_row. */
static void epilogue_f32_row(const struct ql_epilogue *e, int r0, int r)
{
    const int n = e->w->n;
    const float *v = (const float *)(const void *)e->acc + (size_t)r * n;
    const size_t row = (size_t)(r0 + r);
    if (e->next)
        e->sx[row] = quant_input(e->next, v, (char *)e->qnext + row * n, e->isa);
    else
        hs__cpu_residual_ln_row(e->ln->x + row * n, v, e->ln->bias, e->ln->g, e->ln->beta, n,
                                e->ln->eps);
}

/* An int8 layer on the own kernel (qgemm.c): quantization, GEMM and epilogue as worksharing loops
 * of one parallel region (three forks and joins before; measured within noise of it, MiniLM
 * 1x16 1.24-1.28 ms either way). A few rows run in one pass; more in L2-sized chunks, whose
 * fp32 rows the row epilogue reads from cache (350 vs 354 ms at 32x128 unchunked). Each block of
 * the GEMM is dequantized (with bias and activation) while it is in L1, straight into y or, for
 * a row epilogue (the next layer's quantization, the residual LayerNorm), into the accumulators
 * as floats: a pass over the accumulators after the GEMM was 7.5 % of an int8 MiniLM batch. */
static void run_own(const struct ql_epilogue *e, const float *x, void *qsrc, int rows, int nt)
{
    const struct hs_ql_weights *w = e->w;
    const int n = w->n, k = w->k;
    /* (one thread: a slice of a large batch, in L2-sized chunks however few its rows) */
    const int chunk = rows <= 256 && nt > 1 ? rows : chunk_rows(n, nt);
    float *accf = (float *)(void *)e->acc;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        if (x) { /* (NULL: a chained producer already quantized the input into qsrc and sx) */
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++)
                e->sx[r] = quant_input(w, x + (size_t)r * k, (char *)qsrc + (size_t)r * k, e->isa);
        }
        for (int r0 = 0; r0 < rows; r0 += chunk) {
            const int left = rows - r0 < chunk ? rows - r0 : chunk, last = r0 + chunk >= rows;
            const struct hs_qgemm_epi epi = {w->comp,
                                             w->scale,
                                             e->sx + r0,
                                             e->ln ? NULL : e->bias,
                                             e->ln ? -1 : e->act,
                                             e->y ? e->y + (size_t)r0 * n : accf,
                                             n};
            hs__cpu_qgemm_team(hs__ql_own_isa(), (const uint8_t *)qsrc + (size_t)r0 * k, w->own,
                               e->acc, left, n, k, &epi, !e->y || !last);
            if (!e->y) { /* (the next chunk's GEMM reuses the accumulators: a barrier before it) */
#pragma omp for schedule(static) nowait
                for (int r = 0; r < left; r++) epilogue_f32_row(e, r0, r);
                if (!last) {
#pragma omp barrier
                }
            }
        }
    }
}

/* hs__ql_run, and with ln given (int8, unfused only) hs__ql_run_resid_ln. */
static int ql_run(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w, const float *x,
                  const float *bias, float *y, int rows, int act, int nt, void *qsrc,
                  struct hs_qrow *sx, int32_t *acc, const struct hs_ql_weights *next, void *qnext,
                  const struct hs_ql_resid_ln *ln, struct hs_error *err)
{
    const int n = w->n, k = w->k;
    if (slot < 0 || slot >= c->slots) {
        hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: linear slot %d of %d", slot, c->slots);
        return -1;
    }
    if (next && (!hs__ql_chainable(w, next) || !qnext)) {
        hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: linear layers cannot be chained");
        return -1;
    }
    const int i8 = w->dtype == HS_DTYPE_I8;
    const size_t esz = i8 ? 1 : 2;
    /* int8 where the own kernel holds the weights (run_own) */
    const int own = i8 && w->own && rows <= hs__ql_own_rows();
    if (!own && ensure_onednn_packed(w)) {
        hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (oneDNN's packed weights)");
        return -1;
    }
    /* the quantizer: 2 AVX-512, 1 AVX2, 0 portable */
    const int isa = !i8 ? 0 : have_avx512bw() ? 2 : hs__cpu_qgemm_runs(HS_QGEMM_AVX2) ? 1 : 0;
    const struct ql_epilogue ep = {w,  next,  bias, act, isa, acc, next || ln ? NULL : y,
                                   sx, qnext, ln};
    if (own) {
        run_own(&ep, x, qsrc, rows, nt);
        return 0;
    }
    if (x) { /* (NULL: a chained producer already quantized the input into qsrc and sx) */
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
        for (int r = 0; r < rows; r++)
            sx[r] = quant_input(w, x + (size_t)r * k, (char *)qsrc + (size_t)r * k * esz, isa);
    }
    /* Fused: the leading rows that fill a bucket exactly go straight into y; the rest (fewer
     * than a bucket step) into the padded accumulator buffer, copied out after. Rows past
     * `rows` in y may belong to another thread's slice, so nothing but exact buckets writes
     * there. The bucket padding rows of sx and of the source are read but never used. */
    const struct ql_epi want = {!i8, !i8 && bias != NULL, i8 ? -1 : act, !i8 && next};
    /* chained bf16: qnext has room for the bucket's padding rows, one execution fills it */
    const int main_rows = want.dst_bf16 ? 0 : exact_rows(rows);
    int done = 0, unfused = !want.fused;
    dnnl_status_t s = dnnl_success;
    int failed_mb = row_bucket(rows);
    for (int part = 0; part < 2 && !unfused && s == dnnl_success && done < rows; part++) {
        const int pr = part == 0 && main_rows > 0 ? main_rows : rows - done;
        const int mb = row_bucket(pr);
        struct ql_entry *e = lookup(c, w, mb, &want);
        if (!e) {
            failed_mb = mb;
            s = dnnl_runtime_error;
            break;
        }
        void *src = (char *)qsrc + (size_t)done * k * esz;
        if (!e->fused) { /* the fallback: every remaining row through the accumulators */
            if (want.dst_bf16) return 1; /* (qnext may be the accumulators: no chain) */
            unfused = 1;
            break;
        }
        const int direct = mb == pr && part == 0;
        if (want.dst_bf16)
            s = execute(c, slot, e, w, src, bias, qnext);
        else
            s = execute(c, slot, e, w, src, bias,
                        direct ? (void *)(y + (size_t)done * n) : (void *)acc);
        if (s == dnnl_success && !direct && !want.dst_bf16)
            memcpy(y + (size_t)done * n, acc, sizeof(float) * (size_t)pr * (size_t)n);
        done += pr;
    }
    /* Unfused (int8, or a bf16 epilogue oneDNN refused): the GEMM runs in chunks of rows small
     * enough that a chunk's accumulators are still in L2 when the C epilogue reads them; one
     * GEMM over every row would stream them through memory (int8 s32 accumulators are exact,
     * so chunking changes no result). */
    const int chunk = chunk_rows(n, nt);
    for (int r0 = done; s == dnnl_success && unfused && r0 < rows; r0 += chunk) {
        const int left = rows - r0 < chunk ? rows - r0 : chunk, mb = row_bucket(left);
        struct ql_entry *e = lookup(c, w, mb, &ql_plain);
        if (!e) {
            failed_mb = mb;
            s = dnnl_runtime_error;
            break;
        }
        s = execute(c, slot, e, w, (char *)qsrc + (size_t)r0 * k * esz, NULL, acc);
        if (s != dnnl_success) break;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
        for (int r = 0; r < left; r++) epilogue_row(&ep, r0, r);
    }
    return ql_status(s, w, failed_mb, err);
}

int hs__ql_run(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w, const float *x,
               const float *bias, float *y, int rows, int act, int nt, void *qsrc,
               struct hs_qrow *sx, int32_t *acc, const struct hs_ql_weights *next, void *qnext,
               struct hs_error *err)
{
    return ql_run(c, slot, w, x, bias, y, rows, act, nt, qsrc, sx, acc, next, qnext, NULL, err);
}

int hs__ql_run_resid_ln(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w,
                        const float *x, int rows, int nt, void *qsrc, struct hs_qrow *sx,
                        int32_t *acc, const struct hs_ql_resid_ln *ln, struct hs_error *err)
{
    if (w->dtype != HS_DTYPE_I8 || !ln || !ln->x || !ln->g) {
        hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                     "cpu: a residual LayerNorm epilogue needs an int8 layer and its norm");
        return -1;
    }
    return ql_run(c, slot, w, x, NULL, NULL, rows, -1, nt, qsrc, sx, acc, NULL, NULL, ln, err);
}

int hs__ql_matmul(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w, void *qsrc,
                  void *acc, int rows, struct hs_error *err)
{
    if (slot < 0 || slot >= c->slots) {
        hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: linear slot %d of %d", slot, c->slots);
        return -1;
    }
    if (ensure_onednn_packed(w)) {
        hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory (oneDNN's packed weights)");
        return -1;
    }
    const int mb = row_bucket(rows);
    struct ql_entry *e = lookup(c, w, mb, &ql_plain);
    return ql_status(e ? execute(c, slot, e, w, qsrc, NULL, acc) : dnnl_runtime_error, w, mb, err);
}
