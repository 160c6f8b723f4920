/* HTTP endpoints over libmicrohttpd.
 *
 * One table (endpoints[], near the end) names every endpoint: path, method, flags, and the
 * two calls that serve it. Life of a connection's request: the first handler call creates a
 * per-request arena holding everything (body, token ids, the job and its scheduler requests,
 * output rows, the response body); body chunks are appended on the next calls; the last call
 * runs the endpoint's begin: parse, validate, tokenize and dispatch. The connection is then
 * suspended until the job's completion resumes it; the handler runs once more, the endpoint's
 * finish post-processes and queues the response. When the response has been sent
 * (notify-completed), the arena's owner reference is dropped; the arena is freed in one call
 * once the scheduler has let go of every request made for the connection as well.
 *
 * Where a request goes, whether it is retried or shadowed, is not decided here: the endpoint
 * hands a job (sched/dispatch.h) to the dispatch and gets exactly one completion back
 * (hs__conn_dispatch). The connection is the job's owner: the job's scheduler requests are
 * allocated in its arena and each holds a reference on it (conn->refs), so a shadow copy may
 * finish after the response was sent. Responses carry X-Engine (the engine that served) and
 * X-Route ("route;policy=...") with X-Route-Reason, the answering job's decision in words.
 * POST /predict (predict.c) runs its two cascade stages as two jobs, one after the other.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/auth.h"
#include "model/seqcls.h"
#include "server/dashboard.h"
#include "server/kserve.h"
#include "server/server-impl.h"

struct conn;

/* One row of the endpoint table (near the end of the file). */
struct endpoint {
    const char *path;
    const char *method;                        /* "GET" or "POST" */
    unsigned flags;                            /* EP_* */
    enum MHD_Result (*begin)(struct conn *k);  /* the request is whole */
    enum MHD_Result (*finish)(struct conn *k); /* (optional) its job was answered */
};

enum {
    EP_TIMED = 1u << 0,  /* responses carry Server-Timing */
    EP_MODEL = 1u << 1,  /* runs a model: request metrics and a trace line */
    EP_OPENAI = 1u << 2, /* OpenAI's schema (else TEI's) */
    EP_KSERVE = 1u << 3, /* the Open Inference Protocol (kserve.c): errors {"error": "..."} */
    EP_PREFIX = 1u << 4, /* the path is a prefix ("/v2/models/"): the handler reads the rest */
    /* API keys (server/auth.h): every endpoint needs one, but */
    EP_PROBE = 1u << 5,   /* probes: as auth.probes says */
    EP_METRICS = 1u << 6, /* metrics: as auth.metrics says */
    EP_NOKEY = 1u << 7,   /* never: admin (admin.token) and the internal API */
    EP_IMAGE = 1u << 8,   /* the body is the input (an image): captured (server/capture.h) */
};

/* /embed: one; /predict: the small stage and the big one */
#define CONN_MAX_JOBS 2

struct conn {
    struct hs_server *srv;
    struct MHD_Connection *mhd;
    struct hs_arena *arena;
    const struct endpoint *ep; /* NULL: no such path */
    const char *url;
    uint64_t id;
    int64_t ts[HS_TS_COUNT]; /* the answering job's, once it has one */
    int http_status;
    int lane;

    char *body;
    size_t body_len, body_cap;
    bool body_too_big;
    long long body_declared; /* Content-Length, -1 when the request has none */
    int64_t discarded;       /* bytes of a refused body read and dropped (lingering close) */
    bool accepted; /* counted in srv->inflight: the drain on SIGTERM waits for its response */

    /* model jobs (sched/dispatch.h) */
    struct hs_job *job; /* the one the response answers: the last dispatched */
    struct hs_job *jobs[CONN_MAX_JOBS];
    int n_jobs;
    struct hs_served_model *sm;
    atomic_int refs; /* the owner's, plus one per scheduler request of its jobs */
    bool base64;
    bool post_normalize; /* L2-normalize in post-processing (model does not) */
    int dimensions;      /* rows cut to this many (0: the model's) */
    bool renormalize;    /* the cut is L2-normalized again */
    int prompt_tokens;
    struct hs_auth *auth;          /* the key set it was admitted by (a reference), or NULL */
    const struct hs_auth_key *key; /* its key; NULL: auth off or an open endpoint */
    int tenant_tokens;             /* input tokens its jobs took from the tenant's bucket */
    bool tenant_inflight;          /* a job hs_auth_job admitted, not yet done */
    pthread_mutex_t mu;
    bool mu_init, submitted, done, suspended;

    /* POST /predict (predict.c): its state, one extra response header, an X-Route suffix */
    void *predict;
    const char *x_header, *x_value, *route_note;
    const char *x_engine; /* X-Engine of a request not routed to a lane (pipelines) */
};

static void conn_answer(struct conn *k);

/* ---------------------------------------------------------------------------------------------
 * connection memory
 */

static void conn_free_arena(struct conn *k)
{
    if (k->mu_init) pthread_mutex_destroy(&k->mu);
    hs_auth_unref(k->auth);
    hs_arena_destroy(k->arena); /* k lives in it */
}

static void conn_unref(struct conn *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1) conn_free_arena(k);
}

static struct conn *conn_new(struct hs_server *s, struct MHD_Connection *c)
{
    struct hs_arena *a = hs_arena_create(16384);
    if (!a) return NULL;
    struct conn *k = hs_arena_calloc(a, 1, sizeof *k);
    if (!k) {
        hs_arena_destroy(a);
        return NULL;
    }
    k->srv = s;
    k->mhd = c;
    k->arena = a;
    k->lane = -1;
    atomic_init(&k->refs, 1);
    k->id = atomic_fetch_add(&s->next_id, 1) + 1;
    k->ts[HS_TS_RECEIVED] = hs_now_ns();
    return k;
}

/* The request is whole (or answered at once): from now on the drain waits for its response.
 * Not before: a client that stops in the middle of its body (or whose close microhttpd misses,
 * which happens when the close arrives with the last bytes) would hold the drain until the
 * connection times out, and a request not yet received is not accepted. */
