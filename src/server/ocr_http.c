/* POST /v1/ocr: the config's pipelines[], each stage of stages[] an op or a model stage
 * (model/ocr.h hs_ocr_stages_create on sched/pipeline.h).
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
 * with its fallback at its cap (stages[].fallback), 504 when the deadline passes in a queue
 * or a stage's timeout_ms passes (naming the stage), 503 while shutting down. X-Engine names the
 * engines that ran the model stages. Every accepted request gets exactly one answer (the pipeline's
 * contract).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "model/ocr.h"
#include "server/server-impl.h"

/* a stage at run time: an op's parameters, or a model stage's models (its graph in the slot of
 * its graph kind, a copy of the pipeline's base sharing its dictionary): on its engine (m) or on
 * each engine of its route (routes[], m the first), and its fallback's */
struct ocr_stage_rt {
    struct hs_ocr_params params;
    const struct hs_ocr_graph_io *io;
    struct hs_ocr_models *m, *fb;
    int n_routes;
    struct hs_ocr_models *routes[HS_CONFIG_MAX_STAGE_ROUTES];
};
_Static_assert(HS_CONFIG_MAX_STAGE_ROUTES <= HS_PIPELINE_MAX_ROUTES, "a stage's routes");

/* every copy of a model stage's graph: its route's (or its one), then the fallback's */
static int stage_models(const struct ocr_stage_rt *rt, const struct hs_ocr_models **out)
{
    int n = 0;
    if (rt->n_routes)
        for (int k = 0; k < rt->n_routes; k++) out[n++] = rt->routes[k];
    else if (rt->m)
        out[n++] = rt->m;
    if (rt->fb) out[n++] = rt->fb;
    return n;
}

struct ocr_pipe {
    const struct hs_pipeline_cfg *cfg;
    struct hs_ocr_models base; /* the dictionary (of the ctc stage) and default params */
    struct hs_ctc_dict labels; /* the nms stage's class names (labels: a name a line), n 0: none */
    int n;
    struct hs_ocr_stage st[HS_CONFIG_MAX_STAGES];
    struct ocr_stage_rt rt[HS_CONFIG_MAX_STAGES];
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

static hs_status prefixed(struct hs_error *err, hs_status st, const char *fmt, int i, int j)
{
    char m[sizeof err->msg];
    snprintf(m, sizeof m, "%s", err->msg);
    return hs_error_set(err, st, fmt, i, j, m);
}

/* one model stage's graph on its engine (or each engine of its route, with that one's batch
 * shape), and on its fallback's (a copy of base each) */
static hs_status load_model_stage(struct hs_server *s, struct ocr_pipe *p, int i, int j,
                                  const struct hs_stage_cfg *sc, struct ocr_stage_rt *rt,
                                  struct hs_error *err)
{
    const struct hs_ocr_graph_io *io = rt->io;
    const int n_on = sc->n_routes ? sc->n_routes : 1;
    for (int f = 0; f < n_on + (sc->n_fallback > 0); f++) {
        const bool fb = f == n_on;
        struct hs_stage_cfg on;
        hs_config_stage_on_route(sc, sc->n_routes ? f : -1, &on);
        char what[64] = "engine";
        if (fb) snprintf(what, sizeof what, "fallback.engines[0]");
        if (!fb && sc->n_routes) snprintf(what, sizeof what, "route.engines[%d]", f);
        hs_engine_t e = fb ? hs__server_engine(s, sc->fallback[0]) : engine_or_first(s, on.engine);
        if (!e)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: pipelines[%d].stages[%d].%s: engine '%s' is not running",
                                i, j, what, fb ? sc->fallback[0] : on.engine);
        struct hs_ocr_models *m = hs_malloc(sizeof *m);
        if (!m) return hs_error_set(err, HS_STATUS_NO_MEMORY, "ocr: out of memory");
        memcpy(m, &p->base, sizeof *m);
        m->det = m->rec = m->cls = NULL;
        if (fb)
            rt->fb = m;
        else if (sc->n_routes)
            rt->routes[rt->n_routes++] = m;
        if (!fb && !f) rt->m = m;
        hs_status st = hs_ocr_models_slot_load(m, io, e, sc->model, on.batch_max, on.batch_fixed,
                                               on.shapes, on.n_shapes, err);
        if (st) {
            char m2[sizeof err->msg];
            snprintf(m2, sizeof m2, "%s", err->msg);
            return hs_error_set(err, st, "pipelines[%d].stages[%d]%s%s: %s", i, j,
                                sc->n_routes || fb ? "." : "", sc->n_routes || fb ? what : "", m2);
        }
    }
    return HS_STATUS_OK;
}

