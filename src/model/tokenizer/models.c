/* hetserve — tokenizer.json models: WordPiece, BPE, Unigram (one table row each).
 *
 * Each tokenizes one split: the split's code points as UTF-8 (with the code point of every
 * byte), then tokens with code point ranges of the split, as HF's byte offsets map onto them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

/* ---- vocabulary ----------------------------------------------------------------------------- */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * FNV_PRIME;
    return h;
}

hs_status tk_vocab_init(struct tk_vocab *v, int32_t n)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->text = hs_calloc((size_t)n + 1, sizeof *v->text);
    v->len = hs_calloc((size_t)n + 1, sizeof *v->len);
    return v->text && v->len ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

hs_status tk_vocab_set(struct tk_vocab *v, int32_t id, const char *s, size_t len)
{
    char *t = hs_malloc(len + 1);
    if (!t) return HS_STATUS_NO_MEMORY;
    memcpy(t, s, len);
    t[len] = '\0';
    hs_free(v->text[id]);
    v->text[id] = t;
    v->len[id] = (uint32_t)len;
    return HS_STATUS_OK;
}

static void vocab_insert(struct tk_vocab *v, int32_t id)
{
    uint64_t h = fnv(v->text[id], v->len[id]);
    uint32_t h32 = (uint32_t)(h ^ (h >> 32));
    for (uint32_t slot = h32 & v->mask;; slot = (slot + 1) & v->mask) {
        int32_t o = v->table[slot];
        if (o < 0) {
            v->table[slot] = id;
            v->hash[slot] = h32;
            return;
        }
        if (v->len[o] == v->len[id] && memcmp(v->text[o], v->text[id], v->len[id]) == 0) {
            v->table[slot] = id; /* a repeated text: the later id wins, as in HF's map */
            return;
        }
    }
}

void tk_vocab_build(struct tk_vocab *v)
{
    if (!v->table) return;
    for (int32_t id = 0; id < v->n; id++)
        if (v->text[id]) vocab_insert(v, id);
}

static hs_status vocab_table(struct tk_vocab *v)
{
    uint32_t cap = 16;
    while (cap < (uint32_t)v->n * 2 + 2) cap <<= 1;
    v->table = hs_malloc(cap * sizeof *v->table);
    v->hash = hs_malloc(cap * sizeof *v->hash);
    if (!v->table || !v->hash) return HS_STATUS_NO_MEMORY;
    memset(v->table, 0xFF, cap * sizeof *v->table);
    v->mask = cap - 1;
    return HS_STATUS_OK;
}

int32_t tk_vocab_find(const struct tk_vocab *v, const char *s, size_t len)
{
    if (!v->table) return -1;
    uint64_t h = fnv(s, len);
    uint32_t h32 = (uint32_t)(h ^ (h >> 32));
    for (uint32_t slot = h32 & v->mask;; slot = (slot + 1) & v->mask) {
        int32_t id = v->table[slot];
        if (id < 0) return -1;
        if (v->hash[slot] == h32 && v->len[id] == len && memcmp(v->text[id], s, len) == 0)
            return id;
    }
}

void tk_vocab_release(struct tk_vocab *v)
{
    if (v->text)
        for (int32_t i = 0; i < v->n; i++) hs_free(v->text[i]);
    hs_free(v->text);
    hs_free(v->len);
    hs_free(v->table);
    hs_free(v->hash);
    memset(v, 0, sizeof *v);
}

/* Reads {"token": id, ...} into v. */
static hs_status vocab_from_object(struct tk_loader *ld, json_t *obj, struct tk_vocab *v)
{
    if (!json_is_object(obj)) return tk_fail(ld, HS_STATUS_CORRUPT, ".vocab must be an object");
    long long max = -1;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (1 << 28))
            return tk_fail(ld, HS_STATUS_CORRUPT, ".vocab[\"%.40s\"] must be an id in 0..2^28",
                           key);
        if (json_integer_value(val) > max) max = json_integer_value(val);
    }
    if (tk_vocab_init(v, (int32_t)(max + 1)) || vocab_table(v))
        return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for the vocabulary");
    /* insert in id order so that, of repeated texts, the last id wins deterministically */
    json_object_foreach(obj, key, val)
    {
        int32_t id = (int32_t)json_integer_value(val);
        if (tk_vocab_set(v, id, key, strlen(key)))
            return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for the vocabulary");
    }
    json_object_foreach(obj, key, val)
    {
        int32_t id = (int32_t)json_integer_value(val);
        vocab_insert(v, id);
    }
    return HS_STATUS_OK;
}

