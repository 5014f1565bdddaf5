/*
 * dflash_ctx.h — internals of the draft context (struct spex_draft_context): the draft KV
 * cache, the buffers of injection and of the block forward, and the outputs of the last
 * forward (../shared/docs/dflash2.md §7–§12, §16, §18).
 *
 * What it is: the structure shared by dflash_context.c (parameters, allocation, cache API,
 * validation of injections and forwards) and dflash_forward.c (the arithmetic), plus a debug
 * view of intermediates for tests. What it is not: public API (include/spex.h, "DFlash
 * drafters": the selector walk uses only the public accessors).
 *
 * Dimension legend: dflash.h (D, N_d, H, H_kv, hd, F, L, kv_dim, B, n, T_c, G, R, K, V), and
 *   S    n_seq_max               C   n_ctx_per_seq (draft positions per sequence)
 *   nr   rows of one forward (<= nr_max = n_blocks_max * B), blocks' rows contiguous
 *   ns   slots of one forward (rows 1..n of every block; <= n_blocks_max * (B - 1))
 *   ni   rows of one injection (<= n_inject_max)
 *   nd   2 * T_c * G, one row of a conv projection (the δ of §10.1)
 *
 * Draft KV cache. Exactly the target's layout (model.h): K and V arrays of kv_type, each
 * [N_d][S][C][kv_dim], row ((l * S + s) * C + p) for (layer l, sequence s, position p), so
 * truncation is O(1) (seq_len) and a prefix copy is N_d * 2 memcpys. A block forward writes
 * the block's K/V into rows P .. P+n of its sequence (P = seq_len) as scratch and attends
 * over rows 0 .. P+n; seq_len does not change, so those rows are outside the cache's state
 * and the next injection overwrites them (Invariant B, §16). The cache therefore needs room
 * for P + n + 1 rows when a block is drafted.
 */
#ifndef SPEX_MODEL_DFLASH_CTX_H
#define SPEX_MODEL_DFLASH_CTX_H

#include "model/api.h"
#include "model/dflash.h"

typedef struct draft_phase draft_phase;

struct spex_draft_context {
    const spex_drafter *d;
    spex_draft_context_params params;   /* resolved                                      */
    spex_pool *pool;
    bool own_pool;
    int nth;

    int32_t nr_max, ns_max;           /* rows / slots of one forward                      */
    int32_t nd;                       /* 2 * T_c * G (DFlash2), else 0                    */
    int32_t K;                        /* candidates per slot: selector_top_k, v1: 1       */

    /* draft KV cache */
    size_t kv_row_bytes;
    void *k_cache, *v_cache;          /* [N_d][S][C] rows each (spex_alloc_zeroed)        */
    size_t kv_bytes;                  /* bytes of each                                    */
    int32_t *seq_len;                 /* [S]                                              */
    float *kv_f32;                    /* Q8_0, head_dim % 32 != 0: [2][C][kv_dim] as f32  */

    /* block forward buffers (rows in block order) */
    float *x;                         /* [nr][D]    residual stream                       */
    float *xn;                        /* [nr][D]    normed sublayer input u               */
    float *xc;                        /* [nr][D]    u after the side-0 conv (DFlash2)     */
    float *tmp;                       /* [nr][D]    sublayer output (before the side-1 conv) */
    float *q;                         /* [nr][H*hd]                                       */
    float *k, *v;                     /* [nr][kv_dim]                                     */
    float *att;                       /* [nr][H*hd]                                       */
    float *gate, *up;                 /* [nr][F]                                          */
    float *rope;                      /* [max(nr, ni)][n_rot]                             */
    double rope_inv[SPEX_ROPE_MAX_ROT / 2]; /* the rotary frequencies (spex_rope_freqs)   */
    float *da, *df;                   /* [nr][nd]   δ of the attention / FFN conv         */
    float *hout;                      /* [ns][D]                                          */
    float *logits;                    /* [ns][V]    transformed z                         */
    float *gatev;                     /* [ns][R]    selector gate (DFlash2)               */
    int32_t *cand;                    /* [ns][K]    C_p                                   */
    float *cand_u;                    /* [ns][K]    U_p                                   */
    int32_t *tk_idx;                  /* [ns][nth][K] per-thread top-K heaps of the head  */
    float *tk_val;                    /* [ns][nth][K]                                     */
    void *mm_ws;
    float *attn_ws;                   /* [nth][attn_ws_floats]                            */
    size_t attn_ws_floats;

    /* injection buffers */
    float *iy;                        /* [ni][D]     W_fc f                               */
    float *ic;                        /* [ni][D]     c (kept: debug view of the last injection) */
    float *ik, *iv;                   /* [ni][kv_dim]                                     */

    /* row metadata of the current forward / injection */
    int32_t *row_pos;                 /* [max(nr, ni)] position of each row               */
    int32_t *row_seq;                 /* [max(nr, ni)] sequence of each row               */
    int32_t *row_j;                   /* [nr] in-block index (0 = anchor)                 */
    int32_t *row_tok;                 /* [nr]                                             */
    int32_t *row_slot;                /* [nr] slot index of the row, -1 for anchors       */
    int32_t *seq_next;                /* [S] validation scratch                           */
    int32_t *seq_used;                /* [S] validation scratch (distinct sequences)      */
    spex_draft_block *blocks;         /* [n_blocks_max] the last forward's blocks         */
    int32_t *blk_row0;                /* [n_blocks_max + 1] first row of each block       */
    int32_t *blk_slot0;               /* [n_blocks_max + 1] first slot of each block      */
    int32_t n_blocks, n_rows, n_slots; /* of the last successful forward (0: none)        */
    int32_t n_irows;                  /* rows of the current injection                    */

    draft_phase *phase;               /* the phase being run                              */

    /* Debug (tests): when debug is set before a forward, the residual stream after each
     * layer and each layer's δ rows are copied here. */
    bool debug;
    float *dbg_out;                   /* [N_d][nr][D]                                     */
    float *dbg_da, *dbg_df;           /* [N_d][nr][nd]                                    */

    spex_memory_usage mem;
};

/* The block forward (dflash_forward.c) over the validated blocks described by the row
 * metadata; writes the outputs and the scratch cache rows, nothing of the cache state. */
void spex_dflash_forward_blocks(spex_draft_context *dc);
/* The injection arithmetic over dc->n_irows validated rows (row_seq/row_pos set): fuses,
 * projects and stores K/V. The caller updates seq_len. */
void spex_dflash_inject_rows(spex_draft_context *dc, const float *features, int64_t ld_features);
/* Workspace bytes of every matmul of the context's shapes. */
size_t spex_dflash_mm_ws_size(const spex_drafter *d, int32_t nr_max, int32_t ns_max, int32_t ni_max);
/* Address of the K or V row of (layer, seq, pos) in the draft cache. */
void *spex_draft_kv_row(const spex_draft_context *dc, bool v, int32_t layer, int32_t seq, int32_t pos);

/* Debug views for tests (NULL when out of range or not recorded): the residual stream rows
 * after layer l of the last forward ([n_rows][D], block order), its δ rows ([n_rows][nd]),
 * and the fused c rows of the last injection ([n_rows][D]). */
const float *spex_draft_debug_out(const spex_draft_context *dc, int32_t l);
const float *spex_draft_debug_delta(const spex_draft_context *dc, int32_t l, bool ffn);
const float *spex_draft_debug_c(const spex_draft_context *dc);
void spex_draft_set_debug(spex_draft_context *dc, bool on);

#endif
