/* Server lifecycle: engines, models, executors, scheduler lanes, daemon start and drain. */
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/remote/remote.h"
#include "model/verify.h"
#include "server/auth.h"
#include "server/json.h"
#include "server/memplan.h"
#include "sched/costs.h"
#include "server/server-impl.h"
#include "server/topology.h"

/* The executor-facing adapter the scheduler's batcher calls: one slot per lane. */
static hs_status exec_run(void *ctx, int slot, const struct hs_batch *b, float *out,
                          struct hs_batch_timing *t, struct hs_error *err)
{
    struct hs_served_lane *sl = ctx;
    struct hs_exec_timing et = {0};
    hs_status st = hs_executor_run(sl->exec, slot, b, out, &et, err);
    t->copy_in_ns = et.copy_in_ns;
    t->compute_ns = et.compute_ns + et.transfer_ns + et.wait_ns;
    t->wait_ns = et.wait_ns;
    atomic_fetch_add(&sl->wait_ns, et.wait_ns);
    t->compute_ns += et.paused_ns + et.yield_wait_ns;
    t->paused_ns = et.paused_ns;
    t->yield_wait_ns = et.yield_wait_ns;
    t->copy_out_ns = et.copy_out_ns;
    t->n_boundaries = et.n_boundaries;
    for (int i = 0; i < et.n_boundaries && i < HS_BATCH_MAX_BOUNDARIES; i++) {
        t->boundary_copy_ns[i] = et.boundary_copy_ns[i];
        t->boundary_sync_ns[i] = et.boundary_sync_ns[i];
        atomic_fetch_add(&sl->boundary_copy_ns[i], et.boundary_copy_ns[i]);
        atomic_fetch_add(&sl->boundary_sync_ns[i], et.boundary_sync_ns[i]);
        atomic_fetch_add(&sl->boundary_count[i], et.boundary_count[i]);
    }
    t->n_handovers =
        et.n_handovers < HS_BATCH_MAX_HANDOVERS ? et.n_handovers : HS_BATCH_MAX_HANDOVERS;
    for (int i = 0; i < t->n_handovers; i++)
        t->handovers[i] = (struct hs_batch_handover){
            .boundary = et.handovers[i].boundary,
            .sync_start_ns = et.handovers[i].sync_start_ns,
            .copy_start_ns = et.handovers[i].copy_start_ns,
            .copy_end_ns = et.handovers[i].copy_end_ns,
            .wait_start_ns = et.handovers[i].wait_start_ns,
            .wait_ns = et.handovers[i].wait_ns,
        };
    return st;
}

/* A pipelined split lane's entry (hs_runner.gate): its executor's first engine. */
static void exec_gate(void *ctx, int slot)
{
    hs_executor_gate(((struct hs_served_lane *)ctx)->exec, slot);
}

static void exec_ungate(void *ctx, int slot)
{
    hs_executor_ungate(((struct hs_served_lane *)ctx)->exec, slot);
}

static void on_batch(void *ctx, const struct hs_batch_report *r)
{
    struct hs_server *s = ctx;
    hs_metrics_batch(s->metrics, r);
    hs_trace_batch(s->trace, r);
}

static bool kind_remote(const char *kind)
{
    const struct hs_engine_kind *k = hs_engine_kind_find(kind);
    return k && k->remote;
}

/* On a lane whose engines compile per shape (HS_ENGINE_FEAT_SHAPE_COMPILE), one batch of each
 * shape the scheduler will form for a single request: a sequence as long as each length bucket
 * (the whitelist's shapes when there is one), so that no first request of a bucket pays the
 * compile. Errors are left to the first real batch, which reports them. */
static void warm_shapes(const struct hs_config *c, const struct hs_engine_cfg *ec,
                        struct hs_served_lane *sl, int seq_max)
{
    bool per_shape = false;
    struct hs_engine_caps caps;
    hs_engine_caps(sl->engine, &caps);
    per_shape |= caps.features & HS_ENGINE_FEAT_SHAPE_COMPILE;
    for (int i = 0; i < hs_executor_n_boundaries(sl->exec); i++) {
        hs_engine_t from, to;
        hs_executor_boundary(sl->exec, i, &from, &to);
        hs_engine_caps(from, &caps);
        per_shape |= caps.features & HS_ENGINE_FEAT_SHAPE_COMPILE;
        hs_engine_caps(to, &caps);
        per_shape |= caps.features & HS_ENGINE_FEAT_SHAPE_COMPILE;
    }
    if (!per_shape) return;
    struct hs_shape shapes[HS_SCHED_MAX_SHAPES + HS_SCHED_MAX_BUCKETS];
    int n = 0;
    if (ec->n_shapes) {
        for (int k = 0; k < ec->n_shapes; k++)
            if (ec->shapes[k].seq <= seq_max) shapes[n++] = ec->shapes[k];
    } else {
        for (int k = 0; k < c->batching.n_buckets && c->batching.buckets[k] < seq_max; k++)
            shapes[n++] = (struct hs_shape){.batch = 1, .seq = c->batching.buckets[k]};
        shapes[n++] = (struct hs_shape){.batch = 1, .seq = seq_max};
    }
    const struct hs_executor_opts *xo = hs_executor_opts(sl->exec);
    const int pad = sl->sm->model->config.pad_token_id;
    for (int k = 0; k < n; k++) {
        const int nb = shapes[k].batch, len = shapes[k].seq;
        if (nb > xo->batch_max || nb * len > xo->tokens_max) continue;
        int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)nb * (size_t)len);
        int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)nb);
        int32_t *offsets = hs_malloc(sizeof(int32_t) * (size_t)(nb + 1));
        float *out = hs_malloc(sizeof(float) * (size_t)nb *
                               (size_t)hs_pooled_dim(&sl->sm->model->config.dims));
        if (ids && lengths && offsets && out) {
            for (int i = 0; i < nb * len; i++) ids[i] = pad;
            for (int i = 0; i <= nb; i++) offsets[i] = i * len;
            for (int i = 0; i < nb; i++) lengths[i] = len;
            struct hs_batch b = {.n_seqs = nb,
                                 .seq_max = len,
                                 .n_tokens = nb * len,
                                 .ids = ids,
                                 .lengths = lengths,
                                 .offsets = offsets};
            hs_executor_run(sl->exec, 0, &b, out, NULL, NULL);
        }
        hs_free(ids), hs_free(lengths), hs_free(offsets), hs_free(out);
    }
}

