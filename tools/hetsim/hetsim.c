/* hetsim — fleet simulator: what a hetserve configuration (or N copies of its engines) would do
 * with a given traffic, from measured costs, and the cheapest fleet that meets an SLO.
 *
 *   hetsim --config FILE --profile FILE [--as ENGINE=PROFILED] TRAFFIC [options]
 *   hetsim ... --search ENGINE=MIN..MAX[,...] --slo CLASS=P99_MS[,...] --prices FILE
 *
 * TRAFFIC: --texts FILE (hetbench's corpus: "class<TAB>text" lines, tokenized with the model's
 * own tokenizer) or --lengths SPEC (hetbench's "name=W:A-B" with A-B token counts), each with
 * --rate R --duration S (Poisson arrivals, --seed); or --trace FILE (a hetserve capture,
 * docs/CAPTURE.md; --speed K). --tenants NAME[:SHARE[:WEIGHT]],... labels each request with a
 * tenant drawn by SHARE, for the lanes' fair order, and reports each tenant as a class. The
 * decisions are hetserve's own code (sim.h). docs/SIM.md.
 */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/log.h"
#include "hetbench/workload.h"
#include "hetsim/fleet.h"
#include "hetsim/spec.h"
#include "model/model.h"
#include "sched/request.h"
#include "server/capture.h"

#define MAX_SEARCH   4096
#define MAX_PROFILES 8

struct opts {
    const char *config, *texts, *lengths, *trace, *prices, *search, *slo, *classes, *tenants;
    const char *profiles[MAX_PROFILES];
    int n_profiles;
    const char *as[HS_FLEET_MAX_ENGINES][2];
    int n_as;
    const char *copies[HS_FLEET_MAX_ENGINES];
    int n_copies;
    const char *tax[HS_FLEET_MAX_ENGINES];
    int n_tax;
    const char *util_csv, *priority;
    double rate, duration_s, warmup_s, speed, overhead_ms, timeout_ms, ok_min, bin_s;
    uint64_t seed;
    int json, quiet;
    int share_inflight; /* -1: the config's auth.share_inflight */
};

static void usage(FILE *f)
{
    fputs("usage: hetsim --config FILE --profile FILE [--profile FILE ...] [--as ENGINE=NAME]\n"
          "              (--texts FILE | --lengths SPEC) --rate R --duration S [--seed N]\n"
          "              | --trace CAPTURE [--speed K]\n"
          "  --classes NAME:MAX,...   classes by the longest input's tokens (default: the\n"
          "                           corpus's / the spec's classes; a trace: one class 'all')\n"
          "  --tenants NAME[:SHARE[:WEIGHT]],...  tenants: SHARE of the offered rate (1), WEIGHT\n"
          "                           in the lanes' fair order (scheduler.fair; 1); each\n"
          "                           request's drawn by SHARE; reported per tenant\n"
          "  --share-inflight N       admission's in-flight share between the tenants\n"
          "                           (auth.share_inflight; default: the config's; 0 = off)\n"
          "  --copies ENGINE=N        N independent copies of an engine (workers of one type)\n"
          "  --warmup S               leave the first S seconds out of the statistics (0)\n"
          "  --overhead-ms X          added to every answer: HTTP, tokenizing, sending (0)\n"
          "  --tax ENGINE=X           its batches take X times their profiled time (1)\n"
          "  --timeout-ms N           per-request deadline (default: the config's)\n"
          "  --priority interactive|batch\n"
          "  --prices FILE            {\"ENGINE\": {\"usd_per_hour\": X, \"source\": \"...\"}}\n"
          "  --search ENGINE=A..B,..  every fleet in the ranges; the cheapest meeting --slo\n"
          "                           (P99 per class; '!!': under --ok-min answered OK)\n"
          "  --slo CLASS=P99_MS,...   targets per class (search; also checked on one run)\n"
          "  --ok-min X               share of a class that must be answered OK (0.99)\n"
          "  --util-csv FILE          per-engine utilization per --bin-s seconds (1)\n"
          "  --json                   results as JSON on stdout\n",
          f);
}

static int fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "hetsim: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return 2;
}

/* ---------------------------------------------------------------------------------------------
 * traffic
 */

static int class_of(const struct hs_sim_classes *c, const int32_t *tokens, int n)
{
    int longest = 0;
    for (int i = 0; i < n; i++)
        if (tokens[i] > longest) longest = tokens[i];
    for (int k = 0; k < c->n; k++)
        if (longest <= c->max_tokens[k]) return k;
    return c->n - 1;
}

