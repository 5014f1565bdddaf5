/*
 * model_qwen35.c — loading of the `qwen35` architecture (Qwen3.5 / 3.6 / 3.8): the hybrid
 * trunk of Gated DeltaNet and gated full-attention layers, and the native MTP block
 * (../shared/docs/targets.md §6.1–§6.3, §8.1).
 *
 * What it is: the qwen35 keys beyond the ones the dense architectures share, the layer
 * pattern (`attention.recurrent_layers` when present, else `full_attention_interval`), and
 * the validation of every tensor with the exact shapes of §6.3. What it is not: the
 * forward pass (forward_qwen35.c) or the MTP drafter (src/spec/mtp.c).
 *
 * Dimensions (targets.md §6.3): Hk = ssm.group_count, Hv = ssm.time_step_rank, Dk = Dv =
 * ssm.state_size, Cc = 2·Hk·Dk + Hv·Dv conv channels, d_conv = ssm.conv_kernel.
 */
#include "gguf/api.h"
#include "model/model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEXTN_MAX 1      /* MTP blocks spex runs (every published file has one) */
#define D_CONV_MAX 16

static bool is_int_vtype(spex_gguf_vtype t) {
    return t == SPEX_GGUF_U8 || t == SPEX_GGUF_I8 || t == SPEX_GGUF_U16 || t == SPEX_GGUF_I16 ||
           t == SPEX_GGUF_U32 || t == SPEX_GGUF_I32 || t == SPEX_GGUF_U64 || t == SPEX_GGUF_I64;
}

/* Element i of an integer or bool array as a signed value (little-endian, sign-extended
 * for the signed types). */
static int64_t arr_int(const spex_gguf_value *e) {
    int64_t v = 0;
    for (uint64_t b = 0; b < e->size && b < 8; b++) v |= (int64_t)e->data[b] << (8 * b);
    const bool sign = e->type == SPEX_GGUF_I8 || e->type == SPEX_GGUF_I16 || e->type == SPEX_GGUF_I32;
    if (sign && e->size < 8 && (v >> (8 * e->size - 1)) & 1) v -= (int64_t)1 << (8 * e->size);
    return v;
}

/* The trunk's layer pattern (§6.2). */
static spex_status read_pattern(spex_model *m, key_reader *r, int32_t n_layer_all, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const char *path = spex_gguf_path(m->gguf);
    const char *key = spex_model_kname(r, "attention.recurrent_layers");
    spex_status s;
    if (spex_gguf_find_key(m->gguf, key) >= 0) {
        spex_gguf_value a;
        if ((s = spex_gguf_get_arr(m->gguf, key, &a, err))) return s;
        if (!(a.elem_type == SPEX_GGUF_BOOL || is_int_vtype(a.elem_type)) ||
            (a.n != (uint64_t)hp->n_layer && a.n != (uint64_t)n_layer_all))
            return spex_error_set(err, SPEX_ERR_FORMAT,
                                  "%s: %s must be an array of %d (or %d) bools, got %" PRIu64 " elements", path, key,
                                  hp->n_layer, n_layer_all, a.n);
        for (int32_t l = 0; l < hp->n_layer; l++) {
            spex_gguf_value e;
            if ((s = spex_gguf_arr_elem(m->gguf, &a, (uint64_t)l, &e, err))) return s;
            m->layers[l].recurrent = arr_int(&e) != 0;
        }
        return SPEX_OK;
    }
    int32_t interval;
    if (spex_gguf_find_key(m->gguf, spex_model_kname(r, "full_attention_interval")) < 0)
        return spex_error_set(err, SPEX_ERR_NOT_FOUND,
                              "%s: neither qwen35.attention.recurrent_layers nor qwen35.full_attention_interval is "
                              "present: the layer pattern is unknown",
                              path);
    if ((s = spex_model_read_dim(r, "full_attention_interval", -1, &interval, err))) return s;
    for (int32_t l = 0; l < hp->n_layer; l++) m->layers[l].recurrent = (l + 1) % interval != 0;
    return SPEX_OK;
}

