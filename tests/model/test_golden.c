/* End to end against the reference implementation (sentence-transformers, fp32): the golden
 * sentences of tests/golden/ through our tokenizer and the CPU engine, for all-MiniLM-L6-v2
 * (mean pooling, 6 layers, F32 weights, texts past the 256-token limit, Chinese, emoji, ...) and
 * for the tiny test model in tests/data/tiny-bert-cls (CLS pooling, 12 layers, F16 weights). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/verify.h"

/* Our tokenizer gives the reference's ids for every golden sentence (truncated at the model's
 * limit as sentence-transformers does). */
static void check_tokens(const struct hs_model *m, const struct hs_golden *g)
{
    int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)m->config.max_seq_len);
    for (int i = 0; i < g->count; i++) {
        int n = 0;
        assert_int_equal(
            hs_model_tokenize(m, g->sentences[i], g->text_bytes[i], ids, 0, &n, NULL, NULL), 0);
        assert_non_null(g->ids);
        if (n != g->n_ids[i] || memcmp(ids, g->ids[i], sizeof(int32_t) * (size_t)n) != 0)
            fail_msg("sentence %d: token ids differ from the reference (%d vs %d ids)", i, n,
                     g->n_ids[i]);
    }
    hs_free(ids);
}

/* Embeds the golden sentences through the tokenizer and the CPU engine, in batches of mixed
 * lengths, and compares each with the reference. */
static void check_embeddings(const struct hs_model *m, const struct hs_golden *g, int threads)
{
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = threads}, &e, &err),
                     0);
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = 16};
    if (hs_executor_create(m, &plan, &xo, &x, &err)) fail_msg("%s", err.msg);
    const int dim = m->config.dims.hidden;
    float *out = hs_malloc(sizeof(float) * (size_t)dim * (size_t)g->count);
    /* hs_executor_embed_texts takes C strings: a sentence with a NUL byte is run on its own */
    const char **texts = hs_malloc(sizeof(char *) * (size_t)g->count);
    for (int i = 0; i < g->count; i++) texts[i] = g->sentences[i];
    if (hs_executor_embed_texts(x, texts, g->count, out, NULL, &err)) fail_msg("%s", err.msg);
    double worst = 2.0, sum = 0.0;
    int worst_i = -1, compared = 0;
    for (int i = 0; i < g->count; i++) {
        if (strlen(g->sentences[i]) != g->text_bytes[i]) continue; /* covered by the ids path */
        double c = hs_verify_cosine(out + (size_t)i * dim, g->emb + (size_t)i * dim, dim);
        sum += c;
        compared++;
        if (c < worst) worst = c, worst_i = i;
    }
    printf("# %s on %d thread(s): %d sentences, min cosine %.8f (sentence %d), mean %.8f\n",
           m->name, threads, compared, worst, worst_i, sum / compared);
    assert_true(compared >= g->count - 5);
    if (worst < 0.99999) fail_msg("sentence %d: cosine %.8f < 0.99999", worst_i, worst);
    /* the golden token ids path as well (covers the sentences with NUL bytes) */
    struct hs_verify_tolerance tol = {.cos_min = 0.99999, .cos_mean = 0.999999};
    struct hs_verify_report rep;
    if (hs_verify_engine(m, e, HS_DTYPE_F32, g, &tol, NULL, &rep, &err)) fail_msg("%s", err.msg);
    assert_true(rep.pass);
    hs_free(texts);
    hs_free(out);
    hs_executor_free(x);
    hs_engine_destroy(e);
}

static void minilm_matches_sentence_transformers(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(hs_test_model_dir(), &m, &err)) fail_msg("%s", err.msg);
    if (hs_golden_load_dir(hs_test_path("tests/golden"), &g, &err)) fail_msg("%s", err.msg);
    assert_true(g->count >= 200);
    assert_int_equal(g->dim, m->config.dims.hidden);
    int at_limit = 0;
    for (int i = 0; i < g->count; i++) at_limit += g->n_ids[i] == m->config.max_seq_len;
    assert_true(at_limit >= 10); /* sequences at the max length are part of the check */
    check_tokens(m, g);
    check_embeddings(m, g, 2);
    hs_golden_free(g);
    hs_model_free(m);
}

