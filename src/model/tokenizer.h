/* hetserve — BERT WordPiece tokenizer.
 *
 * Matches HuggingFace `tokenizers` (a BERT tokenizer.json: BertNormalizer + BertPreTokenizer +
 * WordPiece + [CLS]/[SEP] template) exactly, id for id:
 *   special tokens: the literal texts [CLS] [SEP] [UNK] [PAD] [MASK] (case-sensitive, those the
 *     vocab holds; other texts when opts name them, e.g. MPNet's <s> </s> [UNK] <pad> <mask>)
 *     are found in the raw text first and become their ids, as HF's added tokens do; the text
 *     between them is tokenized as below. Not reproduced: an added token's lstrip/rstrip
 *     (MPNet's <mask> swallows the spaces before it) and added tokens that are not one of
 *     these five (MPNet's <unk>, matched after normalization);
 *   cleaning: drop U+0000, U+FFFD and "other" characters (Cc, Cf, Co — private use — except
 *     \t \n \r), map every White_Space character to a space; unassigned code points are kept;
 *   CJK ideographs are surrounded by spaces (tokenize_chinese_chars);
 *   accent stripping (NFD, drop Mn marks) when strip_accents is on or follows lowercasing, then
 *     lowercasing (full mapping, so U+0130 becomes "i" + U+0307 when accents are kept);
 *   split on whitespace and on every punctuation character (ASCII punctuation ranges and
 *     Unicode P* categories), each punctuation char a token of its own;
 *   greedy longest-match-first WordPiece with the "##" continuation prefix; a word longer than
 *     100 characters (code points, after normalization), or one that cannot be matched, becomes
 *     [UNK];
 *   [CLS] ... [SEP] around the word pieces, truncated to max_tokens (specials included).
 * Character classes are HF's own, which mix Unicode versions (see tokenizer_tables.h and
 * tools/golden/gen_tokenizer_tables.py), not those of the installed utf8proc.
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
    /* Special token texts; NULL = BERT's [CLS] [SEP] [UNK] [PAD] [MASK]. MPNet's are <s> </s>
     * [UNK] <pad> <mask> (its RobertaProcessing template puts <s> .. </s> around the pieces).
     * Each is at most 31 bytes. */
    const char *cls_token, *sep_token, *unk_token, *pad_token, *mask_token;
};

/* Loads vocab.txt (one token per line, id = line number, trailing whitespace of a line ignored;
 * of repeated lines the last one's id is the token's id, as in HF). opts NULL means the defaults.
 * The special tokens [CLS], [SEP], [UNK], [PAD] (or the texts opts names) must be present;
 * [MASK] is optional. An option longer than 31 bytes is HS_STATUS_INVALID_ARGUMENT.
 * On success *out owns the tokenizer (free with hs_tokenizer_free); on failure *out is NULL and
 * the status is HS_STATUS_IO (cannot read), HS_STATUS_CORRUPT (missing special token, invalid
 * UTF-8, empty file), HS_STATUS_NO_MEMORY or HS_STATUS_INVALID_ARGUMENT. */
hs_status hs_tokenizer_load(const char *vocab_path, const struct hs_tokenizer_opts *opts,
                            struct hs_tokenizer **out, struct hs_error *err);
/* Loads a tokenizer.json (any HF pipeline, src/model/tokenizer/tok.h) behind this API:
 * hs_tokenizer_encode applies its template (truncated, longest first, to max_tokens); cls / sep
 * are the first and last tokens its template puts around a text (-1 without a template), pad
 * the file's padding id or its [PAD] / <pad> token. Errors as hs_tok_load. */
hs_status hs_tokenizer_load_json(const char *path, struct hs_tokenizer **out, struct hs_error *err);
/* A model folder's tokenizer: its tokenizer.json when there is one, else vocab.txt (opts). */
hs_status hs_tokenizer_load_dir(const char *dir, const struct hs_tokenizer_opts *opts,
                                struct hs_tokenizer **out, struct hs_error *err);
struct hs_tok;
/* The tokenizer.json pipeline, or NULL for a vocab.txt tokenizer. */
const struct hs_tok *hs_tokenizer_json(const struct hs_tokenizer *tok);
/* Frees a tokenizer; NULL is a no-op. No encode may be running on it. */
void hs_tokenizer_free(struct hs_tokenizer *tok);

/* Encodes text[0..len) into ids (capacity max_tokens >= 2): [CLS] pieces [SEP], truncated so
 * that at most max_tokens ids are written ([CLS], the first max_tokens - 2 pieces, [SEP]).
 * *n_tokens receives the count written; *n_full (may be NULL) the count the full text would need
 * (> *n_tokens when truncated). text may be NULL when len is 0; it need not be NUL-terminated
 * and may contain NUL bytes (which cleaning drops).
 * Allocates nothing for texts up to 255 code points, one scratch buffer (4 int32 per code point)
 * beyond. Errors: HS_STATUS_INVALID_INPUT (invalid UTF-8; err names the byte offset and why),
 * HS_STATUS_NO_MEMORY, HS_STATUS_INVALID_ARGUMENT (NULL pointers, max_tokens < 2); on error
 * ids, *n_tokens and *n_full are unspecified (HS_STATUS_TOO_LONG and HS_STATUS_INTERNAL guard
 * sizes that cannot occur in practice). Thread-safe. */
hs_status hs_tokenizer_encode(const struct hs_tokenizer *tok, const char *text, size_t len,
                              int32_t *ids, int max_tokens, int *n_tokens, int *n_full,
                              struct hs_error *err);

/* Encodes a pair (a cross-encoder's query and document) with the tokenizer.json template:
 * ids and type_ids (capacity max_tokens each), truncated longest first (HF's default) so that
 * at most max_tokens are written; *n_full (may be NULL) the untruncated count. A tokenizer
 * from vocab.txt alone has no pair template: HS_STATUS_UNSUPPORTED. Other errors as
 * hs_tokenizer_encode. Thread-safe. */
hs_status hs_tokenizer_encode_pair(const struct hs_tokenizer *tok, const char *a, size_t a_len,
                                   const char *b, size_t b_len, int32_t *ids, int32_t *type_ids,
                                   int max_tokens, int *n_tokens, int *n_full,
                                   struct hs_error *err);

/* The same with the direction of the cut: left keeps each sequence's last tokens (HF's
 * truncation_side="left"; the lengths kept are those of longest first either way, the template's
 * special tokens stay). */
hs_status hs_tokenizer_encode_pair_dir(const struct hs_tokenizer *tok, const char *a, size_t a_len,
                                       const char *b, size_t b_len, int32_t *ids, int32_t *type_ids,
                                       int max_tokens, bool left, int *n_tokens, int *n_full,
                                       struct hs_error *err);

/* Number of lines in vocab.txt. */
int hs_tokenizer_vocab_size(const struct hs_tokenizer *tok);
/* Token text for an id (owned by the tokenizer, valid until it is freed), or NULL when out of
 * range. */
const char *hs_tokenizer_id_to_token(const struct hs_tokenizer *tok, int32_t id);
/* Id of a token text (exact bytes, no normalization), or -1 (also for NULL). */
int32_t hs_tokenizer_token_to_id(const struct hs_tokenizer *tok, const char *token);
int32_t hs_tokenizer_cls_id(const struct hs_tokenizer *tok);
int32_t hs_tokenizer_sep_id(const struct hs_tokenizer *tok);
int32_t hs_tokenizer_pad_id(const struct hs_tokenizer *tok);

#endif
