/* The CPU engine: fp32 stages on a set of cores. GEMMs through oneDNN, the rest through the
 * fused kernels in kernels.c; all parallel work runs on the calling thread's OpenMP team, sized
 * to the engine's thread count and pinned to its core set. */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/threads.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/lease.h"
#include "engine/cpu/qlinear.h"
#include "engine/engine.h"

struct cpu_ctx {
    uint64_t id; /* unique per engine created: a freed engine's address may be reused */
    int threads;
    int small_rows; /* token counts up to this use the packed small-M GEMM; 0 = never */
    int act_k;      /* a layer with an activation and k <= this uses it at every token count */
    int n_cores;
    int cores[HS_ENGINE_MAX_CORES];
    /* cores of other engines this one may borrow per stage (lease.h), and the thread slots its
     * workspaces hold: its own threads and one per borrowable core */
    int n_borrow;
    int borrow[HS_ENGINE_MAX_CORES];
    bool preempt; /* its loans preempt the owners (engines[].borrow_preempt) */
    int slots;
    char device[128];
    void (*observe)(void *, const struct hs_stage *, int, const float *, int, int);
    void *observe_ctx;
};

/* The linear layers of attention and FFN stages, in the order stage_slice runs them. */
enum { QL_QKV, QL_ATTN_OUT, QL_FFN_IN, QL_FFN_OUT, QL_COUNT };

/* Weights of one stage, resident for the engine's lifetime. fp32 tensors are used in place
 * (they live in the model's read-only mapping); others are converted once. A stage prepared in
 * int8 or bf16 also holds its linear layers packed in that dtype (qlinear.h); everything else
 * in the stage still computes in fp32. */
struct cpu_prep {
    enum hs_stage_kind kind;
    enum hs_dtype dtype;               /* F32, I8 or BF16 */
    struct hs_ql_weights ql[QL_COUNT]; /* dtype I8 / BF16 attention and FFN stages */
    float *w[HS_W_COUNT];
    float *qkv_w; /* [qkv_cols, H]: q, k, v stacked so one GEMM computes all three */
    float *qkv_b; /* [qkv_cols] (zeros where the model has no bias) */
    float *ffn_w; /* gated FFN: [2I, H], up then gate stacked so one GEMM computes both */
    /* the same weights packed for the small-M GEMM (NULL when it is not used) */
    float *packed_qkv, *packed_out, *packed_in, *packed_ffn_out;
    float *rel;   /* MPNet: [heads, 2 * rel_span - 1] score bias by relative position, or NULL */
    int rel_span; /* longest sequence the table covers */
    void *owned[HS_W_COUNT + 8];
    int n_owned;
};

struct cpu_ws {
    struct hs_ws_spec spec;
    struct hs_encoder_dims dims;
    int n_seqs, n_tokens, seq_max;
    int32_t *ids, *type_ids, *pos_ids, *offsets;
    float *hidden;     /* [tokens_max, H] */
    float *qkv;        /* [tokens_max, qkv_cols] */
    float *tmp;        /* [tokens_max, max(H, I)] : attention context, FFN intermediate */
    float *tmp2;       /* [tokens_max, H] */
    float *pooled;     /* [batch_max, hs_pooled_dim]: H, or vocab for SPLADE */
    float *splade;     /* SPLADE: threads x hs__cpu_splade_scratch_floats; NULL otherwise */
    float *ug;         /* gated FFN: [tokens_max, 2I], up | gate; NULL otherwise */
    float *rope;       /* rotary: [seq_max, rotary_dim] cos | sin (kernels.h); NULL otherwise */
    float *rope_local; /* rotary with another base for local layers: the same for it */
    float *scratch;
    float *pad; /* threads * 8 * max(H, I): tail rows of the small-M GEMM */
    int scratch_threads;
    /* int8 / bf16 linear layers: the primitive cache (one slot per thread) and the quantized
     * source, per-row scales and accumulators, each with HS_QL_ROW_PAD spare rows per thread */
    struct hs_ql_cache *ql;
    void *ql_src;
    struct hs_qrow *ql_sx;
    int32_t *ql_acc;
};

/* Attention widths: q columns (heads * head_dim), and k and v columns each (kv_heads *
 * head_dim); the QKV buffer's rows are q | k | v. */
static int q_cols(const struct hs_encoder_dims *d)
{
    return d->heads * d->head_dim;
}
static int kv_cols(const struct hs_encoder_dims *d)
{
    return (d->kv_heads > 0 ? d->kv_heads : d->heads) * d->head_dim;
}
static int qkv_cols(const struct hs_encoder_dims *d)
{
    return q_cols(d) + 2 * kv_cols(d);
}
/* Width of the tmp buffer (attention context, FFN intermediate) and of the inputs the small-M
 * GEMM pads: the widest of hidden, intermediate and the q columns. */
static int64_t act_wide(const struct hs_encoder_dims *d)
{
    int64_t w = d->hidden > d->intermediate ? d->hidden : d->intermediate;
    return q_cols(d) > w ? q_cols(d) : w;
}

/* Output width of the widest reduced-precision linear layer: q | k | v, or the FFN's first
 * (up | gate when gated). */
static int64_t ql_widest(const struct hs_encoder_dims *d)
{
    const int64_t qkv = qkv_cols(d);
    const int64_t in = (d->ffn == HS_FFN_GATED ? 2 : 1) * (int64_t)d->intermediate;
    return qkv > in ? qkv : in;
}

static void cpu_destroy(void *ctx)
{
    hs_free(ctx);
}

static void cpu_isa(char *buf, size_t n)
{
    buf[0] = '\0';
    __builtin_cpu_init();
    size_t used = 0;
#define HS__FEAT(name)                                                                             \
    if (__builtin_cpu_supports(name))                                                              \
        used +=                                                                                    \
            (size_t)snprintf(buf + used, used < n ? n - used : 0, "%s%s", used ? " " : "", name);
    HS__FEAT("avx512f")
    HS__FEAT("avx512bw")
    HS__FEAT("avx512vl")
    HS__FEAT("avx512vnni")
    HS__FEAT("avx512bf16")
    HS__FEAT("avx2")
    HS__FEAT("fma")
    HS__FEAT("avx")
#undef HS__FEAT
}

