/* Request bodies: the bytes a client sent -> a decoded request (inputs as text or token ids,
 * tokenized with the request's options, priority and deadline), in the request's arena. Nothing
 * here knows the connection (http.c), so the handlers and tests/fuzz/fuzz_http.c run the same
 * code. Each returns 0, or an HTTP status with the error message in msg. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "model/seqcls.h"
#include "server/server-impl.h"

int hs__refuse(char *msg, size_t cap, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return status;
}

struct hs_served_model *hs__find_model(struct hs_server *s, const char *name)
{
    struct hs_served_model *sm = hs__server_model(s, name);
    if (sm || !name) return sm;
    /* Accept a path-like name whose last component matches ("sentence-transformers/x"). */
    const char *slash = strrchr(name, '/');
    if (slash)
        for (int i = 0; i < s->n_models; i++)
            if (!strcmp(s->models[i].name, slash + 1)) return &s->models[i];
    return NULL;
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

int hs__body_parse(const char *body, size_t len, int64_t *ts, json_t **root, char *msg, size_t cap)
{
    json_error_t je;
    *root = json_loadb(body ? body : "", len, 0, &je);
    if (ts) ts[HS_TS_PARSED] = hs_now_ns();
    if (!*root)
        return hs__refuse(msg, cap, 400, "malformed JSON: %s (line %d, column %d)", je.text,
                          je.line, je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return hs__refuse(msg, cap, 400, "the request body must be a JSON object");
    }
    return 0;
}

/* Collects the inputs: a string, an array of strings, an array of token ids, or an array of
 * arrays of token ids. *items receives them as an array (a new reference). */
static int get_inputs(json_t *v, const char *field, json_t **items, bool *tokens, char *msg,
                      size_t cap)
{
    if (!v) return hs__refuse(msg, cap, 400, "missing field '%s'", field);
    *tokens = false;
    if (json_is_string(v)) {
        *items = json_pack("[O]", v);
        return *items ? 0 : hs__refuse(msg, cap, 500, "out of memory");
    }
    if (!json_is_array(v))
        return hs__refuse(msg, cap, 400, "'%s' must be a string or an array", field);
    size_t n = json_array_size(v);
    if (n == 0) return hs__refuse(msg, cap, 400, "'%s' is empty", field);
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) {
        /* one sequence of token ids */
        *tokens = true;
        *items = json_pack("[O]", v);
        return *items ? 0 : hs__refuse(msg, cap, 500, "out of memory");
    }
    *tokens = json_is_array(first);
    json_incref(v);
    *items = v;
    return 0;
}

/* Fills seq from a JSON array of token ids; wraps them in [CLS] .. [SEP] unless they already
 * are. */
static int token_input(struct hs_arena *a, const struct hs_served_model *sm, json_t *arr,
                       size_t idx, bool truncate, struct hs_seq *seq, char *msg, size_t cap)
{
    const struct hs_model *m = sm->model;
    const struct hs_tokenizer *tok = m->tokenizer;
    int vocab = hs_tokenizer_vocab_size(tok);
    int32_t cls = hs_tokenizer_cls_id(tok), sep = hs_tokenizer_sep_id(tok);
    if (!json_is_array(arr)) {
        snprintf(msg, cap, "input[%zu]: expected an array of token ids", idx);
        return 400;
    }
    size_t n = json_array_size(arr);
    if (n == 0) {
        snprintf(msg, cap, "input[%zu] is empty", idx);
        return 400;
    }
    int seq_max = m->config.max_seq_len;
    bool wrapped = n >= 2 && json_integer_value(json_array_get(arr, 0)) == cls &&
                   json_integer_value(json_array_get(arr, n - 1)) == sep;
    size_t lo = wrapped ? 1 : 0, hi = wrapped ? n - 1 : n; /* the ids between the specials */
    if (hi - lo + 2 > (size_t)seq_max) {
        if (!truncate) {
            snprintf(msg, cap,
                     "input[%zu] has %zu tokens; model %s takes at most %d (set \"truncate\": "
                     "true to cut it)",
                     idx, hi - lo + 2, sm->name, seq_max);
            return 413;
        }
        hi = lo + (size_t)seq_max - 2;
    }
    int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)seq_max);
    if (!ids) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    int o = 0;
    ids[o++] = cls;
    for (size_t i = lo; i < hi; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab) {
            snprintf(msg, cap, "input[%zu][%zu]: expected a token id in [0, %d)", idx, i, vocab);
            return 400;
        }
        ids[o++] = (int32_t)json_integer_value(t);
    }
    ids[o++] = sep;
    seq->ids = ids;
    seq->n_tokens = o;
    return 0;
}

