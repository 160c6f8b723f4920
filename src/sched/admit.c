/* Routing (the router-less shortcut) and admission: a request's checks, queue limits, eviction
 * of batch-class work, and the predicted-wait refusal (sched.h). */
#include "sched/sched-impl.h"

#include <math.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"

bool hs_sched_lane_idle(struct hs_sched *s, int lane)
{
    if (lane < 0 || lane >= s->n) return false;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    bool idle = !L->queued_seqs && !L->running_batches;
    pthread_mutex_unlock(&L->mu);
    return idle;
}

enum hs_share_verdict hs_share_verdict(int share_inflight, int total, int mine, double weight,
                                       double others_weight, double heaviest_other)
{
    if (share_inflight <= 0 || total < share_inflight || weight <= 0) return HS_SHARE_ADMIT;
    const double share = fmax(1.0, share_inflight * weight / (weight + others_weight));
    if (mine < share || mine / weight <= heaviest_other) return HS_SHARE_ADMIT;
    return total >= 2 * share_inflight ? HS_SHARE_REFUSE : HS_SHARE_DEMOTE;
}

/* The router-less choice: among lanes serving r's model, the earliest predicted completion. */
static int route(struct hs_sched *s, const struct hs_request *r)
{
    int best = -1;
    double best_wait = 0;
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        if (r->model && strcmp(r->model, L->model) != 0) continue;
        bool fits;
        double w = hs_sched_lane_predict(s, i, r, &fits);
        if (!fits) w = 1e30; /* still a candidate: submit names what does not fit */
        if (best < 0 || w < best_wait) {
            best = i;
            best_wait = w;
        }
    }
    return best;
}

