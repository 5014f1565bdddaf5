/*
 * gdn_avx512.c — AVX-512 variant of the Gated DeltaNet kernels (src/cpu/gdn.h): the body of
 * src/cpu/gdn_impl.h with its three hot helpers written in intrinsics.
 *
 * What it is: the recurrent token step on a column block (both passes over S with kv, err
 * and the output accumulator held in zmm registers across the Dk rows) and the chunked
 * form's multi-axpy y += Σ_r c_r x_r (y held in registers across r). What it is not: the
 * specification — that is the plain C body (gdn.c); tests/test_gdn.c checks this variant
 * against the float64 reference and for the same bit-identity properties.
 *
 * Dimension legend: Dk rows of S, jb columns of a block (<= JB), n columns of a multi-axpy,
 * cnt rows summed. Vectors are 16 floats; a partial last vector uses a mask (zeros are
 * loaded in the masked lanes and nothing is stored there), so every column goes through
 * the same instructions whatever its position: the per-element arithmetic is fixed by the
 * variant alone (FMA throughout), which is what batch independence needs.
 */
#include <immintrin.h>

#define GDN_VARIANT avx512
#define GDN_SIMD 1
/* 2 vectors. Measured (Dk = Dv = 128) faster than 64 columns: a verify batch with
 * snapshots reads one block and writes another per token, and 2 × Dk × 32 floats (32 KiB)
 * still fit L1 where 2 × 32 KiB do not. */
#define GDN_JB 32
#define AI __attribute__((always_inline)) inline

#include <stdint.h>

static AI __mmask16 tail16(int rem) { return (__mmask16)(rem >= 16 ? 0xffff : (1u << rem) - 1u); }

/* One token on a block of NV vectors (the last one masked by ml); src == dst in place. */
static AI void rec_tile(float *dst, const float *src, int64_t ld, int Dk, __mmask16 ml, const float *k,
                        const float *q, float scale, float decay, float beta, const float *v, float *o, const int NV) {
    __m512 kv[GDN_JB / 16], er[GDN_JB / 16], ac[GDN_JB / 16];
    const __m512 dv = _mm512_set1_ps(decay);
    for (int u = 0; u < NV; u++) kv[u] = _mm512_setzero_ps();
    for (int i = 0; i < Dk; i++) {
        const float *s = src + i * ld;
        float *d = dst + i * ld;
        const __m512 ki = _mm512_set1_ps(k[i]);
        for (int u = 0; u < NV; u++) {
            const __mmask16 m = u == NV - 1 ? ml : 0xffff;
            const __m512 x = _mm512_mul_ps(dv, _mm512_maskz_loadu_ps(m, s + 16 * u));
            _mm512_mask_storeu_ps(d + 16 * u, m, x);
            kv[u] = _mm512_fmadd_ps(ki, x, kv[u]);
        }
    }
    const __m512 bv = _mm512_set1_ps(beta);
    for (int u = 0; u < NV; u++) {
        const __mmask16 m = u == NV - 1 ? ml : 0xffff;
        er[u] = _mm512_mul_ps(bv, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, v + 16 * u), kv[u]));
        ac[u] = _mm512_setzero_ps();
    }
    for (int i = 0; i < Dk; i++) {
        float *d = dst + i * ld;
        const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i] * scale);
        for (int u = 0; u < NV; u++) {
            const __mmask16 m = u == NV - 1 ? ml : 0xffff;
            const __m512 x = _mm512_fmadd_ps(ki, er[u], _mm512_maskz_loadu_ps(m, d + 16 * u));
            _mm512_mask_storeu_ps(d + 16 * u, m, x);
            ac[u] = _mm512_fmadd_ps(qi, x, ac[u]);
        }
    }
    for (int u = 0; u < NV; u++) _mm512_mask_storeu_ps(o + 16 * u, u == NV - 1 ? ml : 0xffff, ac[u]);
}

static void gdn_rec_block(float *dst, const float *src, int64_t ld, int Dk, int jb, const float *k, const float *q,
                          float scale, float decay, float beta, const float *v, float *o) {
    const int nv = (jb + 15) / 16;
    const __mmask16 ml = tail16(jb - 16 * (nv - 1));
    switch (nv) {
    case 1: rec_tile(dst, src, ld, Dk, ml, k, q, scale, decay, beta, v, o, 1); break;
    default: rec_tile(dst, src, ld, Dk, ml, k, q, scale, decay, beta, v, o, 2); break;
    }
}

