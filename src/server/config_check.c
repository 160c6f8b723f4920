/* The configuration's cross-field checks (names, references, kinds, dtypes, placements, slices,
 * pipelines, keys) and the look-ups over a checked configuration; the table's own ranges and
 * choices are checked in config.c (hs__config_check_keys). */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/sha256.h"
#include "engine/plugin.h"
#include "sched/router.h"

#define BAD(...) hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: " __VA_ARGS__)

int hs_config_lane_dtype(const struct hs_model_cfg *m, const struct hs_engine_cfg *e)
{
    if (m && m->dtype[0]) return hs_compute_dtype_parse(m->dtype);
    if (e->dtype[0]) return hs_compute_dtype_parse(e->dtype);
    const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
    return k ? (int)k->native : -1;
}

int hs_config_placement_split(const struct hs_model_cfg *m)
{
    return m->placement.n_layers > 0 || m->placement.attention[0] || m->placement.ffn[0];
}

int hs_config_lane_slots(const struct hs_model_cfg *m, const struct hs_engine_cfg *ec)
{
    int slots = ec->slots > 0 ? ec->slots : 1;
    const struct hs_placement_cfg *p = &m->placement;
    if (!p->pipeline || !hs_config_placement_split(m)) return slots;
    int n = p->n_layers ? 0 : 2; /* modules: two engines */
    for (int r = 0; r < p->n_layers; r++) {
        int seen = 0;
        for (int q = 0; q < r; q++) seen |= !strcmp(p->layers[q].engine, p->layers[r].engine);
        n += !seen;
    }
    /* one batch per engine, and one formed and waiting at the next boundary, so that no
     * engine idles while the batch after it waits for the next engine */
    return slots > n + 1 ? slots : n + 1;
}

int hs_config_lane_preempts(const struct hs_config *c, const struct hs_model_cfg *m)
{
    return c->scheduler.preempt && c->scheduler.fair &&
           !(m->placement.pipeline && hs_config_placement_split(m));
}

int hs_config_model_uses(const struct hs_model_cfg *m, const char *engine)
{
    const struct hs_placement_cfg *p = &m->placement;
    int on = !strcmp(m->engine, engine);
    for (int j = 0; j < m->n_engines; j++) on |= !strcmp(m->engines[j], engine);
    for (int r = 0; r < p->n_layers; r++) on |= !strcmp(p->layers[r].engine, engine);
    return on || !strcmp(p->attention, engine) || !strcmp(p->ffn, engine);
}

/* models[i].placement: engines configured and computing in the lane's dtype, layer ranges
 * without overlap or gap from layer 0 (that they reach the model's last layer is checked when
 * it loads), one lane. Errors name the key path. */
