/* hetserve — classification heads (see head.h for the contract). */
#include "model/head.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define HEAD_MAX_DIM (1 << 16)

static hs_status read_floats(const json_t *arr, float *out, int n, const char *path,
                             const char *what, struct hs_error *err)
{
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)n)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: '%s' must be an array of %d numbers", path,
                            what, n);
    for (int i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_number(v))
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s[%d] is not a number", path, what,
                                i);
        double d = json_number_value(v);
        if (!isfinite(d) || fabs(d) > 3.0e38)
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s[%d] = %g is not a finite float",
                                path, what, i, d);
        out[i] = (float)d;
    }
    return HS_STATUS_OK;
}

static hs_status parse(const json_t *root, const char *path, struct hs_head *h,
                       struct hs_error *err)
{
    if (!json_is_object(root))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: top level is not a JSON object", path);
    const json_t *fmt = json_object_get(root, "format");
    if (!json_is_integer(fmt) || json_integer_value(fmt) != 1)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'format' must be 1", path);
    const json_t *kind = json_object_get(root, "kind");
    if (kind && !(json_is_string(kind) && !strcmp(json_string_value(kind), "softmax-linear")))
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'kind' must be \"softmax-linear\"", path);
    const json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model) || json_string_length(model) >= sizeof h->model)
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'model' must be a short string", path);
        snprintf(h->model, sizeof h->model, "%s", json_string_value(model));
    }
    const json_t *dim = json_object_get(root, "dim");
    if (!json_is_integer(dim) || json_integer_value(dim) < 1 ||
        json_integer_value(dim) > HEAD_MAX_DIM)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'dim' must be an integer in [1, %d]", path,
                            HEAD_MAX_DIM);
    h->dim = (int)json_integer_value(dim);
    const json_t *labels = json_object_get(root, "labels");
    if (!json_is_array(labels) || json_array_size(labels) < 2 ||
        json_array_size(labels) > HS_HEAD_MAX_CLASSES)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: 'labels' must be an array of 2 to %d strings", path,
                            HS_HEAD_MAX_CLASSES);
    h->n_classes = (int)json_array_size(labels);
    for (int c = 0; c < h->n_classes; c++) {
        const json_t *l = json_array_get(labels, (size_t)c);
        if (!json_is_string(l) || json_string_length(l) == 0 ||
            json_string_length(l) >= HS_HEAD_LABEL_MAX ||
            strlen(json_string_value(l)) != json_string_length(l))
            return hs_error_set(err, HS_STATUS_CORRUPT,
                                "%s: labels[%d] must be a non-empty string of at most %d bytes",
                                path, c, HS_HEAD_LABEL_MAX - 1);
        snprintf(h->labels[c], sizeof h->labels[c], "%s", json_string_value(l));
        for (int k = 0; k < c; k++)
            if (!strcmp(h->labels[k], h->labels[c]))
                return hs_error_set(err, HS_STATUS_CORRUPT, "%s: label '%s' appears twice", path,
                                    h->labels[c]);
    }
    h->weight = hs_malloc(sizeof(float) * (size_t)h->n_classes * (size_t)h->dim);
    h->bias = hs_malloc(sizeof(float) * (size_t)h->n_classes);
    if (!h->weight || !h->bias)
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
    const json_t *w = json_object_get(root, "weight");
    if (!json_is_array(w) || json_array_size(w) != (size_t)h->n_classes)
        return hs_error_set(err, HS_STATUS_CORRUPT,
                            "%s: 'weight' must be %d rows (one per label) of %d numbers", path,
                            h->n_classes, h->dim);
    hs_status s;
    for (int c = 0; c < h->n_classes; c++) {
        char what[32];
        snprintf(what, sizeof what, "weight[%d]", c);
        if ((s = read_floats(json_array_get(w, (size_t)c), h->weight + (size_t)c * h->dim, h->dim,
                             path, what, err)))
            return s;
    }
    return read_floats(json_object_get(root, "bias"), h->bias, h->n_classes, path, "bias", err);
}

/* Builds the head from a parsed file (root is borrowed). */
static hs_status from_root(json_t *root, const char *label, struct hs_head **out,
                           struct hs_error *err)
{
    struct hs_head *h = hs_calloc(1, sizeof *h);
    hs_status s = h ? parse(root, label, h, err)
                    : hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
    if (s) {
        hs_head_free(h);
        return s;
    }
    *out = h;
    return HS_STATUS_OK;
}

hs_status hs_head_load(const char *path, struct hs_head **out, struct hs_error *err)
{
    if (!path || !out) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "head: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hs_error_set(err, HS_STATUS_IO, "%s: cannot open head file", path);
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON at line %d column %d: %s",
                            path, je.line, je.column, je.text);
    hs_status s = from_root(root, path, out, err);
    json_decref(root);
    return s;
}

hs_status hs_head_load_buffer(const void *data, size_t bytes, const char *label,
                              struct hs_head **out, struct hs_error *err)
{
    if (!label) label = "<buffer>";
    if (!out || (!data && bytes))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "head: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(data ? data : "", bytes, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON at line %d column %d: %s",
                            label, je.line, je.column, je.text);
    hs_status s = from_root(root, label, out, err);
    json_decref(root);
    return s;
}

void hs_head_free(struct hs_head *h)
{
    if (!h) return;
    hs_free(h->weight);
    hs_free(h->bias);
    hs_free(h);
}

int hs_head_apply(const struct hs_head *h, const float *x, float *probs)
{
    double z[HS_HEAD_MAX_CLASSES], mx = -INFINITY, sum = 0.0;
    int best = 0;
    for (int c = 0; c < h->n_classes; c++) {
        const float *w = h->weight + (size_t)c * h->dim;
        double acc = h->bias[c];
        for (int j = 0; j < h->dim; j++) acc += (double)w[j] * x[j];
        z[c] = acc;
        if (acc > mx) mx = acc, best = c;
    }
    for (int c = 0; c < h->n_classes; c++) sum += (z[c] = exp(z[c] - mx));
    for (int c = 0; c < h->n_classes; c++) probs[c] = (float)(z[c] / sum);
    return best;
}
