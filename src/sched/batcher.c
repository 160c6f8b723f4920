/* The batcher: which bucket is due, the sequences a batch takes, running it on the lane's
 * runner and answering its requests; one thread per slot (sched.h). */
#include "sched/sched-impl.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"

/* Picks the bucket to batch now (lock held): -1 when none is due; *wake gets the next due time.
 * A bucket is due when it holds a full batch, when its oldest sequence has waited the window,
 * or, on an idle lane (no batch running), at once: while the engine idles there is nothing to
 * gather for, and the next batch gathers while this one runs (as TEI and vLLM batch). With
 * batch_window_when_idle the window is waited out on an idle lane too. */
static int lane_pick(struct lane *L, int64_t now, bool draining, int64_t *wake)
{
    int best = -1, best_prio = HS_PRIORITY_COUNT;
    int64_t best_oldest = INT64_MAX;
    double best_tag = INFINITY;
    int64_t window_ns = (int64_t)L->o.batch_window_us * 1000;
    const bool at_once = draining || hs__lane_window_skipped(L);
    *wake = INT64_MAX;
    for (int b = 0; b < L->n_buckets; b++) {
        int count = 0, top = HS_PRIORITY_COUNT;
        int64_t oldest = INT64_MAX;
        double tag = INFINITY; /* fair shares: its first sequence's tag */
        for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
            struct list *l = &L->q[p][b];
            if (!l->n) continue;
            count += l->n;
            if (top == HS_PRIORITY_COUNT) {
                top = p;
                tag = l->head->tag;
            }
            if (l->head->enqueued_ns < oldest) oldest = l->head->enqueued_ns;
            /* a fair list is in tag order, not arrival order: when the window may matter (less
             * than a full batch), its oldest sequence is looked for */
            if (L->o.fair && l->n < L->cap_seqs[b])
                for (const struct hs_seq *q = l->head->next; q; q = q->next)
                    if (q->enqueued_ns < oldest) oldest = q->enqueued_ns;
        }
        if (!count) continue;
        int64_t due = oldest + window_ns;
        if (count >= L->cap_seqs[b] || now >= due || at_once) {
            bool first = L->o.fair && tag != best_tag ? tag < best_tag : oldest < best_oldest;
            if (top < best_prio || (top == best_prio && first)) {
                best = b;
                best_prio = top;
                best_oldest = oldest;
                best_tag = tag;
            }
        } else if (due < *wake) {
            *wake = due;
        }
    }
    return best;
}

/* The two lowest next start tags of the tenants active within the last second, and whose the
 * lowest is (lock held). */
struct next_starts {
    double first, second;
    int first_tenant;
};

static void next_starts(const struct lane *L, int64_t now, struct next_starts *ns)
{
    for (int t = 0; t < HS_SCHED_MAX_TENANTS; t++) {
        if (!hs__lane_tenant_active(L, t, now)) continue;
        const double v = L->tenant_tag[t] > L->vtime ? L->tenant_tag[t] : L->vtime;
        if (v < ns->first) {
            ns->second = ns->first;
            ns->first = v;
            ns->first_tenant = t;
        } else if (v < ns->second) {
            ns->second = v;
        }
    }
}

/* The lowest next start tag of a tenant other than q's (INFINITY: none active). */
static double other_start(const struct next_starts *ns, const struct hs_seq *q)
{
    return hs__tenant_slot(q->req) == ns->first_tenant ? ns->second : ns->first;
}

/* Takes up to cap sequences of bucket b into the slot, interactive first, failing expired ones
 * (lock held). */
