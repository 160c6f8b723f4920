/* API keys and tenants: see auth.h. */
#include "server/auth.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "server/metrics.h"
#include "server/server-impl.h"

#define KEY_SECTION "auth.keys[]"

/* answers counted per tenant, by HTTP status class */
enum { CODE_2XX, CODE_401, CODE_403, CODE_429, CODE_4XX, CODE_5XX, CODE_COUNT };
static const char *const code_names[CODE_COUNT] = {"2xx", "401", "403", "429", "4xx", "5xx"};

/* A token bucket: level in [-inf, cap], refilled at rate a second. rate 0: unlimited. */
struct bucket {
    double rate, cap, level;
};

/* A tenant's 2xx latency histogram (received to sent), in the bounds of the lanes' (metrics.h);
 * the dashboard reads its P99 from it. */
#define N_LAT      HS_METRICS_LAT_BUCKETS
#define lat_bounds hs_metrics_lat_bounds

struct tenant {
    char name[64];
    double weight, burst_s;
    enum hs_priority prio_max;
    pthread_mutex_t mu; /* the buckets */
    struct bucket requests, tokens;
    int64_t last_ns; /* the buckets' last refill */
    atomic_llong answers[CODE_COUNT], tokens_total, limited_requests, limited_tokens, limited_share,
        demoted_share, over_share;
    atomic_int inflight; /* its admitted jobs not yet answered (hs_auth_job .. hs_auth_done) */
    atomic_llong
        lat[N_LAT + 1]; /* 2xx answers by latency: lat[i] <= lat_bounds[i], lat[N_LAT] above */
    _Atomic double lat_sum;
    struct hs_auth *set;
};

struct hs_auth_key {
    uint8_t digest[HS_SHA256_BYTES];
    struct tenant *tenant;
    int n_models, n_endpoints;
    char models[HS_AUTH_MAX_NAMES][32];
    char endpoints[HS_AUTH_MAX_NAMES][32];
};

struct hs_auth {
    atomic_int refs;
    bool probes_open, metrics_open;
    int share_inflight;  /* past this many in flight, each tenant gets its weighted share */
    atomic_int inflight; /* every tenant's */
    int n_keys, n_tenants;
    struct hs_auth_key *keys;
    struct tenant *tenants;
    atomic_llong missing, invalid; /* 401s: no key presented, an unknown one */
};

/* ---------------------------------------------------------------------------------------------
 * the keys file
 */

/* A comma-separated list of names into names[][32]. */
static bool set_names(const char *v, char names[][32], int *n, char *msg, size_t cap)
{
    *n = 0;
    while (*v) {
        size_t len = strcspn(v, ",");
        if (len == 0 || len >= 32) {
            snprintf(msg, cap, "expected names of 1 to 31 characters, comma-separated");
            return false;
        }
        if (*n >= HS_AUTH_MAX_NAMES) {
            snprintf(msg, cap, "more than %d names", HS_AUTH_MAX_NAMES);
            return false;
        }
        memcpy(names[*n], v, len);
        names[(*n)++][len] = '\0';
        v += len + (v[len] == ',');
    }
    return true;
}

/* One line's fields (NUL-separated in place) into k. */
static bool parse_line(char *line, struct hs_auth_key_cfg *k, char *msg, size_t cap)
{
    hs_config_item_init(KEY_SECTION, k);
    int field = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \t\r", &save); tok;
         tok = strtok_r(NULL, " \t\r", &save), field++) {
        if (field == 0 || field == 1) {
            char *dst = field ? k->tenant : k->sha256;
            size_t size = field ? sizeof k->tenant : sizeof k->sha256;
            if (strlen(tok) >= size) {
                snprintf(msg, cap, "%s longer than %zu characters", field ? "tenant" : "sha256",
                         size - 1);
                return false;
            }
            memcpy(dst, tok, strlen(tok) + 1);
            continue;
        }
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(msg, cap, "expected name=value, not '%.64s'", tok);
            return false;
        }
        *eq = '\0';
        const char *name = tok, *value = eq + 1;
        char why[192];
        bool ok = true;
        if (!strcmp(name, "models"))
            ok = set_names(value, k->models, &k->n_models, why, sizeof why);
        else if (!strcmp(name, "endpoints"))
            ok = set_names(value, k->endpoints, &k->n_endpoints, why, sizeof why);
        else
            ok = hs_config_item_set(KEY_SECTION, k, name, value, why, sizeof why) == HS_STATUS_OK;
        if (!ok) {
            snprintf(msg, cap, "%.32s: %s", name, why);
            return false;
        }
    }
    if (field < 2) {
        snprintf(msg, cap, "expected \"<sha256> <tenant> [name=value ...]\"");
        return false;
    }
    return true;
}

