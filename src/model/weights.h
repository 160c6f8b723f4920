/* hetserve — a model folder's weights: one model.safetensors, or the shards that
 * model.safetensors.index.json lists (HF's layout for large checkpoints:
 * {"metadata": {...}, "weight_map": {tensor name: shard file name}}).
 *
 * Every shard is mapped and validated at open (model/safetensors.h), and every name of the
 * weight map must be in the shard it names. Shard names are plain file names inside the folder
 * (no '/', not "." or ".."). Lookups search the shards in the index's order. Read-only after
 * open and safe to share between threads; tensors live until hs_weights_close.
 */
#ifndef HS_MODEL_WEIGHTS_H
#define HS_MODEL_WEIGHTS_H

#include <stddef.h>

#include "core/status.h"
#include "core/tensor.h"

struct hs_weights;
struct hs_safetensors;

/* Opens dir/model.safetensors, or, when it is absent, dir/model.safetensors.index.json and its
 * shards. HS_STATUS_IO when neither can be read; HS_STATUS_CORRUPT (the file and the fault
 * named) for a malformed index or shard. */
hs_status hs_weights_open(const char *dir, struct hs_weights **out, struct hs_error *err);
void hs_weights_close(struct hs_weights *w);

/* Finds a tensor by exact name in any shard; HS_STATUS_NOT_FOUND when absent. */
hs_status hs_weights_get(const struct hs_weights *w, const char *name, struct hs_tensor *out,
                         struct hs_error *err);
/* What was opened, for messages: ".../model.safetensors" or ".../model.safetensors.index.json". */
const char *hs_weights_path(const struct hs_weights *w);
int hs_weights_shards(const struct hs_weights *w);
/* Shard i (0 <= i < hs_weights_shards) as a safetensors file, owned by w; NULL out of range. */
const struct hs_safetensors *hs_weights_shard(const struct hs_weights *w, int i);

/* Parses an index's text (label names it in messages): the distinct shard file names of its
 * weight map in order of first appearance, into a NULL-terminated array of *n_files strings
 * (free with hs__weights_files_free). */
hs_status hs__weights_index_parse(const char *json, size_t len, const char *label, char ***files,
                                  int *n_files, struct hs_error *err);
void hs__weights_files_free(char **files);

#endif
