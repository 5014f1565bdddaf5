/*
 * dflash_forward.c — the arithmetic of the DFlash drafters: context K/V injection (§7) and
 * the batched block forward with the final norm, the borrowed head, the logit transforms,
 * the per-slot top-K and the selector gate (§8–§12 of ../shared/docs/dflash2.md).
 *
 * What it is: per injected row
 *     c = RMSNorm(fc_scale * W_fc f; enc_norm);  per layer K = RoPE_neox(RMSNorm_head(W_k c)), V = W_v c
 * and per block row (blocks of several sequences in one batch, rows of a block contiguous)
 *     x = E[token] * input_embd_scale
 *     per layer:  u = RMSNorm(x; attn_norm);  DFlash2: δa = W_aconv u, u = Conv_0(u; δa)
 *                 q, k, v = W_q u, W_k u, W_v u;  per-head q/k norm;  NEOX RoPE at P + j
 *                 a = attention over [this sequence's context ; this block]  (non-causal unless
 *                     hparams.causal; SWA layers |q - k| < W);  a = W_o a
 *                 DFlash2: a = Conv_1(a; δa)  (the same δa);  x = x + a
 *                 u = RMSNorm(x; ffn_norm);  DFlash2: δf = W_fconv u, u = Conv_0(u; δf)
 *                 m = W_down(silu(W_gate u) * W_up u);  DFlash2: m = Conv_1(m; δf);  x = x + m
 *     rows 1..n:  h = RMSNorm(x; output_norm), z = head h, logit scale, softcap, top-K, gate = H h
 * What it is not: validation and memory (dflash_context.c), the selector walk.
 *
 * Dimension legend: dflash.h and dflash_ctx.h (D, H, H_kv, hd, F, V, nr, ns, ni, nd, ...).
 *
 * Threading: as forward.c — a sequence of phases, each one spex_pool_run of a row-wise
 * prologue (rows split statically over the threads) and one matmul through spex_matmul_task
 * over every row of the batch, so every weight is streamed once per forward. Attention runs
 * in the prologue of the W_o phase, one spex_attention call per block with every thread.
 *
 * Block K/V (Invariant B, §16): written into the sequence's cache rows P..P+n as scratch
 * (seq_len unchanged) so that one spex_attention call over rows 0..P+n sees the context and
 * the block; kv position = row index. The convolution (§10) is computed in fp32 with the
 * output row's coefficients, never crossing the block start (row_j < t reads zero).
 *
 * Determinism: every op computes a row the same way whatever the other rows are (the matmul
 * contract, per-block attention), so a block's outputs do not depend on which other blocks
 * share the forward.
 */
#include "cpu/api.h"
#include "model/api.h"
#include "model/dflash_ctx.h"
#include "tensor/api.h"

#include <math.h>
#include <string.h>

/* ======================================================================== */
/* Phases                                                                    */
/* ======================================================================== */

typedef void (*pre_fn)(spex_draft_context *c, const draft_phase *ph, int ith, int nth);

struct draft_phase {
    pre_fn pre;
    int layer;
    const spex_ops_kernels *ops;
    int n_mm;    /* matmuls over the same activations (one conversion, one chunk sequence) */
    bool head;   /* the output head: the top-K is fused into the matmul's chunks (head_chunk) */
    spex_matmul_args mm[SPEX_MATMUL_MULTI_MAX];
};

static void head_chunk(void *ctx, int ith, int64_t r0, int64_t nr, int64_t o0, int64_t no);

static void phase_task(void *arg, int ith, int nth) {
    spex_draft_context *c = arg;
    const draft_phase *ph = c->phase;
    if (ph->pre) {
        ph->pre(c, ph, ith, nth);
        if (ph->n_mm && nth > 1) spex_pool_barrier(c->pool);
    }
    if (ph->n_mm) spex_matmul_task_multi(ph->mm, ph->n_mm, ith, nth);
}

static void run_phase_multi(spex_draft_context *c, draft_phase *ph, pre_fn pre, int layer,
                            const model_weight *const *w, float *const *Y, int n_w, const float *X, int64_t ldx,
                            int64_t n_rows);

/* Runs one phase: prologue `pre` (may be NULL), then Y[n_rows][w.n_out] = X · Wᵀ (X rows ldx
 * floats apart) when w is non-NULL and n_rows > 0. */
