/*
 * dot_kquants_r16_avxvnni.c — R16 Q4_K, Q5_K and Q6_K weights × Q8_K activations at 256 bits
 * with AVX-VNNI (the VEX vpdpbusd: Intel Alder Lake and later client cores, AMD Zen 5): the
 * AVX-512 file's "weight rows in lanes" kernels for CPUs whose widest vectors are AVX2.
 * The Makefile builds this file alone with -mavxvnni; the AVX2 table uses it only where
 * CPUID reports AVX-VNNI (spex_cpu_features.avxvnni), for both layouts: the ggml-layout
 * entries (spex_dot_q4_K_avxvnni, ...) lay each 16-row super-block out as an R16 unit on the
 * stack first (kq_unit_from_rows), so repacking never changes a result.
 *
 * Why: the sub-block kernels of dot_kquants_avx2.c transpose each super-block of each
 * weight row before use, once per tile: one activation row cannot amortize that, and 8 rows
 * spend about three vector instructions per 32 multiply-adds. In the R16 layout
 * (cpu/matmul.h) the transpose is a plain load: a 16-row group is two halves of 8 int32
 * lanes (bytes 32h..32h+31 of each 64-byte word), one weight row per lane, each activation
 * dword broadcast, one vpdpbusd per 32 multiply-adds: decode(1) of the 0.6B shape 8.6 ms
 * against 12.8 (docs/performance.md, "AVX2 with AVX-VNNI"). Without VNNI the same layout
 * (vpmaddubsw pairs summed in int16, one vpmaddwd with the scale) ran 8 rows ~20 % slower
 * than the sub-block kernel, so plain AVX2 keeps that kernel and the ggml layout.
 *
 * The arithmetic is the AVX-512 kernels', lane for lane, so these kernels give the
 * AVX-512 R16 kernels' bits (tests/test_matmul_kquants.c and test_matmul.c check it) and an
 * output never depends on the tile. Q4_K / Q5_K (dot_kquants_avx512.c, "Q4_K and Q5_K,
 * weight rows in lanes"): the exact integers T16 = 16 * sum_s sc[s] * sum_{e in s} q[e] x[e]
 * (vpdpbusd per sub-block, the high nibbles used in place as code * 16 and the low
 * sub-blocks' scales times 16, then vpmulld by the scale) and
 * M = sum_s m[s] (bsums[2s] + bsums[2s+1]), then
 *     y += dx * ((d / 16) * T16 - dmin * M)
 * in the same three roundings, super-blocks in order, spans of KQ_WSPAN added to y in order.
 * Q5_K: bits 2gg and 2gg + 1 of qh dword k become bit 4 of the low and high codes (both
 * shifted down, at most 31; no 16 anywhere). Q6_K: its own section below.
 *
 * Register plan (16 ymm), Q4_K / Q5_K: per dword k the two unpacked code vectors, two
 * broadcasts, and up to 8 accumulators: two for each of up to KQ_GS activation rows; a group
 * of up to KQ_G rows takes ceil(G / KQ_GS) passes over a 64-element group's 8 code words,
 * each unpacking them again (L1 loads, 3 operations). 1-2 rows take both halves at once
 * (kq_h16_sb).
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "cpu/arch/x86/kq_prefetch.h"
#include "cpu/arch/x86/kq_r16.h"
#include "cpu/kquants_internal.h"
#include "tensor/blocks.h"

/* KQ_WB, KQ_WSPAN, the Q6_K unit's offsets and kq_bpairs: kq_r16.h, shared with the AVX-512 file */
#define KQ_G 8      /* activation rows per group (minimum pairs prepared per row)  */
#define KQ_GS 4     /* activation rows per register pass                          */
/* Q6_K (section "Q6_K, weight rows in lanes")                                   */
#define KQ6_SPAN 8          /* super-blocks prepared per span                    */

KQ_INLINE __m256i kq_bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The scales of one half (8 weight rows) of a group's super-block, lanes = rows. */
typedef struct {
    __m256i sc[8]; /* sub-block s's multiplier (int32)  */
    __m256i m[4]; /* int16 pairs (m[2t], m[2t+1]) */
    __m256 d16, ndmin;
} kq_h8s;

