/* A checkpoint's sequence-classification head (model/seqcls.h): found under its naming scheme
 * in the committed tiny checkpoints, labels from id2label, every malformed folder refused with a
 * message naming the fault, and the activations. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/seqcls.h"

static void loads_cross_encoder_and_classifier(void **state)
{
    (void)state;
    struct hs_seqcls *h = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_seqcls_load(hs_test_path("tests/data/tiny-cross-encoder"), 32, &h, &err),
                     HS_STATUS_OK);
    assert_int_equal(h->n_labels, 1);
    assert_string_equal(h->scheme, "bert-pooler");
    assert_false(h->multi_label);
    float x[32], logit;
    for (int i = 0; i < 32; i++) x[i] = (float)sin(i);
    hs_seqcls_logits(h, x, &logit);
    assert_true(isfinite(logit));
    float s = logit;
    hs_seqcls_activate(h, &s);
    assert_true(fabs(s - 1 / (1 + exp(-logit))) < 1e-6);
    hs_seqcls_free(h);

    assert_int_equal(hs_seqcls_load(hs_test_path("tests/data/tiny-classifier"), 32, &h, &err),
                     HS_STATUS_OK);
    assert_int_equal(h->n_labels, 3);
    assert_true(h->multi_label);
    assert_string_equal(h->labels[0], "joy");
    assert_string_equal(h->labels[2], "other");
    h->multi_label = false; /* a softmax sums to one */
    float p[3] = {1, 2, 3};
    hs_seqcls_activate(h, p);
    assert_true(fabs(p[0] + p[1] + p[2] - 1) < 1e-6 && p[2] > p[1] && p[1] > p[0]);
    hs_seqcls_free(h);
}

static void embedding_model_is_not_found(void **state)
{
    (void)state;
    struct hs_seqcls *h = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_seqcls_load(hs_test_path("tests/data/tiny-bert-cls"), 32, &h, &err),
                     HS_STATUS_NOT_FOUND);
    assert_null(h);
    assert_int_equal(hs_seqcls_load(hs_test_path("tests/data/tiny-cross-encoder"),
                                    HS_SEQCLS_MAX_HIDDEN + 1, &h, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "at most"));
}

/* A folder: config.json from text, model.safetensors linked from a committed checkpoint. */
static const char *folder(const char *config, const char *weights_from)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/hs_seqcls_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char p[512], w[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(config, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    snprintf(w, sizeof w, "%s/model.safetensors", hs_test_path(weights_from));
    assert_int_equal(symlink(w, p), 0);
    return dir;
}

static void refuse(const char *config, const char *weights_from, int hidden, const char *words)
{
    const char *dir = folder(config, weights_from);
    struct hs_seqcls *h = NULL;
    struct hs_error err = {0};
    hs_status st = hs_seqcls_load(dir, hidden, &h, &err);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
    if (st != HS_STATUS_CORRUPT || !strstr(err.msg, words))
        fail_msg("status %d '%s', want CORRUPT with '%s'", st, err.msg, words);
    assert_null(h);
}

static void malformed_folders_refused(void **state)
{
    (void)state;
    const char *cls = "{\"architectures\": [\"BertForSequenceClassification\"]}";
    refuse(cls, "tests/data/tiny-bert-cls", 32, "without its head");
    refuse(cls, "tests/data/tiny-cross-encoder", 16, "without its head");
    refuse("{\"architectures\": [\"BertForSequenceClassification\"], \"id2label\": {\"3\": \"x\"}}",
           "tests/data/tiny-classifier", 32, "id2label");
    refuse("{\"architectures\": [\"BertForSequenceClassification\"], \"id2label\": [1]}",
           "tests/data/tiny-classifier", 32, "id2label");
    refuse("{\"architectures\": [\"BertForSequenceClassification\"], \"id2label\": {\"0\": \"\"}}",
           "tests/data/tiny-classifier", 32, "id2label");
}

static void config_test(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        bool want;
    } cases[] = {
        {"{\"architectures\": [\"BertForSequenceClassification\"]}", true},
        {"{\"architectures\": [\"XLMRobertaForSequenceClassification\", \"x\"]}", true},
        {"{\"architectures\": [\"BertModel\"]}", false},
        {"{\"architectures\": [\"ForSequenceClassification\"]}", false},
        {"{\"architectures\": \"BertForSequenceClassification\"}", false},
        {"{\"architectures\": []}", false},
        {"{}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *r = json_loads(cases[i].json, 0, NULL);
        assert_non_null(r);
        if (hs_seqcls_config(r) != cases[i].want) fail_msg("%s", cases[i].json);
        json_decref(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loads_cross_encoder_and_classifier),
        cmocka_unit_test(embedding_model_is_not_found),
        cmocka_unit_test(malformed_folders_refused),
        cmocka_unit_test(config_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
