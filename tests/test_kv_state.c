/*
 * test_kv_state.c — one sequence's cache image (src/model/kv_state.c, spex_kv_seq_state_*):
 * the copy behind the server's slot save and restore.
 *
 * What it checks, on tiny-qwen3 (F16 and Q8_0 KV) and the recurrent tiny-qwen35 (with
 * checkpoints): an image saved from sequence 0 and loaded into sequence 1 gives the next
 * tokens' logits bit for bit as sequence 0 does; on qwen35 a rewind of the loaded sequence to
 * a checkpoint position replays nothing and continues bit for bit too; the sizes are linear in
 * n as stated; a wrong size, a token outside the vocabulary, a checkpoint position past the
 * end, a bad sequence or n are refused with the target sequence unchanged. What it is not:
 * the file framing (test_server_slots.c) or the speculative loop's detach.
 */
#include "spex.h"
#include "model/api.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static spex_context *make(const char *path, spex_model **m, spex_type kv, int n_ck) {
    if (access(path, R_OK) != 0) return NULL;
    spex_error e = {0};
    if (spex_model_load(path, NULL, m, &e) != SPEX_OK) return printf("  load: %s\n", e.msg), NULL;
    spex_context_params p = spex_context_default_params();
    p.kv_type = kv;
    p.n_seq_max = 2;
    p.n_ctx_per_seq = 64;
    p.n_batch_max = 32;
    p.n_outputs_max = 32;
    p.n_ctx_checkpoints = n_ck;
    p.checkpoint_min_step = 1 << 20;
    spex_context *c = NULL;
    if (spex_context_init(*m, &p, &c, &e) != SPEX_OK) printf("  context: %s\n", e.msg);
    return c;
}

/* Runs tokens[0 .. n) on seq from its length; the last row's logits copied into out. */
static bool run(spex_context *c, int32_t seq, const int32_t *t, int n, float *out, int V) {
    spex_batch_token bt[32];
    int32_t L = spex_kv_seq_len(c, seq);
    for (int i = 0; i < n; i++) bt[i] = (spex_batch_token){t[i], L + i, seq, i == n - 1};
    spex_error e = {0};
    if (spex_forward(c, &(spex_batch){bt, n}, &e) != SPEX_OK) return printf("  forward: %s\n", e.msg), false;
    memcpy(out, spex_logits(c, 0), sizeof(float) * (size_t)V);
    return true;
}

static const int32_t toks[12] = {1, 40, 77, 120, 3, 200, 9, 180, 66, 251, 17, 33};
static const int32_t next[3] = {140, 7, 99};

