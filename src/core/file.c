/* Whole files into memory (file.h). */
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"

hs_status hs_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                       struct hs_error *err)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        char ebuf[128];
        return hs_error_set(err, e == ENOENT ? HS_STATUS_NOT_FOUND : HS_STATUS_IO,
                            "%s: cannot open: %s", path, strerror_r(e, ebuf, sizeof ebuf));
    }
    size_t cap = 4096, n = 0;
    char *buf = hs_malloc(cap);
    hs_status st =
        buf ? HS_STATUS_OK : hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
    while (!st) {
        if (max_bytes && n > max_bytes) {
            st = hs_error_set(err, HS_STATUS_CORRUPT, "%s: larger than %zu bytes", path, max_bytes);
            break;
        }
        if (n + 1 == cap) { /* full, but for the terminating NUL */
            char *nb = hs_realloc(buf, cap * 2);
            if (!nb) {
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        if (got == 0) break;
        n += got;
    }
    if (!st && ferror(f)) st = hs_error_set(err, HS_STATUS_IO, "%s: read error", path);
    fclose(f);
    if (st) {
        hs_free(buf);
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return HS_STATUS_OK;
}

void hs_file_tmp_name(const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "%s.tmp.%ld", path, (long)getpid());
}

static hs_status io_error(const char *path, int e, struct hs_error *err)
{
    char ebuf[128];
    return hs_error_set(err, HS_STATUS_IO, "%s: cannot write: %s", path,
                        strerror_r(e, ebuf, sizeof ebuf));
}

hs_status hs_file_commit(const char *tmp, const char *path, struct hs_error *err)
{
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        unlink(tmp);
        return io_error(path, e, err);
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return io_error(path, e, err);
    }
    return HS_STATUS_OK;
}

hs_status hs_file_write_atomic(const char *path, const void *data, size_t len, struct hs_error *err)
{
    char tmp[4200];
    hs_file_tmp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error(path, errno, err);
    const char *p = data;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, p + off, len - off);
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            close(fd);
            unlink(tmp);
            return io_error(path, e, err);
        }
        off += (size_t)w;
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return io_error(path, e, err);
    }
    return hs_file_commit(tmp, path, err);
}
