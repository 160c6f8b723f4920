/* The OpenVINO engine, built as an engine plugin (engine/plugin.h): libhs_engine_openvino.so.
 *
 * Devices are what the OpenVINO runtime reports (CPU, GPU, NPU, ...), in its order: device
 * ordinal i of the kind is the runtime's i-th available device; opts.device_name names one
 * instead (engines[].device_name: CPU, GPU, NPU, AUTO). The engine runs the stages it is
 * given as OpenVINO graphs that it writes itself (ov_graph.h) from the stages' weights and reads
 * with ov_core_read_model_from_memory_buffer: no model file, no converter.
 *
 * Stages are fused: run_stage only records the stage; the run of stages placed here in a row
 * (the whole encoder, or a layer or module range of a placement) executes as one graph when the
 * executor asks for its result (sync, act_read) — the executor calls sync at the end of every
 * run of stages on one engine. A graph is compiled the first time its range (and, on devices
 * that need static shapes, its padded shape) is run, and cached for the engine's life; each
 * workspace keeps its own infer requests.
 *
 * Shapes: batches are padded to [B, S] with S the batch's longest sequence (dynamic shapes, CPU
 * and GPU), or to [next power of two of the batch, its length bucket] on NPU (static shapes, the
 * NPU compiler needs them; HS_OPENVINO_STATIC=1 asks for them on any device). Dynamic on CPU
 * by measurement (bench_cpu --engine openvino, 2 threads, MiniLM, two rounds each): static
 * shapes ran 1x16 7-8 %, 1x128 2-5 % and 32x128 1 % faster, but each shape is its own compiled
 * graph, ~0.2 s to compile and ~120 MB resident (8 shapes: 1.46 GB and 2.3 s vs 0.48 GB and 0.6
 * s dynamic); a dynamically batched lane forms up to batch_max x buckets shapes (32 x 5 = 160).
 *
 * Precision: the lane's dtype is the runtime's inference precision hint (f32, f16), so an f32
 * lane is f32 even where the CPU plugin would pick bf16 by default. An int8 lane (CPU device)
 * keeps the f32 hint: its graph carries the linear layers' weights as int8 with per-output-
 * channel scales (ov_graph.h), which the CPU plugin keeps compressed, and the compile asks for
 * dynamic activation quantization, so those matmuls run in int8. A model's quantization plan
 * (model/quant.h) is honoured as by the CPU engine: its f32 stages arrive here as f32 stages
 * (they share the graph with the int8 ones), its smoothing divisors are folded into the int8
 * weights and divide the stage input in the graph. Its static activation scales are not used:
 * the runtime computes the activations' scales itself, per group, when a layer runs.
 * opts.threads is INFERENCE_NUM_THREADS on CPU; the performance hint is LATENCY; an engine with
 * several slots (workspaces: batches that may run at once) compiles its graphs with that many
 * streams, sharing the threads. Core sets (engines[].cores) are not passed to the runtime.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openvino/c/openvino.h>

#include "engine/openvino/ov_graph.h"
#include "engine/openvino/ov_onnx.h"
#include "engine/plugin.h"

static const struct hs_plugin_host *host;

/* int8 lanes: the runtime quantizes the activations of a compressed-weights MatMul when it runs
 * (ov::hint::dynamic_quantization_group_size; the C API has no key constant for it), per group
 * of this many input channels, so the product is computed in int8. 0 would leave the weights
 * int8 but compute in f32. 32 (the CPU plugin's own default, which an explicit value protects
 * from changes of that default) measured on all-MiniLM-L6-v2's golden sentences: min cosine to
 * f32 0.9958 with its quantization plan, 0.9935 without; 128 is about a fifth faster at 32x128
 * but 0.9937 / 0.9879 (the raw model fails the int8 tolerance, 0.99); 384: 0.9930 / 0.9668. */
#define OV_DYNAMIC_QUANT_KEY   "DYNAMIC_QUANTIZATION_GROUP_SIZE"
#define OV_DYNAMIC_QUANT_GROUP "32"

/* ---- the process's OpenVINO core and its devices ---- */

#define MAX_DEVICES 16

static pthread_once_t core_once = PTHREAD_ONCE_INIT;
static ov_core_t *core;
static char devices[MAX_DEVICES][64];
static int n_devices;

