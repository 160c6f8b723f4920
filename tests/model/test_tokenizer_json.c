/* tokenizer.json pipeline against HF `tokenizers`: for every tokenizer of
 * tests/data/tokenizer_json/ (made by tools/golden/gen_tokenizer_json.py) and the installed
 * model's tokenizer.json, the ids, type ids, special masks and char offsets of every golden case
 * (singles, pairs, with and without special tokens, truncation settings) and the decodes must be
 * identical. Prints the identity counts per tokenizer. Also: malformed files and unsupported
 * components are clear errors naming the JSON path. */
#include "testutil.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "model/tokenizer.h"
#include "model/tokenizer/tok.h"

static const char *const names[] = {
    "minilm",        "bert_uncased", "bert_cased", "bert_chinese", "bert_processing",
    "roberta",       "qwen2",        "llama",      "xlmr",         "gpt2_prefix",
    "misc_pipeline", "t5_unigram",   "wordlevel"};

struct counts {
    int cases, ids, types, special, offsets, errors;
    int singles, singles_ok, pairs, pairs_ok, decodes, decodes_ok;
};

static bool same_i32(json_t *arr, const int32_t *v, size_t n)
{
    if (json_array_size(arr) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, i)) != v[i]) return false;
    return true;
}

static bool same_u8(json_t *arr, const uint8_t *v, size_t n)
{
    if (json_array_size(arr) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, i)) != v[i]) return false;
    return true;
}

static bool same_offsets(json_t *arr, const uint32_t *s, const uint32_t *e, size_t n)
{
    if (json_array_size(arr) != n) return false;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        if (json_integer_value(json_array_get(o, 0)) != s[i] ||
            json_integer_value(json_array_get(o, 1)) != e[i])
            return false;
    }
    return true;
}

static void print_ids(const char *what, json_t *arr, const int32_t *v, size_t n)
{
    fprintf(stderr, "    %s expected:", what);
    for (size_t i = 0; i < json_array_size(arr) && i < 40; i++)
        fprintf(stderr, " %lld", json_integer_value(json_array_get(arr, i)));
    fprintf(stderr, "\n    %s got:     ", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "\n");
}

