/*
 * test_embd.c — embeddings (src/model/embd.c): final-norm hidden states from an embeddings
 * context, pooled (none, mean, cls, last) and normalised, against the float64 NumPy reference.
 *
 * Reference: tests/data/embd_golden.txt, written by tools/ref/embd_ref.py (model_ref.py /
 * qwen35_ref.py forwards, every weight widened to float64) for models/target.gguf (qwen3,
 * Q8_0), tests/data/models/tiny-qwen3.gguf and tests/data/qwen35/tiny-qwen35.gguf.
 * Tolerances (per vector, per row for pooling none): the files as shipped, cosine > 0.9999 and
 * max |diff| <= 2% of the reference's max |value| (the Q8_0 / K-quant matmuls quantize
 * activations to 8 bits, as ggml does; measured 1.2% on the target's 34-token case); the same
 * weights dequantized to F32 with an F32 KV cache, cosine > 0.999999 and 1e-4 (measured 4e-7):
 * the pipeline itself is exact to fp32 rounding. The PASS note prints the measured worst cases.
 * Also: the same vector in one batch or in chunks of 5 tokens, and with other inputs in one
 * forward (spex_embed_batch, 1e-5); the normalisation rules on
 * hand-computed vectors; <arch>.pooling_type; the errors.
 */
#include "spex.h"
#include "model/api.h"
#include "gguf_fixtures.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GOLDEN "tests/data/embd_golden.txt"
#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"

static spex_model *load(const char *path) {
    spex_error e = {0};
    spex_model *m = NULL;
    if (spex_model_load(path, NULL, &m, &e) != SPEX_OK) printf("  load %s: %s\n", path, e.msg);
    return m;
}

static spex_context *embd_ctx_kv(const spex_model *m, int n_batch, int n_ctx, spex_type kv) {
    spex_context_params p = spex_context_default_params();
    p.kv_type = kv;
    p.n_ctx_per_seq = n_ctx;
    p.n_batch_max = n_batch;
    p.n_outputs_max = n_batch;
    p.embeddings = true;
    spex_error e = {0};
    spex_context *c = NULL;
    if (spex_context_init(m, &p, &c, &e) != SPEX_OK) printf("  context: %s\n", e.msg);
    return c;
}

static spex_context *embd_ctx(const spex_model *m, int n_batch, int n_ctx) {
    return embd_ctx_kv(m, n_batch, n_ctx, SPEX_TYPE_F16);
}

/* cosine similarity and max |a - b| of n floats; *ref_max = max |b| */
static double cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

/* compare and branch, not fmax: aarch64 gcc 12 fails vectorizing an fmax reduction at -O3 */
static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = fabs((double)x[i]);
        if (a > m) m = a;
    }
    return m;
}

/* ---- the golden file -------------------------------------------------------------------- */

typedef struct golden_case {
    char model[256];
    spex_pooling pooling;
    int norm, n;
    int32_t tokens[64];
    int64_t n_vec;
    float *vec;
} golden_case;

/* Reads every case of the golden file (tools/ref/embd_ref.py documents the format). */
static int read_golden(golden_case *cases, int cap) {
    size_t len = 0;
    char *text = test_slurp(GOLDEN, &len);
    if (!text) return -1;
    int n = 0;
    char model[256] = "";
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = line, *end;
        if (!strncmp(line, "model ", 6)) {
            snprintf(model, sizeof model, "%s", line + 6);
        } else if (!strncmp(line, "case ", 5) && n < cap) {
            golden_case *c = &cases[n];
            memset(c, 0, sizeof *c);
            snprintf(c->model, sizeof c->model, "%s", model);
            char name[16];
            int off = 0;
            if (sscanf(line + 5, "%15s %d %d%n", name, &c->norm, &c->n, &off) != 3 || c->n > 64) break;
            c->pooling = spex_pooling_parse(name);
            p = line + 5 + off;
            for (int i = 0; i < c->n; i++) c->tokens[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "vec ", 4) && n < cap) {
            golden_case *c = &cases[n];
            c->n_vec = strtol(line + 4, &end, 10);
            c->vec = malloc(sizeof(float) * (size_t)c->n_vec);
            p = end;
            for (int64_t i = 0; c->vec && i < c->n_vec; i++) c->vec[i] = strtof(p, &p);
            n++;
        }
    }
    free(text);
    return n;
}

