/* POST /v1/ocr: the config's pipelines of kind ocr (model/ocr.h on sched/pipeline.h).
 *
 *   request:  the image's bytes (Content-Type image/jpeg, image/png or application/octet-stream),
 *             or JSON {"image": "<base64 of the bytes>"}; X-Pipeline names the pipeline (default
 *             the first), X-Timeout-Ms shortens its timeout_ms.
 *   response: {"pipeline", "width", "height", "lines": [{"box": [[x, y] x 4], "text", "score",
 *             "det_score"}], "timings_ms": {per stage}, "rec_batch_images"}; Server-Timing has
 *             the stages too.
 * Errors: 400 an image that cannot be decoded (corrupt, truncated, not JPEG / PNG, over the pixel
 * limits) or a bad body, 413 over image_max_bytes, 429 with Retry-After (the busiest stage's
 * predicted drain time) when the pipeline's first queue is full or a model stage is overloaded
 * with its fallback at its cap (stages.<stage>.fallback), 504 when the deadline passes in a queue
 * or a stage's timeout_ms passes (naming the stage), 503 while shutting down. X-Engine names the
 * engines that ran det and rec. Every accepted request gets exactly one answer (the pipeline's
 * contract).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "model/ocr.h"
#include "server/server-impl.h"

struct ocr_pipe {
    const struct hs_pipeline_cfg *cfg;
    hs_engine_t det_e, rec_e, cls_e;
    struct hs_ocr_models m;
    /* the model stages' fallbacks: m with det (rec) on another engine; its graph is theirs */
    hs_engine_t det_fb_e, rec_fb_e;
    struct hs_ocr_models det_fb, rec_fb;
    struct hs_pipeline *p;
    atomic_llong requests, ok, failed;
};

struct hs_ocr_service {
    int n;
    struct ocr_pipe pl[HS_CONFIG_MAX_PIPELINES];
};

/* one request in a pipeline (heap: it may outlive a closed connection's wait) */
struct ocr_req {
    struct hs_ocr_job job;
    struct conn *k;
    struct ocr_pipe *pipe;
    uint8_t *bytes;
    hs_status status;
    struct hs_error err;
};

static hs_engine_t engine_or_first(struct hs_server *s, const char *name)
{
    return name && name[0] ? hs__server_engine(s, name) : s->engines[0];
}

/* The stages' fallbacks: a copy of the models with det (rec) loaded on fallback.engines[0]. */
static hs_status load_fallbacks(struct hs_server *s, struct ocr_pipe *p, int i,
                                struct hs_error *err)
{
    const struct hs_pipeline_cfg *pc = p->cfg;
    for (int j = 0; j < 2; j++) {
        const struct hs_pipeline_stage_cfg *sc = j ? &pc->rec_stage : &pc->det_stage;
        if (!sc->n_fallback) continue;
        hs_engine_t e = hs__server_engine(s, sc->fallback[0]);
        if (!e)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: pipelines[%d].stages.%s.fallback.engines[0]: engine '%s' "
                                "is not running",
                                i, j ? "rec" : "det", sc->fallback[0]);
        struct hs_ocr_models *fb = j ? &p->rec_fb : &p->det_fb;
        memcpy(fb, &p->m, sizeof *fb);
        for (int k = 0; k <= HS_PIPELINE_MAX_BATCH; k++) atomic_init(&fb->rec_runs[k], 0);
        for (int k = 0; k < 16; k++) atomic_init(&fb->rec_width_runs[k], 0);
        void **graph = j ? &fb->rec : &fb->det;
        *graph = NULL;
        hs_status st = hs_engine_graph_load(e, j ? pc->rec : pc->det, graph, err);
        if (st) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            return hs_error_set(err, st, "pipelines[%d].stages.%s.fallback: %s", i,
                                j ? "rec" : "det", m);
        }
        if (j) {
            fb->rec_engine = e;
            p->rec_fb_e = e;
        } else {
            fb->det_engine = e;
            p->det_fb_e = e;
        }
    }
    return HS_STATUS_OK;
}

