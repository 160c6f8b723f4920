/* hetserve — the CUDA execution model on the CPU, to run the engine's kernels where no GPU is
 * (test_cuda_emu: the checks of cuda_kernel_checks.h against the kernels' own source).
 *
 * The kernel files (the .cu files of src/engine/cuda) are compiled as C++ with this header
 * forced in front, after emu_cu.cmake has rewritten each launch `k<<<grid, block, smem,
 * stream>>>(args)` as `emu_launch(emu_cfg(grid, block, smem, stream), k, args)`. Blocks run one
 * after the other; the threads of a block run as std::threads, so __shared__ is `static` (one block
 * at a time),
 * __syncthreads is a barrier of the block, __syncwarp a barrier of the warp, and
 * __shfl_xor_sync exchanges through a per-thread slot between two warp barriers. A thread that
 * returns leaves the barriers (as exited threads do on the GPU). Only what the engine's kernels
 * use is here: 1-D blocks of whole warps, fp16 through cuda_fp16.h's host implementation. It
 * checks index math, masks, reductions and barriers; not timing, memory coalescing, register
 * or shared-memory limits (ptxas reports those at build time). */
#ifndef HS_TEST_CUDA_EMU_H
#define HS_TEST_CUDA_EMU_H

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>

#include <ucontext.h>

#include <algorithm>
#include <functional>
#include <vector>

using std::max;
using std::min;

#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)

/* The threads of the block being run: fibers (ucontext) on the calling thread, switched at
 * barriers. A fiber waiting at the block barrier (kind 1) or at its warp's (kind 2) is resumed
 * once every live fiber of the block (of the warp) waits there. */
struct emu_fiber {
    ucontext_t ctx;
    int wait; /* 0 runnable, 1 block barrier, 2 warp barrier, 3 done */
};
struct emu_block {
    std::vector<emu_fiber> f;
    std::vector<float> xch; /* one slot per thread (warp shuffles) */
    ucontext_t sched;
    unsigned cur;
};

extern emu_block *emu_cur;
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

static inline void emu_wait(int kind)
{
    emu_block *b = emu_cur;
    const unsigned me = b->cur;
    b->f[me].wait = kind;
    swapcontext(&b->f[me].ctx, &b->sched);
}

static inline void __syncthreads()
{
    emu_wait(1);
}

static inline void __syncwarp(unsigned = 0xffffffffu)
{
    emu_wait(2);
}

static inline float __shfl_xor_sync(unsigned, float v, int o)
{
    const int t = (int)threadIdx.x, w = t / 32;
    emu_cur->xch[t] = v;
    emu_wait(2);
    const float r = emu_cur->xch[w * 32 + ((t % 32) ^ o)];
    emu_wait(2);
    return r;
}

struct emu_cfg {
    dim3 g, b;
    emu_cfg(dim3 g_, dim3 b_, size_t = 0, cudaStream_t = 0) : g(g_), b(b_) {}
};

void emu_run_block(unsigned nt, const std::function<void()> &body);

/* arguments are converted to the kernel's parameter types as a launch does (NULL included) */
template <typename... P, typename... A> void emu_launch(emu_cfg c, void (*f)(P...), A... a)
{
    gridDim = c.g;
    blockDim = c.b;
    const unsigned nt = c.b.x * c.b.y * c.b.z;
    if (c.b.y != 1 || c.b.z != 1 || nt % 32 || nt == 0) abort();
    const std::function<void()> body = [&] { f(((P)a)...); };
    for (unsigned z = 0; z < c.g.z; z++)
        for (unsigned y = 0; y < c.g.y; y++)
            for (unsigned x = 0; x < c.g.x; x++) {
                blockIdx = make_uint3(x, y, z);
                emu_run_block(nt, body);
            }
}

#endif