static hs_status check_placement(const struct hs_config *c, int i, struct hs_error *err)
{
    const struct hs_model_cfg *m = &c->models[i];
    const struct hs_placement_cfg *p = &m->placement;
    if (p->pipeline && !hs_config_placement_split(m))
        return BAD("models[%d].placement.pipeline: pipelines a split; this model has no layers or "
                   "modules placement",
                   i);
    if (!hs_config_placement_split(m)) return HS_STATUS_OK;
    if (p->n_layers && (p->attention[0] || p->ffn[0]))
        return BAD("models[%d].placement: layers or modules, not both", i);
    if (!p->n_layers && (!p->attention[0] || !p->ffn[0]))
        return BAD("models[%d].placement.modules: needs both attention and ffn", i);
    if (m->n_engines > 1)
        return BAD("models[%d].engines: a model with a split placement has one lane (on engine)",
                   i);
    const struct hs_engine_cfg *lane = hs_config_engine(c, m->engine);
    const char *names[HS_CONFIG_MAX_ENGINES + 2];
    char paths[HS_CONFIG_MAX_ENGINES + 2][64];
    int n = 0;
    for (int r = 0; r < p->n_layers; r++, n++) {
        names[n] = p->layers[r].engine;
        snprintf(paths[n], sizeof paths[n], "models[%d].placement.layers[%d].engine", i, r);
    }
    if (!p->n_layers) {
        names[n] = p->attention;
        snprintf(paths[n++], sizeof paths[0], "models[%d].placement.modules.attention", i);
        names[n] = p->ffn;
        snprintf(paths[n++], sizeof paths[0], "models[%d].placement.modules.ffn", i);
    }
    bool lane_named = false;
    for (int k = 0; k < n; k++) {
        const struct hs_engine_cfg *e = hs_config_engine(c, names[k]);
        if (!e) return BAD("%s: engine '%s' is not configured", paths[k], names[k]);
        if (e->slices > 1)
            return BAD("%s: engine '%s' has %d slices; the engines of a split placement cannot be "
                       "sliced (yet)",
                       paths[k], names[k], e->slices);
        lane_named |= !strcmp(names[k], m->engine);
        const struct hs_engine_kind *kind = hs_engine_kind_find(e->kind);
        int dt = hs_config_lane_dtype(m, lane ? lane : e);
        if (kind && dt >= 0 && !(kind->dtypes & (1u << dt)))
            return BAD("%s: the lane computes in %s, which a %s engine does not", paths[k],
                       hs_compute_dtype_name((enum hs_dtype)dt), kind->name);
    }
    if (!lane_named)
        return BAD("models[%d].engine: '%s' is not one of its placement's engines", i, m->engine);
    /* layer ranges, in any order: from 0, no gap, no overlap */
    for (int r = 0; r < p->n_layers; r++) {
        const struct hs_layer_range_cfg *a = &p->layers[r];
        if (a->to <= a->from)
            return BAD("models[%d].placement.layers[%d]: to (%d) must be above from (%d)", i, r,
                       a->to, a->from);
        for (int q = 0; q < r; q++)
            if (a->from < p->layers[q].to && p->layers[q].from < a->to)
                return BAD("models[%d].placement.layers[%d]: layers %d..%d overlap layers[%d] "
                           "(%d..%d)",
                           i, r, a->from, a->to - 1, q, p->layers[q].from, p->layers[q].to - 1);
    }
    for (int at = 0, left = p->n_layers; left > 0; left--) {
        int r = 0;
        while (r < p->n_layers && p->layers[r].from != at) r++;
        if (r == p->n_layers)
            return BAD("models[%d].placement.layers: no range starts at layer %d (a gap)", i, at);
        at = p->layers[r].to;
    }
    return HS_STATUS_OK;
}

/* engines[i].slices: a kind that slices (cpu: core sets), enough cores and threads to split,
 * no other engine named like one of its slices. */
static hs_status check_slices(const struct hs_config *c, int i, const struct hs_engine_kind *k,
                              struct hs_error *err)
{
    const struct hs_engine_cfg *e = &c->engines[i];
    if (e->slices <= 1) return HS_STATUS_OK;
    if (k->remote)
        return BAD("engines[%d].slices: engine '%s' is remote: it has a lane per worker slot "
                   "already (workers_max); slices are for local engines",
                   i, e->name);
    if (k->slice_by == HS_SLICE_NONE)
        return BAD("engines[%d].slices: engine '%s' (kind %s): this kind does not slice (cpu "
                   "engines slice into core sets, cuda engines into streams)",
                   i, e->name, k->name);
    if (k->slice_by == HS_SLICE_CORES && e->n_cores > 0 && e->slices > e->n_cores)
        return BAD("engines[%d].slices: %d slices need at least %d cores; engine '%s' has %d "
                   "(engines[%d].cores)",
                   i, e->slices, e->slices, e->name, e->n_cores, i);
    if (k->slice_by == HS_SLICE_CORES && e->threads > 0 && e->slices > e->threads)
        return BAD("engines[%d].slices: %d threads cannot be split into %d slices (engine '%s')", i,
                   e->threads, e->slices, e->name);
    size_t len = strlen(e->name);
    if (len + (e->slices > 10 ? 3 : 2) >= sizeof e->name)
        return BAD("engines[%d].name: '%s' leaves no room for its slices' names (<name>/<k>, at "
                   "most %zu characters)",
                   i, e->name, sizeof e->name - 1);
    for (int j = 0; j < c->n_engines; j++)
        if (j != i && !strncmp(c->engines[j].name, e->name, len) && c->engines[j].name[len] == '/')
            return BAD("engines[%d].name: '%s' is also the name of a slice of engine '%s' "
                       "(engines[%d].slices)",
                       j, c->engines[j].name, e->name, i);
    return HS_STATUS_OK;
}