static void round_trip(const char *path, spex_type kv, int n_ck) {
    spex_model *m = NULL;
    spex_context *c = make(path, &m, kv, n_ck);
    if (!c) {
        spex_model_free(m);
        SKIP("%s missing", path);
    }
    const int V = spex_model_get_hparams(m)->n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    spex_error e = {0};
    CHECK(run(c, 0, toks, 8, a, V));
    CHECK_OK(spex_kv_seq_checkpoint(c, 0, &e));   /* a checkpoint at 7, as a prompt's end */
    CHECK(run(c, 0, toks + 8, 4, a, V));
    const int32_t n = spex_kv_seq_len(c, 0);
    CHECK_EQ_INT(n, 12);
    uint64_t sz = spex_kv_seq_state_size(c, 0);
    CHECK(sz > 0 && sz <= spex_kv_seq_state_max(c, n) && spex_kv_seq_state_size(c, 2) == 0);
    CHECK(spex_kv_seq_state_max(c, 0) == 0 && spex_kv_seq_state_max(c, 65) == 0);
    CHECK(spex_kv_seq_state_max(c, 13) - spex_kv_seq_state_max(c, 12) ==
          spex_kv_seq_state_max(c, 12) - spex_kv_seq_state_max(c, 11));   /* linear past n = 1 */
    CHECK_EQ_INT((int)(spex_kv_seq_state_max(c, n) - sz) == 0, n_ck <= 1);   /* one checkpoint held */
    uint8_t *img = malloc(sz);
    CHECK(spex_kv_seq_state_save(c, 0, img, sz - 1, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_OK(spex_kv_seq_state_save(c, 0, img, sz, &e));

    /* refusals leave sequence 1 as it is (3 tokens of its own) */
    CHECK(run(c, 1, next, 3, b, V));
    int32_t bad[12];
    memcpy(bad, toks, sizeof bad);
    bad[5] = V;
    CHECK(spex_kv_seq_state_load(c, 1, bad, n, img, sz, &e) == SPEX_ERR_RANGE);
    CHECK(spex_kv_seq_state_load(c, 1, toks, n, img, sz + 1, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_kv_seq_state_load(c, 1, toks, 65, img, sz, &e) == SPEX_ERR_RANGE);
    CHECK(spex_kv_seq_state_load(c, 2, toks, n, img, sz, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 3);

    /* load into sequence 1: the next tokens' logits equal sequence 0's bit for bit */
    CHECK_OK(spex_kv_seq_state_load(c, 1, toks, n, img, sz, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), n);
    CHECK(run(c, 0, next, 3, a, V) && run(c, 1, next, 3, b, V));
    CHECK(!memcmp(a, b, sizeof(float) * (size_t)V));
    if (n_ck > 0) {
        int32_t last = -1;
        CHECK_EQ_INT(spex_kv_seq_n_checkpoints(c, 1, &last), 1);
        CHECK_EQ_INT(last, 7);
        /* back to 8 positions: the checkpoint at 7, nothing replayed; then equal again */
        int32_t replayed = -1;
        CHECK_OK(spex_kv_seq_rewind(c, 1, 8, &replayed, &e));
        CHECK_EQ_INT(replayed, 0);
        CHECK_OK(spex_kv_seq_rewind(c, 0, 8, NULL, &e));
        CHECK(run(c, 0, next, 3, a, V) && run(c, 1, next, 3, b, V));
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)V));
    }
    free(img);
    free(a);
    free(b);
    spex_context_free(c);
    spex_model_free(m);
}

TEST(qwen3_f16) { round_trip("tests/data/models/tiny-qwen3.gguf", SPEX_TYPE_F16, 0); }
TEST(qwen3_q8_0) { round_trip("tests/data/models/tiny-qwen3.gguf", SPEX_TYPE_Q8_0, 0); }
TEST(qwen35_checkpoints) { round_trip("tests/data/qwen35/tiny-qwen35.gguf", SPEX_TYPE_F16, 2); }

/* A checkpoint position past the image's end is refused before anything changes. */
TEST(qwen35_bad_checkpoint_position) {
    spex_model *m = NULL;
    spex_context *c = make("tests/data/qwen35/tiny-qwen35.gguf", &m, SPEX_TYPE_F16, 1);
    if (!c) {
        spex_model_free(m);
        SKIP("tiny-qwen35 missing");
    }
    const int V = spex_model_get_hparams(m)->n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V);
    spex_error e = {0};
    CHECK(run(c, 0, toks, 6, a, V));
    CHECK_OK(spex_kv_seq_checkpoint(c, 0, &e));
    uint64_t sz = spex_kv_seq_state_size(c, 0), one = spex_kv_seq_state_max(c, 6) - spex_kv_seq_state_max(c, 5);
    uint8_t *img = malloc(sz);
    CHECK_OK(spex_kv_seq_state_save(c, 0, img, sz, &e));
    /* the layout: 6 positions of KV, the end state, the count, then [pos][states] per checkpoint */
    uint64_t rs = (sz - 6 * one - 2 * sizeof(int32_t)) / 2;   /* end state and one checkpoint's states */
    uint64_t at = 6 * one + rs;
    int32_t cnt, pos;
    memcpy(&cnt, img + at, sizeof cnt);
    memcpy(&pos, img + at + 4, sizeof pos);
    CHECK_EQ_INT(cnt, 1);
    CHECK_EQ_INT(pos, 5);
    CHECK(run(c, 1, next, 2, a, V));
    pos = 6;   /* past the end */
    memcpy(img + at + 4, &pos, sizeof pos);
    CHECK(spex_kv_seq_state_load(c, 1, toks, 6, img, sz, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "checkpoint") != NULL);
    pos = 5, cnt = 2;   /* more checkpoints than the context keeps (and than the bytes hold) */
    memcpy(img + at, &cnt, sizeof cnt);
    memcpy(img + at + 4, &pos, sizeof pos);
    CHECK(spex_kv_seq_state_load(c, 1, toks, 6, img, sz, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 2);
    cnt = 1;   /* the image as saved loads */
    memcpy(img + at, &cnt, sizeof cnt);
    CHECK_OK(spex_kv_seq_state_load(c, 1, toks, 6, img, sz, &e));
    free(img);
    free(a);
    spex_context_free(c);
    spex_model_free(m);
}

TEST_MAIN()
