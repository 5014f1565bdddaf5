/*
 * test_quant.c — the scalar reference formats (src/tensor/quant_ref*.c) against the
 * independent NumPy implementation (tools/ref/ggml_formats.py), and their error bounds.
 *
 * (a) dequantize every golden block bit-exactly as Python does (every type);
 * (b) quantize every golden input to Python's bytes bit-exactly (every type: the simple
 *     ones by their closed-form rules, the K-quants by ggml's scale searches), and 256K
 *     generated values per type through a hash of the bytes;
 * (c) quantize -> dequantize error bounds per type on Gaussian data at awkward sizes;
 * (d) the 6-bit K-quant scale/min packing round trip;
 * (e) argument checks (n not a multiple of the block, unknown types) without crashes;
 * (f) Q4_K beats Q4_0 on Gaussian data (what the scale search buys);
 * plus all-zero blocks, NaN/Inf input, and the Q8_K / Q8_1 sums.
 * The golden file is tests/data/golden_blocks.bin (format: tools/ref/README.md).
 */
#include <stdint.h>

#include "spex.h"
#include "tensor/quant_ref.h"
#include "test.h"
#include "tensor/api.h"

#define GOLDEN_PATH "tests/data/golden_blocks.bin"

/* ======================================================================== */
/* helpers                                                                   */
/* ======================================================================== */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float rng_gauss(void) {
    double u = rng_unif(), v = rng_unif();
    if (u < 1e-300) u = 1e-300;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static const spex_type ALL_TYPES[] = {
    SPEX_TYPE_F16,  SPEX_TYPE_BF16, SPEX_TYPE_Q4_0, SPEX_TYPE_Q4_1, SPEX_TYPE_Q5_0,
    SPEX_TYPE_Q5_1, SPEX_TYPE_Q8_0, SPEX_TYPE_Q8_1, SPEX_TYPE_Q4_K, SPEX_TYPE_Q5_K,
    SPEX_TYPE_Q6_K, SPEX_TYPE_Q8_K,
};
#define N_TYPES ((int)(sizeof ALL_TYPES / sizeof ALL_TYPES[0]))

static const char *tname(spex_type t) {
    const spex_type_info *ti = spex_type_get_info((int)t);
    return ti ? ti->name : "?";
}
static int64_t qk_of(spex_type t) { return spex_type_get_info((int)t)->block_size; }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the golden file ---------------------------------------------------- */

enum { KIND_DEQUANT = 1, KIND_QUANT = 2, KIND_QUANT_GEN = 3 };

typedef struct {
    uint32_t kind, type, n, nbytes;
    char name[25];
    const uint8_t *raw;   /* nbytes of blocks   (unaligned: copy before use) */
    const uint8_t *f32;   /* n little-endian floats                          */
    uint64_t seed, hash;  /* KIND_QUANT_GEN: input generator seed, FNV-1a of the bytes */
} golden_rec;

typedef struct {
    uint8_t *buf;
    size_t size;
    golden_rec *recs;
    uint32_t n_recs;
} golden_file;

static void golden_free(golden_file *g) {
    free(g->buf);
    free(g->recs);
    memset(g, 0, sizeof *g);
}

/* Loads and validates the file; on failure returns a message (and g is freed). */
static const char *golden_load(golden_file *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(GOLDEN_PATH, "rb");
    if (!f) return "cannot open " GOLDEN_PATH " (run the tests from the repo root; regenerate "
                   "with tools/ref/gen_golden.py)";
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz < 16 || sz > (64L << 20)) {
        fclose(f);
        return "bad golden file size";
    }
    g->size = (size_t)sz;
    g->buf = malloc(g->size);
    size_t got = g->buf ? fread(g->buf, 1, g->size, f) : 0;
    fclose(f);
    if (got != g->size) {
        golden_free(g);
        return "short read of golden file";
    }
    if (memcmp(g->buf, "SPEXGLD1", 8) != 0 || rd32(g->buf + 8) != 1) {
        golden_free(g);
        return "bad golden magic/version";
    }
    g->n_recs = rd32(g->buf + 12);
    if (g->n_recs == 0 || g->n_recs > 100000) {
        golden_free(g);
        return "bad golden record count";
    }
    g->recs = calloc(g->n_recs, sizeof *g->recs);
    size_t off = 16;
    for (uint32_t i = 0; i < g->n_recs; i++) {
        golden_rec *r = &g->recs[i];
        if (g->size - off < 40) {
            golden_free(g);
            return "golden record header past end";
        }
        const uint8_t *h = g->buf + off;
        r->kind = rd32(h);
        r->type = rd32(h + 4);
        r->n = rd32(h + 8);
        r->nbytes = rd32(h + 12);
        memcpy(r->name, h + 16, 24);
        r->name[24] = 0;
        off += 40;
        uint64_t body = r->kind == KIND_QUANT_GEN ? 16 : (uint64_t)r->nbytes + 4ull * r->n;
        if ((uint64_t)(g->size - off) < body || r->kind < KIND_DEQUANT || r->kind > KIND_QUANT_GEN) {
            golden_free(g);
            return "golden record body past end or bad kind";
        }
        if (r->kind == KIND_QUANT_GEN) {
            r->seed = (uint64_t)rd32(g->buf + off) | (uint64_t)rd32(g->buf + off + 4) << 32;
            r->hash = (uint64_t)rd32(g->buf + off + 8) | (uint64_t)rd32(g->buf + off + 12) << 32;
        } else if (r->kind == KIND_DEQUANT) {
            r->raw = g->buf + off;
            r->f32 = g->buf + off + r->nbytes;
        } else {
            r->f32 = g->buf + off;
            r->raw = g->buf + off + 4ull * r->n;
        }
        off += body;
    }
    if (off != g->size) {
        golden_free(g);
        return "trailing bytes after the last golden record";
    }
    return NULL;
}