static void run_phase(spex_draft_context *c, draft_phase *ph, pre_fn pre, int layer, const model_weight *w,
                      const float *X, int64_t ldx, int64_t n_rows, float *Y) {
    run_phase_multi(c, ph, pre, layer, &w, &Y, w != NULL, X, ldx, n_rows);
}

/* The same with n_w matrices over the same X (Y[i] = X · w[i]ᵀ): one pool run when their
 * activation types agree, else the first with the prologue and the rest in runs of their own. */
static void run_phase_multi(spex_draft_context *c, draft_phase *ph, pre_fn pre, int layer,
                            const model_weight *const *w, float *const *Y, int n_w, const float *X, int64_t ldx,
                            int64_t n_rows) {
    ph->pre = pre;
    ph->layer = layer;
    ph->n_mm = 0;
    for (int i = 0; i < n_w && n_rows > 0; i++) {
        const model_weight *wi = w[i];
        spex_matmul_args a = {
            .pool = c->pool, .wtype = wi->type, .W = wi->data, .n_out = wi->n_out, .n = wi->n_in,
            .X = X, .ldx = ldx, .n_rows = n_rows, .Y = Y[i], .ldy = wi->n_out, .ws = c->mm_ws,
            .on_chunk = ph->head ? head_chunk : NULL, .chunk_ctx = c, .w_r16 = wi->r16,
        };
        if (ph->n_mm > 0 && !spex_matmul_can_share(&ph->mm[0], &a)) {
            c->phase = ph;
            spex_pool_run_site(c->pool, phase_task, c, SPEX_SITE_DRAFT);
            ph->pre = NULL;
            ph->n_mm = 0;
        }
        ph->mm[ph->n_mm++] = a;
    }
    c->phase = ph;
    spex_pool_run_site(c->pool, phase_task, c, SPEX_SITE_DRAFT);
}

static size_t ws_max(size_t ws, const model_weight *w, int64_t rows) {
    if (!w->data || rows <= 0) return ws;
    const size_t s = spex_matmul_ws_size(w->type, w->n_in, rows);
    return s > ws ? s : ws;
}

size_t spex_dflash_mm_ws_size(const spex_drafter *d, int32_t nr_max, int32_t ns_max, int32_t ni_max) {
    size_t ws = 0;
    const int64_t rows = nr_max > ni_max ? nr_max : ni_max;
    ws = ws_max(ws, &d->fc, ni_max);
    ws = ws_max(ws, &d->head, ns_max);
    ws = ws_max(ws, &d->sel_hidden, ns_max);
    for (int l = 0; l < d->hp.n_layer; l++) {
        const dflash_layer *L = &d->layers[l];
        const model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                   &L->attn_conv_proj, &L->ffn_conv_proj};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) ws = ws_max(ws, w[i], rows);
    }
    return ws;
}

