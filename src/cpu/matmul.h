/*
 * matmul.h — weight × activation matrix multiplication: the kernel table and the driver.
 *
 * Dimension legend (used in every matmul file):
 *   n      inner dimension: elements per weight row = elements per activation row
 *   n_out  weight rows (output features)
 *   n_rows activation rows (tokens): 1 = decode, 2..64 = speculative verify / drafting,
 *          > 64 = prompt batches
 *   W      [n_out][n] in the weight type (ggml layout, rows contiguous)
 *   X      [n_rows][n] f32, row stride ldx floats
 *   Y      [n_rows][n_out] f32, row stride ldy floats:  Y[r][o] = sum_i W[o][i] * X[r][i]
 *
 * As in ggml, activations are first converted to the weight type's "activation type"
 * (Q8_0 for q4_0/q5_0/q8_0, Q8_1 for q4_1/q5_1, Q8_K for the K-quants, F32 for float
 * weights), then integer (or float) dot products run block by block.
 *
 * Kernel contract (spex_dot_fn): a tile of nw weight rows × nx activation rows,
 *   y[j*ldy + i] = dot(W row i, X row j)   for 0 <= i < nw, 0 <= j < nx,
 * with w pointing at the first weight row (rows w_stride bytes apart) and x at the first
 * converted activation row (rows x_stride bytes apart). Any nw >= 1, nx >= 1 must work;
 * kernels block internally so that each weight block is loaded once per tile and used for
 * all nx rows (the small-batch regime streams weights once for all rows).
 * The scalar kernels are the specification; SIMD kernels must agree within the per-type
 * bounds stated in tests/test_matmul.c. Each kernel also computes a given output with the
 * same arithmetic whatever nw, nx and the output's place in the tile (tests/test_matmul.c
 * checks bit equality), so a result depends neither on how the driver splits the work nor
 * on how many activation rows share the call: a speculative verify pass reproduces
 * token-by-token decoding exactly.
 */
#ifndef SPEX_CPU_MATMUL_H
#define SPEX_CPU_MATMUL_H

#include "spex.h"
#include "cpu/api.h"

typedef void (*spex_dot_fn)(int64_t n, const void *w, size_t w_stride, int nw,
                            const void *x, size_t x_stride, int nx, float *y, size_t ldy);
/* Converts one f32 row of n elements to an activation type (n multiple of its block). */
typedef void (*spex_act_quant_fn)(const float *x, void *dst, int64_t n);

typedef struct spex_matmul_kernels {
    spex_isa isa;
    spex_dot_fn dot[SPEX_TYPE_COUNT];               /* indexed by weight type     */
    spex_act_quant_fn act_quant[SPEX_TYPE_COUNT];   /* indexed by activation type */
    /* Kernels for weights in the R16 layout (below), same contract with nw a multiple of 16
     * and w at the start of a 16-row group; NULL for types without one. r16_fast[t]: this
     * ISA reads R16 faster than the ggml layout, so loaders should repack type t. */
    spex_dot_fn dot_r16[SPEX_TYPE_COUNT];
    bool r16_fast[SPEX_TYPE_COUNT];
} spex_matmul_kernels;

/* ---- The R16 weight layout (load-time repack; docs/performance.md "R16") ----------------
 * A matrix whose row count is a multiple of 16 is stored as groups of 16 rows, each group in
 * the bytes the 16 rows took before, block by block: unit b of a group (at byte 16 * bsize * b
 * of the group) holds the 16 rows' block b field by field, each field's 16 copies one after
 * the other (row l's at l * field size). Fields: for Q4_K (36) and Q5_K (44) every 32-bit word
 * of the block, so 64 bytes at unit + 64k are word k of the 16 rows; for Q6_K its first 52
 * words (ql, qh, the scale bytes) the same, then the 16 fp16 d (a 3360-byte unit, so every
 * other unit is 32 bytes off 64-byte alignment); for Q8_0 / Q4_0 / Q4_1 /
 * Q5_0 / Q5_1 the fp16 scale (then the fp16 min), the 32-bit qh word (Q5), and the code bytes
 * as words (Q8_0: 32 bytes, eight words; the others 16 bytes, four). One SIMD lane per row:
 * what the AVX-512 kernels otherwise build with transposes or gathers every block. Same size as the ggml layout; only matmul reads it. */
