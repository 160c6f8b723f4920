#include "workload.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/file.h"

/* ---- RNG: xoshiro256** seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void hs_bench_rng_seed(struct hs_bench_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t hs_bench_rng_next(struct hs_bench_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double hs_bench_rng_uniform(struct hs_bench_rng *r)
{
    return (double)(hs_bench_rng_next(r) >> 11) * 0x1.0p-53;
}

uint32_t hs_bench_rng_range(struct hs_bench_rng *r, uint32_t lo, uint32_t hi)
{
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)hi - lo + 1;
    return lo + (uint32_t)(hs_bench_rng_next(r) % span); /* bias < 2^-32: irrelevant here */
}

double hs_bench_rng_exp(struct hs_bench_rng *r, double rate)
{
    /* 1 - u is in (0, 1], so the log is finite. */
    return -log(1.0 - hs_bench_rng_uniform(r)) / rate;
}

/* ---- parsing helpers ---- */

static int pick_weighted(const double *w, int n, double total, struct hs_bench_rng *r)
{
    double x = hs_bench_rng_uniform(r) * total;
    for (int i = 0; i < n; i++) {
        if (x < w[i]) return i;
        x -= w[i];
    }
    return n - 1;
}

static bool parse_double(const char *s, size_t n, double *out)
{
    char tmp[64], *end;
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double v = strtod(tmp, &end);
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_u32(const char *s, size_t n, uint32_t *out)
{
    if (n == 0 || n > 9) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= HS_BENCH_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return false;
    return true;
}

hs_status hs_bench_lengths_parse(const char *spec, struct hs_bench_lengths *out,
                                 struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "empty --lengths");
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (out->n == HS_BENCH_MIX_MAX)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--lengths: more than %d classes",
                                HS_BENCH_MIX_MAX);
        struct hs_bench_length_class *c = &out->c[out->n];
        const char *item = p, *stop = p + n;
        const char *eq = memchr(item, '=', n);
        if (eq) {
            if (!valid_name(item, (size_t)(eq - item)))
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "--lengths: bad class name in '%.*s'", (int)n, item);
            memcpy(c->name, item, (size_t)(eq - item));
            item = eq + 1;
        }
        const char *colon = memchr(item, ':', (size_t)(stop - item));
        const char *dash = colon ? memchr(colon, '-', (size_t)(stop - colon)) : NULL;
        bool ok = colon && parse_double(item, (size_t)(colon - item), &c->weight) && c->weight > 0;
        if (ok && dash) {
            ok = parse_u32(colon + 1, (size_t)(dash - colon - 1), &c->words_min) &&
                 parse_u32(dash + 1, (size_t)(stop - dash - 1), &c->words_max);
        } else if (ok) {
            ok = parse_u32(colon + 1, (size_t)(stop - colon - 1), &c->words_min);
            c->words_max = c->words_min;
        }
        if (!ok || c->words_min < 1 || c->words_max < c->words_min)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "--lengths: '%.*s' is not WEIGHT:MIN-MAX (weight > 0, "
                                "1 <= MIN <= MAX words)",
                                (int)n, p);
        if (!eq) {
            if (c->words_min == c->words_max)
                snprintf(c->name, sizeof c->name, "%u", c->words_min);
            else
                snprintf(c->name, sizeof c->name, "%u-%u", c->words_min, c->words_max);
        }
        for (int i = 0; i < out->n; i++)
            if (!strcmp(out->c[i].name, c->name))
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "--lengths: class '%s' given twice", c->name);
        out->weight_total += c->weight;
        out->n++;
        p = end ? end + 1 : p + n;
        if (end && !*p)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "--lengths: trailing comma");
    }
    return HS_STATUS_OK;
}

int hs_bench_lengths_pick(const struct hs_bench_lengths *l, struct hs_bench_rng *r)
{
    double w[HS_BENCH_MIX_MAX];
    for (int i = 0; i < l->n; i++) w[i] = l->c[i].weight;
    return pick_weighted(w, l->n, l->weight_total, r);
}

