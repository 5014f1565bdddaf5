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
 * KV cache layout. K and V are separate arrays of kv_type, each [N_kv][S][nseg][C][kv_dim/nseg]:
 * attention layer l (its kv_index i; all N layers for llama / qwen3), sequence s, segment g,
 * position p is row (((i * S + s) * nseg + g) * C + p). Caches are head-major (nseg = H_kv,
 * a segment per kv head), but for Q8_0 with hd not a multiple of 32 (its 32-element blocks
 * would span heads), which has one segment of whole rows. A sequence's rows
 * of one segment are contiguous in every layer, so attention reads one stream per (layer,
 * sequence, kv head) with kv_pos = NULL (row p is position p), truncation only changes
 * seq_len[s], and a prefix copy is N*2*nseg memcpys.
 *
 * Recurrent state (qwen35, targets.md §7.3, §9 strategy A). Per sequence a ring of R =
 * 1 + n_rs_seq copies of the state of every GDN layer: rs_S [S][R][N_rs][Hv][Dk][Dv] and
 * rs_conv [S][R][N_rs][d_conv-1][Cc] (the window, oldest column first), fp32. The state after
 * position p lives in ring slot p mod R. A forward of k tokens at L .. L+k-1 reads the slot of
 * L-1 (the zero state when L = 0) and writes the states after each of its last min(k, R)
 * tokens (only the last one when k > SPEX_QWEN35_RECURRENT_MAX: a prompt chunk), so after it
 * the ring holds positions max(rs_lo, L+k-R) .. L+k-1: truncating back to
 * any of them only sets the length (the next forward starts from that slot) — no copy and
 * no re-run. rs_lo[s] is the oldest position whose state the ring still holds.
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
#include "model/api.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"

/* A weight: a view into the mapping, or into its R16 copy (repack_weights.c). */
typedef struct model_weight {
    const spex_tensor_info *t;   /* NULL when an optional tensor is absent */
    const void *data;
    spex_type type;
    int64_t n_in, n_out;         /* ne[0], ne[1] */
    bool r16;                    /* data is in the R16 layout (cpu/matmul.h): matmul only */
} model_weight;

/* The R16 copies a model or drafter owns (repack_weights.c). */
typedef struct model_repack {
    void **bufs;                 /* [n] the copies (slices of the arenas)              */
    const void **src;            /* [n] the mapped data each was made from            */
    int n, cap;
    void **arenas;               /* [n_arena] owned: one per spex_model_repack call   */
    int n_arena, cap_arena;
    uint64_t bytes;
} model_repack;

/* Repacks each weight of ws[0..n) that the active matmul table reads faster in the R16
 * layout (r16_fast; rows a multiple of 16), unless its data is one of keep[0..n_keep)
 * (tensors also read row by row). Data met twice is copied once; the originals' pages of
 * g's file mapping are released. */
spex_status spex_model_repack(model_weight *const *ws, int n, const void *const *keep, int n_keep,
                              const spex_gguf *g, model_repack *r, spex_error *err);
void spex_model_repack_free(model_repack *r);
/* Row `row` of a weight as w->n_in f32 values, in either layout (an R16 matrix is read back a
 * block at a time): embedding lookups of tables that may also be a repacked LM head. */
void spex_model_weight_row(const model_weight *w, int64_t row, float *out);

