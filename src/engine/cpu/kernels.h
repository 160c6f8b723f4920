/* hetserve — CPU engine kernels (fp32). Internal to engine/cpu.
 *
 * Every kernel takes the thread count to use and runs as one OpenMP parallel region over rows
 * (tokens, or (sequence, head) pairs), so a batch's result for a sequence never depends on what
 * else is in the batch. Hot loops are compiled for AVX-512, AVX2 and baseline and chosen at run
 * time (function multi-versioning). */
#ifndef HS_ENGINE_CPU_KERNELS_H
#define HS_ENGINE_CPU_KERNELS_H

#include <stdint.h>

#include "engine/stage.h"

/* y[rows, n] = x[rows, k] * w[n, k]^T (+ bias, then activation when act >= 0). Uses oneDNN. */
int hs__cpu_linear(const float *x, const float *w, const float *bias, float *y, int rows, int n,
                   int k, int act, int threads);

/* y[rows, n] += x[rows, k] * w[n, k]^T: oneDNN's sgemm with beta 1, so a residual stream takes
 * a layer's output in place (no bias: hs__cpu_residual_ln adds it with y NULL). */
int hs__cpu_linear_acc(const float *x, const float *w, float *y, int rows, int n, int k);

/* y[j] += bias[j] (bias may be NULL), then the activation when act >= 0, over one row. */
void hs__cpu_bias_act_row(float *y, const float *bias, int n, int act);

/* How one row of an int8 GEMM's source was quantized: x ~ s * (q - zp), kept as s and s * zp
 * (sz; 0 for an s8 source, whose zero point is 0). */
struct hs_qrow {
    float s, sz;
};

/* What an int8 GEMM does with a block of its accumulators while they are in L1 (qgemm.c): row r,
 * column j (of the whole GEMM) becomes act(float(acc) * (sx[r].s * sw[j]) + bias[j] -
 * sx[r].sz * comp[j]) at y[r * ldy + j], comp[j] being sw[j] times the column sum of the
 * quantized weights (what the source's zero point adds to the sum). comp and bias may be NULL,
 * act < 0 is none; y may be the accumulator buffer itself, read as floats (same row stride). */
struct hs_qgemm_epi {
    const float *comp, *sw;
    const struct hs_qrow *sx;
    const float *bias;
    int act;
    float *y;
    int ldy;
};
/* That for the block of rows x cols at (r0, c0) of the GEMM, whose accumulators are at acc
 * (lda int32 a row): equal to the row epilogue's dequantization and activation. */
void hs__cpu_dequant_block(const int32_t *acc, int lda, const struct hs_qgemm_epi *e, int r0,
                           int c0, int rows, int cols);

/* x[t] = LN(x[t] + y[t] + bias) * g + beta, per row of width n. y, bias and beta may be NULL
 * (y NULL: x already holds the sum without the bias, as hs__cpu_linear_acc leaves it). */
void hs__cpu_residual_ln(float *x, const float *y, const float *bias, const float *g,
                         const float *beta, int rows, int n, float eps, int threads);
/* The same for one row: hs__cpu_residual_ln is this over every row (equal results). */
void hs__cpu_residual_ln_row(float *x, const float *y, const float *bias, const float *g,
                             const float *beta, int n, float eps);

/* Embedding: x[t] = LN(word[ids[t]] + pos[pos_ids[t]] + type[type_ids[t]]); type NULL: no
 * token-type term (MPNet); pos NULL: no position term (rotary families); beta may be NULL. */
void hs__cpu_embed(float *x, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                   int n_tokens, const float *word, const float *pos, const float *type,
                   const float *g, const float *beta, int hidden, float eps, int threads);

/* Where q, k and v sit in a row of the QKV buffer and which keys a query sees. */
struct hs_attn_shape {
    int heads, kv_heads, head_dim; /* query head h reads key / value head h / (heads / kv_heads) */
    int stride;                    /* floats per token row of the QKV buffer */
    int k_off, v_off;              /* first k and v column (q starts at 0) */
    int ctx_stride;                /* floats per token row of ctx (>= heads * head_dim) */
    int causal;                    /* a query sees only keys at or before it */
    int window;                    /* > 0: only keys within this distance (inclusive) */
    int lowp; /* reduced-precision products (int8 / bf16 lanes): bf16 Q.K^T and P.V where the CPU
               * has a bf16 dot product, else int8 Q.K^T where it has AVX-512 VNNI */
    /* The QKV layer's bias, [stride], not yet added to the rows (NULL: it is in them). Only
     * where hs__cpu_attn_takes_bias says the kernel adds it as it reads q, k and v. */
    const float *qkv_bias;
};

