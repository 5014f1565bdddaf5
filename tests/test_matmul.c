/*
 * test_matmul.c — the matmul kernel tables and driver (src/cpu/matmul.h).
 *
 * Data-driven over every weight type whose scalar kernel exists (the K-quants join in as
 * soon as they are registered) and every kernel table this CPU can run (scalar, AVX2,
 * AVX-512 with and without VNNI, and with AMX-INT8 tiles):
 *  - the scalar kernel against a double-precision dot of the dequantized weights and the
 *    dequantized (converted) activations;
 *  - every SIMD kernel against the same double reference and against the scalar kernel,
 *    over n_out {1, 3, 31, 33, 255, 257} × n_rows {1, 2, 3, 7, 8, 9, 16, 64, 65} tiles;
 *  - every SIMD kernel's result for a sub-tile bit-equal to its result for the full tile,
 *    and each activation row alone bit-equal to its row of the batch (the driver may cut
 *    work anywhere, and a speculative verify batch must reproduce token-by-token decoding);
 *  - SIMD activation quantizers byte-equal to the scalar ones (ties and zero blocks too);
 *  - the driver (one thread, pools of 1 and 2 threads, decode / small / prompt regimes)
 *    bit-equal to the kernel, close to the unquantized-activation product within the
 *    activation-quantization bound, and its argument validation.
 *
 * Error bounds (u = 2^-24, the f32 unit roundoff). The kernels compute exact integer block
 * sums (or exact products for float weights) and round only when scaling and accumulating
 * in f32, so |y - y_double| <= (C * sqrt(terms) + 4) * u * MAG + EXTRA, where terms is the
 * number of f32 accumulations along the row (n for float weights, n/32 blocks, n/16
 * sub-blocks for K-quants), C = 16 (rounding errors of random data add up like a random
 * walk; the worst case n*u would hide single-element bugs at n = 4096), MAG = sum_k
 * |w_k * x_k| times a per-type factor covering terms larger than the products themselves
 * (q4_1/q5_1: dw*q + m splits into two terms, K-quants subtract a per-sub-block min:
 * factor 4), and EXTRA (q4_1/q5_1) bounds m_b * (s_b - dx_b * sum(q_x,b)) per block: the
 * activation's fp16 sum term s = fp16(d * sum) and the fp16 scale dx = fp16(d) each differ
 * from the unrounded d by 2^-11 relative or 2^-25 absolute (fp16 subnormals).
 */
#include "spex.h"
#include "cpu/api.h"
#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "amx_emul.h"
#include "test.h"
#include "tensor/api.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <float.h>
#include <stdint.h>

/* ---- deterministic random data -------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() & 0xffffff) / 8388608.0f - 1.0f; } /* [-1, 1) */

/* Values in [-1, 1) with a per-32-element scale spanning 1e-3 .. 10, some zero blocks. */
static void fill_random(float *v, int64_t n) {
    float scale = 1.0f;
    for (int64_t k = 0; k < n; k++) {
        if (k % 32 == 0) {
            uint32_t r = rng_u32() % 16;
            scale = r == 0 ? 0.0f : r == 1 ? 1e-3f : r == 2 ? 10.0f : 0.5f + (float)r / 16.0f;
        }
        v[k] = rng_uniform() * scale;
    }
}

/* ---- the configurations under test --------------------------------------- */

typedef struct {
    const char *name;
    spex_matmul_kernels k;
} table_variant;

static int get_variants(table_variant *v) {
    int n = 0;
    if (spex_matmul_kernels_build(&v[n].k, SPEX_ISA_SCALAR, 0)) v[n++].name = "scalar";
    if (spex_matmul_kernels_build(&v[n].k, SPEX_ISA_AVX2, 0)) v[n++].name = "avx2";
    if (spex_matmul_kernels_build(&v[n].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_VNNI | SPEX_MATMUL_FEAT_AMX))
        v[n++].name = "avx512-vnni-amx";
    else
        printf("  (no AMX-INT8 on this CPU or OS: the AMX tiles are not tested here)\n");
    if (spex_matmul_kernels_build(&v[n].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_VNNI)) v[n++].name = "avx512-vnni";
    if (spex_matmul_kernels_build(&v[n].k, SPEX_ISA_AVX512, 0)) v[n++].name = "avx512";
    return n;
}

static const int64_t N_OUTS[] = {1, 3, 31, 33, 255, 257};
static const int64_t N_ROWS[] = {1, 2, 3, 7, 8, 9, 16, 64, 65};
/* 4352 and 8448: more blocks than the AVX-512 kernels prepare at a time (128 for several
 * activation rows, 256 for one), so partial sums are carried across chunks */
static const int64_t NS[] = {32, 96, 256, 512 + 32, 4096, 4096 + 256, 8192 + 256};
#define MAX_OUT 257
#define MAX_ROWS 65

static bool is_kquant(spex_type t) { return t == SPEX_TYPE_Q4_K || t == SPEX_TYPE_Q5_K || t == SPEX_TYPE_Q6_K; }

/* ---- one (type, n) data set: weights, activations, references -------------- */

typedef struct {
    spex_type t, act;
    int64_t n, n_out, n_rows;  /* n_out, n_rows: the full tile */
    size_t wrow, xrow;         /* bytes per weight row, per converted activation row */
    uint8_t *W, *Xq;           /* quantized weights, converted activations (scalar) */
    float *X;                  /* f32 activations [n_rows][n] */
    double *Yd, *tol;          /* double reference and bound [n_rows][n_out] */
    float *Ys;                 /* scalar kernel on the full tile */
} dataset;

static void dataset_free(dataset *d) {
    free(d->W); free(d->Xq); free(d->X); free(d->Yd); free(d->tol); free(d->Ys);
    memset(d, 0, sizeof *d);
}

static double mag_factor(spex_type t) {
    if (t == SPEX_TYPE_Q4_1 || t == SPEX_TYPE_Q5_1 || is_kquant(t)) return 4.0;
    return 1.0;
}
static double n_terms(spex_type t, int64_t n) {
    if (t == SPEX_TYPE_F32 || t == SPEX_TYPE_F16 || t == SPEX_TYPE_BF16) return (double)n;
    return is_kquant(t) ? (double)n / 16 : (double)n / 32;
}