#ifdef HS_HAVE_REMOTE
static hs_status pool_create(const struct hs_engine_cfg *ec, struct hs_remote_pool **out,
                             struct hs_error *err)
{
    const char *eps[16];
    for (int i = 0; i < ec->n_endpoints; i++) eps[i] = ec->endpoints[i];
    bool dynamic = ec->dns[0] || ec->endpoints_file[0];
    struct hs_remote_opts o = {
        .name = ec->name,
        .n_endpoints = dynamic ? 0 : ec->n_endpoints,
        .endpoints = eps,
        .dns = ec->dns,
        .endpoints_file = ec->endpoints_file,
        .port = ec->port,
        .refresh_s = ec->refresh_s,
        .workers_max = ec->workers_max > 0 ? ec->workers_max
                       : dynamic           ? 4
                                           : 0,
        .dtype = hs_config_lane_dtype(NULL, ec) == HS_DTYPE_F16 ? HS_WIRE_F16 : HS_WIRE_F32,
        .timeout_ms = ec->timeout_ms,
        .connect_timeout_ms = ec->connect_timeout_ms,
    };
    return hs_remote_pool_create(&o, out, err);
}

/* One lane per worker slot of remote engine e (index ei) for model sm. */
static hs_status remote_lanes(struct hs_server *s, struct hs_served_model *sm, int ei,
                              struct hs_lane_opts *lanes, struct hs_error *err)
{
    const struct hs_engine_cfg *ec = &s->cfg.engines[ei];
    struct hs_remote_pool *pool = s->pools[ei];
    for (int w = 0; w < hs_remote_pool_workers(pool); w++) {
        if (s->n_lanes >= HS_SCHED_MAX_LANES)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: more than %d lanes (a remote engine has one per worker "
                                "slot and model)",
                                HS_SCHED_MAX_LANES);
        struct hs_served_lane *sl = &s->lanes[s->n_lanes];
        struct hs_lane_opts *o = &lanes[s->n_lanes];
        sl->sm = sm;
        sl->engine = s->engines[ei];
        sl->worker = w;
        sl->engine_cfg = ei;
        char label[sizeof sl->label];
        snprintf(label, sizeof label, "%s/%d", ec->name, w);
        memcpy(sl->label, label, sizeof label);
        hs_topo_lane_opts(&s->cfg, ec, sm->name, &sm->model->config, o);
        o->engine = sl->label;
        o->preempt = false; /* the worker's stages are its own */
        hs_status st =
            hs_remote_pool_runner(pool, w, s->n_lanes, sm->name, o->dim, o->slots, &o->runner, err);
        if (st) return st;
        char addr[HS_REMOTE_ADDR_MAX];
        hs_remote_pool_endpoint(pool, w, addr, sizeof addr);
        hs_log_info("model %s on remote engine %s: lane %s -> %s, %d slot(s)", sm->name, ec->name,
                    sl->label, addr[0] ? addr : "(no worker yet)", o->slots);
        s->n_lanes++;
    }
    return HS_STATUS_OK;
}

static void on_lane_change(void *ctx, int lane, bool enabled)
{
    struct hs_server *s = ctx;
    hs_router_set_lane_enabled(s->router, lane, enabled);
}
#endif

hs_engine_t hs__server_engine(struct hs_server *s, const char *name)
{
    for (int i = 0; i < s->n_engines; i++)
        if (!strcmp(hs_engine_name(s->engines[i]), name)) return s->engines[i];
    /* a sliced engine's own name: its first slice */
    for (int i = 0; i < s->cfg.n_engines && i < s->n_engines; i++)
        if (!strcmp(s->cfg.engines[i].name, name)) return s->engines[i];
    return NULL;
}

/* Was model sm's lane on engine `engine` left out by a failed check (check: exclude)? */
static bool lane_excluded(const struct hs_server *s, const struct hs_served_model *sm,
                          const char *engine)
{
    const size_t len = strlen(engine);
    for (int i = 0; i < s->n_checks; i++)
        if (s->checks[i].excluded && !strcmp(s->checks[i].model, sm->name) &&
            !strncmp(s->checks[i].engine, engine, len) &&
            (!s->checks[i].engine[len] || s->checks[i].engine[len] == '/')) /* or a slice's */
            return true;
    return false;
}

static void quant_progress(void *ctx, const char *line)
{
    hs_log_debug("quantize %s: %s", (const char *)ctx, line);
}

/* models[].quantize: auto: a plan for every lane dtype of the model that needs one and that its
 * folder lacks, searched at load (or reused: the folder's, or a cache folder's), before any of
 * its lanes is made. The lane check then runs as for any lane. */
