/*
 * dot_avx512.c — AVX-512 (F/BW/VL/DQ, optionally VNNI) matmul kernels for the float and
 * 32-element-block weight types, the Q8_0 / Q8_1 activation quantizers, and the
 * streaming-read probe of `spex bench kernels`.
 *
 * What it is: the AVX-512 entries of the kernel table (src/cpu/matmul.h contract); the
 * scalar kernels in src/cpu/ref/dot_ref.c are their specification. Compiled with AVX-512
 * flags (Makefile); called only after CPUID said the CPU has them. What it is not: the
 * K-quants (dot_kquants*.c), or a BF16-instruction kernel: BF16 weights meet f32
 * activations, so they are widened exactly by a 16-bit shift; vdpbf16ps would need the
 * activations rounded to bf16, an error the scalar specification does not make.
 *
 * Dimension legend: n elements per row; nb = n / 32 blocks; a "pair" = blocks b, b+1;
 * y[j*ldy + i] = dot(weight row i, activation row j); float kernels: RW weight rows × RX
 * activation rows per register tile (<= 4 × 4).
 *
 * Quantized weights. vpdpbusd multiplies unsigned by signed bytes and adds groups of 4
 * into int32 lanes. Weight codes are made unsigned: q8_0 as w + 128 (xor 0x80), q4/q5 are
 * their raw codes 0..15 / 0..31; the offset times sum(x) (q8_0, q4_0, q5_0) is removed by
 * starting the integer sum at -offset * sum(x), so the integer block sums are exact.
 * Without VNNI, vpmaddubsw + vpmaddwd give the same sums (no int16 saturation: codes <= 31;
 * q8_0 uses |w| and puts w's sign on x instead of the offset). The exact sums make both
 * variants bit-identical. The kernels that use them (qdec, qbat, and qrow for weights in
 * the R16 layout of cpu/matmul.h) are described below.
 *
 * Zen 4 note (measured on the development machine, an AMD EPYC VM): vpdpbusd, vpermt2d,
 * vinserti*, masked broadcast loads, vcvtph2ps, vmulps and vfmadd all compete for the
 * same two 512-bit pipes, while plain and broadcast loads, vpshufd, blends, unpacks, adds
 * and vcvtdq2ps run beside them; the batch kernel is arranged accordingly.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/arch/x86/kq_prefetch.h"
#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"

#define AI static inline __attribute__((always_inline))
#define MAXW 4
#define MAXX 4

/* Weight/activation kinds of the quantized kernels (compile-time constants). */
enum { K_Q8_0, K_Q4_0, K_Q5_0, K_Q4_1, K_Q5_1 };

AI size_t wblock_bytes(const int K) {
    switch (K) {
    case K_Q8_0: return sizeof(block_q8_0);
    case K_Q4_0: return sizeof(block_q4_0);
    case K_Q5_0: return sizeof(block_q5_0);
    case K_Q4_1: return sizeof(block_q4_1);
    default: return sizeof(block_q5_1);
    }
}
AI bool has_min(const int K) { return K == K_Q4_1 || K == K_Q5_1; }
/* The unsigned offset of the q4_0 / q5_0 codes (q8_0: see base_offset). */
AI int code_offset(const int K) { return K == K_Q4_0 ? 8 : K == K_Q5_0 ? 16 : 0; }

AI uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
AI uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* 32 bytes from p0 and 32 from p1 (zeros for the upper half when tail). */
AI __m512i load_2x256(const uint8_t *p0, const uint8_t *p1, const bool tail) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)p0);
    if (tail) return _mm512_inserti64x4(_mm512_setzero_si512(), lo, 0);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* 4-bit codes of two blocks: qs0 (16 bytes) -> [lo nibbles | hi nibbles], then qs1. */
AI __m512i unpack_nibbles(const uint8_t *qs0, const uint8_t *qs1, const bool tail) {
    const __m128i a = _mm_loadu_si128((const __m128i *)qs0);
    const __m128i b = tail ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)qs1);
    const __m512i ab = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
    const __m512i aabb = _mm512_shuffle_i64x2(ab, ab, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i sh = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0); /* 16-bit lanes: shift by 0 / 4 */
    const __m512i sh16 = _mm512_or_si512(sh, _mm512_slli_epi64(sh, 16));
    const __m512i shifts = _mm512_or_si512(sh16, _mm512_slli_epi64(sh16, 32));
    return _mm512_and_si512(_mm512_srlv_epi16(aabb, shifts), _mm512_set1_epi8(0x0f));
}

/* Bit 4 of the 5-bit codes: bit k of a block's qh is element k. */
AI __m512i fifth_bits(const uint8_t *qh0, const uint8_t *qh1, const bool tail) {
    const uint64_t m = (uint64_t)ld32(qh0) | (tail ? 0 : (uint64_t)ld32(qh1) << 32);
    return _mm512_maskz_mov_epi8(_cvtu64_mask64(m), _mm512_set1_epi8(0x10));
}

/* sum_k u[k]*s[k] over each group of 4 bytes, added to acc (u unsigned, s signed). */
AI __m512i dp_u8s8(__m512i acc, __m512i u, __m512i s, const bool vnni) {
    if (vnni) return _mm512_dpbusd_epi32(acc, u, s);
    const __m512i p16 = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
}

/* Expanded codes of two blocks, one from p0 and one from p1 (block starts; p1 is ignored
 * when hi_zero): unsigned codes for q4/q5, w ^ 0x80 (= w + 128) for q8_0 with VNNI, the
 * signed bytes for q8_0 without it. Element order within each 32-byte half: the block's. */
AI __m512i wcodes(const int K, const bool vnni, const uint8_t *p0, const uint8_t *p1, const bool hi_zero) {
    switch (K) {
    case K_Q8_0: {
        const __m512i w = load_2x256(p0 + 2, p1 + 2, hi_zero);
        return vnni ? _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80)) : w;
    }
    case K_Q4_0: return unpack_nibbles(p0 + 2, p1 + 2, hi_zero);
    case K_Q5_0: return _mm512_or_si512(unpack_nibbles(p0 + 6, p1 + 6, hi_zero), fifth_bits(p0 + 2, p1 + 2, hi_zero));
    case K_Q4_1: return unpack_nibbles(p0 + 4, p1 + 4, hi_zero);
    default: return _mm512_or_si512(unpack_nibbles(p0 + 8, p1 + 8, hi_zero), fifth_bits(p0 + 4, p1 + 4, hi_zero));
    }
}

/* The offset removed from the codes through the start value of the integer sum (0: none);
 * q8_0 without VNNI puts w's sign on x instead (vpmaddubsw would saturate at w + 128). */
AI int base_offset(const int K, const bool vnni) { return K == K_Q8_0 ? (vnni ? 128 : 0) : code_offset(K); }

/* Exact integer block sums: u (codes as above) times activation bytes s, started at base. */
AI __m512i qdot(const int K, const bool vnni, __m512i base, __m512i u, __m512i s) {
    if (K == K_Q8_0 && !vnni) {
        const __m512i sx = _mm512_mask_sub_epi8(s, _mm512_movepi8_mask(u), _mm512_setzero_si512(), s);
        return dp_u8s8(base, _mm512_abs_epi8(u), sx, false);
    }
    return dp_u8s8(base, u, s, vnni);
}

/* fp16 scale (d) and min (m) of a block. */
AI uint16_t bscale(const uint8_t *p) { return ld16(p); }
AI uint16_t bmin(const uint8_t *p) { return ld16(p + 2); }

/*
 * The arithmetic every output follows, whatever kernel computes it (so a result never
 * depends on the tile or on the number of activation rows: a speculative verify pass
 * computes exactly what token-by-token decoding computes): four partial sums P[0..3],
 * and for each block b in order,
 *     S = the exact integer sum of the block's products,
 *     P[b % 4] = fma(float(S), dw*dx, P[b % 4])        (dw*dx is exact in f32)
 *     P[b % 4] = fma(m, s, P[b % 4])                   (q4_1 / q5_1 only)
 * and y = (P[0] + P[1]) + (P[2] + P[3]). Three kernels implement it (qrow, for R16 weights, has its own section below):
 *  - qdec (1 activation row): each weight row read front to back, two rows from the two
 *    halves of the call side by side (on the development machine, interleaving 8
 *    neighbouring rows of 4 KiB cut the DRAM rate of even a plain read from 25 to 17 GB/s,
 *    while two long streams beat one); 4 blocks per step, whose two 16-lane sums are
 *    folded by unpacks and adds into the 4 block sums, one float fma per step. The
 *    activation side (block pairs, the integer sums' start values, dx) is prepared once
 *    per call (xdec);
 *  - qbat (2 or more rows): lane 4i + j of a vector belongs to (weight row i, activation
 *    row j) of a 4 × 4 tile, so integer sums never need folding: for each dword k of a
 *    block, vpdpbusd multiplies row i's dword k (broadcast over lanes 4i..4i+3 by vpshufd)
 *    by activation row j's dword k (a 128-bit broadcast load). The activations of a pass
 *    (up to 8 rows) are repacked once per call into that k-major layout (xpack), which
 *    also carries the integer sums' start values, dx and s ready for broadcast loads. Per
 *    block, 8 vpdpbusd then serve 16 (row, row) pairs: 64 multiply-adds per instruction.
 *    The 4 weight rows of a tile are taken a quarter of the call's rows apart, so the
 *    weights stream as 4 long runs rather than 4 interleaved neighbouring rows.
 */

