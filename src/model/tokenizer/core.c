/* hetserve — tokenizer.json pipeline: arena, normalized strings, patterns and splits. */
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

/* ---- arena ----------------------------------------------------------------------------- */

struct tk_chunk {
    struct tk_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *tk_alloc(struct tk_arena *a, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (bytes == 0) bytes = 16;
    if (a->first && a->first_cap - a->first_used >= bytes) {
        void *p = a->first + a->first_used;
        a->first_used += bytes;
        return p;
    }
    struct tk_chunk *c = a->head;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = 1u << 16;
        if (c && c->cap < (1u << 22)) cap = c->cap * 2;
        if (cap < bytes) cap = bytes;
        if (cap > SIZE_MAX - sizeof *c) {
            a->failed = true;
            return NULL;
        }
        c = hs_malloc(sizeof *c + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += bytes;
    return p;
}

void tk_arena_free(struct tk_arena *a)
{
    struct tk_chunk *c = a->head;
    while (c) {
        struct tk_chunk *n = c->next;
        hs_free(c);
        c = n;
    }
    a->head = NULL;
}

static hs_status nstr_alloc(struct tk_arena *a, struct tk_nstr *ns, size_t n)
{
    size_t k = n ? n : 1;
    ns->cp = tk_alloc(a, k * sizeof *ns->cp);
    ns->as = tk_alloc(a, k * sizeof *ns->as);
    ns->ae = tk_alloc(a, k * sizeof *ns->ae);
    ns->n = n;
    return ns->cp && ns->as && ns->ae ? HS_STATUS_OK : HS_STATUS_NO_MEMORY;
}

hs_status tk_transform(struct tk_arena *a, struct tk_nstr *ns, const struct tk_change *ch,
                       size_t nch, size_t initial)
{
    struct tk_nstr out;
    if (nstr_alloc(a, &out, nch) != HS_STATUS_OK) return HS_STATUS_NO_MEMORY;
    out.shift = ns->shift;
    size_t p = initial;
    for (size_t i = 0; i < nch; i++) {
        uint32_t s, e;
        if (ch[i].change > 0) {
            if (p < 1 || p - 1 >= ns->n) {
                s = e = p < 1 ? ns->shift : (ns->n ? ns->ae[ns->n - 1] : ns->shift);
            } else {
                s = ns->as[p - 1];
                e = ns->ae[p - 1];
            }
        } else {
            if (p < ns->n) {
                s = ns->as[p];
                e = ns->ae[p];
            } else {
                /* HF would index past its alignments here; keep the last range. */
                s = e = ns->n ? ns->ae[ns->n - 1] : ns->shift;
            }
            p++;
            if (ch[i].change < 0) p += (size_t)(-(long)ch[i].change);
        }
        out.cp[i] = ch[i].c;
        out.as[i] = s;
        out.ae[i] = e;
    }
    *ns = out;
    return HS_STATUS_OK;
}

void *tk_grow(struct tk_arena *a, void *v, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap) return v;
    size_t c = *cap ? *cap * 2 : first;
    void *w = tk_alloc(a, c * size);
    if (!w) return NULL;
    if (n) memcpy(w, v, n * size);
    *cap = c;
    return w;
}

hs_status tk_splits_push(struct tk_arena *a, struct tk_splits *s, const struct tk_nstr *ns,
                         int32_t added)
{
    struct tk_split *v = tk_grow(a, s->v, s->n, &s->cap, sizeof *v, 16);
    if (!v) return HS_STATUS_NO_MEMORY;
    s->v = v;
    struct tk_split *sp = &s->v[s->n++];
    sp->ns = *ns;
    sp->added = added;
    sp->toks = NULL;
    sp->ntok = 0;
    return HS_STATUS_OK;
}

struct tk_nstr tk_slice(const struct tk_nstr *ns, size_t b, size_t e)
{
    struct tk_nstr r;
    r.cp = ns->cp + b;
    r.as = ns->as + b;
    r.ae = ns->ae + b;
    r.n = e - b;
    r.shift = e > b ? ns->as[b] : ns->shift;
    return r;
}

hs_status tk_matches_push(struct tk_arena *a, struct tk_matches *m, size_t b, size_t e, bool is)
{
    struct tk_match *v = tk_grow(a, m->v, m->n, &m->cap, sizeof *v, 32);
    if (!v) return HS_STATUS_NO_MEMORY;
    m->v = v;
    m->v[m->n++] = (struct tk_match){(uint32_t)b, (uint32_t)e, is};
    return HS_STATUS_OK;
}

/* ---- patterns -------------------------------------------------------------------------- */

static hs_status find_regex(struct tk_arena *a, pcre2_code *re, const struct tk_nstr *ns,
                            struct tk_matches *out)
{
    /* UTF-8 of the piece and, per byte, the code point it starts (bytes + 1 entries). */
    size_t bytes = 0;
    for (size_t i = 0; i < ns->n; i++) bytes += (size_t)tk_utf8_len(ns->cp[i]);
    char *u = tk_alloc(a, bytes + 1);
    uint32_t *at = tk_alloc(a, (bytes + 1) * sizeof *at);
    if (!u || !at) return HS_STATUS_NO_MEMORY;
    size_t w = 0;
    for (size_t i = 0; i < ns->n; i++) {
        int k = tk_utf8_put(ns->cp[i], u + w);
        for (int j = 0; j < k; j++) at[w + (size_t)j] = (uint32_t)i;
        w += (size_t)k;
    }
    at[bytes] = (uint32_t)ns->n;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return HS_STATUS_NO_MEMORY;
    hs_status st = HS_STATUS_OK;
    size_t last_end = 0, prev = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= bytes) {
        int rc = pcre2_match(re, (PCRE2_SPTR)u, bytes, last_end, 0, md, NULL);
        /* the JIT's stack can run out on a long input: the interpreter (heap) then */
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
            rc = pcre2_match(re, (PCRE2_SPTR)u, bytes, last_end, PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            st = HS_STATUS_TOO_LONG; /* a match limit: never a silently different split */
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e == s && have_last && last_match_end == e) {
            /* onig's find_iter: no empty match right after the previous one */
            if (last_end >= bytes) break;
            last_end += (size_t)tk_utf8_len(ns->cp[at[last_end]]);
            continue;
        }
        last_end = e;
        last_match_end = e;
        have_last = true;
        if (prev != s && (st = tk_matches_push(a, out, at[prev], at[s], false))) break;
        if ((st = tk_matches_push(a, out, at[s], at[e], true))) break;
        prev = e;
        if (e == s) {
            if (last_end >= bytes) break;
            last_end += (size_t)tk_utf8_len(ns->cp[at[last_end]]);
        }
    }
    pcre2_match_data_free(md);
    if (st == HS_STATUS_OK && prev != bytes) st = tk_matches_push(a, out, at[prev], ns->n, false);
    return st;
}

