/* hetserve — the remote engine: a pool of workers (other hetserve processes) that run batches.
 *
 * A remote engine is declared like any engine (`kind: remote`) with its workers as a static
 * list (`endpoints: ["10.0.0.2:8080", ...]`), a DNS name re-resolved every refresh_s seconds
 * (`dns: workers.svc`, every IPv4 address it has, at `port`: a Kubernetes headless Service
 * gives the pool's pod addresses), or a file of host:port lines re-read as often. The pool has
 * workers_max worker slots; each worker slot of each model resident on the engine has its own
 * runner (engine/runner.h), which the server makes a scheduler lane, so that predicted completion,
 * breakers and metrics are per worker with the router machinery as it is. A slot without a worker
 * (the list shrank, or never filled it) is reported through on_change so that the router stops
 * choosing its lanes; a worker that appears takes a free slot and its lanes come back.
 *
 * A lane's runner (hs_remote_pool_runner) sends each formed batch to its worker as one
 * POST /internal/v1/batch (engine/remote/wire.h) on a keep-alive connection per batcher slot,
 * with a timeout from the batch's earliest deadline (and timeout_ms, when set), and returns the
 * worker's embeddings. Any failure (no answer in time, refused connection, an HTTP error, a
 * malformed answer) is HS_STATUS_ENGINE with the worker and the cause, which feeds the
 * worker's breaker and the retry budget; a 504 from the worker (its copy of the deadline
 * passed) is HS_STATUS_TIMEOUT. Timings: the worker's stages, and hop_ns = round trip minus
 * the worker's own time.
 *
 * Thread-safety: runners of different lanes and slots run concurrently; the refresher thread
 * changes worker addresses under the pool's lock.
 */
#ifndef HS_ENGINE_REMOTE_REMOTE_H
#define HS_ENGINE_REMOTE_REMOTE_H

#include <stdbool.h>

#include "core/status.h"
#include "engine/remote/wire.h"
#include "engine/runner.h"

#define HS_REMOTE_MAX_WORKERS 16
#define HS_REMOTE_ADDR_MAX    64
#define HS_REMOTE_MAX_RUNNERS 64 /* runners one pool hands out (worker slots x models) */

struct hs_remote_opts {
    const char *name;             /* engine name, for messages */
    int n_endpoints;              /* static host:port list ... */
    const char *const *endpoints; /* [n_endpoints] */
    const char *dns;              /* ... or a name resolved to every IPv4 address ("" = none) */
    const char *endpoints_file;   /* ... or a file of host:port lines ("" = none) */
    int port;                     /* for dns, and list items without a port */
    int refresh_s;                /* dns / file: re-read period */
    int workers_max;              /* worker slots (lanes per model); 0 = n_endpoints */
    enum hs_wire_dtype dtype;     /* of the answers */
    int timeout_ms;               /* longest round trip; 0 = the batch's deadline alone */
    int connect_timeout_ms;
};

struct hs_remote_pool;

/* Resolves the workers once (a dns name that does not resolve yet leaves the slots empty) and
 * returns the pool; the refresher starts with hs_remote_pool_start. */
hs_status hs_remote_pool_create(const struct hs_remote_opts *o, struct hs_remote_pool **out,
                                struct hs_error *err);
int hs_remote_pool_workers(const struct hs_remote_pool *p);
/* A runner for worker slot `worker`: model name sent to it, dim floats per sequence, slots
 * (1..HS_RUNNER_MAX_SLOTS) batches in flight. `lane` is the caller's name for it (its scheduler
 * lane), an opaque index the pool passes back to on_change. At most HS_REMOTE_MAX_RUNNERS. */
hs_status hs_remote_pool_runner(struct hs_remote_pool *p, int worker, int lane, const char *model,
                                int dim, int slots, struct hs_runner *out, struct hs_error *err);
/* Calls on_change(ctx, lane, enabled) for every lane now, then on every change, from the
 * refresher thread (started here when the pool re-reads a dns name or a file). */
void hs_remote_pool_start(struct hs_remote_pool *p,
                          void (*on_change)(void *ctx, int lane, bool enabled), void *ctx);
/* The address worker slot w holds now ("" when none) into buf. */
void hs_remote_pool_endpoint(struct hs_remote_pool *p, int w, char *buf, size_t cap);
/* Stops the refresher. The runners' memory stays until hs_remote_pool_free. */
void hs_remote_pool_stop(struct hs_remote_pool *p);
void hs_remote_pool_free(struct hs_remote_pool *p);

#endif
