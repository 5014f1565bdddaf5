/*
 * kq_act.h — pieces of the Q8_K activation quantizer shared by its AVX2 and AVX-512
 * versions (dot_kquants_avx2.c, dot_kquants_avx512.c).
 *
 * Include it only from files built with AVX2 or wider. Both quantizers must write exactly
 * the bytes of spex_quantize_row_q8_K_ref; one copy of each piece keeps them from drifting.
 */
#ifndef SPEX_CPU_X86_KQ_ACT_H
#define SPEX_CPU_X86_KQ_ACT_H

#include <immintrin.h>
#include <stdint.h>

#include "cpu/arch/x86/kq_prefetch.h"
#include "tensor/blocks.h"

/* bs[s] = sum of the 16 codes of group s, from the block's 256 codes held in registers: c[t]
 * holds codes 32t .. 32t + 31 in order. The quantizers pass the codes they just computed
 * rather than reading the stored qs back (a few % of the quantizer's time; with 16-byte
 * stores, a 32-byte load over two of them cannot be store-forwarded at all). */
KQ_INLINE void kq_bsums(const __m256i c[8], int16_t *bs) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i v[8];
    for (int t = 0; t < 8; t++) /* 128-bit lane L of v[t]: 4 partial sums of group 2t+L */
        v[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, c[t]), ones16);
    const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
    /* lane L: s0 = groups L, 2+L, 4+L, 6+L; s1 = groups 8+L, ..., 14+L */
    const __m256i s0 = _mm256_hadd_epi32(h0, h1), s1 = _mm256_hadd_epi32(h2, h3);
    const __m256i p = _mm256_packs_epi32(s0, s1); /* |sum| <= 2048: no saturation */
    const __m128i ev = _mm256_castsi256_si128(p), od = _mm256_extracti128_si256(p, 1);
    _mm_storeu_si128((__m128i *)bs, _mm_unpacklo_epi16(ev, od));
    _mm_storeu_si128((__m128i *)(bs + 8), _mm_unpackhi_epi16(ev, od));
}

/* The block's largest element of magnitude as the reference picks it (the first x with |x|
 * = amax, with its sign), from the block's largest value hi and the negated smallest nlo,
 * both taken from 0 with NaNs skipped; 0 when amax is 0 (a zero block). When only one of
 * +amax and -amax occurs that value is the answer with no search (whose exit branch
 * mispredicts, a visible part of the quantizer's time); a block holding both is searched. */
KQ_INLINE float kq_amax_elem(const float *x, float hi, float nlo) {
    if (hi > nlo) return hi;
    if (nlo > hi) return -nlo;
    if (hi == 0.0f) return 0.0f;
    for (int k = 0; k < QK_K; k++)
        if (x[k] == hi || x[k] == -hi) return x[k];
    return hi; /* not reached: hi is one of the block's values */
}

#endif