/* hdr: word c of the 8 rows' block headers at hdr + 64c (d|dmin, then the 12 scale bytes). */
KQ_INLINE void kq_h8_scales(const uint8_t *hdr, kq_h8s *s, const int q5) {
    const __m256i h0 = _mm256_loadu_si256((const __m256i *)hdr);
    const __m256i u0 = _mm256_loadu_si256((const __m256i *)(hdr + 64));
    const __m256i u1 = _mm256_loadu_si256((const __m256i *)(hdr + 128));
    const __m256i u2 = _mm256_loadu_si256((const __m256i *)(hdr + 192));
    const __m256i m3f = _mm256_set1_epi8(0x3f), m0f = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    /* bytewise: sc[0..3] = u0 & 63, m[0..3] = u1 & 63,
     * sc[4..7] = (u2 & 15) | (u0 >> 6) << 4, m[4..7] = (u2 >> 4) | (u1 >> 6) << 4 */
    const __m256i s03 = _mm256_and_si256(u0, m3f), m03 = _mm256_and_si256(u1, m3f);
    const __m256i s47 = _mm256_or_si256(_mm256_and_si256(u2, m0f), _mm256_and_si256(_mm256_srli_epi32(u0, 2), m30));
    const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m0f),
                                        _mm256_and_si256(_mm256_srli_epi32(u1, 2), m30));
    const __m256i ff = _mm256_set1_epi32(0xff);
    for (int j = 0; j < 4; j++) {
        __m256i v[2] = {_mm256_and_si256(_mm256_srli_epi32(s03, 8 * j), ff),
                        _mm256_and_si256(_mm256_srli_epi32(s47, 8 * j), ff)};
        for (int i = 0; i < 2; i++) {
            /* even sub-blocks (low nibbles) carry the 16; Q5_K none */
            s->sc[4 * i + j] = !q5 && !(j & 1) ? _mm256_slli_epi32(v[i], 4) : v[i];
        }
    }
    /* (m[2t], m[2t+1]) as int16 pairs: bytes [m2t, m2t+1, m2t+1, m2t+2] then keep bytes 0, 2 */
    const __m256i ffw = _mm256_set1_epi32(0x00ff00ff);
    s->m[0] = _mm256_and_si256(_mm256_blend_epi16(m03, _mm256_slli_epi32(m03, 8), 0xaa), ffw);
    s->m[1] = _mm256_and_si256(_mm256_blend_epi16(_mm256_srli_epi32(m03, 16), _mm256_srli_epi32(m03, 8), 0xaa), ffw);
    s->m[2] = _mm256_and_si256(_mm256_blend_epi16(m47, _mm256_slli_epi32(m47, 8), 0xaa), ffw);
    s->m[3] = _mm256_and_si256(_mm256_blend_epi16(_mm256_srli_epi32(m47, 16), _mm256_srli_epi32(m47, 8), 0xaa), ffw);
    /* the fp16 d (low half of word 0) and dmin (high half), packed to 8 halves for vcvtph2ps */
    const __m256i dl = _mm256_and_si256(h0, _mm256_set1_epi32(0xffff)), dh = _mm256_srli_epi32(h0, 16);
    const __m256 d = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(dl), _mm256_extracti128_si256(dl, 1)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(dh), _mm256_extracti128_si256(dh, 1)));
    s->d16 = q5 ? d : _mm256_mul_ps(d, _mm256_set1_ps(1.0f / 16.0f));
    s->ndmin = _mm256_sub_ps(_mm256_setzero_ps(), dmin);
}

/* acc + dx * ((d / 16) * T16 - dmin * M): the AVX-512 kernel's kq_w16_fin, lane for lane. */
KQ_INLINE __m256 kq_h8_fin(const kq_h8s *s, const kq_bpair *p, float dx, __m256i T, __m256 acc) {
    __m256i M = _mm256_madd_epi16(s->m[0], _mm256_set1_epi32(p->p[0]));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(s->m[1], _mm256_set1_epi32(p->p[1])));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(s->m[2], _mm256_set1_epi32(p->p[2])));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(s->m[3], _mm256_set1_epi32(p->p[3])));
    const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), s->ndmin, _mm256_mul_ps(_mm256_cvtepi32_ps(T), s->d16));
    return _mm256_fmadd_ps(t, _mm256_set1_ps(dx), acc);
}

/* Code word k of the half at qs (64 bytes a word) as low / high codes of 64-element group gg;
 * qh: Q5_K's fifth-bit words (NULL for Q4_K). */
