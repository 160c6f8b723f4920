#include "model/verify.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "model/executor.h"

/* ---------- golden set ---------- */

void hs_golden_free(struct hs_golden *g)
{
    if (!g) return;
    for (int i = 0; i < g->count; i++) {
        if (g->sentences) hs_free(g->sentences[i]);
        if (g->ids) hs_free(g->ids[i]);
    }
    hs_free(g->sentences);
    hs_free(g->ids);
    hs_free(g->n_ids);
    hs_free(g->text_bytes);
    hs_free(g->emb);
    hs_free(g);
}

static json_t *ids_member(json_t *obj)
{
    static const char *const keys[] = {"ids", "token_ids", "input_ids"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = json_object_get(obj, keys[k]);
        if (json_is_array(v)) return v;
    }
    return NULL;
}

static hs_status read_ids(json_t *arr, const char *path, int i, int32_t **ids, int *n,
                          struct hs_error *err)
{
    size_t len = json_array_size(arr);
    if (len == 0 || len > 1 << 20)
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s: sentence %d: %zu token ids", path, i, len);
    *ids = hs_malloc(len * sizeof(int32_t));
    if (!*ids) return hs_error_set(err, HS_STATUS_NO_MEMORY, "%s: token ids", path);
    for (size_t t = 0; t < len; t++) {
        json_t *v = json_array_get(arr, t);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return hs_error_set(err, HS_STATUS_CORRUPT, "%s: sentence %d: token %zu not an id",
                                path, i, t);
        (*ids)[t] = (int32_t)json_integer_value(v);
    }
    *n = (int)len;
    return HS_STATUS_OK;
}

hs_status hs_golden_load(const char *json_path, const char *f32_path, struct hs_golden **out,
                         struct hs_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(json_path, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        FILE *probe = fopen(json_path, "rb");
        if (!probe) return hs_error_set(err, HS_STATUS_IO, "%s: cannot open", json_path);
        fclose(probe);
        return hs_error_set(err, HS_STATUS_CORRUPT, "%s:%d: %s", json_path, jerr.line, jerr.text);
    }
    hs_status s = HS_STATUS_OK;
    struct hs_golden *g = hs_calloc(1, sizeof *g);
    FILE *f = NULL;
    if (!g) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "golden set");
        goto done;
    }
    json_t *sents = json_object_get(root, "sentences");
    json_t *jdim = json_object_get(root, "dim");
    json_t *jcount = json_object_get(root, "count");
    if (!json_is_array(sents) || !json_is_integer(jdim) || json_integer_value(jdim) <= 0 ||
        json_integer_value(jdim) > 65536) {
        s = hs_error_set(err, HS_STATUS_CORRUPT,
                         "%s: needs \"sentences\" (array) and \"dim\" (positive integer)",
                         json_path);
        goto done;
    }
    const int count = (int)json_array_size(sents);
    if (count == 0 ||
        (jcount && (!json_is_integer(jcount) || json_integer_value(jcount) != count))) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: \"count\" disagrees with %d sentences",
                         json_path, count);
        goto done;
    }
    g->dim = (int)json_integer_value(jdim);
    g->sentences = hs_calloc((size_t)count, sizeof(char *));
    g->ids = hs_calloc((size_t)count, sizeof(int32_t *));
    g->n_ids = hs_calloc((size_t)count, sizeof(int));
    g->text_bytes = hs_calloc((size_t)count, sizeof(size_t));
    g->emb = hs_malloc((size_t)count * (size_t)g->dim * sizeof(float));
    if (!g->sentences || !g->ids || !g->n_ids || !g->text_bytes || !g->emb) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "golden set of %d sentences", count);
        goto done;
    }
    g->count = count;
    json_t *top_ids = ids_member(root);
    int with_ids = 0;
    for (int i = 0; i < count; i++) {
        json_t *it = json_array_get(sents, (size_t)i);
        json_t *text = json_is_object(it) ? json_object_get(it, "text") : it;
        if (!json_is_string(text)) {
            s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: sentence %d has no text", json_path, i);
            goto done;
        }
        g->text_bytes[i] = json_string_length(text);
        g->sentences[i] = hs_strndup(json_string_value(text), g->text_bytes[i]);
        if (!g->sentences[i]) {
            s = hs_error_set(err, HS_STATUS_NO_MEMORY, "golden sentence");
            goto done;
        }
        json_t *ids = json_is_object(it) ? ids_member(it) : NULL;
        if (!ids && top_ids) ids = json_array_get(top_ids, (size_t)i);
        if (json_is_array(ids)) {
            s = read_ids(ids, json_path, i, &g->ids[i], &g->n_ids[i], err);
            if (s) goto done;
            with_ids++;
        }
    }
    if (with_ids != 0 && with_ids != count) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: token ids for %d of %d sentences", json_path,
                         with_ids, count);
        goto done;
    }
    if (with_ids == 0) { /* the sentences are tokenized: text_bytes stays */
        hs_free(g->ids);
        hs_free(g->n_ids);
        g->ids = NULL;
        g->n_ids = NULL;
    }

    f = fopen(f32_path, "rb");
    if (!f) {
        s = hs_error_set(err, HS_STATUS_IO, "%s: cannot open", f32_path);
        goto done;
    }
    const size_t want = (size_t)count * (size_t)g->dim;
    size_t got = fread(g->emb, sizeof(float), want, f);
    int extra = fgetc(f);
    if (got != want || extra != EOF) {
        s = hs_error_set(err, HS_STATUS_CORRUPT, "%s: expected exactly %zu floats ([%d, %d])",
                         f32_path, want, count, g->dim);
        goto done;
    }
    /* the file is little-endian; so are the machines this runs on, but say so if not */
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        s = hs_error_set(err, HS_STATUS_UNSUPPORTED, "big-endian hosts are not supported");
        goto done;
    }
