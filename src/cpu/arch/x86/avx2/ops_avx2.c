/*
 * ops_avx2.c — AVX2 + FMA + F16C versions of the hot ops kernels (src/cpu/ops.h): rmsnorm,
 * softmax, silu/swiglu, add/mul/scale/acc/axpy, max/exp_sum, argmax, top-K, F16 -> F32 and
 * the attention score / accumulate blocks. rope stays scalar (a few hundred floats a token).
 *
 * What it is not: the specification — that is ref/ops_ref.c; tests/test_ops.c holds the
 * bounds within which these agree with it.
 *
 * Dimension legend: see ops.h. Vectors are 8 floats; a row's tail (n % 8) is handled with
 * masked loads/stores so it goes through the same arithmetic as the body.
 *
 * exp: x = n ln2 + r with n = rint(x log2e), |r| <= ln2/2 (ln2 split in a 9-bit head, exact
 * in n * head, and a tail), e^r by its Taylor polynomial to degree 7 (truncation < 6e-9
 * relative), times 2^n built in the exponent field. Inputs below -87.3365 (= ln FLT_MIN)
 * give exactly 0 (so -inf gives 0); inputs above 88.3 are clamped (the result saturates at
 * e^88.3 ~ 2.2e38). Max relative error on [-87.3, 88.3]: 7.9e-8 measured over 33M points;
 * tests/test_ops.c asserts 2.4e-7. ops_avx512.c uses the same formula, so the two agree
 * bit for bit (NaN inputs aside).
 */
#include "cpu/ops.h"
#include "core/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define EXP_LO (-87.33654f)
#define EXP_HI 88.3f

static inline __m256 exp8(__m256 x) {
    const __m256 zero_below = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-126, 127]: 2^n is a normal float with biased exponent n + 127. */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero_below, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lanes [0, n) on (n < 8). */
static inline __m256i tail_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static float max_avx2(const float *x, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf;
    int64_t i = 0;
    /* max_ps(a, b) returns b when either is NaN: with the accumulator second, NaN is skipped. */
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, mk), _mm256_castsi256_ps(mk));
        m1 = _mm256_max_ps(v, m1);
    }
    return hmax8(_mm256_max_ps(m0, m1));
}

static float exp_sum_avx2(float *x, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        s0 = _mm256_add_ps(s0, e);
    }
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mk), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(x + i, mk, e);
        s1 = _mm256_add_ps(s1, e);
    }
    return hsum8(_mm256_add_ps(s0, s1));
}

static void softmax_avx2(float *x, int64_t n, float scale, const float *mask) {
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    if (scale != 1.0f || mask) {
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
            if (mask) v = _mm256_add_ps(v, _mm256_loadu_ps(mask + i));
            _mm256_storeu_ps(x + i, v);
        }
        for (; i < n; i++) x[i] = x[i] * scale + (mask ? mask[i] : 0.0f);
    }
    const float m = max_avx2(x, n);
    if (m == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    const __m256 inv = _mm256_set1_ps(1.0f / exp_sum_avx2(x, n, m));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(x + i, mk, _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), inv));
    }
}

static void rmsnorm_avx2(const float *x, const float *w, float *out, int64_t n, float eps) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        s0 = _mm256_fmadd_ps(a, a, s0);
        s1 = _mm256_fmadd_ps(b, b, s1);
        s2 = _mm256_fmadd_ps(c, c, s2);
        s3 = _mm256_fmadd_ps(d, d, s3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(a, a, s0);
    }
    if (i < n) {
        __m256 a = _mm256_maskload_ps(x + i, tail_mask(n - i));
        s1 = _mm256_fmadd_ps(a, a, s1);
    }
    const float ss = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    const __m256 r = _mm256_set1_ps((float)(1.0 / sqrt((double)ss / (double)(n > 0 ? n : 1) + eps)));
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), r);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, v);
    }
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), r);
        if (w) v = _mm256_mul_ps(v, _mm256_maskload_ps(w + i, mk));
        _mm256_maskstore_ps(out + i, mk, v);
    }
}

/* ---- elementwise --------------------------------------------------------------------------- */

static inline __m256 silu8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

static void silu_avx2(const float *x, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, mk, silu8(_mm256_maskload_ps(x + i, mk)));
    }
}

