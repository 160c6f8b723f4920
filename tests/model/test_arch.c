/* The architecture table: every family's tiny checkpoint (tests/data/tiny-<family>, random
 * weights, made by tools/golden/make_tiny_<family>.py) through the CPU engine against the
 * transformers reference on the golden token ids (tests/golden/tiny_<family>.*): f32 min cosine
 * >= 0.99999, and the reduced dtypes the engine computes in against their declared tolerances.
 * Also: the table's lookups, and an engine without a block feature refusing a stage that needs
 * it with the feature named. */
#include "testutil.h"
#include "tiny_families.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/verify.h"
#include "model/weights.h"

static uint32_t model_features(const struct hs_model *m)
{
    uint32_t f = 0;
    for (int i = 0; i < m->n_stages; i++) f |= hs_stage_features(&m->stages[i]);
    return f;
}

static void check_family(const struct tiny_family *fam)
{
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(hs_test_path(fam->dir), &m, &err)) fail_msg("%s: %s", fam->dir, err.msg);
    assert_non_null(m->config.arch);
    assert_string_equal(m->config.arch->model_type, fam->arch);
    if (model_features(m) != fam->features)
        fail_msg("%s: stages need features 0x%x, expected 0x%x", fam->dir, model_features(m),
                 fam->features);
    char rel[256], json[1024], f32[1024];
    snprintf(rel, sizeof rel, "tests/golden/%s.json", fam->golden);
    snprintf(json, sizeof json, "%s", hs_test_path(rel));
    snprintf(rel, sizeof rel, "tests/golden/%s.f32", fam->golden);
    snprintf(f32, sizeof f32, "%s", hs_test_path(rel));
    if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
    assert_non_null(g->ids);

    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = 2}, &e, &err), 0);
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    static const enum hs_dtype dtypes[] = {HS_DTYPE_F32, HS_DTYPE_BF16, HS_DTYPE_I8};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        if (!(caps.dtypes & (1u << dtypes[i]))) {
            printf("# %s %s: not computed by this CPU, skipped\n", m->name,
                   hs_compute_dtype_name(dtypes[i]));
            continue;
        }
        struct hs_verify_tolerance tol;
        hs_verify_default_tolerance(dtypes[i], &tol);
        if (dtypes[i] == HS_DTYPE_F32) tol = (struct hs_verify_tolerance){0.99999, 0.99999};
        struct hs_verify_report rep;
        if (hs_verify_engine(m, e, dtypes[i], g, &tol, &(struct hs_verify_opts){.batch_max = 4},
                             &rep, &err))
            fail_msg("%s %s: %s", m->name, hs_compute_dtype_name(dtypes[i]), err.msg);
        printf("# %s %s: %d sequences, min cosine %.8f (1 - min %.1e, sequence %d), mean %.8f\n",
               m->name, hs_compute_dtype_name(dtypes[i]), rep.count, rep.cos_min, 1.0 - rep.cos_min,
               rep.worst, rep.cos_mean);
        if (!rep.pass)
            fail_msg("%s %s: min %.8f mean %.8f below %.6f / %.6f", m->name,
                     hs_compute_dtype_name(dtypes[i]), rep.cos_min, rep.cos_mean, tol.cos_min,
                     tol.cos_mean);
    }
    hs_engine_destroy(e);
    hs_golden_free(g);
    hs_model_free(m);
}

/* Every other local engine kind present (OpenVINO; CUDA where a GPU is): a family whose block
 * features it declares matches the reference in f32 within the engine's declared tolerance;
 * one it cannot run is refused at prepare, the missing features named. */
