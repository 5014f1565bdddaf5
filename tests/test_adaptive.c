/*
 * test_adaptive.c — the draft-length search of `spex serve`'s adaptive rule
 * (srv_best_drafts, src/server/engine.c).
 *
 * What it checks: the expected-tokens formula; that a drafter whose cost is fixed per step
 * (d1 = 0, what the online fit learns when every drafted step has the same rows) still gets
 * whole blocks drafted where one-position moves would stop at nothing; that expensive verify
 * rows turn drafting off; that fixed slots and caps are respected; and, against a brute
 * force over all length combinations, that the greedy result is optimal for one slot and
 * within 1 % of the optimum for two or three slots over random cost models.
 * What it is not: a test of the online fits or of the server's measured throughput
 * (bench/server_concurrency.sh).
 */
#include "server/server.h"
#include "test.h"
#include "spec/api.h"

#include <math.h>
#include <stdlib.h>

static double rate_of(const srv_step_cost *c, int n, const double *p, const int *nd) {
    double tok = 0;
    int rows = 0, drows = 0;
    for (int i = 0; i < n; i++) {
        tok += srv_expect_tokens(p[i], nd[i]);
        rows += nd[i] + 1;
        if (nd[i]) drows += nd[i] + 1;
    }
    return tok / (c->v0 + c->v1 * rows + (drows ? c->d0 + c->d1 * drows : 0));
}

/* The search from all-zero lengths; returns its rate and checks rows/drows bookkeeping. */
static double search(const srv_step_cost *c, int n, const double *p, const int *cap, const bool *fixed, int *nd,
                     bool *books_ok) {
    int rows = n, drows = 0;
    for (int i = 0; i < n; i++) {
        rows += nd[i];
        if (nd[i]) drows += nd[i] + 1;
    }
    double tok = srv_best_drafts(c, n, p, cap, fixed, nd, &rows, &drows);
    int r2 = 0, d2 = 0;
    double t2 = 0;
    for (int i = 0; i < n; i++) {
        r2 += nd[i] + 1;
        if (nd[i]) d2 += nd[i] + 1;
        t2 += srv_expect_tokens(p[i], nd[i]);
    }
    *books_ok = r2 == rows && d2 == drows && fabs(t2 - tok) < 1e-9;
    return rate_of(c, n, p, nd);
}

TEST(expected_tokens) {
    CHECK_NEAR(srv_expect_tokens(0.0, 7), 1.0, 1e-12);
    CHECK_NEAR(srv_expect_tokens(1.0, 7), 8.0, 1e-12);
    CHECK_NEAR(srv_expect_tokens(0.5, 2), 1.75, 1e-12);
    CHECK_NEAR(srv_expect_tokens(0.9, 0), 1.0, 1e-12);
}

TEST(fixed_drafter_cost_gets_whole_blocks) {
    /* v 1 + 0.1·rows, drafter 1.5 per step whatever its rows, p 0.9, cap 7:
     * no draft 1/1.1 = 0.91 tok/s; one position (1.9)/(2.7) = 0.70 (a one-position search
     * stops here); seven 5.70/(3.3) = 1.73 */
    srv_step_cost c = {.v0 = 1.0, .v1 = 0.1, .d0 = 1.5, .d1 = 0.0};
    double p[1] = {0.9};
    int cap[1] = {7}, nd[1] = {0};
    bool fixed[1] = {false}, ok;
    double r = search(&c, 1, p, cap, fixed, nd, &ok);
    CHECK(ok);
    CHECK_EQ_INT(nd[0], 7);
    CHECK(r > 1.7);
}

TEST(expensive_rows_turn_drafting_off) {
    srv_step_cost c = {.v0 = 1.0, .v1 = 1.0, .d0 = 0.5, .d1 = 0.05};
    double p[4] = {0.6, 0.7, 0.5, 0.65};
    int cap[4] = {7, 7, 7, 7}, nd[4] = {0};
    bool fixed[4] = {false}, ok;
    search(&c, 4, p, cap, fixed, nd, &ok);
    CHECK(ok);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(nd[i], 0);
}