KQ_INLINE void kq_h8_codes(const uint8_t *qs, const uint8_t *qh, int gg, int k, __m256i *lo, __m256i *hi) {
    const __m256i o = _mm256_loadu_si256((const __m256i *)(qs + 64 * k));
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    if (qh) {
        const __m256i hb = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(qh + 64 * k)), 2 * gg);
        const __m256i m10 = _mm256_set1_epi8(0x10);
        *lo = _mm256_or_si256(_mm256_and_si256(o, m0f), _mm256_and_si256(_mm256_slli_epi32(hb, 4), m10));
        *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(o, 4), m0f), _mm256_and_si256(_mm256_slli_epi32(hb, 3), m10));
    } else {
        *lo = _mm256_and_si256(o, m0f);
        *hi = _mm256_and_si256(o, _mm256_set1_epi8((char)0xf0)); /* code * 16, still a u8 */
    }
}

/* T[j] += the scaled code sums of group gg for activation rows q[j] (64 codes from the
 * group's start), j < gs <= KQ_GS. */
KQ_INLINE void kq_h8_group(const uint8_t *qs, const uint8_t *qh, int gg, const int8_t *const *q, const kq_h8s *s,
                           const int gs, __m256i *T) {
    /* The k loop is unrolled so the accumulators stay in registers. With 1-2 rows (the
     * second pass of 5-6; kq_h16_sb takes calls of 1-2) each row's sums run in 4 / gs chains (k modulo nc) that add up to the same integers: one
     * chain of 8 dependent vpdpbusd per group would bound the 1-row kernel by latency. */
    const int nc = gs == 1 ? 4 : gs == 2 ? 2 : 1;
    __m256i al[KQ_GS], ah[KQ_GS]; /* row j, chain c at j * nc + c */
    for (int j = 0; j < gs * nc; j++) al[j] = ah[j] = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        __m256i lo, hi;
        kq_h8_codes(qs, qh, gg, k, &lo, &hi);
        const int c = k % nc;
        for (int j = 0; j < gs; j++) {
            al[j * nc + c] = _mm256_dpbusd_avx_epi32(al[j * nc + c], lo, kq_bcast32(q[j] + 4 * k));
            ah[j * nc + c] = _mm256_dpbusd_avx_epi32(ah[j * nc + c], hi, kq_bcast32(q[j] + 32 + 4 * k));
        }
    }
    for (int j = 0; j < gs; j++) {
        __m256i sl = al[j * nc], sh = ah[j * nc];
        for (int c = 1; c < nc; c++) sl = _mm256_add_epi32(sl, al[j * nc + c]), sh = _mm256_add_epi32(sh, ah[j * nc + c]);
        T[j] = _mm256_add_epi32(T[j], _mm256_add_epi32(_mm256_mullo_epi32(sl, s->sc[2 * gg]),
                                                       _mm256_mullo_epi32(sh, s->sc[2 * gg + 1])));
    }
}

/* acc[j] (lanes = the half's 8 rows) += super-block b of the half at u (the unit's bytes
 * 32h.., so word k of field f at u + 16 f + 64 k) against activation rows xr[j], j < g. */
