/* hetserve — server configuration (one YAML file).
 *
 * Sections: server (host, port, HTTP threads, trace file), engines (kind, threads, core set,
 * shape whitelist), models (path, engine, dtype), batching (window, max, buckets), limits
 * (queue size, timeouts, body size, items, characters), scheduler (overload and prediction),
 * cascade (POST /predict: heads, small and big model, threshold, escalation cap).
 * Every number that tunes behaviour lives here; hs_config_defaults gives the documented default
 * of each, and hs_config_print_defaults writes them as a commented YAML file that parses back to
 * the same values. A file may give any subset: what it leaves out keeps its default; a list it
 * gives (engines, models, buckets) replaces the default list. Unknown keys, wrong types and
 * out-of-range values are errors naming the file, line and key.
 */
#ifndef HS_SERVER_CONFIG_H
#define HS_SERVER_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "engine/engine.h"
#include "sched/sched.h"

#define HS_CONFIG_MAX_ENGINES 8
#define HS_CONFIG_MAX_MODELS  8

struct hs_engine_cfg {
    char name[32];
    char kind[16];
    int threads; /* 0 = all cores of the core set */
    int n_cores; /* 0 = no pinning */
    int cores[HS_ENGINE_MAX_CORES];
    int n_shapes; /* 0 = any (batch, seq) */
    struct hs_shape shapes[HS_SCHED_MAX_SHAPES];
};

struct hs_model_cfg {
    char name[128]; /* empty: the folder's base name */
    char path[1024];
    char engine[32];
    char dtype[8]; /* f32 | f16 | bf16 */
};

struct hs_config {
    struct {
        char host[64];
        int port;
        int threads;              /* HTTP worker threads */
        int connection_timeout_s; /* idle keep-alive connections are closed after this */
        char trace_file[1024];    /* empty = no trace */
    } server;
    int n_engines;
    struct hs_engine_cfg engines[HS_CONFIG_MAX_ENGINES];
    int n_models;
    struct hs_model_cfg models[HS_CONFIG_MAX_MODELS];
    struct {
        int batch_window_us;
        int batch_max;
        int batch_max_tokens;
        int n_buckets;
        int buckets[HS_SCHED_MAX_BUCKETS - 1];
    } batching;
    struct {
        int queue_max;
        int timeout_ms;
        int timeout_max_ms;
        int64_t body_bytes_max;
        int items_max;
        int chars_max;
        int drain_timeout_ms;
    } limits;
    struct {
        double shed_batch_ratio;
        double throughput_init_tokens_per_s;
        double throughput_ewma_alpha;
        int retry_after_min_s;
    } scheduler;
    /* POST /predict: classification heads and the small -> big cascade (sched/cascade.h) */
    struct {
        char small[128];      /* served model answering first; "" = /predict is off */
        char small_head[1024]; /* its head file (model/head.h) */
        char big[128];        /* model for low-confidence inputs; "" = no cascade */
        char big_head[1024];
        double threshold;            /* escalate when the small head's top probability < this */
        double escalation_max_ratio; /* cap on the share of inputs escalated; 1 = no cap */
    } cascade;
};

/* Fills c with the documented defaults: one CPU engine "cpu0" serving the model folder
 * model_path (NULL: "models/all-MiniLM-L6-v2"). */
void hs_config_defaults(struct hs_config *c, const char *model_path);

/* Parses YAML text over the values already in c (normally the defaults). label names the
 * source in messages. HS_STATUS_INVALID_INPUT with file:line and key on any fault. */
hs_status hs_config_parse(const char *text, size_t len, const char *label, struct hs_config *c,
                          struct hs_error *err);
/* Reads and parses a file (HS_STATUS_IO when unreadable), then validates. */
hs_status hs_config_load(const char *path, struct hs_config *c, struct hs_error *err);
/* Cross-checks: every model's engine exists, names unique, ranges sane. */
hs_status hs_config_validate(const struct hs_config *c, struct hs_error *err);

/* Writes c as YAML with a comment documenting every key (used with the defaults by
 * `hetserve config --print-defaults`). */
void hs_config_print(const struct hs_config *c, FILE *f);

#endif
