/* POST /predict: text classification (TEI schema) through a head on a served encoder, with an
 * optional small -> big cascade (sched/cascade.h).
 *
 *   request:  {"inputs": "text" | ["text", ...], "truncate": false}
 *   response: one input as a string  -> [{"label": "...", "score": p}, ...]
 *             an array of inputs     -> [[{"label": ..., "score": ...}, ...], ...]
 *             labels sorted by score, highest first; header X-Cascade names who answered each
 *             input, comma-separated in input order: small | big | capped.
 *
 * A request runs as up to two jobs of the dispatch (sched/dispatch.h), like /embed's, with the
 * same deadline, priority, retry, shadow and breaker reporting (task "predict"): first every
 * input on the small model; its head's class probabilities go to the router's cascade judge
 * (hs_dispatch_judge), which is this file's judge(): the one cascade policy, sched/cascade.h,
 * configured by the cascade section. The inputs it escalates then run as the second job, on the
 * big model (hs_dispatch_escalate): on the big route of the cascade route the small stage came
 * through, or, without a cascade route, wherever the router places the big model. X-Route names
 * the route that answered, with ";cascade=small|big|capped" (big when any input escalated, else
 * capped when any was kept small by the cap); X-Route-Reason has both decisions.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "model/head.h"
#include "sched/cascade.h"
#include "server/server-impl.h"

struct hs_predict {
    struct hs_served_model *small, *big; /* big NULL: no cascade */
    struct hs_head *small_head, *big_head;
    struct hs_cascade cascade;
};

/* Per-request state, in the connection's arena. */
struct pstate {
    int phase;   /* 1: small model submitted, 2: big model submitted */
    bool single; /* "inputs" was one string */
    bool truncate;
    size_t n;
    json_t *texts;                      /* the inputs (a reference kept until the response) */
    struct hs_job *j1, *j2;             /* the small stage, the big one */
    float *p_small, *p_big;             /* [n, classes] */
    enum hs_cascade_decision *decision; /* [n] */
    enum hs_priority prio;
    int64_t deadline_ns;
};

static struct hs_served_model *served(struct hs_server *s, const char *name)
{
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    return NULL;
}

/* The router's cascade judge (hs_router_set_cascade_fn): rows are the small head's class
 * probabilities; the top one is the confidence the cascade policy decides on. */
static void judge(void *ctx, const struct hs_route *cascade, const float *rows, int n, int dim,
                  enum hs_cascade_decision *out)
{
    (void)cascade;
    struct hs_predict *p = ctx;
    for (int i = 0; i < n; i++) {
        const float *pr = rows + (size_t)i * (size_t)dim;
        float top = pr[0];
        for (int c = 1; c < dim; c++)
            if (pr[c] > top) top = pr[c];
        out[i] = hs_cascade_decide(&p->cascade, top);
    }
}

/* Every route of kind cascade must carry this cascade's models: the small route the small
 * model, the big route the big one (the router places; the requests are tokenized for these). */
static hs_status check_cascade_routes(struct hs_server *s, struct hs_predict *p,
                                      struct hs_error *err)
{
    const struct hs_router_opts *o = hs_router_opts(s->router);
    for (int i = 0; i < o->n_routes; i++) {
        const struct hs_route *r = &o->routes[i];
        if (r->kind != HS_ROUTE_KIND_CASCADE) continue;
        const char *small = s->lanes[o->routes[r->cascade_small].lanes[0]].sm->name;
        const char *big = s->lanes[o->routes[r->cascade_big].lanes[0]].sm->name;
        if (!p->big || strcmp(small, p->small->name) || strcmp(big, p->big->name))
            return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                "config: cascade route '%s' runs %s then %s; the cascade section "
                                "names %s then %s",
                                r->name, small, big, p->small->name,
                                p->big ? p->big->name : "(no big model)");
    }
    return HS_STATUS_OK;
}

