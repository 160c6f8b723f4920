/* HTTP endpoints over libmicrohttpd.
 *
 * Life of a connection's request: the first handler call creates a per-request arena holding
 * everything (body, token ids, the scheduler request, output rows, the response body); body
 * chunks are appended on the next calls; the last call parses, validates, tokenizes and submits.
 * The connection is then suspended until the scheduler's done callback resumes it; the handler
 * runs once more, post-processes and queues the response. When the response has been sent
 * (notify-completed), the arena's owner reference is dropped; the arena is freed in one call
 * once the scheduler has let go of every request made for the connection as well.
 *
 * Routing: the router (sched/router.h) decides the lane; a request that fails with an engine
 * error may be sent once more elsewhere (hs_router_retry, from the retry budget) as a second
 * scheduler request; a sampled request is also copied to a shadow lane, whose result is only
 * compared with the answer (cosine) and discarded. Every scheduler request holds a reference
 * on the connection's arena (conn->refs), so a shadow may finish after the response was sent.
 * Responses carry X-Engine (the engine that served) and X-Route ("route;policy=...") with
 * X-Route-Reason, the decision in words. POST /predict (predict.c) drives its two stages through
 * the same routing and submission (hs__conn_submit), one stage after the other.
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
#include "server/server-impl.h"

enum endpoint {
    EP_NONE,
    EP_OPENAI_EMBED,
    EP_TEI_EMBED,
    EP_TOKENIZE,
    EP_MODELS,
    EP_HEALTH,
    EP_READY,
    EP_METRICS,
    EP_ADMIN_FAULT,
    EP_PREDICT,
    EP_INTERNAL_BATCH,  /* internal.c: what a router sends its workers */
    EP_INTERNAL_STATUS, /* internal.c */
};

/* the first try, a retry, a shadow copy; /predict: small, big and a retry of each */
#define CONN_MAX_REQS 4

struct conn {
    struct hs_server *srv;
    struct MHD_Connection *mhd;
    struct hs_arena *arena;
    enum endpoint ep;
    uint64_t id;
    int64_t ts[HS_TS_COUNT]; /* copied from the request when it has one */
    int http_status;
    int lane;

    char *body;
    size_t body_len, body_cap;
    bool body_too_big;
    bool accepted; /* counted in srv->inflight: the drain on SIGTERM waits for its response */

    /* a model request in flight */
    struct hs_request *req; /* the scheduler request that answers (the retry once there is one) */
    struct hs_served_model *sm;
    atomic_int refs; /* the owner's, plus one per initialised scheduler request */
    struct hs_request *reqs[CONN_MAX_REQS];
    int n_reqs;
    const char *task;
    bool routed;                  /* dec holds a decision */
    struct hs_route_decision dec; /* of k->req */
    struct hs_request *retry;     /* prepared before submitting, when a retry is possible */
    struct hs_request *shadow;    /* the shadow copy, when one was sent */
    int shadow_route;
    bool shadow_finished, shadow_ok, primary_finished, primary_ok;
    bool base64;
    bool post_normalize; /* L2-normalize in post-processing (model does not) */
    int prompt_tokens;
    pthread_mutex_t mu;
    bool mu_init, submitted, done, suspended;

    /* POST /predict (predict.c): its state, one extra response header, an X-Route suffix */
    void *predict;
    const char *x_header, *x_value, *route_note;
};

/* ---------------------------------------------------------------------------------------------
 * connection memory
 */

static void conn_free_arena(struct conn *k)
{
    if (k->mu_init) pthread_mutex_destroy(&k->mu);
    hs_arena_destroy(k->arena); /* k lives in it */
}

static void conn_unref(struct conn *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1) conn_free_arena(k);
}

