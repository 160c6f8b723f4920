/* Engine conformance: one suite for every registered engine kind x compute dtype present on this
 * machine (engine.h registry). For each it checks, on random encoders against the naive
 * double-precision reference (refmodel.h):
 *   - the capability claims, per device: every stage kind is supported in each dtype the device
 *     claims (its caps, the claims verify and serve read), an unclaimed
 *     dtype is refused at prepare (never run wrongly);
 *   - every stage: the hidden state after embed and after each attention and FFN stage, run
 *     stage by stage through the engine interface, within the dtype's declared tolerance;
 *   - the whole model: pooled, normalized embeddings within the dtype's tolerance;
 *   - pairs, unnormalized: token types 1 on a second segment and a head that reads the first
 *     token as is (a cross-encoder's), by value against the CPU engine's f32 run;
 *   - batch invariance: a sequence's result alone equals its result inside a batch;
 *   - bucket-padding invariance: the same batch shaped to a longer bucket gives the same result;
 *   - fault injection: an injected failure fails that batch with HS_STATUS_ENGINE, counts an
 *     error, and the next batch succeeds;
 *   - statistics: batches, sequences and tokens counted exactly, busy time > 0;
 *   - the architecture table's blocks (rotary, gated FFN, pre-norm, RMSNorm, causal and
 *     grouped-query attention, local windows, qk-norm, final norm, last-token pooling): matched
 *     where the engine declares them, refused at load, named, where it does not;
 *   - every family's tiny checkpoint (tests/tiny_families.h) against its transformers reference
 *     embeddings: matched within the dtype's tolerance, or skipped by capability with the missing
 *     features named; "# family lane dtype min mean" lines are the evidence of docs/MODELS.md.
 * And the guards: an engine that runs no stage here (remote's shape: caps and nothing else) is
 * refused by the executor and by every per-batch wrapper with a clear error, never called
 * through a NULL method; an interface that claims stages without their methods is refused at
 * wrap.
 * A kind whose device is absent (cuda without a GPU) prints one line and skips. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/verify.h"
#include "refmodel.h"
#include "tiny_families.h"

/* What a dtype promises against the fp64 reference. Stage: worst cosine of a token's hidden
 * state; model: worst cosine of a pooled embedding; invariance: largest |difference| allowed
 * between the same sequence computed in two batches. */
struct tolerance {
    double stage_cos, model_cos, invariance;
};

static struct tolerance tolerance_of(enum hs_dtype dt)
{
    switch (dt) {
    case HS_DTYPE_F32:
        return (struct tolerance){0.99999, 0.99999, 1e-5};
    case HS_DTYPE_F16:
        return (struct tolerance){0.999, 0.999, 2e-3};
    case HS_DTYPE_BF16:
        return (struct tolerance){0.9999, 0.9999, 1e-5};
    /* int8 GEMMs accumulate in integers: per-token scales keep a sequence's result independent
     * of its batch, so invariance stays tight while agreement is that of 8-bit products */
    case HS_DTYPE_I8:
        return (struct tolerance){0.999, 0.9995, 1e-5};
    default:
        return (struct tolerance){0.99, 0.99, 1e-3};
    }
}

struct lane {
    const struct hs_engine_kind *kind;
    int device;
    enum hs_dtype dtype;
    char label[48];
};

#define MAX_LANES 16
static struct lane lanes[MAX_LANES];
static int n_lanes;

/* Every (kind, device, dtype) that device claims (hs_engine_device_caps); prints a line for each
 * kind, device or dtype of the kind skipped. */
