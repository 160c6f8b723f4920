/* The remote engine: a pool of workers reached over HTTP with libcurl (see remote.h). */
#include "engine/remote/remote.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"

#define ANSWER_BYTES_MAX (256u << 20) /* a worker's answer larger than this is refused */
#define ADDRS_MAX        64

/* ---------------------------------------------------------------------------------------------
 * the engine object: a name in the engine table; its batches go through the pool's runners
 */

static void remote_caps(void *ctx, struct hs_engine_caps *out)
{
    (void)ctx;
    snprintf(out->kind, sizeof out->kind, "remote");
    snprintf(out->device, sizeof out->device, "hetserve workers over HTTP");
    out->dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_F16;
    out->stages = 0; /* runs no stage here */
}

static const struct hs_engine_iface remote_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "remote",
    .caps = remote_caps,
};

hs_status hs_engine_remote_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                                  struct hs_error *err)
{
    return hs__engine_wrap(&remote_iface, NULL, opts ? opts->name : NULL, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * the pool
 */

struct bytes {
    uint8_t *p;
    size_t len, cap;
};

struct rslot {
    CURL *easy;
    struct bytes req, resp;
};

struct rlane {
    struct hs_remote_pool *pool;
    int worker, lane, dim, slots;
    char model[HS_WIRE_MODEL_MAX];
    struct rslot slot[HS_RUNNER_MAX_SLOTS];
};

struct hs_remote_pool {
    struct hs_remote_opts o;
    char name[64], dns[256], file[1024];
    char (*static_list)[HS_REMOTE_ADDR_MAX];
    int n_workers;
    pthread_mutex_t mu;
    char addr[HS_REMOTE_MAX_WORKERS][HS_REMOTE_ADDR_MAX]; /* "" = empty slot */
    int n_lanes;
    struct rlane *lanes[HS_REMOTE_MAX_RUNNERS];
    struct curl_slist *hdrs;
    void (*on_change)(void *ctx, int lane, bool enabled);
    void *on_change_ctx;
    pthread_t thread;
    bool running, stop;
    pthread_cond_t cv;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool bytes_reserve(struct bytes *b, size_t n)
{
    if (b->len + n <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    uint8_t *p = hs_realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* "host:port", or host alone with the default port, into out; false when unusable. */
static bool norm_addr(const char *s, int port, char out[HS_REMOTE_ADDR_MAX])
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n || *s == '#') return false;
    int w = memchr(s, ':', n) ? snprintf(out, HS_REMOTE_ADDR_MAX, "%.*s", (int)n, s)
                              : snprintf(out, HS_REMOTE_ADDR_MAX, "%.*s:%d", (int)n, s, port);
    return w > 0 && w < HS_REMOTE_ADDR_MAX;
}

/* The workers as configured now: up to ADDRS_MAX addresses, without duplicates.
 * Returns the count, or -1 when the source could not be read (the pool then keeps what it
 * has: a resolver that fails for a moment must not empty a pool). */
static int resolve(struct hs_remote_pool *p, char out[ADDRS_MAX][HS_REMOTE_ADDR_MAX])
{
    int n = 0;
    if (p->dns[0]) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(p->dns, NULL, &hints, &res);
        if (rc) {
            hs_log_warn("remote %s: dns %s: %s", p->name, p->dns, gai_strerror(rc));
            return -1;
        }
        for (struct addrinfo *a = res; a && n < ADDRS_MAX; a = a->ai_next) {
            char ip[INET_ADDRSTRLEN];
            const struct sockaddr_in *in = (const struct sockaddr_in *)a->ai_addr;
            if (inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip))
                snprintf(out[n++], HS_REMOTE_ADDR_MAX, "%s:%d", ip, p->o.port);
        }
        freeaddrinfo(res);
    } else if (p->file[0]) {
        FILE *f = fopen(p->file, "r");
        if (!f) {
            hs_log_warn("remote %s: cannot read endpoints file %s", p->name, p->file);
            return -1;
        }
        char line[512];
        while (n < ADDRS_MAX && fgets(line, sizeof line, f))
            if (norm_addr(line, p->o.port, out[n])) n++;
        fclose(f);
    } else {
        for (int i = 0; i < p->o.n_endpoints && n < ADDRS_MAX; i++)
            memcpy(out[n++], p->static_list[i], HS_REMOTE_ADDR_MAX);
    }
    int m = 0; /* in their order (a static list's i-th worker is slot i), without duplicates */
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < m && strcmp(out[k], out[i])) k++;
        if (k == m) memmove(out[m++], out[i], HS_REMOTE_ADDR_MAX);
    }
    return m;
}

