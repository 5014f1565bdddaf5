/*
 * context.c — spex_context: parameters, allocation of every per-run buffer, the KV cache
 * API, and spex_forward's batch validation and ordering (include/spex.h, "Models").
 *
 * What it is: everything around the forward pass that owns memory or state. All memory is
 * allocated in spex_context_init; spex_forward and the KV functions allocate nothing.
 * What it is not: the arithmetic of the forward pass (forward.c).
 *
 * KV cache (model.h has the layout): per-sequence contiguous regions, so the length of a
 * sequence is its whole state. Truncate = set the length (O(1), rows beyond it are left as
 * they are and overwritten by later forwards); clear = length 0; copy = a memcpy of the
 * prefix region in each layer for K and V.
 */
#include "cpu/api.h"
#include "model/api.h"
#include "model/model.h"
#include "cpu/gdn.h"
#include "core/mem.h"
#include "tensor/api.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_MAX 65536        /* sanity bound on n_seq_max                        */
#define BUF_ALIGN 64

/* ======================================================================== */
/* Parameters                                                                */
/* ======================================================================== */

spex_context_params spex_context_default_params(void) {
    spex_context_params p;
    memset(&p, 0, sizeof p);
    p.n_seq_max = 1;
    p.n_ctx_per_seq = 0;
    p.n_batch_max = 512;
    p.n_outputs_max = 0;
    p.kv_type = SPEX_TYPE_F16;
    p.n_threads = 1;
    p.tap_clamp = true;
    p.n_rs_seq = 0;
    p.n_ctx_checkpoints = 0;
    p.checkpoint_min_step = 8192;
    return p;
}

/* ======================================================================== */
/* Allocation                                                                */
/* ======================================================================== */

void *spex_ctx_buf_alloc(uint64_t bytes, uint64_t *total) {
    if (bytes == 0) bytes = BUF_ALIGN;
    uint64_t r = (bytes + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    if (r > SIZE_MAX / 2) return NULL;
    void *p = spex_alloc_large((size_t)r);
    if (p) {
        memset(p, 0, (size_t)r);
        *total += spex_alloc_large_size((size_t)r);
    }
    return p;
}

void spex_context_free(spex_context *ctx) {
    if (!ctx) return;
    if (ctx->own_pool) spex_pool_free(ctx->pool);
    spex_free_zeroed(ctx->k_cache, ctx->kv_bytes);
    spex_free_zeroed(ctx->v_cache, ctx->kv_bytes);
    free(ctx->rs_S);
    free(ctx->rs_conv);
    free(ctx->rs_lo);
    free(ctx->ck_S);
    free(ctx->ck_conv);
    free(ctx->ck_pos);
    free(ctx->hist);
    free(ctx->rp_batch);
    fwd_bufs *b = &ctx->b;
    void *bufs[] = {b->x, b->xn, b->tmp, b->q, b->k, b->v, b->att, b->gate, b->up, b->rope, b->hout, b->logits,
                    b->taps, b->mm_ws, b->attn_ws, b->kv_f32, b->qg, b->agate, b->mixed, b->conv, b->z,
                    b->gbeta, b->ssm_o, b->gdn_ws, b->snap, ctx->tap_ids, ctx->tap_slot, ctx->seq_len, ctx->perm,
                    ctx->row_of, ctx->tok, ctx->pos, ctx->out_row, ctx->out_of, ctx->seq_start, ctx->seq_next};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(ctx);
}

static spex_status resolve_params(const spex_model *m, spex_context_params *p, spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    if (p->n_seq_max < 1 || p->n_seq_max > SEQ_MAX)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_seq_max %d, expected 1 .. %d", p->n_seq_max,
                              SEQ_MAX);
    if (p->n_ctx_per_seq < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_ctx_per_seq %d, expected >= 0", p->n_ctx_per_seq);
    if (p->n_ctx_per_seq == 0) p->n_ctx_per_seq = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p->n_ctx_per_seq > hp->n_ctx_train)
        spex_model_log(m, "context: warning: n_ctx_per_seq %d exceeds the training context %d", p->n_ctx_per_seq,
                       hp->n_ctx_train);
    if (p->n_batch_max < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_batch_max %d, expected >= 1", p->n_batch_max);
    /* A batch can never hold more tokens than all sequences have room for. */
    const int64_t cap = (int64_t)p->n_seq_max * p->n_ctx_per_seq;
    if (p->n_batch_max > cap) p->n_batch_max = (int32_t)cap;
    if (p->n_outputs_max < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_outputs_max %d, expected >= 0", p->n_outputs_max);
    if (p->n_outputs_max == 0) p->n_outputs_max = 64;
    if (p->n_outputs_max > p->n_batch_max) p->n_outputs_max = p->n_batch_max;
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    if (p->kv_type != SPEX_TYPE_F16 && p->kv_type != SPEX_TYPE_F32 && p->kv_type != SPEX_TYPE_Q8_0) {
        const spex_type_info *ti = spex_type_get_info((int)p->kv_type);
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "context: kv_type %s: expected f16, f32 or q8_0",
                              ti ? ti->name : "unknown");
    }
    if (p->kv_type == SPEX_TYPE_Q8_0 && kv_dim % 32 != 0)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "context: kv_type q8_0 needs n_head_kv * head_dim (%" PRId64 ") to be a multiple of 32",
                              kv_dim);
    if (p->n_rs_seq < 0 || p->n_rs_seq > 256)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_rs_seq %d, expected 0 .. 256", p->n_rs_seq);
    if (p->n_ctx_checkpoints < 0 || p->n_ctx_checkpoints > 1024 || p->checkpoint_min_step < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "context: n_ctx_checkpoints %d (expected 0 .. 1024), checkpoint_min_step %d (>= 1)",
                              p->n_ctx_checkpoints, p->checkpoint_min_step);
    if (p->n_taps < 0 || (p->n_taps > 0 && !p->tap_layers))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: n_taps %d with tap_layers %s", p->n_taps,
                              p->tap_layers ? "set" : "NULL");
    for (int i = 0; i < p->n_taps; i++) {
        if (p->tap_layers[i] < 0 || p->tap_layers[i] > hp->n_layer)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: tap layer id %d, expected 0 .. %d (n_layer)",
                                  p->tap_layers[i], hp->n_layer);
        for (int j = 0; j < i; j++)
            if (p->tap_layers[j] == p->tap_layers[i])
                return spex_error_set(err, SPEX_ERR_INVALID_ARG, "context: tap layer id %d listed twice",
                                      p->tap_layers[i]);
    }
    return SPEX_OK;
}

