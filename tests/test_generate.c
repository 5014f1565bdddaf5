/*
 * test_generate.c — the library's generation loop (spex_spec_generate / spex_session_generate,
 * src/spec/generate.c) on the repo's tiny qwen3 target and its DFlash2 drafter.
 *
 * What it checks: the target alone and DFlash2 give the same tokens and text at T = 0 and the
 * same tokens for one seed at T > 0 on the sample-and-match path; n_predict bounds the output
 * exactly, 0 gives nothing; a callback that returns false stops at once (SPEX_STOP_CALLER);
 * both hand out the same text; a prompt that fills the
 * context gives one token and SPEX_STOP_CONTEXT, a longer one an error; bad arguments are
 * errors; the draft cut and guard follow the fixed-seed rule of spex_gen_params and are put
 * back afterwards. What it is not: the speculative matrix (test_spec) or the CLI (test_run).
 */
#include "test.h"
#include "spex.h"
#include "model/api.h"
#include "spec/api.h"

#define TARGET "tests/data/models/tiny-qwen3.gguf"
#define DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"

typedef struct collected {
    int32_t ids[512];
    int n, calls, stop_after;   /* stop_after > 0: return false at that call */
    char text[8192];
    size_t len;
} collected;

static bool take(void *user, int32_t token, spex_str text) {
    collected *c = user;
    c->calls++;
    if (token >= 0 && c->n < 512) c->ids[c->n++] = token;
    if (text.len && c->len + text.len < sizeof c->text) memcpy(c->text + c->len, text.ptr, text.len), c->len += text.len;
    return !(c->stop_after > 0 && c->calls >= c->stop_after);
}

typedef struct fixture {
    spex_model *m;
    spex_tokenizer *tok;
    spex_session *plain, *spec, *rej;   /* target alone; DFlash2 greedy walk; sampled walk */
    int32_t ids[64];
    int n_ids;
} fixture;

static bool open_fixture(fixture *f, int32_t n_ctx) {
    memset(f, 0, sizeof *f);
    spex_error err = {0};
    if (spex_model_load(TARGET, NULL, &f->m, &err) || spex_tokenizer_load_gguf(spex_model_gguf(f->m), &f->tok, &err))
        return false;
    spex_session_params pp = spex_session_default_params();
    pp.type = SPEX_SPEC_NONE;
    pp.n_ctx_per_seq = n_ctx;
    pp.n_threads = 2;
    if (spex_session_create(f->m, &pp, &f->plain, &err)) return false;
    pp.type = SPEX_SPEC_DFLASH;
    pp.draft_path = DRAFT2;
    pp.guard = true;
    if (spex_session_create(f->m, &pp, &f->rej, &err)) return false;
    pp.draft_greedy = true;   /* T > 0: sample-and-match */
    if (spex_session_create(f->m, &pp, &f->spec, &err)) return false;
    static const char prompt[] = "Once upon a time there was a little";
    return spex_tokenize(f->tok, prompt, sizeof prompt - 1, true, false, f->ids, 64, &f->n_ids, &err) == SPEX_OK;
}

static void close_fixture(fixture *f) {
    spex_session_free(f->spec);
    spex_session_free(f->rej);
    spex_session_free(f->plain);
    spex_tokenizer_free(f->tok);
    spex_model_free(f->m);
}

static spex_status gen(spex_session *s, const fixture *f, const int32_t *ids, int n, spex_gen_params gp,
                       collected *c, spex_gen_result *res, spex_error *err) {
    memset(c, 0, sizeof *c);
    gp.on_token = take;
    gp.user = c;
    return spex_session_generate(s, f->tok, ids, n, &gp, res, err);
}

TEST(speculative_equals_target_alone) {
    fixture f;
    CHECK_MSG(open_fixture(&f, 256), "cannot open %s with %s", TARGET, DRAFT2);
    spex_error err = {0};
    static collected a, b;
    spex_gen_result ra, rb;
    spex_gen_params gp = spex_gen_default_params();
    gp.n_predict = 80;
    CHECK_EQ_INT(gen(f.plain, &f, f.ids, f.n_ids, gp, &a, &ra, &err), SPEX_OK);
    CHECK_EQ_INT(gen(f.spec, &f, f.ids, f.n_ids, gp, &b, &rb, &err), SPEX_OK);
    CHECK_EQ_INT(a.n, ra.n_gen);
    CHECK_EQ_INT(a.n, b.n);
    CHECK(a.n > 0 && memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n) == 0);
    CHECK(a.len > 0 && a.len == b.len && memcmp(a.text, b.text, a.len) == 0);
    CHECK_EQ_INT(ra.stats.n_drafted, 0);
    CHECK(rb.stats.n_drafted > 0);
    CHECK(ra.stop == SPEX_STOP_LENGTH ? a.n == 80 : ra.stop == SPEX_STOP_EOS || ra.stop == SPEX_STOP_EOT);
    /* T > 0, one seed, sample-and-match (greedy walk): the same tokens */
    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = 0.9f;
    sp.seed = 7;
    spex_sampler *s1 = NULL;
    CHECK_OK(spex_sampler_init(&sp, spex_model_get_hparams(f.m)->n_vocab, &s1, &err));
    gp.sampler = s1;
    CHECK_EQ_INT(gen(f.plain, &f, f.ids, f.n_ids, gp, &a, &ra, &err), SPEX_OK);
    CHECK_EQ_INT(gen(f.spec, &f, f.ids, f.n_ids, gp, &b, &rb, &err), SPEX_OK);
    CHECK_EQ_INT(rb.path, SPEX_SPEC_PATH_SAMPLE_MATCH);
    CHECK(a.n == b.n && memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n) == 0);
    spex_sampler_free(s1);
    close_fixture(&f);
}