bool spex_r16_supported(spex_type t);
/* dst <- src (ggml layout, n_out x n, n_out % 16 == 0) in the R16 layout; src != dst. */
void spex_r16_pack(spex_type t, const void *src, void *dst, int64_t n_out, int64_t n);
/* Copies block b of row l (< 16) of the 16-row group that starts at g16 (R16 data) into blk
 * (one block, ggml layout). */
void spex_r16_get_block(spex_type t, const void *g16, int l, int64_t b, void *blk);

/* The activation type a weight type's dot product consumes (SPEX_TYPE_F32 for float
 * weights); SPEX_TYPE_COUNT if the weight type has no matmul. */
spex_type spex_matmul_act_type(spex_type wtype);

/* The table for an ISA (every entry filled: an ISA without its own kernel for a type
 * falls back to the scalar one). NULL if that ISA is not compiled in or not on this CPU.
 * spex_matmul_kernels_get() is the table for spex_cpu_isa(). */
const spex_matmul_kernels *spex_matmul_kernels_for(spex_isa isa);
const spex_matmul_kernels *spex_matmul_kernels_get(void);

/* ---- per-ISA registration of the 32-element-block and float kernels (matmul.c calls
 * these while building a table; each overwrites the entries it implements). ------------ */

/* Feature bits of a table variant (AVX-512; VNNI also AVX2, as AVX-VNNI). The default table uses what the CPU has;
 * tests build the other variants with spex_matmul_kernels_build to check them too. */
#define SPEX_MATMUL_FEAT_VNNI 1u   /* vpdpbusd (AVX512_VNNI; AVX2: AVX-VNNI) instead of vpmaddubsw+vpmaddwd */
#define SPEX_MATMUL_FEAT_AMX 2u    /* with VNNI: AMX-INT8 tiles, R16 Q4_K/Q5_K from 9 rows  */

void spex_matmul_register_scalar(spex_matmul_kernels *k);   /* ref/dot_ref.c                 */
void spex_matmul_register_avx2(spex_matmul_kernels *k);     /* arch/x86/avx2/dot_avx2.c      */
void spex_matmul_register_avx512(spex_matmul_kernels *k, unsigned feat); /* avx512/dot_avx512.c */

/* Streaming-read probe of `spex bench kernels`: reads `bytes` from buf as `streams` (1..8)
 * equal consecutive parts read in lockstep, 256 bytes of each per step (several streams
 * keep more DRAM requests in flight, as the kernels' interleaved rows do), with the widest
 * loads of the ISA in use; bytes beyond a multiple of 256 * streams are not read. Returns
 * a value derived from every byte read, so the reads cannot be optimized away. */
uint64_t spex_matmul_stream_probe_n(const void *buf, size_t bytes, int streams);
/* The same with one stream. */
uint64_t spex_matmul_stream_probe(const void *buf, size_t bytes);
/* Int8 dot-product ceiling of `spex bench kernels --cached`: `steps` rounds of the ISA's
 * widest int8 multiply-add instruction into independent sums, from registers only (bcast 0:
 * the arithmetic pipes' limit) or with each activation dword broadcast from memory (bcast 1:
 * the operand form of the integer tile kernels, 8 activation rows sharing one weight word).
 * *macs = multiply-adds done, 0 when the ISA in use has no such probe (AVX-512 VNNI only
 * for now); the return value derives from every sum, so none is optimized away. */
