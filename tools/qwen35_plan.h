/*
 * qwen35_plan.h — the memory plan of a qwen35 (hybrid Gated DeltaNet + gated attention)
 * target from its hyper-parameters alone: KV bytes per token, recurrent state per sequence,
 * and the per-token snapshot ring speculative rollback keeps (../shared/docs/targets.md §6.4,
 * §7.3, §9 strategy A).
 *
 * What it is: one pure function of plain numbers, shared by `spex inspect` (tools/inspect.c)
 * and tests/test_qwen35_plan.c. It is a static inline header because the tests link the
 * library only, not the tool objects (the Makefile links a test with libspex.a alone).
 * What it is not: the allocator. src/model/context.c sizes the real buffers; the test checks
 * that this plan and spex_context_memory agree on a loaded model.
 *
 * Dimensions: N trunk layers of which n_attn are full attention and N - n_attn Gated DeltaNet;
 * H_kv KV heads of hd; Hk GDN key heads, Hv value heads, D = Dk = Dv the state size, d_conv
 * the causal conv kernel; C = 2·Hk·D + Hv·D conv channels.
 */
#ifndef SPEX_TOOLS_QWEN35_PLAN_H
#define SPEX_TOOLS_QWEN35_PLAN_H

#include <stdint.h>

typedef struct spex_qwen35_plan_in {
    int64_t n_layer;     /* N: trunk layers (block_count - nextn_predict_layers)       */
    int64_t n_attn;      /* full-attention layers among them                           */
    int64_t n_head_kv;   /* H_kv                                                       */
    int64_t head_dim;    /* hd (attention.key_length = value_length for qwen35)         */
    int64_t ssm_n_group; /* Hk (ssm.group_count)                                       */
    int64_t ssm_dt_rank; /* Hv (ssm.time_step_rank)                                    */
    int64_t ssm_d_state; /* D = Dk = Dv (ssm.state_size)                               */
    int64_t ssm_d_conv;  /* d_conv (ssm.conv_kernel)                                   */
    int64_t n_max;       /* drafts per verify batch: the ring keeps 1 + n_max copies    */
} spex_qwen35_plan_in;

typedef struct spex_qwen35_plan {
    int64_t n_gdn;            /* N - n_attn Gated DeltaNet layers                          */
    int64_t conv_channels;    /* C                                                         */
    uint64_t kv_per_token;    /* n_attn x 2 (K and V) x H_kv x hd x 2 bytes (F16)          */
    uint64_t state_S;         /* n_gdn x Hv x D x D x 4 bytes (fp32 delta-rule state)      */
    uint64_t state_conv;      /* n_gdn x (d_conv - 1) x C x 4 bytes (conv windows)         */
    uint64_t state;           /* state_S + state_conv: one copy of one sequence's state    */
    uint64_t snapshots;       /* (1 + n_max) x state: the live copy plus one per draft     */
} spex_qwen35_plan;

/* Fills *out from *in; returns 0, or -1 (and *out zeroed) when a number is negative, the
 * attention layers outnumber the trunk, d_conv is 0, or a number is beyond what any real model
 * has (layers 4096, heads and hd 65536, D and d_conv 1024, n_max 256): inspect feeds it the
 * keys of untrusted files, and these caps keep every product below 2^62. */
static inline int spex_qwen35_plan_compute(const spex_qwen35_plan_in *in, spex_qwen35_plan *out) {
    *out = (spex_qwen35_plan){0};
    if (in->n_layer < 0 || in->n_layer > 4096 || in->n_attn < 0 || in->n_attn > in->n_layer || in->n_head_kv < 0 ||
        in->n_head_kv > 65536 || in->head_dim < 0 || in->head_dim > 65536 || in->ssm_n_group < 0 ||
        in->ssm_n_group > 65536 || in->ssm_dt_rank < 0 || in->ssm_dt_rank > 65536 || in->ssm_d_state < 0 ||
        in->ssm_d_state > 1024 || in->ssm_d_conv < 1 || in->ssm_d_conv > 1024 || in->n_max < 0 || in->n_max > 256)
        return -1;
    const uint64_t D = (uint64_t)in->ssm_d_state;
    out->n_gdn = in->n_layer - in->n_attn;
    out->conv_channels = 2 * in->ssm_n_group * in->ssm_d_state + in->ssm_dt_rank * in->ssm_d_state;
    out->kv_per_token = (uint64_t)in->n_attn * 2u * (uint64_t)in->n_head_kv * (uint64_t)in->head_dim * 2u;
    out->state_S = (uint64_t)out->n_gdn * (uint64_t)in->ssm_dt_rank * D * D * 4u;
    out->state_conv = (uint64_t)out->n_gdn * (uint64_t)(in->ssm_d_conv - 1) * (uint64_t)out->conv_channels * 4u;
    out->state = out->state_S + out->state_conv;
    out->snapshots = (1u + (uint64_t)in->n_max) * out->state;
    return 0;
}

#endif