static hs_status pipe_create(struct hs_server *s, struct ocr_pipe *p, int i, struct hs_error *err)
{
    const struct hs_pipeline_cfg *pc = p->cfg;
    struct hs_ocr_models *b = &p->base;
    *b = (struct hs_ocr_models){0};
    b->params = (struct hs_ocr_params)HS_OCR_PARAMS_DEFAULT;
    b->rec_batch = b->cls_batch = 6;
    hs_status st;
    for (int j = 0; j < pc->n_stages; j++) /* the dictionary first: the recognizer's classes */
        if (pc->stages[j].dict[0] && !b->dict.n) {
            if ((st = hs_ctc_dict_load(pc->stages[j].dict, true, &b->dict, err)))
                return prefixed(err, st, "pipelines[%d].stages[%d].dict: %s", i, j);
            b->params.dict = &b->dict;
        }
    p->labels = (struct hs_ctc_dict){0};
    for (int j = 0; j < pc->n_stages; j++) /* a detector's class names, tok[1 + class] */
        if (pc->stages[j].labels[0] && !p->labels.n &&
            (st = hs_ctc_dict_load(pc->stages[j].labels, false, &p->labels, err)))
            return prefixed(err, st, "pipelines[%d].stages[%d].labels: %s", i, j);
    p->n = pc->n_stages;
    for (int j = 0; j < pc->n_stages; j++) {
        const struct hs_stage_cfg *sc = &pc->stages[j];
        struct ocr_stage_rt *rt = &p->rt[j];
        struct hs_ocr_stage *g = &p->st[j];
        *g = (struct hs_ocr_stage){.name = sc->name,
                                   .queue_max = pc->queue_max,
                                   .requests_max = sc->requests_max,
                                   .window_us = sc->window_us,
                                   .timeout_us = (int64_t)sc->timeout_ms * 1000,
                                   .ratio_max = sc->ratio_max};
        if (sc->op[0]) {
            rt->params = b->params;
            rt->params.limits = (struct hs_image_limits){pc->image_max_bytes, pc->image_max_pixels,
                                                         pc->image_max_side};
            rt->params.det_limit_side_len = sc->limit_side_len;
            rt->params.db.thresh = sc->thresh;
            rt->params.db.box_thresh = sc->box_thresh;
            rt->params.db.unclip_ratio = sc->unclip_ratio;
            rt->params.drop_score = sc->drop_score;
            rt->params.layout_w = sc->input_w;
            rt->params.layout_h = sc->input_h;
            rt->params.gfl_top_k = sc->top_k;
            rt->params.nms = (struct hs_nms_params){(float)sc->score_thresh, (float)sc->iou_thresh,
                                                    sc->candidates_max, sc->keep_max};
            g->op = hs_op_find(sc->op);
            g->params = &rt->params;
            g->workers = sc->workers ? sc->workers : pc->cpu_workers;
            if (!g->op || (st = g->op->check(&rt->params, err)))
                return g->op ? prefixed(err, st, "pipelines[%d].stages[%d]: %s", i, j)
                             : hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                            "pipelines[%d].stages[%d].op: unknown", i, j);
            continue;
        }
        /* a model stage: its graph kind as config --check found it */
        rt->io = sc->io[0] ? hs_ocr_graph_io_find(sc->io)
                           : hs_ocr_graph_io_for(j ? p->st[j - 1].op ? p->st[j - 1].op->out
                                                                     : p->st[j - 1].io->out
                                                   : HS_OP_KIND_BYTES);
        if (!rt->io)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "pipelines[%d].stages[%d]: no graph kind reads its input", i, j);
        if ((st = load_model_stage(s, p, i, j, sc, rt, err))) return st;
        g->io = rt->io;
        g->m = rt->m;
        g->fb = rt->fb;
        g->n_routes = rt->n_routes;
        for (int k = 0; k < rt->n_routes; k++) g->routes[k] = rt->routes[k];
        g->policy =
            strcmp(sc->policy, "round_robin") ? HS_PIPELINE_PREDICTED : HS_PIPELINE_ROUND_ROBIN;
        g->workers = sc->workers ? sc->workers : 1;
        for (int k = 0; k < rt->n_routes; k++)
            hs_log_info("pipeline %s: stage %s routed (%s) over %s", pc->name, sc->name, sc->policy,
                        hs_engine_name(hs_ocr_models_slot_engine(rt->routes[k], rt->io)));
        if (rt->fb)
            hs_log_info("pipeline %s: stage %s falls back to %s (ratio_max %.2f)", pc->name,
                        sc->name, hs_engine_name(hs_ocr_models_slot_engine(rt->fb, rt->io)),
                        sc->ratio_max);
    }
    if ((st = hs_ocr_stages_create(p->st, p->n, hs__ocr_done, p, &p->p, err))) return st;
    char desc[512];
    size_t o = 0;
    for (int j = 0; j < p->n && o < sizeof desc; j++) {
        o += (size_t)snprintf(desc + o, sizeof desc - o, "%s%s%s", j ? " -> " : "", p->st[j].name,
                              p->st[j].io ? " on " : "");
        const int nr = p->rt[j].n_routes ? p->rt[j].n_routes : p->st[j].io ? 1 : 0;
        for (int k = 0; k < nr && o < sizeof desc; k++) /* a routed stage: its engines */
            o += (size_t)snprintf(
                desc + o, sizeof desc - o, "%s%s", k ? " | " : "",
                hs_engine_name(hs_ocr_models_slot_engine(
                    p->rt[j].n_routes ? p->rt[j].routes[k] : p->rt[j].m, p->rt[j].io)));
    }
    hs_log_info("pipeline %s at %s: %s", pc->name, pc->endpoint, desc);
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
        struct ocr_pipe *p = &o->pl[o->n++];
        p->cfg = &c->pipelines[i];
        hs_status st = pipe_create(s, p, i, err);
        if (st) return st;
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
        for (int j = 0; j < p->n; j++) {
            const struct hs_ocr_models *ms[HS_CONFIG_MAX_STAGE_ROUTES + 1];
            const int nm = stage_models(&p->rt[j], ms);
            for (int f = 0; f < nm; f++) {
                struct hs_ocr_models *m = (struct hs_ocr_models *)ms[f];
                hs_ocr_models_slot_release(m, p->rt[j].io);
                hs_free(m);
            }
        }
        hs_ctc_dict_free(&p->base.dict);
        hs_ctc_dict_free(&p->labels);
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