TEST(caps_and_fixed_slots) {
    srv_step_cost c = {.v0 = 5.0, .v1 = 0.01, .d0 = 0.2, .d1 = 0.01};   /* cheap rows: everyone wants full drafts */
    double p[3] = {0.95, 0.95, 0.95};
    int cap[3] = {7, 3, 7}, nd[3] = {0, 0, 2};
    bool fixed[3] = {false, false, true}, ok;
    search(&c, 3, p, cap, fixed, nd, &ok);
    CHECK(ok);
    CHECK_EQ_INT(nd[0], 7);
    CHECK_EQ_INT(nd[1], 3);
    CHECK_EQ_INT(nd[2], 2);
}

/* A measured bucket overrides the linear fit: 8 slots whose fit (1 + 0.01·rows) makes full
 * drafts look nearly free draft fully; once 64-row steps were measured at 20 (a compute-bound
 * batch the line does not predict), nobody drafts. */
TEST(measured_bucket_overrides_the_fit) {
    srv_bucket vb[SRV_BUCKETS] = {{0}}, db[SRV_BUCKETS] = {{0}};
    srv_step_cost c = {.v0 = 1.0, .v1 = 0.01, .d0 = 0.3, .d1 = 0.0, .vb = vb, .db = db};
    double p[8];
    int cap[8], nd[8];
    bool fixed[8] = {false}, ok;
    for (int i = 0; i < 8; i++) p[i] = 0.8, cap[i] = 7, nd[i] = 0;
    search(&c, 8, p, cap, fixed, nd, &ok);
    CHECK(ok);
    CHECK_EQ_INT(nd[0], 7);
    vb[6] = (srv_bucket){.t = 20.0, .r = 64.0, .w = 1.0};   /* rows 64..127 measured: 20 per step */
    for (int i = 0; i < 8; i++) nd[i] = 0;
    search(&c, 8, p, cap, fixed, nd, &ok);
    CHECK(ok);
    int drafted = 0;
    for (int i = 0; i < 8; i++) drafted += nd[i];
    CHECK_MSG(drafted < 56, "still drafting everything: %d rows", drafted);
    CHECK(drafted * 1 + 8 < 64);   /* the search keeps below the measured bucket */
}

/* Best rate over all length combinations of n ≤ 3 slots with caps ≤ 7. */
static double brute(const srv_step_cost *c, int n, const double *p, const int *cap) {
    int nd[3] = {0, 0, 0};
    double best = 0;
    for (;;) {
        double r = rate_of(c, n, p, nd);
        if (r > best) best = r;
        int i = 0;
        while (i < n && nd[i] == cap[i]) nd[i++] = 0;
        if (i == n) break;
        nd[i]++;
    }
    return best;
}

TEST(greedy_against_brute_force) {
    srand(12345);
    double worst = 1.0;
    int exact1 = 0, cases = 0;
    for (int k = 0; k < 3000; k++) {
        int n = 1 + k % 3;
        srv_step_cost c = {.v0 = 0.2 + 2.0 * rand() / RAND_MAX, .v1 = 0.5 * rand() / RAND_MAX,
                           .d0 = 2.0 * rand() / RAND_MAX, .d1 = 0.2 * rand() / RAND_MAX};
        if (k % 4 == 0) c.d1 = 0;
        double p[3];
        int cap[3], nd[3] = {0, 0, 0};
        bool fixed[3] = {false, false, false}, ok;
        for (int i = 0; i < n; i++) p[i] = (double)rand() / RAND_MAX, cap[i] = 1 + rand() % 7;
        double got = search(&c, n, p, cap, fixed, nd, &ok);
        CHECK(ok);
        for (int i = 0; i < n; i++) CHECK(nd[i] >= 0 && nd[i] <= cap[i]);
        double want = brute(&c, n, p, cap);
        CHECK(got <= want * (1 + 1e-12));
        if (n == 1) {
            CHECK_MSG(got >= want * (1 - 1e-9), "one slot: greedy %.6f, optimum %.6f", got, want);
            exact1 += got >= want * (1 - 1e-9);
        }
        if (got / want < worst) worst = got / want;
        cases++;
    }
    printf("  %d cases: worst greedy / optimum %.4f; one slot optimal in %d of %d\n", cases, worst, exact1, 1000);
    CHECK(worst >= 0.99);
}