static hs_status auto_quantize(const struct hs_config *c, const struct hs_model_cfg *mc,
                               const char *name, struct hs_model *m, struct hs_error *err)
{
    if (strcmp(mc->quantize, "auto") != 0) return HS_STATUS_OK;
    const int n = mc->n_engines ? mc->n_engines : 1;
    for (int j = 0; j < n; j++) {
        const struct hs_engine_cfg *ec =
            hs_config_engine(c, mc->n_engines ? mc->engines[j] : mc->engine);
        if (!ec || kind_remote(ec->kind)) continue;
        const int dt = hs_config_lane_dtype(mc, ec);
        if (dt < 0 || !hs_quant_dtype_needs_plan((enum hs_dtype)dt)) continue;
        const char *dn = hs_compute_dtype_name((enum hs_dtype)dt);
        const bool had = m->quant && m->quant->dtype == (enum hs_dtype)dt;
        if (!had)
            hs_log_info("model %s: no %s quantization plan in %s: searching one with the built-in "
                        "calibration set (models[].quantize: auto; off to skip)",
                        name, dn, m->dir);
        struct hs_quant_auto_opts qo = {.dtype = (enum hs_dtype)dt,
                                        .cache_dir = c->server.cache_dir,
                                        .progress = quant_progress,
                                        .progress_ctx = (void *)name};
        struct hs_quant_auto_info qi;
        hs_status st = hs_quant_auto(m, &qo, &qi, err);
        if (st == HS_STATUS_UNSUPPORTED) { /* no CPU path to search on: the lane check decides */
            hs_log_warn("model %s: no quantization at load: %s; its %s lanes run without a plan",
                        name, err ? err->msg : "unsupported", dn);
            continue;
        }
        if (st) {
            if (!err) return st;
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return hs_error_set(
                err, st, "model %s: quantization at load (models[].quantize: auto): %s", name, why);
        }
        if (qi.reused)
            hs_log_info("model %s: %s lanes reuse the quantization plan in %s/quant.json (no "
                        "search)",
                        name, dn, qi.dir);
        else
            hs_log_info(
                "model %s: %s quantization plan made in %.1f s: %d of %d attention/FFN "
                "stages kept in f32, smoothing alpha %.2f, activations %s; held-out min cos "
                "%.6f, mean %.6f (target %s); cached in %s/quant.json",
                name, dn, qi.seconds, qi.n_keep_f32, qi.n_linear, qi.smooth_alpha,
                qi.act_percentile > 0 ? "static per layer" : "per token", qi.cos_min, qi.cos_mean,
                qi.target_met ? "met" : "NOT met", qi.dir);
    }
    return HS_STATUS_OK;
}

/* Checks a new lane against the model's cpu f32 reference (made on first need, on its own
 * engine, freed when loading ends). Returns an error only for a refused lane; *keep says
 * whether the lane serves. */
static hs_status check_lane(struct hs_server *s, const struct hs_model_cfg *mc,
                            struct hs_served_model *sm, struct hs_served_lane *sl,
                            enum hs_dtype dtype, hs_engine_t *ref_engine,
                            struct hs_executor **ref_exec, bool *keep, struct hs_error *err)
{
    *keep = true;
    if (!strcmp(mc->check, "off")) return HS_STATUS_OK;
    if (!strcmp(hs_engine_kind(sl->engine), "cpu") && dtype == HS_DTYPE_F32 &&
        !hs_config_placement_split(mc))
        return HS_STATUS_OK; /* the reference itself (a split is checked against it) */
    hs_status st = HS_STATUS_OK;
    if (!*ref_engine)
        st =
            hs_engine_create("cpu", &(struct hs_engine_opts){.name = "reference"}, ref_engine, err);
    if (!st && !*ref_exec) {
        struct hs_placement plan;
        hs_placement_single(sm->model, *ref_engine, &plan);
        struct hs_executor_opts xo = {.batch_max = 16, .dtype = HS_DTYPE_F32};
        st = hs_executor_create(sm->model, &plan, &xo, ref_exec, err);
    }
    if (st) return st;
    struct hs_verify_tolerance tol;
    hs_verify_default_tolerance(dtype, &tol);
    if (mc->check_cos_min > 0) tol.cos_min = mc->check_cos_min;
    if (mc->check_cos_mean > 0) tol.cos_mean = mc->check_cos_mean;
    struct hs_verify_report rep;
    st = hs_verify_lane(sl->exec, *ref_exec, dtype, &tol, &rep, err);
    if (st) return st;
    struct hs_lane_check *c = &s->checks[s->n_checks++];
    snprintf(c->model, sizeof c->model, "%s", sm->name);
    snprintf(c->engine, sizeof c->engine, "%s", hs_engine_name(sl->engine));
    c->dtype = dtype;
    c->cos_min = rep.cos_min;
    c->cos_mean = rep.cos_mean;
    c->tol_min = tol.cos_min;
    c->tol_mean = tol.cos_mean;
    c->pass = rep.pass;
    hs_log_info("lane check: model %s on %s (%s): min cos %.6f, mean %.6f (tolerance %.4f / "
                "%.4f): %s",
                c->model, c->engine, hs_compute_dtype_name(dtype), rep.cos_min, rep.cos_mean,
                tol.cos_min, tol.cos_mean, rep.pass ? "pass" : "FAIL");
    if (rep.pass) return HS_STATUS_OK;
    const char *hint =
        dtype == HS_DTYPE_I8 && !(sm->model->quant && sm->model->quant->dtype == dtype)
            ? "; an int8 lane wants a quantization plan: models[].quantize: auto makes one "
              "at load, or hetserve quantize --model DIR --out DIR2"
            : "";
    if (!strcmp(mc->check, "exclude")) {
        c->excluded = true;
        *keep = false;
        hs_log_warn("lane model %s on engine %s (%s) is kept out of routing: it failed its check%s",
                    c->model, c->engine, hs_compute_dtype_name(dtype), hint);
        return HS_STATUS_OK;
    }
    return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                        "lane model %s on engine %s (%s) fails its check against f32: min cos "
                        "%.6f (tolerance %.4f), mean %.6f (%.4f), worst text %d%s; models[].check: "
                        "exclude keeps the server up without it",
                        c->model, c->engine, hs_compute_dtype_name(dtype), rep.cos_min, tol.cos_min,
                        rep.cos_mean, tol.cos_mean, rep.worst, hint);
}

void hs__server_checks_metrics(const struct hs_server *s, struct hs_buf *b)
{
    static const struct {
        const char *name, *help;
    } series[] = {
        {"cos_min", "Worst cosine of a lane to its model's f32 reference at load"},
        {"cos_mean", "Mean cosine of a lane to its model's f32 reference at load"},
        {"pass", "1 when the lane met its tolerance at load (0: it serves no traffic)"},
    };
    for (size_t m = 0; s->n_checks && m < sizeof series / sizeof series[0]; m++) {
        hs_buf_printf(b, "# HELP hetserve_lane_check_%s %s\n# TYPE hetserve_lane_check_%s gauge\n",
                      series[m].name, series[m].help, series[m].name);
        for (int i = 0; i < s->n_checks; i++) {
            const struct hs_lane_check *c = &s->checks[i];
            const double v = m == 0 ? c->cos_min : m == 1 ? c->cos_mean : (double)c->pass;
            hs_buf_printf(b,
                          "hetserve_lane_check_%s{model=\"%s\",engine=\"%s\",dtype=\"%s\"} %.7g\n",
                          series[m].name, c->model, c->engine, hs_compute_dtype_name(c->dtype), v);
        }
    }
}

