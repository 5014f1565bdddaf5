/*
 * dot_kquants_avx512.c — AVX-512 (F/BW/VL/DQ, optionally VNNI) K-quant matmul kernels:
 * Q4_K, Q5_K, Q6_K weights × Q8_K activations, the Q8_K activation quantizer, and the R16
 * K-quants on AMX-INT8 tiles for 9+ (Q6_K: 12+) activation rows (sections "Q4_K and Q5_K on
 * AMX tiles", "Q6_K on AMX tiles").
 *
 * What it is: SIMD twins of ref/dot_kquants_ref.c (the specification) following the tile
 * contract of src/cpu/matmul.h; the quantizer writes exactly the bytes of
 * spex_quantize_row_q8_K_ref. What it is not: a prompt-size GEMM — weights are read in
 * their ggml layout, or in the R16 layout of cpu/matmul.h that the loader repacks them
 * into, each super-block unpacked once per tile (the AMX kernel: once per 32 rows).
 *
 * One layout for all three: 16 weight rows in the 16 int32 lanes, activation dwords
 * broadcast (sections "Q4_K and Q5_K, weight rows in lanes" and "Q6_K, weight rows in
 * lanes", each with its own description). The row layout needs fewer vector instructions
 * per vpdpbusd than putting a super-block's 256 elements in the lanes (docs/performance.md,
 * "Kernels by weight type and ISA"). What bounds the 8-row tiles depends on the host: where
 * vpdpbusd and vpmulld issue one a cycle together (Zen 4) the Q4_K tile reaches 0.72 a
 * cycle; where vpdpbusd runs 2 a cycle from registers and 1.8 with these broadcast operands
 * (`spex bench kernels --cached` prints that ceiling) the tile reaches 61-65 % of it (Zen 5).
 *
 * Without VNNI, vpdpbusd is replaced by vpmaddubsw (int16 pair sums, never saturating with
 * these codes) widened by vpmaddwd with ones: the same integers, so both variants agree bit
 * for bit.
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "cpu/arch/x86/avx512/amx.h"
#include "cpu/arch/x86/kq_act.h"
#include "cpu/arch/x86/kq_prefetch.h"
#include "cpu/arch/x86/kq_r16.h"
#include "cpu/kquants_internal.h"
#include "tensor/blocks.h"

#define KQ_G 8 /* activation rows per register group */

/* KQ_INLINE and kq_prefetch: cpu/arch/x86/kq_prefetch.h. */

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

/* ======================================================================== */
/* Q4_K and Q5_K, weight rows in lanes                                       */
/* ======================================================================== */

/* Each of the 16 int32 lanes belongs to one weight row (a block of 16 rows), and an
 * activation dword is broadcast to all lanes (vpdpbusd's embedded broadcast). Per
 * activation row and super-block that is 64 vpdpbusd whose lanes each cover one sub-block
 * for 8 steps, so the sub-block scales cost one vpmulld per 8 vpdpbusd, the minimums 4
 * vpdpwssd and the float step (d, dmin, dx) 3 operations, each for 16 weight rows at
 * once. The price is a transpose of the 16 rows' codes and scales per super-block, shared
 * by all activation rows of the group (up to KQ_G). Counted per vpdpbusd, 8 activation
 * rows cost about 1.9 vector instructions here (Q4_K) against about 3 in the sub-block
 * layout above, 1 row about 5 against 7.5; Q5_K adds the fifth bits to the transpose.
 * Q6_K stays in the sub-block layout: its 16 scales per super-block and 6-bit codes
 * would cost as much here as they save.
 *
 * Lane l holds row l of the block (rows past the matrix repeat its last row; their lanes
 * are computed and dropped, so a tail costs a full block).
 * Codes: qs dword k (g = k / 8, k' = k % 8) holds elements 64g + 4k' + t (low nibbles,
 * sub-block 2g) and 64g + 32 + 4k' + t (high nibbles, sub-block 2g + 1), which meet
 * activation dwords 16g + k' and 16g + 8 + k'. With VNNI the high nibbles are used in
 * place (code * 16: at most 240, still a u8) and the low sub-blocks' scales are multiplied
 * by 16 instead; without VNNI (vpmaddubsw would saturate at 240 * 127 * 2) the high
 * nibbles are shifted down and both scales carry the 16. Q5_K: bits 2g and 2g + 1 of qh
 * dword k' become bit 4 of the low and high codes (both shifted down, at most 31, no 16
 * anywhere: T16 is then T and d16 is d). Either way
 *     T16 = 16 * sum_s sc[s] * sum_{e in s} q[e] * x[e]
 * exactly (|T16| < 2^29), M = sum_s m[s] * (bsums[2s] + bsums[2s+1]) exactly, and
 *     y += dx * ((d / 16) * T16 - dmin * M)          (three f32 roundings, lane by lane)
 * summed over super-blocks in order, so a row's result depends on nothing but its data. */

KQ_INLINE __m512i kq_bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + w . x, four byte products per lane (u8 w, s8 x). */
KQ_INLINE __m512i kq_dp(__m512i acc, __m512i w, __m512i x, const int vnni) {
    if (vnni) return _mm512_dpbusd_epi32(acc, w, x);
    __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1));
    __asm__("" : "+v"(p)); /* keep vpmaddwd + vpaddd from fusing into vpdpwssd (see kq_dot) */
    return _mm512_add_epi32(acc, p);
}

/* acc + w . (the dword at p in every lane). With VNNI one vpdpbusd with an embedded
 * broadcast (gcc keeps a separate vpbroadcastd otherwise: one more instruction per
 * vpdpbusd, 6% of the 8-row time). */
KQ_INLINE __m512i kq_dpb(__m512i acc, __m512i w, const int8_t *p, const int vnni) {
    if (vnni) {
        __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
        return acc;
    }
    return kq_dp(acc, w, kq_bcast32(p), 0);
}

/* After kq_transpose of z[0..3] = [rows j | rows 4+j] and z[4..7] = [rows 8+j | 12+j]
 * (32 bytes each), 128-bit lane L of z[c] holds dword c (L even) or 4+c (L odd) of four
 * rows; picking the even (h = 0) or odd (h = 1) lanes of z[c] and z[4+c] gives dword 4h+c
 * of rows 0..15 in order. */
KQ_INLINE __m512i kq_pick(__m512i y0, __m512i y1, const int h) {
    return h ? _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(3, 1, 3, 1)) : _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(2, 0, 2, 0));
}

/* Where a 16-row block's super-block comes from: the rows in the ggml layout (rows[l] + off
 * is row l's block), or, with the R16 layout (cpu/matmul.h), one unit in which word k of
 * the 16 rows is the 64 bytes at unit + 64k — the transposes below are then plain loads. */
typedef struct {
    const uint8_t *const *rows;
    size_t off;
    const uint8_t *unit;
} kq_src;

/* 32 bytes at byte f of the 16 rows' blocks, transposed: o[k] lane l = dword k of row l. */
KQ_INLINE void kq_gather8(const kq_src *s, size_t f, __m512i o[8], const int packed) {
    if (packed) {
        for (int k = 0; k < 8; k++) o[k] = _mm512_loadu_si512(s->unit + 16 * f + 64 * k);
        return;
    }
    const uint8_t *const *rows = s->rows;
    const size_t off = s->off + f;
    __m512i z[8];
    for (int j = 0; j < 4; j++) {
        z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rows[j] + off))),
                                  _mm256_loadu_si256((const __m256i *)(rows[4 + j] + off)), 1);
        z[4 + j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rows[8 + j] + off))),
                                      _mm256_loadu_si256((const __m256i *)(rows[12 + j] + off)), 1);
    }
    kq_transpose(&z[0], &z[1], &z[2], &z[3]);
    kq_transpose(&z[4], &z[5], &z[6], &z[7]);
    for (int c = 0; c < 4; c++) {
        o[c] = kq_pick(z[c], z[4 + c], 0);
        o[4 + c] = kq_pick(z[c], z[4 + c], 1);
    }
}

