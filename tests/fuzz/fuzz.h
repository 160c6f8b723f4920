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

/* Makes jansson allocate through hs_malloc, as the server does (cmd_serve.c), so that
 * hs_alloc_live() counts JSON values too and a leaked one fails the harness. Idempotent. */
static inline void fuzz_json_alloc(void)
{
    static int done;
    if (!done) json_set_alloc_funcs(hs_malloc, hs_free);
    done = 1;
}

#endif
