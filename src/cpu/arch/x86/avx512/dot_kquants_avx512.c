/*
 * dot_kquants_avx512.c — AVX-512 (F/BW/VL/DQ, optionally VNNI) K-quant matmul kernels:
 * Q4_K, Q5_K, Q6_K weights × Q8_K activations, and the Q8_K activation quantizer.
 *
 * What it is: SIMD twins of ref/dot_kquants_ref.c (the specification) following the tile
 * contract of src/cpu/matmul.h; the quantizer writes exactly the bytes of
 * spex_quantize_row_q8_K_ref. What it is not: a prompt-size GEMM with repacked weights —
 * weights are read in their ggml layout, each super-block unpacked once per tile.
 *
 * Dimension legend: n elements per row, nb = n/256 super-blocks; tile of nw weight rows ×
 * nx activation rows; G <= 8 activation rows share one unpacked weight super-block (their
 * accumulators live in registers); SPEX_KQ_CHUNK super-blocks are summed in lanes before a
 * horizontal sum goes to y; "slots" are prepared activation super-blocks on the stack.
 *
 * The layout trick. A super-block is 256 int8 products; vpdpbusd sums 4 adjacent byte
 * products into each of 16 int32 lanes. If each lane always covers the same sub-block
 * (the unit that shares one scale), all 4 vpdpbusd of a super-block accumulate into one
 * register and the scales are applied once per lane, in float. The natural order does not
 * have that property (a 64-byte vector spans 2 or 4 sub-blocks), so both operands are put
 * in the same permuted order: with N_i the natural 64-byte vectors (elements 64i..64i+63,
 * i = 0..3), a 4x4 transpose of 32-bit words inside each 128-bit lane gives
 *     T_k dword (4L + i) = N_i dword (4L + k)          (L = 128-bit lane, k = 0..3)
 * so lane 4L+i of every T_k covers elements 64i + 16L + 4k + 0..3: always sub-block 4i+L
 * for Q6_K (16 elements). For Q4_K/Q5_K (32 elements) the 128-bit lanes are also reordered
 * (0,2,1,3), making lane 4L+i cover sub-block 2i + (L&1): both 256-bit halves then hold
 * the same 8 sub-blocks, so one integer add folds them and the float work (convert, scale,
 * accumulate, minimums) runs on 8 lanes — the float units are the ones vpdpbusd needs.
 * Activations are reordered once per tile into stack slots (shared by all nw weight rows);
 * weights are gathered straight into that order with vpermt2d (shared by all nx rows).
 * Per (weight row, activation row, super-block): 4 vpdpbusd, then Q4_K/Q5_K: fold, convert
 * and 3 eight-lane multiplies/fmas; Q6_K: convert and 2 sixteen-lane ones.
 *
 * Minimums (Q4_K/Q5_K): -dmin*m[s] * dx * (bsums[2s] + bsums[2s+1]) as an 8-lane fma of a
 * weight-side vector (-dmin*m) and an activation-side one (dx*bsum pairs), into the same
 * accumulator. Q6_K's offset 32 shares the sub-block's scale, so -32*bsums[s] simply
 * starts that lane's integer sum (codes are used unsigned, 0..63, as vpdpbusd needs).
 *
 * Without VNNI, vpdpbusd is replaced by vpmaddubsw (int16 pair sums; never saturating here:
 * |2*63*128| < 2^15) summed in int16 (4 for Q4_K/Q5_K, 2 for Q6_K — still below 2^15)
 * and widened by vpmaddwd with ones: the same integers, so both variants agree bit for bit.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/arch/x86/kq_prefetch.h"
#include "cpu/kquants_internal.h"
#include "tensor/blocks.h"

#define KQ_G 8      /* activation rows per register group                      */
#define KQ_SLOTS 64 /* prepared activation super-blocks on the stack (20 KiB)  */

/* One activation super-block in the permuted order, plus what the sums need (its dx is
 * kept apart, in kq_xbuf.d, to keep the slot at 320 bytes). The slots must stay in the
 * 32 KiB L1 next to the streaming weights: every weight row re-reads all of them, and
 * with 128 slots (48 KiB) the 8-row case ran 60% slower even with everything in cache. */
typedef struct {
    _Alignas(64) int8_t q[QK_K];
    union {
        float f[16];   /* Q4_K/Q5_K: f[s] = dx * (bsums[2s] + bsums[2s+1]), s < 8   */
        int32_t i[16]; /* Q6_K: lane 4L+i = -32 * bsums[4i+L] (the transposed order) */
    } b;
} kq_xprep;

