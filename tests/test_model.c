/*
 * test_model.c — the llama / qwen3 forward pass: logits, greedy decoding, taps, batches of
 * several sequences, rollback, quantized weights, and the errors of loading and batching.
 *
 * References:
 *  - stories260K (real weights, ../shared/data): stories260K.golden.json (float64 numpy
 *    logits at positions 0..3, 200 greedy ids from BOS, llama2.c semantics);
 *  - tests/data/models/tiny-{qwen3,llama-tied}.gguf with their *.golden.gguf, written by the
 *    independent NumPy reference tools/ref/model_ref.py (layout: tools/ref/README.md):
 *    40-token logits and taps, a 5-step multi-sequence batch schedule with truncations,
 *    greedy ids.
 * Batch invariance and rollback are also checked against the C engine itself (the same
 * tokens one batch / token by token / mixed with other sequences / after truncation).
 *
 * Tolerances: logits vs the float64 references 1e-4 absolute (measured: see the PASS
 * notes printed by each case); logits of the same tokens batched differently 1e-5.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "gguf_fixtures.h"
#include "test.h"
#include "tensor/api.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>

#define TOL_REF 1e-4     /* vs the float64 reference      */
#define TOL_BATCH 1e-5   /* same engine, batched otherwise */

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static const char *stories_path(void) { return test_shared_path("data/stories260K/stories260K.gguf"); }

static const char *fixture_path(const char *name) {
    static char buf[4][256];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "tests/data/models/%s", name);
    return access(b, R_OK) == 0 ? b : NULL;
}


static spex_model *load(const char *path) {
    spex_error e = {0};
    spex_model *m = NULL;
    if (spex_model_load(path, NULL, &m, &e) != SPEX_OK) printf("  load %s: %s\n", path, e.msg);
    return m;
}

typedef struct ctx_opts {
    int n_seq, n_ctx, n_batch, n_out, threads;
    spex_type kv;
    const int32_t *taps;
    int n_taps;
} ctx_opts;

static spex_context *make_ctx(const spex_model *m, ctx_opts o) {
    spex_context_params p = spex_context_default_params();
    p.n_seq_max = o.n_seq ? o.n_seq : 1;
    p.n_ctx_per_seq = o.n_ctx ? o.n_ctx : 256;
    p.n_batch_max = o.n_batch ? o.n_batch : 64;
    p.n_outputs_max = o.n_out ? o.n_out : 64;
    p.kv_type = o.kv;
    p.n_threads = o.threads ? o.threads : 1;
    p.tap_layers = o.taps;
    p.n_taps = o.n_taps;
    spex_error e = {0};
    spex_context *c = NULL;
    if (spex_context_init(m, &p, &c, &e) != SPEX_OK) printf("  context: %s\n", e.msg);
    return c;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x; /* NaN propagates as "huge" */
    }
    return d;
}

/* One token, logits wanted. */
static spex_status step1(spex_context *c, int32_t tok, int32_t pos, int32_t seq, spex_error *e) {
    spex_batch_token t = {tok, pos, seq, true};
    spex_batch b = {&t, 1};
    return spex_forward(c, &b, e);
}

/* Greedy decoding from BOS (llama2.c semantics): feed the argmax back, n steps. Returns the
 * number of steps agreeing with want[] (n if all), ids written to got. */
static int greedy(spex_context *c, int32_t first, int n, const int32_t *want, int32_t *got, int n_vocab) {
    int32_t tok = first;
    int agree = -1;
    for (int p = 0; p < n; p++) {
        spex_error e = {0};
        if (step1(c, tok, p, 0, &e) != SPEX_OK) {
            printf("  forward at %d: %s\n", p, e.msg);
            return agree < 0 ? p : agree;
        }
        tok = argmax(spex_logits(c, 0), n_vocab);
        got[p] = tok;
        if (agree < 0 && want && tok != want[p]) agree = p;
    }
    return agree < 0 ? n : agree;
}

/* ---- stories260K golden (JSON) ---------------------------------------------------------- */

typedef struct stories_golden {
    bool ok;
    int32_t input_ids[200], greedy_ids[200];
    float logits[4][512];
} stories_golden;

static const stories_golden *stories_golden_get(void) {
    static stories_golden g;
    static bool tried;
    if (tried) return g.ok ? &g : NULL;
    tried = true;
    const char *path = test_shared_path("data/stories260K/stories260K.golden.json");
    if (!path) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return NULL;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
    const cJSON *gi = cJSON_GetObjectItemCaseSensitive(root, "greedy_ids");
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(root, "logits");
    bool ok = cJSON_GetArraySize(in) == 200 && cJSON_GetArraySize(gi) == 200 && cJSON_GetArraySize(lg) == 4;
    for (int i = 0; ok && i < 200; i++) {
        g.input_ids[i] = (int32_t)cJSON_GetArrayItem(in, i)->valuedouble;
        g.greedy_ids[i] = (int32_t)cJSON_GetArrayItem(gi, i)->valuedouble;
    }
    for (int p = 0; ok && p < 4; p++) {
        const cJSON *row = cJSON_GetArrayItem(lg, p);
        ok = cJSON_GetArraySize(row) == 512;
        for (int i = 0; ok && i < 512; i++) g.logits[p][i] = (float)cJSON_GetArrayItem(row, i)->valuedouble;
    }
    cJSON_Delete(root);
    g.ok = ok;
    return ok ? &g : NULL;
}

#define NEED_STORIES(m, g)                                                                     \
    const stories_golden *g = stories_golden_get();                                            \
    if (!stories_path() || !g) SKIP("../shared/data/stories260K (gguf + golden.json) not found"); \
    spex_model *m = load(stories_path());                                                      \
    CHECK(m != NULL)

/* ======================================================================== */
/* stories260K                                                               */
/* ======================================================================== */

TEST(stories_hparams) {
    NEED_STORIES(m, g);
    (void)g;
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    int ok = hp->arch == SPEX_ARCH_LLAMA && hp->n_embd == 64 && hp->n_layer == 5 && hp->n_head == 8 &&
             hp->n_head_kv == 4 && hp->head_dim == 8 && hp->n_ff == 172 && hp->n_vocab == 512 && hp->n_rot == 8 &&
             hp->rope_freq_base == 10000.0f && hp->rope_mode == 0 && !hp->qk_norm && !hp->tied_output &&
             hp->n_ctx_train == 2048 && fabsf(hp->rms_eps - 1e-5f) < 1e-12f;
    spex_model_free(m);
    CHECK(ok);
}

/* Logits at positions 0..3 (inputs BOS, greedy 0..2) vs the float64 golden. */
static void stories_logits_case(spex_type kv, double tol) {
    NEED_STORIES(m, g);
    spex_context *c = make_ctx(m, (ctx_opts){.kv = kv});
    CHECK(c != NULL);
    double worst = 0;
    for (int p = 0; p < 4; p++) {
        spex_error e = {0};
        CHECK_OK(step1(c, g->input_ids[p], p, 0, &e));
        double d = max_diff(spex_logits(c, 0), g->logits[p], 512);
        if (d > worst) worst = d;
    }
    printf("  kv %s: max |logit - golden| over positions 0..3 = %.3g\n", spex_type_get_info(kv)->name, worst);
    spex_context_free(c);
    spex_model_free(m);
    CHECK_MSG(worst <= tol, "logits differ from the golden by %.3g (tol %.1g)", worst, tol);
}

