/*
 * dot_kquants_ref.c — scalar reference dot products of K-quant weights (Q4_K, Q5_K, Q6_K)
 * with Q8_K activations: the specification the AVX2 and AVX-512 kernels are tested against.
 *
 * What it is: plain C over the exact ggml block layouts of src/tensor/blocks.h (bit orders
 * as in src/tensor/quant_ref_k.c, the dequantize reference). What it is not: fast, and not
 * a dequantize-then-multiply: like ggml's integer dot products it multiplies the integer
 * codes, so the result equals the dot of the dequantized rows up to float rounding.
 *
 * Dimension legend: n elements per row (a multiple of QK_K = 256), nb = n / 256
 * super-blocks; w: nw weight rows w_stride bytes apart; x: nx Q8_K rows x_stride bytes
 * apart; y[j*ldy + i] = dot(w row i, x row j).
 *
 * Per super-block, with the activation block's d (dx) and integer codes a[256], bsums[16]:
 *   Q4_K, Q5_K: 8 sub-blocks of 32, 6-bit scale sc[s] and min m[s], codes q in 0..15 / 0..31:
 *       dx * (d * sum_s sc[s] * sum_{e in s} q[e]*a[e]  -  dmin * sum_s m[s] * sum_{e in s} a[e])
 *     where sum_{e in s} a[e] = bsums[2s] + bsums[2s+1] (the weight value is d*sc*q - dmin*m).
 *   Q6_K: 16 sub-blocks of 16, int8 scale sc[s], codes q in 0..63 (value q - 32):
 *       dx * (d * sum_s sc[s] * sum_{e in s} (q[e] - 32) * a[e])
 * The integer sums are exact in int32 (|a| <= 128: Q4_K < 2^25, Q5_K < 2^26, Q6_K < 2^28);
 * the float expression is evaluated in exactly the order written in the code below.
 */
#include "cpu/kquants_internal.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"

/* ---- Q4_K ---------------------------------------------------------------- */

static float dot_q4_K_row(const block_q4_K *w, const block_q8_K *x, int64_t nb, float sum) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = w[b].qs;   /* 32 bytes per 64 elements: low nibbles, then high */
        const int8_t *a = x[b].qs;
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < QK_K / 64; c++, q += 32, a += 64) {
            uint8_t sc0, m0, sc1, m1;
            spex_kq_get_scale_min(2 * c, w[b].scales, &sc0, &m0);
            spex_kq_get_scale_min(2 * c + 1, w[b].scales, &sc1, &m1);
            int32_t d0 = 0, d1 = 0;
            for (int l = 0; l < 32; l++) {
                d0 += (q[l] & 0x0f) * a[l];
                d1 += (q[l] >> 4) * a[32 + l];
            }
            const int16_t *bs = x[b].bsums + 4 * c;
            sumi += sc0 * d0 + sc1 * d1;
            summ += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
        }
        const float d = spex_fp16_to_f32(w[b].d), dmin = spex_fp16_to_f32(w[b].dmin);
        sum += x[b].d * (d * (float)sumi - dmin * (float)summ);
    }
    return sum;
}

/* ---- Q5_K: Q4_K's nibbles plus a fifth bit, qh[l] bit s for element l of sub-block s -- */

static float dot_q5_K_row(const block_q5_K *w, const block_q8_K *x, int64_t nb, float sum) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = w[b].qs, *qh = w[b].qh;
        const int8_t *a = x[b].qs;
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < QK_K / 64; c++, q += 32, a += 64) {
            uint8_t sc0, m0, sc1, m1;
            spex_kq_get_scale_min(2 * c, w[b].scales, &sc0, &m0);
            spex_kq_get_scale_min(2 * c + 1, w[b].scales, &sc1, &m1);
            int32_t d0 = 0, d1 = 0;
            for (int l = 0; l < 32; l++) {
                const int q0 = (q[l] & 0x0f) | ((qh[l] >> (2 * c)) & 1) << 4;
                const int q1 = (q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
                d0 += q0 * a[l];
                d1 += q1 * a[32 + l];
            }
            const int16_t *bs = x[b].bsums + 4 * c;
            sumi += sc0 * d0 + sc1 * d1;
            summ += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
        }
        const float d = spex_fp16_to_f32(w[b].d), dmin = spex_fp16_to_f32(w[b].dmin);
        sum += x[b].d * (d * (float)sumi - dmin * (float)summ);
    }
    return sum;
}

