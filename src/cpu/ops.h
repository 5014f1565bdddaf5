/*
 * ops.h — the elementwise, reduction and attention kernels of a forward pass: the per-ISA
 * kernel table and the ISA-independent drivers built on it (RoPE cache, attention).
 *
 * What it is: rmsnorm, rope, softmax, silu/swiglu, add/mul/scale/acc/axpy, argmax, top-K and
 * attention over a KV cache, as used by the llama / qwen3 forward passes. What it is not:
 * matrix multiplication (matmul.h) or anything that allocates: every kernel works on
 * caller-owned buffers, and attention takes its scratch from the caller.
 *
 * Dimension legend (used in every ops file):
 *   n          elements of a row (hidden size, vocabulary, ...)
 *   head_dim   elements of one attention head (d)
 *   n_head     query heads; n_head_kv key/value heads (GQA: n_head = group * n_head_kv)
 *   n_rot      leading dims of each head that RoPE rotates (partial rotary: n_rot < head_dim)
 *   n_q        query rows (tokens) of one attention call: 1 = decode, 2..64 = verify/draft
 *   n_kv       rows of the KV cache visible to the call
 *   q          [n_q][n_head][head_dim] f32 (rows q_stride floats apart)
 *   K, V       [n_kv][n_head_kv][head_dim] in F32 or F16 (rows k_stride / v_stride bytes apart)
 *   out        [n_q][n_head][head_dim] f32 (rows out_stride floats apart)
 *   T          kv rows per attention tile (SPEX_ATTN_TILE)
 *   R          query (row, head) pairs processed together against one tile
 *
 * Table. Every ISA's table starts as a copy of the scalar one (src/cpu/ref/ops_ref.c, the
 * specification) and the ISA file overwrites what it implements, so no entry is NULL.
 * Kernels may be called on any thread; they hold no state. Unless an entry says otherwise,
 * `out` may alias an input exactly (in place), but not partially overlap it.
 *
 * Accuracy. SIMD kernels compute exp with a polynomial (ops_avx2.c): relative error below
 * 2.4e-7 on [-87, 88] (measured 7.9e-8). tests/test_ops.c checks every kernel against the
 * scalar reference and against double precision with the bounds stated there.
 */
#ifndef SPEX_CPU_OPS_H
#define SPEX_CPU_OPS_H

#include "spex.h"
#include "cpu/api.h"

/* RoPE pairing: NORM rotates (2i, 2i+1) (llama); NEOX rotates (i, i + n_rot/2) (qwen, gpt-neox). */
typedef enum spex_rope_mode {
    SPEX_ROPE_NORM = 0,
    SPEX_ROPE_NEOX = 2,   /* ggml's rope type id for neox */
} spex_rope_mode;

#define SPEX_ROPE_MAX_ROT 1024   /* largest n_rot the on-stack helpers accept */