static void core_init(void)
{
    if (ov_core_create(&core) != OK) {
        core = NULL;
        return;
    }
    ov_available_devices_t av = {0};
    if (ov_core_get_available_devices(core, &av) != OK) return;
    for (size_t i = 0; i < av.size && n_devices < MAX_DEVICES; i++)
        snprintf(devices[n_devices++], sizeof devices[0], "%s", av.devices[i]);
    ov_available_devices_free(&av);
}

static int ov_device_count(void)
{
    pthread_once(&core_once, core_init);
    return n_devices;
}

static hs_status ov_fail(struct hs_error *err, ov_status_e s, const char *what)
{
    const char *msg = ov_get_last_err_msg();
    return hs_plugin_error(err, HS_STATUS_ENGINE, "openvino: %s: %s%s%s", what,
                           ov_get_error_info(s), msg && *msg ? ": " : "", msg ? msg : "");
}

/* ---- engine ---- */

struct graph {
    int n;
    const struct hs_stage *stages[128];
    enum hs_dtype dtypes[128]; /* each stage's compute dtype */
    enum hs_dtype precision;   /* the inference precision hint: f16, or f32 (f32 and int8) */
    int batch, seq;            /* static shape, or -1 */
    struct ov_ir ir;
    ov_tensor_t *weights;
    ov_model_t *model;
    ov_compiled_model_t *compiled;
    struct graph *next;
};

struct ov_ctx {
    char device[64];
    char full_name[128];
    int threads;
    /* workspaces alive: one per executor slot using the engine, i.e. batches that may run at
     * once; a graph compiled while there are N > 1 gets N streams */
    atomic_int n_ws;
    bool static_shapes;
    uint32_t dtypes;
    pthread_mutex_t mu; /* guards graphs */
    struct graph *graphs;
};

struct prep {
    const struct hs_stage *st;
    enum hs_dtype dtype;
};

#define MAX_REQS 64

struct ws {
    struct hs_ws_spec spec;
    int hidden, heads;
    /* the batch */
    int n_seqs, n_tokens, seq;  /* seq: padded length of the inputs */
    int pb, ps;                 /* padded shape of the graph inputs (>= n_seqs, seq) */
    int32_t *lengths, *offsets; /* [batch_max], [batch_max + 1] */
    int32_t *ids, *types, *pos; /* [batch_max * seq_max] padded */
    float *mask;                /* [batch_max * seq_max] */
    float *hidden_buf, *pooled; /* padded [batch_max, seq_max, hidden], [batch_max, hidden] */
    float *rel;                 /* [heads, seq_max, seq_max] */
    int rel_seq;                /* S the rel table was computed for; 0 = none */
    const struct hs_stage *rel_stage;
    /* the run of stages recorded, not yet executed */
    int n_pending;
    const struct hs_stage *pending[128];
    enum hs_dtype pending_dtypes[128];
    /* infer requests, one per graph used on this workspace */
    int n_reqs;
    struct graph *req_graph[MAX_REQS];
    ov_infer_request_t *req[MAX_REQS];
};

