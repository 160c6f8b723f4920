/* hetserve CUDA engine — linear layers on cuBLASLt.
 *
 * Every linear layer is Y[T, N] = X[T, K] . W[N, K]^T (+ bias, + GELU) on row-major buffers.
 * cuBLASLt is column-major, so the same memory is read as D (N x T) = op_T(W as K x N) . X
 * (K x T): transa = T, transb = N, m = N, n = T, k = K, and the bias (length m = N) broadcasts
 * along the columns, i.e. per output feature, as wanted.
 *
 * A plan (descriptors + the heuristic's best algorithm) is made once per shape and kept in a
 * small per-workspace cache, so steady-state calls only set the bias pointer and enqueue.
 * Epilogues degrade gracefully: fused bias+GELU, else fused bias + a GELU kernel, else a plain
 * GEMM + a bias/activation kernel; a shape with no algorithm at all is an error.
 */
#include <stdint.h>
#include <string.h>

#include <cublasLt.h>

#include "core/alloc.h"
#include "engine/cuda/cuda_impl.h"

#define PLAN_CACHE 256

enum post_op { POST_NONE, POST_ACT, POST_BIAS_ACT };

struct plan {
    int T, N, K;
    enum hs__cuda_epi epi;
    bool out_f32;
    bool valid;
    enum post_op post; /* work left for a kernel after the GEMM */
    int act;           /* 0 none, 1 GELU erf, 2 GELU tanh */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct hs__cuda_gemm {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    bool gelu_fused; /* may use cuBLASLt's GELU epilogue */
    int gelu_act;    /* the GELU a kernel applies otherwise: 1 erf, 2 tanh */
    int n_plans, next_evict;
    struct plan plans[PLAN_CACHE];
};

hs_status hs__cuda_gemm_create(size_t workspace_bytes, struct hs__cuda_gemm **out,
                               struct hs_error *err)
{
    struct hs__cuda_gemm *g = hs_calloc(1, sizeof *g);
    if (!g) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: gemm state");
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        hs_free(g);
        return hs_error_set(err, HS_STATUS_ENGINE, "cuda: cublasLtCreate: %s",
                            cublasLtGetStatusString(st));
    }
    cudaError_t ce = cudaMalloc(&g->workspace, workspace_bytes);
    if (ce != cudaSuccess) {
        cublasLtDestroy(g->lt);
        hs_free(g);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "cuda: gemm workspace (%zu bytes): %s",
                            workspace_bytes, cudaGetErrorString(ce));
    }
    g->workspace_bytes = workspace_bytes;
    g->gelu_fused = false;
    g->gelu_act = 1;
    *out = g;
    return HS_STATUS_OK;
}

static void plan_release(struct plan *p)
{
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

void hs__cuda_gemm_destroy(struct hs__cuda_gemm *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_plans; i++) plan_release(&g->plans[i]);
    cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    hs_free(g);
}

void hs__cuda_gemm_set_gelu(struct hs__cuda_gemm *g, bool fused, int act)
{
    g->gelu_fused = fused;
    g->gelu_act = act;
}

/* Builds descriptors for epilogue `epi` and asks the heuristic for an algorithm. Returns
 * CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists for that combination. */
static cublasStatus_t plan_try(struct hs__cuda_gemm *g, struct plan *p, cublasLtEpilogue_t epi,
                               const void *bias)
{
    const cudaDataType_t dt = p->out_f32 ? CUDA_R_32F : CUDA_R_16F;
    cublasStatus_t st;
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;

    st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st) goto out;
    st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    if (st) goto out;
    st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    if (st) goto out;
    st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (st) goto out;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
        if (st) goto out;
    }
    st = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16F, (uint64_t)p->K, (uint64_t)p->N, p->K);
    if (st) goto out;
    st = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16F, (uint64_t)p->K, (uint64_t)p->T, p->K);
    if (st) goto out;
    st = cublasLtMatrixLayoutCreate(&p->d, dt, (uint64_t)p->N, (uint64_t)p->T, p->N);
    if (st) goto out;
    st = cublasLtMatmulPreferenceCreate(&pref);
    if (st) goto out;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &g->workspace_bytes, sizeof g->workspace_bytes);
    if (st) goto out;
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    memset(&res, 0, sizeof res);
    st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1, &res, &n);
    if (st == CUBLAS_STATUS_SUCCESS && (n < 1 || res.state != CUBLAS_STATUS_SUCCESS))
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS) p->algo = res.algo;
out:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) {
        int T = p->T, N = p->N, K = p->K;
        enum hs__cuda_epi e = p->epi;
        bool f32 = p->out_f32;
        plan_release(p);
        p->T = T, p->N = N, p->K = K, p->epi = e, p->out_f32 = f32;
    }
    return st;
}