/* Appends one arrival of n inputs; tokens are copied into the store (grown as needed). */
struct tbuild {
    struct hs_sim_traffic *t;
    size_t cap, tok_n, tok_cap;
    size_t *tok_off;
};

static hs_status tb_add(struct tbuild *b, double at_s, int cls, const int32_t *tokens, int n,
                        int priority, double timeout_ms)
{
    struct hs_sim_traffic *t = b->t;
    if (t->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        struct hs_sim_arrival *a = hs_realloc(t->a, cap * sizeof *a);
        size_t *off = hs_realloc(b->tok_off, cap * sizeof *off);
        if (a) t->a = a;
        if (off) b->tok_off = off;
        if (!a || !off) return HS_STATUS_NO_MEMORY;
        b->cap = cap;
    }
    if (b->tok_n + (size_t)n > b->tok_cap) {
        size_t cap = b->tok_cap ? b->tok_cap * 2 : 16384;
        while (cap < b->tok_n + (size_t)n) cap *= 2;
        int32_t *v = hs_realloc(t->token_store, cap * sizeof *v);
        if (!v) return HS_STATUS_NO_MEMORY;
        t->token_store = v;
        b->tok_cap = cap;
    }
    memcpy(t->token_store + b->tok_n, tokens, (size_t)n * sizeof *tokens);
    b->tok_off[t->n] = b->tok_n;
    b->tok_n += (size_t)n;
    t->a[t->n++] = (struct hs_sim_arrival){
        .at_s = at_s, .cls = cls, .n_inputs = n, .priority = priority, .timeout_ms = timeout_ms};
    return HS_STATUS_OK;
}

/* Points every arrival at its tokens (the store may have moved while it grew). */
static void tb_finish(struct tbuild *b)
{
    for (size_t i = 0; i < b->t->n; i++) b->t->a[i].tokens = b->t->token_store + b->tok_off[i];
    hs_free(b->tok_off);
}

static int cmp_arrival(const void *x, const void *y)
{
    const struct hs_sim_arrival *a = x, *b = y;
    return a->at_s < b->at_s ? -1 : a->at_s > b->at_s;
}

/* The tenant of each arrival: drawn by share with a generator of its own, so that the traffic
 * (times, lengths) is the same with and without tenants. */
static void tenants_assign(const struct opts *o, const struct hs_sim_tenants *ten,
                           struct hs_sim_traffic *t)
{
    t->n_tenants = ten->n < HS_SIM_MAX_TENANTS ? ten->n : HS_SIM_MAX_TENANTS;
    double total = 0;
    for (int k = 0; k < t->n_tenants; k++) {
        snprintf(t->tenant_name[k], sizeof t->tenant_name[k], "%s", ten->name[k]);
        t->tenant_weight[k] = ten->weight[k];
        total += ten->share[k];
    }
    struct hs_bench_rng rng;
    hs_bench_rng_seed(&rng, o->seed ^ 0x7e4a47u);
    for (size_t i = 0; i < t->n && t->n_tenants; i++) {
        double u = hs_bench_rng_uniform(&rng) * total;
        int k = 0;
        while (k < t->n_tenants - 1 && u >= ten->share[k]) u -= ten->share[k++];
        t->a[i].tenant = k + 1;
    }
}

