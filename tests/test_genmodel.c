/*
 * test_genmodel.c — `spex gen-model` (tools/genmodel.c): the random-weight qwen3 and qwen35
 * generator.
 *
 * Runs the spex binary of the same build folder (found next to this program: ../spex) on
 * the tiny shape and checks that: the file loads with spex_model_load with the tiny shape's
 * hyper-parameters and the Q4_K_M mix's tensor types; its gpt2 vocabulary loads and
 * round-trips text; a forward pass gives finite logits that vary over the vocabulary and
 * over positions; the F32, Q8_0 and Q4_K_M files hold the same underlying weights (their
 * logits correlate, more closely for more bits); the bytes are a pure function of the seed
 * (same seed, any thread count: identical files; another seed: different weights). For qwen35
 * (shape qwen35-tiny): the hybrid hyper-parameters, layer pattern and MTP block load; the
 * special GDN tensors hold the values of targets.md §11.4 in F32; the mix matches the
 * quantizer's (the generated Q4_K_M and Q8_0 files have the same tensor types and bytes as the
 * F32 file run through spex_quantize_file); a forward pass gives sane logits close to F32.
 * SKIPs when the spex binary is absent (built by `make tests`).
 */
#include "spex.h"
#include "test.h"

#include <limits.h>
#include <stdint.h>
#include <unistd.h>

static char g_tmp[64];

static void cleanup(void) {
    if (!g_tmp[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_tmp);
}

static const char *tmp_file(const char *name) {
    static char buf[4][160];
    static int k;
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "/tmp/spex_test_genmodel_XXXXXX");
        if (!mkdtemp(g_tmp)) return NULL;
        atexit(cleanup);
    }
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", g_tmp, name);
    return b;
}

/* Runs `spex gen-model --shape shape --type type --seed seed -t threads -o out`; true on success. */
static bool gen_shape(const char *shape, const char *type, int seed, int threads, const char *out) {
    const char *bin = test_spex_bin();
    if (!bin || !out) return false;
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "'%s' gen-model --shape %s --type %s --seed %d -t %d -o '%s' > /dev/null", bin, shape,
             type, seed, threads, out);
    return system(cmd) == 0;
}

static bool gen(const char *type, int seed, int threads, const char *out) {
    return gen_shape("tiny", type, seed, threads, out);
}


#define N_TOK 12
#define V_TINY 512

/* Logits [N_TOK][V] of a fixed 12-token prompt, one batch. */
static bool run_logits(const char *path, float *out) {
    spex_model *m = NULL;
    spex_context *c = NULL;
    spex_error err = {0};
    bool ok = spex_model_load(path, NULL, &m, &err) == SPEX_OK;
    spex_context_params p = spex_context_default_params();
    p.n_ctx_per_seq = 64;
    p.n_batch_max = N_TOK;
    p.n_outputs_max = N_TOK;
    p.n_threads = 2;
    p.kv_type = SPEX_TYPE_F32;
    ok = ok && spex_context_init(m, &p, &c, &err) == SPEX_OK;
    spex_batch_token t[N_TOK];
    for (int i = 0; i < N_TOK; i++) t[i] = (spex_batch_token){.token = (i * 37 + 5) % V_TINY, .pos = i, .logits = true};
    spex_batch b = {t, N_TOK};
    ok = ok && spex_forward(c, &b, &err) == SPEX_OK && spex_n_outputs(c) == N_TOK;
    for (int i = 0; ok && i < N_TOK; i++) memcpy(out + (size_t)i * V_TINY, spex_logits(c, i), V_TINY * sizeof(float));
    if (!ok) printf("  %s: %s\n", path, err.msg);
    spex_context_free(c);
    spex_model_free(m);
    return ok;
}

static double correlation(const float *a, const float *b, size_t n) {
    double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
    for (size_t i = 0; i < n; i++) {
        sa += a[i], sb += b[i];
        saa += (double)a[i] * a[i], sbb += (double)b[i] * b[i], sab += (double)a[i] * b[i];
    }
    double cov = sab - sa * sb / (double)n, va = saa - sa * sa / (double)n, vb = sbb - sb * sb / (double)n;
    return cov / sqrt(va * vb);
}

