#include "hetbench/ab.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "hetbench/stats.h"
#include "hetbench/workload.h"

void hs_bench_ab_rows_free(struct hs_bench_ab_rows *r)
{
    if (r->label)
        for (int i = 0; i < r->n; i++) hs_free(r->label[i]);
    hs_free(r->label);
    hs_free(r->vec);
    memset(r, 0, sizeof *r);
}

static int is_numbers(const json_t *a)
{
    if (!json_is_array(a) || json_array_size(a) == 0) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_number(json_array_get(a, i))) return 0;
    return 1;
}

/* The top label of a list of {"label", "score"} (sorted by score: the first); NULL otherwise. */
static const char *top_label(const json_t *a)
{
    if (!json_is_array(a) || json_array_size(a) == 0) return NULL;
    json_t *l = json_object_get(json_array_get(a, 0), "label");
    return json_is_string(l) ? json_string_value(l) : NULL;
}

static hs_status add_vec(struct hs_bench_ab_rows *r, const json_t *a)
{
    int dim = (int)json_array_size(a);
    if (r->n && dim != r->dim) return HS_STATUS_INVALID_INPUT;
    float *v = hs_realloc(r->vec, (size_t)(r->n + 1) * (size_t)dim * sizeof *v);
    if (!v) return HS_STATUS_NO_MEMORY;
    r->vec = v;
    r->dim = dim;
    for (int i = 0; i < dim; i++)
        v[(size_t)r->n * (size_t)dim + (size_t)i] = (float)json_number_value(json_array_get(a, i));
    r->n++;
    return HS_STATUS_OK;
}

static hs_status add_label(struct hs_bench_ab_rows *r, const char *s, size_t cap)
{
    if (r->dim) return HS_STATUS_INVALID_INPUT;
    if (!r->label) {
        r->label = hs_calloc(cap ? cap : 1, sizeof *r->label);
        if (!r->label) return HS_STATUS_NO_MEMORY;
    }
    size_t n = strlen(s) + 1;
    r->label[r->n] = hs_malloc(n);
    if (!r->label[r->n]) return HS_STATUS_NO_MEMORY;
    memcpy(r->label[r->n++], s, n);
    return HS_STATUS_OK;
}

hs_status hs_bench_ab_rows_parse(const char *json, size_t len, struct hs_bench_ab_rows *out)
{
    memset(out, 0, sizeof *out);
    json_t *root = json_loadb(json, len, 0, NULL);
    if (!root) return HS_STATUS_INVALID_INPUT;
    hs_status st = HS_STATUS_OK;
    json_t *data = json_object_get(root, "data");
    if (json_is_array(
            data)) { /* OpenAI: rows in "data" by "index" (the server writes them in order) */
        for (size_t i = 0; i < json_array_size(data) && !st; i++) {
            json_t *e = json_object_get(json_array_get(data, i), "embedding");
            st = is_numbers(e) ? add_vec(out, e) : HS_STATUS_INVALID_INPUT;
        }
    } else if (json_is_array(root) && top_label(root)) { /* /predict, one input */
        st = add_label(out, top_label(root), 1);
    } else if (json_is_array(root)) { /* TEI /embed rows, or /predict with a list of inputs */
        size_t n = json_array_size(root);
        for (size_t i = 0; i < n && !st; i++) {
            json_t *e = json_array_get(root, i);
            if (is_numbers(e))
                st = add_vec(out, e);
            else if (top_label(e))
                st = add_label(out, top_label(e), n);
            else
                st = HS_STATUS_INVALID_INPUT;
        }
    } else {
        st = HS_STATUS_INVALID_INPUT;
    }
    json_decref(root);
    if (!st && out->n == 0) st = HS_STATUS_INVALID_INPUT;
    return st;
}

double hs_bench_ab_cosine_min(const struct hs_bench_ab_rows *a, const struct hs_bench_ab_rows *b)
{
    if (!a->dim || a->n != b->n || a->dim != b->dim) return NAN;
    double worst = 1;
    for (int r = 0; r < a->n; r++) {
        const float *x = a->vec + (size_t)r * (size_t)a->dim,
                    *y = b->vec + (size_t)r * (size_t)b->dim;
        double xy = 0, xx = 0, yy = 0;
        for (int i = 0; i < a->dim; i++) {
            xy += (double)x[i] * y[i];
            xx += (double)x[i] * x[i];
            yy += (double)y[i] * y[i];
        }
        double c = xx == 0 && yy == 0 ? 1 : xx == 0 || yy == 0 ? 0 : xy / sqrt(xx * yy);
        if (c < worst) worst = c;
    }
    return worst;
}

int hs_bench_ab_labels_agree(const struct hs_bench_ab_rows *a, const struct hs_bench_ab_rows *b)
{
    if (!a->label || !b->label) return -1;
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->label[i], b->label[i])) return 0;
    return 1;
}

static void interval(double *est, unsigned resamples, struct hs_bench_ci *out)
{
    hs_bench_sort(est, resamples);
    out->lo = hs_bench_percentile(est, resamples, 2.5);
    out->hi = hs_bench_percentile(est, resamples, 97.5);
}

