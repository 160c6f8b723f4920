/* CUDA engine: conformance against the CPU fp32 engine on random encoders, stage by stage and
 * for the whole model, within the declared fp16 tolerance; CUDA-graph replay equals direct
 * execution; padding to a longer bucket does not change a sequence's embedding; input checks.
 *
 * Without a GPU (or in a build without CUDA) every GPU test prints "skipped: no GPU" and is
 * skipped; the checks of the no-device behaviour still run.
 *
 * Declared fp16 tolerance (per stage, per token row): cosine >= 0.999 and max |diff| <= 0.05
 * against the CPU fp32 result for the same input; whole model: min cosine >= 0.999, mean
 * >= 0.9999 (the `hetserve verify` defaults for F16). */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#ifdef HS_HAVE_CUDA
#include "engine/cuda/cuda.h"
#include "engine/cuda/cuda_impl.h"
#endif

#define STAGE_COS_MIN  0.999
#define STAGE_ABS_MAX  0.05
#define MODEL_COS_MIN  0.999
#define MODEL_COS_MEAN 0.9999
/* every tiny family checkpoint (tests/data/tiny-*), GPU fp16 against the CPU engine's f32 */
#define FAMILY_COS_MIN 0.9999

static bool have_gpu(void)
{
    static int cached = -1;
    if (cached < 0) {
        cached = hs_engine_kind_devices(hs_engine_kind_find("cuda")) > 0;
        if (!cached) printf("test_cuda: skipped: no GPU\n");
    }
    return cached;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!have_gpu()) {                                                                         \
            printf("%s: skipped: no GPU\n", __func__);                                             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- a random BERT-shaped encoder, fp32 weights in memory ---- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand(void) /* [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

struct toy {
    struct hs_model model;
    float *blocks[64 * HS_W_COUNT];
    int n_blocks;
};

static void fill(struct toy *t, struct hs_stage *st, enum hs_weight_role r, int64_t rows,
                 int64_t cols, float scale, float center)
{
    const int64_t n = rows * cols;
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = center + scale * urand();
    t->blocks[t->n_blocks++] = v;
    struct hs_tensor *w = &st->w[r];
    w->dtype = HS_DTYPE_F32;
    w->ndim = cols > 1 ? 2 : 1;
    w->shape[0] = rows;
    w->shape[1] = cols > 1 ? cols : 0;
    w->data = v;
    w->bytes = (size_t)n * 4;
}

static struct toy *toy_new(int hidden, int heads, int layers, enum hs_pool_mode pool)
{
    struct toy *t = calloc(1, sizeof *t);
    assert_non_null(t);
    struct hs_encoder_dims *d = &t->model.config.dims;
    d->hidden = hidden;
    d->heads = heads;
    d->head_dim = hidden / heads;
    d->intermediate = 4 * hidden;
    d->layers = layers;
    d->vocab = 211;
    d->max_positions = 128;
    d->type_vocab = 2;
    d->ln_eps = 1e-12f;
    d->act = HS_ACT_GELU_ERF;
    d->pool = pool;
    d->normalize = true;
    t->model.config.max_seq_len = 128;
    t->model.name = "toy";
    t->model.n_stages = 1 + 2 * layers + 2;
    t->model.stages = calloc((size_t)t->model.n_stages, sizeof(struct hs_stage));
    assert_non_null(t->model.stages);
    const float ws = 1.0f / sqrtf((float)hidden);
    for (int i = 0; i < t->model.n_stages; i++) {
        struct hs_stage *st = &t->model.stages[i];
        st->dims = d;
        st->layer = -1;
        if (i == 0) {
            st->kind = HS_STAGE_EMBED;
            fill(t, st, HS_W_WORD_EMB, d->vocab, hidden, 0.8f, 0.0f);
            fill(t, st, HS_W_POS_EMB, d->max_positions, hidden, 0.3f, 0.0f);
            fill(t, st, HS_W_TYPE_EMB, d->type_vocab, hidden, 0.3f, 0.0f);
            fill(t, st, HS_W_EMB_LN_G, hidden, 1, 0.2f, 1.0f);
            fill(t, st, HS_W_EMB_LN_B, hidden, 1, 0.1f, 0.0f);
        } else if (i <= 2 * layers) {
            st->layer = (i - 1) / 2;
            if (i % 2 == 1) {
                st->kind = HS_STAGE_ATTN;
                fill(t, st, HS_W_Q, hidden, hidden, 1.5f * ws, 0.0f);
                fill(t, st, HS_W_Q_B, hidden, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_K, hidden, hidden, 1.5f * ws, 0.0f);
                fill(t, st, HS_W_K_B, hidden, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_V, hidden, hidden, ws, 0.0f);
                fill(t, st, HS_W_V_B, hidden, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_ATTN_OUT, hidden, hidden, ws, 0.0f);
                fill(t, st, HS_W_ATTN_OUT_B, hidden, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_ATTN_LN_G, hidden, 1, 0.2f, 1.0f);
                fill(t, st, HS_W_ATTN_LN_B, hidden, 1, 0.1f, 0.0f);
            } else {
                st->kind = HS_STAGE_FFN;
                fill(t, st, HS_W_FFN_IN, d->intermediate, hidden, 1.5f * ws, 0.0f);
                fill(t, st, HS_W_FFN_IN_B, d->intermediate, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_FFN_OUT, hidden, d->intermediate,
                     1.0f / sqrtf((float)d->intermediate), 0.0f);
                fill(t, st, HS_W_FFN_OUT_B, hidden, 1, 0.1f, 0.0f);
                fill(t, st, HS_W_FFN_LN_G, hidden, 1, 0.2f, 1.0f);
                fill(t, st, HS_W_FFN_LN_B, hidden, 1, 0.1f, 0.0f);
            }
        } else if (i == 2 * layers + 1) {
            st->kind = HS_STAGE_POOL;
        } else {
            st->kind = HS_STAGE_NORMALIZE;
        }
        snprintf(st->name, sizeof st->name, "%s%d", hs_stage_kind_name(st->kind), st->layer);
    }
    return t;
}

static void toy_free(struct toy *t)
{
    for (int i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
    free(t->model.stages);
    free(t);
}

/* ---- batches ---- */

struct tbatch {
    struct hs_batch b;
    int32_t ids[4096], lengths[64], offsets[65];
};

static void make_batch(struct tbatch *tb, const int *lens, int n, int bucket, int vocab)
{
    int tok = 0;
    tb->offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < lens[i]; j++)
            tb->ids[tok + j] = (int32_t)((unsigned)(urand() * 1e6f + 2e6f) % (unsigned)vocab);
        tok += lens[i];
        tb->lengths[i] = lens[i];
        tb->offsets[i + 1] = tok;
    }
    tb->b = (struct hs_batch){.n_seqs = n,
                              .seq_max = bucket,
                              .n_tokens = tok,
                              .ids = tb->ids,
                              .type_ids = NULL,
                              .lengths = tb->lengths,
                              .offsets = tb->offsets};
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

