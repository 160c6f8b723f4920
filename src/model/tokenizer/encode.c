/* hetserve — the tokenizer.json pipeline: added tokens, normalizer, pre-tokenizer, model,
 * offsets, then truncation and the post-processor (post.c). */
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

/* Whether cps[i..] starts with the added token's text (raw or normalized form). */
static bool added_at(const struct tk_nstr *ns, size_t i, const char *s, size_t len, size_t *ncp)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    size_t k = i;
    while (p < end) {
        if (k >= ns->n) return false;
        if (tk_utf8_next(&p) != ns->cp[k]) return false;
        k++;
    }
    *ncp = k - i;
    return true;
}

/* HF find_matches over one split: leftmost-longest matches of the added tokens of one kind. */
static hs_status split_added(const struct hs_tok *tok, struct tk_arena *a, const struct tk_nstr *ns,
                             bool normalized, struct tk_splits *out)
{
    size_t start_offset = 0;
    size_t i = 0;
    hs_status st;
    while (i < ns->n) {
        char u0[4];
        tk_utf8_put(ns->cp[i], u0);
        if (!tok->first[normalized][(unsigned char)u0[0]]) {
            i++;
            continue;
        }
        long best = -1;
        size_t best_n = 0;
        for (size_t k = 0; k < tok->n_added; k++) {
            const struct tk_added *t = &tok->added[k];
            if (t->normalized != normalized) continue;
            size_t n;
            const char *s = normalized ? t->norm : t->content;
            size_t len = normalized ? t->norm_len : t->len;
            if (len == 0) continue;
            if (added_at(ns, i, s, len, &n) && n > best_n) {
                best = (long)k;
                best_n = n;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        const struct tk_added *t = &tok->added[best];
        size_t start = i, stop = i + best_n;
        i = stop;
        if (t->single_word) {
            bool start_space = start == 0 || !tk_is_alnum(ns->cp[start - 1]);
            bool stop_space = stop == ns->n || !tk_is_alnum(ns->cp[stop]);
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t ns_ = start;
            while (ns_ > 0 && tk_is_whitespace(ns->cp[ns_ - 1])) ns_--;
            start = ns_ > start_offset ? ns_ : start_offset;
        }
        if (t->rstrip)
            while (stop < ns->n && tk_is_whitespace(ns->cp[stop])) stop++;
        i = stop;
        if (start_offset < start) {
            struct tk_nstr piece = tk_slice(ns, start_offset, start);
            if ((st = tk_splits_push(a, out, &piece, -1))) return st;
        }
        struct tk_nstr piece = tk_slice(ns, start, stop);
        if ((st = tk_splits_push(a, out, &piece, t->id))) return st;
        start_offset = stop;
    }
    if (start_offset < ns->n) {
        struct tk_nstr piece = tk_slice(ns, start_offset, ns->n);
        return tk_splits_push(a, out, &piece, -1);
    }
    return HS_STATUS_OK;
}

/* One sequence: text -> tokens with offsets (bytes or chars) in e. */
static hs_status encode_one(const struct hs_tok *tok, struct tk_arena *a, const char *text,
                            size_t len, int32_t type_id, uint8_t seq, bool char_offsets,
                            struct tk_enc *e, struct hs_error *err)
{
    const unsigned char *s = (const unsigned char *)(len ? text : "");
    size_t n_cps = 0, bad = 0;
    const char *why = "";
    if (len > UINT32_MAX / 2)
        return hs_error_set(err, HS_STATUS_TOO_LONG, "text of %zu bytes is too long", len);
    if (!tk_utf8_validate(s, len, &n_cps, &bad, &why))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "invalid UTF-8 at byte offset %zu (byte 0x%02X): %s", bad, s[bad], why);
    struct tk_nstr ns = {.n = n_cps, .shift = 0};
    ns.cp = tk_alloc(a, (n_cps + 1) * sizeof *ns.cp);
    ns.as = tk_alloc(a, (n_cps + 1) * sizeof *ns.as);
    ns.ae = tk_alloc(a, (n_cps + 1) * sizeof *ns.ae);
    uint32_t *char_of = char_offsets ? tk_alloc(a, (len + 1) * sizeof *char_of) : NULL;
    if (!ns.cp || !ns.as || !ns.ae || (char_offsets && !char_of)) goto oom;
    const unsigned char *p = s;
    for (size_t i = 0; i < n_cps; i++) {
        ns.as[i] = (uint32_t)(p - s);
        ns.cp[i] = tk_utf8_next(&p);
        ns.ae[i] = (uint32_t)(p - s);
        if (char_of)
            for (uint32_t b = ns.as[i]; b < ns.ae[i]; b++) char_of[b] = (uint32_t)i;
    }
    hs_status st;
    struct tk_splits sp = {0};
    if (n_cps == 0) goto done; /* HF: an empty text has no tokens */
    if (tok->any_raw) {
        if ((st = split_added(tok, a, &ns, false, &sp))) goto fail;
    } else if ((st = tk_splits_push(a, &sp, &ns, -1))) {
        goto fail;
    }
    /* normalize what is not an added token, then split out the normalized added tokens */
    struct tk_splits sp2 = {0};
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.v[i].added >= 0) {
            if ((st = tk_splits_push(a, &sp2, &sp.v[i].ns, sp.v[i].added))) goto fail;
            continue;
        }
        struct tk_nstr x = sp.v[i].ns;
        if (tok->normalizer.kind && (st = tok->normalizer.kind->run(tok->normalizer.ctx, a, &x)))
            goto fail;
        if (x.n == 0) continue;
        if (tok->any_norm)
            st = split_added(tok, a, &x, true, &sp2);
        else
            st = tk_splits_push(a, &sp2, &x, -1);
        if (st) goto fail;
    }
    sp = sp2;
    if (tok->pretok.kind && (st = tok->pretok.kind->run(tok->pretok.ctx, a, &sp))) goto fail;
    for (size_t i = 0; i < sp.n; i++) {
        struct tk_split *x = &sp.v[i];
        if (x->ns.n == 0) continue;
        if (x->added >= 0) {
            x->toks = tk_alloc(a, sizeof *x->toks);
            if (!x->toks) goto oom;
            x->toks[0] = (struct tk_token){x->added, 0, (uint32_t)x->ns.n};
            x->ntok = 1;
        } else if ((st = tok->model.kind->run(tok->model.ctx, a, x))) {
            if (st == HS_STATUS_INVALID_INPUT)
                return hs_error_set(err, st,
                                    "tokenizer: the model has no unknown token for a piece "
                                    "of this text");
            goto fail;
        }
        for (size_t k = 0; k < x->ntok; k++) {
            const struct tk_token *t = &x->toks[k];
            uint32_t os = x->ns.shift, oe = x->ns.shift;
            if (t->e > t->s) {
                os = x->ns.as[t->s];
                oe = x->ns.ae[t->e - 1];
            }
            if (char_of) {
                /* HF's BytesToCharOffsetConverter */
                if (os < len) {
                    uint32_t cs = char_of[os];
                    uint32_t ce = oe < len
                                      ? char_of[oe]
                                      : (oe > 0 && oe - 1 < len ? char_of[oe - 1] + 1 : cs + 1);
                    os = cs;
                    oe = ce;
                }
            }
            if ((st = tk_enc_push(a, e, t->id, type_id, 0, seq, os, oe))) goto fail;
            if (x->added >= 0) {
                /* the token's text is the split's (lstrip / rstrip spaces included) */
                size_t lead = 0, trail = 0;
                bool in_lead = true;
                for (size_t q = 0; q < x->ns.n; q++) {
                    bool w = x->ns.cp[q] == 0x120 || tk_is_whitespace(x->ns.cp[q]);
                    if (in_lead && w)
                        lead++;
                    else
                        in_lead = false;
                    trail = w ? trail + 1 : 0;
                }
                if (lead > 0x7FFF) lead = 0x7FFF;
                if (trail > 0xFFFF) trail = 0xFFFF;
                e->ws[e->n - 1] = (int32_t)(lead << 16 | trail);
            }
        }
    }
