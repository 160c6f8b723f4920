/* hetserve — the encoder's stages, as engines see them.
 *
 * An encoder is an ordered list of stages:
 *   embed -> layer0.attn -> layer0.ffn -> ... -> layerN-1.ffn [-> final_norm] -> pool -> normalize
 * (final_norm: pre-norm families only)
 * A stage names its kind, its layer, the model's dimensions, and its weights by role. Weight
 * tensors point into host memory that the model keeps alive (a read-only file mapping); an
 * engine copies or converts them once, in hs_engine_stage_prepare, and never at run time.
 *
 * Activations between stages (the interchange format at engine boundaries):
 *   hidden: packed fp32 [n_tokens, hidden], sequence after sequence (no padding)
 *   pooled: fp32 [n_seqs, hs_pooled_dim] (hidden; vocab for SPLADE pooling)
 * embed reads token ids and writes hidden; attn, ffn and final_norm read and write hidden
 * (post-LN BERT: x = LN(x + f(x)); pre-norm: x + f(N(x))); pool reads hidden and writes pooled;
 * normalize L2-normalizes pooled.
 *
 * MPNet is the same stage list with three differences, all carried by dims and weights:
 *   positions start at pos_offset (MPNet: padding_idx + 1 = 2) instead of 0;
 *   there is no token-type table (w[HS_W_TYPE_EMB].data == NULL, type_vocab 1);
 *   every attention stage adds a learned bias per (head, relative-position bucket) to its
 *   scores before the softmax: w[HS_W_REL_BIAS] is [rel_buckets, heads] (one table shared by all
 *   layers) and the bucket of key j seen from query i is hs_rel_pos_bucket(j - i, ...).
 * Other families (model/arch.c) differ by the block parameters of hs_encoder_dims (positions,
 * norms, gated FFN, attention kind) and by optional weights. hs_stage_features says which of
 * those a stage needs; an engine declares what it runs (engine.h) and is refused a stage that
 * needs more, with the missing features named.
 */
#ifndef HS_ENGINE_STAGE_H
#define HS_ENGINE_STAGE_H

#include <stdbool.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

enum hs_stage_kind {
    HS_STAGE_EMBED,
    HS_STAGE_ATTN,
    HS_STAGE_FFN,
    HS_STAGE_POOL,
    HS_STAGE_NORMALIZE,
    HS_STAGE_FINAL_NORM, /* pre-norm families: a norm of hidden after the last layer */
    HS_STAGE_COUNT
};

/* SPLADE: a masked-LM checkpoint's head on every token (transform dense + act + LayerNorm, then
 * the decoder, tied to the word embeddings, plus its bias), and per sequence the max over its
 * tokens of log(1 + relu(logit)): a pooled row of vocab floats, most of them zero. */
/* NONE: no pooling, the token embeddings: a sequence's pooled row is its hidden rows, then zeros
 * up to pool_rows rows (TEI's embed_all). */
enum hs_pool_mode { HS_POOL_MEAN, HS_POOL_CLS, HS_POOL_LAST, HS_POOL_SPLADE, HS_POOL_NONE };

enum hs_act_fn { HS_ACT_GELU_ERF, HS_ACT_GELU_TANH, HS_ACT_RELU, HS_ACT_SILU };

/* Where a token's position enters: a learned table added at embed (BERT); that table plus a
 * learned attention bias per relative-position bucket (MPNet); or rotary (NeoX style: the first
 * rotary_dim dims of every q and k head rotated in two halves) with no table. */
enum hs_pos_kind { HS_POS_ABSOLUTE, HS_POS_REL_BUCKET, HS_POS_ROTARY };

/* LayerNorm ((x - mean) / std * g + b; b optional) or RMSNorm (x / rms * g). */
enum hs_norm_kind { HS_NORM_LAYER, HS_NORM_RMS };

/* Plain: down(act(in(x))). Gated: down(act(gate(x)) * up(x)), up in w[HS_W_FFN_IN] and the gate
 * in w[HS_W_FFN_GATE]. */
enum hs_ffn_kind { HS_FFN_PLAIN, HS_FFN_GATED };

