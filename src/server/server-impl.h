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
#include "sched/sched.h"
#include "server/config.h"
#include "server/json.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/trace.h"

struct hs_served_model {
    char name[128];
    struct hs_model *model;
    struct hs_executor *exec;
    hs_engine_t engine;
    int lane;
};

struct hs_server {
    struct hs_config cfg;
    int n_engines;
    hs_engine_t engines[HS_CONFIG_MAX_ENGINES];
    int n_models;
    struct hs_served_model models[HS_CONFIG_MAX_MODELS];
    struct hs_sched *sched;
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

#endif
