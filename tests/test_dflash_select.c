/*
 * test_dflash_select.c — the DFlash2 candidate selector and the walks of both variants
 * (../shared/docs/dflash2.md §12–§14, §20 sanity 2) against the float64 goldens of
 * tools/ref/dflash_ref.py (tests/data/dflash/tiny-qwen3.dflash{1,2}.golden.gguf; meaning of every key in
 * tools/ref/README.md, "DFlash drafter fixtures").
 *
 * What it is: spex_selector_row vs the stored lattice rows, spex_dflash_walk (greedy at the
 * three stored p_min values, sampled with the stored uniforms, v1 per-slot argmax) fed with
 * the STORED golden C, U, gate and z, so that only the selector and the walks are under test
 * (the block forward has its own tests). What it is not: a test of spex_draft_walk's
 * gathering from a live draft context (that needs a forward; see the draft context tests).
 *
 * Id lists must match exactly: the goldens keep every decision >= golden.min_margin from its
 * boundary, far above the fp32 error (~1e-6 here).
 */
#include "gguf/api.h"
#include "model/api.h"
#include "test.h"

#include "model/dflash_select.h"

#include <unistd.h>

#define TARGET "tests/data/models/tiny-qwen3.gguf"
#define DF2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define DF2_GOLDEN "tests/data/dflash/tiny-qwen3.dflash2.golden.gguf"
#define DF1 "tests/data/dflash/tiny-qwen3.dflash1.gguf"
#define DF1_GOLDEN "tests/data/dflash/tiny-qwen3.dflash1.golden.gguf"

/* ---- fixture ------------------------------------------------------------------------------ */

typedef struct fixture {
    spex_model *target;
    spex_drafter *d;
    spex_gguf *g;            /* the golden file */
    int32_t K, R, V;
} fixture;

static void fixture_free(fixture *f) {
    spex_drafter_free(f->d);
    spex_model_free(f->target);
    spex_gguf_close(f->g);
    memset(f, 0, sizeof *f);
}

/* Loads target, drafter and golden; false (with a message in why) if a file is missing or a
 * load fails. */
static bool fixture_open(fixture *f, const char *drafter, const char *golden, char *why, size_t cap) {
    memset(f, 0, sizeof *f);
    if (access(TARGET, R_OK) || access(drafter, R_OK) || access(golden, R_OK)) {
        snprintf(why, cap, "fixtures missing (tools/ref/make_dflash_fixtures.py)");
        return false;
    }
    spex_error e = {0};
    if (spex_model_load(TARGET, NULL, &f->target, &e) != SPEX_OK ||
        spex_drafter_load(drafter, f->target, NULL, &f->d, &e) != SPEX_OK ||
        spex_gguf_open(golden, &f->g, &e) != SPEX_OK) {
        snprintf(why, cap, "load: %.200s", e.msg);
        fixture_free(f);
        return false;
    }
    const spex_drafter_hparams *hp = spex_drafter_get_hparams(f->d);
    f->K = hp->selector_top_k;
    f->R = hp->selector_rank;
    f->V = hp->n_vocab;
    return true;
}

#define OPEN(f, drafter, golden)                                                  \
    fixture f;                                                                    \
    do {                                                                          \
        char why_[240];                                                           \
        if (!fixture_open(&f, drafter, golden, why_, sizeof why_)) SKIP("%s", why_); \
    } while (0)

/* An i32 array / scalar of the golden; length (0 if absent), at most cap copied. */
static int g_ints(const fixture *f, const char *key, int32_t *out, int cap) {
    spex_gguf_value arr;
    if (spex_gguf_get_arr(f->g, key, &arr, NULL) != SPEX_OK || arr.elem_type != SPEX_GGUF_I32) return 0;
    for (int i = 0; i < (int)arr.n && i < cap; i++) memcpy(&out[i], arr.data + 4 * (size_t)i, 4);
    return (int)arr.n;
}

