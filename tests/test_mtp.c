/*
 * test_mtp.c — the qwen35 MTP block as a drafter (src/model/mtp.c): catch-up logits and
 * hidden rows and the chained draft against the float64 NumPy reference
 * (tools/ref/qwen35_ref.py; tests/data/qwen35/tiny-qwen35.golden.gguf, keys mtp.* in
 * tools/ref/README.md "qwen35 fixtures"), and argument errors.
 *
 * Convention checked (targets.md §8.1, spex's choice documented in include/spex.h): the MTP
 * cache entry at p pairs token t_p with RMSNorm(target tap N of p-1; output_norm), the zero
 * vector at p = 0; chaining feeds h_nextn back. Tolerance TOL_REF vs float64; ids exact (the
 * golden keeps every argmax >= 0.041 from its runner-up).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#define TOL_REF 1e-4
#define V 256
#define E 64

static int g_ints(spex_gguf *g, const char *key, int32_t *out, int cap) {
    spex_gguf_value arr;
    if (spex_gguf_get_arr(g, key, &arr, NULL) != SPEX_OK || arr.elem_type != SPEX_GGUF_I32) return 0;
    for (int i = 0; i < (int)arr.n && i < cap; i++) memcpy(&out[i], arr.data + 4 * (size_t)i, 4);
    return (int)arr.n;
}

TEST(mtp_vs_reference) {
    const char *mp = "tests/data/qwen35/tiny-qwen35.gguf", *gp = "tests/data/qwen35/tiny-qwen35.golden.gguf";
    spex_gguf *g = NULL;
    if (access(mp, R_OK) || spex_gguf_open(gp, &g, NULL) != SPEX_OK) SKIP("tests/data/qwen35 fixtures missing");
    spex_error e = {0};
    spex_model *m = NULL;
    CHECK(spex_model_load(mp, NULL, &m, &e) == SPEX_OK);
    const int32_t N = spex_model_get_hparams(m)->n_layer;
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 64;
    cp.kv_type = SPEX_TYPE_F32;
    cp.tap_layers = &N;
    cp.n_taps = 1;
    cp.n_outputs_max = 32;
    spex_context *c = NULL;
    CHECK(spex_context_init(m, &cp, &c, &e) == SPEX_OK);
    spex_mtp_params mp_ = spex_mtp_default_params();
    mp_.n_ctx_per_seq = 64;
    mp_.kv_type = SPEX_TYPE_F32;
    mp_.pool = spex_context_pool(c);
    spex_mtp_context *mc = NULL;
    CHECK(spex_mtp_init(m, &mp_, &mc, &e) == SPEX_OK);

    int32_t tok[24], pos[24], seq[24], chain[4], anchor = -1;
    CHECK_EQ_INT(g_ints(g, "golden.single.tokens", tok, 24), 24);
    CHECK_EQ_INT(g_ints(g, "golden.mtp.chain", chain, 4), 4);
    CHECK(spex_gguf_get_i64(g, "golden.mtp.anchor", &(int64_t){0}, NULL) == SPEX_OK);
    int64_t a64;
    spex_gguf_get_i64(g, "golden.mtp.anchor", &a64, NULL);
    anchor = (int32_t)a64;
    const spex_tensor_info *gl = spex_gguf_find_tensor(g, "mtp.logits"), *gh = spex_gguf_find_tensor(g, "mtp.hidden");
    CHECK(gl && gh && gl->ne[0] == V && gl->ne[1] == 24 && gh->ne[0] == E);

    spex_batch_token bt[24];
    for (int i = 0; i < 24; i++) bt[i] = (spex_batch_token){tok[i], i, 0, true};
    CHECK(spex_forward(c, &(spex_batch){bt, 24}, &e) == SPEX_OK);
    static float h[24][E];
    memset(h, 0, sizeof h);
    for (int i = 1; i < 24; i++) memcpy(h[i], spex_taps(c) + (size_t)(i - 1) * E, sizeof h[i]);
    for (int i = 0; i < 24; i++) pos[i] = i, seq[i] = 0;
    /* in two catch-up batches (10 + 14 rows) */
    CHECK(spex_mtp_feed(mc, tok, pos, seq, &h[0][0], 10, &e) == SPEX_OK);
    double dl = 0, dh = 0;
    for (int i = 0; i < 10; i++) {
        double x = test_max_diff(spex_mtp_logits(mc, i), (const float *)gl->data + (size_t)i * V, V);
        if (x > dl) dl = x;
        x = test_max_diff(spex_mtp_hidden(mc, i), (const float *)gh->data + (size_t)i * E, E);
        if (x > dh) dh = x;
    }
    CHECK(spex_mtp_feed(mc, tok + 10, pos + 10, seq + 10, &h[10][0], 14, &e) == SPEX_OK);
    for (int i = 0; i < 14; i++) {
        double x = test_max_diff(spex_mtp_logits(mc, i), (const float *)gl->data + (size_t)(10 + i) * V, V);
        if (x > dl) dl = x;
        x = test_max_diff(spex_mtp_hidden(mc, i), (const float *)gh->data + (size_t)(10 + i) * E, E);
        if (x > dh) dh = x;
    }
    printf("  catch-up rows vs reference: logits %.2e, hidden %.2e\n", dl, dh);
    CHECK(dl < TOL_REF && dh < TOL_REF);
    CHECK_EQ_INT(spex_mtp_seq_len(mc, 0), 24);

    /* the chain: anchor at 24 with the target's hidden of 23 */
    spex_mtp_block blk = {.seq = 0, .anchor = anchor, .n_max = 4, .h = spex_taps(c) + (size_t)23 * E};
    spex_draft d;
    CHECK(spex_mtp_draft(mc, &blk, 1, 0.0f, &d, &e) == SPEX_OK);
    CHECK_EQ_INT(d.n, 4);
    for (int i = 0; i < 4; i++) CHECK_MSG(d.ids[i] == chain[i], "chain %d: %d, golden %d", i, d.ids[i], chain[i]);
    CHECK_EQ_INT(spex_mtp_seq_len(mc, 0), 24);   /* the draft rows were scratch */
    /* p_min 1 drafts nothing (a probability is never >= 1 over 256 tokens) */
    CHECK(spex_mtp_draft(mc, &blk, 1, 1.0f, &d, &e) == SPEX_OK);
    CHECK_EQ_INT(d.n, 0);
    CHECK_EQ_INT(spex_mtp_seq_len(mc, 0), 24);
    /* errors */
    blk.n_max = 0;
    CHECK(spex_mtp_draft(mc, &blk, 1, 0.0f, &d, &e) == SPEX_ERR_INVALID_ARG);
    int32_t bad = V;
    CHECK(spex_mtp_feed(mc, &bad, &(int32_t){24}, &(int32_t){0}, &h[0][0], 1, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_mtp_feed(mc, tok, &(int32_t){30}, &(int32_t){0}, &h[0][0], 1, &e) != SPEX_OK);

    spex_mtp_free(mc);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(g);
}

TEST(mtp_needs_block) {
    const char *mp = "tests/data/qwen35/tiny-qwen35-tied.gguf";
    if (access(mp, R_OK)) SKIP("tests/data/qwen35 fixtures missing");
    spex_error e = {0};
    spex_model *m = NULL;
    CHECK(spex_model_load(mp, NULL, &m, &e) == SPEX_OK);
    spex_mtp_context *mc = NULL;
    CHECK(spex_mtp_init(m, NULL, &mc, &e) == SPEX_ERR_UNSUPPORTED);
    CHECK(mc == NULL && strstr(e.msg, "nextn_predict_layers"));
    spex_model_free(m);
}

TEST_MAIN()
