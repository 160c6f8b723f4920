/* hetserve — classification heads on sentence embeddings.
 *
 * A head is a linear softmax classifier trained on one encoder's (pooled, normalized as the model
 * says) embeddings: probs = softmax(W x + b), W [classes, dim], b [classes], one label per class.
 * It is stored as JSON (tools/cascade/train_heads.py writes heads/<model>-sentiment.json):
 *   {"format": 1, "kind": "softmax-linear", "model": "<encoder name>", "labels": [..],
 *    "dim": D, "weight": [[D numbers] x classes], "bias": [classes numbers], ...}
 * Other keys are ignored. A head is read-only after load and safe to share between threads.
 */
#ifndef HS_MODEL_HEAD_H
#define HS_MODEL_HEAD_H

#include <stddef.h>

#include "core/status.h"

#define HS_HEAD_MAX_CLASSES 64
#define HS_HEAD_LABEL_MAX   64

struct hs_head {
    char model[128]; /* encoder the head was trained on ("" when the file does not say) */
    int n_classes;   /* 2 .. HS_HEAD_MAX_CLASSES */
    int dim;
    char labels[HS_HEAD_MAX_CLASSES][HS_HEAD_LABEL_MAX];
    float *weight; /* [n_classes, dim] */
    float *bias;   /* [n_classes] */
};

/* Loads a head file. On success *out owns the head (free with hs_head_free). Errors, with a
 * message naming the file and the fault: HS_STATUS_IO (cannot read), HS_STATUS_CORRUPT (invalid
 * JSON, wrong format or kind, missing or mistyped keys, shapes that disagree with dim and the
 * label count, non-finite numbers, fewer than 2 or more than HS_HEAD_MAX_CLASSES classes, empty,
 * duplicate or over-long labels), HS_STATUS_NO_MEMORY, HS_STATUS_INVALID_ARGUMENT (NULL). */
hs_status hs_head_load(const char *path, struct hs_head **out, struct hs_error *err);
/* Same checks on JSON text in memory, data[0..bytes) (not NUL-terminated; not kept); label names
 * it in messages (NULL: "<buffer>"). */
hs_status hs_head_load_buffer(const void *data, size_t bytes, const char *label,
                              struct hs_head **out, struct hs_error *err);
/* Frees a head; NULL is a no-op. */
void hs_head_free(struct hs_head *h);

/* probs[n_classes] = softmax(W x + b) for one embedding x[dim] (computed in double, stored as
 * float). Returns the index of the most probable class (the first on ties). Thread-safe. */
int hs_head_apply(const struct hs_head *h, const float *x, float *probs);

#endif
