#include "server/config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/alloc.h"
#include "sched/router.h"

#define DEFAULT_MODEL_PATH "models/all-MiniLM-L6-v2"

void hs_config_defaults(struct hs_config *c, const char *model_path)
{
    memset(c, 0, sizeof *c);
    snprintf(c->server.host, sizeof c->server.host, "127.0.0.1");
    c->server.port = 8080;
    c->server.threads = 4;
    c->server.connection_timeout_s = 60;

    c->n_engines = 1;
    snprintf(c->engines[0].name, sizeof c->engines[0].name, "cpu0");
    snprintf(c->engines[0].kind, sizeof c->engines[0].kind, "cpu");
    c->engines[0].slots = 1;
    c->engines[0].batch_window_us = -1;

    c->n_models = 1;
    snprintf(c->models[0].path, sizeof c->models[0].path, "%s",
             model_path ? model_path : DEFAULT_MODEL_PATH);
    snprintf(c->models[0].engine, sizeof c->models[0].engine, "cpu0");

    c->batching.batch_window_us = 2000;
    c->batching.batch_max = 32;
    c->batching.batch_max_tokens = 8192;
    static const int buckets[] = {16, 32, 64, 128, 256};
    c->batching.n_buckets = 5;
    memcpy(c->batching.buckets, buckets, sizeof buckets);

    c->limits.queue_max = 1024;
    c->limits.timeout_ms = 10000;
    c->limits.timeout_max_ms = 600000;
    c->limits.body_bytes_max = 4 << 20;
    c->limits.items_max = 512;
    c->limits.chars_max = 32768;
    c->limits.drain_timeout_ms = 30000;

    c->scheduler.shed_batch_ratio = 0.75;
    c->scheduler.throughput_init_tokens_per_s = 20000;
    c->scheduler.throughput_ewma_alpha = 0.2;
    c->scheduler.retry_after_min_s = 1;

    c->breaker.window_requests = 20;
    c->breaker.min_requests = 5;
    c->breaker.error_ratio_max = 0.5;
    c->breaker.latency_max_ms = 0;
    c->breaker.open_ms = 5000;
    c->breaker.half_open_probes = 3;
    c->retry.budget_ratio = 0.1;
    c->retry.budget_max = 5;
    c->admin.enabled = 0;
    c->cascade.threshold =
        0.7; /* heads/REPORT.md: most of the big model's gain, a third escalated */
    c->cascade.escalation_max_ratio = 1.0;
}

/* ---------------------------------------------------------------------------------------------
 * parsing
 */

struct ctx {
    yaml_document_t *doc;
    const char *label;
    struct hs_error *err;
    char path[128]; /* dotted key being parsed, for messages */
};

static hs_status fault(struct ctx *x, const yaml_node_t *n, const char *what)
{
    return hs_error_set(x->err, HS_STATUS_INVALID_INPUT, "%s:%zu: %s: %s", x->label,
                        n ? (size_t)n->start_mark.line + 1 : (size_t)0, x->path, what);
}

static yaml_node_t *node(struct ctx *x, int i)
{
    return yaml_document_get_node(x->doc, i);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static hs_status get_i64(struct ctx *x, const yaml_node_t *n, int64_t lo, int64_t hi, int64_t *out)
{
    const char *s = scalar(n);
    if (!s || !*s) return fault(x, n, "expected an integer");
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return fault(x, n, "expected an integer");
    if (v < lo || v > hi) {
        char msg[128];
        snprintf(msg, sizeof msg, "%lld is out of range [%lld, %lld]", v, (long long)lo,
                 (long long)hi);
        return fault(x, n, msg);
    }
    *out = v;
    return HS_STATUS_OK;
}

static hs_status get_int(struct ctx *x, const yaml_node_t *n, int lo, int hi, int *out)
{
    int64_t v;
    hs_status st = get_i64(x, n, lo, hi, &v);
    if (st == HS_STATUS_OK) *out = (int)v;
    return st;
}

static hs_status get_double(struct ctx *x, const yaml_node_t *n, double lo, double hi, double *out)
{
    const char *s = scalar(n);
    if (!s || !*s) return fault(x, n, "expected a number");
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return fault(x, n, "expected a number");
    if (v < lo || v > hi) {
        char msg[128];
        snprintf(msg, sizeof msg, "%g is out of range [%g, %g]", v, lo, hi);
        return fault(x, n, msg);
    }
    *out = v;
    return HS_STATUS_OK;
}

static hs_status get_str(struct ctx *x, const yaml_node_t *n, char *buf, size_t cap)
{
    const char *s = scalar(n);
    if (!s) return fault(x, n, "expected a string");
    if (strlen(s) >= cap) return fault(x, n, "string too long");
    snprintf(buf, cap, "%s", s);
    return HS_STATUS_OK;
}

static hs_status get_int_list(struct ctx *x, const yaml_node_t *n, int lo, int hi, int cap,
                              int *vals, int *count)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of integers");
    int k = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        if (k >= cap) return fault(x, n, "too many items");
        hs_status st = get_int(x, node(x, *it), lo, hi, &vals[k]);
        if (st) return st;
        k++;
    }
    *count = k;
    return HS_STATUS_OK;
}

/* cores: a list of integers or a string like "0-3,6". */
static hs_status get_cores(struct ctx *x, const yaml_node_t *n, struct hs_engine_cfg *e)
{
    if (n && n->type == YAML_SEQUENCE_NODE)
        return get_int_list(x, n, 0, 4095, HS_ENGINE_MAX_CORES, e->cores, &e->n_cores);
    const char *s = scalar(n);
    if (!s) return fault(x, n, "expected a list of core numbers or a string like \"0-3,6\"");
    e->n_cores = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) return fault(x, n, "bad core set");
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a) return fault(x, n, "bad core range");
            s = end;
        }
        for (long c = a; c <= b; c++) {
            if (e->n_cores >= HS_ENGINE_MAX_CORES || c > 4095) return fault(x, n, "too many cores");
            e->cores[e->n_cores++] = (int)c;
        }
        if (*s == ',')
            s++;
        else if (*s)
            return fault(x, n, "bad core set");
    }
    return HS_STATUS_OK;
}