static void find_lanes(void)
{
    if (n_lanes) return;
    for (int i = 0; i < hs_engine_kind_count(); i++) {
        const struct hs_engine_kind *k = hs_engine_kind_at(i);
        if (!hs_engine_kind_built(k)) {
            printf("conformance %s: skipped: not built into this binary\n", k->name);
            continue;
        }
        if (hs_engine_kind_devices(k) == 0) {
            printf("conformance %s: skipped: no device\n", k->name);
            continue;
        }
        for (int dev = 0; dev < hs_engine_kind_devices(k); dev++) {
            /* the device's own claims, as verify and serve read them */
            struct hs_engine_caps caps;
            struct hs_error err = {0};
            if (hs_engine_device_caps(k, dev, NULL, &caps, &err)) {
                printf("conformance %s%d: skipped: %s\n", k->name, dev, err.msg);
                continue;
            }
            if (!caps.stages) { /* remote: tests/cluster compares its workers' answers */
                printf("conformance %s%d: skipped: runs no stages on this machine\n", k->name, dev);
                continue;
            }
            for (int d = 0; d < HS_DTYPE_COUNT && n_lanes < MAX_LANES; d++) {
                if (!((k->dtypes | caps.dtypes) & (1u << d))) continue;
                if (!(caps.dtypes & (1u << d))) {
                    printf("conformance %s%d %s: skipped: device %s does not claim it\n", k->name,
                           dev, hs_compute_dtype_name((enum hs_dtype)d), caps.device);
                    continue;
                }
                struct lane *l = &lanes[n_lanes++];
                l->kind = k;
                l->device = dev;
                l->dtype = (enum hs_dtype)d;
                snprintf(l->label, sizeof l->label, "%s%d %s", k->name, dev,
                         hs_compute_dtype_name((enum hs_dtype)d));
            }
        }
    }
}

static hs_engine_t make(const struct lane *l)
{
    hs_engine_t e = NULL;
    struct hs_error err = {0};
    if (hs_engine_create(l->kind->name, &(struct hs_engine_opts){.threads = 2, .device = l->device},
                         &e, &err))
        fail_msg("%s: create: %s", l->label, err.msg);
    return e;
}

struct batch {
    int32_t ids[4096], lengths[64], offsets[65];
    struct hs_batch b;
};

static void make_batch(struct batch *bt, const int *lens, int n, int seq_max, int vocab)
{
    bt->offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        bt->lengths[i] = lens[i];
        bt->offsets[i + 1] = bt->offsets[i] + lens[i];
    }
    for (int t = 0; t < bt->offsets[n]; t++) bt->ids[t] = rand_id(vocab);
    bt->b = (struct hs_batch){.n_seqs = n,
                              .seq_max = seq_max,
                              .n_tokens = bt->offsets[n],
                              .ids = bt->ids,
                              .lengths = bt->lengths,
                              .offsets = bt->offsets};
}

/* ---- the checks ---- */

static void capability_claims(void **state)
{
    (void)state;
    find_lanes();
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    for (int i = 0; i < n_lanes; i++) {
        hs_engine_t e = make(&lanes[i]);
        struct hs_engine_caps caps;
        hs_engine_caps(e, &caps);
        assert_true(caps.dtypes & (1u << lanes[i].dtype));
        /* a device claims nothing its kind does not offer (configs are checked against the
         * kind's set where no device is present) */
        if (caps.dtypes & ~lanes[i].kind->dtypes)
            fail_msg("%s: device claims dtypes 0x%x beyond its kind's 0x%x", lanes[i].label,
                     caps.dtypes, lanes[i].kind->dtypes);
        for (int s = 0; s < rm->model.n_stages; s++) {
            const struct hs_stage *st = &rm->model.stages[s];
            assert_true(hs_engine_supports(e, st->kind, lanes[i].dtype, 1, 16));
            void *prep = NULL;
            struct hs_error err = {0};
            if (hs_engine_stage_prepare(e, st, lanes[i].dtype, &prep, &err))
                fail_msg("%s: prepare %s: %s", lanes[i].label, st->name, err.msg);
            hs_engine_stage_release(e, prep);
        }
        /* a dtype the engine does not claim is refused, not run */
        for (int d = 0; d < HS_DTYPE_COUNT; d++) {
            if (caps.dtypes & (1u << d)) continue;
            void *prep = NULL;
            struct hs_error err = {0};
            assert_int_equal(
                hs_engine_stage_prepare(e, &rm->model.stages[1], (enum hs_dtype)d, &prep, &err),
                HS_STATUS_UNSUPPORTED);
            assert_null(prep);
        }
        hs_engine_destroy(e);
    }
    rand_model_free(rm);
}

/* Runs the model stage by stage through the engine interface and compares the hidden state
 * after each stage with the reference. */
