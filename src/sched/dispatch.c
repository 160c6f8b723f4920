/* Dispatch: decide -> submit -> retry / shadow -> one answer. See dispatch.h. */
#include "sched/dispatch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

struct hs_dispatch {
    struct hs_sched *sched;
    struct hs_router *router;
};

hs_status hs_dispatch_create(struct hs_sched *s, struct hs_router *rt, struct hs_dispatch **out,
                             struct hs_error *err)
{
    *out = NULL;
    if (!s || !rt)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "dispatch: no scheduler or router");
    struct hs_dispatch *d = hs_calloc(1, sizeof *d);
    if (!d) return hs_error_set(err, HS_STATUS_NO_MEMORY, "dispatch: out of memory");
    d->sched = s;
    d->router = rt;
    *out = d;
    return HS_STATUS_OK;
}

void hs_dispatch_free(struct hs_dispatch *d)
{
    hs_free(d);
}

/* ---------------------------------------------------------------------------------------------
 * requests
 */

static void request_release(struct hs_request *r, void *ctx)
{
    (void)r;
    struct hs_job *j = ctx;
    /* (the last use of j: let_go may free the memory it lives in) */
    struct hs_job_owner o = j->owner;
    o.let_go(o.ctx);
}

/* The one place a scheduler request is made: j's inputs (fresh sequence records over the same
 * ids), id, model, deadline and stamps, at priority prio, with rows of dim floats (0: none yet),
 * answered through done. It holds the owner's memory until its last reference goes; the owner's
 * reference is dropped by hs_job_release. NULL when out of memory. */
static struct hs_request *request_new(struct hs_job *j, enum hs_priority prio, int dim,
                                      hs_request_fn done)
{
    if (j->n_reqs == HS_JOB_MAX_REQS) return NULL;
    const struct hs_job_owner *o = &j->owner;
    const size_t n = (size_t)j->n_seqs;
    struct hs_request *r = o->alloc(o->ctx, sizeof *r);
    struct hs_seq *seqs = r ? o->alloc(o->ctx, n * sizeof *seqs) : NULL;
    float *out = seqs && dim > 0 ? o->alloc(o->ctx, n * (size_t)dim * sizeof(float)) : NULL;
    if (!seqs || (dim > 0 && !out)) return NULL;
    for (size_t i = 0; i < n; i++) {
        seqs[i].ids = j->seqs[i].ids;
        seqs[i].type_ids = j->seqs[i].type_ids;
        seqs[i].n_tokens = j->seqs[i].n_tokens;
    }
    r->id = j->id;
    r->priority = prio;
    r->tenant = j->tenant;
    r->weight = j->weight;
    r->deadline_ns = j->deadline_ns;
    r->n_seqs = j->n_seqs;
    r->seqs = seqs;
    r->out = out;
    r->model = j->model;
    r->done = done;
    r->release = request_release;
    r->ctx = j;
    memcpy(r->ts, j->ts, sizeof r->ts);
    hs_request_init(r);
    o->hold(o->ctx);
    j->reqs[j->n_reqs++] = r;
    return r;
}

static struct hs_route_query query_of(const struct hs_job *j, const struct hs_request *r)
{
    return (struct hs_route_query){
        .req = r, .task = j->task, .key = j->key, .header = j->header, .header_ctx = j->header_ctx};
}

static int64_t batch_ns_of(const struct hs_request *r)
{
    return r->ts[HS_TS_COPY_OUT] && r->ts[HS_TS_BATCHED]
               ? r->ts[HS_TS_COPY_OUT] - r->ts[HS_TS_BATCHED]
               : 0;
}

/* Whether a decision may be retried at all: a route (not the fallback) with another lane to go
 * to, and a retry budget that can ever hold a token. Whether it will be is hs_router_retry's. */
static bool retry_possible(const struct hs_dispatch *d, const struct hs_route_decision *dec)
{
    const struct hs_router_opts *ro = hs_router_opts(d->router);
    if (dec->route < 0 || ro->retry_budget_max < 1) return false;
    const struct hs_route *route = &ro->routes[dec->route];
    return route->n_lanes > 1 || route->failover_route >= 0;
}

/* ---------------------------------------------------------------------------------------------
 * shadow
 */

/* Cosine of every row of the answer with the shadow copy's, reported to the router. Runs once,
 * on the thread that finished second; rows are only read (the owner reads them too). */
