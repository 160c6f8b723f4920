#include "server/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "sched/router.h"

/* Histogram bucket bounds: fixed by the exposition schema (dashboards key on them), not tuning. */
const double hs_metrics_lat_bounds[HS_METRICS_LAT_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
#define lat_bounds hs_metrics_lat_bounds
static const double size_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
static const double tok_bounds[] = {16, 64, 256, 1024, 4096, 16384, 65536};
#define NB(a)    ((int)(sizeof a / sizeof a[0]))
#define HIST_MAX 17

struct hist {
    const double *bounds;
    int n;
    atomic_llong b[HIST_MAX]; /* b[i]: observations <= bounds[i]; b[n]: above all */
    atomic_llong count;
    _Atomic double sum;
};

struct lane_m {
    char engine[64], model[128];
    atomic_llong outcome[HS_OUTCOME_COUNT];
    struct hist latency;
    struct hist stage[HS_TS_COUNT];
    struct hist batch_size, batch_tokens;
    atomic_llong tokens, padded_tokens, batches;
};

struct hs_metrics {
    struct hs_sched *s;
    struct hs_router *rt;
    int n; /* lanes; lanes[n] = "none" */
    struct lane_m *lanes;
};

static void hist_init(struct hist *h, const double *bounds, int n)
{
    h->bounds = bounds;
    h->n = n;
    for (int i = 0; i < HIST_MAX; i++) atomic_init(&h->b[i], 0);
    atomic_init(&h->count, 0);
    atomic_init(&h->sum, 0.0);
}

static void hist_observe(struct hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    atomic_fetch_add_explicit(&h->b[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    double old = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (!atomic_compare_exchange_weak(&h->sum, &old, old + v)) {
    }
}

hs_status hs_metrics_create(struct hs_sched *s, struct hs_metrics **out, struct hs_error *err)
{
    struct hs_metrics *m = hs_calloc(1, sizeof *m);
    int n = hs_sched_lane_count(s);
    if (m) m->lanes = hs_calloc((size_t)n + 1, sizeof *m->lanes);
    if (!m || !m->lanes) {
        hs_free(m);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "metrics");
    }
    m->s = s;
    m->n = n;
    for (int i = 0; i <= n; i++) {
        struct lane_m *L = &m->lanes[i];
        const struct hs_lane_opts *o = i < n ? hs_sched_lane_opts(s, i) : NULL;
        snprintf(L->engine, sizeof L->engine, "%s", o ? o->engine : "none");
        snprintf(L->model, sizeof L->model, "%s", o ? o->model : "none");
        hist_init(&L->latency, lat_bounds, NB(lat_bounds));
        for (int k = 0; k < HS_TS_COUNT; k++) hist_init(&L->stage[k], lat_bounds, NB(lat_bounds));
        hist_init(&L->batch_size, size_bounds, NB(size_bounds));
        hist_init(&L->batch_tokens, tok_bounds, NB(tok_bounds));
    }
    *out = m;
    return HS_STATUS_OK;
}

void hs_metrics_set_router(struct hs_metrics *m, struct hs_router *rt)
{
    m->rt = rt;
}

void hs_metrics_free(struct hs_metrics *m)
{
    if (!m) return;
    hs_free(m->lanes);
    hs_free(m);
}

static struct lane_m *lane_of(struct hs_metrics *m, int lane)
{
    return &m->lanes[lane >= 0 && lane < m->n ? lane : m->n];
}

void hs_metrics_request(struct hs_metrics *m, int lane, enum hs_outcome o, const int64_t *ts)
{
    struct lane_m *L = lane_of(m, lane);
    atomic_fetch_add_explicit(&L->outcome[o], 1, memory_order_relaxed);
    int64_t last = 0;
    for (int i = 1; i < HS_TS_COUNT; i++) {
        int p = i - 1;
        if (p == HS_TS_HOP && !ts[p]) p--; /* a local lane has no hop */
        if (ts[i] && ts[p] && ts[i] >= ts[p])
            hist_observe(&L->stage[i], (double)(ts[i] - ts[p]) / 1e9);
        if (ts[i]) last = ts[i];
    }
    if (ts[0] && last >= ts[0]) hist_observe(&L->latency, (double)(last - ts[0]) / 1e9);
}

void hs_metrics_batch(struct hs_metrics *m, const struct hs_batch_report *r)
{
    struct lane_m *L = lane_of(m, r->lane);
    hist_observe(&L->batch_size, r->n_seqs);
    hist_observe(&L->batch_tokens, (double)r->padded_tokens);
    atomic_fetch_add_explicit(&L->batches, 1, memory_order_relaxed);
    if (r->status == HS_STATUS_OK) {
        atomic_fetch_add_explicit(&L->tokens, r->tokens, memory_order_relaxed);
        atomic_fetch_add_explicit(&L->padded_tokens, r->padded_tokens, memory_order_relaxed);
    }
}

static void labels(struct hs_buf *b, const struct lane_m *L)
{
    hs_buf_printf(b, "engine=\"%s\",model=\"%s\"", L->engine, L->model);
}

static void render_hist(struct hs_buf *b, const char *name, const struct lane_m *L,
                        const char *extra, const struct hist *h)
{
    long long cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += atomic_load(&h->b[i]);
        hs_buf_printf(b, "%s_bucket{", name);
        labels(b, L);
        if (extra) hs_buf_printf(b, ",%s", extra);
        if (i < h->n)
            hs_buf_printf(b, ",le=\"%g\"} %lld\n", h->bounds[i], cum);
        else
            hs_buf_printf(b, ",le=\"+Inf\"} %lld\n", cum);
    }
    hs_buf_printf(b, "%s_sum{", name);
    labels(b, L);
    if (extra) hs_buf_printf(b, ",%s", extra);
    hs_buf_printf(b, "} %.9g\n%s_count{", atomic_load(&h->sum), name);
    labels(b, L);
    if (extra) hs_buf_printf(b, ",%s", extra);
    hs_buf_printf(b, "} %lld\n", (long long)atomic_load(&h->count));
}

static void help(struct hs_buf *b, const char *name, const char *type, const char *text)
{
    hs_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void render_router(struct hs_metrics *m, struct hs_buf *b, int64_t now)
{
    struct hs_router *rt = m->rt;
    int nr = hs_router_route_count(rt);
    /* routes, then the fallback pseudo-route (index nr) */
    static struct hs_route_stats st[HS_ROUTER_MAX_ROUTES + 1];
    static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&st_mu); /* st is large: static, and renders take turns */
    for (int r = 0; r <= nr; r++) hs_router_route_stats(rt, r < nr ? r : -1, &st[r]);
#define RNAME(r) hs_router_route_name(rt, (r) < nr ? (r) : -1)
    help(b, "hetserve_routed_total", "counter",
         "Requests placed by the router, by route, engine and the decision's policy.");
    for (int r = 0; r <= nr; r++)
        for (int l = 0; l < m->n; l++)
            for (int p = 0; p < HS_ROUTE_POLICY_COUNT; p++) {
                long long v = (long long)st[r].routed[l][p];
                if (!v) continue; /* sparse: most (route, engine, policy) never happen */
                hs_buf_printf(b,
                              "hetserve_routed_total{route=\"%s\",engine=\"%s\",model=\"%s\","
                              "policy=\"%s\"} %lld\n",
                              RNAME(r), m->lanes[l].engine, m->lanes[l].model,
                              hs_route_policy_name((enum hs_route_policy)p), v);
            }
    help(b, "hetserve_route_shed_total", "counter", "Requests the router rejected with 429.");
    for (int r = 0; r <= nr; r++)
        hs_buf_printf(b, "hetserve_route_shed_total{route=\"%s\"} %lld\n", RNAME(r),
                      (long long)st[r].shed);
    help(b, "hetserve_route_blocked_total", "counter",
         "Requests that found every engine of their route behind an open breaker.");
    for (int r = 0; r < nr; r++)
        hs_buf_printf(b, "hetserve_route_blocked_total{route=\"%s\"} %lld\n", RNAME(r),
                      (long long)st[r].blocked);
    help(b, "hetserve_route_failed_over_total", "counter",
         "Blocked requests sent to the failover route (capped share).");
    for (int r = 0; r < nr; r++)
        hs_buf_printf(b, "hetserve_route_failed_over_total{route=\"%s\"} %lld\n", RNAME(r),
                      (long long)st[r].failed_over);
    help(b, "hetserve_route_retries_total", "counter",
         "Retries after an engine failure: sent, or denied (budget, nowhere else).");
    for (int r = 0; r <= nr; r++) {
        hs_buf_printf(b, "hetserve_route_retries_total{route=\"%s\",outcome=\"sent\"} %lld\n",
                      RNAME(r), (long long)st[r].retries);
        hs_buf_printf(b, "hetserve_route_retries_total{route=\"%s\",outcome=\"denied\"} %lld\n",
                      RNAME(r), (long long)st[r].retries_denied);
    }
    help(b, "hetserve_route_escalations_total", "counter",
         "Inputs of a cascade route's requests judged low-confidence: escalated to the big "
         "route, or denied (kept small by the cap, or the big route could not take them).");
    for (int r = 0; r < nr; r++) {
        if (hs_router_opts(rt)->routes[r].kind != HS_ROUTE_KIND_CASCADE) continue;
        hs_buf_printf(b,
                      "hetserve_route_escalations_total{route=\"%s\",outcome=\"escalated\"} "
                      "%lld\n",
                      RNAME(r), (long long)st[r].escalated);
        hs_buf_printf(b, "hetserve_route_escalations_total{route=\"%s\",outcome=\"denied\"} %lld\n",
                      RNAME(r), (long long)st[r].escalations_denied);
    }
    help(b, "hetserve_shadow_requests_total", "counter",
         "Shadow copies sent, and those that failed or could not be compared.");
    for (int r = 0; r < nr; r++) {
        hs_buf_printf(b, "hetserve_shadow_requests_total{route=\"%s\",outcome=\"sent\"} %lld\n",
                      RNAME(r), (long long)st[r].shadow_sent);
        hs_buf_printf(b, "hetserve_shadow_requests_total{route=\"%s\",outcome=\"failed\"} %lld\n",
                      RNAME(r), (long long)st[r].shadow_failed);
    }
    help(b, "hetserve_shadow_cosine", "histogram",
         "Cosine of each answered row with its shadow copy's row (live cross-engine check).");
    for (int r = 0; r < nr; r++) {
        long long cum = 0;
        for (int k = 0; k <= HS_ROUTER_COS_BUCKETS; k++) {
            cum += st[r].shadow_cos_hist[k];
            if (k < HS_ROUTER_COS_BUCKETS)
                hs_buf_printf(b, "hetserve_shadow_cosine_bucket{route=\"%s\",le=\"%g\"} %lld\n",
                              RNAME(r), hs_router_cos_bounds[k], cum);
            else
                hs_buf_printf(b, "hetserve_shadow_cosine_bucket{route=\"%s\",le=\"+Inf\"} %lld\n",
                              RNAME(r), cum);
        }
        hs_buf_printf(b, "hetserve_shadow_cosine_sum{route=\"%s\"} %.9g\n", RNAME(r),
                      st[r].shadow_cos_sum);
        hs_buf_printf(b, "hetserve_shadow_cosine_count{route=\"%s\"} %lld\n", RNAME(r),
                      (long long)st[r].shadow_compared);
    }
    help(b, "hetserve_shadow_cosine_min", "gauge", "Lowest shadow cosine seen (1 when none).");
    for (int r = 0; r < nr; r++)
        hs_buf_printf(b, "hetserve_shadow_cosine_min{route=\"%s\"} %.9f\n", RNAME(r),
                      st[r].shadow_cos_min);
#undef RNAME
    pthread_mutex_unlock(&st_mu);
    int ne = hs_router_engine_count(rt);
    struct hs_breaker_stats bs[HS_SCHED_MAX_LANES];
    for (int e = 0; e < ne; e++) hs_router_breaker_stats(rt, e, now, &bs[e]);
    help(b, "hetserve_breaker_state", "gauge",
         "Circuit breaker of the engine: 0 closed, 1 open, 2 half-open.");
    for (int e = 0; e < ne; e++)
        hs_buf_printf(b, "hetserve_breaker_state{engine=\"%s\"} %d\n", bs[e].engine,
                      (int)bs[e].state);
    help(b, "hetserve_breaker_transitions_total", "counter",
         "Breaker state changes, by new state.");
    for (int e = 0; e < ne; e++) {
        hs_buf_printf(b, "hetserve_breaker_transitions_total{engine=\"%s\",to=\"open\"} %lld\n",
                      bs[e].engine, (long long)bs[e].opened);
        hs_buf_printf(b,
                      "hetserve_breaker_transitions_total{engine=\"%s\",to=\"half_open\"} %lld\n",
                      bs[e].engine, (long long)bs[e].half_opened);
        hs_buf_printf(b, "hetserve_breaker_transitions_total{engine=\"%s\",to=\"closed\"} %lld\n",
                      bs[e].engine, (long long)bs[e].closed);
    }
}

/* Cores lent between CPU engines (engines[].borrow_cores), each core some engine borrows. */
static void render_leases(struct hs_buf *b)
{
    static const struct {
        const char *name, *type, *text;
    } series[] = {
        {"hetserve_core_lent_stages_total", "counter",
         "Stages a borrowing CPU engine ran on this core while its own engines were idle."},
        {"hetserve_core_lent_seconds_total", "counter", "Time the core was lent."},
        {"hetserve_core_reclaim_waits_total", "counter",
         "Stages of the core's own engines that waited for a borrower's stage to end."},
        {"hetserve_core_reclaim_wait_seconds_total", "counter", "Those waits, summed."},
        {"hetserve_core_reclaim_wait_max_seconds", "gauge", "The longest of those waits."},
        {"hetserve_core_preempt_claims_total", "counter",
         "Stages of a preempting borrower (borrow_preempt) that wanted this core."},
        {"hetserve_core_preempt_lent_total", "counter", "Those that got it."},
        {"hetserve_core_yields_total", "counter",
         "Rounds of the core's own engines that waited while a preempting borrower ran."},
        {"hetserve_core_yield_seconds_total", "counter", "Those waits, summed."},
        {"hetserve_core_yield_max_seconds", "gauge", "The longest of those waits."},
    };
    long online = sysconf(_SC_NPROCESSORS_CONF);
    const int n_cores = online > 0 && online < 1024 ? (int)online : 1024;
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        bool any = false;
        for (int core = 0; core < n_cores; core++) {
            struct hs_cpu_lease_stats s;
            if (!hs_engine_cpu_lease_stats(core, &s)) continue;
            if (!any) help(b, series[k].name, series[k].type, series[k].text);
            any = true;
            const double v[] = {(double)s.lent_stages,
                                (double)s.lent_ns / 1e9,
                                (double)s.waits,
                                (double)s.wait_ns / 1e9,
                                (double)s.wait_max_ns / 1e9,
                                (double)s.claims,
                                (double)s.claims_lent,
                                (double)s.yields,
                                (double)s.yield_ns / 1e9,
                                (double)s.yield_max_ns / 1e9};
            hs_buf_printf(b, "%s{core=\"%d\"} %.9g\n", series[k].name, core, v[k]);
        }
    }
}

