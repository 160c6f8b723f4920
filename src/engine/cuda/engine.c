/* hetserve CUDA engine — the engine interface on one NVIDIA GPU, in fp16. Every block feature
 * of stage.h runs here (caps.features), stage for stage as on the CPU engine.
 *
 * Weights: uploaded once in stage_prepare as fp16 (GEMM weights, embeddings, the biases of
 * fp16-output GEMMs) or fp32 (LayerNorm parameters, the biases of fp32-output GEMMs); no fp32
 * copy of a GEMM weight stays on the device. Q, K and V are fused into one
 * [nq + 2 nkv, H] weight, a gated FFN's up and gate into one [2I, H] (prep.c).
 *
 * Activations: a padded batch (B sequences x S = batch.seq_max rows, see cuda_impl.h). The
 * residual stream stays fp32 between LayerNorms; GEMM inputs and the QKV, attention and FFN
 * activations are fp16; accumulation is fp32 everywhere.
 *
 * Streams and timing: one non-blocking stream per workspace; pinned staging buffers; CUDA
 * events around copy-in (batch_begin, act_write) and copy-out (act_read) feed the counters of
 * cuda.h, so compute and copies are reported apart.
 *
 * Graphs: run_stage checks and queues; the queued run of stages is launched when its result is
 * needed (act_read, act_write, sync, or a new batch_begin). The first time a (stage sequence,
 * B, S) is seen it runs directly (which loads kernels and cuBLASLt plans), the second time it is
 * captured into a CUDA graph, and from then on it is one cudaGraphLaunch. Kernels read lengths
 * and ids from fixed device buffers, so a graph depends only on that key.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/cuda/cuda.h"
#include "engine/cuda/cuda_impl.h"
#include "engine/engine.h"

#define WS_MAGIC             0x43554441u /* "CUDA" */
#define PENDING_MAX          128
#define GRAPH_CACHE          64
#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
#define ALIGN_BYTES          256

/* ---------- process-wide counters (cuda.h) ---------- */

static pthread_mutex_t g_counters_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hs_cuda_counters g_counters;

void hs_engine_cuda_counters(struct hs_cuda_counters *out)
{
    pthread_mutex_lock(&g_counters_lock);
    *out = g_counters;
    pthread_mutex_unlock(&g_counters_lock);
}

#define COUNTERS_UPDATE(stmt)                                                                      \
    do {                                                                                           \
        pthread_mutex_lock(&g_counters_lock);                                                      \
        stmt;                                                                                      \
        pthread_mutex_unlock(&g_counters_lock);                                                    \
    } while (0)

/* ---------- objects ---------- */

struct cuda_engine {
    int device;
    char name[256];
    int sm_count, cc_major, cc_minor;
    int64_t mem_bytes;
    bool graphs;     /* HS_CUDA_GRAPHS != 0 */
    bool exact_gelu; /* erf GELU in its own kernel (default), else cuBLASLt's fused GELU */
};

struct graph_entry {
    int B, S, n;
    struct hs__cuda_prep *preps[PENDING_MAX];
    bool seen_once;       /* ran directly once; capture on the next run */
    cudaGraphExec_t exec; /* NULL until captured */
};

struct cuda_ws {
    uint32_t magic;
    struct cuda_engine *eng;
    struct hs_encoder_dims d;
    int batch_max, tokens_max, seq_max;
    int64_t rows_max; /* batch_max * seq_max */
    cudaStream_t stream;
    cudaEvent_t ev_in0, ev_in1, ev_w0, ev_w1, ev_o0, ev_o1;
    struct hs__cuda_gemm *gemm;
    void *dmem;
    size_t dbytes;
    float *x, *y, *pooled;
    uint16_t *xh, *qkv, *ctx, *mid;
    uint16_t *ug;      /* gated FFN: [rows_max, 2I] up | gate; NULL otherwise */
    float *rope;       /* rotary: [seq_max, rotary_dim] cos | sin; NULL otherwise */
    float *rope_local; /* rotary with another base for the local layers; NULL otherwise */
    int32_t *dints;    /* ids | types | lengths | offsets of the current (B, S) */
    int32_t *hints;    /* pinned mirror */
    float *hstage;     /* pinned staging for hidden / pooled copies */
    size_t hstage_floats;
    /* current batch */
    bool have_batch;
    int B, S, n_tokens;
    bool in_recorded, w_recorded;
    cudaEvent_t mark; /* end of the last copy (start of compute) */
    /* queued stages */
    int n_pending;
    struct hs__cuda_prep *pending[PENDING_MAX];
    /* graphs */
    bool graphs;
    int n_graphs;
    struct graph_entry graphs_cache[GRAPH_CACHE];
};

/* ---------- helpers ---------- */