/* engines[i].borrow_cores: a kind that lends cores, an engine pinned to its own and not
 * sliced, each borrowed core pinned to another engine of the kind and not to this one. */
static hs_status check_borrow(const struct hs_config *c, int i, const struct hs_engine_kind *k,
                              struct hs_error *err)
{
    const struct hs_engine_cfg *e = &c->engines[i];
    if (e->borrow_preempt && e->n_borrow_cores == 0)
        return BAD("engines[%d].borrow_preempt: engine '%s' borrows no cores (borrow_cores)", i,
                   e->name);
    if (e->n_borrow_cores == 0) return HS_STATUS_OK;
    if (!k->lends_cores)
        return BAD("engines[%d].borrow_cores: engine '%s' (kind %s): this kind does not borrow "
                   "cores (cpu engines do)",
                   i, e->name, k->name);
    if (e->n_cores == 0)
        return BAD("engines[%d].borrow_cores: engine '%s' borrows cores but is not pinned to its "
                   "own (engines[%d].cores)",
                   i, e->name, i);
    if (e->slices > 1)
        return BAD("engines[%d].borrow_cores: engine '%s' has %d slices; an engine that borrows "
                   "cores has one",
                   i, e->name, e->slices);
    for (int b = 0; b < e->n_borrow_cores; b++) {
        const int core = e->borrow_cores[b];
        int owner = -1;
        for (int j = 0; j < c->n_engines && owner < 0; j++) {
            const struct hs_engine_cfg *o = &c->engines[j];
            const struct hs_engine_kind *ok = hs_engine_kind_find(o->kind);
            if (!ok || !ok->lends_cores) continue;
            for (int q = 0; q < o->n_cores; q++)
                if (o->cores[q] == core) owner = j;
        }
        if (owner == i)
            return BAD("engines[%d].borrow_cores[%d]: core %d is one of engine '%s''s own", i, b,
                       core, e->name);
        if (owner < 0)
            return BAD("engines[%d].borrow_cores[%d]: no cpu engine is pinned to core %d: there "
                       "is nobody to borrow it from (pin '%s' to it instead)",
                       i, b, core, e->name);
        for (int q = 0; q < b; q++)
            if (e->borrow_cores[q] == core)
                return BAD("engines[%d].borrow_cores[%d]: core %d is listed twice", i, b, core);
        /* two engines preempting each other's cores would each yield to the other's claim */
        const struct hs_engine_cfg *o = &c->engines[owner];
        for (int q = 0; e->borrow_preempt && o->borrow_preempt && q < o->n_borrow_cores; q++)
            for (int r = 0; r < e->n_cores; r++)
                if (o->borrow_cores[q] == e->cores[r])
                    return BAD("engines[%d].borrow_preempt: engine '%s' preempts core %d of "
                               "engine '%s', which preempts core %d of '%s': one of them may "
                               "preempt, not both",
                               i, e->name, core, o->name, e->cores[r], e->name);
    }
    return HS_STATUS_OK;
}

