/* API keys (server/auth.h, core/sha256.h): SHA-256 against FIPS 180-4's examples and a long
 * message, the keys file parser, the key set's checks, header conventions, endpoint and model
 * lists, both token buckets with their Retry-After, a tenant's state carried over a reload, and
 * what one admission costs. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/sha256.h"
#include "server/auth.h"

static void hex_of(const char *s, size_t n, char out[65])
{
    uint8_t d[HS_SHA256_BYTES];
    hs_sha256(s, n, d);
    hs_sha256_hex(d, out);
}

static void sha256_vectors(void **state)
{
    (void)state;
    char h[65];
    hex_of("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    hex_of("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
    hex_of(two, strlen(two), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *a = hs_malloc(1000000);
    memset(a, 'a', 1000000);
    hex_of(a, 1000000, h);
    hs_free(a);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* every tail length around the block size pads correctly: 55, 56, 63, 64, 65 bytes */
    const char *want[] = {"9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318",
                          "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a",
                          "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34",
                          "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
                          "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"};
    const size_t lens[] = {55, 56, 63, 64, 65};
    char buf[65];
    memset(buf, 'a', sizeof buf);
    for (int i = 0; i < 5; i++) {
        hex_of(buf, lens[i], h);
        assert_string_equal(h, want[i]);
    }
    uint8_t d[32];
    assert_true(hs_sha256_parse_hex(want[0], d));
    assert_false(hs_sha256_parse_hex("abc", d));
    assert_false(
        hs_sha256_parse_hex("zz4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318", d));
    assert_true(hs_ct_equal("abcd", "abcd", 4));
    assert_false(hs_ct_equal("abcd", "abce", 4));
}

/* the request's headers for hs_auth_admit: ctx is a NULL-terminated {name, value, ...} list */
static const char *header(void *ctx, const char *name)
{
    const char **h = ctx;
    for (; h[0]; h += 2)
        if (!strcasecmp(h[0], name)) return h[1];
    return NULL;
}

static struct hs_auth_key_cfg key_cfg(const char *key, const char *tenant)
{
    struct hs_auth_key_cfg k;
    hs_config_item_init("auth.keys[]", &k);
    uint8_t d[32];
    hs_sha256(key, strlen(key), d);
    hs_sha256_hex(d, k.sha256);
    snprintf(k.tenant, sizeof k.tenant, "%s", tenant);
    return k;
}

static const struct hs_auth_opts opts = {.probes_open = true, .metrics_open = false};

static void keys_file(void **state)
{
    (void)state;
    char line[512];
    uint8_t d[32];
    char h[65];
    hs_sha256("k1", 2, d);
    hs_sha256_hex(d, h);
    snprintf(line, sizeof line,
             "# comment\n\n  %s team-a models=m1,m2 endpoints=/embed requests_per_s=5 "
             "burst_s=2 priority_max=batch weight=3\n%s team-b\n",
             h, "0000000000000000000000000000000000000000000000000000000000000000");
    struct hs_auth_key_cfg *keys;
    int n;
    struct hs_error err = {0};
    assert_int_equal(hs_auth_parse_keys(line, strlen(line), "k.txt", &keys, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0].tenant, "team-a");
    assert_int_equal(keys[0].n_models, 2);
    assert_string_equal(keys[0].models[1], "m2");
    assert_string_equal(keys[0].endpoints[0], "/embed");
    assert_true(keys[0].requests_per_s == 5 && keys[0].burst_s == 2 && keys[0].weight == 3);
    assert_string_equal(keys[0].priority_max, "batch");
    assert_true(keys[1].burst_s == 1 && keys[1].weight == 1); /* defaults */
    hs_free(keys);
    /* faults name the file and line */
    const char *bad[] = {"abc\n",
                         "x t weight=0\n",
                         "x t priority_max=top\n",
                         "x t colour=red\n",
                         "x t models=,\n",
                         "x t requests_per_s\n",
                         "x t models=a,b,c,d,e,f,g,h,i\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hs_auth_parse_keys(bad[i], strlen(bad[i]), "k.txt", &keys, &n, &err),
                         HS_STATUS_INVALID_INPUT);
        assert_non_null(strstr(err.msg, "k.txt:1:"));
    }
}

