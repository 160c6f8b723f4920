/* hetsoak — the invariants and the summary (text on stdout and in summary.txt, JSON in
 * summary.json). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "hetbench/workload.h"
#include "soak/hetsoak-impl.h"

/* ---------------------------------------------------------------------------------------------
 * summary
 */

struct check {
    const char *name;
    bool ok;
    char detail[200];
};

#define CHECKS_MAX 16

static int add_check(struct check *ch, int n, const char *name, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int add_check(struct check *ch, int n, const char *name, bool ok, const char *fmt, ...)
{
    if (n >= CHECKS_MAX) return n;
    ch[n].name = name;
    ch[n].ok = ok;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ch[n].detail, sizeof ch[n].detail, fmt, ap);
    va_end(ap);
    return n + 1;
}

struct breaker_row {
    char engine[64];
    double open, half_open, closed;
};

struct metric_rows {
    struct breaker_row b[ENGINES_MAX];
    int n;
};

static void breaker_fn(void *ctx, const char *engine, double v)
{
    (void)v;
    struct metric_rows *m = ctx;
    if (m->n < ENGINES_MAX) snprintf(m->b[m->n++].engine, sizeof m->b[0].engine, "%s", engine);
}

struct route_row {
    char route[64];
    double blocked, failed_over, retries, retries_denied, shed;
};

struct route_rows {
    struct route_row r[ROUTES_MAX];
    int n;
};

static void route_fn(void *ctx, const char *route, double v)
{
    struct route_rows *m = ctx;
    if (m->n < ROUTES_MAX) {
        snprintf(m->r[m->n].route, sizeof m->r[0].route, "%s", route);
        m->r[m->n++].blocked = v;
    }
}

static double metric(const char *text, const char *name, const char *fmt, const char *v)
{
    char labels[160];
    snprintf(labels, sizeof labels, fmt, v);
    return text ? hs_soak_metric_sum(text, name, labels, NULL) : 0;
}