/* ---- qdec: one activation row ----------------------------------------------------- */

#define DEC_BLOCKS 256 /* activation blocks prepared at a time (a multiple of 4) */
#define DEC_ROWS 64    /* weight rows whose partial sums are kept across those chunks */

/* The activation side of 4 blocks (2 pairs): codes, the integer sums' start values, and
 * dx / s laid out like the folded sums (lanes 0, 1, 8, 9 = blocks 0, 2, 1, 3; others 0). */
typedef struct {
    __m512i X[2], base[2];
    __m512 dx, sx;
} xdec;

/* Lane of a 4-block step's folded sums that holds block t (0..3). */
AI int fold_lane(int t) { return (t & 1) * 8 + (t >> 1); }

/* [v0, v1, v2, v3] (fp16, blocks 0..3) as f32 in the folded lanes; the rest 0. */
AI __m512 fold_scales(uint16_t v0, uint16_t v1, uint16_t v2, uint16_t v3) {
    const uint64_t h = (uint64_t)v0 | (uint64_t)v2 << 16 | (uint64_t)v1 << 32 | (uint64_t)v3 << 48;
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)); /* blocks 0, 2, 1, 3 */
    const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0, 1, 0);
    return _mm512_maskz_permutexvar_ps(0x0303, idx, _mm512_castps128_ps512(f));
}

/* Prepares blocks [b0, b0 + cnt) of the activation row (cnt <= DEC_BLOCKS; blocks past
 * the row's nb are zeros). */
AI void xdec_prepare(const int K, const bool vnni, const uint8_t *x, int64_t b0, int64_t cnt, int64_t nb, xdec *out) {
    const size_t xbs = has_min(K) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xq = has_min(K) ? 4 : 2;
    const int off = base_offset(K, vnni);
    for (int64_t s = 0; s < (cnt + 3) / 4; s++) {
        const int64_t b = b0 + 4 * s;
        uint16_t hd[4], hs[4];
        for (int t = 0; t < 4; t++) {
            hd[t] = b + t < nb ? ld16(x + (size_t)(b + t) * xbs) : 0;
            hs[t] = b + t < nb && has_min(K) ? ld16(x + (size_t)(b + t) * xbs + 2) : 0;
        }
        for (int p = 0; p < 2; p++) {
            const int64_t bp = b + 2 * p;
            __m512i X = _mm512_setzero_si512();
            if (bp < nb) X = load_2x256(x + (size_t)bp * xbs + xq, x + (size_t)(bp + 1) * xbs + xq, bp + 1 >= nb);
            out[s].X[p] = X;
            out[s].base[p] = off ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                                    dp_u8s8(_mm512_setzero_si512(), _mm512_set1_epi8((char)off), X, vnni))
                                 : _mm512_setzero_si512();
        }
        out[s].dx = fold_scales(hd[0], hd[1], hd[2], hd[3]);
        out[s].sx = fold_scales(hs[0], hs[1], hs[2], hs[3]);
    }
}

/* Folds the sums of two block pairs (S0: blocks 0, 1; S1: blocks 2, 3) so that lanes 0, 1,
 * 8, 9 hold the sums of blocks 0, 2, 1, 3 (the other lanes: copies). */
AI __m512i fold2(__m512i s0, __m512i s1) {
    /* per 128-bit lane l: [s0 q0+q2, s1 q0+q2, s0 q1+q3, s1 q1+q3], then [S0_l, S1_l, ..] */
    const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i c = _mm512_add_epi32(a, _mm512_shuffle_epi32(a, _MM_PERM_BADC));
    /* 128-bit lanes 0 + 1 (first block of each pair), 2 + 3 (second block) */
    return _mm512_add_epi32(c, _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* One 4-block step (blocks b .. b+3 of one weight row at wb; nblk of them exist). */
AI void qdec_step(const int K, const bool vnni, const uint8_t *wb, const xdec *xd, int nblk, __m512 *acc) {
    const size_t bs = wblock_bytes(K);
    __m512i S0, S1 = _mm512_setzero_si512();
    S0 = qdot(K, vnni, xd->base[0], wcodes(K, vnni, wb, wb + bs, nblk < 2), xd->X[0]);
    if (nblk > 2) S1 = qdot(K, vnni, xd->base[1], wcodes(K, vnni, wb + 2 * bs, wb + 3 * bs, nblk < 4), xd->X[1]);
    uint16_t hd[4] = {0, 0, 0, 0}, hm[4] = {0, 0, 0, 0};
    for (int t = 0; t < 4; t++)
        if (t < nblk) {
            hd[t] = bscale(wb + (size_t)t * bs);
            if (has_min(K)) hm[t] = bmin(wb + (size_t)t * bs);
        }
    /* (spreading the fp16 values over the folded lanes through a stack array instead of a
     * permute was tried: the reload waits for the stores to retire, which serialises steps) */
    const __m512 dw = fold_scales(hd[0], hd[1], hd[2], hd[3]);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold2(S0, S1)), _mm512_mul_ps(dw, xd->dx), *acc);
    if (has_min(K)) *acc = _mm512_fmadd_ps(fold_scales(hm[0], hm[1], hm[2], hm[3]), xd->sx, *acc);
}

/* Finishes one output from its partial sums (lanes fold_lane(0..3) of acc). */
AI float qdec_finish(__m512 acc) {
    float t[16];
    _mm512_storeu_ps(t, acc);
    return (t[fold_lane(0)] + t[fold_lane(1)]) + (t[fold_lane(2)] + t[fold_lane(3)]);
}

/* y[i] (i < nw) for one activation row. Each weight row is read front to back, two rows at
 * a time from the two halves of the call's rows (two long streams keep more DRAM requests
 * in flight than one: 19-25 against 16-17 GB/s for a plain read on the development
 * machine). */
AI void qdec(const int K, const bool vnni, int64_t nb, const uint8_t *w, size_t wst, int nw, const uint8_t *x,
             float *y) {
    const size_t bs = wblock_bytes(K);
    _Alignas(64) xdec xd[DEC_BLOCKS / 4];
    _Alignas(64) __m512 keep[DEC_ROWS];
    for (int i0 = 0; i0 < nw; i0 += DEC_ROWS) {
        const int rows = nw - i0 < DEC_ROWS ? nw - i0 : DEC_ROWS;
        const int half = (rows + 1) / 2; /* row r pairs with row r + half */
        for (int64_t c0 = 0; c0 < nb; c0 += DEC_BLOCKS) {
            const int64_t cnt = nb - c0 < DEC_BLOCKS ? nb - c0 : DEC_BLOCKS;
            const bool first = c0 == 0, last = c0 + cnt == nb;
            xdec_prepare(K, vnni, x, c0, cnt, nb, xd);
            for (int r = 0; r < half; r++) {
                const bool two = r + half < rows;
                const uint8_t *ra = w + (size_t)(i0 + r) * wst + (size_t)c0 * bs;
                const uint8_t *rb = two ? ra + (size_t)half * wst : ra;
                __m512 acc_a = first ? _mm512_setzero_ps() : keep[r];
                __m512 acc_b = first || !two ? _mm512_setzero_ps() : keep[r + half];
                int64_t b = 0;
                for (; b + 4 <= cnt; b += 4) {
                    qdec_step(K, vnni, ra + (size_t)b * bs, &xd[b / 4], 4, &acc_a);
                    qdec_step(K, vnni, rb + (size_t)b * bs, &xd[b / 4], 4, &acc_b);
                }
                if (b < cnt) {
                    qdec_step(K, vnni, ra + (size_t)b * bs, &xd[b / 4], (int)(cnt - b), &acc_a);
                    qdec_step(K, vnni, rb + (size_t)b * bs, &xd[b / 4], (int)(cnt - b), &acc_b);
                }
                if (!last) {
                    keep[r] = acc_a;
                    if (two) keep[r + half] = acc_b;
                } else {
                    y[i0 + r] = qdec_finish(acc_a);
                    if (two) y[i0 + r + half] = qdec_finish(acc_b);
                }
            }
        }
    }
}

/* ---- qbat: two or more activation rows -------------------------------------------- */

/* Activations of 4 rows for one block, k-major: q[s] holds dword k(s) of rows 0..3, with
 * slot s = 2m for k = m and s = 2m+1 for k = m+4 (the transpose's natural order). */
typedef struct {
    int32_t base[4]; /* -offset * sum(q) per row (the integer sum's start value) */
    float dx[4];     /* scales                                                   */
    float s[4];      /* Q8_1 sum terms (q4_1 / q5_1)                             */
    uint32_t q[8][4];
} xpack;

