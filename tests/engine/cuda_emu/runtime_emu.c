/* hetserve — the CUDA runtime calls of the CUDA engine (engine.c, prep.c) on the host, for the
 * emulated engine (test_cuda_engine_emu): one device of host memory, work done when it is
 * queued (streams synchronous), events without times, no graph capture (the engine then runs
 * its stages directly, as it does when capture fails). */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    memset(p, 0, sizeof *p);
    strcpy(p->name, "emulated device (host)");
    p->multiProcessorCount = 1;
    p->major = 9;
    p->totalGlobalMem = (size_t)1 << 30;
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
    *f = *t = (size_t)1 << 30;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : "emulated error";
}
const char *cudaGetErrorName(cudaError_t e)
{
    return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated";
}
cudaError_t cudaMallocHost(void **p, size_t n)
{
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st)
{
    (void)k, (void)st;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f)
{
    (void)f;
    *s = (cudaStream_t)malloc(1);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = (cudaEvent_t)malloc(1);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e, (void)s;
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    (void)a, (void)b;
    *ms = 0.0f;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    (void)s, (void)m;
    return cudaErrorNotSupported;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    (void)s;
    *g = NULL;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f)
{
    (void)g, (void)f;
    *e = NULL;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    (void)e, (void)s;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    (void)g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    (void)e;
    return cudaSuccess;
}
size_t cublasLtGetVersion(void)
{
    return 0;
}
