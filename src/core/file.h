/* hetserve — whole files into memory. */
#ifndef HS_CORE_FILE_H
#define HS_CORE_FILE_H

#include <stddef.h>

#include "core/status.h"

/* Reads the file at path, in chunks (it may be a pipe), into *data: NUL-terminated, hs_malloc'd
 * (the caller hs_frees it), *len bytes before the NUL. max_bytes > 0 refuses a longer file
 * (HS_STATUS_CORRUPT). Errors name the path: HS_STATUS_NOT_FOUND when it does not exist,
 * HS_STATUS_IO when it cannot be opened or read ("<path>: cannot open: <reason>"),
 * HS_STATUS_NO_MEMORY; *data is then NULL. */
hs_status hs_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                       struct hs_error *err);

/* Atomic replacement of a file: a reader sees the old file (or none) or the whole new one, never
 * a part. hs_file_tmp_name gives the temporary a writer fills (path + ".tmp.<pid>", in the same
 * folder); hs_file_commit flushes it to disk and renames it over path, and on any failure
 * removes it and leaves path as it was. hs_file_write_atomic does both for bytes in memory.
 * Errors are HS_STATUS_IO naming the path and the reason (a full disk: "No space left on
 * device"). */
void hs_file_tmp_name(const char *path, char *buf, size_t n);
hs_status hs_file_commit(const char *tmp, const char *path, struct hs_error *err);
hs_status hs_file_write_atomic(const char *path, const void *data, size_t len,
                               struct hs_error *err);

#endif