/* rows of n floats: every row's cosine and the max abs difference within tolerance */
static void expect_close(const char *what, const float *ref, const float *got, int rows, int n,
                         double cos_min, double abs_max)
{
    double worst_cos = 1.0, worst_abs = 0.0;
    for (int r = 0; r < rows; r++) {
        double c = cosine(ref + (size_t)r * n, got + (size_t)r * n, n);
        if (c < worst_cos || isnan(c)) worst_cos = c;
        for (int j = 0; j < n; j++) {
            double d = fabs((double)ref[(size_t)r * n + j] - got[(size_t)r * n + j]);
            if (d > worst_abs || isnan(d)) worst_abs = d;
        }
    }
    printf("  %-14s rows %4d  min cos %.7f  max |diff| %.5f\n", what, rows, worst_cos, worst_abs);
    if (!(worst_cos >= cos_min) || !(worst_abs <= abs_max))
        fail_msg("%s: min cos %.7f (need %.4f), max |diff| %.5f (need %.3f)", what, worst_cos,
                 cos_min, worst_abs, abs_max);
}

static hs_engine_t make_engine(const char *kind)
{
    struct hs_engine_opts o;
    memset(&o, 0, sizeof o);
    hs_engine_t e = NULL;
    struct hs_error err;
    hs_status s = hs_engine_create(kind, &o, &e, &err);
    if (s) fail_msg("create %s: %s", kind, err.msg);
    return e;
}