hs_status hs_auth_parse_keys(const char *text, size_t len, const char *label,
                             struct hs_auth_key_cfg **out, int *n, struct hs_error *err)
{
    *out = NULL;
    *n = 0;
    int lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    int most = lines < HS_AUTH_MAX_KEYS ? lines : HS_AUTH_MAX_KEYS;
    struct hs_auth_key_cfg *keys = hs_calloc((size_t)most, sizeof *keys);
    char *line = hs_malloc(len + 1);
    if (!keys || !line) {
        hs_free(keys);
        hs_free(line);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
    }
    hs_status st = HS_STATUS_OK;
    int lineno = 0;
    for (size_t at = 0; at < len && !st;) {
        size_t ll = 0;
        while (at + ll < len && text[at + ll] != '\n') ll++;
        lineno++;
        memcpy(line, text + at, ll);
        line[ll] = '\0';
        at += ll + 1;
        if (memchr(line, '\0', ll)) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%d: a NUL byte", label, lineno);
            break;
        }
        const char *p = line + strspn(line, " \t\r");
        if (!*p || *p == '#') continue;
        if (*n >= HS_AUTH_MAX_KEYS) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%d: more than %d keys", label,
                              lineno, HS_AUTH_MAX_KEYS);
            break;
        }
        char msg[256];
        if (!parse_line(line, &keys[*n], msg, sizeof msg))
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%d: %s", label, lineno, msg);
        else
            (*n)++;
    }
    hs_free(line);
    if (st) {
        hs_free(keys);
        *n = 0;
        return st;
    }
    *out = keys;
    return HS_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * the key set
 */

static void bucket_init(struct bucket *b, double rate, double burst_s)
{
    b->rate = rate;
    b->cap = rate * burst_s;
    if (b->cap < 1 && rate > 0) b->cap = 1; /* a bucket always holds one request */
    b->level = b->cap;
}

static bool same_limits(const struct hs_auth_key_cfg *a, const struct hs_auth_key_cfg *b)
{
    return a->requests_per_s == b->requests_per_s && a->tokens_per_s == b->tokens_per_s &&
           a->burst_s == b->burst_s && a->weight == b->weight &&
           !strcmp(a->priority_max, b->priority_max);
}

static void free_auth(struct hs_auth *a)
{
    for (int i = 0; i < a->n_tenants; i++) pthread_mutex_destroy(&a->tenants[i].mu);
    hs_free(a->tenants);
    hs_free(a->keys);
    hs_free(a);
}

/* The new tenant t takes over what tenant p of the replaced set had: levels and counters. */
static void carry_over(struct tenant *t, struct tenant *p)
{
    pthread_mutex_lock(&p->mu);
    if (t->requests.rate > 0 && p->requests.rate > 0)
        t->requests.level = fmin(p->requests.level, t->requests.cap);
    if (t->tokens.rate > 0 && p->tokens.rate > 0)
        t->tokens.level = fmin(p->tokens.level, t->tokens.cap);
    t->last_ns = p->last_ns;
    pthread_mutex_unlock(&p->mu);
    for (int c = 0; c < CODE_COUNT; c++) atomic_store(&t->answers[c], atomic_load(&p->answers[c]));
    atomic_store(&t->tokens_total, atomic_load(&p->tokens_total));
    atomic_store(&t->limited_requests, atomic_load(&p->limited_requests));
    atomic_store(&t->limited_tokens, atomic_load(&p->limited_tokens));
    atomic_store(&t->limited_share, atomic_load(&p->limited_share));
    atomic_store(&t->demoted_share, atomic_load(&p->demoted_share));
    atomic_store(&t->over_share, atomic_load(&p->over_share));
    for (int i = 0; i <= N_LAT; i++) atomic_store(&t->lat[i], atomic_load(&p->lat[i]));
    atomic_store(&t->lat_sum, atomic_load(&p->lat_sum));
    /* (in-flight counts stay with the set their requests were admitted by) */
}

