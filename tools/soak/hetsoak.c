/* hetsoak — a soak test of hetserve under faults, on loopback only.
 *
 * It starts the server given after "--" (its stdout says "listening on HOST:PORT"), measures the
 * server's capacity with a short closed loop, then offers open-loop Poisson load that swings
 * between 0.5x and 3x of that capacity until it has sent --requests requests (or the --max-s
 * bound comes near), spread over POST /v1/embeddings, /embed, /predict and /tokenize. While it
 * loads, a control thread injects engine failures, slow batches and hangs through POST
 * /admin/fault on a schedule, samples /metrics (the failover cap must hold at every sample) and
 * the server's RSS. Some clients misbehave on purpose: they close after half the body, close
 * after the whole body before the response, or send their request one byte at a time.
 *
 * Every request is accounted for: answered (by status), abandoned on purpose, or never answered.
 * A response is "answered twice" when bytes follow it on its connection (before the next request
 * on a keep-alive connection, before the close on a "Connection: close" one) or when its
 * X-Request-Id (the server's own number for the request) was seen before. At the end the server
 * must answer /health and exit 0 on SIGTERM; its RSS at the end must stay within --rss-growth-max
 * of the middle's. The summary goes to stdout and, as text and JSON, to --out; the exit status is
 * 0 when every invariant holds, 1 when one fails, 2 on bad usage or a server that does not start.
 *
 * One thread drives every connection with epoll (raw sockets: the misbehaving clients need
 * control over each byte and each close, which an HTTP library does not give). The target is
 * always 127.0.0.1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "hetbench/workload.h"
#include "soak/hetsoak-impl.h"
#include "soak/soak.h"

const char *const hs__soak_ep_name[EP_COUNT] = {"openai", "tei", "predict", "tokenize"};
const char *const hs__soak_ep_path[EP_COUNT] = {"/v1/embeddings", "/embed", "/predict",
                                                "/tokenize"};
const double hs__soak_ep_weight[EP_COUNT] = {35, 25, 20, 20};
const char *const hs__soak_mode_name[MODE_COUNT] = {"normal", "slow_body", "cut_mid_body",
                                                    "abandoned_after_body"};
const double hs__soak_mode_weight[MODE_COUNT] = {0.94, 0.01, 0.025, 0.025};
const char *const hs__soak_fault_name[FAULT_COUNT] = {"fail", "slow", "hang", "flaky"};

static struct soak *g_soak; /* for the SIGALRM watchdog */

static void note(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *dst, size_t cap, const char *fmt, ...)
{
    if (dst[0]) return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------------------------
 * the server process
 */

static long proc_status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') {
            v = atol(line + k + 1);
            break;
        }
    fclose(f);
    return v;
}

static int spawn_server(struct soak *S)
{
    char out_path[600], log_path[600];
    snprintf(out_path, sizeof out_path, "%s/server.out", S->out_dir);
    snprintf(log_path, sizeof log_path, "%s/server.log", S->out_dir);
    int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int fl = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fo < 0 || fl < 0) {
        fprintf(stderr, "hetsoak: cannot write %s: %s\n", S->out_dir, strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* the server never outlives the driver */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        dup2(fo, 1);
        dup2(fl, 2);
        /* the token is the config file's: an HS_ADMIN_TOKEN from the caller would replace it */
        unsetenv("HS_ADMIN_TOKEN");
        setenv("OMP_WAIT_POLICY", "passive", 0);
        signal(SIGPIPE, SIG_DFL);
        execvp(S->o.server_argv[0], S->o.server_argv);
        fprintf(stderr, "hetsoak: cannot run %s: %s\n", S->o.server_argv[0], strerror(errno));
        _exit(127);
    }
    close(fo);
    close(fl);
    S->pid = pid;
    S->t0 = hs_now_ns();
    /* wait for "listening on HOST:PORT" */
    for (int i = 0; i < 3000; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "hetsoak: the server exited before listening (see %s)\n", log_path);
            S->exited = true;
            S->exit_status = st;
            return -1;
        }
        FILE *f = fopen(out_path, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "listening on ");
            if (!p) continue;
            p += strlen("listening on ");
            if (!strncmp(p, "http://", 7)) p += 7;
            if (strncmp(p, "127.0.0.1:", 10)) {
                fprintf(stderr, "hetsoak: the server listens on %s; loopback only (127.0.0.1)\n",
                        p);
                fclose(f);
                kill(pid, SIGKILL);
                return -1;
            }
            S->port = atoi(p + 10);
            fclose(f);
            return S->port > 0 ? 0 : -1;
        }
        if (f) fclose(f);
        usleep(100000);
    }
    fprintf(stderr, "hetsoak: the server did not listen within 300 s\n");
    kill(pid, SIGKILL);
    return -1;
}

static void on_alarm(int sig)
{
    (void)sig;
    /* the hard bound: nothing may run longer */
    static const char msg[] = "hetsoak: hard time bound (--max-s) reached; killing the server\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    if (g_soak && g_soak->pid > 0) kill(g_soak->pid, SIGKILL);
    _exit(3);
}

/* ---------------------------------------------------------------------------------------------
 * blocking HTTP for control requests (admin, metrics, health): one connection each, closed
 */

static int loopback_socket(int port, bool nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Returns the status (or -1) and, when body is given, the body (NUL-terminated, hs_free). */
static int http_call(int port, const char *method, const char *path, const char *token,
                     const char *json, char **body, int timeout_ms)
{
    if (body) *body = NULL;
    int fd = loopback_socket(port, false);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, port, token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "", json ? strlen(json) : 0);
    struct hs_bench_buf req = {0}, in = {0};
    int status = -1;
    if (hs_bench_buf_append(&req, head, (size_t)n) || (json && hs_bench_buf_puts(&req, json)))
        goto out;
    for (size_t off = 0; off < req.len;) {
        ssize_t w = send(fd, req.p + off, req.len - off, MSG_NOSIGNAL);
        if (w <= 0) goto out;
        off += (size_t)w;
    }
    struct hs_soak_resp r;
    for (;;) {
        if (hs_bench_buf_reserve(&in, 65536)) goto out;
        ssize_t got = recv(fd, in.p + in.len, in.cap - in.len - 1, 0);
        if (got <= 0) goto out;
        in.len += (size_t)got;
        in.p[in.len] = 0;
        enum hs_soak_parse p = hs_soak_resp_parse(in.p, in.len, &r, NULL, 0);
        if (p == HS_SOAK_PARSE_MALFORMED) goto out;
        if (p == HS_SOAK_PARSE_DONE) break;
    }
    status = r.status;
    if (body) {
        size_t len = (size_t)r.content_bytes;
        *body = hs_malloc(len + 1);
        if (*body) {
            memcpy(*body, in.p + r.head_bytes, len);
            (*body)[len] = 0;
        }
    }
out:
    close(fd);
    hs_bench_buf_free(&req);
    hs_bench_buf_free(&in);
    return status;
}