hs_status hs_bench_mix_parse(const char *spec, struct hs_bench_mix *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "empty mix");
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (out->n == HS_BENCH_MIX_MAX)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "mix: more than %d entries",
                                HS_BENCH_MIX_MAX);
        const char *colon = memchr(p, ':', n);
        size_t name_n = colon ? (size_t)(colon - p) : n;
        double w = 1.0;
        if (!valid_name(p, name_n) ||
            (colon && (!parse_double(colon + 1, n - name_n - 1, &w) || w <= 0)))
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "mix: '%.*s' is not NAME[:WEIGHT] (weight > 0)", (int)n, p);
        memcpy(out->name[out->n], p, name_n);
        out->name[out->n][name_n] = 0;
        out->weight[out->n] = w;
        out->weight_total += w;
        out->n++;
        p = end ? end + 1 : p + n;
        if (end && !*p) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "mix: trailing comma");
    }
    return HS_STATUS_OK;
}

int hs_bench_mix_pick(const struct hs_bench_mix *m, struct hs_bench_rng *r)
{
    return pick_weighted(m->weight, m->n, m->weight_total, r);
}

/* ---- buffer ---- */

hs_status hs_bench_buf_reserve(struct hs_bench_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return HS_STATUS_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = hs_realloc(b->p, cap);
    if (!p) return HS_STATUS_NO_MEMORY;
    b->p = p;
    b->cap = cap;
    return HS_STATUS_OK;
}

hs_status hs_bench_buf_append(struct hs_bench_buf *b, const char *s, size_t n)
{
    if (hs_bench_buf_reserve(b, n)) return HS_STATUS_NO_MEMORY;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return HS_STATUS_OK;
}

hs_status hs_bench_buf_puts(struct hs_bench_buf *b, const char *s)
{
    return hs_bench_buf_append(b, s, strlen(s));
}

hs_status hs_bench_buf_append_json_str(struct hs_bench_buf *b, const char *s)
{
    if (hs_bench_buf_reserve(b, strlen(s) + 2)) return HS_STATUS_NO_MEMORY;
    if (hs_bench_buf_append(b, "\"", 1)) return HS_STATUS_NO_MEMORY;
    const char *run = s;
    for (;; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch && ch >= 0x20 && ch != '"' && ch != '\\') continue;
        if (hs_bench_buf_append(b, run, (size_t)(s - run))) return HS_STATUS_NO_MEMORY;
        if (!ch) break;
        char esc[8];
        if (ch == '"' || ch == '\\')
            snprintf(esc, sizeof esc, "\\%c", ch);
        else
            snprintf(esc, sizeof esc, "\\u%04x", ch);
        if (hs_bench_buf_puts(b, esc)) return HS_STATUS_NO_MEMORY;
        run = s + 1;
    }
    return hs_bench_buf_append(b, "\"", 1);
}