void hs_bench_bootstrap_percentile(const double *v, size_t n, double p, unsigned resamples,
                                   uint64_t seed, double *scratch, struct hs_bench_ci *out)
{
    memset(out, 0, sizeof *out);
    if (!n) return;
    double *s = scratch, *est = scratch + n;
    memcpy(s, v, n * sizeof *s);
    hs_bench_sort(s, n);
    out->est = hs_bench_percentile(s, n, p);
    if (!resamples) {
        out->lo = out->hi = out->est;
        return;
    }
    struct hs_bench_rng rng;
    hs_bench_rng_seed(&rng, seed);
    for (unsigned k = 0; k < resamples; k++) {
        for (size_t i = 0; i < n; i++) s[i] = v[hs_bench_rng_next(&rng) % n];
        hs_bench_sort(s, n);
        est[k] = hs_bench_percentile(s, n, p);
    }
    interval(est, resamples, out);
}

static double ratio_of(double *sa, double *sb, size_t n, double p)
{
    hs_bench_sort(sa, n);
    hs_bench_sort(sb, n);
    double pa = hs_bench_percentile(sa, n, p);
    return pa > 0 ? hs_bench_percentile(sb, n, p) / pa : 0;
}

void hs_bench_bootstrap_ratio(const double *a, const double *b, size_t n, double p,
                              unsigned resamples, uint64_t seed, double *scratch,
                              struct hs_bench_ci *out)
{
    memset(out, 0, sizeof *out);
    if (!n) return;
    double *sa = scratch, *sb = scratch + n, *est = scratch + 2 * n;
    memcpy(sa, a, n * sizeof *sa);
    memcpy(sb, b, n * sizeof *sb);
    out->est = ratio_of(sa, sb, n, p);
    if (!resamples) {
        out->lo = out->hi = out->est;
        return;
    }
    struct hs_bench_rng rng;
    hs_bench_rng_seed(&rng, seed);
    for (unsigned k = 0; k < resamples; k++) {
        for (size_t i = 0; i < n; i++) {
            size_t j = hs_bench_rng_next(&rng) % n;
            sa[i] = a[j];
            sb[i] = b[j];
        }
        est[k] = ratio_of(sa, sb, n, p);
    }
    interval(est, resamples, out);
}

static void count_status(struct hs_bench_ab_side *s, int32_t st)
{
    for (int i = 0; i < s->n_status; i++)
        if (s->status[i] == st) {
            s->status_n[i]++;
            return;
        }
    if (s->n_status == HS_BENCH_AB_STATUS_MAX) {
        s->n_status_other++;
        return;
    }
    s->status[s->n_status] = st;
    s->status_n[s->n_status++] = 1;
}

static int ok(int32_t st)
{
    return st >= 200 && st < 300;
}

hs_status hs_bench_ab_summarize(const struct hs_bench_ab_pair *p, size_t n, unsigned cls,
                                unsigned resamples, uint64_t seed, struct hs_bench_ab_summary *out)
{
    memset(out, 0, sizeof *out);
    /* per side latencies, the paired ones, scratch for the bootstrap */
    size_t m = n ? n : 1;
    double *buf = hs_malloc((6 * m + resamples) * sizeof *buf);
    if (!buf) return HS_STATUS_NO_MEMORY;
    double *lat[2] = {buf, buf + m}, *pa = buf + 2 * m, *pb = buf + 3 * m, *scratch = buf + 4 * m;
    size_t n_lat[2] = {0, 0}, n_pair = 0;
    double cos_sum = 0;
    out->cos_min = NAN;
    for (size_t i = 0; i < n; i++) {
        if (cls != HS_BENCH_ANY && p[i].cls != cls) continue;
        out->n++;
        for (int s = 0; s < 2; s++) {
            if (ok(p[i].status[s])) {
                out->side[s].n_2xx++;
                lat[s][n_lat[s]++] = p[i].latency_ms[s];
            } else {
                count_status(&out->side[s], p[i].status[s]);
            }
        }
        if (ok(p[i].status[0]) && ok(p[i].status[1])) {
            pa[n_pair] = p[i].latency_ms[0];
            pb[n_pair++] = p[i].latency_ms[1];
        }
        if (!isnan(p[i].cosine)) {
            out->n_cosine++;
            cos_sum += p[i].cosine;
            if (p[i].cosine < HS_BENCH_AB_COS_OK) out->n_cos_below++;
        }
        if (p[i].agree >= 0) {
            out->n_labels++;
            out->n_agree += (uint64_t)p[i].agree;
        }
    }
    out->n_both = n_pair;
    for (int s = 0; s < 2; s++) {
        hs_bench_bootstrap_percentile(lat[s], n_lat[s], 50, resamples, seed + 2 * (uint64_t)s,
                                      scratch, &out->side[s].p50_ms);
        hs_bench_bootstrap_percentile(lat[s], n_lat[s], 99, resamples, seed + 2 * (uint64_t)s + 1,
                                      scratch, &out->side[s].p99_ms);
    }
    hs_bench_bootstrap_ratio(pa, pb, n_pair, 50, resamples, seed + 4, scratch, &out->ratio_p50);
    hs_bench_bootstrap_ratio(pa, pb, n_pair, 99, resamples, seed + 5, scratch, &out->ratio_p99);
    if (out->n_cosine) {
        /* the cosines of this class, sorted, for the minimum and the 1st percentile */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if ((cls == HS_BENCH_ANY || p[i].cls == cls) && !isnan(p[i].cosine))
                lat[0][k++] = p[i].cosine;
        hs_bench_sort(lat[0], k);
        out->cos_min = lat[0][0];
        out->cos_p1 = hs_bench_percentile(lat[0], k, 1);
        out->cos_mean = cos_sum / (double)k;
    }
    hs_free(buf);
    return HS_STATUS_OK;
}
