/*
 * test_ops.c — the ops kernels (src/cpu/ops.h) on every ISA this CPU has, against the scalar
 * reference and against naive double-precision computations written here.
 *
 * Bounds (stated once; every check below uses one of them):
 *   exp (via exp_sum)        relative 2.4e-7 (2 ulp) vs double on [-87, 88] (measured 7.9e-8 over
 *                            33M points); 0 below ln FLT_MIN
 *   rmsnorm                  |err| <= 2e-6 |want| + 1e-7          (f32 sum of squares)
 *   softmax                  |err| <= 2e-6 |want| + 1e-9
 *   silu, swiglu             |err| <= 1e-6 |want| + 1e-30         (exp + one division)
 *   add, mul, scale, acc     bit-exact vs the reference (one IEEE operation each)
 *   axpy                     |err| <= 2^-23 (|a x| + |y|)          (fma vs mul+add)
 *   argmax, top-K, F16->F32  exact
 *   rope                     pos 0 exact identity; NEOX == permuted NORM bit for bit;
 *                            |err| <= 2e-6 (|x| scale) vs double angles
 *   attention                |err| <= 1e-5 vs a two-pass softmax attention in double
 *                            (inputs ~ U(-1, 1)); bit-identical for any thread split
 */
#include "spex.h"
#include "cpu/api.h"
#include "test.h"
#include "core/fp16.h"
#include "cpu/ops.h"
#include "tensor/api.h"

#include <float.h>
#include <stdint.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static const spex_ops_kernels *g_k[4];
static int g_nk;

static void load_tables(void) {
    g_nk = 0;
    for (int i = 0; i < 4; i++) {
        const spex_ops_kernels *k = spex_ops_for((spex_isa)i);
        if (k) g_k[g_nk++] = k;
    }
}

#define FOR_EACH_ISA(k)                                                                 \
    load_tables();                                                                      \
    for (int ti_ = 0; ti_ < g_nk; ti_++)                                                \
        for (const spex_ops_kernels *k = g_k[ti_]; k; k = NULL)

#define ISA(k) spex_isa_name((k)->isa)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / 16777216.0f; }
static void fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(lo, hi);
}

static const int64_t SIZES[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 255, 257, 1000, 4099};
#define N_SIZES ((int)(sizeof SIZES / sizeof SIZES[0]))
#define MAXN 4099

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

TEST(ops_tables) {
    const spex_isa was = spex_cpu_isa();
    load_tables();
    CHECK(g_nk >= 1);
    CHECK(spex_ops_for(SPEX_ISA_SCALAR) != NULL);
    for (int i = 0; i < g_nk; i++) {
        const spex_ops_kernels *k = g_k[i];
        CHECK(k->rmsnorm && k->rope && k->softmax && k->silu && k->swiglu && k->add && k->mul && k->scale &&
              k->acc && k->axpy && k->argmax && k->topk && k->max && k->exp_sum && k->cvt_f16_f32 &&
              k->attn_scores && k->attn_accum && k->attn_scores_f16 && k->attn_accum_f16);
        /* spex_ops_get follows spex_cpu_set_isa */
        CHECK_OK(spex_cpu_set_isa(k->isa));
        CHECK(spex_ops_get() == k);
        printf("  isa %s available\n", ISA(k));
    }
    CHECK_OK(spex_cpu_set_isa(was));
}

/* ---- exp ------------------------------------------------------------------------------------ */

TEST(ops_exp_accuracy) {
    enum { N = 40000 };
    static float x[N], y[N];
    FOR_EACH_ISA(k) {
        for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * (float)i / (N - 1);
        memcpy(y, x, sizeof x);
        k->exp_sum(y, N, 0.0f);
        double max_rel = 0.0;
        for (int i = 0; i < N; i++) {
            double want = exp((double)x[i]), rel = fabs(y[i] - want) / want;
            if (rel > max_rel) max_rel = rel;
        }
        printf("  %s exp: max relative error %.3g (%.2f ulp) on [-87, 88]\n", ISA(k), max_rel, max_rel / 1.1920929e-7);
        CHECK_MSG(max_rel <= 2.4e-7, "%s exp rel err %g", ISA(k), max_rel);
        /* the returned sum (on a range where it fits a float), with m != 0 */
        for (int n = 1; n <= 1000; n += 37) {
            fill(x, n, -20.0f, 20.0f);
            double want_sum = 0.0;
            for (int i = 0; i < n; i++) want_sum += exp((double)x[i] - 3.0);
            float got = k->exp_sum(x, n, 3.0f);
            CHECK_MSG(fabs(got - want_sum) <= 1e-6 * want_sum, "%s exp sum n=%d: %.9g vs %.9g", ISA(k), n, got, want_sum);
        }
        /* -inf, far below the range, m shifts, tail lengths */
        float z[5] = {-INFINITY, -200.0f, -88.0f, 0.0f, 3.0f};
        float s = k->exp_sum(z, 5, 1.0f);
        CHECK_MSG(z[0] == 0.0f && z[1] == 0.0f && z[2] >= 0.0f && z[2] < FLT_MIN, "%s exp underflow: %g %g %g", ISA(k), z[0], z[1], z[2]);
        CHECK_NEAR(z[3], exp(-1.0), 2.4e-7 * exp(-1.0));
        CHECK_NEAR(z[4], exp(2.0), 2.4e-7 * exp(2.0));
        CHECK_NEAR(s, exp(-1.0) + exp(2.0), 1e-6 * s);
    }
}

/* ---- rmsnorm -------------------------------------------------------------------------------- */

TEST(ops_rmsnorm) {
    static float x[MAXN], w[MAXN], out[MAXN], ref[MAXN];
    FOR_EACH_ISA(k) {
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = SIZES[si];
            fill(x, n, -3.0f, 3.0f);
            fill(w, n, 0.5f, 1.5f);
            for (int wi = 0; wi < 2; wi++) {
                const float *wp = wi ? w : NULL;
                k->rmsnorm(x, wp, out, n, 1e-5f);
                spex_ops_for(SPEX_ISA_SCALAR)->rmsnorm(x, wp, ref, n, 1e-5f);
                double ss = 0;
                for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
                const double r = 1.0 / sqrt(ss / n + 1e-5);
                for (int64_t i = 0; i < n; i++) {
                    const double want = x[i] * r * (wp ? wp[i] : 1.0);
                    CHECK_MSG(fabs(out[i] - want) <= 2e-6 * fabs(want) + 1e-7,
                              "%s rmsnorm n=%lld i=%lld: %.9g vs %.9g", ISA(k), (long long)n, (long long)i, out[i], want);
                    CHECK_MSG(fabs(ref[i] - want) <= 2e-6 * fabs(want) + 1e-7, "scalar rmsnorm");
                }
            }
            /* in place gives the same bits as out of place */
            k->rmsnorm(x, w, out, n, 1e-6f);
            k->rmsnorm(x, w, x, n, 1e-6f);
            CHECK_MSG(!memcmp(x, out, sizeof(float) * n), "%s rmsnorm in place n=%lld", ISA(k), (long long)n);
        }
    }
}

