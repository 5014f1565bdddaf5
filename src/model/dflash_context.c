/*
 * dflash_context.c — spex_draft_context: parameters, allocation of every buffer, the draft
 * KV cache API, validation of injections and block forwards, and the output accessors
 * (include/spex.h "DFlash drafters"; ../shared/docs/dflash2.md §7, §8, §16, §18).
 *
 * What it is: everything around the drafter's arithmetic that owns memory or state. All
 * memory is allocated in spex_draft_context_init; injection, forward and the cache functions
 * allocate nothing, and every call is validated completely before anything changes.
 * What it is not: the fusion / block forward arithmetic (dflash_forward.c) or the selector
 * walk (dflash_select.c).
 *
 * Cache (dflash_ctx.h has the layout): per-sequence contiguous regions as the target's, so a
 * sequence's length is its whole state; truncate sets it, clear zeroes it, copy memcpys the
 * prefix region of every layer.
 */
#include "cpu/api.h"
#include "model/api.h"
#include "model/dflash_ctx.h"
#include "model/dflash_select.h"
#include "core/mem.h"
#include "tensor/api.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_MAX 65536

/* ======================================================================== */
/* Parameters and allocation                                                 */
/* ======================================================================== */

spex_draft_context_params spex_draft_context_default_params(void) {
    spex_draft_context_params p;
    memset(&p, 0, sizeof p);
    p.n_seq_max = 1;
    p.n_ctx_per_seq = 4096;
    p.n_blocks_max = 0;
    p.n_inject_max = 512;
    p.kv_type = SPEX_TYPE_F16;
    p.n_threads = 1;
    return p;
}


void spex_draft_context_free(spex_draft_context *dc) {
    if (!dc) return;
    if (dc->own_pool) spex_pool_free(dc->pool);
    spex_free_zeroed(dc->k_cache, dc->kv_bytes);
    spex_free_zeroed(dc->v_cache, dc->kv_bytes);
    void *bufs[] = {dc->seq_len, dc->kv_f32, dc->x, dc->xn, dc->xc, dc->tmp, dc->q, dc->k, dc->v, dc->att,
                    dc->gate, dc->up, dc->rope, dc->da, dc->df, dc->hout, dc->logits, dc->gatev, dc->cand,
                    dc->cand_u, dc->tk_idx, dc->tk_val, dc->mm_ws, dc->attn_ws, dc->iy, dc->ic, dc->ik, dc->iv, dc->row_pos,
                    dc->row_seq, dc->row_j, dc->row_tok, dc->row_slot, dc->seq_next, dc->seq_used, dc->blocks,
                    dc->blk_row0, dc->blk_slot0, dc->dbg_out, dc->dbg_da, dc->dbg_df};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(dc);
}

static spex_status resolve_params(const spex_drafter *d, spex_draft_context_params *p, spex_error *err) {
    const spex_drafter_hparams *hp = &d->hp;
    if (p->n_seq_max < 1 || p->n_seq_max > SEQ_MAX)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft context: n_seq_max %d, expected 1 .. %d",
                              p->n_seq_max, SEQ_MAX);
    if (p->n_ctx_per_seq < 2)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft context: n_ctx_per_seq %d, expected >= 2",
                              p->n_ctx_per_seq);
    if (p->n_blocks_max < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft context: n_blocks_max %d, expected >= 0",
                              p->n_blocks_max);
    if (p->n_blocks_max == 0 || p->n_blocks_max > p->n_seq_max) p->n_blocks_max = p->n_seq_max;
    if (p->n_inject_max < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft context: n_inject_max %d, expected >= 1",
                              p->n_inject_max);
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    if (p->kv_type != SPEX_TYPE_F16 && p->kv_type != SPEX_TYPE_F32 && p->kv_type != SPEX_TYPE_Q8_0) {
        const spex_type_info *ti = spex_type_get_info((int)p->kv_type);
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "draft context: kv_type %s: expected f16, f32 or q8_0",
                              ti ? ti->name : "unknown");
    }
    if (p->kv_type == SPEX_TYPE_Q8_0 && kv_dim % 32 != 0)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "draft context: kv_type q8_0 needs n_head_kv * head_dim (%" PRId64
                              ") to be a multiple of 32",
                              kv_dim);
    if (hp->block_size < 2 || hp->block_size - 1 > SPEX_DRAFT_MAX_N)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "draft context: block_size %d, expected 2 .. %d",
                              hp->block_size, SPEX_DRAFT_MAX_N + 1);
    if (hp->variant == SPEX_DFLASH2 && (hp->selector_top_k < 1 || hp->selector_top_k > SPEX_DRAFT_MAX_K))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "draft context: selector_top_k %d, expected 1 .. %d",
                              hp->selector_top_k, SPEX_DRAFT_MAX_K);
    return SPEX_OK;
}

