/* Registry entry of the OpenVINO engine. The engine itself is a plugin (engine/plugin.h,
 * libhs_engine_openvino.so, built when the OpenVINO runtime is found: scripts/setup fetches it);
 * this entry keeps the kind known to every build, so that configs naming it check anywhere, and
 * the loaded plugin takes its place in the registry. */
#include "engine/engine.h"

const struct hs_engine_kind hs__engine_kind_openvino = {
    .name = "openvino",
    .summary = "OpenVINO runtime (CPU, integrated GPU, NPU) as a plugin: the encoder as an "
               "OpenVINO graph written by hetserve; not loaded",
    .dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_F16 | 1u << HS_DTYPE_I8,
    .native = HS_DTYPE_F32,
};