static void check_stages(const struct lane *l, struct rand_model *rm, const int *lens, int n)
{
    const struct tolerance tol = tolerance_of(l->dtype);
    const int H = rm->model.config.dims.hidden, S = rm->model.n_stages;
    hs_engine_t e = make(l);
    struct hs_error err = {0};
    void **prep = calloc((size_t)S, sizeof(void *));
    for (int s = 0; s < S; s++)
        if (hs_engine_stage_prepare(e, &rm->model.stages[s], l->dtype, &prep[s], &err))
            fail_msg("%s: prepare: %s", l->label, err.msg);
    struct batch *bt = calloc(1, sizeof *bt);
    make_batch(bt, lens, n, 160, rm->model.config.dims.vocab);
    struct hs_ws_spec spec = {.batch_max = n,
                              .tokens_max = bt->b.n_tokens,
                              .seq_max = 160,
                              .dims = &rm->model.config.dims};
    void *ws = NULL;
    if (hs_engine_ws_create(e, &spec, &ws, &err)) fail_msg("%s: ws: %s", l->label, err.msg);
    float *hidden = malloc(sizeof(float) * (size_t)bt->b.n_tokens * H);
    double out[1024];
    /* the reference's hidden states after every stage, for every sequence, computed once */
    double **ref = calloc((size_t)n, sizeof(double *));
    for (int q = 0; q < n; q++) {
        ref[q] = malloc(sizeof(double) * (size_t)S * lens[q] * H);
        ref_encode(rm, bt->ids + bt->offsets[q], lens[q], out, ref[q]);
    }
    assert_int_equal(hs_engine_batch_begin(e, ws, &bt->b, &err), 0);
    for (int s = 0; s + 2 < S; s++) { /* embed .. last FFN */
        if (hs_engine_run_stage(e, ws, &rm->model.stages[s], prep[s], &err))
            fail_msg("%s: %s: %s", l->label, rm->model.stages[s].name, err.msg);
        assert_int_equal(hs_engine_act_read(e, ws, HS_ACT_BUF_HIDDEN, hidden, &err), 0);
        if (rm->model.stages[s].kind == HS_STAGE_FINAL_NORM) continue; /* (the model check's) */
        for (int q = 0; q < n; q++) {
            for (int t = 0; t < lens[q]; t++) {
                double c = cosine_fd(hidden + (size_t)(bt->offsets[q] + t) * H,
                                     ref[q] + ((size_t)s * lens[q] + t) * H, H);
                if (!(c >= tol.stage_cos))
                    fail_msg("%s: after %s, sequence %d token %d: cosine %.6f < %.6f", l->label,
                             rm->model.stages[s].name, q, t, c, tol.stage_cos);
            }
        }
    }
    hs_engine_ws_destroy(e, ws);
    for (int s = 0; s < S; s++) hs_engine_stage_release(e, prep[s]);
    for (int q = 0; q < n; q++) free(ref[q]);
    free(prep), free(bt), free(hidden), free(ref);
    hs_engine_destroy(e);
}

static void every_stage_matches_reference(void **state)
{
    (void)state;
    find_lanes();
    for (int i = 0; i < n_lanes; i++) {
        struct rand_model *rm = rand_model_new(64, 4, 128, 2, HS_POOL_MEAN, HS_DTYPE_F32);
        const int lens[] = {1, 9, 40, 3};
        check_stages(&lanes[i], rm, lens, 4);
        rand_model_free(rm);
    }
}

/* Whole model through the executor: reference agreement, batch and bucket invariance, stats,
 * and an injected fault. */
