/* hetserve — what the CUDA engine offers beyond engine.h.
 *
 * The engine itself is reached through engine.h (hs_engine_create("cuda", ...)). This header
 * adds the counters only a GPU engine has: CUDA-event times of copy-in, compute and copy-out
 * (the wrapper's wall-clock stats cannot split them, since run_stage only queues work), and
 * the CUDA graphs the engine captured. The counters are process-wide (summed over every CUDA
 * engine and workspace) and thread-safe to read. Built only with HS_HAVE_CUDA.
 *
 * Execution model, for callers that time things: run_stage validates and queues a stage; the
 * queued run of stages is launched at the next act_read, act_write, sync or batch_begin as one
 * CUDA graph per (stage sequence, batch, bucket length), captured the first time that shape is
 * seen and replayed after. A batch of one short query is therefore one graph launch.
 * HS_CUDA_GRAPHS=0 in the environment launches kernels directly instead.
 */
#ifndef HS_ENGINE_CUDA_CUDA_H
#define HS_ENGINE_CUDA_CUDA_H

#include <stdint.h>

struct hs_cuda_counters {
    int64_t batches;          /* act_read calls that ended a timed span */
    double copy_in_ms;        /* batch_begin + act_write host-to-device copies (CUDA events) */
    double compute_ms;        /* from the end of copy-in to the start of copy-out (CUDA events) */
    double copy_out_ms;       /* act_read device-to-host copies (CUDA events) */
    int64_t graphs_captured;  /* graphs captured and instantiated */
    int64_t graph_launches;   /* cudaGraphLaunch calls */
    int64_t direct_runs;      /* stage runs launched without a graph (graphs off or cache full) */
    int64_t graph_capture_ns; /* host time spent capturing + instantiating */
    int64_t graph_mem_bytes; /* device memory taken by instantiated graphs (cudaMemGetInfo delta) */
    int64_t weight_bytes;    /* device memory of prepared stages */
    int64_t ws_bytes;        /* device memory of workspaces */
};

/* Snapshot of the process-wide counters. */
void hs_engine_cuda_counters(struct hs_cuda_counters *out);

#endif
