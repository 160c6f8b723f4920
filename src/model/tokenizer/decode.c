/* hetserve — tokenizer.json decoders (one table row per "type") and hs_tok_decode.
 *
 * As HF's decode_chain, every decoder maps the list of token strings to a new list; the result
 * is their concatenation.
 */
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

hs_status tk_pattern_load(struct tk_loader *ld, json_t *o, struct tk_pattern *p);

static char *dup_n(struct tk_arena *a, const char *s, size_t n)
{
    char *d = tk_alloc(a, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Appends to a growing arena string. */
struct sbuf {
    char *s;
    size_t n, cap;
    struct tk_arena *a;
};

static bool sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *x = tk_alloc(b->a, cap);
        if (!x) return false;
        if (b->n) memcpy(x, b->s, b->n);
        b->s = x;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return true;
}

/* String::from_utf8_lossy: each maximal invalid prefix becomes U+FFFD. */
static bool put_lossy(struct sbuf *b, const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t nc, bad;
        const char *why;
        if (tk_utf8_validate(s + i, n - i, &nc, &bad, &why))
            return sb_put(b, (const char *)s + i, n - i);
        if (!sb_put(b, (const char *)s + i, bad)) return false;
        i += bad;
        /* length of the valid prefix of the broken sequence */
        unsigned c = s[i];
        size_t need = c >= 0xF0 && c < 0xF5 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : 0;
        size_t k = 1;
        if (need) {
            unsigned lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
            if (i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi) {
                k = 2;
                while (k <= need && i + k < n && (s[i + k] & 0xC0) == 0x80) k++;
            }
        }
        if (!sb_put(b, "\xEF\xBF\xBD", 3)) return false;
        i += k;
    }
    return true;
}

/* ---- decoders ------------------------------------------------------------------------------ */

struct wp_ctx {
    char prefix[64];
    bool cleanup;
};

static hs_status wp_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct wp_ctx *w = hs_calloc(1, sizeof *w);
    if (!w) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const char *p = "##";
    w->cleanup = true;
    hs_status st = tk_get_str(ld, o, "prefix", &p);
    if (!st) st = tk_get_bool(ld, o, "cleanup", &w->cleanup);
    if (!st && strlen(p) >= sizeof w->prefix)
        st = tk_fail(ld, HS_STATUS_CORRUPT, ".prefix is too long");
    if (st) {
        hs_free(w);
        return st;
    }
    strcpy(w->prefix, p);
    *ctx = w;
    return HS_STATUS_OK;
}

static bool replace_all(struct tk_arena *a, char **s, size_t *n, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    if (!strstr(*s, from)) return true;
    struct sbuf b = {.a = a};
    const char *p = *s, *end = *s + *n;
    while (p < end) {
        const char *q = strstr(p, from);
        if (!q) break;
        if (!sb_put(&b, p, (size_t)(q - p)) || !sb_put(&b, to, tl)) return false;
        p = q + fl;
    }
    if (!sb_put(&b, p, (size_t)(end - p))) return false;
    *s = b.s ? b.s : dup_n(a, "", 0);
    *n = b.n;
    return *s != NULL;
}

static hs_status wp_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct wp_ctx *w = ctx;
    size_t pl = strlen(w->prefix);
    static const char *const clean[][2] = {{" .", "."},     {" ?", "?"},           {" !", "!"},
                                           {" ,", ","},     {" ' ", "'"},          {" n't", "n't"},
                                           {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
                                           {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t i = 0; i < t->n; i++) {
        if (i > 0) {
            if (t->len[i] >= pl && memcmp(t->s[i], w->prefix, pl) == 0) {
                t->s[i] += pl;
                t->len[i] -= pl;
            } else {
                struct sbuf b = {.a = a};
                if (!sb_put(&b, " ", 1) || !sb_put(&b, t->s[i], t->len[i]))
                    return HS_STATUS_NO_MEMORY;
                t->s[i] = b.s;
                t->len[i] = b.n;
            }
        }
        if (w->cleanup)
            for (size_t k = 0; k < sizeof clean / sizeof clean[0]; k++)
                if (!replace_all(a, &t->s[i], &t->len[i], clean[k][0], clean[k][1]))
                    return HS_STATUS_NO_MEMORY;
    }
    return HS_STATUS_OK;
}

static hs_status none_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = NULL;
    return HS_STATUS_OK;
}