/* The split as UTF-8, with the code point index of every byte (bytes + 1 entries). */
struct utf8_view {
    char *s;
    uint32_t *at;
    size_t bytes;
};

static hs_status view_make(struct tk_arena *a, const struct tk_nstr *ns, struct utf8_view *v)
{
    size_t bytes = 0;
    for (size_t i = 0; i < ns->n; i++) bytes += (size_t)tk_utf8_len(ns->cp[i]);
    v->s = tk_alloc(a, bytes + 1);
    v->at = tk_alloc(a, (bytes + 1) * sizeof *v->at);
    if (!v->s || !v->at) return HS_STATUS_NO_MEMORY;
    size_t w = 0;
    for (size_t i = 0; i < ns->n; i++) {
        int k = tk_utf8_put(ns->cp[i], v->s + w);
        for (int j = 0; j < k; j++) v->at[w + (size_t)j] = (uint32_t)i;
        w += (size_t)k;
    }
    v->at[bytes] = (uint32_t)ns->n;
    v->s[bytes] = '\0';
    v->bytes = bytes;
    return HS_STATUS_OK;
}

/* cp range of bytes [b, e) */
static void byte_range(const struct utf8_view *v, size_t b, size_t e, uint32_t *s, uint32_t *end)
{
    *s = v->at[b];
    *end = e > b ? v->at[e - 1] + 1 : v->at[b];
}

static hs_status toks_alloc(struct tk_arena *a, struct tk_split *sp, size_t n)
{
    sp->toks = tk_alloc(a, (n ? n : 1) * sizeof *sp->toks);
    sp->ntok = 0;
    return sp->toks ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

static hs_status get_prefix(struct tk_loader *ld, json_t *o, const char *key, char **out)
{
    const char *s = NULL;
    hs_status st = tk_get_str(ld, o, key, &s);
    if (st || !s) return st;
    *out = hs_strdup(s);
    return *out ? HS_STATUS_OK : tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
}

/* ---- WordPiece ------------------------------------------------------------------------------ */

struct wp_ctx {
    struct tk_vocab vocab;
    int32_t unk;
    char *prefix;
    size_t prefix_len;
    long long max_chars;
    size_t max_bytes; /* longest vocabulary entry */
};

static void wp_free(void *ctx)
{
    struct wp_ctx *w = ctx;
    if (!w) return;
    tk_vocab_release(&w->vocab);
    hs_free(w->prefix);
    hs_free(w);
}

static hs_status wp_load(struct tk_loader *ld, json_t *o, void **ctx, struct tk_vocab **vocab)
{
    struct wp_ctx *w = hs_calloc(1, sizeof *w);
    if (!w) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    *ctx = w;
    w->max_chars = 100;
    const char *unk = "[UNK]";
    hs_status st = tk_get_str(ld, o, "unk_token", &unk);
    if (!st) st = get_prefix(ld, o, "continuing_subword_prefix", &w->prefix);
    if (!st && !w->prefix && !(w->prefix = hs_strdup("##")))
        st = tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    if (!st) st = tk_get_int(ld, o, "max_input_chars_per_word", &w->max_chars);
    if (!st) st = vocab_from_object(ld, json_object_get(o, "vocab"), &w->vocab);
    if (st) return st;
    w->prefix_len = strlen(w->prefix);
    for (int32_t i = 0; i < w->vocab.n; i++)
        if (w->vocab.text[i] && w->vocab.len[i] > w->max_bytes) w->max_bytes = w->vocab.len[i];
    w->unk = tk_vocab_find(&w->vocab, unk ? unk : "", unk ? strlen(unk) : 0);
    if (w->unk < 0)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".unk_token '%.40s' is not in the vocabulary",
                       unk ? unk : "");
    *vocab = &w->vocab;
    return HS_STATUS_OK;
}

