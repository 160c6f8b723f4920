/* The service-time model: each bucket's batch cost line, learned from the batches that ran,
 * the predicted completion admission and the router use, and the check of predictions against
 * what happened (sched.h). */
#include "sched/sched-impl.h"

#include <math.h>
#include <pthread.h>

/* Predicted seconds of one batch of P real tokens from bucket b (lock held). Until the bucket
 * has run a batch, the lane's overall throughput (or the configured initial one) stands in.
 * Real tokens, not padded ones: the CPU engine computes ragged batches, and for an engine that
 * pads, a bucket's real and padded tokens differ by a steady factor the fit absorbs. */
double hs__lane_batch_s(const struct lane *L, int b, double tokens)
{
    const struct hs_cost_line *f = &L->fit[b];
    if (f->measured) return hs_cost_line_s(f, 1, tokens);
    return L->throughput > 0 ? tokens / L->throughput : 0.0;
}

/* Learns from a batch of P real tokens that took t seconds (lock held): the bucket's cost line. */
void hs__lane_learn(struct lane *L, int b, double padded, double t)
{
    hs_cost_line_learn(&L->fit[b], padded, t, L->o.throughput_ewma_alpha);
}

/* ---- the cost line (costline.h) ---- */

static void fit_solve(struct hs_cost_line *f);

void hs_cost_line_learn(struct hs_cost_line *f, double units, double t, double alpha)
{
    if (f->measured) {
        double pred = f->fixed_s + f->per_unit_s * units;
        if (pred > 0 && t > 8 * pred) t = 8 * pred;
        double keep = 1.0 - alpha;
        f->w *= keep;
        f->sp *= keep;
        f->st *= keep;
        f->spp *= keep;
        f->spt *= keep;
    }
    f->w += 1;
    f->sp += units;
    f->st += t;
    f->spp += units * units;
    f->spt += units * t;
    f->measured = true;
    fit_solve(f);
}

void hs_cost_line_seed(struct hs_cost_line *f, double units1, double t1, double units2, double t2)
{
    f->w = 1;
    f->sp = 0.5 * (units1 + units2);
    f->st = 0.5 * (t1 + t2);
    f->spp = 0.5 * (units1 * units1 + units2 * units2);
    f->spt = 0.5 * (units1 * t1 + units2 * t2);
    f->measured = true;
    fit_solve(f);
}

double hs_cost_line_s(const struct hs_cost_line *f, int batches, double units)
{
    return f->measured ? batches * f->fixed_s + f->per_unit_s * units : 0;
}

/* The line through the fit's weighted sums. */
static void fit_solve(struct hs_cost_line *f)
{
    /* slope and intercept, when the batch sizes seen vary by more than ~10 % */
    double mean_p = f->sp / f->w, mean_t = f->st / f->w;
    double var_p = f->spp / f->w - mean_p * mean_p;
    double cov = f->spt / f->w - mean_p * mean_t;
    if (var_p > 0.01 * mean_p * mean_p && cov > 0) {
        double slope = cov / var_p, icept = mean_t - slope * mean_p;
        if (icept >= 0) {
            f->per_unit_s = slope;
            f->fixed_s = icept;
            return;
        }
    }
    f->fixed_s = 0;
    f->per_unit_s = f->sp > 0 ? f->st / f->sp : 0;
}

/* Predicted seconds to run n sequences of bucket b holding `tokens` real tokens, in the batches
 * the batcher cuts them into (at most cap_seqs each). */
static double lane_bucket_s(const struct lane *L, int b, int n, int64_t tokens)
{
    if (n <= 0) return 0;
    int batches = (n + L->cap_seqs[b] - 1) / L->cap_seqs[b];
    const struct hs_cost_line *f = &L->fit[b];
    if (f->measured) return hs_cost_line_s(f, batches, (double)tokens);
    return hs__lane_batch_s(L, b, (double)tokens);
}

/* Predicted seconds until the work queued at priorities <= upto, plus own[b] more sequences per
 * bucket (own may be NULL), and the running batches are done, the slots sharing it (lock held).
 * A request of its own also waits for its batch to form: the batching window, unless its bucket
 * will hold a full batch or the batch will not wait for it (lane_pick): a lane of one slot forms
 * it when the batch ahead ends (counted as running), an idle lane at once; only a free slot of
 * a busy lane gathers (always with batch_window_when_idle). */