KQ_INLINE void kq_h8_sb(const uint8_t *u, const block_q8_K *const *xr, const kq_bpair *const *bp, int b, int g,
                        const int q5, __m256 *acc) {
    kq_h8s s;
    kq_h8_scales(u, &s, q5);
    const uint8_t *qs = u + 16 * (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const uint8_t *qh = q5 ? u + 16 * offsetof(block_q5_K, qh) : NULL;
    __m256i T[KQ_G];
    for (int j = 0; j < g; j++) T[j] = _mm256_setzero_si256();
    for (int gg = 0; gg < 4; gg++) {
        const int8_t *q[KQ_G];
        for (int j = 0; j < g; j++) q[j] = xr[j][b].qs + 64 * gg;
        const uint8_t *qsg = qs + 16 * 32 * gg; /* the group's 8 code words */
        /* two passes written out, so each pass's row count is a constant (g is one here):
         * a variable count left the accumulators in memory, 5-7 rows ran 4x slower */
        kq_h8_group(qsg, qh, gg, q, &s, g < KQ_GS ? g : KQ_GS, T);
        if (g > KQ_GS) kq_h8_group(qsg, qh, gg, q + KQ_GS, &s, g - KQ_GS, T + KQ_GS);
    }
    for (int j = 0; j < g; j++) acc[j] = kq_h8_fin(&s, &bp[j][b], xr[j][b].d, T[j], acc[j]);
}

/* kq_h8_sb for both halves at once with g <= 2 activation rows: each broadcast feeds four
 * vpdpbusd (two halves, low and high codes) instead of two, and one row's sums run in 8
 * chains (k modulo 2). The same integers and float steps per lane as kq_h8_sb. */
KQ_INLINE void kq_h16_sb(const uint8_t *u, const block_q8_K *const *xr, const kq_bpair *const *bp, int b, const int g,
                         const int q5, __m256 *acc0, __m256 *acc1) {
    kq_h8s s[2];
    kq_h8_scales(u, &s[0], q5);
    kq_h8_scales(u + 32, &s[1], q5);
    const uint8_t *qs = u + 16 * (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const uint8_t *qh = q5 ? u + 16 * offsetof(block_q5_K, qh) : NULL;
    const int nc = g == 1 ? 2 : 1;
    __m256i T[2][2]; /* [half][row] */
    for (int j = 0; j < g; j++) T[0][j] = T[1][j] = _mm256_setzero_si256();
    for (int gg = 0; gg < 4; gg++) {
        const uint8_t *qsg = qs + 16 * 32 * gg;
        __m256i a[8]; /* (row j, chain c) at 4 (j * nc + c) + {low h0, high h0, low h1, high h1} */
        for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            __m256i lo0, hi0, lo1, hi1;
            kq_h8_codes(qsg, qh, gg, k, &lo0, &hi0);
            kq_h8_codes(qsg + 32, qh ? qh + 32 : NULL, gg, k, &lo1, &hi1);
            const int c = k % nc;
            for (int j = 0; j < g; j++) {
                const int8_t *q = xr[j][b].qs + 64 * gg;
                const __m256i xl = kq_bcast32(q + 4 * k), xh = kq_bcast32(q + 32 + 4 * k);
                __m256i *r = a + 4 * (j * nc + c);
                r[0] = _mm256_dpbusd_avx_epi32(r[0], lo0, xl);
                r[1] = _mm256_dpbusd_avx_epi32(r[1], hi0, xh);
                r[2] = _mm256_dpbusd_avx_epi32(r[2], lo1, xl);
                r[3] = _mm256_dpbusd_avx_epi32(r[3], hi1, xh);
            }
        }
        for (int j = 0; j < g; j++) {
            __m256i *r = a + 4 * j * nc;
            if (nc == 2)
                for (int i = 0; i < 4; i++) r[i] = _mm256_add_epi32(r[i], r[4 + i]);
            for (int h = 0; h < 2; h++)
                T[h][j] = _mm256_add_epi32(T[h][j], _mm256_add_epi32(_mm256_mullo_epi32(r[2 * h], s[h].sc[2 * gg]),
                                                                     _mm256_mullo_epi32(r[2 * h + 1], s[h].sc[2 * gg + 1])));
        }
    }
    for (int j = 0; j < g; j++) {
        acc0[j] = kq_h8_fin(&s[0], &bp[j][b], xr[j][b].d, T[0][j], acc0[j]);
        acc1[j] = kq_h8_fin(&s[1], &bp[j][b], xr[j][b].d, T[1][j], acc1[j]);
    }
}

/* The read-ahead of the 16-row group at row i0 for a span of nbs super-blocks from b0 (the
 * AVX-512 kernels' kq_block_start): returns an address, *pfs bytes of it prefetched at each
 * step b at address + b * *pfs (0: none). R16: the next group's unit of the same
 * super-block, or from the last group the next span's first group, or after the last span
 * the rows just past this call's (a ranged matmul run's next claim). ggml layout: the next
 * 16 rows front to back, a slice per step (16 rows read side by side are 16 streams, too
 * many for the hardware prefetchers: without it --no-repack decode ran 1.5x slower). The
 * call's first group is requested at once. */
KQ_INLINE uintptr_t kq_readahead(const void *w, size_t w_stride, int nw, int i0, int64_t b0, int nbs, int64_t nb,
                                 size_t bsize, const int packed, size_t *pfs) {
    const size_t unit = (size_t)KQ_WB * bsize;
    const uint8_t *grp = (const uint8_t *)w + (size_t)i0 * w_stride;
    const uintptr_t next = (uintptr_t)(grp + KQ_WB * w_stride);
    if (!packed) {
        if (i0 == 0) kq_prefetch((uintptr_t)grp + (uintptr_t)b0 * bsize, (size_t)(nw < KQ_WB ? nw : KQ_WB) * w_stride);
        if (i0 + KQ_WB >= nw) return 0;
        const size_t pfn = (size_t)(nw - i0 - KQ_WB < KQ_WB ? nw - i0 - KQ_WB : KQ_WB) * w_stride;
        *pfs = (pfn / (size_t)nbs + 63) & ~(size_t)63;
        return next + (uintptr_t)b0 * bsize;
    }
    *pfs = unit;
    if (i0 == 0) kq_prefetch((uintptr_t)grp + (uintptr_t)b0 * unit, (size_t)nbs * unit);
    return i0 + KQ_WB < nw ? next + (uintptr_t)b0 * unit
           : b0 + nbs < nb ? (uintptr_t)w + (uintptr_t)(b0 + nbs) * unit
                           : next;
}

/* y[j*ldy + 8h + l] = (first) or += acc[h][j] lane l for the nv (<= 16) outputs of a group, j < g. */
KQ_INLINE void kq_store16(float *y, size_t ldy, int g, int nv, __m256 acc[2][KQ_G], int first) {
    for (int j = 0; j < g; j++) {
        float *yo = y + (size_t)j * ldy;
        if (nv >= KQ_WB) {
            for (int h = 0; h < 2; h++) {
                if (first) _mm256_storeu_ps(yo + 8 * h, acc[h][j]);
                else _mm256_storeu_ps(yo + 8 * h, _mm256_add_ps(_mm256_loadu_ps(yo + 8 * h), acc[h][j]));
            }
            continue;
        }
        float t[KQ_WB];
        _mm256_storeu_ps(t, acc[0][j]);
        _mm256_storeu_ps(t + 8, acc[1][j]);
        for (int l = 0; l < nv; l++) yo[l] = first ? t[l] : yo[l] + t[l];
    }
}

/* The ggml layout (the table's plain dot entries): super-block b of the 16 rows from row i0
 * (rows past nw repeat the last one; their outputs are dropped) laid out as one R16 unit
 * (cpu/matmul.h: word k of the 16 rows at unit + 64k; Q6_K's 52 words, then its 16 fp16 d),
 * so the kernels read the very bytes a repacked matrix holds and both layouts give the same
 * bits (tests check it against spex_r16_pack). Eight words of 8 rows at a time through an
 * 8x8 dword transpose; the loader repacks every K-quant matrix of 16k rows, so this serves
 * the rest and --no-repack. */
KQ_INLINE void kq_transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]), u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]), u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int k = 0; k < 4; k++) /* u[k]: dwords k (low lane) and 4 + k (high) of rows 0..3; u[4 + k] of rows 4..7 */
        r[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20), r[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
}

