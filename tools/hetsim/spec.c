/* hetsim — command-line specs and the price table (spec.h). */
#include "hetsim/spec.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Index of the name of length len in names, -1 when none. */
static int name_index(const char *const *names, int n, const char *p, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && !strncmp(names[i], p, len)) return i;
    return -1;
}

hs_status hs_sim_classes_parse(const char *spec, struct hs_sim_classes *c, struct hs_error *err)
{
    memset(c, 0, sizeof *c);
    const char *p = spec;
    while (*p) {
        if (c->n == HS_SPEC_MAX_ITEMS)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--classes: more than %d",
                                HS_SPEC_MAX_ITEMS);
        const char *colon = strchr(p, ':');
        const char *comma = strchr(p, ',');
        if (!colon || colon == p || colon - p >= 32 || (comma && comma < colon))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--classes: expected NAME:MAX_TOKENS at '%.40s'", p);
        memcpy(c->name[c->n], p, (size_t)(colon - p));
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || v < 1 || v > 1 << 20 || (*end && *end != ',') ||
            (c->n && v <= c->max_tokens[c->n - 1]))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--classes: bad or non-ascending bound at '%.40s'", colon + 1);
        c->max_tokens[c->n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return c->n ? HS_STATUS_OK : hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--classes: empty");
}

/* A positive finite number at p ending at one of stops (or the end): its end, NULL when none. */
static const char *positive(const char *p, const char *stops, double *v)
{
    char *end;
    *v = strtod(p, &end);
    if (end == p || !(*v > 0) || !isfinite(*v) || (*end && !strchr(stops, *end))) return NULL;
    return end;
}

hs_status hs_sim_tenants_parse(const char *spec, struct hs_sim_tenants *t, struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    const char *p = spec;
    while (*p) {
        if (t->n == HS_SPEC_MAX_ITEMS)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--tenants: more than %d",
                                HS_SPEC_MAX_ITEMS);
        size_t len = strcspn(p, ":,");
        bool dup = false;
        for (int i = 0; i < t->n; i++)
            dup |= strlen(t->name[i]) == len && !strncmp(t->name[i], p, len);
        if (!len || len >= 32 || dup)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--tenants: expected a new NAME[:SHARE[:WEIGHT]] at '%.40s'", p);
        memcpy(t->name[t->n], p, len);
        t->share[t->n] = t->weight[t->n] = 1;
        const char *q = p + len;
        if (*q == ':' && !(q = positive(q + 1, ":,", &t->share[t->n])))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--tenants: SHARE must be a number > 0 at '%.40s'", p);
        if (*q == ':' && !(q = positive(q + 1, ",", &t->weight[t->n])))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--tenants: WEIGHT must be a number > 0 at '%.40s'", p);
        t->n++;
        p = *q ? q + 1 : q;
    }
    return t->n ? HS_STATUS_OK : hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--tenants: empty");
}

hs_status hs_sim_slo_parse(const char *spec, const char *const *names, int n_names,
                           struct hs_sim_slo *s, struct hs_error *err)
{
    memset(s, 0, sizeof *s);
    const char *p = spec;
    while (*p) {
        const char *eq = strchr(p, '=');
        int k = eq ? name_index(names, n_names, p, (size_t)(eq - p)) : -1;
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        if (k < 0 || !eq || end == eq + 1 || !(v > 0) || !isfinite(v) || (*end && *end != ',') ||
            s->n == HS_SPEC_MAX_ITEMS)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--slo: expected CLASS=P99_MS with a class of the traffic at "
                                "'%.40s'",
                                p);
        s->cls[s->n] = k;
        s->p99_ms[s->n++] = v;
        p = *end ? end + 1 : end;
    }
    return HS_STATUS_OK;
}

hs_status hs_sim_search_parse(const char *spec, const char *const *names, int n_names, int max,
                              struct hs_sim_search *s, struct hs_error *err)
{
    memset(s, 0, sizeof *s);
    const char *p = spec;
    while (*p) {
        const char *eq = strchr(p, '=');
        int e = eq ? name_index(names, n_names, p, (size_t)(eq - p)) : -1;
        int a = 0, b = 0, used = 0;
        if (e < 0 || s->n == HS_SPEC_MAX_ITEMS ||
            sscanf(eq + 1, "%9d..%9d%n", &a, &b, &used) != 2 || a < 0 || b < a || b > max ||
            (eq[1 + used] && eq[1 + used] != ','))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--search: expected ENGINE=MIN..MAX (0 <= MIN <= MAX <= %d) at "
                                "'%.40s'",
                                max, p);
        for (int i = 0; i < s->n; i++)
            if (s->engine[i] == e)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "--search: engine %s given twice", names[e]);
        s->engine[s->n] = e, s->lo[s->n] = a, s->hi[s->n] = b, s->n++;
        p = eq + 1 + used;
        if (*p == ',') p++;
    }
    return s->n ? HS_STATUS_OK
                : hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--search: no engine");
}

hs_status hs_sim_prices_parse(const char *text, size_t len, const char *label,
                              const char *const *names, int n_names, double *usd,
                              char (*source)[256], struct hs_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%d: %s", label, je.line,
                            root ? "not a JSON object" : je.text);
    }
    hs_status st = HS_STATUS_OK;
    for (int e = 0; e < n_names && !st; e++) {
        json_t *p = json_object_get(root, names[e]);
        json_t *u = json_is_object(p) ? json_object_get(p, "usd_per_hour") : NULL;
        json_t *src = json_is_object(p) ? json_object_get(p, "source") : NULL;
        double v = u && json_is_number(u) ? json_number_value(u) : -1;
        if (!(v >= 0) || !isfinite(v) || !json_is_string(src))
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "%s: engine %s needs {\"usd_per_hour\": >= 0, \"source\": \"where "
                              "the price comes from\"}",
                              label, names[e]);
        else {
            usd[e] = v;
            snprintf(source[e], 256, "%s", json_string_value(src));
        }
    }
    json_decref(root);
    return st;
}