static int lane_take(struct lane *L, struct slot *sl, int b, int64_t now, struct chain *c)
{
    /* Under a backlog (this slot's previous batch was followed by this one at once), a request
     * that would still be in the batch at its deadline is answered now instead of spending
     * engine time on rows nobody will read (the batch's predicted duration, from the sequences
     * it is about to take). Not after an idle spell: that batch always runs, so that a
     * prediction gone wrong meets a measurement instead of refusing work forever. */
    int queued = 0;
    int64_t tokens = 0;
    for (int p = 0; p < HS_PRIORITY_COUNT; p++) {
        queued += L->q[p][b].n;
        tokens += L->q[p][b].tokens;
    }
    if (queued > L->cap_seqs[b]) tokens = tokens * L->cap_seqs[b] / queued;
    double batch_s = hs__lane_batch_s(L, b, (double)tokens);
    int64_t cutoff = now + (int64_t)(batch_s * 1e9);
    /* fair shares, several tenants active: short batches (hs_lane_opts.fair_batch_us) */
    const double slice_s = L->o.fair && L->o.fair_batch_us > 0 && hs__lane_shared(L, now)
                               ? L->o.fair_batch_us * 1e-6
                               : INFINITY;
    /* it cuts only the backlog of a tenant that runs ahead: a sequence tagged more than a full
     * batch of this bucket past the virtual time (tags count tokens over the tenant's weight; a
     * full batch's padded tokens bound what one batch serves of a tenant of weight 1). A light
     * tenant's work, tagged near the virtual time, keeps its batch whole. */
    const double slice_from = L->vtime + (double)L->cap_seqs[b] * L->bucket_len[b];
    /* With fair_batch_ms, also the work of a tenant past the start tag the next request of
     * another tenant active within the last second would get (max(its finish tag, virtual
     * time)): a flood held to a few requests in flight by admission's share never gets a full
     * batch ahead of the virtual time, yet every batch of it is what a light tenant's request,
     * arriving a moment later, waits for. */
    struct next_starts ns = {INFINITY, INFINITY, -1};
    if (slice_s < INFINITY) next_starts(L, now, &ns);
    /* fair shares: past another tenant's work waiting in another bucket (hs__lane_fair_bounds),
     * a tenant's sequences go on into the batch only while it stays short: fair_batch_ms, or
     * half a full batch of this bucket (what that work waits for beyond the batch in
     * flight; the batches stay long enough for the flood's throughput) */
    struct fair_bounds fb;
    double cross_s = INFINITY;
    const bool bounded = L->o.fair && hs__lane_shared(L, now); /* one tenant: nothing to bound */
    if (bounded) {
        hs__lane_fair_bounds(L, b, &fb);
        cross_s = L->o.fair_batch_us > 0
                      ? L->o.fair_batch_us * 1e-6
                      : hs__lane_batch_s(L, b, (double)L->cap_seqs[b] * L->bucket_len[b]) / 2;
    }
    int64_t taken_tokens = 0;
    int n = 0;
    while (n < L->cap_seqs[b]) {
        struct hs_seq *q = NULL;
        for (int p = 0; p < HS_PRIORITY_COUNT && !q; p++) q = L->q[p][b].head;
        if (!q) break;
        if (n && (q->tag > slice_from || q->tag > other_start(&ns, q)) &&
            hs__lane_batch_s(L, b, (double)(taken_tokens + q->n_tokens)) > slice_s)
            break;
        if (n && bounded && q->tag > hs__lane_fair_bound(L, &fb, q) &&
            hs__lane_batch_s(L, b, (double)(taken_tokens + q->n_tokens)) > cross_s)
            break;
        /* a batch of the work of tenants within their shares takes none of one past its share:
         * the flood's sequence would hold their answers back by its own time */
        if (n && q->over && !sl->taken[0]->over) break;
        /* and without fair_batch_ms (with it, the cut above), a batch of work past its share,
         * while another tenant is active, stops growing at twice the batch's fixed cost (at
         * least half the engine's time on the work itself): what a light tenant's request
         * arriving meanwhile waits for */
        if (n && q->over && bounded && L->o.fair_batch_us <= 0 &&
            hs__lane_batch_s(L, b, (double)(taken_tokens + q->n_tokens)) >
                2 * hs_cost_line_s(&L->fit[b], 1, 0))
            break;
        struct hs_request *r = q->req;
        if (hs__lane_fail_expired(L, q, now, c)) continue;
        if (r->deadline_ns < cutoff && sl->backlog_since_ns) {
            hs__lane_fail_locked(L, r, HS_STATUS_TIMEOUT, 0, c,
                                 "deadline (%.1f ms away) would pass during its batch (predicted "
                                 "%.1f ms; waited %.1f ms)",
                                 hs_ns_to_ms(r->deadline_ns - now), batch_s * 1e3,
                                 hs_ns_to_ms(now - q->enqueued_ns));
            continue;
        }
        hs__lane_unqueue(L, q);
        hs__lane_served(L, q, now);
        taken_tokens += q->n_tokens;
        sl->taken[n++] = q;
    }
    if (n) hs__lane_took(L, sl->taken[n - 1]->tag);
    return n;
}

