/* hetserve — tokenizer.json pre-tokenizers, one table row per "type". */
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

hs_status tk_pattern_load(struct tk_loader *ld, json_t *o, struct tk_pattern *p);
hs_status tk_prepend(struct tk_arena *a, struct tk_nstr *ns, const int32_t *s, size_t n);

/* Runs fn on every split not yet tokenized, replacing it by the pieces fn appends. */
typedef hs_status (*piece_fn)(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                              struct tk_splits *out);

static hs_status each_split(const void *ctx, struct tk_arena *a, struct tk_splits *s, piece_fn fn)
{
    struct tk_splits out = {0};
    hs_status st = HS_STATUS_OK;
    for (size_t i = 0; i < s->n && st == HS_STATUS_OK; i++) {
        if (s->v[i].added >= 0) {
            st = tk_splits_push(a, &out, &s->v[i].ns, s->v[i].added);
            continue;
        }
        struct tk_nstr ns = s->v[i].ns;
        size_t before = out.n;
        st = fn(ctx, a, &ns, &out);
        /* drop empty pieces (HF PreTokenizedString::split) */
        size_t w = before;
        for (size_t k = before; k < out.n; k++)
            if (out.v[k].ns.n > 0) out.v[w++] = out.v[k];
        out.n = w;
    }
    if (st == HS_STATUS_OK) *s = out;
    return st;
}

static hs_status none_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    *ctx = NULL;
    return HS_STATUS_OK;
}

static hs_status behavior_load(struct tk_loader *ld, json_t *o, enum tk_behavior *bh)
{
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    const char *s = NULL;
    hs_status st = tk_get_str(ld, o, "behavior", &s);
    if (st || !s) return st;
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *bh = (enum tk_behavior)i;
            return HS_STATUS_OK;
        }
    return tk_fail(ld, HS_STATUS_UNSUPPORTED,
                   ".behavior '%s' is not supported (supported: Removed, Isolated, "
                   "MergedWithPrevious, MergedWithNext, Contiguous)",
                   s);
}

/* ---- BertPreTokenizer, WhitespaceSplit, Punctuation, Digits ------------------------------ */

static hs_status bert_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                            struct tk_splits *out)
{
    struct tk_pattern ws = {.pred = tk_is_bert_whitespace};
    struct tk_pattern pu = {.pred = tk_is_bert_punct};
    struct tk_splits words = {0};
    hs_status st = tk_split_by(a, ns, &ws, TK_REMOVED, &words);
    for (size_t i = 0; i < words.n && st == HS_STATUS_OK; i++)
        st = tk_split_by(a, &words.v[i].ns, &pu, TK_ISOLATED, out);
    return st;
}

static hs_status bert_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    return each_split(ctx, a, s, bert_piece);
}

static hs_status wsplit_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                              struct tk_splits *out)
{
    struct tk_pattern ws = {.pred = tk_is_whitespace};
    return tk_split_by(a, ns, &ws, TK_REMOVED, out);
}

static hs_status wsplit_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    return each_split(ctx, a, s, wsplit_piece);
}

struct pred_ctx {
    struct tk_pattern pat;
    enum tk_behavior bh;
};

static hs_status pred_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                            struct tk_splits *out)
{
    const struct pred_ctx *p = ctx;
    return tk_split_by(a, ns, &p->pat, p->bh, out);
}

static hs_status pred_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    return each_split(ctx, a, s, pred_piece);
}

static void pred_free(void *ctx)
{
    struct pred_ctx *p = ctx;
    if (!p) return;
    tk_pattern_release(&p->pat);
    hs_free(p);
}

static hs_status punct_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct pred_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    p->pat.pred = tk_is_punct;
    p->bh = TK_ISOLATED;
    hs_status st = behavior_load(ld, o, &p->bh);
    if (st) {
        hs_free(p);
        return st;
    }
    *ctx = p;
    return HS_STATUS_OK;
}