static hs_status traffic_build(const struct opts *o, const struct hs_model *model,
                               const struct hs_sim_classes *cls, const struct hs_sim_tenants *ten,
                               struct hs_sim_traffic *t, struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    struct tbuild b = {.t = t};
    struct hs_bench_rng rng;
    hs_bench_rng_seed(&rng, o->seed);
    int prio = o->priority ? hs_priority_parse(o->priority) : HS_PRIORITY_INTERACTIVE;
    if (prio < 0) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--priority: unknown");
    hs_status st = HS_STATUS_OK;
    if (o->trace) {
        FILE *f = fopen(o->trace, "r");
        if (!f) return hs_error_set(err, HS_STATUS_IO, "--trace %s: cannot open", o->trace);
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        long lineno = 0;
        t->n_classes = 1;
        snprintf(t->class_name[0], sizeof t->class_name[0], "all");
        while (!st && (len = getline(&line, &cap, f)) > 0) {
            lineno++;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
            if (!len) continue;
            struct hs_capture_entry e;
            struct hs_error e2;
            if (hs_capture_parse_line(line, (size_t)len, &e, &e2)) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%ld: %s", o->trace, lineno,
                                  e2.msg);
            } else if (e.n_inputs > 0) {
                int p = e.priority[0] ? hs_priority_parse(e.priority) : prio;
                st = tb_add(&b, e.offset_ms / 1e3 / o->speed, 0, e.tokens, e.n_inputs,
                            p < 0 ? prio : p, (double)e.timeout_ms);
            }
            hs_capture_entry_free(&e);
        }
        free(line);
        fclose(f);
    } else if (o->texts) {
        struct hs_bench_corpus corpus;
        if ((st = hs_bench_corpus_load(o->texts, &corpus, err))) return st;
        t->n_classes = corpus.n_classes;
        for (int k = 0; k < corpus.n_classes; k++)
            snprintf(t->class_name[k], sizeof t->class_name[k], "%s", corpus.class_name[k]);
        /* the tokens of each text, once */
        int32_t *len_of = hs_calloc(corpus.n_texts ? corpus.n_texts : 1, sizeof *len_of);
        int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)model->config.max_seq_len);
        if (!len_of || !ids) st = HS_STATUS_NO_MEMORY;
        for (size_t i = 0; !st && i < corpus.n_texts; i++) {
            int n;
            st = hs_model_tokenize(model, corpus.text[i], strlen(corpus.text[i]), ids, 0, &n, NULL,
                                   err);
            len_of[i] = n;
        }
        for (double at = 0; !st;) {
            at += hs_bench_rng_exp(&rng, o->rate);
            if (at >= o->duration_s) break;
            int c = hs_bench_corpus_pick_class(&corpus, &rng);
            size_t idx = hs_bench_corpus_pick_index(&corpus, c, &rng);
            st = tb_add(&b, at, c, &len_of[idx], 1, prio, o->timeout_ms);
        }
        hs_free(len_of);
        hs_free(ids);
        hs_bench_corpus_free(&corpus);
    } else {
        struct hs_bench_lengths l;
        if ((st = hs_bench_lengths_parse(o->lengths, &l, err))) return st;
        t->n_classes = l.n;
        for (int k = 0; k < l.n; k++)
            snprintf(t->class_name[k], sizeof t->class_name[k], "%s", l.c[k].name);
        for (double at = 0; !st;) {
            at += hs_bench_rng_exp(&rng, o->rate);
            if (at >= o->duration_s) break;
            int c = hs_bench_lengths_pick(&l, &rng);
            int32_t n = (int32_t)hs_bench_rng_range(&rng, l.c[c].words_min, l.c[c].words_max);
            if (n > model->config.max_seq_len) n = model->config.max_seq_len;
            st = tb_add(&b, at, c, &n, 1, prio, o->timeout_ms);
        }
    }
    tb_finish(&b);
    if (st) {
        if (st == HS_STATUS_NO_MEMORY) hs_error_set(err, st, "traffic: out of memory");
        return st;
    }
    if (o->timeout_ms > 0)
        for (size_t i = 0; i < t->n; i++) t->a[i].timeout_ms = o->timeout_ms;
    qsort(t->a, t->n, sizeof *t->a, cmp_arrival);
    tenants_assign(o, ten, t);
    if (cls->n) {
        t->n_classes = cls->n;
        memcpy(t->class_name, cls->name, sizeof cls->name);
        for (size_t i = 0; i < t->n; i++)
            t->a[i].cls = class_of(cls, t->a[i].tokens, t->a[i].n_inputs);
    }
    return HS_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * the fleet
 */

struct world {
    struct hs_config cfg;
    struct hs_model *models[HS_CONFIG_MAX_MODELS];
    struct hs_costs *costs[MAX_PROFILES];
    int n_costs;
    struct hs_sim_fleet fleet;
    double price[HS_FLEET_MAX_ENGINES];
    char price_source[HS_FLEET_MAX_ENGINES][256];
    bool priced;
};

static int engine_index(const struct hs_config *c, const char *name, size_t len)
{
    for (int e = 0; e < c->n_engines; e++)
        if (strlen(c->engines[e].name) == len && !strncmp(c->engines[e].name, name, len)) return e;
    return -1;
}

static hs_status prices_load(struct world *w, const char *path, struct hs_error *err)
{
    char *text;
    size_t len;
    hs_status st = hs_read_file(path, 1 << 20, &text, &len, err);
    if (st) return st;
    const char *names[HS_FLEET_MAX_ENGINES];
    for (int e = 0; e < w->cfg.n_engines; e++) names[e] = w->cfg.engines[e].name;
    char label[300];
    snprintf(label, sizeof label, "--prices %s", path);
    st = hs_sim_prices_parse(text, len, label, names, w->cfg.n_engines, w->price, w->price_source,
                             err);
    hs_free(text);
    w->priced = !st;
    return st;
}