hs_status hs_auth_create(const struct hs_auth_key_cfg *keys, int n, const struct hs_auth_opts *o,
                         const struct hs_auth *prev, struct hs_auth **out, struct hs_error *err)
{
    *out = NULL;
    if (n < 0 || n > HS_AUTH_MAX_KEYS)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "auth: %d keys; at most %d", n,
                            HS_AUTH_MAX_KEYS);
    struct hs_auth *a = hs_calloc(1, sizeof *a);
    if (!a) return hs_error_set(err, HS_STATUS_NO_MEMORY, "auth: out of memory");
    a->keys = hs_calloc(n ? (size_t)n : 1, sizeof *a->keys);
    a->tenants = hs_calloc(n ? (size_t)n : 1, sizeof *a->tenants);
    if (!a->keys || !a->tenants) {
        free_auth(a);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "auth: out of memory");
    }
    atomic_init(&a->refs, 1);
    a->probes_open = o->probes_open;
    a->metrics_open = o->metrics_open;
    a->share_inflight = o->share_inflight;
    hs_status st = HS_STATUS_OK;
    for (int i = 0; i < n && !st; i++) {
        const struct hs_auth_key_cfg *kc = &keys[i];
        struct hs_auth_key *k = &a->keys[i];
        if (!hs_sha256_parse_hex(kc->sha256, k->digest)) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "auth key %d: sha256 must be the 64 hex digits of the key's SHA-256",
                              i);
            break;
        }
        if (!kc->tenant[0]) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "auth key %d: no tenant", i);
            break;
        }
        for (int j = 0; j < i; j++)
            if (!memcmp(a->keys[j].digest, k->digest, sizeof k->digest))
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "auth key %d: the same key as key %d", i, j);
        for (int m = 0; !st && m < kc->n_models; m++)
            if (o->model_known && !o->model_known(o->ctx, kc->models[m]))
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "auth key %d (tenant %s): model '%s' is not served", i,
                                  kc->tenant, kc->models[m]);
        for (int e = 0; !st && e < kc->n_endpoints; e++)
            if (kc->endpoints[e][0] != '/' ||
                (o->endpoint_known && !o->endpoint_known(o->ctx, kc->endpoints[e])))
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "auth key %d (tenant %s): '%s' is no endpoint path or prefix", i,
                                  kc->tenant, kc->endpoints[e]);
        if (st) break;
        k->n_models = kc->n_models;
        k->n_endpoints = kc->n_endpoints;
        memcpy(k->models, kc->models, sizeof k->models);
        memcpy(k->endpoints, kc->endpoints, sizeof k->endpoints);
        /* its tenant: an earlier key's (with the same limits), or a new one */
        int t = 0;
        while (t < a->n_tenants && strcmp(a->tenants[t].name, kc->tenant)) t++;
        if (t < a->n_tenants) {
            int first = 0;
            while (strcmp(keys[first].tenant, kc->tenant)) first++;
            if (!same_limits(&keys[first], kc)) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "auth key %d: tenant %s has other rate, priority_max or weight "
                                  "in key %d; a tenant's keys share its buckets",
                                  i, kc->tenant, first);
                break;
            }
        } else {
            struct tenant *tn = &a->tenants[a->n_tenants++];
            snprintf(tn->name, sizeof tn->name, "%s", kc->tenant);
            tn->weight = kc->weight;
            tn->burst_s = kc->burst_s;
            tn->prio_max =
                strcmp(kc->priority_max, "batch") ? HS_PRIORITY_INTERACTIVE : HS_PRIORITY_BATCH;
            pthread_mutex_init(&tn->mu, NULL);
            tn->set = a;
            bucket_init(&tn->requests, kc->requests_per_s, kc->burst_s);
            bucket_init(&tn->tokens, kc->tokens_per_s, kc->burst_s);
            tn->last_ns = hs_now_ns();
        }
        k->tenant = &a->tenants[t];
    }
    if (st) {
        free_auth(a);
        return st;
    }
    a->n_keys = n;
    if (prev) {
        for (int t = 0; t < a->n_tenants; t++)
            for (int p = 0; p < prev->n_tenants; p++)
                if (!strcmp(prev->tenants[p].name, a->tenants[t].name))
                    carry_over(&a->tenants[t], &prev->tenants[p]);
        atomic_store(&a->missing, atomic_load(&prev->missing));
        atomic_store(&a->invalid, atomic_load(&prev->invalid));
    }
    *out = a;
    return HS_STATUS_OK;
}

