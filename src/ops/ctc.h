/* hetserve — CTC greedy decoding with a recognizer's character dictionary (PaddleOCR's
 * CTCLabelDecode).
 *
 * The dictionary is a text file with one token (a UTF-8 string, usually one character) per
 * line; class 0 of the model is the CTC blank, class i the dictionary's line i - 1, and with
 * use_space a last class for " ".
 */
#ifndef HS_OPS_CTC_H
#define HS_OPS_CTC_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

struct hs_ctc_dict {
    int n;         /* classes: blank + lines (+ space) */
    char **tok;    /* [n]: tok[0] = "" (blank) */
    char *storage; /* the tokens' bytes */
};

/* Reads a dictionary from text[len] (lines end in \n or \r\n; the line ends are stripped, every
 * other byte kept). HS_STATUS_INVALID_INPUT for an empty dictionary or one that is not UTF-8. */
hs_status hs_ctc_dict_parse(const char *text, size_t len, bool use_space, struct hs_ctc_dict *d,
                            struct hs_error *err);
/* The same from a file. */
hs_status hs_ctc_dict_load(const char *path, bool use_space, struct hs_ctc_dict *d,
                           struct hs_error *err);
void hs_ctc_dict_free(struct hs_ctc_dict *d);

/* Greedy decoding of probs[t_len][n_classes] (softmax outputs): each step's most probable class
 * (the first of equals), repeats merged, blanks dropped; the tokens' text into out (cap bytes,
 * NUL-terminated; HS_STATUS_TOO_LONG when it does not fit), *score the mean probability of the
 * kept steps (0 when none). HS_STATUS_INVALID_ARGUMENT when n_classes is not the dictionary's. */
hs_status hs_ctc_decode(const float *probs, int t_len, int n_classes, const struct hs_ctc_dict *d,
                        char *out, size_t cap, float *score, struct hs_error *err);

#endif