static float f32_at(const uint8_t *p, size_t i) {
    return spex_bits_f32(rd32(p + 4 * i));
}

/* ======================================================================== */
/* (a) dequantization == Python, bit for bit                                 */
/* ======================================================================== */

TEST(golden_dequantize_matches_python) {
    golden_file g;
    const char *why = golden_load(&g);
    CHECK_MSG(why == NULL, "%s", why);
    int seen[SPEX_TYPE_COUNT] = {0};
    int fail = 0;
    for (uint32_t i = 0; i < g.n_recs && !fail; i++) {
        const golden_rec *r = &g.recs[i];
        if (r->kind != KIND_DEQUANT) continue;
        const spex_type t = (spex_type)r->type;
        if (spex_type_row_size(t, r->n) != r->nbytes) {
            printf("  record %u (%s %s): %u bytes for %u elements\n", i, tname(t), r->name,
                   r->nbytes, r->n);
            fail = 1;
            break;
        }
        void *blocks = malloc(r->nbytes);   /* aligned copy: blocks hold fp16/fp32 fields */
        float *y = malloc(4ull * r->n);
        memcpy(blocks, r->raw, r->nbytes);
        spex_status st = spex_dequantize_row_ref(t, blocks, y, r->n);
        if (st != SPEX_OK) {
            printf("  record %u (%s %s): %s\n", i, tname(t), r->name, spex_status_str(st));
            fail = 1;
        }
        for (uint32_t k = 0; k < r->n && !fail; k++) {
            float want = f32_at(r->f32, k);
            if (spex_f32_bits(y[k]) != spex_f32_bits(want)) {
                printf("  %s %s: element %u: C %.9g (0x%08x), Python %.9g (0x%08x)\n", tname(t),
                       r->name, k, (double)y[k], spex_f32_bits(y[k]), (double)want,
                       spex_f32_bits(want));
                fail = 1;
            }
        }
        seen[t]++;
        free(blocks);
        free(y);
    }
    golden_free(&g);
    CHECK(!fail);
    for (int k = 0; k < N_TYPES; k++)
        CHECK_MSG(seen[ALL_TYPES[k]] >= 3 || (ALL_TYPES[k] == SPEX_TYPE_F16 || ALL_TYPES[k] == SPEX_TYPE_BF16),
                  "golden file has only %d dequant records for %s", seen[ALL_TYPES[k]],
                  tname(ALL_TYPES[k]));
    CHECK(seen[SPEX_TYPE_F16] >= 1 && seen[SPEX_TYPE_BF16] >= 1);
}