static hs_status load_head(struct hs_served_model *sm, const char *path, struct hs_head **out,
                           struct hs_error *err)
{
    hs_status st = hs_head_load(path, out, err);
    if (st) return st;
    if ((*out)->dim != sm->model->config.dims.hidden)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT,
                            "cascade: head %s is for %d-dimensional embeddings; model %s has %d",
                            path, (*out)->dim, sm->name, sm->model->config.dims.hidden);
    if ((*out)->model[0] && strcmp((*out)->model, sm->model->name) &&
        strcmp((*out)->model, sm->name))
        hs_log_warn("cascade: head %s was trained on %s, serving it on %s", path, (*out)->model,
                    sm->name);
    return HS_STATUS_OK;
}

hs_status hs__predict_create(struct hs_server *s, struct hs_predict **out, struct hs_error *err)
{
    *out = NULL;
    const struct hs_config *c = &s->cfg;
    if (!c->cascade.small[0]) return HS_STATUS_OK;
    struct hs_predict *p = hs_calloc(1, sizeof *p);
    if (!p) return hs_error_set(err, HS_STATUS_NO_MEMORY, "cascade: out of memory");
    hs_status st = hs_cascade_init(
        &p->cascade,
        &(struct hs_cascade_opts){c->cascade.threshold, c->cascade.escalation_max_ratio}, err);
    if (st) {
        hs_free(p);
        return st;
    }
    p->small = served(s, c->cascade.small);
    if (!p->small) {
        st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                          "config: cascade.small names model '%s', which is not served",
                          c->cascade.small);
        goto fail;
    }
    if ((st = load_head(p->small, c->cascade.small_head, &p->small_head, err))) goto fail;
    if (c->cascade.big[0]) {
        p->big = served(s, c->cascade.big);
        if (!p->big) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "config: cascade.big names model '%s', which is not served",
                              c->cascade.big);
            goto fail;
        }
        if ((st = load_head(p->big, c->cascade.big_head, &p->big_head, err))) goto fail;
        if (p->big_head->n_classes != p->small_head->n_classes) {
            st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                              "cascade: the heads have %d and %d labels", p->small_head->n_classes,
                              p->big_head->n_classes);
            goto fail;
        }
        for (int i = 0; i < p->small_head->n_classes; i++)
            if (strcmp(p->small_head->labels[i], p->big_head->labels[i])) {
                st = hs_error_set(err, HS_STATUS_INVALID_INPUT,
                                  "cascade: label %d is '%s' in the small head, '%s' in the big", i,
                                  p->small_head->labels[i], p->big_head->labels[i]);
                goto fail;
            }
    }
    if ((st = check_cascade_routes(s, p, err))) goto fail;
    hs_router_set_cascade_fn(s->router, judge, p);
    hs_log_info("predict: %s%s%s, threshold %g, escalation_max_ratio %g", p->small->name,
                p->big ? " -> " : "", p->big ? p->big->name : "", c->cascade.threshold,
                c->cascade.escalation_max_ratio);
    *out = p;
    return HS_STATUS_OK;
fail:
    hs__predict_free(p);
    return st;
}

void hs__predict_free(struct hs_predict *p)
{
    if (!p) return;
    hs_head_free(p->small_head);
    hs_head_free(p->big_head);
    hs_cascade_destroy(&p->cascade);
    hs_free(p);
}

const struct hs_head *hs__predict_head(const struct hs_server *s, const struct hs_served_model *sm)
{
    const struct hs_predict *p = s->predict;
    if (!p) return NULL;
    return sm == p->small ? p->small_head : sm == p->big ? p->big_head : NULL;
}

void hs__predict_metrics(struct hs_server *s, struct hs_buf *out)
{
    struct hs_predict *p = s->predict;
    if (!p) return;
    struct hs_cascade_stats st;
    hs_cascade_stats(&p->cascade, &st);
    hs_buf_puts(out, "# HELP hetserve_cascade_decisions_total Inputs classified by /predict.\n"
                     "# TYPE hetserve_cascade_decisions_total counter\n");
    hs_buf_printf(out, "hetserve_cascade_decisions_total %lld\n", (long long)st.decisions);
    hs_buf_puts(out, "# HELP hetserve_cascade_escalated_total Inputs sent on to the big model.\n"
                     "# TYPE hetserve_cascade_escalated_total counter\n");
    hs_buf_printf(out, "hetserve_cascade_escalated_total %lld\n", (long long)st.escalated);
    hs_buf_puts(out, "# HELP hetserve_cascade_capped_total Low-confidence inputs kept on the "
                     "small model by the escalation cap.\n"
                     "# TYPE hetserve_cascade_capped_total counter\n");
    hs_buf_printf(out, "hetserve_cascade_capped_total %lld\n", (long long)st.capped);
    hs_buf_puts(out, "# HELP hetserve_cascade_escalation_ratio Escalated / decided since start.\n"
                     "# TYPE hetserve_cascade_escalation_ratio gauge\n");
    hs_buf_printf(out, "hetserve_cascade_escalation_ratio %.6f\n",
                  st.decisions ? (double)st.escalated / (double)st.decisions : 0.0);
}

