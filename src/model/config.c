/* hetserve — model folder configuration (see config.h for the contract).
 *
 * config.json keys that are required: model_type, hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size, max_position_embeddings, vocab_size. Optional with
 * HuggingFace's BertConfig defaults: type_vocab_size (2), layer_norm_eps (1e-12), hidden_act
 * ("gelu"), pad_token_id (0), position_embedding_type ("absolute"; anything else unsupported).
 * model_type "mpnet" (HF MPNetModel) differs: type_vocab_size defaults to 1 and must be 1 (no
 * token-type table), pad_token_id defaults to 1, positions start at pad_token_id + 1,
 * relative_attention_num_buckets (32) sizes the attention's relative-position bias.
 * A JSON null counts as absent for optional keys.
 */
#include "model/config.h"
#include "model/seqcls.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"

/* Upper bounds keep every shape product below 2^63 and reject nonsense early. */
#define CFG_MAX_HIDDEN       (1 << 16)
#define CFG_MAX_INTERMEDIATE (1 << 20)
#define CFG_MAX_LAYERS       4096
#define CFG_MAX_VOCAB        (1 << 24)
#define CFG_MAX_POSITIONS    (1 << 20)
#define CFG_MAX_TYPE_VOCAB   (1 << 16)
#define CFG_MAX_FILE_BYTES   (64u * 1024u * 1024u)

/* Loads a JSON file. *root is NULL and HS_STATUS_OK when the file is absent and optional. */
static hs_status load_json(const char *dir, const char *rel, int required, json_t **root,
                           struct hs_error *err)
{
    char path[4096];
    *root = NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s/%s: path too long", dir, rel);
    char *buf;
    size_t len;
    hs_status s = hs_read_file(path, CFG_MAX_FILE_BYTES, &buf, &len, err);
    if (s == HS_STATUS_NOT_FOUND && !required) return HS_STATUS_OK;
    if (s) return s;
    json_error_t jerr;
    *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON at line %d column %d: %s", path,
                         jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(*root) && !json_is_array(*root)) {
        json_decref(*root);
        *root = NULL;
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object or array",
                         path);
    }
out:
    hs_free(buf);
    return s;
}

/* Integer key in [lo, hi]. Absent (or null) and def_ok: *out = def. */
static hs_status get_int(const json_t *obj, const char *label, const char *key, int def_ok, int def,
                         long long lo, long long hi, int *out, struct hs_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (!def_ok)
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: missing required key '%s'", label,
                                key);
        *out = def;
        return HS_STATUS_OK;
    }
    if (!json_is_integer(v))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be an integer", label, key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' = %lld is out of range [%lld, %lld]",
                            label, key, (long long)i, lo, hi);
    *out = (int)i;
    return HS_STATUS_OK;
}

/* Boolean key. Absent (or null): *out = def. */
static hs_status get_bool(const json_t *obj, const char *label, const char *key, bool def,
                          bool *out, struct hs_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return HS_STATUS_OK;
    }
    if (!json_is_boolean(v))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be true or false", label, key);
    *out = json_is_true(v);
    return HS_STATUS_OK;
}

/* String key; absent (or null) gives *out = def. */
static hs_status get_str(const json_t *obj, const char *label, const char *key, const char *def,
                         const char **out, struct hs_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return HS_STATUS_OK;
    }
    if (!json_is_string(v))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be a string", label, key);
    *out = json_string_value(v);
    return HS_STATUS_OK;
}

