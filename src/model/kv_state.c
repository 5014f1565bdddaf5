/*
 * kv_state.c — one sequence's cache as a flat byte image: the KV rows of its first n
 * positions and, for recurrent targets (qwen35), the recurrent state after position n - 1 and
 * the sequence's checkpoints.
 *
 * What it is: the copy-out / copy-in behind the server's slot save and restore (src/model/
 * api.h, spex_kv_seq_state_*). The image is raw cache bytes in this context's layout: for each
 * attention layer in order, K then V, each segment's n rows (kv_type); then, recurrent models
 * only, each GDN layer's S [Hv][Dk][Dv] and conv window [d_conv-1][Cc] as fp32, and each of the
 * n_ctx_checkpoints checkpoint slots as an int32 position (-1: empty) followed by the same
 * per-layer states (zeros when empty), so a restored slot rewinds to a checkpoint (a prompt's
 * end) without replaying from 0. The size depends on n and the context alone. What it is not:
 * a file format (no header, no identity check: the caller frames and validates it,
 * src/server/slot_file.c).
 */
#include "model/model.h"

#include <string.h>

static bool seq_valid(const spex_context *ctx, int32_t seq) {
    return ctx && seq >= 0 && seq < ctx->params.n_seq_max;
}

static uint64_t kv_bytes_per_pos(const spex_context *ctx) {
    return 2u * (uint64_t)ctx->model->n_kv_layers * (uint64_t)ctx->kv_nseg * (uint64_t)ctx->kv_seg_bytes;
}

/* One copy of all GDN layers' states. */
static uint64_t rs_bytes(const spex_context *ctx) {
    return (uint64_t)ctx->model->hp.n_recurrent * sizeof(float) * (ctx->rs_S_floats + ctx->rs_conv_floats);
}

uint64_t spex_kv_seq_state_size(const spex_context *ctx, int32_t n) {
    if (!ctx || n < 0 || n > ctx->params.n_ctx_per_seq) return 0;
    uint64_t b = (uint64_t)n * kv_bytes_per_pos(ctx);
    if (ctx->rs_S && n > 0) b += rs_bytes(ctx) + (uint64_t)ctx->n_ck * (sizeof(int32_t) + rs_bytes(ctx));
    return b;
}

/* Copies between *buf and the cache (direction `load`), advancing *buf. */
static void xfer(uint8_t **buf, void *cache, size_t n, bool load) {
    if (load) memcpy(cache, *buf, n);
    else memcpy(*buf, cache, n);
    *buf += n;
}

/* Walks seq's image of n positions (n > 0 for the recurrent part). */
static void walk(spex_context *ctx, int32_t seq, int32_t n, uint8_t *buf, bool load) {
    const size_t rows = (size_t)n * ctx->kv_seg_bytes;
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        if (ctx->model->layers[l].kv_index < 0) continue;
        for (int v = 0; v < 2; v++)
            for (int32_t g = 0; g < ctx->kv_nseg; g++) xfer(&buf, spex_kv_seg(ctx, v == 1, l, seq, g, 0), rows, load);
    }
    if (!ctx->rs_S || n == 0) return;
    const size_t bs = sizeof(float) * ctx->rs_S_floats, bc = sizeof(float) * ctx->rs_conv_floats;
    for (int32_t ri = 0; ri < ctx->model->hp.n_recurrent; ri++) {
        xfer(&buf, spex_rs_S(ctx, seq, n - 1, ri), bs, load);
        xfer(&buf, spex_rs_conv(ctx, seq, n - 1, ri), bc, load);
    }
    for (int32_t k = 0; k < ctx->n_ck; k++) {
        float *S, *cv;
        int32_t *pos;
        spex_ck_slot(ctx, seq, k, 0, &S, &cv, &pos);
        xfer(&buf, pos, sizeof *pos, load);
        for (int32_t ri = 0; ri < ctx->model->hp.n_recurrent; ri++) {
            spex_ck_slot(ctx, seq, k, ri, &S, &cv, &pos);
            xfer(&buf, S, bs, load);
            xfer(&buf, cv, bc, load);
        }
    }
}

spex_status spex_kv_seq_state_save(const spex_context *ctx, int32_t seq, void *buf, uint64_t size, spex_error *err) {
    if (!seq_valid(ctx, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state save: bad sequence %d", seq);
    const int32_t n = ctx->seq_len[seq];
    const uint64_t need = spex_kv_seq_state_size(ctx, n);
    if ((!buf && need) || size != need)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state save: sequence %d needs %llu bytes, got %llu", seq,
                              (unsigned long long)need, (unsigned long long)size);
    /* The ring always holds the state after the last position (model.h). */
    if (need) walk((spex_context *)ctx, seq, n, buf, false);
    return SPEX_OK;
}

spex_status spex_kv_seq_state_load(spex_context *ctx, int32_t seq, const int32_t *tokens, int32_t n, const void *buf,
                                   uint64_t size, spex_error *err) {
    if (!seq_valid(ctx, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: bad sequence %d", seq);
    if (n < 0 || n > ctx->params.n_ctx_per_seq)
        return spex_error_set(err, SPEX_ERR_RANGE, "kv state load: %d tokens, the sequence holds at most %d", n,
                              ctx->params.n_ctx_per_seq);
    const uint64_t need = spex_kv_seq_state_size(ctx, n);
    if ((n > 0 && (!buf || !tokens)) || size != need)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: %d tokens need %llu bytes, got %llu", n,
                              (unsigned long long)need, (unsigned long long)size);
    const int32_t V = ctx->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return spex_error_set(err, SPEX_ERR_RANGE, "kv state load: token %d at %d outside the vocabulary (%d)",
                                  tokens[i], i, V);
    if (ctx->rs_S && n > 0) {   /* checkpoint positions: empty (-1) or inside the sequence */
        const uint8_t *p = (const uint8_t *)buf + (size_t)n * kv_bytes_per_pos(ctx) + rs_bytes(ctx);
        for (int32_t k = 0; k < ctx->n_ck; k++, p += sizeof(int32_t) + rs_bytes(ctx)) {
            int32_t pos;
            memcpy(&pos, p, sizeof pos);
            if (pos < -1 || pos >= n)
                return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                      "kv state load: checkpoint %d at position %d outside -1 .. %d", k, pos, n - 1);
        }
    }
    spex_kv_seq_clear(ctx, seq, NULL);
    if (need) walk(ctx, seq, n, (uint8_t *)(uintptr_t)buf, true);
    if (ctx->rs_S) {
        ctx->rs_lo[seq] = n > 0 ? n - 1 : 0;
        if (ctx->hist && n > 0)   /* what a rewind replays from a checkpoint */
            memcpy(ctx->hist + (size_t)seq * (size_t)ctx->params.n_ctx_per_seq, tokens, sizeof(int32_t) * (size_t)n);
    }
    ctx->seq_len[seq] = n;
    return SPEX_OK;
}
