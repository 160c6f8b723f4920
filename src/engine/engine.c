/* Engine wrappers: argument checks, defaults for optional methods, statistics, fault injection.
 * Every call into an implementation goes through here. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

struct hs_engine {
    const struct hs_engine_iface *iface;
    void *ctx;
    char name[32];
    pthread_mutex_t lock;    /* guards stats and fault */
    pthread_cond_t fault_cv; /* a hung run_stage waits here; set_fault wakes it */
    uint64_t fault_gen;      /* bumped by every set_fault */
    struct hs_engine_stats stats;
    struct hs_engine_fault fault;
};

/* An engine that runs no stage here (remote: its batches go to workers) has no per-batch
 * methods: a call that reaches one is refused, never made through a NULL pointer. */
static hs_status no_method(hs_engine_t e, const char *what, struct hs_error *err)
{
    return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                        "engine %s (kind %s) has no %s: it runs no stages on this machine", e->name,
                        e->iface->kind, what);
}

hs_status hs__engine_wrap(const struct hs_engine_iface *iface, void *ctx, const char *name,
                          hs_engine_t *out, struct hs_error *err)
{
    HS_ASSERT(iface && out);
    if (iface->api_version < 1 || iface->api_version > HS_ENGINE_API_VERSION)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "engine %s: api_version %d not supported",
                            iface->kind, iface->api_version);
    /* an engine that claims stages has every per-batch method; one that claims none (remote)
     * may have none of them, and the wrappers refuse those calls */
    struct hs_engine_caps c;
    memset(&c, 0, sizeof c);
    if (iface->caps) iface->caps(ctx, &c);
    const char *missing = !iface->caps            ? "caps"
                          : !c.stages             ? NULL
                          : !iface->stage_prepare ? "stage_prepare"
                          : !iface->ws_create     ? "ws_create"
                          : !iface->ws_destroy    ? "ws_destroy"
                          : !iface->batch_begin   ? "batch_begin"
                          : !iface->run_stage     ? "run_stage"
                          : !iface->act_read      ? "act_read"
                          : !iface->act_write     ? "act_write"
                                                  : NULL;
    if (missing) {
        if (iface->destroy) iface->destroy(ctx);
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "engine %s: its interface has no %s method, which an engine that "
                            "runs stages needs",
                            iface->kind, missing);
    }
    struct hs_engine *e = hs_calloc(1, sizeof *e);
    if (!e) {
        if (iface->destroy) iface->destroy(ctx);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "engine %s: out of memory", iface->kind);
    }
    e->iface = iface;
    e->ctx = ctx;
    snprintf(e->name, sizeof e->name, "%s", name && *name ? name : iface->kind);
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->fault_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = e;
    return HS_STATUS_OK;
}

void hs_engine_destroy(hs_engine_t e)
{
    if (!e) return;
    if (e->iface->destroy) e->iface->destroy(e->ctx);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->fault_cv);
    hs_free(e);
}

const char *hs_engine_name(hs_engine_t e)
{
    return e->name;
}
const char *hs_engine_kind(hs_engine_t e)
{
    return e->iface->kind;
}

void hs_engine_caps(hs_engine_t e, struct hs_engine_caps *out)
{
    memset(out, 0, sizeof *out);
    e->iface->caps(e->ctx, out);
}

bool hs_engine_supports(hs_engine_t e, enum hs_stage_kind kind, enum hs_dtype dtype, int batch,
                        int seq)
{
    if (e->iface->supports) return e->iface->supports(e->ctx, kind, dtype, batch, seq);
    struct hs_engine_caps c;
    hs_engine_caps(e, &c);
    if (!(c.stages & (1u << kind)) || !(c.dtypes & (1u << dtype))) return false;
    if (c.batch_max > 0 && batch > c.batch_max) return false;
    if (c.seq_max > 0 && seq > c.seq_max) return false;
    return true;
}

/* Shared stage preparations: one per (kind, key, stage, dtype), reference-counted. */
struct shared_prep {
    const struct hs_engine_iface *iface;
    uint64_t key;
    const struct hs_stage *stage;
    enum hs_dtype dtype;
    void *prep;
    int refs;
    struct shared_prep *next;
};
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared_prep *shared_list;
static int64_t shared_hits;

