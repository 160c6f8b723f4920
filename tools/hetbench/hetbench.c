/* hetbench — HTTP load generator for hetserve (and any embeddings server speaking the OpenAI or
 * TEI request shape), loopback targets only.
 *
 * Open loop (--rate): arrivals follow a seeded Poisson process and never wait for responses;
 * latency is measured from the *intended* send time, so a slow server or a late event loop shows
 * up as latency instead of silently lowering the offered load (no coordinated omission).
 * Closed loop (--concurrency): N clients, each sending its next request when the previous one
 * completes.
 *
 * One thread, one libcurl multi handle, HTTP/1.1 keep-alive connections reused from curl's
 * connection cache. Every run is bounded by a request count and a duration, and in-flight
 * requests by --timeout-ms, so it always stops by itself.
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/status.h"
#include "ab.h"
#include "images.h"
#include "replay.h"
#include "stats.h"
#include "workload.h"

#define DEFAULT_URL        "http://127.0.0.1:8080"
#define DEFAULT_LENGTHS    "100:8-32"
#define REQUESTS_HARD_MAX  10000000u
#define RESPONSE_MAX_BYTES (64u << 20)
#define AB_HEADERS_MAX     8

enum endpoint { ENDPOINT_OPENAI, ENDPOINT_TEI };

struct opts {
    const char *url, *model, *lengths, *texts, *words, *priority, *csv;
    const char *replay, *vocab; /* hetbench replay FILE: the capture, the model's vocab.txt */
    const char *images;         /* --images DIR: bodies are its JPEG / PNG files */
    double speed;
    /* hetbench ab: B's base URL, extra request headers per side, bootstrap resamples */
    int ab;
    const char *url_b;
    const char *ab_hdr[2][AB_HEADERS_MAX];
    int n_ab_hdr[2];
    unsigned resamples;
    /* --tenant NAME[:W]=KEY: the tenants' mix ("NAME[:W],...") and their API keys */
    char tenant_spec[HS_BENCH_MIX_MAX * (HS_BENCH_NAME_MAX + 16)];
    const char *tenant_key[HS_BENCH_MIX_MAX];
    int n_tenants;
    enum endpoint endpoint;
    double rate, duration_s, warmup_s;
    unsigned concurrency, batch_items, max_inflight;
    uint64_t requests, seed;
    long timeout_ms;
    int json, quiet;
};

struct slot {
    CURL *easy;
    struct hs_bench_buf body, resp;
    enum hs_bench_body_kind kind; /* the body's Content-Type */
    char st_hdr[1024];
    size_t rec;          /* index into bench.rec */
    int64_t intended_ns; /* absolute monotonic ns the request was meant to leave */
    struct slot *next_free;
};

struct bench {
    struct opts o;
    CURLM *multi;
    char *target_url;           /* full URL of the endpoint */
    struct curl_slist *resolve; /* pins "localhost" to 127.0.0.1 */
    /* [body kind][priority][tenant] */
    struct curl_slist *hdrs[HS_BENCH_BODY_KINDS][HS_BENCH_MIX_MAX][HS_BENCH_MIX_MAX];
    struct hs_bench_rng rng;
    struct hs_bench_lengths lengths;
    struct hs_bench_mix prio, tenants;
    struct hs_bench_words words;
    struct hs_bench_corpus corpus;
    int use_corpus;
    struct hs_bench_images images; /* --images */
    struct hs_bench_replay rp;     /* hetbench replay */
    char *class_url[HS_BENCH_MIX_MAX];
    /* hetbench ab: B's URLs, each side's headers, each record's 2xx response body */
    char *target_url_b;
    char *class_url_b[HS_BENCH_MIX_MAX];
    struct curl_slist *ab_hdrs[2];
    struct hs_bench_buf *ab_body; /* [2 * rp.n], by record, until both answers are compared */
    struct ab_quality {
        double cosine; /* NAN: none */
        int8_t agree;  /* -1: no labels */
        uint8_t done;
    } * ab_q;             /* [rp.n], by request */
    size_t ab_unreadable; /* 2xx answers that hold no rows */
    struct hs_tokenizer *tok;
    struct hs_bench_st_names st_names;

    struct hs_bench_record *rec;
    size_t n_rec, cap_rec;
    struct slot *free_slots;
    unsigned inflight;
    long connects;
    int64_t start_ns, end_ns, warmup_ns, last_done_ns;
    char first_error[256];
    int stopping;
    /* the event loop: libcurl tells which sockets to watch (socket callback) and when to call it
     * back (timer callback); one epoll set, so each wake-up costs what happened, not the number
     * of connections in flight */
    int epfd;
    int64_t curl_due_ns; /* -1 = no timer */
};

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    interrupted = sig;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: hetbench (--rate R | --concurrency N) [options]\n"
        "Load generator for embeddings servers on the local machine (loopback targets only).\n"
        "\n"
        "load:\n"
        "  --rate R            open loop: Poisson arrivals at R req/s (never wait for replies)\n"
        "  --concurrency N     closed loop: N clients sending back-to-back\n"
        "  --duration S        stop sending after S seconds (default 10)\n"
        "  --requests N        stop sending after N requests (default and max %u)\n"
        "  --warmup S          leave requests sent in the first S seconds out of the stats\n"
        "  --max-inflight N    open loop: arrivals beyond N in flight are dropped and counted\n"
        "                      (default 1024)\n"
        "  --timeout-ms MS     client-side limit per request (default 30000)\n"
        "request:\n"
        "  --url URL           server base URL (default " DEFAULT_URL "); a path, when given,\n"
        "                      replaces the endpoint's default path\n"
        "  --endpoint E        openai (POST /v1/embeddings) or tei (POST /embed); default openai\n"
        "  --model NAME        \"model\" field for openai (default all-MiniLM-L6-v2)\n"
        "  --batch-items K     texts per request (default 1)\n"
        "  --lengths SPEC      generated texts: WEIGHT:MIN-MAX words per class, comma-separated,\n"
        "                      optionally named: short=80:8-32,long=20:200-256 "
        "(default " DEFAULT_LENGTHS ")\n"
        "  --words FILE        word list for generated texts (default: built-in English words)\n"
        "  --texts FILE        texts from FILE, one per line; \"tag<TAB>text\" sets the class\n"
        "  --images DIR        bodies: DIR's JPEG and PNG files (drawn uniformly), raw bytes with\n"
        "                      their Content-Type, to POST /v1/ocr unless the URL has a path\n"
        "  --priority MIX      X-Priority header mix: interactive, or interactive:70,batch:30\n"
        "  --tenant NAME[:W]=KEY  send as this tenant (Authorization: Bearer KEY) a share W\n"
        "                      (default 1) of the requests; repeated for several tenants, each\n"
        "                      reported on its own (by NAME; the key is never printed)\n"
        "  --seed N            RNG seed (default 1); same seed, same workload\n"
        "output:\n"
        "  --csv FILE          one row per request, then a '# summary' row\n"
        "  --json              JSON summary on stdout instead of the table\n"
        "  --quiet             no progress line on stderr (none either when stderr is not a tty)\n"
        "\n"
        "usage: hetbench replay FILE [--speed K] [--vocab FILE] [--url URL] [output options]\n"
        "Sends the requests of a hetserve capture file (server.capture, docs/CAPTURE.md) open\n"
        "loop at their captured arrival times divided by K (default 1), to the captured endpoints\n"
        "with their priorities and deadlines: their texts when captured, else texts generated to\n"
        "the captured token lengths with the WordPiece vocabulary --vocab (default\n"
        "$HS_MODEL_DIR/vocab.txt, or models/all-MiniLM-L6-v2/vocab.txt); /v1/ocr requests with\n"
        "their captured bodies and Content-Type. Also --timeout-ms, --max-inflight, --seed.\n"
        "\n"
        "usage: hetbench ab --a URL --b URL --trace FILE [--a-header H] [--b-header H] [options]\n"
        "Sends every request of a capture file (as replay does) to A and to B at the same\n"
        "intended time, open loop, alternating which leaves first, and reports per class the\n"
        "count, P50/P99 latency of each side and the ratio B/A with 95%% bootstrap intervals\n"
        "(--resamples N, default 1000, --seed), errors by status, and the quality diff: cosine\n"
        "of A's vs B's embeddings per request (min, P1, mean) and /predict label agreement.\n"
        "--header H adds 'Name: value' to both sides, --a-header / --b-header to one (compare\n"
        "two routes of one server). --b defaults to --a. Also --speed, --vocab, --timeout-ms,\n"
        "--max-inflight, --json. Without --trace, the trace is the generated workload\n"
        "(--rate with --duration or --requests, --lengths/--texts, --batch-items, --endpoint,\n"
        "--seed), drawn once before the run.\n"
        "exit status: 0 ok, 1 no request succeeded, 2 bad usage or setup, 130 interrupted\n",
        REQUESTS_HARD_MAX);
}

