/* hetserve — tokenizer.json normalizers, one table row per "type".
 *
 * Each normalizer writes the (char, change) stream HF's does, so that tk_transform yields HF's
 * alignments (see tok-impl.h). Unicode forms keep the change of a char with it when canonical
 * ordering moves it; a composed char takes the change of its starter, consuming what the
 * combined char consumed.
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

/* A growable change stream in the arena. */
struct chs {
    struct tk_change *v;
    size_t n, cap;
    struct tk_arena *a;
};

static bool chs_push(struct chs *c, int32_t cp, int32_t change)
{
    struct tk_change *v = tk_grow(c->a, c->v, c->n, &c->cap, sizeof *v, 64);
    if (!v) return false;
    c->v = v;
    c->v[c->n++] = (struct tk_change){cp, change};
    return true;
}

static hs_status chs_init(struct chs *c, struct tk_arena *a, size_t hint)
{
    c->a = a;
    c->n = 0;
    c->cap = hint ? hint : 1;
    c->v = tk_alloc(a, c->cap * sizeof *c->v);
    return c->v ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

/* ---- Unicode forms ------------------------------------------------------------------------ */

static bool unicode_form(struct chs *out, const struct tk_nstr *ns, bool compat, bool compose)
{
    for (size_t i = 0; i < ns->n; i++) {
        int32_t d[32];
        int k = tk_decompose(ns->cp[i], compat, d);
        for (int j = 0; j < k; j++)
            if (!chs_push(out, d[j], j > 0)) return false;
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    struct tk_change *v = out->v;
    for (size_t i = 1; i < out->n; i++) {
        int cc = tk_ccc(v[i].c);
        if (cc == 0) continue;
        struct tk_change x = v[i];
        size_t j = i;
        while (j > 0 && tk_ccc(v[j - 1].c) > cc) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    if (!compose) return true;
    size_t w = 0;
    long composee = -1;
    int last_cc = -1;
    for (size_t i = 0; i < out->n; i++) {
        struct tk_change x = v[i];
        int cc = tk_ccc(x.c);
        if (composee >= 0 && (last_cc == -1 || last_cc < cc)) {
            int32_t k = tk_compose(v[composee].c, x.c);
            if (k >= 0) {
                v[composee].c = k;
                v[composee].change += x.change - 1;
                continue;
            }
        }
        if (cc == 0) {
            composee = (long)w;
            last_cc = -1;
        } else {
            last_cc = cc;
        }
        v[w++] = x;
    }
    out->n = w;
    return true;
}

struct form_ctx {
    bool compat, compose;
};

static hs_status form_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct form_ctx *f = ctx;
    bool plain = true; /* below U+00A0 every form is the identity */
    for (size_t i = 0; i < ns->n && plain; i++) plain = ns->cp[i] < 0xA0;
    if (plain) return HS_STATUS_OK;
    struct chs c;
    if (chs_init(&c, a, ns->n + 8) || !unicode_form(&c, ns, f->compat, f->compose))
        return HS_STATUS_NO_MEMORY;
    return tk_transform(a, ns, c.v, c.n, 0);
}

static const struct form_ctx form_nfd = {false, false}, form_nfc = {false, true},
                             form_nfkd = {true, false}, form_nfkc = {true, true};

static hs_status nfd_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = (void *)&form_nfd;
    return HS_STATUS_OK;
}
static hs_status nfc_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = (void *)&form_nfc;
    return HS_STATUS_OK;
}
static hs_status nfkd_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = (void *)&form_nfkd;
    return HS_STATUS_OK;
}
static hs_status nfkc_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = (void *)&form_nfkc;
    return HS_STATUS_OK;
}

/* ---- filters and maps ---------------------------------------------------------------------- */

/* HF NormalizedString::filter. */
static hs_status filter(struct tk_arena *a, struct tk_nstr *ns, bool (*keep)(int32_t c))
{
    bool all = true;
    for (size_t i = 0; i < ns->n && all; i++) all = keep(ns->cp[i]);
    if (all) return HS_STATUS_OK;
    struct chs c;
    if (chs_init(&c, a, ns->n + 1)) return HS_STATUS_NO_MEMORY;
    long removed = 0;
    size_t removed_start = 0;
    bool have_last = false;
    int32_t last = 0;
    for (size_t i = 0; i < ns->n; i++) {
        if (keep(ns->cp[i])) {
            if (have_last)
                chs_push(&c, last, (int32_t)-removed);
            else
                removed_start = (size_t)removed;
            last = ns->cp[i];
            have_last = true;
            removed = 0;
        } else {
            removed++;
        }
    }
    if (have_last) chs_push(&c, last, (int32_t)-removed);
    if (removed == (long)ns->n && !have_last) removed_start = 0;
    return tk_transform(a, ns, c.v, c.n, removed_start);
}

