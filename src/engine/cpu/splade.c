/* SPLADE pooling on the CPU: a masked-LM head on every token, max-pooled per sequence (see
 * kernels.h). Always f32, whatever the lane's dtype: the head runs once per token and its
 * decoder's logits feed a max, where a reduced-precision product moves which entries are zero. */
#include <math.h>
#include <string.h>

#include "engine/cpu/kernels.h"

int64_t hs__cpu_splade_scratch_floats(int hidden, int vocab)
{
    return (int64_t)HS_CPU_SPLADE_ROWS * ((int64_t)hidden + (int64_t)vocab);
}

int hs__cpu_splade(const float *x, float *out, const int32_t *offsets, int n_seqs, int hidden,
                   int vocab, const float *w_dense, const float *b_dense, const float *ln_g,
                   const float *ln_b, const float *w_dec, const float *b_dec, int act, float eps,
                   float *scratch, int threads)
{
    float *t = scratch, *logits = scratch + (size_t)HS_CPU_SPLADE_ROWS * (size_t)hidden;
    for (int s = 0; s < n_seqs; s++) {
        float *o = out + (size_t)s * (size_t)vocab;
        /* max of log(1 + relu(z)) over tokens = log(1 + relu(max z)): both are monotonic */
        for (int v = 0; v < vocab; v++) o[v] = 0.0f;
        for (int r = offsets[s]; r < offsets[s + 1]; r += HS_CPU_SPLADE_ROWS) {
            const int rows =
                offsets[s + 1] - r < HS_CPU_SPLADE_ROWS ? offsets[s + 1] - r : HS_CPU_SPLADE_ROWS;
            const float *in = x + (size_t)r * (size_t)hidden;
            if (hs__cpu_linear(in, w_dense, b_dense, t, rows, hidden, hidden, act, threads))
                return -1;
            hs__cpu_norm(t, t, ln_g, ln_b, rows, hidden, eps, HS_NORM_LAYER, threads);
            if (hs__cpu_linear(t, w_dec, b_dec, logits, rows, vocab, hidden, -1, threads))
                return -1;
            for (int i = 0; i < rows; i++) {
                const float *z = logits + (size_t)i * (size_t)vocab;
                for (int v = 0; v < vocab; v++) o[v] = z[v] > o[v] ? z[v] : o[v];
            }
        }
        for (int v = 0; v < vocab; v++) o[v] = o[v] > 0.0f ? log1pf(o[v]) : 0.0f;
    }
    return 0;
}
