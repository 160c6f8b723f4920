/* The router <-> worker batch format (see wire.h). */
#include "engine/remote/wire.h"

#include <math.h>
#include <string.h>

static const uint8_t req_magic[4] = {'H', 'S', 'B', 'Q'};
static const uint8_t resp_magic[4] = {'H', 'S', 'B', 'R'};

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

size_t hs_wire_req_size_typed(int n_seqs, int n_tokens, size_t model_len, bool types)
{
    return HS_WIRE_REQ_HEADER + model_len +
           4 * ((size_t)n_seqs + (size_t)n_tokens * (types ? 2 : 1));
}

size_t hs_wire_req_size(int n_seqs, int n_tokens, size_t model_len)
{
    return hs_wire_req_size_typed(n_seqs, n_tokens, model_len, false);
}

size_t hs_wire_resp_size(int n_seqs, int dim, enum hs_wire_dtype dtype)
{
    return HS_WIRE_RESP_HEADER + (size_t)n_seqs * (size_t)dim * (dtype == HS_WIRE_F16 ? 2 : 4);
}

size_t hs_wire_req_encode(uint8_t *out, const char *model, enum hs_wire_dtype dtype, int priority,
                          int deadline_ms, int n_seqs, const int32_t *lengths, int n_tokens,
                          const int32_t *ids)
{
    return hs_wire_req_encode_typed(out, model, dtype, priority, deadline_ms, n_seqs, lengths,
                                    n_tokens, ids, NULL);
}

size_t hs_wire_req_encode_typed(uint8_t *out, const char *model, enum hs_wire_dtype dtype,
                                int priority, int deadline_ms, int n_seqs, const int32_t *lengths,
                                int n_tokens, const int32_t *ids, const int32_t *type_ids)
{
    size_t ml = strnlen(model, HS_WIRE_MODEL_MAX - 1);
    memcpy(out, req_magic, 4);
    put16(out + 4, HS_WIRE_VERSION);
    out[6] = (uint8_t)dtype;
    out[7] = (uint8_t)priority;
    put32(out + 8, (uint32_t)n_seqs);
    put32(out + 12, (uint32_t)n_tokens);
    put32(out + 16, (uint32_t)deadline_ms);
    put16(out + 20, (uint32_t)ml);
    put16(out + 22, type_ids ? HS_WIRE_FLAG_TYPES : 0);
    uint8_t *p = out + HS_WIRE_REQ_HEADER;
    memcpy(p, model, ml);
    p += ml;
    for (int i = 0; i < n_seqs; i++, p += 4) put32(p, (uint32_t)lengths[i]);
    for (int i = 0; i < n_tokens; i++, p += 4) put32(p, (uint32_t)ids[i]);
    for (int i = 0; type_ids && i < n_tokens; i++, p += 4) put32(p, (uint32_t)type_ids[i]);
    return (size_t)(p - out);
}

#define BAD(...) hs_error_set(err, HS_STATUS_INVALID_INPUT, "batch: " __VA_ARGS__)

hs_status hs_wire_req_decode(const uint8_t *p, size_t len, struct hs_wire_req *out,
                             struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (len < HS_WIRE_REQ_HEADER) return BAD("%zu bytes, shorter than the header", len);
    if (memcmp(p, req_magic, 4)) return BAD("bad magic (not a hetserve batch)");
    if (get16(p + 4) != HS_WIRE_VERSION)
        return BAD("version %u, this server speaks %d", get16(p + 4), HS_WIRE_VERSION);
    if (p[6] > HS_WIRE_F16) return BAD("dtype %u (0 f32, 1 f16)", p[6]);
    if (p[7] > 1) return BAD("priority %u (0 interactive, 1 batch)", p[7]);
    uint32_t ns = get32(p + 8), nt = get32(p + 12), dl = get32(p + 16), ml = get16(p + 20);
    if (ns < 1 || ns > HS_WIRE_MAX_SEQS)
        return BAD("n_seqs %u out of [1, %d]", ns, HS_WIRE_MAX_SEQS);
    if (nt < ns || nt > HS_WIRE_MAX_TOKENS)
        return BAD("n_tokens %u out of [n_seqs, %d]", nt, HS_WIRE_MAX_TOKENS);
    if (dl < 1 || dl > 86400000) return BAD("deadline %u ms out of [1, 86400000]", dl);
    if (ml < 1 || ml >= HS_WIRE_MODEL_MAX)
        return BAD("model name of %u bytes out of [1, %d]", ml, HS_WIRE_MODEL_MAX - 1);
    uint32_t flags = get16(p + 22);
    if (flags & ~(uint32_t)HS_WIRE_FLAG_TYPES) return BAD("unknown flags 0x%x", flags);
    bool types = flags & HS_WIRE_FLAG_TYPES;
    size_t want = hs_wire_req_size_typed((int)ns, (int)nt, ml, types);
    if (len != want) return BAD("%zu bytes, the header says %zu", len, want);
    const uint8_t *name = p + HS_WIRE_REQ_HEADER;
    if (memchr(name, 0, ml)) return BAD("NUL byte in the model name");
    memcpy(out->model, name, ml);
    out->model[ml] = '\0';
    out->lengths = name + ml;
    out->ids = out->lengths + 4 * (size_t)ns;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t l = get32(out->lengths + 4 * (size_t)i);
        if (l < 1 || l > nt) return BAD("lengths[%u] = %d", i, (int32_t)l);
        sum += l;
    }
    if (sum != nt) return BAD("lengths sum to %llu, n_tokens is %u", (unsigned long long)sum, nt);
    for (uint32_t i = 0; i < nt; i++)
        if (get32(out->ids + 4 * (size_t)i) > INT32_MAX) return BAD("ids[%u] is negative", i);
    if (types) {
        out->types = out->ids + 4 * (size_t)nt;
        for (uint32_t i = 0; i < nt; i++)
            if (get32(out->types + 4 * (size_t)i) > HS_WIRE_MAX_TYPE)
                return BAD("types[%u] out of [0, %d]", i, HS_WIRE_MAX_TYPE);
    }
    out->dtype = (enum hs_wire_dtype)p[6];
    out->priority = p[7];
    out->n_seqs = (int)ns;
    out->n_tokens = (int)nt;
    out->deadline_ms = (int)dl;
    return HS_STATUS_OK;
}