static const char *type_name(spex_type t) {
    const spex_type_info *ti = spex_type_get_info((int)t);
    return ti ? ti->name : "?";
}

/* The recurrent state ring (model.h) of every sequence, its checkpoints and the token history
 * a rewind replays: calloc'd, as slots are written before they are read. *ok false: out of
 * memory (the caller reports it with the other buffers). */
static spex_status alloc_ring(spex_context *c, const spex_model_hparams *hp, const spex_context_params *p,
                              uint64_t *rs_bytes, bool *rs_ok, spex_error *err) {
    const uint64_t S = (uint64_t)p->n_seq_max, C = (uint64_t)p->n_ctx_per_seq, nb = (uint64_t)p->n_batch_max;
    spex_qwen35_plan plan;
    if (spex_model_plan(hp, p->n_rs_seq, &plan) != 0)
        return spex_error_set(err, SPEX_ERR_RANGE, "context: recurrent hyper-parameters outside the memory plan");
    const uint64_t R = 1 + (uint64_t)p->n_rs_seq, NR = (uint64_t)hp->n_recurrent;
    c->rs_ring = (int32_t)R;
    c->rs_S_floats = plan.layer_S_floats;
    c->rs_conv_floats = plan.layer_conv_floats;
    const uint64_t nS = S * R * NR * c->rs_S_floats, nC = S * R * NR * c->rs_conv_floats;
    if (nS > (uint64_t)SIZE_MAX / 8 || nC > (uint64_t)SIZE_MAX / 8)
        return spex_error_set(err, SPEX_ERR_RANGE, "context: recurrent state of %" PRIu64 " floats is too large",
                              nS + nC);
    c->rs_S = calloc((size_t)nS, sizeof(float));
    c->rs_conv = calloc((size_t)nC, sizeof(float));
    c->rs_lo = calloc((size_t)S, sizeof(int32_t));
    *rs_bytes = (nS + nC) * sizeof(float);
    *rs_ok = c->rs_S && c->rs_conv && c->rs_lo;
    /* checkpoints and the token history a rewind replays */
    const uint64_t nk = (uint64_t)p->n_ctx_checkpoints;
    c->n_ck = p->n_ctx_checkpoints;
    c->ck_S = calloc(nk ? (size_t)(S * nk * NR * c->rs_S_floats) : 1, sizeof(float));
    c->ck_conv = calloc(nk ? (size_t)(S * nk * NR * c->rs_conv_floats) : 1, sizeof(float));
    c->ck_pos = malloc(sizeof(int32_t) * (size_t)(S * (nk ? nk : 1)));
    c->hist = calloc((size_t)(S * C), sizeof(int32_t));
    c->rp_batch = calloc((size_t)nb, sizeof(spex_batch_token));
    *rs_bytes += S * nk * NR * (c->rs_S_floats + c->rs_conv_floats) * sizeof(float);
    *rs_ok = *rs_ok && c->ck_S && c->ck_conv && c->ck_pos && c->hist && c->rp_batch;
    if (c->ck_pos)
        for (uint64_t i = 0; i < S * (nk ? nk : 1); i++) c->ck_pos[i] = -1;
    return SPEX_OK;
}

