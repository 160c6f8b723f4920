/* bench_peak: this machine's GEMM peak per compute dtype, measured with the calls the CPU engine
 * makes for its linear layers, so that bench/run.sh can report every engine's end-to-end rate as
 * a share of it (a roofline: useful GFLOP/s of the model's forward / the dtype's peak).
 *
 *   bench_peak [--threads N] [--seconds S] [--size M,N,K]
 *
 *   f32:  dnnl_sgemm('N', 'T', M, N, K) on row-major x [M, K] and W [N, K], as hs__cpu_linear
 *         (src/engine/cpu/kernels.c) calls it;
 *   int8, bf16: oneDNN's matmul primitive as the engine makes it (src/engine/cpu/qlinear.c:
 *         hs__ql_weights_make packs W in the layout oneDNN picks, s8 x s8 -> s32 (u8 x s8 where
 *         the engine's own kernels run, hs__ql_src_u8) or bf16 x bf16 -> f32, user scratchpad)
 * run through hs__ql_matmul, the GEMM of hs__ql_run without the per-token quantization and scaling
 * around it; int8 where the engine's own kernel runs its int8 layers (hs__ql_own_isa: AVX-512
 * VNNI or AVX2, hs__cpu_qgemm) also through that kernel, a second int8 line. omp_set_num_threads(N)
 * first, as the engine's stages do (oneDNN sizes its team from it). The default shape M = N = K =
 * 2048 is large and square enough for the kernels' best blocking; a run is at least 3 calls after
 * one warm-up, then as many as fit in S seconds (default 1).
 *
 * Prints JSON lines: {"machine":...} (CPU model, logical CPUs, the ISA flags that decide which
 * kernels run, oneDNN's version and the ISA it dispatches to), then one {"peak":DTYPE,...} per
 * dtype with the best and median GFLOP/s (int8: GOP/s, two per multiply-add, as for floats) and
 * whether the engine has a fast path for the dtype on this CPU ("fast": false = the engine refuses
 * the lane or it runs on a slow reference path; its share of this peak then means little). A dtype
 * whose primitive cannot be made gets a message on stderr and no line; exit status 1 only when
 * the f32 GEMM fails. */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/cpu/qlinear.h"

/* /proc/cpuinfo flags worth printing: the ones the GEMM kernels dispatch on. */
static const char *const ISA_FLAGS[] = {"avx2",        "fma",         "avx512f",     "avx512bw",
                                        "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
                                        "amx_tile",    "amx_int8",    "amx_bf16"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41:
        return "sse41";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    default:
        return "other";
    }
}

