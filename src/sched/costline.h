/* hetserve — a batch cost line: seconds of one batch against the work it holds (tokens for a
 * scheduler lane's bucket, items for a pipeline stage's engine), fitted online by weighted least
 * squares over the batches that ran, older ones decaying. The service-time model of the
 * scheduler's lanes (svcmodel.c) and the predicted completion of a pipeline stage's engines
 * (pipeline.c) both learn and predict with it. Not thread-safe: the owner's lock guards it. */
#ifndef HS_SCHED_COSTLINE_H
#define HS_SCHED_COSTLINE_H

#include <stdbool.h>

struct hs_cost_line {
    double w, sp, st, spp, spt; /* sums of weights, P, T, P^2, P*T */
    double fixed_s, per_unit_s; /* a batch of P units: fixed_s + per_unit_s x P seconds */
    bool measured;
};

/* Learns from a batch of `units` that took t seconds; alpha: the weight of the newest batch
 * (older ones keep 1 - alpha). One observation moves the line at most to 8x its prediction, so a
 * single stalled batch cannot make the owner look hopeless; a lasting slowdown is still learned
 * within a few batches. */
void hs_cost_line_learn(struct hs_cost_line *f, double units, double t, double alpha);
/* Sets the line from two observations of weight 1/2 each (the first real batch outweighs them). */
void hs_cost_line_seed(struct hs_cost_line *f, double units1, double t1, double units2, double t2);
/* Predicted seconds of `batches` batches holding `units` in all (0 until measured). */
double hs_cost_line_s(const struct hs_cost_line *f, int batches, double units);
/* Predicted seconds left of a batch predicted at pred_s that has run ran_s: the rest of its
 * prediction; one past its prediction (a slow or hung engine) is assumed to need as long again,
 * but only once its owner has measured a batch (before, the prediction is trusted: 0 left). */
static inline double hs_cost_running_left_s(double pred_s, double ran_s, bool measured)
{
    return ran_s < pred_s ? pred_s - ran_s : measured ? ran_s : 0;
}

#endif
