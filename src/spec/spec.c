/*
 * spec.c — the speculative decoding loop (include/spex.h, "Speculative decoding";
 * ../shared/docs/dflash2.md §15–§19): draft -> verify -> accept -> roll back.
 *
 * What it is: per step, one draft request for every stepping sequence to the drafter
 * (drafter.h: DFlash v1/v2, MTP, a small draft model, n-gram lookup or a caller's function),
 * one target batch with every sequence's verify rows [anchor, d_1 .. d_n] (logits on every
 * row, taps captured in the same pass), the acceptance rule of the sequence's path
 * (verify.c), truncation of the target cache to the accepted prefix, and the report of the
 * accepted rows to the drafter. Policy sits beside the loop: with spex_spec_params.draft_cut a
 * step of one sequence verifies only the prefix of its draft that the cost-aware cut (cut.h)
 * prices as worth it, and with spex_spec_params.guard it drafts only while drafting steps
 * measure more tokens per second than plain ones (guard.h).
 * What it is not: any drafter's forward, the acceptance arithmetic (verify.c), the sampling
 * chain (src/sample), stop strings or detokenisation (callers).
 *
 * Paths (spex_spec_path). Greedy and sample-and-match both call spex_sampler_sample on each
 * verify row in order and accept while the sample equals the draft; every emitted token
 * therefore consumes exactly the sampler draws a target-only run would make for it, so those
 * paths reproduce target-only output token for token (greedy: always; sampled: for the same
 * seed). Rejection sampling (§15.4) draws its acceptance uniforms from a stream of its own and
 * the residual / bonus from the sampler's stream (§15.5); it matches target-only sampling in
 * distribution.
 *
 * Invariant A (§16) is checked at every step: a drafter that keeps a cache in step with the
 * target accounts for exactly the target's positions; a mismatch is SPEX_ERR_INTERNAL.
 *
 * Recurrent targets (qwen35): rolling back m rejected drafts needs the state copies of the
 * target context's ring, so a drafter requires n_rs_seq >= n_max.
 *
 * Nothing is allocated after init (spex_spec_set_ngram allocates the token history once).
 */
#include "spec/cut.h"
#include "spec/drafter.h"
#include "spec/guard.h"
#include "spec/spec_test.h"
#include "spec/verify.h"
#include "spex.h"
#include "model/api.h"
#include "core/rng.h"
#include "sample/api.h"
#include "spec/api.h"
#include "core/clock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec_seq {
    bool active;
    spex_sampler *smp;          /* borrowed                                          */
    int32_t anchor;             /* last emitted token, at position spex_kv_seq_len  */
    spex_rng rng_draft;         /* sampled walk                                      */
    spex_rng rng_accept;        /* acceptance uniforms                               */
    spex_spec_path path;
    int32_t *hist;              /* the tokens at positions 0 .. n_hist - 1, when a drafter wants them */
    int32_t n_hist;             /* == the target cache's length; -1 when not known     */
    int32_t n_min;              /* spex_spec_params.n_min / p_min, or the sequence's own */
    float p_min;
    bool detached;              /* restored from an image the drafter's cache has no part of
                                 * (spex_spec_seq_restore): plain steps, the drafter told
                                 * nothing, until the sequence is fed from position 0 again */
} spec_seq;

struct spex_spec {
    spex_context *t;            /* borrowed */
    spec_drafter *d;            /* owned; NULL: target-only steps */
    spex_spec_params p;
    int32_t n_seq, n_vocab, n_batch_max, n_out_max, n_ctx;
    spec_seq *seq;              /* [n_seq]                                 */
    spex_spec_stats *seq_st;    /* [n_seq]                                 */
    spex_spec_stats total;
    spec_cut cut;               /* the draft cut's price and acceptance model (cut.h) */
    spec_guard guard;           /* the realized-rate guard of single-sequence steps (guard.h) */
    int32_t *hist_all;          /* [n_seq][n_ctx + 1] the sequences' tokens, for drafters that read them */
    spex_spec_test_verdict_fn verdict;   /* spec_test.h seams; the loop's own pass through */
    void *verdict_user;
    spex_spec_test_cut_fn cut_hook;
    void *cut_user;

