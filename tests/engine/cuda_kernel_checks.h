/* hetserve — the CUDA kernels one by one against host references, included by test_cuda.c
 * (on a GPU) and by cuda_emu.cpp (the same checks on the CPU, the kernels run by an emulator of
 * the CUDA execution model). Needs, from the includer: urand(), REQUIRE_GPU(), cmocka's
 * assertions, the CUDA runtime's cudaMalloc / cudaMemcpy / cudaFree / cudaDeviceSynchronize,
 * cuda_impl.h and core/tensor.h.
 *
 * Each launcher of cuda_impl.h runs on random inputs with the shapes the engine gives it and is
 * compared to a direct host transcription of its contract (the CPU engine's arithmetic) in
 * double precision. */
#ifndef HS_TEST_CUDA_KERNEL_CHECKS_H
#define HS_TEST_CUDA_KERNEL_CHECKS_H

static void *dev_up(const void *host, size_t bytes)
{
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, bytes), cudaSuccess);
    if (host) assert_int_equal(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void dev_down(void *host, const void *d, size_t bytes)
{
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* random fp16 values (scale * [-1, 1)), and their exact fp32 values */
static uint16_t *rand_f16(int64_t n, float scale, float **as_f32)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_non_null(h);
    assert_non_null(f);
    for (int64_t i = 0; i < n; i++) {
        h[i] = hs_fp32_to_fp16(scale * urand());
        f[i] = hs_fp16_to_fp32(h[i]);
    }
    *as_f32 = f;
    return h;
}

static void expect_max_diff(const char *what, double worst, double tol)
{
    printf("  %-44s max |diff| %.2e (tol %.0e)\n", what, worst, tol);
    if (!(worst <= tol)) fail_msg("%s: max |diff| %g > %g", what, worst, tol);
}

/* attention on B = 2 sequences (lengths 77 and 30 in a bucket of 80: several key tiles, a
 * partial query tile, padding), grouped-query (4 heads on 2 kv heads) */
static void kernel_attention_case(int D, int causal, int window, bool rel)
{
    const int B = 2, S = 80, heads = 4, kvh = 2, nq = heads * D, nkv = kvh * D;
    const int stride = nq + 2 * nkv, span = 100;
    const int32_t lens[2] = {77, 30};
    float *qf;
    uint16_t *qh = rand_f16((int64_t)B * S * stride, 1.5f, &qf);
    const int64_t rel_row = 2 * span - 1;
    float *relh = malloc(sizeof(float) * (size_t)(heads * rel_row));
    for (int64_t i = 0; i < heads * rel_row; i++) relh[i] = urand();
    uint16_t *d_qkv = dev_up(qh, sizeof(uint16_t) * (size_t)B * S * stride);
    uint16_t *d_ctx = dev_up(NULL, sizeof(uint16_t) * (size_t)B * S * nq);
    int32_t *d_len = dev_up(lens, sizeof lens);
    float *d_rel = dev_up(relh, sizeof(float) * (size_t)(heads * rel_row));
    const struct hs__cuda_attn_shape a = {.heads = heads,
                                          .kv_heads = kvh,
                                          .head_dim = D,
                                          .stride = stride,
                                          .k_off = nq,
                                          .v_off = nq + nkv,
                                          .ctx_stride = nq,
                                          .causal = causal,
                                          .window = window,
                                          .rel = rel ? d_rel : NULL,
                                          .rel_span = span};
    const float scale = 1.0f / sqrtf((float)D);
    assert_int_equal(hs__cuda_attention(d_qkv, d_len, B, S, &a, scale, d_ctx, 0), cudaSuccess);
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)B * S * nq);
    dev_down(got, d_ctx, sizeof(uint16_t) * (size_t)B * S * nq);
    double worst = 0.0, *p = malloc(sizeof(double) * S);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++)
            for (int h = 0; h < heads; h++) {
                const uint16_t *o = got + ((size_t)b * S + i) * nq + (size_t)h * D;
                if (i >= lens[b]) { /* padding rows: zeros */
                    for (int c = 0; c < D; c++)
                        if (hs_fp16_to_fp32(o[c]) != 0.0f) fail_msg("padding row %d not zero", i);
                    continue;
                }
                int lo = 0, hi = lens[b];
                if (causal) hi = i + 1;
                if (window > 0) {
                    lo = i - window > 0 ? i - window : 0;
                    if (i + window + 1 < hi) hi = i + window + 1;
                }
                const int g = h / (heads / kvh);
                const float *q = qf + ((size_t)b * S + i) * stride + (size_t)h * D;
                double mx = -1e300, sum = 0.0;
                for (int j = lo; j < hi; j++) {
                    const float *k = qf + ((size_t)b * S + j) * stride + nq + (size_t)g * D;
                    double dot = 0.0;
                    for (int c = 0; c < D; c++) dot += (double)q[c] * k[c];
                    p[j] = dot * scale + (rel ? relh[h * rel_row + (j - i) + span - 1] : 0.0);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = lo; j < hi; j++) sum += (p[j] = exp(p[j] - mx));
                for (int c = 0; c < D; c++) {
                    double ref = 0.0;
                    for (int j = lo; j < hi; j++)
                        ref += p[j] / sum *
                               qf[((size_t)b * S + j) * stride + nq + nkv + (size_t)g * D + c];
                    const double dd = fabs(ref - hs_fp16_to_fp32(o[c]));
                    if (dd > worst || isnan(dd)) worst = dd;
                }
            }
    char what[96];
    snprintf(what, sizeof what, "attention D=%d gqa%s%s%s", D, causal ? " causal" : "",
             window ? " window" : "", rel ? " rel-bias" : "");
    expect_max_diff(what, worst, 4e-3);
    free(p);
    free(got);
    free(qh);
    free(qf);
    free(relh);
    cudaFree(d_qkv);
    cudaFree(d_ctx);
    cudaFree(d_len);
    cudaFree(d_rel);
}