static void check_model(const struct lane *l, struct rand_model *rm, const int *lens, int n)
{
    const struct tolerance tol = tolerance_of(l->dtype);
    const int H = rm->model.config.dims.hidden;
    hs_engine_t e = make(l);
    struct hs_error err = {0};
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = n, .seq_max = 160, .dtype = l->dtype};
    if (hs_executor_create(&rm->model, &plan, &xo, &x, &err))
        fail_msg("%s: executor: %s", l->label, err.msg);
    struct batch *bt = calloc(1, sizeof *bt), *one = calloc(1, sizeof *one);
    int longest = 0;
    for (int i = 0; i < n; i++) longest = lens[i] > longest ? lens[i] : longest;
    make_batch(bt, lens, n, 160, rm->model.config.dims.vocab);
    float *batched = malloc(sizeof(float) * (size_t)n * H), *again = malloc(sizeof(float) * n * H);
    float alone[1024];
    double ref[1024];
    struct hs_engine_stats s0, s1;
    hs_engine_stats(e, &s0);
    if (hs_executor_run(x, 0, &bt->b, batched, NULL, &err))
        fail_msg("%s: run: %s", l->label, err.msg);
    hs_engine_stats(e, &s1);
    assert_int_equal(s1.batches - s0.batches, 1);
    assert_int_equal(s1.sequences - s0.sequences, n);
    assert_int_equal(s1.tokens - s0.tokens, bt->b.n_tokens);
    assert_true(s1.busy_ns > s0.busy_ns);
    assert_int_equal(s1.errors, s0.errors);

    for (int i = 0; i < n; i++) {
        ref_encode(rm, bt->ids + bt->offsets[i], lens[i], ref, NULL);
        double c = cosine_fd(batched + (size_t)i * H, ref, H);
        if (!(c >= tol.model_cos))
            fail_msg("%s: sequence %d (%d tokens): cosine to reference %.6f < %.6f", l->label, i,
                     lens[i], c, tol.model_cos);
        /* the same sequence alone */
        memcpy(one->ids, bt->ids + bt->offsets[i], sizeof(int32_t) * (size_t)lens[i]);
        one->lengths[0] = lens[i];
        one->offsets[0] = 0;
        one->offsets[1] = lens[i];
        one->b = (struct hs_batch){.n_seqs = 1,
                                   .seq_max = 160,
                                   .n_tokens = lens[i],
                                   .ids = one->ids,
                                   .lengths = one->lengths,
                                   .offsets = one->offsets};
        if (hs_executor_run(x, 0, &one->b, alone, NULL, &err))
            fail_msg("%s: run alone: %s", l->label, err.msg);
        for (int j = 0; j < H; j++)
            if (!(fabsf(alone[j] - batched[(size_t)i * H + j]) <= tol.invariance))
                fail_msg("%s: batch invariance, sequence %d dim %d: %g alone, %g batched", l->label,
                         i, j, alone[j], batched[(size_t)i * H + j]);
    }
    /* the same batch shaped to its exact longest length instead of the 160 bucket */
    bt->b.seq_max = longest;
    if (hs_executor_run(x, 0, &bt->b, again, NULL, &err))
        fail_msg("%s: run at bucket %d: %s", l->label, longest, err.msg);
    for (int j = 0; j < n * H; j++)
        if (!(fabsf(again[j] - batched[j]) <= tol.invariance))
            fail_msg("%s: bucket invariance at %d: %g vs %g", l->label, j, again[j], batched[j]);
    bt->b.seq_max = 160;

    /* an injected fault fails exactly one batch */
    hs_engine_set_fault(e, &(struct hs_engine_fault){.fail_next = 1});
    hs_engine_stats(e, &s0);
    assert_int_equal(hs_executor_run(x, 0, &bt->b, again, NULL, &err), HS_STATUS_ENGINE);
    hs_engine_stats(e, &s1);
    assert_int_equal(s1.errors - s0.errors, 1);
    if (hs_executor_run(x, 0, &bt->b, again, NULL, &err))
        fail_msg("%s: run after the fault: %s", l->label, err.msg);
    for (int j = 0; j < n * H; j++) assert_true(fabsf(again[j] - batched[j]) <= tol.invariance);

    free(bt), free(one), free(batched), free(again);
    hs_executor_free(x);
    hs_engine_destroy(e);
}

static void whole_model_mean_pooling(void **state)
{
    (void)state;
    find_lanes();
    for (int i = 0; i < n_lanes; i++) {
        struct rand_model *rm = rand_model_new(64, 4, 128, 2, HS_POOL_MEAN, HS_DTYPE_F32);
        const int lens[] = {1, 7, 16, 33, 128, 3};
        check_model(&lanes[i], rm, lens, 6);
        rand_model_free(rm);
    }
}