int hs__text_input(const struct hs_server *srv, struct hs_arena *a,
                   const struct hs_served_model *sm, json_t *s, size_t idx, bool truncate,
                   struct hs_seq *seq, char *msg, size_t cap)
{
    struct hs__text_opts o = {.truncate = truncate};
    return hs__text_input_opts(srv, a, sm, s, idx, &o, seq, msg, cap);
}

/* The last tokens of text, the template's first and last special kept: ids[seq_max]. */
static int left_truncate(const struct hs_model *m, const char *text, size_t len, int nfull,
                         int32_t *ids, int seq_max, int *nt, size_t idx, char *msg, size_t cap)
{
    int32_t *full = hs_malloc(sizeof(int32_t) * (size_t)nfull);
    if (!full) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    int n = 0;
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = hs_tokenizer_encode(m->tokenizer, text, len, full, nfull, &n, NULL, &err);
    if (st != HS_STATUS_OK) {
        hs_free(full);
        snprintf(msg, cap, "input[%zu]: %s", idx, err.msg[0] ? err.msg : hs_status_str(st));
        return hs__http_status(st);
    }
    const struct hs_tokenizer *tok = m->tokenizer;
    int lead = n > 0 && full[0] == hs_tokenizer_cls_id(tok);
    int trail = n > 1 && full[n - 1] == hs_tokenizer_sep_id(tok);
    int keep = seq_max - lead - trail; /* pieces kept: the last ones */
    int o = 0;
    if (lead) ids[o++] = full[0];
    for (int i = n - trail - keep; i < n - trail; i++) ids[o++] = full[i];
    if (trail) ids[o++] = full[n - 1];
    *nt = o;
    hs_free(full);
    return 0;
}

int hs__text_input_opts(const struct hs_server *srv, struct hs_arena *a,
                        const struct hs_served_model *sm, json_t *s, size_t idx,
                        const struct hs__text_opts *op, struct hs_seq *seq, char *msg, size_t cap)
{
    const struct hs_model *m = sm->model;
    if (!json_is_string(s)) {
        snprintf(msg, cap, "input[%zu]: expected a string", idx);
        return 400;
    }
    const char *text = json_string_value(s);
    size_t len = json_string_length(s);
    if (len == 0) {
        snprintf(msg, cap, "input[%zu] is an empty string", idx);
        return 400;
    }
    size_t chars = utf8_chars(text, len);
    if (chars > (size_t)srv->cfg.limits.chars_max) {
        snprintf(msg, cap, "input[%zu] has %zu characters; the limit is %d", idx, chars,
                 srv->cfg.limits.chars_max);
        return 413;
    }
    if (op->prompt && op->prompt->text_len) { /* the prompt's text, then the input's */
        char *t = hs_arena_alloc(a, op->prompt->text_len + len + 1);
        if (!t) {
            snprintf(msg, cap, "out of memory");
            return 500;
        }
        memcpy(t, op->prompt->text, op->prompt->text_len);
        memcpy(t + op->prompt->text_len, text, len);
        len += op->prompt->text_len;
        t[len] = 0;
        text = t;
    }
    int seq_max = m->config.max_seq_len;
    int32_t *ids = hs_arena_alloc(a, sizeof(int32_t) * (size_t)seq_max);
    if (!ids) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    int nt = 0, nfull = 0;
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = hs_model_tokenize(m, text, len, ids, seq_max, &nt, &nfull, &err);
    if (st != HS_STATUS_OK) {
        /* The tokenizer's message may fill msg; a cut message still names the fault. */
        int w = snprintf(msg, cap, "input[%zu]: ", idx);
        if (w > 0 && (size_t)w < cap)
            snprintf(msg + w, cap - (size_t)w, "%.*s", (int)(cap - (size_t)w - 1),
                     err.msg[0] ? err.msg : hs_status_str(st));
        return hs__http_status(st);
    }
    if (nfull > nt && !op->truncate) {
        snprintf(msg, cap,
                 "input[%zu] has %d tokens; model %s takes at most %d (set \"truncate\": true "
                 "to cut it)",
                 idx, nfull, sm->name, seq_max);
        return 413;
    }
    if (nfull > nt && op->left) {
        int status = left_truncate(m, text, len, nfull, ids, nt, &nt, idx, msg, cap);
        if (status) return status;
    }
    seq->ids = ids;
    seq->n_tokens = nt;
    return 0;
}