static hs_status wp_run(const void *ctx, struct tk_arena *a, struct tk_split *sp)
{
    const struct wp_ctx *w = ctx;
    struct utf8_view v;
    hs_status st = view_make(a, &sp->ns, &v);
    if (st || (st = toks_alloc(a, sp, sp->ns.n))) return st;
    if ((long long)sp->ns.n > w->max_chars) goto unk;
    char *buf = tk_alloc(a, w->prefix_len + v.bytes + 1);
    if (!buf) return HS_STATUS_NO_MEMORY;
    memcpy(buf, w->prefix, w->prefix_len);
    size_t start = 0;
    while (start < v.bytes) {
        /* no entry is longer than max_bytes (the prefix included): start below that */
        size_t lim = start > 0 ? (w->max_bytes > w->prefix_len ? w->max_bytes - w->prefix_len : 0)
                               : w->max_bytes;
        size_t end = v.bytes - start > lim ? start + lim : v.bytes;
        while (end > start && end < v.bytes && ((unsigned char)v.s[end] & 0xC0) == 0x80) end--;
        int32_t id = -1;
        while (start < end) {
            if (start > 0) {
                memcpy(buf + w->prefix_len, v.s + start, end - start);
                id = tk_vocab_find(&w->vocab, buf, w->prefix_len + end - start);
            } else {
                id = tk_vocab_find(&w->vocab, v.s, end);
            }
            if (id >= 0) break;
            end--;
            while (end > start && ((unsigned char)v.s[end] & 0xC0) == 0x80) end--;
        }
        if (id < 0) goto unk;
        struct tk_token *t = &sp->toks[sp->ntok++];
        t->id = id;
        byte_range(&v, start, end, &t->s, &t->e);
        start = end;
    }
    return HS_STATUS_OK;
unk:
    sp->ntok = 1;
    sp->toks[0] = (struct tk_token){w->unk, 0, (uint32_t)sp->ns.n};
    return HS_STATUS_OK;
}

/* ---- BPE ------------------------------------------------------------------------------------- */

struct merge_slot {
    uint64_t key; /* (a << 32 | b) + 1, 0 = empty */
    uint32_t rank;
    int32_t new_id;
};

struct bpe_ctx {
    struct tk_vocab vocab;
    struct merge_slot *merges;
    uint32_t merge_mask;
    int32_t unk; /* -1 none */
    char *prefix, *suffix;
    size_t prefix_len, suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* <0xNN>, -1 absent */
};

static void bpe_free(void *ctx)
{
    struct bpe_ctx *b = ctx;
    if (!b) return;
    tk_vocab_release(&b->vocab);
    hs_free(b->merges);
    hs_free(b->prefix);
    hs_free(b->suffix);
    hs_free(b);
}

static uint32_t merge_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static const struct merge_slot *merge_find(const struct bpe_ctx *b, int32_t x, int32_t y)
{
    if (!b->merges) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)x << 32) | (uint32_t)y) + 1;
    for (uint32_t s = merge_hash(key) & b->merge_mask;; s = (s + 1) & b->merge_mask) {
        if (b->merges[s].key == 0) return NULL;
        if (b->merges[s].key == key) return &b->merges[s];
    }
}

static void merge_put(struct bpe_ctx *b, int32_t x, int32_t y, uint32_t rank, int32_t new_id)
{
    uint64_t key = (((uint64_t)(uint32_t)x << 32) | (uint32_t)y) + 1;
    for (uint32_t s = merge_hash(key) & b->merge_mask;; s = (s + 1) & b->merge_mask) {
        if (b->merges[s].key == 0 || b->merges[s].key == key) {
            b->merges[s] = (struct merge_slot){key, rank, new_id};
            return;
        }
    }
}

