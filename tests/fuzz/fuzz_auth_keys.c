/* Fuzz: the API keys file (server/auth.c, hs_auth_parse_keys), then the key set built from what
 * it accepts (hs_auth_create), as the server does at start and on SIGHUP.
 *
 * Input: the file's bytes. Checks: a fault is HS_STATUS_INVALID_INPUT with a message naming the
 * file and line; an accepted file gives at most one key per line, each with a tenant and its
 * values in the config table's ranges (priority_max interactive or batch, weight and burst_s
 * positive, at most HS_AUTH_MAX_NAMES models and endpoints); a key set either refuses them with
 * a message or holds them all, and a presented key that is none of them is refused 401; nothing
 * leaks. Each input runs once more with allocations failing from the n-th on: a clean refusal
 * (out of memory allowed), nothing leaked.
 */
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "server/auth.h"

static const char *header(void *ctx, const char *name)
{
    (void)name;
    return ctx;
}

static void run(const uint8_t *data, size_t size, bool oom)
{
    struct hs_auth_key_cfg *keys = NULL;
    int n = 0;
    struct hs_error err = {0};
    if (oom) fuzz_fail_allocs(data, size);
    hs_status st = hs_auth_parse_keys((const char *)data, size, "keys.txt", &keys, &n, &err);
    if (!oom && st) {
        FUZZ_CHECK(st == HS_STATUS_INVALID_INPUT);
        FUZZ_CHECK(!strncmp(err.msg, "keys.txt:", 9));
    }
    if (oom) FUZZ_CHECK(st == 0 || st == HS_STATUS_INVALID_INPUT || st == HS_STATUS_NO_MEMORY);
    if (st) {
        FUZZ_CHECK(keys == NULL && n == 0);
        fuzz_fail_allocs_end();
        return;
    }
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    FUZZ_CHECK(n >= 0 && (size_t)n <= lines && n <= HS_AUTH_MAX_KEYS);
    for (int i = 0; i < n; i++) {
        const struct hs_auth_key_cfg *k = &keys[i];
        FUZZ_CHECK(k->tenant[0] && memchr(k->tenant, '\0', sizeof k->tenant));
        FUZZ_CHECK(memchr(k->sha256, '\0', sizeof k->sha256));
        FUZZ_CHECK(!strcmp(k->priority_max, "interactive") || !strcmp(k->priority_max, "batch"));
        FUZZ_CHECK(k->weight >= 0.001 && k->burst_s >= 0.001);
        FUZZ_CHECK(k->requests_per_s >= 0 && k->tokens_per_s >= 0);
        FUZZ_CHECK(k->n_models <= HS_AUTH_MAX_NAMES && k->n_endpoints <= HS_AUTH_MAX_NAMES);
    }
    struct hs_auth *a = NULL;
    struct hs_auth_opts o = {.probes_open = true};
    st = hs_auth_create(keys, n, &o, NULL, &a, &err);
    if (st) {
        FUZZ_CHECK(oom || (st == HS_STATUS_INVALID_INPUT && err.msg[0]));
    } else {
        FUZZ_CHECK(hs_auth_n_keys(a) == n);
        const struct hs_auth_key *key;
        double retry;
        char msg[256];
        /* no key file names the digest of this key (its preimage is not known) */
        FUZZ_CHECK(hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, "Bearer fuzz-not-a-key", 0,
                                 &key, &retry, msg, sizeof msg) == 401);
        hs_auth_unref(a);
    }
    hs_free(keys);
    if (oom) fuzz_fail_allocs_end();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    for (int pass = 0; pass < 2; pass++) {
        int64_t live = hs_alloc_live();
        run(data, size, pass == 1);
        FUZZ_CHECK(hs_alloc_live() == live);
    }
    return 0;
}
