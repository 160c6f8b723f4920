#include "core/tensor.h"

#include <string.h>

size_t hs_dtype_size(enum hs_dtype t)
{
    switch (t) {
#define HS__DTYPE_SIZE(name, text, size)                                                           \
    case HS_DTYPE_##name:                                                                          \
        return size;
        HS_DTYPE_TABLE(HS__DTYPE_SIZE)
#undef HS__DTYPE_SIZE
    default:
        return 0;
    }
}

const char *hs_dtype_name(enum hs_dtype t)
{
    switch (t) {
#define HS__DTYPE_NAME(name, text, size)                                                           \
    case HS_DTYPE_##name:                                                                          \
        return text;
        HS_DTYPE_TABLE(HS__DTYPE_NAME)
#undef HS__DTYPE_NAME
    default:
        return "?";
    }
}

int hs_dtype_parse(const char *name)
{
#define HS__DTYPE_PARSE(n, text, size)                                                             \
    if (strcmp(name, text) == 0) return HS_DTYPE_##n;
    HS_DTYPE_TABLE(HS__DTYPE_PARSE)
#undef HS__DTYPE_PARSE
    return -1;
}

static const struct {
    enum hs_dtype dtype;
    const char *name;
} compute_dtypes[] = {
    {HS_DTYPE_F32, "f32"},
    {HS_DTYPE_F16, "f16"},
    {HS_DTYPE_BF16, "bf16"},
    {HS_DTYPE_I8, "int8"},
};

int hs_compute_dtype_parse(const char *name)
{
    for (size_t i = 0; name && i < sizeof compute_dtypes / sizeof compute_dtypes[0]; i++)
        if (!strcmp(name, compute_dtypes[i].name)) return (int)compute_dtypes[i].dtype;
    return -1;
}

const char *hs_compute_dtype_name(enum hs_dtype t)
{
    for (size_t i = 0; i < sizeof compute_dtypes / sizeof compute_dtypes[0]; i++)
        if (compute_dtypes[i].dtype == t) return compute_dtypes[i].name;
    return "?";
}

int64_t hs_tensor_numel(const struct hs_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

float hs_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t hs_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry into exp: still correct */
    return (uint16_t)(sign | h);
}

float hs_bf16_to_fp32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void hs_to_fp32(enum hs_dtype t, const void *src, float *dst, size_t n)
{
    switch (t) {
    case HS_DTYPE_F32:
        memcpy(dst, src, n * 4);
        break;
    case HS_DTYPE_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = hs_fp16_to_fp32(s[i]);
        break;
    }
    case HS_DTYPE_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = hs_bf16_to_fp32(s[i]);
        break;
    }
    default:
        memset(dst, 0, n * 4);
    }
}
