/* hetserve — server internals shared by server.c (lifecycle) and http.c (endpoints). */
#ifndef HS_SERVER_SERVER_IMPL_H
#define HS_SERVER_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/arena.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "sched/router.h"
#include "sched/sched.h"
#include "server/config.h"
#include "server/json.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/trace.h"

struct hs_served_model {
    char name[128];
    struct hs_model *model;
    hs_engine_t engine; /* the first engine it is resident on */
    int lane;           /* the first lane serving it */
};

/* One scheduler lane: a model resident on one engine, with its executor (slots = the engine's
 * quota). */
struct hs_served_lane {
    struct hs_served_model *sm;
    hs_engine_t engine;
    struct hs_executor *exec;
};

struct hs_server {
    struct hs_config cfg;
    int n_engines;
    hs_engine_t engines[HS_CONFIG_MAX_ENGINES];
    int n_models;
    struct hs_served_model models[HS_CONFIG_MAX_MODELS];
    int n_lanes;
    struct hs_served_lane lanes[HS_SCHED_MAX_LANES];
    struct hs_sched *sched;
    struct hs_router *router;
    struct hs_metrics *metrics;
    struct hs_trace *trace;
    struct MHD_Daemon *daemon;
    int port;
    atomic_bool draining;
    atomic_uint_fast64_t next_id;
    /* requests between their first byte and their completed response */
    pthread_mutex_t inflight_mu;
    pthread_cond_t inflight_cv;
    int64_t inflight;
};

/* The libmicrohttpd callbacks (http.c). */
enum MHD_Result hs__http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls);
void hs__http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode why);

/* The engine named name, NULL when none (server.c). */
hs_engine_t hs__server_engine(struct hs_server *s, const char *name);

#endif