void hs_auth_ref(struct hs_auth *a)
{
    atomic_fetch_add(&a->refs, 1);
}

void hs_auth_unref(struct hs_auth *a)
{
    if (a && atomic_fetch_sub(&a->refs, 1) == 1) free_auth(a);
}

int hs_auth_n_keys(const struct hs_auth *a)
{
    return a->n_keys;
}

const char *hs_auth_tenant(const struct hs_auth_key *key)
{
    return key->tenant->name;
}

int hs_auth_tenant_index(const struct hs_auth_key *key)
{
    return (int)(key->tenant - key->tenant->set->tenants) + 1;
}

double hs_auth_tenant_weight(const struct hs_auth_key *key)
{
    return key->tenant->weight;
}

/* ---------------------------------------------------------------------------------------------
 * requests
 */

/* The key a request presents: Authorization: Bearer <key>, api-key: <key>, X-API-Key: <key>. */
static const char *presented_key(const char *(*header)(void *, const char *), void *ctx)
{
    const char *h = header(ctx, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) return h + 7 + strspn(h + 7, " ");
    if (h) return NULL; /* another scheme */
    if ((h = header(ctx, "api-key"))) return h;
    return header(ctx, "X-API-Key");
}

/* The key whose digest is d: every key's digest is compared whole (no early exit, no branch on
 * the bytes), so the time taken says nothing about which matched or how closely. */
static const struct hs_auth_key *find_key(const struct hs_auth *a, const uint8_t *d)
{
    uint64_t w[4];
    memcpy(w, d, sizeof w);
    const struct hs_auth_key *found = NULL;
    for (int i = 0; i < a->n_keys; i++) {
        uint64_t k[4];
        memcpy(k, a->keys[i].digest, sizeof k);
        uint64_t diff = (k[0] ^ w[0]) | (k[1] ^ w[1]) | (k[2] ^ w[2]) | (k[3] ^ w[3]);
        found = diff == 0 ? &a->keys[i] : found;
    }
    return found;
}

/* Does allowed entry p (a path or a prefix) cover endpoint path ep? "/v2" covers "/v2",
 * "/v2/health/live" and "/v2/models/", not "/v20". */
static bool covers(const char *p, const char *ep)
{
    size_t n = strlen(p);
    return !strncmp(ep, p, n) && (ep[n] == '\0' || ep[n] == '/' || p[n - 1] == '/');
}

/* Refills t's buckets to now (t->mu held). */
static void refill(struct tenant *t, int64_t now_ns)
{
    double dt = now_ns > t->last_ns ? (double)(now_ns - t->last_ns) / 1e9 : 0;
    t->last_ns = now_ns > t->last_ns ? now_ns : t->last_ns;
    struct bucket *bs[] = {&t->requests, &t->tokens};
    for (int i = 0; i < 2; i++)
        if (bs[i]->rate > 0) bs[i]->level = fmin(bs[i]->cap, bs[i]->level + bs[i]->rate * dt);
}