static void check_other_engines(const struct tiny_family *fam)
{
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(hs_test_path(fam->dir), &m, &err)) fail_msg("%s", err.msg);
    char rel[256], json[1024], f32[1024];
    snprintf(rel, sizeof rel, "tests/golden/%s.json", fam->golden);
    snprintf(json, sizeof json, "%s", hs_test_path(rel));
    snprintf(rel, sizeof rel, "tests/golden/%s.f32", fam->golden);
    snprintf(f32, sizeof f32, "%s", hs_test_path(rel));
    if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
    for (int k = 0; k < hs_engine_kind_count(); k++) {
        const struct hs_engine_kind *kind = hs_engine_kind_at(k);
        if (kind->remote || !strcmp(kind->name, "cpu") || !hs_engine_kind_built(kind) ||
            hs_engine_kind_devices(kind) < 1)
            continue;
        hs_engine_t e = NULL;
        if (hs_engine_create(kind->name, &(struct hs_engine_opts){0}, &e, &err)) {
            printf("# %s: no engine (%s), skipped\n", kind->name, err.msg);
            continue;
        }
        struct hs_engine_caps caps;
        hs_engine_caps(e, &caps);
        const enum hs_dtype dt = kind->native;
        struct hs_verify_report rep;
        err = (struct hs_error){0};
        hs_status s = hs_verify_engine(m, e, dt, g, NULL, NULL, &rep, &err);
        if ((fam->features & ~caps.features) == 0) {
            if (s) fail_msg("%s on %s: %s", m->name, kind->name, err.msg);
            printf("# %s %s %s: min cosine %.8f (1 - min %.1e), mean %.8f\n", m->name, kind->name,
                   hs_compute_dtype_name(dt), rep.cos_min, 1.0 - rep.cos_min, rep.cos_mean);
            assert_true(rep.pass);
        } else {
            assert_int_equal(s, HS_STATUS_UNSUPPORTED);
            assert_non_null(strstr(err.msg, "does not implement"));
            printf("# %s %s: refused (%s)\n", m->name, kind->name, err.msg);
        }
        hs_engine_destroy(e);
    }
    hs_golden_free(g);
    hs_model_free(m);
}

static void other_engines_run_or_refuse(void **state)
{
    (void)state;
    for (int i = 0; i < N_TINY_FAMILIES; i++) check_other_engines(&tiny_families[i]);
}

static void families_match_transformers(void **state)
{
    (void)state;
    for (int i = 0; i < N_TINY_FAMILIES; i++) check_family(&tiny_families[i]);
}

static void table_lookups(void **state)
{
    (void)state;
    assert_true(hs_arch_count() >= 4);
    assert_string_equal(hs_arch_find("camembert")->model_type, "roberta");
    assert_string_equal(hs_arch_find("xlm-roberta")->model_type, "roberta");
    assert_null(hs_arch_find("gpt2"));
    assert_null(hs_arch_find(NULL));
    char names[512];
    hs_arch_names(names, sizeof names);
    for (int i = 0; i < hs_arch_count(); i++) {
        const struct hs_arch *a = hs_arch_at(i);
        assert_ptr_equal(hs_arch_find(a->model_type), a);
        assert_non_null(strstr(names, a->model_type));
        assert_true(a->n_tensors > 0 && a->prefixes && a->prefixes[0]);
    }
    assert_null(hs_arch_at(hs_arch_count()));
    char small[8];
    hs_arch_names(small, sizeof small); /* truncates, stays terminated */
    assert_true(strlen(small) < sizeof small);
    char f[256];
    hs_stage_features_str(HS_FEAT_ROTARY | HS_FEAT_GATED_FFN, f, sizeof f);
    assert_string_equal(f, "rotary positions, gated FFN");
}

