/*
 * test_matmul_kquants.c — the K-quant matmul kernels (Q4_K, Q5_K, Q6_K × Q8_K) and the
 * Q8_K activation quantizer, every ISA this CPU has (cpu/kquants_internal.h).
 *
 * What is checked, with the bounds used:
 *  - the scalar reference against a double-precision dot of the dequantized rows
 *    (spex_dequantize_row_*_ref of weights and activations):
 *        |ref - D| <= (nb + 16) * 2^-23 * M
 *    where M = sum_e |x_e| * (|d*sc*q| + |dmin*m|) (Q6_K: |d*sc*(q-32)|) bounds every
 *    partial sum the kernels form (float rounding of nb super-block terms plus a few
 *    operations each, with a factor 2 to spare);
 *  - the scalar reference against the f32 activations the Q8_K rows came from:
 *        |ref - sum_e w_e * x_e| <= sum_e |w_e| * 0.5001 * dx(e) + the bound above
 *    (Q8_K rounds each activation to the nearest multiple of its block's dx);
 *  - every SIMD kernel against the scalar one at n in {256, 512, 768, 1024, 1280, 2816, 4096},
 *    tiles of nw in {1,2,3,5,15,16,17,33} × nx in 1..16 out of 37 × 16 (the AVX-512 Q4_K
 *    and Q5_K kernels work on blocks of 16 weight rows: full blocks and tails; the Q6_K
 *    one on groups of up to 8 activation rows, 16 when n <= 1024), and at n = 17152 (rows longer than the
 *    kernels' spans) for 1..3 activation rows: |simd - ref| <= (nb + 16) * 2^-22 * M,
 *    outputs outside the tile untouched, and each output bit-identical whatever the tile
 *    shape (the driver relies on that) and between the VNNI and non-VNNI AVX-512 kernels;
 *  - edge values: zero activations and zero weights give exactly 0; all-maximal codes and
 *    scales with activations at +-127 / -128 (the int16 and int32 headroom of the SIMD
 *    sums) agree with the reference;
 *  - the SIMD Q8_K quantizers write the reference's bytes, for ordinary rows and for ties
 *    in magnitude, zeros, denormals, huge values, Inf and NaN;
 *  - this test's own element-by-element decoding of each block (from the format) agrees
 *    with spex_dequantize_row_*_ref, so the bit orders are checked from two sides.
 */
#include "spex.h"
#include "cpu/api.h"
#include "cpu/isa.h"
#include "cpu/kquants_internal.h"
#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"
#include "amx_emul.h"
#include "test.h"

#include <stdint.h>

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

typedef struct {
    spex_type type;
    const char *name;
    size_t bsize;
    spex_dot_fn ref;
} kq_type;

static const kq_type TYPES[] = {
    {SPEX_TYPE_Q4_K, "q4_K", sizeof(block_q4_K), spex_dot_q4_K_ref},
    {SPEX_TYPE_Q5_K, "q5_K", sizeof(block_q5_K), spex_dot_q5_K_ref},
    {SPEX_TYPE_Q6_K, "q6_K", sizeof(block_q6_K), spex_dot_q6_K_ref},
};
#define N_TYPES 3

typedef struct {
    const char *name;
    spex_dot_fn dot[N_TYPES];
    spex_act_quant_fn quant;
} kq_isa;

/* The SIMD variants this CPU can run (whatever SPEX_ISA says: the functions are called
 * directly). */
static int simd_isas(kq_isa *out) {
    int k = 0;
#if defined(__x86_64__) || defined(__i386__)
    const spex_cpu_features *f = spex_cpu_get_features();
    if (f->avx2 && f->fma && f->f16c)
        out[k++] = (kq_isa){"avx2", {spex_dot_q4_K_avx2, spex_dot_q5_K_avx2, spex_dot_q6_K_avx2}, spex_act_quant_q8_K_avx2};
    if (f->avx2 && f->fma && f->f16c && f->avxvnni)
        out[k++] = (kq_isa){"avx2-vnni", {spex_dot_q4_K_avxvnni, spex_dot_q5_K_avxvnni, spex_dot_q6_K_avxvnni},
                            spex_act_quant_q8_K_avx2};
    if (f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq) {
        out[k++] = (kq_isa){"avx512", {spex_dot_q4_K_avx512, spex_dot_q5_K_avx512, spex_dot_q6_K_avx512}, spex_act_quant_q8_K_avx512};
        if (f->avx512vnni)
            out[k++] = (kq_isa){"avx512-vnni", {spex_dot_q4_K_avx512_vnni, spex_dot_q5_K_avx512_vnni, spex_dot_q6_K_avx512_vnni}, spex_act_quant_q8_K_avx512};
    }
#else
    (void)out;
#endif
    return k;
}

/* Random weight blocks: every code, scale and min byte random; d and dmin random finite
 * halves of either sign (so minimums can add as well as subtract). */
static void gen_weights(const kq_type *t, uint8_t *dst, int64_t nblocks, uint64_t *rng) {
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *blk = dst + b * (int64_t)t->bsize;
        for (size_t i = 0; i < t->bsize; i++) blk[i] = (uint8_t)rng_next(rng);
        const spex_fp16 d = spex_f32_to_fp16(rng_uniform(rng) * 0.01f);
        const spex_fp16 dm = spex_f32_to_fp16(rng_uniform(rng) * 0.01f);
        if (t->type == SPEX_TYPE_Q4_K) { ((block_q4_K *)blk)->d = d; ((block_q4_K *)blk)->dmin = dm; }
        if (t->type == SPEX_TYPE_Q5_K) { ((block_q5_K *)blk)->d = d; ((block_q5_K *)blk)->dmin = dm; }
        if (t->type == SPEX_TYPE_Q6_K) ((block_q6_K *)blk)->d = d;
    }
}