static void ov_destroy(void *p)
{
    struct ov_ctx *c = p;
    for (struct graph *g = c->graphs, *next; g; g = next) {
        next = g->next;
        if (g->compiled) ov_compiled_model_free(g->compiled);
        if (g->model) ov_model_free(g->model);
        if (g->weights) ov_tensor_free(g->weights);
        ov_ir_free(&g->ir);
        free(g);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void ov_caps(void *p, struct hs_engine_caps *out)
{
    struct ov_ctx *c = p;
    snprintf(out->kind, sizeof out->kind, "openvino");
    snprintf(out->device, sizeof out->device, "%s", c->full_name);
    snprintf(out->isa, sizeof out->isa, "%s%s", c->device,
             c->static_shapes ? " static-shapes" : " dynamic-shapes");
    out->threads = c->threads;
    out->dtypes = c->dtypes;
    out->stages = 1u << HS_STAGE_EMBED | 1u << HS_STAGE_ATTN | 1u << HS_STAGE_FFN |
                  1u << HS_STAGE_POOL | 1u << HS_STAGE_NORMALIZE | 1u << HS_STAGE_FINAL_NORM;
    ov_version_t v = {0};
    if (ov_get_openvino_version(&v) == OK) {
        snprintf(out->gemm, sizeof out->gemm, "OpenVINO %s", v.buildNumber);
        ov_version_free(&v);
    }
    /* what the graph writer (ov_graph.c) builds; the rest is refused at prepare */
    out->features = HS_FEAT_REL_POS_BIAS | HS_FEAT_POS_OFFSET | HS_FEAT_NO_TOKEN_TYPES |
                    HS_FEAT_NO_BIAS | HS_FEAT_ROTARY | HS_FEAT_GATED_FFN | HS_FEAT_ACT_SILU |
                    HS_FEAT_RMS_NORM | HS_FEAT_PRE_NORM | HS_FEAT_CAUSAL | HS_FEAT_GQA |
                    HS_FEAT_POOL_LAST | HS_FEAT_QK_NORM | HS_FEAT_LOCAL_ATTN | HS_FEAT_FINAL_NORM |
                    HS_ENGINE_FEAT_SHAPE_COMPILE | HS_ENGINE_FEAT_GRAPH_ONNX;
}

static hs_status ov_prepare(void *p, const struct hs_stage *st, enum hs_dtype dtype, void **out,
                            struct hs_error *err)
{
    (void)p;
    if (st->dims->layers > 60 || st->dims->hidden % st->dims->heads)
        return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "openvino: unsupported dimensions");
    const struct hs_tensor *sm = &st->w[HS_W_SMOOTH];
    if (dtype == HS_DTYPE_I8 && sm->data) { /* the graph writer trusts what passes here */
        int64_t k = 1;
        for (int i = 0; i < sm->ndim; i++) k *= sm->shape[i];
        if (sm->dtype != HS_DTYPE_F32 || k != st->dims->hidden)
            return hs_plugin_error(err, HS_STATUS_CORRUPT,
                                   "openvino: %s: smoothing must be F32 [%d], has %lld values",
                                   st->name, st->dims->hidden, (long long)k);
        for (int64_t i = 0; i < k; i++) {
            const float v = ((const float *)sm->data)[i];
            if (!(v > 0.0f) || v > 1e30f)
                return hs_plugin_error(err, HS_STATUS_CORRUPT,
                                       "openvino: %s: smoothing factor %lld is %g (must be > 0)",
                                       st->name, (long long)i, (double)v);
        }
    }
    struct prep *pr = malloc(sizeof *pr);
    if (!pr) return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    pr->st = st;
    pr->dtype = dtype;
    *out = pr;
    return HS_STATUS_OK;
}

static void ov_release(void *p, void *prep)
{
    (void)p;
    free(prep);
}

static void ws_free(struct ws *w)
{
    for (int i = 0; i < w->n_reqs; i++) ov_infer_request_free(w->req[i]);
    free(w->lengths), free(w->offsets), free(w->ids), free(w->types), free(w->pos);
    free(w->mask), free(w->hidden_buf), free(w->pooled), free(w->rel);
    free(w);
}

static void ov_ws_destroy(void *p, void *ws)
{
    struct ov_ctx *c = p;
    atomic_fetch_sub(&c->n_ws, 1);
    ws_free(ws);
}

static hs_status ov_ws_create(void *p, const struct hs_ws_spec *spec, void **out,
                              struct hs_error *err)
{
    struct ov_ctx *c = p;
    struct ws *w = calloc(1, sizeof *w);
    if (!w) return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    atomic_fetch_add(&c->n_ws, 1);
    w->spec = *spec;
    w->hidden = spec->dims->hidden;
    w->heads = spec->dims->heads;
    const size_t bs = (size_t)spec->batch_max * (size_t)spec->seq_max;
    w->lengths = calloc((size_t)spec->batch_max, sizeof(int32_t));
    w->offsets = calloc((size_t)spec->batch_max + 1, sizeof(int32_t));
    w->ids = calloc(bs, sizeof(int32_t));
    w->types = calloc(bs, sizeof(int32_t));
    w->pos = calloc(bs, sizeof(int32_t));
    w->mask = calloc(bs, sizeof(float));
    w->hidden_buf = calloc(bs * (size_t)w->hidden, sizeof(float));
    w->pooled = calloc((size_t)spec->batch_max * (size_t)w->hidden, sizeof(float));
    if (spec->dims->rel_buckets > 0)
        w->rel =
            calloc((size_t)w->heads * (size_t)spec->seq_max * (size_t)spec->seq_max, sizeof(float));
    if (!w->lengths || !w->offsets || !w->ids || !w->types || !w->pos || !w->mask ||
        !w->hidden_buf || !w->pooled || (spec->dims->rel_buckets > 0 && !w->rel)) {
        ws_free(w);
        atomic_fetch_sub(&c->n_ws, 1);
        return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    }
    *out = w;
    return HS_STATUS_OK;
}

static int next_pow2(int n)
{
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

static hs_status ov_batch_begin(void *p, void *wsp, const struct hs_batch *b, struct hs_error *err)
{
    struct ov_ctx *c = p;
    struct ws *w = wsp;
    if (b->n_seqs > w->spec.batch_max || b->n_tokens > w->spec.tokens_max)
        return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT,
                               "openvino: batch exceeds the workspace");
    int longest = 1;
    for (int i = 0; i < b->n_seqs; i++) longest = b->lengths[i] > longest ? b->lengths[i] : longest;
    if (longest > w->spec.seq_max)
        return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT,
                               "openvino: sequence of %d tokens exceeds the workspace's %d",
                               longest, w->spec.seq_max);
    w->n_seqs = b->n_seqs;
    w->n_tokens = b->n_tokens;
    if (c->static_shapes) {
        w->pb = next_pow2(b->n_seqs);
        if (w->pb > w->spec.batch_max) w->pb = w->spec.batch_max;
        w->ps = b->seq_max >= longest && b->seq_max <= w->spec.seq_max ? b->seq_max : longest;
    } else {
        w->pb = b->n_seqs;
        w->ps = longest;
    }
    w->seq = w->ps;
    w->n_pending = 0;
    const int S = w->ps;
    const int offset = w->spec.dims->pos_offset;
    for (int i = 0; i < w->pb; i++) {
        const int len = i < b->n_seqs ? b->lengths[i] : 0;
        if (i < b->n_seqs) {
            w->lengths[i] = b->lengths[i];
            w->offsets[i] = b->offsets[i];
        }
        for (int t = 0; t < S; t++) {
            const size_t k = (size_t)i * S + t;
            const int real = t < len;
            w->ids[k] = real ? b->ids[b->offsets[i] + t] : 0;
            w->types[k] = real && b->type_ids ? b->type_ids[b->offsets[i] + t] : 0;
            w->pos[k] = offset + t;
            /* a padding sequence keeps one token, so that its mean pooling divides by 1 */
            w->mask[k] = real || (len == 0 && t == 0) ? 1.0f : 0.0f;
        }
    }
    w->offsets[b->n_seqs] = b->offsets[b->n_seqs];
    return HS_STATUS_OK;
}

