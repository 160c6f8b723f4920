/* `hetserve plan`: choose a placement from a profile, a traffic description and a latency
 * objective (sched/plan.h); print the prediction beside the alternatives; write a config. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/file.h"
#include "sched/costs.h"
#include "sched/plan.h"
#include "server/capture.h"
#include "server/config.h"

static const char usage[] =
    "usage: hetserve plan --profile P.json --traffic T --slo MS [--config FILE] [--model DIR]\n"
    "                     [--out FILE]\n"
    "  --profile P     a `hetserve profile` file of the configuration's engines\n"
    "  --traffic T     rate=R;TOKENS:WEIGHT,... (requests/s; length histogram), e.g.\n"
    "                  rate=40;16:0.6,64:0.3,256:0.1, or a file: the server's capture\n"
    "                  (server.capture.file, JSON lines: its arrivals replayed) or\n"
    "                  '<seconds> <tokens>' lines\n"
    "  --slo MS        the P99 latency objective, milliseconds\n"
    "  --config FILE   the configuration to start from (default: the one the profile names,\n"
    "                  else the default configuration)\n"
    "  --out FILE      the configuration written (default plan.yaml; - = stdout)\n"
    "  --kind K        choose only among plans of kind K: single | buckets | layers | modules\n"
    "  --pipeline P    splits (layers, modules) that may be chosen: any (default) | yes (only\n"
    "                  pipelined: each engine running one batch at a time) | no\n"
    "  --tax ENGINE=X  the engine's batches take X times their profiled time while serving\n"
    "                  (measured: bench/sim/calibrate.py; default 1)\n"
    "  --overhead-ms X time a request spends outside the scheduler (HTTP, tokenizing; default 0)\n"
    "Prints the chosen plan's predicted P50/P99 and capacity beside the alternatives.\n";

static void fmt_ms(char *b, size_t n, double v)
{
    if (isinf(v))
        snprintf(b, n, "%s", "over cap");
    else
        snprintf(b, n, "%.1f", v);
}

static void row(FILE *f, const struct hs_plan *p, const struct hs_plan *single, bool chosen,
                int tokens_cfg)
{
    char p50[16], p99[16], vs[32] = "";
    fmt_ms(p50, sizeof p50, p->p50_ms);
    fmt_ms(p99, sizeof p99, p->p99_ms);
    if (single && single != p && single->capacity_rps > 0)
        snprintf(vs, sizeof vs, "x%.2f", p->capacity_rps / single->capacity_rps);
    char busy1[16] = "-";
    if (p->kind == HS_PLAN_BUCKETS || p->pipelined)
        snprintf(busy1, sizeof busy1, "%.0f%%", 100 * p->busy[1]);
    char tokens[32] = "";
    if (p->tokens_max > 0 && p->tokens_max != tokens_cfg)
        snprintf(tokens, sizeof tokens, "  batch_max_tokens %d", p->tokens_max);
    fprintf(f, "%c %-44s %6d %9s %9s %10.1f %5.0f%% %6s  %-6s %s%s\n", chosen ? '*' : ' ', p->name,
            p->window_us, p50, p99, p->capacity_rps, 100 * p->busy[0], busy1, vs,
            p->meets ? "meets" : "misses", tokens);
}

/* The configuration's model a profile lane measured: by name, else by the folder's base name;
 * the first when none matches. */
static int model_index(const struct hs_config *c, const char *name)
{
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        const char *base = strrchr(m->path, '/');
        base = base && base[1] ? base + 1 : m->path;
        if (m->name[0] ? !strcmp(m->name, name) : !strcmp(base, name) || !strcmp(m->path, name))
            return i;
    }
    return 0;
}

