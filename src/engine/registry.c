/* The registry of engine kinds: one line per kind. A kind's entry (struct hs_engine_kind) is
 * defined in its own folder, engine/<kind>/kind.c, which every build compiles; the entry's
 * create and device_count are NULL where the kind's implementation was not built in. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

#define HS_ENGINE_KIND_LIST(X)                                                                     \
    X(cpu)                                                                                         \
    X(cuda)                                                                                        \
    X(remote)

#define HS__KIND_DECL(k) extern const struct hs_engine_kind hs__engine_kind_##k;
HS_ENGINE_KIND_LIST(HS__KIND_DECL)
#undef HS__KIND_DECL

static const struct hs_engine_kind *const kinds[] = {
#define HS__KIND_PTR(k) &hs__engine_kind_##k,
    HS_ENGINE_KIND_LIST(HS__KIND_PTR)
#undef HS__KIND_PTR
};

int hs_engine_kind_count(void)
{
    return (int)(sizeof kinds / sizeof kinds[0]);
}

const struct hs_engine_kind *hs_engine_kind_at(int i)
{
    return i >= 0 && i < hs_engine_kind_count() ? kinds[i] : NULL;
}

const struct hs_engine_kind *hs_engine_kind_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < hs_engine_kind_count(); i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

void hs_engine_kind_names(char *buf, size_t n)
{
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < hs_engine_kind_count() && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", kinds[i]->name);
}

bool hs_engine_kind_built(const struct hs_engine_kind *k)
{
    return k && k->create != NULL;
}

int hs_engine_kind_devices(const struct hs_engine_kind *k)
{
    return k && k->create && k->device_count ? k->device_count() : 0;
}