typedef struct spex_ops_kernels {
    spex_isa isa;

    /* out[i] = x[i] / sqrt(mean(x^2) + eps) * (weight ? weight[i] : 1). */
    void (*rmsnorm)(const float *x, const float *weight, float *out, int64_t n, float eps);

    /* In place on one token's row [n_head][head_dim]: rotates the first n_rot dims (even) of
     * each head by the angles of `cs`, the cache filled by spex_rope_cache for the token's
     * position: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i), i < n_rot/2. For pair (a, b):
     * a' = a cos - b sin, b' = a sin + b cos. Dims n_rot..head_dim-1 are untouched. */
    void (*rope)(float *x, int n_head, int head_dim, int n_rot, spex_rope_mode mode, const float *cs);

    /* In place: x[i] = x[i] * scale + (mask ? mask[i] : 0), then softmax. Stable (subtracts
     * the max); entries at -inf become exactly 0; a row that is all -inf becomes all 0. */
    void (*softmax)(float *x, int64_t n, float scale, const float *mask);

    /* out = x * sigmoid(x);  swiglu: out = silu(gate) * up. */
    void (*silu)(const float *x, float *out, int64_t n);
    void (*swiglu)(const float *gate, const float *up, float *out, int64_t n);

    void (*add)(const float *a, const float *b, float *out, int64_t n);   /* out = a + b  */
    void (*mul)(const float *a, const float *b, float *out, int64_t n);   /* out = a * b  */
    void (*scale)(const float *x, float s, float *out, int64_t n);        /* out = s * x  */
    void (*acc)(float *y, const float *x, int64_t n);                     /* y += x (residual) */
    void (*axpy)(float *y, float a, const float *x, int64_t n);           /* y += a * x   */

    /* Index of the largest element; the first one on ties. NaN ranks below everything.
     * Returns 0 for n <= 0. */
    int64_t (*argmax)(const float *x, int64_t n);
    /* The k largest elements (k = min(k, n), k <= SPEX_TOPK_MAX): idx[j], val[j] for
     * j < k, sorted by value descending, ties by lower index first. NaN ranks as -inf.
     * Returns the count written. O(n) scan with a k-heap behind a SIMD threshold test. */
    int (*topk)(const float *x, int64_t n, int k, int32_t *idx, float *val);

    /* Attention building blocks (the driver spex_attention is written once, in ops.c):
     * max of a row (-inf for n <= 0; NaN ignored); x[i] = exp(x[i] - m) returning the sum
     * (x[i] = -inf gives 0; m must be finite); F16 -> F32. */
    float (*max)(const float *x, int64_t n);
    float (*exp_sum)(float *x, int64_t n, float m);
    void (*cvt_f16_f32)(const uint16_t *src, float *dst, int64_t n);
    /* F32 -> F16 rounded to nearest even, the bits of spex_f32_to_fp16 (NaN stays a NaN): the
     * F16 KV-cache store of every new K/V row. */
    void (*cvt_f32_f16)(const float *src, uint16_t *dst, int64_t n);
    /* n (a multiple of 32) elements of Q8_0 blocks (34 bytes: fp16 d, 32 int8 q) -> f32
     * d * q, the bits of spex_dequantize_row_q8_0_ref (the product is exact: 11 x 8 bits):
     * a Q8_0 KV cache's rows, a tile at a time (ops.c, attn_unit). */
    void (*cvt_q8_0_f32)(const void *src, float *dst, int64_t n);
    /* s[r*lds + t] = dot(q[r*ldq .. +d], k[t*ldk .. +d]) for r < n_q, t < n_k. ahead > 0:
     * while reading row t, also request row t + ahead (a prefetch: it never faults and changes
     * no result; past the call's rows, for the rows of the next call); 0 when k is scratch
     * already in cache. The scalar and NEON kernels ignore it. */
    void (*attn_scores)(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                        int d, float *s, int64_t lds, int ahead);
    /* acc[r*ldacc + i] += sum_t p[r*ldp + t] * v[t*ldv + i] for r < n_q, i < d; ahead as above. */
    void (*attn_accum)(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                       const float *v, int64_t ldv, int d, int ahead);
    /* The same two with F16 K / V rows (ldk, ldv in elements): the bits of cvt_f16_f32 on
     * the rows followed by attn_scores / attn_accum of the same table (the conversion is
     * exact; each element is converted in a register where it is used). Attention reads
     * an F16 cache with these, in place (ops.c, attn_unit). */
    void (*attn_scores_f16)(int n_q, const float *q, int64_t ldq, int n_k, const uint16_t *k, int64_t ldk,
                            int d, float *s, int64_t lds, int ahead);
    void (*attn_accum_f16)(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                           const uint16_t *v, int64_t ldv, int d, int ahead);
} spex_ops_kernels;

#define SPEX_TOPK_MAX 1024

/* The table for an ISA; NULL if that ISA is not compiled in or not on this CPU.
 * spex_ops_get() is the table for spex_cpu_isa() (looked up on each call, so tests can
 * switch ISA between calls). */
const spex_ops_kernels *spex_ops_for(spex_isa isa);
const spex_ops_kernels *spex_ops_get(void);

/* Filled by the kernel files: each overwrites the entries it implements. */
void spex_ops_register_scalar(spex_ops_kernels *k);
void spex_ops_register_avx2(spex_ops_kernels *k);
void spex_ops_register_avx512(spex_ops_kernels *k);
void spex_ops_register_neon(spex_ops_kernels *k);

