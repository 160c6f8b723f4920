/* hetsim's core: batch times from costs, and whole simulations whose answers are known exactly
 * (lone requests: batch time, plus the window when batch_window_when_idle) or bounded (overload:
 * capacity, nothing lost), routing by length across two engines, an absent engine's route
 * degrading, determinism. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "hetsim/fleet.h"
#include "model/config.h"
#include "sched/request.h"
#include "sched/sim.h"

/* A cost lane: batch time = fixed + per_token * batch * bucket (ms), buckets 16, 64, 256. */
static void lane_make(struct hs_cost_lane *l, const char *engine, double fixed, double per_token)
{
    memset(l, 0, sizeof *l);
    snprintf(l->engine, sizeof l->engine, "%s", engine);
    snprintf(l->kind, sizeof l->kind, "cpu");
    l->ok = true;
    const int batches[] = {1, 4, 32}, buckets[] = {16, 64, 256};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) {
            struct hs_cost_cell *c = &l->cells[l->n_cells++];
            c->batch = batches[i];
            c->bucket = buckets[k];
            c->whole.compute_ms = fixed + per_token * batches[i] * buckets[k];
        }
}

static const char *ONE_ENGINE = "engines:\n"
                                "  - {name: e, kind: cpu}\n"
                                "models:\n"
                                "  - {path: m, engine: e}\n"
                                "batching:\n"
                                "  batch_window_us: 2000\n";

static const char *TWO_ENGINES = "engines:\n"
                                 "  - {name: a, kind: cpu}\n"
                                 "  - {name: b, kind: cpu}\n"
                                 "models:\n"
                                 "  - {path: m, engines: [a, b]}\n"
                                 "routes:\n"
                                 "  - {name: short, engines: [a]}\n"
                                 "  - {name: long, engines: [b]}\n"
                                 "router:\n"
                                 "  rules:\n"
                                 "    - {tokens_max: 32, route: short}\n"
                                 "  default_route: long\n";

struct world {
    struct hs_config cfg;
    struct hs_model_config mc;
    struct hs_cost_lane lanes[2];
    struct hs_sim_fleet f;
};

static struct world *world_new(const char *yaml)
{
    struct world *w = hs_calloc(1, sizeof *w);
    assert_non_null(w);
    struct hs_error err;
    hs_config_defaults(&w->cfg, "m");
    assert_int_equal(hs_config_parse(yaml, strlen(yaml), "test", &w->cfg, &err), HS_STATUS_OK);
    w->mc.dims.hidden = 8;
    w->mc.max_seq_len = 512;
    w->f.cfg = &w->cfg;
    w->f.models[0] = &w->mc;
    w->f.model_names[0] = "m";
    for (int e = 0; e < w->cfg.n_engines; e++) {
        lane_make(&w->lanes[e], w->cfg.engines[e].name, 1.0 + e, 0.01);
        w->f.cost[e] = &w->lanes[e];
        w->f.copies[e] = 1;
    }
    return w;
}

/* n requests of one input each, every `gap_s` seconds, lengths cycling through lens. */
static void traffic_make(struct hs_sim_traffic *t, size_t n, double gap_s, const int *lens,
                         int n_lens, int n_classes)
{
    memset(t, 0, sizeof *t);
    t->n_classes = n_classes;
    snprintf(t->class_name[0], sizeof t->class_name[0], "short");
    snprintf(t->class_name[1], sizeof t->class_name[1], "long");
    t->n = n;
    t->a = hs_calloc(n, sizeof *t->a);
    t->token_store = hs_calloc(n, sizeof *t->token_store);
    assert_true(t->a && t->token_store);
    for (size_t i = 0; i < n; i++) {
        t->token_store[i] = lens[i % (size_t)n_lens];
        t->a[i] = (struct hs_sim_arrival){.at_s = (double)i * gap_s,
                                          .cls = n_classes > 1 && t->token_store[i] > 32,
                                          .n_inputs = 1,
                                          .tokens = &t->token_store[i],
                                          .priority = HS_PRIORITY_INTERACTIVE};
    }
}

