/* Fuzz: the HTTP endpoints' request bodies (server/http.c, server/predict.c, server/json.c),
 * through the functions the handlers call once a body is in: hs__embed_decode (POST
 * /v1/embeddings and /embed: strings, arrays, token-id arrays, encoding_format, dimensions,
 * normalize, priority, timeout_ms), hs__tokenize_body (POST /tokenize, response body included)
 * hs__predict_decode (POST /predict), hs__task_decode (POST /rerank, /v1/rerank, /similarity and
 * the checkpoint head's /predict, path "/predict-head", /embed_sparse and /embed_all) and
 * hs__root_task (POST /). The served models are the tiny ones of tests/data (tiny-bert-cls first,
 * tiny-mpnet second, tiny-cross-encoder third, tiny-splade fourth, and tiny-splade without
 * pooling fifth, named tiny-splade-tokens, with their tasks); only the model is needed, no engine
 * or scheduler.
 *
 * Why not a real server on a loopback port: the decoders are the code that reads client bytes,
 * and called directly they run ~100x faster, deterministically (no threads, batch windows or
 * deadlines), with nothing between the input and the coverage.
 *
 * Input: a request in miniature.
 *   line 1        the path: /v1/embeddings, /embeddings, /embed, /tokenize, /predict, /rerank,
 *                 /v1/rerank, /similarity, /predict-head, /embed_sparse, /embed_all or /
 *   header lines  "X-Priority: v", "X-Timeout-Ms: v" (others ignored), up to an empty line
 *   the rest      the body
 * Checks: an error is 400, 404 or 413 with a message, and the JSON error body the handler would
 * send parses as JSON; an accepted request has 1..items_max inputs, each [CLS] .. [SEP] with ids
 * in the vocabulary, no longer than the model takes, untruncated unless asked; /tokenize's
 * response parses as JSON with every token of every input; nothing leaks. Each input runs once
 * more with allocations failing from the n-th on: a clean answer (500 allowed), nothing leaked.
 */
#include <stdbool.h>
#include <strings.h>
#include <string.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "fuzz.h"
#include "server/json.h"
#include "server/server-impl.h"

static struct hs_server *srv;
/* The second pass over each input: allocations fail from the n-th on (fuzz_fail_allocs), and
 * only a clean answer (0, or a status with 500 allowed) and no leak are checked. */
static bool oom;
static const uint8_t *input;
static size_t input_size;

static void fail_allocs(void)
{
    if (oom) fuzz_fail_allocs(input, input_size);
}

static bool oom_answer(int st)
{
    fuzz_fail_allocs_end();
    if (oom) FUZZ_CHECK(st == 0 || st == 400 || st == 404 || st == 413 || st == 500);
    return oom;
}

static void setup(void)
{
    fuzz_json_alloc();
    srv = calloc(1, sizeof *srv);
    hs_config_defaults(&srv->cfg, NULL);
    static const char *const dirs[] = {"tests/data/tiny-bert-cls", "tests/data/tiny-mpnet",
                                       "tests/data/tiny-cross-encoder", "tests/data/tiny-splade",
                                       "tests/data/tiny-splade"};
    for (int i = 0; i < 5; i++) {
        struct hs_served_model *sm = &srv->models[i];
        struct hs_error err = {0};
        if (hs_model_load_pooled(fuzz_path(dirs[i]), true, i == 4 ? "none" : NULL, &sm->model,
                                 &err) != HS_STATUS_OK ||
            hs__tasks_load(sm->model, &sm->tasks, &err) != HS_STATUS_OK) {
            fprintf(stderr, "fuzz_http: %s\n", err.msg);
            abort();
        }
        snprintf(sm->name, sizeof sm->name, "%s%s", sm->model->name, i == 4 ? "-tokens" : "");
        srv->n_models++;
    }
}