/* ---------------------------------------------------------------------------------------------
 * control thread: fault schedule, /metrics samples, RSS samples, is the server alive
 */

struct failover_ctx {
    const char *text;
    double cap;
    struct control *ctl;
};

static void failover_fn(void *ctx, const char *route, double blocked)
{
    struct failover_ctx *f = ctx;
    char labels[128];
    snprintf(labels, sizeof labels, "route=\"%s\"", route);
    double over = hs_soak_metric_sum(f->text, "hetserve_route_failed_over_total", labels, NULL);
    if (blocked > 0 && over / blocked > f->ctl->failover_max_ratio)
        f->ctl->failover_max_ratio = over / blocked;
    if (over > f->cap * blocked + 1e-9) {
        f->ctl->failover_violations++;
        note(f->ctl->failover_violation, sizeof f->ctl->failover_violation,
             "route %s: %.0f failed over of %.0f blocked, above the cap %.2f", route, over, blocked,
             f->cap);
    }
}

static void sample_metrics(struct soak *S)
{
    char *text = NULL;
    int st = http_call(S->port, "GET", "/metrics", NULL, NULL, &text, 10000);
    pthread_mutex_lock(&S->ctl.mu);
    if (st != 200 || !text) {
        S->ctl.metrics_errors++;
    } else {
        S->ctl.metrics_samples++;
        struct failover_ctx f = {.text = text, .cap = S->o.failover_cap, .ctl = &S->ctl};
        hs_soak_metric_each(text, "hetserve_route_blocked_total", "route", failover_fn, &f);
    }
    pthread_mutex_unlock(&S->ctl.mu);
    hs_free(text);
}

static void set_fault(struct soak *S, const char *engine, const char *fields)
{
    char body[256];
    snprintf(body, sizeof body, "{\"engine\":\"%s\"%s%s}", engine, fields[0] ? "," : "", fields);
    int st = http_call(S->port, "POST", "/admin/fault", S->o.token, body, NULL, 10000);
    if (st != 200) {
        pthread_mutex_lock(&S->ctl.mu);
        S->ctl.admin_errors++;
        note(S->ctl.admin_error, sizeof S->ctl.admin_error, "POST /admin/fault %s: status %d", body,
             st);
        pthread_mutex_unlock(&S->ctl.mu);
    }
}

static void rss_sample(struct soak *S)
{
    struct control *c = &S->ctl;
    long kb = proc_status_kb(S->pid, "VmRSS");
    if (kb < 0) return;
    pthread_mutex_lock(&c->mu);
    if (c->n_rss == RSS_SERIES) { /* full: keep every other sample, sample half as often */
        for (int i = 0; i < RSS_SERIES / 2; i++) c->rss[i] = c->rss[2 * i];
        c->n_rss = RSS_SERIES / 2;
        c->rss_every_s *= 2;
    }
    c->rss[c->n_rss++] = (struct rss_sample){.t_s = soak_since_s(S->t0), .kb = kb};
    pthread_mutex_unlock(&c->mu);
}

