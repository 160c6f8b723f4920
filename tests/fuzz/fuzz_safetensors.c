/* Fuzz: the safetensors reader (model/safetensors.c): the 8-byte header length, the JSON header
 * and the tensor table, from memory (hs_safetensors_open_buffer runs the same checks as a mapped
 * file).
 * Checks: a refused buffer says why (HS_STATUS_CORRUPT or UNSUPPORTED, message naming the
 * label); an accepted one lists every tensor, each found by name with a known dtype, a
 * non-negative shape whose element count times the dtype size is its byte count, and its bytes
 * inside the buffer's data section (every byte is read, so a sanitizer sees a bad range);
 * nothing leaks Each input runs once more with allocations failing from the n-th on
 * (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/safetensors.h"

static volatile unsigned sink; /* makes the reads of every tensor byte real */

static int check(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    struct hs_safetensors *st = NULL;
    struct hs_error err = {0};
    hs_status s = hs_safetensors_open_buffer(data, size, "fuzz.safetensors", &st, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(st == NULL);
        FUZZ_CHECK(s == HS_STATUS_CORRUPT || s == HS_STATUS_UNSUPPORTED);
        FUZZ_CHECK(strstr(err.msg, "fuzz.safetensors") != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    const int n = hs_safetensors_count(st);
    FUZZ_CHECK(n >= 0);
    unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        const char *name = hs_safetensors_name(st, i);
        FUZZ_CHECK(name != NULL);
        struct hs_tensor t;
        FUZZ_CHECK(hs_safetensors_get(st, name, &t, &err) == HS_STATUS_OK);
        FUZZ_CHECK(hs_dtype_size(t.dtype) > 0);
        FUZZ_CHECK(t.ndim >= 0 && t.ndim <= HS_TENSOR_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < t.ndim; d++) {
            FUZZ_CHECK(t.shape[d] >= 0);
            numel *= (uint64_t)t.shape[d];
        }
        FUZZ_CHECK(numel * (uint64_t)hs_dtype_size(t.dtype) == t.bytes);
        const uint8_t *p = t.data;
        FUZZ_CHECK(t.bytes == 0 || (p >= data + 8 && p + t.bytes <= data + size));
        for (size_t b = 0; b < t.bytes; b++) sum += p[b];
    }
    FUZZ_CHECK(hs_safetensors_name(st, n) == NULL);
    struct hs_tensor t;
    FUZZ_CHECK(hs_safetensors_get(st, "\x01no such tensor", &t, NULL) == HS_STATUS_NOT_FOUND);
    hs_safetensors_close(st);
    FUZZ_CHECK(hs_alloc_live() == live);
    sink = sum;
    return 0;
}

/* Once more with allocations failing: refused cleanly, nothing leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    struct hs_safetensors *st = NULL;
    fuzz_fail_allocs(data, size);
    hs_status s = hs_safetensors_open_buffer(data, size, "fuzz.safetensors", &st, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_CORRUPT ||
               s == HS_STATUS_UNSUPPORTED);
    FUZZ_CHECK((s == HS_STATUS_OK) == (st != NULL));
    hs_safetensors_close(st);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