/* Activation rows whose blocks have very different scales (and one block in 7 all zero). */
static void gen_acts(float *x, int64_t n, uint64_t *rng) {
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float scale = (rng_next(rng) % 7 == 0) ? 0.0f : ldexpf(1.0f, (int)(rng_next(rng) % 16) - 8);
        for (int e = 0; e < QK_K; e++) x[b * QK_K + e] = rng_uniform(rng) * scale;
    }
}

/* This test's own decoding of element e of a super-block (straight from the format
 * description, one element at a time): exact value and the magnitude bound term. */
static void decode_elem(spex_type t, const uint8_t *blk, int e, double *val, double *mag) {
    if (t == SPEX_TYPE_Q4_K || t == SPEX_TYPE_Q5_K) {
        const block_q4_K *b4 = (const block_q4_K *)blk;
        const block_q5_K *b5 = (const block_q5_K *)blk;
        const uint8_t *scales = t == SPEX_TYPE_Q4_K ? b4->scales : b5->scales;
        const uint8_t *qs = t == SPEX_TYPE_Q4_K ? b4->qs : b5->qs;
        const double d = spex_fp16_to_f32(t == SPEX_TYPE_Q4_K ? b4->d : b5->d);
        const double dmin = spex_fp16_to_f32(t == SPEX_TYPE_Q4_K ? b4->dmin : b5->dmin);
        const int sub = e / 32, l = e % 32;
        const uint8_t byte = qs[32 * (e / 64) + l];
        int q = sub % 2 == 0 ? byte & 0x0f : byte >> 4;
        if (t == SPEX_TYPE_Q5_K) q |= ((b5->qh[l] >> sub) & 1) << 4;
        uint8_t sc, m;
        spex_kq_get_scale_min(sub, scales, &sc, &m);
        *val = d * sc * q - dmin * m;
        *mag = fabs(d * sc * q) + fabs(dmin * m);
    } else {
        const block_q6_K *b6 = (const block_q6_K *)blk;
        const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        const uint8_t lb = b6->ql[64 * h + 32 * (quarter & 1) + l];
        const int lo = (quarter >> 1) ? lb >> 4 : lb & 0x0f;
        const int hb = (b6->qh[32 * h + l] >> (2 * quarter)) & 3;
        const double v = (double)spex_fp16_to_f32(b6->d) * b6->scales[e / 16] * ((lo | hb << 4) - 32);
        *val = v;
        *mag = fabs(v);
    }
}

static void dequant_row(spex_type t, const void *w, float *out, int64_t n) {
    if (t == SPEX_TYPE_Q4_K) spex_dequantize_row_q4_K_ref((const block_q4_K *)w, out, n);
    if (t == SPEX_TYPE_Q5_K) spex_dequantize_row_q5_K_ref((const block_q5_K *)w, out, n);
    if (t == SPEX_TYPE_Q6_K) spex_dequantize_row_q6_K_ref((const block_q6_K *)w, out, n);
}

/* M for one (weight row, activation row) pair: see the file comment. */
static double pair_mag(const kq_type *t, const uint8_t *wrow, const block_q8_K *xrow, int64_t n) {
    double M = 0;
    for (int64_t e = 0; e < n; e++) {
        double v, mag;
        decode_elem(t->type, wrow + (e / QK_K) * (int64_t)t->bsize, (int)(e % QK_K), &v, &mag);
        M += mag * fabs((double)xrow[e / QK_K].d * xrow[e / QK_K].qs[e % QK_K]);
    }
    return M;
}

static double simd_tol(double M, int64_t n) { return (double)(n / QK_K + 16) * ldexp(1.0, -22) * M; }
static double ref_tol(double M, int64_t n) { return (double)(n / QK_K + 16) * ldexp(1.0, -23) * M; }

/* ======================================================================== */
/* Reference against double precision                                       */
/* ======================================================================== */

TEST(own_decoding_matches_dequantize_ref) {
    uint64_t rng = 11;
    const int64_t n = 3 * QK_K;
    uint8_t w[3 * sizeof(block_q6_K)];
    float deq[3 * QK_K];
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        for (int rep = 0; rep < 20; rep++) {
            gen_weights(t, w, n / QK_K, &rng);
            dequant_row(t->type, w, deq, n);
            for (int64_t e = 0; e < n; e++) {
                double v, mag;
                decode_elem(t->type, w + (e / QK_K) * (int64_t)t->bsize, (int)(e % QK_K), &v, &mag);
                CHECK_MSG(fabs(deq[e] - v) <= ldexp(1.0, -22) * mag + 1e-30, "%s element %lld: %.9g vs %.9g",
                          t->name, (long long)e, (double)deq[e], v);
            }
        }
    }
}

