/* The KServe v2 / Open Inference Protocol over HTTP: see kserve.h for the endpoints, tensors
 * and parameters. An infer request runs as one job of the dispatch (sched/dispatch.h), as
 * /v1/embeddings does (task "infer"), with the same deadline, priority, retry, shadow and
 * breaker reporting; its per-request state lives in the connection's arena (the slot
 * hs__conn_predict gives, which /predict uses on its own connections).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "model/head.h"
#include "server/kserve.h"

/* the project's version (CMakeLists.txt, project()) */
#define KSERVE_VERSION        "0.1.0"
#define MODELS_PREFIX         "/v2/models/"
#define KSERVE_JSON_DEPTH_MAX 8

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary-tensor extension's tensors are little-endian, as this host must be"
#endif

static const char *const output_names[] = {
    [HS__KSERVE_EMBEDDING] = "embedding",
    [HS__KSERVE_PROBABILITIES] = "probabilities",
};

void hs__kserve_error_body(struct hs_buf *b, const char *msg)
{
    hs_buf_puts(b, "{\"error\":");
    hs_buf_json_str(b, msg, strlen(msg));
    hs_buf_putc(b, '}');
}

/* The served model named name (none for an empty name: the protocol's paths always name one). */
static struct hs_served_model *find_model(struct hs_server *s, const char *name)
{
    return name && name[0] ? hs__find_model(s, name) : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * decoding an infer request
 */

enum tensor_kind { T_TEXT, T_IDS, T_MASK, T_COUNT };
static const char *const tensor_names[T_COUNT] = {"text", "input_ids", "attention_mask"};

/* One input tensor as decoded: its shape and its elements, either JSON strings (text) or
 * integers (ids, mask). */
struct tensor {
    bool present;
    int rank;
    int64_t shape[2];
    size_t count;  /* elements */
    json_t *texts; /* T_TEXT: an array of count strings (a reference) */
    int64_t *ints; /* T_IDS, T_MASK: [count] */
};

/* Leaves of a nested JSON array (the protocol allows the data row-major flat or nested in the
 * tensor's shape), at most max of them, into out. 0 or a status. */
static int flatten(json_t *v, int depth, size_t max, json_t *out, char *msg, size_t cap)
{
    if (!json_is_array(v)) {
        if (json_array_size(out) >= max)
            return hs__refuse(msg, cap, 413, "a tensor holds more than %zu elements", max);
        return json_array_append(out, v) ? hs__refuse(msg, cap, 500, "out of memory") : 0;
    }
    if (depth >= KSERVE_JSON_DEPTH_MAX)
        return hs__refuse(msg, cap, 400, "'data' is nested deeper than %d levels",
                          KSERVE_JSON_DEPTH_MAX);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        int st = flatten(e, depth + 1, max, out, msg, cap);
        if (st) return st;
    }
    return 0;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One element of "inputs" into t (kind: which one it is). bin[*off..bin_len) are the binary
 * tensors not yet taken. */
static int decode_tensor(struct hs_arena *a, json_t *in, size_t idx, enum tensor_kind kind,
                         size_t max, const unsigned char *bin, size_t bin_len, size_t *off,
                         struct tensor *t, char *msg, size_t cap)
{
    const char *name = tensor_names[kind];
    json_t *jd = json_object_get(in, "datatype");
    const char *dt = json_is_string(jd) ? json_string_value(jd) : NULL;
    if (!dt) return hs__refuse(msg, cap, 400, "inputs[%zu] ('%s'): missing 'datatype'", idx, name);
    int width = 0; /* bytes per binary element; 0: BYTES */
    if (kind == T_TEXT) {
        if (strcmp(dt, "BYTES"))
            return hs__refuse(msg, cap, 400, "input 'text' must be BYTES, not %s", dt);
    } else if (!strcmp(dt, "INT64")) {
        width = 8;
    } else if (!strcmp(dt, "INT32")) {
        width = 4;
    } else {
        return hs__refuse(msg, cap, 400, "input '%s' must be INT64 or INT32, not %s", name, dt);
    }