static inline void row_split(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1) {
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

/* Stores k and v (f32, kv_dim each) at (layer, seq, pos) in kv_type. */
static void store_kv(spex_draft_context *c, int l, int32_t seq, int32_t pos, const float *k, const float *v) {
    const int64_t kvd = (int64_t)c->d->hp.n_head_kv * c->d->hp.head_dim;
    const spex_type t = c->params.kv_type;
    void *kd = spex_draft_kv_row(c, false, l, seq, pos);
    void *vd = spex_draft_kv_row(c, true, l, seq, pos);
    if (t == SPEX_TYPE_F32) {
        memcpy(kd, k, sizeof(float) * (size_t)kvd);
        memcpy(vd, v, sizeof(float) * (size_t)kvd);
    } else if (t == SPEX_TYPE_F16) {
        const spex_ops_kernels *ok = spex_ops_get();
        ok->cvt_f32_f16(k, kd, kvd);
        ok->cvt_f32_f16(v, vd, kvd);
    } else {
        spex_quantize_row_ref(t, k, kd, kvd);
        spex_quantize_row_ref(t, v, vd, kvd);
    }
}

/* ======================================================================== */
/* Injection (§7)                                                            */
/* ======================================================================== */

/* c = RMSNorm(fc_scale * y; enc_norm); RoPE angles of each row's position. */
static void pre_fuse(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter *d = c->d;
    const int64_t D = d->hp.n_embd;
    int64_t r0, r1;
    row_split(c->n_irows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *y = c->iy + r * D;
        if (d->fc_scale != 1.0f) ph->ops->scale(y, d->fc_scale, y, D);
        ph->ops->rmsnorm(y, d->enc_norm, c->ic + r * D, D, d->hp.rms_eps);
        spex_rope_cache_freqs(c->rope + r * d->hp.n_rot, c->row_pos[r], d->hp.n_rot, 1.0f, c->rope_inv);
    }
}

/* Layer ph->layer - 1's injected K (k_norm, RoPE) and V into the cache. */
static void pre_inject_store(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter_hparams *hp = &c->d->hp;
    const int l = ph->layer - 1;
    const int hd = hp->head_dim, Hkv = hp->n_head_kv;
    const int64_t kvd = (int64_t)Hkv * hd;
    int64_t r0, r1;
    row_split(c->n_irows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *k = c->ik + r * kvd;
        spex_rmsnorm_rows(ph->ops, k, hd, c->d->layers[l].k_norm, k, hd, Hkv, hd, hp->rms_eps);
        ph->ops->rope(k, Hkv, hd, hp->n_rot, SPEX_ROPE_NEOX, c->rope + r * hp->n_rot);
        store_kv(c, l, c->row_seq[r], c->row_pos[r], k, c->iv + r * kvd);
    }
}

void spex_dflash_inject_rows(spex_draft_context *c, const float *features, int64_t ld_features) {
    const spex_drafter *d = c->d;
    const int64_t n = c->n_irows;
    draft_phase ph;
    memset(&ph, 0, sizeof ph);
    ph.ops = spex_ops_get();
    run_phase(c, &ph, NULL, 0, &d->fc, features, ld_features, n, c->iy);
    for (int l = 0; l < d->hp.n_layer; l++) {
        const dflash_layer *L = &d->layers[l];
        const model_weight *kv[] = {&L->wk, &L->wv};
        float *const kv_out[] = {c->ik, c->iv};
        run_phase_multi(c, &ph, l == 0 ? pre_fuse : pre_inject_store, l, kv, kv_out, 2, c->ic, d->hp.n_embd, n);
    }
    run_phase(c, &ph, pre_inject_store, d->hp.n_layer, NULL, NULL, 0, 0, NULL);
    c->phase = NULL;
}

/* ======================================================================== */
/* Grouped dynamic depthwise convolution (§10)                               */
/* ======================================================================== */

/* Side s of one conv module for row r (in-block index j) of `in` ([nr][D]):
 *   out[c] (+)= Σ_{t <= min(j, T_c-1)} (base[s][t][c] + δ_r[s][t][c / g]) · in[r - t][c]
 * written to dst (add: accumulated into dst, the residual add of the side-1 output). */
static void conv_row(const spex_draft_context *c, const float *in, int64_t r, const float *base,
                     const float *delta, int s, float *dst, bool add) {
    const spex_drafter_hparams *hp = &c->d->hp;
    const int64_t D = hp->n_embd;
    const int Tc = hp->conv_kernel, g = hp->conv_group, G = hp->n_embd / hp->conv_group;
    const int j = c->row_j[r];
    const float *dr = delta + r * c->nd;
    for (int64_t ch = 0; ch < D; ch++) {
        float acc = 0.0f;
        for (int t = 0; t < Tc && t <= j; t++) {
            const float w = base[ch + D * (t + (int64_t)Tc * s)] + dr[ch / g + G * (t + Tc * s)];
            acc += w * in[(r - t) * D + ch];
        }
        dst[ch] = add ? dst[ch] + acc : acc;
    }
}

/* ======================================================================== */
/* Block forward prologues                                                   */
/* ======================================================================== */

static bool is_v2(const spex_draft_context *c) { return c->d->hp.variant == SPEX_DFLASH2; }

/* Layer input: x = E[token] * s_emb (layer 0, with the RoPE angles) or x += the previous
 * layer's FFN output (DFlash2: after its side-1 conv); u = RMSNorm(x; attn_norm). */
static void pre_layer_in(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter *d = c->d;
    const spex_drafter_hparams *hp = &d->hp;
    const int64_t D = hp->n_embd;
    const int l = ph->layer;
    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->x + r * D;
        if (l == 0) {
            spex_model_weight_row(&d->tok_embd, c->row_tok[r], x);
            if (hp->input_embd_scale != 1.0f) ph->ops->scale(x, hp->input_embd_scale, x, D);
            spex_rope_cache_freqs(c->rope + r * hp->n_rot, c->row_pos[r], hp->n_rot, 1.0f, c->rope_inv);
        } else if (is_v2(c)) {
            conv_row(c, c->tmp, r, d->layers[l - 1].ffn_conv_base, c->df, 1, x, true);
        } else {
            ph->ops->acc(x, c->tmp + r * D, D);
        }
        ph->ops->rmsnorm(x, d->layers[l].attn_norm, c->xn + r * D, D, hp->rms_eps);
    }
}

