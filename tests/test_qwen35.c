/*
 * test_qwen35.c — the hybrid qwen35 target (src/model/model_qwen35.c, forward_qwen35.c, the
 * recurrent-state ring of context.c): logits, taps and GDN states against the float64 NumPy
 * reference (tools/ref/qwen35_ref.py; goldens in tests/data/qwen35/, layout in
 * tools/ref/README.md "qwen35 fixtures"), the chunked vs recurrent paths, batches of several
 * sequences, rollback through the ring for every accepted count, and loading errors.
 *
 * Tolerances: vs the float64 reference TOL_REF (fp32 engine; measured values printed);
 * chunked (> SPEX_QWEN35_RECURRENT_MAX rows) vs recurrent rows TOL_CHUNK; rollback and
 * batching of short runs: bit-identical (the recurrent form and attention compute a row the
 * same way whatever else is in the batch).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "test.h"
#include "model/model.h"

#include <stdint.h>
#include <unistd.h>

#define TOL_REF 1e-4
#define TOL_CHUNK 1e-4
#define V 256
#define E 64

static const char *fx(const char *name) {
    static char buf[4][256];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "tests/data/qwen35/%s", name);
    return access(b, R_OK) == 0 ? b : NULL;
}

static spex_model *load(const char *path) {
    spex_error e = {0};
    spex_model *m = NULL;
    if (spex_model_load(path, NULL, &m, &e) != SPEX_OK) printf("  load %s: %s\n", path, e.msg);
    return m;
}

static spex_context *mkctx(const spex_model *m, int n_seq, int n_rs, int threads, const int32_t *taps, int n_taps) {
    spex_context_params p = spex_context_default_params();
    p.n_seq_max = n_seq;
    p.n_ctx_per_seq = 128;
    p.n_batch_max = 128;
    p.n_outputs_max = 128;
    p.kv_type = SPEX_TYPE_F32;
    p.n_threads = threads;
    p.n_rs_seq = n_rs;
    p.tap_layers = taps;
    p.n_taps = n_taps;
    spex_error e = {0};
    spex_context *c = NULL;
    if (spex_context_init(m, &p, &c, &e) != SPEX_OK) printf("  context: %s\n", e.msg);
    return c;
}

/* Feeds tokens[0..n) of sequence seq (continuing its cache) as one batch, all logits wanted. */
static spex_status feed(spex_context *c, int seq, const int32_t *tokens, int n, bool all_logits) {
    spex_batch_token bt[128];
    const int32_t L = spex_kv_seq_len(c, seq);
    for (int i = 0; i < n; i++)
        bt[i] = (spex_batch_token){.token = tokens[i], .pos = L + i, .seq = seq, .logits = all_logits || i == n - 1};
    spex_batch b = {bt, n};
    spex_error e = {0};
    spex_status s = spex_forward(c, &b, &e);
    if (s != SPEX_OK) printf("  forward: %s\n", e.msg);
    return s;
}

typedef struct golden {
    spex_gguf *g;
} golden;

static int g_ints(const golden *gd, const char *key, int32_t *out, int cap) {
    spex_gguf_value arr;
    if (spex_gguf_get_arr(gd->g, key, &arr, NULL) != SPEX_OK || arr.elem_type != SPEX_GGUF_I32) return 0;
    int n = (int)arr.n;
    for (int i = 0; i < n && i < cap; i++) memcpy(&out[i], arr.data + 4 * (size_t)i, 4);
    return n;
}

static const float *g_tensor(const golden *gd, const char *name, int64_t ne0, int64_t ne1) {
    const spex_tensor_info *t = spex_gguf_find_tensor(gd->g, name);
    if (!t || t->type != SPEX_TYPE_F32 || t->ne[0] * t->ne[1] * t->ne[2] != ne0 * ne1) return NULL;
    return t->data;
}

