/* bench_cpu: an engine (the CPU engine unless --engine names another kind) on the default model
 * at fixed shapes, plus oneDNN's sgemm rate at M=4096, K=384, N=1536 as the machine's practical
 * peak. Prints one JSON line per measurement (the same fields as bench/ort_bench.py) so
 * bench/run.sh can print ratios against the peers.
 *
 *   bench_cpu [--model DIR] [--engine KIND[:DEVICE]] [--threads N] [--shapes 1x16,1x128,32x128]
 *             [--seconds S] [--iters N] [--no-peak] [--dtype f32|int8|bf16] [--golden DIR]
 *             [--pairs]
 *
 * --engine creates the engine through the registry, as `hetserve embed` and the server do: a
 * plugin kind (openvino) is found the same way (plugins/ next to this binary, $HS_PLUGIN_PATH),
 * so the engine hetserve serves with is timed, executor and copies included. Lines say
 * "engine":"hetserve-<kind>". Exit status 3: the kind is not built or has no device (run.sh
 * skips its row). The sgemm peak is only measured for the CPU kind.
 *
 * Inputs are full-length sequences of real vocabulary ids ([CLS] w... [SEP]); timing is the
 * median (and min, p10, p90) of repeated hs_executor_run calls after warm-up (engine compute +
 * copy-in/out, no tokenization), which is what the peer's InferenceSession.run measures.
 *
 * --dtype picks the lane's compute dtype (executor opts .dtype); on a folder written by
 * `hetserve quantize` an int8 lane follows its plan (f32 stages, input smoothing).
 *
 * --pairs (a cross-encoder folder: *ForSequenceClassification): the rerank path. Shape BxS is B
 * query/document pairs of S tokens, [CLS] query [SEP] document [SEP] with the query taking the
 * first S/2 tokens (token type 0) and the document the rest (token type 1, its [SEP] included),
 * as the pair template lays a /rerank call out; each timed call also runs the checkpoint's head
 * on the host (model/seqcls.h: logit, then the sigmoid) as the server does. Lines say
 * "task":"rerank" and give pairs_per_s.
 *
 * --golden DIR (e.g. tests/golden): before timing, the golden sentences (their token ids, in
 * batches of 32) run through an f32 lane on the CPU engine (the reference every lane is checked
 * against) and the --dtype lane on the benchmarked engine; one JSON line
 * {"cosine":"hetserve-<kind>",...} gives the lane's cosine to hetserve CPU f32 (min, mean, worst
 * sentence) and to the golden reference embeddings, and every timing line carries cos_min /
 * cos_mean. */
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/threads.h"
#include "engine/cpu/qlinear.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/seqcls.h"
#include "model/verify.h"

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

/* Runs the golden sentences (their token ids) through x in batches of up to batch_max, in file
 * order, each batch as long as its longest sentence; writes [g->count, hidden] to out. */
static hs_status embed_golden(struct hs_executor *x, const struct hs_golden *g, int batch_max,
                              int seq_max, float *out, struct hs_error *err)
{
    const int H = g->dim;
    int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)batch_max * (size_t)seq_max);
    int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)batch_max);
    int32_t *offsets = hs_malloc(sizeof(int32_t) * (size_t)(batch_max + 1));
    hs_status s = ids && lengths && offsets
                      ? HS_STATUS_OK
                      : hs_error_set(err, HS_STATUS_NO_MEMORY, "bench_cpu: golden buffers");
    for (int first = 0; !s && first < g->count; first += batch_max) {
        const int n = g->count - first < batch_max ? g->count - first : batch_max;
        int tokens = 0, longest = 1;
        offsets[0] = 0;
        for (int i = 0; i < n; i++) {
            const int len = g->n_ids[first + i];
            if (len < 1 || len > seq_max) {
                s = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                 "bench_cpu: golden sentence %d has %d tokens, model takes %d",
                                 first + i, len, seq_max);
                break;
            }
            memcpy(ids + tokens, g->ids[first + i], sizeof(int32_t) * (size_t)len);
            lengths[i] = len;
            tokens += len;
            offsets[i + 1] = tokens;
            if (len > longest) longest = len;
        }
        if (s) break;
        struct hs_batch b = {.n_seqs = n,
                             .seq_max = longest,
                             .n_tokens = tokens,
                             .ids = ids,
                             .lengths = lengths,
                             .offsets = offsets};
        s = hs_executor_run(x, 0, &b, out + (size_t)first * H, NULL, err);
    }
    hs_free(ids);
    hs_free(lengths);
    hs_free(offsets);
    return s;
}

