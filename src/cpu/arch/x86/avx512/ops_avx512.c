/*
 * ops_avx512.c — AVX-512 (F/BW/VL/DQ) versions of the hot ops kernels (src/cpu/ops.h):
 * rmsnorm, rope, softmax, silu/swiglu, add/mul/scale/acc/axpy, max/exp_sum, argmax, top-K, F16 ->
 * F32 (vcvtph2ps) and the attention score / accumulate blocks. Entries not set here keep the
 * AVX2 version (ops.c builds the AVX-512 table on top of the AVX2 one).
 *
 * What it is not: the specification — that is ref/ops_ref.c; tests/test_ops.c holds the
 * bounds within which these agree with it.
 *
 * Dimension legend: see ops.h. Vectors are 16 floats; tails use AVX-512 masks, so they go
 * through the same arithmetic as the body. exp uses the formula and constants of
 * ops_avx2.c (Taylor degree 7 after a Cody-Waite reduction; 0 below ln FLT_MIN, clamped
 * above 88.3), so the AVX2 and AVX-512 tables agree on exp bit for bit.
 */
#include "cpu/ops.h"

#include <immintrin.h>
#include <math.h>

#define EXP_LO (-87.33654f)
#define EXP_HI 88.3f

static inline __m512 exp16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    /* Lanes below EXP_LO (and NaN lanes, which fail the ordered compare) become 0. */
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

static inline __mmask16 tail16(int64_t n) { return (__mmask16)((1u << n) - 1u); }

/* ---- reductions ---------------------------------------------------------------------------- */

static float max_avx512(const float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m0 = ninf, m1 = ninf;
    int64_t i = 0;
    /* max_ps(a, b) returns b when either is NaN: with the accumulator second, NaN is skipped. */
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    }
    for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    if (i < n) m1 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail16(n - i), x + i), m1);
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

static float exp_sum_avx512(float *x, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm));
        _mm512_storeu_ps(x + i, e0);
        _mm512_storeu_ps(x + i + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), vm));
        e = _mm512_maskz_mov_ps(mk, e);
        _mm512_mask_storeu_ps(x + i, mk, e);
        s1 = _mm512_add_ps(s1, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void softmax_avx512(float *x, int64_t n, float scale, const float *mask) {
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;
    if (scale != 1.0f || mask) {
        for (; i < n; i += 16) {
            const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), vs);
            if (mask) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, mask + i));
            _mm512_mask_storeu_ps(x + i, mk, v);
        }
    }
    const float m = max_avx512(x, n);
    if (m == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    const __m512 inv = _mm512_set1_ps(1.0f / exp_sum_avx512(x, n, m));
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), inv));
    }
}

static void rmsnorm_avx512(const float *x, const float *w, float *out, int64_t n, float eps) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
        s0 = _mm512_fmadd_ps(a, a, s0);
        s1 = _mm512_fmadd_ps(b, b, s1);
        s2 = _mm512_fmadd_ps(c, c, s2);
        s3 = _mm512_fmadd_ps(d, d, s3);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_loadu_ps(x + i);
        s0 = _mm512_fmadd_ps(a, a, s0);
    }
    if (i < n) {
        __m512 a = _mm512_maskz_loadu_ps(tail16(n - i), x + i);
        s1 = _mm512_fmadd_ps(a, a, s1);
    }
    const float ss = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    const __m512 r = _mm512_set1_ps((float)(1.0 / sqrt((double)ss / (double)(n > 0 ? n : 1) + eps)));
    for (i = 0; i < n; i += 16) {
        const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), r);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + i));
        _mm512_mask_storeu_ps(out + i, mk, v);
    }
}

/* ---- elementwise --------------------------------------------------------------------------- */

static inline __m512 silu16(__m512 x) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

static void silu_avx512(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        _mm512_mask_storeu_ps(out + i, mk, silu16(_mm512_maskz_loadu_ps(mk, x + i)));
    }
}

static void swiglu_avx512(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        _mm512_mask_storeu_ps(out + i, mk,
                              _mm512_mul_ps(silu16(_mm512_maskz_loadu_ps(mk, g + i)), _mm512_maskz_loadu_ps(mk, u + i)));
    }
}