/* The relative-position bias of an MPNet attention stage for the batch's S: [heads, S, S]. */
static void fill_rel_bias(struct ws *w, const struct hs_stage *st)
{
    if (w->rel_seq == w->ps && w->rel_stage == st) return;
    const struct hs_encoder_dims *d = st->dims;
    const struct hs_tensor *t = &st->w[HS_W_REL_BIAS];
    const int S = w->ps, NH = d->heads;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
            int bucket = hs_rel_pos_bucket(j - i, d->rel_buckets, d->rel_max_distance);
            for (int h = 0; h < NH; h++) {
                size_t k = (size_t)bucket * NH + h;
                float v;
                if (t->dtype == HS_DTYPE_F32) {
                    v = ((const float *)t->data)[k];
                } else {
                    uint16_t x = ((const uint16_t *)t->data)[k];
                    uint32_t u;
                    if (t->dtype == HS_DTYPE_BF16) {
                        u = (uint32_t)x << 16;
                    } else {
                        uint32_t sign = (x >> 15) << 31, e = (x >> 10) & 31, m = x & 1023;
                        if (e == 0) {
                            float f = ldexpf((float)m, -24);
                            memcpy(&u, &f, 4);
                            u |= sign;
                        } else if (e == 31) {
                            u = sign | 0x7f800000u | (m << 13);
                        } else {
                            u = sign | ((e + 112) << 23) | (m << 13);
                        }
                    }
                    memcpy(&v, &u, 4);
                }
                w->rel[((size_t)h * S + i) * S + j] = v;
            }
        }
    w->rel_seq = S;
    w->rel_stage = st;
}