/* The 16-byte headers (d, dmin, scales) of the 16 rows' blocks: o[c] lane l = dword c of
 * row l's header. */
KQ_INLINE void kq_gather_hdr(const kq_src *s, __m512i o[4], const int packed) {
    if (packed) {
        for (int c = 0; c < 4; c++) o[c] = _mm512_loadu_si512(s->unit + 64 * c);
        return;
    }
    const uint8_t *const *rows = s->rows;
    const size_t off = s->off;
    for (int j = 0; j < 4; j++) {
        const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rows[j] + off))),
                                                   _mm_loadu_si128((const __m128i *)(rows[4 + j] + off)), 1);
        const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rows[8 + j] + off))),
                                                   _mm_loadu_si128((const __m128i *)(rows[12 + j] + off)), 1);
        o[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    kq_transpose(&o[0], &o[1], &o[2], &o[3]); /* o[j]'s 128-bit lane L was rows[4L + j] */
}

/* Per 16-row block and super-block: the scales and minimums in lanes. */
typedef struct {
    __m512i sc[8]; /* multiplier of sub-block s's integer sum (see the section comment) */
    __m512i m[4];  /* int16 pairs (m[2t], m[2t+1])                                      */
    __m512 d16, ndmin;
} kq_w16s;

KQ_INLINE void kq_w16_scales(const kq_src *src, kq_w16s *s, const int x16odd, const int q5, const int packed) {
    __m512i h[4];
    kq_gather_hdr(src, h, packed);
    const __m512i u0 = h[1], u1 = h[2], u2 = h[3];
    const __m512i m3f = _mm512_set1_epi8(0x3f), m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    /* bytewise: sc[0..3] = u0 & 63, m[0..3] = u1 & 63,
     * sc[4..7] = (u2 & 15) | (u0 >> 6) << 4, m[4..7] = (u2 >> 4) | (u1 >> 6) << 4 */
    const __m512i s03 = _mm512_and_si512(u0, m3f), m03 = _mm512_and_si512(u1, m3f);
    const __m512i s47 = _mm512_ternarylogic_epi32(_mm512_and_si512(u2, m0f), _mm512_srli_epi32(u0, 2), m30, 0xf8);
    const __m512i m47 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m0f),
                                                  _mm512_srli_epi32(u1, 2), m30, 0xf8);
    const __m512i ff = _mm512_set1_epi32(0xff);
    for (int j = 0; j < 4; j++) {
        const __m512i a = _mm512_and_si512(_mm512_srli_epi32(s03, 8 * j), ff);
        const __m512i b = _mm512_and_si512(_mm512_srli_epi32(s47, 8 * j), ff);
        /* even sub-blocks (low nibbles) always carry 16; odd ones only without VNNI */
        const int odd = j & 1;
        s->sc[j] = q5 || (odd && x16odd) ? a : _mm512_slli_epi32(a, 4);
        s->sc[4 + j] = q5 || (odd && x16odd) ? b : _mm512_slli_epi32(b, 4);
    }
    /* (m[2t], m[2t+1]) as int16 pairs: select bytes [m2t, m2t+1, m2t+1, .] and keep bytes 0, 2 */
    const __m512i lo16 = _mm512_set1_epi32(0x0000ffff), ffw = _mm512_set1_epi32(0x00ff00ff);
    s->m[0] = _mm512_and_si512(_mm512_ternarylogic_epi32(lo16, m03, _mm512_slli_epi32(m03, 8), 0xca), ffw);
    s->m[1] = _mm512_and_si512(_mm512_ternarylogic_epi32(lo16, _mm512_srli_epi32(m03, 16), _mm512_srli_epi32(m03, 8), 0xca), ffw);
    s->m[2] = _mm512_and_si512(_mm512_ternarylogic_epi32(lo16, m47, _mm512_slli_epi32(m47, 8), 0xca), ffw);
    s->m[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(lo16, _mm512_srli_epi32(m47, 16), _mm512_srli_epi32(m47, 8), 0xca), ffw);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
    s->d16 = q5 ? d : _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 16.0f));
    s->ndmin = _mm512_sub_ps(_mm512_setzero_ps(), dmin);
}

/* One activation row's super-block step from its exact integers: T16 (the scaled code sums,
 * lanes = weight rows) and the minimum pairs p; returns acc + dx * ((d / 16) * T16 - dmin * M).
 * Shared by the vpdpbusd and the AMX tiles, so both give the same bits. */
KQ_INLINE __m512 kq_w16_fin(const kq_w16s *s, const kq_bpair *p, float dx, __m512i T, const int vnni, __m512 acc) {
    __m512i M = _mm512_madd_epi16(s->m[0], _mm512_set1_epi32(p->p[0]));
    if (vnni) { /* the same integers (no saturation: |m * P| < 2^18) */
        M = _mm512_dpwssd_epi32(M, s->m[1], _mm512_set1_epi32(p->p[1]));
        M = _mm512_dpwssd_epi32(M, s->m[2], _mm512_set1_epi32(p->p[2]));
        M = _mm512_dpwssd_epi32(M, s->m[3], _mm512_set1_epi32(p->p[3]));
    } else {
        __m512i m1 = _mm512_madd_epi16(s->m[1], _mm512_set1_epi32(p->p[1]));
        __m512i m2 = _mm512_madd_epi16(s->m[2], _mm512_set1_epi32(p->p[2]));
        __m512i m3 = _mm512_madd_epi16(s->m[3], _mm512_set1_epi32(p->p[3]));
        __asm__("" : "+v"(M), "+v"(m1), "+v"(m2), "+v"(m3)); /* no vpdpwssd in this variant */
        M = _mm512_add_epi32(_mm512_add_epi32(M, m1), _mm512_add_epi32(m2, m3));
    }
    const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), s->ndmin, _mm512_mul_ps(_mm512_cvtepi32_ps(T), s->d16));
    return _mm512_fmadd_ps(t, _mm512_set1_ps(dx), acc);
}

/* acc[j] (lanes = the block's rows) += super-block b of the block against activation rows
 * xr[j], j < g; the codes of one 64-element group are unpacked once for all g rows. */