/* Sets the planned model of c to plan p (the configuration's routes and rules replaced). */
static void apply(struct hs_config *c, const struct hs_plan *p, const struct hs_plan_opts *o,
                  const struct hs_traffic *t, int layers)
{
    struct hs_model_cfg *m = &c->models[model_index(c, p->a->model)];
    memset(&m->placement, 0, sizeof m->placement);
    m->n_engines = 0;
    memset(m->engines, 0, sizeof m->engines);
    snprintf(m->engine, sizeof m->engine, "%s", p->a->engine);
    c->n_routes = 0;
    c->router.n_rules = 0;
    c->router.default_route[0] = 0;
    c->router.fallback_engine[0] = 0;
    if (p->kind == HS_PLAN_BUCKETS) {
        m->n_engines = 2;
        snprintf(m->engines[0], sizeof m->engines[0], "%s", p->a->engine);
        snprintf(m->engines[1], sizeof m->engines[1], "%s", p->b->engine);
        c->n_routes = 2;
        memset(c->routes, 0, 2 * sizeof c->routes[0]);
        for (int r = 0; r < 2; r++) {
            struct hs_route_cfg *rc = &c->routes[r];
            snprintf(rc->name, sizeof rc->name, "%s", r ? "long" : "short");
            snprintf(rc->kind, sizeof rc->kind, "engines");
            snprintf(rc->model, sizeof rc->model, "%s", p->a->model);
            rc->n_engines = 1;
            snprintf(rc->engines[0], sizeof rc->engines[0], "%s", r ? p->b->engine : p->a->engine);
            rc->failover_ratio_max = 0.3;
        }
        c->router.n_rules = 1;
        memset(&c->router.rules[0], 0, sizeof c->router.rules[0]);
        snprintf(c->router.rules[0].route, sizeof c->router.rules[0].route, "short");
        c->router.rules[0].tokens_max = p->threshold;
        snprintf(c->router.default_route, sizeof c->router.default_route, "long");
    } else if (p->kind == HS_PLAN_LAYERS) {
        struct hs_placement_cfg *pl = &m->placement;
        pl->n_layers = 2;
        snprintf(pl->layers[0].engine, sizeof pl->layers[0].engine, "%s", p->a->engine);
        snprintf(pl->layers[1].engine, sizeof pl->layers[1].engine, "%s", p->b->engine);
        pl->layers[0].from = 0, pl->layers[0].to = p->cut;
        pl->layers[1].from = p->cut, pl->layers[1].to = layers;
    } else if (p->kind == HS_PLAN_MODULES) {
        snprintf(m->placement.attention, sizeof m->placement.attention, "%s", p->a->engine);
        snprintf(m->placement.ffn, sizeof m->placement.ffn, "%s", p->b->engine);
    }
    m->placement.pipeline = p->pipelined; /* the lane then keeps a batch in flight per engine */
    for (int i = 0; i < c->n_engines; i++)
        if (!strcmp(c->engines[i].name, p->a->engine) ||
            (p->b && !strcmp(c->engines[i].name, p->b->engine))) {
            c->engines[i].batch_window_us = p->window_us;
            /* the batch sizes per bucket chosen: a cap on padded tokens (0 = batching's) */
            c->engines[i].batch_max_tokens =
                p->tokens_max > 0 && p->tokens_max != c->batching.batch_max_tokens ? p->tokens_max
                                                                                   : 0;
        }
    /* the server's service-time model starts from the plan's measured speed, not a constant:
     * lane 0 in full batches of the traffic's most common length */
    int common = 0;
    for (int i = 1; i < t->n; i++)
        if (t->share[i] > t->share[common]) common = i;
    int bucket = o->buckets[o->n_buckets - 1];
    for (int b = o->n_buckets - 1; b >= 0; b--)
        if (o->buckets[b] >= t->tokens[common]) bucket = o->buckets[b];
    double ms = hs_plan_batch_ms(p, 0, o->batch_max, bucket);
    if (ms > 0) {
        double tps = o->batch_max * (double)bucket / (ms / 1000.0);
        if (tps >= 1e-3 && tps <= 1e12) c->scheduler.throughput_init_tokens_per_s = tps;
    }
}

/* A traffic file: a capture (server/capture.h: JSON lines) when its first line that is not
 * blank starts with '{', else '<seconds> <tokens>' lines. A capture's requests of the profile's
 * model are the arrivals. */
static hs_status load_traffic(const char *path, const struct hs_plan_opts *o,
                              const struct hs_costs *costs, struct hs_traffic *t,
                              struct hs_capture_traffic_summary *cap, bool *captured,
                              struct hs_error *err)
{
    char *data;
    size_t len;
    hs_status st = hs_read_file(path, 0, &data, &len, err);
    if (st) return st;
    size_t i = 0;
    while (i < len && isspace((unsigned char)data[i])) i++;
    *captured = i < len && data[i] == '{';
    if (*captured)
        st = hs_capture_traffic_parse(path, data, len, o->buckets, o->n_buckets,
                                      costs->n_lanes ? costs->lanes[0].model : NULL, t, cap, err);
    else
        st = hs_traffic_parse_lines(path, data, len, o->buckets, o->n_buckets, t, err);
    hs_free(data);
    return st;
}