typedef struct {
    kq_xprep s[KQ_SLOTS];
    float d[KQ_SLOTS];
} kq_xbuf;

/* KQ_INLINE, kq_prefetch, KQ_PF_AHEAD and kq_visit_ahead: cpu/arch/x86/kq_prefetch.h. */

/* ======================================================================== */
/* Activations                                                               */
/* ======================================================================== */

/* 4x4 transpose of 32-bit words inside each 128-bit lane: out_k.L.i = in_i.L.k. */
KQ_INLINE void kq_transpose(__m512i *a0, __m512i *a1, __m512i *a2, __m512i *a3) {
    const __m512i t0 = _mm512_unpacklo_epi32(*a0, *a1); /* a0.0 a1.0 a0.1 a1.1 */
    const __m512i t1 = _mm512_unpackhi_epi32(*a0, *a1); /* a0.2 a1.2 a0.3 a1.3 */
    const __m512i t2 = _mm512_unpacklo_epi32(*a2, *a3);
    const __m512i t3 = _mm512_unpackhi_epi32(*a2, *a3);
    *a0 = _mm512_unpacklo_epi64(t0, t2);
    *a1 = _mm512_unpackhi_epi64(t0, t2);
    *a2 = _mm512_unpacklo_epi64(t1, t3);
    *a3 = _mm512_unpackhi_epi64(t1, t3);
}

/* The codes in the permuted order; lanes45: also reorder 128-bit lanes (0,2,1,3). */
KQ_INLINE void kq_prep_q(const block_q8_K *x, kq_xprep *p, float *d, const int lanes45) {
    __m512i n[4];
    for (int i = 0; i < 4; i++) n[i] = _mm512_loadu_si512(x->qs + 64 * i);
    kq_transpose(&n[0], &n[1], &n[2], &n[3]);
    for (int k = 0; k < 4; k++) {
        if (lanes45) n[k] = _mm512_shuffle_i64x2(n[k], n[k], _MM_SHUFFLE(3, 1, 2, 0));
        _mm512_store_si512(p->q + 64 * k, n[k]);
    }
    *d = x->d;
}

/* Q4_K and Q5_K: dx times the 8 sums of 32 activation codes. */
static void kq_prep_q45(const block_q8_K *x, kq_xprep *p, float *d) {
    kq_prep_q(x, p, d, 1);
    const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
    const __m256i pair = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(pair), _mm256_set1_ps(x->d));
    _mm256_store_ps(p->b.f, f);
}

/* lane 4L+i <- element 4i+L: the transposed order of 16 per-sub-block values (Q6_K). */
#define KQ_IDX_T _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)

static void kq_prep_q6(const block_q8_K *x, kq_xprep *p, float *d) {
    kq_prep_q(x, p, d, 0);
    const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)x->bsums));
    const __m512i t = _mm512_permutexvar_epi32(KQ_IDX_T, bs);
    _mm512_store_si512(p->b.i, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(t, 5)));
}

/* ======================================================================== */
/* Integer sums and horizontal sums                                          */
/* ======================================================================== */

/* init + sum_k w[k] . q[64k..] lane by lane (unsigned w, signed q). chain4: the int16
 * partial sums of 4 vpmaddubsw fit (Q4_K/Q5_K); else 2 (Q6_K). See the file comment. */