/* Puts the resolved workers into slots: a worker keeps its slot, a gone one frees it, a new
 * one takes the first free slot. Tells on_change about every lane whose slot changed. */
static void apply(struct hs_remote_pool *p, char list[ADDRS_MAX][HS_REMOTE_ADDR_MAX], int n)
{
    bool changed[HS_REMOTE_MAX_WORKERS] = {false};
    pthread_mutex_lock(&p->mu);
    for (int w = 0; w < p->n_workers; w++) {
        bool keep = false;
        for (int i = 0; i < n && !keep; i++) keep = !strcmp(p->addr[w], list[i]);
        if (p->addr[w][0] && !keep) {
            hs_log_warn("remote %s: worker %s left (slot %d)", p->name, p->addr[w], w);
            p->addr[w][0] = '\0';
            changed[w] = true;
        }
    }
    for (int i = 0; i < n; i++) {
        int w = 0, free_w = -1;
        for (; w < p->n_workers && strcmp(p->addr[w], list[i]); w++)
            if (free_w < 0 && !p->addr[w][0]) free_w = w;
        if (w < p->n_workers) continue;
        if (free_w < 0) {
            hs_log_warn("remote %s: worker %s has no free slot (workers_max %d)", p->name, list[i],
                        p->n_workers);
            continue;
        }
        memcpy(p->addr[free_w], list[i], HS_REMOTE_ADDR_MAX);
        hs_log_info("remote %s: worker %s joined (slot %d)", p->name, list[i], free_w);
        changed[free_w] = true;
    }
    bool on[HS_REMOTE_MAX_RUNNERS];
    for (int l = 0; l < p->n_lanes; l++) on[l] = p->addr[p->lanes[l]->worker][0] != '\0';
    void (*fn)(void *, int, bool) = p->on_change;
    pthread_mutex_unlock(&p->mu);
    for (int l = 0; fn && l < p->n_lanes; l++)
        if (changed[p->lanes[l]->worker]) fn(p->on_change_ctx, p->lanes[l]->lane, on[l]);
}

static void *refresher(void *arg)
{
    struct hs_remote_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += p->o.refresh_s;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop) break;
        pthread_mutex_unlock(&p->mu);
        char list[ADDRS_MAX][HS_REMOTE_ADDR_MAX];
        int n = resolve(p, list);
        if (n >= 0) apply(p, list, n);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

hs_status hs_remote_pool_create(const struct hs_remote_opts *o, struct hs_remote_pool **out,
                                struct hs_error *err)
{
    *out = NULL;
    pthread_once(&curl_once, curl_init);
    int n_static = o->n_endpoints;
    bool dynamic = (o->dns && *o->dns) || (o->endpoints_file && *o->endpoints_file);
    int workers = o->workers_max > 0 ? o->workers_max : n_static;
    if (workers < 1 || workers > HS_REMOTE_MAX_WORKERS)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "remote %s: 1..%d workers (endpoints or workers_max)", o->name,
                            HS_REMOTE_MAX_WORKERS);
    if (!dynamic && n_static < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "remote %s: needs endpoints, dns or endpoints_file", o->name);
    struct hs_remote_pool *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "remote pool");
    p->o = *o;
    p->n_workers = workers;
    snprintf(p->name, sizeof p->name, "%s", o->name);
    snprintf(p->dns, sizeof p->dns, "%s", o->dns ? o->dns : "");
    snprintf(p->file, sizeof p->file, "%s", o->endpoints_file ? o->endpoints_file : "");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->static_list = n_static ? hs_calloc((size_t)n_static, HS_REMOTE_ADDR_MAX) : NULL;
    p->hdrs = curl_slist_append(NULL, "Content-Type: application/x-hetserve-batch");
    if ((n_static && !p->static_list) || !p->hdrs) {
        hs_remote_pool_free(p);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "remote pool");
    }
    for (int i = 0; i < n_static; i++)
        if (!norm_addr(o->endpoints[i], o->port, p->static_list[i])) {
            hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "remote %s: bad endpoint '%s'", o->name,
                         o->endpoints[i]);
            hs_remote_pool_free(p);
            return HS_STATUS_INVALID_ARGUMENT;
        }
    p->o.endpoints = NULL;
    p->o.dns = p->o.endpoints_file = NULL;
    char list[ADDRS_MAX][HS_REMOTE_ADDR_MAX];
    int n = resolve(p, list);
    if (n > 0) apply(p, list, n);
    *out = p;
    return HS_STATUS_OK;
}