static void conn_accept(struct conn *k)
{
    if (k->accepted) return;
    k->accepted = true;
    pthread_mutex_lock(&k->srv->inflight_mu);
    k->srv->inflight++;
    pthread_mutex_unlock(&k->srv->inflight_mu);
}

/* ---------------------------------------------------------------------------------------------
 * responses
 */

static const char *error_type(int status)
{
    switch (status) {
    case 404:
        return "not_found_error";
    case 401:
        return "authentication_error";
    case 403:
        return "forbidden";
    case 405:
        return "method_not_allowed";
    case 413:
        return "payload_too_large";
    case 429:
        return "overloaded_error";
    case 503:
        return "unavailable_error";
    case 504:
        return "timeout_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static void server_timing(struct conn *k, char *out, size_t cap)
{
    size_t n = 0;
    int64_t prev = k->ts[HS_TS_RECEIVED];
    for (int i = 1; i < HS_TS_COUNT && n < cap; i++) {
        if (!k->ts[i] || k->ts[i] < prev) continue;
        n += (size_t)snprintf(out + n, cap - n, "%s%s;dur=%.3f", n ? ", " : "",
                              hs_ts_name((enum hs_ts)i), hs_ns_to_ms(k->ts[i] - prev));
        prev = k->ts[i];
    }
    if (n < cap)
        n += (size_t)snprintf(out + n, cap - n, "%stotal;dur=%.3f", n ? ", " : "",
                              hs_ns_to_ms(prev - k->ts[HS_TS_RECEIVED]));
    /* a split lane's boundaries, parts of compute: the copy across each and the giving
     * engine's sync before it */
    const struct hs_request *r = k->job ? k->job->req : NULL;
    if (!r || r->lane < 0 || r->lane >= k->srv->n_lanes) return;
    const struct hs_executor *x = k->srv->lanes[r->lane].exec;
    for (int i = 0; i < r->n_boundaries && i < hs_executor_n_boundaries(x) && n < cap; i++) {
        hs_engine_t a, b;
        hs_executor_boundary(x, i, &a, &b);
        n += (size_t)snprintf(out + n, cap - n,
                              ", boundary_copy;desc=\"%s>%s\";dur=%.3f, boundary_sync;desc=\"%s\";"
                              "dur=%.3f",
                              hs_engine_name(a), hs_engine_name(b),
                              hs_ns_to_ms(r->boundary_copy_ns[i]), hs_engine_name(a),
                              hs_ns_to_ms(r->boundary_sync_ns[i]));
    }
    /* a pipelined split: the time its batch waited for an engine the batch before held */
    if (x && hs_executor_opts(x)->pipeline && hs_executor_n_boundaries(x) > 0 && n < cap)
        n += (size_t)snprintf(out + n, cap - n, ", engine_wait;dur=%.3f", hs_ns_to_ms(r->wait_ns));
}

static enum MHD_Result send_buf(struct conn *k, int status, struct hs_buf *b, const char *ctype,
                                double retry_after_s)
{
    if (b->oom) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"code\":500}}";
        status = 500;
        b->data = (char *)oom;
        b->len = sizeof oom - 1;
    }
    k->http_status = status;
    struct MHD_Response *r = MHD_create_response_from_buffer(b->len, b->data ? b->data : (char *)"",
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%" PRIu64, k->id);
    MHD_add_response_header(r, "X-Request-Id", tmp);
    if (k->x_header && k->x_value) MHD_add_response_header(r, k->x_header, k->x_value);
    if (k->x_engine) MHD_add_response_header(r, "X-Engine", k->x_engine);
    if (k->ep && (k->ep->flags & EP_TIMED)) {
        server_timing(k, tmp, sizeof tmp);
        MHD_add_response_header(r, "Server-Timing", tmp);
    }
    if (k->job && k->job->routed) {
        const struct hs_route_decision *d = &k->job->dec;
        if (d->lane >= 0) MHD_add_response_header(r, "X-Engine", k->srv->lanes[d->lane].label);
        snprintf(tmp, sizeof tmp, "%s;policy=%s%s%s",
                 hs_router_route_name(k->srv->router, d->route), hs_route_policy_name(d->policy),
                 k->route_note ? ";" : "", k->route_note ? k->route_note : "");
        MHD_add_response_header(r, "X-Route", tmp);
        MHD_add_response_header(r, "X-Route-Reason", d->reason);
    }
    if (status == 429 || status == 503) {
        int secs = (int)ceil(retry_after_s);
        if (secs < k->srv->cfg.scheduler.retry_after_min_s)
            secs = k->srv->cfg.scheduler.retry_after_min_s;
        snprintf(tmp, sizeof tmp, "%d", secs);
        MHD_add_response_header(r, "Retry-After", tmp);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405 && k->ep) MHD_add_response_header(r, "Allow", k->ep->method);
    enum MHD_Result ret = MHD_queue_response(k->mhd, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct conn *k, int status, double retry_after_s, const char *fmt,
                                  ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(struct conn *k, int status, double retry_after_s, const char *fmt,
                                  ...)
{
    char msg[HS__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 256 + strlen(msg));
    if (k->ep && (k->ep->flags & EP_KSERVE))
        hs__kserve_error_body(&b, msg);
    else
        hs_json_error(&b, msg, error_type(status), status);
    return send_buf(k, status, &b, "application/json", retry_after_s);
}

static int status_to_http(hs_status st)
{
    switch (st) {
    case HS_STATUS_OK:
        return 200;
    case HS_STATUS_INVALID_INPUT:
    case HS_STATUS_INVALID_ARGUMENT:
        return 400;
    case HS_STATUS_NOT_FOUND:
        return 404;
    case HS_STATUS_FORBIDDEN:
        return 403;
    case HS_STATUS_TOO_LONG:
        return 413;
    case HS_STATUS_OVERLOADED:
        return 429;
    case HS_STATUS_SHUTDOWN:
        return 503;
    case HS_STATUS_TIMEOUT:
        return 504;
    default:
        return 500;
    }
}

static json_t *parse_body(struct conn *k, enum MHD_Result *ret)
{
    char msg[HS__MSG_MAX];
    json_t *root = NULL;
    int status = hs__body_parse(k->body, k->body_len, k->ts, &root, msg, sizeof msg);
    if (status) *ret = send_error(k, status, 0, "%s", msg);
    return root;
}

static const char *conn_header(void *ctx, const char *name)
{
    struct conn *k = ctx;
    return MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, name);
}

/* ---------------------------------------------------------------------------------------------
 * model endpoints
 */

static enum MHD_Result embed_finish(struct conn *k);

/* Shared by /v1/embeddings and /embed: validate, tokenize, dispatch. */
static enum MHD_Result embed_begin(struct conn *k)
{
    struct hs_server *s = k->srv;
    bool openai = k->ep->flags & EP_OPENAI;
    char msg[HS__MSG_MAX];
    struct hs__embed_req in;
    int status =
        hs__embed_decode(s, k->arena, openai, k->body, k->body_len,
                         MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "X-Priority"),
                         MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "X-Timeout-Ms"),
                         k->ts, &in, msg, sizeof msg);
    if (status) return send_error(k, status, 0, "%s", msg);
    k->sm = in.sm;
    k->base64 = in.base64;
    k->post_normalize = in.post_normalize;
    k->dimensions = in.dimensions;
    k->renormalize = in.renormalize;
    k->prompt_tokens = in.prompt_tokens;
    k->ts[HS_TS_TOKENIZED] = hs_now_ns();
    struct hs_job *j =
        hs__conn_job(k, openai ? "embeddings" : "embed", k->sm->name, in.seqs, in.n, in.prio,
                     k->ts[HS_TS_RECEIVED] + (int64_t)in.timeout_ms * 1000000);
    if (!j) return send_error(k, 500, 0, "out of memory");
    bool answered = false;
    hs_status st = hs__conn_dispatch(k, j, NULL, &answered);
    if (st != HS_STATUS_OK)
        return send_error(k, status_to_http(st), j->retry_after_s, "%s", j->msg);
    /* Answered before we could suspend (a fast batch, an immediate expiry): respond now. */
    return answered ? embed_finish(k) : MHD_YES;
}

/* One row: its first `k->dimensions` values (all without), L2-normalized into tmp when the model
 * does not normalize itself or the cut needs it again (the answer's rows are read-only: a shadow
 * comparison may be reading them). */
static const float *embed_row(const struct conn *k, const float *row, int dim, float *tmp)
{
    if (!k->post_normalize && !k->renormalize) return row;
    double ss = 0;
    for (int j = 0; j < dim; j++) ss += (double)row[j] * row[j];
    float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int j = 0; j < dim; j++) tmp[j] = row[j] * inv;
    return tmp;
}