/* The JSON error body a handler sends for (status, msg) must be JSON. */
static void check_error(int status, const char *msg)
{
    FUZZ_CHECK(status == 400 || status == 404 || status == 413);
    FUZZ_CHECK(msg[0] != '\0' && memchr(msg, '\0', HS__MSG_MAX) != NULL);
    struct hs_buf b;
    hs_buf_init(&b, NULL, 0);
    hs_json_error(&b, msg, "invalid_request_error", status);
    FUZZ_CHECK(!b.oom);
    json_error_t je;
    json_t *v = json_loadb(b.data, b.len, 0, &je);
    if (!v) fprintf(stderr, "error body is not JSON (%s): %.*s\n", je.text, (int)b.len, b.data);
    FUZZ_CHECK(v != NULL);
    json_decref(v);
    hs_buf_free(&b);
}

/* The model a request's "model" names (http.c's rule, restated): the first when NULL, else the
 * one of that name, else the one named by the last component of a path-like name. */
static const struct hs_served_model *served(const char *name)
{
    if (!name) return &srv->models[0];
    for (int i = 0; i < srv->n_models; i++)
        if (!strcmp(srv->models[i].name, name)) return &srv->models[i];
    const char *slash = strrchr(name, '/');
    for (int i = 0; slash && i < srv->n_models; i++)
        if (!strcmp(srv->models[i].name, slash + 1)) return &srv->models[i];
    return NULL;
}

/* Tokens of text for sm with nothing cut. */
static int full_count(const struct hs_served_model *sm, const char *text, size_t len)
{
    int32_t *ids = malloc(sizeof(int32_t) * (len + 2));
    int n = 0, n_full = 0;
    FUZZ_CHECK(hs_tokenizer_encode(sm->model->tokenizer, text, len, ids, (int)len + 2, &n, &n_full,
                                   NULL) == HS_STATUS_OK);
    free(ids);
    return n_full;
}

static void check_seq(const struct hs_served_model *sm, const struct hs_seq *q)
{
    const struct hs_tokenizer *tok = sm->model->tokenizer;
    FUZZ_CHECK(q->n_tokens >= 2 && q->n_tokens <= sm->model->config.max_seq_len);
    FUZZ_CHECK(q->ids[0] == hs_tokenizer_cls_id(tok));
    FUZZ_CHECK(q->ids[q->n_tokens - 1] == hs_tokenizer_sep_id(tok));
    for (int t = 0; t < q->n_tokens; t++)
        FUZZ_CHECK(q->ids[t] >= 0 && q->ids[t] < hs_tokenizer_vocab_size(tok));
}

/* Text inputs are whole unless truncate was asked for. */
static void check_texts(const struct hs_served_model *sm, json_t *texts, const struct hs_seq *seqs,
                        size_t n, bool truncate)
{
    for (size_t i = 0; i < n; i++) {
        check_seq(sm, &seqs[i]);
        json_t *t = json_array_get(texts, i);
        if (!json_is_string(t)) continue;
        int full = full_count(sm, json_string_value(t), json_string_length(t));
        FUZZ_CHECK(truncate ? seqs[i].n_tokens <= full : seqs[i].n_tokens == full);
    }
}

