/*
 * dflash.h — internals of the DFlash drafters (../shared/docs/dflash2.md): the loaded drafter
 * (weights as views into its GGUF mapping, plus the views it borrows from the target).
 *
 * What it is: the structure shared by dflash_load.c (loading and the §5 validation),
 * dflash_context.c / dflash_forward.c (draft cache, injection, block forward) and
 * dflash_select.c (selector rows and walks). What it is not: public API (include/spex.h,
 * "DFlash drafters", is the contract).
 *
 * Dimension legend (every dflash file):
 *   D   n_embd (== target E)     N_d  n_layer        H, H_kv, hd  heads, kv heads, head dim
 *   F   n_ff                     L    n_taps         kv_dim = H_kv * hd
 *   B   block_size               n    drafted tokens of a block (rows n+1, row 0 = anchor)
 *   T_c conv_kernel              g    conv_group     G = D / g
 *   R   selector_rank            K    selector_top_k V  n_vocab (the target's)
 */
#ifndef SPEX_MODEL_DFLASH_H
#define SPEX_MODEL_DFLASH_H

#include "model/api.h"
#include "model/model.h"

typedef struct dflash_layer {
    const float *attn_norm;       /* [D]                                       */
    model_weight wq;              /* {D, H*hd}                                 */
    model_weight wk, wv;          /* {D, kv_dim}                               */
    model_weight wo;              /* {H*hd, D}                                 */
    const float *q_norm;          /* [hd]                                      */
    const float *k_norm;          /* [hd]                                      */
    const float *ffn_norm;        /* [D]                                       */
    model_weight w_gate, w_up;    /* {D, F}                                    */
    model_weight w_down;          /* {F, D}                                    */
    /* DFlash2 only (NULL / .t NULL for v1) */
    const float *attn_conv_base;  /* {D, T_c, 2}: base[s][t][c] at c + D*(t + T_c*s) (§10.1) */
    model_weight attn_conv_proj;  /* {D, 2*T_c*G}: row index grp + G*(t + T_c*s)             */
    const float *ffn_conv_base;   /* {D, T_c, 2}                               */
    model_weight ffn_conv_proj;   /* {D, 2*T_c*G}                              */
} dflash_layer;

struct spex_drafter {
    spex_gguf *gguf;              /* owned; own weights point into its mapping  */
    const spex_model *target;     /* borrowed                                   */
    spex_drafter_hparams hp;
    spex_drafter_params params;   /* overrides pointer cleared after load       */

    model_weight fc;              /* {L*D, D}                                   */
    float fc_scale;               /* fc.scale when present, else 1 (§24)        */
    const float *enc_norm;        /* [D]  enc.output_norm.weight                */
    const float *output_norm;     /* [D]  the drafter's own final norm          */
    model_weight tok_embd;        /* {D, V}: the drafter's if present, else the target's */
    model_weight head;            /* {D, V}: the drafter's output.weight if present, else the
                                   * target's LM head (output.weight, or token_embd if tied) */
    model_weight sel_hidden;      /* {D, R}   DFlash2: gate projection H         */
    model_weight sel_pred;        /* {R, V}   DFlash2: table A                   */
    model_weight sel_succ;        /* {R, V}   DFlash2: table B                   */
    dflash_layer *layers;         /* [N_d], owned                               */
    uint64_t weight_bytes;
    model_repack repack;          /* R16 copies of own matmul weights           */
};

/* spex_drafter_load on an already opened GGUF (fuzzing, tests: spex_gguf_open_memory).
 * Takes ownership of g: it is closed on failure too. */
spex_status spex_drafter_load_gguf(spex_gguf *g, const spex_model *target, const spex_drafter_params *params,
                                   spex_drafter **out, spex_error *err);

/* Logs through the drafter's sink when verbose (like spex_model_log). */
void spex_drafter_log(const spex_drafter *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