/* ---- tests ---- */

static void no_device_behaviour(void **state)
{
    (void)state;
    const struct hs_engine_kind *k = hs_engine_kind_find("cuda");
    assert_non_null(k);
    int n = hs_engine_kind_devices(k);
    assert_true(n >= 0);
    bool built = hs_engine_kind_built(k);
#ifdef HS_HAVE_CUDA
    assert_true(built);
#else
    assert_false(built);
#endif
    if (n == 0) {
        hs_engine_t e = NULL;
        struct hs_error err;
        hs_error_clear(&err);
        assert_int_equal(hs_engine_create("cuda", NULL, &e, &err), HS_STATUS_UNSUPPORTED);
        assert_null(e);
        assert_true(strlen(err.msg) > 0);
    }
}

static void caps_and_dtype(void **state)
{
    (void)state;
    REQUIRE_GPU();
    hs_engine_t e = make_engine("cuda");
    struct hs_engine_caps c;
    hs_engine_caps(e, &c);
    printf("  %s: %s, %s, %d SMs, %lld MiB, %s\n", hs_engine_name(e), c.device, c.isa, c.threads,
           (long long)(c.mem_bytes >> 20), c.gemm);
    assert_string_equal(c.kind, "cuda");
    assert_true(c.dtypes & (1u << HS_DTYPE_F16));
    assert_true(c.threads > 0 && c.mem_bytes > 0);
    struct toy *t = toy_new(64, 2, 1, HS_POOL_MEAN);
    void *prep = NULL;
    struct hs_error err;
    assert_int_equal(hs_engine_stage_prepare(e, &t->model.stages[1], HS_DTYPE_F32, &prep, &err),
                     HS_STATUS_UNSUPPORTED);
    /* an unsupported head size is refused at prepare, not at run time */
    struct hs_encoder_dims odd = t->model.config.dims;
    odd.heads = 2;
    odd.head_dim = 24; /* (8, 16, 32, 64 and 128 run) */
    struct hs_stage st = t->model.stages[1];
    st.dims = &odd;
    assert_int_equal(hs_engine_stage_prepare(e, &st, HS_DTYPE_F16, &prep, &err),
                     HS_STATUS_UNSUPPORTED);
    toy_free(t);
    hs_engine_destroy(e);
}