/* whitelist: [[batch, seq], ...] */
static hs_status get_shapes(struct ctx *x, const yaml_node_t *n, struct hs_engine_cfg *e)
{
    if (!n || n->type != YAML_SEQUENCE_NODE)
        return fault(x, n, "expected a list of [batch, seq] pairs");
    e->n_shapes = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        int pair[2], k = 0;
        if (e->n_shapes >= HS_SCHED_MAX_SHAPES) return fault(x, n, "too many shapes");
        hs_status st = get_int_list(x, node(x, *it), 1, 1 << 20, 2, pair, &k);
        if (st) return st;
        if (k != 2) return fault(x, node(x, *it), "expected [batch, seq]");
        e->shapes[e->n_shapes++] = (struct hs_shape){pair[0], pair[1]};
    }
    return HS_STATUS_OK;
}

#define FOR_PAIRS(x, n, key, val)                                                                  \
    for (yaml_node_pair_t *p_ = (n)->data.mapping.pairs.start; p_ < (n)->data.mapping.pairs.top;   \
         p_++)                                                                                     \
        for (const char *key = scalar(node(x, p_->key)); key; key = NULL)                          \
            for (yaml_node_t *val = node(x, p_->value); val; val = NULL)

static void set_path(struct ctx *x, const char *section, const char *key)
{
    snprintf(x->path, sizeof x->path, "%s%s%s", section, *section ? "." : "", key ? key : "?");
}

static hs_status need_map(struct ctx *x, const yaml_node_t *n)
{
    return n && n->type == YAML_MAPPING_NODE ? HS_STATUS_OK : fault(x, n, "expected a mapping");
}

static hs_status parse_server(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "server", key);
        if (!strcmp(key, "host"))
            st = get_str(x, v, c->server.host, sizeof c->server.host);
        else if (!strcmp(key, "port"))
            st = get_int(x, v, 0, 65535, &c->server.port);
        else if (!strcmp(key, "threads"))
            st = get_int(x, v, 1, 1024, &c->server.threads);
        else if (!strcmp(key, "connection_timeout_s"))
            st = get_int(x, v, 0, 86400, &c->server.connection_timeout_s);
        else if (!strcmp(key, "trace_file"))
            st = get_str(x, v, c->server.trace_file, sizeof c->server.trace_file);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_engines(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of engines");
    c->n_engines = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *en = node(x, *it);
        hs_status st = need_map(x, en);
        if (st) return st;
        if (c->n_engines >= HS_CONFIG_MAX_ENGINES) return fault(x, en, "too many engines");
        struct hs_engine_cfg *e = &c->engines[c->n_engines++];
        memset(e, 0, sizeof *e);
        snprintf(e->kind, sizeof e->kind, "cpu");
        snprintf(e->name, sizeof e->name, "cpu%d", c->n_engines - 1);
        e->slots = 1;
        e->batch_window_us = -1;
        FOR_PAIRS(x, en, key, v)
        {
            set_path(x, "engines[]", key);
            if (!strcmp(key, "name"))
                st = get_str(x, v, e->name, sizeof e->name);
            else if (!strcmp(key, "kind"))
                st = get_str(x, v, e->kind, sizeof e->kind);
            else if (!strcmp(key, "device"))
                st = get_int(x, v, 0, 1024, &e->device);
            else if (!strcmp(key, "dtype"))
                st = get_str(x, v, e->dtype, sizeof e->dtype);
            else if (!strcmp(key, "threads"))
                st = get_int(x, v, 0, 4096, &e->threads);
            else if (!strcmp(key, "cores"))
                st = get_cores(x, v, e);
            else if (!strcmp(key, "whitelist"))
                st = get_shapes(x, v, e);
            else if (!strcmp(key, "slots"))
                st = get_int(x, v, 1, HS_SCHED_MAX_SLOTS, &e->slots);
            else if (!strcmp(key, "batch_window_us"))
                st = get_int(x, v, -1, 60 * 1000 * 1000, &e->batch_window_us);
            else if (!strcmp(key, "batch_max"))
                st = get_int(x, v, 0, 65536, &e->batch_max);
            else if (!strcmp(key, "batch_max_tokens"))
                st = get_int(x, v, 0, 1 << 24, &e->batch_max_tokens);
            else if (!strcmp(key, "queue_max"))
                st = get_int(x, v, 0, 1 << 24, &e->queue_max);
            else
                st = fault(x, v, "unknown key");
            if (st) return st;
        }
    }
    return HS_STATUS_OK;
}

static hs_status get_names(struct ctx *x, const yaml_node_t *n, char (*names)[32], int *count);