static void batch_times(void **state)
{
    (void)state;
    struct hs_cost_lane l;
    lane_make(&l, "x", 1.0, 0.01);
    int b[HS_COSTS_MAX_CELLS];
    assert_int_equal(hs_costs_buckets(&l, b), 3);
    assert_true(b[0] == 16 && b[1] == 64 && b[2] == 256);
    /* a measured cell: 1 + 0.01 * 4 * 64 ms */
    assert_true(fabs(hs_fleet_batch_s(&l, b, 3, false, 3, 100, 4, 64) - 3.56e-3) < 1e-9);
    /* ragged: 4 sequences of mean length 40, between buckets 16 (1.64 ms) and 64 (3.56 ms) */
    double want = (1.64 + (40.0 - 16) / 48 * (3.56 - 1.64)) * 1e-3;
    assert_true(fabs(hs_fleet_batch_s(&l, b, 3, true, 4, 160, 4, 64) - want) < 1e-9);
    /* below the smallest bucket: along the first two buckets' line (1 + 0.01 * 4 * 8) */
    assert_true(fabs(hs_fleet_batch_s(&l, b, 3, true, 4, 32, 4, 16) - 1.32e-3) < 1e-9);
    /* between measured batches: linear in the batch (2 of 1 and 4 at bucket 16) */
    assert_true(fabs(hs_fleet_batch_s(&l, b, 3, false, 2, 32, 2, 16) - 1.32e-3) < 1e-9);
}

static void lone_requests_exact(void **state)
{
    (void)state;
    struct world *w = world_new(ONE_ENGINE);
    w->f.overhead_ms = 0.5;
    struct hs_sim_traffic t;
    const int lens[] = {16};
    traffic_make(&t, 50, 1.0, lens, 1, 1);
    struct hs_sim_result r;
    struct hs_error err;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    /* each alone, on an idle engine: one batch of 1 x 16 at once (1 + 0.16 ms), then the
     * overhead; the 2 ms window is not waited out while nothing runs */
    assert_int_equal(r.all.n, 50);
    assert_int_equal(r.all.ok, 50);
    assert_true(fabs(r.all.p50_ms - 1.66) < 1e-3);
    assert_true(fabs(r.all.max_ms - 1.66) < 1e-3);
    assert_int_equal(r.grp[0].batches, 50);
    assert_true(fabs(r.grp[0].busy_s - 50 * 1.16e-3) < 1e-6);
    assert_true(r.grp[0].n_bins >= 49);
    hs_sim_result_free(&r);
    /* a serving tax of 2 doubles the batch, nothing else */
    w->f.tax[0] = 2;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_true(fabs(r.all.p50_ms - (2.32 + 0.5)) < 1e-3);
    hs_sim_result_free(&r);
    /* batch_window_when_idle: the old rule, the window first */
    w->f.tax[0] = 1;
    w->cfg.batching.batch_window_when_idle = 1;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_true(fabs(r.all.p50_ms - 3.66) < 1e-3);
    assert_true(fabs(r.all.max_ms - 3.66) < 1e-3);
    hs_sim_result_free(&r);
    hs_sim_traffic_free(&t);
    hs_free(w);
}

static void overload_bounded_nothing_lost(void **state)
{
    (void)state;
    struct world *w = world_new(ONE_ENGINE);
    struct hs_sim_traffic t;
    const int lens[] = {200};
    /* a batch of 32 sequences of 200 tokens (bucket 256; the cpu kind computes the real tokens)
     * takes 1 + 0.01 * 32 * 200 = 65 ms: at most ~492 req/s. 2,000 req/s for 5 s */
    traffic_make(&t, 10000, 0.0005, lens, 1, 1);
    struct hs_sim_result r;
    struct hs_error err;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_int_equal(r.all.n, 10000);
    assert_int_equal(r.all.ok + r.all.shed + r.all.timeout + r.all.other, 10000);
    assert_true(r.all.shed > 5000); /* refused at admission, not queued to death */
    double ok_per_s = (double)r.all.ok / r.span_s;
    assert_true(ok_per_s <= 32 / 65e-3 * 1.01);
    assert_true(ok_per_s >= 0.8 * 32 / 65e-3);
    /* admission keeps the wait within scheduler.wait_max_ms (1 s) plus a batch */
    assert_true(r.all.p99_ms < 1300);
    assert_true(r.grp[0].util > 0.95);
    hs_sim_result_free(&r);
    hs_sim_traffic_free(&t);
    hs_free(w);
}

