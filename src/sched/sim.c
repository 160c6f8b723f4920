/* Simulated serving (sim.h). */
#include "sched/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "sched/dispatch.h"
#include "sched/router.h"
#include "sched/sched.h"

/* The simulated clock starts here (a stepped scheduler's clock must be > 0). */
#define T0_NS 1000000000LL

void hs_sim_traffic_free(struct hs_sim_traffic *t)
{
    hs_free(t->a);
    hs_free(t->token_store);
    memset(t, 0, sizeof *t);
}

void hs_sim_result_free(struct hs_sim_result *r)
{
    for (int i = 0; i < r->n_groups; i++) hs_free(r->grp[i].util_bins);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------------------------------------
 * events
 */

enum ev_kind { EV_END, EV_WAKE, EV_REAP, EV_SEG };

struct ev {
    int64_t at;
    uint64_t seq; /* ties: in the order scheduled */
    int kind, lane, slot;
};

struct heap {
    struct ev *e;
    size_t n, cap;
    uint64_t seq;
};

static bool ev_before(const struct ev *a, const struct ev *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static hs_status heap_push(struct heap *h, int64_t at, int kind, int lane, int slot)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        struct ev *e = hs_realloc(h->e, cap * sizeof *e);
        if (!e) return HS_STATUS_NO_MEMORY;
        h->e = e;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->e[i] = (struct ev){at, h->seq++, kind, lane, slot};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_before(&h->e[i], &h->e[p])) break;
        struct ev t = h->e[i];
        h->e[i] = h->e[p];
        h->e[p] = t;
        i = p;
    }
    return HS_STATUS_OK;
}

static struct ev heap_pop(struct heap *h)
{
    struct ev top = h->e[0];
    h->e[0] = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && ev_before(&h->e[l], &h->e[m])) m = l;
        if (r < h->n && ev_before(&h->e[r], &h->e[m])) m = r;
        if (m == i) break;
        struct ev t = h->e[i];
        h->e[i] = h->e[m];
        h->e[m] = t;
        i = m;
    }
    return top;
}

/* ---------------------------------------------------------------------------------------------
 * jobs: the owner side of dispatch (what the HTTP layer is in the server)
 */

struct sim;

struct block {
    struct block *next;
    max_align_t data[];
};

struct simjob {
    struct hs_job j;
    struct sim *sim;
    struct block *blocks;
    int refs;
    bool released, in_submit, answered, warmup, counted;
    int cls, tenant; /* tenant: 1 + the traffic's index, 0 = none */
    int64_t arrival_ns;
};

struct lat {
    double *v;
    size_t n, cap;
};

/* A batch running as segments (batch_segments): one per (lane, slot). */
struct run {
    int n, i; /* segments, the current one */
    int resource[HS_SIM_MAX_SEGMENTS];
    double seconds[HS_SIM_MAX_SEGMENTS];
    int64_t start_ns;
};

/* A resource: free or running one segment, and the runs waiting for it in arrival order. */
struct resource {
    bool busy;
    int *queue; /* ring of run indices */
    int head, n, cap;
};

struct sim;

/* The entry of a gated lane: a resource (sim.h's gate). */
struct gate {
    struct sim *m;
    int resource;
};

struct sim {
    const struct hs_sim_setup *f;
    struct hs_sched *s;
    struct lat lat[HS_SIM_MAX_CLASSES];
    struct lat tlat[HS_SIM_MAX_TENANTS]; /* per tenant */
    struct hs_sim_result *res;
    int64_t last_answer;
    hs_status oom;
    int max_slots;
    struct run *runs; /* [n_lanes * max_slots], with batch_segments */
    struct resource rsc[HS_SIM_MAX_RESOURCES];
    struct hs_lane_opts lanes[HS_SCHED_MAX_LANES]; /* the setup's, gates installed */
    struct gate gates[HS_SCHED_MAX_LANES];
    /* admission's in-flight share (hs_sim_setup.share_inflight): requests of each tenant
     * admitted and not yet answered, and of all of them */
    int inflight[HS_SIM_MAX_TENANTS], inflight_all;
};

static bool gate_open(void *ctx)
{
    const struct gate *g = ctx;
    const struct resource *q = &g->m->rsc[g->resource];
    return !q->busy && q->n == 0;
}