static hs_status digits_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct pred_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    bool individual = false;
    hs_status st = tk_get_bool(ld, o, "individual_digits", &individual);
    if (st) {
        hs_free(p);
        return st;
    }
    p->pat.pred = tk_is_numeric;
    p->bh = individual ? TK_ISOLATED : TK_CONTIGUOUS;
    *ctx = p;
    return HS_STATUS_OK;
}

/* Whitespace: \w+|[^\w\s]+ of Rust's regex crate (\w: Alphabetic, marks, Nd, Pc, joiners). */
#define RUST_W "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
static hs_status whitespace_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct pred_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    hs_status st =
        tk_regex_compile(ld, "[" RUST_W "]+|[^" RUST_W "\\p{White_Space}]+", false, &p->pat.re);
    if (st) {
        hs_free(p);
        return st;
    }
    p->pat.invert = true;
    p->bh = TK_REMOVED;
    *ctx = p;
    return HS_STATUS_OK;
}

/* ---- Split ---------------------------------------------------------------------------------- */

static hs_status split_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct pred_ctx *p = hs_calloc(1, sizeof *p);
    if (!p) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    p->bh = TK_REMOVED;
    hs_status st = tk_pattern_load(ld, o, &p->pat);
    if (!st) st = behavior_load(ld, o, &p->bh);
    if (!st) st = tk_get_bool(ld, o, "invert", &p->pat.invert);
    if (!st && !json_object_get(o, "behavior"))
        st = tk_fail(ld, HS_STATUS_CORRUPT, ".behavior is missing");
    if (st) {
        pred_free(p);
        return st;
    }
    *ctx = p;
    return HS_STATUS_OK;
}

/* ---- CharDelimiterSplit ---------------------------------------------------------------------- */

struct delim_ctx {
    int32_t c;
};

static hs_status delim_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    const char *d = NULL;
    hs_status st = tk_get_str(ld, o, "delimiter", &d);
    if (st) return st;
    const unsigned char *p = (const unsigned char *)d;
    size_t n, bad;
    const char *why;
    if (!d || !*d || !tk_utf8_validate(p, strlen(d), &n, &bad, &why) || n != 1)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".delimiter must be one character");
    struct delim_ctx *c = hs_calloc(1, sizeof *c);
    if (!c) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    c->c = tk_utf8_next(&p);
    *ctx = c;
    return HS_STATUS_OK;
}

static hs_status delim_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                             struct tk_splits *out)
{
    const struct delim_ctx *c = ctx;
    struct tk_pattern p = {.lit = (int32_t *)&c->c, .nlit = 1};
    return tk_split_by(a, ns, &p, TK_REMOVED, out);
}

static hs_status delim_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    return each_split(ctx, a, s, delim_piece);
}

/* ---- Metaspace -------------------------------------------------------------------------- */

enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct meta_ctx {
    int32_t rep;
    enum prepend_scheme scheme;
    bool split;
};

static hs_status meta_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct meta_ctx *m = hs_calloc(1, sizeof *m);
    if (!m) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    m->rep = 0x2581;
    m->scheme = PREPEND_ALWAYS;
    m->split = true;
    const char *rep = NULL, *scheme = NULL;
    bool add_prefix = true;
    hs_status st = tk_get_str(ld, o, "replacement", &rep);
    if (!st) st = tk_get_str(ld, o, "prepend_scheme", &scheme);
    if (!st) st = tk_get_bool(ld, o, "split", &m->split);
    if (!st) st = tk_get_bool(ld, o, "add_prefix_space", &add_prefix);
    if (!st && rep) {
        const unsigned char *p = (const unsigned char *)rep;
        size_t n, bad;
        const char *why;
        if (!*rep || !tk_utf8_validate(p, strlen(rep), &n, &bad, &why) || n != 1)
            st = tk_fail(ld, HS_STATUS_CORRUPT, ".replacement must be one character");
        else
            m->rep = tk_utf8_next(&p);
    }
    if (!st) {
        if (!scheme)
            m->scheme = add_prefix ? PREPEND_ALWAYS : PREPEND_NEVER;
        else if (strcmp(scheme, "always") == 0)
            m->scheme = PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            m->scheme = PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
            m->scheme = PREPEND_NEVER;
        else
            st = tk_fail(ld, HS_STATUS_UNSUPPORTED,
                         ".prepend_scheme '%s' is not supported (supported: always, first, never)",
                         scheme);
    }
    if (st) {
        hs_free(m);
        return st;
    }
    *ctx = m;
    return HS_STATUS_OK;
}

