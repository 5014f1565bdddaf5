/*
 * amx_emul.h — the AMX-INT8 K-quant kernels built against a C model of the tile
 * instructions (tests/amx_emul.c), for the tests: their bits are checked on CPUs without
 * AMX as well as with it.
 */
#ifndef SPEX_TESTS_AMX_EMUL_H
#define SPEX_TESTS_AMX_EMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* spex_dot_fn's signature (cpu/matmul.h). */
typedef void (*spex_amx_emul_fn)(int64_t n, const void *w, size_t w_stride, int nw, const void *x, size_t x_stride,
                                 int nx, float *y, size_t ldy);

/* The emulated twins of spex_dot_q4_K_r16_amx, q5_K, q6_K (index 0, 1, 2); false where the
 * CPU cannot run the kernels' AVX-512 VNNI parts (or the build is not x86-64). */
bool spex_amx_emul_kernels(spex_amx_emul_fn out[3]);

#endif