    /* scratch, allocated at init */
    spex_batch_token *batch;    /* [n_batch_max]                           */
    spex_draft *drafts;         /* [n_seq]                                 */
    spec_draft_req *reqs;       /* [n_seq]                                 */
    int32_t *req_of;            /* [n_seq] step index -> request index, -1 */
    int32_t *nd;                /* [n_seq] draft length per stepping seq   */
    int32_t *row0;              /* [n_seq] first verify row per seq        */
    spex_token_prob *dist;      /* [V]                                     */
    spex_token_prob *resid;     /* [V]                                     */
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

static bool alloc_hist(spex_spec *s);

/* The drafter that keeps the cache, under a draft function or hybrid wrapper. */
static spec_drafter *cache_drafter(const spex_spec *s) {
    return spec_drafter_hybrid_inner(spec_drafter_fn_inner(s->d));
}

/* Drafters book backlog time in the loop's stats: the outer one and those it wraps. */
static void bind_stats(spex_spec *s) {
    spec_drafter *chain[3] = {s->d, spec_drafter_fn_inner(s->d), cache_drafter(s)};
    for (int i = 0; i < 3; i++)
        if (chain[i]) {
            chain[i]->total = &s->total;
            chain[i]->seq_st = s->seq_st;
        }
}

static bool verdict_as_is(void *user, bool verdict) {
    (void)user;
    return verdict;
}

static int32_t cut_as_is(void *user, const spex_draft *d, int32_t n) {
    (void)user, (void)d;
    return n;
}

/* Resolves n_max against the drafter (its default for 0, its limit above). */
static spex_status resolve_n_max(spex_spec_params *p, const spec_drafter *d, spex_error *err) {
    if (p->n_max < 0 || p->n_min < 0 || !(p->p_min >= 0.0f && p->p_min <= 1.0f))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: n_max %d, n_min %d must be >= 0 and p_min %g in [0, 1]", p->n_max, p->n_min,
                              (double)p->p_min);
    int32_t def = d ? d->n_max_default : 7, lim = d ? d->n_max_limit : SPEX_DRAFT_MAX_N;
    if (p->n_max == 0) p->n_max = def;
    if (p->n_max > lim) {
        if (d && d->block_size > 0)
            spec_log(&(spex_spec){.p = *p},
                     "warning: requested draft size %d exceeds the trained block size %d (at most %d drafted "
                     "tokens): clamping to %d",
                     p->n_max, d->block_size, lim, lim);
        p->n_max = lim;
    }
    if (p->n_min > p->n_max) p->n_min = p->n_max;
    return SPEX_OK;
}

static void spec_init_fail(spex_spec *s, spec_drafter *d) {
    if (s) s->d = NULL;
    spex_spec_free(s);
    if (d) d->ops->free(d);
}

