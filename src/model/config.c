/* hetserve — model folder configuration (see config.h for the contract).
 *
 * config.json: model/arch.c reads it through the family's row of the architecture table (key
 * names, HF defaults, block parameters). The other files of the folder are read here. A JSON
 * null counts as absent for optional keys.
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
#include "model/config_impl.h"

#define CFG_MAX_FILE_BYTES (64u * 1024u * 1024u)

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

hs_status hs__cfg_int(const json_t *obj, const char *label, const char *key, int def_ok, int def,
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

hs_status hs__cfg_bool(const json_t *obj, const char *label, const char *key, bool def, bool *out,
                       struct hs_error *err)
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

hs_status hs__cfg_str(const json_t *obj, const char *label, const char *key, const char *def,
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

hs_status hs__cfg_float(const json_t *obj, const char *label, const char *key, double def,
                        double lo, double hi, float *out, struct hs_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return HS_STATUS_OK;
    }
    if (!json_is_number(v))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be a number", label, key);
    double e = json_number_value(v);
    if (!(e > lo && e < hi) || (float)e == 0.0f)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: '%s' = %g is out of range (%g, %g) or rounds to 0 as a float",
                            label, key, e, lo, hi);
    *out = (float)e;
    return HS_STATUS_OK;
}

static hs_status parse_hf_root(const json_t *root, const char *label, struct hs_model_config *out,
                               int *pad_token_id, struct hs_error *err)
{
    return hs__arch_parse(root, label, out, pad_token_id, err);
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
    bool mean = false, cls = false, last = false;
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
        else if (strcmp(key, "pooling_mode_lasttoken") == 0)
            last = true;
        else
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "%s: '%s' is not supported (only mean, CLS or last-token pooling)",
                                label, key);
    }
    if (mean + cls + last > 1)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "%s: more than one pooling mode together is not supported", label);
    if (!mean && !cls && !last)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: no pooling mode is enabled", label);
    d->pool = mean ? HS_POOL_MEAN : cls ? HS_POOL_CLS : HS_POOL_LAST;

    int dim = 0;
    hs_status s = hs__cfg_int(root, label, "word_embedding_dimension", 1, d->hidden, 1,
                              CFG_MAX_HIDDEN, &dim, err);
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
        else if (strcmp(base, "SpladePooling") == 0) /* sentence-transformers' SparseEncoder */
            d->pool = HS_POOL_SPLADE;
        else if (strcmp(base, "Transformer") != 0 && strcmp(base, "Pooling") != 0 &&
                 strcmp(base, "MLMTransformer") != 0)
            return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                                "%s: module type '%.96s' is not supported (Transformer, "
                                "MLMTransformer, Pooling, SpladePooling, Normalize)",
                                label, type);
    }
    return HS_STATUS_OK;
}

/* Whether config.json's architectures[0] ends with "ForMaskedLM". */
static bool masked_lm_config(const json_t *root)
{
    const json_t *a = json_object_get(root, "architectures");
    const json_t *a0 = json_is_array(a) ? json_array_get(a, 0) : NULL;
    static const char suffix[] = "ForMaskedLM";
    const size_t k = sizeof suffix - 1, n = json_is_string(a0) ? json_string_length(a0) : 0;
    return n > k && !strcmp(json_string_value(a0) + n - k, suffix);
}

static hs_status parse_tokenizer_config(const json_t *root, const char *label,
                                        struct hs_model_config *c, struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", label);
    hs_status s;
    if ((s = hs__cfg_bool(root, label, "do_lower_case", true, &c->do_lower_case, err)) ||
        (s = hs__cfg_bool(root, label, "tokenize_chinese_chars", true, &c->tokenize_chinese_chars,
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
    /* a masked-LM checkpoint (SPLADE): its head's max-pooled log(1 + relu(logits)), unless a
     * 1_Pooling/config.json says how to pool its hidden states */
    if (!s && masked_lm_config(root)) c.dims.pool = HS_POOL_SPLADE;
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
            s = hs__cfg_int(root, label, "max_seq_length", 1, positions, 2, INT32_MAX,
                            &c.max_seq_len, err);
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