/* qwen35's forward buffers: the gated attention's, and the Gated DeltaNet layers' (mixed
 * projections, conv, z, gates, output, per-thread chunk scratch and ring snapshots). */
static bool alloc_q35_bufs(spex_context *c, const spex_model_hparams *hp, uint64_t nb, uint64_t *compute_bytes) {
    fwd_bufs *b = &c->b;
    uint64_t compute = 0;
    const uint64_t qd = (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    bool q35_ok = true;
    if (hp->attn_gated) {
        b->qg = spex_ctx_buf_alloc(nb * 2 * qd * 4, &compute);
        b->agate = spex_ctx_buf_alloc(nb * qd * 4, &compute);
        q35_ok = b->qg && b->agate;
    }
    if (hp->n_recurrent > 0) {
        const uint64_t Cc = 2ull * (uint64_t)hp->ssm_n_group * (uint64_t)hp->ssm_d_state + (uint64_t)hp->ssm_d_inner;
        const uint64_t Hv = (uint64_t)hp->ssm_dt_rank, inner = (uint64_t)hp->ssm_d_inner;
        b->gdn_ws_floats = (spex_gdn_chunked_scratch_floats(hp->ssm_d_state, hp->ssm_d_state, SPEX_GDN_CHUNK_MAX) + 15) /
                           16 * 16;
        b->mixed = spex_ctx_buf_alloc(nb * Cc * 4, &compute);
        b->conv = spex_ctx_buf_alloc(nb * Cc * 4, &compute);
        b->z = spex_ctx_buf_alloc(nb * inner * 4, &compute);
        b->gbeta = spex_ctx_buf_alloc(nb * 2 * Hv * 4, &compute);
        b->ssm_o = spex_ctx_buf_alloc(nb * inner * 4, &compute);
        b->gdn_ws = spex_ctx_buf_alloc((uint64_t)c->nth * b->gdn_ws_floats * 4, &compute);
        b->snap = spex_ctx_buf_alloc((uint64_t)c->nth * (uint64_t)(c->rs_ring + SPEX_QWEN35_RECURRENT_MAX) *
                                         sizeof(float *), &compute);
        q35_ok = q35_ok && b->mixed && b->conv && b->z && b->gbeta && b->ssm_o && b->gdn_ws && b->snap;
    }
    *compute_bytes += compute;
    return q35_ok;
}

/* The KV cache: zeroed pages committed as first touched, head-major (model.h), advised for
 * huge pages (core/mem.h): each kv head's stream then commits in 2 MiB steps (the whole
 * default cache after one token, as llama.cpp commits it at load), and a decode at 3000
 * positions runs 10 % faster than on 4 KiB pages (docs/performance.md, "Attention and the
 * KV cache at depth"). *rows: the cache's rows per K or V. A failed allocation leaves
 * k_cache or v_cache NULL for the caller to report with the other buffers. */
static spex_status alloc_kv(spex_context *c, const spex_model *m, const spex_context_params *p, uint64_t *rows,
                            spex_error *err) {
    const spex_model_hparams *hp = &m->hp;
    const uint64_t kvd = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    c->kv_row_bytes = spex_type_row_size(p->kv_type, (int64_t)kvd);
    *rows = (uint64_t)m->n_kv_layers * (uint64_t)p->n_seq_max * (uint64_t)p->n_ctx_per_seq;
    if (c->kv_row_bytes == 0 || *rows > (uint64_t)SIZE_MAX / 4 / c->kv_row_bytes)
        return spex_error_set(err, SPEX_ERR_RANGE, "context: KV cache of %" PRIu64 " rows is too large", *rows);
    c->kv_nseg = p->kv_type == SPEX_TYPE_Q8_0 && hp->head_dim % 32 ? 1 : hp->n_head_kv;
    c->kv_seg_bytes = c->kv_row_bytes / (size_t)c->kv_nseg;
    c->kv_bytes = (size_t)(*rows ? *rows : 1) * c->kv_row_bytes;
    c->k_cache = spex_alloc_zeroed(c->kv_bytes);
    c->v_cache = spex_alloc_zeroed(c->kv_bytes);
    return SPEX_OK;
}

/* The forward pass's activations and scratch (fwd_bufs in model.h), sized for n_batch_max
 * tokens and n_outputs_max output rows; false: one of them is out of memory. */
static bool alloc_fwd_bufs(spex_context *c, const spex_model *m, const spex_context_params *p, uint64_t *compute) {
    const spex_model_hparams *hp = &m->hp;
    const uint64_t E = (uint64_t)hp->n_embd, C = (uint64_t)p->n_ctx_per_seq;
    const uint64_t nb = (uint64_t)p->n_batch_max, no = (uint64_t)p->n_outputs_max;
    const uint64_t qd = (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    const uint64_t kvd = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    const uint64_t F = (uint64_t)hp->n_ff, V = (uint64_t)hp->n_vocab;
    fwd_bufs *b = &c->b;
    spex_attn_args aa = {.n_q = p->n_batch_max, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                         .head_dim = hp->head_dim};
    b->attn_ws_floats = (spex_attn_scratch_floats(&aa) + 15) / 16 * 16;
    b->x = spex_ctx_buf_alloc(nb * E * 4, compute);
    b->xn = spex_ctx_buf_alloc(nb * E * 4, compute);
    b->tmp = spex_ctx_buf_alloc(nb * E * 4, compute);
    b->q = spex_ctx_buf_alloc(nb * qd * 4, compute);
    b->k = spex_ctx_buf_alloc(nb * kvd * 4, compute);
    b->v = spex_ctx_buf_alloc(nb * kvd * 4, compute);
    b->att = spex_ctx_buf_alloc(nb * qd * 4, compute);
    b->gate = spex_ctx_buf_alloc(nb * F * 4, compute);
    b->up = spex_ctx_buf_alloc(nb * F * 4, compute);
    b->rope = spex_ctx_buf_alloc(nb * (uint64_t)hp->n_rot * 4, compute);
    spex_rope_freqs(b->rope_inv, hp->n_rot, hp->rope_freq_base);
    b->hout = spex_ctx_buf_alloc(no * E * 4, compute);
    b->logits = spex_ctx_buf_alloc(p->embeddings ? 0 : no * V * 4, compute);   /* embeddings: no LM head */
    b->taps = p->n_taps ? spex_ctx_buf_alloc(nb * (uint64_t)p->n_taps * E * 4, compute) : NULL;
    b->mm_ws = spex_ctx_buf_alloc(spex_forward_mm_ws_size(m, p->n_batch_max, p->n_outputs_max), compute);
    b->attn_ws = spex_ctx_buf_alloc((uint64_t)c->nth * b->attn_ws_floats * 4, compute);
    const bool expand = p->kv_type == SPEX_TYPE_Q8_0 && c->kv_nseg == 1; /* forward.c, spex_fwd_attend */
    b->kv_f32 = expand ? spex_ctx_buf_alloc(2 * C * kvd * 4, compute) : NULL;
    const bool q35_ok = alloc_q35_bufs(c, hp, nb, compute);
    return q35_ok && b->x && b->xn && b->tmp && b->q && b->k && b->v && b->att && b->gate && b->up && b->rope &&
           b->hout && b->logits && (!p->n_taps || b->taps) && b->mm_ws && b->attn_ws && (!expand || b->kv_f32);
}

/* The batch bookkeeping spex_forward sorts and routes tokens with, and the tap tables;
 * false: one of them is out of memory. */
static bool alloc_index_bufs(spex_context *c, const spex_model_hparams *hp, const spex_context_params *p,
                             uint64_t *small) {
    const uint64_t N = (uint64_t)hp->n_layer, S = (uint64_t)p->n_seq_max;
    const uint64_t nb = (uint64_t)p->n_batch_max, no = (uint64_t)p->n_outputs_max;
    c->tap_ids = spex_ctx_buf_alloc((uint64_t)(p->n_taps + 1) * 4, small);
    c->tap_slot = spex_ctx_buf_alloc((N + 1) * 4, small);
    c->seq_len = spex_ctx_buf_alloc(S * 4, small);
    c->perm = spex_ctx_buf_alloc(nb * 4, small);
    c->row_of = spex_ctx_buf_alloc(nb * 4, small);
    c->tok = spex_ctx_buf_alloc(nb * 4, small);
    c->pos = spex_ctx_buf_alloc(nb * 4, small);
    c->out_row = spex_ctx_buf_alloc(no * 4, small);
    c->out_of = spex_ctx_buf_alloc(nb * 4, small);
    c->seq_start = spex_ctx_buf_alloc((S + 1) * 4, small);
    c->seq_next = spex_ctx_buf_alloc(S * 4, small);
    return c->tap_ids && c->tap_slot && c->seq_len && c->perm && c->row_of && c->tok && c->pos && c->out_row &&
           c->out_of && c->seq_start && c->seq_next;
}

/* The context's size, once, in the model's log. */
static void log_context(const spex_context *c, const spex_model *m, const spex_context_params *p, uint64_t rs_bytes) {
    spex_model_log(m,
                   "context: %d seq x %d ctx, batch %d, outputs %d, KV %s %.2f MiB, compute %.2f MiB, weights %.2f "
                   "MiB, %d threads, %d taps",
                   p->n_seq_max, p->n_ctx_per_seq, p->n_batch_max, p->n_outputs_max, type_name(p->kv_type),
                   (double)c->mem.kv / 1048576.0, (double)c->mem.compute / 1048576.0,
                   (double)c->mem.weights / 1048576.0, c->nth, p->n_taps);
    if (rs_bytes)
        spex_model_log(m,
                       "context: recurrent state %.2f MiB per copy per sequence, %d copies (1 + n_rs_seq %d) x %d seq "
                       "= %.2f MiB",
                       (double)spex_model_recurrent_state_bytes(m) / 1048576.0, c->rs_ring, p->n_rs_seq, p->n_seq_max,
                       (double)rs_bytes / 1048576.0);
}

spex_status spex_context_init(const spex_model *m, const spex_context_params *params, spex_context **out,
                              spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_context_init: out is NULL");
    *out = NULL;
    if (!m) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_context_init: model is NULL");
    spex_context_params p = params ? *params : spex_context_default_params();
    spex_status s = resolve_params(m, &p, err);
    if (s != SPEX_OK) return s;

    spex_context *c = calloc(1, sizeof *c);
    if (!c) return spex_error_set(err, SPEX_ERR_NOMEM, "context: out of memory");
    c->model = m;
    const spex_model_hparams *hp = &m->hp;
    uint64_t compute = 0, small = 0, rows = 0;

    if (p.pool) {
        c->pool = p.pool;
    } else {
        if ((s = spex_pool_create(p.n_threads, &c->pool, err)) != SPEX_OK) goto fail;
        c->own_pool = true;
    }
    c->nth = spex_pool_n_threads(c->pool);

    if ((s = alloc_kv(c, m, &p, &rows, err)) != SPEX_OK) goto fail;
    uint64_t rs_bytes = 0;
    bool rs_ok = true;
    if (hp->n_recurrent > 0 && (s = alloc_ring(c, hp, &p, &rs_bytes, &rs_ok, err)) != SPEX_OK) goto fail;
    c->params = p;

    const bool fwd_ok = alloc_fwd_bufs(c, m, &p, &compute);
    const bool index_ok = alloc_index_bufs(c, hp, &p, &small);
    if (!rs_ok || !fwd_ok || !index_ok || !c->k_cache || !c->v_cache) {
        s = spex_error_set(err, SPEX_ERR_NOMEM,
                           "context: out of memory (KV %.1f MiB, compute %.1f MiB)",
                           (double)(2 * rows * c->kv_row_bytes) / 1048576.0, (double)compute / 1048576.0);
        goto fail;
    }
    for (uint64_t l = 0; l <= (uint64_t)hp->n_layer; l++) c->tap_slot[l] = -1;
    for (int i = 0; i < p.n_taps; i++) {
        c->tap_ids[i] = p.tap_layers[i];
        c->tap_slot[p.tap_layers[i]] = i;
    }
    c->params.tap_layers = p.n_taps ? c->tap_ids : NULL;
    c->params.pool = c->own_pool ? NULL : p.pool;

    c->mem.weights = m->weight_bytes;
    c->mem.kv = 2 * rows * c->kv_row_bytes;
    c->mem.compute = compute + small;
    c->mem.recurrent = rs_bytes;
    log_context(c, m, &p, rs_bytes);
    *out = c;
    return SPEX_OK;
fail:
    spex_context_free(c);
    return s;
}

spex_pool *spex_context_pool(const spex_context *ctx) { return ctx ? ctx->pool : NULL; }

const spex_model *spex_context_model(const spex_context *ctx) { return ctx ? ctx->model : NULL; }
const spex_context_params *spex_context_get_params(const spex_context *ctx) { return ctx ? &ctx->params : NULL; }

spex_memory_usage spex_context_memory(const spex_context *ctx) {
    spex_memory_usage z = {0, 0, 0, 0};
    return ctx ? ctx->mem : z;
}

/* ======================================================================== */
/* KV cache                                                                  */
/* ======================================================================== */

void *spex_kv_seg(const spex_context *ctx, bool v, int32_t layer, int32_t seq, int32_t seg, int32_t pos) {
    const uint64_t S = (uint64_t)ctx->params.n_seq_max, C = (uint64_t)ctx->params.n_ctx_per_seq;
    const uint64_t li = (uint64_t)ctx->model->layers[layer].kv_index;
    const uint64_t row = ((li * S + (uint64_t)seq) * (uint64_t)ctx->kv_nseg + (uint64_t)seg) * C + (uint64_t)pos;
    return (uint8_t *)(v ? ctx->v_cache : ctx->k_cache) + row * ctx->kv_seg_bytes;
}

static bool seq_ok(const spex_context *ctx, int32_t seq) { return ctx && seq >= 0 && seq < ctx->params.n_seq_max; }

int32_t spex_kv_seq_len(const spex_context *ctx, int32_t seq) { return seq_ok(ctx, seq) ? ctx->seq_len[seq] : -1; }

static int32_t rs_slot(const spex_context *ctx, int32_t pos) { return pos % ctx->rs_ring; }

float *spex_rs_S(const spex_context *ctx, int32_t seq, int32_t pos, int32_t ri) {
    const uint64_t R = (uint64_t)ctx->rs_ring, NR = (uint64_t)ctx->model->hp.n_recurrent;
    const uint64_t i = (((uint64_t)seq * R + (uint64_t)rs_slot(ctx, pos)) * NR + (uint64_t)ri);
    return ctx->rs_S + i * ctx->rs_S_floats;
}

float *spex_rs_conv(const spex_context *ctx, int32_t seq, int32_t pos, int32_t ri) {
    const uint64_t R = (uint64_t)ctx->rs_ring, NR = (uint64_t)ctx->model->hp.n_recurrent;
    const uint64_t i = (((uint64_t)seq * R + (uint64_t)rs_slot(ctx, pos)) * NR + (uint64_t)ri);
    return ctx->rs_conv + i * ctx->rs_conv_floats;
}

/* Whether the state after position new_len - 1 is still in the ring (model.h). */
bool spex_rs_holds(const spex_context *ctx, int32_t seq, int32_t new_len) {
    if (!ctx->rs_S || new_len == 0 || new_len == ctx->seq_len[seq]) return true;
    return new_len - 1 >= ctx->rs_lo[seq] && new_len <= ctx->seq_len[seq];
}

bool spex_kv_seq_can_truncate(const spex_context *ctx, int32_t seq, int32_t new_len) {
    return seq_ok(ctx, seq) && new_len >= 0 && new_len <= ctx->seq_len[seq] && spex_rs_holds(ctx, seq, new_len);
}

static spex_status rs_refuse(const spex_context *ctx, const char *what, int32_t seq, int32_t new_len, spex_error *err) {
    return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                          "%s: sequence %d holds %d tokens of a recurrent model; its state can go back to lengths "
                          "%d .. %d or 0, not %d (n_rs_seq %d: raise it to roll back further)",
                          what, seq, ctx->seq_len[seq], ctx->rs_lo[seq] + 1, ctx->seq_len[seq], new_len,
                          ctx->params.n_rs_seq);
}

spex_status spex_kv_seq_truncate(spex_context *ctx, int32_t seq, int32_t new_len, spex_error *err) {
    if (!seq_ok(ctx, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv truncate: sequence %d, expected 0 .. %d", seq,
                              ctx ? ctx->params.n_seq_max - 1 : -1);
    if (new_len < 0 || new_len > ctx->seq_len[seq])
        return spex_error_set(err, SPEX_ERR_RANGE, "kv truncate: sequence %d holds %d tokens, cannot truncate to %d",
                              seq, ctx->seq_len[seq], new_len);
    if (!spex_rs_holds(ctx, seq, new_len)) return rs_refuse(ctx, "kv truncate", seq, new_len, err);
    ctx->seq_len[seq] = new_len;
    if (ctx->rs_S && new_len == 0) ctx->rs_lo[seq] = 0;
    if (ctx->rs_S) spex_ck_drop_from(ctx, seq, new_len);
    return SPEX_OK;
}

spex_status spex_kv_seq_copy(spex_context *ctx, int32_t src, int32_t dst, int32_t len, spex_error *err) {
    if (!seq_ok(ctx, src) || !seq_ok(ctx, dst))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv copy: sequences %d -> %d, expected 0 .. %d", src, dst,
                              ctx ? ctx->params.n_seq_max - 1 : -1);
    if (len < 0) len = ctx->seq_len[src];
    if (len > ctx->seq_len[src])
        return spex_error_set(err, SPEX_ERR_RANGE, "kv copy: sequence %d holds %d tokens, cannot copy %d", src,
                              ctx->seq_len[src], len);
    if (!spex_rs_holds(ctx, src, len)) {
        /* Copy all of src, then replay dst back to len from a checkpoint. */
        spex_status st = spex_kv_seq_copy(ctx, src, dst, ctx->seq_len[src], err);
        return st != SPEX_OK ? st : spex_kv_seq_rewind(ctx, dst, len, NULL, err);
    }
    if (src != dst && len > 0) {
        const size_t bytes = (size_t)len * ctx->kv_seg_bytes;
        for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
            if (ctx->model->layers[l].kv_index < 0) continue;
            for (int32_t g = 0; g < ctx->kv_nseg; g++) {
                memcpy(spex_kv_seg(ctx, false, l, dst, g, 0), spex_kv_seg(ctx, false, l, src, g, 0), bytes);
                memcpy(spex_kv_seg(ctx, true, l, dst, g, 0), spex_kv_seg(ctx, true, l, src, g, 0), bytes);
            }
        }
    }
    if (ctx->rs_S && src != dst && len > 0) {
        /* The state after len - 1 moves to the same ring slot of dst (same position). */
        for (int32_t ri = 0; ri < ctx->model->hp.n_recurrent; ri++) {
            memcpy(spex_rs_S(ctx, dst, len - 1, ri), spex_rs_S(ctx, src, len - 1, ri),
                   sizeof(float) * ctx->rs_S_floats);
            memcpy(spex_rs_conv(ctx, dst, len - 1, ri), spex_rs_conv(ctx, src, len - 1, ri),
                   sizeof(float) * ctx->rs_conv_floats);
        }
    }
    if (ctx->rs_S && src != dst) {
        ctx->rs_lo[dst] = len > 0 ? len - 1 : 0;
        memcpy(ctx->hist + (size_t)dst * (size_t)ctx->params.n_ctx_per_seq,
               ctx->hist + (size_t)src * (size_t)ctx->params.n_ctx_per_seq, sizeof(int32_t) * (size_t)len);
        spex_ck_copy(ctx, src, dst, len);
    } else if (ctx->rs_S) {
        if (len < ctx->seq_len[src] && ctx->rs_lo[dst] > len - 1) ctx->rs_lo[dst] = len > 0 ? len - 1 : 0;
        spex_ck_drop_from(ctx, dst, len);
    }
    ctx->seq_len[dst] = len;
    return SPEX_OK;
}

