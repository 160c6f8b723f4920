#include "core/arena.h"

#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

#define ARENA_ALIGN 64

struct chunk {
    struct chunk *next;
    size_t cap;
    size_t used;
    /* data follows, aligned */
};

struct hs_arena {
    struct chunk *head;
    size_t chunk_bytes;
    size_t total;
};

static size_t header_bytes(void)
{
    return (sizeof(struct chunk) + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

struct hs_arena *hs_arena_create(size_t chunk_bytes)
{
    struct hs_arena *a = hs_malloc(sizeof *a);
    if (!a) return NULL;
    a->head = NULL;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : 16384;
    a->total = sizeof *a;
    return a;
}

void hs_arena_destroy(struct hs_arena *a)
{
    if (!a) return;
    struct chunk *c = a->head;
    while (c) {
        struct chunk *n = c->next;
        hs_free_aligned(c);
        c = n;
    }
    hs_free(a);
}

void *hs_arena_alloc(struct hs_arena *a, size_t bytes)
{
    size_t need = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;
    struct chunk *c = a->head;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > a->chunk_bytes ? need : a->chunk_bytes;
        struct chunk *n = hs_malloc_aligned(header_bytes() + cap, ARENA_ALIGN);
        if (!n) return NULL;
        n->cap = cap;
        n->used = 0;
        a->total += header_bytes() + cap;
        if (c && need > a->chunk_bytes) {
            /* An oversized chunk goes behind the current one so its free space stays usable. */
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
        }
        c = n;
    }
    void *p = (char *)c + header_bytes() + c->used;
    c->used += need;
    return p;
}

void *hs_arena_calloc(struct hs_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = hs_arena_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

char *hs_arena_strndup(struct hs_arena *a, const char *s, size_t n)
{
    char *d = hs_arena_alloc(a, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

size_t hs_arena_bytes(const struct hs_arena *a)
{
    return a->total;
}