int hs__text_opts_decode(const struct hs_served_model *sm, json_t *root, struct hs__text_opts *o,
                         char *msg, size_t cap)
{
    memset(o, 0, sizeof *o);
    json_t *jt = json_object_get(root, "truncate");
    if (jt && !json_is_boolean(jt) && !json_is_null(jt))
        return hs__refuse(msg, cap, 400, "'truncate' must be a boolean");
    o->truncate = jt && json_is_true(jt);
    json_t *jd = json_object_get(root, "truncation_direction");
    if (jd && !json_is_null(jd)) {
        const char *d = json_is_string(jd) ? json_string_value(jd) : "";
        if (!strcasecmp(d, "left"))
            o->left = true;
        else if (strcasecmp(d, "right"))
            return hs__refuse(msg, cap, 400,
                              "'truncation_direction' must be \"left\" or \"right\"");
    }
    json_t *jp = json_object_get(root, "prompt_name");
    if (jp && !json_is_null(jp) && !json_is_string(jp))
        return hs__refuse(msg, cap, 400, "'prompt_name' must be a string");
    return hs__tasks_prompt(sm->tasks, jp && json_is_string(jp) ? json_string_value(jp) : NULL,
                            &o->prompt, msg, cap);
}

int hs__request_qos(const struct hs_server *s, json_t *root, const char *x_priority,
                    const char *x_timeout_ms, enum hs_priority *prio, long long *timeout_ms,
                    char *msg, size_t cap)
{
    /* the body's fields win over the headers */
    *prio = HS_PRIORITY_INTERACTIVE;
    const char *hp = x_priority;
    json_t *jp = json_object_get(root, "priority");
    if (jp && json_is_string(jp))
        hp = json_string_value(jp);
    else if (jp && !json_is_null(jp))
        return hs__refuse(msg, cap, 400, "'priority' must be \"interactive\" or \"batch\"");
    if (hp) {
        int p = hs_priority_parse(hp);
        if (p < 0)
            return hs__refuse(msg, cap, 400, "priority '%s': expected \"interactive\" or \"batch\"",
                              hp);
        *prio = (enum hs_priority)p;
    }
    long long t = s->cfg.limits.timeout_ms;
    if (x_timeout_ms) {
        char *end;
        t = strtoll(x_timeout_ms, &end, 10);
        if (*end || end == x_timeout_ms) t = -1;
    }
    json_t *jto = json_object_get(root, "timeout_ms");
    if (jto && !json_is_null(jto)) t = json_is_integer(jto) ? json_integer_value(jto) : -1;
    if (t <= 0 || t > s->cfg.limits.timeout_max_ms)
        return hs__refuse(msg, cap, 400, "timeout_ms must be an integer in [1, %d]",
                          s->cfg.limits.timeout_max_ms);
    *timeout_ms = t;
    return 0;
}