/* After the dispatch answered: post-process and serialize. */
static enum MHD_Result embed_finish(struct conn *k)
{
    const struct hs_job *j = k->job;
    if (j->status != HS_STATUS_OK)
        return send_error(k, status_to_http(j->status), j->retry_after_s, "%s", j->msg);
    const int stride = j->dim;
    const int dim = k->dimensions && k->dimensions < stride ? k->dimensions : stride;
    const size_t n = (size_t)j->n_seqs;
    bool need_tmp = k->post_normalize || k->renormalize;
    float *tmp = need_tmp ? hs_arena_alloc(k->arena, sizeof(float) * (size_t)dim) : NULL;
    if (need_tmp && !tmp) return send_error(k, 500, 0, "out of memory");
    struct hs_buf b;
    /* Sized once for the worst case so serialization never re-grows. */
    size_t per =
        k->base64 ? ((size_t)dim * 4 + 2) / 3 * 4 + 8 : (size_t)dim * (HS_JSON_FLOAT_MAX + 1) + 8;
    hs_buf_init(&b, k->arena, n * (per + 64) + 256 + strlen(k->sm->name));
    if (k->ep->flags & EP_OPENAI) {
        hs_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
        for (size_t i = 0; i < n; i++) {
            const float *row = embed_row(k, j->out + i * (size_t)stride, dim, tmp);
            hs_buf_printf(
                &b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
            if (k->base64) {
                hs_buf_putc(&b, '"');
                hs_buf_base64(&b, row, (size_t)dim * sizeof(float));
                hs_buf_putc(&b, '"');
            } else {
                hs_buf_json_floats(&b, row, (size_t)dim);
            }
            hs_buf_putc(&b, '}');
        }
        hs_buf_puts(&b, "],\"model\":");
        hs_buf_json_str(&b, k->sm->name, strlen(k->sm->name));
        hs_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}",
                      k->prompt_tokens, k->prompt_tokens);
    } else {
        hs_buf_putc(&b, '[');
        for (size_t i = 0; i < n; i++) {
            if (i) hs_buf_putc(&b, ',');
            hs_buf_json_floats(&b, embed_row(k, j->out + i * (size_t)stride, dim, tmp),
                               (size_t)dim);
        }
        hs_buf_putc(&b, ']');
    }
    k->ts[HS_TS_POST] = hs_now_ns();
    return send_buf(k, 200, &b, "application/json", 0);
}

static enum MHD_Result decode(struct conn *k)
{
    char msg[HS__MSG_MAX];
    struct hs_buf b;
    int status =
        hs__decode_body(k->srv, k->arena, k->body, k->body_len, k->ts, &b, msg, sizeof msg);
    if (status) return send_error(k, status, 0, "%s", msg);
    k->ts[HS_TS_TOKENIZED] = hs_now_ns();
    k->ts[HS_TS_POST] = k->ts[HS_TS_TOKENIZED];
    return send_buf(k, 200, &b, "application/json", 0);
}

static enum MHD_Result tokenize(struct conn *k)
{
    char msg[HS__MSG_MAX];
    struct hs_buf b;
    int status =
        hs__tokenize_body(k->srv, k->arena, k->body, k->body_len, k->ts, &b, msg, sizeof msg);
    if (status) return send_error(k, status, 0, "%s", msg);
    k->ts[HS_TS_TOKENIZED] = hs_now_ns();
    k->ts[HS_TS_POST] = k->ts[HS_TS_TOKENIZED];
    return send_buf(k, 200, &b, "application/json", 0);
}

