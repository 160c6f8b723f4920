/* hetserve — tokenizer.json post-processors (one table row per "type") and truncation.
 *
 * A post-processor turns the list of encodings (the text, and the pair) into the list HF's
 * process_encodings returns; the pipeline concatenates it. Template tokens get offsets (0, 0)
 * and special mask 1.
 */
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

#define MAX_PARTS 64

struct parts {
    struct tk_enc v[MAX_PARTS];
    size_t n;
};

static hs_status add_special(struct tk_arena *a, struct parts *p, const int32_t *ids, size_t n,
                             int32_t type_id)
{
    if (p->n == MAX_PARTS) return HS_STATUS_INVALID_ARGUMENT;
    struct tk_enc e = {0};
    for (size_t i = 0; i < n; i++) {
        hs_status st = tk_enc_push(a, &e, ids[i], type_id, 1, 255, 0, 0);
        if (st) return st;
    }
    p->v[p->n++] = e;
    return HS_STATUS_OK;
}

static hs_status add_seq(struct parts *p, const struct tk_enc *e, int32_t type_id, bool set_type)
{
    if (p->n == MAX_PARTS) return HS_STATUS_INVALID_ARGUMENT;
    struct tk_enc c = *e;
    if (set_type)
        for (size_t i = 0; i < c.n; i++) c.type_ids[i] = type_id;
    p->v[p->n++] = c;
    return HS_STATUS_OK;
}

/* a special token given as ["text", id] */
static hs_status pair_load(struct tk_loader *ld, json_t *o, const char *key, int32_t *id)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 1)) < 0 ||
        json_integer_value(json_array_get(v, 1)) > INT32_MAX)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be [token, id]", key);
    *id = (int32_t)json_integer_value(json_array_get(v, 1));
    return HS_STATUS_OK;
}

/* ---- ByteLevel offsets trimming (also RobertaProcessing's) ---------------------------------- */

static void trim_offsets(const struct hs_tok *tok, struct tk_enc *e, bool add_prefix_space)
{
    for (size_t i = 0; i < e->n; i++) {
        size_t lead = 0, trail = 0;
        if (e->ws[i] >= 0) {
            lead = (size_t)(e->ws[i] >> 16);
            trail = (size_t)(e->ws[i] & 0xFFFF);
        } else {
            size_t len;
            const char *t = tk_id_text(tok, e->ids[i], &len);
            if (!t) continue;
            const unsigned char *p = (const unsigned char *)t, *end = p + len;
            bool in_lead = true;
            while (p < end) {
                int32_t c = tk_utf8_next(&p);
                bool sp = c == 0x120 || tk_is_whitespace(c);
                if (in_lead && sp)
                    lead++;
                else
                    in_lead = false;
                trail = sp ? trail + 1 : 0;
            }
        }
        if (lead == 0 && trail == 0) continue;
        if (lead > 0) {
            bool first = i == 0 || e->start[i] == 0;
            if (first && add_prefix_space && lead == 1) lead = 0;
            uint32_t s = e->start[i] + (uint32_t)lead;
            e->start[i] = s < e->end[i] ? s : e->end[i];
        }
        if (trail > 0 && e->end[i] >= trail) {
            uint32_t x = e->end[i] - (uint32_t)trail;
            e->end[i] = x > e->start[i] ? x : e->start[i];
        }
    }
}

struct bl_ctx {
    bool trim, add_prefix_space;
};

static hs_status bl_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx)
{
    struct bl_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    b->trim = b->add_prefix_space = true;
    hs_status st = tk_get_bool(ld, o, "trim_offsets", &b->trim);
    if (!st) st = tk_get_bool(ld, o, "add_prefix_space", &b->add_prefix_space);
    if (st) {
        hs_free(b);
        return st;
    }
    *ctx = b;
    return HS_STATUS_OK;
}

static hs_status bl_run(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                        struct parts *p, bool add)
{
    const struct bl_ctx *b = ctx;
    if (b->trim)
        for (size_t i = 0; i < p->n; i++) trim_offsets(tok, &p->v[i], b->add_prefix_space);
    return HS_STATUS_OK;
}

static int zero_added(const void *ctx, bool pair)
{
    return 0;
}

/* ---- BertProcessing, RobertaProcessing ------------------------------------------------------ */

struct br_ctx {
    int32_t cls, sep;
    bool roberta, trim, add_prefix_space;
};

