/*
 * draft_model.c — a small model of the target's vocabulary as the drafter (drafter.h;
 * llama.cpp's --spec-type draft-simple, e.g. Qwen3-0.6B drafting for Qwen3-8B).
 *
 * It drafts autoregressively in its own context: anchor at P -> d_1, d_1 at P+1 -> d_2, ..., all
 * drafting sequences in one batch per slot, greedy (argmax), stopping a sequence's draft where
 * the top softmax probability falls below p_min. Its cache catches up lazily from the loop's
 * token history right before a draft (a prompt, and steps that did not draft, cost it nothing
 * until then), and after a step it keeps only what the target accepted (the drafts it fed
 * beyond are rolled back). Drafts are greedy, so T > 0 verifies by sample-and-match.
 *
 * Nothing is allocated after the constructor.
 */
#include "model/api.h"
#include "spec/drafter.h"
#include "spec/api.h"

#include <math.h>
#include <stdlib.h>

typedef struct model_drafter {
    spec_drafter base;
    spex_context *dctx;          /* borrowed */
    int32_t n_vocab, n_batch;
    spex_batch_token *batch;     /* [n_batch]                                   */
    int32_t *live;               /* [n_seq]: request index of each batch row    */
    int32_t *cur;                /* [n_seq]: the token each request feeds next  */
} model_drafter;

/* Positions beyond n_keep rolled back (a recurrent draft model by its ring or a replay). */
static spex_status trim(model_drafter *md, int32_t seq, int32_t n_keep, spex_error *err) {
    if (spex_kv_seq_len(md->dctx, seq) <= n_keep) return SPEX_OK;
    return spex_kv_seq_rewind(md->dctx, seq, n_keep, NULL, err);
}

/* Feeds the history the draft cache lacks, hist[len .. pos), in batches without logits. */
static spex_status catch_up(model_drafter *md, const spec_draft_req *r, spex_error *err) {
    spex_status st = trim(md, r->seq, r->pos, err);
    for (int32_t p = spex_kv_seq_len(md->dctx, r->seq); st == SPEX_OK && p < r->pos;) {
        int32_t k = r->pos - p < md->n_batch ? r->pos - p : md->n_batch;
        for (int32_t i = 0; i < k; i++)
            md->batch[i] = (spex_batch_token){.token = r->hist[p + i], .pos = p + i, .seq = r->seq, .logits = false};
        spex_batch b = {.tokens = md->batch, .n_tokens = k};
        st = spex_forward(md->dctx, &b, err);
        p += k;
    }
    return st;
}

/* argmax of a logits row and its softmax probability. */
static int32_t top1(const float *z, int32_t V, float *prob) {
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
        if (z[v] > z[best]) best = v;
    double sum = 0.0;
    for (int32_t v = 0; v < V; v++) sum += exp((double)(z[v] - z[best]));
    *prob = (float)(1.0 / sum);
    return best;
}

static spex_status md_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                            uint64_t *n_batches, spex_error *err) {
    model_drafter *md = (model_drafter *)d;
    int32_t n_live = 0, n_max = 0;
    for (int32_t i = 0; i < n; i++) {
        out[i].n = 0;
        out[i].has_q = false;
        if (!reqs[i].hist) continue;   /* history unknown: no draft */
        spex_status st = catch_up(md, &reqs[i], err);
        if (st != SPEX_OK) return st;
        md->cur[i] = reqs[i].anchor;
        md->live[n_live++] = i;
        if (reqs[i].n_max > n_max) n_max = reqs[i].n_max;
    }
    for (int32_t j = 0; j < n_max && n_live > 0; j++) {
        for (int32_t r = 0; r < n_live; r++) {
            const spec_draft_req *q = &reqs[md->live[r]];
            md->batch[r] = (spex_batch_token){.token = md->cur[md->live[r]], .pos = q->pos + j, .seq = q->seq,
                                              .logits = true};
        }
        spex_batch b = {.tokens = md->batch, .n_tokens = n_live};
        spex_status st = spex_forward(md->dctx, &b, err);
        if (st != SPEX_OK) return st;
        (*n_batches)++;
        int32_t kept = 0;
        for (int32_t r = 0; r < n_live; r++) {
            int32_t i = md->live[r];
            float p;
            int32_t id = top1(spex_logits(md->dctx, r), md->n_vocab, &p);
            if (p < reqs[i].p_min) continue;   /* too unsure: the draft ends before this token */
            out[i].ids[out[i].n] = id;
            out[i].conf[out[i].n] = p;
            out[i].kidx[out[i].n] = 0;
            out[i].n++;
            md->cur[i] = id;
            if (out[i].n < reqs[i].n_max) md->live[kept++] = i;
        }
        n_live = kept;
    }
    return SPEX_OK;
}

