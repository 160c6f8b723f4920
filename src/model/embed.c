/* hs_executor_embed_texts: tokenize + run, for the CLI, verify and benchmarks. */
#include <string.h>

#include "core/alloc.h"
#include "model/executor.h"

hs_status hs_executor_embed_texts(struct hs_executor *x, const char *const *texts, int n,
                                  float *out, int *tokens, struct hs_error *err)
{
    const struct hs_model *m = hs_executor_model(x);
    const int seq_max = hs_executor_opts(x)->seq_max, hidden = hs_pooled_dim(&m->config.dims);
    const int cap_seqs = hs_executor_opts(x)->batch_max,
              cap_tokens = hs_executor_opts(x)->tokens_max;
    int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)cap_tokens);
    int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)cap_seqs);
    int32_t *offsets = hs_malloc(sizeof(int32_t) * (size_t)(cap_seqs + 1));
    int32_t *one = hs_malloc(sizeof(int32_t) * (size_t)seq_max);
    hs_status st = HS_STATUS_OK;
    if (!ids || !lengths || !offsets || !one) {
        st = hs_error_set(err, HS_STATUS_NO_MEMORY, "embed: out of memory");
        goto done;
    }
    int done_seqs = 0;
    while (done_seqs < n) {
        struct hs_batch b = {.ids = ids, .lengths = lengths, .offsets = offsets};
        offsets[0] = 0;
        int first = done_seqs;
        while (done_seqs < n && b.n_seqs < cap_seqs) {
            int nt = 0;
            st = hs_model_tokenize(m, texts[done_seqs], strlen(texts[done_seqs]), one, seq_max, &nt,
                                   NULL, err);
            if (st != HS_STATUS_OK) goto done;
            if (b.n_tokens + nt > cap_tokens) break;
            memcpy(ids + b.n_tokens, one, sizeof(int32_t) * (size_t)nt);
            lengths[b.n_seqs] = nt;
            if (tokens) tokens[done_seqs] = nt;
            b.n_tokens += nt;
            if (nt > b.seq_max) b.seq_max = nt;
            offsets[++b.n_seqs] = b.n_tokens;
            done_seqs++;
        }
        st = hs_executor_run(x, 0, &b, out + (size_t)first * (size_t)hidden, NULL, err);
        if (st != HS_STATUS_OK) goto done;
    }
done:
    hs_free(ids);
    hs_free(lengths);
    hs_free(offsets);
    hs_free(one);
    return st;
}