    json_t *js = json_object_get(in, "shape");
    if (!json_is_array(js) || json_array_size(js) < 1 || json_array_size(js) > 2)
        return hs__refuse(msg, cap, 400, "input '%s': 'shape' must be an array of 1 or 2 sizes",
                          name);
    t->rank = (int)json_array_size(js);
    size_t count = 1;
    for (int d = 0; d < t->rank; d++) {
        json_t *e = json_array_get(js, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 1 ||
            json_integer_value(e) > (json_int_t)max)
            return hs__refuse(msg, cap, 400, "input '%s': shape[%d] must be an integer in [1, %zu]",
                              name, d, max);
        t->shape[d] = json_integer_value(e);
        count *= (size_t)t->shape[d];
        if (count > max)
            return hs__refuse(msg, cap, 413, "input '%s' has more than %zu elements", name, max);
    }
    if (kind == T_TEXT && t->rank == 2 && t->shape[1] != 1)
        return hs__refuse(msg, cap, 400, "input 'text': shape must be [n] or [n, 1]");
    t->count = count;

    json_t *jp = json_object_get(in, "parameters");
    json_t *jb = json_is_object(jp) ? json_object_get(jp, "binary_data_size") : NULL;
    json_t *data = json_object_get(in, "data");
    if (jb) {
        if (data)
            return hs__refuse(msg, cap, 400, "input '%s' has both 'data' and binary_data_size",
                              name);
        if (!json_is_integer(jb) || json_integer_value(jb) < 0 ||
            (size_t)json_integer_value(jb) > bin_len - *off)
            return hs__refuse(msg, cap, 400,
                              "input '%s': binary_data_size must be an integer no larger than the "
                              "%zu binary bytes left",
                              name, bin_len - *off);
        size_t nb = (size_t)json_integer_value(jb);
        const unsigned char *p = bin + *off;
        *off += nb;
        if (kind == T_TEXT) {
            t->texts = json_array();
            if (!t->texts) return hs__refuse(msg, cap, 500, "out of memory");
            size_t o = 0;
            for (size_t i = 0; i < count; i++) {
                if (nb - o < 4 || le32(p + o) > nb - o - 4)
                    return hs__refuse(msg, cap, 400,
                                      "input 'text': its %zu binary bytes end inside element %zu",
                                      nb, i);
                size_t sl = le32(p + o);
                json_t *str = json_stringn((const char *)p + o + 4, sl);
                if (!str) return hs__refuse(msg, cap, 400, "input 'text'[%zu] is not UTF-8", i);
                if (json_array_append_new(t->texts, str))
                    return hs__refuse(msg, cap, 500, "out of memory");
                o += 4 + sl;
            }
            if (o != nb)
                return hs__refuse(
                    msg, cap, 400,
                    "input 'text': %zu binary bytes for %zu elements of shape; %zu left "
                    "over",
                    nb, count, nb - o);
            return 0;
        }
        if (nb != count * (size_t)width)
            return hs__refuse(msg, cap, 400,
                              "input '%s': %zu binary bytes; %zu elements of %s take %zu", name, nb,
                              count, dt, count * (size_t)width);
        t->ints = hs_arena_alloc(a, sizeof(int64_t) * count);
        if (!t->ints) return hs__refuse(msg, cap, 500, "out of memory");
        for (size_t i = 0; i < count; i++) {
            const unsigned char *q = p + i * (size_t)width;
            uint64_t lo = le32(q);
            t->ints[i] = width == 4 ? (int64_t)(int32_t)(uint32_t)lo
                                    : (int64_t)(lo | (uint64_t)le32(q + 4) << 32);
        }
        return 0;
    }

