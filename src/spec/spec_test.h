/*
 * spec_test.h — test seams of the speculative loop (spec.c), for tests/test_spec.c only: a
 * verdict hook that can break the acceptance rule and a cut hook that can peek at the draft
 * (so the distribution test can show it catches both), and the DFlash drafter's pending-feature
 * capacity (0 = eager injection, the reference of deferred injection).
 * Not part of the public API; nothing outside tests calls it.
 */
#ifndef SPEX_SPEC_SPEC_TEST_H
#define SPEX_SPEC_SPEC_TEST_H

#include "spex.h"
#include "model/api.h"
#include "spec/api.h"

/* Gets the acceptance rule's verdict on one drafted token and returns the one the loop uses
 * (the loop's own hook returns it unchanged). */
typedef bool (*spex_spec_test_verdict_fn)(void *user, bool verdict);
void spex_spec_test_set_verdict(spex_spec *s, spex_spec_test_verdict_fn fn, void *user);

/* Gets a single sequence's draft and the length the draft cut chose; returns the length
 * verified (the loop's own hook returns the cut's choice). */
typedef int32_t (*spex_spec_test_cut_fn)(void *user, const spex_draft *d, int32_t n_cut_rule);
void spex_spec_test_set_cut(spex_spec *s, spex_spec_test_cut_fn fn, void *user);

/* Lowers the DFlash drafter's pending-feature capacity per sequence (a small cap makes the
 * overflow flush happen on tiny models, whose natural cap is the whole context; 0 injects
 * every row at once); returns the cap in force (0 without a DFlash drafter). */
int32_t spex_spec_test_pend_cap(spex_spec *s, int32_t cap);

#endif