static void cpu_caps(void *vctx, struct hs_engine_caps *out)
{
    struct cpu_ctx *c = vctx;
    snprintf(out->kind, sizeof out->kind, "cpu");
    snprintf(out->device, sizeof out->device, "%s", c->device);
    cpu_isa(out->isa, sizeof out->isa);
    out->threads = c->threads;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    out->mem_bytes = pages > 0 && psize > 0 ? (int64_t)pages * psize : 0;
    out->dtypes = 1u << HS_DTYPE_F32;
    if (hs__ql_dtype_fast(HS_DTYPE_I8)) out->dtypes |= 1u << HS_DTYPE_I8;
    if (hs__ql_dtype_fast(HS_DTYPE_BF16)) out->dtypes |= 1u << HS_DTYPE_BF16;
    out->stages = (1u << HS_STAGE_COUNT) - 1;
    const dnnl_version_t *v = dnnl_version();
    snprintf(out->gemm, sizeof out->gemm, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    out->features = HS_FEAT_REL_POS_BIAS | HS_FEAT_POS_OFFSET | HS_FEAT_NO_TOKEN_TYPES |
                    HS_FEAT_NO_BIAS | HS_FEAT_ROTARY | HS_FEAT_GATED_FFN | HS_FEAT_ACT_SILU |
                    HS_FEAT_RMS_NORM | HS_FEAT_PRE_NORM | HS_FEAT_CAUSAL | HS_FEAT_GQA |
                    HS_FEAT_POOL_LAST | HS_FEAT_QK_NORM | HS_FEAT_LOCAL_ATTN | HS_FEAT_FINAL_NORM |
                    HS_FEAT_POOL_SPLADE | HS_FEAT_POOL_NONE;
}

static float *as_f32(struct cpu_prep *p, const struct hs_tensor *t, struct hs_error *err)
{
    if (!t->data) return NULL;
    if (t->dtype == HS_DTYPE_F32) return (float *)t->data;
    int64_t n = hs_tensor_numel(t);
    float *f = hs_malloc_aligned((size_t)n * sizeof(float), 64);
    if (!f) {
        hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory converting weights");
        return NULL;
    }
    hs_to_fp32(t->dtype, t->data, f, (size_t)n);
    p->owned[p->n_owned++] = f;
    return f;
}

static void cpu_stage_release(void *ctx, void *vprep)
{
    struct cpu_prep *p = vprep;
    if (!p) return;
    for (int i = 0; i < p->n_owned; i++) hs_free_aligned(p->owned[i]);
    for (int i = 0; i < QL_COUNT; i++) hs__ql_weights_free(&p->ql[i]);
    hs_free(p);
}

static hs_status cpu_stage_prepare(void *ctx, const struct hs_stage *st, enum hs_dtype dtype,
                                   void **out, struct hs_error *err)
{
    struct cpu_prep *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
    p->kind = st->kind;
    p->dtype = dtype;
    for (int r = 0; r < HS_W_COUNT; r++) {
        if (!st->w[r].data) continue;
        if (st->kind == HS_STAGE_ATTN &&
            (r == HS_W_Q || r == HS_W_K || r == HS_W_V || r == HS_W_Q_B || r == HS_W_K_B ||
             r == HS_W_V_B || r == HS_W_REL_BIAS))
            continue; /* stacked / expanded below */
        if (st->kind == HS_STAGE_FFN && st->dims->ffn == HS_FFN_GATED &&
            (r == HS_W_FFN_IN || r == HS_W_FFN_GATE))
            continue; /* stacked below */
        p->w[r] = as_f32(p, &st->w[r], err);
        if (!p->w[r]) {
            cpu_stage_release(ctx, p);
            return err ? err->status : HS_STATUS_NO_MEMORY;
        }
    }
    if (st->kind == HS_STAGE_ATTN) {
        const int h = st->dims->hidden, nq = q_cols(st->dims), nkv = kv_cols(st->dims);
        const int nqkv = nq + 2 * nkv;
        p->qkv_w = hs_malloc_aligned(sizeof(float) * (size_t)nqkv * h, 64);
        p->qkv_b = hs_malloc_aligned(sizeof(float) * (size_t)nqkv, 64);
        if (p->qkv_w) p->owned[p->n_owned++] = p->qkv_w;
        if (p->qkv_b) p->owned[p->n_owned++] = p->qkv_b;
        if (!p->qkv_w || !p->qkv_b) {
            cpu_stage_release(ctx, p);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
        }
        const struct hs_tensor *rb = &st->w[HS_W_REL_BIAS];
        const struct hs_encoder_dims *d = st->dims;
        if (rb->data) {
            /* Expand [buckets, heads] to a per-head row over every relative position a sequence
             * can have, so attention adds a bias with one load per score. */
            if (d->rel_buckets < 4 || hs_tensor_numel(rb) != (int64_t)d->rel_buckets * d->heads) {
                cpu_stage_release(ctx, p);
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "cpu: stage %s: relative bias of %lld values, expected %d x %d",
                                    st->name, (long long)hs_tensor_numel(rb), d->rel_buckets,
                                    d->heads);
            }
            const int span = d->max_positions - d->pos_offset;
            const int64_t row = 2 * (int64_t)span - 1;
            float *table = hs_malloc((size_t)d->rel_buckets * (size_t)d->heads * sizeof(float));
            p->rel = hs_malloc_aligned(sizeof(float) * (size_t)(row * d->heads), 64);
            if (p->rel) p->owned[p->n_owned++] = p->rel;
            if (!table || !p->rel) {
                hs_free(table);
                cpu_stage_release(ctx, p);
                return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
            }
            hs_to_fp32(rb->dtype, rb->data, table, (size_t)d->rel_buckets * (size_t)d->heads);
            for (int64_t k = 0; k < row; k++) {
                int b =
                    hs_rel_pos_bucket((int)(k - (span - 1)), d->rel_buckets, d->rel_max_distance);
                for (int hh = 0; hh < d->heads; hh++)
                    p->rel[hh * row + k] = table[b * d->heads + hh];
            }
            hs_free(table);
            p->rel_span = span;
        }
        const int roles[3] = {HS_W_Q, HS_W_K, HS_W_V};
        const int biases[3] = {HS_W_Q_B, HS_W_K_B, HS_W_V_B};
        const int rows[3] = {nq, nkv, nkv}, first[3] = {0, nq, nq + nkv};
        for (int i = 0; i < 3; i++) {
            if (!st->w[roles[i]].data ||
                hs_tensor_numel(&st->w[roles[i]]) != (int64_t)rows[i] * h) {
                cpu_stage_release(ctx, p);
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "cpu: stage %s: q / k / v weights missing or of the wrong size",
                                    st->name);
            }
            hs_to_fp32(st->w[roles[i]].dtype, st->w[roles[i]].data, p->qkv_w + (size_t)first[i] * h,
                       (size_t)rows[i] * h);
            if (st->w[biases[i]].data)
                hs_to_fp32(st->w[biases[i]].dtype, st->w[biases[i]].data, p->qkv_b + first[i],
                           (size_t)rows[i]);
            else
                memset(p->qkv_b + first[i], 0, sizeof(float) * (size_t)rows[i]);
        }
    }
    if (st->kind == HS_STAGE_FFN && st->dims->ffn == HS_FFN_GATED) {
        const size_t hi = (size_t)st->dims->hidden * (size_t)st->dims->intermediate;
        if (st->w[HS_W_FFN_IN_B].data || !st->w[HS_W_FFN_IN].data || !st->w[HS_W_FFN_GATE].data) {
            cpu_stage_release(ctx, p);
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "cpu: stage %s: a gated FFN needs up and gate weights, without "
                                "biases",
                                st->name);
        }
        p->ffn_w = hs_malloc_aligned(sizeof(float) * 2 * hi, 64);
        if (!p->ffn_w) {
            cpu_stage_release(ctx, p);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
        }
        p->owned[p->n_owned++] = p->ffn_w;
        hs_to_fp32(st->w[HS_W_FFN_IN].dtype, st->w[HS_W_FFN_IN].data, p->ffn_w, hi);
        hs_to_fp32(st->w[HS_W_FFN_GATE].dtype, st->w[HS_W_FFN_GATE].data, p->ffn_w + hi, hi);
    }
    struct cpu_ctx *c = ctx;
    const bool linear_stage = st->kind == HS_STAGE_ATTN || st->kind == HS_STAGE_FFN;
    if (linear_stage && (dtype == HS_DTYPE_I8 || dtype == HS_DTYPE_BF16)) {
        const int h = st->dims->hidden, inter = st->dims->intermediate;
        const float *src[2];
        int n[2], k[2], first;
        if (st->kind == HS_STAGE_ATTN) {
            first = QL_QKV;
            src[0] = p->qkv_w, n[0] = qkv_cols(st->dims), k[0] = h;
            src[1] = p->w[HS_W_ATTN_OUT], n[1] = h, k[1] = q_cols(st->dims);
        } else {
            first = QL_FFN_IN;
            src[0] = p->ffn_w ? p->ffn_w : p->w[HS_W_FFN_IN], n[0] = p->ffn_w ? 2 * inter : inter;
            k[0] = h;
            src[1] = p->w[HS_W_FFN_OUT], n[1] = h, k[1] = inter;
        }
        for (int i = 0; i < 2; i++) {
            /* the smoothing divisors tame the stage input, which only the first layer reads */
            const float *smooth = i == 0 && dtype == HS_DTYPE_I8 ? p->w[HS_W_SMOOTH] : NULL;
            if (smooth && hs_tensor_numel(&st->w[HS_W_SMOOTH]) != k[0]) {
                cpu_stage_release(ctx, p);
                return hs_error_set(err, HS_STATUS_CORRUPT,
                                    "cpu: %s: smoothing of %lld values, "
                                    "expected %d",
                                    st->name, (long long)hs_tensor_numel(&st->w[HS_W_SMOOTH]),
                                    k[0]);
            }
            hs_status qs =
                hs__ql_weights_make(dtype, src[i], n[i], k[i], smooth, &p->ql[first + i], err);
            if (qs) {
                cpu_stage_release(ctx, p);
                return qs;
            }
            const struct hs_tensor *as = &st->w[HS_W_ACT_SCALE];
            if (dtype == HS_DTYPE_I8 && as->data) {
                if (as->dtype != HS_DTYPE_F32 || hs_tensor_numel(as) != 2) {
                    cpu_stage_release(ctx, p);
                    return hs_error_set(err, HS_STATUS_CORRUPT,
                                        "cpu: %s: activation scales must be F32 [2]", st->name);
                }
                const float v = ((const float *)as->data)[i];
                if (!(v >= 0.0f) || v > 1e30f) {
                    cpu_stage_release(ctx, p);
                    return hs_error_set(err, HS_STATUS_CORRUPT,
                                        "cpu: %s: activation scale %d is %g", st->name, i,
                                        (double)v);
                }
                p->ql[first + i].act_scale = v;
            }
        }
        *out = p;
        return HS_STATUS_OK;
    }
    if (c->small_rows > 0 && linear_stage) {
        const int h = st->dims->hidden, inter = st->dims->intermediate;
        float **dst[2];
        const float *src[2];
        int n[2], k[2];
        if (st->kind == HS_STAGE_ATTN) {
            dst[0] = &p->packed_qkv, src[0] = p->qkv_w, n[0] = qkv_cols(st->dims), k[0] = h;
            dst[1] = &p->packed_out, src[1] = p->w[HS_W_ATTN_OUT], n[1] = h;
            k[1] = q_cols(st->dims);
        } else {
            dst[0] = &p->packed_in, src[0] = p->ffn_w ? p->ffn_w : p->w[HS_W_FFN_IN];
            n[0] = p->ffn_w ? 2 * inter : inter, k[0] = h;
            dst[1] = &p->packed_ffn_out, src[1] = p->w[HS_W_FFN_OUT], n[1] = h, k[1] = inter;
        }
        for (int i = 0; i < 2; i++) {
            *dst[i] = hs__cpu_pack_weights(src[i], n[i], k[i]);
            if (!*dst[i]) {
                cpu_stage_release(ctx, p);
                return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory packing weights");
            }
            p->owned[p->n_owned++] = *dst[i];
        }
    }
    *out = p;
    return HS_STATUS_OK;
}

