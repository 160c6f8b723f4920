/* Pipelines of stages with bounded queues (see pipeline.h). */
#include "sched/pipeline.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/costline.h"

const double hs_pipeline_lat_bounds[HS_PIPELINE_LAT_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

/* ---- the fallback cap ---- */

void hs_pipeline_cap_init(struct hs_pipeline_cap *c, double ratio_max, int window)
{
    memset(c, 0, sizeof *c);
    c->ratio_max = ratio_max;
    c->window = window < 1 ? 1 : window > HS_PIPELINE_CAP_WINDOW ? HS_PIPELINE_CAP_WINDOW : window;
}

bool hs_pipeline_cap_admits(const struct hs_pipeline_cap *c)
{
    const int full = c->n == c->window;
    const int n_after = full ? c->n : c->n + 1;
    const int fb_after = c->fb + 1 - (full ? c->hist[c->head] : 0);
    return fb_after <= c->ratio_max * n_after + 1e-9;
}

void hs_pipeline_cap_record(struct hs_pipeline_cap *c, bool fallback)
{
    if (c->n == c->window) { /* drop the oldest */
        c->fb -= c->hist[c->head];
        c->head = (c->head + 1) % c->window;
        c->n--;
    }
    c->hist[(c->head + c->n) % c->window] = fallback ? 1 : 0;
    c->n++;
    c->fb += fallback ? 1 : 0;
}

double hs_pipeline_cap_share(const struct hs_pipeline_cap *c)
{
    return c->n ? (double)c->fb / c->n : 0;
}

/* ---- stages ---- */

struct slot {
    void *item;
    int64_t deadline_ns;
    int64_t enq_ns;
    double units; /* its work in the cost line */
};

struct stage;
struct lane;

/* one worker thread of a lane and the batch it runs now */
struct worker {
    struct lane *l;
    pthread_t thread;
    int64_t t0;    /* when its batch began (0: none) */
    double pred_s; /* what the lane's cost line predicted for it */
};

/* a stage's queue and workers: lanes 0 .. n_routes-1 run its routes (one when it is not
 * routed), the lane after them its fallback */
struct lane {
    struct stage *s;
    int fb;
    const char *name;
    hs_pipeline_stage_fn run;
    void *ctx;
    int workers, batch_max;
    struct slot *ring; /* queue_max slots */
    int head, count;
    double queued_units;
    pthread_cond_t not_empty;
    struct worker *w;
    int n_threads;
    int stop;                 /* set by destroy: exit when empty */
    int64_t ewma_ns;          /* recent batch run time */
    int64_t run_t0;           /* when the batch running now began (0: none) */
    int fail_streak;          /* batches in a row that failed every item */
    int64_t open_until_ns;    /* the breaker: open until then */
    struct hs_cost_line cost; /* batch seconds against the units it held */
    struct hs_pipeline_route_stats rs;
};

struct stage {
    struct hs_pipeline_stage spec;
    struct hs_pipeline *p;
    int index;
    struct lane lane[HS_PIPELINE_MAX_ROUTES + 1];
    int n_lanes, n_routes;   /* lanes: the routes, then the fallback when there is one */
    struct lane *fb;         /* the fallback lane or NULL */
    unsigned turn;           /* round robin, and ties */
    pthread_cond_t not_full; /* room in one of its lanes */
    struct hs_pipeline_cap cap;
    struct hs_pipeline_stage_stats stats;
};

struct hs_pipeline {
    pthread_mutex_t mu; /* guards every queue, the stats and stopping */
    int n;
    struct stage st[HS_PIPELINE_MAX_STAGES];
    hs_pipeline_done_fn done;
    void *done_ctx;
    int stopping;
};

static void timespec_at(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

static void cond_init(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

/* queue operations, under p->mu */
static double units_of(const struct stage *s, const void *item)
{
    const double u = s->spec.units ? s->spec.units(item) : 1;
    return u > 0 ? u : 0;
}

static void q_push(struct lane *l, void *item, int64_t deadline_ns)
{
    const int i = (l->head + l->count) % l->s->spec.queue_max;
    l->ring[i] = (struct slot){item, deadline_ns, hs_now_ns(), units_of(l->s, item)};
    l->queued_units += l->ring[i].units;
    l->count++;
    pthread_cond_signal(&l->not_empty);
}

static struct slot q_pop(struct lane *l)
{
    struct slot x = l->ring[l->head];
    l->head = (l->head + 1) % l->s->spec.queue_max;
    l->count--;
    l->queued_units = l->count ? l->queued_units - x.units : 0;
    pthread_cond_broadcast(&l->s->not_full);
    return x;
}

static int q_full(const struct lane *l)
{
    return l->count == l->s->spec.queue_max;
}

/* Calls done() with the lock let go (it must not block for long, but may take other locks). */
static void finish_unlocked(struct hs_pipeline *p, void *item, hs_status s,
                            const struct hs_error *err)
{
    pthread_mutex_unlock(&p->mu);
    p->done(p->done_ctx, item, s, err);
    pthread_mutex_lock(&p->mu);
}

static int breaker_open(const struct lane *l)
{
    return l->open_until_ns && hs_now_ns() < l->open_until_ns;
}

/* Is route l overloaded: its queue full, or the wait it predicts (batches queued ahead, per
 * worker, times its recent batch time) over the stage's timeout? */
static int overloaded(const struct stage *s, const struct lane *l)
{
    if (q_full(l)) return 1;
    if (l->open_until_ns && hs_now_ns() < l->open_until_ns) return 1; /* breaker open */
    if (!s->spec.timeout_us) return 0;
    /* a batch running longer than the recent ones is the better guess (an engine slowing) */
    int64_t per = l->ewma_ns;
    if (l->run_t0 && hs_now_ns() - l->run_t0 > per) per = hs_now_ns() - l->run_t0;
    if (!per) return 0;
    const int64_t batches = (l->count / l->batch_max + 1 + l->workers - 1) / l->workers;
    return batches * per > s->spec.timeout_us * 1000;
}

/* Predicted seconds until one more item of `units` on route l would be done: its queued batches
 * (with the item) by its cost line, and the rest of its running ones (one past its prediction is
 * assumed to need as long again, as the scheduler's lanes do), per worker (under p->mu). */
static double predict_s(const struct lane *l, double units, int64_t now)
{
    const int items = l->count + 1;
    const int batches = (items + l->batch_max - 1) / l->batch_max;
    double t = hs_cost_line_s(&l->cost, batches, l->queued_units + units);
    for (int k = 0; k < l->n_threads; k++) {
        const struct worker *w = &l->w[k];
        if (!w->t0) continue;
        t += hs_cost_running_left_s(w->pred_s, (double)(now - w->t0) / 1e9, l->cost.measured);
    }
    return t / l->workers;
}

/* The route an item entering s joins (under p->mu): among those whose breaker admits it (all
 * when none does) and, with room (room: only those), the earliest predicted completion or the
 * next in turn; ties take turns. NULL when room and none has it. */
static struct lane *pick(struct stage *s, const void *item, int room)
{
    if (s->n_routes == 1) return !room || !q_full(&s->lane[0]) ? &s->lane[0] : NULL;
    int any_closed = 0;
    for (int k = 0; k < s->n_routes; k++) any_closed |= !breaker_open(&s->lane[k]);
    const int64_t now = hs_now_ns();
    const double units = units_of(s, item);
    struct lane *best = NULL;
    double best_t = 0;
    const unsigned start = s->turn++;
    for (int i = 0; i < s->n_routes; i++) {
        struct lane *l = &s->lane[(start + (unsigned)i) % (unsigned)s->n_routes];
        if ((any_closed && breaker_open(l)) || (room && q_full(l))) continue;
        if (s->spec.policy == HS_PIPELINE_ROUND_ROBIN) return l;
        const double t = predict_s(l, units, now);
        if (!best || t < best_t) {
            best = l;
            best_t = t;
        }
    }
    return best;
}

/* Sends an item to the fallback when the cap admits it and its queue has room (under p->mu). */
static int try_failover(struct stage *s, void *item, int64_t deadline_ns)
{
    if (!s->fb || q_full(s->fb) || !hs_pipeline_cap_admits(&s->cap)) return 0;
    hs_pipeline_cap_record(&s->cap, true);
    s->stats.failovers++;
    q_push(s->fb, item, deadline_ns);
    return 1;
}

static int queued_routes(const struct stage *s)
{
    int n = 0;
    for (int k = 0; k < s->n_routes; k++) n += s->lane[k].count;
    return n;
}

/* An item enters stage s (under p->mu), on the route pick() gives. Without a fallback: waits for
 * room in one when wait (else HS_STATUS_OVERLOADED when all are full). With one: that route
 * unless it is overloaded (or none has room), then the fallback under the cap, else refused
 * (HS_STATUS_OVERLOADED, err says why). */
static hs_status enter(struct stage *s, void *item, int64_t deadline_ns, int wait,
                       struct hs_error *err)
{
    struct lane *l = pick(s, item, 1);
    if (!s->fb) {
        if (!wait && !l)
            return hs_error_set(err, HS_STATUS_OVERLOADED, "pipeline stage %s: queue full (%d)",
                                s->spec.name, s->spec.queue_max);
        /* backpressure: at shutdown this stage's workers still drain the queues */
        while (!l) {
            pthread_cond_wait(&s->not_full, &s->p->mu);
            l = pick(s, item, 1);
        }
        q_push(l, item, deadline_ns);
        return HS_STATUS_OK;
    }
    if (l && !overloaded(s, l)) { /* counted in the cap when it runs */
        q_push(l, item, deadline_ns);
        return HS_STATUS_OK;
    }
    if (try_failover(s, item, deadline_ns)) return HS_STATUS_OK;
    s->stats.refused++;
    return hs_error_set(err, HS_STATUS_OVERLOADED,
                        "pipeline stage %s: overloaded (%d queued) and its fallback is at its "
                        "cap (%.0f%% of the last %d items, ratio_max %.2f) or full; retry later",
                        s->spec.name, queued_routes(s), 100 * hs_pipeline_cap_share(&s->cap),
                        s->cap.n, s->spec.ratio_max);
}

/* An item the primary timed out or failed: to the fallback under the cap, else ends with s/e. */
static void fail_or_failover(struct stage *s, struct lane *l, void *item, int64_t deadline_ns,
                             hs_status st, const struct hs_error *e)
{
    if (!l->fb && try_failover(s, item, deadline_ns)) return;
    s->stats.items_failed++;
    if (st == HS_STATUS_TIMEOUT) s->stats.timeouts++;
    finish_unlocked(s->p, item, st, e);
}

static void *worker(void *arg)
{
    struct worker *wk = arg;
    struct lane *l = wk->l;
    struct stage *s = l->s;
    struct hs_pipeline *p = s->p;
    struct slot batch[HS_PIPELINE_MAX_BATCH];
    void *items[HS_PIPELINE_MAX_BATCH];
    hs_status st[HS_PIPELINE_MAX_BATCH];
    struct hs_error *errs = hs_calloc(HS_PIPELINE_MAX_BATCH, sizeof *errs);
    const int64_t timeout_ns = s->spec.timeout_us * 1000;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!l->count && !l->stop) pthread_cond_wait(&l->not_empty, &p->mu);
        if (!l->count && l->stop) break;
        /* one in hand: wait up to the window for a fuller batch */
        if (s->spec.window_us > 0 && l->count < l->batch_max && !l->stop) {
            struct timespec ts;
            timespec_at(hs_now_ns() + s->spec.window_us * 1000, &ts);
            while (l->count < l->batch_max && !l->stop &&
                   pthread_cond_timedwait(&l->not_empty, &p->mu, &ts) == 0) {
            }
        }
        int n = 0;
        double units = 0;
        const int64_t now = hs_now_ns();
        while (l->count && n < l->batch_max) {
            struct slot x = q_pop(l);
            s->stats.queue_ns += now - x.enq_ns;
            if (x.deadline_ns && now > x.deadline_ns) { /* late: ends here, named */
                s->stats.items_failed++;
                s->stats.timeouts++;
                struct hs_error e;
                hs_error_set(&e, HS_STATUS_TIMEOUT, "deadline passed waiting for stage %s",
                             s->spec.name);
                finish_unlocked(p, x.item, HS_STATUS_TIMEOUT, &e);
                continue;
            }
            if (timeout_ns && now - x.enq_ns > timeout_ns) { /* the stage's own timeout */
                struct hs_error e;
                hs_error_set(&e, HS_STATUS_TIMEOUT,
                             "stage %s: waited %.1f ms in its %squeue, over its timeout_ms %.0f",
                             s->spec.name, (now - x.enq_ns) / 1e6, l->fb ? "fallback's " : "",
                             timeout_ns / 1e6);
                fail_or_failover(s, l, x.item, x.deadline_ns, HS_STATUS_TIMEOUT, &e);
                continue;
            }
            batch[n] = x;
            units += x.units;
            items[n++] = x.item;
        }
        if (!n) continue;
        s->stats.items_in += n;
        l->run_t0 = wk->t0 = hs_now_ns();
        wk->pred_s = hs_cost_line_s(&l->cost, 1, units);
        if (s->fb && !l->fb)
            for (int i = 0; i < n; i++) hs_pipeline_cap_record(&s->cap, false);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < n; i++) {
            st[i] = HS_STATUS_OK;
            if (errs) hs_error_clear(&errs[i]);
        }
        const int64_t t0 = hs_now_ns();
        if (errs) {
            l->run(l->ctx, items, n, st, errs);
        } else {
            for (int i = 0; i < n; i++) st[i] = HS_STATUS_NO_MEMORY;
        }
        const int64_t dt = hs_now_ns() - t0;
        pthread_mutex_lock(&p->mu);
        l->ewma_ns = l->ewma_ns ? (7 * l->ewma_ns + dt) / 8 : dt;
        int failed = 0;
        for (int i = 0; i < n; i++) failed += st[i] != HS_STATUS_OK;
        l->fail_streak = failed == n ? l->fail_streak + 1 : 0;
        if (s->n_lanes > 1 && !l->fb && l->fail_streak >= HS_PIPELINE_BREAKER_FAILS)
            l->open_until_ns = hs_now_ns() + HS_PIPELINE_BREAKER_OPEN_MS * 1000000LL;
        if (!l->fail_streak) l->open_until_ns = 0;
        if (!failed) hs_cost_line_learn(&l->cost, units, dt / 1e9, HS_PIPELINE_COST_ALPHA);
        l->run_t0 = wk->t0 = 0;
        l->rs.items += n;
        l->rs.units += units;
        l->rs.batches++;
        l->rs.run_ns += dt;
        s->stats.batches++;
        s->stats.batch_items += n;
        s->stats.batch_hist[n]++;
        const int64_t end = hs_now_ns();
        for (int i = 0; i < n; i++) {
            const int64_t lat = end - batch[i].enq_ns;
            int b = 0;
            while (b < HS_PIPELINE_LAT_BUCKETS && lat > hs_pipeline_lat_bounds[b] * 1e9) b++;
            s->stats.lat[b]++;
            s->stats.lat_ns += lat;
        }
        if (n > s->stats.batch_size_max) s->stats.batch_size_max = n;
        s->stats.run_ns += dt;
        struct stage *next = s->index + 1 < p->n ? &p->st[s->index + 1] : NULL;
        for (int i = 0; i < n; i++) {
            struct hs_error e;
            if (st[i] == HS_STATUS_OK && timeout_ns && dt > timeout_ns) { /* ran too long */
                hs_error_set(&e, HS_STATUS_TIMEOUT,
                             "stage %s: its batch ran %.1f ms, over its timeout_ms %.0f",
                             s->spec.name, dt / 1e6, timeout_ns / 1e6);
                s->stats.items_failed++;
                s->stats.timeouts++;
                finish_unlocked(p, items[i], HS_STATUS_TIMEOUT, &e);
                continue;
            }
            if (st[i] != HS_STATUS_OK) {
                if (errs)
                    e = errs[i];
                else
                    hs_error_set(&e, HS_STATUS_NO_MEMORY, "stage %s: out of memory", s->spec.name);
                if (!e.msg[0]) hs_error_set(&e, st[i], "stage %s failed", s->spec.name);
                fail_or_failover(s, l, items[i], batch[i].deadline_ns, st[i], &e);
                continue;
            }
            s->stats.items_out++;
            if (!next) {
                finish_unlocked(p, items[i], HS_STATUS_OK, NULL);
                continue;
            }
            if (enter(next, items[i], batch[i].deadline_ns, 1, &e)) {
                next->stats.items_failed++;
                finish_unlocked(p, items[i], HS_STATUS_OVERLOADED, &e);
            }
        }
    }
    pthread_mutex_unlock(&p->mu);
    hs_free(errs);
    return NULL;
}

