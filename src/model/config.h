/* hetserve — model folder configuration.
 *
 * Reads the files of a HuggingFace / sentence-transformers model folder:
 *   config.json                      model_type and hyper-parameters (required; model/arch.h
 *                                    names the families and their keys)
 *   1_Pooling/config.json            pooling mode (optional; default mean)
 *   modules.json                     whether a Normalize module follows (optional)
 *   sentence_bert_config.json        max_seq_length (optional)
 *   tokenizer_config.json            do_lower_case, strip_accents, tokenize_chinese_chars,
 *                                    cls/sep/unk/pad/mask_token
 * Missing required keys, wrong JSON types, or values out of range (hidden not divisible by
 * heads, non-positive sizes, unknown activation) give HS_STATUS_CORRUPT with a message naming
 * the file and the key.
 */
#ifndef HS_MODEL_CONFIG_H
#define HS_MODEL_CONFIG_H

#include <stdbool.h>

#include "core/status.h"
#include "engine/stage.h"

struct hs_arch;

struct hs_model_config {
    struct hs_encoder_dims dims;
    int max_seq_len; /* sentence_bert_config max_seq_length, capped by the positions a
                        sequence can use (max_positions - pos_offset) */
    int pad_token_id;
    char model_type[32];        /* config.json's model_type, e.g. "bert", "xlm-roberta" */
    const struct hs_arch *arch; /* its family's row (model/arch.h) */
    /* tokenizer options */
    bool do_lower_case;          /* default true */
    int strip_accents;           /* -1 = follow do_lower_case (HF null), 0 = no, 1 = yes */
    bool tokenize_chinese_chars; /* default true */
    /* special tokens (tokenizer_config.json; BERT's [CLS] [SEP] [UNK] [PAD] [MASK] by default;
     * MPNet: <s> </s> [UNK] <pad> <mask>) */
    char cls_token[32], sep_token[32], unk_token[32], pad_token[32], mask_token[32];
};

/* Parses the folder's config files into *out. */
hs_status hs_model_config_load(const char *dir, struct hs_model_config *out, struct hs_error *err);
/* Parses a config.json text (for tests); fills dims and model_type only. */
hs_status hs_model_config_parse_hf(const char *json_text, const char *label,
                                   struct hs_model_config *out, struct hs_error *err);

#endif
