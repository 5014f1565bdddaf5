/*
 * test_spec_restore.c — a sequence restored from a cache image in the speculative loop
 * (spex_spec_seq_image_save / spex_spec_seq_restore, src/spec/spec.c).
 *
 * What it checks, on tiny-qwen3 with its DFlash2 drafter (greedy): a sequence saved after 40
 * generated tokens and restored into another sequence, then fed the same continuation prompt
 * as the original and stepped, emits the same 60 tokens as the original does from the same
 * point — while the original drafts and the restored one (detached from the drafter, whose
 * cache has nothing of it) verifies without drafts; fed from position 0 again, the restored
 * sequence drafts again and emits what a fresh sequence emits; a restore that fails (a wrong
 * image size) leaves the sequence empty. What it is not: the server's files
 * (test_server_slots.c) or the image itself (test_kv_state.c).
 */
#include "spex.h"
#include "model/api.h"
#include "sample/api.h"
#include "spec/api.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TGT "tests/data/models/tiny-qwen3.gguf"
#define DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define N_CTX 256

typedef struct pair {
    spex_model *m;
    spex_drafter *d;
    spex_context *ctx;
    spex_draft_context *dc;
    spex_spec *s;
} pair;

static void pair_close(pair *p) {
    spex_spec_free(p->s);
    spex_draft_context_free(p->dc);
    spex_context_free(p->ctx);
    spex_drafter_free(p->d);
    spex_model_free(p->m);
}

static void quiet(void *u, const char *line) { (void)u, (void)line; }

static bool pair_open(pair *p) {
    memset(p, 0, sizeof *p);
    spex_error e = {0};
    if (spex_model_load(TGT, NULL, &p->m, &e) != SPEX_OK || spex_drafter_load(DRAFT2, p->m, NULL, &p->d, &e) != SPEX_OK)
        return printf("  load: %s\n", e.msg), false;
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = 2;
    cp.n_ctx_per_seq = N_CTX;
    cp.n_batch_max = 64;
    cp.n_outputs_max = 64;
    cp.tap_layers = spex_drafter_get_hparams(p->d)->target_layers;
    cp.n_taps = spex_drafter_get_hparams(p->d)->n_taps;
    spex_draft_context_params dp = spex_draft_context_default_params();
    dp.n_seq_max = 2;
    dp.n_ctx_per_seq = N_CTX;
    spex_spec_params sp = spex_spec_default_params();
    sp.log = quiet;
    if (spex_context_init(p->m, &cp, &p->ctx, &e) != SPEX_OK) return printf("  ctx: %s\n", e.msg), false;
    dp.pool = spex_context_pool(p->ctx);
    if (spex_draft_context_init(p->d, &dp, &p->dc, &e) != SPEX_OK || spex_spec_init(p->ctx, p->dc, &sp, &p->s, &e) != SPEX_OK)
        return printf("  spec: %s\n", e.msg), false;
    return true;
}

static spex_sampler *greedy(const spex_spec *s) {
    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = 0.0f;
    spex_sampler *smp = NULL;
    spex_sampler_init(&sp, spex_spec_n_vocab(s), &smp, NULL);
    return smp;
}

/* Steps seq until n tokens were emitted after `first` (out[0] = first); false on error. */
static bool gen(spex_spec *s, int32_t seq, int32_t first, int n, int32_t *out) {
    out[0] = first;
    int k = 1;
    spex_spec_out o;
    spex_error e = {0};
    while (k < n) {
        int32_t me = n - k;
        if (spex_spec_step(s, &seq, 1, &me, &o, &e) != SPEX_OK) return printf("  step: %s\n", e.msg), false;
        for (int i = 0; i < o.n && k < n; i++) out[k++] = o.tokens[i];
    }
    return true;
}

static const int32_t PROMPT[9] = {1, 40, 77, 120, 3, 200, 9, 180, 66};

TEST(restored_sequence_is_lossless_and_detached) {
    if (access(TGT, R_OK) || access(DRAFT2, R_OK)) SKIP("tiny-qwen3 or its drafter missing");
    pair p;
    CHECK(pair_open(&p));
    if (!p.s) return pair_close(&p);
    spex_error e = {0};
    spex_sampler *s0 = greedy(p.s), *s1 = greedy(p.s);
    int32_t first = -1, a[40];
    CHECK_OK(spex_spec_seq_begin(p.s, 0, PROMPT, 9, s0, &first, &e));
    CHECK(gen(p.s, 0, first, 40, a));
    /* the cache holds the prompt and the emitted tokens but the last (the anchor) */
    int32_t n = spex_spec_seq_len(p.s, 0);
    CHECK_EQ_INT(n, 9 + 40 - 1);
    int32_t toks[N_CTX];
    memcpy(toks, PROMPT, sizeof PROMPT);
    memcpy(toks + 9, a, sizeof(int32_t) * 40);   /* toks[0 .. n] : cache + the anchor */
    uint64_t sz = spex_spec_seq_image_size(p.s, 0);
    CHECK(sz > 0 && sz <= spex_spec_seq_image_max(p.s, n));
    uint8_t *img = malloc(sz);
    CHECK_OK(spex_spec_seq_image_save(p.s, 0, img, sz, &e));

    /* a failed restore leaves the sequence empty */
    CHECK(spex_spec_seq_restore(p.s, 1, toks, n, img, sz - 1, &e) != SPEX_OK);
    CHECK_EQ_INT(spex_spec_seq_len(p.s, 1), 0);
    CHECK_OK(spex_spec_seq_restore(p.s, 1, toks, n, img, sz, &e));
    CHECK_EQ_INT(spex_spec_seq_len(p.s, 1), n);
    CHECK(spex_spec_seq_can_keep(p.s, 1, n));

    /* both continue from the same prompt (cache + anchor): the original by feeding nothing */
    int32_t f0 = -1, f1 = -1, b0[60], b1[60];
    CHECK_OK(spex_spec_seq_feed(p.s, 0, n, toks, 0, &e));
    CHECK_OK(spex_spec_seq_start(p.s, 0, toks[n], s0, &f0, &e));
    CHECK_OK(spex_spec_seq_feed(p.s, 1, n, toks, 0, &e));
    CHECK_OK(spex_spec_seq_start(p.s, 1, toks[n], s1, &f1, &e));
    CHECK(gen(p.s, 0, f0, 60, b0) && gen(p.s, 1, f1, 60, b1));
    CHECK(!memcmp(b0, b1, sizeof b0));
    CHECK_MSG(spex_spec_seq_stats(p.s, 0)->n_drafted > 0, "the original did not draft");
    CHECK_EQ_INT((int)spex_spec_seq_stats(p.s, 1)->n_drafted, 0);

    /* fed from 0, the restored sequence drafts again and matches a fresh run */
    int32_t g0 = -1, g1 = -1, c0[30], c1[30];
    CHECK_OK(spex_spec_seq_begin(p.s, 0, PROMPT + 2, 7, s0, &g0, &e));
    CHECK_OK(spex_spec_seq_begin(p.s, 1, PROMPT + 2, 7, s1, &g1, &e));
    CHECK(gen(p.s, 0, g0, 30, c0) && gen(p.s, 1, g1, 30, c1));
    CHECK(!memcmp(c0, c1, sizeof c0));
    CHECK_MSG(spex_spec_seq_stats(p.s, 1)->n_drafted > 0, "the sequence fed from 0 did not draft again");
    free(img);
    spex_sampler_free(s0);
    spex_sampler_free(s1);
    pair_close(&p);
}

TEST_MAIN()
