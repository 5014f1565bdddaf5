/*
 * kquants_internal.h — the K-quant matmul kernels (Q4_K, Q5_K, Q6_K weights × Q8_K
 * activations) and the Q8_K activation quantizer, per ISA.
 *
 * What it is: the declarations behind the K-quant entries of the matmul tables
 * (matmul_kquants.c, called by matmul.c's table build), so tests can reach every variant
 * directly (AVX-512 with and without VNNI, and the AMX tiles, included).
 * What it is not: the driver or the table (src/cpu/matmul.h).
 *
 * Every dot function follows spex_dot_fn (matmul.h): a tile of nw weight rows × nx Q8_K
 * activation rows, y[j*ldy + i] = dot(W row i, X row j), any nw >= 1, nx >= 1, n a multiple
 * of 256. The scalar functions are the specification (ref/dot_kquants_ref.c). Each SIMD
 * kernel computes a given (weight row, activation row) output with one fixed sequence of
 * instructions whatever the tile's shape or the row's place in it, so its results do not
 * depend on how the driver tiles the matrix (tests check this bit for bit).
 * Every act_quant function writes exactly the bytes of spex_quantize_row_q8_K_ref.
 */
#ifndef SPEX_CPU_KQUANTS_INTERNAL_H
#define SPEX_CPU_KQUANTS_INTERNAL_H

#include "cpu/api.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/matmul.h"

/* Super-blocks summed in SIMD lanes before one horizontal sum is added to y. A constant,
 * so the float summation order of an output never depends on the tile. (The AVX-512
 * kernels keep weight rows in lanes and need no horizontal sum; their constants are
 * KQ_WSPAN and KQ6_SPAN in dot_kquants_avx512.c; SPEX_KQ_CHUNK is the AVX2 kernels'.) */
#define SPEX_KQ_CHUNK 8

#define SPEX_KQ_DOT_DECL(name)                                                            \
    void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,            \
              size_t x_stride, int nx, float *y, size_t ldy)

/* ---- scalar reference (ref/dot_kquants_ref.c) ---------------------------- */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_ref);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_ref);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_ref);
/* The same for weights in the R16 layout (cpu/matmul.h): nw a multiple of 16. */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_r16_ref);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_r16_ref);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_r16_ref);
/* spex_quantize_row_q8_K_ref behind the spex_act_quant_fn signature. */
void spex_act_quant_q8_K_ref(const float *x, void *dst, int64_t n);

#if defined(__x86_64__) || defined(__i386__)
/* ---- AVX2 + FMA (arch/x86/avx2/dot_kquants_avx2.c) ----------------------- */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_avx2);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_avx2);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_avx2);
void spex_act_quant_q8_K_avx2(const float *x, void *dst, int64_t n);
/* Q4_K / Q5_K / Q6_K at 256 bits with AVX-VNNI (arch/x86/avx2/dot_kquants_r16_avxvnni.c),
 * only where spex_cpu_features.avxvnni: the AVX-512 kernels' arithmetic lane for lane, so
 * bit-identical to spex_dot_q4_K_avx512 / q5 / q6 and their R16 forms; the ggml-layout
 * entries pack each unit on the fly. */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_avxvnni);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_avxvnni);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_avxvnni);
SPEX_KQ_DOT_DECL(spex_dot_q4_K_r16_avxvnni);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_r16_avxvnni);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_r16_avxvnni);

/* ---- AVX-512 F/BW/VL/DQ (arch/x86/avx512/dot_kquants_avx512.c) ----------- */
/* _vnni: vpdpbusd (AVX512_VNNI); the others use vpmaddubsw + vpmaddwd only. */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q4_K_avx512_vnni);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_avx512_vnni);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_avx512_vnni);
/* R16 layout (cpu/matmul.h): the same kernels with the per-super-block transpose replaced
 * by plain loads; bit-identical to the ggml-layout ones on the same rows. */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_r16_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_r16_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q4_K_r16_avx512_vnni);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_r16_avx512_vnni);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_r16_avx512);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_r16_avx512_vnni);
/* R16 Q4_K / Q5_K / Q6_K on AMX-INT8 tiles from 9 (Q6_K: 12) activation rows (fewer: the
 * VNNI kernel); bit-identical to spex_dot_q4_K_r16_avx512_vnni / q5 / q6. Only where
 * spex_cpu_features.amx_int8. */
SPEX_KQ_DOT_DECL(spex_dot_q4_K_r16_amx);
SPEX_KQ_DOT_DECL(spex_dot_q5_K_r16_amx);
SPEX_KQ_DOT_DECL(spex_dot_q6_K_r16_amx);
void spex_act_quant_q8_K_avx512(const float *x, void *dst, int64_t n);
#endif

/* Sets dot[Q4_K/Q5_K/Q6_K] and act_quant[Q8_K] for `isa`, with (vnni true) or without the
 * VNNI kernels for SPEX_ISA_AVX512 and SPEX_ISA_AVX2 (AVX-VNNI; ignored for other ISAs); matmul.c's table build calls it
 * with the table's features. An ISA without K-quant kernels of its own (NEON) leaves the
 * table untouched. */
void spex_matmul_register_kquants_variant(spex_matmul_kernels *k, spex_isa isa, bool vnni);
/* On an AVX-512 VNNI table: the AMX-INT8 R16 K-quant kernels (the caller checked amx_int8). */
void spex_matmul_register_kquants_amx(spex_matmul_kernels *k);

#endif
