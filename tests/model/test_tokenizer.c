/* WordPiece tokenizer: the golden corpus from HF `tokenizers` (tests/golden/tokens.jsonl, made
 * by tools/golden/gen_tokens.py), truncation, invalid UTF-8, corrupt vocabularies, lookups,
 * allocation failures and concurrent use. */
#include "testutil.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/status.h"
#include "model/tokenizer.h"

#define IDS_MAX 8192

struct golden {
    char *text;
    size_t len;
    int32_t *ids;
    int n_ids;
    int variant; /* index into variants[], 0 = the model's own settings */
};

static const struct hs_tokenizer_opts variants[] = {
    {.do_lower_case = true, .strip_accents = -1, .tokenize_chinese_chars = true},
    {.do_lower_case = false, .strip_accents = -1, .tokenize_chinese_chars = true},
    {.do_lower_case = true, .strip_accents = 0, .tokenize_chinese_chars = true},
    {.do_lower_case = false, .strip_accents = 1, .tokenize_chinese_chars = true},
    {.do_lower_case = true, .strip_accents = -1, .tokenize_chinese_chars = false},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

static struct golden *goldens;
static int n_goldens;
static struct hs_tokenizer *toks[N_VARIANTS];

static const char *vocab_path(void)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/vocab.txt", hs_test_model_dir());
    return buf;
}

static int variant_of(json_t *opts)
{
    if (!opts) return 0;
    bool lower = json_is_true(json_object_get(opts, "do_lower_case"));
    int strip = (int)json_integer_value(json_object_get(opts, "strip_accents"));
    bool chinese = json_is_true(json_object_get(opts, "tokenize_chinese_chars"));
    for (int v = 1; v < N_VARIANTS; v++)
        if (variants[v].do_lower_case == lower && variants[v].strip_accents == strip &&
            variants[v].tokenize_chinese_chars == chinese)
            return v;
    fail_msg("golden line with unknown opts");
    return -1;
}

static void load_goldens(void)
{
    size_t bytes;
    char *data = hs_test_read_file(hs_test_path("tests/golden/tokens.jsonl"), &bytes);
    int cap = 4096;
    goldens = calloc((size_t)cap, sizeof *goldens);
    assert_non_null(goldens);
    char *line = data;
    int lineno = 0;
    while (line < data + bytes) {
        char *nl = memchr(line, '\n', (size_t)(data + bytes - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(data + bytes - line);
        lineno++;
        json_error_t jerr;
        /* \u0000 appears in the corpus on purpose. */
        json_t *o = json_loadb(line, n, JSON_ALLOW_NUL, &jerr);
        if (!o) fail_msg("tokens.jsonl line %d: %s", lineno, jerr.text);
        json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
        assert_true(json_is_string(text) && json_is_array(ids));
        if (n_goldens == cap) {
            cap *= 2;
            goldens = realloc(goldens, (size_t)cap * sizeof *goldens);
            assert_non_null(goldens);
        }
        struct golden *g = &goldens[n_goldens++];
        g->len = json_string_length(text);
        g->text = malloc(g->len + 1);
        memcpy(g->text, json_string_value(text), g->len + 1);
        g->n_ids = (int)json_array_size(ids);
        assert_true(g->n_ids >= 2 && g->n_ids <= IDS_MAX);
        g->ids = malloc((size_t)g->n_ids * sizeof *g->ids);
        for (int i = 0; i < g->n_ids; i++)
            g->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        g->variant = variant_of(json_object_get(o, "opts"));
        json_decref(o);
        line += n + 1;
    }
    free(data);
}

static int setup(void **state)
{
    (void)state;
    for (int v = 0; v < N_VARIANTS; v++) {
        struct hs_error err;
        hs_status st = hs_tokenizer_load(vocab_path(), &variants[v], &toks[v], &err);
        if (st != HS_STATUS_OK) {
            fprintf(stderr, "cannot load %s: %s\n", vocab_path(), err.msg);
            return -1;
        }
    }
    load_goldens();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int v = 0; v < N_VARIANTS; v++) hs_tokenizer_free(toks[v]);
    for (int i = 0; i < n_goldens; i++) {
        free(goldens[i].text);
        free(goldens[i].ids);
    }
    free(goldens);
    return 0;
}

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n && i < 120; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
}

