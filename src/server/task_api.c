/* The task endpoints beyond /embed (TEI's shapes, then the ones clients call):
 *   POST /rerank      {"query", "texts", "truncate", "truncation_direction", "raw_scores",
 *                      "return_text"} -> [{"index", "score", "text"?}] best first
 *   POST /v1/rerank   {"model", "query", "documents", "top_n", "return_documents"} (Cohere, Jina)
 *                     -> {"model", "results": [{"index", "relevance_score", "document"?}],
 *                         "usage": {"total_tokens"}}
 *   POST /similarity  {"inputs": {"source_sentence", "sentences"}} -> [cosine, ...]
 *   POST /predict     (a model with a checkpoint head, no cascade configured) {"inputs": text |
 *                     [text, ...] | [[a, b], ...], "raw_scores"} -> [{"label", "score"}] best
 *                     first (one per input for an array)
 *   POST /embed_sparse (a SPLADE model: pooling HS_POOL_SPLADE) {"inputs": text | [text, ...],
 *                     "truncate", "truncation_direction", "prompt_name"} -> per input its non-zero
 *                     entries [{"index", "value"}, ...] by index
 *   POST /embed_all   (a model served without pooling: HS_POOL_NONE) {"inputs", "truncate",
 *                     "truncation_direction", "prompt_name"} -> per input its token embeddings
 *                     [[float] * hidden] * tokens, unnormalized
 *   GET  /info        TEI's fields for the first model
 * A rerank or predict call is one job of many sequences (pairs through the tokenizer's pair
 * template, token types 1 on the second segment), dispatched like an embedding request: batched,
 * bucketed by length, routed (task "rerank" / "predict" / "similarity" for the router's rules).
 * The model's stages pool the first token; the checkpoint head (model/seqcls.h) runs here, on
 * the answer's rows. The decoders do not know the connection (tests/fuzz/fuzz_http.c runs them).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "model/seqcls.h"
#include "server/server-impl.h"

#ifndef HS_VERSION_STRING
#define HS_VERSION_STRING "0"
#endif

static struct hs_served_model *model_of(struct hs_server *s, json_t *root, int *status, char *msg,
                                        size_t cap)
{
    json_t *jm = json_object_get(root, "model");
    if (jm && !json_is_string(jm) && !json_is_null(jm)) {
        *status = hs__refuse(msg, cap, 400, "'model' must be a string");
        return NULL;
    }
    const char *name = json_is_string(jm) ? json_string_value(jm) : NULL;
    struct hs_served_model *sm = hs__server_model(s, name);
    if (!sm && name && strrchr(name, '/')) sm = hs__server_model(s, strrchr(name, '/') + 1);
    if (!sm)
        *status = hs__refuse(msg, cap, 404, "model '%s' not found; GET /v1/models lists the models",
                             name);
    return sm;
}

static int get_bool(json_t *root, const char *key, bool dflt, bool *out, char *msg, size_t cap)
{
    json_t *v = json_object_get(root, key);
    *out = dflt;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return hs__refuse(msg, cap, 400, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* A text field: a non-empty string of at most chars_max characters. */
static int get_text(const struct hs_server *s, json_t *v, const char *what, size_t idx,
                    const char **text, size_t *len, char *msg, size_t cap)
{
    if (!json_is_string(v) || json_string_length(v) == 0)
        return hs__refuse(msg, cap, 400, "%s[%zu]: expected a non-empty string", what, idx);
    *text = json_string_value(v);
    *len = json_string_length(v);
    size_t chars = 0;
    for (size_t i = 0; i < *len; i++) chars += ((unsigned char)(*text)[i] & 0xC0) != 0x80;
    if (chars > (size_t)s->cfg.limits.chars_max)
        return hs__refuse(msg, cap, 413, "%s[%zu] has %zu characters; the limit is %d", what, idx,
                          chars, s->cfg.limits.chars_max);
    return 0;
}

/* One pair (a, b) tokenized for sm with its token types; a cut keeps the ends of both with
 * left (HF's truncation_side="left"), their starts otherwise. */