static hs_status bl_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    size_t total = 0;
    for (size_t i = 0; i < t->n; i++) total += t->len[i];
    unsigned char *bytes = tk_alloc(a, total + 1);
    if (!bytes) return HS_STATUS_NO_MEMORY;
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        const unsigned char *p = (const unsigned char *)t->s[i], *end = p + t->len[i];
        size_t w0 = w;
        bool all = true;
        while (p < end) {
            int b = tk_char_byte(tk_utf8_next(&p));
            if (b < 0) {
                all = false;
                break;
            }
            bytes[w++] = (unsigned char)b;
        }
        if (!all) {
            w = w0;
            memcpy(bytes + w, t->s[i], t->len[i]);
            w += t->len[i];
        }
    }
    struct sbuf b = {.a = a};
    if (!put_lossy(&b, bytes, w)) return HS_STATUS_NO_MEMORY;
    t->n = 1;
    t->s[0] = b.s ? b.s : dup_n(a, "", 0);
    t->len[0] = b.n;
    return t->s[0] ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

struct meta_ctx {
    char rep[8];
    bool prepend;
};

static hs_status meta_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct meta_ctx *m = hs_calloc(1, sizeof *m);
    if (!m) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const char *rep = "\xE2\x96\x81", *scheme = NULL;
    bool add_prefix = true;
    hs_status st = tk_get_str(ld, o, "replacement", &rep);
    if (!st) st = tk_get_str(ld, o, "prepend_scheme", &scheme);
    if (!st) st = tk_get_bool(ld, o, "add_prefix_space", &add_prefix);
    if (!st && (strlen(rep) == 0 || strlen(rep) >= sizeof m->rep))
        st = tk_fail(ld, HS_STATUS_CORRUPT, ".replacement must be one character");
    if (st) {
        hs_free(m);
        return st;
    }
    strcpy(m->rep, rep);
    m->prepend = scheme ? strcmp(scheme, "never") != 0 : add_prefix;
    *ctx = m;
    return HS_STATUS_OK;
}

static hs_status meta_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct meta_ctx *m = ctx;
    for (size_t i = 0; i < t->n; i++) {
        if (!replace_all(a, &t->s[i], &t->len[i], m->rep, " ")) return HS_STATUS_NO_MEMORY;
        if (i == 0 && m->prepend && t->len[i] > 0 && t->s[i][0] == ' ') {
            t->s[i]++;
            t->len[i]--;
        }
    }
    return HS_STATUS_OK;
}

struct bpe_ctx {
    char suffix[64];
};

static hs_status bpe_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct bpe_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const char *s = "</w>";
    hs_status st = tk_get_str(ld, o, "suffix", &s);
    if (!st && strlen(s) >= sizeof b->suffix)
        st = tk_fail(ld, HS_STATUS_CORRUPT, ".suffix is too long");
    if (st) {
        hs_free(b);
        return st;
    }
    strcpy(b->suffix, s);
    *ctx = b;
    return HS_STATUS_OK;
}

static hs_status bpe_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct bpe_ctx *b = ctx;
    if (!b->suffix[0]) return HS_STATUS_OK;
    for (size_t i = 0; i < t->n; i++)
        if (!replace_all(a, &t->s[i], &t->len[i], b->suffix, i + 1 == t->n ? "" : " "))
            return HS_STATUS_NO_MEMORY;
    return HS_STATUS_OK;
}

static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static hs_status bf_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    size_t w = 0;
    unsigned char *pend = tk_alloc(a, t->n + 1);
    if (!pend) return HS_STATUS_NO_MEMORY;
    size_t np = 0;
    for (size_t i = 0; i <= t->n; i++) {
        int b = i < t->n ? byte_token(t->s[i], t->len[i]) : -1;
        if (b >= 0) {
            pend[np++] = (unsigned char)b;
            continue;
        }
        if (np > 0) {
            size_t nc, bad;
            const char *why;
            struct sbuf sb = {.a = a};
            bool ok;
            if (tk_utf8_validate(pend, np, &nc, &bad, &why)) {
                ok = sb_put(&sb, (const char *)pend, np);
            } else {
                ok = true;
                for (size_t k = 0; k < np && ok; k++) ok = sb_put(&sb, "\xEF\xBF\xBD", 3);
            }
            if (!ok) return HS_STATUS_NO_MEMORY;
            t->s[w] = sb.s;
            t->len[w] = sb.n;
            w++;
            np = 0;
        }
        if (i < t->n) {
            t->s[w] = t->s[i];
            t->len[w] = t->len[i];
            w++;
        }
    }
    t->n = w;
    return HS_STATUS_OK;
}