/* Every golden string, untruncated: the exact ids HF produced, and n_full. */
static void golden_corpus(void **state)
{
    (void)state;
    static int32_t ids[IDS_MAX];
    int pass = 0, n_variant = 0;
    assert_true(n_goldens >= 2000);
    for (int i = 0; i < n_goldens; i++) {
        const struct golden *g = &goldens[i];
        int n = -1, full = -1;
        struct hs_error err;
        hs_status st =
            hs_tokenizer_encode(toks[g->variant], g->text, g->len, ids, IDS_MAX, &n, &full, &err);
        bool ok = st == HS_STATUS_OK && n == g->n_ids && full == g->n_ids &&
                  memcmp(ids, g->ids, (size_t)n * sizeof *ids) == 0;
        if (ok) {
            pass++;
        } else if (i - pass < 10) {
            fprintf(stderr, "golden %d (variant %d) mismatch: \"", i, g->variant);
            print_escaped(g->text, g->len);
            fprintf(stderr, "\"\n  status %s n %d full %d, expected %d ids\n  got     ",
                    hs_status_name(st), n, full, g->n_ids);
            for (int k = 0; k < n && k < 24; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  expected");
            for (int k = 0; k < g->n_ids && k < 24; k++) fprintf(stderr, " %d", g->ids[k]);
            fprintf(stderr, "\n");
        }
        if (g->variant) n_variant++;
    }
    fprintf(stderr, "golden: %d/%d strings match HF tokenizers (%d with non-default options)\n",
            pass, n_goldens, n_variant);
    assert_int_equal(pass, n_goldens);
}

/* Truncation of every golden string to several capacities: [CLS] + the first max-2 pieces +
 * [SEP] (HF's rule, checked by the generator), n_full the untruncated count. */
static void golden_truncation(void **state)
{
    (void)state;
    static const int caps[] = {2, 3, 4, 7, 64, 128, 256, 257};
    int32_t ids[300];
    int n_truncated_256 = 0;
    for (int i = 0; i < n_goldens; i++) {
        const struct golden *g = &goldens[i];
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            int max = caps[c], n = -1, full = -1;
            /* A sentinel past the capacity catches writes beyond max_tokens. */
            ids[max] = -12345;
            assert_int_equal(
                hs_tokenizer_encode(toks[g->variant], g->text, g->len, ids, max, &n, &full, NULL),
                HS_STATUS_OK);
            assert_int_equal(ids[max], -12345);
            int want = g->n_ids < max ? g->n_ids : max;
            assert_int_equal(n, want);
            assert_int_equal(full, g->n_ids);
            assert_int_equal(ids[0], g->ids[0]);
            assert_memory_equal(ids + 1, g->ids + 1, (size_t)(want - 2) * sizeof *ids);
            assert_int_equal(ids[want - 1], g->ids[g->n_ids - 1]);
            if (max == 256 && full > 256) n_truncated_256++;
        }
        /* n_full may be NULL. */
        int n = 0;
        assert_int_equal(
            hs_tokenizer_encode(toks[g->variant], g->text, g->len, ids, 3, &n, NULL, NULL),
            HS_STATUS_OK);
    }
    assert_true(n_truncated_256 >= 5); /* the corpus does hold texts past 256 tokens */
}