static int pair_input(const struct hs_server *s, struct hs_arena *a,
                      const struct hs_served_model *sm, json_t *ja, json_t *jb, const char *what,
                      size_t idx, bool truncate, bool left, struct hs_seq *seq, char *msg,
                      size_t cap)
{
    const char *ta = NULL, *tb = NULL;
    size_t la = 0, lb = 0;
    int st = get_text(s, ja, what, idx, &ta, &la, msg, cap);
    if (!st) st = get_text(s, jb, what, idx, &tb, &lb, msg, cap);
    if (st) return st;
    const struct hs_model *m = sm->model;
    int seq_max = m->config.max_seq_len;
    int32_t *ids = hs_arena_alloc(a, 2 * sizeof(int32_t) * (size_t)seq_max);
    if (!ids) return hs__refuse(msg, cap, 500, "out of memory");
    int nt = 0, nfull = 0;
    struct hs_error err;
    hs_error_clear(&err);
    hs_status hs = hs_tokenizer_encode_pair_dir(m->tokenizer, ta, la, tb, lb, ids, ids + seq_max,
                                                seq_max, left, &nt, &nfull, &err);
    if (hs != HS_STATUS_OK)
        return hs__refuse(msg, cap, hs__http_status(hs), "%s[%zu]: %s", what, idx,
                          err.msg[0] ? err.msg : hs_status_str(hs));
    if (nfull > nt && !truncate)
        return hs__refuse(
            msg, cap, 413,
            "%s[%zu]: the pair has %d tokens; model %s takes at most %d (set \"truncate\": "
            "true to cut it, longest first, at the right or with \"truncation_direction\": "
            "\"left\" at the left)",
            what, idx, nfull, sm->name, seq_max);
    seq->ids = ids;
    seq->type_ids = ids + seq_max;
    seq->n_tokens = nt;
    return 0;
}

/* The state of one task request, in the connection's arena. */
/* TASK_PREDICT_ROOT: the root route's /predict, which answers one text as a batch of one ([[..]],
 * the shape the Inference API gives and huggingface_hub's text_classification reads) */
enum task_kind {
    TASK_RERANK,
    TASK_RERANK_V1,
    TASK_SIMILARITY,
    TASK_PREDICT,
    TASK_PREDICT_ROOT,
    TASK_EMBED_SPARSE,
    TASK_EMBED_ALL
};

struct task {
    enum task_kind kind;
    struct hs_served_model *sm;
    struct hs_job *job;
    size_t n;            /* sequences */
    struct hs_seq *seqs; /* [n] */
    const char **texts;  /* rerank: the documents (when returned) */
    size_t *text_lens;
    bool raw, return_text, single;
    int top_n; /* v1: results kept (n when absent) */
    int tokens;
    enum hs_priority prio;
    long long timeout_ms;
};

static bool reranks(const struct hs_served_model *sm)
{
    const struct hs_seqcls *h = sm->tasks ? sm->tasks->cls : NULL;
    return h && h->n_labels == 1;
}

/* The model a rerank names; without one (TEI's /rerank has no model field), the first served
 * model that reranks, so that a server with an embedder first and a cross-encoder beside it
 * (configs/rag.yaml) reranks with the cross-encoder. */
static struct hs_served_model *reranker_of(struct hs_server *s, json_t *root, int *status,
                                           char *msg, size_t cap)
{
    json_t *jm = json_object_get(root, "model");
    if (!jm || json_is_null(jm))
        for (int i = 0; i < s->n_models; i++)
            if (reranks(&s->models[i])) return &s->models[i];
    return model_of(s, root, status, msg, cap);
}