static hs_status bpe_load(struct tk_loader *ld, json_t *o, void **ctx, struct tk_vocab **vocab)
{
    struct bpe_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    *ctx = b;
    const char *unk = NULL;
    hs_status st = tk_get_str(ld, o, "unk_token", &unk);
    if (!st) st = get_prefix(ld, o, "continuing_subword_prefix", &b->prefix);
    if (!st) st = get_prefix(ld, o, "end_of_word_suffix", &b->suffix);
    if (!st) st = tk_get_bool(ld, o, "fuse_unk", &b->fuse_unk);
    if (!st) st = tk_get_bool(ld, o, "byte_fallback", &b->byte_fallback);
    if (!st) st = tk_get_bool(ld, o, "ignore_merges", &b->ignore_merges);
    json_t *dropout = json_object_get(o, "dropout");
    if (!st && dropout && !json_is_null(dropout) &&
        !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        st = tk_fail(ld, HS_STATUS_UNSUPPORTED, ".dropout: BPE dropout is random, not supported");
    if (!st) st = vocab_from_object(ld, json_object_get(o, "vocab"), &b->vocab);
    if (st) return st;
    b->prefix_len = b->prefix ? strlen(b->prefix) : 0;
    b->suffix_len = b->suffix ? strlen(b->suffix) : 0;
    b->unk = -1;
    if (unk) b->unk = tk_vocab_find(&b->vocab, unk, strlen(unk));
    if (unk && b->unk < 0)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".unk_token '%.40s' is not in the vocabulary", unk);
    for (int i = 0; i < 256; i++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", i);
        b->byte_ids[i] = tk_vocab_find(&b->vocab, t, 6);
    }
    json_t *merges = json_object_get(o, "merges");
    if (!json_is_array(merges)) return tk_fail(ld, HS_STATUS_CORRUPT, ".merges must be an array");
    size_t n = json_array_size(merges);
    uint32_t cap = 16;
    while (cap < n * 2 + 2) cap <<= 1;
    b->merges = hs_calloc(cap, sizeof *b->merges);
    if (!b->merges) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for %zu merges", n);
    b->merge_mask = cap - 1;
    char *tmp = NULL;
    size_t tmp_cap = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *x, *y;
        size_t nx, ny;
        if (json_is_string(m)) {
            x = json_string_value(m);
            const char *sp = strchr(x, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                hs_free(tmp);
                return tk_fail(ld, HS_STATUS_CORRUPT, ".merges[%zu] must be \"a b\"", i);
            }
            nx = (size_t)(sp - x);
            y = sp + 1;
            ny = strlen(y);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            x = json_string_value(json_array_get(m, 0));
            y = json_string_value(json_array_get(m, 1));
            nx = strlen(x);
            ny = strlen(y);
        } else {
            hs_free(tmp);
            return tk_fail(ld, HS_STATUS_CORRUPT, ".merges[%zu] must be \"a b\" or [a, b]", i);
        }
        int32_t ix = tk_vocab_find(&b->vocab, x, nx), iy = tk_vocab_find(&b->vocab, y, ny);
        size_t skip = b->prefix_len < ny ? b->prefix_len : ny;
        if (ix < 0 || iy < 0) {
            hs_free(tmp);
            return tk_fail(ld, HS_STATUS_CORRUPT, ".merges[%zu]: a token is not in the vocabulary",
                           i);
        }
        if (nx + ny + 1 > tmp_cap) {
            hs_free(tmp);
            tmp_cap = (nx + ny + 1) * 2;
            if (!(tmp = hs_malloc(tmp_cap))) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
        }
        memcpy(tmp, x, nx);
        memcpy(tmp + nx, y + skip, ny - skip);
        int32_t nid = tk_vocab_find(&b->vocab, tmp, nx + ny - skip);
        if (nid < 0) {
            hs_free(tmp);
            return tk_fail(ld, HS_STATUS_CORRUPT,
                           ".merges[%zu]: the merged token is not in the vocabulary", i);
        }
        merge_put(b, ix, iy, (uint32_t)i, nid);
    }
    hs_free(tmp);
    *vocab = &b->vocab;
    return HS_STATUS_OK;
}

struct sym {
    int32_t id;
    int32_t prev, next;
    uint32_t s, e; /* cp range */
    bool gone;
};

struct heap_item {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
};