static void *control_main(void *arg)
{
    struct soak *S = arg;
    struct control *c = &S->ctl;
    const double metrics_every_s = 1.0;
    double next_metrics = 0, next_rss = 0;
    /* the fault schedule: event k at (k + 1) x fault_every_s after the load starts, kinds and
     * engines in turn; each fault is held for `hold` seconds, then cleared */
    long k = 0;
    bool active = false;
    double clear_at = 0;
    int fault_engine = 0;
    bool middle_taken = false;
    while (atomic_load(&S->phase) < PHASE_DRAIN) {
        double now = soak_since_s(S->t0);
        int st;
        if (waitpid(S->pid, &st, WNOHANG) == S->pid) {
            S->exited = true;
            S->exit_status = st;
            atomic_store(&S->server_gone, true);
            break;
        }
        if (now >= next_rss) {
            rss_sample(S);
            next_rss = now + c->rss_every_s;
        }
        if (!middle_taken && atomic_load(&S->mid_reached)) {
            c->rss_middle_kb = proc_status_kb(S->pid, "VmRSS");
            middle_taken = true;
        }
        if (now >= next_metrics) {
            sample_metrics(S);
            next_metrics = now + metrics_every_s;
        }
        if (atomic_load(&S->phase) == PHASE_LOAD && S->o.n_engines > 0) {
            double t = (double)(hs_now_ns() - S->load_start_ns) / 1e9;
            double hold = S->o.fault_every_s * 0.4;
            if (hold > 4) hold = 4;
            if (active && t >= clear_at) {
                set_fault(S, S->o.engines[fault_engine], "");
                active = false;
            }
            if (!active && t >= (double)(k + 1) * S->o.fault_every_s) {
                enum fault_kind kind = (enum fault_kind)(k % FAULT_COUNT);
                fault_engine = (int)((k / FAULT_COUNT + k) % S->o.n_engines);
                static const char *const fields[FAULT_COUNT] = {
                    [FAULT_FAIL] = "\"fail_next\":1000000",
                    [FAULT_SLOW] = "\"slow_factor\":4",
                    [FAULT_HANG] = "\"hang_ms\":600000",
                    [FAULT_FLAKY] = "\"fail_next\":3",
                };
                set_fault(S, S->o.engines[fault_engine], fields[kind]);
                pthread_mutex_lock(&c->mu);
                c->faults[kind]++;
                pthread_mutex_unlock(&c->mu);
                /* a flaky engine clears itself (three failed stages); the rest are held */
                active = kind != FAULT_FLAKY;
                clear_at = t + (kind == FAULT_HANG ? hold * 0.6 : hold);
                k++;
            }
        }
        usleep(100000);
    }
    /* no fault outlives the load */
    for (int e = 0; e < S->o.n_engines; e++) set_fault(S, S->o.engines[e], "");
    if (!middle_taken) c->rss_middle_kb = proc_status_kb(S->pid, "VmRSS");
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * the load: connections, requests, timers
 */

enum cstate {
    CS_FREE,
    CS_CONNECTING,
    CS_SENDING,   /* writing the request (or the part a cut client sends) */
    CS_SLOW,      /* writing one byte per timer tick */
    CS_ABANDON,   /* whole request sent; closes at its timer unless answered first */
    CS_WAIT,      /* request sent, waiting for the response */
    CS_IDLE,      /* keep-alive, in the pool; any byte arriving now is a second answer */
    CS_CLOSE_WAIT /* answered with Connection: close; waiting for the server's close */
};

struct conn {
    int fd;
    uint32_t gen;
    enum cstate state;
    /* the request */
    uint64_t seq;
    enum ep ep;
    enum mode mode;
    int items;
    bool keep, reused, closed_loop;
    int64_t intended_ns;
    size_t stop_at; /* bytes to send */
    struct hs_bench_buf out;
    size_t out_off;
    int64_t slow_gap_ns;
    /* the response */
    struct hs_bench_buf in;
    struct hs_soak_resp resp;
    int64_t idle_since_ns;
};

enum timer_kind { T_SLOW_BYTE, T_ABANDON, T_TIMEOUT, T_CLOSE_WAIT };

struct timer {
    int64_t at;
    uint32_t conn, gen;
    enum timer_kind kind;
};

struct load {
    struct soak *S;
    int ep_fd;
    struct conn *conns;
    unsigned n_conns;
    unsigned *free_list, n_free;
    unsigned *idle, n_idle;
    struct timer *heap;
    size_t n_heap, cap_heap;
    unsigned outstanding, slow_active;
    uint64_t seq;
    struct hs_bench_rng rng;
    struct hs_bench_words words;
    struct hs_bench_buf text, body;
    struct hs_soak_idset ids;
    /* closed loop */
    bool closed_loop;
    unsigned closed_pending; /* closed-loop clients waiting to send their next request */
    int64_t cap_window_start, cap_window_end;
    uint64_t cap_ok;
};

static void heap_push(struct load *L, struct timer t)
{
    if (L->n_heap == L->cap_heap) {
        size_t cap = L->cap_heap ? L->cap_heap * 2 : 4096;
        struct timer *nh = hs_realloc(L->heap, cap * sizeof *nh);
        if (!nh) {
            fprintf(stderr, "hetsoak: out of memory (timers)\n");
            exit(2);
        }
        L->heap = nh;
        L->cap_heap = cap;
    }
    size_t i = L->n_heap++;
    while (i && L->heap[(i - 1) / 2].at > t.at) {
        L->heap[i] = L->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    L->heap[i] = t;
}

static struct timer heap_pop(struct load *L)
{
    struct timer top = L->heap[0], last = L->heap[--L->n_heap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l >= L->n_heap) break;
        m = l + 1 < L->n_heap && L->heap[l + 1].at < L->heap[l].at ? l + 1 : l;
        if (L->heap[m].at >= last.at) break;
        L->heap[i] = L->heap[m];
        i = m;
    }
    if (L->n_heap) L->heap[i] = last;
    return top;
}

static void timer_add(struct load *L, struct conn *c, enum timer_kind kind, int64_t at)
{
    heap_push(
        L, (struct timer){.at = at, .conn = (uint32_t)(c - L->conns), .gen = c->gen, .kind = kind});
}

static void conn_watch(struct load *L, struct conn *c, uint32_t events, bool add)
{
    struct epoll_event ev = {.events = events,
                             .data.u64 = ((uint64_t)c->gen << 32) | (uint64_t)(c - L->conns)};
    epoll_ctl(L->ep_fd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev);
}

static bool request_open(const struct conn *c)
{
    return c->state == CS_CONNECTING || c->state == CS_SENDING || c->state == CS_SLOW ||
           c->state == CS_ABANDON || c->state == CS_WAIT;
}

static void launch_closed(struct load *L);

/* Closes the connection; its slot goes back to the free list. rst: abort (RST, no FIN). */
static void conn_close(struct load *L, struct conn *c, bool rst)
{
    if (c->state == CS_FREE) return;
    bool was_open = request_open(c);
    bool closed_loop = c->closed_loop && was_open;
    if (c->state == CS_SLOW) L->slow_active--;
    if (was_open) L->outstanding--;
    if (c->state == CS_IDLE) {
        for (unsigned i = 0; i < L->n_idle; i++)
            if (L->idle[i] == (unsigned)(c - L->conns)) {
                L->idle[i] = L->idle[--L->n_idle];
                break;
            }
    }
    if (rst && c->fd >= 0) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = CS_FREE;
    c->gen++;
    L->free_list[L->n_free++] = (unsigned)(c - L->conns);
    if (closed_loop) launch_closed(L);
}

static void lost(struct load *L, struct conn *c, uint64_t *counter, const char *why)
{
    *counter += 1;
    note(L->S->c.first_problem, sizeof L->S->c.first_problem,
         "request %" PRIu64 " (%s, %s%s) never answered: %s", c->seq, hs__soak_ep_name[c->ep],
         hs__soak_mode_name[c->mode], c->reused ? ", reused connection" : "", why);
    conn_close(L, c, false);
}

/* Builds the request bytes: a JSON body of c->items generated texts, and the head. */
static int build_request(struct load *L, struct conn *c, bool long_texts, bool as_string)
{
    struct hs_bench_buf *b = &L->body;
    b->len = 0;
    static const char *const field[EP_COUNT] = {"input", "inputs", "inputs", "inputs"};
    int rc = hs_bench_buf_puts(b, "{\"") || hs_bench_buf_puts(b, field[c->ep]) ||
             hs_bench_buf_puts(b, as_string ? "\":" : "\":[");
    for (int i = 0; i < c->items && !rc; i++) {
        uint32_t words =
            long_texts ? hs_bench_rng_range(&L->rng, 40, 128) : hs_bench_rng_range(&L->rng, 3, 24);
        L->text.len = 0;
        rc = hs_bench_text_gen(&L->words, &L->rng, words, &L->text) ||
             (i && hs_bench_buf_puts(b, ",")) || hs_bench_buf_append_json_str(b, L->text.p);
    }
    if (!rc && !as_string) rc = hs_bench_buf_puts(b, "]");
    if (!rc && (c->ep == EP_TEI || c->ep == EP_PREDICT))
        rc = hs_bench_buf_puts(b, ",\"truncate\":true");
    if (!rc) rc = hs_bench_buf_puts(b, "}");
    if (rc) return -1;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                     "X-Request-Id: soak-%" PRIu64 "\r\nContent-Length: %zu\r\n%s\r\n",
                     hs__soak_ep_path[c->ep], L->S->port, c->seq, b->len,
                     c->keep ? "" : "Connection: close\r\n");
    c->out.len = 0;
    if (hs_bench_buf_append(&c->out, head, (size_t)n) || hs_bench_buf_append(&c->out, b->p, b->len))
        return -1;
    c->out_off = 0;
    c->stop_at = c->out.len;
    if (c->mode == MODE_CUT_BODY) c->stop_at = (size_t)n + b->len / 2;
    if (c->mode == MODE_SLOW) {
        /* one byte at a time, the whole request within about a second */
        int64_t gap = (int64_t)NS_PER_S / (int64_t)c->out.len;
        c->slow_gap_ns = gap > 10 * NS_PER_MS ? 10 * NS_PER_MS : gap;
    }
    return 0;
}

