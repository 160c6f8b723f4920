/* hetserve — a loaded encoder model (see model.h for the contract). */
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/safetensors.h"

#define MODEL_PATH_MAX 4096

/* Everything a weight lookup needs to report a clear error. */
struct loader {
    struct hs_model *m;
    char st_path[MODEL_PATH_MAX];
    struct hs_error *err;
};

static int is_float_dtype(enum hs_dtype t)
{
    return t == HS_DTYPE_F32 || t == HS_DTYPE_F16 || t == HS_DTYPE_BF16;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Finds `name` (HF name without the "bert." prefix; alt is an alternative last component such as
 * "gamma" for "weight", or NULL), checks dtype and shape [d0] or [d0, d1] (d1 < 0: 1-D). */
static hs_status find_weight(struct loader *L, const char *stem, const char *leaf,
                             const char *alt_leaf, int64_t d0, int64_t d1, struct hs_tensor *out)
{
    static const char *const prefixes[] = {"", "bert.", "mpnet."};
    const char *leaves[] = {leaf, alt_leaf};
    char name[256];
    for (int li = 0; li < 2; li++) {
        if (!leaves[li]) continue;
        for (int pi = 0; pi < 3; pi++) {
            snprintf(name, sizeof name, "%s%s.%s", prefixes[pi], stem, leaves[li]);
            if (hs_safetensors_get(L->m->weights, name, out, NULL) != HS_STATUS_OK) continue;

            int64_t want[2] = {d0, d1};
            int want_ndim = d1 < 0 ? 1 : 2;
            int ok = out->ndim == want_ndim;
            for (int i = 0; ok && i < want_ndim; i++) ok = out->shape[i] == want[i];
            if (!is_float_dtype(out->dtype))
                return hs_error_set(L->err, HS_STATUS_CORRUPT,
                                    "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16",
                                    L->st_path, name, hs_dtype_name(out->dtype));
            if (!ok) {
                char got[96], exp[96];
                shape_str(got, sizeof got, out->ndim, out->shape);
                shape_str(exp, sizeof exp, want_ndim, want);
                return hs_error_set(L->err, HS_STATUS_CORRUPT,
                                    "%s: tensor '%s' has shape %s, expected %s", L->st_path, name,
                                    got, exp);
            }
            /* Engines read weights in place as float / uint16 arrays; a header whose length
             * is not padded can leave them misaligned, which they must not be handed. */
            if ((uintptr_t)out->data % hs_dtype_size(out->dtype) != 0)
                return hs_error_set(L->err, HS_STATUS_UNSUPPORTED,
                                    "%s: tensor '%s' data is not aligned to its %zu-byte "
                                    "elements (unpadded header)",
                                    L->st_path, name, hs_dtype_size(out->dtype));
            return HS_STATUS_OK;
        }
    }
    return hs_error_set(L->err, HS_STATUS_CORRUPT,
                        "%s: missing tensor '%s.%s' (also looked for the 'bert.' and 'mpnet.' "
                        "prefixes%s%s)",
                        L->st_path, stem, leaf, alt_leaf ? " and ." : "", alt_leaf ? alt_leaf : "");
}

/* A linear layer: weight [out, in] and bias [out]. */
static hs_status find_linear(struct loader *L, const char *stem, int64_t n_out, int64_t n_in,
                             struct hs_tensor *w, struct hs_tensor *b)
{
    hs_status s = find_weight(L, stem, "weight", NULL, n_out, n_in, w);
    if (!s) s = find_weight(L, stem, "bias", NULL, n_out, -1, b);
    return s;
}

static hs_status find_layernorm(struct loader *L, const char *stem, int64_t n, struct hs_tensor *g,
                                struct hs_tensor *b)
{
    hs_status s = find_weight(L, stem, "weight", "gamma", n, -1, g);
    if (!s) s = find_weight(L, stem, "bias", "beta", n, -1, b);
    return s;
}

static hs_status build_stages(struct loader *L)
{
    struct hs_model *m = L->m;
    const struct hs_encoder_dims *d = &m->config.dims;
    const int64_t H = d->hidden, I = d->intermediate;
    const bool mpnet = d->rel_buckets > 0;
    hs_status s;

    m->n_stages = 1 + 2 * d->layers + 2;
    m->stages = hs_calloc((size_t)m->n_stages, sizeof *m->stages);
    if (!m->stages)
        return hs_error_set(L->err, HS_STATUS_NO_MEMORY, "%s: out of memory for stages", m->dir);
    for (int i = 0; i < m->n_stages; i++) {
        m->stages[i].dims = d;
        m->stages[i].layer = -1;
    }

    struct hs_stage *st = &m->stages[0];
    st->kind = HS_STAGE_EMBED;
    snprintf(st->name, sizeof st->name, "embed");
    if ((s = find_weight(L, "embeddings.word_embeddings", "weight", NULL, d->vocab, H,
                         &st->w[HS_W_WORD_EMB])) ||
        (s = find_weight(L, "embeddings.position_embeddings", "weight", NULL, d->max_positions, H,
                         &st->w[HS_W_POS_EMB])) ||
        (!mpnet && (s = find_weight(L, "embeddings.token_type_embeddings", "weight", NULL,
                                    d->type_vocab, H, &st->w[HS_W_TYPE_EMB]))) ||
        (s = find_layernorm(L, "embeddings.LayerNorm", H, &st->w[HS_W_EMB_LN_G],
                            &st->w[HS_W_EMB_LN_B])))
        return s;
    /* MPNet: one relative-position bias table, shared by every layer's attention */
    struct hs_tensor rel_bias = {0};
    if (mpnet && (s = find_weight(L, "encoder.relative_attention_bias", "weight", NULL,
                                  d->rel_buckets, d->heads, &rel_bias)))
        return s;

    char stem[128];
    for (int l = 0; l < d->layers; l++) {
        struct hs_stage *a = &m->stages[1 + 2 * l], *f = &m->stages[2 + 2 * l];
        a->kind = HS_STAGE_ATTN;
        a->layer = l;
        snprintf(a->name, sizeof a->name, "layer%d.attn", l);
        f->kind = HS_STAGE_FFN;
        f->layer = l;
        snprintf(f->name, sizeof f->name, "layer%d.ffn", l);

#define LAYER_STEM(suffix) (snprintf(stem, sizeof stem, "encoder.layer.%d.%s", l, suffix), stem)
        if (mpnet) {
            /* HF MPNetLayer: attention.attn.{q,k,v,o}, attention.LayerNorm; the FFN is BERT's */
            a->w[HS_W_REL_BIAS] = rel_bias;
            if ((s = find_linear(L, LAYER_STEM("attention.attn.q"), H, H, &a->w[HS_W_Q],
                                 &a->w[HS_W_Q_B])) ||
                (s = find_linear(L, LAYER_STEM("attention.attn.k"), H, H, &a->w[HS_W_K],
                                 &a->w[HS_W_K_B])) ||
                (s = find_linear(L, LAYER_STEM("attention.attn.v"), H, H, &a->w[HS_W_V],
                                 &a->w[HS_W_V_B])) ||
                (s = find_linear(L, LAYER_STEM("attention.attn.o"), H, H, &a->w[HS_W_ATTN_OUT],
                                 &a->w[HS_W_ATTN_OUT_B])) ||
                (s = find_layernorm(L, LAYER_STEM("attention.LayerNorm"), H, &a->w[HS_W_ATTN_LN_G],
                                    &a->w[HS_W_ATTN_LN_B])))
                return s;
        } else if ((s = find_linear(L, LAYER_STEM("attention.self.query"), H, H, &a->w[HS_W_Q],
                                    &a->w[HS_W_Q_B])) ||
                   (s = find_linear(L, LAYER_STEM("attention.self.key"), H, H, &a->w[HS_W_K],
                                    &a->w[HS_W_K_B])) ||
                   (s = find_linear(L, LAYER_STEM("attention.self.value"), H, H, &a->w[HS_W_V],
                                    &a->w[HS_W_V_B])) ||
                   (s = find_linear(L, LAYER_STEM("attention.output.dense"), H, H,
                                    &a->w[HS_W_ATTN_OUT], &a->w[HS_W_ATTN_OUT_B])) ||
                   (s = find_layernorm(L, LAYER_STEM("attention.output.LayerNorm"), H,
                                       &a->w[HS_W_ATTN_LN_G], &a->w[HS_W_ATTN_LN_B])))
            return s;
        if ((s = find_linear(L, LAYER_STEM("intermediate.dense"), I, H, &f->w[HS_W_FFN_IN],
                             &f->w[HS_W_FFN_IN_B])) ||
            (s = find_linear(L, LAYER_STEM("output.dense"), H, I, &f->w[HS_W_FFN_OUT],
                             &f->w[HS_W_FFN_OUT_B])) ||
            (s = find_layernorm(L, LAYER_STEM("output.LayerNorm"), H, &f->w[HS_W_FFN_LN_G],
                                &f->w[HS_W_FFN_LN_B])))
            return s;
#undef LAYER_STEM
    }

    /* Pool and normalize have no weights; normalize is always listed and is a no-op when
     * dims.normalize is false (the stage list has a fixed shape). */
    st = &m->stages[m->n_stages - 2];
    st->kind = HS_STAGE_POOL;
    snprintf(st->name, sizeof st->name, "pool");
    st = &m->stages[m->n_stages - 1];
    st->kind = HS_STAGE_NORMALIZE;
    snprintf(st->name, sizeof st->name, "normalize");
    return HS_STATUS_OK;
}

static const char *base_name(const char *dir, size_t *len)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "models/x/" names "x" */
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    if (b == n) { /* "/" */
        *len = n;
        return dir;
    }
    *len = n - b;
    return dir + b;
}