static bool heap_less(struct heap_item x, struct heap_item y)
{
    return x.rank != y.rank ? x.rank < y.rank : x.pos < y.pos;
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n)
{
    struct heap_item top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

static hs_status bpe_run(const void *ctx, struct tk_arena *a, struct tk_split *sp)
{
    const struct bpe_ctx *b = ctx;
    struct utf8_view v;
    hs_status st = view_make(a, &sp->ns, &v);
    if (st) return st;
    if (b->ignore_merges) {
        int32_t id = tk_vocab_find(&b->vocab, v.s, v.bytes);
        if (id >= 0) {
            if ((st = toks_alloc(a, sp, 1))) return st;
            sp->toks[0] = (struct tk_token){id, 0, (uint32_t)sp->ns.n};
            sp->ntok = 1;
            return HS_STATUS_OK;
        }
    }
    /* symbols: one per char, or per byte with byte_fallback */
    struct sym *sy = tk_alloc(a, (v.bytes + 1) * sizeof *sy);
    char *buf = tk_alloc(a, b->prefix_len + b->suffix_len + 8);
    if (!sy || !buf) return HS_STATUS_NO_MEMORY;
    size_t ns = 0;
    long unk_at = -1; /* pending unknown symbol (index in sy) */
    for (size_t i = 0; i < sp->ns.n; i++) {
        char u[4];
        int k = tk_utf8_put(sp->ns.cp[i], u);
        size_t len = 0;
        if (i > 0 && b->prefix) {
            memcpy(buf, b->prefix, b->prefix_len);
            len = b->prefix_len;
        }
        memcpy(buf + len, u, (size_t)k);
        len += (size_t)k;
        if (i + 1 == sp->ns.n && b->suffix) {
            memcpy(buf + len, b->suffix, b->suffix_len);
            len += b->suffix_len;
        }
        int32_t id = tk_vocab_find(&b->vocab, buf, len);
        if (id >= 0) {
            unk_at = -1;
            sy[ns++] = (struct sym){id, 0, 0, (uint32_t)i, (uint32_t)i + 1, false};
            continue;
        }
        if (b->byte_fallback) {
            bool all = true;
            for (size_t j = 0; j < len && all; j++) all = b->byte_ids[(unsigned char)buf[j]] >= 0;
            if (all) {
                unk_at = -1;
                for (size_t j = 0; j < len; j++)
                    sy[ns++] = (struct sym){b->byte_ids[(unsigned char)buf[j]],
                                            0,
                                            0,
                                            (uint32_t)i,
                                            (uint32_t)i + 1,
                                            false};
                continue;
            }
        }
        if (b->unk < 0) continue; /* no unk token: the char is dropped, as in HF */
        if (unk_at >= 0 && b->fuse_unk) {
            sy[unk_at].e = (uint32_t)i + 1;
        } else {
            unk_at = (long)ns;
            sy[ns++] = (struct sym){b->unk, 0, 0, (uint32_t)i, (uint32_t)i + 1, false};
        }
    }
    for (size_t i = 0; i < ns; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    struct heap_item *h = tk_alloc(a, (2 * ns + 2) * sizeof *h);
    if (!h) return HS_STATUS_NO_MEMORY;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const struct merge_slot *m = merge_find(b, sy[i].id, sy[i + 1].id);
        if (m) heap_push(h, &nh, (struct heap_item){m->rank, (uint32_t)i, m->new_id});
    }
    while (nh > 0) {
        struct heap_item top = heap_pop(h, &nh);
        struct sym *cur = &sy[top.pos];
        if (cur->gone || cur->next < 0) continue;
        struct sym *right = &sy[cur->next];
        const struct merge_slot *m = merge_find(b, cur->id, right->id);
        if (!m || m->new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->e = right->e;
        right->gone = true;
        cur->next = right->next;
        if (cur->next >= 0) sy[cur->next].prev = (int32_t)top.pos;
        if (nh + 2 > 2 * ns + 2) continue; /* cannot happen: one pop per push */
        if (cur->prev >= 0) {
            const struct merge_slot *pm = merge_find(b, sy[cur->prev].id, cur->id);
            if (pm)
                heap_push(h, &nh, (struct heap_item){pm->rank, (uint32_t)cur->prev, pm->new_id});
        }
        if (cur->next >= 0) {
            const struct merge_slot *nm = merge_find(b, cur->id, sy[cur->next].id);
            if (nm) heap_push(h, &nh, (struct heap_item){nm->rank, top.pos, nm->new_id});
        }
    }
    if ((st = toks_alloc(a, sp, ns))) return st;
    for (size_t i = 0; i < ns; i++)
        if (!sy[i].gone) sp->toks[sp->ntok++] = (struct tk_token){sy[i].id, sy[i].s, sy[i].e};
    return HS_STATUS_OK;
}

/* ---- Unigram -------------------------------------------------------------------------------- */

/* A byte trie of the pieces, for the common prefix search of the lattice: the root's children
 * by byte, deeper ones as sibling lists. */
struct tnode {
    int32_t child, next, id;
    uint8_t byte;
};

struct trie {
    struct tnode *v;
    size_t n, cap;
    int32_t root[256];
};

static int32_t trie_node(struct trie *t, uint8_t byte)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct tnode *v = hs_realloc(t->v, cap * sizeof *v);
        if (!v) return -1;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n] = (struct tnode){-1, -1, -1, byte};
    return (int32_t)t->n++;
}