static int g_floats(const fixture *f, const char *key, float *out, int cap) {
    spex_gguf_value arr;
    if (spex_gguf_get_arr(f->g, key, &arr, NULL) != SPEX_OK || arr.elem_type != SPEX_GGUF_F32) return 0;
    for (int i = 0; i < (int)arr.n && i < cap; i++) memcpy(&out[i], arr.data + 4 * (size_t)i, 4);
    return (int)arr.n;
}

static int32_t g_int(const fixture *f, const char *key) {
    int64_t v = -1;
    spex_gguf_get_i64(f->g, key, &v, NULL);
    return (int32_t)v;
}

/* An F32 tensor with ne = {ne0, ne1, ne2} (unused dims 1), else NULL. */
static const float *g_tensor(const fixture *f, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    const spex_tensor_info *t = spex_gguf_find_tensor(f->g, name);
    if (!t || t->type != SPEX_TYPE_F32 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2) return NULL;
    return t->data;
}

/* One stored DFlash2 block: C, U, gate as row pointers for the walk. */
typedef struct block {
    int32_t n, anchor;
    int32_t C[SPEX_DRAFT_MAX_N * SPEX_DRAFT_MAX_K];
    const float *U, *gate, *lattice, *conf;
    const int32_t *Cp[SPEX_DRAFT_MAX_N];
    const float *Up[SPEX_DRAFT_MAX_N], *gp[SPEX_DRAFT_MAX_N];
} block;

static bool block_load(const fixture *f, int32_t n, block *b) {
    char key[96];
    memset(b, 0, sizeof *b);
    b->n = n;
    b->anchor = g_int(f, "golden.anchor");
    snprintf(key, sizeof key, "golden.block%d.C", (int)n);
    if (g_ints(f, key, b->C, SPEX_DRAFT_MAX_N * SPEX_DRAFT_MAX_K) != n * f->K) return false;
    snprintf(key, sizeof key, "block%d.U", (int)n);
    b->U = g_tensor(f, key, f->K, n, 1);
    snprintf(key, sizeof key, "block%d.gate", (int)n);
    b->gate = g_tensor(f, key, f->R, n, 1);
    snprintf(key, sizeof key, "block%d.lattice", (int)n);
    b->lattice = g_tensor(f, key, f->K, 1 + f->K * (n - 1), 1);
    snprintf(key, sizeof key, "block%d.greedy.conf", (int)n);
    b->conf = g_tensor(f, key, n, 1, 1);
    if (!b->U || !b->gate || !b->lattice || !b->conf) return false;
    for (int32_t p = 0; p < n; p++) {
        b->Cp[p] = b->C + p * f->K;
        b->Up[p] = b->U + p * f->K;
        b->gp[p] = b->gate + p * f->R;
    }
    return true;
}

/* The larger of two errors. Not fmax: aarch64 gcc 12's vectorizer crashes (internal compiler
 * error in vect_transform_reduction) on fmax reductions in loops at -O3. */
static double max_d(double a, double b) { return b > a ? b : a; }

static double rel_err(float a, float ref) {
    return fabs((double)a - (double)ref) / fmax(1.0, fabs((double)ref));
}

/* ---- §12.2 lattice rows -------------------------------------------------------------------- */