static void key_set_checks(void **state)
{
    (void)state;
    struct hs_auth_key_cfg k[3] = {key_cfg("a", "t"), key_cfg("a", "u"), key_cfg("b", "t")};
    struct hs_auth *a;
    struct hs_error err = {0};
    assert_int_equal(hs_auth_create(k, 2, &opts, NULL, &a, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "the same key"));
    k[2].weight = 2; /* same tenant as k[0], another weight */
    struct hs_auth_key_cfg two[2] = {k[0], k[2]};
    assert_int_equal(hs_auth_create(two, 2, &opts, NULL, &a, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "tenant t"));
    strcpy(two[1].sha256, "12");
    assert_int_equal(hs_auth_create(two, 2, &opts, NULL, &a, &err), HS_STATUS_INVALID_INPUT);
    two[1] = key_cfg("b", "t");
    assert_int_equal(hs_auth_create(two, 2, &opts, NULL, &a, &err), 0);
    hs_auth_unref(a);
}

static void admit_and_buckets(void **state)
{
    (void)state;
    struct hs_auth_key_cfg k[2] = {key_cfg("secret-1", "one"), key_cfg("secret-2", "two")};
    k[0].requests_per_s = 2;
    k[0].burst_s = 1;
    k[0].tokens_per_s = 100;
    k[1].n_endpoints = 1;
    strcpy(k[1].endpoints[0], "/v2");
    k[1].n_models = 1;
    strcpy(k[1].models[0], "m");
    strcpy(k[1].priority_max, "batch");
    struct hs_auth *a;
    struct hs_error err = {0};
    assert_int_equal(hs_auth_create(k, 2, &opts, NULL, &a, &err), 0);
    const struct hs_auth_key *key;
    double retry;
    char msg[256];
    const char *none[] = {NULL};
    const char *one[] = {"Authorization", "Bearer secret-1", NULL};
    const char *two[] = {"X-API-Key", "secret-2", NULL};
    const char *wrong[] = {"api-key", "secret-3", NULL};
    int64_t t = hs_now_ns();
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, none, t, &key, &retry, msg, sizeof msg),
        401);
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, wrong, t, &key, &retry, msg, sizeof msg),
        401);
    assert_int_equal(
        hs_auth_admit(a, "/health", HS_AUTH_PROBE, header, none, t, &key, &retry, msg, sizeof msg),
        0);
    assert_null(key);
    assert_int_equal(hs_auth_admit(a, "/metrics", HS_AUTH_METRICS, header, none, t, &key, &retry,
                                   msg, sizeof msg),
                     401);
    /* endpoint prefixes: /v2 covers /v2/models/, not /v20 or /embed */
    assert_int_equal(hs_auth_admit(a, "/v2/models/", HS_AUTH_KEYED, header, two, t, &key, &retry,
                                   msg, sizeof msg),
                     0);
    assert_string_equal(hs_auth_tenant(key), "two");
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, two, t, &key, &retry, msg, sizeof msg),
        403);
    enum hs_priority p = HS_PRIORITY_INTERACTIVE;
    assert_int_equal(hs_auth_job(a, key, "x", 5, t, &p, &retry, msg, sizeof msg),
                     HS_STATUS_FORBIDDEN);
    assert_int_equal(hs_auth_job(a, key, "m", 5, t, &p, &retry, msg, sizeof msg), 0);
    assert_int_equal(p, HS_PRIORITY_BATCH);
    /* requests: 2/s, a bucket of 2 */
    for (int i = 0; i < 2; i++)
        assert_int_equal(hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, one, t, &key, &retry,
                                       msg, sizeof msg),
                         0);
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, one, t, &key, &retry, msg, sizeof msg),
        429);
    assert_true(retry > 0.49 && retry < 0.51);
    t += 500000000; /* half a second: one request back */
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, one, t, &key, &retry, msg, sizeof msg),
        0);
    /* tokens: 100/s, a bucket of 100, overdrawn once */
    p = HS_PRIORITY_INTERACTIVE;
    assert_int_equal(hs_auth_job(a, key, "any", 150, t, &p, &retry, msg, sizeof msg), 0);
    assert_int_equal(p, HS_PRIORITY_INTERACTIVE);
    assert_int_equal(hs_auth_job(a, key, "any", 1, t, &p, &retry, msg, sizeof msg),
                     HS_STATUS_OVERLOADED);
    assert_true(retry > 0.49 && retry < 0.51);
    /* a reload keeps the tenant's levels: still empty */
    struct hs_auth *b;
    assert_int_equal(hs_auth_create(k, 2, &opts, a, &b, &err), 0);
    assert_int_equal(
        hs_auth_admit(b, "/embed", HS_AUTH_KEYED, header, one, t, &key, &retry, msg, sizeof msg),
        429);
    hs_auth_unref(a);
    hs_auth_unref(b);
}