/* Whether the space-separated flag list holds `flag` as a whole word. */
static int has_flag(const char *flags, const char *flag)
{
    const size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
            (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

static void print_machine(int threads)
{
    char model[256] = "unknown", line[8192], flags[8192] = "";
    int cpus = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        const char *v = colon + 1 + (colon[1] == ' ');
        if (strncmp(line, "processor", 9) == 0) cpus++;
        if (strncmp(line, "model name", 10) == 0 && cpus == 1)
            snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
        if (strncmp(line, "flags", 5) == 0 && !flags[0]) snprintf(flags, sizeof flags, "%s", v);
    }
    if (f) fclose(f);
    for (char *p = model; *p; p++)
        if (*p == '"' || *p == '\\') *p = ' '; /* stays a valid JSON string */
    const dnnl_version_t *ver = dnnl_version();
    printf("{\"machine\":\"%s\",\"cpus\":%d,\"threads\":%d,\"onednn\":\"%d.%d.%d\","
           "\"onednn_isa\":\"%s\",\"isa\":{",
           model, cpus, threads, ver->major, ver->minor, ver->patch,
           isa_name(dnnl_get_effective_cpu_isa()));
    for (size_t i = 0; i < sizeof ISA_FLAGS / sizeof ISA_FLAGS[0]; i++)
        printf("%s\"%s\":%s", i ? "," : "", ISA_FLAGS[i],
               has_flag(flags, ISA_FLAGS[i]) ? "true" : "false");
    printf("}}\n");
    fflush(stdout);
}

struct timing {
    double best_gflops, median_gflops;
    int iters;
};

/* Calls run(arg) until at least 3 timed calls and `seconds` have passed (one untimed warm-up
 * first); returns the rates. run returns 0 on success. */
static int time_calls(int (*run)(void *), void *arg, double flop, double seconds, struct timing *t)
{
    enum { MAXN = 1000 };
    static double ms[MAXN];
    if (run(arg)) return -1;
    int n = 0;
    const int64_t start = hs_now_ns();
    while (n < MAXN && (n < 3 || hs_now_ns() - start < (int64_t)(seconds * 1e9))) {
        const int64_t t0 = hs_now_ns();
        if (run(arg)) return -1;
        ms[n++] = (double)(hs_now_ns() - t0) / 1e6;
    }
    qsort(ms, (size_t)n, sizeof(double), cmp_double);
    t->best_gflops = flop / (ms[0] * 1e6);
    t->median_gflops = flop / (ms[n / 2] * 1e6);
    t->iters = n;
    return 0;
}

struct sgemm_args {
    int m, n, k;
    const float *a, *b;
    float *c;
};

static int run_sgemm(void *p)
{
    const struct sgemm_args *g = p;
    return dnnl_sgemm('N', 'T', g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->k, 0.0f, g->c, g->n) ==
                   dnnl_success
               ? 0
               : -1;
}

struct ql_args {
    struct hs_ql_cache *cache;
    const struct hs_ql_weights *w;
    void *src, *acc;
    int rows;
    struct hs_error *err;
};

static int run_ql(void *p)
{
    struct ql_args *q = p;
    return hs__ql_matmul(q->cache, 0, q->w, q->src, q->acc, q->rows, q->err);
}

struct own_args {
    const struct hs_ql_weights *w;
    const void *src;
    int32_t *acc;
    int rows, threads;
};

static int run_own(void *p)
{
    const struct own_args *o = p;
    hs__cpu_qgemm(hs__ql_own_isa(), o->src, o->w->own, o->acc, o->rows, o->w->n, o->w->k,
                  o->threads, NULL);
    return 0;
}

static void print_peak(const char *dtype, const char *call, int m, int n, int k, int threads,
                       int fast, const struct timing *t)
{
    printf("{\"peak\":\"%s\",\"call\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"threads\":%d,"
           "\"fast\":%s,\"gflops\":%.2f,\"median_gflops\":%.2f,\"iters\":%d}\n",
           dtype, call, m, n, k, threads, fast ? "true" : "false", t->best_gflops, t->median_gflops,
           t->iters);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int threads = 2, M = 2048, N = 2048, K = 2048;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc &&
                 sscanf(argv[i + 1], "%d,%d,%d", &M, &N, &K) == 3 && M > 0 && N > 0 && K > 0 &&
                 M <= 16384 && N <= 16384 && K <= 16384)
            i++;
        else {
            fprintf(stderr, "usage: bench_peak [--threads N] [--seconds S] [--size M,N,K]\n");
            return 2;
        }
    }
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    print_machine(threads);
    const double flop = 2.0 * M * N * K;
    const size_t mk = (size_t)M * K, nk = (size_t)N * K;
    const size_t mn_pad = (size_t)(M + HS_QL_ROW_PAD) * N;
    float *a = hs_malloc_aligned(sizeof(float) * mk, 64);
    float *b = hs_malloc_aligned(sizeof(float) * nk, 64);
    float *c = hs_malloc_aligned(sizeof(float) * mn_pad, 64); /* also the s32 / f32 acc */
    void *src = hs_malloc_aligned((size_t)hs__ql_src_bytes(M, K), 64);
    if (!a || !b || !c || !src) {
        fprintf(stderr, "bench_peak: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < mk; i++) a[i] = (float)((int)(i % 13) - 6) * 0.01f;
    for (size_t i = 0; i < nk; i++) b[i] = (float)((int)(i % 7) - 3) * 0.01f;
    memset(src, 1, (size_t)hs__ql_src_bytes(M, K)); /* int8 1, bf16 ~2.4e-38: finite, no NaN */
    int rc = 0;
    struct timing t;
    struct sgemm_args sg = {.m = M, .n = N, .k = K, .a = a, .b = b, .c = c};
    if (time_calls(run_sgemm, &sg, flop, seconds, &t) == 0)
        print_peak("f32", "dnnl_sgemm N,T", M, N, K, threads, 1, &t);
    else {
        fprintf(stderr, "bench_peak: dnnl_sgemm failed\n");
        rc = 1;
    }
    const struct {
        enum hs_dtype dtype;
        const char *call;
    } lanes[] = {{HS_DTYPE_BF16, "dnnl matmul bf16xbf16->f32 (hs__ql_matmul)"},
                 {HS_DTYPE_I8, hs__ql_src_u8() ? "dnnl matmul u8xs8->s32 (hs__ql_matmul)"
                                               : "dnnl matmul s8xs8->s32 (hs__ql_matmul)"}};
    for (size_t l = 0; l < sizeof lanes / sizeof lanes[0]; l++) {
        struct hs_error err = {0};
        struct hs_ql_weights w;
        struct hs_ql_cache *cache = NULL;
        hs_status s = hs__ql_weights_make(lanes[l].dtype, b, N, K, NULL, &w, &err);
        if (!s) s = hs__ql_cache_create(1, &cache, &err);
        struct ql_args q = {.cache = cache, .w = &w, .src = src, .acc = c, .rows = M, .err = &err};
        if (!s && time_calls(run_ql, &q, flop, seconds, &t) == 0)
            print_peak(hs_compute_dtype_name(lanes[l].dtype), lanes[l].call, M, N, K, threads,
                       hs__ql_dtype_fast(lanes[l].dtype), &t);
        else {
            /* no peak line: that dtype's shares stay unmeasured (the engine refuses such a
             * lane too); only a failing f32 GEMM fails the run */
            fprintf(stderr, "bench_peak: %s: %s\n", hs_compute_dtype_name(lanes[l].dtype),
                    err.msg[0] ? err.msg : "failed");
        }
        /* int8 where the engine's own kernel runs the int8 layers (qlinear.c), that kernel too;
         * the summary takes the faster line as the dtype's peak */
        struct own_args o = {&w, src, (int32_t *)(void *)c, M, threads};
        if (!s && w.own && time_calls(run_own, &o, flop, seconds, &t) == 0)
            print_peak(hs_compute_dtype_name(lanes[l].dtype),
                       hs__ql_own_isa() == HS_QGEMM_VNNI512 ? "own vnni u8xs8->s32 (hs__cpu_qgemm)"
                                                            : "own avx2 u8xs8->s32 (hs__cpu_qgemm)",
                       M, N, K, threads, hs__ql_dtype_fast(lanes[l].dtype), &t);
        hs__ql_cache_free(cache);
        hs__ql_weights_free(&w);
    }
    hs_free_aligned(a);
    hs_free_aligned(b);
    hs_free_aligned(c);
    hs_free_aligned(src);
    return rc;
}
