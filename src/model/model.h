/* hetserve — a loaded encoder model.
 *
 * hs_model_load reads a model folder (config files, vocab.txt, model.safetensors or the shards
 * of model.safetensors.index.json), validates
 * every tensor the encoder needs (name, dtype, shape) and builds the encoder as an ordered list
 * of stages (engine/stage.h) whose weights point into the read-only file mapping. Weights are
 * loaded once and shared; engines make their own resident copies in stage_prepare.
 * Tensor names come from the family's row of the architecture table (model/arch.h).
 *
 * A model is read-only after load and safe to share between threads.
 */
#ifndef HS_MODEL_MODEL_H
#define HS_MODEL_MODEL_H

#include "core/status.h"
#include "engine/stage.h"
#include "model/config.h"
#include "model/quant.h"
#include "model/tokenizer.h"

struct hs_weights;

struct hs_model {
    char *dir;
    char *name; /* folder's base name, e.g. "all-MiniLM-L6-v2" */
    struct hs_model_config config;
    struct hs_tokenizer *tokenizer;
    struct hs_weights *weights;           /* model.safetensors or its shards (model/weights.h) */
    int n_stages;                         /* 1 + 2 * layers + 2 (model/arch.h) */
    struct hs_stage *stages;              /* embed, layer0.attn, layer0.ffn, ..., pool, normalize */
    struct hs_quant_plan *quant;          /* the folder's quant.json (model/quant.h), or NULL */
    struct hs_safetensors *quant_weights; /* its quant.safetensors (smoothing), or NULL */
};

hs_status hs_model_load(const char *dir, struct hs_model **out, struct hs_error *err);
/* The model's configuration and tokenizer only (a router's: its batches run on workers):
 * weights NULL, no stages (n_stages 0), no quantization plan. */
hs_status hs_model_load_meta(const char *dir, struct hs_model **out, struct hs_error *err);
/* hs_model_load (weights) or hs_model_load_meta with the pooling a served model is given instead
 * of its folder's: "mean", "cls", "last", "splade" (the checkpoint's masked-LM head) or "none"
 * (the token embeddings, dims.pool_rows = max_seq_len rows per sequence); NULL or "" = the
 * folder's. SPLADE and none answer their rows unnormalized. HS_STATUS_INVALID_INPUT naming an
 * unknown one. */
hs_status hs_model_load_pooled(const char *dir, bool weights, const char *pooling,
                               struct hs_model **out, struct hs_error *err);
void hs_model_free(struct hs_model *m);

/* Tokenizes one text for this model: [CLS] .. [SEP] truncated to max_tokens (<= 0: the model's
 * max_seq_len). Same contract as hs_tokenizer_encode. */
hs_status hs_model_tokenize(const struct hs_model *m, const char *text, size_t len, int32_t *ids,
                            int max_tokens, int *n_tokens, int *n_full, struct hs_error *err);

#endif