static hs_status lowercase(struct tk_arena *a, struct tk_nstr *ns)
{
    bool one = true;
    for (size_t i = 0; i < ns->n && one; i++) one = ns->cp[i] != 0x130;
    if (one) {
        /* every char maps to one: the alignments stay (a new array: slices share theirs) */
        int32_t *cp = tk_alloc(a, (ns->n + 1) * sizeof *cp);
        if (!cp) return HS_STATUS_NO_MEMORY;
        for (size_t i = 0; i < ns->n; i++) {
            int32_t l[3];
            tk_lowercase(ns->cp[i], l);
            cp[i] = l[0];
        }
        ns->cp = cp;
        return HS_STATUS_OK;
    }
    struct chs c;
    if (chs_init(&c, a, ns->n + 8)) return HS_STATUS_NO_MEMORY;
    for (size_t i = 0; i < ns->n; i++) {
        int32_t l[3];
        int k = tk_lowercase(ns->cp[i], l);
        for (int j = 0; j < k; j++)
            if (!chs_push(&c, l[j], j > 0)) return HS_STATUS_NO_MEMORY;
    }
    return tk_transform(a, ns, c.v, c.n, 0);
}

static bool keep_bert_clean(int32_t c)
{
    return !(c == 0 || c == 0xFFFD || tk_is_bert_control(c));
}

static bool keep_not_mn(int32_t c)
{
    return !tk_is_mn(c);
}

static bool keep_not_mark(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return !(k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME);
}

/* ---- BertNormalizer ------------------------------------------------------------------------ */

struct bert_ctx {
    bool clean, chinese, strip, lower;
};

static hs_status bert_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct bert_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    b->clean = b->chinese = b->lower = true;
    bool strip_set = false;
    hs_status st;
    if ((st = tk_get_bool(ld, o, "clean_text", &b->clean)) ||
        (st = tk_get_bool(ld, o, "handle_chinese_chars", &b->chinese)) ||
        (st = tk_get_bool(ld, o, "lowercase", &b->lower))) {
        hs_free(b);
        return st;
    }
    json_t *sa = json_object_get(o, "strip_accents");
    if (sa && !json_is_null(sa)) {
        if (!json_is_boolean(sa)) {
            hs_free(b);
            return tk_fail(ld, HS_STATUS_CORRUPT, ".strip_accents must be a boolean or null");
        }
        b->strip = json_is_true(sa);
        strip_set = true;
    }
    if (!strip_set) b->strip = b->lower;
    *ctx = b;
    return HS_STATUS_OK;
}

static hs_status bert_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct bert_ctx *b = ctx;
    hs_status st;
    if (b->clean) {
        if ((st = filter(a, ns, keep_bert_clean))) return st;
        int32_t *cp = tk_alloc(a, (ns->n + 1) * sizeof *cp);
        if (!cp) return HS_STATUS_NO_MEMORY;
        for (size_t i = 0; i < ns->n; i++)
            cp[i] = tk_is_bert_whitespace(ns->cp[i]) ? ' ' : ns->cp[i];
        ns->cp = cp;
    }
    if (b->chinese) {
        bool any = false;
        for (size_t i = 0; i < ns->n && !any; i++) any = tk_is_chinese(ns->cp[i]);
        if (any) {
            struct chs c;
            if (chs_init(&c, a, ns->n + 16)) return HS_STATUS_NO_MEMORY;
            for (size_t i = 0; i < ns->n; i++) {
                bool ok = true;
                if (tk_is_chinese(ns->cp[i]))
                    ok = chs_push(&c, ' ', 0) && chs_push(&c, ns->cp[i], 1) && chs_push(&c, ' ', 1);
                else
                    ok = chs_push(&c, ns->cp[i], 0);
                if (!ok) return HS_STATUS_NO_MEMORY;
            }
            if ((st = tk_transform(a, ns, c.v, c.n, 0))) return st;
        }
    }
    if (b->strip) {
        if ((st = form_run(&form_nfd, a, ns))) return st;
        if ((st = filter(a, ns, keep_not_mn))) return st;
    }
    if (b->lower) return lowercase(a, ns);
    return HS_STATUS_OK;
}

