/* hetserve — tokenizer.json loading: the file's sections, added tokens, JSON helpers. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/tokenizer/tok-impl.h"

/* ---- loader helpers ------------------------------------------------------------------------ */

hs_status tk_fail(struct tk_loader *ld, hs_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ld->err && ld->err->status != HS_STATUS_OK) return ld->err->status; /* keep the first */
    return hs_error_set(ld->err, st, "tokenizer.json: %s%s", ld->path, msg);
}

size_t tk_path_push(struct tk_loader *ld, const char *fmt, ...)
{
    size_t len = strlen(ld->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->path + len, sizeof ld->path - len, fmt, ap);
    va_end(ap);
    return len;
}

void tk_path_pop(struct tk_loader *ld, size_t len)
{
    ld->path[len] = '\0';
}

const void *tk_kind_find(struct tk_loader *ld, json_t *o, const void *table, size_t n, size_t size,
                         const char *what, hs_status *st)
{
    const char *rows = table;
    const char *type = NULL;
    if (!json_is_object(o)) {
        *st = tk_fail(ld, HS_STATUS_CORRUPT, " must be an object");
        return NULL;
    }
    *st = tk_get_str(ld, o, "type", &type);
    if (*st) return NULL;
    if (!type) {
        *st = tk_fail(ld, HS_STATUS_CORRUPT, ".type is missing");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(*(const char *const *)(rows + i * size), type) == 0) return rows + i * size;
    char names[512] = "";
    for (size_t i = 0; i < n; i++) {
        strncat(names, *(const char *const *)(rows + i * size), sizeof names - strlen(names) - 1);
        if (i + 1 < n) strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    *st = tk_fail(ld, HS_STATUS_UNSUPPORTED, ".type: %s '%s' is not supported (supported: %s)",
                  what, type, names);
    return NULL;
}

hs_status tk_kind_loaded(hs_status st, void (*free_ctx)(void *ctx), void **ctx)
{
    if (st != HS_STATUS_OK && *ctx && free_ctx) {
        free_ctx(*ctx);
        *ctx = NULL;
    }
    return st;
}

void tk_seq_free(void *ctx)
{
    struct tk_seq *s = ctx;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) s->kind->release((char *)s->v + i * s->kind->size);
    hs_free(s->v);
    hs_free(s);
}

hs_status tk_seq_load(struct tk_loader *ld, json_t *o, const struct tk_seq_kind *k, const void *arg,
                      void **ctx)
{
    json_t *arr = json_object_get(o, k->key);
    if (!json_is_array(arr)) return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be an array", k->key);
    struct tk_seq *s = hs_calloc(1, sizeof *s);
    if (!s || !(s->v = hs_calloc(json_array_size(arr) + 1, k->size))) {
        hs_free(s);
        return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    }
    s->kind = k;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        size_t mark = tk_path_push(ld, ".%s[%zu]", k->key, i);
        hs_status st = k->load(ld, json_array_get(arr, i), arg, (char *)s->v + i * k->size);
        tk_path_pop(ld, mark);
        if (st) {
            tk_seq_free(s);
            return st;
        }
        s->n = i + 1;
    }
    *ctx = s;
    return HS_STATUS_OK;
}

hs_status tk_get_bool(struct tk_loader *ld, json_t *o, const char *key, bool *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return HS_STATUS_OK;
    if (!json_is_boolean(v)) return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be a boolean", key);
    *out = json_is_true(v);
    return HS_STATUS_OK;
}

hs_status tk_get_int(struct tk_loader *ld, json_t *o, const char *key, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return HS_STATUS_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be a non-negative integer", key);
    *out = json_integer_value(v);
    return HS_STATUS_OK;
}

hs_status tk_get_str(struct tk_loader *ld, json_t *o, const char *key, const char **out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return HS_STATUS_OK;
    if (!json_is_string(v)) return tk_fail(ld, HS_STATUS_CORRUPT, ".%s must be a string", key);
    *out = json_string_value(v);
    return HS_STATUS_OK;
}

