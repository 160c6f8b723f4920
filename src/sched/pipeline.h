/* hetserve — pipelines: named stages in order, a bounded queue in front of each, its own worker
 * threads and batch shape per stage (shared/DESIGN.md: "a pipeline is the same journey once per
 * stage, with a bounded queue between stages").
 *
 * An item (a request's state: for OCR a struct hs_op_data) is submitted to the first stage's
 * queue — or refused at once with HS_STATUS_OVERLOADED when that queue is full (admission) —
 * and goes through the stages in order. A stage's worker takes up to batch_max items from its
 * queue (waiting up to window_us for more once it has one), runs the stage's function on them at
 * once, and moves each to the next queue; when that queue is full the worker waits for room
 * (backpressure: a slow stage fills the queue before it, and then the one before that, until
 * admission refuses). An item ends — done() is called exactly once for it — when the last stage
 * has run it, when a stage fails it (its own status and message), when its deadline passes while
 * it waits in a queue (HS_STATUS_TIMEOUT, naming the stage), or at shutdown (HS_STATUS_SHUTDOWN
 * for what was still queued, after the batches in flight finish).
 *
 * A stage may have a timeout (timeout_us): an item that waited in its queue past it, or whose
 * batch ran past it, is failed over (below) or ended with HS_STATUS_TIMEOUT naming the stage. A
 * stage may have a fallback: a second function (the same step on another engine) with its own
 * queue and workers. An item entering the stage goes to the fallback instead when the primary is
 * overloaded (its queue full, or its predicted wait — queued batches x the recent batch time —
 * over the timeout) or its breaker is open (its last batches all failed), and an item the primary
 * failed or timed out is retried there, but only while the fallback's share of the stage's recent
 * items (a sliding count of the last HS_PIPELINE_CAP_WINDOW, hs_pipeline_cap) stays within
 * ratio_max; beyond it an overloaded item is refused with HS_STATUS_OVERLOADED (a capacity refusal,
 * 429), a timed-out one ends with HS_STATUS_TIMEOUT, a failed one with its own error. A stage
 * without a fallback waits for room instead (backpressure).
 *
 * A stage may be routed over several engines at once (routes: one function, context, workers
 * and batch_max each, e.g. the same graph on two devices or in two precisions): each route has
 * its own queue and workers, and an item entering the stage joins the route whose breaker admits
 * it and whose queue has room with the earliest predicted completion (policy predicted: its
 * queued batches and the rest of its running ones, per worker, from a cost line of its batch time
 * against the work its batch held, sched/costline.h, learned from the batches it ran: units, 1 an
 * item unless the stage's units() says, e.g. an OCR request's text crops; a route not yet
 * measured predicts 0, so each gets batches from the start; ties take turns) or in turn (policy
 * round_robin). A route whose last HS_PIPELINE_BREAKER_FAILS batches all failed is skipped while
 * another is not. The fallback is taken when no route can take the item (every one full,
 * overloaded or with its breaker open) and for what a route failed or timed out.
 *
 * Per stage the pipeline counts items in, out and failed, batches and their sizes, the time items
 * waited in its queue and the time its function ran, failovers, refusals and timeouts, and per
 * route its items, work, batches, run time, queue, breaker and predicted batch time
 * (hs_pipeline_stage_stats).
 * Thread-safety: submit, stats and destroy may be called from any thread.
 */
#ifndef HS_SCHED_PIPELINE_H
#define HS_SCHED_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#define HS_PIPELINE_MAX_STAGES 16
#define HS_PIPELINE_MAX_BATCH  64
#define HS_PIPELINE_CAP_WINDOW 100 /* recent items the fallback share is counted over */
#define HS_PIPELINE_MAX_ROUTES 4   /* engines one stage is routed over at most */
#define HS_PIPELINE_COST_ALPHA 0.2 /* a route's cost line: the newest batch's weight */
/* A primary with a fallback whose last HS_PIPELINE_BREAKER_FAILS batches all failed is open for
 * HS_PIPELINE_BREAKER_OPEN_MS: items go to the fallback (under the cap) without trying it. */
#define HS_PIPELINE_BREAKER_FAILS   3
#define HS_PIPELINE_BREAKER_OPEN_MS 1000

/* The fallback cap: a sliding count of the stage's last `window` items run (by the primary when
 * its batch forms, by the fallback when sent there) and which of them went to the fallback. admits:
 * would one more fallback item keep the share within ratio_max (the share after recording it, the
 * oldest item dropped when the window is full)? */
struct hs_pipeline_cap {
    double ratio_max;
    int window, n, head, fb;
    unsigned char hist[HS_PIPELINE_CAP_WINDOW];
};
void hs_pipeline_cap_init(struct hs_pipeline_cap *c, double ratio_max, int window);
bool hs_pipeline_cap_admits(const struct hs_pipeline_cap *c);
void hs_pipeline_cap_record(struct hs_pipeline_cap *c, bool fallback);
double hs_pipeline_cap_share(const struct hs_pipeline_cap *c);

/* A stage's function: runs items[0..n) (n <= batch_max) and sets st[i] (HS_STATUS_OK, or the
 * item's failure with its message in errs[i]). Called from the stage's workers only, one batch
 * per worker at a time. */
typedef void (*hs_pipeline_stage_fn)(void *ctx, void **items, int n, hs_status *st,
                                     struct hs_error *errs);

/* How a routed stage places an item on its routes. */
enum hs_pipeline_policy {
    HS_PIPELINE_PREDICTED,   /* the earliest predicted completion */
    HS_PIPELINE_ROUND_ROBIN, /* in turn */
};

