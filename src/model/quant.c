/* Quantization plans: search, write, load (quant.h). */
#include "model/quant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/file.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/verify.h"

static bool linear_stage(const struct hs_stage *st)
{
    return st->kind == HS_STAGE_ATTN || st->kind == HS_STAGE_FFN;
}

/* Embeds texts[idx[i]] for i < n with the given per-stage f32 set (NULL: none kept). */
static hs_status embed(const struct hs_model *m, hs_engine_t e, enum hs_dtype dtype,
                       const bool *keep_f32, const char *const *texts, const int *idx, int n,
                       float *out, struct hs_error *err)
{
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    if (keep_f32) memcpy(plan.keep_f32, keep_f32, sizeof(bool) * (size_t)m->n_stages);
    struct hs_executor_opts xo = {.batch_max = 32, .dtype = dtype, .no_quant_plan = true};
    struct hs_executor *x = NULL;
    hs_status s = hs_executor_create(m, &plan, &xo, &x, err);
    if (s) return s;
    const char **sel = hs_malloc(sizeof(char *) * (size_t)n);
    if (!sel) {
        hs_executor_free(x);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
    }
    for (int i = 0; i < n; i++) sel[i] = texts[idx[i]];
    s = hs_executor_embed_texts(x, sel, n, out, NULL, err);
    hs_free(sel);
    hs_executor_free(x);
    return s;
}

/* min and mean cosine of rows of a against rows of b */
static void compare(const float *a, const float *b, int n, int dim, double *cmin, double *cmean)
{
    double mn = 1.0, sum = 0.0;
    for (int i = 0; i < n; i++) {
        double c = hs_verify_cosine(a + (size_t)i * dim, b + (size_t)i * dim, dim);
        mn = c < mn ? c : mn;
        sum += c;
    }
    *cmin = mn;
    *cmean = n ? sum / n : 1.0;
}

static void progress(const struct hs_quant_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void progress(const struct hs_quant_opts *o, const char *fmt, ...)
{
    if (!o->progress) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->progress(o->progress_ctx, line);
}

/* ---- smoothing (SmoothQuant): per-channel input divisors from calibration ---- */

static hs_status smooth_name(const struct hs_stage *st, char *buf, size_t n)
{
    snprintf(buf, n, "layer%d.%s.smooth", st->layer, st->kind == HS_STAGE_ATTN ? "attn" : "ffn");
    return HS_STATUS_OK;
}

hs_status hs_quant_attach_smoothing(struct hs_model *m, const char *dir, struct hs_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/quant.safetensors", dir);
    if (access(path, F_OK) != 0) return HS_STATUS_OK;
    hs_status s = hs_safetensors_open(path, &m->quant_weights, err);
    if (s) return s;
    const int64_t H = m->config.dims.hidden;
    for (int i = 0; i < m->n_stages; i++) {
        struct hs_stage *st = &m->stages[i];
        if (!linear_stage(st)) continue;
        char name[64];
        smooth_name(st, name, sizeof name);
        struct hs_tensor t;
        struct hs_error e2;
        char aname[64];
        snprintf(aname, sizeof aname, "layer%d.%s.act_scale", st->layer,
                 st->kind == HS_STAGE_ATTN ? "attn" : "ffn");
        if (hs_safetensors_get(m->quant_weights, aname, &t, &e2) == HS_STATUS_OK) {
            if (t.dtype != HS_DTYPE_F32 || t.ndim != 1 || t.shape[0] != 2)
                return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s must be F32 [2]", path, aname);
            const float *v = t.data;
            if (!(v[0] >= 0.0f && v[0] < 1e30f && v[1] >= 0.0f && v[1] < 1e30f))
                return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s holds %g, %g", path, aname,
                                    (double)v[0], (double)v[1]);
            st->w[HS_W_ACT_SCALE] = t;
        }
        if (hs_safetensors_get(m->quant_weights, name, &t, &e2) != HS_STATUS_OK) continue;
        if (t.dtype != HS_DTYPE_F32 || t.ndim != 1 || t.shape[0] != H)
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s must be F32 [%lld]", path, name,
                                (long long)H);
        const float *v = t.data;
        for (int64_t c = 0; c < H; c++)
            if (!(v[c] > 0.0f) || v[c] > 1e30f)
                return hs_error_set(err, HS_STATUS_CORRUPT, "%s: %s[%lld] is %g (must be > 0)",
                                    path, name, (long long)c, (double)v[c]);
        st->w[HS_W_SMOOTH] = t;
    }
    return HS_STATUS_OK;
}

