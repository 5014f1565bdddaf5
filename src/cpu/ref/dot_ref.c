/*
 * dot_ref.c — scalar matmul kernels for the float and 32-element-block weight types, and
 * the scalar activation quantizers: the specification every SIMD kernel is tested against.
 *
 * What it is: the kernel-table entries of src/cpu/matmul.h for F32, F16, BF16 weights
 * (× f32 activations), Q8_0, Q4_0, Q5_0 (× Q8_0 activations) and Q4_1, Q5_1 (× Q8_1
 * activations), plus act_quant[F32] (a copy), act_quant[Q8_0] and act_quant[Q8_1] (the
 * references of src/tensor/quant_ref.c). What it is not: fast, or the K-quants
 * (ref/dot_kquants*.c). Block layouts: src/tensor/blocks.h (ggml's).
 *
 * Dimension legend: n elements per row, nb = n / 32 blocks per row; w: nw weight rows
 * w_stride bytes apart; x: nx activation rows x_stride bytes apart; y[j*ldy + i] = dot of
 * weight row i with activation row j (the tile contract of spex_dot_fn).
 *
 * The arithmetic, per block b of a quantized row (dw, dx the fp16 scales as f32):
 *   q8_0/q4_0/q5_0:  acc += (float)sumi * (dw * dx),      sumi = sum_k qw[k] * qx[k]
 *   q4_1/q5_1:       acc += (float)sumi * (dw * dx) + m * s
 * where qw are the signed codes (q4_0: nibble - 8, q5_0: 5-bit code - 16), and for the
 * "_1" types qw are the unsigned codes, m the block minimum and s = fp16(dx * sum(qx)) the
 * Q8_1 activation block's sum term: sum_k (dw*qw + m) * dx*qx = dw*dx*sumi + m * dx*sum(qx).
 * sumi is exact (|sumi| <= 32*127*127 < 2^24, so its conversion is exact too); the float
 * accumulation is sequential. Float weights: acc += w[k] * x[k] sequentially in f32.
 */
#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"

#include <string.h>

/* ---- per-row dot products ------------------------------------------------ */

static float dot_f32(const float *w, const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; k++) acc += w[k] * x[k];
    return acc;
}

static float dot_f16(const spex_fp16 *w, const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; k++) acc += spex_fp16_to_f32(w[k]) * x[k];
    return acc;
}

static float dot_bf16(const spex_bf16 *w, const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; k++) acc += spex_bf16_to_f32(w[k]) * x[k];
    return acc;
}

/* The 32 high bits of a q5 block, bit k for element k (little-endian bytes). */
static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static float dot_q8_0(const block_q8_0 *w, const block_q8_0 *x, int64_t nb, float acc) {
    for (int64_t b = 0; b < nb; b++) {
        int sumi = 0;
        for (int k = 0; k < QK8_0; k++) sumi += w[b].qs[k] * x[b].qs[k];
        acc += (float)sumi * (spex_fp16_to_f32(w[b].d) * spex_fp16_to_f32(x[b].d));
    }
    return acc;
}

static float dot_q4_0(const block_q4_0 *w, const block_q8_0 *x, int64_t nb, float acc) {
    for (int64_t b = 0; b < nb; b++) {
        int sumi = 0;
        for (int k = 0; k < QK4_0 / 2; k++) {
            sumi += ((w[b].qs[k] & 0x0f) - 8) * x[b].qs[k];
            sumi += ((w[b].qs[k] >> 4) - 8) * x[b].qs[k + QK4_0 / 2];
        }
        acc += (float)sumi * (spex_fp16_to_f32(w[b].d) * spex_fp16_to_f32(x[b].d));
    }
    return acc;
}