/* auth.share_inflight 4 (refused past 8 in flight), three tenants of weight 1: the flood, held
 * down to the light tenant's level, ties with it; the light one is admitted at the tie, the
 * flood is refused once strictly the heaviest. */
static void share_ties(void **state)
{
    (void)state;
    struct hs_auth_key_cfg k[3] = {key_cfg("secret-a", "a"), key_cfg("secret-b", "b"),
                                   key_cfg("secret-c", "c")};
    struct hs_auth_opts o = opts;
    o.share_inflight = 4;
    struct hs_auth *a;
    struct hs_error err = {0};
    assert_int_equal(hs_auth_create(k, 3, &o, NULL, &a, &err), 0);
    const struct hs_auth_key *ka, *kb, *kc;
    double retry;
    char msg[256];
    const char *ha[] = {"Authorization", "Bearer secret-a", NULL};
    const char *hb[] = {"Authorization", "Bearer secret-b", NULL};
    const char *hc[] = {"Authorization", "Bearer secret-c", NULL};
    int64_t t = hs_now_ns();
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, ha, t, &ka, &retry, msg, sizeof msg), 0);
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, hb, t, &kb, &retry, msg, sizeof msg), 0);
    assert_int_equal(
        hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, hc, t, &kc, &retry, msg, sizeof msg), 0);
    enum hs_priority p;
#define JOB(key)                                                                                   \
    (p = HS_PRIORITY_INTERACTIVE, hs_auth_job(a, key, "m", 1, t, &p, &retry, msg, sizeof msg))
    /* a 3, b 3, c 2: 8 in flight */
    for (int i = 0; i < 3; i++) assert_int_equal(JOB(ka), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(JOB(kb), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(JOB(kc), 0);
    /* b ties with a: admitted (it was refused as "the heaviest" before) */
    assert_int_equal(JOB(kb), 0);
    /* a at 3 of b's 4: admitted; a at 4 ties: admitted; a at 5, strictly the heaviest: 429 */
    assert_int_equal(JOB(ka), 0);
    assert_int_equal(JOB(ka), 0);
    assert_int_equal(JOB(ka), HS_STATUS_OVERLOADED);
    assert_non_null(strstr(msg, "weighted share"));
    /* c, under its share of the others' level, is admitted */
    assert_int_equal(JOB(kc), 0);
#undef JOB
    for (int i = 0; i < 5; i++) hs_auth_done(ka);
    for (int i = 0; i < 4; i++) hs_auth_done(kb);
    for (int i = 0; i < 3; i++) hs_auth_done(kc);
    hs_auth_unref(a);
}

/* What admission costs with many keys: hashing and comparing with every key. Printed, not
 * gated (a shared machine's timings). */
static void admit_cost(void **state)
{
    (void)state;
    enum { N = 1000 };
    struct hs_auth_key_cfg *k = hs_calloc(N, sizeof *k);
    for (int i = 0; i < N; i++) {
        char key[32], tenant[32];
        snprintf(key, sizeof key, "key-%d", i);
        snprintf(tenant, sizeof tenant, "t%d", i % 10);
        k[i] = key_cfg(key, tenant);
    }
    struct hs_auth *a;
    struct hs_error err = {0};
    assert_int_equal(hs_auth_create(k, N, &opts, NULL, &a, &err), 0);
    const char *h[] = {"Authorization", "Bearer key-999", NULL};
    const struct hs_auth_key *key;
    double retry;
    char msg[256];
    int64_t t0 = hs_now_ns();
    for (int i = 0; i < 2000; i++)
        assert_int_equal(
            hs_auth_admit(a, "/embed", HS_AUTH_KEYED, header, h, t0, &key, &retry, msg, sizeof msg),
            0);
    double ns = (double)(hs_now_ns() - t0) / 2000;
    print_message("admission with %d keys: %.0f ns\n", N, ns);
    hs_auth_unref(a);
    hs_free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sha256_vectors), cmocka_unit_test(keys_file),
        cmocka_unit_test(key_set_checks), cmocka_unit_test(admit_and_buckets),
        cmocka_unit_test(admit_cost),     cmocka_unit_test(share_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