/* Builds the data set; false (with a message) if a reference conversion is missing. */
static bool dataset_make(dataset *d, const spex_matmul_kernels *scalar, spex_type t, int64_t n, int64_t n_out,
                         int64_t n_rows) {
    memset(d, 0, sizeof *d);
    d->t = t; d->act = spex_matmul_act_type(t); d->n = n; d->n_out = n_out; d->n_rows = n_rows;
    d->wrow = spex_type_row_size(t, n);
    d->xrow = d->act == SPEX_TYPE_F32 ? (size_t)n * 4 : spex_type_row_size(d->act, n);
    d->W = malloc((size_t)n_out * d->wrow);
    d->Xq = malloc((size_t)n_rows * d->xrow);
    d->X = malloc((size_t)(n_rows * n) * sizeof(float));
    d->Yd = malloc((size_t)(n_rows * n_out) * sizeof(double));
    d->tol = malloc((size_t)(n_rows * n_out) * sizeof(double));
    d->Ys = malloc((size_t)(n_rows * n_out) * sizeof(float));
    float *wf = malloc((size_t)(n_out * n) * sizeof(float));
    float *wd = malloc((size_t)(n_out * n) * sizeof(float));
    float *xd = malloc((size_t)(n_rows * n) * sizeof(float));
    bool ok = true;
    fill_random(wf, n_out * n);
    fill_random(d->X, n_rows * n);
    for (int64_t i = 0; i < n_out && ok; i++) {
        if (t == SPEX_TYPE_F32) memcpy(d->W + i * d->wrow, wf + i * n, d->wrow);
        else ok = spex_quantize_row_ref(t, wf + i * n, d->W + i * d->wrow, n) == SPEX_OK;
        if (ok && t == SPEX_TYPE_F32) memcpy(wd + i * n, wf + i * n, d->wrow);
        else if (ok) ok = spex_dequantize_row_ref(t, d->W + i * d->wrow, wd + i * n, n) == SPEX_OK;
    }
    for (int64_t j = 0; j < n_rows && ok; j++) {
        scalar->act_quant[d->act](d->X + j * n, d->Xq + j * d->xrow, n);
        if (d->act == SPEX_TYPE_F32) memcpy(xd + j * n, d->X + j * n, (size_t)n * 4);
        else ok = spex_dequantize_row_ref(d->act, d->Xq + j * d->xrow, xd + j * n, n) == SPEX_OK;
    }
    if (ok) {
        const double u = FLT_EPSILON / 2; /* 2^-24 */
        const double c = 16.0 * sqrt(n_terms(t, n)) + 4.0;
        const bool has_min = t == SPEX_TYPE_Q4_1 || t == SPEX_TYPE_Q5_1;
        for (int64_t j = 0; j < n_rows; j++) {
            const float *xr = xd + j * n;
            const block_q8_1 *xb = (const block_q8_1 *)(d->Xq + j * d->xrow);
            for (int64_t i = 0; i < n_out; i++) {
                const float *wr = wd + i * n;
                double s = 0, a = 0, extra = 0;
                for (int64_t k = 0; k < n; k++) {
                    s += (double)wr[k] * xr[k];
                    a += fabs((double)wr[k] * xr[k]);
                }
                if (has_min) {
                    const uint8_t *wb = d->W + i * d->wrow;
                    const size_t bs = spex_type_get_info(t)->type_size;
                    for (int64_t b = 0; b < n / 32; b++) {
                        spex_fp16 m;
                        memcpy(&m, wb + b * bs + 2, 2); /* block_q4_1 / q5_1: d, m, ... */
                        int sq = 0;
                        for (int k = 0; k < 32; k++) sq += xb[b].qs[k];
                        /* |s - dx*sq| <= |s - d*sq| + |sq| |d - dx|, each rounding to fp16 off by
                         * 2^-11 relative or 2^-25 absolute (subnormal) */
                        const double sv = fabs(spex_fp16_to_f32(xb[b].s)), dx = fabs(spex_fp16_to_f32(xb[b].d));
                        extra += 1.01 * fabs(spex_fp16_to_f32(m)) *
                                 (sv / 2048 + 0x1p-25 + fabs((double)sq) * (dx / 2048 + 0x1p-25));
                    }
                }
                d->Yd[j * n_out + i] = s;
                d->tol[j * n_out + i] = c * u * a * mag_factor(t) + extra + 1e-30;
            }
        }
        scalar->dot[t](n, d->W, d->wrow, (int)n_out, d->Xq, d->xrow, (int)n_rows, d->Ys, (size_t)n_out);
    }
    free(wf); free(wd); free(xd);
    return ok;
}

/* Runs a kernel on the sub-tile [0, no) × [0, nr) of the data set into y (stride ldy). */
static void run_tile(const spex_matmul_kernels *k, const dataset *d, int64_t no, int64_t nr, float *y, size_t ldy) {
    k->dot[d->t](d->n, d->W, d->wrow, (int)no, d->Xq, d->xrow, (int)nr, y, ldy);
}

/* ---- kernels against the references ---------------------------------------- */

static int n_checked;

/* Checks every weight type with a scalar kernel at every n. */
TEST(kernels_match_reference) {
    table_variant v[5];
    const int nv = get_variants(v);
    CHECK(nv >= 1 && !strcmp(v[0].name, "scalar"));
    const spex_matmul_kernels *scalar = &v[0].k;
    float *yv = malloc((MAX_OUT + 5) * MAX_ROWS * sizeof(float));
    float *yfull = malloc(MAX_OUT * MAX_ROWS * sizeof(float));
    for (int t = 0; t < SPEX_TYPE_COUNT; t++) {
        if (!scalar->dot[t]) continue;
        const spex_type act = spex_matmul_act_type((spex_type)t);
        CHECK_MSG(act != SPEX_TYPE_COUNT && scalar->act_quant[act], "type %s: no activation quantizer",
                  spex_type_get_info(t)->name);
        for (size_t in = 0; in < sizeof NS / sizeof NS[0]; in++) {
            const int64_t n = NS[in];
            if (n % spex_type_get_info(t)->block_size || n % spex_type_get_info(act)->block_size) continue;
            /* the large n keep the full output range but fewer activation rows (time) */
            const int64_t rows_max = n >= 4096 ? 9 : MAX_ROWS;
            const bool huge = n > 8192;
            dataset d;
            if (!dataset_make(&d, scalar, (spex_type)t, n, MAX_OUT, rows_max)) {
                dataset_free(&d);
                CHECK_MSG(0, "type %s: reference quantize/dequantize failed", spex_type_get_info(t)->name);
            }
            /* scalar vs double */
            for (int64_t e = 0; e < MAX_OUT * rows_max; e++) {
                double err = fabs((double)d.Ys[e] - d.Yd[e]);
                if (!(err <= d.tol[e])) {
                    printf("  scalar %s n=%lld out %lld row %lld: %.9g vs %.9g (tol %.3g)\n",
                           spex_type_get_info(t)->name, (long long)n, (long long)(e % MAX_OUT),
                           (long long)(e / MAX_OUT), d.Ys[e], d.Yd[e], d.tol[e]);
                    dataset_free(&d);
                    free(yv); free(yfull);
                    CHECK(0);
                }
            }
            for (int iv = 1; iv < nv; iv++) {
                const spex_matmul_kernels *k = &v[iv].k;
                run_tile(k, &d, MAX_OUT, rows_max, yfull, MAX_OUT);
                /* each activation row alone (decode) gives its row of the batch bit for bit */
                for (int64_t j = 0; j < rows_max; j += (j < 9 ? 1 : 7)) {
                    k->dot[t](n, d.W, d.wrow, MAX_OUT, d.Xq + (size_t)j * d.xrow, d.xrow, 1, yv, MAX_OUT);
                    if (memcmp(yv, yfull + j * MAX_OUT, MAX_OUT * sizeof(float)) != 0) {
                        printf("  %s %s n=%lld: activation row %lld alone differs from the batch\n", v[iv].name,
                               spex_type_get_info(t)->name, (long long)n, (long long)j);
                        dataset_free(&d);
                        free(yv); free(yfull);
                        CHECK(0);
                    }
                }
                for (size_t io = 0; io < sizeof N_OUTS / sizeof N_OUTS[0]; io++) {
                    for (size_t ir = 0; ir < sizeof N_ROWS / sizeof N_ROWS[0]; ir++) {
                        const int64_t no = N_OUTS[io], nr = N_ROWS[ir];
                        if (nr > rows_max) continue;
                        if (huge && (io % 2 == 0 || (nr != 1 && nr != 9))) continue; /* time */
                        const size_t ldy = (size_t)no + 5; /* a stride wider than the tile */
                        run_tile(k, &d, no, nr, yv, ldy);
                        for (int64_t j = 0; j < nr; j++) {
                            for (int64_t i = 0; i < no; i++) {
                                const int64_t e = j * MAX_OUT + i;
                                const float y = yv[(size_t)j * ldy + (size_t)i];
                                const double err = fabs((double)y - d.Yd[e]);
                                const double errs = fabs((double)y - d.Ys[e]);
                                bool ok = err <= d.tol[e] && errs <= 2 * d.tol[e];
                                bool same = memcmp(&y, &yfull[e], sizeof y) == 0;
                                if (!ok || !same) {
                                    printf("  %s %s n=%lld tile %lldx%lld out %lld row %lld: %.9g vs double %.9g, "
                                           "scalar %.9g, full tile %.9g (tol %.3g)\n",
                                           v[iv].name, spex_type_get_info(t)->name, (long long)n, (long long)no,
                                           (long long)nr, (long long)i, (long long)j, y, d.Yd[e], d.Ys[e], yfull[e],
                                           d.tol[e]);
                                    dataset_free(&d);
                                    free(yv); free(yfull);
                                    CHECK(0);
                                }
                                n_checked++;
                            }
                        }
                    }
                }
            }
            dataset_free(&d);
        }
    }
    free(yv); free(yfull);
    CHECK(n_checked > 0);
}

