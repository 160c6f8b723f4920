/* The memory plan (server/memplan.h): the default configuration fits; an engine limit too small
 * is refused with the numbers, by the plan and by hs_server_create before anything loads; shared
 * preparations are counted once; a model whose files are missing is left out with a note. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "server/config.h"
#include "server/memplan.h"
#include "server/server.h"

static bool have_model(void)
{
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/config.json", hs_test_model_dir());
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("test_memplan: skipped: no model at %s (make setup)\n", hs_test_model_dir());
        return false;
    }
    fclose(f);
    return true;
}

static void default_config_fits(void **state)
{
    (void)state;
    if (!have_model()) skip();
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_mem_plan *p = hs_malloc(sizeof *p);
    struct hs_error err = {0};
    hs_config_defaults(c, hs_test_model_dir());
    assert_int_equal(hs_mem_plan_make(c, p, &err), HS_STATUS_OK);
    assert_true(p->fits);
    assert_int_equal(hs_mem_plan_check(p, &err), HS_STATUS_OK);
    assert_int_equal(p->n_engines, 1);
    const struct hs_mem_engine *e = &p->engines[0];
    assert_string_equal(e->name, "cpu0");
    assert_int_equal(e->n_lanes, 1);
    assert_true(e->weights_bytes > 0 && e->activation_bytes > 0);
    /* MiniLM at the default limits (32 x 256, 8192 tokens): hidden, q/k/v, the 1536-wide
     * intermediate, the second hidden: (384 + 1152 + 1536 + 384) floats per token, ~108 MB */
    assert_true(e->activation_bytes > 100 * 1000 * 1000 && e->activation_bytes < 120 * 1000 * 1000);
    assert_int_equal(e->need_bytes, e->weights_bytes + e->activation_bytes + e->workspace_bytes +
                                        e->runtime_bytes + e->margin_bytes);
    assert_non_null(strstr(e->shape, "32 x 256 (8192 tokens) x 1 slot"));
    /* the host maps the model file once */
    assert_string_equal(p->devices[0].kind, "cpu");
    assert_true(p->devices[0].mapped_bytes > 80 * 1000 * 1000);
    assert_true(p->devices[0].have_bytes > 0);
    hs_free(p);
    hs_free(c);
}

static void tiny_limit_is_refused(void **state)
{
    (void)state;
    if (!have_model()) skip();
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_mem_plan *p = hs_malloc(sizeof *p);
    struct hs_error err = {0};
    hs_config_defaults(c, hs_test_model_dir());
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "engines:\n"
             "  - {name: small, kind: cpu, threads: 1, slots: 2, memory_mb: 64}\n"
             "models:\n"
             "  - {path: \"%s\"}\n"
             "limits: {memory_margin_ratio: 0.2}\n",
             hs_test_model_dir());
    if (hs_config_parse(yaml, strlen(yaml), "t.yaml", c, &err)) fail_msg("%s", err.msg);
    if (hs_config_validate(c, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c->engines[0].memory_mb, 64);
    assert_int_equal(hs_mem_plan_make(c, p, &err), HS_STATUS_OK);
    assert_false(p->fits);
    assert_int_equal(hs_mem_plan_check(p, &err), HS_STATUS_INVALID_INPUT);
    /* the refusal carries the numbers */
    const char *want[] = {
        "engine small needs", "weights",     "activations",   "at 32 x 256 (8192 tokens) x 2 slots",
        "workspace",          "margin 20 %", "but has 64 MB", "memory_mb 64"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(err.msg, want[i])) fail_msg("'%s' not in: %s", want[i], err.msg);

    /* and the server refuses it before any engine or weight: nothing is left allocated */
    struct hs_server *s = NULL;
    const int64_t live = hs_alloc_live();
    hs_error_clear(&err);
    assert_int_equal(hs_server_create(c, &s, &err), HS_STATUS_INVALID_INPUT);
    assert_null(s);
    assert_non_null(strstr(err.msg, "memory plan: engine small needs"));
    assert_int_equal(hs_alloc_live(), live);
    hs_free(p);
    hs_free(c);
}

static void shared_preparations_count_once(void **state)
{
    (void)state;
    if (!have_model()) skip();
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_mem_plan *p = hs_malloc(sizeof *p);
    struct hs_error err = {0};
    hs_config_defaults(c, hs_test_model_dir());
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "engines:\n"
             "  - {name: a, kind: cpu, threads: 1}\n"
             "  - {name: b, kind: cpu, threads: 1}\n"
             "  - {name: c, kind: cpu, threads: 1, dtype: bf16}\n"
             "models:\n"
             "  - {path: \"%s\", engines: [a, b, c]}\n",
             hs_test_model_dir());
    if (hs_config_parse(yaml, strlen(yaml), "t.yaml", c, &err)) fail_msg("%s", err.msg);
    if (hs_config_validate(c, &err)) fail_msg("%s", err.msg);
    assert_int_equal(hs_mem_plan_make(c, p, &err), HS_STATUS_OK);
    assert_int_equal(p->n_engines, 3);
    /* a makes the f32 preparations, b shares them, c makes its bf16 ones */
    assert_true(p->engines[0].weights_bytes > 0);
    assert_int_equal(p->engines[0].shared_bytes, 0);
    assert_int_equal(p->engines[1].weights_bytes, 0);
    assert_int_equal(p->engines[1].shared_bytes, p->engines[0].weights_bytes);
    /* its own (bf16 halves the packed copies, but a CPU without the f32 small-M panels packs
     * nothing in f32, so which is larger depends on the CPU) */
    assert_true(p->engines[2].weights_bytes > 0);
    assert_int_equal(p->engines[2].shared_bytes, 0);
    /* the three share one host */
    assert_int_equal(p->n_devices, 1);
    assert_int_equal(p->devices[0].engines_bytes, p->engines[0].need_bytes +
                                                      p->engines[1].need_bytes +
                                                      p->engines[2].need_bytes);
    hs_free(p);
    hs_free(c);
}

static void missing_model_is_a_note(void **state)
{
    (void)state;
    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_mem_plan *p = hs_malloc(sizeof *p);
    struct hs_error err = {0};
    hs_config_defaults(c, "/nonexistent/model");
    assert_int_equal(hs_mem_plan_make(c, p, &err), HS_STATUS_OK);
    assert_true(p->fits);
    assert_int_equal(p->n_notes, 1);
    assert_non_null(strstr(p->notes[0], "/nonexistent/model"));
    assert_int_equal(p->engines[0].n_lanes, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hs_mem_plan_print(p, f, "> ");
    fclose(f);
    assert_non_null(strstr(text, "> memory plan (margin 10 %):"));
    assert_non_null(strstr(text, "note: model /nonexistent/model left out"));
    free(text);
    hs_free(p);
    hs_free(c);
}

static void bytes_for_people(void **state)
{
    (void)state;
    char b[24];
    hs_mem_bytes_str(87LL * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "87 MB");
    hs_mem_bytes_str(1946LL * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "1.9 GB");
    hs_mem_bytes_str(3LL * 1024 * 1024 / 2, b, sizeof b);
    assert_string_equal(b, "1.5 MB");
    hs_mem_bytes_str(84 * 1024, b, sizeof b);
    assert_string_equal(b, "84 KB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_config_fits),
        cmocka_unit_test(tiny_limit_is_refused),
        cmocka_unit_test(shared_preparations_count_once),
        cmocka_unit_test(missing_model_is_a_note),
        cmocka_unit_test(bytes_for_people),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
