/*
 * forward.c — the forward pass of the dense target architectures, llama and qwen3
 * (../shared/docs/targets.md §3.1–3.4, §4, §5), over a batch that mixes several sequences.
 *
 * What it is: per layer
 *     n = RMSNorm(x; attn_norm)
 *     q, k, v = W_q n, W_k n, W_v n;  qwen3: q_h, k_h = RMSNorm(q_h; q_norm), RMSNorm(k_h; k_norm)
 *     q, k = RoPE(q, k, pos)          NORM pairs (llama) or NEOX pairs (qwen3), n_rot dims
 *     K/V cache rows of (layer, seq, pos) = k, v
 *     a = causal GQA attention of each token over its own sequence's rows 0..pos
 *     x = x + W_o a
 *     x = x + W_down( silu(W_gate m) * (W_up m) ),  m = RMSNorm(x; ffn_norm)
 * then logits = W_out RMSNorm(x; output_norm) for the tokens that asked for them only. The
 * taps (§3.4) are copies of x at the input of the chosen layers, in the same pass.
 * What it is not: batch validation and ordering (context.c), kernels (src/cpu).
 *
 * Dimension legend: model.h (E, H, H_kv, hd, F, V, N, kv_dim, n, n_out, C).
 *
 * Threading. The work of a forward is a sequence of "phases", one spex_pool_run each: a
 * prologue of row-wise ops (embedding, residual adds, norms, QK-norm, RoPE, cache stores,
 * taps; rows split statically over the threads), then, after a barrier, one matmul through
 * spex_matmul_task with every row of the batch, so each weight is streamed once for all rows.
 * (The barrier is skipped where the prologue writes only its thread's rows of the matmul's
 * input and the matmul converts those same rows on the same thread first: phase_task.)
 * Attention runs inside the prologue of the W_o phase (one spex_attention call per sequence,
 * all threads taking part, then a barrier). W_q, W_k, W_v share one phase (their input is the
 * same xn: converted once, one barrier, one chunk sequence over the three), and so do W_gate
 * and W_up: 4 pool runs per layer plus one for the head, for any batch size (each posted with
 * its phase as the pool's wait-accounting site, phase_site, so a benchmark can say where the
 * threads wait). In the
 * small-batch regime (spex_matmul_ranged_regime: decode, drafting, verification) W_gate and
 * W_up are cut into the same per-thread column slices as the SwiGLU after them and W_down's
 * activation conversion (spex_fwd_ffn), so each thread combines and converts what it computed
 * itself: only the converted activations cross to the other core. A single run per
 * forward with a barrier between matmuls would need the matmul driver to take a chunk counter
 * of its own: today spex_matmul_task uses the pool's one counter, which only resets at
 * spex_pool_run.
 *
 * Determinism. Every op computes a row the same way whatever the other rows of the batch
 * are (the matmul kernels use one instruction sequence for any tile shape, attention scores
 * a query against fixed tiles of its own sequence), so a token's logits do not depend on how
 * tokens are batched, nor on the thread count.
 */
#include "cpu/api.h"
#include "model/forward_internal.h"
#include "tensor/api.h"

#include <math.h>
#include <string.h>

static void pre_attention(spex_context *c, const fwd_phase *ph, int ith, int nth);

/* ======================================================================== */
/* Phases                                                                    */
/* ======================================================================== */


/* No barrier is needed between the prologue and the matmul when the prologue wrote exactly the
 * part of X (rows, or columns of every row) that this thread's conversion reads first. */
static bool pre_writes_own_part(const fwd_phase *ph, int nth) {
    /* a conv_cols phase's SwiGLU splits columns as the conversion does (spex_fwd_pre_swiglu) */
    if (ph->pre == spex_fwd_pre_swiglu && ph->n_mm && spex_matmul_own_cols(&ph->mm[0], 0, nth, NULL, NULL))
        return spex_matmul_converts_own_cols(&ph->mm[0], nth);
    return ph->pre_own_rows && spex_matmul_converts_own_rows(&ph->mm[0]);
}

static void phase_task(void *arg, int ith, int nth) {
    spex_context *c = arg;
    const fwd_phase *ph = c->phase;
    if (ph->pre) {
        ph->pre(c, ph, ith, nth);
        /* No barrier when the prologue wrote exactly this thread's rows of X and the matmul
         * converts those same rows here before its own barrier: one wait less per phase. */
        if (ph->n_mm && nth > 1 && !pre_writes_own_part(ph, nth)) spex_pool_barrier(c->pool);
    }
    if (ph->n_mm) spex_matmul_task_multi(ph->mm, ph->n_mm, ith, nth);
}