hs_status tk_str_cps(struct tk_loader *ld, const char *s, int32_t **out, size_t *n)
{
    size_t len = strlen(s), nc, bad;
    const char *why;
    if (!tk_utf8_validate((const unsigned char *)s, len, &nc, &bad, &why))
        return tk_fail(ld, HS_STATUS_CORRUPT, ": invalid UTF-8 in a string (%s)", why);
    *out = hs_malloc((nc + 1) * sizeof **out);
    if (!*out) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < nc; i++) (*out)[i] = tk_utf8_next(&p);
    *n = nc;
    return HS_STATUS_OK;
}

hs_status tk_regex_compile(struct tk_loader *ld, const char *pattern, bool literal,
                           pcre2_code **out)
{
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tk_fail(ld, HS_STATUS_UNSUPPORTED, ": regex '%.80s' does not compile at %zu: %s",
                       pattern, (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter remains without JIT */
    *out = re;
    return HS_STATUS_OK;
}

/* ---- the tokenizer ----------------------------------------------------------------------- */

void hs_tok_free(struct hs_tok *tok)
{
    if (!tok) return;
    tk_normalizer_release(&tok->normalizer);
    tk_pretok_release(&tok->pretok);
    tk_model_release(&tok->model);
    tk_post_release(&tok->post);
    tk_decoder_release(&tok->decoder);
    for (size_t i = 0; i < tok->n_added; i++) {
        if (tok->added[i].norm != tok->added[i].content) hs_free(tok->added[i].norm);
        hs_free(tok->added[i].content);
    }
    hs_free(tok->added);
    hs_free(tok);
}

const char *tk_id_text(const struct hs_tok *tok, int32_t id, size_t *len)
{
    /* an added token's id is the vocabulary's when its text is there: the vocabulary first
     * (a file whose added token reuses another text's id is the one case this differs from
     * HF, which asks the added tokens first) */
    const struct tk_vocab *mv = tok->model.vocab;
    if (mv && id >= 0 && id < mv->n && mv->text[id] && !tok->collide) {
        *len = mv->len[id];
        return mv->text[id];
    }
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id) {
            *len = tok->added[i].len;
            return tok->added[i].content;
        }
    const struct tk_vocab *v = tok->model.vocab;
    if (!v || id < 0 || id >= v->n || !v->text[id]) return NULL;
    *len = v->len[id];
    return v->text[id];
}

/* Normalizes an added token's content as the normalizer would. */
static hs_status normalize_content(struct hs_tok *tok, struct tk_added *t)
{
    t->norm = t->content;
    t->norm_len = t->len;
    if (!t->normalized || !tok->normalizer.kind) return HS_STATUS_OK;
    struct tk_arena a = {0};
    size_t nc, bad;
    const char *why;
    hs_status st = HS_STATUS_OK;
    if (!tk_utf8_validate((const unsigned char *)t->content, t->len, &nc, &bad, &why))
        return HS_STATUS_CORRUPT;
    struct tk_nstr ns = {.n = nc};
    ns.cp = tk_alloc(&a, (nc + 1) * sizeof *ns.cp);
    ns.as = tk_alloc(&a, (nc + 1) * sizeof *ns.as);
    ns.ae = tk_alloc(&a, (nc + 1) * sizeof *ns.ae);
    if (!ns.cp || !ns.as || !ns.ae) st = HS_STATUS_NO_MEMORY;
    const unsigned char *p = (const unsigned char *)t->content;
    for (size_t i = 0; i < nc && !st; i++) {
        ns.as[i] = (uint32_t)(p - (const unsigned char *)t->content);
        ns.cp[i] = tk_utf8_next(&p);
        ns.ae[i] = (uint32_t)(p - (const unsigned char *)t->content);
    }
    if (!st) st = tok->normalizer.kind->run(tok->normalizer.ctx, &a, &ns);
    if (!st) {
        size_t bytes = 0;
        for (size_t i = 0; i < ns.n; i++) bytes += (size_t)tk_utf8_len(ns.cp[i]);
        char *s = hs_malloc(bytes + 1);
        if (!s) {
            st = HS_STATUS_NO_MEMORY;
        } else {
            size_t w = 0;
            for (size_t i = 0; i < ns.n; i++) w += (size_t)tk_utf8_put(ns.cp[i], s + w);
            s[w] = '\0';
            t->norm = s;
            t->norm_len = w;
        }
    }
    tk_arena_free(&a);
    return st;
}

static hs_status added_load(struct tk_loader *ld, struct hs_tok *tok, json_t *arr)
{
    if (!arr || json_is_null(arr)) return HS_STATUS_OK;
    if (!json_is_array(arr))
        return tk_fail(ld, HS_STATUS_CORRUPT, ".added_tokens must be an array");
    tok->added = hs_calloc(json_array_size(arr) + 1, sizeof *tok->added);
    if (!tok->added) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        size_t mark = tk_path_push(ld, ".added_tokens[%zu]", i);
        struct tk_added t = {0};
        const char *content = NULL;
        long long id = -1;
        t.normalized = true;
        hs_status st =
            json_is_object(o) ? HS_STATUS_OK : tk_fail(ld, HS_STATUS_CORRUPT, " must be an object");
        if (!st) st = tk_get_str(ld, o, "content", &content);
        if (!st) st = tk_get_int(ld, o, "id", &id);
        if (!st) st = tk_get_bool(ld, o, "single_word", &t.single_word);
        if (!st) st = tk_get_bool(ld, o, "lstrip", &t.lstrip);
        if (!st) st = tk_get_bool(ld, o, "rstrip", &t.rstrip);
        if (!st) st = tk_get_bool(ld, o, "normalized", &t.normalized);
        if (!st) st = tk_get_bool(ld, o, "special", &t.special);
        if (!st && (!content || id < 0 || id > INT32_MAX))
            st = tk_fail(ld, HS_STATUS_CORRUPT, " needs a content and an id");
        tk_path_pop(ld, mark);
        if (st) return st;
        if (!*content) continue; /* HF ignores empty added tokens */
        int32_t mid =
            tok->model.vocab ? tk_vocab_find(tok->model.vocab, content, strlen(content)) : -1;
        t.id = mid >= 0 ? mid : (int32_t)id;
        /* an added token on another text's id: lookups must ask the added tokens first */
        if (mid < 0 && tok->model.vocab && t.id < tok->model.vocab->n &&
            tok->model.vocab->text[t.id])
            tok->collide = true;
        t.len = strlen(content);
        if (!(t.content = hs_strdup(content))) return tk_fail(ld, HS_STATUS_NO_MEMORY, "no memory");
        tok->added[tok->n_added++] = t;
        if ((st = normalize_content(tok, &tok->added[tok->n_added - 1])))
            return tk_fail(ld, st, ".added_tokens[%zu]: cannot normalize its content", i);
        const struct tk_added *ad = &tok->added[tok->n_added - 1];
        if (ad->norm_len) tok->first[ad->normalized][(unsigned char)ad->norm[0]] = 1;
        tok->first[0][(unsigned char)ad->content[0]] |= !ad->normalized;
        if (t.normalized)
            tok->any_norm = true;
        else
            tok->any_raw = true;
        if (t.id + 1 > tok->n_vocab) tok->n_vocab = t.id + 1;
    }
    return HS_STATUS_OK;
}

