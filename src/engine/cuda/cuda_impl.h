/* hetserve — CUDA engine internals shared by its files (not a public header).
 *
 * Device layout of a batch (padded, B sequences x S = batch.seq_max rows, R = B * S rows;
 * nq = heads * head_dim, nkv = kv_heads * head_dim):
 *   x    fp32 [R, hidden]       residual stream
 *   xh   fp16 [R, hidden]       the same, rounded, as GEMM input; a pre-norm stage puts its
 *                               normed input there (every stage leaves xh = half(x))
 *   qkv  fp16 [R, nq + 2 nkv]   fused Q | K | V projections
 *   ctx  fp16 [R, nq]           attention output, heads concatenated
 *   y    fp32 [R, hidden]       output projections (+ bias); also the packed interchange buffer
 *   mid  fp16 [R, intermediate] FFN activations
 *   ug   fp16 [R, 2 intermediate] gated FFN: up | gate (gated models only)
 *   pooled fp32 [B, hidden]
 * Row b * S + s is token s of sequence b; rows with s >= lengths[b] are padding: kept finite,
 * never read by pooling or attention, never copied out.
 *
 * Kernel launchers return the launch's cudaError_t (cudaGetLastError), never synchronize, and
 * take only device pointers plus sizes, so they can be captured into CUDA graphs.
 * fp16 buffers are passed as uint16_t so that C callers need no CUDA C++ headers.
 */
#ifndef HS_ENGINE_CUDA_IMPL_H
#define HS_ENGINE_CUDA_IMPL_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest hidden size the row kernels (LayerNorm, embed) handle: one warp per row, 32 values
 * per lane. */
#define HS_CUDA_HIDDEN_MAX 1024

/* Norm kinds of the row kernels (stage.h enum hs_norm_kind): 0 LayerNorm, 1 RMSNorm. */

/* x = word[id] + pos[pos_offset + s] + type[tt], then a LayerNorm when gamma is not NULL (beta
 * may be NULL); xh = half(x). pos and type may be NULL (no such term). Padding rows get zeros.
 * ids/types are [B * S] padded; types may be NULL (all zero). (norm.cu) */
cudaError_t hs__cuda_embed(const int32_t *ids, const int32_t *types, const int32_t *lengths,
                           const uint16_t *word, const uint16_t *pos, const uint16_t *type,
                           int pos_offset, const float *gamma, const float *beta, float eps, int B,
                           int S, int H, float *x, uint16_t *xh, cudaStream_t s);

/* Post-norm residual and the final norm: x = N(x + y) row by row over `rows` rows of H (y NULL:
 * N(x); gamma NULL: no norm); xh = half(x). norm: 0 LayerNorm (beta may be NULL), 1 RMSNorm. */
cudaError_t hs__cuda_add_norm(float *x, const float *y, const float *gamma, const float *beta,
                              int norm, float eps, int rows, int H, uint16_t *xh, cudaStream_t s);

/* Pre-norm input: xh = half(N(x)), x unchanged (gamma must not be NULL). */
cudaError_t hs__cuda_norm_half(const float *x, const float *gamma, const float *beta, int norm,
                               float eps, int rows, int H, uint16_t *xh, cudaStream_t s);

/* Pre-norm residual: x += y; xh = half(x). */
cudaError_t hs__cuda_residual_add(float *x, const float *y, int rows, int H, uint16_t *xh,
                                  cudaStream_t s);

/* qk-norm and rotary positions on the fp16 QKV buffer, in place (rotary.cu). Rows are
 * [rows, stride]; q heads at columns h * D (h < heads), k heads at k_off + h * D (h < kv_heads).
 * First each q head is RMS-normalized with weight q_norm [D] and each k head with k_norm [D]
 * (NULL: not), in fp32 as x * (1 / sqrt(mean(x^2) + eps)) * g; then, when cs is not NULL, the
 * first rot_dim dims of every q and k head rotate NeoX style (halves): for i < rot_dim / 2, with
 * c = cs[p * rot_dim + i], sn = cs[p * rot_dim + rot_dim / 2 + i] and p = row % S (the token's
 * position in its sequence), (a, b) = (x[i], x[i + rot_dim / 2]) becomes
 * (a * c - b * sn, b * c + a * sn). D <= HS_CUDA_HEAD_MAX. */
