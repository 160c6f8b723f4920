/* hetserve — the architecture table (see arch.h for the contract).
 *
 * Each family: its tensor map, its config.json key names with their HF defaults, and a hook that
 * reads the block parameters only that family has. The maps name what HF's modelling code
 * registers (BertModel, MPNetModel, RobertaModel, DistilBertModel; NomicBertModel's published
 * modelling code), so a checkpoint saved by HF loads as it is.
 */
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/config_impl.h"

typedef hs_status (*arch_parse_fn)(const json_t *root, const char *label, struct hs_encoder_dims *d,
                                   int pad, struct hs_error *err);

struct arch_row {
    struct hs_arch pub;
    arch_parse_fn parse; /* (optional) the family's own keys and checks */
};

#define T(stage, role, name, rows, cols, flags)                                                    \
    {                                                                                              \
        HS_STAGE_##stage, HS_W_##role, name, HS_AD_##rows, HS_AD_##cols, 0, 0, flags               \
    }
#define TF(stage, role, name, rows, cols, part, parts, flags)                                      \
    {                                                                                              \
        HS_STAGE_##stage, HS_W_##role, name, HS_AD_##rows, HS_AD_##cols, part, parts, flags        \
    }
#define OPT     HS_ARCH_OPTIONAL
#define GB      HS_ARCH_GAMMA
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- BERT (and BERT-shaped: RoBERTa, XLM-R, CamemBERT share it with their own prefix) ---- */
#define BERT_EMBED(type_flags)                                                                     \
    T(EMBED, WORD_EMB, "embeddings.word_embeddings.weight", V, H, 0),                              \
        T(EMBED, POS_EMB, "embeddings.position_embeddings.weight", P, H, 0),                       \
        T(EMBED, TYPE_EMB, "embeddings.token_type_embeddings.weight", T, H, type_flags),           \
        T(EMBED, EMB_LN_G, "embeddings.LayerNorm.weight", H, NONE, GB),                            \
        T(EMBED, EMB_LN_B, "embeddings.LayerNorm.bias", H, NONE, GB)
#define BERT_LAYER                                                                                 \
    T(ATTN, Q, "encoder.layer.%d.attention.self.query.weight", H, H, 0),                           \
        T(ATTN, Q_B, "encoder.layer.%d.attention.self.query.bias", H, NONE, 0),                    \
        T(ATTN, K, "encoder.layer.%d.attention.self.key.weight", H, H, 0),                         \
        T(ATTN, K_B, "encoder.layer.%d.attention.self.key.bias", H, NONE, 0),                      \
        T(ATTN, V, "encoder.layer.%d.attention.self.value.weight", H, H, 0),                       \
        T(ATTN, V_B, "encoder.layer.%d.attention.self.value.bias", H, NONE, 0),                    \
        T(ATTN, ATTN_OUT, "encoder.layer.%d.attention.output.dense.weight", H, H, 0),              \
        T(ATTN, ATTN_OUT_B, "encoder.layer.%d.attention.output.dense.bias", H, NONE, 0),           \
        T(ATTN, ATTN_LN_G, "encoder.layer.%d.attention.output.LayerNorm.weight", H, NONE, GB),     \
        T(ATTN, ATTN_LN_B, "encoder.layer.%d.attention.output.LayerNorm.bias", H, NONE, GB),       \
        BERT_FFN
#define BERT_FFN                                                                                   \
    T(FFN, FFN_IN, "encoder.layer.%d.intermediate.dense.weight", I, H, 0),                         \
        T(FFN, FFN_IN_B, "encoder.layer.%d.intermediate.dense.bias", I, NONE, 0),                  \
        T(FFN, FFN_OUT, "encoder.layer.%d.output.dense.weight", H, I, 0),                          \
        T(FFN, FFN_OUT_B, "encoder.layer.%d.output.dense.bias", H, NONE, 0),                       \
        T(FFN, FFN_LN_G, "encoder.layer.%d.output.LayerNorm.weight", H, NONE, GB),                 \
        T(FFN, FFN_LN_B, "encoder.layer.%d.output.LayerNorm.bias", H, NONE, GB)

/* BertForMaskedLM's head (cls.predictions.*), read only for SPLADE pooling (HS_POOL_SPLADE): the
 * decoder is the word embedding table where the checkpoint ties them (HF then stores no
 * decoder.weight); the first row of a role that is found wins. */
#define BERT_MLM                                                                                   \
    T(POOL, MLM_DENSE, "cls.predictions.transform.dense.weight", H, H, OPT),                       \
        T(POOL, MLM_DENSE_B, "cls.predictions.transform.dense.bias", H, NONE, OPT),                \
        T(POOL, MLM_LN_G, "cls.predictions.transform.LayerNorm.weight", H, NONE, OPT | GB),        \
        T(POOL, MLM_LN_B, "cls.predictions.transform.LayerNorm.bias", H, NONE, OPT | GB),          \
        T(POOL, MLM_DECODER, "cls.predictions.decoder.weight", V, H, OPT),                         \
        T(POOL, MLM_DECODER, "embeddings.word_embeddings.weight", V, H, OPT),                      \
        T(POOL, MLM_BIAS, "cls.predictions.bias", V, NONE, OPT),                                   \
        T(POOL, MLM_BIAS, "cls.predictions.decoder.bias", V, NONE, OPT)
