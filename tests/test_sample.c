/*
 * test_sample.c — the sampler (src/sample/sampler.c): each stage on small hand-built
 * vocabularies with exact expected survivors and renormalised probabilities, the chain order,
 * penalties, greedy ties, seeded determinism, sample() against dist() (chi-square), and a
 * 152k-entry row.
 *
 * Bounds: probabilities within 1e-6 of softmax computed here in double (the sampler uses
 * expf and a double sum); the chi-square statistic of 20000 draws below the 0.999 quantile of
 * its degrees of freedom (the seed is fixed, so the outcome is deterministic).
 */
#include "spex.h"
#include "test.h"
#include "core/rng.h"
#include "sample/api.h"

#include <time.h>

#define N(a) (int32_t)(sizeof(a) / sizeof((a)[0]))

/* Params with every truncation off, temperature 1 and the llama.cpp order. */
static spex_sampler_params plain_params(void) {
    spex_sampler_params p = spex_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static spex_sampler *make(const spex_sampler_params *p, int32_t V) {
    spex_sampler *s = NULL;
    spex_error e = {0};
    if (spex_sampler_init(p, V, &s, &e) != SPEX_OK) printf("  init: %s\n", e.msg);
    return s;
}

static spex_token_prob g_dist[4096];

/* dist() into g_dist; returns the count or -1. */
static int32_t dist_of(spex_sampler *s, const float *logits) {
    int32_t n = 0;
    spex_error e = {0};
    if (spex_sampler_dist(s, logits, g_dist, N(g_dist), &n, &e) != SPEX_OK) {
        printf("  dist: %s\n", e.msg);
        return -1;
    }
    return n;
}

static float prob_of(const spex_token_prob *d, int32_t n, int32_t id) {
    for (int32_t i = 0; i < n; i++)
        if (d[i].id == id) return d[i].p;
    return -1.0f;   /* absent */
}

/* Checks that d[0..n) holds exactly ids[0..k) with softmax(logits[ids]) (in double).
 * Returns 1 if so, printing the first difference otherwise. */
static int dist_is(const spex_token_prob *d, int32_t n, const int32_t *ids, const double *lg, int32_t k) {
    if (n != k) {
        printf("  dist has %d entries, want %d\n", n, k);
        return 0;
    }
    double mx = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < k; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int32_t i = 0; i < k; i++) sum += exp(lg[i] - mx);
    double tot = 0.0;
    for (int32_t i = 0; i < k; i++) {
        float got = prob_of(d, n, ids[i]);
        double want = exp(lg[i] - mx) / sum;
        if (got < 0.0f || fabs(got - want) > 1e-6) {
            printf("  id %d: p %.9g, want %.9g\n", ids[i], (double)got, want);
            return 0;
        }
        tot += got;
    }
    if (fabs(tot - 1.0) > 1e-6) {
        printf("  probabilities sum to %.9g\n", tot);
        return 0;
    }
    return 1;
}

/* ---- greedy ----------------------------------------------------------------------------- */

TEST(greedy_argmax_first_on_ties) {
    spex_sampler_params p = spex_sampler_default_params();
    p.temp = 0.0f;
    float lg[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, NAN};
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    int32_t tok = -1;
    spex_status st = spex_sampler_sample(s, lg, &tok, NULL);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    CHECK_EQ_INT(st, SPEX_OK);
    CHECK_EQ_INT(tok, 1);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(g_dist[0].id, 1);
    CHECK(g_dist[0].p == 1.0f);
}

TEST(greedy_sees_penalties) {
    spex_sampler_params p = spex_sampler_default_params();
    p.temp = -1.0f;
    p.repeat_penalty = 1.1f;
    float lg[] = {3.0f, 2.9f, 1.0f};
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    int32_t a = -1, b = -1;
    spex_sampler_sample(s, lg, &a, NULL);
    spex_sampler_accept(s, 0);   /* 3.0 / 1.1 = 2.73 < 2.9 */
    spex_sampler_sample(s, lg, &b, NULL);
    spex_sampler_free(s);
    CHECK_EQ_INT(a, 0);
    CHECK_EQ_INT(b, 1);
}

