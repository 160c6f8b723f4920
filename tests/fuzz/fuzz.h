/* hetserve — shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput over the real code in hetserve_lib. With HS_FUZZ=ON
 * (clang) it is a libFuzzer binary (`make fuzz`); in the normal build it is linked with replay.c
 * into a plain program that ctest runs as fuzz_<name>: its seed corpus, then deterministic
 * mutations of the seeds. FUZZ_CHECK states what must hold for every input; a failure prints the
 * condition and aborts, which both drivers report as a finding.
 */
#ifndef HS_FUZZ_H
#define HS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* <repository root>/<rel> (HS_SOURCE_DIR when set, else the source tree the harness was built
 * from) in a static buffer, valid until the next call. */
static inline const char *fuzz_path(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("HS_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : HS_FUZZ_SOURCE_DIR, rel);
    return buf;
}

/* The value of header line "Name: value" (name matched without case) copied into buf[cap], or
 * NULL when the line names another header. */
static inline const char *fuzz_header(char *line, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    if (strncasecmp(line, name, n) != 0 || line[n] != ':') return NULL;
    const char *v = line + n + 1;
    while (*v == ' ') v++;
    snprintf(buf, cap, "%s", v);
    return buf;
}

static int fuzz_json_hs; /* jansson allocates through hs_malloc (fuzz_json_alloc) */

/* Makes every allocation through hs_malloc fail from the n-th on, n in [0, 32) taken from a hash
 * of the input: each harness runs an input once more this way to reach the out-of-memory paths,
 * where it checks only a clean refusal and no leak; fuzz_fail_allocs_end() ends it. Meanwhile
 * jansson allocates with plain malloc: it asserts when an allocation fails in the middle of a
 * token (akheron/jansson#362, open upstream), a crash that is not ours to find again. */
static inline void fuzz_fail_allocs(const uint8_t *data, size_t size)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    json_set_alloc_funcs(malloc, free);
    hs_alloc_fail_after((int64_t)(h % 32));
}

static inline void fuzz_fail_allocs_end(void)
{
    hs_alloc_fail_after(-1);
    if (fuzz_json_hs) json_set_alloc_funcs(hs_malloc, hs_free);
}

/* Makes jansson allocate through hs_malloc, as the server does (cmd_serve.c), so that
 * hs_alloc_live() counts JSON values too and a leaked one fails the harness. Idempotent. */
static inline void fuzz_json_alloc(void)
{
    if (!fuzz_json_hs) json_set_alloc_funcs(hs_malloc, hs_free);
    fuzz_json_hs = 1;
}

#endif
