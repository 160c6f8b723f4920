/* Quantization at load (quant.h, models[].quantize: auto): the built-in calibration set, where a
 * model's plan lives (its folder, or a cache folder keyed by its weights), the search run once
 * and its result reused by every later start. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib_txt.h" /* generated from data/calib/calib.txt: hs_calib_txt, hs_calib_txt_len */
#include "core/alloc.h"
#include "core/clock.h"
#include "core/file.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/weights.h"
#include "model/safetensors.h"

#define CALIB_BYTES_MAX (64u << 20)

bool hs_quant_dtype_needs_plan(enum hs_dtype dtype)
{
    return dtype == HS_DTYPE_I8;
}

void hs_quant_calib_free(char **texts, int n)
{
    for (int i = 0; texts && i < n; i++) hs_free(texts[i]);
    hs_free(texts);
}

/* One text per non-empty line (a trailing \r is dropped). */
static hs_status split_lines(const char *data, size_t len, const char *label, char ***texts, int *n,
                             struct hs_error *err)
{
    int count = 0, cap = 0;
    char **out = NULL;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len, l = end - at;
        if (l && data[at + l - 1] == '\r') l--;
        if (l) {
            if (count == cap) {
                cap = cap ? cap * 2 : 256;
                char **grown = hs_realloc(out, sizeof(char *) * (size_t)cap);
                if (!grown) goto oom;
                out = grown;
            }
            if (!(out[count] = hs_strndup(data + at, l))) goto oom;
            count++;
        }
        at = end + 1;
    }
    *texts = out;
    *n = count;
    return HS_STATUS_OK;
oom:
    hs_quant_calib_free(out, count);
    return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
}

hs_status hs_quant_calib_texts(const char *path, char ***texts, int *n, struct hs_error *err)
{
    *texts = NULL;
    *n = 0;
    if (!path)
        return split_lines((const char *)hs_calib_txt, (size_t)hs_calib_txt_len,
                           "built-in calibration set", texts, n, err);
    char *data = NULL;
    size_t len = 0;
    hs_status s = hs_read_file(path, CALIB_BYTES_MAX, &data, &len, err);
    if (!s) s = split_lines(data, len, path, texts, n, err);
    hs_free(data);
    return s;
}

/* ---- the cache key: the weights the plan was searched on, the calibration set, the dtype ---- */

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a word at a time: ~100 MB of weights hash in a blink */
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t plan_key(const struct hs_model *m, char **texts, int n, enum hs_dtype dtype)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const char *dn = hs_compute_dtype_name(dtype);
    h = mix(h, dn, strlen(dn));
    for (int k = 0; k < hs_weights_shards(m->weights); k++) {
        const struct hs_safetensors *st = hs_weights_shard(m->weights, k);
        for (int i = 0; i < hs_safetensors_count(st); i++) {
            const char *name = hs_safetensors_name(st, i);
            struct hs_tensor t;
            struct hs_error e2;
            h = mix(h, name, strlen(name) + 1);
            if (hs_safetensors_get(st, name, &t, &e2) == HS_STATUS_OK) h = mix(h, t.data, t.bytes);
        }
    }
    for (int i = 0; i < n; i++) h = mix(h, texts[i], strlen(texts[i]) + 1);
    return h;
}

/* mkdir -p, then the folder must be one this process can write. */
static hs_status make_dirs(const char *path, struct hs_error *err)
{
    char buf[4096];
    int len = snprintf(buf, sizeof buf, "%s", path);
    if (len <= 0 || (size_t)len >= sizeof buf)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cache folder path too long");
    int e = 0;
    for (char *p = buf + 1; !e; p++) {
        const bool last = !*p;
        if (*p != '/' && !last) continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) e = errno;
        if (last) break;
        *p = '/';
    }
    struct stat st;
    if (!e && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) e = errno ? errno : ENOTDIR;
    if (!e && access(path, W_OK) != 0) e = errno;
    if (e)
        return hs_error_set(err, HS_STATUS_IO, "cache folder %s: cannot create or write it: %s",
                            path, strerror(e));
    return HS_STATUS_OK;
}

static void clear_smoothing(struct hs_model *m)
{
    for (int i = 0; i < m->n_stages; i++) {
        m->stages[i].w[HS_W_SMOOTH] = (struct hs_tensor){0};
        m->stages[i].w[HS_W_ACT_SCALE] = (struct hs_tensor){0};
    }
}

hs_status hs_quant_use(struct hs_model *m, const char *dir, struct hs_error *err)
{
    struct hs_quant_plan plan;
    hs_status s = hs_quant_load(m, dir, &plan, err);
    if (s) return s;
    clear_smoothing(m); /* before the mapping they may point into goes */
    hs_safetensors_close(m->quant_weights);
    m->quant_weights = NULL;
    if ((s = hs_quant_attach_smoothing(m, dir, err))) return s;
    if (!m->quant && !(m->quant = hs_malloc(sizeof *m->quant)))
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "model: out of memory");
    *m->quant = plan;
    return HS_STATUS_OK;
}