/* ---------------------------------------------------------------------------------------------
 * other endpoints
 */

static enum MHD_Result models(struct conn *k)
{
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 1024);
    hs_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < k->srv->n_models; i++) {
        struct hs_served_model *sm = &k->srv->models[i];
        hs_buf_puts(&b, i ? ",{\"id\":" : "{\"id\":");
        hs_buf_json_str(&b, sm->name, strlen(sm->name));
        hs_buf_printf(&b,
                      ",\"object\":\"model\",\"created\":0,\"owned_by\":\"hetserve\","
                      "\"engine\":\"%s\",\"dimensions\":%d,\"max_tokens\":%d,\"task\":\"%s\"}",
                      hs_engine_name(sm->engine), sm->model->config.dims.hidden,
                      sm->model->config.max_seq_len,
                      sm->model->config.dims.pool == HS_POOL_SPLADE ? "sparse_embedding"
                      : sm->model->config.dims.pool == HS_POOL_NONE ? "token_embedding"
                      : !sm->tasks || !sm->tasks->cls               ? "embedding"
                      : sm->tasks->cls->n_labels == 1               ? "rerank"
                                                                    : "classify");
    }
    hs_buf_puts(&b, "]}");
    return send_buf(k, 200, &b, "application/json", 0);
}

static enum MHD_Result ready(struct conn *k)
{
    struct hs_server *s = k->srv;
    if (atomic_load(&s->draining)) return send_error(k, 503, 0, "server is shutting down");
    for (int i = 0; i < s->n_engines; i++) {
        struct hs_engine_stats st;
        hs_engine_stats(s->engines[i], &st);
        /* An engine whose every batch fails is not healthy. */
        if (st.errors > 0 && st.errors == st.batches)
            return send_error(k, 503, 0, "engine %s is failing", hs_engine_name(s->engines[i]));
    }
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 256);
    hs_buf_printf(&b, "{\"status\":\"ready\",\"models\":%d,\"lanes\":%d", s->n_models, s->n_lanes);
    int excluded = 0;
    for (int i = 0; i < s->n_checks; i++) {
        const struct hs_lane_check *c = &s->checks[i];
        if (!c->excluded) continue;
        hs_buf_printf(&b,
                      "%s{\"model\":\"%s\",\"engine\":\"%s\",\"dtype\":\"%s\",\"cos_min\":%.6f,"
                      "\"cos_mean\":%.6f,\"reason\":\"failed its check against f32\"}",
                      excluded++ ? "," : ",\"lanes_excluded\":[", c->model, c->engine,
                      hs_compute_dtype_name(c->dtype), c->cos_min, c->cos_mean);
    }
    hs_buf_puts(&b, excluded ? "]}" : "}");
    return send_buf(k, 200, &b, "application/json", 0);
}

static enum MHD_Result health(struct conn *k)
{
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 64);
    hs_buf_puts(&b, "{\"status\":\"ok\"}");
    return send_buf(k, 200, &b, "application/json", 0);
}

static enum MHD_Result metrics(struct conn *k)
{
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 65536);
    hs_metrics_render(k->srv->metrics, &b);
    hs__predict_metrics(k->srv, &b);
    hs__ocr_metrics(k->srv, &b);
    hs__server_checks_metrics(k->srv, &b);
    hs_capture_metrics(k->srv->capture, &b);
    hs__server_boundary_metrics(k->srv, &b);
    struct hs_auth *a = hs__server_auth(k->srv);
    if (a) hs_auth_metrics(a, &b);
    hs_auth_unref(a);
    return send_buf(k, 200, &b, "text/plain; version=0.0.4; charset=utf-8", 0);
}

/* GET /dashboard: the embedded page (server/dashboard.h); it reads /metrics itself. */
static enum MHD_Result dashboard(struct conn *k)
{
    size_t len;
    struct hs_buf b = {.data = (char *)hs_dashboard_page(&len)};
    b.len = len;
    return send_buf(k, 200, &b, "text/html; charset=utf-8", 0);
}

/* POST /admin/fault {"engine", "fail_next", "slow_factor", "hang_ms"}: replaces the engine's
 * injected faults (absent fields are 0 / no fault). Only when admin.enabled, only from
 * loopback, and with admin.token set only with `Authorization: Bearer <token>`. */
static bool client_is_loopback(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return false;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

/* Does the request carry `Authorization: Bearer <token>`? The comparison takes the same time
 * wherever the first difference is, so timing does not reveal the token. */
static bool has_bearer_token(struct MHD_Connection *c, const char *token)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7 + strspn(h + 7, " ");
    size_t n = strlen(h), want = strlen(token);
    unsigned char diff = n != want;
    for (size_t i = 0; i < want; i++) diff |= (unsigned char)(h[i < n ? i : 0] ^ token[i]);
    return diff == 0;
}

/* The body's field `name` into *out: an integer (integer false: any number) in [0, hi]; absent
 * leaves *out as it is. False when it has another type or is out of range. */
static bool admin_field(json_t *root, const char *name, bool integer, double hi, double *out)
{
    json_t *v = json_object_get(root, name);
    if (!v) return true;
    if (integer ? !json_is_integer(v) : !json_is_number(v)) return false;
    *out = json_number_value(v);
    return *out >= 0 && *out <= hi;
}