    if (!data) return hs__refuse(msg, cap, 400, "input '%s': missing 'data'", name);
    json_t *flat = json_array();
    if (!flat) return hs__refuse(msg, cap, 500, "out of memory");
    int st = flatten(data, 0, max, flat, msg, cap);
    if (!st && json_array_size(flat) != count)
        st = hs__refuse(msg, cap, 400, "input '%s': %zu elements in 'data'; its shape holds %zu",
                        name, json_array_size(flat), count);
    if (st) {
        json_decref(flat);
        return st;
    }
    if (kind == T_TEXT) {
        t->texts = flat;
        return 0;
    }
    t->ints = hs_arena_alloc(a, sizeof(int64_t) * count);
    if (!t->ints) {
        json_decref(flat);
        return hs__refuse(msg, cap, 500, "out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        json_t *e = json_array_get(flat, i);
        if (!json_is_integer(e)) {
            json_decref(flat);
            return hs__refuse(msg, cap, 400, "input '%s'[%zu]: expected an integer", name, i);
        }
        t->ints[i] = json_integer_value(e);
    }
    json_decref(flat);
    return 0;
}

/* Row r of the id tensor (the ids where the mask, when there is one, is not 0) into seq:
 * [CLS] .. [SEP], added unless the row already has them. */
static int id_row(struct hs_arena *a, const struct hs_served_model *sm, const struct tensor *ids,
                  const struct tensor *mask, size_t r, size_t row_len, bool truncate,
                  struct hs_seq *seq, char *msg, size_t cap)
{
    const struct hs_model *m = sm->model;
    const struct hs_tokenizer *tok = m->tokenizer;
    const int vocab = hs_tokenizer_vocab_size(tok), seq_max = m->config.max_seq_len;
    const int32_t cls = hs_tokenizer_cls_id(tok), sep = hs_tokenizer_sep_id(tok);
    const int64_t *row = ids->ints + r * row_len;
    const int64_t *mrow = mask ? mask->ints + r * row_len : NULL;
    size_t n = 0;
    for (size_t i = 0; i < row_len; i++) n += !mrow || mrow[i] != 0;
    if (n == 0) return hs__refuse(msg, cap, 400, "input_ids row %zu has no tokens", r);
    int32_t *ids32 = hs_arena_alloc(a, sizeof(int32_t) * (n + 2));
    if (!ids32) return hs__refuse(msg, cap, 500, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < row_len; i++) {
        if (mrow && mrow[i] == 0) continue;
        if (row[i] < 0 || row[i] >= vocab)
            return hs__refuse(msg, cap, 400, "input_ids[%zu][%zu]: expected a token id in [0, %d)",
                              r, i, vocab);
        ids32[o++] = (int32_t)row[i];
    }
    bool wrapped = n >= 2 && ids32[0] == cls && ids32[n - 1] == sep;
    size_t lo = wrapped ? 1 : 0, hi = wrapped ? n - 1 : n; /* the ids between the specials */
    if (hi - lo + 2 > (size_t)seq_max) {
        if (!truncate)
            return hs__refuse(
                msg, cap, 413,
                "input_ids row %zu has %zu tokens; model %s takes at most %d (set the "
                "parameter \"truncate\": true to cut it)",
                r, hi - lo + 2, sm->name, seq_max);
        hi = lo + (size_t)seq_max - 2;
    }
    int32_t *out = hs_arena_alloc(a, sizeof(int32_t) * (hi - lo + 2));
    if (!out) return hs__refuse(msg, cap, 500, "out of memory");
    int k = 0;
    out[k++] = cls;
    for (size_t i = lo; i < hi; i++) out[k++] = ids32[i];
    out[k++] = sep;
    seq->ids = out;
    seq->n_tokens = k;
    return 0;
}

/* The request's "parameters": truncate, normalize, priority and deadline, binary_data_output. */
static int decode_params(struct hs_server *s, json_t *root, const char *x_priority,
                         const char *x_timeout_ms, struct hs__kserve_req *out, bool *normalize,
                         bool *binary_all, char *msg, size_t cap)
{
    json_t *p = json_object_get(root, "parameters");
    if (p && !json_is_object(p)) return hs__refuse(msg, cap, 400, "'parameters' must be an object");
    json_t *qos = json_object();
    if (!qos) return hs__refuse(msg, cap, 500, "out of memory");
    int st = 0;
    static const char *const bools[] = {"truncate", "normalize", "binary_data_output"};
    bool *dst[] = {&out->truncate, normalize, binary_all};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(p, bools[i]);
        if (v && !json_is_boolean(v)) {
            st = hs__refuse(msg, cap, 400, "parameter '%s' must be a boolean", bools[i]);
            goto out;
        }
        if (v) *dst[i] = json_is_true(v);
    }
    json_t *jp = json_object_get(p, "priority");
    if (json_is_integer(jp)) {
        if (json_integer_value(jp) < 0) {
            st = hs__refuse(msg, cap, 400, "parameter 'priority' must be >= 0");
            goto out;
        }
        jp = json_string(json_integer_value(jp) <= 1 ? "interactive" : "batch");
        if (!jp || json_object_set_new(qos, "priority", jp)) st = hs__refuse(msg, cap, 500, "oom");
    } else if (jp && json_object_set(qos, "priority", jp)) {
        st = hs__refuse(msg, cap, 500, "out of memory");
    }
    json_t *jt = json_object_get(p, "timeout"), *jms = json_object_get(p, "timeout_ms");
    if (!st && jt && !jms) {
        /* Triton's timeout is in microseconds */
        if (!json_is_integer(jt) || json_integer_value(jt) <= 0) {
            st = hs__refuse(msg, cap, 400,
                            "parameter 'timeout' (microseconds) must be an integer > 0");
            goto out;
        }
        json_int_t us = json_integer_value(jt);
        jms = json_integer(us / 1000 + (us % 1000 != 0));
        if (!jms || json_object_set_new(qos, "timeout_ms", jms))
            st = hs__refuse(msg, cap, 500, "oom");
    } else if (!st && jms && json_object_set(qos, "timeout_ms", jms)) {
        st = hs__refuse(msg, cap, 500, "out of memory");
    }
    if (!st)
        st = hs__request_qos(s, qos, x_priority, x_timeout_ms, &out->prio, &out->timeout_ms, msg,
                             cap);
out:
    json_decref(qos);
    return st;
}

/* The request's "outputs" (absent: every output the model has, binary per binary_all). */
static int decode_outputs(json_t *root, bool binary_all, struct hs__kserve_req *out, char *msg,
                          size_t cap)
{
    json_t *jo = json_object_get(root, "outputs");
    int n_have = out->head ? 2 : 1;
    if (!jo || json_is_null(jo)) {
        for (int i = 0; i < n_have; i++) {
            out->outputs[i] = (enum hs__kserve_output)i;
            out->binary[i] = binary_all;
        }
        out->n_outputs = n_have;
        return 0;
    }
    if (!json_is_array(jo) || json_array_size(jo) == 0 ||
        json_array_size(jo) > HS__KSERVE_MAX_OUTPUTS)
        return hs__refuse(msg, cap, 400, "'outputs' must be an array of 1 or 2 outputs");
    size_t i;
    json_t *o;
    json_array_foreach(jo, i, o)
    {
        json_t *jn = json_object_get(o, "name");
        const char *name = json_is_string(jn) ? json_string_value(jn) : NULL;
        if (!name) return hs__refuse(msg, cap, 400, "outputs[%zu]: missing 'name'", i);
        int kind = -1;
        for (int c = 0; c < n_have; c++)
            if (!strcmp(name, output_names[c])) kind = c;
        if (kind < 0)
            return hs__refuse(msg, cap, 400, "output '%s': model %s has the outputs embedding%s",
                              name, out->sm->name, out->head ? ", probabilities" : "");
        for (int c = 0; c < out->n_outputs; c++)
            if (out->outputs[c] == (enum hs__kserve_output)kind)
                return hs__refuse(msg, cap, 400, "output '%s' is asked for twice", name);
        json_t *jp = json_object_get(o, "parameters");
        if (jp && !json_is_object(jp))
            return hs__refuse(msg, cap, 400, "output '%s': 'parameters' must be an object", name);
        json_t *jb = json_object_get(jp, "binary_data");
        if (jb && !json_is_boolean(jb))
            return hs__refuse(msg, cap, 400, "output '%s': binary_data must be a boolean", name);
        if (json_object_get(jp, "classification"))
            return hs__refuse(msg, cap, 400,
                              "output '%s': the classification extension is not supported; ask for "
                              "'probabilities'",
                              name);
        out->outputs[out->n_outputs] = (enum hs__kserve_output)kind;
        out->binary[out->n_outputs++] = jb ? json_is_true(jb) : binary_all;
    }
    return 0;
}

/* The JSON part's length from the Inference-Header-Content-Length header. */
static int header_length(const char *h, size_t len, size_t *out, char *msg, size_t cap)
{
    *out = len;
    if (!h) return 0;
    size_t v = 0, n = 0;
    for (; h[n] >= '0' && h[n] <= '9' && n < 20; n++) v = v * 10 + (size_t)(h[n] - '0');
    if (n == 0 || h[n] || v > len)
        return hs__refuse(
            msg, cap, 400,
            "Inference-Header-Content-Length must be a decimal no larger than the body "
            "(%zu bytes)",
            len);
    *out = v;
    return 0;
}

int hs__kserve_decode(struct hs_server *s, struct hs_arena *a, const char *model, const char *body,
                      size_t len, const char *header_len, const char *x_priority,
                      const char *x_timeout_ms, int64_t *ts, struct hs__kserve_req *out, char *msg,
                      size_t cap)
{
    memset(out, 0, sizeof *out);
    struct tensor t[T_COUNT] = {0};
    json_t *root = NULL;
    size_t json_len;
    int st = header_length(header_len, len, &json_len, msg, cap);
    if (st) return st;
    out->sm = find_model(s, model);
    if (!out->sm)
        return hs__refuse(msg, cap, 404, "model '%s' not found; GET /v1/models lists the models",
                          model ? model : "");
    out->head = hs__predict_head(s, out->sm);
    st = hs__body_parse(body, json_len, ts, &root, msg, cap);
    if (st) return st;

    json_t *jid = json_object_get(root, "id");
    if (jid && !json_is_string(jid)) {
        st = hs__refuse(msg, cap, 400, "'id' must be a string");
        goto out;
    }
    if (jid) {
        if (json_string_length(jid) >= sizeof out->id) {
            st = hs__refuse(msg, cap, 400, "'id' is longer than %zu bytes", sizeof out->id - 1);
            goto out;
        }
        memcpy(out->id, json_string_value(jid), json_string_length(jid) + 1);
        out->has_id = true;
    }
    bool normalize = true, binary_all = false;
    st = decode_params(s, root, x_priority, x_timeout_ms, out, &normalize, &binary_all, msg, cap);
    if (st) goto out;
    const struct hs_model *m = out->sm->model;
    if (!normalize && m->config.dims.normalize) {
        st = hs__refuse(
            msg, cap, 400,
            "parameter 'normalize': false is not supported: model %s ends with a Normalize "
            "module",
            out->sm->name);
        goto out;
    }
    out->post_normalize = normalize && !m->config.dims.normalize;
    st = decode_outputs(root, binary_all, out, msg, cap);
    if (st) goto out;

    /* inputs */
    json_t *ji = json_object_get(root, "inputs");
    if (!json_is_array(ji) || json_array_size(ji) == 0 || json_array_size(ji) > T_COUNT) {
        st = hs__refuse(msg, cap, 400, "'inputs' must be an array of 1 to %d tensors", T_COUNT);
        goto out;
    }
    /* no tensor can hold more elements than its body has bytes */
    const size_t max = len ? len : 1;
    const unsigned char *bin = (const unsigned char *)body + json_len;
    size_t bin_len = len - json_len, off = 0, i;
    json_t *in;
    json_array_foreach(ji, i, in)
    {
        json_t *jn = json_object_get(in, "name");
        const char *name = json_is_string(jn) ? json_string_value(jn) : NULL;
        if (!name) {
            st = hs__refuse(msg, cap, 400, "inputs[%zu]: missing 'name'", i);
            goto out;
        }
        int kind = -1;
        for (int c = 0; c < T_COUNT; c++)
            if (!strcmp(name, tensor_names[c])) kind = c;
        if (kind < 0) {
            st =
                hs__refuse(msg, cap, 400,
                           "input '%s': the inputs are 'text' (BYTES), or 'input_ids' (INT64) with "
                           "an optional 'attention_mask'",
                           name);
            goto out;
        }
        if (t[kind].present) {
            st = hs__refuse(msg, cap, 400, "input '%s' is given twice", name);
            goto out;
        }
        t[kind].present = true;
        st = decode_tensor(a, in, i, (enum tensor_kind)kind, max, bin, bin_len, &off, &t[kind], msg,
                           cap);
        if (st) goto out;
    }
    if (off != bin_len) {
        st = hs__refuse(msg, cap, 400,
                        "%zu bytes after the JSON header are not any input's binary_data_size",
                        bin_len - off);
        goto out;
    }
    if (t[T_TEXT].present == t[T_IDS].present) {
        st = hs__refuse(msg, cap, 400, "give one of the inputs 'text' and 'input_ids'");
        goto out;
    }
    if (t[T_MASK].present &&
        (!t[T_IDS].present || t[T_MASK].rank != t[T_IDS].rank ||
         t[T_MASK].shape[0] != t[T_IDS].shape[0] || t[T_MASK].count != t[T_IDS].count)) {
        st = hs__refuse(msg, cap, 400, "'attention_mask' must come with 'input_ids', of its shape");
        goto out;
    }
    size_t n = t[T_TEXT].present    ? t[T_TEXT].count
               : t[T_IDS].rank == 2 ? (size_t)t[T_IDS].shape[0]
                                    : 1;
    if (n > (size_t)s->cfg.limits.items_max) {
        st = hs__refuse(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                        s->cfg.limits.items_max);
        goto out;
    }
    out->seqs = hs_arena_calloc(a, n, sizeof *out->seqs);
    if (!out->seqs) {
        st = hs__refuse(msg, cap, 500, "out of memory");
        goto out;
    }
    size_t icap = cap < 512 ? cap : 512;
    for (size_t r = 0; r < n; r++) {
        st = t[T_TEXT].present
                 ? hs__text_input(s, a, out->sm, json_array_get(t[T_TEXT].texts, r), r,
                                  out->truncate, &out->seqs[r], msg, icap)
                 : id_row(a, out->sm, &t[T_IDS], t[T_MASK].present ? &t[T_MASK] : NULL, r,
                          t[T_IDS].count / n, out->truncate, &out->seqs[r], msg, icap);
        if (st) goto out;
        out->prompt_tokens += out->seqs[r].n_tokens;
    }
    out->n = n;
out:
    for (int c = 0; c < T_COUNT; c++) json_decref(t[c].texts);
    json_decref(root);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * the handlers
 */

static enum MHD_Result send_json(struct conn *k, struct hs_buf *b)
{
    return hs__conn_send(k, 200, b, "application/json");
}

enum MHD_Result hs__kserve_server(struct conn *k)
{
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 128);
    hs_buf_puts(&b, "{\"name\":\"hetserve\",\"version\":\"" KSERVE_VERSION
                    "\",\"extensions\":[\"binary_tensor_data\"]}");
    return send_json(k, &b);
}

enum MHD_Result hs__kserve_live(struct conn *k)
{
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 16);
    hs_buf_puts(&b, "{\"live\":true}");
    return send_json(k, &b);
}

