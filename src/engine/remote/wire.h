/* hetserve — the router <-> worker batch format (POST /internal/v1/batch).
 *
 * A router sends a formed batch of token ids to a worker and gets back one embedding per
 * sequence plus the worker's stage timings. Both messages are little-endian, fixed header then
 * arrays, no padding, no options: a reader checks every length against the bytes it holds.
 *
 * Request (Content-Type: application/x-hetserve-batch):
 *   off size
 *     0    4  magic "HSBQ"
 *     4    2  version (HS_WIRE_VERSION)
 *     6    1  dtype of the answer: 0 f32, 1 f16
 *     7    1  priority: 0 interactive, 1 batch
 *     8    4  n_seqs, 1 .. HS_WIRE_MAX_SEQS
 *    12    4  n_tokens: the sum of the lengths, <= HS_WIRE_MAX_TOKENS
 *    16    4  deadline: milliseconds left when sent, >= 1
 *    20    2  model name length, 1 .. HS_WIRE_MODEL_MAX - 1 (no NUL byte in it)
 *    22    2  flags: bit 0 (HS_WIRE_FLAG_TYPES) token types follow the ids; other bits 0
 *    24       model name, then n_seqs int32 lengths (each >= 1), then n_tokens int32 ids
 *             (each >= 0), then with HS_WIRE_FLAG_TYPES n_tokens int32 token types (each in
 *             [0, HS_WIRE_MAX_TYPE]: a cross-encoder's pairs); nothing after them.
 *
 * Response (200, Content-Type: application/x-hetserve-embeddings):
 *     0    4  magic "HSBR"
 *     4    2  version
 *     6    1  dtype of the values: 0 f32, 1 f16
 *     7    1  0 (reserved)
 *     8    4  n_seqs (as asked)
 *    12    4  dim, 1 .. HS_WIRE_MAX_DIM
 *    16   40  the worker's times, int64 nanoseconds: total (request received -> answer
 *             encoded), queue (enqueued -> batch formed), copy_in, compute, copy_out
 *    56       n_seqs x dim values (4 or 2 bytes each, IEEE binary32 / binary16); nothing after.
 * Any refusal is an HTTP error status with the server's JSON error body.
 */
#ifndef HS_ENGINE_REMOTE_WIRE_H
#define HS_ENGINE_REMOTE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define HS_WIRE_VERSION     1
#define HS_WIRE_MAX_SEQS    65536
#define HS_WIRE_MAX_TOKENS  (1 << 24)
#define HS_WIRE_MAX_DIM     65536
#define HS_WIRE_MODEL_MAX   128
#define HS_WIRE_REQ_HEADER  24
#define HS_WIRE_RESP_HEADER 56
#define HS_WIRE_FLAG_TYPES  1
#define HS_WIRE_MAX_TYPE    15

enum hs_wire_dtype { HS_WIRE_F32 = 0, HS_WIRE_F16 = 1 };

/* A decoded request; lengths and ids point into the bytes decoded (unaligned reads are made
 * by the accessors below, so the arrays are kept as bytes). */
struct hs_wire_req {
    enum hs_wire_dtype dtype;
    int priority; /* 0 interactive, 1 batch */
    int n_seqs;
    int n_tokens;
    int deadline_ms;
    char model[HS_WIRE_MODEL_MAX];
    const uint8_t *lengths; /* [n_seqs] int32 LE */
    const uint8_t *ids;     /* [n_tokens] int32 LE */
    const uint8_t *types;   /* [n_tokens] int32 LE token types, NULL when absent */
};

struct hs_wire_times {
    int64_t total_ns, queue_ns, copy_in_ns, compute_ns, copy_out_ns;
};

struct hs_wire_resp {
    enum hs_wire_dtype dtype;
    int n_seqs;
    int dim;
    struct hs_wire_times t;
    const uint8_t *values; /* [n_seqs * dim] f32 or f16 LE */
};

/* Bytes of a request for these counts and name length, and of a response. */
size_t hs_wire_req_size(int n_seqs, int n_tokens, size_t model_len);
size_t hs_wire_resp_size(int n_seqs, int dim, enum hs_wire_dtype dtype);

/* Writes a request into out (hs_wire_req_size bytes): lengths [n_seqs], ids [n_tokens]. The
 * caller has checked the counts; the name is cut to HS_WIRE_MODEL_MAX - 1. Returns the size. */
size_t hs_wire_req_encode(uint8_t *out, const char *model, enum hs_wire_dtype dtype, int priority,
                          int deadline_ms, int n_seqs, const int32_t *lengths, int n_tokens,
                          const int32_t *ids);
/* Parses a request of len bytes. HS_STATUS_INVALID_INPUT with the fault in err (the message
 * names the field); nothing is allocated. */
hs_status hs_wire_req_decode(const uint8_t *p, size_t len, struct hs_wire_req *out,
                             struct hs_error *err);
int32_t hs_wire_req_length(const struct hs_wire_req *r, int i);
int32_t hs_wire_req_id(const struct hs_wire_req *r, int i);
/* With token types: the size and the encoding (type_ids [n_tokens], NULL: none, as above). */
size_t hs_wire_req_size_typed(int n_seqs, int n_tokens, size_t model_len, bool types);
size_t hs_wire_req_encode_typed(uint8_t *out, const char *model, enum hs_wire_dtype dtype,
                                int priority, int deadline_ms, int n_seqs, const int32_t *lengths,
                                int n_tokens, const int32_t *ids, const int32_t *type_ids);
int32_t hs_wire_req_type(const struct hs_wire_req *r, int i); /* 0 when absent */

/* Writes a response (hs_wire_resp_size bytes) from [n_seqs, dim] floats. Returns the size. */
size_t hs_wire_resp_encode(uint8_t *out, enum hs_wire_dtype dtype, int n_seqs, int dim,
                           const struct hs_wire_times *t, const float *values);
/* Parses a response of len bytes; HS_STATUS_INVALID_INPUT naming the fault. */
hs_status hs_wire_resp_decode(const uint8_t *p, size_t len, struct hs_wire_resp *out,
                              struct hs_error *err);
/* Converts the values of a decoded response to floats: out [n_seqs * dim]. */
void hs_wire_resp_values(const struct hs_wire_resp *r, float *out);

/* IEEE binary16 <-> binary32, round to nearest even. */
uint16_t hs_wire_f32_to_f16(float f);
float hs_wire_f16_to_f32(uint16_t h);

#endif