int32_t hs_wire_req_length(const struct hs_wire_req *r, int i)
{
    return (int32_t)get32(r->lengths + 4 * (size_t)i);
}

int32_t hs_wire_req_id(const struct hs_wire_req *r, int i)
{
    return (int32_t)get32(r->ids + 4 * (size_t)i);
}

int32_t hs_wire_req_type(const struct hs_wire_req *r, int i)
{
    return r->types ? (int32_t)get32(r->types + 4 * (size_t)i) : 0;
}

size_t hs_wire_resp_encode(uint8_t *out, enum hs_wire_dtype dtype, int n_seqs, int dim,
                           const struct hs_wire_times *t, const float *values)
{
    memcpy(out, resp_magic, 4);
    put16(out + 4, HS_WIRE_VERSION);
    out[6] = (uint8_t)dtype;
    out[7] = 0;
    put32(out + 8, (uint32_t)n_seqs);
    put32(out + 12, (uint32_t)dim);
    const int64_t tv[5] = {t->total_ns, t->queue_ns, t->copy_in_ns, t->compute_ns, t->copy_out_ns};
    for (int i = 0; i < 5; i++) put64(out + 16 + 8 * i, (uint64_t)tv[i]);
    uint8_t *p = out + HS_WIRE_RESP_HEADER;
    size_t n = (size_t)n_seqs * (size_t)dim;
    for (size_t i = 0; i < n; i++) {
        if (dtype == HS_WIRE_F16) {
            put16(p, hs_wire_f32_to_f16(values[i]));
            p += 2;
        } else {
            uint32_t u;
            memcpy(&u, &values[i], 4);
            put32(p, u);
            p += 4;
        }
    }
    return (size_t)(p - out);
}

hs_status hs_wire_resp_decode(const uint8_t *p, size_t len, struct hs_wire_resp *out,
                              struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (len < HS_WIRE_RESP_HEADER) return BAD("answer of %zu bytes, shorter than its header", len);
    if (memcmp(p, resp_magic, 4)) return BAD("answer with a bad magic");
    if (get16(p + 4) != HS_WIRE_VERSION) return BAD("answer version %u", get16(p + 4));
    if (p[6] > HS_WIRE_F16 || p[7] != 0) return BAD("answer dtype %u", p[6]);
    uint32_t ns = get32(p + 8), dim = get32(p + 12);
    if (ns < 1 || ns > HS_WIRE_MAX_SEQS) return BAD("answer n_seqs %u", ns);
    if (dim < 1 || dim > HS_WIRE_MAX_DIM) return BAD("answer dim %u", dim);
    size_t want = hs_wire_resp_size((int)ns, (int)dim, (enum hs_wire_dtype)p[6]);
    if (len != want) return BAD("answer of %zu bytes, its header says %zu", len, want);
    int64_t tv[5];
    for (int i = 0; i < 5; i++) {
        tv[i] = (int64_t)get64(p + 16 + 8 * i);
        if (tv[i] < 0) return BAD("answer time %d is negative", i);
    }
    out->dtype = (enum hs_wire_dtype)p[6];
    out->n_seqs = (int)ns;
    out->dim = (int)dim;
    out->t = (struct hs_wire_times){tv[0], tv[1], tv[2], tv[3], tv[4]};
    out->values = p + HS_WIRE_RESP_HEADER;
    return HS_STATUS_OK;
}

void hs_wire_resp_values(const struct hs_wire_resp *r, float *out)
{
    size_t n = (size_t)r->n_seqs * (size_t)r->dim;
    for (size_t i = 0; i < n; i++) {
        if (r->dtype == HS_WIRE_F16) {
            out[i] = hs_wire_f16_to_f32((uint16_t)get16(r->values + 2 * i));
        } else {
            uint32_t u = get32(r->values + 4 * i);
            memcpy(&out[i], &u, 4);
        }
    }
}

uint16_t hs_wire_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0)); /* inf, nan */
    int exp = (int)e - 127 + 15;
    if (exp >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow: inf */
    if (exp <= 0) {                                     /* subnormal or zero */
        if (exp < -10) return (uint16_t)sign;
        m |= 0x800000u;
        int shift = 14 - exp;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (uint32_t)exp << 10 | m >> 13, rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into inf: correct */
    return (uint16_t)(sign | h);
}

float hs_wire_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float f;
    if (e == 0)
        f = ldexpf((float)m, -24);
    else if (e == 0x1f)
        f = m ? NAN : INFINITY;
    else
        f = ldexpf((float)(m | 0x400u), (int)e - 25);
    uint32_t x;
    memcpy(&x, &f, 4);
    x |= sign;
    memcpy(&f, &x, 4);
    return f;
}
