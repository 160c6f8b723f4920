/* Registry entry of the CUDA engine. Compiled into every build: without nvcc the kind is known
 * (configs naming it still check) but has no implementation. */
#include "engine/engine.h"

const struct hs_engine_kind hs__engine_kind_cuda = {
    .name = "cuda",
    .summary = "NVIDIA GPU: cuBLASLt fp16 GEMMs, fused attention, CUDA graphs",
    .dtypes = 1u << HS_DTYPE_F16,
    .native = HS_DTYPE_F16,
    .slice_by = HS_SLICE_STREAMS,
#ifdef HS_HAVE_CUDA
    .device_count = hs_engine_cuda_device_count,
    .create = hs_engine_cuda_create,
    .mem_available = hs_engine_cuda_mem_available,
#endif
};
