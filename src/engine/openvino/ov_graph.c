/* The OpenVINO engine's graph writer (ov_graph.h): OpenVINO IR v11, written from the stages.
 *
 * Every layer has one output; its port id is its number of inputs. Port dimensions are written
 * as we know them (-1 where dynamic) and Parameters carry their partial shape; OpenVINO infers
 * the rest. LayerNorm is MVN (mean and variance over the last axis, eps inside the square root,
 * as torch) times gamma plus beta. */
#include "engine/openvino/ov_graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plugin.h"

struct buf {
    char *s;
    size_t n, cap;
    int oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int r = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (r < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)r < b->cap - b->n) {
            b->n += (size_t)r;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap - b->n <= (size_t)r) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

struct val {
    int rank;
    int64_t dim[4];
    const char *prec; /* "FP32", "I32", "I64" */
};

#define MAX_LAYERS 4096

struct gb {
    struct buf layers, edges;
    unsigned char *bin;
    size_t bin_n, bin_cap;
    int n; /* layers so far */
    struct val v[MAX_LAYERS];
    int n_in[MAX_LAYERS];
    int params[OV_IN_COUNT]; /* layer id of each input, -1 = not yet */
    int pos_mask[2];         /* causal / windowed score bias of global [0] and local [1] layers */
    struct ov_ir *ir;
    int batch, seq, hidden, heads;
    int oom;
};

static void port_dims(struct buf *b, const struct val *v)
{
    for (int i = 0; i < v->rank; i++) put(b, "<dim>%lld</dim>", (long long)v->dim[i]);
}

static struct val V(const char *prec, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return (struct val){rank, {d0, d1, d2, d3}, prec};
}

/* Emits a layer with inputs ins[0..n_in) and one output of shape out. Returns its id. */
static int
layer(struct gb *g, const char *type, const char *version, const char *data, int n_in,
      const int *ins, struct val out)
{
    if (g->n >= MAX_LAYERS) {
        g->oom = 1;
        return 0;
    }
    const int id = g->n++;
    struct buf *b = &g->layers;
    put(b, "<layer id=\"%d\" name=\"l%d\" type=\"%s\" version=\"%s\">", id, id, type, version);
    if (data) put(b, "<data %s/>", data);
    if (n_in) {
        put(b, "<input>");
        for (int i = 0; i < n_in; i++) {
            put(b, "<port id=\"%d\" precision=\"%s\">", i, g->v[ins[i]].prec);
            port_dims(b, &g->v[ins[i]]);
            put(b, "</port>");
            put(&g->edges,
                "<edge from-layer=\"%d\" from-port=\"%d\" to-layer=\"%d\" to-port=\"%d\"/>", ins[i],
                g->n_in[ins[i]], id, i);
        }
        put(b, "</input>");
    }
    if (strcmp(type, "Result")) {
        put(b, "<output><port id=\"%d\" precision=\"%s\">", n_in, out.prec);
        port_dims(b, &out);
        put(b, "</port></output>");
    }
    put(b, "</layer>\n");
    g->v[id] = out;
    g->n_in[id] = n_in;
    return id;
}

/* A constant from bytes (copied into the blob, 64-byte aligned). */
static int constant(struct gb *g, const char *et, const char *prec, size_t esize, const void *data,
                    struct val shape)
{
    size_t count = 1;
    for (int i = 0; i < shape.rank; i++) count *= (size_t)shape.dim[i];
    size_t bytes = count * esize, off = (g->bin_n + 63) & ~(size_t)63;
    if (off + bytes > g->bin_cap) {
        size_t cap = g->bin_cap ? g->bin_cap : 1 << 20;
        while (cap < off + bytes) cap *= 2;
        unsigned char *nb = aligned_alloc(64, cap);
        if (!nb) {
            g->oom = 1;
            return 0;
        }
        if (g->bin_n) memcpy(nb, g->bin, g->bin_n);
        free(g->bin);
        g->bin = nb;
        g->bin_cap = cap;
    }
    memset(g->bin + g->bin_n, 0, off - g->bin_n);
    memcpy(g->bin + off, data, bytes);
    g->bin_n = off + bytes;
    char attrs[256], dims[96] = "";
    size_t dn = 0;
    for (int i = 0; i < shape.rank; i++)
        dn += (size_t)snprintf(dims + dn, sizeof dims - dn, "%s%lld", i ? "," : "",
                               (long long)shape.dim[i]);
    snprintf(attrs, sizeof attrs, "element_type=\"%s\" shape=\"%s\" offset=\"%zu\" size=\"%zu\"",
             et, dims, off, bytes);
    shape.prec = prec;
    return layer(g, "Const", "opset1", attrs, 0, NULL, shape);
}

