/* hetserve — the memory plan: what every engine of a configuration will hold, before any
 * weights are loaded.
 *
 * Per engine: the prepared weights of its lanes (converted, stacked, packed copies; a
 * preparation shared by engines of one kind and device — engine.h prep_key — is counted once,
 * on the first engine that makes it), the activations of every lane at its batch and token
 * limits times its slots, the per-thread workspace, a runtime allowance
 * (limits.memory_runtime_mb) and a margin on all of it (limits.memory_margin_ratio). Per device
 * (kind, device): the needs of its engines, plus on the host (cpu device 0) the model files
 * mapped once per model, against what the device has available now (engine kind's
 * mem_available: cpu MemAvailable, cuda the GPU's free memory). An engine with
 * engines[].memory_mb is also held to that.
 *
 * The figures come from the engine kinds' answers (hs_engine_kind_stage_bytes, _ws_bytes) and
 * the models' config files and quantization plans; no weight is read. hs_mem_plan_make is
 * called by `hetserve serve` before anything loads, `hetserve config --check` and `hetserve
 * profile`. A device whose capacity is unknown (a kind not built, no such device) is reported
 * and never refuses; a model whose config files cannot be read is left out with a note (the
 * load reports it properly).
 */
#ifndef HS_SERVER_MEMPLAN_H
#define HS_SERVER_MEMPLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "server/config.h"

struct hs_mem_engine {
    char name[32], kind[16];
    int device;
    int n_lanes;
    int64_t weights_bytes;    /* preparations this engine makes first */
    int64_t shared_bytes;     /* preparations it shares with an engine above (not counted) */
    int64_t activation_bytes; /* every lane's activation buffers x its slots */
    int64_t workspace_bytes;  /* every lane's scratch x its slots */
    int64_t runtime_bytes;
    int64_t margin_bytes;
    int64_t need_bytes;  /* the sum of the five above */
    int64_t limit_bytes; /* engines[].memory_mb; 0 = none */
    char shape[96];      /* its largest lane's limits: "32 x 256 (8192 tokens) x 1 slot" */
};

struct hs_mem_device {
    char kind[16];
    int device;
    int64_t engines_bytes; /* needs of its engines */
    int64_t mapped_bytes;  /* host: model files mapped, once per model */
    int64_t need_bytes;
    int64_t have_bytes; /* 0 = unknown: reported, never refused */
    char have_what[48]; /* where have_bytes comes from, or why it is unknown */
};

struct hs_mem_plan {
    double margin_ratio;
    int n_engines;
    struct hs_mem_engine engines[HS_CONFIG_MAX_ENGINES];
    int n_devices;
    struct hs_mem_device devices[HS_CONFIG_MAX_ENGINES + 1];
    int n_notes;
    char notes[HS_CONFIG_MAX_MODELS][256]; /* models left out, and why */
    bool fits;
    char refusal[512]; /* when !fits: the first engine or device that does not, with numbers */
};

/* Makes the plan of a validated configuration. HS_STATUS_NO_MEMORY only; a plan that does not
 * fit is not an error here (out->fits, out->refusal). */
hs_status hs_mem_plan_make(const struct hs_config *c, struct hs_mem_plan *out,
                           struct hs_error *err);

/* HS_STATUS_INVALID_INPUT with out->refusal when the plan does not fit, else OK. */
hs_status hs_mem_plan_check(const struct hs_mem_plan *p, struct hs_error *err);

/* Calls line(ctx, text) for each line of the plan in words (no newline in text). */
void hs_mem_plan_lines(const struct hs_mem_plan *p, void (*line)(void *ctx, const char *text),
                       void *ctx);
/* The same lines on f, each prefixed with prefix. */
void hs_mem_plan_print(const struct hs_mem_plan *p, FILE *f, const char *prefix);

/* "87 MB", "1.9 GB": bytes for people (powers of 1024). */
void hs_mem_bytes_str(int64_t bytes, char *buf, size_t n);

#endif