static enum MHD_Result admin_fault(struct conn *k)
{
    struct hs_server *s = k->srv;
    if (!s->cfg.admin.enabled) return send_error(k, 404, 0, "no endpoint /admin/fault");
    if (!client_is_loopback(k->mhd))
        return send_error(k, 403, 0, "the admin endpoint answers loopback clients only");
    if (s->cfg.admin.token[0] && !has_bearer_token(k->mhd, s->cfg.admin.token))
        return send_error(k, 401, 0,
                          "the admin endpoint needs the header 'Authorization: Bearer <token>' "
                          "with the token of admin.token (or HS_ADMIN_TOKEN)");
    enum MHD_Result ret = MHD_YES;
    json_t *root = parse_body(k, &ret);
    if (!root) return ret;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "engine") && strcmp(key, "fail_next") && strcmp(key, "slow_factor") &&
            strcmp(key, "hang_ms")) {
            ret = send_error(k, 400, 0,
                             "unknown field '%s' (known: engine, fail_next, "
                             "slow_factor, hang_ms)",
                             key);
            json_decref(root);
            return ret;
        }
    }
    double fail_next = 0, slow_factor = 0, hang_ms = 0;
    json_t *je = json_object_get(root, "engine");
    bool ok = admin_field(root, "fail_next", true, INT_MAX, &fail_next) &&
              admin_field(root, "slow_factor", false, 1000, &slow_factor) &&
              admin_field(root, "hang_ms", true, INT_MAX, &hang_ms);
    bool engine_ok = !je || json_is_string(je);
    hs_engine_t e = json_is_string(je) ? hs__server_engine(s, json_string_value(je)) : NULL;
    json_decref(root);
    if (!ok)
        return send_error(k, 400, 0,
                          "fail_next and hang_ms must be integers >= 0, slow_factor a number "
                          "in [0, 1000]");
    if (!engine_ok) return send_error(k, 400, 0, "'engine' must be a string");
    if (!e) return send_error(k, 404, 0, "'engine' must name a configured engine");
    struct hs_engine_fault f = {
        .fail_next = (int)fail_next, .slow_factor = slow_factor, .hang_ms = (int)hang_ms};
    hs_engine_set_fault(e, &f);
    hs_log_warn("admin: engine %s faults set: fail_next %d, slow_factor %g, hang_ms %d",
                hs_engine_name(e), f.fail_next, f.slow_factor, f.hang_ms);
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 256);
    hs_buf_printf(&b, "{\"engine\":\"%s\",\"fail_next\":%d,\"slow_factor\":%g,\"hang_ms\":%d}",
                  hs_engine_name(e), f.fail_next, f.slow_factor, f.hang_ms);
    return send_buf(k, 200, &b, "application/json", 0);
}

/* ---------------------------------------------------------------------------------------------
 * the endpoint table
 */

static enum MHD_Result predict_begin(struct conn *k);
static enum MHD_Result root_begin(struct conn *k);

static const struct endpoint endpoints[] = {
    {"/v1/embeddings", "POST", EP_TIMED | EP_MODEL | EP_OPENAI, embed_begin, embed_finish},
    {"/embeddings", "POST", EP_TIMED | EP_MODEL | EP_OPENAI, embed_begin, embed_finish},
    {"/embed", "POST", EP_TIMED | EP_MODEL, embed_begin, embed_finish},
    {"/predict", "POST", EP_TIMED | EP_MODEL, predict_begin, hs__predict_resume},
    {"/v1/ocr", "POST", EP_IMAGE, hs__ocr_begin, hs__ocr_resume},
    {"/v1/layout", "POST", EP_IMAGE, hs__ocr_begin, hs__ocr_resume},
    {"/rerank", "POST", EP_TIMED | EP_MODEL, hs__rerank_begin, hs__task_finish},
    {"/v1/rerank", "POST", EP_TIMED | EP_MODEL, hs__rerank_v1_begin, hs__task_finish},
    {"/similarity", "POST", EP_TIMED | EP_MODEL, hs__similarity_begin, hs__task_finish},
    {"/embed_sparse", "POST", EP_TIMED | EP_MODEL, hs__embed_sparse_begin, hs__task_finish},
    {"/embed_all", "POST", EP_TIMED | EP_MODEL, hs__embed_all_begin, hs__task_finish},
    {"/", "POST", EP_TIMED | EP_MODEL, root_begin, NULL},
    {"/info", "GET", 0, hs__info, NULL},
    {"/tokenize", "POST", EP_TIMED, tokenize, NULL},
    {"/decode", "POST", EP_TIMED, decode, NULL},
    /* what a router sends its workers (internal.c) */
    {"/internal/v1/batch", "POST", EP_TIMED | EP_MODEL | EP_NOKEY, hs__internal_batch_begin,
     hs__internal_batch_resume},
    {"/internal/v1/status", "GET", EP_NOKEY, hs__internal_status, NULL},
    {"/v1/models", "GET", 0, models, NULL},
    {"/health", "GET", EP_PROBE, health, NULL},
    {"/ready", "GET", EP_PROBE, ready, NULL},
    {"/metrics", "GET", EP_METRICS, metrics, NULL},
    {"/dashboard", "GET", EP_METRICS, dashboard, NULL},
    {"/admin/fault", "POST", EP_NOKEY, admin_fault, NULL},
    /* the KServe v2 / Open Inference Protocol (kserve.h) */
    {"/v2", "GET", EP_KSERVE, hs__kserve_server, NULL},
    {"/v2/health/live", "GET", EP_KSERVE | EP_PROBE, hs__kserve_live, NULL},
    {"/v2/health/ready", "GET", EP_KSERVE | EP_PROBE, hs__kserve_ready, NULL},
    {"/v2/models/", "GET", EP_KSERVE | EP_PREFIX, hs__kserve_model, NULL},
    {"/v2/models/", "POST", EP_TIMED | EP_MODEL | EP_KSERVE | EP_PREFIX, hs__kserve_infer_begin,
     hs__kserve_infer_finish},
};

/* /predict on a model with its own classifier head when no cascade is configured */
static const struct endpoint checkpoint_predict = {"/predict", "POST", EP_TIMED | EP_MODEL,
                                                   hs__cls_predict_begin, hs__task_finish};
static const struct endpoint root_predict = {"/predict", "POST", EP_TIMED | EP_MODEL,
                                             hs__root_predict_begin, hs__task_finish};

static const struct endpoint *endpoint_of(const char *url, const char *method);

