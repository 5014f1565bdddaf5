/*
 * repack.c — the R16 weight layout: packing a ggml-layout matrix into it and reading single
 * blocks back (src/cpu/matmul.h describes the layout).
 *
 * What it is: plain C byte moves, run once per matrix at model load (and by the scalar
 * R16 kernels and the tests, one block at a time). What it is not: the kernels that read
 * the layout (ref/dot_kquants_ref.c, arch/x86/avx512/dot_kquants_avx512.c).
 */
#include "cpu/matmul.h"
#include "tensor/blocks.h"

#include <string.h>

#define R16 16

bool spex_r16_supported(spex_type t) { return t == SPEX_TYPE_Q4_K || t == SPEX_TYPE_Q5_K; }

static size_t block_bytes(spex_type t) { return t == SPEX_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K); }

void spex_r16_pack(spex_type t, const void *src, void *dst, int64_t n_out, int64_t n) {
    const size_t bs = block_bytes(t), W = bs / 4;
    const int64_t nb = n / QK_K;
    const size_t row = (size_t)nb * bs;
    for (int64_t g = 0; g + R16 <= n_out; g += R16) {
        const uint8_t *s = (const uint8_t *)src + (size_t)g * row;
        uint8_t *d = (uint8_t *)dst + (size_t)g * row;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *unit = d + (size_t)b * R16 * bs;
            for (int l = 0; l < R16; l++) {
                const uint8_t *blk = s + (size_t)l * row + (size_t)b * bs;
                for (size_t k = 0; k < W; k++) memcpy(unit + 4 * (k * R16 + (size_t)l), blk + 4 * k, 4);
            }
        }
    }
}

void spex_r16_get_block(spex_type t, const void *g16, int l, int64_t b, void *blk) {
    const size_t bs = block_bytes(t), W = bs / 4;
    const uint8_t *unit = (const uint8_t *)g16 + (size_t)b * R16 * bs;
    for (size_t k = 0; k < W; k++) memcpy((uint8_t *)blk + 4 * k, unit + 4 * (k * R16 + (size_t)l), 4);
}