KQ_INLINE void kq_w16_sb(const kq_src *src, const block_q8_K *const *xr, const kq_bpair *const *bp, int64_t b,
                         const int g, const int vnni, const int q5, const int packed, __m512 *acc) {
    kq_w16s s;
    kq_w16_scales(src, &s, vnni, q5, packed);
    __m512i oh[8]; /* Q5_K: the fifth bits, qh dword k (the same for every group) */
    if (q5) kq_gather8(src, offsetof(block_q5_K, qh), oh, packed);
    __m512i T[KQ_G];
    const __m512i m0f = _mm512_set1_epi8(0x0f), mf0 = _mm512_set1_epi8((char)0xf0);
    for (int gg = 0; gg < 4; gg++) {
        __m512i o[8], lo[8], hi[8];
        kq_gather8(src, (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs)) + 32 * (size_t)gg, o, packed);
        for (int k = 0; k < 8; k++) {
            if (q5) { /* bits 2gg and 2gg+1 of the qh bytes become bit 4 of the low / high codes */
                const __m512i hb = _mm512_srlv_epi32(oh[k], _mm512_set1_epi32(2 * gg));
                const __m512i m10 = _mm512_set1_epi8(0x10);
                lo[k] = _mm512_ternarylogic_epi32(o[k], _mm512_and_si512(_mm512_slli_epi32(hb, 4), m10), m0f, 0xec); /* (a & c) | b */
                hi[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(o[k], 4), _mm512_and_si512(_mm512_slli_epi32(hb, 3), m10), m0f, 0xec); /* (a & c) | b */
            } else {
                lo[k] = _mm512_and_si512(o[k], m0f);
                hi[k] = vnni ? _mm512_and_si512(o[k], mf0) : _mm512_and_si512(_mm512_srli_epi32(o[k], 4), m0f);
            }
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < KQ_G; j++) {
            if (j >= g) break;
            const int8_t *q = xr[j][b].qs + 64 * gg;
            __m512i al = _mm512_setzero_si512(), ah = _mm512_setzero_si512();
            for (int k = 0; k < 8; k++) {
                al = kq_dpb(al, lo[k], q + 4 * k, vnni);
                ah = kq_dpb(ah, hi[k], q + 32 + 4 * k, vnni);
            }
            const __m512i t = _mm512_add_epi32(_mm512_mullo_epi32(al, s.sc[2 * gg]), _mm512_mullo_epi32(ah, s.sc[2 * gg + 1]));
            T[j] = gg ? _mm512_add_epi32(T[j], t) : t;
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < KQ_G; j++) {
        if (j >= g) break;
        acc[j] = kq_w16_fin(&s, &bp[j][b], xr[j][b].d, T[j], vnni, acc[j]);
    }
}

/* The 16 rows of the weight block at row i0 (rows past nw repeat the last one: their lanes
 * are computed and dropped) for a span of nbs super-blocks from b0, and its read-ahead: the
 * next block's rows (one contiguous range when rows are packed) are prefetched front to
 * back, a slice of *pfs bytes per super-block from the returned address (0: none), since 16
 * rows read side by side are 16 streams, too many for the hardware prefetchers (the 1-row
 * case fell from 28 to 23 GB/s without this); in the R16 layout the slice is exactly the
 * next block's unit of the same super-block. The call's first block is requested at once.
 * R16: the last block reads ahead what follows it, the first block of the next span (nb
 * super-blocks in all), or after the last span the units just past this call's rows: in a
 * ranged matmul run (matmul.c) that is the thread's next claim, whose first block otherwise
 * starts cold. A call of 8 activation rows is compute-bound, and one ~1 us wait for its first
 * units at each of ~26 calls per thread and layer (claims of a 256-row plan chunk) cost
 * verify(8) 2-8 % (in-process A/B, docs/performance.md, "Multi-row tiles and
 * verify(k)/decode(1)"). When another thread takes that claim the lines are read for nothing
 * (prefetches never fault, past a matrix's end too). */
KQ_INLINE uintptr_t kq_block_start(const void *w, size_t w_stride, int nw, int i0, int64_t b0, int nbs, int64_t nb,
                                   size_t bsize, const int packed, const uint8_t **rows, size_t *pfs) {
    for (int l = 0; l < KQ_WB; l++) rows[l] = (const uint8_t *)w + (size_t)(i0 + l < nw ? i0 + l : nw - 1) * w_stride;
    const size_t unit = (size_t)KQ_WB * bsize; /* R16: bytes of one super-block's unit */
    const uintptr_t next = (uintptr_t)((const uint8_t *)w + (size_t)(i0 + KQ_WB) * w_stride);
    const size_t pfn = (size_t)(nw - i0 - KQ_WB < KQ_WB ? nw - i0 - KQ_WB : KQ_WB) * w_stride;
    *pfs = packed ? unit : (pfn / (size_t)nbs + 63) & ~(size_t)63;
    if (i0 == 0)
        kq_prefetch((uintptr_t)rows[0] + (uintptr_t)b0 * (packed ? unit : bsize),
                    packed ? (size_t)nbs * unit : (size_t)(nw < KQ_WB ? nw : KQ_WB) * w_stride);
    if (i0 + KQ_WB >= nw) {
        if (!packed) return 0;
        return b0 + nbs < nb ? (uintptr_t)w + (uintptr_t)(b0 + nbs) * unit : next;
    }
    return packed ? next + (uintptr_t)b0 * unit : next + (uintptr_t)b0 * bsize;
}

/* y[j*ldy + l] = (first) or += acc[j] lane l, j < g, l < min(nv, 16): one masked store a row. */
KQ_INLINE void kq_block_store(float *y, size_t ldy, int g, int nv, const __m512 *acc, int first) {
    const __mmask16 km = (__mmask16)((1u << (nv < KQ_WB ? nv : KQ_WB)) - 1u);
    for (int j = 0; j < g; j++) {
        float *yo = y + (size_t)j * ldy;
        if (first) _mm512_mask_storeu_ps(yo, km, acc[j]);
        else _mm512_mask_storeu_ps(yo, km, _mm512_add_ps(_mm512_maskz_loadu_ps(km, yo), acc[j]));
    }
}

/* Blocks of 16 weight rows × groups of <= 8 activation rows; a row's sums run over its
 * super-blocks in order in spans of KQ_WSPAN (the prepared minimum pairs), each span's sum
 * added to y in order. packed: W in the R16 layout (nw a multiple of 16), which changes
 * where the bytes come from and nothing else, so both layouts give the same bits. */
KQ_INLINE void kq_w16_tile(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                           int nx, float *y, size_t ldy, const int vnni, const int q5, const int packed) {
    const size_t bsize = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
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
                /* per call and activation row, so a visible part of a small call (a 16-row call of
                 * 8 rows took ~23 % longer per row than a 256-row one with scalar pairs) */
                kq_bpairs(xr[j], nbs, bpbuf[j]);
            }
            for (int i0 = 0; i0 < nw; i0 += KQ_WB) {
                const uint8_t *rows[KQ_WB];
                size_t pfs;
                const uintptr_t pf0 = kq_block_start(w, w_stride, nw, i0, b0, nbs, nb, bsize, packed, rows, &pfs);
                const size_t unit = (size_t)KQ_WB * bsize; /* R16: bytes of one super-block's unit */
                __m512 acc[KQ_G];
                for (int j = 0; j < KQ_G; j++) acc[j] = _mm512_setzero_ps();
                /* Every row count prefetches the next group, 1-2 rows included: at 45-50 GB/s a
                 * thread the hardware read-ahead of one forward stream falls behind (one row
                 * 39-49 % of the probe without, 58-78 % with; at ~30 GB/s the stream alone kept
                 * up: docs/performance.md, "Decode against the streaming-read probe"). */
                for (int b = 0; b < nbs; b++) {
                    if (pf0) kq_prefetch(pf0 + (uintptr_t)b * pfs, pfs);
                    const kq_src src = {.rows = rows, .off = (size_t)(b0 + b) * bsize,
                                        .unit = rows[0] + (size_t)(b0 + b) * unit};
                    switch (g) {
                    case 1: kq_w16_sb(&src, xr, bp, b, 1, vnni, q5, packed, acc); break;
                    case 2: kq_w16_sb(&src, xr, bp, b, 2, vnni, q5, packed, acc); break;
                    case 3: kq_w16_sb(&src, xr, bp, b, 3, vnni, q5, packed, acc); break;
                    case 4: kq_w16_sb(&src, xr, bp, b, 4, vnni, q5, packed, acc); break;
                    case 5: kq_w16_sb(&src, xr, bp, b, 5, vnni, q5, packed, acc); break;
                    case 6: kq_w16_sb(&src, xr, bp, b, 6, vnni, q5, packed, acc); break;
                    case 7: kq_w16_sb(&src, xr, bp, b, 7, vnni, q5, packed, acc); break;
                    default: kq_w16_sb(&src, xr, bp, b, 8, vnni, q5, packed, acc); break;
                    }
                }
                kq_block_store(y + (size_t)j0 * ldy + (size_t)i0, ldy, g, nw - i0, acc, b0 == 0);
            }
        }
    }
}