TEST(stories_logits_f32kv) { stories_logits_case(SPEX_TYPE_F32, TOL_REF); }
/* F16 K/V rounding alone moves stories260K's logits by ~8e-3 (measured 7.6e-3). */
TEST(stories_logits_f16kv) { stories_logits_case(SPEX_TYPE_F16, 2e-2); }

static void stories_greedy_case(spex_type kv, int threads, int need) {
    NEED_STORIES(m, g);
    spex_context *c = make_ctx(m, (ctx_opts){.kv = kv, .threads = threads});
    CHECK(c != NULL);
    int32_t got[200];
    int agree = greedy(c, 1, 200, g->greedy_ids, got, 512);
    printf("  kv %s, %d thread(s): greedy ids agree with the golden for %d of 200 steps\n",
           spex_type_get_info(kv)->name, threads, agree);
    spex_context_free(c);
    spex_model_free(m);
    CHECK_MSG(agree >= need, "first divergence at step %d (need %d)", agree, need);
}

TEST(stories_greedy_f32kv) { stories_greedy_case(SPEX_TYPE_F32, 1, 200); }
TEST(stories_greedy_f32kv_2threads) { stories_greedy_case(SPEX_TYPE_F32, 2, 200); }
/* F16 K/V rounding (rel. 5e-4) could flip the 0.0042 near-tie at step 185; measured: it
 * does not, so the full 200 are required. */
TEST(stories_greedy_f16kv) { stories_greedy_case(SPEX_TYPE_F16, 1, 200); }
/* Q8_0 K/V: measured 114 of 200, i.e. it flips the second-smallest margin (0.042 at step
 * 114); the bound is that measurement. */
TEST(stories_greedy_q8kv) { stories_greedy_case(SPEX_TYPE_Q8_0, 2, 114); }

/* The same 16 tokens as one prompt batch, token by token, and interleaved with two other
 * sequences in one batch (on 2 threads): the same logits. */
TEST(stories_batch_invariance) {
    NEED_STORIES(m, g);
    enum { NP = 16, V = 512 };
    static float ref[NP][V], alt[NP][V];
    spex_context *c = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F32, .n_seq = 3});
    spex_context *c2 = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F32, .n_seq = 3, .threads = 2});
    CHECK(c && c2);
    spex_error e = {0};
    /* token by token (the reference) */
    for (int p = 0; p < NP; p++) {
        CHECK_OK(step1(c, g->input_ids[p], p, 0, &e));
        memcpy(ref[p], spex_logits(c, 0), sizeof ref[p]);
    }
    /* one batch, all logits, in sequence 1 of the same context */
    spex_batch_token bt[64];
    for (int p = 0; p < NP; p++) bt[p] = (spex_batch_token){g->input_ids[p], p, 1, true};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, NP}, &e));
    CHECK_EQ_INT(spex_n_outputs(c), NP);
    double d_batch = 0;
    for (int p = 0; p < NP; p++) {
        double d = max_diff(spex_logits(c, p), ref[p], V);
        if (d > d_batch) d_batch = d;
    }
    /* interleaved with sequences 0 and 2 (other tokens), 2 threads, two calls */
    int n = 0, a = 0, s0 = 0, s2 = 0;
    const int split = 9;
    for (int call = 0; call < 2; call++) {
        n = 0;
        int a_end = call == 0 ? split : NP;
        while (a < a_end || (call == 1 && (s0 < 7 || s2 < 5))) {
            if (s0 < 7 && (call == 1 || s0 < 3)) bt[n++] = (spex_batch_token){g->input_ids[50 + s0], s0, 0, s0 % 2 == 0}, s0++;
            if (a < a_end) bt[n++] = (spex_batch_token){g->input_ids[a], a, 1, true}, a++;
            if (s2 < 5 && (call == 1 || s2 < 2)) bt[n++] = (spex_batch_token){g->input_ids[120 + s2], s2, 2, true}, s2++;
        }
        CHECK_OK(spex_forward(c2, &(spex_batch){bt, n}, &e));
        for (int i = 0; i < n; i++)
            if (bt[i].seq == 1) memcpy(alt[bt[i].pos], spex_logits_of_token(c2, i), sizeof alt[0]);
        CHECK(spex_logits_of_token(c2, 0) == NULL || bt[0].logits);
    }
    CHECK_EQ_INT(spex_kv_seq_len(c2, 0), 7);
    CHECK_EQ_INT(spex_kv_seq_len(c2, 1), NP);
    CHECK_EQ_INT(spex_kv_seq_len(c2, 2), 5);
    double d_mixed = max_diff(&alt[0][0], &ref[0][0], (int64_t)NP * V);
    printf("  max |diff| vs token by token: one batch %.3g, mixed with 2 sequences on 2 threads %.3g\n", d_batch,
           d_mixed);
    spex_context_free(c);
    spex_context_free(c2);
    spex_model_free(m);
    CHECK(d_batch <= TOL_BATCH);
    CHECK(d_mixed <= TOL_BATCH);
}

/* Rollback and prefix copy against fresh runs. */
TEST(stories_rollback_and_copy) {
    NEED_STORIES(m, g);
    enum { V = 512 };
    spex_context *c = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F16, .n_seq = 3});
    spex_context *fresh = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F16});
    CHECK(c && fresh);
    spex_error e = {0};
    const int32_t *in = g->input_ids;
    int32_t alt[6] = {in[100], in[101], in[102], in[103], in[104], in[105]};
    spex_batch_token bt[32];
    /* seq 0: 16 prompt tokens, then roll back to 10 and decode 6 other tokens */
    for (int p = 0; p < 16; p++) bt[p] = (spex_batch_token){in[p], p, 0, false};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 16}, &e));
    CHECK_OK(spex_kv_seq_truncate(c, 0, 10, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 10);
    for (int i = 0; i < 6; i++) bt[i] = (spex_batch_token){alt[i], 10 + i, 0, true};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 6}, &e));
    static float got[6][V];
    for (int i = 0; i < 6; i++) memcpy(got[i], spex_logits(c, i), sizeof got[i]);
    /* fresh: in[0..10) + alt as one batch */
    for (int p = 0; p < 16; p++) bt[p] = (spex_batch_token){p < 10 ? in[p] : alt[p - 10], p, 0, p >= 10};
    CHECK_OK(spex_forward(fresh, &(spex_batch){bt, 16}, &e));
    double d_roll = 0;
    for (int i = 0; i < 6; i++) {
        double d = max_diff(got[i], spex_logits(fresh, i), V);
        if (d > d_roll) d_roll = d;
    }
    /* seq 2 := first 10 positions of seq 0 (in[0..10)), then decode alt: same logits again */
    CHECK_OK(spex_kv_seq_copy(c, 0, 2, 10, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 2), 10);
    for (int i = 0; i < 6; i++) bt[i] = (spex_batch_token){alt[i], 10 + i, 2, true};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 6}, &e));
    double d_copy = 0;
    for (int i = 0; i < 6; i++) {
        double dd = max_diff(got[i], spex_logits(c, i), V);
        if (dd > d_copy) d_copy = dd;
    }
    printf("  max |diff| vs a fresh run: after truncate %.3g, after copy %.3g\n", d_roll, d_copy);
    spex_context_free(c);
    spex_context_free(fresh);
    spex_model_free(m);
    CHECK(d_roll <= TOL_BATCH);
    CHECK(d_copy <= TOL_BATCH);
}