static void request_release(struct hs_request *r, void *ctx)
{
    (void)r;
    conn_unref(ctx);
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
    k->shadow_route = -1;
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
        snprintf(out + n, cap - n, "%stotal;dur=%.3f", n ? ", " : "",
                 hs_ns_to_ms(prev - k->ts[HS_TS_RECEIVED]));
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
    if (k->ep == EP_OPENAI_EMBED || k->ep == EP_TEI_EMBED || k->ep == EP_TOKENIZE ||
        k->ep == EP_PREDICT) {
        server_timing(k, tmp, sizeof tmp);
        MHD_add_response_header(r, "Server-Timing", tmp);
    }
    if (k->routed) {
        const struct hs_route_decision *d = &k->dec;
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
    if (status == 405) {
        const char *allow = k->ep == EP_OPENAI_EMBED || k->ep == EP_TEI_EMBED ||
                                    k->ep == EP_TOKENIZE || k->ep == EP_ADMIN_FAULT ||
                                    k->ep == EP_PREDICT || k->ep == EP_INTERNAL_BATCH
                                ? "POST"
                                : "GET";
        MHD_add_response_header(r, "Allow", allow);
    }
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

/* ---------------------------------------------------------------------------------------------
 * request bodies: the bytes a client sent -> a decoded request. Nothing here knows the
 * connection, so the handlers and tests/fuzz/fuzz_http.c run the same code. Each returns 0, or
 * an HTTP status with the error message in msg.
 */

static int body_error(char *msg, size_t cap, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int body_error(char *msg, size_t cap, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return status;
}

static struct hs_served_model *find_model(struct hs_server *s, const char *name)
{
    if (!name) return &s->models[0];
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    /* Accept a path-like name whose last component matches ("sentence-transformers/x"). */
    const char *slash = strrchr(name, '/');
    if (slash)
        for (int i = 0; i < s->n_models; i++)
            if (!strcmp(s->models[i].name, slash + 1)) return &s->models[i];
    return NULL;
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

int hs__body_parse(const char *body, size_t len, int64_t *ts, json_t **root, char *msg, size_t cap)
{
    json_error_t je;
    *root = json_loadb(body ? body : "", len, 0, &je);
    if (ts) ts[HS_TS_PARSED] = hs_now_ns();
    if (!*root)
        return body_error(msg, cap, 400, "malformed JSON: %s (line %d, column %d)", je.text,
                          je.line, je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return body_error(msg, cap, 400, "the request body must be a JSON object");
    }
    return 0;
}

/* Collects the inputs: a string, an array of strings, an array of token ids, or an array of
 * arrays of token ids. *items receives them as an array (a new reference). */
static int get_inputs(json_t *v, const char *field, json_t **items, bool *tokens, char *msg,
                      size_t cap)
{
    if (!v) return body_error(msg, cap, 400, "missing field '%s'", field);
    *tokens = false;
    if (json_is_string(v)) {
        *items = json_pack("[O]", v);
        return *items ? 0 : body_error(msg, cap, 500, "out of memory");
    }
    if (!json_is_array(v))
        return body_error(msg, cap, 400, "'%s' must be a string or an array", field);
    size_t n = json_array_size(v);
    if (n == 0) return body_error(msg, cap, 400, "'%s' is empty", field);
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) {
        /* one sequence of token ids */
        *tokens = true;
        *items = json_pack("[O]", v);
        return *items ? 0 : body_error(msg, cap, 500, "out of memory");
    }
    *tokens = json_is_array(first);
    json_incref(v);
    *items = v;
    return 0;
}

/* Fills seq from a JSON array of token ids; wraps them in [CLS] .. [SEP] unless they already
 * are. */
static int token_input(struct hs_arena *a, const struct hs_served_model *sm, json_t *arr,
                       size_t idx, bool truncate, struct hs_seq *seq, char *msg, size_t cap)
{
    const struct hs_model *m = sm->model;
    const struct hs_tokenizer *tok = m->tokenizer;
    int vocab = hs_tokenizer_vocab_size(tok);
    int32_t cls = hs_tokenizer_cls_id(tok), sep = hs_tokenizer_sep_id(tok);
    if (!json_is_array(arr)) {
        snprintf(msg, cap, "input[%zu]: expected an array of token ids", idx);
        return 400;
    }
    size_t n = json_array_size(arr);
    if (n == 0) {
        snprintf(msg, cap, "input[%zu] is empty", idx);
        return 400;
    }
    int seq_max = m->config.max_seq_len;
    bool wrapped = n >= 2 && json_integer_value(json_array_get(arr, 0)) == cls &&
                   json_integer_value(json_array_get(arr, n - 1)) == sep;
    size_t lo = wrapped ? 1 : 0, hi = wrapped ? n - 1 : n; /* the ids between the specials */
    if (hi - lo + 2 > (size_t)seq_max) {
        if (!truncate) {
            snprintf(msg, cap,
                     "input[%zu] has %zu tokens; model %s takes at most %d (set \"truncate\": "
                     "true to cut it)",
                     idx, hi - lo + 2, sm->name, seq_max);
            return 413;
        }
        hi = lo + (size_t)seq_max - 2;
    }
    int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)seq_max);
    if (!ids) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    int o = 0;
    ids[o++] = cls;
    for (size_t i = lo; i < hi; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab) {
            snprintf(msg, cap, "input[%zu][%zu]: expected a token id in [0, %d)", idx, i, vocab);
            return 400;
        }
        ids[o++] = (int32_t)json_integer_value(t);
    }
    ids[o++] = sep;
    seq->ids = ids;
    seq->n_tokens = o;
    return 0;
}

int hs__text_input(const struct hs_server *srv, struct hs_arena *a,
                   const struct hs_served_model *sm, json_t *s, size_t idx, bool truncate,
                   struct hs_seq *seq, char *msg, size_t cap)
{
    const struct hs_model *m = sm->model;
    if (!json_is_string(s)) {
        snprintf(msg, cap, "input[%zu]: expected a string", idx);
        return 400;
    }
    const char *text = json_string_value(s);
    size_t len = json_string_length(s);
    if (len == 0) {
        snprintf(msg, cap, "input[%zu] is an empty string", idx);
        return 400;
    }
    size_t chars = utf8_chars(text, len);
    if (chars > (size_t)srv->cfg.limits.chars_max) {
        snprintf(msg, cap, "input[%zu] has %zu characters; the limit is %d", idx, chars,
                 srv->cfg.limits.chars_max);
        return 413;
    }
    int seq_max = m->config.max_seq_len;
    int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)seq_max);
    if (!ids) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    int nt = 0, nfull = 0;
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = hs_model_tokenize(m, text, len, ids, seq_max, &nt, &nfull, &err);
    if (st != HS_STATUS_OK) {
        /* The tokenizer's message may fill msg; a cut message still names the fault. */
        int w = snprintf(msg, cap, "input[%zu]: ", idx);
        if (w > 0 && (size_t)w < cap)
            snprintf(msg + w, cap - (size_t)w, "%.*s", (int)(cap - (size_t)w - 1),
                     err.msg[0] ? err.msg : hs_status_str(st));
        return status_to_http(st);
    }
    if (nfull > nt && !truncate) {
        snprintf(msg, cap,
                 "input[%zu] has %d tokens; model %s takes at most %d (set \"truncate\": true "
                 "to cut it)",
                 idx, nfull, sm->name, seq_max);
        return 413;
    }
    seq->ids = ids;
    seq->n_tokens = nt;
    return 0;
}