/* /rerank and /v1/rerank. */
static int rerank_decode(struct hs_server *s, struct hs_arena *a, json_t *root, bool v1,
                         struct task *t, char *msg, size_t cap)
{
    int status = 0;
    t->sm = reranker_of(s, root, &status, msg, cap);
    if (!t->sm) return status;
    const struct hs_seqcls *h = t->sm->tasks ? t->sm->tasks->cls : NULL;
    if (!h || h->n_labels != 1)
        return hs__refuse(
            msg, cap, 400,
            "model %s is not a reranker: that needs a sequence classifier with one label "
            "(config.json architectures *ForSequenceClassification)%s",
            t->sm->name, h ? "; it has several: POST /predict" : "");
    struct hs__text_opts o;
    if ((status = hs__text_opts_decode(t->sm, root, &o, msg, cap))) return status;
    json_t *q = json_object_get(root, "query");
    json_t *docs = json_object_get(root, v1 ? "documents" : "texts");
    const char *field = v1 ? "documents" : "texts";
    if (!json_is_string(q) || json_string_length(q) == 0)
        return hs__refuse(msg, cap, 400, "'query' must be a non-empty string");
    if (!json_is_array(docs) || json_array_size(docs) == 0)
        return hs__refuse(msg, cap, 400, "'%s' must be a non-empty array of strings", field);
    size_t n = json_array_size(docs);
    if (n > (size_t)s->cfg.limits.items_max)
        return hs__refuse(msg, cap, 413, "%zu %s; the limit is %d per request", n, field,
                          s->cfg.limits.items_max);
    if (v1) {
        t->return_text = false;
        if ((status = get_bool(root, "return_documents", false, &t->return_text, msg, cap)))
            return status;
        json_t *tn = json_object_get(root, "top_n");
        t->top_n = (int)n;
        if (tn && !json_is_null(tn)) {
            if (!json_is_integer(tn) || json_integer_value(tn) < 1)
                return hs__refuse(msg, cap, 400, "'top_n' must be an integer >= 1");
            if (json_integer_value(tn) < (json_int_t)n) t->top_n = (int)json_integer_value(tn);
        }
        /* Cohere's and Jina's clients send a bare truncate flag rarely: pairs are cut */
        if (!json_object_get(root, "truncate")) o.truncate = true;
    } else {
        if ((status = get_bool(root, "raw_scores", false, &t->raw, msg, cap)) ||
            (status = get_bool(root, "return_text", false, &t->return_text, msg, cap)))
            return status;
    }
    t->seqs = hs_arena_calloc(a, n, sizeof *t->seqs);
    t->texts = hs_arena_calloc(a, n, sizeof *t->texts);
    t->text_lens = hs_arena_calloc(a, n, sizeof *t->text_lens);
    if (!t->seqs || !t->texts || !t->text_lens) return hs__refuse(msg, cap, 500, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(docs, i);
        /* Cohere's documents may be {"text": ...} objects */
        if (v1 && json_is_object(d)) d = json_object_get(d, "text");
        if ((status = pair_input(s, a, t->sm, q, d, field, i, o.truncate, o.left, &t->seqs[i], msg,
                                 cap)))
            return status;
        t->texts[i] = hs_arena_strndup(a, json_string_value(d), json_string_length(d));
        t->text_lens[i] = json_string_length(d);
        if (!t->texts[i]) return hs__refuse(msg, cap, 500, "out of memory");
        t->tokens += t->seqs[i].n_tokens;
    }
    t->n = n;
    return 0;
}

/* /similarity: the source sentence is sequence 0. */
static int similarity_decode(struct hs_server *s, struct hs_arena *a, json_t *root, struct task *t,
                             char *msg, size_t cap)
{
    int status = 0;
    t->sm = model_of(s, root, &status, msg, cap);
    if (!t->sm) return status;
    if (t->sm->tasks && t->sm->tasks->cls)
        return hs__refuse(
            msg, cap, 400,
            "model %s is a sequence classifier, not an embedding model: POST /rerank or "
            "/predict",
            t->sm->name);
    struct hs__text_opts o;
    if ((status = hs__text_opts_decode(t->sm, root, &o, msg, cap))) return status;
    json_t *in = json_object_get(root, "inputs");
    json_t *src = json_object_get(in, "source_sentence");
    json_t *sen = json_object_get(in, "sentences");
    if (!json_is_object(in) || !json_is_string(src) || !json_is_array(sen) ||
        json_array_size(sen) == 0)
        return hs__refuse(
            msg, cap, 400,
            "'inputs' must be {\"source_sentence\": text, \"sentences\": [text, ...]}");
    size_t n = json_array_size(sen) + 1;
    if (n - 1 > (size_t)s->cfg.limits.items_max)
        return hs__refuse(msg, cap, 413, "%zu sentences; the limit is %d per request", n - 1,
                          s->cfg.limits.items_max);
    t->seqs = hs_arena_calloc(a, n, sizeof *t->seqs);
    if (!t->seqs) return hs__refuse(msg, cap, 500, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = i ? json_array_get(sen, i - 1) : src;
        if ((status = hs__text_input_opts(s, a, t->sm, x, i, &o, &t->seqs[i], msg, cap)))
            return status;
        t->tokens += t->seqs[i].n_tokens;
    }
    t->n = n;
    return 0;
}