/* "detections":[{box, class, label, score}...] of a detector's pipeline (labels n 0: no names) */
static void put_dets(struct hs_buf *b, const struct hs_op_data *d, const struct hs_ctc_dict *lb)
{
    hs_buf_puts(b, "\"detections\":[");
    for (int i = 0; i < d->n_dets; i++) {
        const struct hs_det *t = &d->dets[i];
        hs_buf_printf(b, "%s{\"box\":[%.3f,%.3f,%.3f,%.3f],\"class\":%d", i ? "," : "", t->box[0],
                      t->box[1], t->box[2], t->box[3], t->cls);
        if (t->cls >= 0 && t->cls + 1 < lb->n) {
            const char *name = lb->tok[t->cls + 1];
            hs_buf_puts(b, ",\"label\":");
            hs_buf_json_str(b, name, strlen(name));
        }
        hs_buf_printf(b, ",\"score\":%.6f}", t->score);
    }
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
    const char *url = hs__conn_url(k);
    int at_url = 0; /* the pipelines served at this endpoint (/v1/ocr, /v1/layout) */
    for (int i = 0; o && i < o->n; i++) at_url += !strcmp(o->pl[i].cfg->endpoint, url);
    if (!at_url) return fail(k, NULL, 404, "no pipeline is configured at %s (pipelines[])", url);
    const char *want = hs__conn_header(k, "X-Pipeline");
    struct ocr_pipe *p = NULL;
    for (int i = 0; i < o->n && !p; i++)
        if (!strcmp(o->pl[i].cfg->endpoint, url) && (!want || !strcmp(o->pl[i].cfg->name, want)))
            p = &o->pl[i];
    if (!p) return fail(k, NULL, 404, "no pipeline named '%s' at %s", want, url);
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
    hs_buf_puts(&b, "{\"pipeline\":");
    hs_buf_json_str(&b, r->pipe->cfg->name, strlen(r->pipe->cfg->name));
    hs_buf_printf(&b, ",\"width\":%d,\"height\":%d,", d->image.w, d->image.h);
    if (d->dets) /* a detector's pipeline: its detections, with the class names it has */
        put_dets(&b, d, &r->pipe->labels);
    else
        hs_buf_puts(&b, "\"lines\":[");
    for (int i = 0; i < d->n_lines && !d->dets; i++) {
        const struct hs_ocr_line *l = &d->lines[i];
        hs_buf_printf(&b, "%s{\"box\":[[%d,%d],[%d,%d],[%d,%d],[%d,%d]],\"text\":", i ? "," : "",
                      (int)l->box.p[0].x, (int)l->box.p[0].y, (int)l->box.p[1].x,
                      (int)l->box.p[1].y, (int)l->box.p[2].x, (int)l->box.p[2].y,
                      (int)l->box.p[3].x, (int)l->box.p[3].y);
        hs_buf_json_str(&b, l->text, strlen(l->text));
        hs_buf_printf(&b, ",\"score\":%.6f,\"det_score\":%.6f%s}", l->score, l->box.score,
                      l->rotated ? ",\"rotated\":true" : "");
    }
    const struct ocr_pipe *p = r->pipe;
    hs_buf_puts(&b, "],\"timings_ms\":{");
    char *timing = hs_arena_alloc(hs__conn_arena(k), 512);
    size_t tl = 0;
    for (int i = 0; i < p->n; i++) {
        const double ms = r->job.stage_ns[i] / 1e6;
        hs_buf_printf(&b, "%s\"%s\":%.3f", i ? "," : "", p->st[i].name, ms);
        if (timing && tl < 480)
            tl += (size_t)snprintf(timing + tl, 512 - tl, "%s%s;dur=%.3f", i ? ", " : "",
                                   p->st[i].name, ms);
    }
    hs_buf_printf(&b, "},\"rec_batch_images\":%d,\"engines\":{", r->job.rec_batch_images);
    /* X-Engine: the engines that ran the model stages, in order, each once */
    char *xe = hs_arena_alloc(hs__conn_arena(k), 160);
    size_t xl = 0;
    int nm = 0;
    if (xe) xe[0] = 0;
    for (int i = 0; i < p->n; i++) {
        const char *en = r->job.stage_engine[i];
        if (!p->st[i].io || !en) continue;
        hs_buf_printf(&b, "%s\"%s\":\"%s\"", nm++ ? "," : "", p->st[i].name, en);
        bool seen = false;
        for (int q = 0; q < i; q++)
            seen |= p->st[q].io && r->job.stage_engine[q] && !strcmp(r->job.stage_engine[q], en);
        if (xe && !seen && xl < 120)
            xl += (size_t)snprintf(xe + xl, 160 - xl, "%s%s", xl ? ", " : "", en);
    }
    hs_buf_puts(&b, "}}");
    if (xe && xe[0]) hs__conn_set_engine(k, xe);
    hs_op_data_free(&r->job.d);
    hs_free(r->bytes);
    hs_free(r);
    return hs__conn_reply(k, &b, timing ? "Server-Timing" : NULL, timing);
}

