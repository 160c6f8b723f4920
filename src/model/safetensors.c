/* hetserve — safetensors reader (see safetensors.h for the contract).
 *
 * Layout of a file: u64 little-endian N, then N bytes of JSON header, then the data section.
 * Every offset in the header is relative to the start of the data section. Everything is
 * validated at open time so that lookups afterwards cannot fail except by name.
 */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"

/* The reference implementation refuses headers over 100 MB; so do we, before parsing. */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

struct st_entry {
    char *name;
    enum hs_dtype dtype;
    int ndim;
    int64_t shape[HS_TENSOR_MAX_DIMS];
    uint64_t begin, end; /* relative to the data section */
};

struct hs_safetensors {
    char *label;
    void *map; /* the mmap'ed file, or NULL when opened on a caller's buffer */
    size_t map_bytes;
    const unsigned char *data; /* start of the data section */
    uint64_t data_bytes;
    int n;
    struct st_entry *e;              /* header order */
    const struct st_entry **by_name; /* the entries sorted by name, for lookup */
};

static uint64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON value as a non-negative integer; jansson already rejects integers beyond int64. */
static int json_get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v)) return 0;
    json_int_t i = json_integer_value(v);
    if (i < 0) return 0;
    *out = (uint64_t)i;
    return 1;
}

static int cmp_by_name(const void *a, const void *b)
{
    const struct st_entry *x = *(const struct st_entry *const *)a;
    const struct st_entry *y = *(const struct st_entry *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_by_range(const void *a, const void *b)
{
    const struct st_entry *x = *(const struct st_entry *const *)a;
    const struct st_entry *y = *(const struct st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static hs_status parse_metadata(const struct hs_safetensors *st, const json_t *meta,
                                struct hs_error *err)
{
    if (!json_is_object(meta))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: __metadata__ is not an object", st->label);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)meta, k, v)
    {
        if (!json_is_string(v))
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: __metadata__ value '%s' is not a string", st->label, k);
    }
    return HS_STATUS_OK;
}

static hs_status parse_entry(const struct hs_safetensors *st, const char *name, const json_t *v,
                             struct st_entry *e, struct hs_error *err)
{
    const char *lb = st->label;
    if (!json_is_object(v))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%s': entry is not an object", lb,
                            name);

    const json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%s': missing or non-string dtype",
                            lb, name);
    int dt = hs_dtype_parse(json_string_value(jd));
    if (dt < 0)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%s': unknown dtype '%.32s'", lb,
                            name, json_string_value(jd));
    e->dtype = (enum hs_dtype)dt;

    const json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%s': missing or non-array shape",
                            lb, name);
    size_t nd = json_array_size(js);
    if (nd > HS_TENSOR_MAX_DIMS)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: tensor '%s': %zu dimensions (at most %d supported)", lb, name, nd,
                            HS_TENSOR_MAX_DIMS);
    e->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_get_u64(json_array_get(js, i), &d))
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: tensor '%s': shape[%zu] is not a non-negative integer", lb,
                                name, i);
        e->shape[i] = (int64_t)d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: tensor '%s': shape element count overflows", lb, name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)hs_dtype_size(e->dtype), &nbytes))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%s': byte size overflows", lb,
                            name);

    const json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_get_u64(json_array_get(jo, 0), &e->begin) ||
        !json_get_u64(json_array_get(jo, 1), &e->end))
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: tensor '%s': data_offsets must be two non-negative integers", lb,
                            name);
    if (e->begin > e->end)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: tensor '%s': data_offsets begin %llu > end %llu", lb, name,
                            (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > st->data_bytes)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: tensor '%s': data_offsets end %llu beyond data section (%llu "
                            "bytes)",
                            lb, name, (unsigned long long)e->end,
                            (unsigned long long)st->data_bytes);
    if (e->end - e->begin != nbytes)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: tensor '%s': %llu bytes in data_offsets but shape and dtype %s "
                            "need %llu",
                            lb, name, (unsigned long long)(e->end - e->begin),
                            hs_dtype_name(e->dtype), (unsigned long long)nbytes);
    return HS_STATUS_OK;
}

