/*
 * guard.h — the realized-rate guard: does drafting deliver more tokens per second than plain
 * steps, measured by the clock rather than predicted?
 *
 * What it is: decayed sums of the tokens emitted and the seconds spent by steps that drafted
 * and by steps that did not (spex_realized), the verdict from them, and the plan of one
 * sequence's steps built on it (spec_guard, spec.c, spex_spec_params.guard): plain steps while
 * drafting measures slower, one drafting step in SPEC_GUARD_EVERY to keep its rate fresh, and
 * one plain step in SPEC_GUARD_EXPLORE while the plain rate is not yet known (else a sequence
 * that always drafts never measures the alternative) — unless an estimate of the plain rate
 * (the draft cut's price of a one-row verify) puts drafting SPEC_GUARD_MARGIN ahead of it: a
 * short generation that drafts well then pays no learning steps (on the default pair's demo
 * prompts, ~60 tokens each, they had cost 8 %). The server keeps one spex_realized per
 * number of stepping slots and plans with its cost model (server/engine.c); this is the
 * same measurement for one sequence without one.
 * Why: the draft cut (cut.h) trims a walked draft, but the drafter's forward is paid before
 * it; where acceptance collapses (a drafter far from its training distribution: the trained
 * default pair at 2200 characters of context ran 0.55x of the target alone) only skipping the
 * draft recovers the target's own speed. Lossless either way: a plain step is the target's.
 */
#ifndef SPEX_SPEC_GUARD_H
#define SPEX_SPEC_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#define SPEX_REALIZED_DECAY 0.97 /* forgetting factor, per recorded step of the same kind     */

/* Decayed sums by kind of step: [1] some sequence drafted, [0] none did. */
typedef struct {
    double tok[2], sec[2], w[2];
} spex_realized;

/* Records one step of n_tok tokens in sec seconds. */
void spex_realized_add(spex_realized *r, bool drafted, double n_tok, double sec);
/* True when both kinds of step have at least min_w weight and the drafting steps delivered
 * fewer tokens per second than the plain ones. */
bool spex_realized_veto(const spex_realized *r, double min_w);

#define SPEC_GUARD_W 4.0      /* weight of each kind before the guard judges (5 steps)        */
#define SPEC_GUARD_EXPLORE 3  /* a plain step in this many while plain steps weigh < W        */
#define SPEC_GUARD_EVERY 64   /* under a veto, one drafting step in this many                 */
#define SPEC_GUARD_MARGIN 1.25 /* no learning while drafting measures this far above the estimate */
#define SPEC_GUARD_CLIP 3.0   /* a step counts at most this many times its kind's mean seconds */

typedef struct spec_guard {
    spex_realized r;
    uint64_t n_steps; /* steps planned */
} spec_guard;

/* Whether the next step of the sequence should be plain (no draft); counts the step.
 * plain_est: an estimate of a plain step's tokens per second, 0 if none. */
bool spec_guard_plain(spec_guard *g, double plain_est);
/* Records a step of the sequence: spex_realized_add with its seconds clipped at
 * SPEC_GUARD_CLIP times the mean of its kind so far. A step of a small model takes well under
 * a millisecond, and one preemption of the thread (milliseconds on a busy machine) would
 * otherwise weigh as dozens of steps and could veto drafting that pays for 64 steps. */
void spec_guard_record(spec_guard *g, bool drafted, double n_tok, double sec);

#endif
