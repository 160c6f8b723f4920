/* hetserve — server internals shared by server.c (lifecycle) and http.c (endpoints). */
#ifndef HS_SERVER_SERVER_IMPL_H
#define HS_SERVER_SERVER_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/arena.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "sched/dispatch.h"
#include "sched/router.h"
#include "sched/sched.h"
#include "server/config.h"
#include "server/json.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/trace.h"
#include "server/capture.h"
#include "server/tasks.h"

struct conn; /* one HTTP request (http.c) */

struct hs_served_model {
    char name[128];
    struct hs_model *model;
    hs_engine_t engine;      /* the first engine it is resident on */
    int lane;                /* the first lane serving it */
    struct hs__tasks *tasks; /* prompts, classifier head (tasks.h); NULL: none */
};

/* Renders the lane checks as Prometheus series (hetserve_lane_check_*). */
struct hs_buf;
void hs__server_checks_metrics(const struct hs_server *s, struct hs_buf *b);

/* One scheduler lane: a model resident on one engine, with its executor (slots = the engine's
 * quota). */
struct hs_served_lane {
    struct hs_served_model *sm;
    hs_engine_t engine;
    struct hs_executor *exec; /* NULL on a remote lane */
    char label[48];           /* the lane's engine label: the engine's name (a slice's
                                 "<name>/<slice>"), or a remote engine's "<name>/<worker slot>" */
    int worker;               /* remote lanes: the worker slot; -1 on local lanes */
    int engine_cfg;           /* its engine's index in cfg.engines (a slice: the sliced one's) */
    /* per boundary of its placement (hs_executor_boundary), since start: copy and sync time,
     * hand-overs (hetserve_boundary_* in /metrics) */
    atomic_int_fast64_t boundary_copy_ns[HS_BATCH_MAX_BOUNDARIES];
    atomic_int_fast64_t boundary_sync_ns[HS_BATCH_MAX_BOUNDARIES];
    atomic_int_fast64_t boundary_count[HS_BATCH_MAX_BOUNDARIES];
    atomic_int_fast64_t wait_ns; /* pipeline: waiting for an engine another slot held */
};

/* Renders the boundary series of every split lane (hetserve_boundary_*). */
void hs__server_boundary_metrics(const struct hs_server *s, struct hs_buf *b);

/* The check of one lane against its model's cpu f32 reference, made at load (verify.h). */
struct hs_lane_check {
    char model[128], engine[32];
    enum hs_dtype dtype;
    double cos_min, cos_mean, tol_min, tol_mean;
    bool pass;
    bool excluded; /* failed with models[].check: exclude: the lane takes no traffic */
};

/* How long shutdown waits, past drain_timeout_ms, for answered requests to reach clients. */
#define HS_SERVER_SEND_WAIT_MS 2000

struct hs_predict;     /* POST /predict: heads and cascade (predict.c) */
struct hs_ocr_service; /* POST /v1/ocr: the config's pipelines[] (ocr_http.c) */
struct hs_remote_pool;

struct hs_server {
    struct hs_config cfg;
    /* engine instances: engines[i] for i < cfg.n_engines is cfg.engines[i] (its slice 0 when it
     * has slices), the further slices follow; engine_cfg[i] is each one's cfg.engines index */
    int n_engines;
    hs_engine_t engines[HS_CONFIG_MAX_ENGINES * HS_CONFIG_MAX_SLICES];
    int engine_cfg[HS_CONFIG_MAX_ENGINES * HS_CONFIG_MAX_SLICES];
    int n_models;
    struct hs_served_model models[HS_CONFIG_MAX_MODELS];
    int n_lanes;
    struct hs_served_lane lanes[HS_SCHED_MAX_LANES];
    int n_checks;
    struct hs_lane_check checks[HS_SCHED_MAX_LANES];
    struct hs_sched *sched;
    struct hs_router *router;
    struct hs_dispatch *dispatch; /* every model request's way through sched and router */
    struct hs_metrics *metrics;
    struct hs_trace *trace;
    struct hs_capture *capture; /* NULL: server.capture.file is empty */
    struct MHD_Daemon *daemon;
    int port;
    atomic_bool draining;
    atomic_uint_fast64_t next_id;
    /* requests between their last byte (or an answer at once) and their completed response */
    pthread_mutex_t inflight_mu;
    pthread_cond_t inflight_cv;
    int64_t inflight;
    struct hs_predict *predict; /* NULL when the config has no cascade section */
    struct hs_ocr_service *ocr; /* NULL when the config has no pipelines */
    /* remote engines' worker pools, by engine index (NULL for local engines) */
    struct hs_remote_pool *pools[HS_CONFIG_MAX_ENGINES];
    bool router_role;  /* every engine is remote: models without weights */
    bool internal_api; /* the internal API (internal.c) is served */
    /* API keys (server/auth.h): NULL = none configured, every endpoint open; swapped by
     * hs_server_reload_auth under auth_mu */
    pthread_mutex_t auth_mu;
    struct hs_auth *auth;
};