int hs_auth_admit(struct hs_auth *a, const char *endpoint, enum hs_auth_class cls,
                  const char *(*header)(void *ctx, const char *name), void *ctx, int64_t now_ns,
                  const struct hs_auth_key **key, double *retry_after_s, char *msg, size_t cap)
{
    *key = NULL;
    *retry_after_s = 0;
    if ((cls == HS_AUTH_PROBE && a->probes_open) || (cls == HS_AUTH_METRICS && a->metrics_open))
        return 0;
    const char *pk = presented_key(header, ctx);
    if (!pk || !*pk) {
        atomic_fetch_add(&a->missing, 1);
        snprintf(msg, cap,
                 "%s needs an API key: send the header 'Authorization: Bearer <key>' (or "
                 "'api-key: <key>')",
                 endpoint);
        return 401;
    }
    uint8_t d[HS_SHA256_BYTES];
    hs_sha256(pk, strlen(pk), d);
    const struct hs_auth_key *k = find_key(a, d);
    if (!k) {
        atomic_fetch_add(&a->invalid, 1);
        snprintf(msg, cap, "invalid API key");
        return 401;
    }
    *key = k;
    struct tenant *t = k->tenant;
    bool allowed = k->n_endpoints == 0;
    for (int i = 0; i < k->n_endpoints; i++) allowed |= covers(k->endpoints[i], endpoint);
    if (!allowed) {
        snprintf(msg, cap, "tenant %s may not call %s", t->name, endpoint);
        return 403;
    }
    if (t->requests.rate <= 0) return 0;
    pthread_mutex_lock(&t->mu);
    refill(t, now_ns);
    bool ok = t->requests.level >= 1;
    if (ok)
        t->requests.level -= 1;
    else
        *retry_after_s = (1 - t->requests.level) / t->requests.rate;
    pthread_mutex_unlock(&t->mu);
    if (ok) return 0;
    atomic_fetch_add(&t->limited_requests, 1);
    snprintf(msg, cap, "tenant %s is over its rate of %g requests/s (retry in %.2f s)", t->name,
             t->requests.rate, *retry_after_s);
    return 429;
}

/* Tenant t's place in the share rule (hs_share_verdict, sched.h): the weights of the other
 * tenants with requests in flight and the heaviest of them by requests in flight per weight.
 * Strictly the heaviest: at the limit a flood is held down to about the others' level, so a
 * light tenant's burst ties with it; with ties counted, that light tenant was refused as "the
 * heaviest" (the 429s of b and c in bench/TENANTS.md), while the flood, retrying at once, takes
 * the next place and is the one refused after it. */
static enum hs_share_verdict share_of(const struct hs_auth *a, const struct tenant *t, int mine,
                                      int total)
{
    double others = 0, heaviest = 0;
    for (int i = 0; i < a->n_tenants; i++) {
        const struct tenant *o = &a->tenants[i];
        int n = o == t ? 0 : atomic_load(&o->inflight);
        if (n <= 0) continue;
        others += o->weight;
        heaviest = fmax(heaviest, n / o->weight);
    }
    return hs_share_verdict(a->share_inflight, total, mine, t->weight, others, heaviest);
}