cudaError_t hs__cuda_qk_rope(uint16_t *qkv, int rows, int S, int stride, int heads, int kv_heads,
                             int D, int k_off, const float *q_norm, const float *k_norm, float eps,
                             int rot_dim, const float *cs, cudaStream_t s);

/* Gated FFN (kernels.cu): ug [rows, 2n] fp16 is up | gate; out[r, j] = act(gate[r, j]) * up[r, j]
 * in fp32, stored fp16. act: the codes of hs__cuda_bias_act_f16. */
cudaError_t hs__cuda_glu(const uint16_t *ug, int rows, int n, int act, uint16_t *out,
                         cudaStream_t s);

/* Epilogue fallbacks for when cuBLASLt offers no fused epilogue:
 * y[r, n] = act(y[r, n] + bias[n]) in fp16 (act: 0 none, 1 GELU erf, 2 GELU tanh, 3 ReLU,
 * 4 SiLU: enum hs_act_fn + 1);
 * and y[r, n] += bias[n] in fp32. */
cudaError_t hs__cuda_bias_act_f16(uint16_t *y, const uint16_t *bias, int rows, int N, int act,
                                  cudaStream_t s);
cudaError_t hs__cuda_bias_f32(float *y, const float *bias, int rows, int N, cudaStream_t s);
/* In-place activation on fp16 (used when the GEMM epilogue applied the bias only). */
cudaError_t hs__cuda_act_f16(uint16_t *y, int64_t n, int act, cudaStream_t s);

/* Largest head size of the attention and qk / rotary kernels. */
#define HS_CUDA_HEAD_MAX 128

/* Where q, k and v sit in a row of the QKV buffer and which keys a query sees (the CPU engine's
 * hs_attn_shape): query head h reads key / value head h / (heads / kv_heads). */
struct hs__cuda_attn_shape {
    int heads, kv_heads, head_dim;
    int stride;       /* halves per row of qkv */
    int k_off, v_off; /* first k and v column (q starts at 0) */
    int ctx_stride;   /* halves per row of ctx (>= heads * head_dim) */
    int causal;       /* a query sees only keys at or before it */
    int window;       /* > 0: only keys within this distance (inclusive) */
    /* NULL or [heads, 2 * rel_span - 1] fp32: the score bias of key j seen from query i at
     * rel[h * (2 * rel_span - 1) + (j - i) + rel_span - 1]; sequences are <= rel_span */
    const float *rel;
    int rel_span;
};

/* Fused masked attention (attention.cu). qkv [B * S, stride] fp16; ctx [B * S, ctx_stride]
 * fp16, heads * head_dim columns written. Keys at s >= lengths[b] are masked, and those outside
 * the causal / window range; padding query rows get zeros. head_dim must be one that
 * hs__cuda_attention_supports (cudaErrorInvalidValue otherwise). scale = 1 / sqrt(head_dim). */
cudaError_t hs__cuda_attention(const uint16_t *qkv, const int32_t *lengths, int B, int S,
                               const struct hs__cuda_attn_shape *a, float scale, uint16_t *ctx,
                               cudaStream_t s);
/* Whether hs__cuda_attention handles head size D (8, 16, 32, 64, 128). */
int hs__cuda_attention_supports(int D);

/* Packed <-> padded conversions of the hidden activation.
 * pack:   packed[offsets[b] + s] = x[b * S + s] for s < lengths[b].
 * unpack: x[b * S + s] = packed[offsets[b] + s] (zeros at padding), xh = half(x). */
cudaError_t hs__cuda_pack(const float *x, const int32_t *lengths, const int32_t *offsets, int B,
                          int S, int H, float *packed, cudaStream_t s);
cudaError_t hs__cuda_unpack(const float *packed, const int32_t *lengths, const int32_t *offsets,
                            int B, int S, int H, float *x, uint16_t *xh, cudaStream_t s);

/* pooled[b] = mean of x[b * S + s] over s < lengths[b] (mode 0), x[b * S] (mode 1), or the last
 * token x[b * S + lengths[b] - 1] (mode 2). */
cudaError_t hs__cuda_pool(const float *x, const int32_t *lengths, int B, int S, int H, int mode,
                          float *pooled, cudaStream_t s);