static spex_status read_hparams(spex_model *m, key_reader *r, int32_t *n_layer_all, spex_error *err) {
    spex_model_hparams *hp = &m->hp;
    const char *path = spex_gguf_path(m->gguf);
    spex_status s;
    hp->attn_gated = true;
    *n_layer_all = hp->n_layer;
    int32_t nextn = 0;
    if (spex_gguf_find_key(m->gguf, spex_model_kname(r, "nextn_predict_layers")) >= 0) {
        int64_t v;
        if ((s = spex_gguf_get_i64(m->gguf, spex_model_kname(r, "nextn_predict_layers"), &v, err))) return s;
        if (v < 0 || v > NEXTN_MAX || v >= hp->n_layer)
            return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                                  "%s: qwen35.nextn_predict_layers = %" PRId64 ": spex runs 0 or %d MTP block(s) "
                                  "(block_count %d)",
                                  path, v, NEXTN_MAX, hp->n_layer);
        nextn = (int32_t)v;
    }
    hp->n_nextn = nextn;
    hp->n_layer -= nextn;
    if ((s = spex_model_read_dim(r, "ssm.conv_kernel", -1, &hp->ssm_d_conv, err)) ||
        (s = spex_model_read_dim(r, "ssm.state_size", -1, &hp->ssm_d_state, err)) ||
        (s = spex_model_read_dim(r, "ssm.group_count", -1, &hp->ssm_n_group, err)) ||
        (s = spex_model_read_dim(r, "ssm.time_step_rank", -1, &hp->ssm_dt_rank, err)) ||
        (s = spex_model_read_dim(r, "ssm.inner_size", -1, &hp->ssm_d_inner, err)))
        return s;
    if (hp->ssm_d_conv < 2 || hp->ssm_d_conv > D_CONV_MAX)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: qwen35.ssm.conv_kernel %d, expected 2 .. %d", path,
                              hp->ssm_d_conv, D_CONV_MAX);
    if ((int64_t)hp->ssm_dt_rank * hp->ssm_d_state != hp->ssm_d_inner)
        return spex_error_set(err, SPEX_ERR_FORMAT,
                              "%s: qwen35.ssm.inner_size %d != time_step_rank %d x state_size %d", path,
                              hp->ssm_d_inner, hp->ssm_dt_rank, hp->ssm_d_state);
    if (hp->ssm_dt_rank % hp->ssm_n_group != 0)
        return spex_error_set(err, SPEX_ERR_FORMAT,
                              "%s: qwen35.ssm.time_step_rank %d is not a multiple of group_count %d", path,
                              hp->ssm_dt_rank, hp->ssm_n_group);
    if (hp->ssm_d_state > 1024 || hp->ssm_dt_rank > 4096)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: qwen35.ssm.state_size %d / time_step_rank %d out of range",
                              path, hp->ssm_d_state, hp->ssm_dt_rank);
    /* M-RoPE sections: text positions put every section at the token position, which is
     * plain NEOX on the n_rot dims (§6.6 step 3); only their sum is checked. */
    const char *sk = spex_model_kname(r, "rope.dimension_sections");
    if (spex_gguf_find_key(m->gguf, sk) >= 0) {
        spex_gguf_value a;
        if ((s = spex_gguf_get_arr(m->gguf, sk, &a, err))) return s;
        if (!is_int_vtype(a.elem_type) || a.n < 1 || a.n > 4)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s must be an integer array of 1 .. 4 elements", path,
                                  sk);
        int64_t sum = 0;
        for (uint64_t i = 0; i < a.n; i++) {
            spex_gguf_value e;
            if ((s = spex_gguf_arr_elem(m->gguf, &a, i, &e, err))) return s;
            const int64_t v = arr_int(&e);
            if (v < 0 || v > hp->n_rot)
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s[%" PRIu64 "] = %" PRId64 " out of range", path,
                                      sk, i, v);
            sum += v;
        }
        if (sum > hp->n_rot / 2)
            return spex_error_set(err, SPEX_ERR_FORMAT,
                                  "%s: %s sum to %" PRId64 " rotary pairs, more than rope.dimension_count / 2 = %d",
                                  path, sk, sum, hp->n_rot / 2);
    }
    return SPEX_OK;
}

/* The tensors of a gated attention layer (trunk or MTP, prefix blk.<l>.) and its FFN. */
static spex_status load_attn_layer(spex_model *m, int l, model_layer *L, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    const int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv * hd;
    char name[96];
    spex_status s;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((s = spex_model_find_weight(m, NAME("attn_q.weight"), W_MATRIX, E, 2 * q_dim, false, &L->wq, err)) ||
        (s = spex_model_find_weight(m, NAME("attn_k.weight"), W_MATRIX, E, kv_dim, false, &L->wk, err)) ||
        (s = spex_model_find_weight(m, NAME("attn_v.weight"), W_MATRIX, E, kv_dim, false, &L->wv, err)) ||
        (s = spex_model_find_weight(m, NAME("attn_output.weight"), W_MATRIX, q_dim, E, false, &L->wo, err)) ||
        (s = spex_model_find_norm(m, NAME("attn_q_norm.weight"), hd, false, &L->q_norm, err)) ||
        (s = spex_model_find_norm(m, NAME("attn_k_norm.weight"), hd, false, &L->k_norm, err)))
        return s;
#undef NAME
    return SPEX_OK;
}

static spex_status load_common(spex_model *m, int l, model_layer *L, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    char name[96];
    spex_status s;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((s = spex_model_find_norm(m, NAME("attn_norm.weight"), E, false, &L->attn_norm, err)) ||
        (s = spex_model_find_norm(m, NAME("post_attention_norm.weight"), E, false, &L->ffn_norm, err)) ||
        (s = spex_model_find_weight(m, NAME("ffn_gate.weight"), W_MATRIX, E, F, false, &L->w_gate, err)) ||
        (s = spex_model_find_weight(m, NAME("ffn_up.weight"), W_MATRIX, E, F, false, &L->w_up, err)) ||
        (s = spex_model_find_weight(m, NAME("ffn_down.weight"), W_MATRIX, F, E, false, &L->w_down, err)))
        return s;
#undef NAME
    return SPEX_OK;
}