TEST(genmodel_tiny_loads_with_shape_and_mix) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f = tmp_file("q4km.gguf");
    CHECK(gen("q4_K_M", 1, 2, f));
    spex_model *m = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_model_load(f, NULL, &m, &err) == SPEX_OK, "%s", err.msg);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    int ok = hp->arch == SPEX_ARCH_QWEN3 && hp->n_embd == 256 && hp->n_layer == 2 && hp->n_head == 4 &&
             hp->n_head_kv == 2 && hp->head_dim == 64 && hp->n_ff == 512 && hp->n_vocab == V_TINY && hp->qk_norm &&
             !hp->tied_output && hp->rope_mode == 2 && fabsf(hp->rope_freq_base - 1e6f) < 1.0f;
    const spex_gguf *g = spex_model_gguf(m);
    /* the Q4_K_M mix: Q4_K base, Q6_K LM head, Q6_K attn_v/ffn_down in the last layer of 2 */
    const spex_tensor_info *q0 = spex_gguf_find_tensor(g, "blk.0.attn_q.weight");
    const spex_tensor_info *v0 = spex_gguf_find_tensor(g, "blk.0.attn_v.weight");
    const spex_tensor_info *v1 = spex_gguf_find_tensor(g, "blk.1.attn_v.weight");
    const spex_tensor_info *d1 = spex_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    const spex_tensor_info *out = spex_gguf_find_tensor(g, "output.weight");
    const spex_tensor_info *qn = spex_gguf_find_tensor(g, "blk.1.attn_q_norm.weight");
    ok = ok && q0 && v0 && v1 && d1 && out && qn;
    ok = ok && q0->type == SPEX_TYPE_Q4_K && v0->type == SPEX_TYPE_Q4_K && v1->type == SPEX_TYPE_Q6_K &&
         d1->type == SPEX_TYPE_Q6_K && out->type == SPEX_TYPE_Q6_K && qn->type == SPEX_TYPE_F32 &&
         ((const float *)qn->data)[63] == 1.0f;
    ok = ok && spex_gguf_n_tensors(g) == 3 + 11 * 2;

    spex_tokenizer *tk = NULL;
    bool tok_ok = spex_tokenizer_load_gguf(g, &tk, &err) == SPEX_OK;
    int32_t ids[64];
    int n_ids = 0;
    char back[64];
    size_t n_back = 0;
    const char *text = "Hello!! \"#world \xc3\xa9t\xc3\xa9"; /* "!!" and "\"#" are merges */
    tok_ok = tok_ok && spex_tokenizer_n_vocab(tk) == V_TINY &&
             spex_tokenize(tk, text, strlen(text), false, false, ids, 64, &n_ids, &err) == SPEX_OK &&
             n_ids == (int)strlen(text) - 2 && /* two merges applied */
             spex_detokenize(tk, ids, (size_t)n_ids, 0, back, sizeof back, &n_back, &err) == SPEX_OK &&
             n_back == strlen(text) && !memcmp(back, text, n_back) && spex_token_is_eog(tk, spex_token_eos(tk));
    if (!tok_ok) printf("  tokenizer: %d ids, %zu bytes back: %s\n", n_ids, n_back, err.msg);
    spex_tokenizer_free(tk);
    spex_model_free(m);
    CHECK_MSG(ok, "tiny q4_K_M: wrong hyper-parameters or tensor types");
    CHECK(tok_ok);
}

