/* Fuzz: encoding arbitrary text with each committed tokenizer.json (tests/data/tokenizer_json/:
 * WordPiece, byte-level BPE, Qwen2 Split + ByteLevel, SentencePiece BPE with byte fallback,
 * Unigram with a Precompiled charsmap).
 *
 * Input: byte 0 chooses the tokenizer (bits 0-2) and the mode (bit 3: a pair, split at the
 * first 0xFF byte; bit 4: no template; bit 5: char offsets; bits 6-7: truncation none / 8 / 3 /
 * 64 with a strategy and direction from byte 1), the rest is the text.
 * Checks: invalid UTF-8 (and only that) is refused with the byte offset; otherwise OK (or, with
 * truncation, a documented refusal), at most hs_tok_max_tokens tokens, every id known to the
 * tokenizer, offsets inside their text and ordered, the template's tokens (0, 0) with the special
 * mask; truncation returns at most max_length tokens; the ids decode. Nothing leaks. Each input
 * runs once more with allocations failing from the n-th on: a clean refusal, nothing leaked.
 */
#include <string.h>

#include <utf8proc.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/tokenizer/tok.h"

static const char *const files[8] = {"bert_uncased", "bert_chinese", "bert_processing",
                                     "roberta",      "qwen2",        "llama",
                                     "xlmr",         "bert_cased"};
static struct hs_tok *cache[8];

static struct hs_tok *tokenizer(unsigned sel)
{
    if (cache[sel]) return cache[sel];
    char rel[128];
    snprintf(rel, sizeof rel, "tests/data/tokenizer_json/%s.tokenizer.json", files[sel]);
    struct hs_error err = {0};
    if (hs_tok_load(fuzz_path(rel), &cache[sel], &err) != HS_STATUS_OK) {
        fprintf(stderr, "fuzz_tokenizer_encode: %s\n", err.msg);
        abort();
    }
    return cache[sel];
}

static bool valid_utf8(const uint8_t *s, size_t n)
{
    utf8proc_int32_t c;
    while (n > 0) {
        utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)n, &c);
        if (k <= 0) return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

static void run(const uint8_t *data, size_t size, bool oom)
{
    if (size < 2) return;
    const struct hs_tok *tok = tokenizer(data[0] & 7);
    bool pair = data[0] & 8, nospecial = data[0] & 16, chars = data[0] & 32;
    static const int maxes[4] = {-1, 8, 3, 64};
    struct hs_tok_trunc t = {.max_length = maxes[data[0] >> 6],
                             .strategy = (enum hs_tok_trunc_strategy)(data[1] % 3),
                             .left = data[1] & 4};
    const char *a = (const char *)data + 2, *b = NULL;
    size_t na = size - 2, nb = 0;
    if (pair) {
        const char *sep = memchr(a, 0xFF, na);
        if (sep) {
            b = sep + 1;
            nb = na - (size_t)(b - a);
            na = (size_t)(sep - a);
        } else {
            b = "";
        }
    }
    struct hs_tok_encode_opts o = {
        .add_special_tokens = !nospecial, .char_offsets = chars, .truncation = &t};
    int64_t live = hs_alloc_live();
    struct hs_tok_encoding e;
    struct hs_error err = {0};
    if (oom) fuzz_fail_allocs(data, size);
    hs_status st = hs_tok_encode(tok, a, na, b, nb, &o, &e, &err);
    if (oom) {
        fuzz_fail_allocs_end();
        FUZZ_CHECK(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY ||
                   st == HS_STATUS_INVALID_INPUT || st == HS_STATUS_INVALID_ARGUMENT);
        if (st == HS_STATUS_OK) hs_tok_encoding_free(&e);
        FUZZ_CHECK(hs_alloc_live() == live);
        return;
    }
    bool valid = valid_utf8((const uint8_t *)a, na) && (!b || valid_utf8((const uint8_t *)b, nb));
    if (!valid) {
        FUZZ_CHECK(st == HS_STATUS_INVALID_INPUT);
        FUZZ_CHECK(strstr(err.msg, "byte offset") != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return;
    }
    if (t.max_length >= 0 && st == HS_STATUS_INVALID_ARGUMENT) {
        FUZZ_CHECK(hs_alloc_live() == live);
        return; /* a truncation that cannot be met (as HF refuses it) */
    }
    FUZZ_CHECK(st == HS_STATUS_OK);
    FUZZ_CHECK(e.n <= hs_tok_max_tokens(tok, na, b != NULL, nb));
    if (t.max_length >= 0) FUZZ_CHECK(e.n <= (size_t)t.max_length);
    for (size_t k = 0; k < e.n; k++) {
        FUZZ_CHECK(hs_tok_id_to_token(tok, e.ids[k]) != NULL);
        if (e.sequence[k] == 255) {
            FUZZ_CHECK(e.special[k] == 1 && e.start[k] == 0 && e.end[k] == 0);
            continue;
        }
        FUZZ_CHECK(e.special[k] == 0);
        size_t lim = e.sequence[k] ? nb : na;
        FUZZ_CHECK(e.start[k] <= e.end[k] && e.end[k] <= lim);
    }
    char *out = NULL;
    size_t len = 0;
    FUZZ_CHECK(hs_tok_decode(tok, e.ids, e.n, true, &out, &len, &err) == HS_STATUS_OK);
    FUZZ_CHECK(out != NULL && valid_utf8((const uint8_t *)out, len));
    hs_free(out);
    hs_tok_encoding_free(&e);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, false);
    run(data, size, true);
    return 0;
}