TEST(selector_rows_match_lattice) {
    OPEN(f, DF2, DF2_GOLDEN);
    double worst = 0.0;
    int rows = 0;
    const int32_t ns[2] = {7, 3};
    for (int bi = 0; bi < 2; bi++) {
        static block b;
        if (!block_load(&f, ns[bi], &b)) {
            fixture_free(&f);
            CHECK_MSG(0, "golden block %d incomplete", (int)ns[bi]);
        }
        /* row 0: S_1 (predecessor = anchor); row 1 + (p-2)K + i: S_p with predecessor C_{p-1}[i] */
        for (int32_t p = 1; p <= b.n; p++) {
            const int32_t n_pred = p == 1 ? 1 : f.K;
            for (int32_t i = 0; i < n_pred; i++) {
                const int32_t pred = p == 1 ? b.anchor : b.Cp[p - 2][i];
                const float *ref = b.lattice + (size_t)f.K * (p == 1 ? 0 : 1 + (p - 2) * f.K + i);
                float S[SPEX_DRAFT_MAX_K];
                spex_error e = {0};
                spex_status st = spex_selector_row(f.d, pred, b.gp[p - 1], b.Cp[p - 1], b.Up[p - 1], f.K, S, &e);
                if (st != SPEX_OK) {
                    fixture_free(&f);
                    CHECK_MSG(0, "spex_selector_row: %s", e.msg);
                }
                for (int32_t k = 0; k < f.K; k++) worst = max_d(worst, rel_err(S[k], ref[k]));
                rows++;
            }
        }
    }
    printf("  %d lattice rows: max relative error %.3g\n", rows, worst);
    /* bad arguments are refused, not crashed on */
    float S[SPEX_DRAFT_MAX_K];
    const int32_t badC[4] = {0, 1, 2, 1 << 20};
    const float U4[4] = {0}, gate[SPEX_SELECTOR_MAX_R] = {0};
    spex_status s1 = spex_selector_row(f.d, -1, gate, badC, U4, 3, S, NULL);
    spex_status s2 = spex_selector_row(f.d, 0, gate, badC, U4, 4, S, NULL);
    spex_status s3 = spex_selector_row(f.d, 0, gate, badC, U4, SPEX_DRAFT_MAX_K + 1, S, NULL);
    fixture_free(&f);
    CHECK(worst <= 1e-5);
    CHECK_EQ_INT(s1, SPEX_ERR_RANGE);
    CHECK_EQ_INT(s2, SPEX_ERR_RANGE);
    CHECK_EQ_INT(s3, SPEX_ERR_INVALID_ARG);
}

/* ---- §13 greedy walk ------------------------------------------------------------------------ */

TEST(greedy_walk_matches_golden) {
    OPEN(f, DF2, DF2_GOLDEN);
    static block b;
    static spex_draft out;
    float p_min[3];
    int32_t n_drafted[3], ids[SPEX_DRAFT_MAX_N], ks[SPEX_DRAFT_MAX_N];
    bool ok = block_load(&f, 7, &b) && g_floats(&f, "golden.greedy.p_min", p_min, 3) == 3 &&
              g_ints(&f, "golden.greedy.n_drafted", n_drafted, 3) == 3 &&
              g_ints(&f, "golden.block7.greedy.ids", ids, SPEX_DRAFT_MAX_N) == 7 &&
              g_ints(&f, "golden.block7.greedy.k", ks, SPEX_DRAFT_MAX_N) == 7;
    if (!ok) fixture_free(&f);
    CHECK_MSG(ok, "golden block 7 incomplete");
    double worst = 0.0;
    int failed = 0;
    for (int i = 0; i < 3 && !failed; i++) {
        spex_error e = {0};
        if (spex_dflash_walk(f.d, b.anchor, b.n, b.Cp, b.Up, b.gp, NULL, 0.0f, p_min[i], NULL, NULL, &out, &e) !=
            SPEX_OK) {
            printf("  walk: %s\n", e.msg);
            failed = 1;
            break;
        }
        if (out.n != n_drafted[i] || out.has_q || out.n_cand != f.K) {
            printf("  p_min %g: n %d (want %d) has_q %d n_cand %d\n", p_min[i], (int)out.n, (int)n_drafted[i],
                   (int)out.has_q, (int)out.n_cand);
            failed = 1;
        }
        for (int32_t p = 0; p < out.n && !failed; p++) {
            if (out.ids[p] != ids[p] || out.kidx[p] != ks[p] || out.cand[p][out.kidx[p]] != out.ids[p] ||
                memcmp(out.cand[p], b.Cp[p], (size_t)f.K * 4) != 0 || out.q[p][ks[p]] != 1.0f) {
                printf("  p_min %g slot %d: id %d k %d, want %d %d\n", p_min[i], (int)p + 1, (int)out.ids[p],
                       (int)out.kidx[p], (int)ids[p], (int)ks[p]);
                failed = 1;
            }
        }
        /* conf of every visited slot, the stopping one included (at index n) */
        for (int32_t p = 0; p <= out.n && p < b.n; p++) worst = max_d(worst, fabs((double)out.conf[p] - b.conf[p]));
    }
    /* block 3: same anchor, its own C/U/gate */
    int32_t ids3[SPEX_DRAFT_MAX_N], ks3[SPEX_DRAFT_MAX_N];
    static block b3;
    if (!failed) {
        ok = block_load(&f, 3, &b3) && g_ints(&f, "golden.block3.greedy.ids", ids3, SPEX_DRAFT_MAX_N) == 3 &&
             g_ints(&f, "golden.block3.greedy.k", ks3, SPEX_DRAFT_MAX_N) == 3;
        if (!ok || spex_dflash_walk(f.d, b3.anchor, 3, b3.Cp, b3.Up, b3.gp, NULL, 0.0f, 0.0f, NULL, NULL, &out,
                                    NULL) != SPEX_OK || out.n != 3)
            failed = 1;
        for (int32_t p = 0; p < 3 && !failed; p++)
            if (out.ids[p] != ids3[p] || out.kidx[p] != ks3[p]) failed = 1;
        for (int32_t p = 0; p < 3; p++) worst = max_d(worst, fabs((double)out.conf[p] - b3.conf[p]));
    }
    printf("  greedy: ids/k exact at p_min {%g, %g, %g} (n %d/%d/%d), block 3; max |conf - golden| %.3g\n",
           p_min[0], p_min[1], p_min[2], (int)n_drafted[0], (int)n_drafted[1], (int)n_drafted[2], worst);
    fixture_free(&f);
    CHECK(!failed);
    CHECK(worst <= 1e-5);
}