/* The realized-rate guard: silent until both kinds of step have weight, then it vetoes exactly
 * when drafting steps delivered fewer tokens per second; the decay lets a change show. */
TEST(realized_rate_guard) {
    spex_realized r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < 5; i++) {
        spex_realized_add(&r, false, 8, 1e-3);   /* 8000 tokens/s */
        spex_realized_add(&r, true, 10, 2e-3);   /* 5000 tokens/s */
    }
    CHECK(!spex_realized_veto(&r, 8.0));         /* not enough steps yet */
    for (int i = 0; i < 10; i++) {
        spex_realized_add(&r, false, 8, 1e-3);
        spex_realized_add(&r, true, 10, 2e-3);
    }
    CHECK(spex_realized_veto(&r, 8.0));
    /* drafting gets better (20 tokens in 2 ms = 10000/s): after enough steps the veto lifts */
    int steps = 0;
    while (spex_realized_veto(&r, 8.0) && steps < 1000) {
        spex_realized_add(&r, true, 20, 2e-3);
        spex_realized_add(&r, false, 8, 1e-3);
        steps++;
    }
    CHECK(!spex_realized_veto(&r, 8.0));
    CHECK_MSG(steps > 1 && steps < 100, "veto lifted after %d steps", steps);
    /* a single kind of step never vetoes */
    spex_realized q;
    memset(&q, 0, sizeof q);
    for (int i = 0; i < 50; i++) spex_realized_add(&q, true, 1, 1.0);
    CHECK(!spex_realized_veto(&q, 8.0));
}

/* A load without its own measurements inherits a lighter load's veto, never its permission. */
TEST(guard_inherits_lighter_veto) {
    spex_realized real[9];
    memset(real, 0, sizeof real);
    CHECK(!srv_guard_veto(real, 8, 8.0));   /* nothing measured anywhere */
    for (int i = 0; i < 20; i++) {
        spex_realized_add(&real[2], false, 2, 1e-3);   /* 2 slots: drafting pays */
        spex_realized_add(&real[2], true, 6, 1.5e-3);
        spex_realized_add(&real[4], false, 4, 1e-3);   /* 4 slots: drafting loses */
        spex_realized_add(&real[4], true, 5, 2e-3);
    }
    CHECK(!srv_guard_veto(real, 2, 8.0));
    CHECK(!srv_guard_veto(real, 3, 8.0));   /* nearest measured load below is 2: no veto */
    CHECK(srv_guard_veto(real, 4, 8.0));
    CHECK(srv_guard_veto(real, 6, 8.0));    /* inherited from 4 */
    CHECK(!srv_guard_veto(real, 1, 8.0));   /* verdicts pass to heavier loads only */
    for (int i = 0; i < 20; i++) {          /* 6 slots measured itself: drafting pays there */
        spex_realized_add(&real[6], false, 6, 1e-3);
        spex_realized_add(&real[6], true, 18, 1.5e-3);
    }
    CHECK(!srv_guard_veto(real, 6, 8.0));   /* its own verdict wins */
    CHECK(!srv_guard_veto(real, 8, 8.0));   /* and is the nearest for 8 */
    for (int i = 0; i < 3; i++) spex_realized_add(&real[5], true, 1, 1.0);   /* too few steps at 5 */
    CHECK(srv_guard_veto(real, 5, 8.0));    /* so 4's veto holds there */
}

