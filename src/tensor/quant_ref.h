/*
 * quant_ref.h — per-type scalar reference quantize / dequantize (the specification of
 * every tensor format spex reads or writes), for kernels and tools that know the type.
 *
 * What it is: one function pair per type, named spex_quantize_row_<type>_ref and
 * spex_dequantize_row_<type>_ref, with ggml's algorithms (ggml-quants.c *_ref), so that
 * files spex quantizes hold the same bytes llama.cpp's quantizer (without an importance
 * matrix) would write, and every SIMD kernel has a bit-exact twin to be tested against.
 * What it is not: fast. The dispatching, argument-checking entry points are
 * spex_quantize_row_ref / spex_dequantize_row_ref in include/spex.h.
 *
 * Contract of every function below: n is the number of floats and must be a multiple of
 * the type's block size (the per-type functions do not check it: they process n / QK
 * whole blocks and ignore a remainder; the spex.h entry points reject such an n). Source
 * and destination must not overlap. NaN/Inf input never crashes or invokes undefined
 * behaviour; its output is defined but unspecified. An all-zero block quantizes to a block
 * that dequantizes to zeros.
 *
 * Dequantized values follow ggml's exact float expressions (same operation order, no FMA
 * contraction), so a kernel that needs bit-exact results can reproduce them.
 */
#ifndef SPEX_TENSOR_QUANT_REF_H
#define SPEX_TENSOR_QUANT_REF_H

#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "tensor/blocks.h"

/* ---- float types -------------------------------------------------------- */

void spex_quantize_row_f16_ref(const float *x, spex_fp16 *y, int64_t n);
void spex_dequantize_row_f16_ref(const spex_fp16 *x, float *y, int64_t n);
void spex_quantize_row_bf16_ref(const float *x, spex_bf16 *y, int64_t n);
void spex_dequantize_row_bf16_ref(const spex_bf16 *x, float *y, int64_t n);

/* ---- 32-element blocks (quant_ref.c) ----------------------------------- */

void spex_quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n);
void spex_dequantize_row_q4_0_ref(const block_q4_0 *x, float *y, int64_t n);
void spex_quantize_row_q4_1_ref(const float *x, block_q4_1 *y, int64_t n);
void spex_dequantize_row_q4_1_ref(const block_q4_1 *x, float *y, int64_t n);
void spex_quantize_row_q5_0_ref(const float *x, block_q5_0 *y, int64_t n);
void spex_dequantize_row_q5_0_ref(const block_q5_0 *x, float *y, int64_t n);
void spex_quantize_row_q5_1_ref(const float *x, block_q5_1 *y, int64_t n);
void spex_dequantize_row_q5_1_ref(const block_q5_1 *x, float *y, int64_t n);
void spex_quantize_row_q8_0_ref(const float *x, block_q8_0 *y, int64_t n);
void spex_dequantize_row_q8_0_ref(const block_q8_0 *x, float *y, int64_t n);
/* Q8_1 also stores s = d * sum(q) (as fp16), which Q4_1/Q5_1 dot products use for the min. */
void spex_quantize_row_q8_1_ref(const float *x, block_q8_1 *y, int64_t n);
void spex_dequantize_row_q8_1_ref(const block_q8_1 *x, float *y, int64_t n);

/* ---- 256-element super-blocks (quant_ref_k.c) --------------------------- */

void spex_quantize_row_q4_K_ref(const float *x, block_q4_K *y, int64_t n);
void spex_dequantize_row_q4_K_ref(const block_q4_K *x, float *y, int64_t n);
void spex_quantize_row_q5_K_ref(const float *x, block_q5_K *y, int64_t n);
void spex_dequantize_row_q5_K_ref(const block_q5_K *x, float *y, int64_t n);
void spex_quantize_row_q6_K_ref(const float *x, block_q6_K *y, int64_t n);
void spex_dequantize_row_q6_K_ref(const block_q6_K *x, float *y, int64_t n);
/* Q8_K: fp32 scale. With max the element of largest magnitude (its sign kept),
 * iscale = -127/max, q = min(127, nearest_int(iscale*x)) (so max itself maps to -127),
 * d = 1/iscale, bsums[i] = sum of q[16i .. 16i+15]. */
void spex_quantize_row_q8_K_ref(const float *x, block_q8_K *y, int64_t n);
void spex_dequantize_row_q8_K_ref(const block_q8_K *x, float *y, int64_t n);

/* ---- helpers shared with kernels ---------------------------------------- */

/* ggml's nearest_int: round to nearest, ties to even, by adding 1.5*2^23 (valid for
 * |f| <= 2^22; outside that range, and for NaN, the result is some int, never UB). */
static inline int spex_nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (int)((i & 0x007fffff) - 0x00400000);
}

/* Q4_K/Q5_K packed scales: 8 sub-blocks, each a 6-bit scale and a 6-bit min, in 12 bytes.
 *   bytes 0..3:  scale[j]  (low 6 bits) | bits 4..5 of scale[j+4] in the top 2 bits
 *   bytes 4..7:  min[j]    (low 6 bits) | bits 4..5 of min[j+4]   in the top 2 bits
 *   bytes 8..11: low 4 bits of scale[j+4] | low 4 bits of min[j+4] << 4
 * (j = 0..3). spex_kq_get_scale_min reads sub-block j (0..7). */
static inline void spex_kq_get_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* Inverse of the above; sc and m are taken modulo 64. */
void spex_kq_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t q[K_SCALE_SIZE]);

#endif