KQ_INLINE __m512i kq_dot(const __m512i w[4], const int8_t *q, __m512i init, const int vnni,
                         const int chain4) {
    const __m512i x0 = _mm512_load_si512(q), x1 = _mm512_load_si512(q + 64);
    const __m512i x2 = _mm512_load_si512(q + 128), x3 = _mm512_load_si512(q + 192);
    if (vnni) {
        __m512i acc = _mm512_dpbusd_epi32(init, w[0], x0);
        acc = _mm512_dpbusd_epi32(acc, w[1], x1);
        acc = _mm512_dpbusd_epi32(acc, w[2], x2);
        return _mm512_dpbusd_epi32(acc, w[3], x3);
    }
    const __m512i ones = _mm512_set1_epi16(1);
    const __m512i p01 = _mm512_add_epi16(_mm512_maddubs_epi16(w[0], x0), _mm512_maddubs_epi16(w[1], x1));
    const __m512i p23 = _mm512_add_epi16(_mm512_maddubs_epi16(w[2], x2), _mm512_maddubs_epi16(w[3], x3));
    /* This file is built with -mavx512vnni, and clang fuses vpmaddwd + vpaddd into the VNNI
     * vpdpwssd, which the CPUs this variant exists for lack. An empty asm is a barrier to
     * that (it emits nothing); objdump of the non-VNNI functions shows no vpdp*. */
    if (chain4) {
        __m512i a = _mm512_madd_epi16(_mm512_add_epi16(p01, p23), ones);
        __asm__("" : "+v"(a));
        return _mm512_add_epi32(init, a);
    }
    __m512i a = _mm512_madd_epi16(p01, ones), b = _mm512_madd_epi16(p23, ones);
    __asm__("" : "+v"(a), "+v"(b));
    return _mm512_add_epi32(init, _mm512_add_epi32(a, b));
}

KQ_INLINE float kq_hsum8(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

KQ_INLINE float kq_hsum16(__m512 a) {
    return kq_hsum8(_mm256_add_ps(_mm512_castps512_ps256(a),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
}

/* ======================================================================== */
/* Weights                                                                   */
/* ======================================================================== */

/* Q4_K/Q5_K super-block in registers: codes w[k] (unsigned bytes); sm = d*sc[2i+L] in
 * lane 4L+i (the folded 8-lane order), then -dmin*m[s] in lane 8+s. */
typedef struct {
    __m512i w[4];
    __m512 sm;
} kq_wreg45;

/* d, dmin and the 6-bit scales and mins (packing: quant_ref.h, spex_kq_get_scale_min) of a
 * Q4_K or Q5_K block, which both start with d, dmin, scales[12]. */
KQ_INLINE void kq_scales_q45(const void *blk, kq_wreg45 *r) {
    const __m128i v = _mm_loadu_si128((const __m128i *)blk); /* d dmin | u0 u1 u2 */
    /* sc[0..3] = u0 & 63, m[0..3] = u1 & 63,
     * sc[4..7] = (u2 & 15) | (u0 >> 6) << 4, m[4..7] = (u2 >> 4) | (u1 >> 6) << 4 (bytewise) */
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)); /* u0 u2 u1 u2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)); /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    /* bytes sc0..sc7 m0..m7, then scales in the folded order sc0 sc2 sc4 sc6 sc1 sc3 sc5 sc7 */
    const __m128i sm = _mm_shuffle_epi8(_mm_or_si128(lo, hi),
                                        _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
    const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(v), _mm_setr_ps(1.0f, -1.0f, 0.0f, 0.0f)); /* d, -dmin */
    const __m512 mult = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                              _mm512_castps128_ps512(dd));
    r->sm = _mm512_mul_ps(f, mult);
}

/* Q4_K: lane 4L+i of w[k] = nibble (L&1) of qs dword 8i + 4(L>>1) + k. */
KQ_INLINE void kq_unpack_q4_K(const block_q4_K *b, kq_wreg45 *r) {
    const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 4, 12, 20, 28, 4, 12, 20, 28);
    const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i a = _mm512_loadu_si512(b->qs), c = _mm512_loadu_si512(b->qs + 64);
    for (int k = 0; k < 4; k++) {
        const __m512i g = _mm512_permutex2var_epi32(a, _mm512_add_epi32(idx, _mm512_set1_epi32(k)), c);
        r->w[k] = _mm512_and_si512(_mm512_srlv_epi32(g, sh), m4);
    }
    kq_scales_q45(b, r);
}

/* Q5_K: Q4_K plus bit s = 2i + (L&1) (the sub-block) of qh byte 16(L>>1) + 4k + t,
 * rotated to bit 4. */
KQ_INLINE void kq_unpack_q5_K(const block_q5_K *b, kq_wreg45 *r) {
    const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 4, 12, 20, 28, 4, 12, 20, 28);
    const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i hidx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    /* rotating left by (4 - s) mod 32 moves bit s of every byte to bit 4 */
    const __m512i rot = _mm512_setr_epi32(4, 2, 0, 30, 3, 1, 31, 29, 4, 2, 0, 30, 3, 1, 31, 29);
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i a = _mm512_loadu_si512(b->qs), c = _mm512_loadu_si512(b->qs + 64);
    const __m512i qh = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b->qh));
    for (int k = 0; k < 4; k++) {
        const __m512i kk = _mm512_set1_epi32(k);
        const __m512i g = _mm512_permutex2var_epi32(a, _mm512_add_epi32(idx, kk), c);
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(g, sh), m4);
        const __m512i h = _mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(hidx, kk), qh), rot);
        r->w[k] = _mm512_ternarylogic_epi32(lo, h, b4, 0xf8); /* lo | (h & b4) */
    }
    kq_scales_q45(b, r);
}

