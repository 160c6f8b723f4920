#include "testutil.h"

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "model/model.h"

/* --- scratch folders ------------------------------------------------------------------- */

static char tmp_dir[512];

static void dir_new(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/hs_model_XXXXXX", t && *t ? t : P_tmpdir);
    assert_non_null(mkdtemp(tmp_dir));
}

static void put_bytes(const char *rel, const void *data, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put(const char *rel, const char *text)
{
    put_bytes(rel, text, strlen(text));
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

/* --- a tiny synthetic BERT ------------------------------------------------------------- */

enum { T_HIDDEN = 8, T_HEADS = 2, T_INTER = 16, T_LAYERS = 2, T_VOCAB = 12, T_POS = 16 };

static const char TINY_CONFIG[] =
    "{\"model_type\":\"bert\",\"hidden_size\":8,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":2,\"intermediate_size\":16,\"max_position_embeddings\":16,"
    "\"vocab_size\":12,\"type_vocab_size\":2,\"hidden_act\":\"gelu\"}";
static const char TINY_VOCAB[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\na\nb\nc\n"
                                 "d\ne\n";

struct tiny_opts {
    const char *prefix;   /* "" or "bert." */
    int gamma_beta;       /* LayerNorm.gamma / .beta instead of .weight / .bias */
    const char *dtype;    /* "F32", "F16", "BF16" */
    const char *omit;     /* a name (without prefix) left out */
    const char *reshape;  /* a name (without prefix) whose first dim is one too big */
    const char *bad_type; /* a name (without prefix) stored as I32 */
    int misalign;         /* pad the header so that the data section starts at 8k + 2 */
};

struct tiny_tensor {
    char name[128];
    int64_t d0, d1; /* d1 < 0: 1-D */
};

static int tiny_tensors(const struct tiny_opts *o, struct tiny_tensor *t)
{
    int n = 0;
    const char *g = o->gamma_beta ? "gamma" : "weight", *b = o->gamma_beta ? "beta" : "bias";
#define ADD(D0, D1, ...)                                                                           \
    do {                                                                                           \
        snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                                        \
        t[n].d0 = (D0);                                                                            \
        t[n].d1 = (D1);                                                                            \
        n++;                                                                                       \
    } while (0)
    ADD(T_VOCAB, T_HIDDEN, "embeddings.word_embeddings.weight");
    ADD(T_POS, T_HIDDEN, "embeddings.position_embeddings.weight");
    ADD(2, T_HIDDEN, "embeddings.token_type_embeddings.weight");
    ADD(T_HIDDEN, -1, "embeddings.LayerNorm.%s", g);
    ADD(T_HIDDEN, -1, "embeddings.LayerNorm.%s", b);
    for (int l = 0; l < T_LAYERS; l++) {
        static const char *const sq[] = {"attention.self.query", "attention.self.key",
                                         "attention.self.value", "attention.output.dense"};
        for (int k = 0; k < 4; k++) {
            ADD(T_HIDDEN, T_HIDDEN, "encoder.layer.%d.%s.weight", l, sq[k]);
            ADD(T_HIDDEN, -1, "encoder.layer.%d.%s.bias", l, sq[k]);
        }
        ADD(T_HIDDEN, -1, "encoder.layer.%d.attention.output.LayerNorm.%s", l, g);
        ADD(T_HIDDEN, -1, "encoder.layer.%d.attention.output.LayerNorm.%s", l, b);
        ADD(T_INTER, T_HIDDEN, "encoder.layer.%d.intermediate.dense.weight", l);
        ADD(T_INTER, -1, "encoder.layer.%d.intermediate.dense.bias", l);
        ADD(T_HIDDEN, T_INTER, "encoder.layer.%d.output.dense.weight", l);
        ADD(T_HIDDEN, -1, "encoder.layer.%d.output.dense.bias", l);
        ADD(T_HIDDEN, -1, "encoder.layer.%d.output.LayerNorm.%s", l, g);
        ADD(T_HIDDEN, -1, "encoder.layer.%d.output.LayerNorm.%s", l, b);
    }
    /* extra tensors that the loader ignores */
    ADD(1, T_POS, "embeddings.position_ids");
    ADD(T_HIDDEN, T_HIDDEN, "pooler.dense.weight");
#undef ADD
    return n;
}

/* Writes a tiny model folder into tmp_dir. */
static void tiny_write(const struct tiny_opts *o)
{
    put("config.json", TINY_CONFIG);
    put("vocab.txt", TINY_VOCAB);
    struct tiny_tensor t[64];
    int n = tiny_tensors(o, t);
    char *hdr = malloc(16384);
    size_t h = 0, off = 0;
    h += (size_t)snprintf(hdr + h, 16384 - h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        if (o->omit && strcmp(t[i].name, o->omit) == 0) continue;
        int64_t d0 = t[i].d0 + (o->reshape && strcmp(t[i].name, o->reshape) == 0);
        const char *dt = o->dtype ? o->dtype : "F32";
        if (strcmp(t[i].name, "embeddings.position_ids") == 0) dt = "I64";
        if (o->bad_type && strcmp(t[i].name, o->bad_type) == 0) dt = "I32";
        size_t es = strcmp(dt, "I64") == 0                               ? 8
                    : (strcmp(dt, "F32") == 0 || strcmp(dt, "I32") == 0) ? 4
                                                                         : 2;
        size_t bytes = (size_t)d0 * (size_t)(t[i].d1 < 0 ? 1 : t[i].d1) * es;
        char shape[64];
        if (t[i].d1 < 0)
            snprintf(shape, sizeof shape, "[%lld]", (long long)d0);
        else
            snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)d0, (long long)t[i].d1);
        h +=
            (size_t)snprintf(hdr + h, 16384 - h,
                             ",\"%s%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                             strcmp(t[i].name, "embeddings.position_ids") ? o->prefix : "",
                             t[i].name, dt, shape, off, off + bytes);
        off += bytes;
    }
    h += (size_t)snprintf(hdr + h, 16384 - h, "}");
    assert_true(h < 16000);
    /* align the data section like real writers do (or deliberately not) */
    while ((8 + h) % 8 != (o->misalign ? 2u : 0u)) hdr[h++] = ' ';
    size_t total = 8 + h + off;
    unsigned char *f = calloc(1, total);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(f + 8, hdr, h);
    put_bytes("model.safetensors", f, total);
    free(f);
    free(hdr);
}

static hs_status load_dir(struct hs_model **m, struct hs_error *e)
{
    hs_error_clear(e);
    *m = NULL;
    hs_status s = hs_model_load(tmp_dir, m, e);
    if (s) {
        assert_null(*m);
        assert_true(strlen(e->msg) > 0);
    }
    return s;
}

/* --- checks ---------------------------------------------------------------------------- */

static void check_w(const struct hs_stage *st, enum hs_weight_role r, int64_t d0, int64_t d1)
{
    const struct hs_tensor *t = &st->w[r];
    assert_non_null(t->data);
    assert_int_equal(t->ndim, d1 < 0 ? 1 : 2);
    assert_int_equal(t->shape[0], d0);
    if (d1 >= 0) assert_int_equal(t->shape[1], d1);
}

/* Stage names, kinds and every weight's shape for dims d. */
static void check_stages(const struct hs_model *m)
{
    const struct hs_encoder_dims *d = &m->config.dims;
    const int64_t H = d->hidden, I = d->intermediate;
    assert_int_equal(m->n_stages, 1 + 2 * d->layers + 2);
    for (int i = 0; i < m->n_stages; i++) assert_ptr_equal(m->stages[i].dims, d);

    const struct hs_stage *e = &m->stages[0];
    assert_int_equal(e->kind, HS_STAGE_EMBED);
    assert_string_equal(e->name, "embed");
    assert_int_equal(e->layer, -1);
    check_w(e, HS_W_WORD_EMB, d->vocab, H);
    check_w(e, HS_W_POS_EMB, d->max_positions, H);
    check_w(e, HS_W_TYPE_EMB, d->type_vocab, H);
    check_w(e, HS_W_EMB_LN_G, H, -1);
    check_w(e, HS_W_EMB_LN_B, H, -1);
    assert_null(e->w[HS_W_Q].data);

    for (int l = 0; l < d->layers; l++) {
        char name[32];
        const struct hs_stage *a = &m->stages[1 + 2 * l], *f = &m->stages[2 + 2 * l];
        snprintf(name, sizeof name, "layer%d.attn", l);
        assert_string_equal(a->name, name);
        assert_int_equal(a->kind, HS_STAGE_ATTN);
        assert_int_equal(a->layer, l);
        for (int r = HS_W_Q; r <= HS_W_ATTN_OUT; r += 2) {
            check_w(a, (enum hs_weight_role)r, H, H);
            check_w(a, (enum hs_weight_role)(r + 1), H, -1);
        }
        check_w(a, HS_W_ATTN_LN_G, H, -1);
        check_w(a, HS_W_ATTN_LN_B, H, -1);
        assert_null(a->w[HS_W_FFN_IN].data);
        assert_null(a->w[HS_W_WORD_EMB].data);

        snprintf(name, sizeof name, "layer%d.ffn", l);
        assert_string_equal(f->name, name);
        assert_int_equal(f->kind, HS_STAGE_FFN);
        assert_int_equal(f->layer, l);
        check_w(f, HS_W_FFN_IN, I, H);
        check_w(f, HS_W_FFN_IN_B, I, -1);
        check_w(f, HS_W_FFN_OUT, H, I);
        check_w(f, HS_W_FFN_OUT_B, H, -1);
        check_w(f, HS_W_FFN_LN_G, H, -1);
        check_w(f, HS_W_FFN_LN_B, H, -1);
        assert_null(f->w[HS_W_Q].data);
    }
    const struct hs_stage *p = &m->stages[m->n_stages - 2], *n = &m->stages[m->n_stages - 1];
    assert_int_equal(p->kind, HS_STAGE_POOL);
    assert_string_equal(p->name, "pool");
    assert_int_equal(n->kind, HS_STAGE_NORMALIZE);
    assert_string_equal(n->name, "normalize");
    for (int r = 0; r < HS_W_COUNT; r++) {
        assert_null(p->w[r].data);
        assert_null(n->w[r].data);
    }
}

/* --- tests ----------------------------------------------------------------------------- */

static void real_model(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    struct hs_model *m = NULL;
    struct hs_error e;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/", hs_test_model_dir()); /* a trailing slash is harmless */
    hs_status s = hs_model_load(dir, &m, &e);
    if (s) fail_msg("%s", e.msg);
    assert_string_equal(m->name, "all-MiniLM-L6-v2");
    assert_int_equal(m->n_stages, 15);
    assert_int_equal(m->config.dims.hidden, 384);
    check_stages(m);
    assert_string_equal(m->stages[11].name, "layer5.attn");
    assert_string_equal(m->stages[12].name, "layer5.ffn");
    assert_int_equal(m->stages[0].w[HS_W_WORD_EMB].shape[0], 30522);
    assert_int_equal(m->stages[2].w[HS_W_FFN_IN].shape[0], 1536);
    assert_int_equal(m->stages[0].w[HS_W_WORD_EMB].dtype, HS_DTYPE_F32);
    assert_true(m->config.dims.normalize);

    int32_t ids[1024];
    int n = 0, full = 0;
    assert_int_equal(hs_model_tokenize(m, "hello world", 11, ids, 0, &n, &full, &e), HS_STATUS_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 101);
    assert_int_equal(ids[1], 7592);
    assert_int_equal(ids[2], 2088);
    assert_int_equal(ids[3], 102);
    /* default truncation at max_seq_len (256), and a larger limit capped by the position
     * table (512) */
    static char text[2 * 700 + 1];
    for (int i = 0; i < 700; i++) memcpy(text + 2 * i, "a ", 2);
    assert_int_equal(hs_model_tokenize(m, text, 1400, ids, 0, &n, &full, &e), HS_STATUS_OK);
    assert_int_equal(n, 256);
    assert_int_equal(full, 702);
    assert_int_equal(ids[255], 102);
    assert_int_equal(hs_model_tokenize(m, text, 1400, ids, 1024, &n, NULL, &e), HS_STATUS_OK);
    assert_int_equal(n, 512);
    assert_int_equal(hs_model_tokenize(m, text, 1400, ids, 10, &n, NULL, &e), HS_STATUS_OK);
    assert_int_equal(n, 10);
    assert_int_equal(hs_model_tokenize(NULL, text, 1, ids, 10, &n, NULL, &e),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_model_tokenize(m, NULL, 1, ids, 10, &n, NULL, &e),
                     HS_STATUS_INVALID_ARGUMENT);
    hs_model_free(m);
    assert_int_equal(hs_alloc_live(), live);
}

static void bad_arguments(void **state)
{
    (void)state;
    struct hs_model *m = NULL;
    struct hs_error e;
    assert_int_equal(hs_model_load(NULL, &m, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_model_load("", &m, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_model_load("x", NULL, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_not_equal(hs_model_load("/nonexistent/model", &m, &e), HS_STATUS_OK);
    assert_null(m);
    assert_non_null(strstr(e.msg, "/nonexistent/model"));
    hs_model_free(NULL);
}

static void tiny_variants(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    struct hs_model *m;
    struct hs_error e;
    dir_new();

    struct tiny_opts plain = {.prefix = ""};
    tiny_write(&plain);
    assert_int_equal(load_dir(&m, &e), HS_STATUS_OK);
    check_stages(m);
    assert_int_equal(m->n_stages, 1 + 2 * T_LAYERS + 2);
    assert_false(m->config.dims.normalize); /* no modules.json */
    assert_int_equal(m->config.max_seq_len, T_POS);
    assert_string_equal(m->name, strrchr(tmp_dir, '/') + 1);
    hs_model_free(m);

    /* "bert." prefix, gamma/beta names, half-precision weights */
    const char *dts[] = {"F16", "BF16"};
    for (int i = 0; i < 2; i++) {
        struct tiny_opts o = {.prefix = "bert.", .gamma_beta = 1, .dtype = dts[i]};
        tiny_write(&o);
        assert_int_equal(load_dir(&m, &e), HS_STATUS_OK);
        check_stages(m);
        assert_int_equal(m->stages[0].w[HS_W_WORD_EMB].dtype, i ? HS_DTYPE_BF16 : HS_DTYPE_F16);
        hs_model_free(m);
    }

    /* one tensor missing, one of the wrong shape, one of the wrong dtype: each named */
    static const char *const names[] = {
        "embeddings.word_embeddings.weight",         "embeddings.LayerNorm.bias",
        "encoder.layer.1.attention.self.value.bias", "encoder.layer.0.intermediate.dense.weight",
        "encoder.layer.1.output.LayerNorm.weight",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        for (int kind = 0; kind < 3; kind++) {
            struct tiny_opts o = {.prefix = i % 2 ? "bert." : ""};
            if (kind == 0) o.omit = names[i];
            if (kind == 1) o.reshape = names[i];
            if (kind == 2) o.bad_type = names[i];
            tiny_write(&o);
            assert_int_equal(load_dir(&m, &e), HS_STATUS_CORRUPT);
            if (!strstr(e.msg, names[i])) fail_msg("message does not name %s: %s", names[i], e.msg);
            assert_non_null(strstr(e.msg, kind == 0 ? "missing" : kind == 1 ? "shape" : "dtype"));
        }
    }

    /* an unpadded header leaves the weights misaligned for in-place reads */
    struct tiny_opts mis = {.prefix = "", .misalign = 1};
    tiny_write(&mis);
    assert_int_equal(load_dir(&m, &e), HS_STATUS_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "aligned"));

    /* a vocabulary bigger than the embedding table */
    tiny_write(&plain);
    put("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\na\nb\nc\nd\ne\nf\n");
    assert_int_equal(load_dir(&m, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "vocab"));

    /* missing files */
    tiny_write(&plain);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", tmp_dir);
    unlink(p);
    assert_int_equal(load_dir(&m, &e), HS_STATUS_IO);
    assert_non_null(strstr(e.msg, "model.safetensors"));
    tiny_write(&plain);
    snprintf(p, sizeof p, "%s/vocab.txt", tmp_dir);
    unlink(p);
    assert_int_not_equal(load_dir(&m, &e), HS_STATUS_OK);
    /* a corrupt weights file is reported as such */
    tiny_write(&plain);
    put_bytes("model.safetensors", "\x10\0\0\0\0\0\0\0{\"a\":", 13);
    assert_int_equal(load_dir(&m, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "model.safetensors"));

    dir_free();
    assert_int_equal(hs_alloc_live(), live);
}

/* A copy of the real folder (files linked) with an edited header in model.safetensors. The
 * edit keeps the header length, so the rest of the file stays valid. */
static void real_copy_with_edit(const char *find_after, const char *old, const char *repl,
                                const char *want_name, const char *want_word)
{
    char src[PATH_MAX];
    assert_non_null(realpath(hs_test_model_dir(), src));
    dir_new();
    static const char *const links[] = {"config.json",           "1_Pooling",
                                        "modules.json",          "sentence_bert_config.json",
                                        "tokenizer_config.json", "vocab.txt"};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        char from[PATH_MAX + 64], to[1024];
        snprintf(from, sizeof from, "%s/%s", src, links[i]);
        snprintf(to, sizeof to, "%s/%s", tmp_dir, links[i]);
        assert_int_equal(symlink(from, to), 0);
    }
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    size_t n;
    char *buf = hs_test_read_file(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)buf[i];
    char save = buf[8 + hlen];
    buf[8 + hlen] = '\0'; /* search the header only */
    char *at = strstr(buf + 8, find_after);
    assert_non_null(at);
    char *o = strstr(at, old);
    assert_non_null(o);
    assert_int_equal(strlen(old), strlen(repl));
    memcpy(o, repl, strlen(repl));
    buf[8 + hlen] = save;
    put_bytes("model.safetensors", buf, n);
    free(buf);

    int64_t live = hs_alloc_live();
    struct hs_model *m;
    struct hs_error e;
    assert_int_equal(load_dir(&m, &e), HS_STATUS_CORRUPT);
    if (!strstr(e.msg, want_name) || !strstr(e.msg, want_word))
        fail_msg("expected '%s' and '%s' in: %s", want_name, want_word, e.msg);
    print_message("%s\n", e.msg);
    assert_int_equal(hs_alloc_live(), live);
    dir_free();
}

static void real_copy_missing_tensor(void **state)
{
    (void)state;
    real_copy_with_edit("\"encoder.layer.3.attention.self.query.weight\"", "query.weight",
                        "querx.weight", "encoder.layer.3.attention.self.query.weight", "missing");
}

static void real_copy_wrong_shape(void **state)
{
    (void)state;
    real_copy_with_edit("\"encoder.layer.2.intermediate.dense.weight\"", "[1536,384]", "[384,1536]",
                        "encoder.layer.2.intermediate.dense.weight", "shape");
}

static void real_copy_wrong_dtype(void **state)
{
    (void)state;
    real_copy_with_edit("\"encoder.layer.4.output.dense.weight\"", "\"F32\"", "\"I32\"",
                        "encoder.layer.4.output.dense.weight", "dtype");
}

/* Fail the k-th allocation of a load for every k until the load succeeds (tiny model), or for
 * k = 0..dense and then in growing steps (the real model, whose vocabulary alone takes tens of
 * thousands of allocations): always an error, never a crash, nothing leaked. */
static int alloc_fail_sweep(const char *dir, int dense)
{
    int64_t live = hs_alloc_live();
    int tries = 0;
    for (int64_t k = 0;; k = k < dense ? k + 1 : k + k / 4) {
        struct hs_model *m = NULL;
        struct hs_error e;
        hs_error_clear(&e);
        hs_alloc_fail_after(k);
        hs_status s = hs_model_load(dir, &m, &e);
        hs_alloc_fail_after(-1);
        tries++;
        if (s == HS_STATUS_OK) {
            check_stages(m);
            hs_model_free(m);
            assert_int_equal(hs_alloc_live(), live);
            return tries;
        }
        assert_null(m);
        assert_true(strlen(e.msg) > 0);
        if (hs_alloc_live() != live)
            fail_msg("leak after failing allocation %lld: %lld live (%s)", (long long)k,
                     (long long)(hs_alloc_live() - live), e.msg);
        if (k > 10 * 1000 * 1000) fail_msg("load never succeeded");
    }
}

static void alloc_failures_tiny(void **state)
{
    (void)state;
    dir_new();
    struct tiny_opts o = {.prefix = ""};
    tiny_write(&o);
    int tries = alloc_fail_sweep(tmp_dir, INT32_MAX);
    print_message("tiny model: %d injected failures before success\n", tries - 1);
    dir_free();
}

static void alloc_failures_real(void **state)
{
    (void)state;
    int tries = alloc_fail_sweep(hs_test_model_dir(), 200);
    print_message("real model: %d loads with injected failures\n", tries - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_model),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(tiny_variants),
        cmocka_unit_test(real_copy_missing_tensor),
        cmocka_unit_test(real_copy_wrong_shape),
        cmocka_unit_test(real_copy_wrong_dtype),
        cmocka_unit_test(alloc_failures_tiny),
        cmocka_unit_test(alloc_failures_real),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