static const struct hs_arch_tensor bert_tensors[] = {BERT_EMBED(0), BERT_LAYER, BERT_MLM};

/* HF MPNetModel: no token types; attention.attn.{q,k,v,o}; one relative-position bias table
 * shared by every layer (no %d: every attention stage gets the same tensor). */
static const struct hs_arch_tensor mpnet_tensors[] = {
    T(EMBED, WORD_EMB, "embeddings.word_embeddings.weight", V, H, 0),
    T(EMBED, POS_EMB, "embeddings.position_embeddings.weight", P, H, 0),
    T(EMBED, EMB_LN_G, "embeddings.LayerNorm.weight", H, NONE, GB),
    T(EMBED, EMB_LN_B, "embeddings.LayerNorm.bias", H, NONE, GB),
    T(ATTN, REL_BIAS, "encoder.relative_attention_bias.weight", RB, NH, 0),
    T(ATTN, Q, "encoder.layer.%d.attention.attn.q.weight", H, H, 0),
    T(ATTN, Q_B, "encoder.layer.%d.attention.attn.q.bias", H, NONE, 0),
    T(ATTN, K, "encoder.layer.%d.attention.attn.k.weight", H, H, 0),
    T(ATTN, K_B, "encoder.layer.%d.attention.attn.k.bias", H, NONE, 0),
    T(ATTN, V, "encoder.layer.%d.attention.attn.v.weight", H, H, 0),
    T(ATTN, V_B, "encoder.layer.%d.attention.attn.v.bias", H, NONE, 0),
    T(ATTN, ATTN_OUT, "encoder.layer.%d.attention.attn.o.weight", H, H, 0),
    T(ATTN, ATTN_OUT_B, "encoder.layer.%d.attention.attn.o.bias", H, NONE, 0),
    T(ATTN, ATTN_LN_G, "encoder.layer.%d.attention.LayerNorm.weight", H, NONE, GB),
    T(ATTN, ATTN_LN_B, "encoder.layer.%d.attention.LayerNorm.bias", H, NONE, GB),
    BERT_FFN,
};

/* HF DistilBertModel: no token types, transformer.layer.N.{attention.*_lin, sa_layer_norm,
 * ffn.lin1/lin2, output_layer_norm}; post-LayerNorm like BERT. */
#define DB(x) "transformer.layer.%d." x
static const struct hs_arch_tensor distilbert_tensors[] = {
    T(EMBED, WORD_EMB, "embeddings.word_embeddings.weight", V, H, 0),
    T(EMBED, POS_EMB, "embeddings.position_embeddings.weight", P, H, 0),
    T(EMBED, EMB_LN_G, "embeddings.LayerNorm.weight", H, NONE, 0),
    T(EMBED, EMB_LN_B, "embeddings.LayerNorm.bias", H, NONE, 0),
    T(ATTN, Q, DB("attention.q_lin.weight"), H, H, 0),
    T(ATTN, Q_B, DB("attention.q_lin.bias"), H, NONE, 0),
    T(ATTN, K, DB("attention.k_lin.weight"), H, H, 0),
    T(ATTN, K_B, DB("attention.k_lin.bias"), H, NONE, 0),
    T(ATTN, V, DB("attention.v_lin.weight"), H, H, 0),
    T(ATTN, V_B, DB("attention.v_lin.bias"), H, NONE, 0),
    T(ATTN, ATTN_OUT, DB("attention.out_lin.weight"), H, H, 0),
    T(ATTN, ATTN_OUT_B, DB("attention.out_lin.bias"), H, NONE, 0),
    T(ATTN, ATTN_LN_G, DB("sa_layer_norm.weight"), H, NONE, 0),
    T(ATTN, ATTN_LN_B, DB("sa_layer_norm.bias"), H, NONE, 0),
    T(FFN, FFN_IN, DB("ffn.lin1.weight"), I, H, 0),
    T(FFN, FFN_IN_B, DB("ffn.lin1.bias"), I, NONE, 0),
    T(FFN, FFN_OUT, DB("ffn.lin2.weight"), H, I, 0),
    T(FFN, FFN_OUT_B, DB("ffn.lin2.bias"), H, NONE, 0),
    T(FFN, FFN_LN_G, DB("output_layer_norm.weight"), H, NONE, 0),
    T(FFN, FFN_LN_B, DB("output_layer_norm.bias"), H, NONE, 0),
};
#undef DB

/* NomicBertModel (published modelling code): Wqkv fused (q | k | v), rotary positions (no
 * position table), SwiGLU FFN with fc11 the up and fc12 the gate, biases per config flags,
 * post-LayerNorm (norm1 after attention, norm2 after the FFN), emb_ln after the embeddings. */
