/*
 * forward_internal.h — the phase machinery and the row-wise prologues that the dense forward
 * (forward.c) and the qwen35 forward (forward_qwen35.c) share.
 *
 * What it is: a phase is one spex_pool_run: a prologue of row-wise ops on the rows this
 * thread owns, then (after a barrier) one matmul with every row of the batch (forward.c's
 * file comment has the threading model). What it is not: a public or a stable interface.
 */
#ifndef SPEX_MODEL_FORWARD_INTERNAL_H
#define SPEX_MODEL_FORWARD_INTERNAL_H

#include "model/model.h"

typedef void (*pre_fn)(spex_context *c, const fwd_phase *ph, int ith, int nth);

struct fwd_phase {
    pre_fn pre;                    /* row-wise prologue, or NULL                         */
    bool pre_own_rows;             /* pre writes only row_split's rows of X (set by run) */
    /* Set by the caller for the next run only (run_phase_multi copies them into mm[0] and
     * clears them): spex_matmul_args slice_align and conv_cols (cpu/matmul.h). */
    int64_t next_slice_align;
    bool next_conv_cols;
    int layer;
    const spex_ops_kernels *ops;   /* fetched once per forward                            */
    int n_mm;                      /* matmuls of the phase (same activations), 0..       */
    spex_matmul_args mm[SPEX_MATMUL_MULTI_MAX]; /* ... (rows in sorted order)            */
};

static inline void row_split(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1) {
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

/* Runs one phase: prologue `pre` (may be NULL), then Y[n_rows][w.n_out] = X · Wᵀ when w is
 * non-NULL and n_rows > 0. */
void spex_fwd_run_phase(spex_context *c, fwd_phase *ph, pre_fn pre, int layer, const model_weight *w,
                        const float *X, int64_t n_rows, float *Y);
/* The same with n_w (<= SPEX_MATMUL_MULTI_MAX) matrices over the same X: Y[i] = X · w[i]ᵀ in
 * one pool run (one activation conversion, one barrier) when their activation types agree,
 * else the first with the prologue and the others in phases of their own. */
void spex_fwd_run_phase_multi(spex_context *c, fwd_phase *ph, pre_fn pre, int layer, const model_weight *const *w,
                              float *const *Y, int n_w, const float *X, int64_t n_rows);
/* Copies residual row r into tap slot `slot` (batch order), sanitised when tap_clamp. */
void spex_fwd_tap_row(spex_context *c, int slot, int64_t r);
/* Layer input (embedding or += previous output), tap, xn = RMSNorm(x; attn_norm). */
void spex_fwd_pre_attn_norm(spex_context *c, const fwd_phase *ph, int ith, int nth);
/* Stores row r's k and v (b.k, b.v) at (layer, seq, pos) of the KV cache. */
void spex_fwd_store_kv(spex_context *c, int l, int64_t r, int32_t seq);
/* Row r of sequence seq: per-head QK-norm (when the model has it) of b.q and b.k, RoPE at the
 * row's position, and the K/V store of layer ph->layer. */
void spex_fwd_qk_rope_store(spex_context *c, const fwd_phase *ph, int64_t r, int32_t seq);
/* The sequence of sorted row r. */
int32_t spex_fwd_seq_of_row(const spex_context *c, int64_t r);
/* Attention of every sequence's rows (b.q) over its cache region of layer ph->layer into
 * b.att; all threads take part. The rows' K/V must be stored and a barrier passed. */
void spex_fwd_attend(spex_context *c, const fwd_phase *ph, int ith, int nth);
/* x += b.tmp; xn = RMSNorm(x; ffn_norm). */
void spex_fwd_pre_ffn_norm(spex_context *c, const fwd_phase *ph, int ith, int nth);
/* gate = silu(gate) * up. */
void spex_fwd_pre_swiglu(spex_context *c, const fwd_phase *ph, int ith, int nth);
/* x += b.tmp; tap id N; hout = RMSNorm(x; output_norm) for the rows that want logits. */
void spex_fwd_pre_output(spex_context *c, const fwd_phase *ph, int ith, int nth);

/* The SwiGLU FFN of layer l (three phases: gate with the ffn_norm prologue, up, down with the
 * swiglu prologue) and the output head (x += last FFN, tap N, output_norm, logits). */
void spex_fwd_ffn(spex_context *c, fwd_phase *ph, int l);
void spex_fwd_head(spex_context *c, fwd_phase *ph);

#endif
