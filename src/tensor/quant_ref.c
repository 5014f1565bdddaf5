/*
 * quant_ref.c — scalar reference quantize/dequantize of the float types and the 32-element
 * block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1), and the type-dispatching entry points
 * spex_quantize_row_ref / spex_dequantize_row_ref of include/spex.h.
 *
 * This file is the specification of those formats in spex. It follows ggml's reference
 * algorithms (ggml-quants.c, quantize_row_*_ref and dequantize_row_*), which are also what
 * llama.cpp's quantizer uses when no importance matrix is given, so spex writes the same
 * bytes. Bit layouts: src/tensor/blocks.h. The K-quants are in quant_ref_k.c.
 * It is not fast and not meant to be; SIMD kernels are tested against it.
 *
 * Rounding rules (they are part of the format, an independent implementation must match):
 *  - the scale is computed in fp32 and stored rounded to fp16 (round to nearest even), but
 *    the quants are computed with the unrounded fp32 inverse scale id = 1/d (d == 0: id = 0);
 *  - Q4_0/Q4_1/Q5_0/Q5_1 round by truncating (v + 0.5) (v + 8.5, v + 16.5 for the signed
 *    ones; the addition is an fp32 addition), then clamp to the top code;
 *  - Q8_0/Q8_1 round half away from zero (roundf);
 *  - the element chosen as "max" for the signed 4/5-bit types is the first one of largest
 *    magnitude, with its sign, so that it maps to code 0 (-8 or -16) exactly.
 * Float-to-int conversions go through helpers that clamp first: ggml's plain casts are
 * undefined for NaN, and spex must not misbehave on such input (any defined output will do).
 */
#include "tensor/quant_ref.h"
#include "tensor/api.h"

#include <math.h>
#include <string.h>

#include "spex.h"

/* The dequantized values are specified as ggml's separate multiply and add; a fused
 * multiply-add would change the last bit. GCC in ISO C mode does not contract; clang would. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* (int)v with v clamped to [lo, hi] first; NaN gives lo. Equal to a C cast for v in range. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(v) clamped to [lo, hi]; NaN gives 0. */
static inline int round_clamp(float v, int lo, int hi) {
    if (v != v) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)roundf(v);
}

/* The first element of largest magnitude, sign kept (0 for an all-zero or all-NaN block). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *min_out, float *max_out) {
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < n; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

/* The 5-bit types keep bit 4 of element j in bit j of a little-endian uint32 (qh[4]). */
static void store_qh(uint8_t qh[4], uint32_t bits) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(bits >> (8 * k));
}
static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* ======================================================================== */
/* F16, BF16                                                                 */
/* ======================================================================== */

void spex_quantize_row_f16_ref(const float *x, spex_fp16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = spex_f32_to_fp16(x[i]);
}

void spex_dequantize_row_f16_ref(const spex_fp16 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = spex_fp16_to_f32(x[i]);
}

void spex_quantize_row_bf16_ref(const float *x, spex_bf16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = spex_f32_to_bf16(x[i]);
}

void spex_dequantize_row_bf16_ref(const spex_bf16 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = spex_bf16_to_f32(x[i]);
}

/* ======================================================================== */
/* Q4_0: x = d * (q - 8), q in 0..15; element j in the low nibble of qs[j], j+16 high   */
/* ======================================================================== */