TEST(ref_matches_double_dot_of_dequantized_rows) {
    uint64_t rng = 1;
    const int64_t sizes[] = {256, 512, 768, 2816, 4096};
    float *x = malloc(4096 * sizeof(float)), *xd = malloc(4096 * sizeof(float)), *wd = malloc(4096 * sizeof(float));
    block_q8_K *xq = malloc(16 * sizeof(block_q8_K));
    uint8_t *w = malloc(16 * sizeof(block_q6_K));
    double worst = 0, worst_f32 = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        for (int si = 0; si < 5; si++) {
            const int64_t n = sizes[si];
            for (int rep = 0; rep < 6; rep++) {
                gen_weights(t, w, n / QK_K, &rng);
                gen_acts(x, n, &rng);
                spex_quantize_row_q8_K_ref(x, xq, n);
                spex_dequantize_row_q8_K_ref(xq, xd, n);
                dequant_row(t->type, w, wd, n);
                float y;
                t->ref(n, w, 0, 1, xq, 0, 1, &y, 1);
                double D = 0, Df = 0, Mf = 0;
                for (int64_t e = 0; e < n; e++) {
                    D += (double)wd[e] * xd[e];
                    Df += (double)wd[e] * x[e];
                    Mf += fabs((double)wd[e]) * 0.5001 * fabs((double)xq[e / QK_K].d);
                }
                const double M = pair_mag(t, w, xq, n);
                const double err = fabs(y - D), tol = ref_tol(M, n);
                CHECK_MSG(err <= tol, "%s n=%lld rep %d: ref %.9g vs double %.9g (err %.3g, tol %.3g)", t->name,
                          (long long)n, rep, (double)y, D, err, tol);
                CHECK_MSG(fabs(y - Df) <= Mf + tol, "%s n=%lld rep %d: ref %.9g vs f32 activations %.9g (bound %.3g)",
                          t->name, (long long)n, rep, (double)y, Df, Mf + tol);
                if (M > 0 && err / M > worst) worst = err / M;
                if (Mf > 0 && fabs(y - Df) / Mf > worst_f32) worst_f32 = fabs(y - Df) / Mf;
            }
        }
    }
    printf("  ref vs double: worst |err|/M = %.3g (bound %.3g at n=256); vs f32 x: worst |err|/bound = %.3g\n",
           worst, 17 * ldexp(1.0, -23), worst_f32);
    free(x); free(xd); free(wd); free(xq); free(w);
}

/* ======================================================================== */
/* SIMD against the reference                                               */
/* ======================================================================== */

#define MAX_NW 37 /* two 16-row blocks of the lane-per-row kernels and a tail */
#define MAX_NX 16

static double g_worst_simd; /* largest |simd - ref| / bound seen */

/* One size: a 7 × 16 problem with padded strides; the reference over all of it, then
 * every ISA on every sub-tile of the listed shapes, placed at an offset. */
static void check_simd_size(const kq_type *t, int ti, const kq_isa *isas, int n_isas, int64_t n,
                            uint64_t *rng, int *failed) {
    const int64_t nb = n / QK_K;
    const size_t wrow = (size_t)nb * t->bsize, ws = wrow + 16;
    const size_t xrow = (size_t)nb * sizeof(block_q8_K), xs = xrow + 8;
    uint8_t *w = malloc(ws * MAX_NW);
    uint8_t *xq = malloc(xs * MAX_NX);
    float *xf = malloc((size_t)n * sizeof(float));
    const size_t ldy = MAX_NW + 3;
    float *yref = malloc(sizeof(float) * ldy * MAX_NX), *yfull = malloc(sizeof(float) * ldy * MAX_NX);
    float *y = malloc(sizeof(float) * ldy * MAX_NX);
    double M[MAX_NX][MAX_NW];

    for (int i = 0; i < MAX_NW; i++) gen_weights(t, w + (size_t)i * ws, nb, rng);
    for (int j = 0; j < MAX_NX; j++) {
        gen_acts(xf, n, rng);
        spex_quantize_row_q8_K_ref(xf, (block_q8_K *)(xq + (size_t)j * xs), n);
    }
    t->ref(n, w, ws, MAX_NW, xq, xs, MAX_NX, yref, ldy);
    for (int j = 0; j < MAX_NX; j++)
        for (int i = 0; i < MAX_NW; i++) M[j][i] = pair_mag(t, w + (size_t)i * ws, (const block_q8_K *)(xq + (size_t)j * xs), n);

    /* every activation row count: the SIMD kernels work on groups of up to 8 activation rows
     * (and 16-row weight blocks), so each count is its own code path */
    static const int nws[] = {1, 2, 3, 5, 15, 16, 17, 33}, nxs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (int k = 0; k < n_isas && !*failed; k++) {
        const spex_dot_fn dot = isas[k].dot[ti];
        dot(n, w, ws, MAX_NW, xq, xs, MAX_NX, yfull, ldy);
        for (int j = 0; j < MAX_NX; j++)
            for (int i = 0; i < MAX_NW; i++) {
                const double err = fabs((double)yfull[j * ldy + i] - yref[j * ldy + i]);
                if (err / simd_tol(M[j][i], n) > g_worst_simd) g_worst_simd = err / simd_tol(M[j][i], n);
                if (!(err <= simd_tol(M[j][i], n))) {
                    printf("  %s %s n=%lld: y[%d][%d] = %.9g, ref %.9g (err %.3g, tol %.3g)\n", isas[k].name, t->name,
                           (long long)n, j, i, (double)yfull[j * ldy + i], (double)yref[j * ldy + i], err,
                           simd_tol(M[j][i], n));
                    *failed = 1;
                    goto done;
                }
            }
        for (int a = 0; a < 8; a++)
            for (int c = 0; c < 16; c++) {
                const int nw = nws[a], nx = nxs[c];
                const int i0 = MAX_NW - nw, j0 = MAX_NX - nx; /* a tile not at the origin */
                for (size_t e = 0; e < ldy * MAX_NX; e++) y[e] = NAN;
                dot(n, w + (size_t)i0 * ws, ws, nw, xq + (size_t)j0 * xs, xs, nx, y + (size_t)j0 * ldy + i0, ldy);
                for (int j = 0; j < MAX_NX; j++)
                    for (int i = 0; i < MAX_NW; i++) {
                        const float v = y[j * ldy + i];
                        const bool in = i >= i0 && j >= j0;
                        if (in && memcmp(&v, &yfull[j * ldy + i], sizeof v) != 0) {
                            printf("  %s %s n=%lld tile %dx%d: y[%d][%d] = %.9g differs from the full tile's %.9g\n",
                                   isas[k].name, t->name, (long long)n, nw, nx, j, i, (double)v,
                                   (double)yfull[j * ldy + i]);
                            *failed = 1;
                            goto done;
                        }
                        if (!in && !isnan(v)) {
                            printf("  %s %s n=%lld tile %dx%d wrote y[%d][%d] outside the tile\n", isas[k].name,
                                   t->name, (long long)n, nw, nx, j, i);
                            *failed = 1;
                            goto done;
                        }
                    }
            }
        /* both AVX-512 variants compute the same integers and floats */
        if (k > 0 && !strcmp(isas[k].name, "avx512-vnni") && !strcmp(isas[k - 1].name, "avx512")) {
            isas[k - 1].dot[ti](n, w, ws, MAX_NW, xq, xs, MAX_NX, y, ldy);
            for (int j = 0; j < MAX_NX; j++)
                for (int i = 0; i < MAX_NW; i++)
                    if (memcmp(&y[j * ldy + i], &yfull[j * ldy + i], sizeof(float)) != 0) {
                        printf("  %s n=%lld: avx512 and avx512-vnni differ at y[%d][%d]\n", t->name, (long long)n, j, i);
                        *failed = 1;
                        goto done;
                    }
        }
    }
done:
    free(w); free(xq); free(xf); free(yref); free(yfull); free(y);
}