#define NEED(gd, model, gname)                                                                   \
    golden gd = {0};                                                                             \
    const char *model##_path = fx(model);                                                        \
    if (!model##_path || !fx(gname) || spex_gguf_open(fx(gname), &gd.g, NULL) != SPEX_OK)        \
        SKIP("tests/data/qwen35/%s or %s missing (tools/ref/make_qwen35_fixtures.py)", model, gname)

/* ======================================================================== */
/* Loading                                                                   */
/* ======================================================================== */

TEST(qwen35_hparams) {
    const char *p = fx("tiny-qwen35.gguf");
    if (!p) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_model *m = load(p);
    CHECK(m);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    CHECK_EQ_INT(hp->arch, SPEX_ARCH_QWEN35);
    CHECK_EQ_INT(hp->n_layer, 4);
    CHECK_EQ_INT(hp->n_nextn, 1);
    CHECK_EQ_INT(hp->n_recurrent, 2);
    CHECK_EQ_INT(hp->head_dim, 32);
    CHECK_EQ_INT(hp->n_rot, 16);
    CHECK_EQ_INT(hp->ssm_n_group, 2);
    CHECK_EQ_INT(hp->ssm_dt_rank, 4);
    CHECK(hp->attn_gated && !hp->tied_output);
    /* interval 2: layers 1 and 3 attend, 0 and 2 are Gated DeltaNet */
    CHECK(spex_model_layer_is_recurrent(m, 0) && !spex_model_layer_is_recurrent(m, 1));
    CHECK(spex_model_layer_is_recurrent(m, 2) && !spex_model_layer_is_recurrent(m, 3));
    CHECK(!spex_model_layer_is_recurrent(m, 4));
    /* (Hv*D*D + (d_conv-1)*Cc) * 4 B per GDN layer: (4*16*16 + 3*128) * 4 * 2 */
    CHECK_EQ_INT(spex_model_recurrent_state_bytes(m), (4 * 16 * 16 + 3 * 128) * 4 * 2);
    spex_model_free(m);

    const char *pt = fx("tiny-qwen35-tied.gguf");
    if (!pt) return;
    m = load(pt);
    CHECK(m);
    hp = spex_model_get_hparams(m);
    CHECK(hp->tied_output);
    CHECK_EQ_INT(hp->n_nextn, 0);
    /* attention.recurrent_layers = [true, true, false, true] */
    CHECK(spex_model_layer_is_recurrent(m, 0) && spex_model_layer_is_recurrent(m, 1));
    CHECK(!spex_model_layer_is_recurrent(m, 2) && spex_model_layer_is_recurrent(m, 3));
    spex_model_free(m);
}

/* ======================================================================== */
/* Against the reference                                                     */
/* ======================================================================== */

/* 24 tokens (one batch, or one at a time) with taps [0, 2, 4]: logits, taps, GDN states. */
static void single_case(const char *model, const char *gname, bool one_by_one, int threads) {
    NEED(gd, model, gname);
    int32_t tok[24], taps[3];
    CHECK_EQ_INT(g_ints(&gd, "golden.single.tokens", tok, 24), 24);
    CHECK_EQ_INT(g_ints(&gd, "golden.taps", taps, 3), 3);
    const float *gl = g_tensor(&gd, "single.logits", V, 24), *gt = g_tensor(&gd, "single.taps", 3 * E, 24);
    CHECK(gl && gt);
    spex_model *m = load(model_path);
    CHECK(m);
    spex_context *c = mkctx(m, 1, 0, threads, taps, 3);
    CHECK(c);
    double dl = 0, dt = 0;
    for (int i = 0; i < 24; i += one_by_one ? 1 : 24) {
        const int n = one_by_one ? 1 : 24;
        CHECK(feed(c, 0, tok + i, n, true) == SPEX_OK);
        for (int j = 0; j < n; j++) {
            double x = test_max_diff(spex_logits(c, j), gl + (int64_t)(i + j) * V, V);
            if (x > dl) dl = x;
            x = test_max_diff(spex_taps(c) + (int64_t)j * 3 * E, gt + (int64_t)(i + j) * 3 * E, 3 * E);
            if (x > dt) dt = x;
        }
    }
    /* GDN states after the 24 tokens */
    int32_t sl[8];
    const int nsl = g_ints(&gd, "golden.state.layers", sl, 8);
    double ds = 0;
    for (int i = 0; i < nsl; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "state.S.%d", sl[i]);
        const float *gs = g_tensor(&gd, nm, 16 * 16 * 4, 1);
        snprintf(nm, sizeof nm, "state.conv.%d", sl[i]);
        const float *gc = g_tensor(&gd, nm, 128 * 3, 1);
        CHECK(gs && gc);
        const int32_t ri = m->layers[sl[i]].rs_index;
        CHECK(ri >= 0);
        double x = test_max_diff(spex_rs_S(c, 0, 23, ri), gs, 16 * 16 * 4);
        if (x > ds) ds = x;
        x = test_max_diff(spex_rs_conv(c, 0, 23, ri), gc, 128 * 3);
        if (x > ds) ds = x;
    }
    printf("  %s %s %d thr: logits %.2e, taps %.2e, states %.2e (of %d GDN layers)\n", model,
           one_by_one ? "token by token" : "one batch", threads, dl, dt, ds, nsl);
    CHECK(dl < TOL_REF && dt < TOL_REF && ds < TOL_REF);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(gd.g);
}

