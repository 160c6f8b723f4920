/* hetserve — a checkpoint's own sequence-classification head (`*ForSequenceClassification`:
 * cross-encoders / rerankers with one label, classifiers with id2label).
 *
 * The encoder's stages pool the first token ([CLS] / <s>) without normalizing (hs_seqcls_config
 * tells the config loader so); the head runs on that row, on the host:
 *   logits = W2 tanh(W1 x + b1) + b2
 * with (W1, b1, W2, b2) read from the checkpoint under one of the naming schemes of the table in
 * seqcls.c: BERT's pooler (`[bert.]pooler.dense.*`, `classifier.*`) or RoBERTa's classification
 * head (`classifier.dense.*`, `classifier.out_proj.*`). Labels come from config.json's id2label
 * ("LABEL_<i>" where absent); problem_type "multi_label_classification" scores each label with
 * a sigmoid, otherwise a softmax over the labels (one label: a sigmoid).
 *
 * A head is read-only after load and safe to share between threads.
 */
#ifndef HS_MODEL_SEQCLS_H
#define HS_MODEL_SEQCLS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/status.h"

#define HS_SEQCLS_MAX_LABELS 256
#define HS_SEQCLS_LABEL_MAX  64
#define HS_SEQCLS_MAX_HIDDEN 8192

struct hs_seqcls {
    int hidden;
    int n_labels;
    bool multi_label; /* problem_type "multi_label_classification": a sigmoid per label */
    float *w1, *b1;   /* [hidden, hidden], [hidden] */
    float *w2, *b2;   /* [n_labels, hidden], [n_labels] */
    char (*labels)[HS_SEQCLS_LABEL_MAX]; /* [n_labels] */
    char scheme[32];                     /* the naming scheme the tensors were found under */
};

/* Whether a parsed config.json describes a sequence classifier (architectures[0] ends with
 * "ForSequenceClassification"): its encoder then pools the first token, unnormalized. */
bool hs_seqcls_config(const json_t *config_root);

/* Loads the head of the model folder dir (config.json, model.safetensors) for an encoder of
 * `hidden` units (at most HS_SEQCLS_MAX_HIDDEN). HS_STATUS_NOT_FOUND when config.json does not
 * describe a sequence classifier (no error message then); HS_STATUS_CORRUPT (missing tensors, wrong
 * shapes, bad id2label), HS_STATUS_UNSUPPORTED (wider than HS_SEQCLS_MAX_HIDDEN), HS_STATUS_IO,
 * HS_STATUS_NO_MEMORY with a message naming the file. */
hs_status hs_seqcls_load(const char *dir, int hidden, struct hs_seqcls **out, struct hs_error *err);
void hs_seqcls_free(struct hs_seqcls *h);

/* logits[n_labels] for one pooled row x[hidden] (computed in double). Thread-safe. */
void hs_seqcls_logits(const struct hs_seqcls *h, const float *x, float *logits);
/* Scores from logits in place: a sigmoid per label (multi-label or one label), else a softmax. */
void hs_seqcls_activate(const struct hs_seqcls *h, float *scores);

#endif