static int const_i64(struct gb *g, int n, const int64_t *v)
{
    return constant(g, "i64", "I64", 8, v, V("I64", 1, n, 0, 0, 0));
}

static int const_scalar(struct gb *g, float x)
{
    return constant(g, "f32", "FP32", 4, &x, V("FP32", 0, 0, 0, 0, 0));
}

static int binop(struct gb *g, const char *type, int a, int b, struct val out);

/* A weight tensor's values as f32 (malloc'ed; NULL when out of memory). */
static float *to_f32(const struct hs_tensor *t, size_t *count)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    *count = n;
    float *f = malloc(n * sizeof(float));
    if (!f) return NULL;
    const uint16_t *h = t->data;
    for (size_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case HS_DTYPE_F32:
            f[i] = ((const float *)t->data)[i];
            break;
        case HS_DTYPE_BF16: {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&f[i], &u, 4);
            break;
        }
        default: { /* F16 */
            uint32_t x = h[i], sign = (x >> 15) << 31, e = (x >> 10) & 31, m = x & 1023, u;
            if (e == 0) { /* zero or subnormal */
                float v = ldexpf((float)m, -24);
                memcpy(&u, &v, 4);
                u |= sign;
            } else if (e == 31) {
                u = sign | 0x7f800000u | (m << 13);
            } else {
                u = sign | ((e + 112) << 23) | (m << 13);
            }
            memcpy(&f[i], &u, 4);
        }
        }
    }
    return f;
}

/* A weight tensor converted to f32. */
static int weight(struct gb *g, const struct hs_tensor *t)
{
    size_t n;
    struct val s = {t->ndim, {0}, "FP32"};
    for (int i = 0; i < t->ndim; i++) s.dim[i] = t->shape[i];
    float *f = to_f32(t, &n);
    if (!f) {
        g->oom = 1;
        return 0;
    }
    int id = constant(g, "f32", "FP32", 4, f, s);
    free(f);
    return id;
}

/* A linear layer's weight w [n, k] as int8 with one f32 scale per output row, decompressed in
 * the graph: Const i8 -> Convert f32 -> Multiply by Const f32 [n, 1]. OpenVINO's CPU plugin
 * recognises that subgraph in front of a MatMul as compressed weights and keeps them int8.
 * smooth (may be NULL): [k] SmoothQuant divisors of the layer's input; the weight's columns are
 * multiplied by them before quantizing, as the CPU engine does (engine/cpu/qlinear.c). Rows are
 * quantized symmetrically to [-127, 127], scale amax / 127 (1 for an all-zero row). */
static int weight_i8(struct gb *g, const struct hs_tensor *w, const float *smooth)
{
    const int64_t n = w->shape[0], k = w->shape[1];
    size_t count;
    float *f = to_f32(w, &count);
    int8_t *q = malloc((size_t)(n * k));
    float *scale = malloc(sizeof(float) * (size_t)n);
    if (!f || !q || !scale) {
        free(f), free(q), free(scale);
        g->oom = 1;
        return 0;
    }
    for (int64_t j = 0; j < n; j++) {
        float *row = f + j * k, amax = 0.0f;
        for (int64_t i = 0; i < k; i++) {
            if (smooth) row[i] *= smooth[i];
            amax = fabsf(row[i]) > amax ? fabsf(row[i]) : amax;
        }
        const float sc = amax > 0.0f ? amax / 127.0f : 1.0f;
        scale[j] = sc;
        for (int64_t i = 0; i < k; i++) {
            const float v = row[i] / sc;
            const int r = (int)(v + (v >= 0.0f ? 0.5f : -0.5f));
            q[j * k + i] = (int8_t)(r > 127 ? 127 : (r < -127 ? -127 : r));
        }
    }
    int c = constant(g, "i8", "I8", 1, q, V("I8", 2, n, k, 0, 0));
    int cv =
        layer(g, "Convert", "opset1", "destination_type=\"f32\"", 1, &c, V("FP32", 2, n, k, 0, 0));
    int sc = constant(g, "f32", "FP32", 4, scale, V("FP32", 2, n, 1, 0, 0));
    free(f), free(q), free(scale);
    return binop(g, "Multiply", cv, sc, V("FP32", 2, n, k, 0, 0));
}

