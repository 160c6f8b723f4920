/* hetserve — a batch runner: what runs a formed batch, as the scheduler sees an engine.
 *
 * The scheduler forms batches (sched/sched.h) and hands each one to its lane's runner; what is
 * behind a runner (an executor over local engines, in the server; a remote worker pool,
 * engine/remote/remote.h; a test's own) knows batches, never requests or queues. A runner takes
 * up to HS_RUNNER_MAX_SLOTS batches at once, one per slot, and reports where a batch's time went
 * (struct hs_batch_timing).
 */
#ifndef HS_ENGINE_RUNNER_H
#define HS_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/stage.h"

#define HS_RUNNER_MAX_SLOTS 16 /* batches one runner runs at once */

#define HS_BATCH_MAX_BOUNDARIES 8
#define HS_BATCH_MAX_HANDOVERS  32

/* Time spent inside one batch run, nanoseconds. */
struct hs_batch_timing {
    int64_t copy_in_ns;
    int64_t compute_ns;
    int64_t copy_out_ns;
    int64_t hop_ns; /* remote engines: network round trip (counted inside copy_in_ns); 0 = none */
    /* a split placement's engine boundaries (part of compute_ns): the activation copies across
     * each, and the syncs of the giving engine before them; 0 boundaries for one engine */
    int n_boundaries;
    int64_t boundary_copy_ns[HS_BATCH_MAX_BOUNDARIES];
    int64_t boundary_sync_ns[HS_BATCH_MAX_BOUNDARIES];
    /* a pipelined split: time waiting for an engine another batch held (part of compute_ns) */
    int64_t wait_ns;
    /* each hand-over across a boundary, in order (the first HS_BATCH_MAX_HANDOVERS): its
     * boundary, when the giving engine's closing sync started, when the copy started and ended,
     * and the wait for the taking engine within the copy */
    int n_handovers;
    struct hs_batch_handover {
        int boundary;
        int64_t sync_start_ns, copy_start_ns, copy_end_ns;
        int64_t wait_start_ns, wait_ns;
    } handovers[HS_BATCH_MAX_HANDOVERS];
    /* a lane that preempts (sched.h, hs_lane_opts.preempt; part of compute_ns): the time this
     * batch was paused at stage boundaries while the preempting slot's batch ran, and (a batch of
     * the preempting slot) its wait for the other slots' stages in flight */
    int64_t paused_ns;
    int64_t yield_wait_ns;
};

/* What runs a formed batch: out receives [b->n_seqs, dim] floats. Called from the caller's
 * batcher threads, one per slot: calls with different `slot` (0 .. slots-1, slots at most
 * HS_RUNNER_MAX_SLOTS) may run concurrently, never two with the same slot. A lane that preempts
 * has one more slot, the last (index slots), whose batches the runner runs ahead of the others'
 * (model/executor.h, hs_executor_opts.preempt). The executor-facing
 * runner lives in the server, the remote pool's in engine/remote; tests pass their own. */
struct hs_runner {
    hs_status (*run)(void *ctx, int slot, const struct hs_batch *b, float *out,
                     struct hs_batch_timing *t, struct hs_error *err);
    void *ctx;
    /* Optional, a pipelined split: the runner's entry (its first engine), which a slot must hold
     * before it forms a batch, so that a batch forms when it can start rather than early, small,
     * to wait for the engine. With threads: gate blocks until the slot holds the entry (first
     * come, first served), the slot's next run releases it when its first engine's part is
     * done, and ungate gives it back unused (nothing was due after all). In stepped mode:
     * gate_open says whether a batch could start now. */
    void (*gate)(void *ctx, int slot);
    void (*ungate)(void *ctx, int slot);
    bool (*gate_open)(void *ctx);
};

#endif