void hs__server_boundary_metrics(const struct hs_server *s, struct hs_buf *b)
{
    static const char *const series[] = {"copy_seconds_total", "sync_seconds_total",
                                         "handovers_total"};
    static const char *const help[] = {
        "Activation copies across a split lane's engine boundary",
        "Syncs of the giving engine before its hand-overs across the boundary",
        "Activations handed over across the boundary"};
    bool any = false;
    for (int l = 0; l < s->n_lanes; l++) any |= hs_executor_n_boundaries(s->lanes[l].exec) > 0;
    for (int m = 0; any && m < 3; m++) {
        hs_buf_printf(b, "# HELP hetserve_boundary_%s %s\n# TYPE hetserve_boundary_%s counter\n",
                      series[m], help[m], series[m]);
        for (int l = 0; l < s->n_lanes; l++) {
            const struct hs_served_lane *sl = &s->lanes[l];
            for (int i = 0; i < hs_executor_n_boundaries(sl->exec); i++) {
                hs_engine_t from, to;
                hs_executor_boundary(sl->exec, i, &from, &to);
                int64_t v = atomic_load(m == 0   ? &sl->boundary_copy_ns[i]
                                        : m == 1 ? &sl->boundary_sync_ns[i]
                                                 : &sl->boundary_count[i]);
                hs_buf_printf(b,
                              "hetserve_boundary_%s{model=\"%s\",engine=\"%s\",from=\"%s\","
                              "to=\"%s\"} %.9g\n",
                              series[m], sl->sm->name, hs_engine_name(sl->engine),
                              hs_engine_name(from), hs_engine_name(to),
                              m < 2 ? (double)v / 1e9 : (double)v);
            }
        }
    }
    bool piped = false;
    for (int l = 0; l < s->n_lanes; l++)
        piped |= hs_executor_n_boundaries(s->lanes[l].exec) > 0 &&
                 hs_executor_opts(s->lanes[l].exec)->pipeline;
    if (!piped) return;
    hs_buf_printf(b, "# HELP hetserve_pipeline_wait_seconds_total Time a pipelined split lane's "
                     "batches waited for an engine another batch held\n"
                     "# TYPE hetserve_pipeline_wait_seconds_total counter\n");
    for (int l = 0; l < s->n_lanes; l++) {
        const struct hs_served_lane *sl = &s->lanes[l];
        if (hs_executor_n_boundaries(sl->exec) == 0 || !hs_executor_opts(sl->exec)->pipeline)
            continue;
        hs_buf_printf(b, "hetserve_pipeline_wait_seconds_total{model=\"%s\",engine=\"%s\"} %.9g\n",
                      sl->sm->name, hs_engine_name(sl->engine),
                      (double)atomic_load(&sl->wait_ns) / 1e9);
    }
}

struct hs_served_model *hs__server_model(struct hs_server *s, const char *name)
{
    if (!name || !*name) return &s->models[0];
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    return NULL;
}

static bool topo_excluded(void *ctx, int m, const char *engine)
{
    struct hs_server *s = ctx;
    return lane_excluded(s, &s->models[m], engine);
}

/* Translates the config's routes (names) into the router's (lane indexes). */
static hs_status router_opts(struct hs_server *s, struct hs_router_opts *o, struct hs_error *err)
{
    struct hs_topo t = {.cfg = &s->cfg,
                        .n_models = s->n_models,
                        .n_lanes = s->n_lanes,
                        .excluded = topo_excluded,
                        .excluded_ctx = s};
    for (int m = 0; m < s->n_models; m++) t.model_names[m] = s->models[m].name;
    for (int l = 0; l < s->n_lanes; l++) {
        t.lane_model[l] = (int)(s->lanes[l].sm - s->models);
        t.lane_engine[l] = s->lanes[l].engine_cfg;
    }
    return hs_topo_router_opts(&t, o, err);
}

/* The placement of models[mi]'s lane on engine e: single, or the split its config names. */
static hs_status lane_placement(struct hs_server *s, int mi, const struct hs_model *m,
                                hs_engine_t e, struct hs_placement *plan, struct hs_error *err)
{
    const struct hs_placement_cfg *p = &s->cfg.models[mi].placement;
    if (p->n_layers) {
        hs_engine_t eng[HS_CONFIG_MAX_ENGINES];
        int from[HS_CONFIG_MAX_ENGINES], to[HS_CONFIG_MAX_ENGINES];
        for (int r = 0; r < p->n_layers; r++) {
            eng[r] = hs__server_engine(s, p->layers[r].engine);
            from[r] = p->layers[r].from;
            to[r] = p->layers[r].to;
        }
        struct hs_error pe = {0};
        if (hs_placement_ranges(m, p->n_layers, eng, from, to, plan, &pe))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: models[%d].placement.layers: %s", mi,
                                pe.msg + strlen("placement: "));
    } else if (p->attention[0]) {
        hs_placement_modules(m, hs__server_engine(s, p->attention), hs__server_engine(s, p->ffn),
                             plan);
    } else {
        hs_placement_single(m, e, plan);
    }
    return HS_STATUS_OK;
}

static void log_plan_line(void *ctx, const char *text)
{
    hs_log_info("%s", text);
}

/* scheduler.profile: every local lane's buckets start from the profile's measured batch times
 * (the whole model at one sequence and at the bucket's full batch, full-length sequences) instead
 * of the configured initial throughput; lanes the profile did not measure keep it. */