/* Each family's config keys, and the variants it does not run refused with the reason. */
static void family_configs(void **state)
{
    (void)state;
    static const char *const nomic = "{\"model_type\":\"nomic_bert\",\"n_embd\":64,\"n_layer\":2,"
                                     "\"n_head\":4,\"n_inner\":96,\"n_positions\":64,"
                                     "\"vocab_size\":100,\"rotary_emb_fraction\":0.5,"
                                     "\"mlp_fc1_bias\":false%s}";
    static const char *const gte = "{\"model_type\":\"new\",\"hidden_size\":32,"
                                   "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                                   "\"intermediate_size\":48,\"max_position_embeddings\":64,"
                                   "\"vocab_size\":100%s}";
    static const char *const mb = "{\"model_type\":\"modernbert\",\"hidden_size\":32,"
                                  "\"num_hidden_layers\":4,\"num_attention_heads\":4,"
                                  "\"intermediate_size\":48,\"max_position_embeddings\":64,"
                                  "\"vocab_size\":100%s}";
    static const char *const qw = "{\"model_type\":\"qwen3\",\"hidden_size\":32,"
                                  "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                                  "\"intermediate_size\":48,\"max_position_embeddings\":64,"
                                  "\"vocab_size\":100%s}";
    static const struct {
        const char *fmt, *extra;
        hs_status want;
        const char *says; /* a piece of the message (errors) */
    } cases[] = {
        {nomic, "", HS_STATUS_OK, NULL},
        {nomic, ",\"rotary_emb_interleaved\":true", HS_STATUS_UNSUPPORTED, "interleaved"},
        {nomic, ",\"prenorm\":true", HS_STATUS_UNSUPPORTED, "prenorm"},
        {nomic, ",\"rotary_scaling_factor\":2.0", HS_STATUS_UNSUPPORTED, "rotary_scaling_factor"},
        {nomic, ",\"activation_function\":\"relu\"", HS_STATUS_UNSUPPORTED, "swiglu"},
        {"{\"model_type\":\"nomic_bert\",\"n_embd\":64,\"n_layer\":2,\"n_head\":4,"
         "\"n_inner\":96,\"n_positions\":64,\"vocab_size\":100,\"rotary_emb_fraction\":0.5}",
         "", HS_STATUS_UNSUPPORTED, "mlp_fc1_bias"},
        {"{\"model_type\":\"nomic_bert\",\"n_embd\":64,\"n_layer\":2,\"n_head\":4,"
         "\"n_inner\":96,\"n_positions\":64,\"vocab_size\":100,\"rotary_emb_fraction\":1.5,"
         "\"mlp_fc1_bias\":false}",
         "", HS_STATUS_UNSUPPORTED, "rotary fraction"},
        {gte, "", HS_STATUS_OK, NULL},
        {gte, ",\"rope_scaling\":{\"type\":\"ntk\",\"factor\":2.0}", HS_STATUS_OK, NULL},
        {gte, ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}", HS_STATUS_UNSUPPORTED,
         "dynamic"},
        {gte, ",\"logn_attention_scale\":true", HS_STATUS_UNSUPPORTED, "logn"},
        {gte, ",\"position_embedding_type\":\"absolute\"", HS_STATUS_UNSUPPORTED, "rope"},
        {mb, "", HS_STATUS_OK, NULL},
        {mb,
         ",\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\","
         "\"sliding_attention\"]",
         HS_STATUS_OK, NULL},
        {mb,
         ",\"layer_types\":[\"full_attention\",\"sliding_attention\",\"sliding_attention\","
         "\"full_attention\",\"full_attention\"]",
         HS_STATUS_CORRUPT, "one type per layer"},
        {mb,
         ",\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\","
         "\"full_attention\"]",
         HS_STATUS_UNSUPPORTED, "global layer every N"},
        {mb, ",\"mlp_bias\":true", HS_STATUS_UNSUPPORTED, "mlp_bias"},
        {qw, ",\"num_key_value_heads\":2,\"head_dim\":16", HS_STATUS_OK, NULL},
        {qw, ",\"num_key_value_heads\":3", HS_STATUS_CORRUPT, "num_key_value_heads"},
        {qw, ",\"use_sliding_window\":true", HS_STATUS_UNSUPPORTED, "use_sliding_window"},
        {qw, ",\"rope_scaling\":{\"type\":\"yarn\"}", HS_STATUS_UNSUPPORTED, "rope_scaling"},
        {qw, ",\"rope_parameters\":{\"rope_type\":\"yarn\"}", HS_STATUS_UNSUPPORTED, "yarn"},
        {qw, ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0}",
         HS_STATUS_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json, cases[i].fmt, cases[i].extra);
        struct hs_model_config c;
        struct hs_error err = {0};
        hs_status s = hs_model_config_parse_hf(json, "config.json", &c, &err);
        if (s != cases[i].want)
            fail_msg("case %zu: %s, expected %s (%s)", i, hs_status_name(s),
                     hs_status_name(cases[i].want), err.msg);
        if (cases[i].says && !strstr(err.msg, cases[i].says))
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].says);
    }
    /* the parsed block parameters of a few */
    struct hs_model_config c;
    char json[1024];
    snprintf(json, sizeof json, qw, ",\"num_key_value_heads\":2,\"head_dim\":16");
    assert_int_equal(hs_model_config_parse_hf(json, NULL, &c, NULL), 0);
    assert_int_equal(c.dims.kv_heads, 2);
    assert_int_equal(c.dims.head_dim, 16);
    assert_int_equal(c.dims.rotary_dim, 16);
    assert_true(c.dims.causal && c.dims.norm_pre && c.dims.final_norm);
    assert_int_equal(c.dims.norm, HS_NORM_RMS);
    assert_int_equal(c.dims.pool, HS_POOL_LAST);
    snprintf(json, sizeof json, mb, "");
    assert_int_equal(hs_model_config_parse_hf(json, NULL, &c, NULL), 0);
    assert_int_equal(c.dims.window, 64); /* local_attention 128 by default: 64 each side */
    assert_int_equal(c.dims.global_every, 3);
    assert_true(c.dims.rope_theta == 160000.0f && c.dims.rope_theta_local == 10000.0f);
    snprintf(json, sizeof json, gte, ",\"rope_scaling\":{\"type\":\"ntk\",\"factor\":2.0}");
    assert_int_equal(hs_model_config_parse_hf(json, NULL, &c, NULL), 0);
    assert_true(c.dims.rope_theta == 20000.0f);
    assert_true(fabsf(c.dims.rope_freq_div - powf(2.0f, 2.0f / 8.0f)) < 1e-6f);
}