/* Ready as GET /ready is: not draining, and no engine whose every batch fails. */
static bool server_ready(struct hs_server *s, char *msg, size_t cap)
{
    if (atomic_load(&s->draining)) {
        snprintf(msg, cap, "server is shutting down");
        return false;
    }
    for (int i = 0; i < s->n_engines; i++) {
        struct hs_engine_stats st;
        hs_engine_stats(s->engines[i], &st);
        if (st.errors > 0 && st.errors == st.batches) {
            snprintf(msg, cap, "engine %s is failing", hs_engine_name(s->engines[i]));
            return false;
        }
    }
    return true;
}

enum MHD_Result hs__kserve_ready(struct conn *k)
{
    char msg[256];
    if (!server_ready(hs__conn_server(k), msg, sizeof msg)) return hs__conn_error(k, 503, 0, msg);
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 16);
    hs_buf_puts(&b, "{\"ready\":true}");
    return send_json(k, &b);
}

/* The URL past /v2/models/: "{m}[/versions/{v}][/<verb>]" -> the model name (in the arena) and
 * the verb ("" for none). NULL with a status in *status for a version other than 1. */
static char *model_path(struct conn *k, const char **verb, int *status, char *msg, size_t cap)
{
    const char *url = hs__conn_url(k);
    const char *rest = url + strlen(MODELS_PREFIX);
    size_t n = strlen(rest);
    *verb = "";
    static const char *const verbs[] = {"/ready", "/infer"};
    for (int i = 0; i < 2; i++) {
        size_t vl = strlen(verbs[i]);
        if (n > vl && !strcmp(rest + n - vl, verbs[i])) {
            *verb = verbs[i] + 1;
            n -= vl;
            break;
        }
    }
    char *name = hs_arena_alloc(hs__conn_arena(k), n + 1);
    if (!name) {
        *status = hs__refuse(msg, cap, 500, "out of memory");
        return NULL;
    }
    memcpy(name, rest, n);
    name[n] = '\0';
    char *v = strstr(name, "/versions/");
    while (v && strstr(v + 1, "/versions/")) v = strstr(v + 1, "/versions/");
    if (v && !strchr(v + 10, '/')) {
        if (strcmp(v + 10, "1")) {
            *status =
                hs__refuse(msg, cap, 404, "model '%.*s' has only version 1", (int)(v - name), name);
            return NULL;
        }
        *v = '\0';
    }
    return name;
}

