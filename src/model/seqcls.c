/* A checkpoint's sequence-classification head: see seqcls.h. */
#include "model/seqcls.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/tensor.h"
#include "model/safetensors.h"

/* The naming schemes of a head: the dense layer before the tanh, the output projection. */
static const struct scheme {
    const char *name, *dense, *out;
} schemes[] = {
    {"bert-pooler", "bert.pooler.dense", "classifier"},
    {"pooler", "pooler.dense", "classifier"},
    {"roberta-head", "classifier.dense", "classifier.out_proj"},
};

bool hs_seqcls_config(const json_t *root)
{
    const json_t *a = json_object_get(root, "architectures");
    const json_t *a0 = json_is_array(a) ? json_array_get(a, 0) : NULL;
    if (!json_is_string(a0)) return false;
    static const char suffix[] = "ForSequenceClassification";
    size_t n = json_string_length(a0), k = sizeof suffix - 1;
    return n > k && !strcmp(json_string_value(a0) + n - k, suffix);
}

/* The tensor name.leaf as f32 of the given shape (rows 0: a vector of cols) into *dst. */
static hs_status get_f32(const struct hs_safetensors *st, const char *path, const char *name,
                         const char *leaf, int64_t rows, int64_t cols, float **dst,
                         struct hs_error *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", name, leaf);
    struct hs_tensor t;
    if (hs_safetensors_get(st, full, &t, NULL) != HS_STATUS_OK)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: missing tensor '%s'", path, full);
    bool ok = t.dtype == HS_DTYPE_F32 || t.dtype == HS_DTYPE_F16 || t.dtype == HS_DTYPE_BF16;
    ok = ok && (rows ? t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols
                     : t.ndim == 1 && t.shape[0] == cols);
    if (!ok)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: tensor '%s' is %s of %d dims; expected a float [%lld%s%lld]", path,
                            full, hs_dtype_name(t.dtype), t.ndim, (long long)(rows ? rows : cols),
                            rows ? ", " : "", (long long)(rows ? cols : 0));
    size_t n = (size_t)(rows ? rows : 1) * (size_t)cols;
    *dst = hs_malloc(n * sizeof(float));
    if (!*dst) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
    hs_to_fp32(t.dtype, t.data, *dst, n);
    return HS_STATUS_OK;
}

/* config.json's id2label ({"0": "neg", ...}), problem_type; n_labels from the tensor. */
static hs_status read_labels(const json_t *root, const char *path, struct hs_seqcls *h,
                             struct hs_error *err)
{
    for (int i = 0; i < h->n_labels; i++)
        snprintf(h->labels[i], HS_SEQCLS_LABEL_MAX, "LABEL_%d", i);
    const json_t *pt = json_object_get(root, "problem_type");
    h->multi_label =
        json_is_string(pt) && !strcmp(json_string_value(pt), "multi_label_classification");
    const json_t *map = json_object_get(root, "id2label");
    if (!map || json_is_null(map)) return HS_STATUS_OK;
    if (!json_is_object(map))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'id2label' is not an object", path);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)map, key, v)
    {
        char *end;
        long id = strtol(key, &end, 10);
        if (*end || end == key || id < 0 || id >= h->n_labels || !json_is_string(v) ||
            json_string_length(v) == 0 || json_string_length(v) >= HS_SEQCLS_LABEL_MAX)
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: id2label '%.32s': expected an id in [0, %d) and a label of "
                                "1 to %d bytes",
                                path, key, h->n_labels, HS_SEQCLS_LABEL_MAX - 1);
        snprintf(h->labels[id], HS_SEQCLS_LABEL_MAX, "%s", json_string_value(v));
    }
    return HS_STATUS_OK;
}