/* ---- §14 sampled walk ----------------------------------------------------------------------- */

TEST(sampled_walk_matches_golden) {
    OPEN(f, DF2, DF2_GOLDEN);
    static block b;
    static spex_draft out;
    float T[4], u[4 * SPEX_DRAFT_MAX_N];
    int32_t ids[4 * SPEX_DRAFT_MAX_N], ks[4 * SPEX_DRAFT_MAX_N];
    const int n_T = g_floats(&f, "golden.sampled.T", T, 4);
    bool ok = block_load(&f, 7, &b) && n_T >= 1 && n_T <= 4 &&
              g_floats(&f, "golden.sampled.u", u, 4 * SPEX_DRAFT_MAX_N) == n_T * 7 &&
              g_ints(&f, "golden.sampled.ids", ids, 4 * SPEX_DRAFT_MAX_N) == n_T * 7 &&
              g_ints(&f, "golden.sampled.k", ks, 4 * SPEX_DRAFT_MAX_N) == n_T * 7;
    const float *q = ok ? g_tensor(&f, "sampled.q", f.K, 7, n_T) : NULL;
    if (!q) fixture_free(&f);
    CHECK_MSG(q, "golden sampled walk incomplete");
    int failed = 0;
    double worst = 0.0;
    for (int w = 0; w < n_T && !failed; w++) {
        spex_error e = {0};
        if (spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, T[w], 0.0f, NULL, u + 7 * w, &out, &e) !=
                SPEX_OK ||
            out.n != 7 || !out.has_q) {
            printf("  T %g: n %d has_q %d %s\n", T[w], (int)out.n, (int)out.has_q, e.msg);
            failed = 1;
            break;
        }
        for (int32_t p = 0; p < 7; p++) {
            if (out.ids[p] != ids[7 * w + p] || out.kidx[p] != ks[7 * w + p]) {
                printf("  T %g slot %d: id %d k %d, want %d %d\n", T[w], (int)p + 1, (int)out.ids[p],
                       (int)out.kidx[p], (int)ids[7 * w + p], (int)ks[7 * w + p]);
                failed = 1;
            }
            for (int32_t k = 0; k < f.K; k++) {
                worst = max_d(worst, fabs((double)out.q[p][k] - q[k + (size_t)f.K * (p + 7 * w)]));
            }
        }
    }
    printf("  sampled: ids/k exact at %d temperatures; max |q - golden| %.3g\n", n_T, worst);
    fixture_free(&f);
    CHECK(!failed);
    CHECK(worst <= 1e-5);
}

