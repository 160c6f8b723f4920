/* hetserve — the cascade policy (see cascade.h for the contract). */
#include "sched/cascade.h"

#include <string.h>

hs_status hs_cascade_init(struct hs_cascade *c, const struct hs_cascade_opts *opts,
                          struct hs_error *err)
{
    if (!c || !opts) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "cascade: NULL argument");
    if (!(opts->threshold > 0.0 && opts->threshold <= 1.0))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cascade: threshold %g is outside (0, 1]", opts->threshold);
    if (!(opts->escalation_max_ratio >= 0.0 && opts->escalation_max_ratio <= 1.0))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "cascade: escalation_max_ratio %g is outside [0, 1]",
                            opts->escalation_max_ratio);
    memset(c, 0, sizeof *c);
    c->opts = *opts;
    pthread_mutex_init(&c->mu, NULL);
    return HS_STATUS_OK;
}

void hs_cascade_destroy(struct hs_cascade *c)
{
    if (c) pthread_mutex_destroy(&c->mu);
}

enum hs_cascade_decision hs_cascade_decide(struct hs_cascade *c, double confidence)
{
    enum hs_cascade_decision d = HS_CASCADE_SMALL;
    pthread_mutex_lock(&c->mu);
    c->stats.decisions++;
    /* NaN confidence (cannot come from a softmax) counts as unsure */
    if (!(confidence >= c->opts.threshold)) {
        /* integer-exact at ratio 1: escalated + 1 <= decisions always holds */
        if ((double)(c->stats.escalated + 1) <=
            c->opts.escalation_max_ratio * (double)c->stats.decisions + 1e-9) {
            c->stats.escalated++;
            d = HS_CASCADE_BIG;
        } else {
            c->stats.capped++;
            d = HS_CASCADE_CAPPED;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return d;
}

void hs_cascade_stats(struct hs_cascade *c, struct hs_cascade_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

const char *hs_cascade_decision_name(enum hs_cascade_decision d)
{
    switch (d) {
    case HS_CASCADE_SMALL:
        return "small";
    case HS_CASCADE_BIG:
        return "big";
    case HS_CASCADE_CAPPED:
        return "capped";
    }
    return "?";
}
