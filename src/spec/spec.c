/*
 * spec.c — the speculative decoding loop (include/spex.h, "Speculative decoding";
 * ../shared/docs/dflash2.md §15–§19): draft -> verify -> accept -> emit -> roll back.
 *
 * What it is: per step, one drafter batch with a block for every stepping sequence, the
 * selector walk of each block, one target batch with every sequence's verify rows
 * [anchor, d_1 .. d_n] (logits on every row, taps captured in the same pass), the acceptance
 * rule of the sequence's path (verify.c), truncation of the target cache to the accepted
 * prefix, and one injection of the accepted rows' features into the draft cache (§16: only
 * accepted rows are ever written, so the draft cache needs no trimming). With
 * spex_spec_params.draft_cut, a step of one sequence verifies only the prefix of its walked
 * draft that the cost-aware cut (cut.h) prices as worth it, and with spex_spec_params.guard
 * it drafts only while drafting steps measure more tokens per second than plain ones (guard.h).
 * What it is not: the drafter forward (src/model/dflash_*.c), the acceptance arithmetic
 * (verify.c), the sampling chain (src/sample), stop strings or detokenisation (callers).
 *
 * Paths (spex_spec_path). Greedy and sample-and-match both call spex_sampler_sample on each
 * verify row in order and accept while the sample equals the draft; every emitted token
 * therefore consumes exactly the sampler draws a target-only run would make for it, so those
 * paths reproduce target-only output token for token (greedy: always; sampled: for the same
 * seed). Rejection sampling (§15.4) draws its acceptance uniforms from a stream of its own and
 * the residual / bonus from the sampler's stream (§15.5); it matches target-only sampling in
 * distribution.
 *
 * Invariant A (§16) is checked at every step: the draft cache of a stepping sequence holds
 * exactly the positions its target cache holds, less the features still pending (below); a
 * mismatch is SPEX_ERR_INTERNAL.
 *
 * Deferred injection. A prompt's features, and those of a step where a sequence does not
 * draft (the server's adaptive draft length turned it off, or its budget left no room), wait
 * in a per-sequence buffer instead of being injected; they are injected in one batch right
 * before its next draft (or when the buffer is full: pend_cap rows). Drafting off then costs
 * only the taps, and a request that never drafts costs no drafter work at all.
 *
 * MTP drafter (spex_spec_init_mtp; targets.md §8.2). Instead of injecting features, every
 * target batch is followed by the MTP catch-up: its rows (token at p, the target's id-N tap
 * of p-1) go through spex_mtp_feed, so the MTP cache always holds exactly the target's
 * positions; the tap of each sequence's last position is carried to the next batch (zero at
 * position 0). Drafting chains the head from the anchor and the carried hidden.
 *
 * Recurrent targets (qwen35): rolling back m rejected drafts needs the state copies of the
 * target context's ring, so spex_spec_init requires n_rs_seq >= n_max.
 *
 * Nothing is allocated after spex_spec_init.
 */
#include "spec/cut.h"
#include "spec/guard.h"
#include "spec/spec_test.h"
#include "spec/verify.h"
#include "spex.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct spec_seq {
    bool active;
    spex_sampler *smp;          /* borrowed                                          */
    int32_t anchor;             /* last emitted token, at position spex_kv_seq_len  */
    spex_rng rng_draft;         /* sampled walk                                      */
    spex_rng rng_accept;        /* acceptance uniforms                               */
    spex_spec_path path;
    spex_spec_stats st;
    float *pend;                /* [pend_cap][feat_w] features not yet injected       */
    int32_t n_pend;             /* they belong to positions draft_len .. + n_pend - 1 */
    float *mtp_h;               /* MTP: [E] target tap N of position len - 1 (carried) */
    int32_t *hist;              /* n-gram drafting: the tokens at positions 0 .. n_hist - 1 */
    int32_t n_hist;             /* == the target cache's length; -1 when not known     */
} spec_seq;

/* Features of prompt tokens and of tokens verified without a draft wait here until the
 * sequence's next draft (or until pend_cap of them are waiting), then go into the draft cache
 * in one batch: a slot the server does not let draft pays no drafter work per token, and a
 * request that never drafts pays none at all. pend_cap: SPEC_PEND_BYTES over all sequences,
 * at least SPEC_PEND_MIN rows each, at most the context. */
#define SPEC_PEND_MIN 32
#define SPEC_PEND_BYTES ((size_t)64 << 20)

struct spex_spec {
    spex_context *t;            /* borrowed */
    spex_draft_context *dc;     /* borrowed, may be NULL */
    spex_mtp_context *mtp;      /* borrowed, may be NULL (never both) */
    spex_spec_params p;
    spex_spec_draft_fn fn;
    void *fn_user;
    int32_t n_seq, n_vocab, n_batch_max, n_out_max, n_ctx, feat_w;
    int32_t dc_ctx, dc_inject_max, dc_blocks_max;
    int32_t pend_cap;           /* pending feature rows per sequence               */
    spec_seq *seq;              /* [n_seq]                                 */
    spex_spec_stats total;
    spec_cut cut;               /* the draft cut's price and acceptance model (cut.h) */
    spec_guard guard;           /* the realized-rate guard of single-sequence steps (guard.h) */
    int test_break;             /* spec_test.h modes (tests only): broken rule, eager injection */
    spex_ngram_params ng;       /* n-gram drafting (spex_spec_set_ngram)               */
    int32_t *hist_all;          /* [n_seq][n_ctx] the sequences' tokens, with n-gram drafting */

    /* scratch, allocated at init */
    spex_batch_token *batch;    /* [n_batch_max]                           */
    spex_draft *drafts;         /* [n_seq]                                 */
    spex_draft_block *blocks;   /* [n_seq]                                 */
    int32_t *nd;                /* [n_seq] draft length per stepping seq   */
    int32_t *row0;              /* [n_seq] first verify row per seq        */
    spex_token_prob *dist;      /* [V]                                     */
    spex_token_prob *resid;     /* [V]                                     */
    float *feat;                /* [n_out_max][feat_w] accepted features   */
    float *pend_all;            /* [n_seq][pend_cap][feat_w]               */
    int32_t *pend_seq, *pend_pos; /* [dc_inject_max] flush_pending's own row ids: a flush may
                                   * happen while a step is filling inj_seq / inj_pos        */
    int32_t *inj_seq, *inj_pos; /* [n_out_max]                             */
    /* MTP: catch-up rows and the draft blocks of a step */
    int32_t E;
    float *mtp_h_all;           /* [n_seq][E] the carried hiddens          */
    float *m_h;                 /* [nb][E] catch-up hidden rows            */
    int32_t *m_tok, *m_pos, *m_seq; /* [nb]                                */
    spex_mtp_block *mblocks;    /* [n_seq]                                 */
    int32_t *mblock_of;         /* [n_seq] block index -> step index i     */
    spex_draft *mdrafts;        /* [n_seq]                                 */
};