static hs_status parse_hf_root(const json_t *root, const char *label, struct hs_model_config *out,
                               int *pad_token_id, struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
    struct hs_encoder_dims d;
    memset(&d, 0, sizeof d);
    hs_status s;

    const char *mt = NULL;
    if ((s = get_str(root, label, "model_type", NULL, &mt, err))) return s;
    if (!mt)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: missing required key 'model_type'", label);
    const bool mpnet = strcmp(mt, "mpnet") == 0;
    if (strcmp(mt, "bert") != 0 && !mpnet)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: model_type '%.64s' is not supported (only 'bert' and 'mpnet')",
                            label, mt);

    if ((s = get_int(root, label, "hidden_size", 0, 0, 1, CFG_MAX_HIDDEN, &d.hidden, err)) ||
        (s = get_int(root, label, "num_hidden_layers", 0, 0, 1, CFG_MAX_LAYERS, &d.layers, err)) ||
        (s = get_int(root, label, "num_attention_heads", 0, 0, 1, CFG_MAX_HIDDEN, &d.heads, err)) ||
        (s = get_int(root, label, "intermediate_size", 0, 0, 1, CFG_MAX_INTERMEDIATE,
                     &d.intermediate, err)) ||
        (s = get_int(root, label, "max_position_embeddings", 0, 0, 1, CFG_MAX_POSITIONS,
                     &d.max_positions, err)) ||
        (s = get_int(root, label, "vocab_size", 0, 0, 1, CFG_MAX_VOCAB, &d.vocab, err)) ||
        (s = get_int(root, label, "type_vocab_size", 1, mpnet ? 1 : 2, 1, CFG_MAX_TYPE_VOCAB,
                     &d.type_vocab, err)))
        return s;
    if (mpnet && d.type_vocab != 1)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: an mpnet model has no token types (type_vocab_size %d)", label,
                            d.type_vocab);
    if (d.hidden % d.heads != 0)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: hidden_size %d is not divisible by num_attention_heads %d", label,
                            d.hidden, d.heads);
    d.head_dim = d.hidden / d.heads;

    int pad = 0;
    if ((s = get_int(root, label, "pad_token_id", 1, mpnet ? 1 : 0, 0, d.vocab - 1, &pad, err)))
        return s;
    if (mpnet) {
        /* HF MPNetEmbeddings: position ids count from padding_idx + 1; attention adds a bias per
         * relative-position bucket (max_distance is fixed at 128 in HF's code) */
        d.pos_offset = pad + 1;
        if (d.pos_offset + 2 > d.max_positions)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: max_position_embeddings %d leaves no positions after "
                                "pad_token_id %d",
                                label, d.max_positions, pad);
        if ((s = get_int(root, label, "relative_attention_num_buckets", 1, 32, 2, 1024,
                         &d.rel_buckets, err)))
            return s;
        if (d.rel_buckets % 4 != 0)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: relative_attention_num_buckets %d is not a multiple of 4",
                                label, d.rel_buckets);
        d.rel_max_distance = 128;
    }

    const json_t *eps = json_object_get(root, "layer_norm_eps");
    if (!eps || json_is_null(eps)) {
        d.ln_eps = 1e-12f;
    } else {
        if (!json_is_number(eps))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'layer_norm_eps' must be a number",
                                label);
        double e = json_number_value(eps);
        /* (the encoder adds it in float: one that rounds to 0 would divide by a zero variance) */
        if (!(e > 0.0 && e < 1.0) || (float)e == 0.0f)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: 'layer_norm_eps' = %g is out of range (0, 1) or rounds to 0 "
                                "as a float",
                                label, e);
        d.ln_eps = (float)e;
    }

    const char *act = NULL;
    if ((s = get_str(root, label, "hidden_act", "gelu", &act, err))) return s;
    if (strcmp(act, "gelu") == 0)
        d.act = HS_ACT_GELU_ERF;
    else if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0)
        d.act = HS_ACT_GELU_TANH;
    else if (strcmp(act, "relu") == 0)
        d.act = HS_ACT_RELU;
    else
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: unknown hidden_act '%.64s' (gelu, gelu_new, gelu_pytorch_tanh, "
                            "relu)",
                            label, act);

    const char *pet = NULL;
    if ((s = get_str(root, label, "position_embedding_type", "absolute", &pet, err))) return s;
    /* mpnet: absolute positions plus the relative bias above, whatever this key says */
    if (mpnet) pet = "absolute";
    if (strcmp(pet, "absolute") != 0)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: position_embedding_type '%.64s' is not supported (only "
                            "'absolute')",
                            label, pet);

    d.pool = HS_POOL_MEAN;
    d.normalize = false;
    out->dims = d;
    snprintf(out->model_type, sizeof out->model_type, "%s", mt);
    if (pad_token_id) *pad_token_id = pad;
    return HS_STATUS_OK;
}

