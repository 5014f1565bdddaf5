/*
 * test_spec_cut.c — the cost-aware draft cut's model and rule (src/spec/cut.c) on synthetic
 * numbers: the price fit, the acceptance bins, the warm-up and exploration pattern, the rule
 * against a brute-force search of the best length, and that a decision never reads a later
 * slot; the realized-rate guard's plan of steps (src/spec/guard.c). End-to-end losslessness with
 * the cut and the guard on is in test_spec.c.
 */
#include "spec/cut.h"
#include "spec/guard.h"
#include "spex.h"
#include "test.h"
#include "core/rng.h"

#include <math.h>
#include <string.h>

/* A model past the warm-up on a step that explores nothing (n_steps % EXPLORE not 0 or half),
 * with the price line f + v0 + v1·k fed as exact observations of rows 2 and 8. */
static void cut_with_price(spec_cut *c, double f, double v0, double v1) {
    spec_cut_init(c);
    for (int i = 0; i < 2 * SPEC_CUT_EXPLORE + 1; i++) {
        const int k = i % 2 ? 8 : 2;
        spec_cut_observe(c, k, v0 + v1 * k, f, NULL, 0, 0);
    }
}

/* Brute force: the n in [0, nmax] with the best E(n) / C(n) (first best on ties). */
static int best_len(const spec_cut *c, const float *conf, int nmax) {
    double f, v0, v1;
    if (!spec_cut_price(c, &f, &v0, &v1)) return nmax;
    double e = 1, v = 1, best = -1;
    int arg = 0;
    for (int n = 0; n <= nmax; n++) {
        if (n > 0) {
            v *= spec_cut_accept_p(c, conf[n - 1]);
            e += v;
        }
        const double r = e / (f + v0 + v1 * (n + 1));
        if (r > best * (1 + 1e-12)) best = r, arg = n;
    }
    return arg;
}

TEST(cut_price_fit) {
    spec_cut c;
    spec_cut_init(&c);
    double f, v0, v1;
    CHECK(!spec_cut_price(&c, &f, &v0, &v1));
    /* one row count only: no slope */
    for (int i = 0; i < 10; i++) spec_cut_observe(&c, 8, 0.010, 0.001, NULL, 0, 0);
    CHECK(!spec_cut_price(&c, &f, &v0, &v1));
    cut_with_price(&c, 0.0005, 0.004, 0.0015);
    CHECK(spec_cut_price(&c, &f, &v0, &v1));
    CHECK_NEAR(f, 0.0005, 1e-12);
    CHECK_NEAR(v0, 0.004, 1e-9);
    CHECK_NEAR(v1, 0.0015, 1e-10);
    /* a preempted step (1000x its price) moves the line by a clipped amount only */
    spec_cut_observe(&c, 8, 1000 * (0.004 + 8 * 0.0015), 1000 * 0.0005, NULL, 0, 0);
    CHECK(spec_cut_price(&c, &f, &v0, &v1));
    CHECK_MSG(v1 < 1.5 * 0.0015 && f < 1.2 * 0.0005, "v1 %g, f %g after an outlier", v1, f);
    /* a line tilted down by noise is floored: a row then costs nothing */
    cut_with_price(&c, 0.0005, 0.010, -0.0001);
    CHECK(spec_cut_price(&c, &f, &v0, &v1));
    CHECK(v1 == 0.0);
}

TEST(cut_accept_bins) {
    spec_cut c;
    spec_cut_init(&c);
    /* no data: the confidence itself */
    CHECK_NEAR(spec_cut_accept_p(&c, 0.37f), 0.37, 1e-7);
    CHECK_NEAR(spec_cut_accept_p(&c, 1.0f), 1.0, 0);
    CHECK(spec_cut_accept_p(&c, NAN) == 0.0);
    CHECK(spec_cut_accept_p(&c, -1.0f) == 0.0);
    /* slots of confidence 0.95 accepted half the time (accepted, rejected alternately) */
    const float conf[2] = {0.95f, 0.95f};
    for (int i = 0; i < 2000; i++) spec_cut_observe(&c, 3, 0.01, 0.001, conf, 2, i % 2 ? 2 : 0);
    /* m = 2: both accepted; m = 0: the first rejected, the second never judged: 2 of 3 judged
     * slots accepted */
    CHECK_NEAR(spec_cut_accept_p(&c, 0.95f), 2.0 / 3.0, 0.01);
    CHECK_NEAR(spec_cut_accept_p(&c, 0.42f), 0.42, 1e-6); /* another bin: untouched */
}

