/* hetserve — the engine interface.
 *
 * An engine is one device instance (cpu0 pinned to cores 0-1, cuda0, ...). It declares what it
 * can run, keeps stage weights resident in its own memory, and runs stages on batches inside
 * workspaces. The contract, in call order:
 *
 *   hs_engine_stage_prepare(e, stage, dtype)  once per stage at model load: weights become
 *                                             resident on the engine (converted, packed);
 *   hs_engine_ws_create(e, spec)              once per concurrent batch slot at load: every
 *                                             activation buffer for the worst-case batch;
 *   per batch, on one workspace (one thread at a time per workspace):
 *     hs_engine_batch_begin(e, ws, batch)     copy-in of token ids, lengths;
 *     hs_engine_act_write(e, ws, buf, src)    (only at an engine boundary) copy-in of hidden;
 *     hs_engine_run_stage(e, ws, stage, prep) for each stage placed on this engine;
 *     hs_engine_act_read(e, ws, buf, dst)     copy-out of hidden or pooled (synchronizes).
 *
 * Different workspaces may be used from different threads at once; stage preparations are
 * read-only after prepare and shared by all workspaces. Nothing on the per-batch path
 * allocates memory.
 *
 * Implementations fill a `static const struct hs_engine_iface` and are reached only through
 * the hs_engine_* wrappers below, which check arguments, fill defaults for optional methods,
 * keep the per-engine statistics, and are the place where tests inject faults.
 */
#ifndef HS_ENGINE_ENGINE_H
#define HS_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/stage.h"

#define HS_ENGINE_API_VERSION 1
#define HS_ENGINE_MAX_CORES   256

/* What an engine is and can do; printed by `hetserve devices`. */
struct hs_engine_caps {
    char kind[16]; /* "cpu", "cuda", "opencl" */
    /* dtypes below is this device's claim (hs_engine_device_caps), narrower than the kind's
     * (struct hs_engine_kind.dtypes: what some device of the kind may compute in) */
    char device[128];  /* "Intel(R) Xeon(R) ...", "NVIDIA H200" */
    char isa[128];     /* "avx512f avx512bw avx2 fma" / "sm_90" */
    int threads;       /* compute threads (CPU) or SMs (GPU) */
    int64_t mem_bytes; /* memory the engine can use */
    uint32_t dtypes;   /* bit (1u << HS_DTYPE_x) for each weight dtype it computes in */
    uint32_t stages;   /* bit (1u << HS_STAGE_x) for each stage kind it runs */
    int batch_max;     /* 0 = no limit of its own */
    int seq_max;       /* 0 = no limit of its own */
    char gemm[64];     /* GEMM library, e.g. "oneDNN 2.6.3" */
    uint32_t features; /* HS_ENGINE_FEAT_* bits */
};

/* caps.features: the block features (stage.h HS_FEAT_*, the table HS_STAGE_FEATURES) the
 * engine computes, plus HS_ENGINE_FEAT_SHAPE_COMPILE. A stage that needs a block feature the
 * engine lacks (hs_stage_features) is refused by hs_engine_stage_prepare (HS_STATUS_UNSUPPORTED,
 * the missing features named), never run wrongly. */
enum hs_engine_feature {
    /* not a model feature: the engine compiles per input shape on first use (OpenVINO), so the
     * server warms each of a lane's bucket shapes at load rather than on the first request */
    HS_ENGINE_FEAT_SHAPE_COMPILE = 1u << 1,
    /* runs a whole ONNX graph as one stage (graph_load / graph_run below: a pipeline's model
     * stage, e.g. an OCR detector); engines without it refuse such a stage at load, by this
     * capability (hs_engine_graph_load) */
    HS_ENGINE_FEAT_GRAPH_ONNX = 1u << 30, /* above the block features of stage.h */
};

/* A tensor in or out of a graph stage: f32, row-major, rank <= 8. For an output, data has room
 * for cap floats and the engine writes rank and shape. */
struct hs_graph_tensor {
    float *data;
    int rank;
    int64_t shape[8];
    size_t cap;
};

/* Cumulative counters, one schema for every engine. */
struct hs_engine_stats {
    int64_t batches;
    int64_t sequences;
    int64_t tokens;
    int64_t errors;
    int64_t busy_ns;     /* time inside batch_begin .. act_read */
    int64_t copy_in_ns;  /* batch_begin + act_write */
    int64_t compute_ns;  /* run_stage */
    int64_t copy_out_ns; /* act_read */
};

