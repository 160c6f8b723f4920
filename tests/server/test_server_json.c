/* JSON output: float formatting round-trips exactly, escaping, base64, buffers. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "server/json.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void check_roundtrip(float f)
{
    char buf[HS_JSON_FLOAT_MAX + 1];
    int n = hs_json_float(buf, f);
    assert_true(n > 0 && n <= HS_JSON_FLOAT_MAX);
    buf[n] = '\0';
    float back = strtof(buf, NULL);
    if (memcmp(&back, &f, sizeof f) != 0 && !(f == 0 && back == 0))
        fail_msg("%.9g printed as %s reads back as %.9g", (double)f, buf, (double)back);
}

static void floats_roundtrip(void **state)
{
    (void)state;
    const float special[] = {
        0.0f,   -0.0f,       1.0f,         -1.0f,      0.1f,          1e-5f,           1e-6f,
        123.0f, 1e8f,        1e9f,         1e10f,      3.4028235e38f, 1.17549435e-38f, 1e-45f,
        0.5f,   99999999.0f, 999999999.0f, 0.00999999f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) check_roundtrip(special[i]);
    /* every exponent, random mantissas: bit patterns of all finite floats */
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = rnd();
        float f;
        memcpy(&f, &bits, sizeof f);
        if (!isfinite(f)) continue;
        check_roundtrip(f);
    }
    /* the values embeddings take */
    for (int i = 0; i < 200000; i++) check_roundtrip(((float)rnd() / 4294967296.0f - 0.5f) * 0.4f);
    char buf[32];
    buf[hs_json_float(buf, 0.25f)] = '\0';
    assert_string_equal(buf, "0.25");
    buf[hs_json_float(buf, -3.0f)] = '\0';
    assert_string_equal(buf, "-3");
    buf[hs_json_float(buf, NAN)] = '\0';
    assert_string_equal(buf, "null");
    buf[hs_json_float(buf, 1e-7f)] = '\0';
    assert_string_equal(buf, "1.00000001e-7");
}

static void buffers_and_escaping(void **state)
{
    (void)state;
    struct hs_buf b;
    hs_buf_init(&b, NULL, 0);
    hs_buf_json_str(&b, "a\"b\\c\n\x01z", 8);
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\n\\u0001z\"");
    hs_buf_free(&b);
    /* UTF-8 passes; what is not (a cut character, a stray byte, a surrogate) becomes U+FFFD */
    hs_buf_init(&b, NULL, 0);
    hs_buf_json_str(&b, "\xc3\xa9\xf0\x9f\x98\x80|\xc3|\xff\x80|\xed\xa0\x80|\xe4\xb8", 18);
    assert_string_equal(b.data, "\"\xc3\xa9\xf0\x9f\x98\x80|\\ufffd|\\ufffd\\ufffd|"
                                "\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\"");
    hs_buf_free(&b);
    hs_buf_init(&b, NULL, 0);
    hs_buf_base64(&b, "foobar", 6);
    hs_buf_putc(&b, ' ');
    hs_buf_base64(&b, "fooba", 5);
    hs_buf_putc(&b, ' ');
    hs_buf_base64(&b, "f", 1);
    assert_string_equal(b.data, "Zm9vYmFy Zm9vYmE= Zg==");
    hs_buf_free(&b);
    /* arena-backed growth across many chunks */
    struct hs_arena *a = hs_arena_create(1024);
    hs_buf_init(&b, a, 0);
    for (int i = 0; i < 10000; i++) hs_buf_printf(&b, "%d,", i);
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_true(b.len > 40000);
    hs_arena_destroy(a);
    hs_buf_init(&b, NULL, 0);
    hs_json_error(&b, "bad \"thing\"", "invalid_request_error", 400);
    assert_string_equal(b.data, "{\"error\":{\"message\":\"bad \\\"thing\\\"\",\"type\":"
                                "\"invalid_request_error\",\"code\":400}}");
    hs_buf_free(&b);
    /* allocation failure: the buffer stops growing and says so */
    hs_buf_init(&b, NULL, 0);
    hs_alloc_fail_after(0);
    hs_buf_puts(&b, "x");
    hs_alloc_fail_after(-1);
    assert_true(b.oom);
    hs_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(floats_roundtrip),
        cmocka_unit_test(buffers_and_escaping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
