/* pipelines[]: the OCR shorthand expanded into stages[] at parse, and the checks of a pipeline's
 * stages (config --check): names unique, each an op of the op table (ops/ops.h) or a model stage
 * of a graph kind (model/ocr.h), only the keys its kind takes, what each stage gives what the next
 * reads (the endpoint's input first, its answer last), its engines there and able to run ONNX
 * graphs, batch and shapes that the graph kind and a static engine can take. A stage list is
 * linear, so it cannot cycle; the references between stages (an op that reads what some stage
 * before gave, the recognizer's classes from the ctc stage's dictionary) are checked here. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/engine.h"
#include "model/ocr.h"
#include "ops/ops.h"
#include "server/config.h"

#define BAD(...) hs_error_set(err, HS_STATUS_INVALID_INPUT, "config: " __VA_ARGS__)

/* An endpoint a pipeline may be served at: what it hands the first stage, what the last gives. */
static const struct endpoint {
    const char *path;
    enum hs_op_kind in, out;
} endpoints[] = {
    {"/v1/ocr", HS_OP_KIND_BYTES, HS_OP_KIND_TEXT},
    {"/v1/layout", HS_OP_KIND_BYTES, HS_OP_KIND_DETS},
};

static const struct endpoint *endpoint_find(const char *path)
{
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++)
        if (!strcmp(endpoints[i].path, path)) return &endpoints[i];
    return NULL;
}

/* ---- the shorthand ---- */

static struct hs_stage_cfg *add(struct hs_pipeline_cfg *p, const char *name, const char *op,
                                const char *model, const char *engine)
{
    struct hs_stage_cfg *s = &p->stages[p->n_stages++];
    hs_config_item_init("pipelines[].stages[]", s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->op, sizeof s->op, "%s", op);
    snprintf(s->model, sizeof s->model, "%s", model);
    snprintf(s->engine, sizeof s->engine, "%s", engine);
    return s;
}

hs_status hs__config_pipelines_expand(struct hs_config *c, const char *label, struct hs_error *err)
{
    for (int i = 0; i < c->n_pipelines; i++) {
        struct hs_pipeline_cfg *p = &c->pipelines[i];
        if (!p->kind[0] && !p->det[0] && !p->rec[0] && !p->dict[0] && !p->cls[0]) continue;
        if (p->n_stages)
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "%s: pipelines[%d].stages: give stages or the ocr shorthand (det, "
                                "rec, dict), not both",
                                label, i);
        const char *need[3][2] = {{"det", p->det}, {"rec", p->rec}, {"dict", p->dict}};
        for (int k = 0; k < 3; k++)
            if (!need[k][1][0])
                return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                    "%s: pipelines[%d].%s is required (the ocr shorthand: det, "
                                    "rec and dict, or stages)",
                                    label, i, need[k][0]);
        const char *rec_e = p->rec_engine[0] ? p->rec_engine : p->det_engine;
        add(p, "decode", "image_decode", "", "");
        add(p, "det_prep", "det_prep", "", "")->limit_side_len = p->det_limit_side_len;
        add(p, "det", "", p->det, p->det_engine);
        add(p, "db_post", "db_post", "", "")->box_thresh = p->box_thresh;
        add(p, "crop", "crop", "", "");
        if (p->cls[0]) /* crops -> crops: said, else crops are read by a recognizer */
            snprintf(add(p, "cls", "", p->cls, p->cls_engine[0] ? p->cls_engine : rec_e)->io,
                     sizeof p->stages[0].io, "classify");
        struct hs_stage_cfg *r = add(p, "rec", "", p->rec, rec_e);
        r->requests_max = p->rec_images;
        r->window_us = p->rec_window_us;
        struct hs_stage_cfg *ctc = add(p, "ctc", "ctc_decode", "", "");
        snprintf(ctc->dict, sizeof ctc->dict, "%s", p->dict);
        ctc->drop_score = p->drop_score;
        /* the shorthand's keys back to their defaults: the stages say it all now */
        struct hs_pipeline_cfg *d = hs_malloc(sizeof *d);
        if (!d) return hs_error_set(err, HS_STATUS_NO_MEMORY, "config: out of memory");
        hs_config_item_init("pipelines[]", d);
        memcpy(p->kind, d->kind, sizeof p->kind);
        memcpy(p->det, d->det, sizeof p->det);
        memcpy(p->rec, d->rec, sizeof p->rec);
        memcpy(p->cls, d->cls, sizeof p->cls);
        memcpy(p->dict, d->dict, sizeof p->dict);
        memcpy(p->det_engine, d->det_engine, sizeof p->det_engine);
        memcpy(p->rec_engine, d->rec_engine, sizeof p->rec_engine);
        memcpy(p->cls_engine, d->cls_engine, sizeof p->cls_engine);
        p->rec_images = d->rec_images;
        p->rec_window_us = d->rec_window_us;
        p->det_limit_side_len = d->det_limit_side_len;
        p->box_thresh = d->box_thresh;
        p->drop_score = d->drop_score;
        hs_free(d);
    }
    return HS_STATUS_OK;
}

