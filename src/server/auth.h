/* hetserve — API keys and tenants.
 *
 * A key set is built from the config's auth.keys[] and the keys file (auth.keys_file, or
 * HS_API_KEYS_FILE), each key held only as its SHA-256. A request presents its key as
 * `Authorization: Bearer <key>` (OpenAI's and TEI's convention), `api-key: <key>` (Azure
 * OpenAI's) or `X-API-Key: <key>`; the server hashes it and compares the digest with every
 * key's in constant time. Answers: 401 (with WWW-Authenticate) without a known key, 403 for an
 * endpoint or a model the key may not use, 429 with Retry-After when the tenant's request or
 * token bucket is empty (token buckets may be overdrawn by one request: the next waits). A
 * tenant's priority_max caps the priority its requests run at.
 *
 * The keys file: one key a line, `<sha256 hex> <tenant> [name=value ...]`, the names those of an
 * auth.keys[] item (models, endpoints: comma-separated lists; requests_per_s, tokens_per_s,
 * burst_s, priority_max, weight), `#` starting a comment line. hs_auth_parse_keys reads it
 * (tests/fuzz/fuzz_auth_keys.c).
 *
 * Thread-safety: a key set is immutable but for its buckets and counters (each tenant's under its
 * own mutex / atomics) and reference-counted: the server swaps in a new set on SIGHUP while
 * requests holding the old one finish with it. A tenant's buckets and counters carry over to
 * the set that replaces it (matched by tenant name).
 */
#ifndef HS_SERVER_AUTH_H
#define HS_SERVER_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/request.h"
#include "server/config.h"
#include "server/json.h"

/* the most keys a key set holds (config and file together) */
#define HS_AUTH_MAX_KEYS 4096

struct hs_auth;
struct hs_auth_key;

/* How an endpoint is guarded. */
enum hs_auth_class {
    HS_AUTH_KEYED,   /* needs a key */
    HS_AUTH_PROBE,   /* /health, /ready, /v2/health/...: auth.probes */
    HS_AUTH_METRICS, /* /metrics, /dashboard: auth.metrics */
};

struct hs_auth_opts {
    bool probes_open, metrics_open;
    /* fair shares: with this many requests in flight (every tenant's), the heaviest tenant by
     * requests in flight per weight, holding at least its weighted share of them (its weight over
     * the weights of the tenants with requests in flight), runs its requests as batch (served
     * after the others', shed first); with twice this many it is refused 429; 0 = off */
    int share_inflight;
    /* (optional) validity of a key's model and endpoint names; NULL = any */
    bool (*model_known)(void *ctx, const char *name);
    bool (*endpoint_known)(void *ctx, const char *prefix);
    void *ctx;
};

/* Parses a keys file's text into *out (hs_malloc'd, n items; free with hs_free). label names
 * the file in messages ("keys.txt:3: ..."). HS_STATUS_INVALID_INPUT on any fault. */
hs_status hs_auth_parse_keys(const char *text, size_t len, const char *label,
                             struct hs_auth_key_cfg **out, int *n, struct hs_error *err);

/* A key set of keys[0..n) (n may be 0: every keyed request is refused). prev (may be NULL): the
 * set it replaces, whose tenants' buckets and counters carry over. Refuses (with the key's index)
 * a digest that is not 64 hex digits, the same digest twice, one tenant with two different rates,
 * priorities or weights, and names the callbacks do not know. One reference, the caller's. */
hs_status hs_auth_create(const struct hs_auth_key_cfg *keys, int n, const struct hs_auth_opts *o,
                         const struct hs_auth *prev, struct hs_auth **out, struct hs_error *err);
void hs_auth_ref(struct hs_auth *a);
void hs_auth_unref(struct hs_auth *a); /* NULL is a no-op */

/* The request's first step, once its headers are in: 0 (*key: the key, NULL for an open
 * endpoint), 401, 403 (endpoint not allowed) or 429 (request bucket, *retry_after_s), with a
 * message in msg. header(ctx, name) returns a request header's value or NULL. */
int hs_auth_admit(struct hs_auth *a, const char *endpoint, enum hs_auth_class cls,
                  const char *(*header)(void *ctx, const char *name), void *ctx, int64_t now_ns,
                  const struct hs_auth_key **key, double *retry_after_s, char *msg, size_t cap);
/* A job of the key's request: HS_STATUS_OK (it is in flight until hs_auth_done),
 * HS_STATUS_FORBIDDEN (model not allowed) or HS_STATUS_OVERLOADED (far past the tenant's
 * weighted share, or its token bucket empty: *retry_after_s), with a message; *prio is capped at
 * the tenant's priority_max, and is batch past its weighted share. */
hs_status hs_auth_job(struct hs_auth *a, const struct hs_auth_key *key, const char *model,
                      int tokens, int64_t now_ns, enum hs_priority *prio, double *retry_after_s,
                      char *msg, size_t cap);
/* A job hs_auth_job admitted was answered. */
void hs_auth_done(const struct hs_auth_key *key);
const char *hs_auth_tenant(const struct hs_auth_key *key);
/* The tenant's index in its key set, from 1 (0 is the scheduler's default tenant), and its
 * weight: what the lanes' fair shares tell tenants apart by (hs_request.tenant, .weight). */
int hs_auth_tenant_index(const struct hs_auth_key *key);
double hs_auth_tenant_weight(const struct hs_auth_key *key);
/* Counts a keyed request's answer (HTTP status), its input tokens and, for a 2xx, its latency
 * (received to sent, seconds; < 0: unknown) in hetserve_tenant_request_duration_seconds. */
void hs_auth_count(const struct hs_auth_key *key, int http_status, int tokens, double seconds);
/* A keyed request was queued past its tenant's share (hs_request.over_share). */
void hs_auth_over_share(const struct hs_auth_key *key);
/* hetserve_tenant_* and hetserve_auth_* series (Prometheus text). */
void hs_auth_metrics(const struct hs_auth *a, struct hs_buf *b);
int hs_auth_n_keys(const struct hs_auth *a);

#endif