/* A wrong kernel must fail the bound: perturb one weight code and see the check trip. */
TEST(reference_bound_is_tight_enough) {
    const spex_matmul_kernels *scalar = spex_matmul_kernels_for(SPEX_ISA_SCALAR);
    dataset d;
    CHECK(dataset_make(&d, scalar, SPEX_TYPE_Q8_0, 4096, 4, 1));
    block_q8_0 *b = (block_q8_0 *)d.W;
    const block_q8_0 *xb = (const block_q8_0 *)d.Xq;
    int bi = 0; /* the block where the change matters most */
    for (int k = 1; k < 128; k++)
        if (spex_fp16_to_f32(b[k].d) * spex_fp16_to_f32(xb[k].d) * abs(xb[k].qs[5]) >
            spex_fp16_to_f32(b[bi].d) * spex_fp16_to_f32(xb[bi].d) * abs(xb[bi].qs[5]))
            bi = k;
    b[bi].qs[5] = (int8_t)(b[bi].qs[5] > 0 ? b[bi].qs[5] - 20 : b[bi].qs[5] + 20);
    float y;
    scalar->dot[SPEX_TYPE_Q8_0](d.n, d.W, d.wrow, 1, d.Xq, d.xrow, 1, &y, 1);
    const double delta = 20.0 * spex_fp16_to_f32(b[bi].d) * spex_fp16_to_f32(xb[bi].d) * fabs((double)xb[bi].qs[5]);
    const double err = fabs((double)y - d.Yd[0]), tol = d.tol[0];
    dataset_free(&d);
    CHECK_MSG(err > tol, "one changed code (delta %.3g) stayed within the bound %.3g", delta, tol);
}

/* ---- activation quantizers -------------------------------------------------- */

TEST(act_quant_simd_bytes_equal_scalar) {
    table_variant v[5];
    const int nv = get_variants(v);
    const int64_t n = 1024;
    float *x = malloc(n * sizeof(float));
    fill_random(x, n);
    /* block 1: amax 127 so id = 1 and x*id = x: ties at .5 must round away from zero */
    const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.5f, 1.49999994f, -1.5f, 3.5f, 0.0f};
    for (size_t k = 0; k < sizeof ties / sizeof ties[0]; k++) x[32 + k] = ties[k];
    memset(x + 64, 0, 32 * sizeof(float)); /* block 2: all zero */
    uint8_t *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4); /* f32 is the largest */
    const spex_type acts[] = {SPEX_TYPE_Q8_0, SPEX_TYPE_Q8_1, SPEX_TYPE_Q8_K, SPEX_TYPE_F32};
    for (size_t ia = 0; ia < 4; ia++) {
        const spex_type at = acts[ia];
        if (!v[0].k.act_quant[at]) continue;
        const size_t rs = at == SPEX_TYPE_F32 ? (size_t)n * 4 : spex_type_row_size(at, n);
        v[0].k.act_quant[at](x, a, n);
        if (at == SPEX_TYPE_Q8_0) {
            const block_q8_0 *q = (const block_q8_0 *)a;
            CHECK(q[1].qs[1] == 3 && q[1].qs[2] == -3 && q[1].qs[3] == 1 && q[1].qs[4] == -1);
            CHECK(q[1].qs[5] == 127 && q[1].qs[6] == -127 && q[1].qs[7] == 1 && q[1].qs[8] == -2);
            CHECK(q[2].d == 0 && q[2].qs[0] == 0);
        }
        for (int iv = 1; iv < nv; iv++) {
            memset(b, 0xab, rs);
            v[iv].k.act_quant[at](x, b, n);
            CHECK_MSG(memcmp(a, b, rs) == 0, "%s act_quant[%s] differs from scalar", v[iv].name,
                      spex_type_get_info(at)->name);
        }
    }
    free(a); free(b); free(x);
}

/* Every SIMD variant's act_quant[act] of x (n values, nb blocks) against the scalar bytes in
 * ref (which this fills first), block by block. */
static void act_quant_blocks_match(const table_variant *v, int nv, spex_type act, const float *x, int64_t n,
                                   int nb, uint8_t *ref) {
    const size_t rs = spex_type_row_size(act, n), bs = rs / (size_t)nb;
    uint8_t *got = malloc(rs);
    CHECK(!strcmp(v[0].name, "scalar") && v[0].k.act_quant[act]);
    v[0].k.act_quant[act](x, ref, n);
    for (int iv = 1; iv < nv; iv++) {
        memset(got, 0xab, rs);
        v[iv].k.act_quant[act](x, got, n);
        for (int k = 0; k < nb; k++)
            CHECK_MSG(memcmp(ref + k * bs, got + k * bs, bs) == 0, "%s: %s block %d differs from scalar", v[iv].name,
                      spex_type_get_info(act)->name, k);
    }
    free(got);
}