spex_status spex_kv_seq_clear(spex_context *ctx, int32_t seq, spex_error *err) {
    if (!ctx) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv clear: context is NULL");
    if (seq < 0) {
        for (int32_t s = 0; s < ctx->params.n_seq_max; s++) ctx->seq_len[s] = 0;
        if (ctx->rs_S)
            for (int32_t s = 0; s < ctx->params.n_seq_max; s++) ctx->rs_lo[s] = 0, spex_ck_drop_from(ctx, s, 0);
        return SPEX_OK;
    }
    if (!seq_ok(ctx, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv clear: sequence %d, expected 0 .. %d (or < 0 for all)",
                              seq, ctx->params.n_seq_max - 1);
    ctx->seq_len[seq] = 0;
    if (ctx->rs_S) ctx->rs_lo[seq] = 0, spex_ck_drop_from(ctx, seq, 0);
    return SPEX_OK;
}

/* ======================================================================== */
/* Forward: validation and ordering                                          */
/* ======================================================================== */

/* Checks the whole batch against the rules of spex_forward without changing any state. */
static spex_status validate_batch(spex_context *ctx, const spex_batch *batch, spex_error *err) {
    const spex_context_params *p = &ctx->params;
    if (!batch || batch->n_tokens < 1 || !batch->tokens)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "forward: empty batch");
    if (batch->n_tokens > p->n_batch_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "forward: batch of %d tokens exceeds n_batch_max %d",
                              batch->n_tokens, p->n_batch_max);
    const int32_t V = ctx->model->hp.n_vocab;
    int32_t n_out = 0;
    for (int32_t s = 0; s < p->n_seq_max; s++) ctx->seq_next[s] = ctx->seq_len[s];
    for (int32_t i = 0; i < batch->n_tokens; i++) {
        const spex_batch_token *t = &batch->tokens[i];
        if (t->token < 0 || t->token >= V)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "forward: batch token %d: id %d, expected 0 .. %d", i,
                                  t->token, V - 1);
        if (t->seq < 0 || t->seq >= p->n_seq_max)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "forward: batch token %d: sequence %d, expected 0 .. %d",
                                  i, t->seq, p->n_seq_max - 1);
        const int32_t want = ctx->seq_next[t->seq];
        if (t->pos != want)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "forward: batch token %d (sequence %d): position %d, expected %d (the sequence "
                                  "holds %d cached tokens and %d earlier in this batch)",
                                  i, t->seq, t->pos, want, ctx->seq_len[t->seq], want - ctx->seq_len[t->seq]);
        if (want >= p->n_ctx_per_seq)
            return spex_error_set(err, SPEX_ERR_RANGE,
                                  "forward: batch token %d: sequence %d is full (position %d, n_ctx_per_seq %d)", i,
                                  t->seq, t->pos, p->n_ctx_per_seq);
        ctx->seq_next[t->seq] = want + 1;
        n_out += t->logits ? 1 : 0;
    }
    if (n_out > p->n_outputs_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "forward: %d tokens ask for logits, n_outputs_max is %d", n_out,
                              p->n_outputs_max);
    return SPEX_OK;
}