static hs_status reject(struct hs_request *r, hs_status st, double retry_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static hs_status reject(struct hs_request *r, hs_status st, double retry_s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->status = st;
    r->retry_after_s = retry_s;
    r->over_share = 0; /* not queued, so not queued past its share */
    return st;
}

/* Evicts the newest request of priority prio (lock held) or, on a fair lane, the one last in
 * the fair order, when its tag is above above_tag; false when there is none. */
static bool lane_evict_one(struct lane *L, enum hs_priority prio, double above_tag, struct chain *c,
                           const char *why)
{
    struct hs_seq *victim = NULL;
    for (int b = 0; b < L->n_buckets; b++) {
        struct hs_seq *q = L->q[prio][b].tail;
        if (!q || (L->o.fair && !(q->tag > above_tag))) continue;
        if (!victim || (L->o.fair ? q->tag > victim->tag : q->enqueued_ns > victim->enqueued_ns))
            victim = q;
    }
    if (!victim) return false;
    double retry =
        hs__lane_backlog_s(L, HS_PRIORITY_COUNT - 1, INFINITY, NULL, NULL, hs__sched_now(L->s));
    hs__lane_fail_locked(L, victim->req, HS_STATUS_OVERLOADED, retry, c, "%s", why);
    return true;
}

hs_status hs_sched_submit(struct hs_sched *s, struct hs_request *r)
{
    if ((unsigned)r->priority >= HS_PRIORITY_COUNT) r->priority = HS_PRIORITY_INTERACTIVE;
    int li = route(s, r);
    if (li < 0)
        return reject(r, HS_STATUS_NOT_FOUND, 0, "no engine serves model '%s'",
                      r->model ? r->model : "");
    return hs_sched_submit_lane(s, li, r);
}

hs_status hs_sched_submit_lane(struct hs_sched *s, int li, struct hs_request *r)
{
    int64_t now = hs__sched_now(s);
    if (atomic_load(&s->draining))
        return reject(r, HS_STATUS_SHUTDOWN, 0, "server is shutting down");
    if ((unsigned)r->priority >= HS_PRIORITY_COUNT) r->priority = HS_PRIORITY_INTERACTIVE;
    if (li < 0 || li >= s->n) return reject(r, HS_STATUS_NOT_FOUND, 0, "no engine lane %d", li);
    struct lane *L = s->lanes[li];
    r->lane = li;
    r->ts[HS_TS_ROUTED] = now;
    if (r->n_seqs <= 0) return reject(r, HS_STATUS_INVALID_INPUT, 0, "request has no input");
    for (int i = 0; i < r->n_seqs; i++) {
        int len = r->seqs[i].n_tokens;
        if (len < 1) return reject(r, HS_STATUS_INVALID_INPUT, 0, "input %d is empty", i);
        if (len > L->o.seq_max)
            return reject(r, HS_STATUS_TOO_LONG, 0,
                          "input %d has %d tokens; model %s takes at most %d", i, len, L->model,
                          L->o.seq_max);
        int b = hs__lane_bucket_of(L, len);
        if (b < 0)
            return reject(r, HS_STATUS_TOO_LONG, 0,
                          "input %d has %d tokens; no shape engine %s allows fits it", i, len,
                          L->engine);
        r->seqs[i].bucket = b;
    }
    if (r->deadline_ns <= now)
        return reject(r, HS_STATUS_TIMEOUT, 0, "deadline passed before the request was queued");
    if (r->n_seqs > L->o.queue_max)
        return reject(r, HS_STATUS_OVERLOADED, 0,
                      "request has %d inputs; the queue holds at most %d", r->n_seqs,
                      L->o.queue_max);

    struct chain c = {NULL};
    hs_status st = HS_STATUS_OK;
    pthread_mutex_lock(&L->mu);
    int limit = L->o.queue_max;
    if (r->priority == HS_PRIORITY_BATCH) {
        limit = (int)(L->o.queue_max * L->o.shed_batch_ratio);
        if (limit < 1) limit = 1;
    } else {
        while (L->queued_seqs + r->n_seqs > limit &&
               lane_evict_one(L, HS_PRIORITY_BATCH, -INFINITY, &c,
                              "shed under overload to make room for interactive requests")) {
        }
    }
    /* whether its tenant is past its share: once per submit (it walks every tenant). Fair
     * shares: a full queue sheds the work last in the fair order (the tenant furthest past its
     * share) when it would run after this request */
    const bool over = hs__lane_over_share(L, r, now);
    if (L->o.fair) {
        double tag = hs__lane_tag_of(L, r, over);
        while (L->queued_seqs + r->n_seqs > limit &&
               lane_evict_one(L, r->priority, tag, &c,
                              "shed under overload: its tenant is past its fair share")) {
        }
    }
    double wait_s = hs__lane_predict_locked(L, r, over, now);
    /* Retry-After: until everything queued, this request included, has run. */
    double drain_s = hs__lane_backlog_s(L, HS_PRIORITY_COUNT - 1, INFINITY, NULL, NULL, now);
    if (drain_s < wait_s) drain_s = wait_s;
    /* An idle lane takes any request that fits: it is the only way a prediction that went wrong
     * (a stalled batch, a changed machine) is corrected, by running a batch and measuring it. */
    bool idle = !L->queued_seqs && !L->running_batches;
    double wait_max_s = L->o.wait_max_ms > 0 ? L->o.wait_max_ms * 1e-3 : 0;
    if (L->queued_seqs + r->n_seqs > limit) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s,
                    "queue full (%d of %d sequences queued for %s)", L->queued_seqs, limit,
                    L->engine);
    } else if (!idle && now + (int64_t)(wait_s * 1e9) > r->deadline_ns) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s,
                    "predicted wait %.0f ms exceeds the deadline (%.0f ms left)", wait_s * 1e3,
                    hs_ns_to_ms(r->deadline_ns - now));
    } else if (!idle && wait_max_s > 0 && wait_s > wait_max_s) {
        st = reject(r, HS_STATUS_OVERLOADED, drain_s - wait_max_s,
                    "predicted wait %.0f ms exceeds the admission limit of %d ms on %s",
                    wait_s * 1e3, L->o.wait_max_ms, L->engine);
    } else {
        r->predicted_s = wait_s;
        r->predicted_bias = atomic_load(&L->pred_bias);
        atomic_store(&r->pending, r->n_seqs);
        atomic_store(&r->answered, 0);
        hs_request_ref(r);
        r->ts[HS_TS_ENQUEUED] = hs__sched_now(s);
        hs__lane_enqueue(L, r, over, now);
        if (L->n_slots > 1)
            pthread_cond_broadcast(&L->cv);
        else
            pthread_cond_signal(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    hs__chain_flush(&c);
    if (st != HS_STATUS_OK) return st;

    pthread_mutex_lock(&s->rmu);
    s->kick++;
    if (r->deadline_ns < s->reap_at) {
        s->reap_at = r->deadline_ns;
        pthread_cond_signal(&s->rcv);
    }
    pthread_mutex_unlock(&s->rmu);
    return HS_STATUS_OK;
}
