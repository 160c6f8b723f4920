#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *hs_test_source_dir(void)
{
    const char *s = getenv("HS_SOURCE_DIR");
    return s && *s ? s : ".";
}

const char *hs_test_model_dir(void)
{
    static char buf[4096];
    const char *m = getenv("HS_MODEL_DIR");
    if (m && *m) return m;
    snprintf(buf, sizeof buf, "%s/models/all-MiniLM-L6-v2", hs_test_source_dir());
    return buf;
}

const char *hs_test_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", hs_test_source_dir(), rel);
    return buf;
}

char *hs_test_read_file(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read %s", path);
    buf[n] = '\0';
    fclose(f);
    if (bytes) *bytes = (size_t)n;
    return buf;
}

const char *hs_test_write_temp(const void *data, size_t bytes, const char *suffix)
{
    static char bufs[4][256];
    static int slot;
    char *p = bufs[slot++ & 3];
    const char *tmp = getenv("TMPDIR");
    snprintf(p, 256, "%s/hs_test_XXXXXX%s", tmp && *tmp ? tmp : "/tmp", suffix ? suffix : "");
    int fd = mkstemps(p, suffix ? (int)strlen(suffix) : 0);
    if (fd < 0) fail_msg("mkstemps failed");
    if (bytes && write(fd, data, bytes) != (ssize_t)bytes) fail_msg("write failed");
    close(fd);
    return p;
}
