/* The internal API a router calls on its workers (engine/remote/wire.h has the batch format):
 *
 *   POST /internal/v1/batch   a batch of token ids for one model, with the deadline left and
 *                             the dtype wanted: submitted to this server's own router and
 *                             scheduler as one request (so the worker batches, sheds and times
 *                             it like any other), answered with the embeddings and this
 *                             server's stage timings.
 *   GET  /internal/v1/status  per lane: queue depth, predicted drain time, throughput,
 *                             prediction bias, busy time, breaker state, and for a router's
 *                             remote lanes the worker each one sends to.
 *
 * The batch endpoint is served by servers with local engines while server.internal is true.
 */
#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/remote/remote.h"
#include "engine/remote/wire.h"
#include "server/server-impl.h"

struct batch_state {
    enum hs_wire_dtype dtype;
    struct hs_job *job; /* the batch as one dispatch job */
};

enum MHD_Result hs__internal_batch_begin(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    int64_t *ts = hs__conn_ts(k);
    if (!s->internal_api)
        return hs__conn_error(k, 404, 0,
                              "no endpoint /internal/v1/batch: this server has no local engines "
                              "or server.internal is false");
    size_t len = 0;
    const uint8_t *body = (const uint8_t *)hs__conn_body(k, &len);
    struct hs_wire_req wr;
    struct hs_error e = {0};
    if (hs_wire_req_decode(body, len, &wr, &e) != HS_STATUS_OK)
        return hs__conn_error(k, 400, 0, e.msg);
    ts[HS_TS_PARSED] = hs_now_ns();
    struct hs_served_model *sm = wr.model[0] ? hs__server_model(s, wr.model) : NULL;
    if (!sm) return hs__conn_error(k, 404, 0, "batch: model not served here");
    if (atomic_load(&s->draining)) return hs__conn_error(k, 503, 0, "server is shutting down");
    const int seq_max = sm->model->config.max_seq_len;
    const int vocab = sm->model->config.dims.vocab;
    struct hs_arena *a = hs__conn_arena(k);
    struct batch_state *bs = hs_arena_calloc(a, 1, sizeof *bs);
    struct hs_seq *seqs = hs_arena_calloc(a, (size_t)wr.n_seqs, sizeof *seqs);
    int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)wr.n_tokens);
    int32_t *types = wr.types ? hs_arena_alloc(a, sizeof(int32_t) * (size_t)wr.n_tokens) : NULL;
    if (!bs || !seqs || !ids || (wr.types && !types))
        return hs__conn_error(k, 500, 0, "out of memory");
    const int type_vocab = sm->model->config.dims.type_vocab;
    for (int i = 0; types && i < wr.n_tokens; i++) {
        types[i] = hs_wire_req_type(&wr, i);
        if (types[i] >= type_vocab)
            return hs__conn_error(k, 400, 0, "batch: a token type past the model's type table");
    }
    for (int i = 0; i < wr.n_tokens; i++) {
        ids[i] = hs_wire_req_id(&wr, i);
        if (ids[i] >= vocab)
            return hs__conn_error(k, 400, 0, "batch: a token id past the vocabulary");
    }
    for (int i = 0, off = 0; i < wr.n_seqs; i++) {
        seqs[i].ids = ids + off;
        seqs[i].type_ids = types ? types + off : NULL;
        seqs[i].n_tokens = hs_wire_req_length(&wr, i);
        if (seqs[i].n_tokens > seq_max)
            return hs__conn_error(k, 413, 0, "batch: a sequence longer than the model takes");
        off += seqs[i].n_tokens;
    }
    bs->dtype = wr.dtype;
    *hs__conn_predict(k) = bs;
    ts[HS_TS_TOKENIZED] = hs_now_ns();
    /* one dispatch job: routed, batched, retried and timed like any request of this server */
    bs->job = hs__conn_job(k, "embeddings", sm->name, seqs, (size_t)wr.n_seqs,
                           wr.priority ? HS_PRIORITY_BATCH : HS_PRIORITY_INTERACTIVE,
                           ts[HS_TS_RECEIVED] + (int64_t)wr.deadline_ms * 1000000);
    if (!bs->job) return hs__conn_error(k, 500, 0, "out of memory");
    bool answered = false;
    hs_status st = hs__conn_dispatch(k, bs->job, NULL, &answered);
    if (st != HS_STATUS_OK)
        return hs__conn_error(k, hs__http_status(st), bs->job->retry_after_s, bs->job->msg);
    return answered ? hs__internal_batch_resume(k) : MHD_YES;
}