bool tk_normalizer_bert(const struct tk_normalizer *n, bool *lower, bool *strip, bool *chinese);
bool tk_normalizer_bert(const struct tk_normalizer *n, bool *lower, bool *strip, bool *chinese)
{
    if (!n->kind || n->kind->run != bert_run) return false;
    const struct bert_ctx *b = n->ctx;
    *lower = b->lower;
    *strip = b->strip;
    *chinese = b->chinese;
    return b->clean;
}

/* ---- Lowercase, StripAccents, Strip ----------------------------------------------------- */

static hs_status none_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = NULL;
    return HS_STATUS_OK;
}

static hs_status lower_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    return lowercase(a, ns);
}

static hs_status strip_accents_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    return filter(a, ns, keep_not_mark);
}

struct strip_ctx {
    bool left, right;
};

static hs_status strip_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct strip_ctx *s = hs_calloc(1, sizeof *s);
    if (!s) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    s->left = s->right = true;
    hs_status st;
    if ((st = tk_get_bool(ld, o, "strip_left", &s->left)) ||
        (st = tk_get_bool(ld, o, "strip_right", &s->right))) {
        hs_free(s);
        return st;
    }
    *ctx = s;
    return HS_STATUS_OK;
}

static hs_status strip_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct strip_ctx *s = ctx;
    size_t lead = 0, trail = 0;
    if (s->left)
        while (lead < ns->n && tk_is_whitespace(ns->cp[lead])) lead++;
    if (s->right)
        while (trail < ns->n && tk_is_whitespace(ns->cp[ns->n - 1 - trail])) trail++;
    if (lead == 0 && trail == 0) return HS_STATUS_OK;
    struct chs c;
    if (chs_init(&c, a, ns->n + 1)) return HS_STATUS_NO_MEMORY;
    for (size_t i = 0; i < ns->n; i++) {
        if (i < lead || i + trail >= ns->n) continue;
        chs_push(&c, ns->cp[i], i + trail + 1 == ns->n ? -(int32_t)trail : 0);
    }
    return tk_transform(a, ns, c.v, c.n, lead);
}

/* ---- Replace, Prepend ------------------------------------------------------------------- */

struct replace_ctx {
    struct tk_pattern pat;
    int32_t *content;
    size_t ncontent;
};

static void replace_free(void *ctx)
{
    struct replace_ctx *r = ctx;
    if (!r) return;
    tk_pattern_release(&r->pat);
    hs_free(r->content);
    hs_free(r);
}

/* {"String": s} or {"Regex": r}, as Replace and Split spell their pattern. */
hs_status tk_pattern_load(struct tk_loader *ld, json_t *o, struct tk_pattern *p);
hs_status tk_pattern_load(struct tk_loader *ld, json_t *o, struct tk_pattern *p)
{
    json_t *pat = json_object_get(o, "pattern");
    const char *s = NULL;
    bool regex = false;
    if (json_is_object(pat)) {
        json_t *v = json_object_get(pat, "String");
        if (!v) {
            v = json_object_get(pat, "Regex");
            regex = true;
        }
        if (json_is_string(v)) s = json_string_value(v);
    }
    if (!s)
        return tk_fail(ld, HS_STATUS_CORRUPT,
                       ".pattern must be {\"String\": ..} or {\"Regex\": ..}");
    if (!regex) return tk_str_cps(ld, s, &p->lit, &p->nlit);
    return tk_regex_compile(ld, s, false, &p->re);
}

/* The required string o.key, as code points. */
static hs_status get_cps(struct tk_loader *ld, json_t *o, const char *key, int32_t **out, size_t *n)
{
    const char *s = NULL;
    hs_status st = tk_get_str(ld, o, key, &s);
    if (!st && !s) st = tk_fail(ld, HS_STATUS_CORRUPT, ".%s is missing", key);
    if (!st) st = tk_str_cps(ld, s, out, n);
    return st;
}