/* Each stage on the GPU gets exactly the CPU's input for that stage, so errors do not add up. */
static void run_per_stage(int hidden, int heads, enum hs_pool_mode pool)
{
    struct toy *t = toy_new(hidden, heads, 2, pool);
    const struct hs_encoder_dims *d = &t->model.config.dims;
    hs_engine_t cpu = make_engine("cpu"), gpu = make_engine("cuda");
    const int ns = t->model.n_stages;
    void **pc = calloc((size_t)ns, sizeof(void *)), **pg = calloc((size_t)ns, sizeof(void *));
    struct hs_error err;
    for (int i = 0; i < ns; i++) {
        if (hs_engine_stage_prepare(cpu, &t->model.stages[i], HS_DTYPE_F32, &pc[i], &err))
            fail_msg("cpu prepare: %s", err.msg);
        if (hs_engine_stage_prepare(gpu, &t->model.stages[i], HS_DTYPE_F16, &pg[i], &err))
            fail_msg("cuda prepare: %s", err.msg);
    }
    struct hs_ws_spec spec = {.batch_max = 8, .tokens_max = 8 * 96, .seq_max = 96, .dims = d};
    void *wc = NULL, *wg = NULL;
    if (hs_engine_ws_create(cpu, &spec, &wc, &err)) fail_msg("cpu ws: %s", err.msg);
    if (hs_engine_ws_create(gpu, &spec, &wg, &err)) fail_msg("cuda ws: %s", err.msg);

    /* lengths around the attention tiles (32 keys, 64 queries), bucket longer than all */
    static const int lens[] = {1, 5, 31, 33, 64, 65, 80};
    struct tbatch *tb = malloc(sizeof *tb);
    make_batch(tb, lens, 7, 96, d->vocab);
    const int H = d->hidden, T = tb->b.n_tokens, B = tb->b.n_seqs;
    float *in = malloc(sizeof(float) * (size_t)T * H), *ref = malloc(sizeof(float) * (size_t)T * H),
          *got = malloc(sizeof(float) * (size_t)T * H);
    assert_int_equal(hs_engine_batch_begin(cpu, wc, &tb->b, &err), HS_STATUS_OK);
    printf(" per stage, hidden %d, heads %d (head size %d), %s pooling:\n", hidden, heads,
           hidden / heads, pool == HS_POOL_CLS ? "CLS" : "mean");
    for (int i = 0; i < ns; i++) {
        const struct hs_stage *st = &t->model.stages[i];
        const bool reads_pooled = st->kind == HS_STAGE_NORMALIZE;
        const bool writes_pooled = st->kind == HS_STAGE_POOL || st->kind == HS_STAGE_NORMALIZE;
        const enum hs_act_buf ib = reads_pooled ? HS_ACT_BUF_POOLED : HS_ACT_BUF_HIDDEN;
        const enum hs_act_buf ob = writes_pooled ? HS_ACT_BUF_POOLED : HS_ACT_BUF_HIDDEN;
        if (i > 0) assert_int_equal(hs_engine_act_read(cpu, wc, ib, in, &err), HS_STATUS_OK);
        if (hs_engine_run_stage(cpu, wc, st, pc[i], &err))
            fail_msg("cpu %s: %s", st->name, err.msg);
        assert_int_equal(hs_engine_act_read(cpu, wc, ob, ref, &err), HS_STATUS_OK);

        if (hs_engine_batch_begin(gpu, wg, &tb->b, &err)) fail_msg("cuda begin: %s", err.msg);
        if (i > 0 && hs_engine_act_write(gpu, wg, ib, in, &err))
            fail_msg("cuda act_write: %s", err.msg);
        if (hs_engine_run_stage(gpu, wg, st, pg[i], &err))
            fail_msg("cuda %s: %s", st->name, err.msg);
        if (hs_engine_act_read(gpu, wg, ob, got, &err)) fail_msg("cuda %s: %s", st->name, err.msg);
        expect_close(st->name, ref, got, writes_pooled ? B : T, H, STAGE_COS_MIN, STAGE_ABS_MAX);
    }
    free(in);
    free(ref);
    free(got);
    free(tb);
    hs_engine_ws_destroy(cpu, wc);
    hs_engine_ws_destroy(gpu, wg);
    for (int i = 0; i < ns; i++) {
        hs_engine_stage_release(cpu, pc[i]);
        hs_engine_stage_release(gpu, pg[i]);
    }
    free(pc);
    free(pg);
    hs_engine_destroy(cpu);
    hs_engine_destroy(gpu);
    toy_free(t);
}

static void per_stage_head32(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_per_stage(128, 4, HS_POOL_MEAN);
}

static void per_stage_head64(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_per_stage(256, 4, HS_POOL_CLS);
}

static struct hs_executor *make_exec(struct toy *t, hs_engine_t e, enum hs_dtype dt, int batch_max)
{
    struct hs_placement plan;
    hs_placement_single(&t->model, e, &plan);
    struct hs_executor_opts o = {.batch_max = batch_max,
                                 .tokens_max = batch_max * 128,
                                 .seq_max = 128,
                                 .slots = 1,
                                 .dtype = dt};
    struct hs_executor *x = NULL;
    struct hs_error err;
    if (hs_executor_create(&t->model, &plan, &o, &x, &err)) fail_msg("executor: %s", err.msg);
    return x;
}