static void truncation_explicit(void **state)
{
    (void)state;
    struct hs_tokenizer *tok = toks[0];
    char text[4000] = "";
    for (int i = 0; i < 300; i++) strcat(text, "hello ");
    int32_t ids[300];
    int n, full;
    assert_int_equal(hs_tokenizer_encode(tok, text, strlen(text), ids, 256, &n, &full, NULL),
                     HS_STATUS_OK);
    assert_int_equal(n, 256);
    assert_int_equal(full, 302);
    assert_int_equal(ids[0], 101);
    for (int i = 1; i < 255; i++) assert_int_equal(ids[i], 7592);
    assert_int_equal(ids[255], 102);
    assert_int_equal(hs_tokenizer_encode(tok, text, strlen(text), ids, 2, &n, &full, NULL),
                     HS_STATUS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(full, 302);
    assert_int_equal(ids[0], 101);
    assert_int_equal(ids[1], 102);
    assert_int_equal(hs_tokenizer_encode(tok, text, strlen(text), ids, 3, &n, &full, NULL),
                     HS_STATUS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 7592);
    assert_int_equal(ids[2], 102);
    /* Empty text: just the specials; NULL text is fine when len is 0. */
    assert_int_equal(hs_tokenizer_encode(tok, NULL, 0, ids, 2, &n, &full, NULL), HS_STATUS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(full, 2);
    struct hs_error err;
    assert_int_equal(hs_tokenizer_encode(tok, "x", 1, ids, 1, &n, &full, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_tokenizer_encode(tok, "x", 1, NULL, 4, &n, &full, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_tokenizer_encode(tok, NULL, 1, ids, 4, &n, &full, &err),
                     HS_STATUS_INVALID_ARGUMENT);
}

/* Invalid UTF-8 is rejected with the offset of the first bad sequence; nothing is replaced. */
static void invalid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
        size_t offset;
        const char *why;
    } cases[] = {
        {"abc\x80", 4, 3, "continuation"}, /* lone continuation byte */
        {"\xbf", 1, 0, "continuation"},
        {"ok \xc3", 4, 3, "truncated"},        /* 2-byte sequence cut short */
        {"\xe2\x82", 2, 0, "truncated"},       /* 3-byte cut short */
        {"ab\xf0\x9f\x98", 5, 2, "truncated"}, /* 4-byte cut short */
        {"\xe2\x82x", 3, 0, "truncated"},      /* non-continuation inside */
        {"\xc3\xa9\xc3(", 5, 2, "truncated"},
        {"\xc0\xaf", 2, 0, "overlong"}, /* overlong '/' */
        {"x\xc1\xbf", 3, 1, "overlong"},
        {"\xe0\x80\xaf", 3, 0, "overlong"}, /* 3-byte overlong */
        {"\xe0\x9f\xbf", 3, 0, "overlong"},
        {"\xf0\x80\x80\xaf", 4, 0, "overlong"}, /* 4-byte overlong */
        {"\xf0\x8f\xbf\xbf", 4, 0, "overlong"},
        {"\xed\xa0\x80", 3, 0, "surrogate"},             /* U+D800 */
        {"hi \xed\xbf\xbf", 6, 3, "surrogate"},          /* U+DFFF */
        {"\xed\xa0\xbd\xed\xb8\x80", 6, 0, "surrogate"}, /* CESU-8 pair */
        {"\xf4\x90\x80\x80", 4, 0, "U+10FFFF"},          /* U+110000 */
        {"\xf5\x80\x80\x80", 4, 0, "lead"},
        {"a\xf8\x88\x80\x80\x80", 6, 1, "lead"},
        {"\xfe", 1, 0, "lead"},
        {"\xff", 1, 0, "lead"},
        {"valid \xc3\xa9 then \xff", 15, 14, "lead"},
    };
    int32_t ids[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hs_error err;
        hs_error_clear(&err);
        int n = -7;
        hs_status st =
            hs_tokenizer_encode(toks[0], cases[i].bytes, cases[i].len, ids, 16, &n, NULL, &err);
        assert_int_equal(st, HS_STATUS_INVALID_INPUT);
        assert_int_equal(err.status, HS_STATUS_INVALID_INPUT);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu ", cases[i].offset);
        if (!strstr(err.msg, want) || !strstr(err.msg, cases[i].why))
            fail_msg("case %zu: message \"%s\" lacks \"%s\" / \"%s\"", i, err.msg, want,
                     cases[i].why);
    }
    /* The limits of valid UTF-8 are accepted. */
    static const char *const valid[] = {"\xc2\x80",         "\xdf\xbf",        "\xe0\xa0\x80",
                                        "\xed\x9f\xbf",     "\xee\x80\x80",    "\xef\xbf\xbf",
                                        "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        int n;
        assert_int_equal(
            hs_tokenizer_encode(toks[0], valid[i], strlen(valid[i]), ids, 16, &n, NULL, NULL),
            HS_STATUS_OK);
    }
}

static hs_status load_text_vocab(const char *content, struct hs_tokenizer **out,
                                 struct hs_error *err)
{
    const char *path = hs_test_write_temp(content, strlen(content), ".txt");
    hs_status st = hs_tokenizer_load(path, NULL, out, err);
    remove(path);
    return st;
}

static void corrupt_vocab(void **state)
{
    (void)state;
    static const char *const missing[] = {
        "[PAD]\n[UNK]\n[CLS]\nhello\n", /* no [SEP] */
        "[PAD]\n[UNK]\n[SEP]\nhello\n", /* no [CLS] */
        "[PAD]\n[CLS]\n[SEP]\nhello\n", /* no [UNK] */
        "[UNK]\n[CLS]\n[SEP]\nhello\n", /* no [PAD] */
        "[pad]\n[unk]\n[cls]\n[sep]\n", /* case matters */
        "",
    };
    int64_t live = hs_alloc_live();
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        struct hs_tokenizer *tok = (struct hs_tokenizer *)1;
        struct hs_error err;
        assert_int_equal(load_text_vocab(missing[i], &tok, &err), HS_STATUS_CORRUPT);
        assert_null(tok);
        assert_int_equal(err.status, HS_STATUS_CORRUPT);
    }
    struct hs_tokenizer *tok;
    struct hs_error err;
    assert_int_equal(load_text_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\n\xff\n", &tok, &err),
                     HS_STATUS_CORRUPT);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_int_equal(hs_tokenizer_load("/nonexistent/dir/vocab.txt", NULL, &tok, &err),
                     HS_STATUS_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/vocab.txt"));
    struct hs_tokenizer_opts bad = {
        .do_lower_case = true, .strip_accents = 2, .tokenize_chinese_chars = true};
    assert_int_equal(hs_tokenizer_load(vocab_path(), &bad, &tok, &err), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_alloc_live(), live);
}

/* A small hand-made vocabulary: "##" pieces, whole-word [UNK], the 100-character limit,
 * CRLF and trailing spaces in the file, repeated lines, and no [MASK]. */
static void small_vocab(void **state)
{
    (void)state;
    struct hs_tokenizer *tok;
    struct hs_error err;
    const char *vocab =
        "[PAD]\r\n[UNK]\n[CLS]  \n[SEP]\nun\n##aff\n##able\naff\n##a\na\n.\nun\n"; /* no final \n */
    assert_int_equal(load_text_vocab(vocab, &tok, &err), HS_STATUS_OK);
    assert_int_equal(hs_tokenizer_vocab_size(tok), 12);
    assert_int_equal(hs_tokenizer_cls_id(tok), 2);
    assert_int_equal(hs_tokenizer_sep_id(tok), 3);
    assert_int_equal(hs_tokenizer_pad_id(tok), 0);
    assert_string_equal(hs_tokenizer_id_to_token(tok, 2), "[CLS]");
    assert_string_equal(hs_tokenizer_id_to_token(tok, 0), "[PAD]");
    assert_int_equal(hs_tokenizer_token_to_id(tok, "un"), 11); /* the later of two equal lines */
    assert_int_equal(hs_tokenizer_token_to_id(tok, "##able"), 6);
    assert_int_equal(hs_tokenizer_token_to_id(tok, "able"), -1);

    struct {
        const char *text;
        int n;
        int32_t ids[8];
    } cases[] = {
        {"unaffable", 5, {2, 11, 5, 6, 3}}, {"UNAFFABLE.", 6, {2, 11, 5, 6, 10, 3}},
        {"unaffablex", 3, {2, 1, 3}}, /* one unmatched piece: the whole word is [UNK] */
        {"aff un", 4, {2, 7, 11, 3}},       {"aaa", 5, {2, 9, 8, 8, 3}},
        {"[MASK]", 5, {2, 1, 1, 1, 3}}, /* not special without [MASK] in the vocab */
        {"a[SEP]a", 5, {2, 9, 3, 9, 3}},
    };
    int32_t ids[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        assert_int_equal(
            hs_tokenizer_encode(tok, cases[i].text, strlen(cases[i].text), ids, 16, &n, NULL, NULL),
            HS_STATUS_OK);
        assert_int_equal(n, cases[i].n);
        assert_memory_equal(ids, cases[i].ids, (size_t)n * sizeof *ids);
    }
    /* 100 characters is still a word; 101 is [UNK] before any matching. Characters, not bytes. */
    char word[512];
    int n;
    memset(word, 'a', 100);
    assert_int_equal(hs_tokenizer_encode(tok, word, 100, ids, 4, &n, NULL, NULL), HS_STATUS_OK);
    assert_int_equal(ids[1], 9);
    assert_int_equal(ids[2], 8);
    memset(word, 'a', 101);
    int full;
    assert_int_equal(hs_tokenizer_encode(tok, word, 101, ids, 4, &n, &full, NULL), HS_STATUS_OK);
    assert_int_equal(full, 3);
    assert_int_equal(ids[1], 1);
    hs_tokenizer_free(tok);
    hs_tokenizer_free(NULL);
}

/* Special tokens named by the options (MPNet's <s> </s> <pad>, [UNK]): found in the vocab,
 * wrapped around the pieces, matched literally in the text; BERT's texts are then ordinary. */
static void custom_special_tokens(void **state)
{
    (void)state;
    const char *path = hs_test_write_temp("<s>\n<pad>\n</s>\n<unk>\n[UNK]\n[CLS]\nhi\n<\n>\ns\n"
                                          "[\n]\ncl\n##s\n<mask>\n",
                                          strlen("<s>\n<pad>\n</s>\n<unk>\n[UNK]\n[CLS]\nhi\n<\n>"
                                                 "\ns\n[\n]\ncl\n##s\n<mask>\n"),
                                          ".txt");
    struct hs_tokenizer_opts o = {.do_lower_case = true,
                                  .strip_accents = -1,
                                  .tokenize_chinese_chars = true,
                                  .cls_token = "<s>",
                                  .sep_token = "</s>",
                                  .unk_token = "[UNK]",
                                  .pad_token = "<pad>",
                                  .mask_token = "<mask>"};
    struct hs_tokenizer *tok = NULL;
    struct hs_error err = {0};
    if (hs_tokenizer_load(path, &o, &tok, &err)) fail_msg("%s", err.msg);
    assert_int_equal(hs_tokenizer_cls_id(tok), 0);
    assert_int_equal(hs_tokenizer_sep_id(tok), 2);
    assert_int_equal(hs_tokenizer_pad_id(tok), 1);
    struct {
        const char *text;
        int n;
        int32_t ids[10];
    } cases[] = {
        {"hi", 3, {0, 6, 2}},
        {"hi</s>hi", 5, {0, 6, 2, 6, 2}},
        {"<s>", 3, {0, 0, 2}},
        {"hi <mask>", 4, {0, 6, 14, 2}},
        {"[CLS]", 6, {0, 10, 12, 13, 11, 2}}, /* not special here: "[", "cl", "##s", "]" */
        {"<S>", 5, {0, 7, 9, 8, 2}},          /* case-sensitive, as HF's added tokens */
        {"xyz", 3, {0, 4, 2}},
    };
    int32_t ids[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        assert_int_equal(
            hs_tokenizer_encode(tok, cases[i].text, strlen(cases[i].text), ids, 16, &n, NULL, NULL),
            HS_STATUS_OK);
        if (n != cases[i].n || memcmp(ids, cases[i].ids, (size_t)n * sizeof *ids))
            fail_msg("case %zu (%s): %d ids", i, cases[i].text, n);
    }
    hs_tokenizer_free(tok);
    /* a named token the vocab lacks, and one too long */
    o.cls_token = "<cls>";
    assert_int_equal(hs_tokenizer_load(path, &o, &tok, &err), HS_STATUS_CORRUPT);
    assert_non_null(strstr(err.msg, "<cls>"));
    o.cls_token = "<a-special-token-longer-than-31-bytes>";
    assert_int_equal(hs_tokenizer_load(path, &o, &tok, &err), HS_STATUS_INVALID_ARGUMENT);
    remove(path);
}

static void lookups(void **state)
{
    (void)state;
    struct hs_tokenizer *tok = toks[0];
    assert_int_equal(hs_tokenizer_vocab_size(tok), 30522);
    assert_int_equal(hs_tokenizer_cls_id(tok), 101);
    assert_int_equal(hs_tokenizer_sep_id(tok), 102);
    assert_int_equal(hs_tokenizer_pad_id(tok), 0);
    assert_string_equal(hs_tokenizer_id_to_token(tok, 100), "[UNK]");
    assert_string_equal(hs_tokenizer_id_to_token(tok, 103), "[MASK]");
    assert_string_equal(hs_tokenizer_id_to_token(tok, 7592), "hello");
    assert_string_equal(hs_tokenizer_id_to_token(tok, 30521), "##～");
    assert_null(hs_tokenizer_id_to_token(tok, 30522));
    assert_null(hs_tokenizer_id_to_token(tok, -1));
    assert_int_equal(hs_tokenizer_token_to_id(tok, "hello"), 7592);
    assert_int_equal(hs_tokenizer_token_to_id(tok, "[SEP]"), 102);
    assert_int_equal(hs_tokenizer_token_to_id(tok, "##s"), 2015);
    assert_int_equal(hs_tokenizer_token_to_id(tok, "no-such-token"), -1);
    assert_int_equal(hs_tokenizer_token_to_id(tok, ""), -1);
    assert_int_equal(hs_tokenizer_token_to_id(tok, NULL), -1);
    /* Every id maps to a token that maps back to it. */
    for (int32_t id = 0; id < hs_tokenizer_vocab_size(tok); id++)
        assert_int_equal(hs_tokenizer_token_to_id(tok, hs_tokenizer_id_to_token(tok, id)), id);
}

/* Every allocation of load and encode may fail: the result is HS_STATUS_NO_MEMORY, nothing
 * leaks, nothing crashes, and a later call works. */
static void allocation_failures(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    int failures = 0;
    struct hs_tokenizer *tok = NULL;
    for (int64_t k = 0; k < 100; k++) {
        struct hs_error err;
        hs_alloc_fail_after(k);
        hs_status st = hs_tokenizer_load(vocab_path(), NULL, &tok, &err);
        hs_alloc_fail_after(-1);
        if (st == HS_STATUS_OK) break;
        assert_int_equal(st, HS_STATUS_NO_MEMORY);
        assert_null(tok);
        assert_int_equal(hs_alloc_live(), live);
        failures++;
    }
    assert_non_null(tok);
    assert_true(failures >= 2);

    /* Long texts take one scratch allocation; short ones none. */
    char text[6000] = "";
    for (int i = 0; i < 500; i++) strcat(text, "word ");
    int32_t ids[600];
    int n;
    struct hs_error err;
    int64_t live2 = hs_alloc_live();
    hs_alloc_fail_after(0);
    hs_status st = hs_tokenizer_encode(tok, text, strlen(text), ids, 600, &n, NULL, &err);
    hs_status st_short = hs_tokenizer_encode(tok, "short text", 10, ids, 600, &n, NULL, NULL);
    hs_alloc_fail_after(-1);
    assert_int_equal(st, HS_STATUS_NO_MEMORY);
    assert_int_equal(err.status, HS_STATUS_NO_MEMORY);
    assert_int_equal(st_short, HS_STATUS_OK);
    assert_int_equal(hs_alloc_live(), live2);
    assert_int_equal(hs_tokenizer_encode(tok, text, strlen(text), ids, 600, &n, NULL, NULL),
                     HS_STATUS_OK);
    assert_int_equal(n, 502);
    assert_int_equal(hs_alloc_live(), live2);
    hs_tokenizer_free(tok);
    assert_int_equal(hs_alloc_live(), live);
}

/* One tokenizer, many threads: everyone gets the golden answers. */
struct thread_arg {
    int start;
    int mismatches;
};

static void *encode_thread(void *p)
{
    struct thread_arg *a = p;
    static _Thread_local int32_t ids[IDS_MAX];
    for (int r = 0; r < 3; r++) {
        for (int i = a->start; i < n_goldens; i += 3) {
            const struct golden *g = &goldens[i];
            int n = 0;
            if (hs_tokenizer_encode(toks[g->variant], g->text, g->len, ids, IDS_MAX, &n, NULL,
                                    NULL) != HS_STATUS_OK ||
                n != g->n_ids || memcmp(ids, g->ids, (size_t)n * sizeof *ids) != 0)
                a->mismatches++;
        }
    }
    return NULL;
}

static void concurrent_use(void **state)
{
    (void)state;
    pthread_t th[4];
    struct thread_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (struct thread_arg){.start = t % 3, .mismatches = 0};
        assert_int_equal(pthread_create(&th[t], NULL, encode_thread, &args[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].mismatches, 0);
    }
}

/* Not a gate: prints throughput so that regressions are visible in the log. */
static void throughput(void **state)
{
    (void)state;
    static int32_t ids[IDS_MAX];
    size_t bytes = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < 5; r++) {
        for (int i = 0; i < n_goldens; i++) {
            int n;
            hs_tokenizer_encode(toks[goldens[i].variant], goldens[i].text, goldens[i].len, ids,
                                IDS_MAX, &n, NULL, NULL);
            bytes += goldens[i].len;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "tokenizer: %.1f MB/s over the golden corpus (%zu bytes in %.3f s)\n",
            (double)bytes / s / 1e6, bytes, s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_corpus),
        cmocka_unit_test(golden_truncation),
        cmocka_unit_test(truncation_explicit),
        cmocka_unit_test(invalid_utf8),
        cmocka_unit_test(corrupt_vocab),
        cmocka_unit_test(small_vocab),
        cmocka_unit_test(custom_special_tokens),
        cmocka_unit_test(lookups),
        cmocka_unit_test(allocation_failures),
        cmocka_unit_test(concurrent_use),
        cmocka_unit_test(throughput),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, setup, teardown);
}
