/*
 * ops_neon.c — NEON (aarch64) versions of the simplest ops kernels (src/cpu/ops.h):
 * add/mul/scale/acc/axpy, max, rmsnorm, F16 -> F32 and the attention score / accumulate
 * blocks. Everything else (softmax, silu/swiglu, argmax, top-K, rope) stays on the scalar
 * reference: aarch64 must build and be correct; it is not yet a speed target.
 *
 * What it is not: the specification — that is ref/ops_ref.c; tests/test_ops.c compares
 * this table against it when run on an aarch64 machine.
 *
 * Dimension legend: see ops.h. Vectors are 4 floats; tails are scalar.
 */
#include "cpu/ops.h"

#include <arm_neon.h>
#include <math.h>

static void add_neon(const float *a, const float *b, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++) out[i] = a[i] + b[i];
}

static void mul_neon(const float *a, const float *b, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++) out[i] = a[i] * b[i];
}

static void scale_neon(const float *x, float s, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_n_f32(vld1q_f32(x + i), s));
    for (; i < n; i++) out[i] = s * x[i];
}

static void acc_neon(float *y, const float *x, int64_t n) { add_neon(y, x, y, n); }

static void axpy_neon(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
    const float32x4_t va = vdupq_n_f32(a);
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static float max_neon(const float *x, int64_t n) {
    /* vmaxnmq ignores a NaN operand (IEEE maxNum), matching the reference's "NaN ignored". */
    float32x4_t m = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) m = vmaxnmq_f32(m, vld1q_f32(x + i));
    float r = vmaxnmvq_f32(m);
    for (; i < n; i++)
        if (x[i] > r) r = x[i];
    return r;
}

static void rmsnorm_neon(const float *x, const float *w, float *out, int64_t n, float eps) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        s0 = vfmaq_f32(s0, a, a);
        s1 = vfmaq_f32(s1, b, b);
    }
    double ss = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)(n > 0 ? n : 1) + eps));
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t v = vmulq_n_f32(vld1q_f32(x + i), r);
        if (w) v = vmulq_f32(v, vld1q_f32(w + i));
        vst1q_f32(out + i, v);
    }
    for (; i < n; i++) out[i] = x[i] * r * (w ? w[i] : 1.0f);
}

static void cvt_f16_f32_neon(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    for (; i < n; i++) {
        float16x4_t h = vreinterpret_f16_u16(vdup_n_u16(src[i]));
        dst[i] = vgetq_lane_f32(vcvt_f32_f16(h), 0);
    }
}

static void attn_scores_neon(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                             int d, float *s, int64_t lds, int ahead) {
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) {
            const float *qr = q + r * ldq, *kt = k + t * ldk;
            float32x4_t a = vdupq_n_f32(0.0f);
            int i = 0;
            for (; i + 4 <= d; i += 4) a = vfmaq_f32(a, vld1q_f32(qr + i), vld1q_f32(kt + i));
            float acc = vaddvq_f32(a);
            for (; i < d; i++) acc += qr[i] * kt[i];
            s[r * lds + t] = acc;
        }
}

/* The F16 twins: 4 elements converted in a register per load (exact), the same fma
 * sequence as the f32 versions, so the bits of converting the rows first. */
static void attn_scores_f16_neon(int n_q, const float *q, int64_t ldq, int n_k, const uint16_t *k, int64_t ldk,
                                 int d, float *s, int64_t lds, int ahead) {
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) {
            const float *qr = q + r * ldq;
            const uint16_t *kt = k + t * ldk;
            float32x4_t a = vdupq_n_f32(0.0f);
            int i = 0;
            for (; i + 4 <= d; i += 4)
                a = vfmaq_f32(a, vld1q_f32(qr + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(kt + i))));
            float acc = vaddvq_f32(a);
            for (; i < d; i++) {
                const float kv = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(kt[i]))), 0);
                acc += qr[i] * kv;
            }
            s[r * lds + t] = acc;
        }
}

static void attn_accum_neon(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                            const float *v, int64_t ldv, int d, int ahead) {
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) axpy_neon(acc + r * ldacc, p[r * ldp + t], v + t * ldv, d);
}

static void attn_accum_f16_neon(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                                const uint16_t *v, int64_t ldv, int d, int ahead) {
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) {
            float *ar = acc + r * ldacc;
            const uint16_t *vt = v + t * ldv;
            const float pt = p[r * ldp + t];
            int i = 0;
            for (; i + 4 <= d; i += 4)
                vst1q_f32(ar + i, vfmaq_n_f32(vld1q_f32(ar + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(vt + i))), pt));
            for (; i < d; i++) ar[i] += pt * vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(vt[i]))), 0);
        }
}

void spex_ops_register_neon(spex_ops_kernels *k) {
    k->add = add_neon;
    k->mul = mul_neon;
    k->scale = scale_neon;
    k->acc = acc_neon;
    k->axpy = axpy_neon;
    k->max = max_neon;
    k->rmsnorm = rmsnorm_neon;
    k->cvt_f16_f32 = cvt_f16_f32_neon;
    k->attn_scores = attn_scores_neon;
    k->attn_accum = attn_accum_neon;
    k->attn_scores_f16 = attn_scores_f16_neon;
    k->attn_accum_f16 = attn_accum_f16_neon;
}