/* ---- the checks ---- */

static bool is_dict_op(const struct hs_op *o)
{
    return strstr(o->params, "dict") != NULL;
}

/* Can engine e run ONNX graphs? Known false only where its device is present here and says so
 * (a remote engine's workers are asked when they connect). caps: the device's, when read. */
static bool runs_graphs(const struct hs_engine_cfg *e, struct hs_engine_caps *caps)
{
    const struct hs_engine_kind *kd = hs_engine_kind_find(e->kind);
    struct hs_error ignored = {0};
    *caps = (struct hs_engine_caps){0};
    if (!kd) return true; /* an unknown kind is refused with the engines */
    if (kd->remote) return false;
    if (e->device >= hs_engine_kind_devices(kd) ||
        hs_engine_device_caps(kd, e->device, e->device_name, caps, &ignored)) {
        *caps = (struct hs_engine_caps){0};
        return true;
    }
    return (caps->features & HS_ENGINE_FEAT_GRAPH_ONNX) != 0;
}

static int engine_index(const struct hs_config *c, const struct hs_engine_cfg *e)
{
    return (int)(e - c->engines);
}

/* a model stage's graph on one engine: the engine, batch and shapes (s: the stage with the
 * route's own batch shape in it); at: the key path of them */
static hs_status check_on_engine(const struct hs_config *c, const struct hs_stage_cfg *s,
                                 const struct hs_ocr_graph_io *io, int limit_side_len,
                                 const char *at, struct hs_error *err)
{
    const struct hs_engine_cfg *e = s->engine[0] ? hs_config_engine(c, s->engine) : c->engines;
    if (!e) return BAD("%s.engine: no engine named '%s'", at, s->engine);
    struct hs_engine_caps caps;
    if (!runs_graphs(e, &caps))
        return BAD("%s.engine: engine '%s' (kind %s) cannot run ONNX graphs (it lacks the "
                   "graph_onnx capability)",
                   at, e->name, e->kind);
    const int rows = s->batch_max ? s->batch_max : io->rows_default;
    if (rows > io->rows_max)
        return BAD("%s.batch_max: %d: a %s graph runs at most %d row(s) at once", at, rows,
                   io->name, io->rows_max);
    if (s->batch_fixed > rows)
        return BAD("%s.batch_fixed: %d is over the stage's batch_max, %d", at, s->batch_fixed,
                   rows);
    const int most = s->batch_fixed ? s->batch_fixed : rows;
    if (caps.batch_max > 0 && most > caps.batch_max)
        return BAD("%s.%s: %d rows; engine '%s' runs batches of at most %d", at,
                   s->batch_fixed ? "batch_fixed" : "batch_max", most, e->name, caps.batch_max);
    if (s->n_shapes && !io->shape_step)
        return BAD("%s.shapes: a %s graph takes no shapes", at, io->name);
    int largest = 0;
    for (int k = 0; k < s->n_shapes; k++) {
        if (s->shapes[k] % io->shape_step)
            return BAD("%s.shapes[%d]: %d is not a multiple of %d (a %s graph's stride)", at, k,
                       s->shapes[k], io->shape_step, io->name);
        if (s->shapes[k] > largest) largest = s->shapes[k];
    }
    /* a detector input's sides are multiples of 32 up to limit_side_len rounded */
    const int side_max = (limit_side_len + 31) / 32 * 32;
    if (s->n_shapes && io->shape_step == 32 && largest < side_max)
        return BAD("%s.shapes: the largest, %d, holds no detector input of up to %d (the "
                   "det_prep stage's limit_side_len)",
                   at, largest, side_max);
    if (e->n_shapes) { /* a static engine: only its whitelist's batches, only listed shapes */
        int ok = 0;
        for (int k = 0; k < e->n_shapes; k++) ok |= e->shapes[k].batch == s->batch_fixed;
        if (!s->batch_fixed || !ok)
            return BAD("%s.batch_fixed: engine '%s' takes only the batches of its whitelist "
                       "(engines[%d].whitelist): give batch_fixed, one of them",
                       at, e->name, engine_index(c, e));
        if (io->shape_step && !s->n_shapes)
            return BAD("%s.shapes: engine '%s' has static shapes (engines[%d].whitelist): give "
                       "the stage's shapes",
                       at, e->name, engine_index(c, e));
    }
    return HS_STATUS_OK;
}