/* ---- calibration: what the linear layers' inputs look like, observed in f32 ---- */

#define HIST_PER_OCTAVE 32
#define HIST_LOW_EXP    (-24) /* |x| below 2^-24 lands in bin 0 */
#define HIST_BINS       (40 * HIST_PER_OCTAVE)

struct calib {
    pthread_mutex_t mu;
    const struct hs_model *m;
    int H;
    float *chan_max;     /* [n_stages][H]: |input| of each channel of the first layer */
    const float *smooth; /* [n_stages][H] divisors of the first layer's input, or NULL */
    uint32_t *hist;      /* [n_stages][2][HIST_BINS]: |input| (first layer: smoothed) */
};

static int hist_bin(float a)
{
    if (!(a > 0.0f)) return 0;
    int b = (int)floorf(log2f(a) * HIST_PER_OCTAVE) - HIST_LOW_EXP * HIST_PER_OCTAVE;
    return b < 0 ? 0 : (b >= HIST_BINS ? HIST_BINS - 1 : b);
}

/* The value below which a share p of the histogram lies (the bin's upper edge). */
static float hist_percentile(const uint32_t *h, double p)
{
    uint64_t total = 0, run = 0;
    for (int b = 0; b < HIST_BINS; b++) total += h[b];
    if (total == 0) return 0.0f;
    for (int b = 0; b < HIST_BINS; b++) {
        run += h[b];
        if ((double)run >= p * (double)total)
            return exp2f((float)(b + 1 + HIST_LOW_EXP * HIST_PER_OCTAVE) / HIST_PER_OCTAVE);
    }
    return exp2f((float)(HIST_BINS + HIST_LOW_EXP * HIST_PER_OCTAVE) / HIST_PER_OCTAVE);
}

static void observe(void *vctx, const struct hs_stage *st, int linear, const float *x, int rows,
                    int k)
{
    struct calib *c = vctx;
    const int si = (int)(st - c->m->stages);
    if (si < 0 || si >= c->m->n_stages) return;
    uint32_t local[HIST_BINS];
    memset(local, 0, sizeof local);
    const float *sm = linear == 0 && c->smooth ? c->smooth + (size_t)si * c->H : NULL;
    pthread_mutex_lock(&c->mu);
    float *cm = c->chan_max + (size_t)si * c->H;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < k; i++) {
            float a = fabsf(x[(size_t)r * k + i]);
            if (linear == 0 && i < c->H && a > cm[i]) cm[i] = a;
            local[hist_bin(sm ? a / sm[i] : a)]++;
        }
    uint32_t *h = c->hist + ((size_t)si * 2 + linear) * HIST_BINS;
    for (int b = 0; b < HIST_BINS; b++) h[b] += local[b];
    pthread_mutex_unlock(&c->mu);
}

/* Runs texts[idx[0..n)] in f32 on a CPU engine that reports every linear layer's input. */
static hs_status calibrate(const struct hs_model *m, int threads, const char *const *texts,
                           const int *idx, int n, struct calib *c, struct hs_error *err)
{
    memset(c->chan_max, 0, sizeof(float) * (size_t)m->n_stages * c->H);
    memset(c->hist, 0, sizeof(uint32_t) * (size_t)m->n_stages * 2 * HIST_BINS);
    hs_engine_t e = NULL;
    struct hs_engine_opts eo = {
        .name = "calibration", .threads = threads, .cpu_observe = observe, .cpu_observe_ctx = c};
    hs_status s = hs_engine_create("cpu", &eo, &e, err);
    float *out = s ? NULL : hs_malloc(sizeof(float) * (size_t)n * hs_pooled_dim(&m->config.dims));
    if (!s && !out) s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
    if (!s) s = embed(m, e, HS_DTYPE_F32, NULL, texts, idx, n, out, err);
    hs_free(out);
    hs_engine_destroy(e);
    return s;
}