TEST(qwen35_single_batch) { single_case("tiny-qwen35.gguf", "tiny-qwen35.golden.gguf", false, 1); }
TEST(qwen35_single_tokens_2thr) { single_case("tiny-qwen35.gguf", "tiny-qwen35.golden.gguf", true, 2); }
TEST(qwen35_tied_single) { single_case("tiny-qwen35-tied.gguf", "tiny-qwen35-tied.golden.gguf", false, 2); }

static void greedy_case(const char *model, const char *gname) {
    NEED(gd, model, gname);
    int32_t prompt[6], ids[12];
    CHECK_EQ_INT(g_ints(&gd, "golden.greedy.prompt", prompt, 6), 6);
    CHECK_EQ_INT(g_ints(&gd, "golden.greedy.ids", ids, 12), 12);
    spex_model *m = load(model_path);
    spex_context *c = m ? mkctx(m, 1, 0, 1, NULL, 0) : NULL;
    CHECK(c);
    CHECK(feed(c, 0, prompt, 6, false) == SPEX_OK);
    for (int i = 0; i < 12; i++) {
        const int id = test_argmax(spex_logits(c, 0), V);
        CHECK_MSG(id == ids[i], "greedy id %d: %d, golden %d", i, id, ids[i]);
        CHECK(feed(c, 0, &ids[i], 1, true) == SPEX_OK);
    }
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(gd.g);
}

TEST(qwen35_greedy) { greedy_case("tiny-qwen35.gguf", "tiny-qwen35.golden.gguf"); }
TEST(qwen35_tied_greedy) { greedy_case("tiny-qwen35-tied.gguf", "tiny-qwen35-tied.golden.gguf"); }

/* ======================================================================== */
/* Engine consistency                                                        */
/* ======================================================================== */

static void rand_tokens(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % V);
    }
}

