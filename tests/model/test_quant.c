/* Quantization plans (model/quant.h): the search on a committed tiny model, the folder it writes
 * (quant.json + quant.safetensors) read back by hs_model_load and followed by int8 executors,
 * malformed plans refused with a reason, and — when the default model is installed — a
 * quantized all-MiniLM-L6-v2 that meets min cosine 0.99 / mean 0.998 against the golden
 * sentence-transformers embeddings. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/verify.h"

static bool have_int8(hs_engine_t e)
{
    struct hs_engine_caps c;
    hs_engine_caps(e, &c);
    if (c.dtypes & (1u << HS_DTYPE_I8)) return true;
    printf("test_quant: skipped: this CPU has no fast int8 path\n");
    return false;
}

/* Up to max lines of the committed calibration set; *n receives the count. */
static char **calib_lines(int max, int *n)
{
    size_t bytes = 0;
    char *text = hs_test_read_file(hs_test_path("data/calib/calib.txt"), &bytes);
    char **lines = calloc((size_t)max, sizeof(char *));
    int k = 0;
    for (char *p = strtok(text, "\n"); p && k < max; p = strtok(NULL, "\n")) lines[k++] = strdup(p);
    free(text);
    *n = k;
    return lines;
}

static void free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

static const char *tmp_dir(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/hs_test_quant_%d_%s", P_tmpdir, (int)getpid(), name);
    return buf;
}