static int fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "hetbench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int add_tenant(struct opts *o, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : 0;
    if (!eq || !len || !eq[1] || strpbrk(eq + 1, "\r\n") || len >= HS_BENCH_NAME_MAX + 16)
        return fail("--tenant is NAME[:W]=KEY, not '%s'", arg);
    if (o->n_tenants == HS_BENCH_MIX_MAX) return fail("%s", "too many --tenant");
    size_t at = strlen(o->tenant_spec);
    snprintf(o->tenant_spec + at, sizeof o->tenant_spec - at, "%s%.*s", at ? "," : "", (int)len,
             arg);
    o->tenant_key[o->n_tenants++] = eq + 1;
    return 0;
}

static int add_ab_header(struct opts *o, int side, const char *h)
{
    const char *colon = strchr(h, ':');
    if (!colon || colon == h || strpbrk(h, "\r\n"))
        return fail("a header is 'Name: value', not '%s'", h);
    if (o->n_ab_hdr[side] == AB_HEADERS_MAX) return fail("%s", "too many headers for one side");
    o->ab_hdr[side][o->n_ab_hdr[side]++] = h;
    return 0;
}

/* mode: 0 load, 1 replay, 2 ab */
static int parse_opts(int argc, char **argv, struct opts *o, int mode)
{
    static const struct option longopts[] = {
        {"url", 1, 0, 'u'},
        {"endpoint", 1, 0, 'e'},
        {"model", 1, 0, 'm'},
        {"rate", 1, 0, 'r'},
        {"concurrency", 1, 0, 'c'},
        {"duration", 1, 0, 'd'},
        {"requests", 1, 0, 'n'},
        {"warmup", 1, 0, 'W'},
        {"max-inflight", 1, 0, 'I'},
        {"timeout-ms", 1, 0, 'T'},
        {"batch-items", 1, 0, 'k'},
        {"lengths", 1, 0, 'L'},
        {"words", 1, 0, 'w'},
        {"texts", 1, 0, 'f'},
        {"priority", 1, 0, 'p'},
        {"seed", 1, 0, 's'},
        {"csv", 1, 0, 'C'},
        {"json", 0, 0, 'j'},
        {"quiet", 0, 0, 'q'},
        {"help", 0, 0, 'h'},
        {"speed", 1, 0, 'S'},
        {"vocab", 1, 0, 'V'},
        {"a", 1, 0, 'u'},
        {"b", 1, 0, 'B'},
        {"trace", 1, 0, 't'},
        {"header", 1, 0, 'H'},
        {"a-header", 1, 0, '1'},
        {"b-header", 1, 0, '2'},
        {"resamples", 1, 0, 'R'},
        {"tenant", 1, 0, 'K'},
        {"images", 1, 0, 'G'},
        {0, 0, 0, 0},
    };
    *o = (struct opts){.url = DEFAULT_URL,
                       .model = "all-MiniLM-L6-v2",
                       .lengths = DEFAULT_LENGTHS,
                       .duration_s = 10,
                       .requests = REQUESTS_HARD_MAX,
                       .batch_items = 1,
                       .max_inflight = 1024,
                       .timeout_ms = 30000,
                       .speed = 1,
                       .resamples = 1000,
                       .seed = 1};
    int ch;
    double v;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'u':
            o->url = optarg;
            break;
        case 'm':
            o->model = optarg;
            break;
        case 'L':
            o->lengths = optarg;
            break;
        case 'w':
            o->words = optarg;
            break;
        case 'f':
            o->texts = optarg;
            break;
        case 'p':
            o->priority = optarg;
            break;
        case 'C':
            o->csv = optarg;
            break;
        case 'V':
            o->vocab = optarg;
            break;
        case 'G':
            o->images = optarg;
            break;
        case 'B':
            o->url_b = optarg;
            break;
        case 't':
            o->replay = optarg;
            break;
        case 'K':
            if (add_tenant(o, optarg)) return 2;
            break;
        case 'H':
            if (add_ab_header(o, 0, optarg) || add_ab_header(o, 1, optarg)) return 2;
            break;
        case '1':
        case '2':
            if (add_ab_header(o, ch - '1', optarg)) return 2;
            break;
        case 'R':
            if (parse_num(optarg, 0, 100000, &v) || v != floor(v))
                return fail("--resamples must be an integer in [0, 100000], not '%s'", optarg);
            o->resamples = (unsigned)v;
            break;
        case 'S':
            if (parse_num(optarg, 1e-3, 1e6, &o->speed))
                return fail("--speed must be in [0.001, 1e6], not '%s'", optarg);
            break;
        case 'j':
            o->json = 1;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'e':
            if (!strcmp(optarg, "openai"))
                o->endpoint = ENDPOINT_OPENAI;
            else if (!strcmp(optarg, "tei"))
                o->endpoint = ENDPOINT_TEI;
            else
                return fail("--endpoint must be openai or tei, not '%s'", optarg);
            break;
        case 'r':
            if (parse_num(optarg, 1e-3, 1e6, &o->rate))
                return fail("--rate must be in [0.001, 1e6] req/s, not '%s'", optarg);
            break;
        case 'c':
            if (parse_num(optarg, 1, 10000, &v) || v != floor(v))
                return fail("--concurrency must be an integer in [1, 10000], not '%s'", optarg);
            o->concurrency = (unsigned)v;
            break;
        case 'd':
            if (parse_num(optarg, 1e-3, 86400, &o->duration_s))
                return fail("--duration must be in (0, 86400] seconds, not '%s'", optarg);
            break;
        case 'W':
            if (parse_num(optarg, 0, 86400, &o->warmup_s))
                return fail("--warmup must be in [0, 86400] seconds, not '%s'", optarg);
            break;
        case 'n':
            if (parse_num(optarg, 1, REQUESTS_HARD_MAX, &v) || v != floor(v))
                return fail("--requests must be an integer in [1, 10000000], not '%s'", optarg);
            o->requests = (uint64_t)v;
            break;
        case 'I':
            if (parse_num(optarg, 1, 100000, &v) || v != floor(v))
                return fail("--max-inflight must be an integer in [1, 100000], not '%s'", optarg);
            o->max_inflight = (unsigned)v;
            break;
        case 'T':
            if (parse_num(optarg, 1, 3600000, &v) || v != floor(v))
                return fail("--timeout-ms must be an integer in [1, 3600000], not '%s'", optarg);
            o->timeout_ms = (long)v;
            break;
        case 'k':
            if (parse_num(optarg, 1, 65535, &v) || v != floor(v))
                return fail("--batch-items must be an integer in [1, 65535], not '%s'", optarg);
            o->batch_items = (unsigned)v;
            break;
        case 's':
            if (parse_num(optarg, 0, 1.8e19, &v) || v != floor(v))
                return fail("--seed must be a non-negative integer, not '%s'", optarg);
            o->seed = strtoull(optarg, NULL, 10);
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (o->images && (mode || o->texts || o->batch_items > 1))
        return fail("%s", "--images is for the load modes, without --texts or --batch-items");
    if (mode == 2) {
        if (optind < argc) return fail("unexpected argument '%s' (see --help)", argv[optind]);
        if (!o->url_b) o->url_b = o->url;
        if (o->csv) return fail("%s", "--csv is not supported by hetbench ab (use --json)");
        if (o->priority || o->concurrency)
            return fail("%s", "hetbench ab takes no --priority or --concurrency (use --header)");
        o->ab = 1;
        if (!o->replay) { /* the trace is generated: --rate and the usual request options */
            if (o->rate <= 0) return fail("%s", "hetbench ab needs --trace FILE or --rate R");
            if (o->warmup_s > 0) return fail("%s", "hetbench ab takes no --warmup");
            return 0;
        }
        o->rate = 1;
        o->duration_s = 86400 * 366.0;
        return 0;
    }
    if (mode == 1) {
        if (optind != argc - 1) return fail("%s", "usage: hetbench replay FILE [options]");
        o->replay = argv[optind];
        /* the capture decides what is sent and when */
        o->rate = 1;
        o->duration_s = 86400 * 366.0;
        return 0;
    }
    if (optind < argc) return fail("unexpected argument '%s' (see --help)", argv[optind]);
    if ((o->rate > 0) == (o->concurrency > 0))
        return fail("%s", "give exactly one of --rate (open loop) or --concurrency (closed loop)");
    if (o->warmup_s >= o->duration_s) return fail("%s", "--warmup must be shorter than --duration");
    return 0;
}