static hs_status meta_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                            struct tk_splits *out)
{
    const struct meta_ctx *m = ctx;
    /* the replacement is one char: it keeps the space's alignment */
    int32_t *cp = tk_alloc(a, (ns->n + 1) * sizeof *cp);
    if (!cp) return HS_STATUS_NO_MEMORY;
    for (size_t i = 0; i < ns->n; i++) cp[i] = ns->cp[i] == ' ' ? m->rep : ns->cp[i];
    ns->cp = cp;
    bool starts = ns->n > 0 && ns->cp[0] == m->rep;
    hs_status st = HS_STATUS_OK;
    if (!starts && (m->scheme == PREPEND_ALWAYS || (m->scheme == PREPEND_FIRST && ns->shift == 0)))
        st = tk_prepend(a, ns, &m->rep, 1);
    if (st) return st;
    if (!m->split) return tk_splits_push(a, out, ns, -1);
    struct tk_pattern p = {.lit = (int32_t *)&m->rep, .nlit = 1};
    return tk_split_by(a, ns, &p, TK_MERGED_NEXT, out);
}

static hs_status meta_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    return each_split(ctx, a, s, meta_piece);
}

/* ---- ByteLevel ---------------------------------------------------------------------------- */

struct bl_ctx {
    bool add_prefix_space, use_regex;
    pcre2_code *re;
};

static void bl_free(void *ctx)
{
    struct bl_ctx *b = ctx;
    if (!b) return;
    if (b->re) pcre2_code_free(b->re);
    hs_free(b);
}

static hs_status bl_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    struct bl_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    b->add_prefix_space = true;
    b->use_regex = true;
    bool trim = true;
    hs_status st = tk_get_bool(ld, o, "add_prefix_space", &b->add_prefix_space);
    if (!st) st = tk_get_bool(ld, o, "use_regex", &b->use_regex);
    if (!st) st = tk_get_bool(ld, o, "trim_offsets", &trim);
    if (!st && b->use_regex)
        st = tk_regex_compile(ld,
                              "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                              "\\s+(?!\\S)|\\s+",
                              false, &b->re);
    if (st) {
        bl_free(b);
        return st;
    }
    *ctx = b;
    return HS_STATUS_OK;
}

/* HF's ByteLevel pre-tokenizer maps each byte of each char to one char of GPT-2's table. */
hs_status tk_bytelevel_map(struct tk_arena *a, struct tk_nstr *ns);
hs_status tk_bytelevel_map(struct tk_arena *a, struct tk_nstr *ns)
{
    size_t bytes = 0;
    for (size_t i = 0; i < ns->n; i++) bytes += (size_t)tk_utf8_len(ns->cp[i]);
    if (bytes == ns->n) {
        int32_t *cp = tk_alloc(a, (ns->n + 1) * sizeof *cp);
        if (!cp) return HS_STATUS_NO_MEMORY;
        for (size_t i = 0; i < ns->n; i++) cp[i] = tk_byte_char((unsigned)ns->cp[i]);
        ns->cp = cp;
        return HS_STATUS_OK;
    }
    struct tk_change *ch = tk_alloc(a, (bytes + 1) * sizeof *ch);
    if (!ch) return HS_STATUS_NO_MEMORY;
    size_t w = 0;
    for (size_t i = 0; i < ns->n; i++) {
        char u[4];
        int k = tk_utf8_put(ns->cp[i], u);
        for (int j = 0; j < k; j++)
            ch[w++] = (struct tk_change){tk_byte_char((unsigned char)u[j]), j > 0};
    }
    return tk_transform(a, ns, ch, w, 0);
}