static hs_status fuse_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    struct sbuf b = {.a = a};
    for (size_t i = 0; i < t->n; i++)
        if (!sb_put(&b, t->s[i], t->len[i])) return HS_STATUS_NO_MEMORY;
    t->n = 1;
    t->s[0] = b.s ? b.s : dup_n(a, "", 0);
    t->len[0] = b.n;
    return t->s[0] ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

struct strip_ctx {
    int32_t content;
    long long start, stop;
};

static hs_status strip_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct strip_ctx *s = hs_calloc(1, sizeof *s);
    if (!s) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const char *c = " ";
    hs_status st = tk_get_str(ld, o, "content", &c);
    if (!st) st = tk_get_int(ld, o, "start", &s->start);
    if (!st) st = tk_get_int(ld, o, "stop", &s->stop);
    if (!st && !*c) st = tk_fail(ld, HS_STATUS_CORRUPT, ".content must be one character");
    if (st) {
        hs_free(s);
        return st;
    }
    const unsigned char *p = (const unsigned char *)c;
    s->content = tk_utf8_next(&p);
    *ctx = s;
    return HS_STATUS_OK;
}

static hs_status strip_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct strip_ctx *sc = ctx;
    char u[4];
    size_t ul = (size_t)tk_utf8_put(sc->content, u);
    for (size_t i = 0; i < t->n; i++) {
        for (long long k = 0; k < sc->start && t->len[i] >= ul && memcmp(t->s[i], u, ul) == 0;
             k++) {
            t->s[i] += ul;
            t->len[i] -= ul;
        }
        for (long long k = 0;
             k < sc->stop && t->len[i] >= ul && memcmp(t->s[i] + t->len[i] - ul, u, ul) == 0; k++)
            t->len[i] -= ul;
        t->s[i] = dup_n(a, t->s[i], t->len[i]);
        if (!t->s[i]) return HS_STATUS_NO_MEMORY;
    }
    return HS_STATUS_OK;
}

struct repl_ctx {
    struct tk_pattern pat;
    char *content;
};

static void repl_free(void *ctx)
{
    struct repl_ctx *r = ctx;
    if (!r) return;
    tk_pattern_release(&r->pat);
    hs_free(r->content);
    hs_free(r);
}

static hs_status repl_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct repl_ctx *r = hs_calloc(1, sizeof *r);
    if (!r) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const char *c = NULL;
    hs_status st = tk_pattern_load(ld, o, &r->pat);
    if (!st) st = tk_get_str(ld, o, "content", &c);
    if (!st && !c) st = tk_fail(ld, HS_STATUS_CORRUPT, ".content is missing");
    if (!st && !(r->content = hs_strdup(c))) st = tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    if (st) {
        repl_free(r);
        return st;
    }
    *ctx = r;
    return HS_STATUS_OK;
}

static hs_status repl_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct repl_ctx *r = ctx;
    for (size_t i = 0; i < t->n; i++) {
        /* as code points, through the same matcher as the Replace normalizer */
        const unsigned char *p = (const unsigned char *)t->s[i];
        size_t nc, bad;
        const char *why;
        if (!tk_utf8_validate(p, t->len[i], &nc, &bad, &why)) continue;
        struct tk_nstr ns = {.n = nc};
        ns.cp = tk_alloc(a, (nc + 1) * sizeof *ns.cp);
        if (!ns.cp) return HS_STATUS_NO_MEMORY;
        for (size_t k = 0; k < nc; k++) ns.cp[k] = tk_utf8_next(&p);
        struct tk_matches m = {0};
        hs_status st = tk_pattern_find(a, &r->pat, &ns, &m);
        if (st) return st;
        struct sbuf b = {.a = a};
        for (size_t k = 0; k < m.n; k++) {
            if (m.v[k].m) {
                if (!sb_put(&b, r->content, strlen(r->content))) return HS_STATUS_NO_MEMORY;
                continue;
            }
            for (size_t j = m.v[k].b; j < m.v[k].e; j++) {
                char u[4];
                if (!sb_put(&b, u, (size_t)tk_utf8_put(ns.cp[j], u))) return HS_STATUS_NO_MEMORY;
            }
        }
        t->s[i] = b.s ? b.s : dup_n(a, "", 0);
        t->len[i] = b.n;
        if (!t->s[i]) return HS_STATUS_NO_MEMORY;
    }
    return HS_STATUS_OK;
}

