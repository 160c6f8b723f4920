#include "server/trace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/clock.h"

struct hs_trace {
    FILE *f;
    pthread_mutex_t mu;
    int64_t t0;
    int n_lanes;
    bool first;
};

static double us(const struct hs_trace *t, int64_t ns)
{
    return (double)(ns - t->t0) / 1e3;
}

/* Lock held. */
static void sep(struct hs_trace *t)
{
    if (!t->first) fputs(",\n", t->f);
    t->first = false;
}

static void meta(struct hs_trace *t, int pid, int tid, const char *what, const char *name)
{
    sep(t);
    fprintf(t->f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":\"%s\"}}",
            pid, tid, what, name);
}

hs_status hs_trace_open(const char *path, struct hs_sched *s, struct hs_trace **out,
                        struct hs_error *err)
{
    *out = NULL;
    struct hs_trace *t = hs_calloc(1, sizeof *t);
    if (!t) return hs_error_set(err, HS_STATUS_NO_MEMORY, "trace");
    t->f = fopen(path, "w");
    if (!t->f) {
        hs_free(t);
        return hs_error_set(err, HS_STATUS_IO, "cannot open trace file %s", path);
    }
    pthread_mutex_init(&t->mu, NULL);
    t->t0 = hs_now_ns();
    t->first = true;
    t->n_lanes = hs_sched_lane_count(s);
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", t->f);
    for (int i = 0; i < t->n_lanes; i++) {
        const struct hs_lane_opts *o = hs_sched_lane_opts(s, i);
        char name[256];
        snprintf(name, sizeof name, "%s \\u00b7 %s", o->engine, o->model);
        meta(t, i + 1, 1, "process_name", name);
        const int slots = o->slots > 1 ? o->slots : 1;
        for (int k = 0; k < slots + o->preempt; k++) {
            char track[32];
            snprintf(track, sizeof track,
                     k == slots ? "batches, preempting"
                     : k        ? "batches, slot %d"
                                : "batches",
                     k);
            meta(t, i + 1, k + 1, "thread_name", track);
        }
    }
    meta(t, t->n_lanes + 1, 1, "process_name", "unrouted requests");
    fflush(t->f);
    *out = t;
    return HS_STATUS_OK;
}

void hs_trace_close(struct hs_trace *t)
{
    if (!t) return;
    fputs("\n]}\n", t->f);
    fclose(t->f);
    pthread_mutex_destroy(&t->mu);
    hs_free(t);
}

/* a batch's spans: track (tid) slot + 1 of its lane's process, so that the batches of a lane
 * with several slots do not overlap on one track */
static void slice(struct hs_trace *t, int pid, int tid, const char *name, int64_t b, int64_t e,
                  const char *args)
{
    sep(t);
    fprintf(t->f,
            "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f%s%s%s}",
            pid, tid, name, us(t, b), (double)(e - b) / 1e3, args ? ",\"args\":{" : "",
            args ? args : "", args ? "}" : "");
}

void hs_trace_batch(struct hs_trace *t, const struct hs_batch_report *r)
{
    if (!t) return;
    char name[64], args[256];
    snprintf(name, sizeof name, "batch %dx%d", r->shape_batch, r->shape_seq);
    snprintf(args, sizeof args,
             "\"batch_id\":%" PRIu64 ",\"sequences\":%d,\"tokens\":%" PRId64
             ",\"padded_tokens\":%" PRId64 ",\"status\":\"%s\"",
             r->batch_id, r->n_seqs, r->tokens, r->padded_tokens, hs_status_str(r->status));
    pthread_mutex_lock(&t->mu);
    const int pid = r->lane + 1, tid = r->slot + 1;
    slice(t, pid, tid, name, r->formed_ns, r->copy_out_end_ns, args);
    slice(t, pid, tid, "copy_in", r->formed_ns, r->copy_in_end_ns, NULL);
    slice(t, pid, tid, "compute", r->copy_in_end_ns, r->compute_end_ns, NULL);
    slice(t, pid, tid, "copy_out", r->compute_end_ns, r->copy_out_end_ns, NULL);
    /* a split placement: each hand-over, the giving engine's closing sync then the copy (with,
     * when pipelined, the wait for the taking engine inside it) */
    for (int i = 0; i < r->n_handovers; i++) {
        const struct hs_batch_handover *h = &r->handovers[i];
        char hb[64];
        snprintf(hb, sizeof hb, "\"boundary\":%d", h->boundary);
        if (h->sync_start_ns && h->sync_start_ns <= h->copy_start_ns)
            slice(t, pid, tid, "boundary sync", h->sync_start_ns, h->copy_start_ns, hb);
        slice(t, pid, tid, "boundary copy", h->copy_start_ns, h->copy_end_ns, hb);
        if (h->wait_ns > 0)
            slice(t, pid, tid, "engine wait", h->wait_start_ns, h->wait_start_ns + h->wait_ns, hb);
    }
    pthread_mutex_unlock(&t->mu);
}

static void async(struct hs_trace *t, int pid, uint64_t id, const char *ph, const char *name,
                  int64_t at, const char *args)
{
    sep(t);
    fprintf(t->f,
            "{\"ph\":\"%s\",\"cat\":\"request\",\"id\":\"0x%" PRIx64
            "\",\"pid\":%d,\"tid\":1,\"name\":\"%s\",\"ts\":%.3f%s%s%s}",
            ph, id, pid, name, us(t, at), args ? ",\"args\":{" : "", args ? args : "",
            args ? "}" : "");
}

/* Appends ,"key":"value" to args[*n..cap), value escaped as a JSON string (names come from the
 * config and the keys file); cut short rather than overflowing. */
static void put_str(char *args, int *n, int cap, const char *key, const char *value)
{
    if (*n >= cap - 8) return;
    *n += snprintf(args + *n, (size_t)(cap - *n), ",\"%s\":\"", key);
    if (*n >= cap - 8) *n = cap - 8;
    for (const char *p = value; *p && *n < cap - 8; p++) {
        if (*p == '"' || *p == '\\') args[(*n)++] = '\\';
        args[(*n)++] = (unsigned char)*p < 0x20 ? ' ' : *p;
    }
    args[(*n)++] = '"';
    args[*n] = '\0';
}

void hs_trace_request(struct hs_trace *t, int lane, uint64_t id, int http_status, const int64_t *ts,
                      const char *decision, const char *tenant)
{
    if (!t || !ts[HS_TS_RECEIVED]) return;
    int pid = lane >= 0 && lane < t->n_lanes ? lane + 1 : t->n_lanes + 1;
    int64_t last = ts[0];
    for (int i = 1; i < HS_TS_COUNT; i++)
        if (ts[i] > last) last = ts[i];
    char name[48], args[640];
    snprintf(name, sizeof name, "request %" PRIu64, id);
    int n = snprintf(args, sizeof args, "\"status\":%d", http_status);
    if (tenant) put_str(args, &n, (int)sizeof args, "tenant", tenant);
    if (decision) put_str(args, &n, (int)sizeof args, "decision", decision);
    pthread_mutex_lock(&t->mu);
    async(t, pid, id, "b", name, ts[0], args);
    int64_t prev = ts[0];
    for (int i = 1; i < HS_TS_COUNT; i++) {
        if (!ts[i] || ts[i] < prev) continue;
        async(t, pid, id, "b", hs_ts_name((enum hs_ts)i), prev, NULL);
        async(t, pid, id, "e", hs_ts_name((enum hs_ts)i), ts[i], NULL);
        prev = ts[i];
    }
    async(t, pid, id, "e", name, last, NULL);
    pthread_mutex_unlock(&t->mu);
}
