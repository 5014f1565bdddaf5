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
 * DFlash2 drafters (`gen-model --drafter-for TARGET`, targets.md §11.3): for the tiny qwen3 and
 * qwen35 targets the drafter loads against its target with spex_drafter_load (every pair check
 * of dflash2.md §5), with the §11.3 hyper-parameters, the quantizer's Q4_K_M mix and near-identity
 * conv bases; one spex_draft_forward block gives finite logits, K candidates per slot and a
 * greedy walk; the generated Q4_K_M file equals the F32 one run through spex_quantize_file; and
 * `spex run -md` at temperature 0 prints exactly the target-alone text.
 * SKIPs when the spex binary is absent (built by `make tests`).
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "cpu/matmul.h"
#include "model/model.h"
#include "test.h"
#include "tensor/api.h"

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

/* Runs `spex gen-model --drafter-for target --type type --seed seed -o out`; true on success. */
static bool gen_drafter(const char *target, const char *type, int seed, const char *out) {
    const char *bin = test_spex_bin();
    if (!bin || !target || !out) return false;
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "'%s' gen-model --drafter-for '%s' --type %s --seed %d -t 2 -o '%s' > /dev/null", bin,
             target, type, seed, out);
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

/* Logits [N_TOK][V_TINY] of the fixed prompt, one batch then again one token at a time
 * (rows N_TOK..2*N_TOK-1), with or without the R16 repack; *tied_r16 = whether the tied
 * embedding table ended up in the R16 layout. */
static bool run_logits_repack(const char *path, bool no_repack, float *out, bool *tied_r16) {
    spex_model_params mp = spex_model_default_params();
    mp.no_repack = no_repack;
    spex_model *m = NULL;
    spex_context *c = NULL;
    spex_error err = {0};
    bool ok = spex_model_load(path, &mp, &m, &err) == SPEX_OK;
    spex_context_params p = spex_context_default_params();
    p.n_ctx_per_seq = 64;
    p.n_batch_max = N_TOK;
    p.n_outputs_max = N_TOK;
    p.n_threads = 2;
    ok = ok && spex_context_init(m, &p, &c, &err) == SPEX_OK;
    spex_batch_token t[N_TOK];
    for (int i = 0; i < N_TOK; i++) t[i] = (spex_batch_token){.token = (i * 37 + 5) % V_TINY, .pos = i, .logits = true};
    ok = ok && spex_forward(c, &(spex_batch){t, N_TOK}, &err) == SPEX_OK;
    for (int i = 0; ok && i < N_TOK; i++) memcpy(out + (size_t)i * V_TINY, spex_logits(c, i), V_TINY * sizeof(float));
    ok = ok && spex_kv_seq_truncate(c, 0, 0, &err) == SPEX_OK;
    for (int i = 0; ok && i < N_TOK; i++) {
        ok = spex_forward(c, &(spex_batch){&t[i], 1}, &err) == SPEX_OK;
        if (ok) memcpy(out + (size_t)(N_TOK + i) * V_TINY, spex_logits(c, 0), V_TINY * sizeof(float));
    }
    if (ok) *tied_r16 = m->tok_embd.r16 && m->output.r16 && m->tok_embd.data == m->output.data;
    if (!ok) printf("  %s: %s\n", path, err.msg);
    spex_context_free(c);
    spex_model_free(m);
    return ok;
}

/* A tied Q6_K head is repacked with its embedding table (read back through R16 units), and the
 * logits equal the unrepacked model's bit for bit, in a batch and token by token. */
TEST(genmodel_tied_head_repacked_bit_identical) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    const char *f = tmp_file("tied.gguf");
    CHECK(gen_shape("tiny-tied", "q4_K_M", 3, 2, f));
    float *a = malloc(sizeof(float) * 2 * N_TOK * V_TINY), *b = malloc(sizeof(float) * 2 * N_TOK * V_TINY);
    bool ra = false, rb = true;
    CHECK(run_logits_repack(f, false, a, &ra) && run_logits_repack(f, true, b, &rb));
    CHECK(!rb);
    CHECK_MSG(ra == spex_matmul_kernels_get()->r16_fast[SPEX_TYPE_Q6_K], "tied head repacked: %d", (int)ra);
    CHECK_MSG(!memcmp(a, b, sizeof(float) * 2 * N_TOK * V_TINY), "repacked tied model: logits differ");
    printf("  tied Q6_K head %s (ISA %s)\n", ra ? "repacked" : "kept", spex_isa_name(spex_cpu_isa()));
    free(a);
    free(b);
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

/* ---- DFlash2 drafters ------------------------------------------------------------------ */

static const char *const g_tiny_targets[2] = {"tiny", "qwen35-tiny"};

/* A loaded pair: the target, its drafter, a target context with the drafter's taps and a draft
 * context on the same pool. */