/* 70 tokens: one batch (chunked form: 70 > SPEX_QWEN35_RECURRENT_MAX) vs one at a time. */
TEST(qwen35_chunked_vs_recurrent) {
    const char *p = fx("tiny-qwen35.gguf");
    if (!p) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_model *m = load(p);
    spex_context *a = m ? mkctx(m, 1, 0, 2, NULL, 0) : NULL, *b = m ? mkctx(m, 1, 0, 1, NULL, 0) : NULL;
    CHECK(a && b);
    int32_t t[80];
    rand_tokens(t, 80, 7);
    CHECK(feed(a, 0, t, 70, true) == SPEX_OK);
    static float la[70][V];
    for (int i = 0; i < 70; i++) memcpy(la[i], spex_logits(a, i), sizeof la[i]);
    double d = 0;
    for (int i = 0; i < 70; i++) {
        CHECK(feed(b, 0, t + i, 1, true) == SPEX_OK);
        double x = test_max_diff(spex_logits(b, 0), la[i], V);
        if (x > d) d = x;
    }
    /* and both continue the same way */
    CHECK(feed(a, 0, t + 70, 5, true) == SPEX_OK);
    CHECK(feed(b, 0, t + 70, 5, true) == SPEX_OK);
    double d2 = test_max_diff(spex_logits(a, 4), spex_logits(b, 4), V);
    printf("  chunked (one batch of 70) vs recurrent (token by token): %.2e; continuation %.2e\n", d, d2);
    CHECK(d < TOL_CHUNK && d2 < TOL_CHUNK);
    spex_context_free(a);
    spex_context_free(b);
    spex_model_free(m);
}

/* Three sequences interleaved in one context vs each alone: bit-identical. */
TEST(qwen35_multi_sequence) {
    const char *p = fx("tiny-qwen35.gguf");
    if (!p) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_model *m = load(p);
    spex_context *all = m ? mkctx(m, 3, 2, 2, NULL, 0) : NULL;
    CHECK(all);
    int32_t t[3][20];
    for (int s = 0; s < 3; s++) rand_tokens(t[s], 20, 100 + (uint32_t)s);
    const int pre[3] = {5, 9, 3};
    /* prompts of different lengths in one batch, then 4 decode steps with all three */
    spex_batch_token bt[64];
    int n = 0;
    for (int i = 0; i < 9; i++)
        for (int s = 0; s < 3; s++)
            if (i < pre[s]) bt[n++] = (spex_batch_token){t[s][i], i, s, i == pre[s] - 1};
    spex_error e = {0};
    CHECK(spex_forward(all, &(spex_batch){bt, n}, &e) == SPEX_OK);
    static float got[3][4][V];
    for (int step = 0; step < 4; step++) {
        n = 0;
        for (int s = 2; s >= 0; s--) bt[n++] = (spex_batch_token){t[s][pre[s] + step], pre[s] + step, s, true};
        CHECK(spex_forward(all, &(spex_batch){bt, n}, &e) == SPEX_OK);
        for (int s = 0; s < 3; s++) memcpy(got[s][step], spex_logits_of_token(all, 2 - s), sizeof got[s][step]);
    }
    double d = 0;
    for (int s = 0; s < 3; s++) {
        spex_context *one = mkctx(m, 1, 0, 1, NULL, 0);
        CHECK(one);
        CHECK(feed(one, 0, t[s], pre[s], false) == SPEX_OK);
        for (int step = 0; step < 4; step++) {
            CHECK(feed(one, 0, &t[s][pre[s] + step], 1, true) == SPEX_OK);
            double x = test_max_diff(spex_logits(one, 0), got[s][step], V);
            if (x > d) d = x;
        }
        spex_context_free(one);
    }
    printf("  3 interleaved sequences vs alone: max diff %.2e\n", d);
    CHECK(d == 0.0);
    spex_context_free(all);
    spex_model_free(m);
}

/* Verify k = 5 tokens, keep j + 1 of them (j = 0 .. 4 drafts accepted), continue 3 tokens:
 * identical to a run that only ever saw the kept tokens. Also: no rollback past the ring. */