TEST(ops_rmsnorm_rows) {
    enum { ROWS = 5, D = 33, LD = 40 };
    float x[ROWS * LD], w[D], out[ROWS * LD], one[D];
    fill(x, ROWS * LD, -2.0f, 2.0f);
    fill(w, D, 0.5f, 1.5f);
    FOR_EACH_ISA(k) {
        spex_rmsnorm_rows(k, x, LD, w, out, LD, ROWS, D, 1e-6f);
        for (int r = 0; r < ROWS; r++) {
            k->rmsnorm(x + r * LD, w, one, D, 1e-6f);
            CHECK_MSG(!memcmp(one, out + r * LD, sizeof one), "%s rows r=%d", ISA(k), r);
        }
    }
}

/* ---- softmax -------------------------------------------------------------------------------- */

TEST(ops_softmax) {
    static float x[MAXN], mask[MAXN], y[MAXN];
    static double want[MAXN];
    FOR_EACH_ISA(k) {
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = SIZES[si];
            for (int variant = 0; variant < 3; variant++) {
                /* 0: plain; 1: scale 0.125 + a mask with -inf holes; 2: large values (stability) */
                const float scale = variant == 1 ? 0.125f : 1.0f;
                fill(x, n, variant == 2 ? 500.0f : -10.0f, variant == 2 ? 600.0f : 10.0f);
                for (int64_t i = 0; i < n; i++) mask[i] = (i % 3 == 1) ? -INFINITY : rnd_uniform(-1.0f, 0.0f);
                const float *mp = variant == 1 ? mask : NULL;
                memcpy(y, x, sizeof(float) * n);
                k->softmax(y, n, scale, mp);
                double m = -INFINITY, s = 0;
                for (int64_t i = 0; i < n; i++) {
                    want[i] = (double)x[i] * scale + (mp ? mp[i] : 0.0);
                    if (want[i] > m) m = want[i];
                }
                for (int64_t i = 0; i < n; i++) s += (want[i] = exp(want[i] - m));
                for (int64_t i = 0; i < n; i++) {
                    want[i] /= s;
                    CHECK_MSG(fabs(y[i] - want[i]) <= 2e-6 * want[i] + 1e-9,
                              "%s softmax n=%lld v=%d i=%lld: %.9g vs %.9g", ISA(k), (long long)n, variant,
                              (long long)i, y[i], want[i]);
                    if (mp && mp[i] == -INFINITY) CHECK_MSG(y[i] == 0.0f, "%s masked entry not 0", ISA(k));
                }
            }
        }
        float all_masked[5] = {1, 2, 3, 4, 5}, minf[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        k->softmax(all_masked, 5, 1.0f, minf);
        for (int i = 0; i < 5; i++) CHECK_MSG(all_masked[i] == 0.0f, "%s all-masked row", ISA(k));
        float one = 42.0f;
        k->softmax(&one, 1, 1.0f, NULL);
        CHECK_EQ_INT(one == 1.0f, 1);
    }
}

/* ---- silu / swiglu -------------------------------------------------------------------------- */

TEST(ops_silu_swiglu) {
    static float g[MAXN], u[MAXN], out[MAXN];
    FOR_EACH_ISA(k) {
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = SIZES[si];
            fill(g, n, -20.0f, 20.0f);
            fill(u, n, -2.0f, 2.0f);
            if (n > 4) { g[0] = -100.0f; g[1] = 100.0f; g[2] = 0.0f; g[3] = -90.0f; }
            k->silu(g, out, n);
            for (int64_t i = 0; i < n; i++) {
                const double want = g[i] / (1.0 + exp(-(double)g[i]));
                CHECK_MSG(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-30, "%s silu x=%g: %.9g vs %.9g", ISA(k),
                          g[i], out[i], want);
            }
            k->swiglu(g, u, out, n);
            for (int64_t i = 0; i < n; i++) {
                const double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                CHECK_MSG(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-30, "%s swiglu x=%g: %.9g vs %.9g", ISA(k),
                          g[i], out[i], want);
            }
            k->swiglu(g, u, g, n); /* in place on gate */
            CHECK_MSG(!memcmp(g, out, sizeof(float) * n), "%s swiglu in place", ISA(k));
        }
    }
}

/* ---- add / mul / scale / acc / axpy --------------------------------------------------------- */

TEST(ops_elementwise) {
    static float a[MAXN + 1], b[MAXN + 1], out[MAXN + 1], ref[MAXN + 1], y[MAXN + 1];
    const spex_ops_kernels *s = spex_ops_for(SPEX_ISA_SCALAR);
    FOR_EACH_ISA(k) {
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = SIZES[si];
            fill(a, n, -5.0f, 5.0f);
            fill(b, n, -5.0f, 5.0f);
            k->add(a, b, out, n);
            s->add(a, b, ref, n);
            CHECK_MSG(!memcmp(out, ref, sizeof(float) * n), "%s add n=%lld", ISA(k), (long long)n);
            for (int64_t i = 0; i < n; i++) CHECK(same_bits(ref[i], a[i] + b[i]));
            k->mul(a, b, out, n);
            s->mul(a, b, ref, n);
            CHECK_MSG(!memcmp(out, ref, sizeof(float) * n), "%s mul n=%lld", ISA(k), (long long)n);
            for (int64_t i = 0; i < n; i++) CHECK(same_bits(ref[i], a[i] * b[i]));
            k->scale(a, 0.37f, out, n);
            s->scale(a, 0.37f, ref, n);
            CHECK_MSG(!memcmp(out, ref, sizeof(float) * n), "%s scale n=%lld", ISA(k), (long long)n);
            memcpy(y, a, sizeof(float) * n);
            k->acc(y, b, n);
            for (int64_t i = 0; i < n; i++) CHECK_MSG(same_bits(y[i], a[i] + b[i]), "%s acc", ISA(k));
            memcpy(y, a, sizeof(float) * n);
            k->axpy(y, -1.7f, b, n);
            for (int64_t i = 0; i < n; i++) {
                const double want = (double)a[i] + (double)-1.7f * (double)b[i];
                CHECK_MSG(fabs(y[i] - want) <= 1.2e-7 * (fabs(1.7 * b[i]) + fabs(a[i])), "%s axpy n=%lld", ISA(k),
                          (long long)n);
            }
            /* exact aliasing: out == a */
            memcpy(y, a, sizeof(float) * n);
            k->mul(y, b, y, n);
            s->mul(a, b, ref, n);
            CHECK_MSG(!memcmp(y, ref, sizeof(float) * n), "%s mul in place", ISA(k));
            /* nothing written past n */
            out[n] = 12345.0f;
            k->add(a, b, out, n);
            k->scale(a, 2.0f, out, n);
            CHECK_MSG(out[n] == 12345.0f, "%s wrote past n=%lld", ISA(k), (long long)n);
        }
    }
}

/* ---- max / argmax ---------------------------------------------------------------------------- */