typedef struct pair {
    spex_model *m;
    spex_drafter *d;
    spex_context *c;
    spex_draft_context *dc;
} pair;

static void pair_free(pair *p) {
    spex_draft_context_free(p->dc);
    spex_context_free(p->c);
    spex_drafter_free(p->d);
    spex_model_free(p->m);
}

static spex_status pair_load(const char *tpath, const char *dpath, pair *p, spex_error *e) {
    memset(p, 0, sizeof *p);
    spex_status s = spex_model_load(tpath, NULL, &p->m, e);
    if (s == SPEX_OK) s = spex_drafter_load(dpath, p->m, NULL, &p->d, e);
    if (s != SPEX_OK) return s;
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(p->d);
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 64;
    cp.n_batch_max = N_TOK;
    cp.n_outputs_max = N_TOK;
    cp.n_threads = 2;
    cp.kv_type = SPEX_TYPE_F32;
    cp.tap_layers = dh->target_layers;
    cp.n_taps = dh->n_taps;
    if ((s = spex_context_init(p->m, &cp, &p->c, e)) != SPEX_OK) return s;
    spex_draft_context_params dp = spex_draft_context_default_params();
    dp.n_ctx_per_seq = 64;
    dp.kv_type = SPEX_TYPE_F32;
    dp.pool = spex_context_pool(p->c);
    return spex_draft_context_init(p->d, &dp, &p->dc, e);
}

TEST(genmodel_drafter_loads_against_its_target_and_drafts) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    for (int k = 0; k < 2; k++) {
        char tp[160], dp[160];
        snprintf(tp, sizeof tp, "%s", tmp_file("dt-target.gguf"));
        snprintf(dp, sizeof dp, "%s", tmp_file("dt-drafter.gguf"));
        CHECK(gen_shape(g_tiny_targets[k], "q8_0", 11, 2, tp));
        CHECK(gen_drafter(tp, "q4_K_M", 11, dp));
        pair p;
        spex_error e = {0};
        CHECK_OK(pair_load(tp, dp, &p, &e));
        /* targets.md §11.3 from the tiny target: D = E 256, F 512, heads 16/8 x 128, taps 1..N */
        const spex_drafter_hparams *dh = spex_drafter_get_hparams(p.d);
        const int n_taps = spex_model_get_hparams(p.m)->n_layer;   /* 2 (qwen3) or 4 (qwen35) trunk layers */
        int ok = dh->variant == SPEX_DFLASH2 && dh->n_layer == 5 && dh->n_embd == 256 && dh->n_ff == 512 &&
                 dh->n_head == 16 && dh->n_head_kv == 8 && dh->head_dim == 128 && dh->n_rot == 128 &&
                 dh->block_size == 8 && dh->conv_kernel == 2 && dh->conv_group == 16 && dh->selector_rank == 256 &&
                 dh->selector_top_k == 16 && dh->mask_token == V_TINY - 1 && dh->n_vocab == V_TINY && !dh->causal &&
                 dh->swa_window == 0 && dh->n_taps == n_taps;
        for (int i = 0; ok && i < n_taps; i++) ok = dh->target_layers[i] == i + 1;
        /* the Q4_K_M mix over dflash.block_count 5 (quantize_file.c): Q6_K attn_v / ffn_down in
         * layers 2 and 4, Q4_K elsewhere, F32 norms and 3-D conv bases near identity */
        const spex_gguf *g = spex_drafter_gguf(p.d);
        struct { const char *name; spex_type type; } want[] = {
            {"fc.weight", SPEX_TYPE_Q4_K},         {"selector_hidden.weight", SPEX_TYPE_Q4_K},
            {"selector_predecessor.weight", SPEX_TYPE_Q4_K}, {"blk.0.attn_v.weight", SPEX_TYPE_Q4_K},
            {"blk.2.attn_v.weight", SPEX_TYPE_Q6_K}, {"blk.4.ffn_down.weight", SPEX_TYPE_Q6_K},
            {"blk.3.ffn_down.weight", SPEX_TYPE_Q4_K}, {"blk.1.attn_conv_proj.weight", SPEX_TYPE_Q4_K},
            {"blk.4.ffn_conv_base", SPEX_TYPE_F32}, {"blk.4.attn_q_norm.weight", SPEX_TYPE_F32},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const spex_tensor_info *t = spex_gguf_find_tensor(g, want[i].name);
            if (!t || t->type != want[i].type) {
                printf("  %s: %s\n", want[i].name, t ? spex_type_get_info((int)t->type)->name : "missing");
                ok = 0;
            }
        }
        ok = ok && spex_gguf_n_tensors(g) == 15 * 5 + 6 && !spex_gguf_find_tensor(g, "token_embd.weight") &&
             !spex_gguf_find_tensor(g, "output.weight");
        const spex_tensor_info *cb = spex_gguf_find_tensor(g, "blk.0.attn_conv_base");
        ok = ok && cb && cb->n_dims == 3 && cb->ne[0] == 256 && cb->ne[1] == 2 && cb->ne[2] == 2;
        double dev = 0;
        for (int64_t i = 0; ok && i < 256 * 2 * 2; i++) {   /* base[s][t][c] at c + 256·(t + 2·s) */
            double x = ((const float *)cb->data)[i], want1 = (i / 256) % 2 == 0 ? 1.0 : 0.0;
            if (fabs(x - want1) > dev) dev = fabs(x - want1);
        }
        CHECK_MSG(ok, "%s drafter: wrong hyper-parameters, taps or tensor types", g_tiny_targets[k]);
        CHECK_MSG(dev > 0 && dev < 0.05, "conv base: max deviation %g from the identity (tap 0 = 1)", dev);

        /* one block: prompt through the target with taps, injection, a 7-slot draft */
        spex_batch_token bt[N_TOK];
        int32_t seqv[N_TOK], posv[N_TOK];
        for (int i = 0; i < N_TOK; i++) {
            bt[i] = (spex_batch_token){.token = (i * 37 + 5) % V_TINY, .pos = i, .logits = i == N_TOK - 1};
            seqv[i] = 0;
            posv[i] = i;
        }
        CHECK_OK(spex_forward(p.c, &(spex_batch){bt, N_TOK}, &e));
        CHECK_OK(spex_draft_inject(p.dc, spex_taps(p.c), (int64_t)dh->n_taps * dh->n_embd, seqv, posv, N_TOK, &e));
        spex_draft_block blk = {.seq = 0, .anchor = 42, .n = 7};
        CHECK_OK(spex_draft_forward(p.dc, &blk, 1, &e));
        int finite = 1, cands = 1;
        double sd = 0;
        for (int s = 1; s <= 7; s++) {
            const float *z = spex_draft_logits(p.dc, 0, s);
            const int32_t *ids;
            const float *U;
            finite &= z != NULL;
            for (int v = 0; finite && v < V_TINY; v++) {
                finite &= isfinite(z[v]);
                sd += (double)z[v] * z[v];
            }
            cands &= spex_draft_candidates(p.dc, 0, s, &ids, &U) == 16;
            for (int j = 0; cands && j < 16; j++) cands &= ids[j] >= 0 && ids[j] < V_TINY && isfinite(U[j]);
        }
        sd = sqrt(sd / (7.0 * V_TINY));
        spex_draft walk;
        CHECK_OK(spex_draft_walk(p.dc, 0, 0.0f, 0.0f, NULL, &walk, &e));
        printf("  %s: taps [1..%d], draft logit rms %.3f, greedy walk of %d tokens\n", g_tiny_targets[k], n_taps, sd,
               walk.n);
        pair_free(&p);
        CHECK(finite && cands);
        CHECK_MSG(sd > 0.01 && sd < 10, "draft logits rms %g: degenerate or exploding", sd);
        CHECK(walk.n == 7);
    }
}