static hs_status search(struct hs_model *m, const struct hs_quant_auto_opts *o, enum hs_dtype dt,
                        char **texts, int n, const char *dir, struct hs_quant_auto_info *info,
                        struct hs_error *err)
{
    hs_engine_t e = NULL;
    struct hs_quant_report *r = NULL;
    hs_status s = hs_engine_create(
        "cpu", &(struct hs_engine_opts){.name = "quantize", .threads = o->threads}, &e, err);
    if (!s) {
        struct hs_engine_caps caps;
        hs_engine_caps(e, &caps);
        if (!(caps.dtypes & (1u << dt)))
            s = hs_error_set(err, HS_STATUS_UNSUPPORTED,
                             "this CPU (%s) has no %s path to search a quantization plan on",
                             caps.device, hs_compute_dtype_name(dt));
    }
    if (!s && !(r = hs_calloc(1, sizeof *r)))
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
    /* (a server's start waits for this: the stages are ranked only when needed) */
    struct hs_quant_opts qo = {
        .dtype = dt, .progress = o->progress, .progress_ctx = o->progress_ctx, .rank_lazily = true};
    if (!s) s = hs_quant_search(m, e, (const char *const *)texts, n, &qo, r, err);
    if (!s) s = hs_quant_write_plan(m, r, dir, err);
    clear_smoothing(m); /* they point into the report: the plan is read back from dir */
    if (!s) s = hs_quant_use(m, dir, err);
    if (!s) {
        info->n_linear = r->n_stages;
        for (int i = 0; i < r->n_stages; i++) info->n_keep_f32 += r->stages[i].keep_f32;
        info->smooth_alpha = r->smooth_alpha;
        info->act_percentile = r->act_percentile;
        info->cos_min = r->final_cos_min;
        info->cos_mean = r->final_cos_mean;
        info->target_met = r->target_met;
    }
    hs_quant_report_clear(r);
    hs_free(r);
    hs_engine_destroy(e);
    return s;
}

hs_status hs_quant_auto(struct hs_model *m, const struct hs_quant_auto_opts *o,
                        struct hs_quant_auto_info *info, struct hs_error *err)
{
    memset(info, 0, sizeof *info);
    const enum hs_dtype dt = o && o->dtype != HS_DTYPE_F32 ? o->dtype : HS_DTYPE_I8;
    const char *cache = o && o->cache_dir ? o->cache_dir : "";
    if (!m || !m->weights || !m->n_stages)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "quantize: a model with weights");
    if (m->quant && m->quant->dtype == dt) {
        snprintf(info->dir, sizeof info->dir, "%s", m->dir);
        info->reused = true;
        return HS_STATUS_OK;
    }
    if (m->quant) /* never overwrite a folder's plan made for another dtype */
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "model %s: its folder %s holds a %s quantization plan, not the %s one "
                            "its lane needs (hetserve quantize --dtype %s --out DIR makes one)",
                            m->name, m->dir, hs_compute_dtype_name(m->quant->dtype),
                            hs_compute_dtype_name(dt), hs_compute_dtype_name(dt));
    char **texts = NULL;
    int n = 0;
    hs_status s = hs_quant_calib_texts(NULL, &texts, &n, err);
    if (s) return s;
    const bool writable = access(m->dir, W_OK) == 0;
    const int why = writable ? 0 : errno;
    if (writable) {
        snprintf(info->dir, sizeof info->dir, "%s", m->dir);
    } else if (*cache) {
        snprintf(info->dir, sizeof info->dir, "%s/%s-%016llx", cache, m->name,
                 (unsigned long long)plan_key(m, texts, n, dt));
        s = hs_quant_use(m, info->dir, err);
        if (s == HS_STATUS_OK) {
            info->reused = true;
            goto done;
        }
        if (s != HS_STATUS_NOT_FOUND) goto done;
        s = make_dirs(info->dir, err);
        if (s) goto done;
    } else {
        s = hs_error_set(err, HS_STATUS_IO,
                         "model %s: its folder %s cannot hold the %s quantization plan its lane "
                         "needs (%s) and no cache folder is configured: set server.cache_dir, make "
                         "a quantized folder (hetserve quantize --model %s --out DIR) or set "
                         "models[].quantize: off",
                         m->name, m->dir, hs_compute_dtype_name(dt), strerror(why), m->dir);
        goto done;
    }
    const int64_t t0 = hs_now_ns();
    s = search(m, o ? o : &(struct hs_quant_auto_opts){0}, dt, texts, n, info->dir, info, err);
    info->seconds = (double)(hs_now_ns() - t0) / 1e9;
done:
    hs_quant_calib_free(texts, n);
    return s;
}