/* The prologues that read and write only the rows row_split gives their thread, X of the
 * phase's matmul being the batch's c->n_tokens rows they wrote. */
static bool pre_writes_own_rows(const spex_context *c, pre_fn pre, const float *X, int64_t n_rows) {
    if (n_rows != c->n_tokens) return false;
    if (pre == spex_fwd_pre_attn_norm || pre == spex_fwd_pre_ffn_norm) return X == c->b.xn;
    if (pre == spex_fwd_pre_swiglu) return X == c->b.gate;
    return false;
}

static spex_matmul_args mm_args(const spex_context *c, const model_weight *w, const float *X, int64_t n_rows, float *Y) {
    return (spex_matmul_args){
        .pool = c->pool, .wtype = w->type, .W = w->data, .n_out = w->n_out, .n = w->n_in,
        .X = X, .ldx = w->n_in, .n_rows = n_rows, .Y = Y, .ldy = w->n_out, .ws = c->b.mm_ws,
        .w_r16 = w->r16,
    };
}

void spex_fwd_run_phase(spex_context *c, fwd_phase *ph, pre_fn pre, int layer, const model_weight *w,
                      const float *X, int64_t n_rows, float *Y) {
    spex_fwd_run_phase_multi(c, ph, pre, layer, &w, &Y, w != NULL, X, n_rows);
}

/* The wait-accounting site of a phase, by its prologue (spex_pool_run_site). */
static int phase_site(pre_fn pre) {
    if (pre == spex_fwd_pre_attn_norm) return SPEX_SITE_QKV;
    if (pre == pre_attention) return SPEX_SITE_ATTN;
    if (pre == spex_fwd_pre_ffn_norm) return SPEX_SITE_FFN_UP;
    if (pre == spex_fwd_pre_swiglu) return SPEX_SITE_FFN_DOWN;
    if (pre == spex_fwd_pre_output) return SPEX_SITE_HEAD;
    return SPEX_SITE_OTHER;
}

void spex_fwd_run_phase_multi(spex_context *c, fwd_phase *ph, pre_fn pre, int layer, const model_weight *const *w,
                              float *const *Y, int n_w, const float *X, int64_t n_rows) {
    const int site = phase_site(pre);
    ph->pre = pre;
    ph->pre_own_rows = pre_writes_own_rows(c, pre, X, n_rows);
    ph->layer = layer;
    ph->n_mm = 0;
    for (int i = 0; i < n_w && n_rows > 0; i++) {
        spex_matmul_args a = mm_args(c, w[i], X, n_rows, Y[i]);
        if (ph->n_mm > 0 && !spex_matmul_can_share(&ph->mm[0], &a)) {
            c->phase = ph;   /* a different activation type: run what is gathered, start anew */
            spex_pool_run_site(c->pool, phase_task, c, site);
            ph->pre = NULL;
            ph->n_mm = 0;
        }
        ph->mm[ph->n_mm++] = a;
    }
    if (ph->n_mm) {
        ph->mm[0].slice_align = ph->next_slice_align;
        ph->mm[0].conv_cols = ph->next_conv_cols && ph->n_mm == 1;
    }
    ph->next_slice_align = 0;
    ph->next_conv_cols = false;
    c->phase = ph;
    spex_pool_run_site(c->pool, phase_task, c, site);
}

size_t spex_forward_mm_ws_size(const spex_model *m, int32_t n_batch_max, int32_t n_outputs_max) {
    size_t ws = spex_matmul_ws_size(m->output.type, m->output.n_in, n_outputs_max);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const model_weight *ws_w[] = {&L->wq,   &L->wk,  &L->wv,     &L->wo,      &L->w_gate,
                                      &L->w_up, &L->w_down, &L->w_qkv, &L->w_z, &L->w_beta,
                                      &L->w_alpha, &L->w_ssm_out};
        for (size_t i = 0; i < sizeof ws_w / sizeof ws_w[0]; i++) {
            if (!ws_w[i]->t) continue;   /* not a weight of this layer's kind */
            size_t s = spex_matmul_ws_size(ws_w[i]->type, ws_w[i]->n_in, n_batch_max);
            if (s > ws) ws = s;
        }
    }
    return ws;
}