static void tiny_cls_f16_matches_sentence_transformers(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(hs_test_path("tests/data/tiny-bert-cls"), &m, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m->config.dims.pool, HS_POOL_CLS);
    assert_int_equal(m->config.dims.layers, 12);
    assert_int_equal(m->stages[1].w[HS_W_Q].dtype, HS_DTYPE_F16);
    char json[1024], f32[1024];
    snprintf(json, sizeof json, "%s", hs_test_path("tests/golden/tiny_cls.json"));
    snprintf(f32, sizeof f32, "%s", hs_test_path("tests/golden/tiny_cls.f32"));
    if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
    check_tokens(m, g);
    check_embeddings(m, g, 1);
    hs_golden_free(g);
    hs_model_free(m);
}

/* A golden set named by its .json (hetserve verify --golden tests/golden/tiny_cls.json): the
 * .f32 of the same name beside it, the same set as the two paths give; a .json without its .f32
 * is refused, naming the .f32. */
static void golden_set_by_file_name(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_golden *a = NULL, *b = NULL;
    char json[1024], f32[1024];
    snprintf(json, sizeof json, "%s", hs_test_path("tests/golden/tiny_cls.json"));
    snprintf(f32, sizeof f32, "%s", hs_test_path("tests/golden/tiny_cls.f32"));
    if (hs_golden_load(json, f32, &a, &err)) fail_msg("%s", err.msg);
    if (hs_golden_load_dir(json, &b, &err)) fail_msg("%s", err.msg);
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->dim, b->dim);
    assert_memory_equal(a->emb, b->emb, sizeof(float) * (size_t)a->count * (size_t)a->dim);
    hs_golden_free(a);
    hs_golden_free(b);
    static const char text[] = "{\"count\": 1, \"dim\": 2, \"sentences\": [\"a\"]}";
    const char *lone = hs_test_write_temp(text, sizeof text - 1, ".json");
    b = NULL;
    assert_int_not_equal(hs_golden_load_dir(lone, &b, &err), HS_STATUS_OK);
    assert_null(b);
    char want[1024];
    snprintf(want, sizeof want, "%.*s.f32", (int)(strlen(lone) - 5), lone);
    if (!strstr(err.msg, want)) fail_msg("message '%s' does not name %s", err.msg, want);
    unlink(lone);
}

/* The MPNet path in CI: tests/data/tiny-mpnet (random, F16, 3 layers, relative-position bias
 * drawn large so that a wrong bucket or a missing bias fails the 0.99999 bound). */
static void tiny_mpnet_matches_sentence_transformers(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(hs_test_path("tests/data/tiny-mpnet"), &m, &err)) fail_msg("%s", err.msg);
    assert_string_equal(m->config.model_type, "mpnet");
    assert_int_equal(m->config.max_seq_len, 128);
    assert_non_null(m->stages[1].w[HS_W_REL_BIAS].data);
    assert_null(m->stages[0].w[HS_W_TYPE_EMB].data);
    char json[1024], f32[1024];
    snprintf(json, sizeof json, "%s", hs_test_path("tests/golden/tiny_mpnet.json"));
    snprintf(f32, sizeof f32, "%s", hs_test_path("tests/golden/tiny_mpnet.f32"));
    if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
    check_tokens(m, g);
    check_embeddings(m, g, 2);
    hs_golden_free(g);
    hs_model_free(m);
}

/* all-mpnet-base-v2 (12 layers, 768 wide, relative-position attention bias, <s>/</s> specials,
 * positions from 2, 384-token limit): 58 golden texts, 11 of them truncated. The model folder is
 * ~440 MB and installed only by `scripts/setup --models all`; without it the test is skipped
 * with a line saying so. */