/* Taps: id 0 is the embedding; id N (pre-final-norm state) reproduces the logits through
 * output_norm and output.weight computed here in double; batch order with mixed sequences. */
TEST(stories_taps) {
    NEED_STORIES(m, g);
    enum { E = 64, V = 512 };
    const int32_t taps[3] = {5, 0, 2};
    spex_context *c = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F32, .n_seq = 2, .taps = taps, .n_taps = 3});
    CHECK(c != NULL);
    CHECK(spex_taps(c) == NULL); /* nothing run yet */
    spex_error e = {0};
    spex_batch_token bt[8] = {{1, 0, 1, true}, {1, 0, 0, false}, {g->input_ids[1], 1, 1, true},
                              {300, 1, 0, true}, {g->input_ids[2], 2, 1, true}};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 5}, &e));
    const float *tp = spex_taps(c);
    CHECK(tp != NULL);
    /* tap id 0 = embedding rows (slot 1), in batch order */
    float emb[E];
    for (int b = 0; b < 5; b++) {
        CHECK_OK(spex_model_embed(m, &bt[b].token, 1, emb, &e));
        CHECK(max_diff(tp + ((size_t)b * 3 + 1) * E, emb, E) == 0.0);
    }
    /* tap id N (slot 0) -> logits */
    const spex_gguf *gg = spex_model_gguf(m);
    const float *onorm = spex_gguf_find_tensor(gg, "output_norm.weight")->data;
    const float *W = spex_gguf_find_tensor(gg, "output.weight")->data;
    double worst = 0;
    for (int b = 0; b < 5; b++) {
        if (!bt[b].logits) continue;
        const float *h = tp + ((size_t)b * 3 + 0) * E;
        double ss = 0;
        for (int i = 0; i < E; i++) ss += (double)h[i] * h[i];
        double inv = 1.0 / sqrt(ss / E + 1e-5);
        const float *lg = spex_logits_of_token(c, b);
        CHECK(lg != NULL);
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int i = 0; i < E; i++) acc += (double)W[(size_t)v * E + i] * (h[i] * inv * onorm[i]);
            double d = fabs(acc - lg[v]);
            if (d > worst) worst = d;
        }
    }
    /* the sequence-1 rows equal the golden's first logits */
    double dg = max_diff(spex_logits_of_token(c, 0), g->logits[0], V);
    dg = fmax(dg, max_diff(spex_logits_of_token(c, 2), g->logits[1], V));
    dg = fmax(dg, max_diff(spex_logits_of_token(c, 4), g->logits[2], V));
    /* tap id 2 of a token is the same whether its sequence is batched with another or not */
    spex_context *c1 = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F32, .taps = taps, .n_taps = 3});
    CHECK(c1 != NULL);
    spex_batch_token one[2] = {{1, 0, 0, false}, {300, 1, 0, true}};
    CHECK_OK(spex_forward(c1, &(spex_batch){one, 2}, &e));
    double dt = max_diff(spex_taps(c1) + (size_t)1 * 3 * E, tp + (size_t)3 * 3 * E, 3 * E);
    printf("  head from tap N vs logits %.3g; mixed-batch logits vs golden %.3g; taps alone vs mixed %.3g\n", worst,
           dg, dt);
    spex_context_free(c1);
    spex_context_free(c);
    spex_model_free(m);
    CHECK(worst <= 1e-4);
    CHECK(dg <= TOL_REF);
    CHECK(dt <= TOL_BATCH);
}

/* Q8_0 weights (spex_quantize_file; the 172-wide ffn_down falls back to F16). Measured:
 * logits within 0.26 of the F32 golden (0.21 of that is the weight rounding itself: the
 * NumPy reference on the dequantized weights differs by 0.21), greedy text equal for the
 * first 114 tokens (the 0.042 near-tie at step 114 flips), and 0.18 from an F32 run of the
 * dequantized weights (the Q8_0 activation rounding, as in ggml). The quantize helpers
 * are defined with the fixture tests below. */
static bool quantized_vs_dequantized(const char *src, spex_ftype ft, const char *tag, const int32_t *tokens, int n,
                                     double *d);

TEST(stories_q8_0_weights) {
    NEED_STORIES(m, g);
    spex_model_free(m);
    const char *q8 = test_tmp_path("stories-q8_0.gguf");
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = SPEX_FTYPE_Q8_0;
    qp.n_threads = 2;
    spex_error e = {0};
    CHECK_OK(spex_quantize_file(stories_path(), q8, &qp, &e));
    spex_model *mq = load(q8);
    CHECK(mq != NULL);
    CHECK_EQ_INT(spex_model_lm_head(mq)->type, SPEX_TYPE_Q8_0);
    spex_context *c = make_ctx(mq, (ctx_opts){.kv = SPEX_TYPE_F32});
    CHECK(c != NULL);
    double worst = 0;
    for (int p = 0; p < 4; p++) {
        CHECK_OK(step1(c, g->input_ids[p], p, 0, &e));
        worst = fmax(worst, max_diff(spex_logits(c, 0), g->logits[p], 512));
    }
    CHECK_OK(spex_kv_seq_clear(c, 0, &e));
    int32_t got[200];
    int agree = greedy(c, 1, 200, g->greedy_ids, got, 512);
    spex_context_free(c);
    spex_model_free(mq);
    double dq;
    CHECK(quantized_vs_dequantized(stories_path(), SPEX_FTYPE_Q8_0, "stories-q8", g->input_ids, 16, &dq));
    printf("  q8_0 weights: max |logit - golden| at positions 0..3 = %.3g; greedy agrees for %d of 200 steps; "
           "vs F32 run of the dequantized weights %.3g\n",
           worst, agree, dq);
    CHECK(worst <= 0.4);
    CHECK(agree >= 114);
    CHECK(dq <= 0.3);
}

/* ======================================================================== */
/* Synthetic fixtures vs the NumPy reference (tools/ref/model_ref.py)        */
/* ======================================================================== */

typedef struct golden {
    spex_gguf *g;
    const char *model_path;
} golden;

static bool golden_open(const char *model_name, const char *golden_name, golden *out) {
    memset(out, 0, sizeof *out);
    out->model_path = fixture_path(model_name);
    const char *gp = fixture_path(golden_name);
    if (!out->model_path || !gp) return false;
    return spex_gguf_open(gp, &out->g, NULL) == SPEX_OK;
}

/* An i32 array of the golden file; returns its length (0 if absent), at most cap copied. */
static int golden_ints(const golden *gd, const char *key, int32_t *out, int cap) {
    spex_gguf_value arr;
    if (spex_gguf_get_arr(gd->g, key, &arr, NULL) != SPEX_OK || arr.elem_type != SPEX_GGUF_I32) return 0;
    int n = (int)arr.n;
    for (int i = 0; i < n && i < cap; i++) memcpy(&out[i], arr.data + 4 * (size_t)i, 4);
    return n;
}

static const float *golden_tensor(const golden *gd, const char *name, int64_t ne0, int64_t ne1) {
    const spex_tensor_info *t = spex_gguf_find_tensor(gd->g, name);
    if (!t || t->type != SPEX_TYPE_F32 || t->ne[0] != ne0 || t->ne[1] != ne1) return NULL;
    return t->data;
}

