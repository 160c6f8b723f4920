/* hetserve — Chrome / Perfetto trace-event JSON (opens in ui.perfetto.dev).
 *
 * One process track per engine lane ("cpu0 · all-MiniLM-L6-v2") plus one for requests that never
 * reached a lane. On a lane: thread "batches" holds one slice per batch with nested copy_in,
 * compute and copy_out slices; each request is an async track (id = request id) holding one
 * slice for the whole request and nested slices for its stages (parse, tokenize, route,
 * enqueue, queue, copy_in, compute, copy_out, post, send). Events are written as they happen,
 * under a lock; hs_trace_close finishes the JSON. Timestamps are microseconds since open.
 */
#ifndef HS_SERVER_TRACE_H
#define HS_SERVER_TRACE_H

#include "core/status.h"
#include "sched/request.h"
#include "sched/sched.h"

struct hs_trace;

/* Opens path for writing and names one track per lane of s. */
hs_status hs_trace_open(const char *path, struct hs_sched *s, struct hs_trace **out,
                        struct hs_error *err);
/* Writes the closing bracket and closes the file. NULL is a no-op. */
void hs_trace_close(struct hs_trace *t);

void hs_trace_batch(struct hs_trace *t, const struct hs_batch_report *r);
/* A finished request: lane (-1 = none), id, http status, stage timestamps (0 = not reached),
 * the router's decision in words (NULL = none; recorded as the request's "decision" arg), its
 * API key's tenant (NULL = none; the "tenant" arg). */
void hs_trace_request(struct hs_trace *t, int lane, uint64_t id, int http_status, const int64_t *ts,
                      const char *decision, const char *tenant);

#endif