struct cos_stats {
    double min, mean;
    int worst;
};

static struct cos_stats cos_compare(const float *a, const float *b, int count, int dim)
{
    struct cos_stats c = {.min = 2.0, .mean = 0.0, .worst = -1};
    for (int i = 0; i < count; i++) {
        double v = hs_verify_cosine(a + (size_t)i * dim, b + (size_t)i * dim, dim);
        if (isnan(v)) v = -1.0; /* a NaN embedding is the worst possible answer */
        c.mean += v;
        if (v < c.min) {
            c.min = v;
            c.worst = i;
        }
    }
    c.mean /= count > 0 ? count : 1;
    return c;
}

/* Embeds the golden sentences with an f32 lane of m on ref (the CPU engine) and a `dtype` lane
 * on e; prints the cosines and returns the lane's agreement with hetserve f32 in *out. */
static hs_status golden_cosines(const struct hs_model *m, hs_engine_t ref_engine, hs_engine_t e,
                                enum hs_dtype dtype, const char *golden_dir, struct cos_stats *out,
                                struct hs_error *err)
{
    struct hs_golden *g = NULL;
    hs_status s = hs_golden_load_dir(golden_dir, &g, err);
    if (s) return s;
    const int H = m->config.dims.hidden, seq_max = m->config.max_seq_len, batch_max = 32;
    if (!g->ids || g->dim != H) {
        s = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                         "bench_cpu: %s/embeddings.json has no token ids or dim %d != %d",
                         golden_dir, g->dim, H);
        hs_golden_free(g);
        return s;
    }
    float *ref = hs_malloc(sizeof(float) * (size_t)g->count * (size_t)H);
    float *lane = hs_malloc(sizeof(float) * (size_t)g->count * (size_t)H);
    if (!ref || !lane) s = hs_error_set(err, HS_STATUS_NO_MEMORY, "bench_cpu: golden outputs");
    enum hs_dtype dtypes[2] = {HS_DTYPE_F32, dtype};
    hs_engine_t engines[2] = {ref_engine, e};
    float *outs[2] = {ref, lane};
    const bool same = ref_engine == e && dtype == HS_DTYPE_F32; /* the reference itself */
    for (int k = 0; !s && k < (same ? 1 : 2); k++) {
        struct hs_placement plan;
        hs_placement_single(m, engines[k], &plan);
        struct hs_executor *x = NULL;
        struct hs_executor_opts xo = {
            .batch_max = batch_max, .seq_max = seq_max, .dtype = dtypes[k]};
        s = hs_executor_create(m, &plan, &xo, &x, err);
        if (!s) s = embed_golden(x, g, batch_max, seq_max, outs[k], err);
        hs_executor_free(x);
    }
    if (!s) {
        const float *mine = same ? ref : lane;
        *out = cos_compare(mine, ref, g->count, H);
        struct cos_stats gl = cos_compare(mine, g->emb, g->count, H);
        struct cos_stats gf = cos_compare(ref, g->emb, g->count, H);
        printf("{\"cosine\":\"hetserve-%s\",\"dtype\":\"%s\",\"n\":%d,\"ref\":\"hetserve-f32\","
               "\"cos_min\":%.6f,\"cos_mean\":%.6f,\"worst\":%d,\"golden_cos_min\":%.6f,"
               "\"golden_cos_mean\":%.6f,\"f32_golden_cos_min\":%.7f,\"quant_plan\":%s}\n",
               hs_engine_kind(e), hs_compute_dtype_name(dtype), g->count, out->min, out->mean,
               out->worst, gl.min, gl.mean, gf.min,
               m->quant && m->quant->dtype == dtype ? "true" : "false");
        fflush(stdout);
    }
    hs_free(ref);
    hs_free(lane);
    hs_golden_free(g);
    return s;
}