/* Whole model: CPU fp32 vs GPU fp16, then graph replay == direct run, then padding invariance. */
static void whole_model(void **state)
{
    (void)state;
    REQUIRE_GPU();
    struct toy *t = toy_new(384, 12, 6, HS_POOL_MEAN); /* MiniLM's shape, random weights */
    const int H = 384;
    hs_engine_t cpu = make_engine("cpu"), gpu = make_engine("cuda");
    struct hs_executor *xc = make_exec(t, cpu, HS_DTYPE_F32, 32);
    struct hs_executor *xg = make_exec(t, gpu, HS_DTYPE_F16, 32);
    static const int lens[] = {7, 12, 128, 3, 40, 99, 16, 1, 64, 65, 2, 30};
    const int n = 12;
    struct tbatch *tb = malloc(sizeof *tb);
    make_batch(tb, lens, n, 128, t->model.config.dims.vocab);
    float *ref = malloc(sizeof(float) * n * H), *got = malloc(sizeof(float) * n * H),
          *again = malloc(sizeof(float) * n * H);
    struct hs_error err;
    if (hs_executor_run(xc, 0, &tb->b, ref, NULL, &err)) fail_msg("cpu run: %s", err.msg);
#ifdef HS_HAVE_CUDA
    struct hs_cuda_counters c0, c1;
    hs_engine_cuda_counters(&c0);
#endif
    /* first run direct, second captures, third and fourth replay */
    for (int rep = 0; rep < 4; rep++) {
        float *dst = rep == 0 ? got : again;
        if (hs_executor_run(xg, 0, &tb->b, dst, NULL, &err)) fail_msg("cuda run: %s", err.msg);
        if (rep > 0)
            for (int i = 0; i < n * H; i++)
                if (fabsf(got[i] - again[i]) > 1e-6f)
                    fail_msg("run %d differs from the first at %d: %g vs %g", rep, i, got[i],
                             again[i]);
    }
#ifdef HS_HAVE_CUDA
    hs_engine_cuda_counters(&c1);
    printf("  graphs captured %lld, launches %lld, direct stage runs %lld, graph memory %lld KiB\n",
           (long long)(c1.graphs_captured - c0.graphs_captured),
           (long long)(c1.graph_launches - c0.graph_launches),
           (long long)(c1.direct_runs - c0.direct_runs),
           (long long)((c1.graph_mem_bytes - c0.graph_mem_bytes) >> 10));
    const char *g = getenv("HS_CUDA_GRAPHS");
    if (!g || strcmp(g, "0") != 0) {
        assert_true(c1.graphs_captured - c0.graphs_captured >= 1);
        assert_true(c1.graph_launches - c0.graph_launches >= 2);
    }
#endif
    double mn = 1.0, sum = 0.0;
    for (int i = 0; i < n; i++) {
        double c = cosine(ref + (size_t)i * H, got + (size_t)i * H, H);
        if (c < mn || isnan(c)) mn = c;
        sum += c;
    }
    printf("  whole model: min cos %.7f, mean cos %.7f\n", mn, sum / n);
    assert_true(mn >= MODEL_COS_MIN);
    assert_true(sum / n >= MODEL_COS_MEAN);

    /* sequence 0 alone in its own bucket vs inside the 128 bucket */
    struct tbatch *one = malloc(sizeof *one);
    *one = *tb;
    one->b.n_seqs = 1;
    one->b.n_tokens = lens[0];
    one->b.seq_max = 16;
    one->b.ids = one->ids;
    one->b.lengths = one->lengths;
    one->b.offsets = one->offsets;
    one->offsets[1] = lens[0];
    if (hs_executor_run(xg, 0, &one->b, again, NULL, &err)) fail_msg("cuda run: %s", err.msg);
    double c = cosine(got, again, H);
    printf("  padding invariance: cos %.7f\n", c);
    assert_true(c >= 0.9999);

    free(one);
    free(ref);
    free(got);
    free(again);
    free(tb);
    hs_executor_free(xc);
    hs_executor_free(xg);
    hs_engine_destroy(cpu);
    hs_engine_destroy(gpu);
    toy_free(t);
}

/* One tiny checkpoint: every stage prepared on the GPU (the engine declares every feature the
 * model's stages need), the whole model on a batch of lengths around the attention tiles and the
 * model's limit, twice (direct, then captured), each sequence's embedding against the CPU f32
 * engine's. Returns the worst cosine. */
#define FAMILY_SKIPPED 2.0 /* check_family: the engine lacks a feature the checkpoint needs */