done:
    if (f) fclose(f);
    json_decref(root);
    if (s) {
        hs_golden_free(g);
        return s;
    }
    *out = g;
    return HS_STATUS_OK;
}

hs_status hs_golden_load_dir(const char *dir, struct hs_golden **out, struct hs_error *err)
{
    char jp[4096], fp[4096];
    size_t n = strlen(dir);
    if (n > 5 && strcmp(dir + n - 5, ".json") == 0) { /* NAME.json with NAME.f32 beside it */
        if (n >= sizeof jp)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "golden file path too long");
        snprintf(jp, sizeof jp, "%s", dir);
        snprintf(fp, sizeof fp, "%.*s.f32", (int)(n - 5), dir);
        return hs_golden_load(jp, fp, out, err);
    }
    int a = snprintf(jp, sizeof jp, "%s/embeddings.json", dir);
    int b = snprintf(fp, sizeof fp, "%s/embeddings.f32", dir);
    if (a < 0 || b < 0 || (size_t)a >= sizeof jp || (size_t)b >= sizeof fp)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "golden folder path too long");
    return hs_golden_load(jp, fp, out, err);
}

/* ---------- tolerance, cosine ---------- */

void hs_verify_default_tolerance(enum hs_dtype dtype, struct hs_verify_tolerance *out)
{
    switch (dtype) {
    case HS_DTYPE_F32:
        out->cos_min = 0.99999;
        out->cos_mean = 0.99999;
        break;
    case HS_DTYPE_F16:
        out->cos_min = 0.999;
        out->cos_mean = 0.9999;
        break;
    case HS_DTYPE_BF16:
        out->cos_min = 0.99;
        out->cos_mean = 0.999;
        break;
    case HS_DTYPE_I8: /* the target; `hetserve quantize` plans lanes to meet it */
        out->cos_min = 0.99;
        out->cos_mean = 0.998;
        break;
    default:
        out->cos_min = 0.95;
        out->cos_mean = 0.99;
        break;
    }
}

double hs_verify_cosine(const float *a, const float *b, int n)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (isnan(ab) || isnan(aa) || isnan(bb)) return NAN;
    if (aa == 0.0 || bb == 0.0) return 0.0;
    return ab / (sqrt(aa) * sqrt(bb));
}

/* ---------- verification ---------- */

static int bucket_of(int len, int seq_max)
{
    int b = (len + 15) / 16 * 16;
    return b > seq_max ? seq_max : b;
}