TEST(genmodel_forward_sane_and_types_agree) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f32 = tmp_file("f32.gguf"), *q8 = tmp_file("q8.gguf"), *q4 = tmp_file("q4.gguf");
    CHECK(gen("f32", 3, 2, f32) && gen("q8_0", 3, 2, q8) && gen("q4_K_M", 3, 2, q4));
    const size_t n = (size_t)N_TOK * V_TINY;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *d = malloc(n * sizeof *d);
    CHECK(a && b && d);
    bool ok = run_logits(f32, a) && run_logits(q8, b) && run_logits(q4, d);
    double mean = 0, var = 0, pos_diff = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(a[i]) && isfinite(b[i]) && isfinite(d[i]);
    for (size_t i = 0; i < n; i++) mean += a[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (a[i] - mean) * (a[i] - mean);
    double sd = sqrt(var / (double)n);
    for (int v = 0; v < V_TINY; v++) pos_diff += fabs(a[v] - a[(size_t)(N_TOK - 1) * V_TINY + v]);
    pos_diff /= V_TINY;
    double c8 = correlation(a, b, n), c4 = correlation(a, d, n);
    free(a);
    free(b);
    free(d);
    CHECK(ok);
    CHECK(finite);
    /* N(0, 0.02²) head over unit-RMS states: logits of standard deviation ~0.02·sqrt(256) */
    CHECK_MSG(sd > 0.05 && sd < 5.0, "logit standard deviation %g: degenerate or exploding", sd);
    CHECK_MSG(pos_diff > 0.01 * sd, "first and last positions give the same logits (%g)", pos_diff);
    CHECK_MSG(c8 > 0.999, "f32 vs q8_0 logits correlate only %.5f", c8);
    CHECK_MSG(c4 > 0.9 && c4 < c8, "f32 vs q4_K_M logits correlate %.5f (q8_0: %.5f)", c4, c8);
}

TEST(genmodel_deterministic_by_seed) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *a = tmp_file("s5a.gguf"), *b = tmp_file("s5b.gguf"), *c = tmp_file("s6.gguf");
    CHECK(gen("q8_0", 5, 1, a) && gen("q8_0", 5, 3, b) && gen("q8_0", 6, 2, c));
    size_t na = 0, nb = 0, nc = 0;
    uint8_t *ba = (uint8_t *)test_slurp(a, &na), *bb = (uint8_t *)test_slurp(b, &nb), *bc = (uint8_t *)test_slurp(c, &nc);
    bool same = ba && bb && na == nb && !memcmp(ba, bb, na);
    /* another seed: same size and metadata, different weights */
    size_t differ = 0;
    if (ba && bc && na == nc)
        for (size_t i = 0; i < na; i++) differ += ba[i] != bc[i];
    free(ba);
    free(bb);
    free(bc);
    CHECK_MSG(same, "seed 5 with 1 and 3 threads gave different files");
    CHECK_MSG(na == nc && differ > na / 2, "seed 6 differs from seed 5 in only %zu of %zu bytes", differ, na);
}

TEST(genmodel_rejects_bad_arguments) {
    const char *bin = test_spex_bin();
    if (!bin) SKIP("no spex binary next to the test folder (build it with make tests)");
    char cmd[PATH_MAX + 200];
    const char *bad[] = {"--shape qwen3-9b --type f16", "--shape tiny --type q3_K", "--shape tiny --type f16 --vocab 100",
                         "--shape tiny --type f16 --arch llama", "--shape qwen35-tiny --type f16 --arch qwen3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' gen-model %s -o '%s' 2>/dev/null", bin, bad[i], tmp_file("bad.gguf"));
        CHECK_MSG(system(cmd) != 0, "accepted: %s", bad[i]);
        CHECK_MSG(access(tmp_file("bad.gguf"), F_OK) != 0, "wrote a file for: %s", bad[i]);
    }
}

/* ---- qwen35 --------------------------------------------------------------------------- */