static hs_status seed_from_profile(struct hs_server *s, const char *path, struct hs_error *err)
{
    struct hs_costs *costs = hs_malloc(sizeof *costs);
    if (!costs) return hs_error_set(err, HS_STATUS_NO_MEMORY, "scheduler.profile");
    hs_status st = hs_costs_load(path, costs, err);
    if (st) {
        hs_free(costs);
        return st;
    }
    for (int i = 0; i < s->n_lanes; i++) {
        const struct hs_served_lane *sl = &s->lanes[i];
        const struct hs_lane_opts *o = hs_sched_lane_opts(s->sched, i);
        if (!sl->exec) continue; /* a remote lane: its workers have their own */
        const struct hs_cost_lane *cl =
            hs_costs_lane(costs, hs_engine_name(sl->engine), o->model, NULL);
        if (!cl || !cl->ok) {
            hs_log_warn("scheduler.profile %s: no measured lane for %s on %s: it starts from "
                        "throughput_init_tokens_per_s",
                        path, o->model, sl->label);
            continue;
        }
        int seeded = 0;
        for (int k = 0; k <= o->n_buckets; k++) {
            int len = k < o->n_buckets ? o->buckets[k] : o->seq_max;
            if (len > o->seq_max ||
                (k == o->n_buckets && o->n_buckets && o->buckets[o->n_buckets - 1] >= len))
                continue;
            int cap = o->batch_max;
            if (o->batch_max_tokens / len < cap) cap = o->batch_max_tokens / len;
            if (cap < 2) cap = 2;
            double t1 = hs_costs_whole_ms(cl, 1, len) / 1e3,
                   t2 = hs_costs_whole_ms(cl, cap, len) / 1e3;
            if (hs_sched_lane_seed(s->sched, i, len, len, t1, (double)cap * len, t2) ==
                HS_STATUS_OK)
                seeded++;
        }
        double fixed, per_token;
        hs_sched_lane_fit(s->sched, i, o->buckets[0], &fixed, &per_token);
        hs_log_info("lane %s/%s: %d bucket(s) seeded from %s (bucket %d: %.2f ms + %.1f us/token)",
                    sl->label, o->model, seeded, path, o->buckets[0], fixed * 1e3, per_token * 1e6);
    }
    hs_free(costs);
    return HS_STATUS_OK;
}