/* Lane k of st: route r (r->run NULL: the fallback). */
static hs_status lane_init(struct stage *st, int k, const struct hs_pipeline_route *r,
                           struct hs_error *err)
{
    struct lane *l = &st->lane[k];
    l->s = st;
    l->fb = !r;
    l->name = r ? r->name : "fallback";
    l->run = r ? r->run : st->spec.fallback;
    l->ctx = r ? r->ctx : st->spec.fallback_ctx;
    l->workers = r ? (r->workers > 0 ? r->workers : st->spec.workers)
                   : (st->spec.fallback_workers > 0 ? st->spec.fallback_workers : 1);
    l->batch_max = r && r->batch_max > 0 ? r->batch_max : st->spec.batch_max;
    cond_init(&l->not_empty);
    st->n_lanes = k + 1;
    if (!r) st->fb = l;
    l->ring = hs_calloc((size_t)st->spec.queue_max, sizeof *l->ring);
    l->w = hs_calloc((size_t)l->workers, sizeof *l->w);
    if (!l->ring || !l->w)
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for pipeline stage %s",
                            st->spec.name);
    return HS_STATUS_OK;
}

hs_status hs_pipeline_create(const struct hs_pipeline_stage *stages, int n_stages,
                             hs_pipeline_done_fn done, void *done_ctx, struct hs_pipeline **out,
                             struct hs_error *err)
{
    *out = NULL;
    if (n_stages < 1 || n_stages > HS_PIPELINE_MAX_STAGES || !done)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "a pipeline has 1 to %d stages",
                            HS_PIPELINE_MAX_STAGES);
    for (int i = 0; i < n_stages; i++) {
        const struct hs_pipeline_stage *s = &stages[i];
        if (!s->run || s->workers < 1 || s->workers > 64 || s->queue_max < 1 ||
            s->queue_max > 1000000 || s->batch_max < 1 || s->batch_max > HS_PIPELINE_MAX_BATCH ||
            s->window_us < 0 || s->timeout_us < 0 || s->fallback_workers < 0 ||
            s->fallback_workers > 64 || (s->fallback && !(s->ratio_max > 0 && s->ratio_max <= 1)))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "pipeline stage %d (%s): needs a function, workers in [1, 64], "
                                "queue_max >= 1, batch_max in [1, %d], window_us >= 0, "
                                "timeout_us >= 0, a fallback's ratio_max in (0, 1]",
                                i, s->name ? s->name : "?", HS_PIPELINE_MAX_BATCH);
        if (s->n_routes < 0 || s->n_routes > HS_PIPELINE_MAX_ROUTES)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "pipeline stage %d (%s): 0 to %d routes", i,
                                s->name ? s->name : "?", HS_PIPELINE_MAX_ROUTES);
        for (int k = 0; k < s->n_routes; k++) {
            const struct hs_pipeline_route *r = &s->routes[k];
            if (!r->run || r->workers < 0 || r->workers > 64 || r->batch_max < 0 ||
                r->batch_max > HS_PIPELINE_MAX_BATCH)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "pipeline stage %d (%s): route %d needs a function, workers "
                                    "in [0, 64], batch_max in [0, %d]",
                                    i, s->name ? s->name : "?", k, HS_PIPELINE_MAX_BATCH);
        }
    }
    struct hs_pipeline *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a pipeline");
    pthread_mutex_init(&p->mu, NULL);
    p->done = done;
    p->done_ctx = done_ctx;
    hs_status s = HS_STATUS_OK;
    for (int i = 0; i < n_stages && !s; i++) {
        struct stage *st = &p->st[i];
        st->spec = stages[i];
        st->p = p;
        st->index = i;
        hs_pipeline_cap_init(&st->cap, stages[i].ratio_max, HS_PIPELINE_CAP_WINDOW);
        cond_init(&st->not_full);
        p->n = i + 1;
        const struct hs_pipeline_route one = {stages[i].name, stages[i].run, stages[i].ctx,
                                              stages[i].workers, stages[i].batch_max};
        st->n_routes = stages[i].n_routes ? stages[i].n_routes : 1;
        for (int k = 0; k < st->n_routes && !s; k++)
            s = lane_init(st, k, stages[i].n_routes ? &stages[i].routes[k] : &one, err);
        if (!s && stages[i].fallback) s = lane_init(st, st->n_routes, NULL, err);
    }
    for (int i = 0; i < p->n && !s; i++) {
        struct stage *st = &p->st[i];
        for (int j = 0; j < st->n_lanes && !s; j++) {
            struct lane *l = &st->lane[j];
            for (int k = 0; k < l->workers; k++) {
                l->w[k].l = l;
                if (pthread_create(&l->w[k].thread, NULL, worker, &l->w[k])) {
                    s = hs_error_set(err, HS_STATUS_INTERNAL, "cannot start pipeline stage %s",
                                     st->spec.name);
                    break;
                }
                l->n_threads++;
            }
        }
    }
    if (s) {
        hs_pipeline_destroy(p);
        return s;
    }
    *out = p;
    return HS_STATUS_OK;
}

