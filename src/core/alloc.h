/* hetserve — allocation.
 *
 * Every allocation in the project goes through these calls so that tests can count live
 * allocations and make the Nth one fail (hs_alloc_fail_after). All are thread-safe.
 * hs_free(NULL) and hs_free_aligned(NULL) are no-ops.
 */
#ifndef HS_CORE_ALLOC_H
#define HS_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *hs_malloc(size_t bytes);
void *hs_calloc(size_t n, size_t size);
void *hs_realloc(void *p, size_t bytes);
void hs_free(void *p);
char *hs_strdup(const char *s);
char *hs_strndup(const char *s, size_t n);

/* Aligned to `align` bytes (a power of two, >= sizeof(void*)); free with hs_free_aligned. */
void *hs_malloc_aligned(size_t bytes, size_t align);
void hs_free_aligned(void *p);

/* Test hooks. Live count = allocations not yet freed (aligned ones included). */
int64_t hs_alloc_live(void);
/* Bytes held by live allocations (their usable sizes, so a little above what was asked). The
 * profiler measures a stage's or a workspace's memory as the change across its creation; other
 * threads allocating at the same time show up in that change too. */
int64_t hs_alloc_live_bytes(void);
/* After n more successful allocations, every later one fails (returns NULL) until reset with
 * a negative n. */
void hs_alloc_fail_after(int64_t n);

#endif
