/*
 * fp16.h — exact scalar conversions between float and IEEE half / bfloat16.
 *
 * These are the reference conversions (round to nearest even, NaN kept NaN); SIMD
 * kernels use F16C / AVX-512 instructions that give the same bits. Header-only
 * because every kernel needs them inline.
 */
#ifndef SPEX_CORE_FP16_H
#define SPEX_CORE_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t spex_fp16;  /* IEEE 754 binary16 bits */
typedef uint16_t spex_bf16;  /* bfloat16 bits          */

static inline uint32_t spex_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float spex_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float spex_fp16_to_f32(spex_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return spex_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return spex_bits_f32(sign | 0x7f800000u | (man << 13));
    return spex_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline spex_fp16 spex_f32_to_fp16(float f) {
    uint32_t x = spex_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (spex_fp16)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) return (spex_fp16)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: round(|f| * 2^24) to nearest even */
        if (ax < 0x33000000u) return (spex_fp16)sign; /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 + (113 - e) - ... : bits to drop */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (spex_fp16)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 (in place) */
    uint32_t mant = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (mant & 1u))) mant++;
    return (spex_fp16)(sign | mant);
}

static inline float spex_bf16_to_f32(spex_bf16 h) { return spex_bits_f32((uint32_t)h << 16); }

static inline spex_bf16 spex_f32_to_bf16(float f) {
    uint32_t x = spex_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (spex_bf16)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (spex_bf16)(x >> 16);
}

#endif
