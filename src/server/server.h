/* hetserve — the HTTP inference server.
 *
 * hs_server_create builds everything a config describes: engines, models (weights resident on
 * their engines through one executor each, with the engine's quota of slots), one scheduler
 * lane per (model, engine), the router over them (routes, rules, breakers: sched/router.h),
 * metrics and the optional trace file. hs_server_start binds host:port and serves (libmicrohttpd:
 * an internal polling thread pool of server.threads; a request waiting for its batch is a suspended
 * connection, not a blocked thread). Endpoints: POST /v1/embeddings   OpenAI schema          POST
 * /embed      TEI schema POST /tokenize        TEI schema             GET  /v1/models GET  /health
 * liveness               GET  /ready      models loaded, not draining GET  /metrics Prometheus text
 *   POST /predict         TEI schema: classification heads with the small -> big cascade (only
 *                         with a cascade section; predict.c)
 *   POST /admin/fault     inject engine faults (only with admin.enabled, loopback clients only;
 *                         with admin.token or HS_ADMIN_TOKEN: Authorization: Bearer <token>)
 * Every response to a model request carries a Server-Timing header with its stage durations,
 * X-Engine (the engine that served it), X-Route ("<route>;policy=<rule|default|split|failover|
 * probe|retry|escalate|fallback>", and for /predict ";cascade=small|big|capped") and
 * X-Route-Reason (the decision in words; also in the trace).
 * Errors are JSON {"error":{"message","type","code"}} with the matching HTTP status.
 *
 * hs_server_shutdown stops accepting connections, answers requests arriving on open
 * connections with 503, drains the queues (every accepted request is answered), waits for the
 * responses to be sent and stops. Not thread-safe: one controlling thread calls these.
 */
#ifndef HS_SERVER_SERVER_H
#define HS_SERVER_SERVER_H

#include "core/status.h"
#include "server/config.h"

struct hs_server;

/* Loads models and engines per cfg (copied). Slow: weights are prepared on their engines. */
hs_status hs_server_create(const struct hs_config *cfg, struct hs_server **out,
                           struct hs_error *err);
/* Binds and starts serving. */
hs_status hs_server_start(struct hs_server *s, struct hs_error *err);
/* The port bound (useful with port 0). */
int hs_server_port(const struct hs_server *s);
/* Builds the API key set of cfg's auth section (and of its keys file, or HS_API_KEYS_FILE's)
 * and swaps it in for the current one: requests already admitted finish with the old keys, no
 * connection is dropped; tenants keep their buckets and counters. On error (a bad key, an
 * unreadable file) the current keys stay. Called by hs_server_create, and on SIGHUP. */
hs_status hs_server_reload_auth(struct hs_server *s, const struct hs_config *cfg,
                                struct hs_error *err);
/* Graceful stop (see above); returns HS_STATUS_TIMEOUT when drain_timeout_ms ran out first. */
hs_status hs_server_shutdown(struct hs_server *s);
void hs_server_destroy(struct hs_server *s);

#endif