hs_status hs__ocr_create(struct hs_server *s, struct hs_ocr_service **out, struct hs_error *err)
{
    *out = NULL;
    const struct hs_config *c = &s->cfg;
    if (!c->n_pipelines) return HS_STATUS_OK;
    struct hs_ocr_service *o = hs_calloc(1, sizeof *o);
    if (!o) return hs_error_set(err, HS_STATUS_NO_MEMORY, "ocr: out of memory");
    *out = o;
    for (int i = 0; i < c->n_pipelines; i++) {
        const struct hs_pipeline_cfg *pc = &c->pipelines[i];
        struct ocr_pipe *p = &o->pl[o->n++];
        p->cfg = pc;
        p->det_e = engine_or_first(s, pc->det_engine);
        p->rec_e = pc->rec_engine[0] ? engine_or_first(s, pc->rec_engine) : p->det_e;
        p->cls_e = pc->cls_engine[0] ? engine_or_first(s, pc->cls_engine) : p->rec_e;
        if (!p->det_e || !p->rec_e || !p->cls_e)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: pipelines[%d]: an engine it names is not running", i);
        hs_status st = hs_ocr_models_load(&p->m, p->det_e, pc->det, p->rec_e, pc->rec, p->cls_e,
                                          pc->cls[0] ? pc->cls : NULL, pc->dict, err);
        if (st) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            return hs_error_set(err, st, "pipelines[%d] (%s): %s", i, pc->name, m);
        }
        p->m.params.det_limit_side_len = pc->det_limit_side_len;
        p->m.params.db.box_thresh = pc->box_thresh;
        p->m.params.drop_score = pc->drop_score;
        p->m.params.limits =
            (struct hs_image_limits){pc->image_max_bytes, pc->image_max_pixels, pc->image_max_side};
        p->m.rec_batch_fixed = pc->rec_stage.batch_fixed;
        p->m.n_rec_widths = pc->rec_stage.n_shapes;
        for (int k = 0; k < pc->rec_stage.n_shapes; k++)
            p->m.rec_widths[k] = pc->rec_stage.shapes[k];
        if ((st = load_fallbacks(s, p, i, err))) return st;
        const struct hs_ocr_pipeline_opts po = {
            .cpu_workers = pc->cpu_workers,
            .queue_max = pc->queue_max,
            .rec_images = pc->rec_images,
            .rec_window_us = pc->rec_window_us,
            .det_timeout_us = (int64_t)pc->det_stage.timeout_ms * 1000,
            .rec_timeout_us = (int64_t)pc->rec_stage.timeout_ms * 1000,
            .det_fb = p->det_fb_e ? &p->det_fb : NULL,
            .rec_fb = p->rec_fb_e ? &p->rec_fb : NULL,
            .det_ratio_max = pc->det_stage.ratio_max,
            .rec_ratio_max = pc->rec_stage.ratio_max,
        };
        if ((st = hs_ocr_pipeline_create(&p->m, &po, hs__ocr_done, p, &p->p, err))) return st;
        if (p->det_fb_e || p->rec_fb_e)
            hs_log_info("pipeline %s: fallbacks det %s (ratio_max %.2f), rec %s (ratio_max %.2f)",
                        pc->name, p->det_fb_e ? hs_engine_name(p->det_fb_e) : "-",
                        pc->det_stage.ratio_max, p->rec_fb_e ? hs_engine_name(p->rec_fb_e) : "-",
                        pc->rec_stage.ratio_max);
        hs_log_info("pipeline %s (ocr): det on %s, rec on %s%s%s, %d CPU worker(s) a stage",
                    pc->name, hs_engine_name(p->det_e), hs_engine_name(p->rec_e),
                    pc->cls[0] ? ", cls on " : "", pc->cls[0] ? hs_engine_name(p->cls_e) : "",
                    pc->cpu_workers);
    }
    return HS_STATUS_OK;
}

void hs__ocr_drain(struct hs_ocr_service *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        hs_pipeline_destroy(o->pl[i].p); /* answers what is queued, finishes what runs */
        o->pl[i].p = NULL;
    }
}

void hs__ocr_free(struct hs_ocr_service *o)
{
    if (!o) return;
    hs__ocr_drain(o);
    for (int i = 0; i < o->n; i++) {
        struct ocr_pipe *p = &o->pl[i];
        if (p->det_fb_e) hs_engine_graph_release(p->det_fb_e, p->det_fb.det);
        if (p->rec_fb_e) hs_engine_graph_release(p->rec_fb_e, p->rec_fb.rec);
        hs_ocr_models_free(&p->m);
    }
    hs_free(o);
}

/* the pipeline's answer: kept in the request, the connection woken */
void hs__ocr_done(void *ctx, void *item, hs_status s, const struct hs_error *e)
{
    struct ocr_pipe *p = ctx;
    struct ocr_req *r = item;
    r->status = s;
    if (s && e) r->err = *e;
    atomic_fetch_add(s ? &p->failed : &p->ok, 1);
    struct conn *k = r->k;
    hs__conn_wake(k);
    hs__conn_release(k);
}