/* Takes ownership of d (freed on failure too). */
static spex_status spec_init(spex_context *tctx, spec_drafter *d, const spex_spec_params *params, spex_spec **out,
                             spex_error *err) {
    spex_spec_params p = params ? *params : spex_spec_default_params();
    const spex_context_params *tp = spex_context_get_params(tctx);
    const spex_model_hparams *thp = spex_model_get_hparams(spex_context_model(tctx));
    spex_status st = resolve_n_max(&p, d, err);
    if (st == SPEX_OK && d && d->rollback && thp->n_recurrent > 0 && tp->n_rs_seq < p.n_max)
        st = spex_error_set(err, SPEX_ERR_INVALID_ARG,
                            "spec: the target has recurrent layers: create its context with n_rs_seq >= n_max "
                            "(%d) so that rejected drafts can be rolled back, got n_rs_seq %d",
                            p.n_max, tp->n_rs_seq);
    spex_spec *s = st == SPEX_OK ? calloc(1, sizeof *s) : NULL;
    if (st == SPEX_OK && !s) st = spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    if (st != SPEX_OK) {
        spec_init_fail(NULL, d);
        return st;
    }
    spec_cut_init(&s->cut);
    s->t = tctx;
    s->d = d;
    s->p = p;
    s->verdict = verdict_as_is;
    s->cut_hook = cut_as_is;
    s->n_seq = tp->n_seq_max;
    s->n_vocab = thp->n_vocab;
    s->n_batch_max = tp->n_batch_max;
    s->n_out_max = tp->n_outputs_max;
    s->n_ctx = tp->n_ctx_per_seq;
    int32_t nb = s->n_batch_max > s->n_out_max ? s->n_batch_max : s->n_out_max;
    s->seq = calloc((size_t)s->n_seq, sizeof *s->seq);
    s->seq_st = calloc((size_t)s->n_seq, sizeof *s->seq_st);
    s->batch = calloc((size_t)nb, sizeof *s->batch);
    s->drafts = calloc((size_t)s->n_seq, sizeof *s->drafts);
    s->reqs = calloc((size_t)s->n_seq, sizeof *s->reqs);
    s->req_of = calloc((size_t)s->n_seq, sizeof *s->req_of);
    s->nd = calloc((size_t)s->n_seq, sizeof *s->nd);
    s->row0 = calloc((size_t)s->n_seq, sizeof *s->row0);
    s->dist = malloc(sizeof *s->dist * (size_t)s->n_vocab);
    s->resid = malloc(sizeof *s->resid * (size_t)s->n_vocab);
    if (!s->seq || !s->seq_st || !s->batch || !s->drafts || !s->reqs || !s->req_of || !s->nd || !s->row0 ||
        !s->dist || !s->resid || (d && d->wants_hist && !alloc_hist(s))) {
        spec_init_fail(s, d);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    bind_stats(s);
    *out = s;
    return SPEX_OK;
}

spex_status spex_spec_init(spex_context *tctx, spex_draft_context *dc, const spex_spec_params *params,
                           spex_spec **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL out");
    *out = NULL;
    if (!tctx) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL target context");
    spec_drafter *d = NULL;
    if (dc) {
        spex_status st = spec_drafter_dflash(tctx, dc, &d, err);
        if (st != SPEX_OK) return st;
    }
    return spec_init(tctx, d, params, out, err);
}

spex_status spex_spec_init_mtp(spex_context *tctx, spex_mtp_context *mc, const spex_spec_params *params,
                               spex_spec **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL out");
    *out = NULL;
    if (!tctx || !mc) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL target or MTP context");
    spec_drafter *d = NULL;
    spex_status st = spec_drafter_mtp(tctx, mc, &d, err);
    return st == SPEX_OK ? spec_init(tctx, d, params, out, err) : st;
}

spex_status spex_spec_init_hybrid(spex_context *tctx, spex_draft_context *dc, const spex_ngram_params *ng,
                                  const spex_spec_params *params, spex_spec **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL out");
    *out = NULL;
    if (!tctx || !dc || !ng)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL target, draft context or n-gram params");
    spec_drafter *d = NULL, *h = NULL;
    spex_status st = spec_drafter_dflash(tctx, dc, &d, err);
    if (st != SPEX_OK) return st;
    st = spec_drafter_hybrid(d, spex_context_get_params(tctx)->n_seq_max, ng, &h, err);
    if (st != SPEX_OK) {
        d->ops->free(d);
        return st;
    }
    return spec_init(tctx, h, params, out, err);
}

spex_status spex_spec_init_draft_model(spex_context *tctx, spex_context *dctx, const spex_spec_params *params,
                                       spex_spec **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL out");
    *out = NULL;
    if (!tctx || !dctx)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: init: NULL target or draft model context");
    spec_drafter *d = NULL;
    spex_status st = spec_drafter_model(tctx, dctx, &d, err);
    return st == SPEX_OK ? spec_init(tctx, d, params, out, err) : st;
}

void spex_spec_free(spex_spec *s) {
    if (!s) return;
    if (s->d) s->d->ops->free(s->d);
    free(s->hist_all);
    free(s->seq);
    free(s->seq_st);
    free(s->batch);
    free(s->drafts);
    free(s->reqs);
    free(s->req_of);
    free(s->nd);
    free(s->row0);
    free(s->dist);
    free(s->resid);
    free(s);
}

const spex_spec_params *spex_spec_get_params(const spex_spec *s) { return s ? &s->p : NULL; }

const char *spex_spec_drafter_name(const spex_spec *s) { return s && s->d ? s->d->ops->name : "none"; }

int32_t spex_spec_test_pend_cap(spex_spec *s, int32_t cap) { return s ? spec_drafter_dflash_pend_cap(cache_drafter(s), cap) : 0; }

void spex_spec_test_set_verdict(spex_spec *s, spex_spec_test_verdict_fn fn, void *user) {
    if (!s) return;
    s->verdict = fn ? fn : verdict_as_is;
    s->verdict_user = user;
}

void spex_spec_test_set_cut(spex_spec *s, spex_spec_test_cut_fn fn, void *user) {
    if (!s) return;
    s->cut_hook = fn ? fn : cut_as_is;
    s->cut_user = user;
}

int32_t spex_spec_n_ctx(const spex_spec *s) { return s ? s->n_ctx : 0; }
int32_t spex_spec_n_vocab(const spex_spec *s) { return s ? s->n_vocab : 0; }

void spex_spec_set_guard(spex_spec *s, bool on) {
    if (s) s->p.guard = on;
}

void spex_spec_set_draft_cut(spex_spec *s, bool on) {
    if (s) s->p.draft_cut = on;
}

/* Installs d (which keeps nothing of its own beside the target, or wraps s->d), freeing a
 * replaced drafter that d does not wrap. */
static spex_status replace_drafter(spex_spec *s, spec_drafter *d, spex_error *err) {
    if (d->wants_hist && !s->hist_all && !alloc_hist(s)) {
        d->ops->free(d);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    s->d = d;
    bind_stats(s);
    return SPEX_OK;
}

void spex_spec_set_draft_fn(spex_spec *s, spex_spec_draft_fn fn, void *user) {
    if (!s) return;
    spec_drafter *inner = spec_drafter_fn_unwrap(s->d), *d = NULL;
    if (inner && inner->replaceable) {
        inner->ops->free(inner);
        inner = NULL;
    }
    s->d = inner;
    if (fn && spec_drafter_fn(fn, user, inner, &d, NULL) == SPEX_OK) replace_drafter(s, d, NULL);
}

spex_status spex_spec_set_hybrid_ngram(spex_spec *s, const spex_ngram_params *p, spex_error *err) {
    if (!s || !p) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: hybrid: NULL argument");
    if (!s->d || strcmp(s->d->ops->name, "dflash"))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "spec: hybrid drafting pairs n-gram lookup with a DFlash drafter: create the loop with "
                              "a draft context (spex_spec_init)");
    if (!s->hist_all && !alloc_hist(s)) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    spec_drafter *h = NULL;
    spex_status st = spec_drafter_hybrid(s->d, s->n_seq, p, &h, err);
    if (st == SPEX_OK) s->d = h;
    bind_stats(s);
    return st;
}

spex_status spex_spec_set_ngram(spex_spec *s, const spex_ngram_params *p, spex_error *err) {
    if (!s || !p) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: ngram: NULL argument");
    if (s->d && !s->d->replaceable)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: n-gram drafting replaces the drafter: create the "
                                                         "loop without a draft or MTP context");
    spec_drafter *d = NULL;
    spex_status st = spec_drafter_ngram(p, &d, err);
    if (st != SPEX_OK) return st;
    if (s->d) s->d->ops->free(s->d);
    s->d = NULL;
    return replace_drafter(s, d, err);
}