static int64_t naive_argmax(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

TEST(ops_argmax) {
    static float x[MAXN];
    FOR_EACH_ISA(k) {
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = SIZES[si];
            for (int variant = 0; variant < 5; variant++) {
                fill(x, n, -50.0f, 50.0f);
                if (variant == 1) /* coarse values: many ties of the max */
                    for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd_u32() % 4);
                if (variant == 2) x[rnd_u32() % n] = NAN;
                if (variant == 3) x[n - 1] = 1000.0f; /* max in the tail */
                if (variant == 4)
                    for (int64_t i = 0; i < n; i++) x[i] = (i % 2) ? NAN : -INFINITY;
                const int64_t want = naive_argmax(x, n);
                CHECK_MSG(k->argmax(x, n) == want, "%s argmax n=%lld v=%d: %lld vs %lld", ISA(k), (long long)n,
                          variant, (long long)k->argmax(x, n), (long long)want);
                const float m = k->max(x, n);
                CHECK_MSG(m == x[want] || (x[want] != x[want] && m == -INFINITY), "%s max n=%lld v=%d", ISA(k), (long long)n,
                          variant);
            }
        }
        CHECK_EQ_INT(k->argmax(x, 0), 0);
        CHECK(k->max(x, 0) == -INFINITY);
    }
}

/* ---- top-K ----------------------------------------------------------------------------------- */

typedef struct { float v; int32_t i; } kv_pair;

static int pair_cmp(const void *pa, const void *pb) {
    const kv_pair *a = pa, *b = pb;
    float va = a->v != a->v ? -INFINITY : a->v, vb = b->v != b->v ? -INFINITY : b->v;
    if (va != vb) return va > vb ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

TEST(ops_topk) {
    enum { N = 20000 };
    static float x[N];
    static kv_pair sorted[N];
    const int64_t ns[] = {1, 3, 31, 33, 64, 65, 257, 4099, N};
    const int ks[] = {1, 2, 5, 40, 64, 100};
    FOR_EACH_ISA(k) {
        for (int ni = 0; ni < (int)(sizeof ns / sizeof ns[0]); ni++) {
            const int64_t n = ns[ni];
            for (int variant = 0; variant < 4; variant++) {
                fill(x, n, -10.0f, 10.0f);
                if (variant == 1) /* heavy ties */
                    for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd_u32() % 7);
                if (variant == 2) /* ascending: every element beats the threshold */
                    for (int64_t i = 0; i < n; i++) x[i] = (float)i * 0.5f;
                if (variant == 3) /* masked logits: -inf everywhere but a few, one NaN */
                    for (int64_t i = 0; i < n; i++) x[i] = (i % 97 == 5) ? (float)(i % 13) : (i == 7 ? NAN : -INFINITY);
                for (int64_t i = 0; i < n; i++) sorted[i] = (kv_pair){x[i], (int32_t)i};
                qsort(sorted, (size_t)n, sizeof sorted[0], pair_cmp);
                for (int ki = 0; ki < (int)(sizeof ks / sizeof ks[0]); ki++) {
                    int32_t idx[128];
                    float val[128];
                    const int want_k = ks[ki] < n ? ks[ki] : (int)n;
                    int got = k->topk(x, n, ks[ki], idx, val);
                    CHECK_EQ_INT(got, want_k);
                    for (int j = 0; j < got; j++)
                        CHECK_MSG(idx[j] == sorted[j].i && same_bits(val[j], x[idx[j]]),
                                  "%s topk n=%lld k=%d v=%d j=%d: idx %d vs %d", ISA(k), (long long)n, ks[ki], variant, j,
                                  idx[j], sorted[j].i);
                }
            }
        }
        int32_t idx[4];
        float val[4];
        CHECK_EQ_INT(k->topk(x, 0, 4, idx, val), 0);
        CHECK_EQ_INT(k->topk(x, 10, 0, idx, val), 0);
    }
}

/* Top-K in pieces (spex_ops_topk_empty / scan / merge, the drafter head's fused top-K): the
 * row cut into chunks of 16..256 elements dealt to T heaps in increasing order, the heaps
 * merged, equals the sorted reference — unless fewer than k elements exceed -inf, where merge
 * must say so (the caller then falls back to one topk). */
TEST(ops_topk_pieces) {
    enum { N = 20000, T = 3 };
    static float x[N];
    static kv_pair sorted[N];
    const int64_t ns[] = {1, 17, 257, 4099, N};
    const int ks[] = {1, 5, 16, 64};
    for (int ni = 0; ni < (int)(sizeof ns / sizeof ns[0]); ni++) {
        const int64_t n = ns[ni];
        for (int variant = 0; variant < 4; variant++) {
            fill(x, n, -10.0f, 10.0f);
            if (variant == 1)
                for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd_u32() % 7);
            if (variant == 2)
                for (int64_t i = 0; i < n; i++) x[i] = (float)i * 0.5f;
            if (variant == 3)
                for (int64_t i = 0; i < n; i++) x[i] = (i % 97 == 5) ? (float)(i % 13) : (i == 7 ? NAN : -INFINITY);
            int64_t n_real = 0;
            for (int64_t i = 0; i < n; i++) {
                sorted[i] = (kv_pair){x[i], (int32_t)i};
                n_real += x[i] > -INFINITY;
            }
            qsort(sorted, (size_t)n, sizeof sorted[0], pair_cmp);
            for (int ki = 0; ki < (int)(sizeof ks / sizeof ks[0]); ki++) {
                const int k = ks[ki];
                int32_t hidx[T][64], oidx[64];
                float hval[T][64], oval[64];
                for (int t = 0; t < T; t++) spex_ops_topk_empty(hidx[t], hval[t], k);
                for (int64_t o = 0; o < n;) {
                    const int64_t len = 16 * (1 + (int64_t)(rnd_u32() % 16));
                    const int64_t m = n - o < len ? n - o : len;
                    const int t = (int)(rnd_u32() % T);
                    spex_ops_topk_scan(x + o, m, (int32_t)o, k, hidx[t], hval[t]);
                    o += m;
                }
                int32_t in_i[T * 64];
                float in_v[T * 64];
                for (int t = 0; t < T; t++) {
                    memcpy(in_i + t * k, hidx[t], sizeof(int32_t) * (size_t)k);
                    memcpy(in_v + t * k, hval[t], sizeof(float) * (size_t)k);
                }
                const int got = spex_ops_topk_merge(in_i, in_v, T * k, k, oidx, oval);
                const int want = n_real < k ? (int)n_real : k;
                CHECK_MSG(got == want, "pieces n=%lld k=%d v=%d: merge gave %d of %d", (long long)n, k, variant, got,
                          want);
                for (int j = 0; j < got; j++)
                    CHECK_MSG(oidx[j] == sorted[j].i && same_bits(oval[j], x[oidx[j]]),
                              "pieces n=%lld k=%d v=%d j=%d: idx %d vs %d", (long long)n, k, variant, j, oidx[j],
                              sorted[j].i);
            }
        }
    }
}

/* ---- F32 -> F16 ------------------------------------------------------------------------------- */

/* Every ISA's conversion gives spex_f32_to_fp16's bits (NaN: some NaN) on every F16 value, the
 * midpoints between neighbours (ties to even), values just above and below them, overflow and
 * underflow edges, and random floats; unaligned starts and tails, nothing written past n. */