/* The drafter's mix is the quantizer's: `--type q4_K_M` equals f32 + spex_quantize_file. */
TEST(genmodel_drafter_mix_equals_quantizer) {
    if (!test_spex_bin()) SKIP("no spex binary next to the test folder (build it with make tests)");
    char tp[160], f32[160], direct[160], via[160];
    snprintf(tp, sizeof tp, "%s", tmp_file("dq-target.gguf"));
    snprintf(f32, sizeof f32, "%s", tmp_file("dq-f32.gguf"));
    snprintf(direct, sizeof direct, "%s", tmp_file("dq-direct.gguf"));
    snprintf(via, sizeof via, "%s", tmp_file("dq-via.gguf"));
    CHECK(gen_shape("qwen35-tiny", "q4_K_M", 2, 2, tp));
    CHECK(gen_drafter(tp, "f32", 2, f32) && gen_drafter(tp, "q4_K_M", 2, direct));
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = SPEX_FTYPE_Q4_K_M;
    qp.n_threads = 2;
    CHECK_OK(spex_quantize_file(f32, via, &qp, NULL));
    spex_gguf *a = NULL, *b = NULL;
    CHECK_OK(spex_gguf_open(direct, &a, NULL));
    CHECK_OK(spex_gguf_open(via, &b, NULL));
    int bad = spex_gguf_n_tensors(a) == spex_gguf_n_tensors(b) ? 0 : 1;
    for (int64_t i = 0; !bad && i < spex_gguf_n_tensors(a); i++) {
        const spex_tensor_info *ta = spex_gguf_tensor(a, i), *tb = spex_gguf_find_tensor(b, ta->name);
        if (!tb || ta->type != tb->type || ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, ta->nbytes)) {
            printf("  %s: generated %s, quantized %s%s\n", ta->name, spex_type_get_info((int)ta->type)->name,
                   tb ? spex_type_get_info((int)tb->type)->name : "-",
                   tb && ta->type == tb->type ? " (bytes differ)" : "");
            bad++;
        }
    }
    spex_gguf_close(a);
    spex_gguf_close(b);
    CHECK_EQ_INT(bad, 0);
}