/* The compiled graph of the pending range (compiling it on first use). Holds c->mu. */
static hs_status graph_get(struct ov_ctx *c, struct ws *w, struct graph **out, struct hs_error *err)
{
    const int B = c->static_shapes ? w->pb : -1, S = c->static_shapes ? w->ps : -1;
    pthread_mutex_lock(&c->mu);
    for (struct graph *g = c->graphs; g; g = g->next)
        if (g->n == w->n_pending && g->batch == B && g->seq == S &&
            !memcmp(g->stages, w->pending, sizeof(void *) * (size_t)g->n) &&
            !memcmp(g->dtypes, w->pending_dtypes, sizeof(enum hs_dtype) * (size_t)g->n)) {
            pthread_mutex_unlock(&c->mu);
            *out = g;
            return HS_STATUS_OK;
        }
    struct graph *g = calloc(1, sizeof *g);
    hs_status st = HS_STATUS_OK;
    if (!g) {
        pthread_mutex_unlock(&c->mu);
        return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    }
    g->n = w->n_pending;
    memcpy(g->stages, w->pending, sizeof(void *) * (size_t)g->n);
    memcpy(g->dtypes, w->pending_dtypes, sizeof(enum hs_dtype) * (size_t)g->n);
    g->precision = g->dtypes[0] == HS_DTYPE_F16 ? HS_DTYPE_F16 : HS_DTYPE_F32;
    bool int8 = false;
    for (int i = 0; i < g->n; i++) int8 |= g->dtypes[i] == HS_DTYPE_I8;
    g->batch = B;
    g->seq = S;
    const int n_streams = atomic_load(&c->n_ws);
    st = ov_ir_build(g->stages, g->dtypes, g->n, B, S, &g->ir, err);
    ov_status_e os = OK;
    if (!st && g->ir.bin_len) { /* (a range with no constant, normalize left out, has none) */
        int64_t dim = (int64_t)g->ir.bin_len;
        ov_shape_t shape = {1, &dim};
        os = ov_tensor_create_from_host_ptr(U8, shape, g->ir.bin, &g->weights);
        if (os != OK) st = ov_fail(err, os, "weights tensor");
    }
    if (!st) {
        os = ov_core_read_model_from_memory_buffer(core, g->ir.xml, g->ir.xml_len, g->weights,
                                                   &g->model);
        if (os != OK) st = ov_fail(err, os, "reading the graph");
    }
    if (!st) {
        char threads[16], streams[16];
        snprintf(threads, sizeof threads, "%d", c->threads);
        snprintf(streams, sizeof streams, "%d", n_streams);
        ov_property_t props[5] = {
            {ov_property_key_hint_inference_precision,
             g->precision == HS_DTYPE_F16 ? "f16" : "f32"},
            {ov_property_key_hint_performance_mode, "LATENCY"},
        };
        size_t n_props = 2;
        if (int8) props[n_props++] = (ov_property_t){OV_DYNAMIC_QUANT_KEY, OV_DYNAMIC_QUANT_GROUP};
        if (c->threads > 0 && !strncmp(c->device, "CPU", 3))
            props[n_props++] = (ov_property_t){ov_property_key_inference_num_threads, threads};
        /* the engine's slots: as many streams as batches may run at once, which share the
         * threads (one stream, the LATENCY hint's, would serialise them) */
        if (n_streams > 1) props[n_props++] = (ov_property_t){ov_property_key_num_streams, streams};
        os = ov_core_compile_model_props(core, g->model, c->device, n_props, props, &g->compiled);
        if (os != OK) st = ov_fail(err, os, "compiling the graph");
    }
    if (st) {
        if (g->model) ov_model_free(g->model);
        if (g->weights) ov_tensor_free(g->weights);
        ov_ir_free(&g->ir);
        free(g);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (host && host->log)
        host->log(3,
                  "openvino %s: compiled %d stages (%s .. %s)%s, shape [%d, %d], %d stream(s), "
                  "%zu bytes of IR",
                  c->device, g->n, g->stages[0]->name, g->stages[g->n - 1]->name,
                  int8 ? " with int8 weights" : "", B, S, n_streams > 1 ? n_streams : 1,
                  g->ir.xml_len + g->ir.bin_len);
    g->next = c->graphs;
    c->graphs = g;
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return HS_STATUS_OK;
}

static hs_status set_input(ov_infer_request_t *rq, size_t index, ov_element_type_e et, int rank,
                           int64_t *dims, void *data, struct hs_error *err)
{
    ov_shape_t shape = {rank, dims};
    ov_tensor_t *t = NULL;
    ov_status_e os = ov_tensor_create_from_host_ptr(et, shape, data, &t);
    if (os == OK) os = ov_infer_request_set_input_tensor_by_index(rq, index, t);
    if (t) ov_tensor_free(t);
    return os == OK ? HS_STATUS_OK : ov_fail(err, os, "setting an input");
}

/* Runs the recorded run of stages as one graph. */
static hs_status flush(struct ov_ctx *c, struct ws *w, struct hs_error *err)
{
    if (!w->n_pending) return HS_STATUS_OK;
    struct graph *g = NULL;
    hs_status st = graph_get(c, w, &g, err);
    if (st) {
        w->n_pending = 0;
        return st;
    }
    w->n_pending = 0;
    int r = 0;
    while (r < w->n_reqs && w->req_graph[r] != g) r++;
    if (r == w->n_reqs) {
        if (r == MAX_REQS) {
            ov_infer_request_free(w->req[--w->n_reqs]);
            r = w->n_reqs;
        }
        ov_status_e os = ov_compiled_model_create_infer_request(g->compiled, &w->req[r]);
        if (os != OK) return ov_fail(err, os, "creating an infer request");
        w->req_graph[r] = g;
        w->n_reqs++;
    }
    ov_infer_request_t *rq = w->req[r];
    const int64_t B = w->pb, S = w->ps, H = w->hidden;
    for (int i = 0; i < g->ir.n_inputs && !st; i++) {
        int64_t d2[2] = {B, S}, d3[3] = {B, S, H}, dp[2] = {B, H}, dr[3] = {w->heads, S, S};
        switch (g->ir.input_order[i]) {
        case OV_IN_IDS:
            st = set_input(rq, (size_t)i, I32, 2, d2, w->ids, err);
            break;
        case OV_IN_TYPE_IDS:
            st = set_input(rq, (size_t)i, I32, 2, d2, w->types, err);
            break;
        case OV_IN_POS_IDS:
            st = set_input(rq, (size_t)i, I32, 2, d2, w->pos, err);
            break;
        case OV_IN_HIDDEN:
            st = set_input(rq, (size_t)i, F32, 3, d3, w->hidden_buf, err);
            break;
        case OV_IN_POOLED:
            st = set_input(rq, (size_t)i, F32, 2, dp, w->pooled, err);
            break;
        case OV_IN_MASK:
            st = set_input(rq, (size_t)i, F32, 2, d2, w->mask, err);
            break;
        case OV_IN_REL_BIAS: {
            const struct hs_stage *attn = NULL;
            for (int k = 0; k < g->n && !attn; k++)
                if (g->stages[k]->kind == HS_STAGE_ATTN) attn = g->stages[k];
            fill_rel_bias(w, attn);
            st = set_input(rq, (size_t)i, F32, 3, dr, w->rel, err);
            break;
        }
        }
    }
    if (st) return st;
    ov_status_e os = ov_infer_request_infer(rq);
    if (os != OK) return ov_fail(err, os, "inference");
    ov_tensor_t *out = NULL;
    os = ov_infer_request_get_output_tensor_by_index(rq, 0, &out);
    if (os != OK) return ov_fail(err, os, "reading the output");
    void *data = NULL;
    size_t bytes = 0;
    os = ov_tensor_data(out, &data);
    if (os == OK) os = ov_tensor_get_byte_size(out, &bytes);
    if (os == OK) {
        float *dst = g->ir.output_is_pooled ? w->pooled : w->hidden_buf;
        size_t want = sizeof(float) * (size_t)B * (size_t)H * (g->ir.output_is_pooled ? 1 : S);
        if (bytes != want) {
            ov_tensor_free(out);
            return hs_plugin_error(err, HS_STATUS_ENGINE,
                                   "openvino: output of %zu bytes, expected %zu", bytes, want);
        }
        memcpy(dst, data, bytes);
    }
    ov_tensor_free(out);
    return os == OK ? HS_STATUS_OK : ov_fail(err, os, "reading the output");
}

static hs_status ov_run_stage(void *p, void *wsp, const struct hs_stage *st, void *prep,
                              struct hs_error *err)
{
    struct ws *w = wsp;
    const struct prep *pr = prep;
    if (!pr || pr->st != st)
        return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT,
                               "openvino: stage %s was not prepared on this engine", st->name);
    /* f32 and int8 stages share a graph (int8 is in the weights, the precision hint stays f32);
     * f16 ones need another hint */
    if (w->n_pending && ((w->pending_dtypes[0] == HS_DTYPE_F16) != (pr->dtype == HS_DTYPE_F16) ||
                         w->n_pending == 128)) {
        hs_status s = flush(p, w, err);
        if (s) return s;
    }
    w->pending_dtypes[w->n_pending] = pr->dtype;
    w->pending[w->n_pending++] = st;
    return HS_STATUS_OK;
}