hs_status hs_pipeline_submit(struct hs_pipeline *p, void *item, int64_t deadline_ns,
                             struct hs_error *err)
{
    pthread_mutex_lock(&p->mu);
    hs_status s = p->stopping ? hs_error_set(err, HS_STATUS_SHUTDOWN, "pipeline is shutting down")
                              : enter(&p->st[0], item, deadline_ns, 0, err);
    pthread_mutex_unlock(&p->mu);
    return s;
}

void hs_pipeline_destroy(struct hs_pipeline *p)
{
    if (!p) return;
    /* stop admission; answer what waits in front of the first stage; the stages then drain
     * the rest in order (items already past the first queue finish their journey) */
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    struct stage *s0 = &p->st[0];
    for (int j = 0; j < s0->n_lanes; j++) {
        struct lane *l = &s0->lane[j];
        while (l->ring && l->count) {
            struct slot x = q_pop(l);
            struct hs_error e;
            hs_error_set(&e, HS_STATUS_SHUTDOWN, "pipeline shut down before stage %s",
                         s0->spec.name);
            finish_unlocked(p, x.item, HS_STATUS_SHUTDOWN, &e);
        }
    }
    pthread_mutex_unlock(&p->mu);
    /* stage by stage, the primary before its fallback (it may fail items over to it): when a
     * lane's workers have exited, nothing more enters what follows */
    for (int i = 0; i < p->n; i++) {
        struct stage *st = &p->st[i];
        for (int j = 0; j < st->n_lanes; j++) {
            struct lane *l = &st->lane[j];
            pthread_mutex_lock(&p->mu);
            l->stop = 1;
            pthread_cond_broadcast(&l->not_empty);
            pthread_mutex_unlock(&p->mu);
            for (int k = 0; k < l->n_threads; k++) pthread_join(l->w[k].thread, NULL);
        }
    }
    for (int i = 0; i < p->n; i++) {
        struct stage *st = &p->st[i];
        for (int j = 0; j < st->n_lanes; j++) {
            struct lane *l = &st->lane[j];
            pthread_cond_destroy(&l->not_empty);
            hs_free(l->ring);
            hs_free(l->w);
        }
        if (st->n_lanes) pthread_cond_destroy(&st->not_full);
    }
    pthread_mutex_destroy(&p->mu);
    hs_free(p);
}