static bool seq_ok(const spex_spec *s, int32_t seq) { return s && seq >= 0 && seq < s->n_seq; }

spex_status spex_spec_seq_set_draft_limits(spex_spec *s, int32_t seq, int32_t n_min, float p_min, spex_error *err) {
    if (!seq_ok(s, seq) || !s->seq[seq].active)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: draft limits: sequence %d is not begun", seq);
    if (n_min < 0 || !(p_min >= 0.0f && p_min <= 1.0f))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: draft limits: n_min %d must be >= 0 and p_min %g in [0, 1]",
                              n_min, (double)p_min);
    s->seq[seq].n_min = n_min;
    s->seq[seq].p_min = p_min;
    return SPEX_OK;
}

spex_spec_path spex_spec_seq_path(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? s->seq[seq].path : SPEX_SPEC_PATH_GREEDY;
}

const spex_spec_stats *spex_spec_seq_stats(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? &s->seq_st[seq] : NULL;
}

const spex_spec_stats *spex_spec_total_stats(const spex_spec *s) { return s ? &s->total : NULL; }

/* The token history follows the target cache: cut to what a feed or rewind keeps, extended by
 * every token a forward writes. A gap (a cut past what it holds) makes it unknown until the
 * sequence starts over; a drafter then gets no history and drafts nothing, which is always
 * lossless. Each row has n_ctx + 1 places: the anchor goes after the cached tokens. */
static bool alloc_hist(spex_spec *s) {
    s->hist_all = malloc(sizeof(int32_t) * (size_t)s->n_seq * (size_t)(s->n_ctx + 1));
    if (!s->hist_all) return false;
    for (int32_t i = 0; i < s->n_seq; i++) {
        s->seq[i].hist = s->hist_all + (size_t)i * (size_t)(s->n_ctx + 1);
        /* a sequence already cached has no history: unknown until it starts over */
        s->seq[i].n_hist = spex_kv_seq_len(s->t, i) == 0 ? 0 : -1;
    }
    return true;
}

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

int32_t spex_spec_seq_pending(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? spec_drafter_dflash_pending(cache_drafter(s), seq) : -1;
}

void spex_spec_seq_end(spex_spec *s, int32_t seq) {
    if (!seq_ok(s, seq)) return;
    s->seq[seq].active = false;
    s->seq[seq].smp = NULL;
    s->seq[seq].n_hist = 0;
    s->seq[seq].detached = false;
    spex_kv_seq_clear(s->t, seq, NULL);
    if (s->d) s->d->ops->seq_end(s->d, seq);
}

/* ======================================================================== */
/* Prompt                                                                    */
/* ======================================================================== */

