#include "model/executor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

#define HS_EXEC_MAX_ENGINES 8

/* First come, first served hold of one engine (pipeline): tickets in arrival order. */
struct engine_hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next, serving;
};

/* Stage-boundary preemption (opts.preempt): the other slots' stages in flight, and whether the
 * preempting slot's batch runs (or waits for them to end). */
struct preempt_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_stage;       /* other slots inside a stage */
    atomic_bool active; /* the preempting slot's batch runs or waits to */
    bool waiting;       /* ... and waits for in_stage to reach 0 */
    int paused;         /* other slots waiting before a stage */
};

struct exec_engine {
    hs_engine_t engine;
    void **ws;                /* [slots] */
    struct engine_hold *hold; /* pipeline only, else NULL */
};

struct hs_executor {
    const struct hs_model *model;
    struct hs_executor_opts opts;
    int n_stages;
    void **prep;    /* [n_stages] */
    int *stage_eng; /* [n_stages] index into eng[] */
    int n_eng;
    struct exec_engine eng[HS_EXEC_MAX_ENGINES];
    float **xfer; /* [slots] host buffers for activations crossing engines */
    int n_bound;
    int bound_from[HS_EXEC_MAX_BOUNDARIES], bound_to[HS_EXEC_MAX_BOUNDARIES]; /* into eng[] */
    int *stage_bound; /* [n_stages]: boundary entered before stage i, -1 none */
    bool *gated;      /* [slots]: holds the first engine for its next run (hs_executor_gate) */
    struct preempt_gate *pre; /* opts.preempt: slot opts.slots - 1 preempts; NULL otherwise */
};

void hs_placement_single(const struct hs_model *m, hs_engine_t e, struct hs_placement *out)
{
    memset(out, 0, sizeof *out);
    out->n_stages = m->n_stages;
    for (int i = 0; i < m->n_stages && i < HS_PLAN_MAX_STAGES; i++) out->engine[i] = e;
}

void hs_placement_layers(const struct hs_model *m, hs_engine_t a, int n_first, hs_engine_t b,
                         struct hs_placement *out)
{
    memset(out, 0, sizeof *out);
    out->n_stages = m->n_stages;
    for (int i = 0; i < m->n_stages && i < HS_PLAN_MAX_STAGES; i++) {
        const struct hs_stage *st = &m->stages[i];
        int on_a = st->kind == HS_STAGE_EMBED ||
                   ((st->kind == HS_STAGE_ATTN || st->kind == HS_STAGE_FFN) && st->layer < n_first);
        out->engine[i] = on_a ? a : b;
    }
}

hs_status hs_placement_ranges(const struct hs_model *m, int n, const hs_engine_t *engine,
                              const int *from, const int *to, struct hs_placement *out,
                              struct hs_error *err)
{
    const int layers = m->config.dims.layers;
    int owner[HS_PLAN_MAX_STAGES];
    memset(out, 0, sizeof *out);
    out->n_stages = m->n_stages;
    if (layers < 1 || layers > HS_PLAN_MAX_STAGES || n < 1)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "placement: no layer ranges");
    for (int l = 0; l < layers; l++) owner[l] = -1;
    for (int r = 0; r < n; r++) {
        if (from[r] < 0 || to[r] <= from[r] || to[r] > layers)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "placement: layers[%d] is [%d, %d): model %s has layers 0..%d", r,
                                from[r], to[r], m->name, layers);
        for (int l = from[r]; l < to[r]; l++) {
            if (owner[l] >= 0)
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "placement: layer %d is in layers[%d] and layers[%d]", l,
                                    owner[l], r);
            owner[l] = r;
        }
    }
    for (int l = 0; l < layers; l++)
        if (owner[l] < 0)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "placement: layer %d of model %s (%d layers) is in no range", l,
                                m->name, layers);
    for (int i = 0; i < m->n_stages && i < HS_PLAN_MAX_STAGES; i++) {
        const struct hs_stage *st = &m->stages[i];
        int l = st->kind == HS_STAGE_ATTN || st->kind == HS_STAGE_FFN ? st->layer
                : st->kind == HS_STAGE_EMBED                          ? 0
                                                                      : layers - 1;
        out->engine[i] = engine[owner[l]];
    }
    return HS_STATUS_OK;
}

