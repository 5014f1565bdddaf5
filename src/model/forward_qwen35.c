/*
 * forward_qwen35.c — the forward pass of the hybrid `qwen35` target over a batch that mixes
 * several sequences (../shared/docs/targets.md §6.6, §7, §9).
 *
 * What it is: per trunk layer, after n = RMSNorm(x; attn_norm),
 *   gated attention (§6.6):  [q_h | gate_h] = W_q n per head; QK-norm; NEOX RoPE on the first
 *                            n_rot dims; causal GQA attention over the KV cache; o_h *
 *                            sigmoid(gate_h); x += W_o o
 *   Gated DeltaNet (§7.1):   mixed = W_qkv n, z = W_gate n, beta = sigmoid(W_beta n),
 *                            g = softplus(W_alpha n + dt_bias) * ssm_a; causal depthwise conv
 *                            (kernel d_conv) over each sequence's mixed columns continuing its
 *                            stored window, SiLU; q, k L2-normalised per head; value head t
 *                            reads key head t mod Hk (tiled); the delta rule (src/cpu/gdn.c);
 *                            o' = RMSNorm(o; ssm_norm) * silu(z) per head; x += W_out o'
 * then the SwiGLU FFN with post_attention_norm, and the head as in the dense forward.
 * What it is not: the dense forward and the phase machinery (forward.c), the state ring and
 * batch validation (context.c, model.h "Recurrent state"), the MTP block (src/spec/mtp.c).
 *
 * Threading: the same phases as forward.c (one pool run per weight matrix). The GDN prologue
 * has four steps separated by barriers: beta/g per row; the conv per channel (each thread
 * owns a range of channels of every sequence, so window reads and ring writes of a channel
 * stay in one thread); the L2 norms per row; the recurrence per (sequence, value head) pair;
 * then the gated norm per row.
 *
 * Dimension legend: model.h, plus Hk, Hv, D = Dk = Dv, Cc = 2·Hk·D + Hv·D, d_conv.
 */
#include "cpu/api.h"
#include "model/forward_internal.h"
#include "cpu/gdn.h"

#include <math.h>
#include <string.h>

#define D_CONV_MAX 16
#define GDN_CHUNK 64

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ======================================================================== */
/* Gated attention                                                           */
/* ======================================================================== */

/* Unpacks [q_h | gate_h]; QK-norm, RoPE, cache store; barrier; attention; barrier; the
 * sigmoid output gate on this thread's rows. */
static void pre_gated_attention(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model_hparams *hp = &c->model->hp;
    const int hd = hp->head_dim, H = hp->n_head;
    const int64_t qd = (int64_t)H * hd;
    int64_t r0, r1;
    row_split(c->n_tokens, ith, nth, &r0, &r1);
    int32_t seq = r0 < r1 ? spex_fwd_seq_of_row(c, r0) : 0;
    for (int64_t r = r0; r < r1; r++) {
        while (c->seq_start[seq + 1] <= r) seq++;
        const float *qg = c->b.qg + r * 2 * qd;
        float *q = c->b.q + r * qd, *gate = c->b.agate + r * qd;
        for (int h = 0; h < H; h++) {
            memcpy(q + (int64_t)h * hd, qg + (int64_t)h * 2 * hd, sizeof(float) * (size_t)hd);
            memcpy(gate + (int64_t)h * hd, qg + (int64_t)h * 2 * hd + hd, sizeof(float) * (size_t)hd);
        }
        spex_fwd_qk_rope_store(c, ph, r, seq);
    }
    if (nth > 1) spex_pool_barrier(c->pool);
    spex_fwd_attend(c, ph, ith, nth);
    if (nth > 1) spex_pool_barrier(c->pool);
    for (int64_t r = r0; r < r1; r++) {
        float *o = c->b.att + r * qd;
        const float *gate = c->b.agate + r * qd;
        for (int64_t i = 0; i < qd; i++) o[i] *= sigmoidf_(gate[i]);
    }
}

/* ======================================================================== */
/* Gated DeltaNet                                                            */
/* ======================================================================== */

typedef struct gdn_dims {
    int Hk, Hv, D, d_conv;
    int64_t Cc, inner;
} gdn_dims;

static gdn_dims dims_of(const spex_model_hparams *hp) {
    gdn_dims d = {hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_state, hp->ssm_d_conv, 0, 0};
    d.inner = (int64_t)d.Hv * d.D;
    d.Cc = 2 * (int64_t)d.Hk * d.D + d.inner;
    return d;
}

/* How many of a sequence's k rows get their state written to the ring (model.h). */
static int32_t n_kept(const spex_context *c, int32_t k) {
    if (k > SPEX_QWEN35_RECURRENT_MAX) return 1;
    return k < c->rs_ring ? k : c->rs_ring;
}