static void cpu_ws_destroy(void *ctx, void *vws)
{
    struct cpu_ws *w = vws;
    if (!w) return;
    hs_free_aligned(w->ids);
    hs_free_aligned(w->type_ids);
    hs_free_aligned(w->pos_ids);
    hs_free_aligned(w->offsets);
    hs_free_aligned(w->hidden);
    hs_free_aligned(w->qkv);
    hs_free_aligned(w->tmp);
    hs_free_aligned(w->tmp2);
    hs_free_aligned(w->pooled);
    hs_free_aligned(w->splade);
    hs_free_aligned(w->ug);
    hs_free_aligned(w->rope);
    hs_free_aligned(w->rope_local);
    hs_free_aligned(w->scratch);
    hs_free_aligned(w->pad);
    hs__ql_cache_free(w->ql);
    hs_free_aligned(w->ql_src);
    hs_free_aligned(w->ql_sx);
    hs_free_aligned(w->ql_acc);
    hs_free(w);
}

static hs_status cpu_ws_create(void *vctx, const struct hs_ws_spec *spec, void **out,
                               struct hs_error *err)
{
    struct cpu_ctx *c = vctx;
    struct cpu_ws *w = hs_calloc(1, sizeof *w);
    if (!w) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
    w->spec = *spec;
    w->dims = *spec->dims;
    w->spec.dims = &w->dims;
    const size_t T = (size_t)spec->tokens_max, B = (size_t)spec->batch_max;
    const size_t H = (size_t)w->dims.hidden, I = (size_t)w->dims.intermediate;
    const size_t wide = (size_t)act_wide(&w->dims);
    w->scratch_threads = c->slots;
    if (w->dims.pool == HS_POOL_NONE && spec->seq_max > w->dims.pool_rows) {
        hs_free(w);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cpu: sequences of %d tokens, token embeddings of at most %d",
                            spec->seq_max, w->dims.pool_rows);
    }
    w->ids = hs_malloc_aligned(T * sizeof(int32_t), 64);
    w->type_ids = hs_malloc_aligned(T * sizeof(int32_t), 64);
    w->pos_ids = hs_malloc_aligned(T * sizeof(int32_t), 64);
    w->offsets = hs_malloc_aligned((B + 1) * sizeof(int32_t), 64);
    w->hidden = hs_malloc_aligned(T * H * sizeof(float), 64);
    w->qkv = hs_malloc_aligned(T * (size_t)qkv_cols(&w->dims) * sizeof(float), 64);
    w->tmp = hs_malloc_aligned(T * wide * sizeof(float), 64);
    w->tmp2 = hs_malloc_aligned(T * H * sizeof(float), 64);
    w->pooled = hs_malloc_aligned(B * (size_t)hs_pooled_dim(&w->dims) * sizeof(float), 64);
    bool extra_ok = true;
    if (w->dims.pool == HS_POOL_SPLADE) {
        w->splade = hs_malloc_aligned(
            (size_t)c->slots *
                (size_t)hs__cpu_splade_scratch_floats(w->dims.hidden, w->dims.vocab) *
                sizeof(float),
            64);
        extra_ok = extra_ok && w->splade;
    }
    if (w->dims.ffn == HS_FFN_GATED) {
        w->ug = hs_malloc_aligned(T * 2 * I * sizeof(float), 64);
        extra_ok = extra_ok && w->ug;
    }
    if (w->dims.pos == HS_POS_ROTARY) {
        const int rd = w->dims.rotary_dim;
        if (rd < 2 || rd % 2 || rd > w->dims.head_dim) {
            cpu_ws_destroy(vctx, w);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: rotary dimension %d", rd);
        }
        w->rope = hs_malloc_aligned((size_t)spec->seq_max * (size_t)rd * sizeof(float), 64);
        if (w->rope)
            hs__cpu_rope_table(w->rope, spec->seq_max, rd, w->dims.rope_theta,
                               w->dims.rope_freq_div);
        extra_ok = extra_ok && w->rope;
        if (w->dims.rope_theta_local > 0.0f && w->dims.rope_theta_local != w->dims.rope_theta) {
            w->rope_local =
                hs_malloc_aligned((size_t)spec->seq_max * (size_t)rd * sizeof(float), 64);
            if (w->rope_local)
                hs__cpu_rope_table(w->rope_local, spec->seq_max, rd, w->dims.rope_theta_local,
                                   w->dims.rope_freq_div);
            extra_ok = extra_ok && w->rope_local;
        }
    }
    w->scratch = hs_malloc_aligned(
        (size_t)c->slots * (size_t)hs__cpu_attn_scratch_floats(w->dims.head_dim, spec->seq_max) *
            sizeof(float),
        64);
    w->pad = hs_malloc_aligned((size_t)c->slots * 8 * wide * sizeof(float), 64);
    /* int8 / bf16 layers (tens of MB at the default batch limits): only for workspaces whose
     * stages may run in those dtypes; the primitive cache fills on first use of a shape */
    const uint32_t reduced = (1u << HS_DTYPE_I8) | (1u << HS_DTYPE_BF16);
    const bool want_ql = spec->dtypes == 0 || (spec->dtypes & reduced);
    if (want_ql) {
        const int rows = spec->tokens_max + c->slots * HS_QL_ROW_PAD;
        const size_t widest = (size_t)ql_widest(&w->dims);
        hs_status qs = hs__ql_cache_create(c->slots, &w->ql, err);
        if (qs) {
            cpu_ws_destroy(vctx, w);
            return qs;
        }
        w->ql_src = hs_malloc_aligned((size_t)hs__ql_src_bytes(rows, (int)wide), 64);
        w->ql_sx = hs_malloc_aligned(sizeof(struct hs_qrow) * (size_t)rows, 64);
        w->ql_acc = hs_malloc_aligned(sizeof(int32_t) * (size_t)rows * widest, 64);
    }
    if ((want_ql && (!w->ql_src || !w->ql_sx || !w->ql_acc)) || !w->ids || !w->type_ids ||
        !w->pos_ids || !w->offsets || !w->hidden || !w->qkv || !w->tmp || !w->tmp2 || !w->pooled ||
        !w->scratch || !w->pad || !extra_ok) {
        cpu_ws_destroy(vctx, w);
        return hs_error_set(err, HS_STATUS_NO_MEMORY,
                            "cpu: out of memory for a workspace of %d sequences, %d tokens",
                            spec->batch_max, spec->tokens_max);
    }
    *out = w;
    return HS_STATUS_OK;
}

/* ---- Memory and speed answers of the kind (engine.h), mirroring cpu_stage_prepare and
 * cpu_ws_create: a change to what those allocate changes these (test_profile compares them with
 * the bytes actually allocated). Weights in f32 files are used in place from the model's
 * mapping and cost nothing here; the memory plan counts the mapped file once per model. */