static void send_more(struct load *L, struct conn *c);

/* Starts one request; returns false when it could not be sent (client cap). */
static bool launch(struct load *L, enum mode mode, bool closed_loop, int64_t intended_ns)
{
    struct soak *S = L->S;
    if (L->outstanding >= S->o.max_inflight || (!L->n_free && !L->n_idle)) {
        S->c.not_sent_cap++;
        return false;
    }
    if (mode == MODE_SLOW && L->slow_active >= SLOW_MAX) mode = MODE_NORMAL;
    struct conn *c = NULL;
    bool keep = mode == MODE_NORMAL && hs_bench_rng_uniform(&L->rng) < 0.6;
    int64_t now = hs_now_ns();
    /* a keep-alive connection idle for less than a second, newest first */
    while (mode == MODE_NORMAL && L->n_idle) {
        struct conn *ic = &L->conns[L->idle[L->n_idle - 1]];
        if (now - ic->idle_since_ns < NS_PER_S) {
            c = ic;
            L->n_idle--;
            break;
        }
        conn_close(L, ic, false);
    }
    if (!c && !L->n_free) { /* every slot is an idle connection: recycle the oldest */
        conn_close(L, &L->conns[L->idle[0]], false);
    }
    bool reused = c != NULL;
    if (!c) c = &L->conns[L->free_list[--L->n_free]];
    c->gen++;
    c->seq = ++L->seq;
    double u = hs_bench_rng_uniform(&L->rng) * 100.0, acc = 0;
    c->ep = EP_TOKENIZE;
    for (int e = 0; e < EP_COUNT; e++)
        if (u < (acc += hs__soak_ep_weight[e])) {
            c->ep = (enum ep)e;
            break;
        }
    double v = hs_bench_rng_uniform(&L->rng);
    c->items = v < 0.6 ? 1 : v < 0.85 ? 2 : 4;
    /* one request in ten long (> 32 tokens: the long route); the two routes' engines are then
     * about equally busy */
    bool long_texts = hs_bench_rng_uniform(&L->rng) < 0.1;
    bool as_string = c->items == 1 && hs_bench_rng_uniform(&L->rng) < 0.5;
    c->mode = mode;
    c->keep = keep;
    c->reused = reused;
    c->closed_loop = closed_loop;
    c->intended_ns = intended_ns;
    c->in.len = 0;
    if (build_request(L, c, long_texts, as_string)) {
        fprintf(stderr, "hetsoak: out of memory (request)\n");
        exit(2);
    }
    S->c.sent[c->ep][mode]++;
    atomic_fetch_add(&S->sent_total, 1);
    L->outstanding++;
    if (reused) {
        S->c.reused++;
        c->state = CS_SENDING;
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        timer_add(L, c, T_TIMEOUT, now + S->o.timeout_ms * NS_PER_MS);
        send_more(L, c);
        return true;
    }
    c->fd = loopback_socket(S->port, true);
    S->c.connects++;
    if (c->fd < 0) {
        c->state = CS_CONNECTING; /* so that the close accounts for it */
        lost(L, c, &S->c.lost_connect, strerror(errno));
        return true;
    }
    c->state = CS_CONNECTING;
    conn_watch(L, c, EPOLLOUT | EPOLLIN | EPOLLRDHUP, true);
    timer_add(L, c, T_TIMEOUT, now + S->o.timeout_ms * NS_PER_MS);
    return true;
}

/* A closed-loop client is done with its request: it sends the next one from the main loop
 * (not from here, deep in a callback). */
static void launch_closed(struct load *L)
{
    if (L->closed_loop) L->closed_pending++;
}

/* The whole request (or the part this client sends) is out: what next. */
static void sent_all(struct load *L, struct conn *c)
{
    int64_t now = hs_now_ns();
    switch (c->mode) {
    case MODE_CUT_BODY:
        L->S->c.abandoned[MODE_CUT_BODY]++;
        conn_close(L, c, hs_bench_rng_uniform(&L->rng) < 0.5);
        return;
    case MODE_ABANDON: {
        /* half close at once (likely while queued), half within 50 ms (likely mid-batch) */
        double u = hs_bench_rng_uniform(&L->rng);
        if (u < 0.5) {
            L->S->c.abandoned[MODE_ABANDON]++;
            conn_close(L, c, u < 0.25);
            return;
        }
        c->state = CS_ABANDON;
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        timer_add(L, c, T_ABANDON, now + (int64_t)(u * 100.0 * NS_PER_MS) - 50 * NS_PER_MS);
        return;
    }
    default:
        if (c->state == CS_SLOW) L->slow_active--;
        c->state = CS_WAIT;
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        return;
    }
}