static void kernel_attention(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[] = {8, 16, 32, 64, 128};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        kernel_attention_case(dims[i], 0, 0, false);
        kernel_attention_case(dims[i], 1, 0, false);
        kernel_attention_case(dims[i], 0, 5, false);
        kernel_attention_case(dims[i], 1, 40, false);
        kernel_attention_case(dims[i], 0, 0, true);
    }
}

/* qk-norm then rotary (partial dims, two bases) on a QKV buffer with grouped k heads */
static void kernel_qk_rope(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int S = 24, rows = 2 * S, heads = 4, kvh = 2, D = 64, rot = 32, nq = heads * D;
    const int stride = nq + 2 * kvh * D;
    const float eps = 1e-6f;
    float *xf, gq[64], gk[64], *cs = malloc(sizeof(float) * S * rot);
    uint16_t *xh = rand_f16((int64_t)rows * stride, 2.0f, &xf);
    for (int c = 0; c < D; c++) gq[c] = 1.0f + 0.3f * urand(), gk[c] = 1.0f + 0.3f * urand();
    hs__cuda_rope_table(cs, S, rot, 10000.0f, 2.0f);
    uint16_t *d_x = dev_up(xh, sizeof(uint16_t) * (size_t)rows * stride);
    float *d_gq = dev_up(gq, sizeof gq), *d_gk = dev_up(gk, sizeof gk);
    float *d_cs = dev_up(cs, sizeof(float) * S * rot);
    assert_int_equal(
        hs__cuda_qk_rope(d_x, rows, S, stride, heads, kvh, D, nq, d_gq, d_gk, eps, rot, d_cs, 0),
        cudaSuccess);
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)rows * stride);
    dev_down(got, d_x, sizeof(uint16_t) * (size_t)rows * stride);
    double worst = 0.0;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < heads + 2 * kvh; h++) {
            const bool is_q = h < heads, is_k = !is_q && h < heads + kvh;
            const int col = h * D; /* q heads, k heads, then v heads (untouched) */
            const float *x = xf + (size_t)r * stride + col;
            double v[64], ss = 0.0;
            for (int c = 0; c < D; c++) ss += (double)x[c] * x[c];
            const double rr = 1.0 / sqrt(ss / D + eps);
            for (int c = 0; c < D; c++)
                v[c] = is_q ? gq[c] * x[c] * rr : is_k ? gk[c] * x[c] * rr : x[c];
            if (is_q || is_k) {
                const float *t = cs + (size_t)(r % S) * rot;
                for (int i = 0; i < rot / 2; i++) {
                    const double a0 = v[i], b0 = v[i + rot / 2];
                    v[i] = a0 * t[i] - b0 * t[rot / 2 + i];
                    v[i + rot / 2] = b0 * t[i] + a0 * t[rot / 2 + i];
                }
            }
            for (int c = 0; c < D; c++) {
                const double dd = fabs(v[c] - hs_fp16_to_fp32(got[(size_t)r * stride + col + c])) /
                                  (1.0 + fabs(v[c]));
                if (dd > worst || isnan(dd)) worst = dd;
            }
        }
    expect_max_diff("qk-norm + rotary (rel. to 1 + |x|)", worst, 2e-3);
    free(got);
    free(xh);
    free(xf);
    free(cs);
    cudaFree(d_x);
    cudaFree(d_gq);
    cudaFree(d_gk);
    cudaFree(d_cs);
}

