/* Router decisions per second: hs_router_decide over a route of three lanes (a router with three
 * remote workers), each decision reading every lane's predicted completion, in one thread.
 * Nothing is submitted: this is the cost of choosing, the router's own work per request.
 *   bench_router [decisions]     (default 2,000,000; run under taskset for one core) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "sched/router.h"
#include "sched/sched.h"

static hs_status run(void *ctx, int slot, const struct hs_batch *b, float *out,
                     struct hs_batch_timing *t, struct hs_error *err)
{
    (void)ctx, (void)slot, (void)t, (void)err;
    memset(out, 0, sizeof(float) * (size_t)b->n_seqs);
    return HS_STATUS_OK;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    const char *names[3] = {"pool/0", "pool/1", "pool/2"};
    struct hs_lane_opts lanes[3];
    for (int i = 0; i < 3; i++)
        lanes[i] = (struct hs_lane_opts){.engine = names[i],
                                         .model = "m",
                                         .dim = 1,
                                         .seq_max = 256,
                                         .batch_window_us = 0,
                                         .batch_max = 32,
                                         .batch_max_tokens = 8192,
                                         .n_buckets = 5,
                                         .buckets = {16, 32, 64, 128, 256},
                                         .queue_max = 1024,
                                         .shed_batch_ratio = 0.75,
                                         .throughput_init_tokens_per_s = 20000,
                                         .throughput_ewma_alpha = 0.2,
                                         .slots = 2,
                                         .runner = {run, NULL}};
    struct hs_error err = {0};
    struct hs_sched *s = NULL;
    struct hs_router *rt = NULL;
    if (hs_sched_create(lanes, 3, NULL, &s, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    struct hs_router_opts o;
    memset(&o, 0, sizeof o);
    o.n_routes = 1;
    snprintf(o.routes[0].name, sizeof o.routes[0].name, "pool");
    o.routes[0].n_lanes = 3;
    for (int i = 0; i < 3; i++) o.routes[0].lanes[i] = i;
    o.routes[0].split_route = o.routes[0].shadow_route = o.routes[0].failover_route = -1;
    o.fallback_lane = -1;
    o.breaker = (struct hs_breaker_opts){20, 5, 0.5, 0, 5000, 3};
    o.retry_budget_ratio = 0.1;
    o.retry_budget_max = 5;
    if (hs_router_create(s, &o, &rt, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    int32_t ids[12] = {101, 7592, 2088, 102};
    struct hs_seq seq[2] = {{.ids = ids, .n_tokens = 4}, {.ids = ids, .n_tokens = 12}};
    struct hs_request r = {.n_seqs = 2, .seqs = seq, .model = "m"};
    r.deadline_ns = hs_now_ns() + 3600 * 1000000000LL;
    hs_request_init(&r);
    struct hs_route_query q = {.req = &r, .task = "embeddings"};
    struct hs_route_decision d;
    int64_t t0 = hs_now_ns();
    long lanes_hit[3] = {0};
    for (long i = 0; i < n; i++) {
        hs_router_decide(rt, &q, hs_now_ns(), &d);
        if (d.lane >= 0) lanes_hit[d.lane]++;
    }
    double secs = (double)(hs_now_ns() - t0) / 1e9;
    printf("router decisions: %ld in %.3f s = %.0f per second (%.3f us each), 3 lanes\n", n, secs,
           (double)n / secs, secs / (double)n * 1e6);
    hs_router_free(rt);
    hs_sched_destroy(s);
    return 0;
}
