/* hetserve — the CUDA engine's linear layers (gemm.c's contract, cuda_impl.h) on the host, for
 * the emulated engine (test_cuda_engine_emu): Y[T, N] = epi(X[T, K] . W[N, K]^T + bias[N]) with
 * fp16 X and W, fp32 accumulation, Y fp32 or fp16. The GELU of BIAS_GELU is the form set by
 * hs__cuda_gemm_set_gelu (1 erf, 2 tanh), as gemm.c's kernel fallback applies it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/tensor.h"
#include "engine/cuda/cuda_impl.h"

struct hs__cuda_gemm {
    int act;
};

hs_status hs__cuda_gemm_create(size_t workspace_bytes, struct hs__cuda_gemm **out,
                               struct hs_error *err)
{
    (void)workspace_bytes;
    *out = hs_calloc(1, sizeof **out);
    if (!*out) return hs_error_set(err, HS_STATUS_NO_MEMORY, "gemm_emu");
    (*out)->act = 1;
    return HS_STATUS_OK;
}

void hs__cuda_gemm_destroy(struct hs__cuda_gemm *g)
{
    hs_free(g);
}

void hs__cuda_gemm_set_gelu(struct hs__cuda_gemm *g, bool fused, int act)
{
    (void)fused;
    g->act = act;
}

static float gelu(float v, int act)
{
    if (act == 2)
        return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

hs_status hs__cuda_linear(struct hs__cuda_gemm *g, cudaStream_t s, int T, int N, int K,
                          const void *X, const void *W, const void *bias, enum hs__cuda_epi epi,
                          bool out_f32, void *Y, struct hs_error *err)
{
    (void)s;
    if (T <= 0 || N <= 0 || K <= 0 || !bias)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "gemm_emu: %dx%dx%d", T, N, K);
    float *x = malloc(sizeof(float) * (size_t)T * K), *w = malloc(sizeof(float) * (size_t)N * K);
    if (!x || !w) {
        free(x);
        free(w);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "gemm_emu");
    }
    hs_to_fp32(HS_DTYPE_F16, X, x, (size_t)T * K);
    hs_to_fp32(HS_DTYPE_F16, W, w, (size_t)N * K);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)t * K, *wr = w + (size_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += xr[k] * wr[k];
            acc +=
                out_f32 ? ((const float *)bias)[n] : hs_fp16_to_fp32(((const uint16_t *)bias)[n]);
            if (epi == HS_CUDA_EPI_BIAS_GELU) acc = gelu(acc, g->act);
            if (out_f32)
                ((float *)Y)[(size_t)t * N + n] = acc;
            else
                ((uint16_t *)Y)[(size_t)t * N + n] = hs_fp32_to_fp16(acc);
        }
    free(x);
    free(w);
    return HS_STATUS_OK;
}