/* ---- each stage ------------------------------------------------------------------------- */

TEST(top_k_exact) {
    spex_sampler_params p = plain_params();
    p.top_k = 3;
    /* 1.5 appears at ids 3 and 6: the lower id survives. */
    float lg[] = {0.1f, 2.0f, -1.0f, 1.5f, 2.0f, 0.3f, 1.5f, -3.0f};
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    int32_t ids[] = {1, 4, 3};
    double want[] = {2.0, 2.0, 1.5};
    CHECK(dist_is(g_dist, n, ids, want, 3));
    /* Sorted descending when top-k cut the list. */
    CHECK(g_dist[0].id == 1 && g_dist[1].id == 4 && g_dist[2].id == 3);
}

TEST(top_p_exact) {
    /* p = {0.5, 0.2, 0.15, 0.1, 0.05} scattered over ids; cumulative 0.5, 0.7, 0.85, ... */
    const int32_t id_of[] = {3, 0, 4, 1, 2};
    const double pr[] = {0.5, 0.2, 0.15, 0.1, 0.05};
    float lg[5];
    for (int i = 0; i < 5; i++) lg[id_of[i]] = (float)log(pr[i]);
    spex_sampler_params p = plain_params();
    struct { float top_p; int32_t k; } cases[] = {{0.8f, 3}, {0.71f, 3}, {0.69f, 2}, {0.45f, 1}, {0.0f, 1}, {0.999f, 5}};
    for (int c = 0; c < N(cases); c++) {
        p.top_p = cases[c].top_p;
        spex_sampler *s = make(&p, 5);
        CHECK(s);
        int32_t n = dist_of(s, lg);
        spex_sampler_free(s);
        double want[5];
        for (int i = 0; i < cases[c].k; i++) want[i] = lg[id_of[i]];
        CHECK_MSG(dist_is(g_dist, n, id_of, want, cases[c].k), "top_p %g", (double)cases[c].top_p);
    }
    /* After top_k 4 top_p sees the renormalised {.5, .2, .15, .1} / .95: cumulative .526, .737,
     * so top_p .72 keeps 2 (it keeps 3 without top_k, as above for .71). */
    p.top_k = 4;
    p.top_p = 0.72f;
    spex_sampler *s = make(&p, 5);
    CHECK(s);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    double want[] = {lg[id_of[0]], lg[id_of[1]]};
    CHECK(dist_is(g_dist, n, id_of, want, 2));
}

TEST(min_p_exact) {
    /* p_max = 0.4, min_p 0.25 -> keep p >= 0.1: drops 0.09 and 0.01. */
    float lg[] = {(float)log(0.4), (float)log(0.3), (float)log(0.09), (float)log(0.2), (float)log(0.01)};
    spex_sampler_params p = plain_params();
    p.min_p = 0.25f;
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    int32_t ids[] = {0, 1, 3};
    double want[] = {lg[0], lg[1], lg[3]};
    CHECK(dist_is(g_dist, n, ids, want, 3));
    CHECK_NEAR(prob_of(g_dist, n, 0), 0.4 / 0.9, 1e-6);
}

TEST(temperature_scales) {
    float lg[] = {1.0f, 2.0f, 3.0f, 0.0f};
    int32_t ids[] = {0, 1, 2, 3};
    float temps[] = {0.5f, 2.0f, 1.0f};
    for (int t = 0; t < 3; t++) {
        spex_sampler_params p = plain_params();
        p.temp = temps[t];
        spex_sampler *s = make(&p, 4);
        CHECK(s);
        int32_t n = dist_of(s, lg);
        spex_sampler_free(s);
        double want[4];
        for (int i = 0; i < 4; i++) want[i] = lg[i] / temps[t];
        CHECK_MSG(dist_is(g_dist, n, ids, want, 4), "temp %g", (double)temps[t]);
    }
}