double hs__lane_backlog_s(const struct lane *L, int upto, double upto_tag, const int *own,
                          const int64_t *own_tokens, int64_t now)
{
    double queued = 0, running = 0, window = 0;
    const int slots = hs__lane_work_slots(L);
    const bool waits = L->o.batch_window_when_idle || (slots > 1 && L->running_batches);
    for (int b = 0; b < L->n_buckets; b++) {
        int n = own ? own[b] : 0;
        int64_t tokens = own ? own_tokens[b] : 0;
        for (int p = 0; p <= upto && p < HS_PRIORITY_COUNT; p++) {
            n += L->q[p][b].n;
            tokens += L->q[p][b].tokens;
        }
        /* fair order: what is queued at its own priority after upto_tag runs after it */
        if (upto >= 0 && upto < HS_PRIORITY_COUNT)
            for (const struct hs_seq *q = L->q[upto][b].tail; q && q->tag > upto_tag; q = q->prev) {
                n--;
                tokens -= q->n_tokens;
            }
        queued += lane_bucket_s(L, b, n, tokens);
        if (waits && own && own[b] && n % L->cap_seqs[b]) window = L->o.batch_window_us * 1e-6;
    }
    for (int i = 0; i < L->n_slots; i++) {
        const struct slot *sl = &L->slots[i];
        if (!sl->run_start_ns) continue;
        /* before the lane's first measurement the configured initial speed is trusted; a
         * paused batch's time paused is not its progress (the preempting batch's time left is
         * counted as its own slot's) */
        running += hs_cost_running_left_s(sl->run_pred_s, hs__slot_ran_s(L, sl, now), L->measured);
    }
    return ((queued + running) / slots + window) * atomic_load(&L->pred_bias);
}

/* Predicted seconds until r is answered when the preempting slot will take it (lock held): its
 * tenant has nothing in the batches running, its tag (tag) is owed in each of its buckets, and
 * another slot's batch runs; -1 otherwise. Then it waits for the owed work queued ahead of it
 * (the preempting slot's batches), the preempting batch running, and the stage in flight (the
 * mean wait measured), not for the batches it preempts. */
static double lane_preempt_predict(const struct lane *L, const struct hs_request *r, int upto,
                                   double tag, const int *own, const int64_t *own_tokens,
                                   int64_t now)
{
    if (L->preempt_slot < 0 || !L->running_batches) return -1;
    uint64_t running = 0;
    for (int i = 0; i < L->n_slots; i++)
        if (i != L->preempt_slot) running |= L->slots[i].run_tenants;
    if (!running || (running >> hs__tenant_slot(r) & 1)) return -1;
    double s = 0, need_s = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        if (!own[b]) continue;
        const double until = L->vtime + (double)L->cap_seqs[b] * L->bucket_len[b];
        if (tag > until) return -1;
        need_s += hs__lane_batch_s(L, b, (double)own_tokens[b]);
        int n = own[b];
        int64_t tokens = own_tokens[b];
        for (int p = 0; p <= upto && p < HS_PRIORITY_COUNT; p++)
            for (const struct hs_seq *q = L->q[p][b].head; q && q->tag <= tag; q = q->next)
                if (!(running >> hs__tenant_slot(q->req) & 1)) {
                    n++;
                    tokens += q->n_tokens;
                }
        s += lane_bucket_s(L, b, n, tokens);
    }
    if (!hs__lane_preemptible(L, need_s, now)) return -1;
    const struct slot *ps = &L->slots[L->preempt_slot];
    if (ps->run_start_ns)
        s += hs_cost_running_left_s(ps->run_pred_s, hs__slot_ran_s(L, ps, now), L->measured);
    if (L->preempt_batches) s += (double)L->preempt_wait_ns / 1e9 / (double)L->preempt_batches;
    return s * atomic_load(&L->pred_bias);
}

const double hs_sched_pred_bounds[HS_SCHED_PRED_BUCKETS] = {0.25, 0.5, 0.8, 1.25, 2, 4};