TEST(qwen35_rollback_every_j) {
    const char *p = fx("tiny-qwen35.gguf");
    if (!p) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_model *m = load(p);
    CHECK(m);
    int32_t prompt[10], verify[5], cont[3];
    rand_tokens(prompt, 10, 1);
    rand_tokens(verify, 5, 2);
    rand_tokens(cont, 3, 3);
    for (int j = 0; j <= 4; j++) {
        spex_context *a = mkctx(m, 1, 4, 2, NULL, 0), *b = mkctx(m, 1, 0, 1, NULL, 0);
        CHECK(a && b);
        CHECK(feed(a, 0, prompt, 10, false) == SPEX_OK);
        CHECK(feed(a, 0, verify, 5, true) == SPEX_OK);
        CHECK(spex_kv_seq_can_truncate(a, 0, 10 + j + 1));
        spex_error e = {0};
        CHECK(spex_kv_seq_truncate(a, 0, 10 + j + 1, &e) == SPEX_OK);
        CHECK(feed(a, 0, cont, 3, true) == SPEX_OK);
        CHECK(feed(b, 0, prompt, 10, false) == SPEX_OK);
        for (int i = 0; i <= j; i++) CHECK(feed(b, 0, &verify[i], 1, false) == SPEX_OK);
        CHECK(feed(b, 0, cont, 3, true) == SPEX_OK);
        for (int i = 0; i < 3; i++)
            CHECK_MSG(test_max_diff(spex_logits(a, i), spex_logits(b, i), V) == 0.0, "j %d row %d: %.3e", j, i,
                      test_max_diff(spex_logits(a, i), spex_logits(b, i), V));
        /* the ring holds 5 states, but the verify batch overwrote the slots of the prompt's
         * last states: after the 3 continuation tokens the ring goes back to the kept verify
         * row (len - 4 states back is position 9 + j: held only from j = 1 on). Going back 5
         * tokens is refused, and the refusal changes nothing. */
        const int32_t len = spex_kv_seq_len(a, 0);
        CHECK(!spex_kv_seq_can_truncate(a, 0, len - 5));
        CHECK(spex_kv_seq_truncate(a, 0, len - 5, &e) == SPEX_ERR_UNSUPPORTED);
        CHECK(strstr(e.msg, "n_rs_seq") != NULL);
        CHECK_EQ_INT(spex_kv_seq_len(a, 0), len);
        CHECK(spex_kv_seq_can_truncate(a, 0, len - 3) && spex_kv_seq_can_truncate(a, 0, 0));
        CHECK(spex_kv_seq_can_truncate(a, 0, len - 4) == (j >= 1));
        spex_context_free(a);
        spex_context_free(b);
    }
    /* without snapshots (n_rs_seq 0) no free rollback, but clear and copy of the full length work */
    spex_context *c = mkctx(m, 2, 0, 1, NULL, 0);
    CHECK(c);
    CHECK(feed(c, 0, prompt, 10, false) == SPEX_OK);
    CHECK(!spex_kv_seq_can_truncate(c, 0, 9));
    spex_error e = {0};
    CHECK(spex_kv_seq_copy(c, 0, 1, -1, &e) == SPEX_OK);
    CHECK(feed(c, 0, verify, 1, true) == SPEX_OK);
    float l0[V];
    memcpy(l0, spex_logits(c, 0), sizeof l0);
    CHECK(feed(c, 1, verify, 1, true) == SPEX_OK);
    CHECK(test_max_diff(l0, spex_logits(c, 0), V) == 0.0);
    /* a length the ring does not hold: copied whole, then replayed back in dst (no checkpoints) */
    CHECK(spex_kv_seq_copy(c, 0, 1, 5, &e) == SPEX_OK);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 5);
    CHECK(spex_kv_seq_truncate(c, 0, 0, &e) == SPEX_OK);
    spex_context_free(c);
    spex_model_free(m);
}

/* Checkpoints + replay (spex_kv_seq_rewind): going back past the ring restores the latest
 * checkpoint and replays the tokens after it; the continuation equals a fresh run. */