/* The top-K heap, shared by every ISA's topk (ops_ref.c): begin fills it with the first k
 * elements and returns k clamped to [0, min(n, SPEX_TOPK_MAX)]; push offers element (v, i),
 * where i exceeds every index offered before — it enters only if v is strictly larger than
 * the root val[0] (the worst kept, so val[0] is the SIMD scan's threshold); finish sorts. */
int spex_ops_topk_begin(const float *x, int64_t n, int k, int32_t *idx, float *val);
void spex_ops_topk_push(int32_t *idx, float *val, int k, float v, int32_t i);
int spex_ops_topk_finish(int32_t *idx, float *val, int k);

/* Top-K in pieces (the drafter head's fused top-K): a heap of k entries starts as
 * spex_ops_topk_empty (placeholders: value -inf, index INT32_MAX, below every real element
 * that can enter), takes consecutive pieces x[0 .. n) with indices i0 .. i0 + n - 1 through
 * spex_ops_topk_scan (indices increasing over the calls; elements enter as with
 * spex_ops_topk_push), and several heaps are merged by spex_ops_topk_merge into the best k
 * of their n_in entries, best first, ties by lower index — exactly what one topk over the
 * concatenation gives when no placeholder survives (merge returns how many real entries it
 * wrote; fewer than k means the input had fewer than k elements above -inf). */
void spex_ops_topk_empty(int32_t *idx, float *val, int k);
void spex_ops_topk_scan(const float *x, int64_t n, int32_t i0, int k, int32_t *idx, float *val);
int spex_ops_topk_merge(const int32_t *idx_in, const float *val_in, int n_in, int k, int32_t *idx, float *val);

/* ======================================================================== */
/* Helpers on top of the table                                               */
/* ======================================================================== */

/* rmsnorm of n_rows rows of n (rows ldx / ldo floats apart), one weight for all rows
 * (qwen3's per-head q/k norm is n_rows = n_head, n = head_dim). */
void spex_rmsnorm_rows(const spex_ops_kernels *k, const float *x, int64_t ldx, const float *weight,
                       float *out, int64_t ldo, int64_t n_rows, int64_t n, float eps);

/* RoPE angles for one position: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i), i < n_rot/2,
 * theta_i = pos * freq_scale * freq_base^(-2i / n_rot), computed in double. Fill once per
 * token and reuse for every layer (and for q and k). freq_scale 1 means no scaling. n_rot <=
 * SPEX_ROPE_MAX_ROT (the frequencies go on the stack; a larger n_rot fills only that many). */
void spex_rope_cache(float *cs, int64_t pos, int n_rot, float freq_base, float freq_scale);
/* The same in two steps, for a model that fills caches for many rows: inv[i] =
 * freq_base^(-2i / n_rot) for i < n_rot / 2 once (the pow calls were about half of a cache's
 * cost), then each position's angles from it; the same bits as spex_rope_cache. */
void spex_rope_freqs(double *inv, int n_rot, float freq_base);
void spex_rope_cache_freqs(float *cs, int64_t pos, int n_rot, float freq_scale, const double *inv);
/* Convenience: cache on the stack + table rope. n_rot <= SPEX_ROPE_MAX_ROT. */
void spex_rope(const spex_ops_kernels *k, float *x, int n_head, int head_dim, int n_rot,
               spex_rope_mode mode, int64_t pos, float freq_base, float freq_scale);

/* ---- attention over a KV cache ---------------------------------------------------------- */

/* T = 128: each tile's online-softmax step (a max, an exp-sum and maybe a rescale per query
 * row and head) and its score blocks' set-up are paid a quarter as often as with 32, and a
 * tile's K and V (128 rows of one 128-wide F16 head: 32 KiB each) still stay in L2 for the
 * unit's query rows: one layer's attention over 2048 rows runs 1.1-1.2x faster for 1 and 8
 * query rows, the model's pp8 and decode at depth 2048-8192 1.05-1.25x (docs/performance.md,
 * "Attention and the KV cache at depth"), and one layer over a 16K-row cache in DRAM with 1-2
 * rows is as fast or faster. 256 helped 1 row a little more and 8 rows less. */