int hs__ocr_body(const char *body, size_t len, const char *ctype, int64_t max_bytes,
                 uint8_t **bytes, size_t *n, char *msg, size_t cap)
{
    *bytes = NULL;
    *n = 0;
    if (ctype && !strncmp(ctype, "application/json", 16)) {
        json_t *root = NULL;
        const int st = hs__body_parse(body, len, NULL, &root, msg, cap);
        if (st) return st;
        json_t *im = json_object_get(root, "image");
        if (!json_is_string(im)) {
            json_decref(root);
            snprintf(msg, cap, "'image' must be a base64 string of a JPEG or PNG file");
            return 400;
        }
        const size_t sl = json_string_length(im);
        if ((int64_t)(sl / 4 * 3) > max_bytes + 3) {
            json_decref(root);
            snprintf(msg, cap, "image of about %zu bytes; the limit is %lld", sl / 4 * 3,
                     (long long)max_bytes);
            return 413;
        }
        uint8_t *out = hs_malloc(sl / 4 * 3 + 4);
        const long long dn = out ? hs_base64_decode(json_string_value(im), sl, out) : -2;
        json_decref(root);
        if (dn < 0) {
            hs_free(out);
            snprintf(msg, cap, dn == -2 ? "out of memory" : "'image' is not base64");
            return dn == -2 ? 500 : 400;
        }
        *bytes = out;
        *n = (size_t)dn;
    } else {
        if ((int64_t)len > max_bytes) {
            snprintf(msg, cap, "image of %zu bytes; the limit is %lld", len, (long long)max_bytes);
            return 413;
        }
        if (!(*bytes = hs_malloc(len ? len : 1))) {
            snprintf(msg, cap, "out of memory");
            return 500;
        }
        if (len) memcpy(*bytes, body, len);
        *n = len;
    }
    if (!*n) {
        hs_free(*bytes);
        *bytes = NULL;
        snprintf(msg, cap, "no image: send its bytes, or JSON {\"image\": base64}");
        return 400;
    }
    if ((int64_t)*n > max_bytes) {
        hs_free(*bytes);
        *bytes = NULL;
        snprintf(msg, cap, "image of %zu bytes; the limit is %lld", *n, (long long)max_bytes);
        return 413;
    }
    return 0;
}

