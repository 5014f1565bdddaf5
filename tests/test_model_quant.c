/*
 * test_model_quant.c — the qwen3 forward pass on quantized weights against the NumPy
 * reference run on the same (dequantized) weights (issue 3, test 2, the Q8_0 and Q4_K_M
 * parts; the F32 part is tests/test_model.c).
 *
 * Fixtures (tests/data/models/, written by tools/ref/make_fixtures.py, layout in
 * tools/ref/README.md "Quantized model fixtures"):
 *  - tiny-qwen3-q8_0.gguf: tiny-qwen3.gguf (E = 64) quantized to Q8_0 by the Python
 *    quantizer tools/ref/ggml_formats.py;
 *  - qwen3-e256-q4_k_m.gguf: a qwen3 with E = 256, FFN 512, head dim 64, 2 layers, stored
 *    directly as Q4_K_M (13 q4_K, 3 q6_K: output, blk.1.attn_v, blk.1.ffn_down), so real
 *    K-quant matmuls run (at E = 64 Q4_K_M falls back to Q5_0 / Q8_0);
 *  - their *.golden.gguf: the 40-token logits of model_ref.py (float64) on the dequantized
 *    weights, with each position's argmax and top-1 minus top-2 margin.
 *
 * What is checked: the Python Q8_0 file is byte for byte the file spex_quantize_file writes
 * from the F32 fixture (two implementations of the same format, recipe and layout; each
 * tensor is compared on its own too, to name the one that differs); each file dequantized
 * by spex and run in F32 equals the reference to float32 accuracy (so both sides decode
 * every block alike); the quantized files themselves, one 40-row batch with an F32 K/V
 * cache (only the matmul's activation quantization differs from the reference), within a
 * measured bound `tol`; and the argmax at every position whose reference top-1 minus top-2
 * margin exceeds tol (the bound is twice the measured error, and logits each within tol/2
 * of the reference cannot swap two logits more than tol apart; smaller margins are
 * near-ties the activation rounding may legitimately flip).
 *
 * Also: the Q4_K_M file's logits are bit-identical with its Q4_K matrices repacked into the
 * R16 layout at load (the default where the kernels gain from it) and kept as mapped
 * (no_repack), in one 40-row batch and in 1-row decoding.
 *
 * Not checked here: the F32 fixture itself, batching, rollback, taps (test_model.c).
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "cpu/matmul.h"
#include "gguf_fixtures.h"
#include "model/model.h"
#include "test.h"
#include "tensor/api.h"

#include <stdint.h>
#include <unistd.h>

enum { N_TOK = 40, V_MAX = 256 };

static const char *fixture(const char *name) {
    static char buf[4][256];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "tests/data/models/%s", name);
    return access(b, R_OK) == 0 ? b : NULL;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x; /* NaN counts as huge */
    }
    return d;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ---- the Python Q8_0 file equals spex_quantize_file's ------------------------------------ */

