/*
 * blocks.h — the exact ggml block layouts of the quantized tensor types.
 *
 * These structs are the on-disk bytes of GGUF tensor data, so their sizes are checked at
 * compile time against ggml's (a mismatch would silently misread every llama.cpp file).
 * Legend: QK* = elements per block; d = scale (fp16 unless noted), m/dmin = minimum,
 * qs = low quant bits, qh = high quant bits, scales = packed sub-block scales.
 */
#ifndef SPEX_TENSOR_BLOCKS_H
#define SPEX_TENSOR_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#include "core/fp16.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { spex_fp16 d; uint8_t qs[QK4_0 / 2]; } block_q4_0;            /* x = d*(q-8)       */
typedef struct { spex_fp16 d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;         /* x = d*q + m       */
typedef struct { spex_fp16 d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;   /* x = d*(q-16) */
typedef struct { spex_fp16 d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { spex_fp16 d; int8_t qs[QK8_0]; } block_q8_0;                 /* x = d*q           */
typedef struct { spex_fp16 d, s; int8_t qs[QK8_1]; } block_q8_1;              /* s = d*sum(q)      */

/* K-quants: super-blocks of 256 in sub-blocks of 32 (q4_K, q5_K) or 16 (q6_K). */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; spex_fp16 d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; spex_fp16 d; } block_q3_K;
typedef struct { spex_fp16 d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { spex_fp16 d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; spex_fp16 d; } block_q6_K;
/* Activations for K-quant dot products: fp32 scale, and sums of each 16 quants. */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(block_q8_1) == 36, "q8_1 layout");
static_assert(sizeof(block_q2_K) == 84, "q2_K layout");
static_assert(sizeof(block_q3_K) == 110, "q3_K layout");
static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
static_assert(sizeof(block_q6_K) == 210, "q6_K layout");
static_assert(sizeof(block_q8_K) == 292, "q8_K layout");

#endif