static enum MHD_Result fail(struct conn *k, struct ocr_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result fail(struct conn *k, struct ocr_req *r, int status, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    double hint = 0;
    if (status == 429) { /* a capacity hint: how long the busiest stage needs for its queue */
        hint = 1;
        if (r && r->pipe && r->pipe->p) {
            const double t = hs_pipeline_retry_after_s(r->pipe->p);
            if (t > hint) hint = t < 60 ? t : 60;
        }
    }
    if (r) {
        hs_free(r->bytes);
        hs_free(r);
    }
    return hs__conn_error(k, status, hint, msg);
}

enum MHD_Result hs__ocr_begin(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    struct hs_ocr_service *o = s->ocr;
    if (!o || !o->n) return fail(k, NULL, 404, "no OCR pipeline is configured (pipelines[])");
    const char *want = hs__conn_header(k, "X-Pipeline");
    struct ocr_pipe *p = NULL;
    for (int i = 0; i < o->n && !p; i++)
        if (!want || !strcmp(o->pl[i].cfg->name, want)) p = &o->pl[i];
    if (!p) return fail(k, NULL, 404, "no pipeline named '%s'", want);
    atomic_fetch_add(&p->requests, 1);
    size_t len = 0;
    const char *body = hs__conn_body(k, &len);
    const char *ct = hs__conn_header(k, "Content-Type");
    struct ocr_req *r = hs_calloc(1, sizeof *r);
    if (!r) return fail(k, NULL, 500, "out of memory");
    r->k = k;
    r->pipe = p;
    size_t n = 0;
    char msg[HS__MSG_MAX];
    const int bad =
        hs__ocr_body(body, len, ct, p->cfg->image_max_bytes, &r->bytes, &n, msg, sizeof msg);
    if (bad) return fail(k, r, bad, "%s", msg);
    r->job.d.bytes = r->bytes;
    r->job.d.n_bytes = n;
    r->job.user = r;
    long long timeout_ms = p->cfg->timeout_ms;
    const char *xt = hs__conn_header(k, "X-Timeout-Ms");
    if (xt && atoll(xt) > 0 && atoll(xt) < timeout_ms) timeout_ms = atoll(xt);
    *hs__conn_predict(k) = r;
    hs__conn_wait_begin(k);
    hs__conn_hold(k); /* the pipeline's reference, let go in hs__ocr_done */
    struct hs_error err = {0};
    hs_status st = hs_pipeline_submit(p->p, &r->job, hs_now_ns() + timeout_ms * 1000000, &err);
    if (st) {
        hs__conn_release(k);
        *hs__conn_predict(k) = NULL;
        atomic_fetch_add(&p->failed, 1);
        return fail(k, r, st == HS_STATUS_OVERLOADED ? 429 : hs__http_status(st), "%s", err.msg);
    }
    return hs__conn_wait(k) ? hs__ocr_resume(k) : MHD_YES;
}

enum MHD_Result hs__ocr_resume(struct conn *k)
{
    struct ocr_req *r = *hs__conn_predict(k);
    *hs__conn_predict(k) = NULL;
    if (!r) return hs__conn_error(k, 500, 0, "ocr: lost request");
    if (r->status) {
        const int http = r->status == HS_STATUS_OVERLOADED ? 429 : hs__http_status(r->status);
        char msg[sizeof r->err.msg];
        snprintf(msg, sizeof msg, "%s", r->err.msg[0] ? r->err.msg : hs_status_str(r->status));
        hs_op_data_free(&r->job.d);
        return fail(k, r, http, "%s", msg);
    }
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), 1024);
    const struct hs_op_data *d = &r->job.d;
    const struct hs_ocr_timings *t = &r->job.t;
    hs_buf_puts(&b, "{\"pipeline\":");
    hs_buf_json_str(&b, r->pipe->cfg->name, strlen(r->pipe->cfg->name));
    hs_buf_printf(&b, ",\"width\":%d,\"height\":%d,\"lines\":[", d->image.w, d->image.h);
    for (int i = 0; i < d->n_lines; i++) {
        const struct hs_ocr_line *l = &d->lines[i];
        hs_buf_printf(&b, "%s{\"box\":[[%d,%d],[%d,%d],[%d,%d],[%d,%d]],\"text\":", i ? "," : "",
                      (int)l->box.p[0].x, (int)l->box.p[0].y, (int)l->box.p[1].x,
                      (int)l->box.p[1].y, (int)l->box.p[2].x, (int)l->box.p[2].y,
                      (int)l->box.p[3].x, (int)l->box.p[3].y);
        hs_buf_json_str(&b, l->text, strlen(l->text));
        hs_buf_printf(&b, ",\"score\":%.6f,\"det_score\":%.6f%s}", l->score, l->box.score,
                      l->rotated ? ",\"rotated\":true" : "");
    }
    const struct {
        const char *name;
        int64_t ns;
    } st[] = {
        {"decode", t->decode}, {"det_prep", t->det_prep}, {"det", t->det}, {"db_post", t->db_post},
        {"crop", t->crop},     {"cls", t->cls},           {"rec", t->rec}, {"ctc", t->ctc}};
    hs_buf_puts(&b, "],\"timings_ms\":{");
    char *timing = hs_arena_alloc(hs__conn_arena(k), 512);
    size_t tl = 0;
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        hs_buf_printf(&b, "%s\"%s\":%.3f", i ? "," : "", st[i].name, st[i].ns / 1e6);
        if (timing && tl < 480)
            tl += (size_t)snprintf(timing + tl, 512 - tl, "%s%s;dur=%.3f", i ? ", " : "",
                                   st[i].name, st[i].ns / 1e6);
    }
    hs_buf_printf(&b, "},\"rec_batch_images\":%d,\"engines\":{\"det\":\"%s\",\"rec\":\"%s\"}}",
                  r->job.rec_batch_images, r->job.det_engine ? r->job.det_engine : "",
                  r->job.rec_engine ? r->job.rec_engine : "");
    /* X-Engine: the engines of the model stages, det's then rec's when they differ */
    char *xe = hs_arena_alloc(hs__conn_arena(k), 80);
    if (xe && r->job.det_engine && r->job.rec_engine) {
        if (strcmp(r->job.det_engine, r->job.rec_engine))
            snprintf(xe, 80, "%s, %s", r->job.det_engine, r->job.rec_engine);
        else
            snprintf(xe, 80, "%s", r->job.rec_engine);
        hs__conn_set_engine(k, xe);
    }
    hs_op_data_free(&r->job.d);
    hs_free(r->bytes);
    hs_free(r);
    return hs__conn_reply(k, &b, timing ? "Server-Timing" : NULL, timing);
}