#define SPEX_ATTN_TILE 128     /* T: kv rows scored together                            */
#define SPEX_ATTN_QBLOCK 16    /* most query rows per work unit                          */
/* Attention reads the cache ahead: the SIMD attn_scores / attn_accum kernels, while they
 * read K or V row t, request row t + SPEX_ATTN_AHEAD (rows past the call's are the next
 * tile's, or past the cache, which a prefetch never faults on), a line or two at a time, and
 * so does a Q8_0 tile's conversion, so a cache in DRAM streams during the arithmetic. With
 * the hardware prefetchers alone a 16K-row cache runs 1.3x (one query row) to 1.6x (two)
 * slower; requesting a whole tile at once, 32 rows of K and V in a burst, does not help
 * (docs/performance.md, "Attention and the KV cache at depth"). 32 rows is a quarter of a
 * tile: 64 and 128 rows ahead made one query row over an LLC-resident cache 1.1-1.2x
 * slower, and from DRAM were not measured apart from the host's noise; requesting a tile's
 * V rows during its K pass did not help either. */
#define SPEX_ATTN_AHEAD 32

/* Requests the 64-byte lines of bytes [0, n) of row for L1: that read-ahead, one helper for
 * ops.c's Q8_0 conversion and the x86 kernels. always_inline: as a plain static inline
 * function GCC 12 dropped every call (one whose only effect is a prefetch passes for const). */
static inline __attribute__((always_inline)) void spex_attn_ahead(const void *row, size_t n) {
    const uintptr_t p = (uintptr_t)row;
    for (uintptr_t a = p & ~(uintptr_t)63; a < p + n; a += 64) __builtin_prefetch((const void *)a, 0, 3);
}

typedef struct spex_attn_args {
    int n_q, n_head, n_head_kv, head_dim;
    const float *q;            /* [n_q][n_head][head_dim], rows q_stride floats apart     */
    int64_t q_stride;
    const int32_t *q_pos;      /* [n_q] position of each query row                         */

    spex_type kv_type;         /* SPEX_TYPE_F32, F16, or Q8_0 (head_dim a multiple of 32)  */
    int n_kv;
    const void *k, *v;         /* [n_kv][n_head_kv][head_dim], rows k_/v_stride bytes apart */
    size_t k_stride, v_stride;
    size_t k_head_stride, v_head_stride; /* bytes from one kv head's slice to the next's;
                                * 0: head_dim elements (the heads side by side in a row).
                                * A head-major cache ([n_head_kv][n_kv][head_dim]) passes
                                * row strides of head_dim elements and head strides of a
                                * head's whole region: each head's rows are then one stream. */
    const int32_t *kv_pos;     /* [n_kv] position of each kv row; NULL: row i is position i.
                                * A negative position marks an empty slot: never seen.    */

    float scale;               /* 0: 1/sqrt(head_dim)                                      */
    bool causal;               /* query at p sees kv positions <= p                        */
    int32_t window;            /* > 0: also only kv positions > p - window (sliding window) */
    bool window_symmetric;     /* with window > 0, also only kv positions < p + window: the
                                * drafter's |q - k| < W rule for a non-causal block (dflash2.md §9) */

    float *out;                /* [n_q][n_head][head_dim], rows out_stride floats apart    */
    int64_t out_stride;
} spex_attn_args;

/* Checks the arguments (shapes, strides, types): SPEX_ERR_INVALID_ARG with a message. */
spex_status spex_attn_check(const spex_attn_args *a, spex_error *err);
/* Floats of scratch each thread needs for spex_attention (same for every thread). */
size_t spex_attn_scratch_floats(const spex_attn_args *a);
/* Computes the part of the output owned by thread ith of nth (call it from every thread of
 * a pool task, or with 0, 1 single-threaded). Work units are (kv head, block of query
 * rows): all the query heads of a kv head (the GQA group) and up to SPEX_ATTN_QBLOCK query
 * rows are scored against each K/V tile while it is in cache, so the cache is read once per
 * unit, not once per query row. Single pass, online softmax, f32 accumulation. A query row
 * that sees no kv row gets zeros. Results do not depend on ith/nth. Parallelism is at most
 * n_head_kv * n_q units (the KV length is not split across threads), so a single-row decode
 * with fewer kv heads than threads leaves threads idle. */
void spex_attention(const spex_ops_kernels *k, const spex_attn_args *a, int ith, int nth,
                    float *scratch);

#endif
