/* hetserve — safetensors files.
 *
 * hs_safetensors_open maps a .safetensors file read-only (mmap) and validates it completely
 * before returning: the 8-byte little-endian header length, the JSON header (an object of
 * name -> {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__"
 * object of strings), every dtype known (F32, F16, BF16, I64, I32, I8, U8), every shape
 * non-negative with its element count times the dtype size equal to end - begin, every range
 * inside the data section, and no two ranges overlapping. A truncated or corrupt file gives
 * HS_STATUS_CORRUPT (HS_STATUS_IO when it cannot be read) with a message naming the file and
 * the fault — never a crash.
 *
 * Tensors returned by lookup point into the mapping and live until hs_safetensors_close.
 * A struct hs_safetensors is read-only after open and safe to share between threads.
 */
#ifndef HS_MODEL_SAFETENSORS_H
#define HS_MODEL_SAFETENSORS_H

#include <stddef.h>

#include "core/status.h"
#include "core/tensor.h"

struct hs_safetensors;

hs_status hs_safetensors_open(const char *path, struct hs_safetensors **out, struct hs_error *err);
/* Same checks on a buffer in memory (not copied: it must outlive the handle). */
hs_status hs_safetensors_open_buffer(const void *data, size_t bytes, const char *label,
                                     struct hs_safetensors **out, struct hs_error *err);
void hs_safetensors_close(struct hs_safetensors *st);

/* Number of tensors, and the i-th name (in header order), for listing. */
int hs_safetensors_count(const struct hs_safetensors *st);
const char *hs_safetensors_name(const struct hs_safetensors *st, int i);

/* Finds a tensor by exact name; HS_STATUS_NOT_FOUND (message names it) when absent. */
hs_status hs_safetensors_get(const struct hs_safetensors *st, const char *name,
                             struct hs_tensor *out, struct hs_error *err);

/* Writes n tensors (names[i], tensors[i]: dtype, shape and data) to path as a safetensors file,
 * data in the given order, 8-byte aligned header. HS_STATUS_IO when it cannot be written. */
hs_status hs_safetensors_write(const char *path, const char *const *names,
                               const struct hs_tensor *tensors, int n, struct hs_error *err);

#endif