/* ======================================================================== */
/* Prologues                                                                 */
/* ======================================================================== */

/* Copies row r of the residual stream into its tap slot (batch order), sanitised as
 * dflash2.md §6 says when tap_clamp is on. */
void spex_fwd_tap_row(spex_context *c, int slot, int64_t r) {
    const int64_t E = c->model->hp.n_embd;
    const float *x = c->b.x + r * E;
    float *dst = c->b.taps + ((int64_t)c->perm[r] * c->params.n_taps + slot) * E;
    if (!c->params.tap_clamp) {
        memcpy(dst, x, sizeof(float) * (size_t)E);
        return;
    }
    for (int64_t i = 0; i < E; i++) {
        float v = x[i];
        if (isnan(v)) v = 0.0f;
        else if (v > 65504.0f) v = 65504.0f;
        else if (v < -65504.0f) v = -65504.0f;
        dst[i] = v;
    }
}

/* Layer input: x = embedding (layer 0) or x + ffn output of the previous layer; tap;
 * xn = RMSNorm(x; attn_norm). Layer 0 also fills each row's RoPE angles. */
void spex_fwd_pre_attn_norm(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model *m = c->model;
    const spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    const int l = ph->layer;
    const int slot = c->tap_slot[l];
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->b.x + r * E;
        if (l == 0) {
            if (c->x_in)
                memcpy(x, c->x_in + (int64_t)c->perm[r] * E, sizeof(float) * (size_t)E);
            else
                spex_model_weight_row(&m->tok_embd, c->tok[r], x);
            spex_rope_cache_freqs(c->b.rope + r * hp->n_rot, c->pos[r], hp->n_rot, hp->rope_freq_scale, c->b.rope_inv);
        } else {
            ph->ops->acc(x, c->b.tmp + r * E, E);
        }
        if (slot >= 0) spex_fwd_tap_row(c, slot, r);
        ph->ops->rmsnorm(x, m->layers[l].attn_norm, c->b.xn + r * E, E, hp->rms_eps);
    }
}

/* Stores row r's k and v (already normed and rotated) at (layer, seq, pos) in kv_type. */
void spex_fwd_store_kv(spex_context *c, int l, int64_t r, int32_t seq) {
    const int64_t kvd = (int64_t)c->model->hp.n_head_kv * c->model->hp.head_dim;
    const spex_type t = c->params.kv_type;
    const int32_t p = c->pos[r];
    const int64_t n = kvd / c->kv_nseg; /* elements per segment: a kv head, or the whole row */
    const spex_ops_kernels *k = spex_ops_get();
    for (int32_t g = 0; g < c->kv_nseg; g++) {
        const float *ks = c->b.k + r * kvd + g * n, *vs = c->b.v + r * kvd + g * n;
        void *kd = spex_kv_seg(c, false, l, seq, g, p), *vd = spex_kv_seg(c, true, l, seq, g, p);
        if (t == SPEX_TYPE_F32) {
            memcpy(kd, ks, sizeof(float) * (size_t)n);
            memcpy(vd, vs, sizeof(float) * (size_t)n);
        } else if (t == SPEX_TYPE_F16) {
            k->cvt_f32_f16(ks, kd, n);
            k->cvt_f32_f16(vs, vd, n);
        } else { /* Q8_0: whole blocks per segment (context.c), so the bytes of a whole-row quantization */
            spex_quantize_row_ref(t, ks, kd, n);
            spex_quantize_row_ref(t, vs, vd, n);
        }
    }
}

/* The sequence a sorted row belongs to (seq_start is sorted: a short scan per row range). */
int32_t spex_fwd_seq_of_row(const spex_context *c, int64_t r) {
    int32_t s = 0;
    while (c->seq_start[s + 1] <= r) s++;
    return s;
}

void spex_fwd_qk_rope_store(spex_context *c, const fwd_phase *ph, int64_t r, int32_t seq) {
    const spex_model_hparams *hp = &c->model->hp;
    const model_layer *L = &c->model->layers[ph->layer];
    const int hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    const spex_ops_kernels *k = ph->ops;
    float *q = c->b.q + r * (int64_t)H * hd, *kr = c->b.k + r * (int64_t)Hkv * hd;
    if (hp->qk_norm) {
        spex_rmsnorm_rows(k, q, hd, L->q_norm, q, hd, H, hd, hp->rms_eps);
        spex_rmsnorm_rows(k, kr, hd, L->k_norm, kr, hd, Hkv, hd, hp->rms_eps);
    }
    const float *cs = c->b.rope + r * hp->n_rot;
    k->rope(q, H, hd, hp->n_rot, (spex_rope_mode)hp->rope_mode, cs);
    k->rope(kr, Hkv, hd, hp->n_rot, (spex_rope_mode)hp->rope_mode, cs);
    spex_fwd_store_kv(c, ph->layer, r, seq);
}

