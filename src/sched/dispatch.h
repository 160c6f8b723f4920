/* hetserve — dispatch: one client call's journey through the scheduler.
 *
 * The HTTP layer hands a job (a client call's inputs, model, priority, deadline) to
 * hs_dispatch_submit and gets exactly one completion back. In between, dispatch owns the way:
 *   decide    the router picks a lane (sched/router.h); a refusal (429, no route) ends the job
 *             at once, as does a refusal at the lane's admission (hs_sched_submit_lane);
 *   run       the request waits in the lane's queue and runs in a batch;
 *   retry     a request that failed with an engine error is sent once more, to another lane of
 *             its route or its failover route, when the route has another lane and the retry
 *             budget a token (hs_router_retry); the retry's answer is the job's;
 *   shadow    a request the router sampled for its route's shadow is copied, at batch priority,
 *             to the shadow lane; the copy's rows are compared (cosine, row by row) with the
 *             answer's and reported to the router (hs_router_on_shadow), then discarded: the
 *             copy never changes the answer, and may finish after it;
 *   report    every admitted request's outcome feeds the breakers (hs_router_on_result).
 * A cascade's second stage (POST /predict) is one more job: hs_dispatch_judge runs the router's
 * judge on the first job's rows, and hs_dispatch_escalate places the escalated inputs on the
 * cascade's big route (or wherever the router puts their model) with the same retry, shadow and
 * reporting.
 *
 * Memory: the owner allocates the job and keeps it alive; every scheduler request dispatch
 * makes for it (the first try, a retry prepared up front, a shadow copy) is built in one place,
 * in memory from the owner's allocator, and holds the owner's memory (owner.hold) until the
 * request's last reference goes (owner.let_go): after the owner's hs_job_release, once the
 * scheduler let go of it too. So a shadow still running after the response was sent, or a batch
 * still writing into a timed-out request's rows, never touches freed memory. Dispatch knows
 * nothing of connections or HTTP.
 *
 * Threads: hs_dispatch_submit and hs_dispatch_escalate run on the owner's thread, the only one
 * that calls owner.alloc. owner.done runs on a scheduler thread, or on the submitting thread
 * before hs_dispatch_submit returns (a request answered at once); dispatch is thread-safe.
 */
#ifndef HS_SCHED_DISPATCH_H
#define HS_SCHED_DISPATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/cascade.h"
#include "sched/request.h"
#include "sched/router.h"
#include "sched/sched.h"

struct hs_dispatch;
struct hs_job;

/* The owner's hooks; ctx is passed to each. */
struct hs_job_owner {
    /* zeroed memory, alive as long as the owner is held; NULL when out of memory. Called only
     * from hs_dispatch_submit / hs_dispatch_escalate, on the caller's thread. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*hold)(void *ctx);   /* one more request holds the owner's memory */
    void (*let_go)(void *ctx); /* a request let go of it (its last reference dropped) */
    void (*done)(struct hs_job *j, void *ctx); /* the job's answer (see hs_dispatch_submit) */
    void *ctx;
};

/* the first try, a retry, a shadow copy */
#define HS_JOB_MAX_REQS 3

struct hs_job {
    /* --- set by the owner before hs_dispatch_submit (zero the rest) --- */
    struct hs_job_owner owner;
    uint64_t id;
    const char *model; /* the model its inputs are tokenized for (the router's key) */
    const char *task;  /* endpoint family for the router's rules ("embed", "predict") */
    const char *key;   /* sticky split key (the client's request id); NULL = none */
    const char *(*header)(void *ctx, const char *name); /* (optional) request headers */
    void *header_ctx;
    enum hs_priority priority;
    int tenant; /* hs_request.tenant, .weight: 0, 0 = the default tenant */
    double weight;
    int64_t deadline_ns;       /* absolute, the scheduler's clock (hs_sched_now) */
    int n_seqs;                /* >= 1 */
    const struct hs_seq *seqs; /* [n_seqs]: ids and n_tokens read (the ids must stay alive) */
    int64_t ts[HS_TS_COUNT];   /* the stamps so far; the answer's once it is answered */

    /* --- the outcome: valid in owner.done, and after a failed submit --- */
    hs_status status;
    char msg[256];
    double retry_after_s;         /* for HS_STATUS_OVERLOADED */
    bool routed;                  /* dec holds a decision (even a refusal) */
    struct hs_route_decision dec; /* the answer's: the retry's once there was one */
    int lane;                     /* lane that answered (or refused); -1 before routing */
    int dim;                      /* floats per row of out */
    const float *out;             /* [n_seqs, dim] rows when status is OK; read-only */

    /* --- dispatch-owned --- */
    struct hs_dispatch *d;
    struct hs_request *req; /* the request that answers (the retry once there is one) */
    struct hs_request *retry, *shadow;
    struct hs_request *reqs[HS_JOB_MAX_REQS];
    int n_reqs;
    int shadow_route;
    bool answer_ok, shadow_ok;
    atomic_int met; /* answer and shadow finished: the second compares */
};

/* A dispatch over scheduler s and router rt (both outlive it). Thread-safe. */
hs_status hs_dispatch_create(struct hs_sched *s, struct hs_router *rt, struct hs_dispatch **out,
                             struct hs_error *err);
void hs_dispatch_free(struct hs_dispatch *d);

/* Decides, builds and submits j (and its shadow copy). HS_STATUS_OK: owner.done(j) runs
 * exactly once, with the final answer (the first try's, or its retry's), possibly before this
 * returns. Any other status: refused (by the router or the lane), out of memory, or a bad job;
 * owner.done never runs and j's status, msg and retry_after_s say why (dec too, when routed).
 * Either way the owner calls hs_job_release once it is done with j. */
hs_status hs_dispatch_submit(struct hs_dispatch *d, struct hs_job *j);

/* As hs_dispatch_submit for the big stage of a cascade: j holds the inputs from escalated (a
 * job answered OK) for the big model. Placed on the big route of the cascade route `from` came
 * through, else wherever the router places j's model; j->dec.reason tells both decisions. */
hs_status hs_dispatch_escalate(struct hs_dispatch *d, struct hs_job *j, const struct hs_job *from);

/* Runs the router's cascade judge on rows [n, dim] computed from j's answer (classifier
 * probabilities), filling out[n]; HS_STATUS_NOT_FOUND when no judge is registered. */
hs_status hs_dispatch_judge(struct hs_dispatch *d, const struct hs_job *j, const float *rows, int n,
                            int dim, enum hs_cascade_decision *out);

/* The owner's reference on each of j's requests; the owner's memory is let go of as each
 * request's scheduler reference goes too. Once per job, after done ran (or the submit failed)
 * and hs_dispatch_submit returned; j must not be used afterwards. */
void hs_job_release(struct hs_job *j);

#endif