static hs_status ov_sync(void *p, void *wsp, struct hs_error *err)
{
    return flush(p, wsp, err);
}

static hs_status ov_act_write(void *p, void *wsp, enum hs_act_buf buf, const float *src,
                              struct hs_error *err)
{
    struct ws *w = wsp;
    w->n_pending = 0;
    (void)p, (void)err;
    const size_t H = (size_t)w->hidden;
    if (buf == HS_ACT_BUF_POOLED) {
        memcpy(w->pooled, src, sizeof(float) * (size_t)w->n_seqs * H);
        return HS_STATUS_OK;
    }
    memset(w->hidden_buf, 0, sizeof(float) * (size_t)w->pb * (size_t)w->ps * H);
    for (int i = 0; i < w->n_seqs; i++)
        memcpy(w->hidden_buf + (size_t)i * w->ps * H, src + (size_t)w->offsets[i] * H,
               sizeof(float) * (size_t)w->lengths[i] * H);
    return HS_STATUS_OK;
}

static hs_status ov_act_read(void *p, void *wsp, enum hs_act_buf buf, float *dst,
                             struct hs_error *err)
{
    struct ws *w = wsp;
    hs_status s = flush(p, w, err);
    if (s) return s;
    const size_t H = (size_t)w->hidden;
    if (buf == HS_ACT_BUF_POOLED) {
        memcpy(dst, w->pooled, sizeof(float) * (size_t)w->n_seqs * H);
        return HS_STATUS_OK;
    }
    for (int i = 0; i < w->n_seqs; i++)
        memcpy(dst + (size_t)w->offsets[i] * H, w->hidden_buf + (size_t)i * w->ps * H,
               sizeof(float) * (size_t)w->lengths[i] * H);
    return HS_STATUS_OK;
}