#define NB(x) "encoder.layers.%d." x
static const struct hs_arch_tensor nomic_tensors[] = {
    T(EMBED, WORD_EMB, "embeddings.word_embeddings.weight", V, H, 0),
    T(EMBED, TYPE_EMB, "embeddings.token_type_embeddings.weight", T, H, OPT),
    T(EMBED, EMB_LN_G, "emb_ln.weight", H, NONE, 0),
    T(EMBED, EMB_LN_B, "emb_ln.bias", H, NONE, OPT),
    TF(ATTN, Q, NB("attn.Wqkv.weight"), H, H, 0, 3, 0),
    TF(ATTN, K, NB("attn.Wqkv.weight"), H, H, 1, 3, 0),
    TF(ATTN, V, NB("attn.Wqkv.weight"), H, H, 2, 3, 0),
    TF(ATTN, Q_B, NB("attn.Wqkv.bias"), H, NONE, 0, 3, OPT),
    TF(ATTN, K_B, NB("attn.Wqkv.bias"), H, NONE, 1, 3, OPT),
    TF(ATTN, V_B, NB("attn.Wqkv.bias"), H, NONE, 2, 3, OPT),
    T(ATTN, ATTN_OUT, NB("attn.out_proj.weight"), H, H, 0),
    T(ATTN, ATTN_OUT_B, NB("attn.out_proj.bias"), H, NONE, OPT),
    T(ATTN, ATTN_LN_G, NB("norm1.weight"), H, NONE, 0),
    T(ATTN, ATTN_LN_B, NB("norm1.bias"), H, NONE, OPT),
    T(FFN, FFN_IN, NB("mlp.fc11.weight"), I, H, 0),
    T(FFN, FFN_IN_B, NB("mlp.fc11.bias"), I, NONE, OPT),
    T(FFN, FFN_GATE, NB("mlp.fc12.weight"), I, H, 0),
    T(FFN, FFN_OUT, NB("mlp.fc2.weight"), H, I, 0),
    T(FFN, FFN_OUT_B, NB("mlp.fc2.bias"), H, NONE, OPT),
    T(FFN, FFN_LN_G, NB("norm2.weight"), H, NONE, 0),
    T(FFN, FFN_LN_B, NB("norm2.bias"), H, NONE, OPT),
};
#undef NB

/* Alibaba GTE v1.5 ("new", remote code NewModel): BERT's layout with qkv_proj fused (q | k | v,
 * with bias), o_proj, attn_ln and mlp_ln post-LayerNorms, up_gate_proj fused (up then gate, no
 * bias), down_proj; rotary positions; a token-type table only when type_vocab_size > 0. */
#define GT(x) "encoder.layer.%d." x
static const struct hs_arch_tensor gte_tensors[] = {
    T(EMBED, WORD_EMB, "embeddings.word_embeddings.weight", V, H, 0),
    T(EMBED, TYPE_EMB, "embeddings.token_type_embeddings.weight", T, H, OPT),
    T(EMBED, EMB_LN_G, "embeddings.LayerNorm.weight", H, NONE, 0),
    T(EMBED, EMB_LN_B, "embeddings.LayerNorm.bias", H, NONE, 0),
    TF(ATTN, Q, GT("attention.qkv_proj.weight"), H, H, 0, 3, 0),
    TF(ATTN, K, GT("attention.qkv_proj.weight"), H, H, 1, 3, 0),
    TF(ATTN, V, GT("attention.qkv_proj.weight"), H, H, 2, 3, 0),
    TF(ATTN, Q_B, GT("attention.qkv_proj.bias"), H, NONE, 0, 3, OPT),
    TF(ATTN, K_B, GT("attention.qkv_proj.bias"), H, NONE, 1, 3, OPT),
    TF(ATTN, V_B, GT("attention.qkv_proj.bias"), H, NONE, 2, 3, OPT),
    T(ATTN, ATTN_OUT, GT("attention.o_proj.weight"), H, H, 0),
    T(ATTN, ATTN_OUT_B, GT("attention.o_proj.bias"), H, NONE, OPT),
    T(ATTN, ATTN_LN_G, GT("attn_ln.weight"), H, NONE, 0),
    T(ATTN, ATTN_LN_B, GT("attn_ln.bias"), H, NONE, 0),
    TF(FFN, FFN_IN, GT("mlp.up_gate_proj.weight"), I, H, 0, 2, 0),
    TF(FFN, FFN_GATE, GT("mlp.up_gate_proj.weight"), I, H, 1, 2, 0),
    T(FFN, FFN_OUT, GT("mlp.down_proj.weight"), H, I, 0),
    T(FFN, FFN_OUT_B, GT("mlp.down_proj.bias"), H, NONE, OPT),
    T(FFN, FFN_LN_G, GT("mlp_ln.weight"), H, NONE, 0),
    T(FFN, FFN_LN_B, GT("mlp_ln.bias"), H, NONE, 0),
};
#undef GT

/* HF ModernBertModel: pre-norm (attn_norm absent in layer 0: an identity), LayerNorms with
 * optional bias, Wqkv fused (q | k | v), Wi fused with the activated half first (input, gate =
 * chunk(2): act(input) * gate), rotary positions with a local and a global base, final_norm. */