static hs_status bert_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx)
{
    struct br_ctx *b = hs_calloc(1, sizeof *b);
    if (!b) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    hs_status st = pair_load(ld, o, "cls", &b->cls);
    if (!st) st = pair_load(ld, o, "sep", &b->sep);
    if (st) {
        hs_free(b);
        return st;
    }
    *ctx = b;
    return HS_STATUS_OK;
}

static hs_status roberta_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx)
{
    hs_status st = bert_load(ld, o, v, ctx);
    if (st) return st;
    struct br_ctx *b = *ctx;
    b->roberta = true;
    b->trim = b->add_prefix_space = true;
    if ((st = tk_get_bool(ld, o, "trim_offsets", &b->trim)) ||
        (st = tk_get_bool(ld, o, "add_prefix_space", &b->add_prefix_space))) {
        hs_free(b);
        *ctx = NULL;
    }
    return st;
}

static hs_status br_run(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                        struct parts *p, bool add)
{
    const struct br_ctx *b = ctx;
    struct parts in = *p;
    if (b->roberta) {
        for (size_t i = 0; i < in.n; i++) {
            if (b->trim) trim_offsets(tok, &in.v[i], b->add_prefix_space);
            for (size_t k = 0; k < in.v[i].n; k++) in.v[i].type_ids[k] = 0;
        }
    }
    if (!add) {
        *p = in;
        return HS_STATUS_OK;
    }
    p->n = 0;
    hs_status st;
    for (size_t i = 0; i < in.n; i++) {
        if (i == 0) {
            if ((st = add_special(a, p, &b->cls, 1, 0))) return st;
        } else if (b->roberta) {
            if ((st = add_special(a, p, &b->sep, 1, 0))) return st;
        }
        int32_t ty = b->roberta ? 0 : (i == 0 ? 0 : 1);
        if ((st = add_seq(p, &in.v[i], ty, false))) return st;
        if ((st = add_special(a, p, &b->sep, 1, ty))) return st;
    }
    return HS_STATUS_OK;
}

static int br_added(const void *ctx, bool pair)
{
    const struct br_ctx *b = ctx;
    return b->roberta ? (pair ? 4 : 2) : (pair ? 3 : 2);
}

/* ---- TemplateProcessing -----------------------------------------------------------------------
 */

struct piece {
    bool special;
    int seq;      /* 0 = A, 1 = B */
    int32_t *ids; /* special: the token's ids */
    size_t n_ids;
    int32_t type_id;
};

struct tpl_ctx {
    struct piece *single, *pair;
    size_t n_single, n_pair;
};

static void tpl_free(void *ctx)
{
    struct tpl_ctx *t = ctx;
    if (!t) return;
    for (size_t i = 0; i < t->n_single; i++) hs_free(t->single[i].ids);
    for (size_t i = 0; i < t->n_pair; i++) hs_free(t->pair[i].ids);
    hs_free(t->single);
    hs_free(t->pair);
    hs_free(t);
}

static hs_status tpl_pieces(struct tk_loader *ld, json_t *o, const char *key, json_t *specials,
                            struct piece **out, size_t *n)
{
    json_t *arr = json_object_get(o, key);
    if (!json_is_array(arr)) return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be an array", key);
    *out = hs_calloc(json_array_size(arr) + 1, sizeof **out);
    if (!*out) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *it = json_array_get(arr, i);
        json_t *sp = json_object_get(it, "SpecialToken"), *sq = json_object_get(it, "Sequence");
        json_t *body = sp ? sp : sq;
        json_t *id = json_object_get(body, "id"), *ty = json_object_get(body, "type_id");
        struct piece *pc = &(*out)[i];
        *n = i + 1;
        if (!json_is_object(body) || !json_is_string(id) || !json_is_integer(ty))
            return tk_fail(ld, HS_STATUS_CORRUPT,
                           ".%s[%zu] must be {\"SpecialToken\"|\"Sequence\": {id, type_id}}", key,
                           i);
        pc->type_id = (int32_t)json_integer_value(ty);
        if (sq) {
            const char *s = json_string_value(id);
            if (strcmp(s, "A") != 0 && strcmp(s, "B") != 0)
                return tk_fail(ld, HS_STATUS_CORRUPT, ".%s[%zu]: sequence id must be A or B", key,
                               i);
            pc->seq = s[0] == 'B';
            continue;
        }
        pc->special = true;
        json_t *def = json_object_get(specials, json_string_value(id));
        json_t *ids = json_object_get(def, "ids");
        if (!json_is_array(ids))
            return tk_fail(ld, HS_STATUS_CORRUPT,
                           ".special_tokens lacks '%.40s' (used by .%s[%zu])",
                           json_string_value(id), key, i);
        pc->ids = hs_calloc(json_array_size(ids) + 1, sizeof *pc->ids);
        if (!pc->ids) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *x = json_array_get(ids, k);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) > INT32_MAX)
                return tk_fail(ld, HS_STATUS_CORRUPT,
                               ".special_tokens['%.40s'].ids[%zu] is not an id",
                               json_string_value(id), k);
            pc->ids[k] = (int32_t)json_integer_value(x);
        }
        pc->n_ids = json_array_size(ids);
    }
    return HS_STATUS_OK;
}