#define XP_BLOCKS 128 /* blocks repacked at a time (n = 4096; a multiple of 4): 44 KiB */
#define XP_GROUPS 2   /* activation groups of 4 rows per pass */
#define XP_WROWS 64   /* weight rows whose accumulators are kept across repacked chunks */

AI __m256i dp_u8s8_256(__m256i acc, __m256i u, __m256i s, const bool vnni) {
    if (vnni) return _mm256_dpbusd_epi32(acc, u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

/* Repacks blocks [b0, b0+cnt) of `rows` (<= 4) activation rows; missing rows are zeros. */
AI void xrepack(const int K, const bool vnni, const uint8_t *x, size_t xst, int rows, int64_t b0, int64_t cnt,
                xpack *out) {
    const size_t xbs = has_min(K) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xq = has_min(K) ? 4 : 2;
    const int off = base_offset(K, vnni);
    for (int64_t b = 0; b < cnt; b++) {
        __m256i r[4];
        uint16_t hd[4] = {0, 0, 0, 0}, hs[4] = {0, 0, 0, 0};
        for (int j = 0; j < 4; j++) {
            const uint8_t *blk = x + (size_t)j * xst + (size_t)(b0 + b) * xbs;
            if (j < rows) {
                r[j] = _mm256_loadu_si256((const __m256i *)(blk + xq));
                hd[j] = ld16(blk);
                if (has_min(K)) hs[j] = ld16(blk + 2);
            } else {
                r[j] = _mm256_setzero_si256();
            }
        }
        const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        const __m256i v[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                              _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        xpack *p = out + b;
        __m256i sum = _mm256_setzero_si256();
        for (int m = 0; m < 4; m++) {
            _mm256_storeu_si256((__m256i *)p->q[2 * m], v[m]); /* slots 2m (k = m), 2m+1 (k = m+4) */
            if (off) sum = dp_u8s8_256(sum, _mm256_set1_epi8((char)off), v[m], vnni);
        }
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        _mm_storeu_si128((__m128i *)p->base, _mm_sub_epi32(_mm_setzero_si128(), s4));
        const uint64_t d64 = (uint64_t)hd[0] | (uint64_t)hd[1] << 16 | (uint64_t)hd[2] << 32 | (uint64_t)hd[3] << 48;
        _mm_storeu_ps(p->dx, _mm_cvtph_ps(_mm_cvtsi64_si128((long long)d64)));
        const uint64_t s64 = (uint64_t)hs[0] | (uint64_t)hs[1] << 16 | (uint64_t)hs[2] << 32 | (uint64_t)hs[3] << 48;
        _mm_storeu_ps(p->s, _mm_cvtph_ps(_mm_cvtsi64_si128((long long)s64)));
    }
}

/* [f(h[0]) x 4, f(h[1]) x 4, f(h[2]) x 4, f(h[3]) x 4]: a per-weight-row value for lanes
 * 4i..4i+3. */
AI __m512 scales_rows(const uint16_t h[4]) {
    const uint64_t v = (uint64_t)h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

AI __m512i bcast128i(const void *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }
AI __m512 bcast128f(const float *p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }

/* Hides a value from the optimizer: keeps compilers from folding a 128-bit broadcast load
 * and a blend into a masked broadcast load, which on Zen 4 competes with vpdpbusd. */
AI __m512i opaque(__m512i v) {
    __asm__("" : "+v"(v));
    return v;
}

/* [a, b, c, d] as 128-bit lanes, from four vectors each holding its quad in every lane. */
AI __m512i blend4(__m512i a, __m512i b, __m512i c, __m512i d) {
    a = opaque(a), b = opaque(b), c = opaque(c), d = opaque(d);
    return _mm512_mask_blend_epi32(0xff00, _mm512_mask_blend_epi32(0x00f0, a, b), _mm512_mask_blend_epi32(0xf000, c, d));
}

/* Codes of one block of 4 weight rows as two vectors: 128-bit lane r of W[0] holds row r's
 * elements 0..15 (dwords k = 0..3), of W[1] elements 16..31 (k = 4..7); unsigned as in
 * wcodes. Built from 128-bit broadcast loads and blends only: on Zen 4 the lane-crossing
 * alternatives (vpermt2d, vinserti32x4) compete with vpdpbusd for the same two pipes. */
AI void wquads(const int K, const bool vnni, const uint8_t *const wr[4], __m512i W[2]) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    if (K == K_Q8_0) {
        for (int q = 0; q < 2; q++) {
            W[q] = blend4(bcast128i(wr[0] + 2 + 16 * q), bcast128i(wr[1] + 2 + 16 * q), bcast128i(wr[2] + 2 + 16 * q),
                          bcast128i(wr[3] + 2 + 16 * q));
            if (vnni) W[q] = _mm512_xor_si512(W[q], _mm512_set1_epi8((char)0x80));
        }
        return;
    }
    const size_t qs = K == K_Q4_0 ? 2 : K == K_Q4_1 ? 4 : K == K_Q5_0 ? 6 : 8;
    const __m512i n = blend4(bcast128i(wr[0] + qs), bcast128i(wr[1] + qs), bcast128i(wr[2] + qs), bcast128i(wr[3] + qs));
    W[0] = _mm512_and_si512(n, lo4);
    W[1] = _mm512_and_si512(_mm512_srli_epi16(n, 4), lo4);
    if (K == K_Q5_0 || K == K_Q5_1) {
        const size_t qh = K == K_Q5_0 ? 2 : 4;
        uint64_t m0 = 0, m1 = 0; /* bit 16r + e: element e (resp. 16 + e) of row r */
        for (int r = 0; r < 4; r++) {
            const uint32_t h = ld32(wr[r] + qh);
            m0 |= (uint64_t)(h & 0xffffu) << (16 * r);
            m1 |= (uint64_t)(h >> 16) << (16 * r);
        }
        const __m512i bit4 = _mm512_set1_epi8(0x10);
        W[0] = _mm512_or_si512(W[0], _mm512_maskz_mov_epi8(_cvtu64_mask64(m0), bit4));
        W[1] = _mm512_or_si512(W[1], _mm512_maskz_mov_epi8(_cvtu64_mask64(m1), bit4));
    }
}

/* The integer sums of one block for one repacked activation group, and their fma. */
AI void qbat_group(const int K, const bool vnni, const __m512i u[8], __m512 dw, __m512 mw, const xpack *p, __m512 *acc) {
    /* slots 2m hold dword m, slots 2m+1 dword m + 4 (see xpack); two chains for latency */
    __m512i sa = qdot(K, vnni, bcast128i(p->base), u[0], bcast128i(p->q[0]));
    __m512i sb = qdot(K, vnni, _mm512_setzero_si512(), u[4], bcast128i(p->q[1]));
    sa = qdot(K, vnni, sa, u[1], bcast128i(p->q[2]));
    sb = qdot(K, vnni, sb, u[5], bcast128i(p->q[3]));
    sa = qdot(K, vnni, sa, u[2], bcast128i(p->q[4]));
    sb = qdot(K, vnni, sb, u[6], bcast128i(p->q[5]));
    sa = qdot(K, vnni, sa, u[3], bcast128i(p->q[6]));
    sb = qdot(K, vnni, sb, u[7], bcast128i(p->q[7]));
    const __m512i S = _mm512_add_epi32(sa, sb);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, bcast128f(p->dx)), *acc);
    if (has_min(K)) *acc = _mm512_fmadd_ps(mw, bcast128f(p->s), *acc);
}

/* One block of a 4-weight-row group (block pointers wr) against G (1 or 2) repacked
 * activation groups x0, x1. Lane 4i + j: weight row i, activation row j. */
AI void qbat_block(const int K, const bool vnni, const int G, const uint8_t *const wr[4], const xpack *x0,
                   const xpack *x1, __m512 *a0, __m512 *a1) {
    __m512i W[2], u[8];
    wquads(K, vnni, wr, W);
    /* u[k]: row i's dword k in lanes 4i..4i+3 (an in-lane dword broadcast) */
    u[0] = _mm512_shuffle_epi32(W[0], 0x00), u[1] = _mm512_shuffle_epi32(W[0], 0x55);
    u[2] = _mm512_shuffle_epi32(W[0], 0xaa), u[3] = _mm512_shuffle_epi32(W[0], 0xff);
    u[4] = _mm512_shuffle_epi32(W[1], 0x00), u[5] = _mm512_shuffle_epi32(W[1], 0x55);
    u[6] = _mm512_shuffle_epi32(W[1], 0xaa), u[7] = _mm512_shuffle_epi32(W[1], 0xff);
    const uint16_t hd[4] = {bscale(wr[0]), bscale(wr[1]), bscale(wr[2]), bscale(wr[3])};
    const __m512 dw = scales_rows(hd);
    __m512 mw = _mm512_setzero_ps();
    if (has_min(K)) {
        const uint16_t hm[4] = {bmin(wr[0]), bmin(wr[1]), bmin(wr[2]), bmin(wr[3])};
        mw = scales_rows(hm);
    }
    qbat_group(K, vnni, u, dw, mw, x0, a0);
    if (G > 1) qbat_group(K, vnni, u, dw, mw, x1, a1);
}

/* Writes lane 4i + j of v to y[j*ldy + i*ystep] for i < rw, j < rx. */
AI void store_4x4(__m512 v, float *y, int ystep, size_t ldy, int rw, int rx) {
    float t[16];
    _mm512_storeu_ps(t, v);
    for (int i = 0; i < rw; i++)
        for (int j = 0; j < rx; j++) y[(size_t)j * ldy + (size_t)i * (size_t)ystep] = t[4 * i + j];
}

/* A pass over up to 4*G activation rows (rx of them real) for all nw weight rows. The
 * weight rows of a block of up to XP_WROWS are grouped 4 at a time a quarter of the block
 * apart (rows g, g+Q, g+2Q, g+3Q), so they stream from memory as 4 long runs. */
AI void qbat_pass(const int K, const bool vnni, const int G, int64_t nb, const uint8_t *w, size_t wst, int nw,
                  const uint8_t *x, size_t xst, int rx, float *y, size_t ldy, xpack xp[XP_GROUPS][XP_BLOCKS],
                  __m512 keep[XP_WROWS / 4][XP_GROUPS][4]) {
    const size_t wbs = wblock_bytes(K);
    for (int wb = 0; wb < nw; wb += XP_WROWS) {
        const int nwb = nw - wb < XP_WROWS ? nw - wb : XP_WROWS;
        const int Q = (nwb + 3) / 4; /* groups in this block; row r of group g: g + r*Q */
        for (int64_t c0 = 0; c0 < nb; c0 += XP_BLOCKS) {
            const int64_t cnt = nb - c0 < XP_BLOCKS ? nb - c0 : XP_BLOCKS;
            const bool first = c0 == 0, last = c0 + cnt == nb;
            for (int g = 0; g < G; g++) {
                const int rows = rx - 4 * g < 4 ? rx - 4 * g : 4;
                xrepack(K, vnni, x + (size_t)(4 * g) * xst, xst, rows, c0, cnt, xp[g]);
            }
            for (int gi = 0; gi < Q; gi++) {
                int rw = 0; /* rows of this group that exist */
                const uint8_t *wr[4];
                for (int r = 0; r < 4; r++) {
                    const int row = gi + r * Q < nwb ? gi + r * Q : gi; /* spare lanes: row gi again */
                    rw += gi + r * Q < nwb;
                    wr[r] = w + (size_t)(wb + row) * wst + (size_t)c0 * wbs;
                }
                /* partial sums: activation group 0 / 1, block residue 0..3 */
                __m512 a0[4], a1[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    a0[k] = first ? _mm512_setzero_ps() : keep[gi][0][k];
                    a1[k] = first || G < 2 ? _mm512_setzero_ps() : keep[gi][1][k];
                }
                const xpack *x0 = xp[0], *x1 = xp[G > 1 ? 1 : 0];
                int64_t b = 0; /* c0 is a multiple of 4, so b % 4 is the block's residue */
                for (; b + 4 <= cnt; b += 4) {
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        qbat_block(K, vnni, G, wr, x0 + b + k, x1 + b + k, &a0[k], &a1[k]);
                        for (int r = 0; r < 4; r++) wr[r] += wbs;
                    }
                }
                /* the last 1..3 blocks, with constant residues (keeps a0, a1 in registers) */
                if (b < cnt) qbat_block(K, vnni, G, wr, x0 + b, x1 + b, &a0[0], &a1[0]);
                for (int r = 0; r < 4; r++) wr[r] += wbs;
                if (b + 1 < cnt) qbat_block(K, vnni, G, wr, x0 + b + 1, x1 + b + 1, &a0[1], &a1[1]);
                for (int r = 0; r < 4; r++) wr[r] += wbs;
                if (b + 2 < cnt) qbat_block(K, vnni, G, wr, x0 + b + 2, x1 + b + 2, &a0[2], &a1[2]);
                if (last) {
                    float *yg = y + (size_t)(wb + gi);
                    store_4x4(_mm512_add_ps(_mm512_add_ps(a0[0], a0[1]), _mm512_add_ps(a0[2], a0[3])), yg, Q, ldy, rw,
                              rx < 4 ? rx : 4);
                    if (G > 1)
                        store_4x4(_mm512_add_ps(_mm512_add_ps(a1[0], a1[1]), _mm512_add_ps(a1[2], a1[3])), yg + 4 * ldy,
                                  Q, ldy, rw, rx - 4);
                } else {
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        keep[gi][0][k] = a0[k];
                        if (G > 1) keep[gi][1][k] = a1[k];
                    }
                }
            }
        }
    }
}