void hs_pipeline_stage_stats(struct hs_pipeline *p, int stage, struct hs_pipeline_stage_stats *out)
{
    memset(out, 0, sizeof *out);
    if (stage < 0 || stage >= p->n) return;
    pthread_mutex_lock(&p->mu);
    const struct stage *s = &p->st[stage];
    *out = s->stats;
    out->queued = queued_routes(s);
    out->queued_fallback = s->fb ? s->fb->count : 0;
    out->fallback_share = hs_pipeline_cap_share(&s->cap);
    out->breaker_open = 1;
    out->n_routes = s->n_routes;
    for (int k = 0; k < s->n_routes; k++) {
        const struct lane *l = &s->lane[k];
        out->route[k] = l->rs;
        out->route[k].queued = l->count;
        out->route[k].breaker_open = breaker_open(l);
        const double mean = l->rs.items ? l->rs.units / (double)l->rs.items : 1;
        out->route[k].batch_s = hs_cost_line_s(&l->cost, 1, l->batch_max * mean);
        out->breaker_open &= out->route[k].breaker_open;
    }
    pthread_mutex_unlock(&p->mu);
}

double hs_pipeline_retry_after_s(struct hs_pipeline *p)
{
    double worst = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) { /* a stage's soonest route: where the next item goes */
        const struct stage *s = &p->st[i];
        double soonest = -1;
        for (int k = 0; k < s->n_routes; k++) {
            const struct lane *l = &s->lane[k];
            if (!l->count) {
                soonest = 0;
                break;
            }
            const int64_t batches = (l->count / l->batch_max + 1 + l->workers - 1) / l->workers;
            const double t = (double)batches * (double)l->ewma_ns / 1e9;
            if (soonest < 0 || t < soonest) soonest = t;
        }
        if (soonest > worst) worst = soonest;
    }
    pthread_mutex_unlock(&p->mu);
    return worst;
}

int hs_pipeline_stage_count(const struct hs_pipeline *p)
{
    return p->n;
}

const char *hs_pipeline_stage_name(const struct hs_pipeline *p, int stage)
{
    return stage >= 0 && stage < p->n ? p->st[stage].spec.name : NULL;
}

const char *hs_pipeline_route_name(const struct hs_pipeline *p, int stage, int k)
{
    if (stage < 0 || stage >= p->n || k < 0 || k >= p->st[stage].n_routes) return NULL;
    const char *n = p->st[stage].lane[k].name;
    return n ? n : "";
}