static hs_status tpl_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx)
{
    struct tpl_ctx *t = hs_calloc(1, sizeof *t);
    if (!t) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    json_t *specials = json_object_get(o, "special_tokens");
    hs_status st = tpl_pieces(ld, o, "single", specials, &t->single, &t->n_single);
    if (!st) st = tpl_pieces(ld, o, "pair", specials, &t->pair, &t->n_pair);
    if (st) {
        tpl_free(t);
        return st;
    }
    *ctx = t;
    return HS_STATUS_OK;
}

static hs_status tpl_run(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                         struct parts *p, bool add)
{
    const struct tpl_ctx *t = ctx;
    struct parts in = *p;
    bool pair = in.n > 1;
    const struct piece *pc = pair ? t->pair : t->single;
    size_t n = pair ? t->n_pair : t->n_single;
    p->n = 0;
    for (size_t i = 0; i < n; i++) {
        hs_status st;
        if (pc[i].special) {
            if (!add) continue;
            st = add_special(a, p, pc[i].ids, pc[i].n_ids, pc[i].type_id);
        } else {
            size_t k = (size_t)pc[i].seq;
            if (k >= in.n) continue;
            st = add_seq(p, &in.v[k], pc[i].type_id, true);
        }
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static int tpl_added(const void *ctx, bool pair)
{
    const struct tpl_ctx *t = ctx;
    const struct piece *pc = pair ? t->pair : t->single;
    size_t n = pair ? t->n_pair : t->n_single;
    int k = 0;
    for (size_t i = 0; i < n; i++) k += pc[i].special ? (int)pc[i].n_ids : 0;
    return k;
}

/* ---- Sequence ------------------------------------------------------------------------------- */

static hs_status seq_item_load(struct tk_loader *ld, json_t *o, const void *arg, void *item)
{
    return tk_post_load(ld, o, arg, item);
}

static void seq_item_release(void *item)
{
    tk_post_release(item);
}

static const struct tk_seq_kind seq_kind = {"processors", sizeof(struct tk_post), seq_item_load,
                                            seq_item_release};

static hs_status seq_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx)
{
    return tk_seq_load(ld, o, &seq_kind, v, ctx);
}

typedef hs_status (*post_fn)(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                             struct parts *p, bool add);

struct tk_post_kind {
    const char *name;
    hs_status (*load)(struct tk_loader *ld, json_t *o, const struct tk_vocab *v, void **ctx);
    post_fn run;
    int (*added)(const void *ctx, bool pair);
    void (*free)(void *ctx);
};

static hs_status seq_run(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                         struct parts *p, bool add);
static int seq_added(const void *ctx, bool pair);

static const struct tk_post_kind rows[] = {
    {"BertProcessing", bert_load, br_run, br_added, hs_free},
    {"RobertaProcessing", roberta_load, br_run, br_added, hs_free},
    {"TemplateProcessing", tpl_load, tpl_run, tpl_added, tpl_free},
    {"ByteLevel", bl_load, bl_run, zero_added, hs_free},
    {"Sequence", seq_load, seq_run, seq_added, tk_seq_free},
};

static const struct tk_post_kind *row_of(const struct tk_post *p)
{
    return p->kind;
}

static hs_status seq_run(const void *ctx, const struct hs_tok *tok, struct tk_arena *a,
                         struct parts *p, bool add)
{
    const struct tk_seq *s = ctx;
    const struct tk_post *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        hs_status st = row_of(&v[i])->run(v[i].ctx, tok, a, p, add);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static int seq_added(const void *ctx, bool pair)
{
    const struct tk_seq *s = ctx;
    const struct tk_post *v = s->v;
    int k = 0;
    for (size_t i = 0; i < s->n; i++) k += row_of(&v[i])->added(v[i].ctx, pair);
    return k;
}

hs_status tk_post_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *vocab,
                       struct tk_post *out)
{
    memset(out, 0, sizeof *out);
    hs_status st;
    const struct tk_post_kind *k = tk_kind_find(ld, o, rows, sizeof rows / sizeof rows[0],
                                                sizeof rows[0], "post-processor", &st);
    if (!k) return st;
    st = tk_kind_loaded(k->load(ld, o, vocab, &out->ctx), k->free, &out->ctx);
    if (st == HS_STATUS_OK) out->kind = k;
    return st;
}

void tk_post_release(struct tk_post *p)
{
    if (p->kind && row_of(p)->free) row_of(p)->free(p->ctx);
    memset(p, 0, sizeof *p);
}

int hs_tok_added_tokens(const struct hs_tok *tok, bool pair)
{
    if (!tok->post.kind) return 0;
    return row_of(&tok->post)->added(tok->post.ctx, pair);
}

/* ---- truncation and the whole step ----------------------------------------------------------- */

static void enc_truncate(struct tk_enc *e, size_t max, bool left)
{
    if (e->n <= max) return;
    if (left) {
        size_t d = e->n - max;
        e->ids += d;
        e->type_ids += d;
        e->special += d;
        e->seq += d;
        e->start += d;
        e->end += d;
        e->ws += d;
    }
    e->n = max;
}

static hs_status truncate_encs(struct tk_enc *a, struct tk_enc *b, const struct hs_tok_trunc *t,
                               size_t max, struct hs_error *err)
{
    if (max == 0) {
        enc_truncate(a, 0, t->left);
        if (b) enc_truncate(b, 0, t->left);
        return HS_STATUS_OK;
    }
    size_t total = a->n + (b ? b->n : 0);
    if (total <= max) return HS_STATUS_OK;
    size_t to_remove = total - max;
    if (t->strategy == HS_TOK_TRUNC_LONGEST_FIRST) {
        if (!b) {
            enc_truncate(a, total - to_remove, t->left);
            return HS_STATUS_OK;
        }
        size_t n1 = a->n, n2 = b->n;
        bool swap = false;
        if (n1 > n2) {
            swap = true;
            size_t x = n1;
            n1 = n2;
            n2 = x;
        }
        if (n1 > max)
            n2 = n1;
        else
            n2 = n1 > max - n1 ? n1 : max - n1;
        if (n1 + n2 > max) {
            n1 = max / 2;
            n2 = n1 + max % 2;
        }
        if (swap) {
            size_t x = n1;
            n1 = n2;
            n2 = x;
        }
        enc_truncate(a, n1, t->left);
        enc_truncate(b, n2, t->left);
        return HS_STATUS_OK;
    }
    struct tk_enc *target = t->strategy == HS_TOK_TRUNC_ONLY_FIRST ? a : b;
    if (!target)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "truncation only_second needs a second sequence");
    if (target->n <= to_remove)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "truncation: the sequence to truncate is too short (%zu tokens, %zu "
                            "to remove)",
                            target->n, to_remove);
    enc_truncate(target, target->n - to_remove, t->left);
    return HS_STATUS_OK;
}

