/*
 * test_hybrid.c — the hybrid drafter's choice (src/spec/draft_hybrid.c), driven through the
 * drafter interface with a scripted inner drafter instead of a DFlash model: an oracle that
 * drafts the true continuation but takes SLOW_MS a forward, against a lookup that is right for
 * a few tokens. Weighing tokens, DFlash's longer drafts win; weighing time (a timed request),
 * the lookup's free drafts do; a slow DFlash that accepts nothing gives way to plain steps but
 * for re-checks. Losslessness of the hybrid inside the loop is in test_spec.c.
 */
#include "spec/drafter.h"
#include "spex.h"
#include "test.h"

#include <string.h>
#include <time.h>

enum { N_MAX = 8, STEPS = 60, LEN = STEPS * (N_MAX + 1) + 64, SLOW_MS = 2 };

/* The text the "target" writes: a period-3 pattern broken every 5th position, so a lookup on
 * the last token is right for a few tokens at a time. */
static bool g_unique;   /* the truth never repeats (no lookup draft) and the oracle is always wrong */
static int32_t truth(int32_t i) { return g_unique ? 100 + i : i % 5 == 4 ? 10 + (i / 5) % 7 : i % 3; }

typedef struct oracle {
    spec_drafter base;
    int n_calls;
} oracle;

static spex_status or_draft(spec_drafter *d, const spec_draft_req *reqs, int32_t n, spex_draft *out,
                            uint64_t *n_batches, spex_error *err) {
    (void)err;
    ((oracle *)d)->n_calls++;
    (*n_batches)++;
    struct timespec ts = {0, SLOW_MS * 1000000L};
    nanosleep(&ts, NULL);
    for (int32_t i = 0; i < n; i++) {
        out[i].n = reqs[i].n_max;
        out[i].has_q = false;
        for (int32_t j = 0; j < out[i].n; j++)
            out[i].ids[j] = g_unique ? 1 : truth(reqs[i].pos + 1 + j), out[i].conf[j] = 0.9f;
    }
    return SPEX_OK;
}
static spex_status or_wrote(spec_drafter *d, int32_t seq, const int32_t *toks, int32_t r0, int32_t n, int32_t pos0,
                            bool idle, spex_error *err) {
    (void)d, (void)seq, (void)toks, (void)r0, (void)n, (void)pos0, (void)idle, (void)err;
    return SPEX_OK;
}
static spex_status or_commit(spec_drafter *d, spex_error *err) { (void)d, (void)err; return SPEX_OK; }
static bool or_can_keep(const spec_drafter *d, int32_t seq, int32_t k, int32_t len) {
    (void)d, (void)seq;
    return k <= len;
}
static spex_status or_keep(spec_drafter *d, int32_t seq, int32_t k, spex_error *err) {
    (void)d, (void)seq, (void)k, (void)err;
    return SPEX_OK;
}
static int32_t or_have(const spec_drafter *d, int32_t seq) { (void)d, (void)seq; return -1; }
static void or_seq_end(spec_drafter *d, int32_t seq) { (void)d, (void)seq; }
static void or_free(spec_drafter *d) { (void)d; }

static const spec_drafter_ops ORACLE_OPS = {
    .name = "oracle", .draft = or_draft, .wrote = or_wrote, .commit = or_commit, .can_keep = or_can_keep,
    .keep = or_keep, .have = or_have, .seq_end = or_seq_end, .free = or_free,
};

/* Runs STEPS steps of one sequence as the loop would at T = 0 (accept the draft's prefix that
 * matches the truth, then the target's own token): *dflash counts the steps that drafted with
 * DFlash, *lookup those that took a lookup draft. */
static void run_steps(bool timed, int *dflash, int *lookup) {
    oracle o = {.base = {.ops = &ORACLE_OPS, .n_max_default = N_MAX, .n_max_limit = N_MAX, .block_size = N_MAX + 1}};
    spex_ngram_params ng = spex_ngram_default_params();
    ng.size_n = 1;
    spec_drafter *h = NULL;
    spex_error e = {0};
    CHECK_OK(spec_drafter_hybrid(&o.base, 1, &ng, &h, &e));
    static int32_t hist[LEN];
    int32_t pos = 12;   /* a prompt of the truth's first 12 tokens; the anchor at pos */
    for (int32_t i = 0; i < pos; i++) hist[i] = truth(i);
    int32_t anchor = truth(pos);
    uint64_t nb = 0;
    *lookup = *dflash = 0;
    for (int s = 0; s < STEPS; s++) {
        spec_draft_req r = {.seq = 0, .anchor = anchor, .pos = pos, .n_max = N_MAX, .hist = hist, .timed = timed};
        spex_draft d;
        const int before = o.n_calls;
        CHECK_OK(h->ops->draft(h, &r, 1, &d, &nb, &e));
        if (o.n_calls == before && d.n > 0) (*lookup)++;
        int32_t m = 0;
        while (m < d.n && d.ids[m] == truth(pos + 1 + m)) m++;
        int32_t toks[N_MAX + 1];
        toks[0] = anchor;
        for (int32_t j = 0; j < m; j++) toks[1 + j] = d.ids[j];
        CHECK_OK(h->ops->wrote(h, 0, toks, 0, m + 1, pos, false, &e));
        CHECK_OK(h->ops->commit(h, &e));
        for (int32_t j = 0; j <= m; j++) hist[pos + j] = toks[j];
        pos += m + 1;
        anchor = truth(pos);
    }
    h->ops->free(h);
    *dflash = o.n_calls;
}

TEST(hybrid_weighs_tokens_untimed) {
    int dflash = 0, lookup = 0;
    run_steps(false, &dflash, &lookup);
    printf("  untimed: %d DFlash steps, %d lookup steps of %d\n", dflash, lookup, STEPS);
    CHECK_MSG(dflash >= STEPS - 5, "the oracle's 8-token drafts should win on tokens");
}

TEST(hybrid_weighs_time_when_timed) {
    int dflash = 0, lookup = 0;
    run_steps(true, &dflash, &lookup);
    printf("  timed: %d DFlash steps, %d lookup steps of %d\n", dflash, lookup, STEPS);
    CHECK_MSG(lookup >= STEPS - 10 && dflash <= 10,
              "a %d ms forward against a ~0 ms verify: the free lookup should win on time", SLOW_MS);
}

TEST(hybrid_plain_when_dflash_loses_on_time) {
    g_unique = true;
    int dflash = 0, lookup = 0;
    run_steps(true, &dflash, &lookup);
    g_unique = false;
    printf("  no lookup, wrong oracle: %d DFlash steps, %d lookup steps of %d\n", dflash, lookup, STEPS);
    CHECK_EQ_INT(lookup, 0);
    CHECK_MSG(dflash >= 2 && dflash <= 2 + STEPS / 16,
              "a slow DFlash that accepts nothing should draft only to re-check, 1 step in 16");
}

TEST_MAIN()