/* one stage's series for the metrics: its stats and where it is */
struct stage_row {
    const struct ocr_pipe *p;
    const char *stage;
    struct hs_pipeline_stage_stats x;
};

/* a per-stage series: its name, type, help and value */
struct stage_series {
    const char *name, *type, *help;
    double (*get)(const struct hs_pipeline_stage_stats *x);
};

#define GET(nm, expr)                                                                              \
    static double nm(const struct hs_pipeline_stage_stats *x)                                      \
    {                                                                                              \
        return (double)(expr);                                                                     \
    }
GET(g_items, x->items_in)
GET(g_failed, x->items_failed)
GET(g_queue_s, x->queue_ns / 1e9)
GET(g_run_s, x->run_ns / 1e9)
GET(g_batches, x->batches)
GET(g_queued, x->queued)
GET(g_batch_items, x->batch_items)
GET(g_batch_max, x->batch_size_max)
GET(g_failovers, x->failovers)
GET(g_refused, x->refused)
GET(g_timeouts, x->timeouts)
GET(g_fb_queued, x->queued_fallback)
GET(g_fb_share, x->fallback_share)
GET(g_breaker, x->breaker_open)
#undef GET

static const struct stage_series series[] = {
    {"items_total", "counter", "items a stage ran", g_items},
    {"failed_total", "counter", "items a stage failed or timed out", g_failed},
    {"queue_seconds_total", "counter", "time items waited", g_queue_s},
    {"run_seconds_total", "counter", "time the stage ran", g_run_s},
    {"batches_total", "counter", "batches the stage formed", g_batches},
    {"queued", "gauge", "items waiting now", g_queued},
    {"batch_items_total", "counter", "items over the batches formed", g_batch_items},
    {"batch_size_max", "gauge", "largest batch formed", g_batch_max},
    {"failovers_total", "counter", "items sent to the fallback", g_failovers},
    {"refused_total", "counter", "overloaded items refused at the fallback cap (429)", g_refused},
    {"timeouts_total", "counter", "items ended by the stage's timeout or the deadline (504)",
     g_timeouts},
    {"fallback_queued", "gauge", "items waiting for the fallback", g_fb_queued},
    {"fallback_share", "gauge", "the fallback's share of the last 100 items", g_fb_share},
    {"breaker_open", "gauge", "1 while the primary's last batches all failed", g_breaker},
};

