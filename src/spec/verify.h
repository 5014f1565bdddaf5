/*
 * verify.h — the acceptance rules of speculative verification (../shared/docs/dflash2.md §15),
 * as pure functions over one slot's target distribution p and the draft's proposal.
 *
 * What it is: exact match (T = 0), sample-and-match (§15.3), rejection sampling against a
 * proposal q over K candidates (§15.4) with its residual norm(max(0, p - q)). What it is not:
 * the loop that drafts, batches, rolls back and emits (spec.c), or the sampling chain that
 * produces p (src/sample: spex_sampler_dist, which is exactly what plain sampling draws from).
 *
 * Conventions: p is a sparse distribution, (id, p) pairs of nonzero mass summing to 1 (within
 * float rounding), in the order spex_sampler_dist returns them; q is K candidate ids with their
 * proposal masses (q̃ is zero for every other token). Uniforms come from the caller, one stream
 * per purpose (§15.5): acceptance uniforms and residual/bonus draws never share a stream.
 */
#ifndef SPEX_SPEC_VERIFY_H
#define SPEX_SPEC_VERIFY_H

#include "spex.h"
#include "sample/api.h"

/* p(id): the mass of id in p (0 when absent). */
float spex_verify_p_of(const spex_token_prob *p, int32_t n_p, int32_t id);

/* q̃(id): the proposal mass of id (0 when id is not among the K candidates). */
float spex_verify_q_of(const int32_t *cand, const float *q, int32_t K, int32_t id);

/* §15.4 step 2: accept d iff u * q̃(d) < p(d), computed in fp32. u in [0, 1). */
bool spex_verify_accept(const spex_token_prob *p, int32_t n_p, int32_t d, const int32_t *cand, const float *q,
                        int32_t K, float u);

/* §15.4 step 3: a token from r(x) = max(0, p(x) - q̃(x)) / sum_y max(0, p(y) - q̃(y)), by inverse
 * CDF over p's order with uniform u in [0, 1) (sums in double); when the normaliser is 0 (p <= q̃
 * everywhere) it samples p itself with the same u. `scratch` holds n_p entries. */
int32_t spex_verify_residual(const spex_token_prob *p, int32_t n_p, const int32_t *cand, const float *q,
                             int32_t K, double u, spex_token_prob *scratch);

#endif