/* ---- Q6_K: per half h of 128 elements and l < 32, ql[64h+l] holds the low 4 bits of
 * elements 128h+l (low nibble) and 128h+64+l (high nibble), ql[64h+32+l] those of
 * 128h+32+l and 128h+96+l; qh[32h+l] bits 0,2,4,6 the high 2 bits of 128h+l, +32, +64, +96. */

static float dot_q6_K_row(const block_q6_K *w, const block_q8_K *x, int64_t nb, float sum) {
    for (int64_t b = 0; b < nb; b++) {
        int32_t sub[QK_K / 16] = {0}; /* sum of (q-32)*a per sub-block of 16 */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
            const int8_t *a = x[b].qs + 128 * h;
            int32_t *s = sub + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int q0 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q1 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                s[0 + l / 16] += q0 * a[l];
                s[2 + l / 16] += q1 * a[l + 32];
                s[4 + l / 16] += q2 * a[l + 64];
                s[6 + l / 16] += q3 * a[l + 96];
            }
        }
        int32_t sumi = 0;
        for (int s = 0; s < QK_K / 16; s++) sumi += w[b].scales[s] * sub[s];
        const float d = spex_fp16_to_f32(w[b].d);
        sum += x[b].d * (d * (float)sumi);
    }
    return sum;
}

/* ---- tiles ----------------------------------------------------------------- */

#define KQ_REF_TILE(fn, wblock, rowfn)                                                     \
    void fn(int64_t n, const void *w, size_t w_stride, int nw, const void *x,               \
            size_t x_stride, int nx, float *y, size_t ldy) {                                \
        const int64_t nb = n / QK_K;                                                        \
        for (int i = 0; i < nw; i++) {                                                      \
            const wblock *wr = (const wblock *)((const uint8_t *)w + (size_t)i * w_stride); \
            for (int j = 0; j < nx; j++) {                                                  \
                const block_q8_K *xr =                                                      \
                    (const block_q8_K *)((const uint8_t *)x + (size_t)j * x_stride);        \
                y[(size_t)j * ldy + (size_t)i] = rowfn(wr, xr, nb, 0.0f);                         \
            }                                                                               \
        }                                                                                   \
    }

KQ_REF_TILE(spex_dot_q4_K_ref, block_q4_K, dot_q4_K_row)
KQ_REF_TILE(spex_dot_q5_K_ref, block_q5_K, dot_q5_K_row)
KQ_REF_TILE(spex_dot_q6_K_ref, block_q6_K, dot_q6_K_row)

/* R16 tiles (layout: src/cpu/matmul.h): each block is copied back to the ggml layout and
 * goes through the row function above one block at a time, carrying the running sum, so
 * the arithmetic is the ggml tile's exactly and the results are bit-identical to it. */
#define KQ_REF_TILE_R16(fn, wtype, wblock, rowfn)                                          \
    void fn(int64_t n, const void *w, size_t w_stride, int nw, const void *x,               \
            size_t x_stride, int nx, float *y, size_t ldy) {                                \
        const int64_t nb = n / QK_K;                                                        \
        for (int i = 0; i < nw; i++) {                                                      \
            const uint8_t *g16 = (const uint8_t *)w + (size_t)(i / 16 * 16) * w_stride;     \
            for (int j = 0; j < nx; j++) {                                                  \
                const block_q8_K *xr =                                                      \
                    (const block_q8_K *)((const uint8_t *)x + (size_t)j * x_stride);        \
                float sum = 0.0f;                                                           \
                for (int64_t b = 0; b < nb; b++) {                                          \
                    wblock blk;                                                             \
                    spex_r16_get_block(wtype, g16, i % 16, b, &blk);                        \
                    sum = rowfn(&blk, xr + b, 1, sum);                                      \
                }                                                                           \
                y[(size_t)j * ldy + (size_t)i] = sum;                                       \
            }                                                                               \
        }                                                                                   \
    }

KQ_REF_TILE_R16(spex_dot_q4_K_r16_ref, SPEX_TYPE_Q4_K, block_q4_K, dot_q4_K_row)
KQ_REF_TILE_R16(spex_dot_q5_K_r16_ref, SPEX_TYPE_Q5_K, block_q5_K, dot_q5_K_row)
KQ_REF_TILE_R16(spex_dot_q6_K_r16_ref, SPEX_TYPE_Q6_K, block_q6_K, dot_q6_K_row)

void spex_act_quant_q8_K_ref(const float *x, void *dst, int64_t n) {
    spex_quantize_row_q8_K_ref(x, (block_q8_K *)dst, n);
}