static double check_family(const char *dir)
{
    struct hs_error err;
    hs_error_clear(&err);
    struct hs_model *m = NULL;
    if (hs_model_load(dir, &m, &err)) fail_msg("%s: %s", dir, err.msg);
    hs_engine_t cpu = make_engine("cpu"), gpu = make_engine("cuda");
    struct hs_engine_caps caps;
    hs_engine_caps(gpu, &caps);
    uint32_t need = 0;
    for (int i = 0; i < m->n_stages; i++) need |= hs_stage_features(&m->stages[i]);
    if (need & ~caps.features) { /* refused by capability at load, as a lane would be */
        char names[512];
        printf("  %s: skipped, cuda does not declare %s\n", dir,
               hs_stage_features_str(need & ~caps.features, names, sizeof names));
        hs_engine_destroy(cpu);
        hs_engine_destroy(gpu);
        hs_model_free(m);
        return FAMILY_SKIPPED;
    }
    const struct hs_encoder_dims *d = &m->config.dims;
    int limit = m->config.max_seq_len;
    if (limit > d->max_positions - d->pos_offset) limit = d->max_positions - d->pos_offset;
#ifdef HS_CUDA_EMU /* the emulated engine (cuda_emu): fewer, shorter sequences, same paths */
    static const int want[] = {1, 5, 17, 33, 40};
#else
    static const int want[] = {1, 2, 5, 16, 17, 31, 33, 40, 64, 65, 100, 128};
#endif
    const int n_want = (int)(sizeof want / sizeof want[0]);
    int lens[12], n = 0;
    for (int i = 0; i < n_want; i++) lens[n++] = want[i] < limit ? want[i] : limit;
    const int H = d->hidden;
    struct hs_placement pc, pg;
    hs_placement_single(m, cpu, &pc);
    hs_placement_single(m, gpu, &pg);
    struct hs_executor_opts o = {
        .batch_max = n, .tokens_max = n * limit, .seq_max = limit, .slots = 1};
    struct hs_executor *xc = NULL, *xg = NULL;
    o.dtype = HS_DTYPE_F32;
    if (hs_executor_create(m, &pc, &o, &xc, &err)) fail_msg("%s cpu: %s", dir, err.msg);
    o.dtype = HS_DTYPE_F16;
    if (hs_executor_create(m, &pg, &o, &xg, &err)) fail_msg("%s cuda: %s", dir, err.msg);
    struct tbatch *tb = malloc(sizeof *tb);
    assert_non_null(tb);
    make_batch(tb, lens, n, limit, d->vocab);
    float *ref = malloc(sizeof(float) * (size_t)n * H),
          *got = malloc(sizeof(float) * (size_t)n * H);
    assert_non_null(ref);
    assert_non_null(got);
    if (hs_executor_run(xc, 0, &tb->b, ref, NULL, &err)) fail_msg("%s cpu: %s", dir, err.msg);
    double mn = 1.0, sum = 0.0;
    int worst = 0;
    for (int rep = 0; rep < 2; rep++) {
        if (hs_executor_run(xg, 0, &tb->b, got, NULL, &err)) fail_msg("%s cuda: %s", dir, err.msg);
        for (int i = 0; i < n; i++) {
            const double c = cosine(ref + (size_t)i * H, got + (size_t)i * H, H);
            if (c < mn || isnan(c)) mn = c, worst = i;
            sum += c;
        }
    }
    printf("  %-28s %2d seqs (len %d..%d): min cos %.7f (seq %d, len %d), mean %.7f\n", m->name, n,
           lens[0], lens[n - 1], mn, worst, lens[worst], sum / (2 * n));
    free(ref);
    free(got);
    free(tb);
    hs_executor_free(xc);
    hs_executor_free(xg);
    hs_engine_destroy(cpu);
    hs_engine_destroy(gpu);
    hs_model_free(m);
    return mn;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void tiny_families_match_cpu(void **state)
{
    (void)state;
    REQUIRE_GPU();
    char data[1024];
    snprintf(data, sizeof data, "%s", hs_test_path("tests/data"));
    DIR *dir = opendir(data);
    assert_non_null(dir);
    char *names[64];
    int n = 0;
    for (struct dirent *de; (de = readdir(dir)) && n < 64;)
        if (!strncmp(de->d_name, "tiny-", 5)) names[n++] = strdup(de->d_name);
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], name_cmp);
    assert_true(n >= 8);
    int failed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", data, names[i]);
        const double mn = check_family(path);
        if (mn == FAMILY_SKIPPED) {
            skipped++;
        } else if (!(mn >= FAMILY_COS_MIN)) {
            printf("  %s: FAIL (min cos %.7f < %.4f)\n", names[i], mn, FAMILY_COS_MIN);
            failed++;
        }
        free(names[i]);
    }
    printf("  tiny families: %d checked, %d skipped by capability, %d below min cos %.4f\n",
           n - skipped, skipped, failed, FAMILY_COS_MIN);
    assert_true(n - skipped >= 8);
    assert_int_equal(failed, 0);
}