/* Self-attention over packed sequences. qkv: [n_tokens, stride] (q heads, then k heads at k_off,
 * v heads at v_off, heads contiguous inside each); ctx: [n_tokens, ctx_stride], heads * head_dim
 * written. scratch: threads * hs__cpu_attn_scratch_floats(). rel_bias (NULL: none): [heads,
 * 2 * rel_span - 1], the score bias of key j seen from query i at
 * rel_bias[h * (2 * rel_span - 1) + (j - i) + rel_span - 1]; sequences are <= rel_span. */
int hs__cpu_attention(const float *qkv, float *ctx, const int32_t *offsets, int n_seqs,
                      const struct hs_attn_shape *a, float *scratch, int seq_max, int threads,
                      const float *rel_bias, int rel_span);
int64_t hs__cpu_attn_scratch_floats(int head_dim, int seq_max);
/* Whether hs__cpu_attention on this CPU adds a shape's qkv_bias itself (the f32 AVX-512 kernel,
 * without a relative bias), so the QKV layer can leave it out. hs__cpu_attention returns -1 for a
 * qkv_bias it would not add; else 0. */
int hs__cpu_attn_takes_bias(const struct hs_attn_shape *a, int has_rel_bias);

/* Pooling: mean over each sequence's tokens, its first token (CLS) or its last. */
void hs__cpu_pool(const float *x, float *out, const int32_t *offsets, int n_seqs, int hidden,
                  enum hs_pool_mode mode, int threads);

/* SPLADE pooling (HS_POOL_SPLADE): for each sequence i, out[i][v] = max over its tokens of
 * log(1 + relu(z[v])), z = dec(LN(act(dense(x)))) + b_dec, the masked-LM head (act: enum
 * hs_act_fn; LayerNorm with eps). out is [n_seqs, vocab]. Tokens go through the head
 * HS_CPU_SPLADE_ROWS at a time in scratch (hs__cpu_splade_scratch_floats floats). 0, or -1 when
 * a GEMM fails. */
#define HS_CPU_SPLADE_ROWS 16
int64_t hs__cpu_splade_scratch_floats(int hidden, int vocab);
int hs__cpu_splade(const float *x, float *out, const int32_t *offsets, int n_seqs, int hidden,
                   int vocab, const float *w_dense, const float *b_dense, const float *ln_g,
                   const float *ln_b, const float *w_dec, const float *b_dec, int act, float eps,
                   float *scratch, int threads);

/* out[i] /= max(||out[i]||, 1e-12) */
void hs__cpu_l2_normalize(float *x, int rows, int n, int threads);

/* Activation in place: GELU (erf or tanh), ReLU or SiLU. */
void hs__cpu_activation(float *x, int64_t n, enum hs_act_fn act);
/* s[j] = exp(s[j] - mx) for j < n (the softmax numerators); returns their sum. */
float hs__cpu_exp_sub_sum(float *s, int n, float mx);
/* Tests: run the vector math above at width 0 (SSE2), 1 (AVX2 + FMA) or 2 (AVX-512), at most
 * what this CPU has (-1: the best it has, the default); returns the width now used. */
int hs__cpu_vmath_use(int width);

/* One (sequence, head) of attention with AVX-512 blocking (attention_avx512.c); head sizes 32
 * and 64 only: returns -1 (and does nothing) otherwise. */
int hs__cpu_attn_avx512(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                        float *scratch);
/* The same adding bias (the QKV layer's, [3 * hidden]; NULL: none) to q, k and v as it reads
 * them: the same bits as a bias pass over the rows first. */
int hs__cpu_attn_avx512_bias(const float *qkv, float *ctx, int t0, int len, int h, int hidden,
                             int d, const float *bias, float *scratch);