void spex_dot_q5_K_avx512(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx,
                          float *y, size_t ldy) {
    kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 1, 0);
}

void spex_dot_q5_K_avx512_vnni(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                               int nx, float *y, size_t ldy) {
    kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 1, 0);
}

void spex_dot_q4_K_avx512(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx,
                          float *y, size_t ldy) {
    kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 0, 0);
}

void spex_dot_q4_K_avx512_vnni(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                               int nx, float *y, size_t ldy) {
    kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 0, 0);
}

/* The R16 entry points (weights repacked at load, cpu/matmul.h). */
#define KQ_R16_ENTRY(name, VNNI, Q5)                                                              \
    void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx, \
              float *y, size_t ldy) {                                                            \
        kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, VNNI, Q5, 1);                    \
    }
KQ_R16_ENTRY(spex_dot_q4_K_r16_avx512, 0, 0)
KQ_R16_ENTRY(spex_dot_q4_K_r16_avx512_vnni, 1, 0)
KQ_R16_ENTRY(spex_dot_q5_K_r16_avx512, 0, 1)
KQ_R16_ENTRY(spex_dot_q5_K_r16_avx512_vnni, 1, 1)

/* ======================================================================== */
/* Q4_K and Q5_K on AMX tiles (R16 weights, 9+ activation rows)             */
/* ======================================================================== */

/* Where the CPU has AMX-INT8 (Sapphire Rapids on), one tdpbsud multiplies a tile of up to 16
 * activation rows × 64 codes (s8) by one of 64 codes × 16 weight rows (u8, four consecutive
 * codes of a weight row per dword) into 16 × 16 int32 sums. The R16 unit nearly holds the
 * weight operand's layout: qs word k of the 16 rows (64 bytes), masked to its low nibbles,
 * is row k of a 64-element group's tile (sub-block 2gg) and, masked to its high nibbles and
 * shifted down, row 8 + k (sub-block 2gg + 1). Each sub-block has its own 6-bit scale, which
 * a tile product cannot apply per 32 codes; so the scales are folded into the weight bytes
 * (ka_unpack: two tiles, codes * (sc % 16) and codes * (sc / 16); Q5_K's 5-bit codes with
 * sc % 8 and sc / 8) and two products per group cover the whole super-block. T16 and M are
 * then the VNNI kernel's integers and kq_w16_fin its float step, so both give the same bits
 * and a verify or prompt pass on tiles still matches 1-row decoding.
 *
 * Tile instructions cost about the same whatever their rows (here: tileloadd ~8 cycles,
 * tdpbsud ~14, tilestored ~16 with 16 rows), and the weight tiles are built in memory (8 KiB
 * per unit and super-block, 128 stores) for the tile loads. Up to 8 rows that build is not
 * repaid and vpdpbusd is as fast (1.02 at 8 rows in cache; 6 rows 0.91), so the tiles serve
 * calls of KA_MIN_ROWS rows and more, where one build serves every 16-row group of up to
 * KA_BLOCK activation rows (in cache 1.33-1.55 times vpdpbusd from 9 rows on; in the model
 * verify(16) -15 %, a 94-token prompt -21 %: docs/performance.md, "AMX tiles"). Activation
 * tiles are read in place (the rows' qs at the call's row stride).
 *
 * Tiles: tmm0/1 the two sums of a full first group and tmm2 its activations, tmm6/7 and
 * tmm3 the same for the last group (r1 rows, 16 or fewer), tmm4/5 the two weight tiles. The
 * configuration depends only on r1, so a thread reloads it only when that changes
 * (spex_amx_configure). */

#define KA_MIN_ROWS 9  /* fewer activation rows run on vpdpbusd                         */
#define KA_BLOCK 32    /* activation rows (two tile groups) one weight-tile build serves  */

/* Tile shape for a last group of r1 rows (1..16): tmm3, tmm6, tmm7 have r1 rows. */
static void ka_configure(int r1) {
    spex_amx_shape sh;
    for (int t = 0; t < 8; t++) {
        sh.rows[t] = (uint8_t)(t == 3 || t >= 6 ? r1 : 16);
        sh.colsb[t] = 64;
    }
    spex_amx_configure(&sh, 0x100 + r1);
}

/* One super-block of one 16-row unit for the activation rows of a block (see the loop). */
typedef struct {
    _Alignas(64) uint8_t wt[4][2][16][64]; /* 64-element group gg's weight tiles: codes * sl, codes * sh */
    _Alignas(64) int32_t sum[2][2][16][16]; /* group q's sums against them                              */
} ka_stage;

/* The weight tiles of a unit's super-block with the sub-block scales folded in. Q4_K: a
 * scale sc < 64 is 16 sh + sl (sl < 16, sh < 4); code * sl <= 225 and code * sh <= 45 are
 * bytes, so T16 = 16 * sum_e sc q x = 16 * (sum_e (q sl) x + 16 sum_e (q sh) x): two tile
 * products over the whole super-block instead of eight sums tiles to scale one by one. Q5_K
 * (codes < 32, T16 = T): sc = 8 sh + sl (sl, sh < 8; products <= 217), T = sum (q sl) x +
 * 8 sum (q sh) x. Row r < 8 of group gg's tile is qs word r's low nibbles (sub-block 2gg;
 * Q5_K: with qh bit 2gg as bit 4), row 8 + r its high nibbles (2gg + 1; qh bit 2gg + 1); a
 * 16-bit multiply of two code bytes by sl (or sh) gives both products, since neither carries
 * into the other byte. */
KQ_INLINE void ka_unpack(const uint8_t *unit, const kq_w16s *s, ka_stage *st, const int q5) {
    const __m512i m0f = _mm512_set1_epi8(0x0f), m10 = _mm512_set1_epi8(0x10);
    const uint8_t *q = unit + 16 * (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const uint8_t *qh = unit + 16 * offsetof(block_q5_K, qh);
    const int sbits = q5 ? 3 : 4; /* sl = sc % 2^sbits, sh = sc >> sbits */
    const __m512i lmask = _mm512_set1_epi32(q5 ? 0x00070007 : 0x000f000f);
    for (int gg = 0; gg < 4; gg++) {
        /* the raw scales (kq_w16_scales keeps Q4_K's even sub-blocks' times 16) in both halves
         * of each 32-bit lane */
        const __m512i sc0 = q5 ? s->sc[2 * gg] : _mm512_srli_epi32(s->sc[2 * gg], 4), sc1 = s->sc[2 * gg + 1];
        const __m512i r0 = _mm512_or_si512(sc0, _mm512_slli_epi32(sc0, 16));
        const __m512i r1 = _mm512_or_si512(sc1, _mm512_slli_epi32(sc1, 16));
        const __m512i l0 = _mm512_and_si512(r0, lmask), h0 = _mm512_and_si512(_mm512_srli_epi32(r0, sbits), lmask);
        const __m512i l1 = _mm512_and_si512(r1, lmask), h1 = _mm512_and_si512(_mm512_srli_epi32(r1, sbits), lmask);
        for (int k = 0; k < 8; k++) {
            const __m512i o = _mm512_loadu_si512(q + 512 * gg + 64 * k);
            __m512i lo = _mm512_and_si512(o, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(o, 4), m0f);
            if (q5) {
                const __m512i hb = _mm512_srli_epi32(_mm512_loadu_si512(qh + 64 * k), 2 * gg);
                lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32(hb, 4), m10));
                hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi32(hb, 3), m10));
            }
            _mm512_store_si512(st->wt[gg][0][k], _mm512_mullo_epi16(lo, l0));
            _mm512_store_si512(st->wt[gg][0][8 + k], _mm512_mullo_epi16(hi, l1));
            _mm512_store_si512(st->wt[gg][1][k], _mm512_mullo_epi16(lo, h0));
            _mm512_store_si512(st->wt[gg][1][8 + k], _mm512_mullo_epi16(hi, h1));
        }
    }
}