/* One route of a stage: its function on its engine, with its own workers and batch shape. */
struct hs_pipeline_route {
    const char *name; /* for stats and metrics (the engine's name) */
    hs_pipeline_stage_fn run;
    void *ctx;
    int workers;   /* threads; 0 = the stage's workers */
    int batch_max; /* items per run; 0 = the stage's batch_max */
};

struct hs_pipeline_stage {
    const char *name;
    hs_pipeline_stage_fn run;
    void *ctx;
    int workers;        /* threads (>= 1) */
    int queue_max;      /* items waiting in front of the stage (>= 1) */
    int batch_max;      /* items per run, 1 .. HS_PIPELINE_MAX_BATCH */
    int64_t window_us;  /* with one item in hand, wait this long for more (0: run at once) */
    int64_t timeout_us; /* an item's wait in the queue, or its batch's run, at most; 0 = none */
    hs_pipeline_stage_fn fallback; /* NULL = none */
    void *fallback_ctx;
    int fallback_workers; /* 0 = 1 */
    double ratio_max;     /* the fallback's share of recent items at most, (0, 1] */
    /* routed: n_routes > 0 puts the stage on routes[] instead of run / ctx / workers */
    int n_routes;
    struct hs_pipeline_route routes[HS_PIPELINE_MAX_ROUTES];
    enum hs_pipeline_policy policy;
    /* an item's work in the routes' cost lines (an OCR request's text crops); NULL = 1 each */
    double (*units)(const void *item);
};

/* Called once per item, from a stage's worker (or from destroy); must not block for long. */
typedef void (*hs_pipeline_done_fn)(void *ctx, void *item, hs_status s, const struct hs_error *err);

struct hs_pipeline;

hs_status hs_pipeline_create(const struct hs_pipeline_stage *stages, int n_stages,
                             hs_pipeline_done_fn done, void *done_ctx, struct hs_pipeline **out,
                             struct hs_error *err);
/* Admits item (deadline_ns on the hs_now_ns clock, 0 = none). HS_STATUS_OVERLOADED when the first
 * stage's queue is full, HS_STATUS_SHUTDOWN after destroy began: done() is then not called. */
hs_status hs_pipeline_submit(struct hs_pipeline *p, void *item, int64_t deadline_ns,
                             struct hs_error *err);
/* Finishes the batches in flight, answers what is queued HS_STATUS_SHUTDOWN, stops the workers. */
void hs_pipeline_destroy(struct hs_pipeline *p);

/* the upper bounds of the per-item stage latency histogram, seconds (and +Inf after them) */
#define HS_PIPELINE_LAT_BUCKETS 12
extern const double hs_pipeline_lat_bounds[HS_PIPELINE_LAT_BUCKETS];

struct hs_pipeline_stage_stats {
    int queued;           /* now */
    int64_t items_in;     /* taken from the queue to run */
    int64_t items_out;    /* passed on (or finished, last stage) */
    int64_t items_failed; /* failed by the stage, or timed out waiting for it */
    int64_t batches;
    int64_t batch_items;   /* sum of batch sizes (mean = batch_items / batches) */
    int batch_size_max;    /* largest batch formed */
    int64_t queue_ns;      /* time items waited in the queue, summed */
    int64_t run_ns;        /* time the function ran, summed over batches */
    int queued_fallback;   /* now, in front of the fallback */
    int64_t failovers;     /* items sent to the fallback (overload, failure or timeout) */
    int64_t refused;       /* overloaded items refused at the cap (HS_STATUS_OVERLOADED) */
    int64_t timeouts;      /* items ended HS_STATUS_TIMEOUT by the stage's timeout or deadline */
    double fallback_share; /* of the last HS_PIPELINE_CAP_WINDOW items */
    int breaker_open;      /* now: the primary's (every route's) last batches all failed */
    /* items the stage ran, by the time from entering its queue to the end of their batch's run
     * (lat[i]: at most hs_pipeline_lat_bounds[i] and over the one before; the last: over all) */
    int64_t lat[HS_PIPELINE_LAT_BUCKETS + 1];
    int64_t lat_ns;                                /* their sum */
    int64_t batch_hist[HS_PIPELINE_MAX_BATCH + 1]; /* batches by size */
    /* per route (one for a stage that is not routed; the fallback is not one of them) */
    int n_routes;
    struct hs_pipeline_route_stats {
        int queued;       /* now */
        int64_t items;    /* items its batches ran */
        int64_t batches;  /* batches it ran */
        int64_t run_ns;   /* their run time, summed */
        int breaker_open; /* now */
        double units;     /* the work of those items (units) */
        double batch_s; /* its cost line's prediction of a full batch of mean items (0: none yet) */
    } route[HS_PIPELINE_MAX_ROUTES];
};
void hs_pipeline_stage_stats(struct hs_pipeline *p, int stage, struct hs_pipeline_stage_stats *out);
int hs_pipeline_stage_count(const struct hs_pipeline *p);
/* A capacity hint for a refusal (Retry-After): seconds until the busiest stage's primary has run
 * what waits for it, by its recent batch time; 0 when nothing waits. */
double hs_pipeline_retry_after_s(struct hs_pipeline *p);
const char *hs_pipeline_stage_name(const struct hs_pipeline *p, int stage);
/* The name of a stage's route k (NULL past its routes; "" for an unnamed one). */
const char *hs_pipeline_route_name(const struct hs_pipeline *p, int stage, int k);

#endif
