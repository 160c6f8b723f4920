/* The configuration as one table of keys (redis standardConfig): every key's section, name, type,
 * field, range, default and doc live in `keys` below, and that table alone drives the defaults,
 * the YAML parser, the range checks of hs_config_validate and the printer. Cross-field checks
 * (names, references, kinds, dtypes) stay as code in hs_config_validate. */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/sha256.h"
#include "engine/plugin.h"
#include "sched/router.h"

#define DEFAULT_MODEL_PATH "models/all-MiniLM-L6-v2"
#define NAME_BYTES         32 /* one name of a K_NAMES list */
#define PATH_BYTES         160

/* K_STR: a char array, with optional choices "a | b" (`""` = the empty string); K_BOOL: an int
 * written true / false; K_INTS: an int array, [16, 32] or a string of numbers and ranges "0-3,6";
 * K_SHAPES: [[batch, seq], ...]; K_NAMES: char [][NAME_BYTES], min = fewest names; K_MAP: the
 * keys of section "<section>.<name>" on the same base; K_LIST: a list of mappings, each an item
 * with the keys of section "<section>.<name>[]"; K_GONE: a key that moved (doc says where). */
enum ktype {
    K_INT,
    K_I64,
    K_DOUBLE,
    K_STR,
    K_BOOL,
    K_INTS,
    K_SHAPES,
    K_NAMES,
    K_MAP,
    K_LIST,
    K_GONE
};
#define F_OMIT  1u /* in list items: printed only when it differs from the default */
#define F_REQ   2u /* in list items: must be given (a non-empty string) */
#define F_MODEL 4u /* pipelines[].stages[]: a model stage's key (refused on an op stage) */
#define F_PARAM 8u /* pipelines[].stages[]: an op's parameter (refused where the op lacks it) */
#define F_SCALAR                                                                                   \
    16u /* K_LIST: an item may be given as the value of its section's first key alone */

struct key {
    const char *section, *name; /* section "" holds the sections; items: "engines[]" */
    size_t off, size;           /* the field in hs_config (items: in the item), its bytes */
    enum ktype type;
    double min, max; /* numbers and the numbers of lists; K_NAMES: min = fewest names */
    const char *def; /* default, as text ("%d" = the item's index); K_LIST: default items */
    const char *doc;
    unsigned flags;
    size_t n_off;        /* lists: their count (an int) */
    const char *choices; /* K_STR (optional) */
    size_t item;         /* K_LIST: bytes of one item */
};

union any_item {
    struct hs_engine_cfg e;
    struct hs_model_cfg m;
    struct hs_route_cfg r;
    struct hs_rule_cfg u;
    struct hs_layer_range_cfg l;
    struct hs_pipeline_cfg p;
    struct hs_stage_cfg g;
    struct hs_stage_route_cfg sr;
    struct hs_auth_key_cfg a;
};

struct ctx {
    yaml_document_t *doc;
    const char *label;
    struct hs_error *err;
};

static __attribute__((format(printf, 4, 5))) hs_status fault(struct ctx *x, const yaml_node_t *n,
                                                             const char *path, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hs_error_set(x->err, HS_STATUS_INVALID_INPUT, "%s:%zu: %s: %s", x->label,
                        n ? (size_t)n->start_mark.line + 1 : (size_t)0, path, msg);
}

struct line {
    char s[8192];
    size_t n;
};

static __attribute__((format(printf, 2, 3))) void app(struct line *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
    va_end(ap);
    l->n = r < 0 || (size_t)r >= sizeof l->s - l->n ? sizeof l->s - 1 : l->n + (size_t)r;
}