#define BINARY_KERNEL(name, OP)                                                              \
    static void name(const float *a, const float *b, float *out, int64_t n) {                \
        int64_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16)                                                         \
            _mm512_storeu_ps(out + i, OP(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));   \
        if (i < n) {                                                                         \
            const __mmask16 mk = tail16(n - i);                                              \
            _mm512_mask_storeu_ps(out + i, mk,                                               \
                                  OP(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i))); \
        }                                                                                    \
    }
BINARY_KERNEL(add_avx512, _mm512_add_ps)
BINARY_KERNEL(mul_avx512, _mm512_mul_ps)

static void acc_avx512(float *y, const float *x, int64_t n) { add_avx512(y, x, y, n); }

static void scale_avx512(const float *x, float s, float *out, int64_t n) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), vs));
    }
}

static void axpy_avx512(float *y, float a, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(mk, x + i), _mm512_maskz_loadu_ps(mk, y + i)));
    }
}

/* ---- argmax, top-K --------------------------------------------------------------------------- */

static int64_t argmax_avx512(const float *x, int64_t n) {
    const float m = max_avx512(x, n);
    int64_t i = 0;
    if (m == -INFINITY) { /* only -inf and NaN: the scalar rule (first non-NaN) decides */
        for (; i < n; i++)
            if (x[i] == x[i]) return i;
        return 0;
    }
    const __m512 vm = _mm512_set1_ps(m);
    for (; i < n; i += 16) {
        const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        unsigned bits = _mm512_mask_cmp_ps_mask(mk, _mm512_maskz_loadu_ps(mk, x + i), vm, _CMP_EQ_OQ);
        if (bits) return i + __builtin_ctz(bits);
    }
    return 0; /* unreachable: m is an element */
}

static int topk_avx512(const float *x, int64_t n, int k, int32_t *idx, float *val) {
    k = spex_ops_topk_begin(x, n, k, idx, val);
    if (k == 0) return 0;
    int64_t i = k;
    float thr = val[0] == val[0] ? val[0] : -INFINITY;
    /* Most elements lose to the threshold (the worst kept): test 16 at a time, two vectors
     * per step, and only visit the lanes that beat it. */
    for (; i + 32 <= n; i += 32) {
        const __m512 vt = _mm512_set1_ps(thr);
        unsigned bits = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vt, _CMP_GT_OQ) |
                        ((unsigned)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 16), vt, _CMP_GT_OQ) << 16);
        while (bits) {
            int b = __builtin_ctz(bits);
            bits &= bits - 1;
            if (!(x[i + b] > thr)) continue; /* the threshold rose since the compare */
            spex_ops_topk_push(idx, val, k, x[i + b], (int32_t)(i + b));
            thr = val[0] == val[0] ? val[0] : -INFINITY;
        }
    }
    for (; i < n; i++) spex_ops_topk_push(idx, val, k, x[i], (int32_t)i);
    return spex_ops_topk_finish(idx, val, k);
}

/* ---- rope ------------------------------------------------------------------------------------ */

/* rope_ref's products and sums one rounding each (a*c - b*s as mul, mul, sub, no FMA), so
 * the results are the reference's bits. NEOX: 16 pairs (i, i + n_rot/2) per step, the
 * cache's (cos, sin) pairs split into two vectors; NORM: 8 adjacent pairs per step, cos
 * and sin duplicated in place and the pair partner swapped in. Tails are masked. */