int hs_cmd_plan(int argc, char **argv)
{
    json_set_alloc_funcs(hs_malloc, hs_free);
    const char *profile = NULL, *traffic = NULL, *config = NULL, *model = NULL;
    const char *out_path = "plan.yaml";
    double slo_ms = 0, overhead_ms = 0;
    unsigned kinds = 0;
    int pipeline = 0, n_tax = 0;
    char tax_engine[8][32];
    double tax[8];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!v) {
            fprintf(stderr, "hetserve plan: unknown or incomplete option '%s'\n%s", a, usage);
            return 2;
        } else if (!strcmp(a, "--profile")) {
            profile = argv[++i];
        } else if (!strcmp(a, "--traffic")) {
            traffic = argv[++i];
        } else if (!strcmp(a, "--config")) {
            config = argv[++i];
        } else if (!strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--out")) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--kind")) {
            int k = hs_plan_kind_parse(argv[++i]);
            if (k < 0) {
                fprintf(stderr,
                        "hetserve plan: bad --kind '%s' (single | buckets | layers | "
                        "modules)\n",
                        v);
                return 2;
            }
            kinds |= 1u << k;
        } else if (!strcmp(a, "--pipeline")) {
            pipeline = !strcmp(v, "yes") ? 1 : !strcmp(v, "no") ? -1 : !strcmp(v, "any") ? 0 : 2;
            i++;
            if (pipeline == 2) {
                fprintf(stderr, "hetserve plan: bad --pipeline '%s' (any | yes | no)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--tax")) {
            const char *eq = strchr(argv[++i], '=');
            char *end = NULL;
            double x = eq ? strtod(eq + 1, &end) : 0;
            if (!eq || eq == v || eq - v >= 32 || *end || !(x >= 0.1 && x <= 100) || n_tax == 8) {
                fprintf(stderr, "hetserve plan: bad --tax '%s' (ENGINE=X, X in [0.1, 100])\n", v);
                return 2;
            }
            snprintf(tax_engine[n_tax], sizeof tax_engine[n_tax], "%.*s", (int)(eq - v), v);
            tax[n_tax++] = x;
        } else if (!strcmp(a, "--overhead-ms")) {
            char *end;
            overhead_ms = strtod(argv[++i], &end);
            if (*end || !(overhead_ms >= 0) || overhead_ms > 1e6) {
                fprintf(stderr, "hetserve plan: bad --overhead-ms '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--slo")) {
            char *end;
            slo_ms = strtod(argv[++i], &end);
            if (*end || !(slo_ms > 0) || slo_ms > 1e7) {
                fprintf(stderr, "hetserve plan: bad --slo '%s' (milliseconds)\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "hetserve plan: unknown option '%s'\n%s", a, usage);
            return 2;
        }
    }
    if (!profile || !traffic || !(slo_ms > 0)) {
        fprintf(stderr, "hetserve plan: --profile, --traffic and --slo are required\n%s", usage);
        return 2;
    }
    struct hs_costs *costs = hs_malloc(sizeof *costs);
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_plan_result *res = hs_malloc(sizeof *res);
    struct hs_error err = {0};
    struct hs_traffic t = {0};
    int rc = 1;
    if (!costs || !c || !res) goto done;
    if (hs_costs_load(profile, costs, &err)) {
        fprintf(stderr, "hetserve plan: %s\n", err.msg);
        goto done;
    }
    if (!config && costs->config[0]) config = costs->config;
    hs_config_defaults(c, model ? model : hs_cli_default_model());
    if (config && hs_config_load(config, c, &err)) {
        fprintf(stderr, "hetserve plan: %s\n", err.msg);
        goto done;
    }
    struct hs_plan_opts o = {.slo_ms = slo_ms,
                             .batch_max = c->batching.batch_max,
                             .kinds = kinds,
                             .pipeline = pipeline,
                             .timeout_ms = c->limits.timeout_ms,
                             .n_tax = n_tax,
                             .overhead_ms = overhead_ms};
    memcpy(o.tax_engine, tax_engine, sizeof tax_engine);
    memcpy(o.tax, tax, sizeof tax);
    o.lane.queue_max = c->limits.queue_max;
    o.lane.wait_max_ms = c->scheduler.wait_max_ms;
    o.lane.shed_batch_ratio = c->scheduler.shed_batch_ratio;
    o.lane.batch_max_tokens = c->batching.batch_max_tokens;
    o.lane.throughput_init_tokens_per_s = c->scheduler.throughput_init_tokens_per_s;
    o.lane.throughput_ewma_alpha = c->scheduler.throughput_ewma_alpha;
    for (int i = 0; i < c->batching.n_buckets && o.n_buckets < HS_PLAN_MAX_BUCKETS - 1; i++)
        o.buckets[o.n_buckets++] = c->batching.buckets[i];
    if (o.n_buckets == 0 || o.buckets[o.n_buckets - 1] < 512) /* the model's longest */
        o.buckets[o.n_buckets++] = 512;
    struct hs_capture_traffic_summary cap = {0};
    bool captured = false;
    hs_status st = !strncmp(traffic, "rate=", 5)
                       ? hs_traffic_parse(traffic, &t, &err)
                       : load_traffic(traffic, &o, costs, &t, &cap, &captured, &err);
    if (st) {
        fprintf(stderr, "hetserve plan: %s\n", err.msg);
        rc = 2;
        goto done;
    }
    /* only engines of the configuration can be planned on */
    for (int i = 0; i < costs->n_lanes; i++)
        if (costs->lanes[i].ok && !hs_config_engine(c, costs->lanes[i].engine)) {
            fprintf(stderr, "hetserve plan: lane on %s left out: not an engine of %s\n",
                    costs->lanes[i].engine, config ? config : "the default configuration");
            costs->lanes[i].ok = false;
        }
    if (hs_plan_make(costs, &t, &o, res, &err)) {
        fprintf(stderr, "hetserve plan: %s\n", err.msg);
        goto done;
    }
    const struct hs_plan *ch = &res->plans[res->chosen];
    const struct hs_plan *single = res->best_single >= 0 ? &res->plans[res->best_single] : NULL;
    const int layers = hs_costs_count(ch->a, HS_COST_ATTN);

    if (captured) {
        printf("traffic: %.1f sequences/s (capture %s: %ld requests, %ld sequences over %.1f s, "
               "replayed;",
               t.rate_per_s, traffic, cap.requests, cap.sequences, cap.span_s);
        for (int i = 0; i < cap.n_endpoints; i++)
            printf(" %s %ld", cap.endpoint[i], cap.endpoint_requests[i]);
        printf("; priority batch %ld; skipped %ld), lengths", cap.batch, cap.skipped);
    } else {
        printf("traffic: %.1f requests/s, lengths", t.rate_per_s);
    }
    for (int i = 0; i < t.n; i++)
        if (t.share[i] > 0) printf(" %d:%.0f%%", t.tokens[i], 100 * t.share[i]);
    printf("; objective P99 <= %.1f ms\n", slo_ms);
    printf("profile: %s (%s; load average %.2f -> %.2f during it)\n", profile,
           costs->created[0] ? costs->created : "undated", costs->load_avg_start,
           costs->load_avg_end);
    printf("\n  %-44s %6s %9s %9s %10s %6s %6s  %-6s %s\n", "plan", "win_us", "P50 ms", "P99 ms",
           "capacity/s", "busy0", "busy1", "cap vs", "objective");
    row(stdout, ch, single, true, o.lane.batch_max_tokens);
    /* the alternatives: every single engine, and the best of each other kind (splits: the best
     * sequential and the best pipelined) */
    for (int k = HS_PLAN_SINGLE; k <= HS_PLAN_MODULES; k++)
        for (int piped = 0; piped < 2; piped++) {
            int best = -1;
            for (int i = 0; i < res->n; i++) {
                const struct hs_plan *p = &res->plans[i];
                if ((int)p->kind != k || p->pipelined != piped || i == res->chosen) continue;
                if (k == HS_PLAN_SINGLE)
                    row(stdout, p, single, false, o.lane.batch_max_tokens);
                else if (best < 0 || p->p99_ms < res->plans[best].p99_ms ||
                         (isinf(p->p99_ms) && p->capacity_rps > res->plans[best].capacity_rps))
                    best = i;
            }
            if (best >= 0 && !((int)ch->kind == k && ch->pipelined == piped))
                row(stdout, &res->plans[best], single, false, o.lane.batch_max_tokens);
        }
    printf("\n(%d plans predicted; 'cap vs': capacity against the best single engine, %s)\n",
           res->n, single ? single->name : "none");
    if (ch->meets)
        printf("chosen: %s: P99 %.1f ms meets %.1f ms with %d engine(s) at most %.0f%% busy; "
               "fewer engines or a lower P99 than every other plan%s that meets it\n",
               ch->name, ch->p99_ms, slo_ms, ch->engines,
               100 * (ch->busy[0] > ch->busy[1] ? ch->busy[0] : ch->busy[1]),
               kinds || pipeline ? " of the kinds asked (--kind, --pipeline)" : "");
    else
        printf("chosen: %s: no plan meets P99 <= %.1f ms at %.1f requests/s; this one comes "
               "closest (capacity %.1f requests/s)\n",
               ch->name, slo_ms, t.rate_per_s, ch->capacity_rps);

    apply(c, ch, &o, &t, layers);
    if (hs_config_validate(c, &err)) {
        fprintf(stderr, "hetserve plan: the planned configuration is not valid: %s\n", err.msg);
        goto done;
    }
    FILE *f = strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "hetserve plan: cannot write %s\n", out_path);
        goto done;
    }
    fprintf(f, "# written by hetserve plan from %s: %s\n", profile, ch->name);
    fprintf(f, "# predicted at %.1f requests/s: P50 %.1f ms, P99 %.1f ms, capacity %.1f/s\n",
            t.rate_per_s, ch->p50_ms, ch->p99_ms, ch->capacity_rps);
    hs_config_print(c, f);
    if (f != stdout) fclose(f);
    if (f != stdout) fprintf(stderr, "plan: wrote %s\n", out_path);
    rc = 0;
done:
    hs_traffic_free(&t);
    hs_free(costs);
    hs_free(c);
    hs_free(res);
    return rc;
}