#define F(T, f)     .off = offsetof(struct hs_##T, f), .size = sizeof(((struct hs_##T *)0)->f)
#define N(T, f)     .n_off = offsetof(struct hs_##T, f)
#define C(sec, key) .section = #sec, .name = #key, F(config, sec.key)         /* a section's key */
#define E(key, f)   .section = "engines[]", .name = key, F(engine_cfg, f)     /* engines[] */
#define M(key, f)   .section = "models[]", .name = key, F(model_cfg, f)       /* models[] */
#define R(key, f)   .section = "routes[]", .name = key, F(route_cfg, f)       /* routes[] */
#define U(key, f)   .section = "router.rules[]", .name = key, F(rule_cfg, f)  /* router.rules[] */
#define A(key, f)   .section = "auth.keys[]", .name = key, F(auth_key_cfg, f) /* auth.keys[] */
#define AR(key, f)  .section = "auth.keys[].rate", .name = key, F(auth_key_cfg, f)
#define SEC(key)    .section = "", .name = key, .type = K_MAP /* a section */
#define REF(key)    .section = "routes[]", .name = key, .type = K_MAP, .flags = F_OMIT
#define LIST(sec, key, f, n, T)                                                                    \
    .section = sec, .name = key, F(config, f), .type = K_LIST, N(config, n),                       \
    .item = sizeof(struct hs_##T)

/* pipelines[] */
#define P(key, f) .section = "pipelines[]", .name = key, F(pipeline_cfg, f)

/* One row per key, in the order printed: {key, type, min, max, default, doc[, flags[, count]]}. */
static const struct key keys[] = {
    {SEC("server"), .doc = "the HTTP server"},
    {C(server, host), K_STR, 0, 0, "127.0.0.1", "address to bind (--host)"},
    {C(server, port), K_INT, 0, 65535, "8080", "TCP port; 0 = any free port (--port)"},
    {C(server, threads), K_INT, 1, 1024, "4",
     "HTTP worker threads (connections wait for batches suspended, not on a thread)"},
    {C(server, connection_timeout_s), K_INT, 0, 86400, "60",
     "idle keep-alive connections are closed after this"},
    {C(server, http_yield), K_BOOL, 0, 0, "false",
     "HTTP threads never preempt a running thread when they wake (SCHED_BATCH): under load, "
     "HTTP work waits for a compute thread's pause instead of stalling a parallel region"},
    {C(server, connections_max), K_INT, 16, 1 << 20, "8192",
     "open connections at most (the open-file limit is raised to fit when allowed)"},
    {C(server, trace_file), K_STR, 0, 0, "",
     "Chrome/Perfetto trace-event JSON of every batch and request stage; \"\" = off"},
    {C(server, role), K_STR, 0, 0, "auto",
     "worker (local engines only) | router (remote engines only: tokenizer and model metadata, "
     "never the weights) | auto (router when every engine is remote)",
     .choices = "auto | worker | router"},
    {C(server, internal), K_BOOL, 0, 0, "true",
     "serve POST /internal/v1/batch and GET /internal/v1/status, the API routers call (servers "
     "with local engines)"},
    {C(server, cache_dir), K_STR, 0, 0, "",
     "folder for what the server derives and keeps between starts: the quantization plans "
     "models[].quantize: auto makes for model folders it cannot write; \"\" = none"},
    {.section = "server",
     .name = "capture",
     .type = K_MAP,
     .doc = "one JSON line per model request, for hetbench replay (docs/CAPTURE.md): file (\"\" "
            "= off), sample_ratio, texts (record the inputs' texts), max_bytes (rotate file -> "
            "file.1), buffer_bytes (lines waiting for the writer; a full buffer drops lines, "
            "counted in hetserve_capture_dropped_total)"},
    {.section = "server.capture",
     .name = "file",
     F(config, server.capture.file),
     K_STR,
     0,
     0,
     "",
     "capture file, appended to; \"\" = off"},
    {.section = "server.capture",
     .name = "sample_ratio",
     F(config, server.capture.sample_ratio),
     K_DOUBLE,
     0,
     1,
     "1",
     "share of requests captured (a hash of the request id decides)"},
    {.section = "server.capture",
     .name = "texts",
     F(config, server.capture.texts),
     K_BOOL,
     0,
     0,
     "false",
     "record the request texts (else token lengths only)"},
    {.section = "server.capture",
     .name = "max_bytes",
     F(config, server.capture.max_bytes),
     K_I64,
     1024,
     1099511627776.0,
     "67108864",
     "the file is rotated (file -> file.1) before a line would take it past this"},
    {.section = "server.capture",
     .name = "buffer_bytes",
     F(config, server.capture.buffer_bytes),
     K_I64,
     4096,
     1073741824.0,
     "1048576",
     "lines waiting for the writer thread; a line that does not fit is dropped and counted"},

    {LIST("", "engines", engines, n_engines, engine_cfg), .def = "1",
     .doc = "compute devices; each gets its own queue and batcher"},
    {E("name", name), K_STR, 0, 0, "cpu%d", "instance name, used by models[].engine and metrics"},
    {E("kind", kind), K_STR, 0, 0, "cpu", "a registered engine kind (hetserve devices lists them)"},
    {E("library", library), K_STR, 0, 0, "",
     "an engine plugin to load (a shared object named libhs_engine_*.so, engine/plugin.h); "
     "kind `plugin` takes the kind it declares; \"\" = none"},
    {E("device", device), K_INT, 0, 1024, "0", "device ordinal of the kind (GPU number)"},
    {E("device_name", device_name), K_STR, 0, 0, "",
     "OpenVINO device: CPU | GPU | NPU | AUTO; \"\" = by `device` ordinal"},
    {E("dtype", dtype), K_STR, 0, 0, "",
     "compute dtype of its lanes: \"\" = the kind's native (cpu f32, cuda f16) | f32 | f16 | bf16 "
     "| int8"},
    {E("threads", threads), K_INT, 0, 4096, "0",
     "compute threads; 0 = every core of the core set (or of the machine)"},
    {E("cores", cores), K_INTS, 0, 4095, "", "cores to pin to, e.g. [0, 1] or \"0-3\"; [] = none",
     N(engine_cfg, n_cores)},
    {E("borrow_cores", borrow_cores), K_INTS, 0, 4095, "",
     "cpu: cores of other pinned cpu engines this one borrows, stage by stage, while their lanes "
     "run nothing: a long batch runs each stage on its own cores and the idle borrowed ones, and "
     "a request on the owner's lane waits at most for the stage in flight; [] = none",
     N(engine_cfg, n_borrow_cores)},
    {E("borrow_preempt", borrow_preempt), K_BOOL, 0, 0, "false",
     "cpu, with borrow_cores: the loans come first: whenever this engine runs, the borrowed "
     "cores' owners yield them at their next round boundary (a few ms; at most 20 ms per round, "
     "so their lane still moves), instead of lending them only while idle: a latency lane over "
     "a batch lane's cores"},
    {E("spread", spread), K_BOOL, 0, 0, "true",
     "cpu, no `cores`: each compute thread of a batch on its own core of the process's set, as "
     "if `cores` named them all (unpinned, the kernel woke a worker onto its master's core: a "
     "lone request's batch ran 3x slower); false = the kernel places the threads"},
    {E("whitelist", shapes), K_SHAPES, 1, 1 << 20, "",
     "allowed [batch, seq] shapes, e.g. [[1, 16], [8, 64]]; [] = any. Its seq lengths are then "
     "the buckets",
     N(engine_cfg, n_shapes)},
    {E("slots", slots), K_INT, 1, HS_SCHED_MAX_SLOTS, "1", "quota: batches in flight at once"},
    {E("slices", slices), K_INT, 1, HS_CONFIG_MAX_SLICES, "1",
     "compute slices: the engine becomes this many engines <name>/0 .. <name>/N-1, each its own "
     "lane per model (routing, metrics, X-Engine); weights are shared. cpu: each on a disjoint "
     "share of its cores (of the process's cores when unpinned) and of its threads; cuda: each "
     "with its own streams on the same device. Routes, rules and models naming the engine take "
     "every slice"},
    {E("batch_window_us", batch_window_us), K_INT, -1, 60e6, "-1",
     "this engine's batching.batch_window_us; -1 = the batching section's"},
    {E("batch_max", batch_max), K_INT, 0, 65536, "0", "this engine's batch_max; 0 = batching's"},
    {E("batch_max_tokens", batch_max_tokens), K_INT, 0, 1 << 24, "0",
     "this engine's batch_max_tokens; 0 = batching's"},
    {E("queue_max", queue_max), K_INT, 0, 1 << 24, "0",
     "this engine's queue size; 0 = limits.queue_max"},
    {E("memory_mb", memory_mb), K_INT, 0, 1 << 30, "0",
     "memory this engine may use (memory plan: weights, activations, workspace, runtime, "
     "margin); 0 = what its device has available (cpu: MemAvailable, shared by the cpu engines)"},
    {E("endpoints", endpoints), K_NAMES, 0, 0, "",
     "kind remote: workers as host:port, each its own lane (queue, breaker, metrics)", F_OMIT,
     N(engine_cfg, n_endpoints)},
    {E("dns", dns), K_STR, 0, 0, "",
     "kind remote: or a name whose every IPv4 address is a worker (a headless Service), "
     "re-resolved every refresh_s",
     F_OMIT},
    {E("endpoints_file", endpoints_file), K_STR, 0, 0, "",
     "kind remote: or a file of host:port lines, re-read every refresh_s", F_OMIT},
    {E("port", port), K_INT, 1, 65535, "8080", "kind remote: workers' port for dns and bare hosts",
     F_OMIT},
    {E("refresh_s", refresh_s), K_INT, 1, 86400, "10", "kind remote: dns / file re-read period",
     F_OMIT},
    {E("workers_max", workers_max), K_INT, 0, 16, "0",
     "kind remote: worker slots (lanes per model); 0 = the endpoints' count (dns / file: 4)",
     F_OMIT},
    {E("timeout_ms", timeout_ms), K_INT, 0, 86400000, "2000",
     "kind remote: a round trip longer than this fails the batch (breaker, retry elsewhere); "
     "0 = the batch's deadline alone",
     F_OMIT},
    {E("connect_timeout_ms", connect_timeout_ms), K_INT, 1, 600000, "500",
     "kind remote: TCP connect timeout", F_OMIT},

    {LIST("", "models", models, n_models, model_cfg), .def = "1",
     .doc = "model instances; weights stay resident on their engines"},
    {M("path", path), K_STR, 0, 0, "", "model folder (config.json, vocab.txt, model.safetensors)",
     F_REQ},
    {M("name", name), K_STR, 0, 0, "", "\"\" = the folder's base name; clients send it as model"},
    {M("engine", engine), K_STR, 0, 0, "", "engines[].name that runs it (default: the first)"},
    {M("engines", engines), K_NAMES, 1, 0, "",
     "engines[].name it is resident on, one queue each (instead of engine)", F_OMIT,
     N(model_cfg, n_engines)},
    {M("dtype", dtype), K_STR, 0, 0, "",
     "\"\" = each engine's dtype; f32 | f16 | bf16 | int8 forces one on every engine it is on"},
    {M("check", check), K_STR, 0, 0, "refuse",
     "at load every lane but cpu f32 is compared with the model's cpu f32 reference on built-in "
     "texts; below tolerance: refuse (the server does not start) | exclude (the lane takes no "
     "traffic; /ready and /metrics say so) | off",
     .choices = "refuse | exclude | off"},
    {M("quantize", quantize), K_STR, 0, 0, "auto",
     "a lane whose dtype needs a quantization plan (int8) on a folder without one (quant.json): "
     "auto = search one at load with the built-in calibration set, as hetserve quantize does "
     "(about 20 s on 2 cores), write it into the folder, or under server.cache_dir when the "
     "folder is not writable, and reuse it on later starts; then the lane check runs as usual | "
     "off = no search (a folder's own plan still applies; without one the lane runs unplanned)",
     .choices = "auto | off"},
    {M("check_cos_min", check_cos_min), K_DOUBLE, 0, 1, "0",
     "tolerance of that check, worst text's cosine; 0 = the lane dtype's (int8 0.99, bf16 0.99, "
     "f16 0.999)"},
    {M("check_cos_mean", check_cos_mean), K_DOUBLE, 0, 1, "0",
     "tolerance of that check, mean cosine; 0 = the lane dtype's (int8 0.998, bf16 0.999, f16 "
     "0.9999)"},
    {M("pooling", pooling), K_STR, 0, 0, "",
     "\"\" = the folder's (1_Pooling/config.json, modules.json, config.json's architectures); "
     "mean | cls | last | splade (the checkpoint's masked-LM head: POST /embed_sparse) | none "
     "(the token embeddings, unnormalized: POST /embed_all)",
     .choices = "\"\" | mean | cls | last | splade | none"},
    {M("dimensions", dimensions), K_INTS, 1, 65536, "",
     "the Matryoshka sizes it was trained for: a request's dimensions must be one of them (or the "
     "full width); [] = config.json's matryoshka_dimensions, and without those any size",
     N(model_cfg, n_dimensions)},

    {.section = "models[]",
     .name = "placement",
     .type = K_MAP,
     .flags = F_OMIT,
     .doc = "which engine runs each stage of its lane: {layers: [{engine: a, from: 0, to: 3}, "
            "{engine: b, from: 3, to: 6}]} or {modules: {attention: a, ffn: b}}; neither = single "
            "(every stage on its engine). A split model has one lane, on engine (default: the "
            "engine of its first stage)"},
    {.section = "models[].placement",
     .name = "layers",
     F(model_cfg, placement.layers),
     .type = K_LIST,
     N(model_cfg, placement.n_layers),
     .item = sizeof(struct hs_layer_range_cfg),
     .def = "0",
     .doc = "layer ranges [from, to), covering every layer once; embed goes with layer 0, pool "
            "with the last"},
    {.section = "models[].placement.layers[]",
     .name = "engine",
     F(layer_range_cfg, engine),
     K_STR,
     0,
     0,
     "",
     "engines[].name",
     F_REQ},
    {.section = "models[].placement.layers[]",
     .name = "from",
     F(layer_range_cfg, from),
     K_INT,
     0,
     4096,
     "0",
     "first layer"},
    {.section = "models[].placement.layers[]",
     .name = "to",
     F(layer_range_cfg, to),
     K_INT,
     0,
     4096,
     "0",
     "one past the last layer"},
    {.section = "models[].placement",
     .name = "modules",
     .type = K_MAP,
     .doc = "attention (and embed) on one engine, FFN (and pool) on another"},
    {.section = "models[].placement.modules",
     .name = "attention",
     F(model_cfg, placement.attention),
     K_STR,
     0,
     0,
     "",
     "engines[].name"},
    {.section = "models[].placement.modules",
     .name = "ffn",
     F(model_cfg, placement.ffn),
     K_STR,
     0,
     0,
     "",
     "engines[].name"},
    {.section = "models[].placement",
     .name = "pipeline",
     F(model_cfg, placement.pipeline),
     K_BOOL,
     0,
     0,
     "false",
     "a split's engines each run one batch at a time, first come first served: batch k's later "
     "layers run while batch k+1's first ones do. A batch forms when the first engine can take "
     "it, and the lane keeps one batch in flight per engine plus one waiting at a boundary (its "
     "engine's slots, raised to that). false: a batch runs its stages one after the other; with "
     "slots > 1 batches share the engines"},

    {SEC("batching"), .doc = "how requests of one length bucket are batched"},
    {C(batching, batch_window_us), K_INT, 0, 60e6, "2000",
     "a batch forms when its bucket's oldest request has waited this long ..."},
    {C(batching, batch_max), K_INT, 1, 65536, "32", "... or holds this many sequences ..."},
    {C(batching, batch_max_tokens), K_INT, 1, 1 << 24, "8192",
     "... or this many padded tokens (batch x bucket length)"},
    {C(batching, buckets), K_INTS, 1, 1 << 16, "16,32,64,128,256",
     "length buckets (tokens); sequences pad to their bucket; the model's max length is the last",
     N(config, batching.n_buckets)},
    {C(batching, batch_window_when_idle), K_BOOL, 0, 0, "false",
     "wait batch_window_us even when no batch runs on the engine; false: an idle engine takes "
     "what is queued at once, and the window only gathers while a batch runs"},

    {SEC("limits"), .doc = "what one request and one queue may hold"},
    {C(limits, queue_max), K_INT, 1, 1 << 24, "1024",
     "sequences queued per engine; beyond: 429 with Retry-After"},
    {C(limits, timeout_ms), K_INT, 1, 86400000, "10000",
     "default deadline per request (field timeout_ms or header X-Timeout-Ms)"},
    {C(limits, timeout_max_ms), K_INT, 1, 86400000, "600000", "largest deadline a client may ask"},
    {C(limits, body_bytes_max), K_I64, 64, 17179869184.0, "4194304", "body limit; beyond: 413"},
    {C(limits, discard_bytes_max), K_I64, 0, 17179869184.0, "67108864",
     "a body refused with 413 is read and discarded up to this many bytes before the answer, so "
     "that a client still sending reads the 413 instead of a reset (lingering close); beyond, "
     "the 413 is sent and the connection closed. 0 = answer at once"},
    {C(limits, discard_timeout_ms), K_INT, 0, 86400000, "10000",
     "... and for at most this long after the request's headers"},
    {C(limits, items_max), K_INT, 1, 1 << 20, "512", "inputs per request; beyond: 413"},
    {C(limits, chars_max), K_INT, 1, 1 << 28, "32768", "characters per input; beyond: 413"},
    {C(limits, drain_timeout_ms), K_INT, 0, 86400000, "30000",
     "on SIGTERM/SIGINT: longest wait for queued requests before exit"},
    {C(limits, memory_margin_ratio), K_DOUBLE, 0, 10, "0.1",
     "memory plan: margin added to each engine's need; a config that does not fit is refused"},
    {C(limits, memory_runtime_mb), K_INT, 0, 1 << 20, "64",
     "memory plan: allowance per engine for its runtime (thread stacks, library caches)"},

    {SEC("scheduler"), .doc = "admission: overload and predicted waits"},
    {C(scheduler, shed_batch_ratio), K_DOUBLE, 0.01, 1, "0.75",
     "share of queue_max that priority batch may fill; interactive requests evict batch ones"},
    {C(scheduler, fair), K_BOOL, 0, 0, "true",
     "fair shares between tenants (API keys' tenants, auth.keys[].weight): each lane's queue "
     "takes work from tenants in weighted start-time fair order instead of arrival order, "
     "predicts a tenant's wait from its own share, and a full queue sheds the tenant furthest "
     "past its share first; with one tenant (no keys) it is the same as false"},
    {C(scheduler, fair_batch_ms), K_INT, 0, 60000, "0",
     "with fair: while more than one tenant sent work in the last second, a batch stops growing "
     "once its predicted time would pass this (one sequence at least) at the work of a tenant "
     "that runs ahead (a full batch past the virtual time, or past another active tenant's next "
     "start): a light tenant waits for short batches, not a flood's full ones (costs the engine "
     "the larger batches' efficiency); 0 = batch_max alone"},
    {C(scheduler, over_share), K_DOUBLE, 0, 1000, "1.25",
     "with fair: while a lane is contended (busy 75 % of the last quarter second or more), the "
     "heaviest tenant, once it had more than this times its weighted share of the tokens the "
     "lane served in that time, waits behind the tenants within their shares (its requests "
     "start a full batch past the virtual time, and their batches take none of its work); it "
     "still gets every turn they leave, in batches cut at fair_batch_ms or, without it, at "
     "twice a batch's fixed cost (hetserve_tenant_over_share_total); 0 = off"},
    {C(scheduler, preempt), K_BOOL, 0, 0, "false",
     "with fair: each local lane (but a pipelined split) gets one more slot that runs owed work "
     "ahead of the batch in flight: sequences of tenants with nothing in it and not running "
     "ahead, in a short batch (a quarter of a full one, or fair_batch_ms when longer); the running "
     "batch waits at its next stage boundary until it ends, its answers unchanged"},
    {C(scheduler, throughput_init_tokens_per_s), K_DOUBLE, 1e-3, 1e12, "20000",
     "engine speed assumed until the first batch is measured (predicts waits for 429)"},
    {C(scheduler, wait_max_ms), K_INT, 0, 86400000, "1000",
     "refuse (429 + Retry-After) a request whose predicted wait is longer, even before its "
     "deadline; 0 = the deadline alone"},
    {C(scheduler, throughput_ewma_alpha), K_DOUBLE, 0.001, 1, "0.2",
     "weight of the newest batch in the measured service times"},
    {C(scheduler, retry_after_min_s), K_INT, 0, 86400, "1", "smallest Retry-After sent with 429"},
    {C(scheduler, profile), K_STR, 0, 0, "",
     "a `hetserve profile` JSON: each lane's per-bucket service times start from its measured "
     "costs instead of throughput_init_tokens_per_s (the batches that run then refine them); "
     "\"\" = none"},

    {LIST("", "routes", routes, n_routes, route_cfg), .def = "0",
     .doc =
         "A route: a model on a set of engines; a request on it goes to the engine with the\n"
         "earliest predicted completion, or is refused with 429 when none can finish before its\n"
         "deadline.\n"
         "[] = one route per model over every engine it is on, named after the model"},
    {R("name", name), K_STR, 0, 0, "route%d", "used by rules, split, shadow, failover; X-Route"},
    {R("kind", kind), K_STR, 0, 0, "engines",
     "engines | cascade (small route, then big for what /predict escalates: see cascade)",
     .choices = "engines | cascade"},
    {R("model", model), K_STR, 0, 0, "", "model name; \"\" = the first model"},
    {R("engines", engines), K_NAMES, 0, 0, "", "engines of the route; [] = every engine it is on",
     N(route_cfg, n_engines)},
    {REF("split"), .doc = "A/B: this share goes to that route, sticky by X-Request-Id"},
    {.section = "routes[].split", .name = "route", F(route_cfg, split_route), K_STR},
    {.section = "routes[].split", .name = "ratio", F(route_cfg, split_ratio), K_DOUBLE, 0, 1, "0"},
    {REF("shadow"), .doc = "copy this share there, discard the result, record the cosine"},
    {.section = "routes[].shadow", .name = "route", F(route_cfg, shadow_route), K_STR},
    {.section = "routes[].shadow",
     .name = "ratio",
     F(route_cfg, shadow_ratio),
     K_DOUBLE,
     0,
     1,
     "0"},
    {REF("failover"), .doc = "when every engine's breaker is open: at most this share goes there"},
    {.section = "routes[].failover", .name = "route", F(route_cfg, failover_route), K_STR},
    {.section = "routes[].failover",
     .name = "ratio_max",
     F(route_cfg, failover_ratio_max),
     K_DOUBLE,
     0,
     1,
     "0.3"},
    {R("small", small), K_STR, 0, 0, "", "kind cascade: route of the small model", F_OMIT},
    {R("big", big), K_STR, 0, 0, "", "kind cascade: route of the escalations", F_OMIT},
    {.section = "routes[]",
     .name = "threshold",
     .type = K_GONE,
     .doc = "a cascade's threshold and escalation cap are set in the cascade section "
            "(cascade.threshold, cascade.escalation_max_ratio)"},
    {.section = "routes[]",
     .name = "escalate_ratio_max",
     .type = K_GONE,
     .doc = "a cascade's escalation cap is set in the cascade section "
            "(cascade.escalation_max_ratio)"},

    {SEC("router"), .doc = "which route a request takes"},
    {LIST("router", "rules", router.rules, router.n_rules, rule_cfg), .def = "0",
     .doc = "first match wins, e.g. {tokens_max: 32, route: short}"},
    {U("route", route), K_STR, 0, 0, "", "the route of a matching request", F_REQ},
    {U("tokens_min", tokens_min), K_INT, 0, 1 << 20, "0", "longest sequence at least", F_OMIT},
    {U("tokens_max", tokens_max), K_INT, 0, 1 << 20, "0", "longest sequence at most; 0 = any",
     F_OMIT},
    {U("task", task), K_STR, 0, 0, "",
     "\"\" any | embeddings | embed | predict | rerank | similarity", F_OMIT,
     .choices = "\"\" | embeddings | embed | predict | rerank | similarity"},
    {U("priority", priority), K_STR, 0, 0, "", "\"\" any | interactive | batch", F_OMIT,
     .choices = "\"\" | interactive | batch"},
    {U("header", header), K_STR, 0, 0, "", "request header ...", F_OMIT},
    {U("value", value), K_STR, 0, 0, "", "... and the value it must have", F_OMIT},
    {C(router, default_route), K_STR, 0, 0, "", "route when no rule matches; \"\" = the first"},
    {C(router, fallback_engine), K_STR, 0, 0, "",
     "single-engine fallback when routing fails; \"\" = the model's first engine"},

    {SEC("breaker"), .doc = "one circuit breaker per engine"},
    {C(breaker, window_requests), K_INT, 1, HS_BREAKER_MAX_WINDOW, "20",
     "outcomes remembered while closed"},
    {C(breaker, min_requests), K_INT, 1, HS_BREAKER_MAX_WINDOW, "5",
     "outcomes needed before it may open"},
    {C(breaker, error_ratio_max), K_DOUBLE, 0.001, 1, "0.5",
     "failure share of the window that opens it (errors, timeouts, slow batches)"},
    {C(breaker, latency_max_ms), K_INT, 0, 86400000, "0", "a slower batch fails; 0 = off"},
    {C(breaker, open_ms), K_INT, 0, 86400000, "5000", "open -> half-open after this"},
    {C(breaker, half_open_probes), K_INT, 1, 1 << 20, "3",
     "requests let through half-open; all succeed -> closed, one fails -> open"},

    {SEC("retry"), .doc = "one more try elsewhere after an engine failure, from a budget"},
    {C(retry, budget_ratio), K_DOUBLE, 0, 1, "0.1",
     "tokens each routed request adds; a retry "
     "takes one"},
    {C(retry, budget_max), K_DOUBLE, 0, 1e6, "5", "most tokens saved (and the initial fill)"},

    {SEC("admin"),
     .doc = "POST /admin/fault {engine, fail_next, slow_factor, hang_ms}: fault injection"},
    {C(admin, enabled), K_BOOL, 0, 0, "false", "serve it (to loopback clients only)"},
    {C(admin, token), K_STR, 0, 0, "",
     "\"\" = none; else it needs Authorization: Bearer <token> (env HS_ADMIN_TOKEN overrides)"},

    {SEC("auth"),
     .doc = "API keys and tenants: with any key (keys, keys_file), every endpoint but the open "
            "ones needs\n"
            "Authorization: Bearer <key> (or api-key: / X-API-Key:): 401 without a known key, 403 "
            "for a\n"
            "model or endpoint the key may not use, 429 with Retry-After past its tenant's rate. "
            "SIGHUP\n"
            "reloads the keys (the config file's and the keys file's) without dropping "
            "connections.\n"
            "/admin/fault (admin.token) and /internal/v1/* (routers to workers) are never keyed."},
    {C(auth, keys_file), K_STR, 0, 0, "",
     "a keys file: one key a line, \"<sha256> <tenant> [name=value ...]\" with the keys of "
     "keys[] (lists comma-separated); HS_API_KEYS_FILE replaces it; \"\" = none"},
    {C(auth, probes), K_STR, 0, 0, "open", "/health, /ready, /v2/health/...: open (no key) | keyed",
     .choices = "open | keyed"},
    {C(auth, metrics), K_STR, 0, 0, "open", "/metrics, /dashboard: open | keyed",
     .choices = "open | keyed"},
    {C(auth, share_inflight), K_INT, 0, 1 << 20, "0",
     "fair shares: past this many requests in flight (all tenants'), the heaviest tenant over "
     "its weighted share of them (its weight over the weights of the tenants with requests in "
     "flight) runs as batch (served after, shed first); past twice this it gets 429; 0 = off"},
    {LIST("auth", "keys", auth.keys, auth.n_keys, auth_key_cfg), .def = "0",
     .doc = "one API key each; keys naming one tenant share its buckets (and must agree on them)"},
    {A("sha256", sha256), K_STR, 0, 0, "",
     "the key's SHA-256 in hex (printf %s KEY | sha256sum); the key itself is never stored", F_REQ},
    {A("tenant", tenant), K_STR, 0, 0, "", "the tenant: metrics, capture, buckets", F_REQ},
    {A("models", models), K_NAMES, 0, 0, "", "models it may use; [] = every model", F_OMIT,
     N(auth_key_cfg, n_models)},
    {A("endpoints", endpoints), K_NAMES, 0, 0, "",
     "endpoints it may call, paths or path prefixes (/v1, /embed, /v2); [] = every one", F_OMIT,
     N(auth_key_cfg, n_endpoints)},
    {.section = "auth.keys[]",
     .name = "rate",
     .type = K_MAP,
     .flags = F_OMIT,
     .doc = "the tenant's token buckets: requests and tokens a second, each holding burst_s of "
            "it"},
    {AR("requests_per_s", requests_per_s), K_DOUBLE, 0, 1e9, "0", "requests a second; 0 = any"},
    {AR("tokens_per_s", tokens_per_s), K_DOUBLE, 0, 1e12, "0",
     "input tokens a second; 0 = any (a request may overdraw it; the next then waits)"},
    {AR("burst_s", burst_s), K_DOUBLE, 0.001, 86400, "1", "seconds of rate a bucket holds"},
    {A("priority_max", priority_max), K_STR, 0, 0, "interactive",
     "highest priority its requests get: batch runs every one as batch", F_OMIT,
     .choices = "interactive | batch"},
    {A("weight", weight), K_DOUBLE, 0.001, 1000, "1",
     "the tenant's share relative to others' under auth.share_inflight and in the lanes' fair "
     "order (scheduler.fair)",
     F_OMIT},

    {SEC("cascade"),
     .doc =
         "POST /predict (off while small is empty): every input is classified by the small "
         "model's\n"
         "head; one whose top probability is below threshold goes on to the big model, unless "
         "that\n"
         "lifts the escalated share above escalation_max_ratio. Both stages are routed like any\n"
         "request (task predict); a route of kind cascade places them. X-Cascade names who\n"
         "answered each input (small | big | capped)."},
    {C(cascade, small), K_STR, 0, 0, "", "served model that classifies first"},
    {C(cascade, small_head), K_STR, 0, 0, "", "its head file, e.g. heads/x-sentiment.json"},
    {C(cascade, big), K_STR, 0, 0, "", "model for low-confidence inputs; \"\" = no cascade"},
    {C(cascade, big_head), K_STR, 0, 0, "", "its head file"},
    {C(cascade, threshold), K_DOUBLE, 1e-6, 1, "0.7",
     "escalate when the small head's top probability is below this"},
    {C(cascade, escalation_max_ratio), K_DOUBLE, 0, 1, "1",
     "most inputs that may escalate, as a share of all decided so far (1: no cap)"},

    {LIST("", "pipelines", pipelines, n_pipelines, pipeline_cfg), .def = "0",
     .doc = "stages in order, a bounded queue, workers and batch shape each, served at an "
            "endpoint (POST /v1/ocr)"},
    {P("name", name), K_STR, 0, 0, "ocr%d", "X-Pipeline names it (default: the first)"},
    {P("endpoint", endpoint), K_STR, 0, 0, "/v1/ocr",
     "where it is served: /v1/ocr takes image bytes and answers text lines, /v1/layout image "
     "bytes and answers detections",
     .choices = "/v1/ocr | /v1/layout"},
    {P("cpu_workers", cpu_workers), K_INT, 1, 64, "1", "threads of each op stage"},
    {P("queue_max", queue_max), K_INT, 1, 100000, "64",
     "requests in front of each stage; the first full = 429 with Retry-After"},
    {P("timeout_ms", timeout_ms), K_INT, 1, 3600000, "30000",
     "a request's deadline across all stages (504 when it passes in a queue)"},
    {P("image_max_bytes", image_max_bytes), K_I64, 1, 1ll << 31, "33554432",
     "encoded image size at most (413 beyond)"},
    {P("image_max_pixels", image_max_pixels), K_I64, 1, 1ll << 30, "40000000",
     "width x height at most (400 beyond)"},
    {P("image_max_side", image_max_side), K_INT, 1, 65535, "16384", "width, height at most"},
    /* the OCR shorthand: F_OMIT, cleared once expanded into stages[] */
    {P("kind", kind), K_STR, 0, 0, "",
     "ocr: the shorthand det, rec, dict (cls, *_engine, rec_images, rec_window_us, "
     "det_limit_side_len, box_thresh, drop_score) instead of stages, expanded to decode -> "
     "det_prep -> det -> db_post -> crop -> [cls] -> rec -> ctc",
     F_OMIT, .choices = "\"\" | ocr"},
    {P("det", det), K_STR, 0, 0, "", "shorthand: the text detector ONNX (DBNet)", F_OMIT},
    {P("rec", rec), K_STR, 0, 0, "", "shorthand: the text recognizer ONNX (CTC)", F_OMIT},
    {P("dict", dict), K_STR, 0, 0, "", "shorthand: the recognizer's dictionary", F_OMIT},
    {P("cls", cls), K_STR, 0, 0, "", "shorthand: direction classifier ONNX; \"\" = none", F_OMIT},
    {P("det_engine", det_engine), K_STR, 0, 0, "", "shorthand: the engine of det", F_OMIT},
    {P("rec_engine", rec_engine), K_STR, 0, 0, "", "shorthand: of rec; \"\" = det's", F_OMIT},
    {P("cls_engine", cls_engine), K_STR, 0, 0, "", "shorthand: of cls; \"\" = rec's", F_OMIT},
    {P("rec_images", rec_images), K_INT, 1, 64, "4", "shorthand: rec's requests_max", F_OMIT},
    {P("rec_window_us", rec_window_us), K_INT, 0, 1000000, "2000", "shorthand: rec's window_us",
     F_OMIT},
    {P("det_limit_side_len", det_limit_side_len), K_INT, 32, 8192, "960",
     "shorthand: det_prep's limit_side_len", F_OMIT},
    {P("box_thresh", box_thresh), K_DOUBLE, 0, 1, "0.5", "shorthand: db_post's box_thresh", F_OMIT},
    {P("drop_score", drop_score), K_DOUBLE, 0, 1, "0.5", "shorthand: ctc's drop_score", F_OMIT},
    {.section = "pipelines[]",
     .name = "stages",
     F(pipeline_cfg, stages),
     .type = K_LIST,
     N(pipeline_cfg, n_stages),
     .item = sizeof(struct hs_stage_cfg),
     .def = "0",
     .doc = "the stages in order: each an op (op: image_decode, det_prep, db_post, crop, "
            "ctc_decode) or a model stage (model: an ONNX graph); what each gives is what the "
            "next reads"},
#define PS(key, f) .section = "pipelines[].stages[]", .name = key, F(stage_cfg, f)
    {PS("name", name), K_STR, 0, 0, "", "unique in the pipeline: the stage label in /metrics",
     F_REQ},
    {PS("op", op), K_STR, 0, 0, "", "a built-in CPU op; \"\" = a model stage", F_OMIT},
    {PS("model", model), K_STR, 0, 0, "", "the stage's ONNX graph; \"\" = an op stage",
     F_OMIT | F_MODEL},
    {PS("io", io), K_STR, 0, 0, "",
     "the graph's kind: detect (tensor -> map), recognize (crops -> sequences), classify (crops "
     "-> crops); \"\" = by what the stage before gives",
     F_OMIT | F_MODEL},
    {PS("engine", engine), K_STR, 0, 0, "",
     "engines[].name running the graph (needs graph_onnx); \"\" = the first engine",
     F_OMIT | F_MODEL},
    {PS("dtype", dtype), K_STR, 0, 0, "", "graphs run in f32", F_OMIT | F_MODEL,
     .choices = "\"\" | f32"},
    {PS("workers", workers), K_INT, 0, 64, "0",
     "the stage's threads; 0 = cpu_workers (op stage), 1 (model stage)", F_OMIT},
    {PS("batch_max", batch_max), K_INT, 0, 64, "0",
     "rows (crops) one graph run holds at most; 0 = the graph kind's (detect 1, else 6)",
     F_OMIT | F_MODEL},
    {PS("batch_fixed", batch_fixed), K_INT, 0, 64, "0",
     "every graph run exactly this many rows (static-shape engines), padded with blank rows "
     "whose outputs are dropped; 0 = as many as it has",
     F_OMIT | F_MODEL},
    {PS("requests_max", requests_max), K_INT, 1, 64, "1",
     "requests one run of the stage takes from its queue (fan-in: their crops batched together)",
     F_OMIT},
    {PS("window_us", window_us), K_INT, 0, 1000000, "0",
     "with one request in hand, how long a run waits for more (requests_max > 1)", F_OMIT},
    {PS("shapes", shapes), K_INTS, 8, 8192, "",
     "the sizes a graph run's spatial dims may take (static engines): detect pads height and "
     "width each to the smallest listed that holds it (multiples of 32); recognize pads each "
     "run's width so (wider crops squeezed into the largest); [] = any",
     F_OMIT | F_MODEL, N(stage_cfg, n_shapes)},
    {PS("timeout_ms", timeout_ms), K_INT, 0, 3600000, "0",
     "an item's wait in the stage's queue, or its batch's run, at most: past it the item fails "
     "over (under the cap) or ends 504 naming the stage; 0 = none",
     F_OMIT},
    {.section = "pipelines[].stages[]",
     .name = "fallback",
     .type = K_MAP,
     .flags = F_OMIT | F_MODEL,
     .doc = "when the stage's engine is overloaded (queue full, or its predicted wait over "
            "timeout_ms), fails or times out, the item runs on fallback.engines[0], while its "
            "share of the stage's last 100 items stays within ratio_max; beyond, 429 with "
            "Retry-After"},
    {.section = "pipelines[].stages[].fallback",
     .name = "engines",
     F(stage_cfg, fallback),
     K_NAMES,
     0,
     0,
     "",
     "engines[].name (graph_onnx); [] = no fallback",
     .n_off = offsetof(struct hs_stage_cfg, n_fallback)},
    {.section = "pipelines[].stages[].fallback",
     .name = "ratio_max",
     F(stage_cfg, ratio_max),
     K_DOUBLE,
     0.001,
     1,
     "0.3",
     "the fallback's share of the stage's recent items at most, (0, 1]"},
    {.section = "pipelines[].stages[]",
     .name = "route",
     .type = K_MAP,
     .flags = F_OMIT | F_MODEL,
     .doc = "the stage on several engines at once (instead of engine), as a route of requests "
            "is (routes[]): each engine its own queue, workers and batch shape, each batch of "
            "requests to the engine with the earliest predicted completion (or in turn); the "
            "fallback takes what none can (all full, overloaded or breaker open) or what one "
            "failed"},
    {.section = "pipelines[].stages[].route",
     .name = "policy",
     F(stage_cfg, policy),
     K_STR,
     0,
     0,
     "predicted",
     "predicted: the earliest predicted completion (queued and running batches by each "
     "engine's learned batch time); round_robin: in turn",
     .choices = "predicted | round_robin"},
    {.section = "pipelines[].stages[].route",
     .name = "engines",
     F(stage_cfg, routes),
     .type = K_LIST,
     N(stage_cfg, n_routes),
     .item = sizeof(struct hs_stage_route_cfg),
     .def = "0",
     .flags = F_SCALAR,
     .doc = "engines[].name each (graph_onnx), or {engine, batch_max, batch_fixed, shapes}: "
            "its own batch shape (a static engine's); [] = not routed"},
#define PR(key, f)                                                                                 \
    .section = "pipelines[].stages[].route.engines[]", .name = key, F(stage_route_cfg, f)
    {PR("engine", engine), K_STR, 0, 0, "", "engines[].name (graph_onnx)", F_REQ},
    {PR("batch_max", batch_max), K_INT, 0, 64, "0", "rows one graph run holds; 0 = the stage's"},
    {PR("batch_fixed", batch_fixed), K_INT, 0, 64, "0",
     "every graph run on it exactly this many rows; 0 = the stage's"},
    {PR("shapes", shapes), K_INTS, 8, 8192, "", "its graph runs' sizes; [] = the stage's",
     N(stage_route_cfg, n_shapes)},
#undef PR
    {PS("dict", dict), K_STR, 0, 0, "", "ctc_decode: the recognizer's dictionary, a token a line",
     F_OMIT | F_PARAM},
    {PS("limit_side_len", limit_side_len), K_INT, 32, 8192, "960",
     "det_prep: the detector input's longer side at most", F_OMIT | F_PARAM},
    {PS("thresh", thresh), K_DOUBLE, 0, 1, "0.3", "db_post: binarization of the map",
     F_OMIT | F_PARAM},
    {PS("box_thresh", box_thresh), K_DOUBLE, 0, 1, "0.5",
     "db_post: least mean probability of a box", F_OMIT | F_PARAM},
    {PS("unclip_ratio", unclip_ratio), K_DOUBLE, 0, 10, "1.6", "db_post: growth of a box",
     F_OMIT | F_PARAM},
    {PS("drop_score", drop_score), K_DOUBLE, 0, 1, "0.5",
     "ctc_decode: lines read with less are "
     "dropped",
     F_OMIT | F_PARAM},
    {PS("input_w", input_w), K_INT, 32, 8192, "608", "layout_prep: the detector input's width",
     F_OMIT | F_PARAM},
    {PS("input_h", input_h), K_INT, 32, 8192, "800", "layout_prep: the detector input's height",
     F_OMIT | F_PARAM},
    {PS("top_k", top_k), K_INT, 0, 1 << 20, "1000",
     "gfl_decode: the best anchors kept a stride; 0 = all", F_OMIT | F_PARAM},
    {PS("score_thresh", score_thresh), K_DOUBLE, 0, 1, "0.5",
     "nms: a class's candidates score above this", F_OMIT | F_PARAM},
    {PS("iou_thresh", iou_thresh), K_DOUBLE, 0, 1, "0.5",
     "nms: a candidate overlapping a kept box by more is dropped", F_OMIT | F_PARAM},
    {PS("candidates_max", candidates_max), K_INT, 0, 1 << 20, "200",
     "nms: the best this many a class are considered; 0 = all", F_OMIT | F_PARAM},
    {PS("keep_max", keep_max), K_INT, 0, 1 << 20, "100",
     "nms: at most this many kept a class; 0 = all", F_OMIT | F_PARAM},
    {PS("labels", labels), K_STR, 0, 0, "", "nms: the detector's class names, a name a line",
     F_OMIT | F_PARAM},
#undef PS
};
#define KEYS_END (keys + sizeof keys / sizeof keys[0])

/* The section of k's keys (K_MAP, K_LIST) */
static const char *child(char *buf, const char *sec, const struct key *k)
{
    snprintf(buf, 64, "%s%s%s%s", sec, *sec ? "." : "", k->name, k->type == K_LIST ? "[]" : "");
    return buf;
}

/* path.name, or path[index] when name is NULL: a key's path in messages */
static const char *subpath(char buf[PATH_BYTES], const char *path, const char *name, int index)
{
    int r = name ? snprintf(buf, PATH_BYTES, "%s%s%s", path, *path ? "." : "", name)
                 : snprintf(buf, PATH_BYTES, "%s[%d]", path, index);
    if (r >= PATH_BYTES) memcpy(buf + PATH_BYTES - 4, "...", 4); /* cut short */
    return buf;
}

static bool in_choices(const char *choices, const char *s)
{
    for (const char *p = choices; *p; p += strspn(p, " |")) {
        size_t len = strcspn(p, " |");
        if (len == 2 && !strncmp(p, "\"\"", 2) ? !*s : len == strlen(s) && !strncmp(p, s, len))
            return true;
        p += len;
    }
    return false;
}

#define NO(...) (snprintf(msg, cap, __VA_ARGS__), false)

/* "16,32" or "0-3,6" into an int list, each number in [min, max]. */
static bool set_ints(const struct key *k, char *base, const char *s, char *msg, size_t cap)
{
    int *v = (int *)(base + k->off), *n = (int *)(base + k->n_off);
    int most = (int)(k->size / sizeof *v);
    *n = 0;
    for (const char *s0 = s; *s; s = *s ? s + 1 : s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end != s && *end == '-' && (b = strtol(s = end + 1, &end, 10)) < a) end = (char *)s;
        if (end == s || (*end && *end != ','))
            return NO("expected numbers and ranges like \"0-3,6\", not '%s'", s0);
        if (a < k->min || b > k->max)
            return NO("%ld-%ld is out of range [%g, %g]", a, b, k->min, k->max);
        for (long i = a; i <= b; i++) {
            if (*n >= most) return NO("more than %d numbers", most);
            v[(*n)++] = (int)i;
        }
        s = end;
    }
    return true;
}