/* s[c] = amax[c]^alpha / wmax[c]^(1 - alpha), wmax over the rows of the stage's first linear
 * layer(s) (attention: q, k and v), clamped to [1e-3, 1e3]. */
static void smoothing(const struct hs_stage *st, const float *amax, double alpha, float *s,
                      float *row)
{
    const int H = st->dims->hidden;
    const int roles_attn[3] = {HS_W_Q, HS_W_K, HS_W_V}, roles_ffn[1] = {HS_W_FFN_IN};
    const int *roles = st->kind == HS_STAGE_ATTN ? roles_attn : roles_ffn;
    const int nr = st->kind == HS_STAGE_ATTN ? 3 : 1;
    float *wmax = s; /* computed in place, then turned into the factors */
    for (int c = 0; c < H; c++) wmax[c] = 0.0f;
    for (int r = 0; r < nr; r++) {
        const struct hs_tensor *w = &st->w[roles[r]];
        const int64_t rows = w->shape[0];
        const size_t esz = hs_dtype_size(w->dtype);
        for (int64_t j = 0; j < rows; j++) {
            hs_to_fp32(w->dtype, (const char *)w->data + (size_t)j * H * esz, row, (size_t)H);
            for (int c = 0; c < H; c++) wmax[c] = fabsf(row[c]) > wmax[c] ? fabsf(row[c]) : wmax[c];
        }
    }
    for (int c = 0; c < H; c++) {
        double a = amax[c], w = wmax[c];
        double f = a > 0 && w > 0 ? pow(a, alpha) / pow(w, 1.0 - alpha) : 1.0;
        s[c] = (float)(f < 1e-3 ? 1e-3 : (f > 1e3 ? 1e3 : f));
    }
}