/* The RNG path draws exactly one spex_rng_uniform per drafted slot, and equals the override
 * path fed with those uniforms; p_min 1 draws none. */
TEST(sampled_walk_rng_stream) {
    OPEN(f, DF2, DF2_GOLDEN);
    static block b;
    static spex_draft a, c;
    bool ok = block_load(&f, 7, &b);
    if (!ok) fixture_free(&f);
    CHECK(ok);
    spex_rng rng, copy;
    spex_rng_seed_stream(&rng, 1234, 7);
    copy = rng;
    float u[7];
    for (int i = 0; i < 7; i++) u[i] = spex_rng_uniform(&copy);
    spex_status s1 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 1.0f, 0.0f, &rng, NULL, &a, NULL);
    spex_status s2 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 1.0f, 0.0f, NULL, u, &c, NULL);
    const bool same_state = memcmp(&rng, &copy, sizeof rng) == 0;
    static spex_draft first;
    first = a;
    spex_rng before = rng;
    spex_status s3 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 1.0f, 1.0f, &rng, NULL, &a, NULL);
    const int n_stopped = a.n;
    const bool none_drawn = memcmp(&rng, &before, sizeof rng) == 0;
    spex_status s4 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 1.0f, 0.0f, NULL, NULL, &a, NULL);
    fixture_free(&f);
    CHECK_OK(s1);
    CHECK_OK(s2);
    CHECK_OK(s3);
    CHECK(same_state);
    CHECK_EQ_INT(c.n, 7);
    CHECK_EQ_INT(first.n, 7);
    CHECK(memcmp(first.ids, c.ids, sizeof c.ids) == 0);
    CHECK(memcmp(first.q, c.q, sizeof c.q) == 0);
    CHECK_EQ_INT(n_stopped, 0);
    CHECK(none_drawn);
    CHECK_EQ_INT(s4, SPEX_ERR_INVALID_ARG);
}

/* T -> 0 is clamped to 1e-5: q is finite and the sampled walk follows the greedy path. */
TEST(sampled_walk_tiny_temperature_is_greedy) {
    OPEN(f, DF2, DF2_GOLDEN);
    static block b;
    static spex_draft g, s;
    bool ok = block_load(&f, 7, &b);
    if (!ok) fixture_free(&f);
    CHECK(ok);
    const float u[7] = {0.5f, 0.999f, 0.0f, 0.3f, 0.7f, 0.9999f, 0.1f};
    spex_status s1 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 0.0f, 0.0f, NULL, NULL, &g, NULL);
    spex_status s2 = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 1e-30f, 0.0f, NULL, u, &s, NULL);
    fixture_free(&f);
    CHECK_OK(s1);
    CHECK_OK(s2);
    CHECK_EQ_INT(s.n, 7);
    for (int p = 0; p < 7; p++) {
        CHECK_EQ_INT(s.ids[p], g.ids[p]);
        for (int k = 0; k < SPEX_DRAFT_MAX_K; k++) CHECK(isfinite(s.q[p][k]));
    }
}

/* ---- §20 sanity 2, p_min edges, ties -------------------------------------------------------- */

