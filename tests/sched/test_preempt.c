/* Preemption at stage boundaries (hs_lane_opts.preempt, hs_executor_opts.preempt): a fair lane
 * on a real executor (the CPU engine over a random encoder, tests/refmodel.h). A flood tenant's
 * batch is held inside one of its stages (the engine's calibration observer) while a light
 * tenant's request arrives: with preemption the light request's batch starts on the preempting
 * slot while the flood's is paused at its next stage boundary, ends first, and the flood's batch
 * then finishes; without it the light request waits for the whole flood batch. Both answers are
 * bit-identical either way and match the reference encoder. No test asserts an absolute time;
 * waits have generous limits only so that a bug fails instead of hangs. */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "refmodel.h"
#include "sched/sched-impl.h"
#include "sched/sched.h"

#define H       64
#define N_FLOOD 12
#define LIGHT   10
#define WAIT_NS (20 * 1000000000LL) /* a bug fails instead of hanging */

/* Holds the flood's batch inside its layer 1 attention (armed once per run) until the test lets
 * it go on; with light_armed, the light batch's first stage then waits until the flood's batch
 * is paused (so that the light batch computes while it is, however the threads are scheduled). */
struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int rows;      /* the flood batch's tokens: the light batch passes */
    bool armed;    /* hold the next such stage */
    bool held;     /* the flood's stage is held now */
    bool released; /* the test let it go on */
    bool light_armed;
    int light_saw_paused; /* slots the light batch saw paused */
    struct hs_executor *x;
};

static void observe(void *ctx, const struct hs_stage *st, int linear, const float *x, int rows,
                    int k)
{
    (void)x, (void)k;
    struct hold *h = ctx;
    if (linear != 0) return;
    pthread_mutex_lock(&h->mu);
    if (h->light_armed && rows == LIGHT && st->kind == HS_STAGE_ATTN && st->layer == 0) {
        h->light_armed = false;
        pthread_mutex_unlock(&h->mu);
        struct hs_exec_preempt_state ps;
        const int64_t until = hs_now_ns() + WAIT_NS;
        do {
            hs_executor_preempt_state(h->x, &ps);
            if (!ps.paused) nanosleep(&(struct timespec){0, 100000}, NULL);
        } while (!ps.paused && hs_now_ns() < until);
        pthread_mutex_lock(&h->mu);
        h->light_saw_paused = ps.paused;
    }
    if (h->armed && rows == h->rows && st->kind == HS_STAGE_ATTN && st->layer == 1) {
        h->armed = false;
        h->held = true;
        pthread_cond_broadcast(&h->cv);
        while (!h->released) pthread_cond_wait(&h->cv, &h->mu);
        h->held = false;
    }
    pthread_mutex_unlock(&h->mu);
}

/* The lane's runner: the executor, with each slot's last timing kept. */
struct exec_runner {
    struct hs_executor *x;
    struct hs_exec_timing last[2];
    int runs[2];
};

static hs_status exec_run(void *ctx, int slot, const struct hs_batch *b, float *out,
                          struct hs_batch_timing *t, struct hs_error *err)
{
    struct exec_runner *er = ctx;
    struct hs_exec_timing et = {0};
    hs_status st = hs_executor_run(er->x, slot, b, out, &et, err);
    t->copy_in_ns = et.copy_in_ns;
    t->compute_ns = et.compute_ns + et.paused_ns + et.yield_wait_ns;
    t->copy_out_ns = et.copy_out_ns;
    t->paused_ns = et.paused_ns;
    t->yield_wait_ns = et.yield_wait_ns;
    if (slot < 2) {
        er->last[slot] = et;
        er->runs[slot]++;
    }
    return st;
}

/* A CPU engine (eo) and, into er, an executor of the model on it with two slots and
 * preemption; returns the engine. */
static hs_engine_t preempting_executor(const struct rand_model *rm, const struct hs_engine_opts *eo,
                                       struct exec_runner *er)
{
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(eo, &e, &err), HS_STATUS_OK);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    const struct hs_executor_opts xo = {
        .batch_max = 16, .seq_max = 64, .slots = 2, .preempt = true};
    if (hs_executor_create(&rm->model, &plan, &xo, &er->x, &err))
        fail_msg("executor_create: %s", err.msg);
    return e;
}

/* The fair lane of one slot over the runner, with or without preemption; tokens_per_s is its
 * throughput before any batch is measured. */