static int binop(struct gb *g, const char *type, int a, int b, struct val out)
{
    int ins[2] = {a, b};
    return layer(g, type, "opset1", "auto_broadcast=\"numpy\"", 2, ins, out);
}

static int param(struct gb *g, enum ov_input which)
{
    if (g->params[which] >= 0) return g->params[which];
    const int64_t B = g->batch, S = g->seq, H = g->hidden;
    struct val v;
    const char *et = "f32";
    switch (which) {
    case OV_IN_IDS:
    case OV_IN_TYPE_IDS:
    case OV_IN_POS_IDS:
        v = V("I32", 2, B, S, 0, 0);
        et = "i32";
        break;
    case OV_IN_HIDDEN:
        v = V("FP32", 3, B, S, H, 0);
        break;
    case OV_IN_POOLED:
        v = V("FP32", 2, B, H, 0, 0);
        break;
    case OV_IN_MASK:
        v = V("FP32", 2, B, S, 0, 0);
        break;
    default: /* OV_IN_REL_BIAS */
        v = V("FP32", 3, g->heads, S, S, 0);
        break;
    }
    char shape[96] = "", attrs[160];
    size_t n = 0;
    for (int i = 0; i < v.rank; i++)
        n += v.dim[i] < 0 ? (size_t)snprintf(shape + n, sizeof shape - n, "%s?", i ? "," : "")
                          : (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? "," : "",
                                             (long long)v.dim[i]);
    snprintf(attrs, sizeof attrs, "shape=\"%s\" element_type=\"%s\"", shape, et);
    int id = layer(g, "Parameter", "opset1", attrs, 0, NULL, v);
    g->params[which] = id;
    g->ir->inputs |= 1u << which;
    g->ir->input_order[g->ir->n_inputs++] = which;
    return id;
}

/* LayerNorm over the last axis of x (shape s): MVN * gamma + beta. */
static int layer_norm(struct gb *g, int x, const struct hs_tensor *gamma,
                      const struct hs_tensor *beta, float eps)
{
    struct val s = g->v[x];
    int64_t axis = -1;
    int ins[2] = {x, const_i64(g, 1, &axis)};
    char attrs[128];
    snprintf(attrs, sizeof attrs,
             "eps=\"%.9g\" normalize_variance=\"true\" eps_mode=\"inside_sqrt\"", (double)eps);
    int y = layer(g, "MVN", "opset6", attrs, 2, ins, s);
    y = binop(g, "Multiply", y, weight(g, gamma), s);
    return beta && beta->data ? binop(g, "Add", y, weight(g, beta), s) : y; /* beta optional */
}

/* RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * gamma. */
static int rms_norm(struct gb *g, int x, const struct hs_tensor *gamma, float eps)
{
    struct val s = g->v[x], r = s;
    r.dim[r.rank - 1] = 1;
    int64_t axis = -1;
    int ins[2] = {binop(g, "Multiply", x, x, s), const_i64(g, 1, &axis)};
    int ms = layer(g, "ReduceMean", "opset1", "keep_dims=\"true\"", 2, ins, r);
    ms = binop(g, "Add", ms, const_scalar(g, eps), r);
    ms = layer(g, "Sqrt", "opset1", NULL, 1, &ms, r);
    return binop(g, "Multiply", binop(g, "Divide", x, ms, s), weight(g, gamma), s);
}

/* The model's norm (LayerNorm or RMSNorm) with gamma and optional beta; gamma absent: x. */
static int norm(struct gb *g, int x, const struct hs_encoder_dims *d, const struct hs_tensor *gamma,
                const struct hs_tensor *beta)
{
    if (!gamma->data) return x;
    return d->norm == HS_NORM_RMS ? rms_norm(g, x, gamma, d->ln_eps)
                                  : layer_norm(g, x, gamma, beta, d->ln_eps);
}

/* x [B, S, in] times W^T ([out, in]) plus b. int8: W as compressed int8 weights (weight_i8),
 * with smooth (may be NULL) folded into them; x must then already be divided by smooth. */