TEST(penalties_as_llama_cpp) {
    spex_sampler_params p = plain_params();
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = 3;
    float lg[] = {4.0f, -1.0f, 2.0f, 0.5f, 3.0f, 1.0f};
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    /* History 0 1 1 2 1; the window of 3 is {1, 2, 1}: counts 1 -> 2, 2 -> 1; 0 has left. */
    int32_t hist[] = {0, 1, 1, 2, 1};
    for (int i = 0; i < 5; i++) CHECK_OK(spex_sampler_accept(s, hist[i]));
    int32_t n = dist_of(s, lg);
    int32_t ids[] = {0, 1, 2, 3, 4, 5};
    /* Negative logits are multiplied, positive divided; then count * freq + presence. */
    double want[] = {4.0, -1.0 * 2 - 2 * 0.25 - 0.5, 2.0 / 2 - 0.25 - 0.5, 0.5, 3.0, 1.0};
    int ok1 = dist_is(g_dist, n, ids, want, 6);
    CHECK_EQ_INT(spex_sampler_accept(s, 6), SPEX_ERR_RANGE);
    CHECK_EQ_INT(spex_sampler_accept(s, -1), SPEX_ERR_RANGE);
    /* Reset forgets the history. */
    spex_sampler_reset(s);
    n = dist_of(s, lg);
    double raw[] = {4.0, -1.0, 2.0, 0.5, 3.0, 1.0};
    int ok2 = dist_is(g_dist, n, ids, raw, 6);
    spex_sampler_free(s);
    CHECK(ok1);
    CHECK(ok2);
}

TEST(penalties_window_zero_is_off) {
    spex_sampler_params p = plain_params();
    p.repeat_penalty = 3.0f;
    p.repeat_last_n = 0;
    float lg[] = {1.0f, 2.0f};
    spex_sampler *s = make(&p, 2);
    CHECK(s);
    spex_sampler_accept(s, 1);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    int32_t ids[] = {0, 1};
    double want[] = {1.0, 2.0};
    CHECK(dist_is(g_dist, n, ids, want, 2));
}

/* ---- order ------------------------------------------------------------------------------ */

TEST(order_changes_the_result) {
    /* T = 0.5, top_p = 0.6 on logits {2, 1.5, 1, 0}.
     * llama.cpp order (top_p before temperature): p at T=1 = {.474, .287, .174, .064}: keeps 2,
     * then divides by T: {4, 3} -> {0.731, 0.269}.
     * Reference order (temperature first): p at T=0.5 = {.657, ...}: keeps 1. */
    float lg[] = {2.0f, 1.5f, 1.0f, 0.0f};
    spex_sampler_params p = plain_params();
    p.temp = 0.5f;
    p.top_p = 0.6f;
    spex_sampler *s = make(&p, 4);
    CHECK(s);
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    int32_t ids[] = {0, 1};
    double want[] = {4.0, 3.0};
    CHECK(dist_is(g_dist, n, ids, want, 2));

    CHECK_OK(spex_sampler_parse_stages(SPEX_SAMPLER_ORDER_REFERENCE, &p, NULL));
    s = make(&p, 4);
    CHECK(s);
    n = dist_of(s, lg);
    spex_sampler_free(s);
    CHECK_EQ_INT(n, 1);
    CHECK(g_dist[0].id == 0 && g_dist[0].p == 1.0f);
}

TEST(custom_order_sparse_stages) {
    /* min_p, then top_k on the survivors, then penalties on those, then temperature. */
    float lg[] = {5.0f, 4.9f, 1.0f, 0.5f, 4.8f, -2.0f, 0.0f, 3.0f};
    spex_sampler_params p = plain_params();
    p.min_p = 0.1f;     /* keep logit >= 5 + ln 0.1 = 2.70: {0, 1, 4, 7} */
    p.top_k = 3;        /* {0, 1, 4} */
    p.repeat_penalty = 2.0f;
    p.temp = 0.5f;
    CHECK_OK(spex_sampler_parse_stages("min_p;top_k;penalties;temperature", &p, NULL));
    CHECK_EQ_INT(p.n_stages, 4);
    spex_sampler *s = make(&p, N(lg));
    CHECK(s);
    spex_sampler_accept(s, 0);   /* 5 -> 2.5 */
    spex_sampler_accept(s, 7);   /* penalised too, but already cut */
    int32_t n = dist_of(s, lg);
    spex_sampler_free(s);
    int32_t ids[] = {0, 1, 4};
    double want[] = {2.5 / 0.5, 4.9 / 0.5, 4.8 / 0.5};
    CHECK(dist_is(g_dist, n, ids, want, 3));
}