TEST(simd_matches_ref_all_tiles) {
    kq_isa isas[4];
    const int n_isas = simd_isas(isas);
    if (n_isas == 0) SKIP("no AVX2 or AVX-512 on this CPU: only the scalar kernels exist");
    uint64_t rng = 7;
    const int64_t sizes[] = {256, 512, 768, 1024, 1280, 256 * 11, 4096};
    int failed = 0;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int si = 0; si < 7; si++) {
            check_simd_size(&TYPES[ti], ti, isas, n_isas, sizes[si], &rng, &failed);
            CHECK_MSG(!failed, "see the line above");
        }
    printf("  checked:");
    for (int k = 0; k < n_isas; k++) printf(" %s", isas[k].name);
    printf("; worst |simd - ref| = %.3g of the bound\n", g_worst_simd);
}

/* Rows longer than the kernels' slot spans (64 super-blocks for one activation row): the
 * row is then split into several spans even for 1..3 rows, with prefetching on. */
TEST(simd_matches_ref_long_rows) {
    kq_isa isas[4];
    const int n_isas = simd_isas(isas);
    if (n_isas == 0) SKIP("no AVX2 or AVX-512 on this CPU: only the scalar kernels exist");
    uint64_t rng = 9;
    const int64_t n = 67 * QK_K, nb = n / QK_K;
    float *xf = malloc((size_t)n * sizeof(float));
    block_q8_K *xq = malloc(3 * (size_t)nb * sizeof(block_q8_K));
    uint8_t *w = malloc(2 * (size_t)nb * sizeof(block_q6_K));
    float yref[6], y[6];
    for (int j = 0; j < 3; j++) {
        gen_acts(xf, n, &rng);
        spex_quantize_row_q8_K_ref(xf, xq + j * nb, n);
    }
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        const size_t ws = (size_t)nb * t->bsize;
        gen_weights(t, w, 2 * nb, &rng);
        t->ref(n, w, ws, 2, xq, nb * sizeof(block_q8_K), 3, yref, 2);
        for (int k = 0; k < n_isas; k++)
            for (int nx = 1; nx <= 3; nx++) {
                isas[k].dot[ti](n, w, ws, 2, xq, nb * sizeof(block_q8_K), nx, y, 2);
                for (int j = 0; j < nx; j++)
                    for (int i = 0; i < 2; i++) {
                        const double M = pair_mag(t, w + i * ws, xq + j * nb, n);
                        CHECK_MSG(fabs((double)y[j * 2 + i] - yref[j * 2 + i]) <= simd_tol(M, n),
                                  "%s %s nx=%d y[%d][%d] = %.9g, ref %.9g", isas[k].name, t->name, nx, j, i,
                                  (double)y[j * 2 + i], (double)yref[j * 2 + i]);
                    }
            }
    }
    free(xf); free(xq); free(w);
}

/* ======================================================================== */
/* Edge values                                                               */
/* ======================================================================== */