TEST(genmodel_qwen35_tiny_loads_with_pattern_mtp_and_mix) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f = tmp_file("q35-q4km.gguf");
    CHECK(gen_shape("qwen35-tiny", "q4_K_M", 1, 2, f));
    spex_model *m = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_model_load(f, NULL, &m, &err) == SPEX_OK, "%s", err.msg);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    int ok = hp->arch == SPEX_ARCH_QWEN35 && hp->n_embd == 256 && hp->n_layer == 4 && hp->n_nextn == 1 &&
             hp->n_recurrent == 2 && hp->n_head == 4 && hp->n_head_kv == 2 && hp->head_dim == 64 && hp->n_ff == 512 &&
             hp->n_vocab == V_TINY && hp->n_rot == 16 && hp->ssm_d_conv == 4 && hp->ssm_d_state == 64 &&
             hp->ssm_n_group == 2 && hp->ssm_dt_rank == 4 && hp->ssm_d_inner == 256 && hp->attn_gated &&
             !hp->tied_output && fabsf(hp->rope_freq_base - 1e7f) < 1.0f;
    /* interval 2: attention at 1 and 3 */
    ok = ok && spex_model_layer_is_recurrent(m, 0) && !spex_model_layer_is_recurrent(m, 1) &&
         spex_model_layer_is_recurrent(m, 2) && !spex_model_layer_is_recurrent(m, 3);
    const spex_gguf *g = spex_model_gguf(m);
    /* the Q4_K_M mix over block_count 5: more bits for ranks 2 and 4 (attn_v of the MTP block is
     * the 3rd attn_v, rank 2; ffn_down of layers 2 and 4); fused attn_qkv Q5_K */
    struct { const char *name; spex_type type; } want[] = {
        {"blk.0.ssm_conv1d.weight", SPEX_TYPE_F32}, {"blk.0.ssm_a", SPEX_TYPE_F32},
        {"blk.0.ssm_dt.bias", SPEX_TYPE_F32},       {"blk.0.ssm_norm.weight", SPEX_TYPE_F32},
        {"blk.0.attn_qkv.weight", SPEX_TYPE_Q5_K},  {"blk.0.ssm_beta.weight", SPEX_TYPE_Q4_K},
        {"blk.0.ssm_alpha.weight", SPEX_TYPE_Q4_K}, {"blk.0.ssm_out.weight", SPEX_TYPE_Q4_K},
        {"blk.1.attn_v.weight", SPEX_TYPE_Q4_K},    {"blk.4.attn_v.weight", SPEX_TYPE_Q6_K},
        {"blk.2.ffn_down.weight", SPEX_TYPE_Q6_K},  {"blk.4.ffn_down.weight", SPEX_TYPE_Q6_K},
        {"output.weight", SPEX_TYPE_Q6_K},          {"blk.4.nextn.eh_proj.weight", SPEX_TYPE_Q4_K},
        {"blk.4.nextn.enorm.weight", SPEX_TYPE_F32}, {"blk.4.attn_q_norm.weight", SPEX_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const spex_tensor_info *t = spex_gguf_find_tensor(g, want[i].name);
        if (!t || t->type != want[i].type) {
            printf("  %s: %s\n", want[i].name, t ? spex_type_get_info((int)t->type)->name : "missing");
            ok = 0;
        }
    }
    /* 2 GDN layers x 14 + 2 attention layers x 11 + MTP 15 + 3 globals */
    ok = ok && spex_gguf_n_tensors(g) == 2 * 14 + 2 * 11 + 15 + 3;
    /* targets.md §11.4: ssm_a = -A with A ~ U(1, 16); dt_bias 1; norms 1 */
    const spex_tensor_info *a = spex_gguf_find_tensor(g, "blk.2.ssm_a");
    const spex_tensor_info *dt = spex_gguf_find_tensor(g, "blk.2.ssm_dt.bias");
    const spex_tensor_info *sn = spex_gguf_find_tensor(g, "blk.2.ssm_norm.weight");
    ok = ok && a && dt && sn && a->n_dims == 1 && a->ne[0] == 4;
    for (int i = 0; ok && i < 4; i++) {
        float av = ((const float *)a->data)[i];
        ok = av <= -1.0f && av >= -16.0f && ((const float *)dt->data)[i] == 1.0f;
    }
    ok = ok && ((const float *)sn->data)[63] == 1.0f;
    spex_model_free(m);
    CHECK_MSG(ok, "qwen35-tiny q4_K_M: wrong hyper-parameters, pattern, tensor types or values");
}

