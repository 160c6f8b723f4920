/* The OpenVINO engine's whole-graph stages: an ONNX file read by the runtime's ONNX frontend,
 * compiled once for the engine's device, run on f32 tensors of any shape the graph takes
 * (engine.h: graph_load / graph_run, HS_ENGINE_FEAT_GRAPH_ONNX). Internal to the plugin. */
#ifndef HS_ENGINE_OV_ONNX_H
#define HS_ENGINE_OV_ONNX_H

#include <openvino/c/openvino.h>

#include "engine/engine.h"

hs_status ov_onnx_load(ov_core_t *core, const char *device, int threads, const char *path,
                       void **graph, struct hs_error *err);
void ov_onnx_release(void *graph);
hs_status ov_onnx_run(void *graph, const struct hs_graph_tensor *in, int n_in,
                      struct hs_graph_tensor *out, int n_out, struct hs_error *err);

#endif
