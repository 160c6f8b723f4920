/* The memory plan (memplan.h): engine kinds' answers over the models' config files. */
#include "server/memplan.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/model.h"
#include "model/quant.h"

#define MB (1024.0 * 1024.0)

void hs_mem_bytes_str(int64_t bytes, char *buf, size_t n)
{
    const double b = (double)bytes;
    if (b >= 1024.0 * MB)
        snprintf(buf, n, "%.1f GB", b / (1024.0 * MB));
    else if (b >= 10 * MB)
        snprintf(buf, n, "%.0f MB", b / MB);
    else if (b >= MB)
        snprintf(buf, n, "%.1f MB", b / MB);
    else
        snprintf(buf, n, "%.0f KB", b / 1024.0);
}

/* What the plan needs of one model: its dimensions, the dtype each stage computes in per lane
 * dtype (its quantization plan), its mapped file. */
struct plan_model {
    bool ok;
    struct hs_model_config config;
    int n_stages;
    enum hs_stage_kind kinds[HS_QUANT_MAX_STAGES];
    struct hs_quant_plan quant;
    bool has_quant;
    int64_t file_bytes;
};

/* Stage names as model.c makes them, so that quant.json's names resolve without the weights. */
static hs_status read_model(const struct hs_model_cfg *mc, struct plan_model *pm,
                            struct hs_error *err)
{
    memset(pm, 0, sizeof *pm);
    hs_status st = hs_model_config_load(mc->path, &pm->config, err);
    if (st) return st;
    const int layers = pm->config.dims.layers;
    /* the stage list model.c builds: embed, attn / ffn per layer, final_norm (pre-norm families),
     * pool, normalize */
    const int fin = pm->config.dims.final_norm ? 1 : 0;
    pm->n_stages = 1 + 2 * layers + fin + 2;
    if (pm->n_stages > HS_QUANT_MAX_STAGES)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "%s: %d layers", mc->path, layers);
    struct hs_stage *stages = hs_calloc((size_t)pm->n_stages, sizeof *stages);
    if (!stages) return hs_error_set(err, HS_STATUS_NO_MEMORY, "memory plan");
    for (int i = 0; i < pm->n_stages; i++) {
        struct hs_stage *s = &stages[i];
        s->layer = -1;
        if (i == 0) {
            s->kind = HS_STAGE_EMBED;
            snprintf(s->name, sizeof s->name, "embed");
        } else if (i <= 2 * layers) {
            s->layer = (i - 1) / 2;
            s->kind = (i - 1) % 2 ? HS_STAGE_FFN : HS_STAGE_ATTN;
            snprintf(s->name, sizeof s->name, "layer%d.%s", s->layer,
                     s->kind == HS_STAGE_FFN ? "ffn" : "attn");
        } else {
            const int tail = i - 2 * layers - 1 + (1 - fin); /* 0 final_norm, 1 pool, 2 normalize */
            s->kind = tail == 0   ? HS_STAGE_FINAL_NORM
                      : tail == 1 ? HS_STAGE_POOL
                                  : HS_STAGE_NORMALIZE;
            snprintf(s->name, sizeof s->name, "%s", hs_stage_kind_name(s->kind));
        }
        pm->kinds[i] = s->kind;
    }
    struct hs_model skel = {.dir = (char *)mc->path,
                            .name = (char *)mc->path,
                            .config = pm->config,
                            .n_stages = pm->n_stages,
                            .stages = stages};
    struct hs_error qerr = {0};
    st = hs_quant_load(&skel, mc->path, &pm->quant, &qerr);
    hs_free(stages);
    if (st && st != HS_STATUS_NOT_FOUND) {
        if (err) *err = qerr;
        return st;
    }
    pm->has_quant = st == HS_STATUS_OK;
    char path[1100];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", mc->path);
    pm->file_bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    pm->ok = true;
    return HS_STATUS_OK;
}

/* Compute threads of slice k of e (the engine itself when it has one slice). */
static int engine_threads(const struct hs_engine_cfg *e, int k)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int avail[HS_ENGINE_MAX_CORES], n_avail = online > 0 ? (int)online : 1,
                                    cores[HS_ENGINE_MAX_CORES];
    if (n_avail > HS_ENGINE_MAX_CORES) n_avail = HS_ENGINE_MAX_CORES;
    for (int i = 0; i < n_avail; i++) avail[i] = i;
    int threads, n_cores = hs_config_slice(e, k, avail, n_avail, cores, &threads);
    /* an engine that borrows cores holds a thread slot for each (scratch per thread) */
    if (threads > 0) return threads + e->n_borrow_cores;
    if (n_cores > 0) return n_cores + e->n_borrow_cores;
    return n_avail;
}

