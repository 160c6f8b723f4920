/* Fuzz: capture lines (server/capture.c, hs_capture_parse_line), the reader hetbench replay
 * runs on every line of a capture file.
 * Checks: a refused line says why (HS_STATUS_INVALID_INPUT and a message, the entry empty
 * once freed); an accepted one has a finite offset >= 0, an endpoint starting with '/' and
 * terminated, a terminated model and a valid (or empty) priority, token lengths in [2, 2^20],
 * texts either absent or one per length, a body's decoded size its body_bytes; formatting what it
 * read back as a line and parsing that gives the same entry (round trip); nothing leaks. Each input
 * runs once more with allocations failing from the n-th on (fuzz_fail_allocs): a clean refusal,
 * nothing leaked.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "sched/request.h"
#include "server/capture.h"
#include "server/json.h"

/* The entry as a capture line again (the fields the reader keeps). */
static void reformat(const struct hs_capture_entry *e, struct hs_buf *b)
{
    hs_buf_printf(b, "{\"v\":1,\"id\":%llu,\"offset_ms\":%.17g,\"endpoint\":",
                  (unsigned long long)e->id, e->offset_ms);
    hs_buf_json_str(b, e->endpoint, strlen(e->endpoint));
    hs_buf_printf(b, ",\"status\":%d", e->status);
    if (e->model[0]) {
        hs_buf_puts(b, ",\"model\":");
        hs_buf_json_str(b, e->model, strlen(e->model));
    }
    if (e->priority[0]) hs_buf_printf(b, ",\"priority\":\"%s\"", e->priority);
    hs_buf_printf(b, ",\"timeout_ms\":%lld,\"tokens\":[", e->timeout_ms);
    for (int i = 0; i < e->n_inputs; i++) hs_buf_printf(b, "%s%d", i ? "," : "", e->tokens[i]);
    hs_buf_putc(b, ']');
    if (e->texts) {
        hs_buf_puts(b, ",\"texts\":[");
        for (int i = 0; i < e->n_inputs; i++) {
            if (i) hs_buf_putc(b, ',');
            hs_buf_json_str(b, e->texts[i], strlen(e->texts[i]));
        }
        hs_buf_putc(b, ']');
    }
    if (e->truncate) hs_buf_puts(b, ",\"truncate\":true");
    if (e->content_type[0]) {
        hs_buf_puts(b, ",\"content_type\":");
        hs_buf_json_str(b, e->content_type, strlen(e->content_type));
    }
    if (e->body_bytes >= 0) hs_buf_printf(b, ",\"body_bytes\":%lld", e->body_bytes);
    if (e->body) {
        hs_buf_puts(b, ",\"body\":\"");
        hs_buf_base64(b, e->body, e->body_len);
        hs_buf_putc(b, '"');
    }
    hs_buf_putc(b, '}');
}

static void check_entry(const struct hs_capture_entry *e)
{
    FUZZ_CHECK(isfinite(e->offset_ms) && e->offset_ms >= 0);
    FUZZ_CHECK(memchr(e->endpoint, '\0', sizeof e->endpoint) && e->endpoint[0] == '/');
    FUZZ_CHECK(memchr(e->model, '\0', sizeof e->model) != NULL);
    FUZZ_CHECK(!e->priority[0] || hs_priority_parse(e->priority) >= 0);
    FUZZ_CHECK(e->n_inputs >= 0 && (e->n_inputs == 0 || e->tokens));
    for (int i = 0; i < e->n_inputs; i++) FUZZ_CHECK(e->tokens[i] >= 2 && e->tokens[i] <= 1 << 20);
    if (e->texts)
        for (int i = 0; i < e->n_inputs; i++) FUZZ_CHECK(e->texts[i] != NULL);
    FUZZ_CHECK(memchr(e->content_type, '\0', sizeof e->content_type) != NULL);
    FUZZ_CHECK(e->body_bytes >= -1 && e->body_bytes <= HS_CAPTURE_BODY_MAX);
    FUZZ_CHECK(!e->body || e->body_bytes < 0 || (long long)e->body_len == e->body_bytes);
    FUZZ_CHECK(e->body || e->body_len == 0);
}

static int check(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    struct hs_capture_entry e;
    struct hs_error err = {0};
    hs_status s = hs_capture_parse_line((const char *)data, size, &e, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT);
        FUZZ_CHECK(err.msg[0] != '\0');
        hs_capture_entry_free(&e);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    check_entry(&e);
    /* round trip (a text with a NUL inside comes back cut at it on both sides: C strings) */
    struct hs_buf b;
    hs_buf_init(&b, NULL, 256);
    reformat(&e, &b);
    FUZZ_CHECK(!b.oom);
    struct hs_capture_entry e2;
    FUZZ_CHECK(hs_capture_parse_line(b.data, b.len, &e2, NULL) == HS_STATUS_OK);
    FUZZ_CHECK(e2.id == e.id && e2.offset_ms == e.offset_ms && e2.status == e.status);
    FUZZ_CHECK(!strcmp(e2.endpoint, e.endpoint) && !strcmp(e2.model, e.model));
    FUZZ_CHECK(!strcmp(e2.priority, e.priority) && e2.timeout_ms == e.timeout_ms);
    FUZZ_CHECK(e2.n_inputs == e.n_inputs && (e2.texts == NULL) == (e.texts == NULL));
    FUZZ_CHECK(e2.truncate == e.truncate);
    FUZZ_CHECK(!strcmp(e2.content_type, e.content_type) && e2.body_bytes == e.body_bytes);
    FUZZ_CHECK((e2.body == NULL) == (e.body == NULL) && e2.body_len == e.body_len);
    FUZZ_CHECK(!e.body || !memcmp(e2.body, e.body, e.body_len));
    for (int i = 0; i < e.n_inputs; i++) {
        FUZZ_CHECK(e2.tokens[i] == e.tokens[i]);
        if (e.texts) FUZZ_CHECK(!strcmp(e2.texts[i], e.texts[i]));
    }
    hs_capture_entry_free(&e2);
    hs_buf_free(&b);
    hs_capture_entry_free(&e);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}

/* Once more with allocations failing: refused cleanly, nothing leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    struct hs_capture_entry e;
    fuzz_fail_allocs(data, size);
    hs_status s = hs_capture_parse_line((const char *)data, size, &e, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_INVALID_INPUT);
    hs_capture_entry_free(&e);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