spex_status spex_draft_context_init(const spex_drafter *d, const spex_draft_context_params *params,
                                    spex_draft_context **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_draft_context_init: out is NULL");
    *out = NULL;
    if (!d) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_draft_context_init: drafter is NULL");
    spex_draft_context_params p = params ? *params : spex_draft_context_default_params();
    spex_status s = resolve_params(d, &p, err);
    if (s != SPEX_OK) return s;

    spex_draft_context *c = calloc(1, sizeof *c);
    if (!c) return spex_error_set(err, SPEX_ERR_NOMEM, "draft context: out of memory");
    c->d = d;
    const spex_drafter_hparams *hp = &d->hp;
    const bool v2 = hp->variant == SPEX_DFLASH2;
    const uint64_t D = (uint64_t)hp->n_embd, N = (uint64_t)hp->n_layer, S = (uint64_t)p.n_seq_max;
    const uint64_t C = (uint64_t)p.n_ctx_per_seq, B = (uint64_t)hp->block_size;
    const uint64_t qd = (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    const uint64_t kvd = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    const uint64_t F = (uint64_t)hp->n_ff, V = (uint64_t)hp->n_vocab, R = v2 ? (uint64_t)hp->selector_rank : 0;
    const uint64_t NB = (uint64_t)p.n_blocks_max, ni = (uint64_t)p.n_inject_max;
    c->nr_max = (int32_t)(NB * B);
    c->ns_max = (int32_t)(NB * (B - 1));
    c->nd = v2 ? 2 * hp->conv_kernel * (hp->n_embd / hp->conv_group) : 0;
    c->K = v2 ? hp->selector_top_k : 1;
    const uint64_t nr = (uint64_t)c->nr_max, ns = (uint64_t)c->ns_max, nd = (uint64_t)c->nd;
    const uint64_t nmeta = nr > ni ? nr : ni;
    uint64_t compute = 0, small = 0;

    if (p.pool) {
        c->pool = p.pool;
    } else {
        if ((s = spex_pool_create(p.n_threads, &c->pool, err)) != SPEX_OK) goto fail;
        c->own_pool = true;
    }
    c->nth = spex_pool_n_threads(c->pool);

    c->kv_row_bytes = spex_type_row_size(p.kv_type, (int64_t)kvd);
    const uint64_t rows = N * S * C;
    if (c->kv_row_bytes == 0 || rows > (uint64_t)SIZE_MAX / 4 / c->kv_row_bytes) {
        s = spex_error_set(err, SPEX_ERR_RANGE, "draft context: KV cache of %" PRIu64 " rows is too large", rows);
        goto fail;
    }
    c->kv_bytes = (size_t)(rows ? rows : 1) * c->kv_row_bytes; /* as the target's (context.c) */
    c->k_cache = spex_alloc_zeroed(c->kv_bytes);
    c->v_cache = spex_alloc_zeroed(c->kv_bytes);
    c->params = p;

    spex_attn_args aa = {.n_q = (int)B, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                         .head_dim = hp->head_dim};
    c->attn_ws_floats = (spex_attn_scratch_floats(&aa) + 15) / 16 * 16;
    c->seq_len = spex_ctx_buf_alloc(S * 4, &small);
    /* dflash_forward.c expands a Q8_0 region to f32 only when head_dim is not whole blocks */
    const bool expand = p.kv_type == SPEX_TYPE_Q8_0 && hp->head_dim % 32 != 0;
    c->kv_f32 = expand ? spex_ctx_buf_alloc(2 * C * kvd * 4, &compute) : NULL;
    c->x = spex_ctx_buf_alloc(nr * D * 4, &compute);
    c->xn = spex_ctx_buf_alloc(nr * D * 4, &compute);
    c->xc = spex_ctx_buf_alloc(nr * D * 4, &compute);
    c->tmp = spex_ctx_buf_alloc(nr * D * 4, &compute);
    c->q = spex_ctx_buf_alloc(nr * qd * 4, &compute);
    c->k = spex_ctx_buf_alloc(nr * kvd * 4, &compute);
    c->v = spex_ctx_buf_alloc(nr * kvd * 4, &compute);
    c->att = spex_ctx_buf_alloc(nr * qd * 4, &compute);
    c->gate = spex_ctx_buf_alloc(nr * F * 4, &compute);
    c->up = spex_ctx_buf_alloc(nr * F * 4, &compute);
    c->rope = spex_ctx_buf_alloc(nmeta * (uint64_t)hp->n_rot * 4, &compute);
    spex_rope_freqs(c->rope_inv, hp->n_rot, hp->rope_freq_base);
    c->da = spex_ctx_buf_alloc(nr * nd * 4, &compute);
    c->df = spex_ctx_buf_alloc(nr * nd * 4, &compute);
    c->hout = spex_ctx_buf_alloc(ns * D * 4, &compute);
    c->logits = spex_ctx_buf_alloc(ns * V * 4, &compute);
    c->gatev = spex_ctx_buf_alloc(ns * R * 4, &compute);
    c->cand = spex_ctx_buf_alloc(ns * (uint64_t)c->K * 4, &compute);
    c->cand_u = spex_ctx_buf_alloc(ns * (uint64_t)c->K * 4, &compute);
    c->tk_idx = spex_ctx_buf_alloc((uint64_t)c->nth * ns * (uint64_t)c->K * 4, &compute);
    c->tk_val = spex_ctx_buf_alloc((uint64_t)c->nth * ns * (uint64_t)c->K * 4, &compute);
    c->mm_ws = spex_ctx_buf_alloc(spex_dflash_mm_ws_size(d, c->nr_max, c->ns_max, p.n_inject_max), &compute);
    c->attn_ws = spex_ctx_buf_alloc((uint64_t)c->nth * c->attn_ws_floats * 4, &compute);
    c->iy = spex_ctx_buf_alloc(ni * D * 4, &compute);
    c->ic = spex_ctx_buf_alloc(ni * D * 4, &compute);
    c->ik = spex_ctx_buf_alloc(ni * kvd * 4, &compute);
    c->iv = spex_ctx_buf_alloc(ni * kvd * 4, &compute);
    c->row_pos = spex_ctx_buf_alloc(nmeta * 4, &small);
    c->row_seq = spex_ctx_buf_alloc(nmeta * 4, &small);
    c->row_j = spex_ctx_buf_alloc(nr * 4, &small);
    c->row_tok = spex_ctx_buf_alloc(nr * 4, &small);
    c->row_slot = spex_ctx_buf_alloc(nr * 4, &small);
    c->seq_next = spex_ctx_buf_alloc(S * 4, &small);
    c->seq_used = spex_ctx_buf_alloc(S * 4, &small);
    c->blocks = spex_ctx_buf_alloc(NB * sizeof(spex_draft_block), &small);
    c->blk_row0 = spex_ctx_buf_alloc((NB + 1) * 4, &small);
    c->blk_slot0 = spex_ctx_buf_alloc((NB + 1) * 4, &small);
    if (!c->k_cache || !c->v_cache || !c->seq_len || (expand && !c->kv_f32) || !c->x ||
        !c->xn || !c->xc || !c->tmp || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->rope ||
        !c->da || !c->df || !c->hout || !c->logits || !c->gatev || !c->cand || !c->cand_u || !c->mm_ws || !c->tk_idx || !c->tk_val ||
        !c->attn_ws || !c->iy || !c->ic || !c->ik || !c->iv || !c->row_pos || !c->row_seq || !c->row_j ||
        !c->row_tok || !c->row_slot || !c->seq_next || !c->seq_used || !c->blocks || !c->blk_row0 ||
        !c->blk_slot0) {
        s = spex_error_set(err, SPEX_ERR_NOMEM, "draft context: out of memory (KV %.1f MiB, compute %.1f MiB)",
                           (double)(2 * rows * c->kv_row_bytes) / 1048576.0, (double)compute / 1048576.0);
        goto fail;
    }
    c->params.pool = c->own_pool ? NULL : p.pool;
    c->mem.weights = d->weight_bytes;
    c->mem.kv = 2 * rows * c->kv_row_bytes;
    c->mem.compute = compute + small;
    const spex_type_info *kti = spex_type_get_info((int)p.kv_type);
    spex_drafter_log(d,
                     "draft context: %d seq x %d ctx, %d blocks, inject %d, KV %s %.2f MiB, compute %.2f MiB, "
                     "%d threads",
                     p.n_seq_max, p.n_ctx_per_seq, p.n_blocks_max, p.n_inject_max, kti ? kti->name : "?",
                     (double)c->mem.kv / 1048576.0, (double)c->mem.compute / 1048576.0, c->nth);
    *out = c;
    return SPEX_OK;
fail:
    spex_draft_context_free(c);
    return s;
}

const spex_drafter *spex_draft_context_drafter(const spex_draft_context *dc) { return dc ? dc->d : NULL; }
const spex_draft_context_params *spex_draft_context_get_params(const spex_draft_context *dc) {
    return dc ? &dc->params : NULL;
}
spex_memory_usage spex_draft_context_memory(const spex_draft_context *dc) {
    spex_memory_usage z = {0, 0, 0, 0};
    return dc ? dc->mem : z;
}

/* ======================================================================== */
/* Draft KV cache                                                            */
/* ======================================================================== */

void *spex_draft_kv_row(const spex_draft_context *dc, bool v, int32_t layer, int32_t seq, int32_t pos) {
    const uint64_t S = (uint64_t)dc->params.n_seq_max, C = (uint64_t)dc->params.n_ctx_per_seq;
    const uint64_t row = ((uint64_t)layer * S + (uint64_t)seq) * C + (uint64_t)pos;
    return (uint8_t *)(v ? dc->v_cache : dc->k_cache) + row * dc->kv_row_bytes;
}

static bool seq_ok(const spex_draft_context *dc, int32_t seq) {
    return dc && seq >= 0 && seq < dc->params.n_seq_max;
}

int32_t spex_draft_kv_seq_len(const spex_draft_context *dc, int32_t seq) {
    return seq_ok(dc, seq) ? dc->seq_len[seq] : -1;
}

spex_status spex_draft_kv_seq_truncate(spex_draft_context *dc, int32_t seq, int32_t new_len, spex_error *err) {
    if (!seq_ok(dc, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft kv truncate: sequence %d, expected 0 .. %d", seq,
                              dc ? dc->params.n_seq_max - 1 : -1);
    if (new_len < 0 || new_len > dc->seq_len[seq])
        return spex_error_set(err, SPEX_ERR_RANGE,
                              "draft kv truncate: sequence %d holds %d positions, cannot truncate to %d", seq,
                              dc->seq_len[seq], new_len);
    dc->seq_len[seq] = new_len;
    return SPEX_OK;
}

spex_status spex_draft_kv_seq_copy(spex_draft_context *dc, int32_t src, int32_t dst, int32_t len, spex_error *err) {
    if (!seq_ok(dc, src) || !seq_ok(dc, dst))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft kv copy: sequences %d -> %d, expected 0 .. %d", src,
                              dst, dc ? dc->params.n_seq_max - 1 : -1);
    if (len < 0) len = dc->seq_len[src];
    if (len > dc->seq_len[src])
        return spex_error_set(err, SPEX_ERR_RANGE, "draft kv copy: sequence %d holds %d positions, cannot copy %d",
                              src, dc->seq_len[src], len);
    if (src != dst && len > 0) {
        const size_t bytes = (size_t)len * dc->kv_row_bytes;
        for (int32_t l = 0; l < dc->d->hp.n_layer; l++) {
            memcpy(spex_draft_kv_row(dc, false, l, dst, 0), spex_draft_kv_row(dc, false, l, src, 0), bytes);
            memcpy(spex_draft_kv_row(dc, true, l, dst, 0), spex_draft_kv_row(dc, true, l, src, 0), bytes);
        }
    }
    dc->seq_len[dst] = len;
    return SPEX_OK;
}

spex_status spex_draft_kv_seq_clear(spex_draft_context *dc, int32_t seq, spex_error *err) {
    if (!dc) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft kv clear: context is NULL");
    if (seq < 0) {
        for (int32_t s = 0; s < dc->params.n_seq_max; s++) dc->seq_len[s] = 0;
        return SPEX_OK;
    }
    if (!seq_ok(dc, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "draft kv clear: sequence %d, expected 0 .. %d (or < 0 for all)", seq,
                              dc->params.n_seq_max - 1);
    dc->seq_len[seq] = 0;
    return SPEX_OK;
}

/* ======================================================================== */
/* Injection (§7)                                                            */
/* ======================================================================== */

spex_status spex_draft_inject(spex_draft_context *dc, const float *features, int64_t ld_features,
                              const int32_t *seq, const int32_t *pos, int32_t n_rows, spex_error *err) {
    if (!dc) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft inject: context is NULL");
    const spex_drafter_hparams *hp = &dc->d->hp;
    const int64_t width = (int64_t)hp->n_taps * hp->n_embd;
    if (n_rows < 1 || !features || !seq || !pos)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft inject: %d rows, features/seq/pos %s", n_rows,
                              features && seq && pos ? "set" : "NULL");
    if (n_rows > dc->params.n_inject_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "draft inject: %d rows exceed n_inject_max %d", n_rows,
                              dc->params.n_inject_max);
    if (ld_features < width)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "draft inject: ld_features %" PRId64 " < feature width L*D = %" PRId64, ld_features,
                              width);
    const int32_t S = dc->params.n_seq_max, C = dc->params.n_ctx_per_seq;
    for (int32_t s = 0; s < S; s++) dc->seq_next[s] = dc->seq_len[s];
    for (int32_t i = 0; i < n_rows; i++) {
        if (seq[i] < 0 || seq[i] >= S)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft inject: row %d: sequence %d, expected 0 .. %d", i,
                                  seq[i], S - 1);
        const int32_t want = dc->seq_next[seq[i]];
        if (pos[i] != want)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "draft inject: row %d (sequence %d): position %d, expected %d (the draft cache "
                                  "holds %d positions and %d earlier rows of this call)",
                                  i, seq[i], pos[i], want, dc->seq_len[seq[i]], want - dc->seq_len[seq[i]]);
        if (want >= C)
            return spex_error_set(err, SPEX_ERR_RANGE,
                                  "draft inject: row %d: sequence %d is full (position %d, n_ctx_per_seq %d)", i,
                                  seq[i], pos[i], C);
        dc->seq_next[seq[i]] = want + 1;
    }
    for (int32_t i = 0; i < n_rows; i++) {
        dc->row_seq[i] = seq[i];
        dc->row_pos[i] = pos[i];
    }
    dc->n_irows = n_rows;
    spex_dflash_inject_rows(dc, features, ld_features);
    for (int32_t s = 0; s < S; s++) dc->seq_len[s] = dc->seq_next[s];
    return SPEX_OK;
}

