/* Server lifecycle: engines, models, executors, scheduler lanes, daemon start and drain. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/server-impl.h"

/* The executor-facing adapter the scheduler's batcher calls: one slot per lane. */
static hs_status exec_run(void *ctx, const struct hs_batch *b, float *out,
                          struct hs_batch_timing *t, struct hs_error *err)
{
    struct hs_served_model *sm = ctx;
    struct hs_exec_timing et = {0};
    hs_status st = hs_executor_run(sm->exec, 0, b, out, &et, err);
    t->copy_in_ns = et.copy_in_ns;
    t->compute_ns = et.compute_ns + et.transfer_ns;
    t->copy_out_ns = et.copy_out_ns;
    return st;
}

static void on_batch(void *ctx, const struct hs_batch_report *r)
{
    struct hs_server *s = ctx;
    hs_metrics_batch(s->metrics, r);
    hs_trace_batch(s->trace, r);
}

static enum hs_dtype dtype_of(const char *name)
{
    if (!strcmp(name, "f16")) return HS_DTYPE_F16;
    if (!strcmp(name, "bf16")) return HS_DTYPE_BF16;
    return HS_DTYPE_F32;
}

static hs_engine_t engine_by_name(struct hs_server *s, const char *name)
{
    for (int i = 0; i < s->n_engines; i++)
        if (!strcmp(hs_engine_name(s->engines[i]), name)) return s->engines[i];
    return NULL;
}

static const struct hs_engine_cfg *engine_cfg(const struct hs_config *c, const char *name)
{
    for (int i = 0; i < c->n_engines; i++)
        if (!strcmp(c->engines[i].name, name)) return &c->engines[i];
    return NULL;
}