hs_status hs_server_create(const struct hs_config *cfg, struct hs_server **out,
                           struct hs_error *err)
{
    *out = NULL;
    /* the lane checks' cpu f32 reference engine, made on first need; `fail` destroys it, so it
     * is NULL from before the first jump there */
    hs_engine_t ref_engine = NULL;
    hs_status st = hs_config_validate(cfg, err);
    if (st) return st;
    /* Before any engine starts or weight loads: a configuration that cannot fit is refused
     * with the numbers. */
    {
        struct hs_mem_plan *plan = hs_malloc(sizeof *plan);
        if (!plan) return hs_error_set(err, HS_STATUS_NO_MEMORY, "memory plan");
        st = hs_mem_plan_make(cfg, plan, err);
        if (!st) {
            hs_mem_plan_lines(plan, log_plan_line, NULL);
            st = hs_mem_plan_check(plan, err);
        }
        hs_free(plan);
        if (st) return st;
    }
    /* The environment's admin token wins over the file's, so that a secret need not be in it. */
    const char *token = getenv("HS_ADMIN_TOKEN");
    if (token && strlen(token) >= sizeof cfg->admin.token)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "HS_ADMIN_TOKEN: longer than %zu bytes",
                            sizeof cfg->admin.token - 1);
    struct hs_server *s = hs_calloc(1, sizeof *s);
    if (!s) return hs_error_set(err, HS_STATUS_NO_MEMORY, "server");
    s->cfg = *cfg;
    if (token && *token) snprintf(s->cfg.admin.token, sizeof s->cfg.admin.token, "%s", token);
    atomic_init(&s->draining, false);
    atomic_init(&s->next_id, 0);
    pthread_mutex_init(&s->inflight_mu, NULL);
    pthread_cond_init(&s->inflight_cv, NULL);
    pthread_mutex_init(&s->auth_mu, NULL);
    const struct hs_config *c = &s->cfg;

    /* the cores an unpinned sliced engine shares out: those this process may use */
    int avail[HS_ENGINE_MAX_CORES], n_avail = 0;
    {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            for (int k = 0; k < CPU_SETSIZE && n_avail < HS_ENGINE_MAX_CORES; k++)
                if (CPU_ISSET(k, &set)) avail[n_avail++] = k;
    }
    /* slice 0 of every engine at its config index (remote pools and lookups by index), then
     * the further slices */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->n_engines; i++) {
            const struct hs_engine_cfg *ec = &c->engines[i];
            const struct hs_engine_kind *kind = hs_engine_kind_find(ec->kind);
            if (ec->slices > 1 && ec->n_cores == 0 && ec->slices > n_avail && kind &&
                kind->slice_by == HS_SLICE_CORES) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "config: engines[%d].slices: %d slices need at least %d cores; "
                                  "engine '%s' is unpinned and this process may use %d",
                                  i, ec->slices, ec->slices, ec->name, n_avail);
                goto fail;
            }
            for (int k = pass; k < (pass ? ec->slices : 1); k++) {
                char name[48];
                hs_config_slice_name(ec, k, name, sizeof name);
                struct hs_engine_opts eo = {
                    .name = name, .device = ec->device, .device_name = ec->device_name};
                eo.n_cores = hs_config_slice(ec, k, avail, n_avail, eo.cores, &eo.threads);
                eo.n_borrow_cores = ec->n_borrow_cores;
                memcpy(eo.borrow_cores, ec->borrow_cores, sizeof eo.borrow_cores);
                eo.borrow_preempt = ec->borrow_preempt != 0;
                st = hs_engine_create(ec->kind, &eo, &s->engines[s->n_engines], err);
                if (st) {
                    if (err) {
                        char why[sizeof err->msg];
                        snprintf(why, sizeof why, "%s", err->msg);
                        char dev[48];
                        if (ec->device_name[0])
                            snprintf(dev, sizeof dev, "'%s'", ec->device_name);
                        else
                            snprintf(dev, sizeof dev, "%d", ec->device);
                        hs_error_set(err, st, "engine %s (kind %s, device %s): %s", name, ec->kind,
                                     dev, why);
                    }
                    goto fail;
                }
                s->engine_cfg[s->n_engines++] = i;
                if (ec->slices > 1)
                    hs_log_info("engine %s: slice %d of %s, %d core(s) from %d, %d thread(s)", name,
                                k, ec->name, eo.n_cores, eo.cores[0],
                                eo.threads > 0 ? eo.threads : eo.n_cores);
#ifdef HS_HAVE_REMOTE
                if (kind_remote(ec->kind) && (st = pool_create(ec, &s->pools[i], err))) goto fail;
#endif
            }
        }
    {
        /* each lane's dtype against its engine's device (slice 0 speaks for its slices), before
         * any model loads: the device's claim, as `hetserve devices` and `verify` show it */
        struct hs_engine_caps caps[HS_CONFIG_MAX_ENGINES];
        memset(caps, 0, sizeof caps);
        for (int i = s->n_engines - 1; i >= 0; i--)
            hs_engine_caps(s->engines[i], &caps[s->engine_cfg[i]]);
        if ((st = hs_config_check_devices(c, caps, err))) goto fail;
    }
    s->router_role = true;
    for (int i = 0; i < c->n_engines; i++) s->router_role &= kind_remote(c->engines[i].kind);
    s->internal_api = c->server.internal && !s->router_role;

    struct hs_lane_opts lanes[HS_SCHED_MAX_LANES];
    memset(lanes, 0, sizeof lanes);
    for (int i = 0; i < c->n_models; i++) {
        struct hs_executor *ref_exec = NULL; /* this model's f32 reference, for lane checks */
        const struct hs_model_cfg *mc = &c->models[i];
        struct hs_served_model *sm = &s->models[i];
        /* a model only on remote engines needs its tokenizer and metadata, not its weights */
        bool meta_only = true;
        for (int j = 0; j < (mc->n_engines ? mc->n_engines : 1); j++)
            meta_only &=
                kind_remote(hs_config_engine(c, mc->n_engines ? mc->engines[j] : mc->engine)->kind);
        st = hs_model_load_pooled(mc->path, !meta_only, mc->pooling, &sm->model, err);
        if (st) goto fail;
        s->n_models++;
        if ((st = hs__tasks_load(sm->model, &sm->tasks, err))) goto fail;
        if (mc->n_dimensions) {
            char label[160];
            snprintf(label, sizeof label, "config: models[%d].dimensions", i);
            if ((st = hs__tasks_set_dims(sm->tasks, mc->dimensions, mc->n_dimensions,
                                         sm->model->config.dims.hidden, label, err)))
                goto fail;
        }
        snprintf(sm->name, sizeof sm->name, "%s", mc->name[0] ? mc->name : sm->model->name);
        for (int k = 0; k < i; k++)
            if (!strcmp(s->models[k].name, sm->name)) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: two models are named '%s'",
                                  sm->name);
                goto fail;
            }
        if (!meta_only && (st = auto_quantize(c, mc, sm->name, sm->model, err))) goto fail;
        sm->engine = hs__server_engine(s, mc->engine);
        sm->lane = s->n_lanes;
        int n_on = mc->n_engines ? mc->n_engines : 1;
        for (int j = 0; j < n_on; j++) {
            const char *en_cfg = mc->n_engines ? mc->engines[j] : mc->engine;
            const struct hs_engine_cfg *ec = hs_config_engine(c, en_cfg);
            if (kind_remote(ec->kind)) {
#ifdef HS_HAVE_REMOTE
                st = remote_lanes(s, sm, (int)(ec - c->engines), lanes, err);
#else
                st = hs_error_set(err, HS_STATUS_UNSUPPORTED, "remote engines are not built in");
#endif
                if (st) {
                    hs_executor_free(ref_exec);
                    goto fail;
                }
                continue;
            }
            /* a lane on every slice of the engine (one when it has no slices) */
            for (int ei = 0; ei < s->n_engines; ei++) {
                if (s->engine_cfg[ei] != (int)(ec - c->engines)) continue;
                if (s->n_lanes >= HS_SCHED_MAX_LANES) {
                    st =
                        hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                     "config: more than %d (model, engine) pairs (slices included)",
                                     HS_SCHED_MAX_LANES);
                    hs_executor_free(ref_exec);
                    goto fail;
                }
                const char *en = hs_engine_name(s->engines[ei]);
                struct hs_served_lane *sl = &s->lanes[s->n_lanes];
                sl->sm = sm;
                sl->engine = s->engines[ei];
                sl->worker = -1;
                sl->engine_cfg = s->engine_cfg[ei];
                snprintf(sl->label, sizeof sl->label, "%s", en);
                int lane_batch_max = ec->batch_max > 0 ? ec->batch_max : c->batching.batch_max;
                int lane_tokens_max =
                    ec->batch_max_tokens > 0 ? ec->batch_max_tokens : c->batching.batch_max_tokens;
                int seq_max = sm->model->config.max_seq_len;
                int batch_max = lane_batch_max, tokens_max = lane_tokens_max;
                for (int k = 0; k < ec->n_shapes; k++) {
                    if (ec->shapes[k].batch > batch_max) batch_max = ec->shapes[k].batch;
                    if (ec->shapes[k].batch * ec->shapes[k].seq > tokens_max)
                        tokens_max = ec->shapes[k].batch * ec->shapes[k].seq;
                }
                if (tokens_max < seq_max) tokens_max = seq_max;
                struct hs_placement plan;
                st = lane_placement(s, i, sm->model, sl->engine, &plan, err);
                if (st) {
                    hs_executor_free(ref_exec);
                    goto fail;
                }
                /* scheduler.preempt: one more slot, the last */
                const int preempt = hs_config_lane_preempts(c, mc);
                struct hs_executor_opts xo = {.batch_max = batch_max,
                                              .tokens_max = tokens_max,
                                              .seq_max = seq_max,
                                              .slots = hs_config_lane_slots(mc, ec) + preempt,
                                              .dtype = (enum hs_dtype)hs_config_lane_dtype(mc, ec),
                                              .pipeline = mc->placement.pipeline != 0,
                                              .preempt = preempt != 0};
                st = hs_executor_create(sm->model, &plan, &xo, &sl->exec, err);
                if (st) {
                    hs_executor_free(ref_exec);
                    goto fail;
                }
                bool keep = true;
                st = check_lane(s, mc, sm, sl, xo.dtype, &ref_engine, &ref_exec, &keep, err);
                if (st || !keep) {
                    hs_executor_free(sl->exec);
                    memset(sl, 0, sizeof *sl);
                }
                if (st) {
                    hs_executor_free(ref_exec);
                    goto fail;
                }
                if (!keep) continue;
                /* One batch before serving: the first run's costs (page faults on the weights,
                 * kernels set up) would otherwise land on the first request and on the service-time
                 * model, which a router then trusts for a lane it stops choosing. */
                float *warm =
                    hs_malloc(sizeof(float) * (size_t)hs_pooled_dim(&sm->model->config.dims));
                const char *text = "warm up";
                /* (a pinned engine pins its caller: this thread's CPUs are put back after) */
                cpu_set_t cpus;
                bool saved = pthread_getaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0;
                if (warm) hs_executor_embed_texts(sl->exec, &text, 1, warm, NULL, NULL);
                warm_shapes(c, ec, sl, seq_max);
                if (saved) pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
                hs_free(warm);
                s->n_lanes++;

                struct hs_lane_opts *o = &lanes[s->n_lanes - 1];
                hs_topo_lane_opts(c, ec, sm->name, &sm->model->config, o);
                o->engine = sl->label;
                o->slots = xo.slots - preempt;
                o->preempt = preempt != 0;
                o->runner = (struct hs_runner){.run = exec_run, .ctx = sl};
                if (hs_executor_pipelined(sl->exec)) { /* a batch forms when it can start */
                    o->runner.gate = exec_gate;
                    o->runner.ungate = exec_ungate;
                }
                hs_log_info("model %s (%s) on engine %s (%s): dim %d, max %d tokens, %d slot(s)%s",
                            sm->name, mc->path, en, hs_compute_dtype_name(xo.dtype), o->dim,
                            seq_max, o->slots, preempt ? " and a preempting one" : "");
            }
        }
        hs_executor_free(ref_exec);
        if (sm->lane == s->n_lanes) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "model %s has no lane left: every one failed its check", sm->name);
            goto fail;
        }
    }
    hs_engine_destroy(ref_engine);
    ref_engine = NULL;
    {
        /* slices and engines with equal prep keys hold one copy of the weights: say so */
        int alive = 0;
        int64_t shared = 0;
        hs_engine_prep_counts(&alive, &shared);
        hs_log_info("weights: %d stage preparation(s) held, %lld prepare(s) served by sharing one",
                    alive, (long long)shared);
    }
    struct hs_sched_observer obs = {on_batch, s};
    st = hs_sched_create(lanes, s->n_lanes, &obs, &s->sched, err);
    if (st) goto fail;
    if (c->scheduler.profile[0]) {
        st = seed_from_profile(s, c->scheduler.profile, err);
        if (st) goto fail;
    }
    {
        struct hs_router_opts *ro = hs_malloc(sizeof *ro);
        if (!ro) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "router options");
            goto fail;
        }
        st = router_opts(s, ro, err);
        if (!st) st = hs_router_create(s->sched, ro, &s->router, err);
        hs_free(ro);
        if (st) goto fail;
    }
    st = hs_dispatch_create(s->sched, s->router, &s->dispatch, err);
    if (st) goto fail;
