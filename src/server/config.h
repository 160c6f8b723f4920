/* hetserve — server configuration (one YAML file).
 *
 * Sections: server (host, port, HTTP threads, trace file), engines (kind, threads, core set,
 * shape whitelist, batches in flight, per-engine batching and queue overrides), models (path,
 * the engines it is resident on, dtype), batching (window, max, buckets), limits (queue size,
 * timeouts, body size, items, characters), scheduler (overload and prediction), routes (sets of
 * engines with split / shadow / failover, cascades), router (rules, default route, fallback
 * engine), breaker (per-engine circuit breakers), retry (budget), admin (fault endpoint),
 * cascade (POST /predict: heads, small and big model, threshold, escalation cap — the one
 * cascade configuration: routes of kind cascade only place its two stages).
 * Every number that tunes behaviour lives here, in one table of keys in config.c (section, key,
 * type, field, range, default, doc) that drives hs_config_defaults, hs_config_parse, the range
 * checks of hs_config_validate and hs_config_print (`hetserve config --print-defaults` writes the
 * defaults as a commented YAML file that parses back to the same values). A file may give any
 * subset: what it leaves out keeps its default; a list it gives (engines, models, buckets)
 * replaces the default list. Unknown keys, keys given twice, wrong types (a mapping or list where
 * a value belongs, text where a number belongs) and out-of-range values are errors naming the
 * file, line and key path (e.g. `f.yaml:7: engines[1].threads: ...`).
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
#define HS_CONFIG_MAX_ROUTES  16
#define HS_CONFIG_MAX_RULES   32
#define HS_CONFIG_MAX_SLICES  16 /* engines[].slices at most */
#define HS_CONFIG_MAX_KEYS    32 /* auth.keys[] at most (a keys file may hold more) */
#define HS_AUTH_MAX_NAMES     8  /* models / endpoints one key may list */

#define HS_CONFIG_MAX_PIPELINES 4

struct hs_engine_cfg {
    char name[32];
    char kind[16]; /* a registered engine kind (engine.h registry) */
    /* an engine plugin's shared object (engine/plugin.h); with kind "plugin", kind becomes the
     * plugin's kind once the file is parsed */
    char library[256];
    int device;           /* device ordinal of the kind (cuda:1 is kind cuda, device 1) */
    char device_name[32]; /* OpenVINO: the runtime's device name; "" = by device ordinal */
    char dtype[8];        /* compute dtype of this engine's lanes: "" = the kind's native (cpu f32,
                             cuda f16) | f32 | f16 | bf16 | int8 */
    int threads;          /* 0 = all cores of the core set */
    int n_cores;          /* 0 = no pinning */
    int cores[HS_ENGINE_MAX_CORES];
    /* cores of other pinned engines of a kind that lends cores (cpu) this one borrows, stage
     * by stage, while their own lanes are idle; 0 = none */
    int n_borrow_cores;
    int borrow_cores[HS_ENGINE_MAX_CORES];
    /* cpu, with borrow_cores: the owners yield those cores to this engine whenever it runs, at
     * their next round boundary (a latency lane over a batch lane); 0 = only while they idle */
    int borrow_preempt;
    /* cpu, no cores: each compute thread of a batch on its own core of the process's set (as
     * if cores named them all), so that the kernel never wakes a worker onto its master's core;
     * 0 = the kernel places the threads */
    int spread;
    int n_shapes; /* 0 = any (batch, seq) */
    struct hs_shape shapes[HS_SCHED_MAX_SHAPES];
    int slots; /* batches in flight at once (quota) */
    /* compute slices: at load the engine becomes this many engines "<name>/0" .. "<name>/N-1",
     * each on a disjoint share of its core set (of the process's cores when unpinned) with a
     * share of its threads, each its own lane per model (queue, breaker, metrics, X-Engine);
     * weights are prepared once and shared. 1 = the engine itself. cpu only. */
    int slices;
    int batch_window_us;  /* -1 = batching.batch_window_us */
    int batch_max;        /* 0 = batching.batch_max */
    int batch_max_tokens; /* 0 = batching.batch_max_tokens */
    int queue_max;        /* 0 = limits.queue_max */
    int memory_mb;        /* memory this engine may use; 0 = what its device has available */
    /* kind remote (engine/remote/remote.h): its workers, one of three sources */
    int n_endpoints;
    char endpoints[16][32];   /* static host:port list */
    char dns[256];            /* a name resolved to every IPv4 address, re-resolved */
    char endpoints_file[256]; /* a file of host:port lines, re-read */
    int port;                 /* for dns and list items without a port */
    int refresh_s;            /* dns / file re-read period */
    int workers_max;          /* worker slots = lanes per model; 0 = the static list's length */
    int timeout_ms;           /* longest round trip to a worker; 0 = the batch's deadline */
    int connect_timeout_ms;
};