static void send_more(struct load *L, struct conn *c)
{
    if (c->mode == MODE_SLOW) {
        if (c->state != CS_SLOW) {
            c->state = CS_SLOW;
            L->slow_active++;
            conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        }
        ssize_t w = send(c->fd, c->out.p + c->out_off, 1, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
            lost(L, c, &L->S->c.lost_io, strerror(errno));
            return;
        }
        if (w == 1) c->out_off++;
        if (c->out_off == c->stop_at)
            sent_all(L, c);
        else
            timer_add(L, c, T_SLOW_BYTE, hs_now_ns() + c->slow_gap_ns);
        return;
    }
    c->state = CS_SENDING;
    while (c->out_off < c->stop_at) {
        ssize_t w = send(c->fd, c->out.p + c->out_off, c->stop_at - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) {
            conn_watch(L, c, EPOLLOUT | EPOLLIN | EPOLLRDHUP, false);
            return;
        }
        if (w < 0) {
            if (errno == ECONNRESET || errno == EPIPE) {
                /* the server closed: a reused keep-alive connection it had just closed, or a
                 * response (with a close) already sent; read what is there */
                lost(L, c, c->reused ? &L->S->c.lost_eof_reused : &L->S->c.lost_reset,
                     strerror(errno));
            } else {
                lost(L, c, &L->S->c.lost_io, strerror(errno));
            }
            return;
        }
        c->out_off += (size_t)w;
    }
    sent_all(L, c);
}

static void answered(struct load *L, struct conn *c)
{
    struct soak *S = L->S;
    struct counts *k = &S->c;
    const struct hs_soak_resp *r = &c->resp;
    int64_t now = hs_now_ns();
    k->answered[c->ep]++;
    k->status[r->status]++;
    if (c->state == CS_ABANDON) k->abandon_late++;
    if (!r->has_id) {
        k->no_id++;
        note(k->first_problem, sizeof k->first_problem, "request %" PRIu64 ": no X-Request-Id",
             c->seq);
    } else if (hs_soak_idset_add(&L->ids, r->id) == 0) {
        k->dup_ids++;
        note(k->first_problem, sizeof k->first_problem,
             "request %" PRIu64 ": response id %" PRIu64 " seen before", c->seq, r->id);
    }
    if (r->status == 200) {
        if (!hs_soak_body_ok((enum hs_soak_endpoint)c->ep, c->in.p + r->head_bytes,
                             (size_t)r->content_bytes, c->items)) {
            k->bad_body++;
            note(k->first_problem, sizeof k->first_problem,
                 "request %" PRIu64 " (%s, %d inputs): 200 with a body of the wrong shape: %.80s",
                 c->seq, hs__soak_ep_name[c->ep], c->items, c->in.p + r->head_bytes);
        }
        hs_soak_hist_add(&k->lat[c->ep], (double)(now - c->intended_ns) / 1e6);
        if (c->closed_loop && now >= L->cap_window_start && now < L->cap_window_end) L->cap_ok++;
    }
    if (c->in.len > r->total_bytes) {
        k->dup_extra_bytes++;
        note(k->first_problem, sizeof k->first_problem,
             "request %" PRIu64 ": %zu bytes after its response", c->seq,
             c->in.len - r->total_bytes);
        conn_close(L, c, false);
        return;
    }
    bool closed_loop = c->closed_loop;
    if (c->state == CS_SLOW) L->slow_active--;
    L->outstanding--;
    if (c->keep && !r->close && c->out_off == c->out.len && L->n_idle < L->S->o.idle_max) {
        c->state = CS_IDLE;
        c->idle_since_ns = now;
        c->in.len = 0;
        L->idle[L->n_idle++] = (unsigned)(c - L->conns);
        c->gen++; /* the request's timers are void */
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
    } else if (c->keep) {
        /* not reusable after all (the server said close, or the pool is full) */
        c->state = CS_CLOSE_WAIT; /* answered: the close below is not the request's */
        conn_close(L, c, false);
    } else {
        /* wait for the server's close: a byte before it is a second answer */
        c->state = CS_CLOSE_WAIT;
        c->in.len = 0; /* what arrives from now on follows the response */
        c->gen++;
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        timer_add(L, c, T_CLOSE_WAIT, now + 2 * NS_PER_S);
    }
    if (closed_loop) launch_closed(L);
}

static void on_readable(struct load *L, struct conn *c)
{
    struct counts *k = &L->S->c;
    bool peer_closed = false;
    for (;;) {
        if (hs_bench_buf_reserve(&c->in, 65536)) {
            fprintf(stderr, "hetsoak: out of memory (response)\n");
            exit(2);
        }
        ssize_t got = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, 0);
        if (got > 0) {
            c->in.len += (size_t)got;
            continue;
        }
        int err = got < 0 ? errno : 0;
        if (got < 0 && err == EAGAIN) break;
        /* the peer closed (0) or reset */
        if (c->state == CS_IDLE || c->state == CS_CLOSE_WAIT) {
            if (c->in.len) {
                if (c->state == CS_IDLE)
                    k->dup_idle_bytes++;
                else
                    k->dup_extra_bytes++;
                note(k->first_problem, sizeof k->first_problem,
                     "request %" PRIu64 ": %zu bytes after its response", c->seq, c->in.len);
            }
            conn_close(L, c, false);
            return;
        }
        peer_closed = true;
        if (c->in.len) break; /* parse what came first */
        if (err == 0)
            lost(L, c, c->reused ? &k->lost_eof_reused : &k->lost_eof, "connection closed");
        else
            lost(L, c, c->reused ? &k->lost_eof_reused : &k->lost_reset, strerror(err));
        return;
    }
    if (c->state == CS_IDLE || c->state == CS_CLOSE_WAIT) {
        if (c->in.len) {
            if (c->state == CS_IDLE)
                k->dup_idle_bytes++;
            else
                k->dup_extra_bytes++;
            note(k->first_problem, sizeof k->first_problem,
                 "request %" PRIu64 ": %zu bytes after its response: %.60s", c->seq, c->in.len,
                 c->in.p);
            conn_close(L, c, false);
        }
        return;
    }
    char msg[128];
    enum hs_soak_parse p = hs_soak_resp_parse(c->in.p, c->in.len, &c->resp, msg, sizeof msg);
    if (p == HS_SOAK_PARSE_MALFORMED) {
        k->malformed++;
        note(k->first_problem, sizeof k->first_problem,
             "request %" PRIu64 ": malformed response: %s", c->seq, msg);
        conn_close(L, c, false);
        return;
    }
    if (p == HS_SOAK_PARSE_MORE) {
        if (peer_closed) lost(L, c, &k->lost_eof, "closed in the middle of the response");
        return;
    }
    answered(L, c);
}