/* "inputs": one text or a non-empty array of texts, each tokenized with the options o. */
static int texts_decode(struct hs_server *s, struct hs_arena *a, json_t *root,
                        const struct hs__text_opts *o, struct task *t, char *msg, size_t cap)
{
    json_t *in = json_object_get(root, "inputs");
    size_t n = json_is_string(in) ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0) return hs__refuse(msg, cap, 400, "'inputs' must be a text or an array of texts");
    if (n > (size_t)s->cfg.limits.items_max)
        return hs__refuse(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                          s->cfg.limits.items_max);
    t->seqs = hs_arena_calloc(a, n, sizeof *t->seqs);
    if (!t->seqs) return hs__refuse(msg, cap, 500, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_string(in) ? in : json_array_get(in, i);
        int status = hs__text_input_opts(s, a, t->sm, x, i, o, &t->seqs[i], msg, cap);
        if (status) return status;
        t->tokens += t->seqs[i].n_tokens;
    }
    t->n = n;
    return 0;
}

/* /embed_sparse: a SPLADE model's vocabulary-wide rows. */
static int sparse_decode(struct hs_server *s, struct hs_arena *a, json_t *root, struct task *t,
                         char *msg, size_t cap)
{
    int status = 0;
    t->sm = model_of(s, root, &status, msg, cap);
    if (!t->sm) return status;
    if (t->sm->model->config.dims.pool != HS_POOL_SPLADE)
        return hs__refuse(msg, cap, 400,
                          "model %s has no masked-LM head: /embed_sparse needs a SPLADE model "
                          "(config.json architectures *ForMaskedLM, or modules.json SpladePooling)",
                          t->sm->name);
    struct hs__text_opts o;
    if ((status = hs__text_opts_decode(t->sm, root, &o, msg, cap))) return status;
    return texts_decode(s, a, root, &o, t, msg, cap);
}

/* /embed_all: a model served without pooling, its rows per token. */
static int all_decode(struct hs_server *s, struct hs_arena *a, json_t *root, struct task *t,
                      char *msg, size_t cap)
{
    int status = 0;
    t->sm = model_of(s, root, &status, msg, cap);
    if (!t->sm) return status;
    if (t->sm->model->config.dims.pool != HS_POOL_NONE)
        return hs__refuse(msg, cap, 400,
                          "model %s pools its tokens: /embed_all needs a model served with "
                          "models[].pooling: none (the same folder may be served twice, under "
                          "two names)",
                          t->sm->name);
    struct hs__text_opts o;
    if ((status = hs__text_opts_decode(t->sm, root, &o, msg, cap))) return status;
    return texts_decode(s, a, root, &o, t, msg, cap);
}

/* /predict with the checkpoint's head: texts or pairs. */
static int predict_decode(struct hs_server *s, struct hs_arena *a, json_t *root, struct task *t,
                          char *msg, size_t cap)
{
    int status = 0;
    t->sm = model_of(s, root, &status, msg, cap);
    if (!t->sm) return status;
    if (!t->sm->tasks || !t->sm->tasks->cls)
        return hs__refuse(msg, cap, 400,
                          "model %s has no classifier head (config.json architectures "
                          "*ForSequenceClassification) and no cascade is configured",
                          t->sm->name);
    struct hs__text_opts o;
    if ((status = hs__text_opts_decode(t->sm, root, &o, msg, cap))) return status;
    if ((status = get_bool(root, "raw_scores", false, &t->raw, msg, cap))) return status;
    json_t *in = json_object_get(root, "inputs");
    json_t *items;
    /* one text, or an array of texts or pairs */
    if (json_is_string(in)) {
        t->single = true;
        items = json_pack("[O]", in);
    } else if (json_is_array(in) && json_array_size(in) > 0) {
        items = json_incref(in);
    } else {
        return hs__refuse(msg, cap, 400,
                          "'inputs' must be a text, an array of texts or of pairs [a, b]");
    }
    if (!items) return hs__refuse(msg, cap, 500, "out of memory");
    size_t n = json_array_size(items);
    if (n > (size_t)s->cfg.limits.items_max) {
        json_decref(items);
        return hs__refuse(msg, cap, 413, "%zu inputs; the limit is %d per request", n,
                          s->cfg.limits.items_max);
    }
    t->seqs = hs_arena_calloc(a, n, sizeof *t->seqs);
    if (!t->seqs) status = hs__refuse(msg, cap, 500, "out of memory");
    for (size_t i = 0; i < n && !status; i++) {
        json_t *x = json_array_get(items, i);
        if (json_is_array(x)) {
            if (json_array_size(x) != 2)
                status = hs__refuse(msg, cap, 400, "inputs[%zu]: a pair is [text, text]", i);
            else
                status = pair_input(s, a, t->sm, json_array_get(x, 0), json_array_get(x, 1),
                                    "inputs", i, o.truncate, o.left, &t->seqs[i], msg, cap);
        } else {
            status = hs__text_input_opts(s, a, t->sm, x, i, &o, &t->seqs[i], msg, cap);
        }
        if (!status) t->tokens += t->seqs[i].n_tokens;
    }
    json_decref(items);
    t->n = n;
    return status;
}

