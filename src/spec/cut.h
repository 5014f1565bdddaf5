/*
 * cut.h — the cost-aware draft cut of the speculative loop (spec.c; docs/speculative.md
 * "Cost-aware draft cut"): how many of a walked draft's tokens are worth verifying.
 *
 * What it is: a model of one step's price and of each drafted slot's chance of acceptance,
 * both learned online from the steps themselves, and the stopping rule that uses them.
 *  - Price: a step that verifies k rows costs C(k) = F + v0 + v1·k seconds, F the drafting and
 *    bookkeeping time, v0 + v1·k the target's verify forward, fitted by exponentially decayed
 *    least squares over single-sequence steps. On a compute-bound verify (a fast-memory
 *    moment, a large target) a row costs nearly as much as a decode step; on a memory-bound
 *    one almost nothing, and the rule then keeps every token.
 *  - Acceptance: slot p's chance of acceptance given that the slots before it were accepted,
 *    a(conf_p), from decayed accepted / verified counts in bins of the walk's confidence
 *    (dflash2.md §13, §14: the chosen edge's softmax at T = 0, max q_p at T > 0), each bin
 *    starting from the confidence itself as a prior of SPEC_CUT_PRIOR observations.
 *  - Rule: with V_p = a(conf_1) ... a(conf_p) and E_p = 1 + V_1 + ... + V_p expected tokens,
 *    slot p is kept while E_p / C(p + 1) > E_{p-1} / C(p): the step's expected tokens per
 *    second still rise. Since V_p falls along the draft, the first slot where the rate stops
 *    rising is where it peaks (an average rises only while the marginal exceeds it).
 * Losslessness: the decision to keep slot p reads conf_1 .. conf_p and the earlier slots'
 * tokens, never d_p or anything after it, so it is a stopping time of the draft's own
 * information and verification stays exact at T > 0 (dflash2.md §14: truncating on draft-side
 * information is lossless); at T = 0 any draft is lossless.
 * What it is not: the server's choice of each slot's length before drafting (engine.c), which
 * prices concurrent slots; the cut acts after the walk, in steps of one sequence.
 */
#ifndef SPEX_SPEC_CUT_H
#define SPEX_SPEC_CUT_H

#include <stdbool.h>
#include <stdint.h>

#define SPEC_CUT_BINS 10       /* confidence bins of width 0.1                                 */
#define SPEC_CUT_PRIOR 2.0     /* a bin starts as this many observations at its confidence     */
#define SPEC_CUT_DECAY 0.98    /* forgetting factor of the price, per step                     */
#define SPEC_CUT_DECAY_SLOT 0.995 /* ... and of the acceptance bins, per judged slot          */
#define SPEC_CUT_WARMUP 8      /* first drafting steps: full and half drafts alternate         */
#define SPEC_CUT_EXPLORE 16    /* afterwards one drafting step in this many verifies it all    */
#define SPEC_CUT_CLIP 3.0      /* a step's seconds count as at most this many times predicted  */

typedef struct spec_cut {
    double s0, s1, s2, sy, sky;                /* decayed Σw, Σw·k, Σw·k², Σw·t, Σw·k·t         */
    double f_s, f_w;                           /* decayed Σ (draft + other) seconds, Σw         */
    double acc[SPEC_CUT_BINS], tot[SPEC_CUT_BINS];   /* decayed accepted / verified slots       */
    uint64_t n_steps;                          /* drafting single-sequence steps observed       */
} spec_cut;

void spec_cut_init(spec_cut *c);

/* a(conf): the estimated acceptance chance of a slot of confidence conf (NaN counts as 0). */
double spec_cut_accept_p(const spec_cut *c, float conf);

/* The price line: false while it is not yet known (too few steps, or every step verified
 * the same number of rows); then *v0 + *v1·k is the verify time of k rows and *f the rest. */
bool spec_cut_price(const spec_cut *c, double *f, double *v0, double *v1);

/* How many of the n drafted slots (confidences conf[0..n-1]) to verify: n itself during the
 * warm-up's full steps and the exploration steps, about half in the warm-up's other steps,
 * n while the price is unknown, else the rule above. */
int32_t spec_cut_choose(const spec_cut *c, const float *conf, int32_t n);

/* After a drafting single-sequence step: its verify rows k and seconds, its other seconds
 * (drafting, acceptance, injection), and the slots: n verified with confidences conf, the
 * first m accepted. */
void spec_cut_observe(spec_cut *c, int32_t k, double t_verify, double t_rest, const float *conf, int32_t n,
                      int32_t m);

#endif