static spex_status load_gdn_layer(spex_model *m, int l, model_layer *L, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Hv = hp->ssm_dt_rank, Dv = hp->ssm_d_state;
    const int64_t Cc = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
    char name[96];
    spex_status s;
    model_weight conv, dt, a;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((s = spex_model_find_weight(m, NAME("attn_qkv.weight"), W_MATRIX, E, Cc, false, &L->w_qkv, err)) ||
        (s = spex_model_find_weight(m, NAME("attn_gate.weight"), W_MATRIX, E, Hv * Dv, false, &L->w_z, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_beta.weight"), W_MATRIX, E, Hv, false, &L->w_beta, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_alpha.weight"), W_MATRIX, E, Hv, false, &L->w_alpha, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_conv1d.weight"), W_F32, hp->ssm_d_conv, Cc, false, &conv, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_dt.bias"), W_NORM, Hv, 1, false, &dt, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_a"), W_NORM, Hv, 1, false, &a, err)) ||
        (s = spex_model_find_norm(m, NAME("ssm_norm.weight"), Dv, false, &L->ssm_norm, err)) ||
        (s = spex_model_find_weight(m, NAME("ssm_out.weight"), W_MATRIX, Hv * Dv, E, false, &L->w_ssm_out, err)))
        return s;
#undef NAME
    L->conv1d = conv.data;
    L->dt_bias = dt.data;
    L->ssm_a = a.data;
    return SPEX_OK;
}

static spex_status load_mtp(spex_model *m, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    const int l = hp->n_layer;
    model_mtp *t = &m->mtp;
    char name[96];
    spex_status s;
    t->layer.recurrent = false;
    t->layer.kv_index = 0;   /* the MTP context's own cache */
    t->layer.rs_index = -1;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((s = load_common(m, l, &t->layer, err)) || (s = load_attn_layer(m, l, &t->layer, err)) ||
        (s = spex_model_find_weight(m, NAME("nextn.eh_proj.weight"), W_MATRIX, 2 * E, E, false, &t->eh_proj, err)) ||
        (s = spex_model_find_norm(m, NAME("nextn.enorm.weight"), E, false, &t->enorm, err)) ||
        (s = spex_model_find_norm(m, NAME("nextn.hnorm.weight"), E, false, &t->hnorm, err)) ||
        (s = spex_model_find_norm(m, NAME("nextn.shared_head_norm.weight"), E, true, &t->head_norm, err)) ||
        (s = spex_model_find_weight(m, NAME("nextn.embed_tokens.weight"), W_MATRIX, E, hp->n_vocab, true, &t->embed,
                                    err)) ||
        (s = spex_model_find_weight(m, NAME("nextn.shared_head_head.weight"), W_MATRIX, E, hp->n_vocab, true,
                                    &t->head, err)))
        return s;
#undef NAME
    if (!t->head_norm) t->head_norm = m->output_norm;
    if (!t->embed.t) t->embed = m->tok_embd;
    if (!t->head.t) t->head = m->output;
    m->has_mtp = true;
    return SPEX_OK;
}

spex_status spex_model_load_qwen35(spex_model *m, key_reader *r, spex_error *err) {
    spex_model_hparams *hp = &m->hp;
    const char *path = spex_gguf_path(m->gguf);
    int32_t n_layer_all;
    spex_status s;
    if ((s = read_hparams(m, r, &n_layer_all, err))) return s;
    if ((s = spex_model_load_globals(m, err))) return s;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    if ((s = read_pattern(m, r, n_layer_all, err))) return s;
    int32_t n_kv = 0, n_rs = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        L->kv_index = L->recurrent ? -1 : n_kv++;
        L->rs_index = L->recurrent ? n_rs++ : -1;
        if ((s = load_common(m, l, L, err))) return s;
        s = L->recurrent ? load_gdn_layer(m, l, L, err) : load_attn_layer(m, l, L, err);
        if (s != SPEX_OK) return s;
    }
    m->n_kv_layers = n_kv;
    hp->n_recurrent = n_rs;
    if (hp->n_nextn > 0 && (s = load_mtp(m, err))) return s;
    spex_model_log(m,
                   "model: qwen35: %d trunk layers (%d Gated DeltaNet, %d attention), GDN Hk %d Hv %d D %d conv %d, "
                   "%s, recurrent state %.2f MiB per sequence",
                   hp->n_layer, n_rs, n_kv, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_state, hp->ssm_d_conv,
                   m->has_mtp ? "MTP block" : "no MTP block",
                   (double)spex_model_recurrent_state_bytes(m) / 1048576.0);
    return SPEX_OK;
}
