/* hetserve — the bodies of POST /tokenize (one input) and POST /decode, as TEI answers them.
 *
 * /tokenize, per input: [{"id", "text", "special", "start", "stop"}]: a special token of the
 * template has its token text and null start/stop; every other token the bytes [start, stop) of
 * its input (a pair's second text for its tokens) and those byte offsets. An input may be a
 * pair, ["text", "pair"]. A model tokenized from vocab.txt alone has no offsets: its tokens
 * carry their vocabulary text, start/stop null.
 * /decode: {"ids": [..] or [[..], ..], "skip_special_tokens": true} -> ["text", ..].
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "core/alloc.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "model/tokenizer/tok.h"
#include "server/json.h"
#include "server/server-impl.h"

static int http_of(hs_status st)
{
    switch (st) {
    case HS_STATUS_INVALID_INPUT:
    case HS_STATUS_INVALID_ARGUMENT:
        return 400;
    case HS_STATUS_TOO_LONG:
        return 413;
    default:
        return 500;
    }
}

static bool valid_utf8(const char *s, size_t n)
{
    utf8proc_int32_t c;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

/* Writes one input's token array into out. */
int hs__tokenize_item(const struct hs_model *m, json_t *item, size_t idx, bool special,
                      struct hs_buf *out, char *msg, size_t cap)
{
    const char *t[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    if (json_is_string(item)) {
        t[0] = json_string_value(item);
        n[0] = json_string_length(item);
    } else if (json_is_array(item) && json_array_size(item) == 2 &&
               json_is_string(json_array_get(item, 0)) && json_is_string(json_array_get(item, 1))) {
        for (int k = 0; k < 2; k++) {
            t[k] = json_string_value(json_array_get(item, (size_t)k));
            n[k] = json_string_length(json_array_get(item, (size_t)k));
        }
    } else {
        return hs__refuse(msg, cap, 400, "inputs[%zu]: expected a string or a pair [text, text]",
                          idx);
    }
    const struct hs_tok *tok = hs_tokenizer_json(m->tokenizer);
    struct hs_error err;
    hs_error_clear(&err);
    if (!tok) {
        if (t[1])
            return hs__refuse(
                msg, cap, 400,
                "inputs[%zu]: pairs need a tokenizer.json (this model has vocab.txt only)", idx);
        /* vocab.txt: every token, [CLS] .. [SEP] */
        int ncap = (int)n[0] + 2;
        int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)ncap);
        int nt = 0;
        hs_status st =
            ids ? hs_tokenizer_encode(m->tokenizer, t[0], n[0], ids, ncap, &nt, NULL, &err)
                : HS_STATUS_NO_MEMORY;
        if (st != HS_STATUS_OK) {
            hs_free(ids);
            return hs__refuse(msg, cap, http_of(st), "inputs[%zu]: %s", idx,
                              err.msg[0] ? err.msg : hs_status_str(st));
        }
        hs_buf_putc(out, '[');
        int first = 1;
        for (int k = 0; k < nt; k++) {
            bool sp = k == 0 || k == nt - 1;
            if (sp && !special) continue;
            const char *tt = hs_tokenizer_id_to_token(m->tokenizer, ids[k]);
            hs_buf_printf(out, "%s{\"id\":%d,\"text\":", first ? "" : ",", ids[k]);
            hs_buf_json_str(out, tt ? tt : "", tt ? strlen(tt) : 0);
            hs_buf_printf(out, ",\"special\":%s,\"start\":null,\"stop\":null}",
                          sp ? "true" : "false");
            first = 0;
        }
        hs_buf_putc(out, ']');
        hs_free(ids);
        return 0;
    }
    /* every token: no truncation (also past the model's positions) */
    struct hs_tok_trunc none = {.max_length = -1};
    struct hs_tok_encode_opts o = {.add_special_tokens = special, .truncation = &none};
    struct hs_tok_encoding e;
    hs_status st = hs_tok_encode(tok, t[0], n[0], t[1], n[1], &o, &e, &err);
    if (st != HS_STATUS_OK)
        return hs__refuse(msg, cap, http_of(st), "inputs[%zu]: %s", idx,
                          err.msg[0] ? err.msg : hs_status_str(st));
    hs_buf_putc(out, '[');
    for (size_t k = 0; k < e.n; k++) {
        hs_buf_printf(out, "%s{\"id\":%d,\"text\":", k ? "," : "", e.ids[k]);
        if (e.special[k]) {
            const char *tt = hs_tok_id_to_token(tok, e.ids[k]);
            hs_buf_json_str(out, tt ? tt : "", tt ? strlen(tt) : 0);
            hs_buf_puts(out, ",\"special\":true,\"start\":null,\"stop\":null}");
            continue;
        }
        int s = e.sequence[k] == 1 ? 1 : 0;
        uint32_t a = e.start[k], b = e.end[k];
        if (a > n[s]) a = (uint32_t)n[s];
        if (b > n[s]) b = (uint32_t)n[s];
        if (b < a) b = a;
        /* the bytes of the text; a slice that cuts a character is escaped as TEI's lossy
         * conversion would: hs_buf_json_str writes bytes as they are, so mend them here */
        if (valid_utf8(t[s] + a, b - a))
            hs_buf_json_str(out, t[s] + a, b - a);
        else
            hs_buf_json_str(out, "\xEF\xBF\xBD", 3);
        hs_buf_printf(out, ",\"special\":false,\"start\":%u,\"stop\":%u}", a, b);
    }
    hs_buf_putc(out, ']');
    hs_tok_encoding_free(&e);
    return 0;
}