int hs__request_qos(const struct hs_server *s, json_t *root, const char *x_priority,
                    const char *x_timeout_ms, enum hs_priority *prio, long long *timeout_ms,
                    char *msg, size_t cap)
{
    /* the body's fields win over the headers */
    *prio = HS_PRIORITY_INTERACTIVE;
    const char *hp = x_priority;
    json_t *jp = json_object_get(root, "priority");
    if (jp && json_is_string(jp))
        hp = json_string_value(jp);
    else if (jp && !json_is_null(jp))
        return body_error(msg, cap, 400, "'priority' must be \"interactive\" or \"batch\"");
    if (hp) {
        int p = hs_priority_parse(hp);
        if (p < 0)
            return body_error(msg, cap, 400, "priority '%s': expected \"interactive\" or \"batch\"",
                              hp);
        *prio = (enum hs_priority)p;
    }
    long long t = s->cfg.limits.timeout_ms;
    if (x_timeout_ms) {
        char *end;
        t = strtoll(x_timeout_ms, &end, 10);
        if (*end || end == x_timeout_ms) t = -1;
    }
    json_t *jto = json_object_get(root, "timeout_ms");
    if (jto && !json_is_null(jto)) t = json_is_integer(jto) ? json_integer_value(jto) : -1;
    if (t <= 0 || t > s->cfg.limits.timeout_max_ms)
        return body_error(msg, cap, 400, "timeout_ms must be an integer in [1, %d]",
                          s->cfg.limits.timeout_max_ms);
    *timeout_ms = t;
    return 0;
}

int hs__embed_decode(struct hs_server *s, struct hs_arena *a, bool openai, const char *body,
                     size_t len, const char *x_priority, const char *x_timeout_ms, int64_t *ts,
                     struct hs__embed_req *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL, *items = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;

    /* model */
    json_t *jm = json_object_get(root, "model");
    if (jm && !json_is_string(jm) && !json_is_null(jm)) {
        status = body_error(msg, cap, 400, "'model' must be a string");
        goto out;
    }
    const char *model = jm && json_is_string(jm) ? json_string_value(jm) : NULL;
    out->sm = find_model(s, model);
    if (!out->sm) {
        status = body_error(msg, cap, 404, "model '%s' not found; GET /v1/models lists the models",
                            model);
        goto out;
    }

    /* options */
    json_t *jt = json_object_get(root, "truncate");
    if (jt && !json_is_boolean(jt) && !json_is_null(jt)) {
        status = body_error(msg, cap, 400, "'truncate' must be a boolean");
        goto out;
    }
    out->truncate = jt && json_is_true(jt);
    const struct hs_model *m = out->sm->model;
    if (openai) {
        json_t *jf = json_object_get(root, "encoding_format");
        if (jf && !json_is_null(jf)) {
            const char *f = json_is_string(jf) ? json_string_value(jf) : "";
            if (!strcmp(f, "base64"))
                out->base64 = true;
            else if (strcmp(f, "float") != 0) {
                status =
                    body_error(msg, cap, 400, "'encoding_format' must be \"float\" or \"base64\"");
                goto out;
            }
        }
        json_t *jd = json_object_get(root, "dimensions");
        if (jd && !json_is_null(jd)) {
            if (!json_is_integer(jd)) {
                status = body_error(msg, cap, 400, "'dimensions' must be an integer");
                goto out;
            }
            if (json_integer_value(jd) != m->config.dims.hidden) {
                status = body_error(msg, cap, 400,
                                    "'dimensions' = %" JSON_INTEGER_FORMAT
                                    " is not supported: model %s outputs %d dimensions",
                                    json_integer_value(jd), out->sm->name, m->config.dims.hidden);
                goto out;
            }
        }
    } else {
        json_t *jn = json_object_get(root, "normalize");
        if (jn && !json_is_boolean(jn) && !json_is_null(jn)) {
            status = body_error(msg, cap, 400, "'normalize' must be a boolean");
            goto out;
        }
        bool normalize = !jn || json_is_null(jn) || json_is_true(jn);
        if (!normalize && m->config.dims.normalize) {
            status = body_error(msg, cap, 400,
                                "'normalize': false is not supported: model %s ends with a "
                                "Normalize module",
                                out->sm->name);
            goto out;
        }
        out->post_normalize = normalize && !m->config.dims.normalize;
    }

    status =
        hs__request_qos(s, root, x_priority, x_timeout_ms, &out->prio, &out->timeout_ms, msg, cap);
    if (status) goto out;

    /* inputs */
    bool tokens;
    status = get_inputs(json_object_get(root, openai ? "input" : "inputs"),
                        openai ? "input" : "inputs", &items, &tokens, msg, cap);
    if (status) goto out;
    size_t n = json_array_size(items);
    if (n > (size_t)s->cfg.limits.items_max) {
        status = body_error(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                            s->cfg.limits.items_max);
        goto out;
    }
    out->seqs = hs_arena_calloc(a, n, sizeof *out->seqs);
    if (!out->seqs) {
        status = body_error(msg, cap, 500, "out of memory");
        goto out;
    }
    /* (an input's message is cut at 511 bytes, as it always was) */
    size_t icap = cap < 512 ? cap : 512;
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(items, i);
        status =
            tokens ? token_input(a, out->sm, it, i, out->truncate, &out->seqs[i], msg, icap)
                   : hs__text_input(s, a, out->sm, it, i, out->truncate, &out->seqs[i], msg, icap);
        if (status) goto out;
        out->prompt_tokens += out->seqs[i].n_tokens;
    }
    out->n = n;