/* ---- the preempting slot (hs_lane_opts.preempt; sched.h "Preemption") ---- */

/* The tenants in the batches the lane's other slots run (lock held). */
static uint64_t lane_running_tenants(const struct lane *L)
{
    uint64_t m = 0;
    for (int i = 0; i < L->n_slots; i++)
        if (i != L->preempt_slot) m |= L->slots[i].run_tenants;
    return m;
}

bool hs__lane_preemptible(const struct lane *L, double need_s, int64_t now)
{
    for (int i = 0; i < L->n_slots; i++) {
        const struct slot *sl = &L->slots[i];
        if (i == L->preempt_slot || !sl->run_tenants) continue;
        /* a batch with several tenants' work holds a light tenant's request too: pausing it
         * for another light tenant's batch holds that request (and, as its tenant then has
         * work running, every later one of it) */
        if (sl->run_tenants & (sl->run_tenants - 1)) continue;
        if (!sl->run_start_ns) return true; /* formed, about to start */
        const double left =
            hs_cost_running_left_s(sl->run_pred_s, hs__slot_ran_s(L, sl, now), L->measured);
        if ((double)sl->run_paused_ns < sl->run_pred_s * 1e9 && left > need_s) return true;
    }
    return false;
}

/* The tag past which bucket b's work runs ahead of the lane (one full batch past the virtual
 * time, lane_take's slice_from): the preempting slot takes none of it. */
static double owed_until(const struct lane *L, int b)
{
    return L->vtime + (double)L->cap_seqs[b] * L->bucket_len[b];
}

/* The first sequence of l that is owed: its tenant has nothing running and it is tagged up to
 * owed_until (l in tag order: the walk stops there). NULL: none. */
static struct hs_seq *list_owed(const struct lane *L, const struct list *l, int b, uint64_t running)
{
    const double until = owed_until(L, b);
    for (struct hs_seq *q = l->head; q && q->tag <= until; q = q->next)
        if (!(running >> hs__tenant_slot(q->req) & 1)) return q;
    return NULL;
}

/* The bucket the preempting slot batches now (lock held): -1 unless owed work waits and a batch
 * it may preempt runs (hs__lane_preemptible, against the first owed sequence alone); interactive
 * first, then the smallest tag. */
static int preempt_pick(const struct lane *L, int64_t now)
{
    if (!L->running_batches) return -1;
    const uint64_t running = lane_running_tenants(L);
    int best = -1, best_prio = HS_PRIORITY_COUNT;
    double best_tag = INFINITY, need_s = 0;
    for (int p = 0; p < HS_PRIORITY_COUNT && best < 0; p++)
        for (int b = 0; b < L->n_buckets; b++) {
            const struct hs_seq *q = list_owed(L, &L->q[p][b], b, running);
            if (q && (p < best_prio || q->tag < best_tag)) {
                best = b;
                best_prio = p;
                best_tag = q->tag;
                need_s = hs__lane_batch_s(L, b, q->n_tokens);
            }
        }
    return best >= 0 && hs__lane_preemptible(L, need_s, now) ? best : -1;
}

/* Takes the owed sequences of bucket b into the preempting slot, interactive first, in tag
 * order, while the batch stays short: fair_batch_us when set, else a quarter of a full batch's
 * predicted time (a bound by bucket: with one long bucket a quarter is a long batch) (one
 * sequence at least: where a batch's fixed cost alone passes the bound, a batch of one each
 * would spend the engine on fixed costs while owed work queues); fails expired ones (lock
 * held). */