int hs__embed_decode(struct hs_server *s, struct hs_arena *a, bool openai, const char *body,
                     size_t len, const char *x_priority, const char *x_timeout_ms, int64_t *ts,
                     struct hs__embed_req *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL, *items = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;

    /* model */
    json_t *jm = json_object_get(root, "model");
    if (jm && !json_is_string(jm) && !json_is_null(jm)) {
        status = hs__refuse(msg, cap, 400, "'model' must be a string");
        goto out;
    }
    const char *model = jm && json_is_string(jm) ? json_string_value(jm) : NULL;
    out->sm = hs__find_model(s, model);
    if (!out->sm) {
        status = hs__refuse(msg, cap, 404, "model '%s' not found; GET /v1/models lists the models",
                            model);
        goto out;
    }

    if (out->sm->model->config.dims.pool == HS_POOL_SPLADE ||
        out->sm->model->config.dims.pool == HS_POOL_NONE) {
        const bool sparse = out->sm->model->config.dims.pool == HS_POOL_SPLADE;
        status = hs__refuse(msg, cap, 400, "model %s %s: POST %s for its vectors%s", out->sm->name,
                            sparse ? "is a sparse (SPLADE) model"
                                   : "is served without pooling (models[].pooling: none)",
                            sparse ? "/embed_sparse" : "/embed_all",
                            sparse ? " (models[].pooling: mean serves dense ones)" : "");
        goto out;
    }

    /* options */
    struct hs__text_opts topts;
    if ((status = hs__text_opts_decode(out->sm, root, &topts, msg, cap))) goto out;
    out->truncate = topts.truncate;
    const struct hs_model *m = out->sm->model;
    const int full_dim = m->config.dims.hidden;
    json_t *jd = json_object_get(root, "dimensions");
    if (jd && !json_is_null(jd)) {
        if (!json_is_integer(jd) || json_integer_value(jd) < 1 ||
            json_integer_value(jd) > full_dim) {
            status = hs__refuse(msg, cap, 400,
                                "'dimensions' must be an integer in [1, %d]: model %s outputs %d "
                                "dimensions (a smaller one keeps the first ones, renormalized)",
                                full_dim, out->sm->name, full_dim);
            goto out;
        }
        out->dimensions = (int)json_integer_value(jd);
        if ((status = hs__tasks_check_dims(out->sm->tasks, out->dimensions, full_dim, out->sm->name,
                                           msg, cap)))
            goto out;
        if (out->dimensions == full_dim) out->dimensions = 0;
    }
    if (openai) {
        json_t *jf = json_object_get(root, "encoding_format");
        if (jf && !json_is_null(jf)) {
            const char *f = json_is_string(jf) ? json_string_value(jf) : "";
            if (!strcmp(f, "base64"))
                out->base64 = true;
            else if (strcmp(f, "float") != 0) {
                status =
                    hs__refuse(msg, cap, 400, "'encoding_format' must be \"float\" or \"base64\"");
                goto out;
            }
        }
    } else {
        json_t *jn = json_object_get(root, "normalize");
        if (jn && !json_is_boolean(jn) && !json_is_null(jn)) {
            status = hs__refuse(msg, cap, 400, "'normalize' must be a boolean");
            goto out;
        }
        bool normalize = !jn || json_is_null(jn) || json_is_true(jn);
        if (!normalize && m->config.dims.normalize) {
            status = hs__refuse(msg, cap, 400,
                                "'normalize': false is not supported: model %s ends with a "
                                "Normalize module",
                                out->sm->name);
            goto out;
        }
        out->post_normalize = normalize && !m->config.dims.normalize;
    }
    /* a cut of a normalized row is normalized again (Matryoshka) */
    out->renormalize = out->dimensions && (m->config.dims.normalize || out->post_normalize);

    status =
        hs__request_qos(s, root, x_priority, x_timeout_ms, &out->prio, &out->timeout_ms, msg, cap);
    if (status) goto out;

    /* inputs */
    bool tokens;
    status = get_inputs(json_object_get(root, openai ? "input" : "inputs"),
                        openai ? "input" : "inputs", &items, &tokens, msg, cap);
    if (status) goto out;
    if (tokens && topts.prompt && json_object_get(root, "prompt_name")) {
        status = hs__refuse(msg, cap, 400, "'prompt_name' applies to texts, not to token ids");
        goto out;
    }
    size_t n = json_array_size(items);
    if (n > (size_t)s->cfg.limits.items_max) {
        status = hs__refuse(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                            s->cfg.limits.items_max);
        goto out;
    }
    out->seqs = hs_arena_calloc(a, n, sizeof *out->seqs);
    if (!out->seqs) {
        status = hs__refuse(msg, cap, 500, "out of memory");
        goto out;
    }
    /* (an input's message is cut at 511 bytes, as it always was) */
    size_t icap = cap < 512 ? cap : 512;
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(items, i);
        status = tokens
                     ? token_input(a, out->sm, it, i, out->truncate, &out->seqs[i], msg, icap)
                     : hs__text_input_opts(s, a, out->sm, it, i, &topts, &out->seqs[i], msg, icap);
        if (status) goto out;
        out->prompt_tokens += out->seqs[i].n_tokens;
    }
    out->n = n;