/* Worst case a workspace must hold; activation buffers are sized from it once. */
struct hs_ws_spec {
    int batch_max;  /* sequences */
    int tokens_max; /* sum of lengths */
    int seq_max;    /* longest sequence */
    const struct hs_encoder_dims *dims;
    /* compute dtypes the stages run on this workspace will use (1u << HS_DTYPE_x); 0 = not
     * known: the engine prepares for every dtype it computes in */
    uint32_t dtypes;
};

struct hs_engine_iface {
    int api_version; /* HS_ENGINE_API_VERSION */
    const char *kind;
    void (*destroy)(void *ctx);
    void (*caps)(void *ctx, struct hs_engine_caps *out);
    /* (optional) default: any stage kind in caps.stages with any dtype in caps.dtypes */
    bool (*supports)(void *ctx, enum hs_stage_kind kind, enum hs_dtype dtype, int batch, int seq);
    hs_status (*stage_prepare)(void *ctx, const struct hs_stage *st, enum hs_dtype dtype,
                               void **prep, struct hs_error *err);
    void (*stage_release)(void *ctx, void *prep);
    hs_status (*ws_create)(void *ctx, const struct hs_ws_spec *spec, void **ws,
                           struct hs_error *err);
    void (*ws_destroy)(void *ctx, void *ws);
    hs_status (*batch_begin)(void *ctx, void *ws, const struct hs_batch *b, struct hs_error *err);
    hs_status (*act_write)(void *ctx, void *ws, enum hs_act_buf buf, const float *src,
                           struct hs_error *err);
    hs_status (*run_stage)(void *ctx, void *ws, const struct hs_stage *st, void *prep,
                           struct hs_error *err);
    hs_status (*act_read)(void *ctx, void *ws, enum hs_act_buf buf, float *dst,
                          struct hs_error *err);
    /* (optional) waits for queued work on ws; default: no-op (synchronous engines) */
    hs_status (*sync)(void *ctx, void *ws, struct hs_error *err);
    /* (optional) a key under which this engine's stage preparations are interchangeable with
     * those of other engines of the same kind: engines with equal keys share one preparation
     * per (stage, dtype) — weights are resident once however many lanes use them. NULL: never
     * shared. A shared preparation must be releasable through any engine with the same key. */
    uint64_t (*prep_key)(void *ctx);
    /* ---- (optional, with HS_ENGINE_FEAT_GRAPH_ONNX) whole graphs as stages ----
     * graph_load reads and compiles the ONNX file at path once (at load: its weights become
     * resident); graph_run runs it on n_in inputs into n_out outputs (the graph's inputs and
     * outputs by index), from any number of threads at once; graph_release frees it. */
    hs_status (*graph_load)(void *ctx, const char *path, void **graph, struct hs_error *err);
    void (*graph_release)(void *ctx, void *graph);
    hs_status (*graph_run)(void *ctx, void *graph, const struct hs_graph_tensor *in, int n_in,
                           struct hs_graph_tensor *out, int n_out, struct hs_error *err);
};

/* Faults a test (or an operator, through the server's admin endpoint) can inject through the
 * wrappers. */
struct hs_engine_fault {
    int fail_next;      /* the next N run_stage calls fail with HS_STATUS_ENGINE */
    double slow_factor; /* >1: run_stage takes this many times longer (busy-waits the extra) */
    int hang_ms;        /* >0: every run_stage first blocks this long, as a hung device would;
                           replacing or clearing the fault (hs_engine_set_fault) ends the wait */
};

typedef struct hs_engine *hs_engine_t;

