/* libhs_engine_bare.so: an engine kind "bare" that claims every stage in f32 and no block feature
 * (stage.h HS_STAGE_FEATURES), for tests/server/test_families.py: `hetserve verify` must skip it,
 * naming the features, on a family that needs some (HS_PLUGIN_PATH=<build>/test-plugins). It
 * computes nothing: every per-batch method refuses, so a model that reached it would fail. */
#include <stdio.h>

#include "engine/plugin.h"

static const struct hs_plugin_host *host;

static void bare_caps(void *ctx, struct hs_engine_caps *out)
{
    (void)ctx;
    snprintf(out->kind, sizeof out->kind, "bare");
    snprintf(out->device, sizeof out->device, "nowhere");
    out->dtypes = 1u << HS_DTYPE_F32;
    out->stages = (1u << HS_STAGE_COUNT) - 1;
    out->features = 0;
}
static void bare_destroy(void *ctx)
{
    (void)ctx;
}
static hs_status bare_prepare(void *ctx, const struct hs_stage *st, enum hs_dtype dtype,
                              void **prep, struct hs_error *err)
{
    (void)ctx, (void)st, (void)dtype, (void)prep;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}
static hs_status bare_ws_create(void *ctx, const struct hs_ws_spec *spec, void **ws,
                                struct hs_error *err)
{
    (void)ctx, (void)spec, (void)ws;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}
static void bare_ws_destroy(void *ctx, void *ws)
{
    (void)ctx, (void)ws;
}
static hs_status bare_batch_begin(void *ctx, void *ws, const struct hs_batch *b,
                                  struct hs_error *err)
{
    (void)ctx, (void)ws, (void)b;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}
static hs_status bare_run_stage(void *ctx, void *ws, const struct hs_stage *st, void *prep,
                                struct hs_error *err)
{
    (void)ctx, (void)ws, (void)st, (void)prep;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}
static hs_status bare_act_read(void *ctx, void *ws, enum hs_act_buf buf, float *dst,
                               struct hs_error *err)
{
    (void)ctx, (void)ws, (void)buf, (void)dst;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}
static hs_status bare_act_write(void *ctx, void *ws, enum hs_act_buf buf, const float *src,
                                struct hs_error *err)
{
    (void)ctx, (void)ws, (void)buf, (void)src;
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "bare: computes nothing");
}

static const struct hs_engine_iface iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "bare",
    .destroy = bare_destroy,
    .caps = bare_caps,
    .stage_prepare = bare_prepare,
    .ws_create = bare_ws_create,
    .ws_destroy = bare_ws_destroy,
    .batch_begin = bare_batch_begin,
    .run_stage = bare_run_stage,
    .act_read = bare_act_read,
    .act_write = bare_act_write,
};

static int bare_devices(void)
{
    return 1;
}
static hs_status bare_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                             struct hs_error *err)
{
    static int ctx;
    return host->engine_wrap(&iface, &ctx, opts && opts->name ? opts->name : "bare0", out, err);
}

static const struct hs_plugin desc = {
    .abi_version = HS_PLUGIN_ABI_VERSION,
    .kind = {.name = "bare",
             .summary = "test engine: every stage in f32, no block feature, computes nothing",
             .dtypes = 1u << HS_DTYPE_F32,
             .native = HS_DTYPE_F32,
             .device_count = bare_devices,
             .create = bare_create},
};

const struct hs_plugin *hs_engine_plugin(const struct hs_plugin_host *h);
__attribute__((visibility("default"))) const struct hs_plugin *
hs_engine_plugin(const struct hs_plugin_host *h)
{
    if (!h || h->abi_version != HS_PLUGIN_ABI_VERSION) return NULL;
    host = h;
    return &desc;
}