/* Speculative greedy decoding with the random drafter prints the target-alone text (nothing is
 * accepted, so every token comes from a verify row; the text must still be the same). */
TEST(genmodel_drafter_spec_run_same_text) {
    const char *bin = test_spex_bin();
    if (!bin) SKIP("no spex binary next to the test folder (build it with make tests)");
    /* own copies: tmp_file's buffers are reused after four calls */
    char tp[160], dp[160], o[2][160], ep[160];
    snprintf(tp, sizeof tp, "%s", tmp_file("sr-target.gguf"));
    snprintf(dp, sizeof dp, "%s", tmp_file("sr-drafter.gguf"));
    snprintf(o[0], sizeof o[0], "%s", tmp_file("sr-ar.txt"));
    snprintf(o[1], sizeof o[1], "%s", tmp_file("sr-spec.txt"));
    snprintf(ep, sizeof ep, "%s", tmp_file("sr-err.txt"));
    for (int k = 0; k < 2; k++) {
        CHECK(gen_shape(g_tiny_targets[k], "q8_0", 4, 2, tp));
        CHECK(gen_drafter(tp, "q8_0", 4, dp));
        char *out[2] = {0}, *err = NULL;
        size_t n_out[2] = {0}, n_err = 0;
        for (int spec = 0; spec < 2; spec++) {
            char cmd[PATH_MAX + 1024];
            snprintf(cmd, sizeof cmd, "'%s' run -m '%s'%s%s%s -p 'Hello world, this is' -n 16 --temp 0 -t 2 > '%s' 2> '%s'",
                     bin, tp, spec ? " -md '" : "", spec ? dp : "", spec ? "'" : "", o[spec], ep);
            CHECK_MSG(system(cmd) == 0, "failed: %s", cmd);
            out[spec] = test_slurp(o[spec], &n_out[spec]);
            if (spec) err = test_slurp(ep, &n_err);
        }
        bool same = out[0] && out[1] && n_out[0] > 0 && n_out[0] == n_out[1] && !memcmp(out[0], out[1], n_out[0]);
        bool drafted = err && strstr(err, "speculative: dflash2") && strstr(err, "draft acceptance rate");
        const char *acc = err ? strstr(err, "draft acceptance rate") : NULL;
        printf("  %s: %zu bytes of text, %s; %.*s\n", g_tiny_targets[k], n_out[0], same ? "same" : "DIFFERENT",
               acc ? (int)strcspn(acc, "\n") : 0, acc ? acc : "");
        free(out[0]);
        free(out[1]);
        free(err);
        CHECK(same);
        CHECK_MSG(drafted, "spex run -md did not run the dflash2 path");
    }
}

TEST(genmodel_drafter_rejects_bad_arguments) {
    const char *bin = test_spex_bin();
    if (!bin) SKIP("no spex binary next to the test folder (build it with make tests)");
    char tp[160], dp[160], a[5][400];
    snprintf(tp, sizeof tp, "%s", tmp_file("rb-target.gguf"));
    snprintf(dp, sizeof dp, "%s", tmp_file("rb-drafter.gguf"));
    CHECK(gen_shape("tiny", "f16", 1, 2, tp) && gen_drafter(tp, "f16", 1, dp));
    snprintf(a[0], sizeof a[0], "--drafter-for '%s' --shape tiny --type f16", tp);   /* both modes */
    snprintf(a[1], sizeof a[1], "--drafter-for '%s' --type f16 --vocab 600", tp);    /* the target's V */
    snprintf(a[2], sizeof a[2], "--drafter-for '%s' --type q3_K", tp);
    snprintf(a[3], sizeof a[3], "--drafter-for '%s' --type f16", dp);                /* not a target */
    snprintf(a[4], sizeof a[4], "--drafter-for /nonexistent/t.gguf --type f16");
    for (int i = 0; i < 5; i++) {
        char cmd[PATH_MAX + 800];
        snprintf(cmd, sizeof cmd, "'%s' gen-model %s -o '%s' 2>/dev/null", bin, a[i], tmp_file("bad.gguf"));
        CHECK_MSG(system(cmd) != 0, "accepted: %s", a[i]);
        CHECK_MSG(access(tmp_file("bad.gguf"), F_OK) != 0, "wrote a file for: %s", a[i]);
    }
}

TEST_MAIN()
