/* `hetserve serve`: run the HTTP server until SIGTERM/SIGINT, then drain and exit 0. SIGHUP
 * reloads the API keys (the config file's auth section and the keys file) in place. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/threads.h"
#include "server/config.h"
#include "server/server.h"

static const char usage[] =
    "usage: hetserve serve [--config FILE] [--model DIR] [--host ADDR] [--port N]\n"
    "                      [--trace-file PATH] [--threads N]\n"
    "  --config FILE      YAML configuration (hetserve config --print-defaults shows every key)\n"
    "  --model DIR        serve this model folder instead of the config's models\n"
    "  --host, --port     override server.host / server.port (default 127.0.0.1:8080)\n"
    "  --trace-file PATH  write a Perfetto / Chrome trace of every batch and request stage\n"
    "  --threads N        compute threads of every engine (overrides engines[].threads)\n";

static bool parse_int_arg(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* SIGHUP: the keys of the config file as it is now (its other sections stay as they were
 * loaded), or of the running config without one; the keys file is read again either way. On any
 * fault the current keys stay. */
static void reload_keys(struct hs_server *srv, const struct hs_config *running, const char *path)
{
    struct hs_config *c = hs_malloc(sizeof *c);
    if (!c) return;
    struct hs_error err = {0};
    hs_status st = HS_STATUS_OK;
    if (path) {
        hs_config_defaults(c, NULL);
        st = hs_config_load(path, c, &err);
    } else {
        *c = *running;
    }
    if (!st) {
        struct hs_config *now = hs_malloc(sizeof *now);
        if (now) {
            *now = *running;
            now->auth = c->auth;
            st = hs_server_reload_auth(srv, now, &err);
            hs_free(now);
        }
    }
    if (st)
        hs_log_error("SIGHUP: keys not reloaded, the current ones stay: %s", err.msg);
    else
        hs_log_info("SIGHUP: keys reloaded");
    hs_free(c);
}

int hs_cmd_serve(int argc, char **argv)
{
    /* Signals are taken by sigwait on this thread only: block them before any thread starts
     * (engines, OpenMP, the HTTP pool) so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* jansson allocates through hs_malloc like everything else. */
    json_set_alloc_funcs(hs_malloc, hs_free);

    const char *config = NULL, *model = NULL, *host = NULL, *trace = NULL;
    int port = -1, threads = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--config") && has) {
            config = argv[++i];
        } else if (!strcmp(a, "--model") && has) {
            model = argv[++i];
        } else if (!strcmp(a, "--host") && has) {
            host = argv[++i];
        } else if (!strcmp(a, "--port") && has) {
            if (!parse_int_arg(argv[++i], 0, 65535, &port)) {
                fprintf(stderr, "hetserve serve: bad port '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--threads") && has) {
            if (!parse_int_arg(argv[++i], 0, 4096, &threads)) {
                fprintf(stderr, "hetserve serve: bad thread count '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--trace-file") && has) {
            trace = argv[++i];
        } else {
            fprintf(stderr, "hetserve serve: unknown or incomplete option '%s'\n%s", a, usage);
            return 2;
        }
    }

    struct hs_config *cfg = hs_malloc(sizeof *cfg);
    if (!cfg) return 1;
    hs_config_defaults(cfg, model ? model : hs_cli_default_model());
    struct hs_error err = {0};
    if (config && hs_config_load(config, cfg, &err) != HS_STATUS_OK) {
        fprintf(stderr, "hetserve serve: %s\n", err.msg);
        hs_free(cfg);
        return 1;
    }
    if (model && config) {
        /* --model replaces the config's models with this one on the first engine. */
        cfg->n_models = 1;
        hs_config_model_init(&cfg->models[0], 0);
        snprintf(cfg->models[0].path, sizeof cfg->models[0].path, "%s", model);
        snprintf(cfg->models[0].engine, sizeof cfg->models[0].engine, "%s", cfg->engines[0].name);
    }
    if (host) snprintf(cfg->server.host, sizeof cfg->server.host, "%s", host);
    if (port >= 0) cfg->server.port = port;
    if (trace) snprintf(cfg->server.trace_file, sizeof cfg->server.trace_file, "%s", trace);
    if (threads >= 0)
        for (int i = 0; i < cfg->n_engines; i++) cfg->engines[i].threads = threads;

    struct hs_server *srv = NULL;
    int rc = 1;
    if (hs_server_create(cfg, &srv, &err) != HS_STATUS_OK ||
        hs_server_start(srv, &err) != HS_STATUS_OK) {
        fprintf(stderr, "hetserve serve: %s\n", err.msg);
        goto done;
    }
    hs_threads_release_idle_team(); /* the load's team: serving runs on the batchers' */
    /* Tests and scripts read this line to learn the port (--port 0 picks a free one). */
    printf("hetserve: listening on http://%s:%d\n", cfg->server.host, hs_server_port(srv));
    fflush(stdout);

    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP) reload_keys(srv, cfg, config);
    hs_log_info("signal %d: draining", sig);
    rc = hs_server_shutdown(srv) == HS_STATUS_OK ? 0 : 1;
    hs_log_info("drained; exiting");
done:
    hs_server_destroy(srv);
    hs_free(cfg);
    return rc;
}