static void whole_model_cls_f16_weights_head64(void **state)
{
    (void)state;
    find_lanes();
    for (int i = 0; i < n_lanes; i++) {
        struct rand_model *rm = rand_model_new(128, 2, 256, 2, HS_POOL_CLS, HS_DTYPE_F16);
        const int lens[] = {5, 150, 2, 64};
        check_model(&lanes[i], rm, lens, 4);
        rand_model_free(rm);
    }
}

/* One whole-model run of b on lane l through the executor: out[n_seqs * hidden]. head (may be
 * NULL): the stages before the last run on it instead, the last (normalize) alone on l. */
static void run_lane(const struct lane *l, const struct lane *head, struct rand_model *rm,
                     const struct hs_batch *b, float *out)
{
    hs_engine_t e = make(l), h = head ? make(head) : NULL;
    struct hs_error err = {0};
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    for (int s = 0; h && s + 1 < rm->model.n_stages; s++) plan.engine[s] = h;
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = b->n_seqs, .seq_max = 160, .dtype = l->dtype};
    if (hs_executor_create(&rm->model, &plan, &xo, &x, &err))
        fail_msg("%s: executor: %s", l->label, err.msg);
    if (hs_executor_run(x, 0, b, out, NULL, &err)) fail_msg("%s: run: %s", l->label, err.msg);
    hs_executor_free(x);
    hs_engine_destroy(e);
    if (h) hs_engine_destroy(h);
}

/* Relative distance |a - b| / |b| of two vectors. */
static double rel_dist(const float *a, const float *b, int n)
{
    double d = 0, w = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        w += (double)b[i] * b[i];
    }
    return sqrt(d / (w > 0 ? w : 1));
}

/* A cross-encoder's shape: pairs (token types 1 on the second segment, hs_batch.type_ids) and a
 * head that reads the first token unnormalized (dims.normalize false). Every lane against the
 * CPU engine's f32 run (the reranker goldens hold that one to transformers'), by value, not
 * cosine: a lane that drops or misplaces the token types, or normalizes what the model leaves
 * alone, is off in direction or in length. */
static void pairs_unnormalized_match_cpu_f32(void **state)
{
    (void)state;
    find_lanes();
    const struct lane *cpu = NULL;
    for (int i = 0; i < n_lanes && !cpu; i++)
        if (!strcmp(lanes[i].kind->name, "cpu") && lanes[i].dtype == HS_DTYPE_F32) cpu = &lanes[i];
    assert_non_null(cpu);
    struct rand_model *rm = rand_model_new(64, 4, 128, 2, HS_POOL_CLS, HS_DTYPE_F32);
    rm->model.config.dims.normalize = false;
    enum { N = 4, H = 64 };
    const int lens[N] = {12, 5, 40, 1}, first[N] = {4, 2, 31, 1}; /* tokens of the first text */
    struct batch *bt = calloc(1, sizeof *bt);
    int32_t *types = calloc(4096, sizeof *types);
    make_batch(bt, lens, N, 160, rm->model.config.dims.vocab);
    for (int q = 0; q < N; q++)
        for (int t = 0; t < lens[q]; t++) types[bt->offsets[q] + t] = t >= first[q];
    float want[N * H], untyped[N * H], got[N * H];
    run_lane(cpu, NULL, rm, &bt->b, untyped);
    bt->b.type_ids = types;
    run_lane(cpu, NULL, rm, &bt->b, want);
    /* the case can fail: the types move the result, and it is not unit length */
    assert_true(rel_dist(untyped, want, H) > 0.05);
    double norm = 0;
    for (int j = 0; j < H; j++) norm += (double)want[j] * want[j];
    assert_true(fabs(sqrt(norm) - 1.0) > 0.5);
    for (int i = 0; i < n_lanes; i++) {
        const struct tolerance tol = tolerance_of(lanes[i].dtype);
        /* two results each within the dtype's angle of the truth, lengths alike */
        const double allowed = 2.0 * sqrt(2.0 * (1.0 - tol.model_cos)) + 1e-4;
        double worst = 0;
        /* the whole model on the lane; in f32 also its normalize stage alone, after the rest
         * on the cpu (a range that leaves pooled as it is) */
        for (int split = 0; split < (lanes[i].dtype == HS_DTYPE_F32 ? 2 : 1); split++) {
            run_lane(&lanes[i], split ? cpu : NULL, rm, &bt->b, got);
            for (int q = 0; q < N; q++) {
                const double r = rel_dist(got + q * H, want + q * H, H);
                worst = r > worst ? r : worst;
                if (!(r <= allowed))
                    fail_msg("%s%s: pair %d (%d tokens, %d of the first text): relative "
                             "distance to the cpu f32 result %.6f > %.6f",
                             lanes[i].label, split ? " (normalize alone)" : "", q, lens[q],
                             first[q], r, allowed);
            }
        }
        printf("conformance %s, pairs unnormalized: ok (worst relative distance %.2e)\n",
               lanes[i].label, worst);
    }
    free(types), free(bt);
    rand_model_free(rm);
}

