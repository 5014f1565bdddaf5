/*
 * test_spec_qwen35.c — speculative decoding on the hybrid qwen35 target (issue 7): greedy
 * output with the MTP drafter, with a synthetic DFlash2 drafter and with an oracle draft
 * function (drafts of varied accepted lengths, so the recurrent-state ring is rolled back by
 * every amount) equals the target alone, 3 sequences stepping together, on the F32 target
 * and a Q8_0 copy; MTP at temperature 0.8 (sample-and-match) equals the target alone with
 * the same seed. Fixtures: tests/data/qwen35/ (tools/ref/make_qwen35_fixtures.py).
 */
#include "spex.h"
#include "quant/api.h"
#include "model/api.h"
#include "test.h"
#include "spec/api.h"

#include <stdint.h>
#include <unistd.h>

#define N_SEQ 3
#define N_GEN 28
#define N_MAX 4

static const int32_t PROMPTS[N_SEQ][12] = {{5, 77, 130, 9, 200, 41, 63, 18, 99, 250, 3, 17},
                                           {120, 8, 33, 71},
                                           {240, 1, 2, 90, 91, 92, 180}};
static const int PLEN[N_SEQ] = {12, 4, 7};

typedef enum { D_NONE, D_ORACLE, D_MTP, D_DFLASH } dkind;

typedef struct oracle {
    const int32_t (*ref)[N_GEN];
    int32_t base[N_SEQ];   /* target length when ref[s][1] is the anchor's successor */
    uint64_t rng;
} oracle;

static spex_status oracle_fn(void *user, int32_t seq, int32_t anchor, int32_t pos, int32_t n_max, spex_draft *out,
                             spex_error *err) {
    (void)anchor;
    (void)err;
    oracle *o = user;
    out->n = 0;
    out->has_q = false;
    /* ref[s][g] is emitted token g; the anchor at pos is token g = pos - PLEN (token 0 follows
     * the prompt's last token at PLEN - 1) */
    const int32_t g = pos - PLEN[seq];
    for (int32_t j = 0; j < n_max && g + 1 + j < N_GEN; j++) {
        int32_t t = o->ref[seq][g + 1 + j];
        o->rng = o->rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((o->rng >> 33) % 4 == 0) t = (t + 1) % 256;   /* a wrong draft: rejected here */
        out->ids[out->n++] = t;
    }
    return SPEX_OK;
}

static bool g_cut;              /* run(): spex_spec_params.draft_cut, one sequence per step */
static uint64_t g_cut_tokens;   /* run(): the total n_cut of its last spec                   */