/* ======================================================================== */
/* Block forward: validation and layout (§8, §18)                            */
/* ======================================================================== */

static spex_status validate_blocks(spex_draft_context *dc, const spex_draft_block *blocks, int32_t n_blocks,
                                   spex_error *err) {
    const spex_drafter_hparams *hp = &dc->d->hp;
    if (!blocks || n_blocks < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft forward: no blocks");
    if (n_blocks > dc->params.n_blocks_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "draft forward: %d blocks exceed n_blocks_max %d", n_blocks,
                              dc->params.n_blocks_max);
    const int32_t S = dc->params.n_seq_max, C = dc->params.n_ctx_per_seq;
    for (int32_t s = 0; s < S; s++) dc->seq_used[s] = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        const spex_draft_block *k = &blocks[b];
        if (k->seq < 0 || k->seq >= S)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft forward: block %d: sequence %d, expected 0 .. %d",
                                  b, k->seq, S - 1);
        if (dc->seq_used[k->seq])
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft forward: block %d: sequence %d drafted twice", b,
                                  k->seq);
        dc->seq_used[k->seq] = 1;
        if (k->n < 1 || k->n > hp->block_size - 1)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "draft forward: block %d: n = %d, expected 1 .. %d (block_size - 1)", b, k->n,
                                  hp->block_size - 1);
        if (k->anchor < 0 || k->anchor >= hp->n_vocab)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft forward: block %d: anchor %d, expected 0 .. %d",
                                  b, k->anchor, hp->n_vocab - 1);
        const int32_t P = dc->seq_len[k->seq];
        if ((int64_t)P + k->n + 1 > C)
            return spex_error_set(err, SPEX_ERR_RANGE,
                                  "draft forward: block %d: sequence %d holds %d positions; a block of %d rows needs "
                                  "room for %d, n_ctx_per_seq is %d",
                                  b, k->seq, P, k->n + 1, P + k->n + 1, C);
    }
    return SPEX_OK;
}