static int preempt_take(struct lane *L, struct slot *sl, int b, int64_t now, struct chain *c)
{
    const uint64_t running = lane_running_tenants(L);
    const double until = owed_until(L, b);
    const double quarter_s = hs__lane_batch_s(L, b, (double)L->cap_seqs[b] * L->bucket_len[b]) / 4;
    const double bound_s = L->o.fair_batch_us > 0 ? L->o.fair_batch_us * 1e-6 : quarter_s;
    int64_t tokens = 0;
    int n = 0;
    for (int p = 0; p < HS_PRIORITY_COUNT && n < L->cap_seqs[b]; p++) {
    restart:
        for (struct hs_seq *q = L->q[p][b].head, *next; q && n < L->cap_seqs[b]; q = next) {
            next = q->next;
            if (q->tag > until) break;
            if (running >> hs__tenant_slot(q->req) & 1) continue;
            if (n && hs__lane_batch_s(L, b, (double)(tokens + q->n_tokens)) > bound_s) goto done;
            if (hs__lane_fail_expired(L, q, now, c))
                goto restart; /* the failure may have unlinked q's neighbours */
            hs__lane_unqueue(L, q);
            hs__lane_served(L, q, now);
            tokens += q->n_tokens;
            sl->taken[n++] = q;
        }
    }
done:
    if (n) hs__lane_took(L, sl->taken[n - 1]->tag);
    return n;
}

double hs__slot_ran_s(const struct lane *L, const struct slot *sl, int64_t now)
{
    int64_t ran = now - sl->run_start_ns - sl->run_paused_ns;
    if (L->preempt_slot >= 0 && sl->idx != L->preempt_slot) {
        const struct slot *p = &L->slots[L->preempt_slot];
        const int64_t from =
            p->run_start_ns > sl->run_start_ns ? p->run_start_ns : sl->run_start_ns;
        if (p->run_start_ns && now > from) ran -= now - from; /* paused now */
    }
    return ran > 0 ? (double)ran / 1e9 : 0;
}

/* Whether a batch that has run ran_s seconds is the engine's fault when a deadline passes in it:
 * only past twice its prediction (a request that spent its time queued under overload and ran
 * out during a normal batch is the load's doing, and must not open the engine's breaker). */
bool hs__slot_overran(const struct slot *sl, double ran_s)
{
    return ran_s > 2 * sl->run_pred_s;
}

/* Starts the batch of the n sequences the slot took from bucket b: its input arrays (none on a
 * stepped scheduler, which runs no engine), its id, and its start and predicted duration for the
 * predictor and the reaper. */
void hs__batch_begin(struct slot *sl, int b, int n, int64_t formed_ns, struct hs_batch *batch)
{
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    int shape_b = hs__lane_shape_batch(L, b, n);
    int shape_s = L->shape_seq[b];
    int64_t tokens = 0;
    for (int i = 0; i < n; i++) tokens += sl->taken[i]->n_tokens;
    memset(batch, 0, sizeof *batch);
    if (!s->stepped) {
        int32_t off = 0;
        bool typed = false; /* some sequence has token types (a pair): the batch carries them */
        for (int i = 0; i < n; i++) typed |= sl->taken[i]->type_ids != NULL;
        for (int i = 0; i < shape_b; i++) {
            sl->offsets[i] = off;
            if (i < n) {
                struct hs_seq *q = sl->taken[i];
                memcpy(sl->ids + off, q->ids, (size_t)q->n_tokens * sizeof(int32_t));
                if (q->type_ids)
                    memcpy(sl->type_ids + off, q->type_ids, (size_t)q->n_tokens * sizeof(int32_t));
                else if (typed)
                    memset(sl->type_ids + off, 0, (size_t)q->n_tokens * sizeof(int32_t));
                sl->lengths[i] = q->n_tokens;
            } else {
                sl->ids[off] = L->o.pad_id;
                sl->type_ids[off] = 0;
                sl->lengths[i] = 1;
            }
            off += sl->lengths[i];
        }
        sl->offsets[shape_b] = off;
        *batch = (struct hs_batch){
            .n_seqs = shape_b,
            .seq_max = shape_s,
            .n_tokens = off,
            .ids = sl->ids,
            .type_ids = typed ? sl->type_ids : NULL,
            .lengths = sl->lengths,
            .offsets = sl->offsets,
        };
        batch->batch_class = n > 0;
        for (int i = 0; i < n; i++) { /* a remote engine's timeout and priority */
            if (!batch->deadline_ns || sl->taken[i]->req->deadline_ns < batch->deadline_ns)
                batch->deadline_ns = sl->taken[i]->req->deadline_ns;
            if (sl->taken[i]->req->priority != HS_PRIORITY_BATCH) batch->batch_class = 0;
        }
    }
    sl->run_b = b;
    sl->run_n = n;
    sl->run_shape_b = shape_b;
    sl->run_formed_ns = formed_ns;
    sl->run_tokens = tokens;
    sl->run_batch_id = atomic_fetch_add(&s->batch_seq, 1) + 1;
    pthread_mutex_lock(&L->mu);
    sl->run_start_ns = hs__sched_now(s);
    sl->run_paused_ns = 0;
    sl->run_pred_s = hs__lane_batch_s(L, b, (double)tokens);
    pthread_mutex_unlock(&L->mu);
}