/* ======================================================================== */
/* (b) quantization == Python, bit for bit                                   */
/* ======================================================================== */

TEST(golden_quantize_matches_python) {
    golden_file g;
    const char *why = golden_load(&g);
    CHECK_MSG(why == NULL, "%s", why);
    int seen[SPEX_TYPE_COUNT] = {0};
    int fail = 0;
    for (uint32_t i = 0; i < g.n_recs && !fail; i++) {
        const golden_rec *r = &g.recs[i];
        if (r->kind != KIND_QUANT) continue;
        const spex_type t = (spex_type)r->type;
        if (spex_type_row_size(t, r->n) != r->nbytes) {
            printf("  record %u (%s %s): %u bytes for %u elements\n", i, tname(t), r->name,
                   r->nbytes, r->n);
            fail = 1;
            break;
        }
        float *x = malloc(4ull * r->n);
        uint8_t *q = malloc(r->nbytes);
        for (uint32_t k = 0; k < r->n; k++) x[k] = f32_at(r->f32, k);
        spex_status st = spex_quantize_row_ref(t, x, q, r->n);
        if (st != SPEX_OK) {
            printf("  record %u (%s %s): %s\n", i, tname(t), r->name, spex_status_str(st));
            fail = 1;
        } else if (memcmp(q, r->raw, r->nbytes) != 0) {
            uint32_t k = 0;
            while (q[k] == r->raw[k]) k++;
            const size_t bs = spex_type_get_info((int)t)->type_size;
            printf("  %s %s: byte %u (block %zu, offset %zu): C 0x%02x, Python 0x%02x\n",
                   tname(t), r->name, k, k / bs, k % bs, q[k], r->raw[k]);
            fail = 1;
        }
        seen[t]++;
        free(x);
        free(q);
    }
    golden_free(&g);
    CHECK(!fail);
    for (int k = 0; k < N_TYPES; k++)
        CHECK_MSG(seen[ALL_TYPES[k]] >= 1, "golden file has no quant record for %s",
                  tname(ALL_TYPES[k]));
}

/* Generated inputs, the same as gen_input() in tools/ref/gen_golden.py (every step is exact
 * in float32, so both sides see identical values). */
