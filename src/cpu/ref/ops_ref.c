/*
 * ops_ref.c — scalar reference of every kernel in the ops table (src/cpu/ops.h).
 *
 * What it is: the specification the SIMD versions are tested against, written for clarity
 * (libm expf, double accumulation where it makes the reference more exact). What it is not:
 * fast; ISA files override the hot entries.
 *
 * Dimension legend: see ops.h (n, head_dim, n_head, n_rot, T, R, ...).
 */
#include "cpu/ops.h"
#include "core/fp16.h"

#include <math.h>

static void rmsnorm_ref(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)(n > 0 ? n : 1) + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * (w ? w[i] : 1.0f);
}

static void rope_ref(float *x, int n_head, int head_dim, int n_rot, spex_rope_mode mode, const float *cs) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            /* NORM pairs adjacent dims; NEOX pairs dim i with dim i + n_rot/2. */
            int ia = mode == SPEX_ROPE_NEOX ? i : 2 * i;
            int ib = mode == SPEX_ROPE_NEOX ? i + half : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = xh[ia], b = xh[ib];
            xh[ia] = a * c - b * s;
            xh[ib] = a * s + b * c;
        }
    }
}

static float max_ref(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static float exp_sum_ref(float *x, int64_t n, float m) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return (float)s;
}

static void softmax_ref(float *x, int64_t n, float scale, const float *mask) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * scale + (mask ? mask[i] : 0.0f);
    float m = max_ref(x, n);
    if (m == -INFINITY) { /* nothing visible: all zeros rather than NaN */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    float inv = 1.0f / exp_sum_ref(x, n, m);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static void silu_ref(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] / (1.0f + expf(-x[i]));
}

static void swiglu_ref(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add_ref(const float *a, const float *b, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
static void mul_ref(const float *a, const float *b, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}
static void scale_ref(const float *x, float s, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = s * x[i];
}
static void acc_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
static void axpy_ref(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static int64_t argmax_ref(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i; /* NaN loses */
    return n > 0 ? best : 0;
}

/* ---- top-K -------------------------------------------------------------------------------
 * A min-heap of the k best so far, rooted at the worst (smallest value; on equal values the
 * larger index). Elements are visited in index order, so a later element with a value equal
 * to the root's can never beat it: only strictly larger values enter once the heap is full. */

static inline float topk_key(float v) { return v != v ? -INFINITY : v; }

/* true if (va, ia) ranks below (vb, ib) */
static inline int topk_worse(float va, int32_t ia, float vb, int32_t ib) {
    va = topk_key(va);
    vb = topk_key(vb);
    return va < vb || (va == vb && ia > ib);
}

static void topk_sift_down(int32_t *idx, float *val, int k, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && topk_worse(val[l], idx[l], val[w], idx[w])) w = l;
        if (r < k && topk_worse(val[r], idx[r], val[w], idx[w])) w = r;
        if (w == i) return;
        float tv = val[i]; val[i] = val[w]; val[w] = tv;
        int32_t ti = idx[i]; idx[i] = idx[w]; idx[w] = ti;
        i = w;
    }
}

/* Fills the heap with the first k elements; returns k (clamped to n and SPEX_TOPK_MAX). */
int spex_ops_topk_begin(const float *x, int64_t n, int k, int32_t *idx, float *val) {
    if (k > SPEX_TOPK_MAX) k = SPEX_TOPK_MAX;
    if (k < 0) k = 0;
    if ((int64_t)k > n) k = n > 0 ? (int)n : 0;
    for (int i = 0; i < k; i++) {
        idx[i] = i;
        val[i] = x[i];
    }
    for (int i = k / 2 - 1; i >= 0; i--) topk_sift_down(idx, val, k, i);
    return k;
}

/* Offers element (v, i); i is larger than every index already offered. */
void spex_ops_topk_push(int32_t *idx, float *val, int k, float v, int32_t i) {
    if (k > 0 && topk_key(v) > topk_key(val[0])) {
        val[0] = v;
        idx[0] = i;
        topk_sift_down(idx, val, k, 0);
    }
}

/* Sorts the heap best first (insertion sort: k is small). */
int spex_ops_topk_finish(int32_t *idx, float *val, int k) {
    for (int i = 1; i < k; i++) {
        float v = val[i];
        int32_t ix = idx[i];
        int j = i - 1;
        while (j >= 0 && topk_worse(val[j], idx[j], v, ix)) {
            val[j + 1] = val[j];
            idx[j + 1] = idx[j];
            j--;
        }
        val[j + 1] = v;
        idx[j + 1] = ix;
    }
    return k;
}

void spex_ops_topk_empty(int32_t *idx, float *val, int k) {
    for (int i = 0; i < k; i++) idx[i] = INT32_MAX, val[i] = -INFINITY;
}

void spex_ops_topk_scan(const float *x, int64_t n, int32_t i0, int k, int32_t *idx, float *val) {
    if (k <= 0) return;
    /* Most elements do not enter: a block of 16 is tested against the root with plain
     * compares the compiler vectorises (NaN never enters: its key is -inf), and only a block
     * with a candidate goes through the heap. */
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const float thr = topk_key(val[0]);
        int any = 0;
        for (int b = 0; b < 16; b++) any |= x[j + b] > thr;
        if (!any) continue;
        for (int b = 0; b < 16; b++) spex_ops_topk_push(idx, val, k, x[j + b], i0 + (int32_t)(j + b));
    }
    for (; j < n; j++) spex_ops_topk_push(idx, val, k, x[j], i0 + (int32_t)j);
}

