/*
 * draft_dflash.c — the DFlash v1 / DFlash2 drafter of the speculative loop (drafter.h;
 * dflash2.md §8–§16): a block of MASK rows after the anchor in one batched drafter forward,
 * the walk of each block, and the injection of the target's taps of every accepted row into
 * the draft cache (only accepted rows are ever written, so the draft cache needs no trimming).
 *
 * Deferred injection. A prompt's features, and those of a step where a sequence does not
 * draft (adaptive draft length turned it off, or its budget left no room), wait in a
 * per-sequence buffer instead of being injected; they are injected in one batch right before
 * its next draft (or when the buffer is full: pend_cap rows). Drafting off then costs only the
 * taps, and a request that never drafts costs no drafter work at all.
 *
 * Nothing is allocated after the constructor.
 */
#include "model/api.h"
#include "spec/drafter.h"
#include "spec/api.h"
#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

/* pend_cap: PEND_BYTES over all sequences, at least PEND_MIN rows each, at most the context. */
#define PEND_MIN 32
#define PEND_BYTES ((size_t)64 << 20)

typedef struct dflash {
    spec_drafter base;
    spex_context *t;            /* borrowed */
    spex_draft_context *dc;     /* borrowed */
    int32_t n_seq, feat_w, inject_max, pend_cap, n_stage_max;
    float *pend;                /* [n_seq][pend_cap][feat_w]: features not yet injected        */
    int32_t *n_pend;            /* [n_seq]: they belong to positions draft_len .. + n_pend - 1 */
    spex_draft_block *blocks;   /* [n_seq]                                                     */
    float *feat;                /* [n_stage_max][feat_w]: accepted rows of this forward        */
    int32_t *stage_seq, *stage_pos; /* [n_stage_max]                                          */
    int32_t n_stage;
    int32_t *flush_seq, *flush_pos; /* [inject_max]: a flush happens while rows are staged     */
} dflash;

static float *pend_of(dflash *f, int32_t seq) {
    return f->pend + (size_t)seq * (size_t)f->pend_cap * (size_t)f->feat_w;
}

/* Injects n feature rows of seq at positions pos0 .. in chunks the draft context accepts. */
static spex_status inject(dflash *f, int32_t seq, const float *rows, int32_t n, int32_t pos0, spex_error *err) {
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < f->inject_max ? n - done : f->inject_max;
        for (int32_t i = 0; i < k; i++) {
            f->flush_seq[i] = seq;
            f->flush_pos[i] = pos0 + done + i;
        }
        spex_status st = spex_draft_inject(f->dc, rows + (size_t)done * (size_t)f->feat_w, f->feat_w, f->flush_seq,
                                           f->flush_pos, k, err);
        if (st != SPEX_OK) return st;
        done += k;
    }
    return SPEX_OK;
}

/* Injects seq's pending features (positions draft_len ..) in one call. */
static spex_status flush(dflash *f, int32_t seq, spex_error *err) {
    if (f->n_pend[seq] == 0) return SPEX_OK;
    double t0 = spex_now_s();
    spex_status st = inject(f, seq, pend_of(f, seq), f->n_pend[seq], spex_draft_kv_seq_len(f->dc, seq), err);
    if (st != SPEX_OK) return st;
    f->n_pend[seq] = 0;
    double dt = spex_now_s() - t0;   /* booked apart so the server can tell a backlog from a step's own cost */
    f->base.total->t_flush += dt;
    f->base.seq_st[seq].t_flush += dt;
    return SPEX_OK;
}

static spex_status df_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                            uint64_t *n_batches, spex_error *err) {
    dflash *f = (dflash *)d;
    /* sequences about to draft first catch their draft cache up */
    for (int32_t i = 0; i < n; i++) {
        spex_status st = flush(f, reqs[i].seq, err);
        if (st != SPEX_OK) return st;
        f->blocks[i] = (spex_draft_block){.seq = reqs[i].seq, .anchor = reqs[i].anchor, .n = reqs[i].n_max};
    }
    spex_status st = spex_draft_forward(f->dc, f->blocks, n, err);
    (*n_batches)++;
    for (int32_t i = 0; i < n && st == SPEX_OK; i++)
        st = spex_draft_walk(f->dc, i, reqs[i].temp, reqs[i].p_min, reqs[i].rng, &out[i], err);
    return st;
}

