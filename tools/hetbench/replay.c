#include "hetbench/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "server/capture.h"

/* Encoded length of text (ids with [CLS] and [SEP]); -1 on error. */
static int count_tokens(const struct hs_tokenizer *tok, const char *text, size_t len)
{
    int32_t ids[8];
    int n = 0, full = 0;
    /* a small capacity: n_full reports the whole length anyway */
    if (hs_tokenizer_encode(tok, text, len, ids, 8, &n, &full, NULL) != HS_STATUS_OK) return -1;
    return full;
}

hs_status hs_bench_text_for_tokens(const struct hs_tokenizer *tok, const struct hs_bench_words *w,
                                   struct hs_bench_rng *r, int tokens, struct hs_bench_buf *out,
                                   int *achieved)
{
    /* hs_bench_text_gen(k) is k words and a '.': k + 1 pieces when every word is one piece (the
     * built-in words are); a word that splits is made up for by trying again with fewer */
    long words = tokens - 3 > 0 ? tokens - 3 : 0;
    struct hs_bench_buf t = {0}, best = {0};
    int best_n = -1;
    hs_status st = HS_STATUS_OK;
    for (int tries = 0; tries < 8; tries++) {
        t.len = 0;
        if ((st = hs_bench_text_gen(w, r, (uint32_t)words, &t))) break;
        int n = count_tokens(tok, t.p, t.len);
        if (n < 0) {
            st = HS_STATUS_INTERNAL;
            break;
        }
        if (best_n < 0 || abs(n - tokens) < abs(best_n - tokens)) {
            best.len = 0;
            if ((st = hs_bench_buf_append(&best, t.p, t.len))) break;
            best_n = n;
        }
        if (n == tokens) break;
        words += tokens - n;
        if (words < 0) words = 0;
    }
    if (!st) st = hs_bench_buf_append(out, best.p, best.len);
    *achieved = best_n;
    hs_bench_buf_free(&t);
    hs_bench_buf_free(&best);
    return st;
}

void hs_bench_replay_free(struct hs_bench_replay *r)
{
    for (size_t i = 0; i < r->n; i++) {
        hs_free(r->req[i].endpoint);
        hs_free(r->req[i].body);
    }
    hs_free(r->req);
    memset(r, 0, sizeof *r);
}