static hs_status seq_item_load(struct tk_loader *ld, json_t *o, const void *arg, void *item)
{
    (void)arg;
    return tk_decoder_load(ld, o, item);
}

static void seq_item_release(void *item)
{
    tk_decoder_release(item);
}

static const struct tk_seq_kind seq_kind = {"decoders", sizeof(struct tk_decoder), seq_item_load,
                                            seq_item_release};

static hs_status seq_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    return tk_seq_load(ld, o, &seq_kind, NULL, ctx);
}

static hs_status seq_run(const void *ctx, struct tk_arena *a, struct tk_strs *t)
{
    const struct tk_seq *s = ctx;
    const struct tk_decoder *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        hs_status st = v[i].kind->run(v[i].ctx, a, t);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static const struct tk_decoder_kind kinds[] = {
    {"WordPiece", wp_load, wp_run, hs_free},      {"ByteLevel", none_load, bl_run, NULL},
    {"Metaspace", meta_load, meta_run, hs_free},  {"BPEDecoder", bpe_load, bpe_run, hs_free},
    {"ByteFallback", none_load, bf_run, NULL},    {"Fuse", none_load, fuse_run, NULL},
    {"Strip", strip_load, strip_run, hs_free},    {"Replace", repl_load, repl_run, repl_free},
    {"Sequence", seq_load, seq_run, tk_seq_free},
};

hs_status tk_decoder_load(struct tk_loader *ld, json_t *o, struct tk_decoder *out)
{
    memset(out, 0, sizeof *out);
    hs_status st;
    const struct tk_decoder_kind *k =
        tk_kind_find(ld, o, kinds, sizeof kinds / sizeof kinds[0], sizeof kinds[0], "decoder", &st);
    if (!k) return st;
    st = tk_kind_loaded(k->load(ld, o, &out->ctx), k->free, &out->ctx);
    if (st == HS_STATUS_OK) out->kind = k;
    return st;
}

void tk_decoder_release(struct tk_decoder *d)
{
    if (d->kind && d->kind->free) d->kind->free(d->ctx);
    memset(d, 0, sizeof *d);
}

hs_status hs_tok_decode(const struct hs_tok *tok, const int32_t *ids, size_t n,
                        bool skip_special_tokens, char **out, size_t *out_len, struct hs_error *err)
{
    if (!tok || (!ids && n) || !out || !out_len)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "decode: NULL argument");
    *out = NULL;
    struct tk_arena a = {0};
    struct tk_strs t = {0};
    hs_status st = HS_STATUS_OK;
    t.s = tk_alloc(&a, (n + 1) * sizeof *t.s);
    t.len = tk_alloc(&a, (n + 1) * sizeof *t.len);
    if (!t.s || !t.len) {
        st = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory to decode");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tk_id_text(tok, ids[i], &len);
        for (size_t k = 0; k < tok->n_added; k++)
            if (tok->added[k].id == ids[i]) { /* HF decodes an added token as normalized */
                s = tok->added[k].norm;
                len = tok->added[k].norm_len;
                break;
            }
        if (!s) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "decode: id %d at index %zu is not in "
                              "the vocabulary",
                              ids[i], i);
            goto done;
        }
        if (skip_special_tokens && hs_tok_is_special(tok, ids[i])) continue;
        t.s[t.n] = (char *)s;
        t.len[t.n] = len;
        t.n++;
    }
    struct sbuf b = {.a = &a};
    if (tok->decoder.kind) {
        if ((st = tok->decoder.kind->run(tok->decoder.ctx, &a, &t))) {
            st = hs_error_set(err, st, "no memory to decode");
            goto done;
        }
        for (size_t i = 0; i < t.n; i++)
            if (!sb_put(&b, t.s[i], t.len[i])) goto oom;
    } else {
        for (size_t i = 0; i < t.n; i++)
            if ((i && !sb_put(&b, " ", 1)) || !sb_put(&b, t.s[i], t.len[i])) goto oom;
    }
    *out = hs_malloc(b.n + 1);
    if (!*out) goto oom;
    if (b.n) memcpy(*out, b.s, b.n);
    (*out)[b.n] = '\0';
    *out_len = b.n;
    goto done;
oom:
    st = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory to decode");
done:
    tk_arena_free(&a);
    return st;
}
