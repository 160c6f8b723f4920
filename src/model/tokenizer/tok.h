/* hetserve — the HuggingFace `tokenizer.json` pipeline, in C.
 *
 * hs_tok_load reads a tokenizer.json and builds the pipeline HF `tokenizers` runs, in its order:
 * added tokens with `normalized: false` are split out of the raw text, the normalizer runs on the
 * rest, added tokens with `normalized: true` are split out of the normalized text, then the
 * pre-tokenizer, the model (WordPiece, BPE or Unigram), truncation (the file's, or the caller's)
 * and the post-processor (templates, type ids). Every component is one row of a table keyed by
 * its JSON "type" (the files of src/model/tokenizer/); an unknown kind or a malformed option is
 * refused at load with the JSON path and the kinds supported.
 *
 * Offsets are byte offsets into each input text, or character (code point) offsets when asked
 * for (what HF's Python `encode` returns); special tokens of the template have (0, 0).
 * Not reproduced: BPE dropout (refused at load), truncation's stride and overflowing encodings
 * (the tokens cut are dropped), the file's padding (callers pad; hs_tok_pad_id gives the id),
 * Unicode tables newer or older than utf8proc's / PCRE2's for code points assigned recently, and
 * vocabulary texts containing U+0000 (jansson refuses a NUL in an object key: the load fails
 * with the line and column).
 *
 * A tokenizer is read-only after load and safe to use from many threads at once.
 */
#ifndef HS_MODEL_TOKENIZER_TOK_H
#define HS_MODEL_TOKENIZER_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct hs_tok;

enum hs_tok_trunc_strategy {
    HS_TOK_TRUNC_LONGEST_FIRST,
    HS_TOK_TRUNC_ONLY_FIRST,
    HS_TOK_TRUNC_ONLY_SECOND,
};

struct hs_tok_trunc {
    int max_length; /* < 0: no truncation */
    enum hs_tok_trunc_strategy strategy;
    bool left; /* direction: drop tokens from the left */
};

struct hs_tok_encode_opts {
    bool add_special_tokens; /* apply the post-processor's template */
    bool char_offsets;       /* offsets in code points instead of bytes */
    /* Truncation: NULL = the file's "truncation" (none when it is null). */
    const struct hs_tok_trunc *truncation;
};

/* One encoding; arrays owned by it (free with hs_tok_encoding_free). */
struct hs_tok_encoding {
    size_t n;
    int32_t *ids;
    int32_t *type_ids;
    uint8_t *special;  /* 1 for the post-processor's added tokens */
    uint8_t *sequence; /* 0 = first text, 1 = pair, 255 = template token */
    uint32_t *start, *end;
};

/* Loads a tokenizer.json (path) or its text (json, len bytes). On success *out owns the
 * tokenizer; on failure *out is NULL, err names the JSON path and, for an unknown component,
 * the kinds supported: HS_STATUS_IO, HS_STATUS_CORRUPT (malformed), HS_STATUS_UNSUPPORTED (a
 * component kind or option not implemented), HS_STATUS_NO_MEMORY. */
hs_status hs_tok_load(const char *path, struct hs_tok **out, struct hs_error *err);
hs_status hs_tok_load_json(const char *json, size_t len, struct hs_tok **out, struct hs_error *err);
void hs_tok_free(struct hs_tok *tok);

/* Encodes a text (and a pair text when pair is not NULL). text/pair need not be
 * NUL-terminated; invalid UTF-8 is HS_STATUS_INVALID_INPUT with the byte offset. On success out
 * holds the encoding (free it with hs_tok_encoding_free); on failure it is empty. Errors also:
 * HS_STATUS_NO_MEMORY, HS_STATUS_INVALID_ARGUMENT (truncation that cannot be met: a max_length
 * below the template's added tokens, only_second without a pair, a sequence too short).
 * Thread-safe. */
hs_status hs_tok_encode(const struct hs_tok *tok, const char *text, size_t len, const char *pair,
                        size_t pair_len, const struct hs_tok_encode_opts *opts,
                        struct hs_tok_encoding *out, struct hs_error *err);
void hs_tok_encoding_free(struct hs_tok_encoding *enc);

/* An upper bound of the token count hs_tok_encode can return for texts of these byte lengths
 * (pair_len 0 and has_pair false for one text), with the template's added tokens. */
size_t hs_tok_max_tokens(const struct hs_tok *tok, size_t len, bool has_pair, size_t pair_len);

/* Number of tokens the post-processor adds for one text or a pair. */
int hs_tok_added_tokens(const struct hs_tok *tok, bool pair);

/* Decodes ids into text (the file's decoder; NULL decoder: tokens joined by spaces). *out is
 * NUL-terminated, owned by the caller (hs_free), *out_len its length. Ids out of range are
 * HS_STATUS_INVALID_INPUT. */
hs_status hs_tok_decode(const struct hs_tok *tok, const int32_t *ids, size_t n,
                        bool skip_special_tokens, char **out, size_t *out_len,
                        struct hs_error *err);

/* Whether the pipeline is exactly BERT's (BertNormalizer with clean_text, BertPreTokenizer,
 * WordPiece with "##" and 100 chars a word, a [CLS] $A [SEP] template, added tokens only the
 * special, unstripped, unnormalized ones), which the vocab.txt WordPiece tokenizer reproduces;
 * then *lower, *strip, *chinese are its normalizer's options. */
bool hs_tok_is_plain_bert(const struct hs_tok *tok, bool *lower, bool *strip, bool *chinese);

/* Vocabulary (model and added tokens). */
int32_t hs_tok_vocab_size(const struct hs_tok *tok);
const char *hs_tok_id_to_token(const struct hs_tok *tok, int32_t id); /* NULL when unknown */
int32_t hs_tok_token_to_id(const struct hs_tok *tok, const char *token, size_t len); /* -1 */
/* The padding id of the file ("padding" or a pad token of the vocabulary), or -1. */
int32_t hs_tok_pad_id(const struct hs_tok *tok);
/* Whether the id is one of the added tokens marked special. */
bool hs_tok_is_special(const struct hs_tok *tok, int32_t id);

#endif