static hs_status world_load(struct world *w, const struct opts *o, struct hs_error *err)
{
    const char *model = getenv("HS_MODEL_DIR");
    hs_config_defaults(&w->cfg, model && *model ? model : "models/all-MiniLM-L6-v2");
    hs_status st = hs_config_load(o->config, &w->cfg, err);
    if (st) return st;
    if ((st = hs_config_validate(&w->cfg, err))) return st;
    if (o->share_inflight >= 0) w->cfg.auth.share_inflight = o->share_inflight;
    struct hs_sim_fleet *f = &w->fleet;
    f->cfg = &w->cfg;
    f->overhead_ms = o->overhead_ms;
    f->bin_s = o->bin_s;
    for (int i = 0; i < w->cfg.n_models; i++) {
        if ((st = hs_model_load_meta(w->cfg.models[i].path, &w->models[i], err))) return st;
        f->models[i] = &w->models[i]->config;
        f->model_names[i] = w->cfg.models[i].name[0] ? w->cfg.models[i].name : w->models[i]->name;
    }
    for (int i = 0; i < o->n_profiles; i++) {
        w->costs[i] = hs_malloc(sizeof *w->costs[i]);
        if (!w->costs[i]) return hs_error_set(err, HS_STATUS_NO_MEMORY, "profile");
        w->n_costs++;
        if ((st = hs_costs_load(o->profiles[i], w->costs[i], err))) return st;
    }
    for (int e = 0; e < w->cfg.n_engines; e++) {
        const char *name = w->cfg.engines[e].name;
        for (int k = 0; k < o->n_as; k++)
            if (!strcmp(o->as[k][0], name)) name = o->as[k][1];
        for (int i = 0; i < w->n_costs && !f->cost[e]; i++) {
            const struct hs_cost_lane *l = hs_costs_lane(w->costs[i], name, NULL, NULL);
            if (l && l->ok && l->n_cells) f->cost[e] = l;
        }
    }
    for (int e = 0; e < w->cfg.n_engines; e++) f->copies[e] = 1;
    for (int k = 0; k < o->n_copies; k++) {
        const char *eq = strchr(o->copies[k], '=');
        int e = eq ? engine_index(&w->cfg, o->copies[k], (size_t)(eq - o->copies[k])) : -1;
        char *end = NULL;
        long n = eq ? strtol(eq + 1, &end, 10) : -1;
        if (e < 0 || end == eq + 1 || *end || n < 0 || n > HS_SCHED_MAX_LANES)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--copies %s: expected ENGINE=N with a configured engine, N >= 0",
                                o->copies[k]);
        f->copies[e] = (int)n;
    }
    for (int k = 0; k < o->n_tax; k++) {
        const char *eq = strchr(o->tax[k], '=');
        int e = eq ? engine_index(&w->cfg, o->tax[k], (size_t)(eq - o->tax[k])) : -1;
        char *end = NULL;
        double x = eq ? strtod(eq + 1, &end) : 0;
        if (e < 0 || !end || *end || !(x >= 0.1 && x <= 100))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--tax %s: expected ENGINE=X with a configured engine, X in "
                                "[0.1, 100]",
                                o->tax[k]);
        f->tax[e] = x;
    }
    if (o->prices && (st = prices_load(w, o->prices, err))) return st;
    return HS_STATUS_OK;
}

static void world_free(struct world *w)
{
    for (int i = 0; i < HS_CONFIG_MAX_MODELS; i++) hs_model_free(w->models[i]);
    for (int i = 0; i < w->n_costs; i++) hs_free(w->costs[i]);
}

static double fleet_usd_per_hour(const struct world *w)
{
    double usd = 0;
    for (int e = 0; e < w->cfg.n_engines; e++) usd += w->price[e] * w->fleet.copies[e];
    return usd;
}

/* ---------------------------------------------------------------------------------------------
 * SLO and reports
 */

/* Whether r meets the SLO: every named class's P99 within target and at least ok_min of it
 * answered OK. */
static bool slo_met(const struct hs_sim_slo *s, const struct hs_sim_result *r, double ok_min)
{
    for (int i = 0; i < s->n; i++) {
        const struct hs_sim_class_result *c = &r->cls[s->cls[i]];
        if (!c->n || c->p99_ms > s->p99_ms[i] || (double)c->ok < ok_min * (double)c->n)
            return false;
    }
    return true;
}

