/* The tiny random checkpoint of every row of the architecture table (tests/data/tiny-<family>,
 * made by tools/golden/make_tiny_<family>.py) with its reference embeddings
 * (tests/golden/<golden>.{json,f32}: transformers, or for bert and mpnet sentence-transformers
 * through gen_embeddings.py)
 * and the block features its stages need all together. One list for tests/model/test_arch.c
 * and the conformance suite (tests/engine/test_conformance.c); tests/server/test_families.py
 * keeps the same families. A new family adds its line here. */
#ifndef HS_TEST_TINY_FAMILIES_H
#define HS_TEST_TINY_FAMILIES_H

#include <stdint.h>

#include "engine/stage.h"

struct tiny_family {
    const char *dir, *golden, *arch;
    uint32_t features; /* block features the model's stages need, all together */
};

#define F(x) HS_FEAT_##x
static const struct tiny_family tiny_families[] = {
    {"tests/data/tiny-bert-cls", "tiny_cls", "bert", 0},
    {"tests/data/tiny-mpnet", "tiny_mpnet", "mpnet",
     F(REL_POS_BIAS) | F(POS_OFFSET) | F(NO_TOKEN_TYPES)},
    {"tests/data/tiny-roberta", "tiny_roberta", "roberta", F(POS_OFFSET)},
    {"tests/data/tiny-distilbert", "tiny_distilbert", "distilbert", F(NO_TOKEN_TYPES)},
    {"tests/data/tiny-nomic-bert", "tiny_nomic_bert", "nomic_bert",
     F(NO_BIAS) | F(ROTARY) | F(GATED_FFN) | F(ACT_SILU)},
    {"tests/data/tiny-gte", "tiny_gte", "new",
     F(NO_TOKEN_TYPES) | F(NO_BIAS) | F(ROTARY) | F(GATED_FFN)},
    {"tests/data/tiny-modernbert", "tiny_modernbert", "modernbert",
     F(NO_TOKEN_TYPES) | F(NO_BIAS) | F(ROTARY) | F(GATED_FFN) | F(PRE_NORM) | F(LOCAL_ATTN) |
         F(FINAL_NORM)},
    {"tests/data/tiny-qwen3", "tiny_qwen3", "qwen3",
     F(NO_TOKEN_TYPES) | F(NO_BIAS) | F(ROTARY) | F(GATED_FFN) | F(ACT_SILU) | F(RMS_NORM) |
         F(PRE_NORM) | F(CAUSAL) | F(GQA) | F(POOL_LAST) | F(QK_NORM) | F(FINAL_NORM)},
};
#undef F
#define N_TINY_FAMILIES ((int)(sizeof tiny_families / sizeof tiny_families[0]))

#endif
