/*
 * verify.c — the acceptance rules of speculative verification (../shared/docs/dflash2.md
 * §15.4, numerics §20) as pure functions; the contract is src/spec/verify.h.
 *
 * What it is: p(id) and q̃(id) lookups, the fp32 acceptance test u·q̃(d) < p(d), and the
 * residual draw from norm(max(0, p − q̃)) with its fallback to p. What it is not: the loop
 * that drafts, batches, emits and rolls back (spec.c), nor the chain producing p.
 *
 * Every function is a linear scan: p has at most the sampler's surviving tokens and q has K
 * (<= 64) entries, and a slot is verified once. Nothing here allocates or draws randomness:
 * the caller passes uniforms from the stream of each purpose (§15.5).
 */
#include "spec/verify.h"
#include "sample/api.h"

float spex_verify_p_of(const spex_token_prob *p, int32_t n_p, int32_t id) {
    for (int32_t i = 0; i < n_p; i++)
        if (p[i].id == id) return p[i].p;
    return 0.0f;
}

float spex_verify_q_of(const int32_t *cand, const float *q, int32_t K, int32_t id) {
    for (int32_t k = 0; k < K; k++)
        if (cand[k] == id) return q[k];
    return 0.0f;
}

bool spex_verify_accept(const spex_token_prob *p, int32_t n_p, int32_t d, const int32_t *cand, const float *q,
                        int32_t K, float u) {
    const float pd = spex_verify_p_of(p, n_p, d);
    const float qd = spex_verify_q_of(cand, q, K, d);
    /* Acceptance probability min(1, p/q) without a division: u < p/q <=> u*q < p (q > 0);
     * a token outside the proposal (q = 0) is accepted iff p > 0. fp32 as §20 asks. */
    const float uq = u * qd;
    return uq < pd;
}

int32_t spex_verify_residual(const spex_token_prob *p, int32_t n_p, const int32_t *cand, const float *q,
                             int32_t K, double u, spex_token_prob *scratch) {
    if (n_p <= 0) return -1;
    double mass = 0.0;
    for (int32_t i = 0; i < n_p; i++) {
        const double r = (double)p[i].p - (double)spex_verify_q_of(cand, q, K, p[i].id);
        scratch[i].id = p[i].id;
        scratch[i].p = r > 0.0 ? (float)r : 0.0f;
        mass += (double)scratch[i].p;
    }
    /* p <= q̃ everywhere (p == q̃ up to rounding): the rejection had probability ~0, and the
     * rule of §15.4 step 3 samples p itself. Tokens where q̃ > p get no residual mass and
     * tokens outside p's support never appear (the scan is over p's entries only). */
    if (!(mass > 0.0)) return spex_sampler_sample_from(p, n_p, u);
    return spex_sampler_sample_from(scratch, n_p, u);
}