hs_status hs_seqcls_load(const char *dir, int hidden, struct hs_seqcls **out, struct hs_error *err)
{
    if (!dir || !out || hidden < 1)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "seqcls: bad argument");
    *out = NULL;
    char path[4200], cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char *text = NULL;
    size_t len = 0;
    hs_status s = hs_read_file(cpath, 1 << 22, &text, &len, err);
    if (s) return s;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    hs_free(text);
    if (!root || !hs_seqcls_config(root)) {
        json_decref(root);
        return HS_STATUS_NOT_FOUND; /* (a malformed file is the config loader's to report) */
    }
    struct hs_safetensors *st = NULL;
    struct hs_seqcls *h = hs_calloc(1, sizeof *h);
    if (!h) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
        goto out;
    }
    h->hidden = hidden;
    if (hidden > HS_SEQCLS_MAX_HIDDEN) {
        s = hs_error_set(err, HS_STATUS_UNSUPPORTED,
                         "%s: a classifier head on %d hidden units; at most %d are served", dir,
                         hidden, HS_SEQCLS_MAX_HIDDEN);
        goto out;
    }
    if ((s = hs_safetensors_open(path, &st, err))) goto out;
    const struct scheme *sc = NULL;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0] && !sc; i++) {
        char nm[160];
        struct hs_tensor t;
        snprintf(nm, sizeof nm, "%s.weight", schemes[i].out);
        bool has_out = hs_safetensors_get(st, nm, &t, NULL) == HS_STATUS_OK;
        snprintf(nm, sizeof nm, "%s.weight", schemes[i].dense);
        if (has_out && t.ndim == 2 && t.shape[1] == hidden &&
            hs_safetensors_get(st, nm, &t, NULL) == HS_STATUS_OK)
            sc = &schemes[i];
    }
    if (!sc) {
        s = hs_error_set(err, HS_STATUS_CORRUPT,
                         "%s: a sequence classifier without its head: no '[bert.]pooler.dense' + "
                         "'classifier' nor 'classifier.dense' + 'classifier.out_proj' tensors",
                         path);
        goto out;
    }
    snprintf(h->scheme, sizeof h->scheme, "%s", sc->name);
    {
        char nm[160];
        struct hs_tensor t;
        snprintf(nm, sizeof nm, "%s.weight", sc->out);
        hs_safetensors_get(st, nm, &t, NULL);
        if (t.shape[0] < 1 || t.shape[0] > HS_SEQCLS_MAX_LABELS) {
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' has %lld labels; 1 to %d are served",
                             path, nm, (long long)t.shape[0], HS_SEQCLS_MAX_LABELS);
            goto out;
        }
        h->n_labels = (int)t.shape[0];
    }
    if ((s = get_f32(st, path, sc->dense, "weight", hidden, hidden, &h->w1, err)) ||
        (s = get_f32(st, path, sc->dense, "bias", 0, hidden, &h->b1, err)) ||
        (s = get_f32(st, path, sc->out, "weight", h->n_labels, hidden, &h->w2, err)) ||
        (s = get_f32(st, path, sc->out, "bias", 0, h->n_labels, &h->b2, err)))
        goto out;
    h->labels = hs_calloc((size_t)h->n_labels, sizeof *h->labels);
    if (!h->labels) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
        goto out;
    }
    if ((s = read_labels(root, cpath, h, err))) goto out;
    *out = h;
    h = NULL;
out:
    hs_safetensors_close(st);
    hs_seqcls_free(h);
    json_decref(root);
    return s;
}

void hs_seqcls_free(struct hs_seqcls *h)
{
    if (!h) return;
    hs_free(h->w1);
    hs_free(h->b1);
    hs_free(h->w2);
    hs_free(h->b2);
    hs_free(h->labels);
    hs_free(h);
}

void hs_seqcls_logits(const struct hs_seqcls *h, const float *x, float *logits)
{
    const int d = h->hidden; /* <= HS_SEQCLS_MAX_HIDDEN (load) */
    double m[HS_SEQCLS_MAX_HIDDEN];
    for (int o = 0; o < d; o++) {
        double acc = h->b1[o];
        const float *w = h->w1 + (size_t)o * (size_t)d;
        for (int j = 0; j < d; j++) acc += (double)w[j] * x[j];
        m[o] = tanh(acc);
    }
    for (int i = 0; i < h->n_labels; i++) {
        double acc = h->b2[i];
        const float *w = h->w2 + (size_t)i * (size_t)d;
        for (int j = 0; j < d; j++) acc += (double)w[j] * m[j];
        logits[i] = (float)acc;
    }
}

void hs_seqcls_activate(const struct hs_seqcls *h, float *s)
{
    if (h->multi_label || h->n_labels == 1) {
        for (int i = 0; i < h->n_labels; i++) s[i] = (float)(1.0 / (1.0 + exp(-(double)s[i])));
        return;
    }
    double mx = s[0], sum = 0;
    for (int i = 1; i < h->n_labels; i++) mx = s[i] > mx ? s[i] : mx;
    for (int i = 0; i < h->n_labels; i++) sum += exp((double)s[i] - mx);
    for (int i = 0; i < h->n_labels; i++) s[i] = (float)(exp((double)s[i] - mx) / sum);
}
