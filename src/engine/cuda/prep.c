/* hetserve CUDA engine — stage preparation: checks a stage's dimensions and weights, converts
 * them once and uploads them into one device block (cuda_impl.h struct hs__cuda_prep).
 *
 * Every block parameter the CPU engine runs is accepted (stage.h HS_STAGE_FEATURES); optional
 * weights are optional here exactly where the CPU engine takes them as absent:
 *   embed: the position table (rotary families), the token-type table, the LayerNorm (or its
 *          beta);
 *   attn:  q / k / v / output biases (uploaded as zeros, so the GEMM epilogue adds nothing),
 *          the block norm's gamma in pre-norm blocks (absent: an identity norm) and its beta,
 *          the qk-norm weights, the relative-position bias table (MPNet);
 *   ffn:   the biases (a gated FFN must have none on its first layer, as on the CPU engine),
 *          the norm's gamma (pre-norm only) and beta;
 *   final_norm: gamma (absent: identity) and beta.
 * Q, K and V are stacked into one [nq + 2 nkv, H] weight; a gated FFN's up and gate into one
 * [2I, H] weight, up first (the CPU engine's order), so one GEMM computes each. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/alloc.h"
#include "engine/cpu/kernels.h"
#include "engine/cuda/cuda_impl.h"

#define NONE ((size_t)-1)

static size_t align_up(size_t n)
{
    return (n + HS_CUDA_ALIGN - 1) & ~(size_t)(HS_CUDA_ALIGN - 1);
}

int hs__cuda_kv_heads(const struct hs_encoder_dims *d)
{
    return d->kv_heads > 0 ? d->kv_heads : d->heads;
}

hs_status hs__cuda_check_dims(const struct hs_encoder_dims *d, struct hs_error *err)
{
    if (d->hidden <= 0 || d->heads <= 0 || d->head_dim <= 0 || d->intermediate <= 0 ||
        d->layers <= 0 || d->kv_heads < 0 || hs__cuda_kv_heads(d) > d->heads ||
        d->heads % hs__cuda_kv_heads(d) != 0 || d->window < 0 || d->global_every < 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: inconsistent dimensions");
    const int nq = d->heads * d->head_dim, nkv = hs__cuda_kv_heads(d) * d->head_dim;
    if (d->hidden > HS_CUDA_HIDDEN_MAX || d->hidden % 8 != 0 || d->intermediate % 8 != 0 ||
        nq % 8 != 0 || nkv % 8 != 0)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "cuda: hidden %d / intermediate %d / attention widths %d, %d not "
                            "supported (hidden <= %d, all multiples of 8)",
                            d->hidden, d->intermediate, nq, nkv, HS_CUDA_HIDDEN_MAX);
    if (!hs__cuda_attention_supports(d->head_dim))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "cuda: head size %d not supported (8, 16, 32, 64 or 128)", d->head_dim);
    if ((int)d->act < 0 || d->act > HS_ACT_SILU)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: activation %d", (int)d->act);
    if ((d->norm != HS_NORM_LAYER && d->norm != HS_NORM_RMS) ||
        (d->ffn != HS_FFN_PLAIN && d->ffn != HS_FFN_GATED) ||
        (d->pos != HS_POS_ABSOLUTE && d->pos != HS_POS_REL_BUCKET && d->pos != HS_POS_ROTARY))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: block kind out of range");
    if (d->pos == HS_POS_ROTARY &&
        (d->rotary_dim < 2 || d->rotary_dim % 2 || d->rotary_dim > d->head_dim))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: rotary dimension %d",
                            d->rotary_dim);
    return HS_STATUS_OK;
}

/* A weight of the stage: required (must be present) or optional; either way of numel elements
 * in a dtype the upload converts. */
static hs_status check_weight(const struct hs_stage *st, enum hs_weight_role r, int64_t numel,
                              bool required, struct hs_error *err)
{
    const struct hs_tensor *t = &st->w[r];
    if (!t->data) {
        if (!required) return HS_STATUS_OK;
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: %s: weight role %d missing",
                            st->name, (int)r);
    }
    if (t->dtype != HS_DTYPE_F32 && t->dtype != HS_DTYPE_F16 && t->dtype != HS_DTYPE_BF16)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: %s: weight role %d has dtype %s",
                            st->name, (int)r, hs_dtype_name(t->dtype));
    if (hs_tensor_numel(t) != numel)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cuda: %s: weight role %d has %lld elements, expected %lld", st->name,
                            (int)r, (long long)hs_tensor_numel(t), (long long)numel);
    return HS_STATUS_OK;
}