static hs_status trunc_load(struct tk_loader *ld, struct hs_tok *tok, json_t *o)
{
    tok->trunc.max_length = -1;
    if (!o || json_is_null(o)) return HS_STATUS_OK;
    if (!json_is_object(o)) return tk_fail(ld, HS_STATUS_CORRUPT, ".truncation must be an object");
    long long max = 512;
    const char *strategy = NULL, *direction = NULL;
    hs_status st = tk_get_int(ld, o, "max_length", &max);
    if (!st) st = tk_get_str(ld, o, "strategy", &strategy);
    if (!st) st = tk_get_str(ld, o, "direction", &direction);
    if (st) return st;
    if (max > INT32_MAX)
        return tk_fail(ld, HS_STATUS_CORRUPT, ".truncation.max_length is too large");
    tok->trunc.max_length = (int)max;
    tok->trunc.strategy = HS_TOK_TRUNC_LONGEST_FIRST;
    if (strategy && strcmp(strategy, "OnlyFirst") == 0)
        tok->trunc.strategy = HS_TOK_TRUNC_ONLY_FIRST;
    else if (strategy && strcmp(strategy, "OnlySecond") == 0)
        tok->trunc.strategy = HS_TOK_TRUNC_ONLY_SECOND;
    else if (strategy && strcmp(strategy, "LongestFirst") != 0)
        return tk_fail(ld, HS_STATUS_UNSUPPORTED,
                       ".truncation.strategy '%s' is not supported "
                       "(supported: LongestFirst, OnlyFirst, OnlySecond)",
                       strategy);
    tok->trunc.left = direction && strcmp(direction, "Left") == 0;
    return HS_STATUS_OK;
}

