/*
 * kv_state.c — one sequence's cache as a flat byte image: the KV rows of its first n
 * positions and, for recurrent targets (qwen35), the recurrent state after position n - 1 and
 * the sequence's checkpoints.
 *
 * What it is: the copy-out / copy-in behind the server's slot save and restore (src/model/
 * api.h, spex_kv_seq_state_*). The image is raw cache bytes in this context's layout: for each
 * attention layer in order, K then V, each segment's n rows (kv_type); then, recurrent models
 * with n > 0 only, each GDN layer's S [Hv][Dk][Dv] and conv window [d_conv-1][Cc] as fp32, an
 * int32 count of checkpoints and, per checkpoint, its int32 position and the same per-layer
 * states — only the checkpoints the sequence holds, since one copy of a large model's state is
 * tens of MiB. So a restored slot rewinds to a checkpoint (a prompt's end) without replaying
 * from 0. What it is not: a file format (no header, no identity check: the caller frames and
 * validates it, src/server/slot_file.c).
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

/* The image's bytes for n positions and k checkpoints. */
static uint64_t image_bytes(const spex_context *ctx, int32_t n, int32_t k) {
    uint64_t b = (uint64_t)n * kv_bytes_per_pos(ctx);
    if (ctx->rs_S && n > 0) b += rs_bytes(ctx) + sizeof(int32_t) + (uint64_t)k * (sizeof(int32_t) + rs_bytes(ctx));
    return b;
}

static int32_t n_used(const spex_context *ctx, int32_t seq) {
    return ctx->rs_S ? spex_kv_seq_n_checkpoints(ctx, seq, NULL) : 0;
}

uint64_t spex_kv_seq_state_size(const spex_context *ctx, int32_t seq) {
    if (!seq_valid(ctx, seq)) return 0;
    return image_bytes(ctx, ctx->seq_len[seq], n_used(ctx, seq));
}

uint64_t spex_kv_seq_state_max(const spex_context *ctx, int32_t n) {
    if (!ctx || n < 0 || n > ctx->params.n_ctx_per_seq) return 0;
    return image_bytes(ctx, n, ctx->rs_S ? ctx->n_ck : 0);
}

/* Copies between *buf and the cache (direction `load`), advancing *buf. */
static void xfer(uint8_t **buf, void *cache, size_t n, bool load) {
    if (load) memcpy(cache, *buf, n);
    else memcpy(*buf, cache, n);
    *buf += n;
}

/* Walks seq's image of n positions (n > 0 for the recurrent part) with k checkpoints: on
 * save the used slots in order, on load slots 0 .. k-1 (the image's positions are checked). */
static void walk(spex_context *ctx, int32_t seq, int32_t n, int32_t k, uint8_t *buf, bool load) {
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
    if (load) buf += sizeof k;   /* the count, read by check_image */
    else xfer(&buf, &k, sizeof k, false);
    for (int32_t slot = 0, done = 0; slot < ctx->n_ck && done < k; slot++) {
        float *S, *cv;
        int32_t *pos;
        spex_ck_slot(ctx, seq, slot, 0, &S, &cv, &pos);
        if (!load && *pos < 0) continue;
        xfer(&buf, pos, sizeof *pos, load);
        for (int32_t ri = 0; ri < ctx->model->hp.n_recurrent; ri++) {
            spex_ck_slot(ctx, seq, slot, ri, &S, &cv, &pos);
            xfer(&buf, S, bs, load);
            xfer(&buf, cv, bc, load);
        }
        done++;
    }
}

spex_status spex_kv_seq_state_save(const spex_context *ctx, int32_t seq, void *buf, uint64_t size, spex_error *err) {
    if (!seq_valid(ctx, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state save: bad sequence %d", seq);
    const uint64_t need = spex_kv_seq_state_size(ctx, seq);
    if ((!buf && need) || size != need)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state save: sequence %d needs %llu bytes, got %llu", seq,
                              (unsigned long long)need, (unsigned long long)size);
    /* The ring always holds the state after the last position (model.h). */
    if (need) walk((spex_context *)ctx, seq, ctx->seq_len[seq], n_used(ctx, seq), buf, false);
    return SPEX_OK;
}

/* The image's checkpoint count (0 without a recurrent part) after checking the size and the
 * positions; -1 with err set when the image does not fit n positions of this context. */
static int32_t check_image(const spex_context *ctx, int32_t n, const uint8_t *buf, uint64_t size, spex_error *err) {
    const uint64_t base = image_bytes(ctx, n, 0);
    int32_t k = 0;
    if (size >= base && size > 0 && ctx->rs_S && n > 0) memcpy(&k, buf + base - sizeof k, sizeof k);
    if (size < base || k < 0 || k > ctx->n_ck || size != image_bytes(ctx, n, k)) {
        spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: %llu bytes are no image of %d tokens (%llu .. %llu)",
                       (unsigned long long)size, n, (unsigned long long)base,
                       (unsigned long long)spex_kv_seq_state_max(ctx, n));
        return -1;
    }
    for (int32_t i = 0; i < k; i++) {
        int32_t pos;
        memcpy(&pos, buf + base + (uint64_t)i * (sizeof(int32_t) + rs_bytes(ctx)), sizeof pos);
        if (pos < 0 || pos >= n) {
            spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: checkpoint %d at position %d outside 0 .. %d", i,
                           pos, n - 1);
            return -1;
        }
    }
    return k;
}

spex_status spex_kv_seq_state_load(spex_context *ctx, int32_t seq, const int32_t *tokens, int32_t n, const void *buf,
                                   uint64_t size, spex_error *err) {
    if (!seq_valid(ctx, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: bad sequence %d", seq);
    if (n < 0 || n > ctx->params.n_ctx_per_seq)
        return spex_error_set(err, SPEX_ERR_RANGE, "kv state load: %d tokens, the sequence holds at most %d", n,
                              ctx->params.n_ctx_per_seq);
    if (size > 0 && !buf) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: NULL image");
    if (n > 0 && !tokens) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv state load: NULL tokens");
    const int32_t V = ctx->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return spex_error_set(err, SPEX_ERR_RANGE, "kv state load: token %d at %d outside the vocabulary (%d)",
                                  tokens[i], i, V);
    const int32_t k = check_image(ctx, n, buf, size, err);
    if (k < 0) return SPEX_ERR_INVALID_ARG;
    spex_kv_seq_clear(ctx, seq, NULL);   /* drops the checkpoints the image does not bring */
    if (size) walk(ctx, seq, n, k, (uint8_t *)(uintptr_t)buf, true);
    if (ctx->rs_S) {
        ctx->rs_lo[seq] = n > 0 ? n - 1 : 0;
        if (ctx->hist && n > 0)   /* what a rewind replays from a checkpoint */
            memcpy(ctx->hist + (size_t)seq * (size_t)ctx->params.n_ctx_per_seq, tokens, sizeof(int32_t) * (size_t)n);
    }
    ctx->seq_len[seq] = n;
    return SPEX_OK;
}