out:
    json_decref(items);
    json_decref(root);
    return status;
}

int hs__tokenize_body(struct hs_server *s, struct hs_arena *a, const char *body, size_t len,
                      int64_t *ts, struct hs_buf *out, char *msg, size_t cap)
{
    json_t *root = NULL, *items = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;
    json_t *jm = json_object_get(root, "model");
    const char *model = jm && json_is_string(jm) ? json_string_value(jm) : NULL;
    struct hs_served_model *sm = find_model(s, model);
    if (!sm) {
        status = body_error(msg, cap, 404, "model '%s' not found", model);
        goto out;
    }
    json_t *ja = json_object_get(root, "add_special_tokens");
    bool special = !ja || !json_is_false(ja);
    bool tokens;
    status = get_inputs(json_object_get(root, "inputs"), "inputs", &items, &tokens, msg, cap);
    if (status) goto out;
    if (tokens) {
        status = body_error(msg, cap, 400, "'inputs' must be a string or an array of strings");
        goto out;
    }
    size_t n = json_array_size(items);
    if (n > (size_t)s->cfg.limits.items_max) {
        status = body_error(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                            s->cfg.limits.items_max);
        goto out;
    }
    const struct hs_model *m = sm->model;
    hs_buf_init(out, a, 4096);
    hs_buf_putc(out, '[');
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(items, i);
        if (!json_is_string(it)) {
            status = body_error(msg, cap, 400, "inputs[%zu]: expected a string", i);
            goto out;
        }
        const char *text = json_string_value(it);
        size_t len_i = json_string_length(it);
        if (utf8_chars(text, len_i) > (size_t)s->cfg.limits.chars_max) {
            status = body_error(msg, cap, 413, "inputs[%zu] has more than %d characters", i,
                                s->cfg.limits.chars_max);
            goto out;
        }
        /* Untruncated: a capacity for every byte plus the specials always suffices. The
         * tokenizer itself, not hs_model_tokenize, which cuts at the model's positions. */
        int ncap = (int)len_i + 2;
        int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)ncap);
        int nt = 0;
        struct hs_error err;
        hs_error_clear(&err);
        hs_status st =
            ids ? hs_tokenizer_encode(m->tokenizer, text, len_i, ids, ncap, &nt, NULL, &err)
                : HS_STATUS_NO_MEMORY;
        if (st != HS_STATUS_OK) {
            status = body_error(msg, cap, status_to_http(st), "inputs[%zu]: %s", i,
                                err.msg[0] ? err.msg : hs_status_str(st));
            goto out;
        }
        hs_buf_puts(out, i ? ",[" : "[");
        int first = 1;
        for (int t = 0; t < nt; t++) {
            bool is_special = t == 0 || t == nt - 1;
            if (is_special && !special) continue;
            const char *tt = hs_tokenizer_id_to_token(m->tokenizer, ids[t]);
            hs_buf_printf(out, "%s{\"id\":%d,\"text\":", first ? "" : ",", ids[t]);
            hs_buf_json_str(out, tt ? tt : "", tt ? strlen(tt) : 0);
            hs_buf_printf(out, ",\"special\":%s}", is_special ? "true" : "false");
            first = 0;
        }
        hs_buf_putc(out, ']');
    }
    hs_buf_putc(out, ']');
out:
    json_decref(items);
    json_decref(root);
    return status;
}

static json_t *parse_body(struct conn *k, enum MHD_Result *ret)
{
    char msg[HS__MSG_MAX];
    json_t *root = NULL;
    int status = hs__body_parse(k->body, k->body_len, k->ts, &root, msg, sizeof msg);
    if (status) *ret = send_error(k, status, 0, "%s", msg);
    return root;
}

/* Cosine of every row of the answer with the shadow's, reported to the router (k->mu held,
 * so a post-processing normalization never runs under it). */