/* Engine options common to every kind. */
struct hs_engine_opts {
    const char *name; /* instance name, e.g. "cpu0"; NULL = kind + index */
    int threads;      /* CPU: compute threads (0 = all cores in the core set) */
    int n_cores;      /* CPU: size of cores[]; 0 = no pinning */
    int cores[HS_ENGINE_MAX_CORES];
    int device; /* device ordinal of the kind (GPU number); CPU: 0 */
    /* CPU: batches of at most this many tokens use the packed small-M GEMM (AVX-512 machines);
     * 0 = by the CPU's ISA class, where measured the packed kernel beats oneDNN's sgemm, which
     * packs the weights on every call (engine/cpu/gemm_small.c: 64 with AMX, 256 on other
     * AVX-512 machines), -1 = never. The environment's HS_CPU_SMALL_GEMM_ROWS overrides. */
    int cpu_small_gemm_rows;
    /* CPU (optional): a calibration observer, called before every linear layer of an attention
     * or FFN stage that computes in f32, with the layer's input rows: linear 0 is the stage's
     * first layer (q/k/v, FFN in), 1 its second (attention out, FFN out). May be called from
     * several threads at once. NULL in service. */
    void (*cpu_observe)(void *ctx, const struct hs_stage *st, int linear, const float *x, int rows,
                        int k);
    void *cpu_observe_ctx;
    /* (optional) device by name, for kinds whose runtime names its devices (OpenVINO: "CPU",
     * "GPU", "NPU", "AUTO"); NULL or "" = by `device` ordinal. A plugin built before it never
     * reads it. */
    const char *device_name;
    /* CPU (optional): cores of other pinned CPU engines this one may borrow, stage by stage,
     * while their owners are idle (engine/cpu/lease.h); 0 = none. Added last: a plugin built
     * before it never reads it. */
    int n_borrow_cores;
    int borrow_cores[HS_ENGINE_MAX_CORES];
    /* CPU (optional): the borrowed cores' owners yield them to this engine whenever it runs,
     * at their next round boundary (lease.h), instead of lending them only while idle: a
     * latency lane over a batch lane's cores. Added last (plugin ABI 6). */
    bool borrow_preempt;
};

/* ---- The registry of engine kinds ----
 * Every kind this source tree knows has one entry, whether or not this build has it: a config
 * naming a kind that is known but not built (cuda on a machine without nvcc) still passes
 * `config --check`, and fails at load with a clear message. A kind's entry lives in its own
 * folder (engine/<kind>/kind.c, always compiled) and is listed once in engine/registry.c; the
 * CLI, the config and the tests iterate the registry, never a chain of names. */
/* How an engine of a kind is split into compute slices (engines[].slices). */
enum hs_slice_by {
    HS_SLICE_NONE,    /* it is not */
    HS_SLICE_CORES,   /* disjoint shares of its cores and threads (cpu) */
    HS_SLICE_STREAMS, /* engines on the same device, each with its own streams, sharing the
                         device's prepared weights through prep_key (cuda) */
};

struct hs_engine_kind {
    const char *name;    /* "cpu", "cuda": engines[].kind in the config */
    const char *summary; /* one line for `hetserve devices` */
    /* compute dtypes a lane of this kind may ask for on some device (1u << HS_DTYPE_x): what a
     * config is checked against where no device is present; a device's own claim is its
     * caps.dtypes (hs_engine_device_caps), which load, verify and the conformance suite use */
    uint32_t dtypes;
    enum hs_dtype native; /* a lane's dtype when neither engine nor model names one */
    /* Devices present at run time (0: none). NULL when the kind is not built in. */
    int (*device_count)(void);
    /* Creates an engine on opts->device. NULL when the kind is not built in. */
    hs_status (*create)(const struct hs_engine_opts *opts, hs_engine_t *out, struct hs_error *err);
    /* ---- memory and speed questions the memory plan and the profiler ask before (or without)
     * creating an engine; pure arithmetic over dimensions, so they need no device. Reached
     * through the hs_engine_kind_* wrappers below, which fill the defaults. ---- */
    /* (optional) Bytes an engine of this kind adds to hold one stage of kind `stage` prepared
     * in dtype (converted, stacked, packed weights), beyond the model's mapped file. Default:
     * the stage's parameters in dtype. */
    int64_t (*stage_bytes)(enum hs_stage_kind stage, const struct hs_encoder_dims *d,
                           enum hs_dtype dtype);
    /* (optional) Bytes of one workspace made from spec on an engine with `threads` compute
     * threads: *activations (buffers that grow with the batch's tokens and sequences) and
     * *scratch (per-thread and reduced-precision staging). Default: hidden, q/k/v, the wider
     * intermediate and pooled buffers in f32, no scratch. */
    void (*ws_bytes)(const struct hs_ws_spec *spec, int threads, int64_t *activations,
                     int64_t *scratch);
    /* (optional) Memory of device `device` free for engines now, bytes (cpu: MemAvailable);
     * 0 = unknown. NULL when the kind is not built in. */
    int64_t (*mem_available)(int device);
    /* (optional) The device's practical f32 GEMM rate, GFLOP/s, measured for about `seconds`
     * with `threads` threads on a shape the encoders use; *what names the measurement. 0 = not
     * measured. */
    double (*gemm_gflops)(int device, int threads, double seconds, const char **what);
    /* true: its batches run on another hetserve (engine/remote/remote.h): its lanes get a remote
     * runner, no executor, and a model only on such engines is loaded without its weights */
    bool remote;
    enum hs_slice_by slice_by; /* engines[].slices: how, if at all */
    /* true: its engines can borrow idle cores of other pinned engines of the kind, stage by
     * stage (engines[].borrow_cores; engine/cpu/lease.h) */
    bool lends_cores;
};