static uint64_t splitmix_at(uint64_t seed, uint64_t k) {
    uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void gen_input(uint64_t seed, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = splitmix_at(seed, 2 * (uint64_t)i), r2 = splitmix_at(seed, 2 * (uint64_t)i + 1);
        const uint64_t t = (r & 0xffff) + (r >> 16 & 0xffff) + (r >> 32 & 0xffff) + (r >> 48);
        float v = (float)((int64_t)t - 131070) * (1.0f / 65536.0f);
        if ((r2 & 63) == 0) v *= 8.0f;
        const uint64_t s = splitmix_at(seed ^ 0x5DEECE66Dull, (uint64_t)i / 32);
        x[i] = v * ldexpf(1.0f, (int)(s % 5) - 2);
    }
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

/* Many blocks per type, checked through a hash: catches the choices that only a few blocks
 * in a hundred take (the end points of the K-quant scale searches). */
TEST(golden_generated_quantize_matches_python) {
    golden_file g;
    const char *why = golden_load(&g);
    CHECK_MSG(why == NULL, "%s", why);
    int seen[SPEX_TYPE_COUNT] = {0};
    int fail = 0;
    for (uint32_t i = 0; i < g.n_recs && !fail; i++) {
        const golden_rec *r = &g.recs[i];
        if (r->kind != KIND_QUANT_GEN) continue;
        const spex_type t = (spex_type)r->type;
        if (spex_type_row_size(t, r->n) != r->nbytes) {
            printf("  record %u (%s %s): %u bytes for %u elements\n", i, tname(t), r->name,
                   r->nbytes, r->n);
            fail = 1;
            break;
        }
        float *x = malloc(4ull * r->n);
        uint8_t *q = malloc(r->nbytes);
        gen_input(r->seed, x, r->n);
        spex_status st = spex_quantize_row_ref(t, x, q, r->n);
        const uint64_t h = fnv1a64(q, r->nbytes);
        if (st != SPEX_OK || h != r->hash) {
            printf("  %s %s (seed %llu, %u elements): %s, hash %016llx, Python %016llx\n",
                   tname(t), r->name, (unsigned long long)r->seed, r->n, spex_status_str(st),
                   (unsigned long long)h, (unsigned long long)r->hash);
            fail = 1;
        }
        seen[t]++;
        free(x);
        free(q);
    }
    golden_free(&g);
    CHECK(!fail);
    for (int k = 0; k < N_TYPES; k++)
        CHECK_MSG(seen[ALL_TYPES[k]] >= 1, "golden file has no generated record for %s",
                  tname(ALL_TYPES[k]));
}

/* ======================================================================== */
/* (c) round-trip error bounds                                               */
/* ======================================================================== */

/*
 * Relative RMS error = sqrt(sum (y-x)^2 / sum x^2) on N(0,1) data (1+3+31+33 blocks, fixed
 * seed). The bounds are the measured values (printed by the test) with 13-20% margin; they
 * catch a wrong rounding rule (~2x error) or a lost bit (Q5 -> Q4: ~2x). Measured:
 *   q4_0 .0867  q4_1 .0775  q5_0 .0439  q5_1 .0371  q8_0 .0054  q8_1 .0052
 *   q4_K .0719  q5_K .0361  q6_K .0177  q8_K .0068  f16 .00021  bf16 .00168
 * and max |err| / max |x| of a super-block: q4_K .072, q5_K .041, q6_K .016.
 * The max-abs bound is relative to the block's own scale where the format has a simple one:
 *   q4_0/q5_0: |err| <= |d| (the clamp of the top code costs one step; others d/2),
 *   q4_1/q5_1: |err| <= d/2, q8_0/q8_1: |err| <= d/2, q8_K: |err| <= |d|/2, each plus the
 *   f16 rounding of d and m (a relative 2^-11 of |d|*code and |m|);
 *   K-quants: |err| <= max_err_amax * (largest |x| of the super-block), measured.
 */
typedef struct {
    spex_type type;
    double rel_rms;       /* bound on the relative RMS error         */
    double max_err_amax;  /* bound on max |err| / max |x| of the block */
} rt_bound;

static const rt_bound RT_BOUNDS[] = {
    {SPEX_TYPE_Q4_0, 0.100, 0.0}, {SPEX_TYPE_Q4_1, 0.089, 0.0}, {SPEX_TYPE_Q5_0, 0.050, 0.0},
    {SPEX_TYPE_Q5_1, 0.043, 0.0}, {SPEX_TYPE_Q8_0, 0.0062, 0.0}, {SPEX_TYPE_Q8_1, 0.0062, 0.0},
    {SPEX_TYPE_Q4_K, 0.083, 0.085}, {SPEX_TYPE_Q5_K, 0.042, 0.048}, {SPEX_TYPE_Q6_K, 0.0205, 0.019},
    {SPEX_TYPE_Q8_K, 0.0079, 0.0}, {SPEX_TYPE_F16, 0.00025, 0.0}, {SPEX_TYPE_BF16, 0.0019, 0.0},
};

/* The format's own bound on |x - y| for element k of block b (simple types), or < 0. */
static double simple_bound(spex_type t, const void *q, int64_t b, int64_t k, float x) {
    const double r = 1.0 / 2048.0; /* f16 rounding of the stored scale and min */
    switch (t) {
    case SPEX_TYPE_Q4_0: {
        double d = fabs(spex_fp16_to_f32(((const block_q4_0 *)q)[b].d));
        return d * (1.0 + 8 * r) + 1e-30;
    }
    case SPEX_TYPE_Q5_0: {
        double d = fabs(spex_fp16_to_f32(((const block_q5_0 *)q)[b].d));
        return d * (1.0 + 16 * r) + 1e-30;
    }
    case SPEX_TYPE_Q4_1: {
        const block_q4_1 *bl = &((const block_q4_1 *)q)[b];
        double d = fabs(spex_fp16_to_f32(bl->d)), m = fabs(spex_fp16_to_f32(bl->m));
        return d * (0.5 + 15 * r) + m * r + 1e-30;
    }
    case SPEX_TYPE_Q5_1: {
        const block_q5_1 *bl = &((const block_q5_1 *)q)[b];
        double d = fabs(spex_fp16_to_f32(bl->d)), m = fabs(spex_fp16_to_f32(bl->m));
        return d * (0.5 + 31 * r) + m * r + 1e-30;
    }
    case SPEX_TYPE_Q8_0: {
        double d = fabs(spex_fp16_to_f32(((const block_q8_0 *)q)[b].d));
        return d * (0.5 + 127 * r) + 1e-30;
    }
    case SPEX_TYPE_Q8_1: {
        double d = fabs(spex_fp16_to_f32(((const block_q8_1 *)q)[b].d));
        return d * (0.5 + 127 * r) + 1e-30;
    }
    case SPEX_TYPE_Q8_K: {
        double d = fabs(((const block_q8_K *)q)[b].d);
        return d * 0.5 * (1 + 1e-5) + 1e-30;
    }
    /* half an ulp: 2^-11 relative for f16 (2^-25 absolute among its subnormals), 2^-8 for bf16 */
    case SPEX_TYPE_F16: return fabs(x) * r * (1 + 1e-6) + 2.98024e-08;
    case SPEX_TYPE_BF16: return fabs(x) * (1.0 / 256) * (1 + 1e-6);
    default: (void)k; return -1.0;
    }
}

TEST(roundtrip_error_bounds) {
    const int64_t blocks[] = {1, 3, 31, 33};
    for (size_t bi = 0; bi < sizeof RT_BOUNDS / sizeof RT_BOUNDS[0]; bi++) {
        const rt_bound *B = &RT_BOUNDS[bi];
        const spex_type t = B->type;
        const int64_t qk = qk_of(t) == 1 ? 32 : qk_of(t);  /* float types: rows of 32 */
        double se = 0, sx = 0, worst_amax = 0;
        for (size_t s = 0; s < sizeof blocks / sizeof blocks[0]; s++) {
            const int64_t n = blocks[s] * qk;
            float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
            void *q = malloc(spex_type_row_size(t, n));
            rng_seed(1000 + (uint64_t)t * 16 + s);
            for (int64_t i = 0; i < n; i++) x[i] = rng_gauss();
            CHECK_OK(spex_quantize_row_ref(t, x, q, n));
            CHECK_OK(spex_dequantize_row_ref(t, q, y, n));
            for (int64_t b = 0; b < n / qk; b++) {
                double amax = 0, emax = 0;
                for (int64_t k = 0; k < qk; k++) {
                    const int64_t i = b * qk + k;
                    const double e = fabs((double)y[i] - (double)x[i]);
                    se += e * e;
                    sx += (double)x[i] * x[i];
                    if (fabs(x[i]) > amax) amax = fabs(x[i]);
                    if (e > emax) emax = e;
                    const int64_t eb = qk_of(t) == 1 ? i : b;   /* float types: per element */
                    const double sb = simple_bound(t, q, eb, k, x[i]);
                    CHECK_MSG(sb < 0 || e <= sb, "%s n=%lld: |err| %.6g at %lld exceeds the format bound %.6g",
                              tname(t), (long long)n, e, (long long)i, sb);
                }
                if (emax / amax > worst_amax) worst_amax = emax / amax;
            }
            free(x);
            free(y);
            free(q);
        }
        const double rel = sqrt(se / sx);
        printf("  info: %-5s relative RMS error %.5f (bound %.5f), max |err|/max|x| %.4f\n",
               tname(t), rel, B->rel_rms, worst_amax);
        CHECK_MSG(rel < B->rel_rms, "%s: relative RMS error %.5f >= %.5f", tname(t), rel, B->rel_rms);
        CHECK_MSG(B->max_err_amax == 0 || worst_amax < B->max_err_amax,
                  "%s: max |err|/max|x| %.4f >= %.4f", tname(t), worst_amax, B->max_err_amax);
        /* a bound this loose would hide a broken rounding rule: the measured error must be
         * within a factor 1.5 of it (a test that cannot fail is no test) */
        CHECK_MSG(rel > B->rel_rms / 1.5, "%s: error %.5f suspiciously far below its bound %.5f",
                  tname(t), rel, B->rel_rms);
    }
}

/* ======================================================================== */
/* (d) K-quant 6-bit scale/min packing                                       */
/* ======================================================================== */

TEST(kquant_scale_packing_roundtrip) {
    /* every value at every position, the other positions random */
    rng_seed(7);
    for (int j = 0; j < 8; j++) {
        for (int v = 0; v < 64; v++) {
            for (int w = 0; w < 64; w++) {
                uint8_t sc[8], m[8], packed[K_SCALE_SIZE];
                for (int k = 0; k < 8; k++) {
                    sc[k] = (uint8_t)(rng_u64() & 63);
                    m[k] = (uint8_t)(rng_u64() & 63);
                }
                sc[j] = (uint8_t)v;
                m[j] = (uint8_t)w;
                spex_kq_pack_scale_min(sc, m, packed);
                for (int k = 0; k < 8; k++) {
                    uint8_t s2, m2;
                    spex_kq_get_scale_min(k, packed, &s2, &m2);
                    CHECK_MSG(s2 == sc[k] && m2 == m[k], "j=%d v=%d w=%d: sub-block %d gives %d/%d, want %d/%d",
                              j, v, w, k, s2, m2, sc[k], m[k]);
                }
            }
        }
    }
    /* a hand-worked vector pins the bit positions (not only self-consistency) */
    const uint8_t sc[8] = {1, 2, 3, 4, 0x15, 0x26, 0x37, 0x3f};
    const uint8_t m[8] = {5, 6, 7, 8, 0x09, 0x1a, 0x2b, 0x3c};
    const uint8_t want[12] = {
        1 | 1 << 6, 2 | 2 << 6, 3 | 3 << 6, 4 | 3 << 6,   /* sc[j] | (sc[j+4] >> 4) << 6 */
        5 | 0 << 6, 6 | 1 << 6, 7 | 2 << 6, 8 | 3 << 6,   /* m[j]  | (m[j+4]  >> 4) << 6 */
        0x95, 0xa6, 0xb7, 0xcf,                           /* sc[j+4] & 15 | (m[j+4] & 15) << 4 */
    };
    uint8_t got[12];
    spex_kq_pack_scale_min(sc, m, got);
    for (int k = 0; k < 12; k++) CHECK_MSG(got[k] == want[k], "byte %d: 0x%02x, want 0x%02x", k, got[k], want[k]);
}

/* ======================================================================== */
/* (e) argument checks                                                       */
/* ======================================================================== */

TEST(rejects_bad_sizes_and_types) {
    float x[512] = {0}, y[512];
    uint8_t q[2048];
    memset(q, 0xAA, sizeof q);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q4_0, x, q, 33) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q4_0, x, q, 31) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q4_K, x, q, 255) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q6_K, x, q, 257) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q8_K, x, q, 32) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q8_0, x, q, -32) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q8_0, NULL, q, 32) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q8_0, x, NULL, 32) == SPEX_ERR_INVALID_ARG);
    for (size_t i = 0; i < sizeof q; i++) CHECK_MSG(q[i] == 0xAA, "rejected call wrote byte %zu", i);
    CHECK(spex_dequantize_row_ref(SPEX_TYPE_Q5_1, q, y, 48) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_dequantize_row_ref(SPEX_TYPE_Q5_K, q, y, 300) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_dequantize_row_ref(SPEX_TYPE_Q4_1, q, NULL, 32) == SPEX_ERR_INVALID_ARG);
    /* known ids without a reference, and ids that are not types */
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q2_K, x, q, 256) == SPEX_ERR_UNSUPPORTED);
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q3_K, x, q, 256) == SPEX_ERR_UNSUPPORTED);
    CHECK(spex_dequantize_row_ref(SPEX_TYPE_I32, q, y, 4) == SPEX_ERR_UNSUPPORTED);
    CHECK(spex_dequantize_row_ref((spex_type)4, q, y, 32) == SPEX_ERR_UNSUPPORTED);
    CHECK(spex_dequantize_row_ref((spex_type)-1, q, y, 32) == SPEX_ERR_UNSUPPORTED);
    CHECK(spex_dequantize_row_ref((spex_type)1000, q, y, 32) == SPEX_ERR_UNSUPPORTED);
    /* n == 0 is a valid empty row; F32 is a copy */
    CHECK(spex_quantize_row_ref(SPEX_TYPE_Q4_K, x, q, 0) == SPEX_OK);
    for (int i = 0; i < 64; i++) x[i] = (float)i - 20.5f;
    CHECK_OK(spex_quantize_row_ref(SPEX_TYPE_F32, x, q, 64));
    CHECK_OK(spex_dequantize_row_ref(SPEX_TYPE_F32, q, y, 64));
    CHECK(memcmp(x, y, 64 * sizeof(float)) == 0);
}