/* spex's vector of one golden case, normalised as the case says; NULL on failure. */
static float *run_case(spex_context *ctx, const golden_case *c) {
    const int64_t E = spex_model_get_hparams(spex_context_model(ctx))->n_embd;
    const int64_t n_out = c->pooling == SPEX_POOLING_NONE ? c->n * E : E;
    float *out = malloc(sizeof(float) * (size_t)n_out);
    spex_batch_token *scratch = malloc(sizeof *scratch * (size_t)spex_context_get_params(ctx)->n_batch_max);
    spex_error e = {0};
    if (!out || !scratch || spex_embed_tokens(ctx, 0, c->tokens, c->n, c->pooling, scratch, out, &e) != SPEX_OK) {
        printf("  embed: %s\n", e.msg);
        free(out);
        out = NULL;
    }
    for (int64_t r = 0; out && r < n_out / E; r++) spex_embd_normalize(out + r * E, E, c->norm);
    free(scratch);
    return out;
}

/* The golden comparison of one run: every row within (min_cos, max_rel); worst values kept. */
static bool compare_case(const golden_case *c, const float *got, int64_t E, const char *run, double min_cos,
                         double max_rel, double *worst_cos, double *worst_rel) {
    const int64_t n_vec = c->pooling == SPEX_POOLING_NONE ? c->n * E : E;
    if (n_vec != c->n_vec) return printf("  %s: %lld floats, golden %lld\n", c->model, (long long)n_vec, (long long)c->n_vec), false;
    for (int64_t r = 0; r < n_vec / E; r++) {
        const float *g = got + r * E, *x = c->vec + r * E;
        const double cs = cosine(g, x, E), rel = test_max_diff(g, x, E) / max_abs(x, E);
        *worst_cos = fmin(*worst_cos, cs), *worst_rel = fmax(*worst_rel, rel);
        if (!(cs > min_cos && rel <= max_rel)) {
            printf("  %s (%s, %s, norm %d, %d tokens) row %lld: cosine %.8f, max |diff| %.3g of max |ref|\n", c->model,
                   run, spex_pooling_name(c->pooling), c->norm, c->n, (long long)r, cs, rel);
            return false;
        }
    }
    return true;
}

/* Each case three ways: the file as shipped with the server's f16 KV cache, in one batch and
 * in batches of 5 (the sequence continues its cache); and its weights dequantized to F32 with
 * an F32 cache, where only fp32 rounding separates spex from the float64 reference. The
 * shipped run's bound is what the Q8_0 / K-quant matmuls cost (they quantize activations to
 * 8 bits, as ggml does: about 1% of the largest value after 8 layers on the target). */
TEST(golden_vectors_match_the_numpy_reference) {
    golden_case cases[32];
    int n = read_golden(cases, 32);
    CHECK_MSG(n > 0, "cannot read %s", GOLDEN);
    double wc_q = 1, wr_q = 0, wc_f = 1, wr_f = 0;
    bool ok = true;
    const char *f32 = test_tmp_path("embd-f32.gguf");
    char loaded[256] = "";
    spex_model *m = NULL, *mf = NULL;
    for (int i = 0; i < n && ok; i++) {
        golden_case *c = &cases[i];
        if (strcmp(loaded, c->model)) {
            spex_model_free(m);
            spex_model_free(mf);
            m = load(c->model);
            mf = test_write_dequantized(c->model, f32) ? load(f32) : NULL;
            memcpy(loaded, c->model, sizeof loaded);   /* both 256 bytes, NUL-terminated */
            if (!m || !mf) break;
        }
        const int64_t E = spex_model_get_hparams(m)->n_embd;
        const struct {
            spex_model *model;
            int batch;
            spex_type kv;
            const char *name;
            double cos, rel;
            double *wc, *wr;
        } runs[3] = {{m, 64, SPEX_TYPE_F16, "file, f16 KV, one batch", 0.9999, 0.02, &wc_q, &wr_q},
                     {m, 5, SPEX_TYPE_F16, "file, f16 KV, batches of 5", 0.9999, 0.02, &wc_q, &wr_q},
                     {mf, 64, SPEX_TYPE_F32, "F32 weights and KV", 0.999999, 1e-4, &wc_f, &wr_f}};
        for (int k = 0; k < 3 && ok; k++) {
            spex_context *ctx = embd_ctx_kv(runs[k].model, runs[k].batch, 64, runs[k].kv);
            float *got = ctx ? run_case(ctx, c) : NULL;
            ok = got && compare_case(c, got, E, runs[k].name, runs[k].cos, runs[k].rel, runs[k].wc, runs[k].wr);
            free(got);
            spex_context_free(ctx);
        }
    }
    spex_model_free(m);
    spex_model_free(mf);
    unlink(f32);
    for (int i = 0; i < n; i++) free(cases[i].vec);
    CHECK_MSG(m && mf, "cannot load %s or its F32 copy", loaded);
    CHECK(ok);
    printf("  PASS note: %d cases; as shipped: worst cosine %.8f, max |diff| %.2e of max |ref|; F32: worst cosine "
           "%.10f, max |diff| %.2e\n", n, wc_q, wr_q, wc_f, wr_f);
}