spex_status spex_forward(spex_context *ctx, const spex_batch *batch, spex_error *err) {
    if (!ctx) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "forward: context is NULL");
    spex_status s = validate_batch(ctx, batch, err);
    if (s != SPEX_OK) return s;

    /* Stable counting sort of the tokens by sequence (model.h, "Row order"). */
    const int32_t n = batch->n_tokens, S = ctx->params.n_seq_max;
    int32_t *start = ctx->seq_start;
    for (int32_t q = 0; q <= S; q++) start[q] = 0;
    for (int32_t i = 0; i < n; i++) start[batch->tokens[i].seq + 1]++;
    for (int32_t q = 0; q < S; q++) start[q + 1] += start[q];
    int32_t *fill = ctx->seq_next; /* reused as the per-sequence insertion cursor */
    for (int32_t q = 0; q < S; q++) fill[q] = start[q];
    int32_t n_out = 0;
    for (int32_t i = 0; i < n; i++) {
        const spex_batch_token *t = &batch->tokens[i];
        const int32_t r = fill[t->seq]++;
        ctx->perm[r] = i;
        ctx->row_of[i] = r;
        ctx->tok[r] = t->token;
        ctx->pos[r] = t->pos;
        if (ctx->hist) ctx->hist[(size_t)t->seq * (size_t)ctx->params.n_ctx_per_seq + (size_t)t->pos] = t->token;
        ctx->out_of[i] = t->logits ? n_out : -1;
        if (t->logits) ctx->out_row[n_out++] = i;
    }
    ctx->n_tokens = n;
    ctx->n_outputs = n_out;

    if (ctx->model->hp.arch == SPEX_ARCH_QWEN35) spex_forward_qwen35(ctx);
    else spex_forward_dense(ctx);

    for (int32_t q = 0; q < S; q++) {
        const int32_t k = start[q + 1] - start[q];
        if (k == 0) continue;
        ctx->seq_len[q] += k;
        if (ctx->rs_S) {
            /* The ring now holds the states after the last min(k, R) positions too (model.h). */
            const int32_t lo = ctx->seq_len[q] - (k > SPEX_QWEN35_RECURRENT_MAX ? 1 : ctx->rs_ring);
            if (lo > ctx->rs_lo[q]) ctx->rs_lo[q] = lo;
            spex_ck_after_forward(ctx, q);
        }
    }
    return SPEX_OK;
}

int32_t spex_n_outputs(const spex_context *ctx) { return ctx ? ctx->n_outputs : 0; }

const float *spex_logits(const spex_context *ctx, int32_t i) {
    if (!ctx || ctx->params.embeddings || i < 0 || i >= ctx->n_outputs) return NULL;
    return ctx->b.logits + (size_t)i * (size_t)ctx->model->hp.n_vocab;
}

const float *spex_logits_of_token(const spex_context *ctx, int32_t b) {
    if (!ctx || b < 0 || b >= ctx->n_tokens || ctx->out_of[b] < 0) return NULL;
    return spex_logits(ctx, ctx->out_of[b]);
}

const float *spex_embeddings(const spex_context *ctx, int32_t i) {
    if (!ctx || !ctx->params.embeddings || i < 0 || i >= ctx->n_outputs) return NULL;
    return ctx->b.hout + (size_t)i * (size_t)ctx->model->hp.n_embd;
}

const float *spex_taps(const spex_context *ctx) {
    return ctx && ctx->params.n_taps > 0 && ctx->n_tokens > 0 ? ctx->b.taps : NULL;
}