/* ---- the kernels one by one against host references (cuda_kernel_checks.h) ---- */
#ifdef HS_HAVE_CUDA
#include "cuda_kernel_checks.h"
#else
static void kernel_attention(void **state)
{
    (void)state;
    REQUIRE_GPU();
}
static void kernel_qk_rope(void **state)
{
    (void)state;
    REQUIRE_GPU();
}
static void kernel_norms(void **state)
{
    (void)state;
    REQUIRE_GPU();
}
static void kernel_glu_pool(void **state)
{
    (void)state;
    REQUIRE_GPU();
}
#endif

static void bad_input(void **state)
{
    (void)state;
    REQUIRE_GPU();
    struct toy *t = toy_new(64, 2, 1, HS_POOL_MEAN);
    hs_engine_t gpu = make_engine("cuda");
    struct hs_ws_spec spec = {
        .batch_max = 2, .tokens_max = 64, .seq_max = 32, .dims = &t->model.config.dims};
    void *ws = NULL;
    struct hs_error err;
    assert_int_equal(hs_engine_ws_create(gpu, &spec, &ws, &err), HS_STATUS_OK);
    static const int lens[] = {4, 4, 4};
    struct tbatch *tb = malloc(sizeof *tb);
    make_batch(tb, lens, 3, 8, t->model.config.dims.vocab); /* 3 > batch_max */
    assert_int_equal(hs_engine_batch_begin(gpu, ws, &tb->b, &err), HS_STATUS_INVALID_ARGUMENT);
    make_batch(tb, lens, 2, 64, t->model.config.dims.vocab); /* bucket > seq_max */
    assert_int_equal(hs_engine_batch_begin(gpu, ws, &tb->b, &err), HS_STATUS_INVALID_ARGUMENT);
    make_batch(tb, lens, 2, 8, t->model.config.dims.vocab);
    tb->ids[3] = t->model.config.dims.vocab; /* out of the vocabulary */
    assert_int_equal(hs_engine_batch_begin(gpu, ws, &tb->b, &err), HS_STATUS_INVALID_INPUT);
    float out[64];
    assert_int_equal(hs_engine_act_read(gpu, ws, HS_ACT_BUF_POOLED, out, &err),
                     HS_STATUS_INVALID_ARGUMENT); /* no batch begun */
    free(tb);
    hs_engine_ws_destroy(gpu, ws);
    hs_engine_destroy(gpu);
    toy_free(t);
}

int main(void)
{
#ifdef HS_CUDA_EMU /* HS_TEST_FILTER: the tests to run (a cmocka pattern), e.g. "tiny_*" */
    if (getenv("HS_TEST_FILTER")) cmocka_set_test_filter(getenv("HS_TEST_FILTER"));
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_device_behaviour),
        cmocka_unit_test(caps_and_dtype),
        cmocka_unit_test(per_stage_head32),
        cmocka_unit_test(per_stage_head64),
        cmocka_unit_test(whole_model),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(kernel_attention),
        cmocka_unit_test(kernel_qk_rope),
        cmocka_unit_test(kernel_norms),
        cmocka_unit_test(kernel_glu_pool),
        cmocka_unit_test(tiny_families_match_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