/* Channels [c0, c1) of every sequence: conv over the window + this batch's columns, SiLU,
 * and the windows after the kept positions into the ring. */
static void gdn_conv(spex_context *c, const model_layer *L, const gdn_dims *d, int64_t c0, int64_t c1) {
    const int32_t ri = L->rs_index, W = d->d_conv - 1;
    for (int32_t s = 0; s < c->params.n_seq_max; s++) {
        const int32_t a0 = c->seq_start[s], k = c->seq_start[s + 1] - a0;
        if (k == 0) continue;
        const int32_t P0 = c->pos[a0];
        const float *win = P0 > 0 ? spex_rs_conv(c, s, P0 - 1, ri) : NULL;
        const int32_t first_kept = k - n_kept(c, k);
        for (int64_t ch = c0; ch < c1; ch++) {
            const float *w = L->conv1d + ch * d->d_conv;
            float hist[D_CONV_MAX];
            for (int j = 0; j < W; j++) hist[j] = win ? win[(int64_t)j * d->Cc + ch] : 0.0f;
            for (int32_t i = 0; i < k; i++) {
                const float xi = c->b.mixed[(int64_t)(a0 + i) * d->Cc + ch];
                float acc = w[W] * xi;
                for (int j = 0; j < W; j++) acc += w[j] * hist[j];
                c->b.conv[(int64_t)(a0 + i) * d->Cc + ch] = acc / (1.0f + expf(-acc));
                for (int j = 0; j + 1 < W; j++) hist[j] = hist[j + 1];
                hist[W - 1] = xi;
                if (i >= first_kept) {
                    float *dst = spex_rs_conv(c, s, P0 + i, ri);
                    for (int j = 0; j < W; j++) dst[(int64_t)j * d->Cc + ch] = hist[j];
                }
            }
        }
    }
}

/* The recurrence of value head t of sequence s (rows a0 .. a0+k-1): recurrent form with
 * ring snapshots for short runs, chunked form for prompt chunks (model.h). */
static void gdn_head(spex_context *c, const model_layer *L, const gdn_dims *d, int32_t s, int t, int ith) {
    const int32_t a0 = c->seq_start[s], k = c->seq_start[s + 1] - a0, P0 = c->pos[a0], ri = L->rs_index;
    const int kh = t % d->Hk;
    const int64_t hs = (int64_t)t * d->D * d->D;
    const float *base = c->b.conv + (int64_t)a0 * d->Cc;
    const int64_t nb_rows = c->n_tokens;
    spex_gdn_args a = {
        .Dk = d->D, .Dv = d->D, .n = k,
        .q = base + (int64_t)kh * d->D, .k = base + (int64_t)(d->Hk + kh) * d->D,
        .v = base + 2 * (int64_t)d->Hk * d->D + (int64_t)t * d->D,
        .beta = c->b.gbeta + (int64_t)a0 * d->Hv + t, .g = c->b.gbeta + (nb_rows + a0) * d->Hv + t,
        .o = c->b.ssm_o + (int64_t)a0 * d->inner + (int64_t)t * d->D,
        .q_stride = d->Cc, .k_stride = d->Cc, .v_stride = d->Cc, .g_stride = d->Hv, .beta_stride = d->Hv,
        .o_stride = d->inner,
        .S_in = P0 > 0 ? spex_rs_S(c, s, P0 - 1, ri) + hs : NULL,
    };
    if (k > SPEX_QWEN35_RECURRENT_MAX) {
        float *ws = c->b.gdn_ws + (size_t)ith * c->b.gdn_ws_floats;
        spex_gdn_chunked(&a, GDN_CHUNK, spex_rs_S(c, s, P0 + k - 1, ri) + hs, ws);
        return;
    }
    float **snap = c->b.snap + (size_t)ith * (size_t)(c->rs_ring + SPEX_QWEN35_RECURRENT_MAX);
    const int32_t kept = n_kept(c, k), lead = k - kept;
    if (lead > 0) {
        /* Rows whose state is not kept: chain in place in the first kept row's slot. */
        float *buf = spex_rs_S(c, s, P0 + lead, ri) + hs;
        for (int32_t i = 0; i < lead; i++) snap[i] = buf;
        a.n = lead;
        spex_gdn_recurrent(&a, snap);
        a.S_in = buf;
        a.q += (int64_t)lead * a.q_stride;
        a.k += (int64_t)lead * a.k_stride;
        a.v += (int64_t)lead * a.v_stride;
        a.g += (int64_t)lead * a.g_stride;
        a.beta += (int64_t)lead * a.beta_stride;
        a.o += (int64_t)lead * a.o_stride;
    }
    for (int32_t i = 0; i < kept; i++) snap[i] = spex_rs_S(c, s, P0 + lead + i, ri) + hs;
    a.n = kept;
    spex_gdn_recurrent(&a, snap);
}

