/* bench_cpu: the CPU engine on the default model at fixed shapes, plus oneDNN's sgemm rate at
 * M=4096, K=384, N=1536 as the machine's practical peak. Prints one JSON line per measurement
 * (the same fields as bench/ort_bench.py) so bench/run.sh can print ratios against the peer.
 *
 *   bench_cpu [--model DIR] [--threads N] [--shapes 1x16,1x128,32x128] [--seconds S]
 *             [--iters N] [--no-peak]
 *
 * Inputs are full-length sequences of real vocabulary ids ([CLS] w... [SEP]); timing is the
 * median of repeated hs_executor_run calls after warm-up (engine compute + copy-in/out, no
 * tokenization), which is what the peer's InferenceSession.run measures. */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* FLOPs of one forward pass (the formula bench/ort_bench.py uses too): per layer, the four
 * hidden x hidden projections and the two FFN matmuls for every token, plus QK^T and PV for
 * every sequence: L * (T * (8 H^2 + 4 H I) + 4 B S^2 H). Embedding, LayerNorm, softmax, GELU and
 * pooling are not counted. */
static double encoder_flops(const struct hs_encoder_dims *d, int batch, int seq)
{
    double H = d->hidden, I = d->intermediate, T = (double)batch * seq;
    return d->layers * (T * (8 * H * H + 4 * H * I) + 4.0 * batch * (double)seq * seq * H);
}

static void bench_sgemm(int threads, double seconds)
{
    const int M = 4096, K = 384, N = 1536;
    float *a = hs_malloc_aligned(sizeof(float) * (size_t)M * K, 64);
    float *b = hs_malloc_aligned(sizeof(float) * (size_t)N * K, 64);
    float *c = hs_malloc_aligned(sizeof(float) * (size_t)M * N, 64);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 7) * 0.01f;
    omp_set_num_threads(threads);
    double times[200];
    int n = 0;
    int64_t start = hs_now_ns();
    while (n < 200 && (n < 5 || hs_now_ns() - start < (int64_t)(seconds * 1e9))) {
        int64_t t0 = hs_now_ns();
        dnnl_sgemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        times[n++] = (double)(hs_now_ns() - t0) / 1e6;
    }
    qsort(times + 1, (size_t)n - 1, sizeof(double), cmp_double);
    double ms = times[1 + (n - 1) / 2];
    printf("{\"engine\":\"onednn-sgemm\",\"m\":%d,\"k\":%d,\"n\":%d,\"ms\":%.4f,\"gflops\":%.2f}\n",
           M, K, N, ms, 2.0 * M * N * K / (ms * 1e6));
    hs_free_aligned(a);
    hs_free_aligned(b);
    hs_free_aligned(c);
}

int main(int argc, char **argv)
{
    const char *model_dir =
        getenv("HS_MODEL_DIR") ? getenv("HS_MODEL_DIR") : "models/all-MiniLM-L6-v2";
    int threads = 2;
    double seconds = 8.0;
    int iters = 0, peak = 1;
    char shapes[256] = "1x16,1x128,32x128";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model_dir = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-peak") == 0)
            peak = 0;
        else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc)
            snprintf(shapes, sizeof shapes, "%s", argv[++i]);
        else {
            fprintf(
                stderr,
                "usage: bench_cpu [--model DIR] [--threads N] [--shapes BxS,...] [--seconds S]\n");
            return 2;
        }
    }
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    hs_engine_t e = NULL;
    if (hs_model_load(model_dir, &m, &err) ||
        hs_engine_cpu_create(&(struct hs_engine_opts){.threads = threads}, &e, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    if (peak) bench_sgemm(threads, seconds / 4);
    char *save = NULL;
    for (char *tok = strtok_r(shapes, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int batch = 0, seq = 0;
        if (sscanf(tok, "%dx%d", &batch, &seq) != 2 || batch < 1 || seq < 2 ||
            seq > m->config.max_seq_len) {
            fprintf(stderr, "bench_cpu: bad shape %s\n", tok);
            return 2;
        }
        struct hs_placement plan;
        hs_placement_single(m, e, &plan);
        struct hs_executor *x = NULL;
        struct hs_executor_opts xo = {.batch_max = batch, .seq_max = seq};
        if (hs_executor_create(m, &plan, &xo, &x, &err)) {
            fprintf(stderr, "bench_cpu: %s\n", err.msg);
            return 1;
        }
        const int T = batch * seq;
        int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)T);
        int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)batch);
        int32_t *offsets = hs_malloc(sizeof(int32_t) * (size_t)(batch + 1));
        offsets[0] = 0;
        for (int b = 0; b < batch; b++) {
            lengths[b] = seq;
            offsets[b + 1] = offsets[b] + seq;
            for (int s = 0; s < seq; s++)
                ids[b * seq + s] = s == 0         ? hs_tokenizer_cls_id(m->tokenizer)
                                   : s == seq - 1 ? hs_tokenizer_sep_id(m->tokenizer)
                                                  : 1996 + (b * 131 + s * 17) % 20000;
        }
        struct hs_batch bt = {.n_seqs = batch,
                              .seq_max = seq,
                              .n_tokens = T,
                              .ids = ids,
                              .lengths = lengths,
                              .offsets = offsets};
        float *out = hs_malloc(sizeof(float) * (size_t)batch * (size_t)m->config.dims.hidden);
        for (int w = 0; w < (iters > 0 ? 1 : 3); w++) hs_executor_run(x, 0, &bt, out, NULL, &err);
        enum { MAXN = 100000 };
        double *times = hs_malloc(sizeof(double) * MAXN);
        int n = 0;
        int64_t start = hs_now_ns();
        /* --iters N: exactly N timed runs (for instruction/cycle counting), else time-bounded */
        while (
            n < MAXN &&
            (iters > 0 ? n < iters : (n < 10 || hs_now_ns() - start < (int64_t)(seconds * 1e9)))) {
            int64_t t0 = hs_now_ns();
            if (hs_executor_run(x, 0, &bt, out, NULL, &err)) {
                fprintf(stderr, "bench_cpu: %s\n", err.msg);
                return 1;
            }
            times[n++] = (double)(hs_now_ns() - t0) / 1e6;
        }
        qsort(times, (size_t)n, sizeof(double), cmp_double);
        double ms = times[n / 2];
        printf("{\"engine\":\"hetserve-cpu\",\"batch\":%d,\"seq\":%d,\"ms\":%.4f,\"p90_ms\":%.4f,"
               "\"seq_per_s\":%.2f,\"gflops\":%.2f,\"iters\":%d,\"threads\":%d}\n",
               batch, seq, ms, times[n * 9 / 10], batch / (ms / 1e3),
               encoder_flops(&m->config.dims, batch, seq) / (ms * 1e6), n, threads);
        fflush(stdout);
        hs_free(times);
        hs_free(out);
        hs_free(ids);
        hs_free(lengths);
        hs_free(offsets);
        hs_executor_free(x);
    }
    hs_engine_destroy(e);
    hs_model_free(m);
    return 0;
}