/* Q8_K takes its scale from the block's first element of largest magnitude, with its sign;
 * the SIMD quantizers find it from the block's max and min and search only when both +amax
 * and -amax occur. One block per case, every variant against the scalar bytes. */
TEST(act_quant_q8_K_largest_element_cases) {
    table_variant v[5];
    const int nv = get_variants(v);
    enum { NB = 10 };
    const int64_t n = NB * 256;
    float *x = malloc(n * sizeof(float));
    fill_random(x, n);
    float *b;
    const float inf = INFINITY, nan = NAN;
    b = x + 0 * 256; b[40] = 1000.0f; b[200] = -1000.0f;            /* both signs, + first */
    b = x + 1 * 256; b[40] = -1000.0f; b[200] = 1000.0f;            /* both signs, - first */
    b = x + 2 * 256; b[7] = -1000.0f; b[255] = -1000.0f;            /* only -amax, twice */
    b = x + 3 * 256; b[255] = 1000.0f;                           /* +amax last */
    b = x + 4 * 256; b[0] = -1000.0f;                            /* -amax first */
    b = x + 5 * 256; b[3] = nan; b[100] = -1000.0f; b[101] = nan; /* NaNs skipped */
    b = x + 6 * 256; for (int k = 0; k < 256; k++) b[k] = nan; /* all NaN: a zero block */
    b = x + 7 * 256; b[9] = -inf; b[17] = inf;                /* both infinities, - first */
    b = x + 8 * 256; b[33] = inf;                             /* +inf alone */
    b = x + 9 * 256; for (int k = 0; k < 256; k++) b[k] = k % 2 ? -0.0f : 0.0f; /* signed zeros */
    uint8_t *ref = malloc(spex_type_row_size(SPEX_TYPE_Q8_K, n));
    act_quant_blocks_match(v, nv, SPEX_TYPE_Q8_K, x, n, NB, ref);
    const block_q8_K *q = (const block_q8_K *)ref;
    /* the reference's own choices: the sign of the first largest element sets d's sign */
    CHECK(q[0].d < 0 && q[0].qs[40] == -127 && q[0].qs[200] == 127);
    CHECK(q[1].d > 0 && q[1].qs[40] == -127 && q[1].qs[200] == 127);
    CHECK(q[2].d > 0 && q[2].qs[7] == -127);
    CHECK(q[3].d < 0 && q[3].qs[255] == -127);
    CHECK(q[6].d == 0 && q[6].bsums[0] == 0);
    CHECK(q[9].d == 0);
    free(ref); free(x);
}

/* Q8_0 quantizers take 16 blocks at a time where they can (AVX-512) and hand blocks or
 * groups with a NaN or an infinity to the reference: full groups, a tail, non-finite values
 * in a group and in the tail, finite pairs whose sum overflows, and an all-zero group, every
 * variant against the scalar bytes. */
TEST(act_quant_q8_0_groups_tail_and_non_finite) {
    table_variant v[5];
    const int nv = get_variants(v);
    enum { NB = 16 * 4 + 5 };
    const int64_t n = NB * 32;
    float *x = malloc(n * sizeof(float));
    fill_random(x, n);
    x[32 * 3 + 2] = 50.0f, x[32 * 3 + 7] = NAN; /* group 0: the reference forgets the max before a NaN */
    x[32 * 17 + 0] = 3e38f, x[32 * 17 + 16] = 3e38f;        /* group 1: lanes whose sum overflows */
    memset(x + 32 * 32, 0, 16 * 32 * sizeof(float));        /* group 2: all zero */
    x[32 * 64 + 2] = -INFINITY;                             /* the tail */
    x[32 * 66 + 31] = NAN, x[32 * 66 + 30] = 5.0f;
    uint8_t *ref = malloc(spex_type_row_size(SPEX_TYPE_Q8_0, n));
    act_quant_blocks_match(v, nv, SPEX_TYPE_Q8_0, x, n, NB, ref);
    free(ref); free(x);
}

/* ---- the driver --------------------------------------------------------------- */

typedef struct {
    spex_type t;
    int64_t n, n_out, n_rows;
} shape;

/* Runs spex_matmul on a data set with a pool of nth threads (0: no pool). */
static spex_status run_driver(const dataset *d, spex_type t, int nth, float *y, void *ws) {
    spex_pool *pool = NULL;
    if (nth > 0 && spex_pool_create(nth, &pool, NULL) != SPEX_OK) return SPEX_ERR_NOMEM;
    spex_matmul_args a = {.wtype = t, .W = d->W, .n_out = d->n_out, .n = d->n, .X = d->X, .ldx = d->n,
                          .n_rows = d->n_rows, .Y = y, .ldy = d->n_out, .ws = ws};
    spex_status st = spex_matmul(pool, &a);
    spex_pool_free(pool);
    return st;
}

