/* hetserve — a configuration's lanes and routes, before any engine or weights exist.
 *
 * The server (after loading engines and checking lanes) and the fleet simulator hetsim (which
 * loads nothing but model metadata) both turn a configuration into scheduler lanes and router
 * options; this is the one translation they share:
 *   hs_topo_lane_opts   the batching and admission options of one lane (model on engine);
 *   hs_topo_router_opts the config's routes, rules, breaker and retry settings over a lane table
 *                       (each lane: which model, which configured engine); a route naming an
 *                       engine takes every lane of its model on it (a sliced engine's slices, a
 *                       remote engine's worker slots, a simulated fleet's copies).
 */
#ifndef HS_SERVER_TOPOLOGY_H
#define HS_SERVER_TOPOLOGY_H

#include <stdbool.h>

#include "core/status.h"
#include "model/config.h"
#include "sched/router.h"
#include "sched/sched.h"
#include "server/config.h"

/* Fills o's batching and admission options for model `name` (its config mc) on engine ec. The
 * engine label, slots (the engine's) and runner are the caller's. */
void hs_topo_lane_opts(const struct hs_config *c, const struct hs_engine_cfg *ec, const char *name,
                       const struct hs_model_config *mc, struct hs_lane_opts *o);

struct hs_topo {
    const struct hs_config *cfg;
    int n_models;
    const char *model_names[HS_CONFIG_MAX_MODELS]; /* served names, in config order */
    int n_lanes;
    int lane_model[HS_SCHED_MAX_LANES];  /* index into model_names */
    int lane_engine[HS_SCHED_MAX_LANES]; /* index into cfg->engines */
    /* (optional) true when model m's lane on the engine named `engine` was left out by a failed
     * check (check: exclude): a route naming it degrades instead of failing */
    bool (*excluded)(void *ctx, int model, const char *engine);
    void *excluded_ctx;
};

/* The config's routes (names) translated into the router's (lane indexes), with its rules,
 * breaker and retry settings. A config without routes gets one route per model over all its
 * lanes. HS_STATUS_INVALID_INPUT names a route whose model or engine has no lane. */
hs_status hs_topo_router_opts(const struct hs_topo *t, struct hs_router_opts *o,
                              struct hs_error *err);

#endif