/* ---------------------------------------------------------------------------------------------
 * one request
 */

/* Tokenizes the inputs of texts listed in idx (all n when idx is NULL) for sm into *out, n new
 * sequences. 0 or an HTTP status with msg. */
static int tokenize_texts(struct hs_server *s, struct hs_arena *a, struct hs_served_model *sm,
                          json_t *texts, const size_t *idx, size_t n, bool truncate,
                          struct hs_seq **out, char *msg, size_t cap)
{
    struct hs_seq *seqs = hs_arena_calloc(a, n, sizeof *seqs);
    if (!seqs) {
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    for (size_t i = 0; i < n; i++) {
        size_t j = idx ? idx[i] : i;
        int status =
            hs__text_input(s, a, sm, json_array_get(texts, j), j, truncate, &seqs[i], msg, cap);
        if (status) return status;
    }
    *out = seqs;
    return 0;
}

int hs__predict_decode(struct hs_server *s, struct hs_served_model *sm, struct hs_arena *a,
                       const char *body, size_t len, const char *x_priority,
                       const char *x_timeout_ms, int64_t *ts, struct hs__predict_req *out,
                       char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    int status = hs__body_parse(body, len, ts, &root, msg, cap);
    if (status) return status;
    json_t *in = json_object_get(root, "inputs");
    if (json_is_string(in)) {
        out->single = true;
        out->texts = json_pack("[O]", in);
        if (!out->texts) {
            status = 500;
            snprintf(msg, cap, "out of memory");
            goto out;
        }
    } else if (json_is_array(in) && json_array_size(in) > 0) {
        out->texts = json_incref(in);
    } else {
        status = 400;
        snprintf(msg, cap, "%s",
                 in ? "'inputs' must be a string or a non-empty array of strings"
                    : "missing field 'inputs'");
        goto out;
    }
    size_t n = json_array_size(out->texts);
    if (n > (size_t)s->cfg.limits.items_max) {
        status = 413;
        snprintf(msg, cap, "%zu inputs; the limit is %d per request", n, s->cfg.limits.items_max);
        goto out;
    }
    json_t *jt = json_object_get(root, "truncate");
    if (jt && !json_is_boolean(jt) && !json_is_null(jt)) {
        status = 400;
        snprintf(msg, cap, "'truncate' must be a boolean");
        goto out;
    }
    out->truncate = jt && json_is_true(jt);
    status =
        hs__request_qos(s, root, x_priority, x_timeout_ms, &out->prio, &out->timeout_ms, msg, cap);
    if (status) goto out;
    status = tokenize_texts(s, a, sm, out->texts, NULL, n, out->truncate, &out->seqs, msg, cap);
    if (status) goto out;
    out->n = n;
out:
    json_decref(root);
    if (status) {
        json_decref(out->texts);
        out->texts = NULL;
    }
    return status;
}

static enum MHD_Result respond(struct conn *k, struct pstate *ps);
static enum MHD_Result after_small(struct conn *k, struct pstate *ps);

enum MHD_Result hs__predict_begin(struct conn *k)
{
    struct hs_server *s = hs__conn_server(k);
    struct hs_predict *p = s->predict;
    if (!p)
        return hs__conn_error(k, 404, 0,
                              "/predict is not configured: the config needs a cascade section "
                              "naming a model and its classification head");
    char msg[512];
    struct hs__predict_req in;
    size_t len = 0;
    const char *body = hs__conn_body(k, &len);
    int status = hs__predict_decode(
        s, p->small, hs__conn_arena(k), body, len, hs__conn_header(k, "X-Priority"),
        hs__conn_header(k, "X-Timeout-Ms"), hs__conn_ts(k), &in, msg, sizeof msg);
    if (status) return hs__conn_error(k, status, 0, msg);
    enum MHD_Result ret = MHD_YES;
    struct pstate *ps = hs_arena_calloc(hs__conn_arena(k), 1, sizeof *ps);
    if (!ps) {
        json_decref(in.texts);
        return hs__conn_error(k, 500, 0, "out of memory");
    }
    *hs__conn_predict(k) = ps;
    ps->single = in.single;
    ps->truncate = in.truncate;
    ps->prio = in.prio;
    ps->n = in.n;
    ps->texts = in.texts;
    ps->deadline_ns = hs__conn_ts(k)[HS_TS_RECEIVED] + (int64_t)in.timeout_ms * 1000000;
    const int classes = p->small_head->n_classes;
    ps->p_small = hs_arena_alloc(hs__conn_arena(k), sizeof(float) * ps->n * (size_t)classes);
    ps->p_big = hs_arena_alloc(hs__conn_arena(k), sizeof(float) * ps->n * (size_t)classes);
    ps->decision = hs_arena_calloc(hs__conn_arena(k), ps->n, sizeof *ps->decision);
    hs__conn_ts(k)[HS_TS_TOKENIZED] = hs_now_ns();
    ps->j1 = hs__conn_job(k, "predict", p->small->name, in.seqs, in.n, ps->prio, ps->deadline_ns);
    if (!ps->p_small || !ps->p_big || !ps->decision || !ps->j1) {
        ret = hs__conn_error(k, 500, 0, "out of memory");
        goto out;
    }
    ps->phase = 1;
    bool answered = false;
    hs_status st = hs__conn_dispatch(k, ps->j1, NULL, &answered);
    if (st != HS_STATUS_OK) {
        ret = hs__conn_error(k, hs__http_status(st), ps->j1->retry_after_s, ps->j1->msg);
        goto out;
    }
    return answered ? hs__predict_resume(k) : MHD_YES;
out:
    json_decref(ps->texts);
    ps->texts = NULL;
    return ret;
}

enum MHD_Result hs__predict_resume(struct conn *k)
{
    struct pstate *ps = *hs__conn_predict(k);
    return ps->phase == 1 ? after_small(k, ps) : respond(k, ps);
}

/* Answers with an error once the first request was submitted (the texts are no longer needed). */
static enum MHD_Result error_out(struct conn *k, struct pstate *ps, int status,
                                 double retry_after_s, const char *msg)
{
    json_decref(ps->texts);
    ps->texts = NULL;
    return hs__conn_error(k, status, retry_after_s, msg);
}

/* A job failed or was refused: answer with its status. */
static enum MHD_Result fail(struct conn *k, struct pstate *ps, const struct hs_job *j,
                            const char *who)
{
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s", who, j->msg[0] ? j->msg : hs_status_str(j->status));
    return error_out(k, ps, hs__http_status(j->status), j->retry_after_s, msg);
}

/* The X-Route suffix: big when any input escalated, else capped when any was capped. */
static const char *route_note(const struct pstate *ps)
{
    bool big = false, capped = false;
    for (size_t i = 0; i < ps->n; i++) {
        big |= ps->decision[i] == HS_CASCADE_BIG;
        capped |= ps->decision[i] == HS_CASCADE_CAPPED;
    }
    return big ? "cascade=big" : capped ? "cascade=capped" : "cascade=small";
}

static enum MHD_Result after_small(struct conn *k, struct pstate *ps)
{
    struct hs_server *s = hs__conn_server(k);
    struct hs_predict *p = s->predict;
    const struct hs_job *j = ps->j1;
    if (j->status != HS_STATUS_OK) return fail(k, ps, j, p->small->name);
    const int dim = j->dim, classes = p->small_head->n_classes;
    for (size_t i = 0; i < ps->n; i++)
        hs_head_apply(p->small_head, j->out + i * (size_t)dim, ps->p_small + i * (size_t)classes);
    size_t *esc = hs_arena_alloc(hs__conn_arena(k), sizeof(size_t) * ps->n);
    if (!esc) return error_out(k, ps, 500, 0, "out of memory");
    size_t n_esc = 0;
    /* (without a big model every input keeps the small answer, and nothing is counted) */
    if (p->big && hs_dispatch_judge(s->dispatch, j, ps->p_small, (int)ps->n, classes,
                                    ps->decision) != HS_STATUS_OK)
        return error_out(k, ps, 500, 0, "cascade: no judge registered with the router");
    for (size_t i = 0; i < ps->n; i++)
        if (ps->decision[i] == HS_CASCADE_BIG) esc[n_esc++] = i;
    hs__conn_route_note(k, p->big ? route_note(ps) : NULL);
    if (n_esc == 0) return respond(k, ps);