TEST(ops_cvt_f32_f16) {
    enum { N = 3 * 65536 + 2000 };
    static float f[N + 8];
    static uint16_t h[N + 8];
    int64_t n = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const float a = spex_fp16_to_f32((uint16_t)i), b = spex_fp16_to_f32((uint16_t)(i + 1));
        f[n++] = a;
        if (a == a && b == b && !isinf(a) && !isinf(b) && (i & 0x7fffu) != 0x7fffu) {
            const float m = (float)(((double)a + (double)b) / 2);  /* the tie, exact in float */
            f[n++] = m;
            f[n++] = nextafterf(m, (i & 0x8000u) ? -INFINITY : INFINITY);
        }
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    while (n < N) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(s >> 32);
        float x;
        memcpy(&x, &bits, 4);
        f[n++] = x;
    }
    FOR_EACH_ISA(k) {
        for (int off = 0; off < 3; off++) {
            const int64_t m = n - 2 * off - 3;
            h[off + m] = 0x1234;
            k->cvt_f32_f16(f + off, h + off, m);
            CHECK_MSG(h[off + m] == 0x1234, "%s cvt wrote past n", ISA(k));
            for (int64_t i = off; i < off + m; i++) {
                const uint16_t want = spex_f32_to_fp16(f[i]);
                const bool nan = (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu);
                const bool got_nan = (h[i] & 0x7c00u) == 0x7c00u && (h[i] & 0x3ffu);
                CHECK_MSG(h[i] == want || (nan && got_nan), "%s cvt %a: 0x%04x vs 0x%04x", ISA(k), (double)f[i], h[i],
                          want);
            }
        }
    }
}

/* ---- F16 -> F32 ------------------------------------------------------------------------------- */

TEST(ops_cvt_f16_exhaustive) {
    static uint16_t h[65536 + 5];
    static float f[65536 + 5];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    FOR_EACH_ISA(k) {
        for (int off = 0; off < 3; off++) { /* unaligned starts and tail lengths */
            const int64_t n = 65536 - 2 * off - 3;
            f[off + n] = 7.0f;
            k->cvt_f16_f32(h + off, f + off, n);
            CHECK_MSG(f[off + n] == 7.0f, "%s cvt wrote past n", ISA(k));
            for (int64_t i = off; i < off + n; i++) {
                const float want = spex_fp16_to_f32(h[i]);
                CHECK_MSG(same_bits(f[i], want) || (want != want && f[i] != f[i]), "%s cvt 0x%04x: %g vs %g", ISA(k),
                          h[i], f[i], want);
            }
        }
    }
}

/* ---- rope ------------------------------------------------------------------------------------- */

TEST(ops_rope_known_values) {
    enum { HD = 64, NH = 2 };
    const float base = 10000.0f;
    FOR_EACH_ISA(k) {
        for (int mode = 0; mode < 2; mode++) {
            const spex_rope_mode m = mode ? SPEX_ROPE_NEOX : SPEX_ROPE_NORM;
            for (int n_rot = 16; n_rot <= HD; n_rot += 48) { /* partial (16) and full (64) */
                const int half = n_rot / 2;
                float x[NH * HD], x0[NH * HD];
                fill(x, NH * HD, -1.0f, 1.0f);
                memcpy(x0, x, sizeof x);
                spex_rope(k, x, NH, HD, n_rot, m, 0, base, 1.0f);
                CHECK_MSG(!memcmp(x, x0, sizeof x), "%s rope pos 0 is not the identity", ISA(k));
                /* pos 1 on unit vectors: the first dim of pair i goes to (cos th_i, sin th_i)
                 * in the pair's two slots; th_i = base^(-2i/n_rot). */
                for (int i = 0; i < half; i++) {
                    const int ia = mode ? i : 2 * i, ib = mode ? i + half : 2 * i + 1;
                    memset(x, 0, sizeof x);
                    x[HD + ia] = 1.0f; /* head 1 */
                    spex_rope(k, x, NH, HD, n_rot, m, 1, base, 1.0f);
                    const double th = pow(base, -2.0 * i / n_rot);
                    for (int j = 0; j < NH * HD; j++) {
                        const double want = j == HD + ia ? cos(th) : j == HD + ib ? sin(th) : 0.0;
                        CHECK_MSG(fabs(x[j] - want) <= 1e-7, "%s rope mode %d n_rot %d pair %d dim %d: %.9g vs %.9g",
                                  ISA(k), mode, n_rot, i, j, x[j], want);
                    }
                }
            }
        }
    }
}

/* Every ISA's rope gives the reference's bits (the SIMD ones round each product and sum once,
 * as the scalar code does), for both modes, partial rotations and n_rot/2 not a multiple of
 * the vector width (tails). */
TEST(ops_rope_simd_bits_equal_ref) {
    enum { HD = 128, NH = 3 };
    const spex_ops_kernels *ref = spex_ops_for(SPEX_ISA_SCALAR);
    static const int nrots[] = {2, 8, 16, 24, 34, 64, 96, 128};
    FOR_EACH_ISA(k) {
        for (int mode = 0; mode < 2; mode++)
            for (size_t r = 0; r < sizeof nrots / sizeof nrots[0]; r++) {
                const int n_rot = nrots[r];
                float x[NH * HD], a[NH * HD], b[NH * HD], cs[HD];
                fill(x, NH * HD, -4.0f, 4.0f);
                spex_rope_cache(cs, (int64_t)(rnd_u32() % 100000), n_rot, 1000000.0f, 1.0f);
                memcpy(a, x, sizeof x);
                memcpy(b, x, sizeof x);
                const spex_rope_mode m = mode ? SPEX_ROPE_NEOX : SPEX_ROPE_NORM;
                ref->rope(a, NH, HD, n_rot, m, cs);
                k->rope(b, NH, HD, n_rot, m, cs);
                CHECK_MSG(!memcmp(a, b, sizeof a), "%s rope mode %d n_rot %d differs from the reference", ISA(k), mode,
                          n_rot);
            }
    }
}

/* The two-step cache (frequencies once, then each position) gives the bits of spex_rope_cache,
 * which are those of the angle computed in double, rounded once. */
TEST(ops_rope_cache_from_frequencies) {
    static const int nrots[] = {2, 34, 64, 128};
    static const int64_t poss[] = {0, 1, 37, 4095, 131071};
    for (size_t r = 0; r < sizeof nrots / sizeof nrots[0]; r++) {
        const int n = nrots[r];
        double inv[64];
        spex_rope_freqs(inv, n, 1000000.0f);
        for (size_t q = 0; q < sizeof poss / sizeof poss[0]; q++) {
            float a[128], b[128];
            spex_rope_cache(a, poss[q], n, 1000000.0f, 0.5f);
            spex_rope_cache_freqs(b, poss[q], n, 0.5f, inv);
            CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)n), "n_rot %d pos %lld", n, (long long)poss[q]);
            for (int i = 0; i < n / 2; i++) {
                const double th = (double)poss[q] * 0.5 * pow(1000000.0, -2.0 * i / n);
                CHECK(b[2 * i] == (float)cos(th) && b[2 * i + 1] == (float)sin(th));
            }
        }
    }
}