/* whole ONNX graphs as stages (ov_onnx.c) */
static hs_status ov_graph_load(void *p, const char *path, void **graph, struct hs_error *err)
{
    struct ov_ctx *c = p;
    return ov_onnx_load(core, c->device, c->threads, path, graph, err);
}

static void ov_graph_release(void *p, void *graph)
{
    (void)p;
    ov_onnx_release(graph);
}

static hs_status ov_graph_run(void *p, void *graph, const struct hs_graph_tensor *in, int n_in,
                              struct hs_graph_tensor *out, int n_out, struct hs_error *err)
{
    (void)p;
    return ov_onnx_run(graph, in, n_in, out, n_out, err);
}

static const struct hs_engine_iface ov_iface = {
    .api_version = HS_ENGINE_API_VERSION,
    .kind = "openvino",
    .destroy = ov_destroy,
    .caps = ov_caps,
    .stage_prepare = ov_prepare,
    .stage_release = ov_release,
    .ws_create = ov_ws_create,
    .ws_destroy = ov_ws_destroy,
    .batch_begin = ov_batch_begin,
    .act_write = ov_act_write,
    .run_stage = ov_run_stage,
    .act_read = ov_act_read,
    .sync = ov_sync,
    .graph_load = ov_graph_load,
    .graph_release = ov_graph_release,
    .graph_run = ov_graph_run,
};