static void rm_rf(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Embeds texts with model m on e at dtype; out [n, hidden]. */
static void embed(const struct hs_model *m, hs_engine_t e, enum hs_dtype dt, char **texts, int n,
                  float *out)
{
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_error err = {0};
    if (hs_executor_create(m, &plan, &(struct hs_executor_opts){.batch_max = 16, .dtype = dt}, &x,
                           &err))
        fail_msg("executor: %s", err.msg);
    if (hs_executor_embed_texts(x, (const char *const *)texts, n, out, NULL, &err))
        fail_msg("embed: %s", err.msg);
    hs_executor_free(x);
}

/* The searches' common start: a CPU engine (the test skips where it has no fast int8), the tiny
 * model and 36 calibration texts. */
static void tiny_setup(hs_engine_t *e, struct hs_model **m, char ***texts, int *n)
{
    struct hs_error err = {0};
    assert_int_equal(hs_engine_create("cpu", NULL, e, &err), 0);
    if (!have_int8(*e)) {
        hs_engine_destroy(*e);
        skip();
    }
    assert_int_equal(hs_model_load(hs_test_path("tests/data/tiny-bert-cls"), m, &err), 0);
    *texts = calib_lines(36, n);
    assert_int_equal(*n, 36);
}

static void search_write_load_tiny(void **state)
{
    (void)state;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    struct hs_model *m = NULL;
    char **texts = NULL;
    int n = 0;
    tiny_setup(&e, &m, &texts, &n);
    struct hs_quant_report *r = calloc(1, sizeof *r);
    struct hs_quant_opts qo = {.dtype = HS_DTYPE_I8, .cos_min = 0.999, .cos_mean = 0.9995};
    if (hs_quant_search(m, e, (const char *const *)texts, n, &qo, r, &err))
        fail_msg("search: %s", err.msg);
    assert_int_equal(r->n_calib + r->n_heldout, n);
    assert_int_equal(r->n_heldout, n / 3);
    assert_int_equal(r->n_stages, 2 * m->config.dims.layers);
    /* the plan moves stages to f32 only until the target holds: every kept stage is among the
     * most damaging, and the final agreement is never below the all-int8 one */
    int kept = 0;
    for (int i = 0; i < r->n_stages; i++) {
        assert_true(r->stages[i].damage_mean >= 0 && r->stages[i].damage_mean < 0.5);
        if (r->stages[i].keep_f32) kept++;
        assert_int_equal(r->plan.keep_f32[r->stages[i].index], r->stages[i].keep_f32);
    }
    assert_true(r->final_cos_mean >= r->all_cos_mean - 1e-9);
    if (r->target_met)
        assert_true(r->final_cos_min >= 0.999 && r->final_cos_mean >= 0.9995);
    else
        assert_int_equal(kept, r->n_stages);

    const char *dir = tmp_dir("tiny");
    rm_rf(dir);
    assert_int_equal(hs_quant_write(m, r, dir, &err), 0);
    /* an existing, non-empty folder is never overwritten */
    assert_int_equal(hs_quant_write(m, r, dir, &err), HS_STATUS_INVALID_ARGUMENT);

    struct hs_model *q = NULL;
    if (hs_model_load(dir, &q, &err)) fail_msg("load quantized: %s", err.msg);
    assert_non_null(q->quant);
    assert_int_equal(q->quant->dtype, HS_DTYPE_I8);
    for (int i = 0; i < q->n_stages; i++)
        assert_int_equal(q->quant->keep_f32[i], r->plan.keep_f32[i]);
    bool smoothed = false;
    for (int i = 0; i < q->n_stages; i++) smoothed |= q->stages[i].w[HS_W_SMOOTH].data != NULL;
    assert_int_equal(smoothed, r->smooth_alpha > 0);

    /* the loaded folder, in int8, gives what the search measured with its plan attached */
    const int H = m->config.dims.hidden;
    float *a = malloc(sizeof(float) * (size_t)n * H), *b = malloc(sizeof(float) * (size_t)n * H);
    embed(m, e, HS_DTYPE_I8, texts, n, a); /* m still carries the chosen smoothing */
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    memcpy(plan.keep_f32, r->plan.keep_f32, sizeof(bool) * (size_t)m->n_stages);
    struct hs_executor *x = NULL;
    assert_int_equal(hs_executor_create(m, &plan,
                                        &(struct hs_executor_opts){.batch_max = 16,
                                                                   .dtype = HS_DTYPE_I8,
                                                                   .no_quant_plan = true},
                                        &x, &err),
                     0);
    assert_int_equal(hs_executor_embed_texts(x, (const char *const *)texts, n, a, NULL, &err), 0);
    hs_executor_free(x);
    embed(q, e, HS_DTYPE_I8, texts, n, b);
    for (int i = 0; i < n * H; i++) assert_true(a[i] == b[i]);
    /* f32 lanes of the quantized folder ignore the plan: equal to the original model in f32 */
    embed(m, e, HS_DTYPE_F32, texts, n, a);
    embed(q, e, HS_DTYPE_F32, texts, n, b);
    for (int i = 0; i < n * H; i++) assert_true(a[i] == b[i]);

    free(a), free(b);
    hs_model_free(q);
    rm_rf(dir);
    hs_quant_report_clear(r);
    free(r);
    free_lines(texts, n);
    hs_model_free(m);
    hs_engine_destroy(e);
}

/* rank_lazily (serve's quantize: auto): where every stage in int8 meets the target, no stage is
 * ranked (damage not measured, written as null) and the plan keeps none in f32, the held-out
 * figures those of the ranked search; where it misses, the stages are ranked as without it. The
 * unranked plan's folder loads. */
static void lazy_ranking_only_when_needed(void **state)
{
    (void)state;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    struct hs_model *m = NULL;
    char **texts = NULL;
    int n = 0;
    tiny_setup(&e, &m, &texts, &n);
    struct hs_quant_report *ranked = calloc(1, sizeof *ranked), *lazy = calloc(1, sizeof *lazy);
    assert_true(ranked && lazy);
    struct hs_quant_opts qo = {.dtype = HS_DTYPE_I8, .cos_min = 0.5, .cos_mean = 0.5};
    assert_int_equal(hs_quant_search(m, e, (const char *const *)texts, n, &qo, ranked, &err), 0);
    qo.rank_lazily = true;
    assert_int_equal(hs_quant_search(m, e, (const char *const *)texts, n, &qo, lazy, &err), 0);
    assert_true(ranked->target_met && lazy->target_met);
    assert_true(lazy->all_cos_min == ranked->all_cos_min);
    assert_true(lazy->final_cos_mean == ranked->final_cos_mean);
    assert_int_equal(lazy->n_stages, ranked->n_stages);
    for (int i = 0; i < lazy->n_stages; i++) {
        assert_true(ranked->stages[i].damage_mean >= 0);
        assert_true(lazy->stages[i].damage_mean == -1.0 && lazy->stages[i].cos_min == -1.0);
        assert_string_equal(lazy->stages[i].name, ranked->stages[i].name);
        assert_false(lazy->stages[i].keep_f32);
    }
    const char *dir = tmp_dir("tiny-lazy");
    rm_rf(dir);
    assert_int_equal(hs_quant_write(m, lazy, dir, &err), 0);
    struct hs_model *q = NULL;
    if (hs_model_load(dir, &q, &err)) fail_msg("load the unranked plan: %s", err.msg);
    assert_non_null(q->quant);
    hs_model_free(q);
    rm_rf(dir);
    /* a target every stage in int8 misses: ranked all the same */
    hs_quant_report_clear(lazy);
    qo.cos_min = qo.cos_mean = 1.5;
    assert_int_equal(hs_quant_search(m, e, (const char *const *)texts, n, &qo, lazy, &err), 0);
    for (int i = 0; i < lazy->n_stages; i++) assert_true(lazy->stages[i].damage_mean >= 0);
    hs_quant_report_clear(ranked);
    hs_quant_report_clear(lazy);
    free(ranked);
    free(lazy);
    free_lines(texts, n);
    hs_model_free(m);
    hs_engine_destroy(e);
}

/* Quantization at load (hs_quant_auto) on a copy of the tiny model: the built-in calibration set
 * is the committed file; the plan is searched once and written into the (writable) folder, the
 * model then computes exactly what a later load of the folder computes, and that later load's
 * call reuses the plan without a search. */
static void quantize_at_load_tiny(void **state)
{
    (void)state;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_create("cpu", NULL, &e, &err), 0);
    if (!have_int8(e)) {
        hs_engine_destroy(e);
        skip();
    }
    char **builtin = NULL, **file = NULL;
    int nb = 0, nf = 0;
    assert_int_equal(hs_quant_calib_texts(NULL, &builtin, &nb, &err), 0);
    assert_int_equal(hs_quant_calib_texts(hs_test_path("data/calib/calib.txt"), &file, &nf, &err),
                     0);
    assert_true(nb > 100);
    assert_int_equal(nb, nf);
    for (int i = 0; i < nb; i++) assert_string_equal(builtin[i], file[i]);
    hs_quant_calib_free(file, nf);

    const char *dir = tmp_dir("auto");
    rm_rf(dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", hs_test_path("tests/data/tiny-bert-cls"), dir);
    assert_int_equal(system(cmd), 0);
    struct hs_model *m = NULL, *again = NULL;
    assert_int_equal(hs_model_load(dir, &m, &err), 0);
    assert_null(m->quant);
    struct hs_quant_auto_info info;
    if (hs_quant_auto(m, &(struct hs_quant_auto_opts){.dtype = HS_DTYPE_I8}, &info, &err))
        fail_msg("auto: %s", err.msg);
    assert_false(info.reused);
    assert_string_equal(info.dir, dir);
    assert_true(info.seconds > 0 && info.n_linear == 2 * m->config.dims.layers);
    assert_non_null(m->quant);
    assert_int_equal(m->quant->dtype, HS_DTYPE_I8);
    char path[1024];
    snprintf(path, sizeof path, "%s/quant.json", dir);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp\\.'", dir);
    assert_int_not_equal(system(cmd), 0); /* no temporary left */

    assert_int_equal(hs_model_load(dir, &again, &err), 0);
    assert_non_null(again->quant);
    if (hs_quant_auto(again, &(struct hs_quant_auto_opts){.dtype = HS_DTYPE_I8}, &info, &err))
        fail_msg("auto again: %s", err.msg);
    assert_true(info.reused);
    for (int i = 0; i < m->n_stages; i++)
        assert_int_equal(m->quant->keep_f32[i], again->quant->keep_f32[i]);
    const int H = m->config.dims.hidden, n = 24;
    float *a = malloc(sizeof(float) * (size_t)n * H), *b = malloc(sizeof(float) * (size_t)n * H);
    embed(m, e, HS_DTYPE_I8, builtin, n, a);
    embed(again, e, HS_DTYPE_I8, builtin, n, b);
    for (int i = 0; i < n * H; i++) assert_true(a[i] == b[i]);
    free(a), free(b);
    hs_model_free(again);
    hs_model_free(m);
    hs_quant_calib_free(builtin, nb);
    rm_rf(dir);
    hs_engine_destroy(e);
}

/* A quantized folder with its quant.json replaced by text. */
static void expect_bad_plan(const char *src_dir, const char *json, const char *needle)
{
    const char *dir = tmp_dir("bad");
    rm_rf(dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src_dir, dir);
    assert_int_equal(system(cmd), 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/quant.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    struct hs_model *m = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_model_load(dir, &m, &err), HS_STATUS_CORRUPT);
    assert_null(m);
    if (!strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
    rm_rf(dir);
}

static void malformed_plans_are_refused(void **state)
{
    (void)state;
    const char *src = hs_test_path("tests/data/tiny-bert-cls");
    char srcdir[1024];
    snprintf(srcdir, sizeof srcdir, "%s", src);
    expect_bad_plan(srcdir, "{not json", "quant.json:1");
    expect_bad_plan(srcdir, "{\"format\": \"other\", \"version\": 1}", "not a hetserve-quant");
    expect_bad_plan(srcdir,
                    "{\"format\": \"hetserve-quant\", \"version\": 1, \"dtype\": \"f32\", "
                    "\"keep_f32\": []}",
                    "reduced");
    expect_bad_plan(srcdir,
                    "{\"format\": \"hetserve-quant\", \"version\": 1, \"dtype\": \"int8\", "
                    "\"keep_f32\": [\"layer99.ffn\"]}",
                    "keep_f32[0] is not a stage");
    expect_bad_plan(srcdir,
                    "{\"format\": \"hetserve-quant\", \"version\": 1, \"dtype\": \"int8\", "
                    "\"keep_f32\": \"layer0.ffn\"}",
                    "keep_f32 must be a list");
}

/* The default model, quantized with the committed calibration set, against the golden
 * sentence-transformers embeddings: the target. */
static void quantized_minilm_meets_golden_target(void **state)
{
    (void)state;
    const char *mdir = hs_test_model_dir();
    struct stat sb;
    if (stat(mdir, &sb) != 0) {
        printf("test_quant: skipped: no model at %s\n", mdir);
        skip();
    }
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_create("cpu", NULL, &e, &err), 0);
    if (!have_int8(e)) {
        hs_engine_destroy(e);
        skip();
    }
    struct hs_model *m = NULL;
    assert_int_equal(hs_model_load(mdir, &m, &err), 0);
    int n = 0;
    char **lines = calib_lines(1024, &n);
    struct hs_quant_report *r = calloc(1, sizeof *r);
    if (hs_quant_search(m, e, (const char *const *)lines, n, NULL, r, &err))
        fail_msg("search: %s", err.msg);
    assert_true(r->target_met);
    /* the plan applied to a fresh load of the same weights is what the golden set sees */
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    memcpy(plan.keep_f32, r->plan.keep_f32, sizeof(bool) * (size_t)m->n_stages);
    struct hs_golden *g = NULL;
    assert_int_equal(hs_golden_load_dir(hs_test_path("tests/golden"), &g, &err), 0);
    struct hs_verify_report rep;
    /* hs_verify_engine builds a single-engine plan: give the model the plan as its own */
    struct hs_quant_plan qp = r->plan;
    m->quant = &qp;
    assert_int_equal(hs_verify_engine(m, e, HS_DTYPE_I8, g, NULL, NULL, &rep, &err), 0);
    m->quant = NULL;
    int kept = 0;
    for (int i = 0; i < m->n_stages; i++) kept += r->plan.keep_f32[i];
    printf("quantized all-MiniLM-L6-v2 (alpha %.2f, %d stage(s) f32) vs golden: min %.6f mean "
           "%.6f\n",
           r->smooth_alpha, kept, rep.cos_min, rep.cos_mean);
    if (!(rep.cos_min >= 0.99 && rep.cos_mean >= 0.998))
        fail_msg("golden: min %.6f mean %.6f, target 0.99 / 0.998", rep.cos_min, rep.cos_mean);
    hs_golden_free(g);
    hs_quant_report_clear(r);
    free(r);
    free_lines(lines, n);
    hs_model_free(m);
    hs_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(search_write_load_tiny),
        cmocka_unit_test(lazy_ranking_only_when_needed),
        cmocka_unit_test(quantize_at_load_tiny),
        cmocka_unit_test(malformed_plans_are_refused),
        cmocka_unit_test(quantized_minilm_meets_golden_target),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