void hs_engine_prep_counts(int *alive, int64_t *hits)
{
    pthread_mutex_lock(&shared_mu);
    int n = 0;
    for (struct shared_prep *p = shared_list; p; p = p->next) n++;
    if (alive) *alive = n;
    if (hits) *hits = shared_hits;
    pthread_mutex_unlock(&shared_mu);
}

static hs_status prepare_checked(hs_engine_t e, const struct hs_stage *st, enum hs_dtype dtype,
                                 void **prep, struct hs_error *err);

hs_status hs_engine_stage_prepare(hs_engine_t e, const struct hs_stage *st, enum hs_dtype dtype,
                                  void **prep, struct hs_error *err)
{
    if (!st || !prep || !st->dims)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "stage_prepare: null argument");
    if (!e->iface->prep_key) return prepare_checked(e, st, dtype, prep, err);
    const uint64_t key = e->iface->prep_key(e->ctx);
    /* held across the prepare so that two lanes loading at once make one preparation */
    pthread_mutex_lock(&shared_mu);
    for (struct shared_prep *p = shared_list; p; p = p->next)
        if (p->iface == e->iface && p->key == key && p->stage == st && p->dtype == dtype) {
            p->refs++;
            shared_hits++;
            *prep = p->prep;
            pthread_mutex_unlock(&shared_mu);
            return HS_STATUS_OK;
        }
    struct shared_prep *p = hs_calloc(1, sizeof *p);
    hs_status s = p ? prepare_checked(e, st, dtype, prep, err)
                    : hs_error_set(err, HS_STATUS_NO_MEMORY, "stage_prepare: out of memory");
    if (s == HS_STATUS_OK && *prep) {
        *p = (struct shared_prep){e->iface, key, st, dtype, *prep, 1, shared_list};
        shared_list = p;
    } else {
        hs_free(p);
    }
    pthread_mutex_unlock(&shared_mu);
    return s;
}

static hs_status prepare_checked(hs_engine_t e, const struct hs_stage *st, enum hs_dtype dtype,
                                 void **prep, struct hs_error *err)
{
    if (!st || !prep || !st->dims)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "stage_prepare: null argument");
    if (!hs_engine_supports(e, st->kind, dtype, 1, 1))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "engine %s cannot run stage %s in %s",
                            e->name, st->name, hs_compute_dtype_name(dtype));
    const uint32_t need = hs_stage_features(st);
    if (need) {
        struct hs_engine_caps c;
        hs_engine_caps(e, &c);
        const uint32_t missing = need & ~c.features;
        if (missing) {
            char names[512];
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "engine %s cannot run stage %s: it does not implement %s", e->name,
                                st->name, hs_stage_features_str(missing, names, sizeof names));
        }
    }
    *prep = NULL;
    if (!e->iface->stage_prepare) return no_method(e, "stage_prepare", err);
    return e->iface->stage_prepare(e->ctx, st, dtype, prep, err);
}

void hs_engine_stage_release(hs_engine_t e, void *prep)
{
    if (!prep) return;
    if (e->iface->prep_key) {
        pthread_mutex_lock(&shared_mu);
        for (struct shared_prep **pp = &shared_list; *pp; pp = &(*pp)->next) {
            struct shared_prep *p = *pp;
            if (p->prep != prep) continue;
            if (--p->refs > 0) {
                pthread_mutex_unlock(&shared_mu);
                return;
            }
            *pp = p->next;
            hs_free(p);
            break;
        }
        pthread_mutex_unlock(&shared_mu);
    }
    if (e->iface->stage_release) e->iface->stage_release(e->ctx, prep);
}

hs_status hs_engine_ws_create(hs_engine_t e, const struct hs_ws_spec *spec, void **ws,
                              struct hs_error *err)
{
    if (!spec || !ws || !spec->dims || spec->batch_max < 1 || spec->tokens_max < 1 ||
        spec->seq_max < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "ws_create: invalid spec");
    *ws = NULL;
    if (!e->iface->ws_create) return no_method(e, "workspaces", err);
    return e->iface->ws_create(e->ctx, spec, ws, err);
}

void hs_engine_ws_destroy(hs_engine_t e, void *ws)
{
    if (ws && e->iface->ws_destroy) e->iface->ws_destroy(e->ctx, ws);
}

static void add_stat(hs_engine_t e, int64_t *field, int64_t v)
{
    pthread_mutex_lock(&e->lock);
    *field += v;
    pthread_mutex_unlock(&e->lock);
}