/* Q6_K super-block in registers: codes w[k] (0..63), d*sc[4i+L] in lane 4L+i. */
typedef struct {
    __m512i w[4];
    __m512 sc;
} kq_wreg6;

/* Q6_K: lane 4L+i of w[k] = nibble i%2 of ql dword 16(i/2) + 4L + k, with bits
 * 4(i%2) + 2(L/2) .. +1 of qh dword 8(i/2) + 4(L%2) + k as bits 4..5. */
KQ_INLINE void kq_unpack_q6_K(const block_q6_K *b, kq_wreg6 *r) {
    const __m512i lidx = _mm512_setr_epi32(0, 0, 16, 16, 4, 4, 20, 20, 8, 8, 24, 24, 12, 12, 28, 28);
    const __m512i sh = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i hidx = _mm512_setr_epi32(0, 0, 8, 8, 4, 4, 12, 12, 0, 0, 8, 8, 4, 4, 12, 12);
    const __m512i rot = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 2, 30, 2, 30, 2, 30, 2, 30);
    const __m512i m4 = _mm512_set1_epi8(0x0f), b45 = _mm512_set1_epi8(0x30);
    const __m512i a = _mm512_loadu_si512(b->ql), c = _mm512_loadu_si512(b->ql + 64);
    const __m512i qh = _mm512_loadu_si512(b->qh);
    for (int k = 0; k < 4; k++) {
        const __m512i kk = _mm512_set1_epi32(k);
        const __m512i g = _mm512_permutex2var_epi32(a, _mm512_add_epi32(lidx, kk), c);
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(g, sh), m4);
        const __m512i h = _mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(hidx, kk), qh), rot);
        r->w[k] = _mm512_ternarylogic_epi32(lo, h, b45, 0xf8); /* lo | (h & b45) */
    }
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
    r->sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(KQ_IDX_T, sc)),
                          _mm512_set1_ps(_cvtsh_ss(b->d)));
}

/* ======================================================================== */
/* Chunks and tiles                                                          */
/* ======================================================================== */

/* One weight row over nbc (<= SPEX_KQ_CHUNK) super-blocks against g activation rows whose
 * prepared slots are xp[j*xstride + b]: sums[j] = that part of the dot product. pf: the
 * weight blocks to prefetch meanwhile (0: none). */
#define KQ_CHUNK45_FN(name, wblock, unpack)                                                  \
    KQ_INLINE void name(const wblock *wb, const kq_xprep *xp, const float *xd, int xstride, int nbc, \
                        uintptr_t pf, const int g, const int vnni, float *sums) {            \
        __m256 acc[KQ_G];                                                                     \
        _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) acc[j] = _mm256_setzero_ps();    \
        for (int b = 0; b < nbc; b++) {                                                       \
            kq_wreg45 r;                                                                      \
            kq_prefetch(pf ? pf + (uintptr_t)b * sizeof(wblock) : 0, sizeof(wblock));         \
            unpack(wb + b, &r);                                                               \
            const __m256 sc = _mm512_castps512_ps256(r.sm);                                   \
            const __m256 mn = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r.sm), 1)); \
            _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) {                            \
                const kq_xprep *p = xp + (size_t)j * (size_t)xstride + b;                     \
                const float dx = xd[(size_t)j * (size_t)xstride + b];                         \
                const __m512i s16 = kq_dot(r.w, p->q, _mm512_setzero_si512(), vnni, 1);       \
                /* both 256-bit halves hold the same 8 sub-blocks: fold them */               \
                const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s16),              \
                                                    _mm512_extracti64x4_epi64(s16, 1));       \
                const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s8),                      \
                                                 _mm256_mul_ps(sc, _mm256_set1_ps(dx)), acc[j]); \
                acc[j] = _mm256_fmadd_ps(mn, _mm256_load_ps(p->b.f), t);                      \
            }                                                                                 \
        }                                                                                     \
        _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) sums[j] = kq_hsum8(acc[j]);      \
    }