KQ_INLINE const uint8_t *kq_unit_from_rows(spex_type t, const void *w, size_t w_stride, int nw, int i0, int64_t b,
                                           size_t bsize, uint8_t *unit) {
    const uint8_t *rows[KQ_WB];
    for (int l = 0; l < KQ_WB; l++)
        rows[l] = (const uint8_t *)w + (size_t)(i0 + l < nw ? i0 + l : nw - 1) * w_stride + (size_t)b * bsize;
    const int nwords = t == SPEX_TYPE_Q6_K ? 52 : (int)(bsize / 4);
    int k0 = 0;
    for (; k0 + 8 <= nwords; k0 += 8)
        for (int h = 0; h < 2; h++) {
            __m256i r[8];
            for (int l = 0; l < 8; l++) r[l] = _mm256_loadu_si256((const __m256i *)(rows[8 * h + l] + 4 * k0));
            kq_transpose8(r);
            for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(unit + 64 * (k0 + k) + 32 * h), r[k]);
        }
    for (; k0 < nwords; k0++)
        for (int l = 0; l < KQ_WB; l++) memcpy(unit + 64 * k0 + 4 * l, rows[l] + 4 * k0, 4);
    if (t == SPEX_TYPE_Q6_K)
        for (int l = 0; l < KQ_WB; l++) memcpy(unit + KQ6_D + 2 * l, rows[l] + offsetof(block_q6_K, d), 2);
    return unit;
}

/* y[j*ldy + i] for the 16-row groups of W (R16, nw a multiple of 16) × activation rows in
 * groups of <= KQ_G, spans of KQ_WSPAN super-blocks. Each group's super-block is read as
 * one unit, both halves while its lines are in L1. The read-ahead is the AVX-512 kernel's
 * (kq_block_start there): the next group's unit of the same super-block, and from the last
 * group the next span's first units or the rows just past the call (the thread's next
 * claim in a ranged matmul run). */