static int64_t small_gemm_panel_bytes(int n, int k)
{
    const int64_t w = hs__cpu_small_gemm_panel(); /* hs__cpu_pack_weights' panel width */
    return w > 0 ? (int64_t)sizeof(float) * ((n + w - 1) / w) * w * k : 0;
}

int64_t hs_engine_cpu_stage_bytes(enum hs_stage_kind stage, const struct hs_encoder_dims *d,
                                  enum hs_dtype dtype)
{
    if (stage != HS_STAGE_ATTN && stage != HS_STAGE_FFN) return 0;
    const int h = d->hidden, inter = d->intermediate;
    int64_t b = (int64_t)sizeof(struct cpu_prep); /* the stage's own record (kB: on a CPU without
                                                   * the small-M panels it is most of an FFN's) */
    if (stage == HS_STAGE_ATTN) {
        b += (int64_t)sizeof(float) * qkv_cols(d) * ((int64_t)h + 1); /* q, k, v stacked */
        if (d->rel_buckets > 0)
            b += (int64_t)sizeof(float) * d->heads * (2 * (d->max_positions - d->pos_offset) - 1);
    }
    const bool gated = stage == HS_STAGE_FFN && d->ffn == HS_FFN_GATED;
    if (gated) b += (int64_t)sizeof(float) * 2 * inter * h; /* up and gate stacked */
    const int n0 = stage == HS_STAGE_ATTN ? qkv_cols(d) : (gated ? 2 : 1) * inter, k0 = h;
    const int n1 = h, k1 = stage == HS_STAGE_ATTN ? q_cols(d) : inter;
    if (dtype == HS_DTYPE_I8 || dtype == HS_DTYPE_BF16)
        return b + hs__ql_weights_bytes(dtype, n0, k0) + hs__ql_weights_bytes(dtype, n1, k1);
    if (hs__cpu_small_gemm_available())
        b += small_gemm_panel_bytes(n0, k0) + small_gemm_panel_bytes(n1, k1);
    return b;
}

void hs_engine_cpu_ws_bytes(const struct hs_ws_spec *spec, int threads, int64_t *activations,
                            int64_t *scratch)
{
    const int64_t T = spec->tokens_max, B = spec->batch_max, H = spec->dims->hidden;
    const int64_t I = spec->dims->intermediate, wide = act_wide(spec->dims);
    const int64_t f = sizeof(float);
    /* ids, type ids, positions, offsets; hidden, q/k/v, the intermediate, the second hidden
     * buffer, pooled */
    *activations =
        3 * T * 4 + (B + 1) * 4 +
        f * (T * H + T * qkv_cols(spec->dims) + T * wide + T * H + B * hs_pooled_dim(spec->dims));
    if (spec->dims->ffn == HS_FFN_GATED) *activations += f * T * 2 * I; /* up | gate */
    if (spec->dims->pos == HS_POS_ROTARY)
        *activations += f * spec->seq_max * spec->dims->rotary_dim *
                        (spec->dims->rope_theta_local > 0.0f &&
                                 spec->dims->rope_theta_local != spec->dims->rope_theta
                             ? 2
                             : 1); /* cos | sin, per base */
    int64_t s = f * threads * hs__cpu_attn_scratch_floats(spec->dims->head_dim, spec->seq_max) +
                f * threads * 8 * wide;
    if (spec->dims->pool == HS_POOL_SPLADE)
        s += f * threads * hs__cpu_splade_scratch_floats(spec->dims->hidden, spec->dims->vocab);
    const uint32_t reduced = (1u << HS_DTYPE_I8) | (1u << HS_DTYPE_BF16);
    if (spec->dtypes == 0 || (spec->dtypes & reduced)) {
        const int64_t rows = T + (int64_t)threads * HS_QL_ROW_PAD;
        const int64_t widest = ql_widest(spec->dims);
        s += hs__ql_src_bytes((int)rows, (int)wide) + (int64_t)sizeof(struct hs_qrow) * rows +
             4 * rows * widest;
    }
    *scratch = s;
}

int64_t hs_engine_cpu_mem_available(int device)
{
    FILE *f = fopen("/proc/meminfo", "r");
    long long kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
        fclose(f);
    }
    if (kb > 0) return (int64_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && psize > 0 ? (int64_t)pages * psize : 0;
}

/* oneDNN's sgemm on the FFN's first product at 4096 tokens of a 384-wide encoder (MiniLM's
 * shape, the one bench_cpu reports): the rate the encoder's GEMMs can reach here. */
double hs_engine_cpu_gemm_gflops(int device, int threads, double seconds, const char **what)
{
    const int M = 4096, K = 384, N = 1536;
    if (what) *what = "oneDNN sgemm f32, M=4096 K=384 N=1536";
    float *a = hs_malloc_aligned(sizeof(float) * (size_t)M * K, 64);
    float *b = hs_malloc_aligned(sizeof(float) * (size_t)N * K, 64);
    float *c = hs_malloc_aligned(sizeof(float) * (size_t)M * N, 64);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 13) * 0.01f;
        for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 7) * 0.01f;
        if (threads > 0) omp_set_num_threads(threads);
        const int64_t start = hs_now_ns();
        /* the fastest of the runs (after one warm-up): a practical peak, not a typical rate */
        for (int n = 0; n < 3 || (n < 200 && hs_now_ns() - start < (int64_t)(seconds * 1e9)); n++) {
            const int64_t t0 = hs_now_ns();
            dnnl_sgemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            const double dt = (double)(hs_now_ns() - t0) / 1e9;
            const double g = 2.0 * M * N * K / dt / 1e9;
            if (n > 0 && g > best) best = g;
        }
    }
    hs_free_aligned(a);
    hs_free_aligned(b);
    hs_free_aligned(c);
    return best;
}

/* Pins the calling thread's OpenMP team: thread t < threads to the engine's cores, thread
 * threads + j to borrowed core lent[j], and has each flush denormals. Once per calling thread
 * and team make-up. */
struct pinned {
    uint64_t id; /* engine pinned for; 0 = none */
    int n_lent;
    int lent[HS_ENGINE_MAX_CORES];
};
static _Thread_local struct pinned pinned_for;
static atomic_uint_fast64_t next_ctx_id;

static void pin_team(const struct cpu_ctx *c, const int *lent, int n_lent)
{
    omp_set_num_threads(c->threads + n_lent);
    hs_threads_flush_denormals(); /* the team's master (each batch: one register write) */
    if (pinned_for.id == c->id && pinned_for.n_lent == n_lent &&
        (n_lent == 0 || !memcmp(pinned_for.lent, lent, sizeof(int) * (size_t)n_lent)))
        return;
    pinned_for.id = c->id;
    pinned_for.n_lent = n_lent;
    if (n_lent) memcpy(pinned_for.lent, lent, sizeof(int) * (size_t)n_lent);
    const bool pin = c->n_cores > 0;
    /* the process's first thread keeps its affinity: every thread it starts later (the HTTP
     * threads, the batchers) inherits it */
    const bool initial = gettid() == getpid();
    /* every thread of the team flushes denormals (core/threads.h), whichever started it */
#pragma omp parallel num_threads(c->threads + n_lent)
    {
        hs_threads_flush_denormals();
        const int t = omp_get_thread_num();
        if (pin && (t > 0 || !initial)) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(t < c->threads ? c->cores[t % c->n_cores] : lent[t - c->threads], &set);
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        }
    }
}

static hs_status cpu_batch_begin(void *vctx, void *vws, const struct hs_batch *b,
                                 struct hs_error *err)
{
    struct cpu_ctx *c = vctx;
    struct cpu_ws *w = vws;
    if (b->n_seqs > w->spec.batch_max || b->n_tokens > w->spec.tokens_max)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cpu: batch of %d sequences / %d tokens exceeds the workspace "
                            "(%d / %d)",
                            b->n_seqs, b->n_tokens, w->spec.batch_max, w->spec.tokens_max);
    if (b->offsets[0] != 0 || b->offsets[b->n_seqs] != b->n_tokens)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: inconsistent offsets");
    int seq_max = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int len = b->offsets[s + 1] - b->offsets[s];
        const int positions = w->dims.max_positions - w->dims.pos_offset;
        if (len < 1 || len != b->lengths[s] || len > w->spec.seq_max || len > positions)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "cpu: sequence %d has length %d (limit %d)", s, len,
                                w->spec.seq_max < positions ? w->spec.seq_max : positions);
        if (len > seq_max) seq_max = len;
        for (int i = 0; i < len; i++) w->pos_ids[b->offsets[s] + i] = w->dims.pos_offset + i;
    }
    for (int t = 0; t < b->n_tokens; t++) {
        int32_t id = b->ids[t], tt = b->type_ids ? b->type_ids[t] : 0;
        if (id < 0 || id >= w->dims.vocab)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "token id %d at position %d is outside the vocabulary (%d)", id, t,
                                w->dims.vocab);
        if (tt < 0 || tt >= w->dims.type_vocab)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT, "token type %d at position %d", tt,
                                t);
        w->ids[t] = id;
        w->type_ids[t] = tt;
    }
    memcpy(w->offsets, b->offsets, sizeof(int32_t) * (size_t)(b->n_seqs + 1));
    w->n_seqs = b->n_seqs;
    w->n_tokens = b->n_tokens;
    w->seq_max = seq_max;
    pin_team(c, NULL, 0);
    return HS_STATUS_OK;
}