hs_status hs_auth_job(struct hs_auth *a, const struct hs_auth_key *key, const char *model,
                      int tokens, int64_t now_ns, enum hs_priority *prio, double *retry_after_s,
                      char *msg, size_t cap)
{
    struct tenant *t = key->tenant;
    *retry_after_s = 0;
    bool allowed = key->n_models == 0;
    for (int i = 0; i < key->n_models; i++) allowed |= model && !strcmp(key->models[i], model);
    if (!allowed) {
        snprintf(msg, cap, "tenant %s may not use model %s", t->name, model ? model : "(none)");
        return HS_STATUS_FORBIDDEN;
    }
    if (*prio < t->prio_max) *prio = t->prio_max;
    /* fair shares: past share_inflight in flight, the heaviest tenant over its weighted share
     * runs as batch (served after the others', shed first); past twice that it is refused */
    int mine = atomic_load(&t->inflight), total = atomic_load(&a->inflight);
    const enum hs_share_verdict v = a->share_inflight > 0 && total >= a->share_inflight
                                        ? share_of(a, t, mine, total)
                                        : HS_SHARE_ADMIT;
    if (v != HS_SHARE_ADMIT) {
        if (v == HS_SHARE_REFUSE) {
            atomic_fetch_add(&t->limited_share, 1);
            snprintf(msg, cap,
                     "tenant %s has %d requests in flight, past its weighted share of the "
                     "server's (%d in flight of auth.share_inflight %d)",
                     t->name, mine, total, a->share_inflight);
            return HS_STATUS_OVERLOADED;
        }
        atomic_fetch_add(&t->demoted_share, 1);
        *prio = HS_PRIORITY_BATCH;
    }
    if (t->tokens.rate > 0) {
        pthread_mutex_lock(&t->mu);
        refill(t, now_ns);
        /* admitted while the bucket holds anything; the request may overdraw it */
        bool ok = t->tokens.level > 0;
        if (ok)
            t->tokens.level -= tokens;
        else
            *retry_after_s = -t->tokens.level / t->tokens.rate;
        pthread_mutex_unlock(&t->mu);
        if (!ok) {
            atomic_fetch_add(&t->limited_tokens, 1);
            snprintf(msg, cap, "tenant %s is over its rate of %g tokens/s (retry in %.2f s)",
                     t->name, t->tokens.rate, *retry_after_s);
            return HS_STATUS_OVERLOADED;
        }
    }
    atomic_fetch_add(&t->inflight, 1);
    atomic_fetch_add(&a->inflight, 1);
    return HS_STATUS_OK;
}

void hs_auth_done(const struct hs_auth_key *key)
{
    atomic_fetch_sub(&key->tenant->inflight, 1);
    atomic_fetch_sub(&key->tenant->set->inflight, 1);
}

void hs_auth_over_share(const struct hs_auth_key *key)
{
    if (key) atomic_fetch_add(&key->tenant->over_share, 1);
}

void hs_auth_count(const struct hs_auth_key *key, int http_status, int tokens, double seconds)
{
    struct tenant *t = key->tenant;
    int c = http_status < 300    ? CODE_2XX
            : http_status == 401 ? CODE_401
            : http_status == 403 ? CODE_403
            : http_status == 429 ? CODE_429
            : http_status < 500  ? CODE_4XX
                                 : CODE_5XX;
    atomic_fetch_add(&t->answers[c], 1);
    if (tokens > 0) atomic_fetch_add(&t->tokens_total, tokens);
    if (c == CODE_2XX && seconds >= 0) {
        int i = 0;
        while (i < N_LAT && seconds > lat_bounds[i]) i++;
        atomic_fetch_add(&t->lat[i], 1);
        double old = atomic_load(&t->lat_sum);
        while (!atomic_compare_exchange_weak(&t->lat_sum, &old, old + seconds)) {
        }
    }
}

/* A tenant name as a Prometheus label value: backslash, quote and newline escaped. */
static void put_label(struct hs_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') hs_buf_putc(b, '\\');
        if (*s == '\n') {
            hs_buf_puts(b, "\\n");
            continue;
        }
        hs_buf_putc(b, *s);
    }
}

