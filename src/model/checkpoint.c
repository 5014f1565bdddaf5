/*
 * checkpoint.c — recurrent-state checkpoints and the rewind of a recurrent model's sequence
 * to any earlier length (include/spex.h "KV cache"; ../shared/docs/targets.md §9 strategy B,
 * llama-server's --ctx-checkpoints / --checkpoint-min-step).
 *
 * What it is: a recurrent (qwen35) sequence can be truncated for free only to positions its
 * state ring still holds (model.h "Recurrent state"). Going further back — prompt-prefix reuse
 * of a conversation that diverged early — restores the latest checkpoint at or before the
 * target position (else the zero state at position 0) and runs the tokens from there again
 * (the context keeps each sequence's token history for that). Checkpoints are copies of all
 * GDN layers' S and conv windows, taken after a forward once the sequence has grown by
 * checkpoint_min_step tokens since its last one, and whenever a caller asks
 * (spex_kv_seq_checkpoint: spex_spec takes one at the end of every prompt). With all slots
 * used, the oldest checkpoint is replaced. What it is not: the ring or the KV cache (context.c).
 *
 * Placement choice (targets.md §9 leaves it open): "every checkpoint_min_step tokens, plus one
 * at the end of each prompt"; the forced checkpoint near the last user-message start that
 * llama-server takes needs the chat structure, which the context does not see.
 */
#include "model/api.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static float *ck_S(const spex_context *c, int32_t seq, int32_t slot, int32_t ri) {
    const uint64_t NR = (uint64_t)c->model->hp.n_recurrent;
    return c->ck_S + (((uint64_t)seq * (uint64_t)c->n_ck + (uint64_t)slot) * NR + (uint64_t)ri) * c->rs_S_floats;
}

static float *ck_conv(const spex_context *c, int32_t seq, int32_t slot, int32_t ri) {
    const uint64_t NR = (uint64_t)c->model->hp.n_recurrent;
    return c->ck_conv + (((uint64_t)seq * (uint64_t)c->n_ck + (uint64_t)slot) * NR + (uint64_t)ri) * c->rs_conv_floats;
}

static int32_t *ck_pos(const spex_context *c, int32_t seq) { return c->ck_pos + (size_t)seq * (size_t)c->n_ck; }

/* Slot holding the largest position <= max_pos, or -1. */
static int32_t ck_latest(const spex_context *c, int32_t seq, int32_t max_pos) {
    const int32_t *cp = ck_pos(c, seq);
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_ck; i++)
        if (cp[i] >= 0 && cp[i] <= max_pos && (best < 0 || cp[i] > cp[best])) best = i;
    return best;
}

/* Copies the state after position pos (in the ring) into a checkpoint slot: an empty one,
 * else the oldest. */
static void ck_save(spex_context *c, int32_t seq, int32_t pos) {
    int32_t *cp = ck_pos(c, seq);
    int32_t slot = 0;
    for (int32_t i = 0; i < c->n_ck; i++) {
        if (cp[i] == pos) return; /* already there */
        if (cp[i] < 0) {
            slot = i;
            break;
        }
        if (cp[i] < cp[slot]) slot = i;
    }
    for (int32_t ri = 0; ri < c->model->hp.n_recurrent; ri++) {
        memcpy(ck_S(c, seq, slot, ri), spex_rs_S(c, seq, pos, ri), sizeof(float) * c->rs_S_floats);
        memcpy(ck_conv(c, seq, slot, ri), spex_rs_conv(c, seq, pos, ri), sizeof(float) * c->rs_conv_floats);
    }
    cp[slot] = pos;
}

void spex_ck_after_forward(spex_context *c, int32_t seq) {
    if (c->n_ck == 0) return;
    const int32_t last = c->seq_len[seq] - 1;
    const int32_t prev = ck_latest(c, seq, last);
    const int32_t since = prev < 0 ? last + 1 : last - ck_pos(c, seq)[prev];
    if (since >= c->params.checkpoint_min_step) ck_save(c, seq, last);
}

void spex_ck_drop_from(spex_context *c, int32_t seq, int32_t new_len) {
    int32_t *cp = ck_pos(c, seq);
    for (int32_t i = 0; i < c->n_ck; i++)
        if (cp[i] >= new_len) cp[i] = -1;
}

