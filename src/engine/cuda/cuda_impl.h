/* hetserve — CUDA engine internals shared by its files (not a public header).
 *
 * Device layout of a batch (padded, B sequences x S = batch.seq_max rows, R = B * S rows):
 *   x    fp32 [R, hidden]       residual stream (LayerNorm outputs)
 *   xh   fp16 [R, hidden]       the same, rounded, as GEMM input
 *   qkv  fp16 [R, 3 * hidden]   fused Q | K | V projections
 *   ctx  fp16 [R, hidden]       attention output, heads concatenated
 *   y    fp32 [R, hidden]       output projections (+ bias); also the packed interchange buffer
 *   mid  fp16 [R, intermediate] FFN activations
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

/* x = LN(word[id] + pos[s] + type[tt]); xh = half(x). Padding rows get zeros. ids/types are
 * [B * S] padded; types may be NULL (all zero). */
cudaError_t hs__cuda_embed(const int32_t *ids, const int32_t *types, const int32_t *lengths,
                           const uint16_t *word, const uint16_t *pos, const uint16_t *type,
                           const float *gamma, const float *beta, float eps, int B, int S, int H,
                           float *x, uint16_t *xh, cudaStream_t s);

/* x = LN(x + y) row by row over `rows` rows of H; xh = half(x). */
cudaError_t hs__cuda_add_ln(float *x, const float *y, const float *gamma, const float *beta,
                            float eps, int rows, int H, uint16_t *xh, cudaStream_t s);

/* Epilogue fallbacks for when cuBLASLt offers no fused epilogue:
 * y[r, n] = act(y[r, n] + bias[n]) in fp16 (act: 0 none, 1 GELU erf, 2 GELU tanh, 3 ReLU);
 * and y[r, n] += bias[n] in fp32. */
cudaError_t hs__cuda_bias_act_f16(uint16_t *y, const uint16_t *bias, int rows, int N, int act,
                                  cudaStream_t s);
cudaError_t hs__cuda_bias_f32(float *y, const float *bias, int rows, int N, cudaStream_t s);
/* In-place activation on fp16 (used when the GEMM epilogue applied the bias only). */
cudaError_t hs__cuda_act_f16(uint16_t *y, int64_t n, int act, cudaStream_t s);

/* Fused masked attention. qkv [B * S, 3 * heads * D] fp16; ctx [B * S, heads * D] fp16.
 * Keys at s >= lengths[b] are masked; padding query rows get zeros. D must be 32 or 64
 * (cudaErrorInvalidValue otherwise). scale = 1 / sqrt(D). */
cudaError_t hs__cuda_attention(const uint16_t *qkv, const int32_t *lengths, int B, int S, int heads,
                               int D, float scale, uint16_t *ctx, cudaStream_t s);
/* Whether hs__cuda_attention handles head size D. */
int hs__cuda_attention_supports(int D);

/* Packed <-> padded conversions of the hidden activation.
 * pack:   packed[offsets[b] + s] = x[b * S + s] for s < lengths[b].
 * unpack: x[b * S + s] = packed[offsets[b] + s] (zeros at padding), xh = half(x). */
cudaError_t hs__cuda_pack(const float *x, const int32_t *lengths, const int32_t *offsets, int B,
                          int S, int H, float *packed, cudaStream_t s);
cudaError_t hs__cuda_unpack(const float *packed, const int32_t *lengths, const int32_t *offsets,
                            int B, int S, int H, float *x, uint16_t *xh, cudaStream_t s);

/* pooled[b] = mean of x[b * S + s] over s < lengths[b] (mode 0), or x[b * S] (mode 1). */
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
#endif

#endif
