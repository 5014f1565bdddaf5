/*
 * model.h — internals of the target models: the loaded model (weights as views into the
 * GGUF mapping), the context (KV cache, activation buffers, outputs) and the forward pass.
 *
 * What it is: the structures shared by model.c (loading, validation), context.c (context
 * and KV cache API) and forward.c (the dense transformer forward of llama / qwen3). What it
 * is not: public API (include/spex.h "Models" is the contract) or kernels (src/cpu).
 *
 * Dimension legend (every model file):
 *   E   n_embd          H    n_head         H_kv  n_head_kv     hd  head_dim
 *   F   n_ff            V    n_vocab        N     n_layer       kv_dim = H_kv * hd
 *   n   tokens of the current batch (<= n_batch_max)            C  n_ctx_per_seq
 *   S   n_seq_max       n_out  tokens of the batch that want logits (<= n_outputs_max)
 *
 * KV cache layout. K and V are separate arrays of kv_type, each [N][S][C][kv_dim]: layer l,
 * sequence s, position p is row ((l * S + s) * C + p). A sequence's rows are contiguous in
 * every layer, so attention reads one region per (layer, sequence) with kv_pos = NULL (row p
 * is position p), truncation only changes seq_len[s], and a prefix copy is N*2 memcpys.
 *
 * Row order inside a forward. The batch may interleave sequences; the forward first sorts
 * its tokens by sequence (stable counting sort), and every activation buffer holds rows in
 * that order (row r is batch token perm[r]). Matmuls and elementwise ops do not care, and
 * attention then sees each sequence's queries as one contiguous block. Outputs (logits,
 * taps) are written back in batch order.
 */
#ifndef SPEX_MODEL_MODEL_H
#define SPEX_MODEL_MODEL_H

#include "spex.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"

/* A weight: a view into the mapping. */
typedef struct model_weight {
    const spex_tensor_info *t;   /* NULL when an optional tensor is absent */
    const void *data;
    spex_type type;
    int64_t n_in, n_out;         /* ne[0], ne[1] */
} model_weight;

typedef struct model_layer {
    const float *attn_norm;      /* [E]                        */
    model_weight wq;             /* {E, H*hd}                  */
    model_weight wk, wv;         /* {E, kv_dim}                */
    model_weight wo;             /* {H*hd, E}                  */
    const float *q_norm;         /* [hd] (qwen3), else NULL    */
    const float *k_norm;         /* [hd] (qwen3), else NULL    */
    const float *ffn_norm;       /* [E]                        */
    model_weight w_gate, w_up;   /* {E, F}                     */
    model_weight w_down;         /* {F, E}                     */
} model_layer;

struct spex_model {
    spex_gguf *gguf;             /* owned; every weight points into its mapping */
    spex_model_hparams hp;
    spex_model_params params;
    model_weight tok_embd;       /* {E, V}                     */
    const float *output_norm;    /* [E]                        */
    model_weight output;         /* {E, V}; == tok_embd when tied */
    model_layer *layers;         /* [N], owned                 */
    uint64_t weight_bytes, n_params;
};

/* Logs one line through the model's sink (params.log, else stderr) when verbose. */
void spex_model_log(const spex_model *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The forward pass's buffers (all allocated by spex_context_init). Rows are in sorted order
 * (see the file comment) unless stated otherwise. */
typedef struct fwd_bufs {
    float *x;        /* [n][E]       residual stream                                   */
    float *xn;       /* [n][E]       normed input of a matmul                          */
    float *tmp;      /* [n][E]       attn_output / ffn_down result, added to x         */
    float *q;        /* [n][H*hd]                                                      */
    float *k;        /* [n][kv_dim]                                                    */
    float *v;        /* [n][kv_dim]                                                    */
    float *att;      /* [n][H*hd]    attention output                                  */
    float *gate;     /* [n][F]       gate, then silu(gate) * up                        */
    float *up;       /* [n][F]                                                         */
    float *rope;     /* [n][n_rot]   cos/sin of each row's position                    */
    float *hout;     /* [n_out][E]   final-normed rows that want logits (batch order)  */
    float *logits;   /* [n_out][V]   (batch order)                                     */
    float *taps;     /* [n][n_taps][E] (batch order)                                   */
    void *mm_ws;     /* matmul workspace (converted activations)                       */
    float *attn_ws;  /* [nth][attn_ws_floats] per-thread attention scratch             */
    size_t attn_ws_floats;
    float *kv_f32;   /* Q8_0 cache only: [2][C][kv_dim] one region dequantized         */
} fwd_bufs;

/* What one pool run of the forward does: a prologue of row-wise ops (and attention), then
 * optionally one matmul (see forward.c). */
typedef struct fwd_phase fwd_phase;

struct spex_context {
    const spex_model *model;
    spex_context_params params;  /* resolved; tap_layers -> tap_ids */
    int32_t *tap_ids;            /* [n_taps] owned copy          */
    int32_t *tap_slot;           /* [N+1]: tap index of layer-input id, -1 if none */

    spex_pool *pool;
    bool own_pool;
    int nth;                     /* threads of the pool */

    /* KV cache */
    size_t kv_row_bytes;         /* bytes of one [kv_dim] row in kv_type */
    void *k_cache, *v_cache;     /* [N][S][C] rows each          */
    int32_t *seq_len;            /* [S]                          */

    fwd_bufs b;
    spex_memory_usage mem;

    /* Per-forward state (valid after a successful forward). */
    int32_t n_tokens;            /* tokens of the last batch                       */
    int32_t n_outputs;
    int32_t *perm;               /* [n_batch_max] sorted row r -> batch index      */
    int32_t *row_of;             /* [n_batch_max] batch index -> sorted row         */
    int32_t *tok;                /* [n_batch_max] token of sorted row r             */
    int32_t *pos;                /* [n_batch_max] position of sorted row r          */
    int32_t *out_row;            /* [n_outputs_max] i-th output -> batch index      */
    int32_t *out_of;             /* [n_batch_max] batch index -> output index or -1 */
    int32_t *seq_start;          /* [S+1] first sorted row of each sequence          */
    int32_t *seq_next;           /* [S] validation scratch: next expected position  */
    fwd_phase *phase;            /* the phase being run                             */
};

/* The dense forward pass of llama / qwen3 (forward.c). The batch is already validated and
 * sorted into ctx->perm/tok/pos/seq_start; it writes the new K/V rows, the outputs, and
 * nothing else of the cache state (the caller updates seq_len). */
void spex_forward_dense(spex_context *ctx);

/* Bytes of workspace / scratch the dense forward needs for the context's shapes. */
size_t spex_forward_mm_ws_size(const spex_model *m, int32_t n_batch_max, int32_t n_outputs_max);

/* A zeroed 64-byte-aligned buffer of at least `bytes` (rounded up), its size added to *total
 * (the memory report); NULL on failure. Contexts allocate every buffer with it. */
void *spex_ctx_buf_alloc(uint64_t bytes, uint64_t *total);

/* Internal (tests): address of the K or V row of (layer, seq, pos). */
void *spex_kv_row(const spex_context *ctx, bool v, int32_t layer, int32_t seq, int32_t pos);

#endif