/* ======================================================================== */
/* (f) what the K-quant scale search buys                                    */
/* ======================================================================== */

static double rel_rms_of(spex_type t, const float *x, int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)n);
    void *q = malloc(spex_type_row_size(t, n));
    double se = 0, sx = 0;
    if (spex_quantize_row_ref(t, x, q, n) == SPEX_OK && spex_dequantize_row_ref(t, q, y, n) == SPEX_OK) {
        for (int64_t i = 0; i < n; i++) {
            se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
    } else {
        se = sx = 1;
    }
    free(y);
    free(q);
    return sqrt(se / sx);
}

TEST(kquants_beat_plain_quants_on_gaussian_data) {
    const int64_t n = 64 * QK_K;
    float *x = malloc(sizeof(float) * (size_t)n);
    rng_seed(99);
    for (int64_t i = 0; i < n; i++) x[i] = 0.02f * rng_gauss();
    const double q40 = rel_rms_of(SPEX_TYPE_Q4_0, x, n), q4k = rel_rms_of(SPEX_TYPE_Q4_K, x, n);
    const double q50 = rel_rms_of(SPEX_TYPE_Q5_0, x, n), q5k = rel_rms_of(SPEX_TYPE_Q5_K, x, n);
    const double q6k = rel_rms_of(SPEX_TYPE_Q6_K, x, n), q80 = rel_rms_of(SPEX_TYPE_Q8_0, x, n);
    free(x);
    printf("  info: rel RMS q4_0 %.5f q4_K %.5f | q5_0 %.5f q5_K %.5f | q6_K %.5f q8_0 %.5f\n", q40,
           q4k, q50, q5k, q6k, q80);
    /* Q4_K spends 4.5 bits per weight against Q4_0's 4.5 and must be clearly better */
    CHECK_MSG(q4k < 0.92 * q40, "q4_K %.5f not below 0.92 * q4_0 %.5f", q4k, q40);
    CHECK_MSG(q5k < 0.92 * q50, "q5_K %.5f not below 0.92 * q5_0 %.5f", q5k, q50);
    CHECK_MSG(q6k < q5k && q80 < q6k, "ordering q8_0 < q6_K < q5_K broken");
}

