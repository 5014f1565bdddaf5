/*
 * repack.c — the R16 weight layout: packing a ggml-layout matrix into it and reading single
 * blocks back (src/cpu/matmul.h describes the layout).
 *
 * What it is: plain C byte moves, run once per matrix at model load (and by the scalar
 * R16 kernels and the tests, one block at a time). What it is not: the kernels that read
 * the layout (ref/dot_kquants_ref.c, ref/dot_ref.c, arch/x86/avx512/dot_*avx512.c).
 *
 * A block is cut into fields (the unit stores field f of the 16 rows one after the other):
 * Q4_K and Q5_K into 32-bit words (their blocks are whole words; the header's d/dmin pair and
 * scale bytes are words too), Q6_K into its 52 words and the trailing fp16 d, the 32-element
 * types into their fp16 scale (and min), the 32 fifth bits, and the code bytes as words (16
 * bytes of nibbles, four words; Q8_0's 32 bytes, eight).
 */
#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "tensor/api.h"

#include <string.h>

#define R16 16

/* Field sizes of one block of type t, in order (0-terminated); NULL if t has no R16 layout. */
static const uint8_t *fields(spex_type t, size_t *bsize) {
    static const uint8_t words36[37] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                        4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0};
    static const uint8_t words44[45] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                        4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0};
    /* Q6_K: ql (32 words), qh (16), the scale bytes (4), then the fp16 d */
    static const uint8_t q6_K[54] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                     4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2, 0};
    static const uint8_t q8_0[] = {2, 4, 4, 4, 4, 4, 4, 4, 4, 0}; /* d | qs      */
    static const uint8_t q4_0[] = {2, 4, 4, 4, 4, 0};       /* d | qs              */
    static const uint8_t q4_1[] = {2, 2, 4, 4, 4, 4, 0};    /* d | m | qs          */
    static const uint8_t q5_0[] = {2, 4, 4, 4, 4, 4, 0};    /* d | qh | qs         */
    static const uint8_t q5_1[] = {2, 2, 4, 4, 4, 4, 4, 0}; /* d | m | qh | qs     */
    switch (t) {
    case SPEX_TYPE_Q4_K: *bsize = sizeof(block_q4_K); return words36;
    case SPEX_TYPE_Q5_K: *bsize = sizeof(block_q5_K); return words44;
    case SPEX_TYPE_Q6_K: *bsize = sizeof(block_q6_K); return q6_K;
    case SPEX_TYPE_Q8_0: *bsize = sizeof(block_q8_0); return q8_0;
    case SPEX_TYPE_Q4_0: *bsize = sizeof(block_q4_0); return q4_0;
    case SPEX_TYPE_Q4_1: *bsize = sizeof(block_q4_1); return q4_1;
    case SPEX_TYPE_Q5_0: *bsize = sizeof(block_q5_0); return q5_0;
    case SPEX_TYPE_Q5_1: *bsize = sizeof(block_q5_1); return q5_1;
    default: return NULL;
    }
}

bool spex_r16_supported(spex_type t) {
    size_t bs;
    return fields(t, &bs) != NULL;
}

/* Copies lane l of an R16 unit back into one block in the ggml layout (blk). */
static void block_from_unit(const uint8_t *f, const uint8_t *unit, int l, uint8_t *blk) {
    size_t uo = 0, bo = 0;
    for (; *f; f++) {
        const uint8_t *u = unit + uo + (size_t)l * *f;
        /* constant sizes, so each copy is one move rather than a library call */
        if (*f == 4) memcpy(blk + bo, u, 4);
        else memcpy(blk + bo, u, 2);
        uo += (size_t)R16 * *f;
        bo += *f;
    }
}

void spex_r16_pack(spex_type t, const void *src, void *dst, int64_t n_out, int64_t n) {
    size_t bs;
    const uint8_t *f = fields(t, &bs);
    if (!f) return;
    const int64_t nb = n / spex_type_get_info((int)t)->block_size;
    const size_t row = (size_t)nb * bs;
    for (int64_t g = 0; g + R16 <= n_out; g += R16) {
        const uint8_t *s = (const uint8_t *)src + (size_t)g * row;
        uint8_t *d = (uint8_t *)dst + (size_t)g * row;
        for (int64_t b = 0; b < nb; b++) {
            /* field by field, the 16 rows' copies of a field one after the other: the unit is
             * written front to back, with constant-size moves (a variable-size memcpy per field
             * was a library call each: 2.2-2.9 s to pack a 637 MB Q8_0 model, now 0.5 s) */
            uint8_t *u = d + (size_t)b * R16 * bs;
            const uint8_t *blk = s + (size_t)b * bs;
            for (const uint8_t *fp = f; *fp; fp++) {
                if (*fp == 4)
                    for (int l = 0; l < R16; l++) memcpy(u + 4 * l, blk + (size_t)l * row, 4);
                else
                    for (int l = 0; l < R16; l++) memcpy(u + 2 * l, blk + (size_t)l * row, 2);
                u += (size_t)R16 * *fp;
                blk += *fp;
            }
        }
    }
}

void spex_r16_get_block(spex_type t, const void *g16, int l, int64_t b, void *blk) {
    size_t bs;
    const uint8_t *f = fields(t, &bs);
    if (!f) return;
    block_from_unit(f, (const uint8_t *)g16 + (size_t)b * R16 * bs, l, (uint8_t *)blk);
}
