/*
 * gdn_avx2.c — AVX2+FMA variant of the Gated DeltaNet kernels (src/cpu/gdn.h): the body of
 * src/cpu/gdn_impl.h with its three hot helpers written in intrinsics.
 *
 * What it is: the recurrent token step on a column block (both passes over S with kv, err
 * and the output accumulator held in ymm registers across the Dk rows) and the chunked
 * form's multi-axpy y += Σ_r c_r x_r (y held in registers across r). What it is not: the
 * specification — that is the plain C body (gdn.c); tests/test_gdn.c checks this variant
 * against the float64 reference and for the same bit-identity properties.
 *
 * Dimension legend: Dk rows of S, jb columns of a block (<= JB), n columns of a multi-axpy,
 * cnt rows summed. Vectors are 8 floats; a partial last vector uses vmaskmov (zeros are
 * loaded in the masked lanes and nothing is stored there), so every column goes through
 * the same instructions whatever its position: the per-element arithmetic is fixed by the
 * variant alone (FMA throughout), which is what batch independence needs.
 */
#include <immintrin.h>

#define GDN_VARIANT avx2
#define GDN_SIMD 1
#define GDN_JB 32 /* 4 vectors: kv/err/acc in 12 ymm of 16; Dk × 32 floats (16 KiB at Dk = 128) */
#define AI __attribute__((always_inline)) inline

#include <stdbool.h>
#include <stdint.h>

/* Lanes [0, rem) of the last vector; the full mask when rem >= 8. */
static AI __m256i tail8(int rem) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Loads/stores of vector u of NV: only a partial last vector (part) goes through vmaskmov. */
#define LD(p, u) ((part && (u) == NV - 1) ? _mm256_maskload_ps((p) + 8 * (u), ml) : _mm256_loadu_ps((p) + 8 * (u)))
#define ST(p, u, x)                                                                            \
    do {                                                                                       \
        if (part && (u) == NV - 1) _mm256_maskstore_ps((p) + 8 * (u), ml, (x));                \
        else _mm256_storeu_ps((p) + 8 * (u), (x));                                             \
    } while (0)

/* One token on a block of NV vectors (the last one masked by ml when part); src == dst in
 * place. */
static AI void rec_tile(float *dst, const float *src, int64_t ld, int Dk, bool part, __m256i ml, const float *k,
                        const float *q, float scale, float decay, float beta, const float *v, float *o, const int NV) {
    __m256 kv[GDN_JB / 8], er[GDN_JB / 8], ac[GDN_JB / 8];
    const __m256 dv = _mm256_set1_ps(decay);
    for (int u = 0; u < NV; u++) kv[u] = _mm256_setzero_ps();
    for (int i = 0; i < Dk; i++) {
        const float *s = src + i * ld;
        float *d = dst + i * ld;
        const __m256 ki = _mm256_set1_ps(k[i]);
        for (int u = 0; u < NV; u++) {
            const __m256 x = _mm256_mul_ps(dv, LD(s, u));
            ST(d, u, x);
            kv[u] = _mm256_fmadd_ps(ki, x, kv[u]);
        }
    }
    const __m256 bv = _mm256_set1_ps(beta);
    for (int u = 0; u < NV; u++) {
        er[u] = _mm256_mul_ps(bv, _mm256_sub_ps(LD(v, u), kv[u]));
        ac[u] = _mm256_setzero_ps();
    }
    for (int i = 0; i < Dk; i++) {
        float *d = dst + i * ld;
        const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i] * scale);
        for (int u = 0; u < NV; u++) {
            const __m256 x = _mm256_fmadd_ps(ki, er[u], LD(d, u));
            ST(d, u, x);
            ac[u] = _mm256_fmadd_ps(qi, x, ac[u]);
        }
    }
    for (int u = 0; u < NV; u++) ST(o, u, ac[u]);
}

