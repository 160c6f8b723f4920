/* hetserve — arenas: bump allocation freed in one call (one per request).
 *
 * An arena hands out memory from chunks obtained with hs_malloc; nothing is freed until
 * hs_arena_destroy, which releases every chunk at once. Requests larger than a chunk get a
 * chunk of their own. An arena is not thread-safe: one owner at a time.
 */
#ifndef HS_CORE_ARENA_H
#define HS_CORE_ARENA_H

#include <stddef.h>

struct hs_arena;

/* Creates an arena whose chunks hold at least chunk_bytes (0: 16 KiB). NULL when out of memory. */
struct hs_arena *hs_arena_create(size_t chunk_bytes);
/* Frees every allocation of the arena and the arena itself. NULL is a no-op. */
void hs_arena_destroy(struct hs_arena *a);
/* bytes of memory aligned to 64 bytes, valid until hs_arena_destroy; NULL when out of memory. */
void *hs_arena_alloc(struct hs_arena *a, size_t bytes);
/* Same, zero-filled. */
void *hs_arena_calloc(struct hs_arena *a, size_t n, size_t size);
/* Copy of s[0..n) plus a terminating NUL. */
char *hs_arena_strndup(struct hs_arena *a, const char *s, size_t n);
/* Bytes obtained from hs_malloc so far (chunks included). */
size_t hs_arena_bytes(const struct hs_arena *a);

#endif