/* Target and drafter of seq back to n_keep positions (n_keep <= the target length). */
static spex_status settle(spex_spec *s, int32_t seq, int32_t n_keep, spex_error *err) {
    const int32_t len = spex_kv_seq_len(s->t, seq);
    if (s->seq[seq].detached) {   /* the drafter holds nothing of seq: it joins again at 0 */
        if (n_keep > 0) return spex_kv_seq_rewind(s->t, seq, n_keep, NULL, err);
        s->seq[seq].detached = false;
    }
    if (s->d && !s->d->ops->can_keep(s->d, seq, n_keep, len))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "spec: sequence %d: the %s drafter cannot keep %d of %d positions (the target hidden "
                              "state of position %d is not kept); start it from 0",
                              seq, s->d->ops->name, n_keep, len, n_keep - 1);
    /* rewind = truncate, or (recurrent targets) checkpoint + replay when the ring no longer
     * holds n_keep - 1 */
    spex_status st = spex_kv_seq_rewind(s->t, seq, n_keep, NULL, err);
    if (st == SPEX_OK && s->d) st = s->d->ops->keep(s->d, seq, n_keep, err);
    return st;
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
        if (sp->temp <= 0.0f) q->path = SPEX_SPEC_PATH_GREEDY;
    else if (!has_penalties(sp) && s->p.sampled_walk && s->d && s->d->has_q) q->path = SPEX_SPEC_PATH_REJECTION;
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

/* Runs tokens[0 .. n) of seq at positions pos0 .. through the target in batches, the last
 * one with logits when `logits_last`, reporting every batch to the drafter. */
static spex_status run_tokens(spex_spec *s, int32_t seq, int32_t pos0, const int32_t *tokens, int32_t n,
                              bool logits_last, spex_error *err) {
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < s->n_batch_max ? n - done : s->n_batch_max;
        for (int32_t i = 0; i < k; i++)
            s->batch[i] = (spex_batch_token){.token = tokens[done + i], .pos = pos0 + done + i, .seq = seq,
                                             .logits = logits_last && done + i == n - 1};
        spex_batch b = {.tokens = s->batch, .n_tokens = k};
        spex_status st = spex_forward(s->t, &b, err);
        bool tell = s->d && !s->seq[seq].detached;
        if (st == SPEX_OK && tell) st = s->d->ops->wrote(s->d, seq, tokens + done, 0, k, pos0 + done, true, err);
        if (st == SPEX_OK && tell) st = s->d->ops->commit(s->d, err);
        if (st != SPEX_OK) return st;
        hist_push(s, &s->seq[seq], tokens + done, k);
        done += k;
    }
    return SPEX_OK;
}

bool spex_spec_seq_can_keep(const spex_spec *s, int32_t seq, int32_t n_keep) {
    if (!seq_ok(s, seq)) return false;
    const int32_t len = spex_kv_seq_len(s->t, seq);
    if (s->d && !s->seq[seq].detached && !s->d->ops->can_keep(s->d, seq, n_keep, len)) return false;
    return n_keep >= 0 && n_keep <= len;   /* recurrent targets: by rewind (checkpoint + replay) */
}

static int32_t ctx_limit(const spex_spec *s) {
    return s->d && s->d->n_ctx > 0 && s->d->n_ctx < s->n_ctx ? s->d->n_ctx : s->n_ctx;
}

/* Invariant A: a drafter that keeps a cache in step accounts for the target's positions. */
static spex_status check_in_step(const spex_spec *s, int32_t seq, int32_t len, spex_error *err) {
    int32_t have = s->d && !s->seq[seq].detached ? s->d->ops->have(s->d, seq) : -1;
    if (have >= 0 && have != len)
        return spex_error_set(err, SPEX_ERR_INTERNAL,
                              "spec: sequence %d: the %s drafter holds %d positions (%d pending), target %d "
                              "(invariant A)",
                              seq, s->d->ops->name, have, spec_drafter_dflash_pending(cache_drafter(s), seq), len);
    return SPEX_OK;
}

