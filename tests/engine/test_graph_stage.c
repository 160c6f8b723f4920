/* Whole-graph stages (engine.h: HS_ENGINE_FEAT_GRAPH_ONNX, hs_engine_graph_*): the CPU engine
 * does not declare the capability and refuses a graph at load, naming the engine and the
 * capability, whatever the file; argument checks of the wrappers. The OpenVINO engine running
 * PP-OCRv5's graphs is tested end to end by tests/server/test_ocr.py. */
#include "testutil.h"

#include <string.h>

#include "engine/engine.h"

static void cpu_refuses_graphs(void **state)
{
    (void)state;
    hs_engine_t e = NULL;
    struct hs_error err = {0};
    assert_int_equal(hs_engine_create("cpu", &(struct hs_engine_opts){.threads = 1}, &e, &err),
                     HS_STATUS_OK);
    struct hs_engine_caps c;
    hs_engine_caps(e, &c);
    assert_false(c.features & HS_ENGINE_FEAT_GRAPH_ONNX);
    void *g = (void *)1;
    assert_int_equal(hs_engine_graph_load(e, "det.onnx", &g, &err), HS_STATUS_UNSUPPORTED);
    assert_null(g);
    assert_non_null(strstr(err.msg, "does not run ONNX graphs (capability graph_onnx)"));
    assert_non_null(strstr(err.msg, "det.onnx"));
    assert_int_equal(hs_engine_graph_load(e, NULL, &g, &err), HS_STATUS_INVALID_ARGUMENT);
    float x = 0;
    struct hs_graph_tensor t = {&x, 1, {1}, 1};
    assert_int_equal(hs_engine_graph_run(e, NULL, &t, 1, &t, 1, &err), HS_STATUS_INVALID_ARGUMENT);
    hs_engine_graph_release(e, NULL);
    hs_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(cpu_refuses_graphs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