TEST(driver_threads_bit_equal_and_close_to_f32) {
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    const spex_matmul_kernels *scalar = spex_matmul_kernels_for(SPEX_ISA_SCALAR);
    const shape shapes[] = {
        {SPEX_TYPE_Q8_0, 4096, 257, 1},  {SPEX_TYPE_Q4_0, 544, 255, 8},  {SPEX_TYPE_Q4_1, 256, 33, 9},
        {SPEX_TYPE_Q5_0, 96, 31, 16},    {SPEX_TYPE_Q5_1, 512, 64, 3},   {SPEX_TYPE_F16, 100, 37, 7},
        {SPEX_TYPE_BF16, 33, 5, 2},      {SPEX_TYPE_F32, 4096, 19, 65},  {SPEX_TYPE_Q8_0, 4096, 33, 200},
        {SPEX_TYPE_Q4_K, 4096, 33, 5},   {SPEX_TYPE_Q6_K, 512, 65, 17},  {SPEX_TYPE_Q5_K, 256, 7, 1},
        /* several chunks per thread, 16-row blocks with a tail of 3, 8 and 13 rows */
        {SPEX_TYPE_Q4_K, 1024, 531, 8},  {SPEX_TYPE_Q4_K, 768, 200, 13}, {SPEX_TYPE_Q5_K, 512, 77, 9},
    };
    int ran = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape sh = shapes[s];
        if (!k->dot[sh.t]) continue; /* K-quants until registered */
        dataset d;
        CHECK(dataset_make(&d, scalar, sh.t, sh.n, sh.n_out, sh.n_rows));
        const size_t ny = (size_t)(sh.n_out * sh.n_rows);
        float *y0 = malloc(ny * 4), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4), *yk = malloc(ny * 4);
        const size_t wss = spex_matmul_ws_size(sh.t, sh.n, sh.n_rows);
        uint8_t *ws = malloc(wss + 1) ;
        bool ok = run_driver(&d, sh.t, 0, y0, wss ? ws + 1 : NULL) == SPEX_OK; /* misaligned workspace */
        ok = ok && run_driver(&d, sh.t, 1, y1, wss ? ws : NULL) == SPEX_OK;
        ok = ok && run_driver(&d, sh.t, 2, y2, wss ? ws : NULL) == SPEX_OK;
        /* the kernel on the whole tile, with activations converted by this table's quantizer */
        uint8_t *xq = malloc((size_t)sh.n_rows * d.xrow);
        for (int64_t j = 0; j < sh.n_rows; j++) k->act_quant[d.act](d.X + j * sh.n, xq + j * d.xrow, sh.n);
        k->dot[sh.t](sh.n, d.W, d.wrow, (int)sh.n_out, d.act == SPEX_TYPE_F32 ? (const void *)d.X : xq, d.xrow,
                     (int)sh.n_rows, yk, (size_t)sh.n_out);
        bool same = ok && !memcmp(y0, y1, ny * 4) && !memcmp(y0, y2, ny * 4) && !memcmp(y0, yk, ny * 4);
        /* close to the product with unconverted f32 activations: the activation error is at
         * most 0.57 * d_block per element (half a step plus the fp16 rounding of d) */
        double worst = 0;
        if (same && d.act != SPEX_TYPE_F32) {
            for (int64_t j = 0; j < sh.n_rows; j++) {
                const float *xr = d.X + j * sh.n;
                float *wdq = malloc((size_t)sh.n * 4);
                for (int64_t i = 0; i < sh.n_out; i++) {
                    spex_dequantize_row_ref(sh.t, d.W + i * d.wrow, wdq, sh.n);
                    double ex = 0, bound = 0;
                    const int64_t abs_ = spex_type_get_info(d.act)->block_size;
                    for (int64_t b0 = 0; b0 < sh.n; b0 += abs_) {
                        float amax = 0;
                        for (int64_t q = 0; q < abs_; q++) amax = fmaxf(amax, fabsf(xr[b0 + q]));
                        for (int64_t q = 0; q < abs_; q++) {
                            ex += (double)wdq[b0 + q] * xr[b0 + q];
                            bound += fabs((double)wdq[b0 + q]) * 0.57 * amax / 127.0;
                        }
                    }
                    const double err = fabs(y0[j * sh.n_out + i] - ex) - d.tol[j * sh.n_out + i];
                    if (err > bound) worst = err / bound;
                }
                free(wdq);
            }
        }
        free(y0); free(y1); free(y2); free(yk); free(ws); free(xq);
        dataset_free(&d);
        CHECK_MSG(ok, "%s: spex_matmul failed", spex_type_get_info(sh.t)->name);
        CHECK_MSG(same, "%s n=%lld out=%lld rows=%lld: thread counts or kernel differ",
                  spex_type_get_info(sh.t)->name, (long long)sh.n, (long long)sh.n_out, (long long)sh.n_rows);
        CHECK_MSG(worst == 0, "%s: error %.3g x the activation-quantization bound", spex_type_get_info(sh.t)->name, worst);
        ran++;
    }
    CHECK(ran >= 9);
}

/* spex_matmul_task_multi: three matrices (mixed K-quant types, same activations) in one task,
 * on 1, 2 and 3 threads, give bit for bit what three spex_matmul calls give — with 1 and 3
 * rows through the ranged chunk split (contiguous ranges of uneven byte sizes across the
 * three matrices, then stealing), with 8 and 40 through the dynamic one. */
typedef struct {
    const spex_matmul_args *a;
    int n;
} multi_job;
static void multi_task(void *ctx, int ith, int nth) {
    const multi_job *j = ctx;
    spex_matmul_task_multi(j->a, j->n, ith, nth);
}

TEST(multi_task_bit_equal_single) {
    const spex_matmul_kernels *scalar = spex_matmul_kernels_for(SPEX_ISA_SCALAR);
    const spex_type types[3] = {SPEX_TYPE_Q4_K, SPEX_TYPE_Q6_K, SPEX_TYPE_Q5_K};
    const int64_t outs[3] = {531, 64, 128}, n = 1024;
    const int64_t row_counts[] = {1, 3, 8, 40};
    for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++) {
        const int64_t nr = row_counts[rc];
        dataset d[3];
        for (int i = 0; i < 3; i++) CHECK(dataset_make(&d[i], scalar, types[i], n, outs[i], nr));
        const size_t wss = spex_matmul_ws_size(SPEX_TYPE_Q4_K, n, nr);
        uint8_t *ws = malloc(wss);
        float *ys[3], *ym[3];
        spex_matmul_args a[3];
        bool ok = true;
        for (int i = 0; i < 3; i++) {
            ys[i] = malloc(sizeof(float) * (size_t)(outs[i] * nr));
            ym[i] = malloc(sizeof(float) * (size_t)(outs[i] * nr));
            a[i] = (spex_matmul_args){.wtype = types[i], .W = d[i].W, .n_out = outs[i], .n = n, .X = d[0].X,
                                      .ldx = n, .n_rows = nr, .Y = ys[i], .ldy = outs[i], .ws = ws};
            ok = ok && spex_matmul(NULL, &a[i]) == SPEX_OK;
            a[i].Y = ym[i];
            ok = ok && spex_matmul_can_share(&a[0], &a[i]);
        }
        CHECK(ok);
        for (int nth = 0; nth <= 3; nth++) {
            for (int i = 0; i < 3; i++) memset(ym[i], 0xff, sizeof(float) * (size_t)(outs[i] * nr));
            if (nth == 0) {
                spex_matmul_task_multi(a, 3, 0, 1);
            } else {
                spex_pool *pool = NULL;
                CHECK(spex_pool_create(nth, &pool, NULL) == SPEX_OK);
                for (int i = 0; i < 3; i++) a[i].pool = pool;
                multi_job j = {a, 3};
                spex_pool_run(pool, multi_task, &j);
                spex_pool_free(pool);
                for (int i = 0; i < 3; i++) a[i].pool = NULL;
            }
            for (int i = 0; i < 3; i++)
                CHECK_MSG(!memcmp(ys[i], ym[i], sizeof(float) * (size_t)(outs[i] * nr)),
                          "rows %lld, %d threads: matrix %d (%s) differs from its own spex_matmul", (long long)nr,
                          nth, i, spex_type_get_info(types[i])->name);
        }
        for (int i = 0; i < 3; i++) {
            free(ys[i]);
            free(ym[i]);
            dataset_free(&d[i]);
        }
        free(ws);
    }
    /* different activation types cannot share one conversion */
    spex_matmul_args q4 = {.wtype = SPEX_TYPE_Q4_K, .n = 256, .n_rows = 1}, q8 = q4, q6 = q4;
    q8.wtype = SPEX_TYPE_Q8_0;
    q6.wtype = SPEX_TYPE_Q6_K;
    CHECK(!spex_matmul_can_share(&q4, &q8));
    CHECK(spex_matmul_can_share(&q4, &q6));
}

