/* A served model's tasks beyond its embeddings: see tasks.h. */
#include "server/tasks.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "model/model.h"
#include "model/seqcls.h"

static hs_status load_prompts(const char *dir, struct hs__tasks *t, struct hs_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config_sentence_transformers.json", dir);
    char *text = NULL;
    size_t len = 0;
    struct hs_error e2;
    hs_error_clear(&e2);
    hs_status s = hs_read_file(path, 1 << 20, &text, &len, &e2);
    if (s == HS_STATUS_NOT_FOUND) return HS_STATUS_OK;
    if (s) return hs_error_set(err, s, "%s", e2.msg);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    hs_free(text);
    if (!json_is_object(root)) {
        json_decref(root);
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: not a JSON object", path);
    }
    json_t *pr = json_object_get(root, "prompts");
    if (pr && !json_is_null(pr)) {
        if (!json_is_object(pr)) {
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: 'prompts' is not an object", path);
            goto out;
        }
        const char *key;
        json_t *v;
        json_object_foreach(pr, key, v)
        {
            if (!json_is_string(v)) {
                s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: prompts['%.64s'] is not a string",
                                 path, key);
                goto out;
            }
            if (t->n_prompts == HS__PROMPTS_MAX) {
                s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: more than %d prompts", path,
                                 HS__PROMPTS_MAX);
                goto out;
            }
            struct hs__prompt *p = &t->prompts[t->n_prompts++];
            p->name = hs_strdup(key);
            p->text = hs_strndup(json_string_value(v), json_string_length(v));
            p->text_len = json_string_length(v);
            if (!p->name || !p->text) {
                s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
                goto out;
            }
        }
    }
    json_t *dp = json_object_get(root, "default_prompt_name");
    if (dp && !json_is_null(dp)) {
        for (int i = 0; i < t->n_prompts && json_is_string(dp); i++)
            if (!strcmp(t->prompts[i].name, json_string_value(dp))) t->default_prompt = i;
        if (t->default_prompt < 0)
            s = hs_error_set(err, HS_STATUS_CORRUPT,
                             "%s: default_prompt_name does not name one of its prompts", path);
    }
out:
    json_decref(root);
    return s;
}

hs_status hs__tasks_set_dims(struct hs__tasks *t, const int *dims, int n, int full,
                             const char *label, struct hs_error *err)
{
    if (n > HS__DIMS_MAX)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: more than %d Matryoshka sizes",
                            label, HS__DIMS_MAX);
    for (int i = 0; i < n; i++)
        if (dims[i] < 1 || dims[i] > full)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s: Matryoshka size %d is outside [1, %d] (the model's width)",
                                label, dims[i], full);
    memcpy(t->dims, dims, sizeof(int) * (size_t)n);
    t->n_dims = n;
    return HS_STATUS_OK;
}

/* config.json's "matryoshka_dimensions": [int, ...], when present. */
static hs_status load_dims(const struct hs_model *m, struct hs__tasks *t, struct hs_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    char *text = NULL;
    size_t len = 0;
    hs_status s = hs_read_file(path, 1 << 22, &text, &len, err);
    if (s) return s;
    json_t *root = json_loadb(text, len, 0, NULL);
    hs_free(text);
    const json_t *md = json_object_get(root, "matryoshka_dimensions");
    int dims[HS__DIMS_MAX], n = 0;
    if (md && !json_is_null(md)) {
        if (!json_is_array(md) || json_array_size(md) > HS__DIMS_MAX)
            s = hs_error_set(err, HS_STATUS_CORRUPT,
                             "%s: 'matryoshka_dimensions' must be an array of at most %d sizes",
                             path, HS__DIMS_MAX);
        for (size_t i = 0; !s && i < json_array_size(md); i++) {
            const json_t *v = json_array_get(md, i);
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > m->config.dims.hidden)
                s = hs_error_set(err, HS_STATUS_CORRUPT,
                                 "%s: matryoshka_dimensions[%zu] must be an integer in [1, %d]",
                                 path, i, m->config.dims.hidden);
            else
                dims[n++] = (int)json_integer_value(v);
        }
        if (!s) s = hs__tasks_set_dims(t, dims, n, m->config.dims.hidden, path, err);
    }
    json_decref(root);
    return s;
}

int hs__tasks_check_dims(const struct hs__tasks *t, int dim, int full, const char *model, char *msg,
                         size_t cap)
{
    if (!t || !t->n_dims || dim == full) return 0;
    for (int i = 0; i < t->n_dims; i++)
        if (t->dims[i] == dim) return 0;
    size_t n = (size_t)snprintf(
        msg, cap, "'dimensions' %d is not a size model %s was trained for: one of ", dim, model);
    for (int i = 0; i < t->n_dims && n < cap; i++)
        n += (size_t)snprintf(msg + n, cap - n, "%d, ", t->dims[i]);
    if (n < cap) snprintf(msg + n, cap - n, "or %d (the full row)", full);
    return 400;
}

hs_status hs__tasks_load(const struct hs_model *m, struct hs__tasks **out, struct hs_error *err)
{
    *out = NULL;
    struct hs__tasks *t = hs_calloc(1, sizeof *t);
    if (!t) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", m->dir);
    t->default_prompt = -1;
    hs_status s = load_prompts(m->dir, t, err);
    if (!s) s = load_dims(m, t, err);
    if (!s) {
        s = hs_seqcls_load(m->dir, m->config.dims.hidden, &t->cls, err);
        if (s == HS_STATUS_NOT_FOUND) s = HS_STATUS_OK;
    }
    if (s) {
        hs__tasks_free(t);
        return s;
    }
    *out = t;
    return HS_STATUS_OK;
}

void hs__tasks_free(struct hs__tasks *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_prompts; i++) {
        hs_free(t->prompts[i].name);
        hs_free(t->prompts[i].text);
    }
    hs_seqcls_free(t->cls);
    hs_free(t);
}

int hs__tasks_prompt(const struct hs__tasks *t, const char *name, const struct hs__prompt **p,
                     char *msg, size_t cap)
{
    *p = NULL;
    if (!name) {
        if (t && t->default_prompt >= 0) *p = &t->prompts[t->default_prompt];
        return 0;
    }
    for (int i = 0; t && i < t->n_prompts; i++)
        if (!strcmp(t->prompts[i].name, name)) {
            *p = &t->prompts[i];
            return 0;
        }
    size_t n =
        (size_t)snprintf(msg, cap, "prompt_name '%.64s' is not one of the model's prompts (", name);
    for (int i = 0; t && i < t->n_prompts && n < cap; i++)
        n += (size_t)snprintf(msg + n, cap - n, "%s%s", i ? ", " : "", t->prompts[i].name);
    if (n < cap)
        snprintf(msg + n, cap - n, "%s)",
                 t && t->n_prompts ? ""
                                   : "none: it has no config_sentence_transformers.json prompts");
    return 400;
}
