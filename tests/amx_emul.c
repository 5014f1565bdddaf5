/*
 * amx_emul.c — the AMX tile kernels of src/cpu/arch/x86/avx512/dot_kquants_avx512.c built a
 * second time with SPEX_AMX_EMULATE (amx.h), which turns every tile instruction into a call
 * to the C model below, and their entry points renamed so they sit beside the library's.
 *
 * The model follows the instructions' definitions (Intel SDM, AMX): a tile is up to 16 rows
 * of up to 64 bytes with the shape of the last configuration; tileloadd reads the configured
 * rows × bytes at a stride and zeroes the rest; tdpbsud / tdpbssd add to C[m][n] (int32,
 * wrapping) the sum over k < K/4 and i < 4 of A[m][4k+i] (s8) × B[k][4n+i] (u8 / s8), with
 * K = A's bytes per row, and require C's rows = A's rows, B's rows = K / 4 and C's bytes =
 * B's bytes. A shape that breaks this fails the test (the hardware would fault).
 * Compiled with the AVX-512 flags (Makefile); elsewhere it is an empty stand-in.
 */
#include "amx_emul.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spex.h"
#include "cpu/api.h"

/* Each renamed: the file's other functions would clash with the library's. */
#define spex_act_quant_q8_K_avx512 emul_act_quant_q8_K_avx512
#define spex_dot_q4_K_avx512 emul_dot_q4_K_avx512
#define spex_dot_q4_K_avx512_vnni emul_dot_q4_K_avx512_vnni
#define spex_dot_q4_K_r16_amx emul_dot_q4_K_r16_amx
#define spex_dot_q4_K_r16_avx512 emul_dot_q4_K_r16_avx512
#define spex_dot_q4_K_r16_avx512_vnni emul_dot_q4_K_r16_avx512_vnni
#define spex_dot_q5_K_avx512 emul_dot_q5_K_avx512
#define spex_dot_q5_K_avx512_vnni emul_dot_q5_K_avx512_vnni
#define spex_dot_q5_K_r16_amx emul_dot_q5_K_r16_amx
#define spex_dot_q5_K_r16_avx512 emul_dot_q5_K_r16_avx512
#define spex_dot_q5_K_r16_avx512_vnni emul_dot_q5_K_r16_avx512_vnni
#define spex_dot_q6_K_avx512 emul_dot_q6_K_avx512
#define spex_dot_q6_K_avx512_vnni emul_dot_q6_K_avx512_vnni
#define spex_dot_q6_K_r16_amx emul_dot_q6_K_r16_amx
#define spex_dot_q6_K_r16_avx512 emul_dot_q6_K_r16_avx512
#define spex_dot_q6_K_r16_avx512_vnni emul_dot_q6_K_r16_avx512_vnni
#define SPEX_AMX_EMULATE 1
#include "cpu/arch/x86/avx512/dot_kquants_avx512.c"

typedef struct {
    int rows, colsb;
    uint8_t b[16][64];
} emul_tile;

static _Thread_local emul_tile g_tile[8];
static _Thread_local bool g_configured;

static void emul_fail(const char *what, int t) {
    fprintf(stderr, "amx_emul: %s (tile %d)\n", what, t);
    abort();
}

void spex_amx_emul_configure(const spex_amx_shape *s, int key) {
    (void)key;
    for (int t = 0; t < 8; t++) {
        if (s->rows[t] > 16 || s->colsb[t] > 64) emul_fail("shape larger than 16 x 64", t);
        g_tile[t].rows = s->rows[t];
        g_tile[t].colsb = s->colsb[t];
        memset(g_tile[t].b, 0, sizeof g_tile[t].b);
    }
    g_configured = true;
}

static emul_tile *emul_get(int t) {
    if (!g_configured) emul_fail("tile used before the configuration", t);
    if (t < 0 || t > 7) emul_fail("no such tile", t);
    return &g_tile[t];
}

void spex_amx_emul_load(int t, const void *base, long stride) {
    emul_tile *x = emul_get(t);
    memset(x->b, 0, sizeof x->b);
    for (int r = 0; r < x->rows; r++) memcpy(x->b[r], (const uint8_t *)base + r * stride, (size_t)x->colsb);
}

void spex_amx_emul_store(int t, void *base, long stride) {
    const emul_tile *x = emul_get(t);
    for (int r = 0; r < x->rows; r++) memcpy((uint8_t *)base + r * stride, x->b[r], (size_t)x->colsb);
}

void spex_amx_emul_zero(int t) { memset(emul_get(t)->b, 0, sizeof g_tile[0].b); }

void spex_amx_emul_dp(int c, int a, int b, int b_signed) {
    emul_tile *C = emul_get(c);
    const emul_tile *A = emul_get(a), *B = emul_get(b);
    if (C->rows != A->rows || B->rows * 4 != A->colsb || C->colsb != B->colsb || A->colsb % 4 || C->colsb % 4)
        emul_fail("tile shapes do not fit the product", c);
    for (int m = 0; m < C->rows; m++)
        for (int n = 0; n < C->colsb / 4; n++) {
            uint32_t acc;
            memcpy(&acc, &C->b[m][4 * n], 4);
            for (int k = 0; k < B->rows; k++)
                for (int i = 0; i < 4; i++) {
                    const int32_t av = (int8_t)A->b[m][4 * k + i];
                    const int32_t bv = b_signed ? (int32_t)(int8_t)B->b[k][4 * n + i] : (int32_t)B->b[k][4 * n + i];
                    acc += (uint32_t)(av * bv);
                }
            memcpy(&C->b[m][4 * n], &acc, 4);
        }
}

bool spex_amx_emul_kernels(spex_amx_emul_fn out[3]) {
    const spex_cpu_features *f = spex_cpu_get_features();
    if (!(f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni))
        return false;
    out[0] = emul_dot_q4_K_r16_amx;
    out[1] = emul_dot_q5_K_r16_amx;
    out[2] = emul_dot_q6_K_r16_amx;
    return true;
}

#else
bool spex_amx_emul_kernels(spex_amx_emul_fn out[3]) {
    (void)out;
    return false;
}
#endif