/* Dimensions and hyper-parameters of an encoder (from config.json and the pooling config). */
struct hs_encoder_dims {
    int hidden;
    int heads;
    int head_dim; /* hidden / heads */
    int intermediate;
    int layers;
    int vocab;
    int max_positions;
    int type_vocab;
    float ln_eps;
    enum hs_act_fn act;
    enum hs_pool_mode pool;
    bool normalize;
    int pos_offset;       /* position id of a sequence's first token (BERT 0, MPNet 2) */
    int rel_buckets;      /* relative-position buckets of the attention bias; 0 = none */
    int rel_max_distance; /* distance at which the log-spaced buckets end (MPNet 128) */
    /* Block parameters: what the family's row (model/arch.c) and config.json say the blocks are.
     * All zero is BERT: absolute positions, post-LayerNorm, plain FFN, bidirectional attention,
     * every head its own k/v. Optional weights (biases, a LayerNorm's beta, the token-type and
     * position tables) are absent when their tensor's data is NULL. */
    enum hs_pos_kind pos;
    float rope_theta;    /* rotary: frequency base */
    int rotary_dim;      /* rotary: leading dims of each head that rotate (even, <= head_dim) */
    float rope_freq_div; /* rotary: every frequency divided by this (fixed NTK scaling); 0 or 1:
                            none */
    enum hs_norm_kind norm;
    bool norm_pre; /* pre-norm: x + f(N(x)), N absent = identity; post-norm (false): N(x + f(x)) */
    bool final_norm; /* a final_norm stage follows the last layer */
    enum hs_ffn_kind ffn;
    bool causal;            /* a query sees only keys at or before its position */
    int kv_heads;           /* key / value heads (grouped-query when < heads); 0 = heads */
    int window;             /* local attention: a query sees keys within this distance (inclusive);
                               0 = every layer global */
    int global_every;       /* with window: layer l is global (full attention) when l % global_every
                               == 0 */
    float rope_theta_local; /* rotary frequency base of the local layers; 0 = rope_theta */
    int pool_rows;          /* HS_POOL_NONE: token rows per pooled row (the longest sequence) */
};

/* MPNet's (and T5's bidirectional) relative-position bucket of rel = key - query position, in
 * [0, num_buckets): half the buckets for each sign; within a half, distances below a quarter of
 * num_buckets get a bucket each, larger ones log-spaced up to max_distance, beyond which all
 * share the last. Computed in float32 as HF's torch code does, so bucket edges agree. */
/* (inline: engine plugins, which link nothing of hetserve, share it) */
static inline int hs_rel_pos_bucket(int rel, int num_buckets, int max_distance)
{
    /* HF MPNet relative_position_bucket: n = -rel; half = num_buckets / 2; ret = half when n < 0;
     * then exact buckets below half / 2, log-spaced ones above. */
    int n = -rel, ret = 0;
    const int half = num_buckets / 2;
    if (n < 0) {
        ret += half;
        n = -n;
    }
    const int max_exact = half / 2;
    if (n < max_exact) return ret + n;
    /* float32 as torch: log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact),
     * truncated toward zero */
    float r = logf((float)n / (float)max_exact) / (float)log((double)max_distance / max_exact) *
              (float)(half - max_exact);
    int v = max_exact + (int)r;
    if (v > half - 1) v = half - 1;
    return ret + v;
}

/* Weight roles. Linear weights are [out, in] as stored by PyTorch; biases [out]. */
enum hs_weight_role {
    HS_W_WORD_EMB, /* [vocab, hidden] */
    HS_W_POS_EMB,  /* [max_positions, hidden] */
    HS_W_TYPE_EMB, /* [type_vocab, hidden] */
    HS_W_EMB_LN_G,
    HS_W_EMB_LN_B,
    HS_W_Q,
    HS_W_Q_B,
    HS_W_K,
    HS_W_K_B,
    HS_W_V,
    HS_W_V_B,
    HS_W_ATTN_OUT,
    HS_W_ATTN_OUT_B,
    HS_W_ATTN_LN_G,
    HS_W_ATTN_LN_B,
    HS_W_FFN_IN, /* [intermediate, hidden] */
    HS_W_FFN_IN_B,
    HS_W_FFN_OUT, /* [hidden, intermediate] */
    HS_W_FFN_OUT_B,
    HS_W_FFN_LN_G,
    HS_W_FFN_LN_B,
    HS_W_REL_BIAS,   /* attn: [rel_buckets, heads], relative-position attention bias (MPNet) */
    HS_W_FFN_GATE,   /* ffn, gated: [intermediate, hidden], the activated half */
    HS_W_Q_NORM,     /* attn, optional: [head_dim] RMSNorm of every q head (qk-norm) */
    HS_W_K_NORM,     /* attn, optional: [head_dim] RMSNorm of every k head */
    HS_W_FINAL_LN_G, /* final_norm: [hidden] */
    HS_W_FINAL_LN_B, /* final_norm, optional: [hidden] */
    /* attn / ffn, optional, F32 [hidden]: per-channel divisor of the stage's input before its
     * first linear layer is quantized (SmoothQuant: x / s times s * W is the same product, with
     * the input's outlier channels tamed). From a quantized model folder (model/quant.h); only
     * int8 lanes use it, f32 ignores it. */
    HS_W_SMOOTH,
    /* attn / ffn, optional, F32 [2]: static per-tensor scale of the int8 input of the stage's
     * first and second linear layer (after smoothing); 0 = that layer quantizes its input per
     * token when it runs. From a quantized model folder; only int8 lanes use it. */
    HS_W_ACT_SCALE,
    /* pool, SPLADE (HS_POOL_SPLADE): the masked-LM head. Transform [hidden, hidden] and bias,
     * its LayerNorm, the decoder [vocab, hidden] (the word embeddings when tied) and bias
     * [vocab] */
    HS_W_MLM_DENSE,
    HS_W_MLM_DENSE_B,
    HS_W_MLM_LN_G,
    HS_W_MLM_LN_B,
    HS_W_MLM_DECODER,
    HS_W_MLM_BIAS,
    HS_W_COUNT
};