#define MB(x) "layers.%d." x
static const struct hs_arch_tensor modernbert_tensors[] = {
    T(EMBED, WORD_EMB, "embeddings.tok_embeddings.weight", V, H, 0),
    T(EMBED, EMB_LN_G, "embeddings.norm.weight", H, NONE, 0),
    T(EMBED, EMB_LN_B, "embeddings.norm.bias", H, NONE, OPT),
    T(ATTN, ATTN_LN_G, MB("attn_norm.weight"), H, NONE, OPT),
    T(ATTN, ATTN_LN_B, MB("attn_norm.bias"), H, NONE, OPT),
    TF(ATTN, Q, MB("attn.Wqkv.weight"), H, H, 0, 3, 0),
    TF(ATTN, K, MB("attn.Wqkv.weight"), H, H, 1, 3, 0),
    TF(ATTN, V, MB("attn.Wqkv.weight"), H, H, 2, 3, 0),
    TF(ATTN, Q_B, MB("attn.Wqkv.bias"), H, NONE, 0, 3, OPT),
    TF(ATTN, K_B, MB("attn.Wqkv.bias"), H, NONE, 1, 3, OPT),
    TF(ATTN, V_B, MB("attn.Wqkv.bias"), H, NONE, 2, 3, OPT),
    T(ATTN, ATTN_OUT, MB("attn.Wo.weight"), H, H, 0),
    T(ATTN, ATTN_OUT_B, MB("attn.Wo.bias"), H, NONE, OPT),
    T(FFN, FFN_LN_G, MB("mlp_norm.weight"), H, NONE, 0),
    T(FFN, FFN_LN_B, MB("mlp_norm.bias"), H, NONE, OPT),
    TF(FFN, FFN_GATE, MB("mlp.Wi.weight"), I, H, 0, 2, 0),
    TF(FFN, FFN_IN, MB("mlp.Wi.weight"), I, H, 1, 2, 0),
    T(FFN, FFN_OUT, MB("mlp.Wo.weight"), H, I, 0),
    T(FFN, FFN_OUT_B, MB("mlp.Wo.bias"), H, NONE, OPT),
    T(FINAL_NORM, FINAL_LN_G, "final_norm.weight", H, NONE, 0),
    T(FINAL_NORM, FINAL_LN_B, "final_norm.bias", H, NONE, OPT),
};
#undef MB

/* HF Qwen3Model: pre-RMSNorm (input_layernorm, post_attention_layernorm), q / k / v projections
 * of heads * head_dim and kv_heads * head_dim (grouped-query), RMSNorm of every q and k head
 * (q_norm, k_norm) before rotary, causal attention, SwiGLU (gate_proj, up_proj, down_proj), a
 * final RMSNorm (norm). */
#define QW(x) "layers.%d." x
static const struct hs_arch_tensor qwen3_tensors[] = {
    T(EMBED, WORD_EMB, "embed_tokens.weight", V, H, 0),
    T(ATTN, ATTN_LN_G, QW("input_layernorm.weight"), H, NONE, 0),
    T(ATTN, Q, QW("self_attn.q_proj.weight"), Q, H, 0),
    T(ATTN, Q_B, QW("self_attn.q_proj.bias"), Q, NONE, OPT),
    T(ATTN, K, QW("self_attn.k_proj.weight"), KV, H, 0),
    T(ATTN, K_B, QW("self_attn.k_proj.bias"), KV, NONE, OPT),
    T(ATTN, V, QW("self_attn.v_proj.weight"), KV, H, 0),
    T(ATTN, V_B, QW("self_attn.v_proj.bias"), KV, NONE, OPT),
    T(ATTN, ATTN_OUT, QW("self_attn.o_proj.weight"), H, Q, 0),
    T(ATTN, ATTN_OUT_B, QW("self_attn.o_proj.bias"), H, NONE, OPT),
    T(ATTN, Q_NORM, QW("self_attn.q_norm.weight"), HD, NONE, 0),
    T(ATTN, K_NORM, QW("self_attn.k_norm.weight"), HD, NONE, 0),
    T(FFN, FFN_LN_G, QW("post_attention_layernorm.weight"), H, NONE, 0),
    T(FFN, FFN_GATE, QW("mlp.gate_proj.weight"), I, H, 0),
    T(FFN, FFN_IN, QW("mlp.up_proj.weight"), I, H, 0),
    T(FFN, FFN_OUT, QW("mlp.down_proj.weight"), H, I, 0),
    T(FINAL_NORM, FINAL_LN_G, "norm.weight", H, NONE, 0),
};
#undef QW

/* ---- family hooks ---- */

static hs_status parse_bert(const json_t *root, const char *label, struct hs_encoder_dims *d,
                            int pad, struct hs_error *err)
{
    (void)d;
    (void)pad;
    const char *pet = NULL;
    hs_status s = hs__cfg_str(root, label, "position_embedding_type", "absolute", &pet, err);
    if (s) return s;
    if (strcmp(pet, "absolute") != 0)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: position_embedding_type '%.64s' is not supported (only "
                            "'absolute')",
                            label, pet);
    return HS_STATUS_OK;
}

/* Positions count from padding_idx + 1 (HF create_position_ids_from_input_ids on an unpadded
 * sequence); the table must leave room for at least two tokens after them. */
static hs_status offset_positions(const char *label, struct hs_encoder_dims *d, int pad,
                                  struct hs_error *err)
{
    d->pos_offset = pad + 1;
    if (d->pos_offset + 2 > d->max_positions)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: max_position_embeddings %d leaves no positions after "
                            "pad_token_id %d",
                            label, d->max_positions, pad);
    return HS_STATUS_OK;
}

static hs_status parse_roberta(const json_t *root, const char *label, struct hs_encoder_dims *d,
                               int pad, struct hs_error *err)
{
    hs_status s = parse_bert(root, label, d, pad, err);
    return s ? s : offset_positions(label, d, pad, err);
}