int hs__task_decode(struct hs_server *s, struct hs_arena *a, int kind, const char *body, size_t len,
                    const char *x_priority, const char *x_timeout_ms, int64_t *ts, void **out,
                    char *msg, size_t cap)
{
    json_t *root = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;
    struct task *t = hs_arena_calloc(a, 1, sizeof *t);
    if (!t) {
        json_decref(root);
        return hs__refuse(msg, cap, 500, "out of memory");
    }
    t->kind = (enum task_kind)kind;
    status = hs__request_qos(s, root, x_priority, x_timeout_ms, &t->prio, &t->timeout_ms, msg, cap);
    if (!status) switch (t->kind) {
        case TASK_RERANK:
        case TASK_RERANK_V1:
            status = rerank_decode(s, a, root, t->kind == TASK_RERANK_V1, t, msg, cap);
            break;
        case TASK_SIMILARITY:
            status = similarity_decode(s, a, root, t, msg, cap);
            break;
        case TASK_PREDICT:
        case TASK_PREDICT_ROOT:
            status = predict_decode(s, a, root, t, msg, cap);
            if (t->kind == TASK_PREDICT_ROOT) t->single = false;
            break;
        case TASK_EMBED_SPARSE:
            status = sparse_decode(s, a, root, t, msg, cap);
            break;
        case TASK_EMBED_ALL:
            status = all_decode(s, a, root, t, msg, cap);
            break;
        }
    json_decref(root);
    *out = status ? NULL : t;
    return status;
}

const struct hs_seq *hs__task_seqs(const void *task, size_t *n)
{
    const struct task *t = task;
    *n = t->n;
    return t->seqs;
}

/* ---------------------------------------------------------------------------------------------
 * the handlers
 */

static const char *const task_names[] = {"rerank",  "rerank",       "similarity", "predict",
                                         "predict", "embed_sparse", "embed_all"};

static enum MHD_Result task_begin(struct conn *k, enum task_kind kind)
{
    struct hs_server *s = hs__conn_server(k);
    char msg[HS__MSG_MAX];
    size_t len;
    const char *body = hs__conn_body(k, &len);
    void *state = NULL;
    int status = hs__task_decode(
        s, hs__conn_arena(k), (int)kind, body, len, hs__conn_header(k, "X-Priority"),
        hs__conn_header(k, "X-Timeout-Ms"), hs__conn_ts(k), &state, msg, sizeof msg);
    if (status) return hs__conn_error(k, status, 0, msg);
    struct task *t = state;
    *hs__conn_predict(k) = t;
    int64_t *ts = hs__conn_ts(k);
    ts[HS_TS_TOKENIZED] = hs_now_ns();
    t->job = hs__conn_job(k, task_names[kind], t->sm->name, t->seqs, t->n, t->prio,
                          ts[HS_TS_RECEIVED] + (int64_t)t->timeout_ms * 1000000);
    if (!t->job) return hs__conn_error(k, 500, 0, "out of memory");
    bool answered = false;
    hs_status st = hs__conn_dispatch(k, t->job, NULL, &answered);
    if (st != HS_STATUS_OK)
        return hs__conn_error(k, hs__http_status(st), t->job->retry_after_s, t->job->msg);
    return answered ? hs__task_finish(k) : MHD_YES;
}