/* Ends the slot's batch, which the engine finished at `end` with status st (t: its timing, err
 * its error): answers its requests, reports the batch, learns its cost. */
void hs__batch_end(struct slot *sl, int64_t end, hs_status st, const struct hs_batch_timing *t,
                   const struct hs_error *err)
{
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    const int b = sl->run_b, n = sl->run_n, shape_b = sl->run_shape_b, shape_s = L->shape_seq[b];
    const int64_t start = sl->run_start_ns, formed_ns = sl->run_formed_ns, tokens = sl->run_tokens;
    const uint64_t batch_id = sl->run_batch_id;
    sl->last_end_ns = end;

    int64_t copy_out_end = end;
    int64_t compute_end = end - t->copy_out_ns;
    int64_t copy_in_end = start + t->copy_in_ns;
    if (compute_end < start) compute_end = start;
    if (copy_in_end > compute_end) copy_in_end = compute_end;

    struct chain c = {NULL};
    if (st != HS_STATUS_OK) {
        if (st != HS_STATUS_SHUTDOWN)
            hs_log_error("lane %s/%s: batch %llu (%dx%d) failed: %s", L->engine, L->model,
                         (unsigned long long)batch_id, shape_b, shape_s, err->msg);
        pthread_mutex_lock(&L->mu);
        /* a runner that gave up at the deadline (a remote worker): blamed as the reaper's
         * in-batch timeouts are (hs__slot_overran) */
        bool blame = st == HS_STATUS_TIMEOUT && hs__slot_overran(sl, hs__slot_ran_s(L, sl, end));
        for (int i = 0; i < n; i++) {
            struct hs_request *r = sl->taken[i]->req;
            if (st == HS_STATUS_TIMEOUT && !atomic_load(&r->answered)) r->in_batch_timeout = blame;
            hs__lane_fail_locked(L, r, st, 0, &c, "engine %s failed: %s", L->engine,
                                 err->msg[0] ? err->msg : hs_status_str(st));
        }
        pthread_mutex_unlock(&L->mu);
        hs__chain_flush(&c);
    }
    /* Under the lane's lock, as the reaper: a request the reaper already answered (deadline
     * passed during the batch) belongs to its HTTP thread from then on, so neither its result
     * nor its times are written; and once n_taken is 0 the reaper no longer reads sl->taken,
     * whose requests may be freed by the unrefs below. */
    struct hs_request **done_reqs = sl->done;
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < n; i++) {
        struct hs_seq *q = sl->taken[i];
        struct hs_request *r = q->req;
        done_reqs[i] = r;
        if (atomic_load(&r->answered)) continue;
        if (st == HS_STATUS_OK && r->out)
            memcpy(r->out + (size_t)q->index * (size_t)L->o.dim, sl->out + (size_t)i * L->o.dim,
                   (size_t)L->o.dim * sizeof(float));
        /* A multi-sequence request keeps the times of its last batch. */
        r->ts[HS_TS_BATCHED] = formed_ns;
        if (t->hop_ns > 0)
            r->ts[HS_TS_HOP] = start + (t->hop_ns < t->copy_in_ns ? t->hop_ns : t->copy_in_ns);
        r->ts[HS_TS_COPY_IN] = copy_in_end;
        r->ts[HS_TS_COMPUTE] = compute_end;
        r->ts[HS_TS_COPY_OUT] = copy_out_end;
        r->batch_id = batch_id;
        r->n_boundaries = t->n_boundaries;
        r->wait_ns = t->wait_ns;
        for (int k = 0; k < t->n_boundaries && k < HS_BATCH_MAX_BOUNDARIES; k++) {
            r->boundary_copy_ns[k] = t->boundary_copy_ns[k];
            r->boundary_sync_ns[k] = t->boundary_sync_ns[k];
        }
    }
    sl->n_taken = 0;
    /* The batch's work is over: nothing of it can be paused, and its tenants have nothing
     * running. A request that arrives while these answers go out (its client may be one of
     * them) waits for this slot rather than taking the preempting slot for a batch that ended. */
    sl->run_tenants = 0;
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i < n; i++) {
        struct hs_request *r = done_reqs[i];
        if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&r->answered, &expect, 1)) {
                r->status = HS_STATUS_OK;
                hs__lane_check_prediction(L, r, hs__sched_now(s));
                if (r->done) r->done(r, r->ctx);
            }
            hs_request_unref(r);
        }
    }

    if (s->obs.on_batch) {
        struct hs_batch_report rep = {
            .lane = L->idx,
            .slot = sl->idx,
            .batch_id = batch_id,
            .n_seqs = n,
            .shape_batch = shape_b,
            .shape_seq = shape_s,
            .tokens = tokens,
            .padded_tokens = (int64_t)shape_b * shape_s,
            .formed_ns = formed_ns,
            .copy_in_end_ns = copy_in_end,
            .compute_end_ns = compute_end,
            .copy_out_end_ns = copy_out_end,
            .status = st,
            .n_handovers = t->n_handovers,
            .handovers = t->handovers,
        };
        s->obs.on_batch(s->obs.ctx, &rep);
    }

    pthread_mutex_lock(&L->mu);
    sl->run_start_ns = 0;
    /* preemption: the time this batch was paused, or (the preempting slot's) waited for the
     * stages in flight, is not its cost; the other slots' running batches were paused while
     * this one ran (their time left, hs__slot_ran_s) */
    const int64_t held = t->paused_ns + t->yield_wait_ns;
    const int64_t own = end - start > held ? end - start - held : 0;
    if (sl->idx == L->preempt_slot) {
        L->preempt_batches++;
        L->preempt_wait_ns += t->yield_wait_ns;
        if (t->yield_wait_ns > L->preempt_wait_max_ns) L->preempt_wait_max_ns = t->yield_wait_ns;
        for (int i = 0; i < L->n_slots; i++) {
            struct slot *o = &L->slots[i];
            const int64_t from = o->run_start_ns > start ? o->run_start_ns : start;
            if (i != sl->idx && o->run_start_ns && end > from) o->run_paused_ns += end - from;
        }
    } else if (t->paused_ns > 0) {
        L->paused_ns += t->paused_ns;
        if (t->paused_ns > L->paused_max_ns) L->paused_max_ns = t->paused_ns;
    }
    L->busy_ns += own;
    hs__lane_busy(L, (double)own * 1e-9, end);
    L->batches++;
    if (st == HS_STATUS_OK && own > 0) {
        double a = L->o.throughput_ewma_alpha;
        double x = (double)tokens / ((double)own / 1e9);
        L->throughput = L->measured ? a * x + (1.0 - a) * L->throughput : x;
        L->measured = true;
        int64_t from =
            sl->backlog_since_ns && sl->backlog_since_ns < start ? sl->backlog_since_ns : start;
        hs__lane_learn(L, b, (double)tokens, (double)(end - from - held) / 1e9);
    }
    pthread_mutex_unlock(&L->mu);
}