spex_status spex_spec_seq_feed(spex_spec *s, int32_t seq, int32_t n_keep, const int32_t *tokens, int32_t n,
                               spex_error *err) {
    if (!seq_ok(s, seq))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: sequence %d outside 0 .. %d", seq,
                              s ? s->n_seq - 1 : -1);
    int32_t have = spex_kv_seq_len(s->t, seq);
    int32_t dhave = s->d && !s->seq[seq].detached ? s->d->ops->have(s->d, seq) : -1;
    if (dhave >= 0 && dhave < have) have = dhave;
    if (n_keep < 0 || n_keep > have || n < 0 || (n > 0 && !tokens))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: feed: keep %d of %d cached positions, %d tokens",
                              n_keep, have, n);
    /* One position must stay free for the prompt's last token (a prompt may fill the context:
     * its first token is sampled, and the caller stops there with the context full). */
    if (n_keep + n + 1 > ctx_limit(s))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: prompt of %d tokens does not fit a context of %d",
                              n_keep + n + 1, ctx_limit(s));
    s->seq[seq].active = false;
    s->seq[seq].smp = NULL;
    spex_status st = settle(s, seq, n_keep, err);
    hist_cut(&s->seq[seq], n_keep);
    if (st == SPEX_OK) st = run_tokens(s, seq, n_keep, tokens, n, false, err);
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
    spex_status st = check_in_step(s, seq, pos, err);
    if (st != SPEX_OK) return st;
    if (pos + 1 > ctx_limit(s))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: prompt of %d tokens does not fit a context of %d", pos + 1,
                              ctx_limit(s));
    spec_seq *q = &s->seq[seq];
    q->active = false;
    memset(&s->seq_st[seq], 0, sizeof s->seq_st[seq]);
    double t0 = spex_now_s();
    int32_t tok;
    st = run_tokens(s, seq, pos, &last, 1, true, err);
    if (st == SPEX_OK) st = spex_sampler_sample(sampler, spex_logits(s->t, 0), &tok, err);
    if (st == SPEX_OK) st = spex_sampler_accept(sampler, tok);
    if (st != SPEX_OK) {
        spex_spec_seq_end(s, seq);
        return st;
    }
    bind_sampler(s, q, sampler);
    q->anchor = tok;
    q->n_min = s->p.n_min;
    q->p_min = s->p.p_min;
    q->active = true;
    s->seq_st[seq].t_other += spex_now_s() - t0;
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

/* Slot images (the server's save / restore): the target's cache of seq through model/api.h's
 * spex_kv_seq_state_*. A drafter with a cache of its own (DFlash, MTP) has no part in the
 * image; a restored sequence is detached from it (see spec_seq), which keeps every step
 * lossless: it verifies [anchor] alone, as a target-only run would. */
uint64_t spex_spec_seq_image_size(const spex_spec *s, int32_t seq) {
    return seq_ok(s, seq) ? spex_kv_seq_state_size(s->t, seq) : 0;
}

uint64_t spex_spec_seq_image_max(const spex_spec *s, int32_t n) { return s ? spex_kv_seq_state_max(s->t, n) : 0; }

spex_status spex_spec_seq_image_save(const spex_spec *s, int32_t seq, void *buf, uint64_t size, spex_error *err) {
    if (!seq_ok(s, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: image save: bad sequence %d", seq);
    return spex_kv_seq_state_save(s->t, seq, buf, size, err);
}

spex_status spex_spec_seq_restore(spex_spec *s, int32_t seq, const int32_t *tokens, int32_t n, const void *img,
                                  uint64_t size, spex_error *err) {
    if (!seq_ok(s, seq)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: restore: bad sequence %d", seq);
    if (n < 0 || n + 1 > ctx_limit(s))
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: restore: %d tokens do not fit a context of %d (one "
                              "position stays free)", n, ctx_limit(s));
    spex_spec_seq_end(s, seq);
    spex_status st = spex_kv_seq_state_load(s->t, seq, tokens, n, img, size, err);
    if (st != SPEX_OK) {
        spex_spec_seq_end(s, seq);
        return st;
    }
    spec_seq *q = &s->seq[seq];
    hist_push(s, q, tokens, n);
    q->detached = n > 0 && s->d && s->d->ops->have(s->d, seq) >= 0;
    return SPEX_OK;
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
        int32_t di = d->ids[i - 1], np = 0;
        bool ok;
        if (rejection) {
            if ((st = spex_sampler_dist(q->smp, row, s->dist, s->n_vocab, &np, err))) return st;
            float u = spex_rng_uniform(&q->rng_accept);
            ok = spex_verify_accept(s->dist, np, di, d->cand[i - 1], d->q[i - 1], d->n_cand, u);
        } else {
            /* Greedy and sample-and-match: the sample a target-only run would draw here. */
            if ((st = spex_sampler_sample(q->smp, row, &t, err))) return st;
            ok = t == di;
        }
        if (s->verdict(s->verdict_user, ok)) {
            m++;
            out->tokens[out->n++] = di;
            if ((st = spex_sampler_accept(q->smp, di))) return st;
            t = -1;
            continue;
        }
        if (rejection)
            t = spex_verify_residual(s->dist, np, d->cand[i - 1], d->q[i - 1], d->n_cand,
                                     spex_rng_uniform_f64(spex_sampler_rng(q->smp)), s->resid);
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

/* Checks a step's arguments and every stepping sequence before any cache changes. */
static spex_status step_check(const spex_spec *s, const int32_t *seqs, int32_t n_seqs, const int32_t *max_emit,
                              int32_t rows, spex_error *err) {
    if (rows < n_seqs)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: %d sequences do not fit a verify batch of %d rows",
                              n_seqs, rows);
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
        spex_status st = check_in_step(s, sq, P, err);
        if (st != SPEX_OK) return st;
    }
    return SPEX_OK;
}

/* Draft lengths: n_max (0 in a plain step), the emit budget, the context space, and the
 * verify batch (each remaining sequence keeps at least its anchor row); one draft request per
 * sequence with a length, while the drafter takes more. Returns the number of requests. */
static int32_t step_requests(spex_spec *s, const int32_t *seqs, int32_t n_seqs, const int32_t *max_emit,
                             int32_t rows_left, bool plain) {
    const int32_t lim = ctx_limit(s);
    int32_t n_req = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i];
        spec_seq *q = &s->seq[sq];
        int32_t P = spex_kv_seq_len(s->t, sq);
        int32_t n = s->d && !plain && !q->detached ? s->p.n_max : 0;
        if (max_emit && max_emit[i] - 1 < n) n = max_emit[i] - 1;
        if (lim - P - 1 < n) n = lim - P - 1;
        int32_t share = rows_left - (n_seqs - i - 1) - 1;
        if (share < n) n = share;
        if (n < 0 || (n > 0 && s->d->max_blocks > 0 && n_req >= s->d->max_blocks)) n = 0;
        s->nd[i] = n;
        s->req_of[i] = -1;
        s->drafts[i].n = 0;
        s->drafts[i].has_q = false;
        if (n > 0) {
            float temp = q->path == SPEX_SPEC_PATH_REJECTION ? spex_sampler_get_params(q->smp)->temp : 0.0f;
            bool known = q->hist && q->n_hist == P;
            s->req_of[i] = n_req;
            s->reqs[n_req++] = (spec_draft_req){.seq = sq, .anchor = q->anchor, .pos = P, .n_max = n, .temp = temp,
                                                .p_min = q->p_min, .rng = &q->rng_draft,
                                                .hist = known ? q->hist : NULL, .timed = s->p.draft_cut};
        }
        rows_left -= s->nd[i] + 1;
    }
    return n_req;
}

