/*
 * draft_hybrid.c — DFlash plus n-gram lookup in one drafter (drafter.h; --spec-type hybrid).
 *
 * Each step, for each sequence, the n-gram lookup runs first (free: a search of the
 * sequence's own tokens). Its draft of length L is kept instead of a DFlash draft when it
 * promises more tokens per second:
 *   (E_l + 1) / T_v  >  (E_d + 1) / (T_v + T_d)
 * with E_l = r + r^2 + .. + r^L (r the lookup's learned per-token acceptance), E_d the mean
 * accepted length of this drafter's recent DFlash steps, T_v a step's verify (from the end of
 * the draft to the target's report) and T_d a DFlash forward, both decayed means of this
 * drafter's own single-sequence steps. A timed lookup drafts no more than a DFlash draft
 * holds, so both verify about as many rows and T_v is one price for both. Where the clock may not steer (spec_draft_req.timed false), before both
 * times are measured, and in steps of several sequences (whose forward the others share) the
 * rule weighs tokens alone: E_l > E_d. Where the lookup is not taken, DFlash drafts, unless
 * (timed) its (E_d + 1) / (T_v + T_d) falls below a plain step's 1 / T_v: then the step drafts
 * nothing but for one in HY_EXPLORE, which keeps E_d and T_d current (the realized-rate guard
 * of run and serve makes the same call from measured step rates). Sequences that took the
 * lookup, or a plain step, skip the drafter forward.
 * r is learned from every lookup draft, taken or not: at the sequence's next draft its tokens
 * are compared with what the target wrote at their positions (matches until the first
 * mismatch; a draft the cut shortened is judged on what the target then wrote, so a cut is
 * not a rejection). Without the untaken drafts r would stay at its prior and the lookup would
 * never be tried. The choice reads nothing of this step's DFlash draft: a sampled DFlash draft
 * stays a draw from its proposal q and rejection sampling stays exact; lookup drafts carry no q
 * and verify by sample-and-match. Either way the output is the target's.
 * Where it wins: code edits, quotes of the prompt, RAG — text that repeats, where a lookup
 * proposes long runs that DFlash's block cannot reach — and where a DFlash forward costs a
 * large share of a step, since a lookup accepting fewer tokens can still be faster.
 *
 * Nothing is allocated after the constructor.
 */
#include "spec/drafter.h"
#include "core/rng.h"
#include "model/api.h"
#include "spec/api.h"
#include "core/clock.h"

#include <stdlib.h>

#define HY_DECAY 0.98       /* per observed step: about the last 50 steps count       */
#define HY_PRIOR_R 0.5      /* the lookup's per-token acceptance before any evidence  */
#define HY_PRIOR_W 4.0      /* ... worth this many tokens                             */
#define HY_PRIOR_DF 1.0     /* DFlash's accepted tokens per step before any evidence  */
#define HY_DECAY_T 0.9      /* per timed step: prices follow the machine within ~10 steps */
#define HY_EXPLORE 16       /* a DFlash draft priced below a plain step still runs 1 in 16 */

enum { SRC_NONE, SRC_DFLASH, SRC_NGRAM };

typedef struct hybrid {
    spec_drafter base;
    spec_drafter *inner;         /* owned: the DFlash drafter */
    spex_ngram_params ng;
    double ng_ok, ng_tot;        /* decayed accepted / judged lookup tokens  */
    double df_acc, df_steps;     /* decayed accepted tokens / DFlash steps   */
    double tv, tv_w, td, td_w;   /* decayed verify / DFlash forward seconds and their weights */
    double t_mark;               /* when a timed step's draft ended; 0: none open             */
    uint64_t n_plain;            /* steps where DFlash was priced below a plain step          */
    uint8_t *src;                /* [n_seq]: what drafted this step          */
    int32_t *lk_n, *lk_pos;      /* [n_seq]: the last lookup draft, unjudged; its first position */
    int32_t *lk_ids;             /* [n_seq][SPEX_DRAFT_MAX_N]: its tokens    */
    spec_draft_req *sub;         /* [n_seq]: the requests DFlash drafts      */
    int32_t *sub_of;             /* [n_seq]: their index in the caller's     */
    spex_draft *sub_out;         /* [n_seq]                                  */
} hybrid;

static double expected_lookup(const hybrid *h, int32_t L) {
    double r = (h->ng_ok + HY_PRIOR_R * HY_PRIOR_W) / (h->ng_tot + HY_PRIOR_W), e = 0, v = 1;
    for (int32_t p = 0; p < L; p++) e += (v *= r);
    return e;
}