const char *spex_spec_path_name(spex_spec_path p) {
    switch (p) {
    case SPEX_SPEC_PATH_GREEDY: return "greedy";
    case SPEX_SPEC_PATH_REJECTION: return "rejection";
    case SPEX_SPEC_PATH_SAMPLE_MATCH: return "sample-and-match";
    }
    return "?";
}

spex_spec_params spex_spec_default_params(void) {
    return (spex_spec_params){.n_max = 0, .n_min = 0, .p_min = 0.0f, .sampled_walk = true};
}

double spex_spec_stats_acceptance(const spex_spec_stats *st) {
    return st && st->n_drafted ? (double)st->n_accepted / (double)st->n_drafted : 0.0;
}

double spex_spec_stats_mean_len(const spex_spec_stats *st) {
    return st && st->n_steps ? 1.0 + (double)st->n_accepted / (double)st->n_steps : 0.0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void spec_log(const spex_spec *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void spec_log(const spex_spec *s, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->p.log) s->p.log(s->p.log_user, line);
    else fprintf(stderr, "%s\n", line);
}

/* ======================================================================== */
/* Init / free                                                               */
/* ======================================================================== */

static spex_status spec_init(spex_context *tctx, spex_draft_context *dc, spex_mtp_context *mtp,
                             const spex_spec_params *params, spex_spec **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL out");
    *out = NULL;
    if (!tctx) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL target context");
    spex_spec_params p = params ? *params : spex_spec_default_params();
    const spex_context_params *tp = spex_context_get_params(tctx);
    const spex_model_hparams *thp = spex_model_get_hparams(spex_context_model(tctx));

    if (p.n_max < 0 || p.n_min < 0 || !(p.p_min >= 0.0f && p.p_min <= 1.0f))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: n_max %d, n_min %d must be >= 0 and p_min %g in [0, 1]", p.n_max, p.n_min,
                              (double)p.p_min);
    int32_t feat_w = 0, dc_ctx = 0, dc_inject = 0, dc_blocks = 0;
    int32_t n_draft_max = 0;
    if (dc) {
        const spex_drafter *d = spex_draft_context_drafter(dc);
        const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
        const spex_draft_context_params *dp = spex_draft_context_get_params(dc);
        if (spex_drafter_target(d) != spex_context_model(tctx))
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
        n_draft_max = dh->block_size - 1;
        if (n_draft_max > SPEX_DRAFT_MAX_N) n_draft_max = SPEX_DRAFT_MAX_N;
        if (p.n_max == 0) p.n_max = n_draft_max;
        if (p.n_max > n_draft_max) {
            spec_log(&(spex_spec){.p = p},
                     "warning: requested draft size %d exceeds the trained block size %d (at most %d drafted "
                     "tokens): clamping to %d",
                     p.n_max, dh->block_size, n_draft_max, n_draft_max);
            p.n_max = n_draft_max;
        }
        feat_w = dh->n_taps * dh->n_embd;
        dc_ctx = dp->n_ctx_per_seq;
        dc_inject = dp->n_inject_max;
        dc_blocks = dp->n_blocks_max;
    } else if (mtp) {
        const spex_mtp_params *mp = spex_mtp_get_params(mtp);
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
        if (p.n_max == 0) p.n_max = 3;
        if (p.n_max > SPEX_DRAFT_MAX_N) p.n_max = SPEX_DRAFT_MAX_N;
        dc_ctx = mp->n_ctx_per_seq;
    } else {
        /* Without a drafter only a draft function can propose (spex_spec_set_draft_fn). */
        if (p.n_max == 0) p.n_max = 7;
        if (p.n_max > SPEX_DRAFT_MAX_N) p.n_max = SPEX_DRAFT_MAX_N;
    }
    if (p.n_min > p.n_max) p.n_min = p.n_max;
    if (thp->n_recurrent > 0 && (dc || mtp) && tp->n_rs_seq < p.n_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: the target has recurrent layers: create its context with n_rs_seq >= n_max "
                              "(%d) so that rejected drafts can be rolled back, got n_rs_seq %d",
                              p.n_max, tp->n_rs_seq);

    spex_spec *s = calloc(1, sizeof *s);
    if (!s) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    spec_cut_init(&s->cut);
    s->t = tctx;
    s->dc = dc;
    s->mtp = mtp;
    s->E = thp->n_embd;
    s->p = p;
    s->n_seq = tp->n_seq_max;
    s->n_vocab = thp->n_vocab;
    s->n_batch_max = tp->n_batch_max;
    s->n_out_max = tp->n_outputs_max;
    s->n_ctx = tp->n_ctx_per_seq;
    s->feat_w = feat_w;
    s->dc_ctx = dc_ctx;
    s->dc_inject_max = dc_inject;
    s->dc_blocks_max = dc_blocks;
    int32_t nb = s->n_batch_max > s->n_out_max ? s->n_batch_max : s->n_out_max;
    s->seq = calloc((size_t)s->n_seq, sizeof *s->seq);
    s->batch = calloc((size_t)nb, sizeof *s->batch);
    s->drafts = calloc((size_t)s->n_seq, sizeof *s->drafts);
    s->blocks = calloc((size_t)s->n_seq, sizeof *s->blocks);
    s->nd = calloc((size_t)s->n_seq, sizeof *s->nd);
    s->row0 = calloc((size_t)s->n_seq, sizeof *s->row0);
    s->dist = malloc(sizeof *s->dist * (size_t)s->n_vocab);
    s->resid = malloc(sizeof *s->resid * (size_t)s->n_vocab);
    s->inj_seq = malloc(sizeof(int32_t) * (size_t)nb);
    s->inj_pos = malloc(sizeof(int32_t) * (size_t)nb);
    s->feat = feat_w ? malloc(sizeof(float) * (size_t)nb * (size_t)feat_w) : NULL;
    if (feat_w) {
        size_t cap = SPEC_PEND_BYTES / ((size_t)s->n_seq * (size_t)feat_w * sizeof(float));
        if (cap < SPEC_PEND_MIN) cap = SPEC_PEND_MIN;
        if (cap > (size_t)s->n_ctx) cap = (size_t)s->n_ctx;
        s->pend_cap = (int32_t)cap;
    }
    s->pend_all = feat_w ? malloc(sizeof(float) * (size_t)s->n_seq * (size_t)s->pend_cap * (size_t)feat_w) : NULL;
    s->pend_seq = malloc(sizeof(int32_t) * (size_t)(dc_inject > 0 ? dc_inject : 1));
    s->pend_pos = malloc(sizeof(int32_t) * (size_t)(dc_inject > 0 ? dc_inject : 1));
    if (!s->seq || !s->batch || !s->drafts || !s->blocks || !s->nd || !s->row0 || !s->dist || !s->resid ||
        !s->inj_seq || !s->inj_pos || !s->pend_seq || !s->pend_pos || (feat_w && (!s->feat || !s->pend_all))) {
        spex_spec_free(s);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    if (feat_w)
        for (int32_t i = 0; i < s->n_seq; i++)
            s->seq[i].pend = s->pend_all + (size_t)i * (size_t)s->pend_cap * (size_t)feat_w;
    if (mtp) {
        const size_t E = (size_t)s->E;
        s->mtp_h_all = calloc((size_t)s->n_seq * E, sizeof(float));
        s->m_h = malloc(sizeof(float) * (size_t)nb * E);
        s->m_tok = malloc(sizeof(int32_t) * (size_t)nb);
        s->m_pos = malloc(sizeof(int32_t) * (size_t)nb);
        s->m_seq = malloc(sizeof(int32_t) * (size_t)nb);
        s->mblocks = malloc(sizeof *s->mblocks * (size_t)s->n_seq);
        s->mblock_of = malloc(sizeof(int32_t) * (size_t)s->n_seq);
        s->mdrafts = malloc(sizeof *s->mdrafts * (size_t)s->n_seq);
        if (!s->mtp_h_all || !s->m_h || !s->m_tok || !s->m_pos || !s->m_seq || !s->mblocks || !s->mblock_of ||
            !s->mdrafts) {
            spex_spec_free(s);
            return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
        }
        for (int32_t i = 0; i < s->n_seq; i++) s->seq[i].mtp_h = s->mtp_h_all + (size_t)i * E;
    }
    *out = s;
    return SPEX_OK;
}

spex_status spex_spec_init(spex_context *tctx, spex_draft_context *dc, const spex_spec_params *params,
                           spex_spec **out, spex_error *err) {
    return spec_init(tctx, dc, NULL, params, out, err);
}

spex_status spex_spec_init_mtp(spex_context *tctx, spex_mtp_context *mc, const spex_spec_params *params,
                               spex_spec **out, spex_error *err) {
    if (!mc) {
        if (out) *out = NULL;
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL MTP context");
    }
    return spec_init(tctx, NULL, mc, params, out, err);
}

void spex_spec_free(spex_spec *s) {
    if (!s) return;
    free(s->hist_all);
    free(s->mtp_h_all);
    free(s->m_h);
    free(s->m_tok);
    free(s->m_pos);
    free(s->m_seq);
    free(s->mblocks);
    free(s->mblock_of);
    free(s->mdrafts);
    free(s->seq);
    free(s->batch);
    free(s->drafts);
    free(s->blocks);
    free(s->nd);
    free(s->row0);
    free(s->dist);
    free(s->resid);
    free(s->feat);
    free(s->pend_all);
    free(s->pend_seq);
    free(s->pend_pos);
    free(s->inj_seq);
    free(s->inj_pos);
    free(s);
}

const spex_spec_params *spex_spec_get_params(const spex_spec *s) { return s ? &s->p : NULL; }

int32_t spex_spec_test_pend_cap(spex_spec *s, int32_t cap) {
    if (s && cap >= 1 && cap < s->pend_cap) s->pend_cap = cap;
    return s ? s->pend_cap : 0;
}

void spex_spec_test_break(spex_spec *s, int mode) {
    if (s) s->test_break = mode;
}

void spex_spec_set_guard(spex_spec *s, bool on) {
    if (s) s->p.guard = on;
}

void spex_spec_set_draft_cut(spex_spec *s, bool on) {
    if (s) s->p.draft_cut = on;
}

void spex_spec_set_draft_fn(spex_spec *s, spex_spec_draft_fn fn, void *user) {
    if (!s) return;
    s->fn = fn;
    s->fn_user = user;
}

static bool seq_ok(const spex_spec *s, int32_t seq) { return s && seq >= 0 && seq < s->n_seq; }

spex_spec_path spex_spec_seq_path(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? s->seq[seq].path : SPEX_SPEC_PATH_GREEDY;
}

const spex_spec_stats *spex_spec_seq_stats(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? &s->seq[seq].st : NULL;
}

const spex_spec_stats *spex_spec_total_stats(const spex_spec *s) { return s ? &s->total : NULL; }

/* The token history of n-gram drafting follows the target cache: cut to what a feed or rewind
 * keeps, extended by every token a forward writes. A gap (a cut past what it holds) makes it
 * unknown until the sequence starts over; n-gram drafting then drafts nothing, which is
 * always lossless. */
static void hist_cut(spec_seq *q, int32_t n) { q->n_hist = q->n_hist >= n ? n : -1; }

static void hist_push(const spex_spec *s, spec_seq *q, const int32_t *toks, int32_t n) {
    if (!q->hist || q->n_hist < 0) return;
    if (q->n_hist + n > s->n_ctx) {
        q->n_hist = -1;
        return;
    }
    memcpy(q->hist + q->n_hist, toks, sizeof(int32_t) * (size_t)n);
    q->n_hist += n;
}

int32_t spex_spec_seq_len(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? spex_kv_seq_len(s->t, seq) : -1;
}

int32_t spex_spec_seq_pending(const spex_spec *s, int32_t seq) { return seq_ok(s, seq) ? s->seq[seq].n_pend : -1; }

void spex_spec_seq_end(spex_spec *s, int32_t seq) {
    if (!seq_ok(s, seq)) return;
    s->seq[seq].active = false;
    s->seq[seq].smp = NULL;
    s->seq[seq].n_pend = 0;
    s->seq[seq].n_hist = 0;
    spex_kv_seq_clear(s->t, seq, NULL);
    if (s->dc) spex_draft_kv_seq_clear(s->dc, seq, NULL);
    if (s->mtp) spex_mtp_seq_truncate(s->mtp, seq, 0, NULL);
}

/* MTP catch-up of target batch rows [r0, r0 + n) of sequence seq at positions pos0 ..: row i
 * pairs its token with the tap of the row before (the carried hidden for i = 0), and the
 * last row's tap is carried. Rows are staged in m_*; `at` is where this sequence's rows
 * start there, the return value where they end (the caller feeds all staged rows at once). */
static int32_t mtp_stage(spex_spec *s, int32_t at, int32_t seq, const int32_t *tokens, int32_t r0, int32_t n,
                         int32_t pos0) {
    const float *taps = spex_taps(s->t);
    const size_t E = (size_t)s->E;
    spec_seq *q = &s->seq[seq];
    for (int32_t i = 0; i < n; i++) {
        s->m_tok[at + i] = tokens[i];
        s->m_pos[at + i] = pos0 + i;
        s->m_seq[at + i] = seq;
        const float *h = i == 0 ? q->mtp_h : taps + (size_t)(r0 + i - 1) * E;
        memcpy(s->m_h + (size_t)(at + i) * E, h, sizeof(float) * E);
    }
    memcpy(q->mtp_h, taps + (size_t)(r0 + n - 1) * E, sizeof(float) * E);
    return at + n;
}

/* ======================================================================== */
/* Prompt                                                                    */
/* ======================================================================== */

/* Injects the taps of the last target batch, rows [r0, r0 + n) (all of sequence seq at
 * positions pos0 ..), in chunks the draft context accepts. */
static spex_status inject_rows(spex_spec *s, int32_t seq, int32_t r0, int32_t n, int32_t pos0, spex_error *err) {
    const float *taps = spex_taps(s->t);
    if (!taps) return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: the target context produced no taps");
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < s->dc_inject_max ? n - done : s->dc_inject_max;
        for (int32_t i = 0; i < k; i++) {
            s->inj_seq[i] = seq;
            s->inj_pos[i] = pos0 + done + i;
        }
        spex_status st = spex_draft_inject(s->dc, taps + (size_t)(r0 + done) * (size_t)s->feat_w, s->feat_w,
                                           s->inj_seq, s->inj_pos, k, err);
        if (st != SPEX_OK) return st;
        done += k;
    }
    return SPEX_OK;
}