static hs_status replace_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct replace_ctx *r = hs_calloc(1, sizeof *r);
    if (!r) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    hs_status st = tk_pattern_load(ld, o, &r->pat);
    if (!st) st = get_cps(ld, o, "content", &r->content, &r->ncontent);
    if (st) {
        replace_free(r);
        return st;
    }
    *ctx = r;
    return HS_STATUS_OK;
}

static hs_status replace_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct replace_ctx *r = ctx;
    struct tk_matches m = {0};
    hs_status st = tk_pattern_find(a, &r->pat, ns, &m);
    if (st) return st;
    size_t cap = ns->n;
    for (size_t k = 0; k < m.n; k++)
        if (m.v[k].m) cap += r->ncontent;
    struct tk_nstr out;
    out.cp = tk_alloc(a, (cap + 1) * sizeof *out.cp);
    out.as = tk_alloc(a, (cap + 1) * sizeof *out.as);
    out.ae = tk_alloc(a, (cap + 1) * sizeof *out.ae);
    if (!out.cp || !out.as || !out.ae) return HS_STATUS_NO_MEMORY;
    out.shift = ns->shift;
    size_t w = 0;
    for (size_t k = 0; k < m.n; k++) {
        struct tk_match x = m.v[k];
        if (!x.m) {
            for (size_t i = x.b; i < x.e; i++) {
                out.cp[w] = ns->cp[i];
                out.as[w] = ns->as[i];
                out.ae[w] = ns->ae[i];
                w++;
            }
            continue;
        }
        /* every char of the content is "inserted" after the match: it takes the alignment of
         * the match's last char */
        uint32_t s = ns->shift, e = ns->shift;
        if (x.e >= 1) {
            s = ns->as[x.e - 1];
            e = ns->ae[x.e - 1];
        }
        for (size_t i = 0; i < r->ncontent; i++) {
            out.cp[w] = r->content[i];
            out.as[w] = s;
            out.ae[w] = e;
            w++;
        }
    }
    out.n = w;
    *ns = out;
    return HS_STATUS_OK;
}

struct prepend_ctx {
    int32_t *s;
    size_t n;
};

static void prepend_free(void *ctx)
{
    struct prepend_ctx *p = ctx;
    if (!p) return;
    hs_free(p->s);
    hs_free(p);
}

static hs_status prepend_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct prepend_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    hs_status st = get_cps(ld, o, "prepend", &p->s, &p->n);
    if (st) {
        prepend_free(p);
        return st;
    }
    *ctx = p;
    return HS_STATUS_OK;
}

/* HF NormalizedString::prepend (also used by Metaspace). */
hs_status tk_prepend(struct tk_arena *a, struct tk_nstr *ns, const int32_t *s, size_t n);
hs_status tk_prepend(struct tk_arena *a, struct tk_nstr *ns, const int32_t *s, size_t n)
{
    if (ns->n == 0 || n == 0) return HS_STATUS_OK;
    struct chs c;
    if (chs_init(&c, a, ns->n + n + 1)) return HS_STATUS_NO_MEMORY;
    for (size_t i = 0; i < n; i++) chs_push(&c, s[i], i != 0);
    chs_push(&c, ns->cp[0], 1);
    for (size_t i = 1; i < ns->n; i++) chs_push(&c, ns->cp[i], 0);
    return tk_transform(a, ns, c.v, c.n, 0);
}

static hs_status prepend_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct prepend_ctx *p = ctx;
    return tk_prepend(a, ns, p->s, p->n);
}

/* ---- Precompiled (SentencePiece's charsmap) --------------------------------------------- */

struct precompiled_ctx {
    uint32_t *units;
    size_t n_units;
    char *norm; /* the normalized strings, NUL-separated */
    size_t n_norm;
};

static void precompiled_free(void *ctx)
{
    struct precompiled_ctx *p = ctx;
    if (!p) return;
    hs_free(p->units);
    hs_free(p->norm);
    hs_free(p);
}