    char msg[512];
    struct hs_seq *seqs = NULL;
    int status = tokenize_texts(s, hs__conn_arena(k), p->big, ps->texts, esc, n_esc, ps->truncate,
                                &seqs, msg, sizeof msg);
    if (status) return error_out(k, ps, status, 0, msg);
    ps->j2 = hs__conn_job(k, "predict", p->big->name, seqs, n_esc, ps->prio, ps->deadline_ns);
    if (!ps->j2) return error_out(k, ps, 500, 0, "out of memory");
    ps->phase = 2;
    bool answered = false;
    if (hs__conn_dispatch(k, ps->j2, ps->j1, &answered) != HS_STATUS_OK)
        return fail(k, ps, ps->j2, p->big->name);
    return answered ? respond(k, ps) : MHD_YES;
}

static void put_labels(struct hs_buf *b, const struct hs_head *h, const float *pr)
{
    int order[HS_HEAD_MAX_CLASSES];
    for (int c = 0; c < h->n_classes; c++) order[c] = c;
    for (int i = 1; i < h->n_classes; i++) /* insertion sort, descending, stable */
        for (int j = i; j > 0 && pr[order[j]] > pr[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    hs_buf_putc(b, '[');
    for (int c = 0; c < h->n_classes; c++) {
        hs_buf_puts(b, c ? ",{\"label\":" : "{\"label\":");
        const char *l = h->labels[order[c]];
        hs_buf_json_str(b, l, strlen(l));
        hs_buf_printf(b, ",\"score\":%.7g}", (double)pr[order[c]]);
    }
    hs_buf_putc(b, ']');
}

static enum MHD_Result respond(struct conn *k, struct pstate *ps)
{
    struct hs_predict *p = hs__conn_server(k)->predict;
    const int classes = p->small_head->n_classes;
    if (ps->phase == 2) {
        const struct hs_job *j = ps->j2;
        if (j->status != HS_STATUS_OK) return fail(k, ps, j, p->big->name);
        const int dim = j->dim;
        size_t row = 0;
        for (size_t i = 0; i < ps->n; i++)
            if (ps->decision[i] == HS_CASCADE_BIG)
                hs_head_apply(p->big_head, j->out + (row++) * (size_t)dim,
                              ps->p_big + i * (size_t)classes);
    }
    json_decref(ps->texts);
    ps->texts = NULL;
    struct hs_buf b;
    hs_buf_init(&b, hs__conn_arena(k), ps->n * (size_t)classes * (HS_HEAD_LABEL_MAX * 2 + 48) + 64);
    char *who = hs_arena_alloc(hs__conn_arena(k), ps->n * 8 + 1);
    size_t wn = 0;
    if (!ps->single) hs_buf_putc(&b, '[');
    for (size_t i = 0; i < ps->n; i++) {
        if (i) hs_buf_putc(&b, ',');
        bool big = ps->decision[i] == HS_CASCADE_BIG;
        put_labels(&b, big ? p->big_head : p->small_head,
                   (big ? ps->p_big : ps->p_small) + i * (size_t)classes);
        if (who)
            wn += (size_t)sprintf(who + wn, "%s%s", i ? "," : "",
                                  hs_cascade_decision_name(ps->decision[i]));
    }
    if (!ps->single) hs_buf_putc(&b, ']');
    return hs__conn_reply(k, &b, "X-Cascade", who);
}