static bool run(const char *target, dkind kind, float temp, const int32_t (*ref)[N_GEN], int32_t out[N_SEQ][N_GEN],
                double *acc_len) {
    spex_error e = {0};
    spex_model *m = NULL;
    spex_context *ctx = NULL;
    spex_drafter *d = NULL;
    spex_draft_context *dc = NULL;
    spex_mtp_context *mc = NULL;
    spex_spec *s = NULL;
    spex_sampler *smp[N_SEQ] = {0};
    bool ok = false;
    oracle o = {.ref = ref, .rng = 42};
    if (spex_model_load(target, NULL, &m, &e)) goto done;
    const int32_t N = spex_model_get_hparams(m)->n_layer;
    if (kind == D_DFLASH && spex_drafter_load("tests/data/qwen35/tiny-qwen35.dflash2.gguf", m, NULL, &d, &e)) goto done;
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = N_SEQ;
    cp.n_ctx_per_seq = 64;
    cp.n_batch_max = 64;
    cp.n_outputs_max = N_SEQ * (N_MAX + 1);
    cp.n_threads = 2;
    cp.n_rs_seq = kind == D_NONE ? 0 : N_MAX;
    if (kind == D_MTP) cp.tap_layers = &N, cp.n_taps = 1;
    if (kind == D_DFLASH)
        cp.tap_layers = spex_drafter_get_hparams(d)->target_layers, cp.n_taps = spex_drafter_get_hparams(d)->n_taps;
    if (spex_context_init(m, &cp, &ctx, &e)) goto done;
    spex_spec_params sp = spex_spec_default_params();
    sp.n_max = N_MAX;
    sp.draft_cut = g_cut;
    if (kind == D_MTP) {
        spex_mtp_params mp = spex_mtp_default_params();
        mp.n_seq_max = N_SEQ;
        mp.n_ctx_per_seq = 64;
        mp.n_batch_max = 64;
        mp.pool = spex_context_pool(ctx);
        if (spex_mtp_init(m, &mp, &mc, &e) || spex_spec_init_mtp(ctx, mc, &sp, &s, &e)) goto done;
    } else if (kind == D_DFLASH) {
        spex_draft_context_params dp = spex_draft_context_default_params();
        dp.n_seq_max = N_SEQ;
        dp.n_ctx_per_seq = 64;
        dp.pool = spex_context_pool(ctx);
        if (spex_draft_context_init(d, &dp, &dc, &e) || spex_spec_init(ctx, dc, &sp, &s, &e)) goto done;
    } else {
        if (spex_spec_init(ctx, NULL, &sp, &s, &e)) goto done;
        if (kind == D_ORACLE) spex_spec_set_draft_fn(s, oracle_fn, &o);
    }
    int have[N_SEQ];
    unsigned n_steps = 0;
    for (int q = 0; q < N_SEQ; q++) {
        spex_sampler_params p = spex_sampler_default_params();
        p.temp = temp;
        p.seed = 1000 + (uint64_t)q;
        if (spex_sampler_init(&p, spex_model_get_hparams(m)->n_vocab, &smp[q], &e)) goto done;
        if (spex_spec_seq_begin(s, q, PROMPTS[q], PLEN[q], smp[q], &out[q][0], &e)) goto done;
        have[q] = 1;
    }
    for (;;) {
        int32_t seqs[N_SEQ], budget[N_SEQ];
        int k = 0;
        for (int q = 0; q < N_SEQ; q++)
            if (have[q] < N_GEN) seqs[k] = q, budget[k] = N_GEN - have[q], k++;
        if (!k) break;
        if (g_cut) { /* the draft cut acts on steps of one sequence: step them in turn */
            const int r = (int)(n_steps++ % (unsigned)k);
            seqs[0] = seqs[r], budget[0] = budget[r], k = 1;
        }
        spex_spec_out so[N_SEQ];
        if (spex_spec_step(s, seqs, k, budget, so, &e)) goto done;
        for (int i = 0; i < k; i++) {
            memcpy(&out[seqs[i]][have[seqs[i]]], so[i].tokens, sizeof(int32_t) * (size_t)so[i].n);
            have[seqs[i]] += so[i].n;
        }
    }
    *acc_len = spex_spec_stats_mean_len(spex_spec_total_stats(s));
    g_cut_tokens = spex_spec_total_stats(s)->n_cut;
    ok = true;
done:
    if (!ok) printf("  %s kind %d: %s\n", target, (int)kind, e.msg);
    for (int q = 0; q < N_SEQ; q++) spex_sampler_free(smp[q]);
    spex_spec_free(s);
    spex_mtp_free(mc);
    spex_draft_context_free(dc);
    spex_context_free(ctx);
    spex_drafter_free(d);
    spex_model_free(m);
    return ok;
}

static const char *target_path(bool q8) {
    const char *f32 = "tests/data/qwen35/tiny-qwen35.gguf";
    if (access(f32, R_OK)) return NULL;
    if (!q8) return f32;
    const char *q = test_tmp_path("tiny-qwen35-q8_0.gguf");
    if (access(q, R_OK) == 0) return q;
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = SPEX_FTYPE_Q8_0;
    spex_error e = {0};
    if (spex_quantize_file(f32, q, &qp, &e) != SPEX_OK) {
        printf("  quantize: %s\n", e.msg);
        return NULL;
    }
    return q;
}

