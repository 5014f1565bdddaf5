/*
 * test_default_models.c — the shipped pair in models/ (issue 5): the trained qwen3 target and
 * its DFlash2 drafter.
 *
 * What it checks:
 *  - acceptance: greedy speculative decoding of a fixed held-out problem set
 *    (tests/data/default/heldout.jsonl, problems the models never saw in training) keeps a
 *    mean acceptance length >= 3.5 with block 8 (the CI floor; the must-show target is
 *    4.0), and every speculative text equals the target-only text token for token;
 *  - the PyTorch goldens (tests/data/default/ goldens, written by tools/train/golden_*.py
 *    from the shipped weights): target logits at the last positions of two prompts and the
 *    greedy continuations, and the drafter's top-K candidates and greedy walk on a context.
 * Skips (with a message) when models/ is absent.
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "test.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>

#define TARGET "models/target.gguf"
#define DRAFTER "models/drafter.gguf"
#define HELDOUT "tests/data/default/heldout.jsonl"
#define N_GEN 160
#define MIN_MEAN_LEN 3.5

static bool have_models(void) { return access(TARGET, R_OK) == 0 && access(DRAFTER, R_OK) == 0; }

typedef struct problem {
    char system[512], user[2048];
} problem;

static int load_problems(problem *p, int cap) {
    FILE *f = fopen(HELDOUT, "rb");
    if (!f) return -1;
    static char line[1 << 16];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "user");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "system");
        if (cJSON_IsString(u)) {
            snprintf(p[n].user, sizeof p[n].user, "%s", u->valuestring);
            snprintf(p[n].system, sizeof p[n].system, "%s", cJSON_IsString(s) ? s->valuestring : "");
            n++;
        }
        cJSON_Delete(j);
    }
    fclose(f);
    return n;
}

static int render(const spex_tokenizer *tok, const problem *p, int32_t *ids, int cap) {
    spex_chat_msg msgs[2];
    size_t n = 0;
    if (p->system[0]) msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_SYSTEM, .content = p->system};
    msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_USER, .content = p->user};
    static char text[1 << 14];
    size_t len = 0;
    if (spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, msgs, n, true, true, text, sizeof text, &len, NULL) != SPEX_OK)
        return -1;
    int k = 0;
    if (spex_tokenize(tok, text, len, true, true, ids, cap, &k, NULL) != SPEX_OK) return -1;
    return k;
}

/* Generates until EOG or N_GEN with spec (target-only when it has no drafter). */
static int generate(spex_spec *s, const spex_tokenizer *tok, const int32_t *ids, int np, spex_sampler *smp,
                    int32_t *out) {
    spex_error e = {0};
    spex_sampler_reset(smp);
    int32_t first;
    if (spex_spec_seq_begin(s, 0, ids, np, smp, &first, &e) != SPEX_OK) {
        printf("  begin: %s\n", e.msg);
        return -1;
    }
    spex_spec_out so = {.n = 1, .tokens = {first}};
    int n = 0;
    for (;;) {
        bool eog = false;
        for (int k = 0; k < so.n && n < N_GEN && !eog; k++) {
            eog = spex_token_is_eog(tok, so.tokens[k]);
            if (!eog) out[n++] = so.tokens[k];
        }
        if (eog || n >= N_GEN) break;
        int32_t seq = 0, budget = N_GEN - n;
        if (spex_spec_step(s, &seq, 1, &budget, &so, &e) != SPEX_OK) {
            printf("  step: %s\n", e.msg);
            return -1;
        }
    }
    return n;
}