static uint8_t *read_all(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)*size);
        if (buf && fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

TEST(q8_0_python_bytes_equal_spex_quantize) {
    const char *src = fixture("tiny-qwen3.gguf"), *py = fixture("tiny-qwen3-q8_0.gguf");
    if (!src || !py) SKIP("tests/data/models/tiny-qwen3{,-q8_0}.gguf missing (tools/ref/make_fixtures.py)");
    char out[64];
    snprintf(out, sizeof out, "/tmp/spex-test-model-quant-%d.gguf", (int)getpid());
    spex_quantize_params qp = spex_quantize_default_params();
    qp.ftype = SPEX_FTYPE_Q8_0;
    qp.n_threads = 2;
    spex_error e = {0};
    CHECK_OK(spex_quantize_file(src, out, &qp, &e));
    spex_gguf *gc = NULL, *gp = NULL;
    spex_status sc = spex_gguf_open(out, &gc, &e), sp = spex_gguf_open(py, &gp, &e);
    /* beyond the tensors: the whole files, metadata order and values, alignment, padding */
    long size_c = 0, size_p = 0;
    uint8_t *fc = read_all(out, &size_c), *fp = read_all(py, &size_p);
    const bool file_same = fc && fp && size_c == size_p && !memcmp(fc, fp, (size_t)size_p);
    free(fc);
    free(fp);
    unlink(out); /* the mapping stays valid */
    CHECK(sc == SPEX_OK && sp == SPEX_OK);
    const int64_t n = spex_gguf_n_tensors(gp);
    int n_q8 = 0, n_f32 = 0, n_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const spex_tensor_info *tp = spex_gguf_tensor(gp, i), *tc = spex_gguf_find_tensor(gc, tp->name);
        bool same = tc && tc->type == tp->type && tc->n_dims == tp->n_dims && tc->nbytes == tp->nbytes &&
                    !memcmp(tc->ne, tp->ne, sizeof tp->ne) && !memcmp(tc->data, tp->data, tp->nbytes);
        if (!same) {
            if (n_bad++ < 4)
                printf("  %s differs (spex: %s, python: %s)\n", tp->name,
                       tc ? spex_type_get_info(tc->type)->name : "absent", spex_type_get_info(tp->type)->name);
            continue;
        }
        n_q8 += tp->type == SPEX_TYPE_Q8_0;
        n_f32 += tp->type == SPEX_TYPE_F32;
    }
    printf("  %d q8_0 + %d f32 tensors byte-identical of %lld; whole files (%ld B) %s\n", n_q8, n_f32, (long long)n,
           size_p, file_same ? "byte-identical" : "differ");
    CHECK_EQ_INT(spex_gguf_n_tensors(gc), n);
    spex_gguf_close(gc);
    spex_gguf_close(gp);
    CHECK_EQ_INT(n_bad, 0);
    CHECK_EQ_INT(n_q8, 23); /* 3 layers x 7 matrices + token_embd + output */
    CHECK_EQ_INT(n_f32, 13);
    CHECK(file_same);
}

/* ---- logits vs the reference on the dequantized weights --------------------------------- */

/* Runs the 40 golden tokens as one batch (F32 K/V, 2 threads) and compares every logit with
 * single.logits (bound tol) and the argmax at positions with margin > tol. With `dequantize`
 * the model is first rewritten as F32 (test_write_dequantized): then nothing is quantized at run
 * time and the bound is float32 accuracy, which pins down that spex and the Python side
 * decode every block of the file the same way. */
/* Largest |x[i]|. Its own function with a branch: aarch64 gcc 12 crashes (internal compiler
 * error in vect_transform_reduction) vectorizing the fmax-of-fabs reduction inlined above. */
static double max_abs(const float *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        double a = fabs((double)x[i]);
        if (a > m) m = a;
    }
    return m;
}