enum MHD_Result hs__kserve_model(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    char msg[HS__MSG_MAX];
    const char *verb;
    int status = 0;
    char *name = model_path(k, &verb, &status, msg, sizeof msg);
    if (!name) return hs__conn_error(k, status, 0, msg);
    if (!strcmp(verb, "infer"))
        return hs__conn_error(k, 405, 0, "POST /v2/models/{model}/infer runs the model");
    struct hs_served_model *sm = find_model(s, name);
    if (!sm) {
        snprintf(msg, sizeof msg, "model '%s' not found; GET /v1/models lists the models", name);
        return hs__conn_error(k, 404, 0, msg);
    }
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 1024);
    if (!strcmp(verb, "ready")) {
        if (!server_ready(s, msg, sizeof msg)) return hs__conn_error(k, 503, 0, msg);
        hs_buf_puts(&b, "{\"name\":");
        hs_buf_json_str(&b, sm->name, strlen(sm->name));
        hs_buf_puts(&b, ",\"ready\":true}");
        return send_json(k, &b);
    }
    const struct hs_head *h = hs__predict_head(s, sm);
    hs_buf_puts(&b, "{\"name\":");
    hs_buf_json_str(&b, sm->name, strlen(sm->name));
    hs_buf_printf(&b,
                  ",\"versions\":[\"1\"],\"platform\":\"hetserve\",\"inputs\":["
                  "{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[-1]},"
                  "{\"name\":\"input_ids\",\"datatype\":\"INT64\",\"shape\":[-1,-1]},"
                  "{\"name\":\"attention_mask\",\"datatype\":\"INT64\",\"shape\":[-1,-1]}],"
                  "\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[-1,%d]}",
                  sm->model->config.dims.hidden);
    if (h) {
        hs_buf_printf(&b,
                      ",{\"name\":\"probabilities\",\"datatype\":\"FP32\",\"shape\":[-1,%d],"
                      "\"parameters\":{\"labels\":[",
                      h->n_classes);
        for (int c = 0; c < h->n_classes; c++) {
            if (c) hs_buf_putc(&b, ',');
            hs_buf_json_str(&b, h->labels[c], strlen(h->labels[c]));
        }
        hs_buf_puts(&b, "]}}");
    }
    hs_buf_printf(&b, "],\"parameters\":{\"max_tokens\":%d,\"engine\":\"%s\"}}",
                  sm->model->config.max_seq_len, hs_engine_name(sm->engine));
    return send_json(k, &b);
}

