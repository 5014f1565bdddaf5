/*
 * rng.c — the random number generator every stochastic part of spex draws from:
 * xoshiro256** (Blackman & Vigna 2018), seeded through splitmix64.
 *
 * What it is: spex.h's spex_rng_* functions. It lives in core because the sampler
 * (src/sample) and the drafter's candidate selector (src/model/dflash_select.c) both draw from
 * it, and neither may depend on the other (they sit on one layer; README.md, Layout).
 * What it is not: a cryptographic generator.
 */
#include "spex.h"
#include "core/rng.h"

#include <stdint.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void spex_rng_seed(spex_rng *r, uint64_t seed) {
    /* splitmix64 never yields four zero words in a row, so the state is never all zero
     * (the one state xoshiro cannot leave). */
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

void spex_rng_seed_stream(spex_rng *r, uint64_t seed, uint64_t stream) {
    /* Hash the pair instead of adding: seed + stream would make (s, t + 1) equal (s + c, t). */
    uint64_t a = seed, b = stream ^ 0xd1b54a32d192ed03ull;
    uint64_t h = splitmix64(&a) ^ rotl64(splitmix64(&b), 29);
    spex_rng_seed(r, h);
}

uint64_t spex_rng_next(spex_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

float spex_rng_uniform(spex_rng *r) { return (float)(spex_rng_next(r) >> 40) * 0x1p-24f; }

double spex_rng_uniform_f64(spex_rng *r) { return (double)(spex_rng_next(r) >> 11) * 0x1p-53; }