/* ---- qrow: R16 weights (q8_0 / q4_0 / q4_1 / q5_0 / q5_1), weight rows in lanes ---------- */

/* For weights in the R16 layout (cpu/matmul.h: per 16-row group and block, each field of the
 * 16 rows contiguous), lane l of every vector is weight row l of the group and each
 * activation dword is broadcast to all lanes (vpdpbusd's embedded broadcast): a block of 32
 * elements is 8 vpdpbusd per activation row for 16 weight rows, its float step (convert,
 * dw*dx, fma) three operations for 16 outputs, and the weights' fields are plain loads whose
 * nibbles are split once for all activation rows of a group (up to QR_G). qbat above spends a
 * convert, a multiply and an fma on every 16 (row, row) pairs and builds its lanes with
 * broadcasts, blends and vpshufd (in the ggml layout, gathering the 16 rows' fields instead
 * measured slower still: about 16 cycles per vpgatherdd here). Arithmetic: that of the
 * comment above (P[b % 4], then (P0 + P1) + (P2 + P3)), so results are bit-identical to
 * qdec / qbat on the same rows; so that one accumulator per activation row suffices, the
 * blocks are visited residue by residue (b = r, r + 4, ...), which keeps every P[r]'s order
 * of additions. */
#define QR_G 8         /* activation rows sharing one unpacked weight block                  */
#define QR_CHUNK 128   /* blocks whose activation sums are prepared at a time (a multiple of 4) */
#define QR_WROWS 256   /* weight rows whose partial sums are kept across chunks               */

typedef struct {
    int32_t base[QR_G][QR_CHUNK]; /* -offset * sum(q) of each activation block (q4_0, q5_0) */
    float dx[QR_G][QR_CHUNK];
    float s[QR_G][QR_CHUNK];      /* Q8_1 sum terms (q4_1, q5_1)                              */
} qr_xprep;

/* acc + w . (the activation dword at p in every lane). neg: q8_0 without VNNI, where w holds
 * |codes| and the bytes of neg are the negative codes, whose sign goes on the activation. */
AI __m512i qr_dpb(__m512i acc, __m512i w, const int8_t *p, const bool vnni, const bool signed_w, __mmask64 neg) {
    if (vnni) {
        __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
        return acc;
    }
    int32_t v;
    memcpy(&v, p, 4);
    __m512i xv = _mm512_set1_epi32(v);
    if (signed_w) xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
    __m512i t = _mm512_madd_epi16(_mm512_maddubs_epi16(w, xv), _mm512_set1_epi16(1));
    __asm__("" : "+v"(t)); /* no vpdpwssd in the non-VNNI variant (see the K-quant kernels) */
    return _mm512_add_epi32(acc, t);
}

/* Byte offsets of the fields inside an R16 unit: 16 fp16 scales, [16 fp16 mins], [16 qh
 * words], then the 16 rows' code words 0..3 (q8_0: 0..7). */
AI size_t qr_off_qh(const int K) { return K == K_Q5_0 ? 32 : 64; }
AI size_t qr_off_qs(const int K) {
    return K == K_Q4_0 || K == K_Q8_0 ? 32 : K == K_Q4_1 ? 64 : K == K_Q5_0 ? 96 : 128;
}

/* One R16 unit in lanes: codes W[k] = dword k of the 32 unsigned codes (elements 4k..4k+3),
 * scale dw, min mw (q4_1 / q5_1). q8_0: w + 128 with VNNI (base_offset), else |w| with the
 * negative codes' bytes in neg[k]. */