TEST(ops_rope_neox_vs_norm_and_double) {
    enum { HD = 128, NH = 3, NROT = 96 };
    const int half = NROT / 2;
    FOR_EACH_ISA(k) {
        float x[NH * HD], norm_in[NH * HD], neox[NH * HD], cs[NROT];
        fill(x, NH * HD, -1.0f, 1.0f);
        const int64_t pos = 12345;
        const float scale = 0.25f;
        spex_rope_cache(cs, pos, NROT, 1000000.0f, scale);
        /* NEOX(x) equals NORM applied to x with its pairs interleaved, then de-interleaved. */
        memcpy(neox, x, sizeof x);
        k->rope(neox, NH, HD, NROT, SPEX_ROPE_NEOX, cs);
        memcpy(norm_in, x, sizeof x);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < half; i++) {
                norm_in[h * HD + 2 * i] = x[h * HD + i];
                norm_in[h * HD + 2 * i + 1] = x[h * HD + i + half];
            }
        k->rope(norm_in, NH, HD, NROT, SPEX_ROPE_NORM, cs);
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < half; i++) {
                CHECK(same_bits(neox[h * HD + i], norm_in[h * HD + 2 * i]));
                CHECK(same_bits(neox[h * HD + i + half], norm_in[h * HD + 2 * i + 1]));
            }
            for (int j = NROT; j < HD; j++) CHECK_MSG(same_bits(neox[h * HD + j], x[h * HD + j]), "dims past n_rot changed");
        }
        /* against angles computed in double at a large position (float angles would be off) */
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < half; i++) {
                const double th = (double)pos * scale * pow(1000000.0, -2.0 * i / NROT);
                const double a = x[h * HD + i], b = x[h * HD + i + half];
                CHECK_NEAR(neox[h * HD + i], a * cos(th) - b * sin(th), 2e-6);
                CHECK_NEAR(neox[h * HD + i + half], a * sin(th) + b * cos(th), 2e-6);
            }
        /* NORM and NEOX really differ on the same input */
        float normx[NH * HD];
        memcpy(normx, x, sizeof x);
        k->rope(normx, NH, HD, NROT, SPEX_ROPE_NORM, cs);
        CHECK(memcmp(normx, neox, sizeof x) != 0);
    }
}

/* ---- attention blocks ------------------------------------------------------------------------ */

TEST(ops_attn_blocks) {
    enum { NQ = 7, NK = 37, DMAX = 257 };
    static float q[NQ * DMAX], kk[NK * DMAX], s[NQ * NK], s_ref[NQ * NK], acc[NQ * DMAX], acc_ref[NQ * DMAX];
    const int ds[] = {1, 3, 8, 17, 33, 64, 128, 255, 256, 257};
    const spex_ops_kernels *sc = spex_ops_for(SPEX_ISA_SCALAR);
    FOR_EACH_ISA(k) {
        for (int di = 0; di < (int)(sizeof ds / sizeof ds[0]); di++) {
            const int d = ds[di];
            fill(q, NQ * DMAX, -1.0f, 1.0f);
            fill(kk, NK * DMAX, -1.0f, 1.0f);
            for (int nq = 1; nq <= NQ; nq += 3)
                for (int nk = 1; nk <= NK; nk += 9) {
                    /* read ahead as over a cache (past the arrays' ends too: prefetches) */
                    k->attn_scores(nq, q, DMAX, nk, kk, DMAX, d, s, NK, SPEX_ATTN_AHEAD);
                    sc->attn_scores(nq, q, DMAX, nk, kk, DMAX, d, s_ref, NK, 0);
                    for (int r = 0; r < nq; r++)
                        for (int t = 0; t < nk; t++) {
                            double want = 0, mag = 0;
                            for (int i = 0; i < d; i++) {
                                want += (double)q[r * DMAX + i] * kk[t * DMAX + i];
                                mag += fabs((double)q[r * DMAX + i] * kk[t * DMAX + i]);
                            }
                            CHECK_MSG(fabs(s[r * NK + t] - want) <= 1e-6 * mag + 1e-30, "%s scores d=%d", ISA(k), d);
                            CHECK(fabs(s_ref[r * NK + t] - want) <= 1e-6 * mag + 1e-30);
                        }
                    /* a score never depends on how many rows / keys share the call */
                    if (nq > 1 && nk > 1) {
                        float one;
                        k->attn_scores(1, q + (nq - 1) * DMAX, DMAX, 1, kk + (nk - 1) * DMAX, DMAX, d, &one, 1, 0);
                        CHECK_MSG(same_bits(one, s[(nq - 1) * NK + nk - 1]), "%s score depends on blocking", ISA(k));
                    }
                    fill(acc, NQ * DMAX, -1.0f, 1.0f);
                    memcpy(acc_ref, acc, sizeof acc);
                    fill(s, NQ * NK, 0.0f, 1.0f);
                    k->attn_accum(nq, acc, DMAX, s, NK, nk, kk, DMAX, d, SPEX_ATTN_AHEAD);
                    for (int r = 0; r < nq; r++)
                        for (int i = 0; i < d; i++) {
                            double want = acc_ref[r * DMAX + i], mag = fabs(want);
                            for (int t = 0; t < nk; t++) {
                                want += (double)s[r * NK + t] * kk[t * DMAX + i];
                                mag += fabs((double)s[r * NK + t] * kk[t * DMAX + i]);
                            }
                            CHECK_MSG(fabs(acc[r * DMAX + i] - want) <= 1e-6 * mag + 1e-30, "%s accum d=%d", ISA(k), d);
                        }
                    for (int i = d; i < DMAX; i++) CHECK_MSG(same_bits(acc[i], acc_ref[i]), "%s accum wrote past d", ISA(k));
                }
        }
    }
}

/* The F16 twins read rows in place with a stride (as the cache is laid out) and give the bits
 * of converting the rows first and running the f32 kernels of the same table. */