/* One prepared (model, kind, device, stage, dtype): made once, whoever asks first. */
struct prep_seen {
    int model, device, stage;
    const char *kind;
    enum hs_dtype dtype;
};

static struct hs_mem_device *device_of(struct hs_mem_plan *p, const char *kind, int device)
{
    for (int i = 0; i < p->n_devices; i++)
        if (!strcmp(p->devices[i].kind, kind) && p->devices[i].device == device)
            return &p->devices[i];
    struct hs_mem_device *d = &p->devices[p->n_devices++];
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "%s", kind);
    d->device = device;
    const struct hs_engine_kind *k = hs_engine_kind_find(kind);
    d->have_bytes = hs_engine_kind_mem_available(k, device);
    if (d->have_bytes > 0)
        snprintf(d->have_what, sizeof d->have_what, "%s",
                 !strcmp(kind, "cpu") ? "MemAvailable" : "free device memory");
    else
        snprintf(d->have_what, sizeof d->have_what, "%s",
                 !hs_engine_kind_built(k) ? "kind not built" : "skipped: no device");
    return d;
}

static void engine_why(const struct hs_mem_engine *e, double margin, char *buf, size_t n)
{
    char need[24], w[24], a[24], s[24], r[24];
    hs_mem_bytes_str(e->need_bytes, need, sizeof need);
    hs_mem_bytes_str(e->weights_bytes, w, sizeof w);
    hs_mem_bytes_str(e->activation_bytes, a, sizeof a);
    hs_mem_bytes_str(e->workspace_bytes, s, sizeof s);
    hs_mem_bytes_str(e->runtime_bytes, r, sizeof r);
    snprintf(buf, n,
             "engine %s needs %s (weights %s, activations %s at %s, workspace %s, runtime %s, "
             "margin %.0f %%)",
             e->name, need, w, a, e->shape, s, r, margin * 100);
}