static hs_status parse_models(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of models");
    c->n_models = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *mn = node(x, *it);
        hs_status st = need_map(x, mn);
        if (st) return st;
        if (c->n_models >= HS_CONFIG_MAX_MODELS) return fault(x, mn, "too many models");
        struct hs_model_cfg *m = &c->models[c->n_models++];
        memset(m, 0, sizeof *m);
        char first[sizeof m->engine] = {0};
        snprintf(first, sizeof first, "%s", c->n_engines ? c->engines[0].name : "cpu0");
        memcpy(m->engine, first, sizeof first);
        FOR_PAIRS(x, mn, key, v)
        {
            set_path(x, "models[]", key);
            if (!strcmp(key, "name"))
                st = get_str(x, v, m->name, sizeof m->name);
            else if (!strcmp(key, "path"))
                st = get_str(x, v, m->path, sizeof m->path);
            else if (!strcmp(key, "engine")) {
                st = get_str(x, v, m->engine, sizeof m->engine);
                m->n_engines = 0;
            } else if (!strcmp(key, "engines")) {
                st = get_names(x, v, m->engines, &m->n_engines);
                if (!st && m->n_engines == 0) st = fault(x, v, "expected at least one engine");
                if (!st) memcpy(m->engine, m->engines[0], sizeof m->engine);
            } else if (!strcmp(key, "dtype"))
                st = get_str(x, v, m->dtype, sizeof m->dtype);
            else
                st = fault(x, v, "unknown key");
            if (st) return st;
        }
        set_path(x, "models[]", "path");
        if (!m->path[0]) return fault(x, mn, "every model needs a path");
    }
    return HS_STATUS_OK;
}

/* A list of engine names. */
static hs_status get_names(struct ctx *x, const yaml_node_t *n, char (*names)[32], int *count)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of names");
    int k = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        if (k >= HS_CONFIG_MAX_ENGINES) return fault(x, n, "too many names");
        hs_status st = get_str(x, node(x, *it), names[k], 32);
        if (st) return st;
        k++;
    }
    *count = k;
    return HS_STATUS_OK;
}

/* {route: NAME, ratio: R} (split, shadow) or {route: NAME, ratio_max: R} (failover). */
static hs_status get_route_ref(struct ctx *x, const yaml_node_t *n, const char *section,
                               const char *ratio_key, char *route, double *ratio)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, section, key);
        if (!strcmp(key, "route"))
            st = get_str(x, v, route, 32);
        else if (!strcmp(key, ratio_key))
            st = get_double(x, v, 0, 1, ratio);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_routes(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of routes");
    c->n_routes = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *rn = node(x, *it);
        hs_status st = need_map(x, rn);
        if (st) return st;
        if (c->n_routes >= HS_CONFIG_MAX_ROUTES) return fault(x, rn, "too many routes");
        struct hs_route_cfg *r = &c->routes[c->n_routes++];
        memset(r, 0, sizeof *r);
        snprintf(r->kind, sizeof r->kind, "engines");
        snprintf(r->name, sizeof r->name, "route%d", c->n_routes - 1);
        r->failover_ratio_max = 0.3;
        FOR_PAIRS(x, rn, key, v)
        {
            set_path(x, "routes[]", key);
            if (!strcmp(key, "name"))
                st = get_str(x, v, r->name, sizeof r->name);
            else if (!strcmp(key, "kind"))
                st = get_str(x, v, r->kind, sizeof r->kind);
            else if (!strcmp(key, "model"))
                st = get_str(x, v, r->model, sizeof r->model);
            else if (!strcmp(key, "engines"))
                st = get_names(x, v, r->engines, &r->n_engines);
            else if (!strcmp(key, "split"))
                st =
                    get_route_ref(x, v, "routes[].split", "ratio", r->split_route, &r->split_ratio);
            else if (!strcmp(key, "shadow"))
                st = get_route_ref(x, v, "routes[].shadow", "ratio", r->shadow_route,
                                   &r->shadow_ratio);
            else if (!strcmp(key, "failover"))
                st = get_route_ref(x, v, "routes[].failover", "ratio_max", r->failover_route,
                                   &r->failover_ratio_max);
            else if (!strcmp(key, "small"))
                st = get_str(x, v, r->small, sizeof r->small);
            else if (!strcmp(key, "big"))
                st = get_str(x, v, r->big, sizeof r->big);
            else if (!strcmp(key, "threshold") || !strcmp(key, "escalate_ratio_max"))
                st = fault(x, v,
                           "a cascade's threshold and escalation cap are set in the cascade "
                           "section (cascade.threshold, cascade.escalation_max_ratio)");
            else
                st = fault(x, v, "unknown key");
            if (st) return st;
        }
        set_path(x, "routes[]", "kind");
        if (strcmp(r->kind, "engines") && strcmp(r->kind, "cascade"))
            return fault(x, rn, "kind must be engines or cascade");
        if (!strcmp(r->kind, "cascade") && (!r->small[0] || !r->big[0]))
            return fault(x, rn, "a cascade needs small and big routes");
    }
    return HS_STATUS_OK;
}

static hs_status parse_rules(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    if (!n || n->type != YAML_SEQUENCE_NODE) return fault(x, n, "expected a list of rules");
    c->router.n_rules = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *rn = node(x, *it);
        hs_status st = need_map(x, rn);
        if (st) return st;
        if (c->router.n_rules >= HS_CONFIG_MAX_RULES) return fault(x, rn, "too many rules");
        struct hs_rule_cfg *r = &c->router.rules[c->router.n_rules++];
        memset(r, 0, sizeof *r);
        FOR_PAIRS(x, rn, key, v)
        {
            set_path(x, "router.rules[]", key);
            if (!strcmp(key, "route"))
                st = get_str(x, v, r->route, sizeof r->route);
            else if (!strcmp(key, "tokens_min"))
                st = get_int(x, v, 0, 1 << 20, &r->tokens_min);
            else if (!strcmp(key, "tokens_max"))
                st = get_int(x, v, 0, 1 << 20, &r->tokens_max);
            else if (!strcmp(key, "task"))
                st = get_str(x, v, r->task, sizeof r->task);
            else if (!strcmp(key, "priority")) {
                st = get_str(x, v, r->priority, sizeof r->priority);
                if (!st && r->priority[0] && strcmp(r->priority, "interactive") &&
                    strcmp(r->priority, "batch"))
                    st = fault(x, v, "priority must be interactive or batch");
            } else if (!strcmp(key, "header"))
                st = get_str(x, v, r->header, sizeof r->header);
            else if (!strcmp(key, "value"))
                st = get_str(x, v, r->value, sizeof r->value);
            else
                st = fault(x, v, "unknown key");
            if (st) return st;
        }
        set_path(x, "router.rules[]", "route");
        if (!r->route[0]) return fault(x, rn, "every rule needs a route");
    }
    return HS_STATUS_OK;
}

