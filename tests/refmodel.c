/* Test support: a random encoder and its naive double-precision reference (refmodel.h). */
#include "refmodel.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
float rand_float(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

/* ---- a random encoder held as fp32 arrays plus a tensor view in the chosen dtype ---- */

static void set_w(struct rand_model *rm, int si, int role, int64_t rows, int64_t cols, float scale,
                  float offset, enum hs_dtype dt)
{
    int64_t n = rows * cols;
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = offset + scale * rand_float();
    void *st = f;
    if (dt != HS_DTYPE_F32) {
        uint16_t *h = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            if (dt == HS_DTYPE_F16) {
                h[i] = hs_fp32_to_fp16(f[i]);
                f[i] = hs_fp16_to_fp32(h[i]);
            } else {
                uint32_t b;
                memcpy(&b, &f[i], 4);
                h[i] = (uint16_t)(b >> 16);
                f[i] = hs_bf16_to_fp32(h[i]);
            }
        }
        st = h;
    }
    rm->f32[si * HS_W_COUNT + role] = f;
    rm->stored[si * HS_W_COUNT + role] = st;
    struct hs_tensor *t = &rm->model.stages[si].w[role];
    t->dtype = dt;
    t->ndim = cols > 1 ? 2 : 1;
    t->shape[0] = cols > 1 ? rows : n;
    t->shape[1] = cols;
    t->data = st;
    t->bytes = (size_t)n * hs_dtype_size(dt);
}

struct rand_model *rand_model_new(int hidden, int heads, int inter, int layers,
                                  enum hs_pool_mode pool, enum hs_dtype dt)
{
    struct hs_encoder_dims d = {.hidden = hidden,
                                .heads = heads,
                                .head_dim = hidden / heads,
                                .intermediate = inter,
                                .layers = layers,
                                .pool = pool};
    return rand_model_new_blocks(&d, dt, 0);
}