AI void qr_wblock(const int K, const bool vnni, const uint8_t *u, __m512i W[8], __m512 *dw, __m512 *mw,
                  __mmask64 neg[8]) {
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)u));
    if (has_min(K)) *mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 32)));
    if (K == K_Q8_0) {
        for (int k = 0; k < 8; k++) {
            const __m512i q = _mm512_loadu_si512(u + qr_off_qs(K) + 64 * (size_t)k);
            if (vnni) {
                W[k] = _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
            } else {
                neg[k] = _mm512_movepi8_mask(q);
                W[k] = _mm512_abs_epi8(q); /* -128 becomes 0x80, read as 128 unsigned */
            }
        }
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; c++) { /* qs byte i: element i (low nibble), element 16 + i (high) */
        const __m512i q = _mm512_loadu_si512(u + qr_off_qs(K) + 64 * (size_t)c);
        W[c] = _mm512_and_si512(q, m4);
        W[c + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
    if (K == K_Q5_0 || K == K_Q5_1) { /* bit e of qh is bit 4 of element e (dword k: bits 4k..4k+3) */
        const __m512i qh = _mm512_loadu_si512(u + qr_off_qh(K));
        const __m512i b4 = _mm512_set1_epi8(0x10);
        for (int k = 0; k < 8; k++) {
            /* qh byte k/2 into every byte of its dword (vpshufb works within 128-bit lanes) */
            const int sb = k >> 1;
            const __m512i ctrl = _mm512_add_epi8(_mm512_set1_epi8((char)sb),
                                                 _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000));
            const int sh = 4 * (k & 1); /* byte t of the dword tests bit sh + t */
            const __m512i bits = _mm512_set1_epi32((int)((1u << sh) | (2u << sh) << 8 | (4u << sh) << 16 | (8u << sh) << 24));
            const __mmask64 m = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, ctrl), bits);
            W[k] = _mm512_mask_add_epi8(W[k], m, W[k], b4);
        }
    }
}

/* P[j] += block b's term for activation rows j < g (lanes = 16 weight rows); u: its unit. */
AI void qr_block(const int K, const bool vnni, const int g, const uint8_t *u, const uint8_t *x, size_t xst,
                 int64_t c0, int64_t b, const qr_xprep *xp, __m512 *P) {
    const size_t xbs = has_min(K) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xq = has_min(K) ? 4 : 2;
    __m512i W[8];
    __mmask64 neg[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    __m512 dw, mw = _mm512_setzero_ps();
    qr_wblock(K, vnni, u, W, &dw, &mw, neg);
#pragma GCC unroll 8
    for (int j = 0; j < QR_G; j++) {
        if (j >= g) break;
        const int8_t *q = (const int8_t *)(x + (size_t)j * xst + (size_t)(c0 + b) * xbs + xq);
        __m512i S = _mm512_set1_epi32(xp->base[j][b]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) S = qr_dpb(S, W[k], q + 4 * k, vnni, K == K_Q8_0, neg[k]);
        P[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, _mm512_set1_ps(xp->dx[j][b])), P[j]);
        if (has_min(K)) P[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xp->s[j][b]), P[j]);
    }
}

/* Partial sums of g activation rows over the blocks of residue class r of a chunk: P[j] +=
 * each block's term, blocks c0 + r, c0 + r + 4, ...; g0 = the group's first unit of the
 * chunk; pf: the next group's units of the chunk (0: none), one unit prefetched per block
 * visited (it counts the visits of the four passes). */
AI void qr_residue(const int K, const bool vnni, const int g, const uint8_t *g0, size_t ubytes, const uint8_t *x,
                   size_t xst, int64_t c0, int64_t cnt, int r, const qr_xprep *xp, uintptr_t pf, int64_t it,
                   __m512 *P) {
    for (int64_t b = r; b < cnt; b += 4, it++) {
        if (pf) kq_prefetch(pf + (uintptr_t)it * ubytes, ubytes);
        qr_block(K, vnni, g, g0 + (size_t)b * ubytes, x, xst, c0, b, xp, P);
    }
}

/* The same sums for g <= 2 rows over two groups at once (ua, and ub unless NULL), the blocks
 * in order: P[0][r] / P[1][r] still get the blocks of residue r in the same order (the same
 * bits), but the units are read front to back, two forward streams the hardware prefetchers
 * follow and that keep more DRAM requests in flight than one (the qdec comment). The four
 * residue passes, one group at a time with software prefetches, read the q8_0 1-row tile
 * from DRAM at 60-70 % of the stream probe; this path at 90-100 %. */
AI void qr_seq2(const int K, const bool vnni, const int g, const uint8_t *ua, const uint8_t *ub, size_t ubytes,
                const uint8_t *x, size_t xst, int64_t c0, int64_t cnt, const qr_xprep *xp, __m512 P[2][4][QR_G]) {
    for (int64_t b = 0; b < cnt; b++) {
        const int r = (int)(b & 3);
        qr_block(K, vnni, g, ua + (size_t)b * ubytes, x, xst, c0, b, xp, P[0][r]);
        if (ub) qr_block(K, vnni, g, ub + (size_t)b * ubytes, x, xst, c0, b, xp, P[1][r]);
    }
}

/* Four blocks' code sums: lane i of the result = sum of the 32 int8 codes at p + i * bs. The
 * bytes + 128 summed by vpsadbw in four 8-byte parts, then the parts of the four blocks added
 * across lanes; exact (at most 32 * 255). */