static float dot_q5_0(const block_q5_0 *w, const block_q8_0 *x, int64_t nb, float acc) {
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t qh = load_qh(w[b].qh);
        int sumi = 0;
        for (int k = 0; k < QK5_0 / 2; k++) {
            const int lo = (w[b].qs[k] & 0x0f) | (int)((qh >> k) & 1u) << 4;
            const int hi = (w[b].qs[k] >> 4) | (int)((qh >> (k + 16)) & 1u) << 4;
            sumi += (lo - 16) * x[b].qs[k] + (hi - 16) * x[b].qs[k + QK5_0 / 2];
        }
        acc += (float)sumi * (spex_fp16_to_f32(w[b].d) * spex_fp16_to_f32(x[b].d));
    }
    return acc;
}

static float dot_q4_1(const block_q4_1 *w, const block_q8_1 *x, int64_t nb, float acc) {
    for (int64_t b = 0; b < nb; b++) {
        int sumi = 0;
        for (int k = 0; k < QK4_1 / 2; k++) {
            sumi += (w[b].qs[k] & 0x0f) * x[b].qs[k];
            sumi += (w[b].qs[k] >> 4) * x[b].qs[k + QK4_1 / 2];
        }
        acc += (float)sumi * (spex_fp16_to_f32(w[b].d) * spex_fp16_to_f32(x[b].d)) +
               spex_fp16_to_f32(w[b].m) * spex_fp16_to_f32(x[b].s);
    }
    return acc;
}

static float dot_q5_1(const block_q5_1 *w, const block_q8_1 *x, int64_t nb, float acc) {
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t qh = load_qh(w[b].qh);
        int sumi = 0;
        for (int k = 0; k < QK5_1 / 2; k++) {
            const int lo = (w[b].qs[k] & 0x0f) | (int)((qh >> k) & 1u) << 4;
            const int hi = (w[b].qs[k] >> 4) | (int)((qh >> (k + 16)) & 1u) << 4;
            sumi += lo * x[b].qs[k] + hi * x[b].qs[k + QK5_1 / 2];
        }
        acc += (float)sumi * (spex_fp16_to_f32(w[b].d) * spex_fp16_to_f32(x[b].d)) +
               spex_fp16_to_f32(w[b].m) * spex_fp16_to_f32(x[b].s);
    }
    return acc;
}

/* ---- tile kernels (spex_dot_fn): every (weight row, activation row) pair ---- */

/* One tile function per type; ROWDOT(w, x) is the row dot product above. */
#define SPEX_REF_TILE(name, wty, xty, ROWDOT)                                              \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,     \
                     size_t x_stride, int nx, float *y, size_t ldy) {                      \
        for (int j = 0; j < nx; j++) {                                                     \
            const xty *xr = (const xty *)((const uint8_t *)x + (size_t)j * x_stride);      \
            for (int i = 0; i < nw; i++) {                                                 \
                const wty *wr = (const wty *)((const uint8_t *)w + (size_t)i * w_stride);  \
                y[(size_t)j * ldy + (size_t)i] = ROWDOT;                                   \
            }                                                                              \
        }                                                                                  \
    }

SPEX_REF_TILE(tile_f32, float, float, dot_f32(wr, xr, n))
SPEX_REF_TILE(tile_f16, spex_fp16, float, dot_f16(wr, xr, n))
SPEX_REF_TILE(tile_bf16, spex_bf16, float, dot_bf16(wr, xr, n))
SPEX_REF_TILE(tile_q8_0, block_q8_0, block_q8_0, dot_q8_0(wr, xr, n / QK8_0, 0.0f))
SPEX_REF_TILE(tile_q4_0, block_q4_0, block_q8_0, dot_q4_0(wr, xr, n / QK4_0, 0.0f))
SPEX_REF_TILE(tile_q5_0, block_q5_0, block_q8_0, dot_q5_0(wr, xr, n / QK5_0, 0.0f))
SPEX_REF_TILE(tile_q4_1, block_q4_1, block_q8_1, dot_q4_1(wr, xr, n / QK4_1, 0.0f))
SPEX_REF_TILE(tile_q5_1, block_q5_1, block_q8_1, dot_q5_1(wr, xr, n / QK5_1, 0.0f))