static hs_status parse_router(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "router", key);
        if (!strcmp(key, "rules"))
            st = parse_rules(x, v, c);
        else if (!strcmp(key, "default_route"))
            st = get_str(x, v, c->router.default_route, sizeof c->router.default_route);
        else if (!strcmp(key, "fallback_engine"))
            st = get_str(x, v, c->router.fallback_engine, sizeof c->router.fallback_engine);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_breaker(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "breaker", key);
        if (!strcmp(key, "window_requests"))
            st = get_int(x, v, 1, HS_BREAKER_MAX_WINDOW, &c->breaker.window_requests);
        else if (!strcmp(key, "min_requests"))
            st = get_int(x, v, 1, HS_BREAKER_MAX_WINDOW, &c->breaker.min_requests);
        else if (!strcmp(key, "error_ratio_max"))
            st = get_double(x, v, 0.001, 1.0, &c->breaker.error_ratio_max);
        else if (!strcmp(key, "latency_max_ms"))
            st = get_int(x, v, 0, 86400000, &c->breaker.latency_max_ms);
        else if (!strcmp(key, "open_ms"))
            st = get_int(x, v, 0, 86400000, &c->breaker.open_ms);
        else if (!strcmp(key, "half_open_probes"))
            st = get_int(x, v, 1, 1 << 20, &c->breaker.half_open_probes);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_retry(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "retry", key);
        if (!strcmp(key, "budget_ratio"))
            st = get_double(x, v, 0, 1, &c->retry.budget_ratio);
        else if (!strcmp(key, "budget_max"))
            st = get_double(x, v, 0, 1e6, &c->retry.budget_max);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_admin(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "admin", key);
        if (!strcmp(key, "enabled")) {
            const char *b = scalar(v);
            if (b && (!strcmp(b, "true") || !strcmp(b, "false")))
                c->admin.enabled = !strcmp(b, "true");
            else
                st = fault(x, v, "expected true or false");
        } else {
            st = fault(x, v, "unknown key");
        }
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_batching(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "batching", key);
        if (!strcmp(key, "batch_window_us"))
            st = get_int(x, v, 0, 60 * 1000 * 1000, &c->batching.batch_window_us);
        else if (!strcmp(key, "batch_max"))
            st = get_int(x, v, 1, 65536, &c->batching.batch_max);
        else if (!strcmp(key, "batch_max_tokens"))
            st = get_int(x, v, 1, 1 << 24, &c->batching.batch_max_tokens);
        else if (!strcmp(key, "buckets"))
            st = get_int_list(x, v, 1, 1 << 16, HS_SCHED_MAX_BUCKETS - 1, c->batching.buckets,
                              &c->batching.n_buckets);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_limits(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "limits", key);
        if (!strcmp(key, "queue_max"))
            st = get_int(x, v, 1, 1 << 24, &c->limits.queue_max);
        else if (!strcmp(key, "timeout_ms"))
            st = get_int(x, v, 1, 86400000, &c->limits.timeout_ms);
        else if (!strcmp(key, "timeout_max_ms"))
            st = get_int(x, v, 1, 86400000, &c->limits.timeout_max_ms);
        else if (!strcmp(key, "body_bytes_max"))
            st = get_i64(x, v, 64, (int64_t)1 << 34, &c->limits.body_bytes_max);
        else if (!strcmp(key, "items_max"))
            st = get_int(x, v, 1, 1 << 20, &c->limits.items_max);
        else if (!strcmp(key, "chars_max"))
            st = get_int(x, v, 1, 1 << 28, &c->limits.chars_max);
        else if (!strcmp(key, "drain_timeout_ms"))
            st = get_int(x, v, 0, 86400000, &c->limits.drain_timeout_ms);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_scheduler(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "scheduler", key);
        if (!strcmp(key, "shed_batch_ratio"))
            st = get_double(x, v, 0.01, 1.0, &c->scheduler.shed_batch_ratio);
        else if (!strcmp(key, "throughput_init_tokens_per_s"))
            st = get_double(x, v, 1e-3, 1e12, &c->scheduler.throughput_init_tokens_per_s);
        else if (!strcmp(key, "throughput_ewma_alpha"))
            st = get_double(x, v, 0.001, 1.0, &c->scheduler.throughput_ewma_alpha);
        else if (!strcmp(key, "retry_after_min_s"))
            st = get_int(x, v, 0, 86400, &c->scheduler.retry_after_min_s);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_cascade(struct ctx *x, yaml_node_t *n, struct hs_config *c)
{
    hs_status st = need_map(x, n);
    if (st) return st;
    FOR_PAIRS(x, n, key, v)
    {
        set_path(x, "cascade", key);
        if (!strcmp(key, "small"))
            st = get_str(x, v, c->cascade.small, sizeof c->cascade.small);
        else if (!strcmp(key, "small_head"))
            st = get_str(x, v, c->cascade.small_head, sizeof c->cascade.small_head);
        else if (!strcmp(key, "big"))
            st = get_str(x, v, c->cascade.big, sizeof c->cascade.big);
        else if (!strcmp(key, "big_head"))
            st = get_str(x, v, c->cascade.big_head, sizeof c->cascade.big_head);
        else if (!strcmp(key, "threshold"))
            st = get_double(x, v, 1e-6, 1.0, &c->cascade.threshold);
        else if (!strcmp(key, "escalation_max_ratio"))
            st = get_double(x, v, 0.0, 1.0, &c->cascade.escalation_max_ratio);
        else
            st = fault(x, v, "unknown key");
        if (st) return st;
    }
    return HS_STATUS_OK;
}