spex_status spex_draft_forward(spex_draft_context *dc, const spex_draft_block *blocks, int32_t n_blocks,
                               spex_error *err) {
    if (!dc) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft forward: context is NULL");
    spex_status s = validate_blocks(dc, blocks, n_blocks, err);
    if (s != SPEX_OK) return s;

    const spex_drafter_hparams *hp = &dc->d->hp;
    int32_t r = 0, slot = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        const spex_draft_block *k = &blocks[b];
        const int32_t P = dc->seq_len[k->seq];
        dc->blocks[b] = *k;
        dc->blk_row0[b] = r;
        dc->blk_slot0[b] = slot;
        for (int32_t j = 0; j <= k->n; j++, r++) {
            dc->row_pos[r] = P + j;
            dc->row_seq[r] = k->seq;
            dc->row_j[r] = j;
            dc->row_tok[r] = j == 0 ? k->anchor : hp->mask_token;
            dc->row_slot[r] = j == 0 ? -1 : slot++;
        }
    }
    dc->blk_row0[n_blocks] = r;
    dc->blk_slot0[n_blocks] = slot;
    dc->n_blocks = n_blocks;
    dc->n_rows = r;
    dc->n_slots = slot;
    spex_dflash_forward_blocks(dc);
    return SPEX_OK;
}