static hs_status count_error(hs_engine_t e, hs_status s)
{
    if (s != HS_STATUS_OK) add_stat(e, &e->stats.errors, 1);
    return s;
}

hs_status hs_engine_batch_begin(hs_engine_t e, void *ws, const struct hs_batch *b,
                                struct hs_error *err)
{
    if (!ws || !b || b->n_seqs < 1 || b->n_tokens < 1 || !b->ids || !b->lengths || !b->offsets)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "batch_begin: invalid batch");
    if (!e->iface->batch_begin) return count_error(e, no_method(e, "batch_begin", err));
    int64_t t0 = hs_now_ns();
    hs_status s = e->iface->batch_begin(e->ctx, ws, b, err);
    int64_t dt = hs_now_ns() - t0;
    pthread_mutex_lock(&e->lock);
    e->stats.copy_in_ns += dt;
    e->stats.busy_ns += dt;
    if (s == HS_STATUS_OK) {
        e->stats.batches++;
        e->stats.sequences += b->n_seqs;
        e->stats.tokens += b->n_tokens;
    } else {
        e->stats.errors++;
    }
    pthread_mutex_unlock(&e->lock);
    return s;
}

hs_status hs_engine_act_write(hs_engine_t e, void *ws, enum hs_act_buf buf, const float *src,
                              struct hs_error *err)
{
    if (!ws || !src) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "act_write: null");
    if (!e->iface->act_write) return count_error(e, no_method(e, "act_write", err));
    int64_t t0 = hs_now_ns();
    hs_status s = e->iface->act_write(e->ctx, ws, buf, src, err);
    int64_t dt = hs_now_ns() - t0;
    pthread_mutex_lock(&e->lock);
    e->stats.copy_in_ns += dt;
    e->stats.busy_ns += dt;
    pthread_mutex_unlock(&e->lock);
    return count_error(e, s);
}

/* Busy-waits: a slowed engine must keep its core busy, as a slow device would. */
static void spin_until(int64_t t_end)
{
    while (hs_now_ns() < t_end) {
    }
}

/* A hung device (e->lock held): blocks (without spinning) until the hang elapses or the fault is
 * replaced, whichever comes first. */
static void fault_hang(struct hs_engine *e)
{
    if (e->fault.hang_ms <= 0) return;
    uint64_t gen = e->fault_gen;
    int64_t until = hs_now_ns() + (int64_t)e->fault.hang_ms * 1000000;
    struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
    while (e->fault_gen == gen && hs_now_ns() < until)
        pthread_cond_timedwait(&e->fault_cv, &e->lock, &ts);
}

hs_status hs_engine_run_stage(hs_engine_t e, void *ws, const struct hs_stage *st, void *prep,
                              struct hs_error *err)
{
    if (!ws || !st) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "run_stage: null");
    if (!e->iface->run_stage) return count_error(e, no_method(e, "run_stage", err));
    double slow = 1.0;
    pthread_mutex_lock(&e->lock);
    if (e->fault.fail_next > 0) {
        e->fault.fail_next--;
        e->stats.errors++;
        pthread_mutex_unlock(&e->lock);
        return hs_error_set(err, HS_STATUS_ENGINE, "engine %s: injected fault in %s", e->name,
                            st->name);
    }
    if (e->fault.slow_factor > 1.0) slow = e->fault.slow_factor;
    fault_hang(e);
    pthread_mutex_unlock(&e->lock);

    int64_t t0 = hs_now_ns();
    hs_status s = e->iface->run_stage(e->ctx, ws, st, prep, err);
    int64_t dt = hs_now_ns() - t0;
    if (slow > 1.0) {
        spin_until(t0 + (int64_t)((double)dt * slow));
        dt = hs_now_ns() - t0;
    }
    pthread_mutex_lock(&e->lock);
    e->stats.compute_ns += dt;
    e->stats.busy_ns += dt;
    pthread_mutex_unlock(&e->lock);
    return count_error(e, s);
}

hs_status hs_engine_act_read(hs_engine_t e, void *ws, enum hs_act_buf buf, float *dst,
                             struct hs_error *err)
{
    if (!ws || !dst) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "act_read: null");
    if (!e->iface->act_read) return count_error(e, no_method(e, "act_read", err));
    int64_t t0 = hs_now_ns();
    hs_status s = e->iface->act_read(e->ctx, ws, buf, dst, err);
    int64_t dt = hs_now_ns() - t0;
    pthread_mutex_lock(&e->lock);
    e->stats.copy_out_ns += dt;
    e->stats.busy_ns += dt;
    pthread_mutex_unlock(&e->lock);
    return count_error(e, s);
}

