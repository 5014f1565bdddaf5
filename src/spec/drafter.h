/*
 * drafter.h — the interface every drafter of the speculative loop implements (spec.c).
 *
 * The loop owns the target, the samplers, the acceptance rules and each sequence's token
 * history; a drafter owns whatever it keeps beside the target (a draft KV cache, pending
 * features, carried hidden states) and answers five questions:
 *   draft   propose up to n_max tokens after each stepping sequence's anchor;
 *   wrote   the target's last forward wrote these tokens of a sequence (batch rows r0 ..,
 *           whose taps the drafter may read); a step reports only the accepted rows;
 *   commit  end of a forward's reports: run what was batched across sequences;
 *   keep    the target now keeps only the first n_keep positions of a sequence;
 *   seq_end the sequence is forgotten.
 * Each implementation lives in its own file (draft_dflash.c, draft_mtp.c, draft_fn.c,
 * draft_model.c, draft_hybrid.c) and depends on the loop only through this header. A drafter is created by its
 * constructor below, owned by the loop and freed with it.
 */
#ifndef SPEX_SPEC_DRAFTER_H
#define SPEX_SPEC_DRAFTER_H

#include "spex.h"
#include "core/rng.h"
#include "model/api.h"
#include "spec/api.h"

/* One sequence's draft request of a step. */
typedef struct spec_draft_req {
    int32_t seq;
    int32_t anchor;          /* the last emitted token, at position pos                       */
    int32_t pos;             /* = the target cache's length                                   */
    int32_t n_max;           /* >= 1                                                          */
    float temp;              /* > 0: the sequence verifies by rejection, so a proposal q helps */
    float p_min;             /* walk stop (spex_spec_params.p_min)                            */
    spex_rng *rng;           /* the sequence's draft stream                                   */
    int32_t *hist;           /* its tokens at 0 .. pos - 1 with room for the anchor at pos; NULL
                              * when the loop does not know them                              */
    bool timed;              /* the draft may follow the clock (spex_spec_params.draft_cut; off
                              * for a fixed seed on the rejection path, so runs repeat)       */
} spec_draft_req;

typedef struct spec_drafter spec_drafter;

typedef struct spec_drafter_ops {
    const char *name;
    /* Drafts every request (distinct sequences) into out[i]; *n_batches += drafter batches run. */
    spex_status (*draft)(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                         uint64_t *n_batches, spex_error *err);
    /* The target wrote toks[0 .. n) of seq at positions pos0 .. from batch row r0. idle: this
     * forward drafted nothing for seq (a prompt chunk, a plain step), so work may wait. */
    spex_status (*wrote)(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                         bool idle, spex_error *err);
    spex_status (*commit)(spec_drafter *d, spex_error *err);
    /* Whether the drafter can follow the target back to n_keep of len positions. */
    bool (*can_keep)(const spec_drafter *d, int32_t seq, int32_t n_keep, int32_t len);
    spex_status (*keep)(spec_drafter *d, int32_t seq, int32_t n_keep, spex_error *err);
    /* Positions it accounts for (its cache plus what waits), -1 when it catches up lazily;
     * the loop checks this equals the target's length (invariant A, dflash2.md §16). */
    int32_t (*have)(const spec_drafter *d, int32_t seq);
    void (*seq_end)(spec_drafter *d, int32_t seq);
    void (*free)(spec_drafter *d);
} spec_drafter_ops;

/* Filled by the constructor; the loop reads it. */
struct spec_drafter {
    const spec_drafter_ops *ops;
    int32_t n_max_default;   /* draft length when spex_spec_params.n_max is 0                   */
    int32_t n_max_limit;     /* most tokens one draft can hold (a larger n_max is clamped)      */
    int32_t block_size;      /* DFlash: the trained block (named in the clamp's warning); else 0 */
    int32_t n_ctx;           /* positions per sequence it can follow (0: the target's)          */
    int32_t max_blocks;      /* most sequences drafted in one step (0: no limit)                */
    bool has_q;              /* its drafts at T > 0 carry a proposal q (rejection path)         */
    bool wants_hist;         /* the loop must keep each sequence's tokens for it                */
    bool rollback;           /* a recurrent target needs its state ring of n_max copies         */
    bool replaceable;        /* keeps nothing beside the target: may be swapped between steps  */
    spex_spec_stats *total;  /* the loop's: drafters book their backlog time (t_flush) there    */
    spex_spec_stats *seq_st; /* [n_seq], the same per sequence                                  */
};

/* The constructors check the pairing with the target context and return SPEX_OK with *out
 * set, or an error with context. */
spex_status spec_drafter_dflash(spex_context *t, spex_draft_context *dc, spec_drafter **out, spex_error *err);
spex_status spec_drafter_mtp(spex_context *t, spex_mtp_context *mc, spec_drafter **out, spex_error *err);
/* inner (owned, may be NULL): a drafter with a cache that keeps following the target while fn
 * drafts; spec_drafter_fn_unwrap frees the function drafter and returns it (d itself when d
 * is not a function drafter). */
spex_status spec_drafter_fn(spex_spec_draft_fn fn, void *user, spec_drafter *inner, spec_drafter **out,
                            spex_error *err);
spec_drafter *spec_drafter_fn_unwrap(spec_drafter *d);
spec_drafter *spec_drafter_fn_inner(spec_drafter *d);   /* the wrapped one, or d */
spex_status spec_drafter_ngram(const spex_ngram_params *p, spec_drafter **out, spex_error *err);
spex_status spec_drafter_model(spex_context *t, spex_context *dctx, spec_drafter **out, spex_error *err);
/* inner (owned): the DFlash drafter the n-gram lookup competes with (draft_hybrid.c). */
spex_status spec_drafter_hybrid(spec_drafter *inner, int32_t n_seq, const spex_ngram_params *p, spec_drafter **out,
                                spex_error *err);
spec_drafter *spec_drafter_hybrid_inner(spec_drafter *d);   /* the wrapped one, or d */

/* The n-gram lookup's draft for one request (draft_fn.c): nothing without a history; the anchor
 * is written after it; each slot gets a fixed confidence by position. Hybrid drafting uses it too. */
void spec_lookup_draft(const spec_draft_req *r, const spex_ngram_params *ng, spex_draft *out);

/* The DFlash drafter's pending features of seq (0 for other drafters), and its capacity
 * (tests lower it; 0: inject every row at once). */
int32_t spec_drafter_dflash_pending(const spec_drafter *d, int32_t seq);
int32_t spec_drafter_dflash_pend_cap(spec_drafter *d, int32_t cap);

#endif
