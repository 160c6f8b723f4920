/* hetserve — the executor: runs a model's stages on engines, per placement plan.
 *
 * A placement plan names the engine of every stage (whole-model: one engine for all; layer
 * split: the first N layers on A; module split: attention on A, FFN on B). At each change of
 * engine the executor copies the activation through host memory (act_read on the old engine,
 * act_write on the new) and times that copy separately.
 *
 * hs_executor_create prepares every stage on its engine (weights become resident) and creates
 * `slots` workspaces on each engine used, sized for the worst case in opts; after that, running
 * a batch allocates nothing. Each slot is used by one thread at a time; different slots may run
 * concurrently. hs_executor_run writes one embedding (hs_pooled_dim floats: dims.hidden, or
 * dims.vocab for SPLADE pooling) per sequence, pooled and (when the model says so)
 * L2-normalized.
 */
#ifndef HS_MODEL_EXECUTOR_H
#define HS_MODEL_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

#define HS_PLAN_MAX_STAGES 128

struct hs_placement {
    int n_stages;                           /* must equal the model's n_stages */
    hs_engine_t engine[HS_PLAN_MAX_STAGES]; /* engine of each stage */
    /* Per-stage precision fallback: a stage marked here computes in f32 whatever the lane's
     * dtype (the sensitive layers of an int8 lane, chosen by `hetserve quantize`). */
    bool keep_f32[HS_PLAN_MAX_STAGES];
};

/* Fills a plan that runs every stage on e. */
void hs_placement_single(const struct hs_model *m, hs_engine_t e, struct hs_placement *out);
/* Marks the stages named in a comma-separated list ("layer0.ffn,layer5.attn") to compute in
 * f32. HS_STATUS_INVALID_INPUT naming the first unknown stage. */
hs_status hs_placement_keep_f32(const struct hs_model *m, const char *stages,
                                struct hs_placement *plan, struct hs_error *err);
/* Layer split: embed and layers [0, n_first) on a, the rest (and pool/normalize) on b. */
void hs_placement_layers(const struct hs_model *m, hs_engine_t a, int n_first, hs_engine_t b,
                         struct hs_placement *out);
/* Layer ranges: range r runs layers [from[r], to[r]) on engine[r]; embed goes with the range that
 * holds layer 0, pool and normalize with the one that holds the last layer. The ranges must
 * cover the model's layers exactly once: HS_STATUS_INVALID_INPUT naming the first gap, overlap
 * or layer the model does not have. */
hs_status hs_placement_ranges(const struct hs_model *m, int n, const hs_engine_t *engine,
                              const int *from, const int *to, struct hs_placement *out,
                              struct hs_error *err);
/* Module split: embed and every attention stage on attn, every FFN stage (and pool, normalize,
 * which follow the last FFN) on ffn. */
void hs_placement_modules(const struct hs_model *m, hs_engine_t attn, hs_engine_t ffn,
                          struct hs_placement *out);

struct hs_executor_opts {
    int batch_max;       /* sequences per batch (default 32) */
    int tokens_max;      /* tokens per batch (default batch_max * seq_max) */
    int seq_max;         /* longest sequence (default the model's max_seq_len) */
    int slots;           /* concurrent batches (default 1) */
    enum hs_dtype dtype; /* compute dtype requested from engines (default F32) */
    /* false (default): when the model has a quantization plan for dtype (model/quant.h), its
     * stages marked keep_f32 compute in f32; true: only the placement's keep_f32 counts */
    bool no_quant_plan;
    /* A split placement's engines run one batch at a time each: every run of stages on an engine
     * (from its batch_begin to the sync that ends it) holds that engine, first come first
     * served, so that with slots >= 2 batch k's stages on the second engine overlap batch k+1's
     * on the first (a pipeline) instead of two batches sharing one engine's cores. The copy out
     * of the giving engine holds neither. No effect on a single engine. */
    bool pipeline;
    /* Slot slots - 1 preempts (the scheduler's hs_lane_opts.preempt): while a batch runs on it,
     * the other slots' batches wait before their next stage (an engine that queues work
     * asynchronously is synced first, so that the stage has really ended); the preempting batch
     * waits only for the stages in flight, then runs all of its own. Nothing a paused batch
     * computes changes: every slot has its own workspaces. Needs slots >= 2; refused with a
     * pipelined split (a paused batch would hold an engine the preempting one needs). */
    bool preempt;
};

#define HS_EXEC_MAX_BOUNDARIES 8
#define HS_EXEC_MAX_HANDOVERS  32