/* The optional modes of spex_matmul_task_multi (cpu/matmul.h): slice_align (the matrices cut
 * into per-thread column slices) and conv_cols (each thread converts its columns of every row)
 * give the same bits as spex_matmul, on 2-4 threads (so slices can be empty or uneven), with
 * 1, 3 and 16 rows (the regime that uses them) and 40 (which ignores them). */
TEST(sliced_and_column_converted_bit_equal) {
    const spex_matmul_kernels *scalar = spex_matmul_kernels_for(SPEX_ISA_SCALAR);
    const struct {
        spex_type t0, t1;
        int64_t n, n_out, align;
    } cases[] = {
        {SPEX_TYPE_Q4_K, SPEX_TYPE_Q6_K, 1024, 544, 256}, /* 2 units of 256 output rows */
        {SPEX_TYPE_Q8_0, SPEX_TYPE_Q8_0, 96, 1024, 32},   /* 3 conversion units of 32 columns */
        {SPEX_TYPE_F16, SPEX_TYPE_F16, 64, 80, 16},
    };
    const int64_t row_counts[] = {1, 3, 16, 40};
    int ran = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++) {
            const int64_t nr = row_counts[rc], n = cases[ci].n, no = cases[ci].n_out;
            const spex_type types[2] = {cases[ci].t0, cases[ci].t1};
            dataset d[2];
            CHECK(dataset_make(&d[0], scalar, types[0], n, no, nr));
            CHECK(dataset_make(&d[1], scalar, types[1], n, no, nr));
            const size_t wss = spex_matmul_ws_size(types[0], n, nr);
            uint8_t *ws = wss ? malloc(wss) : NULL;
            float *ys[2], *ym[2];
            spex_matmul_args a[2];
            bool ok = true;
            for (int i = 0; i < 2; i++) {
                ys[i] = malloc(sizeof(float) * (size_t)(no * nr));
                ym[i] = malloc(sizeof(float) * (size_t)(no * nr));
                a[i] = (spex_matmul_args){.wtype = types[i], .W = d[i].W, .n_out = no, .n = n, .X = d[0].X,
                                          .ldx = n, .n_rows = nr, .Y = ys[i], .ldy = no, .ws = ws};
                ok = ok && spex_matmul(NULL, &a[i]) == SPEX_OK;
                a[i].Y = ym[i];
            }
            CHECK(ok && spex_matmul_can_share(&a[0], &a[1]));
            CHECK(spex_matmul_col_align(types[0]) == cases[ci].align);
            for (int mode = 0; mode < 2; mode++) {
                for (int nth = 2; nth <= 4; nth++) {
                    spex_pool *pool = NULL;
                    CHECK(spex_pool_create(nth, &pool, NULL) == SPEX_OK);
                    for (int i = 0; i < 2; i++) {
                        memset(ym[i], 0xff, sizeof(float) * (size_t)(no * nr));
                        a[i].pool = pool;
                    }
                    /* mode 0: gate/up-style slices of both matrices; mode 1: one matrix whose
                     * activations each thread converts by columns */
                    a[0].slice_align = mode == 0 ? cases[ci].align : 0;
                    a[0].conv_cols = mode == 1;
                    CHECK(spex_matmul_converts_own_cols(&a[0], nth) ==
                          (mode == 1 && nr <= 16 && types[0] != SPEX_TYPE_F16));
                    multi_job j = {a, mode == 0 ? 2 : 1};
                    spex_pool_run(pool, multi_task, &j);
                    spex_pool_free(pool);
                    for (int i = 0; i < j.n; i++) {
                        a[i].pool = NULL;
                        CHECK_MSG(!memcmp(ys[i], ym[i], sizeof(float) * (size_t)(no * nr)),
                                  "%s, rows %lld, %d threads, %s: matrix %d differs from its own spex_matmul",
                                  spex_type_get_info(types[i])->name, (long long)nr, nth,
                                  mode == 0 ? "sliced" : "conv_cols", i);
                    }
                    a[1].pool = NULL;
                    ran++;
                }
            }
            a[0].slice_align = 0;
            a[0].conv_cols = false;
            for (int i = 0; i < 2; i++) {
                free(ys[i]);
                free(ym[i]);
                dataset_free(&d[i]);
            }
            free(ws);
        }
    }
    CHECK(ran == 3 * 4 * 2 * 3);
    /* the column split: whole units, the last thread takes the rest, empty slices allowed */
    int64_t c0, c1;
    spex_matmul_col_split(544, 256, 0, 3, &c0, &c1);
    CHECK(c0 == 0 && c1 == 0);
    spex_matmul_col_split(544, 256, 1, 3, &c0, &c1);
    CHECK(c0 == 0 && c1 == 256);
    spex_matmul_col_split(544, 256, 2, 3, &c0, &c1);
    CHECK(c0 == 256 && c1 == 544);
    CHECK(spex_matmul_ranged_regime(16, 2) && !spex_matmul_ranged_regime(17, 2) && !spex_matmul_ranged_regime(1, 1));
}

TEST(driver_validates_arguments) {
    float x[64] = {0}, y[4];
    uint8_t w[4 * 34] = {0}, ws[4096];
    spex_matmul_args ok = {.wtype = SPEX_TYPE_Q8_0, .W = w, .n_out = 2, .n = 64, .X = x, .ldx = 64, .n_rows = 1,
                           .Y = y, .ldy = 2, .ws = ws};
    CHECK(spex_matmul_ws_size(SPEX_TYPE_Q8_0, 64, 1) <= sizeof ws);
    CHECK_OK(spex_matmul(NULL, &ok));
    spex_matmul_args a = ok;
    a.n = 48; /* not a multiple of 32 */
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.ldx = 32;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.ldy = 1;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.ws = NULL;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.n_rows = 0;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.W = NULL;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_INVALID_ARG);
    a = ok; a.wtype = SPEX_TYPE_Q2_K;
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_UNSUPPORTED);
    a = ok; a.wtype = SPEX_TYPE_Q8_K; /* activation-only type */
    CHECK_EQ_INT(spex_matmul(NULL, &a), SPEX_ERR_UNSUPPORTED);
    float wf[2 * 64] = {0};
    a = ok; a.wtype = SPEX_TYPE_F32; a.W = wf; a.ws = NULL; /* float weights need no workspace */
    CHECK_EQ_INT(spex_matmul_ws_size(SPEX_TYPE_F32, 64, 1), 0);
    CHECK_OK(spex_matmul(NULL, &a));
    CHECK_EQ_INT(spex_matmul(NULL, NULL), SPEX_ERR_INVALID_ARG);
}

