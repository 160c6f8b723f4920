#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "model/safetensors.h"

/* A small file with every interesting feature: metadata, three dtypes, a scalar, an empty
 * tensor. Data: 24 bytes of F32 [2,3], 8 bytes of F16 [4], 8 bytes of I64 [] = 40 bytes. */
static const char VALID_HEADER[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
    "\"z\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[40,40]}}";
#define VALID_DATA_BYTES 40

/* Header + data in one malloc'ed buffer; data bytes are i & 0xff. */
static unsigned char *make_file(const char *header, size_t data_bytes, size_t *bytes)
{
    size_t h = strlen(header);
    *bytes = 8 + h + data_bytes;
    unsigned char *b = malloc(*bytes);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_bytes; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

/* Opens a header + data_bytes and returns the status; the handle is closed on success. The
 * buffer is exactly the file's size so that the sanitizer sees any over-read. */
static hs_status try_header(const char *header, size_t data_bytes, struct hs_error *e)
{
    size_t n;
    unsigned char *b = make_file(header, data_bytes, &n);
    struct hs_safetensors *st = NULL;
    hs_error_clear(e);
    hs_status s = hs_safetensors_open_buffer(b, n, "synth.safetensors", &st, e);
    if (s == HS_STATUS_OK) {
        assert_non_null(st);
        hs_safetensors_close(st);
    } else {
        assert_null(st);
        assert_true(strlen(e->msg) > 0);
        assert_non_null(strstr(e->msg, "synth.safetensors"));
    }
    free(b);
    return s;
}

static void check_valid(struct hs_safetensors *st, const unsigned char *data)
{
    assert_int_equal(hs_safetensors_count(st), 4);
    assert_string_equal(hs_safetensors_name(st, 0), "a");
    assert_string_equal(hs_safetensors_name(st, 3), "z");
    assert_null(hs_safetensors_name(st, 4));
    assert_null(hs_safetensors_name(st, -1));

    struct hs_tensor t;
    struct hs_error e;
    assert_int_equal(hs_safetensors_get(st, "a", &t, &e), HS_STATUS_OK);
    assert_int_equal(t.dtype, HS_DTYPE_F32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.bytes, 24);
    assert_ptr_equal(t.data, data);
    assert_int_equal(hs_tensor_numel(&t), 6);

    assert_int_equal(hs_safetensors_get(st, "b", &t, &e), HS_STATUS_OK);
    assert_int_equal(t.dtype, HS_DTYPE_F16);
    assert_ptr_equal(t.data, data + 24);
    assert_int_equal(((const unsigned char *)t.data)[0], 24);

    assert_int_equal(hs_safetensors_get(st, "c", &t, &e), HS_STATUS_OK);
    assert_int_equal(t.ndim, 0);
    assert_int_equal(t.bytes, 8);
    assert_int_equal(hs_tensor_numel(&t), 1);

    assert_int_equal(hs_safetensors_get(st, "z", &t, &e), HS_STATUS_OK);
    assert_int_equal(t.bytes, 0);
    assert_int_equal(hs_tensor_numel(&t), 0);

    assert_int_equal(hs_safetensors_get(st, "__metadata__", &t, &e), HS_STATUS_NOT_FOUND);
    assert_int_equal(hs_safetensors_get(st, "nope", &t, &e), HS_STATUS_NOT_FOUND);
    assert_non_null(strstr(e.msg, "'nope'"));
}

static void valid_buffer_and_file(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    size_t n;
    unsigned char *b = make_file(VALID_HEADER, VALID_DATA_BYTES, &n);
    struct hs_safetensors *st = NULL;
    struct hs_error e;
    assert_int_equal(hs_safetensors_open_buffer(b, n, "synth", &st, &e), HS_STATUS_OK);
    check_valid(st, b + 8 + strlen(VALID_HEADER));
    hs_safetensors_close(st);

    /* The same bytes through the file + mmap path. */
    const char *path = hs_test_write_temp(b, n, ".safetensors");
    assert_int_equal(hs_safetensors_open(path, &st, &e), HS_STATUS_OK);
    struct hs_tensor t;
    assert_int_equal(hs_safetensors_get(st, "a", &t, &e), HS_STATUS_OK);
    check_valid(st, t.data);
    assert_int_equal(memcmp(t.data, b + 8 + strlen(VALID_HEADER), VALID_DATA_BYTES), 0);
    hs_safetensors_close(st);
    unlink(path);
    free(b);

    /* Padding spaces after the JSON (as writers align the data section) are fine. */
    char padded[sizeof VALID_HEADER + 8];
    snprintf(padded, sizeof padded, "%s       ", VALID_HEADER);
    assert_int_equal(try_header(padded, VALID_DATA_BYTES, &e), HS_STATUS_OK);
    /* An empty header object: a file with no tensors. */
    assert_int_equal(try_header("{}", 0, &e), HS_STATUS_OK);
    assert_int_equal(hs_alloc_live(), live);
}

static void bad_arguments_and_io(void **state)
{
    (void)state;
    struct hs_safetensors *st = NULL;
    struct hs_error e;
    assert_int_equal(hs_safetensors_open(NULL, &st, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_safetensors_open("x", NULL, &e), HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_safetensors_open("/nonexistent/dir/model.safetensors", &st, &e),
                     HS_STATUS_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/dir/model.safetensors"));
    assert_int_equal(hs_safetensors_open(hs_test_source_dir(), &st, &e), HS_STATUS_IO);
    const char *empty = hs_test_write_temp("", 0, ".safetensors");
    assert_int_equal(hs_safetensors_open(empty, &st, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, empty));
    unlink(empty);
    assert_int_equal(hs_safetensors_open_buffer(NULL, 10, "x", &st, &e),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hs_safetensors_open_buffer(NULL, 0, "x", &st, &e), HS_STATUS_CORRUPT);
    assert_null(st);
    /* Accessors tolerate NULL. */
    assert_int_equal(hs_safetensors_count(NULL), 0);
    assert_null(hs_safetensors_name(NULL, 0));
    hs_safetensors_close(NULL);
}

static void real_model_file(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", hs_test_model_dir());
    struct hs_safetensors *st = NULL;
    struct hs_error e;
    hs_status s = hs_safetensors_open(path, &st, &e);
    if (s) fail_msg("%s", e.msg);
    assert_true(hs_safetensors_count(st) >= 101);
    struct hs_tensor t;
    assert_int_equal(hs_safetensors_get(st, "embeddings.word_embeddings.weight", &t, &e),
                     HS_STATUS_OK);
    assert_int_equal(t.dtype, HS_DTYPE_F32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 30522);
    assert_int_equal(t.shape[1], 384);
    assert_int_equal(t.bytes, 30522u * 384u * 4u);
    assert_int_equal(hs_safetensors_get(st, "embeddings.position_ids", &t, &e), HS_STATUS_OK);
    assert_int_equal(t.dtype, HS_DTYPE_I64);
    assert_int_equal(((const int64_t *)t.data)[511], 511);
    assert_int_equal(hs_safetensors_get(st, "encoder.layer.5.output.LayerNorm.bias", &t, &e),
                     HS_STATUS_OK);
    assert_int_equal(t.shape[0], 384);
    /* Every listed name can be looked up. */
    for (int i = 0; i < hs_safetensors_count(st); i++)
        assert_int_equal(hs_safetensors_get(st, hs_safetensors_name(st, i), &t, &e), HS_STATUS_OK);
    hs_safetensors_close(st);
}

/* Every proper prefix of a valid file is an error: through a buffer of exactly that size,
 * and through a file. */
static void truncated_everywhere(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    size_t n;
    unsigned char *full = make_file(VALID_HEADER, VALID_DATA_BYTES, &n);
    for (size_t len = 0; len < n; len++) {
        unsigned char *b = malloc(len ? len : 1);
        memcpy(b, full, len);
        struct hs_safetensors *st = NULL;
        struct hs_error e;
        hs_error_clear(&e);
        hs_status s = hs_safetensors_open_buffer(b, len, "trunc", &st, &e);
        if (s == HS_STATUS_OK) fail_msg("prefix of %zu bytes accepted", len);
        assert_int_equal(s, HS_STATUS_CORRUPT);
        assert_null(st);
        assert_true(strlen(e.msg) > 0);

        const char *path = hs_test_write_temp(b, len, ".safetensors");
        s = hs_safetensors_open(path, &st, &e);
        if (s == HS_STATUS_OK) fail_msg("file prefix of %zu bytes accepted", len);
        assert_int_equal(s, HS_STATUS_CORRUPT);
        assert_non_null(strstr(e.msg, path));
        unlink(path);
        free(b);
    }
    free(full);
    assert_int_equal(hs_alloc_live(), live);
}

static void header_length_bad(void **state)
{
    (void)state;
    size_t n;
    unsigned char *b = make_file(VALID_HEADER, VALID_DATA_BYTES, &n);
    const uint64_t lens[] = {n - 7, n, UINT64_MAX, (uint64_t)1 << 63, (uint64_t)1 << 40, 0, 1};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(lens[k] >> (8 * i));
        struct hs_safetensors *st = NULL;
        struct hs_error e;
        hs_status s = hs_safetensors_open_buffer(b, n, "hl", &st, &e);
        assert_int_equal(s, HS_STATUS_CORRUPT);
        assert_null(st);
    }
    free(b);

    /* A header length inside the file but over the 100 MB limit is refused before parsing.
     * calloc of this size maps zero pages lazily, so it costs little. */
    size_t big = (size_t)100 * 1024 * 1024 + 64;
    unsigned char *z = calloc(1, big);
    assert_non_null(z);
    uint64_t hl = big - 16;
    for (int i = 0; i < 8; i++) z[i] = (unsigned char)(hl >> (8 * i));
    z[8] = '{';
    struct hs_safetensors *st = NULL;
    struct hs_error e;
    assert_int_equal(hs_safetensors_open_buffer(z, big, "huge", &st, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "limit"));
    free(z);
}

static void bad_json(void **state)
{
    (void)state;
    struct hs_error e;
    const char *cases[] = {
        "{",
        "[]",
        "  {}",
        "{\"a\":1}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\x01",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}",
        "{\"__metadata__\":[1],\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
        "}",
        "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        hs_status s = try_header(cases[k], 8, &e);
        if (s != HS_STATUS_CORRUPT) fail_msg("case %zu: status %d", k, s);
    }
}

static void bad_entries(void **state)
{
    (void)state;
    struct hs_error e;
#define T(dtype, shape, offs)                                                                      \
    "{\"a\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offs "}}"
    /* unknown dtypes */
    assert_int_equal(try_header(T("\"F64\"", "[1]", "[0,8]"), 8, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "F64"));
    assert_int_equal(try_header(T("\"f32\"", "[1]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("7", "[1]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    /* shape / size mismatch */
    assert_int_equal(try_header(T("\"F32\"", "[2,3]", "[0,20]"), 24, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "'a'"));
    assert_int_equal(try_header(T("\"F32\"", "[2,3]", "[0,28]"), 28, &e), HS_STATUS_CORRUPT);
    /* bad shape numbers */
    assert_int_equal(try_header(T("\"F32\"", "[-1]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1.0]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[\"1\"]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[null]", "[0,4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[99999999999999999999]", "[0,4]"), 8, &e),
                     HS_STATUS_CORRUPT);
    /* element count overflow, and byte count overflow */
    assert_int_equal(try_header(T("\"F32\"", "[4294967296,4294967296,16]", "[0,4]"), 8, &e),
                     HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "overflow"));
    assert_int_equal(try_header(T("\"F32\"", "[4611686018427387904]", "[0,0]"), 8, &e),
                     HS_STATUS_CORRUPT);
    /* wraps to 0 in 64 bits: 2^32 * 2^32 with a zero-sized range */
    assert_int_equal(try_header(T("\"U8\"", "[4294967296,4294967296]", "[0,0]"), 8, &e),
                     HS_STATUS_CORRUPT);
    /* too many dimensions */
    assert_int_not_equal(try_header(T("\"U8\"", "[1,1,1,1,1]", "[0,1]"), 8, &e), HS_STATUS_OK);
    /* offsets out of range, reversed, negative, fractional, wrong arity */
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[8,12]"), 8, &e), HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "beyond"));
    assert_int_equal(try_header(T("\"F32\"", "[0]", "[4,0]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[-4,0]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[0,4.0]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[0,4,8]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[4]"), 8, &e), HS_STATUS_CORRUPT);
    assert_int_equal(try_header(T("\"F32\"", "[1]", "[0,18446744073709551620]"), 8, &e),
                     HS_STATUS_CORRUPT);
    /* the exact fit is fine */
    assert_int_equal(try_header(T("\"F32\"", "[2]", "[0,8]"), 8, &e), HS_STATUS_OK);
#undef T
}

static void overlapping_ranges(void **state)
{
    (void)state;
    struct hs_error e;
    assert_int_equal(try_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                                24, &e),
                     HS_STATUS_CORRUPT);
    assert_non_null(strstr(e.msg, "overlap"));
    /* identical ranges, listed in reverse order */
    assert_int_equal(try_header("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                                "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]},"
                                "\"c\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                                16, &e),
                     HS_STATUS_CORRUPT);
    /* one range inside another, after a third */
    assert_int_equal(try_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[12],\"data_offsets\":[4,16]},"
                                "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}",
                                16, &e),
                     HS_STATUS_CORRUPT);
    /* adjacent ranges, gaps and empty tensors are fine */
    assert_int_equal(try_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                                "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                                "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                                16, &e),
                     HS_STATUS_OK);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void)
{
    /* xorshift64*: deterministic, so failures reproduce */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Random byte changes in the length prefix and header. A change can leave a valid file (a
 * different tensor name, a metadata letter); then every tensor must still lie inside the file.
 * Otherwise it is an error with a message. */
static void header_byte_flips(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    size_t n;
    unsigned char *orig = make_file(VALID_HEADER, VALID_DATA_BYTES, &n);
    size_t hend = 8 + strlen(VALID_HEADER);
    int errors = 0, oks = 0;
    for (int iter = 0; iter < 600; iter++) {
        unsigned char *b = malloc(n);
        memcpy(b, orig, n);
        int flips = 1 + (int)(rng_next() % 3);
        for (int f = 0; f < flips; f++) {
            size_t pos = rng_next() % hend;
            unsigned char v = (unsigned char)rng_next();
            if (v == b[pos]) v ^= 0x01;
            b[pos] = v;
        }
        struct hs_safetensors *st = NULL;
        struct hs_error e;
        hs_error_clear(&e);
        hs_status s = hs_safetensors_open_buffer(b, n, "flip", &st, &e);
        if (s == HS_STATUS_OK) {
            oks++;
            for (int i = 0; i < hs_safetensors_count(st); i++) {
                struct hs_tensor t;
                assert_int_equal(hs_safetensors_get(st, hs_safetensors_name(st, i), &t, &e),
                                 HS_STATUS_OK);
                assert_true((const unsigned char *)t.data >= b + 8);
                assert_true((const unsigned char *)t.data + t.bytes <= b + n);
                assert_int_equal(t.bytes, (size_t)hs_tensor_numel(&t) * hs_dtype_size(t.dtype));
            }
            hs_safetensors_close(st);
        } else {
            errors++;
            assert_null(st);
            assert_true(s == HS_STATUS_CORRUPT || s == HS_STATUS_UNSUPPORTED);
            assert_true(strlen(e.msg) > 0);
        }
        free(b);
    }
    print_message("byte flips: %d rejected, %d still valid\n", errors, oks);
    assert_true(errors > 500);
    free(orig);
    assert_int_equal(hs_alloc_live(), live);
}

static void alloc_failures(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    size_t n;
    unsigned char *b = make_file(VALID_HEADER, VALID_DATA_BYTES, &n);
    int ok = 0;
    for (int k = 0; k < 64 && !ok; k++) {
        hs_alloc_fail_after(k);
        struct hs_safetensors *st = NULL;
        struct hs_error e;
        hs_status s = hs_safetensors_open_buffer(b, n, "oom", &st, &e);
        hs_alloc_fail_after(-1);
        if (s == HS_STATUS_OK) {
            ok = 1;
            check_valid(st, b + 8 + strlen(VALID_HEADER));
            hs_safetensors_close(st);
        } else {
            assert_int_equal(s, HS_STATUS_NO_MEMORY);
            assert_null(st);
        }
        assert_int_equal(hs_alloc_live(), live);
    }
    assert_true(ok);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_buffer_and_file), cmocka_unit_test(bad_arguments_and_io),
        cmocka_unit_test(real_model_file),       cmocka_unit_test(truncated_everywhere),
        cmocka_unit_test(header_length_bad),     cmocka_unit_test(bad_json),
        cmocka_unit_test(bad_entries),           cmocka_unit_test(overlapping_ranges),
        cmocka_unit_test(header_byte_flips),     cmocka_unit_test(alloc_failures),
    };
    return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
