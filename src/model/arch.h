/* hetserve — the architecture table: one row per model family.
 *
 * A row says how a family's folder becomes stages (engine/stage.h):
 *   model_type and its aliases (config.json "model_type");
 *   the names of its hyper-parameters in config.json and their defaults, plus a hook that reads
 *   the family's block parameters (positions, norms, FFN kind, attention kind) into
 *   hs_encoder_dims;
 *   a tensor-name map: for each canonical (stage, role), the HF tensor name (a printf pattern,
 *   %d = layer), its shape in terms of the dimensions, whether it is optional, and, for fused
 *   tensors (QKV stacked, gate and up stacked), which row block of the stored tensor it is;
 *   prefixes tried in turn before every name ("", "bert.", ...);
 *   the pooling used when the folder has no 1_Pooling/config.json.
 * model/model.c builds the stage list of any row with one loop over its map; a new family is a
 * row, and a new kernel only where its blocks need a feature no engine runs yet.
 */
#ifndef HS_MODEL_ARCH_H
#define HS_MODEL_ARCH_H

#include <stddef.h>

#include "engine/stage.h"

/* Symbolic sizes of the tensor map; resolved against hs_encoder_dims. */
enum hs_arch_dim {
    HS_AD_NONE, /* (second dimension only) the tensor is 1-D */
    HS_AD_H,    /* hidden */
    HS_AD_I,    /* intermediate */
    HS_AD_V,    /* vocab */
    HS_AD_P,    /* max_positions */
    HS_AD_T,    /* type_vocab */
    HS_AD_RB,   /* rel_buckets */
    HS_AD_NH,   /* heads */
    HS_AD_Q,    /* heads * head_dim: the q projection's width */
    HS_AD_KV,   /* kv_heads * head_dim: the k and v projections' width */
    HS_AD_HD,   /* head_dim */
};

enum {
    HS_ARCH_OPTIONAL = 1u << 0, /* absent: the role's data stays NULL */
    HS_ARCH_GAMMA = 1u << 1,    /* also found as .gamma / .beta (TensorFlow-era LayerNorm names) */
};

struct hs_arch_tensor {
    enum hs_stage_kind stage; /* EMBED, ATTN or FFN (per layer), FINAL_NORM */
    enum hs_weight_role role;
    const char *name;            /* after the prefix; %d = the layer of ATTN / FFN rows */
    enum hs_arch_dim rows, cols; /* shape [rows, cols], or [rows] when cols is HS_AD_NONE */
    unsigned char part, parts;   /* fused (parts > 1): rows [part * rows, (part + 1) * rows)
                                    of a stored [parts * rows, cols] tensor */
    unsigned flags;              /* HS_ARCH_* */
};

/* Names of the common hyper-parameters in the family's config.json; NULL: not a key (the
 * default applies). */
struct hs_arch_keys {
    const char *hidden, *layers, *heads, *intermediate, *positions, *vocab, *type_vocab, *eps, *act;
};

struct hs_arch {
    const char *model_type;      /* canonical */
    const char *const *aliases;  /* other model_type spellings, NULL-terminated (or NULL) */
    const char *const *prefixes; /* tried in turn before every tensor name, NULL-terminated */
    struct hs_arch_keys keys;
    int type_vocab_default; /* 0: the family has no token-type table */
    int pad_default;
    double eps_default;
    const char *act_default;
    enum hs_pool_mode pool; /* without 1_Pooling/config.json */
    const struct hs_arch_tensor *tensors;
    int n_tensors;
    const char *summary; /* one line for docs and errors */
};

/* The row for a model_type or alias; NULL when no family has it. */
const struct hs_arch *hs_arch_find(const char *model_type);
/* The i-th row (0 <= i < hs_arch_count()). */
int hs_arch_count(void);
const struct hs_arch *hs_arch_at(int i);
/* Every model_type and alias, comma-separated, into buf (always NUL-terminated); returns buf. */
char *hs_arch_names(char *buf, size_t cap);

#endif