#define NEED_FIXTURE(gd, model_name, golden_name)                                               \
    golden gd;                                                                                  \
    if (!golden_open(model_name, golden_name, &gd))                                             \
        SKIP("tests/data/models/%s or %s missing (tools/ref/make_fixtures.py)", model_name,     \
             golden_name)

/* 40 tokens as one batch with all logits and taps [0, 1, 2] vs single.logits / single.taps,
 * then the greedy ids. `model` overrides the file (quantized copies), tol the bound. */
static void fixture_single(const char *model_name, const char *golden_name, const char *model_override,
                           double tol_logits, double tol_taps, spex_type kv, int threads, int min_greedy) {
    NEED_FIXTURE(gd, model_name, golden_name);
    spex_model *m = load(model_override ? model_override : gd.model_path);
    CHECK(m != NULL);
    const int V = spex_model_get_hparams(m)->n_vocab, E = spex_model_get_hparams(m)->n_embd;
    int32_t tokens[64], taps[8];
    const int n = golden_ints(&gd, "golden.single.tokens", tokens, 64);
    const int nt = golden_ints(&gd, "golden.taps", taps, 8);
    const float *gl = golden_tensor(&gd, "single.logits", V, n);
    const float *gt = golden_tensor(&gd, "single.taps", (int64_t)nt * E, n);
    CHECK(n == 40 && nt == 3 && gl && gt);
    spex_context *c = make_ctx(m, (ctx_opts){.kv = kv, .taps = taps, .n_taps = nt, .threads = threads});
    CHECK(c != NULL);
    spex_batch_token bt[64];
    for (int p = 0; p < n; p++) bt[p] = (spex_batch_token){tokens[p], p, 0, true};
    spex_error e = {0};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, n}, &e));
    double dl = 0, dt = max_diff(spex_taps(c), gt, (int64_t)n * nt * E);
    for (int p = 0; p < n; p++) dl = fmax(dl, max_diff(spex_logits(c, p), gl + (size_t)p * V, V));
    /* greedy */
    int32_t prompt[16], ids[32];
    const int np = golden_ints(&gd, "golden.greedy.prompt", prompt, 16);
    const int ng = golden_ints(&gd, "golden.greedy.ids", ids, 32);
    CHECK(np > 0 && np <= 16 && ng > 0 && ng <= 32);
    CHECK_OK(spex_kv_seq_clear(c, -1, &e));
    for (int p = 0; p < np; p++) bt[p] = (spex_batch_token){prompt[p], p, 0, p == np - 1};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, np}, &e));
    int agree = ng;
    for (int k = 0; k < ng; k++) {
        int32_t t = argmax(spex_logits(c, 0), V);
        if (t != ids[k]) {
            agree = k;
            break;
        }
        CHECK_OK(step1(c, t, np + k, 0, &e));
    }
    printf("  %s (kv %s, %d thr): max |diff| logits %.3g, taps %.3g; greedy %d/%d\n",
           model_override ? "quantized copy" : model_name, spex_type_get_info(kv)->name, threads, dl, dt, agree, ng);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(gd.g);
    CHECK_MSG(dl <= tol_logits, "logits differ by %.3g (tol %.3g)", dl, tol_logits);
    CHECK_MSG(dt <= tol_taps, "taps differ by %.3g (tol %.3g)", dt, tol_taps);
    CHECK_MSG(agree >= (min_greedy < 0 ? ng : min_greedy), "greedy diverges at step %d", agree);
}

TEST(qwen3_single_f32) {
    fixture_single("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", NULL, TOL_REF, TOL_REF, SPEX_TYPE_F32, 1, -1);
}
/* F16 K/V: measured 1.1e-3 (logits), 1.5e-3 (taps). */
TEST(qwen3_single_f16kv_2threads) {
    fixture_single("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", NULL, 5e-3, 5e-3, SPEX_TYPE_F16, 2, -1);
}
TEST(llama_tied_single_f32) {
    fixture_single("tiny-llama-tied.gguf", "tiny-llama-tied.golden.gguf", NULL, TOL_REF, TOL_REF, SPEX_TYPE_F32, 2, -1);
}

/* The pool's wait accounting by site (spex_pool_run_site) follows the forward's phases: one
 * 4-token forward on 2 threads posts one run per layer for each of Q/K/V, attention + W_o,
 * gate/up and down, and one for the head, and nothing else; every run boundary is counted on
 * both threads (the worker's wait for it to start, the caller's at its end), and the attention
 * phase has its barriers (at least the one between the K/V stores and the attention). */
TEST(wait_sites_follow_the_phases) {
    const char *path = fixture_path("tiny-qwen3.gguf");
    if (!path) SKIP("tests/data/models/tiny-qwen3.gguf missing");
    spex_model *m = load(path);
    CHECK(m != NULL);
    if (!m) return;
    spex_context *c = make_ctx(m, (ctx_opts){.threads = 2, .kv = SPEX_TYPE_F16});
    CHECK(c != NULL);
    spex_pool *pool = c ? spex_context_pool(c) : NULL;
    CHECK(pool != NULL && spex_pool_n_threads(pool) == 2);
    if (!pool) goto done;
    const int64_t N = spex_model_get_hparams(m)->n_layer;
    spex_error e = {0};
    CHECK_OK(step1(c, 5, 0, 0, &e)); /* a first forward outside the accounting */
    spex_pool_set_wait_accounting(pool, true);
    spex_batch_token t[4];
    for (int i = 0; i < 4; i++) t[i] = (spex_batch_token){.token = 7 + 3 * i, .pos = 1 + i, .seq = 0, .logits = i == 3};
    spex_batch b = {t, 4};
    CHECK_OK(spex_forward(c, &b, &e));
    const int64_t want[SPEX_SITE_COUNT] = {[SPEX_SITE_QKV] = N, [SPEX_SITE_ATTN] = N, [SPEX_SITE_FFN_UP] = N,
                                           [SPEX_SITE_FFN_DOWN] = N, [SPEX_SITE_HEAD] = 1};
    for (int ith = 0; ith < 2; ith++)
        for (int st = 0; st < SPEX_SITE_COUNT; st++) {
            int64_t n = -1;
            double sec = -1;
            spex_pool_wait_site(pool, ith, st, false, &sec, &n);
            CHECK_MSG(n == want[st] && sec >= 0, "thread %d, site %d: %lld run boundaries, want %lld", ith, st,
                      (long long)n, (long long)want[st]);
        }
    int64_t b0 = 0, b1 = 0;
    spex_pool_wait_site(pool, 0, SPEX_SITE_ATTN, true, NULL, &b0);
    spex_pool_wait_site(pool, 1, SPEX_SITE_ATTN, true, NULL, &b1);
    CHECK_MSG(b0 + b1 >= N, "attention barriers %lld + %lld for %lld layers", (long long)b0, (long long)b1,
              (long long)N);
    /* out of range: nothing */
    int64_t n = 5;
    double sec = 5;
    spex_pool_wait_site(pool, 2, SPEX_SITE_QKV, false, &sec, &n);
    CHECK(n == 0 && sec == 0.0);
    spex_pool_wait_site(pool, 0, SPEX_SITE_COUNT, false, &sec, &n);
    CHECK(n == 0 && sec == 0.0);
done:
    spex_context_free(c);
    spex_model_free(m);
}