/* The current key set with a reference (release with hs_auth_unref), NULL when auth is off. */
struct hs_auth *hs__server_auth(struct hs_server *s);
/* Does an endpoint path or prefix ("/v1", "/embed") name any row of the endpoint table? */
bool hs__http_endpoint_known(const char *prefix);

/* The libmicrohttpd callbacks (http.c). */
enum MHD_Result hs__http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls);
void hs__http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode why);

/* --- the internal API routers call (internal.c): POST to the batch endpoint, GET the
 * status one (/internal/v1/batch, /internal/v1/status). begin: the body is in; resume: the batch's
 * request was answered. */
enum MHD_Result hs__internal_batch_begin(struct conn *k);
enum MHD_Result hs__internal_batch_resume(struct conn *k);
enum MHD_Result hs__internal_status(struct conn *k);
/* Sends b as the response with this status and content type (binary bodies). */
enum MHD_Result hs__conn_send(struct conn *k, int status, struct hs_buf *b, const char *ctype);

/* The engine named name, NULL when none (server.c). */
hs_engine_t hs__server_engine(struct hs_server *s, const char *name);
/* The served model named name (the first one for NULL or ""), NULL when none (server.c). */
struct hs_served_model *hs__server_model(struct hs_server *s, const char *name);
/* hs__server_model, and a path-like name by its last component ("sentence-transformers/x"). */
struct hs_served_model *hs__find_model(struct hs_server *s, const char *name);
/* Writes the refusal's message into msg[cap] and returns status: the request decoders' one
 * way to refuse (request_body.c). */
