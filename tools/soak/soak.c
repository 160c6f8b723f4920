/* hetsoak — pure parts: response parser, id set, Prometheus samples, rate profile, histogram. */
#include "soak/soak.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"

#define HEAD_MAX_BYTES 16384

/* ---------------------------------------------------------------------------------------------
 * HTTP/1.1 responses
 */

static enum hs_soak_parse malformed(char *msg, size_t cap, const char *what)
{
    if (cap) snprintf(msg, cap, "%s", what);
    return HS_SOAK_PARSE_MALFORMED;
}

static const char *find_crlfcrlf(const char *buf, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
            return buf + i;
    return NULL;
}

/* A decimal number of at most 18 digits spanning [p, end) after optional blanks; -1 if not. */
static long long decimal(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    if (p == end || end - p > 18) return -1;
    long long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static bool header_is(const char *line, size_t name_len, const char *want)
{
    return strlen(want) == name_len && !strncasecmp(line, want, name_len);
}

enum hs_soak_parse hs_soak_resp_parse(const char *buf, size_t n, struct hs_soak_resp *r, char *msg,
                                      size_t cap)
{
    static const char prefix[] = "HTTP/1.";
    size_t cmp = n < sizeof prefix - 1 ? n : sizeof prefix - 1;
    if (memcmp(buf, prefix, cmp)) return malformed(msg, cap, "does not start with HTTP/1.");
    const char *eoh = find_crlfcrlf(buf, n);
    if (!eoh) {
        if (n > HEAD_MAX_BYTES) return malformed(msg, cap, "header longer than 16 KiB");
        return HS_SOAK_PARSE_MORE;
    }
    memset(r, 0, sizeof *r);
    r->content_bytes = -1;
    r->retry_after_s = -1;
    r->head_bytes = (size_t)(eoh - buf) + 4;
    /* status line: HTTP/1.x NNN reason */
    const char *line_end = memchr(buf, '\r', (size_t)(eoh - buf) + 1);
    if (line_end - buf < 12 || buf[8] != ' ' || (line_end - buf > 12 && buf[12] != ' '))
        return malformed(msg, cap, "bad status line");
    long long st = decimal(buf + 9, buf + 12);
    if (st < 100 || st > 599) return malformed(msg, cap, "bad status code");
    r->status = (int)st;
    for (const char *p = line_end + 2; p < eoh + 2; p = line_end + 2) {
        line_end = memchr(p, '\r', (size_t)(eoh + 2 - p));
        if (!line_end || line_end[1] != '\n') return malformed(msg, cap, "bare CR in a header");
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        if (!colon || colon == p) return malformed(msg, cap, "header line without a name");
        size_t name_len = (size_t)(colon - p);
        const char *v = colon + 1, *v_end = line_end;
        if (header_is(p, name_len, "Content-Length")) {
            if (r->content_bytes >= 0) return malformed(msg, cap, "two Content-Length headers");
            r->content_bytes = decimal(v, v_end);
            if (r->content_bytes < 0) return malformed(msg, cap, "bad Content-Length");
        } else if (header_is(p, name_len, "Transfer-Encoding")) {
            return malformed(msg, cap, "Transfer-Encoding (only Content-Length is expected)");
        } else if (header_is(p, name_len, "Connection")) {
            while (v < v_end && *v == ' ') v++;
            r->close = (size_t)(v_end - v) >= 5 && !strncasecmp(v, "close", 5);
        } else if (header_is(p, name_len, "X-Request-Id")) {
            long long id = decimal(v, v_end);
            if (id > 0) {
                r->has_id = true;
                r->id = (uint64_t)id;
            }
        } else if (header_is(p, name_len, "Retry-After")) {
            long long s = decimal(v, v_end);
            r->retry_after_s = s >= 0 && s < 1000000 ? (int)s : -1;
        }
    }
    if (r->content_bytes < 0) return malformed(msg, cap, "no Content-Length");
    r->total_bytes = r->head_bytes + (size_t)r->content_bytes;
    return n >= r->total_bytes ? HS_SOAK_PARSE_DONE : HS_SOAK_PARSE_MORE;
}

static size_t count(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle), c = 0;
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) c++;
    return c;
}

static bool starts(const char *s, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && !memcmp(s, prefix, k);
}

