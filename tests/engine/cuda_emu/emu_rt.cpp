/* hetserve — the CUDA runtime calls the kernel checks make, on host memory (see emu.h). */
#include <string.h>

#include "emu.h"

emu_block *emu_cur;
thread_local uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim, gridDim;

extern "C" {
cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind)
{
    memcpy(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}
}