/* ======================================================================== */
/* Outputs                                                                   */
/* ======================================================================== */

/* Slot index of (block b, slot p), or -1. */
static int32_t slot_index(const spex_draft_context *dc, int32_t b, int32_t p) {
    if (!dc || b < 0 || b >= dc->n_blocks || p < 1 || p > dc->blocks[b].n) return -1;
    return dc->blk_slot0[b] + p - 1;
}

const float *spex_draft_logits(const spex_draft_context *dc, int32_t b, int32_t p) {
    const int32_t i = slot_index(dc, b, p);
    return i < 0 ? NULL : dc->logits + (size_t)i * (size_t)dc->d->hp.n_vocab;
}

const float *spex_draft_hidden(const spex_draft_context *dc, int32_t b, int32_t p) {
    const int32_t i = slot_index(dc, b, p);
    return i < 0 ? NULL : dc->hout + (size_t)i * (size_t)dc->d->hp.n_embd;
}

const float *spex_draft_gate(const spex_draft_context *dc, int32_t b, int32_t p) {
    const int32_t i = slot_index(dc, b, p);
    if (i < 0 || dc->d->hp.variant != SPEX_DFLASH2) return NULL;
    return dc->gatev + (size_t)i * (size_t)dc->d->hp.selector_rank;
}