static hs_status parse_mpnet(const json_t *root, const char *label, struct hs_encoder_dims *d,
                             int pad, struct hs_error *err)
{
    if (d->type_vocab != 1)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: an mpnet model has no token types (type_vocab_size %d)", label,
                            d->type_vocab);
    /* HF MPNet: absolute positions from padding_idx + 1 plus a bias per relative-position bucket
     * (max_distance is fixed at 128 in HF's code), whatever position_embedding_type says */
    hs_status s = offset_positions(label, d, pad, err);
    if (s) return s;
    if ((s = hs__cfg_int(root, label, "relative_attention_num_buckets", 1, 32, 2, 1024,
                         &d->rel_buckets, err)))
        return s;
    if (d->rel_buckets % 4 != 0)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: relative_attention_num_buckets %d is not a multiple of 4", label,
                            d->rel_buckets);
    d->rel_max_distance = 128;
    d->pos = HS_POS_REL_BUCKET;
    return HS_STATUS_OK;
}

static hs_status parse_distilbert(const json_t *root, const char *label, struct hs_encoder_dims *d,
                                  int pad, struct hs_error *err)
{
    (void)d;
    (void)pad;
    bool sin = false;
    /* sinusoidal tables are written into the checkpoint's position_embeddings by HF, so the
     * stored table is right either way */
    return hs__cfg_bool(root, label, "sinusoidal_pos_embds", false, &sin, err);
}

/* Rotary positions on the first rotary_dim dims of each head (NeoX halves), base theta. */
static hs_status rotary(const char *label, struct hs_encoder_dims *d, double fraction, float theta,
                        struct hs_error *err)
{
    if (!(fraction > 0.0 && fraction <= 1.0))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: rotary fraction %g is not supported (only (0, 1])", label,
                            fraction);
    int rd = (int)(fraction * d->head_dim);
    if (rd < 2 || rd % 2)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: rotary dimension %d of head size %d",
                            label, rd, d->head_dim);
    d->pos = HS_POS_ROTARY;
    d->rotary_dim = rd;
    d->rope_theta = theta;
    d->rope_freq_div = 1.0f;
    return HS_STATUS_OK;
}

static hs_status parse_nomic(const json_t *root, const char *label, struct hs_encoder_dims *d,
                             int pad, struct hs_error *err)
{
    (void)pad;
    hs_status s;
    float frac = 0, theta = 0;
    bool interleaved = false, prenorm = false, causal = false, rms = false, fc1_bias = true;
    const json_t *scaling = json_object_get(root, "rotary_scaling_factor");
    if ((s = hs__cfg_float(root, label, "rotary_emb_fraction", 0.0, -1.0, 2.0, &frac, err)) ||
        (s = hs__cfg_float(root, label, "rotary_emb_base", 10000.0, 0.0, 1e12, &theta, err)) ||
        (s = hs__cfg_bool(root, label, "rotary_emb_interleaved", false, &interleaved, err)) ||
        (s = hs__cfg_bool(root, label, "prenorm", false, &prenorm, err)) ||
        (s = hs__cfg_bool(root, label, "causal", false, &causal, err)) ||
        (s = hs__cfg_bool(root, label, "use_rms_norm", false, &rms, err)) ||
        (s = hs__cfg_bool(root, label, "mlp_fc1_bias", true, &fc1_bias, err)))
        return s;
    if (fc1_bias)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: nomic_bert with mlp_fc1_bias (a gated FFN with biases) is not "
                            "supported",
                            label);
    if (interleaved || prenorm || causal || rms || (scaling && !json_is_null(scaling)))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "%s: nomic_bert with %s is not supported",
                            label,
                            interleaved ? "interleaved rotary"
                            : prenorm   ? "prenorm"
                            : causal    ? "causal attention"
                            : rms       ? "RMSNorm"
                                        : "rotary_scaling_factor");
    if ((s = rotary(label, d, frac, theta, err))) return s;
    /* activation_function names the gated FFN: swiglu = SiLU(gate) * up, geglu = GELU(gate) *
     * up */
    if (d->act == HS_ACT_SILU || d->act == HS_ACT_GELU_ERF) {
        d->ffn = HS_FFN_GATED;
        return HS_STATUS_OK;
    }
    return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                        "%s: nomic_bert activation_function must be swiglu or geglu", label);
}

static hs_status parse_gte(const json_t *root, const char *label, struct hs_encoder_dims *d,
                           int pad, struct hs_error *err)
{
    (void)pad;
    hs_status s;
    const char *pet = NULL, *lnt = NULL;
    float theta = 0;
    int types = 0;
    bool logn = false, clip = false;
    if ((s = hs__cfg_str(root, label, "position_embedding_type", "rope", &pet, err)) ||
        (s = hs__cfg_str(root, label, "layer_norm_type", "layer_norm", &lnt, err)) ||
        (s = hs__cfg_float(root, label, "rope_theta", 10000.0, 0.0, 1e12, &theta, err)) ||
        (s = hs__cfg_int(root, label, "type_vocab_size", 1, 0, 0, CFG_MAX_TYPE_VOCAB, &types,
                         err)) ||
        (s = hs__cfg_bool(root, label, "logn_attention_scale", false, &logn, err)) ||
        (s = hs__cfg_bool(root, label, "logn_attention_clip1", false, &clip, err)))
        return s;
    if (strcmp(pet, "rope") != 0 || strcmp(lnt, "layer_norm") != 0 || logn || clip)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: a 'new' model needs position_embedding_type rope, "
                            "layer_norm_type layer_norm and no logn attention scaling",
                            label);
    d->type_vocab = types > 0 ? types : 1; /* 0: no table (the optional row stays empty) */
    if ((s = rotary(label, d, 1.0, theta, err))) return s;
    const json_t *sc = json_object_get(root, "rope_scaling");
    if (sc && !json_is_null(sc)) {
        /* fixed NTK: base * factor, every frequency then divided by factor^(2 / head_dim) */
        const char *type = NULL;
        float factor = 0;
        if (!json_is_object(sc))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'rope_scaling' must be an object",
                                label);
        if ((s = hs__cfg_str(sc, label, "type", "", &type, err)) ||
            (s = hs__cfg_float(sc, label, "factor", 1.0, 0.0, 1e6, &factor, err)))
            return s;
        const json_t *mixed = json_object_get(sc, "mixed_b");
        if (strcmp(type, "ntk") != 0 || (mixed && !json_is_null(mixed)))
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "%s: rope_scaling '%.32s' is not supported (only fixed 'ntk')",
                                label, type);
        d->rope_theta = theta * factor;
        d->rope_freq_div = powf(factor, 2.0f / (float)d->head_dim);
    }
    d->ffn = HS_FFN_GATED;
    return HS_STATUS_OK;
}

