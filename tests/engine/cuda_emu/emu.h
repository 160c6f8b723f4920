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

#include <algorithm>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

using std::max;
using std::min;

#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)

struct emu_block {
    std::barrier<> *bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
    std::vector<float> xch; /* one slot per thread */
};

extern emu_block *emu_cur;
extern thread_local uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim, gridDim;

static inline void __syncthreads()
{
    emu_cur->bar->arrive_and_wait();
}

static inline void __syncwarp(unsigned = 0xffffffffu)
{
    emu_cur->warp_bar[threadIdx.x / 32]->arrive_and_wait();
}

static inline float __shfl_xor_sync(unsigned, float v, int o)
{
    const int t = (int)threadIdx.x, w = t / 32;
    emu_cur->xch[t] = v;
    emu_cur->warp_bar[w]->arrive_and_wait();
    const float r = emu_cur->xch[w * 32 + ((t % 32) ^ o)];
    emu_cur->warp_bar[w]->arrive_and_wait();
    return r;
}

struct emu_cfg {
    dim3 g, b;
    emu_cfg(dim3 g_, dim3 b_, size_t = 0, cudaStream_t = 0) : g(g_), b(b_) {}
};

/* arguments are converted to the kernel's parameter types as a launch does (NULL included) */
template <typename... P, typename... A> void emu_launch(emu_cfg c, void (*f)(P...), A... a)
{
    gridDim = c.g;
    blockDim = c.b;
    const unsigned nt = c.b.x * c.b.y * c.b.z;
    if (c.b.y != 1 || c.b.z != 1 || nt % 32 || nt == 0) abort();
    for (unsigned z = 0; z < c.g.z; z++)
        for (unsigned y = 0; y < c.g.y; y++)
            for (unsigned x = 0; x < c.g.x; x++) {
                emu_block blk;
                std::barrier<> bar(nt);
                blk.bar = &bar;
                for (unsigned w = 0; w < nt / 32; w++)
                    blk.warp_bar.emplace_back(new std::barrier<>(32));
                blk.xch.assign(nt, 0.0f);
                emu_cur = &blk;
                blockIdx = make_uint3(x, y, z);
                std::vector<std::thread> th;
                for (unsigned t = 0; t < nt; t++)
                    th.emplace_back([&, t] {
                        threadIdx = make_uint3(t, 0, 0);
                        f(((P)a)...);
                        bar.arrive_and_drop();
                        blk.warp_bar[t / 32]->arrive_and_drop();
                    });
                for (auto &t : th) t.join();
            }
}

#endif