/* Sets the value of key k in base from text s; false with a message in msg. */
static bool set_text(const struct key *k, char *base, const char *s, char *msg, size_t cap)
{
    char *p = base + k->off, *end;
    errno = 0;
    if (k->type == K_INT || k->type == K_I64) {
        long long v = strtoll(s, &end, 10);
        if (!*s || *end || errno) return NO("expected an integer, not '%s'", s);
        if (v < k->min || v > k->max)
            return NO("%lld is out of range [%.0f, %.0f]", v, k->min, k->max);
        if (k->type == K_INT) *(int *)p = (int)v;
        if (k->type == K_I64) *(int64_t *)p = v;
    } else if (k->type == K_DOUBLE) {
        double v = strtod(s, &end);
        if (!*s || *end || !isfinite(v)) return NO("expected a number, not '%s'", s);
        if (v < k->min || v > k->max) return NO("%g is out of range [%g, %g]", v, k->min, k->max);
        *(double *)p = v;
    } else if (k->type == K_STR) {
        if (strlen(s) >= k->size) return NO("longer than %zu characters", k->size - 1);
        if (k->choices && !in_choices(k->choices, s))
            return NO("'%s' is not one of %s", s, k->choices);
        memset(p, 0, k->size);
        memcpy(p, s, strlen(s));
    } else if (k->type == K_BOOL) {
        if (strcmp(s, "true") && strcmp(s, "false"))
            return NO("expected true or false, not '%s'", s);
        *(int *)p = !strcmp(s, "true");
    } else if (k->type == K_INTS) {
        return set_ints(k, base, s, msg, cap);
    } else { /* shapes and names: only their empty default comes as text */
        *(int *)(base + k->n_off) = 0;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * defaults
 */

/* Sets the keys of section sec in base (item index of a list) to their defaults. */
static void set_defaults(const char *sec, char *base, int index)
{
    for (const struct key *k = keys; k < KEYS_END; k++) {
        char sub[64], txt[64], msg[128];
        const char *d = k->def ? k->def : "";
        if (strcmp(k->section, sec) || k->type == K_GONE) continue;
        if (k->type == K_MAP) set_defaults(child(sub, sec, k), base, index);
        if (k->type == K_LIST) *(int *)(base + k->n_off) = atoi(d);
        for (int i = 0; k->type == K_LIST && i < atoi(d); i++) {
            memset(base + k->off + (size_t)i * k->item, 0, k->item);
            set_defaults(child(sub, sec, k), base + k->off + (size_t)i * k->item, i);
        }
        if (k->type == K_MAP || k->type == K_LIST) continue;
        if (strstr(d, "%d")) {
            snprintf(txt, sizeof txt, d, index);
            d = txt;
        }
        bool ok = set_text(k, base, d, msg, sizeof msg);
        HS_ASSERT(ok);
    }
}

/* A list item with its defaults. */
static void item_init(const struct key *list, const char *sec, char *item, int index)
{
    memset(item, 0, list->item);
    set_defaults(sec, item, index);
}

/* models[].engine: the first of its engines when it names several, else the first engine. */
static void fill_model_engines(struct hs_config *c)
{
    for (struct hs_model_cfg *m = c->models; m < c->models + c->n_models; m++) {
        if (m->n_engines) memcpy(m->engine, m->engines[0], sizeof m->engine);
        const struct hs_placement_cfg *p = &m->placement;
        if (!m->engine[0] && p->n_layers) {
            int first = 0; /* the range holding layer 0 */
            for (int r = 1; r < p->n_layers; r++)
                if (p->layers[r].from < p->layers[first].from) first = r;
            memcpy(m->engine, p->layers[first].engine, sizeof m->engine);
        }
        if (!m->engine[0] && p->attention[0]) memcpy(m->engine, p->attention, sizeof m->engine);
        if (!m->engine[0])
            snprintf(m->engine, sizeof m->engine, "%s", c->n_engines ? c->engines[0].name : "");
    }
}

void hs_config_model_init(struct hs_model_cfg *m, int index)
{
    memset(m, 0, sizeof *m);
    set_defaults("models[]", (char *)m, index);
}

void hs_config_defaults(struct hs_config *c, const char *model_path)
{
    memset(c, 0, sizeof *c);
    set_defaults("", (char *)c, 0);
    snprintf(c->models[0].path, sizeof c->models[0].path, "%s",
             model_path ? model_path : DEFAULT_MODEL_PATH);
    fill_model_engines(c);
}

void hs_config_item_init(const char *sec, void *item)
{
    char sub[64];
    for (const struct key *k = keys; k < KEYS_END; k++)
        if (k->type == K_LIST && !strcmp(child(sub, k->section, k), sec)) {
            item_init(k, sec, item, 0);
            return;
        }
}

hs_status hs_config_item_set(const char *sec, void *item, const char *name, const char *text,
                             char *msg, size_t cap)
{
    size_t sl = strlen(sec);
    for (const struct key *k = keys; k < KEYS_END; k++) {
        bool in =
            !strcmp(k->section, sec) || (!strncmp(k->section, sec, sl) && k->section[sl] == '.' &&
                                         !strchr(k->section + sl + 1, '.'));
        if (!in || strcmp(k->name, name) || k->type > K_BOOL) continue;
        return set_text(k, item, text, msg, cap) ? HS_STATUS_OK : HS_STATUS_INVALID_INPUT;
    }
    snprintf(msg, cap, "unknown key '%s'", name);
    return HS_STATUS_NOT_FOUND;
}

/* ---------------------------------------------------------------------------------------------
 * parsing
 */

static yaml_node_t *node(struct ctx *x, int i)
{
    return yaml_document_get_node(x->doc, i);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static hs_status parse_scalar(struct ctx *x, const struct key *k, yaml_node_t *v, const char *path,
                              char *base)
{
    static const char *const want[] = {"an integer", "an integer",    "a number",
                                       "a string",   "true or false", "a list of numbers"};
    const char *s = scalar(v);
    char msg[256];
    if (!s)
        return fault(x, v, path, "expected %s, not a %s", want[k->type],
                     v->type == YAML_MAPPING_NODE ? "mapping" : "list");
    return set_text(k, base, s, msg, sizeof msg) ? HS_STATUS_OK : fault(x, v, path, "%s", msg);
}

/* [16, 32], [[1, 16], [8, 64]], ["a", "b"] */
static hs_status parse_seq(struct ctx *x, const struct key *k, yaml_node_t *v, const char *path,
                           char *base)
{
    if (k->type == K_INTS && v->type == YAML_SCALAR_NODE) return parse_scalar(x, k, v, path, base);
    if (v->type != YAML_SEQUENCE_NODE) return fault(x, v, path, "expected a list");
    bool shapes = k->type == K_SHAPES;
    size_t each = shapes ? sizeof(struct hs_shape) : k->type == K_NAMES ? NAME_BYTES : sizeof(int);
    struct key e = {.type = k->type == K_NAMES ? K_STR : K_INT,
                    .size = NAME_BYTES,
                    .min = k->min,
                    .max = k->max};
    int *n = (int *)(base + k->n_off), most = (int)(k->size / each);
    yaml_node_item_t *it = v->data.sequence.items.start;
    for (*n = 0; it < v->data.sequence.items.top; it++, (*n)++) {
        yaml_node_t *in = node(x, *it);
        yaml_node_item_t *pair = in->data.sequence.items.start;
        char *p = base + k->off + (size_t)*n * each;
        if (*n >= most) return fault(x, in, path, "more than %d items", most);
        if (shapes && (in->type != YAML_SEQUENCE_NODE || in->data.sequence.items.top - pair != 2))
            return fault(x, in, path, "expected [batch, seq]");
        hs_status st = parse_scalar(x, &e, shapes ? node(x, pair[0]) : in, path, p);
        if (!st && shapes)
            st = parse_scalar(x, &e, node(x, pair[1]), path, p + offsetof(struct hs_shape, seq));
        if (st) return st;
    }
    if (k->type == K_NAMES && *n < k->min)
        return fault(x, v, path, "expected at least %g name(s)", k->min);
    return HS_STATUS_OK;
}

static hs_status parse_map(struct ctx *x, yaml_node_t *n, const char *sec, const char *path,
                           char *base);

static hs_status parse_list(struct ctx *x, const struct key *k, yaml_node_t *v, const char *sec,
                            const char *path, char *base)
{
    if (v->type != YAML_SEQUENCE_NODE) return fault(x, v, path, "expected a list of mappings");
    int *n = (int *)(base + k->n_off), most = (int)(k->size / k->item);
    yaml_node_item_t *it = v->data.sequence.items.start;
    for (*n = 0; it < v->data.sequence.items.top; it++) {
        yaml_node_t *in = node(x, *it);
        char ip[PATH_BYTES], *item = base + k->off + (size_t)*n * k->item;
        if (*n >= most) return fault(x, in, path, "more than %d items", most);
        item_init(k, sec, item, *n);
        const struct key *first = keys;
        while ((k->flags & F_SCALAR) && first < KEYS_END && strcmp(first->section, sec)) first++;
        hs_status st = (k->flags & F_SCALAR) && in->type == YAML_SCALAR_NODE && first < KEYS_END
                           ? parse_scalar(x, first, in, subpath(ip, path, NULL, (*n)++), item)
                           : parse_map(x, in, sec, subpath(ip, path, NULL, (*n)++), item);
        for (const struct key *r = keys; !st && r < KEYS_END; r++)
            if ((r->flags & F_REQ) && !strcmp(r->section, sec) && !item[r->off])
                st = fault(x, in, ip, "%s is required", r->name);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static hs_status parse_map(struct ctx *x, yaml_node_t *n, const char *sec, const char *path,
                           char *base)
{
    if (n->type != YAML_MAPPING_NODE) return fault(x, n, path, "expected a mapping");
    yaml_node_pair_t *p = n->data.mapping.pairs.start;
    for (hs_status st = HS_STATUS_OK; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = node(x, p->key), *v = node(x, p->value);
        const char *name = scalar(kn);
        char kp[PATH_BYTES], sub[64];
        if (!name) return fault(x, kn, path, "expected a key, not a mapping or list");
        subpath(kp, path, name, 0);
        const struct key *k = keys;
        while (k < KEYS_END && (strcmp(k->section, sec) || strcmp(k->name, name))) k++;
        if (k == KEYS_END) {
            struct line known = {.n = 0};
            for (k = keys; k < KEYS_END; k++)
                if (!strcmp(k->section, sec) && k->type != K_GONE)
                    app(&known, "%s%s", known.n ? ", " : "", k->name);
            return fault(x, kn, kp, "unknown %s (known: %s)", *sec ? "key" : "section", known.s);
        }
        /* after the lookup: a mapping has at most as many pairs as its section has keys */
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
            if (!strcmp(name, scalar(node(x, q->key)))) return fault(x, kn, kp, "given twice");
        st = k->type == K_GONE   ? fault(x, v, kp, "%s", k->doc)
             : k->type == K_MAP  ? parse_map(x, v, child(sub, sec, k), kp, base)
             : k->type == K_LIST ? parse_list(x, k, v, child(sub, sec, k), kp, base)
             : k->type >= K_INTS ? parse_seq(x, k, v, kp, base)
                                 : parse_scalar(x, k, v, kp, base);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

/* engines[].library: loads each plugin; kind `plugin` becomes the kind the plugin declares. */
static hs_status load_plugins(struct hs_config *c, const char *label, struct hs_error *err)
{
    for (int i = 0; i < c->n_engines; i++) {
        struct hs_engine_cfg *e = &c->engines[i];
        if (!e->library[0]) {
            if (!strcmp(e->kind, "plugin"))
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "%s: engines[%d].library: kind plugin needs the plugin's "
                                    "shared object",
                                    label, i);
            continue;
        }
        /* only engine plugins by name: a config (or a fuzzed one) never dlopens other code */
        const char *base = strrchr(e->library, '/');
        base = base ? base + 1 : e->library;
        size_t bl = strlen(base);
        if (strncmp(base, "libhs_engine_", 13) || bl < 17 || strcmp(base + bl - 3, ".so"))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s: engines[%d].library: '%s' is not named libhs_engine_*.so",
                                label, i, e->library);
        const struct hs_engine_kind *k = NULL;
        struct hs_error le = {0};
        if (hs_engine_plugin_load(e->library, &k, &le))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s: engines[%d].library: %s", label,
                                i, le.msg);
        if (!strcmp(e->kind, "plugin"))
            snprintf(e->kind, sizeof e->kind, "%s", k->name);
        else if (strcmp(e->kind, k->name))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s: engines[%d].library: the plugin is of kind '%s', not '%s'",
                                label, i, k->name, e->kind);
    }
    return HS_STATUS_OK;
}

hs_status hs_config_parse(const char *text, size_t len, const char *label, struct hs_config *c,
                          struct hs_error *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return hs_error_set(err, HS_STATUS_NO_MEMORY, "yaml");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        hs_status st = hs_error_set(err, HS_STATUS_INVALID_INPUT, "%s:%zu: YAML error: %s", label,
                                    (size_t)parser.problem_mark.line + 1,
                                    parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return st;
    }
    struct ctx x = {.doc = &doc, .label = label, .err = err};
    hs_status st = HS_STATUS_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !(scalar(root) && !*scalar(root))) /* an empty file is no error */
        st = parse_map(&x, root, "", root->type == YAML_MAPPING_NODE ? "" : "(top level)",
                       (char *)c);
    fill_model_engines(c);
    if (!st) st = hs__config_pipelines_expand(c, label, err);
    if (!st) st = load_plugins(c, label, err);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}

hs_status hs_config_load(const char *path, struct hs_config *c, struct hs_error *err)
{
    char *buf;
    size_t len;
    hs_status st = hs_read_file(path, 0, &buf, &len, err);
    if (st) return st == HS_STATUS_NOT_FOUND ? HS_STATUS_IO : st;
    st = hs_config_parse(buf, len, path, c, err);
    hs_free(buf);
    return st ? st : hs_config_validate(c, err);
}

/* ---------------------------------------------------------------------------------------------
 * validation: the table's ranges and choices here, the cross-field checks in config_check.c
 */

#define BAD(...) hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: " __VA_ARGS__)

/* The table's ranges and choices, for values set in code (command-line overrides) as well. */
hs_status hs__config_check_keys(const char *sec, const char *base, const char *path,
                                struct hs_error *err)
{
    for (const struct key *k = keys; k < KEYS_END; k++) {
        if (strcmp(k->section, sec)) continue;
        char sub[64], kp[PATH_BYTES], ip[PATH_BYTES];
        const char *p = base + k->off;
        int n = k->n_off ? *(const int *)(base + k->n_off) : 0;
        double v = k->type == K_INT      ? *(const int *)p
                   : k->type == K_I64    ? (double)*(const int64_t *)p
                   : k->type == K_DOUBLE ? *(const double *)p
                                         : 0;
        hs_status st = HS_STATUS_OK;
        subpath(kp, path, k->name, 0);
        if (k->type <= K_DOUBLE && !(v >= k->min && v <= k->max))
            st = BAD("%s: %g is out of range [%g, %g]", kp, v, k->min, k->max);
        else if (k->type == K_STR && k->choices && !in_choices(k->choices, p))
            st = BAD("%s: '%s' is not one of %s", kp, p, k->choices);
        else if (k->type == K_MAP)
            st = hs__config_check_keys(child(sub, sec, k), base, kp, err);
        else if (k->type == K_LIST && n > (int)(k->size / k->item))
            st = BAD("%s: more than %zu items", kp, k->size / k->item);
        for (int i = 0; k->type == K_LIST && !st && i < n; i++) {
            subpath(ip, kp, NULL, i);
            st = hs__config_check_keys(child(sub, sec, k), p + (size_t)i * k->item, ip, err);
        }
        if (st) return st;
    }
    return HS_STATUS_OK;
}

static bool same(const struct key *k, const char *sec, const char *a, const char *b);

static bool is_word(const char *list, const char *w)
{
    const size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)); p += n)
        if ((p == list || p[-1] == ' ') && (!p[n] || p[n] == ' ')) return true;
    return false;
}