void hs_placement_modules(const struct hs_model *m, hs_engine_t attn, hs_engine_t ffn,
                          struct hs_placement *out)
{
    memset(out, 0, sizeof *out);
    out->n_stages = m->n_stages;
    for (int i = 0; i < m->n_stages && i < HS_PLAN_MAX_STAGES; i++) {
        enum hs_stage_kind k = m->stages[i].kind;
        out->engine[i] = k == HS_STAGE_EMBED || k == HS_STAGE_ATTN ? attn : ffn;
    }
}

hs_status hs_placement_keep_f32(const struct hs_model *m, const char *stages,
                                struct hs_placement *plan, struct hs_error *err)
{
    for (const char *p = stages; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        size_t len = strcspn(p, ", ");
        int found = -1;
        for (int i = 0; i < m->n_stages && found < 0; i++)
            if (strlen(m->stages[i].name) == len && !strncmp(m->stages[i].name, p, len)) found = i;
        if (found < 0)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT, "model %s has no stage '%.*s'",
                                m->name, (int)(len > 64 ? 64 : len), p);
        plan->keep_f32[found] = true;
        p += len;
    }
    return HS_STATUS_OK;
}

const struct hs_executor_opts *hs_executor_opts(const struct hs_executor *x)
{
    return &x->opts;
}

const struct hs_model *hs_executor_model(const struct hs_executor *x)
{
    return x->model;
}

int hs_executor_n_boundaries(const struct hs_executor *x)
{
    return x ? x->n_bound : 0; /* NULL: a lane without an executor (a remote engine's) */
}

void hs_executor_boundary(const struct hs_executor *x, int i, hs_engine_t *from, hs_engine_t *to)
{
    *from = x->eng[x->bound_from[i]].engine;
    *to = x->eng[x->bound_to[i]].engine;
}

/* Takes h; returns the nanoseconds waited for another holder (0 when it was free). */
static int64_t hold_take(struct engine_hold *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t me = h->next++;
    int64_t t0 = h->serving != me ? hs_now_ns() : 0;
    while (h->serving != me) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    return t0 ? hs_now_ns() - t0 : 0;
}