static void lane_run_batch(struct slot *sl, int b, int n, int64_t formed_ns)
{
    struct lane *L = sl->L;
    struct hs_batch batch;
    hs__batch_begin(sl, b, n, formed_ns, &batch);
    struct hs_batch_timing t = {0};
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = L->o.runner.run(L->o.runner.ctx, sl->idx, &batch, sl->out, &t, &err);
    hs__batch_end(sl, hs_now_ns(), st, &t, &err);
}

/* One step of a slot's batcher (lane lock held): picks the bucket due now and takes its
 * sequences into the slot, failing expired and doomed ones into c. Returns the sequences taken,
 * counted as running (0: every one failed; hand them to hs__slot_done and try again), or -1 when
 * nothing is due: the slot is no longer under a backlog and *wake is the next time something
 * may be. */
int hs__slot_take(struct slot *sl, int64_t now, bool draining, int *bucket, int64_t *wake,
                  struct chain *c)
{
    struct lane *L = sl->L;
    const bool preempting = sl->idx == L->preempt_slot;
    int b = preempting ? preempt_pick(L, now) : lane_pick(L, now, draining, wake);
    if (b < 0) {
        if (preempting) *wake = INT64_MAX; /* new work or another slot's batch wakes it */
        sl->backlog_since_ns = 0;
        return -1;
    }
    int n = preempting ? preempt_take(L, sl, b, now, c) : lane_take(L, sl, b, now, c);
    sl->n_taken = n;
    sl->run_tenants = 0;
    for (int i = 0; i < n; i++) sl->run_tenants |= 1ull << hs__tenant_slot(sl->taken[i]->req);
    L->running_seqs += n;
    L->running_batches += n > 0;
    /* the preempting slot looks at what is owed while this batch runs */
    if (n && !preempting && L->preempt_slot >= 0) pthread_cond_broadcast(&L->cv);
    *bucket = b;
    return n;
}

