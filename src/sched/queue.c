/* The lane queue: its lists per priority and bucket, failing a request out of it, and the
 * reaper that answers requests whose deadline passed (sched.h). */
#include "sched/sched-impl.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/clock.h"

void hs__list_push(struct list *l, struct hs_seq *q)
{
    q->next = NULL;
    q->prev = l->tail;
    if (l->tail)
        l->tail->next = q;
    else
        l->head = q;
    l->tail = q;
    l->n++;
    l->tokens += q->n_tokens;
}

/* Whether a goes after b in the fair order: a larger tag, or the same tag past its share
 * against one within it (the virtual time jumps to an over-share tenant's tag when nothing else
 * is queued, and the next request of a tenant within its share starts there). */
static bool fair_after(const struct hs_seq *a, const struct hs_seq *b)
{
    return a->tag > b->tag || (a->tag == b->tag && a->over && !b->over);
}

/* q into l in fair order: after every sequence not after it (a tenant's own tags only grow, so
 * one tenant's sequences stay in arrival order; the walk from the tail is short unless q
 * overtakes a flooding tenant's backlog). */
static void list_insert(struct list *l, struct hs_seq *q)
{
    struct hs_seq *after = l->tail;
    while (after && fair_after(after, q)) after = after->prev;
    if (after == l->tail) {
        hs__list_push(l, q);
        return;
    }
    q->prev = after;
    q->next = after ? after->next : l->head;
    q->next->prev = q;
    if (after)
        after->next = q;
    else
        l->head = q;
    l->n++;
    l->tokens += q->n_tokens;
}

int hs__tenant_slot(const struct hs_request *r)
{
    int t = r->tenant % HS_SCHED_MAX_TENANTS;
    return t < 0 ? -t : t;
}

static double tenant_weight(const struct hs_request *r)
{
    return r->weight > 0 ? r->weight : 1.0;
}

/* v, summed at at_ns, decayed to now (time constant HS_FAIR_USED_TAU_S). */
static double decayed(double v, int64_t at_ns, int64_t now)
{
    const int64_t dt = now - at_ns;
    return dt > 0 ? v * exp(-(double)dt * 1e-9 / HS_FAIR_USED_TAU_S) : v;
}

/* Tokens tenant slot t had served, decayed to now. */
static double tenant_used(const struct lane *L, int t, int64_t now)
{
    return decayed(L->tenant_used[t], L->tenant_used_ns[t], now);
}

void hs__lane_busy(struct lane *L, double own_s, int64_t now)
{
    L->busy_recent = decayed(L->busy_recent, L->busy_recent_ns, now) + own_s;
    L->busy_recent_ns = now;
}

void hs__lane_served(struct lane *L, const struct hs_seq *q, int64_t now)
{
    const int t = hs__tenant_slot(q->req);
    L->tenant_used[t] = tenant_used(L, t, now) + q->n_tokens;
    L->tenant_used_ns[t] = now;
}

bool hs__lane_over_share(const struct lane *L, const struct hs_request *r, int64_t now)
{
    if (!L->o.fair || L->o.over_share <= 0) return false;
    /* shares matter only while the engine is contended: on a lane busy less than
     * HS_FAIR_BUSY_MIN of the recent time every tenant gets what it asks for, and a burst above
     * another tenant's rate is not past a share */
    const double busy = decayed(L->busy_recent, L->busy_recent_ns, now) / HS_FAIR_USED_TAU_S;
    if (busy < HS_FAIR_BUSY_MIN) return false;
    const int t = hs__tenant_slot(r);
    const double w = tenant_weight(r), used = tenant_used(L, t, now);
    double weights = 0, served = 0;
    for (int i = 0; i < HS_SCHED_MAX_TENANTS; i++) {
        if (i == t || !hs__lane_tenant_active(L, i, now)) continue;
        const double u = tenant_used(L, i, now);
        /* and the heaviest (per weight): a light tenant's burst past its share while a flood
         * that admission holds near its own is served more is not what to hold back */
        if (u * w > used * L->tenant_weight[i]) return false;
        weights += L->tenant_weight[i];
        served += u;
    }
    if (weights <= 0) return false; /* nobody else: its share is all */
    return used > L->o.over_share * w / (weights + w) * (served + used);
}

/* The padded tokens of the lane's largest full batch. */
static double full_batch_tokens(const struct lane *L)
{
    double most = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        const double v = (double)L->cap_seqs[b] * L->bucket_len[b];
        if (v > most) most = v;
    }
    return most;
}

/* The start tag of r's tenant's next turn: max(its finish tag, the virtual time). */
static double turn_of(const struct lane *L, const struct hs_request *r)
{
    const double last = L->tenant_tag[hs__tenant_slot(r)];
    return last > L->vtime ? last : L->vtime;
}