static void shadow_compare(struct conn *k)
{
    struct hs_router *rt = k->srv->router;
    if (!k->primary_ok || !k->shadow_ok) {
        hs_router_on_shadow(rt, k->shadow_route, false, NULL, 0);
        return;
    }
    const int dim = k->sm->model->config.dims.hidden;
    double cos[64];
    int n = 0;
    for (int i = 0; i < k->req->n_seqs; i++) {
        const float *a = k->req->out + (size_t)i * dim, *b = k->shadow->out + (size_t)i * dim;
        double ab = 0, aa = 0, bb = 0;
        for (int j = 0; j < dim; j++) {
            ab += (double)a[j] * b[j];
            aa += (double)a[j] * a[j];
            bb += (double)b[j] * b[j];
        }
        cos[n++] = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
        if (n == 64 || i + 1 == k->req->n_seqs) {
            hs_router_on_shadow(rt, k->shadow_route, true, cos, n);
            n = 0;
        }
    }
}

static void shadow_done(struct hs_request *r, void *ctx)
{
    struct conn *k = ctx;
    pthread_mutex_lock(&k->mu);
    k->shadow_finished = true;
    k->shadow_ok = r->status == HS_STATUS_OK;
    if (k->primary_finished) shadow_compare(k);
    pthread_mutex_unlock(&k->mu);
}

static int64_t batch_ns_of(const struct hs_request *r)
{
    return r->ts[HS_TS_COPY_OUT] && r->ts[HS_TS_BATCHED]
               ? r->ts[HS_TS_COPY_OUT] - r->ts[HS_TS_BATCHED]
               : 0;
}

/* A new scheduler request for the same inputs, in storage prepared beforehand. */
static void request_clone(struct conn *k, const struct hs_request *from, struct hs_request *to,
                          enum hs_priority prio, hs_request_fn done)
{
    struct hs_seq *seqs = to->seqs;
    float *out = to->out;
    memset(to, 0, sizeof *to);
    for (int i = 0; i < from->n_seqs; i++) {
        memset(&seqs[i], 0, sizeof seqs[i]);
        seqs[i].ids = from->seqs[i].ids;
        seqs[i].n_tokens = from->seqs[i].n_tokens;
    }
    to->id = from->id;
    to->priority = prio;
    to->deadline_ns = from->deadline_ns;
    to->n_seqs = from->n_seqs;
    to->seqs = seqs;
    to->out = out;
    to->model = from->model;
    to->done = done;
    to->release = request_release;
    to->ctx = k;
    memcpy(to->ts, from->ts, sizeof to->ts);
    hs_request_init(to);
    atomic_fetch_add(&k->refs, 1);
    k->reqs[k->n_reqs++] = to;
}

/* Storage for one more scheduler request of n sequences of dim floats out (arena; MHD thread
 * only). dim comes from the caller: /predict's connections have no k->sm. */
static struct hs_request *request_storage(struct conn *k, size_t n, int dim)
{
    struct hs_request *r = hs_arena_calloc(k->arena, 1, sizeof *r);
    if (!r) return NULL;
    r->seqs = hs_arena_calloc(k->arena, n, sizeof *r->seqs);
    r->out = hs_arena_alloc(k->arena, sizeof(float) * n * (size_t)dim);
    return r->seqs && r->out ? r : NULL;
}

