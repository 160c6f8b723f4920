#include "core/alloc.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_llong live_count;
/* usable bytes of the live allocations, as malloc_usable_size reports them (glibc; the
 * sanitizers intercept it too): what the memory plan and the profiler measure */
static atomic_llong live_bytes;
static atomic_llong fail_budget = -1; /* < 0: never fail */

static void counted(void *p)
{
    atomic_fetch_add_explicit(&live_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_bytes, (long long)malloc_usable_size(p), memory_order_relaxed);
}

static int should_fail(void)
{
    long long b = atomic_load_explicit(&fail_budget, memory_order_relaxed);
    if (b < 0) return 0;
    /* Decrement the remaining budget; when it hits zero every further allocation fails. */
    while (b > 0) {
        if (atomic_compare_exchange_weak(&fail_budget, &b, b - 1)) return 0;
    }
    return b == 0;
}

void *hs_malloc(size_t bytes)
{
    if (should_fail()) return NULL;
    void *p = malloc(bytes ? bytes : 1);
    if (p) counted(p);
    return p;
}

void *hs_calloc(size_t n, size_t size)
{
    if (should_fail()) return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) counted(p);
    return p;
}

void *hs_realloc(void *p, size_t bytes)
{
    if (!p) return hs_malloc(bytes);
    if (should_fail()) return NULL;
    size_t before = malloc_usable_size(p);
    void *q = realloc(p, bytes ? bytes : 1);
    if (q)
        atomic_fetch_add_explicit(&live_bytes, (long long)malloc_usable_size(q) - (long long)before,
                                  memory_order_relaxed);
    return q;
}

void hs_free(void *p)
{
    if (!p) return;
    atomic_fetch_sub_explicit(&live_count, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_bytes, (long long)malloc_usable_size(p), memory_order_relaxed);
    free(p);
}

char *hs_strndup(const char *s, size_t n)
{
    char *d = hs_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *hs_strdup(const char *s)
{
    return hs_strndup(s, strlen(s));
}

void *hs_malloc_aligned(size_t bytes, size_t align)
{
    if (should_fail()) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes ? bytes : align) != 0) return NULL;
    counted(p);
    return p;
}

void hs_free_aligned(void *p)
{
    hs_free(p);
}

int64_t hs_alloc_live(void)
{
    return atomic_load(&live_count);
}

int64_t hs_alloc_live_bytes(void)
{
    return atomic_load(&live_bytes);
}

void hs_alloc_fail_after(int64_t n)
{
    atomic_store(&fail_budget, n < 0 ? -1 : n);
}
