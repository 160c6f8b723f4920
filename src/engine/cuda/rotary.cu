/* hetserve CUDA engine — qk-norm and rotary positions on the fused QKV buffer, in place.
 *
 * One warp per (token row, head): the head's D <= HS_CUDA_HEAD_MAX values are staged in the
 * warp's slice of shared memory as fp32, RMS-normalized when the head's group (q or k) has a
 * norm weight, rotated NeoX style (two halves of the first rot_dim dims) when a cos | sin table
 * is given, and stored back as fp16. The order (norm, then rotary) and the arithmetic are the
 * CPU engine's (hs__cpu_head_rms, then hs__cpu_rope). Contract in cuda_impl.h. */
#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"

#define ROPE_WARPS 4 /* (row, head) items per block */

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(ROPE_WARPS * 32)
    qk_rope_kernel(__half *qkv, long long items, int S, int stride, int heads, int kv_heads, int D,
                   int k_off, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                   const float *cs)
{
    __shared__ float buf[ROPE_WARPS][HS_CUDA_HEAD_MAX];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long item = (long long)blockIdx.x * ROPE_WARPS + warp;
    if (item >= items) return; /* uniform over the warp; no block barrier below */
    const int nh = heads + kv_heads;
    const long long r = item / nh;
    const int h = (int)(item % nh);
    const bool is_q = h < heads;
    const int col = is_q ? h * D : k_off + (h - heads) * D;
    const float *g = is_q ? q_norm : k_norm;
    __half *p = qkv + r * stride + col;
    float *v = buf[warp];
    for (int c = lane; c < D; c += 32) v[c] = __half2float(p[c]);
    __syncwarp();
    if (g) {
        float sq = 0.0f;
        for (int c = lane; c < D; c += 32) sq += v[c] * v[c];
        const float rr = 1.0f / sqrtf(warp_sum(sq) / (float)D + eps);
        for (int c = lane; c < D; c += 32) v[c] = g[c] * (v[c] * rr);
        __syncwarp();
    }
    if (cs) {
        const int half = rot_dim / 2;
        const float *c = cs + (long long)(r % S) * rot_dim;
        /* lane i owns dims i and i + half: no two lanes touch the same value */
        for (int i = lane; i < half; i += 32) {
            const float a = v[i], b = v[i + half], co = c[i], sn = c[half + i];
            v[i] = a * co - b * sn;
            v[i + half] = b * co + a * sn;
        }
        __syncwarp();
    }
    for (int c = lane; c < D; c += 32) p[c] = __float2half_rn(v[c]);
}

extern "C" cudaError_t hs__cuda_qk_rope(uint16_t *qkv, int rows, int S, int stride, int heads,
                                        int kv_heads, int D, int k_off, const float *q_norm,
                                        const float *k_norm, float eps, int rot_dim,
                                        const float *cs, cudaStream_t s)
{
    if (rows <= 0 || S <= 0 || heads <= 0 || kv_heads <= 0 || D <= 0 || D > HS_CUDA_HEAD_MAX ||
        k_off < heads * D || stride < k_off + kv_heads * D)
        return cudaErrorInvalidValue;
    if (cs && (rot_dim < 2 || rot_dim % 2 || rot_dim > D)) return cudaErrorInvalidValue;
    const long long items = (long long)rows * (heads + kv_heads);
    const long long blocks = (items + ROPE_WARPS - 1) / ROPE_WARPS;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    qk_rope_kernel<<<(unsigned)blocks, ROPE_WARPS * 32, 0, s>>>((__half *)qkv, items, S, stride,
                                                                heads, kv_heads, D, k_off, q_norm,
                                                                k_norm, eps, rot_dim, cs);
    return cudaGetLastError();
}