/* Number of registered kinds; hs_engine_kind_at(i) for i in [0, n) returns them in order. */
int hs_engine_kind_count(void);
const struct hs_engine_kind *hs_engine_kind_at(int i);
/* The kind named name, NULL when no such kind is registered. */
const struct hs_engine_kind *hs_engine_kind_find(const char *name);
/* Writes the registered kinds' names as "cpu, cuda" into buf (for error messages). */
void hs_engine_kind_names(char *buf, size_t n);
/* True when this binary has the kind's implementation. */
bool hs_engine_kind_built(const struct hs_engine_kind *k);
/* Devices of the kind present now (0 when not built or none). */
int hs_engine_kind_devices(const struct hs_engine_kind *k);
/* What device `device` (or, when device_name is non-empty, the device so named) of kind k
 * computes: the caps of an engine made on it, which is then destroyed. The one source of
 * per-device claims (a kind's `dtypes` says what some device of the kind may compute in, for
 * configs checked where none is present): `hetserve devices`, `verify`, the load-time lane check
 * and the conformance suite all read these. HS_STATUS_UNSUPPORTED when the kind is not built or
 * the device is absent, with the reason. */
hs_status hs_engine_device_caps(const struct hs_engine_kind *k, int device, const char *device_name,
                                struct hs_engine_caps *out, struct hs_error *err);
/* Writes dtypes (1u << HS_DTYPE_x bits) as "f32, int8" into buf. */
void hs_engine_dtype_names(uint32_t dtypes, char *buf, size_t n);

/* Wrappers over the kind's memory and speed questions (see struct hs_engine_kind), with their
 * defaults. hs_engine_kind_mem_available is 0 when the kind is not built or has no such device. */
int64_t hs_engine_kind_stage_bytes(const struct hs_engine_kind *k, enum hs_stage_kind stage,
                                   const struct hs_encoder_dims *d, enum hs_dtype dtype);
void hs_engine_kind_ws_bytes(const struct hs_engine_kind *k, const struct hs_ws_spec *spec,
                             int threads, int64_t *activations, int64_t *scratch);
int64_t hs_engine_kind_mem_available(const struct hs_engine_kind *k, int device);
double hs_engine_kind_gemm_gflops(const struct hs_engine_kind *k, int device, int threads,
                                  double seconds, const char **what);

/* Creates an engine of `kind` (a registry name) on opts->device. HS_STATUS_UNSUPPORTED when
 * that kind was not built in or its device is not present; HS_STATUS_INVALID_ARGUMENT for an
 * unknown kind. The engine is freed with hs_engine_destroy. */
hs_status hs_engine_create(const char *kind, const struct hs_engine_opts *opts, hs_engine_t *out,
                           struct hs_error *err);
/* Wraps an implementation (used by the create functions of each kind). Takes ownership of ctx. */
hs_status hs__engine_wrap(const struct hs_engine_iface *iface, void *ctx, const char *name,
                          hs_engine_t *out, struct hs_error *err);
void hs_engine_destroy(hs_engine_t e);

const char *hs_engine_name(hs_engine_t e);
const char *hs_engine_kind(hs_engine_t e);
void hs_engine_caps(hs_engine_t e, struct hs_engine_caps *out);
bool hs_engine_supports(hs_engine_t e, enum hs_stage_kind kind, enum hs_dtype dtype, int batch,
                        int seq);
/* Prepares st for e in dtype. Engines whose kind shares preparations (prep_key) get the same
 * preparation for the same (stage, dtype), reference-counted: each prepare is matched by one
 * release. */
hs_status hs_engine_stage_prepare(hs_engine_t e, const struct hs_stage *st, enum hs_dtype dtype,
                                  void **prep, struct hs_error *err);
