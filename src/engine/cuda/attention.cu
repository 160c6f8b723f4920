/* hetserve CUDA engine — fused masked self-attention for the bucket lengths.
 *
 * One block per (query tile of ATT_Q rows, head, sequence); one thread per query row. The
 * block walks the sequence's valid keys (s < length: the padding mask costs nothing) in tiles
 * of ATT_K keys staged in shared memory as fp32, and each thread keeps its query, its output
 * accumulator and the running max / sum of an online (streaming) softmax in registers, so the
 * S x S score matrix never exists in memory. Scores are computed in the log2 domain (the query
 * is pre-scaled by log2(e) / sqrt(D)) so that exp2f does the exponentials. Shared-memory reads
 * are the same address for every thread of a warp (broadcasts, no bank conflicts).
 *
 * Arithmetic is fp32 on the CUDA cores; the projections around it run on tensor cores through
 * cuBLASLt. A tensor-core (mma) version of this kernel is the next step for long buckets.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"

#define ATT_Q 64 /* queries (threads) per block */
#define ATT_K 32 /* keys per shared-memory tile */

template <int D>
__global__ void __launch_bounds__(ATT_Q)
    attention_kernel(const __half *__restrict__ qkv, const int32_t *__restrict__ lengths, int S,
                     int heads, float qscale, __half *__restrict__ ctx)
{
    __shared__ __align__(16) float Ks[ATT_K][D];
    __shared__ __align__(16) float Vs[ATT_K][D];

    const int b = blockIdx.z, h = blockIdx.y;
    const int H = heads * D;
    const long long ld = 3LL * H;
    const int len = lengths[b];
    const int q0 = blockIdx.x * ATT_Q;
    const int qi = q0 + threadIdx.x;
    __half *out = ctx + ((long long)b * S + qi) * H + (long long)h * D;

    if (q0 >=
        len) { /* the whole tile is padding; uniform over the block, so no barrier is skipped */
        if (qi < S) {
#pragma unroll
            for (int d = 0; d < D; d += 2)
                *reinterpret_cast<__half2 *>(out + d) = __floats2half2_rn(0.0f, 0.0f);
        }
        return;
    }

    const bool active = qi < len;
    float q[D], acc[D];
    if (active) {
        const __half *qrow = qkv + ((long long)b * S + qi) * ld + (long long)h * D;
#pragma unroll
        for (int d = 0; d < D; d += 2) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(qrow + d));
            q[d] = f.x * qscale;
            q[d + 1] = f.y * qscale;
        }
    } else {
#pragma unroll
        for (int d = 0; d < D; d++) q[d] = 0.0f;
    }
#pragma unroll
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const __half *kbase = qkv + (long long)b * S * ld + H + (long long)h * D;
    for (int k0 = 0; k0 < len; k0 += ATT_K) {
        const int nk = min(ATT_K, len - k0);
        __syncthreads(); /* everyone is done with the previous tile */
        for (int e = threadIdx.x * 2; e < nk * D; e += ATT_Q * 2) {
            const int j = e / D, d = e % D;
            const __half *krow = kbase + (long long)(k0 + j) * ld;
            const float2 kf = __half22float2(*reinterpret_cast<const __half2 *>(krow + d));
            const float2 vf = __half22float2(*reinterpret_cast<const __half2 *>(krow + H + d));
            Ks[j][d] = kf.x;
            Ks[j][d + 1] = kf.y;
            Vs[j][d] = vf.x;
            Vs[j][d + 1] = vf.y;
        }
        __syncthreads();
        if (active) {
            float sc[ATT_K];
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < ATT_K; j++) {
                if (j < nk) {
                    const float4 *kr = reinterpret_cast<const float4 *>(Ks[j]);
                    float dot = 0.0f;
#pragma unroll
                    for (int d4 = 0; d4 < D / 4; d4++) {
                        const float4 kv = kr[d4];
                        dot = fmaf(q[4 * d4], kv.x, dot);
                        dot = fmaf(q[4 * d4 + 1], kv.y, dot);
                        dot = fmaf(q[4 * d4 + 2], kv.z, dot);
                        dot = fmaf(q[4 * d4 + 3], kv.w, dot);
                    }
                    sc[j] = dot;
                    tmax = fmaxf(tmax, dot);
                } else {
                    sc[j] = -INFINITY;
                }
            }
            const float mnew = fmaxf(m, tmax);  /* finite: nk >= 1 */
            const float corr = exp2f(m - mnew); /* 0 on the first tile (m = -inf) */
            l *= corr;
#pragma unroll
            for (int d = 0; d < D; d++) acc[d] *= corr;
#pragma unroll
            for (int j = 0; j < ATT_K; j++) {
                if (j < nk) {
                    const float p = exp2f(sc[j] - mnew);
                    l += p;
                    const float4 *vr = reinterpret_cast<const float4 *>(Vs[j]);
#pragma unroll
                    for (int d4 = 0; d4 < D / 4; d4++) {
                        const float4 vv = vr[d4];
                        acc[4 * d4] = fmaf(p, vv.x, acc[4 * d4]);
                        acc[4 * d4 + 1] = fmaf(p, vv.y, acc[4 * d4 + 1]);
                        acc[4 * d4 + 2] = fmaf(p, vv.z, acc[4 * d4 + 2]);
                        acc[4 * d4 + 3] = fmaf(p, vv.w, acc[4 * d4 + 3]);
                    }
                }
            }
            m = mnew;
        }
    }

    if (qi < S) {
        const float inv = active ? 1.0f / l : 0.0f; /* l >= 1: the max key contributes exp2(0) */
#pragma unroll
        for (int d = 0; d < D; d += 2)
            *reinterpret_cast<__half2 *>(out + d) =
                __floats2half2_rn(acc[d] * inv, acc[d + 1] * inv);
    }
}

extern "C" int hs__cuda_attention_supports(int D)
{
    return D == 32 || D == 64;
}

extern "C" cudaError_t hs__cuda_attention(const uint16_t *qkv, const int32_t *lengths, int B, int S,
                                          int heads, int D, float scale, uint16_t *ctx,
                                          cudaStream_t s)
{
    if (B <= 0 || S <= 0 || heads <= 0 || B > 65535 || heads > 65535) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((S + ATT_Q - 1) / ATT_Q), (unsigned)heads, (unsigned)B);
    const float qscale = scale * 1.4426950408889634f; /* log2(e) */
    switch (D) {
    case 32:
        attention_kernel<32>
            <<<grid, ATT_Q, 0, s>>>((const __half *)qkv, lengths, S, heads, qscale, (__half *)ctx);
        break;
    case 64:
        attention_kernel<64>
            <<<grid, ATT_Q, 0, s>>>((const __half *)qkv, lengths, S, heads, qscale, (__half *)ctx);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