static int class_of(struct hs_bench_replay *r, const char *endpoint)
{
    char name[HS_BENCH_NAME_MAX];
    size_t o = 0;
    for (const char *p = endpoint + 1; *p && o < sizeof name - 1; p++)
        name[o++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                            (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'
                        ? *p
                        : '_';
    name[o] = '\0';
    if (!o) snprintf(name, sizeof name, "root");
    for (int i = 0; i < r->n_classes; i++)
        if (!strcmp(r->class_name[i], name)) return i;
    if (r->n_classes == HS_BENCH_MIX_MAX) return -1;
    memcpy(r->class_name[r->n_classes], name, strlen(name) + 1);
    return r->n_classes++;
}

static int by_time(const void *a, const void *b)
{
    const struct hs_bench_replay_req *x = a, *y = b;
    return (x->at_ns > y->at_ns) - (x->at_ns < y->at_ns);
}

/* The body of one captured request. */
static hs_status build(struct hs_bench_replay *r, const struct hs_capture_entry *e,
                       const struct hs_tokenizer *tok, const struct hs_bench_words *w,
                       struct hs_bench_rng *rng, struct hs_bench_buf *b)
{
    bool openai = !strcmp(e->endpoint, "/v1/embeddings") || !strcmp(e->endpoint, "/embeddings");
    hs_status st = hs_bench_buf_puts(b, "{");
    if (openai && e->model[0]) {
        st |= hs_bench_buf_puts(b, "\"model\":");
        st |= hs_bench_buf_append_json_str(b, e->model);
        st |= hs_bench_buf_puts(b, ",");
    }
    st |= hs_bench_buf_puts(b, openai ? "\"input\":[" : "\"inputs\":[");
    struct hs_bench_buf t = {0};
    for (int i = 0; i < e->n_inputs && !st; i++) {
        if (i) st |= hs_bench_buf_puts(b, ",");
        if (e->texts) {
            st |= hs_bench_buf_append_json_str(b, e->texts[i]);
            r->texts_captured++;
            continue;
        }
        int got = 0;
        t.len = 0;
        st |= hs_bench_text_for_tokens(tok, w, rng, e->tokens[i], &t, &got);
        if (st) break;
        st |= hs_bench_buf_append_json_str(b, t.p);
        int d = abs(got - e->tokens[i]);
        if (d == 0)
            r->gen_exact++;
        else if (d == 1)
            r->gen_off_by_one++;
        else
            r->gen_worse++;
        if (d > r->gen_max_diff) r->gen_max_diff = d;
    }
    hs_bench_buf_free(&t);
    st |= hs_bench_buf_puts(b, "]");
    if (e->priority[0]) {
        char f[64];
        snprintf(f, sizeof f, ",\"priority\":\"%s\"", e->priority);
        st |= hs_bench_buf_puts(b, f);
    }
    if (e->timeout_ms > 0) {
        char f[64];
        snprintf(f, sizeof f, ",\"timeout_ms\":%lld", e->timeout_ms);
        st |= hs_bench_buf_puts(b, f);
    }
    if (e->truncate) st |= hs_bench_buf_puts(b, ",\"truncate\":true");
    st |= hs_bench_buf_puts(b, "}");
    return st ? HS_STATUS_NO_MEMORY : HS_STATUS_OK;
}

hs_status hs_bench_replay_load(const char *path, const struct hs_tokenizer *tok, double speed,
                               uint64_t seed, struct hs_bench_replay *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "cannot open '%s'", path);
    struct hs_bench_words w;
    hs_bench_words_builtin(&w);
    struct hs_bench_rng rng;
    hs_bench_rng_seed(&rng, seed);
    size_t cap = 0;
    double t0 = -1;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    long lineno = 0;
    hs_status st = HS_STATUS_OK;
    while (!st && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) continue;
        struct hs_capture_entry e;
        struct hs_error le = {0};
        if (hs_capture_parse_line(line, (size_t)len, &e, &le)) {
            st = hs_error_set(err, le.status ? le.status : HS_STATUS_INVALID_INPUT, "%s:%ld: %s",
                              path, lineno, le.msg);
        } else if (e.n_inputs == 0 && !e.body) {
            out->skipped++;
            if (e.body_bytes > 0) out->no_bodies++;
        } else if (!e.texts && !e.body && !tok) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "%s:%ld: the line has no texts: generating them needs the model's "
                              "vocabulary (--vocab)",
                              path, lineno);
        } else {
            if (out->n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                struct hs_bench_replay_req *nr = hs_realloc(out->req, nc * sizeof *nr);
                if (!nr) st = hs_error_set(err, HS_STATUS_NO_MEMORY, "replay");
                if (nr) out->req = nr, cap = nc;
            }
            int cls = st ? 0 : class_of(out, e.endpoint);
            if (!st && cls < 0)
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%ld: more than %d endpoints",
                                  path, lineno, HS_BENCH_MIX_MAX);
            struct hs_bench_buf b = {0};
            if (!st && e.body) /* the body as it came (an image): sent as captured */
                st = hs_bench_buf_append(&b, (const char *)e.body, e.body_len)
                         ? hs_error_set(err, HS_STATUS_NO_MEMORY, "replay")
                         : HS_STATUS_OK;
            else if (!st)
                st = build(out, &e, tok, &w, &rng, &b);
            if (!st) {
                struct hs_bench_replay_req *q = &out->req[out->n];
                q->endpoint = hs_malloc(strlen(e.endpoint) + 1);
                if (!q->endpoint) {
                    st = hs_error_set(err, HS_STATUS_NO_MEMORY, "replay");
                    hs_bench_buf_free(&b);
                } else {
                    memcpy(q->endpoint, e.endpoint, strlen(e.endpoint) + 1);
                    q->body = b.p;
                    q->body_len = b.len;
                    q->cls = cls;
                    q->items = e.body ? 1u : (unsigned)e.n_inputs;
                    q->kind = e.body ? hs_bench_body_kind_of_ctype(e.content_type[0]
                                                                       ? e.content_type
                                                                       : "application/octet-stream")
                                     : HS_BENCH_BODY_JSON;
                    q->at_ns = (int64_t)(e.offset_ms * 1e6); /* made relative below */
                    if (t0 < 0 || e.offset_ms < t0) t0 = e.offset_ms;
                    out->n++;
                }
            } else {
                hs_bench_buf_free(&b);
                if (st == HS_STATUS_NO_MEMORY) hs_error_set(err, st, "replay");
            }
        }
        hs_capture_entry_free(&e);
    }
    free(line); /* getline's buffer */
    fclose(f);
    if (st) return st;
    if (!out->n)
        return out->no_bodies
                   ? hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "%s: no request to replay (the bodies of %zu were "
                                  "not captured: server.capture.texts)",
                                  path, out->no_bodies)
                   : hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: no request to replay", path);
    /* lines are written as requests finish: arrivals are put back in order */
    int64_t origin = (int64_t)(t0 * 1e6);
    for (size_t i = 0; i < out->n; i++)
        out->req[i].at_ns = (int64_t)((double)(out->req[i].at_ns - origin) / speed);
    qsort(out->req, out->n, sizeof *out->req, by_time);
    return HS_STATUS_OK;
}
