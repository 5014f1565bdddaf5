/*
 * dot_kquants_avx2.c — AVX2+FMA K-quant matmul kernels: Q4_K, Q5_K, Q6_K weights × Q8_K
 * activations, and the Q8_K activation quantizer.
 *
 * What it is: SIMD twins of ref/dot_kquants_ref.c (the specification) following the tile
 * contract of src/cpu/matmul.h; the quantizer writes exactly the bytes of
 * spex_quantize_row_q8_K_ref. What it is not: a prompt-size GEMM with repacked weights.
 *
 * Dimension legend: n elements per row, nb = n/256 super-blocks; tile of nw weight rows ×
 * nx activation rows; G <= 8 activation rows share one unpacked weight super-block;
 * SPEX_KQ_CHUNK super-blocks are summed in lanes before a horizontal sum goes to y;
 * "slots" are prepared activation super-blocks on the stack.
 *
 * The layout trick (as in the AVX-512 file, at 256 bits). vpmaddubsw gives int16 sums of
 * byte pairs; if an int16 lane covers the same sub-block in several vectors, those vectors
 * can be summed in int16 and the sub-block's scale applied once with vpmaddwd. With N_m
 * the natural 32-byte vectors (elements 32m..32m+31, m = 0..7), a 4x4 transpose of 32-bit
 * words inside each 128-bit lane, per group g of four (m = 4g..4g+3), gives
 *     T_{g,k} dword (4L + i) = N_{4g+i} dword (4L + k)      (L = 128-bit lane, k = 0..3)
 * whose lane 4L+i always covers sub-block 4g+i (Q4_K/Q5_K, 32 elements) or 8g+2i+L (Q6_K,
 * 16 elements). Activations are transposed once per tile into stack slots (shared by all
 * weight rows), weights once per super-block (shared by all activation rows). Per pair
 * and super-block: 8 vpmaddubsw, int16 adds (4 in a row for Q4_K/Q5_K: |4*2*31*128| <
 * 2^15; 2 for Q6_K: |2*2*63*128| < 2^15), 2 (Q4_K/Q5_K) or 5 (Q6_K) vpmaddwd with the
 * scales, one convert and two fma.
 *
 * Minimums: Q4_K/Q5_K as an 8-lane float fma of -dmin*m[s] and dx*(bsums[2s]+bsums[2s+1]);
 * Q6_K's offset -32 as vpmaddwd of the bsums with -32*scale, added to the integer sum.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/arch/x86/kq_act.h"
#include "cpu/arch/x86/kq_prefetch.h"
#include "cpu/kquants_internal.h"
#include "tensor/blocks.h"

#define KQ_G 8      /* activation rows per group                              */
#define KQ_SLOTS 64 /* prepared activation super-blocks on the stack (20 KiB) */

/* One activation super-block in the permuted order, plus what the sums need (its dx is
 * kept apart, in kq_xbuf.d, so 64 slots stay small next to the streaming weights in L1;
 * see the AVX-512 file). */
typedef struct {
    _Alignas(64) int8_t q[QK_K];
    union {
        float f[8];     /* Q4_K/Q5_K: f[s] = dx * (bsums[2s] + bsums[2s+1]) */
        int16_t h[16];  /* Q6_K: the bsums as they are                      */
    } b;
} kq_xprep;

typedef struct {
    kq_xprep s[KQ_SLOTS];
    float d[KQ_SLOTS];
} kq_xbuf;

/* KQ_INLINE, kq_prefetch, KQ_PF_AHEAD and kq_visit_ahead: cpu/arch/x86/kq_prefetch.h. */

/* ======================================================================== */
/* Shared pieces                                                             */
/* ======================================================================== */

/* 4x4 transpose of 32-bit words inside each 128-bit lane: out_k.L.i = in_i.L.k. */
KQ_INLINE void kq_transpose(__m256i *a0, __m256i *a1, __m256i *a2, __m256i *a3) {
    const __m256i t0 = _mm256_unpacklo_epi32(*a0, *a1);
    const __m256i t1 = _mm256_unpackhi_epi32(*a0, *a1);
    const __m256i t2 = _mm256_unpacklo_epi32(*a2, *a3);
    const __m256i t3 = _mm256_unpackhi_epi32(*a2, *a3);
    *a0 = _mm256_unpacklo_epi64(t0, t2);
    *a1 = _mm256_unpackhi_epi64(t0, t2);
    *a2 = _mm256_unpacklo_epi64(t1, t3);
    *a3 = _mm256_unpackhi_epi64(t1, t3);
}

