/* hetserve — config.json readers shared by model/config.c and model/arch.c (internal). */
#ifndef HS_MODEL_CONFIG_IMPL_H
#define HS_MODEL_CONFIG_IMPL_H

#include <jansson.h>
#include <stdbool.h>

#include "core/status.h"
#include "model/arch.h"
#include "model/config.h"

/* Upper bounds keep every shape product below 2^63 and reject nonsense early. */
#define CFG_MAX_HIDDEN       (1 << 16)
#define CFG_MAX_INTERMEDIATE (1 << 20)
#define CFG_MAX_LAYERS       4096
#define CFG_MAX_VOCAB        (1 << 24)
#define CFG_MAX_POSITIONS    (1 << 20)
#define CFG_MAX_TYPE_VOCAB   (1 << 16)

/* Integer key in [lo, hi]. Absent (or null) and def_ok: *out = def; absent otherwise: an error
 * naming the key. */
hs_status hs__cfg_int(const json_t *obj, const char *label, const char *key, int def_ok, int def,
                      long long lo, long long hi, int *out, struct hs_error *err);
/* Boolean key. Absent (or null): *out = def. */
hs_status hs__cfg_bool(const json_t *obj, const char *label, const char *key, bool def, bool *out,
                       struct hs_error *err);
/* String key; absent (or null) gives *out = def. */
hs_status hs__cfg_str(const json_t *obj, const char *label, const char *key, const char *def,
                      const char **out, struct hs_error *err);
/* Number key in (lo, hi) that stays non-zero as a float; absent (or null): *out = def. */
hs_status hs__cfg_float(const json_t *obj, const char *label, const char *key, double def,
                        double lo, double hi, float *out, struct hs_error *err);

/* config.json of a family in the architecture table: finds the row by model_type (or an alias),
 * parses its hyper-parameters and block parameters into out->dims, out->model_type and
 * out->arch, and the pad token id into *pad_token_id. An unknown model_type is
 * HS_STATUS_UNSUPPORTED with the supported list in the message. */
hs_status hs__arch_parse(const json_t *root, const char *label, struct hs_model_config *out,
                         int *pad_token_id, struct hs_error *err);

#endif