static json_t *class_json(const struct hs_sim_class_result *c)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)c->n, "ok",
                     (json_int_t)c->ok, "shed", (json_int_t)c->shed, "timeout",
                     (json_int_t)c->timeout, "other", (json_int_t)c->other, "p50_ms", c->p50_ms,
                     "p90_ms", c->p90_ms, "p99_ms", c->p99_ms, "mean_ms", c->mean_ms, "max_ms",
                     c->max_ms);
}

static json_t *result_json(const struct world *w, const struct hs_sim_result *r)
{
    json_t *j = json_object(), *cls = json_object(), *eng = json_array();
    for (int k = 0; k < r->n_classes; k++)
        json_object_set_new(cls, r->class_name[k], class_json(&r->cls[k]));
    json_object_set_new(cls, "all", class_json(&r->all));
    for (int e = 0; e < r->n_groups; e++)
        json_array_append_new(eng, json_pack("{s:s,s:i,s:f,s:f,s:I,s:f}", "engine", r->grp[e].name,
                                             "copies", r->grp[e].lanes, "busy_s", r->grp[e].busy_s,
                                             "utilization", r->grp[e].util, "batches",
                                             (json_int_t)r->grp[e].batches, "mean_batch_seqs",
                                             r->grp[e].mean_batch_seqs));
    json_object_set_new(j, "classes", cls);
    if (r->n_tenants) {
        json_t *ten = json_object();
        for (int k = 0; k < r->n_tenants; k++) {
            json_t *c = class_json(&r->tenant[k]);
            json_object_set_new(c, "share_refused", json_integer(r->tenant_share_refused[k]));
            json_object_set_new(ten, r->tenant_name[k], c);
        }
        json_object_set_new(j, "tenants", ten);
    }
    json_object_set_new(j, "engines", eng);
    json_object_set_new(j, "span_s", json_real(r->span_s));
    json_object_set_new(j, "router_shed", json_integer(r->router_shed));
    json_object_set_new(j, "failed_over", json_integer(r->failed_over));
    json_object_set_new(j, "retries", json_integer(r->retries));
    if (w->priced) {
        double usd_h = fleet_usd_per_hour(w);
        json_object_set_new(j, "usd_per_hour", json_real(usd_h));
        double ok_per_s = r->span_s > 0 ? (double)r->all.ok / r->span_s : 0;
        json_object_set_new(j, "usd_per_million_ok",
                            json_real(ok_per_s > 0 ? usd_h / 3600.0 / ok_per_s * 1e6 : 0));
    }
    return j;
}

static void result_print(const struct world *w, const struct hs_sim_result *r)
{
    printf("%-10s %8s %8s %6s %6s %9s %9s %9s\n", "class", "n", "ok", "429", "504", "p50 ms",
           "p99 ms", "mean ms");
    for (int k = 0; k <= r->n_classes; k++) {
        const struct hs_sim_class_result *c = k < r->n_classes ? &r->cls[k] : &r->all;
        printf("%-10s %8lld %8lld %6lld %6lld %9.1f %9.1f %9.1f\n",
               k < r->n_classes ? r->class_name[k] : "all", (long long)c->n, (long long)c->ok,
               (long long)c->shed, (long long)c->timeout, c->p50_ms, c->p99_ms, c->mean_ms);
    }
    for (int k = 0; k < r->n_tenants; k++) {
        const struct hs_sim_class_result *c = &r->tenant[k];
        char label[48];
        snprintf(label, sizeof label, "tenant %s", r->tenant_name[k]);
        printf("%-10s %8lld %8lld %6lld %6lld %9.1f %9.1f %9.1f\n", label, (long long)c->n,
               (long long)c->ok, (long long)c->shed, (long long)c->timeout, c->p50_ms, c->p99_ms,
               c->mean_ms);
    }
    printf("%-10s %6s %8s %8s %10s\n", "engine", "copies", "busy", "batches", "mean batch");
    for (int e = 0; e < r->n_groups; e++)
        printf("%-10s %6d %7.1f%% %8lld %10.1f\n", r->grp[e].name, r->grp[e].lanes,
               100 * r->grp[e].util, (long long)r->grp[e].batches, r->grp[e].mean_batch_seqs);
    printf("span %.1f s; router shed %lld, failed over %lld, retries %lld\n", r->span_s,
           (long long)r->router_shed, (long long)r->failed_over, (long long)r->retries);
    if (w->priced) {
        double usd_h = fleet_usd_per_hour(w);
        double ok_per_s = r->span_s > 0 ? (double)r->all.ok / r->span_s : 0;
        printf("cost: $%.3f/hour, $%.3f per million requests answered\n", usd_h,
               ok_per_s > 0 ? usd_h / 3600.0 / ok_per_s * 1e6 : 0);
    }
}