TEST(zero_activations_and_zero_weights_give_exact_zero) {
    kq_isa isas[4];
    const int n_isas = simd_isas(isas);
    uint64_t rng = 3;
    const int64_t n = 1024;
    uint8_t w[4 * sizeof(block_q6_K)], wz[4 * sizeof(block_q6_K)];
    block_q8_K xz[4], xr[4];
    float xf[1024], zeros[1024] = {0};
    spex_quantize_row_q8_K_ref(zeros, xz, n);
    gen_acts(xf, n, &rng);
    spex_quantize_row_q8_K_ref(xf, xr, n);
    memset(wz, 0, sizeof wz);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        gen_weights(t, w, n / QK_K, &rng);
        for (int k = -1; k < n_isas; k++) {
            const spex_dot_fn dot = k < 0 ? t->ref : isas[k].dot[ti];
            const char *name = k < 0 ? "scalar" : isas[k].name;
            float y = 1.0f;
            dot(n, w, 0, 1, xz, 0, 1, &y, 1);
            CHECK_MSG(y == 0.0f, "%s %s: zero activations give %.9g", name, t->name, (double)y);
            y = 1.0f;
            dot(n, wz, 0, 1, xr, 0, 1, &y, 1);
            CHECK_MSG(y == 0.0f, "%s %s: zero weights give %.9g", name, t->name, (double)y);
        }
    }
}

/* Hand-made Q8_K block: every code v (bsums consistent), d = dx. */
static void const_q8K(block_q8_K *b, int v, float dx) {
    b->d = dx;
    memset(b->qs, (uint8_t)(int8_t)v, QK_K);
    for (int s = 0; s < QK_K / 16; s++) b->bsums[s] = (int16_t)(16 * v);
}

TEST(maximal_codes_and_scales) {
    kq_isa isas[4];
    const int n_isas = simd_isas(isas);
    const int64_t n = 4 * QK_K;
    uint8_t w[4 * sizeof(block_q6_K)];
    block_q8_K x[4];
    static const int vals[] = {127, -127, -128};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        for (int wv = 0; wv < 3; wv++) {
            /* wv 0: every bit set (codes 15/31/63, scales and mins 63; Q6_K scales -1);
             * wv 1: Q6_K scales +127 / -128 alternating with codes 63 and 0;
             * wv 2: codes 0 with maximal mins (only the minimum terms remain) */
            memset(w, wv == 2 ? 0x00 : 0xff, sizeof w);
            for (int b = 0; b < 4; b++) {
                uint8_t *blk = w + b * (int64_t)t->bsize;
                if (t->type == SPEX_TYPE_Q6_K) {
                    block_q6_K *b6 = (block_q6_K *)blk;
                    b6->d = spex_f32_to_fp16(0.03125f);
                    if (wv == 1)
                        for (int s = 0; s < 16; s++) {
                            b6->scales[s] = (int8_t)(s % 2 ? -128 : 127);
                            if (s % 4 == 3) memset(b6->ql + 8 * s, 0, 8);
                        }
                } else {
                    block_q4_K *b4 = (block_q4_K *)blk; /* d, dmin, scales: same offsets in q5_K */
                    b4->d = spex_f32_to_fp16(0.03125f);
                    b4->dmin = spex_f32_to_fp16(b % 2 ? -0.0625f : 0.0625f);
                    if (wv == 2) memset(b4->scales, 0xff, sizeof b4->scales);
                }
            }
            for (int xv = 0; xv < 3; xv++) {
                for (int b = 0; b < 4; b++) const_q8K(&x[b], b % 2 ? vals[xv] : (vals[xv] == -128 ? 127 : -vals[xv]), 0.5f);
                float yr;
                t->ref(n, w, 0, 1, x, 0, 1, &yr, 1);
                const double M = pair_mag(t, w, x, n);
                double D = 0;
                for (int64_t e = 0; e < n; e++) {
                    double v, mag;
                    decode_elem(t->type, w + (e / QK_K) * (int64_t)t->bsize, (int)(e % QK_K), &v, &mag);
                    D += v * x[e / QK_K].d * x[e / QK_K].qs[e % QK_K];
                }
                CHECK_MSG(fabs(yr - D) <= ref_tol(M, n), "%s w%d x%d: ref %.9g vs exact %.9g", t->name, wv, xv,
                          (double)yr, D);
                for (int k = 0; k < n_isas; k++) {
                    float y;
                    isas[k].dot[ti](n, w, 0, 1, x, 0, 1, &y, 1);
                    CHECK_MSG(fabs(y - yr) <= simd_tol(M, n), "%s %s w%d x%d: %.9g vs ref %.9g", isas[k].name,
                              t->name, wv, xv, (double)y, (double)yr);
                }
            }
        }
    }
}

/* ======================================================================== */
/* Q8_K quantizer                                                            */
/* ======================================================================== */

static int check_quant_bytes(const kq_isa *isa, const float *x, int64_t n, const char *what) {
    block_q8_K ref[8], got[8];
    memset(ref, 0xa5, sizeof ref);
    memset(got, 0x5a, sizeof got);
    spex_quantize_row_q8_K_ref(x, ref, n);
    isa->quant(x, got, n);
    for (int64_t b = 0; b < n / QK_K; b++)
        if (memcmp(&ref[b], &got[b], sizeof ref[b]) != 0) {
            printf("  %s quantizer, %s: block %lld differs from the reference (d %.9g vs %.9g)\n", isa->name, what,
                   (long long)b, (double)got[b].d, (double)ref[b].d);
            return 0;
        }
    return 1;
}