void spex_ck_copy(spex_context *c, int32_t src, int32_t dst, int32_t len) {
    if (c->n_ck == 0 || src == dst) return;
    const int32_t *sp = ck_pos(c, src);
    int32_t *dp = ck_pos(c, dst);
    for (int32_t i = 0; i < c->n_ck; i++) {
        dp[i] = sp[i] >= 0 && sp[i] < len ? sp[i] : -1;
        if (dp[i] < 0) continue;
        for (int32_t ri = 0; ri < c->model->hp.n_recurrent; ri++) {
            memcpy(ck_S(c, dst, i, ri), ck_S(c, src, i, ri), sizeof(float) * c->rs_S_floats);
            memcpy(ck_conv(c, dst, i, ri), ck_conv(c, src, i, ri), sizeof(float) * c->rs_conv_floats);
        }
    }
}

void spex_ck_slot(const spex_context *c, int32_t seq, int32_t slot, int32_t ri, float **S, float **conv, int32_t **pos) {
    *S = ck_S(c, seq, slot, ri);
    *conv = ck_conv(c, seq, slot, ri);
    *pos = ck_pos(c, seq) + slot;
}

spex_status spex_kv_seq_checkpoint(spex_context *ctx, int32_t seq, spex_error *err) {
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv checkpoint: sequence %d, expected 0 .. %d", seq,
                              ctx ? ctx->params.n_seq_max - 1 : -1);
    if (ctx->rs_S && ctx->n_ck > 0 && ctx->seq_len[seq] > 0) ck_save(ctx, seq, ctx->seq_len[seq] - 1);
    return SPEX_OK;
}

int32_t spex_kv_seq_n_checkpoints(const spex_context *ctx, int32_t seq, int32_t *last_pos) {
    if (last_pos) *last_pos = -1;
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq_max || !ctx->rs_S || ctx->n_ck == 0) return 0;
    const int32_t *cp = ck_pos(ctx, seq);
    int32_t n = 0, last = -1;
    for (int32_t i = 0; i < ctx->n_ck; i++)
        if (cp[i] >= 0) n++, last = cp[i] > last ? cp[i] : last;
    if (last_pos) *last_pos = last;
    return n;
}

spex_status spex_kv_seq_rewind(spex_context *ctx, int32_t seq, int32_t new_len, int32_t *n_replayed,
                               spex_error *err) {
    if (n_replayed) *n_replayed = 0;
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "kv rewind: sequence %d, expected 0 .. %d", seq,
                              ctx ? ctx->params.n_seq_max - 1 : -1);
    if (new_len < 0 || new_len > ctx->seq_len[seq])
        return spex_error_set(err, SPEX_ERR_RANGE, "kv rewind: sequence %d holds %d tokens, cannot rewind to %d", seq,
                              ctx->seq_len[seq], new_len);
    if (spex_kv_seq_can_truncate(ctx, seq, new_len)) return spex_kv_seq_truncate(ctx, seq, new_len, err);

    /* Restore the latest checkpoint at or before new_len - 1 into its ring slot, or start empty. */
    const int32_t slot = ck_latest(ctx, seq, new_len - 1);
    int32_t start = 0;
    if (slot >= 0) {
        const int32_t pos = ck_pos(ctx, seq)[slot];
        for (int32_t ri = 0; ri < ctx->model->hp.n_recurrent; ri++) {
            memcpy(spex_rs_S(ctx, seq, pos, ri), ck_S(ctx, seq, slot, ri), sizeof(float) * ctx->rs_S_floats);
            memcpy(spex_rs_conv(ctx, seq, pos, ri), ck_conv(ctx, seq, slot, ri), sizeof(float) * ctx->rs_conv_floats);
        }
        start = pos + 1;
        ctx->rs_lo[seq] = pos;
    } else {
        ctx->rs_lo[seq] = 0;
    }
    ctx->seq_len[seq] = start;
    spex_ck_drop_from(ctx, seq, new_len);

    /* Replay start .. new_len - 1 from the token history (its entries stay as they are). */
    const int32_t *hist = ctx->hist + (size_t)seq * (size_t)ctx->params.n_ctx_per_seq;
    for (int32_t p = start; p < new_len;) {
        int32_t k = new_len - p;
        if (k > ctx->params.n_batch_max) k = ctx->params.n_batch_max;
        for (int32_t i = 0; i < k; i++)
            ctx->rp_batch[i] = (spex_batch_token){.token = hist[p + i], .pos = p + i, .seq = seq, .logits = false};
        spex_batch b = {.tokens = ctx->rp_batch, .n_tokens = k};
        spex_status s = spex_forward(ctx, &b, err);
        if (s != SPEX_OK) {
            /* The sequence stays consistent, shorter: what was replayed so far. (The cause is
             * copied out first: err->msg is both the source and the destination.) */
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err ? err->msg : "?");
            return spex_error_set(err, s, "kv rewind: sequence %d: replay at position %d failed: %s", seq, p, why);
        }
        p += k;
    }
    if (n_replayed) *n_replayed = new_len - start;
    return SPEX_OK;
}