/* ---- quantized weights ------------------------------------------------------------------ */

/* Logits of `tokens` fed as one batch (all rows), F32 KV, 2 threads, into out[n][V]. */
static bool run_logits(const char *path, const int32_t *tokens, int n, float *out, int cap_v) {
    spex_model *m = load(path);
    if (!m) return false;
    const int V = spex_model_get_hparams(m)->n_vocab;
    spex_context *c = V <= cap_v ? make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_F32, .threads = 2}) : NULL;
    spex_batch_token bt[64];
    for (int p = 0; p < n; p++) bt[p] = (spex_batch_token){tokens[p], p, 0, true};
    spex_error e = {0};
    bool ok = c && n <= 64 && spex_forward(c, &(spex_batch){bt, n}, &e) == SPEX_OK;
    for (int p = 0; ok && p < n; p++) memcpy(out + (size_t)p * V, spex_logits(c, p), sizeof(float) * (size_t)V);
    spex_context_free(c);
    spex_model_free(m);
    return ok;
}

/* Quantizes src to ft and checks the quantized run against an F32 run of the same
 * (dequantized) weights within tol; returns the measured difference in *d. */
static bool quantized_vs_dequantized(const char *src, spex_ftype ft, const char *tag, const int32_t *tokens, int n,
                                     double *d) {
    char qname[64], dname[64];
    snprintf(qname, sizeof qname, "%s.gguf", tag);
    snprintf(dname, sizeof dname, "%s-deq.gguf", tag);
    const char *q = test_tmp_path(qname), *dq = test_tmp_path(dname);
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = ft;
    qp.n_threads = 2;
    spex_error e = {0};
    if (spex_quantize_file(src, q, &qp, &e) != SPEX_OK || !test_write_dequantized(q, dq)) {
        printf("  quantize/dequantize %s: %s\n", tag, e.msg);
        return false;
    }
    enum { CAP = 1024 };
    float *a = malloc(sizeof(float) * CAP * 64), *b = malloc(sizeof(float) * CAP * 64);
    bool ok = run_logits(q, tokens, n, a, CAP) && run_logits(dq, tokens, n, b, CAP);
    spex_model *m = ok ? load(q) : NULL;
    *d = m ? max_diff(a, b, (int64_t)n * spex_model_get_hparams(m)->n_vocab) : 1e30;
    spex_model_free(m);
    free(a);
    free(b);
    return ok;
}

/* Quantized copies of the fixtures: vs the F32 reference (the weight error; loose bounds,
 * greedy agreement printed), and vs an F32 run of their dequantized weights (the engine's
 * quantized path; tight bounds). With E = 64 every matrix falls back to Q8_0 / Q5_0 (no
 * K-quant; see kquant_synthetic for those). Bounds are about 1.5x the measured values. */
static void fixture_quantized(const char *model_name, const char *golden_name, spex_ftype ft, const char *tag,
                              double tol_ref, double tol_deq) {
    const char *src = fixture_path(model_name);
    if (!src) SKIP("tests/data/models/%s missing", model_name);
    char qname[64];
    snprintf(qname, sizeof qname, "%s-ref.gguf", tag);
    const char *dst = test_tmp_path(qname);
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = ft;
    spex_error e = {0};
    CHECK_OK(spex_quantize_file(src, dst, &qp, &e));
    fixture_single(model_name, golden_name, dst, tol_ref, tol_ref, SPEX_TYPE_F32, 2, 0);
    if (test_failed_) return;
    const int32_t tokens[12] = {5, 77, 200, 13, 99, 140, 33, 8, 1, 250, 64, 3};
    double d;
    CHECK(quantized_vs_dequantized(src, ft, tag, tokens, 12, &d));
    printf("  %s %s vs F32 run of its dequantized weights: max |diff| %.3g\n", model_name, tag, d);
    CHECK_MSG(d <= tol_deq, "%.3g > %.3g", d, tol_deq);
}

/* measured: vs the reference 0.092 / 0.62 / 0.20, vs dequantized 0.072 / 0.068 / 0.069 */
TEST(qwen3_q8_0) { fixture_quantized("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", SPEX_FTYPE_Q8_0, "q3-q8", 0.15, 0.12); }
TEST(qwen3_q4_k_m) {
    fixture_quantized("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", SPEX_FTYPE_Q4_K_M, "q3-q4km", 0.9, 0.12);
}
TEST(llama_tied_q8_0) {
    fixture_quantized("tiny-llama-tied.gguf", "tiny-llama-tied.golden.gguf", SPEX_FTYPE_Q8_0, "ll-q8", 0.3, 0.12);
}

/* A synthetic qwen3 with E, F multiples of 256, so Q4_K_M / Q5_K_M really produce Q4_K,
 * Q5_K and Q6_K matrices (token_embd, output, attn_v / ffn_down "more bits"). */
static uint64_t rng_state;
static double rng_normal(void) {
    double s = 0; /* Irwin-Hall(12) - 6: close enough to N(0,1) for weights */
    for (int i = 0; i < 12; i++) {
        rng_state += 0x9E3779B97F4A7C15ull;
        uint64_t z = rng_state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        s += (double)(z >> 11) * (1.0 / 9007199254740992.0);
    }
    return s - 6.0;
}

static bool write_synthetic_qwen3(const char *path) {
    enum { E = 256, H = 4, HKV = 2, HD = 64, F = 512, N = 2, V = 256 };
    spex_gguf_writer *w = NULL;
    if (spex_gguf_writer_init(&w, NULL) != SPEX_OK) return false;
    spex_gguf_writer_set_str(w, "general.architecture", "qwen3", 5);
    spex_gguf_writer_set_u32(w, "qwen3.block_count", N);
    spex_gguf_writer_set_u32(w, "qwen3.context_length", 256);
    spex_gguf_writer_set_u32(w, "qwen3.embedding_length", E);
    spex_gguf_writer_set_u32(w, "qwen3.feed_forward_length", F);
    spex_gguf_writer_set_u32(w, "qwen3.attention.head_count", H);
    spex_gguf_writer_set_u32(w, "qwen3.attention.head_count_kv", HKV);
    spex_gguf_writer_set_u32(w, "qwen3.attention.key_length", HD);
    spex_gguf_writer_set_u32(w, "qwen3.attention.value_length", HD);
    spex_gguf_writer_set_f32(w, "qwen3.rope.freq_base", 1e6f);
    spex_gguf_writer_set_f32(w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    struct { char name[64]; int64_t ne0, ne1; bool norm; } ts[3 + N * 11];
    int n = 0;
#define T(nm, a, b, nr) (snprintf(ts[n].name, 64, "%s", nm), ts[n].ne0 = a, ts[n].ne1 = b, ts[n].norm = nr, n++)
    T("token_embd.weight", E, V, false);
    T("output_norm.weight", E, 1, true);
    T("output.weight", E, V, false);
    for (int l = 0; l < N; l++) {
        char b[64];
#define TL(sfx, a, bb, nr) (snprintf(b, 64, "blk.%d.%s", l, sfx), T(b, a, bb, nr))
        TL("attn_norm.weight", E, 1, true);
        TL("attn_q.weight", E, H * HD, false);
        TL("attn_k.weight", E, HKV * HD, false);
        TL("attn_v.weight", E, HKV * HD, false);
        TL("attn_output.weight", H * HD, E, false);
        TL("attn_q_norm.weight", HD, 1, true);
        TL("attn_k_norm.weight", HD, 1, true);
        TL("ffn_norm.weight", E, 1, true);
        TL("ffn_gate.weight", E, F, false);
        TL("ffn_up.weight", E, F, false);
        TL("ffn_down.weight", F, E, false);
#undef TL
    }
#undef T
    float *bufs[3 + N * 11];
    rng_state = 12345;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const int64_t cnt = ts[i].ne0 * ts[i].ne1;
        bufs[i] = malloc(sizeof(float) * (size_t)cnt);
        const bool emb = !strcmp(ts[i].name, "token_embd.weight");
        const double sd = ts[i].norm ? 0.1 : emb ? 1.0 : 1.0 / sqrt((double)ts[i].ne0);
        for (int64_t j = 0; j < cnt; j++) bufs[i][j] = (float)((ts[i].norm ? 1.0 : 0.0) + sd * rng_normal());
        const int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        ok = ok && spex_gguf_writer_add_tensor(w, ts[i].name, SPEX_TYPE_F32, ts[i].norm ? 1 : 2, ne, bufs[i],
                                               sizeof(float) * (uint64_t)cnt, NULL) == SPEX_OK;
    }
    ok = ok && spex_gguf_writer_write(w, path, NULL) == SPEX_OK;
    for (int i = 0; i < n; i++) free(bufs[i]);
    spex_gguf_writer_free(w);
    return ok;
}

