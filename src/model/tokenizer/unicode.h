/* hetserve — UTF-8 and character classes of the tokenizers (src/model/tokenizer/unicode.c),
 * shared by the tokenizer.json pipeline and the BERT WordPiece fast path (model/tokenizer.c).
 */
#ifndef HS_MODEL_TOKENIZER_UNICODE_H
#define HS_MODEL_TOKENIZER_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool tk_utf8_validate(const unsigned char *s, size_t len, size_t *n_cps, size_t *bad,
                      const char **why);
int32_t tk_utf8_next(const unsigned char **p);
int tk_utf8_put(int32_t c, char *out);
int tk_utf8_len(int32_t c);
bool tk_is_whitespace(int32_t c); /* Rust char::is_whitespace */
bool tk_is_bert_whitespace(int32_t c);
bool tk_is_bert_control(int32_t c);
bool tk_is_bert_punct(int32_t c);
bool tk_is_punct(int32_t c); /* ASCII punctuation or Unicode P* */
bool tk_is_numeric(int32_t c);
bool tk_is_chinese(int32_t c);
bool tk_is_mn(int32_t c);
bool tk_is_alnum(int32_t c); /* regex \w of HF's single_word check */
int tk_lowercase(int32_t c, int32_t out[3]);
int tk_ccc(int32_t c);
/* Decomposition of one char: canonical (compat false) or compatibility; HF's tables for the
 * canonical one. Returns the count (<= 18) written to out. */
int tk_decompose(int32_t c, bool compat, int32_t out[32]);
/* Canonical composition of a pair, or -1. */
int32_t tk_compose(int32_t a, int32_t b);
/* End (code point index) of the extended grapheme cluster starting at i. */
size_t tk_grapheme_end(const int32_t *cp, size_t n, size_t i);

#endif