hs_status hs_config_parse(const char *text, size_t len, const char *label, struct hs_config *c,
                          struct hs_error *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return hs_error_set(err, HS_STATUS_NO_MEMORY, "yaml");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        hs_status st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%zu: YAML error: %s", label,
                                    (size_t)parser.problem_mark.line + 1,
                                    parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return st;
    }
    struct ctx x = {.doc = &doc, .label = label, .err = err};
    hs_status st = HS_STATUS_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !(root->type == YAML_SCALAR_NODE && !*scalar(root))) {
        snprintf(x.path, sizeof x.path, "(top level)");
        st = need_map(&x, root);
        if (!st) {
            FOR_PAIRS(&x, root, key, v)
            {
                set_path(&x, "", key);
                if (!strcmp(key, "server"))
                    st = parse_server(&x, v, c);
                else if (!strcmp(key, "engines"))
                    st = parse_engines(&x, v, c);
                else if (!strcmp(key, "models"))
                    st = parse_models(&x, v, c);
                else if (!strcmp(key, "batching"))
                    st = parse_batching(&x, v, c);
                else if (!strcmp(key, "limits"))
                    st = parse_limits(&x, v, c);
                else if (!strcmp(key, "scheduler"))
                    st = parse_scheduler(&x, v, c);
                else if (!strcmp(key, "routes"))
                    st = parse_routes(&x, v, c);
                else if (!strcmp(key, "router"))
                    st = parse_router(&x, v, c);
                else if (!strcmp(key, "breaker"))
                    st = parse_breaker(&x, v, c);
                else if (!strcmp(key, "retry"))
                    st = parse_retry(&x, v, c);
                else if (!strcmp(key, "admin"))
                    st = parse_admin(&x, v, c);
                else if (!strcmp(key, "cascade"))
                    st = parse_cascade(&x, v, c);
                else
                    st = fault(&x, v, "unknown section");
                if (st) break;
            }
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}

int hs_config_lane_dtype(const struct hs_model_cfg *m, const struct hs_engine_cfg *e)
{
    if (m && m->dtype[0]) return hs_compute_dtype_parse(m->dtype);
    if (e->dtype[0]) return hs_compute_dtype_parse(e->dtype);
    const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
    return k ? (int)k->native : -1;
}

hs_status hs_config_validate(const struct hs_config *c, struct hs_error *err)
{
    if (c->n_engines < 1) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: no engines");
    if (c->n_models < 1) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: no models");
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *e = &c->engines[i];
        for (int k = 0; k < i; k++)
            if (!strcmp(e->name, c->engines[k].name))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: engine name '%s' used twice", e->name);
        const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
        if (!k) {
            char known[256] = "";
            size_t used = 0;
            for (int j = 0; j < hs_engine_kind_count() && used < sizeof known; j++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                         hs_engine_kind_at(j)->name);
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: engine '%s': unknown kind '%s' (known: %s)", e->name,
                                e->kind, known);
        }
        int dt = e->dtype[0] ? hs_compute_dtype_parse(e->dtype) : (int)k->native;
        if (dt < 0 || !(k->dtypes & (1u << dt)))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: engine '%s': dtype '%s' is not one a %s engine computes "
                                "in (hetserve devices lists them)",
                                e->name, e->dtype, k->name);
    }
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        int n = m->n_engines ? m->n_engines : 1;
        for (int j = 0; j < n; j++) {
            const char *en = m->n_engines ? m->engines[j] : m->engine;
            if (!hs_config_engine(c, en))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: model '%s' names engine '%s', which is not "
                                    "configured",
                                    m->name[0] ? m->name : m->path, en);
            for (int k = 0; k < j; k++)
                if (!strcmp(m->engines[k], en))
                    return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                        "config: model '%s' names engine '%s' twice",
                                        m->name[0] ? m->name : m->path, en);
        }
        if (m->dtype[0] && hs_compute_dtype_parse(m->dtype) < 0)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: model '%s': dtype '%s' (f32, f16, bf16 or int8)",
                                m->name[0] ? m->name : m->path, m->dtype);
        for (int j = 0; j < n; j++) {
            const struct hs_engine_cfg *e =
                hs_config_engine(c, m->n_engines ? m->engines[j] : m->engine);
            const struct hs_engine_kind *k = hs_engine_kind_find(e->kind);
            int dt = hs_config_lane_dtype(m, e);
            if (k && dt >= 0 && !(k->dtypes & (1u << dt)))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: model '%s' on engine '%s': a %s engine does not "
                                    "compute in %s",
                                    m->name[0] ? m->name : m->path, e->name, k->name,
                                    hs_compute_dtype_name((enum hs_dtype)dt));
        }
    }
    for (int i = 1; i < c->batching.n_buckets; i++)
        if (c->batching.buckets[i] <= c->batching.buckets[i - 1])
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: batching.buckets must be ascending");
    if (c->limits.timeout_ms > c->limits.timeout_max_ms)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: limits.timeout_ms exceeds limits.timeout_max_ms");
    /* Routes: names unique, references resolvable. Which model a route's name means is
     * checked when the server knows the models' names. */
    for (int i = 0; i < c->n_routes; i++) {
        const struct hs_route_cfg *r = &c->routes[i];
        for (int k = 0; k < i; k++)
            if (!strcmp(r->name, c->routes[k].name))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: route name '%s' used twice", r->name);
        if (!strcmp(r->name, "fallback"))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: 'fallback' is reserved for the fallback route");
        for (int k = 0; k < r->n_engines; k++)
            if (!hs_config_engine(c, r->engines[k]))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: route '%s' names engine '%s', which is not "
                                    "configured",
                                    r->name, r->engines[k]);
        const char *refs[] = {r->split_route, r->shadow_route, r->failover_route, r->small, r->big};
        for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
            if (refs[k][0] && hs_config_route(c, refs[k]) < 0)
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "config: route '%s' refers to route '%s', which is not "
                                    "configured",
                                    r->name, refs[k]);
    }
    for (int i = 0; i < c->router.n_rules; i++)
        if (hs_config_route(c, c->router.rules[i].route) < 0)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: router.rules[%d] names route '%s', which is not "
                                "configured",
                                i, c->router.rules[i].route);
    if (c->router.default_route[0] && hs_config_route(c, c->router.default_route) < 0)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: router.default_route '%s' is not configured",
                            c->router.default_route);
    if (c->router.fallback_engine[0] && !hs_config_engine(c, c->router.fallback_engine))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: router.fallback_engine '%s' is not configured",
                            c->router.fallback_engine);
    if (c->breaker.min_requests > c->breaker.window_requests)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: breaker.min_requests exceeds breaker.window_requests");
    if (c->cascade.small[0] && !c->cascade.small_head[0])
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: cascade.small needs cascade.small_head");
    if (c->cascade.big[0] && (!c->cascade.big_head[0] || !c->cascade.small[0]))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "config: cascade.big needs cascade.big_head and cascade.small");
    /* One cascade: a route of kind cascade places the stages of the cascade section's. */
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].kind, "cascade") && !c->cascade.big[0])
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: route '%s' is a cascade, but the cascade section names "
                                "no big model (cascade.small, cascade.big and their heads "
                                "configure it)",
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