static hs_status cpu_act_write(void *ctx, void *vws, enum hs_act_buf buf, const float *src,
                               struct hs_error *err)
{
    struct cpu_ws *w = vws;
    if (buf == HS_ACT_BUF_HIDDEN)
        memcpy(w->hidden, src, sizeof(float) * (size_t)w->n_tokens * (size_t)w->dims.hidden);
    else
        memcpy(w->pooled, src, sizeof(float) * (size_t)w->n_seqs * (size_t)hs_pooled_dim(&w->dims));
    return HS_STATUS_OK;
}

static hs_status cpu_act_read(void *ctx, void *vws, enum hs_act_buf buf, float *dst,
                              struct hs_error *err)
{
    struct cpu_ws *w = vws;
    if (buf == HS_ACT_BUF_HIDDEN)
        memcpy(dst, w->hidden, sizeof(float) * (size_t)w->n_tokens * (size_t)w->dims.hidden);
    else
        memcpy(dst, w->pooled, sizeof(float) * (size_t)w->n_seqs * (size_t)hs_pooled_dim(&w->dims));
    return HS_STATUS_OK;
}

/* Where a stage slice's linear layers run: its thread slot and the first row of its share of
 * the reduced-precision buffers. */
struct slice_ctx {
    struct cpu_ws *w;
    const struct cpu_prep *p;
    const struct hs_stage *st;
    int slot;
    int row_base;
    int batch_rows; /* tokens in the whole batch: picks the f32 kernel (see linear) */
    struct hs_error *err;
};

/* Whether an f32 layer (k inputs; act: its activation, < 0 none) runs on oneDNN's sgemm rather
 * than the packed small-M kernel (see linear). */
static bool on_sgemm(const struct cpu_ctx *c, const struct slice_ctx *sc, const float *packed,
                     int k, int act)
{
    return !packed || (sc->batch_rows > c->small_rows && !(act >= 0 && k <= c->act_k));
}

/* int8 / bf16: the quantized layer (qlinear.h). fp32: a batch of few tokens takes the packed
 * small-M kernel, otherwise oneDNN's sgemm; same math either way. The choice follows the whole
 * batch's token count, not this slice's: how a batch is cut into slices depends on how many
 * threads run it (a borrowed core adds one), and the result must not. */
static int linear(const struct cpu_ctx *c, const struct slice_ctx *sc, int which, float *pad,
                  const float *x, const float *wt, const float *packed, const float *bias, float *y,
                  int rows, int n, int k, int act, int nt)
{
    if (sc->p->dtype == HS_DTYPE_I8 || sc->p->dtype == HS_DTYPE_BF16) {
        struct cpu_ws *w = sc->w;
        if (!w->ql) {
            hs_error_set(sc->err, HS_STATUS_INVALID_ARGUMENT,
                         "cpu: a %s stage on a workspace made for f32 only (hs_ws_spec.dtypes)",
                         hs_compute_dtype_name(sc->p->dtype));
            return -1;
        }
        const struct hs_ql_weights *q = &sc->p->ql[which];
        const size_t widest = (size_t)ql_widest(&w->dims);
        const size_t wide = (size_t)act_wide(&w->dims);
        const size_t r0 = (size_t)sc->row_base;
        return hs__ql_run(w->ql, sc->slot, q, x, bias, y, rows, act, nt,
                          (char *)w->ql_src + r0 * wide * 2, w->ql_sx + r0, w->ql_acc + r0 * widest,
                          NULL, NULL, sc->err);
    }
    if (c->observe) c->observe(c->observe_ctx, sc->st, which & 1, x, rows, k);
    if (!on_sgemm(c, sc, packed, k, act)) {
        hs__cpu_small_gemm(x, packed, bias, y, rows, n, k, act, nt, pad);
        return 0;
    }
    return hs__cpu_linear(x, wt, bias, y, rows, n, k, act, nt);
}

/* int8, post-LN: the layer whose output feeds the residual and its LayerNorm
 * (hs__ql_run_resid_ln), unchained. */
static int linear_resid_ln(const struct slice_ctx *sc, int which, const float *x, float *hidden,
                           const float *bias, const float *g, const float *beta, float eps,
                           int rows, int nt)
{
    struct cpu_ws *w = sc->w;
    const size_t r0 = (size_t)sc->row_base;
    const struct hs_ql_resid_ln ln = {hidden, bias, g, beta, eps};
    void *qsrc = (char *)w->ql_src + r0 * (size_t)act_wide(&w->dims) * 2;
    return hs__ql_run_resid_ln(w->ql, sc->slot, &sc->p->ql[which], x, rows, nt, qsrc, w->ql_sx + r0,
                               w->ql_acc + r0 * (size_t)ql_widest(&w->dims), &ln, sc->err);
}

/* f32, post-LN, on oneDNN's sgemm (a batch past the packed kernel's rows): the stage's output
 * layer adds its product into the residual stream itself (beta 1), and the LayerNorm then adds
 * the bias in its pass. The sum is the same, x + y then + bias, but the product is not written
 * to a buffer of its own and read back: at 32 x 128 the residual LayerNorm's passes were 3 % of
 * an f32 batch, as each thread's slice (3 MB of rows a stream) runs from L3. 1: done; 0: the
 * stage takes the plain path (small batches, pre-LN families, other dtypes); -1: the GEMM
 * failed. */
static int linear_resid_ln_f32(const struct cpu_ctx *c, const struct slice_ctx *sc,
                               const struct hs_encoder_dims *d, int which, const float *x,
                               const float *wt, const float *packed, float *hidden,
                               const float *bias, const float *g, const float *beta, int rows,
                               int n, int k, int nt)
{
    if (sc->p->dtype != HS_DTYPE_F32 || d->norm_pre || !g || !on_sgemm(c, sc, packed, k, -1))
        return 0;
    if (c->observe) c->observe(c->observe_ctx, sc->st, which & 1, x, rows, k);
    if (hs__cpu_linear_acc(x, wt, hidden, rows, n, k)) return -1;
    hs__cpu_residual_ln(hidden, NULL, bias, g, beta, rows, n, d->ln_eps, nt);
    return 1;
}

/* Whether a stage's output layer takes the residual LayerNorm as its epilogue: the int8 lane of
 * a post-LN encoder (bf16 fuses its bias inside oneDNN instead). */
static bool fuse_resid_ln(const struct slice_ctx *sc, const struct hs_encoder_dims *d,
                          const float *g)
{
    return sc->p->dtype == HS_DTYPE_I8 && sc->w->ql && !d->norm_pre && g;
}

/* int8 / bf16 FFN: the first layer's epilogue writes its activated rows straight as the second
 * layer's input (hs__ql_run chaining). int8: into the upper half of this slice's source buffer,
 * which int8 (one byte a value; the buffer is sized for bf16's two) leaves free. bf16: into the
 * accumulator buffer, which the fused bf16 epilogue does not need; the second layer then takes
 * the source buffer as its accumulators. Returns 1 when done, 0 when the pair cannot chain
 * (the caller runs the layers apart), -1 on failure. */