#ifdef HS_HAVE_REMOTE
    for (int i = 0; i < c->n_engines; i++)
        if (s->pools[i]) hs_remote_pool_start(s->pools[i], on_lane_change, s);
#endif
    st = hs_metrics_create(s->sched, &s->metrics, err);
    if (st) goto fail;
    hs_metrics_set_router(s->metrics, s->router);
    st = hs__predict_create(s, &s->predict, err);
    if (st) goto fail;
    st = hs__ocr_create(s, &s->ocr, err);
    if (st) goto fail;
    st = hs_server_reload_auth(s, c, err);
    if (st) goto fail;
    if (c->server.trace_file[0]) {
        st = hs_trace_open(c->server.trace_file, s->sched, &s->trace, err);
        if (st) goto fail;
    }
    if (c->server.capture.file[0]) {
        struct hs_capture_opts co = {.path = c->server.capture.file,
                                     .sample_ratio = c->server.capture.sample_ratio,
                                     .texts = c->server.capture.texts,
                                     .max_bytes = c->server.capture.max_bytes,
                                     .buffer_bytes = c->server.capture.buffer_bytes};
        st = hs_capture_open(&co, &s->capture, err);
        if (st) goto fail;
    }
    *out = s;
    return HS_STATUS_OK;
fail:
    hs_engine_destroy(ref_engine);
    hs_server_destroy(s);
    return st;
}

/* The cores no CPU engine is pinned to, within the process's allowed CPUs: where the HTTP and
 * tokenization threads run, so that they never take a core from an engine's parallel regions.
 * False (run anywhere) when a CPU engine is unpinned (it uses every core) or nothing is left. */
static bool http_cores(const struct hs_server *s, cpu_set_t *rest)
{
    CPU_ZERO(rest);
    if (sched_getaffinity(0, sizeof *rest, rest) != 0) return false;
    bool pinned = false;
    for (int i = 0; i < s->cfg.n_engines; i++) {
        const struct hs_engine_cfg *ec = &s->cfg.engines[i];
        if (strcmp(ec->kind, "cpu") != 0) continue;
        if (ec->n_cores == 0) return false;
        for (int k = 0; k < ec->n_cores; k++)
            if (ec->cores[k] >= 0 && ec->cores[k] < CPU_SETSIZE) CPU_CLR(ec->cores[k], rest);
        pinned = true;
    }
    return pinned && CPU_COUNT(rest) > 0;
}