static int linear(struct gb *g, int x, const struct hs_tensor *w, const struct hs_tensor *b,
                  bool int8, const float *smooth)
{
    struct val s = g->v[x];
    s.dim[s.rank - 1] = w->shape[0];
    int ins[2] = {x, int8 ? weight_i8(g, w, smooth) : weight(g, w)};
    int y = layer(g, "MatMul", "opset1", "transpose_a=\"false\" transpose_b=\"true\"", 2, ins, s);
    return b && b->data ? binop(g, "Add", y, weight(g, b), s) : y;
}

static int reshape(struct gb *g, int x, int n, const int64_t *shape, struct val out)
{
    int ins[2] = {x, const_i64(g, n, shape)};
    return layer(g, "Reshape", "opset1", "special_zero=\"true\"", 2, ins, out);
}

static int transpose(struct gb *g, int x, int n, const int64_t *order, struct val out)
{
    int ins[2] = {x, const_i64(g, n, order)};
    return layer(g, "Transpose", "opset1", NULL, 2, ins, out);
}

static int gather_rows(struct gb *g, const struct hs_tensor *table, int ids)
{
    int64_t zero = 0;
    int ins[3] = {weight(g, table), ids,
                  constant(g, "i64", "I64", 8, &zero, V("I64", 0, 0, 0, 0, 0))};
    struct val out = V("FP32", 3, g->batch, g->seq, table->shape[1], 0);
    return layer(g, "Gather", "opset8", "batch_dims=\"0\"", 3, ins, out);
}

static int embed(struct gb *g, const struct hs_stage *st)
{
    const struct hs_encoder_dims *d = st->dims;
    int x = gather_rows(g, &st->w[HS_W_WORD_EMB], param(g, OV_IN_IDS));
    struct val s = g->v[x];
    if (st->w[HS_W_POS_EMB].data) /* (rotary families have no position table) */
        x = binop(g, "Add", x, gather_rows(g, &st->w[HS_W_POS_EMB], param(g, OV_IN_POS_IDS)), s);
    if (st->w[HS_W_TYPE_EMB].data)
        x = binop(g, "Add", x, gather_rows(g, &st->w[HS_W_TYPE_EMB], param(g, OV_IN_TYPE_IDS)), s);
    return norm(g, x, d, &st->w[HS_W_EMB_LN_G], &st->w[HS_W_EMB_LN_B]);
}

/* [B, 1, S, S] additive bias hiding from query i the keys j after it (causal) or farther than
 * window from it, from the batch's position ids. */
static int pos_mask(struct gb *g, bool causal, int window)
{
    const int64_t B = g->batch, S = g->seq;
    static const int64_t rows[4] = {0, 1, -1, 1}, cols[4] = {0, 1, 1, -1};
    int pos = param(g, OV_IN_POS_IDS);
    pos = layer(g, "Convert", "opset1", "destination_type=\"f32\"", 1, &pos,
                V("FP32", 2, B, S, 0, 0));
    const struct val sq = V("FP32", 4, B, 1, S, S), bq = V("BOOL", 4, B, 1, S, S);
    int i = reshape(g, pos, 4, rows, V("FP32", 4, B, 1, S, 1));
    int j = reshape(g, pos, 4, cols, V("FP32", 4, B, 1, 1, S));
    int diff = binop(g, "Subtract", j, i, sq); /* key - query */
    int hide = -1;
    if (causal) hide = binop(g, "Greater", diff, const_scalar(g, 0.0f), bq);
    if (window > 0) {
        int a = layer(g, "Abs", "opset1", NULL, 1, &diff, sq);
        int far = binop(g, "Greater", a, const_scalar(g, (float)window), bq);
        hide = hide < 0 ? far : binop(g, "LogicalOr", hide, far, bq);
    }
    int ins[3] = {hide, const_scalar(g, -30000.0f), const_scalar(g, 0.0f)};
    return layer(g, "Select", "opset1", "auto_broadcast=\"numpy\"", 3, ins, sq);
}

/* k or v heads [B, KV, S, HD] repeated to the query heads [B, NH, S, HD] (head h reads kv head
 * h / (NH / KV)). */
static int repeat_kv(struct gb *g, int x, int64_t kv, int64_t nh, int64_t hd)
{
    int64_t idx[1024], axis = 1;
    if (nh > 1024) {
        g->oom = 1;
        return x;
    }
    for (int64_t h = 0; h < nh; h++) idx[h] = h / (nh / kv);
    int ins[3] = {x, const_i64(g, (int)nh, idx), const_i64(g, 1, &axis)};
    return layer(g, "Gather", "opset8", "batch_dims=\"0\"", 3, ins,
                 V("FP32", 4, g->batch, nh, g->seq, hd));
}

