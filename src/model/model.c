/* hetserve — a loaded encoder model (see model.h for the contract). */
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/arch.h"
#include "model/safetensors.h"
#include "model/weights.h"

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

static int64_t dim_of(const struct hs_encoder_dims *d, enum hs_arch_dim a)
{
    switch (a) {
    case HS_AD_H:
        return d->hidden;
    case HS_AD_I:
        return d->intermediate;
    case HS_AD_V:
        return d->vocab;
    case HS_AD_P:
        return d->max_positions;
    case HS_AD_T:
        return d->type_vocab;
    case HS_AD_RB:
        return d->rel_buckets;
    case HS_AD_NH:
        return d->heads;
    case HS_AD_Q:
        return (int64_t)d->heads * d->head_dim;
    case HS_AD_KV:
        return (int64_t)(d->kv_heads > 0 ? d->kv_heads : d->heads) * d->head_dim;
    case HS_AD_HD:
        return d->head_dim;
    case HS_AD_NONE:
        break;
    }
    return -1;
}

/* TensorFlow-era LayerNorm names: ".weight" -> ".gamma", ".bias" -> ".beta". */
static bool gamma_name(const char *stem, char *out, size_t cap)
{
    size_t n = strlen(stem);
    const char *leaf = NULL;
    size_t cut = 0;
    if (n > 7 && strcmp(stem + n - 7, ".weight") == 0) leaf = ".gamma", cut = 7;
    if (n > 5 && strcmp(stem + n - 5, ".bias") == 0) leaf = ".beta", cut = 5;
    if (!leaf) return false;
    snprintf(out, cap, "%.*s%s", (int)(n - cut), stem, leaf);
    return true;
}

/* Finds the tensor of one row of the family's map for layer `layer`, tried under each of the
 * family's prefixes (and the gamma / beta spelling where the row allows it); checks dtype,
 * shape and alignment; a fused row becomes a view of its block of rows. An optional row that is
 * absent leaves *out empty. */
static hs_status find_tensor(struct loader *L, const struct hs_arch_tensor *t, int layer,
                             struct hs_tensor *out)
{
    const struct hs_arch *a = L->m->config.arch;
    const struct hs_encoder_dims *d = &L->m->config.dims;
    char stems[2][160], name[224];
    snprintf(stems[0], sizeof stems[0], t->name, layer);
    const int n_stems =
        (t->flags & HS_ARCH_GAMMA) && gamma_name(stems[0], stems[1], sizeof stems[1]) ? 2 : 1;
    const int parts = t->parts > 1 ? t->parts : 1;
    const int64_t rows = dim_of(d, t->rows), cols = t->cols == HS_AD_NONE ? -1 : dim_of(d, t->cols);
    for (int si = 0; si < n_stems; si++) {
        for (const char *const *pre = a->prefixes; *pre; pre++) {
            snprintf(name, sizeof name, "%.32s%.180s", *pre, stems[si]);
            if (hs_weights_get(L->m->weights, name, out, NULL) != HS_STATUS_OK) continue;

            int64_t want[2] = {rows * parts, cols};
            int want_ndim = cols < 0 ? 1 : 2;
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
            if (parts > 1) { /* rows [part * rows, (part + 1) * rows): contiguous */
                const size_t block =
                    (size_t)rows * (size_t)(cols < 0 ? 1 : cols) * hs_dtype_size(out->dtype);
                out->data = (const char *)out->data + block * t->part;
                out->shape[0] = rows;
                out->bytes = block;
            }
            return HS_STATUS_OK;
        }
    }
    memset(out, 0, sizeof *out);
    if (t->flags & HS_ARCH_OPTIONAL) return HS_STATUS_OK;
    char tried[96];
    size_t n = 0;
    tried[0] = '\0';
    for (const char *const *pre = a->prefixes; *pre; pre++)
        if (**pre && n < sizeof tried)
            n += (size_t)snprintf(tried + n, sizeof tried - n, "%s'%s'", n ? " and " : "", *pre);
    return hs_error_set(
        L->err, HS_STATUS_CORRUPT, "%s: missing tensor '%s' (also looked for the %s prefix%s%s%s)",
        L->st_path, stems[0], tried, n_stems > 1 ? " and " : "", n_stems > 1 ? stems[1] : "", "");
}

/* Fills a stage's roles from the rows of the family's map that belong to its kind. */
static hs_status fill_stage(struct loader *L, struct hs_stage *st)
{
    const struct hs_arch *a = L->m->config.arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const struct hs_arch_tensor *t = &a->tensors[i];
        if (t->stage != st->kind || st->w[t->role].data) continue; /* (the first found wins) */
        /* the masked-LM head's rows are read only where it runs */
        if (st->kind == HS_STAGE_POOL && st->dims->pool != HS_POOL_SPLADE) continue;
        hs_status s = find_tensor(L, t, st->layer, &st->w[t->role]);
        if (s) return s;
    }
    return HS_STATUS_OK;
}

/* The stage list of any family: embed, then attn and ffn per layer, then final_norm (pre-norm
 * families), pool and normalize; each stage's weights are the rows of the family's tensor map
 * for its kind. */