KQ_CHUNK45_FN(kq_chunk_q4_K, block_q4_K, kq_unpack_q4_K)
KQ_CHUNK45_FN(kq_chunk_q5_K, block_q5_K, kq_unpack_q5_K)

KQ_INLINE void kq_chunk_q6_K(const block_q6_K *wb, const kq_xprep *xp, const float *xd, int xstride, int nbc,
                             uintptr_t pf, const int g, const int vnni, float *sums) {
    __m512 acc[KQ_G];
    _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nbc; b++) {
        kq_wreg6 r;
        kq_prefetch(pf ? pf + (uintptr_t)b * sizeof(block_q6_K) : 0, sizeof(block_q6_K));
        kq_unpack_q6_K(wb + b, &r);
        _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) {
            const kq_xprep *p = xp + (size_t)j * (size_t)xstride + b;
            const float dx = xd[(size_t)j * (size_t)xstride + b];
            const __m512i s16 = kq_dot(r.w, p->q, _mm512_load_si512(p->b.i), vnni, 0);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s16), _mm512_mul_ps(r.sc, _mm512_set1_ps(dx)), acc[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < g; j++) sums[j] = kq_hsum16(acc[j]);
}

/* The tile loop. Activation rows go in groups of G <= 8; a span of super-blocks (as many
 * as the stack slots hold for G rows, a multiple of SPEX_KQ_CHUNK) is prepared per group,
 * then every weight row runs over the span chunk by chunk. Chunk boundaries are multiples
 * of SPEX_KQ_CHUNK from the row start whatever the tile, and y receives the chunk sums in
 * order, so each output's arithmetic is independent of nw, nx and the split. */