static struct hs_lane_opts fair_lane(struct exec_runner *er, bool preempt, double tokens_per_s)
{
    return (struct hs_lane_opts){
        .engine = "cpu0",
        .model = "m",
        .dim = H,
        .seq_max = 64,
        .batch_window_us = 1000,
        .batch_max = 16,
        .batch_max_tokens = 1024,
        .n_buckets = 2,
        .buckets = {16, 32},
        .queue_max = 64,
        .shed_batch_ratio = 0.75,
        .throughput_init_tokens_per_s = tokens_per_s,
        .throughput_ewma_alpha = 0.2,
        .slots = 1,
        .fair = true,
        .preempt = preempt,
        .runner = {exec_run, er},
    };
}

/* A request with its own storage; done records the order of answers. */
struct preq {
    struct hs_request r;
    struct hs_seq seqs[N_FLOOD];
    int32_t ids[N_FLOOD][32];
    float out[N_FLOOD * H];
    atomic_int done_at; /* 1 + its place among answers; 0 = not yet */
    atomic_int released;
};

static atomic_int answers;

static void preq_done(struct hs_request *r, void *ctx)
{
    (void)r;
    struct preq *p = ctx;
    atomic_store(&p->done_at, atomic_fetch_add(&answers, 1) + 1);
}

static void preq_release(struct hs_request *r, void *ctx)
{
    (void)r;
    atomic_store(&((struct preq *)ctx)->released, 1);
}

static struct preq *preq_new(int tenant, int n, const int *lens, const int32_t (*ids)[32])
{
    struct preq *p = hs_calloc(1, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < n; i++) {
        memcpy(p->ids[i], ids[i], sizeof p->ids[i]);
        p->seqs[i].ids = p->ids[i];
        p->seqs[i].n_tokens = lens[i];
    }
    p->r.n_seqs = n;
    p->r.seqs = p->seqs;
    p->r.out = p->out;
    p->r.priority = HS_PRIORITY_INTERACTIVE;
    p->r.deadline_ns = hs_now_ns() + WAIT_NS;
    p->r.tenant = tenant;
    p->r.weight = 1;
    p->r.done = preq_done;
    p->r.release = preq_release;
    p->r.ctx = p;
    hs_request_init(&p->r);
    return p;
}

static void preq_wait(struct preq *p)
{
    const int64_t until = hs_now_ns() + WAIT_NS;
    while (!atomic_load(&p->done_at) && hs_now_ns() < until)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_true(atomic_load(&p->done_at) > 0);
}

static void preq_free(struct preq *p)
{
    hs_request_unref(&p->r);
    const int64_t until = hs_now_ns() + WAIT_NS;
    while (!atomic_load(&p->released) && hs_now_ns() < until)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_true(atomic_load(&p->released));
    hs_free(p);
}