void spex_quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n) {
    const int64_t nb = n / QK4_0;
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        /* d = max / -8 maps the extreme element to code 0 and lets the other sign reach +7 */
        const float d = signed_absmax(x, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = trunc_clamp(x[j] * id + 8.5f, 0, 15);
            const int q1 = trunc_clamp(x[j + QK4_0 / 2] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void spex_dequantize_row_q4_0_ref(const block_q4_0 *x, float *y, int64_t n) {
    const int64_t nb = n / QK4_0;
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = spex_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0x0f) - 8) * d;
            y[j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ======================================================================== */
/* Q4_1: x = d * q + m, q in 0..15 (m = block minimum)                       */
/* ======================================================================== */

void spex_quantize_row_q4_1_ref(const float *x, block_q4_1 *y, int64_t n) {
    const int64_t nb = n / QK4_1;
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float min, max;
        min_max(x, QK4_1, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        y[i].m = spex_f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 15);
            const int q1 = trunc_clamp((x[j + QK4_1 / 2] - min) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void spex_dequantize_row_q4_1_ref(const block_q4_1 *x, float *y, int64_t n) {
    const int64_t nb = n / QK4_1;
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        const float d = spex_fp16_to_f32(x[i].d);
        const float m = spex_fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ======================================================================== */
/* Q5_0: x = d * (q - 16), q in 0..31: low 4 bits as in Q4_0, bit 4 of element j in qh bit j */
/* ======================================================================== */

void spex_quantize_row_q5_0_ref(const float *x, block_q5_0 *y, int64_t n) {
    const int64_t nb = n / QK5_0;
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = trunc_clamp(x[j] * id + 16.5f, 0, 31);
            const int q1 = trunc_clamp(x[j + QK5_0 / 2] * id + 16.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void spex_dequantize_row_q5_0_ref(const block_q5_0 *x, float *y, int64_t n) {
    const int64_t nb = n / QK5_0;
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        const float d = spex_fp16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4;
            const int h1 = (int)((qh >> (j + QK5_0 / 2)) & 1u) << 4;
            y[j] = (float)(((x[i].qs[j] & 0x0f) | h0) - 16) * d;
            y[j + QK5_0 / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

/* ======================================================================== */
/* Q5_1: x = d * q + m, q in 0..31, bits laid out as Q5_0                    */
/* ======================================================================== */

void spex_quantize_row_q5_1_ref(const float *x, block_q5_1 *y, int64_t n) {
    const int64_t nb = n / QK5_1;
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        float min, max;
        min_max(x, QK5_1, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        y[i].m = spex_f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 31);
            const int q1 = trunc_clamp((x[j + QK5_1 / 2] - min) * id + 0.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_1 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void spex_dequantize_row_q5_1_ref(const block_q5_1 *x, float *y, int64_t n) {
    const int64_t nb = n / QK5_1;
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        const float d = spex_fp16_to_f32(x[i].d);
        const float m = spex_fp16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4;
            const int h1 = (int)((qh >> (j + QK5_1 / 2)) & 1u) << 4;
            y[j] = (float)((x[i].qs[j] & 0x0f) | h0) * d + m;
            y[j + QK5_1 / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

/* ======================================================================== */
/* Q8_0: x = d * q, q in -127..127, d = absmax / 127                         */
/* ======================================================================== */

/* max(|x|) with ggml's MAX(a, b) = a > b ? a : b (a NaN is forgotten by the next element). */
static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    return amax;
}

void spex_quantize_row_q8_0_ref(const float *x, block_q8_0 *y, int64_t n) {
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        const float d = absmax(x, QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)round_clamp(x[j] * id, -127, 127);
    }
}

void spex_dequantize_row_q8_0_ref(const block_q8_0 *x, float *y, int64_t n) {
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = spex_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* ======================================================================== */
/* Q8_1: Q8_0 plus s = fp16(d * sum(q)) (d unrounded fp32, as ggml)           */
/* ======================================================================== */

void spex_quantize_row_q8_1_ref(const float *x, block_q8_1 *y, int64_t n) {
    const int64_t nb = n / QK8_1;
    for (int64_t i = 0; i < nb; i++, x += QK8_1) {
        const float d = absmax(x, QK8_1) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = spex_f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)round_clamp(x[j] * id, -127, 127);
            sum += y[i].qs[j];
        }
        y[i].s = spex_f32_to_fp16((float)sum * d);
    }
}

void spex_dequantize_row_q8_1_ref(const block_q8_1 *x, float *y, int64_t n) {
    const int64_t nb = n / QK8_1;
    for (int64_t i = 0; i < nb; i++, y += QK8_1) {
        const float d = spex_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* ======================================================================== */
/* Dispatch (include/spex.h)                                                 */
/* ======================================================================== */

static spex_status check_args(spex_type type, const void *src, const void *dst, int64_t n) {
    const spex_type_info *ti = spex_type_get_info((int)type);
    if (!ti || !ti->has_ref) return SPEX_ERR_UNSUPPORTED;
    if (n < 0 || n % ti->block_size != 0) return SPEX_ERR_INVALID_ARG;
    if (n > 0 && (!src || !dst)) return SPEX_ERR_INVALID_ARG;
    return SPEX_OK;
}

spex_status spex_quantize_row_ref(spex_type type, const float *src, void *dst, int64_t n) {
    spex_status st = check_args(type, src, dst, n);
    if (st != SPEX_OK || n == 0) return st;
    switch (type) {
    case SPEX_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case SPEX_TYPE_F16: spex_quantize_row_f16_ref(src, dst, n); break;
    case SPEX_TYPE_BF16: spex_quantize_row_bf16_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_0: spex_quantize_row_q4_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_1: spex_quantize_row_q4_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_0: spex_quantize_row_q5_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_1: spex_quantize_row_q5_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_0: spex_quantize_row_q8_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_1: spex_quantize_row_q8_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_K: spex_quantize_row_q4_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_K: spex_quantize_row_q5_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q6_K: spex_quantize_row_q6_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_K: spex_quantize_row_q8_K_ref(src, dst, n); break;
    default: return SPEX_ERR_UNSUPPORTED;
    }
    return SPEX_OK;
}

spex_status spex_dequantize_row_ref(spex_type type, const void *src, float *dst, int64_t n) {
    spex_status st = check_args(type, src, dst, n);
    if (st != SPEX_OK || n == 0) return st;
    switch (type) {
    case SPEX_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case SPEX_TYPE_F16: spex_dequantize_row_f16_ref(src, dst, n); break;
    case SPEX_TYPE_BF16: spex_dequantize_row_bf16_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_0: spex_dequantize_row_q4_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_1: spex_dequantize_row_q4_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_0: spex_dequantize_row_q5_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_1: spex_dequantize_row_q5_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_0: spex_dequantize_row_q8_0_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_1: spex_dequantize_row_q8_1_ref(src, dst, n); break;
    case SPEX_TYPE_Q4_K: spex_dequantize_row_q4_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q5_K: spex_dequantize_row_q5_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q6_K: spex_dequantize_row_q6_K_ref(src, dst, n); break;
    case SPEX_TYPE_Q8_K: spex_dequantize_row_q8_K_ref(src, dst, n); break;
    default: return SPEX_ERR_UNSUPPORTED;
    }
    return SPEX_OK;
}