/* ======================================================================== */
/* zeros, non-finite input, sums                                             */
/* ======================================================================== */

TEST(zero_blocks_dequantize_to_zero) {
    for (int k = 0; k < N_TYPES; k++) {
        const spex_type t = ALL_TYPES[k];
        const int64_t n = 3 * (qk_of(t) == 1 ? 32 : qk_of(t));
        float *x = calloc((size_t)n, sizeof(float)), *y = malloc(sizeof(float) * (size_t)n);
        void *q = malloc(spex_type_row_size(t, n));
        memset(q, 0x5A, spex_type_row_size(t, n));
        CHECK_OK(spex_quantize_row_ref(t, x, q, n));
        CHECK_OK(spex_dequantize_row_ref(t, q, y, n));
        for (int64_t i = 0; i < n; i++) CHECK_MSG(y[i] == 0.0f, "%s: element %lld is %g", tname(t), (long long)i, (double)y[i]);
        if (t == SPEX_TYPE_Q8_K) {
            const block_q8_K *b = q;
            for (int j = 0; j < QK_K / 16; j++) CHECK(b[1].bsums[j] == 0);
        }
        free(x);
        free(y);
        free(q);
    }
}

/* NaN/Inf must not crash (ASan/UBSan watch the float-to-int conversions) and must not leak
 * into neighbouring blocks: a clean block quantizes the same beside a poisoned one. */