static hs_status build_stages(struct loader *L)
{
    struct hs_model *m = L->m;
    const struct hs_encoder_dims *d = &m->config.dims;
    struct layout_row {
        enum hs_stage_kind kind;
        bool per_layer;
        const char *name; /* printf pattern, %d = layer */
    };
    static const struct layout_row all[] = {
        {HS_STAGE_EMBED, false, "embed"},
        {HS_STAGE_ATTN, true, "layer%d.attn"},
        {HS_STAGE_FFN, true, "layer%d.ffn"},
        {HS_STAGE_FINAL_NORM, false, "final_norm"}, /* only where dims.final_norm */
        {HS_STAGE_POOL, false, "pool"},
        {HS_STAGE_NORMALIZE, false, "normalize"},
    };
    struct layout_row layout[sizeof all / sizeof all[0]];
    int n_layout = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].kind != HS_STAGE_FINAL_NORM || d->final_norm) layout[n_layout++] = all[i];
    int n = 0;
    for (int i = 0; i < n_layout; i++) n += layout[i].per_layer ? d->layers : 1;
    m->n_stages = n;
    m->stages = hs_calloc((size_t)m->n_stages, sizeof *m->stages);
    if (!m->stages)
        return hs_error_set(L->err, HS_STATUS_NO_MEMORY, "%s: out of memory for stages", m->dir);
    /* per-layer kinds interleave: layer0.attn, layer0.ffn, layer1.attn, ... */
    int k = 0;
    for (int i = 0; i < n_layout; i++) {
        if (layout[i].per_layer && i > 0 && layout[i - 1].per_layer) continue;
        int run = i; /* the per-layer kinds listed together from i */
        while (run + 1 < n_layout && layout[i].per_layer && layout[run + 1].per_layer) run++;
        const int reps = layout[i].per_layer ? d->layers : 1;
        for (int l = 0; l < reps; l++)
            for (int j = i; j <= run; j++) {
                struct hs_stage *st = &m->stages[k++];
                st->kind = layout[j].kind;
                st->layer = layout[j].per_layer ? l : -1;
                st->dims = d;
                snprintf(st->name, sizeof st->name, layout[j].name, l);
                hs_status s = fill_stage(L, st);
                if (s) return s;
                if (st->kind == HS_STAGE_POOL && d->pool == HS_POOL_SPLADE &&
                    (!st->w[HS_W_MLM_DENSE].data || !st->w[HS_W_MLM_LN_G].data ||
                     !st->w[HS_W_MLM_DECODER].data))
                    return hs_error_set(
                        L->err, HS_STATUS_UNSUPPORTED,
                        "%s: SPLADE pooling needs the checkpoint's masked-LM head (BERT's "
                        "cls.predictions.transform.dense, .LayerNorm and the decoder or tied word "
                        "embeddings); model_type %s has none here (models[].pooling: mean, cls "
                        "or last serves its hidden states pooled instead)",
                        L->st_path, m->config.arch->model_type);
            }
    }
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

/* models[].pooling: a name for each mode a served model may be given instead of its folder's. */
static const struct {
    const char *name;
    enum hs_pool_mode mode;
} poolings[] = {
    {"mean", HS_POOL_MEAN},     {"cls", HS_POOL_CLS},   {"last", HS_POOL_LAST},
    {"splade", HS_POOL_SPLADE}, {"none", HS_POOL_NONE},
};

static hs_status set_pooling(struct hs_model_config *c, const char *pooling, const char *dir,
                             struct hs_error *err)
{
    if (!pooling || !*pooling) return HS_STATUS_OK;
    for (size_t i = 0; i < sizeof poolings / sizeof poolings[0]; i++)
        if (!strcmp(poolings[i].name, pooling)) {
            c->dims.pool = poolings[i].mode;
            /* the token embeddings and SPLADE's rows are answered as computed */
            if (c->dims.pool == HS_POOL_NONE || c->dims.pool == HS_POOL_SPLADE)
                c->dims.normalize = false;
            return HS_STATUS_OK;
        }
    return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                        "%s: pooling '%.32s' is not one of mean, cls, last, splade, none", dir,
                        pooling);
}

static hs_status load(const char *dir, bool weights, const char *pooling, struct hs_model **out,
                      struct hs_error *err)
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
    if ((s = set_pooling(&m->config, pooling, dir, err))) goto fail;
    m->config.dims.pool_rows = m->config.max_seq_len;

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
    if ((s = hs_weights_open(dir, &m->weights, err))) goto fail;
    snprintf(L.st_path, sizeof L.st_path, "%s", hs_weights_path(m->weights));
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
    return load(dir, true, NULL, out, err);
}

hs_status hs_model_load_meta(const char *dir, struct hs_model **out, struct hs_error *err)
{
    return load(dir, false, NULL, out, err);
}

hs_status hs_model_load_pooled(const char *dir, bool weights, const char *pooling,
                               struct hs_model **out, struct hs_error *err)
{
    return load(dir, weights, pooling, out, err);
}

void hs_model_free(struct hs_model *m)
{
    if (!m) return;
    hs_free(m->stages);
    hs_free(m->quant);
    hs_safetensors_close(m->quant_weights);
    hs_weights_close(m->weights);
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