/* QK-norm, RoPE, cache store; barrier; attention of each sequence's rows over its region. */
static void pre_attention(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    int32_t seq = r0 < r1 ? spex_fwd_seq_of_row(c, r0) : 0;
    for (int64_t r = r0; r < r1; r++) {
        while (c->seq_start[seq + 1] <= r) seq++;
        spex_fwd_qk_rope_store(c, ph, r, seq);
    }
    if (nth > 1) spex_pool_barrier(c->pool);
    spex_fwd_attend(c, ph, ith, nth);
}

void spex_fwd_attend(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model_hparams *hp = &c->model->hp;
    const spex_ops_kernels *k = ph->ops;
    const int l = ph->layer, hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t qd = (int64_t)H * hd, kvd = (int64_t)Hkv * hd;
    float *scratch = c->b.attn_ws + (size_t)ith * c->b.attn_ws_floats;
    /* Q8_0 in whole rows (head_dim not a multiple of 32): expanded to f32 first */
    const bool q8 = c->params.kv_type == SPEX_TYPE_Q8_0 && c->kv_nseg == 1;
    for (int32_t s = 0; s < c->params.n_seq_max; s++) {
        const int32_t a0 = c->seq_start[s], nq = c->seq_start[s + 1] - a0;
        if (nq == 0) continue;
        /* The sequence's rows 0 .. pos of its last token: cached ones and this batch's. */
        const int32_t n_kv = c->pos[a0 + nq - 1] + 1;
        spex_attn_args a = {
            .n_q = nq, .n_head = H, .n_head_kv = Hkv, .head_dim = hd,
            .q = c->b.q + (int64_t)a0 * qd, .q_stride = qd, .q_pos = c->pos + a0,
            .kv_type = c->params.kv_type, .n_kv = n_kv,
            .k = spex_kv_seg(c, false, l, s, 0, 0), .v = spex_kv_seg(c, true, l, s, 0, 0),
            .k_stride = c->kv_seg_bytes, .v_stride = c->kv_seg_bytes,
            .k_head_stride = (size_t)c->params.n_ctx_per_seq * c->kv_seg_bytes, /* head-major (model.h);
                                                                                    Q8_0 read directly */
            .v_head_stride = (size_t)c->params.n_ctx_per_seq * c->kv_seg_bytes, .kv_pos = NULL,
            .scale = 0.0f, .causal = true, .window = 0,
            .out = c->b.att + (int64_t)a0 * qd, .out_stride = qd,
        };
        if (q8) {
            /* spex_attention reads F32/F16 caches: expand this region to f32 first. */
            float *kf = c->b.kv_f32, *vf = c->b.kv_f32 + (size_t)c->params.n_ctx_per_seq * (size_t)kvd;
            int64_t t0, t1;
            row_split(n_kv, ith, nth, &t0, &t1);
            for (int64_t t = t0; t < t1; t++) {
                spex_dequantize_row_ref(SPEX_TYPE_Q8_0, spex_kv_seg(c, false, l, s, 0, (int32_t)t), kf + t * kvd, kvd);
                spex_dequantize_row_ref(SPEX_TYPE_Q8_0, spex_kv_seg(c, true, l, s, 0, (int32_t)t), vf + t * kvd, kvd);
            }
            if (nth > 1) spex_pool_barrier(c->pool);
            a.kv_type = SPEX_TYPE_F32;
            a.k = kf;
            a.v = vf;
            a.k_stride = a.v_stride = sizeof(float) * (size_t)kvd;
            a.k_head_stride = a.v_head_stride = 0; /* the expanded rows hold all heads */
            spex_attention(k, &a, ith, nth, scratch);
            if (nth > 1) spex_pool_barrier(c->pool); /* the expanded region is reused */
        } else {
            /* Outputs of different sequences are disjoint: no barrier between them. */
            spex_attention(k, &a, ith, nth, scratch);
        }
    }
}