static int64_t span(const int64_t *ts, enum hs_ts from, enum hs_ts to)
{
    return ts[from] && ts[to] > ts[from] ? ts[to] - ts[from] : 0;
}

enum MHD_Result hs__internal_batch_resume(struct conn *k)
{
    struct batch_state *bs = *hs__conn_predict(k);
    const struct hs_job *j = bs->job;
    if (j->status != HS_STATUS_OK)
        return hs__conn_error(k, hs__http_status(j->status), j->retry_after_s, j->msg);
    const int dim = j->dim;
    const int64_t *ts = j->ts;
    struct hs_wire_times t = {
        .queue_ns = span(ts, HS_TS_ENQUEUED, HS_TS_BATCHED),
        .copy_in_ns = span(ts, HS_TS_BATCHED, HS_TS_COPY_IN),
        .compute_ns = span(ts, HS_TS_COPY_IN, HS_TS_COMPUTE),
        .copy_out_ns = span(ts, HS_TS_COMPUTE, HS_TS_COPY_OUT),
    };
    size_t size = hs_wire_resp_size(j->n_seqs, dim, bs->dtype);
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), size);
    if (!hs_buf_reserve(&b, size)) return hs__conn_error(k, 500, 0, "out of memory");
    hs__conn_ts(k)[HS_TS_POST] = hs_now_ns();
    t.total_ns = hs__conn_ts(k)[HS_TS_POST] - ts[HS_TS_RECEIVED];
    b.len = hs_wire_resp_encode((uint8_t *)b.data, bs->dtype, j->n_seqs, dim, &t, j->out);
    return hs__conn_send(k, 200, &b, "application/x-hetserve-embeddings");
}

enum MHD_Result hs__internal_status(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 4096);
    int64_t now = hs_now_ns();
    int n_br = hs_router_engine_count(s->router);
    hs_buf_printf(&b, "{\"role\":\"%s\",\"draining\":%s,\"lanes\":[",
                  s->router_role ? "router" : "worker",
                  atomic_load(&s->draining) ? "true" : "false");
    int64_t queued = 0;
    double drain_max = 0;
    for (int i = 0; i < s->n_lanes; i++) {
        const struct hs_served_lane *sl = &s->lanes[i];
        struct hs_lane_stats st;
        hs_sched_lane_stats(s->sched, i, &st);
        double drain = hs_sched_lane_drain_s(s->sched, i);
        queued += st.queued_seqs;
        if (drain > drain_max) drain_max = drain;
        const char *breaker = "closed";
        for (int e = 0; e < n_br; e++) {
            struct hs_breaker_stats br;
            hs_router_breaker_stats(s->router, e, now, &br);
            if (!strcmp(br.engine, sl->label)) breaker = hs_breaker_state_name(br.state);
        }
        hs_buf_printf(&b, "%s{\"lane\":%d,\"engine\":\"%s\",\"model\":", i ? "," : "", i,
                      sl->label);
        hs_buf_json_str(&b, sl->sm->name, strlen(sl->sm->name));
        hs_buf_printf(&b,
                      ",\"queued_seqs\":%d,\"queued_tokens\":%" PRId64
                      ",\"running_seqs\":%d,\"running_batches\":%d,\"drain_s\":%.6f,"
                      "\"throughput_tokens_per_s\":%.1f,"
                      "\"pred_bias\":%.4f,\"batches\":%" PRId64
                      ",\"busy_s\":%.6f,\"breaker\":\"%s\"",
                      st.queued_seqs, st.queued_tokens, st.running_seqs, st.running_batches, drain,
                      st.throughput_tokens_per_s, st.pred_bias, st.batches,
                      (double)st.busy_ns / 1e9, breaker);
#ifdef HS_HAVE_REMOTE
        if (sl->worker >= 0) {
            int ei = 0;
            while (ei < s->n_engines && s->engines[ei] != sl->engine) ei++;
            char addr[HS_REMOTE_ADDR_MAX] = "";
            if (ei < s->n_engines && s->pools[ei])
                hs_remote_pool_endpoint(s->pools[ei], sl->worker, addr, sizeof addr);
            hs_buf_printf(&b, ",\"worker\":\"%s\"", addr);
        }
#endif
        hs_buf_putc(&b, '}');
    }
    hs_buf_printf(&b, "],\"queued_seqs\":%" PRId64 ",\"drain_s\":%.6f}", queued, drain_max);
    return hs__conn_send(k, 200, &b, "application/json");
}
