#include "engine/stage.h"

#include <math.h>
#include <stdio.h>

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
    case HS_STAGE_FINAL_NORM:
        return "final_norm";
    case HS_STAGE_COUNT:
        break;
    }
    return "?";
}

uint32_t hs_stage_features(const struct hs_stage *st)
{
    const struct hs_encoder_dims *d = st->dims;
    uint32_t f = 0;
    if (!d) return 0;
    const bool norm_stage = st->kind == HS_STAGE_EMBED || st->kind == HS_STAGE_ATTN ||
                            st->kind == HS_STAGE_FFN || st->kind == HS_STAGE_FINAL_NORM;
    if (norm_stage && d->norm == HS_NORM_RMS) f |= HS_FEAT_RMS_NORM;
    if ((st->kind == HS_STAGE_ATTN || st->kind == HS_STAGE_FFN) && d->norm_pre)
        f |= HS_FEAT_PRE_NORM;
    switch (st->kind) {
    case HS_STAGE_EMBED:
        if (d->pos_offset != 0) f |= HS_FEAT_POS_OFFSET;
        if (!st->w[HS_W_TYPE_EMB].data) f |= HS_FEAT_NO_TOKEN_TYPES;
        if (!st->w[HS_W_POS_EMB].data) f |= HS_FEAT_ROTARY;
        if (d->norm == HS_NORM_LAYER && st->w[HS_W_EMB_LN_G].data && !st->w[HS_W_EMB_LN_B].data)
            f |= HS_FEAT_NO_BIAS;
        break;
    case HS_STAGE_ATTN: {
        if (st->w[HS_W_REL_BIAS].data) f |= HS_FEAT_REL_POS_BIAS;
        if (d->pos == HS_POS_ROTARY) f |= HS_FEAT_ROTARY;
        if (d->causal) f |= HS_FEAT_CAUSAL;
        if (d->kv_heads > 0 && d->kv_heads != d->heads) f |= HS_FEAT_GQA;
        /* (heads of another width than hidden / heads are grouped-query's machinery too) */
        if (d->head_dim * d->heads != d->hidden) f |= HS_FEAT_GQA;
        if (st->w[HS_W_Q_NORM].data || st->w[HS_W_K_NORM].data) f |= HS_FEAT_QK_NORM;
        if (d->window > 0) f |= HS_FEAT_LOCAL_ATTN;
        static const enum hs_weight_role b[] = {HS_W_Q_B, HS_W_K_B, HS_W_V_B, HS_W_ATTN_OUT_B};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
            if (!st->w[b[i]].data) f |= HS_FEAT_NO_BIAS;
        if (d->norm == HS_NORM_LAYER && st->w[HS_W_ATTN_LN_G].data && !st->w[HS_W_ATTN_LN_B].data)
            f |= HS_FEAT_NO_BIAS;
        break;
    }
    case HS_STAGE_FFN:
        if (d->ffn == HS_FFN_GATED) f |= HS_FEAT_GATED_FFN;
        if (d->act == HS_ACT_SILU) f |= HS_FEAT_ACT_SILU;
        if (!st->w[HS_W_FFN_IN_B].data || !st->w[HS_W_FFN_OUT_B].data) f |= HS_FEAT_NO_BIAS;
        if (d->norm == HS_NORM_LAYER && !st->w[HS_W_FFN_LN_B].data) f |= HS_FEAT_NO_BIAS;
        break;
    case HS_STAGE_POOL:
        if (d->pool == HS_POOL_LAST) f |= HS_FEAT_POOL_LAST;
        if (d->pool == HS_POOL_SPLADE) f |= HS_FEAT_POOL_SPLADE;
        if (d->pool == HS_POOL_NONE) f |= HS_FEAT_POOL_NONE;
        break;
    case HS_STAGE_FINAL_NORM:
        f |= HS_FEAT_FINAL_NORM;
        if (d->norm == HS_NORM_LAYER && !st->w[HS_W_FINAL_LN_B].data) f |= HS_FEAT_NO_BIAS;
        break;
    default:
        break;
    }
    return f;
}

char *hs_stage_features_str(uint32_t bits, char *buf, size_t cap)
{
    size_t n = 0;
    if (!cap) return buf;
    buf[0] = '\0';
#define HS__FEAT_STR(name, bit, what)                                                              \
    if ((bits & HS_FEAT_##name) && n < cap)                                                        \
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", what);
    HS_STAGE_FEATURES(HS__FEAT_STR)
#undef HS__FEAT_STR
    return buf;
}