static void quant_vs_reference(const char *model_name, const char *golden_name, spex_type head_type,
                               spex_type embd_type, bool dequantize, double tol) {
    const char *mp = fixture(model_name), *gpath = fixture(golden_name);
    if (!mp || !gpath) SKIP("tests/data/models/%s or %s missing (tools/ref/make_fixtures.py)", model_name, golden_name);
    char deq[256];
    if (dequantize) {
        snprintf(deq, sizeof deq, "%s", test_tmp_path("deq.gguf"));
        bool ok = test_write_dequantized(mp, deq);
        if (!ok) unlink(deq);
        CHECK(ok);
        mp = deq;
        head_type = embd_type = SPEX_TYPE_F32;
    }
    spex_gguf *g = NULL;
    spex_error e = {0};
    CHECK_OK(spex_gguf_open(gpath, &g, &e));
    spex_gguf_value tv, av;
    CHECK(spex_gguf_get_arr(g, "golden.single.tokens", &tv, NULL) == SPEX_OK && tv.n == N_TOK);
    CHECK(spex_gguf_get_arr(g, "golden.single.argmax", &av, NULL) == SPEX_OK && av.n == N_TOK);
    int32_t tokens[N_TOK], want_id[N_TOK];
    memcpy(tokens, tv.data, sizeof tokens);
    memcpy(want_id, av.data, sizeof want_id);
    const spex_tensor_info *gl = spex_gguf_find_tensor(g, "single.logits");
    const spex_tensor_info *gm = spex_gguf_find_tensor(g, "single.margin");

    spex_model *m = NULL;
    spex_status ls = spex_model_load(mp, NULL, &m, &e);
    if (dequantize) unlink(deq); /* the mapping stays valid */
    CHECK_OK(ls);
    const int V = spex_model_get_hparams(m)->n_vocab;
    CHECK(V == V_MAX && gl && gl->type == SPEX_TYPE_F32 && gl->ne[0] == V && gl->ne[1] == N_TOK);
    CHECK(gm && gm->type == SPEX_TYPE_F32 && gm->ne[0] == N_TOK);
    CHECK_EQ_INT(spex_model_lm_head(m)->type, head_type);
    CHECK_EQ_INT(spex_model_token_embd(m)->type, embd_type);

    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 64;
    cp.n_batch_max = 64;
    cp.n_outputs_max = 64;
    cp.kv_type = SPEX_TYPE_F32;
    cp.n_threads = 2;
    spex_context *c = NULL;
    CHECK_OK(spex_context_init(m, &cp, &c, &e));
    spex_batch_token bt[N_TOK];
    for (int p = 0; p < N_TOK; p++) bt[p] = (spex_batch_token){tokens[p], p, 0, true};
    CHECK_OK(spex_forward(c, &(spex_batch){bt, N_TOK}, &e));

    const float *ref = gl->data, *margin = gm->data;
    double worst = 0, absmax = 0;
    int compared = 0, agree = 0, pos_worst = 0;
    for (int p = 0; p < N_TOK; p++) {
        const float *row = spex_logits(c, p);
        double d = max_abs_diff(row, ref + (size_t)p * V, V);
        if (d > worst) worst = d, pos_worst = p;
        absmax = fmax(absmax, max_abs(ref + (size_t)p * V, V));
        if (margin[p] > tol) {
            compared++;
            int a = argmax(row, V);
            if (a == want_id[p]) agree++;
            else printf("  position %d: argmax %d, reference %d (margin %.3g)\n", p, a, want_id[p], margin[p]);
        }
    }
    printf("  %s%s: max |logit - ref| %.3g at position %d (%.2g of max |logit| %.2f; bound %.3g); argmax equal at "
           "%d of %d positions with margin > %.3g\n",
           model_name, dequantize ? " dequantized to F32" : "", worst, pos_worst, worst / absmax, absmax, tol, agree,
           compared, tol);
    spex_context_free(c);
    spex_model_free(m);
    spex_gguf_close(g);
    CHECK_MSG(worst <= tol, "logits differ by %.3g (bound %.3g)", worst, tol);
    CHECK_EQ_INT(agree, compared);
    /* enough positions clear the bound for the argmax check to mean something */
    CHECK_MSG(compared >= N_TOK / 2, "only %d positions with margin > %.3g", compared, tol);
}

/* Bounds: twice the measured max |logit - reference| over the 40 x 256 logits. spex
 * quantizes each activation row to Q8_0 (Q8_0 weights) or Q8_K (K-quant weights) inside the
 * matmul, as ggml does, while the reference multiplies the float activations by the
 * dequantized weights in float64; that rounding (relative ~1/254 per element, through the
 * layers and the head) is the whole difference, about 1.5% of the largest logit.
 * Measured (2 threads; the same three digits with SPEX_ISA=scalar, avx2, avx512):
 * Q8_0 (E = 64, 3 layers) 0.058 of max |logit| 4.10; Q4_K_M (E = 256, 2 layers) 0.080 of
 * 4.35. */
TEST(qwen3_q8_0_vs_reference) {
    quant_vs_reference("tiny-qwen3-q8_0.gguf", "tiny-qwen3-q8_0.golden.gguf", SPEX_TYPE_Q8_0, SPEX_TYPE_Q8_0, false,
                       0.12);
}

TEST(qwen3_e256_q4_k_m_vs_reference) {
    quant_vs_reference("qwen3-e256-q4_k_m.gguf", "qwen3-e256-q4_k_m.golden.gguf", SPEX_TYPE_Q6_K, SPEX_TYPE_Q4_K, false,
                       0.16);
}

/* The same files dequantized to F32 by spex: float32 vs float64 only, 1e-4 as for the F32
 * fixture in test_model.c (measured: see the PASS notes). */
