/* hetserve — BERT WordPiece tokenizer.
 *
 * Matches HuggingFace `tokenizers` BertNormalizer + BertPreTokenizer + WordPiece exactly:
 *   cleaning: drop U+0000, U+FFFD and control characters (Cc/Cf except \t \n \r), map every
 *     whitespace character to a space;
 *   CJK ideographs are surrounded by spaces (tokenize_chinese_chars);
 *   lowercasing, and accent stripping (NFD, drop Mn marks) when strip_accents is on or follows
 *     lowercasing;
 *   split on whitespace and on every punctuation character (ASCII punctuation ranges and
 *     Unicode P* categories), each punctuation char a token of its own;
 *   greedy longest-match-first WordPiece with the "##" continuation prefix; a word longer than
 *     100 characters, or one that cannot be matched, becomes [UNK];
 *   [CLS] ... [SEP] around the word pieces, truncated to max_tokens (specials included).
 * Invalid UTF-8 in the input is rejected with HS_STATUS_INVALID_INPUT and a message naming the
 * byte offset; nothing is silently replaced.
 *
 * A tokenizer is read-only after load and safe to use from many threads at once.
 */
#ifndef HS_MODEL_TOKENIZER_H
#define HS_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct hs_tokenizer;

struct hs_tokenizer_opts {
    bool do_lower_case;          /* default true */
    int strip_accents;           /* -1 = same as do_lower_case, 0 = no, 1 = yes */
    bool tokenize_chinese_chars; /* default true */
};

/* Loads vocab.txt (one token per line, id = line number). The special tokens [CLS], [SEP],
 * [UNK], [PAD] must be present (HS_STATUS_CORRUPT otherwise). */
hs_status hs_tokenizer_load(const char *vocab_path, const struct hs_tokenizer_opts *opts,
                            struct hs_tokenizer **out, struct hs_error *err);
void hs_tokenizer_free(struct hs_tokenizer *tok);

/* Encodes text[0..len) into ids (capacity max_tokens >= 2): [CLS] pieces [SEP], truncated so
 * that at most max_tokens ids are written. *n_tokens receives the count written; *n_full (may
 * be NULL) the count the full text would need (> *n_tokens when truncated). */
hs_status hs_tokenizer_encode(const struct hs_tokenizer *tok, const char *text, size_t len,
                              int32_t *ids, int max_tokens, int *n_tokens, int *n_full,
                              struct hs_error *err);

int hs_tokenizer_vocab_size(const struct hs_tokenizer *tok);
/* Token text for an id, or NULL when out of range. */
const char *hs_tokenizer_id_to_token(const struct hs_tokenizer *tok, int32_t id);
/* Id of a token text, or -1. */
int32_t hs_tokenizer_token_to_id(const struct hs_tokenizer *tok, const char *token);
int32_t hs_tokenizer_cls_id(const struct hs_tokenizer *tok);
int32_t hs_tokenizer_sep_id(const struct hs_tokenizer *tok);
int32_t hs_tokenizer_pad_id(const struct hs_tokenizer *tok);

#endif