static void on_timer(struct load *L, struct timer t)
{
    struct conn *c = &L->conns[t.conn];
    if (c->gen != t.gen || c->state == CS_FREE) return;
    switch (t.kind) {
    case T_SLOW_BYTE:
        if (c->state == CS_SLOW) send_more(L, c);
        break;
    case T_ABANDON:
        if (c->state == CS_ABANDON) {
            L->S->c.abandoned[MODE_ABANDON]++;
            conn_close(L, c, false);
        }
        break;
    case T_TIMEOUT:
        if (request_open(c)) lost(L, c, &L->S->c.lost_timeout, "no response within --timeout-ms");
        break;
    case T_CLOSE_WAIT:
        if (c->state == CS_CLOSE_WAIT) {
            L->S->c.close_wait_timeouts++;
            conn_close(L, c, false);
        }
        break;
    }
}

static void on_event(struct load *L, struct epoll_event *ev)
{
    uint32_t idx = (uint32_t)ev->data.u64, gen = (uint32_t)(ev->data.u64 >> 32);
    struct conn *c = &L->conns[idx];
    if (c->gen != gen || c->state == CS_FREE) return;
    if (c->state == CS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            lost(L, c, &L->S->c.lost_connect, strerror(err));
            return;
        }
        if (!(ev->events & EPOLLOUT)) return;
        conn_watch(L, c, EPOLLIN | EPOLLRDHUP, false);
        send_more(L, c);
        if (c->gen != gen || c->state == CS_FREE) return;
    } else if ((ev->events & EPOLLOUT) && c->state == CS_SENDING) {
        send_more(L, c);
        if (c->gen != gen || c->state == CS_FREE) return;
    }
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(L, c);
}

/* One pass of the event loop: timers due, then socket events, waiting at most until next_ns. */
static void loop_once(struct load *L, int64_t next_ns)
{
    int64_t now = hs_now_ns();
    while (L->n_heap && L->heap[0].at <= now) on_timer(L, heap_pop(L));
    int64_t until = next_ns;
    if (L->n_heap && L->heap[0].at < until) until = L->heap[0].at;
    int wait_ms = until <= now ? 0 : (int)((until - now + NS_PER_MS - 1) / NS_PER_MS);
    if (wait_ms > 100) wait_ms = 100;
    struct epoll_event evs[256];
    int n = epoll_wait(L->ep_fd, evs, 256, wait_ms);
    for (int i = 0; i < n; i++) on_event(L, &evs[i]);
}

static int load_init(struct load *L, struct soak *S)
{
    memset(L, 0, sizeof *L);
    L->S = S;
    L->n_conns = S->o.max_inflight + S->o.idle_max;
    L->conns = hs_calloc(L->n_conns, sizeof *L->conns);
    L->free_list = hs_calloc(L->n_conns, sizeof *L->free_list);
    L->idle = hs_calloc(L->n_conns, sizeof *L->idle);
    L->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (!L->conns || !L->free_list || !L->idle || L->ep_fd < 0) return -1;
    for (unsigned i = 0; i < L->n_conns; i++) {
        L->conns[i].fd = -1;
        L->free_list[L->n_free++] = L->n_conns - 1 - i;
    }
    hs_bench_rng_seed(&L->rng, S->o.seed);
    hs_bench_words_builtin(&L->words);
    return 0;
}

static void load_free(struct load *L)
{
    for (unsigned i = 0; i < L->n_conns; i++) {
        if (L->conns[i].state != CS_FREE) close(L->conns[i].fd);
        hs_bench_buf_free(&L->conns[i].out);
        hs_bench_buf_free(&L->conns[i].in);
    }
    hs_free(L->conns);
    hs_free(L->free_list);
    hs_free(L->idle);
    hs_free(L->heap);
    hs_bench_buf_free(&L->text);
    hs_bench_buf_free(&L->body);
    hs_soak_idset_free(&L->ids);
    if (L->ep_fd >= 0) close(L->ep_fd);
}

/* Waits until no request is open (every one answered, abandoned or timed out). */
static void load_drain(struct load *L, int64_t until_ns)
{
    while (L->outstanding && hs_now_ns() < until_ns) loop_once(L, hs_now_ns() + 100 * NS_PER_MS);
    /* the idle pool and connections waiting for a close */
    for (unsigned i = 0; i < L->n_conns; i++) {
        struct conn *c = &L->conns[i];
        if (c->state == CS_IDLE || c->state == CS_CLOSE_WAIT) conn_close(L, c, false);
    }
}

static void progress(struct soak *S, struct load *L, double factor, double rate)
{
    struct counts *k = &S->c;
    uint64_t ans = 0, lost = k->lost_eof + k->lost_eof_reused + k->lost_reset + k->lost_timeout +
                             k->lost_connect + k->lost_io;
    for (int e = 0; e < EP_COUNT; e++) ans += k->answered[e];
    fprintf(stderr,
            "[%6.1fs] sent %" PRIu64 "/%" PRIu64 "  load %.2fx (%.0f/s)  open %u  answered %" PRIu64
            " (200 %" PRIu64 ", 429 %" PRIu64 ", 500 %" PRIu64 ", 504 %" PRIu64 ")  lost %" PRIu64
            "  twice %" PRIu64 "\n",
            soak_since_s(S->t0), atomic_load(&S->sent_total), S->o.requests, factor, rate,
            L->outstanding, ans, k->status[200], k->status[429], k->status[500], k->status[504],
            lost, k->dup_extra_bytes + k->dup_idle_bytes + k->dup_ids);
}