TEST(chunks_equal_one_batch_and_logits_untouched) {
    spex_model *m = load(TINY_QWEN3);
    CHECK(m);
    const int32_t toks[12] = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
    const int pools[4] = {SPEX_POOLING_NONE, SPEX_POOLING_MEAN, SPEX_POOLING_CLS, SPEX_POOLING_LAST};
    spex_context *one = embd_ctx(m, 16, 32), *chunked = embd_ctx(m, 5, 32);
    CHECK(one && chunked);
    float a[12 * 64], b[12 * 64];
    spex_batch_token scratch[16];
    for (int k = 0; k < 4; k++) {
        CHECK_OK(spex_embed_tokens(one, 0, toks, 12, (spex_pooling)pools[k], scratch, a, &e_));
        CHECK_OK(spex_embed_tokens(chunked, 0, toks, 12, (spex_pooling)pools[k], scratch, b, &e_));
        const int64_t nf = pools[k] == SPEX_POOLING_NONE ? 12 * 64 : 64;
        CHECK_MSG(test_max_diff(a, b, nf) <= 1e-5, "pooling %d: %.3g", pools[k], test_max_diff(a, b, nf));
    }
    /* none's rows are the per-token states: mean / cls / last are their mean, first and last row */
    float none[12 * 64], v[64];
    CHECK_OK(spex_embed_tokens(one, 0, toks, 12, SPEX_POOLING_NONE, scratch, none, &e_));
    CHECK_OK(spex_embed_tokens(one, 0, toks, 12, SPEX_POOLING_LAST, scratch, v, &e_));
    CHECK(test_max_diff(v, none + 11 * 64, 64) <= 1e-5);
    CHECK_OK(spex_embed_tokens(one, 0, toks, 12, SPEX_POOLING_CLS, scratch, v, &e_));
    CHECK(test_max_diff(v, none, 64) <= 1e-5);
    /* the sequence is left empty; an embeddings context has no logits */
    CHECK_EQ_INT(spex_kv_seq_len(one, 0), 0);
    CHECK(spex_logits(one, 0) == NULL);
    CHECK(spex_embeddings(one, 0) != NULL);
    spex_context_free(one);
    spex_context_free(chunked);
    /* a plain context gives logits and no embeddings */
    spex_context_params p = spex_context_default_params();
    p.n_ctx_per_seq = 32;
    spex_context *plain = NULL;
    CHECK_OK(spex_context_init(m, &p, &plain, &e_));
    spex_batch_token t = {.token = 3, .pos = 0, .seq = 0, .logits = true};
    spex_batch bt = {.tokens = &t, .n_tokens = 1};
    CHECK_OK(spex_forward(plain, &bt, &e_));
    CHECK(spex_logits(plain, 0) != NULL && spex_embeddings(plain, 0) == NULL);
    spex_error e = {0};
    CHECK(spex_embed_tokens(plain, 0, toks, 3, SPEX_POOLING_MEAN, scratch, v, &e) == SPEX_ERR_INVALID_ARG);
    spex_context_free(plain);
    spex_model_free(m);
}

/* Several inputs in one forward (sequences 0..2) give each input's vector alone. */
TEST(batch_of_inputs_equals_each_alone) {
    spex_model *m = load(TINY_QWEN3);
    CHECK(m);
    spex_context_params p = spex_context_default_params();
    p.n_seq_max = 3;
    p.n_ctx_per_seq = 16;
    p.n_batch_max = p.n_outputs_max = 16;
    p.embeddings = true;
    spex_context *ctx = NULL;
    CHECK_OK(spex_context_init(m, &p, &ctx, &e_));
    const int32_t toks[12] = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26}, n[3] = {5, 1, 6};
    const int pools[4] = {SPEX_POOLING_NONE, SPEX_POOLING_MEAN, SPEX_POOLING_CLS, SPEX_POOLING_LAST};
    spex_batch_token scratch[16];
    float all[12 * 64], one[12 * 64];
    for (int k = 0; k < 4; k++) {
        CHECK_OK(spex_embed_batch(ctx, toks, n, 3, (spex_pooling)pools[k], scratch, all, &e_));
        for (int i = 0, off = 0, row = 0; i < 3; off += n[i], i++) {
            CHECK_OK(spex_embed_tokens(ctx, 0, toks + off, n[i], (spex_pooling)pools[k], scratch, one, &e_));
            const int rows = pools[k] == SPEX_POOLING_NONE ? n[i] : 1;
            const double d = test_max_diff(all + (int64_t)row * 64, one, rows * 64);
            CHECK_MSG(d <= 1e-5, "pooling %d input %d: %.3g", pools[k], i, d);
            row += rows;
        }
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(spex_kv_seq_len(ctx, i), 0);
    }
    spex_error e = {0};
    const int32_t four[4] = {1, 1, 1, 1}, big[2] = {10, 7};
    CHECK(spex_embed_batch(ctx, toks, four, 4, SPEX_POOLING_MEAN, scratch, all, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_embed_batch(ctx, toks, big, 2, SPEX_POOLING_MEAN, scratch, all, &e) == SPEX_ERR_RANGE);
    CHECK(spex_embed_batch(ctx, toks, big, 2, SPEX_POOLING_RANK, scratch, all, &e) == SPEX_ERR_UNSUPPORTED);
    spex_context_free(ctx);
    spex_model_free(m);
}

