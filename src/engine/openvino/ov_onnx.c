/* Whole ONNX graphs on the OpenVINO engine (see ov_onnx.h).
 *
 * The graph is read with ov_core_read_model (the ONNX frontend, libopenvino_onnx_frontend, must
 * be next to the runtime), its dynamic dimensions kept, and compiled with the engine's precision
 * f32 and thread count and the LATENCY hint. Runs may come from many threads: each takes an
 * infer request from the graph's free list (one is created when the list is empty, so in the
 * steady state nothing is created), binds the caller's inputs in place, and copies the outputs
 * into the caller's buffers. */
#include "engine/openvino/ov_onnx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plugin.h"

#define MAX_FREE 32

struct ov_onnx {
    ov_model_t *model;
    ov_compiled_model_t *compiled;
    size_t n_inputs, n_outputs;
    pthread_mutex_t mu; /* guards the free list */
    int n_free;
    ov_infer_request_t *free_reqs[MAX_FREE];
    char path[256];
};

static hs_status fail(struct hs_error *err, ov_status_e s, const char *path, const char *what)
{
    const char *msg = ov_get_last_err_msg();
    return hs_plugin_error(err, HS_STATUS_ENGINE, "openvino: %s: %s: %s%s%s", path, what,
                           ov_get_error_info(s), msg && *msg ? ": " : "", msg ? msg : "");
}

hs_status ov_onnx_load(ov_core_t *core, const char *device, int threads, const char *path,
                       void **graph, struct hs_error *err)
{
    *graph = NULL;
    if (!core) return hs_plugin_error(err, HS_STATUS_ENGINE, "openvino: no runtime core");
    FILE *f = fopen(path, "rb");
    if (!f) return hs_plugin_error(err, HS_STATUS_NOT_FOUND, "openvino: cannot open %s", path);
    fclose(f);
    struct ov_onnx *g = calloc(1, sizeof *g);
    if (!g) return hs_plugin_error(err, HS_STATUS_NO_MEMORY, "openvino: out of memory");
    snprintf(g->path, sizeof g->path, "%s", path);
    pthread_mutex_init(&g->mu, NULL);
    ov_status_e os = ov_core_read_model(core, path, NULL, &g->model);
    hs_status st = HS_STATUS_OK;
    if (os != OK) {
        st = fail(err, os, path, "reading the ONNX graph (is the runtime's ONNX frontend there?)");
        goto out;
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    ov_property_t props[3] = {
        {ov_property_key_hint_inference_precision, "f32"},
        {ov_property_key_hint_performance_mode, "LATENCY"},
    };
    size_t n_props = 2;
    if (threads > 0 && !strncmp(device, "CPU", 3))
        props[n_props++] = (ov_property_t){ov_property_key_inference_num_threads, th};
    os = ov_core_compile_model_props(core, g->model, device, n_props, props, &g->compiled);
    if (os != OK) {
        st = fail(err, os, path, "compiling the graph");
        goto out;
    }
    if ((os = ov_compiled_model_inputs_size(g->compiled, &g->n_inputs)) != OK ||
        (os = ov_compiled_model_outputs_size(g->compiled, &g->n_outputs)) != OK) {
        st = fail(err, os, path, "the graph's inputs and outputs");
        goto out;
    }
out:
    if (st) {
        ov_onnx_release(g);
        return st;
    }
    *graph = g;
    return HS_STATUS_OK;
}

void ov_onnx_release(void *p)
{
    struct ov_onnx *g = p;
    if (!g) return;
    for (int i = 0; i < g->n_free; i++) ov_infer_request_free(g->free_reqs[i]);
    if (g->compiled) ov_compiled_model_free(g->compiled);
    if (g->model) ov_model_free(g->model);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static hs_status run_on(struct ov_onnx *g, ov_infer_request_t *rq, const struct hs_graph_tensor *in,
                        int n_in, struct hs_graph_tensor *out, int n_out, struct hs_error *err)
{
    ov_status_e os;
    for (int i = 0; i < n_in; i++) {
        if (in[i].rank < 1 || in[i].rank > 8 || !in[i].data)
            return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT, "openvino: %s: input %d",
                                   g->path, i);
        int64_t dims[8];
        memcpy(dims, in[i].shape, sizeof(int64_t) * (size_t)in[i].rank);
        ov_shape_t shape = {in[i].rank, dims};
        ov_tensor_t *t = NULL;
        os = ov_tensor_create_from_host_ptr(F32, shape, in[i].data, &t);
        if (os == OK) os = ov_infer_request_set_input_tensor_by_index(rq, (size_t)i, t);
        if (t) ov_tensor_free(t);
        if (os != OK) return fail(err, os, g->path, "setting an input (its shape?)");
    }
    if ((os = ov_infer_request_infer(rq)) != OK) return fail(err, os, g->path, "running the graph");
    for (int i = 0; i < n_out; i++) {
        ov_tensor_t *t = NULL;
        if ((os = ov_infer_request_get_output_tensor_by_index(rq, (size_t)i, &t)) != OK)
            return fail(err, os, g->path, "reading an output");
        ov_shape_t shape = {0};
        size_t n = 0;
        void *data = NULL;
        hs_status st = HS_STATUS_OK;
        if ((os = ov_tensor_get_shape(t, &shape)) != OK || (os = ov_tensor_get_size(t, &n)) != OK ||
            (os = ov_tensor_data(t, &data)) != OK) {
            st = fail(err, os, g->path, "reading an output");
        } else if (shape.rank > 8) {
            st = hs_plugin_error(err, HS_STATUS_UNSUPPORTED, "openvino: %s: output of rank %lld",
                                 g->path, (long long)shape.rank);
        } else if (n > out[i].cap) {
            st = hs_plugin_error(err, HS_STATUS_TOO_LONG,
                                 "openvino: %s: output %d has %zu values, room for %zu", g->path, i,
                                 n, out[i].cap);
        } else {
            out[i].rank = (int)shape.rank;
            for (int k = 0; k < out[i].rank; k++) out[i].shape[k] = shape.dims[k];
            memcpy(out[i].data, data, sizeof(float) * n);
        }
        if (shape.dims) ov_shape_free(&shape);
        ov_tensor_free(t);
        if (st) return st;
    }
    return HS_STATUS_OK;
}

hs_status ov_onnx_run(void *p, const struct hs_graph_tensor *in, int n_in,
                      struct hs_graph_tensor *out, int n_out, struct hs_error *err)
{
    struct ov_onnx *g = p;
    if ((size_t)n_in != g->n_inputs || (size_t)n_out > g->n_outputs)
        return hs_plugin_error(err, HS_STATUS_INVALID_ARGUMENT,
                               "openvino: %s takes %zu inputs and gives %zu outputs (asked %d, %d)",
                               g->path, g->n_inputs, g->n_outputs, n_in, n_out);
    ov_infer_request_t *rq = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->n_free) rq = g->free_reqs[--g->n_free];
    pthread_mutex_unlock(&g->mu);
    if (!rq) {
        ov_status_e os = ov_compiled_model_create_infer_request(g->compiled, &rq);
        if (os != OK) return fail(err, os, g->path, "creating an infer request");
    }
    hs_status st = run_on(g, rq, in, n_in, out, n_out, err);
    pthread_mutex_lock(&g->mu);
    if (g->n_free < MAX_FREE) {
        g->free_reqs[g->n_free++] = rq;
        rq = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    if (rq) ov_infer_request_free(rq);
    return st;
}
