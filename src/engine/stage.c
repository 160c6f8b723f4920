#include "engine/stage.h"

#include <math.h>

const char *hs_stage_kind_name(enum hs_stage_kind k)
{
    switch (k) {
    case HS_STAGE_EMBED:
        return "embed";
    case HS_STAGE_ATTN:
        return "attn";
    case HS_STAGE_FFN:
        return "ffn";
    case HS_STAGE_POOL:
        return "pool";
    case HS_STAGE_NORMALIZE:
        return "normalize";
    case HS_STAGE_COUNT:
        break;
    }
    return "?";
}