/* A rope_parameters object (transformers 5's spelling) or its members: only the default
 * rope_type, whose rope_theta is read into *theta when present. */
static hs_status rope_params(const json_t *rp, const char *label, float *theta,
                             struct hs_error *err)
{
    if (!rp || json_is_null(rp)) return HS_STATUS_OK;
    if (!json_is_object(rp))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: rope parameters must be an object", label);
    const char *type = NULL;
    hs_status s = hs__cfg_str(rp, label, "rope_type", "default", &type, err);
    if (!s) s = hs__cfg_float(rp, label, "rope_theta", *theta, 0.0, 1e12, theta, err);
    if (s) return s;
    if (strcmp(type, "default") != 0)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: rope_type '%.32s' is not supported (only 'default')", label, type);
    return HS_STATUS_OK;
}

static hs_status parse_modernbert(const json_t *root, const char *label, struct hs_encoder_dims *d,
                                  int pad, struct hs_error *err)
{
    (void)pad;
    hs_status s;
    float global = 160000.0f, local = 10000.0f;
    int every = 3, window = 128;
    bool mlp_bias = false;
    if ((s = hs__cfg_float(root, label, "global_rope_theta", global, 0.0, 1e12, &global, err)) ||
        (s = hs__cfg_float(root, label, "local_rope_theta", local, 0.0, 1e12, &local, err)) ||
        (s = hs__cfg_int(root, label, "global_attn_every_n_layers", 1, every, 1, CFG_MAX_LAYERS,
                         &every, err)) ||
        (s = hs__cfg_int(root, label, "local_attention", 1, window, 2, CFG_MAX_POSITIONS, &window,
                         err)) ||
        (s = hs__cfg_bool(root, label, "mlp_bias", false, &mlp_bias, err)))
        return s;
    const json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && json_is_object(rp) &&
        ((s = rope_params(json_object_get(rp, "full_attention"), label, &global, err)) ||
         (s = rope_params(json_object_get(rp, "sliding_attention"), label, &local, err))))
        return s;
    /* layer_types (transformers 5) must be the pattern global_attn_every_n_layers describes */
    const json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)d->layers)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: 'layer_types' must list one type per layer", label);
        /* the period of the pattern: the first global layer after layer 0 */
        int next = 1;
        while (next < d->layers && json_is_string(json_array_get(lt, (size_t)next)) &&
               strcmp(json_string_value(json_array_get(lt, (size_t)next)), "full_attention") != 0)
            next++;
        every = next;
        for (int l = 0; l < d->layers; l++) {
            const json_t *t = json_array_get(lt, (size_t)l);
            const char *want = l % every ? "sliding_attention" : "full_attention";
            if (!json_is_string(t) || strcmp(json_string_value(t), want) != 0)
                return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                    "%s: layer_types other than a global layer every N are not "
                                    "supported",
                                    label);
        }
    }
    if (mlp_bias)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: modernbert with mlp_bias (a gated FFN with biases) is not "
                            "supported",
                            label);
    if ((s = rotary(label, d, 1.0, global, err))) return s;
    d->rope_theta_local = local;
    d->norm_pre = true;
    d->final_norm = true;
    d->ffn = HS_FFN_GATED;
    d->window = window / 2; /* local_attention is the whole window: half on each side */
    d->global_every = every;
    return HS_STATUS_OK;
}

static hs_status parse_qwen3(const json_t *root, const char *label, struct hs_encoder_dims *d,
                             int pad, struct hs_error *err)
{
    (void)pad;
    hs_status s;
    float theta = 10000.0f;
    bool sliding = false;
    int kv = d->heads, hd = d->hidden / d->heads;
    if ((s = hs__cfg_float(root, label, "rope_theta", theta, 0.0, 1e12, &theta, err)) ||
        (s = hs__cfg_bool(root, label, "use_sliding_window", false, &sliding, err)) ||
        (s = hs__cfg_int(root, label, "num_key_value_heads", 1, d->heads, 1, d->heads, &kv, err)) ||
        (s = hs__cfg_int(root, label, "head_dim", 1, hd, 2, CFG_MAX_HIDDEN, &hd, err)) ||
        (s = rope_params(json_object_get(root, "rope_parameters"), label, &theta, err)))
        return s;
    const json_t *sc = json_object_get(root, "rope_scaling");
    if (sliding || (sc && !json_is_null(sc)))
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "%s: qwen3 with %s is not supported", label,
                            sliding ? "use_sliding_window" : "rope_scaling");
    if (d->heads % kv != 0)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: num_attention_heads %d is not a multiple of num_key_value_heads "
                            "%d",
                            label, d->heads, kv);
    d->kv_heads = kv;
    d->head_dim = hd;
    if ((s = rotary(label, d, 1.0, theta, err))) return s;
    d->norm = HS_NORM_RMS;
    d->norm_pre = true;
    d->final_norm = true;
    d->causal = true;
    d->ffn = HS_FFN_GATED;
    return HS_STATUS_OK;
}