TEST(simd_q8K_quantizer_bytes_equal_ref) {
    kq_isa isas[4];
    const int n_isas = simd_isas(isas);
    if (n_isas == 0) SKIP("no AVX2 or AVX-512 on this CPU");
    uint64_t rng = 5;
    float x[8 * QK_K];
    for (int k = 0; k < n_isas; k++) {
        for (int rep = 0; rep < 200; rep++) { /* ordinary rows, many rounding ties near .5 */
            gen_acts(x, 8 * QK_K, &rng);
            if (rep % 2)
                for (int e = 0; e < 8 * QK_K; e++) x[e] = roundf(x[e] * 254.0f) * 0.5f;
            CHECK(check_quant_bytes(&isas[k], x, 8 * QK_K, "random rows"));
        }
        /* ties in magnitude: the first of +a / -a decides the sign of d */
        for (int e = 0; e < 2 * QK_K; e++) x[e] = (float)((e * 37) % 11) - 5.0f;
        x[100] = -9.0f; x[200] = 9.0f; x[QK_K + 10] = 9.0f; x[QK_K + 20] = -9.0f;
        CHECK(check_quant_bytes(&isas[k], x, 2 * QK_K, "magnitude ties"));
        /* zeros, denormals, huge values, infinities, NaNs */
        memset(x, 0, sizeof x);
        for (int e = 0; e < QK_K; e++) x[QK_K + e] = (e % 3 ? 1.0f : -1.0f) * 1.4e-45f * (float)(e % 5);
        for (int e = 0; e < QK_K; e++) x[2 * QK_K + e] = (float)(e - 128) * 1e36f;
        for (int e = 0; e < QK_K; e++) x[3 * QK_K + e] = (float)e;
        x[3 * QK_K + 17] = INFINITY;
        for (int e = 0; e < QK_K; e++) x[4 * QK_K + e] = (float)e - 100.0f;
        x[4 * QK_K + 3] = NAN; x[4 * QK_K + 250] = -NAN;
        for (int e = 0; e < QK_K; e++) x[5 * QK_K + e] = NAN;
        for (int e = 0; e < QK_K; e++) x[6 * QK_K + e] = (e % 2) ? -INFINITY : 3.0f;
        for (int e = 0; e < QK_K; e++) x[7 * QK_K + e] = -0.0f;
        CHECK(check_quant_bytes(&isas[k], x, 8 * QK_K, "special values"));
    }
}

/* ======================================================================== */
/* The R16 layout (load-time repack, cpu/matmul.h)                           */
/* ======================================================================== */

/* Packing moves bytes only: every block reads back unchanged, and the 16 rows' word k of a
 * unit sits where the layout says. */
TEST(r16_pack_and_get_block_round_trip) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        const int64_t n = 3 * QK_K, nb = n / QK_K, n_out = 32;
        const size_t row = (size_t)nb * t->bsize;
        uint8_t *w = malloc(row * n_out), *p = malloc(row * n_out);
        uint64_t rng = 77 + (uint64_t)ti;
        gen_weights(t, w, nb * n_out, &rng);
        spex_r16_pack(t->type, w, p, n_out, n);
        int bad = 0;
        uint8_t blk[sizeof(block_q6_K)];
        for (int64_t r = 0; r < n_out; r++)
            for (int64_t b = 0; b < nb; b++) {
                spex_r16_get_block(t->type, p + (size_t)(r / 16 * 16) * row, (int)(r % 16), b, blk);
                bad += memcmp(blk, w + (size_t)r * row + (size_t)b * t->bsize, t->bsize) != 0;
            }
        CHECK_MSG(bad == 0, "%s: %d blocks differ after pack + get_block", t->name, bad);
        /* unit 1 of group 1, word 5, lane 3 = row 19's block 1, bytes 20..23 */
        CHECK(!memcmp(p + 16 * row + 16 * t->bsize + 4 * (5 * 16 + 3), w + 19 * row + t->bsize + 20, 4));
        if (t->type == SPEX_TYPE_Q6_K) /* after the 52 words, the 16 fp16 d: lane 3 = row 19's d */
            CHECK(!memcmp(p + 16 * row + 16 * t->bsize + 52 * 64 + 2 * 3, w + 19 * row + t->bsize + 208, 2));
        free(w);
        free(p);
    }
}

/* The R16 kernels give the ggml-layout kernels' bits: the reference against the reference,
 * each SIMD variant against the same variant on the unpacked rows (the AMX tiles against the
 * VNNI kernel; the AVX-VNNI ones, which share the AVX-512 arithmetic, against the
 * AVX-512 kernel where the CPU has it, else their own ggml-layout form, and against the
 * reference within the SIMD bound at 37 rows), at every activation count 1..16, 20 and 37, for whole matrices and for sub-tiles starting at a later 16-row group, at
 * sizes with and without the kernels' spans (n = 17152: 67 super-blocks). */