int hs__soak_report(struct soak *S)
{
    struct counts *k = &S->c;
    struct control *ctl = &S->ctl;
    const char *mt = S->metrics_final;
    uint64_t sent = 0, sent_mode[MODE_COUNT] = {0}, sent_ep[EP_COUNT] = {0}, ans = 0;
    uint64_t ans_model = 0, sent_model_abandon = 0;
    for (int e = 0; e < EP_COUNT; e++) {
        for (int m = 0; m < MODE_COUNT; m++) {
            sent += k->sent[e][m];
            sent_mode[m] += k->sent[e][m];
            sent_ep[e] += k->sent[e][m];
        }
        ans += k->answered[e];
        if (e != EP_TOKENIZE) {
            ans_model += k->answered[e];
            sent_model_abandon += k->sent[e][MODE_ABANDON] + k->sent[e][MODE_CUT_BODY];
        }
    }
    uint64_t abandoned = k->abandoned[MODE_CUT_BODY] + k->abandoned[MODE_ABANDON];
    uint64_t lost = k->lost_eof + k->lost_eof_reused + k->lost_reset + k->lost_timeout +
                    k->lost_connect + k->lost_io;
    uint64_t twice = k->dup_extra_bytes + k->dup_idle_bytes + k->dup_ids;
    double server_total = mt ? hs_soak_metric_sum(mt, "hetserve_requests_total", NULL, NULL) : -1;
    struct metric_rows br = {0};
    struct route_rows rr = {0};
    if (mt) {
        hs_soak_metric_each(mt, "hetserve_breaker_state", "engine", breaker_fn, &br);
        for (int i = 0; i < br.n; i++) {
            const char *f = "engine=\"%s\",to=\"open\"";
            br.b[i].open = metric(mt, "hetserve_breaker_transitions_total", f, br.b[i].engine);
            f = "engine=\"%s\",to=\"half_open\"";
            br.b[i].half_open = metric(mt, "hetserve_breaker_transitions_total", f, br.b[i].engine);
            f = "engine=\"%s\",to=\"closed\"";
            br.b[i].closed = metric(mt, "hetserve_breaker_transitions_total", f, br.b[i].engine);
        }
        hs_soak_metric_each(mt, "hetserve_route_blocked_total", "route", route_fn, &rr);
        for (int i = 0; i < rr.n; i++) {
            const char *r = rr.r[i].route;
            rr.r[i].failed_over = metric(mt, "hetserve_route_failed_over_total", "route=\"%s\"", r);
            rr.r[i].retries =
                metric(mt, "hetserve_route_retries_total", "route=\"%s\",outcome=\"sent\"", r);
            rr.r[i].retries_denied =
                metric(mt, "hetserve_route_retries_total", "route=\"%s\",outcome=\"denied\"", r);
            rr.r[i].shed = metric(mt, "hetserve_route_shed_total", "route=\"%s\"", r);
        }
    }
    double opens = 0, failovers = 0;
    for (int i = 0; i < br.n; i++) opens += br.b[i].open;
    for (int i = 0; i < rr.n; i++) failovers += rr.r[i].failed_over;
    long faults_total = 0;
    for (int f = 0; f < FAULT_COUNT; f++) faults_total += ctl->faults[f];

    struct check ch[CHECKS_MAX];
    int nc = 0;
    nc = add_check(ch, nc, "requests_sent", sent >= S->o.requests, "%" PRIu64 " of %" PRIu64 "%s",
                   sent, S->o.requests, S->time_bound_hit ? " (stopped by --max-s)" : "");
    nc = add_check(ch, nc, "accounting", sent == ans + abandoned + lost,
                   "sent %" PRIu64 " = answered %" PRIu64 " + abandoned %" PRIu64
                   " + never answered %" PRIu64,
                   sent, ans, abandoned, lost);
    nc = add_check(ch, nc, "answered_twice", twice == 0,
                   "%" PRIu64 " (bytes after a response %" PRIu64 ", on an idle connection %" PRIu64
                   ", repeated id %" PRIu64 ")",
                   twice, k->dup_extra_bytes, k->dup_idle_bytes, k->dup_ids);
    nc = add_check(ch, nc, "never_answered", lost == 0,
                   "%" PRIu64 " (closed %" PRIu64 ", closed on reuse %" PRIu64 ", reset %" PRIu64
                   ", timeout %" PRIu64 ", connect %" PRIu64 ", i/o %" PRIu64 ")",
                   lost, k->lost_eof, k->lost_eof_reused, k->lost_reset, k->lost_timeout,
                   k->lost_connect, k->lost_io);
    uint64_t unexpected = 0;
    for (int s = 0; s < 600; s++)
        if (k->status[s] && s != 200 && s != 429 && s != 500 && s != 503 && s != 504)
            unexpected += k->status[s];
    nc = add_check(ch, nc, "responses_well_formed",
                   !k->malformed && !k->bad_body && !k->no_id && !unexpected,
                   "malformed %" PRIu64 ", 200 with a wrong body %" PRIu64 ", no id %" PRIu64
                   ", statuses other than 200/429/500/503/504 %" PRIu64,
                   k->malformed, k->bad_body, k->no_id, unexpected);
    nc = add_check(ch, nc, "server_alive", !atomic_load(&S->server_gone), "%s",
                   atomic_load(&S->server_gone) ? "the server died during the run"
                                                : "ran throughout the load");
    nc = add_check(ch, nc, "health_at_end", S->health_status == 200, "GET /health: %d",
                   S->health_status);
    bool exit_ok = S->exited && WIFEXITED(S->exit_status) && WEXITSTATUS(S->exit_status) == 0 &&
                   S->sigterm_s >= 0;
    nc = add_check(ch, nc, "exit_0_on_sigterm", exit_ok, "%s",
                   !S->exited                    ? "did not exit"
                   : WIFSIGNALED(S->exit_status) ? strsignal(WTERMSIG(S->exit_status))
                   : WEXITSTATUS(S->exit_status) ? "non-zero exit status"
                                                 : "exit 0");
    double growth = ctl->rss_middle_kb > 0 ? (double)S->rss_end_kb / (double)ctl->rss_middle_kb : 0;
    nc = add_check(ch, nc, "rss_flat", ctl->rss_middle_kb > 0 && growth <= S->o.rss_growth_max,
                   "end %.1f MiB / middle %.1f MiB = %.3f (bound %.2f)", S->rss_end_kb / 1024.0,
                   ctl->rss_middle_kb / 1024.0, growth, S->o.rss_growth_max);
    nc = add_check(
        ch, nc, "failover_cap", ctl->failover_violations == 0 && ctl->metrics_samples > 0,
        "%ld violations in %ld /metrics samples; largest failed-over/blocked %.3f "
        "(cap %.2f)%s%s",
        ctl->failover_violations, ctl->metrics_samples, ctl->failover_max_ratio, S->o.failover_cap,
        ctl->failover_violation[0] ? ": " : "", ctl->failover_violation);
    nc = add_check(ch, nc, "control_requests", ctl->admin_errors == 0 && ctl->metrics_errors == 0,
                   "admin errors %ld%s%s, /metrics errors %ld", ctl->admin_errors,
                   ctl->admin_error[0] ? ": " : "", ctl->admin_error, ctl->metrics_errors);
    bool bite = S->o.n_engines == 0 || (faults_total > 0 && opens > 0);
    nc = add_check(ch, nc, "faults_took_effect", bite,
                   "%ld faults injected; breakers opened %.0f times, %.0f failovers", faults_total,
                   opens, failovers);
    bool counted = server_total >= (double)ans_model &&
                   server_total <= (double)(ans_model + sent_model_abandon + lost);
    nc = add_check(ch, nc, "server_counts", counted,
                   "hetserve_requests_total %.0f; client: answered %" PRIu64 " .. %" PRIu64
                   " (with abandoned and lost)",
                   server_total, ans_model, ans_model + sent_model_abandon + lost);
    int failed = 0;
    for (int i = 0; i < nc; i++) failed += !ch[i].ok;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;

    /* ---- text ---- */
    char path[700];
    snprintf(path, sizeof path, "%s/summary.txt", S->out_dir);
    FILE *ft = fopen(path, "w");
    snprintf(path, sizeof path, "%s/summary.json", S->out_dir);
    FILE *fj = fopen(path, "w");
    FILE *outs[2] = {stdout, ft};
    double load_s = (double)(S->load_end_ns - S->load_start_ns) / 1e9;
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f) continue;
        fprintf(f, "hetsoak: %" PRIu64 " requests in %.1f s (load phase %.1f s, %.0f req/s)\n",
                sent, soak_since_s(S->t0), load_s, load_s > 0 ? (double)sent / load_s : 0);
        fprintf(f,
                "capacity        %.0f req/s (closed loop, %u clients, %.1f s); load 0.5x-3x, "
                "period %.0f s; a fault every %.0f s\n",
                S->capacity_rps, S->o.concurrency, S->capacity_window_s, S->o.period_s,
                S->o.fault_every_s);
        fprintf(f, "sent            %" PRIu64 ":", sent);
        for (int e = 0; e < EP_COUNT; e++)
            fprintf(f, " %s %" PRIu64, hs__soak_ep_name[e], sent_ep[e]);
        fprintf(f, "\n                ");
        for (int m = 0; m < MODE_COUNT; m++)
            fprintf(f, " %s %" PRIu64, hs__soak_mode_name[m], sent_mode[m]);
        fprintf(f, "; not sent (client cap %u) %" PRIu64 "\n", S->o.max_inflight, k->not_sent_cap);
        fprintf(f, "answered        %" PRIu64 ":", ans);
        for (int s = 0; s < 600; s++)
            if (k->status[s]) fprintf(f, " %d: %" PRIu64, s, k->status[s]);
        fprintf(f,
                "\nabandoned       %" PRIu64 " on purpose (cut mid-body %" PRIu64
                ", closed after the body %" PRIu64 "); answered before the close %" PRIu64 "\n",
                abandoned, k->abandoned[MODE_CUT_BODY], k->abandoned[MODE_ABANDON],
                k->abandon_late);
        fprintf(f, "answered twice  %" PRIu64 "\nnever answered  %" PRIu64 "\n", twice, lost);
        fprintf(f,
                "connections     %" PRIu64 " opened, %" PRIu64 " requests on reused ones; %" PRIu64
                " not closed by the server within 2 s of a Connection: close answer\n",
                k->connects, k->reused, k->close_wait_timeouts);
        fprintf(f, "latency of 200s (ms, p50 / p99 / max):");
        for (int e = 0; e < EP_COUNT; e++)
            fprintf(f, " %s %.1f / %.0f / %.0f;", hs__soak_ep_name[e],
                    hs_soak_hist_pct(&k->lat[e], 50), hs_soak_hist_pct(&k->lat[e], 99),
                    k->lat[e].max_ms);
        fprintf(f, "\nfaults          ");
        for (int i = 0; i < FAULT_COUNT; i++)
            fprintf(f, " %s %ld", hs__soak_fault_name[i], ctl->faults[i]);
        fprintf(f, " (on");
        for (int i = 0; i < S->o.n_engines; i++) fprintf(f, " %s", S->o.engines[i]);
        fprintf(f, ")\nbreakers        ");
        for (int i = 0; i < br.n; i++)
            fprintf(f, " %s: opened %.0f, half-open %.0f, closed %.0f;", br.b[i].engine,
                    br.b[i].open, br.b[i].half_open, br.b[i].closed);
        fprintf(f, "\nroutes          ");
        for (int i = 0; i < rr.n; i++)
            fprintf(f,
                    " %s: blocked %.0f, failed over %.0f, retries %.0f (denied %.0f), shed %.0f;",
                    rr.r[i].route, rr.r[i].blocked, rr.r[i].failed_over, rr.r[i].retries,
                    rr.r[i].retries_denied, rr.r[i].shed);
        fprintf(f,
                "\nRSS (MiB)        start %.1f, after warm-up %.1f, middle %.1f, end %.1f, peak "
                "%.1f\n",
                S->rss_start_kb / 1024.0, S->rss_warm_kb / 1024.0, ctl->rss_middle_kb / 1024.0,
                S->rss_end_kb / 1024.0, S->rss_hwm_kb / 1024.0);
        fprintf(f, "driver CPU       %.1f s (%.0f %% of one core)\n", cpu_s,
                100.0 * cpu_s / soak_since_s(S->t0));
        fprintf(f, "shutdown         SIGTERM -> %s in %.1f s\n", exit_ok ? "exit 0" : "FAILED",
                S->sigterm_s);
        if (k->first_problem[0]) fprintf(f, "first problem    %s\n", k->first_problem);
        fprintf(f, "invariants:\n");
        for (int i = 0; i < nc; i++)
            fprintf(f, "  %-4s %-22s %s\n", ch[i].ok ? "ok" : "FAIL", ch[i].name, ch[i].detail);
        fprintf(f, "%s\n", failed ? "SOAK FAILED" : "SOAK PASSED");
    }
    if (ft) fclose(ft);

    /* ---- JSON ---- */
    if (fj) {
        fprintf(fj, "{\n  \"passed\": %s,\n  \"requests_asked\": %" PRIu64 ",\n",
                failed ? "false" : "true", S->o.requests);
        fprintf(fj, "  \"elapsed_s\": %.3f,\n  \"load_s\": %.3f,\n  \"capacity_rps\": %.1f,\n",
                soak_since_s(S->t0), load_s, S->capacity_rps);
        fprintf(fj, "  \"period_s\": %.1f,\n  \"fault_every_s\": %.1f,\n", S->o.period_s,
                S->o.fault_every_s);
        fprintf(fj, "  \"sent\": {\"total\": %" PRIu64, sent);
        for (int e = 0; e < EP_COUNT; e++)
            fprintf(fj, ", \"%s\": %" PRIu64, hs__soak_ep_name[e], sent_ep[e]);
        for (int m = 0; m < MODE_COUNT; m++)
            fprintf(fj, ", \"%s\": %" PRIu64, hs__soak_mode_name[m], sent_mode[m]);
        fprintf(fj, ", \"not_sent_client_cap\": %" PRIu64 "},\n", k->not_sent_cap);
        fprintf(fj, "  \"answered\": {\"total\": %" PRIu64, ans);
        for (int s = 0; s < 600; s++)
            if (k->status[s]) fprintf(fj, ", \"%d\": %" PRIu64, s, k->status[s]);
        fprintf(fj,
                "},\n  \"abandoned\": {\"cut_mid_body\": %" PRIu64 ", \"after_body\": %" PRIu64
                ", \"answered_before_close\": %" PRIu64 "},\n",
                k->abandoned[MODE_CUT_BODY], k->abandoned[MODE_ABANDON], k->abandon_late);
        fprintf(fj,
                "  \"answered_twice\": {\"total\": %" PRIu64 ", \"bytes_after_response\": %" PRIu64
                ", \"bytes_on_idle\": %" PRIu64 ", \"repeated_id\": %" PRIu64 "},\n",
                twice, k->dup_extra_bytes, k->dup_idle_bytes, k->dup_ids);
        fprintf(fj,
                "  \"never_answered\": {\"total\": %" PRIu64 ", \"closed\": %" PRIu64
                ", \"closed_on_reuse\": %" PRIu64 ", \"reset\": %" PRIu64 ", \"timeout\": %" PRIu64
                ", \"connect\": %" PRIu64 ", \"io\": %" PRIu64 "},\n",
                lost, k->lost_eof, k->lost_eof_reused, k->lost_reset, k->lost_timeout,
                k->lost_connect, k->lost_io);
        fprintf(fj,
                "  \"malformed\": %" PRIu64 ", \"bad_body\": %" PRIu64 ", \"no_id\": %" PRIu64
                ",\n",
                k->malformed, k->bad_body, k->no_id);
        fprintf(fj, "  \"latency_200_ms\": {");
        for (int e = 0; e < EP_COUNT; e++)
            fprintf(
                fj, "%s\"%s\": {\"n\": %" PRIu64 ", \"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f}",
                e ? ", " : "", hs__soak_ep_name[e], k->lat[e].n, hs_soak_hist_pct(&k->lat[e], 50),
                hs_soak_hist_pct(&k->lat[e], 99), k->lat[e].max_ms);
        fprintf(fj, "},\n  \"faults\": {");
        for (int i = 0; i < FAULT_COUNT; i++)
            fprintf(fj, "%s\"%s\": %ld", i ? ", " : "", hs__soak_fault_name[i], ctl->faults[i]);
        fprintf(fj, "},\n  \"breakers\": [");
        for (int i = 0; i < br.n; i++)
            fprintf(
                fj,
                "%s{\"engine\": \"%s\", \"opened\": %.0f, \"half_open\": %.0f, \"closed\": %.0f}",
                i ? ", " : "", br.b[i].engine, br.b[i].open, br.b[i].half_open, br.b[i].closed);
        fprintf(fj, "],\n  \"routes\": [");
        for (int i = 0; i < rr.n; i++)
            fprintf(fj,
                    "%s{\"route\": \"%s\", \"blocked\": %.0f, \"failed_over\": %.0f, \"retries\": "
                    "%.0f, \"retries_denied\": %.0f, \"shed\": %.0f}",
                    i ? ", " : "", rr.r[i].route, rr.r[i].blocked, rr.r[i].failed_over,
                    rr.r[i].retries, rr.r[i].retries_denied, rr.r[i].shed);
        fprintf(fj,
                "],\n  \"failover\": {\"cap\": %.3f, \"max_ratio\": %.4f, \"violations\": %ld, "
                "\"samples\": %ld},\n",
                S->o.failover_cap, ctl->failover_max_ratio, ctl->failover_violations,
                ctl->metrics_samples);
        fprintf(fj, "  \"server_requests_total\": %.0f,\n  \"driver_cpu_s\": %.2f,\n", server_total,
                cpu_s);
        fprintf(fj,
                "  \"rss_kb\": {\"start\": %ld, \"warm\": %ld, \"middle\": %ld, \"end\": %ld, "
                "\"peak\": %ld, \"growth_max\": %.3f, \"series\": [",
                S->rss_start_kb, S->rss_warm_kb, ctl->rss_middle_kb, S->rss_end_kb, S->rss_hwm_kb,
                S->o.rss_growth_max);
        for (int i = 0; i < ctl->n_rss; i++)
            fprintf(fj, "%s[%.1f, %ld]", i ? ", " : "", ctl->rss[i].t_s, ctl->rss[i].kb);
        fprintf(fj, "]},\n  \"health_at_end\": %d,\n  \"sigterm_exit_ok\": %s,\n", S->health_status,
                exit_ok ? "true" : "false");
        fprintf(fj, "  \"invariants\": {");
        for (int i = 0; i < nc; i++) {
            fprintf(fj, "%s\"%s\": {\"ok\": %s, \"detail\": ", i ? ", " : "", ch[i].name,
                    ch[i].ok ? "true" : "false");
            struct hs_bench_buf b = {0};
            hs_bench_buf_append_json_str(&b, ch[i].detail);
            fprintf(fj, "%s}", b.p ? b.p : "\"\"");
            hs_bench_buf_free(&b);
        }
        fprintf(fj, "}\n}\n");
        fclose(fj);
    }
    return failed ? 1 : 0;
}