/* The two sums tiles of each group: tiles tmm0/1 (sums) and tmm2 (activations) for a full
 * first group, tmm6/7 and tmm3 for the last group (r1 rows); xq[q]: group q's first row's qs
 * of the super-block. */
KQ_INLINE void ka_tiles(const int8_t *const *xq, int nq, size_t x_stride, ka_stage *st, const int sgn) {
    if (nq == 2) {
        SPEX_AMX_ZERO(0);
        SPEX_AMX_ZERO(1);
    }
    SPEX_AMX_ZERO(6);
    SPEX_AMX_ZERO(7);
    for (int gg = 0; gg < 4; gg++) {
        SPEX_AMX_LOAD(4, st->wt[gg][0], 64);
        SPEX_AMX_LOAD(5, st->wt[gg][1], 64);
        if (nq == 2) {
            SPEX_AMX_LOAD(2, xq[0] + 64 * gg, x_stride);
            SPEX_AMX_DPBSUD(0, 2, 4);
            if (sgn) SPEX_AMX_DPBSSD(1, 2, 5);
            else SPEX_AMX_DPBSUD(1, 2, 5);
        }
        SPEX_AMX_LOAD(3, xq[nq - 1] + 64 * gg, x_stride);
        SPEX_AMX_DPBSUD(6, 3, 4);
        if (sgn) SPEX_AMX_DPBSSD(7, 3, 5);
        else SPEX_AMX_DPBSUD(7, 3, 5);
    }
    if (nq == 2) {
        SPEX_AMX_STORE(0, st->sum[0][0], 64);
        SPEX_AMX_STORE(1, st->sum[0][1], 64);
    }
    SPEX_AMX_STORE(6, st->sum[nq - 1][0], 64);
    SPEX_AMX_STORE(7, st->sum[nq - 1][1], 64);
}

/* acc[j] += the super-block for rows j < g: T16 = 16 * (sum_l + 16 * sum_h) (Q5_K: sum_l +
 * 8 * sum_h), then kq_w16_fin. */
KQ_INLINE void ka_scale(const kq_w16s *s, const ka_stage *st, const kq_bpair (*bp)[KQ_WSPAN], int64_t b,
                        const float (*xd)[KQ_WSPAN], int g, __m512 *acc, const int q5) {
    for (int j = 0; j < g; j++) {
        const int32_t(*sm)[16][16] = st->sum[j / 16];
        const __m512i l = _mm512_load_si512(sm[0][j % 16]), h = _mm512_load_si512(sm[1][j % 16]);
        const __m512i T = q5 ? _mm512_add_epi32(l, _mm512_slli_epi32(h, 3))
                             : _mm512_slli_epi32(_mm512_add_epi32(l, _mm512_slli_epi32(h, 4)), 4);
        acc[j] = kq_w16_fin(s, &bp[j][b], xd[j][b], T, 1, acc[j]);
    }
}

/* ======================================================================== */
/* Q6_K, weight rows in lanes                                                */
/* ======================================================================== */

/* The same idea for Q6_K: lane l is weight row l of a 16-row block, activation dwords are
 * broadcast, and the block's super-block is read as one R16 unit (cpu/matmul.h: ql words
 * 0..31 at unit + 64w, qh words 32..47, the scale bytes as words 48..51, then the 16 fp16 d).
 * In the ggml layout each unit is first transposed from the 16 rows into a stack buffer;
 * R16 units are read in place from 3 activation rows on, and copied to the buffer for 1-2
 * rows (one sequential read, which the hardware prefetchers follow: the kernel's own order
 * jumps around the unit, and every other unit of a matrix is 32 bytes off alignment, which
 * together streamed 1 row from memory at 13 GB/s instead of 25; at 8 rows, compute-bound,
 * the copy was 8 % of the instructions and cost 12-17 %). Both layouts run the same
 * arithmetic and give the same bits.
 *
 * Codes. In half h (elements 128h..128h+127), ql word 16h + k (k < 8) holds in its low
 * nibbles elements 128h + 4k + t (sub-block 8h + k/4) and in its high nibbles 128h + 64 +
 * 4k + t (8h + 4 + k/4); ql word 16h + 8 + k the same 32 elements later (8h + 2 + k/4, 8h +
 * 6 + k/4); qh word 8h + k holds those four codes' top two bits at bits 0-1, 2-3, 4-5, 6-7
 * of each byte. So each of the four parts (A: low nibbles of 16h + k with qh bits 0-1, C:
 * low of 16h + 8 + k with bits 2-3, B: high of 16h + k with 4-5, D: high of 16h + 8 + k
 * with 6-7) is one select (vpternlogd) of a nibble and two bits moved to bits 4-5, and its
 * codes for k = 4q..4q+3 are one sub-block, 8h + 2p + q for part p = A, C, B, D.
 * Sums. A sub-block's integer sum starts at -32 * bsums[s] (the codes are stored + 32),
 * takes 4 vpdpbusd, then one vpmulld by the sub-block's scale into T; per super-block
 *     T = sum_s sc[s] * sum_{e in s} (q[e] - 32) * x[e]          (exact: |T| < 2^27)
 *     y += (d * dx) * T                                            (two f32 roundings)
 * lane by lane, summed over super-blocks in order in spans of KQ6_SPAN, each span's sum
 * added to y in order. Per activation row and super-block: 64 vpdpbusd, 16 vpmulld and
 * adds, 16 broadcast loads and 3 float operations; per 16-row block and super-block,
 * shared by up to KQ_G rows: ~210 operations of unpacking. The activations of a span are
 * prepared once per tile (kq_x6: codes and sub-block starts side by side, rows 320 bytes
 * apart), so every operand address is one register plus a constant. */

#define KQ6_SPAN 8           /* super-blocks prepared per span (8 rows: 20 KiB, in L1) */
/* the unit's offsets KQ6_QH, KQ6_SC, KQ6_D and size KQ6_UNIT: kq_r16.h */

/* One activation super-block prepared for the kernel. */
typedef struct {
    _Alignas(64) int8_t q[QK_K];
    int32_t o[16]; /* -32 * bsums[s]: sub-block s's start */
} kq_x6;

/* The code word of part p (0 A, 1 C, 2 B, 3 D) from its ql word and qh word: a nibble and
 * two top bits moved to bits 4-5, one select. */
KQ_INLINE __m512i kq6_code(const uint8_t *ql, const uint8_t *qh, const int p) {
    const __m512i L = _mm512_loadu_si512(ql), H = _mm512_loadu_si512(qh);
    __m512i nib, top;
    switch (p) {
    case 0: nib = L, top = _mm512_slli_epi32(_mm512_and_si512(H, _mm512_set1_epi8(0x03)), 4); break;
    case 1: nib = L, top = _mm512_slli_epi32(_mm512_and_si512(H, _mm512_set1_epi8(0x0c)), 2); break;
    case 2: nib = _mm512_srli_epi32(L, 4), top = _mm512_and_si512(H, _mm512_set1_epi8(0x30)); break;
    default:
        nib = _mm512_srli_epi32(L, 4);
        top = _mm512_srli_epi32(_mm512_and_si512(H, _mm512_set1_epi8((char)0xc0)), 2);
        break;
    }
    return _mm512_ternarylogic_epi32(nib, top, _mm512_set1_epi8(0x0f), 0xe4); /* 0x0f ? nib : top */
}