/* An infer request's state, in the connection's arena. */
struct kstate {
    struct hs__kserve_req in;
    const struct hs_job *job;
};

enum MHD_Result hs__kserve_infer_begin(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    char msg[HS__MSG_MAX];
    const char *verb;
    int status = 0;
    char *name = model_path(k, &verb, &status, msg, sizeof msg);
    if (!name) return hs__conn_error(k, status, 0, msg);
    if (strcmp(verb, "infer"))
        return hs__conn_error(k, 405, 0, "POST is for /v2/models/{model}/infer");
    struct kstate *ks = hs_arena_calloc(hs__conn_arena(k), 1, sizeof *ks);
    if (!ks) return hs__conn_error(k, 500, 0, "out of memory");
    struct hs__kserve_req *in = &ks->in;
    size_t len = 0;
    const char *body = hs__conn_body(k, &len);
    status = hs__kserve_decode(s, hs__conn_arena(k), name, body, len,
                               hs__conn_header(k, "Inference-Header-Content-Length"),
                               hs__conn_header(k, "X-Priority"), hs__conn_header(k, "X-Timeout-Ms"),
                               hs__conn_ts(k), in, msg, sizeof msg);
    if (status) return hs__conn_error(k, status, 0, msg);
    *hs__conn_predict(k) = ks;
    hs__conn_ts(k)[HS_TS_TOKENIZED] = hs_now_ns();
    struct hs_job *j =
        hs__conn_job(k, "infer", in->sm->name, in->seqs, in->n, in->prio,
                     hs__conn_ts(k)[HS_TS_RECEIVED] + (int64_t)in->timeout_ms * 1000000);
    if (!j) return hs__conn_error(k, 500, 0, "out of memory");
    ks->job = j;
    bool answered = false;
    hs_status st = hs__conn_dispatch(k, j, NULL, &answered);
    if (st != HS_STATUS_OK) return hs__conn_error(k, hs__http_status(st), j->retry_after_s, j->msg);
    return answered ? hs__kserve_infer_finish(k) : MHD_YES;
}