bool hs_soak_body_ok(enum hs_soak_endpoint ep, const char *body, size_t n, int items)
{
    if (items < 1) return false;
    switch (ep) {
    case HS_SOAK_EP_OPENAI:
        return starts(body, n, "{\"object\":\"list\",\"data\":[") && n && body[n - 1] == '}' &&
               count(body, n, "\"index\":") == (size_t)items;
    case HS_SOAK_EP_TEI:
        return starts(body, n, "[[") && n >= 4 && body[n - 1] == ']' && body[n - 2] == ']' &&
               count(body, n, "[") == (size_t)items + 1;
    case HS_SOAK_EP_PREDICT:
        return starts(body, n, "[") && n && body[n - 1] == ']' && count(body, n, "\"label\":") &&
               count(body, n, "[{") == (size_t)items;
    case HS_SOAK_EP_TOKENIZE:
        return starts(body, n, "[[{") && n && body[n - 1] == ']' &&
               count(body, n, "[{") == (size_t)items;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------------------------------------
 * ids
 */

int hs_soak_idset_add(struct hs_soak_idset *s, uint64_t id)
{
    if (id == 0 || id > HS_SOAK_ID_MAX) return -1;
    size_t w = (size_t)(id >> 6);
    if (w >= s->words) {
        size_t words = s->words ? s->words : 1024;
        while (words <= w) words *= 2;
        uint64_t *nb = hs_malloc(words * sizeof *nb);
        if (!nb) return -1;
        if (s->words) memcpy(nb, s->bits, s->words * sizeof *nb);
        memset(nb + s->words, 0, (words - s->words) * sizeof *nb);
        hs_free(s->bits);
        s->bits = nb;
        s->words = words;
    }
    uint64_t bit = 1ull << (id & 63);
    if (s->bits[w] & bit) return 0;
    s->bits[w] |= bit;
    return 1;
}

void hs_soak_idset_free(struct hs_soak_idset *s)
{
    hs_free(s->bits);
    s->bits = NULL;
    s->words = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Prometheus text
 */

/* Does the label set [l, l_end) ("k1="v1",k2="v2"") hold the pair [pair, pair_end)? */
static bool has_pair(const char *l, const char *l_end, const char *pair, size_t pair_len)
{
    for (const char *p = l; p + pair_len <= l_end; p++) {
        if ((p == l || p[-1] == ',') && !memcmp(p, pair, pair_len) &&
            (p + pair_len == l_end || p[pair_len] == ','))
            return true;
    }
    return false;
}

static bool labels_match(const char *l, const char *l_end, const char *want)
{
    if (!want) return true;
    const char *p = want;
    while (*p) {
        const char *e = strchr(p, ',');
        /* a comma inside a quoted value does not end the pair */
        const char *q = strchr(p, '"');
        if (q && e && q < e) {
            const char *q2 = strchr(q + 1, '"');
            e = q2 ? strchr(q2, ',') : NULL;
        }
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len && !has_pair(l, l_end, p, len)) return false;
        p += len + (e ? 1 : 0);
    }
    return true;
}

/* Walks the samples of `name`: for each, calls fn with its label set and value. */
static void each_sample(const char *text, const char *name,
                        void (*fn)(void *ctx, const char *l, const char *l_end, double v),
                        void *ctx)
{
    size_t k = strlen(name);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        const char *end = nl ? nl : line + strlen(line);
        if (*line != '#' && (size_t)(end - line) > k && !memcmp(line, name, k) &&
            (line[k] == '{' || line[k] == ' ')) {
            const char *l = line + k, *l_end = l, *v = l;
            if (*l == '{') {
                l_end = memchr(l, '}', (size_t)(end - l));
                if (l_end) {
                    v = l_end + 1;
                    l++;
                }
            }
            if (l_end) {
                char *stop;
                double val = strtod(v, &stop);
                if (stop != v) fn(ctx, l, l_end, val);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

struct sum_ctx {
    const char *want;
    double sum;
    bool found;
};

static void sum_fn(void *ctx, const char *l, const char *l_end, double v)
{
    struct sum_ctx *c = ctx;
    if (!labels_match(l, l_end, c->want)) return;
    c->sum += v;
    c->found = true;
}

double hs_soak_metric_sum(const char *text, const char *name, const char *labels, bool *found)
{
    struct sum_ctx c = {.want = labels && *labels ? labels : NULL};
    each_sample(text, name, sum_fn, &c);
    if (found) *found = c.found;
    return c.sum;
}

struct each_ctx {
    const char *label;
    void (*fn)(void *ctx, const char *label_value, double v);
    void *ctx;
};

static void each_fn(void *ctx, const char *l, const char *l_end, double v)
{
    struct each_ctx *c = ctx;
    size_t k = strlen(c->label);
    for (const char *p = l; p + k + 2 <= l_end; p++) {
        if ((p == l || p[-1] == ',') && !memcmp(p, c->label, k) && p[k] == '=' && p[k + 1] == '"') {
            const char *s = p + k + 2, *e = memchr(s, '"', (size_t)(l_end - s));
            if (!e) return;
            char val[64];
            size_t n = (size_t)(e - s) < sizeof val - 1 ? (size_t)(e - s) : sizeof val - 1;
            memcpy(val, s, n);
            val[n] = 0;
            c->fn(c->ctx, val, v);
            return;
        }
    }
}

void hs_soak_metric_each(const char *text, const char *name, const char *label,
                         void (*fn)(void *ctx, const char *label_value, double v), void *ctx)
{
    struct each_ctx c = {.label = label, .fn = fn, .ctx = ctx};
    each_sample(text, name, each_fn, &c);
}

/* ---------------------------------------------------------------------------------------------
 * profile and histogram
 */

double hs_soak_load_factor(double t_s, double period_s, double lo, double hi)
{
    if (period_s <= 0) return lo;
    double phase = fmod(t_s, period_s) / period_s;
    return lo + (hi - lo) * 0.5 * (1.0 - cos(2.0 * M_PI * phase));
}

void hs_soak_hist_add(struct hs_soak_hist *h, double ms)
{
    double us = ms * 1000.0;
    int i = us <= 1.0 ? 0 : (int)floor(4.0 * log2(us));
    if (i < 0) i = 0;
    if (i >= HS_SOAK_HIST_BUCKETS) i = HS_SOAK_HIST_BUCKETS - 1;
    h->b[i]++;
    h->n++;
    if (ms > h->max_ms) h->max_ms = ms;
}

double hs_soak_hist_pct(const struct hs_soak_hist *h, double p)
{
    if (!h->n) return 0;
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->n);
    if (rank < 1) rank = 1;
    uint64_t cum = 0;
    for (int i = 0; i < HS_SOAK_HIST_BUCKETS; i++) {
        cum += h->b[i];
        if (cum >= rank) {
            double ub = pow(2.0, (i + 1) / 4.0) / 1000.0;
            return ub < h->max_ms ? ub : h->max_ms;
        }
    }
    return h->max_ms;
}
