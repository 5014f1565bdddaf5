/*
 * amx.h — the AMX tile instructions and the per-thread tile configuration, for the AVX-512
 * kernel files that run matmuls on AMX-INT8 tiles where the CPU has them (for now
 * dot_kquants_avx512.c: R16 Q4_K, Q5_K and Q6_K from 9 or 12 activation rows).
 *
 * The instructions are inline assembly with memory clobbers: a tile load reads and a tile
 * store writes memory the compiler otherwise does not see (the compilers' own intrinsics
 * declare neither, so a buffer's vector stores could be moved past the tile load that reads
 * them). Tile numbers are literals. Callers run them only where spex_cpu_features.amx_int8
 * (the CPU has AMX-TILE and AMX-INT8 and the OS granted the process the tile state).
 */
#ifndef SPEX_CPU_X86_AVX512_AMX_H
#define SPEX_CPU_X86_AVX512_AMX_H

#include <stdint.h>

#ifdef SPEX_AMX_EMULATE
/* Tests only (tests/amx_emul.c): the same kernels with each tile instruction replaced by a
 * call to a C model of it, so their arithmetic is checked on CPUs without AMX too. */
void spex_amx_emul_load(int t, const void *base, long stride);
void spex_amx_emul_store(int t, void *base, long stride);
void spex_amx_emul_zero(int t);
void spex_amx_emul_dp(int c, int a, int b, int b_signed);
#define SPEX_AMX_LOAD(t, base, stride) spex_amx_emul_load(t, base, (long)(stride))
#define SPEX_AMX_STORE(t, base, stride) spex_amx_emul_store(t, base, (long)(stride))
#define SPEX_AMX_ZERO(t) spex_amx_emul_zero(t)
#define SPEX_AMX_DPBSUD(c, a, b) spex_amx_emul_dp(c, a, b, 0)
#define SPEX_AMX_DPBSSD(c, a, b) spex_amx_emul_dp(c, a, b, 1)
#define spex_amx_configure spex_amx_emul_configure
#else
#define SPEX_AMX_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((long)(stride)) : "memory")
#define SPEX_AMX_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((long)(stride)) : "memory")
#define SPEX_AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
/* c += a (s8) . b (u8), and a (s8) . b (s8) */
#define SPEX_AMX_DPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define SPEX_AMX_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif

/* Rows and bytes per row of tiles tmm0..7 (the rest of ldtilecfg's 64-byte operand is
 * filled in by spex_amx_configure). */
typedef struct {
    uint8_t rows[8];
    uint16_t colsb[8];
} spex_amx_shape;

/* Loads the shape on this thread unless the one loaded last here had the same key (keys > 0,
 * one per kernel and shape: ldtilecfg is not free, and a thread runs many calls of one
 * shape in a row). */
void spex_amx_configure(const spex_amx_shape *s, int key);

#endif
