/* hetserve — the cascade policy: small model first, the big one only when the small one is
 * unsure.
 *
 * For every input the small model's classifier gives a confidence (its top class probability).
 * hs_cascade_decide turns it into one of three answers:
 *   HS_CASCADE_SMALL    confidence >= threshold: the small model's answer stands;
 *   HS_CASCADE_BIG      confidence <  threshold: send the input on to the big model;
 *   HS_CASCADE_CAPPED   confidence <  threshold, but escalating would raise the share of
 *                       escalated inputs above escalation_max_ratio (escalated + 1 >
 *                       ratio * decisions, this one included): the small answer stands and the
 *                       input is counted as capped.
 * The cap is a running ratio over every decision since creation (or the last reset), so it
 * bounds the big model's share of the load at any point, not just on average.
 *
 * This is policy only (no models, no queues) and the only cascade policy: the /predict path's
 * judge decides with it, and the router runs that judge for requests on its CASCADE routes too
 * (hs_router_judge, sched/router.h). Thread-safe.
 */
#ifndef HS_SCHED_CASCADE_H
#define HS_SCHED_CASCADE_H

#include <pthread.h>
#include <stdint.h>

#include "core/status.h"

enum hs_cascade_decision { HS_CASCADE_SMALL, HS_CASCADE_BIG, HS_CASCADE_CAPPED };

struct hs_cascade_opts {
    double threshold;            /* (0, 1]: escalate below this confidence */
    double escalation_max_ratio; /* [0, 1]: share of inputs that may escalate; 1 = no cap */
};

struct hs_cascade_stats {
    int64_t decisions; /* inputs decided */
    int64_t escalated; /* sent to the big model */
    int64_t capped;    /* would have escalated, kept small by the cap */
};

struct hs_cascade {
    struct hs_cascade_opts opts;
    pthread_mutex_t mu;
    struct hs_cascade_stats stats;
};

/* Initializes c. HS_STATUS_INVALID_ARGUMENT (with a message) for out-of-range options. */
hs_status hs_cascade_init(struct hs_cascade *c, const struct hs_cascade_opts *opts,
                          struct hs_error *err);
void hs_cascade_destroy(struct hs_cascade *c);

/* Decides one input from the small model's confidence and counts it. Thread-safe. */
enum hs_cascade_decision hs_cascade_decide(struct hs_cascade *c, double confidence);

/* Thread-safe snapshot of the counters. */
void hs_cascade_stats(struct hs_cascade *c, struct hs_cascade_stats *out);

/* "small", "big" or "capped". */
const char *hs_cascade_decision_name(enum hs_cascade_decision d);

#endif