static enum MHD_Result predict_begin(struct conn *k)
{
    if (!hs__predict_uses_checkpoint(k->srv, k->body, k->body_len))
        return hs__predict_begin(k); /* the cascade (404 when it is not configured) */
    k->ep = &checkpoint_predict;
    return k->ep->begin(k);
}

/* TEI's (and SageMaker's) root route: the model's task (hs__root_task) answers. */
static enum MHD_Result root_begin(struct conn *k)
{
    static const char *const paths[] = {"/embed",   "/similarity",   "/rerank",
                                        "/predict", "/embed_sparse", "/embed_all"};
    int t = hs__root_task(k->srv, k->body, k->body_len);
    k->ep = t == 3 ? &root_predict : endpoint_of(paths[t], "POST");
    return k->ep->begin(k);
}

/* The row for url and method; else one for url alone (answered 405); NULL when none. */
static const struct endpoint *endpoint_of(const char *url, const char *method)
{
    const struct endpoint *any = NULL;
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
        const struct endpoint *e = &endpoints[i];
        bool match = (e->flags & EP_PREFIX) ? !strncmp(url, e->path, strlen(e->path))
                                            : !strcmp(url, e->path);
        if (!match) continue;
        if (!strcmp(method, e->method)) return e;
        if (!any) any = e;
    }
    return any;
}

bool hs__http_endpoint_known(const char *p)
{
    size_t n = strlen(p);
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
        const char *ep = endpoints[i].path;
        if (!strncmp(ep, p, n) && (ep[n] == '\0' || ep[n] == '/' || (n && p[n - 1] == '/')))
            return true;
    }
    return false;
}

/* The key a request needs (server/auth.h), once its headers are in: 0, or the status to answer
 * (401, 403, 429 with *retry_after_s) with msg. */
static int conn_admit(struct conn *k, double *retry_after_s, char *msg, size_t cap)
{
    if (k->ep->flags & EP_NOKEY) return 0;
    k->auth = hs__server_auth(k->srv);
    if (!k->auth) return 0;
    enum hs_auth_class cls = (k->ep->flags & EP_PROBE)     ? HS_AUTH_PROBE
                             : (k->ep->flags & EP_METRICS) ? HS_AUTH_METRICS
                                                           : HS_AUTH_KEYED;
    return hs_auth_admit(k->auth, k->ep->path, cls, conn_header, k, hs_now_ns(), &k->key,
                         retry_after_s, msg, cap);
}

static bool body_append(struct conn *k, const char *data, size_t n)
{
    size_t limit = (size_t)k->srv->cfg.limits.body_bytes_max;
    if (k->body_too_big || k->body_len + n > limit) {
        k->body_too_big = true;
        k->discarded += (int64_t)n;
        return true;
    }
    if (k->body_len + n > k->body_cap) {
        size_t cap = k->body_cap ? k->body_cap * 2 : 4096;
        while (cap < k->body_len + n) cap *= 2;
        if (cap > limit) cap = limit;
        char *nb = hs_arena_alloc(k->arena, cap);
        if (!nb) return false;
        if (k->body_len) memcpy(nb, k->body, k->body_len);
        k->body = nb;
        k->body_cap = cap;
    }
    memcpy(k->body + k->body_len, data, n);
    k->body_len += n;
    return true;
}

/* A body over limits.body_bytes_max. Answering 413 while the client is still sending and
 * closing makes the kernel reset the connection over the unread bytes, and the client (which
 * reads its answer once it has sent everything) sees the reset, not the 413. So the server does
 * what nginx's lingering close does: it reads the body and drops it, up to
 * limits.discard_bytes_max and limits.discard_timeout_ms, and answers when the body is whole
 * (the connection stays usable) or when a limit is reached (microhttpd then closes it). */
static enum MHD_Result refuse_body(struct conn *k)
{
    conn_accept(k);
    long long limit = (long long)k->srv->cfg.limits.body_bytes_max;
    if (k->body_declared > limit)
        return send_error(k, 413, 0, "body of %lld bytes; the limit is %lld", k->body_declared,
                          limit);
    return send_error(k, 413, 0, "request body exceeds %lld bytes", limit);
}

/* The discard of a refused body has gone on for long enough. */
static bool discard_over(const struct conn *k)
{
    const struct hs_config *cfg = &k->srv->cfg;
    return k->discarded > cfg->limits.discard_bytes_max ||
           hs_now_ns() - k->ts[HS_TS_RECEIVED] > (int64_t)cfg->limits.discard_timeout_ms * 1000000;
}

/* A body refused on its Content-Length alone is answered before it is read when the client
 * waits for "100 Continue" (it sends nothing until then), or when reading it all would pass the
 * discard limit anyway. */
static bool refuse_at_once(const struct conn *k)
{
    const char *expect = MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "Expect");
    if (expect && !strcasecmp(expect, "100-continue")) return true;
    return k->body_declared > k->srv->cfg.limits.discard_bytes_max;
}