/* An engine that declares no block feature: stage_prepare must never reach it for a stage
 * that needs one. */
static void bare_caps(void *ctx, struct hs_engine_caps *out)
{
    snprintf(out->kind, sizeof out->kind, "bare");
    out->dtypes = 1u << HS_DTYPE_F32;
    out->stages = (1u << HS_STAGE_COUNT) - 1;
}
static int bare_prepared;
static hs_status bare_prepare(void *ctx, const struct hs_stage *st, enum hs_dtype dtype,
                              void **prep, struct hs_error *err)
{
    bare_prepared++;
    *prep = NULL;
    return HS_STATUS_OK;
}
/* An engine that claims stages has every per-batch method (hs__engine_wrap); this one is only
 * ever asked to prepare, so the others refuse. */
static hs_status bare_ws_create(void *ctx, const struct hs_ws_spec *spec, void **ws,
                                struct hs_error *err)
{
    (void)ctx, (void)spec, (void)ws;
    return hs_error_set(err, HS_STATUS_UNSUPPORTED, "bare: prepares only");
}
static void bare_ws_destroy(void *ctx, void *ws)
{
    (void)ctx, (void)ws;
}
static hs_status bare_batch_begin(void *ctx, void *ws, const struct hs_batch *b,
                                  struct hs_error *err)
{
    (void)ctx, (void)ws, (void)b;
    return hs_error_set(err, HS_STATUS_UNSUPPORTED, "bare: prepares only");
}
static hs_status bare_run_stage(void *ctx, void *ws, const struct hs_stage *st, void *prep,
                                struct hs_error *err)
{
    (void)ctx, (void)ws, (void)st, (void)prep;
    return hs_error_set(err, HS_STATUS_UNSUPPORTED, "bare: prepares only");
}
static hs_status bare_act_read(void *ctx, void *ws, enum hs_act_buf buf, float *dst,
                               struct hs_error *err)
{
    (void)ctx, (void)ws, (void)buf, (void)dst;
    return hs_error_set(err, HS_STATUS_UNSUPPORTED, "bare: prepares only");
}
static hs_status bare_act_write(void *ctx, void *ws, enum hs_act_buf buf, const float *src,
                                struct hs_error *err)
{
    (void)ctx, (void)ws, (void)buf, (void)src;
    return hs_error_set(err, HS_STATUS_UNSUPPORTED, "bare: prepares only");
}
static const struct hs_engine_iface bare_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "bare",
    .caps = bare_caps,
    .stage_prepare = bare_prepare,
    .ws_create = bare_ws_create,
    .ws_destroy = bare_ws_destroy,
    .batch_begin = bare_batch_begin,
    .run_stage = bare_run_stage,
    .act_read = bare_act_read,
    .act_write = bare_act_write,
};

static void missing_features_are_named(void **state)
{
    (void)state;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    if (hs_model_load(hs_test_path("tests/data/tiny-roberta"), &m, &err)) fail_msg("%s", err.msg);
    hs_engine_t e = NULL;
    assert_int_equal(hs__engine_wrap(&bare_iface, NULL, "bare0", &e, &err), 0);
    void *prep = NULL;
    bare_prepared = 0;
    assert_int_equal(hs_engine_stage_prepare(e, &m->stages[0], HS_DTYPE_F32, &prep, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "position offset"));
    assert_non_null(strstr(err.msg, "bare0"));
    assert_int_equal(bare_prepared, 0);
    /* its attention stages need nothing beyond BERT */
    assert_int_equal(hs_engine_stage_prepare(e, &m->stages[1], HS_DTYPE_F32, &prep, &err), 0);
    assert_int_equal(bare_prepared, 1);
    hs_engine_destroy(e);
    hs_model_free(m);
}

/* A folder whose weights are tiny-qwen3's split in two shards with an index (HF's layout for big
 * checkpoints): the same embeddings; a broken index is refused, naming the fault. */
static char shard_dir[256];

