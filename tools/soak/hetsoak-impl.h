/* hetsoak — what its two files share: options, counters, the run's state (hetsoak.c drives the
 * load and the server; report.c checks the invariants and writes the summary). Only they
 * include it.
 */
#ifndef HS_TOOLS_SOAK_HETSOAK_IMPL_H
#define HS_TOOLS_SOAK_HETSOAK_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/clock.h"
#include "soak/soak.h"

#define NS_PER_S    1000000000LL
#define NS_PER_MS   1000000LL
#define ENGINES_MAX 8
#define ROUTES_MAX  16
#define RSS_SERIES  512
#define SLOW_MAX    64 /* byte-by-byte clients at once */

/* ---------------------------------------------------------------------------------------------
 * options and shared state
 */

struct opts {
    uint64_t requests;
    double max_s, capacity_s, period_s, fault_every_s, rss_growth_max, failover_cap;
    unsigned concurrency, max_inflight, idle_max;
    long timeout_ms;
    uint64_t seed;
    const char *out, *token;
    char engines[ENGINES_MAX][64];
    int n_engines;
    char **server_argv;
};

enum ep { EP_OPENAI, EP_TEI, EP_PREDICT, EP_TOKENIZE, EP_COUNT };
extern const char *const hs__soak_ep_name[EP_COUNT];
extern const char *const hs__soak_ep_path[EP_COUNT];
extern const double hs__soak_ep_weight[EP_COUNT];

enum mode { MODE_NORMAL, MODE_SLOW, MODE_CUT_BODY, MODE_ABANDON, MODE_COUNT };
extern const char *const hs__soak_mode_name[MODE_COUNT];
/* shares of the open-loop arrivals (the closed loop sends normal requests only) */
extern const double hs__soak_mode_weight[MODE_COUNT];

enum phase { PHASE_START, PHASE_CAPACITY, PHASE_LOAD, PHASE_DRAIN, PHASE_DONE };

enum fault_kind { FAULT_FAIL, FAULT_SLOW, FAULT_HANG, FAULT_FLAKY, FAULT_COUNT };
extern const char *const hs__soak_fault_name[FAULT_COUNT];

struct rss_sample {
    double t_s;
    long kb;
};

/* What the control thread owns (read by main only after joining it, or under mu). */
struct control {
    pthread_t thread;
    pthread_mutex_t mu;
    long faults[FAULT_COUNT];
    long admin_errors, metrics_errors, metrics_samples;
    char admin_error[256];
    double failover_max_ratio; /* largest failed_over / blocked seen on any route */
    long failover_violations;
    char failover_violation[256];
    struct rss_sample rss[RSS_SERIES];
    int n_rss;
    double rss_every_s;
    long rss_middle_kb;
};

struct counts {
    uint64_t sent[EP_COUNT][MODE_COUNT];
    uint64_t answered[EP_COUNT];
    uint64_t status[600];
    uint64_t abandoned[MODE_COUNT]; /* closed on purpose before a response */
    uint64_t abandon_late;          /* answered before the planned close */
    uint64_t dup_extra_bytes, dup_idle_bytes, dup_ids;
    uint64_t lost_eof, lost_eof_reused, lost_reset, lost_timeout, lost_connect, lost_io;
    uint64_t malformed, bad_body, no_id;
    uint64_t not_sent_cap;
    uint64_t reused, connects, close_wait_timeouts;
    char first_problem[256];
    struct hs_soak_hist lat[EP_COUNT]; /* 200 responses, from the intended send time */
};

struct soak {
    struct opts o;
    int port;
    pid_t pid;
    char out_dir[512];
    int64_t t0; /* server started */
    _Atomic int phase;
    _Atomic bool server_gone, mid_reached;
    _Atomic uint64_t sent_total;
    int64_t load_start_ns, load_end_ns;
    double capacity_rps, capacity_window_s;
    uint64_t capacity_ok;
    int exit_status; /* of the server: -1 not exited, else waitpid status */
    bool exited;
    struct control ctl;
    struct counts c;
    long rss_start_kb, rss_warm_kb, rss_end_kb, rss_hwm_kb;
    int health_status;
    double sigterm_s;
    /* final /metrics */
    char *metrics_final;
    bool time_bound_hit;
};

static inline double soak_since_s(int64_t t0)
{
    return (double)(hs_now_ns() - t0) / 1e9;
}

/* Checks every invariant, prints the summary and writes summary.txt and summary.json to
 * S->out_dir. Returns 0 when every invariant holds, 1 otherwise. */
int hs__soak_report(struct soak *S);

#endif