/* [B, 1, 1, S] additive mask: 0 on tokens, -30000 on padding (finite in f16 too). */
static int mask_bias(struct gb *g)
{
    static const int64_t shape[4] = {0, 1, 1, -1};
    int m = param(g, OV_IN_MASK);
    struct val s4 = V("FP32", 4, g->batch, 1, 1, g->seq);
    int r = reshape(g, m, 4, shape, s4);
    r = binop(g, "Subtract", r, const_scalar(g, 1.0f), s4);
    return binop(g, "Multiply", r, const_scalar(g, 30000.0f), s4);
}

/* The input of an int8 stage's first linear layer(s): x divided by the stage's SmoothQuant
 * divisors (HS_W_SMOOTH, checked by the engine at prepare), which *smooth receives to fold into
 * the weights; x itself (and *smooth NULL) when the stage is not int8 or has none. */
static int smoothed(struct gb *g, int x, const struct hs_stage *st, bool int8, const float **smooth)
{
    const struct hs_tensor *t = &st->w[HS_W_SMOOTH];
    *smooth = NULL;
    if (!int8 || !t->data) return x;
    int64_t k = 1;
    for (int i = 0; i < t->ndim; i++) k *= t->shape[i];
    float *inv = malloc(sizeof(float) * (size_t)k);
    if (!inv) {
        g->oom = 1;
        return x;
    }
    *smooth = t->data;
    for (int64_t i = 0; i < k; i++) inv[i] = 1.0f / (*smooth)[i];
    int c = constant(g, "f32", "FP32", 4, inv, V("FP32", 1, k, 0, 0, 0));
    free(inv);
    return binop(g, "Multiply", x, c, g->v[x]);
}

/* x[..., from:to] along the last axis. */
static int slice_last(struct gb *g, int x, int64_t from, int64_t to, struct val out)
{
    const int64_t axis = -1, step = 1;
    int ins[5] = {x, const_i64(g, 1, &from), const_i64(g, 1, &to), const_i64(g, 1, &step),
                  const_i64(g, 1, &axis)};
    return layer(g, "Slice", "opset8", NULL, 5, ins, out);
}

/* Rotary positions on x [B, NH, S, HD] (NeoX halves over the first rotary_dim dims, base
 * theta), with the cos and sin of every position computed here in float32 as the CPU engine does
 * (engine/cpu/kernels.c) and gathered by the batch's position ids. */
static int rope(struct gb *g, int x, const struct hs_encoder_dims *d, float theta)
{
    const int64_t B = g->batch, S = g->seq, NH = g->v[x].dim[1], HD = d->head_dim;
    const int64_t rd = d->rotary_dim, half = rd / 2, P = d->max_positions;
    float *tab = malloc(sizeof(float) * (size_t)(2 * P * half));
    if (!tab) {
        g->oom = 1;
        return x;
    }
    for (int64_t i = 0; i < half; i++) {
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rd);
        if (d->rope_freq_div > 0.0f && d->rope_freq_div != 1.0f) inv /= d->rope_freq_div;
        for (int64_t p = 0; p < P; p++) {
            tab[p * half + i] = cosf((float)p * inv);
            tab[P * half + p * half + i] = sinf((float)p * inv);
        }
    }
    const int64_t to4[4] = {0, 1, -1, half};
    int cs[2];
    for (int k = 0; k < 2; k++) {
        struct hs_tensor t = {.dtype = HS_DTYPE_F32,
                              .ndim = 2,
                              .shape = {P, half},
                              .data = tab + k * P * half,
                              .bytes = sizeof(float) * (size_t)(P * half)};
        int rows = gather_rows(g, &t, param(g, OV_IN_POS_IDS)); /* [B, S, half] */
        cs[k] = reshape(g, rows, 4, to4, V("FP32", 4, B, 1, S, half));
    }
    free(tab);
    const struct val hv = V("FP32", 4, B, NH, S, half);
    const int x1 = slice_last(g, x, 0, half, hv), x2 = slice_last(g, x, half, rd, hv);
    int y1 = binop(g, "Subtract", binop(g, "Multiply", x1, cs[0], hv),
                   binop(g, "Multiply", x2, cs[1], hv), hv);
    int y2 = binop(g, "Add", binop(g, "Multiply", x2, cs[0], hv),
                   binop(g, "Multiply", x1, cs[1], hv), hv);
    int parts[3] = {y1, y2, 0};
    int n = 2;
    if (rd < HD) parts[n++] = slice_last(g, x, rd, HD, V("FP32", 4, B, NH, S, HD - rd));
    return layer(g, "Concat", "opset1", "axis=\"3\"", n, parts, g->v[x]);
}