struct rand_model *rand_model_new_blocks(const struct hs_encoder_dims *blocks, enum hs_dtype dt,
                                         unsigned flags)
{
    struct rand_model *rm = calloc(1, sizeof *rm);
    struct hs_encoder_dims *d = &rm->model.config.dims;
    *d = *blocks;
    d->vocab = 97;
    d->max_positions = 160;
    d->type_vocab = 2;
    if (!d->ln_eps) d->ln_eps = 1e-12f;
    d->normalize = true;
    if (!d->kv_heads) d->kv_heads = d->heads;
    const int hidden = d->hidden, inter = d->intermediate, layers = d->layers;
    const int nq = d->heads * d->head_dim, nkv = d->kv_heads * d->head_dim;
    const bool bias = !(flags & RM_NO_BIAS);
    rm->model.config.max_seq_len = 160;
    rm->model.name = "random";
    rm->model.n_stages = 1 + 2 * layers + (d->final_norm ? 1 : 0) + 2;
    rm->model.stages = calloc((size_t)rm->model.n_stages, sizeof(struct hs_stage));
    for (int i = 0; i < rm->model.n_stages; i++) {
        struct hs_stage *st = &rm->model.stages[i];
        const int tail = i - 2 * layers - 1 + (d->final_norm ? 0 : 1); /* final, pool, normalize */
        st->dims = d;
        st->layer = -1;
        if (i == 0) {
            st->kind = HS_STAGE_EMBED;
            set_w(rm, i, HS_W_WORD_EMB, d->vocab, hidden, 1.0f, 0, dt);
            if (d->pos != HS_POS_ROTARY)
                set_w(rm, i, HS_W_POS_EMB, d->max_positions, hidden, 0.5f, 0, dt);
            if (!(flags & RM_NO_TYPES)) set_w(rm, i, HS_W_TYPE_EMB, 2, hidden, 0.5f, 0, dt);
            if (!(flags & RM_NO_EMB_NORM)) {
                set_w(rm, i, HS_W_EMB_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                if (bias && d->norm == HS_NORM_LAYER)
                    set_w(rm, i, HS_W_EMB_LN_B, hidden, 1, 0.1f, 0, dt);
            }
        } else if (i <= 2 * layers) {
            st->layer = (i - 1) / 2;
            float ws = 1.0f / sqrtf((float)hidden);
            /* the first layer of a pre-norm model without its attention norm (ModernBERT) */
            const bool ln = !(flags & RM_NO_FIRST_NORM) || st->layer > 0 || !d->norm_pre;
            if (i % 2) {
                st->kind = HS_STAGE_ATTN;
                set_w(rm, i, HS_W_Q, nq, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_K, nkv, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_V, nkv, hidden, ws, 0, dt);
                set_w(rm, i, HS_W_ATTN_OUT, hidden, nq, 1.0f / sqrtf((float)nq), 0, dt);
                if (bias) {
                    set_w(rm, i, HS_W_Q_B, nq, 1, 0.1f, 0, dt);
                    set_w(rm, i, HS_W_K_B, nkv, 1, 0.1f, 0, dt);
                    set_w(rm, i, HS_W_V_B, nkv, 1, 0.1f, 0, dt);
                    set_w(rm, i, HS_W_ATTN_OUT_B, hidden, 1, 0.1f, 0, dt);
                }
                if (ln) set_w(rm, i, HS_W_ATTN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                if (ln && bias && d->norm == HS_NORM_LAYER)
                    set_w(rm, i, HS_W_ATTN_LN_B, hidden, 1, 0.1f, 0, dt);
                if (flags & RM_QK_NORM) {
                    set_w(rm, i, HS_W_Q_NORM, d->head_dim, 1, 0.2f, 1.0f, dt);
                    set_w(rm, i, HS_W_K_NORM, d->head_dim, 1, 0.2f, 1.0f, dt);
                }
            } else {
                st->kind = HS_STAGE_FFN;
                set_w(rm, i, HS_W_FFN_IN, inter, hidden, 2 * ws, 0, dt);
                if (d->ffn == HS_FFN_GATED)
                    set_w(rm, i, HS_W_FFN_GATE, inter, hidden, 2 * ws, 0, dt);
                else if (bias)
                    set_w(rm, i, HS_W_FFN_IN_B, inter, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_OUT, hidden, inter, 1.0f / sqrtf((float)inter), 0, dt);
                if (bias) set_w(rm, i, HS_W_FFN_OUT_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                if (bias && d->norm == HS_NORM_LAYER)
                    set_w(rm, i, HS_W_FFN_LN_B, hidden, 1, 0.1f, 0, dt);
            }
        } else if (tail == 0) {
            st->kind = HS_STAGE_FINAL_NORM;
            set_w(rm, i, HS_W_FINAL_LN_G, hidden, 1, 0.2f, 1.0f, dt);
            if (bias && d->norm == HS_NORM_LAYER)
                set_w(rm, i, HS_W_FINAL_LN_B, hidden, 1, 0.1f, 0, dt);
        } else if (tail == 1) {
            st->kind = HS_STAGE_POOL;
        } else {
            st->kind = HS_STAGE_NORMALIZE;
        }
        snprintf(st->name, sizeof st->name, "%s%d", hs_stage_kind_name(st->kind), st->layer);
    }
    return rm;
}

void rand_model_free(struct rand_model *rm)
{
    for (int i = 0; i < 64 * HS_W_COUNT; i++) {
        if (rm->stored[i] != rm->f32[i]) free(rm->stored[i]);
        free(rm->f32[i]);
    }
    free(rm->model.stages);
    free(rm);
}

/* ---- naive reference in double precision ---- */

/* x = N(x): LayerNorm (b may be NULL) or RMSNorm; g NULL: identity. */
static void ref_norm(double *x, const float *g, const float *b, int n, double eps,
                     enum hs_norm_kind kind)
{
    if (!g) return;
    double mean = 0, var = 0;
    if (kind == HS_NORM_LAYER) {
        for (int j = 0; j < n; j++) mean += x[j];
        mean /= n;
    }
    for (int j = 0; j < n; j++) var += (x[j] - mean) * (x[j] - mean);
    var /= n;
    for (int j = 0; j < n; j++) x[j] = (x[j] - mean) / sqrt(var + eps) * g[j] + (b ? b[j] : 0.0);
}

static double ref_act(double v, enum hs_act_fn act)
{
    switch (act) {
    case HS_ACT_GELU_TANH:
        return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case HS_ACT_RELU:
        return v > 0 ? v : 0;
    case HS_ACT_SILU:
        return v / (1.0 + exp(-v));
    case HS_ACT_GELU_ERF:
        break;
    }
    return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
}

/* y[n_out] = x[n_in] W^T (+ b) */
static void ref_linear(const double *x, const float *w, const float *b, double *y, int n_out,
                       int n_in)
{
    for (int o = 0; o < n_out; o++) {
        double acc = b ? b[o] : 0.0;
        for (int i = 0; i < n_in; i++) acc += x[i] * w[(int64_t)o * n_in + i];
        y[o] = acc;
    }
}

/* NeoX rotary of the first rd dims of a head at position p, base theta. */
static void ref_rope(double *h, int p, int rd, double theta)
{
    for (int i = 0; i < rd / 2; i++) {
        const double f = p * pow(theta, -2.0 * i / rd), c = cos(f), s = sin(f);
        const double a = h[i], b = h[i + rd / 2];
        h[i] = a * c - b * s;
        h[i + rd / 2] = b * c + a * s;
    }
}

void ref_encode(struct rand_model *rm, const int32_t *ids, int len, double *out,
                double *hidden_after)
{
    const struct hs_encoder_dims *d = &rm->model.config.dims;
    const int H = d->hidden, I = d->intermediate, D = d->head_dim;
    const int KV = d->kv_heads > 0 ? d->kv_heads : d->heads;
    const int NQ = d->heads * D, NKV = KV * D;
#define W(si, role) rm->f32[(si)*HS_W_COUNT + (role)]
    double *x = calloc((size_t)len * H, sizeof(double)), *in = calloc((size_t)H, sizeof(double));
    double *q = calloc((size_t)len * NQ, sizeof(double)),
           *k = calloc((size_t)len * NKV, sizeof(double));
    double *v = calloc((size_t)len * NKV, sizeof(double)),
           *c = calloc((size_t)len * NQ, sizeof(double));
    double *f = calloc((size_t)2 * I, sizeof(double)), *s = calloc((size_t)len, sizeof(double));
    double *row = calloc((size_t)H, sizeof(double));
    for (int t = 0; t < len; t++) {
        for (int j = 0; j < H; j++) {
            double e = W(0, HS_W_WORD_EMB)[ids[t] * H + j];
            if (W(0, HS_W_POS_EMB)) e += W(0, HS_W_POS_EMB)[(t + d->pos_offset) * H + j];
            if (W(0, HS_W_TYPE_EMB)) e += W(0, HS_W_TYPE_EMB)[j];
            x[t * H + j] = e;
        }
        ref_norm(x + t * H, W(0, HS_W_EMB_LN_G), W(0, HS_W_EMB_LN_B), H, d->ln_eps, d->norm);
    }
    if (hidden_after) memcpy(hidden_after, x, sizeof(double) * (size_t)len * H);
    for (int l = 0; l < d->layers; l++) {
        int a = 1 + 2 * l, ff = 2 + 2 * l;
        const bool local = d->window > 0 && d->global_every > 0 && l % d->global_every;
        const double theta =
            local && d->rope_theta_local > 0 ? d->rope_theta_local : (double)d->rope_theta;
        for (int t = 0; t < len; t++) {
            memcpy(in, x + t * H, sizeof(double) * H);
            if (d->norm_pre)
                ref_norm(in, W(a, HS_W_ATTN_LN_G), W(a, HS_W_ATTN_LN_B), H, d->ln_eps, d->norm);
            ref_linear(in, W(a, HS_W_Q), W(a, HS_W_Q_B), q + t * NQ, NQ, H);
            ref_linear(in, W(a, HS_W_K), W(a, HS_W_K_B), k + t * NKV, NKV, H);
            ref_linear(in, W(a, HS_W_V), W(a, HS_W_V_B), v + t * NKV, NKV, H);
            for (int h = 0; h < d->heads; h++) {
                ref_norm(q + t * NQ + h * D, W(a, HS_W_Q_NORM), NULL, D, d->ln_eps, HS_NORM_RMS);
                if (d->pos == HS_POS_ROTARY) ref_rope(q + t * NQ + h * D, t, d->rotary_dim, theta);
            }
            for (int h = 0; h < KV; h++) {
                ref_norm(k + t * NKV + h * D, W(a, HS_W_K_NORM), NULL, D, d->ln_eps, HS_NORM_RMS);
                if (d->pos == HS_POS_ROTARY) ref_rope(k + t * NKV + h * D, t, d->rotary_dim, theta);
            }
        }
        for (int h = 0; h < d->heads; h++) {
            const int kh = h / (d->heads / KV);
            for (int i = 0; i < len; i++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    const bool seen = (!d->causal || j <= i) &&
                                      (!local || (j - i <= d->window && i - j <= d->window));
                    double dot = 0;
                    for (int e = 0; e < D; e++)
                        dot += q[i * NQ + h * D + e] * k[j * NKV + kh * D + e];
                    s[j] = seen ? dot / sqrt((double)D) : -INFINITY;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < len; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < len; j++) acc += s[j] / sum * v[j * NKV + kh * D + e];
                    c[i * NQ + h * D + e] = acc;
                }
            }
        }
        for (int t = 0; t < len; t++) {
            ref_linear(c + t * NQ, W(a, HS_W_ATTN_OUT), W(a, HS_W_ATTN_OUT_B), row, H, NQ);
            for (int o = 0; o < H; o++) row[o] += x[t * H + o];
            if (!d->norm_pre)
                ref_norm(row, W(a, HS_W_ATTN_LN_G), W(a, HS_W_ATTN_LN_B), H, d->ln_eps, d->norm);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
        if (hidden_after)
            memcpy(hidden_after + (size_t)a * len * H, x, sizeof(double) * (size_t)len * H);
        for (int t = 0; t < len; t++) {
            memcpy(in, x + t * H, sizeof(double) * H);
            if (d->norm_pre)
                ref_norm(in, W(ff, HS_W_FFN_LN_G), W(ff, HS_W_FFN_LN_B), H, d->ln_eps, d->norm);
            ref_linear(in, W(ff, HS_W_FFN_IN), W(ff, HS_W_FFN_IN_B), f, I, H);
            if (d->ffn == HS_FFN_GATED) {
                ref_linear(in, W(ff, HS_W_FFN_GATE), NULL, f + I, I, H);
                for (int o = 0; o < I; o++) f[o] *= ref_act(f[I + o], d->act);
            } else {
                for (int o = 0; o < I; o++) f[o] = ref_act(f[o], d->act);
            }
            ref_linear(f, W(ff, HS_W_FFN_OUT), W(ff, HS_W_FFN_OUT_B), row, H, I);
            for (int o = 0; o < H; o++) row[o] += x[t * H + o];
            if (!d->norm_pre)
                ref_norm(row, W(ff, HS_W_FFN_LN_G), W(ff, HS_W_FFN_LN_B), H, d->ln_eps, d->norm);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
        if (hidden_after)
            memcpy(hidden_after + (size_t)ff * len * H, x, sizeof(double) * (size_t)len * H);
    }
    if (d->final_norm) {
        const int fi = 1 + 2 * d->layers;
        for (int t = 0; t < len; t++)
            ref_norm(x + t * H, W(fi, HS_W_FINAL_LN_G), W(fi, HS_W_FINAL_LN_B), H, d->ln_eps,
                     d->norm);
    }
#undef W
    double norm = 0;
    for (int j = 0; j < H; j++) {
        double acc = 0;
        if (d->pool == HS_POOL_CLS)
            acc = x[j];
        else if (d->pool == HS_POOL_LAST)
            acc = x[(len - 1) * H + j];
        else {
            for (int t = 0; t < len; t++) acc += x[t * H + j];
            acc /= len;
        }
        out[j] = acc;
        norm += acc * acc;
    }
    for (int j = 0; j < H; j++) out[j] /= sqrt(norm);
    free(x), free(in), free(q), free(k), free(v), free(c), free(f), free(s), free(row);
}

double cosine_fd(const float *a, const double *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

int32_t rand_id(int n)
{
    const int v = (int)((rand_float() + 1.0f) * 0.5f * (float)n);
    return v >= n ? n - 1 : (v < 0 ? 0 : v);
}