TEST(errors) {
    spex_model *m = load(TINY_QWEN3);
    CHECK(m);
    spex_context *ctx = embd_ctx(m, 8, 16);
    CHECK(ctx);
    int32_t toks[20] = {1, 2, 3};
    spex_batch_token scratch[8];
    float v[64];
    spex_error e = {0};
    CHECK(spex_embed_tokens(ctx, 0, toks, 3, SPEX_POOLING_RANK, scratch, v, &e) == SPEX_ERR_UNSUPPORTED);
    CHECK(strstr(e.msg, "classification head"));
    CHECK(spex_embed_tokens(ctx, 0, toks, 17, SPEX_POOLING_MEAN, scratch, v, &e) == SPEX_ERR_RANGE);
    CHECK_MSG(strstr(e.msg, "17 tokens") && strstr(e.msg, "16"), "%s", e.msg);
    CHECK(spex_embed_tokens(ctx, 0, toks, 0, SPEX_POOLING_MEAN, scratch, v, &e) == SPEX_ERR_INVALID_ARG);
    toks[1] = 100000;   /* outside the vocabulary: forward's error, the sequence left empty */
    CHECK(spex_embed_tokens(ctx, 0, toks, 3, SPEX_POOLING_MEAN, scratch, v, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_kv_seq_len(ctx, 0), 0);
    spex_context_free(ctx);
    spex_model_free(m);
}

TEST(normalisations) {
    float x[2];
    const struct {
        int norm;
        float a, b;
    } cases[] = {{-1, 3, 4}, {0, 24570, 32760}, {1, 3.f / 7, 4.f / 7}, {2, 0.6f, 0.8f},
                 {3, (float)(3 / cbrt(91)), (float)(4 / cbrt(91))}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        x[0] = 3, x[1] = 4;
        spex_embd_normalize(x, 2, cases[i].norm);
        CHECK_NEAR(x[0], cases[i].a, 1e-3 * fabs(cases[i].a));
        CHECK_NEAR(x[1], cases[i].b, 1e-3 * fabs(cases[i].b));
    }
    /* a large p: the max norm, no overflow to a zero vector */
    x[0] = 3, x[1] = 4;
    spex_embd_normalize(x, 2, 1000000);
    CHECK_NEAR(x[0], 0.75, 1e-4);
    CHECK_NEAR(x[1], 1.0, 1e-4);
    x[0] = x[1] = 0;
    for (int norm = 0; norm <= 3; norm++) {
        spex_embd_normalize(x, 2, norm);
        CHECK(x[0] == 0 && x[1] == 0);
    }
}

TEST(pooling_names_and_gguf_key) {
    const char *names[] = {"none", "mean", "cls", "last", "rank"};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(spex_pooling_parse(names[i]), i);
        CHECK(!strcmp(spex_pooling_name((spex_pooling)i), names[i]));
    }
    CHECK_EQ_INT(spex_pooling_parse("max"), SPEX_POOLING_UNSPECIFIED);
    CHECK_EQ_INT(spex_pooling_parse(NULL), SPEX_POOLING_UNSPECIFIED);
    spex_model *m = load(TINY_QWEN3);
    CHECK(m);
    CHECK_EQ_INT(spex_model_pooling(m), SPEX_POOLING_NONE);   /* no key: llama.cpp's NONE */
    spex_model_free(m);
    const char *path = test_tmp_path("tiny-qwen3-last.gguf");
    CHECK(test_write_with_u32(TINY_QWEN3, path, "qwen3.pooling_type", 3));
    m = load(path);
    CHECK(m);
    CHECK_EQ_INT(spex_model_pooling(m), SPEX_POOLING_LAST);
    spex_model_free(m);
    CHECK(test_write_with_u32(TINY_QWEN3, path, "qwen3.pooling_type", 9));
    m = load(path);
    CHECK(m);
    CHECK_EQ_INT(spex_model_pooling(m), SPEX_POOLING_NONE);
    spex_model_free(m);
    unlink(path);
}

TEST_MAIN()