hs_status hs_verify_engine(const struct hs_model *m, hs_engine_t e, enum hs_dtype dtype,
                           const struct hs_golden *g, const struct hs_verify_tolerance *tol,
                           const struct hs_verify_opts *opts, struct hs_verify_report *rep,
                           struct hs_error *err)
{
    if (!m || !e || !g || !rep)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "verify: missing argument");
    const struct hs_encoder_dims *dims = &m->config.dims;
    if (g->dim != hs_pooled_dim(dims))
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "verify: golden embeddings have dim %d, model %s has %d", g->dim,
                            m->name, hs_pooled_dim(dims));
    memset(rep, 0, sizeof *rep);
    snprintf(rep->engine, sizeof rep->engine, "%s", hs_engine_name(e));
    snprintf(rep->kind, sizeof rep->kind, "%s", hs_engine_kind(e));
    rep->dtype = dtype;
    if (tol)
        rep->tol = *tol;
    else
        hs_verify_default_tolerance(dtype, &rep->tol);

    int count = g->count;
    if (opts && opts->limit > 0 && opts->limit < count) count = opts->limit;
    int batch_max = opts && opts->batch_max > 0 ? opts->batch_max : 32;
    if (batch_max > count) batch_max = count;
    const int seq_max = m->config.max_seq_len;
    const int H = hs_pooled_dim(dims);

    /* token ids of every sentence, from the golden set or the model's tokenizer */
    int32_t *ids = hs_malloc((size_t)count * (size_t)seq_max * sizeof(int32_t));
    int *lens = hs_malloc((size_t)count * sizeof(int));
    int32_t *lengths = hs_malloc((size_t)batch_max * sizeof(int32_t));
    int32_t *offsets = hs_malloc(((size_t)batch_max + 1) * sizeof(int32_t));
    int32_t *packed = hs_malloc((size_t)batch_max * (size_t)seq_max * sizeof(int32_t));
    float *out = hs_malloc((size_t)batch_max * (size_t)H * sizeof(float));
    struct hs_executor *x = NULL;
    hs_status s = HS_STATUS_OK;
    if (!ids || !lens || !lengths || !offsets || !packed || !out) {
        s = hs_error_set(err, HS_STATUS_NO_MEMORY, "verify: buffers");
        goto done;
    }
    for (int i = 0; i < count; i++) {
        int32_t *row = ids + (size_t)i * seq_max;
        if (g->ids) {
            if (g->n_ids[i] > seq_max) {
                s = hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                 "verify: golden sentence %d has %d tokens, model takes %d", i,
                                 g->n_ids[i], seq_max);
                goto done;
            }
            memcpy(row, g->ids[i], (size_t)g->n_ids[i] * sizeof(int32_t));
            lens[i] = g->n_ids[i];
        } else {
            int n = 0;
            s = hs_model_tokenize(m, g->sentences[i], g->text_bytes[i], row, seq_max, &n, NULL,
                                  err);
            if (s) goto done;
            lens[i] = n;
        }
    }

    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor_opts xo = {
        .batch_max = batch_max,
        .tokens_max = batch_max * seq_max,
        .seq_max = seq_max,
        .slots = 1,
        .dtype = dtype,
    };
    s = hs_executor_create(m, &plan, &xo, &x, err);
    if (s) goto done;

    double sum = 0.0;
    rep->cos_min = INFINITY;
    const int64_t t0 = hs_now_ns();
    for (int first = 0; first < count; first += batch_max) {
        const int n = count - first < batch_max ? count - first : batch_max;
        int longest = 1, tokens = 0;
        offsets[0] = 0;
        for (int i = 0; i < n; i++) {
            const int len = lens[first + i];
            memcpy(packed + tokens, ids + (size_t)(first + i) * seq_max,
                   (size_t)len * sizeof(int32_t));
            lengths[i] = len;
            tokens += len;
            offsets[i + 1] = tokens;
            if (len > longest) longest = len;
        }
        struct hs_batch b = {
            .n_seqs = n,
            .seq_max = bucket_of(longest, seq_max),
            .n_tokens = tokens,
            .ids = packed,
            .type_ids = NULL,
            .lengths = lengths,
            .offsets = offsets,
        };
        s = hs_executor_run(x, 0, &b, out, NULL, err);
        if (s) goto done;
        for (int i = 0; i < n; i++) {
            double c = hs_verify_cosine(out + (size_t)i * H, g->emb + (size_t)(first + i) * H, H);
            if (isnan(c)) c = -1.0; /* a NaN embedding is the worst possible answer */
            sum += c;
            if (c < rep->cos_min) {
                rep->cos_min = c;
                rep->worst = first + i;
            }
        }
    }
    rep->ms = hs_ns_to_ms(hs_now_ns() - t0);
    rep->count = count;
    rep->cos_mean = sum / count;
    rep->pass = rep->cos_min >= rep->tol.cos_min && rep->cos_mean >= rep->tol.cos_mean;