/* ---- target ---- */

/* Checks url (loopback, http) and makes *out the endpoint's full URL. */
static int setup_target(struct bench *b, const char *url, char **out)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
    int rc = 2;
    if (!u) return fail("%s", "out of memory");
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
        fail("cannot parse URL '%s'", url);
        goto out;
    }
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    if (!scheme || strcasecmp(scheme, "http")) {
        fail("only http:// URLs are supported, not '%s'", url);
        goto out;
    }
    if (!hs_bench_host_is_loopback(host)) {
        fprintf(stderr,
                "hetbench: refusing target host '%s': load tests in this project target only the "
                "local machine (localhost, 127.0.0.0/8, ::1)\n",
                host ? host : "");
        goto out;
    }
    if (!path || !strcmp(path, "/")) {
        const char *p = b->o.images                     ? "/v1/ocr"
                        : b->o.endpoint == ENDPOINT_TEI ? "/embed"
                                                        : "/v1/embeddings";
        if (curl_url_set(u, CURLUPART_PATH, p, 0) != CURLUE_OK) goto out;
    }
    if (curl_url_get(u, CURLUPART_URL, out, 0) != CURLUE_OK) goto out;
    if (!strcasecmp(host, "localhost")) {
        /* Never let a resolver (or /etc/hosts) send "localhost" anywhere else. */
        char entry[128];
        snprintf(entry, sizeof entry, "localhost:%s:127.0.0.1", port ? port : "80");
        struct curl_slist *r = curl_slist_append(b->resolve, entry);
        if (!r) goto out;
        b->resolve = r;
    }
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_url_cleanup(u);
    return rc;
}

/* ---- request construction ---- */

static hs_status build_body(struct bench *b, struct slot *s, int cls)
{
    struct hs_bench_buf *body = &s->body;
    body->len = 0;
    s->kind = HS_BENCH_BODY_JSON;
    if (b->o.images) {
        const struct hs_bench_image *im = hs_bench_images_pick(&b->images, &b->rng);
        s->kind = im->kind;
        return hs_bench_buf_append(body, (const char *)im->bytes, im->len);
    }
    hs_status st = 0;
    if (b->o.endpoint == ENDPOINT_OPENAI) {
        st |= hs_bench_buf_puts(body, "{\"model\":");
        st |= hs_bench_buf_append_json_str(body, b->o.model);
        st |= hs_bench_buf_puts(body, ",\"input\":[");
    } else {
        st |= hs_bench_buf_puts(body, "{\"inputs\":[");
    }
    struct hs_bench_buf text = {0};
    for (unsigned i = 0; i < b->o.batch_items && !st; i++) {
        if (i) st |= hs_bench_buf_append(body, ",", 1);
        if (b->use_corpus) {
            st |= hs_bench_buf_append_json_str(body,
                                               hs_bench_corpus_pick_text(&b->corpus, cls, &b->rng));
        } else {
            const struct hs_bench_length_class *c = &b->lengths.c[cls];
            text.len = 0;
            st |= hs_bench_text_gen(&b->words, &b->rng,
                                    hs_bench_rng_range(&b->rng, c->words_min, c->words_max), &text);
            st |= hs_bench_buf_append_json_str(body, text.p);
        }
    }
    hs_bench_buf_free(&text);
    st |= hs_bench_buf_puts(body, "]}");
    return st ? HS_STATUS_NO_MEMORY : HS_STATUS_OK;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    struct slot *s = ud;
    size_t n = size * nmemb;
    if (s->resp.len + n > RESPONSE_MAX_BYTES) return 0; /* aborts the transfer: counted as conn */
    return hs_bench_buf_append(&s->resp, data, n) ? 0 : n;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ud)
{
    struct slot *s = ud;
    size_t n = size * nitems;
    static const char key[] = "server-timing:";
    if (n > sizeof key - 1 && !strncasecmp(data, key, sizeof key - 1)) {
        const char *v = data + sizeof key - 1;
        size_t vn = n - (sizeof key - 1);
        while (vn && (*v == ' ' || *v == '\t')) v++, vn--;
        while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' ')) vn--;
        size_t used = strlen(s->st_hdr);
        if (used + vn + 3 < sizeof s->st_hdr) {
            if (used) memcpy(s->st_hdr + used, ", ", 2), used += 2;
            memcpy(s->st_hdr + used, v, vn);
            s->st_hdr[used + vn] = 0;
        }
    }
    return n;
}

static struct slot *slot_get(struct bench *b)
{
    struct slot *s = b->free_slots;
    if (s) {
        b->free_slots = s->next_free;
        return s;
    }
    s = hs_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->easy = curl_easy_init();
    if (!s->easy) {
        hs_free(s);
        return NULL;
    }
    return s;
}

static void slot_put(struct bench *b, struct slot *s)
{
    s->next_free = b->free_slots;
    b->free_slots = s;
}

/* hetbench ab: record 2i or 2i+1 of request i goes to A (0) or B (1); which one leaves first
 * alternates with i, so that neither side is systematically second. */
static int ab_side(size_t idx)
{
    return (int)((idx ^ (idx >> 1)) & 1);
}

static struct hs_bench_record *rec_new(struct bench *b, size_t *idx)
{
    if (b->n_rec == b->cap_rec) {
        size_t cap = b->cap_rec ? b->cap_rec * 2 : 4096;
        struct hs_bench_record *r = hs_realloc(b->rec, cap * sizeof *r);
        if (!r) return NULL;
        b->rec = r;
        b->cap_rec = cap;
    }
    *idx = b->n_rec++;
    hs_bench_record_init(&b->rec[*idx]);
    return &b->rec[*idx];
}

/* Creates the record for one request meant to leave at intended_ns and starts it (or records it
 * as dropped). Returns nonzero only on a fatal error. */
static int launch(struct bench *b, int64_t intended_ns)
{
    size_t idx;
    struct hs_bench_record *r = rec_new(b, &idx);
    if (!r) return fail("%s", "out of memory for records");
    r->send_ns = intended_ns - b->start_ns;
    r->warmup = intended_ns < b->warmup_ns;
    r->items = (uint16_t)b->o.batch_items;
    const struct hs_bench_replay_req *rq = b->o.ab       ? &b->rp.req[idx / 2]
                                           : b->o.replay ? &b->rp.req[idx]
                                                         : NULL;
    int side = b->o.ab ? ab_side(idx) : 0;
    if (rq) {
        r->cls = (uint16_t)rq->cls;
        r->items = (uint16_t)(rq->items > 65535 ? 65535 : rq->items);
    } else {
        r->cls = (uint16_t)(b->use_corpus ? hs_bench_corpus_pick_class(&b->corpus, &b->rng)
                                          : hs_bench_lengths_pick(&b->lengths, &b->rng));
    }
    r->prio = (uint16_t)(b->prio.n ? hs_bench_mix_pick(&b->prio, &b->rng) : 0);
    r->tenant = (uint16_t)(b->tenants.n ? hs_bench_mix_pick(&b->tenants, &b->rng) : 0);
    if (b->inflight >= b->o.max_inflight) {
        r->status = HS_BENCH_OUTCOME_DROPPED;
        return 0;
    }
    struct slot *s = slot_get(b);
    if (!s) return fail("%s", "out of memory building a request");
    if (rq) {
        s->body.len = 0;
        if (hs_bench_buf_append(&s->body, rq->body, rq->body_len))
            return fail("%s", "out of memory building a request");
        s->kind = rq->kind;
    } else if (build_body(b, s, r->cls)) {
        return fail("%s", "out of memory building a request");
    }
    s->rec = idx;
    s->intended_ns = intended_ns;
    s->resp.len = 0;
    s->st_hdr[0] = 0;
    CURL *e = s->easy;
    curl_easy_setopt(e, CURLOPT_URL,
                     side ? b->class_url_b[rq->cls]
                     : rq ? b->class_url[rq->cls]
                          : b->target_url);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
#endif
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, b->o.timeout_ms);
    curl_easy_setopt(e, CURLOPT_RESOLVE, b->resolve);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER,
                     b->o.ab ? b->ab_hdrs[side] : b->hdrs[s->kind][r->prio][r->tenant]);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->body.p);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->body.len);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    if (curl_multi_add_handle(b->multi, e) != CURLM_OK) return fail("%s", "curl_multi_add_handle");
    r->late_ns = hs_now_ns() - intended_ns;
    b->inflight++;
    return 0;
}