static hs_status cuda_fail(struct hs_error *err, cudaError_t ce, const char *what)
{
    hs_status s = ce == cudaErrorMemoryAllocation ? HS_STATUS_NO_MEMORY : HS_STATUS_ENGINE;
    return hs_error_set(err, s, "cuda: %s: %s (%s)", what, cudaGetErrorString(ce),
                        cudaGetErrorName(ce));
}

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t ce_ = (call);                                                                  \
        if (ce_ != cudaSuccess) return cuda_fail(err, ce_, what);                                  \
    } while (0)

static size_t align_up(size_t n)
{
    return (n + ALIGN_BYTES - 1) & ~(size_t)(ALIGN_BYTES - 1);
}

static bool env_flag(const char *name, bool def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    return !(strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0);
}

int hs_engine_cuda_device_count(void)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error, just none */
        return 0;
    }
    return n < 0 ? 0 : n;
}

int64_t hs_engine_cuda_mem_available(int device)
{
    int prev = 0;
    size_t free_b = 0, total = 0;
    if (device < 0 || device >= hs_engine_cuda_device_count()) return 0;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        free_b = 0;
    }
    cudaSetDevice(prev);
    return (int64_t)free_b;
}

/* ---------- caps ---------- */

static void cuda_destroy(void *ctx)
{
    hs_free(ctx);
}

static void cuda_caps(void *ctx, struct hs_engine_caps *out)
{
    struct cuda_engine *e = ctx;
    memset(out, 0, sizeof *out);
    snprintf(out->kind, sizeof out->kind, "cuda");
    snprintf(out->device, sizeof out->device, "%.127s", e->name);
    snprintf(out->isa, sizeof out->isa, "sm_%d%d", e->cc_major, e->cc_minor);
    out->threads = e->sm_count;
    out->mem_bytes = e->mem_bytes;
    out->dtypes = 1u << HS_DTYPE_F16;
    out->stages = (1u << HS_STAGE_COUNT) - 1;
    /* every block feature of stage.h: kernels in norm.cu, rotary.cu, attention.cu, kernels.cu */
    out->features = HS_FEAT_REL_POS_BIAS | HS_FEAT_POS_OFFSET | HS_FEAT_NO_TOKEN_TYPES |
                    HS_FEAT_NO_BIAS | HS_FEAT_ROTARY | HS_FEAT_GATED_FFN | HS_FEAT_ACT_SILU |
                    HS_FEAT_RMS_NORM | HS_FEAT_PRE_NORM | HS_FEAT_CAUSAL | HS_FEAT_GQA |
                    HS_FEAT_POOL_LAST | HS_FEAT_QK_NORM | HS_FEAT_LOCAL_ATTN | HS_FEAT_FINAL_NORM;
    out->batch_max = 65535;
    out->seq_max = 0;
    size_t v = cublasLtGetVersion();
    snprintf(out->gemm, sizeof out->gemm, "cuBLASLt %zu.%zu.%zu%s", v / 10000, (v / 100) % 100,
             v % 100, e->exact_gelu ? "" : " (fused GELU)");
}

static bool cuda_supports(void *ctx, enum hs_stage_kind kind, enum hs_dtype dtype, int batch,
                          int seq)
{
    (void)ctx;
    return dtype == HS_DTYPE_F16 && (int)kind >= 0 && kind < HS_STAGE_COUNT && batch <= 65535 &&
           seq >= 0;
}

/* ---------- stage preparation (prep.c) ---------- */

static hs_status cuda_stage_prepare(void *ctx, const struct hs_stage *st, enum hs_dtype dtype,
                                    void **prep_out, struct hs_error *err)
{
    struct cuda_engine *e = ctx;
    if (dtype != HS_DTYPE_F16)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: computes in F16 only (asked %s)",
                            hs_dtype_name(dtype));
    if (!st->dims) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: stage has no dims");
    struct hs__cuda_prep *p = NULL;
    hs_status s = hs__cuda_prepare(e->device, st, &p, err);
    if (s) return s;
    COUNTERS_UPDATE(g_counters.weight_bytes += (int64_t)p->bytes);
    *prep_out = p;
    return HS_STATUS_OK;
}

static void cuda_stage_release(void *ctx, void *prep)
{
    struct cuda_engine *e = ctx;
    struct hs__cuda_prep *p = prep;
    if (!p) return;
    if (p->mem) {
        cudaSetDevice(e->device);
        cudaFree(p->mem);
        COUNTERS_UPDATE(g_counters.weight_bytes -= (int64_t)p->bytes);
    }
    hs_free(p);
}

/* ---------- workspaces ---------- */

static void ws_free(struct cuda_ws *w)
{
    if (!w) return;
    if (w->stream) cudaStreamSynchronize(w->stream);
    for (int i = 0; i < w->n_graphs; i++)
        if (w->graphs_cache[i].exec) cudaGraphExecDestroy(w->graphs_cache[i].exec);
    hs__cuda_gemm_destroy(w->gemm);
    cudaEvent_t *evs[] = {&w->ev_in0, &w->ev_in1, &w->ev_w0, &w->ev_w1, &w->ev_o0, &w->ev_o1};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (*evs[i]) cudaEventDestroy(*evs[i]);
    if (w->stream) cudaStreamDestroy(w->stream);
    if (w->dmem) {
        cudaFree(w->dmem);
        COUNTERS_UPDATE(g_counters.ws_bytes -= (int64_t)w->dbytes);
    }
    if (w->hints) cudaFreeHost(w->hints);
    if (w->hstage) cudaFreeHost(w->hstage);
    hs_free(w);
}

