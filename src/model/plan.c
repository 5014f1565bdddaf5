/*
 * plan.c — the memory plan of a qwen35 (hybrid Gated DeltaNet + gated attention) target from
 * its hyper-parameters alone (include/spex.h, spex_qwen35_plan_compute; ../shared/docs/targets.md
 * §6.4, §7.3, §9 strategy A): KV bytes per token, recurrent state per sequence, the snapshot
 * ring speculative rollback keeps. The one place these sizes are worked out: the context's
 * allocation (context.c), spex_model_recurrent_state_bytes and `spex inspect` all use it.
 *
 * Dimensions: N trunk layers of which n_attn are full attention and N - n_attn Gated DeltaNet;
 * H_kv KV heads of hd; Hk GDN key heads, Hv value heads, D = Dk = Dv the state size, d_conv
 * the causal conv kernel; C = 2·Hk·D + Hv·D conv channels.
 */
#include "spex.h"
#include "model/api.h"

int spex_qwen35_plan_compute(const spex_qwen35_plan_in *in, spex_qwen35_plan *out) {
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
    out->layer_S_floats = (uint64_t)in->ssm_dt_rank * D * D;
    out->layer_conv_floats = (uint64_t)(in->ssm_d_conv - 1) * (uint64_t)out->conv_channels;
    return 0;
}