static bool trie_insert(struct trie *t, const char *s, size_t len, int32_t id)
{
    if (len == 0) return true;
    int32_t cur = t->root[(unsigned char)s[0]];
    if (cur < 0) {
        if ((cur = trie_node(t, (uint8_t)s[0])) < 0) return false;
        t->root[(unsigned char)s[0]] = cur;
    }
    for (size_t i = 1; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->v[cur].child, prev = -1;
        while (c >= 0 && t->v[c].byte != b) {
            prev = c;
            c = t->v[c].next;
        }
        if (c < 0) {
            if ((c = trie_node(t, b)) < 0) return false;
            if (prev < 0)
                t->v[cur].child = c;
            else
                t->v[prev].next = c;
        }
        cur = c;
    }
    if (t->v[cur].id < 0 || id > t->v[cur].id) t->v[cur].id = id; /* repeated: the later id */
    return true;
}

struct uni_ctx {
    struct tk_vocab vocab;
    double *score;
    double min_score;
    int32_t unk; /* -1 none */
    bool byte_fallback;
    size_t max_piece; /* bytes */
    int32_t byte_ids[256];
    struct trie trie;
};

static void uni_free(void *ctx)
{
    struct uni_ctx *u = ctx;
    if (!u) return;
    hs_free(u->trie.v);
    tk_vocab_release(&u->vocab);
    hs_free(u->score);
    hs_free(u);
}

static hs_status uni_load(struct tk_loader *ld, json_t *o, void **ctx, struct tk_vocab **vocab)
{
    struct uni_ctx *u = hs_calloc(1, sizeof *u);
    if (!u) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    *ctx = u;
    long long unk = -1;
    json_t *uj = json_object_get(o, "unk_id");
    hs_status st = HS_STATUS_OK;
    if (uj && !json_is_null(uj)) st = tk_get_int(ld, o, "unk_id", &unk);
    if (!st) st = tk_get_bool(ld, o, "byte_fallback", &u->byte_fallback);
    if (st) return st;
    json_t *arr = json_object_get(o, "vocab");
    if (!json_is_array(arr)) return tk_fail(ld, HS_STATUS_CORRUPT, ".vocab must be an array");
    size_t n = json_array_size(arr);
    if (n >= (1u << 28)) return tk_fail(ld, HS_STATUS_CORRUPT, ".vocab is too large");
    if (unk >= 0 && (size_t)unk >= n)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".unk_id %lld is not in the vocabulary", unk);
    if (tk_vocab_init(&u->vocab, (int32_t)n) || vocab_table(&u->vocab) ||
        !(u->score = hs_calloc(n + 1, sizeof *u->score)))
        return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for the vocabulary");
    u->min_score = INFINITY;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        json_t *t = json_array_get(e, 0), *s = json_array_get(e, 1);
        if (!json_is_array(e) || !json_is_string(t) || !json_is_number(s))
            return tk_fail(ld, HS_STATUS_CORRUPT, ".vocab[%zu] must be [piece, score]", i);
        size_t len = json_string_length(t);
        if (tk_vocab_set(&u->vocab, (int32_t)i, json_string_value(t), len))
            return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for the vocabulary");
        u->score[i] = json_number_value(s);
        if (u->score[i] < u->min_score) u->min_score = u->score[i];
        if (len > u->max_piece) u->max_piece = len;
    }
    tk_vocab_build(&u->vocab);
    memset(u->trie.root, 0xFF, sizeof u->trie.root);
    for (size_t i = 0; i < n; i++) {
        /* the id the vocabulary maps the piece to (of repeated pieces, the later) */
        int32_t id = tk_vocab_find(&u->vocab, u->vocab.text[i], u->vocab.len[i]);
        if (!trie_insert(&u->trie, u->vocab.text[i], u->vocab.len[i], id))
            return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory for the vocabulary");
    }
    u->unk = (int32_t)unk;
    for (int i = 0; i < 256; i++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", i);
        u->byte_ids[i] = tk_vocab_find(&u->vocab, t, 6);
    }
    *vocab = &u->vocab;
    return HS_STATUS_OK;
}