static void request_done(struct hs_request *r, void *ctx)
{
    struct conn *k = ctx;
    struct hs_server *s = k->srv;
    int64_t now = hs_now_ns();
    hs_router_on_result(s->router, r->lane, k->dec.probe, r->status, batch_ns_of(r),
                        r->in_batch_timeout, now);
    pthread_mutex_lock(&k->mu);
    if (r->status == HS_STATUS_ENGINE && k->retry && r == k->req) {
        /* One more try on another engine, when the budget allows. */
        struct hs_route_query q = {.req = r, .task = k->task};
        struct hs_route_decision d2;
        hs_router_retry(s->router, &q, &k->dec, now, &d2);
        if (d2.status == HS_STATUS_OK) {
            struct hs_request *r2 = k->retry;
            k->retry = NULL;
            request_clone(k, r, r2, r->priority, request_done);
            char first[sizeof k->dec.reason];
            snprintf(first, sizeof first, "%s", k->dec.reason);
            struct hs_route_decision prev = k->dec;
            k->dec = d2;
            snprintf(k->dec.reason, sizeof k->dec.reason, "%.120s; %.120s", first, d2.reason);
            k->req = r2;
            pthread_mutex_unlock(&k->mu);
            if (hs_sched_submit_lane(s->sched, d2.lane, r2) == HS_STATUS_OK) return;
            /* Not taken after all: answer with the first try's failure. */
            pthread_mutex_lock(&k->mu);
            k->dec = prev;
            k->req = r;
        }
    }
    k->done = true;
    k->primary_finished = true;
    k->primary_ok = k->req->status == HS_STATUS_OK;
    if (k->shadow && k->shadow_finished) shadow_compare(k);
    if (k->suspended) {
        k->suspended = false;
        MHD_resume_connection(k->mhd);
    }
    pthread_mutex_unlock(&k->mu);
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

/* Shared by /v1/embeddings and /embed: validate, tokenize, submit. */
static enum MHD_Result embed_begin(struct conn *k)
{
    struct hs_server *s = k->srv;
    bool openai = k->ep == EP_OPENAI_EMBED;
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
    k->prompt_tokens = in.prompt_tokens;
    const struct hs_model *m = k->sm->model;
    const size_t n = in.n;
    struct hs_request *r = hs_arena_calloc(k->arena, 1, sizeof *r);
    float *outv = hs_arena_alloc(k->arena, sizeof(float) * n * (size_t)m->config.dims.hidden);
    if (!r || !outv) return send_error(k, 500, 0, "out of memory");
    k->ts[HS_TS_TOKENIZED] = hs_now_ns();

    if (atomic_load(&s->draining)) return send_error(k, 503, 0, "server is shutting down");
    r->id = k->id;
    r->priority = in.prio;
    r->deadline_ns = k->ts[HS_TS_RECEIVED] + (int64_t)in.timeout_ms * 1000000;
    r->n_seqs = (int)n;
    r->seqs = in.seqs;
    r->out = outv;
    r->model = k->sm->name;
    r->done = request_done;
    r->release = request_release;
    r->ctx = k;
    memcpy(r->ts, k->ts, sizeof r->ts);
    hs_request_init(r);
    atomic_fetch_add(&k->refs, 1);
    k->reqs[k->n_reqs++] = r;
    pthread_mutex_init(&k->mu, NULL);
    k->mu_init = true;
    k->req = r;

    /* route */
    k->task = openai ? "embeddings" : "embed";
    const char *key = MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "X-Request-Id");
    struct hs_route_query q = {
        .req = r, .task = k->task, .key = key, .header = conn_header, .header_ctx = k};
    hs_router_decide(s->router, &q, hs_now_ns(), &k->dec);
    k->routed = true;
    r->ts[HS_TS_ROUTED] = hs_now_ns();
    if (k->dec.status != HS_STATUS_OK) {
        memcpy(k->ts, r->ts, sizeof k->ts);
        return send_error(k, status_to_http(k->dec.status), k->dec.retry_after_s, "%s",
                          k->dec.reason);
    }
    /* Storage for what may follow, made now: later the arena is not ours alone. */
    const struct hs_router_opts *ro = hs_router_opts(s->router);
    const struct hs_route *route = k->dec.route >= 0 ? &ro->routes[k->dec.route] : NULL;
    if (route && ro->retry_budget_max >= 1 && (route->n_lanes > 1 || route->failover_route >= 0))
        k->retry = request_storage(k, n, m->config.dims.hidden);
    struct hs_request *shadow = NULL;
    if (k->dec.shadow_lane >= 0 &&
        hs_sched_lane_opts(s->sched, k->dec.shadow_lane)->dim == m->config.dims.hidden &&
        (shadow = request_storage(k, n, m->config.dims.hidden)) != NULL) {
        /* The copy is bulk work: shed before anything a client waits for. */
        request_clone(k, r, shadow, HS_PRIORITY_BATCH, shadow_done);
        k->shadow_route = k->dec.route; /* the comparison is the shadowed route's */
    }
    int lane = k->dec.lane;
    hs_status st = hs_sched_submit_lane(s->sched, lane, r);
    if (st != HS_STATUS_OK) {
        hs_router_on_result(s->router, lane, k->dec.probe, st, 0, false, hs_now_ns());
        memcpy(k->ts, r->ts, sizeof k->ts);
        k->lane = r->lane;
        return send_error(k, status_to_http(st), r->retry_after_s, "%s", r->msg);
    }
    k->submitted = true;
    k->lane = r->lane;
    if (shadow) {
        pthread_mutex_lock(&k->mu);
        k->shadow = shadow;
        pthread_mutex_unlock(&k->mu);
        if (hs_sched_submit_lane(s->sched, k->dec.shadow_lane, shadow) != HS_STATUS_OK) {
            pthread_mutex_lock(&k->mu);
            k->shadow_finished = true; /* compared as failed */
            k->shadow_ok = false;
            if (k->primary_finished) shadow_compare(k);
            pthread_mutex_unlock(&k->mu);
        }
    }
    pthread_mutex_lock(&k->mu);
    if (!k->done) {
        MHD_suspend_connection(k->mhd);
        k->suspended = true;
    }
    bool done = k->done;
    pthread_mutex_unlock(&k->mu);
    /* Answered before we could suspend (a fast batch, an immediate expiry): respond now. */
    return done ? embed_finish(k) : MHD_YES;
}