enum MHD_Result hs__rerank_begin(struct conn *k)
{
    return task_begin(k, TASK_RERANK);
}
enum MHD_Result hs__rerank_v1_begin(struct conn *k)
{
    return task_begin(k, TASK_RERANK_V1);
}
enum MHD_Result hs__similarity_begin(struct conn *k)
{
    return task_begin(k, TASK_SIMILARITY);
}
enum MHD_Result hs__cls_predict_begin(struct conn *k)
{
    return task_begin(k, TASK_PREDICT);
}
enum MHD_Result hs__root_predict_begin(struct conn *k)
{
    return task_begin(k, TASK_PREDICT_ROOT);
}
enum MHD_Result hs__embed_sparse_begin(struct conn *k)
{
    return task_begin(k, TASK_EMBED_SPARSE);
}
enum MHD_Result hs__embed_all_begin(struct conn *k)
{
    return task_begin(k, TASK_EMBED_ALL);
}

struct scored {
    int index;
    float score;
};

static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->index - y->index;
}

static void rerank_reply(const struct task *t, const float *out, int dim, struct hs_buf *b,
                         struct scored *sc)
{
    const struct hs_seqcls *h = t->sm->tasks->cls;
    for (size_t i = 0; i < t->n; i++) {
        float logit;
        hs_seqcls_logits(h, out + i * (size_t)dim, &logit);
        if (!(t->raw && t->kind == TASK_RERANK)) hs_seqcls_activate(h, &logit);
        sc[i] = (struct scored){(int)i, logit};
    }
    qsort(sc, t->n, sizeof *sc, by_score);
    if (t->kind == TASK_RERANK) {
        hs_buf_putc(b, '[');
        for (size_t i = 0; i < t->n; i++) {
            hs_buf_printf(b, "%s{\"index\":%d,\"score\":%.9g", i ? "," : "", sc[i].index,
                          sc[i].score);
            if (t->return_text) {
                hs_buf_puts(b, ",\"text\":");
                hs_buf_json_str(b, t->texts[sc[i].index], t->text_lens[sc[i].index]);
            }
            hs_buf_putc(b, '}');
        }
        hs_buf_putc(b, ']');
        return;
    }
    hs_buf_puts(b, "{\"model\":");
    hs_buf_json_str(b, t->sm->name, strlen(t->sm->name));
    hs_buf_puts(b, ",\"results\":[");
    for (int i = 0; i < t->top_n; i++) {
        hs_buf_printf(b, "%s{\"index\":%d,\"relevance_score\":%.9g", i ? "," : "", sc[i].index,
                      sc[i].score);
        if (t->return_text) {
            hs_buf_puts(b, ",\"document\":{\"text\":");
            hs_buf_json_str(b, t->texts[sc[i].index], t->text_lens[sc[i].index]);
            hs_buf_putc(b, '}');
        }
        hs_buf_putc(b, '}');
    }
    hs_buf_printf(b, "],\"usage\":{\"total_tokens\":%d}}", t->tokens);
}

static void similarity_reply(const struct task *t, const float *out, int dim, struct hs_buf *b)
{
    double n0 = 0;
    for (int j = 0; j < dim; j++) n0 += (double)out[j] * out[j];
    hs_buf_putc(b, '[');
    for (size_t i = 1; i < t->n; i++) {
        const float *r = out + i * (size_t)dim;
        double dot = 0, ni = 0;
        for (int j = 0; j < dim; j++) {
            dot += (double)out[j] * r[j];
            ni += (double)r[j] * r[j];
        }
        double c = n0 > 0 && ni > 0 ? dot / sqrt(n0 * ni) : 0;
        hs_buf_printf(b, "%s%.9g", i > 1 ? "," : "", c);
    }
    hs_buf_putc(b, ']');
}

/* Each row's non-zero entries, by index (TEI's SparseValue). */
static void sparse_reply(const struct task *t, const float *out, int dim, struct hs_buf *b)
{
    hs_buf_putc(b, '[');
    for (size_t i = 0; i < t->n; i++) {
        const float *r = out + i * (size_t)dim;
        hs_buf_puts(b, i ? ",[" : "[");
        for (int v = 0, k = 0; v < dim; v++)
            if (r[v] != 0.0f)
                hs_buf_printf(b, "%s{\"index\":%d,\"value\":%.9g}", k++ ? "," : "", v, r[v]);
        hs_buf_putc(b, ']');
    }
    hs_buf_putc(b, ']');
}

/* Each input's token rows (the first n_tokens of its padded pooled row). */
static void all_reply(const struct task *t, const float *out, int dim, int hidden, struct hs_buf *b)
{
    hs_buf_putc(b, '[');
    for (size_t i = 0; i < t->n; i++) {
        const float *r = out + i * (size_t)dim;
        hs_buf_puts(b, i ? ",[" : "[");
        for (int k = 0; k < t->seqs[i].n_tokens; k++) {
            if (k) hs_buf_putc(b, ',');
            hs_buf_json_floats(b, r + (size_t)k * (size_t)hidden, (size_t)hidden);
        }
        hs_buf_putc(b, ']');
    }
    hs_buf_putc(b, ']');
}