TEST(ops_attn_blocks_f16_equal_converted) {
    enum { NQ = 11, NK = 37, DMAX = 257, LD = DMAX + 6 };
    static float q[NQ * DMAX], kf[NK * LD], s[NQ * NK], s_ref[NQ * NK], acc[NQ * DMAX], acc_ref[NQ * DMAX];
    static uint16_t kh[NK * LD];
    const int ds[] = {1, 7, 8, 16, 17, 33, 64, 80, 128, 255, 257};
    FOR_EACH_ISA(k) {
        for (int di = 0; di < (int)(sizeof ds / sizeof ds[0]); di++) {
            const int d = ds[di];
            fill(q, NQ * DMAX, -1.0f, 1.0f);
            fill(kf, NK * LD, -2.0f, 2.0f);
            for (int i = 0; i < NK * LD; i++) kh[i] = spex_f32_to_fp16(kf[i]);
            for (int i = 0; i < NK * LD; i++) kf[i] = spex_fp16_to_f32(kh[i]); /* the converted rows */
            for (int nq = 1; nq <= NQ; nq += 2)
                for (int nk = 1; nk <= NK; nk += 6) {
                    /* with and without read-ahead: a prefetch changes no bit */
                    k->attn_scores_f16(nq, q, DMAX, nk, kh, LD, d, s, NK, SPEX_ATTN_AHEAD);
                    k->attn_scores(nq, q, DMAX, nk, kf, LD, d, s_ref, NK, 0);
                    bool same = true;
                    for (int r = 0; r < nq; r++)
                        for (int t = 0; t < nk; t++) same &= same_bits(s[r * NK + t], s_ref[r * NK + t]);
                    CHECK_MSG(same, "%s scores_f16 d=%d nq=%d nk=%d", ISA(k), d, nq, nk);
                    fill(acc, NQ * DMAX, -1.0f, 1.0f);
                    memcpy(acc_ref, acc, sizeof acc);
                    fill(s, NQ * NK, 0.0f, 1.0f);
                    k->attn_accum_f16(nq, acc, DMAX, s, NK, nk, kh, LD, d, SPEX_ATTN_AHEAD);
                    k->attn_accum(nq, acc_ref, DMAX, s, NK, nk, kf, LD, d, 0);
                    CHECK_MSG(memcmp(acc, acc_ref, sizeof acc) == 0, "%s accum_f16 d=%d nq=%d nk=%d", ISA(k), d, nq,
                              nk);
                }
        }
    }
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct attn_case {
    const char *name;
    int n_q, n_kv, n_head, n_head_kv, hd;
    bool causal;
    int window;
    spex_type type;
    int pos_mode; /* 0: kv_pos NULL, q at the end; 1: explicit shuffled kv_pos with empty slots; 2: q_pos mid */
    bool symmetric; /* window_symmetric: with window > 0 also hide kv positions >= q + window */
} attn_case;

/* Naive two-pass softmax attention in double over the same (F16-decoded) values. */
static void naive_attention(const attn_case *c, const float *q, int64_t qs, const float *kf, const float *vf,
                            const int32_t *q_pos, const int32_t *kv_pos, double *out) {
    const int G = c->n_head / c->n_head_kv;
    const double scale = 1.0 / sqrt((double)c->hd);
    double *s = malloc(sizeof(double) * (c->n_kv + 1));
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < c->n_head; h++) {
            const int hk = h / G;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < c->n_kv; j++) {
                const int64_t kp = kv_pos ? kv_pos[j] : j, qp = q_pos[i];
                bool vis = kp >= 0 && (!c->causal || kp <= qp) && (c->window <= 0 || kp > qp - c->window);
                if (c->window > 0 && c->symmetric && kp >= qp + c->window) vis = false; /* |q - k| < W */
                s[j] = -INFINITY;
                if (!vis) continue;
                double d = 0;
                for (int e = 0; e < c->hd; e++)
                    d += (double)q[i * qs + h * c->hd + e] * kf[((int64_t)j * c->n_head_kv + hk) * c->hd + e];
                s[j] = d * scale;
                if (s[j] > m) m = s[j];
            }
            double *o = out + ((int64_t)i * c->n_head + h) * c->hd;
            for (int e = 0; e < c->hd; e++) o[e] = 0;
            if (m == -INFINITY) continue;
            for (int j = 0; j < c->n_kv; j++) sum += (s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - m));
            for (int j = 0; j < c->n_kv; j++)
                if (s[j] != 0)
                    for (int e = 0; e < c->hd; e++)
                        o[e] += s[j] / sum * vf[((int64_t)j * c->n_head_kv + c->hd * 0 + hk) * c->hd + e];
        }
    free(s);
}

static void run_attn_case(const attn_case *c) {
    const int qrow = c->n_head * c->hd, kvrow = c->n_head_kv * c->hd;
    const int64_t qs = qrow + 5, os = qrow + 3;          /* padded row strides */
    const int kv_pad = 4;                                /* elements of padding per kv row */
    const size_t es = c->type == SPEX_TYPE_F16 ? 2 : 4;
    const size_t kstride = (size_t)(kvrow + kv_pad) * es;
    float *q = malloc(sizeof(float) * (size_t)c->n_q * qs);
    float *kf = malloc(sizeof(float) * ((size_t)c->n_kv * kvrow + 1));
    float *vf = malloc(sizeof(float) * ((size_t)c->n_kv * kvrow + 1));
    uint8_t *kraw = malloc(kstride * (size_t)c->n_kv + 1), *vraw = malloc(kstride * (size_t)c->n_kv + 1);
    const size_t hm_bytes = (size_t)c->n_head_kv * (size_t)(c->n_kv + 1) * (size_t)c->hd * es;
    uint8_t *khm = malloc(hm_bytes), *vhm = malloc(hm_bytes);
    float *out = malloc(sizeof(float) * (size_t)c->n_q * os), *out2 = malloc(sizeof(float) * (size_t)c->n_q * os);
    double *want = malloc(sizeof(double) * (size_t)c->n_q * qrow);
    int32_t *q_pos = malloc(sizeof(int32_t) * c->n_q), *kv_pos = malloc(sizeof(int32_t) * (c->n_kv + 1));
    CHECK(q && kf && vf && kraw && vraw && khm && vhm && out && out2 && want && q_pos && kv_pos);

    fill(q, (int64_t)c->n_q * qs, -1.0f, 1.0f);
    for (int j = 0; j < c->n_kv; j++)
        for (int e = 0; e < kvrow; e++) {
            float kvv[2] = {rnd_uniform(-1.0f, 1.0f), rnd_uniform(-1.0f, 1.0f)};
            for (int w = 0; w < 2; w++) {
                uint8_t *raw = (w ? vraw : kraw) + (size_t)j * kstride;
                float *dst = (w ? vf : kf) + (size_t)j * kvrow + e;
                if (c->type == SPEX_TYPE_F16) {
                    spex_fp16 h = spex_f32_to_fp16(kvv[w]);
                    memcpy(raw + (size_t)e * 2, &h, 2);
                    *dst = spex_fp16_to_f32(h);
                } else {
                    memcpy(raw + (size_t)e * 4, &kvv[w], 4);
                    *dst = kvv[w];
                }
            }
        }
    /* positions */
    for (int j = 0; j < c->n_kv; j++) kv_pos[j] = j;
    if (c->pos_mode == 1) { /* shuffled slots, every 5th empty */
        for (int j = c->n_kv - 1; j > 0; j--) {
            int r = (int)(rnd_u32() % (uint32_t)(j + 1)), t = kv_pos[j];
            kv_pos[j] = kv_pos[r];
            kv_pos[r] = t;
        }
        for (int j = 0; j < c->n_kv; j += 5) kv_pos[j] = -1;
    }
    for (int i = 0; i < c->n_q; i++)
        q_pos[i] = c->pos_mode == 2 ? c->n_kv / 3 + i : c->n_kv - c->n_q + i;

    naive_attention(c, q, qs, kf, vf, q_pos, c->pos_mode == 1 ? kv_pos : NULL, want);

    spex_attn_args a = {
        .n_q = c->n_q, .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->hd,
        .q = q, .q_stride = qs, .q_pos = q_pos,
        .kv_type = c->type, .n_kv = c->n_kv, .k = kraw, .v = vraw, .k_stride = kstride, .v_stride = kstride,
        .kv_pos = c->pos_mode == 1 ? kv_pos : NULL,
        .scale = 0.0f, .causal = c->causal, .window = c->window, .window_symmetric = c->symmetric,
        .out = out, .out_stride = os,
    };
    spex_error err = {0};
    CHECK_MSG(spex_attn_check(&a, &err) == SPEX_OK, "%s: %s", c->name, err.msg);
    const size_t nscr = spex_attn_scratch_floats(&a);
    float *scratch = malloc(sizeof(float) * nscr);
    CHECK(scratch);
    FOR_EACH_ISA(k) {
        for (size_t i = 0; i < (size_t)c->n_q * os; i++) out[i] = NAN;
        a.out = out;
        spex_attention(k, &a, 0, 1, scratch);
        double max_err = 0;
        for (int i = 0; i < c->n_q; i++)
            for (int e = 0; e < qrow; e++) {
                double err_ie = fabs(out[i * os + e] - want[(int64_t)i * qrow + e]);
                if (!(err_ie <= max_err)) max_err = err_ie; /* NaN sticks */
            }
        CHECK_MSG(max_err <= 1e-5, "%s %s: max error %g", ISA(k), c->name, max_err);
        /* three threads (run one after another) give the same bits */
        a.out = out2;
        for (int t = 0; t < 3; t++) spex_attention(k, &a, t, 3, scratch);
        for (int i = 0; i < c->n_q; i++)
            CHECK_MSG(!memcmp(out + i * os, out2 + i * os, sizeof(float) * qrow), "%s %s: split changes bits", ISA(k),
                      c->name);
        /* the same cache head-major (each kv head's rows contiguous, a row of padding between
         * heads, as a context's cache with capacity above n_kv) gives the same bits */
        spex_attn_args h = a;
        const size_t hrow = (size_t)c->hd * es, hstride = (size_t)(c->n_kv + 1) * hrow;
        h.k = khm, h.v = vhm, h.k_stride = h.v_stride = hrow, h.k_head_stride = h.v_head_stride = hstride;
        for (int hk = 0; hk < c->n_head_kv; hk++)
            for (int j = 0; j < c->n_kv; j++) {
                memcpy(khm + hk * hstride + j * hrow, kraw + j * kstride + hk * hrow, hrow);
                memcpy(vhm + hk * hstride + j * hrow, vraw + j * kstride + hk * hrow, hrow);
            }
        CHECK_MSG(spex_attn_check(&h, &err) == SPEX_OK, "%s head-major: %s", c->name, err.msg);
        h.out = out2;
        for (int t = 0; t < 2; t++) spex_attention(k, &h, t, 2, scratch);
        for (int i = 0; i < c->n_q; i++)
            CHECK_MSG(!memcmp(out + i * os, out2 + i * os, sizeof(float) * qrow), "%s %s: head-major changes bits",
                      ISA(k), c->name);
    }
    free(scratch);
    free(khm); free(vhm);
    free(q); free(kf); free(vf); free(kraw); free(vraw); free(out); free(out2); free(want);
    free(q_pos); free(kv_pos);
}