TEST(params_and_stage_names) {
    spex_sampler_params p = spex_sampler_default_params();
    CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f);
    CHECK(p.repeat_penalty == 1.0f && p.repeat_last_n == 64);
    CHECK(p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f && p.seed == SPEX_SEED_RANDOM);
    CHECK_EQ_INT(p.n_stages, 5);
    CHECK(p.stages[0] == SPEX_SAMPLER_PENALTIES && p.stages[1] == SPEX_SAMPLER_TOP_K &&
          p.stages[2] == SPEX_SAMPLER_TOP_P && p.stages[3] == SPEX_SAMPLER_MIN_P &&
          p.stages[4] == SPEX_SAMPLER_TEMPERATURE);
    /* llama.cpp's full default list: the stages spex lacks are skipped. */
    CHECK_OK(spex_sampler_parse_stages("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature", &p, NULL));
    CHECK_EQ_INT(p.n_stages, 5);
    CHECK_OK(spex_sampler_parse_stages("temp,top-k", &p, NULL));
    CHECK(p.n_stages == 2 && p.stages[0] == SPEX_SAMPLER_TEMPERATURE && p.stages[1] == SPEX_SAMPLER_TOP_K);
    spex_error e = {0};
    CHECK_EQ_INT(spex_sampler_parse_stages("top_k;mirostat", &p, &e), SPEX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "mirostat"));
    CHECK(p.n_stages == 2);   /* unchanged on error */
}

TEST(bad_params_and_inputs) {
    spex_sampler *s = NULL;
    spex_sampler_params p = plain_params();
    spex_error e = {0};
    CHECK_EQ_INT(spex_sampler_init(&p, 0, &s, &e), SPEX_ERR_INVALID_ARG);
    p.min_p = 1.5f;
    CHECK_EQ_INT(spex_sampler_init(&p, 4, &s, &e), SPEX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "min_p"));
    p = plain_params();
    p.repeat_penalty = 0.0f;
    CHECK_EQ_INT(spex_sampler_init(&p, 4, &s, &e), SPEX_ERR_INVALID_ARG);
    p = plain_params();
    p.repeat_last_n = -1;
    CHECK_EQ_INT(spex_sampler_init(&p, 4, &s, &e), SPEX_ERR_INVALID_ARG);
    p = plain_params();
    p.stages[0] = (spex_sampler_stage)42;
    CHECK_EQ_INT(spex_sampler_init(&p, 4, &s, &e), SPEX_ERR_INVALID_ARG);
    CHECK(s == NULL);

    p = plain_params();
    s = make(&p, 4);
    CHECK(s);
    float lg[] = {1.0f, 2.0f, 3.0f, 4.0f};
    spex_token_prob small[2];
    int32_t n = 0;
    spex_status st1 = spex_sampler_dist(s, lg, small, 2, &n, &e);
    int32_t n1 = n;
    float nan4[] = {NAN, NAN, -INFINITY, NAN};
    spex_status st2 = spex_sampler_dist(s, nan4, g_dist, N(g_dist), &n, &e);
    int32_t tok = 7;
    spex_status st3 = spex_sampler_sample(s, nan4, &tok, &e);
    spex_sampler_free(s);
    CHECK_EQ_INT(st1, SPEX_ERR_RANGE);
    CHECK_EQ_INT(n1, 4);
    CHECK_EQ_INT(st2, SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(st3, SPEX_ERR_INVALID_ARG);
}

