/* hetserve CUDA engine — row kernels of the residual stream: embedding, LayerNorm (beta
 * optional), RMSNorm, post-norm residual + norm, pre-norm input norm and residual add. One warp
 * per row of H <= HS_CUDA_HIDDEN_MAX columns, lane holding columns i * 32 + lane in registers.
 * The arithmetic mirrors the CPU engine's (cpu/kernels.c): LayerNorm as mean, then the variance
 * of the centred values, (x - mean) * (1 / sqrt(var + eps)) * g + b; RMSNorm as
 * g * (x * (1 / sqrt(mean(x^2) + eps))). Contracts in cuda_impl.h. */
#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"

#define PER_LANE  (HS_CUDA_HIDDEN_MAX / 32)
#define ROW_WARPS 4 /* rows (warps) per block */

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Normalizes the warp's row v in place: norm 0 LayerNorm (beta may be NULL), 1 RMSNorm; gamma
 * NULL leaves v as it is. Every lane of the warp must call it (warp reductions). */
static __device__ __forceinline__ void norm_regs(float (&v)[PER_LANE], int H, int lane,
                                                 const float *gamma, const float *beta, int norm,
                                                 float eps)
{
    if (!gamma) return;
    if (norm == 1) {
        float sq = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            if (i * 32 >= H) break;
            if (i * 32 + lane < H) sq += v[i] * v[i];
        }
        const float r = 1.0f / sqrtf(warp_sum(sq) / (float)H + eps);
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            if (i * 32 >= H) break;
            const int c = i * 32 + lane;
            if (c < H) v[i] = gamma[c] * (v[i] * r);
        }
        return;
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        if (i * 32 + lane < H) sum += v[i];
    }
    const float mean = warp_sum(sum) / (float)H;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        if (i * 32 + lane < H) {
            const float d = v[i] - mean;
            sq += d * d;
        }
    }
    const float rstd = 1.0f / sqrtf(warp_sum(sq) / (float)H + eps);
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        const int c = i * 32 + lane;
        if (c < H) v[i] = (v[i] - mean) * rstd * gamma[c] + (beta ? beta[c] : 0.0f);
    }
}

/* Stores the warp's row: x (may be NULL) in fp32, xh in fp16. */
static __device__ __forceinline__ void store_row(const float (&v)[PER_LANE], int H, int lane,
                                                 float *xrow, __half *xhrow)
{
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        const int c = i * 32 + lane;
        if (c < H) {
            if (xrow) xrow[c] = v[i];
            xhrow[c] = __float2half_rn(v[i]);
        }
    }
}

__global__ void __launch_bounds__(ROW_WARPS * 32)
    embed_kernel(const int32_t *ids, const int32_t *types, const int32_t *lengths,
                 const __half *word, const __half *pos, const __half *type, int pos_offset,
                 const float *gamma, const float *beta, float eps, int B, int S, int H, float *x,
                 __half *xh)
{
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (r >= (long long)B * S) return; /* whole warps: r is uniform over a warp */
    const int b = (int)(r / S), s = (int)(r % S);
    float *xrow = x + r * H;
    __half *xhrow = xh + r * H;
    float v[PER_LANE];
    if (s >= lengths[b]) {
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) v[i] = 0.0f;
        store_row(v, H, lane, xrow, xhrow);
        return;
    }
    const __half *w = word + (long long)ids[r] * H;
    const __half *p = pos ? pos + (long long)(pos_offset + s) * H : NULL;
    const __half *t = type ? type + (long long)(types ? types[r] : 0) * H : NULL;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        const int c = i * 32 + lane;
        float e = 0.0f;
        if (c < H) {
            e = __half2float(w[c]);
            if (p) e += __half2float(p[c]);
            if (t) e += __half2float(t[c]);
        }
        v[i] = e;
    }
    norm_regs(v, H, lane, gamma, beta, 0, eps); /* the embedding norm is a LayerNorm */
    store_row(v, H, lane, xrow, xhrow);
}

/* mode 0: x = N(x + y) (y may be NULL), xh = half(x); mode 1: xh = half(N(x)), x kept;
 * mode 2: x += y, xh = half(x) (no norm). */
__global__ void __launch_bounds__(ROW_WARPS * 32)
    row_norm_kernel(float *x, const float *y, const float *gamma, const float *beta, int norm,
                    float eps, int rows, int H, __half *xh, int mode)
{
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    float *xrow = x + r * H;
    const float *yrow = y ? y + r * H : NULL;
    float v[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        if (i * 32 >= H) break;
        const int c = i * 32 + lane;
        v[i] = c < H ? xrow[c] + (yrow ? yrow[c] : 0.0f) : 0.0f;
    }
    if (mode != 2) norm_regs(v, H, lane, gamma, beta, norm, eps);
    store_row(v, H, lane, mode == 1 ? NULL : xrow, xh + r * H);
}

static unsigned row_blocks(long long rows)
{
    return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS);
}

extern "C" cudaError_t hs__cuda_embed(const int32_t *ids, const int32_t *types,
                                      const int32_t *lengths, const uint16_t *word,
                                      const uint16_t *pos, const uint16_t *type, int pos_offset,
                                      const float *gamma, const float *beta, float eps, int B,
                                      int S, int H, float *x, uint16_t *xh, cudaStream_t s)
{
    if (H <= 0 || H > HS_CUDA_HIDDEN_MAX || B <= 0 || S <= 0 || pos_offset < 0)
        return cudaErrorInvalidValue;
    embed_kernel<<<row_blocks((long long)B * S), ROW_WARPS * 32, 0, s>>>(
        ids, types, lengths, (const __half *)word, (const __half *)pos, (const __half *)type,
        pos_offset, gamma, beta, eps, B, S, H, x, (__half *)xh);
    return cudaGetLastError();
}

static cudaError_t row_norm(float *x, const float *y, const float *gamma, const float *beta,
                            int norm, float eps, int rows, int H, uint16_t *xh, int mode,
                            cudaStream_t s)
{
    if (H <= 0 || H > HS_CUDA_HIDDEN_MAX || rows <= 0 || (norm != 0 && norm != 1))
        return cudaErrorInvalidValue;
    row_norm_kernel<<<row_blocks(rows), ROW_WARPS * 32, 0, s>>>(x, y, gamma, beta, norm, eps, rows,
                                                                H, (__half *)xh, mode);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_add_norm(float *x, const float *y, const float *gamma,
                                         const float *beta, int norm, float eps, int rows, int H,
                                         uint16_t *xh, cudaStream_t s)
{
    return row_norm(x, y, gamma, beta, norm, eps, rows, H, xh, 0, s);
}

extern "C" cudaError_t hs__cuda_norm_half(const float *x, const float *gamma, const float *beta,
                                          int norm, float eps, int rows, int H, uint16_t *xh,
                                          cudaStream_t s)
{
    if (!gamma) return cudaErrorInvalidValue;
    return row_norm((float *)x, NULL, gamma, beta, norm, eps, rows, H, xh, 1, s);
}

extern "C" cudaError_t hs__cuda_residual_add(float *x, const float *y, int rows, int H,
                                             uint16_t *xh, cudaStream_t s)
{
    if (!y) return cudaErrorInvalidValue;
    return row_norm(x, y, NULL, NULL, 0, 0.0f, rows, H, xh, 2, s);
}