TEST(heldout_acceptance_and_identity) {
    if (!have_models()) SKIP("models/ not present");
    static problem probs[32];
    int n_probs = load_problems(probs, 32);
    if (n_probs <= 0) SKIP("%s missing", HELDOUT);
    spex_error e = {0};
    spex_model *m = NULL;
    spex_tokenizer *tok = NULL;
    spex_drafter *d = NULL;
    CHECK_OK(spex_model_load(TARGET, NULL, &m, &e));
    CHECK_OK(spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &e));
    CHECK_OK(spex_drafter_load(DRAFTER, m, NULL, &d, &e));
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
    CHECK_EQ_INT(dh->variant, SPEX_DFLASH2);
    CHECK_EQ_INT(dh->block_size, 8);

    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 1024;
    cp.n_outputs_max = 8;
    cp.n_threads = 2;
    cp.tap_layers = dh->target_layers;
    cp.n_taps = dh->n_taps;
    spex_context *ctx = NULL, *plain_ctx = NULL;
    CHECK_OK(spex_context_init(m, &cp, &ctx, &e));
    spex_context_params cp0 = cp;
    cp0.n_taps = 0;
    cp0.tap_layers = NULL;
    cp0.pool = spex_context_pool(ctx);
    CHECK_OK(spex_context_init(m, &cp0, &plain_ctx, &e));
    spex_draft_context_params dp = spex_draft_context_default_params();
    dp.n_ctx_per_seq = 1024;
    dp.pool = spex_context_pool(ctx);
    spex_draft_context *dc = NULL;
    CHECK_OK(spex_draft_context_init(d, &dp, &dc, &e));
    spex_spec *spec = NULL, *plain = NULL;
    CHECK_OK(spex_spec_init(ctx, dc, NULL, &spec, &e));
    CHECK_OK(spex_spec_init(plain_ctx, NULL, NULL, &plain, &e));
    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = 0.0f;
    spex_sampler *smp = NULL;
    CHECK_OK(spex_sampler_init(&sp, spex_model_get_hparams(m)->n_vocab, &smp, &e));

    uint64_t steps = 0, accepted = 0;
    int identical = 0;
    static int32_t ids[2048], ref[N_GEN], got[N_GEN];
    for (int i = 0; i < n_probs; i++) {
        int np = render(tok, &probs[i], ids, 2048);
        CHECK(np > 0);
        int n0 = generate(plain, tok, ids, np, smp, ref);
        int n1 = generate(spec, tok, ids, np, smp, got);
        CHECK(n0 >= 0 && n1 >= 0);
        identical += n0 == n1 && !memcmp(ref, got, sizeof(int32_t) * (size_t)n0);
        const spex_spec_stats *st = spex_spec_seq_stats(spec, 0);
        steps += st->n_steps;
        accepted += st->n_accepted;
    }
    double mean_len = steps ? 1.0 + (double)accepted / (double)steps : 0;
    printf("  %d held-out problems: mean acceptance length %.3f (%llu steps, %llu accepted), %d/%d identical\n",
           n_probs, mean_len, (unsigned long long)steps, (unsigned long long)accepted, identical, n_probs);
    spex_sampler_free(smp);
    spex_spec_free(spec);
    spex_spec_free(plain);
    spex_draft_context_free(dc);
    spex_context_free(plain_ctx);
    spex_context_free(ctx);
    spex_drafter_free(d);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    CHECK_EQ_INT(identical, n_probs);
    CHECK_MSG(mean_len >= MIN_MEAN_LEN, "mean acceptance length %.3f < %.1f", mean_len, MIN_MEAN_LEN);
}

/* The PyTorch golden of the target (tools/train/golden_target.py: float64 on the dequantized
 * shipped weights). spex quantizes activations to Q8_0 inside its matmuls, which the reference
 * does not, so logits differ by ~0.3 % of their range (bound below: 1 % + 0.02); greedy ids
 * must agree at every step up to the first whose top-1 / top-2 margin is below 0.2. */