typedef struct model_layer {
    bool recurrent;              /* qwen35 Gated DeltaNet layer (the attention fields are unset) */
    int32_t kv_index;            /* attention layers: its index in the KV cache, else -1      */
    int32_t rs_index;            /* GDN layers: its index in the recurrent state, else -1     */
    const float *attn_norm;      /* [E]                        */
    model_weight wq;             /* {E, H*hd}; qwen35 {E, 2*H*hd}: per head [q_h | gate_h] */
    model_weight wk, wv;         /* {E, kv_dim}                */
    model_weight wo;             /* {H*hd, E}                  */
    const float *q_norm;         /* [hd] (qwen3), else NULL    */
    const float *k_norm;         /* [hd] (qwen3), else NULL    */
    const float *ffn_norm;       /* [E]                        */
    model_weight w_gate, w_up;   /* {E, F}                     */
    model_weight w_down;         /* {F, E}                     */
    /* qwen35 GDN layers (targets.md §6.3, §7); Cc = 2*Hk*Dk + Hv*Dv conv channels */
    model_weight w_qkv;          /* {E, Cc}: [q | k | v] head-major                     */
    model_weight w_z;            /* attn_gate {E, Hv*Dv}                                */
    model_weight w_beta;         /* ssm_beta {E, Hv}                                    */
    model_weight w_alpha;        /* ssm_alpha {E, Hv}                                   */
    const float *conv1d;         /* ssm_conv1d {d_conv, Cc}: tap k of channel c at k + d_conv*c */
    const float *dt_bias;        /* ssm_dt.bias [Hv]                                    */
    const float *ssm_a;          /* ssm_a [Hv] (= -exp(A_log))                          */
    const float *ssm_norm;       /* [Dv]                                                */
    model_weight w_ssm_out;      /* ssm_out {Hv*Dv, E}                                  */
} model_layer;

/* The qwen35 native MTP block (targets.md §8.1): an attention layer plus the nextn tensors. */
typedef struct model_mtp {
    model_layer layer;           /* blk.N.*: gated attention + FFN                       */
    model_weight eh_proj;        /* {2E, E}: concat(embedding, hidden) -> E              */
    const float *enorm, *hnorm;  /* [E]                                                  */
    const float *head_norm;      /* shared_head_norm [E] (output_norm when absent)       */
    model_weight embed;          /* nextn.embed_tokens, else token_embd                  */
    model_weight head;           /* nextn.shared_head_head, else the model's output      */
} model_mtp;

struct spex_model {
    spex_gguf *gguf;             /* owned; every weight points into its mapping */
    spex_model_hparams hp;
    spex_model_params params;
    model_weight tok_embd;       /* {E, V}                     */
    const float *output_norm;    /* [E]                        */
    model_weight output;         /* {E, V}; == tok_embd when tied */
    model_layer *layers;         /* [N], owned                 */
    int32_t n_kv_layers;         /* attention layers (all N for llama / qwen3) */
    bool has_mtp;                /* qwen35 with nextn_predict_layers = 1       */
    model_mtp mtp;
    uint64_t weight_bytes, n_params;
    model_repack repack;         /* R16 copies of matmul weights (params.no_repack: none) */
};

/* ---- loading helpers shared by the architectures (model.c) ---- */

/* Reads <arch>.<suffix> keys. */
typedef struct key_reader {
    const spex_gguf *g;
    const char *arch;   /* key prefix */
    char key[160];
} key_reader;

typedef enum { W_MATRIX, W_NORM, W_F32 } model_wkind;   /* W_F32: a 2-D F32 tensor read element-wise */

const char *spex_model_kname(key_reader *r, const char *suffix);
/* A positive dimension, required (def < 0) or with a default. */
spex_status spex_model_read_dim(key_reader *r, const char *suffix, int64_t def, int32_t *out, spex_error *err);
spex_status spex_model_read_f32(key_reader *r, const char *suffix, float def, bool required, float *out,
                                spex_error *err);
/* The keys the dense architectures and qwen35 share (targets.md §4.1, §5.1, §6.1). */
spex_status spex_model_read_dense_hparams(key_reader *r, spex_model_hparams *hp, spex_error *err);
/* Finds tensor `name` and checks it: a matrix {ne0, ne1} of a type with a matmul kernel, or an
 * F32 vector {ne0} (W_NORM). optional: absence is fine (*w zeroed). Adds to the byte and
 * parameter counts. */