static void hold_give(struct engine_hold *h)
{
    pthread_mutex_lock(&h->mu);
    h->serving++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void hs_executor_free(struct hs_executor *x)
{
    if (!x) return;
    for (int i = 0; i < x->n_eng; i++) {
        if (x->eng[i].hold) {
            pthread_mutex_destroy(&x->eng[i].hold->mu);
            pthread_cond_destroy(&x->eng[i].hold->cv);
            hs_free(x->eng[i].hold);
        }
        if (!x->eng[i].ws) continue;
        for (int s = 0; s < x->opts.slots; s++)
            hs_engine_ws_destroy(x->eng[i].engine, x->eng[i].ws[s]);
        hs_free(x->eng[i].ws);
    }
    if (x->prep)
        for (int i = 0; i < x->n_stages; i++)
            if (x->stage_eng) hs_engine_stage_release(x->eng[x->stage_eng[i]].engine, x->prep[i]);
    if (x->xfer)
        for (int s = 0; s < x->opts.slots; s++) hs_free_aligned(x->xfer[s]);
    hs_free(x->xfer);
    hs_free(x->prep);
    hs_free(x->stage_eng);
    hs_free(x->stage_bound);
    hs_free(x->gated);
    if (x->pre) {
        pthread_mutex_destroy(&x->pre->mu);
        pthread_cond_destroy(&x->pre->cv);
        hs_free(x->pre);
    }
    hs_free(x);
}

bool hs_executor_pipelined(const struct hs_executor *x)
{
    return x && x->eng[x->stage_eng[0]].hold;
}

void hs_executor_gate(struct hs_executor *x, int slot)
{
    if (!hs_executor_pipelined(x) || slot < 0 || slot >= x->opts.slots || x->gated[slot]) return;
    hold_take(x->eng[x->stage_eng[0]].hold);
    x->gated[slot] = true;
}

void hs_executor_ungate(struct hs_executor *x, int slot)
{
    if (!hs_executor_pipelined(x) || slot < 0 || slot >= x->opts.slots || !x->gated[slot]) return;
    x->gated[slot] = false;
    hold_give(x->eng[x->stage_eng[0]].hold);
}

/* A slot other than the preempting one, before a stage: waits while the preempting slot's batch
 * runs, then counts itself in a stage. Returns the nanoseconds it was paused. */
static int64_t stage_enter(struct preempt_gate *g)
{
    if (!g) return 0;
    int64_t t0 = 0;
    pthread_mutex_lock(&g->mu);
    if (atomic_load(&g->active)) {
        t0 = hs_now_ns();
        g->paused++;
        while (atomic_load(&g->active)) pthread_cond_wait(&g->cv, &g->mu);
        g->paused--;
    }
    g->in_stage++;
    pthread_mutex_unlock(&g->mu);
    return t0 ? hs_now_ns() - t0 : 0;
}

static void stage_leave(struct preempt_gate *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    if (--g->in_stage == 0 && g->waiting) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* The preempting slot's batch: the others stop at their next stage boundary; it waits for their
 * stages in flight. Returns the nanoseconds it waited. */
static int64_t preempt_begin(struct preempt_gate *g)
{
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->active, true);
    const int64_t t0 = hs_now_ns();
    g->waiting = true;
    while (g->in_stage > 0) pthread_cond_wait(&g->cv, &g->mu);
    g->waiting = false;
    pthread_mutex_unlock(&g->mu);
    return hs_now_ns() - t0;
}

static void preempt_end(struct preempt_gate *g)
{
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->active, false);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void hs_executor_preempt_state(struct hs_executor *x, struct hs_exec_preempt_state *out)
{
    *out = (struct hs_exec_preempt_state){0};
    if (!x || !x->pre) return;
    pthread_mutex_lock(&x->pre->mu);
    out->waiting = x->pre->waiting;
    out->paused = x->pre->paused;
    pthread_mutex_unlock(&x->pre->mu);
}

/* Stage i's compute dtype: f32 where the placement or the model's quantization plan keeps it,
 * else the executor's. */
enum hs_dtype hs_executor_stage_dtype(const struct hs_model *m, const struct hs_placement *plan,
                                      const struct hs_executor_opts *o, int i)
{
    bool keep =
        plan->keep_f32[i] || (!o->no_quant_plan && m->quant && m->quant->dtype == o->dtype &&
                              i < HS_QUANT_MAX_STAGES && m->quant->keep_f32[i]);
    return keep ? HS_DTYPE_F32 : o->dtype;
}

hs_status hs_executor_create(const struct hs_model *m, const struct hs_placement *plan,
                             const struct hs_executor_opts *opts, struct hs_executor **out,
                             struct hs_error *err)
{
    if (!m || !plan || !out) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "executor: null");
    if (plan->n_stages != m->n_stages)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "executor: plan has %d stages, model %s has %d", plan->n_stages,
                            m->name, m->n_stages);
    struct hs_executor_opts o = opts ? *opts : (struct hs_executor_opts){0};
    if (o.batch_max <= 0) o.batch_max = 32;
    if (o.seq_max <= 0 || o.seq_max > m->config.max_seq_len) o.seq_max = m->config.max_seq_len;
    if (o.tokens_max <= 0) o.tokens_max = o.batch_max * o.seq_max;
    if (o.slots <= 0) o.slots = 1;
    if (o.tokens_max < o.seq_max)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "executor: tokens_max %d is below seq_max %d", o.tokens_max, o.seq_max);

    struct hs_executor *x = hs_calloc(1, sizeof *x);
    if (!x) return hs_error_set(err, HS_STATUS_NO_MEMORY, "executor: out of memory");
    x->model = m;
    x->opts = o;
    x->n_stages = m->n_stages;
    x->prep = hs_calloc((size_t)m->n_stages, sizeof(void *));
    x->stage_eng = hs_calloc((size_t)m->n_stages, sizeof(int));
    x->xfer = hs_calloc((size_t)o.slots, sizeof(float *));
    x->stage_bound = hs_calloc((size_t)m->n_stages, sizeof(int));
    x->gated = hs_calloc((size_t)o.slots, sizeof(bool));
    if (!x->prep || !x->stage_eng || !x->xfer || !x->stage_bound || !x->gated) goto oom;

    for (int i = 0; i < m->n_stages; i++) {
        hs_engine_t e = plan->engine[i];
        if (!e) {
            hs_executor_free(x);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "executor: stage %s has no engine",
                                m->stages[i].name);
        }
        int k = 0;
        while (k < x->n_eng && x->eng[k].engine != e) k++;
        if (k == x->n_eng) {
            if (x->n_eng == HS_EXEC_MAX_ENGINES) {
                hs_executor_free(x);
                return hs_error_set(err, HS_STATUS_UNSUPPORTED, "executor: too many engines");
            }
            x->eng[x->n_eng++].engine = e;
        }
        x->stage_eng[i] = k;
        /* before any workspace: an engine that cannot run the stage (one that runs none here,
         * remote; a dtype its device lacks) is refused by name */
        const enum hs_dtype dt = hs_executor_stage_dtype(m, plan, &o, i);
        if (!hs_engine_supports(e, m->stages[i].kind, dt, 1, 1)) {
            struct hs_engine_caps caps;
            hs_engine_caps(e, &caps);
            hs_executor_free(x);
            if (!caps.stages)
                return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                    "executor: engine %s (kind %s) runs no stages on this machine",
                                    hs_engine_name(e), hs_engine_kind(e));
            return hs_error_set(
                err, HS_STATUS_UNSUPPORTED,
                "executor: engine %s (kind %s, device %s) cannot run stage %s in %s",
                hs_engine_name(e), hs_engine_kind(e), caps.device, m->stages[i].name,
                hs_compute_dtype_name(dt));
        }
    }
    /* the boundaries: each ordered pair of engines that hands an activation over */
    for (int i = 0; i < m->n_stages; i++) {
        x->stage_bound[i] = -1;
        if (i == 0 || x->stage_eng[i] == x->stage_eng[i - 1]) continue;
        int a = x->stage_eng[i - 1], b = x->stage_eng[i], k = 0;
        while (k < x->n_bound && !(x->bound_from[k] == a && x->bound_to[k] == b)) k++;
        if (k == HS_EXEC_MAX_BOUNDARIES) {
            hs_executor_free(x);
            return hs_error_set(err, HS_STATUS_UNSUPPORTED, "executor: too many boundaries");
        }
        if (k == x->n_bound) {
            x->bound_from[k] = a;
            x->bound_to[k] = b;
            x->n_bound++;
        }
        x->stage_bound[i] = k;
    }
    const size_t hidden = (size_t)m->config.dims.hidden;
    int multi = x->n_eng > 1;
    for (int s = 0; s < o.slots && multi; s++) {
        const size_t pooled = (size_t)o.batch_max * (size_t)hs_pooled_dim(&m->config.dims);
        const size_t tokens = (size_t)o.tokens_max * hidden;
        x->xfer[s] = hs_malloc_aligned(sizeof(float) * (tokens > pooled ? tokens : pooled), 64);
        if (!x->xfer[s]) goto oom;
    }
    struct hs_ws_spec spec = {.batch_max = o.batch_max,
                              .tokens_max = o.tokens_max,
                              .seq_max = o.seq_max,
                              .dims = &m->config.dims};
    for (int k = 0; k < x->n_eng && o.pipeline && multi; k++) {
        struct engine_hold *h = hs_calloc(1, sizeof *h);
        if (!h) goto oom;
        if (pthread_mutex_init(&h->mu, NULL)) {
            hs_free(h);
            goto oom;
        }
        if (pthread_cond_init(&h->cv, NULL)) {
            pthread_mutex_destroy(&h->mu);
            hs_free(h);
            goto oom;
        }
        x->eng[k].hold = h;
    }
    for (int k = 0; k < x->n_eng; k++) {
        spec.dtypes = 0; /* what this engine's stages compute in */
        for (int i = 0; i < m->n_stages; i++)
            if (x->stage_eng[i] == k) spec.dtypes |= 1u << hs_executor_stage_dtype(m, plan, &o, i);
        x->eng[k].ws = hs_calloc((size_t)o.slots, sizeof(void *));
        if (!x->eng[k].ws) goto oom;
        for (int s = 0; s < o.slots; s++) {
            hs_status st = hs_engine_ws_create(x->eng[k].engine, &spec, &x->eng[k].ws[s], err);
            if (st != HS_STATUS_OK) {
                hs_executor_free(x);
                return st;
            }
        }
    }
    for (int i = 0; i < m->n_stages; i++) {
        enum hs_dtype dtype = hs_executor_stage_dtype(m, plan, &o, i);
        hs_status st = hs_engine_stage_prepare(x->eng[x->stage_eng[i]].engine, &m->stages[i], dtype,
                                               &x->prep[i], err);
        if (st != HS_STATUS_OK) {
            hs_executor_free(x);
            return st;
        }
    }
    if (o.preempt) {
        if (o.slots < 2 || hs_executor_pipelined(x)) {
            hs_executor_free(x);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "executor: preempt needs slots >= 2 (has %d) and no pipelined "
                                "split",
                                o.slots);
        }
        x->pre = hs_calloc(1, sizeof *x->pre);
        if (!x->pre) goto oom;
        if (pthread_mutex_init(&x->pre->mu, NULL)) {
            hs_free(x->pre);
            x->pre = NULL;
            goto oom;
        }
        if (pthread_cond_init(&x->pre->cv, NULL)) {
            pthread_mutex_destroy(&x->pre->mu);
            hs_free(x->pre);
            x->pre = NULL;
            goto oom;
        }
        atomic_init(&x->pre->active, false);
    }
    *out = x;
    return HS_STATUS_OK;
