/* A capture file read back as the traffic of a plan (capture.h, hs_capture_traffic_parse). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/plan.h"
#include "server/capture.h"

static int by_arrival(const void *a, const void *b)
{
    const struct hs_sim_arrival *x = a, *y = b;
    return x->at_s < y->at_s ? -1 : x->at_s > y->at_s;
}

/* Counts one request of endpoint ep in sum (the last row takes the endpoints past the table). */
static void count_endpoint(struct hs_capture_traffic_summary *sum, const char *ep)
{
    int i = 0;
    while (i < sum->n_endpoints && strcmp(sum->endpoint[i], ep)) i++;
    if (i == sum->n_endpoints) {
        if (i == HS_CAPTURE_TRAFFIC_ENDPOINTS) {
            i--;
            snprintf(sum->endpoint[i], sizeof sum->endpoint[i], "%s", "others");
        } else {
            snprintf(sum->endpoint[i], sizeof sum->endpoint[i], "%s", ep);
            sum->n_endpoints++;
        }
    }
    sum->endpoint_requests[i]++;
}

/* Appends e's sequences to t->captured (growing its arrays; tokens are copied). */
static hs_status add_arrival(struct hs_sim_traffic *c, size_t *cap_a, size_t *n_tok, size_t *cap_t,
                             const struct hs_capture_entry *e)
{
    if (c->n == *cap_a) {
        size_t nc = *cap_a ? *cap_a * 2 : 256;
        struct hs_sim_arrival *na = hs_realloc(c->a, nc * sizeof *na);
        if (!na) return HS_STATUS_NO_MEMORY;
        c->a = na;
        *cap_a = nc;
    }
    if (*n_tok + (size_t)e->n_inputs > *cap_t) {
        size_t nc = *cap_t ? *cap_t * 2 : 1024;
        while (nc < *n_tok + (size_t)e->n_inputs) nc *= 2;
        int32_t *nt = hs_realloc(c->token_store, nc * sizeof *nt);
        if (!nt) return HS_STATUS_NO_MEMORY;
        c->token_store = nt;
        *cap_t = nc;
    }
    for (int i = 0; i < e->n_inputs; i++) c->token_store[*n_tok + (size_t)i] = e->tokens[i];
    int prio = e->priority[0] ? hs_priority_parse(e->priority) : HS_PRIORITY_INTERACTIVE;
    /* tokens holds the offset into token_store until the store stops moving */
    c->a[c->n++] = (struct hs_sim_arrival){.at_s = e->offset_ms / 1e3,
                                           .n_inputs = e->n_inputs,
                                           .tokens = (int32_t *)(uintptr_t)*n_tok,
                                           .priority = prio < 0 ? HS_PRIORITY_INTERACTIVE : prio,
                                           .timeout_ms = (double)e->timeout_ms};
    *n_tok += (size_t)e->n_inputs;
    return HS_STATUS_OK;
}

hs_status hs_capture_traffic_parse(const char *name, const char *data, size_t len,
                                   const int *buckets, int n_buckets, const char *model,
                                   struct hs_traffic *t, struct hs_capture_traffic_summary *sum,
                                   struct hs_error *err)
{
    memset(t, 0, sizeof *t);
    struct hs_capture_traffic_summary local;
    if (!sum) sum = &local;
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < n_buckets && i < HS_TRAFFIC_MAX_LENGTHS; i++)
        t->tokens[t->n++] = buckets[i];
    if (t->n == 0) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: no buckets", name);
    struct hs_sim_traffic *c = &t->captured;
    c->n_classes = 1;
    snprintf(c->class_name[0], sizeof c->class_name[0], "all");
    size_t cap_a = 0, n_tok = 0, cap_t = 0;
    double counts[HS_TRAFFIC_MAX_LENGTHS] = {0};
    long lineno = 0;
    hs_status st = HS_STATUS_OK;
    for (size_t at = 0; at < len && !st;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (data + at)) : len - at;
        const char *line = data + at;
        at += ll + 1;
        lineno++;
        while (ll > 0 && line[ll - 1] == '\r') ll--;
        size_t k = 0;
        while (k < ll && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == ll) continue;
        struct hs_capture_entry e;
        struct hs_error le = {0};
        st = hs_capture_parse_line(line, ll, &e, &le);
        if (st) {
            st = hs_error_set(err, st, "%s:%ld: %s", name, lineno, le.msg);
        } else if (e.n_inputs == 0 || (model && model[0] && e.model[0] && strcmp(e.model, model))) {
            sum->skipped++;
        } else if (!(st = add_arrival(c, &cap_a, &n_tok, &cap_t, &e))) {
            sum->requests++;
            sum->sequences += e.n_inputs;
            sum->batch += c->a[c->n - 1].priority == HS_PRIORITY_BATCH;
            count_endpoint(sum, e.endpoint);
            for (int i = 0; i < e.n_inputs; i++) {
                int b = 0;
                while (b + 1 < t->n && t->tokens[b] < e.tokens[i]) b++;
                counts[b] += 1;
            }
        } else {
            st = hs_error_set(err, st, "%s: out of memory", name);
        }
        hs_capture_entry_free(&e);
    }
    if (st) return st;
    for (size_t i = 0; i < c->n; i++)
        c->a[i].tokens = c->token_store + (size_t)(uintptr_t)c->a[i].tokens;
    if (c->n) qsort(c->a, c->n, sizeof *c->a, by_arrival);
    const double span = c->n ? c->a[c->n - 1].at_s - c->a[0].at_s : 0;
    if (c->n < 2 || !(span > 0))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "%s: a capture needs at least two requests with token lengths at "
                            "different times (%ld taken, %ld skipped)",
                            name, sum->requests, sum->skipped);
    const double first = c->a[0].at_s;
    for (size_t i = 0; i < c->n; i++) c->a[i].at_s -= first;
    sum->span_s = span;
    /* sequences per second: the next copy of the capture starts one mean gap after the last */
    t->rate_per_s = (double)sum->sequences * (double)(c->n - 1) / (double)c->n / span;
    for (int i = 0; i < t->n; i++) t->share[i] = counts[i] / (double)sum->sequences;
    return HS_STATUS_OK;
}