static double expected_dflash(const hybrid *h) { return (h->df_acc + HY_PRIOR_DF) / (h->df_steps + 1.0); }

/* The rule of the header: whether a lookup of e_l expected tokens beats DFlash's e_d. */
static bool take_lookup(const hybrid *h, double e_l, double e_d, bool timed) {
    if (!timed || h->tv_w <= 0 || h->td_w <= 0) return e_l > e_d;
    const double tv = h->tv / h->tv_w, td = h->td / h->td_w;
    return (e_l + 1.0) * (tv + td) > (e_d + 1.0) * tv;
}

/* Whether DFlash's expected tokens a second fall below a plain step's, 1 / T_v (T_v, the mean
 * over drafting steps, overstates a one-row verify: the test leans towards drafting). */
static bool dflash_loses(const hybrid *h, double e_d, bool timed) {
    if (!timed || h->tv_w <= 0 || h->td_w <= 0) return false;
    const double tv = h->tv / h->tv_w, td = h->td / h->td_w;
    return (e_d + 1.0) * tv < tv + td;
}

static void decay_add(double *sum, double *w, double x) {
    *sum = HY_DECAY_T * *sum + x;
    *w = HY_DECAY_T * *w + 1.0;
}

/* Judges seq's last lookup draft against the tokens the target has written since
 * (hist[0 .. pos], the anchor at pos): matches up to the first mismatch, a failure at it;
 * positions not written yet are left unjudged. */
static void judge_lookup(hybrid *h, const spec_draft_req *r) {
    int32_t *n = &h->lk_n[r->seq];
    if (*n <= 0 || !r->hist) return;
    const int32_t *ids = h->lk_ids + (size_t)r->seq * SPEX_DRAFT_MAX_N, p0 = h->lk_pos[r->seq];
    int32_t ok = 0;
    bool miss = false;
    for (; ok < *n && p0 + ok <= r->pos; ok++)
        if (r->hist[p0 + ok] != ids[ok]) {
            miss = true;
            break;
        }
    h->ng_ok = HY_DECAY * h->ng_ok + ok;
    h->ng_tot = HY_DECAY * h->ng_tot + ok + (miss ? 1 : 0);
    *n = 0;
}

static spex_status hy_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                            uint64_t *n_batches, spex_error *err) {
    hybrid *h = (hybrid *)d;
    int32_t n_sub = 0;
    const double e_df = expected_dflash(h);
    const bool timed = n == 1 && reqs[0].timed;
    for (int32_t i = 0; i < n; i++) {
        spex_draft *o = &out[i];
        spec_draft_req lr = reqs[i];
        /* timed: no longer than a DFlash draft, so both verify as many rows and T_v prices both
         * (a compute-bound verify of 17 rows costs ~3x one of 6) */
        if (timed && lr.n_max > h->inner->n_max_limit) lr.n_max = h->inner->n_max_limit;
        spec_lookup_draft(&lr, &h->ng, o);   /* writes the anchor into hist */
        judge_lookup(h, &reqs[i]);
        const int32_t sq = reqs[i].seq;
        h->lk_n[sq] = o->n;
        h->lk_pos[sq] = reqs[i].pos + 1;
        for (int32_t j = 0; j < o->n; j++) h->lk_ids[(size_t)sq * SPEX_DRAFT_MAX_N + j] = o->ids[j];
        if (o->n > 0 && take_lookup(h, expected_lookup(h, o->n), e_df, timed)) {
            h->src[reqs[i].seq] = SRC_NGRAM;
            continue;
        }
        o->n = 0;
        if (dflash_loses(h, e_df, timed) && ++h->n_plain % HY_EXPLORE != 0) {
            h->src[sq] = SRC_NONE;   /* a plain step */
            continue;
        }
        h->sub[n_sub] = reqs[i];
        if (h->sub[n_sub].n_max > h->inner->n_max_limit) h->sub[n_sub].n_max = h->inner->n_max_limit;
        h->sub_of[n_sub++] = i;
        h->src[reqs[i].seq] = SRC_DFLASH;
    }
    spex_status st = SPEX_OK;
    if (n_sub > 0) {
        const double t0 = spex_now_s();
        st = h->inner->ops->draft(h->inner, h->sub, n_sub, h->sub_out, n_batches, err);
        for (int32_t k = 0; k < n_sub && st == SPEX_OK; k++) out[h->sub_of[k]] = h->sub_out[k];
        if (timed) decay_add(&h->td, &h->td_w, spex_now_s() - t0);
    }
    h->t_mark = timed ? spex_now_s() : 0;
    return st;
}

