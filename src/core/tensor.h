/* hetserve — tensors: a dtype, a shape and a pointer to host memory.
 *
 * A struct hs_tensor never owns its data: whoever filled it (a safetensors mapping, an arena)
 * keeps the memory alive. Shapes are row-major and contiguous.
 */
#ifndef HS_CORE_TENSOR_H
#define HS_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define HS_DTYPE_TABLE(X)                                                                          \
    X(F32, "F32", 4)                                                                               \
    X(F16, "F16", 2)                                                                               \
    X(BF16, "BF16", 2)                                                                             \
    X(I64, "I64", 8)                                                                               \
    X(I32, "I32", 4)                                                                               \
    X(I8, "I8", 1)                                                                                 \
    X(U8, "U8", 1)

enum hs_dtype {
#define HS__DTYPE_ENUM(name, text, size) HS_DTYPE_##name,
    HS_DTYPE_TABLE(HS__DTYPE_ENUM)
#undef HS__DTYPE_ENUM
        HS_DTYPE_COUNT
};

#define HS_TENSOR_MAX_DIMS 4

struct hs_tensor {
    enum hs_dtype dtype;
    int ndim;
    int64_t shape[HS_TENSOR_MAX_DIMS];
    const void *data;
    size_t bytes;
};

/* Bytes per element of a dtype; 0 for an invalid value. */
size_t hs_dtype_size(enum hs_dtype t);
/* Name as safetensors spells it ("F32"); "?" for an invalid value. */
const char *hs_dtype_name(enum hs_dtype t);
/* Parses a safetensors dtype name; returns -1 when unknown. */
int hs_dtype_parse(const char *name);

/* Compute dtypes as configs and the CLI spell them: "f32", "f16", "bf16", "int8" (HS_DTYPE_I8).
 * hs_compute_dtype_parse returns -1 for any other name; hs_compute_dtype_name returns "?" for a
 * dtype that is not a compute dtype. */
int hs_compute_dtype_parse(const char *name);
const char *hs_compute_dtype_name(enum hs_dtype t);

/* Number of elements (product of the shape; 1 for ndim 0). */
int64_t hs_tensor_numel(const struct hs_tensor *t);

float hs_fp16_to_fp32(uint16_t h);
uint16_t hs_fp32_to_fp16(float f);
float hs_bf16_to_fp32(uint16_t h);

/* Converts n elements of a float dtype (F32, F16, BF16) to fp32. */
void hs_to_fp32(enum hs_dtype t, const void *src, float *dst, size_t n);

#endif