uint64_t spex_matmul_dot_peak(uint64_t steps, int bcast, uint64_t *macs);
uint64_t spex_dot_peak_avx512_vnni(uint64_t steps, int bcast, uint64_t seed, uint64_t *macs); /* dot_avx512.c */
uint64_t spex_stream_read_avx2(const void *buf, size_t bytes, int streams);    /* dot_avx2.c   */
uint64_t spex_stream_read_avx512(const void *buf, size_t bytes, int streams);  /* dot_avx512.c */

/* Fills *k with the table for `isa` restricted to the feature bits `feat` (scalar entries
 * where the ISA has no kernel, K-quants included). false (and *k untouched) if that ISA is
 * not compiled in or not on this CPU, or `feat` asks for a feature the CPU lacks. */
bool spex_matmul_kernels_build(spex_matmul_kernels *k, spex_isa isa, unsigned feat);

/* ======================================================================== */
/* The driver: Y = X * W^T for the three regimes (matmul.c)                  */
/* ======================================================================== */

/* Arguments of one matrix multiplication (shapes: see the legend above).
 * W rows are contiguous (row i at W + i * spex_type_row_size(wtype, n)); X and Y are
 * row-major f32 with strides ldx >= n and ldy >= n_out (in floats); ws is a caller-owned
 * workspace of spex_matmul_ws_size(wtype, n, n_rows) bytes (any alignment; NULL if 0),
 * which receives the converted activations. Nothing is allocated per call. */
typedef struct spex_matmul_args {
    spex_pool *pool;      /* pool the task runs on; NULL: single thread (ith 0, nth 1)    */
    spex_type wtype;      /* weight type                                                 */
    const void *W;        /* [n_out] rows of the weight type                             */
    int64_t n_out;        /* weight rows = output columns                                */
    int64_t n;            /* inner dimension (multiple of the weight and activation block) */
    const float *X;       /* [n_rows][ldx]                                               */
    int64_t ldx;
    int64_t n_rows;       /* activation rows                                             */
    float *Y;             /* [n_rows][ldy], written, never read                          */
    int64_t ldy;
    void *ws;             /* workspace, spex_matmul_ws_size bytes                        */
    bool w_r16;           /* W is in the R16 layout (n_out a multiple of 16)              */
    /* Optional: called by the thread that computed a chunk, right after it, with the chunk's
     * activation rows [r0, r0 + nr) and outputs [o0, o0 + no) — still in that thread's cache,
     * so a consumer (the drafter head's top-K) reads them without a second pass over Y. A
     * thread's chunks come in increasing order of (r0, o0). */
    void (*on_chunk)(void *ctx, int ith, int64_t r0, int64_t nr, int64_t o0, int64_t no);
    void *chunk_ctx;
    /* Optional, read from a[0] of spex_matmul_task_multi, used only where its threads take
     * contiguous ranges (up to 16 activation rows, several threads, no on_chunk):
     * slice_align > 0: the matrices (all with the same n_out) are cut into the nth column
     * slices of spex_matmul_col_split(n_out, slice_align) and thread t's range is slice t of
     * every matrix, so a consumer that splits the outputs' columns the same way (gate and up
     * into SwiGLU) reads what its own thread wrote;
     * conv_cols: phase 1 converts the columns spex_matmul_col_split(n, spex_matmul_col_align)
     * of every row on each thread instead of whole rows, for a producer that wrote X that way. */
    int64_t slice_align;
    bool conv_cols;
} spex_matmul_args;

/* Columns [*c0, *c1) of n for thread ith of nth: whole units of `align` columns, the last
 * thread also takes a partial one. The split of the sliced and column-converted modes. */
void spex_matmul_col_split(int64_t n, int64_t align, int ith, int nth, int64_t *c0, int64_t *c1);
/* The column unit of wtype's activation conversion: its block size, at least 16 (the R16
 * row groups), so converted blocks and output slices line up. */
int64_t spex_matmul_col_align(spex_type wtype);
/* True when the optional modes above apply to a run of n_rows activation rows on nth threads
 * (without on_chunk): the regime of decode, drafting and verification. */