/* the row kernels: post-norm LayerNorm without beta and RMSNorm, pre-norm input, residual add,
 * embedding with a position offset and no token types */
static void kernel_norms(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int rows = 37, H = 96;
    const size_t n = (size_t)rows * H;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), g[96], bta[96];
    float *got = malloc(sizeof(float) * n);
    uint16_t *goth = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) x[i] = 3.0f * urand() + 0.5f, y[i] = urand();
    for (int c = 0; c < H; c++) g[c] = 1.0f + 0.5f * urand(), bta[c] = 0.2f * urand();
    float *d_x = dev_up(NULL, sizeof(float) * n), *d_y = dev_up(y, sizeof(float) * n);
    float *d_g = dev_up(g, sizeof g), *d_b = dev_up(bta, sizeof bta);
    uint16_t *d_xh = dev_up(NULL, sizeof(uint16_t) * n);
    for (int mode = 0; mode < 5; mode++) {
        /* 0 add+LN no beta, 1 add+RMS, 2 pre-norm LN with beta into xh, 3 residual add,
         * 4 final RMS (no y) */
        assert_int_equal(cudaMemcpy(d_x, x, sizeof(float) * n, cudaMemcpyHostToDevice),
                         cudaSuccess);
        cudaError_t ce = cudaSuccess;
        if (mode == 0) ce = hs__cuda_add_norm(d_x, d_y, d_g, NULL, 0, 1e-5f, rows, H, d_xh, 0);
        if (mode == 1) ce = hs__cuda_add_norm(d_x, d_y, d_g, NULL, 1, 1e-6f, rows, H, d_xh, 0);
        if (mode == 2) ce = hs__cuda_norm_half(d_x, d_g, d_b, 0, 1e-5f, rows, H, d_xh, 0);
        if (mode == 3) ce = hs__cuda_residual_add(d_x, d_y, rows, H, d_xh, 0);
        if (mode == 4) ce = hs__cuda_add_norm(d_x, NULL, d_g, NULL, 1, 1e-6f, rows, H, d_xh, 0);
        assert_int_equal(ce, cudaSuccess);
        dev_down(got, d_x, sizeof(float) * n);
        dev_down(goth, d_xh, sizeof(uint16_t) * n);
        double worst = 0.0, worst_h = 0.0;
        for (int r = 0; r < rows; r++) {
            double v[96], m = 0.0, q = 0.0;
            for (int c = 0; c < H; c++) {
                v[c] = x[r * H + c] + (mode == 2 || mode == 4 ? 0.0 : y[r * H + c]);
                m += v[c];
                q += v[c] * v[c];
            }
            m /= H;
            double var = 0.0;
            for (int c = 0; c < H; c++) var += (v[c] - m) * (v[c] - m);
            var /= H;
            for (int c = 0; c < H; c++) {
                double o = v[c];
                if (mode == 0) o = (v[c] - m) / sqrt(var + 1e-5) * g[c];
                if (mode == 2) o = (v[c] - m) / sqrt(var + 1e-5) * g[c] + bta[c];
                if (mode == 1 || mode == 4) o = g[c] * v[c] / sqrt(q / H + 1e-6);
                const double want_x = mode == 2 ? x[r * H + c] : o; /* pre-norm keeps x */
                const double dx = fabs(want_x - got[r * H + c]);
                const double dh = fabs(o - hs_fp16_to_fp32(goth[r * H + c])) / (1.0 + fabs(o));
                if (dx > worst || isnan(dx)) worst = dx;
                if (dh > worst_h || isnan(dh)) worst_h = dh;
            }
        }
        static const char *names[] = {"add + LayerNorm, no beta", "add + RMSNorm",
                                      "pre-norm LayerNorm into xh", "residual add",
                                      "final RMSNorm"};
        char what[96];
        snprintf(what, sizeof what, "%s (x)", names[mode]);
        expect_max_diff(what, worst, 2e-5);
        snprintf(what, sizeof what, "%s (xh, rel.)", names[mode]);
        expect_max_diff(what, worst_h, 1e-3);
    }
    /* embed: word + pos[2 + s], no token types, no norm; padding rows zero */
    const int B = 2, S = 8, V = 11, P = 12;
    const int32_t lens[2] = {8, 3};
    int32_t ids[16];
    for (int i = 0; i < B * S; i++) ids[i] = (i * 7 + 3) % V;
    float *wf, *pf;
    uint16_t *wh = rand_f16((int64_t)V * H, 1.0f, &wf), *ph = rand_f16((int64_t)P * H, 1.0f, &pf);
    uint16_t *d_w = dev_up(wh, sizeof(uint16_t) * V * H),
             *d_p = dev_up(ph, sizeof(uint16_t) * P * H);
    int32_t *d_ids = dev_up(ids, sizeof ids), *d_len = dev_up(lens, sizeof lens);
    assert_int_equal(hs__cuda_embed(d_ids, NULL, d_len, d_w, d_p, NULL, 2, NULL, NULL, 1e-5f, B, S,
                                    H, d_x, d_xh, 0),
                     cudaSuccess);
    dev_down(got, d_x, sizeof(float) * (size_t)B * S * H);
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int s2 = 0; s2 < S; s2++)
            for (int c = 0; c < H; c++) {
                const int r = b * S + s2;
                const double want =
                    s2 < lens[b] ? (double)wf[ids[r] * H + c] + pf[(2 + s2) * H + c] : 0.0;
                const double dd = fabs(want - got[r * H + c]);
                if (dd > worst) worst = dd;
            }
    expect_max_diff("embed, position offset 2, no types, no norm", worst, 1e-6);
    free(wh);
    free(wf);
    free(ph);
    free(pf);
    cudaFree(d_w);
    cudaFree(d_p);
    cudaFree(d_ids);
    cudaFree(d_len);
    free(x);
    free(y);
    free(got);
    free(goth);
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_g);
    cudaFree(d_b);
    cudaFree(d_xh);
}