double hs__lane_tag_of(const struct lane *L, const struct hs_request *r, bool over)
{
    double tag = turn_of(L, r);
    if (over) { /* a full batch past the virtual time, after its own earlier requests so placed */
        const double from = L->vtime + full_batch_tokens(L),
                     after = L->over_tag[hs__tenant_slot(r)];
        if (tag < from) tag = from;
        if (tag < after) tag = after;
    }
    return tag;
}

void hs__lane_enqueue(struct lane *L, struct hs_request *r, bool over, int64_t now)
{
    const int t = hs__tenant_slot(r);
    const double w = tenant_weight(r);
    /* the request's sequences share its start tag (one call of the client's: they go in its
     * turn); its tenant's finish tag moves on by all its tokens from its turn, not from where
     * over_share put the request: the lead is this request's, and a tenant taken for past its
     * share by a burst is back in its turn with its next request (which may then pass it) */
    over = over && L->o.fair;
    const double tag = L->o.fair ? hs__lane_tag_of(L, r, over) : 0;
    double finish = L->o.fair ? turn_of(L, r) : 0, placed = tag;
    for (int i = 0; i < r->n_seqs; i++) {
        struct hs_seq *q = &r->seqs[i];
        q->enqueued_ns = now;
        q->queued = 1;
        q->tag = tag;
        q->over = over;
        struct list *l = &L->q[r->priority][q->bucket];
        if (L->o.fair) {
            list_insert(l, q);
            finish += q->n_tokens / w;
            placed += q->n_tokens / w;
        } else {
            hs__list_push(l, q);
        }
        L->queued_seqs++;
        L->queued_by_prio[r->priority]++;
        L->queued_tokens += q->n_tokens;
        L->queued_tokens_by_prio[r->priority] += q->n_tokens;
    }
    r->over_share = over ? 1 : 0;
    if (L->o.fair) {
        L->tenant_tag[t] = finish;
        L->tenant_seen_ns[t] = now;
        L->tenant_weight[t] = w;
        if (over) L->over_tag[t] = placed;
    }
}

bool hs__lane_shared(const struct lane *L, int64_t now)
{
    int n = 0;
    for (int t = 0; t < HS_SCHED_MAX_TENANTS; t++)
        if (hs__lane_tenant_active(L, t, now) && ++n > 1) return true;
    return false;
}

void hs__lane_fair_bounds(const struct lane *L, int b, struct fair_bounds *fb)
{
    fb->bucket = b;
    for (int p = 0; p < HS_PRIORITY_COUNT; p++)
        for (int k = 0; k < L->n_buckets; k++) {
            const struct hs_seq *q = k == b ? NULL : L->q[p][k].head;
            fb->head[p][k] = fb->other[p][k] = INFINITY;
            fb->tenant[p][k] = q ? q->req->tenant : 0;
            if (!q) continue;
            fb->head[p][k] = q->tag;
            /* in tag order: the walk ends at the first sequence of another tenant, which a
             * light tenant's work, tagged near the virtual time, keeps short */
            while (q && q->req->tenant == fb->tenant[p][k]) q = q->next;
            if (q) fb->other[p][k] = q->tag;
        }
}

double hs__lane_fair_bound(const struct lane *L, const struct fair_bounds *fb,
                           const struct hs_seq *q)
{
    double bound = INFINITY;
    const int t = q->req->tenant;
    for (int p = 0; p <= (int)q->req->priority && p < HS_PRIORITY_COUNT; p++)
        for (int k = 0; k < L->n_buckets; k++) {
            if (k == fb->bucket) continue;
            double v = fb->tenant[p][k] != t ? fb->head[p][k] : fb->other[p][k];
            if (v < bound) bound = v;
        }
    return bound;
}

void hs__lane_took(struct lane *L, double last_tag)
{
    if (!L->o.fair) return;
    double v = INFINITY;
    for (int p = 0; p < HS_PRIORITY_COUNT; p++)
        for (int b = 0; b < L->n_buckets; b++)
            if (L->q[p][b].head && L->q[p][b].head->tag < v) v = L->q[p][b].head->tag;
    if (v == INFINITY) v = last_tag;
    if (v > L->vtime) L->vtime = v;
}

static void list_remove(struct list *l, struct hs_seq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        l->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        l->tail = q->prev;
    q->next = q->prev = NULL;
    l->n--;
    l->tokens -= q->n_tokens;
}

/* Removes a queued sequence from its list and the lane's counters (lock held). */
void hs__lane_unqueue(struct lane *L, struct hs_seq *q)
{
    enum hs_priority p = q->req->priority;
    list_remove(&L->q[p][q->bucket], q);
    q->queued = 0;
    L->queued_seqs--;
    L->queued_by_prio[p]--;
    L->queued_tokens -= q->n_tokens;
    L->queued_tokens_by_prio[p] -= q->n_tokens;
}

static void chain_add(struct chain *c, struct hs_request *r, int bits)
{
    if (!bits) return;
    if (!r->link_drop) {
        r->link = c->head;
        c->head = r;
    }
    r->link_drop |= bits;
}