/* Runs the requests and places each draft at its sequence's step index (in place: request r
 * belongs to a step index >= r). */
static spex_status step_draft(spex_spec *s, int32_t n_seqs, int32_t n_req, spex_error *err) {
    if (n_req == 0) return SPEX_OK;
    spex_status st = s->d->ops->draft(s->d, s->reqs, n_req, s->drafts, &s->total.n_draft_batches, err);
    if (st != SPEX_OK) return st;
    for (int32_t i = n_seqs - 1; i >= 0; i--) {
        int32_t r = s->req_of[i];
        if (r >= 0 && r != i) s->drafts[i] = s->drafts[r];
        else if (r < 0) s->drafts[i].n = 0;
    }
    for (int32_t i = 0; i < n_seqs; i++)
        if (s->drafts[i].n < 0 || s->drafts[i].n > s->nd[i])
            return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: the %s drafter returned %d tokens (max %d)",
                                  s->d->ops->name, s->drafts[i].n, s->nd[i]);
    return SPEX_OK;
}

/* The draft cut (cut.h) prices a step of one sequence: its rule compares that step's tokens
 * with its time, which other sequences' rows would blur. Drafts without a confidence of
 * their own carry one per slot position (draft_fn.c); MTP and draft-model drafts carry the
 * head's top probability and verify by sample-and-match at T > 0, so any cut is lossless
 * there. Returns whether the step was cut-priced. */
static bool step_cut(spex_spec *s, const int32_t *seqs, int32_t n_seqs, spex_spec_out *out) {
    for (int32_t i = 0; i < n_seqs; i++) out[i].n_cut = 0;
    if (!(s->p.draft_cut && n_seqs == 1 && s->drafts[0].n > 0)) return false;
    spex_draft *d = &s->drafts[0];
    const int32_t n0 = d->n;
    d->n = s->cut_hook(s->cut_user, d, spec_cut_choose(&s->cut, d->conf, n0));
    if (d->n < 0 || d->n > n0) d->n = n0;
    out[0].n_cut = n0 - d->n;
    s->total.n_cut += (uint64_t)(n0 - d->n);
    s->seq_st[seqs[0]].n_cut += (uint64_t)(n0 - d->n);
    return true;
}