/* ---- multi-axpy: tiles of up to 8 vectors (128 floats) of y in registers ---- */

#define MT 8

static AI void maxpy_tile(float *y, const float *x, int64_t ldx, const float *c, int cnt, __mmask16 ml,
                          const int NV) {
    __m512 acc[MT];
    for (int u = 0; u < NV; u++) acc[u] = _mm512_maskz_loadu_ps(u == NV - 1 ? ml : 0xffff, y + 16 * u);
    for (int r = 0; r < cnt; r++) {
        const float *xr = x + r * ldx;
        const __m512 cr = _mm512_set1_ps(c[r]);
        for (int u = 0; u < NV; u++)
            acc[u] = _mm512_fmadd_ps(cr, _mm512_maskz_loadu_ps(u == NV - 1 ? ml : 0xffff, xr + 16 * u), acc[u]);
    }
    for (int u = 0; u < NV; u++) _mm512_mask_storeu_ps(y + 16 * u, u == NV - 1 ? ml : 0xffff, acc[u]);
}

static AI void maxpy2_tile(float *y1, float *y2, const float *x, int64_t ldx, const float *c1, const float *c2,
                           int cnt, __mmask16 ml, const int NV) {
    __m512 a1[MT], a2[MT];
    for (int u = 0; u < NV; u++) {
        const __mmask16 m = u == NV - 1 ? ml : 0xffff;
        a1[u] = _mm512_maskz_loadu_ps(m, y1 + 16 * u);
        a2[u] = _mm512_maskz_loadu_ps(m, y2 + 16 * u);
    }
    for (int r = 0; r < cnt; r++) {
        const float *xr = x + r * ldx;
        const __m512 b1 = _mm512_set1_ps(c1[r]), b2 = _mm512_set1_ps(c2[r]);
        for (int u = 0; u < NV; u++) {
            const __m512 xv = _mm512_maskz_loadu_ps(u == NV - 1 ? ml : 0xffff, xr + 16 * u);
            a1[u] = _mm512_fnmadd_ps(b1, xv, a1[u]);
            a2[u] = _mm512_fmadd_ps(b2, xv, a2[u]);
        }
    }
    for (int u = 0; u < NV; u++) {
        const __mmask16 m = u == NV - 1 ? ml : 0xffff;
        _mm512_mask_storeu_ps(y1 + 16 * u, m, a1[u]);
        _mm512_mask_storeu_ps(y2 + 16 * u, m, a2[u]);
    }
}

#define TILE_SWITCH(nv, CALL)          \
    switch (nv) {                      \
    case 1: CALL(1); break;            \
    case 2: CALL(2); break;            \
    case 3: CALL(3); break;            \
    case 4: CALL(4); break;            \
    case 5: CALL(5); break;            \
    case 6: CALL(6); break;            \
    case 7: CALL(7); break;            \
    default: CALL(8); break;           \
    }

static void gdn_maxpy(float *y, int n, const float *x, int64_t ldx, const float *c, int cnt) {
    for (int j = 0; j < n; j += 16 * MT) {
        const int rem = n - j < 16 * MT ? n - j : 16 * MT, nv = (rem + 15) / 16;
        const __mmask16 ml = tail16(rem - 16 * (nv - 1));
#define CALL(NV) maxpy_tile(y + j, x + j, ldx, c, cnt, ml, NV)
        TILE_SWITCH(nv, CALL)
#undef CALL
    }
}

static void gdn_maxpy2(float *y1, float *y2, int n, const float *x, int64_t ldx, const float *c1, const float *c2,
                       int cnt) {
    for (int j = 0; j < n; j += 16 * MT) {
        const int rem = n - j < 16 * MT ? n - j : 16 * MT, nv = (rem + 15) / 16;
        const __mmask16 ml = tail16(rem - 16 * (nv - 1));
#define CALL(NV) maxpy2_tile(y1 + j, y2 + j, x + j, ldx, c1, c2, cnt, ml, NV)
        TILE_SWITCH(nv, CALL)
#undef CALL
    }
}

#include "cpu/gdn_impl.h"