/* The light request's batch runs while the flood's is paused, with preempt; after it without. */
static void light_batch_runs_while_flood_paused(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(H, 4, 128, 4, HS_POOL_MEAN, HS_DTYPE_F32);
    assert_non_null(rm);
    int flood_lens[N_FLOOD], light_len[1] = {LIGHT}, flood_tokens = 0;
    int32_t flood_ids[N_FLOOD][32] = {{0}}, light_ids[1][32] = {{0}};
    for (int i = 0; i < N_FLOOD; i++) {
        flood_lens[i] = 20 + i; /* bucket 32 */
        flood_tokens += flood_lens[i];
        for (int k = 0; k < flood_lens[i]; k++) flood_ids[i][k] = rand_id(97);
    }
    for (int k = 0; k < LIGHT; k++) light_ids[0][k] = rand_id(97);

    struct hold h = {.rows = flood_tokens};
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    struct hs_error err = {0};
    struct exec_runner er = {0};
    /* one thread: the observer runs on the batch's own thread */
    hs_engine_t e = preempting_executor(
        rm, &(struct hs_engine_opts){.threads = 1, .cpu_observe = observe, .cpu_observe_ctx = &h},
        &er);
    h.x = er.x;

    float out_flood[2][N_FLOOD * H], out_light[2][H];
    for (int preempt = 0; preempt < 2; preempt++) {
        /* unmeasured, the flood's batch is predicted to run 3 s: it has more left than the
         * light one needs (0.1 s) while it is held (briefly) */
        const struct hs_lane_opts o = fair_lane(&er, preempt, 100);
        struct hs_sched *s = NULL;
        if (hs_sched_create(&o, 1, NULL, &s, &err)) fail_msg("sched_create: %s", err.msg);
        memset(er.runs, 0, sizeof er.runs);
        atomic_store(&answers, 0);
        pthread_mutex_lock(&h.mu);
        h.armed = true;
        h.released = false;
        h.light_armed = preempt;
        h.light_saw_paused = 0;
        pthread_mutex_unlock(&h.mu);

        struct preq *flood = preq_new(1, N_FLOOD, flood_lens, flood_ids);
        assert_int_equal(hs_sched_submit(s, &flood->r), HS_STATUS_OK);
        pthread_mutex_lock(&h.mu);
        while (!h.held) pthread_cond_wait(&h.cv, &h.mu);
        pthread_mutex_unlock(&h.mu);

        struct preq *light = preq_new(2, 1, light_len, light_ids);
        assert_int_equal(hs_sched_submit(s, &light->r), HS_STATUS_OK);
        if (preempt) { /* the preempting batch waits for the stage in flight, which is held */
            const int64_t until = hs_now_ns() + WAIT_NS;
            struct hs_exec_preempt_state ps;
            do {
                hs_executor_preempt_state(er.x, &ps);
                if (!ps.waiting) nanosleep(&(struct timespec){0, 1000000}, NULL);
            } while (!ps.waiting && hs_now_ns() < until);
            assert_true(ps.waiting);
        }
        assert_int_equal(atomic_load(&light->done_at), 0);
        pthread_mutex_lock(&h.mu);
        h.released = true;
        pthread_cond_broadcast(&h.cv);
        pthread_mutex_unlock(&h.mu);
        preq_wait(light);
        preq_wait(flood);
        assert_int_equal(light->r.status, HS_STATUS_OK);
        assert_int_equal(flood->r.status, HS_STATUS_OK);

        struct hs_lane_stats ls;
        hs_sched_lane_stats(s, 0, &ls);
        if (preempt) {
            /* the light request's batch ran on the preempting slot while the flood's batch was
             * paused at its next stage boundary (which of the two is answered first is a race:
             * the flood resumes as soon as the light batch's last stage ends, before its answer
             * is delivered, and the tiny model's last stages take microseconds) */
            assert_int_equal(h.light_saw_paused, 1);
            assert_int_equal(er.runs[0], 1);
            assert_int_equal(er.runs[1], 1);
            assert_true(er.last[0].paused_ns > 0);
            assert_true(er.last[1].yield_wait_ns > 0);
            assert_int_equal(ls.preempt_batches, 1);
            assert_true(ls.paused_ns > 0 && ls.paused_max_ns == ls.paused_ns);
            assert_true(ls.preempt_wait_ns > 0);
        } else {
            assert_int_equal(atomic_load(&flood->done_at), 1);
            assert_int_equal(er.runs[0], 2);
            assert_int_equal(ls.preempt_batches, 0);
            assert_int_equal(ls.paused_ns, 0);
        }
        memcpy(out_flood[preempt], flood->out, sizeof out_flood[preempt]);
        memcpy(out_light[preempt], light->out, sizeof out_light[preempt]);
        hs_sched_destroy(s);
        preq_free(flood);
        preq_free(light);
    }

    /* nothing a paused batch computes changes: bit-identical answers, and the reference's */
    assert_memory_equal(out_flood[0], out_flood[1], sizeof out_flood[0]);
    assert_memory_equal(out_light[0], out_light[1], sizeof out_light[0]);
    double ref[H];
    for (int i = 0; i <= N_FLOOD; i++) {
        const bool is_light = i == N_FLOOD;
        ref_encode(rm, is_light ? light_ids[0] : flood_ids[i], is_light ? LIGHT : flood_lens[i],
                   ref, NULL);
        const float *got = is_light ? out_light[1] : out_flood[1] + (size_t)i * H;
        double cs = cosine_fd(got, ref, H);
        if (cs < 0.99999) fail_msg("sequence %d: cosine %.8f against the reference", i, cs);
    }
    hs_executor_free(er.x);
    hs_engine_destroy(e);
    rand_model_free(rm);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
}

/* The preempting slot pauses only a batch of one tenant's work: a batch that also holds
 * another tenant's request is left to finish (pausing it for a third tenant's batch would hold
 * that request, and every later one of its tenant, which then has work running). */
static void preempt_spares_mixed_batches(void **state)
{
    (void)state;
    struct slot slots[2];
    memset(slots, 0, sizeof slots);
    struct lane L;
    memset(&L, 0, sizeof L);
    L.n_slots = 2;
    L.slots = slots;
    L.preempt_slot = 1;
    slots[0].idx = 0, slots[1].idx = 1;
    slots[0].run_start_ns = 0; /* formed, about to start */
    slots[0].run_tenants = 1ull << 1;
    assert_true(hs__lane_preemptible(&L, 0.001, 1000));
    slots[0].run_tenants = 1ull << 1 | 1ull << 3;
    assert_false(hs__lane_preemptible(&L, 0.001, 1000));
    slots[0].run_tenants = 0; /* idle */
    assert_false(hs__lane_preemptible(&L, 0.001, 1000));
}

