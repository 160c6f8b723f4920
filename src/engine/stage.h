/* hetserve — the encoder's stages, as engines see them.
 *
 * A BERT-family encoder is an ordered list of stages:
 *   embed -> layer0.attn -> layer0.ffn -> ... -> layerN-1.ffn -> pool -> normalize
 * A stage names its kind, its layer, the model's dimensions, and its weights by role. Weight
 * tensors point into host memory that the model keeps alive (a read-only file mapping); an
 * engine copies or converts them once, in hs_engine_stage_prepare, and never at run time.
 *
 * Activations between stages (the interchange format at engine boundaries):
 *   hidden: packed fp32 [n_tokens, hidden], sequence after sequence (no padding)
 *   pooled: fp32 [n_seqs, hidden]
 * embed reads token ids and writes hidden; attn and ffn read and write hidden (post-LN BERT:
 * x = LN(x + f(x))); pool reads hidden and writes pooled; normalize L2-normalizes pooled.
 *
 * MPNet is the same stage list with three differences, all carried by dims and weights:
 *   positions start at pos_offset (MPNet: padding_idx + 1 = 2) instead of 0;
 *   there is no token-type table (w[HS_W_TYPE_EMB].data == NULL, type_vocab 1);
 *   every attention stage adds a learned bias per (head, relative-position bucket) to its
 *   scores before the softmax: w[HS_W_REL_BIAS] is [rel_buckets, heads] (one table shared by all
 *   layers) and the bucket of key j seen from query i is hs_rel_pos_bucket(j - i, ...).
 * An engine that cannot add the bias must not declare HS_ENGINE_FEAT_REL_POS_BIAS (engine.h).
 */
#ifndef HS_ENGINE_STAGE_H
#define HS_ENGINE_STAGE_H

#include <stdbool.h>
#include <math.h>
#include <stdint.h>

#include "core/tensor.h"

enum hs_stage_kind {
    HS_STAGE_EMBED,
    HS_STAGE_ATTN,
    HS_STAGE_FFN,
    HS_STAGE_POOL,
    HS_STAGE_NORMALIZE,
    HS_STAGE_COUNT
};

enum hs_pool_mode { HS_POOL_MEAN, HS_POOL_CLS };

enum hs_act_fn { HS_ACT_GELU_ERF, HS_ACT_GELU_TANH, HS_ACT_RELU };

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
    HS_W_REL_BIAS, /* attn: [rel_buckets, heads], relative-position attention bias (MPNet) */
    /* attn / ffn, optional, F32 [hidden]: per-channel divisor of the stage's input before its
     * first linear layer is quantized (SmoothQuant: x / s times s * W is the same product, with
     * the input's outlier channels tamed). From a quantized model folder (model/quant.h); only
     * int8 lanes use it, f32 ignores it. */
    HS_W_SMOOTH,
    /* attn / ffn, optional, F32 [2]: static per-tensor scale of the int8 input of the stage's
     * first and second linear layer (after smoothing); 0 = that layer quantizes its input per
     * token when it runs. From a quantized model folder; only int8 lanes use it. */
    HS_W_ACT_SCALE,
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

#endif