static int b64v(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static hs_status precompiled_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    const char *s = NULL;
    hs_status st = tk_get_str(ld, o, "precompiled_charsmap", &s);
    if (st) return st;
    struct precompiled_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    *ctx = p;
    if (!s || !*s) return HS_STATUS_OK; /* an empty map normalizes nothing */
    size_t len = strlen(s);
    unsigned char *bytes = hs_malloc(len / 4 * 3 + 3);
    if (!bytes) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    size_t nb = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '=') break;
        int v = b64v((unsigned char)s[i]);
        if (v < 0) {
            hs_free(bytes);
            return tk_fail(ld, HS_STATUS_CORRUPT, ".precompiled_charsmap is not base64");
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            bytes[nb++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (nb < 4) {
        hs_free(bytes);
        return tk_fail(ld, HS_STATUS_CORRUPT, ".precompiled_charsmap is too short");
    }
    uint32_t trie = (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
                    (uint32_t)bytes[3] << 24;
    if (trie % 4 != 0 || trie > nb - 4 || trie == 0) {
        hs_free(bytes);
        return tk_fail(ld, HS_STATUS_CORRUPT, ".precompiled_charsmap: bad trie size %u", trie);
    }
    p->n_units = trie / 4;
    p->units = hs_malloc(trie);
    p->n_norm = nb - 4 - trie;
    p->norm = hs_malloc(p->n_norm + 1);
    if (!p->units || !p->norm) {
        hs_free(bytes);
        return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    }
    for (size_t i = 0; i < p->n_units; i++) {
        const unsigned char *u = bytes + 4 + 4 * i;
        p->units[i] =
            (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(p->norm, bytes + 4 + trie, p->n_norm);
    p->norm[p->n_norm] = '\0';
    hs_free(bytes);
    return HS_STATUS_OK;
}

/* darts-clone common prefix search; the first (shortest) match's value, or -1. */
static long darts_first(const struct precompiled_ctx *p, const char *key, size_t n)
{
#define U_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
#define U_LABEL(u)  ((u) & ((1u << 31) | 0xFFu))
#define U_LEAF(u)   (((u) >> 8) & 1u)
#define U_VALUE(u)  ((u) & ((1u << 31) - 1))
    if (p->n_units == 0) return -1;
    size_t pos = 0;
    uint32_t u = p->units[0];
    pos ^= U_OFFSET(u);
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)key[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= p->n_units) return -1;
        u = p->units[pos];
        if (U_LABEL(u) != c) return -1;
        pos ^= U_OFFSET(u);
        if (pos >= p->n_units) return -1;
        if (U_LEAF(u)) return (long)U_VALUE(p->units[pos]);
    }
    return -1;
}

/* The replacement of a chunk of code points, decoded into out (<= 64), or -1. */
static int precompiled_lookup(const struct precompiled_ctx *p, const int32_t *cp, size_t n,
                              int32_t out[64])
{
    char key[64];
    size_t kb = 0;
    for (size_t i = 0; i < n; i++) kb += (size_t)tk_utf8_put(cp[i], key + kb);
    long v = darts_first(p, key, kb);
    if (v < 0 || (size_t)v >= p->n_norm) return -1;
    const unsigned char *s = (const unsigned char *)p->norm + v;
    size_t len = strlen((const char *)s);
    size_t nc = 0, bad;
    const char *why;
    if (!tk_utf8_validate(s, len, &nc, &bad, &why) || nc > 64) return -1;
    int k = 0;
    const unsigned char *q = s;
    while (q < s + len) out[k++] = tk_utf8_next(&q);
    return k;
}

static bool precompiled_replace(struct chs *c, size_t n_old, const int32_t *rep, int n_new)
{
    size_t first = c->n;
    for (int i = 0; i < n_new; i++)
        if (!chs_push(c, rep[i], 0)) return false;
    long diff = (long)n_new - (long)n_old;
    if (diff > 0) {
        for (long i = 0; i < diff && c->n - (size_t)i > first; i++)
            c->v[c->n - 1 - (size_t)i].change = 1;
    } else if (diff < 0 && c->n > 0) {
        c->v[c->n - 1].change += (int32_t)diff;
    }
    return true;
}

static hs_status precompiled_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct precompiled_ctx *p = ctx;
    if (p->n_units == 0) return HS_STATUS_OK;
    struct chs c;
    if (chs_init(&c, a, ns->n + 8)) return HS_STATUS_NO_MEMORY;
    bool modified = false;
    int32_t rep[64];
    for (size_t g = 0; g < ns->n;) {
        size_t ge = tk_grapheme_end(ns->cp, ns->n, g);
        size_t gbytes = 0;
        for (size_t i = g; i < ge; i++) gbytes += (size_t)tk_utf8_len(ns->cp[i]);
        int k = gbytes < 6 ? precompiled_lookup(p, ns->cp + g, ge - g, rep) : -1;
        if (k >= 0) {
            modified = true;
            if (!precompiled_replace(&c, ge - g, rep, k)) return HS_STATUS_NO_MEMORY;
        } else {
            for (size_t i = g; i < ge; i++) {
                k = precompiled_lookup(p, ns->cp + i, 1, rep);
                bool ok;
                if (k >= 0) {
                    modified = true;
                    ok = precompiled_replace(&c, 1, rep, k);
                } else {
                    ok = chs_push(&c, ns->cp[i], 0);
                }
                if (!ok) return HS_STATUS_NO_MEMORY;
            }
        }
        g = ge;
    }
    if (!modified) return HS_STATUS_OK;
    return tk_transform(a, ns, c.v, c.n, 0);
}

/* ---- Sequence --------------------------------------------------------------------------- */

static hs_status seq_item_load(struct tk_loader *ld, json_t *o, const void *arg, void *item)
{
    (void)arg;
    return tk_normalizer_load(ld, o, item);
}

static void seq_item_release(void *item)
{
    tk_normalizer_release(item);
}

static const struct tk_seq_kind seq_kind = {"normalizers", sizeof(struct tk_normalizer),
                                            seq_item_load, seq_item_release};

static hs_status seq_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    return tk_seq_load(ld, o, &seq_kind, NULL, ctx);
}