/* The 16 rows' blocks at rows[l] + off (ggml layout) as one R16 unit. */
KQ_INLINE void kq_unit_q6_K(const uint8_t *const *rows, size_t off, uint8_t *u) {
    const kq_src s = {.rows = rows, .off = off, .unit = NULL};
    __m512i o[8];
    for (int f = 0; f < 192; f += 32) { /* ql (128 bytes) and qh (64): 32 bytes at a time */
        kq_gather8(&s, (size_t)f, o, 0);
        for (int k = 0; k < 8; k++) _mm512_store_si512(u + 16 * f + 64 * k, o[k]);
    }
    const kq_src sc = {.rows = rows, .off = off + offsetof(block_q6_K, scales), .unit = NULL};
    kq_gather_hdr(&sc, o, 0);
    for (int c = 0; c < 4; c++) _mm512_store_si512(u + KQ6_SC + 64 * c, o[c]);
    for (int l = 0; l < KQ_WB; l++) memcpy(u + KQ6_D + 2 * l, rows[l] + off + offsetof(block_q6_K, d), 2);
}

/* acc[j] (lanes = the block's rows) += the unit u against the prepared activation
 * super-blocks xs[j] (scales xd[j]), j < g; each part's codes are built once for all g
 * rows. pf, pfs: weight bytes to prefetch meanwhile, an eighth per part. */
KQ_INLINE void kq_w16_sb_q6(const uint8_t *u, const kq_x6 *xs, const float *xd, uintptr_t pf, size_t pfs,
                            const int g, const int vnni, __m512 *acc) {
    __m512i T[KQ_G];
    _Pragma("GCC unroll 8") for (int j = 0; j < KQ_G; j++) T[j] = _mm512_setzero_si512();
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            if (pf) kq_prefetch(pf + (uintptr_t)((4 * h + p) * pfs / 8), pfs / 8 + (4 * h + p == 7 ? pfs % 8 : 0));
            /* p = 0 (A), 1 (C), 2 (B), 3 (D): ql word 16h + 8(p & 1) + k, nibble p >> 1 */
            const uint8_t *ql = u + 64 * (16 * h + 8 * (p & 1)), *qh = u + KQ6_QH + 64 * (8 * h);
            _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) {
                /* the four code words of sub-block q, built just before use: 4 live registers,
                 * not 8 (with 8 rows' sums and accumulators, 8 spilled) */
                __m512i V[4];
                _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
                    const int k = 4 * q + t;
                    V[t] = kq6_code(ql + 64 * k, qh + 64 * k, p);
                }
                const int s = 8 * h + 2 * p + q, xo = 128 * h + 32 * p + 16 * q;
                /* sub-block s's signed scale bytes (byte s % 4 of scale word s / 4) */
                const __m512i sw = _mm512_loadu_si512(u + KQ6_SC + 64 * (s / 4));
                const __m512i scv = _mm512_srai_epi32(_mm512_slli_epi32(sw, 24 - 8 * (s % 4)), 24);
                _Pragma("GCC unroll 8") for (int j = 0; j < KQ_G; j++) {
                    if (j >= g) break;
                    __m512i a = _mm512_set1_epi32(xs[j].o[s]);
                    for (int t = 0; t < 4; t++) a = kq_dpb(a, V[t], xs[j].q + xo + 4 * t, vnni);
                    T[j] = _mm512_add_epi32(T[j], _mm512_mullo_epi32(a, scv));
                }
            }
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + KQ6_D)));
    _Pragma("GCC unroll 8") for (int j = 0; j < KQ_G; j++) {
        if (j >= g) break;
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T[j]), _mm512_mul_ps(d, _mm512_set1_ps(xd[j])), acc[j]);
    }
}

/* R16: prefetches into L2 the unit the tile loop reads two visits after unit b of the
 * 16-row group at row i0 (g0 = that group's first byte); visits go through the span's
 * nbs units of a group, then to the next group (16 rows, 16 * w_stride bytes, further). */
KQ_INLINE void kq6_prefetch_ahead(const uint8_t *g0, size_t w_stride, int nw, int i0, int64_t b0, int b, int nbs,
                                  size_t unit) {
    const int k = b + 2, grp = k / nbs;
    if (i0 + KQ_WB * grp >= nw) return;
    kq_prefetch((uintptr_t)(g0 + (size_t)grp * KQ_WB * w_stride + (size_t)(b0 + k % nbs) * unit), unit);
}

/* Blocks of 16 weight rows × groups of <= 8 activation rows over spans of KQ6_SPAN
 * super-blocks: each span's activations prepared once, then every 16-row block runs over it. */
KQ_INLINE void kq_w16_tile_q6(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                              int nx, float *y, size_t ldy, const int vnni, const int packed) {
    const size_t bsize = sizeof(block_q6_K), unit = (size_t)KQ_WB * bsize;
    const int64_t nb = n / QK_K;
    kq_x6 xb[KQ6_SPAN][KQ_G];
    float xd[KQ6_SPAN][KQ_G];
    _Alignas(64) uint8_t ubuf[KQ6_UNIT];
    for (int64_t b0 = 0; b0 < nb; b0 += KQ6_SPAN) {
        const int nbs = (int)(nb - b0 < KQ6_SPAN ? nb - b0 : KQ6_SPAN);
        for (int j0 = 0; j0 < nx; j0 += KQ_G) {
            const int g = nx - j0 < KQ_G ? nx - j0 : KQ_G;
            for (int j = 0; j < g; j++) {
                const block_q8_K *xr = (const block_q8_K *)((const uint8_t *)x + (size_t)(j0 + j) * x_stride) + b0;
                for (int b = 0; b < nbs; b++) {
                    for (int c = 0; c < QK_K / 64; c++)
                        _mm512_store_si512(xb[b][j].q + 64 * c, _mm512_loadu_si512(xr[b].qs + 64 * c));
                    const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xr[b].bsums));
                    _mm512_store_si512(xb[b][j].o, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
                    xd[b][j] = xr[b].d;
                }
            }
            for (int i0 = 0; i0 < nw; i0 += KQ_WB) {
                const uint8_t *rows[KQ_WB];
                size_t pfs;
                const uintptr_t pf0 = kq_block_start(w, w_stride, nw, i0, b0, nbs, nb, bsize, packed, rows, &pfs);
                __m512 acc[KQ_G];
                for (int j = 0; j < KQ_G; j++) acc[j] = _mm512_setzero_ps();
                for (int b = 0; b < nbs; b++) {
                    const uintptr_t pfb = pf0 ? pf0 + (uintptr_t)b * pfs : 0;
                    /* R16: read in place. With 1-2 rows the weights stream from memory faster
                     * than the kernel's order within a unit (ql, qh and scale words; every
                     * other unit 32 bytes off a line) lets the hardware prefetchers follow, so
                     * besides the next group's unit (pfb, spread over the parts) the unit two
                     * visits ahead is prefetched into L2 line by line: without it 1 row in
                     * place read ~60 % of the probe, with both 90-110 %. A copy of each unit
                     * into an aligned buffer instead is as fast from memory and 15-35 % slower
                     * in cache. ggml layout: transpose into the buffer. */
                    const uint8_t *u = ubuf;
                    if (packed) {
                        u = rows[0] + (size_t)(b0 + b) * unit;
                        if (g < 3) kq6_prefetch_ahead(rows[0], w_stride, nw, i0, b0, b, nbs, unit);
                    } else {
                        kq_unit_q6_K(rows, (size_t)(b0 + b) * bsize, ubuf);
                    }
                    switch (g) {
                    case 1: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 1, vnni, acc); break;
                    case 2: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 2, vnni, acc); break;
                    case 3: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 3, vnni, acc); break;
                    case 4: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 4, vnni, acc); break;
                    case 5: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 5, vnni, acc); break;
                    case 6: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 6, vnni, acc); break;
                    case 7: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 7, vnni, acc); break;
                    default: kq_w16_sb_q6(u, xb[b], xd[b], pfb, pfs, 8, vnni, acc); break;
                    }
                }
                kq_block_store(y + (size_t)j0 * ldy + (size_t)i0, ldy, g, nw - i0, acc, b0 == 0);
            }
        }
    }
}

