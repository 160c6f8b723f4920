/* Fuzz: tokenizer.json loading (src/model/tokenizer/, hs_tok_load_json) on arbitrary documents,
 * every component's options, then encoding and decoding with whatever loads.
 *
 * Input: a tokenizer.json document (seeds: small files with each normalizer, pre-tokenizer,
 * model, post-processor and decoder kind).
 * Checks: a document is loaded, or refused with HS_STATUS_CORRUPT / UNSUPPORTED / NO_MEMORY and
 * a message that starts with "tokenizer.json:"; a loaded tokenizer encodes a few fixed texts
 * (singles and a pair, with and without the template, with truncation) without crashing: OK or
 * a documented refusal, at most hs_tok_max_tokens tokens, offsets inside their text (the
 * template's tokens (0, 0)); its ids decode. Nothing leaks. Each input runs once more with
 * allocations failing from the n-th on: a clean refusal, nothing leaked.
 */
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/tokenizer/tok.h"

static const char *const texts[] = {"Hello, wörld! 北京 ", "", "  a\tb  <s>x</s> [SEP]",
                                    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD e\xCC\x81"};

static void exercise(const struct hs_tok *tok)
{
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (int mode = 0; mode < 4; mode++) {
            const char *a = texts[i], *b = mode >= 2 ? texts[(i + 1) % 4] : NULL;
            size_t na = strlen(a), nb = b ? strlen(b) : 0;
            struct hs_tok_trunc t = {.max_length = mode == 3 ? 5 : -1};
            struct hs_tok_encode_opts o = {
                .add_special_tokens = mode != 1, .char_offsets = i == 3, .truncation = &t};
            struct hs_tok_encoding e;
            struct hs_error err = {0};
            hs_status st = hs_tok_encode(tok, a, na, b, nb, &o, &e, &err);
            FUZZ_CHECK(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY ||
                       st == HS_STATUS_INVALID_ARGUMENT || st == HS_STATUS_INVALID_INPUT);
            if (st != HS_STATUS_OK) continue;
            if (mode != 3) FUZZ_CHECK(e.n <= hs_tok_max_tokens(tok, na, b != NULL, nb));
            for (size_t k = 0; k < e.n; k++) {
                if (e.sequence[k] == 255) {
                    FUZZ_CHECK(e.start[k] == 0 && e.end[k] == 0);
                    continue;
                }
                size_t lim = e.sequence[k] ? nb : na;
                FUZZ_CHECK(e.start[k] <= lim && e.end[k] <= lim);
            }
            char *out = NULL;
            size_t len = 0;
            st = hs_tok_decode(tok, e.ids, e.n, mode == 0, &out, &len, &err);
            FUZZ_CHECK(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY ||
                       st == HS_STATUS_INVALID_INPUT);
            if (st == HS_STATUS_OK) FUZZ_CHECK(out && strlen(out) <= len);
            hs_free(out);
            hs_tok_encoding_free(&e);
        }
    }
}

static void run(const uint8_t *data, size_t size, bool oom)
{
    int64_t live = hs_alloc_live();
    struct hs_tok *tok = NULL;
    struct hs_error err = {0};
    if (oom) fuzz_fail_allocs(data, size);
    hs_status st = hs_tok_load_json((const char *)data, size, &tok, &err);
    if (st == HS_STATUS_OK) {
        FUZZ_CHECK(tok != NULL);
        exercise(tok);
        hs_tok_free(tok);
    } else {
        FUZZ_CHECK(tok == NULL);
        FUZZ_CHECK(st == HS_STATUS_CORRUPT || st == HS_STATUS_UNSUPPORTED ||
                   st == HS_STATUS_NO_MEMORY);
        FUZZ_CHECK(st == HS_STATUS_NO_MEMORY || strncmp(err.msg, "tokenizer.json:", 15) == 0);
    }
    if (oom) fuzz_fail_allocs_end();
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, false);
    run(data, size, true);
    return 0;
}