hs_status hs_model_config_parse_hf(const char *json_text, const char *label,
                                   struct hs_model_config *out, struct hs_error *err)
{
    if (!label) label = "config.json";
    if (!json_text || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s: NULL argument", label);
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON at line %d column %d: %s",
                            label, jerr.line, jerr.column, jerr.text);
    hs_status s = parse_hf_root(root, label, out, NULL, err);
    json_decref(root);
    return s;
}

/* 1_Pooling/config.json: exactly one of mean / CLS pooling; any other mode is unsupported. */
static hs_status parse_pooling(const json_t *root, const char *label, struct hs_encoder_dims *d,
                               struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
    bool mean = false, cls = false;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v)
    {
        if (strncmp(key, "pooling_mode_", 13) != 0) continue;
        if (!json_is_boolean(v))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be true or false", label,
                                key);
        if (!json_is_true(v)) continue;
        if (strcmp(key, "pooling_mode_mean_tokens") == 0)
            mean = true;
        else if (strcmp(key, "pooling_mode_cls_token") == 0)
            cls = true;
        else
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "%s: '%s' is not supported (only mean or CLS pooling)", label, key);
    }
    if (mean && cls)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: mean and CLS pooling together are not supported", label);
    if (!mean && !cls)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: no pooling mode is enabled", label);
    d->pool = mean ? HS_POOL_MEAN : HS_POOL_CLS;

    int dim = 0;
    hs_status s = get_int(root, label, "word_embedding_dimension", 1, d->hidden, 1, CFG_MAX_HIDDEN,
                          &dim, err);
    if (s) return s;
    if (dim != d->hidden)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: word_embedding_dimension %d does not match hidden_size %d", label,
                            dim, d->hidden);
    return HS_STATUS_OK;
}

/* modules.json: a list of sentence-transformers modules. Transformer and Pooling are what the
 * stages implement; Normalize switches normalization on; anything else (Dense, ...) would be
 * silently skipped, so it is refused. */
static hs_status parse_modules(const json_t *root, const char *label, struct hs_encoder_dims *d,
                               struct hs_error *err)
{
    if (!json_is_array(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON array", label);
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)root, i, m)
    {
        if (!json_is_object(m))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: module %zu is not an object", label,
                                i);
        const json_t *t = json_object_get(m, "type");
        if (!json_is_string(t))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: module %zu has no string 'type'",
                                label, i);
        const char *type = json_string_value(t);
        const char *dot = strrchr(type, '.');
        const char *base = dot ? dot + 1 : type;
        if (strcmp(base, "Normalize") == 0)
            d->normalize = true;
        else if (strcmp(base, "Transformer") != 0 && strcmp(base, "Pooling") != 0)
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "%s: module type '%.96s' is not supported (Transformer, Pooling, "
                                "Normalize)",
                                label, type);
    }
    return HS_STATUS_OK;
}