/* hetbench ab: compares the two answers of request i (records 2i, 2i+1) and frees them. */
static void ab_compare(struct bench *b, size_t i)
{
    struct hs_bench_ab_rows rows[2];
    int parsed = 1;
    for (size_t j = 2 * i; j < 2 * i + 2; j++) {
        struct hs_bench_buf *body = &b->ab_body[j];
        int32_t st = b->rec[j].status;
        if (hs_bench_ab_rows_parse(body->p ? body->p : "", body->len, &rows[ab_side(j)])) {
            parsed = 0;
            if (st >= 200 && st < 300) b->ab_unreadable++;
        }
        hs_bench_buf_free(body);
    }
    struct ab_quality *q = &b->ab_q[i];
    q->cosine = parsed ? hs_bench_ab_cosine_min(&rows[0], &rows[1]) : NAN;
    q->agree = (int8_t)(parsed ? hs_bench_ab_labels_agree(&rows[0], &rows[1]) : -1);
    q->done = 1;
    hs_bench_ab_rows_free(&rows[0]);
    hs_bench_ab_rows_free(&rows[1]);
}

static int32_t parse_prompt_tokens(const char *resp)
{
    const char *p = resp ? strstr(resp, "\"prompt_tokens\"") : NULL;
    if (!p) return -1;
    p += strlen("\"prompt_tokens\"");
    while (*p == ' ' || *p == ':') p++;
    char *end;
    long v = strtol(p, &end, 10);
    return end == p || v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
}

static void complete(struct bench *b, CURLMsg *msg, int64_t now)
{
    struct slot *s = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
    struct hs_bench_record *r = &b->rec[s->rec];
    CURLcode cc = msg->data.result;
    long code = 0, connects = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(s->easy, CURLINFO_NUM_CONNECTS, &connects);
    b->connects += connects;
    r->latency_ns = now - s->intended_ns;
    if (cc == CURLE_OK) {
        r->status = (int32_t)code;
        if (code >= 200 && code < 300) {
            r->tokens = parse_prompt_tokens(s->resp.p);
            /* ab: the answer is compared after the run; swap buffers instead of copying */
            if (b->o.ab) {
                struct hs_bench_buf t = b->ab_body[s->rec];
                b->ab_body[s->rec] = s->resp;
                s->resp = t;
            }
            if (s->st_hdr[0]) hs_bench_server_timing_parse(s->st_hdr, &b->st_names, r);
        } else if (code != 429 && code != 504 && !b->first_error[0]) {
            snprintf(b->first_error, sizeof b->first_error, "HTTP %ld: %.200s", code,
                     s->resp.len ? s->resp.p : "");
        }
    } else {
        r->status =
            cc == CURLE_OPERATION_TIMEDOUT ? HS_BENCH_OUTCOME_TIMEOUT : HS_BENCH_OUTCOME_CONN;
        if (!b->first_error[0])
            snprintf(b->first_error, sizeof b->first_error, "%s", curl_easy_strerror(cc));
    }
    if (!r->warmup && now > b->last_done_ns) b->last_done_ns = now;
    /* ab: the second answer of a request compares both and frees them, so that memory follows
     * what is in flight, not the length of the trace */
    size_t partner = s->rec ^ 1;
    if (b->o.ab && partner < b->n_rec && b->rec[partner].status != 0) ab_compare(b, s->rec / 2);
    curl_multi_remove_handle(b->multi, s->easy);
    b->inflight--;
    slot_put(b, s);
}

/* ---- the event loop ---- */

static int may_send(struct bench *b, int64_t at_ns)
{
    return !b->stopping && !interrupted && b->n_rec < b->o.requests &&
           at_ns - b->start_ns < (int64_t)(b->o.duration_s * 1e9);
}

/* libcurl's socket callback: keep the epoll set in step with what it wants to hear about. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)e;
    (void)socketp;
    struct bench *b = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.data.fd = fd;
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    if (epoll_ctl(b->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
        epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev);
    return 0;
}

/* libcurl's timer callback: when it wants CURL_SOCKET_TIMEOUT (-1 = never). */
static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct bench *b = userp;
    b->curl_due_ns = timeout_ms < 0 ? -1 : hs_now_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

/* Completed transfers: recorded, and in the closed loop replaced by a new request. */
static int reap(struct bench *b, int closed)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(b->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        int64_t done = hs_now_ns();
        complete(b, msg, done);
        if (closed && may_send(b, done) && launch(b, done)) return 2;
    }
    return 0;
}

/* The open loop's next arrival after one at prev: Poisson, or the capture's next request. */
static int64_t next_arrival(struct bench *b, int64_t prev)
{
    if (!b->o.replay && !b->o.ab)
        return prev + (int64_t)(hs_bench_rng_exp(&b->rng, b->o.rate) * 1e9);
    size_t i = b->o.ab ? b->n_rec / 2 : b->n_rec;
    if (i >= b->rp.n) return prev; /* due at once: may_send then stops the loop */
    return b->start_ns + b->rp.req[i].at_ns;
}