/* Injects sequence seq's pending features (positions draft_len ..) in one call. */
static spex_status flush_pending(spex_spec *s, int32_t seq, spex_error *err) {
    spec_seq *q = &s->seq[seq];
    if (!s->dc || q->n_pend == 0) return SPEX_OK;
    double t0 = now_s();
    int32_t pos0 = spex_draft_kv_seq_len(s->dc, seq);
    for (int32_t done = 0; done < q->n_pend;) {
        int32_t k = q->n_pend - done < s->dc_inject_max ? q->n_pend - done : s->dc_inject_max;
        for (int32_t i = 0; i < k; i++) {
            s->pend_seq[i] = seq;
            s->pend_pos[i] = pos0 + done + i;
        }
        spex_status st = spex_draft_inject(s->dc, q->pend + (size_t)done * (size_t)s->feat_w, s->feat_w, s->pend_seq,
                                           s->pend_pos, k, err);
        if (st != SPEX_OK) return st;
        done += k;
    }
    q->n_pend = 0;
    double dt = now_s() - t0;   /* booked apart so the server can tell a backlog from a step's own cost */
    s->total.t_flush += dt;
    q->st.t_flush += dt;
    return SPEX_OK;
}

/* Both caches of seq (pending features included) back to n_keep positions; the draft cache
 * plus what stays pending then equals the target's. n_keep must not exceed the target
 * length. */