/* Loads one optional section with its path. */
#define SECTION(key, call)                                                                         \
    do {                                                                                           \
        json_t *v_ = json_object_get(root, key);                                                   \
        if (v_ && !json_is_null(v_)) {                                                             \
            size_t m_ = tk_path_push(&ld, "." key);                                                \
            st = call;                                                                             \
            tk_path_pop(&ld, m_);                                                                  \
            if (st) goto fail;                                                                     \
        }                                                                                          \
    } while (0)

hs_status hs_tok_load_json(const char *json, size_t len, struct hs_tok **out, struct hs_error *err)
{
    if (!json || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "tokenizer: NULL argument");
    *out = NULL;
    struct tk_loader ld = {.err = err};
    ld.path[0] = '\0';
    if (err) hs_error_clear(err);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "tokenizer.json: line %d column %d: %s",
                            je.line, je.column, je.text);
    hs_status st = HS_STATUS_OK;
    struct hs_tok *tok = hs_calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(root);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a tokenizer");
    }
    tok->pad_id = -1;
    if (!json_is_object(root)) {
        st = tk_fail(&ld, HS_STATUS_CORRUPT, "the document must be an object");
        goto fail;
    }
    json_t *model = json_object_get(root, "model");
    if (!model) {
        st = tk_fail(&ld, HS_STATUS_CORRUPT, ".model is missing");
        goto fail;
    }
    SECTION("model", tk_model_load(&ld, v_, &tok->model));
    tok->n_vocab = tok->model.vocab->n;
    SECTION("normalizer", tk_normalizer_load(&ld, v_, &tok->normalizer));
    SECTION("pre_tokenizer", tk_pretok_load(&ld, v_, &tok->pretok));
    SECTION("post_processor", tk_post_load(&ld, v_, tok->model.vocab, &tok->post));
    SECTION("decoder", tk_decoder_load(&ld, v_, &tok->decoder));
    st = added_load(&ld, tok, json_object_get(root, "added_tokens"));
    if (st) goto fail;
    st = trunc_load(&ld, tok, json_object_get(root, "truncation"));
    if (st) goto fail;
    json_t *pad = json_object_get(root, "padding");
    if (json_is_object(pad) && json_is_integer(json_object_get(pad, "pad_id")))
        tok->pad_id = (int32_t)json_integer_value(json_object_get(pad, "pad_id"));
    if (tok->pad_id < 0) {
        static const char *const pads[] = {"[PAD]", "<pad>", "<|endoftext|>"};
        for (size_t i = 0; i < 3 && tok->pad_id < 0; i++)
            tok->pad_id = hs_tok_token_to_id(tok, pads[i], strlen(pads[i]));
    }
    json_decref(root);
    *out = tok;
    return HS_STATUS_OK;
fail:
    json_decref(root);
    hs_tok_free(tok);
    return st;
}