/* ---- sampling from a distribution and the RNG --------------------------------------------- */

TEST(sample_from_inverse_cdf) {
    spex_token_prob d[] = {{5, 0.25f}, {7, 0.0f}, {9, 0.75f}};
    CHECK_EQ_INT(spex_sampler_sample_from(d, 3, 0.0), 5);
    CHECK_EQ_INT(spex_sampler_sample_from(d, 3, 0.2499), 5);
    CHECK_EQ_INT(spex_sampler_sample_from(d, 3, 0.25), 9);   /* zero-mass 7 is skipped */
    CHECK_EQ_INT(spex_sampler_sample_from(d, 3, 0.9999999999), 9);
    CHECK_EQ_INT(spex_sampler_sample_from(d, 0, 0.5), -1);
    /* Unnormalised input: u scales the actual total. */
    spex_token_prob e[] = {{1, 1.0f}, {2, 3.0f}};
    CHECK_EQ_INT(spex_sampler_sample_from(e, 2, 0.24), 1);
    CHECK_EQ_INT(spex_sampler_sample_from(e, 2, 0.26), 2);
}

TEST(rng_known_values_and_streams) {
    spex_rng r;
    spex_rng_seed(&r, 42);
    /* xoshiro256** over a splitmix64(42) state, computed by an independent Python transcription
     * of the published algorithms (splitmix64(0)'s first output 0xe220a8397b1dcdaf checks it). */
    CHECK(spex_rng_next(&r) == 0x15780b2e0c2ec716ull);
    CHECK(spex_rng_next(&r) == 0x6104d9866d113a7eull);
    CHECK(spex_rng_next(&r) == 0xae17533239e499a1ull);
    double sum = 0.0, mn = 1.0, mx = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = i & 1 ? spex_rng_uniform(&r) : spex_rng_uniform_f64(&r);
        sum += u;
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
    }
    CHECK(mn >= 0.0 && mx < 1.0);
    CHECK_NEAR(sum / 100000, 0.5, 0.005);   /* sd of the mean ~0.0009 */
    spex_rng a, b, c;
    spex_rng_seed_stream(&a, 7, 0);
    spex_rng_seed_stream(&b, 7, 1);
    spex_rng_seed(&c, 7);
    uint64_t xa = spex_rng_next(&a), xb = spex_rng_next(&b), xc = spex_rng_next(&c);
    CHECK(xa != xb && xa != xc && xb != xc);
    spex_rng_seed_stream(&b, 7, 0);
    CHECK(spex_rng_next(&b) == xa);
}