/* A load that drafts but has too few plain steps gets a plain step in every `every`, until the
 * guard can compare there; a load that never drafted, or one measured both ways, gets none. */
TEST(guard_explores_unmeasured_plain_side) {
    spex_realized real[5];
    memset(real, 0, sizeof real);
    CHECK(!srv_guard_explore(real, 4, 8.0, 0, 16));   /* nothing drafted at 4 yet */
    spex_realized_add(&real[4], true, 20, 3e-3);
    int plain = 0;
    for (uint64_t step = 1; step <= 1000; step++) {
        if (srv_guard_explore(real, 4, 8.0, step, 16)) {
            CHECK(step % 16 == 0);
            spex_realized_add(&real[4], false, 4, 1e-3);
            plain++;
        } else {
            spex_realized_add(&real[4], true, 20, 3e-3);
        }
    }
    int need = 0;                   /* plain steps until the decayed weight reaches 8 */
    for (double w = 0; w < 8.0; need++) w = w * 0.97 + 1.0;
    CHECK(real[4].w[0] >= 8.0);     /* explored until measured ... */
    CHECK_EQ_INT(plain, need);      /* ... and not one step more */
    CHECK(!srv_guard_veto(real, 4, 8.0));   /* 6667 tokens/s drafting against 4000 plain */
    spex_realized slow[5];           /* the same with drafting slower: the exploration finds it */
    memset(slow, 0, sizeof slow);
    spex_realized_add(&slow[4], true, 5, 3e-3);
    for (uint64_t step = 1; step <= 1000; step++) {
        const bool plain_step = srv_guard_explore(slow, 4, 8.0, step, 16);
        spex_realized_add(&slow[4], !plain_step, plain_step ? 4 : 5, plain_step ? 1e-3 : 2e-3);
    }
    CHECK(srv_guard_veto(slow, 4, 8.0));    /* 2500 tokens/s drafting against 4000 plain */
    CHECK(!srv_guard_explore(real, 3, 8.0, 16, 16));  /* another load, never drafted: no */
    CHECK(!srv_guard_explore(real, 4, 8.0, 16, 0));   /* every 0: off */
}

/* The backlog price: a share of the one-off injection by the step's part of the remaining
 * tokens; and in the search, a slot whose start is dear stays off while its twin drafts. */
TEST(backlog_price_keeps_a_dear_start_off) {
    CHECK_NEAR(srv_backlog_price(0, 1e-4, 4, 100), 0.0, 1e-15);
    CHECK_NEAR(srv_backlog_price(50, 1e-4, 4, 100), 50 * 1e-4 * 0.04, 1e-15);
    CHECK_NEAR(srv_backlog_price(50, 1e-4, 4, 2), 50 * 1e-4, 1e-15);   /* the whole price: last step */
    CHECK_NEAR(srv_backlog_price(50, 0, 4, 100), 0.0, 1e-15);
    /* v 1 + 0.1·rows, drafter 0.2 + 0.05·drows, p 0.8, cap 7: drafting pays for a free start */
    const double start[2] = {0.0, 5.0};
    srv_step_cost c = {.v0 = 1.0, .v1 = 0.1, .d0 = 0.2, .d1 = 0.05, .start = start};
    const double p[2] = {0.8, 0.8};
    const int cap[2] = {7, 7};
    const bool fixed[2] = {false, false};
    int nd[2] = {0, 0}, rows = 2, drows = 0;
    srv_best_drafts(&c, 2, p, cap, fixed, nd, &rows, &drows);
    CHECK(nd[0] > 0);
    CHECK_EQ_INT(nd[1], 0);                 /* 5 s to start is more than its block gains */
    const double cheap[2] = {0.0, 0.01};
    c.start = cheap;
    nd[0] = nd[1] = 0, rows = 2, drows = 0;
    srv_best_drafts(&c, 2, p, cap, fixed, nd, &rows, &drows);
    CHECK(nd[0] > 0 && nd[1] > 0);          /* a small price does not stop it */
}

TEST_MAIN()