static hs_status cuda_ws_create(void *ctx, const struct hs_ws_spec *spec, void **out,
                                struct hs_error *err)
{
    struct cuda_engine *e = ctx;
    if (!spec->dims || spec->batch_max <= 0 || spec->seq_max <= 0 || spec->tokens_max <= 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: bad workspace spec");
    hs_status s = hs__cuda_check_dims(spec->dims, err);
    if (s) return s;
    if (spec->batch_max > 65535)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: batch_max %d > 65535",
                            spec->batch_max);
    /* (a longer bucket than the model's positions is fine, as on the CPU engine: batch_begin
     * refuses a sequence longer than the positions) */
    struct cuda_ws *w = hs_calloc(1, sizeof *w);
    if (!w) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: workspace");
    w->magic = WS_MAGIC;
    w->eng = e;
    w->d = *spec->dims;
    w->batch_max = spec->batch_max;
    w->tokens_max = spec->tokens_max;
    w->seq_max = spec->seq_max;
    w->rows_max = (int64_t)spec->batch_max * spec->seq_max;
    w->graphs = e->graphs;
    const int64_t H = w->d.hidden, I = w->d.intermediate, R = w->rows_max;
    const int64_t nq = (int64_t)w->d.heads * w->d.head_dim;
    const int64_t nqkv = nq + 2 * (int64_t)hs__cuda_kv_heads(&w->d) * w->d.head_dim;
    const bool rotary = w->d.pos == HS_POS_ROTARY;
    const bool two_bases =
        rotary && w->d.rope_theta_local > 0.0f && w->d.rope_theta_local != w->d.rope_theta;
    const size_t rope_bytes = (size_t)spec->seq_max * (size_t)w->d.rotary_dim * 4;
    const int64_t packed_rows = spec->tokens_max > R ? spec->tokens_max : R;

    cudaError_t ce = cudaSetDevice(e->device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
    cudaEvent_t *evs[] = {&w->ev_in0, &w->ev_in1, &w->ev_w0, &w->ev_w1, &w->ev_o0, &w->ev_o1};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0] && ce == cudaSuccess; i++)
        ce = cudaEventCreate(evs[i]);
    if (ce != cudaSuccess) {
        ws_free(w);
        return cuda_fail(err, ce, "stream / events");
    }

    size_t sz_x = align_up((size_t)R * H * 4), sz_y = align_up((size_t)packed_rows * H * 4),
           sz_pool = align_up((size_t)spec->batch_max * H * 4), sz_xh = align_up((size_t)R * H * 2),
           sz_qkv = align_up((size_t)R * (size_t)nqkv * 2), sz_ctx = align_up((size_t)R * nq * 2),
           sz_mid = align_up((size_t)R * I * 2),
           sz_ug = w->d.ffn == HS_FFN_GATED ? align_up((size_t)R * I * 4) : 0,
           sz_rope = rotary ? align_up(rope_bytes) : 0, sz_rope_l = two_bases ? sz_rope : 0,
           sz_ints = align_up((size_t)(2 * R + 2 * spec->batch_max + 1) * 4);
    w->dbytes = sz_x + sz_y + sz_pool + sz_xh + sz_qkv + sz_ctx + sz_mid + sz_ug + sz_rope +
                sz_rope_l + sz_ints;
    ce = cudaMalloc(&w->dmem, w->dbytes);
    if (ce != cudaSuccess) {
        w->dmem = NULL;
        size_t bytes = w->dbytes;
        ws_free(w);
        hs_error_set(err, HS_STATUS_NO_MEMORY,
                     "cuda: workspace of %zu MiB for batch %d x seq %d: %s", bytes >> 20,
                     spec->batch_max, spec->seq_max, cudaGetErrorString(ce));
        return HS_STATUS_NO_MEMORY;
    }
    COUNTERS_UPDATE(g_counters.ws_bytes += (int64_t)w->dbytes);
    unsigned char *m = w->dmem;
    w->x = (float *)m;
    m += sz_x;
    w->y = (float *)m;
    m += sz_y;
    w->pooled = (float *)m;
    m += sz_pool;
    w->xh = (uint16_t *)m;
    m += sz_xh;
    w->qkv = (uint16_t *)m;
    m += sz_qkv;
    w->ctx = (uint16_t *)m;
    m += sz_ctx;
    w->mid = (uint16_t *)m;
    m += sz_mid;
    w->ug = sz_ug ? (uint16_t *)m : NULL;
    m += sz_ug;
    w->rope = sz_rope ? (float *)m : NULL;
    m += sz_rope;
    w->rope_local = sz_rope_l ? (float *)m : NULL;
    m += sz_rope_l;
    w->dints = (int32_t *)m;
    if (rotary) { /* the cos | sin tables, once: they depend only on the bucket limit */
        float *cs = hs_malloc(rope_bytes);
        if (!cs) {
            ws_free(w);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: rotary table");
        }
        hs__cuda_rope_table(cs, spec->seq_max, w->d.rotary_dim, w->d.rope_theta,
                            w->d.rope_freq_div);
        ce = cudaMemcpy(w->rope, cs, rope_bytes, cudaMemcpyHostToDevice);
        if (ce == cudaSuccess && two_bases) {
            hs__cuda_rope_table(cs, spec->seq_max, w->d.rotary_dim, w->d.rope_theta_local,
                                w->d.rope_freq_div);
            ce = cudaMemcpy(w->rope_local, cs, rope_bytes, cudaMemcpyHostToDevice);
        }
        hs_free(cs);
        if (ce != cudaSuccess) {
            ws_free(w);
            return cuda_fail(err, ce, "upload of the rotary tables");
        }
    }

    w->hstage_floats =
        (size_t)(spec->tokens_max > spec->batch_max ? spec->tokens_max : spec->batch_max) * H;
    ce = cudaMallocHost((void **)&w->hints, sz_ints);
    if (ce == cudaSuccess) ce = cudaMallocHost((void **)&w->hstage, w->hstage_floats * 4);
    if (ce != cudaSuccess) {
        ws_free(w);
        return cuda_fail(err, ce, "pinned staging buffers");
    }
    s = hs__cuda_gemm_create(GEMM_WORKSPACE_BYTES, &w->gemm, err);
    if (s) {
        ws_free(w);
        return s;
    }
    /* cuBLASLt's fused GELU epilogue is the tanh form: exact for GELU_TANH models, an
     * approximation (below fp16 resolution) for erf models, used there only on request */
    const bool tanh_model = w->d.act == HS_ACT_GELU_TANH;
    hs__cuda_gemm_set_gelu(w->gemm, tanh_model || !e->exact_gelu, tanh_model ? 2 : 1);
    *out = w;
    return HS_STATUS_OK;
}

