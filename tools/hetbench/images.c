#include "hetbench/images.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/alloc.h"

static const char *const ctypes[HS_BENCH_BODY_KINDS] = {
    [HS_BENCH_BODY_JSON] = "application/json",
    [HS_BENCH_BODY_JPEG] = "image/jpeg",
    [HS_BENCH_BODY_PNG] = "image/png",
    [HS_BENCH_BODY_OCTET] = "application/octet-stream",
};

const char *hs_bench_body_ctype(enum hs_bench_body_kind k)
{
    return k >= 0 && k < HS_BENCH_BODY_KINDS ? ctypes[k] : ctypes[HS_BENCH_BODY_OCTET];
}

enum hs_bench_body_kind hs_bench_body_kind_of_ctype(const char *ctype)
{
    if (!ctype || !*ctype) return HS_BENCH_BODY_JSON;
    size_t n = strcspn(ctype, "; \t");
    for (int k = 0; k < HS_BENCH_BODY_KINDS; k++)
        if (strlen(ctypes[k]) == n && !strncasecmp(ctype, ctypes[k], n))
            return (enum hs_bench_body_kind)k;
    return HS_BENCH_BODY_OCTET;
}

enum hs_bench_body_kind hs_bench_body_kind_sniff(const uint8_t *p, size_t n)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return HS_BENCH_BODY_JPEG;
    if (n >= 8 && !memcmp(p, png, 8)) return HS_BENCH_BODY_PNG;
    return HS_BENCH_BODY_OCTET;
}

void hs_bench_images_free(struct hs_bench_images *s)
{
    for (size_t i = 0; i < s->n; i++) {
        hs_free(s->im[i].name);
        hs_free(s->im[i].bytes);
    }
    hs_free(s->im);
    memset(s, 0, sizeof *s);
}

static int by_name(const void *a, const void *b)
{
    const struct hs_bench_image *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Reads path whole into *out (hs_malloc); *skip = 1 (and nothing read) when it is not a regular
 * file. */
static hs_status read_whole(const char *path, size_t max_bytes, uint8_t **out, size_t *len,
                            int *skip, struct hs_error *err)
{
    *out = NULL;
    *len = 0;
    *skip = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return hs_error_set(err, HS_STATUS_IO, "cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) {
        *skip = 1;
        return HS_STATUS_OK;
    }
    if ((unsigned long long)sb.st_size > max_bytes)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "'%s' has %lld bytes; the limit is %zu",
                            path, (long long)sb.st_size, max_bytes);
    FILE *f = fopen(path, "rb");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t n = (size_t)sb.st_size;
    uint8_t *p = hs_malloc(n ? n : 1);
    if (!p) {
        fclose(f);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "reading '%s'", path);
    }
    size_t got = n ? fread(p, 1, n, f) : 0;
    fclose(f);
    if (got != n) {
        hs_free(p);
        return hs_error_set(err, HS_STATUS_IO, "cannot read '%s'", path);
    }
    *out = p;
    *len = n;
    return HS_STATUS_OK;
}

hs_status hs_bench_images_load(const char *dir, size_t max_bytes, struct hs_bench_images *out,
                               struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d)
        return hs_error_set(err, HS_STATUS_IO, "cannot open folder '%s': %s", dir, strerror(errno));
    size_t cap = 0;
    hs_status st = HS_STATUS_OK;
    struct dirent *de;
    char path[4096];
    while (!st && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "path too long in '%s'", dir);
            break;
        }
        uint8_t *bytes;
        size_t len;
        int skip;
        if ((st = read_whole(path, max_bytes, &bytes, &len, &skip, err))) break;
        if (skip) continue;
        enum hs_bench_body_kind k = hs_bench_body_kind_sniff(bytes, len);
        if (k == HS_BENCH_BODY_OCTET) { /* not an image (or empty): a README, a label file */
            hs_free(bytes);
            out->skipped++;
            continue;
        }
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct hs_bench_image *ni = hs_realloc(out->im, nc * sizeof *ni);
            if (!ni) {
                hs_free(bytes);
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "reading '%s'", dir);
                break;
            }
            out->im = ni;
            cap = nc;
        }
        size_t nl = strlen(de->d_name) + 1;
        char *name = hs_malloc(nl);
        if (!name) {
            hs_free(bytes);
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "reading '%s'", dir);
            break;
        }
        memcpy(name, de->d_name, nl);
        out->im[out->n++] = (struct hs_bench_image){name, bytes, len, k};
        out->bytes += len;
    }
    closedir(d);
    if (st) return st;
    if (!out->n)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "'%s' holds no JPEG or PNG file (%zu other file(s))", dir,
                            out->skipped);
    qsort(out->im, out->n, sizeof *out->im, by_name);
    return HS_STATUS_OK;
}

const struct hs_bench_image *hs_bench_images_pick(const struct hs_bench_images *s,
                                                  struct hs_bench_rng *r)
{
    return &s->im[hs_bench_rng_next(r) % s->n];
}
