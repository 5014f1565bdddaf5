/*
 * spec_test.h — a test-only switch of the speculative loop (spec.c): deliberately broken
 * acceptance rules, so that tests/test_spec.c can show its distribution test fails them, and
 * eager injection as the reference of deferred injection.
 * Not part of the public API; nothing outside tests calls it.
 */
#ifndef SPEX_SPEC_SPEC_TEST_H
#define SPEX_SPEC_SPEC_TEST_H

#include "spex.h"

#define SPEX_SPEC_TEST_NONE 0
#define SPEX_SPEC_TEST_ACCEPT_ALWAYS 1   /* every drafted token accepted, whatever p and q */
#define SPEX_SPEC_TEST_NO_DEFER 2        /* inject every verified row at once (the reference for
                                          * deferred injection), not a broken rule */
#define SPEX_SPEC_TEST_CUT_PEEK 3        /* a draft cut that reads the drafted token itself (keeps
                                          * a proposal-q draft only when d_1 is q_1's mode): not a
                                          * stopping time of the draft, so not lossless at T > 0 */

void spex_spec_test_break(spex_spec *s, int mode);

/* Lowers the pending-feature capacity per sequence (tests: a small cap makes the overflow
 * flush happen on tiny models, whose natural cap is the whole context); returns the cap in
 * force (the natural one when cap is not below it). */
int32_t spex_spec_test_pend_cap(spex_spec *s, int32_t cap);

#endif