/* Host-side layout of a prep's device block: one staging buffer mirrors it byte for byte and is
 * copied up in one cudaMemcpy. */
struct upload {
    unsigned char *host;
    size_t used, cap;
    float *tmp; /* conversion buffer of tmp_n floats */
    int64_t tmp_n;
    bool overflow;
};

static void *upload_take(struct upload *u, size_t bytes, size_t *offset)
{
    if (u->used + align_up(bytes) > u->cap) {
        u->overflow = true;
        *offset = NONE;
        return NULL;
    }
    *offset = u->used;
    void *p = u->host + u->used;
    u->used += align_up(bytes);
    return p;
}

/* n tensors of ns[k] elements, converted to fp16 one after the other with no gap; an absent
 * tensor (data NULL) is zeros. */
static size_t up_f16_cat(struct upload *u, const struct hs_tensor *const *ts, const int64_t *ns,
                         int n)
{
    int64_t total = 0;
    for (int k = 0; k < n; k++) total += ns[k];
    size_t off;
    uint16_t *dst = upload_take(u, (size_t)total * 2, &off);
    if (!dst) return NONE;
    for (int k = 0; k < n; k++) {
        if (ns[k] > u->tmp_n) {
            u->overflow = true;
            return NONE;
        }
        if (ts[k]->data)
            hs_to_fp32(ts[k]->dtype, ts[k]->data, u->tmp, (size_t)ns[k]);
        else
            memset(u->tmp, 0, sizeof(float) * (size_t)ns[k]);
        for (int64_t i = 0; i < ns[k]; i++) dst[i] = hs_fp32_to_fp16(u->tmp[i]);
        dst += ns[k];
    }
    return off;
}

static size_t up_f16(struct upload *u, const struct hs_tensor *t, int64_t n)
{
    return up_f16_cat(u, &t, &n, 1);
}

/* fp32; absent: zeros when `zeros`, else nothing (NONE: a NULL device pointer) */
static size_t up_f32(struct upload *u, const struct hs_tensor *t, int64_t n, bool zeros)
{
    if (!t->data && !zeros) return NONE;
    size_t off;
    float *dst = upload_take(u, (size_t)n * 4, &off);
    if (!dst) return NONE;
    if (t->data)
        hs_to_fp32(t->dtype, t->data, dst, (size_t)n);
    else
        memset(dst, 0, sizeof(float) * (size_t)n);
    return off;
}

/* MPNet: [buckets, heads] expanded to a per-head row over every relative position a sequence
 * can have (the CPU engine's table, cpu_stage_prepare): rel[h * (2 span - 1) + k] is the bias
 * of relative position k - (span - 1). */
static size_t up_rel(struct upload *u, const struct hs_stage *st, int span)
{
    const struct hs_encoder_dims *d = st->dims;
    const int64_t row = 2 * (int64_t)span - 1;
    size_t off;
    float *dst = upload_take(u, sizeof(float) * (size_t)(row * d->heads), &off);
    if (!dst || (int64_t)d->rel_buckets * d->heads > u->tmp_n) {
        u->overflow = true;
        return NONE;
    }
    const struct hs_tensor *rb = &st->w[HS_W_REL_BIAS];
    hs_to_fp32(rb->dtype, rb->data, u->tmp, (size_t)d->rel_buckets * (size_t)d->heads);
    for (int64_t k = 0; k < row; k++) {
        const int b = hs_rel_pos_bucket((int)(k - (span - 1)), d->rel_buckets, d->rel_max_distance);
        for (int h = 0; h < d->heads; h++) dst[h * row + k] = u->tmp[b * d->heads + h];
    }
    return off;
}