KQ_INLINE void kq_r16_tile(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx,
                           float *y, size_t ldy, const int q5, const int packed) {
    const spex_type type = q5 ? SPEX_TYPE_Q5_K : SPEX_TYPE_Q4_K;
    _Alignas(32) uint8_t ubuf[KQ_WB * sizeof(block_q5_K)];
    const size_t bsize = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t unit = (size_t)KQ_WB * bsize;
    const int64_t nb = n / QK_K;
    kq_bpair bpbuf[KQ_G][KQ_WSPAN];
    for (int64_t b0 = 0; b0 < nb; b0 += KQ_WSPAN) {
        const int nbs = (int)(nb - b0 < KQ_WSPAN ? nb - b0 : KQ_WSPAN);
        for (int j0 = 0; j0 < nx; j0 += KQ_G) {
            const int g = nx - j0 < KQ_G ? nx - j0 : KQ_G;
            const block_q8_K *xr[KQ_G];
            const kq_bpair *bp[KQ_G];
            for (int j = 0; j < g; j++) {
                xr[j] = (const block_q8_K *)((const uint8_t *)x + (size_t)(j0 + j) * x_stride) + b0;
                bp[j] = bpbuf[j];
                kq_bpairs(xr[j], nbs, bpbuf[j]);
            }
            for (int i0 = 0; i0 < nw; i0 += KQ_WB) {
                const uint8_t *grp = (const uint8_t *)w + (size_t)i0 * w_stride;
                size_t pfs = 0;
                const uintptr_t pf0 = kq_readahead(w, w_stride, nw, i0, b0, nbs, nb, bsize, packed, &pfs);
                __m256 acc[2][KQ_G];
                for (int j = 0; j < KQ_G; j++) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
#define KQ_UNIT(b) (packed ? grp + (size_t)(b0 + (b)) * unit                                     \
                           : kq_unit_from_rows(type, w, w_stride, nw, i0, b0 + (b), bsize, ubuf))
                /* one loop per row count, so g is a constant inside (registers, unrolling) */
#define KQ_SB_LOOP(G)                                                                      \
    for (int b = 0; b < nbs; b++) {                                                        \
        if (pf0) kq_prefetch(pf0 + (uintptr_t)b * pfs, pfs);                               \
        const uint8_t *u = KQ_UNIT(b);                                                     \
        for (int h = 0; h < 2; h++) kq_h8_sb(u + 32 * h, xr, bp, b, G, q5, acc[h]);         \
    }                                                                                      \
    break;
#define KQ_SB_LOOP16(G)                                                                    \
    for (int b = 0; b < nbs; b++) {                                                        \
        if (pf0) kq_prefetch(pf0 + (uintptr_t)b * pfs, pfs);                               \
        kq_h16_sb(KQ_UNIT(b), xr, bp, b, G, q5, acc[0], acc[1]);                           \
    }                                                                                      \
    break;
                switch (g) {
                case 1: KQ_SB_LOOP16(1)
                case 2: KQ_SB_LOOP16(2)
                case 3: KQ_SB_LOOP(3)
                case 4: KQ_SB_LOOP(4)
                case 5: KQ_SB_LOOP(5)
                case 6: KQ_SB_LOOP(6)
                case 7: KQ_SB_LOOP(7)
                default: KQ_SB_LOOP(8)
                }
#undef KQ_SB_LOOP
#undef KQ_SB_LOOP16
#undef KQ_UNIT
                kq_store16(y + (size_t)j0 * ldy + (size_t)i0, ldy, g, nw - i0, acc, b0 == 0);
            }
        }
    }
}

/* ======================================================================== */
/* Q6_K, weight rows in lanes                                                */
/* ======================================================================== */

/* The AVX-512 file's R16 Q6_K kernel ("Q6_K, weight rows in lanes" there: the unit's ql,
 * qh and scale words, the four parts A, C, B, D of each code word, the sums) at 256 bits,
 * lane for lane: a sub-block's sum starts at -32 * bsums[s], takes 4 vpdpbusd, then one
 * vpmulld by its signed scale into T, and y += (d * dx) * T per super-block, spans of
 * KQ6_SPAN added to y in order; so the bits of spex_dot_q6_K_r16_avx512. As for Q4_K, 1-2
 * activation rows take both 8-row halves in one pass (each broadcast feeds two vpdpbusd);
 * more rows run half by half. */

/* One activation super-block prepared for the kernel. */
typedef struct {
    _Alignas(32) int8_t q[QK_K];
    int32_t o[16]; /* -32 * bsums[s]: sub-block s's start */
} kq_x6;

