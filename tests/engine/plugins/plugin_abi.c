/* Test plugins for tests/engine/test_plugin.c, one source built three times: with HS_TEST_ABI set
 * to a version this hetserve does not speak (libhs_test_badabi.so), with HS_TEST_DECLINE (a plugin
 * that returns NULL, saying why), and with the entry point renamed (libhs_test_noentry.so). None
 * is ever created: the loader must refuse each first. */
#include "engine/plugin.h"

static const struct hs_plugin desc = {
    .abi_version = HS_TEST_ABI,
    .kind = {.name = "testabi", .summary = "test plugin", .dtypes = 1u << HS_DTYPE_F32},
};

const struct hs_plugin *hs_engine_plugin(const struct hs_plugin_host *host);
const struct hs_plugin *hs_engine_plugin(const struct hs_plugin_host *host)
{
#ifdef HS_TEST_DECLINE
    hs_plugin_error(host->why, HS_STATUS_UNSUPPORTED, "no such device here");
    return host->abi_version < 0 ? &desc : NULL;
#else
    (void)host;
    return &desc;
#endif
}