int spex_ops_topk_merge(const int32_t *idx_in, const float *val_in, int n_in, int k, int32_t *idx, float *val) {
    if (k <= 0) return 0;
    int m = 0;   /* idx/val[0 .. m) sorted best first */
    for (int i = 0; i < n_in; i++) {
        const float v = val_in[i];
        const int32_t ix = idx_in[i];
        if (ix == INT32_MAX) continue;   /* a placeholder */
        if (m == k && !topk_worse(val[m - 1], idx[m - 1], v, ix)) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && topk_worse(val[j - 1], idx[j - 1], v, ix)) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        val[j] = v;
        idx[j] = ix;
    }
    return m;
}

static int topk_ref(const float *x, int64_t n, int k, int32_t *idx, float *val) {
    k = spex_ops_topk_begin(x, n, k, idx, val);
    for (int64_t i = k; i < n; i++) spex_ops_topk_push(idx, val, k, x[i], (int32_t)i);
    return spex_ops_topk_finish(idx, val, k);
}

/* ---- attention blocks --------------------------------------------------------------------- */

static void cvt_f16_f32_ref(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = spex_fp16_to_f32(src[i]);
}

static void cvt_f32_f16_ref(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = spex_f32_to_fp16(src[i]);
}

static void cvt_q8_0_f32_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i += 32, b += 34) {
        const float d = spex_fp16_to_f32((uint16_t)(b[0] | b[1] << 8)); /* little-endian fp16 */
        for (int j = 0; j < 32; j++) dst[i + j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Element i of a K or V row, f32 or F16 (converted where it is used: the conversion is exact,
 * so the F16 entry points give the bits of converting the rows first). */
static inline float kv_at(const void *row, int64_t i, int f16) {
    return f16 ? spex_fp16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static void attn_scores_any(int n_q, const float *q, int64_t ldq, int n_k, const void *k, int64_t ldk, int d,
                            float *s, int64_t lds, int f16) {
    const size_t rs = (size_t)ldk * (f16 ? 2 : 4);
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) {
            const void *kt = (const char *)k + (size_t)t * rs;
            float acc = 0.0f;
            for (int i = 0; i < d; i++) acc += q[r * ldq + i] * kv_at(kt, i, f16);
            s[r * lds + t] = acc;
        }
}

static void attn_accum_any(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k, const void *v,
                           int64_t ldv, int d, int f16) {
    const size_t rs = (size_t)ldv * (f16 ? 2 : 4);
    for (int r = 0; r < n_q; r++)
        for (int t = 0; t < n_k; t++) {
            const void *vt = (const char *)v + (size_t)t * rs;
            float pt = p[r * ldp + t];
            for (int i = 0; i < d; i++) acc[r * ldacc + i] += pt * kv_at(vt, i, f16);
        }
}

static void attn_scores_ref(int n_q, const float *q, int64_t ldq, int n_k, const float *k, int64_t ldk,
                            int d, float *s, int64_t lds, int ahead) {
    attn_scores_any(n_q, q, ldq, n_k, k, ldk, d, s, lds, 0);
}

static void attn_accum_ref(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                           const float *v, int64_t ldv, int d, int ahead) {
    attn_accum_any(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 0);
}

static void attn_scores_f16_ref(int n_q, const float *q, int64_t ldq, int n_k, const uint16_t *k, int64_t ldk,
                                int d, float *s, int64_t lds, int ahead) {
    attn_scores_any(n_q, q, ldq, n_k, k, ldk, d, s, lds, 1);
}

static void attn_accum_f16_ref(int n_q, float *acc, int64_t ldacc, const float *p, int64_t ldp, int n_k,
                               const uint16_t *v, int64_t ldv, int d, int ahead) {
    attn_accum_any(n_q, acc, ldacc, p, ldp, n_k, v, ldv, d, 1);
}

void spex_ops_register_scalar(spex_ops_kernels *k) {
    k->rmsnorm = rmsnorm_ref;
    k->rope = rope_ref;
    k->softmax = softmax_ref;
    k->silu = silu_ref;
    k->swiglu = swiglu_ref;
    k->add = add_ref;
    k->mul = mul_ref;
    k->scale = scale_ref;
    k->acc = acc_ref;
    k->axpy = axpy_ref;
    k->argmax = argmax_ref;
    k->topk = topk_ref;
    k->max = max_ref;
    k->exp_sum = exp_sum_ref;
    k->cvt_f16_f32 = cvt_f16_f32_ref;
    k->cvt_f32_f16 = cvt_f32_f16_ref;
    k->cvt_q8_0_f32 = cvt_q8_0_f32_ref;
    k->attn_scores = attn_scores_ref;
    k->attn_accum = attn_accum_ref;
    k->attn_scores_f16 = attn_scores_f16_ref;
    k->attn_accum_f16 = attn_accum_f16_ref;
}