TEST(r16_kernels_bit_equal_ggml_layout) {
    kq_isa isas[5];
    memset(isas, 0, sizeof isas);
    const int n_isas = simd_isas(isas);
    const int64_t sizes[] = {256, 1024, 2816, 17152};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kq_type *t = &TYPES[ti];
        static const spex_dot_fn refs[N_TYPES] = {spex_dot_q4_K_r16_ref, spex_dot_q5_K_r16_ref, spex_dot_q6_K_r16_ref};
#if defined(__x86_64__) || defined(__i386__)
        static const spex_dot_fn plain[N_TYPES] = {spex_dot_q4_K_r16_avx512, spex_dot_q5_K_r16_avx512,
                                                   spex_dot_q6_K_r16_avx512};
        static const spex_dot_fn vnni[N_TYPES] = {spex_dot_q4_K_r16_avx512_vnni, spex_dot_q5_K_r16_avx512_vnni,
                                                  spex_dot_q6_K_r16_avx512_vnni};
#endif
        spex_dot_fn r16[8] = {0};
        spex_dot_fn std[8] = {0};
        const char *names[8];
        int nk = 0;
        r16[nk] = refs[ti], std[nk] = t->ref, names[nk++] = "ref";
        int k256 = nk, n256 = 0; /* the 256-bit R16 kernels: r16[k256 .. k256 + n256) */
#if defined(__x86_64__) || defined(__i386__)
        static const spex_dot_fn amx[N_TYPES] = {spex_dot_q4_K_r16_amx, spex_dot_q5_K_r16_amx, spex_dot_q6_K_r16_amx};
        spex_amx_emul_fn emul[3];
        /* the AVX-VNNI R16 kernels against the AVX-512 ggml-layout kernel where the CPU has
         * one (the same arithmetic across ISAs), else their own ggml-layout entries */
        const spex_cpu_features *f = spex_cpu_get_features();
        static const spex_dot_fn r256[N_TYPES] = {spex_dot_q4_K_r16_avxvnni, spex_dot_q5_K_r16_avxvnni,
                                                  spex_dot_q6_K_r16_avxvnni};
        static const spex_dot_fn g256[N_TYPES] = {spex_dot_q4_K_avxvnni, spex_dot_q5_K_avxvnni, spex_dot_q6_K_avxvnni};
        if (f->avx2 && f->fma && f->f16c && f->avxvnni) r16[nk] = r256[ti], std[nk] = g256[ti], names[nk++] = "avx-vnni-r16";
        n256 = nk - k256;
        for (int i = 0; i < n_isas; i++) {
            if (!strcmp(isas[i].name, "avx512"))
                for (int k = k256; k < k256 + n256; k++) std[k] = isas[i].dot[ti];
            if (!strcmp(isas[i].name, "avx512")) r16[nk] = plain[ti];
            else if (!strcmp(isas[i].name, "avx512-vnni")) r16[nk] = vnni[ti];
            else continue;
            std[nk] = isas[i].dot[ti], names[nk++] = isas[i].name;
            if (strcmp(isas[i].name, "avx512-vnni")) continue;
            /* the AMX tiles (9+ rows; fewer run the VNNI kernel) against the VNNI kernel, on
             * the CPU where it has them and on the C model of the tiles (tests/amx_emul.c) */
            if (spex_cpu_get_features()->amx_int8) r16[nk] = amx[ti], std[nk] = isas[i].dot[ti], names[nk++] = "amx";
            if (spex_amx_emul_kernels(emul))
                r16[nk] = emul[ti], std[nk] = isas[i].dot[ti], names[nk++] = "amx-emulated";
        }
#else
        (void)isas, (void)n_isas;
#endif
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t n = sizes[si], nb = n / QK_K, n_out = 48, NX = si == 3 ? 3 : 37;
            const size_t row = (size_t)nb * t->bsize, xs = (size_t)nb * sizeof(block_q8_K);
            uint8_t *w = malloc(row * n_out), *p = malloc(row * n_out), *xq = malloc(xs * (size_t)NX);
            float *x = malloc(sizeof(float) * (size_t)(n * NX));
            float *ya = malloc(sizeof(float) * (size_t)(n_out * NX)), *yb = malloc(sizeof(float) * (size_t)(n_out * NX));
            uint64_t rng = 1000 + (uint64_t)(si * 10 + (size_t)ti);
            gen_weights(t, w, nb * n_out, &rng);
            gen_acts(x, n * NX, &rng);
            for (int64_t j = 0; j < NX; j++) spex_quantize_row_q8_K_ref(x + j * n, (block_q8_K *)(xq + (size_t)j * xs), n);
            spex_r16_pack(t->type, w, p, n_out, n);
            for (int k = 0; k < nk; k++) {
                /* 1..16, then 20 and 37 (the AMX tiles' second 16-row group, partial) */
                for (int nx = 1; nx <= NX; nx = nx < 16 ? nx + 1 : nx == 16 ? 20 : 37 + (nx == 37)) {
                    /* the whole matrix, then rows 16..47 as their own call */
                    for (int part = 0; part < 2; part++) {
                        const int o0 = part ? 16 : 0, nw = part ? 32 : (int)n_out;
                        memset(ya, 0, sizeof(float) * (size_t)(n_out * NX));
                        memset(yb, 0, sizeof(float) * (size_t)(n_out * NX));
                        std[k](n, w + (size_t)o0 * row, row, nw, xq, xs, nx, ya, (size_t)n_out);
                        r16[k](n, p + (size_t)o0 * row, row, nw, xq, xs, nx, yb, (size_t)n_out);
                        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * (size_t)(n_out * NX)),
                                  "%s %s n %lld nx %d part %d: R16 differs from the ggml layout", t->name, names[k],
                                  (long long)n, nx, part);
                    }
                }
            }
            /* the 256-bit kernels against the reference, within the SIMD bound of
             * simd_matches_ref_all_tiles: all NX rows, the whole matrix */
            t->ref(n, w, row, (int)n_out, xq, xs, (int)NX, ya, (size_t)n_out);
            for (int k = k256; k < k256 + n256; k++) {
                r16[k](n, p, row, (int)n_out, xq, xs, (int)NX, yb, (size_t)n_out);
                for (int64_t j = 0; j < NX; j++)
                    for (int64_t i = 0; i < n_out; i++) {
                        const double M = pair_mag(t, w + (size_t)i * row, (const block_q8_K *)(xq + (size_t)j * xs), n);
                        const double e = fabs((double)yb[j * n_out + i] - (double)ya[j * n_out + i]);
                        CHECK_MSG(e <= simd_tol(M, n) + 1e-30, "%s %s n %lld row %lld out %lld: %.9g vs ref %.9g",
                                  t->name, names[k], (long long)n, (long long)j, (long long)i,
                                  (double)yb[j * n_out + i], (double)ya[j * n_out + i]);
                    }
            }
            free(w), free(p), free(xq), free(x), free(ya), free(yb);
        }
    }
}