static void predict_reply(const struct task *t, const float *out, int dim, struct hs_buf *b,
                          struct scored *sc, float *scores)
{
    const struct hs_seqcls *h = t->sm->tasks->cls;
    if (!t->single) hs_buf_putc(b, '[');
    for (size_t i = 0; i < t->n; i++) {
        hs_seqcls_logits(h, out + i * (size_t)dim, scores);
        if (!t->raw) hs_seqcls_activate(h, scores);
        for (int c = 0; c < h->n_labels; c++) sc[c] = (struct scored){c, scores[c]};
        qsort(sc, (size_t)h->n_labels, sizeof *sc, by_score);
        hs_buf_puts(b, i ? ",[" : "[");
        for (int c = 0; c < h->n_labels; c++) {
            hs_buf_puts(b, c ? ",{\"label\":" : "{\"label\":");
            const char *l = h->labels[sc[c].index];
            hs_buf_json_str(b, l, strlen(l));
            hs_buf_printf(b, ",\"score\":%.9g}", sc[c].score);
        }
        hs_buf_putc(b, ']');
    }
    if (!t->single) hs_buf_putc(b, ']');
}

enum MHD_Result hs__task_finish(struct conn *k)
{
    struct task *t = *hs__conn_predict(k);
    const struct hs_job *j = t->job;
    if (j->status != HS_STATUS_OK)
        return hs__conn_error(k, hs__http_status(j->status), j->retry_after_s, j->msg);
    struct hs_arena *a = hs__conn_arena(k);
    size_t labels = t->sm->tasks && t->sm->tasks->cls ? (size_t)t->sm->tasks->cls->n_labels : 1;
    size_t nsc = t->n > labels ? t->n : labels;
    struct scored *sc = hs_arena_alloc(a, nsc * sizeof *sc);
    float *scores = hs_arena_alloc(a, labels * sizeof *scores);
    if (!sc || !scores) return hs__conn_error(k, 500, 0, "out of memory");
    size_t text_bytes = 0;
    for (size_t i = 0; t->texts && t->return_text && i < t->n; i++)
        text_bytes += 6 * t->text_lens[i];
    struct hs_buf b;
    hs_buf_init(&b, a, 256 + t->n * (64 + labels * (HS_SEQCLS_LABEL_MAX * 6 + 40)) + text_bytes);
    switch (t->kind) {
    case TASK_RERANK:
    case TASK_RERANK_V1:
        rerank_reply(t, j->out, j->dim, &b, sc);
        break;
    case TASK_SIMILARITY:
        similarity_reply(t, j->out, j->dim, &b);
        break;
    case TASK_PREDICT:
    case TASK_PREDICT_ROOT:
        predict_reply(t, j->out, j->dim, &b, sc, scores);
        break;
    case TASK_EMBED_SPARSE:
        sparse_reply(t, j->out, j->dim, &b);
        break;
    case TASK_EMBED_ALL:
        all_reply(t, j->out, j->dim, t->sm->model->config.dims.hidden, &b);
        break;
    }
    return hs__conn_reply(k, &b, NULL, NULL);
}