TEST(qwen3_q8_0_dequantized_vs_reference) {
    quant_vs_reference("tiny-qwen3-q8_0.gguf", "tiny-qwen3-q8_0.golden.gguf", 0, 0, true, 1e-4);
}

TEST(qwen3_e256_q4_k_m_dequantized_vs_reference) {
    quant_vs_reference("qwen3-e256-q4_k_m.gguf", "qwen3-e256-q4_k_m.golden.gguf", 0, 0, true, 1e-4);
}

/* Logits of the 40 fixture tokens, as one batch (rows 0..39) and then decoded one by one
 * (rows 40..79), into out[80][V]; returns the model's R16 bytes. */
static bool g_arena_ok; /* set by run_tokens: the R16 copies sit in one arena */

static uint64_t run_tokens(const char *mp, bool no_repack, const int32_t *tokens, float *out, int V) {
    spex_model_params mp_ = spex_model_default_params();
    mp_.no_repack = no_repack;
    spex_model *m = NULL;
    spex_error e = {0};
    if (spex_model_load(mp, &mp_, &m, &e) != SPEX_OK) return UINT64_MAX;
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 64;
    cp.n_batch_max = 64;
    cp.n_outputs_max = 64;
    cp.n_threads = 2;
    spex_context *c = NULL;
    uint64_t bytes = UINT64_MAX;
    if (spex_context_init(m, &cp, &c, &e) != SPEX_OK) goto done;
    spex_batch_token bt[N_TOK];
    for (int p = 0; p < N_TOK; p++) bt[p] = (spex_batch_token){tokens[p], p, 0, true};
    if (spex_forward(c, &(spex_batch){bt, N_TOK}, &e) != SPEX_OK) goto done;
    for (int p = 0; p < N_TOK; p++) memcpy(out + (size_t)p * V, spex_logits(c, p), sizeof(float) * (size_t)V);
    if (spex_kv_seq_truncate(c, 0, 0, &e) != SPEX_OK) goto done;
    for (int p = 0; p < N_TOK; p++) {
        if (spex_forward(c, &(spex_batch){&bt[p], 1}, &e) != SPEX_OK) goto done;
        memcpy(out + (size_t)(N_TOK + p) * V, spex_logits(c, 0), sizeof(float) * (size_t)V);
    }
    bytes = m->repack.bytes;
    /* every copy is a 64-byte aligned slice of the load's one arena, in order, none overlapping */
    if (!no_repack) g_arena_ok = m->repack.n == 0 || m->repack.n_arena == 1;
    for (int i = 0; !no_repack && g_arena_ok && i < m->repack.n; i++) {
        const uint8_t *b = m->repack.bufs[i], *base = m->repack.arenas[0];
        g_arena_ok = b >= base && (uintptr_t)b % 64 == 0 && (uint64_t)(b - base) < m->repack.bytes &&
                     (i == 0 || b > (const uint8_t *)m->repack.bufs[i - 1]);
    }
done:
    spex_context_free(c);
    spex_model_free(m);
    return bytes;
}

TEST(q4_k_m_r16_repack_bit_identical) {
    const char *mp = fixture("qwen3-e256-q4_k_m.gguf");
    if (!mp) SKIP("tests/data/models/qwen3-e256-q4_k_m.gguf missing (tools/ref/make_fixtures.py)");
    int32_t tokens[N_TOK];
    for (int p = 0; p < N_TOK; p++) tokens[p] = (p * 37 + 11) % V_MAX;
    float *a = malloc(sizeof(float) * 2 * N_TOK * V_MAX), *b = malloc(sizeof(float) * 2 * N_TOK * V_MAX);
    /* the ISA in use, then AVX2 where the CPU has it and it is not the one in use (its
     * AVX-VNNI kernels read both layouts through their own code) */
    const spex_isa was = spex_cpu_isa();
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && (was == SPEX_ISA_AVX2 || spex_cpu_set_isa(SPEX_ISA_AVX2) != SPEX_OK)) break;
        const uint64_t ra = run_tokens(mp, false, tokens, a, V_MAX), rb = run_tokens(mp, true, tokens, b, V_MAX);
        CHECK(ra != UINT64_MAX && rb == 0);
        CHECK_MSG(g_arena_ok, "the R16 copies are not 64-byte aligned slices of one arena");
        if (spex_matmul_kernels_get()->r16_fast[SPEX_TYPE_Q4_K]) CHECK_MSG(ra > 0, "nothing was repacked");
        else CHECK(ra == 0);
        printf("  %llu bytes of Q4_K repacked (ISA %s)\n", (unsigned long long)ra, spex_isa_name(spex_cpu_isa()));
        CHECK_MSG(!memcmp(a, b, sizeof(float) * 2 * N_TOK * V_MAX), "ISA %s: repacked logits differ",
                  spex_isa_name(spex_cpu_isa()));
    }
    CHECK_OK(spex_cpu_set_isa(was));
    free(a);
    free(b);
}