void hs_engine_stage_release(hs_engine_t e, void *prep);
/* Preparations alive now, and how many prepare calls were served by sharing one (tests). */
void hs_engine_prep_counts(int *alive, int64_t *shared_hits);
hs_status hs_engine_ws_create(hs_engine_t e, const struct hs_ws_spec *spec, void **ws,
                              struct hs_error *err);
void hs_engine_ws_destroy(hs_engine_t e, void *ws);
hs_status hs_engine_batch_begin(hs_engine_t e, void *ws, const struct hs_batch *b,
                                struct hs_error *err);
hs_status hs_engine_act_write(hs_engine_t e, void *ws, enum hs_act_buf buf, const float *src,
                              struct hs_error *err);
hs_status hs_engine_run_stage(hs_engine_t e, void *ws, const struct hs_stage *st, void *prep,
                              struct hs_error *err);
hs_status hs_engine_act_read(hs_engine_t e, void *ws, enum hs_act_buf buf, float *dst,
                             struct hs_error *err);
hs_status hs_engine_sync(hs_engine_t e, void *ws, struct hs_error *err);
/* Whole-graph stages (HS_ENGINE_FEAT_GRAPH_ONNX). hs_engine_graph_load refuses with
 * HS_STATUS_UNSUPPORTED, naming the engine and the capability, when the engine lacks it (the
 * CPU engine); hs_engine_graph_run counts a batch per call (its inputs' first dimension as the
 * sequences) and honours the engine's injected faults as run_stage does. */
hs_status hs_engine_graph_load(hs_engine_t e, const char *path, void **graph, struct hs_error *err);
void hs_engine_graph_release(hs_engine_t e, void *graph);
hs_status hs_engine_graph_run(hs_engine_t e, void *graph, const struct hs_graph_tensor *in,
                              int n_in, struct hs_graph_tensor *out, int n_out,
                              struct hs_error *err);
/* Thread-safe snapshot of the counters. */
void hs_engine_stats(hs_engine_t e, struct hs_engine_stats *out);
/* Replaces the injected faults (thread-safe; NULL clears them). Wakes run_stage calls blocked
 * by a hang, so clearing the faults is how shutdown interrupts a hung engine. */
void hs_engine_set_fault(hs_engine_t e, const struct hs_engine_fault *fault);
/* Snapshot of the injected faults (thread-safe). */
void hs_engine_get_fault(hs_engine_t e, struct hs_engine_fault *out);

/* Per-kind constructors (engine/<kind>/), also reached through the registry. */
hs_status hs_engine_cpu_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                               struct hs_error *err);
/* The CPU kind's memory and speed answers (struct hs_engine_kind), next to the code whose
 * allocations they mirror. */
int64_t hs_engine_cpu_stage_bytes(enum hs_stage_kind stage, const struct hs_encoder_dims *d,
                                  enum hs_dtype dtype);
void hs_engine_cpu_ws_bytes(const struct hs_ws_spec *spec, int threads, int64_t *activations,
                            int64_t *scratch);
int64_t hs_engine_cpu_mem_available(int device);
double hs_engine_cpu_gemm_gflops(int device, int threads, double seconds, const char **what);
/* A core that CPU engines lend (engines[].borrow_cores): what its loans cost. */
struct hs_cpu_lease_stats {
    int64_t lent_stages; /* stages a borrower ran on the core */
    int64_t lent_ns;     /* time it was lent, summed */
    int64_t waits;       /* stages of its owners that waited for it to come back */
    int64_t wait_ns;     /* their waits, summed */
    int64_t wait_max_ns; /* the longest */
    /* a preempting borrower's (engines[].borrow_preempt): */
    int64_t yields;       /* rounds of its owners that waited while it ran */
    int64_t yield_ns;     /* their waits, summed */
    int64_t yield_max_ns; /* the longest */
    int64_t claims;       /* its stages that wanted the core */
    int64_t claims_lent;  /* ... and got it */
};
/* The counters of `core`; false (out untouched) when no engine borrows it. Thread-safe. */
bool hs_engine_cpu_lease_stats(int core, struct hs_cpu_lease_stats *out);
#ifdef HS_HAVE_REMOTE
hs_status hs_engine_remote_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                                  struct hs_error *err);
#endif
#ifdef HS_HAVE_CUDA
hs_status hs_engine_cuda_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                                struct hs_error *err);
int hs_engine_cuda_device_count(void);
/* Free memory of GPU `device`, bytes; 0 when it is not present. */
int64_t hs_engine_cuda_mem_available(int device);
#endif

#endif