static hs_status check_stage(const struct hs_stage *st, struct hs_error *err)
{
    const struct hs_encoder_dims *d = st->dims;
    const int64_t H = d->hidden, I = d->intermediate, D = d->head_dim;
    const int64_t nq = (int64_t)d->heads * D, nkv = (int64_t)hs__cuda_kv_heads(d) * D;
    hs_status s = HS_STATUS_OK;
    switch (st->kind) {
    case HS_STAGE_EMBED:
        if (d->vocab <= 0 || d->max_positions <= 0 || d->type_vocab <= 0 || d->pos_offset < 0 ||
            d->pos_offset >= d->max_positions)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: embed: bad vocab sizes");
        if ((s = check_weight(st, HS_W_WORD_EMB, (int64_t)d->vocab * H, true, err)) ||
            (s = check_weight(st, HS_W_POS_EMB, (int64_t)d->max_positions * H, false, err)) ||
            (s = check_weight(st, HS_W_TYPE_EMB, (int64_t)d->type_vocab * H, false, err)) ||
            (s = check_weight(st, HS_W_EMB_LN_G, H, false, err)) ||
            (s = check_weight(st, HS_W_EMB_LN_B, H, false, err)))
            return s;
        return HS_STATUS_OK;
    case HS_STAGE_ATTN:
        if ((s = check_weight(st, HS_W_Q, nq * H, true, err)) ||
            (s = check_weight(st, HS_W_Q_B, nq, false, err)) ||
            (s = check_weight(st, HS_W_K, nkv * H, true, err)) ||
            (s = check_weight(st, HS_W_K_B, nkv, false, err)) ||
            (s = check_weight(st, HS_W_V, nkv * H, true, err)) ||
            (s = check_weight(st, HS_W_V_B, nkv, false, err)) ||
            (s = check_weight(st, HS_W_ATTN_OUT, H * nq, true, err)) ||
            (s = check_weight(st, HS_W_ATTN_OUT_B, H, false, err)) ||
            (s = check_weight(st, HS_W_ATTN_LN_G, H, !d->norm_pre, err)) ||
            (s = check_weight(st, HS_W_ATTN_LN_B, H, false, err)) ||
            (s = check_weight(st, HS_W_Q_NORM, D, false, err)) ||
            (s = check_weight(st, HS_W_K_NORM, D, false, err)) ||
            (s = check_weight(st, HS_W_REL_BIAS, (int64_t)d->rel_buckets * d->heads, false, err)))
            return s;
        if (st->w[HS_W_REL_BIAS].data &&
            (d->rel_buckets < 4 || d->max_positions - d->pos_offset < 1))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "cuda: %s: relative bias of %d buckets", st->name, d->rel_buckets);
        return HS_STATUS_OK;
    case HS_STAGE_FFN:
        if ((s = check_weight(st, HS_W_FFN_IN, I * H, true, err)) ||
            (s = check_weight(st, HS_W_FFN_IN_B, I, false, err)) ||
            (s = check_weight(st, HS_W_FFN_GATE, I * H, d->ffn == HS_FFN_GATED, err)) ||
            (s = check_weight(st, HS_W_FFN_OUT, H * I, true, err)) ||
            (s = check_weight(st, HS_W_FFN_OUT_B, H, false, err)) ||
            (s = check_weight(st, HS_W_FFN_LN_G, H, !d->norm_pre, err)) ||
            (s = check_weight(st, HS_W_FFN_LN_B, H, false, err)))
            return s;
        if (d->ffn == HS_FFN_GATED && st->w[HS_W_FFN_IN_B].data)
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "cuda: stage %s: a gated FFN needs up and gate weights, without "
                                "biases",
                                st->name);
        return HS_STATUS_OK;
    case HS_STAGE_FINAL_NORM:
        if ((s = check_weight(st, HS_W_FINAL_LN_G, H, false, err)) ||
            (s = check_weight(st, HS_W_FINAL_LN_B, H, false, err)))
            return s;
        return HS_STATUS_OK;
    case HS_STAGE_POOL:
    case HS_STAGE_NORMALIZE:
        return HS_STATUS_OK;
    default:
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: stage kind %d", (int)st->kind);
    }
}

static void *at(void *mem, size_t off)
{
    return off == NONE ? NULL : (unsigned char *)mem + off;
}