/* ---- the table ---- */

static const char *const bert_prefixes[] = {"", "bert.", NULL};
static const char *const mpnet_prefixes[] = {"", "mpnet.", NULL};
static const char *const roberta_prefixes[] = {"", "roberta.", NULL};
static const char *const roberta_aliases[] = {"xlm-roberta", "camembert", NULL};
static const char *const distilbert_prefixes[] = {"", "distilbert.", NULL};
static const char *const nomic_prefixes[] = {"", "model.", NULL};
static const char *const gte_prefixes[] = {"", "new.", NULL};
static const char *const model_prefixes[] = {"", "model.", NULL};

#define BERT_KEYS                                                                                  \
    {                                                                                              \
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",            \
            "max_position_embeddings", "vocab_size", "type_vocab_size", "layer_norm_eps",          \
            "hidden_act"                                                                           \
    }

static const struct arch_row rows[] = {
    {{"bert", NULL, bert_prefixes, BERT_KEYS, 2, 0, 1e-12, "gelu", HS_POOL_MEAN, bert_tensors,
      N_OF(bert_tensors), "BERT: absolute positions, token types, post-LayerNorm"},
     parse_bert},
    {{"mpnet", NULL, mpnet_prefixes, BERT_KEYS, 1, 1, 1e-12, "gelu", HS_POOL_MEAN, mpnet_tensors,
      N_OF(mpnet_tensors), "MPNet: positions from pad + 1, relative-position attention bias"},
     parse_mpnet},
    {{"roberta", roberta_aliases, roberta_prefixes, BERT_KEYS, 2, 1, 1e-12, "gelu", HS_POOL_MEAN,
      bert_tensors, N_OF(bert_tensors),
      "RoBERTa / XLM-R / CamemBERT: BERT with positions from pad + 1"},
     parse_roberta},
    {{"distilbert",
      NULL,
      distilbert_prefixes,
      {"dim", "n_layers", "n_heads", "hidden_dim", "max_position_embeddings", "vocab_size", NULL,
       NULL, "activation"},
      1,
      0,
      1e-12,
      "gelu",
      HS_POOL_MEAN,
      distilbert_tensors,
      N_OF(distilbert_tensors),
      "DistilBERT: BERT without token types"},
     parse_distilbert},
    {{"nomic_bert",
      NULL,
      nomic_prefixes,
      {"n_embd", "n_layer", "n_head", "n_inner", "n_positions", "vocab_size", "type_vocab_size",
       "layer_norm_epsilon", "activation_function"},
      2,
      0,
      1e-5,
      "swiglu",
      HS_POOL_MEAN,
      nomic_tensors,
      N_OF(nomic_tensors),
      "NomicBERT: rotary positions, SwiGLU, optional biases, post-LayerNorm"},
     parse_nomic},
    {{"new",
      NULL,
      gte_prefixes,
      {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
       "max_position_embeddings", "vocab_size", NULL, "layer_norm_eps", "hidden_act"},
      1,
      0,
      1e-12,
      "gelu",
      HS_POOL_CLS,
      gte_tensors,
      N_OF(gte_tensors),
      "Alibaba GTE v1.5 (NewModel): rotary positions, gated FFN, post-LayerNorm"},
     parse_gte},
    {{"modernbert",
      NULL,
      model_prefixes,
      {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
       "max_position_embeddings", "vocab_size", NULL, "norm_eps", "hidden_activation"},
      1,
      50283,
      1e-5,
      "gelu",
      HS_POOL_MEAN,
      modernbert_tensors,
      N_OF(modernbert_tensors),
      "ModernBERT: pre-norm, rotary (local and global bases), GeGLU, local / global attention"},
     parse_modernbert},
    {{"qwen3",
      NULL,
      model_prefixes,
      {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
       "max_position_embeddings", "vocab_size", NULL, "rms_norm_eps", "hidden_act"},
      1,
      0,
      1e-6,
      "silu",
      HS_POOL_LAST,
      qwen3_tensors,
      N_OF(qwen3_tensors),
      "Qwen3 (Qwen3-Embedding): causal, grouped-query, RMSNorm, qk-norm, rotary, last-token "
      "pooling"},
     parse_qwen3},
};

int hs_arch_count(void)
{
    return N_OF(rows);
}

const struct hs_arch *hs_arch_at(int i)
{
    return i >= 0 && i < N_OF(rows) ? &rows[i].pub : NULL;
}

static const struct arch_row *find_row(const char *model_type)
{
    if (!model_type) return NULL;
    for (int i = 0; i < N_OF(rows); i++) {
        if (strcmp(rows[i].pub.model_type, model_type) == 0) return &rows[i];
        for (const char *const *a = rows[i].pub.aliases; a && *a; a++)
            if (strcmp(*a, model_type) == 0) return &rows[i];
    }
    return NULL;
}

const struct hs_arch *hs_arch_find(const char *model_type)
{
    const struct arch_row *r = find_row(model_type);
    return r ? &r->pub : NULL;
}

char *hs_arch_names(char *buf, size_t cap)
{
    size_t n = 0;
    if (!cap) return buf;
    buf[0] = '\0';
    for (int i = 0; i < N_OF(rows); i++) {
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s'%s'", i ? ", " : "",
                              rows[i].pub.model_type);
        for (const char *const *a = rows[i].pub.aliases; a && *a; a++)
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, ", '%s'", *a);
    }
    return buf;
}