void hs_auth_metrics(const struct hs_auth *a, struct hs_buf *b)
{
    hs_buf_printf(b,
                  "# HELP hetserve_auth_refused_total Requests refused 401: no key, or an "
                  "unknown one.\n# TYPE hetserve_auth_refused_total counter\n"
                  "hetserve_auth_refused_total{reason=\"missing\"} %lld\n"
                  "hetserve_auth_refused_total{reason=\"invalid\"} %lld\n"
                  "# HELP hetserve_auth_keys API keys loaded.\n# TYPE hetserve_auth_keys gauge\n"
                  "hetserve_auth_keys %d\n",
                  (long long)atomic_load(&a->missing), (long long)atomic_load(&a->invalid),
                  a->n_keys);
    hs_buf_puts(b, "# HELP hetserve_tenant_requests_total Keyed requests answered, by tenant and "
                   "status.\n# TYPE hetserve_tenant_requests_total counter\n");
    for (int i = 0; i < a->n_tenants; i++)
        for (int c = 0; c < CODE_COUNT; c++) {
            hs_buf_puts(b, "hetserve_tenant_requests_total{tenant=\"");
            put_label(b, a->tenants[i].name);
            hs_buf_printf(b, "\",code=\"%s\"} %lld\n", code_names[c],
                          (long long)atomic_load(&a->tenants[i].answers[c]));
        }
    hs_buf_puts(b, "# HELP hetserve_tenant_tokens_total Input tokens of a tenant's admitted "
                   "requests.\n# TYPE hetserve_tenant_tokens_total counter\n");
    for (int i = 0; i < a->n_tenants; i++) {
        hs_buf_puts(b, "hetserve_tenant_tokens_total{tenant=\"");
        put_label(b, a->tenants[i].name);
        hs_buf_printf(b, "\"} %lld\n", (long long)atomic_load(&a->tenants[i].tokens_total));
    }
    hs_buf_puts(b, "# HELP hetserve_tenant_limited_total Requests refused 429 by a tenant's "
                   "bucket.\n# TYPE hetserve_tenant_limited_total counter\n");
    for (int i = 0; i < a->n_tenants; i++)
        for (int w = 0; w < 2; w++) {
            hs_buf_puts(b, "hetserve_tenant_limited_total{tenant=\"");
            put_label(b, a->tenants[i].name);
            hs_buf_printf(b, "\",bucket=\"%s\"} %lld\n", w ? "tokens" : "requests",
                          (long long)atomic_load(w ? &a->tenants[i].limited_tokens
                                                   : &a->tenants[i].limited_requests));
        }
    hs_buf_puts(b, "# HELP hetserve_tenant_shared_total Requests past a tenant's weighted "
                   "share of auth.share_inflight: run as batch, or refused 429.\n"
                   "# TYPE hetserve_tenant_shared_total counter\n");
    for (int i = 0; i < a->n_tenants; i++)
        for (int w = 0; w < 2; w++) {
            hs_buf_puts(b, "hetserve_tenant_shared_total{tenant=\"");
            put_label(b, a->tenants[i].name);
            hs_buf_printf(b, "\",action=\"%s\"} %lld\n", w ? "refused" : "demoted",
                          (long long)atomic_load(w ? &a->tenants[i].limited_share
                                                   : &a->tenants[i].demoted_share));
        }
    hs_buf_puts(b, "# HELP hetserve_tenant_over_share_total Requests a lane queued behind the "
                   "other tenants' work: past the tenant's share of what it served "
                   "(scheduler.over_share).\n# TYPE hetserve_tenant_over_share_total counter\n");
    for (int i = 0; i < a->n_tenants; i++) {
        hs_buf_puts(b, "hetserve_tenant_over_share_total{tenant=\"");
        put_label(b, a->tenants[i].name);
        hs_buf_printf(b, "\"} %lld\n", (long long)atomic_load(&a->tenants[i].over_share));
    }
    hs_buf_puts(b, "# HELP hetserve_tenant_inflight A tenant's admitted requests not yet "
                   "answered.\n# TYPE hetserve_tenant_inflight gauge\n");
    for (int i = 0; i < a->n_tenants; i++) {
        hs_buf_puts(b, "hetserve_tenant_inflight{tenant=\"");
        put_label(b, a->tenants[i].name);
        hs_buf_printf(b, "\"} %d\n", atomic_load(&a->tenants[i].inflight));
    }
    hs_buf_puts(b, "# HELP hetserve_tenant_request_duration_seconds A tenant's 2xx answers, "
                   "received to sent.\n# TYPE hetserve_tenant_request_duration_seconds "
                   "histogram\n");
    for (int i = 0; i < a->n_tenants; i++) {
        const struct tenant *t = &a->tenants[i];
        long long cum = 0;
        for (int k = 0; k <= N_LAT; k++) {
            cum += atomic_load(&t->lat[k]);
            hs_buf_puts(b, "hetserve_tenant_request_duration_seconds_bucket{tenant=\"");
            put_label(b, t->name);
            if (k < N_LAT)
                hs_buf_printf(b, "\",le=\"%g\"} %lld\n", lat_bounds[k], cum);
            else
                hs_buf_printf(b, "\",le=\"+Inf\"} %lld\n", cum);
        }
        hs_buf_puts(b, "hetserve_tenant_request_duration_seconds_sum{tenant=\"");
        put_label(b, t->name);
        hs_buf_printf(b, "\"} %.9g\n", atomic_load(&t->lat_sum));
        hs_buf_puts(b, "hetserve_tenant_request_duration_seconds_count{tenant=\"");
        put_label(b, t->name);
        hs_buf_printf(b, "\"} %lld\n", cum);
    }
    hs_buf_puts(b, "# HELP hetserve_tenant_weight A tenant's configured weight.\n"
                   "# TYPE hetserve_tenant_weight gauge\n");
    for (int i = 0; i < a->n_tenants; i++) {
        hs_buf_puts(b, "hetserve_tenant_weight{tenant=\"");
        put_label(b, a->tenants[i].name);
        hs_buf_printf(b, "\"} %g\n", a->tenants[i].weight);
    }
}