TEST(bounds_and_stops) {
    fixture f;
    CHECK_MSG(open_fixture(&f, 256), "cannot open %s with %s", TARGET, DRAFT2);
    spex_error err = {0};
    static collected c;
    spex_gen_result r;
    spex_gen_params gp = spex_gen_default_params();
    for (int n = 0; n <= 9; n += 3) {   /* n_predict is exact, whatever a step emits */
        gp.n_predict = n;
        CHECK_EQ_INT(gen(f.spec, &f, f.ids, f.n_ids, gp, &c, &r, &err), SPEX_OK);
        CHECK_EQ_INT(c.n, n);
        CHECK_EQ_INT(r.n_gen, n);
        CHECK_EQ_INT(r.stop, SPEX_STOP_LENGTH);
    }
    gp.n_predict = 50;   /* the callback stops at its third token */
    memset(&c, 0, sizeof c);
    c.stop_after = 3;
    gp.on_token = take;
    gp.user = &c;
    CHECK_EQ_INT(spex_session_generate(f.spec, f.tok, f.ids, f.n_ids, &gp, &r, &err), SPEX_OK);
    CHECK_EQ_INT(r.stop, SPEX_STOP_CALLER);
    CHECK_EQ_INT(c.n, 3);
    CHECK_EQ_INT(r.n_gen, 3);
    CHECK(!strcmp(spex_stop_name(SPEX_STOP_CONTEXT), "context full"));
    close_fixture(&f);
}

TEST(context_limits_and_bad_arguments) {
    fixture f;
    CHECK_MSG(open_fixture(&f, 32), "cannot open %s with %s", TARGET, DRAFT2);
    spex_error err = {0};
    static collected c;
    spex_gen_result r;
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = f.ids[i % f.n_ids];
    spex_gen_params gp = spex_gen_default_params();
    /* a prompt that fills the context: one token, then the context is full */
    CHECK_EQ_INT(gen(f.plain, &f, ids, 32, gp, &c, &r, &err), SPEX_OK);
    CHECK_EQ_INT(c.n, 1);
    CHECK_EQ_INT(r.stop, SPEX_STOP_CONTEXT);
    CHECK_EQ_INT(gen(f.spec, &f, ids, 20, gp, &c, &r, &err), SPEX_OK);   /* drafts stop at the end */
    CHECK_EQ_INT(r.stop, SPEX_STOP_CONTEXT);
    CHECK_EQ_INT(c.n, 32 - 20 + 1);
    CHECK_EQ_INT(gen(f.plain, &f, ids, 33, gp, &c, &r, &err), SPEX_ERR_RANGE);
    CHECK(strstr(err.msg, "longer than the context of 32") != NULL);
    int32_t bad[2] = {f.ids[0], 1 << 30};
    CHECK_EQ_INT(gen(f.plain, &f, bad, 2, gp, &c, &r, &err), SPEX_ERR_RANGE);
    CHECK(strstr(err.msg, "outside the vocabulary") != NULL);
    CHECK_EQ_INT(spex_session_generate(f.plain, f.tok, ids, 0, &gp, &r, &err), SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_session_generate(NULL, f.tok, ids, 3, &gp, &r, &err), SPEX_ERR_INVALID_ARG);
    /* after the errors the session still generates */
    CHECK_EQ_INT(gen(f.spec, &f, ids, 5, gp, &c, &r, &err), SPEX_OK);
    close_fixture(&f);
}

/* A fixed seed on the rejection path turns the (clock-driven) cut and guard off for the
 * generation when asked for -1 and keeps them when asked for 1; the loop's settings return. */
TEST(fixed_seed_rule_for_cut_and_guard) {
    fixture f;
    CHECK_MSG(open_fixture(&f, 256), "cannot open %s with %s", TARGET, DRAFT2);
    spex_error err = {0};
    static collected c;
    spex_gen_result r;
    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = 0.8f;
    sp.seed = 42;
    spex_sampler *smp = NULL;
    CHECK_OK(spex_sampler_init(&sp, spex_model_get_hparams(f.m)->n_vocab, &smp, &err));
    spex_gen_params gp = spex_gen_default_params();
    gp.n_predict = 20;
    gp.sampler = smp;
    CHECK_EQ_INT(gen(f.rej, &f, f.ids, f.n_ids, gp, &c, &r, &err), SPEX_OK);
    CHECK_EQ_INT(r.path, SPEX_SPEC_PATH_REJECTION);
    CHECK(!r.draft_cut && !r.guard);
    const spex_spec *spec = spex_session_spec(f.rej);
    CHECK(spex_spec_get_params(spec)->draft_cut && spex_spec_get_params(spec)->guard);
    gp.draft_cut = 1;
    gp.guard = 1;
    CHECK_EQ_INT(gen(f.rej, &f, f.ids, f.n_ids, gp, &c, &r, &err), SPEX_OK);
    CHECK(r.draft_cut && r.guard);
    sp.seed = SPEX_SEED_RANDOM;   /* no fixed seed: the loop's settings */
    spex_sampler_free(smp);
    smp = NULL;
    CHECK_OK(spex_sampler_init(&sp, spex_model_get_hparams(f.m)->n_vocab, &smp, &err));
    gp.sampler = smp;
    gp.draft_cut = gp.guard = -1;
    CHECK_EQ_INT(gen(f.rej, &f, f.ids, f.n_ids, gp, &c, &r, &err), SPEX_OK);
    CHECK(r.draft_cut && r.guard);
    spex_sampler_free(smp);
    close_fixture(&f);
}

TEST_MAIN()