/* pipelines[]: stages in order with a bounded queue, workers and batch shape each
 * (sched/pipeline.h), served at an endpoint (POST /v1/ocr). A stage is a built-in CPU op (op: a
 * row of the ops/ops.h table) or a model stage (model: an ONNX graph on an engine with the
 * graph_onnx capability, model/ocr.h's graph table saying what it reads and gives). The OCR
 * shorthand (det, rec, dict, ... without stages) expands to the PP-OCR stages at parse. */
#define HS_CONFIG_MAX_STAGES       12
#define HS_CONFIG_MAX_STAGE_ROUTES 4 /* route.engines of a stage at most */
/* pipelines[].stages[].route.engines[]: one engine a routed model stage runs on, with its own
 * batch shape (0 / [] = the stage's) */
struct hs_stage_route_cfg {
    char engine[32];
    int batch_max, batch_fixed;
    int n_shapes;
    int shapes[16];
};
struct hs_stage_cfg {
    char name[32];
    char op[32];      /* a built-in op; "" = a model stage */
    char model[1024]; /* the stage's ONNX graph; "" = an op stage */
    char io[16];      /* the graph's kind (model/ocr.h); "" = by what the stage before gives */
    char engine[32];  /* engines[].name; "" = the first engine */
    char dtype[8];    /* "" | f32: graphs run in f32 */
    int workers;      /* threads; 0 = cpu_workers (an op stage), 1 (a model stage) */
    int batch_max;    /* rows (crops) one graph run holds at most; 0 = the graph kind's */
    int batch_fixed;  /* every graph run exactly this many rows, padded; 0 = as it comes */
    int requests_max; /* requests one run of the stage takes from its queue (fan-in) */
    int window_us;    /* how long a run waits for them */
    int n_shapes;     /* the sizes a run's spatial dims may take (static engines); 0 = any */
    int shapes[16];
    int timeout_ms; /* an item's wait in the stage's queue, or its batch's run; 0 = none */
    int n_fallback; /* fallback.engines: the first runs the stage when the primary cannot */
    char fallback[HS_CONFIG_MAX_ENGINES][32];
    double ratio_max; /* fallback.ratio_max: its share of the stage's recent items at most */
    /* route: the stage on several engines at once (instead of engine), each batch placed by
     * policy (predicted | round_robin) */
    char policy[16];
    int n_routes;
    struct hs_stage_route_cfg routes[HS_CONFIG_MAX_STAGE_ROUTES];
    /* the ops' parameters (each op takes those its table row lists) */
    char dict[1024];                         /* ctc_decode */
    int limit_side_len;                      /* det_prep */
    double thresh, box_thresh, unclip_ratio; /* db_post */
    double drop_score;                       /* ctc_decode */
    int input_w, input_h;                    /* layout_prep */
    int top_k;                               /* gfl_decode */
    double score_thresh, iou_thresh;         /* nms */
    int candidates_max, keep_max;            /* nms */
    char labels[1024];                       /* nms: the class names, a name a line */
};

/* s as it runs on its route k (route.engines[k]): that engine, and the route's batch_max,
 * batch_fixed and shapes where it gives them; s itself when k is none of its routes. */
void hs_config_stage_on_route(const struct hs_stage_cfg *s, int k, struct hs_stage_cfg *out);

struct hs_pipeline_cfg {
    char name[32];
    char endpoint[32]; /* where it is served: /v1/ocr */
    char kind[16];     /* "" | ocr: the shorthand below (given det, rec and dict, it is ocr) */
    /* the OCR shorthand: expanded into stages[] and cleared when the file is parsed */
    char det[1024], rec[1024], cls[1024];                /* ONNX files; cls "" = no classifier */
    char dict[1024];                                     /* the recognizer's dictionary */
    char det_engine[32], rec_engine[32], cls_engine[32]; /* engines[].name; "" = the first */
    int rec_images;    /* requests one rec run batches the crops of */
    int rec_window_us; /* how long rec waits for them */
    int det_limit_side_len;
    double box_thresh, drop_score;
    /* the pipeline's own */
    int cpu_workers; /* threads of each op stage */
    int queue_max;   /* items in front of each stage */
    int timeout_ms;  /* a request's deadline over all stages */
    int64_t image_max_bytes, image_max_pixels;
    int image_max_side;
    int n_stages;
    struct hs_stage_cfg stages[HS_CONFIG_MAX_STAGES];
};