static void rope_avx512(float *x, int n_head, int head_dim, int n_rot, spex_rope_mode mode, const float *cs) {
    const int half = n_rot / 2;
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (int64_t)h * head_dim;
        if (mode == SPEX_ROPE_NEOX) {
            for (int i = 0; i < half; i += 16) {
                const int m = half - i < 16 ? half - i : 16;
                const __mmask16 k = (__mmask16)((1u << m) - 1u);
                const __mmask16 k0 = (__mmask16)(m >= 8 ? 0xffffu : (1u << (2 * m)) - 1u);
                const __mmask16 k1 = (__mmask16)(m <= 8 ? 0u : (1u << (2 * (m - 8))) - 1u);
                const __m512 lo = _mm512_maskz_loadu_ps(k0, cs + 2 * i), hi = _mm512_maskz_loadu_ps(k1, cs + 2 * i + 16);
                const __m512 c = _mm512_permutex2var_ps(lo, ie, hi), sn = _mm512_permutex2var_ps(lo, io, hi);
                const __m512 a = _mm512_maskz_loadu_ps(k, xh + i), b = _mm512_maskz_loadu_ps(k, xh + i + half);
                _mm512_mask_storeu_ps(xh + i, k, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, sn)));
                _mm512_mask_storeu_ps(xh + i + half, k, _mm512_add_ps(_mm512_mul_ps(a, sn), _mm512_mul_ps(b, c)));
            }
        } else {
            for (int i = 0; i < n_rot; i += 16) { /* dims i.. hold pairs i/2.. */
                const int m = n_rot - i < 16 ? n_rot - i : 16;
                const __mmask16 k = (__mmask16)((1u << m) - 1u);
                const __m512 v = _mm512_maskz_loadu_ps(k, xh + i), t = _mm512_maskz_loadu_ps(k, cs + i);
                const __m512 c = _mm512_moveldup_ps(t), sn = _mm512_movehdup_ps(t);
                const __m512 sw = _mm512_permute_ps(v, 0xb1); /* (b, a) in each pair */
                const __m512 p = _mm512_mul_ps(v, c), q = _mm512_mul_ps(sw, sn);
                /* even dims a*c - b*s, odd dims b*c + a*s (= a*s + b*c: one rounded sum) */
                const __m512 r = _mm512_mask_sub_ps(_mm512_add_ps(p, q), (__mmask16)0x5555, p, q);
                _mm512_mask_storeu_ps(xh + i, k, r);
            }
        }
    }
}

/* ---- attention blocks ---------------------------------------------------------------------- */

/* vcvtps2ph with round-to-nearest-even: IEEE conversion, the same bits as spex_f32_to_fp16
 * (overflow to inf, subnormals exact) except the payload of a NaN. */
static void cvt_f32_f16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst + i, mk, h);
    }
}

static void cvt_f16_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        const __mmask16 mk = tail16(n - i);
        __m256i h = _mm256_maskz_loadu_epi16(mk, src + i);
        _mm512_mask_storeu_ps(dst + i, mk, _mm512_cvtph_ps(h));
    }
}

/* Scalar twin: cvt_q8_0_f32_ref (ops_ref.c). */
static void cvt_q8_0_f32_avx512(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i += 32, b += 34) {
        const __m512 d = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(b[0] | b[1] << 8))));
        const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
        const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)));
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d));
        _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
    }
}

/* Sums of four vectors as the four lanes of one: fold 512 -> 256, then a hadd tree. Each
 * lane goes through the same tree whatever the other three inputs are, so a score reduced
 * alone (reduce4(a, a, a, a), lane 0) has the same bits as in a block of four. */
static inline __m128 reduce4_512(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m256 a2 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m256 b2 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
    const __m256 c2 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    const __m256 d2 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a2, b2), _mm256_hadd_ps(c2, d2));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Loads 16 (masked: the mk lanes of) K or V elements at element i of a row as f32: the
 * row is f32 or, with F16, converted in the register (exact), so the F16 variants below
 * compute the same bits as converting the rows first and running the f32 ones. */
static inline __m512 ld16(const void *row, int i, const int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

static inline __m512 ld16m(const void *row, int i, __mmask16 mk, const int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(mk, (const float *)row + i);
}

/* Every score goes through the same sequence (fma over 16-lane chunks of d, masked last
 * chunk, reduce4_512) whether computed in a block or alone. Blocks are RB query rows × 4
 * keys: each key chunk is loaded (and, F16, converted) once for the RB rows, 16
 * accumulators, half a load per fma instead of 1.25. k rows are ldk elements apart (f32,
 * or F16 with f16). */
#define ATT_RB 4
static inline __attribute__((always_inline)) void attn_scores_blk(const float *q, int64_t ldq, const void *k,
                                                                 size_t kst, int nk4, int d, float *s, int64_t lds,
                                                                 const int rb, const int f16) {
    const int d16 = d & ~15;
    const __mmask16 mk = tail16(d - d16);
    const void *kr[4];
    for (int j = 0; j < 4; j++) kr[j] = (const char *)k + (size_t)j * kst;
    __m512 a[ATT_RB][4];
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nk4; j++) a[r][j] = _mm512_setzero_ps();
    int i = 0;
    for (; i < d16; i += 16) {
        __m512 kv[4];
        for (int j = 0; j < nk4; j++) kv[j] = ld16(kr[j], i, f16);
        for (int r = 0; r < rb; r++) {
            const __m512 qv = _mm512_loadu_ps(q + r * ldq + i);
            for (int j = 0; j < nk4; j++) a[r][j] = _mm512_fmadd_ps(qv, kv[j], a[r][j]);
        }
    }
    if (i < d) {
        __m512 kv[4];
        for (int j = 0; j < nk4; j++) kv[j] = ld16m(kr[j], i, mk, f16);
        for (int r = 0; r < rb; r++) {
            const __m512 qv = _mm512_maskz_loadu_ps(mk, q + r * ldq + i);
            for (int j = 0; j < nk4; j++) a[r][j] = _mm512_fmadd_ps(qv, kv[j], a[r][j]);
        }
    }
    for (int r = 0; r < rb; r++) {
        if (nk4 == 4) _mm_storeu_ps(s + r * lds, reduce4_512(a[r][0], a[r][1], a[r][2], a[r][3]));
        else s[r * lds] = _mm_cvtss_f32(reduce4_512(a[r][0], a[r][0], a[r][0], a[r][0]));
    }
}