/* One output's JSON description; its data inline, or its size when binary. */
static void put_output(struct hs_buf *b, const char *name, const float *v, size_t rows, size_t cols,
                       bool binary)
{
    hs_buf_puts(b, "{\"name\":\"");
    hs_buf_puts(b, name);
    hs_buf_printf(b, "\",\"datatype\":\"FP32\",\"shape\":[%zu,%zu]", rows, cols);
    if (binary)
        hs_buf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}",
                      rows * cols * sizeof(float));
    else {
        hs_buf_puts(b, ",\"data\":");
        hs_buf_json_floats(b, v, rows * cols);
        hs_buf_putc(b, '}');
    }
}

enum MHD_Result hs__kserve_infer_finish(struct conn *k)
{
    const struct kstate *ks = *hs__conn_predict(k);
    const struct hs__kserve_req *in = &ks->in;
    const struct hs_job *j = ks->job;
    if (j->status != HS_STATUS_OK)
        return hs__conn_error(k, hs__http_status(j->status), j->retry_after_s, j->msg);
    struct hs_arena *a = hs__conn_arena(k);
    const size_t n = (size_t)j->n_seqs, dim = (size_t)j->dim;
    /* the outputs' values: the rows (normalized here when the model does not), the head's */
    const float *emb = j->out;
    if (in->post_normalize) {
        float *e = hs_arena_alloc(a, sizeof(float) * n * dim);
        if (!e) return hs__conn_error(k, 500, 0, "out of memory");
        for (size_t r = 0; r < n; r++) {
            const float *row = j->out + r * dim;
            double ss = 0;
            for (size_t c = 0; c < dim; c++) ss += (double)row[c] * row[c];
            float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
            for (size_t c = 0; c < dim; c++) e[r * dim + c] = row[c] * inv;
        }
        emb = e;
    }
    float *probs = NULL;
    size_t classes = in->head ? (size_t)in->head->n_classes : 0;
    for (int o = 0; o < in->n_outputs; o++)
        if (in->outputs[o] == HS__KSERVE_PROBABILITIES) {
            probs = hs_arena_alloc(a, sizeof(float) * n * classes);
            if (!probs) return hs__conn_error(k, 500, 0, "out of memory");
            /* the head takes the model's own rows, as /predict gives it */
            for (size_t r = 0; r < n; r++)
                hs_head_apply(in->head, j->out + r * dim, probs + r * classes);
        }

