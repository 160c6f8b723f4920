/* hetserve — reduced-precision linear layers of the CPU engine (int8, bf16). Internal to
 * engine/cpu.
 *
 * y[rows, n] = x[rows, k] * W[n, k]^T + bias, then an activation, with the GEMM in int8 or bf16
 * and everything around it in fp32. bf16, and int8 on AMX CPUs, run oneDNN's matmul primitive
 * (AMX tiles, AVX-512 BF16); int8 elsewhere runs the engine's own u8 x s8 kernels (qgemm.c:
 * AVX-512 VNNI, or AVX2 without VNNI; hs__ql_own_isa), oneDNN's matmul staying the path for
 * hs__ql_matmul and rows past hs__ql_own_rows:
 *   int8: W is quantized once, symmetric per output channel (sw[j] = max|W[j,:]| / 127; where
 *         the CPU has no int32 dot product of int8, no same-signed pair of a channel's
 *         neighbouring weights above 128 steps together, so that AVX2's int16 pair sums cannot
 *         saturate: hs__ql_weights_make); each row of x is quantized when the layer runs, per
 *         token, so a sequence's result never depends on the rest of its batch: as u8 where
 *         an own kernel runs or the CPU has no int8 dot product, asymmetric (255 steps from the
 *         row's min to its max, zero included, and a zero point: the epilogue takes the
 *         zero point times the weights' column sums off), else as s8, symmetric (max|x| / 127);
 *         the s32 accumulator is scaled back by sx[i].s * sw[j] in a C epilogue, one
 *         pass per row with bias and activation. The GEMM runs in chunks of rows whose
 *         accumulators fit in L2, so the epilogue reads them from cache (a per-token scale is
 *         an [M, 1] broadcast, which oneDNN 2.x's brgemm post-ops do not take).
 *   bf16: W is rounded to bf16 once; x is rounded per call; fp32 accumulation; bias and
 *         activation are oneDNN post-ops of the matmul, which writes y itself.
 * Two layers in a row (the FFN) can be chained: the first's epilogue writes the second's int8
 * / bf16 input directly, so the fp32 intermediate never goes to memory (hs__ql_run).
 *
 * Weights are packed once, at stage prepare, into the blocked layout the primitive wants
 * (the layout does not depend on the number of rows). Primitives depend on the row count: each
 * workspace keeps a cache of them keyed by (dtype, n, k, rows rounded up to a bucket,
 * epilogue), made on first use and kept for the workspace's life. Rows past `rows` inside a
 * bucket are computed and ignored: callers give source and accumulator buffers with
 * HS_QL_ROW_PAD spare rows; y is written only for the rows asked.
 */
#ifndef HS_ENGINE_CPU_QLINEAR_H
#define HS_ENGINE_CPU_QLINEAR_H

#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/cpu/kernels.h"

/* Spare rows a caller's buffers need past the rows it computes (the largest bucket rounding). */
#define HS_QL_ROW_PAD 256

/* Packed weights of one linear layer; read-only after hs__ql_weights_make. */
struct hs_ql_weights {
    enum hs_dtype dtype; /* HS_DTYPE_I8 or HS_DTYPE_BF16 */
    int n, k;
    void *packed;      /* blocked layout chosen by oneDNN; with `own`, made on the first call
                          that runs oneDNN's matmul (NULL until then) */
    float *scale;      /* int8: [n] per-channel weight scales; bf16: NULL */
    float *inv_smooth; /* int8 with smoothing: [k] multipliers of the input before quantizing */
    float act_scale;   /* int8: > 0: static per-tensor input scale; 0: per token, dynamic */
    float *comp;       /* int8 with a u8 source (hs__ql_src_u8): [n] scale times the column sum
                          of the quantized weights (what a step of the source's zero point adds to
                          an accumulator, dequantized); else NULL */
    int8_t *own;       /* int8 with a u8 source: the weights packed for the engine's own
                          kernels (hs__cpu_qgemm), or NULL */
    void *md;          /* the packed layout's memory descriptor (dnnl_memory_desc_t) */
};

/* True when this CPU runs dtype's GEMMs on a fast path (int8: AVX-512 VNNI, AVX-VNNI or AMX,
 * or AVX2's u8 x s8 multiply with reduced-range weights; bf16: AVX-512 BF16 or AMX). */