int hs_config_slice(const struct hs_engine_cfg *e, int k, const int *avail, int n_avail,
                    int cores[HS_ENGINE_MAX_CORES], int *threads)
{
    const struct hs_engine_kind *kind = hs_engine_kind_find(e->kind);
    if (kind && kind->slice_by == HS_SLICE_STREAMS) { /* every slice: the engine's own */
        for (int i = 0; i < e->n_cores && i < HS_ENGINE_MAX_CORES; i++) cores[i] = e->cores[i];
        *threads = e->threads;
        return e->n_cores < HS_ENGINE_MAX_CORES ? e->n_cores : HS_ENGINE_MAX_CORES;
    }
    const int n = e->slices > 1 ? e->slices : 1;
    const int *set = e->n_cores > 0 ? e->cores : avail;
    /* unpinned: the process's cores, shared out between slices, or spread over (one slice) */
    const bool spread = e->spread && kind && kind->slice_by == HS_SLICE_CORES &&
                        (e->threads > 0 ? e->threads : n_avail) > 1;
    const int n_set = e->n_cores > 0 ? e->n_cores : n == 1 && !spread ? 0 : n_avail;
    /* shares as equal as they go, the first ones one larger */
    const int from = k * (n_set / n) + (k < n_set % n ? k : n_set % n);
    const int count = n_set / n + (k < n_set % n);
    for (int i = 0; i < count && i < HS_ENGINE_MAX_CORES; i++) cores[i] = set[from + i];
    *threads = e->threads > 0 ? e->threads / n + (k < e->threads % n) : 0;
    return count < HS_ENGINE_MAX_CORES ? count : HS_ENGINE_MAX_CORES;
}

void hs_config_slice_name(const struct hs_engine_cfg *e, int k, char *buf, size_t n)
{
    if (e->slices > 1)
        snprintf(buf, n, "%s/%d", e->name, k);
    else
        snprintf(buf, n, "%s", e->name);
}

/* Lane (model m on engine index e, split engines included) against e's device claims. */
static hs_status lane_on_device(const struct hs_config *c, const struct hs_model_cfg *m,
                                const struct hs_engine_cfg *lane, const struct hs_engine_cfg *on,
                                const struct hs_engine_caps *caps, struct hs_error *err)
{
    const struct hs_engine_caps *dc = &caps[on - c->engines];
    const int dt = hs_config_lane_dtype(m, lane);
    if (!dc->stages || dt < 0 || (dc->dtypes & (1u << dt))) return HS_STATUS_OK;
    char has[64];
    hs_engine_dtype_names(dc->dtypes, has, sizeof has);
    return BAD("model '%s' on engine '%s': the lane computes in %s, which this engine's device (%s "
               "%s) does not; it computes in %s (hetserve devices lists each device's dtypes)",
               m->name[0] ? m->name : m->path, on->name, hs_compute_dtype_name((enum hs_dtype)dt),
               dc->kind, dc->device, has);
}

hs_status hs_config_check_devices(const struct hs_config *c, const struct hs_engine_caps *caps,
                                  struct hs_error *err)
{
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        const int n = m->n_engines ? m->n_engines : 1;
        for (int j = 0; j < n; j++) {
            const struct hs_engine_cfg *e =
                hs_config_engine(c, m->n_engines ? m->engines[j] : m->engine);
            hs_status st = e ? lane_on_device(c, m, e, e, caps, err) : HS_STATUS_OK;
            if (st) return st;
        }
        const struct hs_placement_cfg *p = &m->placement;
        const struct hs_engine_cfg *lane = hs_config_engine(c, m->engine);
        const char *names[HS_CONFIG_MAX_ENGINES + 2];
        int np = 0;
        for (int r = 0; r < p->n_layers && np < HS_CONFIG_MAX_ENGINES; r++)
            names[np++] = p->layers[r].engine;
        if (!p->n_layers && p->attention[0]) names[np++] = p->attention;
        if (!p->n_layers && p->ffn[0]) names[np++] = p->ffn;
        for (int k = 0; k < np && lane; k++) {
            const struct hs_engine_cfg *e = hs_config_engine(c, names[k]);
            hs_status st = e ? lane_on_device(c, m, lane, e, caps, err) : HS_STATUS_OK;
            if (st) return st;
        }
    }
    return HS_STATUS_OK;
}