static void run_load(struct soak *S, struct load *L)
{
    /* closed loop: capacity */
    atomic_store(&S->phase, PHASE_CAPACITY);
    int64_t now = hs_now_ns();
    L->closed_loop = true;
    double warm_s = S->o.capacity_s / 4;
    L->cap_window_start = now + (int64_t)(warm_s * 1e9);
    L->cap_window_end = L->cap_window_start + (int64_t)(S->o.capacity_s * 1e9);
    for (unsigned i = 0; i < S->o.concurrency; i++) launch(L, MODE_NORMAL, true, now);
    /* about a fifth of the requests at most: the open loop is the soak (with a fast server the
     * window ends early, after a quarter of its length) */
    uint64_t cap_max = S->o.requests / 5;
    while (hs_now_ns() < L->cap_window_end && !atomic_load(&S->server_gone)) {
        if (atomic_load(&S->sent_total) >= cap_max &&
            hs_now_ns() > L->cap_window_start + (int64_t)(S->o.capacity_s / 4 * 1e9)) {
            L->cap_window_end = hs_now_ns();
            break;
        }
        for (; L->closed_pending; L->closed_pending--) launch(L, MODE_NORMAL, true, hs_now_ns());
        loop_once(L, hs_now_ns() + 100 * NS_PER_MS);
    }
    L->closed_loop = false;
    double window_s = (double)(L->cap_window_end - L->cap_window_start) / 1e9;
    load_drain(L, hs_now_ns() + 60 * NS_PER_S);
    S->capacity_ok = L->cap_ok;
    S->capacity_rps = window_s > 0 ? (double)L->cap_ok / window_s : 1;
    S->capacity_window_s = window_s;
    if (S->capacity_rps < 1) S->capacity_rps = 1;
    S->rss_warm_kb = proc_status_kb(S->pid, "VmRSS");
    fprintf(stderr, "hetsoak: capacity %.0f req/s (closed loop, %u clients, %.1f s)\n",
            S->capacity_rps, S->o.concurrency, window_s);
    if (S->o.period_s <= 0 || S->o.fault_every_s <= 0) {
        /* about four swings and twenty faults over the expected length of the run */
        double expect_s = (double)S->o.requests / (1.75 * S->capacity_rps);
        if (S->o.period_s <= 0) S->o.period_s = fmin(fmax(expect_s / 4, 20), 300);
        if (S->o.fault_every_s <= 0) S->o.fault_every_s = fmin(fmax(expect_s / 20, 4), 60);
    }
    fprintf(stderr, "hetsoak: load 0.5x-3x of capacity, period %.0f s; a fault every %.0f s\n",
            S->o.period_s, S->o.fault_every_s);

    /* open loop, swinging load, faults from the control thread */
    S->load_start_ns = hs_now_ns();
    atomic_store(&S->phase, PHASE_LOAD);
    int64_t stop_ns = S->t0 + (int64_t)(S->o.max_s * 1e9) -
                      (int64_t)(fmin(120.0, S->o.max_s / 4) * 1e9); /* room to drain and stop */
    int64_t next = S->load_start_ns, next_progress = S->load_start_ns + 10 * NS_PER_S;
    double factor = 0.5, rate = S->capacity_rps * factor;
    while (atomic_load(&S->sent_total) < S->o.requests && !atomic_load(&S->server_gone)) {
        now = hs_now_ns();
        if (now >= stop_ns) {
            S->time_bound_hit = true;
            fprintf(stderr, "hetsoak: stopping the load: --max-s leaves no more time\n");
            break;
        }
        int burst = 0;
        while (next <= now && burst++ < 64 && atomic_load(&S->sent_total) < S->o.requests) {
            double u = hs_bench_rng_uniform(&L->rng), acc = 0;
            enum mode m = MODE_NORMAL;
            for (int i = 0; i < MODE_COUNT; i++)
                if (u < (acc += hs__soak_mode_weight[i])) {
                    m = (enum mode)i;
                    break;
                }
            launch(L, m, false, next);
            if (atomic_load(&S->sent_total) >= S->o.requests / 2)
                atomic_store(&S->mid_reached, true);
            factor = hs_soak_load_factor((double)(next - S->load_start_ns) / 1e9, S->o.period_s,
                                         0.5, 3.0);
            rate = S->capacity_rps * factor;
            next += (int64_t)(hs_bench_rng_exp(&L->rng, rate) * 1e9);
        }
        if (now >= next_progress) {
            progress(S, L, factor, rate);
            next_progress = now + 10 * NS_PER_S;
        }
        loop_once(L, next);
    }
    S->load_end_ns = hs_now_ns();
    atomic_store(&S->mid_reached, true);
    atomic_store(&S->phase, PHASE_DRAIN);
}