/* The four entry points: ggml layout or R16, with or without VNNI. */
#define KQ6_ENTRY(name, VNNI, PACKED)                                                             \
    void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx, \
              float *y, size_t ldy) {                                                            \
        kq_w16_tile_q6(n, w, w_stride, nw, x, x_stride, nx, y, ldy, VNNI, PACKED);                \
    }
KQ6_ENTRY(spex_dot_q6_K_avx512, 0, 0)
KQ6_ENTRY(spex_dot_q6_K_avx512_vnni, 1, 0)
KQ6_ENTRY(spex_dot_q6_K_r16_avx512, 0, 1)
KQ6_ENTRY(spex_dot_q6_K_r16_avx512_vnni, 1, 1)

/* ======================================================================== */
/* Q6_K on AMX tiles (R16 weights, 12+ activation rows)                     */
/* ======================================================================== */

/* The Q4_K tiles' scheme for Q6_K. A code word of the R16 unit (16 weight rows in the
 * dword lanes, four consecutive codes each) is already a row of the weight operand: a
 * 64-element group's tile is the eight words of part A (rows 0-7) and of part C (rows 8-15)
 * for the group 2h, of B and D for 2h + 1 (the parts of the section above). A signed 8-bit
 * scale per 16 codes does not fit in a byte with its code, but the scaled code does in two:
 *     w = sc * (q - 32)  in [-4064, 4096],  w = 64 a + b,  a = w >> 6 in [-64, 64], b = w & 63,
 * so T = sum_e w x = 64 * sum_e a x + sum_e b x: two tile products per group over the whole
 * super-block (tdpbssd for the signed a, tdpbsud for b), the exact T of the vpdpbusd
 * kernel, and its float step (d * dx) * T in spans of KQ6_SPAN, so both give the same bits.
 * The 16-bit products come from vpmaddubsw with the scale in every other byte (codes < 64:
 * no saturation), which needs no widening of the codes. Building the two weight tiles costs
 * ~15 vector operations a word, 64 words a unit (twice the Q4_K build's), shared by up to
 * KA_BLOCK activation rows.
 *
 * Where the tiles start to pay, measured on an Intel AMX host (docs/performance.md, "AMX tiles"):
 * in cache (`bench kernels --cached --types q6_K`, a build with the threshold at 2 against
 * SPEX_AMX=0, one thread, n = 1024 and 3072) tiles / vpdpbusd were 0.76-0.84 at 8 rows,
 * 1.12-1.15 at 9, 1.13-1.22 at 10, 1.06-1.18 at 11 and 1.21-1.32 at 16; but in the model
 * (a 0.6B-shape Q4_K_M, whose Q6_K is mostly the 155 M-weight output head streamed from
 * DRAM, verify(9..11) alternated with a build at 12) the tiles at 9-11 rows gave nothing:
 * verify(9) ~3 % slower, 10 and 11 even. So the threshold is the estimate from cycle counts
 * (~370 cycles to build a unit's tiles against ~550 for 8 rows on vpdpbusd and ~1100 for 16:
 * clear gains from ~12 rows), and the tiles serve 12+ rows. On hosts without AMX the bits
 * are checked on a C model of the tiles (tests/amx_emul.c). */

#define KA6_MIN_ROWS 12

/* The two weight tiles of each 64-element group of a unit: st->wt[G][0] the b bytes,
 * st->wt[G][1] the a bytes (see above). */
KQ_INLINE void ka6_unpack(const uint8_t *u, ka_stage *st) {
    const __m512i lo8 = _mm512_set1_epi16(0x00ff);
    const __m512i m3f = _mm512_set1_epi8(0x3f);
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 4; p++) {
            const uint8_t *ql = u + 64 * (16 * h + 8 * (p & 1)), *qh = u + KQ6_QH + 64 * (8 * h);
            const int G = 2 * h + (p >> 1);
            for (int q = 0; q < 2; q++) {
                const int s = 8 * h + 2 * p + q;
                /* sub-block s's scale (byte s % 4 of scale word s / 4), sign-extended in each
                 * 16-bit half of the lanes; vpmaddubsw multipliers for the even and the odd
                 * codes, and 32 * sc for the codes' offset */
                const __m512i sw = _mm512_loadu_si512(u + KQ6_SC + 64 * (s / 4));
                const __m512i sc32 = _mm512_srai_epi32(_mm512_slli_epi32(sw, 24 - 8 * (s % 4)), 24);
                const __m512i sc16 = _mm512_ternarylogic_epi32(sc32, _mm512_slli_epi32(sc32, 16), _mm512_set1_epi32(0xffff), 0xe4);
                const __m512i me = _mm512_and_si512(sc16, lo8), mo = _mm512_slli_epi16(sc16, 8);
                const __m512i k32 = _mm512_slli_epi16(sc16, 5);
                for (int t = 0; t < 4; t++) {
                    const int k = 4 * q + t;
                    const __m512i c = kq6_code(ql + 64 * k, qh + 64 * k, p);
                    /* w of the even and the odd codes of each 16-bit lane */
                    const __m512i we = _mm512_sub_epi16(_mm512_maddubs_epi16(c, me), k32);
                    const __m512i wo = _mm512_sub_epi16(_mm512_maddubs_epi16(c, mo), k32);
                    /* a: bits 6..13 of each w; b: bits 0..5 */
                    const __m512i a = _mm512_ternarylogic_epi32(_mm512_srli_epi16(we, 6), _mm512_slli_epi16(wo, 2), lo8, 0xe4);
                    const __m512i b = _mm512_and_si512(_mm512_ternarylogic_epi32(we, _mm512_slli_epi16(wo, 8), lo8, 0xe4), m3f);
                    const int r = 8 * (p & 1) + k;
                    _mm512_store_si512(st->wt[G][0][r], b);
                    _mm512_store_si512(st->wt[G][1][r], a);
                }
            }
        }
}

/* acc[j] += the unit u's super-block for rows j < g: T = b sums + 64 * a sums, then the
 * vpdpbusd kernel's float step. xd[j][bi]: row j's activation scale. */
KQ_INLINE void ka6_scale(const uint8_t *u, const ka_stage *st, const float (*xd)[KQ_WSPAN], int bi, int g,
                         __m512 *acc) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + KQ6_D)));
    for (int j = 0; j < g; j++) {
        const int32_t(*sm)[16][16] = st->sum[j / 16];
        const __m512i T = _mm512_add_epi32(_mm512_load_si512(sm[0][j % 16]),
                                           _mm512_slli_epi32(_mm512_load_si512(sm[1][j % 16]), 6));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T), _mm512_mul_ps(d, _mm512_set1_ps(xd[j][bi])), acc[j]);
    }
}