static void swiglu_avx2(const float *g, const float *u, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, mk,
                            _mm256_mul_ps(silu8(_mm256_maskload_ps(g + i, mk)), _mm256_maskload_ps(u + i, mk)));
    }
}

/* One macro body for the two-input elementwise kernels: OP(a, b) on vectors. */
#define BINARY_KERNEL(name, OP)                                                          \
    static void name(const float *a, const float *b, float *out, int64_t n) {            \
        int64_t i = 0;                                                                   \
        for (; i + 8 <= n; i += 8)                                                       \
            _mm256_storeu_ps(out + i, OP(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))); \
        if (i < n) {                                                                     \
            const __m256i mk = tail_mask(n - i);                                         \
            _mm256_maskstore_ps(out + i, mk,                                             \
                                OP(_mm256_maskload_ps(a + i, mk), _mm256_maskload_ps(b + i, mk))); \
        }                                                                                \
    }
BINARY_KERNEL(add_avx2, _mm256_add_ps)
BINARY_KERNEL(mul_avx2, _mm256_mul_ps)

static void acc_avx2(float *y, const float *x, int64_t n) { add_avx2(y, x, y, n); }

static void scale_avx2(const float *x, float s, float *out, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, mk, _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), vs));
    }
}

static void axpy_avx2(float *y, float a, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        const __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, mk, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, mk), _mm256_maskload_ps(y + i, mk)));
    }
}

/* ---- argmax, top-K --------------------------------------------------------------------------- */

static int64_t argmax_avx2(const float *x, int64_t n) {
    const float m = max_avx2(x, n);
    int64_t i = 0;
    if (m == -INFINITY) { /* only -inf and NaN: the scalar rule (first non-NaN) decides */
        for (; i < n; i++)
            if (x[i] == x[i]) return i;
        return 0;
    }
    /* Second pass: the first element equal to the max. */
    const __m256 vm = _mm256_set1_ps(m);
    for (; i + 8 <= n; i += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* unreachable: m is an element */
}

static int topk_avx2(const float *x, int64_t n, int k, int32_t *idx, float *val) {
    k = spex_ops_topk_begin(x, n, k, idx, val);
    if (k == 0) return 0;
    int64_t i = k;
    float thr = val[0] == val[0] ? val[0] : -INFINITY;
    /* Most elements lose to the threshold (the worst kept): test 8 at a time and only
     * visit the lanes that beat it. */
    for (; i + 8 <= n; i += 8) {
        unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(thr), _CMP_GT_OQ));
        while (bits) {
            int b = __builtin_ctz(bits);
            bits &= bits - 1;
            spex_ops_topk_push(idx, val, k, x[i + b], (int32_t)(i + b));
            thr = val[0] == val[0] ? val[0] : -INFINITY;
        }
    }
    for (; i < n; i++) spex_ops_topk_push(idx, val, k, x[i], (int32_t)i);
    return spex_ops_topk_finish(idx, val, k);
}

/* ---- attention blocks ---------------------------------------------------------------------- */

/* F16C's vcvtps2ph, round to nearest even (see the AVX-512 twin); the tail element by element
 * through the scalar conversion. */
static void cvt_f32_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = spex_f32_to_fp16(src[i]);
}

static void cvt_f16_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) {
        uint16_t tmp[8] = {0};
        for (int64_t j = i; j < n; j++) tmp[j - i] = src[j];
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
        _mm256_maskstore_ps(dst + i, tail_mask(n - i), v);
    }
}