static void embed(const char *body, size_t len, const char *prio, const char *timeout, bool openai,
                  struct hs_arena *a)
{
    struct hs__embed_req q;
    char msg[HS__MSG_MAX];
    fail_allocs();
    int st = hs__embed_decode(srv, a, openai, body, len, prio, timeout, NULL, &q, msg, sizeof msg);
    if (oom_answer(st)) return;
    if (st) {
        check_error(st, msg);
        return;
    }
    FUZZ_CHECK(q.sm != NULL && q.n >= 1 && q.n <= (size_t)srv->cfg.limits.items_max);
    FUZZ_CHECK(q.timeout_ms >= 1 && q.timeout_ms <= srv->cfg.limits.timeout_max_ms);
    FUZZ_CHECK(q.prio == HS_PRIORITY_INTERACTIVE || q.prio == HS_PRIORITY_BATCH);
    FUZZ_CHECK(!q.base64 || openai);
    int sum = 0;
    for (size_t i = 0; i < q.n; i++) sum += q.seqs[i].n_tokens;
    FUZZ_CHECK(sum == q.prompt_tokens);
    /* the inputs again, to compare texts with their tokens */
    json_t *root = json_loadb(body, len, 0, NULL);
    FUZZ_CHECK(root != NULL);
    json_t *in = json_object_get(root, openai ? "input" : "inputs");
    if (json_is_string(in)) {
        json_t *one = json_pack("[O]", in);
        check_texts(q.sm, one, q.seqs, q.n, q.truncate);
        json_decref(one);
    } else {
        FUZZ_CHECK(json_is_array(in));
        if (json_is_integer(json_array_get(in, 0)))
            check_seq(q.sm, &q.seqs[0]);
        else
            check_texts(q.sm, in, q.seqs, q.n, q.truncate);
    }
    json_decref(root);
}

static void tokenize(const char *body, size_t len, struct hs_arena *a)
{
    struct hs_buf b;
    char msg[HS__MSG_MAX];
    fail_allocs();
    int st = hs__tokenize_body(srv, a, body, len, NULL, &b, msg, sizeof msg);
    if (oom_answer(st)) return;
    if (st) {
        check_error(st, msg);
        return;
    }
    FUZZ_CHECK(!b.oom);
    json_error_t je;
    json_t *out = json_loadb(b.data, b.len, 0, &je);
    if (!out)
        fprintf(stderr, "/tokenize body is not JSON (%s): %.*s\n", je.text, (int)b.len, b.data);
    FUZZ_CHECK(json_is_array(out));
    /* every token of every input, the specials unless add_special_tokens is false */
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *jm = json_object_get(root, "model");
    const struct hs_served_model *sm = served(json_is_string(jm) ? json_string_value(jm) : NULL);
    FUZZ_CHECK(sm != NULL);
    bool special = !json_is_false(json_object_get(root, "add_special_tokens"));
    json_t *in = json_object_get(root, "inputs");
    json_t *texts = json_is_string(in) ? json_pack("[O]", in) : json_incref(in);
    FUZZ_CHECK(json_array_size(out) == json_array_size(texts));
    for (size_t i = 0; i < json_array_size(texts); i++) {
        json_t *t = json_array_get(texts, i);
        int full = full_count(sm, json_string_value(t), json_string_length(t));
        FUZZ_CHECK(json_array_size(json_array_get(out, i)) == (size_t)(special ? full : full - 2));
    }
    json_decref(texts);
    json_decref(root);
    json_decref(out);
}

static void predict(const char *body, size_t len, const char *prio, const char *timeout_hdr,
                    struct hs_arena *a)
{
    struct hs__predict_req q;
    char msg[512]; /* predict.c's size */
    struct hs_served_model *sm = &srv->models[0];
    fail_allocs();
    int st =
        hs__predict_decode(srv, sm, a, body, len, prio, timeout_hdr, NULL, &q, msg, sizeof msg);
    if (oom && !st) json_decref(q.texts); /* (while jansson still has the allocator that made it) */
    if (oom_answer(st)) return;
    if (st) {
        check_error(st, msg);
        return;
    }
    FUZZ_CHECK(q.n >= 1 && q.n <= (size_t)srv->cfg.limits.items_max);
    FUZZ_CHECK(json_is_array(q.texts) && json_array_size(q.texts) == q.n);
    FUZZ_CHECK(!q.single || q.n == 1);
    FUZZ_CHECK(q.timeout_ms >= 1 && q.timeout_ms <= srv->cfg.limits.timeout_max_ms);
    check_texts(sm, q.texts, q.seqs, q.n, q.truncate);
    json_decref(q.texts);
}