TEST(nonfinite_input_is_contained) {
    const float poison[] = {NAN, INFINITY, -INFINITY, 3.0e38f, -3.0e38f, 1e-45f};
    for (int k = 0; k < N_TYPES; k++) {
        const spex_type t = ALL_TYPES[k];
        const int64_t qk = qk_of(t) == 1 ? 32 : qk_of(t), n = 2 * qk;
        const size_t bs = spex_type_row_size(t, qk);
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        uint8_t *q = malloc(2 * bs), *clean = malloc(bs);
        rng_seed(5 + (uint64_t)k);
        for (int64_t i = 0; i < n; i++) x[i] = rng_gauss();
        CHECK_OK(spex_quantize_row_ref(t, x + qk, clean, qk));
        for (size_t p = 0; p < sizeof poison / sizeof poison[0]; p++) {
            x[p * 7 % qk] = poison[p];
            x[(p * 13 + 1) % qk] = poison[(p + 1) % 6];
            CHECK_OK(spex_quantize_row_ref(t, x, q, n));
            CHECK_OK(spex_dequantize_row_ref(t, q, y, n));
            CHECK_MSG(memcmp(q + bs, clean, bs) == 0, "%s: poison %zu changed the next block", tname(t), p);
            for (int64_t i = qk; i < n; i++) CHECK(isfinite(y[i]));
        }
        /* a whole block of NaN, and one of +Inf */
        for (int64_t i = 0; i < qk; i++) x[i] = NAN;
        CHECK_OK(spex_quantize_row_ref(t, x, q, n));
        CHECK_OK(spex_dequantize_row_ref(t, q, y, n));
        for (int64_t i = 0; i < qk; i++) x[i] = INFINITY;
        CHECK_OK(spex_quantize_row_ref(t, x, q, n));
        CHECK_OK(spex_dequantize_row_ref(t, q, y, n));
        CHECK(memcmp(q + bs, clean, bs) == 0);
        free(x);
        free(y);
        free(q);
        free(clean);
    }
}