hs_status hs__cuda_prepare(int device, const struct hs_stage *st, struct hs__cuda_prep **out,
                           struct hs_error *err)
{
    const struct hs_encoder_dims *d = st->dims;
    hs_status s = hs__cuda_check_dims(d, err);
    if (!s) s = check_stage(st, err); /* shapes first: a bad model fails before any allocation */
    if (s) return s;
    const int64_t H = d->hidden, I = d->intermediate, D = d->head_dim;
    const int64_t nq = (int64_t)d->heads * D, nkv = (int64_t)hs__cuda_kv_heads(d) * D;
    const int span = d->max_positions - d->pos_offset;

    struct hs__cuda_prep *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: prep");
    p->kind = st->kind;
    p->layer = st->layer;
    p->d = *d;
    if (st->kind == HS_STAGE_POOL || st->kind == HS_STAGE_NORMALIZE) {
        *out = p;
        return HS_STATUS_OK;
    }

    /* an upper bound of the block: every tensor of the stage as fp32, the zeros of absent
     * biases, the expanded relative-bias table, each aligned */
    size_t cap = 0;
    int64_t max_n = nq + 2 * nkv;
    if (2 * I > max_n) max_n = 2 * I;
    for (int r = 0; r < HS_W_COUNT; r++)
        if (st->w[r].data) {
            const int64_t n = hs_tensor_numel(&st->w[r]);
            cap += align_up((size_t)n * 4);
            if (n > max_n) max_n = n;
        }
    cap += 8 * align_up((size_t)(nq + 2 * nkv + 2 * I + 2 * H) * 4);
    if (st->w[HS_W_REL_BIAS].data) cap += align_up((size_t)(2 * (int64_t)span - 1) * d->heads * 4);
    struct upload u = {.host = hs_malloc(cap), .cap = cap, .tmp_n = max_n};
    u.tmp = hs_malloc((size_t)max_n * sizeof(float));
    if (!u.host || !u.tmp) {
        hs_free(u.host);
        hs_free(u.tmp);
        hs_free(p);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: %s: staging %zu bytes", st->name, cap);
    }
    size_t o_word = NONE, o_pos = NONE, o_type = NONE, o_g = NONE, o_b = NONE, o_wqkv = NONE,
           o_bqkv = NONE, o_wo = NONE, o_bo = NONE, o_w1 = NONE, o_b1 = NONE, o_w2 = NONE,
           o_b2 = NONE, o_qn = NONE, o_kn = NONE, o_rel = NONE;
    switch (st->kind) {
    case HS_STAGE_EMBED:
        o_word = up_f16(&u, &st->w[HS_W_WORD_EMB], (int64_t)d->vocab * H);
        if (st->w[HS_W_POS_EMB].data)
            o_pos = up_f16(&u, &st->w[HS_W_POS_EMB], (int64_t)d->max_positions * H);
        if (st->w[HS_W_TYPE_EMB].data)
            o_type = up_f16(&u, &st->w[HS_W_TYPE_EMB], (int64_t)d->type_vocab * H);
        o_g = up_f32(&u, &st->w[HS_W_EMB_LN_G], H, false);
        o_b = up_f32(&u, &st->w[HS_W_EMB_LN_B], H, false);
        break;
    case HS_STAGE_ATTN: {
        /* [Wq; Wk; Wv] rows stacked: one GEMM gives Q | K | V per token */
        const struct hs_tensor *w3[3] = {&st->w[HS_W_Q], &st->w[HS_W_K], &st->w[HS_W_V]};
        const struct hs_tensor *b3[3] = {&st->w[HS_W_Q_B], &st->w[HS_W_K_B], &st->w[HS_W_V_B]};
        const int64_t wn[3] = {nq * H, nkv * H, nkv * H}, bn[3] = {nq, nkv, nkv};
        o_wqkv = up_f16_cat(&u, w3, wn, 3);
        o_bqkv = up_f16_cat(&u, b3, bn, 3);
        o_wo = up_f16(&u, &st->w[HS_W_ATTN_OUT], H * nq);
        o_bo = up_f32(&u, &st->w[HS_W_ATTN_OUT_B], H, true);
        o_g = up_f32(&u, &st->w[HS_W_ATTN_LN_G], H, false);
        o_b = up_f32(&u, &st->w[HS_W_ATTN_LN_B], H, false);
        o_qn = up_f32(&u, &st->w[HS_W_Q_NORM], D, false);
        o_kn = up_f32(&u, &st->w[HS_W_K_NORM], D, false);
        if (st->w[HS_W_REL_BIAS].data) {
            o_rel = up_rel(&u, st, span);
            p->rel_span = span;
        }
        break;
    }
    case HS_STAGE_FFN: {
        if (d->ffn == HS_FFN_GATED) { /* up then gate, as the CPU engine stacks them */
            const struct hs_tensor *w2[2] = {&st->w[HS_W_FFN_IN], &st->w[HS_W_FFN_GATE]};
            const int64_t wn[2] = {I * H, I * H};
            const struct hs_tensor none = {0};
            const struct hs_tensor *b2[1] = {&none};
            const int64_t bn[1] = {2 * I};
            o_w1 = up_f16_cat(&u, w2, wn, 2);
            o_b1 = up_f16_cat(&u, b2, bn, 1);
        } else {
            o_w1 = up_f16(&u, &st->w[HS_W_FFN_IN], I * H);
            o_b1 = up_f16(&u, &st->w[HS_W_FFN_IN_B], I);
        }
        o_w2 = up_f16(&u, &st->w[HS_W_FFN_OUT], H * I);
        o_b2 = up_f32(&u, &st->w[HS_W_FFN_OUT_B], H, true);
        o_g = up_f32(&u, &st->w[HS_W_FFN_LN_G], H, false);
        o_b = up_f32(&u, &st->w[HS_W_FFN_LN_B], H, false);
        break;
    }
    case HS_STAGE_FINAL_NORM:
        o_g = up_f32(&u, &st->w[HS_W_FINAL_LN_G], H, false);
        o_b = up_f32(&u, &st->w[HS_W_FINAL_LN_B], H, false);
        break;
    default:
        break;
    }
    hs_free(u.tmp);
    if (u.overflow) { /* the bound above is wrong: a bug, never a model's fault */
        hs_free(u.host);
        hs_free(p);
        return hs_error_set(err, HS_STATUS_INTERNAL, "cuda: %s: staging bound exceeded", st->name);
    }
    if (u.used == 0) { /* a final norm without weights: an identity */
        hs_free(u.host);
        *out = p;
        return HS_STATUS_OK;
    }
    cudaError_t ce = cudaSetDevice(device);
    if (ce == cudaSuccess) ce = cudaMalloc(&p->mem, u.used);
    if (ce == cudaSuccess) ce = cudaMemcpy(p->mem, u.host, u.used, cudaMemcpyHostToDevice);
    hs_free(u.host);
    if (ce != cudaSuccess) {
        if (p->mem) cudaFree(p->mem);
        (void)cudaGetLastError();
        hs_free(p);
        return hs_error_set(
            err, ce == cudaErrorMemoryAllocation ? HS_STATUS_NO_MEMORY : HS_STATUS_ENGINE,
            "cuda: upload of stage weights: %s", cudaGetErrorString(ce));
    }
    p->bytes = u.used;
    p->word = at(p->mem, o_word);
    p->pos = at(p->mem, o_pos);
    p->type = at(p->mem, o_type);
    p->wqkv = at(p->mem, o_wqkv);
    p->bqkv = at(p->mem, o_bqkv);
    p->wo = at(p->mem, o_wo);
    p->bo = at(p->mem, o_bo);
    p->w1 = at(p->mem, o_w1);
    p->b1 = at(p->mem, o_b1);
    p->w2 = at(p->mem, o_w2);
    p->b2 = at(p->mem, o_b2);
    p->ln_g = at(p->mem, o_g);
    p->ln_b = at(p->mem, o_b);
    p->q_norm = at(p->mem, o_qn);
    p->k_norm = at(p->mem, o_kn);
    p->rel = at(p->mem, o_rel);
    *out = p;
    return HS_STATUS_OK;
}

void hs__cuda_rope_table(float *cs, int positions, int rot_dim, float theta, float div)
{
    /* the CPU engine's table, computed by the same function, so both rotate by the same angles */
    hs__cpu_rope_table(cs, positions, rot_dim, theta, div);
}