TEST(tables_and_act_types) {
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_F16), SPEX_TYPE_F32);
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_Q4_0), SPEX_TYPE_Q8_0);
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_Q5_1), SPEX_TYPE_Q8_1);
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_Q6_K), SPEX_TYPE_Q8_K);
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_Q8_K), SPEX_TYPE_COUNT);
    CHECK_EQ_INT(spex_matmul_act_type(SPEX_TYPE_I8), SPEX_TYPE_COUNT);
    const spex_type owned[] = {SPEX_TYPE_F32, SPEX_TYPE_F16, SPEX_TYPE_BF16, SPEX_TYPE_Q8_0,
                               SPEX_TYPE_Q4_0, SPEX_TYPE_Q4_1, SPEX_TYPE_Q5_0, SPEX_TYPE_Q5_1};
    table_variant v[5];
    const int nv = get_variants(v);
    for (int iv = 0; iv < nv; iv++)
        for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
            CHECK_MSG(v[iv].k.dot[owned[i]] && v[iv].k.act_quant[spex_matmul_act_type(owned[i])], "%s: %s missing",
                      v[iv].name, spex_type_get_info(owned[i])->name);
    CHECK(spex_matmul_kernels_get() == spex_matmul_kernels_for(spex_cpu_isa()));
    const spex_cpu_features *f = spex_cpu_get_features();
    CHECK((spex_matmul_kernels_for(SPEX_ISA_AVX512) != NULL) == (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx2));
#if defined(__x86_64__)
    CHECK(spex_matmul_kernels_for(SPEX_ISA_NEON) == NULL);
    if (f->avx512f && !f->avx512vnni) CHECK(!spex_matmul_kernels_build(&v[0].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_VNNI));
    if (!f->avxvnni) CHECK(!spex_matmul_kernels_build(&v[0].k, SPEX_ISA_AVX2, SPEX_MATMUL_FEAT_VNNI));
    /* the default AVX2 table repacks Q4_K to R16 exactly where it has AVX-VNNI */
    if (spex_matmul_kernels_for(SPEX_ISA_AVX2))
        CHECK(spex_matmul_kernels_for(SPEX_ISA_AVX2)->r16_fast[SPEX_TYPE_Q4_K] == f->avxvnni);
    if (!f->amx_int8) CHECK(!spex_matmul_kernels_build(&v[0].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_VNNI | SPEX_MATMUL_FEAT_AMX));
    CHECK(!spex_matmul_kernels_build(&v[0].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_AMX)); /* AMX only with VNNI */
#endif
    printf("  tables: %d variants tested on this CPU (isa in use: %s)\n", nv, spex_isa_name(spex_cpu_isa()));
}

/* SPEX_AMX=0 turns the AMX tiles off (what `spex isa` reports), and without it the binary
 * sees what this process sees. */
/* Runs `env_prefix spex isa` (stderr too) into out; its exit status, or -1 if it could not start. */
static int run_spex_isa(const char *bin, const char *env_prefix, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s'%s' isa 2>&1", env_prefix, bin);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    const size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    return pclose(f);
}

TEST(amx_switch_follows_the_environment) {
    const char *bin = test_spex_bin();
    if (!bin) SKIP("no spex binary next to this test's folder");
    const char *env = getenv("SPEX_AMX");
    char out[1024];
    for (int off = 0; off < 2; off++) {
        CHECK_EQ_INT(run_spex_isa(bin, off ? "SPEX_AMX=0 " : "", out, sizeof out), 0);
        const bool want = off ? false : spex_cpu_get_features()->amx_int8;
        const char *key = strstr(out, "amx-int8=");
        CHECK_MSG(key != NULL, "no amx-int8 in: %s", out);
        if (key) CHECK_MSG(key[9] == (want ? '1' : '0'), "SPEX_AMX %s: %s", off ? "0" : env ? env : "unset", out);
    }
}

/* SPEX_PREFETCH=l2|nta sets the x86 kernels' weight read-ahead hint; unset (or empty), it is
 * nta on AMD CPUs (CPUID vendor, read here on its own) and l2 elsewhere; `spex isa` says
 * which when an x86 kernel set is in use. */
TEST(prefetch_hint_follows_the_environment) {
#if defined(__x86_64__)
    const char *bin = test_spex_bin();
    if (!bin) SKIP("no spex binary next to this test's folder");
    if (spex_cpu_isa() != SPEX_ISA_AVX2 && spex_cpu_isa() != SPEX_ISA_AVX512) SKIP("no x86 SIMD kernel set in use");
    unsigned a, b, c, d;
    CHECK(__get_cpuid(0, &a, &b, &c, &d));
    const bool amd = !memcmp(&b, "Auth", 4) && !memcmp(&d, "enti", 4) && !memcmp(&c, "cAMD", 4);
    const char *set[3] = {"SPEX_PREFETCH= ", "SPEX_PREFETCH=l2 ", "SPEX_PREFETCH=nta "};
    const bool want[3] = {amd, false, true};
    char out[1024];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(run_spex_isa(bin, set[i], out, sizeof out), 0);
        const char *key = strstr(out, "weight read-ahead: ");
        CHECK_MSG(key != NULL, "no read-ahead line in: %s", out);
        if (key) CHECK_MSG(!strncmp(key + 19, want[i] ? "nta" : "l2", want[i] ? 3 : 2), "%s: %s", set[i], out);
    }
    CHECK(!strstr(out, "warning"));
#else
    SKIP("x86 only");
#endif
}

/* ---- the int8 multiply-add ceiling probe (spex bench kernels --cached) ------ */

#if defined(__x86_64__)
/* Lane l's dword of a 512-bit register filled with the 64-bit value v. */
static uint32_t peak_lane(uint64_t v, int l) { return (uint32_t)(l & 1 ? v >> 32 : v); }

/* u8 a . s8 b over the four bytes of two dwords. */
static int32_t peak_dot4(uint32_t a, uint32_t b) {
    int32_t s = 0;
    for (int t = 0; t < 4; t++) s += (int32_t)(uint8_t)(a >> 8 * t) * (int32_t)(int8_t)(b >> 8 * t);
    return s;
}
#endif

/* The probe's sums follow its documented arithmetic exactly (checked against this scalar
 * model for both operand forms, so a probe that skipped or folded its vpdpbusd would
 * fail), and its multiply-add count is what the bench divides by. */
