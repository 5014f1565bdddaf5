/*
 * test_dflash_load.c — loading and §5 validation of DFlash drafters (src/model/dflash_load.c;
 * ../shared/docs/dflash2.md §2–§5; issue 4 test 6 "Bad drafter files and mismatched pairs:
 * each a clear error, no crash").
 *
 * What it covers: both fixtures of tests/data/dflash/ against tests/data/models/tiny-qwen3.gguf
 * with every hyper-parameter of tools/ref/README.md "DFlash drafter fixtures"; the 25
 * corrupted copies the reference refuses (tools/ref/make_dflash_fixtures.py
 * check_validation) plus a few spex-only limits, each refused with a message naming the key
 * or tensor; the variants the reference accepts; a mismatched pair; every truncation of the
 * drafter file; the override syntax. What it does not cover: the forward (test_dflash*.c).
 *
 * Corrupted copies are written with spex's own GGUF writer: the fixture's keys and tensors
 * copied verbatim, one key or tensor changed. SPEX_TEST_VERBOSE=1 prints each refusal.
 * The fuzz seeds (fuzz/corpus/dflash) are generated here too (case corpus_seeds;
 * SPEX_REGEN_CORPUS=1 rewrites them).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "model/dflash.h"
#include "test.h"
#include "tensor/api.h"

#include <stdint.h>

#define TARGET "tests/data/models/tiny-qwen3.gguf"
#define DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define DRAFT1 "tests/data/dflash/tiny-qwen3.dflash1.gguf"

static spex_model *load_target(const char *path) {
    spex_model *m = NULL;
    spex_error err = {0};
    if (spex_model_load(path, NULL, &m, &err) != SPEX_OK) printf("  target %s: %s\n", path, err.msg);
    return m;
}

/* ---- corrupted copies ------------------------------------------------------------------ */

typedef void (*edit_fn)(spex_gguf_writer *w);

typedef struct edit {
    const char *drop_key;
    edit_fn set;                 /* called after the fixture's keys are copied (replaces)   */
    const char *drop_tensor;
    const char *f16_tensor;      /* rewritten as F16                                       */
    const char *add_tensor;      /* an extra F32 tensor {4}                                */
} edit;

/* Writes a copy of src with `e` applied; returns its path (NULL on failure). */
static const char *write_variant(const char *src, const edit *e) {
    spex_error err = {0};
    spex_gguf *g = NULL;
    spex_gguf_writer *w = NULL;
    const char *out = test_tmp_path("variant.gguf");
    float *f16 = NULL;
    static const float zeros[4] = {0};
    if (spex_gguf_open(src, &g, &err) != SPEX_OK || spex_gguf_writer_init(&w, &err) != SPEX_OK) goto fail;
    for (int64_t i = 0; i < spex_gguf_n_kv(g); i++) {
        const char *key = spex_gguf_key(g, i);
        if (e->drop_key && !strcmp(key, e->drop_key)) continue;
        spex_gguf_value v;
        if (spex_gguf_value_at(g, i, &v) != SPEX_OK || spex_gguf_writer_set_value(w, key, &v) != SPEX_OK) goto fail;
    }
    if (e->set) e->set(w);
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        spex_type type = t->type;
        if (e->f16_tensor && !strcmp(t->name, e->f16_tensor)) {
            int64_t n = (int64_t)(t->nbytes / sizeof(float));
            f16 = malloc((size_t)n * 2);
            if (!f16 || spex_quantize_row_ref(SPEX_TYPE_F16, t->data, f16, n) != SPEX_OK) goto fail;
            data = f16;
            nbytes = (uint64_t)n * 2;
            type = SPEX_TYPE_F16;
        }
        if (spex_gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, data, nbytes, &err) != SPEX_OK) goto fail;
    }
    if (e->add_tensor) {
        const int64_t ne[1] = {4};
        if (spex_gguf_writer_add_tensor(w, e->add_tensor, SPEX_TYPE_F32, 1, ne, zeros, sizeof zeros, &err) != SPEX_OK)
            goto fail;
    }
    if (spex_gguf_writer_write(w, out, &err) != SPEX_OK) goto fail;
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    free(f16);
    return out;
fail:
    printf("  write_variant(%s): %s\n", src, err.msg);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    free(f16);
    return NULL;
}