static void put_file(const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", shard_dir, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void sharded_checkpoint(void **state)
{
    (void)state;
    struct hs_error err = {0};
    snprintf(shard_dir, sizeof shard_dir, "%s/hs_arch_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(shard_dir));
    char src[PATH_MAX];
    assert_non_null(realpath(hs_test_path("tests/data/tiny-qwen3"), src)); /* symlinks need it */
    static const char *const links[] = {"config.json",
                                        "vocab.txt",
                                        "tokenizer_config.json",
                                        "modules.json",
                                        "sentence_bert_config.json",
                                        "1_Pooling"};
    char a[PATH_MAX + 64], b[512];
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(a, sizeof a, "%s/%s", src, links[i]);
        snprintf(b, sizeof b, "%s/%s", shard_dir, links[i]);
        assert_int_equal(symlink(a, b), 0);
    }
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    struct hs_safetensors *st = NULL;
    if (hs_safetensors_open(a, &st, &err)) fail_msg("%s", err.msg);
    const int n = hs_safetensors_count(st), half = n / 2;
    const char **names = hs_malloc(sizeof(char *) * (size_t)n);
    struct hs_tensor *ts = hs_malloc(sizeof *ts * (size_t)n);
    size_t cap = 64 + (size_t)n * 160, used = 0;
    char *index = hs_malloc(cap);
    used += (size_t)snprintf(index + used, cap - used, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < n; i++) {
        names[i] = hs_safetensors_name(st, i);
        assert_int_equal(hs_safetensors_get(st, names[i], &ts[i], NULL), 0);
        used += (size_t)snprintf(index + used, cap - used, "%s\"%s\": \"model-%05d.safetensors\"",
                                 i ? ", " : "", names[i], i < half ? 1 : 2);
    }
    snprintf(index + used, cap - used, "}}");
    snprintf(b, sizeof b, "%s/model-00001.safetensors", shard_dir);
    assert_int_equal(hs_safetensors_write(b, names, ts, half, &err), 0);
    snprintf(b, sizeof b, "%s/model-00002.safetensors", shard_dir);
    assert_int_equal(hs_safetensors_write(b, names + half, ts + half, n - half, &err), 0);
    hs_safetensors_close(st);
    put_file("model.safetensors.index.json", index);

    struct hs_model *m = NULL;
    if (hs_model_load(shard_dir, &m, &err)) fail_msg("%s", err.msg);
    assert_int_equal(hs_weights_shards(m->weights), 2);
    struct hs_golden *g = NULL;
    char gj[1024], gf[1024];
    snprintf(gj, sizeof gj, "%s", hs_test_path("tests/golden/tiny_qwen3.json"));
    snprintf(gf, sizeof gf, "%s", hs_test_path("tests/golden/tiny_qwen3.f32"));
    if (hs_golden_load(gj, gf, &g, &err)) fail_msg("%s", err.msg);
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = 1}, &e, &err), 0);
    struct hs_verify_tolerance tol = {0.99999, 0.99999};
    struct hs_verify_report rep;
    if (hs_verify_engine(m, e, HS_DTYPE_F32, g, &tol, NULL, &rep, &err)) fail_msg("%s", err.msg);
    printf("# sharded tiny-qwen3 f32: min cosine %.8f\n", rep.cos_min);
    assert_true(rep.pass);
    hs_engine_destroy(e);
    hs_golden_free(g);
    hs_model_free(m);

    /* broken indexes: each refused with the fault named */
    static const struct {
        const char *index, *says;
    } bad[] = {
        {"{\"weight_map\": {\"x\": \"../model-00001.safetensors\"}}", "not a file name"},
        {"{\"weight_map\": {\"no.such.tensor\": \"model-00001.safetensors\"}}", "not in shard"},
        {"{\"weight_map\": {\"x\": \"absent.safetensors\"}}", "absent.safetensors"},
        {"{\"weight_map\": {}}", "weight_map"},
        {"[1]", "weight_map"},
        {"{", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put_file("model.safetensors.index.json", bad[i].index);
        err = (struct hs_error){0};
        assert_int_not_equal(hs_model_load(shard_dir, &m, &err), HS_STATUS_OK);
        if (!strstr(err.msg, bad[i].says)) fail_msg("index %zu: message '%s'", i, err.msg);
    }
    static const char *const rm[] = {"model-00001.safetensors", "model-00002.safetensors",
                                     "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(b, sizeof b, "%s/%s", shard_dir, links[i]);
        unlink(b);
    }
    for (size_t i = 0; i < 3; i++) {
        snprintf(b, sizeof b, "%s/%s", shard_dir, rm[i]);
        unlink(b);
    }
    rmdir(shard_dir);
    hs_free(index);
    hs_free(ts);
    hs_free(names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_lookups),
        cmocka_unit_test(family_configs),
        cmocka_unit_test(missing_features_are_named),
        cmocka_unit_test(families_match_transformers),
        cmocka_unit_test(sharded_checkpoint),
        cmocka_unit_test(other_engines_run_or_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