static int check_one(const char *name, struct counts *c)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/tokenizer_json/%s.golden.json", name);
    json_error_t je;
    json_t *doc = json_load_file(hs_test_path(rel), JSON_ALLOW_NUL, &je);
    if (!doc) {
        fprintf(stderr, "%s: no golden (%s)\n", name, je.text);
        return -1;
    }
    const char *tpath = hs_test_path(json_string_value(json_object_get(doc, "tokenizer")));
    FILE *f = fopen(tpath, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s is not installed, skipped\n", name, tpath);
        json_decref(doc);
        return -1;
    }
    fclose(f);
    struct hs_tok *tok = NULL;
    struct hs_error err = {0};
    hs_status st = hs_tok_load(tpath, &tok, &err);
    if (st) fprintf(stderr, "%s: load failed: %s\n", name, err.msg);
    assert_int_equal(st, HS_STATUS_OK);
    json_t *cases = json_object_get(doc, "cases"), *texts = json_object_get(doc, "texts");
    int shown = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *k = json_array_get(cases, i);
        /* texts are named by their index into "texts" */
        json_t *text =
            json_array_get(texts, (size_t)json_integer_value(json_object_get(k, "text")));
        json_t *pi = json_object_get(k, "pair");
        json_t *pair =
            json_is_integer(pi) ? json_array_get(texts, (size_t)json_integer_value(pi)) : NULL;
        json_t *tr = json_object_get(k, "trunc");
        struct hs_tok_trunc t = {.max_length = -1};
        if (json_is_object(tr)) {
            const char *strat = json_string_value(json_object_get(tr, "strategy"));
            t.max_length = (int)json_integer_value(json_object_get(tr, "max_length"));
            t.strategy = strcmp(strat, "only_first") == 0    ? HS_TOK_TRUNC_ONLY_FIRST
                         : strcmp(strat, "only_second") == 0 ? HS_TOK_TRUNC_ONLY_SECOND
                                                             : HS_TOK_TRUNC_LONGEST_FIRST;
            t.left = strcmp(json_string_value(json_object_get(tr, "direction")), "left") == 0;
        }
        struct hs_tok_encode_opts o = {.add_special_tokens =
                                           json_is_true(json_object_get(k, "add")),
                                       .char_offsets = true,
                                       .truncation = &t};
        bool is_pair = json_is_string(pair);
        struct hs_tok_encoding e;
        st = hs_tok_encode(tok, json_string_value(text), json_string_length(text),
                           is_pair ? json_string_value(pair) : NULL,
                           is_pair ? json_string_length(pair) : 0, &o, &e, &err);
        c->cases++;
        if (is_pair)
            c->pairs++;
        else
            c->singles++;
        bool ok;
        if (json_object_get(k, "error")) {
            ok = st != HS_STATUS_OK;
            c->errors += ok;
            if (!ok) hs_tok_encoding_free(&e);
        } else if (st != HS_STATUS_OK) {
            ok = false;
            fprintf(stderr, "%s case %zu: error %s\n", name, i, err.msg);
        } else {
            bool a = same_i32(json_object_get(k, "ids"), e.ids, e.n);
            bool b = same_i32(json_object_get(k, "type_ids"), e.type_ids, e.n);
            bool s = same_u8(json_object_get(k, "special"), e.special, e.n);
            bool of = same_offsets(json_object_get(k, "offsets"), e.start, e.end, e.n);
            c->ids += a;
            c->types += b;
            c->special += s;
            c->offsets += of;
            ok = a && b && s && of;
            if (!ok && shown++ < 6) {
                fprintf(stderr,
                        "%s case %zu mismatch (ids %d types %d special %d offsets %d): "
                        "text '%.60s' pair '%.30s'\n",
                        name, i, a, b, s, of, json_string_value(text),
                        is_pair ? json_string_value(pair) : "");
                print_ids("ids", json_object_get(k, "ids"), e.ids, e.n);
                if (!of) {
                    json_t *offs = json_object_get(k, "offsets");
                    fprintf(stderr, "    offsets expected:");
                    for (size_t q = 0; q < json_array_size(offs) && q < 20; q++)
                        fprintf(stderr, " %lld-%lld",
                                json_integer_value(json_array_get(json_array_get(offs, q), 0)),
                                json_integer_value(json_array_get(json_array_get(offs, q), 1)));
                    fprintf(stderr, "\n    offsets got:     ");
                    for (size_t q = 0; q < e.n && q < 20; q++)
                        fprintf(stderr, " %u-%u", e.start[q], e.end[q]);
                    fprintf(stderr, "\n");
                }
            }
            hs_tok_encoding_free(&e);
        }
        if (is_pair)
            c->pairs_ok += ok;
        else
            c->singles_ok += ok;
    }
    json_t *decodes = json_object_get(doc, "decodes");
    for (size_t i = 0; i < json_array_size(decodes); i++) {
        json_t *d = json_array_get(decodes, i), *ids = json_object_get(d, "ids");
        size_t n = json_array_size(ids);
        int32_t *v = hs_malloc((n + 1) * sizeof *v);
        assert_non_null(v);
        for (size_t k = 0; k < n; k++) v[k] = (int32_t)json_integer_value(json_array_get(ids, k));
        char *out = NULL;
        size_t len = 0;
        st = hs_tok_decode(tok, v, n, json_is_true(json_object_get(d, "skip")), &out, &len, &err);
        json_t *want = json_object_get(d, "text");
        bool ok = st == HS_STATUS_OK && len == json_string_length(want) &&
                  memcmp(out, json_string_value(want), len) == 0;
        if (!ok && shown++ < 8)
            fprintf(stderr, "%s decode %zu: want '%.60s' got '%.60s'\n", name, i,
                    json_string_value(want), out ? out : err.msg);
        c->decodes++;
        c->decodes_ok += ok;
        hs_free(out);
        hs_free(v);
    }
    hs_tok_free(tok);
    json_decref(doc);
    return 0;
}

static void test_goldens(void **state)
{
    (void)state;
    bool all = true;
    int checked = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct counts c = {0};
        if (check_one(names[i], &c) != 0) continue;
        checked++;
        int results = c.cases - c.errors;
        printf(
            "%-16s cases %4d: singles %d/%d pairs %d/%d | ids %d/%d type_ids %d/%d special %d/%d "
            "offsets %d/%d | expected errors %d | decodes %d/%d\n",
            names[i], c.cases, c.singles_ok, c.singles, c.pairs_ok, c.pairs, c.ids, results,
            c.types, results, c.special, results, c.offsets, results, c.errors, c.decodes_ok,
            c.decodes);
        if (c.singles_ok != c.singles || c.pairs_ok != c.pairs || c.decodes_ok != c.decodes)
            all = false;
    }
    assert_true(checked >= 12);
    assert_true(all);
}

