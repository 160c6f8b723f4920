/* bench_engine — one engine, one model, a grid of (batch, seq) shapes; CSV out.
 *
 *   bench_engine --model DIR [--engine cuda|cpu] [--dtype f16|f32] [--batch 1,32,256]
 *                [--seq 16,128,256] [--iters N] [--warmup N] [--label NAME] [--csv FILE]
 *
 * Every sequence of a shape has exactly `seq` tokens (random ids, [CLS] .. [SEP]); the batch's
 * bucket is `seq`. Each shape runs `warmup` untimed batches (the CUDA engine captures its graph
 * there), then `iters` timed ones through the executor (copy-in, all stages, copy-out). FLOPs
 * count the encoder's matrix products (QKV, attention scores and values, output projection,
 * FFN). Columns: impl,model,engine,dtype,batch,seq,iters,ms_mean,ms_min,seq_per_s,tflops,
 * copy_in_ms,compute_ms,copy_out_ms,graphs (the last four from CUDA events, per batch; empty on
 * the CPU). Appends to --csv (writes the header when the file is new).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#ifdef HS_HAVE_CUDA
#include "engine/cuda/cuda.h"
#endif

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 1 << 20) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static double encoder_flops(const struct hs_encoder_dims *d, int batch, int seq)
{
    const double H = d->hidden, I = d->intermediate, T = (double)batch * seq;
    const double per_token_layer = 2.0 * (4.0 * H * H + 2.0 * H * I) + 4.0 * seq * H;
    return per_token_layer * T * d->layers;
}

int main(int argc, char **argv)
{
    const char *model_dir = NULL, *kind = "cuda", *label = NULL, *csv = NULL;
    enum hs_dtype dtype = HS_DTYPE_F16;
    bool dtype_set = false;
    int batches[16] = {1, 32, 256}, n_b = 3, seqs[16] = {16, 128, 256}, n_s = 3;
    int iters = 20, warmup = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_engine: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--model") == 0)
            model_dir = v;
        else if (strcmp(a, "--engine") == 0)
            kind = v;
        else if (strcmp(a, "--label") == 0)
            label = v;
        else if (strcmp(a, "--csv") == 0)
            csv = v;
        else if (strcmp(a, "--dtype") == 0) {
            dtype_set = true;
            if (strcmp(v, "f16") == 0)
                dtype = HS_DTYPE_F16;
            else if (strcmp(v, "f32") == 0)
                dtype = HS_DTYPE_F32;
            else {
                fprintf(stderr, "bench_engine: dtype f16 or f32\n");
                return 2;
            }
        } else if (strcmp(a, "--batch") == 0) {
            if ((n_b = parse_list(v, batches, 16)) <= 0) return 2;
        } else if (strcmp(a, "--seq") == 0) {
            if ((n_s = parse_list(v, seqs, 16)) <= 0) return 2;
        } else if (strcmp(a, "--iters") == 0) {
            iters = atoi(v);
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = atoi(v);
        } else {
            fprintf(stderr, "bench_engine: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (!model_dir || iters < 1 || warmup < 0) {
        fprintf(stderr, "usage: bench_engine --model DIR [--engine cuda|cpu] [--dtype f16|f32] "
                        "[--batch LIST] [--seq LIST] [--iters N] [--warmup N] [--label NAME] "
                        "[--csv FILE]\n");
        return 2;
    }
    if (!dtype_set && strcmp(kind, "cpu") == 0) dtype = HS_DTYPE_F32;

    struct hs_error err;
    hs_error_clear(&err);
    struct hs_model *m = NULL;
    if (hs_model_load(model_dir, &m, &err)) {
        fprintf(stderr, "bench_engine: %s: %s\n", model_dir, err.msg);
        return 1;
    }
    struct hs_engine_opts eo;
    memset(&eo, 0, sizeof eo);
    hs_engine_t e = NULL;
    if (hs_engine_create(kind, &eo, &e, &err)) {
        fprintf(stderr, "bench_engine: engine %s: %s\n", kind, err.msg);
        hs_model_free(m);
        return 1;
    }
    int b_max = 1, s_max = 1;
    for (int i = 0; i < n_b; i++) b_max = batches[i] > b_max ? batches[i] : b_max;
    for (int i = 0; i < n_s; i++) s_max = seqs[i] > s_max ? seqs[i] : s_max;
    if (s_max > m->config.max_seq_len) {
        fprintf(stderr, "bench_engine: seq %d > model max %d\n", s_max, m->config.max_seq_len);
        return 1;
    }
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor_opts xo = {.batch_max = b_max,
                                  .tokens_max = b_max * s_max,
                                  .seq_max = s_max,
                                  .slots = 1,
                                  .dtype = dtype};
    struct hs_executor *x = NULL;
    if (hs_executor_create(m, &plan, &xo, &x, &err)) {
        fprintf(stderr, "bench_engine: executor: %s\n", err.msg);
        return 1;
    }
    const int H = m->config.dims.hidden, V = m->config.dims.vocab;
    int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)b_max * s_max);
    int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)b_max);
    int32_t *offsets = hs_malloc(sizeof(int32_t) * ((size_t)b_max + 1));
    float *out = hs_malloc(sizeof(float) * (size_t)b_max * H);
    if (!ids || !lengths || !offsets || !out) return 1;
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < b_max * s_max; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ids[i] = 1000 + (int32_t)(r % (uint64_t)(V > 2000 ? V - 1000 : 1));
        if (V <= 2000) ids[i] = (int32_t)(r % (uint64_t)V);
    }

    FILE *f = NULL;
    if (csv) {
        FILE *probe = fopen(csv, "r");
        bool fresh = probe == NULL;
        if (probe) fclose(probe);
        f = fopen(csv, "a");
        if (!f) {
            fprintf(stderr, "bench_engine: cannot write %s\n", csv);
            return 1;
        }
        if (fresh)
            fprintf(f, "impl,model,engine,dtype,batch,seq,iters,ms_mean,ms_min,seq_per_s,tflops,"
                       "copy_in_ms,compute_ms,copy_out_ms,graphs\n");
    }
    const char *impl = label ? label : "hetserve";
    printf("%-18s %-8s %5s %5s %6s %10s %10s %12s %8s\n", impl, "engine", "batch", "seq", "iters",
           "ms_mean", "ms_min", "seq/s", "TFLOP/s");
    int rc = 0;
    for (int bi = 0; bi < n_b && !rc; bi++) {
        for (int si = 0; si < n_s && !rc; si++) {
            const int B = batches[bi], S = seqs[si];
            offsets[0] = 0;
            for (int i = 0; i < B; i++) {
                lengths[i] = S;
                offsets[i + 1] = (i + 1) * S;
                ids[i * S] = 101; /* [CLS] .. [SEP] where the vocabulary has them */
                if (S > 1 && V > 102) ids[i * S + S - 1] = 102;
            }
            struct hs_batch b = {.n_seqs = B,
                                 .seq_max = S,
                                 .n_tokens = B * S,
                                 .ids = ids,
                                 .type_ids = NULL,
                                 .lengths = lengths,
                                 .offsets = offsets};
            for (int w = 0; w < warmup; w++)
                if (hs_executor_run(x, 0, &b, out, NULL, &err)) {
                    fprintf(stderr, "bench_engine: %dx%d: %s\n", B, S, err.msg);
                    rc = 1;
                    break;
                }
            if (rc) break;
