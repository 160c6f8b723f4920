/* Shared helpers for the C unit tests (cmocka). */
#ifndef HS_TESTUTIL_H
#define HS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Repository root (HS_SOURCE_DIR from ctest, else the current directory). */
const char *hs_test_source_dir(void);
/* Default model folder: HS_MODEL_DIR, else <root>/models/all-MiniLM-L6-v2. */
const char *hs_test_model_dir(void);
/* <root>/<rel> in a static buffer (valid until the next call). */
const char *hs_test_path(const char *rel);
/* Reads a whole file (NUL-terminated); *bytes receives the size. Fails the test when absent. */
char *hs_test_read_file(const char *path, size_t *bytes);
/* Writes bytes to a fresh temp file and returns its path (static buffer per call slot 0..3). */
const char *hs_test_write_temp(const void *data, size_t bytes, const char *suffix);

#endif