static void cuda_ws_destroy(void *ctx, void *ws)
{
    struct cuda_engine *e = ctx;
    cudaSetDevice(e->device);
    ws_free(ws);
}

/* ---------- running stages ---------- */

struct ints {
    int32_t *ids, *types, *lengths, *offsets;
};

static struct ints ints_at(int32_t *base, int B, int S)
{
    const int64_t R = (int64_t)B * S;
    struct ints v = {base, base + R, base + 2 * R, base + 2 * R + B};
    return v;
}

/* The stage norm's kind for the row kernels: 0 LayerNorm, 1 RMSNorm. */
static int norm_code(const struct hs_encoder_dims *d)
{
    return d->norm == HS_NORM_RMS ? 1 : 0;
}

/* The activation codes of the kernels (cuda_impl.h): enum hs_act_fn + 1. */
static int act_code(enum hs_act_fn a)
{
    return (int)a + 1;
}

/* Queues one stage, mirroring the CPU engine's stage_slice step for step (cpu_engine.c). */
static hs_status enqueue_stage(struct cuda_ws *w, const struct hs__cuda_prep *p,
                               struct hs_error *err)
{
    const int B = w->B, S = w->S;
    const int R = B * S;
    const struct hs_encoder_dims *d = &p->d;
    const int H = d->hidden, I = d->intermediate, D = d->head_dim;
    const int nq = d->heads * D, nkv = hs__cuda_kv_heads(d) * D, nqkv = nq + 2 * nkv;
    const struct ints in = ints_at(w->dints, B, S);
    cudaStream_t st = w->stream;
    hs_status s;
    switch (p->kind) {
    case HS_STAGE_EMBED:
        CUDA_TRY(hs__cuda_embed(in.ids, in.types, in.lengths, p->word, p->pos, p->type,
                                d->pos_offset, p->ln_g, p->ln_b, d->ln_eps, B, S, H, w->x, w->xh,
                                st),
                 "embed kernel");
        return HS_STATUS_OK;
    case HS_STAGE_ATTN: {
        /* layer l is local when the family has a window and l is not a global layer */
        const bool local = d->window > 0 && d->global_every > 0 && p->layer % d->global_every;
        if (d->norm_pre && p->ln_g) /* (absent: an identity norm; xh is half(x) already) */
            CUDA_TRY(hs__cuda_norm_half(w->x, p->ln_g, p->ln_b, norm_code(d), d->ln_eps, R, H,
                                        w->xh, st),
                     "pre-norm kernel");
        s = hs__cuda_linear(w->gemm, st, R, nqkv, H, w->xh, p->wqkv, p->bqkv, HS_CUDA_EPI_BIAS,
                            false, w->qkv, err);
        if (s) return s;
        const float *cs = NULL;
        if (d->pos == HS_POS_ROTARY) cs = local && w->rope_local ? w->rope_local : w->rope;
        if (cs || p->q_norm || p->k_norm)
            CUDA_TRY(hs__cuda_qk_rope(w->qkv, R, S, nqkv, d->heads, hs__cuda_kv_heads(d), D, nq,
                                      p->q_norm, p->k_norm, d->ln_eps, d->rotary_dim, cs, st),
                     "qk-norm / rotary kernel");
        const struct hs__cuda_attn_shape shape = {
            .heads = d->heads,
            .kv_heads = hs__cuda_kv_heads(d),
            .head_dim = D,
            .stride = nqkv,
            .k_off = nq,
            .v_off = nq + nkv,
            .ctx_stride = nq,
            .causal = d->causal,
            .window = local ? d->window : 0,
            .rel = p->rel,
            .rel_span = p->rel_span,
        };
        CUDA_TRY(hs__cuda_attention(w->qkv, in.lengths, B, S, &shape, 1.0f / sqrtf((float)D),
                                    w->ctx, st),
                 "attention kernel");
        s = hs__cuda_linear(w->gemm, st, R, H, nq, w->ctx, p->wo, p->bo, HS_CUDA_EPI_BIAS, true,
                            w->y, err);
        if (s) return s;
        if (d->norm_pre)
            CUDA_TRY(hs__cuda_residual_add(w->x, w->y, R, H, w->xh, st), "residual kernel");
        else
            CUDA_TRY(hs__cuda_add_norm(w->x, w->y, p->ln_g, p->ln_b, norm_code(d), d->ln_eps, R, H,
                                       w->xh, st),
                     "add+norm kernel");
        return HS_STATUS_OK;
    }
    case HS_STAGE_FFN:
        if (d->norm_pre && p->ln_g)
            CUDA_TRY(hs__cuda_norm_half(w->x, p->ln_g, p->ln_b, norm_code(d), d->ln_eps, R, H,
                                        w->xh, st),
                     "pre-norm kernel");
        if (d->ffn == HS_FFN_GATED) {
            s = hs__cuda_linear(w->gemm, st, R, 2 * I, H, w->xh, p->w1, p->b1, HS_CUDA_EPI_BIAS,
                                false, w->ug, err);
            if (s) return s;
            CUDA_TRY(hs__cuda_glu(w->ug, R, I, act_code(d->act), w->mid, st), "gated FFN kernel");
        } else if (d->act == HS_ACT_GELU_ERF || d->act == HS_ACT_GELU_TANH) {
            s = hs__cuda_linear(w->gemm, st, R, I, H, w->xh, p->w1, p->b1, HS_CUDA_EPI_BIAS_GELU,
                                false, w->mid, err);
            if (s) return s;
        } else {
            s = hs__cuda_linear(w->gemm, st, R, I, H, w->xh, p->w1, p->b1, HS_CUDA_EPI_BIAS, false,
                                w->mid, err);
            if (s) return s;
            CUDA_TRY(hs__cuda_act_f16(w->mid, (int64_t)R * I, act_code(d->act), st),
                     "activation kernel");
        }
        s = hs__cuda_linear(w->gemm, st, R, H, I, w->mid, p->w2, p->b2, HS_CUDA_EPI_BIAS, true,
                            w->y, err);
        if (s) return s;
        if (d->norm_pre)
            CUDA_TRY(hs__cuda_residual_add(w->x, w->y, R, H, w->xh, st), "residual kernel");
        else
            CUDA_TRY(hs__cuda_add_norm(w->x, w->y, p->ln_g, p->ln_b, norm_code(d), d->ln_eps, R, H,
                                       w->xh, st),
                     "add+norm kernel");
        return HS_STATUS_OK;
    case HS_STAGE_FINAL_NORM:
        if (p->ln_g)
            CUDA_TRY(hs__cuda_add_norm(w->x, NULL, p->ln_g, p->ln_b, norm_code(d), d->ln_eps, R, H,
                                       w->xh, st),
                     "final norm kernel");
        return HS_STATUS_OK;
    case HS_STAGE_POOL: {
        const int mode = d->pool == HS_POOL_CLS ? 1 : d->pool == HS_POOL_LAST ? 2 : 0;
        CUDA_TRY(hs__cuda_pool(w->x, in.lengths, B, S, H, mode, w->pooled, st), "pool kernel");
        return HS_STATUS_OK;
    }
    case HS_STAGE_NORMALIZE:
        if (!d->normalize) return HS_STATUS_OK; /* the model has no Normalize module */
        CUDA_TRY(hs__cuda_l2norm(w->pooled, B, H, st), "normalize kernel");
        return HS_STATUS_OK;
    default:
        return hs_error_set(err, HS_STATUS_INTERNAL, "cuda: stage kind %d", (int)p->kind);
    }
}

