/* Fuzz: the WordPiece tokenizer (model/tokenizer.c) on arbitrary bytes, under every
 * normalization setting, with the committed vocabularies of tests/data.
 *
 * Input: the first byte chooses the settings, the rest is the text.
 *   bit 0     do_lower_case
 *   bits 1-2  strip_accents: 0 and 3 = follow lowercasing (-1), 1 = no, 2 = yes
 *   bit 3     tokenize_chinese_chars
 *   bit 4     vocabulary: 0 = tiny-bert-cls (BERT specials), 1 = tiny-mpnet (<s> </s> <pad> ...)
 *   bits 5-7  max_tokens: 2, 3, 5, 16, 128, 512, or room for every token (twice)
 * Checks: invalid UTF-8 (as utf8proc judges it) and only that is refused, with the byte offset;
 * [CLS] .. [SEP] framing, ids in the vocabulary, the truncated encoding a prefix of the full
 * one, and at most one piece per input byte (POST /tokenize sizes its buffer by that); nothing
 * leaks Each input runs once more with allocations failing from the n-th on
 * (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <string.h>

#include <utf8proc.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/tokenizer.h"

static struct hs_tokenizer *cache[32];

static struct hs_tokenizer *tokenizer(unsigned sel)
{
    sel &= 31;
    if (cache[sel]) return cache[sel];
    static const int strip[4] = {-1, 0, 1, -1};
    struct hs_tokenizer_opts o = {.do_lower_case = sel & 1,
                                  .strip_accents = strip[(sel >> 1) & 3],
                                  .tokenize_chinese_chars = (sel >> 3) & 1};
    const char *vocab = "tests/data/tiny-bert-cls/vocab.txt";
    if (sel & 16) {
        vocab = "tests/data/tiny-mpnet/vocab.txt";
        o.cls_token = "<s>";
        o.sep_token = "</s>";
        o.unk_token = "[UNK]";
        o.pad_token = "<pad>";
        o.mask_token = "<mask>";
    }
    struct hs_error err = {0};
    if (hs_tokenizer_load(fuzz_path(vocab), &o, &cache[sel], &err) != HS_STATUS_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
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

static int check(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const struct hs_tokenizer *tok = tokenizer(data[0]);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    static const int limits[7] = {2, 3, 5, 16, 128, 512, 0};
    int max_tokens = limits[(data[0] >> 5) % 7];
    /* every piece consumes at least one byte, so len + 2 holds the whole encoding */
    int room = (int)len + 2;
    if (max_tokens == 0 || max_tokens > room) max_tokens = room;
    int64_t live = hs_alloc_live();

    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_tokens);
    int n = -1, n_full = -1;
    struct hs_error err = {0};
    hs_status st = hs_tokenizer_encode(tok, text, len, ids, max_tokens, &n, &n_full, &err);
    if (!valid_utf8((const uint8_t *)text, len)) {
        FUZZ_CHECK(st == HS_STATUS_INVALID_INPUT);
        FUZZ_CHECK(strstr(err.msg, "byte offset") != NULL);
        free(ids);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    FUZZ_CHECK(st == HS_STATUS_OK);
    FUZZ_CHECK(n >= 2 && n <= max_tokens);
    FUZZ_CHECK(n_full >= n && n_full <= room);
    FUZZ_CHECK(n_full == n || n == max_tokens);
    const int vocab = hs_tokenizer_vocab_size(tok);
    FUZZ_CHECK(ids[0] == hs_tokenizer_cls_id(tok) && ids[n - 1] == hs_tokenizer_sep_id(tok));
    for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);

    if (n_full > n) {
        /* truncation keeps the first pieces of the full encoding */
        int32_t *all = malloc(sizeof(int32_t) * (size_t)room);
        int m = -1, m_full = -1;
        FUZZ_CHECK(hs_tokenizer_encode(tok, text, len, all, room, &m, &m_full, NULL) ==
                   HS_STATUS_OK);
        FUZZ_CHECK(m == n_full && m_full == n_full);
        FUZZ_CHECK(memcmp(all, ids, sizeof(int32_t) * (size_t)(n - 1)) == 0);
        free(all);
    }
    free(ids);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}

/* Once more with allocations failing (a text over 255 code points allocates its scratch): a
 * clean refusal, nothing leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    if (size < 1) return;
    const struct hs_tokenizer *tok = tokenizer(data[0]);
    int64_t live = hs_alloc_live();
    int32_t ids[16];
    int n = 0;
    fuzz_fail_allocs(data, size);
    hs_status st =
        hs_tokenizer_encode(tok, (const char *)data + 1, size - 1, ids, 16, &n, NULL, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY || st == HS_STATUS_INVALID_INPUT);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