void hs_bench_buf_free(struct hs_bench_buf *b)
{
    hs_free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- words ---- */

/* Common English words, each a whole word in the BERT uncased vocabulary. */
/* clang-format off */
static const char *const builtin_words[] = {
    "the",     "of",      "and",      "to",      "in",       "is",      "was",     "for",
    "on",      "with",    "as",       "by",      "at",       "from",    "that",    "this",
    "it",      "are",     "be",       "or",      "an",       "have",    "has",     "had",
    "not",     "but",     "they",     "we",      "you",      "he",      "she",     "his",
    "her",     "their",   "our",      "one",     "two",      "three",   "first",   "new",
    "time",    "year",    "day",      "people",  "way",      "world",   "life",    "work",
    "city",    "water",   "house",    "school",  "system",   "program", "number",  "group",
    "country", "company", "market",   "music",   "game",     "team",    "family",  "story",
    "book",    "line",    "area",     "state",   "river",    "road",    "art",   "light",
    "small",   "large",   "good",     "great",   "long",     "little",  "old",     "high",
    "early",   "young",   "important","public",  "late",     "general", "full",    "local",
    "open",    "short",   "strong",   "free",    "human",    "simple",  "common",  "quick",
    "make",    "take",    "find",     "give",    "tell",     "call",    "keep",    "help",
    "show",    "move",    "play",     "run",     "live",     "hold",    "bring",   "write",
    "read",    "learn",   "change",   "follow",  "stop",     "create",  "speak",   "close",
    "walk",    "win",     "offer",    "build",   "stay",     "fall",    "reach",   "send",
    "model",   "data",    "question", "answer",  "search",   "query",   "result",  "document",
    "text",    "word",    "sentence", "language","computer", "machine", "network", "server",
    "memory",  "power",   "energy",   "science", "history",  "nature",  "health",  "food",
    "money",   "price",   "value",    "paper",   "report",   "news",    "law",     "court",
    "car",     "train",   "ship",     "plane",   "bridge",   "street",  "park",    "garden",
    "tree",    "flower",  "sea",      "mountain","island",   "forest",  "sun",     "moon",
    "star",    "night",   "morning",  "summer",  "winter",   "spring",  "color",   "red",
    "blue",    "green",   "black",    "white",   "dog",      "cat",     "horse",   "bird",
    "fish",    "animal",  "child",    "mother",  "father",   "friend",  "man",     "woman",
    "king",    "queen",   "church",   "army",    "war",      "peace",   "party",   "election",
    "government", "president", "member", "student", "teacher", "doctor", "player", "artist",
    "because", "while",   "after",    "before",  "during",   "about",   "between", "under",
    "over",    "through", "into",     "against", "without",  "within",  "very",    "also",
};
/* clang-format on */

void hs_bench_words_builtin(struct hs_bench_words *w)
{
    w->w = (const char **)builtin_words;
    w->n = sizeof builtin_words / sizeof builtin_words[0];
    w->storage = NULL;
}

static hs_status read_file(const char *path, char **data, size_t *bytes, struct hs_error *err)
{
    hs_status st = hs_read_file(path, 0, data, bytes, err);
    return st == HS_STATUS_NOT_FOUND ? HS_STATUS_IO : st;
}

hs_status hs_bench_words_load(const char *path, struct hs_bench_words *w, struct hs_error *err)
{
    memset(w, 0, sizeof *w);
    char *data;
    size_t bytes;
    hs_status st = read_file(path, &data, &bytes, err);
    if (st) return st;
    size_t cap = 0;
    for (size_t i = 0; i < bytes; i++)
        if (!isspace((unsigned char)data[i]) && (i == 0 || isspace((unsigned char)data[i - 1])))
            cap++;
    if (cap == 0) {
        hs_free(data);
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "no words in '%s'", path);
    }
    w->w = hs_malloc(cap * sizeof *w->w);
    if (!w->w) {
        hs_free(data);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "out of memory");
    }
    w->storage = data;
    for (char *tok = strtok(data, " \t\r\n\f\v"); tok; tok = strtok(NULL, " \t\r\n\f\v"))
        w->w[w->n++] = tok;
    return HS_STATUS_OK;
}

void hs_bench_words_free(struct hs_bench_words *w)
{
    if (w->storage) {
        hs_free(w->storage);
        hs_free((void *)w->w);
    }
    memset(w, 0, sizeof *w);
}

hs_status hs_bench_text_gen(const struct hs_bench_words *w, struct hs_bench_rng *r, uint32_t words,
                            struct hs_bench_buf *out)
{
    for (uint32_t i = 0; i < words; i++) {
        const char *word = w->w[hs_bench_rng_next(r) % w->n];
        if (i && hs_bench_buf_append(out, " ", 1)) return HS_STATUS_NO_MEMORY;
        if (hs_bench_buf_puts(out, word)) return HS_STATUS_NO_MEMORY;
    }
    return hs_bench_buf_append(out, ".", 1);
}

/* ---- corpus ---- */