static void shadow_compare(struct hs_job *j)
{
    struct hs_router *rt = j->d->router;
    if (!j->answer_ok || !j->shadow_ok) {
        hs_router_on_shadow(rt, j->shadow_route, false, NULL, 0);
        return;
    }
    const int dim = j->dim;
    const float *answer = j->req->out, *copy = j->shadow->out;
    double cos[64];
    int n = 0;
    for (int i = 0; i < j->n_seqs; i++) {
        const float *a = answer + (size_t)i * dim, *b = copy + (size_t)i * dim;
        double ab = 0, aa = 0, bb = 0;
        for (int k = 0; k < dim; k++) {
            ab += (double)a[k] * b[k];
            aa += (double)a[k] * a[k];
            bb += (double)b[k] * b[k];
        }
        cos[n++] = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
        if (n == 64 || i + 1 == j->n_seqs) {
            hs_router_on_shadow(rt, j->shadow_route, true, cos, n);
            n = 0;
        }
    }
}

/* One of the two sides (answer, shadow copy) has finished; the second compares. */
static void shadow_meet(struct hs_job *j)
{
    if (atomic_fetch_add(&j->met, 1) == 1) shadow_compare(j);
}

static void shadow_done(struct hs_request *r, void *ctx)
{
    struct hs_job *j = ctx;
    j->shadow_ok = r->status == HS_STATUS_OK;
    shadow_meet(j);
}

/* ---------------------------------------------------------------------------------------------
 * the answer
 */

static void answer_done(struct hs_request *r, void *ctx);

/* The job's answer is j->req's: copy the outcome, settle the shadow, tell the owner. */
static void finish(struct hs_job *j)
{
    const struct hs_request *r = j->req;
    j->status = r->status;
    snprintf(j->msg, sizeof j->msg, "%s", r->msg);
    j->retry_after_s = r->retry_after_s;
    j->lane = r->lane;
    memcpy(j->ts, r->ts, sizeof j->ts);
    j->out = r->status == HS_STATUS_OK ? r->out : NULL;
    if (j->shadow_route >= 0) {
        j->answer_ok = r->status == HS_STATUS_OK;
        shadow_meet(j);
    }
    j->owner.done(j, j->owner.ctx); /* last: the owner may release j */
}

/* After r failed with an engine error: one more try elsewhere, in the storage prepared at
 * submit, when the router allows it. True when the retry was admitted (its answer is the
 * job's); false leaves j answering with r's failure. */
static bool retry(struct hs_job *j, struct hs_request *r, int64_t now)
{
    struct hs_dispatch *d = j->d;
    struct hs_route_query q = query_of(j, r);
    struct hs_route_decision d2;
    hs_router_retry(d->router, &q, &j->dec, now, &d2);
    if (d2.status != HS_STATUS_OK) return false;
    struct hs_request *r2 = j->retry;
    j->retry = NULL; /* at most one retry */
    memcpy(r2->ts, r->ts, sizeof r2->ts);
    struct hs_route_decision prev = j->dec;
    j->dec = d2;
    snprintf(j->dec.reason, sizeof j->dec.reason, "%.120s; %.120s", prev.reason, d2.reason);
    j->req = r2;
    /* Once admitted, r2's answer may run at once on another thread: j is not touched after. */
    hs_status st = hs_sched_submit_lane(d->sched, d2.lane, r2);
    if (st == HS_STATUS_OK) return true;
    hs_router_on_result(d->router, d2.lane, d2.probe, st, 0, false, hs_sched_now(d->sched));
    j->dec = prev;
    j->req = r;
    return false;
}

static void answer_done(struct hs_request *r, void *ctx)
{
    struct hs_job *j = ctx;
    int64_t now = hs_sched_now(j->d->sched);
    hs_router_on_result(j->d->router, r->lane, j->dec.probe, r->status, batch_ns_of(r),
                        r->in_batch_timeout, now);
    if (r->status == HS_STATUS_ENGINE && j->retry && retry(j, r, now)) return;
    finish(j);
}

/* ---------------------------------------------------------------------------------------------
 * submission
 */

static hs_status refuse(struct hs_job *j, hs_status st, double retry_after_s, const char *msg)
{
    j->status = st;
    j->retry_after_s = retry_after_s;
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    return st;
}

