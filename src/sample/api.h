/*
 * sample/api.h — the sampler's interface below the embedding API: the final distribution the
 * chain produces, draws from it, the penalty history and the sampler's own random stream;
 * what the speculative loop's verification needs (src/sample/sampler.c). include/spex.h has
 * the parameters and the sampler's life cycle. Dependencies: core, and spex.h.
 */
#ifndef SPEX_SAMPLE_API_H
#define SPEX_SAMPLE_API_H

#include "spex.h"
#include "core/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One entry of a final distribution. */
typedef struct spex_token_prob {
    int32_t id;
    float p;
} spex_token_prob;


const spex_sampler_params *spex_sampler_get_params(const spex_sampler *s);
int32_t spex_sampler_n_vocab(const spex_sampler *s);
/* The sampler's own RNG (the stream spex_sampler_sample draws from); owned by s. */
spex_rng *spex_sampler_rng(spex_sampler *s);
/* Appends an emitted token to the penalty history (sample does not accept by itself).
 * SPEX_ERR_RANGE for an id outside [0, n_vocab). */
spex_status spex_sampler_accept(spex_sampler *s, int32_t token);

/* The final distribution p for logits[0 .. n_vocab): the whole chain applied to the logits
 * with the current penalty history, then softmax over the survivors. Writes the tokens of
 * nonzero probability to out[0 .. *n_out) as (id, p), p summing to 1 (within float rounding),
 * in an unspecified but deterministic order (the chain's working order; descending after a
 * top-k that nothing later reorders). Greedy (temp <= 0) gives the single entry (argmax, 1). At most
 * n_vocab entries, so cap = n_vocab always suffices; SPEX_ERR_RANGE with the needed count in
 * *n_out if cap is smaller. NaN logits count as -inf; SPEX_ERR_INVALID_ARG if no logit is
 * finite after the chain (greedy always picks by the argmax rule). Exactly what
 * spex_sampler_sample draws from (dflash2.md §15.1). */
spex_status spex_sampler_dist(spex_sampler *s, const float *logits, spex_token_prob *out, int32_t cap,
                              int32_t *n_out, spex_error *err);
/* One token from logits: greedy, or spex_sampler_sample_from(dist, u) with u drawn from the
 * sampler's RNG (one spex_rng_uniform_f64 per call; greedy draws none). */
spex_status spex_sampler_sample(spex_sampler *s, const float *logits, int32_t *token, spex_error *err);
/* Inverse CDF over dist in its order: the first entry whose running sum exceeds u * sum(p)
 * (running sums in double), u in [0, 1). Entries with p <= 0 are never chosen. -1 if n <= 0. */
int32_t spex_sampler_sample_from(const spex_token_prob *dist, int32_t n, double u);

#ifdef __cplusplus
}
#endif
#endif