TEST(ops_attention) {
    const attn_case cases[] = {
        {"decode causal f32 gqa4", 1, 100, 8, 2, 64, true, 0, SPEX_TYPE_F32, 0, false},
        {"decode causal f16 hd128", 1, 257, 4, 4, 128, true, 0, SPEX_TYPE_F16, 0, false},
        {"verify 17 rows causal f16 gqa2", 17, 75, 4, 2, 128, true, 0, SPEX_TYPE_F16, 0, false},
        {"non-causal f16 hd256 gqa3", 5, 33, 6, 2, 256, false, 0, SPEX_TYPE_F16, 0, false},
        {"window 8 causal f32", 20, 70, 2, 1, 64, true, 8, SPEX_TYPE_F32, 0, false},
        {"window 5 non-causal f16", 3, 31, 2, 2, 64, false, 5, SPEX_TYPE_F16, 2, false},
        {"odd head_dim 40 causal f32", 9, 64, 3, 1, 40, true, 0, SPEX_TYPE_F32, 0, false},
        {"head_dim 3", 2, 9, 2, 1, 3, false, 0, SPEX_TYPE_F32, 0, false},
        {"shuffled slots causal f16", 6, 90, 4, 2, 64, true, 0, SPEX_TYPE_F16, 1, false},
        {"shuffled slots window f32", 6, 90, 4, 1, 64, true, 16, SPEX_TYPE_F32, 1, false},
        {"queries mid-cache causal", 33, 120, 2, 2, 64, true, 0, SPEX_TYPE_F32, 2, false},
        {"single kv row", 1, 1, 2, 1, 64, true, 0, SPEX_TYPE_F16, 0, false},
        /* the drafter's |q - k| < W rule (dflash2.md §9): queries mid-cache see W-1 rows each side */
        {"symmetric window 6 non-causal gqa2", 8, 70, 4, 2, 64, false, 6, SPEX_TYPE_F32, 2, true},
        /* several tiles (T = SPEX_ATTN_TILE kv rows): the online softmax across tiles, rows that
         * straddle a tile edge, tiles nobody sees (skipped) and partly visible ones */
        {"verify 17 rows across a tile edge f16", 17, 2 * SPEX_ATTN_TILE + 10, 4, 2, 128, true, 0, SPEX_TYPE_F16, 0,
         false},
        {"window 8 causal f32, 3 tiles", 20, 2 * SPEX_ATTN_TILE + 70, 2, 1, 64, true, 8, SPEX_TYPE_F32, 0, false},
        {"window 8 mid-cache at a tile edge", 20, 3 * SPEX_ATTN_TILE, 2, 1, 64, true, 8, SPEX_TYPE_F32, 2, false},
        {"shuffled slots window f16, 2 tiles", 6, SPEX_ATTN_TILE + 90, 4, 2, 64, true, 16, SPEX_TYPE_F16, 1, false},
        {"symmetric window 6 at a tile edge", 8, 3 * SPEX_ATTN_TILE, 4, 2, 64, false, 6, SPEX_TYPE_F32, 2, true},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        run_attn_case(&cases[i]);
        if (test_failed_) return;
    }
}

TEST(ops_attention_edge_cases) {
    /* A query that sees nothing (its causal past is all empty slots) gets zeros; n_kv = 0 too. */
    float q[2 * 8], out[2 * 8], kv[4 * 8], scratch[4096];
    int32_t q_pos[2] = {0, 1}, kv_pos[4] = {-1, 5, 6, 7};
    fill(q, 16, -1.0f, 1.0f);
    fill(kv, 32, -1.0f, 1.0f);
    spex_attn_args a = {.n_q = 2, .n_head = 1, .n_head_kv = 1, .head_dim = 8, .q = q, .q_stride = 8,
                        .q_pos = q_pos, .kv_type = SPEX_TYPE_F32, .n_kv = 4, .k = kv, .v = kv, .k_stride = 32,
                        .v_stride = 32, .kv_pos = kv_pos, .causal = true, .out = out, .out_stride = 8};
    CHECK(spex_attn_scratch_floats(&a) <= 4096);
    FOR_EACH_ISA(k) {
        for (int i = 0; i < 16; i++) out[i] = NAN;
        spex_attention(k, &a, 0, 1, scratch);
        for (int i = 0; i < 16; i++) CHECK_MSG(out[i] == 0.0f, "%s: unseen query not zero", ISA(k));
        a.n_kv = 0;
        for (int i = 0; i < 16; i++) out[i] = NAN;
        spex_attention(k, &a, 0, 1, scratch);
        for (int i = 0; i < 16; i++) CHECK(out[i] == 0.0f);
        a.n_kv = 4;
    }
    /* argument checks */
    spex_error err = {0};
    spex_attn_args b = a;
    b.n_head = 3, b.n_head_kv = 2;
    CHECK(spex_attn_check(&b, &err) == SPEX_ERR_INVALID_ARG && strstr(err.msg, "multiple"));
    b = a;
    b.kv_type = SPEX_TYPE_Q8_0;
    CHECK(spex_attn_check(&b, &err) == SPEX_ERR_UNSUPPORTED);
    b = a;
    b.k_stride = 16;
    CHECK(spex_attn_check(&b, &err) == SPEX_ERR_INVALID_ARG);
    b = a;
    b.q_pos = NULL;
    CHECK(spex_attn_check(&b, &err) == SPEX_ERR_INVALID_ARG);
    b.causal = false;
    CHECK_OK(spex_attn_check(&b, &err));
}