void hs__chain_flush(struct chain *c)
{
    struct hs_request *r = c->head;
    c->head = NULL;
    while (r) {
        struct hs_request *next = r->link;
        int bits = r->link_drop;
        r->link = NULL;
        r->link_drop = 0;
        if ((bits & 1) && r->done) r->done(r, r->ctx);
        if (bits & 2) hs_request_unref(r);
        r = next;
    }
}

void hs__lane_fail_locked(struct lane *L, struct hs_request *r, hs_status st, double retry_s,
                          struct chain *c, const char *fmt, ...)
{
    int bits = 0;
    int expect = 0;
    if (atomic_compare_exchange_strong(&r->answered, &expect, 1)) {
        r->status = st;
        r->retry_after_s = retry_s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->msg, sizeof r->msg, fmt, ap);
        va_end(ap);
        bits |= 1;
    }
    int removed = 0;
    for (int i = 0; i < r->n_seqs; i++) {
        if (r->seqs[i].queued) {
            hs__lane_unqueue(L, &r->seqs[i]);
            removed++;
        }
    }
    if (removed && atomic_fetch_sub(&r->pending, removed) == removed) bits |= 2;
    chain_add(c, r, bits);
}

bool hs__lane_fail_expired(struct lane *L, const struct hs_seq *q, int64_t now, struct chain *c)
{
    if (q->req->deadline_ns > now) return false;
    hs__lane_fail_locked(L, q->req, HS_STATUS_TIMEOUT, 0, c,
                         "deadline passed while queued (waited %.1f ms)",
                         hs_ns_to_ms(now - q->enqueued_ns));
    return true;
}

/* Shape of a batch of n real sequences from bucket b. */
int hs__lane_shape_batch(const struct lane *L, int b, int n)
{
    if (!L->n_sizes[b]) return n;
    for (int i = 0; i < L->n_sizes[b]; i++)
        if (L->sizes[b][i] >= n) return L->sizes[b][i];
    return n; /* unreachable: cap_seqs is itself an allowed size */
}

int hs__lane_bucket_of(const struct lane *L, int n_tokens)
{
    for (int b = 0; b < L->n_buckets; b++)
        if (n_tokens <= L->bucket_len[b]) return L->shape_seq[b] > 0 ? b : -1;
    return -1;
}

int64_t hs__lane_reap(struct lane *L, int64_t now, struct chain *c)
{
    int64_t next = INT64_MAX;
    pthread_mutex_lock(&L->mu);
    for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
        for (int b = 0; b < L->n_buckets; b++) {
        restart:
            for (struct hs_seq *q = L->q[p][b].head; q; q = q->next) {
                struct hs_request *r = q->req;
                if (hs__lane_fail_expired(L, q, now, c))
                    goto restart; /* the failure may have unlinked q's neighbours */
                if (r->deadline_ns < next) next = r->deadline_ns;
            }
        }
    }
    /* Requests in a running batch: answered at their deadline even when the engine hangs; the
     * batch's rows for them are discarded when it finishes. */
    for (int i = 0; i < L->n_slots; i++) {
        struct slot *sl = &L->slots[i];
        for (int k = 0; k < sl->n_taken; k++) {
            struct hs_request *r = sl->taken[k]->req;
            if (atomic_load(&r->answered)) continue;
            if (r->deadline_ns <= now) {
                /* the engine's breaker hears of it only when the batch overran (hs__slot_overran)
                 */
                double ran_s = hs__slot_ran_s(L, sl, now);
                r->in_batch_timeout = hs__slot_overran(sl, ran_s);
                hs__lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                                     "deadline passed while engine %s ran its batch (%.1f ms%s)",
                                     L->engine, ran_s * 1e3,
                                     r->in_batch_timeout ? ", past twice its predicted time" : "");
            } else if (r->deadline_ns < next)
                next = r->deadline_ns;
        }
    }
    pthread_mutex_unlock(&L->mu);
    return next;
}

void *hs__reaper_main(void *arg)
{
    struct hs_sched *s = arg;
    pthread_mutex_lock(&s->rmu);
    while (!s->stop) {
        uint64_t kick = s->kick;
        pthread_mutex_unlock(&s->rmu);
        int64_t now = hs_now_ns(), next = INT64_MAX;
        for (int i = 0; i < s->n; i++) {
            struct chain c = {NULL};
            int64_t t = hs__lane_reap(s->lanes[i], now, &c);
            hs__chain_flush(&c);
            if (t < next) next = t;
        }
        pthread_mutex_lock(&s->rmu);
        if (s->stop) break;
        if (s->kick != kick) continue; /* a submit raced with the scan: look again */
        s->reap_at = next;
        hs__cond_wait_until(&s->rcv, &s->rmu, next);
    }
    pthread_mutex_unlock(&s->rmu);
    return NULL;
}
