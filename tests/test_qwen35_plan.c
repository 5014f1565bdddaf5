/*
 * test_qwen35_plan.c — the qwen35 memory plan (src/model/plan.c) and what `spex inspect`
 * prints from it.
 *
 * Checks the plan against the numbers of ../shared/docs/targets.md: §6.4 for Qwen3.8-27B (64 KiB
 * of F16 KV per token, S 144 MiB + conv 5.6 MiB ≈ 150 MiB of recurrent state per sequence, the
 * 0.8B log cross-check of 72 MiB / 5.06 MiB for 4 sequences), §9 (1.03 GiB extra / 1.17 GiB in
 * all for n_max 7 on 27B; 19.3 MiB and 50 MiB per copy for 0.8B and 9B) and §11.2 (KV per
 * token 12 KiB and 32 KiB). Then that the plan agrees with what the library allocates for the
 * tiny fixture (spex_model_recurrent_state_bytes, spex_context_memory), and that `spex inspect`
 * prints the plan lines and the loader's verdict, OK for the fixture and INVALID (with the
 * loader's message) for a copy missing one GDN tensor.
 * What it is not: a test of the allocation itself (test_qwen35.c runs the model).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "test.h"

#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * MiB)
#define FIXTURE "tests/data/qwen35/tiny-qwen35.gguf"

/* Attention layers among n under the interval rule of targets.md §6.2. */
static int64_t n_attn_interval(int64_t n, int64_t interval) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += (i + 1) % interval == 0;
    return k;
}

TEST(plan_qwen38_27b) {
    spex_qwen35_plan_in in = {.n_layer = 64, .n_attn = n_attn_interval(64, 4), .n_head_kv = 4, .head_dim = 256,
                              .ssm_n_group = 16, .ssm_dt_rank = 48, .ssm_d_state = 128, .ssm_d_conv = 4, .n_max = 7};
    CHECK_EQ_INT(in.n_attn, 16);
    spex_qwen35_plan p;
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), 0);
    CHECK_EQ_INT(p.n_gdn, 48);
    CHECK_EQ_INT(p.conv_channels, 10240);
    CHECK_EQ_INT(p.kv_per_token, 64 * 1024);                /* 16 x 2 x 4 x 256 values at f16 */
    CHECK_EQ_INT(p.state_S, 144ull * 1024 * 1024);           /* 48 x 48 x 128 x 128 x 4 B */
    CHECK_EQ_INT(p.state_conv, 48ull * 3 * 10240 * 4);        /* 5.625 MiB */
    CHECK_NEAR(p.state_conv / MiB, 5.6, 0.05);
    CHECK_NEAR(p.state / MiB, 150.0, 0.5);                   /* "about 150 MiB per state copy" */
    CHECK_EQ_INT(p.snapshots, 8 * p.state);
    CHECK_NEAR((double)(p.snapshots - p.state) / GiB, 1.03, 0.01); /* §9: n_max 7 extra copies */
    CHECK_NEAR(p.snapshots / GiB, 1.17, 0.005);                    /* with the live copy */
    printf("  27B: KV %llu B/token, state %.3f MiB (S %.3f + conv %.3f), n_max 7: %.3f GiB\n",
           (unsigned long long)p.kv_per_token, p.state / MiB, p.state_S / MiB, p.state_conv / MiB, p.snapshots / GiB);
}