static void expect_error(const char *json, hs_status want, const char *needle)
{
    struct hs_tok *tok = NULL;
    struct hs_error err = {0};
    hs_status st = hs_tok_load_json(json, strlen(json), &tok, &err);
    if (st != want || !strstr(err.msg, needle))
        fprintf(stderr, "want %d '%s', got %d '%s'\n", want, needle, st, err.msg);
    assert_int_equal(st, want);
    assert_null(tok);
    assert_non_null(strstr(err.msg, needle));
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{", HS_STATUS_CORRUPT, "line 1");
    expect_error("[]", HS_STATUS_CORRUPT, "must be an object");
    expect_error("{\"model\": {\"type\": \"WordLevel2\", \"vocab\": {}}}", HS_STATUS_UNSUPPORTED,
                 ".model.type: model 'WordLevel2' is not supported (supported: WordPiece, BPE, "
                 "Unigram, WordLevel)");
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": "
                 "{\"[UNK]\": 0}}, \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
                 "[{\"type\": \"NFC\"}, {\"type\": \"Magic\"}]}}",
                 HS_STATUS_UNSUPPORTED, ".normalizer.normalizers[1].type: normalizer 'Magic'");
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": "
                 "{\"a\": 0}}}",
                 HS_STATUS_CORRUPT, ".model.unk_token '[UNK]' is not in the vocabulary");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
                 HS_STATUS_CORRUPT, ".model.merges[0]");
    expect_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": 0}, "
                 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                 "\"behavior\": \"Isolated\"}}",
                 HS_STATUS_UNSUPPORTED, ".pre_tokenizer: regex '(' does not compile");
    expect_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": 0}, "
                 "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                 "[{\"SpecialToken\": {\"id\": \"X\", \"type_id\": 0}}], \"pair\": [], "
                 "\"special_tokens\": {}}}",
                 HS_STATUS_CORRUPT, ".post_processor.special_tokens lacks 'X'");
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    const char *json = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"<unk>\", 0.0], [\"a\", "
                       "-1.0]], \"unk_id\": 0}}";
    struct hs_tok *tok = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_tok_load_json(json, strlen(json), &tok, &err), HS_STATUS_OK);
    struct hs_tok_encoding e;
    assert_int_equal(hs_tok_encode(tok, "a\xC3", 2, NULL, 0, NULL, &e, &err),
                     HS_STATUS_INVALID_INPUT);
    assert_non_null(strstr(err.msg, "byte offset 1"));
    assert_int_equal(hs_tok_encode(tok, "aab", 3, NULL, 0, NULL, &e, &err), HS_STATUS_OK);
    assert_int_equal(e.n, 3); /* "a" "a", then "b" unknown */
    assert_int_equal(e.ids[0], 1);
    assert_int_equal(e.ids[1], 1);
    assert_int_equal(e.ids[2], 0);
    hs_tok_encoding_free(&e);
    hs_tok_free(tok);
}

/* A model folder with tokenizer.json: the hs_tokenizer API gives the pipeline's ids (through the
 * vocab.txt WordPiece when the file is BERT's own pipeline), truncated like HF. */