void hs_config_stage_on_route(const struct hs_stage_cfg *s, int k, struct hs_stage_cfg *out)
{
    *out = *s;
    if (k < 0 || k >= s->n_routes) return;
    const struct hs_stage_route_cfg *r = &s->routes[k];
    memcpy(out->engine, r->engine, sizeof out->engine);
    if (r->batch_max) out->batch_max = r->batch_max;
    if (r->batch_fixed) out->batch_fixed = r->batch_fixed;
    if (r->n_shapes) {
        out->n_shapes = r->n_shapes;
        memcpy(out->shapes, r->shapes, sizeof out->shapes);
    }
}

/* a model stage's graph kind, engine (or route's engines), batch and shapes, and its fallback;
 * at: its key path */
static hs_status check_model(const struct hs_config *c, const struct hs_stage_cfg *s,
                             const struct hs_ocr_graph_io *io, int limit_side_len, const char *at,
                             struct hs_error *err)
{
    if (!s->n_routes) {
        hs_status st = check_on_engine(c, s, io, limit_side_len, at, err);
        if (st) return st;
    } else if (s->engine[0]) {
        return BAD("%s.route: stage '%s' names engine '%s' too: give engine, or route.engines", at,
                   s->name, s->engine);
    }
    for (int k = 0; k < s->n_routes; k++) {
        char rat[128];
        snprintf(rat, sizeof rat, "%s.route.engines[%d]", at, k);
        for (int q = 0; q < k; q++)
            if (!strcmp(s->routes[q].engine, s->routes[k].engine))
                return BAD("%s.engine: '%s' is route.engines[%d] too", rat, s->routes[k].engine, q);
        struct hs_stage_cfg on;
        hs_config_stage_on_route(s, k, &on);
        hs_status st = check_on_engine(c, &on, io, limit_side_len, rat, err);
        if (st) return st;
    }
    struct hs_engine_caps caps;
    for (int f = 0; f < s->n_fallback; f++) {
        const struct hs_engine_cfg *fe = hs_config_engine(c, s->fallback[f]);
        if (!fe) return BAD("%s.fallback.engines[%d]: no engine named '%s'", at, f, s->fallback[f]);
        if (!runs_graphs(fe, &caps))
            return BAD("%s.fallback.engines[%d]: engine '%s' (kind %s) cannot run ONNX graphs "
                       "(it lacks the graph_onnx capability)",
                       at, f, fe->name, fe->kind);
    }
    return HS_STATUS_OK;
}