/* x += attention output projection; xn = RMSNorm(x; ffn_norm). */
void spex_fwd_pre_ffn_norm(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model_hparams *hp = &c->model->hp;
    const int64_t E = hp->n_embd;
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->b.x + r * E;
        ph->ops->acc(x, c->b.tmp + r * E, E);
        ph->ops->rmsnorm(x, c->model->layers[ph->layer].ffn_norm, c->b.xn + r * E, E, hp->rms_eps);
    }
}

/* gate = silu(gate) * up: by rows, or in the small-batch regime by the columns that this
 * thread's slices of gate and up hold (spex_fwd_ffn), which it then converts itself, so
 * neither the gate/up outputs nor the SwiGLU result cross to the other core before the
 * conversion (split by rows, in a one-row decode the other thread reads them all: ~4 us a
 * layer when the cores are far apart; docs/performance.md, "The thread pool and per-step
 * overhead"). */
void spex_fwd_pre_swiglu(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const int64_t F = c->model->hp.n_ff;
    int64_t c0, c1;
    if (ph->n_mm && spex_matmul_own_cols(&ph->mm[0], ith, nth, &c0, &c1)) {
        for (int64_t r = 0; r < c->n_tokens && c1 > c0; r++)
            ph->ops->swiglu(c->b.gate + r * F + c0, c->b.up + r * F + c0, c->b.gate + r * F + c0, c1 - c0);
        return;
    }
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) ph->ops->swiglu(c->b.gate + r * F, c->b.up + r * F, c->b.gate + r * F, F);
}

/* x += ffn output of the last layer; tap id N; hout[i] = RMSNorm(x; output_norm) for the
 * i-th token that wants logits. */
void spex_fwd_pre_output(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model *m = c->model;
    const int64_t E = m->hp.n_embd;
    const int slot = c->tap_slot[m->hp.n_layer];
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->b.x + r * E;
        ph->ops->acc(x, c->b.tmp + r * E, E);
        if (slot >= 0) spex_fwd_tap_row(c, slot, r);
        const int32_t o = c->out_of[c->perm[r]];
        if (o >= 0) ph->ops->rmsnorm(x, m->output_norm, c->b.hout + (int64_t)o * E, E, m->hp.rms_eps);
    }
}

/* ======================================================================== */
/* The pass                                                                  */
/* ======================================================================== */

void spex_forward_dense(spex_context *c) {
    const spex_model *m = c->model;
    const int64_t n = c->n_tokens;
    fwd_bufs *b = &c->b;
    fwd_phase ph;
    memset(&ph, 0, sizeof ph);
    ph.ops = spex_ops_get();

    for (int l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const model_weight *qkv[] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_out[] = {b->q, b->k, b->v};
        spex_fwd_run_phase_multi(c, &ph, spex_fwd_pre_attn_norm, l, qkv, qkv_out, 3, b->xn, n);
        spex_fwd_run_phase(c, &ph, pre_attention, l, &L->wo, b->att, n, b->tmp);
        spex_fwd_ffn(c, &ph, l);
    }
    spex_fwd_head(c, &ph);
}

void spex_fwd_ffn(spex_context *c, fwd_phase *ph, int l) {
    const model_layer *L = &c->model->layers[l];
    fwd_bufs *b = &c->b;
    const int64_t n = c->n_tokens;
    const model_weight *gu[] = {&L->w_gate, &L->w_up};
    float *const gu_out[] = {b->gate, b->up};
    /* gate and up in column slices that match the SwiGLU's and the down conversion's split */
    const int64_t align = spex_matmul_col_align(L->w_down.type);
    ph->next_slice_align = align;
    spex_fwd_run_phase_multi(c, ph, spex_fwd_pre_ffn_norm, l, gu, gu_out, 2, b->xn, n);
    ph->next_conv_cols = true;
    spex_fwd_run_phase(c, ph, spex_fwd_pre_swiglu, l, &L->w_down, b->gate, n, b->tmp);
}

void spex_fwd_head(spex_context *c, fwd_phase *ph) {
    const spex_model *m = c->model;
    /* an embeddings context stops at hout (the final-norm rows): no LM head */
    const model_weight *head = c->params.embeddings ? NULL : &m->output;
    spex_fwd_run_phase(c, ph, spex_fwd_pre_output, m->hp.n_layer, head, c->b.hout, c->n_outputs, c->b.logits);
    c->phase = NULL;
}