static void job_free(struct simjob *sj)
{
    struct block *b = sj->blocks;
    while (b) {
        struct block *next = b->next;
        hs_free(b);
        b = next;
    }
    hs_free(sj);
}

static void *job_alloc(void *ctx, size_t bytes)
{
    struct simjob *sj = ctx;
    struct block *b = hs_calloc(1, sizeof *b + bytes);
    if (!b) return NULL;
    b->next = sj->blocks;
    sj->blocks = b;
    return b->data;
}

static void job_hold(void *ctx)
{
    ((struct simjob *)ctx)->refs++;
}

static void job_let_go(void *ctx)
{
    struct simjob *sj = ctx;
    if (--sj->refs == 0 && sj->released) job_free(sj);
}

static void job_release(struct simjob *sj)
{
    sj->released = true;
    if (sj->refs == 0)
        job_free(sj);
    else
        hs_job_release(&sj->j); /* the last let_go frees it */
}

static void lat_add(struct sim *m, struct lat *l, double ms)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        double *v = hs_realloc(l->v, cap * sizeof *v);
        if (!v) {
            m->oom = HS_STATUS_NO_MEMORY;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = ms;
}

static void count(struct sim *m, struct hs_sim_class_result *c, struct lat *l, hs_status st,
                  double ms)
{
    c->n++;
    if (st == HS_STATUS_OK) {
        c->ok++;
        lat_add(m, l, ms);
    } else if (st == HS_STATUS_OVERLOADED) {
        c->shed++;
    } else if (st == HS_STATUS_TIMEOUT) {
        c->timeout++;
    } else {
        c->other++;
    }
}

/* Counts a job's outcome in its class and its tenant. */
static void record(struct sim *m, struct simjob *sj, hs_status st, int64_t now)
{
    if (sj->warmup) return;
    const double ms = (double)(now - sj->arrival_ns) / 1e6 + m->f->overhead_ms;
    count(m, &m->res->cls[sj->cls], &m->lat[sj->cls], st, ms);
    if (sj->tenant > 0) count(m, &m->res->tenant[sj->tenant - 1], &m->tlat[sj->tenant - 1], st, ms);
    if (st == HS_STATUS_OK && now > m->last_answer) m->last_answer = now;
}

/* A tenant's request leaves the in-flight count once answered. */
static void share_leave(struct sim *m, struct simjob *sj)
{
    if (!sj->counted) return;
    sj->counted = false;
    m->inflight[sj->tenant - 1]--;
    m->inflight_all--;
}

/* Admission's share rule for a tenant's arrival (the server's, server/auth.c): admitted (and
 * counted in flight), demoted to batch class, or refused (false). */
static bool share_admit(struct sim *m, const struct hs_sim_traffic *t, struct simjob *sj)
{
    const int share = m->f->share_inflight;
    if (share <= 0 || sj->tenant <= 0) return true;
    const int k = sj->tenant - 1;
    double others = 0, heaviest = 0;
    for (int i = 0; i < t->n_tenants; i++) {
        if (i == k || m->inflight[i] <= 0) continue;
        others += t->tenant_weight[i];
        heaviest = fmax(heaviest, m->inflight[i] / t->tenant_weight[i]);
    }
    const enum hs_share_verdict v = hs_share_verdict(share, m->inflight_all, m->inflight[k],
                                                     t->tenant_weight[k], others, heaviest);
    if (v == HS_SHARE_REFUSE) return false;
    if (v == HS_SHARE_DEMOTE) sj->j.priority = HS_PRIORITY_BATCH;
    sj->counted = true;
    m->inflight[k]++;
    m->inflight_all++;
    return true;
}

static void job_done(struct hs_job *j, void *ctx)
{
    struct simjob *sj = ctx;
    (void)j;
    sj->answered = true;
    share_leave(sj->sim, sj);
    record(sj->sim, sj, sj->j.status, hs_sched_now(sj->sim->s));
    if (!sj->in_submit) job_release(sj);
}

/* ---------------------------------------------------------------------------------------------
 * the run
 */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n) return 0;
    size_t i = (size_t)ceil(p * (double)n) - 1;
    if (p * (double)n <= 0) i = 0;
    return v[i < n ? i : n - 1];
}