static hs_status run_direct(struct cuda_ws *w, struct hs_error *err)
{
    for (int i = 0; i < w->n_pending; i++) {
        hs_status s = enqueue_stage(w, w->pending[i], err);
        if (s) return s;
    }
    COUNTERS_UPDATE(g_counters.direct_runs += w->n_pending);
    return HS_STATUS_OK;
}

static struct graph_entry *graph_find(struct cuda_ws *w)
{
    for (int i = 0; i < w->n_graphs; i++) {
        struct graph_entry *g = &w->graphs_cache[i];
        if (g->B == w->B && g->S == w->S && g->n == w->n_pending &&
            memcmp(g->preps, w->pending, sizeof(w->pending[0]) * (size_t)w->n_pending) == 0)
            return g;
    }
    return NULL;
}

/* Captures the pending stages into g->exec. On failure the capture is abandoned, graphs are
 * switched off for this workspace (with a warning) and the caller runs the stages directly. */
static bool graph_capture(struct cuda_ws *w, struct graph_entry *g)
{
    struct hs_error cerr;
    hs_error_clear(&cerr);
    int64_t t0 = hs_now_ns();
    size_t free0 = 0, free1 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    cudaError_t ce = cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal);
    hs_status s = HS_STATUS_OK;
    if (ce == cudaSuccess) {
        for (int i = 0; i < w->n_pending && s == HS_STATUS_OK; i++)
            s = enqueue_stage(w, w->pending[i], &cerr);
        cudaGraph_t graph = NULL;
        cudaError_t ce2 = cudaStreamEndCapture(w->stream, &graph);
        if (s == HS_STATUS_OK && ce2 == cudaSuccess && graph)
            ce = cudaGraphInstantiate(&g->exec, graph, 0);
        else if (ce2 != cudaSuccess)
            ce = ce2;
        if (graph) cudaGraphDestroy(graph);
    }
    if (ce != cudaSuccess || s != HS_STATUS_OK || !g->exec) {
        (void)cudaGetLastError();
        hs_log_warn("cuda: graph capture for batch %d x %d failed (%s); running without graphs",
                    w->B, w->S, s ? cerr.msg : cudaGetErrorString(ce));
        g->exec = NULL;
        w->graphs = false;
        return false;
    }
    cudaMemGetInfo(&free1, &total);
    int64_t dt = hs_now_ns() - t0;
    COUNTERS_UPDATE({
        g_counters.graphs_captured++;
        g_counters.graph_capture_ns += dt;
        if (free0 > free1) g_counters.graph_mem_bytes += (int64_t)(free0 - free1);
    });
    hs_log_debug("cuda: captured graph %d: batch %d x seq %d, %d stages, %.2f ms", w->n_graphs,
                 w->B, w->S, w->n_pending, hs_ns_to_ms(dt));
    return true;
}