done:
    return HS_STATUS_OK;
fail:
    if (st == HS_STATUS_NO_MEMORY) goto oom;
    if (st == HS_STATUS_TOO_LONG)
        return hs_error_set(err, st,
                            "tokenizer: a regex of the pipeline hit its match limit on "
                            "this text of %zu bytes",
                            len);
    return hs_error_set(err, st, "tokenizer: encode failed");
oom:
    return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory to tokenize %zu bytes", len);
}

hs_status hs_tok_encode(const struct hs_tok *tok, const char *text, size_t len, const char *pair,
                        size_t pair_len, const struct hs_tok_encode_opts *opts,
                        struct hs_tok_encoding *out, struct hs_error *err)
{
    if (!tok || (!text && len) || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "tokenizer: NULL argument");
    memset(out, 0, sizeof *out);
    struct hs_tok_encode_opts o = {.add_special_tokens = true};
    if (opts) o = *opts;
    max_align_t stack[1024]; /* 16 KB: most texts need no chunk at all */
    struct tk_arena a = {.first = (char *)stack, .first_cap = sizeof stack};
    struct tk_enc ea = {0}, eb = {0}, fin = {0};
    hs_status st = encode_one(tok, &a, text, len, 0, 0, o.char_offsets, &ea, err);
    if (!st && pair) st = encode_one(tok, &a, pair, pair_len, 1, 1, o.char_offsets, &eb, err);
    if (!st) {
        /* zero-length arrays still need a valid pointer for the template */
        if (!ea.ids && (st = tk_enc_push(&a, &ea, 0, 0, 0, 0, 0, 0)) == HS_STATUS_OK) ea.n = 0;
        if (!st && pair && !eb.ids && (st = tk_enc_push(&a, &eb, 0, 0, 0, 0, 0, 0)) == HS_STATUS_OK)
            eb.n = 0;
        if (st) st = hs_error_set(err, st, "no memory");
    }
    const struct hs_tok_trunc *t = o.truncation ? o.truncation : &tok->trunc;
    if (!st)
        st = tk_post_apply(tok, &a, &ea, pair ? &eb : NULL, t, o.add_special_tokens, &fin, err);
    if (!st) {
        /* one block: ids, type ids, starts, ends, then the two byte arrays */
        size_t n = fin.n ? fin.n : 1;
        char *blk = hs_malloc(n * (4 * sizeof(int32_t) + 2));
        if (!blk) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for the encoding");
        } else {
            out->ids = (int32_t *)(void *)blk;
            out->type_ids = out->ids + n;
            out->start = (uint32_t *)(out->type_ids + n);
            out->end = out->start + n;
            out->special = (uint8_t *)(out->end + n);
            out->sequence = out->special + n;
        }
        if (!st && fin.n) {
            out->n = fin.n;
            memcpy(out->ids, fin.ids, fin.n * sizeof *out->ids);
            memcpy(out->type_ids, fin.type_ids, fin.n * sizeof *out->type_ids);
            memcpy(out->special, fin.special, fin.n);
            memcpy(out->sequence, fin.seq, fin.n);
            memcpy(out->start, fin.start, fin.n * sizeof *out->start);
            memcpy(out->end, fin.end, fin.n * sizeof *out->end);
        }
    }
    tk_arena_free(&a);
    return st;
}

void hs_tok_encoding_free(struct hs_tok_encoding *enc)
{
    if (!enc) return;
    hs_free(enc->ids); /* the block of every array */
    memset(enc, 0, sizeof *enc);
}

size_t hs_tok_max_tokens(const struct hs_tok *tok, size_t len, bool has_pair, size_t pair_len)
{
    /* every token covers at least one byte of the normalized, pre-tokenized text, except the
     * one prefix char Metaspace / ByteLevel may add per split (at most one split per byte) */
    size_t g = tk_normalizer_growth(&tok->normalizer);
    size_t total = (len + (has_pair ? pair_len : 0)) * g * 2 + 4;
    return total + (size_t)hs_tok_added_tokens(tok, has_pair);
}
