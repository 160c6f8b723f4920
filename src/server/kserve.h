/* hetserve — the KServe v2 / Open Inference Protocol over HTTP (kserve.c).
 *
 * The protocol Triton, KServe, Seldon MLServer and OpenVINO Model Server share, so that
 * tritonclient and KServe tooling work unchanged:
 *
 *   GET  /v2                                server metadata (name, version, extensions)
 *   GET  /v2/health/live, /v2/health/ready  200, or 503 while draining / an engine fails
 *   GET  /v2/models/{m}[/versions/1]        model metadata: its input and output tensors
 *   GET  /v2/models/{m}[/versions/1]/ready  200, 404 for a model not served
 *   POST /v2/models/{m}[/versions/1]/infer  inference
 *
 * Inputs (one of the first two): "text" BYTES [n] (or [n, 1]) texts; "input_ids" INT64 or
 * INT32 [n, L] (or [L]) token ids, wrapped in [CLS] .. [SEP] unless they already are, with an
 * optional "attention_mask" of the same shape and type (ids where it is 0 are left out).
 * Outputs: "embedding" FP32 [n, hidden], L2-normalized unless the request's parameter
 * "normalize" is false; where the model has a classification head (the cascade section of the
 * config, POST /predict), also "probabilities" FP32 [n, classes], in the head's label order.
 * Request parameters: "truncate" (bool), "normalize" (bool), "priority" ("interactive",
 * "batch", or Triton's integer: 0 and 1 interactive, larger batch), "timeout" (Triton's, in
 * microseconds) or "timeout_ms", "binary_data_output" (bool). Each output's own parameter
 * "binary_data" wins over "binary_data_output".
 *
 * The binary-tensor extension: a request with the header Inference-Header-Content-Length: N has
 * N bytes of JSON and then the tensors of the inputs with parameters.binary_data_size, in input
 * order (BYTES elements as a 4-byte little-endian length and the bytes; numbers little-endian).
 * A response with a binary output carries the same header and the outputs' bytes after its
 * JSON, each output with parameters.binary_data_size instead of "data".
 *
 * Errors are the protocol's {"error": "message"}, with the HTTP status /v1/embeddings would
 * give (400, 404, 413, 429 with Retry-After, 503, 504).
 */
#ifndef HS_SERVER_KSERVE_H
#define HS_SERVER_KSERVE_H

#include <microhttpd.h>

#include "server/server-impl.h"

/* The endpoint table's handlers (http.c). */
enum MHD_Result hs__kserve_server(struct conn *k);       /* GET /v2 */
enum MHD_Result hs__kserve_live(struct conn *k);         /* GET /v2/health/live */
enum MHD_Result hs__kserve_ready(struct conn *k);        /* GET /v2/health/ready */
enum MHD_Result hs__kserve_model(struct conn *k);        /* GET /v2/models/... */
enum MHD_Result hs__kserve_infer_begin(struct conn *k);  /* POST /v2/models/.../infer */
enum MHD_Result hs__kserve_infer_finish(struct conn *k); /* its job was answered */

/* The most outputs a request names ("embedding", "probabilities"). */
#define HS__KSERVE_MAX_OUTPUTS 2

enum hs__kserve_output { HS__KSERVE_EMBEDDING, HS__KSERVE_PROBABILITIES };

/* POST /v2/models/{m}/infer decoded, without the connection (the handler and
 * tests/fuzz/fuzz_kserve.c run the same code). */
struct hs__kserve_req {
    struct hs_served_model *sm;
    const struct hs_head *head; /* the model's classification head, NULL when none */
    char id[129];               /* the request's "id", echoed */
    bool has_id;
    bool truncate;
    bool post_normalize; /* L2-normalize the embedding (the model does not) */
    enum hs_priority prio;
    long long timeout_ms;
    int n_outputs;
    enum hs__kserve_output outputs[HS__KSERVE_MAX_OUTPUTS];
    bool binary[HS__KSERVE_MAX_OUTPUTS]; /* each output's binary_data */
    size_t n;                            /* sequences, >= 1 */
    struct hs_seq *seqs;                 /* [n]: [CLS] .. [SEP] ids */
    int prompt_tokens;
};

/* Decodes an infer request for the model named model (the URL's, NULL when none) from
 * body[0..len) (header_len: the Inference-Header-Content-Length header's value, NULL when
 * absent); x_priority, x_timeout_ms: the X-Priority and X-Timeout-Ms headers (NULL when absent),
 * which the request's parameters win over. Sequences and ids live in arena a; ts (may be NULL)
 * receives HS_TS_PARSED. 0, or an HTTP status with msg (cut to cap). Reads s->models,
 * s->n_models, s->cfg.limits and the heads of s->predict only. Thread-safe for distinct arenas. */
int hs__kserve_decode(struct hs_server *s, struct hs_arena *a, const char *model, const char *body,
                      size_t len, const char *header_len, const char *x_priority,
                      const char *x_timeout_ms, int64_t *ts, struct hs__kserve_req *out, char *msg,
                      size_t cap);

/* The protocol's error body {"error": msg} into b. */
void hs__kserve_error_body(struct hs_buf *b, const char *msg);

#endif