out:
    json_decref(items);
    json_decref(root);
    return status;
}

int hs__tokenize_body(struct hs_server *s, struct hs_arena *a, const char *body, size_t len,
                      int64_t *ts, struct hs_buf *out, char *msg, size_t cap)
{
    json_t *root = NULL, *items = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;
    json_t *jm = json_object_get(root, "model");
    const char *model = jm && json_is_string(jm) ? json_string_value(jm) : NULL;
    struct hs_served_model *sm = hs__find_model(s, model);
    if (!sm) {
        status = hs__refuse(msg, cap, 404, "model '%s' not found", model);
        goto out;
    }
    json_t *ja = json_object_get(root, "add_special_tokens");
    bool special = !ja || !json_is_false(ja);
    bool tokens;
    status = get_inputs(json_object_get(root, "inputs"), "inputs", &items, &tokens, msg, cap);
    if (status) goto out;
    /* (arrays are pairs [text, text]; token ids are refused) */
    if (tokens && !json_is_string(json_array_get(json_array_get(items, 0), 0))) {
        status =
            hs__refuse(msg, cap, 400, "'inputs' must be a string, an array of strings or of pairs");
        goto out;
    }
    size_t n = json_array_size(items);
    if (n > (size_t)s->cfg.limits.items_max) {
        status = hs__refuse(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                            s->cfg.limits.items_max);
        goto out;
    }
    const struct hs_model *m = sm->model;
    hs_buf_init(out, a, 4096);
    hs_buf_putc(out, '[');
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(items, i);
        size_t chars = 0;
        for (size_t k = 0; k < (json_is_array(it) ? json_array_size(it) : 1); k++) {
            json_t *x = json_is_array(it) ? json_array_get(it, k) : it;
            if (json_is_string(x)) chars += utf8_chars(json_string_value(x), json_string_length(x));
        }
        if (chars > (size_t)s->cfg.limits.chars_max) {
            status = hs__refuse(msg, cap, 413, "inputs[%zu] has more than %d characters", i,
                                s->cfg.limits.chars_max);
            goto out;
        }
        if (i) hs_buf_putc(out, ',');
        if ((status = hs__tokenize_item(m, it, i, special, out, msg, cap))) goto out;
    }
    hs_buf_putc(out, ']');
out:
    json_decref(items);
    json_decref(root);
    return status;
}
