/*
 * draft_fn.c — drafters with nothing beside the target (drafter.h): a caller's draft function
 * (spex_spec_set_draft_fn: tests, lookup drafting of an embedder) and n-gram prompt lookup
 * over each sequence's own tokens (spex_spec_set_ngram; the lookup itself is ngram.c).
 * They keep no cache, so following the target anywhere costs nothing. A draft function set on
 * a loop that has a drafter with a cache wraps it: the function drafts, and the wrapped drafter
 * keeps following the target (so the function can be removed again between steps).
 */
#include "spec/drafter.h"
#include "core/rng.h"
#include "model/api.h"
#include "spec/api.h"

#include <stdlib.h>

typedef struct fn_drafter {
    spec_drafter base;
    spex_spec_draft_fn fn;
    void *user;
    spex_ngram_params ng;
    spec_drafter *inner;        /* owned, may be NULL: the drafter the function stands in for */
} fn_drafter;

static spex_status fn_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                            uint64_t *n_batches, spex_error *err) {
    (void)n_batches;
    fn_drafter *f = (fn_drafter *)d;
    for (int32_t i = 0; i < n; i++) {
        spex_status st = f->fn(f->user, reqs[i].seq, reqs[i].anchor, reqs[i].pos, reqs[i].n_max, &out[i], err);
        if (st != SPEX_OK) return st;
        if (out[i].n < 0 || out[i].n > reqs[i].n_max)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spec: draft function returned %d tokens (max %d)",
                                  out[i].n, reqs[i].n_max);
    }
    return SPEX_OK;
}

/* The lookup over the request's history with the anchor appended. A lookup has no confidence
 * of its own; one per slot position (0.95, 0.85, .. 0.05 from the tenth on) puts each position
 * in a bin of its own, so the draft cut learns the acceptance of a lookup's first, second, ..
 * token and verifies only the part that pays (cut.h). */
void spec_lookup_draft(const spec_draft_req *r, const spex_ngram_params *ng, spex_draft *o) {
    o->n = 0;
    o->has_q = false;
    if (!r->hist) return;   /* history unknown: no draft, which is always lossless */
    /* the anchor's place; the next forward writes it there too (the loop keeps room) */
    r->hist[r->pos] = r->anchor;
    o->n = spex_ngram_lookup(r->hist, r->pos + 1, ng, r->n_max, o->ids);
    for (int32_t j = 0; j < o->n; j++) o->conf[j] = 0.95f - 0.1f * (float)(j < 9 ? j : 9), o->kidx[j] = 0;
}

static spex_status ngram_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                               uint64_t *n_batches, spex_error *err) {
    (void)n_batches, (void)err;
    for (int32_t i = 0; i < n; i++) spec_lookup_draft(&reqs[i], &((fn_drafter *)d)->ng, &out[i]);
    return SPEX_OK;
}

static spex_status fn_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                            bool idle, spex_error *err) {
    spec_drafter *in = ((fn_drafter *)d)->inner;
    return in ? in->ops->wrote(in, seq, toks, r0, n, pos0, idle, err) : SPEX_OK;
}

static spex_status fn_commit(spec_drafter *d, spex_error *err) {
    spec_drafter *in = ((fn_drafter *)d)->inner;
    return in ? in->ops->commit(in, err) : SPEX_OK;
}

static bool fn_can_keep(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len) {
    const spec_drafter *in = ((const fn_drafter *)d)->inner;
    return in ? in->ops->can_keep(in, seq, n_keep, len) : n_keep >= 0 && n_keep <= len;
}

static spex_status fn_keep(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err) {
    spec_drafter *in = ((fn_drafter *)d)->inner;
    return in ? in->ops->keep(in, seq, n_keep, err) : SPEX_OK;
}

static int32_t fn_have(const spec_drafter *d, int32_t seq) {
    const spec_drafter *in = ((const fn_drafter *)d)->inner;
    return in ? in->ops->have(in, seq) : -1;
}

static void fn_seq_end(spec_drafter *d, int32_t seq) {
    spec_drafter *in = ((fn_drafter *)d)->inner;
    if (in) in->ops->seq_end(in, seq);
}

static void fn_free(spec_drafter *d) {
    fn_drafter *f = (fn_drafter *)d;
    if (f && f->inner) f->inner->ops->free(f->inner);
    free(f);
}

static const spec_drafter_ops FN_OPS = {
    .name = "function", .draft = fn_draft, .wrote = fn_wrote, .commit = fn_commit, .can_keep = fn_can_keep,
    .keep = fn_keep, .have = fn_have, .seq_end = fn_seq_end, .free = fn_free,
};

static const spec_drafter_ops NGRAM_OPS = {
    .name = "ngram", .draft = ngram_draft, .wrote = fn_wrote, .commit = fn_commit, .can_keep = fn_can_keep,
    .keep = fn_keep, .have = fn_have, .seq_end = fn_seq_end, .free = fn_free,
};

spex_status spec_drafter_fn(spex_spec_draft_fn fn, void *user, spec_drafter *inner, spec_drafter **out,
                            spex_error *err) {
    fn_drafter *f = calloc(1, sizeof *f);
    if (!f) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    f->base = (spec_drafter){.ops = &FN_OPS, .n_max_default = 7, .n_max_limit = SPEX_DRAFT_MAX_N, .has_q = true,
                             .replaceable = !inner};
    if (inner) {
        f->base.n_ctx = inner->n_ctx;
        f->base.rollback = inner->rollback;
        f->base.wants_hist = inner->wants_hist;
        f->base.total = inner->total;
        f->base.seq_st = inner->seq_st;
    }
    f->fn = fn;
    f->user = user;
    f->inner = inner;
    *out = &f->base;
    return SPEX_OK;
}

spec_drafter *spec_drafter_fn_inner(spec_drafter *d) {
    return d && d->ops == &FN_OPS ? ((fn_drafter *)d)->inner : d;
}

spec_drafter *spec_drafter_fn_unwrap(spec_drafter *d) {
    if (!d || d->ops != &FN_OPS) return d;
    spec_drafter *in = ((fn_drafter *)d)->inner;
    free(d);
    return in;
}

spex_status spec_drafter_ngram(const spex_ngram_params *p, spec_drafter **out, spex_error *err) {
    if (p->size_n < 1 || p->size_n > 1024 || p->size_m < 1 || p->min_hits < 1)
        return spex_error_set(err, SPEX_ERR_RANGE, "spec: ngram: size n %d (1..1024), size m %d and min hits %d (>= 1)",
                              p->size_n, p->size_m, p->min_hits);
    fn_drafter *f = calloc(1, sizeof *f);
    if (!f) return spex_error_set(err, SPEX_ERR_NOMEM, "spec: out of memory");
    f->base = (spec_drafter){.ops = &NGRAM_OPS, .n_max_default = 7, .n_max_limit = SPEX_DRAFT_MAX_N, .has_q = true,
                             .wants_hist = true, .replaceable = true};
    f->ng = *p;
    *out = &f->base;
    return SPEX_OK;
}