/* DFlash2: xc = Conv_0(xn; δ) of the attention (ffn = false) or FFN module. */
static void conv0_rows(spex_draft_context *c, const draft_phase *ph, int ith, int nth, bool ffn) {
    const dflash_layer *L = &c->d->layers[ph->layer];
    const int64_t D = c->d->hp.n_embd;
    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        conv_row(c, c->xn, r, ffn ? L->ffn_conv_base : L->attn_conv_base, ffn ? c->df : c->da, 0, c->xc + r * D,
                 false);
}
static void pre_conv0_attn(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    conv0_rows(c, ph, ith, nth, false);
}
static void pre_conv0_ffn(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    conv0_rows(c, ph, ith, nth, true);
}

/* QK-norm, RoPE, block K/V into the scratch cache rows; barrier; attention of each block
 * over its sequence's rows 0 .. P+n. */
static void pre_attention(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter_hparams *hp = &c->d->hp;
    const dflash_layer *L = &c->d->layers[ph->layer];
    const int l = ph->layer, hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t qd = (int64_t)H * hd, kvd = (int64_t)Hkv * hd;
    const spex_ops_kernels *k = ph->ops;

    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *q = c->q + r * qd, *kr = c->k + r * kvd;
        spex_rmsnorm_rows(k, q, hd, L->q_norm, q, hd, H, hd, hp->rms_eps);
        spex_rmsnorm_rows(k, kr, hd, L->k_norm, kr, hd, Hkv, hd, hp->rms_eps);
        const float *cs = c->rope + r * hp->n_rot;
        k->rope(q, H, hd, hp->n_rot, SPEX_ROPE_NEOX, cs);
        k->rope(kr, Hkv, hd, hp->n_rot, SPEX_ROPE_NEOX, cs);
        store_kv(c, l, c->row_seq[r], c->row_pos[r], kr, c->v + r * kvd);
    }
    if (nth > 1) spex_pool_barrier(c->pool);

    float *scratch = c->attn_ws + (size_t)ith * c->attn_ws_floats;
    /* A Q8_0 cache is read in place when each head's slice is whole blocks (ops.c converts it
     * a tile at a time); otherwise each block's region is expanded to f32 first. */
    const bool q8 = c->params.kv_type == SPEX_TYPE_Q8_0 && hd % 32 != 0;
    const bool swa = hp->swa_window > 0 && hp->swa_layer[l];
    for (int32_t b = 0; b < c->n_blocks; b++) {
        const int32_t a0 = c->blk_row0[b], nq = c->blk_row0[b + 1] - a0, s = c->blocks[b].seq;
        const int32_t n_kv = c->row_pos[a0 + nq - 1] + 1;   /* context P rows + the block */
        spex_attn_args a = {
            .n_q = nq, .n_head = H, .n_head_kv = Hkv, .head_dim = hd,
            .q = c->q + (int64_t)a0 * qd, .q_stride = qd, .q_pos = c->row_pos + a0,
            .kv_type = c->params.kv_type, .n_kv = n_kv,
            .k = spex_draft_kv_row(c, false, l, s, 0), .v = spex_draft_kv_row(c, true, l, s, 0),
            .k_stride = c->kv_row_bytes, .v_stride = c->kv_row_bytes, .kv_pos = NULL,
            .scale = 0.0f, .causal = hp->causal, .window = swa ? hp->swa_window : 0, .window_symmetric = true,
            .out = c->att + (int64_t)a0 * qd, .out_stride = qd,
        };
        if (q8) {
            /* blocks would span heads: expand this region to f32 first */
            float *kf = c->kv_f32, *vf = c->kv_f32 + (size_t)c->params.n_ctx_per_seq * (size_t)kvd;
            int64_t t0, t1;
            row_split(n_kv, ith, nth, &t0, &t1);
            for (int64_t t = t0; t < t1; t++) {
                spex_dequantize_row_ref(SPEX_TYPE_Q8_0, spex_draft_kv_row(c, false, l, s, (int32_t)t), kf + t * kvd,
                                        kvd);
                spex_dequantize_row_ref(SPEX_TYPE_Q8_0, spex_draft_kv_row(c, true, l, s, (int32_t)t), vf + t * kvd,
                                        kvd);
            }
            if (nth > 1) spex_pool_barrier(c->pool);
            a.kv_type = SPEX_TYPE_F32;
            a.k = kf;
            a.v = vf;
            a.k_stride = a.v_stride = sizeof(float) * (size_t)kvd;
            spex_attention(k, &a, ith, nth, scratch);
            if (nth > 1) spex_pool_barrier(c->pool); /* the expanded region is reused */
        } else {
            spex_attention(k, &a, ith, nth, scratch);   /* blocks' outputs are disjoint */
        }
    }
}