/* "KIND" or "KIND:DEVICE" (hetserve embed's --engine syntax). */
static bool parse_engine(const char *spec, char *kind, size_t kind_size, int *device)
{
    const char *colon = strchr(spec, ':');
    const size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= kind_size) return false;
    memcpy(kind, spec, n);
    kind[n] = '\0';
    *device = 0;
    if (!colon) return true;
    char *end = NULL;
    long d = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || d < 0 || d > 1024) return false;
    *device = (int)d;
    return true;
}

int main(int argc, char **argv)
{
    hs_threads_wait_policy_init(argv); /* the wait policy hetserve serves with (core/threads.h) */
    const char *model_dir =
        getenv("HS_MODEL_DIR") ? getenv("HS_MODEL_DIR") : "models/all-MiniLM-L6-v2";
    int threads = 2;
    double seconds = 8.0;
    int iters = 0, peak = 1, dtype = HS_DTYPE_F32, pairs = 0;
    const char *golden_dir = NULL;
    char shapes[256] = "1x16,1x128,32x128";
    char kind[32] = "cpu";
    int device = 0;
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
        else if (strcmp(argv[i], "--pairs") == 0)
            pairs = 1;
        else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc)
            snprintf(shapes, sizeof shapes, "%s", argv[++i]);
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc &&
                 hs_compute_dtype_parse(argv[i + 1]) >= 0)
            dtype = hs_compute_dtype_parse(argv[++i]);
        else if (strcmp(argv[i], "--golden") == 0 && i + 1 < argc)
            golden_dir = argv[++i];
        else if (strcmp(argv[i], "--int8-own-rows") == 0 && i + 1 < argc)
            hs__ql_set_own_rows(atoi(argv[++i])); /* 0: always oneDNN's matmul */
        else if (strcmp(argv[i], "--engine") == 0 && i + 1 < argc &&
                 parse_engine(argv[i + 1], kind, sizeof kind, &device))
            i++;
        else {
            fprintf(stderr, "usage: bench_cpu [--model DIR] [--engine KIND[:DEVICE]] [--threads N] "
                            "[--shapes BxS,...]\n"
                            "                 [--seconds S] [--iters N] [--no-peak] "
                            "[--dtype f32|int8|bf16] [--golden DIR] [--pairs]\n"
                            "                 [--int8-own-rows N]\n");
            return 2;
        }
    }
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    hs_engine_t e = NULL, ref = NULL;
    const bool is_cpu = strcmp(kind, "cpu") == 0;
    const struct hs_engine_kind *k = hs_engine_kind_find(kind);
    if (!k || !hs_engine_kind_built(k)) {
        char names[256];
        hs_engine_kind_names(names, sizeof names);
        fprintf(stderr, "bench_cpu: engine kind '%s' %s\n", kind,
                k ? "is not built (no plugin found)" : "is unknown");
        if (!k) fprintf(stderr, "bench_cpu: kinds: %s\n", names);
        return k ? 3 : 2;
    }
    if (hs_model_load(model_dir, &m, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    hs_status cs = hs_engine_create(
        kind, &(struct hs_engine_opts){.threads = threads, .device = device}, &e, &err);
    if (cs) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return cs == HS_STATUS_UNSUPPORTED ? 3 : 1;
    }
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    if (!(caps.dtypes & (1u << dtype))) {
        fprintf(stderr, "bench_cpu: engine %s (%s) has no %s path on this machine\n",
                hs_engine_name(e), kind, hs_compute_dtype_name((enum hs_dtype)dtype));
        return 3;
    }
    /* the f32 reference of the golden cosines is always the CPU engine */
    if (golden_dir && !is_cpu &&
        hs_engine_create("cpu", &(struct hs_engine_opts){.threads = threads}, &ref, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    if (peak && is_cpu) bench_sgemm(threads, seconds / 4);
    struct cos_stats cos = {.min = -2.0, .mean = -2.0, .worst = -1}; /* -2: not measured */
    if (golden_dir &&
        golden_cosines(m, ref ? ref : e, e, (enum hs_dtype)dtype, golden_dir, &cos, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    hs_engine_destroy(ref);
    struct hs_seqcls *head = NULL;
    if (pairs && hs_seqcls_load(model_dir, m->config.dims.hidden, &head, &err)) {
        fprintf(stderr, "bench_cpu: --pairs needs a cross-encoder (%s)\n",
                err.msg[0] ? err.msg : "no *ForSequenceClassification head");
        return 2;
    }
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
        struct hs_executor_opts xo = {
            .batch_max = batch, .seq_max = seq, .dtype = (enum hs_dtype)dtype};
        if (hs_executor_create(m, &plan, &xo, &x, &err)) {
            fprintf(stderr, "bench_cpu: %s\n", err.msg);
            return 1;
        }
        const int T = batch * seq;
        int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)T);
        int32_t *lengths = hs_malloc(sizeof(int32_t) * (size_t)batch);
        int32_t *offsets = hs_malloc(sizeof(int32_t) * (size_t)(batch + 1));
        int32_t *types = pairs ? hs_malloc(sizeof(int32_t) * (size_t)T) : NULL;
        /* word ids past the specials, inside the model's vocabulary (MiniLM: 1996.. as before) */
        const int vocab = m->config.dims.vocab, lo = vocab > 22000 ? 1996 : vocab / 8;
        const int span = vocab > 22000 ? 20000 : vocab - lo - 1;
        const int32_t cls = hs_tokenizer_cls_id(m->tokenizer),
                      sep = hs_tokenizer_sep_id(m->tokenizer);
        offsets[0] = 0;
        for (int b = 0; b < batch; b++) {
            lengths[b] = seq;
            offsets[b + 1] = offsets[b] + seq;
            for (int s = 0; s < seq; s++) {
                const bool qsep = pairs && s == seq / 2 - 1;
                ids[b * seq + s] = s == 0                 ? cls
                                   : s == seq - 1 || qsep ? sep
                                                          : lo + (b * 131 + s * 17) % span;
                if (types) types[b * seq + s] = s >= seq / 2;
            }
        }
        struct hs_batch bt = {.n_seqs = batch,
                              .seq_max = seq,
                              .n_tokens = T,
                              .ids = ids,
                              .type_ids = types,
                              .lengths = lengths,
                              .offsets = offsets};
        float *out = hs_malloc(sizeof(float) * (size_t)batch * (size_t)m->config.dims.hidden);
        float *scores =
            head ? hs_malloc(sizeof(float) * (size_t)batch * (size_t)head->n_labels) : NULL;
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
            for (int b = 0; head && b < batch; b++) { /* the server's host-side head */
                float *sc = scores + (size_t)b * head->n_labels;
                hs_seqcls_logits(head, out + (size_t)b * m->config.dims.hidden, sc);
                hs_seqcls_activate(head, sc);
            }
            times[n++] = (double)(hs_now_ns() - t0) / 1e6;
        }
        qsort(times, (size_t)n, sizeof(double), cmp_double);
        double ms = times[n / 2];
        printf("{\"engine\":\"hetserve-%s\",\"dtype\":\"%s\",\"batch\":%d,\"seq\":%d,"
               "\"ms\":%.4f,\"min_ms\":%.4f,\"p10_ms\":%.4f,\"p90_ms\":%.4f,\"seq_per_s\":%.2f,"
               "\"gflops\":%.2f,\"iters\":%d,\"threads\":%d",
               kind, hs_compute_dtype_name((enum hs_dtype)dtype), batch, seq, ms, times[0],
               times[n / 10], times[n * 9 / 10], batch / (ms / 1e3),
               encoder_flops(&m->config.dims, batch, seq) / (ms * 1e6), n, threads);
        if (cos.min > -2.0) printf(",\"cos_min\":%.6f,\"cos_mean\":%.6f", cos.min, cos.mean);
        if (head) printf(",\"task\":\"rerank\",\"pairs_per_s\":%.2f", batch / (ms / 1e3));
        printf("}\n");
        fflush(stdout);
        hs_free(times);
        hs_free(out);
        hs_free(ids);
        hs_free(lengths);
        hs_free(offsets);
        hs_free(types);
        hs_free(scores);
        hs_executor_free(x);
    }
    hs_seqcls_free(head);
    hs_engine_destroy(e);
    hs_model_free(m);
    return 0;
}