struct hs_stage {
    enum hs_stage_kind kind;
    int layer;     /* 0-based for attn/ffn; -1 otherwise */
    char name[32]; /* "embed", "layer3.attn", "layer3.ffn", "pool", "normalize" */
    const struct hs_encoder_dims *dims;
    struct hs_tensor w[HS_W_COUNT]; /* roles this kind uses; others have data == NULL */
};

/* A batch of sequences, host side. Token arrays are packed: sequence i occupies
 * [offsets[i], offsets[i+1]). seq_max is the padded length the batch was shaped to (its
 * length bucket); engines that compute on padded shapes use it, packed engines ignore it.
 * Every lengths[i] is >= 1 and <= seq_max. */
struct hs_batch {
    int n_seqs;
    int seq_max;
    int n_tokens;
    const int32_t *ids;      /* [n_tokens] */
    const int32_t *type_ids; /* [n_tokens], or NULL for all zeros */
    const int32_t *lengths;  /* [n_seqs] */
    const int32_t *offsets;  /* [n_seqs + 1] */
    int64_t deadline_ns;     /* earliest deadline of its requests (hs_now_ns clock); 0 = none */
    int batch_class;         /* 1 when every request in it is batch-class priority (a remote
                                engine's workers shed those first); 0 otherwise */
};

/* Which activation buffer of a workspace a copy moves. */
enum hs_act_buf { HS_ACT_BUF_HIDDEN, HS_ACT_BUF_POOLED };

const char *hs_stage_kind_name(enum hs_stage_kind k);

/* Block features beyond BERT's (post-LayerNorm with biases, absolute positions from 0, token
 * types, plain FFN, bidirectional attention, CLS / mean pooling). One X-macro row each: name,
 * bit, what it is (printed when an engine lacks it). */
#define HS_STAGE_FEATURES(X)                                                                       \
    X(REL_POS_BIAS, 0, "relative-position attention bias")                                         \
    X(POS_OFFSET, 2, "position offset")                                                            \
    X(NO_TOKEN_TYPES, 3, "no token-type table")                                                    \
    X(NO_BIAS, 4, "linear layers or norms without bias")                                           \
    X(ROTARY, 5, "rotary positions")                                                               \
    X(GATED_FFN, 6, "gated FFN")                                                                   \
    X(ACT_SILU, 7, "SiLU activation")                                                              \
    X(RMS_NORM, 8, "RMSNorm")                                                                      \
    X(PRE_NORM, 9, "pre-norm blocks")                                                              \
    X(CAUSAL, 10, "causal attention")                                                              \
    X(GQA, 11, "grouped-query attention")                                                          \
    X(POOL_LAST, 12, "last-token pooling")                                                         \
    X(QK_NORM, 13, "qk-norm")                                                                      \
    X(LOCAL_ATTN, 14, "sliding-window attention")                                                  \
    X(FINAL_NORM, 15, "final norm")                                                                \
    X(POOL_SPLADE, 16, "SPLADE pooling (masked-LM head)")                                          \
    X(POOL_NONE, 17, "token embeddings (no pooling)")

enum hs_stage_feature {
#define HS__FEAT_ENUM(name, bit, what) HS_FEAT_##name = 1u << (bit),
    HS_STAGE_FEATURES(HS__FEAT_ENUM)
#undef HS__FEAT_ENUM
};

/* Floats per pooled row: vocab for SPLADE pooling, pool_rows * hidden without pooling, hidden
 * otherwise. */
static inline int hs_pooled_dim(const struct hs_encoder_dims *d)
{
    return d->pool == HS_POOL_SPLADE ? d->vocab
           : d->pool == HS_POOL_NONE ? d->pool_rows * d->hidden
                                     : d->hidden;
}

/* The features (HS_FEAT_* bits) stage st needs of the engine that runs it. */
uint32_t hs_stage_features(const struct hs_stage *st);
/* Writes the descriptions of the features in `bits`, comma-separated, to buf (always
 * NUL-terminated); returns buf. */
char *hs_stage_features_str(uint32_t bits, char *buf, size_t cap);

#endif