hs_status hs_server_create(const struct hs_config *cfg, struct hs_server **out,
                           struct hs_error *err)
{
    *out = NULL;
    hs_status st = hs_config_validate(cfg, err);
    if (st) return st;
    struct hs_server *s = hs_calloc(1, sizeof *s);
    if (!s) return hs_error_set(err, HS_STATUS_NO_MEMORY, "server");
    s->cfg = *cfg;
    atomic_init(&s->draining, false);
    atomic_init(&s->next_id, 0);
    pthread_mutex_init(&s->inflight_mu, NULL);
    pthread_cond_init(&s->inflight_cv, NULL);
    const struct hs_config *c = &s->cfg;

    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *ec = &c->engines[i];
        struct hs_engine_opts eo = {
            .name = ec->name, .threads = ec->threads, .n_cores = ec->n_cores};
        memcpy(eo.cores, ec->cores, sizeof eo.cores);
        st = hs_engine_create(ec->kind, &eo, &s->engines[i], err);
        if (st) goto fail;
        s->n_engines++;
    }

    struct hs_lane_opts lanes[HS_CONFIG_MAX_MODELS];
    memset(lanes, 0, sizeof lanes);
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *mc = &c->models[i];
        struct hs_served_model *sm = &s->models[i];
        st = hs_model_load(mc->path, &sm->model, err);
        if (st) goto fail;
        s->n_models++;
        snprintf(sm->name, sizeof sm->name, "%s", mc->name[0] ? mc->name : sm->model->name);
        for (int k = 0; k < i; k++)
            if (!strcmp(s->models[k].name, sm->name)) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: two models are named '%s'",
                                  sm->name);
                goto fail;
            }
        sm->engine = engine_by_name(s, mc->engine);
        const struct hs_engine_cfg *ec = engine_cfg(c, mc->engine);
        int seq_max = sm->model->config.max_seq_len;
        int batch_max = c->batching.batch_max, tokens_max = c->batching.batch_max_tokens;
        for (int k = 0; k < ec->n_shapes; k++) {
            if (ec->shapes[k].batch > batch_max) batch_max = ec->shapes[k].batch;
            if (ec->shapes[k].batch * ec->shapes[k].seq > tokens_max)
                tokens_max = ec->shapes[k].batch * ec->shapes[k].seq;
        }
        if (tokens_max < seq_max) tokens_max = seq_max;
        struct hs_placement plan;
        hs_placement_single(sm->model, sm->engine, &plan);
        struct hs_executor_opts xo = {.batch_max = batch_max,
                                      .tokens_max = tokens_max,
                                      .seq_max = seq_max,
                                      .slots = 1,
                                      .dtype = dtype_of(mc->dtype)};
        st = hs_executor_create(sm->model, &plan, &xo, &sm->exec, err);
        if (st) goto fail;
        sm->lane = i;

        struct hs_lane_opts *o = &lanes[i];
        o->engine = mc->engine;
        o->model = sm->name;
        o->dim = sm->model->config.dims.hidden;
        o->seq_max = seq_max;
        o->pad_id = sm->model->config.pad_token_id;
        o->batch_window_us = c->batching.batch_window_us;
        o->batch_max = c->batching.batch_max;
        o->batch_max_tokens = c->batching.batch_max_tokens;
        o->n_buckets = c->batching.n_buckets;
        memcpy(o->buckets, c->batching.buckets, sizeof c->batching.buckets);
        o->n_shapes = ec->n_shapes;
        memcpy(o->shapes, ec->shapes, sizeof ec->shapes);
        o->queue_max = c->limits.queue_max;
        o->shed_batch_ratio = c->scheduler.shed_batch_ratio;
        o->throughput_init_tokens_per_s = c->scheduler.throughput_init_tokens_per_s;
        o->throughput_ewma_alpha = c->scheduler.throughput_ewma_alpha;
        o->runner = (struct hs_runner){exec_run, sm};
        hs_log_info("model %s (%s) on engine %s: dim %d, max %d tokens", sm->name, mc->path,
                    mc->engine, o->dim, seq_max);
    }
    struct hs_sched_observer obs = {on_batch, s};
    st = hs_sched_create(lanes, c->n_models, &obs, &s->sched, err);
    if (st) goto fail;
    st = hs_metrics_create(s->sched, &s->metrics, err);
    if (st) goto fail;
    st = hs__predict_create(s, &s->predict, err);
    if (st) goto fail;
    if (c->server.trace_file[0]) {
        st = hs_trace_open(c->server.trace_file, s->sched, &s->trace, err);
        if (st) goto fail;
    }
    *out = s;
    return HS_STATUS_OK;
fail:
    hs_server_destroy(s);
    return st;
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
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)s->cfg.server.port, NULL, NULL, hs__http_handler, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.server.threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.server.connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, hs__http_completed, s, MHD_OPTION_END);
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
    /* Stop accepting: close the listening socket; open connections keep being served. */
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    int timeout_ms = s->cfg.limits.drain_timeout_ms;
    hs_status st = hs_sched_drain(s->sched, timeout_ms);
    /* Every answered request still has to reach its client. */
    int64_t until = t0 + (int64_t)timeout_ms * 1000000;
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
    pthread_mutex_unlock(&s->inflight_mu);
    if (st != HS_STATUS_OK) hs_log_warn("shutdown: drain did not finish within %d ms", timeout_ms);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    return st;
}

void hs_server_destroy(struct hs_server *s)
{
    if (!s) return;
    if (s->daemon) MHD_stop_daemon(s->daemon);
    hs_sched_destroy(s->sched);
    hs_metrics_free(s->metrics);
    hs__predict_free(s->predict);
    hs_trace_close(s->trace);
    for (int i = 0; i < s->n_models; i++) {
        hs_executor_free(s->models[i].exec);
        hs_model_free(s->models[i].model);
    }
    for (int i = 0; i < s->n_engines; i++) hs_engine_destroy(s->engines[i]);
    pthread_mutex_destroy(&s->inflight_mu);
    pthread_cond_destroy(&s->inflight_cv);
    hs_free(s);
}