/* x += attention output (DFlash2: after the side-1 conv with the same δa); u = RMSNorm(x; ffn_norm). */
static void pre_ffn_norm(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter_hparams *hp = &c->d->hp;
    const dflash_layer *L = &c->d->layers[ph->layer];
    const int64_t D = hp->n_embd;
    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->x + r * D;
        if (is_v2(c)) conv_row(c, c->tmp, r, L->attn_conv_base, c->da, 1, x, true);
        else ph->ops->acc(x, c->tmp + r * D, D);
        ph->ops->rmsnorm(x, L->ffn_norm, c->xn + r * D, D, hp->rms_eps);
    }
}

static void pre_swiglu(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const int64_t F = c->d->hp.n_ff;
    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) ph->ops->swiglu(c->gate + r * F, c->up + r * F, c->gate + r * F, F);
}

/* x += the last layer's FFN output; h_out of every slot row (rows 1..n of each block). */
static void pre_output(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const spex_drafter *d = c->d;
    const int64_t D = d->hp.n_embd;
    const int lastl = d->hp.n_layer - 1;
    int64_t r0, r1;
    row_split(c->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->x + r * D;
        if (is_v2(c)) conv_row(c, c->tmp, r, d->layers[lastl].ffn_conv_base, c->df, 1, x, true);
        else ph->ops->acc(x, c->tmp + r * D, D);
        const int32_t sl = c->row_slot[r];
        if (sl >= 0) ph->ops->rmsnorm(x, d->output_norm, c->hout + (int64_t)sl * D, D, d->hp.rms_eps);
    }
    /* the top-K heaps of this thread's slots (every thread's heap of each), filled by
     * head_chunk during the head's matmul */
    row_split(c->n_slots, ith, nth, &r0, &r1);
    const size_t hk = (size_t)c->nth * (size_t)c->K;
    for (int64_t s = r0; s < r1; s++) spex_ops_topk_empty(c->tk_idx + (size_t)s * hk, c->tk_val + (size_t)s * hk, (int)hk);
}

/* The logit transforms of §11.3 on z[0 .. n). */
static void logit_transforms(const spex_drafter_hparams *hp, const spex_ops_kernels *ops, float *z, int64_t n) {
    if (hp->logit_scale != 0.0f && hp->logit_scale != 1.0f) ops->scale(z, hp->logit_scale, z, n);
    if (hp->softcap > 0.0f) {
        const float cap = hp->softcap, inv = 1.0f / hp->softcap;
        for (int64_t i = 0; i < n; i++) z[i] = cap * tanhf(z[i] * inv);
    }
}

/* A chunk of the head's output (slot rows [r0, r0 + nr), vocabulary [o0, o0 + no)), still in
 * this thread's cache: transforms in place, then into this thread's heap of each slot. The
 * full-vocabulary rows are never scanned again (the head and the top-K fused). */
static void head_chunk(void *ctx, int ith, int64_t r0, int64_t nr, int64_t o0, int64_t no) {
    spex_draft_context *c = ctx;
    const spex_drafter_hparams *hp = &c->d->hp;
    const int64_t V = hp->n_vocab;
    const int K = c->K;
    for (int64_t r = r0; r < r0 + nr; r++) {
        float *z = c->logits + r * V + o0;
        logit_transforms(hp, c->phase->ops, z, no);
        const size_t off = ((size_t)r * (size_t)c->nth + (size_t)ith) * (size_t)K;
        spex_ops_topk_scan(z, no, (int32_t)o0, K, c->tk_idx + off, c->tk_val + off);
    }
}