static spex_status df_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                            bool idle, spex_error *err) {
    (void)toks;
    dflash *f = (dflash *)d;
    const float *taps = spex_taps(f->t);
    if (!taps) return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: the target context produced no taps");
    if (spex_draft_kv_seq_len(f->dc, seq) + f->n_pend[seq] != pos0)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: draft cache %d + pending %d != position %d",
                              seq, spex_draft_kv_seq_len(f->dc, seq), f->n_pend[seq], pos0);
    const float *rows = taps + (size_t)r0 * (size_t)f->feat_w;
    if (idle && f->n_pend[seq] + n <= f->pend_cap) {
        memcpy(pend_of(f, seq) + (size_t)f->n_pend[seq] * (size_t)f->feat_w, rows,
               sizeof(float) * (size_t)n * (size_t)f->feat_w);
        f->n_pend[seq] += n;
        return SPEX_OK;
    }
    spex_status st = flush(f, seq, err);
    if (st != SPEX_OK) return st;
    if (f->n_stage + n > f->n_stage_max) return inject(f, seq, rows, n, pos0, err);   /* a prompt chunk */
    memcpy(f->feat + (size_t)f->n_stage * (size_t)f->feat_w, rows, sizeof(float) * (size_t)n * (size_t)f->feat_w);
    for (int32_t r = 0; r < n; r++) {
        f->stage_seq[f->n_stage + r] = seq;
        f->stage_pos[f->n_stage + r] = pos0 + r;
    }
    f->n_stage += n;
    return SPEX_OK;
}

static spex_status df_commit(spec_drafter *d, spex_error *err) {
    dflash *f = (dflash *)d;
    for (int32_t done = 0; done < f->n_stage;) {
        int32_t k = f->n_stage - done < f->inject_max ? f->n_stage - done : f->inject_max;
        spex_status st = spex_draft_inject(f->dc, f->feat + (size_t)done * (size_t)f->feat_w, f->feat_w,
                                           f->stage_seq + done, f->stage_pos + done, k, err);
        if (st != SPEX_OK) {
            f->n_stage = 0;
            return st;
        }
        done += k;
    }
    f->n_stage = 0;
    return SPEX_OK;
}

static bool df_can_keep(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len) {
    (void)d, (void)seq;
    return n_keep >= 0 && n_keep <= len;
}

/* The draft cache plus what stays pending back to n_keep positions. */
static spex_status df_keep(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err) {
    dflash *f = (dflash *)d;
    int32_t dl = spex_draft_kv_seq_len(f->dc, seq);
    if (n_keep <= dl) {
        f->n_pend[seq] = 0;
        return spex_draft_kv_seq_truncate(f->dc, seq, n_keep, err);
    }
    if (n_keep - dl > f->n_pend[seq])
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: draft cache %d + pending %d < %d", seq, dl,
                              f->n_pend[seq], n_keep);
    f->n_pend[seq] = n_keep - dl;   /* still pending: injected before the next draft */
    return SPEX_OK;
}

static int32_t df_have(const spec_drafter *d, int32_t seq) {
    const dflash *f = (const dflash *)d;
    return spex_draft_kv_seq_len(f->dc, seq) + f->n_pend[seq];
}

static void df_seq_end(spec_drafter *d, int32_t seq) {
    dflash *f = (dflash *)d;
    f->n_pend[seq] = 0;
    spex_draft_kv_seq_clear(f->dc, seq, NULL);
}

static void df_free(spec_drafter *d) {
    dflash *f = (dflash *)d;
    if (!f) return;
    free(f->pend);
    free(f->n_pend);
    free(f->blocks);
    free(f->feat);
    free(f->stage_seq);
    free(f->stage_pos);
    free(f->flush_seq);
    free(f->flush_pos);
    free(f);
}