hs_status hs_quant_search(struct hs_model *m, hs_engine_t e, const char *const *texts, int n,
                          const struct hs_quant_opts *opts, struct hs_quant_report *out,
                          struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    struct hs_quant_opts o = opts ? *opts : (struct hs_quant_opts){0};
    if (o.dtype == HS_DTYPE_F32) o.dtype = HS_DTYPE_I8;
    if (o.cos_min <= 0) o.cos_min = 0.99;
    if (o.cos_mean <= 0) o.cos_mean = 0.998;
    if (o.heldout_every < 2) o.heldout_every = 3;
    out->opts = o;
    out->plan.dtype = o.dtype;
    if (m->n_stages > HS_QUANT_MAX_STAGES)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "quantize: %d stages (max %d)", m->n_stages,
                            HS_QUANT_MAX_STAGES);
    if (n < 2 * o.heldout_every)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "quantize: %d calibration texts; at least %d needed", n,
                            2 * o.heldout_every);
    const int dim = hs_pooled_dim(&m->config.dims); /* a row of the answer */
    float *amax = NULL, *smooth = NULL, *act = NULL;
    struct calib cb = {.mu = PTHREAD_MUTEX_INITIALIZER};
    int cal_threads = 0;
    int *cal = hs_malloc(sizeof(int) * (size_t)n), *held = hs_malloc(sizeof(int) * (size_t)n);
    float *ref_c = hs_malloc(sizeof(float) * (size_t)n * dim);
    float *ref_h = hs_malloc(sizeof(float) * (size_t)n * dim);
    float *got = hs_malloc(sizeof(float) * (size_t)n * dim);
    hs_status s = HS_STATUS_OK;
    if (!cal || !held || !ref_c || !ref_h || !got) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
        goto done;
    }
    int nc = 0, nh = 0;
    for (int i = 0; i < n; i++) {
        if (i % o.heldout_every == o.heldout_every - 1)
            held[nh++] = i;
        else
            cal[nc++] = i;
    }
    out->n_calib = nc;
    out->n_heldout = nh;
    progress(&o, "reference: %d calibration + %d held-out texts in f32", nc, nh);
    if ((s = embed(m, e, HS_DTYPE_F32, NULL, texts, cal, nc, ref_c, err))) goto done;
    if ((s = embed(m, e, HS_DTYPE_F32, NULL, texts, held, nh, ref_h, err))) goto done;

    /* 1b. int8: input smoothing, its strength chosen on the held-out texts (0 = none) */
    if (o.dtype == HS_DTYPE_I8) {
        const int H = m->config.dims.hidden; /* the stages' input channels */
        amax = hs_malloc(sizeof(float) * (size_t)m->n_stages * H);
        smooth = hs_calloc((size_t)m->n_stages * H, sizeof(float));
        float *row = hs_malloc(sizeof(float) * (size_t)H);
        if (!amax || !smooth || !row) {
            hs_free(row);
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
            goto done;
        }
        for (int i = 0; i < m->n_stages; i++) {
            m->stages[i].w[HS_W_SMOOTH] = (struct hs_tensor){0};
            m->stages[i].w[HS_W_ACT_SCALE] = (struct hs_tensor){0};
        }
        struct hs_engine_caps caps;
        hs_engine_caps(e, &caps);
        cal_threads = caps.threads;
        cb.m = m;
        cb.H = H;
        cb.chan_max = amax;
        cb.hist = hs_calloc((size_t)m->n_stages * 2 * HIST_BINS, sizeof(uint32_t));
        if (!cb.hist) {
            hs_free(row);
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
            goto done;
        }
        progress(&o, "calibration: %d texts in f32, every linear layer's input observed", nc);
        if ((s = calibrate(m, cal_threads, texts, cal, nc, &cb, err))) {
            hs_free(row);
            goto done;
        }
        static const double alphas[] = {0.0, 0.5, 0.65, 0.8};
        double best_score = -1.0, best_alpha = 0.0;
        for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
            for (int i = 0; i < m->n_stages; i++) {
                struct hs_stage *st = &m->stages[i];
                if (!linear_stage(st) || alphas[a] == 0.0) {
                    st->w[HS_W_SMOOTH] = (struct hs_tensor){0};
                    continue;
                }
                float *sv = smooth + (size_t)i * H;
                smoothing(st, amax + (size_t)i * H, alphas[a], sv, row);
                st->w[HS_W_SMOOTH] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                                        .ndim = 1,
                                                        .shape = {H},
                                                        .data = sv,
                                                        .bytes = sizeof(float) * (size_t)H};
            }
            if ((s = embed(m, e, o.dtype, NULL, texts, held, nh, got, err))) break;
            double mn, mean;
            compare(got, ref_h, nh, dim, &mn, &mean);
            double score = mn + 10.0 * mean; /* the worst text counts, the mean more */
            progress(&o, "smoothing alpha %.2f: held-out mean cos %.6f, min %.6f", alphas[a], mean,
                     mn);
            if (score > best_score) {
                best_score = score;
                best_alpha = alphas[a];
            }
        }
        hs_free(row);
        if (s) goto done;
        out->smooth_alpha = best_alpha;
        row = hs_malloc(sizeof(float) * (size_t)H);
        for (int i = 0; row && i < m->n_stages; i++) {
            struct hs_stage *st = &m->stages[i];
            st->w[HS_W_SMOOTH] = (struct hs_tensor){0};
            if (!linear_stage(st) || best_alpha == 0.0) continue;
            float *sv = smooth + (size_t)i * H;
            smoothing(st, amax + (size_t)i * H, best_alpha, sv, row);
            st->w[HS_W_SMOOTH] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                                    .ndim = 1,
                                                    .shape = {H},
                                                    .data = sv,
                                                    .bytes = sizeof(float) * (size_t)H};
        }
        hs_free(row);
        out->smooth = best_alpha > 0.0 ? smooth : NULL;
        progress(&o, "smoothing alpha %.2f chosen", best_alpha);

        /* 1c. activations: per token when the layer runs, or one static scale per layer from
         * a percentile of the calibration inputs (after smoothing) — chosen on the held-out
         * texts */
        cb.smooth = out->smooth;
        if ((s = calibrate(m, cal_threads, texts, cal, nc, &cb, err))) goto done;
        act = hs_calloc((size_t)m->n_stages * 2, sizeof(float));
        if (!act) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "quantize: out of memory");
            goto done;
        }
        static const double pcts[] = {0.0, 1.0, 0.99999, 0.9999};
        double best = -1.0, best_p = 0.0;
        for (size_t a = 0; a < sizeof pcts / sizeof pcts[0]; a++) {
            for (int i = 0; i < m->n_stages; i++) {
                struct hs_stage *st = &m->stages[i];
                st->w[HS_W_ACT_SCALE] = (struct hs_tensor){0};
                if (!linear_stage(st) || pcts[a] == 0.0) continue;
                for (int l = 0; l < 2; l++)
                    act[i * 2 + l] =
                        hist_percentile(cb.hist + ((size_t)i * 2 + l) * HIST_BINS, pcts[a]) /
                        127.0f;
                st->w[HS_W_ACT_SCALE] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                                           .ndim = 1,
                                                           .shape = {2},
                                                           .data = act + i * 2,
                                                           .bytes = 2 * sizeof(float)};
            }
            if ((s = embed(m, e, o.dtype, NULL, texts, held, nh, got, err))) goto done;
            double mn, mean;
            compare(got, ref_h, nh, dim, &mn, &mean);
            double score = mn + 10.0 * mean;
            if (pcts[a] == 0.0)
                progress(&o, "activations per token (dynamic): held-out mean cos %.6f, min %.6f",
                         mean, mn);
            else
                progress(&o,
                         "activations per tensor, static at percentile %.3f: held-out mean cos "
                         "%.6f, min %.6f",
                         100.0 * pcts[a], mean, mn);
            if (score > best) {
                best = score;
                best_p = pcts[a];
            }
        }
        out->act_percentile = best_p;
        for (int i = 0; i < m->n_stages; i++) {
            struct hs_stage *st = &m->stages[i];
            st->w[HS_W_ACT_SCALE] = (struct hs_tensor){0};
            if (!linear_stage(st) || best_p == 0.0) continue;
            for (int l = 0; l < 2; l++)
                act[i * 2 + l] =
                    hist_percentile(cb.hist + ((size_t)i * 2 + l) * HIST_BINS, best_p) / 127.0f;
            st->w[HS_W_ACT_SCALE] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                                       .ndim = 1,
                                                       .shape = {2},
                                                       .data = act + i * 2,
                                                       .bytes = 2 * sizeof(float)};
        }
        out->act_scale = best_p > 0.0 ? act : NULL;
        if (best_p == 0.0)
            progress(&o, "activations: per token (dynamic) chosen");
        else
            progress(&o, "activations: per tensor, static at percentile %.3f chosen", 100 * best_p);
    }

    /* 2. every stage quantized, on the held-out texts: with rank_lazily, a plan that meets the
     * target there needs no ranking (it is most of the search: a pass over the calibration
     * texts per stage, mostly in f32) */
    bool keep[HS_QUANT_MAX_STAGES];
    memset(keep, 0, sizeof keep);
    if ((s = embed(m, e, o.dtype, keep, texts, held, nh, got, err))) goto done;
    compare(got, ref_h, nh, dim, &out->all_cos_min, &out->all_cos_mean);
    out->final_cos_min = out->all_cos_min;
    out->final_cos_mean = out->all_cos_mean;
    progress(&o, "held-out with 0 stage(s) in f32: mean cos %.6f, min %.6f", out->all_cos_mean,
             out->all_cos_min);
    out->target_met = out->all_cos_min >= o.cos_min && out->all_cos_mean >= o.cos_mean;
    const bool rank = !(o.rank_lazily && out->target_met);
    if (!rank) progress(&o, "every stage quantized meets the target: the stages are not ranked");

    /* 3. each linear stage quantized alone */
    int n_lin = 0;
    for (int i = 0; i < m->n_stages; i++) {
        if (!linear_stage(&m->stages[i])) continue;
        struct hs_quant_stage *qs = &out->stages[n_lin++];
        qs->index = i;
        snprintf(qs->name, sizeof qs->name, "%s", m->stages[i].name);
        qs->damage_mean = qs->cos_min = -1.0;
        if (!rank) continue;
        for (int j = 0; j < m->n_stages; j++) keep[j] = linear_stage(&m->stages[j]) && j != i;
        if ((s = embed(m, e, o.dtype, keep, texts, cal, nc, got, err))) goto done;
        double mn, mean;
        compare(got, ref_c, nc, dim, &mn, &mean);
        qs->damage_mean = 1.0 - mean;
        qs->cos_min = mn;
        progress(&o, "stage %2d/%d %-14s alone: mean cos %.6f, min %.6f", n_lin,
                 2 * m->config.dims.layers, qs->name, mean, mn);
    }
    out->n_stages = n_lin;

    /* 4. the most damaging back to f32, one at a time, until the held-out target holds */
    int order[HS_QUANT_MAX_STAGES];
    for (int i = 0; i < n_lin; i++) order[i] = i;
    for (int i = 0; i < n_lin; i++) /* by damage, worst first (mean, then worst case) */
        for (int j = i + 1; j < n_lin; j++) {
            const struct hs_quant_stage *a = &out->stages[order[i]], *b = &out->stages[order[j]];
            double da = a->damage_mean + (1.0 - a->cos_min) * 0.1;
            double db = b->damage_mean + (1.0 - b->cos_min) * 0.1;
            if (db > da) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
    memset(keep, 0, sizeof keep);
    for (int step = 1; step <= n_lin && !out->target_met; step++) {
        struct hs_quant_stage *qs = &out->stages[order[step - 1]];
        qs->keep_f32 = true;
        keep[qs->index] = true;
        if ((s = embed(m, e, o.dtype, keep, texts, held, nh, got, err))) goto done;
        double mn, mean;
        compare(got, ref_h, nh, dim, &mn, &mean);
        out->final_cos_min = mn;
        out->final_cos_mean = mean;
        progress(&o, "held-out with %d stage(s) in f32, last %s: mean cos %.6f, min %.6f", step,
                 qs->name, mean, mn);
        out->target_met = mn >= o.cos_min && mean >= o.cos_mean;
    }
    memcpy(out->plan.keep_f32, keep, sizeof keep);
done:
    if (s || !out->smooth) hs_free(smooth);
    if (s || !out->act_scale) hs_free(act);
    if (s) out->smooth = out->act_scale = NULL;
    hs_free(cb.hist);
    hs_free(amax);
    hs_free(cal);
    hs_free(held);
    hs_free(ref_c);
    hs_free(ref_h);
    hs_free(got);
    return s;
}