/* one stage's series for the metrics: its stats and where it is */
struct stage_row {
    const struct ocr_pipe *p;
    const char *stage;
    int stage_index;
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

/* a per-engine series of a stage's routes */
struct route_series {
    const char *name, *type, *help;
    double (*get)(const struct hs_pipeline_route_stats *x);
};

#define GET(nm, expr)                                                                              \
    static double nm(const struct hs_pipeline_route_stats *x)                                      \
    {                                                                                              \
        return (double)(expr);                                                                     \
    }
GET(r_items, x->items)
GET(r_batches, x->batches)
GET(r_run_s, x->run_ns / 1e9)
GET(r_queued, x->queued)
GET(r_breaker, x->breaker_open)
GET(r_batch_s, x->batch_s)
#undef GET

static const struct route_series route_series[] = {
    {"items_total", "counter", "items a model stage's batches ran on the engine", r_items},
    {"batches_total", "counter", "batches a model stage ran on the engine", r_batches},
    {"run_seconds_total", "counter", "time the engine ran the stage's batches", r_run_s},
    {"queued", "gauge", "items waiting for the engine now", r_queued},
    {"breaker_open", "gauge", "1 while the engine's last batches all failed", r_breaker},
    {"batch_predicted_seconds", "gauge",
     "a full batch's time on the engine as its cost line predicts it (0: not measured)", r_batch_s},
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
            rows[nr].stage_index = k;
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
    /* each route of a stage: the engine it runs on (a stage that is not routed: its one) */
    for (size_t f = 0; f < sizeof route_series / sizeof route_series[0]; f++) {
        hs_buf_printf(out,
                      "# HELP hetserve_pipeline_stage_engine_%s %s\n"
                      "# TYPE hetserve_pipeline_stage_engine_%s %s\n",
                      route_series[f].name, route_series[f].help, route_series[f].name,
                      route_series[f].type);
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < rows[r].x.n_routes; k++) {
                const struct ocr_pipe *p = rows[r].p;
                const int j = rows[r].stage_index;
                const char *en = hs_pipeline_route_name(p->p, j, k);
                if (!p->st[j].io) continue; /* op stages: no engine */
                hs_buf_printf(out,
                              "hetserve_pipeline_stage_engine_%s{pipeline=\"%s\",stage=\"%s\","
                              "engine=\"%s\"} %.9g\n",
                              route_series[f].name, p->cfg->name, rows[r].stage, en ? en : "",
                              route_series[f].get(&rows[r].x.route[k]));
            }
    }
    /* the model stages' graph runs: by rows (batch_fixed: only N), padding rows, by the
     * recognizer's listed width, by the detector's listed height x width */
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_runs_total graph runs of a model stage "
                     "by rows (batch_fixed: only N)\n"
                     "# TYPE hetserve_pipeline_stage_graph_runs_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int j = 0; j < p->n; j++) {
            const struct hs_ocr_models *ms[HS_CONFIG_MAX_STAGE_ROUTES + 1];
            const int nm = p->rt[j].io ? stage_models(&p->rt[j], ms) : 0;
            for (int f = 0; f < nm; f++) {
                const struct hs_ocr_models *m = ms[f];
                const char *en = hs_engine_name(hs_ocr_models_slot_engine(m, p->rt[j].io));
                if (p->rt[j].io->slot == HS_OCR_SLOT_DET && atomic_load(&m->det_runs))
                    hs_buf_printf(out,
                                  "hetserve_pipeline_stage_graph_runs_total{pipeline=\"%s\","
                                  "stage=\"%s\",engine=\"%s\",rows=\"1\"} %lld\n",
                                  p->cfg->name, p->st[j].name, en,
                                  (long long)atomic_load(&m->det_runs));
                for (int r = 1; r <= HS_PIPELINE_MAX_BATCH; r++) {
                    const long long a = atomic_load(&m->rec_runs[r]);
                    if (a)
                        hs_buf_printf(out,
                                      "hetserve_pipeline_stage_graph_runs_total{pipeline=\"%s\","
                                      "stage=\"%s\",engine=\"%s\",rows=\"%d\"} %lld\n",
                                      p->cfg->name, p->st[j].name, en, r, a);
                }
            }
        }
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_padded_rows_total blank rows graph runs "
                     "carried to reach batch_fixed (their outputs dropped)\n"
                     "# TYPE hetserve_pipeline_stage_graph_padded_rows_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int j = 0; j < p->n; j++) {
            if (!p->rt[j].io || p->rt[j].io->slot != HS_OCR_SLOT_REC) continue;
            const struct hs_ocr_models *ms[HS_CONFIG_MAX_STAGE_ROUTES + 1];
            const int nm = stage_models(&p->rt[j], ms);
            long long pad = 0;
            for (int f = 0; f < nm; f++) pad += atomic_load(&ms[f]->rec_pad_rows);
            hs_buf_printf(out,
                          "hetserve_pipeline_stage_graph_padded_rows_total{pipeline=\"%s\","
                          "stage=\"%s\"} %lld\n",
                          p->cfg->name, p->st[j].name, pad);
        }
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_width_runs_total recognizer graph runs "
                     "by the width of the stage's shapes they were padded to\n"
                     "# TYPE hetserve_pipeline_stage_graph_width_runs_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int j = 0; j < p->n; j++) {
            const struct hs_ocr_models *m = p->rt[j].m, *fb = p->rt[j].fb;
            if (!p->rt[j].io || p->rt[j].io->slot != HS_OCR_SLOT_REC) continue;
            if (p->rt[j].n_routes) { /* each engine its own widths: by engine */
                for (int k = 0; k < p->rt[j].n_routes; k++) {
                    const struct hs_ocr_models *r = p->rt[j].routes[k];
                    const char *en = hs_engine_name(hs_ocr_models_slot_engine(r, p->rt[j].io));
                    for (int w = 0; w < r->n_rec_widths; w++)
                        hs_buf_printf(out,
                                      "hetserve_pipeline_stage_graph_width_runs_total{pipeline="
                                      "\"%s\",stage=\"%s\",engine=\"%s\",width=\"%d\"} %lld\n",
                                      p->cfg->name, p->st[j].name, en, r->rec_widths[w],
                                      (long long)atomic_load(&r->rec_width_runs[w]));
                }
                continue;
            }
            for (int w = 0; w < m->n_rec_widths; w++)
                hs_buf_printf(out,
                              "hetserve_pipeline_stage_graph_width_runs_total{pipeline=\"%s\","
                              "stage=\"%s\",width=\"%d\"} %lld\n",
                              p->cfg->name, p->st[j].name, m->rec_widths[w],
                              (long long)(atomic_load(&m->rec_width_runs[w]) +
                                          (fb ? atomic_load(&fb->rec_width_runs[w]) : 0)));
        }
    }
    hs_buf_puts(out, "# HELP hetserve_pipeline_stage_graph_shape_runs_total detector graph runs "
                     "by the height x width of the stage's shapes they were padded to\n"
                     "# TYPE hetserve_pipeline_stage_graph_shape_runs_total counter\n");
    for (int i = 0; i < o->n; i++) {
        const struct ocr_pipe *p = &o->pl[i];
        for (int j = 0; j < p->n; j++) {
            const struct hs_ocr_models *m = p->rt[j].m, *fb = p->rt[j].fb;
            if (!p->rt[j].io || p->rt[j].io->slot != HS_OCR_SLOT_DET) continue;
            for (int k = 0; k < p->rt[j].n_routes; k++) { /* each engine its own sides */
                const struct hs_ocr_models *r = p->rt[j].routes[k];
                const char *en = hs_engine_name(hs_ocr_models_slot_engine(r, p->rt[j].io));
                for (int h = 0; h < r->n_det_sides; h++)
                    for (int w = 0; w < r->n_det_sides; w++) {
                        const long long a = atomic_load(&r->det_side_runs[h][w]);
                        if (a)
                            hs_buf_printf(out,
                                          "hetserve_pipeline_stage_graph_shape_runs_total{pipeline="
                                          "\"%s\",stage=\"%s\",engine=\"%s\",height=\"%d\","
                                          "width=\"%d\"} %lld\n",
                                          p->cfg->name, p->st[j].name, en, r->det_sides[h],
                                          r->det_sides[w], a);
                    }
            }
            for (int h = 0; !p->rt[j].n_routes && h < m->n_det_sides; h++)
                for (int w = 0; w < m->n_det_sides; w++) {
                    const long long a = atomic_load(&m->det_side_runs[h][w]) +
                                        (fb ? atomic_load(&fb->det_side_runs[h][w]) : 0);
                    if (a)
                        hs_buf_printf(out,
                                      "hetserve_pipeline_stage_graph_shape_runs_total{pipeline="
                                      "\"%s\",stage=\"%s\",height=\"%d\",width=\"%d\"} "
                                      "%lld\n",
                                      p->cfg->name, p->st[j].name, m->det_sides[h], m->det_sides[w],
                                      a);
                }
        }
    }
}
