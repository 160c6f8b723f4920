/* Test support: a random encoder and its naive double-precision reference (refmodel.h). */
#include "refmodel.h"

#include <math.h>
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
    struct rand_model *rm = calloc(1, sizeof *rm);
    struct hs_encoder_dims *d = &rm->model.config.dims;
    *d = (struct hs_encoder_dims){.hidden = hidden,
                                  .heads = heads,
                                  .head_dim = hidden / heads,
                                  .intermediate = inter,
                                  .layers = layers,
                                  .vocab = 97,
                                  .max_positions = 160,
                                  .type_vocab = 2,
                                  .ln_eps = 1e-12f,
                                  .act = HS_ACT_GELU_ERF,
                                  .pool = pool,
                                  .normalize = true};
    rm->model.config.max_seq_len = 160;
    rm->model.name = "random";
    rm->model.n_stages = 1 + 2 * layers + 2;
    rm->model.stages = calloc((size_t)rm->model.n_stages, sizeof(struct hs_stage));
    for (int i = 0; i < rm->model.n_stages; i++) {
        struct hs_stage *st = &rm->model.stages[i];
        st->dims = d;
        st->layer = -1;
        if (i == 0) {
            st->kind = HS_STAGE_EMBED;
            set_w(rm, i, HS_W_WORD_EMB, d->vocab, hidden, 1.0f, 0, dt);
            set_w(rm, i, HS_W_POS_EMB, d->max_positions, hidden, 0.5f, 0, dt);
            set_w(rm, i, HS_W_TYPE_EMB, 2, hidden, 0.5f, 0, dt);
            set_w(rm, i, HS_W_EMB_LN_G, hidden, 1, 0.2f, 1.0f, dt);
            set_w(rm, i, HS_W_EMB_LN_B, hidden, 1, 0.1f, 0, dt);
        } else if (i <= 2 * layers) {
            st->layer = (i - 1) / 2;
            float ws = 1.0f / sqrtf((float)hidden);
            if (i % 2) {
                st->kind = HS_STAGE_ATTN;
                set_w(rm, i, HS_W_Q, hidden, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_Q_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_K, hidden, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_K_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_V, hidden, hidden, ws, 0, dt);
                set_w(rm, i, HS_W_V_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_ATTN_OUT, hidden, hidden, ws, 0, dt);
                set_w(rm, i, HS_W_ATTN_OUT_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_ATTN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                set_w(rm, i, HS_W_ATTN_LN_B, hidden, 1, 0.1f, 0, dt);
            } else {
                st->kind = HS_STAGE_FFN;
                set_w(rm, i, HS_W_FFN_IN, inter, hidden, 2 * ws, 0, dt);
                set_w(rm, i, HS_W_FFN_IN_B, inter, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_OUT, hidden, inter, 1.0f / sqrtf((float)inter), 0, dt);
                set_w(rm, i, HS_W_FFN_OUT_B, hidden, 1, 0.1f, 0, dt);
                set_w(rm, i, HS_W_FFN_LN_G, hidden, 1, 0.2f, 1.0f, dt);
                set_w(rm, i, HS_W_FFN_LN_B, hidden, 1, 0.1f, 0, dt);
            }
        } else if (i == 2 * layers + 1) {
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
static void ref_ln(double *x, const float *g, const float *b, int n, double eps)
{
    double mean = 0, var = 0;
    for (int j = 0; j < n; j++) mean += x[j];
    mean /= n;
    for (int j = 0; j < n; j++) var += (x[j] - mean) * (x[j] - mean);
    var /= n;
    for (int j = 0; j < n; j++) x[j] = (x[j] - mean) / sqrt(var + eps) * g[j] + b[j];
}

void ref_encode(struct rand_model *rm, const int32_t *ids, int len, double *out,
                double *hidden_after)
{
    const struct hs_encoder_dims *d = &rm->model.config.dims;
    const int H = d->hidden, I = d->intermediate, D = d->head_dim;
#define W(si, role) rm->f32[(si)*HS_W_COUNT + (role)]
    double *x = calloc((size_t)len * H, sizeof(double));
    double *q = calloc((size_t)len * H, sizeof(double)),
           *k = calloc((size_t)len * H, sizeof(double));
    double *v = calloc((size_t)len * H, sizeof(double)),
           *c = calloc((size_t)len * H, sizeof(double));
    double *f = calloc((size_t)len * I, sizeof(double)), *s = calloc((size_t)len, sizeof(double));
    for (int t = 0; t < len; t++) {
        for (int j = 0; j < H; j++)
            x[t * H + j] = (double)W(0, HS_W_WORD_EMB)[ids[t] * H + j] +
                           W(0, HS_W_POS_EMB)[t * H + j] + W(0, HS_W_TYPE_EMB)[j];
        ref_ln(x + t * H, W(0, HS_W_EMB_LN_G), W(0, HS_W_EMB_LN_B), H, d->ln_eps);
    }
    if (hidden_after) memcpy(hidden_after, x, sizeof(double) * (size_t)len * H);
    for (int l = 0; l < d->layers; l++) {
        int a = 1 + 2 * l, ff = 2 + 2 * l;
        for (int t = 0; t < len; t++)
            for (int o = 0; o < H; o++) {
                double sq = W(a, HS_W_Q_B)[o], sk = W(a, HS_W_K_B)[o], sv = W(a, HS_W_V_B)[o];
                for (int i = 0; i < H; i++) {
                    sq += x[t * H + i] * W(a, HS_W_Q)[o * H + i];
                    sk += x[t * H + i] * W(a, HS_W_K)[o * H + i];
                    sv += x[t * H + i] * W(a, HS_W_V)[o * H + i];
                }
                q[t * H + o] = sq, k[t * H + o] = sk, v[t * H + o] = sv;
            }
        for (int h = 0; h < d->heads; h++)
            for (int i = 0; i < len; i++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    double dot = 0;
                    for (int e = 0; e < D; e++) dot += q[i * H + h * D + e] * k[j * H + h * D + e];
                    s[j] = dot / sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < len; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < len; j++) acc += s[j] / sum * v[j * H + h * D + e];
                    c[i * H + h * D + e] = acc;
                }
            }
        for (int t = 0; t < len; t++) {
            double row[1024];
            for (int o = 0; o < H; o++) {
                double acc = W(a, HS_W_ATTN_OUT_B)[o];
                for (int i = 0; i < H; i++) acc += c[t * H + i] * W(a, HS_W_ATTN_OUT)[o * H + i];
                row[o] = x[t * H + o] + acc;
            }
            ref_ln(row, W(a, HS_W_ATTN_LN_G), W(a, HS_W_ATTN_LN_B), H, d->ln_eps);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
        if (hidden_after)
            memcpy(hidden_after + (size_t)a * len * H, x, sizeof(double) * (size_t)len * H);
        for (int t = 0; t < len; t++) {
            for (int o = 0; o < I; o++) {
                double acc = W(ff, HS_W_FFN_IN_B)[o];
                for (int i = 0; i < H; i++) acc += x[t * H + i] * W(ff, HS_W_FFN_IN)[o * H + i];
                f[t * I + o] = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
            }
            double row[1024];
            for (int o = 0; o < H; o++) {
                double acc = W(ff, HS_W_FFN_OUT_B)[o];
                for (int i = 0; i < I; i++) acc += f[t * I + i] * W(ff, HS_W_FFN_OUT)[o * I + i];
                row[o] = x[t * H + o] + acc;
            }
            ref_ln(row, W(ff, HS_W_FFN_LN_G), W(ff, HS_W_FFN_LN_B), H, d->ln_eps);
            memcpy(x + t * H, row, sizeof(double) * H);
        }
        if (hidden_after)
            memcpy(hidden_after + (size_t)ff * len * H, x, sizeof(double) * (size_t)len * H);
    }
#undef W
    double norm = 0;
    for (int j = 0; j < H; j++) {
        double acc = 0;
        if (d->pool == HS_POOL_CLS)
            acc = x[j];
        else {
            for (int t = 0; t < len; t++) acc += x[t * H + j];
            acc /= len;
        }
        out[j] = acc;
        norm += acc * acc;
    }
    for (int j = 0; j < H; j++) out[j] /= sqrt(norm);
    free(x), free(q), free(k), free(v), free(c), free(f), free(s);
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