/* Compares an answered request's time in the scheduler with what admission predicted. */
void hs__lane_check_prediction(struct lane *L, const struct hs_request *r, int64_t now)
{
    if (r->predicted_s <= 0 || !r->ts[HS_TS_ENQUEUED]) return;
    double ratio = (double)(now - r->ts[HS_TS_ENQUEUED]) / 1e9 / r->predicted_s;
    if (ratio <= 0) return;
    /* the bias learns from the raw model's error: observed / (predicted / bias used) */
    double raw = ratio * r->predicted_bias, b = atomic_load(&L->pred_bias), nb;
    do {
        nb = b + 0.02 * (raw - b);
        nb = nb < 0.5 ? 0.5 : nb > 4 ? 4 : nb;
    } while (!atomic_compare_exchange_weak(&L->pred_bias, &b, nb));
    int i = 0;
    while (i < HS_SCHED_PRED_BUCKETS && ratio > hs_sched_pred_bounds[i]) i++;
    atomic_fetch_add(&L->pred_hist[i], 1);
    double x = fabs(log(ratio)), cur = atomic_load(&L->pred_log_abs_sum);
    while (!atomic_compare_exchange_weak(&L->pred_log_abs_sum, &cur, cur + x)) {
    }
}

/* Predicted seconds until r would be answered on L (lock held); -1 when it does not fit. */
double hs__lane_predict_locked(const struct lane *L, const struct hs_request *r, bool over,
                               int64_t now)
{
    int own[HS_SCHED_MAX_BUCKETS] = {0};
    int64_t own_tokens[HS_SCHED_MAX_BUCKETS] = {0};
    for (int i = 0; i < r->n_seqs; i++) {
        int len = r->seqs[i].n_tokens;
        int b = len >= 1 && len <= L->o.seq_max ? hs__lane_bucket_of(L, len) : -1;
        if (b < 0) return -1;
        own[b]++;
        own_tokens[b] += len;
    }
    int upto = (unsigned)r->priority < HS_PRIORITY_COUNT ? (int)r->priority : 0;
    /* on a fair lane, what its tenant's share puts ahead of it: the work up to its tag */
    double upto_tag = L->o.fair ? hs__lane_tag_of(L, r, over) : INFINITY;
    double pre = lane_preempt_predict(L, r, upto, upto_tag, own, own_tokens, now);
    if (pre >= 0) return pre;
    return hs__lane_backlog_s(L, upto, upto_tag, own, own_tokens, now);
}

double hs_sched_lane_predict(struct hs_sched *s, int lane, const struct hs_request *r, bool *fits)
{
    if (lane < 0 || lane >= s->n) {
        if (fits) *fits = false;
        return 0;
    }
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    const int64_t now = hs__sched_now(s);
    double w = hs__lane_predict_locked(L, r, hs__lane_over_share(L, r, now), now);
    pthread_mutex_unlock(&L->mu);
    if (fits) *fits = w >= 0;
    return w < 0 ? 0 : w;
}

hs_status hs_sched_lane_seed(struct hs_sched *s, int lane, int seq_len, double tokens1, double t1_s,
                             double tokens2, double t2_s)
{
    if (lane < 0 || lane >= s->n || !(tokens1 > 0) || !(tokens2 > tokens1) || !(t1_s > 0) ||
        !(t2_s > 0))
        return HS_STATUS_INVALID_ARGUMENT;
    struct lane *L = s->lanes[lane];
    int b = 0;
    while (b < L->n_buckets && L->bucket_len[b] != seq_len) b++;
    if (b == L->n_buckets) return HS_STATUS_NOT_FOUND;
    pthread_mutex_lock(&L->mu);
    hs_cost_line_seed(&L->fit[b], tokens1, t1_s, tokens2, t2_s);
    pthread_mutex_unlock(&L->mu);
    return HS_STATUS_OK;
}

void hs_sched_lane_fit(struct hs_sched *s, int lane, int seq_len, double *fixed_s,
                       double *per_token_s)
{
    *fixed_s = *per_token_s = 0;
    if (lane < 0 || lane >= s->n) return;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    for (int b = 0; b < L->n_buckets; b++)
        if (L->bucket_len[b] == seq_len && L->fit[b].measured) {
            *fixed_s = L->fit[b].fixed_s;
            *per_token_s = L->fit[b].per_unit_s;
        }
    pthread_mutex_unlock(&L->mu);
}

double hs_sched_lane_drain_s(struct hs_sched *s, int lane)
{
    if (lane < 0 || lane >= s->n) return 0;
    struct lane *L = s->lanes[lane];
    pthread_mutex_lock(&L->mu);
    double w = hs__lane_backlog_s(L, HS_PRIORITY_COUNT - 1, INFINITY, NULL, NULL, hs__sched_now(s));
    pthread_mutex_unlock(&L->mu);
    return w;
}