TEST(kquant_synthetic) {
    const char *src = test_tmp_path("synthetic-qwen3-e256.gguf");
    CHECK(write_synthetic_qwen3(src));
    const int32_t tokens[10] = {3, 141, 59, 26, 53, 58, 97, 93, 238, 46};
    const spex_ftype fts[2] = {SPEX_FTYPE_Q4_K_M, SPEX_FTYPE_Q5_K_M};
    const char *tags[2] = {"syn-q4km", "syn-q5km"};
    for (int i = 0; i < 2; i++) {
        double d;
        CHECK(quantized_vs_dequantized(src, fts[i], tags[i], tokens, 10, &d));
        /* which types the file really has */
        spex_model *m = load(test_tmp_path(i == 0 ? "syn-q4km.gguf" : "syn-q5km.gguf"));
        CHECK(m != NULL);
        const spex_gguf *g = spex_model_gguf(m);
        bool seen[SPEX_TYPE_COUNT] = {0};
        for (int64_t t = 0; t < spex_gguf_n_tensors(g); t++) seen[spex_gguf_tensor(g, t)->type] = true;
        spex_model_free(m);
        printf("  %s (has q4_K %d, q5_K %d, q6_K %d) vs F32 run of its dequantized weights: max |diff| %.3g\n",
               tags[i], seen[SPEX_TYPE_Q4_K], seen[SPEX_TYPE_Q5_K], seen[SPEX_TYPE_Q6_K], d);
        CHECK(seen[SPEX_TYPE_Q6_K] && seen[i == 0 ? SPEX_TYPE_Q4_K : SPEX_TYPE_Q5_K]);
        CHECK_MSG(d <= 0.12, "%.3g", d);
    }
}

/* The 5-step multi-sequence schedule with truncations: every wanted row vs batch.logits and
 * every row's taps vs batch.taps. */
static void fixture_batch(const char *model_name, const char *golden_name, spex_type kv, double tol) {
    NEED_FIXTURE(gd, model_name, golden_name);
    spex_model *m = load(gd.model_path);
    CHECK(m != NULL);
    const int V = spex_model_get_hparams(m)->n_vocab, E = spex_model_get_hparams(m)->n_embd;
    enum { MAXR = 64 };
    int32_t step[MAXR], seq[MAXR], pos[MAXR], tok[MAXR], want[MAXR], trunc[12], taps[8];
    uint32_t n_steps = 0;
    CHECK_OK(spex_gguf_get_u32(gd.g, "golden.batch.n_steps", &n_steps, NULL));
    const int nr = golden_ints(&gd, "golden.batch.step", step, MAXR);
    CHECK(nr > 0 && nr <= MAXR);
    CHECK(golden_ints(&gd, "golden.batch.seq", seq, MAXR) == nr && golden_ints(&gd, "golden.batch.pos", pos, MAXR) == nr &&
          golden_ints(&gd, "golden.batch.token", tok, MAXR) == nr &&
          golden_ints(&gd, "golden.batch.want", want, MAXR) == nr);
    const int ntr = golden_ints(&gd, "golden.batch.truncate", trunc, 12);
    const int nt = golden_ints(&gd, "golden.taps", taps, 8);
    int n_want = 0;
    for (int r = 0; r < nr; r++) n_want += want[r] != 0;
    const float *gl = golden_tensor(&gd, "batch.logits", V, n_want);
    const float *gt = golden_tensor(&gd, "batch.taps", (int64_t)nt * E, nr);
    CHECK(gl && gt && ntr % 3 == 0);
    spex_context *c = make_ctx(m, (ctx_opts){.kv = kv, .n_seq = 3, .taps = taps, .n_taps = nt, .threads = 2});
    CHECK(c != NULL);
    spex_error e = {0};
    double dl = 0, dt = 0;
    int r0 = 0, w0 = 0;
    for (int s = 0; s < (int)n_steps; s++) {
        for (int i = 0; i + 2 < ntr; i += 3)
            if (trunc[i] == s) CHECK_OK(spex_kv_seq_truncate(c, trunc[i + 1], trunc[i + 2], &e));
        spex_batch_token bt[MAXR];
        int n = 0;
        while (r0 + n < nr && step[r0 + n] == s) {
            const int r = r0 + n;
            bt[n++] = (spex_batch_token){tok[r], pos[r], seq[r], want[r] != 0};
        }
        CHECK_MSG(spex_forward(c, &(spex_batch){bt, n}, &e) == SPEX_OK, "step %d: %s", s, e.msg);
        for (int i = 0; i < n; i++) {
            dt = fmax(dt, max_diff(spex_taps(c) + (size_t)i * nt * E, gt + (size_t)(r0 + i) * nt * E, (int64_t)nt * E));
            if (bt[i].logits) {
                dl = fmax(dl, max_diff(spex_logits_of_token(c, i), gl + (size_t)w0 * V, V));
                w0++;
            }
        }
        r0 += n;
    }
    CHECK_EQ_INT(r0, nr);
    /* final lengths = the histories */
    for (int s = 0; s < 3; s++) {
        char key[64];
        int32_t hist[64];
        snprintf(key, sizeof key, "golden.batch.history.%d", s);
        CHECK_EQ_INT(spex_kv_seq_len(c, s), golden_ints(&gd, key, hist, 64));
    }
    printf("  %s batch schedule (kv %s): %d rows, %d logit rows: max |diff| logits %.3g, taps %.3g\n", model_name,
           spex_type_get_info(kv)->name, nr, n_want, dl, dt);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(gd.g);
    CHECK(dl <= tol);
    CHECK(dt <= tol);
}

TEST(qwen3_batch_schedule_f32) { fixture_batch("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", SPEX_TYPE_F32, TOL_REF); }
TEST(qwen3_batch_schedule_f16kv) { fixture_batch("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", SPEX_TYPE_F16, 5e-3); }
/* Q8_0 K/V (expanded per sequence inside the attention phase, 2 threads); measured 0.028
 * (logits), 0.051 (taps). */