bool spex_matmul_ranged_regime(int64_t n_rows, int nth);

/* Workspace bytes for the converted activations (0 for float weights, which read X
 * directly, and for types without a matmul). */
size_t spex_matmul_ws_size(spex_type wtype, int64_t n, int64_t n_rows);

/* The task body, run on every thread of a spex_pool_run (ith in [0, nth)). Assumes
 * arguments validated by spex_matmul_check. Phase 1 converts the activation rows (split
 * over threads), then a barrier; phase 2 hands out chunks of (activation-row tile ×
 * output rows) through spex_pool_next_chunk (with up to 4 activation rows and no on_chunk:
 * contiguous ranges per thread, spex_pool_next_chunk_ranged), so the pool's chunk state must
 * be fresh when the task starts (the start of a spex_pool_run, or after
 * spex_pool_chunk_reset), and a later chunked phase in the same run must reset it again. With pool NULL it runs
 * everything on the calling thread (nth must be 1). There is no barrier at the end: a
 * larger task reads Y only after its own barrier. The result does not depend on nth:
 * every output is computed by the same kernel code whatever the split. */
void spex_matmul_task(const spex_matmul_args *a, int ith, int nth);

/* Several matrices over the same activations in one task (a transformer layer's Q/K/V, or
 * gate/up): the rows are converted once (into a[0].ws), one barrier, then one chunk sequence
 * over all the matrices' outputs, so the pool is started and synchronised once instead of
 * n_mm times. Each a[i] must satisfy spex_matmul_check and spex_matmul_can_share(a, a + i);
 * 1 <= n_mm <= SPEX_MATMUL_MULTI_MAX. Every output is computed exactly as spex_matmul_task
 * computes it alone. */
#define SPEX_MATMUL_MULTI_MAX 4
void spex_matmul_task_multi(const spex_matmul_args *a, int n_mm, int ith, int nth);
/* True when spex_matmul_task_multi(a, ..., ith, nth) starts by converting the activation
 * rows [n_rows * ith / nth, n_rows * (ith + 1) / nth) on thread ith and then waits at a pool
 * barrier before any thread reads X (every quantized activation type); false when X is read
 * in place (float weights). A caller whose own rows of X were written by the same thread in
 * the same split may then skip its barrier before the matmul. */
bool spex_matmul_converts_own_rows(const spex_matmul_args *a);
/* True when a->conv_cols is in force on nth threads (spex_matmul_ranged_regime, a pool, no
 * on_chunk); then *c0, *c1 (when non-NULL) are thread ith's columns of every row of X, the
 * part its conversion reads: a producer that writes X by the same split calls this too. */
bool spex_matmul_own_cols(const spex_matmul_args *a, int ith, int nth, int64_t *c0, int64_t *c1);
/* The same for a[0].conv_cols: thread ith converts its spex_matmul_own_cols columns of every
 * row, then waits at the barrier; false for float weights (X read in place) and where
 * conv_cols is not in force. */
bool spex_matmul_converts_own_cols(const spex_matmul_args *a, int nth);
/* True when b can join a in spex_matmul_task_multi: same X, ldx, n, n_rows, pool and
 * activation type. */
bool spex_matmul_can_share(const spex_matmul_args *a, const spex_matmul_args *b);

/* SPEX_OK if the arguments are consistent (type has kernels, n a multiple of the blocks,
 * strides, non-NULL pointers, workspace given when needed); SPEX_ERR_UNSUPPORTED for a
 * weight type without kernels, SPEX_ERR_INVALID_ARG otherwise. */
spex_status spex_matmul_check(const spex_matmul_args *a);

/* Validates, then runs spex_matmul_task on `pool` (or on the calling thread if NULL;
 * a->pool is ignored). */
spex_status spex_matmul(spex_pool *pool, const spex_matmul_args *a);

#endif