static int ffn_chain(const struct slice_ctx *sc, const float *x, const float *bias, float *y,
                     int rows, int act, int nt, const struct hs_ql_resid_ln *ln)
{
    struct cpu_ws *w = sc->w;
    const struct hs_ql_weights *a = &sc->p->ql[QL_FFN_IN], *b = &sc->p->ql[QL_FFN_OUT];
    const enum hs_dtype dt = sc->p->dtype;
    const size_t widest = (size_t)ql_widest(&w->dims), wide = (size_t)act_wide(&w->dims);
    /* bf16: the second layer's fp32 tail rows (up to a bucket past `rows`) go to the source
     * buffer, which holds them when it is at least twice as wide as the output */
    if ((dt != HS_DTYPE_I8 && dt != HS_DTYPE_BF16) || !w->ql || act < 0 ||
        !hs__ql_chainable(a, b) || (dt == HS_DTYPE_BF16 && wide < 2 * (size_t)b->n))
        return 0;
    const size_t r0 = (size_t)sc->row_base;
    char *qsrc = (char *)w->ql_src + r0 * wide * 2;
    int32_t *acc = w->ql_acc + r0 * widest;
    struct hs_qrow *sx = w->ql_sx + r0;
    void *qmid =
        dt == HS_DTYPE_I8 ? (void *)(qsrc + ((size_t)rows + HS_QL_ROW_PAD) * wide) : (void *)acc;
    int32_t *acc2 = dt == HS_DTYPE_I8 ? acc : (int32_t *)(void *)qsrc;
    const int first = hs__ql_run(w->ql, sc->slot, a, x, bias, NULL, rows, act, nt, qsrc, sx, acc, b,
                                 qmid, sc->err);
    if (first) return first < 0 ? -1 : 0;
    if (ln ? hs__ql_run_resid_ln(w->ql, sc->slot, b, NULL, rows, nt, qmid, sx, acc2, ln, sc->err)
           : hs__ql_run(w->ql, sc->slot, b, NULL, NULL, y, rows, -1, nt, qmid, sx, acc2, NULL, NULL,
                        sc->err))
        return -1;
    return 1;
}

/* Runs one stage on sequences [sb, se) of the batch with nt threads. pad and scratch are this
 * caller's share of the workspace's scratch buffers. */
static int stage_slice(const struct cpu_ctx *c, struct cpu_ws *w, const struct cpu_prep *p,
                       const struct hs_stage *st, int sb, int se, int nt, int slot, float *pad,
                       float *scratch, struct hs_error *err)
{
    const enum hs_stage_kind kind = st->kind;
    const struct hs_encoder_dims *d = &w->dims;
    const int H = d->hidden, I = d->intermediate;
    const int t0 = w->offsets[sb], T = w->offsets[se] - t0;
    const struct slice_ctx sc = {w, p, st, slot, t0 + slot * HS_QL_ROW_PAD, w->n_tokens, err};
    const size_t ro = (size_t)t0 * H; /* row offset of the slice in [tokens, H] buffers */
    float *hidden = w->hidden + ro, *tmp2 = w->tmp2 + ro;
    switch (kind) {
    case HS_STAGE_EMBED:
        hs__cpu_embed(hidden, w->ids + t0, w->type_ids + t0, w->pos_ids + t0, T,
                      p->w[HS_W_WORD_EMB], p->w[HS_W_POS_EMB], p->w[HS_W_TYPE_EMB],
                      p->w[HS_W_EMB_LN_G], p->w[HS_W_EMB_LN_B], H, d->ln_eps, nt);
        return 0;
    case HS_STAGE_ATTN: {
        const int nq = q_cols(d), nkv = kv_cols(d), nqkv = nq + 2 * nkv;
        float *qkv = w->qkv + (size_t)t0 * nqkv, *ctx = w->tmp + (size_t)t0 * nq;
        /* layer l is local when the family has a window and l is not a global layer */
        const bool local = d->window > 0 && d->global_every > 0 && st->layer % d->global_every;
        const float *in = hidden;
        if (d->norm_pre && p->w[HS_W_ATTN_LN_G]) { /* (absent: an identity norm) */
            hs__cpu_norm(tmp2, hidden, p->w[HS_W_ATTN_LN_G], p->w[HS_W_ATTN_LN_B], T, H, d->ln_eps,
                         d->norm, nt);
            in = tmp2;
        }
        struct hs_attn_shape shape = {
            .heads = d->heads,
            .kv_heads = nkv / d->head_dim,
            .head_dim = d->head_dim,
            .stride = nqkv,
            .k_off = nq,
            .v_off = nq + nkv,
            .ctx_stride = nq,
            .causal = d->causal,
            .window = local ? d->window : 0,
            .lowp = p->dtype != HS_DTYPE_F32, /* int8 and bf16 lanes (kernels.h: which products) */
        };
        /* f32 on sgemm: the attention kernel adds the QKV bias as it reads q, k and v, where it
         * can and nothing comes between (per-head norms, rotary positions), so no pass over the
         * batch's q | k | v rows adds it (the packed kernel adds it in its epilogue, int8 and
         * bf16 in theirs) */
        const bool bias_in_attn = p->dtype == HS_DTYPE_F32 && p->qkv_b &&
                                  on_sgemm(c, &sc, p->packed_qkv, H, -1) && !p->w[HS_W_Q_NORM] &&
                                  !p->w[HS_W_K_NORM] && d->pos != HS_POS_ROTARY &&
                                  hs__cpu_attn_takes_bias(&shape, p->rel != NULL);
        if (linear(c, &sc, QL_QKV, pad, in, p->qkv_w, p->packed_qkv, bias_in_attn ? NULL : p->qkv_b,
                   qkv, T, nqkv, H, -1, nt))
            return -1;
        shape.qkv_bias = bias_in_attn ? p->qkv_b : NULL;
        if (p->w[HS_W_Q_NORM])
            hs__cpu_head_rms(w->qkv, t0, t0 + T, nqkv, d->heads, d->head_dim, p->w[HS_W_Q_NORM],
                             d->ln_eps, nt);
        if (p->w[HS_W_K_NORM])
            hs__cpu_head_rms(w->qkv + nq, t0, t0 + T, nqkv, nkv / d->head_dim, d->head_dim,
                             p->w[HS_W_K_NORM], d->ln_eps, nt);
        if (d->pos == HS_POS_ROTARY) { /* q heads, then k heads */
            const float *cs = local && w->rope_local ? w->rope_local : w->rope;
            hs__cpu_rope(w->qkv, w->offsets + sb, se - sb, nqkv, d->heads, d->head_dim,
                         d->rotary_dim, cs, nt);
            hs__cpu_rope(w->qkv + nq, w->offsets + sb, se - sb, nqkv, nkv / d->head_dim,
                         d->head_dim, d->rotary_dim, cs, nt);
        }
        /* attention indexes tokens by the batch's absolute offsets */
        if (hs__cpu_attention(w->qkv, w->tmp, w->offsets + sb, se - sb, &shape, scratch,
                              w->spec.seq_max, nt, p->rel, p->rel_span)) {
            hs_error_set(sc.err, HS_STATUS_INTERNAL, "cpu: attention refused the QKV bias");
            return -1;
        }
        if (fuse_resid_ln(&sc, d, p->w[HS_W_ATTN_LN_G]))
            return linear_resid_ln(&sc, QL_ATTN_OUT, ctx, hidden, p->w[HS_W_ATTN_OUT_B],
                                   p->w[HS_W_ATTN_LN_G], p->w[HS_W_ATTN_LN_B], d->ln_eps, T, nt);
        const int done = linear_resid_ln_f32(
            c, &sc, d, QL_ATTN_OUT, ctx, p->w[HS_W_ATTN_OUT], p->packed_out, hidden,
            p->w[HS_W_ATTN_OUT_B], p->w[HS_W_ATTN_LN_G], p->w[HS_W_ATTN_LN_B], T, H, nq, nt);
        if (done) return done < 0 ? -1 : 0;
        if (linear(c, &sc, QL_ATTN_OUT, pad, ctx, p->w[HS_W_ATTN_OUT], p->packed_out, NULL, tmp2, T,
                   H, nq, -1, nt))
            return -1;
        if (d->norm_pre)
            hs__cpu_residual_add(hidden, tmp2, p->w[HS_W_ATTN_OUT_B], T, H, nt);
        else
            hs__cpu_residual_ln(hidden, tmp2, p->w[HS_W_ATTN_OUT_B], p->w[HS_W_ATTN_LN_G],
                                p->w[HS_W_ATTN_LN_B], T, H, d->ln_eps, nt);
        return 0;
    }
    case HS_STAGE_FFN: {
        float *inter = w->tmp + (size_t)t0 * I;
        const float *in = hidden;
        if (d->norm_pre && p->w[HS_W_FFN_LN_G]) {
            hs__cpu_norm(tmp2, hidden, p->w[HS_W_FFN_LN_G], p->w[HS_W_FFN_LN_B], T, H, d->ln_eps,
                         d->norm, nt);
            in = tmp2;
        }
        if (p->ffn_w) {
            float *ug = w->ug + (size_t)t0 * 2 * I;
            if (linear(c, &sc, QL_FFN_IN, pad, in, p->ffn_w, p->packed_in, NULL, ug, T, 2 * I, H,
                       -1, nt))
                return -1;
            hs__cpu_glu(ug, inter, T, I, d->act, nt);
        } else {
            const struct hs_ql_resid_ln ln = {hidden, p->w[HS_W_FFN_OUT_B], p->w[HS_W_FFN_LN_G],
                                              p->w[HS_W_FFN_LN_B], d->ln_eps};
            const bool fuse = fuse_resid_ln(&sc, d, ln.g);
            const int chained = ffn_chain(&sc, in, p->w[HS_W_FFN_IN_B], tmp2, T, (int)d->act, nt,
                                          fuse ? &ln : NULL);
            if (chained < 0) return -1;
            if (chained && fuse) return 0;
            if (!chained && linear(c, &sc, QL_FFN_IN, pad, in, p->w[HS_W_FFN_IN], p->packed_in,
                                   p->w[HS_W_FFN_IN_B], inter, T, I, H, (int)d->act, nt))
                return -1;
            if (!chained && fuse)
                return linear_resid_ln(&sc, QL_FFN_OUT, inter, hidden, ln.bias, ln.g, ln.beta,
                                       ln.eps, T, nt);
            const int done = chained
                                 ? 0
                                 : linear_resid_ln_f32(c, &sc, d, QL_FFN_OUT, inter,
                                                       p->w[HS_W_FFN_OUT], p->packed_ffn_out,
                                                       hidden, ln.bias, ln.g, ln.beta, T, H, I, nt);
            if (done) return done < 0 ? -1 : 0;
            if (!chained && linear(c, &sc, QL_FFN_OUT, pad, inter, p->w[HS_W_FFN_OUT],
                                   p->packed_ffn_out, NULL, tmp2, T, H, I, -1, nt))
                return -1;
        }
        if (p->ffn_w && linear(c, &sc, QL_FFN_OUT, pad, inter, p->w[HS_W_FFN_OUT],
                               p->packed_ffn_out, NULL, tmp2, T, H, I, -1, nt))
            return -1;
        if (d->norm_pre)
            hs__cpu_residual_add(hidden, tmp2, p->w[HS_W_FFN_OUT_B], T, H, nt);
        else
            hs__cpu_residual_ln(hidden, tmp2, p->w[HS_W_FFN_OUT_B], p->w[HS_W_FFN_LN_G],
                                p->w[HS_W_FFN_LN_B], T, H, d->ln_eps, nt);
        return 0;
    }
    case HS_STAGE_FINAL_NORM:
        hs__cpu_norm(hidden, hidden, p->w[HS_W_FINAL_LN_G], p->w[HS_W_FINAL_LN_B], T, H, d->ln_eps,
                     d->norm, nt);
        return 0;
    case HS_STAGE_POOL:
        if (d->pool == HS_POOL_SPLADE) {
            const int V = d->vocab;
            float *scr = w->splade + (size_t)slot * (size_t)hs__cpu_splade_scratch_floats(H, V);
            if (hs__cpu_splade(w->hidden, w->pooled + (size_t)sb * V, w->offsets + sb, se - sb, H,
                               V, p->w[HS_W_MLM_DENSE], p->w[HS_W_MLM_DENSE_B], p->w[HS_W_MLM_LN_G],
                               p->w[HS_W_MLM_LN_B], p->w[HS_W_MLM_DECODER], p->w[HS_W_MLM_BIAS],
                               (int)d->act, d->ln_eps, scr, nt)) {
                hs_error_set(err, HS_STATUS_ENGINE, "cpu: stage %s: a GEMM failed", st->name);
                return -1;
            }
            return 0;
        }
        if (d->pool == HS_POOL_NONE) { /* the rows as they are, zeros after the last */
            const size_t row = (size_t)d->pool_rows * (size_t)H;
            for (int s = sb; s < se; s++) {
                const size_t n = (size_t)(w->offsets[s + 1] - w->offsets[s]) * (size_t)H;
                float *o = w->pooled + (size_t)s * row;
                memcpy(o, w->hidden + (size_t)w->offsets[s] * (size_t)H, n * sizeof(float));
                memset(o + n, 0, (row - n) * sizeof(float));
            }
            return 0;
        }
        hs__cpu_pool(w->hidden, w->pooled + (size_t)sb * H, w->offsets + sb, se - sb, H, d->pool,
                     nt);
        return 0;
    case HS_STAGE_NORMALIZE:
        if (d->normalize) hs__cpu_l2_normalize(w->pooled + (size_t)sb * H, se - sb, H, nt);
        return 0;
    case HS_STAGE_COUNT:
        break;
    }
    return -1;
}