TEST(qwen3_batch_schedule_q8kv) { fixture_batch("tiny-qwen3.gguf", "tiny-qwen3.golden.gguf", SPEX_TYPE_Q8_0, 0.1); }
TEST(llama_tied_batch_schedule_f32) {
    fixture_batch("tiny-llama-tied.gguf", "tiny-llama-tied.golden.gguf", SPEX_TYPE_F32, TOL_REF);
}

TEST(qwen3_hparams) {
    const char *p = fixture_path("tiny-qwen3.gguf");
    if (!p) SKIP("tests/data/models/tiny-qwen3.gguf missing");
    spex_model *m = load(p);
    CHECK(m != NULL);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    /* head_dim from key_length (E/H would be 16), n_rot defaults to head_dim, NEOX, QK-norm */
    int ok = hp->arch == SPEX_ARCH_QWEN3 && hp->head_dim == 32 && hp->n_rot == 32 && hp->n_head == 4 &&
             hp->n_head_kv == 2 && hp->rope_mode == 2 && hp->qk_norm && !hp->tied_output &&
             hp->rope_freq_base == 1e6f;
    spex_model_free(m);
    p = fixture_path("tiny-llama-tied.gguf");
    CHECK(ok && p);
    m = load(p);
    CHECK(m != NULL);
    hp = spex_model_get_hparams(m);
    ok = hp->arch == SPEX_ARCH_LLAMA && hp->tied_output && hp->head_dim == 8 && hp->rope_mode == 0 &&
         spex_model_lm_head(m) == spex_model_token_embd(m);
    spex_model_free(m);
    CHECK(ok);
}

/* ======================================================================== */
/* Errors                                                                    */
/* ======================================================================== */

/* Writes a copy of `src` with one tensor replaced (new type/shape, zero data), dropped, or
 * with general.architecture changed. */
static bool write_variant(const char *src, const char *dst, const char *tensor, spex_type type, const int64_t *ne,
                          uint32_t n_dims, bool drop, const char *arch) {
    spex_gguf *g = NULL;
    if (spex_gguf_open(src, &g, NULL) != SPEX_OK) return false;
    spex_gguf_writer *w = NULL;
    bool ok = spex_gguf_writer_init(&w, NULL) == SPEX_OK;
    for (int64_t i = 0; ok && i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value v;
        ok = spex_gguf_value_at(g, i, &v) == SPEX_OK && spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &v) == SPEX_OK;
    }
    if (ok && arch) ok = spex_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch)) == SPEX_OK;
    void *buf = NULL;
    for (int64_t i = 0; ok && i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (tensor && !strcmp(t->name, tensor)) {
            if (drop) continue;
            uint64_t nb = spex_type_row_size(type, ne[0]);
            for (uint32_t d = 1; d < n_dims; d++) nb *= (uint64_t)ne[d];
            buf = calloc(1, nb ? nb : 1);
            ok = spex_gguf_writer_add_tensor(w, t->name, type, n_dims, ne, buf, nb, NULL) == SPEX_OK;
        } else {
            ok = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, NULL) == SPEX_OK;
        }
    }
    ok = ok && spex_gguf_writer_write(w, dst, NULL) == SPEX_OK;
    spex_gguf_writer_free(w);
    free(buf);
    spex_gguf_close(g);
    return ok;
}

static void expect_load_error(const char *path, spex_status want, const char *const *needles) {
    spex_error e = {0};
    spex_model *m = (spex_model *)1;
    spex_status s = spex_model_load(path, NULL, &m, &e);
    printf("  -> %s\n", e.msg);
    CHECK_MSG(s == want, "status %s, expected %s", spex_status_str(s), spex_status_str(want));
    CHECK(m == NULL);
    for (int i = 0; needles[i]; i++) CHECK_MSG(strstr(e.msg, needles[i]), "'%s' not in the message", needles[i]);
}

TEST(error_wrong_shape) {
    if (!stories_path()) SKIP("stories260K not found");
    const char *p = test_tmp_path("bad-shape.gguf");
    const int64_t ne[2] = {64, 16};
    CHECK(write_variant(stories_path(), p, "blk.2.attn_k.weight", SPEX_TYPE_F32, ne, 2, false, NULL));
    expect_load_error(p, SPEX_ERR_FORMAT, (const char *[]){"blk.2.attn_k.weight", "[64, 16]", "[64, 32]", NULL});
}

TEST(error_wrong_norm_shape) {
    if (!stories_path()) SKIP("stories260K not found");
    const char *p = test_tmp_path("bad-norm-shape.gguf");
    const int64_t ne[2] = {64, 2};
    CHECK(write_variant(stories_path(), p, "output_norm.weight", SPEX_TYPE_F32, ne, 2, false, NULL));
    expect_load_error(p, SPEX_ERR_FORMAT, (const char *[]){"output_norm.weight", "[64, 2]", "[64]", NULL});
}

TEST(error_wrong_type) {
    if (!stories_path()) SKIP("stories260K not found");
    const char *p = test_tmp_path("bad-type.gguf");
    const int64_t ne[1] = {64};
    CHECK(write_variant(stories_path(), p, "blk.1.ffn_norm.weight", SPEX_TYPE_F16, ne, 1, false, NULL));
    expect_load_error(p, SPEX_ERR_TYPE, (const char *[]){"blk.1.ffn_norm.weight", "f16", "f32", NULL});
    const int64_t ne2[2] = {64, 64};
    CHECK(write_variant(stories_path(), p, "blk.0.attn_q.weight", SPEX_TYPE_I8, ne2, 2, false, NULL));
    expect_load_error(p, SPEX_ERR_TYPE, (const char *[]){"blk.0.attn_q.weight", "i8", NULL});
}

TEST(error_missing_tensor) {
    if (!stories_path()) SKIP("stories260K not found");
    const char *p = test_tmp_path("missing.gguf");
    CHECK(write_variant(stories_path(), p, "blk.4.ffn_up.weight", SPEX_TYPE_F32, NULL, 0, true, NULL));
    expect_load_error(p, SPEX_ERR_NOT_FOUND, (const char *[]){"blk.4.ffn_up.weight", "missing", NULL});
}

TEST(error_unknown_arch) {
    if (!stories_path()) SKIP("stories260K not found");
    const char *p = test_tmp_path("arch.gguf");
    CHECK(write_variant(stories_path(), p, NULL, SPEX_TYPE_F32, NULL, 0, false, "mamba"));
    expect_load_error(p, SPEX_ERR_UNSUPPORTED, (const char *[]){"mamba", "general.architecture", NULL});
    /* an arch spex knows but whose keys are absent: the missing key is named */
    CHECK(write_variant(stories_path(), p, NULL, SPEX_TYPE_F32, NULL, 0, false, "qwen3"));
    expect_load_error(p, SPEX_ERR_NOT_FOUND, (const char *[]){"qwen3.block_count", NULL});
    expect_load_error("/nonexistent/model.gguf", SPEX_ERR_IO, (const char *[]){"/nonexistent/model.gguf", NULL});
}