TEST(q8_K_bsums_and_q8_1_sum) {
    const int64_t n = 4 * QK_K;
    float x[4 * QK_K];
    rng_seed(11);
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss() * (i % 97 == 0 ? 10.0f : 1.0f);
    block_q8_K k8[4];
    spex_quantize_row_q8_K_ref(x, k8, n);
    for (int b = 0; b < 4; b++) {
        int extreme = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += k8[b].qs[16 * j + i];
            CHECK_EQ_INT(k8[b].bsums[j], s);
        }
        for (int i = 0; i < QK_K; i++) extreme |= k8[b].qs[i] == -127 || k8[b].qs[i] == 127;
        CHECK_MSG(extreme, "block %d: no quant reaches +-127", b);
    }
    block_q8_1 k1[4 * QK_K / QK8_1];
    spex_quantize_row_q8_1_ref(x, k1, n);
    for (int b = 0; b < (int)(n / QK8_1); b++) {
        int s = 0;
        for (int i = 0; i < QK8_1; i++) s += k1[b].qs[i];
        const double want = (double)spex_fp16_to_f32(k1[b].d) * s;
        CHECK_NEAR(spex_fp16_to_f32(k1[b].s), want, fabs(want) * 2e-3 + 1e-6);
    }
}

/* The typed per-type functions and the dispatcher are the same code path. */
TEST(per_type_functions_match_dispatch) {
    float x[2 * QK_K], y1[2 * QK_K], y2[2 * QK_K];
    rng_seed(3);
    for (int i = 0; i < 2 * QK_K; i++) x[i] = rng_gauss();
    block_q4_K a[2], b[2];
    spex_quantize_row_q4_K_ref(x, a, 2 * QK_K);
    CHECK_OK(spex_quantize_row_ref(SPEX_TYPE_Q4_K, x, b, 2 * QK_K));
    CHECK(memcmp(a, b, sizeof a) == 0);
    spex_dequantize_row_q4_K_ref(a, y1, 2 * QK_K);
    CHECK_OK(spex_dequantize_row_ref(SPEX_TYPE_Q4_K, b, y2, 2 * QK_K));
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    block_q6_K c[2];
    spex_quantize_row_q6_K_ref(x, c, 2 * QK_K);
    spex_dequantize_row_q6_K_ref(c, y1, 2 * QK_K);
    CHECK(fabsf(y1[17] - x[17]) < 0.1f);
}

TEST_MAIN()