static spex_status settle(spex_spec *s, int32_t seq, int32_t n_keep, spex_error *err) {
    spec_seq *q = &s->seq[seq];
    const int32_t len = spex_kv_seq_len(s->t, seq);
    if (s->mtp && n_keep != 0 && n_keep != len)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "spec: sequence %d: the MTP drafter cannot keep %d of %d positions (the target hidden "
                              "state of position %d is not kept); start it from 0",
                              seq, n_keep, len, n_keep - 1);
    /* rewind = truncate, or (recurrent targets) checkpoint + replay when the ring no longer
     * holds n_keep - 1 */
    spex_status st = spex_kv_seq_rewind(s->t, seq, n_keep, NULL, err);
    if (st == SPEX_OK && s->mtp) {
        st = spex_mtp_seq_truncate(s->mtp, seq, n_keep, err);
        if (n_keep == 0) memset(q->mtp_h, 0, sizeof(float) * (size_t)s->E);
    }
    if (st != SPEX_OK || !s->dc) return st;
    int32_t dl = spex_draft_kv_seq_len(s->dc, seq);
    if (n_keep <= dl) {
        q->n_pend = 0;
        return spex_draft_kv_seq_truncate(s->dc, seq, n_keep, err);
    }
    if (n_keep - dl > q->n_pend)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: draft cache %d + pending %d < %d", seq, dl,
                              q->n_pend, n_keep);
    q->n_pend = n_keep - dl;   /* still pending: injected before the next draft */
    return SPEX_OK;
}

static bool has_penalties(const spex_sampler_params *sp) {
    return sp->repeat_last_n > 0 &&
           (sp->repeat_penalty != 1.0f || sp->frequency_penalty != 0.0f || sp->presence_penalty != 0.0f);
}

/* Binds a sampler to a sequence: its verification path, and draft and acceptance streams
 * from the request's seed, derived without advancing the sampler's own stream (which the
 * residual / bonus draws and sample-and-match keep using, §15.5). */
static void bind_sampler(spex_spec *s, spec_seq *q, spex_sampler *sampler) {
    spex_rng probe = *spex_sampler_rng(sampler);
    uint64_t base = spex_rng_next(&probe);
    spex_rng_seed_stream(&q->rng_draft, base, 1);
    spex_rng_seed_stream(&q->rng_accept, base, 2);

    const spex_sampler_params *sp = spex_sampler_get_params(sampler);
    bool dflash2 = s->dc && spex_drafter_get_hparams(spex_draft_context_drafter(s->dc))->variant == SPEX_DFLASH2;
    if (sp->temp <= 0.0f) q->path = SPEX_SPEC_PATH_GREEDY;
    else if (!has_penalties(sp) && s->p.sampled_walk && (dflash2 || s->fn)) q->path = SPEX_SPEC_PATH_REJECTION;
    else q->path = SPEX_SPEC_PATH_SAMPLE_MATCH;
    q->smp = sampler;
}

spex_status spex_spec_seq_rewind(spex_spec *s, int32_t seq, int32_t n_keep, int32_t anchor, spex_sampler *sampler,
                                 spex_error *err) {
    if (!seq_ok(s, seq) || !s->seq[seq].active)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: rewind: sequence %d is not begun", seq);
    int32_t len = spex_kv_seq_len(s->t, seq);
    if (n_keep < 1 || n_keep > len)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: rewind: keep %d of %d positions", n_keep, len);
    if (anchor < 0 || anchor >= s->n_vocab)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: rewind: anchor %d outside the vocabulary", anchor);
    if (sampler && spex_sampler_n_vocab(sampler) != s->n_vocab)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sampler vocabulary %d != model vocabulary %d",
                              spex_sampler_n_vocab(sampler), s->n_vocab);
    spex_status st = settle(s, seq, n_keep, err);
    if (st != SPEX_OK) return st;
    spec_seq *q = &s->seq[seq];
    hist_cut(q, n_keep);
    bind_sampler(s, q, sampler ? sampler : q->smp);
    q->anchor = anchor;
    return SPEX_OK;
}

