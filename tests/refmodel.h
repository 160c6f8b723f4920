/* Test support: a random BERT-shaped encoder held in memory (fp32 values plus a view in the
 * chosen weight dtype) and a naive double-precision reference of it, for engine tests. */
#ifndef HS_TEST_REFMODEL_H
#define HS_TEST_REFMODEL_H

#include <stdint.h>

#include "engine/stage.h"
#include "model/model.h"

struct rand_model {
    struct hs_model model;
    struct hs_encoder_dims dims;
    float *f32[64 * HS_W_COUNT];   /* fp32 values per (stage, role), the reference reads these */
    void *stored[64 * HS_W_COUNT]; /* what the tensor points to */
};

/* Uniform in [-1, 1), from a fixed-seed generator shared by the tests of one program. */
float rand_float(void);
/* A random token id below n. */
int32_t rand_id(int n);

struct rand_model *rand_model_new(int hidden, int heads, int inter, int layers,
                                  enum hs_pool_mode pool, enum hs_dtype dt);
/* Any family's blocks: hidden, heads, head_dim, intermediate, layers, pool and the block
 * parameters taken from *blocks (vocab, positions, type_vocab and normalize are the test's);
 * flags drop optional weights. The stage list is model.c's (final_norm where blocks says). */
enum {
    RM_NO_BIAS = 1u << 0,       /* no linear biases, no LayerNorm betas */
    RM_NO_TYPES = 1u << 1,      /* no token-type table */
    RM_QK_NORM = 1u << 2,       /* q_norm / k_norm weights */
    RM_NO_EMB_NORM = 1u << 3,   /* no norm after the embeddings (Qwen3) */
    RM_NO_FIRST_NORM = 1u << 4, /* pre-norm: no attention norm in layer 0 (ModernBERT) */
};
struct rand_model *rand_model_new_blocks(const struct hs_encoder_dims *blocks, enum hs_dtype dt,
                                         unsigned flags);
void rand_model_free(struct rand_model *rm);

/* The reference: out[hidden] = the pooled, normalized embedding of one sequence. hidden_after
 * (may be NULL): [n_stages][len * hidden] receives the hidden state after embed and after every
 * attention and FFN stage (rows for final_norm / pool / normalize are left alone). */
void ref_encode(struct rand_model *rm, const int32_t *ids, int len, double *out,
                double *hidden_after);

/* cosine of a float and a double vector */
double cosine_fd(const float *a, const double *b, int n);

#endif