TEST(target_matches_pytorch_golden) {
    const char *gpath = "tests/data/default/target.golden.gguf";
    if (access(TARGET, R_OK) != 0 || access(gpath, R_OK) != 0) SKIP("%s or %s not present", TARGET, gpath);
    spex_error e = {0};
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open(gpath, &g, &e));
    spex_model *m = NULL;
    CHECK_OK(spex_model_load(TARGET, NULL, &m, &e));
    const int V = spex_model_get_hparams(m)->n_vocab;
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 512;
    cp.n_outputs_max = 64;
    cp.kv_type = SPEX_TYPE_F32;
    cp.n_threads = 2;
    spex_context *c = NULL;
    CHECK_OK(spex_context_init(m, &cp, &c, &e));
    uint32_t n_prompts = 0;
    CHECK_OK(spex_gguf_get_u32(g, "golden.n_prompts", &n_prompts, &e));
    double worst = 0, absmax = 0;
    int greedy_checked = 0;
    bool ok = true;
    for (uint32_t i = 0; i < n_prompts && ok; i++) {
        char key[64];
        spex_gguf_value pv, gv;
        snprintf(key, sizeof key, "golden.prompt.%u", i);
        CHECK(spex_gguf_get_arr(g, key, &pv, NULL) == SPEX_OK && pv.n >= 4 && pv.n <= 400);
        snprintf(key, sizeof key, "golden.greedy.%u", i);
        CHECK(spex_gguf_get_arr(g, key, &gv, NULL) == SPEX_OK && gv.n >= 1 && gv.n <= 64);
        snprintf(key, sizeof key, "logits.%u", i);
        const spex_tensor_info *lt = spex_gguf_find_tensor(g, key);
        snprintf(key, sizeof key, "margin.%u", i);
        const spex_tensor_info *mt = spex_gguf_find_tensor(g, key);
        CHECK(lt && lt->type == SPEX_TYPE_F32 && lt->ne[0] == V && lt->ne[1] == 4);
        CHECK(mt && mt->type == SPEX_TYPE_F32 && mt->ne[0] == (int64_t)gv.n);
        int np = (int)pv.n, ng = (int)gv.n;
        static int32_t prompt[400], greedy[64];
        memcpy(prompt, pv.data, sizeof(int32_t) * (size_t)np);
        memcpy(greedy, gv.data, sizeof(int32_t) * (size_t)ng);
        const float *ref = lt->data, *margin = mt->data;
        CHECK_OK(spex_kv_seq_clear(c, 0, &e));
        spex_batch_token bt[400];
        for (int p = 0; p < np; p++) bt[p] = (spex_batch_token){prompt[p], p, 0, p >= np - 4};
        CHECK_OK(spex_forward(c, &(spex_batch){bt, np}, &e));
        for (int r = 0; r < 4; r++) {
            const float *row = spex_logits(c, r);
            for (int v = 0; v < V; v++) {
                double d = fabs((double)row[v] - (double)ref[(size_t)r * V + v]);
                if (d > worst) worst = d;
                if (fabs((double)ref[(size_t)r * V + v]) > absmax) absmax = fabs((double)ref[(size_t)r * V + v]);
            }
        }
        /* Greedy continuation, one token per forward. */
        int32_t prev = -1;
        for (int k = 0; k < ng; k++) {
            const float *row = spex_logits(c, k == 0 ? 3 : 0);
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            if (margin[k] < 0.2f) break;   /* a close call (> 2x the measured logit error): stop here */
            if (best != greedy[k]) {
                printf("  prompt %u step %d: spex %d, golden %d (margin %.3f)\n", i, k, best, greedy[k],
                       (double)margin[k]);
                ok = false;
                break;
            }
            greedy_checked++;
            prev = best;
            spex_batch_token one = {prev, np + k, 0, true};
            CHECK_OK(spex_forward(c, &(spex_batch){&one, 1}, &e));
        }
    }
    printf("  logits: max |spex - pytorch| %.4f (largest |logit| %.2f); %d greedy steps equal\n", worst, absmax,
           greedy_checked);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(g);
    CHECK(ok);
    /* Measured 0.085 with |logit| <= 24.8 (0.34 %); the bound allows 3x that. */
    CHECK_MSG(worst <= 0.01 * absmax + 0.02, "logits differ by %.4f (bound %.4f)", worst, 0.01 * absmax + 0.02);
    CHECK(greedy_checked >= 16);
}