/* GET /info: TEI's fields, for the first model. */
enum MHD_Result hs__info(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    const struct hs_served_model *sm = &s->models[0];
    const struct hs_model *m = sm->model;
    const struct hs_seqcls *h = sm->tasks ? sm->tasks->cls : NULL;
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 2048);
    hs_buf_puts(&b, "{\"model_id\":");
    hs_buf_json_str(&b, sm->name, strlen(sm->name));
    const char *dtype = "float32";
    if (sm->lane >= 0 && sm->lane < s->n_lanes && s->lanes[sm->lane].exec) {
        enum hs_dtype d = hs_executor_opts(s->lanes[sm->lane].exec)->dtype;
        dtype = d == HS_DTYPE_F16    ? "float16"
                : d == HS_DTYPE_BF16 ? "bfloat16"
                : d == HS_DTYPE_I8   ? "int8"
                                     : "float32";
    }
    hs_buf_printf(&b, ",\"model_sha\":null,\"model_dtype\":\"%s\",\"model_type\":", dtype);
    if (h) {
        hs_buf_printf(&b, "{\"%s\":{\"id2label\":{", h->n_labels == 1 ? "reranker" : "classifier");
        for (int i = 0; i < h->n_labels; i++) {
            hs_buf_printf(&b, "%s\"%d\":", i ? "," : "", i);
            hs_buf_json_str(&b, h->labels[i], strlen(h->labels[i]));
        }
        hs_buf_puts(&b, "},\"label2id\":{");
        for (int i = 0; i < h->n_labels; i++) {
            if (i) hs_buf_putc(&b, ',');
            hs_buf_json_str(&b, h->labels[i], strlen(h->labels[i]));
            hs_buf_printf(&b, ":%d", i);
        }
        hs_buf_puts(&b, "}}}");
    } else {
        static const char *const pools[] = {
            [HS_POOL_MEAN] = "mean",     [HS_POOL_CLS] = "cls",   [HS_POOL_LAST] = "last_token",
            [HS_POOL_SPLADE] = "splade", [HS_POOL_NONE] = "none",
        };
        hs_buf_printf(&b, "{\"embedding\":{\"pooling\":\"%s\"}}", pools[m->config.dims.pool]);
    }
    hs_buf_printf(&b,
                  ",\"max_concurrent_requests\":%d,\"max_input_length\":%d,"
                  "\"max_batch_tokens\":%d,\"max_batch_requests\":%d,\"max_client_batch_size\":%d,"
                  "\"auto_truncate\":false,\"tokenization_workers\":%d,\"version\":\"%s\","
                  "\"sha\":null,\"docker_label\":null,\"dimensions\":%d,\"prompts\":[",
                  s->cfg.limits.queue_max, m->config.max_seq_len, s->cfg.batching.batch_max_tokens,
                  s->cfg.batching.batch_max, s->cfg.limits.items_max,
                  s->cfg.server.threads > 0 ? s->cfg.server.threads : 1, HS_VERSION_STRING,
                  m->config.dims.hidden);
    for (int i = 0; sm->tasks && i < sm->tasks->n_prompts; i++) {
        if (i) hs_buf_putc(&b, ',');
        hs_buf_json_str(&b, sm->tasks->prompts[i].name, strlen(sm->tasks->prompts[i].name));
    }
    /* the declared Matryoshka sizes (null: any size up to dimensions) */
    hs_buf_puts(&b, "],\"matryoshka_dimensions\":");
    if (!sm->tasks || !sm->tasks->n_dims) hs_buf_puts(&b, "null");
    for (int i = 0; sm->tasks && i < sm->tasks->n_dims; i++)
        hs_buf_printf(&b, "%c%d", i ? ',' : '[', sm->tasks->dims[i]);
    hs_buf_puts(&b, sm->tasks && sm->tasks->n_dims ? "]}" : "}");
    return hs__conn_send(k, 200, &b, "application/json");
}

bool hs__predict_uses_checkpoint(struct hs_server *s, const char *body, size_t len)
{
    json_t *root = NULL;
    char msg[64];
    const struct hs_served_model *named = NULL;
    if (!hs__body_parse(body, len, NULL, &root, msg, sizeof msg)) {
        json_t *jm = json_object_get(root, "model");
        if (json_is_string(jm)) named = hs__server_model(s, json_string_value(jm));
        json_decref(root);
    }
    if (named) return named->tasks && named->tasks->cls;
    if (s->predict) return false;
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].tasks && s->models[i].tasks->cls) return true;
    return false;
}

int hs__root_task(struct hs_server *s, const char *body, size_t len)
{
    json_t *root = NULL;
    char msg[64];
    if (hs__body_parse(body, len, NULL, &root, msg, sizeof msg))
        return 0; /* (its 400 from /embed) */
    int status = 0;
    struct hs_served_model *sm = model_of(s, root, &status, msg, sizeof msg);
    int task = 0;
    if (sm && sm->model->config.dims.pool == HS_POOL_SPLADE)
        task = 4;
    else if (sm && sm->model->config.dims.pool == HS_POOL_NONE)
        task = 5;
    else if (sm && sm->tasks && sm->tasks->cls)
        task = json_object_get(root, "query") ? 2 : 3;
    else if (json_is_object(json_object_get(root, "inputs")))
        task = 1;
    json_decref(root);
    return task;
}
