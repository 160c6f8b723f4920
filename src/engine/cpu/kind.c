/* Registry entry of the CPU engine (always built). */
#include "engine/engine.h"

static int cpu_devices(void)
{
    return 1; /* the host; core sets divide it among engines */
}

const struct hs_engine_kind hs__engine_kind_cpu = {
    .name = "cpu",
    .summary = "host CPU cores: oneDNN GEMMs + AVX-512 kernels; f32, int8 and bf16 (AMX / AVX-512 "
               "VNNI, BF16)",
    .dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_I8 | 1u << HS_DTYPE_BF16,
    .native = HS_DTYPE_F32,
    .device_count = cpu_devices,
    .create = hs_engine_cpu_create,
    .stage_bytes = hs_engine_cpu_stage_bytes,
    .ws_bytes = hs_engine_cpu_ws_bytes,
    .mem_available = hs_engine_cpu_mem_available,
    .gemm_gflops = hs_engine_cpu_gemm_gflops,
    .slice_by = HS_SLICE_CORES,
    .lends_cores = true,
};