hs_status hs_config_load(const char *path, struct hs_config *c, struct hs_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "cannot open config file %s", path);
    size_t cap = 4096, len = 0;
    char *buf = hs_malloc(cap);
    hs_status st = HS_STATUS_OK;
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap) break;
        char *nb = hs_realloc(buf, cap * 2);
        if (!nb) {
            hs_free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (!buf) return hs_error_set(err, HS_STATUS_NO_MEMORY, "reading %s", path);
    st = hs_config_parse(buf, len, path, c, err);
    hs_free(buf);
    if (st == HS_STATUS_OK) st = hs_config_validate(c, err);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * printing
 */

static void print_int_list(FILE *f, const int *v, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", v[i]);
    fputc(']', f);
}

void hs_config_print(const struct hs_config *c, FILE *f)
{
    fprintf(f, "# hetserve configuration. Every key is optional: what a file leaves out keeps the\n"
               "# default shown here; a list given (engines, models, buckets) replaces the "
               "default list.\n\n");
    fprintf(f, "server:\n");
    fprintf(f, "  host: \"%s\"              # address to bind (--host)\n", c->server.host);
    fprintf(f, "  port: %d                   # TCP port; 0 = any free port (--port)\n",
            c->server.port);
    fprintf(f,
            "  threads: %d                   # HTTP worker threads (connections wait for "
            "batches suspended, not on a thread)\n",
            c->server.threads);
    fprintf(f,
            "  connection_timeout_s: %d     # idle keep-alive connections are closed after "
            "this\n",
            c->server.connection_timeout_s);
    fprintf(f,
            "  trace_file: \"%s\"               # Chrome/Perfetto trace-event JSON of every "
            "batch and request stage; \"\" = off (--trace-file)\n\n",
            c->server.trace_file);

    fprintf(f, "engines:                       # compute devices; each gets its own queue and "
               "batcher\n");
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *e = &c->engines[i];
        fprintf(f,
                "  - name: %s                 # instance name, used by models[].engine and "
                "in metrics\n",
                e->name);
        fprintf(f,
                "    kind: %s                  # a registered engine kind: cpu | cuda (what "
                "this build has: hetserve devices)\n",
                e->kind);
        fprintf(f, "    device: %d                   # device ordinal of the kind (GPU number)\n",
                e->device);
        fprintf(f,
                "    dtype: \"%s\"                 # compute dtype of its lanes: \"\" = the kind's "
                "native (cpu f32, cuda f16) | f32 | f16 | bf16 | int8\n",
                e->dtype);
        fprintf(f,
                "    threads: %d                  # compute threads; 0 = every core of the "
                "core set (or of the machine)\n",
                e->threads);
        fprintf(f, "    cores: ");
        print_int_list(f, e->cores, e->n_cores);
        fprintf(f, "                  # cores to pin to, e.g. [0, 1] or \"0-3\"; [] = no "
                   "pinning\n");
        fprintf(f, "    whitelist: [");
        for (int k = 0; k < e->n_shapes; k++)
            fprintf(f, "%s[%d, %d]", k ? ", " : "", e->shapes[k].batch, e->shapes[k].seq);
        fprintf(f, "]              # allowed [batch, seq] shapes, e.g. [[1, 16], [8, 64]]; [] = "
                   "any. With a whitelist its seq lengths are the buckets\n");
        fprintf(f,
                "    slots: %d                    # quota: batches in flight at once on this "
                "engine (executor slots)\n",
                e->slots);
        fprintf(f,
                "    batch_window_us: %d          # this engine's batching.batch_window_us; -1 = "
                "the batching section's\n",
                e->batch_window_us);
        fprintf(f,
                "    batch_max: %d                # this engine's batching.batch_max; 0 = the "
                "batching section's\n",
                e->batch_max);
        fprintf(f,
                "    batch_max_tokens: %d         # this engine's batching.batch_max_tokens; 0 = "
                "the batching section's\n",
                e->batch_max_tokens);
        fprintf(f,
                "    queue_max: %d                # this engine's queue size; 0 = "
                "limits.queue_max\n",
                e->queue_max);
    }
    fprintf(f, "\nmodels:                        # model instances; weights stay resident on "
               "their engine\n");
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        fprintf(f,
                "  - path: \"%s\"   # model folder (config.json, vocab.txt, "
                "model.safetensors)\n",
                m->path);
        if (m->name[0])
            fprintf(f, "    name: \"%s\"\n", m->name);
        else
            fprintf(f, "    # name: the folder's base name unless given; clients send it as "
                       "\"model\"\n");
        if (m->n_engines > 1) {
            fprintf(f, "    engines: [");
            for (int k = 0; k < m->n_engines; k++) fprintf(f, "%s%s", k ? ", " : "", m->engines[k]);
            fprintf(f, "]      # engines[].name it is resident on (one queue each)\n");
        } else {
            fprintf(f,
                    "    engine: %s                # engines[].name that runs it (or engines: "
                    "[a, b] to be resident on several)\n",
                    m->engine);
        }
        fprintf(
            f,
            "    dtype: \"%s\"                 # \"\" = each engine's dtype; f32 | f16 | bf16 | "
            "int8 forces one on every engine it is on\n",
            m->dtype);
    }
    fprintf(f, "\nbatching:\n");
    fprintf(f,
            "  batch_window_us: %d          # a batch forms when its bucket's oldest request "
            "has waited this long ...\n",
            c->batching.batch_window_us);
    fprintf(f, "  batch_max: %d                  # ... or holds this many sequences ...\n",
            c->batching.batch_max);
    fprintf(f,
            "  batch_max_tokens: %d         # ... or this many padded tokens (batch x "
            "bucket length)\n",
            c->batching.batch_max_tokens);
    fprintf(f, "  buckets: ");
    print_int_list(f, c->batching.buckets, c->batching.n_buckets);
    fprintf(f, "  # length buckets (tokens); sequences pad to their bucket only; the model's "
               "max length is always the last\n\n");
    fprintf(f, "limits:\n");
    fprintf(f,
            "  queue_max: %d                # sequences queued per engine; beyond: 429 with "
            "Retry-After\n",
            c->limits.queue_max);
    fprintf(f,
            "  timeout_ms: %d               # default deadline per request (field "
            "timeout_ms or header X-Timeout-Ms)\n",
            c->limits.timeout_ms);
    fprintf(f, "  timeout_max_ms: %d          # largest deadline a client may ask for\n",
            c->limits.timeout_max_ms);
    fprintf(f, "  body_bytes_max: %lld          # request body limit; beyond: 413\n",
            (long long)c->limits.body_bytes_max);
    fprintf(f, "  items_max: %d                  # inputs per request; beyond: 413\n",
            c->limits.items_max);
    fprintf(f, "  chars_max: %d                # characters per input; beyond: 413\n",
            c->limits.chars_max);
    fprintf(f,
            "  drain_timeout_ms: %d         # on SIGTERM/SIGINT: longest wait for queued "
            "requests before exit\n\n",
            c->limits.drain_timeout_ms);
    fprintf(f, "scheduler:\n");
    fprintf(f,
            "  shed_batch_ratio: %g            # share of queue_max that priority \"batch\" "
            "may fill; interactive requests evict batch ones when full\n",
            c->scheduler.shed_batch_ratio);
    fprintf(f,
            "  throughput_init_tokens_per_s: %g # engine speed assumed until the first batch "
            "is measured (predicts waits for 429)\n",
            c->scheduler.throughput_init_tokens_per_s);
    fprintf(f,
            "  throughput_ewma_alpha: %g       # weight of the newest batch in the measured "
            "throughput\n",
            c->scheduler.throughput_ewma_alpha);
    fprintf(f, "  retry_after_min_s: %d           # smallest Retry-After sent with 429\n",
            c->scheduler.retry_after_min_s);

    fprintf(f, "\n# A route: a model on a set of engines; a request on it goes to the engine with "
               "the earliest\n# predicted completion (queued work + its own, from service times "
               "learned per bucket), or is\n# refused with 429 when none can finish before its "
               "deadline.\n# A route of kind cascade, {name, kind: cascade, small: <route>, "
               "big: <route>}, places the two stages of the cascade section's cascade (below).\n");
    if (!c->n_routes)
        fprintf(f, "routes: []                     # [] = one route per model over every engine "
                   "it is on, named after the model\n");
    else
        fprintf(f, "routes:\n");
    for (int i = 0; i < c->n_routes; i++) {
        const struct hs_route_cfg *r = &c->routes[i];
        fprintf(f,
                "  - name: %s                   # used by rules, split, shadow, failover; "
                "X-Route and metrics\n",
                r->name);
        fprintf(f,
                "    kind: %s                 # engines | cascade (small route, then big "
                "for the inputs /predict escalates; see cascade below)\n",
                r->kind);
        if (!strcmp(r->kind, "cascade")) {
            fprintf(f,
                    "    small: %s                  # route of the small model (cascade.small)"
                    "\n",
                    r->small);
            fprintf(f,
                    "    big: %s                    # route of an escalation (cascade.big); "
                    "threshold and cap: the cascade section\n",
                    r->big);
            continue;
        }
        fprintf(f, "    model: \"%s\"                 # model name; \"\" = the first model\n",
                r->model);
        fprintf(f, "    engines: [");
        for (int k = 0; k < r->n_engines; k++) fprintf(f, "%s%s", k ? ", " : "", r->engines[k]);
        fprintf(f, "]            # engines of the route; [] = every engine the model is on\n");
        if (r->split_route[0])
            fprintf(f,
                    "    split: {route: %s, ratio: %g}   # A/B: this share goes to that "
                    "route, sticky by X-Request-Id\n",
                    r->split_route, r->split_ratio);
        if (r->shadow_route[0])
            fprintf(f,
                    "    shadow: {route: %s, ratio: %g}  # copy this share there, discard the "
                    "result, record the cosine\n",
                    r->shadow_route, r->shadow_ratio);
        if (r->failover_route[0])
            fprintf(f,
                    "    failover: {route: %s, ratio_max: %g}  # when every engine's breaker "
                    "is open: at most this share goes there, the rest gets 429\n",
                    r->failover_route, r->failover_ratio_max);
    }
    fprintf(f, "\nrouter:\n");
    if (!c->router.n_rules)
        fprintf(f, "  rules: []                    # first match wins, e.g. {tokens_max: 32, "
                   "route: short}; keys: route, tokens_min, tokens_max (longest sequence), task "
                   "(embeddings | embed | predict), priority, header + value\n");
    else
        fprintf(f, "  rules:                       # first match wins\n");
    for (int i = 0; i < c->router.n_rules; i++) {
        const struct hs_rule_cfg *r = &c->router.rules[i];
        fprintf(f, "    - {route: %s", r->route);
        if (r->tokens_min) fprintf(f, ", tokens_min: %d", r->tokens_min);
        if (r->tokens_max) fprintf(f, ", tokens_max: %d", r->tokens_max);
        if (r->task[0]) fprintf(f, ", task: %s", r->task);
        if (r->priority[0]) fprintf(f, ", priority: %s", r->priority);
        if (r->header[0]) fprintf(f, ", header: \"%s\"", r->header);
        if (r->value[0]) fprintf(f, ", value: \"%s\"", r->value);
        fprintf(f, "}   # rule %d\n", i);
    }
    fprintf(f,
            "  default_route: \"%s\"          # route when no rule matches; \"\" = the first "
            "route\n",
            c->router.default_route);
    fprintf(f,
            "  fallback_engine: \"%s\"        # single-engine fallback when routing fails "
            "(no route, nothing fits); \"\" = the model's first engine\n",
            c->router.fallback_engine);
    fprintf(f, "\nbreaker:                       # one circuit breaker per engine\n");
    fprintf(f, "  window_requests: %d           # outcomes remembered while closed\n",
            c->breaker.window_requests);
    fprintf(f, "  min_requests: %d               # outcomes needed before it may open\n",
            c->breaker.min_requests);
    fprintf(f,
            "  error_ratio_max: %g           # failure share of the window that opens it "
            "(engine errors, timeouts in a batch, slow batches)\n",
            c->breaker.error_ratio_max);
    fprintf(f,
            "  latency_max_ms: %d             # a batch slower than this is a failure; 0 = "
            "off\n",
            c->breaker.latency_max_ms);
    fprintf(f, "  open_ms: %d                 # open -> half-open after this\n",
            c->breaker.open_ms);
    fprintf(f,
            "  half_open_probes: %d           # probe requests let through half-open; all "
            "succeed -> closed, one fails -> open\n",
            c->breaker.half_open_probes);
    fprintf(f, "\nretry:                         # one more try elsewhere after an engine "
               "failure, from a budget\n");
    fprintf(f,
            "  budget_ratio: %g              # tokens each routed request adds; a retry "
            "takes one\n",
            c->retry.budget_ratio);
    fprintf(f, "  budget_max: %g                  # most tokens saved (and the initial fill)\n",
            c->retry.budget_max);
    fprintf(f, "\nadmin:\n");
    fprintf(f,
            "  enabled: %s                # POST /admin/fault {\"engine\", \"fail_next\", "
            "\"slow_factor\", \"hang_ms\"} from loopback clients only\n",
            c->admin.enabled ? "true" : "false");
    fprintf(f,
            "\n# The cascade of POST /predict, and the only cascade configuration: every input is "
            "classified by\n# the small model's head; one whose top probability is below "
            "threshold goes on to the big model,\n# unless escalating would lift the escalated "
            "share above escalation_max_ratio (sched/cascade.h).\n# Both stages are routed "
            "like any request (task \"predict\": rules, routes, breakers); a route of kind\n"
            "# cascade (routes above) sends the small stage to its small route and the "
            "escalations to its big\n# route, and reports them in X-Route and "
            "hetserve_route_escalations_total. X-Cascade names who\n# answered each input "
            "(small | big | capped).\n");
    fprintf(f, "cascade:                          # POST /predict (off while small is empty)\n");
    fprintf(f, "  small: \"%s\"                       # served model that classifies first\n",
            c->cascade.small);
    fprintf(f,
            "  small_head: \"%s\"                  # its head file, e.g. "
            "heads/all-MiniLM-L6-v2-sentiment.json\n",
            c->cascade.small_head);
    fprintf(f,
            "  big: \"%s\"                         # model for low-confidence inputs (empty: "
            "no cascade)\n",
            c->cascade.big);
    fprintf(f, "  big_head: \"%s\"                    # its head file\n", c->cascade.big_head);
    fprintf(f,
            "  threshold: %g                    # escalate when the small head's top "
            "probability is below this\n",
            c->cascade.threshold);
    fprintf(f,
            "  escalation_max_ratio: %g           # most inputs that may escalate, as a share "
            "of all decided so far (1: no cap)\n",
            c->cascade.escalation_max_ratio);
}
