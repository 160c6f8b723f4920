/* hetserve — a configuration's lanes and routes (topology.h). */
#include "server/topology.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"

void hs_topo_lane_opts(const struct hs_config *c, const struct hs_engine_cfg *ec, const char *name,
                       const struct hs_model_config *mc, struct hs_lane_opts *o)
{
    o->model = name;
    o->dim = hs_pooled_dim(&mc->dims);
    o->seq_max = mc->max_seq_len;
    o->pad_id = mc->pad_token_id;
    o->batch_window_us =
        ec->batch_window_us >= 0 ? ec->batch_window_us : c->batching.batch_window_us;
    o->batch_window_when_idle = c->batching.batch_window_when_idle != 0;
    o->batch_max = ec->batch_max > 0 ? ec->batch_max : c->batching.batch_max;
    o->batch_max_tokens =
        ec->batch_max_tokens > 0 ? ec->batch_max_tokens : c->batching.batch_max_tokens;
    o->n_buckets = c->batching.n_buckets;
    memcpy(o->buckets, c->batching.buckets, sizeof c->batching.buckets);
    o->n_shapes = ec->n_shapes;
    memcpy(o->shapes, ec->shapes, sizeof ec->shapes);
    o->queue_max = ec->queue_max > 0 ? ec->queue_max : c->limits.queue_max;
    o->shed_batch_ratio = c->scheduler.shed_batch_ratio;
    o->fair = c->scheduler.fair != 0;
    o->fair_batch_us = c->scheduler.fair_batch_ms * 1000;
    o->over_share = c->scheduler.over_share;
    o->preempt = c->scheduler.preempt != 0 && o->fair;
    o->wait_max_ms = c->scheduler.wait_max_ms;
    o->throughput_init_tokens_per_s = c->scheduler.throughput_init_tokens_per_s;
    o->throughput_ewma_alpha = c->scheduler.throughput_ewma_alpha;
    o->slots = ec->slots > 0 ? ec->slots : 1;
}

/* Index of the served model a route names ("" = the first); -1 when none is. */
static int topo_model(const struct hs_topo *t, const char *name)
{
    if (!name || !*name) return 0;
    for (int i = 0; i < t->n_models; i++)
        if (!strcmp(t->model_names[i], name)) return i;
    return -1;
}

static bool lane_on(const struct hs_topo *t, int l, int m, const char *engine)
{
    return t->lane_model[l] == m && !strcmp(t->cfg->engines[t->lane_engine[l]].name, engine);
}

static int lane_of(const struct hs_topo *t, int m, const char *engine)
{
    for (int l = 0; l < t->n_lanes; l++)
        if (lane_on(t, l, m, engine)) return l;
    return -1;
}

static void route_all_lanes(const struct hs_topo *t, int m, struct hs_route *r)
{
    for (int l = 0; l < t->n_lanes && r->n_lanes < HS_ROUTE_MAX_LANES; l++)
        if (t->lane_model[l] == m) r->lanes[r->n_lanes++] = l;
}

hs_status hs_topo_router_opts(const struct hs_topo *t, struct hs_router_opts *o,
                              struct hs_error *err)
{
    const struct hs_config *c = t->cfg;
    memset(o, 0, sizeof *o);
    o->default_route = -1;
    o->fallback_lane = -1;
    if (c->n_routes == 0) {
        /* One route per model over every engine it is on. */
        for (int m = 0; m < t->n_models; m++) {
            struct hs_route *r = &o->routes[o->n_routes++];
            snprintf(r->name, sizeof r->name, "%.31s", t->model_names[m]);
            r->kind = HS_ROUTE_KIND_LANES;
            r->split_route = r->shadow_route = r->failover_route = -1;
            route_all_lanes(t, m, r);
        }
        o->default_route = 0;
    }
    for (int i = 0; i < c->n_routes; i++) {
        const struct hs_route_cfg *rc = &c->routes[i];
        struct hs_route *r = &o->routes[o->n_routes++];
        snprintf(r->name, sizeof r->name, "%s", rc->name);
        r->split_route = hs_config_route(c, rc->split_route);
        r->split_ratio = rc->split_ratio;
        r->shadow_route = hs_config_route(c, rc->shadow_route);
        r->shadow_ratio = rc->shadow_ratio;
        r->failover_route = hs_config_route(c, rc->failover_route);
        r->failover_ratio_max = rc->failover_ratio_max;
        if (!strcmp(rc->kind, "cascade")) {
            r->kind = HS_ROUTE_KIND_CASCADE;
            r->cascade_small = hs_config_route(c, rc->small);
            r->cascade_big = hs_config_route(c, rc->big);
            continue;
        }
        r->kind = HS_ROUTE_KIND_LANES;
        int m = topo_model(t, rc->model);
        if (m < 0)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: route '%s' names model '%s', which is not served",
                                rc->name, rc->model);
        if (rc->n_engines == 0) route_all_lanes(t, m, r);
        for (int k = 0; k < rc->n_engines; k++) {
            int l = lane_of(t, m, rc->engines[k]);
            if (l < 0 && t->excluded && t->excluded(t->excluded_ctx, m, rc->engines[k])) continue;
            if (l < 0)
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: route '%s': model %s is not resident on engine %s",
                                    rc->name, t->model_names[m], rc->engines[k]);
            /* a remote engine has a lane per worker slot, a sliced one a lane per slice: the
             * route takes them all */
            for (; l < t->n_lanes; l++)
                if (lane_on(t, l, m, rc->engines[k])) {
                    if (r->n_lanes == HS_ROUTE_MAX_LANES)
                        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                            "config: route '%s' would have more than %d lanes "
                                            "(engines' worker slots and slices included)",
                                            rc->name, HS_ROUTE_MAX_LANES);
                    r->lanes[r->n_lanes++] = l;
                }
        }
        if (r->n_lanes == 0) {
            /* every lane it names failed its check (check: exclude): it degrades to the
             * model's remaining lanes rather than refusing what its rules send it */
            route_all_lanes(t, m, r);
            hs_log_warn("route '%s': every lane it names failed its check; it uses the model's "
                        "other lanes",
                        rc->name);
        }
    }
    for (int i = 0; i < c->router.n_rules; i++) {
        const struct hs_rule_cfg *rc = &c->router.rules[i];
        struct hs_route_rule *ru = &o->rules[o->n_rules++];
        ru->route = hs_config_route(c, rc->route);
        ru->tokens_min = rc->tokens_min;
        ru->tokens_max = rc->tokens_max;
        snprintf(ru->task, sizeof ru->task, "%s", rc->task);
        ru->priority = rc->priority[0] ? hs_priority_parse(rc->priority) : -1;
        snprintf(ru->header, sizeof ru->header, "%s", rc->header);
        snprintf(ru->value, sizeof ru->value, "%s", rc->value);
    }
    if (c->n_routes)
        o->default_route =
            c->router.default_route[0] ? hs_config_route(c, c->router.default_route) : 0;
    if (c->router.fallback_engine[0]) o->fallback_lane = lane_of(t, 0, c->router.fallback_engine);
    o->breaker.window_requests = c->breaker.window_requests;
    o->breaker.min_requests = c->breaker.min_requests;
    o->breaker.error_ratio_max = c->breaker.error_ratio_max;
    o->breaker.latency_max_ms = c->breaker.latency_max_ms;
    o->breaker.open_ms = c->breaker.open_ms;
    o->breaker.half_open_probes = c->breaker.half_open_probes;
    o->retry_budget_ratio = c->retry.budget_ratio;
    o->retry_budget_max = c->retry.budget_max;
    return HS_STATUS_OK;
}