/* gen-model's mix is the quantizer's: the same types and bytes as F32 + spex_quantize_file. */
TEST(genmodel_qwen35_mix_equals_quantizer) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f32 = tmp_file("q35-f32.gguf"), *direct = tmp_file("q35-direct.gguf"), *via = tmp_file("q35-via.gguf");
    static const char *const types[] = {"q4_K_M", "q8_0"};
    static const spex_ftype fts[] = {SPEX_FTYPE_Q4_K_M, SPEX_FTYPE_Q8_0};
    CHECK(gen_shape("qwen35-tiny", "f32", 9, 2, f32));
    for (int k = 0; k < 2; k++) {
        CHECK(gen_shape("qwen35-tiny", types[k], 9, 2, direct));
        spex_quantize_params qp = spex_quantize_default_params();
        qp.ftype = fts[k];
        qp.n_threads = 2;
        CHECK_OK(spex_quantize_file(f32, via, &qp, NULL));
        spex_gguf *a = NULL, *b = NULL;
        CHECK_OK(spex_gguf_open(direct, &a, NULL));
        CHECK_OK(spex_gguf_open(via, &b, NULL));
        int bad = spex_gguf_n_tensors(a) == spex_gguf_n_tensors(b) ? 0 : 1;
        for (int64_t i = 0; !bad && i < spex_gguf_n_tensors(a); i++) {
            const spex_tensor_info *ta = spex_gguf_tensor(a, i), *tb = spex_gguf_find_tensor(b, ta->name);
            if (!tb || ta->type != tb->type || ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, ta->nbytes)) {
                printf("  %s %s: generated %s, quantized %s%s\n", types[k], ta->name,
                       spex_type_get_info((int)ta->type)->name, tb ? spex_type_get_info((int)tb->type)->name : "-",
                       tb && ta->type == tb->type ? " (bytes differ)" : "");
                bad++;
            }
        }
        spex_gguf_close(a);
        spex_gguf_close(b);
        CHECK_EQ_INT(bad, 0);
    }
}

TEST(genmodel_qwen35_forward_sane_and_types_agree) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f32 = tmp_file("q35f.gguf"), *q8 = tmp_file("q35q8.gguf"), *q4 = tmp_file("q35q4.gguf");
    CHECK(gen_shape("qwen35-tiny", "f32", 3, 2, f32) && gen_shape("qwen35-tiny", "q8_0", 3, 2, q8) &&
          gen_shape("qwen35-tiny", "q4_K_M", 3, 2, q4));
    const size_t n = (size_t)N_TOK * V_TINY;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *d = malloc(n * sizeof *d);
    CHECK(a && b && d);
    bool ok = run_logits(f32, a) && run_logits(q8, b) && run_logits(q4, d);
    double mean = 0, var = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(a[i]) && isfinite(b[i]) && isfinite(d[i]);
    for (size_t i = 0; i < n; i++) mean += a[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (a[i] - mean) * (a[i] - mean);
    double sd = sqrt(var / (double)n), c8 = correlation(a, b, n), c4 = correlation(a, d, n);
    free(a);
    free(b);
    free(d);
    CHECK(ok);
    CHECK(finite);
    CHECK_MSG(sd > 0.05 && sd < 5.0, "logit standard deviation %g: degenerate or exploding", sd);
    printf("  qwen35-tiny: logit sd %.4f, f32 vs q8_0 correlation %.6f, vs q4_K_M %.5f\n", sd, c8, c4);
    CHECK_MSG(c8 > 0.999, "f32 vs q8_0 logits correlate only %.5f", c8);
    CHECK_MSG(c4 > 0.9 && c4 < c8, "f32 vs q4_K_M logits correlate %.5f (q8_0: %.5f)", c4, c8);
}

TEST_MAIN()