hs_status hs_config_validate(const struct hs_config *c, struct hs_error *err)
{
    hs_status st = hs__config_check_keys("", (const char *)c, "", err);
    if (st) return st;
    if (c->n_engines < 1) return BAD("no engines");
    if (c->n_models < 1) return BAD("no models");
    if ((st = hs__config_pipelines_check(c, err))) return st;
    if (c->scheduler.preempt && !c->scheduler.fair)
        return BAD("scheduler.preempt: needs scheduler.fair (it runs the work tenants are owed)");
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *e = &c->engines[i];
        if (c->scheduler.preempt && e->slots >= HS_SCHED_MAX_SLOTS)
            return BAD("engines[%d].slots: %d with scheduler.preempt, which adds one (at most %d "
                       "in all)",
                       i, e->slots, HS_SCHED_MAX_SLOTS);
        for (int k = 0; k < i; k++)
            if (!strcmp(e->name, c->engines[k].name))
                return BAD("engine name '%s' used twice", e->name);
        const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
        if (!k) {
            char known[256];
            hs_engine_kind_names(known, sizeof known);
            return BAD("engine '%s': unknown kind '%s' (known: %s)", e->name, e->kind, known);
        }
        int sources = (e->n_endpoints > 0) + !!e->dns[0] + !!e->endpoints_file[0];
        if (k->remote && sources != 1)
            return BAD("engine '%s' (kind remote): give its workers as one of endpoints, dns or "
                       "endpoints_file",
                       e->name);
        if (!k->remote && sources)
            return BAD("engine '%s': endpoints, dns and endpoints_file are for kind remote",
                       e->name);
        if (k->remote && e->n_endpoints > 0 && e->workers_max > 0 &&
            e->workers_max < e->n_endpoints)
            return BAD("engine '%s': workers_max %d is below its %d endpoints", e->name,
                       e->workers_max, e->n_endpoints);
        if (k->remote ? !strcmp(c->server.role, "worker") : !strcmp(c->server.role, "router"))
            return BAD("engine '%s' (kind %s): a %s has %s", e->name, e->kind, c->server.role,
                       k->remote ? "local engines only" : "remote engines only");
        int dt = e->dtype[0] ? hs_compute_dtype_parse(e->dtype) : (int)k->native;
        if (dt < 0 || !(k->dtypes & (1u << dt)))
            return BAD("engine '%s': dtype '%s' is not one a %s engine computes in (hetserve "
                       "devices lists them)",
                       e->name, e->dtype, k->name);
        if ((st = check_slices(c, i, k, err))) return st;
        if ((st = check_borrow(c, i, k, err))) return st;
    }
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        const char *mn = m->name[0] ? m->name : m->path;
        int n = m->n_engines ? m->n_engines : 1;
        for (int j = 0; j < n; j++) {
            const char *en = m->n_engines ? m->engines[j] : m->engine;
            if (!hs_config_engine(c, en))
                return BAD("model '%s' names engine '%s', which is not configured", mn, en);
            for (int k = 0; k < j; k++)
                if (!strcmp(m->engines[k], en))
                    return BAD("model '%s' names engine '%s' twice", mn, en);
        }
        if (m->dtype[0] && hs_compute_dtype_parse(m->dtype) < 0)
            return BAD("model '%s': dtype '%s' (f32, f16, bf16 or int8)", mn, m->dtype);
        if ((st = check_placement(c, i, err))) return st;
        for (int j = 0; j < n; j++) {
            const struct hs_engine_cfg *e =
                hs_config_engine(c, m->n_engines ? m->engines[j] : m->engine);
            const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
            int dt = hs_config_lane_dtype(m, e);
            if (k && dt >= 0 && !(k->dtypes & (1u << dt)))
                return BAD("model '%s' on engine '%s': a %s engine does not compute in %s", mn,
                           e->name, k->name, hs_compute_dtype_name((enum hs_dtype)dt));
        }
    }
    for (int i = 1; i < c->batching.n_buckets; i++)
        if (c->batching.buckets[i] <= c->batching.buckets[i - 1])
            return BAD("batching.buckets must be ascending");
    if (c->limits.timeout_ms > c->limits.timeout_max_ms)
        return BAD("limits.timeout_ms exceeds limits.timeout_max_ms");
    /* Routes: names unique, references resolvable. Which model a route's name means is
     * checked when the server knows the models' names. */
    for (int i = 0; i < c->n_routes; i++) {
        const struct hs_route_cfg *r = &c->routes[i];
        for (int k = 0; k < i; k++)
            if (!strcmp(r->name, c->routes[k].name))
                return BAD("route name '%s' used twice", r->name);
        if (!strcmp(r->name, "fallback"))
            return BAD("'fallback' is reserved for the fallback route");
        for (int k = 0; k < r->n_engines; k++)
            if (!hs_config_engine(c, r->engines[k]))
                return BAD("route '%s' names engine '%s', which is not configured", r->name,
                           r->engines[k]);
        const char *refs[] = {r->split_route, r->shadow_route, r->failover_route, r->small, r->big};
        for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
            if (refs[k][0] && hs_config_route(c, refs[k]) < 0)
                return BAD("route '%s' refers to route '%s', which is not configured", r->name,
                           refs[k]);
    }
    for (int i = 0; i < c->router.n_rules; i++)
        if (hs_config_route(c, c->router.rules[i].route) < 0)
            return BAD("router.rules[%d] names route '%s', which is not configured", i,
                       c->router.rules[i].route);
    if (c->router.default_route[0] && hs_config_route(c, c->router.default_route) < 0)
        return BAD("router.default_route '%s' is not configured", c->router.default_route);
    if (c->router.fallback_engine[0] && !hs_config_engine(c, c->router.fallback_engine))
        return BAD("router.fallback_engine '%s' is not configured", c->router.fallback_engine);
    for (int i = 0; i < c->auth.n_keys; i++) {
        uint8_t d[32];
        if (!hs_sha256_parse_hex(c->auth.keys[i].sha256, d))
            return BAD("auth.keys[%d].sha256: expected the 64 hex digits of the key's SHA-256 "
                       "(the key itself never goes in the config)",
                       i);
    }
    if (c->breaker.min_requests > c->breaker.window_requests)
        return BAD("breaker.min_requests exceeds breaker.window_requests");
    if (c->cascade.small[0] && !c->cascade.small_head[0])
        return BAD("cascade.small needs cascade.small_head");
    if (c->cascade.big[0] && (!c->cascade.big_head[0] || !c->cascade.small[0]))
        return BAD("cascade.big needs cascade.big_head and cascade.small");
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].kind, "cascade") &&
            (!c->routes[i].small[0] || !c->routes[i].big[0]))
            return BAD("route '%s': a cascade needs small and big routes", c->routes[i].name);
    /* One cascade: a route of kind cascade places the stages of the cascade section's. */
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].kind, "cascade") && !c->cascade.big[0])
            return BAD("route '%s' is a cascade, but the cascade section names no big model "
                       "(cascade.small, cascade.big and their heads configure it)",
                       c->routes[i].name);
    return HS_STATUS_OK;
}

const struct hs_engine_cfg *hs_config_engine(const struct hs_config *c, const char *name)
{
    for (int i = 0; i < c->n_engines; i++)
        if (!strcmp(c->engines[i].name, name)) return &c->engines[i];
    return NULL;
}

int hs_config_route(const struct hs_config *c, const char *name)
{
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, name)) return i;
    return -1;
}
