/* hetserve CUDA engine — bias and activation epilogues, the gated FFN's product, packed <->
 * padded conversion, pooling, L2 normalization (norms and the embedding: norm.cu).
 * Contracts in cuda_impl.h. */
#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"

#define ROW_WARPS 4 /* rows (warps) per block of the row kernels */

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ void zero_row(int H, int lane, float *xrow, __half *xhrow)
{
    for (int c = lane; c < H; c += 32) {
        xrow[c] = 0.0f;
        if (xhrow) xhrow[c] = __float2half_rn(0.0f);
    }
}

static __device__ __forceinline__ float act_apply(float v, int act)
{
    switch (act) {
    case 1:
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 2: {
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        return 0.5f * v * (1.0f + tanhf(u));
    }
    case 3:
        return v > 0.0f ? v : 0.0f;
    case 4:
        return v / (1.0f + expf(-v));
    default:
        return v;
    }
}

__global__ void bias_act_f16_kernel(__half *y, const __half *bias, long long n, int N, int act)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = __half2float(y[i]) + (bias ? __half2float(bias[i % N]) : 0.0f);
        y[i] = __float2half_rn(act_apply(v, act));
    }
}

__global__ void bias_f32_kernel(float *y, const float *bias, long long n, int N)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] += bias[i % N];
}

/* out[r, j] = act(ug[r, n + j]) * ug[r, j]: gate is the second half of each row of 2n. */
__global__ void glu_kernel(const __half *ug, long long total, int n, int act, __half *out)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / n, j = i % n;
        const __half *row = ug + r * 2 * n;
        const float up = __half2float(row[j]), gate = __half2float(row[n + j]);
        out[i] = __float2half_rn(act_apply(gate, act) * up);
    }
}

__global__ void pack_kernel(const float *x, const int32_t *lengths, const int32_t *offsets, int B,
                            int S, int H, float *packed)
{
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (r >= (long long)B * S) return;
    const int b = (int)(r / S), s = (int)(r % S);
    if (s >= lengths[b]) return;
    const float *src = x + r * H;
    float *dst = packed + ((long long)offsets[b] + s) * H;
    for (int c = lane; c < H; c += 32) dst[c] = src[c];
}

__global__ void unpack_kernel(const float *packed, const int32_t *lengths, const int32_t *offsets,
                              int B, int S, int H, float *x, __half *xh)
{
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (r >= (long long)B * S) return;
    const int b = (int)(r / S), s = (int)(r % S);
    float *xrow = x + r * H;
    __half *xhrow = xh + r * H;
    if (s >= lengths[b]) {
        zero_row(H, lane, xrow, xhrow);
        return;
    }
    const float *src = packed + ((long long)offsets[b] + s) * H;
    for (int c = lane; c < H; c += 32) {
        const float v = src[c];
        xrow[c] = v;
        xhrow[c] = __float2half_rn(v);
    }
}

/* grid (B, ceil(H / 128)): one thread per column, summing down the sequence (coalesced). */
__global__ void pool_kernel(const float *x, const int32_t *lengths, int S, int H, int mode,
                            float *pooled)
{
    const int b = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= H) return;
    const float *base = x + (long long)b * S * H + c;
    const int len = lengths[b];
    if (mode == 1 || mode == 2) {
        pooled[(long long)b * H + c] = base[mode == 1 ? 0 : (long long)(len - 1) * H];
        return;
    }
    float sum = 0.0f;
    for (int s = 0; s < len; s++) sum += base[(long long)s * H];
    pooled[(long long)b * H + c] = sum / (float)len;
}

/* One block of 128 threads per row. */
__global__ void l2norm_kernel(float *pooled, int H)
{
    __shared__ float part[4];
    float *row = pooled + (long long)blockIdx.x * H;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < H; c += blockDim.x) sq += row[c] * row[c];
    sq = warp_sum(sq);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sq;
    __syncthreads();
    const float total = part[0] + part[1] + part[2] + part[3];
    const float inv = 1.0f / fmaxf(sqrtf(total), 1e-12f);
    for (int c = threadIdx.x; c < H; c += blockDim.x) row[c] *= inv;
}

static unsigned row_blocks(long long rows)
{
    return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS);
}

static unsigned flat_blocks(long long n)
{
    long long b = (n + 255) / 256;
    if (b > 65536) b = 65536; /* grid-stride loops cover the rest */
    return (unsigned)(b < 1 ? 1 : b);
}

extern "C" cudaError_t hs__cuda_bias_act_f16(uint16_t *y, const uint16_t *bias, int rows, int N,
                                             int act, cudaStream_t s)
{
    const long long n = (long long)rows * N;
    if (n <= 0) return cudaErrorInvalidValue;
    bias_act_f16_kernel<<<flat_blocks(n), 256, 0, s>>>((__half *)y, (const __half *)bias, n, N,
                                                       act);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_bias_f32(float *y, const float *bias, int rows, int N,
                                         cudaStream_t s)
{
    const long long n = (long long)rows * N;
    if (n <= 0) return cudaErrorInvalidValue;
    bias_f32_kernel<<<flat_blocks(n), 256, 0, s>>>(y, bias, n, N);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_act_f16(uint16_t *y, int64_t n, int act, cudaStream_t s)
{
    if (n <= 0) return cudaErrorInvalidValue;
    bias_act_f16_kernel<<<flat_blocks(n), 256, 0, s>>>((__half *)y, NULL, (long long)n, 1, act);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_glu(const uint16_t *ug, int rows, int n, int act, uint16_t *out,
                                    cudaStream_t s)
{
    const long long total = (long long)rows * n;
    if (total <= 0 || act < 0 || act > 4) return cudaErrorInvalidValue;
    glu_kernel<<<flat_blocks(total), 256, 0, s>>>((const __half *)ug, total, n, act, (__half *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_pack(const float *x, const int32_t *lengths, const int32_t *offsets,
                                     int B, int S, int H, float *packed, cudaStream_t s)
{
    if (B <= 0 || S <= 0 || H <= 0) return cudaErrorInvalidValue;
    pack_kernel<<<row_blocks((long long)B * S), ROW_WARPS * 32, 0, s>>>(x, lengths, offsets, B, S,
                                                                        H, packed);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_unpack(const float *packed, const int32_t *lengths,
                                       const int32_t *offsets, int B, int S, int H, float *x,
                                       uint16_t *xh, cudaStream_t s)
{
    if (B <= 0 || S <= 0 || H <= 0) return cudaErrorInvalidValue;
    unpack_kernel<<<row_blocks((long long)B * S), ROW_WARPS * 32, 0, s>>>(packed, lengths, offsets,
                                                                          B, S, H, x, (__half *)xh);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_pool(const float *x, const int32_t *lengths, int B, int S, int H,
                                     int mode, float *pooled, cudaStream_t s)
{
    if (B <= 0 || S <= 0 || H <= 0 || B > 65535 * 1024) return cudaErrorInvalidValue;
    dim3 grid((unsigned)B, (unsigned)((H + 127) / 128));
    pool_kernel<<<grid, 128, 0, s>>>(x, lengths, S, H, mode, pooled);
    return cudaGetLastError();
}

extern "C" cudaError_t hs__cuda_l2norm(float *pooled, int B, int H, cudaStream_t s)
{
    if (B <= 0 || H <= 0) return cudaErrorInvalidValue;
    l2norm_kernel<<<(unsigned)B, 128, 0, s>>>(pooled, H);
    return cudaGetLastError();
}