static hs_status util_csv(const char *path, const struct hs_sim_result *r, struct hs_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "--util-csv %s: cannot write", path);
    fprintf(f, "t_s");
    int bins = 0;
    for (int e = 0; e < r->n_groups; e++) {
        fprintf(f, ",%s", r->grp[e].name);
        if (r->grp[e].n_bins > bins) bins = r->grp[e].n_bins;
    }
    fputc('\n', f);
    for (int k = 0; k < bins; k++) {
        fprintf(f, "%.3f", k * r->bin_s);
        for (int e = 0; e < r->n_groups; e++)
            fprintf(f, ",%.4f", k < r->grp[e].n_bins ? r->grp[e].util_bins[k] : 0.0);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? HS_STATUS_OK
                          : hs_error_set(err, HS_STATUS_IO, "--util-csv %s: write failed", path);
}

/* ---------------------------------------------------------------------------------------------
 * search: every fleet in the ranges, the cheapest meeting the SLO
 */

static int search(struct world *w, const struct opts *o, const struct hs_sim_traffic *t,
                  const struct hs_sim_slo *slo)
{
    struct hs_sim_search sp;
    struct hs_error e2;
    const char *names[HS_FLEET_MAX_ENGINES];
    for (int e = 0; e < w->cfg.n_engines; e++) names[e] = w->cfg.engines[e].name;
    if (hs_sim_search_parse(o->search, names, w->cfg.n_engines, HS_SCHED_MAX_LANES, &sp, &e2))
        return fail("%s", e2.msg);
    const int n = sp.n, *eng = sp.engine, *lo = sp.lo, *hi = sp.hi;
    long total = 1;
    for (int i = 0; i < n; i++) total *= hi[i] - lo[i] + 1;
    if (total > MAX_SEARCH) return fail("--search: more than %s fleets", "4096");
    int cur[HS_FLEET_MAX_ENGINES];
    for (int i = 0; i < n; i++) cur[i] = lo[i];
    double best_usd = -1;
    int best[HS_FLEET_MAX_ENGINES] = {0};
    json_t *all = json_array();
    if (!o->json) {
        for (int i = 0; i < n; i++) printf("%8s ", w->cfg.engines[eng[i]].name);
        printf("%9s %10s", "$/hour", "$/M ok");
        for (int k = 0; k < slo->n; k++) printf(" %9s", t->class_name[slo->cls[k]]);
        for (int i = 0; i < n; i++) printf(" %7.7s%%", w->cfg.engines[eng[i]].name);
        printf("  verdict\n");
    }
    for (long it = 0; it < total; it++) {
        for (int i = 0; i < n; i++) w->fleet.copies[eng[i]] = cur[i];
        struct hs_sim_result r;
        struct hs_error err;
        int lanes = 0;
        for (int e = 0; e < w->cfg.n_engines; e++) lanes += w->fleet.copies[e];
        if (!lanes || hs_sim_fleet_run(&w->fleet, t, &r, &err)) { /* an empty fleet: skipped */
            if (lanes) {
                json_decref(all);
                return fail("%s", err.msg);
            }
            for (int i = n - 1; i >= 0; i--) {
                if (++cur[i] <= hi[i]) break;
                cur[i] = lo[i];
            }
            continue;
        }
        bool met = slo_met(slo, &r, o->ok_min);
        double usd = fleet_usd_per_hour(w);
        double ok_per_s = r.span_s > 0 ? (double)r.all.ok / r.span_s : 0;
        double per_m = ok_per_s > 0 ? usd / 3600.0 / ok_per_s * 1e6 : 0;
        if (met && (best_usd < 0 || usd < best_usd)) {
            best_usd = usd;
            memcpy(best, cur, sizeof best);
        }
        json_t *row = result_json(w, &r);
        json_t *fl = json_object();
        for (int i = 0; i < n; i++)
            json_object_set_new(fl, w->cfg.engines[eng[i]].name, json_integer(cur[i]));
        json_object_set_new(row, "fleet", fl);
        json_object_set_new(row, "slo_met", json_boolean(met));
        json_array_append_new(all, row);
        if (!o->json) {
            for (int i = 0; i < n; i++) printf("%8d ", cur[i]);
            printf("%9.3f %10.3f", usd, per_m);
            for (int k = 0; k < slo->n; k++) {
                const struct hs_sim_class_result *c = &r.cls[slo->cls[k]];
                printf(" %7.0f%s", c->p99_ms,
                       (double)c->ok < o->ok_min * (double)c->n ? "!!" : "  ");
            }
            for (int i = 0; i < n; i++) printf(" %7.0f%%", 100 * r.grp[eng[i]].util);
            printf("  %s\n", met ? "meets" : "misses");
        }
        hs_sim_result_free(&r);
        for (int i = n - 1; i >= 0; i--) { /* next combination */
            if (++cur[i] <= hi[i]) break;
            cur[i] = lo[i];
        }
    }
    if (o->json) {
        json_t *j = json_pack("{s:o}", "fleets", all);
        if (best_usd >= 0) {
            json_t *fl = json_object();
            for (int i = 0; i < n; i++)
                json_object_set_new(fl, w->cfg.engines[eng[i]].name, json_integer(best[i]));
            json_object_set_new(j, "cheapest", fl);
            json_object_set_new(j, "cheapest_usd_per_hour", json_real(best_usd));
        }
        json_dumpf(j, stdout, JSON_INDENT(1));
        putchar('\n');
        json_decref(j);
    } else {
        json_decref(all);
        printf("\nprices:\n");
        for (int e = 0; e < w->cfg.n_engines; e++)
            printf("  %-10s $%.3f/hour  (%s)\n", w->cfg.engines[e].name, w->price[e],
                   w->price_source[e]);
        if (best_usd < 0) {
            printf("no fleet in the ranges meets the SLO\n");
        } else {
            printf("cheapest fleet meeting the SLO:");
            for (int i = 0; i < n; i++) printf(" %s x%d", w->cfg.engines[eng[i]].name, best[i]);
            printf(" at $%.3f/hour\n", best_usd);
        }
    }
    return best_usd >= 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * main
 */

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {{"config", 1, 0, 'c'},
                                       {"profile", 1, 0, 'p'},
                                       {"as", 1, 0, 'a'},
                                       {"texts", 1, 0, 't'},
                                       {"lengths", 1, 0, 'l'},
                                       {"trace", 1, 0, 'T'},
                                       {"rate", 1, 0, 'r'},
                                       {"duration", 1, 0, 'd'},
                                       {"seed", 1, 0, 's'},
                                       {"speed", 1, 0, 'S'},
                                       {"classes", 1, 0, 'C'},
                                       {"copies", 1, 0, 'n'},
                                       {"warmup", 1, 0, 'W'},
                                       {"overhead-ms", 1, 0, 'o'},
                                       {"timeout-ms", 1, 0, 'm'},
                                       {"priority", 1, 0, 'P'},
                                       {"prices", 1, 0, 'x'},
                                       {"search", 1, 0, 'q'},
                                       {"slo", 1, 0, 'L'},
                                       {"ok-min", 1, 0, 'k'},
                                       {"util-csv", 1, 0, 'u'},
                                       {"bin-s", 1, 0, 'b'},
                                       {"json", 0, 0, 'j'},
                                       {"help", 0, 0, 'h'},
                                       {"tax", 1, 0, 'X'},
                                       {"tenants", 1, 0, 'N'},
                                       {"share-inflight", 1, 0, 'I'},
                                       {0, 0, 0, 0}};
    o->speed = 1;
    o->ok_min = 0.99;
    o->seed = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        double v = optarg ? strtod(optarg, &end) : 0;
        bool num_ok = optarg && end != optarg && !*end && isfinite(v) && v >= 0;
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'p':
            if (o->n_profiles == MAX_PROFILES) return fail("%s", "too many --profile");
            o->profiles[o->n_profiles++] = optarg;
            break;
        case 'a': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1] || o->n_as == HS_FLEET_MAX_ENGINES)
                return fail("--as %s: expected ENGINE=PROFILED_ENGINE", optarg);
            *eq = '\0';
            o->as[o->n_as][0] = optarg;
            o->as[o->n_as++][1] = eq + 1;
            break;
        }
        case 't':
            o->texts = optarg;
            break;
        case 'l':
            o->lengths = optarg;
            break;
        case 'T':
            o->trace = optarg;
            break;
        case 'C':
            o->classes = optarg;
            break;
        case 'N':
            o->tenants = optarg;
            break;
        case 'n':
            if (o->n_copies == HS_FLEET_MAX_ENGINES) return fail("%s", "too many --copies");
            o->copies[o->n_copies++] = optarg;
            break;
        case 'X':
            if (o->n_tax == HS_FLEET_MAX_ENGINES) return fail("%s", "too many --tax");
            o->tax[o->n_tax++] = optarg;
            break;
        case 'P':
            o->priority = optarg;
            break;
        case 'x':
            o->prices = optarg;
            break;
        case 'q':
            o->search = optarg;
            break;
        case 'L':
            o->slo = optarg;
            break;
        case 'u':
            o->util_csv = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'r':
        case 'd':
        case 's':
        case 'S':
        case 'W':
        case 'o':
        case 'm':
        case 'k':
        case 'b':
        case 'I':
            if (!num_ok) return fail("bad number '%s'", optarg ? optarg : "");
            if (c == 'r') o->rate = v;
            if (c == 'd') o->duration_s = v;
            if (c == 's') o->seed = (uint64_t)v;
            if (c == 'S') o->speed = v;
            if (c == 'W') o->warmup_s = v;
            if (c == 'o') o->overhead_ms = v;
            if (c == 'm') o->timeout_ms = v;
            if (c == 'k') o->ok_min = v;
            if (c == 'b') o->bin_s = v;
            if (c == 'I') {
                if (v < 0 || v > (1 << 20) || v != (int)v)
                    return fail("%s", "--share-inflight must be an integer in [0, 1048576]");
                o->share_inflight = (int)v;
            }
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) return fail("unexpected argument '%s'", argv[optind]);
    if (!o->config) return fail("%s", "--config is required");
    if (!o->n_profiles) return fail("%s", "--profile is required (a `hetserve profile` file)");
    if (!!o->texts + !!o->lengths + !!o->trace != 1)
        return fail("%s", "give exactly one of --texts, --lengths, --trace");
    if (!o->trace && (!(o->rate > 0) || !(o->duration_s > 0)))
        return fail("%s", "--texts and --lengths need --rate > 0 and --duration > 0");
    if (!(o->speed > 0)) return fail("%s", "--speed must be > 0");
    if (o->ok_min > 1) return fail("%s", "--ok-min must be in [0, 1]");
    if (o->search && (!o->slo || !o->prices))
        return fail("%s", "--search needs --slo and --prices");
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.share_inflight = -1};
    /* the scheduler's and router's notes (a route degraded to other lanes in a fleet without an
     * engine, a simulated batch's failure) are part of the simulation, not of hetsim's output */
    if (!getenv("HS_LOG_LEVEL")) hs_log_set_level(HS_LOG_ERROR);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    struct world *w = hs_calloc(1, sizeof *w);
    struct hs_sim_traffic t = {0};
    struct hs_sim_classes cls = {0};
    struct hs_sim_tenants ten = {0};
    struct hs_error err;
    if (!w) return fail("%s", "out of memory");
    if (world_load(w, &o, &err) || (o.classes && hs_sim_classes_parse(o.classes, &cls, &err)) ||
        (o.tenants && hs_sim_tenants_parse(o.tenants, &ten, &err)) ||
        traffic_build(&o, w->models[0], &cls, &ten, &t, &err)) {
        rc = fail("%s", err.msg);
        goto out;
    }
    for (size_t i = 0; i < t.n; i++) t.a[i].warmup = t.a[i].at_s < o.warmup_s;
    struct hs_sim_slo slo = {0};
    const char *cnames[HS_SIM_MAX_CLASSES];
    for (int k = 0; k < t.n_classes; k++) cnames[k] = t.class_name[k];
    if (o.slo && hs_sim_slo_parse(o.slo, cnames, t.n_classes, &slo, &err)) {
        rc = fail("%s", err.msg);
        goto out;
    }
    if (!o.quiet)
        fprintf(stderr, "hetsim: %zu requests in %d class(es), %d engine(s)\n", t.n, t.n_classes,
                w->cfg.n_engines);
    if (o.search) {
        rc = search(w, &o, &t, &slo);
        goto out;
    }
    struct hs_sim_result r;
    if (hs_sim_fleet_run(&w->fleet, &t, &r, &err)) {
        rc = fail("%s", err.msg);
        goto out;
    }
    if (o.json) {
        json_t *j = result_json(w, &r);
        if (o.slo) json_object_set_new(j, "slo_met", json_boolean(slo_met(&slo, &r, o.ok_min)));
        json_dumpf(j, stdout, JSON_INDENT(1));
        putchar('\n');
        json_decref(j);
    } else {
        result_print(w, &r);
        if (o.slo) printf("SLO %s\n", slo_met(&slo, &r, o.ok_min) ? "met" : "missed");
    }
    if (o.util_csv && util_csv(o.util_csv, &r, &err)) rc = fail("%s", err.msg);
    hs_sim_result_free(&r);
out:
    hs_sim_traffic_free(&t);
    world_free(w);
    hs_free(w);
    return rc;
}