static int attention(struct gb *g, int x, const struct hs_stage *st, bool int8, int *bias)
{
    const struct hs_encoder_dims *d = st->dims;
    const int64_t B = g->batch, S = g->seq, NH = d->heads, HD = d->head_dim;
    const int64_t KV = d->kv_heads > 0 ? d->kv_heads : NH, NQ = NH * HD;
    const int64_t perm[4] = {0, 2, 1, 3}, merge[3] = {0, 0, NQ};
    struct val h4 = V("FP32", 4, B, NH, S, HD);
    int qkv[3];
    const enum hs_weight_role roles[3][2] = {
        {HS_W_Q, HS_W_Q_B}, {HS_W_K, HS_W_K_B}, {HS_W_V, HS_W_V_B}};
    const enum hs_weight_role qk_norm[2] = {HS_W_Q_NORM, HS_W_K_NORM};
    /* pre-norm: the block reads N(x) and adds to x; the norm may be absent (ModernBERT's first) */
    const int in = d->norm_pre ? norm(g, x, d, &st->w[HS_W_ATTN_LN_G], &st->w[HS_W_ATTN_LN_B]) : x;
    const float *smooth;
    const int xs = smoothed(g, in, st, int8, &smooth);
    /* a local layer: ModernBERT's window, and its own rotary base */
    const bool local = d->window > 0 && d->global_every > 0 && st->layer % d->global_every;
    for (int i = 0; i < 3; i++) {
        const int64_t nh = i == 0 ? NH : KV, split[4] = {0, 0, nh, HD};
        int y = linear(g, xs, &st->w[roles[i][0]], &st->w[roles[i][1]], int8, smooth);
        y = reshape(g, y, 4, split, V("FP32", 4, B, S, nh, HD));
        if (i < 2 && st->w[qk_norm[i]].data) y = rms_norm(g, y, &st->w[qk_norm[i]], d->ln_eps);
        y = transpose(g, y, 4, perm, V("FP32", 4, B, nh, S, HD));
        if (i < 2 && d->pos == HS_POS_ROTARY)
            y = rope(g, y, d,
                     local && d->rope_theta_local > 0.0f ? d->rope_theta_local : d->rope_theta);
        qkv[i] = nh == NH ? y : repeat_kv(g, y, KV, NH, HD);
    }
    struct val sc = V("FP32", 4, B, NH, S, S);
    int ins[2] = {qkv[0], qkv[1]};
    int scores =
        layer(g, "MatMul", "opset1", "transpose_a=\"false\" transpose_b=\"true\"", 2, ins, sc);
    scores = binop(g, "Multiply", scores, const_scalar(g, 1.0f / sqrtf((float)HD)), sc);
    if (*bias < 0) *bias = mask_bias(g);
    scores = binop(g, "Add", scores, *bias, sc);
    if (st->w[HS_W_REL_BIAS].data) {
        scores = binop(g, "Add", scores, param(g, OV_IN_REL_BIAS), sc);
    }
    if (d->causal || local) {
        if (g->pos_mask[local] < 0)
            g->pos_mask[local] = pos_mask(g, d->causal, local ? d->window : 0);
        scores = binop(g, "Add", scores, g->pos_mask[local], sc);
    }
    int p = layer(g, "Softmax", "opset8", "axis=\"-1\"", 1, &scores, sc);
    int ins2[2] = {p, qkv[2]};
    int ctx =
        layer(g, "MatMul", "opset1", "transpose_a=\"false\" transpose_b=\"false\"", 2, ins2, h4);
    ctx = transpose(g, ctx, 4, perm, V("FP32", 4, B, S, NH, HD));
    ctx = reshape(g, ctx, 3, merge, V("FP32", 3, B, S, NQ, 0));
    int y = linear(g, ctx, &st->w[HS_W_ATTN_OUT], &st->w[HS_W_ATTN_OUT_B], int8, NULL);
    y = binop(g, "Add", y, x, g->v[x]);
    if (d->norm_pre) return y;
    return norm(g, y, d, &st->w[HS_W_ATTN_LN_G], &st->w[HS_W_ATTN_LN_B]);
}