#define KQ_TILE_FN(name, wblock, prep, chunk, vnni)                                          \
    void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,              \
              size_t x_stride, int nx, float *y, size_t ldy) {                               \
        const int64_t nb = n / QK_K;                                                         \
        const int G = nx < KQ_G ? nx : KQ_G;                                                 \
        const int span = KQ_SLOTS / G / SPEX_KQ_CHUNK * SPEX_KQ_CHUNK;                       \
        kq_xbuf xb;                                                                          \
        for (int64_t b0 = 0; b0 < nb; b0 += span) {                                          \
            const int nbs = (int)(nb - b0 < span ? nb - b0 : span);                          \
            for (int j0 = 0; j0 < nx; j0 += G) {                                             \
                const int g = nx - j0 < G ? nx - j0 : G;                                     \
                for (int j = 0; j < g; j++) {                                                \
                    const block_q8_K *xr =                                                   \
                        (const block_q8_K *)((const uint8_t *)x + (size_t)(j0 + j) * x_stride) + b0; \
                    for (int b = 0; b < nbs; b++) prep(xr + b, &xb.s[j * nbs + b], &xb.d[j * nbs + b]); \
                }                                                                            \
                for (int i = 0; i < nw; i++) {                                               \
                    const wblock *wr =                                                       \
                        (const wblock *)((const uint8_t *)w + (size_t)i * w_stride) + b0;    \
                    float *yo = y + (size_t)j0 * ldy + (size_t)i;                            \
                    for (int c0 = 0; c0 < nbs; c0 += SPEX_KQ_CHUNK) {                        \
                        const int nbc = nbs - c0 < SPEX_KQ_CHUNK ? nbs - c0 : SPEX_KQ_CHUNK; \
                        const uintptr_t pf = span < nb || G >= 3 ? kq_visit_ahead((uintptr_t)wr, w_stride, \
                                                            i, nw, c0, nbs, sizeof(wblock)) : 0; \
                        float sums[KQ_G];                                                    \
                        const kq_xprep *xp = xb.s + c0;                                      \
                        const float *xd = xb.d + c0;                                         \
                        switch (g) {                                                         \
                        case 1: chunk(wr + c0, xp, xd, nbs, nbc, pf, 1, vnni, sums); break;      \
                        case 2: chunk(wr + c0, xp, xd, nbs, nbc, pf, 2, vnni, sums); break;      \
                        case 3: chunk(wr + c0, xp, xd, nbs, nbc, pf, 3, vnni, sums); break;      \
                        case 4: chunk(wr + c0, xp, xd, nbs, nbc, pf, 4, vnni, sums); break;      \
                        case 5: chunk(wr + c0, xp, xd, nbs, nbc, pf, 5, vnni, sums); break;      \
                        case 6: chunk(wr + c0, xp, xd, nbs, nbc, pf, 6, vnni, sums); break;      \
                        case 7: chunk(wr + c0, xp, xd, nbs, nbc, pf, 7, vnni, sums); break;      \
                        default: chunk(wr + c0, xp, xd, nbs, nbc, pf, 8, vnni, sums); break;     \
                        }                                                                    \
                        if (b0 + c0 == 0) {                                                  \
                            for (int j = 0; j < g; j++) yo[(size_t)j * ldy] = sums[j];       \
                        } else {                                                             \
                            for (int j = 0; j < g; j++) yo[(size_t)j * ldy] += sums[j];      \
                        }                                                                    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

KQ_TILE_FN(spex_dot_q4_K_avx512, block_q4_K, kq_prep_q45, kq_chunk_q4_K, 0)
KQ_TILE_FN(spex_dot_q5_K_avx512, block_q5_K, kq_prep_q45, kq_chunk_q5_K, 0)
KQ_TILE_FN(spex_dot_q6_K_avx512, block_q6_K, kq_prep_q6, kq_chunk_q6_K, 0)
KQ_TILE_FN(spex_dot_q4_K_avx512_vnni, block_q4_K, kq_prep_q45, kq_chunk_q4_K, 1)
KQ_TILE_FN(spex_dot_q5_K_avx512_vnni, block_q5_K, kq_prep_q45, kq_chunk_q5_K, 1)
KQ_TILE_FN(spex_dot_q6_K_avx512_vnni, block_q6_K, kq_prep_q6, kq_chunk_q6_K, 1)

/* ======================================================================== */
/* Q8_K activation quantizer                                                 */
/* ======================================================================== */

/* bs[s] = sum of the 16 codes q[16s..16s+15]. */
KQ_INLINE void kq_bsums(const int8_t *q, int16_t *bs) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i v[8];
    for (int t = 0; t < 8; t++) /* 128-bit lane L of v[t]: 4 partial sums of group 2t+L */
        v[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(q + 32 * t))), ones16);
    const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
    /* lane L: s0 = groups L, 2+L, 4+L, 6+L; s1 = groups 8+L, ..., 14+L */
    const __m256i s0 = _mm256_hadd_epi32(h0, h1), s1 = _mm256_hadd_epi32(h2, h3);
    const __m256i p = _mm256_packs_epi32(s0, s1); /* |sum| <= 2048: no saturation */
    const __m128i ev = _mm256_castsi256_si128(p), od = _mm256_extracti128_si256(p, 1);
    _mm_storeu_si128((__m128i *)bs, _mm_unpacklo_epi16(ev, od));
    _mm_storeu_si128((__m128i *)(bs + 8), _mm_unpackhi_epi16(ev, od));
}

/* Same steps as spex_quantize_row_q8_K_ref, including ggml's nearest_int (add 1.5*2^23,
 * keep the mantissa) rather than a conversion instruction, so that even NaN, Inf and
 * denormal-scale inputs give the reference's bytes. */
void spex_act_quant_q8_K_avx512(const float *x, void *dst, int64_t n) {
    block_q8_K *y = (block_q8_K *)dst;
    const int64_t nb = n / QK_K;
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512i mant = _mm512_set1_epi32(0x007fffff), bias = _mm512_set1_epi32(0x00400000);
    const __m512i lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        /* vmaxps returns its second operand when the first is NaN: NaNs are skipped like
         * the reference's "ax > amax" */
        __m512 m = _mm512_setzero_ps();
        for (int t = 0; t < QK_K / 16; t++) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * t)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference keeps the first element of largest magnitude, with its sign */
        int idx = 0;
        for (int t = 0; t < QK_K / 16; t++) {
            const __mmask16 k = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * t)),
                                                   _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (k) {
                idx = 16 * t + __builtin_ctz((unsigned)k);
                break;
            }
        }
        const float iscale = -127.0f / x[idx];
        const __m512 is = _mm512_set1_ps(iscale);
        for (int t = 0; t < QK_K / 16; t++) {
            const __m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * t), is), magic);
            __m512i v = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(f), mant), bias);
            v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * t), _mm512_cvtepi32_epi8(v));
        }
        kq_bsums(y[i].qs, y[i].bsums);
        y[i].d = 1.0f / iscale;
    }
}
