/* Registry entry of the remote engine: batches sent to another hetserve (a worker). Built in
 * where libcurl is (HS_HAVE_REMOTE). */
#include "engine/engine.h"

#ifdef HS_HAVE_REMOTE
static int remote_devices(void)
{
    return 1; /* the network; its workers are configured, not detected */
}
#endif

const struct hs_engine_kind hs__engine_kind_remote = {
    .name = "remote",
    .summary = "another hetserve (a worker pool): batches of token ids over HTTP, embeddings back "
               "(f32, or f16 on the wire)",
    .dtypes = 1u << HS_DTYPE_F32 | 1u << HS_DTYPE_F16,
    .native = HS_DTYPE_F32,
#ifdef HS_HAVE_REMOTE
    .device_count = remote_devices,
    .create = hs_engine_remote_create,
#endif
    .remote = true,
};