/* R16 tiles (layout: src/cpu/matmul.h): each block is copied back to the ggml layout and
 * goes through the row dot above one block at a time, carrying the running sum, so the
 * arithmetic is the ggml tile's exactly (bit-identical results). */
#define SPEX_REF_TILE_R16(name, wtype, wty, xty, ROWDOT1)                                  \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,     \
                     size_t x_stride, int nx, float *y, size_t ldy) {                      \
        const int64_t nb = n / 32;                                                         \
        for (int j = 0; j < nx; j++) {                                                     \
            const xty *xr = (const xty *)((const uint8_t *)x + (size_t)j * x_stride);      \
            for (int i = 0; i < nw; i++) {                                                 \
                const uint8_t *g16 = (const uint8_t *)w + (size_t)(i / 16 * 16) * w_stride; \
                float acc = 0.0f;                                                          \
                for (int64_t b = 0; b < nb; b++) {                                         \
                    wty blk;                                                               \
                    spex_r16_get_block(wtype, g16, i % 16, b, &blk);                       \
                    acc = ROWDOT1(&blk, xr + b, 1, acc);                                   \
                }                                                                          \
                y[(size_t)j * ldy + (size_t)i] = acc;                                      \
            }                                                                              \
        }                                                                                  \
    }

SPEX_REF_TILE_R16(tile_q8_0_r16, SPEX_TYPE_Q8_0, block_q8_0, block_q8_0, dot_q8_0)
SPEX_REF_TILE_R16(tile_q4_0_r16, SPEX_TYPE_Q4_0, block_q4_0, block_q8_0, dot_q4_0)
SPEX_REF_TILE_R16(tile_q5_0_r16, SPEX_TYPE_Q5_0, block_q5_0, block_q8_0, dot_q5_0)
SPEX_REF_TILE_R16(tile_q4_1_r16, SPEX_TYPE_Q4_1, block_q4_1, block_q8_1, dot_q4_1)
SPEX_REF_TILE_R16(tile_q5_1_r16, SPEX_TYPE_Q5_1, block_q5_1, block_q8_1, dot_q5_1)

/* ---- activation converters (spex_act_quant_fn) ---------------------------- */

static void act_copy_f32(const float *x, void *dst, int64_t n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}
static void act_q8_0(const float *x, void *dst, int64_t n) {
    spex_quantize_row_q8_0_ref(x, (block_q8_0 *)dst, n);
}
static void act_q8_1(const float *x, void *dst, int64_t n) {
    spex_quantize_row_q8_1_ref(x, (block_q8_1 *)dst, n);
}

void spex_matmul_register_scalar(spex_matmul_kernels *k) {
    k->dot[SPEX_TYPE_F32] = tile_f32;
    k->dot[SPEX_TYPE_F16] = tile_f16;
    k->dot[SPEX_TYPE_BF16] = tile_bf16;
    k->dot[SPEX_TYPE_Q8_0] = tile_q8_0;
    k->dot[SPEX_TYPE_Q4_0] = tile_q4_0;
    k->dot[SPEX_TYPE_Q5_0] = tile_q5_0;
    k->dot[SPEX_TYPE_Q4_1] = tile_q4_1;
    k->dot[SPEX_TYPE_Q5_1] = tile_q5_1;
    k->dot_r16[SPEX_TYPE_Q8_0] = tile_q8_0_r16;
    k->dot_r16[SPEX_TYPE_Q4_0] = tile_q4_0_r16;
    k->dot_r16[SPEX_TYPE_Q5_0] = tile_q5_0_r16;
    k->dot_r16[SPEX_TYPE_Q4_1] = tile_q4_1_r16;
    k->dot_r16[SPEX_TYPE_Q5_1] = tile_q5_1_r16;
    k->act_quant[SPEX_TYPE_F32] = act_copy_f32;
    k->act_quant[SPEX_TYPE_Q8_0] = act_q8_0;
    k->act_quant[SPEX_TYPE_Q8_1] = act_q8_1;
}