static void routes_by_length_and_absent_engine(void **state)
{
    (void)state;
    struct world *w = world_new(TWO_ENGINES);
    struct hs_sim_traffic t;
    const int lens[] = {20, 20, 20, 200};
    traffic_make(&t, 400, 0.05, lens, 4, 2);
    struct hs_sim_result r, r2;
    struct hs_error err;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_int_equal(r.cls[0].ok, 300);
    assert_int_equal(r.cls[1].ok, 100);
    /* short on a (fixed 1 ms), long on b (fixed 2 ms): each batch alone at this load */
    assert_int_equal(r.grp[0].batches, 300);
    assert_int_equal(r.grp[1].batches, 100);
    assert_true(fabs(r.cls[1].p50_ms - (2 + 0.01 * 200)) < 0.05);
    /* the same seed-free traffic again: the same answers */
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r2, &err), HS_STATUS_OK);
    assert_true(r2.cls[0].p99_ms == r.cls[0].p99_ms && r2.cls[1].p99_ms == r.cls[1].p99_ms);
    hs_sim_result_free(&r);
    hs_sim_result_free(&r2);
    /* no copy of b: the long route degrades to the model's other lane, a */
    w->f.copies[1] = 0;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_int_equal(r.all.ok, 400);
    assert_int_equal(r.grp[1].batches, 0);
    assert_true(r.grp[0].batches >= 380);
    hs_sim_result_free(&r);
    /* three copies of a: the short class spreads over them (earliest predicted completion) */
    w->f.copies[0] = 3;
    w->f.copies[1] = 1;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_OK);
    assert_int_equal(r.grp[0].lanes, 3);
    assert_int_equal(r.all.ok, 400);
    hs_sim_result_free(&r);
    /* no lane at all, or an engine without costs: refused with a reason */
    w->f.copies[0] = w->f.copies[1] = 0;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_INVALID_ARGUMENT);
    w->f.copies[0] = w->f.copies[1] = 1;
    w->f.cost[1] = NULL;
    assert_int_equal(hs_sim_fleet_run(&w->f, &t, &r, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "engine b has no measured costs"));
    hs_sim_traffic_free(&t);
    hs_free(w);
}

/* Segments on shared resources (a pipelined split): every batch is 10 ms on resource 0 then
 * 10 ms on resource 1, one sequence per batch, two slots. Requests at 0, 1 and 2 ms: the first
 * runs 0-10 on 0 and 10-20 on 1; the second starts at 1 ms but waits for 0 until 10 (10-20,
 * then 20-30); the third waits for a slot until 20 (20-30, 30-40). Answers at 20, 29 and 38 ms,
 * each resource busy 30 of the 40 ms. */
static int two_halves(void *ctx, const struct hs_sched_step *b, int *res, double *s, int max)
{
    (void)ctx;
    (void)b;
    assert_true(max >= 2);
    res[0] = 0, s[0] = 0.010;
    res[1] = 1, s[1] = 0.010;
    return 2;
}

static double never(void *ctx, const struct hs_sched_step *b)
{
    (void)ctx;
    (void)b;
    fail_msg("batch_s called for a segmented batch");
    return 0;
}