static void test_model_folder(void **state)
{
    (void)state;
    const char *dir = hs_test_model_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) skip();
    fclose(f);
    struct hs_tokenizer *t = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_tokenizer_load_dir(dir, NULL, &t, &err), HS_STATUS_OK);
    const struct hs_tok *json = hs_tokenizer_json(t);
    assert_non_null(json);
    bool lower, strip, chinese;
    assert_true(hs_tok_is_plain_bert(json, &lower, &strip, &chinese));
    struct hs_tok *rob = NULL;
    assert_int_equal(
        hs_tok_load(hs_test_path("tests/data/tokenizer_json/roberta.tokenizer.json"), &rob, &err),
        HS_STATUS_OK);
    assert_false(hs_tok_is_plain_bert(rob, &lower, &strip, &chinese));
    hs_tok_free(rob);
    static const char *const texts[] = {"Hello, wörld [SEP] 北京", "", "[MASK]ed  café naïve",
                                        "a b c d e f g h i j k l m n o p"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (int max = 4; max <= 64; max += 60) {
            int32_t ids[64];
            int n = 0, full = 0;
            assert_int_equal(
                hs_tokenizer_encode(t, texts[i], strlen(texts[i]), ids, max, &n, &full, &err),
                HS_STATUS_OK);
            struct hs_tok_trunc tr = {.max_length = max};
            struct hs_tok_encode_opts o = {.add_special_tokens = true, .truncation = &tr};
            struct hs_tok_encoding e;
            assert_int_equal(hs_tok_encode(json, texts[i], strlen(texts[i]), NULL, 0, &o, &e, &err),
                             HS_STATUS_OK);
            assert_int_equal((size_t)n, e.n);
            assert_memory_equal(ids, e.ids, e.n * sizeof *ids);
            hs_tok_encoding_free(&e);
        }
    }
    /* a pair: [CLS] a [SEP] b [SEP] with type ids, truncated longest first */
    int32_t ids[16], types[16];
    int n = 0, full = 0;
    assert_int_equal(hs_tokenizer_encode_pair(t, "how are you", 11, "fine thanks a lot", 17, ids,
                                              types, 16, &n, &full, &err),
                     HS_STATUS_OK);
    assert_int_equal(n, 10);
    assert_int_equal(full, 10);
    assert_int_equal(ids[0], 101);
    assert_int_equal(ids[4], 102);
    assert_int_equal(ids[9], 102);
    assert_int_equal(types[4], 0);
    assert_int_equal(types[5], 1);
    assert_int_equal(hs_tokenizer_encode_pair(t, "how are you", 11, "fine thanks a lot", 17, ids,
                                              types, 7, &n, &full, &err),
                     HS_STATUS_OK);
    assert_int_equal(n, 7); /* 2 + 2 pieces: [CLS] how are [SEP] fine thanks [SEP] */
    assert_int_equal(full, 10);
    assert_int_equal(ids[3], 102);
    assert_int_equal(types[6], 1);
    hs_tokenizer_free(t);
    /* vocab.txt alone: no pair template */
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    assert_int_equal(hs_tokenizer_load(path, NULL, &t, &err), HS_STATUS_OK);
    assert_int_equal(hs_tokenizer_encode_pair(t, "a", 1, "b", 1, ids, types, 16, &n, NULL, &err),
                     HS_STATUS_UNSUPPORTED);
    hs_tokenizer_free(t);
}

/* One tokenizer shared by four threads: every encoding equals the single-threaded one. */
static struct hs_tok *shared_tok;
static const char *const mt_texts[] = {"Hello, wörld! 北京 👍🏽", "  a  b  ",
                                       "ภาษาไทย e\xCC\x81 ﬁ", "don't stop <mask> me now"};
static struct hs_tok_encoding mt_want[4];

static void *mt_worker(void *arg)
{
    (void)arg;
    for (int r = 0; r < 300; r++) {
        for (int i = 0; i < 4; i++) {
            struct hs_tok_encoding e;
            if (hs_tok_encode(shared_tok, mt_texts[i], strlen(mt_texts[i]), mt_texts[(i + 1) % 4],
                              strlen(mt_texts[(i + 1) % 4]), NULL, &e, NULL) != HS_STATUS_OK)
                return (void *)1;
            bool same = e.n == mt_want[i].n &&
                        memcmp(e.ids, mt_want[i].ids, e.n * sizeof *e.ids) == 0 &&
                        memcmp(e.start, mt_want[i].start, e.n * sizeof *e.start) == 0;
            hs_tok_encoding_free(&e);
            if (!same) return (void *)1;
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    static const char *const files[] = {"roberta", "xlmr", "qwen2", "bert_uncased"};
    for (size_t f = 0; f < 4; f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/tokenizer_json/%s.tokenizer.json", files[f]);
        struct hs_error err = {0};
        assert_int_equal(hs_tok_load(hs_test_path(rel), &shared_tok, &err), HS_STATUS_OK);
        for (int i = 0; i < 4; i++)
            assert_int_equal(hs_tok_encode(shared_tok, mt_texts[i], strlen(mt_texts[i]),
                                           mt_texts[(i + 1) % 4], strlen(mt_texts[(i + 1) % 4]),
                                           NULL, &mt_want[i], &err),
                             HS_STATUS_OK);
        pthread_t th[4];
        for (int t = 0; t < 4; t++)
            assert_int_equal(pthread_create(&th[t], NULL, mt_worker, NULL), 0);
        for (int t = 0; t < 4; t++) {
            void *rc = NULL;
            pthread_join(th[t], &rc);
            assert_null(rc);
        }
        for (int i = 0; i < 4; i++) hs_tok_encoding_free(&mt_want[i]);
        hs_tok_free(shared_tok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),      cmocka_unit_test(test_errors),
        cmocka_unit_test(test_invalid_utf8), cmocka_unit_test(test_model_folder),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