static hs_status check_overlaps(const struct hs_safetensors *st, struct hs_error *err)
{
    if (st->n < 2) return HS_STATUS_OK;
    const struct st_entry **v = hs_malloc((size_t)st->n * sizeof *v);
    if (!v) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", st->label);
    for (int i = 0; i < st->n; i++) v[i] = &st->e[i];
    qsort(v, (size_t)st->n, sizeof *v, cmp_by_range);
    hs_status s = HS_STATUS_OK;
    const struct st_entry *last = NULL; /* the non-empty range seen last (sorted by begin) */
    for (int i = 0; i < st->n; i++) {
        if (v[i]->begin == v[i]->end) continue; /* an empty range overlaps nothing */
        if (last && last->end > v[i]->begin) {
            s = hs_error_set(err, HS_STATUS_CORRUPT,
                             "%s: tensors '%s' and '%s' have overlapping data ranges", st->label,
                             last->name, v[i]->name);
            break;
        }
        last = v[i];
    }
    hs_free(v);
    return s;
}

static hs_status parse_header(struct hs_safetensors *st, const unsigned char *base, size_t bytes,
                              struct hs_error *err)
{
    const char *lb = st->label;
    if (bytes < 8)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: %zu bytes is too short for the 8-byte header length", lb, bytes);
    uint64_t hlen = read_le64(base);
    if (hlen > bytes - 8)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: header length %llu runs past the end of the file (%zu bytes)", lb,
                            (unsigned long long)hlen, bytes);
    if (hlen > ST_MAX_HEADER_BYTES)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: header length %llu exceeds the %u limit",
                            lb, (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
    if (hlen < 2 || base[8] != '{')
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: header is not a JSON object", lb);
    st->data = base + 8 + hlen;
    st->data_bytes = (uint64_t)bytes - 8 - hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: header JSON invalid at byte %d: %s", lb,
                            jerr.position, jerr.text);
    hs_status s = HS_STATUS_OK;
    if (!json_is_object(root)) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: header is not a JSON object", lb);
        goto done;
    }

    size_t n = json_object_size(root);
    if (json_object_get(root, "__metadata__")) n--;
    if (n > INT32_MAX / 2) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: too many tensors", lb);
        goto done;
    }
    st->e = hs_calloc(n ? n : 1, sizeof *st->e);
    st->by_name = hs_malloc((n ? n : 1) * sizeof *st->by_name);
    if (!st->e || !st->by_name) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", lb);
        goto done;
    }

    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            s = parse_metadata(st, val, err);
            if (s) goto done;
            continue;
        }
        if ((size_t)st->n >= n) { /* cannot happen: duplicates are rejected by the parser */
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: inconsistent tensor count", lb);
            goto done;
        }
        struct st_entry *e = &st->e[st->n];
        s = parse_entry(st, key, val, e, err);
        if (s) goto done;
        e->name = hs_strdup(key);
        if (!e->name) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", lb);
            goto done;
        }
        st->n++;
    }

    s = check_overlaps(st, err);
    if (s) goto done;
    for (int i = 0; i < st->n; i++) st->by_name[i] = &st->e[i];
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_by_name);
done:
    json_decref(root);
    return s;
}

static hs_status open_common(const void *data, size_t bytes, const char *label, void *map,
                             struct hs_safetensors **out, struct hs_error *err)
{
    struct hs_safetensors *st = hs_calloc(1, sizeof *st);
    char *lb = hs_strdup(label);
    if (!st || !lb) {
        hs_free(st);
        hs_free(lb);
        if (map) munmap(map, bytes);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
    }
    st->label = lb;
    st->map = map;
    st->map_bytes = bytes;
    hs_status s = parse_header(st, data, bytes, err);
    if (s) {
        hs_safetensors_close(st);
        return s;
    }
    *out = st;
    return HS_STATUS_OK;
}

