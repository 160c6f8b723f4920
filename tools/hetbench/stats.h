/* hetbench — per-request records and their summaries (the pure statistics of a run).
 *
 * A run produces one struct hs_bench_record per request it meant to send. Summaries filter the
 * records (by class, by priority, warm-up excluded) and compute counts by outcome, throughput
 * inputs and latency percentiles. Latency percentiles are over 2xx responses only: a 429 that
 * returns in 50 us says nothing about serving latency; its count is reported instead.
 * Not thread-safe; no I/O.
 */
#ifndef HS_TOOLS_HETBENCH_STATS_H
#define HS_TOOLS_HETBENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Outcomes that are not an HTTP status (record.status < 0). */
enum hs_bench_outcome {
    HS_BENCH_OUTCOME_CONN = -1,    /* connect failed, reset, malformed response */
    HS_BENCH_OUTCOME_TIMEOUT = -2, /* no response within the client's --timeout-ms */
    HS_BENCH_OUTCOME_DROPPED = -3, /* open loop: --max-inflight reached, never sent */
};

/* Server-Timing metrics tracked per record (by name, first come first served). */
#define HS_BENCH_ST_MAX 16

struct hs_bench_record {
    int64_t send_ns;    /* intended send time, relative to the start of the run */
    int64_t latency_ns; /* completion minus intended send time (open loop) or actual send time */
    int64_t late_ns;    /* open loop: actual minus intended send time (the client's own lag) */
    int32_t status;     /* HTTP status, or an enum hs_bench_outcome */
    int32_t tokens;     /* usage.prompt_tokens from the response; -1 when unknown */
    uint16_t cls, prio, items;
    uint16_t tenant;              /* index into --tenant's mix; 0 without one */
    uint8_t warmup;               /* sent during the warm-up period: excluded from summaries */
    float st_ms[HS_BENCH_ST_MAX]; /* Server-Timing dur per tracked name; NaN when absent */
};

/* Names of the Server-Timing metrics seen so far. */
struct hs_bench_st_names {
    int n;
    char name[HS_BENCH_ST_MAX][32];
};

/* Parses a Server-Timing header value ("a;dur=1.5, b;desc=\"x\";dur=2") into rec->st_ms,
 * registering new names in names (metrics beyond HS_BENCH_ST_MAX names are ignored; entries
 * without dur are ignored). rec->st_ms must have been initialised (hs_bench_record_init). */
void hs_bench_server_timing_parse(const char *value, struct hs_bench_st_names *names,
                                  struct hs_bench_record *rec);

/* Sets a record to "nothing known yet": tokens -1, st_ms NaN, everything else 0. */
void hs_bench_record_init(struct hs_bench_record *rec);

/* Nearest-rank percentile (p in [0, 100]) of n sorted values; 0 when n == 0.
 * p = 0 gives the minimum, p = 100 the maximum. */
double hs_bench_percentile(const double *sorted, size_t n, double p);

/* Sorts n doubles ascending, in place. */
void hs_bench_sort(double *v, size_t n);

struct hs_bench_summary {
    uint64_t n; /* records counted (warm-up excluded) */
    uint64_t n_2xx, n_429, n_504, n_other_http, n_conn, n_timeout, n_dropped;
    uint64_t items_2xx;
    uint64_t tokens_2xx; /* sum over 2xx records whose token count is known */
    uint64_t n_tokens_known;
    double p50_ms, p95_ms, p99_ms, max_ms, mean_ms; /* over 2xx */
};

#define HS_BENCH_ANY 0xffff

/* Summarises the records with cls == cls and prio == prio (HS_BENCH_ANY matches all), skipping
 * warm-up records. scratch must hold n doubles. */
void hs_bench_summarize(const struct hs_bench_record *rec, size_t n, unsigned cls, unsigned prio,
                        double *scratch, struct hs_bench_summary *out);
/* The same, of the records of one tenant too (tenant: HS_BENCH_ANY matches all). */
void hs_bench_summarize_tenant(const struct hs_bench_record *rec, size_t n, unsigned cls,
                               unsigned prio, unsigned tenant, double *scratch,
                               struct hs_bench_summary *out);

/* Percentiles of Server-Timing metric k over the non-warm-up 2xx records that carry it; returns
 * how many did. scratch must hold n doubles. */
size_t hs_bench_st_percentiles(const struct hs_bench_record *rec, size_t n, int k, double *scratch,
                               double *p50_ms, double *p95_ms);

#endif