/* models[].placement: which engine runs each stage of the model's one lane. Neither layers nor
 * modules given = single (every stage on the lane's engine). */
struct hs_layer_range_cfg {
    char engine[32];
    int from, to; /* layers [from, to) */
};
struct hs_placement_cfg {
    int n_layers; /* layer ranges; 0 = no layer split */
    struct hs_layer_range_cfg layers[HS_CONFIG_MAX_ENGINES];
    char attention[32], ffn[32]; /* module split: both given, or neither */
    int pipeline; /* a split's engines each run one batch at a time, batches overlapping */
};

struct hs_model_cfg {
    char name[128]; /* empty: the folder's base name */
    char path[1024];
    char engine[32]; /* the first (or only) engine it is resident on */
    int n_engines;   /* engines it is resident on: engines[0..n); 0 = just `engine` */
    char engines[HS_CONFIG_MAX_ENGINES][32];
    char dtype[8];    /* "" = each engine's dtype; else this dtype on every engine it is on */
    char check[8];    /* lane check at load: refuse | exclude | off */
    char quantize[8]; /* a lane whose dtype needs a plan the folder lacks: auto (search one at
                         load, cache it) | off */
    double check_cos_min, check_cos_mean; /* its tolerance; 0 = the lane dtype's */
    char pooling[8];                      /* "" = the folder's; mean | cls | last | splade | none */
    int n_dimensions; /* declared Matryoshka sizes; 0 = config.json's, else any */
    int dimensions[32];
    struct hs_placement_cfg placement;
};

/* Is m's placement a split (layers or modules) rather than single? */
int hs_config_placement_split(const struct hs_model_cfg *m);
/* Batches in flight on model m's lane on engine ec (its executor's slots): the engine's slots,
 * and for a pipelined split at least one per engine of the placement, plus one. */
int hs_config_lane_slots(const struct hs_model_cfg *m, const struct hs_engine_cfg *ec);
struct hs_config;
/* 1 when model m's local lanes get a preempting slot (scheduler.preempt with fair; not a
 * pipelined split, whose paused batch would hold an engine), beyond hs_config_lane_slots. */
int hs_config_lane_preempts(const struct hs_config *c, const struct hs_model_cfg *m);
/* Whether model m uses engine e: it is resident there or its placement names it. */
int hs_config_model_uses(const struct hs_model_cfg *m, const char *engine);

struct hs_route_cfg {
    char name[32];
    char kind[16];   /* engines | cascade */
    char model[128]; /* model name; "" = the first model */
    int n_engines;   /* kind engines: the model on these engines; 0 = every engine it is on */
    char engines[HS_CONFIG_MAX_ENGINES][32];
    char split_route[32]; /* "" = none */
    double split_ratio;
    char shadow_route[32];
    double shadow_ratio;
    char failover_route[32];
    double failover_ratio_max;
    char small[32], big[32]; /* kind cascade: the routes of its stages; the threshold and the
                                escalation cap are the cascade section's */
};

struct hs_rule_cfg {
    char route[32];
    int tokens_min, tokens_max; /* longest sequence; 0 = unbounded */
    char task[32];              /* "" any | embeddings | embed | predict | rerank | similarity */
    char priority[16];          /* "" any | interactive | batch */
    char header[64];
    char value[128];
};

/* auth.keys[] (and each line of a keys file, server/auth.h): one API key of a tenant. */
struct hs_auth_key_cfg {
    char sha256[72]; /* the key's SHA-256, 64 hex digits; never the key itself */
    char tenant[64];
    int n_models; /* 0 = every model */
    char models[HS_AUTH_MAX_NAMES][32];
    int n_endpoints; /* 0 = every keyed endpoint; else paths or path prefixes ("/v1", "/v2") */
    char endpoints[HS_AUTH_MAX_NAMES][32];
    double requests_per_s, tokens_per_s; /* the tenant's buckets; 0 = unlimited */
    double burst_s;                      /* seconds of rate each bucket holds */
    char priority_max[16];               /* interactive | batch */
    double weight;                       /* share under overload relative to other tenants */
};