enum MHD_Result hs__http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)version;
    struct hs_server *s = cls;
    struct conn *k = *con_cls;
    if (!k) {
        k = conn_new(s, c);
        if (!k) return MHD_NO; /* out of memory: drop the connection */
        *con_cls = k;
        size_t ul = strlen(url);
        char *u = hs_arena_alloc(k->arena, ul + 1);
        if (!u) return MHD_NO;
        k->url = memcpy(u, url, ul + 1);
        k->ep = endpoint_of(url, method);
        if (!k->ep) {
            conn_accept(k);
            return send_error(k, 404, 0, "no endpoint %s", url);
        }
        if (strcmp(method, k->ep->method)) {
            conn_accept(k);
            return send_error(k, 405, 0, "method %s not allowed on %s", method, url);
        }
        char msg[256];
        double retry = 0;
        int denied = conn_admit(k, &retry, msg, sizeof msg);
        if (denied) {
            conn_accept(k);
            return send_error(k, denied, retry, "%s", msg);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        k->body_declared = cl ? atoll(cl) : -1;
        if (k->body_declared > s->cfg.limits.body_bytes_max) {
            k->body_too_big = true;
            if (refuse_at_once(k)) return refuse_body(k);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!body_append(k, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        if (k->body_too_big && discard_over(k)) return refuse_body(k);
        return MHD_YES;
    }
    if (k->submitted) {
        /* resumed: the dispatch has answered */
        conn_answer(k);
        return k->ep->finish(k);
    }
    conn_accept(k); /* the whole body is here */
    if (k->body_too_big) return refuse_body(k);
    return k->ep->begin(k);
}

static enum hs_outcome outcome_of(int status)
{
    if (status == 200) return HS_OUTCOME_OK;
    if (status == 504) return HS_OUTCOME_TIMEOUT;
    if (status == 429 || status == 503) return HS_OUTCOME_REJECTED;
    return HS_OUTCOME_ERROR;
}

/* The request's capture line (server/capture.h), when it is in the sample: formatted in the
 * connection's arena and handed to the capture's ring, which never waits for the disk. */
static void capture_request(struct hs_server *s, struct conn *k)
{
    if (!hs_capture_sampled(s->capture, k->id)) return;
    const struct hs_job *j0 = k->n_jobs ? k->jobs[0] : NULL;
    const struct hs_route_decision *d = k->job && k->job->routed ? &k->job->dec : NULL;
    struct hs_capture_rec r = {
        .id = k->id,
        .endpoint = (k->ep->flags & EP_PREFIX) ? k->url : k->ep->path, /* /v2/models/m/infer */
        .status = k->http_status,
        .ts = k->ts,
        .model = j0 ? j0->model : NULL,
        .has_qos = j0 != NULL,
        .priority = j0 ? j0->priority : HS_PRIORITY_INTERACTIVE,
        .deadline_ns = j0 ? j0->deadline_ns : 0,
        .n_seqs = j0 ? j0->n_seqs : 0,
        .seqs = j0 ? j0->seqs : NULL,
        .route = d ? hs_router_route_name(s->router, d->route) : NULL,
        .policy = d ? hs_route_policy_name(d->policy) : NULL,
        .note = k->route_note,
        .body = k->body,
        .body_len = k->body_len,
        .input_field = (k->ep->flags & EP_OPENAI) ? "input" : "inputs",
        .tenant = k->key ? hs_auth_tenant(k->key) : NULL,
        .body_is_input = k->ep->flags & EP_IMAGE,
        .content_type = (k->ep->flags & EP_IMAGE) ? hs__conn_header(k, "Content-Type") : NULL,
    };
    for (int i = 0; i < k->n_jobs && r.n_engines < 2; i++)
        if (k->jobs[i]->lane >= 0) r.engines[r.n_engines++] = s->lanes[k->jobs[i]->lane].label;
    struct hs_buf b;
    hs_buf_init(&b, k->arena, 1024);
    hs_capture_format(s->capture, &r, &b);
    if (!b.oom) hs_capture_push(s->capture, b.data, b.len);
}

void hs__http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode why)
{
    (void)c;
    (void)why;
    struct hs_server *s = cls;
    struct conn *k = *con_cls;
    if (!k) return;
    *con_cls = NULL;
    k->ts[HS_TS_SENT] = hs_now_ns();
    bool model_req = k->ep && (k->ep->flags & EP_MODEL);
    if (k->key && k->http_status)
        hs_auth_count(
            k->key, k->http_status, k->tenant_tokens,
            k->ts[HS_TS_RECEIVED] ? (double)(k->ts[HS_TS_SENT] - k->ts[HS_TS_RECEIVED]) / 1e9 : -1);
    if (k->tenant_inflight) hs_auth_done(k->key);
    if (model_req && k->http_status) {
        hs_metrics_request(s->metrics, k->lane, outcome_of(k->http_status), k->ts);
        char decision[400] = "";
        const struct hs_route_decision *d = k->job && k->job->routed ? &k->job->dec : NULL;
        /* a lane queued one of its requests behind the other tenants' (scheduler.over_share) */
        bool over = false;
        for (int i = 0; i < k->n_jobs; i++)
            if (k->jobs[i]->req && k->jobs[i]->req->over_share) over = true;
        if (over) hs_auth_over_share(k->key);
        if (d)
            snprintf(decision, sizeof decision, "route %s, policy %s, engine %s: %s%s",
                     hs_router_route_name(s->router, d->route), hs_route_policy_name(d->policy),
                     d->lane >= 0 ? s->lanes[d->lane].label : "none", d->reason,
                     over ? "; queued past its tenant's share" : "");
        hs_trace_request(s->trace, k->lane, k->id, k->http_status, k->ts, d ? decision : NULL,
                         k->key ? hs_auth_tenant(k->key) : NULL);
        capture_request(s, k);
    } else if (k->ep && (k->ep->flags & EP_IMAGE) && k->http_status) {
        capture_request(s, k);
    }
    /* The owner's references: on each job's scheduler requests (the arena goes once the
     * scheduler let go of them all), then the connection's own. */
    int n_jobs = k->n_jobs;
    struct hs_job *jobs[CONN_MAX_JOBS];
    memcpy(jobs, k->jobs, sizeof jobs);
    bool accepted = k->accepted;
    for (int i = 0; i < n_jobs; i++) hs_job_release(jobs[i]);
    conn_unref(k);
    if (accepted) {
        pthread_mutex_lock(&s->inflight_mu);
        s->inflight--;
        pthread_cond_broadcast(&s->inflight_cv);
        pthread_mutex_unlock(&s->inflight_mu);
    }
}

/* ---------------------------------------------------------------------------------------------
 * the connection interface /predict (predict.c) uses: see server-impl.h
 */

struct hs_arena *hs__conn_arena(struct conn *k)
{
    return k->arena;
}
struct hs_server *hs__conn_server(struct conn *k)
{
    return k->srv;
}
int64_t *hs__conn_ts(struct conn *k)
{
    return k->ts;
}
void **hs__conn_predict(struct conn *k)
{
    return &k->predict;
}
const char *hs__conn_body(struct conn *k, size_t *len)
{
    *len = k->body_len;
    return k->body;
}
const char *hs__conn_header(struct conn *k, const char *name)
{
    return MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, name);
}