int hs__ql_dtype_fast(enum hs_dtype dtype);
/* 1 where the int8 source is stored as u8 (asymmetric: the own kernels, or no int8 dot product),
 * 0 for s8. */
int hs__ql_src_u8(void);
/* The own kernel (HS_QGEMM_*, qgemm.c) that runs this CPU's int8 layers: VNNI where the CPU has
 * AVX-512 VNNI and no AMX, AVX2 where it has no int8 dot product; else HS_QGEMM_NONE (oneDNN's
 * matmul runs them). */
int hs__ql_own_isa(void);

/* Quantizes / rounds and packs w [n, k] (fp32). smooth (int8 only, may be NULL): [k] divisors
 * of the input channels; the weights' columns are multiplied by them before quantizing. */
hs_status hs__ql_weights_make(enum hs_dtype dtype, const float *w, int n, int k,
                              const float *smooth, struct hs_ql_weights *out, struct hs_error *err);
void hs__ql_weights_free(struct hs_ql_weights *w);
/* What hs__ql_weights_make allocates for a layer (the memory plan's figure). */
int64_t hs__ql_weights_bytes(enum hs_dtype dtype, int n, int k);

/* A workspace's primitive cache, for up to `slots` threads running layers at once (slot =
 * thread index inside the engine's team). */
struct hs_ql_cache;
hs_status hs__ql_cache_create(int slots, struct hs_ql_cache **out, struct hs_error *err);
void hs__ql_cache_free(struct hs_ql_cache *c);

/* Bytes of quantized-source scratch a layer of width k needs for `rows` rows (+ pad). */
int64_t hs__ql_src_bytes(int rows, int k);

/* Runs the layer on `rows` rows of x with nt threads, on cache slot `slot`.
 * qsrc: >= hs__ql_src_bytes(rows, k) bytes; sx: >= rows + HS_QL_ROW_PAD entries; acc: int8:
 * (rows + HS_QL_ROW_PAD) * n int32; bf16: (rows + HS_QL_ROW_PAD) * n floats (the rows that do
 * not fill a bucket are computed there, then copied to y).
 * Chaining two layers of one dtype (hs__ql_chainable(w, next)): with next given, y is not
 * written; the epilogue writes each finished row as next's input (int8 and its scale into sx,
 * or bf16) into qnext ((rows + HS_QL_ROW_PAD) * n values, not overlapping qsrc or acc); then
 * next runs with x NULL and qsrc = qnext, the same sx, and an acc that does not overlap qnext.
 * The result is that of running the two layers apart (bf16: oneDNN rounds the fused output to
 * bf16 as bf16_row does, to nearest even), without the fp32 intermediate going to memory.
 * Returns 0; 1 (bf16 chains only) when oneDNN refuses the fused bf16 epilogue a chain needs:
 * nothing was written, run the layers apart; -1 when oneDNN fails (message in err). */
int hs__ql_chainable(const struct hs_ql_weights *w, const struct hs_ql_weights *next);
int hs__ql_run(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w, const float *x,
               const float *bias, float *y, int rows, int act, int nt, void *qsrc,
               struct hs_qrow *sx, int32_t *acc, const struct hs_ql_weights *next, void *qnext,
               struct hs_error *err);

/* A residual LayerNorm after the layer (post-LN encoders: the attention output and the FFN's
 * second layer): x[r] = LN(x[r] + y[r] + bias) * g + beta, with y the layer's output row. */
struct hs_ql_resid_ln {
    float *x;                     /* [rows, n]: the residual in, the normalized rows out */
    const float *bias, *g, *beta; /* [n]; bias and beta may be NULL */
    float eps;
};

/* hs__ql_run (int8 only, no activation) with that LayerNorm as the epilogue: each row is
 * dequantized, added to the residual and normalized while its accumulators are in cache, so
 * y never goes to memory. The result equals hs__ql_run into y, then hs__cpu_residual_ln.
 * x NULL: qsrc / sx already hold the quantized input (a chained producer's). Returns 0, or -1
 * (message in err; a bf16 layer is refused: its epilogue runs inside oneDNN). */
int hs__ql_run_resid_ln(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w,
                        const float *x, int rows, int nt, void *qsrc, struct hs_qrow *sx,
                        int32_t *acc, const struct hs_ql_resid_ln *ln, struct hs_error *err);