int64_t hs__cpu_attn_avx512_scratch_floats(int head_dim, int seq_max);
/* The same with AVX2 + FMA blocking (attention_avx2.c), for head sizes that are multiples of 16:
 * the path of machines without AVX-512; returns -1 (and does nothing) for other sizes. */
int hs__cpu_attn_avx2(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                      float *scratch);
int64_t hs__cpu_attn_avx2_scratch_floats(int head_dim, int seq_max);
/* The same with Q.K^T in int8 (AVX-512 VNNI: each query and key quantized per (token, head),
 * symmetric, vpdpbusd), fp32 softmax, and P.V in int16 (P in 15 bits, V in int8 steps per
 * channel; fp32 past 512 keys) (attention_avx512.c), in the same scratch: the int8 lanes'
 * attention where the CPU has no bf16 dot product; -1 for other head sizes. */
int hs__cpu_attn_q8(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                    float *scratch);
/* The same with bf16 Q.K^T and P.V and fp32 softmax (attention_lowp.c, avx512_bf16), in the same
 * scratch; -1 for other head sizes. */
int hs__cpu_attn_bf16(const float *qkv, float *ctx, int t0, int len, int h, int hidden, int d,
                      float *scratch);

/* Rotary positions (NeoX halves). cs: [positions, rot_dim], cos of position p and frequency i
 * at cs[p * rot_dim + i], its sin at cs[p * rot_dim + rot_dim / 2 + i] (i < rot_dim / 2), made
 * by hs__cpu_rope_table with HF's float32 arithmetic (frequencies divided by div when it is
 * positive and not 1). hs__cpu_rope rotates the first rot_dim
 * dims of each of the n_heads heads at the start of every row (stride floats apart) of the
 * tokens [offsets[0], offsets[n_seqs]), each at its position in its sequence. */
void hs__cpu_rope_table(float *cs, int positions, int rot_dim, float theta, float div);
void hs__cpu_rope(float *qkv, const int32_t *offsets, int n_seqs, int stride, int n_heads,
                  int head_dim, int rot_dim, const float *cs, int threads);

/* dst = N(src) per row of width n: LayerNorm (beta may be NULL) or RMSNorm; g NULL: a copy
 * (an identity norm). dst may be src. */
void hs__cpu_norm(float *dst, const float *src, const float *g, const float *beta, int rows, int n,
                  float eps, enum hs_norm_kind kind, int threads);
/* x += y (+ bias; bias may be NULL), per row of width n. */
void hs__cpu_residual_add(float *x, const float *y, const float *bias, int rows, int n,
                          int threads);
/* RMSNorm with weight g [head_dim] of each of n_heads heads at the start of rows t_begin .. t_end
 * (stride floats apart), in place (qk-norm). */
void hs__cpu_head_rms(float *x, int t_begin, int t_end, int stride, int n_heads, int head_dim,
                      const float *g, float eps, int threads);

/* Gated FFN: ug [rows, 2n] is up | gate; out[r, j] = act(gate[r, j]) * up[r, j]. Overwrites the
 * gate half. */
void hs__cpu_glu(float *ug, float *out, int rows, int n, enum hs_act_fn act, int threads);

/* Small-M GEMM with weights packed once (gemm_small.c; AVX-512, or AVX2 + FMA). */
int hs__cpu_small_gemm_available(void);
/* The packed panels' width in columns on this CPU: 32 (AVX-512), 24 (AVX2), 0 (neither). */
int hs__cpu_small_gemm_panel(void);
/* Up to how many rows it beats oneDNN's sgemm on this CPU's ISA class; 0 where unavailable. */
int hs__cpu_small_gemm_rows_default(void);
/* Up to how many inputs (k) a layer with an activation takes it at every batch size on this CPU
 * (gemm_small.c); 0: none does. */
int hs__cpu_small_gemm_act_k_default(void);
/* Packs w [n, k] into k-major panels of hs__cpu_small_gemm_panel() columns; free with
 * hs_free_aligned. NULL when out of memory. */
float *hs__cpu_pack_weights(const float *w, int n, int k);
/* y[rows, n] = x[rows, k] * W^T + bias, then activation when act >= 0. pad: scratch of
 * threads * 8 * k floats. */
void hs__cpu_small_gemm(const float *x, const float *packed, const float *bias, float *y, int rows,
                        int n, int k, int act, int threads, float *pad);

#endif
