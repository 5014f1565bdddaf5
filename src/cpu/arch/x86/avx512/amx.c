/*
 * amx.c — the per-thread AMX tile configuration shared by the AVX-512 kernel files (amx.h).
 */
#include "cpu/arch/x86/avx512/amx.h"

#include <string.h>

static _Thread_local int g_key; /* key of the configuration loaded on this thread (0: none) */

void spex_amx_configure(const spex_amx_shape *s, int key) {
    if (g_key == key) return;
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = s->rows[t];
        c.colsb[t] = s->colsb[t];
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c));
    g_key = key;
}
