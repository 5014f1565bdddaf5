/*
 * draft_mtp.c — the target's MTP block as the drafter of the speculative loop (drafter.h;
 * targets.md §8.2).
 *
 * Instead of injecting features, every target forward is followed by the MTP catch-up: its
 * rows (token at p, the target's id-N tap of p-1) go through spex_mtp_feed, so the MTP cache
 * always holds exactly the target's positions; the tap of each sequence's last position is
 * carried to the next forward (zero at position 0). Drafting chains the head from the anchor
 * and the carried hidden. The MTP cache keeps no hidden states of earlier positions, so it can
 * follow the target back only to 0 or to where it is.
 *
 * Nothing is allocated after the constructor.
 */
#include "model/api.h"
#include "spec/drafter.h"
#include "spec/api.h"

#include <stdlib.h>
#include <string.h>

typedef struct mtp {
    spec_drafter base;
    spex_context *t;            /* borrowed */
    spex_mtp_context *mc;       /* borrowed */
    int32_t E, n_rows;
    float *h;                   /* [n_seq][E]: the carried hiddens                */
    float *m_h;                 /* [n_rows][E]: catch-up rows of this forward     */
    int32_t *m_tok, *m_pos, *m_seq;
    int32_t n_staged;
    spex_mtp_block *blocks;     /* [n_seq] */
} mtp;

static spex_status mtp_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                             uint64_t *n_batches, spex_error *err) {
    mtp *m = (mtp *)d;
    for (int32_t i = 0; i < n; i++)
        m->blocks[i] = (spex_mtp_block){.seq = reqs[i].seq, .anchor = reqs[i].anchor, .n_max = reqs[i].n_max,
                                        .h = m->h + (size_t)reqs[i].seq * (size_t)m->E};
    (*n_batches)++;
    return spex_mtp_draft(m->mc, m->blocks, n, reqs[0].p_min, out, err);
}

/* Stages the catch-up of rows [r0, r0 + n): row i pairs its token with the tap of the row
 * before (the carried hidden for i = 0), and the last row's tap is carried. */
static spex_status mtp_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                             bool idle, spex_error *err) {
    (void)idle;
    mtp *m = (mtp *)d;
    const float *taps = spex_taps(m->t);
    if (!taps) return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: the target context produced no taps");
    if (m->n_staged + n > m->n_rows)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: MTP catch-up of %d rows past %d", m->n_staged + n,
                              m->n_rows);
    const size_t E = (size_t)m->E;
    float *carried = m->h + (size_t)seq * E;
    for (int32_t i = 0; i < n; i++) {
        int32_t at = m->n_staged + i;
        m->m_tok[at] = toks[i];
        m->m_pos[at] = pos0 + i;
        m->m_seq[at] = seq;
        const float *h = i == 0 ? carried : taps + (size_t)(r0 + i - 1) * E;
        memcpy(m->m_h + (size_t)at * E, h, sizeof(float) * E);
    }
    memcpy(carried, taps + (size_t)(r0 + n - 1) * E, sizeof(float) * E);
    m->n_staged += n;
    return SPEX_OK;
}

static spex_status mtp_commit(spec_drafter *d, spex_error *err) {
    mtp *m = (mtp *)d;
    int32_t n = m->n_staged;
    m->n_staged = 0;
    return n > 0 ? spex_mtp_feed(m->mc, m->m_tok, m->m_pos, m->m_seq, m->m_h, n, err) : SPEX_OK;
}

static bool mtp_can_keep(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len) {
    (void)d, (void)seq;
    return n_keep == 0 || n_keep == len;
}

static spex_status mtp_keep(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err) {
    mtp *m = (mtp *)d;
    spex_status st = spex_mtp_seq_truncate(m->mc, seq, n_keep, err);
    if (n_keep == 0) memset(m->h + (size_t)seq * (size_t)m->E, 0, sizeof(float) * (size_t)m->E);
    return st;
}

static int32_t mtp_have(const spec_drafter *d, int32_t seq) { return spex_mtp_seq_len(((const mtp *)d)->mc, seq); }

static void mtp_seq_end(spec_drafter *d, int32_t seq) { spex_mtp_seq_truncate(((mtp *)d)->mc, seq, 0, NULL); }

static void mtp_free(spec_drafter *d) {
    mtp *m = (mtp *)d;
    if (!m) return;
    free(m->h);
    free(m->m_h);
    free(m->m_tok);
    free(m->m_pos);
    free(m->m_seq);
    free(m->blocks);
    free(m);
}

static const spec_drafter_ops MTP_OPS = {
    .name = "mtp", .draft = mtp_draft, .wrote = mtp_wrote, .commit = mtp_commit, .can_keep = mtp_can_keep,
    .keep = mtp_keep, .have = mtp_have, .seq_end = mtp_seq_end, .free = mtp_free,
};

spex_status spec_drafter_mtp(spex_context *t, spex_mtp_context *mc, spec_drafter **out, spex_error *err) {
    const spex_mtp_params *mp = spex_mtp_get_params(mc);
    const spex_context_params *tp = spex_context_get_params(t);
    const spex_model_hparams *thp = spex_model_get_hparams(spex_context_model(t));
    if (tp->n_taps != 1 || tp->tap_layers[0] != thp->n_layer)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: MTP drafting needs the target context's tap_layers = {%d} (its hidden "
                              "state), got %d taps",
                              thp->n_layer, tp->n_taps);
    if (mp->n_seq_max != tp->n_seq_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: MTP context has %d sequences, target %d",
                              mp->n_seq_max, tp->n_seq_max);
    if (mp->n_batch_max < tp->n_batch_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: MTP context batch %d is smaller than the target's %d (catch-up batches)",
                              mp->n_batch_max, tp->n_batch_max);
    mtp *m = calloc(1, sizeof *m);
    if (!m) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    m->base = (spec_drafter){.ops = &MTP_OPS, .n_max_default = 3, .n_max_limit = SPEX_DRAFT_MAX_N,
                             .n_ctx = mp->n_ctx_per_seq, .rollback = true};
    m->t = t;
    m->mc = mc;
    m->E = thp->n_embd;
    m->n_rows = tp->n_batch_max > tp->n_outputs_max ? tp->n_batch_max : tp->n_outputs_max;
    const size_t E = (size_t)m->E;
    m->h = calloc((size_t)tp->n_seq_max * E, sizeof(float));
    m->m_h = malloc(sizeof(float) * (size_t)m->n_rows * E);
    m->m_tok = malloc(sizeof(int32_t) * (size_t)m->n_rows);
    m->m_pos = malloc(sizeof(int32_t) * (size_t)m->n_rows);
    m->m_seq = malloc(sizeof(int32_t) * (size_t)m->n_rows);
    m->blocks = malloc(sizeof *m->blocks * (size_t)tp->n_seq_max);
    if (!m->h || !m->m_h || !m->m_tok || !m->m_pos || !m->m_seq || !m->blocks) {
        mtp_free(&m->base);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    *out = &m->base;
    return SPEX_OK;
}