static void segments_share_resources_first_come(void **state)
{
    (void)state;
    struct hs_lane_opts lane = {.engine = "split",
                                .model = "m",
                                .dim = 1,
                                .seq_max = 64,
                                .batch_max = 1,
                                .batch_max_tokens = 8192,
                                .batch_window_us = 0,
                                .queue_max = 16,
                                .slots = 2,
                                .shed_batch_ratio = 0.75,
                                .throughput_init_tokens_per_s = 20000,
                                .throughput_ewma_alpha = 0.2};
    struct hs_router_opts *ro = hs_calloc(1, sizeof *ro);
    assert_non_null(ro);
    struct hs_route *r = &ro->routes[ro->n_routes++];
    snprintf(r->name, sizeof r->name, "all");
    r->kind = HS_ROUTE_KIND_LANES;
    r->n_lanes = 1;
    r->split_route = r->shadow_route = r->failover_route = -1;
    ro->fallback_lane = -1;
    ro->breaker = (struct hs_breaker_opts){.window_requests = 20,
                                           .min_requests = 10,
                                           .error_ratio_max = 0.5,
                                           .open_ms = 5000,
                                           .half_open_probes = 1};
    struct hs_sim_setup su = {.n_lanes = 1,
                              .lanes = &lane,
                              .router = ro,
                              .model = "m",
                              .batch_s = never,
                              .batch_segments = two_halves,
                              .n_resources = 2,
                              .n_groups = 1};
    snprintf(su.resource_name[0], sizeof su.resource_name[0], "a");
    snprintf(su.resource_name[1], sizeof su.resource_name[1], "b");
    snprintf(su.group_name[0], sizeof su.group_name[0], "split");
    struct hs_sim_traffic t;
    const int lens[] = {16};
    traffic_make(&t, 3, 0.001, lens, 1, 1);
    struct hs_sim_result res;
    struct hs_error err;
    hs_status st = hs_sim_run(&su, &t, &res, &err);
    if (st) fail_msg("%s", err.msg);
    assert_int_equal(res.all.ok, 3);
    assert_true(fabs(res.all.p50_ms - 29) < 1e-3);
    assert_true(fabs(res.all.max_ms - 38) < 1e-3);
    const double lat[3] = {20, 29, 38};
    assert_true(fabs(res.all.mean_ms - (lat[0] + lat[1] + lat[2]) / 3) < 1e-3);
    assert_int_equal(res.n_resources, 2);
    assert_true(fabs(res.resource_util[0] - 0.75) < 1e-3 &&
                fabs(res.resource_util[1] - 0.75) < 1e-3);
    assert_int_equal(res.grp[0].batches, 3);
    assert_true(fabs(res.grp[0].busy_s - (0.020 + 0.029 + 0.020)) < 1e-6); /* waits included */
    hs_sim_result_free(&res);
    /* gated on resource 0 (a batch forms when it can start), three slots, batches of up to 4:
     * the second and third requests wait in the queue, not in a batch, and go together when
     * resource 0 frees at 10 ms: 10-20 on 0, 20-30 on 1; answers at 20, 29 and 28 ms */
    lane.slots = 3;
    lane.batch_max = 4;
    su.gate[0] = 1;
    st = hs_sim_run(&su, &t, &res, &err);
    if (st) fail_msg("%s", err.msg);
    assert_int_equal(res.all.ok, 3);
    assert_int_equal(res.grp[0].batches, 2);
    assert_true(fabs(res.all.max_ms - 29) < 1e-3);
    assert_true(fabs(res.all.mean_ms - (20 + 29 + 28) / 3.0) < 1e-3);
    hs_sim_result_free(&res);
    su.gate[0] = 3; /* no such resource */
    assert_int_equal(hs_sim_run(&su, &t, &res, &err), HS_STATUS_INVALID_ARGUMENT);
    su.gate[0] = 0;
    /* too many resources is refused */
    su.n_resources = HS_SIM_MAX_RESOURCES + 1;
    assert_int_equal(hs_sim_run(&su, &t, &res, &err), HS_STATUS_INVALID_ARGUMENT);
    hs_sim_traffic_free(&t);
    hs_free(ro);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batch_times),
        cmocka_unit_test(lone_requests_exact),
        cmocka_unit_test(overload_bounded_nothing_lost),
        cmocka_unit_test(routes_by_length_and_absent_engine),
        cmocka_unit_test(segments_share_resources_first_come),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