TEST(cut_warmup_and_exploration) {
    spec_cut c;
    spec_cut_init(&c);
    const float conf[7] = {0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.01f};
    for (int t = 0; t < SPEC_CUT_WARMUP; t++) {
        CHECK_EQ_INT(spec_cut_choose(&c, conf, 7), t % 2 ? 4 : 7);
        spec_cut_observe(&c, (t % 2 ? 4 : 7) + 1, 0.001 * (t % 2 ? 5 : 8), 0.0001, conf, 0, 0);
    }
    /* a steep price and hopeless slots: the rule keeps none, but for the full exploration
     * steps, whose rows keep the fit spread (no half steps needed) */
    cut_with_price(&c, 0.0001, 0.001, 0.001);
    int full = 0, half = 0, none = 0;
    for (int t = 0; t < 4 * SPEC_CUT_EXPLORE; t++) {
        const int n = spec_cut_choose(&c, conf, 7);
        full += n == 7, half += n == 4, none += n == 0;
        spec_cut_observe(&c, n + 1, 0.001 + 0.001 * (n + 1), 0.0001, conf, n, 0);
    }
    CHECK_EQ_INT(full, 4);
    CHECK_EQ_INT(half, 0);
    CHECK_EQ_INT(none, 4 * SPEC_CUT_EXPLORE - 4);
    CHECK_EQ_INT(spec_cut_choose(&c, conf, 0), 0);
    /* free rows and sure slots: the rule keeps all, every step verifies 8 rows, the spread
     * decays, and the half steps come back to keep the line measured */
    const float sure[7] = {0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f};
    cut_with_price(&c, 0.0001, 0.005, 0.0);
    full = half = 0;
    for (int t = 0; t < 30 * SPEC_CUT_EXPLORE; t++) {
        const int n = spec_cut_choose(&c, sure, 7);
        full += n == 7, half += n == 4;
        spec_cut_observe(&c, n + 1, 0.005, 0.0001, sure, n, n);
    }
    CHECK_MSG(half > 0 && half < 30 && full > 25 * SPEC_CUT_EXPLORE, "half %d, full %d", half, full);
}

TEST(cut_rule_is_the_best_length) {
    spex_rng rng;
    spex_rng_seed(&rng, 11);
    int cuts_mid = 0;
    for (int trial = 0; trial < 3000; trial++) {
        spec_cut c;
        /* prices from memory-bound (a row ~2 % of a step) to compute-bound (a row ~ a step) */
        const double f = 0.0002 + 0.001 * spex_rng_uniform_f64(&rng), v0 = 0.001 + 0.01 * spex_rng_uniform_f64(&rng);
        const double v1 = v0 * (0.02 + 1.2 * spex_rng_uniform_f64(&rng));
        cut_with_price(&c, f, v0, v1);
        CHECK(c.n_steps % SPEC_CUT_EXPLORE != 0 && c.n_steps % SPEC_CUT_EXPLORE != SPEC_CUT_EXPLORE / 2);
        float conf[SPEX_DRAFT_MAX_N];
        const int n = 1 + (int)(spex_rng_uniform_f64(&rng) * 15);
        for (int p = 0; p < n; p++) conf[p] = (float)spex_rng_uniform_f64(&rng);
        const int got = spec_cut_choose(&c, conf, n), want = best_len(&c, conf, n);
        CHECK_MSG(got == want, "trial %d: rule %d, best %d of %d", trial, got, want, n);
        cuts_mid += got > 0 && got < n;
        /* a decision reads nothing after its slot: later confidences change nothing */
        if (got + 1 < n) {
            for (int p = got + 1; p < n; p++) conf[p] = (float)spex_rng_uniform_f64(&rng);
            CHECK_EQ_INT(spec_cut_choose(&c, conf, n), got);
        }
    }
    CHECK(cuts_mid > 300); /* the search was not trivial */
}