void hs__ocr_metrics(struct hs_server *s, struct hs_buf *out)
{
    struct hs_ocr_service *o = s->ocr;
    if (!o) return;
    hs_buf_puts(out, "# HELP hetserve_pipeline_requests_total OCR pipeline requests by outcome\n"
                     "# TYPE hetserve_pipeline_requests_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        hs_buf_printf(out,
                      "hetserve_pipeline_requests_total{pipeline=\"%s\",outcome=\"ok\"} %lld\n"
                      "hetserve_pipeline_requests_total{pipeline=\"%s\",outcome=\"failed\"} "
                      "%lld\n",
                      p->cfg->name, (long long)atomic_load(&p->ok), p->cfg->name,
                      (long long)atomic_load(&p->failed));
    }
    struct stage_row rows[HS_CONFIG_MAX_PIPELINES * HS_PIPELINE_MAX_STAGES];
    int nr = 0;
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        if (!p->p) continue;
        for (int k = 0; k < hs_pipeline_stage_count(p->p); k++) {
            rows[nr].p = p;
            rows[nr].stage = hs_pipeline_stage_name(p->p, k);
            hs_pipeline_stage_stats(p->p, k, &rows[nr].x);
            nr++;
        }
    }
    /* each family whole (the text format wants a family's lines together) */
    for (size_t f = 0; f < sizeof series / sizeof series[0]; f++) {
        hs_buf_printf(
            out, "# HELP hetserve_pipeline_stage_%s %s\n# TYPE hetserve_pipeline_stage_%s %s\n",
            series[f].name, series[f].help, series[f].name, series[f].type);
        for (int r = 0; r < nr; r++)
            hs_buf_printf(out, "hetserve_pipeline_stage_%s{pipeline=\"%s\",stage=\"%s\"} %.9g\n",
                          series[f].name, rows[r].p->cfg->name, rows[r].stage,
                          series[f].get(&rows[r].x));
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_latency_seconds an item's time in the stage, "
                     "its queue to the end of its batch's run\n"
                     "# TYPE hetserve_pipeline_stage_latency_seconds histogram\n");
    for (int r = 0; r < nr; r++) {
        const char *pn = rows[r].p->cfg->name, *sn = rows[r].stage;
        const struct hs_pipeline_stage_stats *x = &rows[r].x;
        long long cum = 0;
        for (int b = 0; b < HS_PIPELINE_LAT_BUCKETS; b++) {
            cum += x->lat[b];
            hs_buf_printf(out,
                          "hetserve_pipeline_stage_latency_seconds_bucket{pipeline=\"%s\","
                          "stage=\"%s\",le=\"%g\"} %lld\n",
                          pn, sn, hs_pipeline_lat_bounds[b], cum);
        }
        cum += x->lat[HS_PIPELINE_LAT_BUCKETS];
        hs_buf_printf(out,
                      "hetserve_pipeline_stage_latency_seconds_bucket{pipeline=\"%s\",stage=\"%s\","
                      "le=\"+Inf\"} %lld\n"
                      "hetserve_pipeline_stage_latency_seconds_sum{pipeline=\"%s\",stage=\"%s\"} "
                      "%.6f\n"
                      "hetserve_pipeline_stage_latency_seconds_count{pipeline=\"%s\",stage=\"%s\"} "
                      "%lld\n",
                      pn, sn, cum, pn, sn, x->lat_ns / 1e9, pn, sn, cum);
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_batch_size items per batch the stage formed\n"
                     "# TYPE hetserve_pipeline_stage_batch_size histogram\n");
    for (int r = 0; r < nr; r++) {
        const char *pn = rows[r].p->cfg->name, *sn = rows[r].stage;
        const struct hs_pipeline_stage_stats *x = &rows[r].x;
        long long cum = 0;
        for (int b = 1; b <= HS_PIPELINE_MAX_BATCH; b++) {
            cum += x->batch_hist[b];
            if ((b & (b - 1)) == 0) /* le 1, 2, 4, ... 64 */
                hs_buf_printf(out,
                              "hetserve_pipeline_stage_batch_size_bucket{pipeline=\"%s\","
                              "stage=\"%s\",le=\"%d\"} %lld\n",
                              pn, sn, b, cum);
        }
        hs_buf_printf(out,
                      "hetserve_pipeline_stage_batch_size_bucket{pipeline=\"%s\",stage=\"%s\","
                      "le=\"+Inf\"} %lld\n"
                      "hetserve_pipeline_stage_batch_size_sum{pipeline=\"%s\",stage=\"%s\"} %lld\n"
                      "hetserve_pipeline_stage_batch_size_count{pipeline=\"%s\",stage=\"%s\"} "
                      "%lld\n",
                      pn, sn, cum, pn, sn, (long long)x->batch_items, pn, sn, cum);
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_runs_total graph runs of a model stage "
                     "by rows (batch_fixed: only N)\n"
                     "# TYPE hetserve_pipeline_stage_graph_runs_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int r = 1; r <= HS_PIPELINE_MAX_BATCH; r++) {
            const long long a = atomic_load(&p->m.rec_runs[r]);
            const long long b = p->rec_fb_e ? atomic_load(&p->rec_fb.rec_runs[r]) : 0;
            if (a)
                hs_buf_printf(out,
                              "hetserve_pipeline_stage_graph_runs_total{pipeline=\"%s\","
                              "stage=\"rec\",engine=\"%s\",rows=\"%d\"} %lld\n",
                              p->cfg->name, hs_engine_name(p->m.rec_engine), r, a);
            if (b)
                hs_buf_printf(out,
                              "hetserve_pipeline_stage_graph_runs_total{pipeline=\"%s\","
                              "stage=\"rec\",engine=\"%s\",rows=\"%d\"} %lld\n",
                              p->cfg->name, hs_engine_name(p->rec_fb_e), r, b);
        }
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_width_runs_total rec graph runs by the "
                     "width of stages.rec.shapes they were padded to\n"
                     "# TYPE hetserve_pipeline_stage_graph_width_runs_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int w = 0; w < p->m.n_rec_widths; w++) {
            const long long a = atomic_load(&p->m.rec_width_runs[w]) +
                                (p->rec_fb_e ? atomic_load(&p->rec_fb.rec_width_runs[w]) : 0);
            hs_buf_printf(out,
                          "hetserve_pipeline_stage_graph_width_runs_total{pipeline=\"%s\","
                          "stage=\"rec\",width=\"%d\"} %lld\n",
                          p->cfg->name, p->m.rec_widths[w], a);
        }
    }
}
