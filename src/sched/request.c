/* Requests as the scheduler sees them: stage names, priorities, reference counts (request.h). */
#include "sched/request.h"

#include <stdatomic.h>
#include <string.h>

static const char *const ts_names[] = {
#define HS__TS_NAME(name, text) text,
    HS_TS_TABLE(HS__TS_NAME)
#undef HS__TS_NAME
};

const char *hs_ts_name(enum hs_ts i)
{
    return (unsigned)i < HS_TS_COUNT ? ts_names[i] : "?";
}

int hs_priority_parse(const char *s)
{
    if (!s) return -1;
    if (strcmp(s, "interactive") == 0) return HS_PRIORITY_INTERACTIVE;
    if (strcmp(s, "batch") == 0) return HS_PRIORITY_BATCH;
    return -1;
}

const char *hs_priority_name(enum hs_priority p)
{
    return p == HS_PRIORITY_BATCH ? "batch" : "interactive";
}

void hs_request_init(struct hs_request *r)
{
    atomic_init(&r->refs, 1);
    atomic_init(&r->pending, 0);
    atomic_init(&r->answered, 0);
    r->status = HS_STATUS_OK;
    r->msg[0] = '\0';
    r->retry_after_s = 0;
    r->lane = -1;
    r->batch_id = 0;
    r->predicted_s = 0;
    r->predicted_bias = 1;
    r->in_batch_timeout = 0;
    r->link = NULL;
    r->link_drop = 0;
    r->n_tokens = 0;
    for (int i = 0; i < r->n_seqs; i++) {
        r->seqs[i].req = r;
        r->seqs[i].index = i;
        r->seqs[i].queued = 0;
        r->seqs[i].next = r->seqs[i].prev = NULL;
        r->n_tokens += r->seqs[i].n_tokens;
    }
}

void hs_request_ref(struct hs_request *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void hs_request_unref(struct hs_request *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1 && r->release) r->release(r, r->ctx);
}