#ifdef HS_HAVE_CUDA
            struct hs_cuda_counters c0, c1;
            hs_engine_cuda_counters(&c0);
#endif
            double sum = 0.0, best = 1e300;
            for (int it = 0; it < iters; it++) {
                const int64_t t0 = hs_now_ns();
                if (hs_executor_run(x, 0, &b, out, NULL, &err)) {
                    fprintf(stderr, "bench_engine: %dx%d: %s\n", B, S, err.msg);
                    rc = 1;
                    break;
                }
                const double ms = hs_ns_to_ms(hs_now_ns() - t0);
                sum += ms;
                if (ms < best) best = ms;
            }
            if (rc) break;
            const double mean = sum / iters;
            const double tflops = encoder_flops(&m->config.dims, B, S) / (mean * 1e-3) / 1e12;
            char extra[160] = ",,,";
#ifdef HS_HAVE_CUDA
            hs_engine_cuda_counters(&c1);
            if (strcmp(kind, "cuda") == 0) {
                const double nb = (double)(c1.batches - c0.batches);
                if (nb > 0)
                    snprintf(extra, sizeof extra, "%.4f,%.4f,%.4f,%lld",
                             (c1.copy_in_ms - c0.copy_in_ms) / nb,
                             (c1.compute_ms - c0.compute_ms) / nb,
                             (c1.copy_out_ms - c0.copy_out_ms) / nb, (long long)c1.graphs_captured);
            }
#endif
            printf("%-18s %-8s %5d %5d %6d %10.3f %10.3f %12.1f %8.2f\n", impl, hs_engine_name(e),
                   B, S, iters, mean, best, B / (mean * 1e-3), tflops);
            if (f)
                fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%.4f,%.4f,%.1f,%.3f,%s\n", impl, m->name, kind,
                        hs_dtype_name(dtype), B, S, iters, mean, best, B / (mean * 1e-3), tflops,
                        extra);
        }
    }
#ifdef HS_HAVE_CUDA
    if (strcmp(kind, "cuda") == 0) {
        struct hs_cuda_counters c;
        hs_engine_cuda_counters(&c);
        printf("cuda graphs: %lld captured (%.1f ms capturing, ~%.1f MiB device memory), %lld "
               "launches, %lld direct stage runs; weights %.1f MiB, workspaces %.1f MiB\n",
               (long long)c.graphs_captured, hs_ns_to_ms(c.graph_capture_ns),
               (double)c.graph_mem_bytes / 1048576.0, (long long)c.graph_launches,
               (long long)c.direct_runs, (double)c.weight_bytes / 1048576.0,
               (double)c.ws_bytes / 1048576.0);
    }
#endif
    if (f) fclose(f);
    hs_executor_free(x);
    hs_engine_destroy(e);
    hs_model_free(m);
    hs_free(ids);
    hs_free(lengths);
    hs_free(offsets);
    hs_free(out);
    return rc;
}