static hs_status plan_make(struct hs__cuda_gemm *g, struct plan *p, const void *bias,
                           struct hs_error *err)
{
    cublasStatus_t st;
    const bool gelu = p->epi == HS_CUDA_EPI_BIAS_GELU;
    p->act = gelu ? g->gelu_act : 0;
    if (gelu && g->gelu_fused) {
        st = plan_try(g, p, CUBLASLT_EPILOGUE_GELU_BIAS, bias);
        if (st == CUBLAS_STATUS_SUCCESS) {
            p->post = POST_NONE;
            p->valid = true;
            return HS_STATUS_OK;
        }
    }
    st = plan_try(g, p, CUBLASLT_EPILOGUE_BIAS, bias);
    if (st == CUBLAS_STATUS_SUCCESS) {
        p->post = gelu ? POST_ACT : POST_NONE;
        p->valid = true;
        return HS_STATUS_OK;
    }
    st = plan_try(g, p, CUBLASLT_EPILOGUE_DEFAULT, NULL);
    if (st == CUBLAS_STATUS_SUCCESS) {
        p->post = POST_BIAS_ACT;
        p->valid = true;
        return HS_STATUS_OK;
    }
    return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                        "cuda: cuBLASLt has no fp16 algorithm for %dx%dx%d (out %s): %s", p->T,
                        p->N, p->K, p->out_f32 ? "fp32" : "fp16", cublasLtGetStatusString(st));
}

static struct plan *plan_get(struct hs__cuda_gemm *g, int T, int N, int K, enum hs__cuda_epi epi,
                             bool out_f32, const void *bias, struct hs_error *err)
{
    for (int i = 0; i < g->n_plans; i++) {
        struct plan *p = &g->plans[i];
        if (p->T == T && p->N == N && p->K == K && p->epi == epi && p->out_f32 == out_f32) return p;
    }
    struct plan *p;
    if (g->n_plans < PLAN_CACHE) {
        p = &g->plans[g->n_plans++];
    } else { /* full: reuse slots round-robin (descriptors are host objects, safe to drop) */
        p = &g->plans[g->next_evict];
        g->next_evict = (g->next_evict + 1) % PLAN_CACHE;
        plan_release(p);
    }
    memset(p, 0, sizeof *p);
    p->T = T, p->N = N, p->K = K, p->epi = epi, p->out_f32 = out_f32;
    if (plan_make(g, p, bias, err) != HS_STATUS_OK) {
        /* keep the slot, marked invalid, so the failure is not retried on every call */
        return NULL;
    }
    return p;
}

hs_status hs__cuda_linear(struct hs__cuda_gemm *g, cudaStream_t s, int T, int N, int K,
                          const void *X, const void *W, const void *bias, enum hs__cuda_epi epi,
                          bool out_f32, void *Y, struct hs_error *err)
{
    if (T <= 0 || N <= 0 || K <= 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cuda: gemm %dx%dx%d", T, N, K);
    struct plan *p = plan_get(g, T, N, K, epi, out_f32, bias, err);
    if (!p) return err ? err->status : HS_STATUS_UNSUPPORTED;
    if (!p->valid)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "cuda: no cuBLASLt plan for %dx%dx%d", T, N,
                            K);
    cublasStatus_t st;
    if (p->post != POST_BIAS_ACT) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
        if (st)
            return hs_error_set(err, HS_STATUS_ENGINE, "cuda: set bias: %s",
                                cublasLtGetStatusString(st));
    }
    const float alpha = 1.0f, beta = 0.0f;
    st = cublasLtMatmul(g->lt, p->desc, &alpha, W, p->a, X, p->b, &beta, Y, p->d, Y, p->d, &p->algo,
                        g->workspace, g->workspace_bytes, s);
    if (st)
        return hs_error_set(err, HS_STATUS_ENGINE, "cuda: cublasLtMatmul %dx%dx%d: %s", T, N, K,
                            cublasLtGetStatusString(st));
    cudaError_t ce = cudaSuccess;
    if (p->post == POST_ACT) {
        ce = hs__cuda_act_f16((uint16_t *)Y, (int64_t)T * N, p->act, s);
    } else if (p->post == POST_BIAS_ACT) {
        ce = out_f32
                 ? hs__cuda_bias_f32((float *)Y, (const float *)bias, T, N, s)
                 : hs__cuda_bias_act_f16((uint16_t *)Y, (const uint16_t *)bias, T, N, p->act, s);
    }
    if (ce != cudaSuccess)
        return hs_error_set(err, HS_STATUS_ENGINE, "cuda: epilogue kernel: %s",
                            cudaGetErrorString(ce));
    return HS_STATUS_OK;
}