/* The PyTorch golden of the drafter (tools/train/golden_drafter.py, float64 on the shipped
 * weights): after each held-out prompt, spex's first block (n = 7) must have the same top-K
 * candidate set per slot and the same greedy walk, and U within a tolerance below the golden's
 * smallest decision margin (the top-K boundary and the walk's argmax). */
TEST(drafter_matches_pytorch_golden) {
    const char *gpath = "tests/data/default/drafter.golden.gguf";
    if (!have_models() || access(gpath, R_OK) != 0) SKIP("models/ or %s not present", gpath);
    spex_error e = {0};
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open(gpath, &g, &e));
    spex_model *m = NULL;
    spex_drafter *d = NULL;
    CHECK_OK(spex_model_load(TARGET, NULL, &m, &e));
    CHECK_OK(spex_drafter_load(DRAFTER, m, NULL, &d, &e));
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
    const spex_tensor_info *fc = spex_gguf_find_tensor(spex_drafter_gguf(d), "fc.weight");
    const double slack = fc && fc->type != SPEX_TYPE_F32 ? 0.20 : 0.05; /* see the end */
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 512;
    cp.kv_type = SPEX_TYPE_F32;
    cp.n_threads = 2;
    cp.tap_layers = dh->target_layers;
    cp.n_taps = dh->n_taps;
    spex_context *c = NULL;
    CHECK_OK(spex_context_init(m, &cp, &c, &e));
    spex_draft_context_params dp = spex_draft_context_default_params();
    dp.n_ctx_per_seq = 512;
    dp.kv_type = SPEX_TYPE_F32;
    dp.pool = spex_context_pool(c);
    spex_draft_context *dc = NULL;
    CHECK_OK(spex_draft_context_init(d, &dp, &dc, &e));
    uint32_t n_cases = 0;
    float min_margin = 0;
    CHECK_OK(spex_gguf_get_u32(g, "golden.n_cases", &n_cases, &e));
    CHECK_OK(spex_gguf_get_f32(g, "golden.min_margin", &min_margin, &e));
    const int K = dh->selector_top_k;
    double worst = 0;
    bool ok = n_cases >= 1;
    for (uint32_t ci = 0; ci < n_cases && ok; ci++) {
        char key[80];
        spex_gguf_value pv, cv, gv;
        int64_t anchor = -1, P = -1, n = -1;
        snprintf(key, sizeof key, "golden.case%u.prompt", ci);
        CHECK(spex_gguf_get_arr(g, key, &pv, NULL) == SPEX_OK && pv.n >= 1 && pv.n <= 400);
        snprintf(key, sizeof key, "golden.case%u.anchor", ci);
        CHECK_OK(spex_gguf_get_i64(g, key, &anchor, &e));
        snprintf(key, sizeof key, "golden.case%u.P", ci);
        CHECK_OK(spex_gguf_get_i64(g, key, &P, &e));
        snprintf(key, sizeof key, "golden.case%u.n", ci);
        CHECK_OK(spex_gguf_get_i64(g, key, &n, &e));
        CHECK(P == (int64_t)pv.n && n >= 1 && n <= 7);
        snprintf(key, sizeof key, "golden.case%u.C", ci);
        CHECK(K <= SPEX_DRAFT_MAX_K && spex_gguf_get_arr(g, key, &cv, NULL) == SPEX_OK && cv.n == (uint64_t)(n * K));
        snprintf(key, sizeof key, "golden.case%u.greedy.ids", ci);
        CHECK(spex_gguf_get_arr(g, key, &gv, NULL) == SPEX_OK && gv.n == (uint64_t)n);
        snprintf(key, sizeof key, "case%u.U", ci);
        const spex_tensor_info *ut = spex_gguf_find_tensor(g, key);
        CHECK(ut && ut->type == SPEX_TYPE_F32 && ut->ne[0] == K && ut->ne[1] == n);
        /* GGUF metadata arrays are not aligned in the file: copy them out. */
        static int32_t prompt[400], C[7 * SPEX_DRAFT_MAX_K], gids[7];
        memcpy(prompt, pv.data, sizeof(int32_t) * (size_t)pv.n);
        memcpy(C, cv.data, sizeof(int32_t) * (size_t)cv.n);
        memcpy(gids, gv.data, sizeof(int32_t) * (size_t)gv.n);
        const float *U = ut->data;

        CHECK_OK(spex_kv_seq_clear(c, 0, &e));
        CHECK_OK(spex_draft_kv_seq_clear(dc, 0, &e));
        static spex_batch_token bt[400];
        static int32_t seqv[400], posv[400];
        for (int p = 0; p < (int)P; p++) {
            bt[p] = (spex_batch_token){prompt[p], p, 0, p == P - 1};
            seqv[p] = 0, posv[p] = p;
        }
        CHECK_OK(spex_forward(c, &(spex_batch){bt, (int32_t)P}, &e));
        const float *row = spex_logits(c, 0);
        int best = 0;
        for (int v = 1; v < dh->n_vocab; v++)
            if (row[v] > row[best]) best = v;
        CHECK_EQ_INT(best, anchor);
        CHECK_OK(spex_draft_inject(dc, spex_taps(c), (int64_t)dh->n_taps * dh->n_embd, seqv, posv, (int32_t)P, &e));
        spex_draft_block blk = {.seq = 0, .anchor = (int32_t)anchor, .n = (int32_t)n};
        CHECK_OK(spex_draft_forward(dc, &blk, 1, &e));
        for (int p = 1; p <= n && ok; p++) {
            const int32_t *ids;
            const float *u;
            CHECK_EQ_INT(spex_draft_candidates(dc, 0, p, &ids, &u), K);
            /* The same K candidates (the set: neighbours closer than spex's error may swap
             * places inside it, which only matters for exact ties), with the same U per id. */
            for (int k = 0; k < K; k++) {
                int j = 0;
                while (j < K && C[(p - 1) * K + j] != ids[k]) j++;
                if (j == K) {
                    printf("  case %u slot %d: spex candidate %d not in the golden's top-%d\n", ci, p, ids[k], K);
                    ok = false;
                    break;
                }
                double du = fabs((double)u[k] - (double)U[(p - 1) * K + j]);
                if (du > worst) worst = du;
            }
        }
        spex_draft dr;
        CHECK_OK(spex_draft_walk(dc, 0, 0.0f, 0.0f, NULL, &dr, &e));
        CHECK_EQ_INT(dr.n, n);
        for (int p = 0; p < n && ok; p++)
            if (dr.ids[p] != gids[p]) {
                printf("  case %u: walk slot %d spex %d, golden %d\n", ci, p + 1, dr.ids[p], gids[p]);
                ok = false;
            }
    }
    printf("  %u cases: candidates and greedy walks equal; max |U - golden| %.2e (smallest margin %.3f)\n",
           n_cases, worst, (double)min_margin);
    spex_draft_context_free(dc);
    spex_context_free(c);
    spex_drafter_free(d);
    spex_model_free(m);
    spex_gguf_close(g);
    CHECK(ok);
    /* spex quantizes the target's activations to Q8_0 (the features, the head): measured 0.051
     * with an F32 drafter. A quantized drafter (the shipped one is Q8_0) also rounds its own
     * activations to Q8_0 at each of its matmuls, which the golden (float64 on its dequantized
     * weights) does not: measured 0.151. The candidate sets and walks above are the exact part. */
    CHECK_MSG(worst < 0.25 * min_margin + slack, "U differs by %.3g (bound %.3g)", worst, 0.25 * min_margin + slack);
}

TEST_MAIN()