spex_status spex_model_find_weight(spex_model *m, const char *name, model_wkind kind, int64_t ne0, int64_t ne1,
                                   bool optional, model_weight *w, spex_error *err);
spex_status spex_model_find_norm(spex_model *m, const char *name, int64_t n, bool optional, const float **out,
                                 spex_error *err);
/* SPEX_ERR_UNSUPPORTED naming `name` when the file has that tensor. */
spex_status spex_model_refuse_tensor(spex_model *m, const char *name, const char *why, spex_error *err);
/* token_embd, output_norm, output (tied when absent): sets n_vocab, checks <arch>.vocab_size. */
spex_status spex_model_load_globals(spex_model *m, spex_error *err);
/* qwen35 (model_qwen35.c): hyper-parameters after the shared ones, and every tensor. */
spex_status spex_model_load_qwen35(spex_model *m, key_reader *r, spex_error *err);

/* Logs one line through the model's sink (params.log, else stderr) when verbose. */
/* The memory plan (plan.c) of a loaded model's hyper-parameters with n_max drafts: 0, or -1
 * when they are outside the plan's caps. */
int spex_model_plan(const spex_model_hparams *hp, int32_t n_max, spex_qwen35_plan *out);

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
    double rope_inv[SPEX_ROPE_MAX_ROT / 2]; /* the rotary frequencies (spex_rope_freqs)   */
    float *hout;     /* [n_out][E]   final-normed rows that want logits (batch order)  */
    float *logits;   /* [n_out][V]   (batch order)                                     */
    float *taps;     /* [n][n_taps][E] (batch order)                                   */
    void *mm_ws;     /* matmul workspace (converted activations)                       */
    float *attn_ws;  /* [nth][attn_ws_floats] per-thread attention scratch             */
    size_t attn_ws_floats;
    float *kv_f32;   /* Q8_0 cache in whole rows only: [2][C][kv_dim] one region as f32 */
    /* qwen35 */
    float *qg;       /* [n][2*H*hd]  attn_q output: per head [q_h | gate_h]               */
    float *agate;    /* [n][H*hd]    the attention output gates                           */
    float *mixed;    /* [n][Cc]      attn_qkv output (the conv input)                      */
    float *conv;     /* [n][Cc]      silu(conv(mixed)); q and k heads L2-normalised        */
    float *z;        /* [n][Hv*Dv]   attn_gate output                                      */
    float *gbeta;    /* [n][2*Hv]    per row: beta[Hv] (alpha before), then g[Hv]          */
    float *ssm_o;    /* [n][Hv*Dv]   recurrence output, then gated-normed in place         */
    float *gdn_ws;   /* [nth][gdn_ws_floats] chunked-form scratch                          */
    size_t gdn_ws_floats;
    float **snap;    /* [nth][R + SPEX_QWEN35_RECURRENT_MAX] state pointers (recurrent form) */
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

    /* KV cache: per (kv layer, seq) a region of C positions, split into kv_nseg segments of
     * C rows each, one row kv_seg_bytes: head-major (a segment per kv head, so the rows
     * attention reads for one head are one stream, not 256 bytes of every 2 KiB row), except
     * Q8_0 with head_dim not a multiple of 32 (blocks would span heads): whole rows, one
     * segment, expanded to f32 row by row before attention. */
    size_t kv_row_bytes;         /* bytes of one position's [kv_dim] in kv_type */
    int32_t kv_nseg;             /* n_head_kv, or 1 (Q8_0 with head_dim % 32 != 0) */
    size_t kv_seg_bytes;         /* kv_row_bytes / kv_nseg */
    void *k_cache, *v_cache;     /* [N][S][nseg][C] rows each (spex_alloc_zeroed) */
    size_t kv_bytes;             /* bytes of each                */
    int32_t *seq_len;            /* [S]                          */

    /* Recurrent state ring (qwen35; NULL otherwise): see "Recurrent state" above. */
    int32_t rs_ring;             /* R = 1 + n_rs_seq             */
    float *rs_S, *rs_conv;
    int32_t *rs_lo;              /* [S]                          */
    uint64_t rs_S_floats, rs_conv_floats;   /* per (seq, slot, GDN layer) */
    /* Checkpoints (checkpoint.c): [S][n_ck] copies of all GDN layers' states and their
     * positions (-1: empty); the token history [S][C] that a rewind replays. */
    int32_t n_ck;
    float *ck_S, *ck_conv;
    int32_t *ck_pos;
    int32_t *hist;
    spex_batch_token *rp_batch;  /* [n_batch_max] replay batch  */

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
    const float *x_in;           /* when set: [n][E] (batch order) input rows of layer 0
                                  * instead of the token embeddings (the MTP block, whose
                                  * input is eh_proj of [embedding | hidden]); internal   */
};