/* Launches the queued stages. */
static hs_status flush(struct cuda_ws *w, struct hs_error *err)
{
    if (w->n_pending == 0) return HS_STATUS_OK;
    hs_status s = HS_STATUS_OK;
    struct graph_entry *g = w->graphs ? graph_find(w) : NULL;
    if (w->graphs && !g && w->n_graphs < GRAPH_CACHE) {
        g = &w->graphs_cache[w->n_graphs++];
        memset(g, 0, sizeof *g);
        g->B = w->B, g->S = w->S, g->n = w->n_pending;
        memcpy(g->preps, w->pending, sizeof(w->pending[0]) * (size_t)w->n_pending);
    }
    if (g && !g->exec && g->seen_once) graph_capture(w, g);
    if (g && g->exec) {
        cudaError_t ce = cudaGraphLaunch(g->exec, w->stream);
        if (ce != cudaSuccess)
            s = cuda_fail(err, ce, "cudaGraphLaunch");
        else
            COUNTERS_UPDATE(g_counters.graph_launches++);
    } else {
        s = run_direct(w, err);
        if (g) g->seen_once = true;
    }
    w->n_pending = 0;
    return s;
}

static hs_status ws_check(struct cuda_engine *e, void *ws, struct hs_error *err)
{
    struct cuda_ws *w = ws;
    if (!w || w->magic != WS_MAGIC || w->eng != e)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: not a workspace of %s",
                            e->name);
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    return HS_STATUS_OK;
}