AI __m128i qr_sum4(const uint8_t *p, size_t bs) {
    const __m256i b80 = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    __m256i t[4];
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + (size_t)i * bs)), b80), z);
    /* per 128-bit lane: [t0 parts 0+1, t1 parts 0+1] and [t0 parts 2+3, t1 parts 2+3], same for t2, t3 */
    const __m256i u = _mm256_add_epi64(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
    const __m256i v = _mm256_add_epi64(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
    const __m256i tot = _mm256_add_epi64(_mm256_permute2x128_si256(u, v, 0x20), _mm256_permute2x128_si256(u, v, 0x31));
    return _mm_sub_epi32(_mm256_cvtepi64_epi32(tot), _mm_set1_epi32(32 * 128));
}

/* The activation side of blocks [c0, c0 + cnt) of g rows: dx, s and the integer sums' start
 * (-offset * the block's code sum). It is prepared in every call for every activation row, so
 * in the small calls of decode and verification (16-64 weight rows, ranged claims) it is a
 * visible part of the call: four blocks' sums at a time in vectors and the scales by F16C
 * take ~22 % less of an 8-row 16-row call's time, and ~9 % less of a 64-row one's, than one
 * block's sum by maddubs with a horizontal reduction and the scalar fp16 decoder (in-process
 * harness). Same values. */
AI void qr_prep(const int K, const bool vnni, const uint8_t *x, size_t xst, int g, int64_t c0, int64_t cnt,
                qr_xprep *xp) {
    const size_t xbs = has_min(K) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xq = has_min(K) ? 4 : 2;
    const int off = base_offset(K, vnni);
    for (int j = 0; j < g; j++) {
        const uint8_t *row = x + (size_t)j * xst + (size_t)c0 * xbs;
        for (int64_t b = 0; b < cnt; b++) {
            xp->dx[j][b] = _cvtsh_ss(ld16(row + (size_t)b * xbs));
            xp->s[j][b] = has_min(K) ? _cvtsh_ss(ld16(row + (size_t)b * xbs + 2)) : 0.0f;
        }
        int64_t b = 0;
        if (off) {
            const __m128i noff = _mm_set1_epi32(-off);
            for (; b + 4 <= cnt; b += 4)
                _mm_storeu_si128((__m128i *)&xp->base[j][b], _mm_mullo_epi32(qr_sum4(row + (size_t)b * xbs + xq, xbs), noff));
        }
        for (; b < cnt; b++) {
            int32_t sum = 0;
            if (off) {
                const int8_t *q = (const int8_t *)(row + (size_t)b * xbs + xq);
                for (int e = 0; e < 32; e++) sum += q[e];
            }
            xp->base[j][b] = -off * sum;
        }
    }
}

/* y[j * ldy + l] (j < g, l < 16) = (P0 + P1) + (P2 + P3) of lane l of row j's sums. */
AI void qr_store(__m512 kp[4][QR_G], int g, float *y, size_t ldy) {
    for (int j = 0; j < g; j++) {
        float t[16];
        _mm512_storeu_ps(t, _mm512_add_ps(_mm512_add_ps(kp[0][j], kp[1][j]), _mm512_add_ps(kp[2][j], kp[3][j])));
        memcpy(y + (size_t)j * ldy, t, sizeof t);
    }
}

/* Where the group after the last one of pass (wb, j0, c0) starts: the next chunk of blocks,
 * the same rows again for the next activation rows, the next QR_WROWS rows, or past the tile
 * (a ranged matmul thread's next claim: matmul.c). Its units are read ahead during that last
 * group, as the group after each other group is, so the next pass, or the next call, does
 * not start on cold weights (prefetches never fault, so a guess past the matrix costs only
 * the lines). In-process A/B, 8 rows: Q8_0 verify(8) -2 to -10 % (docs/performance.md,
 * "Multi-row tiles and verify(k)/decode(1)"). */
AI uintptr_t qr_after(const uint8_t *w, size_t wst, int nw, int nx, int64_t nb, size_t ubytes, int wb, int j0,
                      int64_t c0, int64_t cnt) {
    if (c0 + cnt < nb) return (uintptr_t)(w + (size_t)wb * wst + (size_t)(c0 + cnt) * ubytes);
    if (j0 + QR_G < nx) return (uintptr_t)(w + (size_t)wb * wst);
    return (uintptr_t)(w + (size_t)(wb + QR_WROWS < nw ? wb + QR_WROWS : nw) * wst);
}

/* A tile of nw (a multiple of 16) R16 weight rows x nx activation rows. */
AI void qrow(const int K, const bool vnni, int64_t nb, const uint8_t *w, size_t wst, int nw, const uint8_t *x,
             size_t xst, int nx, float *y, size_t ldy) {
    const size_t ubytes = 16 * wblock_bytes(K); /* one R16 unit: a block of 16 rows */
    _Alignas(64) qr_xprep xp;
    _Alignas(64) __m512 keep[QR_WROWS / 16][4][QR_G]; /* partial sums across chunks */
    for (int wb = 0; wb < nw; wb += QR_WROWS) {
        const int nwb = nw - wb < QR_WROWS ? nw - wb : QR_WROWS;
        for (int j0 = 0; j0 < nx; j0 += QR_G) {
            const int g = nx - j0 < QR_G ? nx - j0 : QR_G;
            const uint8_t *xg = x + (size_t)j0 * xst;
            for (int64_t c0 = 0; c0 < nb; c0 += QR_CHUNK) {
                const int64_t cnt = nb - c0 < QR_CHUNK ? nb - c0 : QR_CHUNK;
                const bool first = c0 == 0, last = c0 + cnt == nb;
                qr_prep(K, vnni, xg, xst, g, c0, cnt, &xp);
                if (g <= 2) {
                    const int ng = nwb / 16, half = (ng + 1) / 2;
                    for (int ga = 0; ga < half; ga++) {
                        const int gi[2] = {ga, ga + half < ng ? ga + half : -1};
                        const uint8_t *ua = w + (size_t)(wb + 16 * gi[0]) * wst + (size_t)c0 * ubytes;
                        const uint8_t *ub = gi[1] >= 0 ? w + (size_t)(wb + 16 * gi[1]) * wst + (size_t)c0 * ubytes : NULL;
                        __m512 P[2][4][QR_G];
                        for (int h = 0; h < 2; h++)
                            for (int r = 0; r < 4; r++)
                                for (int j = 0; j < g; j++)
                                    P[h][r][j] = first || gi[h] < 0 ? _mm512_setzero_ps() : keep[gi[h]][r][j];
                        if (g == 1) qr_seq2(K, vnni, 1, ua, ub, ubytes, xg, xst, c0, cnt, &xp, P);
                        else qr_seq2(K, vnni, 2, ua, ub, ubytes, xg, xst, c0, cnt, &xp, P);
                        for (int h = 0; h < 2 && gi[h] >= 0; h++) {
                            for (int r = 0; r < 4; r++)
                                for (int j = 0; j < g; j++) keep[gi[h]][r][j] = P[h][r][j];
                            if (last) qr_store(keep[gi[h]], g, y + (size_t)j0 * ldy + (size_t)(wb + 16 * gi[h]), ldy);
                        }
                    }
                    continue;
                }
                for (int i0 = 0; i0 < nwb; i0 += 16) {
                    const uint8_t *g0 = w + (size_t)(wb + i0) * wst + (size_t)c0 * ubytes;
                    const uintptr_t pf = i0 + 16 < nwb ? (uintptr_t)(g0 + 16 * wst)
                                                       : qr_after(w, wst, nw, nx, nb, ubytes, wb, j0, c0, cnt);
                    if (i0 == 0) /* the call's first group: all its requests at once */
                        kq_prefetch((uintptr_t)g0, (size_t)cnt * ubytes);
                    __m512 (*kp)[QR_G] = keep[i0 / 16];
                    int64_t it = 0; /* blocks visited in this group, over the four passes */
                    for (int r = 0; r < 4; r++) { /* g >= 3 here: 1-2 rows took qr_seq2 above */
                        __m512 P[QR_G];
                        for (int j = 0; j < QR_G; j++) P[j] = first ? _mm512_setzero_ps() : kp[r][j];
#define QR_R(G_) qr_residue(K, vnni, G_, g0, ubytes, xg, xst, c0, cnt, r, &xp, pf, it, P)
                        switch (g) {
                        case 3: QR_R(3); break;
                        case 4: QR_R(4); break;
                        case 5: QR_R(5); break;
                        case 6: QR_R(6); break;
                        case 7: QR_R(7); break;
                        default: QR_R(8); break;
                        }
#undef QR_R
                        it += (cnt - r + 3) / 4;
                        for (int j = 0; j < g; j++) kp[r][j] = P[j];
                    }
                    if (last) qr_store(kp, g, y + (size_t)j0 * ldy + (size_t)(wb + i0), ldy);
                }
            }
        }
    }
}

#define SPEX_QKERNEL_R16(name, KIND, VNNI)                                                     \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,         \
                     size_t x_stride, int nx, float *y, size_t ldy) {                          \
        qrow(KIND, VNNI, n / 32, (const uint8_t *)w, w_stride, nw, (const uint8_t *)x, x_stride, nx, y, ldy); \
    }

AI void qkernel(const int K, const bool vnni, int64_t n, const void *w, size_t w_stride, int nw, const void *x,
                size_t x_stride, int nx, float *y, size_t ldy) {
    const int64_t nb = n / 32;
    const uint8_t *w8 = (const uint8_t *)w, *x8 = (const uint8_t *)x;
    if (nx == 1) {
        qdec(K, vnni, nb, w8, w_stride, nw, x8, y);
        return;
    }

    /* the repacked activations and the accumulators kept between repacked chunks */
    _Alignas(64) xpack xp[XP_GROUPS][XP_BLOCKS];
    _Alignas(64) __m512 keep[XP_WROWS / 4][XP_GROUPS][4];
    for (int j = 0; j < nx; j += 4 * XP_GROUPS) {
        const int rx = nx - j < 4 * XP_GROUPS ? nx - j : 4 * XP_GROUPS;
        const uint8_t *xj = x8 + (size_t)j * x_stride;
        float *yj = y + (size_t)j * ldy;
        if (rx > 4) qbat_pass(K, vnni, 2, nb, w8, w_stride, nw, xj, x_stride, rx, yj, ldy, xp, keep);
        else qbat_pass(K, vnni, 1, nb, w8, w_stride, nw, xj, x_stride, rx, yj, ldy, xp, keep);
    }
}

#define SPEX_QKERNEL(name, KIND, VNNI)                                                         \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,         \
                     size_t x_stride, int nx, float *y, size_t ldy) {                          \
        qkernel(KIND, VNNI, n, w, w_stride, nw, x, x_stride, nx, y, ldy);                      \
    }

/* ---- float weights × f32 activations ---------------------------------------------- */

enum { K_F32, K_F16, K_BF16 };

/* 16 weights starting at element k of a row, widened to f32 (masked lanes: 0). */
AI __m512 load_wf(const int K, const uint8_t *row, int64_t k, const bool masked, __mmask16 m) {
    switch (K) {
    case K_F32:
        return masked ? _mm512_maskz_loadu_ps(m, (const float *)row + k) : _mm512_loadu_ps((const float *)row + k);
    case K_F16: {
        const uint16_t *p = (const uint16_t *)row + k;
        const __m256i h = masked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
        return _mm512_cvtph_ps(h);
    }
    default: {
        const uint16_t *p = (const uint16_t *)row + k;
        const __m256i h = masked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    }
}

AI void fstep(const int K, const int RW, const int RX, const uint8_t *w, size_t wst, const uint8_t *x, size_t xst,
              int64_t k, const bool masked, __mmask16 m, __m512 acc[MAXW][MAXX]) {
    __m512 wv[MAXW];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) wv[r] = load_wf(K, w + (size_t)r * wst, k, masked, m);
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) {
        const float *xr = (const float *)(x + (size_t)j * xst) + k;
        const __m512 xv = masked ? _mm512_maskz_loadu_ps(m, xr) : _mm512_loadu_ps(xr);
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
    }
}

AI void ftile(const int K, const int RW, const int RX, int64_t n, const uint8_t *w, size_t wst, const uint8_t *x,
              size_t xst, float *y, size_t ystep, size_t ldy) {
    __m512 acc[MAXW][MAXX];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) acc[r][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) fstep(K, RW, RX, w, wst, x, xst, k, false, 0, acc);
    if (k < n) fstep(K, RW, RX, w, wst, x, xst, k, true, (__mmask16)((1u << (n - k)) - 1u), acc);
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) y[(size_t)j * ldy + (size_t)r * ystep] = _mm512_reduce_add_ps(acc[r][j]);
}

/* ---- tiling of a whole kernel call into register tiles ----------------------------- */