/* A request that arrives while a batch's answers go out (its client was answered a moment ago)
 * is not a preemption: the batch's work is over, so the request waits the moment it takes the
 * slot to come back instead of running on the preempting slot. The flood's answer callback (on
 * the batcher's thread, in that window) submits the light request and holds the window open for
 * a while: the light request must not be answered inside it, and the lane counts no preemption. */
struct in_window {
    struct hs_sched *s;
    struct preq *light;
    atomic_int answered_inside; /* the light request was answered before the callback returned */
};

static struct in_window win;

static void flood_done_submits(struct hs_request *r, void *ctx)
{
    preq_done(r, ctx);
    assert_int_equal(hs_sched_submit(win.s, &win.light->r), HS_STATUS_OK);
    const int64_t until = hs_now_ns() + 300 * 1000000LL;
    while (!atomic_load(&win.light->done_at) && hs_now_ns() < until)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    atomic_store(&win.answered_inside, atomic_load(&win.light->done_at) > 0);
}

static void request_after_batch_end_is_no_preemption(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(H, 4, 128, 2, HS_POOL_MEAN, HS_DTYPE_F32);
    assert_non_null(rm);
    int flood_lens[2] = {24, 30}, light_len[1] = {LIGHT};
    int32_t flood_ids[N_FLOOD][32] = {{0}}, light_ids[1][32] = {{0}};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < flood_lens[i]; k++) flood_ids[i][k] = rand_id(97);
    for (int k = 0; k < LIGHT; k++) light_ids[0][k] = rand_id(97);
    struct hs_error err = {0};
    struct exec_runner er = {0};
    hs_engine_t e = preempting_executor(rm, &(struct hs_engine_opts){.threads = 1}, &er);
    /* predicted to run far longer than it does: a batch still counted as running would look
     * preemptible for the whole window */
    const struct hs_lane_opts o = fair_lane(&er, true, 10);
    struct hs_sched *s = NULL;
    if (hs_sched_create(&o, 1, NULL, &s, &err)) fail_msg("sched_create: %s", err.msg);
    atomic_store(&answers, 0);
    struct preq *flood = preq_new(1, 2, flood_lens, flood_ids);
    struct preq *light = preq_new(2, 1, light_len, light_ids);
    win = (struct in_window){.s = s, .light = light};
    flood->r.done = flood_done_submits;
    assert_int_equal(hs_sched_submit(s, &flood->r), HS_STATUS_OK);
    preq_wait(flood);
    preq_wait(light);
    assert_int_equal(flood->r.status, HS_STATUS_OK);
    assert_int_equal(light->r.status, HS_STATUS_OK);
    assert_false(atomic_load(&win.answered_inside));
    struct hs_lane_stats ls;
    hs_sched_lane_stats(s, 0, &ls);
    assert_int_equal(ls.preempt_batches, 0);
    assert_int_equal(ls.paused_ns, 0);
    hs_sched_destroy(s);
    preq_free(flood);
    preq_free(light);
    hs_executor_free(er.x);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

/* The executor refuses preempt without a second slot. */
static void preempt_needs_two_slots(void **state)
{
    (void)state;
    struct rand_model *rm = rand_model_new(H, 4, 128, 1, HS_POOL_MEAN, HS_DTYPE_F32);
    struct hs_error err = {0};
    hs_engine_t e = NULL;
    assert_int_equal(hs_engine_cpu_create(&(struct hs_engine_opts){.threads = 1}, &e, &err),
                     HS_STATUS_OK);
    struct hs_placement plan;
    hs_placement_single(&rm->model, e, &plan);
    struct hs_executor *x = NULL;
    struct hs_executor_opts xo = {.batch_max = 4, .seq_max = 64, .slots = 1, .preempt = true};
    assert_int_equal(hs_executor_create(&rm->model, &plan, &xo, &x, &err),
                     HS_STATUS_INVALID_ARGUMENT);
    assert_null(x);
    hs_engine_destroy(e);
    rand_model_free(rm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(light_batch_runs_while_flood_paused),
        cmocka_unit_test(preempt_needs_two_slots),
        cmocka_unit_test(preempt_spares_mixed_batches),
        cmocka_unit_test(request_after_batch_end_is_no_preemption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