oom:
    hs_executor_free(x);
    return hs_error_set(err, HS_STATUS_NO_MEMORY, "executor: out of memory");
}

/* Whether batch b fits x's workspaces (INVALID_ARGUMENT saying why). */
static hs_status batch_fits(const struct hs_executor *x, const struct hs_batch *b, const float *out,
                            struct hs_error *err)
{
    if (!b || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "executor_run: bad argument");
    if (b->n_seqs < 1 || b->n_seqs > x->opts.batch_max || b->n_tokens > x->opts.tokens_max)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "executor_run: batch of %d sequences / %d tokens exceeds %d / %d",
                            b->n_seqs, b->n_tokens, x->opts.batch_max, x->opts.tokens_max);
    for (int i = 0; i < b->n_seqs; i++)
        if (b->lengths[i] < 1 || b->lengths[i] > x->opts.seq_max)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "executor_run: sequence %d has %d tokens (1..%d allowed)", i,
                                b->lengths[i], x->opts.seq_max);
    return HS_STATUS_OK;
}

hs_status hs_executor_run(struct hs_executor *x, int slot, const struct hs_batch *b, float *out,
                          struct hs_exec_timing *timing, struct hs_error *err)
{
    if (!x || slot < 0 || slot >= x->opts.slots)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "executor_run: bad argument");
    hs_status st = batch_fits(x, b, out, err);
    if (st != HS_STATUS_OK) {
        hs_executor_ungate(x, slot); /* a refused batch gives the pipeline's entry back */
        return st;
    }

    struct hs_exec_timing t = {0};
    t.n_boundaries = x->n_bound;
    const struct hs_model *m = x->model;
    /* preemption: the preempting slot announces itself and waits for the stages in flight; the
     * others pass the gate before each stage (NULL: no gate) */
    const bool preempting = x->pre && slot == x->opts.slots - 1;
    struct preempt_gate *gate = x->pre && !preempting ? x->pre : NULL;
    if (preempting) t.yield_wait_ns = preempt_begin(x->pre);
    int cur = -1;
    struct engine_hold *held = NULL; /* pipeline: the engine this batch holds */
    int64_t last_sync_ns = 0;        /* the sync that ended the current engine's run */
    int64_t last_sync_at_ns = 0;     /* when it started */
    for (int i = 0; i < x->n_stages; i++) {
        int k = x->stage_eng[i];
        struct exec_engine *ee = &x->eng[k];
        t.paused_ns += stage_enter(gate);
        if (k != cur) {
            int64_t t0 = hs_now_ns(), w0 = t0, waited = 0;
            if (cur < 0) {
                if (ee->hold && x->gated[slot]) { /* held since hs_executor_gate */
                    x->gated[slot] = false;
                    held = ee->hold;
                } else if (ee->hold) {
                    waited = hold_take(held = ee->hold);
                }
                st = hs_engine_batch_begin(ee->engine, ee->ws[slot], b, err);
                t.copy_in_ns += hs_now_ns() - t0 - waited;
            } else {
                /* the live activation is pooled once pooling has run, hidden before */
                enum hs_act_buf buf =
                    m->stages[i].kind == HS_STAGE_NORMALIZE ? HS_ACT_BUF_POOLED : HS_ACT_BUF_HIDDEN;
                struct exec_engine *prev = &x->eng[cur];
                st = hs_engine_act_read(prev->engine, prev->ws[slot], buf, x->xfer[slot], err);
                if (st == HS_STATUS_OK && ee->hold) {
                    w0 = hs_now_ns();
                    waited = hold_take(held = ee->hold);
                }
                if (st == HS_STATUS_OK)
                    st = hs_engine_batch_begin(ee->engine, ee->ws[slot], b, err);
                if (st == HS_STATUS_OK)
                    st = hs_engine_act_write(ee->engine, ee->ws[slot], buf, x->xfer[slot], err);
                int64_t dt = hs_now_ns() - t0 - waited;
                int bi = x->stage_bound[i];
                t.transfer_ns += dt;
                t.n_transfers++;
                t.boundary_copy_ns[bi] += dt;
                t.boundary_sync_ns[bi] += last_sync_ns;
                t.boundary_count[bi]++;
                if (t.n_handovers < HS_EXEC_MAX_HANDOVERS)
                    t.handovers[t.n_handovers++] = (struct hs_exec_handover){
                        .boundary = bi,
                        .sync_start_ns = last_sync_at_ns,
                        .copy_start_ns = t0,
                        .copy_end_ns = t0 + waited + dt,
                        .wait_start_ns = w0,
                        .wait_ns = waited,
                    };
            }
            t.wait_ns += waited;
            if (st != HS_STATUS_OK) {
                stage_leave(gate);
                break;
            }
            cur = k;
        }
        int64_t t0 = hs_now_ns();
        st = hs_engine_run_stage(ee->engine, ee->ws[slot], &m->stages[i], x->prep[i], err);
        /* end of this engine's run of stages: wait for it so compute time is honest; before a
         * pause too, so that a stage an engine queued asynchronously has ended when the
         * preempting batch starts */
        const bool last = i + 1 == x->n_stages || x->stage_eng[i + 1] != k;
        if (st == HS_STATUS_OK && (last || (gate && atomic_load(&gate->active)))) {
            int64_t t1 = hs_now_ns();
            st = hs_engine_sync(ee->engine, ee->ws[slot], err);
            if (last) {
                last_sync_ns = hs_now_ns() - t1;
                last_sync_at_ns = t1;
            }
            if (last && held) { /* the engine is free for the next batch; the copy out needs ws */
                hold_give(held);
                held = NULL;
            }
        }
        t.compute_ns += hs_now_ns() - t0;
        stage_leave(gate);
        if (st != HS_STATUS_OK) break;
    }
    if (held) hold_give(held);
    const bool ran = st == HS_STATUS_OK;
    if (ran) {
        int64_t t0 = hs_now_ns();
        st = hs_engine_act_read(x->eng[cur].engine, x->eng[cur].ws[slot], HS_ACT_BUF_POOLED, out,
                                err);
        t.copy_out_ns = hs_now_ns() - t0;
    }
    if (preempting) preempt_end(x->pre);
    if (ran && timing) *timing = t;
    return st;
}
