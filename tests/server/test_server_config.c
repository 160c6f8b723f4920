/* YAML config: defaults, printed defaults parse back to the same values, overrides, errors. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "server/config.h"

static void printed_defaults_parse_back(void **state)
{
    (void)state;
    struct hs_config *a = hs_malloc(sizeof *a), *b = hs_malloc(sizeof *b);
    hs_config_defaults(a, "some/model");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hs_config_print(a, f);
    fclose(f);
    hs_config_defaults(b, "other/path");
    b->batching.batch_max = 1;
    b->scheduler.shed_batch_ratio = 0.1;
    struct hs_error err = {0};
    if (hs_config_parse(text, len, "printed", b, &err) != HS_STATUS_OK) fail_msg("%s", err.msg);
    assert_int_equal(hs_config_validate(b, &err), HS_STATUS_OK);
    assert_memory_equal(a, b, sizeof *a);
    free(text);
    hs_free(a);
    hs_free(b);
}

static void overrides(void **state)
{
    (void)state;
    static const char yaml[] = "server: {port: 0, threads: 2}\n"
                               "engines:\n"
                               "  - name: small\n"
                               "    kind: cpu\n"
                               "    threads: 1\n"
                               "    cores: \"0-1,3\"\n"
                               "    whitelist: [[1, 16], [8, 64]]\n"
                               "models:\n"
                               "  - path: m/x\n"
                               "    engine: small\n"
                               "batching:\n"
                               "  batch_window_us: 500\n"
                               "  buckets: [8, 64]\n"
                               "limits: {queue_max: 7, timeout_ms: 250}\n"
                               "scheduler: {throughput_init_tokens_per_s: 1e9}\n";
    struct hs_config c;
    hs_config_defaults(&c, NULL);
    struct hs_error err = {0};
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", &c, &err) != HS_STATUS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(hs_config_validate(&c, &err), HS_STATUS_OK);
    assert_int_equal(c.server.port, 0);
    assert_int_equal(c.server.threads, 2);
    assert_string_equal(c.server.host, "127.0.0.1"); /* untouched default */
    assert_int_equal(c.n_engines, 1);
    assert_string_equal(c.engines[0].name, "small");
    assert_int_equal(c.engines[0].n_cores, 3);
    assert_int_equal(c.engines[0].cores[2], 3);
    assert_int_equal(c.engines[0].n_shapes, 2);
    assert_int_equal(c.engines[0].shapes[1].batch, 8);
    assert_int_equal(c.engines[0].shapes[1].seq, 64);
    assert_string_equal(c.models[0].path, "m/x");
    assert_int_equal(c.batching.batch_window_us, 500);
    assert_int_equal(c.batching.n_buckets, 2);
    assert_int_equal(c.batching.batch_max, 32);
    assert_int_equal(c.limits.queue_max, 7);
    assert_true(c.scheduler.throughput_init_tokens_per_s == 1e9);
}

static void errors_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *needle;
    } cases[] = {
        {"batching: {batch_max: -3}\n", "batching.batch_max"},
        {"batching: {batch_max: many}\n", "expected an integer"},
        {"server:\n  prot: 80\n", "server.prot"},
        {"bogus: 1\n", "unknown section"},
        {"limits: [1, 2]\n", "expected a mapping"},
        {"server: {port: 8080\n", "YAML error"},
        {"engines:\n  - {name: e, whitelist: [[1]]}\n", "[batch, seq]"},
        {"scheduler: {shed_batch_ratio: 2}\n", "out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hs_config c;
        hs_config_defaults(&c, NULL);
        struct hs_error err = {0};
        hs_status st = hs_config_parse(cases[i].yaml, strlen(cases[i].yaml), "f.yaml", &c, &err);
        assert_int_equal(st, HS_STATUS_INVALID_INPUT);
        if (!strstr(err.msg, cases[i].needle) || !strstr(err.msg, "f.yaml"))
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].needle);
    }
    struct hs_config c;
    hs_config_defaults(&c, NULL);
    struct hs_error err = {0};
    static const char bad_ref[] = "models:\n  - {path: p, engine: gpu9}\n";
    assert_int_equal(hs_config_parse(bad_ref, sizeof bad_ref - 1, "f", &c, &err), HS_STATUS_OK);
    assert_int_equal(hs_config_validate(&c, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "gpu9"));
    assert_int_equal(hs_config_load("/nonexistent/x.yaml", &c, &err), HS_STATUS_IO);
}