int hs_remote_pool_workers(const struct hs_remote_pool *p)
{
    return p->n_workers;
}

void hs_remote_pool_endpoint(struct hs_remote_pool *p, int w, char *buf, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    snprintf(buf, cap, "%s", w >= 0 && w < p->n_workers ? p->addr[w] : "");
    pthread_mutex_unlock(&p->mu);
}

static size_t on_data(char *data, size_t size, size_t n, void *ctx)
{
    struct bytes *b = ctx;
    size_t k = size * n;
    if (b->len + k > ANSWER_BYTES_MAX || !bytes_reserve(b, k)) return 0; /* aborts the transfer */
    memcpy(b->p + b->len, data, k);
    b->len += k;
    return k;
}

static hs_status rl_run(void *ctx, int slot, const struct hs_batch *b, float *out,
                        struct hs_batch_timing *t, struct hs_error *err)
{
    struct rlane *L = ctx;
    struct hs_remote_pool *p = L->pool;
    struct rslot *S = &L->slot[slot];
    char addr[HS_REMOTE_ADDR_MAX];
    hs_remote_pool_endpoint(p, L->worker, addr, sizeof addr);
    if (!addr[0])
        return hs_error_set(err, HS_STATUS_ENGINE, "remote %s: worker slot %d has no worker now",
                            p->name, L->worker);
    const int64_t t0 = hs_now_ns();
    int64_t left_ms = b->deadline_ns ? (b->deadline_ns - t0) / 1000000 : 86400000;
    if (left_ms < 1)
        return hs_error_set(err, HS_STATUS_TIMEOUT, "deadline passed before the batch was sent");
    int64_t timeout_ms = left_ms;
    if (p->o.timeout_ms > 0 && p->o.timeout_ms < timeout_ms) timeout_ms = p->o.timeout_ms;

    size_t size = hs_wire_req_size_typed(b->n_seqs, b->n_tokens, strlen(L->model), b->type_ids);
    S->req.len = 0;
    if (!bytes_reserve(&S->req, size))
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "remote %s: batch buffer", p->name);
    S->req.len =
        hs_wire_req_encode_typed(S->req.p, L->model, p->o.dtype, b->batch_class, (int)left_ms,
                                 b->n_seqs, b->lengths, b->n_tokens, b->ids, b->type_ids);
    S->resp.len = 0;
    char url[HS_REMOTE_ADDR_MAX + 32];
    snprintf(url, sizeof url, "http://%s/internal/v1/batch", addr);
    CURL *e = S->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, (const char *)S->req.p);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)S->req.len);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    CURLcode cc = curl_easy_perform(e);
    const int64_t rt = hs_now_ns() - t0;
    /* the request's own deadline ran out while the worker had it: a timeout (504), which the
     * scheduler blames on the worker only when the batch overran its prediction */
    if (cc == CURLE_OPERATION_TIMEDOUT && timeout_ms == left_ms)
        return hs_error_set(err, HS_STATUS_TIMEOUT,
                            "deadline passed while worker %s ran the batch (%.0f ms)", addr,
                            hs_ns_to_ms(rt));
    if (cc != CURLE_OK)
        return hs_error_set(err, HS_STATUS_ENGINE, "worker %s: %s after %.0f ms", addr,
                            curl_easy_strerror(cc), hs_ns_to_ms(rt));
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) {
        int n = S->resp.len > 300 ? 300 : (int)S->resp.len;
        return hs_error_set(err, code == 504 ? HS_STATUS_TIMEOUT : HS_STATUS_ENGINE,
                            "worker %s answered %ld: %.*s", addr, code, n,
                            S->resp.p ? (const char *)S->resp.p : "");
    }
    struct hs_wire_resp r;
    struct hs_error we = {0};
    if (hs_wire_resp_decode(S->resp.p, S->resp.len, &r, &we))
        return hs_error_set(err, HS_STATUS_ENGINE, "worker %s: %s", addr, we.msg);
    if (r.n_seqs != b->n_seqs || r.dim != L->dim)
        return hs_error_set(err, HS_STATUS_ENGINE,
                            "worker %s answered %d x %d values for a batch of %d x %d", addr,
                            r.n_seqs, r.dim, b->n_seqs, L->dim);
    hs_wire_resp_values(&r, out);
    int64_t worker_ns = r.t.total_ns < rt ? r.t.total_ns : rt;
    int64_t tail = r.t.compute_ns + r.t.copy_out_ns;
    if (tail > worker_ns) tail = worker_ns;
    t->hop_ns = rt - worker_ns;
    t->copy_in_ns = rt - tail; /* the hop, and the worker's parse, queue and copy-in */
    t->compute_ns = r.t.compute_ns < tail ? r.t.compute_ns : tail;
    t->copy_out_ns = tail - t->compute_ns;
    return HS_STATUS_OK;
}