hs_status hs_tok_load(const char *path, struct hs_tok **out, struct hs_error *err)
{
    if (!path || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "tokenizer: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
    char *buf = NULL;
    long n = -1;
    hs_status st = HS_STATUS_OK;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = hs_error_set(err, HS_STATUS_IO, "cannot size %s", path);
    else if (!(buf = hs_malloc((size_t)n + 1)))
        st = hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for %s (%ld bytes)", path, n);
    else if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        st = hs_error_set(err, HS_STATUS_IO, "short read on %s", path);
    fclose(f);
    if (!st) {
        st = hs_tok_load_json(buf, (size_t)n, out, err);
        if (st && err) {
            char msg[sizeof err->msg];
            int k = snprintf(msg, sizeof msg, "%.200s: ", path);
            if (k > 0 && (size_t)k < sizeof msg) {
                size_t room = sizeof msg - (size_t)k - 1, ml = strlen(err->msg);
                memcpy(msg + k, err->msg, ml < room ? ml : room);
                msg[(size_t)k + (ml < room ? ml : room)] = '\0';
                memcpy(err->msg, msg, sizeof msg);
            }
        }
    }
    hs_free(buf);
    return st;
}

bool tk_normalizer_bert(const struct tk_normalizer *n, bool *lower, bool *strip, bool *chinese);
bool tk_model_plain_wordpiece(const struct tk_model *m);
bool tk_pretok_is_bert(const struct tk_pretok *p);

bool hs_tok_is_plain_bert(const struct hs_tok *tok, bool *lower, bool *strip, bool *chinese)
{
    if (!tk_normalizer_bert(&tok->normalizer, lower, strip, chinese) ||
        !tk_pretok_is_bert(&tok->pretok) || !tk_model_plain_wordpiece(&tok->model))
        return false;
    static const char *const legacy[] = {"[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]"};
    for (size_t i = 0; i < tok->n_added; i++) {
        const struct tk_added *t = &tok->added[i];
        bool known = false;
        for (int k = 0; k < 5; k++) known |= strcmp(t->content, legacy[k]) == 0;
        if (!known || t->normalized || t->lstrip || t->rstrip || t->single_word) return false;
        if (tk_vocab_find(tok->model.vocab, t->content, t->len) != t->id) return false;
    }
    /* the template: [CLS] text [SEP] with type id 0 */
    struct hs_tok_trunc none = {.max_length = -1};
    struct hs_tok_encode_opts o = {.add_special_tokens = true, .truncation = &none};
    struct hs_tok_encoding e;
    if (hs_tok_encode(tok, "a", 1, NULL, 0, &o, &e, NULL) != HS_STATUS_OK) return false;
    bool ok = e.n == 3 && e.ids[0] == tk_vocab_find(tok->model.vocab, "[CLS]", 5) &&
              e.ids[2] == tk_vocab_find(tok->model.vocab, "[SEP]", 5) && e.special[0] &&
              e.special[2] && !e.type_ids[0] && !e.type_ids[1] && !e.type_ids[2];
    hs_tok_encoding_free(&e);
    return ok;
}

int32_t hs_tok_vocab_size(const struct hs_tok *tok)
{
    return tok->n_vocab;
}

const char *hs_tok_id_to_token(const struct hs_tok *tok, int32_t id)
{
    size_t len;
    return tk_id_text(tok, id, &len);
}

int32_t hs_tok_token_to_id(const struct hs_tok *tok, const char *token, size_t len)
{
    if (!token) return -1;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && memcmp(tok->added[i].content, token, len) == 0)
            return tok->added[i].id;
    return tok->model.vocab ? tk_vocab_find(tok->model.vocab, token, len) : -1;
}

int32_t hs_tok_pad_id(const struct hs_tok *tok)
{
    return tok->pad_id;
}

bool hs_tok_is_special(const struct hs_tok *tok, int32_t id)
{
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id && tok->added[i].special) return true;
    return false;
}