/* The code word of part p (0 A, 1 C, 2 B, 3 D): a nibble of the ql word and two bits of the
 * qh word moved to bits 4-5. */
KQ_INLINE __m256i kq6_code(const uint8_t *ql, const uint8_t *qh, const int p) {
    const __m256i L = _mm256_loadu_si256((const __m256i *)ql), H = _mm256_loadu_si256((const __m256i *)qh);
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    __m256i nib, top;
    switch (p) {
    case 0: nib = L, top = _mm256_slli_epi32(_mm256_and_si256(H, _mm256_set1_epi8(0x03)), 4); break;
    case 1: nib = L, top = _mm256_slli_epi32(_mm256_and_si256(H, _mm256_set1_epi8(0x0c)), 2); break;
    case 2: nib = _mm256_srli_epi32(L, 4), top = _mm256_and_si256(H, _mm256_set1_epi8(0x30)); break;
    default:
        nib = _mm256_srli_epi32(L, 4);
        top = _mm256_srli_epi32(_mm256_and_si256(H, _mm256_set1_epi8((char)0xc0)), 2);
        break;
    }
    return _mm256_or_si256(_mm256_and_si256(nib, m0f), top);
}

/* acc[hh][j] (lanes = rows 8 (h0 + hh) ..) += the unit u's halves h0 .. h0 + nh - 1 against
 * the prepared activation super-blocks xs[j] (scales xd[j]), j < g. pf, pfs: weight bytes
 * to prefetch meanwhile, an eighth per part (0: none). */
KQ_INLINE void kq6_sb(const uint8_t *u, int h0, const int nh, const kq_x6 *xs, const float *xd, uintptr_t pf,
                      size_t pfs, const int g, __m256 acc[2][KQ_G]) {
    __m256i T[2][KQ_G];
    for (int hh = 0; hh < nh; hh++)
        for (int j = 0; j < g; j++) T[hh][j] = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        for (int p = 0; p < 4; p++) {
            if (pf) kq_prefetch(pf + (uintptr_t)((4 * h + p) * pfs / 8), pfs / 8 + (4 * h + p == 7 ? pfs % 8 : 0));
            /* ql word 16h + 8(p & 1) + k, nibble p >> 1; qh word 8h + k */
            const uint8_t *ql = u + 64 * (16 * h + 8 * (p & 1)), *qh = u + KQ6_QH + 64 * (8 * h);
            for (int q = 0; q < 2; q++) {
                const int s = 8 * h + 2 * p + q, xo = 128 * h + 32 * p + 16 * q;
                __m256i V[2][4], scv[2];
                for (int hh = 0; hh < nh; hh++) {
                    const int o = 32 * (h0 + hh);
                    for (int t = 0; t < 4; t++) V[hh][t] = kq6_code(ql + o + 64 * (4 * q + t), qh + o + 64 * (4 * q + t), p);
                    /* sub-block s's signed scale bytes (byte s % 4 of scale word s / 4) */
                    const __m256i sw = _mm256_loadu_si256((const __m256i *)(u + KQ6_SC + 64 * (s / 4) + o));
                    scv[hh] = _mm256_srai_epi32(_mm256_slli_epi32(sw, 24 - 8 * (s % 4)), 24);
                }
                for (int j = 0; j < g; j++) {
                    __m256i a[2];
                    for (int hh = 0; hh < nh; hh++) a[hh] = _mm256_set1_epi32(xs[j].o[s]);
                    for (int t = 0; t < 4; t++) {
                        const __m256i xv = kq_bcast32(xs[j].q + xo + 4 * t);
                        for (int hh = 0; hh < nh; hh++) a[hh] = _mm256_dpbusd_avx_epi32(a[hh], V[hh][t], xv);
                    }
                    for (int hh = 0; hh < nh; hh++) T[hh][j] = _mm256_add_epi32(T[hh][j], _mm256_mullo_epi32(a[hh], scv[hh]));
                }
            }
        }
    }
    for (int hh = 0; hh < nh; hh++) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + KQ6_D + 16 * (h0 + hh))));
        for (int j = 0; j < g; j++)
            acc[h0 + hh][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T[hh][j]), _mm256_mul_ps(d, _mm256_set1_ps(xd[j])),
                                              acc[h0 + hh][j]);
    }
}