/* cvt_q8_0_f32 of every ISA gives the bits of spex_dequantize_row_ref; attention over a Q8_0
 * cache (rows with the heads side by side, and head-major with a gap between heads) gives the
 * bits of the same attention over the cache dequantized to f32 first (the old path, and the
 * definition), decode and verify-sized, on every ISA and split over threads. */
TEST(ops_attention_q8_0) {
    enum { NKV = 75, HKV = 2, G = 2, D = 64, H = HKV * G, KVD = HKV * D, NB = KVD / 32 };
    const size_t row = (size_t)NB * 34, hrow = (size_t)(D / 32) * 34, hstride = (size_t)(NKV + 3) * hrow;
    static float kf[NKV * KVD], vf[NKV * KVD], kd[NKV * KVD], vd[NKV * KVD], q[16 * H * D], want[16 * H * D],
        got[16 * H * D], scratch[1 << 16], tmp[KVD];
    static uint8_t kq[NKV * NB * 34], vq[NKV * NB * 34], khm[HKV * (NKV + 3) * (D / 32) * 34],
        vhm[HKV * (NKV + 3) * (D / 32) * 34];
    fill(kf, NKV * KVD, -3.0f, 3.0f);
    fill(vf, NKV * KVD, -2.0f, 2.0f);
    fill(q, 16 * H * D, -1.0f, 1.0f);
    for (int t = 0; t < NKV; t++) {
        spex_quantize_row_ref(SPEX_TYPE_Q8_0, kf + t * KVD, kq + t * row, KVD);
        spex_quantize_row_ref(SPEX_TYPE_Q8_0, vf + t * KVD, vq + t * row, KVD);
        spex_dequantize_row_ref(SPEX_TYPE_Q8_0, kq + t * row, kd + t * KVD, KVD);
        spex_dequantize_row_ref(SPEX_TYPE_Q8_0, vq + t * row, vd + t * KVD, KVD);
        for (int h = 0; h < HKV; h++) {
            memcpy(khm + h * hstride + t * hrow, kq + t * row + h * hrow, hrow);
            memcpy(vhm + h * hstride + t * hrow, vq + t * row + h * hrow, hrow);
        }
    }
    int32_t q_pos[16];
    FOR_EACH_ISA(k) {
        for (int t = 0; t < NKV; t++) {
            k->cvt_q8_0_f32(kq + t * row, tmp, KVD);
            CHECK_MSG(!memcmp(tmp, kd + t * KVD, sizeof tmp), "%s: cvt_q8_0_f32 row %d differs from the reference",
                      ISA(k), t);
        }
        for (int nq = 1; nq <= 16; nq += 15) {
            for (int i = 0; i < nq; i++) q_pos[i] = NKV - nq + i;
            spex_attn_args f = {.n_q = nq, .n_head = H, .n_head_kv = HKV, .head_dim = D, .q = q, .q_stride = H * D,
                                .q_pos = q_pos, .kv_type = SPEX_TYPE_F32, .n_kv = NKV, .k = kd, .v = vd,
                                .k_stride = 4 * KVD, .v_stride = 4 * KVD, .causal = true, .out = want,
                                .out_stride = H * D};
            spex_attn_args r = f, m = f;
            r.kv_type = m.kv_type = SPEX_TYPE_Q8_0;
            r.k = kq, r.v = vq, r.k_stride = r.v_stride = row;
            m.k = khm, m.v = vhm, m.k_stride = m.v_stride = hrow, m.k_head_stride = m.v_head_stride = hstride;
            spex_error err = {0};
            CHECK_MSG(spex_attn_check(&r, &err) == SPEX_OK && spex_attn_check(&m, &err) == SPEX_OK, "%s", err.msg);
            CHECK(spex_attn_scratch_floats(&r) <= sizeof scratch / sizeof scratch[0] / 3);
            spex_attention(k, &f, 0, 1, scratch);
            r.out = got;
            spex_attention(k, &r, 0, 1, scratch);
            CHECK_MSG(!memcmp(want, got, sizeof(float) * (size_t)nq * H * D), "%s n_q %d: q8_0 rows differ", ISA(k),
                      nq);
            m.out = got;
            memset(got, 0, sizeof got);
            for (int t = 0; t < 3; t++) spex_attention(k, &m, t, 3, scratch);
            CHECK_MSG(!memcmp(want, got, sizeof(float) * (size_t)nq * H * D), "%s n_q %d: q8_0 head-major differs",
                      ISA(k), nq);
        }
    }
}

/* The intended use: spex_attention called from every thread of a pool task, each with its
 * own slice of scratch; must give the bits of the single-threaded call. */
typedef struct {
    const spex_ops_kernels *k;
    const spex_attn_args *a;
    float *scratch;
    size_t per_thread;
} attn_pool_ctx;

static void attn_pool_task(void *p, int ith, int nth) {
    attn_pool_ctx *c = p;
    spex_attention(c->k, c->a, ith, nth, c->scratch + (size_t)ith * c->per_thread);
}

TEST(ops_attention_in_pool) {
    enum { NQ = 12, NKV = 150, NH = 8, NHKV = 2, HD = 64 };
    static float q[NQ * NH * HD], out1[NQ * NH * HD], out2[NQ * NH * HD];
    static uint16_t kc[NKV * NHKV * HD], vc[NKV * NHKV * HD];
    int32_t q_pos[NQ];
    for (int i = 0; i < NQ; i++) q_pos[i] = NKV - NQ + i;
    fill(q, NQ * NH * HD, -1.0f, 1.0f);
    for (int i = 0; i < NKV * NHKV * HD; i++) {
        kc[i] = spex_f32_to_fp16(rnd_uniform(-1.0f, 1.0f));
        vc[i] = spex_f32_to_fp16(rnd_uniform(-1.0f, 1.0f));
    }
    spex_attn_args a = {.n_q = NQ, .n_head = NH, .n_head_kv = NHKV, .head_dim = HD, .q = q, .q_stride = NH * HD,
                        .q_pos = q_pos, .kv_type = SPEX_TYPE_F16, .n_kv = NKV, .k = kc, .v = vc,
                        .k_stride = NHKV * HD * 2, .v_stride = NHKV * HD * 2, .causal = true, .window = 100,
                        .out = out1, .out_stride = NH * HD};
    const size_t per = spex_attn_scratch_floats(&a);
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(3, &pool, NULL));
    float *scratch = malloc(sizeof(float) * per * 3);
    CHECK(scratch);
    FOR_EACH_ISA(k) {
        a.out = out1;
        spex_attention(k, &a, 0, 1, scratch);
        a.out = out2;
        memset(out2, 0, sizeof out2);
        attn_pool_ctx c = {k, &a, scratch, per};
        spex_pool_run(pool, attn_pool_task, &c);
        CHECK_MSG(!memcmp(out1, out2, sizeof out1), "%s: pooled attention differs", ISA(k));
    }
    free(scratch);
    spex_pool_free(pool);
}

TEST_MAIN()