static void summarize(struct lat *l, struct hs_sim_class_result *c)
{
    qsort(l->v, l->n, sizeof *l->v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < l->n; i++) sum += l->v[i];
    c->p50_ms = pct(l->v, l->n, 0.50);
    c->p90_ms = pct(l->v, l->n, 0.90);
    c->p99_ms = pct(l->v, l->n, 0.99);
    c->mean_ms = l->n ? sum / (double)l->n : 0;
    c->max_ms = l->n ? l->v[l->n - 1] : 0;
}

/* Adds a batch's busy time [start, end) to its lane group, overall and per bin. */
static hs_status busy_add(struct sim *m, int e, int64_t start, int64_t end)
{
    struct hs_sim_group_result *r = &m->res->grp[e];
    r->busy_s += (double)(end - start) / 1e9;
    r->batches++;
    double bin = m->res->bin_s;
    double a = (double)(start - T0_NS) / 1e9, b = (double)(end - T0_NS) / 1e9;
    int last = (int)(b / bin);
    if (last >= r->n_bins) {
        int n = last + 1 + 64;
        double *v = hs_realloc(r->util_bins, (size_t)n * sizeof *v);
        if (!v) return HS_STATUS_NO_MEMORY;
        memset(v + r->n_bins, 0, (size_t)(n - r->n_bins) * sizeof *v);
        r->util_bins = v;
        r->n_bins = n;
    }
    for (int k = (int)(a / bin); k <= last; k++) {
        double lo = k * bin > a ? k * bin : a, hi = (k + 1) * bin < b ? (k + 1) * bin : b;
        if (hi > lo) r->util_bins[k] += hi - lo;
    }
    return HS_STATUS_OK;
}

/* Starts run r's current segment at now, or queues it for its resource. */
static hs_status seg_start(struct sim *m, struct heap *h, int r, int64_t now)
{
    struct run *u = &m->runs[r];
    const int res = u->resource[u->i];
    if (res >= 0) {
        struct resource *q = &m->rsc[res];
        if (q->busy) {
            q->queue[(q->head + q->n++) % q->cap] = r;
            return HS_STATUS_OK;
        }
        q->busy = true;
        m->res->resource_util[res] += u->seconds[u->i];
    }
    int64_t end = now + (int64_t)(u->seconds[u->i] * 1e9);
    return heap_push(h, end > now ? end : now + 1, EV_SEG, r / m->max_slots, r % m->max_slots);
}

/* Run r's current segment ended at now: its resource goes to the next in line, and r moves on.
 * Returns true when r has no segment left (the batch ended). */
static bool seg_end(struct sim *m, struct heap *h, int r, int64_t now)
{
    struct run *u = &m->runs[r];
    const int res = u->resource[u->i];
    if (res >= 0) {
        struct resource *q = &m->rsc[res];
        q->busy = false;
        if (q->n > 0) {
            int next = q->queue[q->head];
            q->head = (q->head + 1) % q->cap;
            q->n--;
            if (seg_start(m, h, next, now)) m->oom = HS_STATUS_NO_MEMORY;
        }
    }
    if (++u->i == u->n) return true;
    if (seg_start(m, h, r, now)) m->oom = HS_STATUS_NO_MEMORY;
    return false;
}