struct hs_config {
    struct {
        char host[64];
        int port;
        int threads;              /* HTTP worker threads */
        int connection_timeout_s; /* idle keep-alive connections are closed after this */
        int connections_max;      /* open connections at most */
        int http_yield;           /* HTTP threads in SCHED_BATCH (no wake-up preemption) */
        char trace_file[1024];    /* empty = no trace */
        char role[8];             /* auto | worker | router */
        int internal;             /* serve /internal/v1/batch and /internal/v1/status */
        char cache_dir[1024];     /* what the server derives and keeps (quantization plans of
                                     folders it cannot write); empty = none */
        struct {                  /* one JSON line per request (server/capture.h) */
            char file[1024];      /* empty = no capture */
            double sample_ratio;  /* share of requests captured */
            int texts;            /* record the request texts */
            int64_t max_bytes;    /* rotate (file -> file.1) before the file passes this */
            int64_t buffer_bytes; /* ring between requests and the writer; full = drop */
        } capture;
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
        int batch_window_when_idle;
    } batching;
    struct {
        int queue_max;
        int timeout_ms;
        int timeout_max_ms;
        int64_t body_bytes_max;
        int64_t discard_bytes_max; /* a refused body read and dropped before the 413 ... */
        int discard_timeout_ms;    /* ... for at most this long (lingering close) */
        int items_max;
        int chars_max;
        int drain_timeout_ms;
        double memory_margin_ratio; /* memory plan: margin on top of each engine's need */
        int memory_runtime_mb;      /* memory plan: per-engine runtime allowance */
    } limits;
    struct {
        double shed_batch_ratio;
        int fair;          /* lanes order work between tenants by weight (hs_lane_opts.fair) */
        int fair_batch_ms; /* hs_lane_opts.fair_batch_us / 1000 */
        double over_share; /* hs_lane_opts.over_share */
        int preempt;       /* hs_lane_opts.preempt (local lanes but pipelined splits) */
        int wait_max_ms;
        char profile[1024]; /* hetserve profile JSON seeding the service-time model; "" = none */
        double throughput_init_tokens_per_s;
        double throughput_ewma_alpha;
        int retry_after_min_s;
    } scheduler;
    int n_routes; /* 0 = one route per model over every engine it is on */
    struct hs_route_cfg routes[HS_CONFIG_MAX_ROUTES];
    struct {
        int n_rules;
        struct hs_rule_cfg rules[HS_CONFIG_MAX_RULES];
        char default_route[32];   /* "" = the first route */
        char fallback_engine[32]; /* "" = the model's first engine */
    } router;
    struct {
        int window_requests;
        int min_requests;
        double error_ratio_max;
        int latency_max_ms;
        int open_ms;
        int half_open_probes;
    } breaker;
    struct {
        double budget_ratio;
        double budget_max;
    } retry;
    struct {
        int enabled;     /* POST /admin/fault, loopback clients only */
        char token[128]; /* "" = none; else the endpoint needs `Authorization: Bearer <token>`.
                            The environment variable HS_ADMIN_TOKEN, when set and not empty,
                            replaces it (hs_server_create). */
    } admin;
    /* API keys and tenants (server/auth.h): on when keys or keys_file (HS_API_KEYS_FILE) give
     * any key source */
    struct {
        char keys_file[1024]; /* "" = none; HS_API_KEYS_FILE, when set, replaces it */
        char probes[8];       /* /health, /ready, /v2/health/...: open | keyed */
        char metrics[8];      /* /metrics, /dashboard: open | keyed */
        int share_inflight;   /* fair shares past this many requests in flight; 0 = off */
        int n_keys;
        struct hs_auth_key_cfg keys[HS_CONFIG_MAX_KEYS];
    } auth;
    /* POST /predict: classification heads and the small -> big cascade (sched/cascade.h) */
    struct {
        char small[128];       /* served model answering first; "" = /predict is off */
        char small_head[1024]; /* its head file (model/head.h) */
        char big[128];         /* model for low-confidence inputs; "" = no cascade */
        char big_head[1024];
        double threshold;            /* escalate when the small head's top probability < this */
        double escalation_max_ratio; /* cap on the share of inputs escalated; 1 = no cap */
    } cascade;
    int n_pipelines;
    struct hs_pipeline_cfg pipelines[HS_CONFIG_MAX_PIPELINES];
};

/* Fills c with the documented defaults: one CPU engine "cpu0" serving the model folder
 * model_path (NULL: "models/all-MiniLM-L6-v2"). */
void hs_config_defaults(struct hs_config *c, const char *model_path);