static hs_status check_pipeline(const struct hs_config *c, int i, struct hs_error *err)
{
    const struct hs_pipeline_cfg *p = &c->pipelines[i];
    const struct endpoint *ep = endpoint_find(p->endpoint);
    if (!ep) return BAD("pipelines[%d].endpoint: '%s' is no pipeline endpoint", i, p->endpoint);
    if (!p->n_stages)
        return BAD("pipelines[%d].stages: no stages (give stages, or the ocr shorthand det, rec "
                   "and dict)",
                   i);
    enum hs_op_kind prev = ep->in;
    unsigned have = 1u << ep->in;
    const char *prev_name = NULL;
    int limit_side_len = 0;
    for (int j = 0; j < p->n_stages; j++) {
        const struct hs_stage_cfg *s = &p->stages[j];
        char at[96];
        snprintf(at, sizeof at, "pipelines[%d].stages[%d]", i, j);
        for (int k = 0; k < j; k++)
            if (!strcmp(s->name, p->stages[k].name))
                return BAD("%s.name: '%s' is the name of stages[%d] too", at, s->name, k);
        if (s->op[0] && s->model[0])
            return BAD("%s.model: stage '%s' is op %s: a stage is an op or a model, not both", at,
                       s->name, s->op);
        enum hs_op_kind in, out, also = HS_OP_KIND_NONE;
        const char *what;
        if (s->op[0]) {
            const struct hs_op *o = hs_op_find(s->op);
            if (!o) {
                char known[256];
                hs_op_names(known, sizeof known);
                return BAD("%s.op: unknown op '%s' (known: %s)", at, s->op, known);
            }
            const char *k = hs__config_stage_given(s, 1, "");
            if (k)
                return BAD("%s.%s: stage '%s' is op %s: %s is a model stage's key", at, k, s->name,
                           s->op, k);
            if ((k = hs__config_stage_given(s, 0, o->params)))
                return BAD("%s.%s: op %s takes no %s (it takes: %s)", at, k, o->name, k,
                           o->params[0] ? o->params : "no parameters");
            if (is_dict_op(o) && !s->dict[0])
                return BAD("%s.dict: op %s needs the recognizer's dictionary", at, o->name);
            if (!strcmp(o->name, "det_prep")) limit_side_len = s->limit_side_len;
            in = o->in;
            out = o->out;
            also = o->also;
            what = o->name;
        } else if (s->model[0]) {
            const struct hs_ocr_graph_io *io =
                s->io[0] ? hs_ocr_graph_io_find(s->io) : hs_ocr_graph_io_for(prev);
            if (!io && s->io[0]) {
                char known[128] = "";
                for (int k = 0; k < hs_ocr_graph_io_count(); k++)
                    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                             k ? ", " : "", hs_ocr_graph_io_at(k)->name);
                return BAD("%s.io: unknown graph kind '%s' (known: %s)", at, s->io, known);
            }
            if (!io)
                return BAD("%s: no model stage reads %s (what %s%s%s gives)", at,
                           hs_op_kind_str(prev), prev_name ? "stage '" : "the endpoint",
                           prev_name ? prev_name : "", prev_name ? "'" : "");
            const char *k = hs__config_stage_given(s, 0, "");
            if (k)
                return BAD("%s.%s: stage '%s' is a model stage: %s is an op's", at, k, s->name, k);
            hs_status st = check_model(c, s, io, limit_side_len ? limit_side_len : 960, at, err);
            if (st) return st;
            in = io->in;
            out = io->out;
            what = io->name;
        } else {
            char known[256];
            hs_op_names(known, sizeof known);
            return BAD("%s: stage '%s' needs op (one of %s) or model (an ONNX graph)", at, s->name,
                       known);
        }
        if (in != prev)
            return BAD("%s: stage '%s' (%s) reads %s, but %s%s%s gives %s", at, s->name, what,
                       hs_op_kind_str(in), prev_name ? "stage '" : "the endpoint ",
                       prev_name ? prev_name : p->endpoint, prev_name ? "'" : "",
                       hs_op_kind_str(prev));
        if (also != HS_OP_KIND_NONE && !(have & 1u << also))
            return BAD("%s: stage '%s' (%s) reads %s too, which no stage before it gives", at,
                       s->name, what, hs_op_kind_str(also));
        have |= 1u << out;
        prev = out;
        prev_name = s->name;
    }
    if (prev != ep->out)
        return BAD("pipelines[%d].stages: the last stage, '%s', gives %s; %s answers %s", i,
                   prev_name, hs_op_kind_str(prev), p->endpoint, hs_op_kind_str(ep->out));
    return HS_STATUS_OK;
}

hs_status hs__config_pipelines_check(const struct hs_config *c, struct hs_error *err)
{
    for (int i = 0; i < c->n_pipelines; i++) {
        for (int k = 0; k < i; k++)
            if (!strcmp(c->pipelines[i].name, c->pipelines[k].name))
                return BAD("pipelines[%d].name: '%s' used twice", i, c->pipelines[i].name);
        hs_status st = check_pipeline(c, i, err);
        if (st) return st;
    }
    return HS_STATUS_OK;
}