/* Two ways to use the threads. A batch with at least as many sequences as threads, and more
 * tokens than the packed small-M kernel takes (f32), is split into one slice of whole sequences
 * per thread (balanced by tokens), and each thread runs the whole stage on its slice alone: one
 * fork/join per stage, no barrier inside it, so a thread preempted by other work on a shared
 * machine delays only its own slice. Smaller batches (the latency path: one query, or a few
 * short ones) split every operation across the threads instead. Either way a sequence's result
 * does not depend on the rest of the batch. */
#define SUB_TOKENS 256
static hs_status run_stage_on(const struct cpu_ctx *c, struct cpu_ws *w, const struct cpu_prep *p,
                              const struct hs_stage *st, int s0, int s1, int nt,
                              struct hs_error *err)
{
    omp_set_num_threads(nt); /* oneDNN's sgemm sizes its team from this */
    int failed = 0;
    /* an f32 batch the packed small-M kernel takes whole (c->small_rows) splits its operations
     * too: at so few rows a thread a sequence runs each one single-threaded and the batch
     * waits for the longest (bench_cpu, 2 threads, AVX2: 2x16 6.0 -> 4.8 ms, 3x32 16.7 -> 12.7,
     * 4x32 17.6 -> 16.7, level at 8x64); its kernel computes every row alike however the rows
     * are split */
    const bool whole = p && p->dtype == HS_DTYPE_F32 && w->n_tokens <= c->small_rows;
    if (nt > 1 && s1 - s0 >= nt && !whole && st->kind != HS_STAGE_NORMALIZE) {
        const size_t pad_per =
            (size_t)8 *
            (size_t)(w->dims.intermediate > w->dims.hidden ? w->dims.intermediate : w->dims.hidden);
        const int64_t attn_per = hs__cpu_attn_scratch_floats(w->dims.head_dim, w->spec.seq_max);
#pragma omp parallel num_threads(nt) reduction(| : failed)
        {
            const int tid = omp_get_thread_num(), n = omp_get_num_threads();
            /* slice boundaries where the range's token prefix crosses tid/n and (tid+1)/n */
            int sb = s0, se = s0;
            const int64_t t0 = w->offsets[s0], T = w->offsets[s1] - t0;
            while (sb < s1 && (int64_t)(w->offsets[sb] - t0) * n < T * tid) sb++;
            while (se < s1 && (int64_t)(w->offsets[se] - t0) * n < T * (tid + 1)) se++;
            if (tid == n - 1) se = s1;
            /* int8: the slice in parts of about SUB_TOKENS tokens, each through the whole stage
             * before the next, so that what one layer writes (QKV, the context, the residual
             * rows) is still in L2 when the next reads it */
            const int sub = p && p->dtype == HS_DTYPE_I8 ? SUB_TOKENS : INT32_MAX;
            for (int a = sb; a < se && !failed;) {
                int b = a + 1;
                while (b < se && w->offsets[b] - w->offsets[a] < sub) b++;
                failed |= stage_slice(c, w, p, st, a, b, 1, tid, w->pad + pad_per * tid,
                                      w->scratch + attn_per * tid, NULL) != 0;
                a = b;
            }
        }
    } else {
        failed = stage_slice(c, w, p, st, s0, s1, nt, 0, w->pad, w->scratch, err) != 0;
        if (failed && err && err->status) return err->status;
    }
    if (failed) return hs_error_set(err, HS_STATUS_ENGINE, "cpu: stage %s failed", st->name);
    return HS_STATUS_OK;
}

/* An engine that borrows runs a long batch's layer stage in rounds of whole sequences of about
 * this much work each (2 FLOP per weight per token: ~5 ms on one AVX2 core, ~2.5 on an AVX-512
 * one), taking and returning its loans per round: an owner whose lane gets a request waits at
 * most for the round in flight, not for the stage (a stage of 8 x 256 tokens of MiniLM's FFN is
 * ~50 ms on one core), and a core whose lane goes idle mid-stage is borrowed at the next
 * round. Each sequence's math is the same in any round (it never depends on the others). */