hs_status hs_sim_run(const struct hs_sim_setup *f, const struct hs_sim_traffic *t,
                     struct hs_sim_result *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (f->n_lanes <= 0 || f->n_lanes > HS_SCHED_MAX_LANES || !f->batch_s || f->n_groups < 1 ||
        f->n_groups > HS_SIM_MAX_GROUPS || t->n_classes < 1 || t->n_classes > HS_SIM_MAX_CLASSES)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "simulation: 1..%d lanes, a batch cost, 1..%d groups and 1..%d "
                            "classes",
                            HS_SCHED_MAX_LANES, HS_SIM_MAX_GROUPS, HS_SIM_MAX_CLASSES);
    for (int l = 0; l < f->n_lanes; l++)
        if (f->lane_group[l] < 0 || f->lane_group[l] >= f->n_groups)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "simulation: lane %d's group", l);
    struct sim *m = hs_calloc(1, sizeof *m);
    struct hs_router *rt = NULL;
    struct hs_dispatch *d = NULL;
    struct heap h = {0};
    hs_status st = HS_STATUS_OK;
    if (!m) return hs_error_set(err, HS_STATUS_NO_MEMORY, "simulator");
    m->f = f;
    m->res = out;
    out->bin_s = f->bin_s > 0 ? f->bin_s : 1.0;
    out->n_classes = t->n_classes;
    memcpy(out->class_name, t->class_name, sizeof out->class_name);
    out->n_tenants = t->n_tenants < HS_SIM_MAX_TENANTS ? t->n_tenants : HS_SIM_MAX_TENANTS;
    memcpy(out->tenant_name, t->tenant_name, sizeof out->tenant_name);
    out->n_groups = f->n_groups;
    for (int g = 0; g < f->n_groups; g++)
        snprintf(out->grp[g].name, sizeof out->grp[g].name, "%s", f->group_name[g]);
    for (int l = 0; l < f->n_lanes; l++) out->grp[f->lane_group[l]].lanes++;
    if (f->batch_segments) {
        if (f->n_resources < 1 || f->n_resources > HS_SIM_MAX_RESOURCES) {
            st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "simulation: 1..%d resources",
                              HS_SIM_MAX_RESOURCES);
            goto done;
        }
        for (int l = 0; l < f->n_lanes; l++) {
            int sl = f->lanes[l].slots > 0 ? f->lanes[l].slots : 1;
            if (sl > m->max_slots) m->max_slots = sl;
        }
        const int runs = f->n_lanes * m->max_slots;
        m->runs = hs_calloc((size_t)runs, sizeof *m->runs);
        if (!m->runs) goto nomem;
        out->n_resources = f->n_resources;
        for (int r = 0; r < f->n_resources; r++) {
            snprintf(out->resource_name[r], sizeof out->resource_name[r], "%s",
                     f->resource_name[r]);
            m->rsc[r].cap = runs;
            m->rsc[r].queue = hs_calloc((size_t)runs, sizeof(int));
            if (!m->rsc[r].queue) goto nomem;
        }
    }
    memcpy(m->lanes, f->lanes, sizeof(struct hs_lane_opts) * (size_t)f->n_lanes);
    for (int l = 0; l < f->n_lanes; l++) {
        if (f->gate[l] <= 0) continue;
        if (!f->batch_segments || f->gate[l] > f->n_resources) {
            st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                              "simulation: lane %d's gate names no resource", l);
            goto done;
        }
        m->gates[l] = (struct gate){m, f->gate[l] - 1};
        m->lanes[l].runner.gate_open = gate_open;
        m->lanes[l].runner.ctx = &m->gates[l];
    }
    if ((st = hs_sched_create_stepped(m->lanes, f->n_lanes, NULL, T0_NS, &m->s, err))) goto done;
    if ((st = hs_router_create(m->s, f->router, &rt, err))) goto done;
    if ((st = hs_dispatch_create(m->s, rt, &d, err))) goto done;

    int64_t seqs_formed[HS_SIM_MAX_GROUPS] = {0};
    int64_t wake_at = INT64_MAX, reap_at = INT64_MAX;
    size_t next = 0;
    int64_t now = T0_NS;
    for (;;) {
        int64_t arr = next < t->n ? T0_NS + (int64_t)(t->a[next].at_s * 1e9) : INT64_MAX;
        int64_t evt = h.n ? h.e[0].at : INT64_MAX;
        if (arr == INT64_MAX && evt == INT64_MAX) break;
        out->events++;
        if (arr <= evt) {
            now = arr > now ? arr : now;
            hs_sched_step_clock(m->s, now);
            const struct hs_sim_arrival *a = &t->a[next++];
            struct simjob *sj = hs_calloc(1, sizeof *sj);
            struct hs_seq *seqs = sj ? job_alloc(sj, (size_t)a->n_inputs * sizeof *seqs) : NULL;
            if (!seqs) {
                hs_free(sj);
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "simulated request");
                goto done;
            }
            for (int i = 0; i < a->n_inputs; i++) seqs[i].n_tokens = a->tokens[i];
            sj->sim = m;
            sj->cls = a->cls;
            sj->tenant = a->tenant > 0 && a->tenant <= t->n_tenants ? a->tenant : 0;
            sj->warmup = a->warmup;
            sj->arrival_ns = now;
            double timeout_ms = a->timeout_ms > 0           ? a->timeout_ms
                                : f->default_timeout_ms > 0 ? f->default_timeout_ms
                                                            : 10000;
            sj->j = (struct hs_job){
                .owner = {job_alloc, job_hold, job_let_go, job_done, sj},
                .id = next,
                .model = f->model,
                .task = "embeddings",
                .priority = (enum hs_priority)a->priority,
                .deadline_ns = now + (int64_t)(timeout_ms * 1e6),
                .n_seqs = a->n_inputs,
                .seqs = seqs,
                .tenant = sj->tenant,
                .weight = sj->tenant ? t->tenant_weight[sj->tenant - 1] : 0,
            };
            for (int k = 0; k < HS_TS_COUNT; k++) sj->j.ts[k] = now;
            if (!share_admit(m, t, sj)) { /* the server's 429: the tenant is past its share */
                record(m, sj, HS_STATUS_OVERLOADED, now);
                if (!sj->warmup) out->tenant_share_refused[sj->tenant - 1]++;
                job_release(sj);
            } else {
                sj->in_submit = true;
                hs_status s2 = hs_dispatch_submit(d, &sj->j);
                sj->in_submit = false;
                if (s2 != HS_STATUS_OK) {
                    share_leave(m, sj);
                    record(m, sj, s2, now);
                }
                if (s2 != HS_STATUS_OK || sj->answered) job_release(sj);
            }
        } else {
            struct ev e = heap_pop(&h);
            now = e.at > now ? e.at : now;
            hs_sched_step_clock(m->s, now);
            if (e.kind == EV_END) hs_sched_step_end(m->s, e.lane, e.slot, HS_STATUS_OK, NULL);
            if (e.kind == EV_SEG) {
                const int r = e.lane * m->max_slots + e.slot;
                if (seg_end(m, &h, r, now)) {
                    if (busy_add(m, f->lane_group[e.lane], m->runs[r].start_ns, now)) goto oom;
                    hs_sched_step_end(m->s, e.lane, e.slot, HS_STATUS_OK, NULL);
                }
            }
            if (e.kind == EV_WAKE && e.at == wake_at) wake_at = INT64_MAX;
            if (e.kind == EV_REAP && e.at == reap_at) reap_at = INT64_MAX;
        }
        /* deadlines, then every batch the idle slots form now */
        int64_t dl = hs_sched_step_reap(m->s);
        if (dl < reap_at) {
            reap_at = dl;
            if (heap_push(&h, dl, EV_REAP, 0, 0)) goto oom;
        }
        struct hs_sched_step b;
        int64_t wake;
        while (hs_sched_step_begin(m->s, &b, &wake)) {
            int e = f->lane_group[b.lane];
            seqs_formed[e] += b.n_seqs;
            if (f->batch_segments) {
                const int r = b.lane * m->max_slots + b.slot;
                struct run *u = &m->runs[r];
                u->n = f->batch_segments(f->batch_ctx, &b, u->resource, u->seconds,
                                         HS_SIM_MAX_SEGMENTS);
                if (u->n > HS_SIM_MAX_SEGMENTS) u->n = HS_SIM_MAX_SEGMENTS;
                for (int k = 0; k < u->n; k++)
                    if (u->resource[k] >= f->n_resources) u->resource[k] = -1;
                if (u->n > 0) {
                    double sum = 0;
                    for (int k = 0; k < u->n; k++) sum += u->seconds[k];
                    hs_log(HS_LOG_DEBUG,
                           "sim t %.4f s: lane %d slot %d: %d seqs, %lld tokens, shape %dx%d: %d "
                           "segments of %.2f ms (the lane predicted %.2f)",
                           (double)(now - T0_NS) / 1e9, b.lane, b.slot, b.n_seqs,
                           (long long)b.tokens, b.shape_batch, b.shape_seq, u->n, sum * 1e3,
                           b.predicted_s * 1e3);
                    u->i = 0;
                    u->start_ns = now;
                    if (seg_start(m, &h, r, now)) goto oom;
                    continue;
                }
            }
            double s = f->batch_s(f->batch_ctx, &b);
            int64_t end = now + (int64_t)(s * 1e9);
            hs_log(HS_LOG_DEBUG,
                   "sim t %.4f s: lane %d slot %d: %d seqs, %lld tokens, shape %dx%d: %.2f ms "
                   "(the lane predicted %.2f)",
                   (double)(now - T0_NS) / 1e9, b.lane, b.slot, b.n_seqs, (long long)b.tokens,
                   b.shape_batch, b.shape_seq, s * 1e3, b.predicted_s * 1e3);
            if (end <= now) end = now + 1;
            if (heap_push(&h, end, EV_END, b.lane, b.slot) || busy_add(m, e, now, end)) goto oom;
        }
        if (wake < wake_at) {
            wake_at = wake;
            if (heap_push(&h, wake, EV_WAKE, 0, 0)) goto oom;
        }
        if (m->oom) goto oom;
    }
    /* first arrival to last answer (not to the last event: a deadline's reap may come later) */
    out->span_s = m->last_answer > T0_NS ? (double)(m->last_answer - T0_NS) / 1e9 : 0;
    if (t->n && out->span_s < t->a[t->n - 1].at_s) out->span_s = t->a[t->n - 1].at_s;
    for (int e = 0; e < f->n_groups; e++) {
        struct hs_sim_group_result *r = &out->grp[e];
        int copies = r->lanes;
        r->util = out->span_s > 0 && copies ? r->busy_s / (copies * out->span_s) : 0;
        r->mean_batch_seqs = r->batches ? (double)seqs_formed[e] / (double)r->batches : 0;
        for (int k = 0; k < r->n_bins; k++) r->util_bins[k] /= copies * out->bin_s;
        /* trim the spare bins past the end */
        int used = (int)(out->span_s / out->bin_s) + 1;
        if (used < r->n_bins) r->n_bins = used;
    }
    for (int r = 0; r < out->n_resources; r++)
        out->resource_util[r] = out->span_s > 0 ? out->resource_util[r] / out->span_s : 0;
    struct lat all = {0};
    for (int k = 0; k < t->n_classes; k++) {
        struct hs_sim_class_result *cr = &out->cls[k];
        summarize(&m->lat[k], cr);
        out->all.n += cr->n;
        out->all.ok += cr->ok;
        out->all.shed += cr->shed;
        out->all.timeout += cr->timeout;
        out->all.other += cr->other;
        if (m->lat[k].n) {
            double *v = hs_realloc(all.v, (all.n + m->lat[k].n) * sizeof *v);
            if (!v) goto oom;
            memcpy(v + all.n, m->lat[k].v, m->lat[k].n * sizeof *v);
            all.v = v;
            all.n += m->lat[k].n;
        }
    }
    summarize(&all, &out->all);
    for (int k = 0; k < out->n_tenants; k++) summarize(&m->tlat[k], &out->tenant[k]);
    hs_free(all.v);
    for (int r = -1; r < hs_router_route_count(rt); r++) {
        struct hs_route_stats rs;
        if (r < 0)
            hs_router_fallback_stats(rt, &rs);
        else
            hs_router_route_stats(rt, r, &rs);
        out->router_shed += rs.shed;
        out->failed_over += rs.failed_over;
        out->retries += rs.retries;
    }
    goto done;
nomem:
    st = hs_error_set(err, HS_STATUS_NO_MEMORY, "simulator");
    goto done;
oom:
    st = hs_error_set(err, HS_STATUS_NO_MEMORY, "simulator events");
done:
    /* the scheduler first: it answers anything left (nothing after a full run) through dispatch */
    if (m->s) hs_sched_destroy(m->s);
    hs_dispatch_free(d);
    hs_router_free(rt);
    for (int k = 0; k < HS_SIM_MAX_CLASSES; k++) hs_free(m->lat[k].v);
    for (int k = 0; k < HS_SIM_MAX_TENANTS; k++) hs_free(m->tlat[k].v);
    hs_free(h.e);
    for (int r = 0; r < HS_SIM_MAX_RESOURCES; r++) hs_free(m->rsc[r].queue);
    hs_free(m->runs);
    hs_free(m);
    if (st) hs_sim_result_free(out);
    return st;
}