hs_status hs_mem_plan_make(const struct hs_config *c, struct hs_mem_plan *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    out->margin_ratio = c->limits.memory_margin_ratio;
    out->fits = true;
    struct plan_model *models = hs_calloc((size_t)c->n_models, sizeof *models);
    struct prep_seen *seen = hs_calloc(
        (size_t)HS_CONFIG_MAX_MODELS * HS_CONFIG_MAX_ENGINES * HS_QUANT_MAX_STAGES, sizeof *seen);
    if (!models || !seen) {
        hs_free(models);
        hs_free(seen);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "memory plan: out of memory");
    }
    int n_seen = 0;
    /* the host first: it maps every model file, whichever engines run the models */
    struct hs_mem_device *host = device_of(out, "cpu", 0);
    for (int i = 0; i < c->n_models; i++) {
        struct hs_error merr = {0};
        if (read_model(&c->models[i], &models[i], &merr) != HS_STATUS_OK) {
            if (out->n_notes < HS_CONFIG_MAX_MODELS)
                snprintf(out->notes[out->n_notes++], sizeof out->notes[0],
                         "model %.100s left out of the plan: %.120s", c->models[i].path, merr.msg);
            continue;
        }
        bool mapped_before = false;
        for (int k = 0; k < i; k++)
            mapped_before |= models[k].ok && !strcmp(c->models[k].path, c->models[i].path);
        if (!mapped_before) host->mapped_bytes += models[i].file_bytes;
    }
    for (int ei = 0; ei < c->n_engines; ei++) {
        const struct hs_engine_cfg *ec = &c->engines[ei];
        const struct hs_engine_kind *kind = hs_engine_kind_find(ec->kind);
        struct hs_mem_engine *me = &out->engines[out->n_engines++];
        snprintf(me->name, sizeof me->name, "%s", ec->name);
        snprintf(me->kind, sizeof me->kind, "%s", ec->kind);
        me->device = ec->device;
        me->limit_bytes = (int64_t)ec->memory_mb * 1024 * 1024;
        /* slices: each its own runtime, workspaces and activations; the weights once */
        const int slices = ec->slices > 1 ? ec->slices : 1;
        me->runtime_bytes = (int64_t)c->limits.memory_runtime_mb * 1024 * 1024 * slices;
        snprintf(me->shape, sizeof me->shape, "no lanes");
        /* a remote engine's batches run on its workers, which plan their own memory: here it
         * holds no weights, activations or workspace */
        if (kind && kind->remote) {
            snprintf(me->shape, sizeof me->shape, "remote: on its workers");
            me->runtime_bytes = 0;
            continue;
        }
        int64_t largest = -1;
        for (int mi = 0; mi < c->n_models; mi++) {
            const struct hs_model_cfg *mc = &c->models[mi];
            const struct plan_model *pm = &models[mi];
            bool on = false;
            for (int j = 0; j < (mc->n_engines ? mc->n_engines : 1); j++)
                on |= !strcmp(mc->n_engines ? mc->engines[j] : mc->engine, ec->name);
            on |= hs_config_model_uses(mc, ec->name); /* a split: counted whole on each */
            if (!on || !pm->ok) continue;
            me->n_lanes++;
            const int dt = hs_config_lane_dtype(mc, ec);
            if (dt < 0) continue;
            /* the lane's limits, as the server sizes its executor */
            const int batch_lim = ec->batch_max > 0 ? ec->batch_max : c->batching.batch_max;
            const int tokens_lim =
                ec->batch_max_tokens > 0 ? ec->batch_max_tokens : c->batching.batch_max_tokens;
            const int seq_max = pm->config.max_seq_len;
            int batch_max = batch_lim, tokens_max = tokens_lim;
            for (int k = 0; k < ec->n_shapes; k++) {
                if (ec->shapes[k].batch > batch_max) batch_max = ec->shapes[k].batch;
                if (ec->shapes[k].batch * ec->shapes[k].seq > tokens_max)
                    tokens_max = ec->shapes[k].batch * ec->shapes[k].seq;
            }
            if (tokens_max < seq_max) tokens_max = seq_max;
            const int slots = hs_config_lane_slots(mc, ec) + hs_config_lane_preempts(c, mc);
            uint32_t dtypes = 0;
            for (int s = 0; s < pm->n_stages; s++) {
                bool keep =
                    pm->has_quant && pm->quant.dtype == (enum hs_dtype)dt && pm->quant.keep_f32[s];
                enum hs_dtype sd = keep ? HS_DTYPE_F32 : (enum hs_dtype)dt;
                dtypes |= 1u << sd;
                int64_t b = hs_engine_kind_stage_bytes(kind, pm->kinds[s], &pm->config.dims, sd);
                int k = 0;
                while (k < n_seen && !(seen[k].model == mi && seen[k].device == ec->device &&
                                       seen[k].stage == s && seen[k].dtype == sd &&
                                       !strcmp(seen[k].kind, ec->kind)))
                    k++;
                if (k < n_seen) {
                    me->shared_bytes += b;
                    continue;
                }
                seen[n_seen++] = (struct prep_seen){mi, ec->device, s, ec->kind, sd};
                me->weights_bytes += b;
            }
            struct hs_ws_spec spec = {.batch_max = batch_max,
                                      .tokens_max = tokens_max,
                                      .seq_max = seq_max,
                                      .dims = &pm->config.dims,
                                      .dtypes = dtypes};
            int64_t act = 0, scratch = 0;
            for (int k = 0; k < slices; k++) {
                int64_t a = 0, w = 0;
                hs_engine_kind_ws_bytes(kind, &spec, engine_threads(ec, k), &a, &w);
                act += a;
                scratch += w;
            }
            me->activation_bytes += act * slots;
            me->workspace_bytes += scratch * slots;
            if (act * slots > largest) {
                largest = act * slots;
                int n = snprintf(me->shape, sizeof me->shape, "%d x %d (%d tokens) x %d slot%s",
                                 batch_max, seq_max, tokens_max, slots, slots == 1 ? "" : "s");
                if (slices > 1 && n > 0 && (size_t)n < sizeof me->shape)
                    snprintf(me->shape + n, sizeof me->shape - (size_t)n, " x %d slices", slices);
            }
        }
        const int64_t sum =
            me->weights_bytes + me->activation_bytes + me->workspace_bytes + me->runtime_bytes;
        me->margin_bytes = (int64_t)((double)sum * out->margin_ratio);
        me->need_bytes = sum + me->margin_bytes;
        struct hs_mem_device *d = device_of(out, ec->kind, ec->device);
        d->engines_bytes += me->need_bytes;
        if (out->fits && me->limit_bytes > 0 && me->need_bytes > me->limit_bytes) {
            char why[400], have[24];
            engine_why(me, out->margin_ratio, why, sizeof why);
            hs_mem_bytes_str(me->limit_bytes, have, sizeof have);
            snprintf(out->refusal, sizeof out->refusal, "%s but has %s (engines[].memory_mb %d)",
                     why, have, ec->memory_mb);
            out->fits = false;
        }
    }
    for (int i = 0; i < out->n_devices; i++) {
        struct hs_mem_device *d = &out->devices[i];
        d->need_bytes = d->engines_bytes + d->mapped_bytes;
        if (out->fits && d->have_bytes > 0 && d->need_bytes > d->have_bytes) {
            char need[24], eng[24], map[24], have[24];
            hs_mem_bytes_str(d->need_bytes, need, sizeof need);
            hs_mem_bytes_str(d->engines_bytes, eng, sizeof eng);
            hs_mem_bytes_str(d->mapped_bytes, map, sizeof map);
            hs_mem_bytes_str(d->have_bytes, have, sizeof have);
            int n = snprintf(out->refusal, sizeof out->refusal,
                             "device %s:%d needs %s (engines %s, mapped model files %s) but has %s "
                             "(%s)",
                             d->kind, d->device, need, eng, map, have, d->have_what);
            /* name the largest engine on it, with its numbers */
            const struct hs_mem_engine *big = NULL;
            for (int k = 0; k < out->n_engines; k++) {
                const struct hs_mem_engine *e = &out->engines[k];
                if (!strcmp(e->kind, d->kind) && e->device == d->device &&
                    (!big || e->need_bytes > big->need_bytes))
                    big = e;
            }
            if (big && n > 0 && (size_t)n < sizeof out->refusal) {
                char why[400];
                engine_why(big, out->margin_ratio, why, sizeof why);
                snprintf(out->refusal + n, sizeof out->refusal - (size_t)n, "; largest: %s", why);
            }
            out->fits = false;
        }
    }
    hs_free(models);
    hs_free(seen);
    return HS_STATUS_OK;
}