/* Calls TILE(rw, rx) with compile-time rw, rx in 1..4 for the runtime values. */
#define SPEX_TILE_SWITCH(rw, rx, TILE)                                                         \
    switch ((rw) * 8 + (rx)) {                                                                 \
    case 1 * 8 + 1: TILE(1, 1); break;                                                         \
    case 1 * 8 + 2: TILE(1, 2); break;                                                         \
    case 1 * 8 + 3: TILE(1, 3); break;                                                         \
    case 1 * 8 + 4: TILE(1, 4); break;                                                         \
    case 2 * 8 + 1: TILE(2, 1); break;                                                         \
    case 2 * 8 + 2: TILE(2, 2); break;                                                         \
    case 2 * 8 + 3: TILE(2, 3); break;                                                         \
    case 2 * 8 + 4: TILE(2, 4); break;                                                         \
    case 3 * 8 + 1: TILE(3, 1); break;                                                         \
    case 3 * 8 + 2: TILE(3, 2); break;                                                         \
    case 3 * 8 + 3: TILE(3, 3); break;                                                         \
    case 3 * 8 + 4: TILE(3, 4); break;                                                         \
    case 4 * 8 + 1: TILE(4, 1); break;                                                         \
    case 4 * 8 + 2: TILE(4, 2); break;                                                         \
    case 4 * 8 + 3: TILE(4, 3); break;                                                         \
    default: TILE(4, 4); break;                                                                \
    }

/* The weight group (up to MAXW rows) is the outer loop: its bytes come from memory once and
 * stay in L1/L2 while every activation group of the call is applied to them. A group's rows
 * are a quarter of the call's rows apart (g, g+Q, g+2Q, g+3Q), so the weights stream as
 * long runs: interleaving neighbouring rows cuts the DRAM rate (see the qdec comment). */
#define SPEX_TILE_LOOP(TILE)                                                                   \
    const uint8_t *w8 = (const uint8_t *)w, *x8 = (const uint8_t *)x;                          \
    const int Q = (nw + MAXW - 1) / MAXW;                                                      \
    const size_t wst = (size_t)Q * w_stride;                                                   \
    for (int i = 0; i < Q; i++) {                                                              \
        const int rw = (nw - 1 - i) / Q + 1; /* rows i + r*Q < nw */                           \
        for (int j = 0; j < nx; j += MAXX) {                                                   \
            const int rx = nx - j < MAXX ? nx - j : MAXX;                                      \
            const uint8_t *wt = w8 + (size_t)i * w_stride, *xt = x8 + (size_t)j * x_stride;    \
            float *yt = y + (size_t)j * ldy + (size_t)i;                                       \
            SPEX_TILE_SWITCH(rw, rx, TILE)                                                     \
        }                                                                                      \
    }

#define SPEX_FKERNEL(name, KIND)                                                               \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,         \
                     size_t x_stride, int nx, float *y, size_t ldy) {                          \
        SPEX_TILE_LOOP(FT_##KIND)                                                              \
    }

#define FT(K, a, b) ftile(K, a, b, n, wt, wst, xt, x_stride, yt, (size_t)Q, ldy)
#define FT_K_F32(a, b) FT(K_F32, a, b)
#define FT_K_F16(a, b) FT(K_F16, a, b)
#define FT_K_BF16(a, b) FT(K_BF16, a, b)

SPEX_QKERNEL(dot_q8_0_vnni, K_Q8_0, true)
SPEX_QKERNEL(dot_q8_0_bw, K_Q8_0, false)
SPEX_QKERNEL(dot_q4_0_vnni, K_Q4_0, true)
SPEX_QKERNEL(dot_q4_0_bw, K_Q4_0, false)
SPEX_QKERNEL(dot_q5_0_vnni, K_Q5_0, true)
SPEX_QKERNEL(dot_q5_0_bw, K_Q5_0, false)
SPEX_QKERNEL(dot_q4_1_vnni, K_Q4_1, true)
SPEX_QKERNEL(dot_q4_1_bw, K_Q4_1, false)
SPEX_QKERNEL(dot_q5_1_vnni, K_Q5_1, true)
SPEX_QKERNEL(dot_q5_1_bw, K_Q5_1, false)
SPEX_QKERNEL_R16(dot_q8_0_r16_vnni, K_Q8_0, true)
SPEX_QKERNEL_R16(dot_q8_0_r16_bw, K_Q8_0, false)
SPEX_QKERNEL_R16(dot_q4_0_r16_vnni, K_Q4_0, true)
SPEX_QKERNEL_R16(dot_q4_0_r16_bw, K_Q4_0, false)
SPEX_QKERNEL_R16(dot_q5_0_r16_vnni, K_Q5_0, true)
SPEX_QKERNEL_R16(dot_q5_0_r16_bw, K_Q5_0, false)
SPEX_QKERNEL_R16(dot_q4_1_r16_vnni, K_Q4_1, true)
SPEX_QKERNEL_R16(dot_q4_1_r16_bw, K_Q4_1, false)
SPEX_QKERNEL_R16(dot_q5_1_r16_vnni, K_Q5_1, true)
SPEX_QKERNEL_R16(dot_q5_1_r16_bw, K_Q5_1, false)
SPEX_FKERNEL(dot_f32, K_F32)
SPEX_FKERNEL(dot_f16, K_F16)
SPEX_FKERNEL(dot_bf16, K_BF16)

/* ---- activation quantizers: the same bytes as spex_quantize_row_q8_{0,1}_ref ---------- */

/* roundf (half away from zero) of v, clamped to [-127, 127]; NaN lanes give 0. Exact: the
 * fraction v - trunc(v) is computed without rounding error for |v| < 2^23. */
AI __m512i round_q8(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(v, t);
    const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(f), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 r = _mm512_mask_add_ps(t, up, t, one);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    const __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    return _mm512_maskz_cvtps_epi32(ord, r);
}

/* Quantizes 32 floats; returns sum(q) (used by Q8_1). d is written as the reference does. */
AI int quant_block_q8(const float *x, spex_fp16 *dh, int8_t *qs, float *d_out) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *dh = spex_f32_to_fp16(d);
    *d_out = d;
    const __m512i q0 = round_q8(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
    const __m512i q1 = round_q8(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(q1));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

/* 16 consecutive Q8_0 activation blocks (512 values) at once. Per block, quant_block_q8's
 * horizontal max (four shuffle + max steps in a chain), scalar division and fp16 rounding
 * were most of its time; here the 16 blocks' |x| maxima go through one transposing tree (15
 * shuffle pairs + max for 16 blocks) into one vector, lane b = block b, and d, 1/d and the
 * fp16 d are one vector operation each. max is exact, so any order gives the reference's
 * amax for finite values; vcvtps2ph rounding to nearest even gives spex_f32_to_fp16's bits
 * for every finite d. A group holding a NaN or an infinity (x * 0 is then not 0) is handed to
 * the reference itself, whose sequential max treats NaNs its own way. Returns false then. */
/* Whether a lane of v is a NaN or an infinity: x * 0 is 0 for every finite x. */
AI bool any_non_finite(__m512 v) {
    return _mm512_cmp_ps_mask(_mm512_mul_ps(v, _mm512_setzero_ps()), _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
}

AI bool quant_16_blocks_q8_0(const float *x, block_q8_0 *y) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 m[16], chk[4] = {zero, zero, zero, zero};
    for (int b = 0; b < 16; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        chk[b % 4] = _mm512_fmadd_ps(_mm512_add_ps(v0, v1), zero, chk[b % 4]);
        m[b] = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    }
    /* v0 + v1 overflows to inf only when one of them is larger than FLT_MAX / 2: falls back */
    if (any_non_finite(_mm512_add_ps(_mm512_add_ps(chk[0], chk[1]), _mm512_add_ps(chk[2], chk[3])))) return false;
    for (int i = 0; i < 8; i++) /* 128-bit chunks: block pairs, 8 lanes each */
        m[i] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0x44), _mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* one chunk (4 lanes) a block */
        m[i] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0x88), _mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* 2 lanes a block */
        m[i] = _mm512_max_ps(_mm512_shuffle_ps(m[2 * i], m[2 * i + 1], 0x44), _mm512_shuffle_ps(m[2 * i], m[2 * i + 1], 0xee));
    m[0] = _mm512_max_ps(_mm512_shuffle_ps(m[0], m[1], 0x88), _mm512_shuffle_ps(m[0], m[1], 0xdd));
    /* lane l of the tree's result is block (l % 4) * 4 + l / 4 */
    const __m512 amax = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), m[0]);
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, zero, _CMP_NEQ_UQ), _mm512_set1_ps(1.0f), d);
    _Alignas(32) uint16_t dh[16];
    _Alignas(64) float idv[16];
    _mm256_store_si256((__m256i *)dh, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm512_store_ps(idv, id);
    for (int b = 0; b < 16; b++) {
        const __m512 ib = _mm512_set1_ps(idv[b]);
        y[b].d = dh[b];
        _mm_storeu_si128((__m128i *)y[b].qs, _mm512_cvtepi32_epi8(round_q8(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), ib))));
        _mm_storeu_si128((__m128i *)(y[b].qs + 16),
                         _mm512_cvtepi32_epi8(round_q8(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), ib))));
    }
    return true;
}

