/*
 * ops_avx512.c — AVX-512 (F/BW/VL/DQ) versions of the hot ops kernels (src/cpu/ops.h):
 * rmsnorm, softmax, silu/swiglu, add/mul/scale/acc/axpy, max/exp_sum, argmax, top-K, F16 ->
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

/* Every score goes through the same sequence (fma over 16-lane chunks of d, masked last
 * chunk, reduce4_512) whether computed in the 4-wide block or alone. */
static void attn_scores_avx512(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                               int d, float *s, int64_t lds) {
    const int d16 = d & ~15;
    const __mmask16 mk = tail16(d - d16);
    for (int r = 0; r < n_q; r++) {
        const float *qr = q + r * ldq;
        int t = 0;
        for (; t + 4 <= n_k; t += 4) {
            const float *k0 = k + t * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int i = 0;
            for (; i < d16; i += 16) {
                __m512 qv = _mm512_loadu_ps(qr + i);
                a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + i), a0);
                a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k1 + i), a1);
                a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k2 + i), a2);
                a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k3 + i), a3);
            }
            if (i < d) {
                __m512 qv = _mm512_maskz_loadu_ps(mk, qr + i);
                a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, k0 + i), a0);
                a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, k1 + i), a1);
                a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, k2 + i), a2);
                a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, k3 + i), a3);
            }
            _mm_storeu_ps(s + r * lds + t, reduce4_512(a0, a1, a2, a3));
        }
        for (; t < n_k; t++) {
            const float *k0 = k + t * ldk;
            __m512 a0 = _mm512_setzero_ps();
            int i = 0;
            for (; i < d16; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qr + i), _mm512_loadu_ps(k0 + i), a0);
            if (i < d) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, qr + i), _mm512_maskz_loadu_ps(mk, k0 + i), a0);
            s[r * lds + t] = _mm_cvtss_f32(reduce4_512(a0, a0, a0, a0));
        }
    }
}

static void attn_accum_avx512(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                              const float *v, int64_t ldv, int d) {
    for (int r = 0; r < n_q; r++) {
        float *ar = acc + r * ldacc;
        const float *pr = p + r * ldp;
        int i = 0;
        for (; i + 64 <= d; i += 64) {
            __m512 c0 = _mm512_loadu_ps(ar + i), c1 = _mm512_loadu_ps(ar + i + 16);
            __m512 c2 = _mm512_loadu_ps(ar + i + 32), c3 = _mm512_loadu_ps(ar + i + 48);
            for (int t = 0; t < n_k; t++) {
                const __m512 pt = _mm512_set1_ps(pr[t]);
                const float *vt = v + t * ldv + i;
                c0 = _mm512_fmadd_ps(pt, _mm512_loadu_ps(vt), c0);
                c1 = _mm512_fmadd_ps(pt, _mm512_loadu_ps(vt + 16), c1);
                c2 = _mm512_fmadd_ps(pt, _mm512_loadu_ps(vt + 32), c2);
                c3 = _mm512_fmadd_ps(pt, _mm512_loadu_ps(vt + 48), c3);
            }
            _mm512_storeu_ps(ar + i, c0);
            _mm512_storeu_ps(ar + i + 16, c1);
            _mm512_storeu_ps(ar + i + 32, c2);
            _mm512_storeu_ps(ar + i + 48, c3);
        }
        for (; i < d; i += 16) {
            const __mmask16 mk = d - i >= 16 ? (__mmask16)0xffff : tail16(d - i);
            __m512 c0 = _mm512_maskz_loadu_ps(mk, ar + i);
            for (int t = 0; t < n_k; t++)
                c0 = _mm512_fmadd_ps(_mm512_set1_ps(pr[t]), _mm512_maskz_loadu_ps(mk, v + t * ldv + i), c0);
            _mm512_mask_storeu_ps(ar + i, mk, c0);
        }
    }
}

void spex_ops_register_avx512(spex_ops_kernels *k) {
    k->rmsnorm = rmsnorm_avx512;
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
}
