#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "model/arch.h"
#include "model/config.h"

static const char BASE_CONFIG[] =
    "{\"model_type\":\"bert\",\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":128,"
    "\"vocab_size\":100,\"type_vocab_size\":2,\"layer_norm_eps\":1e-5,\"hidden_act\":\"gelu\","
    "\"pad_token_id\":0}";

/* --- a scratch model folder ------------------------------------------------------------- */

static char tmp_dir[512];

static void dir_new(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/hs_cfg_XXXXXX", t && *t ? t : P_tmpdir);
    assert_non_null(mkdtemp(tmp_dir));
}

static void put(const char *rel, const char *text)
{
    char p[1024];
    if (strchr(rel, '/')) {
        snprintf(p, sizeof p, "%s/%.*s", tmp_dir, (int)(strchr(rel, '/') - rel), rel);
        mkdir(p, 0700);
    }
    snprintf(p, sizeof p, "%s/%s", tmp_dir, rel);
    if (!text) {
        unlink(p);
        return;
    }
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void dir_free(void)
{
    nftw(tmp_dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static hs_status load(struct hs_model_config *c, struct hs_error *e)
{
    memset(c, 0x5a, sizeof *c);
    hs_error_clear(e);
    hs_status s = hs_model_config_load(tmp_dir, c, e);
    if (s) assert_true(strlen(e->msg) > 0);
    return s;
}

/* --- tests ---------------------------------------------------------------------------- */

static void real_model_folder(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    struct hs_model_config c;
    struct hs_error e;
    hs_status s = hs_model_config_load(hs_test_model_dir(), &c, &e);
    if (s) fail_msg("%s", e.msg);
    assert_int_equal(c.dims.hidden, 384);
    assert_int_equal(c.dims.layers, 6);
    assert_int_equal(c.dims.heads, 12);
    assert_int_equal(c.dims.head_dim, 32);
    assert_int_equal(c.dims.intermediate, 1536);
    assert_int_equal(c.dims.vocab, 30522);
    assert_int_equal(c.dims.max_positions, 512);
    assert_int_equal(c.dims.type_vocab, 2);
    assert_true(c.dims.ln_eps == 1e-12f);
    assert_int_equal(c.dims.act, HS_ACT_GELU_ERF);
    assert_int_equal(c.dims.pool, HS_POOL_MEAN);
    assert_true(c.dims.normalize);
    assert_int_equal(c.max_seq_len, 256);
    assert_int_equal(c.pad_token_id, 0);
    assert_string_equal(c.model_type, "bert");
    assert_true(c.do_lower_case);
    assert_int_equal(c.strip_accents, -1);
    assert_true(c.tokenize_chinese_chars);
    assert_int_equal(hs_alloc_live(), live);
}

static hs_status parse(const char *json, struct hs_model_config *c, struct hs_error *e)
{
    hs_error_clear(e);
    hs_status s = hs_model_config_parse_hf(json, "cfg.json", c, e);
    if (s) {
        assert_non_null(strstr(e->msg, "cfg.json"));
    }
    return s;
}

/* BASE_CONFIG with one key's value replaced ("key":value); value NULL removes the key. */
static const char *with(const char *key, const char *value)
{
    static char buf[2048];
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(BASE_CONFIG, pat);
    assert_non_null(at);
    const char *end = at + strlen(pat);
    if (*end == '"')
        end = strchr(end + 1, '"') + 1;
    else
        end += strcspn(end, ",}");
    size_t pre = (size_t)(at - BASE_CONFIG);
    if (value) {
        snprintf(buf, sizeof buf, "%.*s%s%s%s", (int)pre, BASE_CONFIG, pat, value, end);
    } else {
        if (*end == ',')
            end++;
        else if (pre && BASE_CONFIG[pre - 1] == ',')
            pre--;
        snprintf(buf, sizeof buf, "%.*s%s", (int)pre, BASE_CONFIG, end);
    }
    return buf;
}

static void hf_config_values(void **state)
{
    (void)state;
    struct hs_model_config c;
    struct hs_error e;
    assert_int_equal(parse(BASE_CONFIG, &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.hidden, 64);
    assert_int_equal(c.dims.head_dim, 16);
    assert_true(c.dims.ln_eps == 1e-5f);
    assert_int_equal(parse(with("hidden_act", "\"gelu_new\""), &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.act, HS_ACT_GELU_TANH);
    assert_int_equal(parse(with("hidden_act", "\"gelu_pytorch_tanh\""), &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.act, HS_ACT_GELU_TANH);
    assert_int_equal(parse(with("hidden_act", "\"relu\""), &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.act, HS_ACT_RELU);
    /* optional keys take BertConfig's defaults */
    assert_int_equal(parse(with("hidden_act", NULL), &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.act, HS_ACT_GELU_ERF);
    assert_int_equal(parse(with("layer_norm_eps", NULL), &c, &e), HS_STATUS_OK);
    assert_true(c.dims.ln_eps == 1e-12f);
    assert_int_equal(parse(with("type_vocab_size", NULL), &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.type_vocab, 2);
    assert_int_equal(parse(with("layer_norm_eps", "1"), &c, &e), HS_STATUS_CORRUPT);
    assert_int_equal(parse(with("layer_norm_eps", "0.001"), &c, &e), HS_STATUS_OK);
}

static void hf_config_errors(void **state)
{
    (void)state;
    struct hs_model_config c;
    struct hs_error e;
    static const char *const required[] = {
        "model_type",        "hidden_size", "num_hidden_layers",       "num_attention_heads",
        "intermediate_size", "vocab_size",  "max_position_embeddings",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        assert_int_equal(parse(with(required[i], NULL), &c, &e), HS_STATUS_CORRUPT);
        assert_non_null(strstr(e.msg, required[i]));
    }
    static const struct {
        const char *key, *value;
    } bad[] = {
        {"hidden_size", "\"64\""},
        {"hidden_size", "64.0"},
        {"hidden_size", "-64"},
        {"hidden_size", "0"},
        {"hidden_size", "true"},
        {"hidden_size", "99999999999999999999999"},
        {"hidden_size", "66"}, /* not divisible by 4 heads */
        {"num_hidden_layers", "0"},
        {"num_attention_heads", "0"},
        {"intermediate_size", "[]"},
        {"vocab_size", "{}"},
        {"max_position_embeddings", "-1"},
        {"type_vocab_size", "0"},
        {"layer_norm_eps", "\"1e-12\""},
        {"layer_norm_eps", "-1e-12"},
        {"layer_norm_eps", "0"},
        {"layer_norm_eps", "1e-50"}, /* positive, but 0 as a float */
        {"hidden_act", "\"mish\""},
        {"hidden_act", "\"swiglu\""}, /* gated: not BERT's FFN */
        {"hidden_act", "1"},
        {"pad_token_id", "100"},
        {"pad_token_id", "-1"},
        {"pad_token_id", "0.5"},
        {"model_type", "7"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_status s = parse(with(bad[i].key, bad[i].value), &c, &e);
        if (s != HS_STATUS_CORRUPT)
            fail_msg("%s=%s gave %s", bad[i].key, bad[i].value, hs_status_name(s));
        /* the parser itself rejects integers beyond 64 bits, before any key is looked at */
        if (!strstr(e.msg, bad[i].key) && !strstr(e.msg, "invalid JSON"))
            fail_msg("%s=%s: message '%s'", bad[i].key, bad[i].value, e.msg);
    }
    /* an unknown family is refused with the supported list */
    assert_int_equal(parse(with("model_type", "\"gpt2\""), &c, &e), HS_STATUS_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "gpt2"));
    assert_non_null(strstr(e.msg, "'bert', 'mpnet', 'roberta', 'xlm-roberta'"));
    /* aliases find their family's row; the folder's spelling is kept */
    assert_int_equal(parse(with("model_type", "\"xlm-roberta\""), &c, &e), HS_STATUS_OK);
    assert_string_equal(c.model_type, "xlm-roberta");
    assert_string_equal(c.arch->model_type, "roberta");
    assert_int_equal(c.dims.pos_offset, 1); /* pad_token_id 0 in this config: 0 + 1 */
    assert_int_equal(
        parse(with("hidden_act", "\"gelu\",\"position_embedding_type\":\"relative_key\""), &c, &e),
        HS_STATUS_UNSUPPORTED);
    assert_int_equal(parse("{", &c, &e), HS_STATUS_CORRUPT);
    assert_int_equal(parse("", &c, &e), HS_STATUS_CORRUPT);
    assert_int_equal(parse("[1,2]", &c, &e), HS_STATUS_CORRUPT);
    assert_int_equal(parse("{\"model_type\":\"bert\",\"model_type\":\"bert\"}", &c, &e),
                     HS_STATUS_CORRUPT);
    assert_int_equal(hs_model_config_parse_hf(NULL, "x", &c, &e), HS_STATUS_INVALID_ARGUMENT);
}

static void folder_defaults_and_options(void **state)
{
    (void)state;
    struct hs_model_config c;
    struct hs_error e;
    dir_new();
    /* no config.json at all */
    assert_int_equal(load(&c, &e), HS_STATUS_NOT_FOUND);
    assert_non_null(strstr(e.msg, "config.json"));

    /* config.json alone: mean pooling, no normalize, max_seq_len = positions, tokenizer
     * defaults */
    put("config.json", BASE_CONFIG);
    assert_int_equal(load(&c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.pool, HS_POOL_MEAN);
    assert_false(c.dims.normalize);
    assert_int_equal(c.max_seq_len, 128);
    assert_true(c.do_lower_case);
    assert_int_equal(c.strip_accents, -1);
    assert_true(c.tokenize_chinese_chars);

    put("1_Pooling/config.json", "{\"word_embedding_dimension\":64,\"pooling_mode_cls_token\":true,"
                                 "\"pooling_mode_mean_tokens\":false}");
    put("modules.json", "[{\"type\":\"sentence_transformers.models.Transformer\"},"
                        "{\"type\":\"sentence_transformers.models.Pooling\"},"
                        "{\"type\":\"sentence_transformers.models.Normalize\"}]");
    put("sentence_bert_config.json", "{\"max_seq_length\":1000}");
    put("tokenizer_config.json",
        "{\"do_lower_case\":false,\"strip_accents\":true,\"tokenize_chinese_chars\":false}");
    assert_int_equal(load(&c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.pool, HS_POOL_CLS);
    assert_true(c.dims.normalize);
    assert_int_equal(c.max_seq_len, 128); /* capped at max_position_embeddings */
    assert_false(c.do_lower_case);
    assert_int_equal(c.strip_accents, 1);
    assert_false(c.tokenize_chinese_chars);

    put("sentence_bert_config.json", "{\"max_seq_length\":64,\"do_lower_case\":true}");
    put("tokenizer_config.json", "{\"strip_accents\":false}");
    put("modules.json", "[{\"type\":\"sentence_transformers.models.Transformer\"},"
                        "{\"type\":\"sentence_transformers.models.Pooling\"}]");
    assert_int_equal(load(&c, &e), HS_STATUS_OK);
    assert_int_equal(c.max_seq_len, 64);
    assert_int_equal(c.strip_accents, 0);
    assert_true(c.do_lower_case);
    assert_false(c.dims.normalize);

    put("sentence_bert_config.json", "{}");
    assert_int_equal(load(&c, &e), HS_STATUS_OK);
    assert_int_equal(c.max_seq_len, 128);
    dir_free();
}

static void folder_errors(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    struct hs_model_config c;
    struct hs_error e;
    dir_new();
    put("config.json", BASE_CONFIG);
    static const struct {
        const char *file, *text;
        hs_status want;
        const char *in_msg;
    } cases[] = {
        {"config.json", "{\"hidden_size\":", HS_STATUS_CORRUPT, "config.json"},
        {"config.json", "", HS_STATUS_CORRUPT, "config.json"},
        {"1_Pooling/config.json", "{\"pooling_mode_max_tokens\":true}", HS_STATUS_UNSUPPORTED,
         "pooling_mode_max_tokens"},
        {"1_Pooling/config.json",
         "{\"pooling_mode_mean_sqrt_len_tokens\":true,"
         "\"pooling_mode_mean_tokens\":false}",
         HS_STATUS_UNSUPPORTED, "pooling_mode_mean_sqrt_len_tokens"},
        {"1_Pooling/config.json",
         "{\"pooling_mode_mean_tokens\":true,"
         "\"pooling_mode_cls_token\":true}",
         HS_STATUS_UNSUPPORTED, "1_Pooling"},
        {"1_Pooling/config.json", "{\"pooling_mode_mean_tokens\":false}", HS_STATUS_CORRUPT,
         "1_Pooling"},
        {"1_Pooling/config.json", "{\"pooling_mode_mean_tokens\":\"yes\"}", HS_STATUS_CORRUPT,
         "pooling_mode_mean_tokens"},
        {"1_Pooling/config.json",
         "{\"pooling_mode_mean_tokens\":true,"
         "\"word_embedding_dimension\":32}",
         HS_STATUS_CORRUPT, "word_embedding_dimension"},
        {"1_Pooling/config.json", "[true]", HS_STATUS_CORRUPT, "1_Pooling"},
        {"modules.json", "{}", HS_STATUS_CORRUPT, "modules.json"},
        {"modules.json", "[1]", HS_STATUS_CORRUPT, "modules.json"},
        {"modules.json", "[{\"type\":3}]", HS_STATUS_CORRUPT, "modules.json"},
        {"modules.json", "[{\"type\":\"sentence_transformers.models.Dense\"}]",
         HS_STATUS_UNSUPPORTED, "Dense"},
        {"sentence_bert_config.json", "{\"max_seq_length\":\"256\"}", HS_STATUS_CORRUPT,
         "max_seq_length"},
        {"sentence_bert_config.json", "{\"max_seq_length\":1}", HS_STATUS_CORRUPT,
         "max_seq_length"},
        {"sentence_bert_config.json", "[]", HS_STATUS_CORRUPT, "sentence_bert_config.json"},
        {"tokenizer_config.json", "{\"do_lower_case\":1}", HS_STATUS_CORRUPT, "do_lower_case"},
        {"tokenizer_config.json", "{\"strip_accents\":\"no\"}", HS_STATUS_CORRUPT, "strip_accents"},
        {"tokenizer_config.json", "{\"tokenize_chinese_chars\":null,\"x\":1,\"x\":2}",
         HS_STATUS_CORRUPT, "tokenizer_config.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put(cases[i].file, cases[i].text);
        hs_status s = load(&c, &e);
        if (s != cases[i].want || !strstr(e.msg, cases[i].in_msg))
            fail_msg("%s '%s': %s (%s)", cases[i].file, cases[i].text, hs_status_name(s), e.msg);
        /* restore a valid state: remove the optional file, or rewrite config.json */
        put(cases[i].file, strcmp(cases[i].file, "config.json") ? NULL : BASE_CONFIG);
        assert_int_equal(load(&c, &e), HS_STATUS_OK);
    }
    /* an unreadable required file (a directory where config.json should be) */
    put("config.json", NULL);
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", tmp_dir);
    mkdir(p, 0700);
    assert_int_not_equal(load(&c, &e), HS_STATUS_OK);
    rmdir(p);
    assert_int_equal(hs_model_config_load(NULL, &c, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_model_config_load(tmp_dir, NULL, &e), HS_STATUS_INVALID_ARGUMENT);
    dir_free();
    assert_int_equal(hs_alloc_live(), live);
}

static void alloc_failures(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    int ok = 0;
    for (int k = 0; k < 64 && !ok; k++) {
        struct hs_model_config c;
        struct hs_error e;
        hs_alloc_fail_after(k);
        hs_status s = hs_model_config_load(hs_test_model_dir(), &c, &e);
        hs_alloc_fail_after(-1);
        if (s == HS_STATUS_OK) {
            ok = 1;
            assert_int_equal(c.dims.hidden, 384);
        } else {
            assert_int_equal(s, HS_STATUS_NO_MEMORY);
        }
        assert_int_equal(hs_alloc_live(), live);
    }
    assert_true(ok);
}

/* model_type mpnet: no token types, positions from pad + 1, 32 relative-position buckets; the
 * usable length is the position table less the offset. */
static void mpnet_config(void **state)
{
    (void)state;
    struct hs_model_config c;
    struct hs_error e;
    static const char mp[] =
        "{\"model_type\":\"mpnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":514,"
        "\"vocab_size\":100,\"layer_norm_eps\":1e-5,\"hidden_act\":\"gelu\","
        "\"pad_token_id\":1,\"relative_attention_num_buckets\":32}";
    assert_int_equal(parse(mp, &c, &e), HS_STATUS_OK);
    assert_string_equal(c.model_type, "mpnet");
    assert_int_equal(c.dims.type_vocab, 1);
    assert_int_equal(c.dims.pos_offset, 2);
    assert_int_equal(c.dims.rel_buckets, 32);
    assert_int_equal(c.dims.rel_max_distance, 128);
    static const char two_types[] =
        "{\"model_type\":\"mpnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":514,"
        "\"vocab_size\":100,\"type_vocab_size\":2}";
    assert_int_equal(parse(two_types, &c, &e), HS_STATUS_UNSUPPORTED);
    static const char odd_buckets[] =
        "{\"model_type\":\"mpnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":514,"
        "\"vocab_size\":100,\"relative_attention_num_buckets\":30}";
    assert_int_equal(parse(odd_buckets, &c, &e), HS_STATUS_CORRUPT);
    /* BERT keeps offset 0 and no relative bias */
    assert_int_equal(parse(BASE_CONFIG, &c, &e), HS_STATUS_OK);
    assert_int_equal(c.dims.pos_offset, 0);
    assert_int_equal(c.dims.rel_buckets, 0);
    /* the relative-position buckets agree with HF's MPNetEncoder.relative_position_bucket
     * (values printed by transformers 5.24; all of -600..600 were compared once) */
    static const int rel[] = {0, 1, 7, 8, 15, 16, 127, 128, 500, -1, -8, -16, -128, -500};
    static const int want[] = {0, 17, 23, 24, 25, 26, 31, 31, 31, 1, 8, 10, 15, 15};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
        if (hs_rel_pos_bucket(rel[i], 32, 128) != want[i])
            fail_msg("bucket(%d) = %d, want %d", rel[i], hs_rel_pos_bucket(rel[i], 32, 128),
                     want[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mpnet_config),
        cmocka_unit_test(real_model_folder),
        cmocka_unit_test(hf_config_values),
        cmocka_unit_test(hf_config_errors),
        cmocka_unit_test(folder_defaults_and_options),
        cmocka_unit_test(folder_errors),
        cmocka_unit_test(alloc_failures),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