static inline __attribute__((always_inline)) void attn_scores_impl(int n_q, const float *q, int64_t ldq, int n_k,
                                                                  const void *k, int64_t ldk, int d, float *s,
                                                                  int64_t lds, const int f16, const int ahead) {
    const size_t kst = (size_t)ldk * (f16 ? 2 : 4), rowb = (size_t)d * (f16 ? 2 : 4);
    for (int r0 = 0; r0 < n_q; r0 += ATT_RB) {
        const int rb = n_q - r0 < ATT_RB ? n_q - r0 : ATT_RB;
        const float *qr = q + r0 * ldq;
        float *sr = s + r0 * lds;
        for (int t = 0; t < n_k;) {
            const int nk4 = n_k - t >= 4 ? 4 : 1;
            const void *kt = (const char *)k + (size_t)t * kst;
            if (ahead && r0 == 0) /* the first row block reads the keys from memory; the others from L1 */
                for (int j = 0; j < nk4; j++) spex_attn_ahead((const char *)kt + (size_t)(j + ahead) * kst, rowb);
#define ATT_S(RB_, NK_) attn_scores_blk(qr, ldq, kt, kst, NK_, d, sr + t, lds, RB_, f16)
            if (nk4 == 4) {
                switch (rb) {
                case 1: ATT_S(1, 4); break;
                case 2: ATT_S(2, 4); break;
                case 3: ATT_S(3, 4); break;
                default: ATT_S(4, 4); break;
                }
            } else {
                switch (rb) {
                case 1: ATT_S(1, 1); break;
                case 2: ATT_S(2, 1); break;
                case 3: ATT_S(3, 1); break;
                default: ATT_S(4, 1); break;
                }
            }
#undef ATT_S
            t += nk4;
        }
    }
}

static void attn_scores_avx512(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                               int d, float *s, int64_t lds, int ahead) {
    attn_scores_impl(n_q, q, ldq, n_k, k, ldk, d, s, lds, 0, ahead);
}

static void attn_scores_f16_avx512(int n_q, const float *q, int64_t ldq, int n_k, const uint16_t *k, int64_t ldk,
                                   int d, float *s, int64_t lds, int ahead) {
    attn_scores_impl(n_q, q, ldq, n_k, k, ldk, d, s, lds, 1, ahead);
}

/* acc[r] += sum_t p[r][t] v[t]: 64 columns of RB rows' acc in registers while t runs, each
 * v chunk loaded (F16: converted) once for the RB rows; every accumulator element sees the
 * same fma chain in t order whatever the row or column blocking. */