static const spec_drafter_ops DFLASH_OPS = {
    .name = "dflash", .draft = df_draft, .wrote = df_wrote, .commit = df_commit, .can_keep = df_can_keep,
    .keep = df_keep, .have = df_have, .seq_end = df_seq_end, .free = df_free,
};

int32_t spec_drafter_dflash_pending(const spec_drafter *d, int32_t seq) {
    return d && d->ops == &DFLASH_OPS ? ((const dflash *)d)->n_pend[seq] : 0;
}

int32_t spec_drafter_dflash_pend_cap(spec_drafter *d, int32_t cap) {
    if (!d || d->ops != &DFLASH_OPS) return 0;
    dflash *f = (dflash *)d;
    if (cap >= 0 && cap < f->pend_cap) f->pend_cap = cap;
    return f->pend_cap;
}

spex_status spec_drafter_dflash(spex_context *t, spex_draft_context *dc, spec_drafter **out, spex_error *err) {
    const spex_drafter *dr = spex_draft_context_drafter(dc);
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(dr);
    const spex_draft_context_params *dp = spex_draft_context_get_params(dc);
    const spex_context_params *tp = spex_context_get_params(t);
    if (spex_drafter_target(dr) != spex_context_model(t))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: the drafter was loaded for another target model than the context's");
    bool same = tp->n_taps == dh->n_taps;
    for (int32_t i = 0; same && i < dh->n_taps; i++) same = tp->tap_layers[i] == dh->target_layers[i];
    if (!same)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: the target context's tap layers (%d taps) differ from the drafter's "
                              "target_layers (%d): create the context with tap_layers = target_layers",
                              tp->n_taps, dh->n_taps);
    if (dp->n_seq_max != tp->n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: draft context has %d sequences, target %d",
                              dp->n_seq_max, tp->n_seq_max);
    dflash *f = calloc(1, sizeof *f);
    if (!f) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    int32_t lim = dh->block_size - 1 < SPEX_DRAFT_MAX_N ? dh->block_size - 1 : SPEX_DRAFT_MAX_N;
    f->base = (spec_drafter){.ops = &DFLASH_OPS, .n_max_default = lim, .n_max_limit = lim,
                             .block_size = dh->block_size, .n_ctx = dp->n_ctx_per_seq,
                             .max_blocks = dp->n_blocks_max, .has_q = dh->variant == SPEX_DFLASH2, .rollback = true};
    f->t = t;
    f->dc = dc;
    f->n_seq = tp->n_seq_max;
    f->feat_w = dh->n_taps * dh->n_embd;
    f->inject_max = dp->n_inject_max;
    size_t cap = PEND_BYTES / ((size_t)f->n_seq * (size_t)f->feat_w * sizeof(float));
    if (cap < PEND_MIN) cap = PEND_MIN;
    if (cap > (size_t)tp->n_ctx_per_seq) cap = (size_t)tp->n_ctx_per_seq;
    f->pend_cap = (int32_t)cap;
    f->n_stage_max = tp->n_batch_max > tp->n_outputs_max ? tp->n_batch_max : tp->n_outputs_max;
    const size_t W = (size_t)f->feat_w;
    f->pend = malloc(sizeof(float) * (size_t)f->n_seq * cap * W);
    f->n_pend = calloc((size_t)f->n_seq, sizeof(int32_t));
    f->blocks = malloc(sizeof *f->blocks * (size_t)f->n_seq);
    f->feat = malloc(sizeof(float) * (size_t)f->n_stage_max * W);
    f->stage_seq = malloc(sizeof(int32_t) * (size_t)f->n_stage_max);
    f->stage_pos = malloc(sizeof(int32_t) * (size_t)f->n_stage_max);
    f->flush_seq = malloc(sizeof(int32_t) * (size_t)(f->inject_max > 0 ? f->inject_max : 1));
    f->flush_pos = malloc(sizeof(int32_t) * (size_t)(f->inject_max > 0 ? f->inject_max : 1));
    if (!f->pend || !f->n_pend || !f->blocks || !f->feat || !f->stage_seq || !f->stage_pos || !f->flush_seq ||
        !f->flush_pos) {
        df_free(&f->base);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    *out = &f->base;
    return SPEX_OK;
}