/* Appends k feature rows to seq's pending ones (the caller checked the capacity). */
static void pend_append(spex_spec *s, spec_seq *q, const float *rows, int32_t k) {
    memcpy(q->pend + (size_t)q->n_pend * (size_t)s->feat_w, rows, sizeof(float) * (size_t)k * (size_t)s->feat_w);
    q->n_pend += k;
}

/* The features of the target batch's rows [0, k) (seq, positions pos0 ..): appended to the
 * pending ones while they fit (the draft cache plus the pending rows then reach pos0 + k),
 * else the pending ones and these go into the draft cache now. */
static spex_status defer_or_inject(spex_spec *s, int32_t seq, int32_t k, int32_t pos0, spex_error *err) {
    spec_seq *q = &s->seq[seq];
    if (spex_draft_kv_seq_len(s->dc, seq) + q->n_pend != pos0)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: draft cache %d + pending %d != position %d",
                              seq, spex_draft_kv_seq_len(s->dc, seq), q->n_pend, pos0);
    if (q->n_pend + k <= s->pend_cap && s->test_break != SPEX_SPEC_TEST_NO_DEFER) {
        if (!spex_taps(s->t)) return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: the target context produced no taps");
        pend_append(s, q, spex_taps(s->t), k);
        return SPEX_OK;
    }
    spex_status st = flush_pending(s, seq, err);
    return st == SPEX_OK ? inject_rows(s, seq, 0, k, pos0, err) : st;
}

/* Runs tokens[0 .. n) of seq at positions pos0 .. through the target in batches, the last
 * one with logits when `logits_last`, deferring or injecting every batch's features. */
static spex_status run_tokens(spex_spec *s, int32_t seq, int32_t pos0, const int32_t *tokens, int32_t n,
                              bool logits_last, spex_error *err) {
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < s->n_batch_max ? n - done : s->n_batch_max;
        for (int32_t i = 0; i < k; i++)
            s->batch[i] = (spex_batch_token){.token = tokens[done + i], .pos = pos0 + done + i, .seq = seq,
                                             .logits = logits_last && done + i == n - 1};
        spex_batch b = {.tokens = s->batch, .n_tokens = k};
        spex_status st = spex_forward(s->t, &b, err);
        if (st == SPEX_OK && s->dc) st = defer_or_inject(s, seq, k, pos0 + done, err);
        if (st == SPEX_OK && s->mtp) {
            int32_t nm = mtp_stage(s, 0, seq, tokens + done, 0, k, pos0 + done);
            st = spex_mtp_feed(s->mtp, s->m_tok, s->m_pos, s->m_seq, s->m_h, nm, err);
        }
        if (st != SPEX_OK) return st;
        done += k;
    }
    return SPEX_OK;
}

bool spex_spec_seq_can_keep(const spex_spec *s, int32_t seq, int32_t n_keep) {
    if (!seq_ok(s, seq)) return false;
    const int32_t len = spex_kv_seq_len(s->t, seq);
    if (s->mtp && n_keep != 0 && n_keep != len) return false;
    return n_keep >= 0 && n_keep <= len;   /* recurrent targets: by rewind (checkpoint + replay) */
}

static int32_t ctx_limit(const spex_spec *s) { return s->dc && s->dc_ctx < s->n_ctx ? s->dc_ctx : s->n_ctx; }

spex_status spex_spec_seq_feed(spex_spec *s, int32_t seq, int32_t n_keep, const int32_t *tokens, int32_t n,
                               spex_error *err) {
    if (!seq_ok(s, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sequence %d outside 0 .. %d", seq,
                              s ? s->n_seq - 1 : -1);
    int32_t have = spex_kv_seq_len(s->t, seq);
    if (s->dc && spex_draft_kv_seq_len(s->dc, seq) + s->seq[seq].n_pend < have)
        have = spex_draft_kv_seq_len(s->dc, seq) + s->seq[seq].n_pend;
    if (n_keep < 0 || n_keep > have || n < 0 || (n > 0 && !tokens))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: feed: keep %d of %d cached positions, %d tokens",
                              n_keep, have, n);
    /* One position must stay free for the prompt's last token and one for the first anchor. */
    if (n_keep + n + 1 >= ctx_limit(s))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: prompt of %d tokens does not fit a context of %d",
                              n_keep + n + 1, ctx_limit(s));
    s->seq[seq].active = false;
    s->seq[seq].smp = NULL;
    spex_status st = settle(s, seq, n_keep, err);
    hist_cut(&s->seq[seq], n_keep);
    if (st == SPEX_OK) st = run_tokens(s, seq, n_keep, tokens, n, false, err);
    if (st == SPEX_OK) hist_push(s, &s->seq[seq], tokens, n);
    /* recurrent targets: a checkpoint at the prompt's end, for the next request's prefix */
    if (st == SPEX_OK && n > 0) st = spex_kv_seq_checkpoint(s->t, seq, err);
    if (st != SPEX_OK) spex_spec_seq_end(s, seq);
    return st;
}

spex_status spex_spec_seq_start(spex_spec *s, int32_t seq, int32_t last, spex_sampler *sampler, int32_t *first,
                                spex_error *err) {
    if (!seq_ok(s, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sequence %d outside 0 .. %d", seq,
                              s ? s->n_seq - 1 : -1);
    if (!sampler || !first)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: start: NULL sampler or out");
    if (spex_sampler_n_vocab(sampler) != s->n_vocab)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sampler vocabulary %d != model vocabulary %d",
                              spex_sampler_n_vocab(sampler), s->n_vocab);
    int32_t pos = spex_kv_seq_len(s->t, seq);
    if (s->dc && spex_draft_kv_seq_len(s->dc, seq) + s->seq[seq].n_pend != pos)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: draft cache %d positions + %d pending, target %d",
                              seq, spex_draft_kv_seq_len(s->dc, seq), s->seq[seq].n_pend, pos);
    if (s->mtp && spex_mtp_seq_len(s->mtp, seq) != pos)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: MTP cache %d positions, target %d", seq,
                              spex_mtp_seq_len(s->mtp, seq), pos);
    if (pos + 2 > ctx_limit(s))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: prompt of %d tokens does not fit a context of %d", pos + 2,
                              ctx_limit(s));
    spec_seq *q = &s->seq[seq];
    q->active = false;
    memset(&q->st, 0, sizeof q->st);
    double t0 = now_s();
    int32_t tok;
    spex_status st = run_tokens(s, seq, pos, &last, 1, true, err);
    if (st == SPEX_OK) hist_push(s, q, &last, 1);
    if (st == SPEX_OK) st = spex_sampler_sample(sampler, spex_logits(s->t, 0), &tok, err);
    if (st == SPEX_OK) st = spex_sampler_accept(sampler, tok);
    if (st != SPEX_OK) {
        spex_spec_seq_end(s, seq);
        return st;
    }
    bind_sampler(s, q, sampler);
    q->anchor = tok;
    q->active = true;
    q->st.t_other += now_s() - t0;
    *first = tok;
    return SPEX_OK;
}

