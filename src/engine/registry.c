/* The registry of engine kinds: one line per kind. A kind's entry (struct hs_engine_kind) is
 * defined in its own folder, engine/<kind>/kind.c, which every build compiles; the entry's
 * create and device_count are NULL where the kind's implementation was not built in. Kinds
 * loaded from plugins (engine/plugin.h) follow; one named like a known kind that is not built
 * (openvino) takes that kind's place. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/plugin.h"

#define HS_ENGINE_KIND_LIST(X)                                                                     \
    X(cpu)                                                                                         \
    X(cuda)                                                                                        \
    X(openvino)                                                                                    \
    X(remote)

#define HS__KIND_DECL(k) extern const struct hs_engine_kind hs__engine_kind_##k;
HS_ENGINE_KIND_LIST(HS__KIND_DECL)
#undef HS__KIND_DECL

static const struct hs_engine_kind *const kinds[] = {
#define HS__KIND_PTR(k) &hs__engine_kind_##k,
    HS_ENGINE_KIND_LIST(HS__KIND_PTR)
#undef HS__KIND_PTR
};

int hs__engine_builtin_count(void)
{
    return (int)(sizeof kinds / sizeof kinds[0]);
}

const struct hs_engine_kind *hs__engine_builtin_at(int i)
{
    return i >= 0 && i < hs__engine_builtin_count() ? kinds[i] : NULL;
}

/* The plugin kind named name, or NULL. */
static const struct hs_engine_kind *plugin_named(const char *name)
{
    for (int i = 0; i < hs__engine_plugin_count(); i++)
        if (!strcmp(hs__engine_plugin_kind(i)->name, name)) return hs__engine_plugin_kind(i);
    return NULL;
}

/* Plugin kinds that take no built-in kind's place come after the built-in ones. */
static bool plugin_is_extra(const struct hs_engine_kind *p)
{
    for (int i = 0; i < hs__engine_builtin_count(); i++)
        if (!strcmp(kinds[i]->name, p->name)) return false;
    return true;
}

int hs_engine_kind_count(void)
{
    hs_engine_plugins_discover();
    int n = hs__engine_builtin_count();
    for (int i = 0; i < hs__engine_plugin_count(); i++)
        n += plugin_is_extra(hs__engine_plugin_kind(i));
    return n;
}

const struct hs_engine_kind *hs_engine_kind_at(int i)
{
    hs_engine_plugins_discover();
    if (i < 0) return NULL;
    if (i < hs__engine_builtin_count()) {
        const struct hs_engine_kind *p = kinds[i]->create ? NULL : plugin_named(kinds[i]->name);
        return p ? p : kinds[i];
    }
    i -= hs__engine_builtin_count();
    for (int j = 0; j < hs__engine_plugin_count(); j++)
        if (plugin_is_extra(hs__engine_plugin_kind(j)) && i-- == 0)
            return hs__engine_plugin_kind(j);
    return NULL;
}

const struct hs_engine_kind *hs_engine_kind_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < hs_engine_kind_count(); i++)
        if (!strcmp(hs_engine_kind_at(i)->name, name)) return hs_engine_kind_at(i);
    return NULL;
}

void hs_engine_kind_names(char *buf, size_t n)
{
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < hs_engine_kind_count() && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 hs_engine_kind_at(i)->name);
}

bool hs_engine_kind_built(const struct hs_engine_kind *k)
{
    return k && k->create != NULL;
}

int hs_engine_kind_devices(const struct hs_engine_kind *k)
{
    return k && k->create && k->device_count ? k->device_count() : 0;
}

hs_status hs_engine_device_caps(const struct hs_engine_kind *k, int device, const char *device_name,
                                struct hs_engine_caps *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (!k) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "device caps: no kind");
    if (!hs_engine_kind_built(k))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "%s: not built into this binary", k->name);
    char name[32];
    snprintf(name, sizeof name, "%s%d", k->name, device);
    struct hs_engine_opts eo = {.name = name, .device = device, .device_name = device_name};
    hs_engine_t e = NULL;
    hs_status s = hs_engine_create(k->name, &eo, &e, err);
    if (s) return s;
    hs_engine_caps(e, out);
    hs_engine_destroy(e);
    return HS_STATUS_OK;
}

void hs_engine_dtype_names(uint32_t dtypes, char *buf, size_t n)
{
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int d = 0; d < HS_DTYPE_COUNT && used < n; d++)
        if (dtypes & (1u << d))
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "",
                                     hs_compute_dtype_name((enum hs_dtype)d));
    if (n && !used) snprintf(buf, n, "none");
}

/* Default: the stage's parameters in dtype (f32 biases and LayerNorms counted in dtype too). */
static int64_t params_of(enum hs_stage_kind stage, const struct hs_encoder_dims *d)
{
    const int64_t h = d->hidden, inter = d->intermediate;
    switch (stage) {
    case HS_STAGE_EMBED:
        return ((int64_t)d->vocab + d->max_positions + d->type_vocab) * h + 2 * h;
    case HS_STAGE_ATTN:
        return 4 * (h * h + h) + 2 * h + (int64_t)d->rel_buckets * d->heads;
    case HS_STAGE_FFN:
        return 2 * h * inter + inter + 3 * h;
    default:
        return 0;
    }
}

int64_t hs_engine_kind_stage_bytes(const struct hs_engine_kind *k, enum hs_stage_kind stage,
                                   const struct hs_encoder_dims *d, enum hs_dtype dtype)
{
    if (k && k->stage_bytes) return k->stage_bytes(stage, d, dtype);
    return params_of(stage, d) * (int64_t)hs_dtype_size(dtype);
}

void hs_engine_kind_ws_bytes(const struct hs_engine_kind *k, const struct hs_ws_spec *spec,
                             int threads, int64_t *activations, int64_t *scratch)
{
    if (k && k->ws_bytes) {
        k->ws_bytes(spec, threads, activations, scratch);
        return;
    }
    const int64_t T = spec->tokens_max, H = spec->dims->hidden, I = spec->dims->intermediate;
    *activations =
        (int64_t)sizeof(float) * (T * (2 * H + 3 * H + (I > H ? I : H)) + spec->batch_max * H);
    *scratch = 0;
}

int64_t hs_engine_kind_mem_available(const struct hs_engine_kind *k, int device)
{
    if (!hs_engine_kind_built(k) || !k->mem_available) return 0;
    if (device < 0 || device >= hs_engine_kind_devices(k)) return 0;
    return k->mem_available(device);
}

double hs_engine_kind_gemm_gflops(const struct hs_engine_kind *k, int device, int threads,
                                  double seconds, const char **what)
{
    if (what) *what = "";
    if (!hs_engine_kind_built(k) || !k->gemm_gflops) return 0;
    if (device < 0 || device >= hs_engine_kind_devices(k)) return 0;
    return k->gemm_gflops(device, threads, seconds, what);
}