/* ---- writing a quantized model folder ---- */

static hs_status copy_file(const char *from, const char *to, struct hs_error *err)
{
    if (link(from, to) == 0) return HS_STATUS_OK;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return hs_error_set(err, HS_STATUS_IO, "%s: %s", from, strerror(errno));
    int outfd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (outfd < 0) {
        close(in);
        return hs_error_set(err, HS_STATUS_IO, "%s: %s", to, strerror(errno));
    }
    char buf[1 << 16];
    ssize_t r;
    hs_status s = HS_STATUS_OK;
    while ((r = read(in, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(outfd, buf + off, (size_t)(r - off));
            if (w < 0) {
                s = hs_error_set(err, HS_STATUS_IO, "%s: %s", to, strerror(errno));
                break;
            }
            off += w;
        }
        if (s) break;
    }
    if (r < 0 && !s) s = hs_error_set(err, HS_STATUS_IO, "%s: %s", from, strerror(errno));
    close(in);
    if (close(outfd) != 0 && !s) s = hs_error_set(err, HS_STATUS_IO, "%s: %s", to, strerror(errno));
    return s;
}

/* Copies (links) a folder tree, skipping an existing quant.json at the top. */
static hs_status copy_tree(const char *from, const char *to, int depth, struct hs_error *err)
{
    if (depth > 4) return HS_STATUS_OK;
    if (mkdir(to, 0755) != 0 && errno != EEXIST)
        return hs_error_set(err, HS_STATUS_IO, "%s: %s", to, strerror(errno));
    DIR *d = opendir(from);
    if (!d) return hs_error_set(err, HS_STATUS_IO, "%s: %s", from, strerror(errno));
    hs_status s = HS_STATUS_OK;
    struct dirent *de;
    while (!s && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (depth == 0 &&
            (!strcmp(de->d_name, "quant.json") || !strcmp(de->d_name, "quant.safetensors")))
            continue;
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat st;
        if (stat(a, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            s = copy_tree(a, b, depth + 1, err);
        else if (S_ISREG(st.st_mode))
            s = copy_file(a, b, err);
    }
    closedir(d);
    return s;
}

hs_status hs_quant_write(const struct hs_model *m, const struct hs_quant_report *r,
                         const char *out_dir, struct hs_error *err)
{
    DIR *d = opendir(out_dir);
    if (d) {
        struct dirent *de;
        int entries = 0;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) entries++;
        closedir(d);
        if (entries)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "quantize: %s exists and is not empty", out_dir);
    }
    hs_status s = copy_tree(m->dir, out_dir, 0, err);
    if (s) return s;
    return hs_quant_write_plan(m, r, out_dir, err);
}

hs_status hs_quant_write_plan(const struct hs_model *m, const struct hs_quant_report *r,
                              const char *out_dir, struct hs_error *err)
{
    hs_status s = HS_STATUS_OK;
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("hetserve-quant"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "dtype", json_string(hs_compute_dtype_name(r->plan.dtype)));
    json_object_set_new(root, "weights", json_string("per-channel symmetric"));
    char acts[96] = "per-token dynamic";
    if (r->act_scale)
        snprintf(acts, sizeof acts, "per-tensor static (percentile %.3f of calibration inputs)",
                 100.0 * r->act_percentile);
    json_object_set_new(root, "activations", json_string(acts));
    json_t *keep = json_array();
    for (int i = 0; i < m->n_stages; i++)
        if (r->plan.keep_f32[i]) json_array_append_new(keep, json_string(m->stages[i].name));
    json_object_set_new(root, "keep_f32", keep);
    json_object_set_new(
        root, "target",
        json_pack("{s:f, s:f}", "cos_min", r->opts.cos_min, "cos_mean", r->opts.cos_mean));
    json_object_set_new(root, "target_met", json_boolean(r->target_met));
    json_object_set_new(root, "calibration", json_pack("{s:i}", "count", r->n_calib));
    json_object_set_new(root, "heldout",
                        json_pack("{s:i, s:f, s:f, s:f, s:f}", "count", r->n_heldout, "cos_min",
                                  r->final_cos_min, "cos_mean", r->final_cos_mean,
                                  "all_quantized_cos_min", r->all_cos_min, "all_quantized_cos_mean",
                                  r->all_cos_mean));
    json_t *stages = json_array();
    for (int i = 0; i < r->n_stages; i++) {
        const struct hs_quant_stage *q = &r->stages[i];
        /* (not ranked: null) */
        json_array_append_new(
            stages, json_pack("{s:s, s:o, s:o, s:b}", "name", q->name, "damage_mean",
                              q->damage_mean >= 0 ? json_real(q->damage_mean) : json_null(),
                              "cos_min", q->cos_min >= 0 ? json_real(q->cos_min) : json_null(),
                              "keep_f32", q->keep_f32));
    }
    json_object_set_new(root, "stages", stages);
    json_object_set_new(root, "smoothing",
                        json_pack("{s:f, s:s}", "alpha", r->smooth_alpha, "file",
                                  r->smooth || r->act_scale ? "quant.safetensors" : ""));
    char path[4096];
    if (r->smooth || r->act_scale) {
        /* the smoothing divisors and the static activation scales the search chose: without
         * the scales a lane would quantize per token what the search measured per tensor */
        const char *names[2 * HS_QUANT_MAX_STAGES];
        char namebuf[2 * HS_QUANT_MAX_STAGES][64];
        struct hs_tensor ts[2 * HS_QUANT_MAX_STAGES];
        int nt = 0;
        const int64_t H = m->config.dims.hidden;
        for (int i = 0; i < m->n_stages && i < HS_QUANT_MAX_STAGES; i++) {
            const struct hs_stage *st = &m->stages[i];
            if (!linear_stage(st)) continue;
            if (r->smooth) {
                smooth_name(st, namebuf[nt], sizeof namebuf[nt]);
                names[nt] = namebuf[nt];
                ts[nt++] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                              .ndim = 1,
                                              .shape = {H},
                                              .data = r->smooth + (size_t)i * H,
                                              .bytes = sizeof(float) * (size_t)H};
            }
            if (r->act_scale) {
                snprintf(namebuf[nt], sizeof namebuf[nt], "layer%d.%s.act_scale", st->layer,
                         st->kind == HS_STAGE_ATTN ? "attn" : "ffn");
                names[nt] = namebuf[nt];
                ts[nt++] = (struct hs_tensor){.dtype = HS_DTYPE_F32,
                                              .ndim = 1,
                                              .shape = {2},
                                              .data = r->act_scale + (size_t)i * 2,
                                              .bytes = 2 * sizeof(float)};
            }
        }
        snprintf(path, sizeof path, "%s/quant.safetensors", out_dir);
        char tmp[4200];
        hs_file_tmp_name(path, tmp, sizeof tmp);
        s = hs_safetensors_write(tmp, names, ts, nt, err);
        if (s) unlink(tmp);
        if (!s) s = hs_file_commit(tmp, path, err);
        if (s) {
            json_decref(root);
            return s;
        }
    } else {
        /* a plan without smoothing or static scales: an older plan's must not stay behind */
        snprintf(path, sizeof path, "%s/quant.safetensors", out_dir);
        if (unlink(path) != 0 && errno != ENOENT) {
            s = hs_error_set(err, HS_STATUS_IO, "%s: cannot remove: %s", path, strerror(errno));
            json_decref(root);
            return s;
        }
    }
    /* quant.json last: its presence is the plan, whole or not at all */
    snprintf(path, sizeof path, "%s/quant.json", out_dir);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
    json_decref(root);
    if (!text) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: out of memory", path);
    s = hs_file_write_atomic(path, text, strlen(text), err);
    json_free_t jfree = free;
    json_get_alloc_funcs(NULL, &jfree); /* whichever allocator the program gave jansson */
    jfree(text);
    return s;
}

