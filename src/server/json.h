/* hetserve — JSON output: a growable buffer, a fast float formatter, response bodies.
 *
 * Requests are parsed with jansson; responses with many floats are written directly into a
 * buffer: building a jansson tree of 32 x 384 reals and dumping it costs far more than the
 * request's compute. hs_json_float writes 9 significant digits (the fewest that let every
 * float32 round-trip exactly through strtof) with trailing zeros dropped; it never allocates.
 *
 * A struct hs_buf grows in a per-request arena when one is given (its memory then lives until
 * the arena is destroyed) or with hs_malloc/hs_realloc otherwise (free data with hs_free). On
 * allocation failure it stops growing and sets oom; writes after that are dropped.
 */
#ifndef HS_SERVER_JSON_H
#define HS_SERVER_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"

struct hs_buf {
    char *data;
    size_t len, cap;
    struct hs_arena *arena; /* NULL: heap */
    bool oom;
};

/* Longest text hs_json_float writes ("-1.23456789e-38"), without a terminator. */
#define HS_JSON_FLOAT_MAX 16

void hs_buf_init(struct hs_buf *b, struct hs_arena *arena, size_t reserve);
/* Makes room for n more bytes; false when out of memory. */
bool hs_buf_reserve(struct hs_buf *b, size_t n);
void hs_buf_put(struct hs_buf *b, const char *s, size_t n);
void hs_buf_puts(struct hs_buf *b, const char *s);
void hs_buf_putc(struct hs_buf *b, char c);
void hs_buf_printf(struct hs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal with quotes of s[0..n), UTF-8; a byte that is not part of valid UTF-8
 * (a message cut inside a character, say) is written as U+FFFD, so the output is always JSON. */
void hs_buf_json_str(struct hs_buf *b, const char *s, size_t n);
/* [v0,v1,...] with hs_json_float. */
void hs_buf_json_floats(struct hs_buf *b, const float *v, size_t n);
/* Standard base64 (RFC 4648, padded) of n bytes. */
void hs_buf_base64(struct hs_buf *b, const void *data, size_t n);
/* Decodes standard or URL-safe base64 (padding optional, CR, LF and spaces skipped) of in[n]
 * into out, which has room for n / 4 * 3 + 3 bytes. Returns the bytes written, -1 on a
 * character outside the alphabet. */
long long hs_base64_decode(const char *in, size_t n, uint8_t *out);
/* Frees a heap buffer (no-op for arena buffers). */
void hs_buf_free(struct hs_buf *b);

/* Writes f into p (at least HS_JSON_FLOAT_MAX bytes) and returns the length. Non-finite values
 * (not representable in JSON) are written as null. Thread-safe. */
int hs_json_float(char *p, float f);

/* {"error":{"message":..., "type":..., "code":status}} */
void hs_json_error(struct hs_buf *b, const char *message, const char *type, int http_status);

#endif