hs_status hs_mem_plan_check(const struct hs_mem_plan *p, struct hs_error *err)
{
    if (p->fits) return HS_STATUS_OK;
    return hs_error_set(err, HS_STATUS_INVALID_INPUT, "memory plan: %s", p->refusal);
}

void hs_mem_plan_lines(const struct hs_mem_plan *p, void (*line)(void *ctx, const char *text),
                       void *ctx)
{
    char buf[640];
    snprintf(buf, sizeof buf, "memory plan (margin %.0f %%):", p->margin_ratio * 100);
    line(ctx, buf);
    for (int i = 0; i < p->n_engines; i++) {
        const struct hs_mem_engine *e = &p->engines[i];
        char why[400], sh[24], lim[24];
        engine_why(e, p->margin_ratio, why, sizeof why);
        hs_mem_bytes_str(e->shared_bytes, sh, sizeof sh);
        hs_mem_bytes_str(e->limit_bytes, lim, sizeof lim);
        snprintf(buf, sizeof buf, "  %s [%s:%d]%s%s%s%s", why, e->kind, e->device,
                 e->shared_bytes ? "; shares " : "", e->shared_bytes ? sh : "",
                 e->limit_bytes ? "; limit " : "", e->limit_bytes ? lim : "");
        line(ctx, buf);
    }
    for (int i = 0; i < p->n_devices; i++) {
        const struct hs_mem_device *d = &p->devices[i];
        char need[24], eng[24], map[24], have[24];
        hs_mem_bytes_str(d->need_bytes, need, sizeof need);
        hs_mem_bytes_str(d->engines_bytes, eng, sizeof eng);
        hs_mem_bytes_str(d->mapped_bytes, map, sizeof map);
        hs_mem_bytes_str(d->have_bytes, have, sizeof have);
        if (d->have_bytes > 0)
            snprintf(buf, sizeof buf,
                     "  device %s:%d needs %s (engines %s, mapped model files %s) of %s (%s): %s",
                     d->kind, d->device, need, eng, map, have, d->have_what,
                     d->need_bytes <= d->have_bytes ? "fits" : "DOES NOT FIT");
        else
            snprintf(buf, sizeof buf,
                     "  device %s:%d needs %s (engines %s, mapped model files %s); capacity "
                     "unknown (%s)",
                     d->kind, d->device, need, eng, map, d->have_what);
        line(ctx, buf);
    }
    for (int i = 0; i < p->n_notes; i++) {
        snprintf(buf, sizeof buf, "  note: %s", p->notes[i]);
        line(ctx, buf);
    }
    if (!p->fits) {
        snprintf(buf, sizeof buf, "  refused: %s", p->refusal);
        line(ctx, buf);
    }
}

struct print_ctx {
    FILE *f;
    const char *prefix;
};

static void print_line(void *ctx, const char *text)
{
    const struct print_ctx *pc = ctx;
    fprintf(pc->f, "%s%s\n", pc->prefix, text);
}

void hs_mem_plan_print(const struct hs_mem_plan *p, FILE *f, const char *prefix)
{
    struct print_ctx pc = {f, prefix ? prefix : ""};
    hs_mem_plan_lines(p, print_line, &pc);
}