/* Scalar twin: cvt_q8_0_f32_ref (ops_ref.c). */
static void cvt_q8_0_f32_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i += 32, b += 34) {
        const __m256 d = _mm256_set1_ps(spex_fp16_to_f32((uint16_t)(b[0] | b[1] << 8)));
        for (int c = 0; c < 4; c++) {
            int64_t w; /* 8 codes */
            memcpy(&w, b + 2 + 8 * c, 8);
            const __m256i q = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(w));
            _mm256_storeu_ps(dst + i + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

/* Sums of four vectors as the four lanes of one (a hadd tree). Each lane goes through the
 * same tree whatever the other inputs are, so reduce4(a, a, a, a) lane 0 has the same bits
 * as a's lane in a block of four. */
static inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Loads 8 (masked: the mk lanes of) K or V elements at element i of a row as f32; with
 * F16 converted in the register (exact), so the F16 variants below compute the bits of
 * converting the rows first and running the f32 ones. */
static inline __m256 ld8(const void *row, int i, const int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return _mm256_loadu_ps((const float *)row + i);
}

static inline __m256 ld8m(const void *row, int i, int n, __m256i mk, const int f16) {
    if (f16) { /* n < 8 valid elements: no masked 16-bit load in AVX2 */
        uint16_t tmp[8] = {0};
        memcpy(tmp, (const uint16_t *)row + i, sizeof(uint16_t) * (size_t)n);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
    }
    return _mm256_maskload_ps((const float *)row + i, mk);
}

/* Every score goes through the same sequence (fma over 8-lane chunks of d, masked last
 * chunk, reduce4) whether computed in a block or alone, so a score never depends on its
 * neighbours. Blocks are RB query rows × 4 keys (RB = 2: 8 of the 16 ymm registers
 * accumulate), each key chunk loaded (F16: converted) once for the RB rows. k rows are
 * ldk elements apart (f32, or F16 with f16). */
#define ATT_RB 2
static inline __attribute__((always_inline)) void attn_scores_blk(const float *q, int64_t ldq, const void *k,
                                                                 size_t kst, int nk4, int d, float *s, int64_t lds,
                                                                 const int rb, const int f16) {
    const int d8 = d & ~7;
    const __m256i mk = tail_mask(d - d8);
    const void *kr[4];
    for (int j = 0; j < 4; j++) kr[j] = (const char *)k + (size_t)j * kst;
    __m256 a[ATT_RB][4];
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nk4; j++) a[r][j] = _mm256_setzero_ps();
    int i = 0;
    for (; i < d8; i += 8) {
        __m256 kv[4];
        for (int j = 0; j < nk4; j++) kv[j] = ld8(kr[j], i, f16);
        for (int r = 0; r < rb; r++) {
            const __m256 qv = _mm256_loadu_ps(q + r * ldq + i);
            for (int j = 0; j < nk4; j++) a[r][j] = _mm256_fmadd_ps(qv, kv[j], a[r][j]);
        }
    }
    if (i < d) {
        __m256 kv[4];
        for (int j = 0; j < nk4; j++) kv[j] = ld8m(kr[j], i, d - i, mk, f16);
        for (int r = 0; r < rb; r++) {
            const __m256 qv = _mm256_maskload_ps(q + r * ldq + i, mk);
            for (int j = 0; j < nk4; j++) a[r][j] = _mm256_fmadd_ps(qv, kv[j], a[r][j]);
        }
    }
    for (int r = 0; r < rb; r++) {
        if (nk4 == 4) _mm_storeu_ps(s + r * lds, reduce4(a[r][0], a[r][1], a[r][2], a[r][3]));
        else s[r * lds] = _mm_cvtss_f32(reduce4(a[r][0], a[r][0], a[r][0], a[r][0]));
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
                if (rb == 1) ATT_S(1, 4);
                else ATT_S(2, 4);
            } else {
                if (rb == 1) ATT_S(1, 1);
                else ATT_S(2, 1);
            }
#undef ATT_S
            t += nk4;
        }
    }
}

static void attn_scores_avx2(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                             int d, float *s, int64_t lds, int ahead) {
    attn_scores_impl(n_q, q, ldq, n_k, k, ldk, d, s, lds, 0, ahead);
}

static void attn_scores_f16_avx2(int n_q, const float *q, int64_t ldq, int n_k, const uint16_t *k, int64_t ldk,
                                 int d, float *s, int64_t lds, int ahead) {
    attn_scores_impl(n_q, q, ldq, n_k, k, ldk, d, s, lds, 1, ahead);
}

/* acc[r] += sum_t p[r][t] v[t]: 32 columns of RB rows' acc in registers while t runs, each
 * v chunk loaded (F16: converted) once for the RB rows; every accumulator element sees the
 * same fma chain in t order whatever the row or column blocking. */
