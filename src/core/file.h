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

#endif