/* The slot's top-K, sorted by value descending, ties by lower id (§12.3: the ops table's
 * topk has exactly that order): the merge of every thread's heap (head_chunk). A heap merge
 * with fewer than K real entries (fewer than K logits above -inf) falls back to one topk
 * over the transformed row, which is then complete. */
static void pre_select(spex_draft_context *c, const draft_phase *ph, int ith, int nth) {
    const int64_t V = c->d->hp.n_vocab;
    const int K = c->K;
    const size_t hk = (size_t)c->nth * (size_t)K;   /* a slot's heaps lie side by side */
    int64_t s0, s1;
    row_split(c->n_slots, ith, nth, &s0, &s1);
    for (int64_t s = s0; s < s1; s++) {
        int got = spex_ops_topk_merge(c->tk_idx + (size_t)s * hk, c->tk_val + (size_t)s * hk, (int)hk, K,
                                      c->cand + s * K, c->cand_u + s * K);
        if (got < K) ph->ops->topk(c->logits + s * V, V, K, c->cand + s * K, c->cand_u + s * K);
    }
}

/* ======================================================================== */
/* The pass                                                                  */
/* ======================================================================== */

void spex_dflash_forward_blocks(spex_draft_context *c) {
    const spex_drafter *d = c->d;
    const spex_drafter_hparams *hp = &d->hp;
    const int64_t n = c->n_rows, D = hp->n_embd;
    const bool v2 = is_v2(c);
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim, F = hp->n_ff;
    const float *ua = v2 ? c->xc : c->xn;   /* the matmul input after the side-0 conv */
    const size_t xrow = sizeof(float) * (size_t)D, drow = sizeof(float) * (size_t)c->nd;
    const size_t dbg_stride = (size_t)c->nr_max;
    draft_phase ph;
    memset(&ph, 0, sizeof ph);
    ph.ops = spex_ops_get();

    for (int l = 0; l < hp->n_layer; l++) {
        const dflash_layer *L = &d->layers[l];
        const model_weight *qkv[] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_out[] = {c->q, c->k, c->v};
        if (v2) {
            run_phase(c, &ph, pre_layer_in, l, &L->attn_conv_proj, c->xn, D, n, c->da);
            run_phase_multi(c, &ph, pre_conv0_attn, l, qkv, qkv_out, 3, ua, D, n);
        } else {
            run_phase_multi(c, &ph, pre_layer_in, l, qkv, qkv_out, 3, ua, D, n);
        }
        if (c->debug && l > 0) memcpy(c->dbg_out + (size_t)(l - 1) * dbg_stride * D, c->x, (size_t)n * xrow);
        if (c->debug && v2) memcpy(c->dbg_da + (size_t)l * dbg_stride * c->nd, c->da, (size_t)n * drow);
        run_phase(c, &ph, pre_attention, l, &L->wo, c->att, qd, n, c->tmp);
        const model_weight *gu[] = {&L->w_gate, &L->w_up};
        float *const gu_out[] = {c->gate, c->up};
        if (v2) {
            run_phase(c, &ph, pre_ffn_norm, l, &L->ffn_conv_proj, c->xn, D, n, c->df);
            run_phase_multi(c, &ph, pre_conv0_ffn, l, gu, gu_out, 2, ua, D, n);
            if (c->debug) memcpy(c->dbg_df + (size_t)l * dbg_stride * c->nd, c->df, (size_t)n * drow);
        } else {
            run_phase_multi(c, &ph, pre_ffn_norm, l, gu, gu_out, 2, ua, D, n);
        }
        run_phase(c, &ph, pre_swiglu, l, &L->w_down, c->gate, F, n, c->tmp);
    }
    ph.head = true;
    run_phase(c, &ph, pre_output, hp->n_layer, &d->head, c->hout, D, c->n_slots, c->logits);
    ph.head = false;
    if (c->debug) memcpy(c->dbg_out + (size_t)(hp->n_layer - 1) * dbg_stride * D, c->x, (size_t)n * xrow);
    run_phase(c, &ph, pre_select, hp->n_layer, v2 ? &d->sel_hidden : NULL, c->hout, D, c->n_slots, c->gatev);
    c->phase = NULL;
}