/* Timings of one batch, nanoseconds. */
struct hs_exec_timing {
    int64_t copy_in_ns;  /* batch_begin on the first engine */
    int64_t compute_ns;  /* all run_stage calls, and the syncs that end each engine's run */
    int64_t transfer_ns; /* activation copies at engine boundaries */
    int64_t copy_out_ns; /* final act_read */
    int64_t wait_ns;     /* pipeline: waiting for an engine another slot held (in no other field) */
    /* opts.preempt: the time this batch was paused before its stages while the preempting slot's
     * batch ran, and (the preempting slot's batch) its wait for the other slots' stages in
     * flight; in no other field */
    int64_t paused_ns;
    int64_t yield_wait_ns;
    int n_transfers;
    /* Per boundary (hs_executor_boundary: one per ordered pair of engines that hand over an
     * activation, however often): the copies' time (part of transfer_ns) and the syncs that
     * ended the giving engine's runs before them (part of compute_ns). */
    int n_boundaries;
    int64_t boundary_copy_ns[HS_EXEC_MAX_BOUNDARIES];
    int64_t boundary_sync_ns[HS_EXEC_MAX_BOUNDARIES];
    int boundary_count[HS_EXEC_MAX_BOUNDARIES]; /* hand-overs this batch */
    /* each hand-over in order (the first HS_EXEC_MAX_HANDOVERS): its boundary, when the giving
     * engine's closing sync started, when the copy started and ended (hs_now_ns), and the wait
     * for the taking engine within it */
    int n_handovers;
    struct hs_exec_handover {
        int boundary;
        int64_t sync_start_ns, copy_start_ns, copy_end_ns;
        int64_t wait_start_ns, wait_ns; /* pipeline: inside the copy, the wait for the taker */
    } handovers[HS_EXEC_MAX_HANDOVERS];
};

struct hs_executor;

/* The dtype stage i computes in under plan and o: f32 where the placement's keep_f32 or (unless
 * o->no_quant_plan) the model's quantization plan for o->dtype keeps it, else o->dtype. The
 * executor prepares every stage so; the profiler asks the same. */
enum hs_dtype hs_executor_stage_dtype(const struct hs_model *m, const struct hs_placement *plan,
                                      const struct hs_executor_opts *o, int i);

hs_status hs_executor_create(const struct hs_model *m, const struct hs_placement *plan,
                             const struct hs_executor_opts *opts, struct hs_executor **out,
                             struct hs_error *err);
void hs_executor_free(struct hs_executor *x);
const struct hs_executor_opts *hs_executor_opts(const struct hs_executor *x);
const struct hs_model *hs_executor_model(const struct hs_executor *x);
/* Boundaries of the plan (0 for a single engine), and boundary i's giving and taking engines.
 * Fixed at create; thread-safe. */
int hs_executor_n_boundaries(const struct hs_executor *x);
void hs_executor_boundary(const struct hs_executor *x, int i, hs_engine_t *from, hs_engine_t *to);

/* A pipeline's entry (opts.pipeline with more than one engine): blocks until slot holds the
 * plan's first engine (first come, first served); the slot's next hs_executor_run starts there
 * without taking it again, so a scheduler can form the batch once it can start. ungate gives
 * an entry taken but not used back. No effect without a pipeline. */
bool hs_executor_pipelined(const struct hs_executor *x);
/* opts.preempt, now (for tests and diagnostics): whether the preempting slot's batch waits for
 * the other slots' stages in flight, and how many of their batches are paused at a stage
 * boundary. All zero without preempt. Thread-safe. */
struct hs_exec_preempt_state {
    bool waiting;
    int paused;
};
void hs_executor_preempt_state(struct hs_executor *x, struct hs_exec_preempt_state *out);
void hs_executor_gate(struct hs_executor *x, int slot);
void hs_executor_ungate(struct hs_executor *x, int slot);

/* Runs one batch on slot `slot` (0 <= slot < opts.slots). out: [b->n_seqs, hs_pooled_dim] fp32.
 * HS_STATUS_INVALID_ARGUMENT when the batch exceeds the workspace sizes; engine failures
 * return their status with the engine's message. timing may be NULL. */
hs_status hs_executor_run(struct hs_executor *x, int slot, const struct hs_batch *b, float *out,
                          struct hs_exec_timing *timing, struct hs_error *err);

/* Convenience for the CLI, verify and benchmarks (not the serving path): tokenizes n texts
 * (truncating to the model's max_seq_len), runs them in as many batches as the workspace
 * limits need on slot 0, and writes [n, hs_pooled_dim] embeddings to out. tokens (may be NULL)
 * receives each text's token count. Allocates per call. */
hs_status hs_executor_embed_texts(struct hs_executor *x, const char *const *texts, int n,
                                  float *out, int *tokens, struct hs_error *err);

#endif
