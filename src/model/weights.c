/* hetserve — a model folder's weights (see weights.h for the contract). */
#include "model/weights.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "model/safetensors.h"

#define WEIGHTS_PATH_MAX   4096
#define WEIGHTS_MAX_SHARDS 4096
#define INDEX_MAX_BYTES    (64u * 1024u * 1024u)

struct hs_weights {
    char path[WEIGHTS_PATH_MAX];
    int n;
    struct hs_safetensors **shards;
};

void hs__weights_files_free(char **files)
{
    if (!files) return;
    for (char **f = files; *f; f++) hs_free(*f);
    hs_free(files);
}

static bool plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && strlen(s) < 256;
}

hs_status hs__weights_index_parse(const char *json, size_t len, const char *label, char ***files,
                                  int *n_files, struct hs_error *err)
{
    *files = NULL;
    *n_files = 0;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON at line %d column %d: %s",
                            label, jerr.line, jerr.column, jerr.text);
    hs_status s = HS_STATUS_OK;
    const json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    char **out = NULL;
    int n = 0;
    if (!json_is_object(map) || json_object_size(map) == 0) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: no 'weight_map' object of tensor names",
                         label);
        goto done;
    }
    out = hs_calloc(1, sizeof *out);
    if (!out) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)map, key, v)
    {
        if (!json_is_string(v) || !plain_name(json_string_value(v))) {
            s = hs_error_set(err, HS_STATUS_CORRUPT,
                             "%s: tensor '%.64s' maps to something that is not a file name in "
                             "the folder",
                             label, key);
            goto done;
        }
        const char *f = json_string_value(v);
        int i = 0;
        while (i < n && strcmp(out[i], f) != 0) i++;
        if (i < n) continue;
        if (n >= WEIGHTS_MAX_SHARDS) {
            s = hs_error_set(err, HS_STATUS_UNSUPPORTED, "%s: more than %d shards", label,
                             WEIGHTS_MAX_SHARDS);
            goto done;
        }
        char **grown = hs_realloc(out, sizeof *out * (size_t)(n + 2));
        char *copy = grown ? hs_strdup(f) : NULL;
        if (grown) out = grown;
        if (!copy) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", label);
            goto done;
        }
        out[n++] = copy;
        out[n] = NULL;
    }
done:
    json_decref(root);
    if (s) {
        hs__weights_files_free(out);
        return s;
    }
    *files = out;
    *n_files = n;
    return HS_STATUS_OK;
}

void hs_weights_close(struct hs_weights *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) hs_safetensors_close(w->shards[i]);
    hs_free(w->shards);
    hs_free(w);
}

/* Every name of the index's weight map is in the shard it names. */
static hs_status check_map(struct hs_weights *w, const char *json, size_t len, char **files,
                           struct hs_error *err)
{
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
    if (!root) return hs_error_set(err, HS_STATUS_CORRUPT, "%s: invalid JSON", w->path);
    const json_t *map = json_object_get(root, "weight_map");
    const char *key;
    json_t *v;
    hs_status s = HS_STATUS_OK;
    json_object_foreach((json_t *)map, key, v)
    {
        int i = 0;
        while (files[i] && strcmp(files[i], json_string_value(v)) != 0) i++;
        struct hs_tensor t;
        if (!files[i] || hs_safetensors_get(w->shards[i], key, &t, NULL) != HS_STATUS_OK) {
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: tensor '%.64s' is not in shard '%s'",
                             w->path, key, json_string_value(v));
            break;
        }
    }
    json_decref(root);
    return s;
}

hs_status hs_weights_open(const char *dir, struct hs_weights **out, struct hs_error *err)
{
    *out = NULL;
    struct hs_weights *w = hs_calloc(1, sizeof *w);
    if (!w) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
    hs_status s;
    if (snprintf(w->path, sizeof w->path, "%s/model.safetensors", dir) >= (int)sizeof w->path) {
        hs_free(w);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "%s: path too long", dir);
    }
    FILE *probe = fopen(w->path, "rb");
    if (probe) {
        fclose(probe);
        w->shards = hs_calloc(1, sizeof *w->shards);
        if (!w->shards) {
            hs_free(w);
            return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
        }
        if ((s = hs_safetensors_open(w->path, &w->shards[0], err))) {
            hs_weights_close(w);
            return s;
        }
        w->n = 1;
        *out = w;
        return HS_STATUS_OK;
    }
    snprintf(w->path, sizeof w->path, "%s/model.safetensors.index.json", dir);
    char *json = NULL;
    size_t len = 0;
    if ((s = hs_read_file(w->path, INDEX_MAX_BYTES, &json, &len, err))) {
        if (s == HS_STATUS_NOT_FOUND)
            s = hs_error_set(err, HS_STATUS_IO,
                             "%s: cannot open model.safetensors (nor model.safetensors.index.json)",
                             dir);
        hs_free(w);
        return s;
    }
    char **files = NULL;
    int n = 0;
    if ((s = hs__weights_index_parse(json, len, w->path, &files, &n, err))) goto fail;
    w->shards = hs_calloc((size_t)n, sizeof *w->shards);
    if (!w->shards) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", dir);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        char p[WEIGHTS_PATH_MAX + 260];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if ((s = hs_safetensors_open(p, &w->shards[i], err))) goto fail;
        w->n = i + 1;
    }
    if ((s = check_map(w, json, len, files, err))) goto fail;
    hs__weights_files_free(files);
    hs_free(json);
    *out = w;
    return HS_STATUS_OK;
fail:
    hs__weights_files_free(files);
    hs_free(json);
    hs_weights_close(w);
    return s;
}

hs_status hs_weights_get(const struct hs_weights *w, const char *name, struct hs_tensor *out,
                         struct hs_error *err)
{
    for (int i = 0; i < w->n; i++)
        if (hs_safetensors_get(w->shards[i], name, out, NULL) == HS_STATUS_OK) return HS_STATUS_OK;
    return hs_error_set(err, HS_STATUS_NOT_FOUND, "%s: no tensor '%.128s'", w->path, name);
}

const char *hs_weights_path(const struct hs_weights *w)
{
    return w->path;
}

int hs_weights_shards(const struct hs_weights *w)
{
    return w->n;
}

const struct hs_safetensors *hs_weights_shard(const struct hs_weights *w, int i)
{
    return w && i >= 0 && i < w->n ? w->shards[i] : NULL;
}
