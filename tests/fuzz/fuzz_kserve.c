/* Fuzz: the KServe v2 infer request (server/kserve.c), through hs__kserve_decode, the function
 * POST /v2/models/{m}/infer calls once the body is in: the JSON header, its parameters, inputs
 * and outputs, and the binary-tensor extension's bytes after it (BYTES elements with their
 * lengths, INT64 / INT32 ids, attention masks). The served models are the tiny ones of tests/data
 * (tiny-bert-cls, tiny-mpnet); only the model is needed, no engine or scheduler.
 *
 * Input: a request in miniature.
 *   line 1        the model name of the URL (/v2/models/<name>/infer); empty: none
 *   header lines  "Inference-Header-Content-Length: v", "X-Priority: v", "X-Timeout-Ms: v"
 *                 (others ignored), up to an empty line
 *   the rest      the body (JSON, then binary tensors)
 * Checks: an error is 400, 404 or 413 with a message, and the protocol's error body parses as
 * {"error": "..."}; an accepted request names a served model, has 1..items_max sequences, each
 * [CLS] .. [SEP] with ids in the vocabulary, no longer than the model takes, 1..2 distinct
 * outputs, a deadline within the limits; nothing leaks. Each input runs once more with
 * allocations failing from the n-th on: a clean answer (500 allowed), nothing leaked.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "fuzz.h"
#include "server/json.h"
#include "server/kserve.h"

static struct hs_server *srv;

static void setup(void)
{
    fuzz_json_alloc();
    srv = calloc(1, sizeof *srv);
    hs_config_defaults(&srv->cfg, NULL);
    static const char *const dirs[] = {"tests/data/tiny-bert-cls", "tests/data/tiny-mpnet"};
    for (int i = 0; i < 2; i++) {
        struct hs_served_model *sm = &srv->models[i];
        struct hs_error err = {0};
        if (hs_model_load(fuzz_path(dirs[i]), &sm->model, &err) != HS_STATUS_OK) {
            fprintf(stderr, "fuzz_kserve: %s\n", err.msg);
            abort();
        }
        snprintf(sm->name, sizeof sm->name, "%s", sm->model->name);
        srv->n_models++;
    }
}

static void check_error(int status, const char *msg)
{
    FUZZ_CHECK(status == 400 || status == 404 || status == 413);
    FUZZ_CHECK(msg[0] != '\0' && memchr(msg, '\0', HS__MSG_MAX) != NULL);
    struct hs_buf b;
    hs_buf_init(&b, NULL, 0);
    hs__kserve_error_body(&b, msg);
    FUZZ_CHECK(!b.oom);
    json_t *v = json_loadb(b.data, b.len, 0, NULL);
    FUZZ_CHECK(json_is_object(v) && json_object_size(v) == 1 &&
               json_is_string(json_object_get(v, "error")));
    json_decref(v);
    hs_buf_free(&b);
}

static void check_req(const struct hs__kserve_req *q)
{
    FUZZ_CHECK(q->sm >= srv->models && q->sm < srv->models + srv->n_models);
    FUZZ_CHECK(q->n >= 1 && q->n <= (size_t)srv->cfg.limits.items_max);
    FUZZ_CHECK(q->timeout_ms >= 1 && q->timeout_ms <= srv->cfg.limits.timeout_max_ms);
    FUZZ_CHECK(q->prio == HS_PRIORITY_INTERACTIVE || q->prio == HS_PRIORITY_BATCH);
    FUZZ_CHECK(q->head == NULL); /* no cascade here: no head, so no probabilities */
    FUZZ_CHECK(q->n_outputs == 1 && q->outputs[0] == HS__KSERVE_EMBEDDING);
    FUZZ_CHECK(!q->has_id || strlen(q->id) < sizeof q->id);
    const struct hs_tokenizer *tok = q->sm->model->tokenizer;
    int sum = 0;
    for (size_t i = 0; i < q->n; i++) {
        const struct hs_seq *s = &q->seqs[i];
        FUZZ_CHECK(s->n_tokens >= 2 && s->n_tokens <= q->sm->model->config.max_seq_len);
        FUZZ_CHECK(s->ids[0] == hs_tokenizer_cls_id(tok));
        FUZZ_CHECK(s->ids[s->n_tokens - 1] == hs_tokenizer_sep_id(tok));
        for (int t = 0; t < s->n_tokens; t++)
            FUZZ_CHECK(s->ids[t] >= 0 && s->ids[t] < hs_tokenizer_vocab_size(tok));
        sum += s->n_tokens;
    }
    FUZZ_CHECK(sum == q->prompt_tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) setup();
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *nl = memchr(copy, '\n', size);
    if (!nl) {
        free(copy);
        return 0;
    }
    *nl = '\0';
    const char *model = copy[0] ? copy : NULL;
    char *p = nl + 1, *end = copy + size;
    char hl_buf[64], prio_buf[256], timeout_buf[256];
    const char *hl = NULL, *prio = NULL, *timeout = NULL;
    while (p < end) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        *e = '\0';
        if (e == p) {
            p = e + 1;
            break;
        }
        const char *v;
        if ((v = fuzz_header(p, "Inference-Header-Content-Length", hl_buf, sizeof hl_buf))) hl = v;
        if ((v = fuzz_header(p, "X-Priority", prio_buf, sizeof prio_buf))) prio = v;
        if ((v = fuzz_header(p, "X-Timeout-Ms", timeout_buf, sizeof timeout_buf))) timeout = v;
        p = e + 1;
    }
    /* the body from the input's own bytes (binary tensors may hold NULs and newlines) */
    size_t off = p < end ? (size_t)(p - copy) : size;
    size_t len = size - off;
    char *body = malloc(len ? len : 1);
    memcpy(body, data + off, len);

    for (int pass = 0; pass < 2; pass++) {
        int64_t live = hs_alloc_live();
        struct hs_arena *a = hs_arena_create(16384);
        struct hs__kserve_req q;
        char msg[HS__MSG_MAX];
        if (pass) fuzz_fail_allocs(data, size);
        int st = hs__kserve_decode(srv, a, model, body, len, hl, prio, timeout, NULL, &q, msg,
                                   sizeof msg);
        if (pass) {
            fuzz_fail_allocs_end();
            FUZZ_CHECK(st == 0 || st == 400 || st == 404 || st == 413 || st == 500);
        } else if (st) {
            check_error(st, msg);
        } else {
            check_req(&q);
        }
        hs_arena_destroy(a);
        FUZZ_CHECK(hs_alloc_live() == live);
    }
    free(body);
    free(copy);
    return 0;
}
