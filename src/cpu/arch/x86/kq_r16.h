/*
 * kq_r16.h — what the R16 K-quant kernels at 512 bits (avx512/dot_kquants_avx512.c) and at 256
 * bits with AVX-VNNI (avx2/dot_kquants_r16_avxvnni.c) share: the R16 group and unit geometry
 * (cpu/matmul.h "The R16 weight layout") and the activation rows' minimum pairs.
 *
 * Include it only from files built with AVX2 or wider (kq_bpairs uses AVX2 instructions).
 * The two kernels compute the same bits lane for lane; keeping these in one place keeps them
 * from drifting apart.
 */
#ifndef SPEX_CPU_X86_KQ_R16_H
#define SPEX_CPU_X86_KQ_R16_H

#include <immintrin.h>
#include <stdint.h>

#include "cpu/arch/x86/kq_prefetch.h"
#include "tensor/blocks.h"

#define KQ_WB 16    /* weight rows per R16 group (one per 32-bit lane of a 64-byte word) */
#define KQ_WSPAN 64 /* super-blocks whose minimum pairs are prepared per call and span   */

/* Q6_K's R16 unit: ql words 0..31, then at these byte offsets */
#define KQ6_QH (32 * 64) /* qh word 0              */
#define KQ6_SC (48 * 64) /* the scale words        */
#define KQ6_D (52 * 64)  /* the 16 fp16 d          */
#define KQ6_UNIT (16 * 210) /* bytes of one unit (16 blocks) */

/* One activation row's minimum pairs for one super-block: dword t = int16 pair
 * (bsums[4t] + bsums[4t+1], bsums[4t+2] + bsums[4t+3]), t < 4. */
typedef struct {
    int32_t p[4];
} kq_bpair;

/* The minimum pairs of nbs super-blocks of one activation row: the 16 bsums' neighbour pairs
 * in order are the 8 int16 halves of p[0..3], one vphaddw (wrapping, like the int16 casts of
 * the definition) and the two lanes' low halves side by side. */
KQ_INLINE void kq_bpairs(const block_q8_K *xr, int nbs, kq_bpair *bp) {
    for (int b = 0; b < nbs; b++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)xr[b].bsums);
        const __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi16(v, v), _MM_SHUFFLE(3, 1, 2, 0));
        _mm_storeu_si128((__m128i *)bp[b].p, _mm256_castsi256_si128(h));
    }
}

#endif
