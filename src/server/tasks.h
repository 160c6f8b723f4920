/* hetserve — what a served model does beyond its embeddings (tasks.c): the prompts of its
 * config_sentence_transformers.json and, for a sequence classifier (a cross-encoder), the
 * checkpoint's own head (model/seqcls.h).
 *
 * config_sentence_transformers.json: {"prompts": {"query": "query: ", ...},
 * "default_prompt_name": "query" | null}. A request's prompt_name picks one, whose text is put
 * before the input text before tokenization (as sentence-transformers does); without one the
 * default applies, when the file names one.
 *
 * Matryoshka sizes: config.json's "matryoshka_dimensions" (the key Jina's checkpoints carry and
 * vLLM / SGLang read), or the config's models[].dimensions, which wins: the sizes a request's
 * `dimensions` may cut a row to (the full size always). None declared: any size up to the full.
 *
 * Read-only after load; safe to share between threads.
 */
#ifndef HS_SERVER_TASKS_H
#define HS_SERVER_TASKS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define HS__PROMPTS_MAX 32
#define HS__DIMS_MAX    32

struct hs_seqcls;
struct hs_model;

struct hs__prompt {
    char *name, *text;
    size_t text_len;
};

struct hs__tasks {
    int n_prompts;
    struct hs__prompt prompts[HS__PROMPTS_MAX];
    int default_prompt;    /* index in prompts, -1: none */
    struct hs_seqcls *cls; /* the checkpoint's classifier head, NULL for an embedding model */
    int n_dims;            /* declared Matryoshka sizes (0: any size up to the full one) */
    int dims[HS__DIMS_MAX];
};

/* The tasks of model m (its folder's files). *out is never NULL on success. Errors name the file:
 * HS_STATUS_CORRUPT (a malformed config_sentence_transformers.json or classifier head),
 * HS_STATUS_NO_MEMORY. */
hs_status hs__tasks_load(const struct hs_model *m, struct hs__tasks **out, struct hs_error *err);
void hs__tasks_free(struct hs__tasks *t);
/* Declares the Matryoshka sizes dims[0..n) (each in [1, full]; n <= HS__DIMS_MAX) over those of
 * config.json; label names their source in errors (HS_STATUS_INVALID_INPUT). */
hs_status hs__tasks_set_dims(struct hs__tasks *t, const int *dims, int n, int full,
                             const char *label, struct hs_error *err);
/* Whether a request may cut rows of `full` values to `dim` (1 <= dim <= full): 0, or 400 with a
 * message listing the declared sizes. */
int hs__tasks_check_dims(const struct hs__tasks *t, int dim, int full, const char *model, char *msg,
                         size_t cap);

/* The prompt a request asks for (name, NULL: the default). 0 with *text (NULL: none), or 400 with
 * a message naming the known prompts. */
int hs__tasks_prompt(const struct hs__tasks *t, const char *name, const struct hs__prompt **p,
                     char *msg, size_t cap);

#endif