hs_status tk_pattern_find(struct tk_arena *a, const struct tk_pattern *p, const struct tk_nstr *ns,
                          struct tk_matches *out)
{
    out->n = 0;
    hs_status st = HS_STATUS_OK;
    if (ns->n == 0) {
        st = tk_matches_push(a, out, 0, 0, false);
    } else if (p->re) {
        st = find_regex(a, p->re, ns, out);
    } else if (p->pred) {
        size_t last = 0;
        for (size_t i = 0; i < ns->n && st == HS_STATUS_OK; i++) {
            if (!p->pred(ns->cp[i])) continue;
            if (last < i) st = tk_matches_push(a, out, last, i, false);
            if (st == HS_STATUS_OK) st = tk_matches_push(a, out, i, i + 1, true);
            last = i + 1;
        }
        if (st == HS_STATUS_OK && last < ns->n) st = tk_matches_push(a, out, last, ns->n, false);
    } else if (p->nlit == 0) {
        st = tk_matches_push(a, out, 0, ns->n, false);
    } else {
        size_t last = 0, i = 0;
        while (i + p->nlit <= ns->n && st == HS_STATUS_OK) {
            if (memcmp(ns->cp + i, p->lit, p->nlit * sizeof *p->lit) != 0) {
                i++;
                continue;
            }
            if (last < i) st = tk_matches_push(a, out, last, i, false);
            if (st == HS_STATUS_OK) st = tk_matches_push(a, out, i, i + p->nlit, true);
            i += p->nlit;
            last = i;
        }
        if (st == HS_STATUS_OK && last < ns->n) st = tk_matches_push(a, out, last, ns->n, false);
    }
    if (st == HS_STATUS_OK && p->invert)
        for (size_t i = 0; i < out->n; i++) out->v[i].m = !out->v[i].m;
    return st;
}

