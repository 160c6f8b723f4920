/* Stepped mode: the same scheduler driven by a discrete-event simulation (sched.h). */
#include "sched/sched-impl.h"

#include <pthread.h>

void hs_sched_step_clock(struct hs_sched *s, int64_t now_ns)
{
    if (s->stepped && now_ns > s->step_now) s->step_now = now_ns;
}

bool hs_sched_step_begin(struct hs_sched *s, struct hs_sched_step *out, int64_t *wake)
{
    *wake = INT64_MAX;
    if (!s->stepped) return false;
    const int64_t now = s->step_now;
    const bool draining = atomic_load(&s->draining);
    for (int i = 0; i < s->n; i++) {
        struct lane *L = s->lanes[i];
        const struct hs_runner *ru = &L->o.runner;
        for (int k = 0; k < L->n_slots; k++) {
            struct slot *sl = &L->slots[k];
            if (sl->stepping) continue;
            /* a gated lane forms a batch only when one could start now: the simulation says
             * when its entry frees (an event, after which this is asked again) */
            if (ru->gate_open && !ru->gate_open(ru->ctx)) break;
            /* as a batcher thread's loop (hs__lane_main) */
            for (;;) {
                int64_t due;
                struct chain c = {NULL};
                int b;
                pthread_mutex_lock(&L->mu);
                int n = hs__slot_take(sl, now, draining, &b, &due, &c);
                if (n == 0) hs__slot_done(sl, 0);
                pthread_mutex_unlock(&L->mu);
                hs__chain_flush(&c);
                if (n < 0) {
                    if (due < *wake) *wake = due;
                    break;
                }
                if (n == 0) continue;
                struct hs_batch batch;
                hs__batch_begin(sl, b, n, now, &batch);
                sl->stepping = true;
                *out = (struct hs_sched_step){
                    .lane = i,
                    .slot = k,
                    .n_seqs = n,
                    .shape_batch = sl->run_shape_b,
                    .shape_seq = L->shape_seq[b],
                    .tokens = sl->run_tokens,
                    .predicted_s = sl->run_pred_s,
                };
                return true;
            }
        }
    }
    return false;
}

void hs_sched_step_end(struct hs_sched *s, int lane, int slot, hs_status st,
                       const struct hs_batch_timing *t)
{
    if (!s->stepped || lane < 0 || lane >= s->n) return;
    struct lane *L = s->lanes[lane];
    if (slot < 0 || slot >= L->n_slots || !L->slots[slot].stepping) return;
    struct slot *sl = &L->slots[slot];
    struct hs_error err;
    hs_error_clear(&err);
    if (st != HS_STATUS_OK) hs_error_set(&err, st, "simulated failure");
    sl->stepping = false;
    const int n = sl->run_n;
    hs__batch_end(sl, s->step_now, st, t ? t : &(struct hs_batch_timing){0}, &err);
    pthread_mutex_lock(&L->mu);
    hs__slot_done(sl, n);
    pthread_mutex_unlock(&L->mu);
}

int64_t hs_sched_step_reap(struct hs_sched *s)
{
    int64_t next = INT64_MAX;
    for (int i = 0; s->stepped && i < s->n; i++) {
        struct chain c = {NULL};
        int64_t t = hs__lane_reap(s->lanes[i], s->step_now, &c);
        hs__chain_flush(&c);
        if (t < next) next = t;
    }
    return next;
}
