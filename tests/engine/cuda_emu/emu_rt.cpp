/* hetserve — the CUDA runtime calls the kernel checks make, on host memory (see emu.h). */
#include <stdio.h>
#include <string.h>

#include "emu.h"

emu_block *emu_cur;
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

#define FIBER_STACK (256 * 1024)

static const std::function<void()> *g_body;
static std::vector<char> g_stacks;

static void fiber_main()
{
    (*g_body)();
    emu_cur->f[emu_cur->cur].wait = 3;
    /* returning resumes uc_link: the scheduler */
}

void emu_run_block(unsigned nt, const std::function<void()> &body)
{
    emu_block b;
    b.f.resize(nt);
    b.xch.assign(nt, 0.0f);
    if (g_stacks.size() < (size_t)nt * FIBER_STACK) g_stacks.resize((size_t)nt * FIBER_STACK);
    g_body = &body;
    emu_cur = &b;
    for (unsigned t = 0; t < nt; t++) {
        getcontext(&b.f[t].ctx);
        b.f[t].ctx.uc_stack.ss_sp = g_stacks.data() + (size_t)t * FIBER_STACK;
        b.f[t].ctx.uc_stack.ss_size = FIBER_STACK;
        b.f[t].ctx.uc_link = &b.sched;
        makecontext(&b.f[t].ctx, fiber_main, 0);
        b.f[t].wait = 0;
    }
    for (;;) {
        bool ran = false, live = false;
        for (unsigned t = 0; t < nt; t++) {
            if (b.f[t].wait == 3) continue;
            live = true;
            if (b.f[t].wait != 0) continue;
            b.cur = t;
            threadIdx = make_uint3(t, 0, 0);
            swapcontext(&b.sched, &b.f[t].ctx);
            ran = true;
        }
        if (!live) break;
        if (ran) continue;
        /* every live fiber waits: release a barrier that every live member has reached */
        bool all_block = true;
        for (unsigned t = 0; t < nt; t++)
            if (b.f[t].wait != 3 && b.f[t].wait != 1) all_block = false;
        if (all_block) {
            for (unsigned t = 0; t < nt; t++)
                if (b.f[t].wait == 1) b.f[t].wait = 0;
            continue;
        }
        bool released = false;
        for (unsigned w = 0; w < nt / 32; w++) {
            bool all = true, any = false;
            for (unsigned t = w * 32; t < w * 32 + 32; t++) {
                if (b.f[t].wait == 2) any = true;
                if (b.f[t].wait != 3 && b.f[t].wait != 2) all = false;
            }
            if (all && any) {
                for (unsigned t = w * 32; t < w * 32 + 32; t++)
                    if (b.f[t].wait == 2) b.f[t].wait = 0;
                released = true;
            }
        }
        if (!released) {
            fprintf(stderr, "cuda_emu: block (%u, %u, %u): barrier deadlock\n", blockIdx.x,
                    blockIdx.y, blockIdx.z);
            abort();
        }
    }
    emu_cur = nullptr;
}

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
