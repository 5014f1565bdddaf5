/*
 * core/rng.h — the random number streams of the sampler and the speculative loop (core/rng.c):
 * xoshiro256** seeded through splitmix64, one plain value per stream.
 */
#ifndef SPEX_CORE_RNG_H
#define SPEX_CORE_RNG_H


#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

/* Random numbers: xoshiro256** seeded through splitmix64. A plain value: copy it to fork a
 * stream; keep one per purpose for independent streams (dflash2.md §15.5: draft walk,
 * acceptance uniforms, residual/bonus sampling). Not cryptographic. */
typedef struct spex_rng {
    uint64_t s[4];
} spex_rng;

void spex_rng_seed(spex_rng *r, uint64_t seed);
/* Stream `stream` of `seed`: distinct (seed, stream) pairs give unrelated sequences. */
void spex_rng_seed_stream(spex_rng *r, uint64_t seed, uint64_t stream);
uint64_t spex_rng_next(spex_rng *r);
float spex_rng_uniform(spex_rng *r);       /* [0, 1) from the top 24 bits */
double spex_rng_uniform_f64(spex_rng *r);  /* [0, 1) from the top 53 bits */

#ifdef __cplusplus
}
#endif
#endif