TEST(qwen35_rewind_checkpoints) {
    const char *p = fx("tiny-qwen35.gguf");
    if (!p) SKIP("tests/data/qwen35/tiny-qwen35.gguf missing");
    spex_model *m = load(p);
    CHECK(m);
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = 2;
    cp.n_ctx_per_seq = 128;
    cp.n_batch_max = 16;
    cp.kv_type = SPEX_TYPE_F32;
    cp.n_rs_seq = 2;
    cp.n_ctx_checkpoints = 3;
    cp.checkpoint_min_step = 8;
    spex_error e = {0};
    spex_context *c = NULL;
    CHECK(spex_context_init(m, &cp, &c, &e) == SPEX_OK);
    int32_t t[64];
    rand_tokens(t, 64, 11);
    for (int i = 0; i < 40; i += 10) CHECK(feed(c, 0, t + i, 10, false) == SPEX_OK);
    int32_t last;
    /* checkpoints after positions 9, 19, 29, 39; 3 slots keep the last three */
    CHECK_EQ_INT(spex_kv_seq_n_checkpoints(c, 0, &last), 3);
    CHECK_EQ_INT(last, 39);
    int32_t nrep = -1;
    CHECK(!spex_kv_seq_can_truncate(c, 0, 23));
    CHECK(spex_kv_seq_rewind(c, 0, 23, &nrep, &e) == SPEX_OK);
    CHECK_EQ_INT(nrep, 3);                       /* from the checkpoint at 19 */
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 23);
    CHECK_EQ_INT(spex_kv_seq_n_checkpoints(c, 0, &last), 1);   /* 29 and 39 dropped */
    CHECK_EQ_INT(last, 19);
    CHECK(feed(c, 0, t + 50, 4, true) == SPEX_OK);
    float got[4][V];
    for (int i = 0; i < 4; i++) memcpy(got[i], spex_logits(c, i), sizeof got[i]);
    spex_context *f = mkctx(m, 1, 0, 1, NULL, 0);
    CHECK(f);
    CHECK(feed(f, 0, t, 23, false) == SPEX_OK);
    CHECK(feed(f, 0, t + 50, 4, true) == SPEX_OK);
    double d = 0;
    for (int i = 0; i < 4; i++) {
        double x = test_max_diff(got[i], spex_logits(f, i), V);
        if (x > d) d = x;
    }
    printf("  rewind 40 -> 23 (replayed %d from the checkpoint at 19) vs fresh: %.2e\n", nrep, d);
    CHECK(d < 1e-5);
    /* before every checkpoint: replay from 0 */
    CHECK(spex_kv_seq_rewind(c, 0, 5, &nrep, &e) == SPEX_OK);
    CHECK_EQ_INT(nrep, 5);
    CHECK_EQ_INT(spex_kv_seq_n_checkpoints(c, 0, NULL), 0);
    /* copy to another sequence at a length the ring does not hold: replayed in dst */
    CHECK(feed(c, 0, t + 5, 15, false) == SPEX_OK);   /* len 20, checkpoint at 19 */
    CHECK(feed(c, 0, t + 20, 15, false) == SPEX_OK);  /* len 35, checkpoint at 34 */
    CHECK(spex_kv_seq_copy(c, 0, 1, 12, &e) == SPEX_OK);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 12);
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 35);
    CHECK(feed(c, 1, t + 60, 2, true) == SPEX_OK);
    spex_kv_seq_clear(f, -1, NULL);
    CHECK(feed(f, 0, t, 12, false) == SPEX_OK);
    CHECK(feed(f, 0, t + 60, 2, true) == SPEX_OK);
    CHECK(test_max_diff(spex_logits(c, 1), spex_logits(f, 1), V) < 1e-5);
    /* errors */
    CHECK(spex_kv_seq_rewind(c, 0, 99, NULL, &e) == SPEX_ERR_RANGE);
    CHECK(spex_kv_seq_rewind(c, 7, 1, NULL, &e) == SPEX_ERR_INVALID_ARG);
    spex_context_free(f);
    spex_context_free(c);
    spex_model_free(m);
}

TEST_MAIN()