hs_status hs_quant_load(const struct hs_model *m, const char *dir, struct hs_quant_plan *out,
                        struct hs_error *err)
{
    memset(out, 0, sizeof *out);
    char path[4096];
    snprintf(path, sizeof path, "%s/quant.json", dir);
    if (access(path, F_OK) != 0) return HS_STATUS_NOT_FOUND;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return hs_error_set(err, HS_STATUS_CORRUPT, "%s:%d: %s", path, je.line, je.text);
    hs_status s = HS_STATUS_OK;
    const json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    const json_t *dt = json_object_get(root, "dtype"), *keep = json_object_get(root, "keep_f32");
    int dtype = json_is_string(dt) ? hs_compute_dtype_parse(json_string_value(dt)) : -1;
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "hetserve-quant") ||
        !json_is_integer(ver) || json_integer_value(ver) != 1)
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: not a hetserve-quant version 1 plan", path);
    else if (dtype < 0 || dtype == HS_DTYPE_F32)
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: dtype must be a reduced one (int8, bf16)",
                         path);
    else if (!json_is_array(keep))
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: keep_f32 must be a list of stage names",
                         path);
    out->dtype = (enum hs_dtype)dtype;
    for (size_t i = 0; !s && i < json_array_size(keep); i++) {
        const json_t *v = json_array_get(keep, i);
        const char *name = json_is_string(v) ? json_string_value(v) : NULL;
        int found = -1;
        for (int k = 0; name && k < m->n_stages && k < HS_QUANT_MAX_STAGES && found < 0; k++)
            if (!strcmp(m->stages[k].name, name)) found = k;
        if (found < 0)
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: keep_f32[%zu] is not a stage of %s", path,
                             i, m->name);
        else
            out->keep_f32[found] = true;
    }
    json_decref(root);
    return s;
}

void hs_quant_report_clear(struct hs_quant_report *r)
{
    if (!r) return;
    hs_free(r->smooth);
    hs_free(r->act_scale);
    r->smooth = r->act_scale = NULL;
}