/* Decides (escalating from `from` when given), builds and submits j. */
static hs_status start(struct hs_dispatch *d, struct hs_job *j, const struct hs_job *from)
{
    j->d = d;
    j->lane = -1;
    j->shadow_route = -1;
    atomic_init(&j->met, 0);
    if (j->n_seqs <= 0 || !j->seqs || !j->owner.alloc || !j->owner.hold || !j->owner.let_go ||
        !j->owner.done)
        return refuse(j, HS_STATUS_INVALID_ARGUMENT, 0, "dispatch: a job without inputs or owner");
    struct hs_request *r = request_new(j, j->priority, 0, answer_done);
    if (!r) return refuse(j, HS_STATUS_NO_MEMORY, 0, "out of memory");
    j->req = r;

    /* decide */
    struct hs_route_query q = query_of(j, r);
    int64_t now = hs_sched_now(d->sched);
    if (!from) {
        hs_router_decide(d->router, &q, now, &j->dec);
    } else {
        struct hs_route_decision d2;
        if (from->dec.cascade_route >= 0)
            hs_router_escalate(d->router, &q, &from->dec, now, &d2);
        else
            hs_router_decide(d->router, &q, now, &d2);
        j->dec = d2;
        snprintf(j->dec.reason, sizeof j->dec.reason, "%.96s; %d of %d escalated: %.96s",
                 from->dec.reason, j->n_seqs, from->n_seqs, d2.reason);
        snprintf(j->msg, sizeof j->msg, "%s", d2.reason);
    }
    j->routed = true;
    r->ts[HS_TS_ROUTED] = hs_sched_now(d->sched);
    memcpy(j->ts, r->ts, sizeof j->ts);
    const struct hs_route_decision dec = j->dec; /* done may change j->dec once r is admitted */
    if (dec.status != HS_STATUS_OK)
        return refuse(j, dec.status, dec.retry_after_s, from ? j->msg : dec.reason);

    /* build: the rows, and now the storage for what may follow (later the owner's allocator is
     * not ours to call) */
    j->dim = hs_sched_lane_opts(d->sched, dec.lane)->dim;
    r->out = j->owner.alloc(j->owner.ctx, (size_t)j->n_seqs * (size_t)j->dim * sizeof(float));
    if (!r->out) {
        hs_router_on_result(d->router, dec.lane, dec.probe, HS_STATUS_NO_MEMORY, 0, false,
                            hs_sched_now(d->sched));
        return refuse(j, HS_STATUS_NO_MEMORY, 0, "out of memory");
    }
    if (retry_possible(d, &dec)) j->retry = request_new(j, j->priority, j->dim, answer_done);
    if (dec.shadow_lane >= 0) {
        j->shadow_route = dec.route; /* the comparison is the shadowed route's */
        /* The copy is bulk work: shed before anything a client waits for. */
        if (hs_sched_lane_opts(d->sched, dec.shadow_lane)->dim == j->dim)
            j->shadow = request_new(j, HS_PRIORITY_BATCH, j->dim, shadow_done);
    }
    struct hs_request *shadow = j->shadow;

    /* submit */
    hs_status st = hs_sched_submit_lane(d->sched, dec.lane, r);
    if (st != HS_STATUS_OK) {
        hs_router_on_result(d->router, dec.lane, dec.probe, st, 0, false, hs_sched_now(d->sched));
        if (dec.shadow_lane >= 0) hs_router_on_shadow(d->router, dec.route, false, NULL, 0);
        j->lane = r->lane;
        memcpy(j->ts, r->ts, sizeof j->ts);
        return refuse(j, st, r->retry_after_s, r->msg);
    }
    /* Admitted: from here on the answer may run on another thread; only the shadow is ours. */
    if (dec.shadow_lane >= 0 &&
        (!shadow || hs_sched_submit_lane(d->sched, dec.shadow_lane, shadow) != HS_STATUS_OK)) {
        j->shadow_ok = false; /* no copy, or refused: compared as failed */
        shadow_meet(j);
    }
    return HS_STATUS_OK;
}

hs_status hs_dispatch_submit(struct hs_dispatch *d, struct hs_job *j)
{
    return start(d, j, NULL);
}

hs_status hs_dispatch_escalate(struct hs_dispatch *d, struct hs_job *j, const struct hs_job *from)
{
    return start(d, j, from);
}

hs_status hs_dispatch_judge(struct hs_dispatch *d, const struct hs_job *j, const float *rows, int n,
                            int dim, enum hs_cascade_decision *out)
{
    return hs_router_judge(d->router, &j->dec, rows, n, dim, out);
}

void hs_job_release(struct hs_job *j)
{
    /* Copied first: the last reference may free the memory j lives in. */
    struct hs_request *reqs[HS_JOB_MAX_REQS];
    int n = j->n_reqs;
    memcpy(reqs, j->reqs, sizeof reqs);
    for (int i = 0; i < n; i++) hs_request_unref(reqs[i]);
}