TEST(error_batches) {
    NEED_STORIES(m, g);
    (void)g;
    spex_context *c = make_ctx(m, (ctx_opts){.n_seq = 2, .n_ctx = 8, .n_batch = 6, .n_out = 3});
    CHECK(c != NULL);
    spex_error e = {0};
    spex_batch_token bt[8];
    for (int p = 0; p < 3; p++) bt[p] = (spex_batch_token){1 + p, p, 0, p == 2};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 3}, &e));
    float before[512];
    memcpy(before, spex_logits(c, 0), sizeof before);
    struct {
        spex_batch_token t[3];
        int n;
        spex_status want;
        const char *needle;
    } cases[] = {
        {{{5, 4, 0, true}}, 1, SPEX_ERR_INVALID_ARG, "position 4, expected 3"},               /* gap            */
        {{{5, 2, 0, true}}, 1, SPEX_ERR_INVALID_ARG, "position 2, expected 3"},               /* overwrite      */
        {{{5, 3, 0, true}, {6, 3, 0, true}}, 2, SPEX_ERR_INVALID_ARG, "expected 4"},          /* repeat in batch */
        {{{5, 1, 1, true}}, 1, SPEX_ERR_INVALID_ARG, "sequence 1): position 1, expected 0"},  /* fresh seq      */
        {{{5, 0, 2, true}}, 1, SPEX_ERR_INVALID_ARG, "sequence 2"},                           /* bad seq        */
        {{{512, 3, 0, true}}, 1, SPEX_ERR_INVALID_ARG, "id 512"},                             /* bad token      */
        {{{-1, 3, 0, true}}, 1, SPEX_ERR_INVALID_ARG, "id -1"},
        {{{5, 3, 0, true}}, 0, SPEX_ERR_INVALID_ARG, "empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        e.msg[0] = 0;
        spex_status s = spex_forward(c, &(spex_batch){cases[i].t, cases[i].n}, &e);
        CHECK_MSG(s == cases[i].want && strstr(e.msg, cases[i].needle), "case %zu: %s '%s'", i, spex_status_str(s),
                  e.msg);
    }
    /* too many tokens, too many outputs */
    for (int p = 0; p < 7; p++) bt[p] = (spex_batch_token){5, 3 + p, 0, false};
    CHECK(spex_forward(c, &(spex_batch){bt, 7}, &e) == SPEX_ERR_RANGE && strstr(e.msg, "n_batch_max 6"));
    for (int p = 0; p < 4; p++) bt[p].logits = true;
    CHECK(spex_forward(c, &(spex_batch){bt, 4}, &e) == SPEX_ERR_RANGE && strstr(e.msg, "n_outputs_max is 3"));
    /* capacity: 3 cached + 6 new > 8 */
    for (int p = 0; p < 6; p++) bt[p].logits = false;
    CHECK(spex_forward(c, &(spex_batch){bt, 6}, &e) == SPEX_ERR_RANGE && strstr(e.msg, "full") &&
          strstr(e.msg, "n_ctx_per_seq 8"));
    printf("  capacity: %s\n", e.msg);
    /* nothing changed: length and the previous outputs */
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 3);
    CHECK_EQ_INT(spex_n_outputs(c), 1);
    CHECK(max_diff(spex_logits(c, 0), before, 512) == 0.0);
    CHECK(spex_logits(c, 1) == NULL && spex_logits(c, -1) == NULL && spex_logits_of_token(c, 0) == NULL);
    /* exactly full is fine */
    CHECK_OK(spex_forward(c, &(spex_batch){bt, 5}, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 8);
    CHECK(spex_forward(c, &(spex_batch){(spex_batch_token[]){{5, 8, 0, true}}, 1}, &e) == SPEX_ERR_RANGE);
    spex_context_free(c);
    spex_model_free(m);
}

TEST(error_context_params) {
    NEED_STORIES(m, g);
    (void)g;
    spex_context_params p = spex_context_default_params();
    spex_context *c = (spex_context *)1;
    spex_error e = {0};
    p.kv_type = SPEX_TYPE_Q4_K;
    CHECK(spex_context_init(m, &p, &c, &e) == SPEX_ERR_UNSUPPORTED && c == NULL && strstr(e.msg, "kv_type"));
    p = spex_context_default_params();
    int32_t taps[2] = {2, 6};
    p.tap_layers = taps;
    p.n_taps = 2;
    CHECK(spex_context_init(m, &p, &c, &e) == SPEX_ERR_INVALID_ARG && strstr(e.msg, "tap layer id 6"));
    taps[1] = 2;
    CHECK(spex_context_init(m, &p, &c, &e) == SPEX_ERR_INVALID_ARG && strstr(e.msg, "twice"));
    p = spex_context_default_params();
    p.n_seq_max = 0;
    CHECK(spex_context_init(m, &p, &c, &e) == SPEX_ERR_INVALID_ARG);
    /* defaults resolve and the memory report adds up */
    p = spex_context_default_params();
    CHECK_OK(spex_context_init(m, &p, &c, &e));
    const spex_context_params *rp = spex_context_get_params(c);
    spex_memory_usage mu = spex_context_memory(c);
    CHECK_EQ_INT(rp->n_ctx_per_seq, 2048);
    CHECK_EQ_INT(rp->n_outputs_max, 64);
    /* F16 KV: 2 (K, V) x 5 layers x 2048 x 32 x 2 bytes */
    CHECK_EQ_INT(mu.kv, 2ull * 5 * 2048 * 32 * 2);
    CHECK_EQ_INT(mu.weights, spex_model_weight_bytes(m));
    CHECK(mu.compute > 512u * 64 * 4);
    spex_context_free(c);
    spex_model_free(m);
}

/* The load and context lines go through the caller's log sink when verbose. */
static char log_lines[4][512];
static int n_log_lines;
static void log_sink(void *user, const char *line) {
    (void)user;
    if (n_log_lines < 4) snprintf(log_lines[n_log_lines++], sizeof log_lines[0], "%s", line);
}

TEST(memory_log) {
    const char *p = fixture_path("tiny-qwen3.gguf");
    if (!p) SKIP("tests/data/models/tiny-qwen3.gguf missing");
    spex_model_params mp = spex_model_default_params();
    mp.verbose = true;
    mp.log = log_sink;
    spex_model *m = NULL;
    spex_error e = {0};
    CHECK_OK(spex_model_load(p, &mp, &m, &e));
    spex_context *c = make_ctx(m, (ctx_opts){.kv = SPEX_TYPE_Q8_0, .n_seq = 2, .n_ctx = 128});
    CHECK(c != NULL);
    spex_memory_usage mu = spex_context_memory(c);
    const uint64_t n_params = spex_model_n_params(m);
    for (int i = 0; i < n_log_lines; i++) printf("  log: %s\n", log_lines[i]);
    spex_context_free(c);
    spex_model_free(m);
    CHECK_EQ_INT(n_log_lines, 2);
    CHECK(strstr(log_lines[0], "qwen3") && strstr(log_lines[0], "weights") && strstr(log_lines[0], "untied"));
    CHECK(strstr(log_lines[1], "KV q8_0") && strstr(log_lines[1], "compute"));
    /* Q8_0 rows of kv_dim 64: 2 blocks of 34 bytes; K and V, 3 layers, 2 x 128 rows */
    CHECK_EQ_INT(mu.kv, 2ull * 3 * 2 * 128 * 68);
    /* all F32 weights: bytes = 4 x params */
    CHECK_EQ_INT(mu.weights, 4 * n_params);
}

TEST_MAIN()