/* The state after position pos of sequence seq in GDN layer index ri (0 .. N_rs-1): S
 * [Hv][Dk][Dv] and the conv window [d_conv-1][Cc]. */
float *spex_rs_S(const spex_context *ctx, int32_t seq, int32_t pos, int32_t ri);
float *spex_rs_conv(const spex_context *ctx, int32_t seq, int32_t pos, int32_t ri);

/* Whether the ring holds the state after position new_len - 1 (context.c). */
bool spex_rs_holds(const spex_context *ctx, int32_t seq, int32_t new_len);
/* Checkpoint bookkeeping (checkpoint.c): after a forward grew seq to its current length;
 * after a truncation to new_len; dst's checkpoints := src's below len. */
void spex_ck_after_forward(spex_context *ctx, int32_t seq);
void spex_ck_drop_from(spex_context *ctx, int32_t seq, int32_t new_len);
void spex_ck_copy(spex_context *ctx, int32_t src, int32_t dst, int32_t len);
/* Checkpoint slot `slot` of seq: its states of GDN layer ri and its position (-1: empty). */
void spex_ck_slot(const spex_context *c, int32_t seq, int32_t slot, int32_t ri, float **S, float **conv, int32_t **pos);

/* qwen35: a sequence's rows in one batch go through the GDN recurrence token by token (the
 * recurrent form, with ring snapshots) when there are at most this many, else through the
 * chunked form with only the final state kept. The choice depends on nothing but the count,
 * so decode and verify rows (always <= this) compute exactly as one-token decode does. */
#define SPEX_QWEN35_RECURRENT_MAX 64
_Static_assert(SPEX_QWEN35_RECURRENT_MAX >= SPEX_DRAFT_MAX_N + 1, "a verify batch must take the recurrent form");

/* The hybrid forward pass of qwen35 (forward_qwen35.c); same contract as the dense one, and it
 * writes the recurrent states of the ring (the caller updates seq_len and rs_lo). */
void spex_forward_qwen35(spex_context *ctx);

/* The dense forward pass of llama / qwen3 (forward.c). The batch is already validated and
 * sorted into ctx->perm/tok/pos/seq_start; it writes the new K/V rows, the outputs, and
 * nothing else of the cache state (the caller updates seq_len). */
void spex_forward_dense(spex_context *ctx);

/* Bytes of workspace / scratch the dense forward needs for the context's shapes. */
size_t spex_forward_mm_ws_size(const spex_model *m, int32_t n_batch_max, int32_t n_outputs_max);

/* A zeroed 64-byte-aligned buffer of at least `bytes` (rounded up), its size added to *total
 * (the memory report); NULL on failure. Contexts allocate every buffer with it. */
void *spex_ctx_buf_alloc(uint64_t bytes, uint64_t *total);

/* Address of segment seg's K or V row of (layer, seq, pos) (see kv_nseg above); the next
 * position's row is kv_seg_bytes further, the next segment's C rows further. */
void *spex_kv_seg(const spex_context *ctx, bool v, int32_t layer, int32_t seq, int32_t seg, int32_t pos);

#endif