/* The GEMM of hs__ql_run alone, the same primitive (and cache entry) the layer uses: qsrc holds
 * `rows` (+ pad) rows already quantized (int8) or rounded (bf16); acc receives the s32 (int8) or
 * f32 (bf16) product, rows + HS_QL_ROW_PAD rows of n. No quantization, scaling, bias or
 * activation: for measuring the primitive's own rate (bench/bench_peak.c). Returns 0 or -1. */
int hs__ql_matmul(struct hs_ql_cache *c, int slot, const struct hs_ql_weights *w, void *qsrc,
                  void *acc, int rows, struct hs_error *err);

/* ---- the engine's own u8 x s8 kernels (qgemm.c): AVX-512 VNNI, and AVX2 without VNNI ---- */

enum { HS_QGEMM_NONE = 0, HS_QGEMM_AVX2 = 1, HS_QGEMM_VNNI512 = 2 };
/* The best kernel this CPU runs (HS_QGEMM_*). */
int hs__cpu_qgemm_isa(void);
/* Whether the CPU runs that kernel (AVX2's on a VNNI CPU too: for tests and benchmarks). */
int hs__cpu_qgemm_runs(int isa);
/* The weights' packed copy ([n/16][k/4][16][4] bytes; k a multiple of 4, else NULL), and its
 * size; both kernels read it. */
int8_t *hs__cpu_qgemm_pack(const int8_t *w, int n, int k);
int64_t hs__cpu_qgemm_pack_bytes(int n, int k);
/* The plain [n, k] weights back from the panels. */
void hs__cpu_qgemm_unpack(const int8_t *packed, int n, int k, int8_t *w);
/* acc[rows, n] = x[rows, k] (u8) * W^T (s8) on kernel isa (one hs__cpu_qgemm_runs) with
 * `threads` threads. x is read up to rows rounded up to 4 (a source buffer's padding rows:
 * HS_QL_ROW_PAD); only `rows` rows of acc are written. Exact s32 sums: the result equals
 * oneDNN's u8 x s8 matmul on the same operands (the AVX2 kernel: where pair sums stay within
 * int16, as there). epi (NULL: none) turns each block of sums into fp32 as soon as it is computed
 * (kernels.h: hs__cpu_dequant_block), from L1, instead of a pass over acc after the GEMM. */
struct hs_qgemm_epi;
void hs__cpu_qgemm(int isa, const uint8_t *x, const int8_t *packed, int32_t *acc, int rows, int n,
                   int k, int threads, const struct hs_qgemm_epi *epi);
/* The same as a worksharing loop for the threads of an enclosing parallel region (each calls
 * it); outside one, the caller runs it all. barrier: it ends with the team's
 * barrier; 0 where the region ends right after it (its join is one), a barrier saved: at 1 x 16
 * tokens a batch passes about 70 of them, each a few percent of a layer's GEMM. */
void hs__cpu_qgemm_team(int isa, const uint8_t *x, const int8_t *packed, int32_t *acc, int rows,
                        int n, int k, const struct hs_qgemm_epi *epi, int barrier);

/* Up to how many rows hs__ql_run takes that kernel instead of oneDNN's matmul where the weights
 * have its panels (0: never); hs__ql_set_own_rows overrides the measured default (< 0: back to
 * it). Process-wide: for tests and benchmarks. */
int hs__ql_own_rows(void);
void hs__ql_set_own_rows(int rows);

/* One row (times mul, when given) quantized as an int8 layer's input is: u8 given, asymmetric
 * (lo = min(row min, 0), hi = max(row max, 0), s = (hi - lo) / 255, zp = round(-lo * 255 /
 * (hi - lo)), q = clamp(round(x * 255 / (hi - lo)) + zp, 0, 255)); else s8, symmetric (s =
 * max|x| / 127, q = round(x * 127 / max|x|)). Returns s and s * zp ({0, 0} for a zero row, every
 * q then the zero point 0). isa 2: the AVX-512 quantizer, 1: AVX2, 0: the portable one (all
 * round to nearest even); the caller checks that the CPU has the ISA. For tests. */
struct hs_qrow hs__ql_quant_row(int isa, const float *x, const float *mul, uint8_t *q, int k,
                                int u8);

#endif