/* Preemption at stage boundaries (scheduler.preempt), each lane that has a preempting slot. */
static void render_preempt(const struct hs_metrics *m, const struct hs_lane_stats *st,
                           struct hs_buf *b)
{
    static const struct {
        const char *name, *type, *text;
    } series[] = {
        {"hetserve_preempt_batches_total", "counter",
         "Batches the lane's preempting slot ran ahead of the batches in flight "
         "(scheduler.preempt)."},
        {"hetserve_preempt_paused_seconds_total", "counter",
         "Time the lane's other batches were paused at stage boundaries for them, summed."},
        {"hetserve_preempt_paused_max_seconds", "gauge", "The longest pause of one batch."},
        {"hetserve_preempt_wait_seconds_total", "counter",
         "The preempting batches' waits for the stages in flight, summed."},
        {"hetserve_preempt_wait_max_seconds", "gauge", "The longest of those waits."},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        bool any = false;
        for (int i = 0; i < m->n; i++) {
            if (!hs_sched_lane_opts(m->s, i)->preempt) continue;
            if (!any) help(b, series[k].name, series[k].type, series[k].text);
            any = true;
            const double v[] = {(double)st[i].preempt_batches, (double)st[i].paused_ns / 1e9,
                                (double)st[i].paused_max_ns / 1e9,
                                (double)st[i].preempt_wait_ns / 1e9,
                                (double)st[i].preempt_wait_max_ns / 1e9};
            hs_buf_printf(b, "%s{", series[k].name);
            labels(b, &m->lanes[i]);
            hs_buf_printf(b, "} %.9g\n", v[k]);
        }
    }
}