/* The tiles' loop for all three types: spans of super-blocks (KQ_WSPAN, Q6_K: KQ6_SPAN, as
 * in the vpdpbusd kernels, whose float sums restart there) × blocks of up to KA_BLOCK
 * activation rows × 16-row weight units, each unit's super-blocks software-pipelined: the
 * weight tiles of super-block b + 1 and the scale step of b - 1 around the tile products of
 * b (a tile load waits for the vector stores it reads, the vector loads for the tile
 * stores). Fewer than KA_MIN_ROWS (Q6_K: KA6_MIN_ROWS) rows run on vpdpbusd. */
KQ_INLINE void ka_tile(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride, int nx,
                       float *y, size_t ldy, const int q5, const int q6) {
    if (nx < (q6 ? KA6_MIN_ROWS : KA_MIN_ROWS)) {
        if (q6) kq_w16_tile_q6(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 1);
        else kq_w16_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, q5, 1);
        return;
    }
    const size_t bsize = q6 ? sizeof(block_q6_K) : q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t unit = (size_t)KQ_WB * bsize;
    const int64_t nb = n / QK_K, span = q6 ? KQ6_SPAN : KQ_WSPAN;
    kq_bpair bp[KA_BLOCK][KQ_WSPAN]; /* Q4_K / Q5_K: the minimum pairs */
    float xd[KA_BLOCK][KQ_WSPAN];
    ka_stage st[2];
    kq_w16s sc[2]; /* Q4_K / Q5_K: the scales of super-blocks b and b + 1 */
    __m512 acc[KA_BLOCK];
    for (int64_t b0 = 0; b0 < nb; b0 += span) {
        const int nbs = (int)(nb - b0 < span ? nb - b0 : span);
        for (int j0 = 0; j0 < nx; j0 += KA_BLOCK) {
            const int g = nx - j0 < KA_BLOCK ? nx - j0 : KA_BLOCK;
            const int nq = g > 16 ? 2 : 1;
            const block_q8_K *xr[2]; /* group q's first row, from super-block b0 */
            for (int q = 0; q < nq; q++)
                xr[q] = (const block_q8_K *)((const uint8_t *)x + (size_t)(j0 + 16 * q) * x_stride) + b0;
            for (int j = 0; j < g; j++) {
                const block_q8_K *xj = (const block_q8_K *)((const uint8_t *)xr[0] + (size_t)j * x_stride);
                if (!q6) kq_bpairs(xj, nbs, bp[j]);
                for (int b = 0; b < nbs; b++) xd[j][b] = xj[b].d;
            }
            ka_configure(g > 16 ? g - 16 : g);
            for (int i0 = 0; i0 < nw; i0 += KQ_WB) {
                const uint8_t *rows[KQ_WB];
                size_t pfs;
                const uintptr_t pf0 = kq_block_start(w, w_stride, nw, i0, b0, nbs, nb, bsize, 1, rows, &pfs);
                const uint8_t *u0 = rows[0] + (size_t)b0 * unit;
                for (int j = 0; j < g; j++) acc[j] = _mm512_setzero_ps();
                for (int b = -1; b < nbs; b++) {
                    if (b >= 0) {
                        if (pf0) kq_prefetch(pf0 + (uintptr_t)b * pfs, pfs);
                        const int8_t *xq[2] = {xr[0][b].qs, xr[nq - 1][b].qs};
                        ka_tiles(xq, nq, x_stride, &st[b & 1], q6);
                    }
                    /* b - 1 first: b + 1 reuses its slots */
                    if (b > 0) {
                        const int p = (b - 1) & 1;
                        if (q6) ka6_scale(u0 + (size_t)(b - 1) * unit, &st[p], xd, b - 1, g, acc);
                        else ka_scale(&sc[p], &st[p], bp, b - 1, xd, g, acc, q5);
                    }
                    if (b + 1 < nbs) {
                        const int p = (b + 1) & 1;
                        const uint8_t *u = u0 + (size_t)(b + 1) * unit;
                        if (q6) {
                            ka6_unpack(u, &st[p]);
                        } else {
                            const kq_src src = {.rows = NULL, .off = 0, .unit = u};
                            kq_w16_scales(&src, &sc[p], 1, q5, 1);
                            ka_unpack(u, &sc[p], &st[p], q5);
                        }
                    }
                }
                const int p = (nbs - 1) & 1;
                if (q6) ka6_scale(u0 + (size_t)(nbs - 1) * unit, &st[p], xd, nbs - 1, g, acc);
                else ka_scale(&sc[p], &st[p], bp, nbs - 1, xd, g, acc, q5);
                kq_block_store(y + (size_t)j0 * ldy + (size_t)i0, ldy, g, nw - i0, acc, b0 == 0);
            }
        }
    }
}

void spex_dot_q4_K_r16_amx(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                           int nx, float *y, size_t ldy) {
    ka_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 0);
}

void spex_dot_q5_K_r16_amx(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                           int nx, float *y, size_t ldy) {
    ka_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 1, 0);
}

void spex_dot_q6_K_r16_amx(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                           int nx, float *y, size_t ldy) {
    ka_tile(n, w, w_stride, nw, x, x_stride, nx, y, ldy, 0, 1);
}
/* ======================================================================== */
/* Q8_K activation quantizer                                                 */
/* ======================================================================== */

/* Same steps as spex_quantize_row_q8_K_ref, including ggml's nearest_int (add 1.5*2^23,
 * keep the mantissa) rather than a conversion instruction, so that even NaN, Inf and
 * denormal-scale inputs give the reference's bytes. One pass takes the block's largest and
 * smallest values (two chains each, not one max's latency per vector) for kq_amax_elem;
 * vmaxps / vminps return their second operand when the first is NaN, so NaNs are skipped
 * like the reference's "ax > amax". vpmovsdb's signed saturation is the reference's clamp to
 * [-128, 127]. (Three passes, an |x| pass, a search and the bsums read back from the stored
 * codes, take ~1.5x as long: docs/performance.md, "Activation quantization".) */
void spex_act_quant_q8_K_avx512(const float *x, void *dst, int64_t n) {
    block_q8_K *y = (block_q8_K *)dst;
    const int64_t nb = n / QK_K;
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512i mant = _mm512_set1_epi32(0x007fffff), bias = _mm512_set1_epi32(0x00400000);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m512 hi0 = _mm512_setzero_ps(), hi1 = hi0, lo0 = hi0, lo1 = hi0;
        for (int t = 0; t < QK_K / 16; t += 2) {
            const __m512 v0 = _mm512_loadu_ps(x + 16 * t), v1 = _mm512_loadu_ps(x + 16 * t + 16);
            hi0 = _mm512_max_ps(v0, hi0);
            lo0 = _mm512_min_ps(v0, lo0);
            hi1 = _mm512_max_ps(v1, hi1);
            lo1 = _mm512_min_ps(v1, lo1);
        }
        const float xm = kq_amax_elem(x, _mm512_reduce_max_ps(_mm512_max_ps(hi0, hi1)),
                                      -_mm512_reduce_min_ps(_mm512_min_ps(lo0, lo1)));
        if (xm == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / xm;
        const __m512 is = _mm512_set1_ps(iscale);
        __m256i c[8];
        for (int t = 0; t < QK_K / 32; t++) {
            __m128i q[2];
            for (int u = 0; u < 2; u++) {
                const __m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * t + 16 * u), is), magic);
                q[u] = _mm512_cvtsepi32_epi8(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(f), mant), bias));
            }
            c[t] = _mm256_inserti128_si256(_mm256_castsi128_si256(q[0]), q[1], 1);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * t), c[t]);
        }
        kq_bsums(c, y[i].bsums);
        y[i].d = 1.0f / iscale;
    }
}