static hs_status parse_tokenizer_config(const json_t *root, const char *label,
                                        struct hs_model_config *c, struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
    hs_status s;
    if ((s = get_bool(root, label, "do_lower_case", true, &c->do_lower_case, err)) ||
        (s = get_bool(root, label, "tokenize_chinese_chars", true, &c->tokenize_chinese_chars,
                      err)))
        return s;
    /* Special tokens: a string, or an AddedToken object {"content": ...}. */
    static const char *const keys[] = {"cls_token", "sep_token", "unk_token", "pad_token",
                                       "mask_token"};
    char *dst[] = {c->cls_token, c->sep_token, c->unk_token, c->pad_token, c->mask_token};
    for (int i = 0; i < 5; i++) {
        const json_t *v = json_object_get(root, keys[i]);
        if (v && json_is_object(v)) v = json_object_get(v, "content");
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) >= sizeof c->cls_token)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: '%s' must be a non-empty string of at most %zu bytes", label,
                                keys[i], sizeof c->cls_token - 1);
        snprintf(dst[i], sizeof c->cls_token, "%s", json_string_value(v));
    }
    const json_t *sa = json_object_get(root, "strip_accents");
    if (!sa || json_is_null(sa))
        c->strip_accents = -1;
    else if (json_is_boolean(sa))
        c->strip_accents = json_is_true(sa) ? 1 : 0;
    else
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: 'strip_accents' must be true, false or null", label);
    return HS_STATUS_OK;
}

hs_status hs_model_config_load(const char *dir, struct hs_model_config *out, struct hs_error *err)
{
    if (!dir || !out)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "model config: NULL argument");
    struct hs_model_config c;
    memset(&c, 0, sizeof c);
    c.do_lower_case = true;
    c.strip_accents = -1;
    c.tokenize_chinese_chars = true;
    snprintf(c.cls_token, sizeof c.cls_token, "[CLS]");
    snprintf(c.sep_token, sizeof c.sep_token, "[SEP]");
    snprintf(c.unk_token, sizeof c.unk_token, "[UNK]");
    snprintf(c.pad_token, sizeof c.pad_token, "[PAD]");
    snprintf(c.mask_token, sizeof c.mask_token, "[MASK]");

    char label[4200];
    json_t *root = NULL;
    hs_status s;

    snprintf(label, sizeof label, "%s/config.json", dir);
    if ((s = load_json(dir, "config.json", 1, &root, err))) return s;
    s = parse_hf_root(root, label, &c, &c.pad_token_id, err);
    /* a sequence classifier's head (model/seqcls.h) reads the first token, unnormalized */
    if (!s && hs_seqcls_config(root)) c.dims.pool = HS_POOL_CLS;
    json_decref(root);
    if (s) return s;

    snprintf(label, sizeof label, "%s/1_Pooling/config.json", dir);
    if ((s = load_json(dir, "1_Pooling/config.json", 0, &root, err))) return s;
    if (root) {
        s = parse_pooling(root, label, &c.dims, err);
        json_decref(root);
        if (s) return s;
    }

    snprintf(label, sizeof label, "%s/modules.json", dir);
    if ((s = load_json(dir, "modules.json", 0, &root, err))) return s;
    if (root) {
        s = parse_modules(root, label, &c.dims, err);
        json_decref(root);
        if (s) return s;
    }

    const int positions = c.dims.max_positions - c.dims.pos_offset; /* usable per sequence */
    c.max_seq_len = positions;
    snprintf(label, sizeof label, "%s/sentence_bert_config.json", dir);
    if ((s = load_json(dir, "sentence_bert_config.json", 0, &root, err))) return s;
    if (root) {
        if (!json_is_object(root))
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
        else
            s = get_int(root, label, "max_seq_length", 1, positions, 2, INT32_MAX, &c.max_seq_len,
                        err);
        json_decref(root);
        if (s) return s;
        if (c.max_seq_len > positions) c.max_seq_len = positions;
    }

    snprintf(label, sizeof label, "%s/tokenizer_config.json", dir);
    if ((s = load_json(dir, "tokenizer_config.json", 0, &root, err))) return s;
    if (root) {
        s = parse_tokenizer_config(root, label, &c, err);
        json_decref(root);
        if (s) return s;
    }

    if (c.max_seq_len < 2)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: max sequence length %d leaves no room for [CLS] and [SEP]", dir,
                            c.max_seq_len);
    *out = c;
    return HS_STATUS_OK;
}