static void fill_logits(float *x, int32_t n, uint64_t seed, float scale) {
    spex_rng r;
    spex_rng_seed(&r, seed);
    for (int32_t i = 0; i < n; i++) {
        /* Box-Muller: roughly normal logits like a real LM head's. */
        double u1 = spex_rng_uniform_f64(&r) + 0x1p-60, u2 = spex_rng_uniform_f64(&r);
        x[i] = (float)(scale * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

TEST(seeded_determinism) {
    float lg[64];
    fill_logits(lg, 64, 5, 2.0f);
    spex_sampler_params p = spex_sampler_default_params();
    p.seed = 1234;
    spex_sampler *a = make(&p, 64), *b = make(&p, 64);
    p.seed = 1235;
    spex_sampler *c = make(&p, 64);
    CHECK(a && b && c);
    int32_t seq[200];
    int same = 1, differs = 0;
    for (int i = 0; i < 200; i++) {
        int32_t ta, tb, tc;
        spex_sampler_sample(a, lg, &ta, NULL);
        spex_sampler_sample(b, lg, &tb, NULL);
        spex_sampler_sample(c, lg, &tc, NULL);
        seq[i] = ta;
        same &= ta == tb;
        differs |= ta != tc;
    }
    spex_sampler_reset(a);   /* reseeds from params.seed */
    int replay = 1;
    for (int i = 0; i < 200; i++) {
        int32_t t;
        spex_sampler_sample(a, lg, &t, NULL);
        replay &= t == seq[i];
    }
    spex_sampler_free(a);
    spex_sampler_free(b);
    spex_sampler_free(c);
    CHECK(same);
    CHECK(differs);
    CHECK(replay);
}

/* 0.999 quantiles of chi-square with df = 1 .. 15. */
static const double chi2_999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12,
                                  27.88, 29.59, 31.26, 32.91, 34.53, 36.12, 37.70};

TEST(sample_frequencies_match_dist) {
    float lg[32];
    fill_logits(lg, 32, 11, 1.5f);
    spex_sampler_params p = spex_sampler_default_params();
    p.temp = 0.7f;
    p.top_k = 12;
    p.top_p = 0.97f;
    p.min_p = 0.02f;
    p.seed = 20240607;
    spex_sampler *s = make(&p, 32);
    CHECK(s);
    int32_t n = dist_of(s, lg);
    CHECK(n >= 2 && n <= 12);
    const int draws = 20000;
    int counts[32] = {0};
    int outside = 0;
    for (int i = 0; i < draws; i++) {
        int32_t t = -1;
        spex_sampler_sample(s, lg, &t, NULL);
        if (t < 0 || t >= 32 || prob_of(g_dist, n, t) <= 0.0f) outside++;
        else counts[t]++;
    }
    spex_sampler_free(s);
    CHECK_EQ_INT(outside, 0);
    double chi2 = 0.0, min_expected = 1e30;
    for (int32_t i = 0; i < n; i++) {
        double ex = draws * (double)g_dist[i].p;
        min_expected = ex < min_expected ? ex : min_expected;
        double d = counts[g_dist[i].id] - ex;
        chi2 += d * d / ex;
    }
    int df = n - 1;
    printf("  info: %d tokens kept, chi2 = %.2f (df %d, bound %.2f), smallest expected count %.0f\n", n, chi2,
           df, chi2_999[df], min_expected);
    CHECK(min_expected >= 5.0);   /* the chi-square approximation holds */
    CHECK_MSG(chi2 < chi2_999[df], "chi2 %.2f >= %.2f", chi2, chi2_999[df]);
}

/* ---- large vocabularies ------------------------------------------------------------------ */

static int cmp_desc(const void *a, const void *b) {
    const spex_token_prob *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

/* The ids a reference top-k (full sort by logit desc, id asc) keeps. */
static float *g_ref_lg;
static int cmp_ref(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_ref_lg[i] != g_ref_lg[j]) return g_ref_lg[i] > g_ref_lg[j] ? -1 : 1;
    return i - j;
}

TEST(top_k_above_heap_limit_and_top_p_growth) {
    /* k > SPEX_TOPK_MAX takes the quickselect path; a flat distribution makes top_p's weighted
     * quickselect cut deep into the row. Both checked against a full sort. Coarse logits make
     * ties (broken by the lower id). */
    enum { V = 6000 };
    float *lg = malloc(V * sizeof *lg);
    int32_t *ord = malloc(V * sizeof *ord);
    spex_token_prob *d = malloc(V * sizeof *d);
    CHECK(lg && ord && d);
    fill_logits(lg, V, 3, 0.5f);
    for (int i = 0; i < V; i++) lg[i] = roundf(lg[i] * 64.0f) / 64.0f;
    for (int i = 0; i < V; i++) ord[i] = i;
    g_ref_lg = lg;
    qsort(ord, V, sizeof *ord, cmp_ref);

    spex_sampler_params p = plain_params();
    p.top_k = 2000;
    spex_sampler *s = make(&p, V);
    int32_t n = 0;
    spex_status st = s ? spex_sampler_dist(s, lg, d, V, &n, NULL) : SPEX_ERR_NOMEM;
    spex_sampler_free(s);
    int ok_k = st == SPEX_OK && n == 2000;
    for (int i = 0; ok_k && i < 2000; i++) ok_k = d[i].id == ord[i];

    /* top_p alone: the kept set is the shortest prefix of the sorted order with mass >= top_p. */
    p = plain_params();
    p.top_p = 0.9f;
    s = make(&p, V);
    st = s ? spex_sampler_dist(s, lg, d, V, &n, NULL) : SPEX_ERR_NOMEM;
    spex_sampler_free(s);
    double mx = lg[ord[0]], sum = 0.0, cum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    int32_t want_n = V;
    for (int i = 0; i < V; i++) {
        cum += exp((double)lg[ord[i]] - mx);
        if (cum >= 0.9 * sum) {
            want_n = i + 1;
            break;
        }
    }
    int ok_p = st == SPEX_OK && n == want_n;
    /* The kept set comes unordered: sort it (p is monotone in the logit, ties by id). */
    if (ok_p) qsort(d, (size_t)n, sizeof *d, cmp_desc);
    for (int i = 0; ok_p && i < n; i++) ok_p = d[i].id == ord[i];
    printf("  info: top_p 0.9 of a flat %d-token row keeps %d (want %d)\n", V, n, want_n);
    free(lg);
    free(ord);
    free(d);
    CHECK(ok_k);
    CHECK(ok_p);
    CHECK(want_n > 1000);   /* a cut deep into the row */
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST(vocab_152k_row) {
    enum { V = 151936 };   /* Qwen3's vocabulary */
    float *lg = malloc(V * sizeof *lg);
    spex_token_prob *d = malloc(V * sizeof *d);
    CHECK(lg && d);
    fill_logits(lg, V, 99, 3.0f);
    int32_t amax = 0;
    for (int32_t i = 1; i < V; i++) amax = lg[i] > lg[amax] ? i : amax;

    struct { const char *name; float temp; int32_t top_k; float top_p, min_p; } cfg[] = {
        {"default (k40 p.95 m.05 t.8)", 0.8f, 40, 0.95f, 0.05f},
        {"top_p .95 + min_p .05", 0.8f, 0, 0.95f, 0.05f},
        {"top_p .95 only", 1.0f, 0, 0.95f, 0.0f},
        {"everything off", 1.0f, 0, 1.0f, 0.0f},
        {"greedy", 0.0f, 40, 0.95f, 0.05f},
    };
    int ok = 1;
    for (int c = 0; c < N(cfg) && ok; c++) {
        spex_sampler_params p = spex_sampler_default_params();
        p.temp = cfg[c].temp;
        p.top_k = cfg[c].top_k;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.seed = 1;
        spex_sampler *s = make(&p, V);
        if (!s) { ok = 0; break; }
        int32_t n = 0, tok = -1;
        double t0 = now_ms();
        const int reps = 5;
        spex_status st = SPEX_OK;
        for (int r = 0; r < reps && st == SPEX_OK; r++) st = spex_sampler_dist(s, lg, d, V, &n, NULL);
        double t1 = now_ms();
        if (st == SPEX_OK) st = spex_sampler_sample(s, lg, &tok, NULL);
        spex_sampler_free(s);
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++) sum += d[i].p;
        qsort(d, (size_t)n, sizeof *d, cmp_desc);
        printf("  info: V=%d %-28s dist %.3f ms, %d tokens, top p %.4f\n", V, cfg[c].name, (t1 - t0) / reps, n,
               n > 0 ? (double)d[0].p : 0.0);
        ok = st == SPEX_OK && n >= 1 && fabs(sum - 1.0) < 1e-5 && d[0].id == amax && tok >= 0;
        if (cfg[c].top_k > 0) ok &= n <= cfg[c].top_k;
        if (cfg[c].temp <= 0.0f) ok &= n == 1 && tok == amax;
        if (cfg[c].top_p >= 1.0f && cfg[c].min_p <= 0.0f && cfg[c].top_k <= 0) ok &= n > V / 2;
        if (!ok) printf("  failed: st %d, n %d, sum %.9g, top id %d (argmax %d)\n", st, n, sum, d[0].id, amax);
    }
    free(lg);
    free(d);
    CHECK(ok);
}

TEST_MAIN()