/* Verify: [anchor, d_1 .. d_n] of every sequence in one target batch. */
static spex_status step_verify(spex_spec *s, const int32_t *seqs, int32_t n_seqs, spex_error *err) {
    int32_t nb = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i], P = spex_kv_seq_len(s->t, sq);
        if (s->drafts[i].n < s->seq[sq].n_min) s->drafts[i].n = 0;
        for (int32_t j = 0; j < s->drafts[i].n; j++)
            if (s->drafts[i].ids[j] < 0 || s->drafts[i].ids[j] >= s->n_vocab)
                return spex_error_set(err, SPEX_ERR_INTERNAL, "spec: drafted token %d outside the vocabulary",
                                      s->drafts[i].ids[j]);
        s->row0[i] = nb;
        s->batch[nb++] = (spex_batch_token){.token = s->seq[sq].anchor, .pos = P, .seq = sq, .logits = true};
        for (int32_t j = 0; j < s->drafts[i].n; j++)
            s->batch[nb++] =
                (spex_batch_token){.token = s->drafts[i].ids[j], .pos = P + 1 + j, .seq = sq, .logits = true};
    }
    spex_batch batch = {.tokens = s->batch, .n_tokens = nb};
    spex_status st = spex_forward(s->t, &batch, err);
    if (st == SPEX_OK) s->total.n_target_batches++;
    return st;
}

/* Accept, roll the target back, report the accepted rows to the drafter. Returns the first
 * sequence's accepted count in *m0. */
static spex_status step_accept(spex_spec *s, const int32_t *seqs, int32_t n_seqs, spex_spec_out *out, int32_t *m0,
                               spex_error *err) {
    spex_status st;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t sq = seqs[i], n = s->drafts[i].n;
        int32_t P = spex_kv_seq_len(s->t, sq) - (n + 1);
        out[i].n = 0;
        out[i].n_drafted = n;
        int32_t m = 0;
        if ((st = accept_seq(s, sq, &s->drafts[i], n, s->row0[i], &out[i], &m, err))) return st;
        if (i == 0) *m0 = m;
        if ((st = spex_kv_seq_truncate(s->t, sq, P + m + 1, err))) return st;
        /* the cache now holds [anchor, d_1 .. d_m] at P .. P + m */
        spec_seq *q = &s->seq[sq];
        int32_t toks[SPEX_DRAFT_MAX_N + 1];
        toks[0] = q->anchor;
        for (int32_t r = 0; r < m; r++) toks[1 + r] = s->drafts[i].ids[r];
        hist_push(s, q, toks, m + 1);
        if (s->d && !q->detached && (st = s->d->ops->wrote(s->d, sq, toks, s->row0[i], m + 1, P, n == 0, err)))
            return st;
        q->anchor = out[i].tokens[out[i].n - 1];
        stats_add(&s->seq_st[sq], n, m, out[i].n);
        stats_add(&s->total, n, m, out[i].n);
    }
    return s->d ? s->d->ops->commit(s->d, err) : SPEX_OK;
}

spex_status spex_spec_step(spex_spec *s, const int32_t *seqs, int32_t n_seqs, const int32_t *max_emit,
                           spex_spec_out *out, spex_error *err) {
    if (!s || !seqs || !out || n_seqs < 1 || n_seqs > s->n_seq)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: step: bad arguments (%d sequences)", n_seqs);
    double t0 = spex_now_s();
    const int32_t rows = s->n_batch_max < s->n_out_max ? s->n_batch_max : s->n_out_max;
    spex_status st = step_check(s, seqs, n_seqs, max_emit, rows, err);
    if (st != SPEX_OK) return st;

    /* The guard judges steps of one sequence, as the draft cut does: a step's tokens against
     * its time, which other sequences' rows would blur. */
    const bool guarded = s->p.guard && n_seqs == 1 && s->d;
    bool plain = false;
    if (guarded) {
        double f, v0, v1, est = 0; /* a plain step's rate: 1 / the cut's price of a one-row verify */
        if (s->p.draft_cut && spec_cut_price(&s->cut, &f, &v0, &v1) && v0 + v1 > 0) est = 1.0 / (v0 + v1);
        plain = spec_guard_plain(&s->guard, est);
        if (plain) s->total.n_guard_plain++;
    }
    const double flush0 = s->total.t_flush;

    int32_t n_req = step_requests(s, seqs, n_seqs, max_emit, rows, plain);
    double t1 = spex_now_s();
    if ((st = step_draft(s, n_seqs, n_req, err))) return st;
    const bool cut = step_cut(s, seqs, n_seqs, out);
    double t2 = spex_now_s();
    if ((st = step_verify(s, seqs, n_seqs, err))) return st;
    double t3 = spex_now_s();
    int32_t m0 = 0;
    if ((st = step_accept(s, seqs, n_seqs, out, &m0, err))) return st;
    double t4 = spex_now_s();

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
        spex_spec_stats *qs = &s->seq_st[seqs[i]];
        qs->t_draft += td;
        qs->t_verify += tv;
        qs->t_other += to;
    }
    return SPEX_OK;
}