hs_status hs_remote_pool_runner(struct hs_remote_pool *p, int worker, int lane, const char *model,
                                int dim, int slots, struct hs_runner *out, struct hs_error *err)
{
    if (worker < 0 || worker >= p->n_workers || slots < 1 || slots > HS_RUNNER_MAX_SLOTS)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "remote %s: bad runner (worker %d of %d, slots %d of 1..%d)", p->name,
                            worker, p->n_workers, slots, HS_RUNNER_MAX_SLOTS);
    if (p->n_lanes >= HS_REMOTE_MAX_RUNNERS)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "remote %s: more than %d runners",
                            p->name, HS_REMOTE_MAX_RUNNERS);
    struct rlane *L = hs_calloc(1, sizeof *L);
    if (!L) return hs_error_set(err, HS_STATUS_NO_MEMORY, "remote lane");
    L->pool = p;
    L->worker = worker;
    L->lane = lane;
    L->dim = dim;
    L->slots = slots;
    snprintf(L->model, sizeof L->model, "%s", model);
    for (int i = 0; i < slots; i++) {
        CURL *e = L->slot[i].easy = curl_easy_init();
        if (!e) {
            for (int k = 0; k < i; k++) curl_easy_cleanup(L->slot[k].easy);
            hs_free(L);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "remote %s: curl handle", p->name);
        }
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)p->o.connect_timeout_ms);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->hdrs);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &L->slot[i].resp);
    }
    pthread_mutex_lock(&p->mu);
    p->lanes[p->n_lanes++] = L;
    pthread_mutex_unlock(&p->mu);
    *out = (struct hs_runner){.run = rl_run, .ctx = L};
    return HS_STATUS_OK;
}

void hs_remote_pool_start(struct hs_remote_pool *p,
                          void (*on_change)(void *ctx, int lane, bool enabled), void *ctx)
{
    pthread_mutex_lock(&p->mu);
    p->on_change = on_change;
    p->on_change_ctx = ctx;
    bool on[HS_REMOTE_MAX_RUNNERS];
    int lanes[HS_REMOTE_MAX_RUNNERS], n = p->n_lanes;
    for (int l = 0; l < n; l++) {
        on[l] = p->addr[p->lanes[l]->worker][0] != '\0';
        lanes[l] = p->lanes[l]->lane;
    }
    pthread_mutex_unlock(&p->mu);
    for (int l = 0; on_change && l < n; l++) on_change(ctx, lanes[l], on[l]);
    if ((p->dns[0] || p->file[0]) && p->o.refresh_s > 0 &&
        pthread_create(&p->thread, NULL, refresher, p) == 0)
        p->running = true;
}

void hs_remote_pool_stop(struct hs_remote_pool *p)
{
    if (!p || !p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->running = false;
}

void hs_remote_pool_free(struct hs_remote_pool *p)
{
    if (!p) return;
    hs_remote_pool_stop(p);
    for (int l = 0; l < p->n_lanes; l++) {
        struct rlane *L = p->lanes[l];
        for (int i = 0; i < L->slots; i++) {
            curl_easy_cleanup(L->slot[i].easy);
            hs_free(L->slot[i].req.p);
            hs_free(L->slot[i].resp.p);
        }
        hs_free(L);
    }
    curl_slist_free_all(p->hdrs);
    hs_free(p->static_list);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    hs_free(p);
}
