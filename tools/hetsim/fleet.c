/* hetsim — a fleet of a configuration's engines (fleet.h). */
#include "hetsim/fleet.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "server/topology.h"

struct ctx {
    const struct hs_sim_fleet *f;
    int lane_engine[HS_SCHED_MAX_LANES];
    bool ragged[HS_FLEET_MAX_ENGINES];
    int n_buckets[HS_FLEET_MAX_ENGINES]; /* each engine's measured buckets, found once */
    int buckets[HS_FLEET_MAX_ENGINES][HS_COSTS_MAX_CELLS];
};

struct at_ctx {
    const struct hs_cost_lane *l;
    int n;
};

static double whole_at(void *p, int bucket)
{
    const struct at_ctx *a = p;
    return hs_costs_whole_ms(a->l, a->n, bucket);
}

double hs_fleet_batch_s(const struct hs_cost_lane *l, const int *buckets, int nb, bool ragged,
                        int n, int64_t tokens, int shape_batch, int shape_seq)
{
    if (!ragged || n <= 0 || nb == 0) return hs_costs_whole_ms(l, shape_batch, shape_seq) / 1e3;
    struct at_ctx a = {l, n};
    return hs_costs_ragged(buckets, nb, (double)tokens / n, whole_at, &a) / 1e3;
}

static double batch_s(void *p, const struct hs_sched_step *b)
{
    const struct ctx *c = p;
    const int e = c->lane_engine[b->lane];
    double s = hs_fleet_batch_s(c->f->cost[e], c->buckets[e], c->n_buckets[e], c->ragged[e],
                                b->n_seqs, b->tokens, b->shape_batch, b->shape_seq);
    return s * (c->f->tax[e] > 0 ? c->f->tax[e] : 1.0);
}

/* A route naming an engine with no copies: as a lane excluded by its check. */
static bool absent(void *p, int model, const char *engine)
{
    const struct hs_sim_fleet *f = p;
    (void)model;
    for (int e = 0; e < f->cfg->n_engines; e++)
        if (!strcmp(f->cfg->engines[e].name, engine)) return f->copies[e] == 0;
    return false;
}

hs_status hs_sim_fleet_run(const struct hs_sim_fleet *f, const struct hs_sim_traffic *t,
                           struct hs_sim_result *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    const struct hs_config *c = f->cfg;
    struct ctx *cx = hs_calloc(1, sizeof *cx);
    struct hs_sim_setup *s = hs_calloc(1, sizeof *s);
    struct hs_lane_opts *lanes = hs_calloc(HS_SCHED_MAX_LANES, sizeof *lanes);
    struct hs_topo *topo = hs_calloc(1, sizeof *topo);
    struct hs_router_opts *ro = hs_calloc(1, sizeof *ro);
    hs_status st = HS_STATUS_OK;
    if (!cx || !s || !lanes || !topo || !ro) {
        st = hs_error_set(err, HS_STATUS_NO_MEMORY, "simulator");
        goto done;
    }
    cx->f = f;
    topo->cfg = c;
    topo->n_models = c->n_models;
    topo->excluded = absent;
    topo->excluded_ctx = (void *)f;
    for (int i = 0; i < c->n_models; i++) topo->model_names[i] = f->model_names[i];
    if (c->n_engines > HS_SIM_MAX_GROUPS) {
        st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "fleet: more than %d engines",
                          HS_SIM_MAX_GROUPS);
        goto done;
    }
    for (int e = 0; e < c->n_engines; e++) {
        if (!f->cost[e]) {
            st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                              "engine %s has no measured costs (give a profile that measured "
                              "it, or map it to one with --as)",
                              c->engines[e].name);
            goto done;
        }
        cx->ragged[e] = !strcmp(f->cost[e]->kind, "cpu");
        cx->n_buckets[e] = hs_costs_buckets(f->cost[e], cx->buckets[e]);
        snprintf(s->group_name[e], sizeof s->group_name[e], "%s", c->engines[e].name);
    }
    s->n_groups = c->n_engines;
    int n = 0;
    for (int mi = 0; mi < c->n_models; mi++) {
        const struct hs_model_cfg *mc = &c->models[mi];
        for (int j = 0; j < (mc->n_engines ? mc->n_engines : 1); j++) {
            const struct hs_engine_cfg *ec =
                hs_config_engine(c, mc->n_engines ? mc->engines[j] : mc->engine);
            if (!ec) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "model %s: unknown engine",
                                  f->model_names[mi]);
                goto done;
            }
            const int e = (int)(ec - c->engines);
            for (int k = 0; k < f->copies[e]; k++) {
                if (n >= HS_SCHED_MAX_LANES) {
                    st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "fleet: more than %d lanes",
                                      HS_SCHED_MAX_LANES);
                    goto done;
                }
                hs_topo_lane_opts(c, ec, f->model_names[mi], f->models[mi], &lanes[n]);
                lanes[n].engine = ec->name;
                lanes[n].runner = (struct hs_runner){0};
                topo->lane_model[n] = mi;
                topo->lane_engine[n] = e;
                cx->lane_engine[n] = e;
                s->lane_group[n] = e;
                n++;
            }
        }
    }
    if (!n) {
        st = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "fleet: no engine has a copy");
        goto done;
    }
    topo->n_lanes = n;
    if ((st = hs_topo_router_opts(topo, ro, err))) goto done;
    s->n_lanes = n;
    s->lanes = lanes;
    s->router = ro;
    s->model = f->model_names[0];
    s->batch_s = batch_s;
    s->batch_ctx = cx;
    s->overhead_ms = f->overhead_ms;
    s->default_timeout_ms = c->limits.timeout_ms;
    s->share_inflight = c->auth.share_inflight;
    s->bin_s = f->bin_s;
    st = hs_sim_run(s, t, out, err);
done:
    hs_free(cx);
    hs_free(s);
    hs_free(lanes);
    hs_free(topo);
    hs_free(ro);
    return st;
}