/* Each row of pooled [B, H] divided by max(L2 norm, 1e-12). */
cudaError_t hs__cuda_l2norm(float *pooled, int B, int H, cudaStream_t s);

#ifdef __cplusplus
}
#endif

/* --- cuBLASLt linear layers (gemm.c) --- */
#ifndef __cplusplus
#include <stdbool.h>

#include "core/status.h"

enum hs__cuda_epi { HS_CUDA_EPI_BIAS, HS_CUDA_EPI_BIAS_GELU };

struct hs__cuda_gemm; /* per-workspace cuBLASLt state: handle, workspace, plan cache */

hs_status hs__cuda_gemm_create(size_t workspace_bytes, struct hs__cuda_gemm **out,
                               struct hs_error *err);
void hs__cuda_gemm_destroy(struct hs__cuda_gemm *g);
/* How BIAS_GELU is done: fused = cuBLASLt's GELU epilogue may be used (its GELU is the tanh
 * form); otherwise, or when no fused algorithm exists, a kernel applies `act` (1 erf, 2 tanh)
 * after a bias-only epilogue. Default: not fused, erf. */
void hs__cuda_gemm_set_gelu(struct hs__cuda_gemm *g, bool fused, int act);

/* Y[T, N] = epi(X[T, K] . W[N, K]^T + bias[N]) with fp16 X and W, fp32 accumulation.
 * out_f32: Y and bias are fp32 (else fp16). Queued on stream s; capturable. */
hs_status hs__cuda_linear(struct hs__cuda_gemm *g, cudaStream_t s, int T, int N, int K,
                          const void *X, const void *W, const void *bias, enum hs__cuda_epi epi,
                          bool out_f32, void *Y, struct hs_error *err);

/* --- stage preparation (prep.c) --- */
#include "engine/stage.h"

#define HS_CUDA_ALIGN 256 /* bytes: every tensor of a device block starts at such an offset */

/* A prepared stage: one device block (mem) and pointers into it; NULL where the stage has no
 * such tensor. Biases of the GEMMs are always present (zeros where the model has none). */
struct hs__cuda_prep {
    enum hs_stage_kind kind;
    int layer; /* attn / ffn: 0-based; -1 otherwise */
    struct hs_encoder_dims d;
    void *mem;
    size_t bytes;
    /* embed (fp16): word [vocab, H]; pos [max_positions, H] or NULL; type [type_vocab, H] or NULL
     */
    uint16_t *word, *pos, *type;
    /* attn: wqkv [nq + 2 nkv, H] and bqkv fp16; wo [H, nq] fp16, bo fp32; q_norm, k_norm fp32
     * [head_dim] or NULL; rel fp32 [heads, 2 rel_span - 1] or NULL */
    uint16_t *wqkv, *bqkv, *wo;
    float *bo, *q_norm, *k_norm, *rel;
    int rel_span;
    /* ffn: w1 [I, H] (gated: [2I, H], up then gate) and b1 fp16; w2 [H, I] fp16, b2 fp32 */
    uint16_t *w1, *b1, *w2;
    float *b2;
    /* the stage's norm (embed, attn, ffn, final_norm) fp32 [H]: gamma NULL = none (an identity),
     * beta NULL = no beta */
    float *ln_g, *ln_b;
};

/* kv_heads, or heads when the model does not set it. */
int hs__cuda_kv_heads(const struct hs_encoder_dims *d);
/* Dimensions the engine's kernels handle (else HS_STATUS_UNSUPPORTED / INVALID_ARGUMENT). */
hs_status hs__cuda_check_dims(const struct hs_encoder_dims *d, struct hs_error *err);
/* Checks stage st and uploads its weights to `device`; *out is freed by the caller (cudaFree of
 * mem, hs_free). */
hs_status hs__cuda_prepare(int device, const struct hs_stage *st, struct hs__cuda_prep **out,
                           struct hs_error *err);
/* cos | sin table of the rotary positions, [positions, rot_dim]: the CPU engine's
 * (hs__cpu_rope_table), so both engines rotate by the same float32 angles. */
void hs__cuda_rope_table(float *cs, int positions, int rot_dim, float theta, float div);
#endif

#endif