TEST(plan_qwen35_0p8b_and_9b) {
    spex_qwen35_plan_in in = {.n_layer = 24, .n_attn = n_attn_interval(24, 4), .n_head_kv = 2, .head_dim = 256,
                              .ssm_n_group = 16, .ssm_dt_rank = 16, .ssm_d_state = 128, .ssm_d_conv = 4, .n_max = 7};
    spex_qwen35_plan p;
    CHECK_EQ_INT(in.n_attn, 6); /* "KV cache on 6 of 24 layers, recurrent state on 18" */
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), 0);
    CHECK_EQ_INT(p.n_gdn, 18);
    CHECK_EQ_INT(p.conv_channels, 6144);
    CHECK_EQ_INT(p.kv_per_token, 12 * 1024);
    CHECK_NEAR(p.state / MiB, 19.3, 0.05);
    /* the llama.cpp log of §6.4: S 72 MiB and R 5.06 MiB for 4 sequences */
    CHECK_EQ_INT(4 * p.state_S, 72ull * 1024 * 1024);
    CHECK_NEAR(4 * p.state_conv / MiB, 5.06, 0.005);
    printf("  0.8B: KV %llu B/token, state %.4f MiB (S %.3f + conv %.4f)\n", (unsigned long long)p.kv_per_token,
           p.state / MiB, p.state_S / MiB, p.state_conv / MiB);

    spex_qwen35_plan_in nine = {.n_layer = 32, .n_attn = n_attn_interval(32, 4), .n_head_kv = 4, .head_dim = 256,
                                .ssm_n_group = 16, .ssm_dt_rank = 32, .ssm_d_state = 128, .ssm_d_conv = 4};
    CHECK_EQ_INT(spex_qwen35_plan_compute(&nine, &p), 0);
    CHECK_EQ_INT(p.conv_channels, 8192);
    CHECK_EQ_INT(p.kv_per_token, 32 * 1024);
    CHECK_NEAR(p.state / MiB, 50.0, 0.5);
    CHECK_EQ_INT(p.snapshots, p.state); /* n_max 0: the live copy only */
}

TEST(plan_rejects_inconsistent_numbers) {
    spex_qwen35_plan_in in = {.n_layer = 4, .n_attn = 5, .n_head_kv = 2, .head_dim = 32, .ssm_n_group = 2,
                              .ssm_dt_rank = 4, .ssm_d_state = 16, .ssm_d_conv = 4};
    spex_qwen35_plan p;
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), -1);
    CHECK_EQ_INT(p.state, 0);
    in.n_attn = 2;
    in.ssm_d_conv = 0;
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), -1);
    in.ssm_d_conv = 4;
    in.n_max = -1;
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), -1);
    in.n_max = 0;
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), 0);
    in.ssm_d_state = 1 << 30; /* a hostile file's key: refused, no overflow */
    CHECK_EQ_INT(spex_qwen35_plan_compute(&in, &p), -1);
}

/* The plan from a loaded model's hyper-parameters equals what the library reports and
 * allocates (n_seq_max 2, n_rs_seq 3, F16 KV). */
TEST(plan_matches_the_library_on_the_fixture) {
    if (access(FIXTURE, R_OK) != 0) SKIP(FIXTURE " missing");
    spex_model *m = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_model_load(FIXTURE, NULL, &m, &err) == SPEX_OK, "%s", err.msg);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    int64_t n_attn = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) n_attn += !spex_model_layer_is_recurrent(m, l);
    spex_qwen35_plan_in in = {.n_layer = hp->n_layer, .n_attn = n_attn, .n_head_kv = hp->n_head_kv,
                              .head_dim = hp->head_dim, .ssm_n_group = hp->ssm_n_group,
                              .ssm_dt_rank = hp->ssm_dt_rank, .ssm_d_state = hp->ssm_d_state,
                              .ssm_d_conv = hp->ssm_d_conv, .n_max = 3};
    spex_qwen35_plan p;
    int rc = spex_qwen35_plan_compute(&in, &p);
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = 2;
    cp.n_ctx_per_seq = 64;
    cp.n_rs_seq = 3;
    cp.kv_type = SPEX_TYPE_F16;
    spex_context *c = NULL;
    spex_status s = spex_context_init(m, &cp, &c, &err);
    spex_memory_usage mu = {0};
    if (s == SPEX_OK) mu = spex_context_memory(c);
    const uint64_t lib_state = spex_model_recurrent_state_bytes(m);
    const int32_t n_rec = hp->n_recurrent;
    spex_context_free(c);
    spex_model_free(m);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(s == SPEX_OK, "%s", err.msg);
    CHECK_EQ_INT(n_attn, 2);
    CHECK_EQ_INT(p.n_gdn, n_rec);
    CHECK_EQ_INT(p.state, lib_state);
    CHECK_EQ_INT(p.state, 11264); /* 2 x 4 x 16 x 16 x 4 + 2 x 3 x 128 x 4 */
    CHECK_EQ_INT(mu.recurrent, 2 * p.snapshots);
    CHECK_EQ_INT(mu.kv, 2 * 64 * p.kv_per_token);
}