const char *hs__config_stage_given(const struct hs_stage_cfg *s, int model, const char *allowed)
{
    static const char sec[] = "pipelines[].stages[]";
    const unsigned flag = model ? F_MODEL : F_PARAM;
    struct hs_stage_cfg d;
    hs_config_item_init(sec, &d);
    for (const struct key *k = keys; k < KEYS_END; k++)
        if (!strcmp(k->section, sec) && (k->flags & flag) && !is_word(allowed, k->name) &&
            !same(k, sec, (const char *)s, (const char *)&d))
            return k->name;
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * printing
 */

/* A name or a path as it is (YAML would read it as text), anything else double-quoted. */
static void put_str(struct line *l, const char *s)
{
    static const char *const typed[] = {"true", "false", "yes", "no", "on", "off", "null"};
    bool plain = isalpha((unsigned char)*s) || *s == '/';
    for (const char *p = s; *p; p++) plain &= isalnum((unsigned char)*p) || strchr("_./-", *p);
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) plain &= !!strcasecmp(s, typed[i]);
    if (plain) {
        app(l, "%s", s);
        return;
    }
    app(l, "\"");
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            app(l, "\\x%02x", (unsigned char)*s);
        else
            app(l, "%c", *s);
    app(l, "\"");
}

static void put_value(struct line *l, const struct key *k, const char *sec, const char *base)
{
    const char *p = base + k->off;
    char sub[64];
    if (k->type == K_INT) app(l, "%d", *(const int *)p);
    if (k->type == K_I64) app(l, "%lld", (long long)*(const int64_t *)p);
    if (k->type == K_BOOL) app(l, "%s", *(const int *)p ? "true" : "false");
    if (k->type == K_STR) put_str(l, p);
    if (k->type == K_DOUBLE) /* the shortest text that reads back as the same double */
        for (int digits = 6; digits <= 17; digits++) {
            char b[40];
            snprintf(b, sizeof b, "%.*g", digits, *(const double *)p);
            if (strtod(b, NULL) == *(const double *)p || digits == 17) {
                app(l, "%s", b);
                break;
            }
        }
    if (k->type == K_MAP) {
        const char *sep = "{";
        for (const struct key *s = keys; s < KEYS_END; s++)
            if (!strcmp(s->section, child(sub, sec, k))) {
                app(l, "%s%s: ", sep, s->name);
                put_value(l, s, sub, base);
                sep = ", ";
            }
        app(l, "}");
    }
    if (k->type == K_LIST) { /* a list inside an item: flow style */
        app(l, "[");
        for (int i = 0; i < *(const int *)(base + k->n_off); i++) {
            const char *sep = "{";
            app(l, "%s", i ? ", " : "");
            for (const struct key *s = keys; s < KEYS_END; s++)
                if (!strcmp(s->section, child(sub, sec, k))) {
                    app(l, "%s%s: ", sep, s->name);
                    put_value(l, s, sub, p + (size_t)i * k->item);
                    sep = ", ";
                }
            app(l, "}");
        }
        app(l, "]");
    }
    if (k->type != K_INTS && k->type != K_SHAPES && k->type != K_NAMES) return;
    app(l, "[");
    for (int i = 0; i < *(const int *)(base + k->n_off); i++) {
        const struct hs_shape *sh = (const struct hs_shape *)p + i;
        if (i) app(l, ", ");
        if (k->type == K_INTS) app(l, "%d", ((const int *)p)[i]);
        if (k->type == K_SHAPES) app(l, "[%d, %d]", sh->batch, sh->seq);
        if (k->type == K_NAMES) put_str(l, p + (size_t)i * NAME_BYTES);
    }
    app(l, "]");
}