static int corpus_class(struct hs_bench_corpus *c, const char *name, struct hs_error *err)
{
    for (int i = 0; i < c->n_classes; i++)
        if (!strcmp(c->class_name[i], name)) return i;
    if (c->n_classes == HS_BENCH_MIX_MAX) {
        hs_error_set(err, HS_STATUS_INVALID_INPUT, "corpus: more than %d tags", HS_BENCH_MIX_MAX);
        return -1;
    }
    if (!valid_name(name, strlen(name))) {
        hs_error_set(err, HS_STATUS_INVALID_INPUT,
                     "corpus: tag '%.40s' is not 1-31 characters of [A-Za-z0-9_.-]", name);
        return -1;
    }
    snprintf(c->class_name[c->n_classes], HS_BENCH_NAME_MAX, "%s", name);
    return c->n_classes++;
}

hs_status hs_bench_corpus_parse(char *data, size_t bytes, struct hs_bench_corpus *c,
                                struct hs_error *err)
{
    memset(c, 0, sizeof *c);
    c->storage = data;
    size_t lines = 1;
    for (size_t i = 0; i < bytes; i++) lines += data[i] == '\n';
    c->text = hs_malloc(lines * sizeof *c->text);
    c->cls = hs_malloc(lines * sizeof *c->cls);
    if (!c->text || !c->cls) return hs_error_set(err, HS_STATUS_NO_MEMORY, "out of memory");
    char *p = data, *end = data + bytes;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        *stop = 0;
        if (stop > p && stop[-1] == '\r') stop[-1] = 0;
        const char *tag = "all";
        char *text = p, *tab = strchr(p, '\t');
        if (tab) {
            *tab = 0;
            tag = p;
            text = tab + 1;
        }
        if (*text) {
            int k = corpus_class(c, tag, err);
            if (k < 0) return err ? err->status : HS_STATUS_INVALID_INPUT;
            c->text[c->n_texts] = text;
            c->cls[c->n_texts++] = (uint16_t)k;
            c->class_count[k]++;
        }
        p = stop + 1;
    }
    if (c->n_texts == 0) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "corpus: no texts");
    for (int k = 0; k < c->n_classes; k++) {
        c->class_members[k] = hs_malloc(c->class_count[k] * sizeof(size_t));
        if (!c->class_members[k]) return hs_error_set(err, HS_STATUS_NO_MEMORY, "out of memory");
        c->class_count[k] = 0;
    }
    for (size_t i = 0; i < c->n_texts; i++)
        c->class_members[c->cls[i]][c->class_count[c->cls[i]]++] = i;
    return HS_STATUS_OK;
}

hs_status hs_bench_corpus_load(const char *path, struct hs_bench_corpus *c, struct hs_error *err)
{
    memset(c, 0, sizeof *c);
    char *data;
    size_t bytes;
    hs_status st = read_file(path, &data, &bytes, err);
    if (st) return st;
    st = hs_bench_corpus_parse(data, bytes, c, err);
    if (st && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        hs_error_set(err, st, "%s: %s", path, msg);
    }
    return st;
}

int hs_bench_corpus_pick_class(const struct hs_bench_corpus *c, struct hs_bench_rng *r)
{
    return c->cls[hs_bench_rng_next(r) % c->n_texts];
}

size_t hs_bench_corpus_pick_index(const struct hs_bench_corpus *c, int cls, struct hs_bench_rng *r)
{
    return c->class_members[cls][hs_bench_rng_next(r) % c->class_count[cls]];
}

const char *hs_bench_corpus_pick_text(const struct hs_bench_corpus *c, int cls,
                                      struct hs_bench_rng *r)
{
    return c->text[hs_bench_corpus_pick_index(c, cls, r)];
}

void hs_bench_corpus_free(struct hs_bench_corpus *c)
{
    for (int k = 0; k < HS_BENCH_MIX_MAX; k++) hs_free(c->class_members[k]);
    hs_free((void *)c->text);
    hs_free(c->cls);
    hs_free(c->storage);
    memset(c, 0, sizeof *c);
}

/* ---- targets ---- */

bool hs_bench_host_is_loopback(const char *host)
{
    if (!host || !*host) return false;
    if (!strcasecmp(host, "localhost")) return true;
    if (!strcmp(host, "::1") || !strcmp(host, "[::1]")) return true;
    /* inet_pton accepts only strict dotted quads (no "127.1", no octal), which is what we want. */
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1) return false;
    return (ntohl(a.s_addr) >> 24) == 127;
}