/* ---------------------------------------------------------------------------------------------
 * the server's key set
 */

static bool model_known(void *ctx, const char *name)
{
    return hs__server_model(ctx, name) != NULL && name[0];
}

static bool endpoint_known(void *ctx, const char *prefix)
{
    (void)ctx;
    return hs__http_endpoint_known(prefix);
}

hs_status hs_server_reload_auth(struct hs_server *s, const struct hs_config *cfg,
                                struct hs_error *err)
{
    const char *env = getenv("HS_API_KEYS_FILE");
    const char *file = env && *env ? env : cfg->auth.keys_file;
    struct hs_auth *a = NULL;
    if (cfg->auth.n_keys > 0 || file[0]) {
        struct hs_auth_key_cfg *keys = NULL;
        int n_file = 0;
        if (file[0]) {
            char *text = NULL;
            size_t len = 0;
            hs_status st = hs_read_file(file, 64u << 20, &text, &len, err);
            if (!st) st = hs_auth_parse_keys(text, len, file, &keys, &n_file, err);
            hs_free(text);
            if (st) return st;
        }
        int n = cfg->auth.n_keys + n_file;
        struct hs_auth_key_cfg *all = hs_calloc(n ? (size_t)n : 1, sizeof *all);
        if (!all) {
            hs_free(keys);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "auth: out of memory");
        }
        memcpy(all, cfg->auth.keys, sizeof *all * (size_t)cfg->auth.n_keys);
        if (n_file) memcpy(all + cfg->auth.n_keys, keys, sizeof *all * (size_t)n_file);
        hs_free(keys);
        struct hs_auth_opts o = {.probes_open = !strcmp(cfg->auth.probes, "open"),
                                 .share_inflight = cfg->auth.share_inflight,
                                 .metrics_open = !strcmp(cfg->auth.metrics, "open"),
                                 .model_known = model_known,
                                 .endpoint_known = endpoint_known,
                                 .ctx = s};
        pthread_mutex_lock(&s->auth_mu);
        hs_status st = hs_auth_create(all, n, &o, s->auth, &a, err);
        pthread_mutex_unlock(&s->auth_mu);
        hs_free(all);
        if (st) return st;
    }
    pthread_mutex_lock(&s->auth_mu);
    struct hs_auth *old = s->auth;
    s->auth = a;
    pthread_mutex_unlock(&s->auth_mu);
    hs_auth_unref(old);
    if (a)
        hs_log_info("auth: %d key(s) (%d in the config, keys file %s)", hs_auth_n_keys(a),
                    cfg->auth.n_keys, file[0] ? file : "none");
    else if (old)
        hs_log_warn("auth: no keys configured any more: every endpoint is open");
    return HS_STATUS_OK;
}

struct hs_auth *hs__server_auth(struct hs_server *s)
{
    pthread_mutex_lock(&s->auth_mu);
    struct hs_auth *a = s->auth;
    if (a) hs_auth_ref(a);
    pthread_mutex_unlock(&s->auth_mu);
    return a;
}