struct best {
    double score;
    long from; /* -1: not reached */
    int32_t id;
};

static hs_status uni_run(const void *ctx, struct tk_arena *a, struct tk_split *sp)
{
    const struct uni_ctx *u = ctx;
    struct utf8_view v;
    hs_status st = view_make(a, &sp->ns, &v);
    if (st) return st;
    size_t n = v.bytes;
    struct best *best = tk_alloc(a, (n + 1) * sizeof *best);
    if (!best) return HS_STATUS_NO_MEMORY;
    for (size_t i = 0; i <= n; i++) best[i] = (struct best){0.0, -1, 0};
    double unk_score = u->min_score - 10.0;
    for (size_t at = 0; at < n;) {
        double here = best[at].score;
        size_t mblen = (size_t)tk_utf8_len(sp->ns.cp[v.at[at]]);
        bool single = false;
        int32_t node = u->trie.root[(unsigned char)v.s[at]];
        for (size_t len = 1; node >= 0; len++) {
            int32_t id = u->trie.v[node].id;
            if (len < n - at) {
                /* the next node along the text, before this one is used */
                uint8_t b = (uint8_t)v.s[at + len];
                int32_t c = u->trie.v[node].child;
                while (c >= 0 && u->trie.v[c].byte != b) c = u->trie.v[c].next;
                node = c;
            } else {
                node = -1;
            }
            if (id < 0) continue;
            double cand = u->score[id] + here;
            struct best *t = &best[at + len];
            if (t->from < 0 || cand > t->score) *t = (struct best){cand, (long)at, id};
            if (len == mblen) single = true;
        }
        if (!single) {
            if (u->unk < 0) return HS_STATUS_INVALID_INPUT; /* HF: MissingUnkId */
            struct best *t = &best[at + mblen];
            double cand = unk_score + here;
            if (t->from < 0 || cand > t->score) *t = (struct best){cand, (long)at, u->unk};
        }
        at += mblen;
    }
    /* backtrack: pieces (byte ranges) from the end, unknowns fused */
    size_t *pb = tk_alloc(a, (n + 1) * sizeof *pb), *pe = tk_alloc(a, (n + 1) * sizeof *pe);
    bool *punk = tk_alloc(a, n + 1);
    if (!pb || !pe || !punk) return HS_STATUS_NO_MEMORY;
    size_t np = 0;
    for (size_t end = n; end > 0;) {
        struct best *nd = &best[end];
        size_t from = (size_t)nd->from;
        bool is_unk = nd->id == u->unk;
        if (is_unk && np > 0 && punk[np - 1]) {
            pb[np - 1] = from; /* fuse with the unknown piece after it */
        } else {
            pb[np] = from;
            pe[np] = end;
            punk[np] = is_unk;
            np++;
        }
        end = from;
    }
    if ((st = toks_alloc(a, sp, n + 1))) return st;
    for (size_t k = np; k-- > 0;) {
        size_t b = pb[k], e = pe[k];
        uint32_t cs, ce;
        byte_range(&v, b, e, &cs, &ce);
        int32_t id = tk_vocab_find(&u->vocab, v.s + b, e - b);
        if (id < 0 && u->byte_fallback) {
            bool all = true;
            for (size_t j = b; j < e && all; j++) all = u->byte_ids[(unsigned char)v.s[j]] >= 0;
            if (all) {
                for (size_t j = b; j < e; j++)
                    sp->toks[sp->ntok++] =
                        (struct tk_token){u->byte_ids[(unsigned char)v.s[j]], cs, ce};
                continue;
            }
        }
        if (id < 0) id = u->unk;
        sp->toks[sp->ntok++] = (struct tk_token){id, cs, ce};
    }
    return HS_STATUS_OK;
}