static int activation(struct gb *g, int h, enum hs_act_fn act)
{
    struct val s = g->v[h];
    switch (act) {
    case HS_ACT_RELU:
        return layer(g, "Relu", "opset1", NULL, 1, &h, s);
    case HS_ACT_SILU: /* x * sigmoid(x) */
        return layer(g, "Swish", "opset4", NULL, 1, &h, s);
    case HS_ACT_GELU_TANH:
        return layer(g, "Gelu", "opset7", "approximation_mode=\"TANH\"", 1, &h, s);
    case HS_ACT_GELU_ERF:
        break;
    }
    return layer(g, "Gelu", "opset7", "approximation_mode=\"ERF\"", 1, &h, s);
}

static int ffn(struct gb *g, int x, const struct hs_stage *st, bool int8)
{
    const struct hs_encoder_dims *d = st->dims;
    const float *smooth;
    const int in = d->norm_pre ? norm(g, x, d, &st->w[HS_W_FFN_LN_G], &st->w[HS_W_FFN_LN_B]) : x;
    const int xs = smoothed(g, in, st, int8, &smooth);
    int h = linear(g, xs, &st->w[HS_W_FFN_IN], &st->w[HS_W_FFN_IN_B], int8, smooth);
    if (d->ffn == HS_FFN_GATED) { /* act(gate(x)) * up(x); the gate has no bias */
        int gate = linear(g, xs, &st->w[HS_W_FFN_GATE], NULL, int8, smooth);
        h = binop(g, "Multiply", h, activation(g, gate, d->act), g->v[h]);
    } else {
        h = activation(g, h, d->act);
    }
    int y = linear(g, h, &st->w[HS_W_FFN_OUT], &st->w[HS_W_FFN_OUT_B], int8, NULL);
    y = binop(g, "Add", y, x, g->v[x]);
    if (d->norm_pre) return y;
    return norm(g, y, d, &st->w[HS_W_FFN_LN_G], &st->w[HS_W_FFN_LN_B]);
}

static int reduce(struct gb *g, const char *type, int x, int64_t axis, struct val out)
{
    int ins[2] = {x, const_i64(g, 1, &axis)};
    return layer(g, type, "opset1", "keep_dims=\"false\"", 2, ins, out);
}

static int pool(struct gb *g, int x, const struct hs_stage *st)
{
    const int64_t B = g->batch, S = g->seq, H = g->hidden;
    struct val out = V("FP32", 2, B, H, 0, 0);
    if (st->dims->pool == HS_POOL_LAST) { /* the token at length - 1 of each sequence */
        int64_t axis = 1;
        int cnt_ins[2] = {param(g, OV_IN_MASK), const_i64(g, 1, &axis)};
        int len = layer(g, "ReduceSum", "opset1", "keep_dims=\"false\"", 2, cnt_ins,
                        V("FP32", 1, B, 0, 0, 0));
        len = binop(g, "Subtract", len, const_scalar(g, 1.0f), V("FP32", 1, B, 0, 0, 0));
        len = layer(g, "Convert", "opset1", "destination_type=\"i64\"", 1, &len,
                    V("I64", 1, B, 0, 0, 0));
        int ins[3] = {x, len, const_i64(g, 1, &axis)};
        return layer(g, "Gather", "opset8", "batch_dims=\"1\"", 3, ins, out);
    }
    if (st->dims->pool == HS_POOL_CLS) {
        int64_t zero = 0, one = 1;
        int ins[3] = {x, constant(g, "i64", "I64", 8, &zero, V("I64", 0, 0, 0, 0, 0)),
                      constant(g, "i64", "I64", 8, &one, V("I64", 0, 0, 0, 0, 0))};
        return layer(g, "Gather", "opset8", "batch_dims=\"0\"", 3, ins, out);
    }
    static const int64_t col[3] = {0, -1, 1};
    int m = reshape(g, param(g, OV_IN_MASK), 3, col, V("FP32", 3, B, S, 1, 0));
    int xm = binop(g, "Multiply", x, m, g->v[x]);
    int sum = reduce(g, "ReduceSum", xm, 1, out);
    int cnt = reduce(g, "ReduceSum", m, 1, V("FP32", 2, B, 1, 0, 0));
    return binop(g, "Divide", sum, cnt, out);
}