TEST(dot_peak_probe_counts_and_sums) {
    uint64_t macs = 1;
    (void)spex_matmul_dot_peak(3, 0, &macs);
#if defined(__x86_64__)
    const spex_cpu_features *f = spex_cpu_get_features();
    const bool have = spex_cpu_isa() == SPEX_ISA_AVX512 && f->avx512vnni;
#else
    const bool have = false;
#endif
    CHECK_EQ_INT((long long)macs, have ? 3LL * 48 * 64 : 0LL);
    (void)spex_matmul_dot_peak(5, 1, &macs);
    CHECK_EQ_INT((long long)macs, have ? 5LL * 64 * 64 : 0LL);
    if (!have) SKIP("no AVX-512 VNNI on this CPU: the probe reports nothing (checked)");
#if defined(__x86_64__)
    const uint64_t seed = 0x0123456789abcdefULL, w[2] = {seed, ~seed};
    const uint64_t steps = 7;
    for (int bcast = 0; bcast < 2; bcast++) {
        int8_t x[8][64];
        for (int i = 0; i < 8 * 64; i++) x[i / 64][i % 64] = (int8_t)(seed >> (i % 57));
        uint64_t want = 0;
        for (int l = 0; l < 16; l++) {
            uint32_t lane = 0; /* the probe adds its sums lane by lane, wrapping at 32 bits */
            const int nsum = bcast ? 8 : 12;
            for (int i = 0; i < nsum; i++) {
                uint32_t a = (uint32_t)i;
                for (uint64_t r = 0; r < steps; r++)
                    for (int k = 0; k < (bcast ? 8 : 4); k++) {
                        uint32_t xb = 0; /* from registers: u8 w0 against s8 w0 / ~w0 in turn */
                        if (bcast) memcpy(&xb, &x[i][4 * k], 4);
                        const uint32_t u = bcast ? peak_lane(w[k & 1], l) : peak_lane(w[0], l);
                        a += (uint32_t)peak_dot4(u, bcast ? xb : peak_lane(w[k & 1], l));
                    }
                lane += a;
            }
            want += lane;
        }
        const uint64_t got = spex_dot_peak_avx512_vnni(steps, bcast, seed, &macs);
        CHECK_MSG(got == want, "bcast %d: sum %llu, scalar model %llu", bcast, (unsigned long long)got,
                  (unsigned long long)want);
        CHECK_EQ_INT((long long)macs, (long long)steps * (bcast ? 64 : 48) * 64);
    }
#endif
}

/* ---- the R16 layout (cpu/matmul.h) ----------------------------------------- */

/* Every table's R16 kernel on the repacked matrix gives exactly that table's ggml-layout
 * result (the same arithmetic; the scalar one by construction, and tables that do not gain
 * from R16 run the scalar one, so they match the scalar dot), for each type with a
 * layout, at 1..16, 20, 37 and 65 activation rows, whole matrices and sub-tiles starting at a later
 * 16-row group, with rows shorter and longer than the kernels' chunks. */
TEST(r16_kernels_bit_equal_ggml_layout) {
    table_variant v[7];
    int nv = get_variants(v);
    /* the AVX2 table with AVX-VNNI: its R16 K-quant kernels share the AVX-512 arithmetic */
    if (spex_matmul_kernels_build(&v[nv].k, SPEX_ISA_AVX2, SPEX_MATMUL_FEAT_VNNI)) v[nv++].name = "avx2-vnni";
    /* the AMX kernels on the C model of the tile instructions (tests/amx_emul.c), on any
     * AVX-512 VNNI CPU: a VNNI table with their R16 K-quant entries */
    spex_amx_emul_fn emul[3];
    if (spex_amx_emul_kernels(emul) && spex_matmul_kernels_build(&v[nv].k, SPEX_ISA_AVX512, SPEX_MATMUL_FEAT_VNNI)) {
        v[nv].k.dot_r16[SPEX_TYPE_Q4_K] = emul[0];
        v[nv].k.dot_r16[SPEX_TYPE_Q5_K] = emul[1];
        v[nv].k.dot_r16[SPEX_TYPE_Q6_K] = emul[2];
        v[nv++].name = "avx512-vnni-amx-emulated";
    } else {
        printf("  (no AVX-512 VNNI: the emulated AMX tiles are not tested here)\n");
    }
    static const spex_type types[] = {SPEX_TYPE_Q8_0, SPEX_TYPE_Q4_0, SPEX_TYPE_Q4_1, SPEX_TYPE_Q5_0,
                                      SPEX_TYPE_Q5_1, SPEX_TYPE_Q4_K, SPEX_TYPE_Q5_K, SPEX_TYPE_Q6_K};
    /* 4352: more blocks than one chunk; 16640 (K-quants only): 65 super-blocks, more than the
     * K-quant tiles' span of 64 */
    static const int64_t ns[] = {256, 1024, 4096 + 256, 16384 + 256};
    const int64_t n_out = 48, n_rows = 65;
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] - (is_kquant(types[ti]) ? 0 : 1); ni++) {
            const spex_type t = types[ti];
            const int64_t n = ns[ni];
            dataset d;
            CHECK(dataset_make(&d, &v[0].k, t, n, n_out, n_rows));
            uint8_t *P = malloc((size_t)n_out * d.wrow);
            float *ya = malloc(sizeof(float) * (size_t)(n_out * n_rows)), *yb = malloc(sizeof(float) * (size_t)(n_out * n_rows));
            CHECK(spex_r16_supported(t));
            spex_r16_pack(t, d.W, P, n_out, n);
            for (int vi = 0; vi < nv; vi++) {
                const spex_matmul_kernels *k = &v[vi].k;
                CHECK_MSG(k->dot_r16[t] != NULL, "%s: no R16 kernel for %s", v[vi].name, spex_type_get_info(t)->name);
                /* a table without its own R16 kernel runs the scalar one: compare with the scalar dot */
                const spex_dot_fn base = k->r16_fast[t] ? k->dot[t] : v[0].k.dot[t];
                /* 1..16, then 20 and 37 (the AMX tile's partial second group) and 65 */
                for (int64_t nr = 1; nr <= n_rows; nr = nr < 16 ? nr + 1 : nr == 16 ? 20 : nr == 20 ? 37 : nr < n_rows ? n_rows : n_rows + 1)
                    for (int part = 0; part < 2; part++) {
                        const int64_t o0 = part ? 16 : 0, no = n_out - o0;
                        memset(ya, 0, sizeof(float) * (size_t)(n_out * n_rows));
                        memset(yb, 0, sizeof(float) * (size_t)(n_out * n_rows));
                        base(n, d.W + (size_t)o0 * d.wrow, d.wrow, (int)no, d.Xq, d.xrow, (int)nr, ya, (size_t)n_out);
                        k->dot_r16[t](n, P + (size_t)o0 * d.wrow, d.wrow, (int)no, d.Xq, d.xrow, (int)nr, yb, (size_t)n_out);
                        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * (size_t)(n_out * n_rows)),
                                  "%s %s n %lld rows %lld part %d: R16 differs from the ggml layout", v[vi].name,
                                  spex_type_get_info(t)->name, (long long)n, (long long)nr, part);
                        checked++;
                    }
                if (nv > 0 && vi > 0 && k->r16_fast[t])
                    CHECK(k->isa == SPEX_ISA_AVX512 ||
                          (k->isa == SPEX_ISA_AVX2 && is_kquant(t) && spex_cpu_get_features()->avxvnni));
            }
            free(P), free(ya), free(yb);
            dataset_free(&d);
        }
    printf("  %d R16 tiles checked over %d tables\n", checked, nv);
}

TEST_MAIN()
