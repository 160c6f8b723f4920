/* hetserve — SHA-256 (FIPS 180-4), for API keys: the config holds a key's digest, never the key.
 *
 * hs_sha256 hashes n bytes in one call; hs_sha256_hex writes the 64 lower-case hex digits.
 * hs_ct_equal compares two buffers of the same length in time that depends on the length only,
 * never on where they differ. All are pure functions: thread-safe, no allocation.
 */
#ifndef HS_CORE_SHA256_H
#define HS_CORE_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HS_SHA256_BYTES 32

void hs_sha256(const void *data, size_t n, uint8_t out[HS_SHA256_BYTES]);
/* out: 65 bytes (64 digits and a NUL) */
void hs_sha256_hex(const uint8_t digest[HS_SHA256_BYTES], char out[65]);
/* 64 hex digits (either case) into digest; false when s is not exactly that. */
bool hs_sha256_parse_hex(const char *s, uint8_t digest[HS_SHA256_BYTES]);
/* a[0..n) == b[0..n), in time independent of the contents. */
bool hs_ct_equal(const void *a, const void *b, size_t n);

#endif