    size_t bin_bytes = 0, text_bytes = 256 + strlen(in->sm->name) + sizeof in->id * 6;
    for (int o = 0; o < in->n_outputs; o++) {
        size_t cols = in->outputs[o] == HS__KSERVE_EMBEDDING ? dim : classes;
        if (in->binary[o])
            bin_bytes += n * cols * sizeof(float);
        else
            text_bytes += n * cols * (HS_JSON_FLOAT_MAX + 1) + 128;
    }
    struct hs_buf b;
    hs_buf_init(&b, a, text_bytes + bin_bytes);
    hs_buf_puts(&b, "{\"model_name\":");
    hs_buf_json_str(&b, in->sm->name, strlen(in->sm->name));
    hs_buf_puts(&b, ",\"model_version\":\"1\"");
    if (in->has_id) {
        hs_buf_puts(&b, ",\"id\":");
        hs_buf_json_str(&b, in->id, strlen(in->id));
    }
    hs_buf_puts(&b, ",\"outputs\":[");
    for (int o = 0; o < in->n_outputs; o++) {
        bool e = in->outputs[o] == HS__KSERVE_EMBEDDING;
        if (o) hs_buf_putc(&b, ',');
        put_output(&b, output_names[in->outputs[o]], e ? emb : probs, n, e ? dim : classes,
                   in->binary[o]);
    }
    hs_buf_puts(&b, "]}");
    size_t json_len = b.len;
    for (int o = 0; o < in->n_outputs; o++) {
        if (!in->binary[o]) continue;
        bool e = in->outputs[o] == HS__KSERVE_EMBEDDING;
        hs_buf_put(&b, (const char *)(e ? emb : probs), n * (e ? dim : classes) * sizeof(float));
    }
    hs__conn_ts(k)[HS_TS_POST] = hs_now_ns();
    if (!bin_bytes) return send_json(k, &b);
    char *hl = hs_arena_alloc(a, 24);
    if (!hl) return hs__conn_error(k, 500, 0, "out of memory");
    snprintf(hl, 24, "%zu", json_len);
    hs__conn_set_header(k, "Inference-Header-Content-Length", hl);
    return hs__conn_send(k, 200, &b, "application/octet-stream");
}