/* Engines, resident models, routes, rules, breaker, retry, admin: parsed, printed, parsed back
 * to the same values; bad references are errors naming them. */
static void routing_sections(void **state)
{
    (void)state;
    static const char yaml[] =
        "engines:\n"
        "  - {name: cpu_a, kind: cpu, threads: 1, slots: 2, batch_window_us: 500, queue_max: 9}\n"
        "  - {name: cpu_b, kind: cpu, threads: 1, batch_max: 4, batch_max_tokens: 512}\n"
        "models:\n"
        "  - {path: some/model, engines: [cpu_a, cpu_b]}\n"
        "routes:\n"
        "  - name: short\n"
        "    engines: [cpu_a]\n"
        "    split: {route: long, ratio: 0.1}\n"
        "    shadow: {route: long, ratio: 0.05}\n"
        "    failover: {route: long, ratio_max: 0.25}\n"
        "  - {name: long, engines: [cpu_b]}\n"
        "  - {name: casc, kind: cascade, small: short, big: long}\n"
        "router:\n"
        "  rules:\n"
        "    - {route: short, tokens_max: 32, task: embed, priority: batch, header: X-T,\n"
        "       value: gold}\n"
        "    - {route: long, tokens_min: 33}\n"
        "  default_route: long\n"
        "  fallback_engine: cpu_b\n"
        "breaker: {window_requests: 8, min_requests: 3, error_ratio_max: 0.4, latency_max_ms: 9,\n"
        "          open_ms: 100, half_open_probes: 1}\n"
        "retry: {budget_ratio: 0.2, budget_max: 3}\n"
        "admin: {enabled: true}\n"
        "cascade: {small: model, small_head: s.json, big: model, big_head: b.json,\n"
        "          threshold: 0.6, escalation_max_ratio: 0.3}\n";
    struct hs_config *a = hs_malloc(sizeof *a), *b = hs_malloc(sizeof *b);
    hs_config_defaults(a, NULL);
    struct hs_error err = {0};
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", a, &err) || hs_config_validate(a, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(a->engines[0].slots, 2);
    assert_int_equal(a->engines[1].batch_window_us, -1);
    assert_int_equal(a->models[0].n_engines, 2);
    assert_string_equal(a->models[0].engine, "cpu_a");
    assert_int_equal(a->n_routes, 3);
    assert_string_equal(a->routes[0].failover_route, "long");
    assert_true(a->routes[0].failover_ratio_max == 0.25);
    assert_string_equal(a->routes[2].kind, "cascade");
    assert_int_equal(a->router.n_rules, 2);
    assert_string_equal(a->router.rules[0].value, "gold");
    assert_int_equal(a->breaker.half_open_probes, 1);
    assert_int_equal(a->admin.enabled, 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hs_config_print(a, f);
    fclose(f);
    hs_config_defaults(b, NULL);
    if (hs_config_parse(text, len, "printed", b, &err) || hs_config_validate(b, &err))
        fail_msg("%s\n%s", err.msg, text);
    assert_memory_equal(a, b, sizeof *a);
    free(text);

    static const char *const bad[][2] = {
        {"routes: [{name: r, engines: [nope]}]\n", "nope"},
        {"routes: [{name: r, failover: {route: gone}}]\n", "gone"},
        {"routes: [{name: r}]\nrouter: {rules: [{route: x}]}\n", "x"},
        {"routes: [{name: r, kind: fancy}]\n", "kind"},
        {"routes: [{name: r, split: {route: r, ratio: 2}}]\n", "ratio"},
        {"router: {default_route: nowhere}\n", "nowhere"},
        {"admin: {enabled: 1}\n", "admin.enabled"},
        /* one cascade configuration: the cascade section's */
        {"routes: [{name: a}, {name: c, kind: cascade, small: a, big: a, threshold: 0.5}]\n",
         "cascade section"},
        {"routes: [{name: a}, {name: c, kind: cascade, small: a, big: a}]\n", "'c' is a cascade"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_config_defaults(b, NULL);
        hs_status st = hs_config_parse(bad[i][0], strlen(bad[i][0]), "bad", b, &err);
        if (!st) st = hs_config_validate(b, &err);
        assert_int_equal(st, HS_STATUS_INVALID_INPUT);
        if (!strstr(err.msg, bad[i][1])) fail_msg("'%s' not in '%s'", bad[i][1], err.msg);
    }
    hs_free(a);
    hs_free(b);
}

/* The cascade section: keys, defaults, ranges and the cross-checks of validate. */
static void cascade_section(void **state)
{
    (void)state;
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_error err = {0};
    hs_config_defaults(c, NULL);
    assert_true(c->cascade.threshold == 0.7);
    assert_true(c->cascade.escalation_max_ratio == 1.0);
    assert_string_equal(c->cascade.small, "");
    static const char yaml[] = "cascade:\n  small: a\n  small_head: h/a.json\n  big: b\n"
                               "  big_head: h/b.json\n  threshold: 0.75\n"
                               "  escalation_max_ratio: 0.2\n";
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", c, &err)) fail_msg("%s", err.msg);
    assert_string_equal(c->cascade.big_head, "h/b.json");
    assert_true(c->cascade.threshold == 0.75 && c->cascade.escalation_max_ratio == 0.2);
    assert_int_equal(hs_config_validate(c, &err), HS_STATUS_OK);
    static const char *const bad[] = {"cascade: {threshold: 0}\n", "cascade: {threshold: 1.5}\n",
                                      "cascade: {escalation_max_ratio: 2}\n",
                                      "cascade: {bogus: 1}\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_config_defaults(c, NULL);
        assert_int_equal(hs_config_parse(bad[i], strlen(bad[i]), "f.yaml", c, &err),
                         HS_STATUS_INVALID_INPUT);
        assert_non_null(strstr(err.msg, "cascade"));
    }
    hs_config_defaults(c, NULL);
    static const char no_head[] = "cascade: {small: a}\n";
    assert_int_equal(hs_config_parse(no_head, sizeof no_head - 1, "f", c, &err), HS_STATUS_OK);
    assert_int_equal(hs_config_validate(c, &err), HS_STATUS_INVALID_INPUT);
    hs_config_defaults(c, NULL);
    static const char no_small[] = "cascade: {big: b, big_head: x}\n";
    assert_int_equal(hs_config_parse(no_small, sizeof no_small - 1, "f", c, &err), HS_STATUS_OK);
    assert_int_equal(hs_config_validate(c, &err), HS_STATUS_INVALID_INPUT);
    hs_free(c);
}

/* Prints c, parses the text over defaults made from another model path, and checks that every
 * byte came back. */
static void assert_round_trip(const struct hs_config *a)
{
    struct hs_config *b = hs_malloc(sizeof *b);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hs_config_print(a, f);
    fclose(f);
    hs_config_defaults(b, "other/path");
    struct hs_error err = {0};
    if (hs_config_parse(text, len, "printed", b, &err) != HS_STATUS_OK)
        fail_msg("%s\n%s", err.msg, text);
    if (memcmp(a, b, sizeof *a)) fail_msg("printed and parsed back differs:\n%s", text);
    free(text);
    hs_free(b);
}

/* Every key set away from its default, and list items holding only their defaults: printed,
 * parsed back, the same bytes. */
static void every_key_round_trips(void **state)
{
    (void)state;
    static const char every[] =
        "server: {host: 0.0.0.0, port: 0, threads: 7, connection_timeout_s: 5,\n"
        "         trace_file: \"t \\\"q\\\".json\"}\n"
        "engines:\n"
        "  - {name: a, kind: cpu, device: 0, dtype: int8, threads: 1, cores: \"0-1,3\",\n"
        "     whitelist: [[1, 16], [8, 64]], slots: 2, batch_window_us: 500, batch_max: 4,\n"
        "     batch_max_tokens: 512, queue_max: 9}\n"
        "  - {name: b, kind: cpu, cores: [2, 5]}\n"
        "models:\n"
        "  - {path: some/model, name: m1, engines: [a, b], dtype: f32}\n"
        "  - {path: \"with space\", name: \"8080\", engine: a}\n"
        "  - {path: /abs/p-1.0_x, name: \"True\", engine: a}\n"
        "  - {path: other, engine: b}\n"
        "batching: {batch_window_us: 0, batch_max: 1, batch_max_tokens: 99, buckets: [8, 64]}\n"
        "limits: {queue_max: 7, timeout_ms: 250, timeout_max_ms: 1000,\n"
        "         body_bytes_max: 17179869184, items_max: 3, chars_max: 9, drain_timeout_ms: 0}\n"
        "scheduler: {shed_batch_ratio: 0.5, throughput_init_tokens_per_s: 1e9,\n"
        "            throughput_ewma_alpha: 0.123456789, retry_after_min_s: 3}\n"
        "routes:\n"
        "  - {name: s, model: m1, engines: [a], split: {route: l, ratio: 0.1},\n"
        "     shadow: {route: l, ratio: 0.05}, failover: {route: l, ratio_max: 0.25}}\n"
        "  - {name: l, engines: [b]}\n"
        "  - {name: c, kind: cascade, small: s, big: l}\n"
        "router:\n"
        "  rules:\n"
        "    - {route: s, tokens_min: 1, tokens_max: 32, task: predict, priority: interactive,\n"
        "       header: X-T, value: gold}\n"
        "  default_route: l\n"
        "  fallback_engine: b\n"
        "breaker: {window_requests: 8, min_requests: 3, error_ratio_max: 0.4, latency_max_ms: 9,\n"
        "          open_ms: 100, half_open_probes: 1}\n"
        "retry: {budget_ratio: 0.2, budget_max: 3}\n"
        "admin: {enabled: true, token: s3cret}\n"
        "cascade: {small: m1, small_head: s.json, big: m1, big_head: b.json, threshold: 0.6,\n"
        "          escalation_max_ratio: 0.3}\n";
    static const char defaults_only[] = "routes: [{}, {}]\nrouter: {rules: [{route: route0}]}\n";
    const char *cases[] = {every, defaults_only};
    struct hs_config *a = hs_malloc(sizeof *a);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hs_error err = {0};
        hs_config_defaults(a, NULL);
        if (hs_config_parse(cases[i], strlen(cases[i]), "t", a, &err) ||
            hs_config_validate(a, &err))
            fail_msg("case %zu: %s", i, err.msg);
        assert_round_trip(a);
    }
    assert_string_equal(a->routes[1].name, "route1"); /* an item's default name */
    assert_true(a->routes[1].failover_ratio_max == 0.3);
    hs_free(a);
}

/* Faults name the file, the line and the key path, lists by index. */
static void errors_name_file_line_and_path(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *msg;
    } cases[] = {
        /* unknown keys */
        {"server:\n  host: x\n  prot: 80\n", "f.yaml:3: server.prot: unknown key (known: host,"},
        {"engines:\n  - name: a\n  - name: b\n    colour: red\n",
         "f.yaml:4: engines[1].colour: unknown key"},
        {"routes:\n  - {name: r, split: {route: r, share: 1}}\n",
         "f.yaml:2: routes[0].split.share: unknown key"},
        {"router:\n  rules:\n    - {route: r, tokens: 3}\n",
         "f.yaml:3: router.rules[0].tokens: unknown key"},
        /* a mapping or list where a value belongs, and a key that is not a value */
        {"server:\n  port: [1]\n", "f.yaml:2: server.port: expected an integer, not a list"},
        {"server:\n  host: {a: b}\n", "f.yaml:2: server.host: expected a string, not a mapping"},
        {"admin: {enabled: [true]}\n", "admin.enabled: expected true or false, not a list"},
        {"engines:\n  - {cores: [[0]]}\n", "engines[0].cores: expected an integer, not a list"},
        {"models:\n  - {path: {p: 1}}\n", "models[0].path: expected a string, not a mapping"},
        {"server:\n  ? [a]\n  : 1\n", "f.yaml:2: server: expected a key"},
        {"engines:\n  - cpu0\n", "f.yaml:2: engines[0]: expected a mapping"},
        {"engines: {name: a}\n", "engines: expected a list of mappings"},
        /* ranges */
        {"engines:\n  - {threads: 5000}\n", "engines[0].threads: 5000 is out of range [0, 4096]"},
        {"engines:\n  - {device: -1}\n", "engines[0].device: -1 is out of range"},
        {"limits: {body_bytes_max: 63}\n", "limits.body_bytes_max: 63 is out of range"},
        {"engines:\n  - {cores: \"0-5000\"}\n", "engines[0].cores: 0-5000 is out of range"},
        /* wrong types */
        {"server: {port: eighty}\n", "server.port: expected an integer, not 'eighty'"},
        {"server: {threads: 2.5}\n", "server.threads: expected an integer, not '2.5'"},
        {"retry: {budget_max: lots}\n", "retry.budget_max: expected a number, not 'lots'"},
        {"retry: {budget_max: nan}\n", "retry.budget_max: expected a number, not 'nan'"},
        {"admin: {enabled: yes}\n", "admin.enabled: expected true or false, not 'yes'"},
        {"engines:\n  - {cores: \"0-x\"}\n", "engines[0].cores: expected numbers and ranges"},
        {"engines:\n  - {name: \"a-name-longer-than-thirty-one-characters\"}\n",
         "engines[0].name: longer than 31 characters"},
        /* choices, required keys, keys given twice */
        {"router:\n  rules:\n    - {route: r, task: Embed}\n", "task: 'Embed' is not one of"},
        {"router:\n  rules:\n    - {tokens_max: 3}\n",
         "f.yaml:3: router.rules[0]: route is required"},
        {"models:\n  - {name: x}\n", "f.yaml:2: models[0]: path is required"},
        {"server:\n  port: 1\n  port: 2\n", "f.yaml:3: server.port: given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hs_config c;
        hs_config_defaults(&c, NULL);
        struct hs_error err = {0};
        hs_status st = hs_config_parse(cases[i].yaml, strlen(cases[i].yaml), "f.yaml", &c, &err);
        if (st != HS_STATUS_INVALID_INPUT || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: status %d, message '%s' lacks '%s'", i, st, err.msg, cases[i].msg);
    }
}

/* engines[].device and engines[].dtype; models[].dtype; kinds from the registry. */
static void engine_kind_device_dtype(void **state)
{
    (void)state;
    struct hs_config c;
    struct hs_error err = {0};
    hs_config_defaults(&c, NULL);
    assert_int_equal(c.engines[0].device, 0);
    assert_string_equal(c.engines[0].dtype, "");
    assert_string_equal(c.models[0].dtype, "");
    assert_int_equal(hs_config_lane_dtype(&c.models[0], &c.engines[0]), HS_DTYPE_F32);
    static const char yaml[] = "engines:\n  - {name: q, kind: cpu, device: 3, dtype: int8}\n"
                               "models:\n  - {path: p}\n  - {path: r, dtype: f32}\n";
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", &c, &err) || hs_config_validate(&c, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(c.engines[0].device, 3);
    assert_string_equal(c.engines[0].dtype, "int8");
    assert_string_equal(c.models[0].engine, "q");
    assert_int_equal(hs_config_lane_dtype(&c.models[0], &c.engines[0]), HS_DTYPE_I8);
    assert_int_equal(hs_config_lane_dtype(&c.models[1], &c.engines[0]), HS_DTYPE_F32);
    static const char *const bad[][2] = {
        {"engines:\n  - {name: e, kind: nosuch}\n", "unknown kind 'nosuch' (known: cpu"},
        {"engines:\n  - {name: e, dtype: f99}\n", "dtype 'f99'"},
        {"engines:\n  - {name: e, dtype: f16}\n", "dtype 'f16' is not one a cpu engine"},
        {"models:\n  - {path: p, dtype: f12}\n", "dtype 'f12'"},
        {"models:\n  - {path: p, dtype: f16}\n", "does not compute in f16"},
        {"engines:\n  - {name: e}\n  - {name: e}\n", "engine name 'e' used twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_config_defaults(&c, NULL);
        hs_status st = hs_config_parse(bad[i][0], strlen(bad[i][0]), "f", &c, &err);
        if (!st) st = hs_config_validate(&c, &err);
        assert_int_equal(st, HS_STATUS_INVALID_INPUT);
        if (!strstr(err.msg, bad[i][1])) fail_msg("'%s' not in '%s'", bad[i][1], err.msg);
    }
}

/* A lane against its engine's device claims (hs_config_check_devices): what the kind offers
 * passes validate; what the device lacks is refused naming model, engine, device and dtype; a
 * device that is not present (no stages in its caps) is not checked. */
static void lane_dtype_against_device_claims(void **state)
{
    (void)state;
    struct hs_config c;
    struct hs_error err = {0};
    hs_config_defaults(&c, NULL);
    static const char yaml[] = "engines:\n  - {name: ov, kind: openvino, dtype: f16}\n"
                               "  - {name: c8, kind: cpu, dtype: int8}\n"
                               "models:\n  - {path: p, name: mini, engines: [ov, c8]}\n";
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", &c, &err) || hs_config_validate(&c, &err))
        fail_msg("%s", err.msg); /* the openvino kind offers f16 (on GPU, NPU devices) */
    struct hs_engine_caps caps[HS_CONFIG_MAX_ENGINES];
    memset(caps, 0, sizeof caps);
    assert_int_equal(hs_config_check_devices(&c, caps, &err), 0); /* nothing present here */
    /* an OpenVINO that lists only its CPU device: f32 and int8 */
    snprintf(caps[0].kind, sizeof caps[0].kind, "openvino");
    snprintf(caps[0].device, sizeof caps[0].device, "Some CPU");
    caps[0].stages = 7;
    caps[0].dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_I8;
    caps[1] = caps[0];
    snprintf(caps[1].kind, sizeof caps[1].kind, "cpu");
    assert_int_equal(hs_config_check_devices(&c, caps, &err), HS_STATUS_INVALID_INPUT);
    printf("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "model 'mini' on engine 'ov'"));
    assert_non_null(strstr(err.msg, "computes in f16"));
    assert_non_null(strstr(err.msg, "Some CPU"));
    assert_non_null(strstr(err.msg, "it computes in f32, int8"));
    caps[0].dtypes |= 1u << HS_DTYPE_F16; /* a GPU device */
    assert_int_equal(hs_config_check_devices(&c, caps, &err), 0);
    caps[1].dtypes = 1u << HS_DTYPE_F32; /* a CPU without VNNI */
    assert_int_equal(hs_config_check_devices(&c, caps, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "engine 'c8'"));
    assert_non_null(strstr(err.msg, "computes in int8"));
}

/* engines[].slices: parsed, printed, split into core and thread shares, refused with the key path
 * where it cannot be. */
static void engine_slices(void **state)
{
    (void)state;
    struct hs_config c;
    struct hs_error err = {0};
    hs_config_defaults(&c, NULL);
    assert_int_equal(c.engines[0].slices, 1);
    static const char yaml[] = "engines:\n  - {name: s, kind: cpu, cores: \"0-4\", threads: 5, "
                               "slices: 2}\nmodels:\n  - {path: p}\n";
    if (hs_config_parse(yaml, sizeof yaml - 1, "t", &c, &err) || hs_config_validate(&c, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(c.engines[0].slices, 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hs_config_print(&c, f);
    fclose(f);
    assert_non_null(strstr(text, "slices: 2"));
    free(text);
    /* shares: cores 0-2 and 3-4, threads 3 and 2 */
    int cores[HS_ENGINE_MAX_CORES], threads = 0;
    char name[48];
    assert_int_equal(hs_config_slice(&c.engines[0], 0, NULL, 0, cores, &threads), 3);
    assert_int_equal(cores[0], 0);
    assert_int_equal(cores[2], 2);
    assert_int_equal(threads, 3);
    assert_int_equal(hs_config_slice(&c.engines[0], 1, NULL, 0, cores, &threads), 2);
    assert_int_equal(cores[0], 3);
    assert_int_equal(cores[1], 4);
    assert_int_equal(threads, 2);
    hs_config_slice_name(&c.engines[0], 1, name, sizeof name);
    assert_string_equal(name, "s/1");
    /* unpinned: shares of the cores given as available; one slice: spread over them all
     * (engines[].spread, on by default) unless its team is one thread, or as it is */
    static const int avail[] = {2, 5, 7};
    c.engines[0].n_cores = 0;
    c.engines[0].threads = 0;
    assert_int_equal(hs_config_slice(&c.engines[0], 1, avail, 3, cores, &threads), 1);
    assert_int_equal(cores[0], 7);
    assert_int_equal(threads, 0);
    c.engines[0].slices = 1;
    assert_int_equal(c.engines[0].spread, 1);
    assert_int_equal(hs_config_slice(&c.engines[0], 0, avail, 3, cores, &threads), 3);
    assert_int_equal(cores[0], 2);
    assert_int_equal(cores[2], 7);
    assert_int_equal(threads, 0);
    c.engines[0].threads = 1;
    assert_int_equal(hs_config_slice(&c.engines[0], 0, avail, 3, cores, &threads), 0);
    c.engines[0].threads = 0;
    c.engines[0].spread = 0;
    assert_int_equal(hs_config_slice(&c.engines[0], 0, avail, 3, cores, &threads), 0);
    hs_config_slice_name(&c.engines[0], 0, name, sizeof name);
    assert_string_equal(name, "s");
    /* cuda slices into streams on one device: more slices than cores and threads is fine, and
     * each slice keeps the engine's host cores and threads */
    static const char gpu[] = "engines:\n  - {name: g, kind: cuda, cores: [1], threads: 1, "
                              "slices: 4}\nmodels:\n  - {path: p, engine: g}\n";
    hs_config_defaults(&c, NULL);
    if (hs_config_parse(gpu, sizeof gpu - 1, "t", &c, &err) || hs_config_validate(&c, &err))
        fail_msg("%s", err.msg);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(hs_config_slice(&c.engines[0], k, avail, 3, cores, &threads), 1);
        assert_int_equal(cores[0], 1);
        assert_int_equal(threads, 1);
    }
    hs_config_slice_name(&c.engines[0], 3, name, sizeof name);
    assert_string_equal(name, "g/3");
    static const char *const bad[][2] = {
        {"engines:\n  - {name: e, cores: [0, 1], slices: 3}\n",
         "engines[0].slices: 3 slices need at least 3 cores; engine 'e' has 2"},
        {"engines:\n  - {name: e, threads: 1, slices: 2}\n",
         "engines[0].slices: 1 threads cannot be split into 2 slices"},
        {"engines:\n  - {name: e, slices: 17}\n", "engines[0].slices: 17 is out of range"},
        {"engines:\n  - {name: e, kind: remote, endpoints: [\"h:1\"], slices: 2}\n",
         "engines[0].slices: engine 'e' is remote"},
        {"engines:\n  - {name: e, slices: 2}\n  - {name: e/1}\n",
         "engines[1].name: 'e/1' is also the name of a slice of engine 'e'"},
        {"engines:\n  - {name: a, slices: 2}\n  - {name: b}\n"
         "models:\n  - {path: p, placement: {modules: {attention: a, ffn: b}}}\n",
         "models[0].placement.modules.attention: engine 'a' has 2 slices"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_config_defaults(&c, NULL);
        hs_status st = hs_config_parse(bad[i][0], strlen(bad[i][0]), "f", &c, &err);
        if (!st) st = hs_config_validate(&c, &err);
        assert_int_equal(st, HS_STATUS_INVALID_INPUT);
        if (!strstr(err.msg, bad[i][1])) fail_msg("'%s' not in '%s'", bad[i][1], err.msg);
    }
}

/* Values set in code (command-line overrides) are held to the table's ranges and choices too. */
static void validate_checks_the_table(void **state)
{
    (void)state;
    struct hs_config c;
    struct hs_error err = {0};
    hs_config_defaults(&c, NULL);
    c.engines[0].threads = -5;
    assert_int_equal(hs_config_validate(&c, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "engines[0].threads: -5 is out of range"));
    hs_config_defaults(&c, NULL);
    c.scheduler.throughput_ewma_alpha = NAN;
    assert_int_equal(hs_config_validate(&c, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "scheduler.throughput_ewma_alpha"));
    hs_config_defaults(&c, NULL);
    c.n_routes = 1;
    snprintf(c.routes[0].name, sizeof c.routes[0].name, "r");
    snprintf(c.routes[0].kind, sizeof c.routes[0].kind, "fancy");
    assert_int_equal(hs_config_validate(&c, &err), HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "routes[0].kind: 'fancy'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(printed_defaults_parse_back),
        cmocka_unit_test(overrides),
        cmocka_unit_test(errors_name_the_key),
        cmocka_unit_test(routing_sections),
        cmocka_unit_test(cascade_section),
        cmocka_unit_test(every_key_round_trips),
        cmocka_unit_test(errors_name_file_line_and_path),
        cmocka_unit_test(engine_kind_device_dtype),
        cmocka_unit_test(lane_dtype_against_device_claims),
        cmocka_unit_test(validate_checks_the_table),
        cmocka_unit_test(engine_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