static void mpnet_matches_sentence_transformers(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    const char *env = getenv("HS_MPNET_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", env && *env ? env : hs_test_path("models/all-mpnet-base-v2"));
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/model.safetensors", dir);
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("# SKIP mpnet golden: %s not found (install it with scripts/setup --models all)\n",
               probe);
        skip();
    }
    fclose(f);
    if (hs_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
    assert_string_equal(m->config.model_type, "mpnet");
    assert_int_equal(m->config.dims.pos_offset, 2);
    assert_int_equal(m->config.dims.rel_buckets, 32);
    assert_int_equal(m->config.max_seq_len, 384);
    assert_int_equal(hs_tokenizer_cls_id(m->tokenizer), 0);
    assert_int_equal(hs_tokenizer_sep_id(m->tokenizer), 2);
    assert_int_equal(hs_tokenizer_pad_id(m->tokenizer), 1);
    char json[1024], f32[1024];
    snprintf(json, sizeof json, "%s", hs_test_path("tests/golden/mpnet.json"));
    snprintf(f32, sizeof f32, "%s", hs_test_path("tests/golden/mpnet.f32"));
    if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
    assert_true(g->count >= 50);
    assert_int_equal(g->dim, 768);
    check_tokens(m, g);
    check_embeddings(m, g, 2);
    hs_golden_free(g);
    hs_model_free(m);
}

/* The OpenVINO engine plugin (engine/plugin.h) on the golden sets through its own graph:
 * all-MiniLM-L6-v2, tiny-bert-cls (F16 weights, CLS pooling) and tiny-mpnet (relative-position
 * bias), in f32, min cosine 0.99999 like the CPU engine. Skipped, with one line, where the plugin
 * is not built or the runtime reports no device. */
static void openvino_matches_sentence_transformers(void **state)
{
    (void)state;
    const struct hs_engine_kind *k = hs_engine_kind_find("openvino");
    if (!hs_engine_kind_built(k) || hs_engine_kind_devices(k) == 0) {
        printf("# SKIP openvino golden: the OpenVINO engine plugin is %s\n",
               hs_engine_kind_built(k) ? "built but sees no device" : "not built");
        skip();
    }
    static const struct {
        const char *model, *json, *f32;
    } sets[] = {
        {NULL, "tests/golden/embeddings.json", "tests/golden/embeddings.f32"},
        {"tests/data/tiny-bert-cls", "tests/golden/tiny_cls.json", "tests/golden/tiny_cls.f32"},
        {"tests/data/tiny-mpnet", "tests/golden/tiny_mpnet.json", "tests/golden/tiny_mpnet.f32"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        struct hs_error err = {0};
        struct hs_model *m = NULL;
        struct hs_golden *g = NULL;
        const char *dir = sets[i].model ? hs_test_path(sets[i].model) : hs_test_model_dir();
        if (hs_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
        char json[1024], f32[1024];
        snprintf(json, sizeof json, "%s", hs_test_path(sets[i].json));
        snprintf(f32, sizeof f32, "%s", hs_test_path(sets[i].f32));
        if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
        hs_engine_t e = NULL;
        if (hs_engine_create("openvino", &(struct hs_engine_opts){.threads = 2}, &e, &err))
            fail_msg("%s", err.msg);
        struct hs_verify_tolerance tol = {.cos_min = 0.99999, .cos_mean = 0.999999};
        struct hs_verify_report rep;
        if (hs_verify_engine(m, e, HS_DTYPE_F32, g, &tol, NULL, &rep, &err))
            fail_msg("%s: %s", m->name, err.msg);
        printf("# openvino f32 %s: %d sentences, min cosine %.8f, mean %.8f\n", m->name, rep.count,
               rep.cos_min, rep.cos_mean);
        assert_true(rep.pass);
        hs_engine_destroy(e);
        hs_golden_free(g);
        hs_model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_cls_f16_matches_sentence_transformers),
        cmocka_unit_test(golden_set_by_file_name),
        cmocka_unit_test(minilm_matches_sentence_transformers),
        cmocka_unit_test(tiny_mpnet_matches_sentence_transformers),
        cmocka_unit_test(mpnet_matches_sentence_transformers),
        cmocka_unit_test(openvino_matches_sentence_transformers),
    };
    return cmocka_run_group_tests_name("golden", tests, NULL, NULL);
}