spex_status spex_spec_seq_begin(spex_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                                spex_sampler *sampler, int32_t *first, spex_error *err) {
    if (!seq_ok(s, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sequence %d outside 0 .. %d", seq,
                              s ? s->n_seq - 1 : -1);
    if (!prompt || n_prompt < 1 || !sampler || !first)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: begin: empty prompt or NULL sampler/out");
    if (spex_sampler_n_vocab(sampler) != s->n_vocab)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sampler vocabulary %d != model vocabulary %d",
                              spex_sampler_n_vocab(sampler), s->n_vocab);
    spex_status st = spex_spec_seq_feed(s, seq, 0, prompt, n_prompt - 1, err);
    if (st == SPEX_OK) st = spex_spec_seq_start(s, seq, prompt[n_prompt - 1], sampler, first, err);
    return st;
}

/* ======================================================================== */
/* Step                                                                      */
/* ======================================================================== */

static void stats_add(spex_spec_stats *st, int32_t n, int32_t m, int32_t emitted) {
    st->n_steps++;
    st->n_drafted += (uint64_t)n;
    st->n_accepted += (uint64_t)m;
    st->n_emitted += (uint64_t)emitted;
    for (int32_t p = 0; p < n; p++) st->drafted_at[p]++;
    for (int32_t p = 0; p < m; p++) st->accepted_at[p]++;
}

/* Accepts sequence i's draft against its verify rows; fills out and returns m. */
static spex_status accept_seq(spex_spec *s, int32_t seq, const spex_draft *d, int32_t n, int32_t row0,
                              spex_spec_out *out, int32_t *m_out, spex_error *err) {
    spec_seq *q = &s->seq[seq];
    int32_t m = 0, t = -1;
    spex_status st = SPEX_OK;
    bool rejection = q->path == SPEX_SPEC_PATH_REJECTION && d->has_q;
    for (int32_t i = 1; i <= n; i++) {
        const float *row = spex_logits_of_token(s->t, row0 + i - 1);
        int32_t di = d->ids[i - 1];
        if (s->test_break == SPEX_SPEC_TEST_ACCEPT_ALWAYS) {
            m++;
            out->tokens[out->n++] = di;
            if ((st = spex_sampler_accept(q->smp, di))) return st;
            continue;
        }
        if (rejection) {
            int32_t np = 0;
            if ((st = spex_sampler_dist(q->smp, row, s->dist, s->n_vocab, &np, err))) return st;
            float u = spex_rng_uniform(&q->rng_accept);
            if (spex_verify_accept(s->dist, np, di, d->cand[i - 1], d->q[i - 1], d->n_cand, u)) {
                m++;
                out->tokens[out->n++] = di;
                if ((st = spex_sampler_accept(q->smp, di))) return st;
                continue;
            }
            t = spex_verify_residual(s->dist, np, d->cand[i - 1], d->q[i - 1], d->n_cand,
                                     spex_rng_uniform_f64(spex_sampler_rng(q->smp)), s->resid);
            break;
        }
        /* Greedy and sample-and-match: the sample a target-only run would draw here. */
        int32_t ti;
        if ((st = spex_sampler_sample(q->smp, row, &ti, err))) return st;
        if (ti == di) {
            m++;
            out->tokens[out->n++] = di;
            if ((st = spex_sampler_accept(q->smp, di))) return st;
            continue;
        }
        t = ti;
        break;
    }
    if (t < 0) { /* all accepted: the bonus from row n */
        if ((st = spex_sampler_sample(q->smp, spex_logits_of_token(s->t, row0 + n), &t, err))) return st;
    }
    if (t < 0 || t >= s->n_vocab)
        return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: no token to emit", seq);
    out->tokens[out->n++] = t;
    if ((st = spex_sampler_accept(q->smp, t))) return st;
    *m_out = m;
    return SPEX_OK;
}