static inline __attribute__((always_inline)) void attn_accum_blk(float *acc, int64_t ldacc, const float *p,
                                                                int64_t ldp, int n_k, const void *v, size_t vst,
                                                                int i, int nc, __mmask16 mk, const int rb,
                                                                const int f16, const int ahead,
                                                                const size_t rowb) {
    /* nc: 4 full chunks of 16 columns, or 1 chunk of the mk columns; ahead: read ahead, in the
     * first row block's first column block (it reads V from memory), rowb bytes a row */
    __m512 c[ATT_RB][4];
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nc; j++)
            c[r][j] = nc == 4 ? _mm512_loadu_ps(acc + r * ldacc + i + 16 * j) : _mm512_maskz_loadu_ps(mk, acc + r * ldacc + i);
    for (int t = 0; t < n_k; t++) {
        const void *vt = (const char *)v + (size_t)t * vst;
        if (ahead) spex_attn_ahead((const char *)vt + (size_t)ahead * vst, rowb);
        __m512 vv[4];
        for (int j = 0; j < nc; j++) vv[j] = nc == 4 ? ld16(vt, i + 16 * j, f16) : ld16m(vt, i, mk, f16);
        for (int r = 0; r < rb; r++) {
            const __m512 pt = _mm512_set1_ps(p[r * ldp + t]);
            for (int j = 0; j < nc; j++) c[r][j] = _mm512_fmadd_ps(pt, vv[j], c[r][j]);
        }
    }
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nc; j++) {
            if (nc == 4) _mm512_storeu_ps(acc + r * ldacc + i + 16 * j, c[r][j]);
            else _mm512_mask_storeu_ps(acc + r * ldacc + i, mk, c[r][j]);
        }
}

static inline __attribute__((always_inline)) void attn_accum_impl(int n_q, float *acc, int64_t ldacc, const float *p,
                                                                 int64_t ldp, int n_k, const void *v, int64_t ldv,
                                                                 int d, const int f16, const int ahead) {
    /* V rows are read ahead whole in the first column block: split by column blocks, a 128-row
     * tile's later blocks find their halves of the rows gone cold (docs/performance.md,
     * "Attention and the KV cache at depth"). */
    const size_t vst = (size_t)ldv * (f16 ? 2 : 4), rowb = (size_t)d * (f16 ? 2 : 4);
    for (int r0 = 0; r0 < n_q; r0 += ATT_RB) {
        const int rb = n_q - r0 < ATT_RB ? n_q - r0 : ATT_RB;
        float *ar = acc + r0 * ldacc;
        const float *pr = p + r0 * ldp;
        for (int i = 0; i < d;) {
            const int nc = d - i >= 64 ? 4 : 1;
            const __mmask16 mk = nc == 4 || d - i >= 16 ? (__mmask16)0xffff : tail16(d - i);
#define ATT_A(RB_, NC_) attn_accum_blk(ar, ldacc, pr, ldp, n_k, v, vst, i, NC_, mk, RB_, f16, r0 == 0 && i == 0 ? ahead : 0, rowb)
            if (nc == 4) {
                switch (rb) {
                case 1: ATT_A(1, 4); break;
                case 2: ATT_A(2, 4); break;
                case 3: ATT_A(3, 4); break;
                default: ATT_A(4, 4); break;
                }
            } else {
                switch (rb) {
                case 1: ATT_A(1, 1); break;
                case 2: ATT_A(2, 1); break;
                case 3: ATT_A(3, 1); break;
                default: ATT_A(4, 1); break;
                }
            }
#undef ATT_A
            i += nc == 4 ? 64 : 16;
        }
    }
}

static void attn_accum_avx512(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                              const float *v, int64_t ldv, int d, int ahead) {
    attn_accum_impl(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 0, ahead);
}

static void attn_accum_f16_avx512(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                                  const uint16_t *v, int64_t ldv, int d, int ahead) {
    attn_accum_impl(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 1, ahead);
}

void spex_ops_register_avx512(spex_ops_kernels *k) {
    k->rmsnorm = rmsnorm_avx512;
    k->rope = rope_avx512;
    k->softmax = softmax_avx512;
    k->silu = silu_avx512;
    k->swiglu = swiglu_avx512;
    k->add = add_avx512;
    k->mul = mul_avx512;
    k->scale = scale_avx512;
    k->acc = acc_avx512;
    k->axpy = axpy_avx512;
    k->argmax = argmax_avx512;
    k->topk = topk_avx512;
    k->max = max_avx512;
    k->exp_sum = exp_sum_avx512;
    k->cvt_f16_f32 = cvt_f16_f32_avx512;
    k->cvt_f32_f16 = cvt_f32_f16_avx512;
    k->attn_scores = attn_scores_avx512;
    k->attn_accum = attn_accum_avx512;
    k->cvt_q8_0_f32 = cvt_q8_0_f32_avx512;
    k->attn_scores_f16 = attn_scores_f16_avx512;
    k->attn_accum_f16 = attn_accum_f16_avx512;
}