hs_status hs_server_start(struct hs_server *s, struct hs_error *err)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->cfg.server.port);
    const char *host = s->cfg.server.host;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "server.host '%s' is not an IPv4 address", s->cfg.server.host);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    /* Every connection is a file descriptor: raise the soft open-file limit towards what
     * connections_max needs (plus room for the model files, logs and the daemon's own), within
     * the hard limit; fewer connections are allowed when the hard limit is lower. */
    unsigned conn_max = (unsigned)s->cfg.server.connections_max;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)conn_max + 256;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
            struct rlimit nl = {to, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl.rlim_cur = to;
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            unsigned fit = rl.rlim_cur > 512 ? (unsigned)(rl.rlim_cur - 256) : 256;
            hs_log_warn("open-file limit %llu: at most %u connections instead of %u",
                        (unsigned long long)rl.rlim_cur, fit, conn_max);
            conn_max = fit;
        }
    }
    /* MHD's threads inherit the affinity of the thread that creates them */
    cpu_set_t rest, saved;
    bool moved = http_cores(s, &rest) &&
                 pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0 &&
                 pthread_setaffinity_np(pthread_self(), sizeof rest, &rest) == 0;
    if (moved) {
        char list[256];
        size_t n = 0;
        for (int c = 0; c < CPU_SETSIZE && n + 8 < sizeof list; c++)
            if (CPU_ISSET(c, &rest))
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", n ? "," : "", c);
        hs_log_info("HTTP and tokenization threads on cores %s (off the CPU engines' cores)", list);
    }
    /* ... and its scheduling policy */
    int policy = SCHED_OTHER;
    struct sched_param prm = {0};
    bool batched =
        s->cfg.server.http_yield && pthread_getschedparam(pthread_self(), &policy, &prm) == 0 &&
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0}) == 0;
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)s->cfg.server.port, NULL, NULL, hs__http_handler, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.server.threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.server.connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, conn_max, MHD_OPTION_NOTIFY_COMPLETED, hs__http_completed, s,
        MHD_OPTION_END);
    if (moved) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    if (batched) pthread_setschedparam(pthread_self(), policy, &prm);
    if (!s->daemon)
        return hs_error_set(err, HS_STATUS_IO, "cannot listen on %s:%d (in use?)",
                            s->cfg.server.host, s->cfg.server.port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->cfg.server.port;
    return HS_STATUS_OK;
}

int hs_server_port(const struct hs_server *s)
{
    return s->port;
}

hs_status hs_server_shutdown(struct hs_server *s)
{
    if (!s->daemon) return HS_STATUS_OK;
    int64_t t0 = hs_now_ns();
    atomic_store(&s->draining, true);
    /* Stop accepting; open connections keep being served. The listening socket stops listening
     * now (shutdown: new connections are refused at once) but its descriptor is closed only
     * once the daemon has stopped: a pool thread between two polls may still hold the number,
     * which a close would hand to the next socket or file opened. */
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET) shutdown(ls, SHUT_RDWR);
    int timeout_ms = s->cfg.limits.drain_timeout_ms;
    /* A hung engine (injected fault) would hold the drain: faults end with the server. */
    for (int i = 0; i < s->n_engines; i++) hs_engine_set_fault(s->engines[i], NULL);
    hs_status st = hs_sched_drain(s->sched, timeout_ms);
    /* What the drain could not finish (a batch in a hung device) is answered now, while the
     * daemon still runs: a suspended connection may only be resumed on a running daemon, so
     * every request must be answered and its response sent before MHD_stop_daemon. */
    if (st != HS_STATUS_OK) {
        hs_log_warn("shutdown: drain did not finish within %d ms; answering the rest", timeout_ms);
        hs_sched_abort(s->sched, "server shutting down: drain timed out");
    }
    /* The pipelines finish what runs and answer what is queued, while the daemon runs. */
    hs__ocr_drain(s->ocr);
    /* Every answered request still has to reach its client (a bound past the drain's). */
    int64_t until = t0 + ((int64_t)timeout_ms + HS_SERVER_SEND_WAIT_MS) * 1000000;
    pthread_mutex_lock(&s->inflight_mu);
    while (s->inflight > 0) {
        int64_t now = hs_now_ns();
        if (now >= until) {
            st = HS_STATUS_TIMEOUT;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + 5000000; /* re-check every 5 ms */
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&s->inflight_cv, &s->inflight_mu, &ts);
    }
    const long long unsent = (long long)s->inflight;
    pthread_mutex_unlock(&s->inflight_mu);
    if (st != HS_STATUS_OK && unsent > 0)
        hs_log_warn("shutdown: %lld response(s) still unsent after the drain", unsent);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    if (ls != MHD_INVALID_SOCKET) close(ls);
    return st;
}

void hs_server_destroy(struct hs_server *s)
{
    if (!s) return;
    /* a running daemon is shut down first: requests are answered before it stops */
    if (s->daemon) hs_server_shutdown(s);
    for (int i = 0; i < s->n_engines; i++) hs_engine_set_fault(s->engines[i], NULL);
#ifdef HS_HAVE_REMOTE
    for (int i = 0; i < HS_CONFIG_MAX_ENGINES; i++) hs_remote_pool_stop(s->pools[i]);
#endif
    /* answers what is queued: done callbacks use the dispatch and the router */
    hs_sched_destroy(s->sched);
    hs_dispatch_free(s->dispatch);
#ifdef HS_HAVE_REMOTE
    for (int i = 0; i < HS_CONFIG_MAX_ENGINES; i++) hs_remote_pool_free(s->pools[i]);
#endif
    hs_router_free(s->router);
    hs_metrics_free(s->metrics);
    hs__predict_free(s->predict);
    hs__ocr_free(s->ocr);
    hs_trace_close(s->trace);
    hs_capture_close(s->capture);
    for (int i = 0; i < s->n_lanes; i++) hs_executor_free(s->lanes[i].exec);
    for (int i = 0; i < s->n_models; i++) {
        hs__tasks_free(s->models[i].tasks);
        hs_model_free(s->models[i].model);
    }
    for (int i = 0; i < s->n_engines; i++) hs_engine_destroy(s->engines[i]);
    pthread_mutex_destroy(&s->inflight_mu);
    hs_auth_unref(s->auth);
    pthread_mutex_destroy(&s->auth_mu);
    pthread_cond_destroy(&s->inflight_cv);
    hs_free(s);
}