/* ---------------------------------------------------------------------------------------------
 * main
 */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hetsoak [options] -- SERVER-COMMAND...\n"
            "Soak test: starts SERVER-COMMAND (it must print \"listening on 127.0.0.1:PORT\"),\n"
            "loads it with faults and misbehaving clients, checks that nothing is lost.\n"
            "  --requests N          requests to send (default 1000000)\n"
            "  --max-s S             hard bound on the whole run, seconds (default 3600)\n"
            "  --token T             admin bearer token (default: $HETSOAK_TOKEN)\n"
            "  --engines A,B         engines to inject faults into (default: none)\n"
            "  --failover-cap R      the routes' failover ratio_max, checked at every sample\n"
            "  --rss-growth-max X    end RSS / middle RSS bound (default 1.2)\n"
            "  --capacity-s S        closed-loop capacity measurement (default 8)\n"
            "  --concurrency N       closed-loop clients (default 32)\n"
            "  --max-inflight N      open requests at most; more arrivals are not sent and are\n"
            "                        counted (default 768: with 64 idle keep-alive connections,\n"
            "                        well under the ~1020 connections microhttpd takes)\n"
            "  --timeout-ms MS       a request unanswered this long is lost (default 30000)\n"
            "  --period-s S          load swing period (default: a quarter of the run)\n"
            "  --fault-every-s S     time between faults (default: a twentieth of the run)\n"
            "  --seed N              RNG seed (default 1)\n"
            "  --out DIR             summary.txt, summary.json, server.log (default .)\n"
            "exit status: 0 every invariant held, 1 one failed, 2 usage or start-up error\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.requests = 1000000,
                       .max_s = 3600,
                       .capacity_s = 8,
                       .rss_growth_max = 1.2,
                       .failover_cap = 1.0,
                       .concurrency = 32,
                       .max_inflight = 768,
                       .idle_max = 64,
                       .timeout_ms = 30000,
                       .seed = 1,
                       .out = "."};
    static const struct option lo[] = {{"requests", 1, 0, 'n'},     {"max-s", 1, 0, 'm'},
                                       {"token", 1, 0, 't'},        {"engines", 1, 0, 'e'},
                                       {"failover-cap", 1, 0, 'f'}, {"rss-growth-max", 1, 0, 'r'},
                                       {"capacity-s", 1, 0, 'c'},   {"concurrency", 1, 0, 'C'},
                                       {"max-inflight", 1, 0, 'i'}, {"timeout-ms", 1, 0, 'T'},
                                       {"period-s", 1, 0, 'p'},     {"fault-every-s", 1, 0, 'F'},
                                       {"seed", 1, 0, 's'},         {"out", 1, 0, 'o'},
                                       {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
        switch (ch) {
        case 'n':
            o->requests = strtoull(optarg, NULL, 10);
            break;
        case 'm':
            o->max_s = atof(optarg);
            break;
        case 't':
            o->token = optarg;
            break;
        case 'e': {
            char *s = optarg, *tok;
            while ((tok = strsep(&s, ",")) && o->n_engines < ENGINES_MAX)
                if (*tok) snprintf(o->engines[o->n_engines++], sizeof o->engines[0], "%s", tok);
            break;
        }
        case 'f':
            o->failover_cap = atof(optarg);
            break;
        case 'r':
            o->rss_growth_max = atof(optarg);
            break;
        case 'c':
            o->capacity_s = atof(optarg);
            break;
        case 'C':
            o->concurrency = (unsigned)atoi(optarg);
            break;
        case 'i':
            o->max_inflight = (unsigned)atoi(optarg);
            break;
        case 'T':
            o->timeout_ms = atol(optarg);
            break;
        case 'p':
            o->period_s = atof(optarg);
            break;
        case 'F':
            o->fault_every_s = atof(optarg);
            break;
        case 's':
            o->seed = strtoull(optarg, NULL, 10);
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (!o->token) o->token = getenv("HETSOAK_TOKEN"); /* kept out of the process list */
    if (o->token && !*o->token) o->token = NULL;
    if (optind >= argc) {
        fprintf(stderr, "hetsoak: no server command after --\n");
        usage(stderr);
        return -1;
    }
    o->server_argv = argv + optind;
    if (!o->requests || o->max_s < 10 || o->capacity_s <= 0 || !o->concurrency ||
        o->concurrency > o->max_inflight || o->max_inflight < 8 || o->timeout_ms < 1000 ||
        o->rss_growth_max < 1) {
        fprintf(stderr, "hetsoak: an option is out of range (see --help)\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct soak soak;
    struct soak *S = &soak;
    if (parse_args(argc, argv, &S->o)) return 2;
    g_soak = S;
    signal(SIGPIPE, SIG_IGN);
    snprintf(S->out_dir, sizeof S->out_dir, "%s", S->o.out);
    mkdir(S->out_dir, 0755);
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)ceil(S->o.max_s));
    pthread_mutex_init(&S->ctl.mu, NULL);
    S->ctl.rss_every_s = 2;
    if (spawn_server(S)) return 2;
    fprintf(stderr, "hetsoak: server pid %d on 127.0.0.1:%d; output in %s\n", (int)S->pid, S->port,
            S->out_dir);
    S->rss_start_kb = proc_status_kb(S->pid, "VmRSS");
    struct load L;
    if (load_init(&L, S)) {
        fprintf(stderr, "hetsoak: out of memory\n");
        kill(S->pid, SIGKILL);
        return 2;
    }
    pthread_create(&S->ctl.thread, NULL, control_main, S);
    run_load(S, &L);
    pthread_join(S->ctl.thread, NULL);
    /* faults end (the control thread cleared its last one); wait for every open request */
    load_drain(&L, hs_now_ns() + (S->o.timeout_ms + 5000) * NS_PER_MS);
    load_free(&L);
    atomic_store(&S->phase, PHASE_DONE);
    int st;
    if (!S->exited && waitpid(S->pid, &st, WNOHANG) == S->pid) { /* died since the last look */
        S->exited = true;
        S->exit_status = st;
        atomic_store(&S->server_gone, true);
    }
    if (!S->exited) {
        sleep(1);
        S->health_status = http_call(S->port, "GET", "/health", NULL, NULL, NULL, 10000);
        /* the final counts: the server counts a request once its response is on the wire */
        for (int i = 0; i < 20; i++) {
            hs_free(S->metrics_final);
            S->metrics_final = NULL;
            http_call(S->port, "GET", "/metrics", NULL, NULL, &S->metrics_final, 10000);
            if (!S->metrics_final) break;
            uint64_t ans_model = 0;
            for (int e = 0; e < EP_COUNT; e++)
                if (e != EP_TOKENIZE) ans_model += S->c.answered[e];
            if (hs_soak_metric_sum(S->metrics_final, "hetserve_requests_total", NULL, NULL) >=
                (double)ans_model)
                break;
            usleep(250000);
        }
        if (S->metrics_final) sample_metrics(S);
        S->rss_end_kb = proc_status_kb(S->pid, "VmRSS");
        S->rss_hwm_kb = proc_status_kb(S->pid, "VmHWM");
        int64_t t = hs_now_ns();
        kill(S->pid, SIGTERM);
        S->sigterm_s = -1;
        while (soak_since_s(t) < 40) {
            if (waitpid(S->pid, &st, WNOHANG) == S->pid) {
                S->exited = true;
                S->exit_status = st;
                S->sigterm_s = soak_since_s(t);
                break;
            }
            usleep(20000);
        }
        if (!S->exited) {
            kill(S->pid, SIGKILL);
            waitpid(S->pid, NULL, 0);
        }
    } else {
        S->sigterm_s = -1;
    }
    alarm(0);
    int rc = hs__soak_report(S);
    hs_free(S->metrics_final);
    return rc;
}