enum MHD_Result hs__conn_error(struct conn *k, int status, double retry_after_s, const char *msg)
{
    return send_error(k, status, retry_after_s, "%s", msg);
}

enum MHD_Result hs__conn_reply(struct conn *k, struct hs_buf *b, const char *header,
                               const char *value)
{
    k->x_header = header;
    k->x_value = value;
    k->ts[HS_TS_POST] = hs_now_ns();
    return send_buf(k, 200, b, "application/json", 0);
}

enum MHD_Result hs__conn_send(struct conn *k, int status, struct hs_buf *b, const char *ctype)
{
    return send_buf(k, status, b, ctype, 0);
}

int hs__http_status(hs_status st)
{
    return status_to_http(st);
}

const char *hs__conn_url(struct conn *k)
{
    return k->url;
}

void hs__conn_set_header(struct conn *k, const char *name, const char *value)
{
    k->x_header = name;
    k->x_value = value;
}

void hs__conn_set_engine(struct conn *k, const char *engine)
{
    k->x_engine = engine;
}

void hs__conn_route_note(struct conn *k, const char *note)
{
    k->route_note = note;
}

/* The job's owner hooks (sched/dispatch.h): memory from the connection's arena, held by
 * reference; an answer resumes the suspended connection. */
static void *conn_alloc(void *ctx, size_t bytes)
{
    struct conn *k = ctx;
    return hs_arena_calloc(k->arena, 1, bytes);
}

static void conn_hold(void *ctx)
{
    struct conn *k = ctx;
    atomic_fetch_add(&k->refs, 1);
}

static void conn_let_go(void *ctx)
{
    conn_unref(ctx);
}

static void conn_done(struct hs_job *j, void *ctx)
{
    (void)j;
    struct conn *k = ctx;
    pthread_mutex_lock(&k->mu);
    k->done = true;
    if (k->suspended) {
        k->suspended = false;
        MHD_resume_connection(k->mhd);
    }
    pthread_mutex_unlock(&k->mu);
}

struct hs_job *hs__conn_job(struct conn *k, const char *task, const char *model,
                            const struct hs_seq *seqs, size_t n, enum hs_priority prio,
                            int64_t deadline_ns)
{
    if (k->n_jobs == CONN_MAX_JOBS) return NULL; /* (a bug) */
    struct hs_job *j = hs_arena_calloc(k->arena, 1, sizeof *j);
    if (!j) return NULL;
    j->owner = (struct hs_job_owner){
        .alloc = conn_alloc, .hold = conn_hold, .let_go = conn_let_go, .done = conn_done, .ctx = k};
    j->id = k->id;
    j->model = model;
    j->task = task;
    j->key = MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "X-Request-Id");
    j->header = conn_header;
    j->header_ctx = k;
    j->priority = prio;
    j->deadline_ns = deadline_ns;
    j->n_seqs = (int)n;
    j->seqs = seqs;
    k->jobs[k->n_jobs++] = j;
    return j;
}

/* The answering job's stamps and lane become the connection's. */
static void conn_answer(struct conn *k)
{
    if (!k->job) return; /* waited for work of its own (hs__conn_wait) */
    memcpy(k->ts, k->job->ts, sizeof k->ts);
    k->lane = k->job->lane;
}

void hs__conn_wait_begin(struct conn *k)
{
    if (!k->mu_init) {
        pthread_mutex_init(&k->mu, NULL);
        k->mu_init = true;
    }
    k->done = false;
    k->submitted = true;
}

bool hs__conn_wait(struct conn *k)
{
    pthread_mutex_lock(&k->mu);
    const bool done = k->done;
    if (!done) {
        MHD_suspend_connection(k->mhd);
        k->suspended = true;
    }
    pthread_mutex_unlock(&k->mu);
    return done;
}

void hs__conn_wake(struct conn *k)
{
    conn_done(NULL, k);
}

void hs__conn_hold(struct conn *k)
{
    conn_hold(k);
}

void hs__conn_release(struct conn *k)
{
    conn_unref(k);
}

hs_status hs__conn_dispatch(struct conn *k, struct hs_job *j, const struct hs_job *from,
                            bool *answered)
{
    struct hs_server *s = k->srv;
    *answered = false;
    k->job = j;
    if (atomic_load(&s->draining)) {
        j->status = HS_STATUS_SHUTDOWN;
        snprintf(j->msg, sizeof j->msg, "server is shutting down");
        return j->status;
    }
    if (!k->mu_init) {
        pthread_mutex_init(&k->mu, NULL);
        k->mu_init = true;
    }
    if (k->key && !from) {
        /* the tenant's model list, priority cap and token bucket (an escalated cascade stage
         * was admitted with the request) */
        int tokens = 0;
        for (int i = 0; i < j->n_seqs; i++) tokens += j->seqs[i].n_tokens;
        j->status = hs_auth_job(k->auth, k->key, j->model, tokens, hs_now_ns(), &j->priority,
                                &j->retry_after_s, j->msg, sizeof j->msg);
        if (j->status != HS_STATUS_OK) return j->status;
        k->tenant_tokens += tokens;
        k->tenant_inflight = true;
    }
    if (k->key) { /* the lanes' fair shares */
        j->tenant = hs_auth_tenant_index(k->key);
        j->weight = hs_auth_tenant_weight(k->key);
    }
    k->done = false;
    memcpy(j->ts, k->ts, sizeof j->ts);
    hs_status st =
        from ? hs_dispatch_escalate(s->dispatch, j, from) : hs_dispatch_submit(s->dispatch, j);
    if (st != HS_STATUS_OK) {
        conn_answer(k);
        return st;
    }
    k->submitted = true;
    pthread_mutex_lock(&k->mu);
    if (!k->done) {
        MHD_suspend_connection(k->mhd);
        k->suspended = true;
    }
    *answered = k->done;
    pthread_mutex_unlock(&k->mu);
    if (*answered) conn_answer(k);
    return HS_STATUS_OK;
}