static hs_status cuda_batch_begin(void *ctx, void *ws, const struct hs_batch *b,
                                  struct hs_error *err)
{
    struct cuda_ws *w = ws;
    hs_status s = ws_check(ctx, ws, err);
    if (s) return s;
    w->have_batch = false;
    w->n_pending = 0; /* stages queued for an abandoned batch never run */
    const int B = b->n_seqs, S = b->seq_max;
    if (B < 1 || B > w->batch_max || S < 1 || S > w->seq_max || b->n_tokens < 1 ||
        b->n_tokens > w->tokens_max || !b->ids || !b->lengths || !b->offsets)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cuda: batch %d seqs x %d (%d tokens) exceeds workspace %d x %d (%d)",
                            B, S, b->n_tokens, w->batch_max, w->seq_max, w->tokens_max);
    if (b->offsets[0] != 0 || b->offsets[B] != b->n_tokens)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: batch offsets inconsistent");
    for (int i = 0; i < B; i++) {
        const int len = b->lengths[i];
        if (len < 1 || len > S || b->offsets[i + 1] - b->offsets[i] != len)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "cuda: sequence %d has length %d (bucket %d)", i, len, S);
        if (len > w->d.max_positions - w->d.pos_offset)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "cuda: sequence %d has length %d (limit %d positions)", i, len,
                                w->d.max_positions - w->d.pos_offset);
    }
    /* the previous batch's copies may still read the pinned buffers */
    CUDA_TRY(cudaStreamSynchronize(w->stream), "stream synchronize");

    const struct ints h = ints_at(w->hints, B, S);
    for (int i = 0; i < B; i++) {
        const int len = b->lengths[i], off = b->offsets[i];
        int32_t *ids = h.ids + (int64_t)i * S, *types = h.types + (int64_t)i * S;
        for (int t = 0; t < len; t++) {
            const int32_t id = b->ids[off + t], ty = b->type_ids ? b->type_ids[off + t] : 0;
            if (id < 0 || id >= w->d.vocab || ty < 0 || ty >= w->d.type_vocab)
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "cuda: sequence %d token %d: id %d / type %d out of range", i,
                                    t, (int)id, (int)ty);
            ids[t] = id;
            types[t] = ty;
        }
        for (int t = len; t < S; t++) ids[t] = types[t] = 0;
        h.lengths[i] = len;
        h.offsets[i] = off;
    }
    h.offsets[B] = b->n_tokens;
    const size_t bytes = (size_t)(2 * (int64_t)B * S + 2 * B + 1) * 4;
    CUDA_TRY(cudaEventRecord(w->ev_in0, w->stream), "event");
    CUDA_TRY(cudaMemcpyAsync(w->dints, w->hints, bytes, cudaMemcpyHostToDevice, w->stream),
             "copy-in of token ids");
    CUDA_TRY(cudaEventRecord(w->ev_in1, w->stream), "event");
    w->in_recorded = true;
    w->w_recorded = false;
    w->mark = w->ev_in1;
    w->B = B, w->S = S, w->n_tokens = b->n_tokens;
    w->have_batch = true;
    return HS_STATUS_OK;
}

static hs_status need_batch(struct cuda_ws *w, struct hs_error *err)
{
    if (!w->have_batch)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: no batch begun on workspace");
    return HS_STATUS_OK;
}

static hs_status cuda_act_write(void *ctx, void *ws, enum hs_act_buf buf, const float *src,
                                struct hs_error *err)
{
    struct cuda_ws *w = ws;
    hs_status s = ws_check(ctx, ws, err);
    if (!s) s = need_batch(w, err);
    if (!s) s = flush(w, err);
    if (s) return s;
    const int H = w->d.hidden;
    const size_t n = buf == HS_ACT_BUF_HIDDEN ? (size_t)w->n_tokens * H : (size_t)w->B * H;
    /* the stream may still be reading hstage from an earlier copy */
    CUDA_TRY(cudaStreamSynchronize(w->stream), "stream synchronize");
    memcpy(w->hstage, src, n * sizeof(float));
    CUDA_TRY(cudaEventRecord(w->ev_w0, w->stream), "event");
    float *dst = buf == HS_ACT_BUF_HIDDEN ? w->y : w->pooled;
    CUDA_TRY(cudaMemcpyAsync(dst, w->hstage, n * sizeof(float), cudaMemcpyHostToDevice, w->stream),
             "copy-in of activations");
    CUDA_TRY(cudaEventRecord(w->ev_w1, w->stream), "event");
    w->w_recorded = true;
    w->mark = w->ev_w1;
    if (buf == HS_ACT_BUF_HIDDEN) {
        const struct ints in = ints_at(w->dints, w->B, w->S);
        CUDA_TRY(
            hs__cuda_unpack(w->y, in.lengths, in.offsets, w->B, w->S, H, w->x, w->xh, w->stream),
            "unpack kernel");
    }
    return HS_STATUS_OK;
}

static hs_status cuda_run_stage(void *ctx, void *ws, const struct hs_stage *st, void *prep,
                                struct hs_error *err)
{
    struct cuda_ws *w = ws;
    struct hs__cuda_prep *p = prep;
    hs_status s = ws_check(ctx, ws, err);
    if (!s) s = need_batch(w, err);
    if (s) return s;
    if (!p || p->kind != st->kind)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: %s: preparation mismatch",
                            st->name);
    if (p->d.hidden != w->d.hidden || p->d.intermediate != w->d.intermediate ||
        p->d.heads != w->d.heads)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cuda: %s: model dimensions differ from the workspace's", st->name);
    if (!w->graphs) {
        w->pending[0] = p;
        w->n_pending = 1;
        s = run_direct(w, err);
        w->n_pending = 0;
        return s;
    }
    if (w->n_pending == PENDING_MAX) {
        s = flush(w, err);
        if (s) return s;
    }
    w->pending[w->n_pending++] = p;
    return HS_STATUS_OK;
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0f;
    }
    return ms;
}