/* gated FFN product for every activation, and last-token pooling */
static void kernel_glu_pool(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int rows = 19, I = 40;
    float *uf;
    uint16_t *ug = rand_f16((int64_t)rows * 2 * I, 3.0f, &uf);
    uint16_t *d_ug = dev_up(ug, sizeof(uint16_t) * rows * 2 * I);
    uint16_t *d_out = dev_up(NULL, sizeof(uint16_t) * rows * I);
    uint16_t *got = malloc(sizeof(uint16_t) * rows * I);
    for (int act = 1; act <= 4; act++) {
        assert_int_equal(hs__cuda_glu(d_ug, rows, I, act, d_out, 0), cudaSuccess);
        dev_down(got, d_out, sizeof(uint16_t) * rows * I);
        double worst = 0.0;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < I; j++) {
                const double up = uf[r * 2 * I + j], gt = uf[r * 2 * I + I + j];
                double a = gt;
                if (act == 1) a = 0.5 * gt * (1.0 + erf(gt / sqrt(2.0)));
                if (act == 2)
                    a = 0.5 * gt * (1.0 + tanh(0.7978845608 * (gt + 0.044715 * gt * gt * gt)));
                if (act == 3) a = gt > 0 ? gt : 0.0;
                if (act == 4) a = gt / (1.0 + exp(-gt));
                const double want = a * up;
                const double dd = fabs(want - hs_fp16_to_fp32(got[r * I + j])) / (1.0 + fabs(want));
                if (dd > worst || isnan(dd)) worst = dd;
            }
        char what[64];
        snprintf(what, sizeof what, "gated FFN product, activation %d (rel.)", act);
        expect_max_diff(what, worst, 2e-3);
    }
    const int B = 3, S = 5, H = 16;
    const int32_t lens[3] = {5, 1, 3};
    float x[3 * 5 * 16], pooled[3 * 16];
    for (int i = 0; i < B * S * H; i++) x[i] = urand();
    float *d_x = dev_up(x, sizeof x), *d_p = dev_up(NULL, sizeof pooled);
    int32_t *d_len = dev_up(lens, sizeof lens);
    assert_int_equal(hs__cuda_pool(d_x, d_len, B, S, H, 2, d_p, 0), cudaSuccess);
    dev_down(pooled, d_p, sizeof pooled);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < H; c++)
            if (pooled[b * H + c] != x[(b * S + lens[b] - 1) * H + c])
                fail_msg("last-token pool: sequence %d column %d", b, c);
    printf("  %-44s exact\n", "last-token pooling");
    free(ug);
    free(uf);
    free(got);
    cudaFree(d_ug);
    cudaFree(d_out);
    cudaFree(d_x);
    cudaFree(d_p);
    cudaFree(d_len);
}
#endif
