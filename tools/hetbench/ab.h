/* hetbench ab — the pure parts of an A/B comparison: reading the rows of a response, comparing
 * two responses to the same request, bootstrap confidence intervals, per-class summaries.
 *
 * `hetbench ab` sends every request of a trace to two servers (or two routes of one) and keeps
 * both answers. Each request becomes one struct hs_bench_ab_pair: both sides' outcomes and
 * latencies, and when both answered 2xx the quality diff — the smallest cosine between A's and
 * B's embedding of the same input (embeddings), or whether every input's top label agrees
 * (/predict). hs_bench_ab_summarize turns the pairs of one class into counts, P50/P99 per side
 * with 95 % bootstrap intervals (seeded, so a report is reproducible), the ratio B/A with its
 * interval (paired: requests that both sides answered 2xx are resampled together), errors by
 * status and the cosine distribution.
 * Not thread-safe; no I/O. All allocation through hs_malloc.
 */
#ifndef HS_TOOLS_HETBENCH_AB_H
#define HS_TOOLS_HETBENCH_AB_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* The rows of one response: embeddings (OpenAI {"data":[{"embedding":[...]}]} or TEI [[...]])
 * or /predict labels (the top label of each input: [{"label":..}, ..] or [[{"label":..}, ..]]). */
struct hs_bench_ab_rows {
    int n;        /* rows (inputs) */
    int dim;      /* floats per row; 0 for labels */
    float *vec;   /* [n * dim] */
    char **label; /* [n] when the response holds labels, else NULL */
};

/* Parses a response body. Errors: HS_STATUS_INVALID_INPUT (not JSON, rows of different lengths,
 * no rows), HS_STATUS_NO_MEMORY. out is zeroed first; free with hs_bench_ab_rows_free (also on
 * error). */
hs_status hs_bench_ab_rows_parse(const char *json, size_t len, struct hs_bench_ab_rows *out);
void hs_bench_ab_rows_free(struct hs_bench_ab_rows *r);

/* Smallest cosine over the rows of a and b (row i against row i); NAN when they are not two
 * embedding responses of the same shape. A zero row against a zero row counts as 1. */
double hs_bench_ab_cosine_min(const struct hs_bench_ab_rows *a, const struct hs_bench_ab_rows *b);

/* 1 when a and b hold labels for the same number of inputs and every one agrees, 0 when they
 * differ, -1 when either holds no labels. */
int hs_bench_ab_labels_agree(const struct hs_bench_ab_rows *a, const struct hs_bench_ab_rows *b);

/* An estimate with its 95 % bootstrap interval (the 2.5th and 97.5th percentiles of the
 * resampled estimates). All 0 when there was nothing to estimate from. */
struct hs_bench_ci {
    double est, lo, hi;
};

/* Percentile p (nearest rank) of v[n] with its bootstrap interval over `resamples` resamples drawn
 * with a generator seeded by seed. scratch must hold n + resamples doubles. v is not changed. */
void hs_bench_bootstrap_percentile(const double *v, size_t n, double p, unsigned resamples,
                                   uint64_t seed, double *scratch, struct hs_bench_ci *out);

/* Ratio of percentile p of b[n] to that of a[n], where a[i] and b[i] belong together (one
 * request): pairs are resampled as pairs. scratch must hold 2n + resamples doubles. est is 0
 * when percentile p of a is 0. */
void hs_bench_bootstrap_ratio(const double *a, const double *b, size_t n, double p,
                              unsigned resamples, uint64_t seed, double *scratch,
                              struct hs_bench_ci *out);

/* One request, sent to both sides. */
struct hs_bench_ab_pair {
    int32_t status[2];    /* HTTP status or an enum hs_bench_outcome, [0] = A, [1] = B */
    double latency_ms[2]; /* from the intended send time */
    double cosine;        /* NAN unless both answered 2xx with embeddings */
    int8_t agree;         /* label agreement: -1 unless both answered 2xx with labels */
    uint16_t cls;
};

/* Distinct non-2xx outcomes counted per side; further ones are counted as other. */
#define HS_BENCH_AB_STATUS_MAX 8

struct hs_bench_ab_side {
    uint64_t n_2xx;
    struct hs_bench_ci p50_ms, p99_ms;
    int n_status;
    int32_t status[HS_BENCH_AB_STATUS_MAX]; /* non-2xx outcomes, in order of first appearance */
    uint64_t status_n[HS_BENCH_AB_STATUS_MAX];
    uint64_t n_status_other;
};

struct hs_bench_ab_summary {
    uint64_t n;      /* requests */
    uint64_t n_both; /* both sides 2xx */
    struct hs_bench_ab_side side[2];
    struct hs_bench_ci ratio_p50, ratio_p99; /* B / A over the requests both answered 2xx */
    uint64_t n_cosine;                       /* requests with a cosine */
    double cos_min, cos_p1, cos_mean;
    uint64_t n_cos_below; /* cosine < HS_BENCH_AB_COS_OK */
    uint64_t n_labels, n_agree;
};

#define HS_BENCH_AB_COS_OK 0.999

/* Summarises the pairs with cls == cls (HS_BENCH_ANY from stats.h matches all). Returns
 * HS_STATUS_NO_MEMORY when its scratch cannot be allocated. */
hs_status hs_bench_ab_summarize(const struct hs_bench_ab_pair *p, size_t n, unsigned cls,
                                unsigned resamples, uint64_t seed, struct hs_bench_ab_summary *out);

#endif