static void pre_gdn(spex_context *c, const fwd_phase *ph, int ith, int nth) {
    const spex_model_hparams *hp = &c->model->hp;
    const model_layer *L = &c->model->layers[ph->layer];
    const gdn_dims d = dims_of(hp);
    const int64_t n = c->n_tokens;
    const spex_ops_kernels *k = ph->ops;
    int64_t r0, r1;
    row_split(n, ith, nth, &r0, &r1);

    /* 1. beta = sigmoid(.), g = softplus(alpha + dt_bias) * a (in place). */
    for (int64_t r = r0; r < r1; r++) {
        float *beta = c->b.gbeta + r * d.Hv, *g = c->b.gbeta + (n + r) * d.Hv;
        for (int t = 0; t < d.Hv; t++) {
            beta[t] = sigmoidf_(beta[t]);
            g[t] = softplusf_(g[t] + L->dt_bias[t]) * L->ssm_a[t];
        }
    }
    /* 2. conv + SiLU over channel ranges (independent of step 1). */
    int64_t c0, c1;
    row_split(d.Cc, ith, nth, &c0, &c1);
    gdn_conv(c, L, &d, c0, c1);
    if (nth > 1) spex_pool_barrier(c->pool);

    /* 3. L2-normalise the q and k heads: x / max(|x|, eps) (targets.md §7.1 step 5). */
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->b.conv + r * d.Cc;
        for (int h = 0; h < 2 * d.Hk; h++) {
            float *v = x + (int64_t)h * d.D;
            double ss = 0.0;
            for (int i = 0; i < d.D; i++) ss += (double)v[i] * v[i];
            float nrm = (float)sqrt(ss);
            const float inv = 1.0f / (nrm > hp->rms_eps ? nrm : hp->rms_eps);
            for (int i = 0; i < d.D; i++) v[i] *= inv;
        }
    }
    if (nth > 1) spex_pool_barrier(c->pool);

    /* 4. The recurrence, one (sequence, value head) pair at a time, pairs dealt round-robin. */
    int64_t pair = 0;
    for (int32_t s = 0; s < c->params.n_seq_max; s++) {
        if (c->seq_start[s + 1] == c->seq_start[s]) continue;
        for (int t = 0; t < d.Hv; t++, pair++)
            if (pair % nth == ith) gdn_head(c, L, &d, s, t, ith);
    }
    if (nth > 1) spex_pool_barrier(c->pool);

    /* 5. o' = RMSNorm(o; ssm_norm) * silu(z), per head, in place. */
    for (int64_t r = r0; r < r1; r++) {
        for (int t = 0; t < d.Hv; t++) {
            float *o = c->b.ssm_o + r * d.inner + (int64_t)t * d.D;
            k->rmsnorm(o, L->ssm_norm, o, d.D, hp->rms_eps);
            k->swiglu(c->b.z + r * d.inner + (int64_t)t * d.D, o, o, d.D);
        }
    }
}

/* ======================================================================== */
/* The pass                                                                  */
/* ======================================================================== */

void spex_forward_qwen35(spex_context *c) {
    const spex_model *m = c->model;
    const int64_t n = c->n_tokens;
    const int64_t Hv = m->hp.ssm_dt_rank;
    fwd_bufs *b = &c->b;
    fwd_phase ph;
    memset(&ph, 0, sizeof ph);
    ph.ops = spex_ops_get();

    for (int l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        if (L->recurrent) {
            const model_weight *in[] = {&L->w_qkv, &L->w_z, &L->w_beta, &L->w_alpha};
            float *const out[] = {b->mixed, b->z, b->gbeta, b->gbeta + n * Hv};
            spex_fwd_run_phase_multi(c, &ph, spex_fwd_pre_attn_norm, l, in, out, 4, b->xn, n);
            spex_fwd_run_phase(c, &ph, pre_gdn, l, &L->w_ssm_out, b->ssm_o, n, b->tmp);
        } else {
            const model_weight *in[] = {&L->wq, &L->wk, &L->wv};
            float *const out[] = {b->qg, b->k, b->v};
            spex_fwd_run_phase_multi(c, &ph, spex_fwd_pre_attn_norm, l, in, out, 3, b->xn, n);
            spex_fwd_run_phase(c, &ph, pre_gated_attention, l, &L->wo, b->att, n, b->tmp);
        }
        spex_fwd_ffn(c, &ph, l);
    }
    spex_fwd_head(c, &ph);
}