TEST(zero_gate_is_per_slot_argmax_of_U) {
    OPEN(f, DF2, DF2_GOLDEN);
    static block b;
    static spex_draft out;
    static float zero[SPEX_SELECTOR_MAX_R];
    bool ok = block_load(&f, 7, &b);
    if (!ok) fixture_free(&f);
    CHECK(ok);
    const float *zg[SPEX_DRAFT_MAX_N];
    for (int p = 0; p < 7; p++) zg[p] = zero;
    spex_status st = spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, zg, NULL, 0.0f, 0.0f, NULL, NULL, &out, NULL);
    int differs = 0;   /* the real gate moves the walk off the per-slot argmax (README: 2 of 7) */
    static spex_draft real;
    spex_dflash_walk(f.d, b.anchor, 7, b.Cp, b.Up, b.gp, NULL, 0.0f, 0.0f, NULL, NULL, &real, NULL);
    for (int p = 0; p < 7; p++) differs += real.ids[p] != b.Cp[p][0];
    /* expected: first maximum of U_p (the golden file is still mapped here) */
    int32_t want_k[7], want_id[7];
    for (int p = 0; p < 7; p++) {
        float best = -INFINITY;
        want_k[p] = 0;
        for (int k = 0; k < f.K; k++)
            if (b.Up[p][k] > best) {
                best = b.Up[p][k];
                want_k[p] = k;
            }
        want_id[p] = b.Cp[p][want_k[p]];
    }
    fixture_free(&f);
    CHECK_OK(st);
    CHECK_EQ_INT(out.n, 7);
    for (int p = 0; p < 7; p++) {
        CHECK_EQ_INT(out.kidx[p], want_k[p]);
        CHECK_EQ_INT(out.ids[p], want_id[p]);
    }
    CHECK(differs > 0);
}

/* With a zero gate the row is U itself: ties go to the first maximum, the confidence is the
 * softmax at k*, p_min 0 drafts everything and p_min 1 nothing. */
TEST(walk_ties_and_p_min_edges) {
    OPEN(f, DF2, DF2_GOLDEN);
    static spex_draft out;
    static float zero[SPEX_SELECTOR_MAX_R];
    CHECK_EQ_INT(f.K, 4);
    const int32_t C0[4] = {10, 20, 30, 40}, C1[4] = {50, 60, 70, 80}, C2[4] = {5, 6, 7, 8};
    const float U0[4] = {1.0f, 3.0f, 3.0f, 0.0f}, U1[4] = {2.0f, 2.0f, 2.0f, 2.0f}, U2[4] = {0.f, 0.f, 0.f, 9.f};
    const int32_t *C[3] = {C0, C1, C2};
    const float *U[3] = {U0, U1, U2}, *gate[3] = {zero, zero, zero};
    spex_status s0 = spex_dflash_walk(f.d, 0, 3, C, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out, NULL);
    static spex_draft full, one, none;
    full = out;
    spex_status s1 = spex_dflash_walk(f.d, 0, 3, C, U, gate, NULL, 0.0f, 1.0f, NULL, NULL, &none, NULL);
    /* p_min 0.3: slot 1 conf = 1/(e^-2 + 1 + 1 + e^-3) ~ 0.46 passes, slot 2 (four-way tie) 0.25 stops */
    spex_status s2 = spex_dflash_walk(f.d, 0, 3, C, U, gate, NULL, 0.0f, 0.3f, NULL, NULL, &one, NULL);
    /* sampled at p_min 1: nothing, and no uniform needed */
    static spex_draft sn;
    spex_status s3 = spex_dflash_walk(f.d, 0, 3, C, U, gate, NULL, 0.8f, 1.0f, NULL, (const float[3]){0}, &sn, NULL);
    fixture_free(&f);
    CHECK_OK(s0);
    CHECK_OK(s1);
    CHECK_OK(s2);
    CHECK_OK(s3);
    CHECK_EQ_INT(full.n, 3);
    CHECK_EQ_INT(full.kidx[0], 1);
    CHECK_EQ_INT(full.ids[0], 20);
    CHECK_EQ_INT(full.kidx[1], 0);
    CHECK_EQ_INT(full.ids[1], 50);
    CHECK_EQ_INT(full.kidx[2], 3);
    CHECK_NEAR(full.conf[0], 1.0 / (exp(-2.0) + 2.0 + exp(-3.0)), 1e-6);
    CHECK_NEAR(full.conf[1], 0.25, 1e-7);
    CHECK_EQ_INT(none.n, 0);
    CHECK_EQ_INT(one.n, 1);
    CHECK_EQ_INT(one.ids[0], 20);
    CHECK_NEAR(one.conf[1], 0.25, 1e-7);
    CHECK_EQ_INT(sn.n, 0);
}