/* spex_model_repack on hand-made weights: a Q4_K matrix large enough to be packed in several
 * pieces (threads), a Q6_K one, and a third weight on the first one's data; each copy must
 * equal spex_r16_pack of the whole matrix, shared data must be copied once. */
TEST(repack_in_pieces_equals_whole_pack) {
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    if (!k->r16_fast[SPEX_TYPE_Q4_K] || !k->r16_fast[SPEX_TYPE_Q6_K])
        SKIP("the active kernels read the ggml layout (no R16 repack on this ISA)");
    const int64_t n = 1024, rows_a = 16 * 300, rows_b = 32; /* A: 2.7 MB, more than one 2 MiB piece */
    const size_t row_a = spex_type_row_size(SPEX_TYPE_Q4_K, n), row_b = spex_type_row_size(SPEX_TYPE_Q6_K, n);
    uint8_t *a = malloc(row_a * (size_t)rows_a), *b = malloc(row_b * (size_t)rows_b);
    uint8_t *ra = malloc(row_a * (size_t)rows_a), *rb = malloc(row_b * (size_t)rows_b);
    float *f = malloc(sizeof(float) * (size_t)n);
    uint32_t st = 7;
    for (int64_t r = 0; r < rows_a + rows_b; r++) {
        for (int64_t i = 0; i < n; i++) {
            st = st * 1664525u + 1013904223u;
            f[i] = (float)((int32_t)(st >> 8) - (1 << 23)) / (float)(1 << 23);
        }
        if (r < rows_a) spex_quantize_row_ref(SPEX_TYPE_Q4_K, f, a + (size_t)r * row_a, n);
        else spex_quantize_row_ref(SPEX_TYPE_Q6_K, f, b + (size_t)(r - rows_a) * row_b, n);
    }
    spex_r16_pack(SPEX_TYPE_Q4_K, a, ra, rows_a, n);
    spex_r16_pack(SPEX_TYPE_Q6_K, b, rb, rows_b, n);
    spex_tensor_info ti = {0};
    model_weight wa = {.t = &ti, .data = a, .type = SPEX_TYPE_Q4_K, .n_in = n, .n_out = rows_a};
    model_weight wb = {.t = &ti, .data = b, .type = SPEX_TYPE_Q6_K, .n_in = n, .n_out = rows_b};
    model_weight wc = wa;
    model_weight *ws[] = {&wa, &wb, &wc};
    model_repack rp = {0};
    spex_error e = {0};
    CHECK(spex_model_repack(ws, 3, NULL, 0, NULL, &rp, &e) == SPEX_OK);
    CHECK_EQ_INT(rp.n, 2);
    CHECK_EQ_INT(rp.n_arena, 1);
    CHECK(wa.r16 && wb.r16 && wc.r16 && wc.data == wa.data && wa.data != a);
    CHECK(rp.bytes == row_a * (uint64_t)rows_a + row_b * (uint64_t)rows_b);
    CHECK(!memcmp(wa.data, ra, row_a * (size_t)rows_a));
    CHECK(!memcmp(wb.data, rb, row_b * (size_t)rows_b));
    spex_model_repack_free(&rp);
    free(a), free(b), free(ra), free(rb), free(f);
}

TEST_MAIN()