static hs_status load(const char *dir, bool weights, struct hs_model **out, struct hs_error *err)
{
    if (!dir || !out || !*dir)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "model load: NULL or empty argument");
    *out = NULL;
    struct loader L;
    memset(&L, 0, sizeof L);
    L.err = err;
    if (snprintf(L.st_path, sizeof L.st_path, "%s/model.safetensors", dir) >= (int)sizeof L.st_path)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "model load: path too long");

    struct hs_model *m = hs_calloc(1, sizeof *m);
    if (!m) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
    L.m = m;
    hs_status s;
    size_t nlen;
    const char *nm = base_name(dir, &nlen);
    m->dir = hs_strdup(dir);
    m->name = hs_strndup(nm, nlen);
    if (!m->dir || !m->name) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
        goto fail;
    }

    if ((s = hs_model_config_load(dir, &m->config, err))) goto fail;

    struct hs_tokenizer_opts topts = {
        .do_lower_case = m->config.do_lower_case,
        .strip_accents = m->config.strip_accents,
        .tokenize_chinese_chars = m->config.tokenize_chinese_chars,
        .cls_token = m->config.cls_token,
        .sep_token = m->config.sep_token,
        .unk_token = m->config.unk_token,
        .pad_token = m->config.pad_token,
        .mask_token = m->config.mask_token,
    };
    if ((s = hs_tokenizer_load_dir(dir, &topts, &m->tokenizer, err))) goto fail;
    /* Every id the tokenizer can emit indexes the word embedding table. */
    int nv = hs_tokenizer_vocab_size(m->tokenizer);
    if (nv > m->config.dims.vocab) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: %d tokens but config.json vocab_size is %d",
                         dir, nv, m->config.dims.vocab);
        goto fail;
    }

    if (!weights) goto done;
    if ((s = hs_safetensors_open(L.st_path, &m->weights, err))) goto fail;
    if ((s = build_stages(&L))) goto fail;
    {
        struct hs_quant_plan plan;
        hs_status qs = hs_quant_load(m, dir, &plan, err);
        if (qs == HS_STATUS_OK) {
            m->quant = hs_malloc(sizeof *m->quant);
            if (!m->quant) {
                s = hs_error_set(err, HS_STATUS_NO_MEMORY, "model: out of memory");
                goto fail;
            }
            *m->quant = plan;
        } else if (qs != HS_STATUS_NOT_FOUND) {
            s = qs;
            goto fail;
        }
        if ((s = hs_quant_attach_smoothing(m, dir, err))) goto fail;
    }