KQ_INLINE void kq_prep_q(const block_q8_K *x, kq_xprep *p, float *d) {
    for (int g = 0; g < 2; g++) {
        const int8_t *s = x->qs + 128 * g;
        __m256i n0 = _mm256_loadu_si256((const __m256i *)s), n1 = _mm256_loadu_si256((const __m256i *)(s + 32));
        __m256i n2 = _mm256_loadu_si256((const __m256i *)(s + 64)), n3 = _mm256_loadu_si256((const __m256i *)(s + 96));
        kq_transpose(&n0, &n1, &n2, &n3);
        int8_t *o = p->q + 128 * g;
        _mm256_store_si256((__m256i *)o, n0);
        _mm256_store_si256((__m256i *)(o + 32), n1);
        _mm256_store_si256((__m256i *)(o + 64), n2);
        _mm256_store_si256((__m256i *)(o + 96), n3);
    }
    *d = x->d;
}

static void kq_prep_q45(const block_q8_K *x, kq_xprep *p, float *d) {
    kq_prep_q(x, p, d);
    const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
    const __m256i pair = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
    _mm256_store_ps(p->b.f, _mm256_mul_ps(_mm256_cvtepi32_ps(pair), _mm256_set1_ps(x->d)));
}

static void kq_prep_q6(const block_q8_K *x, kq_xprep *p, float *d) {
    kq_prep_q(x, p, d);
    memcpy(p->b.h, x->bsums, sizeof p->b.h);
}

KQ_INLINE float kq_hsum(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#define MADDUBS(w, p, off) _mm256_maddubs_epi16((w), _mm256_load_si256((const __m256i *)((p)->q + (off))))

/* ======================================================================== */
/* Q4_K and Q5_K                                                             */
/* ======================================================================== */

typedef struct {
    __m256i w[8];  /* w[4g+k] = T_{g,k}: unsigned codes                        */
    __m256i s[2];  /* s[g]: int16 pairs of scale sc[4g+i] in dword 4L+i       */
    __m256 mn;     /* -dmin * m[s], s = 0..7                                   */
    __m256 d;      /* d broadcast                                              */
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
    const __m128i sm = _mm_or_si128(lo, hi); /* bytes sc0..sc7 m0..m7 */
    const __m256i smb = _mm256_broadcastsi128_si256(sm);
    const char z = (char)0x80;
    r->s[0] = _mm256_shuffle_epi8(smb, _mm256_setr_epi8(0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3, z,
                                                        0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3, z));
    r->s[1] = _mm256_shuffle_epi8(smb, _mm256_setr_epi8(4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z, 7, z,
                                                        4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z, 7, z));
    const __m128 dd = _mm_cvtph_ps(v); /* d, dmin, ... */
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    r->mn = _mm256_mul_ps(m, _mm256_broadcastss_ps(_mm_sub_ps(_mm_setzero_ps(), _mm_movehdup_ps(dd))));
    r->d = _mm256_broadcastss_ps(dd);
}

/* Natural order first (sub-block 2c = low nibbles of qs[32c..], 2c+1 = high nibbles),
 * then the per-group transpose. hb: Q5_K's qh, or NULL. */
KQ_INLINE void kq_unpack_q45(const uint8_t *qs, const uint8_t *qh, kq_wreg45 *r) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            /* bit m of qh[t] is the fifth bit of element t of sub-block m; moved to bit 4 */
            const int m0 = 2 * c, m1 = 2 * c + 1;
            const __m256i h0 = m0 <= 4 ? _mm256_slli_epi16(h, 4 - m0) : _mm256_srli_epi16(h, m0 - 4);
            const __m256i h1 = m1 <= 4 ? _mm256_slli_epi16(h, 4 - m1) : _mm256_srli_epi16(h, m1 - 4);
            lo = _mm256_or_si256(lo, _mm256_and_si256(h0, b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(h1, b4));
        }
        r->w[2 * c] = lo;
        r->w[2 * c + 1] = hi;
    }
    kq_transpose(&r->w[0], &r->w[1], &r->w[2], &r->w[3]);
    kq_transpose(&r->w[4], &r->w[5], &r->w[6], &r->w[7]);
}

/* One weight row over nbc super-blocks against g prepared activation rows xp[j*xstride+b];
 * pf: the weight blocks to prefetch meanwhile (0: none). */