/* ---- WordLevel: the whole split, or the unknown token ------------------------------------------
 */

struct wl_ctx {
    struct tk_vocab vocab;
    int32_t unk; /* -1: none */
};

static void wl_free(void *ctx)
{
    struct wl_ctx *w = ctx;
    if (!w) return;
    tk_vocab_release(&w->vocab);
    hs_free(w);
}

static hs_status wl_load(struct tk_loader *ld, json_t *o, void **ctx, struct tk_vocab **vocab)
{
    struct wl_ctx *w = hs_calloc(1, sizeof *w);
    if (!w) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    *ctx = w;
    const char *unk = "<unk>";
    hs_status st = tk_get_str(ld, o, "unk_token", &unk);
    if (!st) st = vocab_from_object(ld, json_object_get(o, "vocab"), &w->vocab);
    if (st) return st;
    w->unk = tk_vocab_find(&w->vocab, unk, strlen(unk));
    *vocab = &w->vocab;
    return HS_STATUS_OK;
}

static hs_status wl_run(const void *ctx, struct tk_arena *a, struct tk_split *sp)
{
    const struct wl_ctx *w = ctx;
    struct utf8_view v;
    hs_status st = view_make(a, &sp->ns, &v);
    if (st || (st = toks_alloc(a, sp, 1))) return st;
    int32_t id = tk_vocab_find(&w->vocab, v.s, v.bytes);
    if (id < 0) id = w->unk;
    if (id < 0) return HS_STATUS_INVALID_INPUT; /* HF: MissingUnkToken */
    sp->toks[0] = (struct tk_token){id, 0, (uint32_t)sp->ns.n};
    sp->ntok = 1;
    return HS_STATUS_OK;
}

bool tk_model_plain_wordpiece(const struct tk_model *m);
bool tk_model_plain_wordpiece(const struct tk_model *m)
{
    if (!m->kind || m->kind->run != wp_run) return false;
    const struct wp_ctx *w = m->ctx;
    return strcmp(w->prefix, "##") == 0 && w->max_chars == 100;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const struct tk_model_kind kinds[] = {
    {"WordPiece", wp_load, wp_run, wp_free},
    {"BPE", bpe_load, bpe_run, bpe_free},
    {"Unigram", uni_load, uni_run, uni_free},
    {"WordLevel", wl_load, wl_run, wl_free},
};

hs_status tk_model_load(struct tk_loader *ld, json_t *o, struct tk_model *out)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(o)) return tk_fail(ld, HS_STATUS_CORRUPT, " must be an object");
    const char *type = NULL;
    hs_status st = tk_get_str(ld, o, "type", &type);
    if (st) return st;
    const struct tk_model_kind *k = NULL;
    if (type) {
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (strcmp(kinds[i].name, type) == 0) k = &kinds[i];
    } else if (json_object_get(o, "merges")) {
        k = &kinds[1]; /* HF infers an untagged model from its fields */
    } else if (json_is_array(json_object_get(o, "vocab"))) {
        k = &kinds[2];
    } else if (json_object_get(o, "max_input_chars_per_word")) {
        k = &kinds[0];
    }
    if (!k)
        return tk_fail(ld, HS_STATUS_UNSUPPORTED,
                       ".type: model '%s' is not supported (supported: WordPiece, BPE, Unigram, "
                       "WordLevel)",
                       type ? type : "(none)");
    st = k->load(ld, o, &out->ctx, &out->vocab);
    if (st) {
        k->free(out->ctx);
        out->ctx = NULL;
        return st;
    }
    out->kind = k;
    return HS_STATUS_OK;
}

void tk_model_release(struct tk_model *m)
{
    if (m->kind && m->kind->free) m->kind->free(m->ctx);
    memset(m, 0, sizeof *m);
}