static void gdn_rec_block(float *dst, const float *src, int64_t ld, int Dk, int jb, const float *k, const float *q,
                          float scale, float decay, float beta, const float *v, float *o) {
    const int nv = (jb + 7) / 8;
    const bool part = jb % 8 != 0;
    const __m256i ml = tail8(jb - 8 * (nv - 1));
    switch (nv) {
    case 1: rec_tile(dst, src, ld, Dk, part, ml, k, q, scale, decay, beta, v, o, 1); break;
    case 2: rec_tile(dst, src, ld, Dk, part, ml, k, q, scale, decay, beta, v, o, 2); break;
    case 3: rec_tile(dst, src, ld, Dk, part, ml, k, q, scale, decay, beta, v, o, 3); break;
    default: rec_tile(dst, src, ld, Dk, part, ml, k, q, scale, decay, beta, v, o, 4); break;
    }
}

/* ---- multi-axpy: tiles of up to 8 vectors (64 floats) of y (4 + 4 for maxpy2) ---- */

#define MT 8
#define MT2 4

static AI void maxpy_tile(float *y, const float *x, int64_t ldx, const float *c, int cnt, bool part, __m256i ml,
                          const int NV) {
    __m256 acc[MT];
    for (int u = 0; u < NV; u++) acc[u] = LD(y, u);
    for (int r = 0; r < cnt; r++) {
        const float *xr = x + r * ldx;
        const __m256 cr = _mm256_set1_ps(c[r]);
        for (int u = 0; u < NV; u++) acc[u] = _mm256_fmadd_ps(cr, LD(xr, u), acc[u]);
    }
    for (int u = 0; u < NV; u++) ST(y, u, acc[u]);
}

static AI void maxpy2_tile(float *y1, float *y2, const float *x, int64_t ldx, const float *c1, const float *c2,
                           int cnt, bool part, __m256i ml, const int NV) {
    __m256 a1[MT2], a2[MT2];
    for (int u = 0; u < NV; u++) {
        a1[u] = LD(y1, u);
        a2[u] = LD(y2, u);
    }
    for (int r = 0; r < cnt; r++) {
        const float *xr = x + r * ldx;
        const __m256 b1 = _mm256_set1_ps(c1[r]), b2 = _mm256_set1_ps(c2[r]);
        for (int u = 0; u < NV; u++) {
            const __m256 xv = LD(xr, u);
            a1[u] = _mm256_fnmadd_ps(b1, xv, a1[u]);
            a2[u] = _mm256_fmadd_ps(b2, xv, a2[u]);
        }
    }
    for (int u = 0; u < NV; u++) {
        ST(y1, u, a1[u]);
        ST(y2, u, a2[u]);
    }
}

static void gdn_maxpy(float *y, int n, const float *x, int64_t ldx, const float *c, int cnt) {
    for (int j = 0; j < n; j += 8 * MT) {
        const int rem = n - j < 8 * MT ? n - j : 8 * MT, nv = (rem + 7) / 8;
        const bool part = rem % 8 != 0;
        const __m256i ml = tail8(rem - 8 * (nv - 1));
        switch (nv) {
#define CALL(NV) maxpy_tile(y + j, x + j, ldx, c, cnt, part, ml, NV)
        case 1: CALL(1); break;
        case 2: CALL(2); break;
        case 3: CALL(3); break;
        case 4: CALL(4); break;
        case 5: CALL(5); break;
        case 6: CALL(6); break;
        case 7: CALL(7); break;
        default: CALL(8); break;
#undef CALL
        }
    }
}

static void gdn_maxpy2(float *y1, float *y2, int n, const float *x, int64_t ldx, const float *c1, const float *c2,
                       int cnt) {
    for (int j = 0; j < n; j += 8 * MT2) {
        const int rem = n - j < 8 * MT2 ? n - j : 8 * MT2, nv = (rem + 7) / 8;
        const bool part = rem % 8 != 0;
        const __m256i ml = tail8(rem - 8 * (nv - 1));
        switch (nv) {
#define CALL(NV) maxpy2_tile(y1 + j, y2 + j, x + j, ldx, c1, c2, cnt, part, ml, NV)
        case 1: CALL(1); break;
        case 2: CALL(2); break;
        case 3: CALL(3); break;
        default: CALL(4); break;
#undef CALL
        }
    }
}

#undef LD
#undef ST

#include "cpu/gdn_impl.h"