void hs_metrics_render(struct hs_metrics *m, struct hs_buf *b)
{
    static const char *const outcome_names[] = {"ok", "error", "timeout", "rejected"};
    int64_t now = hs_now_ns();
    struct hs_lane_stats st[HS_SCHED_MAX_LANES];
    for (int i = 0; i < m->n; i++) hs_sched_lane_stats(m->s, i, &st[i]);

    help(b, "hetserve_queue_length", "gauge", "Sequences waiting in the engine queue.");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_queue_length{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %d\n", st[i].queued_seqs);
    }
    help(b, "hetserve_queue_tokens", "gauge", "Tokens waiting in the engine queue.");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_queue_tokens{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %lld\n", (long long)st[i].queued_tokens);
    }
    help(b, "hetserve_requests_total", "counter", "Requests answered, by outcome.");
    for (int i = 0; i <= m->n; i++)
        for (int o = 0; o < HS_OUTCOME_COUNT; o++) {
            hs_buf_puts(b, "hetserve_requests_total{");
            labels(b, &m->lanes[i]);
            hs_buf_printf(b, ",outcome=\"%s\"} %lld\n", outcome_names[o],
                          (long long)atomic_load(&m->lanes[i].outcome[o]));
        }
    help(b, "hetserve_request_duration_seconds", "histogram",
         "Request latency, received to response ready.");
    for (int i = 0; i <= m->n; i++)
        render_hist(b, "hetserve_request_duration_seconds", &m->lanes[i], NULL,
                    &m->lanes[i].latency);
    help(b, "hetserve_stage_duration_seconds", "histogram", "Time spent in each request stage.");
    for (int i = 0; i <= m->n; i++)
        for (int k = 1; k < HS_TS_COUNT; k++) {
            char extra[48];
            snprintf(extra, sizeof extra, "stage=\"%s\"", hs_ts_name((enum hs_ts)k));
            render_hist(b, "hetserve_stage_duration_seconds", &m->lanes[i], extra,
                        &m->lanes[i].stage[k]);
        }
    help(b, "hetserve_batch_size", "histogram", "Real sequences per batch.");
    for (int i = 0; i < m->n; i++)
        render_hist(b, "hetserve_batch_size", &m->lanes[i], NULL, &m->lanes[i].batch_size);
    help(b, "hetserve_batch_tokens", "histogram", "Padded tokens (batch x seq) per batch.");
    for (int i = 0; i < m->n; i++)
        render_hist(b, "hetserve_batch_tokens", &m->lanes[i], NULL, &m->lanes[i].batch_tokens);
    help(b, "hetserve_batch_padding_waste_ratio", "gauge",
         "Share of computed token slots that were padding, since start.");
    for (int i = 0; i < m->n; i++) {
        long long real = atomic_load(&m->lanes[i].tokens);
        long long pad = atomic_load(&m->lanes[i].padded_tokens);
        hs_buf_puts(b, "hetserve_batch_padding_waste_ratio{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.6f\n", pad > 0 ? 1.0 - (double)real / (double)pad : 0.0);
    }
    help(b, "hetserve_engine_busy_ratio", "gauge",
         "Time the engine spent running batches / uptime.");
    for (int i = 0; i < m->n; i++) {
        int64_t up = now - st[i].started_ns;
        hs_buf_puts(b, "hetserve_engine_busy_ratio{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.6f\n", up > 0 ? (double)st[i].busy_ns / (double)up : 0.0);
    }
    help(b, "hetserve_engine_busy_seconds_total", "counter",
         "Time the engine spent running batches, since start (rate() of it is utilization).");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_engine_busy_seconds_total{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.6f\n", (double)st[i].busy_ns / 1e9);
    }
    help(b, "hetserve_engine_tokens_per_second", "gauge",
         "Measured engine throughput while busy (EWMA over batches).");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_engine_tokens_per_second{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.1f\n", st[i].throughput_tokens_per_s);
    }
    help(b, "hetserve_tokens_total", "counter", "Real (unpadded) tokens computed.");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_tokens_total{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %lld\n", (long long)atomic_load(&m->lanes[i].tokens));
    }
    help(b, "hetserve_batches_total", "counter", "Batches run.");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_batches_total{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %lld\n", (long long)atomic_load(&m->lanes[i].batches));
    }
    help(b, "hetserve_prediction_ratio", "histogram",
         "Admission's prediction checked: time from enqueue to answer / predicted wait, of "
         "requests answered OK (1 = exact).");
    for (int i = 0; i < m->n; i++) {
        long long cum = 0;
        for (int k = 0; k <= HS_SCHED_PRED_BUCKETS; k++) {
            cum += st[i].pred_count[k];
            hs_buf_puts(b, "hetserve_prediction_ratio_bucket{");
            labels(b, &m->lanes[i]);
            if (k < HS_SCHED_PRED_BUCKETS)
                hs_buf_printf(b, ",le=\"%g\"} %lld\n", hs_sched_pred_bounds[k], cum);
            else
                hs_buf_printf(b, ",le=\"+Inf\"} %lld\n", cum);
        }
        hs_buf_puts(b, "hetserve_prediction_ratio_count{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %lld\n", (long long)st[i].pred_total);
    }
    help(b, "hetserve_prediction_log_error_sum", "counter",
         "Sum over checked requests of |ln(observed / predicted)| (divide by the ratio's count "
         "for the mean log error).");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_prediction_log_error_sum{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.6f\n", st[i].pred_log_abs_sum);
    }
    help(b, "hetserve_prediction_bias", "gauge",
         "Factor admission multiplies its predicted waits by, learned from their errors.");
    for (int i = 0; i < m->n; i++) {
        hs_buf_puts(b, "hetserve_prediction_bias{");
        labels(b, &m->lanes[i]);
        hs_buf_printf(b, "} %.4f\n", st[i].pred_bias);
    }
    render_preempt(m, st, b);
    render_leases(b);
    if (m->rt) render_router(m, b, now);
}