done:
    if (x) hs_executor_free(x);
    hs_free(ids);
    hs_free(lens);
    hs_free(lengths);
    hs_free(offsets);
    hs_free(packed);
    hs_free(out);
    return s;
}

/* Written for this check: what a lane sees in service, in a few texts. */
static const char *const check_texts[] = {
    "hi",
    "Where is the nearest train station?",
    "The quarterly report shows revenue up four percent and costs flat.",
    "How do I reset my password if the email never arrives?",
    "A calm lake at dawn, mist over the water, one boat drifting.",
    "今天天气很好，我们去公园散步吧。",
    "Order #48213 shipped on 2026-03-14 for $129.99 🚚📦",
    "for (int i = 0; i < n; i++) sum += x[i] * y[i];",
    "Sentence encoders map text to vectors so that similar meanings land close together. A "
    "serving system batches requests, pads each batch to a length bucket, and runs the encoder's "
    "layers on whichever engine its placement plan names. Reduced precision makes the matrix "
    "products cheaper, but every lane must still agree with the full-precision reference before "
    "it takes traffic, which is why this text is long enough to cross one hundred and twenty-eight "
    "tokens: long inputs accumulate error over more positions than short ones do, and a check "
    "that only saw short queries would miss that.",
    "ok",
    "Résumé, naïve café — déjà vu?",
    "What's the difference between latency and throughput?",
};

const char *const *hs_verify_check_texts(int *n)
{
    *n = (int)(sizeof check_texts / sizeof check_texts[0]);
    return check_texts;
}

hs_status hs_verify_lane(struct hs_executor *lane, struct hs_executor *ref, enum hs_dtype dtype,
                         const struct hs_verify_tolerance *tol, struct hs_verify_report *rep,
                         struct hs_error *err)
{
    memset(rep, 0, sizeof *rep);
    rep->dtype = dtype;
    if (tol)
        rep->tol = *tol;
    else
        hs_verify_default_tolerance(dtype, &rep->tol);
    const struct hs_model *m = hs_executor_model(lane);
    const int H = hs_pooled_dim(&m->config.dims);
    int n = 0;
    const char *const *texts = hs_verify_check_texts(&n);
    float *a = hs_malloc(sizeof(float) * (size_t)n * H),
          *b = hs_malloc(sizeof(float) * (size_t)n * H);
    hs_status s = a && b ? HS_STATUS_OK : hs_error_set(err, HS_STATUS_NO_MEMORY, "verify: memory");
    int64_t t0 = hs_now_ns();
    if (!s) s = hs_executor_embed_texts(lane, texts, n, a, NULL, err);
    rep->ms = (double)(hs_now_ns() - t0) / 1e6;
    if (!s) s = hs_executor_embed_texts(ref, texts, n, b, NULL, err);
    if (!s) {
        double mn = 2.0, sum = 0.0;
        for (int i = 0; i < n; i++) {
            double c = hs_verify_cosine(a + (size_t)i * H, b + (size_t)i * H, H);
            if (!(c >= mn)) { /* NaN counts as the worst */
                mn = c;
                rep->worst = i;
            }
            sum += c;
        }
        rep->count = n;
        rep->cos_min = mn;
        rep->cos_mean = sum / n;
        rep->pass = mn >= rep->tol.cos_min && rep->cos_mean >= rep->tol.cos_mean;
    }
    hs_free(a);
    hs_free(b);
    return s;
}
