/* hetserve — the engine plugin ABI, for authors of engines that live outside this tree.
 *
 * An engine kind may be a shared object that hetserve loads at run time, instead of a folder
 * compiled into the binary. Such a plugin exports exactly one symbol, HS_PLUGIN_ENTRY_NAME:
 *
 *     const struct hs_plugin *hs_engine_plugin(const struct hs_plugin_host *host);
 *
 * hetserve calls it once, right after dlopen, with the services it offers (static storage: the
 * plugin may keep the pointer while it is loaded); the plugin returns a
 * pointer to its descriptor (static storage, valid until the library is unloaded), or NULL when
 * it cannot work in this process (it may first write why into host->why). The descriptor's
 * first member is the ABI version the plugin was built against: hetserve reads that int before
 * anything else and refuses a plugin whose version differs from its own HS_PLUGIN_ABI_VERSION
 * with a message naming both versions. The first member of both structs below is frozen for
 * ever, so that any two versions can tell each other apart; everything else may change with
 * the version.
 *
 * What a plugin is: one engine kind (struct hs_engine_kind, engine.h): a name (engines[].kind
 * in the config), a summary, the compute dtypes it offers, its device count and a create
 * function. create builds the plugin's own context and hands it, with its static
 * `struct hs_engine_iface` (engine.h: the same interface the built-in engines implement), to
 * host->engine_wrap, which returns the engine handle: from there the plugin's engine is called
 * exactly as a built-in one (stage_prepare, ws_create, batch_begin, run_stage, act_read, ...),
 * through the same wrappers (statistics, fault injection, argument checks).
 *
 * A plugin links against nothing of hetserve: it includes this header (which includes
 * engine/engine.h, engine/stage.h, core/tensor.h, core/status.h: plain structs and enums) and
 * reaches the host only through the function pointers of struct hs_plugin_host. Errors go into
 * the caller's struct hs_error (core/status.h): hs_plugin_error below fills one.
 *
 * How hetserve finds plugins (engine/plugin.c):
 *   - the config: `engines[].kind: plugin` with `engines[].library: PATH` loads PATH (a file
 *     named libhs_engine_*.so: a config never loads other code), and the
 *     engine takes the kind the plugin declares;
 *   - discovery, the first time the registry is read: every `libhs_engine_*.so` in the folders
 *     of $HS_PLUGIN_PATH (colon-separated), or, when it is not set, in `plugins/` next to the
 *     running executable (where the build puts the plugins it builds). A plugin that fails to
 *     load is reported on stderr (one line) and skipped.
 * A plugin kind with the name of a kind this tree knows but did not build (openvino) takes that
 * registry entry's place; one with the name of a built-in kind (cpu) is refused.
 *
 * Thread-safety: the entry point is called once, under the loader's lock; create and the
 * interface methods follow engine.h's rules.
 */
#ifndef HS_ENGINE_PLUGIN_H
#define HS_ENGINE_PLUGIN_H

#include <stdarg.h>
#include <stdio.h>

#include "core/status.h"
#include "engine/engine.h"

/* 1: engine.h's interface at HS_ENGINE_API_VERSION 1, struct hs_plugin_host and struct
 *    hs_plugin as below.
 * 2: struct hs_engine_opts gained device_name, struct hs_batch gained batch_class (a plugin
 *    built for 2 would read past the end of a version-1 host's structs), and
 *    HS_ENGINE_FEAT_SHAPE_COMPILE.
 * 3: struct hs_engine_iface gained graph_load, graph_release, graph_run (whole ONNX graphs as
 *    stages) and HS_ENGINE_FEAT_GRAPH_ONNX: a version-2 plugin's interface ends before them;
 * 4: the architecture table's block parameters: struct hs_encoder_dims gained them (stage.h),
 *    enum hs_weight_role gained FFN_GATE, Q_NORM, K_NORM, FINAL_LN_G / _B before HS_W_SMOOTH
 *    (struct hs_stage grew), enum hs_stage_kind gained HS_STAGE_FINAL_NORM, and
 *    HS_ENGINE_FEAT_MPNET became the block features of HS_STAGE_FEATURES (caps.features).
 * 5: struct hs_engine_kind gained lends_cores after slice_by (a version-4 plugin's kind ends
 *    before it) and struct hs_engine_opts gained n_borrow_cores / borrow_cores at its end;
 *    pooling modes SPLADE and NONE (enum hs_pool_mode; pooled rows of hs_pooled_dim floats),
 *    struct hs_encoder_dims gained pool_rows, enum hs_weight_role gained the MLM_* roles at its
 *    end (struct hs_stage grew), features POOL_SPLADE and POOL_NONE.
 * 6: struct hs_engine_opts gained borrow_preempt at its end, struct hs_cpu_lease_stats the
 *    yield and claim counters. */
#define HS_PLUGIN_ABI_VERSION 6
#define HS_PLUGIN_ENTRY_NAME  "hs_engine_plugin"

/* What hetserve offers a plugin. */
struct hs_plugin_host {
    int abi_version; /* frozen first member: the host's HS_PLUGIN_ABI_VERSION */
    /* Wraps an engine implementation into a handle (engine.h hs__engine_wrap): takes ownership
     * of ctx (destroyed through iface->destroy, also on failure). */
    hs_status (*engine_wrap)(const struct hs_engine_iface *iface, void *ctx, const char *name,
                             hs_engine_t *out, struct hs_error *err);
    /* Logs one line at level (core/log.h: 0 error, 1 warn, 2 info, 3 debug). */
    void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    /* Where the entry point may say why it returned NULL. */
    struct hs_error *why;
};

/* What a plugin declares. */
struct hs_plugin {
    int abi_version; /* frozen first member: HS_PLUGIN_ABI_VERSION the plugin was built with */
    /* The kind: name, summary, dtypes, native dtype, device_count and create, as for a kind
     * compiled in (engine.h). create must return engines made with host->engine_wrap. */
    struct hs_engine_kind kind;
};

/* The entry point's type. */
typedef const struct hs_plugin *(*hs_plugin_entry_fn)(const struct hs_plugin_host *host);

/* Fills err (when not NULL) with s and a message; returns s. For plugins, which do not link
 * hetserve's hs_error_set. */
static inline hs_status hs_plugin_error(struct hs_error *err, hs_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline hs_status hs_plugin_error(struct hs_error *err, hs_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = s;
    }
    return s;
}

/* ---- host side (engine/plugin.c) ---- */

/* Loads the plugin at path and registers its kind; *kind (may be NULL) receives it. Loading the
 * same file twice returns the kind already registered. HS_STATUS_NOT_FOUND when the file cannot
 * be opened or lacks the entry point, HS_STATUS_UNSUPPORTED on an ABI version mismatch or a
 * plugin that declines to run, HS_STATUS_INVALID_ARGUMENT when its kind clashes with a built-in
 * one; err says which file and why. Thread-safe. */
hs_status hs_engine_plugin_load(const char *path, const struct hs_engine_kind **kind,
                                struct hs_error *err);
/* Loads the plugins of the plugin folders (above), once per process; later calls return at
 * once. Called by the registry before it is first read. */
void hs_engine_plugins_discover(void);
/* Plugin kinds registered so far; hs__engine_plugin_kind(i) for i in [0, n). */
int hs__engine_plugin_count(void);
const struct hs_engine_kind *hs__engine_plugin_kind(int i);

#endif