int32_t spex_draft_candidates(const spex_draft_context *dc, int32_t b, int32_t p, const int32_t **ids,
                              const float **U) {
    const int32_t i = slot_index(dc, b, p);
    if (i < 0) {
        if (ids) *ids = NULL;
        if (U) *U = NULL;
        return 0;
    }
    if (ids) *ids = dc->cand + (size_t)i * (size_t)dc->K;
    if (U) *U = dc->cand_u + (size_t)i * (size_t)dc->K;
    return dc->K;
}

bool spex_draft_block_info(const spex_draft_context *dc, int32_t b, int32_t *anchor, int32_t *n) {
    if (!dc || b < 0 || b >= dc->n_blocks) return false;
    if (anchor) *anchor = dc->blocks[b].anchor;
    if (n) *n = dc->blocks[b].n;
    return true;
}

/* ---- debug views (dflash_ctx.h) ---------------------------------------------------------- */

void spex_draft_set_debug(spex_draft_context *dc, bool on) {
    if (!dc) return;
    if (on && !dc->dbg_out) {
        /* Tests only: allocated on request, outside the token loop. */
        const size_t N = (size_t)dc->d->hp.n_layer, nr = (size_t)dc->nr_max;
        dc->dbg_out = calloc(N * nr * (size_t)dc->d->hp.n_embd + 1, sizeof(float));
        dc->dbg_da = calloc(N * nr * (size_t)dc->nd + 1, sizeof(float));
        dc->dbg_df = calloc(N * nr * (size_t)dc->nd + 1, sizeof(float));
        if (!dc->dbg_out || !dc->dbg_da || !dc->dbg_df) on = false;
    }
    dc->debug = on;
}

const float *spex_draft_debug_out(const spex_draft_context *dc, int32_t l) {
    if (!dc || !dc->dbg_out || l < 0 || l >= dc->d->hp.n_layer) return NULL;
    return dc->dbg_out + (size_t)l * (size_t)dc->nr_max * (size_t)dc->d->hp.n_embd;
}

const float *spex_draft_debug_delta(const spex_draft_context *dc, int32_t l, bool ffn) {
    if (!dc || !dc->dbg_da || dc->nd == 0 || l < 0 || l >= dc->d->hp.n_layer) return NULL;
    return (ffn ? dc->dbg_df : dc->dbg_da) + (size_t)l * (size_t)dc->nr_max * (size_t)dc->nd;
}

const float *spex_draft_debug_c(const spex_draft_context *dc) { return dc ? dc->ic : NULL; }