static hs_status bl_piece(const void *ctx, struct tk_arena *a, struct tk_nstr *ns,
                          struct tk_splits *out)
{
    const struct bl_ctx *b = ctx;
    hs_status st = HS_STATUS_OK;
    if (b->add_prefix_space && !(ns->n > 0 && ns->cp[0] == ' ')) {
        int32_t sp = ' ';
        if ((st = tk_prepend(a, ns, &sp, 1))) return st;
    }
    if (!b->use_regex) return tk_splits_push(a, out, ns, -1);
    struct tk_pattern p = {.re = b->re};
    return tk_split_by(a, ns, &p, TK_ISOLATED, out);
}

static hs_status bl_run(const void *ctx, struct tk_arena *a, struct tk_splits *s)
{
    hs_status st = each_split(ctx, a, s, bl_piece);
    for (size_t i = 0; i < s->n && st == HS_STATUS_OK; i++)
        if (s->v[i].added < 0) st = tk_bytelevel_map(a, &s->v[i].ns);
    return st;
}

/* ---- Sequence --------------------------------------------------------------------------- */

static hs_status seq_item_load(struct tk_loader *ld, json_t *o, const void *arg, void *item)
{
    (void)arg;
    return tk_pretok_load(ld, o, item);
}

static void seq_item_release(void *item)
{
    tk_pretok_release(item);
}

static const struct tk_seq_kind seq_kind = {"pretokenizers", sizeof(struct tk_pretok),
                                            seq_item_load, seq_item_release};

static hs_status seq_load(struct tk_loader *ld, json_t *o, void **ctx)
{
    return tk_seq_load(ld, o, &seq_kind, NULL, ctx);
}

static hs_status seq_run(const void *ctx, struct tk_arena *a, struct tk_splits *sp)
{
    const struct tk_seq *s = ctx;
    const struct tk_pretok *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        hs_status st = v[i].kind->run(v[i].ctx, a, sp);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static const struct tk_pretok_kind kinds[] = {
    {"BertPreTokenizer", none_load, bert_run, NULL},
    {"Whitespace", whitespace_load, pred_run, pred_free},
    {"WhitespaceSplit", none_load, wsplit_run, NULL},
    {"Punctuation", punct_load, pred_run, pred_free},
    {"Digits", digits_load, pred_run, pred_free},
    {"Split", split_load, pred_run, pred_free},
    {"Metaspace", meta_load, meta_run, hs_free},
    {"CharDelimiterSplit", delim_load, delim_run, hs_free},
    {"ByteLevel", bl_load, bl_run, bl_free},
    {"Sequence", seq_load, seq_run, tk_seq_free},
};

hs_status tk_pretok_load(struct tk_loader *ld, json_t *o, struct tk_pretok *out)
{
    memset(out, 0, sizeof *out);
    hs_status st;
    const struct tk_pretok_kind *k = tk_kind_find(ld, o, kinds, sizeof kinds / sizeof kinds[0],
                                                  sizeof kinds[0], "pre-tokenizer", &st);
    if (!k) return st;
    st = tk_kind_loaded(k->load(ld, o, &out->ctx), k->free, &out->ctx);
    if (st == HS_STATUS_OK) out->kind = k;
    return st;
}

bool tk_pretok_is_bert(const struct tk_pretok *p);
bool tk_pretok_is_bert(const struct tk_pretok *p)
{
    return p->kind && p->kind->run == bert_run;
}

void tk_pretok_release(struct tk_pretok *p)
{
    if (p->kind && p->kind->free) p->kind->free(p->ctx);
    memset(p, 0, sizeof *p);
}