static hs_status seq_run(const void *ctx, struct tk_arena *a, struct tk_nstr *ns)
{
    const struct tk_seq *s = ctx;
    const struct tk_normalizer *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        hs_status st = v[i].kind->run(v[i].ctx, a, ns);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const struct tk_normalizer_kind kinds[] = {
    {"BertNormalizer", bert_load, bert_run, hs_free, 3},
    {"NFC", nfc_load, form_run, NULL, 3},
    {"NFD", nfd_load, form_run, NULL, 3},
    {"NFKC", nfkc_load, form_run, NULL, 11},
    {"NFKD", nfkd_load, form_run, NULL, 11},
    {"Lowercase", none_load, lower_run, NULL, 2},
    {"StripAccents", none_load, strip_accents_run, NULL, 1},
    {"Strip", strip_load, strip_run, hs_free, 1},
    {"Replace", replace_load, replace_run, replace_free, 0},
    {"Prepend", prepend_load, prepend_run, prepend_free, 0},
    {"Precompiled", precompiled_load, precompiled_run, precompiled_free, 0},
    {"Sequence", seq_load, seq_run, tk_seq_free, 0},
};

hs_status tk_normalizer_load(struct tk_loader *ld, json_t *o, struct tk_normalizer *out)
{
    memset(out, 0, sizeof *out);
    hs_status st;
    const struct tk_normalizer_kind *k = tk_kind_find(ld, o, kinds, sizeof kinds / sizeof kinds[0],
                                                      sizeof kinds[0], "normalizer", &st);
    if (!k) return st;
    st = tk_kind_loaded(k->load(ld, o, &out->ctx), k->free, &out->ctx);
    if (st == HS_STATUS_OK) out->kind = k;
    return st;
}

void tk_normalizer_release(struct tk_normalizer *n)
{
    if (n->kind && n->kind->free) n->kind->free(n->ctx);
    memset(n, 0, sizeof *n);
}

unsigned tk_normalizer_growth(const struct tk_normalizer *n)
{
    if (!n->kind) return 1;
    if (n->kind->run == seq_run) {
        const struct tk_seq *s = n->ctx;
        const struct tk_normalizer *v = s->v;
        unsigned g = 1;
        for (size_t i = 0; i < s->n; i++) {
            unsigned x = tk_normalizer_growth(&v[i]);
            g = g > 1000 / (x ? x : 1) ? 1000 : g * x;
        }
        return g;
    }
    if (n->kind->run == replace_run) {
        const struct replace_ctx *r = n->ctx;
        return (unsigned)(r->ncontent * 4 + 1);
    }
    if (n->kind->run == prepend_run) {
        const struct prepend_ctx *p = n->ctx;
        return (unsigned)(p->n * 4 + 1);
    }
    if (n->kind->run == precompiled_run) return 64 * 4;
    return n->kind->growth;
}