/* hidden_act / activation / activation_function values. */
static const struct {
    const char *name;
    enum hs_act_fn act;
} acts[] = {
    {"gelu", HS_ACT_GELU_ERF},
    {"gelu_new", HS_ACT_GELU_TANH},
    {"gelu_pytorch_tanh", HS_ACT_GELU_TANH},
    {"relu", HS_ACT_RELU},
    {"silu", HS_ACT_SILU},
    {"swish", HS_ACT_SILU},
    {"swiglu", HS_ACT_SILU},
    {"geglu", HS_ACT_GELU_ERF},
};

hs_status hs__arch_parse(const json_t *root, const char *label, struct hs_model_config *out,
                         int *pad_token_id, struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
    hs_status s;
    const char *mt = NULL;
    if ((s = hs__cfg_str(root, label, "model_type", NULL, &mt, err))) return s;
    if (!mt)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: missing required key 'model_type'", label);
    const struct arch_row *row = find_row(mt);
    if (!row) {
        char names[512];
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: model_type '%.64s' is not supported (supported: %s)", label, mt,
                            hs_arch_names(names, sizeof names));
    }
    const struct hs_arch *a = &row->pub;
    const struct hs_arch_keys *k = &a->keys;
    struct hs_encoder_dims d;
    memset(&d, 0, sizeof d);
    if ((s = hs__cfg_int(root, label, k->hidden, 0, 0, 1, CFG_MAX_HIDDEN, &d.hidden, err)) ||
        (s = hs__cfg_int(root, label, k->layers, 0, 0, 1, CFG_MAX_LAYERS, &d.layers, err)) ||
        (s = hs__cfg_int(root, label, k->heads, 0, 0, 1, CFG_MAX_HIDDEN, &d.heads, err)) ||
        (s = hs__cfg_int(root, label, k->intermediate, 0, 0, 1, CFG_MAX_INTERMEDIATE,
                         &d.intermediate, err)) ||
        (s = hs__cfg_int(root, label, k->positions, 0, 0, 1, CFG_MAX_POSITIONS, &d.max_positions,
                         err)) ||
        (s = hs__cfg_int(root, label, k->vocab, 0, 0, 1, CFG_MAX_VOCAB, &d.vocab, err)))
        return s;
    d.type_vocab = a->type_vocab_default;
    if (k->type_vocab && (s = hs__cfg_int(root, label, k->type_vocab, 1, a->type_vocab_default, 1,
                                          CFG_MAX_TYPE_VOCAB, &d.type_vocab, err)))
        return s;
    if (d.hidden % d.heads != 0)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s %d is not divisible by %s %d", label,
                            k->hidden, d.hidden, k->heads, d.heads);
    d.head_dim = d.hidden / d.heads;
    d.kv_heads = d.heads;

    /* an absent pad_token_id takes the family's default, or 0 where that is outside a small
     * vocabulary (only the position offset of RoBERTa and MPNet reads it; theirs is 1) */
    int pad = 0;
    const int pad_def = a->pad_default < d.vocab ? a->pad_default : 0;
    if ((s = hs__cfg_int(root, label, "pad_token_id", 1, pad_def, 0, d.vocab - 1, &pad, err)))
        return s;
    /* (the encoder adds it in float: one that rounds to 0 would divide by a zero variance) */
    d.ln_eps = (float)a->eps_default;
    if (k->eps &&
        (s = hs__cfg_float(root, label, k->eps, a->eps_default, 0.0, 1.0, &d.ln_eps, err)))
        return s;

    const char *act = a->act_default;
    if (k->act && (s = hs__cfg_str(root, label, k->act, a->act_default, &act, err))) return s;
    size_t ai = 0;
    while (ai < sizeof acts / sizeof acts[0] && strcmp(acts[ai].name, act) != 0) ai++;
    if (ai == sizeof acts / sizeof acts[0])
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: unknown %s '%.64s' (gelu, gelu_new, gelu_pytorch_tanh, relu, "
                            "silu, swiglu, geglu)",
                            label, k->act, act);
    d.act = acts[ai].act;
    /* the gated spellings only mean something to a family with a gated FFN (its hook) */
    const bool gated_name = strcmp(act, "swiglu") == 0 || strcmp(act, "geglu") == 0;
    d.pool = a->pool;
    d.normalize = false;
    if (row->parse && (s = row->parse(root, label, &d, pad, err))) return s;
    if (d.ffn != HS_FFN_GATED && gated_name)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s '%.64s' is not supported by %s", label,
                            k->act, act, a->model_type);
    out->dims = d;
    out->arch = a;
    snprintf(out->model_type, sizeof out->model_type, "%s", mt);
    if (pad_token_id) *pad_token_id = pad;
    return HS_STATUS_OK;
}