static void equal_case(bool q8, float temp, dkind kinds[], int nk) {
    const char *t = target_path(q8);
    if (!t) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing (or quantize failed)");
    static int32_t ref[N_SEQ][N_GEN], got[N_SEQ][N_GEN];
    double al;
    CHECK(run(t, D_NONE, temp, NULL, ref, &al));
    static const char *names[] = {"target", "oracle", "mtp", "dflash2"};
    for (int i = 0; i < nk; i++) {
        CHECK(run(t, kinds[i], temp, (const int32_t(*)[N_GEN])ref, got, &al));
        printf("  %s %s T=%.1f: mean acceptance length %.2f\n", q8 ? "q8_0" : "f32", names[kinds[i]], (double)temp, al);
        for (int q = 0; q < N_SEQ; q++)
            for (int g = 0; g < N_GEN; g++)
                CHECK_MSG(got[q][g] == ref[q][g], "%s seq %d token %d: %d, target alone %d", names[kinds[i]], q, g,
                          got[q][g], ref[q][g]);
        if (kinds[i] == D_ORACLE) CHECK(al > 1.5);   /* the oracle is mostly right: rollbacks of every size */
    }
}

/* The draft cut (one sequence per step) with the oracle, the MTP block and the DFlash2
 * drafter: rollbacks of every length on the recurrent state, output still the target's. */
TEST(qwen35_spec_draft_cut) {
    g_cut = true;
    const char *t = target_path(false);
    if (!t) {
        g_cut = false;
        SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    }
    static int32_t ref[N_SEQ][N_GEN], got[N_SEQ][N_GEN];
    double al;
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        g_cut = false;
        CHECK(run(t, D_NONE, temps[ti], NULL, ref, &al));
        g_cut = true;
        const dkind kinds[3] = {D_ORACLE, D_MTP, D_DFLASH};
        for (int i = 0; i < (ti ? 1 : 3); i++) {
            const dkind kd = ti ? D_MTP : kinds[i];
            const bool ran = run(t, kd, temps[ti], (const int32_t(*)[N_GEN])ref, got, &al);
            printf("  T=%.1f kind %d: mean acceptance length %.2f, %llu cut\n", (double)temps[ti], (int)kd, al,
                   (unsigned long long)g_cut_tokens);
            bool same = ran;
            for (int q = 0; same && q < N_SEQ; q++) same = !memcmp(got[q], ref[q], sizeof got[q]);
            const bool cut_some = g_cut_tokens > 0;
            g_cut = false;
            CHECK_MSG(same, "kind %d T=%.1f: output differs from the target alone", (int)kd, (double)temps[ti]);
            CHECK_MSG(cut_some, "kind %d: the cut never removed a token", (int)kd);
            g_cut = true;
        }
    }
    g_cut = false;
}

TEST(qwen35_spec_greedy_f32) { equal_case(false, 0.0f, (dkind[]){D_ORACLE, D_MTP, D_DFLASH}, 3); }
TEST(qwen35_spec_greedy_q8_0) { equal_case(true, 0.0f, (dkind[]){D_ORACLE, D_MTP, D_DFLASH}, 3); }
TEST(qwen35_spec_mtp_sampled) { equal_case(false, 0.8f, (dkind[]){D_MTP}, 1); }

/* A recurrent target without enough state copies is refused with a clear message. */
TEST(qwen35_spec_needs_rs_seq) {
    const char *t = target_path(false);
    if (!t) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_error e = {0};
    spex_model *m = NULL;
    CHECK(spex_model_load(t, NULL, &m, &e) == SPEX_OK);
    const int32_t N = spex_model_get_hparams(m)->n_layer;
    spex_context_params cp = spex_context_default_params();
    cp.tap_layers = &N;
    cp.n_taps = 1;
    cp.n_rs_seq = 2;
    spex_context *ctx = NULL;
    CHECK(spex_context_init(m, &cp, &ctx, &e) == SPEX_OK);
    spex_mtp_context *mc = NULL;
    CHECK(spex_mtp_init(m, NULL, &mc, &e) == SPEX_OK);
    spex_spec_params sp = spex_spec_default_params();
    sp.n_max = 4;
    spex_spec *s = NULL;
    CHECK(spex_spec_init_mtp(ctx, mc, &sp, &s, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(s == NULL && strstr(e.msg, "n_rs_seq"));
    sp.n_max = 2;
    CHECK(spex_spec_init_mtp(ctx, mc, &sp, &s, &e) == SPEX_OK);
    spex_spec_free(s);
    spex_mtp_free(mc);
    spex_context_free(ctx);
    spex_model_free(m);
}

TEST_MAIN()