hs_status hs_safetensors_open_buffer(const void *data, size_t bytes, const char *label,
                                     struct hs_safetensors **out, struct hs_error *err)
{
    if (!out) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "safetensors: out is NULL");
    *out = NULL;
    if (!label) label = "<buffer>";
    if (!data && bytes)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s: NULL data", label);
    return open_common(data ? data : "", bytes, label, NULL, out, err);
}

hs_status hs_safetensors_open(const char *path, struct hs_safetensors **out, struct hs_error *err)
{
    if (!out || !path)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "safetensors: NULL path or out");
    *out = NULL;
    char ebuf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hs_error_set(err, HS_STATUS_IO, "%s: cannot open: %s", path,
                            strerror_r(errno, ebuf, sizeof ebuf));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        hs_status s = hs_error_set(err, HS_STATUS_IO, "%s: cannot stat: %s", path,
                                   strerror_r(errno, ebuf, sizeof ebuf));
        close(fd);
        return s;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hs_error_set(err, HS_STATUS_IO, "%s: not a regular file", path);
    }
    size_t bytes = (size_t)sb.st_size;
    if (bytes < 8) {
        close(fd);
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: %zu bytes is too short for the 8-byte header length", path, bytes);
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return hs_error_set(err, HS_STATUS_IO, "%s: cannot map: %s", path,
                            strerror_r(map_errno, ebuf, sizeof ebuf));
    return open_common(map, bytes, path, map, out, err);
}

void hs_safetensors_close(struct hs_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) hs_free(st->e[i].name);
    hs_free(st->e);
    hs_free(st->by_name);
    if (st->map) munmap(st->map, st->map_bytes);
    hs_free(st->label);
    hs_free(st);
}

int hs_safetensors_count(const struct hs_safetensors *st)
{
    return st ? st->n : 0;
}

const char *hs_safetensors_name(const struct hs_safetensors *st, int i)
{
    if (!st || i < 0 || i >= st->n) return NULL;
    return st->e[i].name;
}

hs_status hs_safetensors_get(const struct hs_safetensors *st, const char *name,
                             struct hs_tensor *out, struct hs_error *err)
{
    if (!st || !name || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "safetensors: NULL argument");
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const struct st_entry *e = st->by_name[mid];
        int c = strcmp(name, e->name);
        if (c == 0) {
            memset(out, 0, sizeof *out);
            out->dtype = e->dtype;
            out->ndim = e->ndim;
            for (int d = 0; d < e->ndim; d++) out->shape[d] = e->shape[d];
            out->data = st->data + e->begin;
            out->bytes = (size_t)(e->end - e->begin);
            return HS_STATUS_OK;
        }
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return hs_error_set(err, HS_STATUS_NOT_FOUND, "%s: no tensor named '%s'", st->label, name);
}

hs_status hs_safetensors_write(const char *path, const char *const *names,
                               const struct hs_tensor *tensors, int n, struct hs_error *err)
{
    json_t *hdr = json_object();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct hs_tensor *t = &tensors[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        const uint64_t bytes = (uint64_t)hs_tensor_numel(t) * hs_dtype_size(t->dtype);
        json_object_set_new(hdr, names[i],
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", hs_dtype_name(t->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(hdr);
    if (!text) return hs_error_set(err, HS_STATUS_NO_MEMORY, "safetensors: header");
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    FILE *f = fopen(path, "wb");
    hs_status s = HS_STATUS_OK;
    if (!f) {
        free(text);
        return hs_error_set(err, HS_STATUS_IO, "cannot write %s", path);
    }
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
    for (size_t p = len; ok && p < padded; p++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t bytes = (size_t)hs_tensor_numel(&tensors[i]) * hs_dtype_size(tensors[i].dtype);
        ok = fwrite(tensors[i].data, 1, bytes, f) == bytes;
    }
    if (fclose(f) != 0) ok = 0;
    free(text);
    if (!ok) s = hs_error_set(err, HS_STATUS_IO, "cannot write %s", path);
    return s;
}