TEST(cut_regimes) {
    spec_cut c;
    float conf[7];
    for (int p = 0; p < 7; p++) conf[p] = 0.5f;
    /* free rows: everything is verified */
    cut_with_price(&c, 0.0005, 0.010, 0.0);
    CHECK_EQ_INT(spec_cut_choose(&c, conf, 7), 7);
    /* a row dearer than a whole plain step: a 0.5 slot does not pay */
    cut_with_price(&c, 0.0, 0.0001, 0.010);
    CHECK_EQ_INT(spec_cut_choose(&c, conf, 7), 0);
    /* compute-bound, a row = 1/3 of the anchor-only step: the first 0.5 slot pays (1.5 tokens
     * for 4/3 of the time), the second (0.25 more for 1/3 more) does not */
    cut_with_price(&c, 0.0, 0.002, 0.001);
    CHECK_EQ_INT(spec_cut_choose(&c, conf, 7), 1);
}

/* The realized-rate guard's plan of one sequence's steps (spec/guard.h), on recorded rates. */
TEST(guard_plan) {
    spec_guard g;
    memset(&g, 0, sizeof g);
    /* nothing measured: the steps draft until drafting has weight W (5 decayed steps) */
    for (int i = 0; i < 5; i++) {
        CHECK(!spec_guard_plain(&g, 0));
        spex_realized_add(&g.r, true, 10, 1.0); /* drafting: 10 tokens/s */
    }
    /* drafting known, plain not: with an estimate far below, no learning steps */
    int plain = 0;
    for (int i = 0; i < 12; i++) plain += spec_guard_plain(&g, 2.0);
    CHECK_EQ_INT(plain, 0);
    /* ... with none, or one within the margin (10 < 1.25 x 9), one step in 3 is plain */
    plain = 0;
    for (int i = 0; i < 12; i++) plain += spec_guard_plain(&g, 0);
    CHECK_EQ_INT(plain, 4);
    plain = 0;
    for (int i = 0; i < 12; i++) plain += spec_guard_plain(&g, 9.0);
    CHECK_EQ_INT(plain, 4);
    /* plain steps at 20 tokens/s: the veto keeps every step plain but one in 64 */
    for (int i = 0; i < 6; i++) spex_realized_add(&g.r, false, 1, 0.05);
    CHECK(spex_realized_veto(&g.r, SPEC_GUARD_W));
    plain = 0;
    for (int i = 0; i < 128; i++) plain += spec_guard_plain(&g, 2.0);
    CHECK_EQ_INT(plain, 126);
    /* drafting recovers (40 tokens/s in its re-checks): the veto lifts, the steps draft */
    for (int i = 0; i < 40 && spex_realized_veto(&g.r, SPEC_GUARD_W); i++) spex_realized_add(&g.r, true, 40, 1.0);
    CHECK(!spex_realized_veto(&g.r, SPEC_GUARD_W));
    plain = 0;
    for (int i = 0; i < 20; i++) plain += spec_guard_plain(&g, 0);
    CHECK_EQ_INT(plain, 0);
    /* a preempted step (100x its kind's mean) counts as SPEC_GUARD_CLIP times the mean */
    spec_guard h;
    memset(&h, 0, sizeof h);
    spec_guard_record(&h, false, 1, 1.0); /* the first of its kind: nothing to clip against */
    CHECK(fabs(h.r.sec[0] - 1.0) < 1e-12);
    for (int i = 0; i < 30; i++) spec_guard_record(&h, false, 1, 0.01);
    const double mean = h.r.sec[0] / h.r.w[0], before = h.r.sec[0];
    spec_guard_record(&h, false, 1, 100 * mean);
    CHECK(fabs(h.r.sec[0] - (before * SPEX_REALIZED_DECAY + SPEC_GUARD_CLIP * mean)) < 1e-12);
}

TEST_MAIN()