/* The runtime's device named name: an exact name of its list ("GPU.1"), or a family ("GPU": its
 * first device of that family), case-insensitive; AUTO (and AUTO:...) goes to OpenVINO as
 * given, which picks among the devices itself. */
static hs_status device_by_name(const char *name, const char **out, struct hs_error *err)
{
    if (!strncasecmp(name, "AUTO", 4) && (name[4] == 0 || name[4] == ':')) {
        *out = name;
        if (!strcasecmp(name, "AUTO")) *out = "AUTO";
        return HS_STATUS_OK;
    }
    for (int i = 0; i < n_devices; i++)
        if (!strcasecmp(devices[i], name)) {
            *out = devices[i];
            return HS_STATUS_OK;
        }
    const size_t n = strlen(name);
    for (int i = 0; i < n_devices; i++)
        if (!strncasecmp(devices[i], name, n) && devices[i][n] == '.') {
            *out = devices[i];
            return HS_STATUS_OK;
        }
    char list[MAX_DEVICES * 66] = "";
    for (int i = 0; i < n_devices; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 devices[i]);
    return hs_plugin_error(err, HS_STATUS_UNSUPPORTED,
                           "openvino: no device '%s' (the runtime lists %s)", name, list);
}

static hs_status ov_create(const struct hs_engine_opts *opts, hs_engine_t *out,
                           struct hs_error *err)
{
    if (ov_device_count() == 0)
        return hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "openvino: no device%s",
                               core ? "" : " (the runtime did not start)");
    const char *device = NULL;
    if (opts->device_name && *opts->device_name) {
        hs_status s = device_by_name(opts->device_name, &device, err);
        if (s) return s;
    } else if (opts->device >= n_devices) {
        return hs_plugin_error(err, HS_STATUS_UNSUPPORTED,
                               "openvino: device %d of %d (hetserve devices lists them)",
                               opts->device, n_devices);
    } else {
        device = devices[opts->device];
    }
    struct ov_ctx *c = calloc(1, sizeof *c);
    if (!c) return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    snprintf(c->device, sizeof c->device, "%s", device);
    pthread_mutex_init(&c->mu, NULL);
    c->threads = opts->threads;
    const char *st = getenv("HS_OPENVINO_STATIC");
    c->static_shapes = !strncmp(c->device, "NPU", 3) || (st && *st == '1');
    char *v = NULL;
    if (ov_core_get_property(core, c->device, ov_property_key_device_full_name, &v) == OK && v) {
        snprintf(c->full_name, sizeof c->full_name, "%s", v);
        ov_free(v);
    } else {
        snprintf(c->full_name, sizeof c->full_name, "%s", c->device);
    }
    c->dtypes = 1u << HS_DTYPE_F32;
    /* int8 weights with dynamic activation quantization: checked on the CPU plugin only */
    if (!strncmp(c->device, "CPU", 3)) c->dtypes |= 1u << HS_DTYPE_I8;
    v = NULL;
    if (ov_core_get_property(core, c->device, ov_property_key_device_capabilities, &v) == OK && v) {
        if (strstr(v, "FP16")) c->dtypes |= 1u << HS_DTYPE_F16;
        ov_free(v);
    }
    char name[32];
    snprintf(name, sizeof name, "openvino%d", opts->device);
    return host->engine_wrap(&ov_iface, c, opts->name ? opts->name : name, out, err);
}

static const struct hs_plugin plugin = {
    .abi_version = HS_PLUGIN_ABI_VERSION,
    .kind =
        {
            .name = "openvino",
            .summary = "OpenVINO runtime (CPU, integrated GPU, NPU) as a plugin: the encoder as "
                       "an OpenVINO graph written by hetserve; f32, f16 (GPU, NPU), int8 (CPU)",
            .dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_F16 | 1u << HS_DTYPE_I8,
            .native = HS_DTYPE_F32,
            .device_count = ov_device_count,
            .create = ov_create,
        },
};

const struct hs_plugin *hs_engine_plugin(const struct hs_plugin_host *h);
__attribute__((visibility("default"))) const struct hs_plugin *
hs_engine_plugin(const struct hs_plugin_host *h)
{
    if (!h || h->abi_version != HS_PLUGIN_ABI_VERSION) return NULL;
    host = h;
    return &plugin;
}