/* Fills one models[] item with its documented defaults (for code that builds a config). */
void hs_config_model_init(struct hs_model_cfg *m, int index);

/* Parses YAML text over the values already in c (normally the defaults). label names the
 * source in messages. HS_STATUS_INVALID_INPUT with file:line and key on any fault. */
hs_status hs_config_parse(const char *text, size_t len, const char *label, struct hs_config *c,
                          struct hs_error *err);
/* Reads and parses a file (HS_STATUS_IO when unreadable), then validates. */
hs_status hs_config_load(const char *path, struct hs_config *c, struct hs_error *err);
/* Cross-checks: every model's engine exists, names unique, ranges sane. */
hs_status hs_config_validate(const struct hs_config *c, struct hs_error *err);
/* (internal, config.c for config_check.c) The table's ranges and choices of section sec's keys
 * of the struct at base, key paths under path in messages. */
hs_status hs__config_check_keys(const char *sec, const char *base, const char *path,
                                struct hs_error *err);
/* (internal, config.c for config_pipeline.c) The first key of pipelines[].stages[] marked
 * model-only (model != 0) or an op parameter (model == 0) whose value in s differs from its
 * default and whose name is not a word of allowed (space-separated); NULL when there is none. */
const char *hs__config_stage_given(const struct hs_stage_cfg *s, int model, const char *allowed);
/* (internal, config_pipeline.c) The OCR shorthand expanded into stages[] (at parse), and the
 * pipelines' checks: stage names, ops, keys, kinds that connect, engines, shapes. */
hs_status hs__config_pipelines_expand(struct hs_config *c, const char *label, struct hs_error *err);
hs_status hs__config_pipelines_check(const struct hs_config *c, struct hs_error *err);

/* Checks every lane (and every engine of a split placement) against what its engine's device
 * computes: caps[i] holds the claims of engines[i]'s device (hs_engine_device_caps); an entry
 * with no stages (a device not present here, a remote pool) is not checked. HS_STATUS_INVALID_
 * INPUT naming the model, the engine, the device, the dtype and what the device computes in
 * instead. The server calls it with the engines it made, before loading any model; `config
 * --check` with the devices present on this machine (as a warning). */
struct hs_engine_caps;
hs_status hs_config_check_devices(const struct hs_config *c, const struct hs_engine_caps *caps,
                                  struct hs_error *err);

/* Compute dtype of model m's lane on engine e: the model's dtype when it names one, else the
 * engine's, else the engine kind's native dtype; -1 when the names are not valid. */
int hs_config_lane_dtype(const struct hs_model_cfg *m, const struct hs_engine_cfg *e);

/* Slice k of engine e (engines[].slices): writes its cores to cores[] (the k-th of e->slices
 * near-equal shares of e's core set, or of avail[0..n_avail) when e is unpinned) and its
 * threads to *threads (the k-th share of e->threads; 0 = one per core). With one slice, or on a
 * kind that slices into streams (cuda): e's own cores (when unpinned: none, or every one of
 * avail with engines[].spread on a kind that slices by cores and a team of several threads) and
 * threads. Returns the slice's core count; 0 = unpinned. */
int hs_config_slice(const struct hs_engine_cfg *e, int k, const int *avail, int n_avail,
                    int cores[HS_ENGINE_MAX_CORES], int *threads);
/* The name of slice k of e: "<name>/<k>", or e's name when it has one slice. */
void hs_config_slice_name(const struct hs_engine_cfg *e, int k, char *buf, size_t n);

/* The engine named name, NULL when none. */
const struct hs_engine_cfg *hs_config_engine(const struct hs_config *c, const char *name);
/* Index of the route named name, -1 when none. */
int hs_config_route(const struct hs_config *c, const char *name);

/* For files that hold a list's items in another syntax (the API keys file, server/auth.h): sets
 * item (of list section sec, e.g. "auth.keys[]") to its defaults; sets its scalar key name (a key
 * of sec or of a mapping inside it, e.g. "requests_per_s" of "auth.keys[].rate") from text with
 * the table's type, range and choices. HS_STATUS_NOT_FOUND for no such scalar key,
 * HS_STATUS_INVALID_INPUT for a bad value; the message in msg. */
void hs_config_item_init(const char *sec, void *item);
hs_status hs_config_item_set(const char *sec, void *item, const char *name, const char *text,
                             char *msg, size_t cap);

/* Writes c as YAML with a comment documenting every key (used with the defaults by
 * `hetserve config --print-defaults`). */
void hs_config_print(const struct hs_config *c, FILE *f);

#endif