/* Bad inputs are refused before anything is walked. */
TEST(walk_rejects_bad_input) {
    OPEN(f, DF2, DF2_GOLDEN);
    static spex_draft out;
    static float zero[SPEX_SELECTOR_MAX_R];
    const int32_t Cbad[4] = {1, 2, 3, 999999};
    const float U0[4] = {0};
    const int32_t *C[1] = {Cbad};
    const float *U[1] = {U0}, *gate[1] = {zero};
    spex_error e = {0};
    spex_status s1 = spex_dflash_walk(f.d, 0, 1, C, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out, &e);
    spex_status s2 = spex_dflash_walk(f.d, 0, 0, C, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out, NULL);
    spex_status s3 = spex_dflash_walk(f.d, 0, SPEX_DRAFT_MAX_N + 1, C, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out,
                                      NULL);
    spex_status s4 = spex_dflash_walk(f.d, -5, 1, C, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out, NULL);
    spex_status s5 = spex_dflash_walk(f.d, 0, 1, NULL, U, gate, NULL, 0.0f, 0.0f, NULL, NULL, &out, NULL);
    fixture_free(&f);
    CHECK_EQ_INT(s1, SPEX_ERR_RANGE);
    CHECK(strstr(e.msg, "999999") != NULL);
    CHECK_EQ_INT(s2, SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(s3, SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(s4, SPEX_ERR_RANGE);
    CHECK_EQ_INT(s5, SPEX_ERR_INVALID_ARG);
}

/* ---- DFlash v1: per-slot argmax of z -------------------------------------------------------- */

TEST(v1_greedy_matches_golden) {
    OPEN(f, DF1, DF1_GOLDEN);
    static spex_draft out;
    int32_t ids[SPEX_DRAFT_MAX_N], ids2[SPEX_DRAFT_MAX_N], n_drafted[3];
    float p_min[3];
    const float *z = g_tensor(&f, "block15.z", f.V, 15, 1);
    const float *z2 = g_tensor(&f, "step2.z", f.V, 15, 1);
    const float *conf = g_tensor(&f, "block15.greedy.conf", 15, 1, 1);
    bool ok = z && z2 && conf && g_ints(&f, "golden.block15.greedy.ids", ids, SPEX_DRAFT_MAX_N) == 15 &&
              g_ints(&f, "golden.step2.greedy.ids", ids2, SPEX_DRAFT_MAX_N) == 15 &&
              g_ints(&f, "golden.greedy.n_drafted", n_drafted, 3) == 3 &&
              g_floats(&f, "golden.greedy.p_min", p_min, 3) == 3;
    if (!ok) fixture_free(&f);
    CHECK_MSG(ok, "v1 golden incomplete");
    const float *zp[15], *z2p[15];
    for (int p = 0; p < 15; p++) {
        zp[p] = z + (size_t)f.V * p;
        z2p[p] = z2 + (size_t)f.V * p;
    }
    int failed = 0;
    double worst = 0.0;
    for (int i = 0; i < 3 && !failed; i++) {
        /* v1 walks greedily at any temperature (spex.h): temp 0.9 must give the same */
        const float temp = i == 0 ? 0.9f : 0.0f;
        if (spex_dflash_walk(f.d, 0, 15, NULL, NULL, NULL, zp, temp, p_min[i], NULL, NULL, &out, NULL) != SPEX_OK ||
            out.n != n_drafted[i] || out.has_q || out.n_cand != 1) {
            printf("  p_min %g: n %d want %d\n", p_min[i], (int)out.n, (int)n_drafted[i]);
            failed = 1;
        }
        for (int p = 0; p < out.n && !failed; p++)
            if (out.ids[p] != ids[p] || out.kidx[p] != 0 || out.cand[p][0] != ids[p]) failed = 1;
        for (int p = 0; p <= out.n && p < 15; p++) worst = max_d(worst, fabs((double)out.conf[p] - conf[p]));
    }
    if (!failed) {
        if (spex_dflash_walk(f.d, 0, 15, NULL, NULL, NULL, z2p, 0.0f, 0.0f, NULL, NULL, &out, NULL) != SPEX_OK ||
            out.n != 15)
            failed = 1;
        for (int p = 0; p < 15 && !failed; p++)
            if (out.ids[p] != ids2[p]) failed = 1;
    }
    printf("  v1: ids exact (block 15 at 3 p_min values, step 2); max |conf - golden| %.3g\n", worst);
    fixture_free(&f);
    CHECK(!failed);
    CHECK(worst <= 1e-5);
}

/* ---- spex_draft_walk over a live draft context ---------------------------------------------- */

/* The golden scenario through the public API: inject the stored prompt features, draft the
 * block of n slots, walk it. Also exercises the draft context's forward (dflash_forward.c):
 * a failure here with the tests above passing points at the forward or the gathering. */
static void live_walk(const char *drafter, const char *golden, int32_t n) {
    OPEN(f, drafter, golden);
    const spex_drafter_hparams *hp = spex_drafter_get_hparams(f.d);
    const int64_t ld = (int64_t)hp->n_taps * hp->n_embd;
    const bool is_v2 = hp->variant == SPEX_DFLASH2;
    const float *feat = g_tensor(&f, "ctx.features", ld, 12, 1);
    int32_t want[SPEX_DRAFT_MAX_N];
    char key[64];
    snprintf(key, sizeof key, "golden.block%d.greedy.ids", (int)n);
    const bool ok = feat && g_ints(&f, key, want, SPEX_DRAFT_MAX_N) == n;
    spex_draft_context *dc = NULL;
    spex_error e = {0};
    spex_status st = ok ? spex_draft_context_init(f.d, NULL, &dc, &e) : SPEX_ERR_NOT_FOUND;
    int32_t seq[12], pos[12];
    for (int i = 0; i < 12; i++) {
        seq[i] = 0;
        pos[i] = i;
    }
    if (st == SPEX_OK) st = spex_draft_inject(dc, feat, ld, seq, pos, 12, &e);
    const spex_draft_block blk = {0, g_int(&f, "golden.anchor"), n};
    if (st == SPEX_OK) st = spex_draft_forward(dc, &blk, 1, &e);
    static spex_draft out;
    if (st == SPEX_OK) st = spex_draft_walk(dc, 0, 0.0f, 0.0f, NULL, &out, &e);
    spex_status bad_b = dc ? spex_draft_walk(dc, 1, 0.0f, 0.0f, NULL, &out, NULL) : SPEX_ERR_RANGE;
    /* the sampled walk through the context: one uniform of rng per drafted slot */
    static spex_draft sampled;
    spex_rng rng;
    spex_rng_seed_stream(&rng, 99, 1);
    spex_status st2 = st == SPEX_OK ? spex_draft_walk(dc, 0, 0.8f, 0.0f, &rng, &sampled, &e) : st;
    spex_draft_context_free(dc);
    fixture_free(&f);
    CHECK_MSG(ok, "golden incomplete");
    CHECK_MSG(st == SPEX_OK, "live walk: %s", e.msg);
    CHECK_OK(st2);
    CHECK_EQ_INT(bad_b, SPEX_ERR_RANGE);
    CHECK_EQ_INT(out.n, n);
    for (int p = 0; p < n; p++) CHECK_EQ_INT(out.ids[p], want[p]);
    CHECK_EQ_INT(sampled.n, n);
    CHECK(sampled.has_q == is_v2);
}

TEST(draft_walk_live_dflash2) { live_walk(DF2, DF2_GOLDEN, 7); }
TEST(draft_walk_live_v1) { live_walk(DF1, DF1_GOLDEN, 15); }

TEST_MAIN()