/* After the scheduler answered: post-process and serialize. */
static enum MHD_Result embed_finish(struct conn *k)
{
    pthread_mutex_lock(&k->mu);
    struct hs_request *r = k->req;
    pthread_mutex_unlock(&k->mu);
    memcpy(k->ts, r->ts, sizeof k->ts);
    k->lane = r->lane;
    if (r->status != HS_STATUS_OK) {
        int status = status_to_http(r->status);
        return send_error(k, status, r->retry_after_s, "%s", r->msg);
    }
    const int dim = k->sm->model->config.dims.hidden;
    const size_t n = (size_t)r->n_seqs;
    if (k->post_normalize) {
        /* under k->mu: a shadow comparison may read these rows */
        pthread_mutex_lock(&k->mu);
        for (size_t i = 0; i < n; i++) {
            float *v = r->out + i * (size_t)dim;
            double ss = 0;
            for (int j = 0; j < dim; j++) ss += (double)v[j] * v[j];
            float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
            for (int j = 0; j < dim; j++) v[j] *= inv;
        }
        pthread_mutex_unlock(&k->mu);
    }
    struct hs_buf b;
    /* Sized once for the worst case so serialization never re-grows. */
    size_t per =
        k->base64 ? ((size_t)dim * 4 + 2) / 3 * 4 + 8 : (size_t)dim * (HS_JSON_FLOAT_MAX + 1) + 8;
    hs_buf_init(&b, k->arena, n * (per + 64) + 256 + strlen(k->sm->name));
    if (k->ep == EP_OPENAI_EMBED) {
        hs_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
        for (size_t i = 0; i < n; i++) {
            hs_buf_printf(
                &b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
            if (k->base64) {
                hs_buf_putc(&b, '"');
                hs_buf_base64(&b, r->out + i * (size_t)dim, (size_t)dim * sizeof(float));
                hs_buf_putc(&b, '"');
            } else {
                hs_buf_json_floats(&b, r->out + i * (size_t)dim, (size_t)dim);
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
            hs_buf_json_floats(&b, r->out + i * (size_t)dim, (size_t)dim);
        }
        hs_buf_putc(&b, ']');
    }
    k->ts[HS_TS_POST] = hs_now_ns();
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
                      "\"engine\":\"%s\",\"dimensions\":%d,\"max_tokens\":%d}",
                      hs_engine_name(sm->engine), sm->model->config.dims.hidden,
                      sm->model->config.max_seq_len);
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

static enum MHD_Result simple(struct conn *k)
{
    struct hs_buf b;
    switch (k->ep) {
    case EP_HEALTH:
        hs_buf_init(&b, k->arena, 64);
        hs_buf_puts(&b, "{\"status\":\"ok\"}");
        return send_buf(k, 200, &b, "application/json", 0);
    case EP_READY:
        return ready(k);
    case EP_MODELS:
        return models(k);
    case EP_METRICS:
        hs_buf_init(&b, k->arena, 65536);
        hs_metrics_render(k->srv->metrics, &b);
        hs__predict_metrics(k->srv, &b);
        hs__server_checks_metrics(k->srv, &b);
        return send_buf(k, 200, &b, "text/plain; version=0.0.4; charset=utf-8", 0);
    default:
        return send_error(k, 404, 0, "not found");
    }
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
 * dispatch
 */

static enum endpoint endpoint_of(const char *url, bool *want_post)
{
    static const struct {
        const char *path;
        enum endpoint ep;
        bool post;
    } table[] = {
        {"/v1/embeddings", EP_OPENAI_EMBED, true},
        {"/embeddings", EP_OPENAI_EMBED, true},
        {"/embed", EP_TEI_EMBED, true},
        {"/tokenize", EP_TOKENIZE, true},
        {"/predict", EP_PREDICT, true},
        {"/v1/models", EP_MODELS, false},
        {"/health", EP_HEALTH, false},
        {"/ready", EP_READY, false},
        {"/metrics", EP_METRICS, false},
        {"/admin/fault", EP_ADMIN_FAULT, true},
        {"/internal/v1/batch", EP_INTERNAL_BATCH, true},
        {"/internal/v1/status", EP_INTERNAL_STATUS, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) {
            *want_post = table[i].post;
            return table[i].ep;
        }
    return EP_NONE;
}

static bool body_append(struct conn *k, const char *data, size_t n)
{
    size_t limit = (size_t)k->srv->cfg.limits.body_bytes_max;
    if (k->body_too_big || k->body_len + n > limit) {
        k->body_too_big = true;
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
        bool want_post = false;
        k->ep = endpoint_of(url, &want_post);
        if (k->ep == EP_NONE) {
            conn_accept(k);
            return send_error(k, 404, 0, "no endpoint %s", url);
        }
        bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET");
        if (want_post ? !is_post : !is_get) {
            conn_accept(k);
            return send_error(k, 405, 0, "method %s not allowed on %s", method, url);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            long long n = atoll(cl);
            if (n > s->cfg.limits.body_bytes_max) {
                conn_accept(k);
                return send_error(k, 413, 0, "body of %lld bytes; the limit is %lld", n,
                                  (long long)s->cfg.limits.body_bytes_max);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!body_append(k, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->submitted) {
        /* resumed: the scheduler has answered */
        return k->ep == EP_PREDICT          ? hs__predict_resume(k)
               : k->ep == EP_INTERNAL_BATCH ? hs__internal_batch_resume(k)
                                            : embed_finish(k);
    }
    conn_accept(k); /* the whole body is here */
    if (k->body_too_big)
        return send_error(k, 413, 0, "request body exceeds %lld bytes",
                          (long long)s->cfg.limits.body_bytes_max);
    switch (k->ep) {
    case EP_OPENAI_EMBED:
    case EP_TEI_EMBED:
        return embed_begin(k);
    case EP_TOKENIZE:
        return tokenize(k);
    case EP_ADMIN_FAULT:
        return admin_fault(k);
    case EP_PREDICT:
        return hs__predict_begin(k);
    case EP_INTERNAL_BATCH:
        return hs__internal_batch_begin(k);
    case EP_INTERNAL_STATUS:
        return hs__internal_status(k);
    default:
        return simple(k);
    }
}

static enum hs_outcome outcome_of(int status)
{
    if (status == 200) return HS_OUTCOME_OK;
    if (status == 504) return HS_OUTCOME_TIMEOUT;
    if (status == 429 || status == 503) return HS_OUTCOME_REJECTED;
    return HS_OUTCOME_ERROR;
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
    bool model_req = k->ep == EP_OPENAI_EMBED || k->ep == EP_TEI_EMBED || k->ep == EP_PREDICT ||
                     k->ep == EP_INTERNAL_BATCH;
    if (model_req && k->http_status) {
        hs_metrics_request(s->metrics, k->lane, outcome_of(k->http_status), k->ts);
        char decision[400] = "";
        if (k->routed)
            snprintf(decision, sizeof decision, "route %s, policy %s, engine %s: %s",
                     hs_router_route_name(s->router, k->dec.route),
                     hs_route_policy_name(k->dec.policy),
                     k->dec.lane >= 0 ? s->lanes[k->dec.lane].label : "none", k->dec.reason);
        hs_trace_request(s->trace, k->lane, k->id, k->http_status, k->ts,
                         k->routed ? decision : NULL);
    }
    /* The owner's references: each scheduler request's (the arena goes once the scheduler let
     * go of them all), then the connection's own. */
    int n_reqs = k->n_reqs;
    struct hs_request *reqs[CONN_MAX_REQS];
    memcpy(reqs, k->reqs, sizeof reqs);
    bool accepted = k->accepted;
    for (int i = 0; i < n_reqs; i++) hs_request_unref(reqs[i]);
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
uint64_t hs__conn_id(struct conn *k)
{
    return k->id;
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

void hs__conn_query(struct conn *k, struct hs_request *r, const char *task,
                    struct hs_route_query *q)
{
    k->task = task; /* a retry's query */
    *q = (struct hs_route_query){
        .req = r,
        .task = task,
        .key = MHD_lookup_connection_value(k->mhd, MHD_HEADER_KIND, "X-Request-Id"),
        .header = conn_header,
        .header_ctx = k};
}

void hs__conn_decided(struct conn *k, const struct hs_route_decision *d, const char *note)
{
    if (k->mu_init) pthread_mutex_lock(&k->mu);
    if (d) {
        k->dec = *d;
        k->routed = true;
    }
    k->route_note = note;
    if (k->mu_init) pthread_mutex_unlock(&k->mu);
}

hs_status hs__conn_submit(struct conn *k, struct hs_request *r, const struct hs_route_decision *d,
                          bool *answered)
{
    struct hs_server *s = k->srv;
    if (!k->mu_init) {
        pthread_mutex_init(&k->mu, NULL);
        k->mu_init = true;
    }
    if (k->n_reqs + 2 > CONN_MAX_REQS) return HS_STATUS_INVALID_ARGUMENT; /* (a bug) */
    /* Storage for a retry, made now: later the arena is not ours alone. */
    const struct hs_router_opts *ro = hs_router_opts(s->router);
    const struct hs_route *route = d->route >= 0 ? &ro->routes[d->route] : NULL;
    struct hs_request *retry = NULL;
    if (route && ro->retry_budget_max >= 1 && (route->n_lanes > 1 || route->failover_route >= 0))
        retry = request_storage(k, (size_t)r->n_seqs, hs_sched_lane_opts(s->sched, d->lane)->dim);
    r->done = request_done;
    r->release = request_release;
    r->ctx = k;
    hs_request_init(r);
    atomic_fetch_add(&k->refs, 1);
    pthread_mutex_lock(&k->mu);
    k->reqs[k->n_reqs++] = r;
    k->req = r;
    k->retry = retry;
    k->dec = *d;
    k->routed = true;
    k->done = false;
    pthread_mutex_unlock(&k->mu);
    r->ts[HS_TS_ROUTED] = hs_now_ns();
    hs_status st = hs_sched_submit_lane(s->sched, d->lane, r);
    if (st != HS_STATUS_OK) {
        hs_router_on_result(s->router, d->lane, d->probe, st, 0, false, hs_now_ns());
        memcpy(k->ts, r->ts, sizeof k->ts);
        k->lane = r->lane;
        return st;
    }
    k->submitted = true;
    k->lane = r->lane;
    pthread_mutex_lock(&k->mu);
    if (!k->done) {
        MHD_suspend_connection(k->mhd);
        k->suspended = true;
    }
    *answered = k->done;
    pthread_mutex_unlock(&k->mu);
    return HS_STATUS_OK;
}

struct hs_request *hs__conn_answer(struct conn *k)
{
    pthread_mutex_lock(&k->mu);
    struct hs_request *r = k->req;
    pthread_mutex_unlock(&k->mu);
    memcpy(k->ts, r->ts, sizeof k->ts);
    k->lane = r->lane;
    return r;
}