done:
    *out = m;
    return HS_STATUS_OK;
fail:
    hs_model_free(m);
    return s;
}

hs_status hs_model_load(const char *dir, struct hs_model **out, struct hs_error *err)
{
    return load(dir, true, out, err);
}

hs_status hs_model_load_meta(const char *dir, struct hs_model **out, struct hs_error *err)
{
    return load(dir, false, out, err);
}

void hs_model_free(struct hs_model *m)
{
    if (!m) return;
    hs_free(m->stages);
    hs_free(m->quant);
    hs_safetensors_close(m->quant_weights);
    hs_safetensors_close(m->weights);
    if (m->tokenizer) hs_tokenizer_free(m->tokenizer);
    hs_free(m->name);
    hs_free(m->dir);
    hs_free(m);
}

hs_status hs_model_tokenize(const struct hs_model *m, const char *text, size_t len, int32_t *ids,
                            int max_tokens, int *n_tokens, int *n_full, struct hs_error *err)
{
    if (!m || !m->tokenizer || !ids || !n_tokens || (!text && len))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "model tokenize: NULL argument");
    /* A longer explicit limit is honoured up to the position table, which no sequence may
     * outgrow. */
    if (max_tokens <= 0) max_tokens = m->config.max_seq_len;
    const int positions = m->config.dims.max_positions - m->config.dims.pos_offset;
    if (max_tokens > positions) max_tokens = positions;
    return hs_tokenizer_encode(m->tokenizer, text ? text : "", len, ids, max_tokens, n_tokens,
                               n_full, err);
}