static inline __attribute__((always_inline)) void attn_accum_blk(float *acc, int64_t ldacc, const float *p,
                                                                int64_t ldp, int n_k, const void *v, size_t vst,
                                                                int i, int nc, int nv, const int rb, const int f16,
                                                                const int ahead, const size_t rowb) {
    /* nc: 4 full chunks of 8 columns, or 1 chunk of nv <= 8 columns; ahead: read ahead, in the
     * first row block's first column block (it reads V from memory), rowb bytes a row */
    const __m256i mk = tail_mask(nv);
    __m256 c[ATT_RB][4];
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nc; j++)
            c[r][j] = nc == 4 ? _mm256_loadu_ps(acc + r * ldacc + i + 8 * j) : _mm256_maskload_ps(acc + r * ldacc + i, mk);
    for (int t = 0; t < n_k; t++) {
        const void *vt = (const char *)v + (size_t)t * vst;
        if (ahead) spex_attn_ahead((const char *)vt + (size_t)ahead * vst, rowb);
        __m256 vv[4];
        for (int j = 0; j < nc; j++) vv[j] = nc == 4 ? ld8(vt, i + 8 * j, f16) : ld8m(vt, i, nv, mk, f16);
        for (int r = 0; r < rb; r++) {
            const __m256 pt = _mm256_broadcast_ss(p + r * ldp + t);
            for (int j = 0; j < nc; j++) c[r][j] = _mm256_fmadd_ps(pt, vv[j], c[r][j]);
        }
    }
    for (int r = 0; r < rb; r++)
        for (int j = 0; j < nc; j++) {
            if (nc == 4) _mm256_storeu_ps(acc + r * ldacc + i + 8 * j, c[r][j]);
            else _mm256_maskstore_ps(acc + r * ldacc + i, mk, c[r][j]);
        }
}

static inline __attribute__((always_inline)) void attn_accum_impl(int n_q, float *acc, int64_t ldacc, const float *p,
                                                                 int64_t ldp, int n_k, const void *v, int64_t ldv,
                                                                 int d, const int f16, const int ahead) {
    /* V rows are read ahead whole in the first column block, as in the AVX-512 twin (why: there) */
    const size_t vst = (size_t)ldv * (f16 ? 2 : 4), rowb = (size_t)d * (f16 ? 2 : 4);
    for (int r0 = 0; r0 < n_q; r0 += ATT_RB) {
        const int rb = n_q - r0 < ATT_RB ? n_q - r0 : ATT_RB;
        float *ar = acc + r0 * ldacc;
        const float *pr = p + r0 * ldp;
        for (int i = 0; i < d;) {
            const int nc = d - i >= 32 ? 4 : 1;
            const int nv = nc == 4 ? 8 : (d - i < 8 ? d - i : 8);
#define ATT_A(RB_, NC_) attn_accum_blk(ar, ldacc, pr, ldp, n_k, v, vst, i, NC_, nv, RB_, f16, r0 == 0 && i == 0 ? ahead : 0, rowb)
            if (nc == 4) {
                if (rb == 1) ATT_A(1, 4);
                else ATT_A(2, 4);
            } else {
                if (rb == 1) ATT_A(1, 1);
                else ATT_A(2, 1);
            }
#undef ATT_A
            i += nc == 4 ? 32 : 8;
        }
    }
}

static void attn_accum_avx2(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                            const float *v, int64_t ldv, int d, int ahead) {
    attn_accum_impl(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 0, ahead);
}

static void attn_accum_f16_avx2(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                                const uint16_t *v, int64_t ldv, int d, int ahead) {
    attn_accum_impl(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 1, ahead);
}

void spex_ops_register_avx2(spex_ops_kernels *k) {
    k->rmsnorm = rmsnorm_avx2;
    k->softmax = softmax_avx2;
    k->silu = silu_avx2;
    k->swiglu = swiglu_avx2;
    k->add = add_avx2;
    k->mul = mul_avx2;
    k->scale = scale_avx2;
    k->acc = acc_avx2;
    k->axpy = axpy_avx2;
    k->argmax = argmax_avx2;
    k->topk = topk_avx2;
    k->max = max_avx2;
    k->exp_sum = exp_sum_avx2;
    k->cvt_f16_f32 = cvt_f16_f32_avx2;
    k->cvt_f32_f16 = cvt_f32_f16_avx2;
    k->attn_scores = attn_scores_avx2;
    k->attn_accum = attn_accum_avx2;
    k->cvt_q8_0_f32 = cvt_q8_0_f32_avx2;
    k->attn_scores_f16 = attn_scores_f16_avx2;
    k->attn_accum_f16 = attn_accum_f16_avx2;
}