#define HS_CPU_ROUND_FLOP 500000000LL
static int64_t g_round_flop = HS_CPU_ROUND_FLOP;

void hs__cpu_set_round_flop(int64_t flop)
{
    __atomic_store_n(&g_round_flop, flop > 0 ? flop : HS_CPU_ROUND_FLOP, __ATOMIC_RELAXED);
}

static int64_t stage_flop_per_token(const struct hs_encoder_dims *d, enum hs_stage_kind kind)
{
    const int64_t h = d->hidden, i = d->intermediate;
    if (kind == HS_STAGE_ATTN) return 2 * h * (2LL * q_cols(d) + 2LL * kv_cols(d)); /* qkv, out */
    if (kind == HS_STAGE_FFN) return 2 * h * i * (d->ffn == HS_FFN_GATED ? 3 : 2);
    return 0; /* the rest: one round */
}

/* A stage on the engine's threads and, while their owners are idle, on the cores it may
 * borrow (lease.h): the owners' stages wait for this one's round to end. */
static hs_status cpu_run_stage(void *vctx, void *vws, const struct hs_stage *st, void *vprep,
                               struct hs_error *err)
{
    struct cpu_ctx *c = vctx;
    struct cpu_ws *w = vws;
    struct cpu_prep *p = vprep;
    /* rounds where loans change hands: an engine that borrows, or one whose cores a preempting
     * borrower may claim */
    bool rounds = c->n_borrow > 0;
    for (int i = 0; i < c->n_cores && !rounds; i++) rounds = hs__cpu_lease_preempted(c->cores[i]);
    const int64_t per_token = rounds ? stage_flop_per_token(&w->dims, st->kind) : 0;
    const int64_t round_flop = __atomic_load_n(&g_round_flop, __ATOMIC_RELAXED);
    hs_status rs = HS_STATUS_OK;
    for (int s0 = 0; s0 < w->n_seqs && rs == HS_STATUS_OK;) {
        int s1 = per_token > 0 ? s0 + 1 : w->n_seqs; /* a round: at least one sequence */
        while (s1 < w->n_seqs &&
               (int64_t)(w->offsets[s1 + 1] - w->offsets[s0]) * per_token <= round_flop)
            s1++;
        /* a preempting borrower claims first: an owner's next round yields even while this
         * round still waits for its own cores */
        for (int i = 0; c->preempt && i < c->n_borrow; i++) hs__cpu_lease_claim(c->borrow[i]);
        /* the owner's side of lent cores: wait for a borrower's round to end (and yield to a
         * preempting one), then hold them */
        for (int i = 0; i < c->n_cores; i++) hs__cpu_lease_take(c->cores[i]);
        /* the borrower's side: one more thread on every listed core whose owners are idle
         * (preempting: on which no owner runs) */
        int lent[HS_ENGINE_MAX_CORES], n_lent = 0;
        for (int i = 0; i < c->n_borrow; i++)
            if (c->preempt ? hs__cpu_lease_borrow_first(c->borrow[i])
                           : hs__cpu_lease_borrow(c->borrow[i], HS_CPU_LEASE_IDLE_NS))
                lent[n_lent++] = c->borrow[i];
        pin_team(c, lent, n_lent);
        rs = run_stage_on(c, w, p, st, s0, s1, c->threads + n_lent, err);
        /* own cores first: a preempting borrower woken by the return finds them free */
        for (int i = 0; i < c->n_cores; i++) hs__cpu_lease_drop(c->cores[i]);
        for (int i = 0; i < n_lent; i++) hs__cpu_lease_return(lent[i]);
        for (int i = 0; c->preempt && i < c->n_borrow; i++) hs__cpu_lease_unclaim(c->borrow[i]);
        s0 = s1;
    }
    return rs;
}

/* Preparations depend only on the small-M packing threshold: engines that agree on it share them
 * (a model on several CPU engines holds its converted weights once). cpu_stage_release does
 * not use its engine. */
static uint64_t cpu_prep_key(void *vctx)
{
    const struct cpu_ctx *c = vctx;
    return (uint64_t)(uint32_t)c->small_rows;
}

static const struct hs_engine_iface cpu_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "cpu",
    .destroy = cpu_destroy,
    .caps = cpu_caps,
    .stage_prepare = cpu_stage_prepare,
    .stage_release = cpu_stage_release,
    .ws_create = cpu_ws_create,
    .ws_destroy = cpu_ws_destroy,
    .batch_begin = cpu_batch_begin,
    .act_write = cpu_act_write,
    .run_stage = cpu_run_stage,
    .act_read = cpu_act_read,
    .prep_key = cpu_prep_key,
};

static void read_cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ') v++;
                v[strcspn(v, "\n")] = '\0';
                snprintf(buf, n, "%s", v);
            }
            break;
        }
    }
    fclose(f);
}

hs_status hs_engine_cpu_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                               struct hs_error *err)
{
    struct cpu_ctx *c = hs_calloc(1, sizeof *c);
    if (!c) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cpu: out of memory");
    c->id = atomic_fetch_add(&next_ctx_id, 1) + 1;
    cpu_set_t avail;
    int n_avail = 0;
    if (sched_getaffinity(0, sizeof avail, &avail) == 0) n_avail = CPU_COUNT(&avail);
    if (n_avail <= 0) n_avail = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (opts->n_cores < 0 || opts->n_cores > HS_ENGINE_MAX_CORES) {
        hs_free(c);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: bad core count %d",
                            opts->n_cores);
    }
    for (int i = 0; i < opts->n_cores; i++) {
        if (opts->cores[i] < 0 || opts->cores[i] >= CPU_SETSIZE ||
            !CPU_ISSET(opts->cores[i], &avail)) {
            hs_free(c);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "cpu: core %d is not available to this process", opts->cores[i]);
        }
        c->cores[i] = opts->cores[i];
    }
    c->n_cores = opts->n_cores;
    c->threads = opts->threads > 0 ? opts->threads : (c->n_cores > 0 ? c->n_cores : n_avail);
    if (opts->n_borrow_cores < 0 || opts->n_borrow_cores > HS_ENGINE_MAX_CORES) {
        hs_free(c);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: bad borrowed core count %d",
                            opts->n_borrow_cores);
    }
    if (opts->n_borrow_cores > 0 && c->n_cores == 0) {
        hs_free(c);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cpu: an engine that borrows cores must be pinned to its own");
    }
    for (int i = 0; i < opts->n_borrow_cores; i++) {
        const int core = opts->borrow_cores[i];
        bool own = false, twice = false;
        for (int k = 0; k < c->n_cores; k++) own = own || c->cores[k] == core;
        for (int k = 0; k < c->n_borrow; k++) twice = twice || c->borrow[k] == core;
        if (core < 0 || core >= HS_CPU_LEASE_CORES || core >= CPU_SETSIZE ||
            !CPU_ISSET(core, &avail) || own || twice) {
            hs_free(c);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cpu: cannot borrow core %d (%s)",
                                core,
                                own     ? "it is one of the engine's own"
                                : twice ? "listed twice"
                                        : "not available to this process");
        }
        c->borrow[c->n_borrow++] = core;
        if (opts->borrow_preempt)
            hs__cpu_lease_watch_preempt(core);
        else
            hs__cpu_lease_watch(core);
    }
    c->preempt = opts->borrow_preempt && c->n_borrow > 0;
    c->slots = c->threads + c->n_borrow;
    read_cpu_name(c->device, sizeof c->device);
    c->small_rows = opts->cpu_small_gemm_rows < 0   ? 0
                    : opts->cpu_small_gemm_rows > 0 ? opts->cpu_small_gemm_rows
                                                    : hs__cpu_small_gemm_rows_default();
    if (getenv("HS_CPU_SMALL_GEMM_ROWS")) c->small_rows = atoi(getenv("HS_CPU_SMALL_GEMM_ROWS"));
    if (!hs__cpu_small_gemm_available()) c->small_rows = 0;
    c->act_k = c->small_rows > 0 ? hs__cpu_small_gemm_act_k_default() : 0;
    c->observe = opts->cpu_observe;
    c->observe_ctx = opts->cpu_observe_ctx;
    return hs__engine_wrap(&cpu_iface, c, opts->name ? opts->name : "cpu0", out, err);
}