/* ---- spex inspect ---------------------------------------------------------------------- */

/* Runs `spex inspect ARGS` with stderr folded in; returns the exit status, output in buf. */
static int run_inspect(const char *args, char *buf, size_t cap) {
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "'%s' inspect %s 2>&1", test_spex_bin(), args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(inspect_prints_plan_and_verdict) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    if (access(FIXTURE, R_OK) != 0) SKIP(FIXTURE " missing");
    static char out[1 << 16];
    int rc = run_inspect(FIXTURE " --n-max 3", out, sizeof out);
    static const char *const want[] = {
        "qwen35 memory plan",
        "layers:      4 trunk: 2 attention, 2 Gated DeltaNet (full_attention_interval 2)",
        "attention:   [1, 3]",
        "MTP block:   yes: blk.4 (nextn_predict_layers 1), 15 tensors",
        "weights:     1069504 bytes",
        "KV cache:    512 bytes (512 B) per token at F16: 2 attention layers x 2 x 2 KV heads x 32 x 2 B",
        "recurrent:   11264 bytes (11.00 KiB) per sequence: S 8.00 KiB",
        "snapshots:   45056 bytes (44.00 KiB) per sequence for n_max 3",
        "verdict:     OK: structure valid; spex_model_load accepts it",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(out, want[i]), "missing '%s' in:\n%s", want[i], out);
    CHECK_EQ_INT(rc, 0);
    /* default n_max 7: 8 copies */
    rc = run_inspect(FIXTURE, out, sizeof out);
    CHECK_MSG(strstr(out, "snapshots:   90112 bytes"), "%s", out);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(run_inspect(FIXTURE " --n-max -1", out, sizeof out), 2);
}

/* A copy of the fixture without blk.0.ssm_a: the plan still prints (it needs keys only), the
 * verdict carries the loader's message and the exit status is 1. */
TEST(inspect_reports_the_loader_error) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    if (access(FIXTURE, R_OK) != 0) SKIP(FIXTURE " missing");
    spex_gguf *g = NULL;
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    const char *bad = test_tmp_path("no-ssm-a.gguf");
    CHECK_OK(spex_gguf_open(FIXTURE, &g, NULL));
    CHECK_OK(spex_gguf_writer_init(&w, NULL));
    spex_status s = SPEX_OK;
    for (int64_t i = 0; i < spex_gguf_n_kv(g) && s == SPEX_OK; i++) {
        spex_gguf_value v;
        spex_gguf_value_at(g, i, &v);
        s = spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &v);
    }
    for (int64_t i = 0; i < spex_gguf_n_tensors(g) && s == SPEX_OK; i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (!strcmp(t->name, "blk.0.ssm_a")) continue;
        s = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, &err);
    }
    if (s == SPEX_OK) s = spex_gguf_writer_write(w, bad, &err);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    CHECK_MSG(s == SPEX_OK, "%s", err.msg);
    static char out[1 << 16];
    int rc = run_inspect(bad, out, sizeof out);
    CHECK_EQ_INT(rc, 1);
    CHECK_MSG(strstr(out, "recurrent:   11264 bytes"), "%s", out);
    CHECK_MSG(strstr(out, "verdict:     INVALID: 1 problem"), "%s", out);
    CHECK_MSG(strstr(out, "spex_model_load: ") && strstr(out, "blk.0.ssm_a"), "%s", out);
}

TEST_MAIN()