static int run(struct bench *b)
{
    int closed = b->o.concurrency > 0;
    b->start_ns = hs_now_ns();
    b->warmup_ns = b->start_ns + (int64_t)(b->o.warmup_s * 1e9);
    int64_t next_ns = b->start_ns, last_progress = b->start_ns;
    if (closed) {
        for (unsigned i = 0; i < b->o.concurrency && may_send(b, b->start_ns); i++)
            if (launch(b, hs_now_ns())) return 2;
    } else {
        next_ns = next_arrival(b, next_ns);
    }
    for (;;) {
        int64_t now = hs_now_ns();
        if (!closed) {
            /* Every arrival due by now leaves now, stamped with its own intended time. */
            while (next_ns <= now && !b->stopping) {
                if (!may_send(b, next_ns)) {
                    b->stopping = 1;
                    break;
                }
                if (launch(b, next_ns)) return 2;
                next_ns = next_arrival(b, next_ns);
            }
        }
        if (!may_send(b, now) && closed) b->stopping = 1;
        int running;
        /* libcurl's timer first (a handle just added starts here), then the sockets */
        if (b->curl_due_ns >= 0 && b->curl_due_ns <= hs_now_ns()) {
            b->curl_due_ns = -1;
            curl_multi_socket_action(b->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        if (reap(b, closed)) return 2;
        if (interrupted) b->stopping = 1;
        if (b->stopping && b->inflight == 0) break;
        now = hs_now_ns();
        if (!b->o.quiet && now - last_progress > 1000000000LL) {
            last_progress = now;
            fprintf(stderr, "\rhetbench: %.0f s, %zu sent, %u in flight   ",
                    (double)(now - b->start_ns) / 1e9, b->n_rec, b->inflight);
        }
        /* Sleep until the next arrival or libcurl's timer, whichever is first. Round up: an
         * arrival handled up to 1 ms late is still timed from its intended send time (late_ms
         * says by how much), while rounding down would spin a core that the server needs. */
        int64_t wake = now + 100000000LL;
        if (!closed && !b->stopping && next_ns < wake) wake = next_ns;
        if (b->curl_due_ns >= 0 && b->curl_due_ns < wake) wake = b->curl_due_ns;
        int64_t gap = wake - now;
        int wait_ms = gap <= 0 ? 0 : (int)((gap + 999999) / 1000000);
        struct epoll_event ev[256];
        int n = epoll_wait(b->epfd, ev, 256, wait_ms);
        for (int i = 0; i < n; i++) {
            int flags = ((ev[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                        ((ev[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                        ((ev[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(b->multi, ev[i].data.fd, flags, &running);
        }
        if (reap(b, closed)) return 2;
    }
    b->end_ns = hs_now_ns();
    if (!b->o.quiet) fprintf(stderr, "\r%60s\r", "");
    return 0;
}

/* ---- reports ---- */

static const char *status_text(int32_t st, char *buf, size_t n)
{
    switch (st) {
    case HS_BENCH_OUTCOME_CONN:
        return "conn";
    case HS_BENCH_OUTCOME_TIMEOUT:
        return "timeout";
    case HS_BENCH_OUTCOME_DROPPED:
        return "dropped";
    default:
        snprintf(buf, n, "%d", st);
        return buf;
    }
}

static const char *class_name(const struct bench *b, int k)
{
    if (b->o.replay || b->o.ab) return b->rp.class_name[k];
    return b->use_corpus ? b->corpus.class_name[k] : b->lengths.c[k].name;
}

static int n_classes(const struct bench *b)
{
    if (b->o.replay || b->o.ab) return b->rp.n_classes;
    return b->use_corpus ? b->corpus.n_classes : b->lengths.n;
}

static double measured_s(const struct bench *b)
{
    int64_t from = b->warmup_ns > b->start_ns ? b->warmup_ns : b->start_ns;
    int64_t to = b->last_done_ns > from ? b->last_done_ns : b->end_ns;
    double s = (double)(to - from) / 1e9;
    return s > 0 ? s : 1e-9;
}

static void print_row(const char *label, const struct hs_bench_summary *s)
{
    printf("  %-22s %8llu %8llu %9.2f %9.2f %9.2f %9.2f %9.2f\n", label, (unsigned long long)s->n,
           (unsigned long long)s->n_2xx, s->p50_ms, s->p95_ms, s->p99_ms, s->max_ms, s->mean_ms);
}

static void report_text(const struct bench *b, double *scratch)
{
    struct hs_bench_summary all;
    hs_bench_summarize(b->rec, b->n_rec, HS_BENCH_ANY, HS_BENCH_ANY, scratch, &all);
    double secs = measured_s(b);
    if (b->o.replay)
        printf("hetbench: replay of %s at %gx, %zu requests (%zu lines without inputs skipped)\n"
               "texts     %zu captured, %zu generated: %zu exact token length, %zu off by one, "
               "%zu worse (largest difference %d)\n",
               b->o.replay, b->o.speed, b->rp.n, b->rp.skipped, b->rp.texts_captured,
               b->rp.gen_exact + b->rp.gen_off_by_one + b->rp.gen_worse, b->rp.gen_exact,
               b->rp.gen_off_by_one, b->rp.gen_worse, b->rp.gen_max_diff);
    else if (b->o.concurrency)
        printf("hetbench: closed loop, %u clients, %s %s, %u item(s)/request\n", b->o.concurrency,
               b->o.endpoint == ENDPOINT_TEI ? "tei" : "openai", b->target_url, b->o.batch_items);
    else
        printf("hetbench: open loop, %.1f req/s offered, %s %s, %u item(s)/request\n", b->o.rate,
               b->o.endpoint == ENDPOINT_TEI ? "tei" : "openai", b->target_url, b->o.batch_items);
    printf("requests  %llu measured (%zu sent incl. warm-up) over %.2f s, %ld connections opened\n",
           (unsigned long long)all.n, b->n_rec, secs, b->connects);
    printf("outcomes  2xx %llu  429 %llu  504 %llu  other-http %llu  conn-error %llu  timeout %llu"
           "  dropped %llu\n",
           (unsigned long long)all.n_2xx, (unsigned long long)all.n_429,
           (unsigned long long)all.n_504, (unsigned long long)all.n_other_http,
           (unsigned long long)all.n_conn, (unsigned long long)all.n_timeout,
           (unsigned long long)all.n_dropped);
    printf("throughput %.1f req/s  %.1f items/s", (double)all.n_2xx / secs,
           (double)all.items_2xx / secs);
    if (all.n_tokens_known) printf("  %.0f tokens/s", (double)all.tokens_2xx / secs);
    printf("  (2xx only)\n");
    printf("latency ms (2xx)              n      2xx       p50       p95       p99       max      "
           "mean\n");
    print_row("all", &all);
    char label[64];
    if (n_classes(b) > 1)
        for (int k = 0; k < n_classes(b); k++) {
            struct hs_bench_summary s;
            hs_bench_summarize(b->rec, b->n_rec, (unsigned)k, HS_BENCH_ANY, scratch, &s);
            snprintf(label, sizeof label, "class %s", class_name(b, k));
            print_row(label, &s);
        }
    if (b->prio.n > 1)
        for (int k = 0; k < b->prio.n; k++) {
            struct hs_bench_summary s;
            hs_bench_summarize(b->rec, b->n_rec, HS_BENCH_ANY, (unsigned)k, scratch, &s);
            snprintf(label, sizeof label, "priority %s", b->prio.name[k]);
            print_row(label, &s);
        }
    for (int k = 0; k < b->tenants.n; k++) {
        struct hs_bench_summary s;
        hs_bench_summarize_tenant(b->rec, b->n_rec, HS_BENCH_ANY, HS_BENCH_ANY, (unsigned)k,
                                  scratch, &s);
        snprintf(label, sizeof label, "tenant %s", b->tenants.name[k]);
        print_row(label, &s);
        printf("  tenant %s: 429 %llu, goodput %.1f %%\n", b->tenants.name[k],
               (unsigned long long)s.n_429, s.n ? 100.0 * (double)s.n_2xx / (double)s.n : 0.0);
    }
    for (int k = 0; k < b->st_names.n; k++) {
        double p50, p95;
        size_t n = hs_bench_st_percentiles(b->rec, b->n_rec, k, scratch, &p50, &p95);
        printf("server-timing %-12s n %zu  p50 %.3f ms  p95 %.3f ms\n", b->st_names.name[k], n, p50,
               p95);
    }
    if (b->first_error[0]) printf("first error: %s\n", b->first_error);
}

static void json_summary(const struct hs_bench_summary *s, double secs)
{
    printf("{\"requests\":%llu,\"ok\":%llu,\"status_429\":%llu,\"status_504\":%llu,"
           "\"other_http\":%llu,\"conn_errors\":%llu,\"timeouts\":%llu,\"dropped\":%llu,"
           "\"items_ok\":%llu,\"tokens_ok\":%llu,\"rps\":%.3f,\"items_per_s\":%.3f,"
           "\"latency_ms\":{\"p50\":%.4f,\"p95\":%.4f,\"p99\":%.4f,\"max\":%.4f,\"mean\":%.4f}}",
           (unsigned long long)s->n, (unsigned long long)s->n_2xx, (unsigned long long)s->n_429,
           (unsigned long long)s->n_504, (unsigned long long)s->n_other_http,
           (unsigned long long)s->n_conn, (unsigned long long)s->n_timeout,
           (unsigned long long)s->n_dropped, (unsigned long long)s->items_2xx,
           (unsigned long long)s->tokens_2xx, (double)s->n_2xx / secs, (double)s->items_2xx / secs,
           s->p50_ms, s->p95_ms, s->p99_ms, s->max_ms, s->mean_ms);
}

static void report_json(const struct bench *b, double *scratch)
{
    struct hs_bench_summary s;
    double secs = measured_s(b);
    struct hs_bench_buf url = {0};
    hs_bench_buf_append_json_str(&url, b->target_url);
    printf("{\"mode\":\"%s\",\"offered_rps\":%.3f,\"concurrency\":%u,\"batch_items\":%u,"
           "\"url\":%s,\"seed\":%llu,\"measured_s\":%.4f,\"connections\":%ld,",
           b->o.replay        ? "replay"
           : b->o.concurrency ? "closed"
                              : "open",
           b->o.replay ? 0 : b->o.rate, b->o.concurrency, b->o.batch_items, url.p ? url.p : "\"\"",
           (unsigned long long)b->o.seed, secs, b->connects);
    hs_bench_buf_free(&url);
    if (b->o.replay)
        printf("\"replay\":{\"speed\":%g,\"requests\":%zu,\"skipped\":%zu,\"texts_captured\":%zu,"
               "\"generated_exact\":%zu,\"generated_off_by_one\":%zu,\"generated_worse\":%zu,"
               "\"generated_max_diff\":%d},",
               b->o.speed, b->rp.n, b->rp.skipped, b->rp.texts_captured, b->rp.gen_exact,
               b->rp.gen_off_by_one, b->rp.gen_worse, b->rp.gen_max_diff);
    printf("\"all\":");
    hs_bench_summarize(b->rec, b->n_rec, HS_BENCH_ANY, HS_BENCH_ANY, scratch, &s);
    json_summary(&s, secs);
    printf(",\"classes\":{");
    for (int k = 0; k < n_classes(b); k++) {
        hs_bench_summarize(b->rec, b->n_rec, (unsigned)k, HS_BENCH_ANY, scratch, &s);
        printf("%s\"%s\":", k ? "," : "", class_name(b, k)); /* names are [A-Za-z0-9_.-] */
        json_summary(&s, secs);
    }
    printf("},\"priorities\":{");
    for (int k = 0; k < b->prio.n; k++) {
        hs_bench_summarize(b->rec, b->n_rec, HS_BENCH_ANY, (unsigned)k, scratch, &s);
        printf("%s\"%s\":", k ? "," : "", b->prio.name[k]);
        json_summary(&s, secs);
    }
    printf("},\"tenants\":{");
    for (int k = 0; k < b->tenants.n; k++) {
        hs_bench_summarize_tenant(b->rec, b->n_rec, HS_BENCH_ANY, HS_BENCH_ANY, (unsigned)k,
                                  scratch, &s);
        printf("%s\"%s\":", k ? "," : "", b->tenants.name[k]);
        json_summary(&s, secs);
    }
    printf("},\"server_timing_ms\":{");
    for (int k = 0; k < b->st_names.n; k++) {
        double p50, p95;
        size_t n = hs_bench_st_percentiles(b->rec, b->n_rec, k, scratch, &p50, &p95);
        struct hs_bench_buf name = {0};
        hs_bench_buf_append_json_str(&name, b->st_names.name[k]);
        printf("%s%s:{\"n\":%zu,\"p50\":%.4f,\"p95\":%.4f}", k ? "," : "", name.p ? name.p : "\"\"",
               n, p50, p95);
        hs_bench_buf_free(&name);
    }
    printf("}}\n");
}

static int write_csv(const struct bench *b, double *scratch)
{
    FILE *f = fopen(b->o.csv, "w");
    if (!f) return fail("cannot write --csv '%s'", b->o.csv);
    fprintf(f, "seq,send_ms,latency_ms,class,priority,items,status,tokens,warmup,late_ms");
    for (int k = 0; k < b->st_names.n; k++) fprintf(f, ",st_%s_ms", b->st_names.name[k]);
    fprintf(f, "\n");
    char buf[16];
    for (size_t i = 0; i < b->n_rec; i++) {
        const struct hs_bench_record *r = &b->rec[i];
        fprintf(f, "%zu,%.3f,%.3f,%s,%s,%u,%s,", i, (double)r->send_ns / 1e6,
                (double)r->latency_ns / 1e6, class_name(b, r->cls),
                b->prio.n ? b->prio.name[r->prio] : "", r->items,
                status_text(r->status, buf, sizeof buf));
        if (r->tokens >= 0) fprintf(f, "%d", r->tokens);
        fprintf(f, ",%d,%.3f", r->warmup, (double)r->late_ns / 1e6);
        for (int k = 0; k < b->st_names.n; k++) {
            if (isnan(r->st_ms[k]))
                fprintf(f, ",");
            else
                fprintf(f, ",%.3f", r->st_ms[k]);
        }
        fprintf(f, "\n");
    }
    struct hs_bench_summary s;
    hs_bench_summarize(b->rec, b->n_rec, HS_BENCH_ANY, HS_BENCH_ANY, scratch, &s);
    double secs = measured_s(b);
    fprintf(f,
            "# summary,requests=%llu,ok=%llu,status_429=%llu,status_504=%llu,other_http=%llu,"
            "conn_errors=%llu,timeouts=%llu,dropped=%llu,measured_s=%.3f,rps=%.3f,"
            "items_per_s=%.3f,p50_ms=%.3f,p95_ms=%.3f,p99_ms=%.3f,max_ms=%.3f\n",
            (unsigned long long)s.n, (unsigned long long)s.n_2xx, (unsigned long long)s.n_429,
            (unsigned long long)s.n_504, (unsigned long long)s.n_other_http,
            (unsigned long long)s.n_conn, (unsigned long long)s.n_timeout,
            (unsigned long long)s.n_dropped, secs, (double)s.n_2xx / secs,
            (double)s.items_2xx / secs, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms);
    if (fclose(f)) return fail("error writing --csv '%s'", b->o.csv);
    return 0;
}

/* ---- hetbench ab: pairs and their report ---- */

static void print_ci(const char *name, const struct hs_bench_ci *c)
{
    printf(" %s %.2f [%.2f, %.2f]", name, c->est, c->lo, c->hi);
}

static void print_errors(const struct hs_bench_ab_side *s)
{
    char buf[16];
    if (!s->n_status) printf(" none");
    for (int i = 0; i < s->n_status; i++)
        printf(" %s:%llu", status_text(s->status[i], buf, sizeof buf),
               (unsigned long long)s->status_n[i]);
    if (s->n_status_other) printf(" other:%llu", (unsigned long long)s->n_status_other);
}

static void ab_text_class(const char *label, const struct hs_bench_ab_summary *s)
{
    printf("%s: %llu requests, both 2xx %llu\n", label, (unsigned long long)s->n,
           (unsigned long long)s->n_both);
    for (int k = 0; k < 2; k++) {
        printf("  %c  2xx %-6llu latency ms", "AB"[k], (unsigned long long)s -> side[k].n_2xx);
        print_ci("p50", &s->side[k].p50_ms);
        print_ci(" p99", &s->side[k].p99_ms);
        printf("  errors");
        print_errors(&s->side[k]);
        printf("\n");
    }
    printf("  B/A (both 2xx)     ");
    print_ci("p50", &s->ratio_p50);
    print_ci(" p99", &s->ratio_p99);
    printf("\n");
    if (s->n_cosine)
        printf(
            "  cosine A vs B: n %llu  min %.6f  p1 %.6f  mean %.6f  below %.3f: %llu (%.1f %%)\n",
            (unsigned long long)s->n_cosine, s->cos_min, s->cos_p1, s->cos_mean, HS_BENCH_AB_COS_OK,
            (unsigned long long)s->n_cos_below,
            100.0 * (double)s->n_cos_below / (double)s->n_cosine);
    if (s->n_labels)
        printf("  labels A vs B: n %llu  agree %llu (%.1f %%)\n", (unsigned long long)s->n_labels,
               (unsigned long long)s->n_agree, 100.0 * (double)s->n_agree / (double)s->n_labels);
}

static void json_ci(const char *name, const struct hs_bench_ci *c)
{
    printf("\"%s\":{\"est\":%.4f,\"lo\":%.4f,\"hi\":%.4f}", name, c->est, c->lo, c->hi);
}

static void json_num_or_null(const char *name, double v, int ok)
{
    if (ok)
        printf(",\"%s\":%.8f", name, v);
    else
        printf(",\"%s\":null", name);
}

static void ab_json_class(const struct hs_bench_ab_summary *s)
{
    char buf[16];
    printf("{\"requests\":%llu,\"both_ok\":%llu", (unsigned long long)s->n,
           (unsigned long long)s->n_both);
    for (int k = 0; k < 2; k++) {
        const struct hs_bench_ab_side *d = &s->side[k];
        printf(",\"%c\":{\"ok\":%llu,", "ab"[k], (unsigned long long)d -> n_2xx);
        json_ci("p50_ms", &d->p50_ms);
        printf(",");
        json_ci("p99_ms", &d->p99_ms);
        printf(",\"errors\":{");
        for (int i = 0; i < d->n_status; i++)
            printf("%s\"%s\":%llu", i ? "," : "", status_text(d->status[i], buf, sizeof buf),
                   (unsigned long long)d->status_n[i]);
        if (d->n_status_other)
            printf("%s\"other\":%llu", d->n_status ? "," : "",
                   (unsigned long long)d->n_status_other);
        printf("}}");
    }
    printf(",");
    json_ci("ratio_p50", &s->ratio_p50);
    printf(",");
    json_ci("ratio_p99", &s->ratio_p99);
    printf(",\"quality\":{\"n_cosine\":%llu", (unsigned long long)s->n_cosine);
    json_num_or_null("cosine_min", s->cos_min, s->n_cosine > 0);
    json_num_or_null("cosine_p1", s->cos_p1, s->n_cosine > 0);
    json_num_or_null("cosine_mean", s->cos_mean, s->n_cosine > 0);
    printf(",\"below_0999\":%llu,\"n_labels\":%llu,\"labels_agree\":%llu",
           (unsigned long long)s->n_cos_below, (unsigned long long)s->n_labels,
           (unsigned long long)s->n_agree);
    json_num_or_null("agreement", s->n_labels ? (double)s->n_agree / (double)s->n_labels : 0,
                     s->n_labels > 0);
    printf("}}");
}

/* The pairs of an ab run (both answers of each request compared) and the report. Returns 0, 1
 * when a side has not one 2xx, 2 when out of memory. */
static int ab_report(struct bench *b)
{
    size_t n = b->n_rec / 2;
    struct hs_bench_ab_pair *pr = hs_calloc(n ? n : 1, sizeof *pr);
    if (!pr) return fail("%s", "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!b->ab_q[i].done) ab_compare(b, i); /* one side dropped, never sent */
        pr[i].cosine = b->ab_q[i].cosine;
        pr[i].agree = b->ab_q[i].agree;
        for (size_t j = 2 * i; j < 2 * i + 2; j++) {
            pr[i].status[ab_side(j)] = b->rec[j].status;
            pr[i].latency_ms[ab_side(j)] = (double)b->rec[j].latency_ns / 1e6;
            pr[i].cls = b->rec[j].cls;
        }
    }
    size_t bad_body = b->ab_unreadable;
    struct hs_bench_ab_summary all;
    int rc = 0;
    if (hs_bench_ab_summarize(pr, n, HS_BENCH_ANY, b->o.resamples, b->o.seed, &all)) {
        hs_free(pr);
        return fail("%s", "out of memory");
    }
    if (b->o.json) {
        struct hs_bench_buf u[3] = {{0}};
        hs_bench_buf_append_json_str(&u[0], b->o.url);
        hs_bench_buf_append_json_str(&u[1], b->o.url_b);
        hs_bench_buf_append_json_str(&u[2], b->o.replay ? b->o.replay : "generated");
        printf("{\"mode\":\"ab\",\"a\":%s,\"b\":%s,\"trace\":%s,\"speed\":%g,\"seed\":%llu,"
               "\"resamples\":%u,\"unreadable_2xx\":%zu,\"all\":",
               u[0].p ? u[0].p : "\"\"", u[1].p ? u[1].p : "\"\"", u[2].p ? u[2].p : "\"\"",
               b->o.speed, (unsigned long long)b->o.seed, b->o.resamples, bad_body);
        for (int k = 0; k < 3; k++) hs_bench_buf_free(&u[k]);
        ab_json_class(&all);
        printf(",\"classes\":{");
    } else {
        printf("hetbench ab: %s at %gx, %zu requests to each side, %u bootstrap resamples "
               "(95 %% intervals)\nA %s",
               b->o.replay ? b->o.replay : "generated trace", b->o.speed, n, b->o.resamples,
               b->o.url);
        for (int i = 0; i < b->o.n_ab_hdr[0]; i++) printf("  [%s]", b->o.ab_hdr[0][i]);
        printf("\nB %s", b->o.url_b);
        for (int i = 0; i < b->o.n_ab_hdr[1]; i++) printf("  [%s]", b->o.ab_hdr[1][i]);
        printf("\n");
        if (bad_body) printf("2xx answers that hold no embeddings or labels: %zu\n", bad_body);
        ab_text_class("all", &all);
    }
    for (int k = 0; k < n_classes(b); k++) {
        struct hs_bench_ab_summary s;
        if (hs_bench_ab_summarize(pr, n, (unsigned)k, b->o.resamples, b->o.seed, &s)) {
            rc = fail("%s", "out of memory");
            break;
        }
        if (b->o.json) {
            printf("%s\"%s\":", k ? "," : "", class_name(b, k)); /* names are [A-Za-z0-9_.-] */
            ab_json_class(&s);
        } else if (n_classes(b) > 1) {
            char label[64];
            snprintf(label, sizeof label, "class %s", class_name(b, k));
            ab_text_class(label, &s);
        }
    }
    if (b->o.json) printf("}}\n");
    if (!b->o.json && b->first_error[0]) printf("first error: %s\n", b->first_error);
    hs_free(pr);
    if (!rc && (!all.side[0].n_2xx || !all.side[1].n_2xx)) rc = 1;
    return rc;
}

/* ---- main ---- */

/* Exit status 1 when not one measured request succeeded: a script should not mistake a run
 * against a dead or misconfigured server for a result. */
static int no_success(const struct bench *b)
{
    for (size_t i = 0; i < b->n_rec; i++)
        if (!b->rec[i].warmup && b->rec[i].status >= 200 && b->rec[i].status < 300) return 0;
    return 1;
}

/* One URL per endpoint of the capture, on the server at base. */
static int class_urls(struct bench *b, const char *base, char **url)
{
    for (size_t i = 0; i < b->rp.n; i++) {
        int k = b->rp.req[i].cls;
        if (url[k]) continue;
        CURLU *u = curl_url();
        if (!u || curl_url_set(u, CURLUPART_URL, base, 0) != CURLUE_OK ||
            curl_url_set(u, CURLUPART_PATH, b->rp.req[i].endpoint, 0) != CURLUE_OK ||
            curl_url_get(u, CURLUPART_URL, &url[k], 0) != CURLUE_OK) {
            curl_url_cleanup(u);
            return fail("replay: endpoint '%s' does not make a URL", b->rp.req[i].endpoint);
        }
        curl_url_cleanup(u);
    }
    return 0;
}

/* hetbench replay: the capture's requests prepared ahead, one URL per endpoint. */
static int prepare_replay(struct bench *b)
{
    struct hs_error err = {0};
    char vocab[1100];
    const char *dir = getenv("HS_MODEL_DIR");
    if (b->o.vocab)
        snprintf(vocab, sizeof vocab, "%s", b->o.vocab);
    else
        snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir ? dir : "models/all-MiniLM-L6-v2");
    /* without a vocabulary a capture with texts still replays */
    if (hs_tokenizer_load(vocab, NULL, &b->tok, &err) && b->o.vocab)
        return fail("--vocab: %s", err.msg);
    if (hs_bench_replay_load(b->o.replay, b->tok, b->o.speed, b->o.seed, &b->rp, &err))
        return fail("replay: %s", err.msg);
    /* ab: every request twice, records 2i and 2i+1 (which side each is: ab_side) */
    b->o.requests = b->o.ab ? 2 * b->rp.n : b->rp.n;
    for (size_t i = 0; b->o.ab && i < b->rp.n; i++)
        if (b->rp.req[i].kind != HS_BENCH_BODY_JSON)
            return fail("%s", "hetbench ab compares embeddings: the trace has image bodies");
    if (class_urls(b, b->target_url, b->class_url)) return 2;
    if (b->o.ab) {
        if (class_urls(b, b->target_url_b, b->class_url_b)) return 2;
        b->ab_body = hs_calloc(2 * b->rp.n, sizeof *b->ab_body);
        b->ab_q = hs_calloc(b->rp.n, sizeof *b->ab_q);
        if (!b->ab_body || !b->ab_q) return fail("%s", "out of memory");
    }
    return 0;
}

/* hetbench ab without --trace: the generated workload (Poisson arrivals at --rate for
 * --duration or --requests, --lengths / --texts, --batch-items, --endpoint) drawn ahead of the
 * run as a trace, so that both sides get the same bodies. */
static int ab_generate(struct bench *b)
{
    uint64_t cap = (uint64_t)(b->o.rate * b->o.duration_s * 2) + 64;
    if (cap > b->o.requests) cap = b->o.requests;
    struct hs_bench_replay *rp = &b->rp;
    rp->req = hs_calloc((size_t)cap, sizeof *rp->req);
    if (!rp->req) return fail("%s", "out of memory");
    rp->n_classes = b->use_corpus ? b->corpus.n_classes : b->lengths.n;
    for (int k = 0; k < rp->n_classes; k++)
        snprintf(rp->class_name[k], sizeof rp->class_name[k], "%s",
                 b->use_corpus ? b->corpus.class_name[k] : b->lengths.c[k].name);
    const char *path = b->o.endpoint == ENDPOINT_TEI ? "/embed" : "/v1/embeddings";
    /* the URL's own path, when it has one, as for the load modes */
    const char *given = strstr(b->target_url, "://");
    given = given ? strchr(given + 3, '/') : NULL;
    if (given && strcmp(given, "/")) path = given;
    struct slot tmp = {0};
    double t_s = 0;
    for (uint64_t i = 0; i < cap; i++) {
        t_s += hs_bench_rng_exp(&b->rng, b->o.rate);
        if (t_s >= b->o.duration_s) break;
        int cls = b->use_corpus ? hs_bench_corpus_pick_class(&b->corpus, &b->rng)
                                : hs_bench_lengths_pick(&b->lengths, &b->rng);
        struct hs_bench_replay_req *q = &rp->req[rp->n];
        q->endpoint = hs_malloc(strlen(path) + 1);
        if (!q->endpoint || build_body(b, &tmp, cls)) {
            hs_bench_buf_free(&tmp.body);
            return fail("%s", "out of memory");
        }
        memcpy(q->endpoint, path, strlen(path) + 1);
        q->body = tmp.body.p;
        q->body_len = tmp.body.len;
        tmp.body = (struct hs_bench_buf){0};
        q->at_ns = (int64_t)(t_s * 1e9);
        q->cls = cls;
        q->items = b->o.batch_items;
        rp->n++;
    }
    if (!rp->n) return fail("%s", "hetbench ab: the generated trace is empty (raise --duration)");
    b->o.duration_s = 86400 * 366.0;
    b->o.requests = 2 * rp->n;
    if (class_urls(b, b->target_url, b->class_url) ||
        class_urls(b, b->target_url_b, b->class_url_b))
        return 2;
    b->ab_body = hs_calloc(2 * rp->n, sizeof *b->ab_body);
    b->ab_q = hs_calloc(rp->n, sizeof *b->ab_q);
    if (!b->ab_body || !b->ab_q) return fail("%s", "out of memory");
    return 0;
}

static int prepare(struct bench *b)
{
    struct hs_error err = {0};
    if (b->o.replay) {
        if (prepare_replay(b)) return 2;
    } else if (b->o.images) {
        if (hs_bench_images_load(b->o.images, RESPONSE_MAX_BYTES, &b->images, &err) ||
            hs_bench_lengths_parse("images=1:1", &b->lengths, &err))
            return fail("--images: %s", err.msg);
    } else if (b->o.texts) {
        if (hs_bench_corpus_load(b->o.texts, &b->corpus, &err)) return fail("--texts: %s", err.msg);
        b->use_corpus = 1;
    } else {
        if (hs_bench_lengths_parse(b->o.lengths, &b->lengths, &err)) return fail("%s", err.msg);
        if (b->o.words) {
            if (hs_bench_words_load(b->o.words, &b->words, &err))
                return fail("--words: %s", err.msg);
        } else {
            hs_bench_words_builtin(&b->words);
        }
    }
    if (b->o.priority && hs_bench_mix_parse(b->o.priority, &b->prio, &err))
        return fail("--priority: %s", err.msg);
    if (b->o.n_tenants && hs_bench_mix_parse(b->o.tenant_spec, &b->tenants, &err))
        return fail("--tenant: %s", err.msg);
    int nh = b->prio.n ? b->prio.n : 1, nt = b->tenants.n ? b->tenants.n : 1;
    for (int kind = 0; kind < HS_BENCH_BODY_KINDS; kind++)
        for (int k = 0; k < nh; k++)
            for (int t = 0; t < nt; t++) {
                char ct[64];
                snprintf(ct, sizeof ct, "Content-Type: %s", hs_bench_body_ctype(kind));
                struct curl_slist *h = curl_slist_append(NULL, ct);
                h = h ? curl_slist_append(h, "Expect:") : NULL; /* no 100-continue round trip */
                if (h && b->prio.n) {
                    char line[64];
                    snprintf(line, sizeof line, "X-Priority: %s", b->prio.name[k]);
                    h = curl_slist_append(h, line);
                }
                if (h && b->tenants.n) {
                    char line[512];
                    snprintf(line, sizeof line, "Authorization: Bearer %s", b->o.tenant_key[t]);
                    h = curl_slist_append(h, line);
                }
                if (!h) return fail("%s", "out of memory");
                b->hdrs[kind][k][t] = h;
            }
    for (int side = 0; b->o.ab && side < 2; side++) {
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        h = h ? curl_slist_append(h, "Expect:") : NULL;
        for (int i = 0; h && i < b->o.n_ab_hdr[side]; i++)
            h = curl_slist_append(h, b->o.ab_hdr[side][i]);
        if (!h) return fail("%s", "out of memory");
        b->ab_hdrs[side] = h;
    }
    hs_bench_rng_seed(&b->rng, b->o.seed);
    if (b->o.ab && !b->o.replay && ab_generate(b)) return 2;
    b->multi = curl_multi_init();
    if (!b->multi) return fail("%s", "curl_multi_init failed");
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (b->epfd < 0) return fail("epoll_create1: %s", strerror(errno));
    b->curl_due_ns = -1;
    curl_multi_setopt(b->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(b->multi, CURLMOPT_SOCKETDATA, b);
    curl_multi_setopt(b->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(b->multi, CURLMOPT_TIMERDATA, b);
    /* Keep every connection that was ever in use: a closed-and-reopened connection would add a
     * TCP handshake to some requests and not others. */
    curl_multi_setopt(b->multi, CURLMOPT_MAXCONNECTS,
                      (long)(b->o.concurrency ? b->o.concurrency : b->o.max_inflight));
    return 0;
}

static void cleanup(struct bench *b)
{
    while (b->free_slots) {
        struct slot *s = b->free_slots;
        b->free_slots = s->next_free;
        curl_easy_cleanup(s->easy);
        hs_bench_buf_free(&s->body);
        hs_bench_buf_free(&s->resp);
        hs_free(s);
    }
    if (b->multi) curl_multi_cleanup(b->multi);
    if (b->epfd > 0) close(b->epfd);
    for (int kind = 0; kind < HS_BENCH_BODY_KINDS; kind++)
        for (int k = 0; k < HS_BENCH_MIX_MAX; k++)
            for (int t = 0; t < HS_BENCH_MIX_MAX; t++) curl_slist_free_all(b->hdrs[kind][k][t]);
    curl_slist_free_all(b->resolve);
    curl_free(b->target_url);
    hs_bench_corpus_free(&b->corpus);
    hs_bench_images_free(&b->images);
    hs_bench_words_free(&b->words);
    hs_bench_replay_free(&b->rp);
    hs_tokenizer_free(b->tok);
    for (int k = 0; k < HS_BENCH_MIX_MAX; k++) curl_free(b->class_url[k]);
    for (int k = 0; k < HS_BENCH_MIX_MAX; k++) curl_free(b->class_url_b[k]);
    for (int k = 0; k < 2; k++) curl_slist_free_all(b->ab_hdrs[k]);
    curl_free(b->target_url_b);
    if (b->ab_body)
        for (size_t i = 0; i < 2 * b->rp.n; i++) hs_bench_buf_free(&b->ab_body[i]);
    hs_free(b->ab_body);
    hs_free(b->ab_q);
    hs_free(b->rec);
}

int main(int argc, char **argv)
{
    static struct bench b;
    /* hetbench replay FILE [options]: getopt sees "replay" as the program name */
    int mode = argc < 2 ? 0 : !strcmp(argv[1], "replay") ? 1 : !strcmp(argv[1], "ab") ? 2 : 0;
    int rc = mode ? parse_opts(argc - 1, argv + 1, &b.o, mode) : parse_opts(argc, argv, &b.o, 0);
    if (rc) return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return fail("%s", "curl_global_init failed");
    if (!(rc = setup_target(&b, b.o.url, &b.target_url)) &&
        !(rc = b.o.ab ? setup_target(&b, b.o.url_b, &b.target_url_b) : 0) && !(rc = prepare(&b))) {
        signal(SIGINT, on_sigint);
        signal(SIGTERM, on_sigint);
        signal(SIGPIPE, SIG_IGN);
        if (!isatty(STDERR_FILENO)) b.o.quiet = 1;
        rc = run(&b);
    }
    if (!rc) {
        double *scratch = hs_malloc((b.n_rec ? b.n_rec : 1) * sizeof *scratch);
        if (!scratch) {
            rc = fail("%s", "out of memory");
        } else if (b.o.ab) {
            rc = ab_report(&b);
        } else {
            if (b.o.json)
                report_json(&b, scratch);
            else
                report_text(&b, scratch);
            if (b.o.csv) rc = write_csv(&b, scratch);
        }
        hs_free(scratch);
        if (!rc && interrupted) rc = 130;
        if (!rc && !b.o.ab && no_success(&b)) rc = 1;
    }
    cleanup(&b);
    curl_global_cleanup();
    return rc;
}