spex_status spex_spec_step(spex_spec *s, const int32_t *seqs, int32_t n_seqs, const int32_t *max_emit,
                           spex_spec_out *out, spex_error *err) {
    if (!s || !seqs || !out || n_seqs < 1 || n_seqs > s->n_seq)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: step: bad arguments (%d sequences)", n_seqs);
    double t0 = now_s();
    /* Validate everything before any cache changes. */
    int32_t rows_left = s->n_batch_max < s->n_out_max ? s->n_batch_max : s->n_out_max;
    if (rows_left < n_seqs)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: %d sequences do not fit a verify batch of %d rows",
                              n_seqs, rows_left);
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i];
        if (!seq_ok(s, sq) || !s->seq[sq].active)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: step: sequence %d is not begun", sq);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j] == sq) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: step: sequence %d twice", sq);
        if (max_emit && max_emit[i] < 1)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: step: max_emit[%d] = %d < 1", i, max_emit[i]);
        int32_t P = spex_kv_seq_len(s->t, sq);
        if (P + 1 > s->n_ctx)
            return spex_error_set(err, SPEX_ERR_RANGE, "spec: sequence %d: context full (%d positions)", sq, s->n_ctx);
        if (s->mtp && spex_mtp_seq_len(s->mtp, sq) != P)
            return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: sequence %d: MTP cache holds %d positions, target %d",
                                  sq, spex_mtp_seq_len(s->mtp, sq), P);
        if (s->dc && spex_draft_kv_seq_len(s->dc, sq) + s->seq[sq].n_pend != P)
            return spex_error_set(err, SPEX_ERR_INTERNAL,
                                  "spec: sequence %d: draft cache holds %d positions (+%d pending), target %d "
                                  "(invariant A)",
                                  sq, spex_draft_kv_seq_len(s->dc, sq), s->seq[sq].n_pend, P);
    }

    /* The guard judges steps of one sequence, as the draft cut does: a step's tokens against
     * its time, which other sequences' rows would blur. */
    const bool can_draft = s->dc || s->mtp || s->fn;
    const bool guarded = s->p.guard && n_seqs == 1 && can_draft;
    bool plain = false;
    if (guarded) {
        double f, v0, v1, est = 0; /* a plain step's rate: 1 / the cut's price of a one-row verify */
        if (s->p.draft_cut && spec_cut_price(&s->cut, &f, &v0, &v1) && v0 + v1 > 0) est = 1.0 / (v0 + v1);
        plain = spec_guard_plain(&s->guard, est);
        if (plain) s->total.n_guard_plain++;
    }
    const double flush0 = s->total.t_flush;

    /* Draft lengths: n_max (0 in a step the guard keeps plain), the emit budget, the context
     * space, and the verify batch (each remaining sequence keeps at least its anchor row). */
    int32_t n_blocks = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i];
        int32_t P = spex_kv_seq_len(s->t, sq);
        int32_t n = can_draft && !plain ? s->p.n_max : 0;
        if (max_emit && max_emit[i] - 1 < n) n = max_emit[i] - 1;
        if (s->n_ctx - P - 1 < n) n = s->n_ctx - P - 1;
        if (s->dc && s->dc_ctx - P - 1 < n) n = s->dc_ctx - P - 1;
        int32_t share = rows_left - (n_seqs - i - 1) - 1;
        if (share < n) n = share;
        if (n < 0) n = 0;
        s->nd[i] = n;
        s->drafts[i].n = 0;
        s->drafts[i].has_q = false;
        if (n > 0 && !s->fn && s->dc && n_blocks < s->dc_blocks_max)
            s->blocks[n_blocks++] = (spex_draft_block){.seq = sq, .anchor = s->seq[sq].anchor, .n = n};
        else if (n > 0 && !s->fn && s->mtp) {
            s->mblock_of[n_blocks] = i;
            s->mblocks[n_blocks++] =
                (spex_mtp_block){.seq = sq, .anchor = s->seq[sq].anchor, .n_max = n, .h = s->seq[sq].mtp_h};
        } else if (!s->fn) s->nd[i] = 0;
        rows_left -= s->nd[i] + 1;
    }

    /* Draft: sequences about to draft first catch their draft cache up. */
    double t1 = now_s();
    spex_status st = SPEX_OK;
    for (int32_t i = 0; i < n_seqs && st == SPEX_OK; i++)
        if (s->nd[i] > 0) st = flush_pending(s, seqs[i], err);
    if (s->fn) {
        for (int32_t i = 0; i < n_seqs && st == SPEX_OK; i++)
            if (s->nd[i] > 0) {
                int32_t sq = seqs[i];
                st = s->fn(s->fn_user, sq, s->seq[sq].anchor, spex_kv_seq_len(s->t, sq), s->nd[i], &s->drafts[i],
                           err);
                if (st == SPEX_OK && (s->drafts[i].n < 0 || s->drafts[i].n > s->nd[i]))
                    st = spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: draft function returned %d tokens (max %d)",
                                        s->drafts[i].n, s->nd[i]);
            }
    } else if (n_blocks > 0 && s->mtp) {
        st = spex_mtp_draft(s->mtp, s->mblocks, n_blocks, s->p.p_min, s->mdrafts, err);
        s->total.n_draft_batches++;
        for (int32_t b = 0; b < n_blocks && st == SPEX_OK; b++) s->drafts[s->mblock_of[b]] = s->mdrafts[b];
    } else if (n_blocks > 0) {
        st = spex_draft_forward(s->dc, s->blocks, n_blocks, err);
        s->total.n_draft_batches++;
        for (int32_t i = 0, b = 0; i < n_seqs && st == SPEX_OK; i++) {
            if (s->nd[i] == 0) continue;
            spec_seq *q = &s->seq[seqs[i]];
            float temp = q->path == SPEX_SPEC_PATH_REJECTION ? spex_sampler_get_params(q->smp)->temp : 0.0f;
            st = spex_draft_walk(s->dc, b++, temp, s->p.p_min, &q->rng_draft, &s->drafts[i], err);
        }
    }
    if (st != SPEX_OK) return st;
    /* The draft cut (cut.h) prices a step of one sequence: its rule compares that step's
     * tokens with its time, which other sequences' rows would blur. Draft functions take part
     * through the conf they fill (spex_spec_params.draft_cut); MTP drafts carry the head's
     * top probability, and verify by sample-and-match at T > 0, so any cut is lossless there. */
    const bool cut = s->p.draft_cut && n_seqs == 1 && s->drafts[0].n > 0;
    for (int32_t i = 0; i < n_seqs; i++) out[i].n_cut = 0;
    if (cut) {
        spex_draft *d = &s->drafts[0];
        const int32_t n0 = d->n;
        int32_t n1 = spec_cut_choose(&s->cut, d->conf, n0);
        if (s->test_break == SPEX_SPEC_TEST_CUT_PEEK && d->has_q) {
            int32_t mode = 0;
            for (int32_t k = 1; k < d->n_cand; k++)
                if (d->q[0][k] > d->q[0][mode]) mode = k;
            n1 = d->kidx[0] == mode ? n0 : 0;
        }
        d->n = n1;
        out[0].n_cut = n0 - n1;
        s->total.n_cut += (uint64_t)(n0 - n1);
        s->seq[seqs[0]].st.n_cut += (uint64_t)(n0 - n1);
    }
    for (int32_t i = 0; i < n_seqs; i++) {
        if (s->drafts[i].n < s->p.n_min) s->drafts[i].n = 0;
        for (int32_t j = 0; j < s->drafts[i].n; j++)
            if (s->drafts[i].ids[j] < 0 || s->drafts[i].ids[j] >= s->n_vocab)
                return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: drafted token %d outside the vocabulary",
                                      s->drafts[i].ids[j]);
    }

    /* Verify: [anchor, d_1 .. d_n] of every sequence in one target batch. */
    double t2 = now_s();
    int32_t nb = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i], P = spex_kv_seq_len(s->t, sq);
        s->row0[i] = nb;
        s->batch[nb++] = (spex_batch_token){.token = s->seq[sq].anchor, .pos = P, .seq = sq, .logits = true};
        for (int32_t j = 0; j < s->drafts[i].n; j++)
            s->batch[nb++] =
                (spex_batch_token){.token = s->drafts[i].ids[j], .pos = P + 1 + j, .seq = sq, .logits = true};
    }
    spex_batch batch = {.tokens = s->batch, .n_tokens = nb};
    if ((st = spex_forward(s->t, &batch, err))) return st;
    s->total.n_target_batches++;

    /* Accept, roll back, gather the accepted rows' features. */
    double t3 = now_s();
    int32_t n_inj = 0, n_mtp = 0, m0 = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i], n = s->drafts[i].n;
        int32_t P = spex_kv_seq_len(s->t, sq) - (n + 1);
        out[i].n = 0;
        out[i].n_drafted = n;
        int32_t m = 0;
        if ((st = accept_seq(s, sq, &s->drafts[i], n, s->row0[i], &out[i], &m, err))) return st;
        if (i == 0) m0 = m;
        if ((st = spex_kv_seq_truncate(s->t, sq, P + m + 1, err))) return st;
        spec_seq *q = &s->seq[sq];
        if (s->dc && n == 0 && q->n_pend < s->pend_cap && s->test_break != SPEX_SPEC_TEST_NO_DEFER) {
            /* No draft this step: defer the one verified row (the anchor). */
            pend_append(s, q, spex_taps(s->t) + (size_t)s->row0[i] * (size_t)s->feat_w, 1);
        } else if (s->dc) {
            if ((st = flush_pending(s, sq, err))) return st;
            const float *taps = spex_taps(s->t);
            for (int32_t r = 0; r <= m; r++) {
                memcpy(s->feat + (size_t)n_inj * (size_t)s->feat_w, taps + (size_t)(s->row0[i] + r) * (size_t)s->feat_w,
                       sizeof(float) * (size_t)s->feat_w);
                s->inj_seq[n_inj] = sq;
                s->inj_pos[n_inj] = P + r;
                n_inj++;
            }
        }
        /* the cache now holds [anchor, d_1 .. d_m] at P .. P + m */
        int32_t toks[SPEX_DRAFT_MAX_N + 1];
        toks[0] = q->anchor;
        for (int32_t r = 0; r < m; r++) toks[1 + r] = s->drafts[i].ids[r];
        hist_push(s, q, toks, m + 1);
        if (s->mtp) n_mtp = mtp_stage(s, n_mtp, sq, toks, s->row0[i], m + 1, P);   /* the MTP catch-up */
        s->seq[sq].anchor = out[i].tokens[out[i].n - 1];
        stats_add(&s->seq[sq].st, n, m, out[i].n);
        stats_add(&s->total, n, m, out[i].n);
    }
    if (n_mtp > 0 && (st = spex_mtp_feed(s->mtp, s->m_tok, s->m_pos, s->m_seq, s->m_h, n_mtp, err))) return st;
    for (int32_t done = 0; s->dc && done < n_inj;) {
        int32_t k = n_inj - done < s->dc_inject_max ? n_inj - done : s->dc_inject_max;
        if ((st = spex_draft_inject(s->dc, s->feat + (size_t)done * (size_t)s->feat_w, s->feat_w, s->inj_seq + done,
                                    s->inj_pos + done, k, err)))
            return st;
        done += k;
    }
    double t4 = now_s();
    double td = t2 - t1, tv = t3 - t2, to = (t1 - t0) + (t4 - t3);
    s->total.t_draft += td;
    s->total.t_verify += tv;
    s->total.t_other += to;
    if (cut) spec_cut_observe(&s->cut, s->drafts[0].n + 1, tv, td + to, s->drafts[0].conf, s->drafts[0].n, m0);
    /* drafted: the drafter ran (a draft the cut or n_min dropped whole still cost its walk).
     * A backlog's injection (the prompt's features before the first draft, those of plain
     * steps before a re-check) is left out: a one-off that the decayed sums would charge to
     * the next few drafting steps (an 800-token prompt to the first four), not a step's rate. */
    if (guarded) spec_guard_record(&s->guard, s->nd[0] > 0, out[0].n, (t4 - t0) - (s->total.t_flush - flush0));
    for (int32_t i = 0; i < n_seqs; i++) {
        /* A step's time is shared by its sequences; each is charged the whole step. */
        spex_spec_stats *qs = &s->seq[seqs[i]].st;
        qs->t_draft += td;
        qs->t_verify += tv;
        qs->t_other += to;
    }
    return SPEX_OK;
}