int hs__refuse(char *msg, size_t cap, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* --- POST /predict (predict.c) ---
 * Loads the heads named by cfg.cascade and checks them against the served models; *out is NULL
 * when /predict is not configured. */
hs_status hs__predict_create(struct hs_server *s, struct hs_predict **out, struct hs_error *err);
void hs__predict_free(struct hs_predict *p);
/* The handler's first call once the body is in, and every call after a submitted request of
 * this connection was answered. */
enum MHD_Result hs__predict_begin(struct conn *k);
enum MHD_Result hs__predict_resume(struct conn *k);
/* Appends the cascade counters (Prometheus text) to out; nothing when not configured. */
void hs__predict_metrics(struct hs_server *s, struct hs_buf *out);
/* The classification head /predict applies to sm's embeddings, NULL when it has none. */
struct hs_head;
const struct hs_head *hs__predict_head(const struct hs_server *s, const struct hs_served_model *sm);

/* --- POST /v1/ocr (ocr_http.c) ---
 * Loads every pipelines[] item (its graphs on its engines) and starts its stages; *out is NULL
 * without pipelines. drain answers what the pipelines hold (at shutdown, while the daemon runs);
 * free releases the graphs (before the engines go). */
hs_status hs__ocr_create(struct hs_server *s, struct hs_ocr_service **out, struct hs_error *err);
void hs__ocr_drain(struct hs_ocr_service *o);
void hs__ocr_free(struct hs_ocr_service *o);
enum MHD_Result hs__ocr_begin(struct conn *k);
enum MHD_Result hs__ocr_resume(struct conn *k);
void hs__ocr_done(void *ctx, void *item, hs_status s, const struct hs_error *e);
void hs__ocr_metrics(struct hs_server *s, struct hs_buf *out);
/* The image bytes of a /v1/ocr body: the body itself, or with ctype application/json the base64
 * of {"image": ...}; *bytes (hs_free) and *n, or an HTTP status (400, 413 over max_bytes, 500)
 * with msg. No connection needed (tests/fuzz/fuzz_ocr_body.c). */
int hs__ocr_body(const char *body, size_t len, const char *ctype, int64_t max_bytes,
                 uint8_t **bytes, size_t *n, char *msg, size_t cap);

/* A connection waiting for work of its own (not a dispatch job): wait_begin before handing the
 * work on, then wait: true when it was already answered (call the endpoint's finish now), false
 * when the connection is suspended until hs__conn_wake (from any thread) resumes it and the
 * handler calls the endpoint's finish. hold / release: a reference on the connection for the
 * one that will wake it. */
void hs__conn_wait_begin(struct conn *k);
bool hs__conn_wait(struct conn *k);
void hs__conn_wake(struct conn *k);
void hs__conn_hold(struct conn *k);
void hs__conn_release(struct conn *k);

/* The connection (http.c) as /predict sees it. */
struct hs_arena *hs__conn_arena(struct conn *k);
struct hs_server *hs__conn_server(struct conn *k);
int64_t *hs__conn_ts(struct conn *k);    /* the connection's stage timestamps */
void **hs__conn_predict(struct conn *k); /* a slot for predict.c's per-request state */
const char *hs__conn_header(struct conn *k, const char *name);
const char *hs__conn_body(struct conn *k, size_t *len); /* the request body as received */
enum MHD_Result hs__conn_error(struct conn *k, int status, double retry_after_s, const char *msg);
/* 200 with a JSON body from the connection's arena and one extra header (may be NULL). */
enum MHD_Result hs__conn_reply(struct conn *k, struct hs_buf *b, const char *header,
                               const char *value);
int hs__http_status(hs_status st);
/* A job (sched/dispatch.h) of this connection, in its arena: n sequences tokenized for model,
 * task for the router's rules, X-Request-Id as the sticky key, the request's headers for rules.
 * NULL when out of memory. At most two per connection. */
struct hs_job *hs__conn_job(struct conn *k, const char *task, const char *model,
                            const struct hs_seq *seqs, size_t n, enum hs_priority prio,
                            int64_t deadline_ns);
/* Hands j to the dispatch (from: the cascade stage it escalates, else NULL) with the
 * connection's stage timestamps; j becomes the job the response answers (X-Engine, X-Route,
 * X-Route-Reason, trace). HS_STATUS_OK: the connection is suspended until j is answered, unless
 * it already was (*answered); either way j's stamps and lane are the connection's once it is.
 * Any other status: j was refused (also while the server drains), with j->msg and
 * j->retry_after_s. */
hs_status hs__conn_dispatch(struct conn *k, struct hs_job *j, const struct hs_job *from,
                            bool *answered);
/* The request's path (decoded), valid until the response is sent. */
const char *hs__conn_url(struct conn *k);
/* One extra response header (name and value kept, not copied; may be NULL). */
void hs__conn_set_header(struct conn *k, const char *name, const char *value);
/* X-Engine for a response not routed to a lane (value in the connection's arena) */
void hs__conn_set_engine(struct conn *k, const char *engine);
/* note (may be NULL; kept, not copied) is appended to X-Route as ";<note>". */
void hs__conn_route_note(struct conn *k, const char *note);

/* --- request bodies (http.c, predict.c) ---
 * The bytes a client sent, decoded into a request without the connection, so that the handlers
 * and tests/fuzz/fuzz_http.c run the same code. Each returns 0, or an HTTP status with the error
 * message in msg (cut to cap bytes; the handlers' buffers are HS__MSG_MAX, /predict's 512).
 * Token ids and sequences live in arena a; ts (may be NULL) receives the HS_TS_PARSED stamp.
 * They read s->models, s->n_models and s->cfg.limits only. Thread-safe for distinct arenas. */
#define HS__MSG_MAX 768

/* The body as one JSON object (*root, a new reference) or 400. */
int hs__body_parse(const char *body, size_t len, int64_t *ts, json_t **root, char *msg, size_t cap);

/* POST /v1/embeddings (openai) or /embed: model, options, priority and deadline (the body's
 * fields win over the X-Priority and X-Timeout-Ms headers, NULL when absent), inputs (strings,
 * token-id arrays) tokenized for the model. */
struct hs__embed_req {
    struct hs_served_model *sm;
    bool truncate;
    bool base64;         /* openai encoding_format "base64" */
    bool post_normalize; /* TEI normalize on a model without a Normalize module */
    enum hs_priority prio;
    long long timeout_ms;
    size_t n;            /* inputs, >= 1 */
    struct hs_seq *seqs; /* [n]: [CLS] .. [SEP] ids */
    int prompt_tokens;   /* sum of the sequences' tokens */
    int dimensions;      /* "dimensions": the first this many of each row (0: all) */
    bool renormalize;    /* dimensions cut a normalized row: L2-normalize the cut */
};
/* A request's priority and deadline, the same for every endpoint: the body's "priority" and
 * "timeout_ms" win over the X-Priority and X-Timeout-Ms headers; default interactive and
 * limits.timeout_ms; 0 or a 400 status with msg. */
int hs__request_qos(const struct hs_server *s, json_t *root, const char *x_priority,
                    const char *x_timeout_ms, enum hs_priority *prio, long long *timeout_ms,
                    char *msg, size_t cap);

int hs__embed_decode(struct hs_server *s, struct hs_arena *a, bool openai, const char *body,
                     size_t len, const char *x_priority, const char *x_timeout_ms, int64_t *ts,
                     struct hs__embed_req *out, char *msg, size_t cap);

/* POST /tokenize: decodes the body and writes the whole response body (a JSON array per input
 * of {"id", "text", "special", "start", "stop"}) into out (in arena a; initialised only on
 * success). */
int hs__tokenize_body(struct hs_server *s, struct hs_arena *a, const char *body, size_t len,
                      int64_t *ts, struct hs_buf *out, char *msg, size_t cap);

/* One /tokenize input (a string or a pair [text, text]) as TEI's token array, appended to out
 * (src/server/tokenize.c); 0 or an HTTP status with msg. */
int hs__tokenize_item(const struct hs_model *m, json_t *item, size_t idx, bool special,
                      struct hs_buf *out, char *msg, size_t cap);
/* POST /decode (TEI): {"ids", "skip_special_tokens"} -> a JSON array of texts in out. */
int hs__decode_body(struct hs_server *s, struct hs_arena *a, const char *body, size_t len,
                    int64_t *ts, struct hs_buf *out, char *msg, size_t cap);

/* Validates and tokenizes one text input for model sm (as /embed does). */
int hs__text_input(const struct hs_server *srv, struct hs_arena *a,
                   const struct hs_served_model *sm, json_t *text, size_t idx, bool truncate,
                   struct hs_seq *seq, char *msg, size_t cap);
/* How a text becomes tokens: truncate (else 413 when too long), from the left (keeping the end
 * of the text; the template's first and last special tokens stay), a prompt put before it. */
struct hs__text_opts {
    bool truncate;
    bool left;
    const struct hs__prompt *prompt; /* NULL: none */
};
int hs__text_input_opts(const struct hs_server *srv, struct hs_arena *a,
                        const struct hs_served_model *sm, json_t *text, size_t idx,
                        const struct hs__text_opts *o, struct hs_seq *seq, char *msg, size_t cap);
/* The options every TEI-shaped endpoint shares: truncate (boolean), truncation_direction
 * ("left" / "right", any case), prompt_name (tasks.h). 0 or 400 with msg. */
int hs__text_opts_decode(const struct hs_served_model *sm, json_t *root, struct hs__text_opts *o,
                         char *msg, size_t cap);

/* POST /predict: the inputs (one string or an array of them), truncate, priority and deadline
 * (hs__request_qos), the texts tokenized for sm, the model that classifies first. */
struct hs__predict_req {
    bool single; /* "inputs" was one string */
    bool truncate;
    enum hs_priority prio;
    long long timeout_ms;
    size_t n;            /* inputs, >= 1 */
    json_t *texts;       /* the inputs as an array: a new reference, the caller's to release */
    struct hs_seq *seqs; /* [n], tokenized for sm */
};
int hs__predict_decode(struct hs_server *s, struct hs_served_model *sm, struct hs_arena *a,
                       const char *body, size_t len, const char *x_priority,
                       const char *x_timeout_ms, int64_t *ts, struct hs__predict_req *out,
                       char *msg, size_t cap);

/* --- the task endpoints (task_api.c): /rerank, /v1/rerank, /similarity, /predict with a
 * checkpoint head, GET /info. Each begin decodes, tokenizes and dispatches one job; finish
 * scores the answer. */
enum MHD_Result hs__rerank_begin(struct conn *k);
enum MHD_Result hs__rerank_v1_begin(struct conn *k);
enum MHD_Result hs__similarity_begin(struct conn *k);
enum MHD_Result hs__cls_predict_begin(struct conn *k);
enum MHD_Result hs__root_predict_begin(struct conn *k); /* one text answered as [[...]] */
enum MHD_Result hs__embed_sparse_begin(struct conn *k);
enum MHD_Result hs__embed_all_begin(struct conn *k);
enum MHD_Result hs__task_finish(struct conn *k);
enum MHD_Result hs__info(struct conn *k);
/* Decodes a task body (kind: 0 /rerank, 1 /v1/rerank, 2 /similarity, 3 /predict with the
 * checkpoint head, 4 the root route's /predict) into *out (arena a); 0 or an HTTP status with msg.
 */
int hs__task_decode(struct hs_server *s, struct hs_arena *a, int kind, const char *body, size_t len,
                    const char *x_priority, const char *x_timeout_ms, int64_t *ts, void **out,
                    char *msg, size_t cap);
/* Whether POST /predict goes to a checkpoint head rather than the cascade: the body's "model"
 * has one, or no cascade is configured and some served model has one. */
bool hs__predict_uses_checkpoint(struct hs_server *s, const char *body, size_t len);
/* A decoded task's sequences (ids, token types for pairs), [*n]. */
const struct hs_seq *hs__task_seqs(const void *task, size_t *n);
/* TEI's root route POST /: the task the body's (or the first) model serves: 0 embed,
 * 1 similarity (an embedding model, "inputs" an object), 2 rerank (a classifier, a "query"),
 * 3 predict (a classifier), 4 embed_sparse (a SPLADE model), 5 embed_all (no pooling). */
int hs__root_task(struct hs_server *s, const char *body, size_t len);

#endif
