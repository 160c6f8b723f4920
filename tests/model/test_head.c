/* Classification heads (model/head.h): loading (from a file and from memory), applying, and every
 * malformed file refused with a clear error. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/head.h"

static const char good[] =
    "{\"format\":1,\"kind\":\"softmax-linear\",\"model\":\"m\",\"labels\":[\"neg\",\"pos\",\"mid\"]"
    ","
    "\"dim\":2,\"weight\":[[1,0],[0,1],[0.5,0.5]],\"bias\":[0,0,-1],\"training\":{\"x\":1}}";

static struct hs_head *load_text(const char *text, hs_status want, const char *msg_part)
{
    const char *path = hs_test_write_temp(text, strlen(text), ".json");
    struct hs_head *h = NULL;
    struct hs_error err = {0};
    hs_status st = hs_head_load(path, &h, &err);
    if (st != want) fail_msg("status %d (%s), want %d, for %s", st, err.msg, want, text);
    if (msg_part && !strstr(err.msg, msg_part))
        fail_msg("message '%s' lacks '%s'", err.msg, msg_part);
    if (st) assert_null(h);
    /* the same text from memory, labelled with the path: the same verdict, word for word */
    struct hs_head *h2 = NULL;
    struct hs_error err2 = {0};
    assert_int_equal(hs_head_load_buffer(text, strlen(text), path, &h2, &err2), st);
    assert_string_equal(err2.msg, err.msg);
    if (h2) {
        assert_int_equal(h2->n_classes, h->n_classes);
        assert_memory_equal(h2->weight, h->weight, sizeof(float) * h->n_classes * h->dim);
    }
    hs_head_free(h2);
    return h;
}

static void loads_and_applies(void **state)
{
    (void)state;
    struct hs_head *h = load_text(good, HS_STATUS_OK, NULL);
    assert_int_equal(h->n_classes, 3);
    assert_int_equal(h->dim, 2);
    assert_string_equal(h->labels[1], "pos");
    assert_string_equal(h->model, "m");
    float x[2] = {0.2f, 2.0f}, p[3];
    int best = hs_head_apply(h, x, p);
    assert_int_equal(best, 1);
    /* softmax of (0.2, 2.0, 0.1) */
    double z[3] = {0.2, 2.0, 0.1}, s = 0;
    for (int i = 0; i < 3; i++) s += exp(z[i]);
    for (int i = 0; i < 3; i++) assert_true(fabs(p[i] - exp(z[i]) / s) < 1e-6);
    assert_true(fabs(p[0] + p[1] + p[2] - 1.0) < 1e-6);
    /* large logits do not overflow */
    float big[2] = {1e30f, -1e30f};
    best = hs_head_apply(h, big, p);
    assert_int_equal(best, 0);
    assert_true(p[0] > 0.999f && !isnan(p[1]) && !isnan(p[2]));
    hs_head_free(h);
    hs_head_free(NULL);
}

static void bad_files_are_refused(void **state)
{
    (void)state;
    struct hs_head *h = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_head_load("/nonexistent/head.json", &h, &err), HS_STATUS_IO);
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_int_equal(hs_head_load(NULL, &h, &err), HS_STATUS_INVALID_ARGUMENT);
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"{", "invalid JSON"},
        {"[]", "not a JSON object"},
        {"{\"format\":2,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0,0]}",
         "'format'"},
        {"{\"format\":1,\"kind\":\"mlp\",\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1]],"
         "\"bias\":[0,0]}",
         "'kind'"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"weight\":[[1],[1]],\"bias\":[0,0]}", "'dim'"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":0,\"weight\":[[1],[1]],\"bias\":[0,0]}",
         "'dim'"},
        {"{\"format\":1,\"labels\":[\"a\"],\"dim\":1,\"weight\":[[1]],\"bias\":[0]}", "'labels'"},
        {"{\"format\":1,\"labels\":[\"a\",\"a\"],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0,0]}",
         "twice"},
        {"{\"format\":1,\"labels\":[\"a\",\"\"],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0,0]}",
         "labels[1]"},
        {"{\"format\":1,\"labels\":[\"a\",3],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0,0]}",
         "labels[1]"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1]],\"bias\":[0,0]}",
         "'weight'"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":2,\"weight\":[[1,2],[1]],\"bias\":[0,0]}",
         "weight[1]"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[\"x\"]],\"bias\":[0,0]"
         "}",
         "weight[1][0]"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1e300]],\"bias\":[0,0]"
         "}",
         "finite"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0]}",
         "'bias'"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1]]}", "'bias'"},
        {"{\"format\":1,\"labels\":[\"a\",\"b\"],\"dim\":1,\"weight\":[[1],[1]],\"bias\":[0,0],"
         "\"dim\":1}",
         "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        load_text(cases[i].text, HS_STATUS_CORRUPT, cases[i].msg);
}

/* Every allocation failing in turn gives HS_STATUS_NO_MEMORY (or success), never a crash. */
static void allocation_failures(void **state)
{
    (void)state;
    const char *path = hs_test_write_temp(good, strlen(good), ".json");
    for (int n = 0; n < 8; n++) {
        hs_alloc_fail_after(n);
        struct hs_head *h = NULL;
        struct hs_error err = {0};
        hs_status st = hs_head_load(path, &h, &err);
        hs_alloc_fail_after(-1);
        assert_true(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY);
        hs_head_free(h);
    }
}

/* The committed heads load and fit their encoders' widths. */
static void committed_heads_load(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int dim;
    } heads[] = {{"heads/all-MiniLM-L6-v2-sentiment.json", 384},
                 {"heads/all-mpnet-base-v2-sentiment.json", 768}};
    for (size_t i = 0; i < 2; i++) {
        struct hs_head *h = NULL;
        struct hs_error err = {0};
        if (hs_head_load(hs_test_path(heads[i].file), &h, &err)) fail_msg("%s", err.msg);
        assert_int_equal(h->dim, heads[i].dim);
        assert_int_equal(h->n_classes, 2);
        assert_string_equal(h->labels[0], "negative");
        assert_string_equal(h->labels[1], "positive");
        hs_head_free(h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loads_and_applies),
        cmocka_unit_test(bad_files_are_refused),
        cmocka_unit_test(allocation_failures),
        cmocka_unit_test(committed_heads_load),
    };
    return cmocka_run_group_tests_name("head", tests, NULL, NULL);
}