/* One id list -> its decoded text, appended as a JSON string. */
static int decode_one(const struct hs_tok *tok, json_t *ids, size_t idx, bool skip,
                      struct hs_buf *out, char *msg, size_t cap)
{
    size_t n = json_array_size(ids);
    int32_t *v = hs_malloc((n + 1) * sizeof *v);
    if (!v) return hs__refuse(msg, cap, 500, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ids, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            hs_free(v);
            return hs__refuse(msg, cap, 400, "ids[%zu][%zu]: expected a token id", idx, i);
        }
        v[i] = (int32_t)json_integer_value(x);
    }
    char *text = NULL;
    size_t len = 0;
    struct hs_error err;
    hs_error_clear(&err);
    hs_status st = hs_tok_decode(tok, v, n, skip, &text, &len, &err);
    hs_free(v);
    if (st != HS_STATUS_OK) return hs__refuse(msg, cap, http_of(st), "ids[%zu]: %s", idx, err.msg);
    hs_buf_json_str(out, text, len);
    hs_free(text);
    return 0;
}

int hs__decode_body(struct hs_server *s, struct hs_arena *a, const char *body, size_t len,
                    int64_t *ts, struct hs_buf *out, char *msg, size_t cap)
{
    json_t *root = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;
    json_t *jm = json_object_get(root, "model");
    const char *model = json_is_string(jm) ? json_string_value(jm) : NULL;
    struct hs_served_model *sm = hs__server_model(s, model);
    json_t *ids = json_object_get(root, "ids"), *sk = json_object_get(root, "skip_special_tokens");
    bool skip = !sk || !json_is_false(sk);
    if (!sm) {
        status = hs__refuse(msg, cap, 404, "model '%s' not found", model ? model : "(default)");
    } else if (!hs_tokenizer_json(sm->model->tokenizer)) {
        status =
            hs__refuse(msg, cap, 400, "model %s has no tokenizer.json to decode with", sm->name);
    } else if (!json_is_array(ids) || json_array_size(ids) == 0) {
        status =
            hs__refuse(msg, cap, 400, "'ids' must be an array of token ids or of arrays of them");
    } else if (sk && !json_is_boolean(sk)) {
        status = hs__refuse(msg, cap, 400, "'skip_special_tokens' must be a boolean");
    }
    if (status) {
        json_decref(root);
        return status;
    }
    const struct hs_tok *tok = hs_tokenizer_json(sm->model->tokenizer);
    bool batch = json_is_array(json_array_get(ids, 0));
    size_t n = batch ? json_array_size(ids) : 1;
    if (n > (size_t)s->cfg.limits.items_max) {
        json_decref(root);
        return hs__refuse(msg, cap, 413, "%zu id lists; the limit is %d per request", n,
                          s->cfg.limits.items_max);
    }
    hs_buf_init(out, a, 256);
    hs_buf_putc(out, '[');
    for (size_t i = 0; i < n && !status; i++) {
        json_t *one = batch ? json_array_get(ids, i) : ids;
        if (!json_is_array(one)) {
            status = hs__refuse(msg, cap, 400, "ids[%zu]: expected an array of token ids", i);
            break;
        }
        if (i) hs_buf_putc(out, ',');
        status = decode_one(tok, one, i, skip, out, msg, cap);
    }
    hs_buf_putc(out, ']');
    json_decref(root);
    return status;
}