/* The target now holds toks at pos0 ..; the draft cache keeps what it fed up to there (the
 * accepted drafts are the tokens it fed itself). */
static spex_status md_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                            bool idle, spex_error *err) {
    (void)toks, (void)r0, (void)idle;
    return trim((model_drafter *)d, seq, pos0 + n, err);
}

static spex_status md_commit(spec_drafter *d, spex_error *err) {
    (void)d, (void)err;
    return SPEX_OK;
}

static bool md_can_keep(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len) {
    (void)d, (void)seq;
    return n_keep >= 0 && n_keep <= len;
}

static spex_status md_keep(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err) {
    return trim((model_drafter *)d, seq, n_keep, err);
}

static int32_t md_have(const spec_drafter *d, int32_t seq) {
    (void)d, (void)seq;
    return -1;
}

static void md_seq_end(spec_drafter *d, int32_t seq) { spex_kv_seq_clear(((model_drafter *)d)->dctx, seq, NULL); }

static void md_free(spec_drafter *d) {
    model_drafter *md = (model_drafter *)d;
    if (!md) return;
    free(md->batch);
    free(md->live);
    free(md->cur);
    free(md);
}

static const spec_drafter_ops MODEL_OPS = {
    .name = "draft-simple", .draft = md_draft, .wrote = md_wrote, .commit = md_commit, .can_keep = md_can_keep,
    .keep = md_keep, .have = md_have, .seq_end = md_seq_end, .free = md_free,
};

spex_status spec_drafter_model(spex_context *t, spex_context *dctx, spec_drafter **out, spex_error *err) {
    const spex_context_params *tp = spex_context_get_params(t), *dp = spex_context_get_params(dctx);
    const spex_model_hparams *th = spex_model_get_hparams(spex_context_model(t));
    const spex_model_hparams *dh = spex_model_get_hparams(spex_context_model(dctx));
    if (dctx == t)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: the draft model needs a context of its own");
    if (dh->n_vocab != th->n_vocab)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: the draft model's vocabulary has %d tokens, the target's %d: draft-simple "
                              "needs a model of the target's family and vocabulary",
                              dh->n_vocab, th->n_vocab);
    if (dp->n_seq_max != tp->n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: draft model context has %d sequences, target %d",
                              dp->n_seq_max, tp->n_seq_max);
    if (dp->n_outputs_max < dp->n_seq_max || dp->n_batch_max < dp->n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: draft model context: n_batch_max %d and n_outputs_max %d must hold a row "
                              "per sequence (%d)",
                              dp->n_batch_max, dp->n_outputs_max, dp->n_seq_max);
    model_drafter *md = calloc(1, sizeof *md);
    if (!md) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    /* 16: llama.cpp's --draft-max default for a draft model */
    md->base = (spec_drafter){.ops = &MODEL_OPS, .n_max_default = 16, .n_max_limit = SPEX_DRAFT_MAX_N,
                              .n_ctx = dp->n_ctx_per_seq, .wants_hist = true, .rollback = true};
    md->dctx = dctx;
    md->n_vocab = th->n_vocab;
    md->n_batch = dp->n_batch_max;
    md->batch = malloc(sizeof *md->batch * (size_t)md->n_batch);
    md->live = malloc(sizeof(int32_t) * (size_t)tp->n_seq_max);
    md->cur = malloc(sizeof(int32_t) * (size_t)tp->n_seq_max);
    if (!md->batch || !md->live || !md->cur) {
        md_free(&md->base);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    *out = &md->base;
    return SPEX_OK;
}
