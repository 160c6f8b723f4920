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

int hs_rel_pos_bucket(int rel, int num_buckets, int max_distance)
{
    /* HF MPNet relative_position_bucket: n = -rel; half = num_buckets / 2; ret = half when n < 0;
     * then exact buckets below half / 2, log-spaced ones above. */
    int n = -rel, ret = 0;
    const int half = num_buckets / 2;
    if (n < 0) {
        ret += half;
        n = -n;
    }
    const int max_exact = half / 2;
    if (n < max_exact) return ret + n;
    /* float32 as torch: log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact),
     * truncated toward zero */
    float r = logf((float)n / (float)max_exact) / (float)log((double)max_distance / max_exact) *
              (float)(half - max_exact);
    int v = max_exact + (int)r;
    if (v > half - 1) v = half - 1;
    return ret + v;
}