hs_status tk_split_by(struct tk_arena *a, const struct tk_nstr *ns, const struct tk_pattern *p,
                      enum tk_behavior bh, struct tk_splits *out)
{
    struct tk_matches m = {0};
    hs_status st = tk_pattern_find(a, p, ns, &m);
    if (st) return st;
    /* (b, e, remove) pieces, as HF's NormalizedString::split folds them */
    struct tk_matches r = {0};
    bool prev = false;
    if (bh == TK_MERGED_NEXT) {
        for (size_t k = m.n; k-- > 0 && st == HS_STATUS_OK;) {
            struct tk_match x = m.v[k];
            if (x.m && !prev && r.n)
                r.v[r.n - 1].b = x.b;
            else
                st = tk_matches_push(a, &r, x.b, x.e, false);
            prev = x.m;
        }
        for (size_t i = 0, j = r.n; i + 1 < j; i++, j--) {
            struct tk_match t = r.v[i];
            r.v[i] = r.v[j - 1];
            r.v[j - 1] = t;
        }
    } else {
        for (size_t k = 0; k < m.n && st == HS_STATUS_OK; k++) {
            struct tk_match x = m.v[k];
            bool merge = false;
            if (bh == TK_CONTIGUOUS) merge = x.m == prev && r.n;
            if (bh == TK_MERGED_PREV) merge = x.m && !prev && r.n;
            if (merge)
                r.v[r.n - 1].e = x.e;
            else
                st = tk_matches_push(a, &r, x.b, x.e, bh == TK_REMOVED && x.m);
            prev = x.m;
        }
    }
    for (size_t k = 0; k < r.n && st == HS_STATUS_OK; k++) {
        if (r.v[k].m || r.v[k].e <= r.v[k].b) continue;
        struct tk_nstr piece = tk_slice(ns, r.v[k].b, r.v[k].e);
        st = tk_splits_push(a, out, &piece, -1);
    }
    return st;
}

void tk_pattern_release(struct tk_pattern *p)
{
    if (p->re) pcre2_code_free(p->re);
    hs_free(p->lit);
    memset(p, 0, sizeof *p);
}

hs_status tk_enc_push(struct tk_arena *a, struct tk_enc *e, int32_t id, int32_t type_id,
                      uint8_t special, uint8_t seq, uint32_t s, uint32_t end)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        int32_t *ids = tk_alloc(a, cap * sizeof *ids), *ty = tk_alloc(a, cap * sizeof *ty);
        uint8_t *sp = tk_alloc(a, cap), *sq = tk_alloc(a, cap);
        uint32_t *st = tk_alloc(a, cap * sizeof *st), *en = tk_alloc(a, cap * sizeof *en);
        int32_t *ws = tk_alloc(a, cap * sizeof *ws);
        if (!ids || !ty || !sp || !sq || !st || !en || !ws) return HS_STATUS_NO_MEMORY;
        if (e->n) {
            memcpy(ids, e->ids, e->n * sizeof *ids);
            memcpy(ty, e->type_ids, e->n * sizeof *ty);
            memcpy(sp, e->special, e->n);
            memcpy(sq, e->seq, e->n);
            memcpy(st, e->start, e->n * sizeof *st);
            memcpy(en, e->end, e->n * sizeof *en);
            memcpy(ws, e->ws, e->n * sizeof *ws);
        }
        e->ws = ws;
        e->ids = ids;
        e->type_ids = ty;
        e->special = sp;
        e->seq = sq;
        e->start = st;
        e->end = en;
        e->cap = cap;
    }
    e->ids[e->n] = id;
    e->type_ids[e->n] = type_id;
    e->special[e->n] = special;
    e->seq[e->n] = seq;
    e->start[e->n] = s;
    e->end[e->n] = end;
    e->ws[e->n] = -1;
    e->n++;
    return HS_STATUS_OK;
}
