/* Fuzz: the body of POST /v1/ocr (server/ocr_http.c, hs__ocr_body: raw image bytes, or JSON
 * {"image": base64}) and the image it yields through the decoders (ops/image.c, hs_image_decode
 * with small limits). Input: the Content-Type on the first line, then the body.
 * Checks: a refused body is 400, 413 or 500 with a message and no bytes; an accepted one has
 * 1 .. max_bytes bytes, all readable; the image is decoded or refused with INVALID_INPUT (or
 * NO_MEMORY) and a message; nothing leaks. Each input runs once more with allocations failing
 * from the n-th on (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "ops/image.h"
#include "server/server-impl.h"

static volatile unsigned sink;

static void check(const uint8_t *data, size_t size)
{
    const int64_t live = hs_alloc_live();
    const uint8_t *nl = memchr(data, '\n', size);
    char ctype[128] = "";
    const char *body = (const char *)data;
    size_t len = size;
    if (nl && (size_t)(nl - data) < sizeof ctype) {
        memcpy(ctype, data, (size_t)(nl - data));
        ctype[nl - data] = 0;
        body = (const char *)nl + 1;
        len = size - (size_t)(nl - data) - 1;
    }
    uint8_t *bytes = NULL;
    size_t n = 0;
    char msg[HS__MSG_MAX] = "";
    const int64_t max_bytes = 8192;
    const int st =
        hs__ocr_body(body, len, ctype[0] ? ctype : NULL, max_bytes, &bytes, &n, msg, sizeof msg);
    if (st) {
        FUZZ_CHECK(st == 400 || st == 413 || st == 500);
        FUZZ_CHECK(bytes == NULL && msg[0]);
        FUZZ_CHECK(hs_alloc_live() == live);
        return;
    }
    FUZZ_CHECK(bytes && n >= 1 && (int64_t)n <= max_bytes);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++) sum += bytes[i];
    sink = sum;
    const struct hs_image_limits lim = {
        .max_bytes = max_bytes, .max_pixels = 1 << 20, .max_side = 2048};
    struct hs_image img;
    struct hs_error err = {0};
    hs_status s = hs_image_decode(bytes, n, &lim, &img, &err);
    if (s) {
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT || s == HS_STATUS_NO_MEMORY);
        FUZZ_CHECK(img.px == NULL && err.msg[0]);
    } else {
        FUZZ_CHECK(img.w >= 1 && img.h >= 1 && (int64_t)img.w * img.h <= lim.max_pixels);
        hs_image_free(&img);
    }
    hs_free(bytes);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    check(data, size);
    fuzz_fail_allocs(data, size);
    check(data, size);
    fuzz_fail_allocs_end();
    return 0;
}