static void set_arch(spex_gguf_writer *w) { spex_gguf_writer_set_str(w, "general.architecture", "llama", 5); }
static void set_anchor(spex_gguf_writer *w) { spex_gguf_writer_set_bool(w, "dflash.sample_from_anchor", true); }
static void set_conf_head(spex_gguf_writer *w) { spex_gguf_writer_set_bool(w, "dflash.has_confidence_head", true); }
static void set_topk0(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.selector_top_k", 0); }
static void set_mask256(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 256); }
static void set_d32(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.embedding_length", 32); }
static void set_tap4(spex_gguf_writer *w) {
    const int32_t t[3] = {1, 2, 4};
    spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_I32, t, 3);
}
static void set_tap_dup(spex_gguf_writer *w) {
    const int32_t t[3] = {1, 1, 3};
    spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_I32, t, 3);
}
static void set_tap_neg(spex_gguf_writer *w) {
    const int32_t t[3] = {1, -1, 3};
    spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_I32, t, 3);
}
static void set_group24(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.conv_group_size", 24); }
static void set_block1(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.block_size", 1); }
static void set_block40(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.block_size", 40); }
static void set_vlen8(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.attention.value_length", 8); }
static void set_nrot15(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.rope.dimension_count", 15); }
static void set_sections_bad(spex_gguf_writer *w) {
    const int32_t s[4] = {4, 4, 0, 0};
    spex_gguf_writer_set_arr(w, "dflash.rope.dimension_sections", SPEX_GGUF_I32, s, 4);
}
static void set_sections_ok(spex_gguf_writer *w) {
    const int32_t s[4] = {8, 0, 0, 0};
    spex_gguf_writer_set_arr(w, "dflash.rope.dimension_sections", SPEX_GGUF_I32, s, 4);
}
static void set_tokens255(spex_gguf_writer *w) {
    spex_str s[255];
    for (int i = 0; i < 255; i++) s[i] = (spex_str){"a", 1};
    spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", s, 255);
}
static void set_topk257(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.selector_top_k", 257); }
static void set_topk65(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.selector_top_k", 65); }
static void set_count_f32(spex_gguf_writer *w) { spex_gguf_writer_set_f32(w, "dflash.block_count", 2.0f); }
static void set_eps_int(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.attention.layer_norm_rms_epsilon", 1); }
static void set_pattern_short(spex_gguf_writer *w) {
    const uint8_t p[1] = {1};
    spex_gguf_writer_set_arr(w, "dflash.attention.sliding_window_pattern", SPEX_GGUF_BOOL, p, 1);
}
static void set_hkv3(spex_gguf_writer *w) { spex_gguf_writer_set_u32(w, "dflash.attention.head_count_kv", 3); }
static void set_count_i64(spex_gguf_writer *w) { spex_gguf_writer_set_i64(w, "dflash.block_count", 2); }
static void set_topk_u8(spex_gguf_writer *w) { spex_gguf_writer_set_u8(w, "dflash.selector_top_k", 4); }
static void set_causal_str(spex_gguf_writer *w) { spex_gguf_writer_set_str(w, "dflash.attention.causal", "true", 4); }
static void set_causal_str_no(spex_gguf_writer *w) { spex_gguf_writer_set_str(w, "dflash.attention.causal", "yes", 3); }
static void set_taps_u8(spex_gguf_writer *w) {
    const uint8_t t[3] = {1, 2, 3};
    spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_U8, t, 3);
}
static void drop_pattern_set(spex_gguf_writer *w) { (void)w; }

typedef struct bad_case {
    const char *what;
    edit e;
    const char *expect;   /* substring of the message (the key or tensor) */
} bad_case;

static const bad_case bad_cases[] = {
    /* the reference's 25 (make_dflash_fixtures.py check_validation) */
    {"arch", {.set = set_arch}, "general.architecture"},
    {"DSpark tensor", {.add_tensor = "markov_w1.weight"}, "DSpark drafters are not supported"},
    {"DSpark key", {.set = set_anchor}, "dflash.sample_from_anchor"},
    {"top_k without selector", {.drop_tensor = "selector_hidden.weight"}, "dflash.selector_top_k"},
    {"top_k 0 with selector", {.set = set_topk0}, "dflash.selector_top_k"},
    {"block_count missing", {.drop_key = "dflash.block_count"}, "dflash.block_count"},
    {"mask missing", {.drop_key = "tokenizer.ggml.mask_token_id"}, "tokenizer.ggml.mask_token_id"},
    {"mask out of vocab", {.set = set_mask256}, "tokenizer.ggml.mask_token_id"},
    {"D mismatch", {.set = set_d32}, "dflash.embedding_length 32 != target"},
    {"tap beyond target", {.set = set_tap4}, "dflash.target_layers"},
    {"duplicate tap", {.set = set_tap_dup}, "dflash.target_layers"},
    {"group size", {.set = set_group24}, "dflash.conv_group_size"},
    {"block_size 1", {.set = set_block1}, "dflash.block_size"},
    {"block_size missing", {.drop_key = "dflash.block_size"}, "dflash.block_size"},
    {"value_length", {.set = set_vlen8}, "dflash.attention.value_length"},
    {"odd n_rot", {.set = set_nrot15}, "dflash.rope.dimension_count"},
    {"sections", {.set = set_sections_bad}, "dflash.rope.dimension_sections"},
    {"conv base missing", {.drop_tensor = "blk.1.ffn_conv_base"}, "blk.1.ffn_conv_base"},
    {"conv base F16", {.f16_tensor = "blk.0.attn_conv_base"}, "blk.0.attn_conv_base"},
    {"norm F16", {.f16_tensor = "blk.0.attn_norm.weight"}, "blk.0.attn_norm.weight"},
    {"d2t", {.add_tensor = "d2t"}, "d2t"},
    {"sinks in DFlash2", {.add_tensor = "blk.0.attn_sinks.weight"}, "blk.0.attn_sinks.weight"},
    {"vocab mismatch", {.set = set_tokens255}, "tokenizer.ggml.tokens"},
    {"top_k > V", {.set = set_topk257}, "dflash.selector_top_k"},
    {"float as integer", {.set = set_count_f32}, "dflash.block_count"},
    /* spex-only limits and a few more */
    {"DSpark confidence head", {.set = set_conf_head}, "dflash.has_confidence_head"},
    {"negative tap", {.set = set_tap_neg}, "dflash.target_layers"},
    {"block_size above SPEX_DRAFT_MAX_N + 1", {.set = set_block40}, "dflash.block_size"},
    {"top_k above SPEX_DRAFT_MAX_K", {.set = set_topk65}, "dflash.selector_top_k"},
    {"integer as float", {.set = set_eps_int}, "dflash.attention.layer_norm_rms_epsilon"},
    {"short swa pattern", {.set = set_pattern_short}, "dflash.attention.sliding_window_pattern"},
    {"H % H_kv", {.set = set_hkv3}, "head_count_kv"},
    {"selector table missing", {.drop_tensor = "selector_successor.weight"}, "selector_successor.weight"},
    {"fc missing", {.drop_tensor = "fc.weight"}, "fc.weight"},
    {"q_norm missing", {.drop_tensor = "blk.1.attn_q_norm.weight"}, "blk.1.attn_q_norm.weight"},
    {"eps missing", {.drop_key = "dflash.attention.layer_norm_rms_epsilon"}, "layer_norm_rms_epsilon"},
    {"taps missing", {.drop_key = "dflash.target_layers"}, "dflash.target_layers"},
};

TEST(fixture_dflash2_hparams) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    spex_drafter *d = NULL;
    spex_error err = {0};
    spex_status s = spex_drafter_load(DRAFT2, t, NULL, &d, &err);
    if (s != SPEX_OK) spex_model_free(t);
    CHECK_MSG(s == SPEX_OK, "%s", err.msg);
    const spex_drafter_hparams *hp = spex_drafter_get_hparams(d);
    int bad = 0;
#define EQ(a, b) do { if ((long long)(a) != (long long)(b)) { printf("  %s: %lld != %lld\n", #a, (long long)(a), (long long)(b)); bad++; } } while (0)
    EQ(hp->variant, SPEX_DFLASH2);
    EQ(hp->n_layer, 2); EQ(hp->n_embd, 64); EQ(hp->n_ff, 96);
    EQ(hp->n_head, 4); EQ(hp->n_head_kv, 2); EQ(hp->head_dim, 16); EQ(hp->n_rot, 16);
    EQ(hp->n_taps, 3); EQ(hp->target_layers[0], 1); EQ(hp->target_layers[1], 2); EQ(hp->target_layers[2], 3);
    EQ(hp->block_size, 8); EQ(hp->mask_token, 250); EQ(hp->swa_window, 10);
    EQ(hp->swa_layer[0], 1); EQ(hp->swa_layer[1], 0); EQ(hp->causal, 0);
    EQ(hp->conv_kernel, 2); EQ(hp->conv_group, 16); EQ(hp->selector_rank, 8); EQ(hp->selector_top_k, 4);
    EQ(hp->n_vocab, 256);
    if (hp->logit_scale != 1.25f || hp->softcap != 6.0f || hp->input_embd_scale != 1.0f ||
        hp->rope_freq_base != 1e6f || fabsf(hp->rms_eps - 1e-6f) > 1e-12f) {
        printf("  floats: scale %g cap %g emb %g base %g eps %g\n", hp->logit_scale, hp->softcap,
               hp->input_embd_scale, hp->rope_freq_base, hp->rms_eps);
        bad++;
    }
    /* borrowed head and embedding: the target's (tiny-qwen3 is untied) */
    const spex_model *tm = spex_drafter_target(d);
    if (d->tok_embd.t != spex_model_token_embd(tm) || d->head.t != spex_model_lm_head(tm)) bad++;
    if (d->head.n_in != 64 || d->head.n_out != 256 || d->fc.n_in != 192 || d->fc.n_out != 64) bad++;
    if (d->fc_scale != 1.0f || !d->sel_pred.t || d->sel_pred.n_in != 8 || d->sel_pred.n_out != 256) bad++;
    /* own tensors only: the file's 36 tensors, all F32 */
    uint64_t own = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(spex_drafter_gguf(d)); i++)
        own += spex_gguf_tensor(spex_drafter_gguf(d), i)->nbytes;
    EQ(spex_drafter_weight_bytes(d), own);
    EQ(spex_gguf_n_tensors(spex_drafter_gguf(d)), 36);
    char line[256];
    spex_drafter_describe(d, line, sizeof line);
    if (strcmp(line, "dflash2: layers=2 D=64 taps=[1,2,3] block=8 conv=2/16 rank=8 top_k=4 mask=250 swa=10 causal=0")) {
        printf("  describe: %s\n", line);
        bad++;
    }
    /* a codebook row through the row gatherer equals the raw f32 row */
    float row[8];
    spex_model_weight_row(&d->sel_succ, 200, row);
    if (memcmp(row, (const float *)d->sel_succ.data + 200 * 8, sizeof row)) bad++;
    spex_drafter_free(d);
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

TEST(fixture_dflash1_hparams) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    spex_drafter *d = NULL;
    spex_error err = {0};
    spex_drafter_params p = spex_drafter_default_params();
    spex_status s = spex_drafter_load(DRAFT1, t, &p, &d, &err);
    if (s != SPEX_OK) spex_model_free(t);
    CHECK_MSG(s == SPEX_OK, "%s", err.msg);
    const spex_drafter_hparams *hp = spex_drafter_get_hparams(d);
    int bad = 0;
    EQ(hp->variant, SPEX_DFLASH_V1);
    EQ(hp->n_layer, 1); EQ(hp->n_embd, 64); EQ(hp->n_ff, 64);
    EQ(hp->n_head, 2); EQ(hp->n_head_kv, 1); EQ(hp->head_dim, 32); EQ(hp->n_rot, 32);
    EQ(hp->n_taps, 2); EQ(hp->target_layers[0], 1); EQ(hp->target_layers[1], 3);
    EQ(hp->block_size, 16); EQ(hp->mask_token, 3); EQ(hp->swa_window, 0); EQ(hp->swa_layer[0], 0);
    EQ(hp->causal, 0); EQ(hp->selector_top_k, 0); EQ(hp->conv_kernel, 0);
    EQ(hp->n_vocab, 256);
    if (hp->logit_scale != 0.0f || hp->softcap != 0.0f || hp->rope_freq_base != 100.0f) bad++;
    if (d->sel_hidden.t || d->layers[0].attn_conv_base || d->layers[0].ffn_conv_proj.t) bad++;
    const spex_model *tm = spex_drafter_target(d);
    if (d->tok_embd.t != spex_model_token_embd(tm) || d->head.t != spex_model_lm_head(tm)) bad++;
    if (d->fc.n_in != 128) bad++;
    char line[256];
    spex_drafter_describe(d, line, sizeof line);
    if (strcmp(line, "dflash1: layers=1 D=64 taps=[1,3] block=16 mask=3 swa=0 causal=0")) {
        printf("  describe: %s\n", line);
        bad++;
    }
    spex_drafter_free(d);
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

static void capture_log(void *user, const char *line) {
    char *buf = user;
    size_t o = strlen(buf);
    snprintf(buf + o, 1024 - o, "%s\n", line);
}

TEST(verbose_logs_summary_line) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    char buf[1024] = "";
    spex_drafter_params p = spex_drafter_default_params();
    p.verbose = true;
    p.log = capture_log;
    p.log_user = buf;
    spex_drafter *d = NULL;
    spex_error err = {0};
    spex_status s = spex_drafter_load(DRAFT2, t, &p, &d, &err);
    spex_drafter_free(d);
    spex_model_free(t);
    CHECK_MSG(s == SPEX_OK, "%s", err.msg);
    CHECK_MSG(strstr(buf, "dflash2: layers=2 D=64 taps=[1,2,3] block=8"), "log: %s", buf);
}

TEST(corrupted_drafters_refused) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    int bad = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        const char *p = write_variant(DRAFT2, &c->e);
        if (!p) { bad++; continue; }
        spex_drafter *d = NULL;
        spex_error err = {0};
        spex_status s = spex_drafter_load(p, t, NULL, &d, &err);
        if (s == SPEX_OK || d) {
            printf("  %s: accepted\n", c->what);
            spex_drafter_free(d);
            bad++;
            continue;
        }
        if (getenv("SPEX_TEST_VERBOSE")) printf("  %-28s %s\n", c->what, err.msg);
        if (!strstr(err.msg, c->expect) || !strstr(err.msg, "variant.gguf")) {
            printf("  %s: message '%s' lacks '%s'\n", c->what, err.msg, c->expect);
            bad++;
        }
    }
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

TEST(accepted_variants) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    static const struct { const char *what; edit e; } ok[] = {
        {"i64 block_count", {.set = set_count_i64}},
        {"u8 top_k", {.set = set_topk_u8}},
        {"degenerate sections", {.set = set_sections_ok}},
        {"u8 target_layers", {.set = set_taps_u8}},
        {"causal as the string true", {.set = set_causal_str}},
        {"causal as another string", {.set = set_causal_str_no}},
        {"no swa pattern", {.drop_key = "dflash.attention.sliding_window_pattern", .set = drop_pattern_set}},
        {"no draft tokenizer", {.drop_key = "tokenizer.ggml.tokens"}},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const char *p = write_variant(DRAFT2, &ok[i].e);
        spex_drafter *d = NULL;
        spex_error err = {0};
        if (!p || spex_drafter_load(p, t, NULL, &d, &err) != SPEX_OK) {
            printf("  %s: refused: %s\n", ok[i].what, err.msg);
            bad++;
            continue;
        }
        const spex_drafter_hparams *hp = spex_drafter_get_hparams(d);
        if (i == 4 && !hp->causal) { printf("  causal \"true\" not causal\n"); bad++; }
        if (i == 5 && hp->causal) { printf("  causal \"yes\" causal\n"); bad++; }
        if (i == 6 && !(hp->swa_layer[0] && hp->swa_layer[1])) { printf("  no pattern: not all SWA\n"); bad++; }
        if (hp->n_layer != 2 || hp->selector_top_k != 4 || hp->n_taps != 3 || hp->target_layers[2] != 3) bad++;
        spex_drafter_free(d);
    }
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

TEST(v1_with_sinks_refused) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    const edit e = {.add_tensor = "blk.0.attn_sinks.weight"};
    const char *p = write_variant(DRAFT1, &e);
    spex_drafter *d = NULL;
    spex_error err = {0};
    spex_status s = p ? spex_drafter_load(p, t, NULL, &d, &err) : SPEX_ERR_IO;
    spex_drafter_free(d);
    spex_model_free(t);
    CHECK(p);
    CHECK_EQ_INT(s, SPEX_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "blk.0.attn_sinks.weight") && strstr(err.msg, "sinks"), "%s", err.msg);
}

TEST(mismatched_pair_names_both_files) {
    spex_model *t = load_target("tests/data/models/tiny-llama-tied.gguf");
    CHECK(t);
    spex_drafter *d = NULL;
    spex_error err = {0};
    spex_status s = spex_drafter_load(DRAFT2, t, NULL, &d, &err);
    spex_drafter_free(d);
    spex_model_free(t);
    CHECK(s != SPEX_OK && !d);
    CHECK_MSG(strstr(err.msg, "tiny-qwen3.dflash2.gguf") && strstr(err.msg, "tiny-llama-tied.gguf"), "%s", err.msg);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

TEST(truncated_drafters_fail_cleanly) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    int bad = 0;
    size_t checked = 0;
    for (int f = 0; f < 2; f++) {
        size_t n = 0;
        uint8_t *buf = read_all(f ? DRAFT1 : DRAFT2, &n);
        if (!buf) { bad++; continue; }
        /* every length of the header region, then steps through the tensor data */
        size_t data_off = 0;
        spex_gguf *g0 = NULL;
        if (spex_gguf_open_memory(buf, n, "full", &g0, NULL) == SPEX_OK) data_off = spex_gguf_data_offset(g0);
        spex_gguf_close(g0);
        for (size_t len = 0; len < n; len += len < data_off + 64 ? 1 : 509) {
            uint8_t *cut = malloc(len ? len : 1);
            memcpy(cut, buf, len);
            spex_gguf *g = NULL;
            spex_error err = {0};
            spex_drafter *d = NULL;
            spex_status s = spex_gguf_open_memory(cut, len, "cut.gguf", &g, &err);
            if (s == SPEX_OK) s = spex_drafter_load_gguf(g, t, NULL, &d, &err);
            if (s == SPEX_OK || d || !err.msg[0]) bad++;
            spex_drafter_free(d);
            free(cut);
            checked++;
        }
        /* the whole file loads from memory */
        spex_gguf *g = NULL;
        spex_drafter *d = NULL;
        spex_error err = {0};
        if (spex_gguf_open_memory(buf, n, "whole.gguf", &g, &err) != SPEX_OK ||
            spex_drafter_load_gguf(g, t, NULL, &d, &err) != SPEX_OK) {
            printf("  whole file from memory: %s\n", err.msg);
            bad++;
        }
        spex_drafter_free(d);
        free(buf);
    }
    spex_model_free(t);
    CHECK_MSG(bad == 0, "%d of %zu truncations misbehaved", bad, checked);
    CHECK(checked > 1000);
}

TEST(overrides) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    int bad = 0;
    spex_drafter_params p = spex_drafter_default_params();
    const char *ok[] = {"dflash.block_size=int:6", "dflash.attention.causal=bool:true",
                        "dflash.logit_scale=float:0.5"};
    p.overrides = ok;
    p.n_overrides = 3;
    spex_drafter *d = NULL;
    spex_error err = {0};
    if (spex_drafter_load(DRAFT2, t, &p, &d, &err) != SPEX_OK) {
        printf("  good overrides: %s\n", err.msg);
        bad++;
    } else {
        const spex_drafter_hparams *hp = spex_drafter_get_hparams(d);
        if (hp->block_size != 6 || !hp->causal || hp->logit_scale != 0.5f) bad++;
        if (d->params.overrides || d->params.n_overrides) bad++;
    }
    spex_drafter_free(d);
    static const struct { const char *o; spex_status want; } bads[] = {
        {"dflash.block_size", SPEX_ERR_INVALID_ARG},
        {"dflash.block_size=6", SPEX_ERR_INVALID_ARG},
        {"dflash.block_size=int:abc", SPEX_ERR_INVALID_ARG},
        {"dflash.block_size=int:", SPEX_ERR_INVALID_ARG},
        {"dflash.block_size=long:6", SPEX_ERR_INVALID_ARG},
        {"dflash.attention.causal=bool:maybe", SPEX_ERR_INVALID_ARG},
        {"=int:6", SPEX_ERR_INVALID_ARG},
        {"dflash.unknown_key=int:6", SPEX_ERR_INVALID_ARG},
        {"dflash.target_layers=int:1", SPEX_ERR_INVALID_ARG},   /* arrays cannot be overridden */
        {"dflash.block_size=int:1", SPEX_ERR_RANGE},             /* valid syntax, refused value */
        {"dflash.block_size=float:6", SPEX_ERR_TYPE},
        {"dflash.block_size=int:99999999999999999999", SPEX_ERR_INVALID_ARG},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        const char *one[1] = {bads[i].o};
        p.overrides = one;
        p.n_overrides = 1;
        d = NULL;
        memset(&err, 0, sizeof err);
        spex_status s = spex_drafter_load(DRAFT2, t, &p, &d, &err);
        if (s != bads[i].want || d) {
            printf("  override '%s': %s (%s), expected %s\n", bads[i].o, spex_status_str(s), err.msg,
                   spex_status_str(bads[i].want));
            bad++;
        }
        spex_drafter_free(d);
    }
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

TEST(bad_arguments) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    spex_drafter *d = (spex_drafter *)1;
    spex_error err = {0};
    int bad = 0;
    if (spex_drafter_load(NULL, t, NULL, &d, &err) != SPEX_ERR_INVALID_ARG || d) bad++;
    if (spex_drafter_load(DRAFT2, NULL, NULL, &d, &err) != SPEX_ERR_INVALID_ARG || d) bad++;
    if (spex_drafter_load(DRAFT2, t, NULL, NULL, &err) != SPEX_ERR_INVALID_ARG) bad++;
    if (spex_drafter_load("tests/data/dflash/no-such.gguf", t, NULL, &d, &err) == SPEX_OK || d) bad++;
    /* a target model is not a drafter */
    if (spex_drafter_load(TARGET, t, NULL, &d, &err) != SPEX_ERR_UNSUPPORTED || d) bad++;
    spex_drafter_free(NULL);
    if (spex_drafter_get_hparams(NULL) || spex_drafter_gguf(NULL) || spex_drafter_target(NULL) ||
        spex_drafter_weight_bytes(NULL))
        bad++;
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
}

/* ---- fuzz seeds: small valid drafters (fuzz/corpus/dflash) ----------------------------- */

/* Deterministic filler (an LCG), values in about [-1, 1). */
static void fill(float *x, int64_t n, uint32_t seed) {
    uint32_t st = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (float)((st >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* A one-layer drafter for tiny-qwen3 (E 64, V 256) small enough for -max_len=65536: H 1,
 * hd 4, F 4, one tap; fc in Q8_0, DFlash2 codebooks in F16 (R 2), conv T_c 1, g 64. No
 * tokenizer (the vocabulary check is skipped). */
static bool make_seed(const char *path, bool v2) {
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    if (spex_gguf_writer_init(&w, &err) != SPEX_OK) return false;
    enum { D = 64, HD = 4, F = 4, V = 256, R = 2 };
    static float buf[32][D * D];
    static uint8_t q8[D * 68], h16[2][R * V * 2];
    int nb = 0;
    bool ok = true;
    spex_gguf_writer_set_str(w, "general.architecture", "dflash", 6);
    spex_gguf_writer_set_u32(w, "dflash.block_count", 1);
    spex_gguf_writer_set_u32(w, "dflash.embedding_length", D);
    spex_gguf_writer_set_u32(w, "dflash.feed_forward_length", F);
    spex_gguf_writer_set_u32(w, "dflash.attention.head_count", 1);
    spex_gguf_writer_set_u32(w, "dflash.attention.head_count_kv", 1);
    spex_gguf_writer_set_u32(w, "dflash.attention.key_length", HD);
    spex_gguf_writer_set_u32(w, "dflash.attention.value_length", HD);
    spex_gguf_writer_set_f32(w, "dflash.attention.layer_norm_rms_epsilon", 1e-6f);
    spex_gguf_writer_set_f32(w, "dflash.rope.freq_base", 10000.0f);
    const int32_t taps[1] = {1};
    spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_I32, taps, 1);
    spex_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 3);
    spex_gguf_writer_set_u32(w, "dflash.block_size", 4);
    if (v2) {
        spex_gguf_writer_set_u32(w, "dflash.conv_kernel_size", 1);
        spex_gguf_writer_set_u32(w, "dflash.conv_group_size", D);
        spex_gguf_writer_set_u32(w, "dflash.selector_rank", R);
        spex_gguf_writer_set_u32(w, "dflash.selector_top_k", 2);
        spex_gguf_writer_set_u32(w, "dflash.attention.sliding_window", 8);
        const uint8_t pat[1] = {1};
        spex_gguf_writer_set_arr(w, "dflash.attention.sliding_window_pattern", SPEX_GGUF_BOOL, pat, 1);
        spex_gguf_writer_set_f32(w, "dflash.logit_scale", 1.5f);
    }
#define ADD(name, n_dims, ne0, ne1, ne2)                                                              \
    do {                                                                                              \
        const int64_t ne_[3] = {ne0, ne1, ne2};                                                       \
        int64_t n_ = (int64_t)(ne0) * (ne1) * (ne2);                                                  \
        fill(buf[nb], n_, (uint32_t)nb);                                                              \
        ok &= spex_gguf_writer_add_tensor(w, name, SPEX_TYPE_F32, n_dims, ne_, buf[nb], (uint64_t)n_ * 4, \
                                          &err) == SPEX_OK;                                           \
        nb++;                                                                                         \
    } while (0)
    fill(buf[nb], D * D, 99);
    ok &= spex_quantize_row_ref(SPEX_TYPE_Q8_0, buf[nb++], q8, D * D) == SPEX_OK;
    const int64_t ne_fc[2] = {D, D};
    ok &= spex_gguf_writer_add_tensor(w, "fc.weight", SPEX_TYPE_Q8_0, 2, ne_fc, q8, sizeof q8, &err) == SPEX_OK;
    ADD("enc.output_norm.weight", 1, D, 1, 1);
    ADD("output_norm.weight", 1, D, 1, 1);
    ADD("blk.0.attn_norm.weight", 1, D, 1, 1);
    ADD("blk.0.attn_q.weight", 2, D, HD, 1);
    ADD("blk.0.attn_k.weight", 2, D, HD, 1);
    ADD("blk.0.attn_v.weight", 2, D, HD, 1);
    ADD("blk.0.attn_output.weight", 2, HD, D, 1);
    ADD("blk.0.attn_q_norm.weight", 1, HD, 1, 1);
    ADD("blk.0.attn_k_norm.weight", 1, HD, 1, 1);
    ADD("blk.0.ffn_norm.weight", 1, D, 1, 1);
    ADD("blk.0.ffn_gate.weight", 2, D, F, 1);
    ADD("blk.0.ffn_up.weight", 2, D, F, 1);
    ADD("blk.0.ffn_down.weight", 2, F, D, 1);
    if (v2) {
        ADD("blk.0.attn_conv_base", 3, D, 1, 2);
        ADD("blk.0.attn_conv_proj.weight", 2, D, 2, 1);
        ADD("blk.0.ffn_conv_base", 3, D, 1, 2);
        ADD("blk.0.ffn_conv_proj.weight", 2, D, 2, 1);
        ADD("selector_hidden.weight", 2, D, R, 1);
        static const char *const books[2] = {"selector_predecessor.weight", "selector_successor.weight"};
        for (int i = 0; i < 2; i++) {
            fill(buf[nb], R * V, (uint32_t)(50 + i));
            ok &= spex_quantize_row_ref(SPEX_TYPE_F16, buf[nb++], h16[i], R * V) == SPEX_OK;
            const int64_t ne[2] = {R, V};
            ok &= spex_gguf_writer_add_tensor(w, books[i], SPEX_TYPE_F16, 2, ne, h16[i], sizeof h16[i], &err) ==
                  SPEX_OK;
        }
    }
#undef ADD
    ok = ok && spex_gguf_writer_write(w, path, &err) == SPEX_OK;
    if (!ok) printf("  make_seed: %s\n", err.msg);
    spex_gguf_writer_free(w);
    return ok;
}

/* The committed seeds equal the generator's output and load; SPEX_REGEN_CORPUS=1 rewrites
 * them (as tests/test_gguf.c does for fuzz/corpus/gguf). */
TEST(corpus_seeds) {
    spex_model *t = load_target(TARGET);
    CHECK(t);
    static const char *const names[2] = {"tiny-dflash1.gguf", "tiny-dflash2.gguf"};
    bool regen = getenv("SPEX_REGEN_CORPUS") != NULL;
    int missing = 0, bad = 0;
    for (int v = 0; v < 2; v++) {
        const char *fresh = test_tmp_path(names[v]);
        size_t nf = 0, nc = 0;
        uint8_t *f = make_seed(fresh, v == 1) ? read_all(fresh, &nf) : NULL;
        if (!f || nf > 65536) { printf("  %s: %zu bytes\n", names[v], nf); bad++; free(f); continue; }
        spex_gguf *g = NULL;
        spex_drafter *d = NULL;
        spex_error err = {0};
        if (spex_gguf_open_memory(f, nf, names[v], &g, &err) != SPEX_OK ||
            spex_drafter_load_gguf(g, t, NULL, &d, &err) != SPEX_OK) {
            printf("  %s: %s\n", names[v], err.msg);
            bad++;
        } else if (spex_drafter_get_hparams(d)->variant != (v ? SPEX_DFLASH2 : SPEX_DFLASH_V1)) {
            bad++;
        }
        spex_drafter_free(d);
        char committed[256];
        snprintf(committed, sizeof committed, "fuzz/corpus/dflash/%s", names[v]);
        if (regen) {
            FILE *o = fopen(committed, "wb");
            if (!o || fwrite(f, 1, nf, o) != nf) bad++;
            if (o) fclose(o);
        }
        uint8_t *c = read_all(committed, &nc);
        if (!c) missing++;
        else if (nc != nf || memcmp(c, f, nf)) {
            printf("  %s differs from the generator (SPEX_REGEN_CORPUS=1 rewrites it)\n", committed);
            bad++;
        }
        free(c);
        free(f);
    }
    spex_model_free(t);
    CHECK_EQ_INT(bad, 0);
    if (missing) SKIP("%d seeds not found under fuzz/corpus/dflash (run from the repo root)", missing);
}

TEST_MAIN()