/* The driver runs R16 weights with the table's dot_r16 and refuses what they cannot do. */
TEST(r16_driver) {
    const kq_type *t = &TYPES[0];
    const int64_t n = 512, nb = n / QK_K, n_out = 64, NX = 8;
    const size_t row = (size_t)nb * t->bsize;
    uint8_t *w = malloc(row * n_out), *p = malloc(row * n_out);
    float *x = malloc(sizeof(float) * (size_t)(n * NX)), *ya = malloc(sizeof(float) * (size_t)(n_out * NX)),
          *yb = malloc(sizeof(float) * (size_t)(n_out * NX));
    uint64_t rng = 5;
    gen_weights(t, w, nb * n_out, &rng);
    gen_acts(x, n * NX, &rng);
    spex_r16_pack(t->type, w, p, n_out, n);
    const size_t wsz = spex_matmul_ws_size(t->type, n, NX);
    void *ws = malloc(wsz);
    spex_pool *pool = NULL;
    spex_error e;
    CHECK_OK(spex_pool_create(2, &pool, &e));
    for (int nx = 1; nx <= NX; nx += 7) {
        spex_matmul_args a = {.wtype = t->type, .W = w, .n_out = n_out, .n = n, .X = x, .ldx = n, .n_rows = nx,
                              .Y = ya, .ldy = n_out, .ws = ws};
        CHECK(spex_matmul(pool, &a) == SPEX_OK);
        a.W = p, a.Y = yb, a.w_r16 = true;
        CHECK(spex_matmul(pool, &a) == SPEX_OK);
        CHECK(!memcmp(ya, yb, sizeof(float) * (size_t)(n_out * nx)));
        a.n_out = 40; /* not a whole number of groups */
        CHECK(spex_matmul(pool, &a) == SPEX_ERR_INVALID_ARG);
        a.n_out = n_out, a.wtype = SPEX_TYPE_F16; /* no R16 kernel */
        CHECK(spex_matmul(pool, &a) == SPEX_ERR_INVALID_ARG);
    }
    CHECK(spex_r16_supported(SPEX_TYPE_Q4_K) && spex_r16_supported(SPEX_TYPE_Q5_K) && spex_r16_supported(SPEX_TYPE_Q6_K));
    CHECK(spex_r16_supported(SPEX_TYPE_Q8_0) && !spex_r16_supported(SPEX_TYPE_F16));
    spex_pool_free(pool);
    free(w), free(p), free(x), free(ya), free(yb), free(ws);
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

TEST(register_fills_every_entry) {
    for (int isa = SPEX_ISA_SCALAR; isa <= SPEX_ISA_NEON; isa++) {
        for (int vnni = 0; vnni < 2; vnni++) {
            spex_matmul_kernels k;
            memset(&k, 0, sizeof k);
            spex_matmul_register_kquants_variant(&k, SPEX_ISA_SCALAR, false);
            spex_matmul_register_kquants_variant(&k, (spex_isa)isa, vnni);
            CHECK(k.dot[SPEX_TYPE_Q4_K] && k.dot[SPEX_TYPE_Q5_K] && k.dot[SPEX_TYPE_Q6_K]);
            CHECK(k.act_quant[SPEX_TYPE_Q8_K]);
            if (isa == SPEX_ISA_SCALAR) CHECK(k.dot[SPEX_TYPE_Q4_K] == spex_dot_q4_K_ref);
#if defined(__x86_64__) || defined(__i386__)
            if (isa == SPEX_ISA_AVX512)
                CHECK(k.dot[SPEX_TYPE_Q6_K] == (vnni ? spex_dot_q6_K_avx512_vnni : spex_dot_q6_K_avx512));
#endif
            CHECK(k.dot[SPEX_TYPE_Q8_0] == NULL); /* only its own entries */
            CHECK(k.dot_r16[SPEX_TYPE_Q4_K] && k.dot_r16[SPEX_TYPE_Q5_K] && k.dot_r16[SPEX_TYPE_Q6_K]);
            /* R16 pays on AVX-512 and on AVX2 with AVX-VNNI */
            const bool fast = SPEX_HAVE_X86 && (isa == SPEX_ISA_AVX512 || (isa == SPEX_ISA_AVX2 && vnni));
            CHECK(k.r16_fast[SPEX_TYPE_Q4_K] == fast && k.r16_fast[SPEX_TYPE_Q5_K] == fast);
            CHECK(k.r16_fast[SPEX_TYPE_Q6_K] == fast);
#if defined(__x86_64__) || defined(__i386__)
            if (isa == SPEX_ISA_AVX2)
                CHECK(k.dot_r16[SPEX_TYPE_Q4_K] == (vnni ? spex_dot_q4_K_r16_avxvnni : spex_dot_q4_K_r16_ref));
#endif
        }
    }
}

TEST_MAIN()