hs_status hs_engine_sync(hs_engine_t e, void *ws, struct hs_error *err)
{
    if (!e->iface->sync) return HS_STATUS_OK;
    return count_error(e, e->iface->sync(e->ctx, ws, err));
}

void hs_engine_stats(hs_engine_t e, struct hs_engine_stats *out)
{
    pthread_mutex_lock(&e->lock);
    *out = e->stats;
    pthread_mutex_unlock(&e->lock);
}

void hs_engine_set_fault(hs_engine_t e, const struct hs_engine_fault *fault)
{
    pthread_mutex_lock(&e->lock);
    if (fault)
        e->fault = *fault;
    else
        memset(&e->fault, 0, sizeof e->fault);
    e->fault_gen++;
    pthread_cond_broadcast(&e->fault_cv);
    pthread_mutex_unlock(&e->lock);
}

void hs_engine_get_fault(hs_engine_t e, struct hs_engine_fault *out)
{
    pthread_mutex_lock(&e->lock);
    *out = e->fault;
    pthread_mutex_unlock(&e->lock);
}

hs_status hs_engine_create(const char *kind, const struct hs_engine_opts *opts, hs_engine_t *out,
                           struct hs_error *err)
{
    struct hs_engine_opts defaults = {0};
    if (!opts) opts = &defaults;
    if (!kind || !out) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "engine_create: null");
    const struct hs_engine_kind *k = hs_engine_kind_find(kind);
    if (!k) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "unknown engine kind '%s'", kind);
    if (!hs_engine_kind_built(k))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "this build has no %s engine (and no engine plugin provides it)", kind);
    if (opts->device < 0)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s: device %d", kind, opts->device);
    return k->create(opts, out, err);
}

/* ---- whole-graph stages ---- */

hs_status hs_engine_graph_load(hs_engine_t e, const char *path, void **graph, struct hs_error *err)
{
    if (!path || !graph) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "graph_load: null");
    *graph = NULL;
    struct hs_engine_caps c = {0};
    hs_engine_caps(e, &c);
    if (!(c.features & HS_ENGINE_FEAT_GRAPH_ONNX) || !e->iface->graph_load || !e->iface->graph_run)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "engine %s (kind %s) does not run ONNX graphs (capability graph_onnx), "
                            "so it cannot run %s: use an engine that has it (openvino)",
                            e->name, e->iface->kind, path);
    return count_error(e, e->iface->graph_load(e->ctx, path, graph, err));
}

void hs_engine_graph_release(hs_engine_t e, void *graph)
{
    if (graph && e->iface->graph_release) e->iface->graph_release(e->ctx, graph);
}

hs_status hs_engine_graph_run(hs_engine_t e, void *graph, const struct hs_graph_tensor *in,
                              int n_in, struct hs_graph_tensor *out, int n_out,
                              struct hs_error *err)
{
    if (!graph || !in || !out || n_in < 1 || n_out < 1 || !e->iface->graph_run)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "graph_run: null");
    double slow = 1.0;
    pthread_mutex_lock(&e->lock);
    if (e->fault.fail_next > 0) {
        e->fault.fail_next--;
        e->stats.errors++;
        pthread_mutex_unlock(&e->lock);
        return hs_error_set(err, HS_STATUS_ENGINE, "engine %s: injected fault in a graph", e->name);
    }
    if (e->fault.slow_factor > 1.0) slow = e->fault.slow_factor;
    fault_hang(e);
    pthread_mutex_unlock(&e->lock);
    int64_t t0 = hs_now_ns();
    hs_status s = e->iface->graph_run(e->ctx, graph, in, n_in, out, n_out, err);
    int64_t dt = hs_now_ns() - t0;
    if (slow > 1.0) {
        spin_until(t0 + (int64_t)((double)dt * slow));
        dt = hs_now_ns() - t0;
    }
    pthread_mutex_lock(&e->lock);
    e->stats.batches++;
    e->stats.sequences += in[0].rank > 0 ? in[0].shape[0] : 1;
    e->stats.compute_ns += dt;
    e->stats.busy_ns += dt;
    pthread_mutex_unlock(&e->lock);
    return count_error(e, s);
}