/* Learns from the rows the target accepted (n = accepted drafts + 1), then passes them on. */
static spex_status hy_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                            bool idle, spex_error *err) {
    hybrid *h = (hybrid *)d;
    if (h->t_mark > 0) {   /* the first report after a timed draft: the verify's price */
        decay_add(&h->tv, &h->tv_w, spex_now_s() - h->t_mark);
        h->t_mark = 0;
    }
    if (!idle && h->src[seq] == SRC_DFLASH) {   /* lookup drafts are judged at the next draft */
        h->df_acc = HY_DECAY * h->df_acc + (n - 1);
        h->df_steps = HY_DECAY * h->df_steps + 1;
    }
    h->src[seq] = SRC_NONE;
    return h->inner->ops->wrote(h->inner, seq, toks, r0, n, pos0, idle, err);
}

static spex_status hy_commit(spec_drafter *d, spex_error *err) {
    spec_drafter *in = ((hybrid *)d)->inner;
    return in->ops->commit(in, err);
}

static bool hy_can_keep(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len) {
    const spec_drafter *in = ((const hybrid *)d)->inner;
    return in->ops->can_keep(in, seq, n_keep, len);
}

static spex_status hy_keep(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err) {
    ((hybrid *)d)->lk_n[seq] = 0;   /* the positions it would be judged at may be rewritten */
    spec_drafter *in = ((hybrid *)d)->inner;
    return in->ops->keep(in, seq, n_keep, err);
}

static int32_t hy_have(const spec_drafter *d, int32_t seq) {
    const spec_drafter *in = ((const hybrid *)d)->inner;
    return in->ops->have(in, seq);
}

static void hy_seq_end(spec_drafter *d, int32_t seq) {
    hybrid *h = (hybrid *)d;
    h->src[seq] = SRC_NONE;
    h->lk_n[seq] = 0;
    h->inner->ops->seq_end(h->inner, seq);
}

static void hy_free(spec_drafter *d) {
    hybrid *h = (hybrid *)d;
    if (!h) return;
    if (h->inner) h->inner->ops->free(h->inner);
    free(h->src);
    free(h->lk_n);
    free(h->lk_pos);
    free(h->lk_ids);
    free(h->sub);
    free(h->sub_of);
    free(h->sub_out);
    free(h);
}

static const spec_drafter_ops HYBRID_OPS = {
    .name = "hybrid", .draft = hy_draft, .wrote = hy_wrote, .commit = hy_commit, .can_keep = hy_can_keep,
    .keep = hy_keep, .have = hy_have, .seq_end = hy_seq_end, .free = hy_free,
};

spec_drafter *spec_drafter_hybrid_inner(spec_drafter *d) {
    return d && d->ops == &HYBRID_OPS ? ((hybrid *)d)->inner : d;
}

spex_status spec_drafter_hybrid(spec_drafter *inner, int32_t n_seq, const spex_ngram_params *p, spec_drafter **out,
                                spex_error *err) {
    if (p->size_n < 1 || p->size_n > 1024 || p->size_m < 1 || p->min_hits < 1)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: ngram: size n %d (1..1024), size m %d and min hits %d (>= 1)",
                              p->size_n, p->size_m, p->min_hits);
    hybrid *h = calloc(1, sizeof *h);
    if (!h) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    h->base = *inner;   /* its sizes, limits and bookkeeping pointers */
    h->base.ops = &HYBRID_OPS;
    h->base.wants_hist = true;
    h->base.n_max_limit = SPEX_DRAFT_MAX_N;   /* a lookup may run past DFlash's block */
    h->base.block_size = 0;
    h->base.replaceable = false;
    h->ng = *p;
    h->src = calloc((size_t)n_seq, 1);
    h->lk_n = calloc((size_t)n_seq, sizeof(int32_t));
    h->lk_pos = calloc((size_t)n_seq, sizeof(int32_t));
    h->lk_ids = malloc(sizeof(int32_t) * SPEX_DRAFT_MAX_N * (size_t)n_seq);
    h->sub = malloc(sizeof *h->sub * (size_t)n_seq);
    h->sub_of = malloc(sizeof(int32_t) * (size_t)n_seq);
    h->sub_out = malloc(sizeof *h->sub_out * (size_t)n_seq);
    if (!h->src || !h->lk_n || !h->lk_pos || !h->lk_ids || !h->sub || !h->sub_of || !h->sub_out) {
        hy_free(&h->base);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    }
    h->inner = inner;
    *out = &h->base;
    return SPEX_OK;
}