static void act_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)dst;
    const int64_t nb = n / QK8_0;
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16)
        if (!quant_16_blocks_q8_0(x + b * QK8_0, y + b)) spex_quantize_row_q8_0_ref(x + b * QK8_0, y + b, 16 * QK8_0);
    float d;
    for (; b < nb; b++) {
        const __m512 v = _mm512_add_ps(_mm512_loadu_ps(x + b * QK8_0), _mm512_loadu_ps(x + b * QK8_0 + 16));
        if (any_non_finite(v))
            spex_quantize_row_q8_0_ref(x + b * QK8_0, y + b, QK8_0); /* a NaN or an infinity: as above */
        else
            (void)quant_block_q8(x + b * QK8_0, &y[b].d, y[b].qs, &d);
    }
}

static void act_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)dst;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        float d;
        const int sum = quant_block_q8(x + b * QK8_1, &y[b].d, y[b].qs, &d);
        y[b].s = spex_f32_to_fp16((float)sum * d);
    }
}

/* ---- streaming-read probe (spex bench kernels) ------------------------------------- */

uint64_t spex_stream_read_avx512(const void *buf, size_t bytes, int streams) {
    const size_t part = bytes / (size_t)streams / 256 * 256;
    __m512i acc[8];
    for (int s = 0; s < 8; s++) acc[s] = _mm512_setzero_si512();
    for (size_t i = 0; i < part; i += 256) {
        for (int s = 0; s < streams && s < 8; s++) {
            const uint8_t *p = (const uint8_t *)buf + (size_t)s * part + i;
            const __m512i a = _mm512_add_epi64(_mm512_loadu_si512((const void *)p), _mm512_loadu_si512((const void *)(p + 64)));
            const __m512i b = _mm512_add_epi64(_mm512_loadu_si512((const void *)(p + 128)), _mm512_loadu_si512((const void *)(p + 192)));
            acc[s] = _mm512_add_epi64(acc[s], _mm512_add_epi64(a, b));
        }
    }
    for (int s = 1; s < 8; s++) acc[0] = _mm512_add_epi64(acc[0], acc[s]);
    /* Unsigned lane sum: _mm512_reduce_add_epi64 adds as signed 64-bit, which wraps on
     * arbitrary data (undefined behaviour that UBSan reports). */
    uint64_t lanes[8], sum = 0;
    _mm512_storeu_si512((void *)lanes, acc[0]);
    for (int s = 0; s < 8; s++) sum += lanes[s];
    return sum;
}

/* ---- int8 dot-product ceiling (spex bench kernels --cached) --------------------------- */

/* The sum of t's 16 dwords as unsigned values. */
static uint64_t peak_sum(__m512i t) {
    uint32_t lanes[16];
    _mm512_storeu_si512((void *)lanes, t);
    uint64_t sum = 0;
    for (int i = 0; i < 16; i++) sum += lanes[i];
    return sum;
}

/* The probes' inner steps are written out in asm: gcc otherwise rotates the 12 sums through
 * extra registers, or stores the 8 to the stack, every step. */

/* Sums %0..%11 += u8 %12 . s8 operand W. */
#define PEAK_ROUND(W)                                                                            \
    "vpdpbusd %" W ", %12, %0\n\t vpdpbusd %" W ", %12, %1\n\t vpdpbusd %" W ", %12, %2\n\t"       \
    "vpdpbusd %" W ", %12, %3\n\t vpdpbusd %" W ", %12, %4\n\t vpdpbusd %" W ", %12, %5\n\t"       \
    "vpdpbusd %" W ", %12, %6\n\t vpdpbusd %" W ", %12, %7\n\t vpdpbusd %" W ", %12, %8\n\t"       \
    "vpdpbusd %" W ", %12, %9\n\t vpdpbusd %" W ", %12, %10\n\t vpdpbusd %" W ", %12, %11\n\t"
/* Sums %0..%7 += u8 weight word W . the dword at byte K of activation row j (rows 64 bytes
 * apart from %10), broadcast. */
#define PEAK_WORD(K, W)                                                                                  \
    "vpdpbusd " K "(%10)%{1to16%}, %" W ", %0\n\t vpdpbusd 64+" K "(%10)%{1to16%}, %" W ", %1\n\t"     \
    "vpdpbusd 128+" K "(%10)%{1to16%}, %" W ", %2\n\t vpdpbusd 192+" K "(%10)%{1to16%}, %" W ", %3\n\t" \
    "vpdpbusd 256+" K "(%10)%{1to16%}, %" W ", %4\n\t vpdpbusd 320+" K "(%10)%{1to16%}, %" W ", %5\n\t" \
    "vpdpbusd 384+" K "(%10)%{1to16%}, %" W ", %6\n\t vpdpbusd 448+" K "(%10)%{1to16%}, %" W ", %7\n\t"

/* 12 sums from registers, each adding u8 w0 . s8 (w0, then w1, in turn): 4 cycles of
 * latency at 2 vpdpbusd a cycle (measured on an AMD EPYC host), so 8 sums would fall
 * short. 48 vpdpbusd a step. */
static uint64_t peak_regs(uint64_t steps, __m512i w0, __m512i w1) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3);
    __m512i a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    __m512i a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    for (uint64_t r = 0; r < steps; r++)
        __asm__ volatile(
            PEAK_ROUND("12") PEAK_ROUND("13") PEAK_ROUND("12") PEAK_ROUND("13")
            : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),
              "+v"(a10), "+v"(a11)
            : "v"(w0), "v"(w1));
    const __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    return peak_sum(_mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11))));
}

/* 8 activation rows x 8 words, a weight word shared by the 8 rows and each activation dword
 * an embedded broadcast (the tile kernels' 8-row pattern without their unpacking and
 * scales). 64 vpdpbusd a step. */
static uint64_t peak_bcast(uint64_t steps, __m512i w0, __m512i w1, const int8_t *x) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3);
    __m512i a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    for (uint64_t r = 0; r < steps; r++)
        __asm__ volatile(
            PEAK_WORD("0", "8") PEAK_WORD("4", "9") PEAK_WORD("8", "8") PEAK_WORD("12", "9")
            PEAK_WORD("16", "8") PEAK_WORD("20", "9") PEAK_WORD("24", "8") PEAK_WORD("28", "9")
            : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7)
            : "v"(w0), "v"(w1), "r"(x), "m"(*(const int8_t(*)[512])x));
    const __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    return peak_sum(t);
}

uint64_t spex_dot_peak_avx512_vnni(uint64_t steps, int bcast, uint64_t seed, uint64_t *macs) {
    _Alignas(64) int8_t x[8][64];
    for (int i = 0; i < 8 * 64; i++) x[i / 64][i % 64] = (int8_t)(seed >> (i % 57));
    const __m512i w0 = _mm512_set1_epi64((long long)seed), w1 = _mm512_set1_epi64((long long)~seed);
    *macs = steps * (bcast ? 64 : 48) * 64;
    return bcast ? peak_bcast(steps, w0, w1, &x[0][0]) : peak_regs(steps, w0, w1);
}

void spex_matmul_register_avx512(spex_matmul_kernels *k, unsigned feat) {
    const bool vnni = (feat & SPEX_MATMUL_FEAT_VNNI) != 0;
    k->dot[SPEX_TYPE_F32] = dot_f32;
    k->dot[SPEX_TYPE_F16] = dot_f16;
    k->dot[SPEX_TYPE_BF16] = dot_bf16;
    k->dot[SPEX_TYPE_Q8_0] = vnni ? dot_q8_0_vnni : dot_q8_0_bw;
    k->dot[SPEX_TYPE_Q4_0] = vnni ? dot_q4_0_vnni : dot_q4_0_bw;
    k->dot[SPEX_TYPE_Q5_0] = vnni ? dot_q5_0_vnni : dot_q5_0_bw;
    k->dot[SPEX_TYPE_Q4_1] = vnni ? dot_q4_1_vnni : dot_q4_1_bw;
    k->dot[SPEX_TYPE_Q5_1] = vnni ? dot_q5_1_vnni : dot_q5_1_bw;
    k->dot_r16[SPEX_TYPE_Q8_0] = vnni ? dot_q8_0_r16_vnni : dot_q8_0_r16_bw;
    k->dot_r16[SPEX_TYPE_Q4_0] = vnni ? dot_q4_0_r16_vnni : dot_q4_0_r16_bw;
    k->dot_r16[SPEX_TYPE_Q5_0] = vnni ? dot_q5_0_r16_vnni : dot_q5_0_r16_bw;
    k->dot_r16[SPEX_TYPE_Q4_1] = vnni ? dot_q4_1_r16_vnni : dot_q4_1_r16_bw;
    k->dot_r16[SPEX_TYPE_Q5_1] = vnni ? dot_q5_1_r16_vnni : dot_q5_1_r16_bw;
    k->r16_fast[SPEX_TYPE_Q8_0] = k->r16_fast[SPEX_TYPE_Q4_0] = k->r16_fast[SPEX_TYPE_Q5_0] = true;
    k->r16_fast[SPEX_TYPE_Q4_1] = k->r16_fast[SPEX_TYPE_Q5_1] = true;
    k->act_quant[SPEX_TYPE_Q8_0] = act_q8_0;
    k->act_quant[SPEX_TYPE_Q8_1] = act_q8_1;
}
