/* The engine plugin loader (engine/plugin.h): a plugin built for another ABI version is refused
 * with a message naming both versions; a library without the entry point, a missing file and a
 * plugin that declines are refused with their reasons; the registry lists the openvino kind as
 * built exactly when its plugin was found (the positive proof of the ABI is that plugin, run by
 * the conformance suite and hetserve verify). */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "engine/plugin.h"

static void wrong_abi_version_is_a_clear_error(void **state)
{
    (void)state;
    struct hs_error err = {0};
    const struct hs_engine_kind *k = NULL;
    assert_int_equal(hs_engine_plugin_load(HS_TEST_PLUGIN_BADABI, &k, &err), HS_STATUS_UNSUPPORTED);
    assert_null(k);
    printf("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "ABI version 999"));
    char want[64];
    snprintf(want, sizeof want, "speaks version %d", HS_PLUGIN_ABI_VERSION);
    assert_non_null(strstr(err.msg, want));
    assert_null(hs_engine_kind_find("testabi")); /* nothing registered */
}

static void declined_missing_and_foreign_libraries(void **state)
{
    (void)state;
    struct hs_error err = {0};
    assert_int_equal(hs_engine_plugin_load(HS_TEST_PLUGIN_DECLINE, NULL, &err),
                     HS_STATUS_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no such device here"));
    assert_int_equal(hs_engine_plugin_load("/nonexistent/libhs_engine_x.so", NULL, &err),
                     HS_STATUS_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no such file"));
    /* a shared object without the entry point */
    assert_int_equal(hs_engine_plugin_load(HS_TEST_PLUGIN_NOENTRY, NULL, &err),
                     HS_STATUS_NOT_FOUND);
    assert_non_null(strstr(err.msg, "hs_engine_plugin"));
    assert_null(hs_engine_kind_find("testabi"));
}

static void openvino_kind_comes_from_its_plugin(void **state)
{
    (void)state;
    const struct hs_engine_kind *k = hs_engine_kind_find("openvino");
    assert_non_null(k); /* known to every build */
#ifdef HS_TEST_OPENVINO_PLUGIN
    assert_true(hs_engine_kind_built(k));
    const struct hs_engine_kind *again = NULL;
    struct hs_error err = {0};
    if (hs_engine_plugin_load(HS_TEST_OPENVINO_PLUGIN, &again, &err)) fail_msg("%s", err.msg);
    assert_ptr_equal(again, k); /* the discovered plugin, loaded once */
#else
    printf("test_plugin: openvino plugin not built (scripts/setup fetches OpenVINO): skipped\n");
    assert_false(hs_engine_kind_built(k));
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrong_abi_version_is_a_clear_error),
        cmocka_unit_test(declined_missing_and_foreign_libraries),
        cmocka_unit_test(openvino_kind_comes_from_its_plugin),
    };
    return cmocka_run_group_tests_name("engine_plugin", tests, NULL, NULL);
}
