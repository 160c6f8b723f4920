#include "stats.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hs_bench_record_init(struct hs_bench_record *rec)
{
    memset(rec, 0, sizeof *rec);
    rec->tokens = -1;
    for (int k = 0; k < HS_BENCH_ST_MAX; k++) rec->st_ms[k] = NAN;
}

static int st_name_index(struct hs_bench_st_names *names, const char *s, size_t n)
{
    if (n == 0 || n >= sizeof names->name[0]) return -1;
    for (int i = 0; i < names->n; i++)
        if (strlen(names->name[i]) == n && !memcmp(names->name[i], s, n)) return i;
    if (names->n == HS_BENCH_ST_MAX) return -1;
    memcpy(names->name[names->n], s, n);
    names->name[names->n][n] = 0;
    return names->n++;
}

void hs_bench_server_timing_parse(const char *value, struct hs_bench_st_names *names,
                                  struct hs_bench_record *rec)
{
    const char *p = value;
    while (*p) {
        /* One metric: name *( ";" param ), up to the next top-level comma. Quoted desc values
         * may hold commas and semicolons, so scan with quote awareness. */
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *name = p;
        while (*p && *p != ';' && *p != ',' && *p != ' ' && *p != '\t') p++;
        size_t name_n = (size_t)(p - name);
        double dur = NAN;
        while (*p && *p != ',') {
            if (*p == ';') {
                p++;
                while (*p == ' ') p++;
                if (!strncasecmp(p, "dur=", 4)) {
                    char *end;
                    double v = strtod(p + 4, &end);
                    if (end != p + 4) dur = v;
                    p = end;
                    continue;
                }
            } else if (*p == '"') {
                for (p++; *p && *p != '"'; p++)
                    if (*p == '\\' && p[1]) p++;
                if (*p) p++;
                continue;
            }
            if (*p && *p != ',' && *p != ';') p++;
        }
        if (name_n && !isnan(dur)) {
            int k = st_name_index(names, name, name_n);
            if (k >= 0) rec->st_ms[k] = (float)dur;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void hs_bench_sort(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
}

double hs_bench_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0) return 0;
    if (p <= 0) return sorted[0];
    if (p >= 100) return sorted[n - 1];
    /* Nearest rank: the smallest value with at least p % of the values at or below it. */
    double rank = ceil(p / 100.0 * (double)n - 1e-9);
    size_t i = rank < 1 ? 0 : (size_t)rank - 1;
    return sorted[i < n ? i : n - 1];
}

void hs_bench_summarize(const struct hs_bench_record *rec, size_t n, unsigned cls, unsigned prio,
                        double *scratch, struct hs_bench_summary *out)
{
    hs_bench_summarize_tenant(rec, n, cls, prio, HS_BENCH_ANY, scratch, out);
}

void hs_bench_summarize_tenant(const struct hs_bench_record *rec, size_t n, unsigned cls,
                               unsigned prio, unsigned tenant, double *scratch,
                               struct hs_bench_summary *out)
{
    memset(out, 0, sizeof *out);
    size_t m = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        const struct hs_bench_record *r = &rec[i];
        if (r->warmup) continue;
        if (cls != HS_BENCH_ANY && r->cls != cls) continue;
        if (prio != HS_BENCH_ANY && r->prio != prio) continue;
        if (tenant != HS_BENCH_ANY && r->tenant != tenant) continue;
        out->n++;
        if (r->status >= 200 && r->status < 300) {
            out->n_2xx++;
            out->items_2xx += r->items;
            if (r->tokens >= 0) {
                out->tokens_2xx += (uint64_t)r->tokens;
                out->n_tokens_known++;
            }
            double ms = (double)r->latency_ns / 1e6;
            scratch[m++] = ms;
            sum += ms;
        } else if (r->status == 429) {
            out->n_429++;
        } else if (r->status == 504) {
            out->n_504++;
        } else if (r->status > 0) {
            out->n_other_http++;
        } else if (r->status == HS_BENCH_OUTCOME_TIMEOUT) {
            out->n_timeout++;
        } else if (r->status == HS_BENCH_OUTCOME_DROPPED) {
            out->n_dropped++;
        } else {
            out->n_conn++;
        }
    }
    if (m == 0) return;
    hs_bench_sort(scratch, m);
    out->p50_ms = hs_bench_percentile(scratch, m, 50);
    out->p95_ms = hs_bench_percentile(scratch, m, 95);
    out->p99_ms = hs_bench_percentile(scratch, m, 99);
    out->max_ms = scratch[m - 1];
    out->mean_ms = sum / (double)m;
}

size_t hs_bench_st_percentiles(const struct hs_bench_record *rec, size_t n, int k, double *scratch,
                               double *p50_ms, double *p95_ms)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const struct hs_bench_record *r = &rec[i];
        if (r->warmup || r->status < 200 || r->status >= 300 || isnan(r->st_ms[k])) continue;
        scratch[m++] = r->st_ms[k];
    }
    hs_bench_sort(scratch, m);
    *p50_ms = hs_bench_percentile(scratch, m, 50);
    *p95_ms = hs_bench_percentile(scratch, m, 95);
    return m;
}
