/* Fuzz: the router <-> worker batch format (engine/remote/wire.c): every input is parsed as a
 * request (what a worker reads from a router) and as a response (what a router reads from a
 * worker).
 * Checks: a refusal is HS_STATUS_INVALID_INPUT with a message; an accepted request has counts
 * in range, lengths >= 1 summing to n_tokens, ids >= 0, a terminated non-empty model name, and
 * encodes back to exactly the input's bytes; an accepted response has n_seqs x dim values that
 * decode to floats and, in f32, encode back to the same bytes. Nothing is allocated.
 */
#include <string.h>

#include "core/alloc.h"
#include "engine/remote/wire.h"
#include "fuzz.h"

static void check_request(const uint8_t *data, size_t size)
{
    struct hs_wire_req r;
    struct hs_error err = {0};
    hs_status s = hs_wire_req_decode(data, size, &r, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT && err.msg[0]);
        return;
    }
    FUZZ_CHECK(r.n_seqs >= 1 && r.n_seqs <= HS_WIRE_MAX_SEQS);
    FUZZ_CHECK(r.n_tokens >= r.n_seqs && r.n_tokens <= HS_WIRE_MAX_TOKENS);
    FUZZ_CHECK(r.deadline_ms >= 1);
    size_t ml = strnlen(r.model, sizeof r.model);
    FUZZ_CHECK(ml >= 1 && ml < sizeof r.model);
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)r.n_seqs);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)r.n_tokens);
    int64_t sum = 0;
    for (int i = 0; i < r.n_seqs; i++) {
        lengths[i] = hs_wire_req_length(&r, i);
        FUZZ_CHECK(lengths[i] >= 1);
        sum += lengths[i];
    }
    FUZZ_CHECK(sum == r.n_tokens);
    for (int i = 0; i < r.n_tokens; i++) {
        ids[i] = hs_wire_req_id(&r, i);
        FUZZ_CHECK(ids[i] >= 0);
    }
    int32_t *types = r.types ? malloc(sizeof(int32_t) * (size_t)r.n_tokens) : NULL;
    for (int i = 0; types && i < r.n_tokens; i++) {
        types[i] = hs_wire_req_type(&r, i);
        FUZZ_CHECK(types[i] >= 0 && types[i] <= HS_WIRE_MAX_TYPE);
    }
    size_t n = hs_wire_req_size_typed(r.n_seqs, r.n_tokens, ml, types != NULL);
    FUZZ_CHECK(n == size);
    uint8_t *again = malloc(n);
    FUZZ_CHECK(hs_wire_req_encode_typed(again, r.model, r.dtype, r.priority, r.deadline_ms,
                                        r.n_seqs, lengths, r.n_tokens, ids, types) == n);
    free(types);
    FUZZ_CHECK(memcmp(again, data, n) == 0);
    free(again);
    free(ids);
    free(lengths);
}

static void check_response(const uint8_t *data, size_t size)
{
    struct hs_wire_resp r;
    struct hs_error err = {0};
    hs_status s = hs_wire_resp_decode(data, size, &r, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT && err.msg[0]);
        return;
    }
    FUZZ_CHECK(r.n_seqs >= 1 && r.dim >= 1);
    FUZZ_CHECK(hs_wire_resp_size(r.n_seqs, r.dim, r.dtype) == size);
    FUZZ_CHECK(r.t.total_ns >= 0 && r.t.queue_ns >= 0 && r.t.compute_ns >= 0);
    size_t n = (size_t)r.n_seqs * (size_t)r.dim;
    float *v = malloc(sizeof(float) * n);
    hs_wire_resp_values(&r, v);
    if (r.dtype == HS_WIRE_F32) {
        uint8_t *again = malloc(size);
        FUZZ_CHECK(hs_wire_resp_encode(again, r.dtype, r.n_seqs, r.dim, &r.t, v) == size);
        FUZZ_CHECK(memcmp(again, data, size) == 0);
        free(again);
    } else {
        /* f16 -> f32 -> f16 is exact for every value but NaN payloads */
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(v[i] != v[i] || hs_wire_f16_to_f32(hs_wire_f32_to_f16(v[i])) == v[i]);
    }
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    check_request(data, size);
    check_response(data, size);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}