#define KQ_CHUNK45_FN(name, wblock, qhexpr)                                                  \
    static void name(const wblock *wb, const kq_xprep *xp, const float *xd, int xstride, int nbc, \
                     uintptr_t pf, \
                     int g, float *sums) {                                                   \
        __m256 acc[KQ_G];                                                                    \
        for (int j = 0; j < g; j++) acc[j] = _mm256_setzero_ps();                            \
        for (int b = 0; b < nbc; b++) {                                                      \
            kq_wreg45 r;                                                                     \
            const wblock *blk = wb + b;                                                      \
            kq_prefetch(pf ? pf + (uintptr_t)b * sizeof(wblock) : 0, sizeof(wblock));        \
            kq_unpack_q45(blk->qs, qhexpr, &r);                                              \
            kq_scales_q45(blk, &r);                               \
            for (int j = 0; j < g; j++) {                                                    \
                const kq_xprep *p = xp + (size_t)j * (size_t)xstride + b;                    \
                const float dx = xd[(size_t)j * (size_t)xstride + b];                        \
                const __m256i a0 = _mm256_add_epi16(                                         \
                    _mm256_add_epi16(MADDUBS(r.w[0], p, 0), MADDUBS(r.w[1], p, 32)),         \
                    _mm256_add_epi16(MADDUBS(r.w[2], p, 64), MADDUBS(r.w[3], p, 96)));       \
                const __m256i a1 = _mm256_add_epi16(                                         \
                    _mm256_add_epi16(MADDUBS(r.w[4], p, 128), MADDUBS(r.w[5], p, 160)),      \
                    _mm256_add_epi16(MADDUBS(r.w[6], p, 192), MADDUBS(r.w[7], p, 224)));     \
                const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(a0, r.s[0]),          \
                                                     _mm256_madd_epi16(a1, r.s[1]));         \
                const __m256 sc = _mm256_mul_ps(r.d, _mm256_set1_ps(dx));                    \
                __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), sc, acc[j]);             \
                acc[j] = _mm256_fmadd_ps(r.mn, _mm256_load_ps(p->b.f), t);                   \
            }                                                                                \
        }                                                                                    \
        for (int j = 0; j < g; j++) sums[j] = kq_hsum(acc[j]);                               \
    }

KQ_CHUNK45_FN(kq_chunk_q4_K, block_q4_K, NULL)
KQ_CHUNK45_FN(kq_chunk_q5_K, block_q5_K, blk->qh)

/* ======================================================================== */
/* Q6_K                                                                      */
/* ======================================================================== */

typedef struct {
    __m256i w[8];  /* w[4g+k] = T_{g,k}: codes 0..63                           */
    __m256i s[2];  /* s[g]: int16 pairs of scale sc[8g+2i+L] in dword 4L+i     */
    __m256i sb;    /* -32 * sc[s] as int16, s = 0..15 (for the bsums)          */
    __m256 d;
} kq_wreg6;

KQ_INLINE void kq_unpack_q6(const block_q6_K *b, kq_wreg6 *r) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        /* quarter qq of the half (elements 128h + 32qq + l): nibble qq/2 of l0 (qq even)
         * or l1 (qq odd), high bits 2qq..2qq+1 of qh */
        __m256i *v = r->w + 4 * h;
        v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
        v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m2));
        v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
    }
    kq_transpose(&r->w[0], &r->w[1], &r->w[2], &r->w[3]);
    kq_transpose(&r->w[4], &r->w[5], &r->w[6], &r->w[7]);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    /* lane L, dword i: sc[8g + 2i + L] (int16 index 2i+L of the broadcast half g) */
    const __m256i idx = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                         2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    r->s[0] = _mm256_shuffle_epi8(_mm256_permute2x128_si256(sc, sc, 0x00), idx);
    r->s[1] = _mm256_shuffle_epi8(_mm256_permute2x128_si256(sc, sc, 0x11), idx);
    r->sb = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5));
    r->d = _mm256_set1_ps(_cvtsh_ss(b->d));
}

