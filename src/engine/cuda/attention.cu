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
 * Masks beyond padding: a query's keys are [lo, hi) = every valid key, those at or before it
 * (causal), or those within `window` of it (local layers); the block walks the union of its
 * queries' ranges and each thread skips keys outside its own (a tile with none of its keys leaves
 * its softmax state as it was). Grouped-query: query head h reads key / value head
 * h / (heads / kv_heads). MPNet's relative-position bias (fp32 table, cuda_impl.h) is added to
 * each score, times log2(e) since scores are in the log2 domain.
 *
 * Arithmetic is fp32 on the CUDA cores; the projections around it run on tensor cores through
 * cuBLASLt. A tensor-core (mma) version of this kernel is the next step for long buckets.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"

#define ATT_Q 64 /* queries (threads) per block */
#define ATT_K 32 /* keys per shared-memory tile */

#define LOG2E 1.4426950408889634f

template <int D>
__global__ void __launch_bounds__(ATT_Q)
    attention_kernel(const __half *__restrict__ qkv, const int32_t *__restrict__ lengths, int S,
                     struct hs__cuda_attn_shape a, float qscale, __half *__restrict__ ctx)
{
    /* 2 * ATT_K * D floats: 32 KiB at D = 128, within the 48 KiB of static shared memory */
    __shared__ __align__(16) float Ks[ATT_K][D];
    __shared__ __align__(16) float Vs[ATT_K][D];

    const int b = blockIdx.z, h = blockIdx.y;
    const int kvh = h / (a.heads / a.kv_heads);
    const long long ld = a.stride;
    const int len = lengths[b];
    const int q0 = blockIdx.x * ATT_Q;
    const int qi = q0 + threadIdx.x;
    __half *out = ctx + ((long long)b * S + qi) * a.ctx_stride + (long long)h * D;

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
    /* this query's keys [lo, hi), and the block's: the union over its valid queries
     * q0 .. qlast (uniform over the block) */
    const int qlast = min(q0 + ATT_Q, len) - 1;
    int lo = 0, hi = len, blo = 0, bhi = len;
    if (a.causal) {
        hi = min(len, qi + 1);
        bhi = qlast + 1;
    }
    if (a.window > 0) {
        lo = max(0, qi - a.window);
        hi = min(hi, qi + a.window + 1);
        blo = max(0, q0 - a.window);
        bhi = min(bhi, qlast + a.window + 1);
    }
    const long long rel_row = 2LL * a.rel_span - 1;
    const float *rel = a.rel ? a.rel + (long long)h * rel_row + a.rel_span - 1 - qi : NULL;

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

    const __half *kbase = qkv + (long long)b * S * ld + a.k_off + (long long)kvh * D;
    const __half *vbase = qkv + (long long)b * S * ld + a.v_off + (long long)kvh * D;
    for (int k0 = blo; k0 < bhi; k0 += ATT_K) {
        const int nk = min(ATT_K, bhi - k0);
        __syncthreads(); /* everyone is done with the previous tile */
        for (int e = threadIdx.x * 2; e < nk * D; e += ATT_Q * 2) {
            const int j = e / D, d = e % D;
            const long long row = (long long)(k0 + j) * ld;
            const float2 kf = __half22float2(*reinterpret_cast<const __half2 *>(kbase + row + d));
            const float2 vf = __half22float2(*reinterpret_cast<const __half2 *>(vbase + row + d));
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
                const int kj = k0 + j;
                if (j < nk && kj >= lo && kj < hi) {
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
                    if (rel)
                        dot = fmaf(rel[kj], LOG2E, dot); /* bias of relative position kj - qi */
                    sc[j] = dot;
                    tmax = fmaxf(tmax, dot);
                } else {
                    sc[j] = -INFINITY;
                }
            }
            if (tmax > -INFINITY) { /* some of this query's keys are in the tile */
                const float mnew = fmaxf(m, tmax);
                const float corr = exp2f(m - mnew); /* 0 on the first such tile (m = -inf) */
                l *= corr;
#pragma unroll
                for (int d = 0; d < D; d++) acc[d] *= corr;
#pragma unroll
                for (int j = 0; j < ATT_K; j++) {
                    if (sc[j] > -INFINITY) {
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
    }

    if (qi < S) {
        /* l >= 1 for an active query: its own key is in [lo, hi) and the max contributes 1 */
        const float inv = active ? 1.0f / l : 0.0f;
#pragma unroll
        for (int d = 0; d < D; d += 2)
            *reinterpret_cast<__half2 *>(out + d) =
                __floats2half2_rn(acc[d] * inv, acc[d + 1] * inv);
    }
}

extern "C" int hs__cuda_attention_supports(int D)
{
    return D == 8 || D == 16 || D == 32 || D == 64 || D == 128;
}

template <int D>
static void launch(dim3 grid, cudaStream_t s, const uint16_t *qkv, const int32_t *lengths, int S,
                   const struct hs__cuda_attn_shape *a, float qscale, uint16_t *ctx)
{
    attention_kernel<D>
        <<<grid, ATT_Q, 0, s>>>((const __half *)qkv, lengths, S, *a, qscale, (__half *)ctx);
}

extern "C" cudaError_t hs__cuda_attention(const uint16_t *qkv, const int32_t *lengths, int B, int S,
                                          const struct hs__cuda_attn_shape *a, float scale,
                                          uint16_t *ctx, cudaStream_t s)
{
    const int D = a->head_dim;
    if (B <= 0 || S <= 0 || a->heads <= 0 || B > 65535 || a->heads > 65535 || a->kv_heads <= 0 ||
        a->heads % a->kv_heads || a->window < 0 || (a->rel && a->rel_span < 1))
        return cudaErrorInvalidValue;
    /* half2 loads and stores: every row and head offset even */
    if (a->stride % 2 || a->k_off % 2 || a->v_off % 2 || a->ctx_stride % 2 ||
        a->k_off < a->heads * D || a->v_off < a->k_off + a->kv_heads * D ||
        a->stride < a->v_off + a->kv_heads * D || a->ctx_stride < a->heads * D)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((S + ATT_Q - 1) / ATT_Q), (unsigned)a->heads, (unsigned)B);
    const float qscale = scale * LOG2E;
    switch (D) {
    case 8:
        launch<8>(grid, s, qkv, lengths, S, a, qscale, ctx);
        break;
    case 16:
        launch<16>(grid, s, qkv, lengths, S, a, qscale, ctx);
        break;
    case 32:
        launch<32>(grid, s, qkv, lengths, S, a, qscale, ctx);
        break;
    case 64:
        launch<64>(grid, s, qkv, lengths, S, a, qscale, ctx);
        break;
    case 128:
        launch<128>(grid, s, qkv, lengths, S, a, qscale, ctx);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