/* The slot's batch of n sequences is over (lane lock held): under a backlog from its end when
 * it ran one. */
void hs__slot_done(struct slot *sl, int n)
{
    struct lane *L = sl->L;
    L->running_seqs -= n;
    L->running_batches -= n > 0;
    sl->run_tenants = 0;
    sl->backlog_since_ns = n > 0 ? sl->last_end_ns : 0;
}

/* A batcher with nothing due (lane lock held): says the lane is idle when nothing is queued,
 * then sleeps until wake or new work. */
static void slot_idle_wait(struct lane *L, int64_t wake)
{
    if (!L->queued_seqs) pthread_cond_broadcast(&L->idle_cv);
    hs__cond_wait_until(&L->cv, &L->mu, wake);
}

void *hs__lane_main(void *arg)
{
    struct slot *sl = arg;
    struct lane *L = sl->L;
    struct hs_sched *s = L->s;
    const struct hs_runner *ru = &L->o.runner;
    pthread_mutex_lock(&L->mu);
    while (!L->stop) {
        int64_t now = hs_now_ns(), wake;
        struct chain c = {NULL};
        int b;
        /* a gated lane: hold its entry before forming a batch, once one is due */
        if (ru->gate && !sl->gated) {
            if (lane_pick(L, now, atomic_load(&s->draining), &wake) < 0) {
                sl->backlog_since_ns = 0;
                slot_idle_wait(L, wake);
                continue;
            }
            pthread_mutex_unlock(&L->mu);
            ru->gate(ru->ctx, sl->idx);
            pthread_mutex_lock(&L->mu);
            sl->gated = true;
            continue; /* what is due may have grown, or gone to another slot, meanwhile */
        }
        int n = hs__slot_take(sl, now, atomic_load(&s->draining), &b, &wake, &c);
        if (n < 0) {
            if (sl->gated) { /* nothing left to form: the entry goes to the next slot */
                sl->gated = false;
                pthread_mutex_unlock(&L->mu);
                ru->ungate(ru->ctx, sl->idx);
                pthread_mutex_lock(&L->mu);
                continue;
            }
            slot_idle_wait(L, wake);
            continue;
        }
        const bool run = n > 0;
        if (run) sl->gated = false; /* the run takes the entry over */
        pthread_mutex_unlock(&L->mu);
        hs__chain_flush(&c);
        if (run) lane_run_batch(sl, b, n, now);
        pthread_mutex_lock(&L->mu);
        hs__slot_done(sl, n);
    }
    if (sl->gated) {
        sl->gated = false;
        pthread_mutex_unlock(&L->mu);
        ru->ungate(ru->ctx, sl->idx);
        pthread_mutex_lock(&L->mu);
    }
    pthread_cond_broadcast(&L->idle_cv);
    pthread_mutex_unlock(&L->mu);
    return NULL;
}
