/* hetserve — requests as the scheduler sees them.
 *
 * A request is one client call: one or more sequences of token ids (an array of 32 texts is 32
 * sequences), a priority class, an absolute deadline, and a timestamp for every stage of its
 * life. The scheduler splits a request into its sequences, batches each one on its own, writes
 * one output row per sequence into `out`, and re-joins them: the request is answered (its `done`
 * callback runs, exactly once) when the last sequence has its row, or as soon as it fails
 * (deadline passed while queued, shed under overload, engine failure, shutdown).
 *
 * Memory: the owner (the HTTP layer) allocates the request, its sequences, token ids and output
 * rows — typically in one per-request arena — and keeps them alive until the reference count
 * drops to zero, at which point `release` runs. hs_request_init sets the count to 1 (the owner's
 * reference); the scheduler holds one more while any of the request's sequences is queued or in a
 * batch, so a response may be sent (and the owner's reference dropped) while a batch still writes
 * into `out` without the memory going away under it.
 */
#ifndef HS_SCHED_REQUEST_H
#define HS_SCHED_REQUEST_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/status.h"

enum hs_priority {
    HS_PRIORITY_INTERACTIVE, /* served first, shed last */
    HS_PRIORITY_BATCH,       /* bulk work: shed first under pressure */
    HS_PRIORITY_COUNT
};

/* Per-stage timestamps: ts[X] is the monotonic time (hs_now_ns) at which stage X ended. */
#define HS_TS_TABLE(X)                                                                             \
    X(RECEIVED, "received")                                                                        \
    X(PARSED, "parse")                                                                             \
    X(TOKENIZED, "tokenize")                                                                       \
    X(ROUTED, "route")                                                                             \
    X(ENQUEUED, "enqueue")                                                                         \
    X(BATCHED, "queue")                                                                            \
    X(HOP, "hop") /* remote lanes: the round trip to the worker minus the worker's time */         \
    X(COPY_IN, "copy_in")                                                                          \
    X(COMPUTE, "compute")                                                                          \
    X(COPY_OUT, "copy_out")                                                                        \
    X(POST, "post")                                                                                \
    X(SENT, "send")

enum hs_ts {
#define HS__TS_ENUM(name, text) HS_TS_##name,
    HS_TS_TABLE(HS__TS_ENUM)
#undef HS__TS_ENUM
        HS_TS_COUNT
};

/* Name of the stage that ends at ts[i] ("tokenize", "queue", ...); "received" for index 0. */
const char *hs_ts_name(enum hs_ts i);
/* Parses "interactive" / "batch"; -1 when unknown. */
int hs_priority_parse(const char *s);
const char *hs_priority_name(enum hs_priority p);

struct hs_request;

struct hs_seq {
    struct hs_request *req;
    struct hs_seq *next, *prev; /* queue links (scheduler-owned) */
    const int32_t *ids;         /* [n_tokens], [CLS] .. [SEP] */
    const int32_t *type_ids;    /* [n_tokens] token types (a pair's), or NULL for all zeros */
    int32_t n_tokens;
    int32_t index;  /* row of req->out */
    int32_t bucket; /* scheduler-owned */
    int32_t queued; /* scheduler-owned: 1 while in a queue */
    int32_t over;   /* scheduler-owned: its tenant was past its share (hs_lane_opts.over_share) */
    double tag;     /* scheduler-owned: its start tag in the lane's fair order */
    int64_t enqueued_ns;
};

typedef void (*hs_request_fn)(struct hs_request *r, void *ctx);

struct hs_request {
    /* --- filled by the owner before hs_sched_submit --- */
    uint64_t id;
    enum hs_priority priority;
    int64_t deadline_ns; /* absolute (hs_now_ns clock) */
    int n_seqs;
    struct hs_seq *seqs; /* [n_seqs]: ids, n_tokens set; index set by hs_request_init */
    float *out;          /* [n_seqs, dim] written by the scheduler */
    const char *model;   /* model name the router matches; NULL = any */
    /* the caller's tenant (an API key's, server/auth.h) and its weight; 0 and 0 (weight 1) for
     * the one default tenant. Lanes with fair shares (hs_lane_opts.fair) order queued work
     * between tenants by their weights. */
    int tenant;
    double weight;
    hs_request_fn done; /* answered: exactly once per successful submit, from a scheduler thread */
    hs_request_fn release; /* last reference dropped (may be NULL) */
    void *ctx;             /* passed to done and release */
    int64_t ts[HS_TS_COUNT];

    /* --- the result, valid in done (and after a failed submit) --- */
    hs_status status;
    char msg[256];
    double retry_after_s;  /* for HS_STATUS_OVERLOADED: predicted drain time */
    int lane;              /* index of the queue the router chose; -1 before routing */
    int in_batch_timeout;  /* HS_STATUS_TIMEOUT while its batch ran past twice its predicted
                              time (the engine too slow, not the queue too long) */
    uint64_t batch_id;     /* last batch that carried one of its sequences */
    int over_share;        /* 1: queued past its tenant's share (hs_lane_opts.over_share) */
    double predicted_s;    /* admission's predicted wait from enqueue to answer, seconds */
    double predicted_bias; /* the lane's bias factor that prediction included */
    /* its last batch's engine boundaries (struct hs_batch_timing), for Server-Timing */
    int n_boundaries;
    int64_t boundary_copy_ns[8], boundary_sync_ns[8];
    int64_t wait_ns; /* a pipelined split: waiting for an engine another batch held */

    /* --- scheduler-owned --- */
    atomic_int refs;
    atomic_int pending;  /* sequences queued or in a batch */
    atomic_int answered; /* 0 until done has been claimed */
    int64_t n_tokens;    /* sum of the sequences' tokens */
    struct hs_request *link;
    int link_drop;
};

/* Prepares r for submission: refs = 1, indexes the sequences, clears the result. */
void hs_request_init(struct hs_request *r);
/* Reference counting; the last hs_request_unref calls r->release. Thread-safe. */
void hs_request_ref(struct hs_request *r);
void hs_request_unref(struct hs_request *r);

#endif