static void kq_chunk_q6_K(const block_q6_K *wb, const kq_xprep *xp, const float *xd, int xstride, int nbc,
                          uintptr_t pf, int g, float *sums) {
    __m256 acc[KQ_G];
    for (int j = 0; j < g; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nbc; b++) {
        kq_wreg6 r;
        kq_prefetch(pf ? pf + (uintptr_t)b * sizeof(block_q6_K) : 0, sizeof(block_q6_K));
        kq_unpack_q6(wb + b, &r);
        for (int j = 0; j < g; j++) {
            const kq_xprep *p = xp + (size_t)j * (size_t)xstride + b;
            const float dx = xd[(size_t)j * (size_t)xstride + b];
            const __m256i a00 = _mm256_add_epi16(MADDUBS(r.w[0], p, 0), MADDUBS(r.w[1], p, 32));
            const __m256i a01 = _mm256_add_epi16(MADDUBS(r.w[2], p, 64), MADDUBS(r.w[3], p, 96));
            const __m256i a10 = _mm256_add_epi16(MADDUBS(r.w[4], p, 128), MADDUBS(r.w[5], p, 160));
            const __m256i a11 = _mm256_add_epi16(MADDUBS(r.w[6], p, 192), MADDUBS(r.w[7], p, 224));
            const __m256i bs = _mm256_load_si256((const __m256i *)p->b.h);
            __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(a00, r.s[0]), _mm256_madd_epi16(a01, r.s[0]));
            s32 = _mm256_add_epi32(s32, _mm256_add_epi32(_mm256_madd_epi16(a10, r.s[1]), _mm256_madd_epi16(a11, r.s[1])));
            s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(bs, r.sb));
            const __m256 sc = _mm256_mul_ps(r.d, _mm256_set1_ps(dx));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), sc, acc[j]);
        }
    }
    for (int j = 0; j < g; j++) sums[j] = kq_hsum(acc[j]);
}

/* ======================================================================== */
/* Tiles                                                                     */
/* ======================================================================== */

/* Same loop as the AVX-512 file: groups of G <= 8 activation rows, spans of super-blocks
 * that fit the slots, chunks of SPEX_KQ_CHUNK aligned to the row start, chunk sums added
 * to y in order — each output's arithmetic is independent of the tile. */
#define KQ_TILE_FN(name, wblock, prep, chunk)                                                \
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
                        chunk(wr + c0, xb.s + c0, xb.d + c0, nbs, nbc, pf, g, sums);         \
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

KQ_TILE_FN(spex_dot_q4_K_avx2, block_q4_K, kq_prep_q45, kq_chunk_q4_K)
KQ_TILE_FN(spex_dot_q5_K_avx2, block_q5_K, kq_prep_q45, kq_chunk_q5_K)
KQ_TILE_FN(spex_dot_q6_K_avx2, block_q6_K, kq_prep_q6, kq_chunk_q6_K)

/* ======================================================================== */
/* Q8_K activation quantizer                                                 */
/* ======================================================================== */

/* Same steps as spex_quantize_row_q8_K_ref, including ggml's nearest_int (add 1.5*2^23,
 * keep the mantissa) rather than a conversion instruction, so that even NaN, Inf and
 * denormal-scale inputs give the reference's bytes. One pass takes the block's largest and
 * smallest values (two chains each) for kq_amax_elem; vmaxps / vminps return their second
 * operand when the first is NaN, so NaNs are skipped like the reference's "ax > amax". The
 * two saturating packs clamp to [-128, 127] as the reference does. */
void spex_act_quant_q8_K_avx2(const float *x, void *dst, int64_t n) {
    block_q8_K *y = (block_q8_K *)dst;
    const int64_t nb = n / QK_K;
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m256 hi0 = _mm256_setzero_ps(), hi1 = hi0, lo0 = hi0, lo1 = hi0;
        for (int t = 0; t < QK_K / 8; t += 2) {
            const __m256 v0 = _mm256_loadu_ps(x + 8 * t), v1 = _mm256_loadu_ps(x + 8 * t + 8);
            hi0 = _mm256_max_ps(v0, hi0);
            lo0 = _mm256_min_ps(v0, lo0);
            hi1 = _mm256_max_ps(v1, hi1);
            lo1 = _mm256_min_ps(v1, lo1);
        }
        const __m256 hv = _mm256_max_ps(hi0, hi1), lv = _mm256_min_ps(lo0, lo1);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(hv), _mm256_extractf128_ps(hv, 1));
        __m128 l = _mm_min_ps(_mm256_castps256_ps128(lv), _mm256_extractf128_ps(lv, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        l = _mm_min_ps(l, _mm_movehl_ps(l, l));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        l = _mm_min_ss(l, _mm_movehdup_ps(l));
        const float xm = kq_amax_elem(x, _mm_cvtss_f32(h), -_mm_cvtss_f32(l));
        if (xm == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / xm;
        const __m256 is = _mm256_set1_ps(iscale);
        __m256i c[8];
        for (int t = 0; t < QK_K / 32; t++) {
            __m256i v[4];
            for (int u = 0; u < 4; u++) {
                const __m256 f = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * t + 8 * u), is), magic);
                v[u] = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(f), mant), bias);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            c[t] = _mm256_permutevar8x32_epi32(p, perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * t), c[t]);
        }
        kq_bsums(c, y[i].bsums);
        y[i].d = 1.0f / iscale;
    }
}