/* A task body: its sequences are whole [CLS] .. [SEP] (pairs: token types 0 then 1). */
static void task(int kind, const char *body, size_t len, const char *prio, const char *timeout_hdr,
                 struct hs_arena *a)
{
    char msg[HS__MSG_MAX];
    void *t = NULL;
    fail_allocs();
    int st = hs__task_decode(srv, a, kind, body, len, prio, timeout_hdr, NULL, &t, msg, sizeof msg);
    if (oom_answer(st)) return;
    if (st) {
        check_error(st, msg);
        return;
    }
    size_t n = 0;
    const struct hs_seq *q = hs__task_seqs(t, &n);
    FUZZ_CHECK(n >= 1 && n <= (size_t)srv->cfg.limits.items_max + 1);
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *jm = json_object_get(root, "model");
    const struct hs_served_model *sm = served(json_is_string(jm) ? json_string_value(jm) : NULL);
    FUZZ_CHECK(sm != NULL);
    for (size_t i = 0; i < n; i++) {
        check_seq(sm, &q[i]);
        if (!q[i].type_ids) continue;
        int seg = 0;
        for (int k = 0; k < q[i].n_tokens; k++) {
            FUZZ_CHECK(q[i].type_ids[k] == seg || q[i].type_ids[k] == seg + 1);
            seg = q[i].type_ids[k];
            FUZZ_CHECK(seg <= 1);
        }
    }
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) setup();
    /* split: path, headers, body (NUL-terminated copies for the text parts) */
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *nl = memchr(copy, '\n', size);
    if (!nl) {
        free(copy);
        return 0;
    }
    *nl = '\0';
    const char *path = copy;
    char *p = nl + 1, *end = copy + size;
    char prio_buf[256], timeout_buf[256];
    const char *prio = NULL, *timeout = NULL;
    while (p < end) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        *e = '\0';
        if (e == p) { /* the empty line */
            p = e + 1;
            break;
        }
        const char *v;
        if ((v = fuzz_header(p, "X-Priority", prio_buf, sizeof prio_buf))) prio = v;
        if ((v = fuzz_header(p, "X-Timeout-Ms", timeout_buf, sizeof timeout_buf))) timeout = v;
        p = e + 1;
    }
    /* the body alone in a buffer of its size, as the handler holds it (not NUL-terminated) */
    size_t len = p < end ? (size_t)(end - p) : 0;
    char *body = malloc(len ? len : 1);
    memcpy(body, p < end ? p : end, len);

    input = data;
    input_size = size;
    for (int pass = 0; pass < 2; pass++) {
        oom = pass == 1;
        int64_t live = hs_alloc_live();
        struct hs_arena *a = hs_arena_create(16384);
        if (!strcmp(path, "/v1/embeddings") || !strcmp(path, "/embeddings"))
            embed(body, len, prio, timeout, true, a);
        else if (!strcmp(path, "/embed"))
            embed(body, len, prio, timeout, false, a);
        else if (!strcmp(path, "/tokenize"))
            tokenize(body, len, a);
        else if (!strcmp(path, "/predict"))
            predict(body, len, prio, timeout, a);
        else if (!strcmp(path, "/rerank"))
            task(0, body, len, prio, timeout, a);
        else if (!strcmp(path, "/v1/rerank"))
            task(1, body, len, prio, timeout, a);
        else if (!strcmp(path, "/similarity"))
            task(2, body, len, prio, timeout, a);
        else if (!strcmp(path, "/predict-head"))
            task(3, body, len, prio, timeout, a);
        else if (!strcmp(path, "/embed_sparse"))
            task(5, body, len, prio, timeout, a);
        else if (!strcmp(path, "/embed_all"))
            task(6, body, len, prio, timeout, a);
        else if (!strcmp(path, "/")) {
            int t = hs__root_task(srv, body, len);
            FUZZ_CHECK(t >= 0 && t <= 5);
        }
        hs_arena_destroy(a);
        FUZZ_CHECK(hs_alloc_live() == live);
    }
    free(body);
    free(copy);
    return 0;
}