hs_status tk_post_apply(const struct hs_tok *tok, struct tk_arena *ar, struct tk_enc *a,
                        struct tk_enc *b, const struct hs_tok_trunc *t, bool add,
                        struct tk_enc *out, struct hs_error *err)
{
    hs_status st;
    if (t && t->max_length >= 0) {
        size_t max = (size_t)t->max_length;
        int added = hs_tok_added_tokens(tok, b != NULL);
        if (add && added > 0) {
            if ((size_t)added > max)
                return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                    "truncation max_length %zu is below the %d tokens the "
                                    "template adds",
                                    max, added);
            max -= (size_t)added;
        }
        if ((st = truncate_encs(a, b, t, max, err))) return st;
    }
    struct parts p = {.n = 0};
    p.v[p.n++] = *a;
    if (b) p.v[p.n++] = *b;
    if (tok->post.kind) {
        st = row_of(&tok->post)->run(tok->post.ctx, tok, ar, &p, add);
        if (st == HS_STATUS_INVALID_ARGUMENT)
            return hs_error_set(err, st, "template has more than %d parts", MAX_PARTS);
        if (st) return hs_error_set(err, st, "no memory for the encoding");
    }
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < p.n; i++) {
        const struct tk_enc *e = &p.v[i];
        for (size_t k = 0; k < e->n; k++) {
            st = tk_enc_push(ar, out, e->ids[k], e->type_ids[k], e->special[k], e->seq[k],
                             e->start[k], e->end[k]);
            if (st) return hs_error_set(err, st, "no memory for the encoding");
            out->ws[out->n - 1] = e->ws[k];
        }
    }
    return HS_STATUS_OK;
}
