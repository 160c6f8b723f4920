/* hetserve — the OpenVINO engine's graph writer: a contiguous range of encoder stages as an
 * OpenVINO IR (v11 XML + weights blob), written in memory from the stages' weights.
 *
 * Tensors are padded: B sequences of S positions (both dynamic, -1, unless static shapes are
 * asked for). Inputs, present only when the range needs them, in this order:
 *   "ids", "type_ids", "pos_ids": i32 [B, S]       (a range that starts with embed)
 *   "hidden": f32 [B, S, hidden]                    (a range that starts with attn, ffn or pool)
 *   "pooled": f32 [B, hidden]                       (a range that is only normalize)
 *   "mask": f32 [B, S], 1 on tokens, 0 on padding   (attention and mean pooling)
 *   "rel_bias": f32 [heads, S, S]                   (MPNet attention: the bias table, per S)
 * One output: hidden [B, S, hidden] when the range ends at embed/attn/ffn, else pooled [B, hidden].
 */
#ifndef HS_ENGINE_OPENVINO_OV_GRAPH_H
#define HS_ENGINE_OPENVINO_OV_GRAPH_H

#include <stddef.h>

#include "core/status.h"
#include "engine/stage.h"

enum ov_input {
    OV_IN_IDS,
    OV_IN_TYPE_IDS,
    OV_IN_POS_IDS,
    OV_IN_HIDDEN,
    OV_IN_POOLED,
    OV_IN_MASK,
    OV_IN_REL_BIAS,
    OV_IN_COUNT
};

struct ov_ir {
    char *xml;
    size_t xml_len;
    unsigned char *bin; /* 64-byte aligned */
    size_t bin_len;
    unsigned inputs;    /* bit (1u << OV_IN_x) for each input the graph has */
    int input_order[8]; /* enum ov_input of each Parameter, in the model's input order */
    int n_inputs;
    int output_is_pooled; /* 0: hidden [B, S, H]; 1: pooled [B, H] */
};

/* Writes the IR of stages[0..n) (contiguous: embed, layer i attn/ffn, ..., pool, normalize; the
 * normalize stage L2-normalizes only where dims->normalize, as the other engines do).
 * dtypes[i]: stage i's compute dtype. The linear layers of an attention or FFN stage in
 * HS_DTYPE_I8 carry int8 weights with one f32 scale per output channel, decompressed in the
 * graph (Const i8 -> Convert -> Multiply: OpenVINO's compressed-weights pattern), their input
 * smoothing (HS_W_SMOOTH, valid: checked at prepare) folded in; every other weight is converted
 * to f32. batch / seq: static dimensions, or -1 for dynamic. Frees with ov_ir_free. */
hs_status ov_ir_build(const struct hs_stage *const *stages, const enum hs_dtype *dtypes, int n,
                      int batch, int seq, struct ov_ir *out, struct hs_error *err);
void ov_ir_free(struct ov_ir *ir);
const char *ov_input_name(enum ov_input i);

#endif