static hs_status cuda_act_read(void *ctx, void *ws, enum hs_act_buf buf, float *dst,
                               struct hs_error *err)
{
    struct cuda_ws *w = ws;
    hs_status s = ws_check(ctx, ws, err);
    if (!s) s = need_batch(w, err);
    if (!s) s = flush(w, err);
    if (s) return s;
    const int H = w->d.hidden;
    size_t n;
    const float *src;
    CUDA_TRY(cudaEventRecord(w->ev_o0, w->stream), "event");
    if (buf == HS_ACT_BUF_HIDDEN) {
        const struct ints in = ints_at(w->dints, w->B, w->S);
        /* packing is compute; it runs after ev_o0 only so that the copy's event pair is tight */
        CUDA_TRY(hs__cuda_pack(w->x, in.lengths, in.offsets, w->B, w->S, H, w->y, w->stream),
                 "pack kernel");
        n = (size_t)w->n_tokens * H;
        src = w->y;
    } else {
        n = (size_t)w->B * H;
        src = w->pooled;
    }
    CUDA_TRY(cudaMemcpyAsync(w->hstage, src, n * sizeof(float), cudaMemcpyDeviceToHost, w->stream),
             "copy-out");
    CUDA_TRY(cudaEventRecord(w->ev_o1, w->stream), "event");
    CUDA_TRY(cudaStreamSynchronize(w->stream), "batch execution");
    memcpy(dst, w->hstage, n * sizeof(float));

    double in_ms = 0.0;
    if (w->in_recorded) in_ms += elapsed_ms(w->ev_in0, w->ev_in1);
    if (w->w_recorded) in_ms += elapsed_ms(w->ev_w0, w->ev_w1);
    const double compute_ms = elapsed_ms(w->mark, w->ev_o0);
    const double out_ms = elapsed_ms(w->ev_o0, w->ev_o1);
    COUNTERS_UPDATE({
        g_counters.batches++;
        g_counters.copy_in_ms += in_ms;
        g_counters.compute_ms += compute_ms;
        g_counters.copy_out_ms += out_ms;
    });
    w->in_recorded = w->w_recorded = false;
    w->mark = w->ev_o1;
    return HS_STATUS_OK;
}

static hs_status cuda_sync(void *ctx, void *ws, struct hs_error *err)
{
    struct cuda_ws *w = ws;
    hs_status s = ws_check(ctx, ws, err);
    if (!s && w->have_batch) s = flush(w, err);
    if (s) return s;
    CUDA_TRY(cudaStreamSynchronize(w->stream), "stream synchronize");
    return HS_STATUS_OK;
}

/* A preparation is device memory and pointers into it, used by no engine state: the engines on one
 * device (a sliced engine's slices) share it; cuda_stage_release needs only the device. */
static uint64_t cuda_prep_key(void *ctx)
{
    const struct cuda_engine *e = ctx;
    return (uint64_t)e->device + 1;
}

static const struct hs_engine_iface cuda_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "cuda",
    .destroy = cuda_destroy,
    .caps = cuda_caps,
    .supports = cuda_supports,
    .stage_prepare = cuda_stage_prepare,
    .stage_release = cuda_stage_release,
    .prep_key = cuda_prep_key,
    .ws_create = cuda_ws_create,
    .ws_destroy = cuda_ws_destroy,
    .batch_begin = cuda_batch_begin,
    .act_write = cuda_act_write,
    .run_stage = cuda_run_stage,
    .act_read = cuda_act_read,
    .sync = cuda_sync,
};

hs_status hs_engine_cuda_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                                struct hs_error *err)
{
    const int dev = opts ? opts->device : 0;
    const int n = hs_engine_cuda_device_count();
    if (n == 0) return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: no CUDA device present");
    if (dev < 0 || dev >= n)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: device %d not present (%d found)",
                            dev, n);
    struct cudaDeviceProp prop;
    cudaError_t ce = cudaSetDevice(dev);
    if (ce == cudaSuccess) ce = cudaGetDeviceProperties(&prop, dev);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: device %d: %s", dev,
                            cudaGetErrorString(ce));
    }
    struct cuda_engine *e = hs_calloc(1, sizeof *e);
    if (!e) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: engine");
    e->device = dev;
    snprintf(e->name, sizeof e->name, "%s", prop.name);
    e->sm_count = prop.multiProcessorCount;
    e->cc_major = prop.major;
    e->cc_minor = prop.minor;
    e->mem_bytes = (int64_t)prop.totalGlobalMem;
    e->graphs = env_flag("HS_CUDA_GRAPHS", true);
    e->exact_gelu = !env_flag("HS_CUDA_FAST_GELU", false);
    char name[32];
    snprintf(name, sizeof name, "cuda%d", dev);
    return hs__engine_wrap(&cuda_iface, e, opts && opts->name ? opts->name : name, out, err);
}