/* Is key k the same in items a and b? */
static bool same(const struct key *k, const char *sec, const char *a, const char *b)
{
    char sub[64];
    if (k->type == K_MAP) {
        for (const struct key *s = keys; s < KEYS_END; s++)
            if (!strcmp(s->section, child(sub, sec, k)) && !same(s, sub, a, b)) return false;
        return true;
    }
    return !memcmp(a + k->off, b + k->off, k->size) &&
           (!k->n_off || !memcmp(a + k->n_off, b + k->n_off, sizeof(int)));
}

/* Writes doc as comment lines but its last, which it returns (to go beside a key). */
static const char *put_doc(FILE *f, int indent, const char *com, const char *doc)
{
    for (int len; doc[len = (int)strcspn(doc, "\n")]; doc += len + 1)
        fprintf(f, "%*s%s# %.*s\n", indent, "", com, len, doc);
    return doc;
}

/* Writes the keys of section sec in base at indent; an item's first key gets the "- ", com
 * comments lines out, keys marked F_OMIT are left out when they equal those of dflt. */
static void print_keys(FILE *f, const char *sec, const char *base, int indent, bool item,
                       const char *com, const char *dflt)
{
    for (const struct key *k = keys; k < KEYS_END; k++) {
        if (strcmp(k->section, sec) || k->type == K_GONE) continue;
        if (dflt && (k->flags & F_OMIT) && same(k, sec, base, dflt)) continue;
        char sub[64];
        const char *lead = item ? "- " : "";
        int pad = indent - (int)strlen(lead);
        item = false;
        child(sub, sec, k);
        if (k->type == K_MAP && !*sec) {
            fputc('\n', f);
            fprintf(f, "%s# %s\n%s%s:\n", com, put_doc(f, 0, com, k->doc), com, k->name);
            print_keys(f, sub, base, 2, false, com, NULL);
        } else if (k->type == K_LIST) {
            int n = *(const int *)(base + k->n_off);
            union any_item d;
            if (!*sec) fputc('\n', f);
            const char *doc = put_doc(f, indent, com, k->doc);
            struct line l = {.n = 0};
            int at = *com ? indent - 2 : 0; /* where an example's "# " goes, as for scalars */
            app(&l, "%*s%s%*s%s%s:%s", at, "", com, pad - at, "", lead, k->name, n ? "" : " []");
            fprintf(f, "%-40s # %s\n", l.s, doc);
            for (int i = 0; i < n; i++) {
                item_init(k, sub, (char *)&d, i);
                print_keys(f, sub, base + k->off + (size_t)i * k->item, indent + 4, true, com,
                           (const char *)&d);
            }
            if (n) continue;
            fprintf(f, "%*s%s# for example, every key with its default:\n", indent + 2, "", com);
            item_init(k, sub, (char *)&d, 0);
            print_keys(f, sub, (const char *)&d, indent + 4, true, "# ", NULL);
        } else {
            struct line l = {.n = 0};
            int at = *com ? indent - 2 : 0; /* where an example's "# " goes */
            app(&l, "%*s%s%*s%s%s: ", at, "", com, pad - at, "", lead, k->name);
            put_value(&l, k, sec, base);
            fprintf(f, "%-40s # %s\n", l.s, k->doc);
        }
    }
}

void hs_config_print(const struct hs_config *c, FILE *f)
{
    fprintf(f, "# hetserve configuration. Every key is optional: what a file leaves out keeps the\n"
               "# default shown here; a list given (engines, models, buckets) replaces the "
               "default list.\n");
    print_keys(f, "", (const char *)c, 0, false, "", NULL);
}