/* ======================================================================== */
/* N-gram drafting (prompt lookup)                                           */
/* ======================================================================== */

/* The draft function of n-gram drafting: the lookup over the sequence's own history. */
static spex_status ngram_draft(void *user, int32_t seq, int32_t anchor, int32_t pos, int32_t n_max, spex_draft *out,
                               spex_error *err) {
    (void)err;
    spex_spec *s = user;
    spec_seq *q = &s->seq[seq];
    out->n = 0;
    out->has_q = false;
    if (q->n_hist != pos || pos + 1 > s->n_ctx) return SPEX_OK;   /* history unknown: no draft */
    q->hist[pos] = anchor;   /* the anchor's place; the next forward writes it there too */
    out->n = spex_ngram_lookup(q->hist, pos + 1, &s->ng, n_max, out->ids);
    /* A lookup has no confidence of its own; one per slot position (0.95, 0.85, .. 0.05 from the
     * tenth on) puts each position in a bin of its own, so the draft cut learns the acceptance of
     * a lookup's first, second, .. token and verifies only the part that pays (cut.h). */
    for (int32_t j = 0; j < out->n; j++) out->conf[j] = 0.95f - 0.1f * (float)(j < 9 ? j : 9), out->kidx[j] = 0;
    return SPEX_OK;
}

spex_status spex_spec_set_ngram(spex_spec *s, const spex_ngram_params *p, spex_error *err) {
    if (!s || !p) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: ngram: NULL argument");
    if (s->dc || s->mtp)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: n-gram drafting replaces the drafter: create the "
                                                         "loop without a draft or MTP context");
    if (p->size_n < 1 || p->size_n > 1024 || p->size_m < 1 || p->min_hits < 1)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: ngram: size n %d (1..1024), size m %d and min hits %d (>= 1)",
                              p->size_n, p->size_m, p->min_hits);
    if (!s->hist_all) {
        s->hist_all = malloc(sizeof(int32_t) * (size_t)s->n_seq * (size_t)s->n_ctx);
        if (!s->hist_all) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: ngram: out of memory");
        for (int32_t i = 0; i < s->n_seq; i++) {
            s->seq[i].hist = s->hist_all + (size_t)i * (size_t)s->n_ctx;
            /* a sequence already cached has no history: unknown until it starts over */
            s->seq[i].n_hist = spex_kv_seq_len(s->t, i) == 0 ? 0 : -1;
        }
    }
    s->ng = *p;
    spex_spec_set_draft_fn(s, ngram_draft, s);
    return SPEX_OK;
}