/* ---- engines without stages ---- */

static void stageless_caps(void *ctx, struct hs_engine_caps *out)
{
    (void)ctx;
    snprintf(out->kind, sizeof out->kind, "stageless");
    snprintf(out->device, sizeof out->device, "nowhere");
    out->dtypes = 1u << HS_DTYPE_F32;
    out->stages = (uint32_t)(uintptr_t)ctx; /* 0: none (remote's shape) */
}

static const struct hs_engine_iface stageless_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "stageless",
    .caps = stageless_caps,
};

static void an_engine_without_stages_is_refused_not_called(void **state)
{
    (void)state;
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs__engine_wrap(&stageless_iface, NULL, "nostage0", &e, &err), 0);
    struct rand_model *rm = rand_model_new(32, 2, 64, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = 2, .seq_max = 16, .dtype = HS_DTYPE_F32};
    assert_int_equal(hs_executor_create(&rm->model, &plan, &xo, &x, &err), HS_STATUS_UNSUPPORTED);
    assert_null(x);
    printf("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "nostage0"));
    assert_non_null(strstr(err.msg, "runs no stages"));
    /* the wrappers, reached directly */
    struct hs_ws_spec spec = {
        .batch_max = 1, .tokens_max = 16, .seq_max = 16, .dims = &rm->model.config.dims};
    void *ws = NULL, *prep = NULL;
    assert_int_equal(hs_engine_ws_create(e, &spec, &ws, &err), HS_STATUS_UNSUPPORTED);
    assert_int_equal(hs_engine_stage_prepare(e, &rm->model.stages[0], HS_DTYPE_F32, &prep, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_null(prep);
    int32_t ids[2] = {1, 2}, lens[1] = {2}, offs[2] = {0, 2};
    struct hs_batch b = {
        .n_seqs = 1, .seq_max = 16, .n_tokens = 2, .ids = ids, .lengths = lens, .offsets = offs};
    float buf[64];
    void *fake_ws = buf;
    assert_int_equal(hs_engine_batch_begin(e, fake_ws, &b, &err), HS_STATUS_UNSUPPORTED);
    assert_int_equal(hs_engine_run_stage(e, fake_ws, &rm->model.stages[0], NULL, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_int_equal(hs_engine_act_read(e, fake_ws, HS_ACT_BUF_HIDDEN, buf, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_int_equal(hs_engine_act_write(e, fake_ws, HS_ACT_BUF_HIDDEN, buf, &err),
                     HS_STATUS_UNSUPPORTED);
    hs_engine_ws_destroy(e, fake_ws); /* no method: nothing to call */
    hs_engine_destroy(e);
    /* claiming stages without the methods to run them is refused when the engine is made */
    e = NULL;
    assert_int_equal(hs__engine_wrap(&stageless_iface, (void *)(uintptr_t)(1u << HS_STAGE_EMBED),
                                     "claims0", &e, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(err.msg, "stage_prepare"));
    rand_model_free(rm);
}

/* The block parameters of the architecture table (stage.h), at widths the tiny checkpoints of
 * tests/model/test_arch.c do not reach: a lane whose engine declares every feature the model
 * needs matches the reference stage by stage and as a whole; one that lacks some is refused at
 * load with them named. */
struct block_case {
    const char *what;
    struct hs_encoder_dims d;
    unsigned flags;
};

static const struct block_case block_cases[] = {
    {"rotary-half swiglu post-LN no-bias (NomicBERT)",
     {.hidden = 128,
      .heads = 2,
      .head_dim = 64,
      .intermediate = 192,
      .layers = 2,
      .pool = HS_POOL_MEAN,
      .act = HS_ACT_SILU,
      .ffn = HS_FFN_GATED,
      .pos = HS_POS_ROTARY,
      .rope_theta = 1000.0f,
      .rotary_dim = 32},
     RM_NO_BIAS},
    {"pre-LN geglu local/global two bases final norm (ModernBERT)",
     {.hidden = 128,
      .heads = 2,
      .head_dim = 64,
      .intermediate = 160,
      .layers = 3,
      .pool = HS_POOL_CLS,
      .ffn = HS_FFN_GATED,
      .pos = HS_POS_ROTARY,
      .rope_theta = 160000.0f,
      .rope_theta_local = 10000.0f,
      .rotary_dim = 64,
      .norm_pre = true,
      .final_norm = true,
      .window = 8,
      .global_every = 3,
      .ln_eps = 1e-5f},
     RM_NO_BIAS | RM_NO_TYPES | RM_NO_FIRST_NORM},
    {"causal GQA RMSNorm qk-norm last-token (Qwen3)",
     {.hidden = 96,
      .heads = 4,
      .kv_heads = 2,
      .head_dim = 64,
      .intermediate = 160,
      .layers = 2,
      .pool = HS_POOL_LAST,
      .act = HS_ACT_SILU,
      .ffn = HS_FFN_GATED,
      .pos = HS_POS_ROTARY,
      .rope_theta = 1000000.0f,
      .rotary_dim = 64,
      .norm = HS_NORM_RMS,
      .norm_pre = true,
      .final_norm = true,
      .causal = true,
      .ln_eps = 1e-6f},
     RM_NO_BIAS | RM_NO_TYPES | RM_QK_NORM | RM_NO_EMB_NORM},
};

static void block_families_match_reference(void **state)
{
    (void)state;
    find_lanes();
    for (size_t c = 0; c < sizeof block_cases / sizeof block_cases[0]; c++)
        for (int i = 0; i < n_lanes; i++) {
            struct rand_model *rm =
                rand_model_new_blocks(&block_cases[c].d, HS_DTYPE_F32, block_cases[c].flags);
            uint32_t need = 0;
            for (int s = 0; s < rm->model.n_stages; s++)
                need |= hs_stage_features(&rm->model.stages[s]);
            hs_engine_t e = make(&lanes[i]);
            struct hs_engine_caps caps;
            hs_engine_caps(e, &caps);
            if (need & ~caps.features) {
                struct hs_error err = {0};
                struct hs_placement plan;
                hs_placement_single(&rm->model, e, &plan);
                struct hs_executor *x = NULL;
                struct hs_executor_opts xo = {
                    .batch_max = 4, .seq_max = 160, .dtype = lanes[i].dtype};
                assert_int_equal(hs_executor_create(&rm->model, &plan, &xo, &x, &err),
                                 HS_STATUS_UNSUPPORTED);
                assert_non_null(strstr(err.msg, "does not implement"));
                printf("conformance %s, %s: refused (%s)\n", lanes[i].label, block_cases[c].what,
                       err.msg);
            } else {
                const int stage_lens[] = {1, 9, 40, 3}, model_lens[] = {1, 7, 16, 33, 128, 3};
                check_stages(&lanes[i], rm, stage_lens, 4);
                check_model(&lanes[i], rm, model_lens, 6);
                printf("conformance %s, %s: ok\n", lanes[i].label, block_cases[c].what);
            }
            hs_engine_destroy(e);
            rand_model_free(rm);
        }
}

/* Every family's tiny checkpoint (tests/tiny_families.h) on every lane, against its transformers
 * reference embeddings (tests/golden/tiny_*): f32 min and mean cosine >= 0.99999, the other
 * dtypes within their declared tolerance (hs_verify_default_tolerance; int8 here without a
 * quantization plan, every matrix quantized). A lane whose engine lacks a block feature the
 * family needs is refused at load with the features named, and skipped with that line. Each
 * lane that ran prints the evidence line "# family lane dtype min mean" (docs/MODELS.md). */
static void tiny_checkpoints_match_transformers(void **state)
{
    (void)state;
    find_lanes();
    for (int f = 0; f < N_TINY_FAMILIES; f++) {
        const struct tiny_family *fam = &tiny_families[f];
        struct hs_error err = {0};
        struct hs_model *m = NULL;
        struct hs_golden *g = NULL;
        if (hs_model_load(hs_test_path(fam->dir), &m, &err)) fail_msg("%s: %s", fam->dir, err.msg);
        char json[1024], f32[1024], rel[256];
        snprintf(rel, sizeof rel, "tests/golden/%s.json", fam->golden);
        snprintf(json, sizeof json, "%s", hs_test_path(rel));
        snprintf(rel, sizeof rel, "tests/golden/%s.f32", fam->golden);
        snprintf(f32, sizeof f32, "%s", hs_test_path(rel));
        if (hs_golden_load(json, f32, &g, &err)) fail_msg("%s", err.msg);
        uint32_t need = 0;
        for (int s = 0; s < m->n_stages; s++) need |= hs_stage_features(&m->stages[s]);
        assert_int_equal(need, fam->features);
        for (int i = 0; i < n_lanes; i++) {
            const struct lane *l = &lanes[i];
            hs_engine_t e = make(l);
            struct hs_engine_caps caps;
            hs_engine_caps(e, &caps);
            struct hs_verify_tolerance tol;
            hs_verify_default_tolerance(l->dtype, &tol);
            if (l->dtype == HS_DTYPE_F32) tol = (struct hs_verify_tolerance){0.99999, 0.99999};
            struct hs_verify_report rep;
            err = (struct hs_error){0};
            hs_status s = hs_verify_engine(m, e, l->dtype, g, &tol,
                                           &(struct hs_verify_opts){.batch_max = 4}, &rep, &err);
            if (need & ~caps.features) {
                assert_int_equal(s, HS_STATUS_UNSUPPORTED);
                assert_non_null(strstr(err.msg, "does not implement"));
                printf("conformance %s, %s: skipped by capability (%s)\n", l->label, fam->arch,
                       err.msg);
            } else {
                if (s) fail_msg("%s on %s: %s", fam->arch, l->label, err.msg);
                printf("# %s %s%d %s %.8f %.8f (1 - min %.1e)\n", fam->arch, l->kind->name,
                       l->device, hs_compute_dtype_name(l->dtype), rep.cos_min, rep.cos_mean,
                       1.0 - rep.cos_min);
                if (!rep.pass)
                    fail_msg("%s on %s: min %.8f mean %.8f below %.6f / %.6f (sequence %d)",
                             fam->arch, l->label, rep.cos_min, rep.cos_mean, tol.cos_min,
                             tol.cos_mean, rep.worst);
            }
            hs_engine_destroy(e);
        }
        hs_golden_free(g);
        hs_model_free(m);
    }
}

int main(void)
{
#ifdef HS_CUDA_EMU /* HS_TEST_FILTER: the tests to run (a cmocka pattern), e.g. "block_*" */
    if (getenv("HS_TEST_FILTER")) cmocka_set_test_filter(getenv("HS_TEST_FILTER"));
#endif
    find_lanes();
    for (int i = 0; i < n_lanes; i++) printf("conformance: %s\n", lanes[i].label);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(capability_claims),
        cmocka_unit_test(every_stage_matches_reference),
        cmocka_unit_test(whole_model_mean_pooling),
        cmocka_unit_test(whole_model_cls_f16_weights_head64),
        cmocka_unit_test(pairs_unnormalized_match_cpu_f32),
        cmocka_unit_test(an_engine_without_stages_is_refused_not_called),
        cmocka_unit_test(block_families_match_reference),
        cmocka_unit_test(tiny_checkpoints_match_transformers),
    };
    return cmocka_run_group_tests_name("engine_conformance", tests, NULL, NULL);
}