KQ_INLINE void kq6_tile(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx,
                        float *y, size_t ldy, const int packed) {
    const size_t bsize = sizeof(block_q6_K);
    _Alignas(32) uint8_t ubuf[KQ_WB * sizeof(block_q6_K)];
    const size_t unit = (size_t)KQ_WB * sizeof(block_q6_K);
    const int64_t nb = n / QK_K;
    kq_x6 xb[KQ6_SPAN][KQ_G];
    float xd[KQ6_SPAN][KQ_G];
    for (int64_t b0 = 0; b0 < nb; b0 += KQ6_SPAN) {
        const int nbs = (int)(nb - b0 < KQ6_SPAN ? nb - b0 : KQ6_SPAN);
        for (int j0 = 0; j0 < nx; j0 += KQ_G) {
            const int g = nx - j0 < KQ_G ? nx - j0 : KQ_G;
            for (int j = 0; j < g; j++) {
                const block_q8_K *xr = (const block_q8_K *)((const uint8_t *)x + (size_t)(j0 + j) * x_stride) + b0;
                for (int b = 0; b < nbs; b++) {
                    memcpy(xb[b][j].q, xr[b].qs, QK_K);
                    for (int s = 0; s < 16; s++) xb[b][j].o[s] = -32 * (int32_t)xr[b].bsums[s];
                    xd[b][j] = xr[b].d;
                }
            }
            for (int i0 = 0; i0 < nw; i0 += KQ_WB) {
                const uint8_t *grp = (const uint8_t *)w + (size_t)i0 * w_stride;
                size_t pfs = 0;
                const uintptr_t pf0 = kq_readahead(w, w_stride, nw, i0, b0, nbs, nb, bsize, packed, &pfs);
                __m256 acc[2][KQ_G];
                for (int j = 0; j < KQ_G; j++) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
                /* 1-2 rows: also the unit two visits ahead, line by line (the AVX-512 kernel's
                 * kq6_prefetch_ahead: the order within a unit jumps, and every other unit is
                 * 32 bytes off a line, which the hardware prefetchers follow poorly) */
#define KQ6_LOOP(G, NH)                                                                             \
    for (int b = 0; b < nbs; b++) {                                                                 \
        const uint8_t *u = packed ? grp + (size_t)(b0 + b) * unit                                   \
                                  : kq_unit_from_rows(SPEX_TYPE_Q6_K, w, w_stride, nw, i0, b0 + b, bsize, ubuf); \
        const uintptr_t pfb = pf0 ? pf0 + (uintptr_t)b * pfs : 0;                                   \
        if (packed && (G) < 3) {                                                                    \
            const int k = b + 2, gk = k / nbs;                                                      \
            if (i0 + KQ_WB * gk < nw)                                                               \
                kq_prefetch((uintptr_t)(grp + (size_t)gk * KQ_WB * w_stride + (size_t)(b0 + k % nbs) * unit), unit); \
        }                                                                                           \
        for (int h0 = 0; h0 < 2; h0 += (NH)) kq6_sb(u, h0, NH, xb[b], xd[b], h0 ? 0 : pfb, pfs, G, acc); \
    }                                                                                               \
    break;
                switch (g) {
                case 1: KQ6_LOOP(1, 2)
                case 2: KQ6_LOOP(2, 2)
                case 3: KQ6_LOOP(3, 1)
                case 4: KQ6_LOOP(4, 1)
                case 5: KQ6_LOOP(5, 1)
                case 6: KQ6_LOOP(6, 1)
                case 7: KQ6_LOOP(7, 1)
                default: KQ6_LOOP(8, 1)
                }
#undef KQ6_LOOP
                kq_store16(y + (size_t)j0 * ldy + (size_t)i0, ldy, g, nw - i0, acc, b0 == 0);
            }
        }
    }
}

/* The entry points: R16 (weights repacked at load) or the ggml layout (kq_unit_from_rows). */
#define KQ_ENTRY(name, call)                                                                      \
    void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx, \
              float *y, size_t ldy) {                                                            \
        call;                                                                                    \
    }
KQ_ENTRY(spex_dot_q4_K_r16_avxvnni, kq_r16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 1))
KQ_ENTRY(spex_dot_q5_K_r16_avxvnni, kq_r16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 1))
KQ_ENTRY(spex_dot_q6_K_r16_avxvnni, kq6_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1))
KQ_ENTRY(spex_dot_q4_K_avxvnni, kq_r16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 0))
KQ_ENTRY(spex_dot_q5_K_avxvnni, kq_r16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 0))
KQ_ENTRY(spex_dot_q6_K_avxvnni, kq6_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0))