static int normalize(struct gb *g, int x)
{
    struct val s = g->v[x], n = V("FP32", 2, g->batch, 1, 0, 0);
    int sq = binop(g, "Multiply", x, x, s);
    int64_t axis = -1;
    int ins[2] = {sq, const_i64(g, 1, &axis)};
    int ss = layer(g, "ReduceSum", "opset1", "keep_dims=\"true\"", 2, ins, n);
    int norm = layer(g, "Sqrt", "opset1", NULL, 1, &ss, n);
    norm = binop(g, "Maximum", norm, const_scalar(g, 1e-12f), n);
    return binop(g, "Divide", x, norm, s);
}

const char *ov_input_name(enum ov_input i)
{
    static const char *const names[OV_IN_COUNT] = {"ids",    "type_ids", "pos_ids", "hidden",
                                                   "pooled", "mask",     "rel_bias"};
    return i < OV_IN_COUNT ? names[i] : "?";
}

void ov_ir_free(struct ov_ir *ir)
{
    free(ir->xml);
    free(ir->bin);
    memset(ir, 0, sizeof *ir);
}

hs_status ov_ir_build(const struct hs_stage *const *stages, const enum hs_dtype *dtypes, int n,
                      int batch, int seq, struct ov_ir *out, struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < 1) return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT, "openvino: empty range");
    struct gb *g = calloc(1, sizeof *g);
    if (!g) return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    g->ir = out;
    g->batch = batch;
    g->seq = seq;
    g->hidden = stages[0]->dims->hidden;
    g->heads = stages[0]->dims->heads;
    for (int i = 0; i < OV_IN_COUNT; i++) g->params[i] = -1;
    g->pos_mask[0] = g->pos_mask[1] = -1;

    int x = -1, bias = -1;
    switch (stages[0]->kind) {
    case HS_STAGE_EMBED:
        break;
    case HS_STAGE_NORMALIZE:
        x = param(g, OV_IN_POOLED);
        break;
    default:
        x = param(g, OV_IN_HIDDEN);
    }
    for (int i = 0; i < n; i++) {
        const struct hs_stage *st = stages[i];
        switch (st->kind) {
        case HS_STAGE_EMBED:
            x = embed(g, st);
            break;
        case HS_STAGE_ATTN:
            x = attention(g, x, st, dtypes[i] == HS_DTYPE_I8, &bias);
            break;
        case HS_STAGE_FFN:
            x = ffn(g, x, st, dtypes[i] == HS_DTYPE_I8);
            break;
        case HS_STAGE_FINAL_NORM:
            x = norm(g, x, st->dims, &st->w[HS_W_FINAL_LN_G], &st->w[HS_W_FINAL_LN_B]);
            break;
        case HS_STAGE_POOL:
            x = pool(g, x, st);
            out->output_is_pooled = 1;
            break;
        case HS_STAGE_NORMALIZE: /* a model without a Normalize module keeps pooled as is */
            if (st->dims->normalize) x = normalize(g, x);
            out->output_is_pooled = 1;
            break;
        default:
            break;
        }
    }
    layer(g, "Result", "opset1", NULL, 1, &x, g->v[x]);

    struct buf xml = {0};
    put(&xml, "<?xml version=\"1.0\"?>\n<net name=\"hetserve\" version=\"11\">\n<layers>\n");
    put(&xml, "%.*s", (int)g->layers.n, g->layers.s ? g->layers.s : "");
    put(&xml, "</layers>\n<edges>\n%.*s</edges>\n</net>\n", (int)g->edges.n,
        g->edges.s ? g->edges.s : "");
    const int failed = g->oom || g->layers.oom || g->edges.oom || xml.oom;
    free(g->layers.s);
    free(g->edges.s);
    out->bin = g->bin;
    out->bin_len = g->bin_n;
    free(g);
    out->xml = xml.s;
    out->xml_len = xml.n;
    if (failed) {
        ov_ir_free(out);
        return hs_plugin_error(err, HS_STATUS_NO_MEMORY,
                               "openvino: out of memory writing the graph");
    }
    return HS_STATUS_OK;
}
