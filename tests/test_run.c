/*
 * test_run.c — `spex run` end to end: drives the build's own spex binary (the sibling of this
 * program's folder: build/tests/test_run -> build/spex, build-asan/tests/... -> build-asan/spex)
 * as a subprocess and checks its stdout, stderr and exit status.
 *
 * What it checks: the stories260K greedy story byte for byte (the must-show), prompt
 * continuation and chunked prompt processing, chat mode on a tiny qwen3 (exact prompt ids of
 * the ChatML render, and a stop on an end-of-generation token), and bad input — a prompt longer
 * than the context, an unknown architecture, a missing tensor, a wrong shape, a file that is
 * not a GGUF, invalid UTF-8 in the prompt, bad flags. Every error must be one "error: " line on
 * stderr with exit 1 (run errors) or 2 (usage), and no sanitizer report: under the ASan build
 * the spawned binary is the instrumented one, whose own exit code 1 would otherwise pass as an
 * error exit. What it is not: a test of the forward pass or sampler (test_model, test_sample).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "cpu/matmul.h"
#include "test.h"
#include "tensor/api.h"
#include "tok/api.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>


#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define TINY_DRAFT1 "tests/data/dflash/tiny-qwen3.dflash1.gguf"

/* ======================================================================== */
/* Running the binary                                                        */
/* ======================================================================== */

typedef test_proc run_result;



/* Runs `spex run ARGS...` (args NULL-terminated); false if it could not be started. */
static bool run_spex(const char *const *args, run_result *r) {
    const char *a[64];
    int n = 0;
    a[n++] = "run";
    for (int i = 0; args[i] && n < 63; i++) a[n++] = args[i];
    a[n] = NULL;
    return test_spex_exec(a, r);
}

static void run_free(run_result *r) { test_proc_free(r); }

static bool sanitizer_clean(const char *err) { return test_sanitizer_clean(err); }

/* stderr is exactly one line "error: ...\n". */
static bool one_error_line(const char *err) {
    if (strncmp(err, "error: ", 7) != 0) return false;
    const char *nl = strchr(err, '\n');
    return nl && nl[1] == 0;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        if (k == 2 && c < 0xC2) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* The value after "generated: " in the stats, -1 if absent. */
static long generated_count(const char *err) {
    const char *p = strstr(err, "generated: ");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

/* The stop reason line's value ("n_predict", ...), copied into buf. */
static const char *stop_reason(const char *err, char *buf, size_t cap) {
    const char *p = strstr(err, "stop:");
    buf[0] = 0;
    if (!p) return buf;
    p += 5;
    while (*p == ' ') p++;
    size_t n = 0;
    while (p[n] && p[n] != '\n' && n + 1 < cap) n++;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

#define REQUIRE_BIN()                                                            \
    do {                                                                         \
        if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");      \
    } while (0)

#define RUN(r, ...)                                                              \
    do {                                                                         \
        const char *const a_[] = {__VA_ARGS__, NULL};                            \
        CHECK_MSG(run_spex(a_, &(r)), "could not run %s", test_spex_bin());            \
    } while (0)

/* ======================================================================== */
/* Writing modified GGUFs                                                    */
/* ======================================================================== */

typedef struct variant {
    const char *arch;          /* general.architecture override                          */
    const char *drop_tensor;   /* leave this tensor out                                   */
    const char *halve_tensor;  /* write this 2-D tensor with ne[1] halved (first half)    */
    bool chat_vocab;           /* tokens 250..253 become <|im_start|> <|im_end|> <think> </think> */
    int32_t eos;               /* >= 0: tokenizer.ggml.eos_token_id                        */
} variant;

#define CHAT_IM_START 250
#define CHAT_IM_END 251
#define CHAT_THINK 252
#define CHAT_THINK_END 253

static spex_status write_variant(const char *src, const char *dst, const variant *v) {
    spex_error err = {0};
    spex_gguf *g = NULL;
    spex_gguf_writer *w = NULL;
    spex_str *toks = NULL;
    int32_t *types = NULL;
    spex_status s = spex_gguf_open(src, &g, &err);
    if (s == SPEX_OK) s = spex_gguf_writer_init(&w, &err);
    for (int64_t i = 0; s == SPEX_OK && i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value val;
        s = spex_gguf_value_at(g, i, &val);
        if (s == SPEX_OK) s = spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &val);
    }
    if (s == SPEX_OK && v->arch) s = spex_gguf_writer_set_str(w, "general.architecture", v->arch, strlen(v->arch));
    if (s == SPEX_OK && v->eos >= 0) s = spex_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (s == SPEX_OK && v->chat_vocab) {
        spex_gguf_value arr;
        s = spex_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, &err);
        uint64_t n = s == SPEX_OK ? arr.n : 0;
        toks = calloc(n ? n : 1, sizeof *toks);
        types = calloc(n ? n : 1, sizeof *types);
        if (!toks || !types || n <= CHAT_THINK_END) s = SPEX_ERR_NOMEM;
        for (uint64_t i = 0; s == SPEX_OK && i < n; i++) {
            s = spex_gguf_arr_str(g, &arr, i, &toks[i], &err);
            types[i] = SPEX_TOKEN_NORMAL;
        }
        static const char *specials[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>"};
        for (int k = 0; s == SPEX_OK && k < 4; k++) {
            toks[CHAT_IM_START + k] = (spex_str){specials[k], strlen(specials[k])};
            types[CHAT_IM_START + k] = SPEX_TOKEN_CONTROL;
        }
        if (s == SPEX_OK) s = spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
        if (s == SPEX_OK) s = spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, types, n);
    }
    for (int64_t i = 0; s == SPEX_OK && i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        int64_t ne[SPEX_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        uint64_t nbytes = t->nbytes;
        if (v->halve_tensor && !strcmp(t->name, v->halve_tensor)) {
            ne[1] /= 2;
            nbytes = spex_type_row_size(t->type, ne[0]) * (uint64_t)ne[1];
        }
        s = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data, nbytes, &err);
    }
    if (s == SPEX_OK) s = spex_gguf_writer_write(w, dst, &err);
    if (s != SPEX_OK) printf("  write_variant: %s\n", err.msg);
    free(toks);
    free(types);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    return s;
}

static void tmp_path(char *buf, size_t cap, const char *what) {
    snprintf(buf, cap, "%s/%s.gguf", test_tmp_dir(), what);
}

/* ======================================================================== */
/* The must-show: stories260K greedy                                         */
/* ======================================================================== */

TEST(stories_greedy_equals_golden) {
    REQUIRE_BIN();
    const char *model = test_shared_path("data/stories260K/stories260K.gguf");
    const char *gold = test_shared_path("data/stories260K/stories260K.greedy.txt");
    if (!model || !gold) SKIP("../shared/data/stories260K absent");
    size_t glen = 0;
    char *golden = test_slurp(gold, &glen);
    CHECK(golden && glen == 464);
    run_result r;
    RUN(r, "-m", model, "-n", "200", "--temp", "0", "-t", "1");
    bool same = r.out_len == glen && !memcmp(r.out, golden, glen);
    char reason[64];
    stop_reason(r.err, reason, sizeof reason);
    long gen = generated_count(r.err);
    int rc = r.rc;
    if (!same) printf("  got %zu bytes: %.80s...\n  stderr: %s\n", r.out_len, r.out, r.err);
    bool clean = sanitizer_clean(r.err);
    run_free(&r);
    free(golden);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK(same);
    CHECK_EQ_INT(gen, 200);
    CHECK_MSG(!strcmp(reason, "n_predict"), "stop reason '%s'", reason);
}

/* A prompt is not echoed; greedy from "Once upon" follows the golden story (whose first tokens are
 * exactly BOS "▁Once" "▁upon"), and chunking the prompt (-b 1) changes nothing. */
TEST(stories_prompt_continuation_and_chunks) {
    REQUIRE_BIN();
    const char *model = test_shared_path("data/stories260K/stories260K.gguf");
    const char *gold = test_shared_path("data/stories260K/stories260K.greedy.txt");
    if (!model || !gold) SKIP("../shared/data/stories260K absent");
    size_t glen = 0;
    char *golden = test_slurp(gold, &glen);
    CHECK(golden && glen > 40);
    run_result a, b;
    RUN(a, "-m", model, "-p", "Once upon", "-n", "30", "--temp", "0", "-t", "1");
    RUN(b, "-m", model, "-p", "Once upon", "-n", "30", "--temp", "0", "-t", "1", "-b", "1");
    const char *cont = golden + strlen("Once upon");
    bool prefix = a.out_len > 20 && a.out_len <= strlen(cont) && !memcmp(a.out, cont, a.out_len);
    bool same = a.out_len == b.out_len && !memcmp(a.out, b.out, a.out_len);
    int rca = a.rc, rcb = b.rc;
    bool tokens3 = strstr(a.err, "prompt:    3 tokens") != NULL;
    if (!prefix) printf("  got '%s'\n", a.out);
    run_free(&a);
    run_free(&b);
    free(golden);
    CHECK_EQ_INT(rca, 0);
    CHECK_EQ_INT(rcb, 0);
    CHECK(prefix);
    CHECK(same);
    CHECK(tokens3);
}

/* ======================================================================== */
/* Chat mode                                                                 */
/* ======================================================================== */

/* Parses "prompt ids (N): a b c" from --verbose stderr into ids; returns N or -1. */
static int parse_prompt_ids(const char *err, int32_t *ids, int cap) {
    const char *p = strstr(err, "prompt ids (");
    if (!p) return -1;
    char *end;
    long n = strtol(p + 12, &end, 10);
    if (strncmp(end, "):", 2) != 0 || n < 0 || n > cap) return -1;
    p = end + 2;
    for (long i = 0; i < n; i++) {
        ids[i] = (int32_t)strtol(p, &end, 10);
        if (end == p) return -1;
        p = end;
    }
    return (int)n;
}

/* The ids the byte-level tiny vocab must give for text: one id per byte (token i is byte i),
 * except the four control tokens written in it. */
static int expected_ids(const char *text, int32_t *ids, int cap) {
    static const char *sp[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    int n = 0;
    for (const char *p = text; *p && n < cap;) {
        int k = 0;
        for (; k < 4; k++)
            if (!strncmp(p, sp[k], strlen(sp[k]))) break;
        if (k < 4) {
            ids[n++] = CHAT_IM_START + k;
            p += strlen(sp[k]);
        } else {
            ids[n++] = (unsigned char)*p++;
        }
    }
    return n;
}

/* Greedy next token after ids, computed in-process with the library (for picking an eos). */
static int32_t greedy_next(const char *model, const int32_t *ids, int n, int32_t extra) {
    spex_model *m = NULL;
    spex_context *ctx = NULL;
    int32_t best = -1;
    if (spex_model_load(model, NULL, &m, NULL) != SPEX_OK) return -1;
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 256;
    cp.n_batch_max = 256;
    cp.n_outputs_max = 1;
    spex_batch_token bt[257];
    if (n > 255 || spex_context_init(m, &cp, &ctx, NULL) != SPEX_OK) goto done;
    for (int i = 0; i < n; i++) bt[i] = (spex_batch_token){ids[i], i, 0, i == n - 1 && extra < 0};
    if (extra >= 0) bt[n] = (spex_batch_token){extra, n, 0, true};
    if (spex_forward(ctx, &(spex_batch){bt, n + (extra >= 0)}, NULL) != SPEX_OK) goto done;
    const float *l = spex_logits(ctx, 0);
    int32_t V = spex_model_get_hparams(m)->n_vocab;
    best = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
done:
    spex_context_free(ctx);
    spex_model_free(m);
    return best;
}

TEST(chat_prompt_ids_and_eog_stop) {
    REQUIRE_BIN();
    char path[256], path_eos[256];
    tmp_path(path, sizeof path, "chat");
    tmp_path(path_eos, sizeof path_eos, "chat_eos");
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.chat_vocab = true, .eos = -1}));

    /* ChatML is guessed from <|im_start|> in the vocab (with a warning); --no-think adds the
     * empty think block to the generation prompt. */
    run_result r;
    RUN(r, "-m", path, "--chat", "--system", "Be brief.", "-p", "Hi there", "--no-think", "-n", "6", "--temp",
        "0", "-t", "1", "-v");
    int32_t got[256], want[256];
    int n_got = parse_prompt_ids(r.err, got, 256);
    int n_want = expected_ids("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                              "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                              want, 256);
    bool ids_equal = n_got == n_want && !memcmp(got, want, sizeof *got * (size_t)n_want);
    bool warned = strstr(r.err, "warning:") != NULL;
    long gen = generated_count(r.err);
    int rc = r.rc;
    bool clean = sanitizer_clean(r.err);
    if (!ids_equal || rc) printf("  stderr: %s\n", r.err);
    run_free(&r);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK_MSG(ids_equal, "prompt ids: %d, expected %d", n_got, n_want);
    CHECK(warned);
    CHECK_EQ_INT(gen, 6);

    /* Make the second greedy token the eos: the run must print one token and stop on "eos". */
    int32_t t1 = greedy_next(path, want, n_want, -1);
    CHECK(t1 >= 0 && t1 < 256);
    int32_t t2 = greedy_next(path, want, n_want, t1);
    CHECK(t2 >= 0 && t2 < 256);
    if (t2 == t1) SKIP("first two greedy tokens coincide (%d); eos choice ambiguous", t1);
    CHECK_OK(write_variant(path, path_eos, &(variant){.eos = t2}));
    RUN(r, "-m", path_eos, "--chat", "--system", "Be brief.", "-p", "Hi there", "--no-think", "-n", "50",
        "--temp", "0", "-t", "1");
    char reason[64];
    stop_reason(r.err, reason, sizeof reason);
    gen = generated_count(r.err);
    rc = r.rc;
    clean = sanitizer_clean(r.err);
    run_free(&r);
    unlink(path);
    unlink(path_eos);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK_MSG(!strcmp(reason, "eos"), "stop reason '%s'", reason);
    CHECK_EQ_INT(gen, 1);
}

/* Thinking on: the generation prompt ends at "assistant\n"; no system message. Sampled run. */
TEST(chat_thinking_sampled_runs) {
    REQUIRE_BIN();
    char path[256];
    tmp_path(path, sizeof path, "chat2");
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.chat_vocab = true, .eos = -1}));
    run_result r;
    RUN(r, "-m", path, "--chat", "-p", "x", "-n", "20", "--temp", "0.9", "--top-k", "20", "--top-p", "0.9",
        "--min-p", "0.01", "--repeat-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.1",
        "--seed", "7", "-t", "2", "-v");
    int32_t got[64], want[64];
    int n_got = parse_prompt_ids(r.err, got, 64);
    int n_want = expected_ids("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", want, 64);
    bool ids_equal = n_got == n_want && !memcmp(got, want, sizeof *got * (size_t)n_want);
    bool utf8 = valid_utf8((const unsigned char *)r.out, r.out_len);
    long gen = generated_count(r.err);
    int rc = r.rc;
    bool clean = sanitizer_clean(r.err);
    run_free(&r);
    unlink(path);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK(ids_equal);
    CHECK(utf8);
    CHECK(gen >= 0 && gen <= 20);
}

/* ======================================================================== */
/* Bad input                                                                 */
/* ======================================================================== */

/* Runs and checks: exit status want_rc, stderr one "error: " line containing needle. */
static bool expect_error(const char *const *args, int want_rc, const char *needle) {
    run_result r;
    if (!run_spex(args, &r)) {
        printf("  could not run spex\n");
        run_free(&r);
        return false;
    }
    bool ok = r.rc == want_rc && one_error_line(r.err) && sanitizer_clean(r.err) && (!needle || strstr(r.err, needle));
    if (!ok) {
        printf("  args:");
        for (int i = 0; args[i]; i++) printf(" '%s'", args[i]);
        printf("\n  rc %d (want %d), stderr: %s\n", r.rc, want_rc, r.err);
    }
    run_free(&r);
    return ok;
}

#define EXPECT_ERROR(rc, needle, ...)                                             \
    do {                                                                          \
        const char *const a_[] = {__VA_ARGS__, NULL};                             \
        CHECK(expect_error(a_, rc, needle));                                      \
    } while (0)

TEST(error_prompt_longer_than_context) {
    REQUIRE_BIN();
    char prompt[200];
    memset(prompt, 'a', sizeof prompt - 1);   /* 199 byte tokens in the tiny vocab */
    prompt[sizeof prompt - 1] = 0;
    EXPECT_ERROR(1, "context", "-m", TINY_QWEN3, "-p", prompt, "-c", "32", "-t", "1");
    /* Exactly the context: processed, then the context is full right after one token. */
    run_result r;
    RUN(r, "-m", TINY_QWEN3, "-p", prompt + 199 - 32, "-c", "32", "-t", "1", "--temp", "0", "-b", "5");
    char reason[64];
    stop_reason(r.err, reason, sizeof reason);
    long gen = generated_count(r.err);
    int rc = r.rc;
    run_free(&r);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(!strcmp(reason, "context full"), "stop reason '%s'", reason);
    CHECK_EQ_INT(gen, 1);
}

TEST(error_unknown_architecture) {
    REQUIRE_BIN();
    char path[256];
    tmp_path(path, sizeof path, "foo");
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.arch = "foo", .eos = -1}));
    bool ok = expect_error((const char *const[]){"-m", path, "-p", "hi", NULL}, 1, "'foo'");
    unlink(path);
    CHECK(ok);
}

TEST(error_missing_tensor) {
    REQUIRE_BIN();
    char path[256];
    tmp_path(path, sizeof path, "missing");
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.drop_tensor = "blk.1.ffn_up.weight", .eos = -1}));
    bool ok = expect_error((const char *const[]){"-m", path, NULL}, 1, "blk.1.ffn_up.weight");
    unlink(path);
    CHECK(ok);
}

TEST(error_wrong_shape) {
    REQUIRE_BIN();
    char path[256];
    tmp_path(path, sizeof path, "shape");
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.halve_tensor = "blk.2.attn_k.weight", .eos = -1}));
    run_result r;
    RUN(r, "-m", path);
    bool ok = r.rc == 1 && one_error_line(r.err) && sanitizer_clean(r.err) &&
              strstr(r.err, "blk.2.attn_k.weight") && strstr(r.err, "[64, 32]") && strstr(r.err, "[64, 64]");
    if (!ok) printf("  rc %d, stderr: %s\n", r.rc, r.err);
    run_free(&r);
    unlink(path);
    CHECK(ok);
}

TEST(error_not_a_model) {
    REQUIRE_BIN();
    char path[256];
    tmp_path(path, sizeof path, "junk");
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs("this is not a GGUF file at all", f);
    fclose(f);
    bool ok = expect_error((const char *const[]){"-m", path, NULL}, 1, NULL);
    unlink(path);
    CHECK(ok);
    EXPECT_ERROR(1, NULL, "-m", "/nonexistent/model.gguf");
    EXPECT_ERROR(1, "prompt file", "-m", TINY_QWEN3, "-f", "/nonexistent/prompt.txt");
}

/* Invalid UTF-8 (and a lone truncated sequence at the end) is tokenized losslessly through byte
 * tokens and runs; the output stays valid UTF-8. */
TEST(invalid_utf8_prompt_runs) {
    REQUIRE_BIN();
    const char *bad = "\xff\xfe caf\xc3 \xe2\x82 \xed\xa0\x80 end \xc3";
    run_result r;
    RUN(r, "-m", TINY_QWEN3, "-p", bad, "-n", "12", "--temp", "0", "-t", "1");
    bool utf8 = valid_utf8((const unsigned char *)r.out, r.out_len);
    int rc = r.rc;
    bool clean = sanitizer_clean(r.err);
    long gen = generated_count(r.err);
    run_free(&r);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK(utf8);
    CHECK_EQ_INT(gen, 12);
    const char *model = test_shared_path("data/stories260K/stories260K.gguf");
    if (!model) return;
    RUN(r, "-m", model, "-p", bad, "-n", "12", "--temp", "0", "-t", "1");
    utf8 = valid_utf8((const unsigned char *)r.out, r.out_len);
    rc = r.rc;
    clean = sanitizer_clean(r.err);
    run_free(&r);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
    CHECK(utf8);
}

TEST(error_bad_flags) {
    REQUIRE_BIN();
    const char *m = TINY_QWEN3;
    EXPECT_ERROR(2, "--temp", "-m", m, "--temp", "abc");
    EXPECT_ERROR(2, "--temp", "-m", m, "--temp", "nan");
    EXPECT_ERROR(2, "--top-k", "-m", m, "--top-k", "-3");
    EXPECT_ERROR(2, "--top-p", "-m", m, "--top-p", "1.5");
    EXPECT_ERROR(2, "--min-p", "-m", m, "--min-p", "2");
    EXPECT_ERROR(2, "--repeat-penalty", "-m", m, "--repeat-penalty", "0");
    EXPECT_ERROR(2, "-n", "-m", m, "-n", "-5");
    EXPECT_ERROR(2, "-n", "-m", m, "-n");
    EXPECT_ERROR(2, "-c", "-m", m, "-c", "12x");
    EXPECT_ERROR(2, "-b", "-m", m, "-b", "0");
    EXPECT_ERROR(2, "-t", "-m", m, "-t", "-2");
    EXPECT_ERROR(2, "--seed", "-m", m, "--seed", "-7");
    EXPECT_ERROR(2, "--samplers", "-m", m, "--samplers", "top_k;bogus");
    EXPECT_ERROR(2, "--frobnicate", "-m", m, "--frobnicate");
    EXPECT_ERROR(2, "-m", "-p", "hi");
    EXPECT_ERROR(2, "not both", "-m", m, "-p", "a", "-f", "b");
    EXPECT_ERROR(2, "--chat", "-m", m, "--system", "s");
    EXPECT_ERROR(2, "--chat-template", "-m", m, "--chat", "--chat-template", "jinja2");
}

/* Issue 4's must-show: with the drafter, greedy text equals the target alone, and the
 * speculative statistics are printed. Both drafter variants, several draft lengths. */
TEST(speculative_greedy_equals_target_only) {
    REQUIRE_BIN();
    run_result a, b;
    RUN(a, "-m", TINY_QWEN3, "-p", "Once upon a time", "-n", "120", "--temp", "0", "-t", "2");
    CHECK_EQ_INT(a.rc, 0);
    CHECK(generated_count(a.err) == 120);
    const char *drafts[2] = {TINY_DRAFT2, TINY_DRAFT1};
    const char *nmax[3] = {"1", "3", "99"};
    bool ok = true;
    for (int d = 0; d < 2 && ok; d++)
        for (int k = 0; k < 3 && ok; k++) {
            RUN(b, "-m", TINY_QWEN3, "-md", drafts[d], "--spec-draft-n-max", nmax[k], "-p", "Once upon a time", "-n",
                "120", "--temp", "0", "-t", "2");
            if (b.rc != 0 || b.out_len != a.out_len || memcmp(a.out, b.out, a.out_len) != 0) {
                printf("  %s n_max %s: rc %d, output differs from the target alone\n%s\n", drafts[d], nmax[k], b.rc,
                       b.err);
                ok = false;
            }
            static const char *lines[] = {"draft acceptance rate = ", "mean acceptance length = ",
                                          "acceptance per position:", "time:      draft", "verify steps",
                                          "auto-detected speculative type", "draft cut on ("};
            for (size_t i = 0; ok && i < sizeof lines / sizeof lines[0]; i++)
                if (!strstr(b.err, lines[i])) {
                    printf("  stderr lacks '%s':\n%s\n", lines[i], b.err);
                    ok = false;
                }
            if (ok && k == 2 && !strstr(b.err, "exceeds the trained block size")) {
                printf("  no clamp warning for n_max 99:\n%s\n", b.err);
                ok = false;
            }
            ok = ok && sanitizer_clean(b.err);
            run_free(&b);
        }
    /* the draft cut off: the same text, and the statistics say so */
    RUN(b, "-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-draft-cut", "off", "-p", "Once upon a time", "-n", "120",
        "--temp", "0", "-t", "2");
    if (ok && (b.rc != 0 || b.out_len != a.out_len || memcmp(a.out, b.out, a.out_len) != 0 ||
               !strstr(b.err, "draft cut off (0 tokens cut)"))) {
        printf("  --spec-draft-cut off: rc %d, output or statistics wrong\n%s\n", b.rc, b.err);
        ok = false;
    }
    run_free(&b);
    run_free(&a);
    CHECK(ok);
}

/* draft-simple: a small model of the target's vocabulary drafts (named, or told from the file
 * by auto); greedy text equals the target alone's; a model of another vocabulary is refused. */
TEST(draft_simple_equals_target_only) {
    REQUIRE_BIN();
    const char *small = "tests/data/models/tiny-qwen3-q8_0.gguf";
    run_result a, b;
    RUN(a, "-m", TINY_QWEN3, "-p", "Once upon a time", "-n", "100", "--temp", "0", "-t", "2");
    CHECK_EQ_INT(a.rc, 0);
    bool ok = true;
    for (int k = 0; k < 2 && ok; k++) {
        if (k == 0)
            RUN(b, "-m", TINY_QWEN3, "-md", small, "--spec-type", "draft-simple", "--spec-draft-n-max", "6", "-p",
                "Once upon a time", "-n", "100", "--temp", "0", "-t", "2");
        else RUN(b, "-m", TINY_QWEN3, "-md", small, "-p", "Once upon a time", "-n", "100", "--temp", "0", "-t", "2");
        if (b.rc != 0 || b.out_len != a.out_len || memcmp(a.out, b.out, a.out_len) != 0 ||
            !strstr(b.err, "speculative: draft-simple") || !strstr(b.err, "draft acceptance rate = ") ||
            (k == 1 && !strstr(b.err, "auto-detected speculative type 'draft-simple'")) ||
            (k == 0 && !strstr(b.err, "n_max 6")) || !sanitizer_clean(b.err)) {
            printf("  k %d: rc %d, output or statistics wrong\n%s\n", k, b.rc, b.err);
            ok = false;
        }
        run_free(&b);
    }
    run_free(&a);
    CHECK(ok);
    EXPECT_ERROR(1, "vocabulary", "-m", TINY_QWEN3, "-md", "tests/data/models/tiny-llama-tied.gguf", "--spec-type",
                 "draft-simple", "-p", "hi");
    EXPECT_ERROR(2, "needs a drafter", "-m", TINY_QWEN3, "--spec-type", "draft-simple", "-p", "hi");
}

/* hybrid: -md's DFlash2 drafter and n-gram lookup; greedy text equals the target alone's. */
TEST(hybrid_equals_target_only) {
    REQUIRE_BIN();
    run_result a, b;
    const char *prompt = "one two three one two three one two";
    RUN(a, "-m", TINY_QWEN3, "-p", prompt, "-n", "120", "--temp", "0", "-t", "2");
    CHECK_EQ_INT(a.rc, 0);
    RUN(b, "-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-type", "hybrid", "--spec-ngram-size-n", "2", "-p", prompt,
        "-n", "120", "--temp", "0", "-t", "2");
    bool ok = b.rc == 0 && b.out_len == a.out_len && !memcmp(a.out, b.out, a.out_len) &&
              strstr(b.err, "speculative: dflash2+ngram") && strstr(b.err, "n_max 16") && sanitizer_clean(b.err);
    if (!ok) printf("  rc %d, output or statistics wrong\n%s\n", b.rc, b.err);
    run_free(&a);
    run_free(&b);
    CHECK(ok);
    EXPECT_ERROR(2, "needs a drafter", "-m", TINY_QWEN3, "--spec-type", "hybrid", "-p", "hi");
}

/* --spec-draft-cut auto (the default): a fixed seed at T > 0 on the rejection path keeps the
 * cut off (with a note), and --spec-guard auto the guard, so two runs print the same tokens;
 * without a seed and at T = 0 both stay on, and with --spec-draft-cut on the cut does. (With the cut on, a seeded rejection-path run is exact in
 * distribution but its verified lengths follow the clock: not checked here, it may or may not
 * repeat.) */
TEST(seeded_sampling_repeats_under_auto_cut) {
    REQUIRE_BIN();
    static const char note[] = "note: draft cut off for a fixed seed at T > 0";
    run_result a, b;
    RUN(a, "-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-p", "Once upon a time", "-n", "60", "--temp", "0.8", "--seed",
        "42", "-t", "2");
    RUN(b, "-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-p", "Once upon a time", "-n", "60", "--temp", "0.8", "--seed",
        "42", "-t", "2");
    CHECK_MSG(a.rc == 0 && b.rc == 0 && sanitizer_clean(a.err) && sanitizer_clean(b.err), "rc %d / %d:\n%s", a.rc, b.rc,
              a.err);
    CHECK_MSG(strstr(a.err, note) && strstr(a.err, "path rejection") && strstr(a.err, "draft cut off (0 tokens cut)"),
              "no note or the cut on:\n%s", a.err);
    /* the realized-rate guard follows the clock too: the same rule keeps it off */
    CHECK_MSG(strstr(a.err, "note: realized-rate guard off for a fixed seed") &&
                  strstr(a.err, "guard:     off, 0 of "),
              "no guard note or the guard on:\n%s", a.err);
    CHECK_MSG(a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0, "seeded runs differ:\n%s\n---\n%s",
              a.out, b.out);
    run_free(&a);
    run_free(&b);
    const char *const cases[][12] = {
        {"--temp", "0.8", "--seed", "-1"},                           /* no fixed seed */
        {"--temp", "0", "--seed", "42"},                             /* greedy        */
        {"--temp", "0.8", "--seed", "42", "--spec-draft-cut", "on"}, /* asked for     */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv_[24] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-p", "Once upon a time", "-n", "40", "-t", "2"};
        int n = 10;
        for (int k = 0; cases[i][k]; k++) argv_[n++] = cases[i][k];
        argv_[n] = NULL;
        CHECK(run_spex(argv_, &a));
        CHECK_MSG(a.rc == 0 && !strstr(a.err, note) && strstr(a.err, "draft cut on ("), "case %zu: rc %d\n%s", i,
                  a.rc, a.err);
        if (i < 2) CHECK_MSG(strstr(a.err, "guard:     on, "), "case %zu: guard not on\n%s", i, a.err);
        run_free(&a);
    }
}

/* qwen35 (issue 7): the target alone, with its MTP block and with a DFlash2 drafter print the
 * same greedy text, and the speculative runs print their statistics. */
TEST(qwen35_mtp_and_dflash2_equal_target_only) {
    REQUIRE_BIN();
    const char *t = "tests/data/qwen35/tiny-qwen35.gguf";
    if (access(t, R_OK)) SKIP("%s missing", t);
    run_result a, b;
    RUN(a, "-m", t, "-p", "Once upon a time", "-n", "60", "--temp", "0", "-t", "2");
    CHECK_EQ_INT(a.rc, 0);
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++) {
        if (k == 0) RUN(b, "-m", t, "--spec-type", "mtp", "-p", "Once upon a time", "-n", "60", "--temp", "0", "-t", "2");
        else if (k == 1)
            RUN(b, "-m", t, "--spec-type", "mtp", "--spec-draft-n-max", "5", "-p", "Once upon a time", "-n", "60",
                "--temp", "0", "-t", "2");
        else
            RUN(b, "-m", t, "-md", "tests/data/qwen35/tiny-qwen35.dflash2.gguf", "-p", "Once upon a time", "-n", "60",
                "--temp", "0", "-t", "2");
        if (b.rc != 0 || b.out_len != a.out_len || memcmp(a.out, b.out, a.out_len) != 0) {
            printf("  case %d: rc %d, output differs from the target alone\n%s\n", k, b.rc, b.err);
            ok = false;
        }
        if (ok && k == 1 && !strstr(b.err, "recurrent state: 0.01 MiB per copy, 6 copies per sequence (1 + n_rs_seq 5)")) {
            printf("  case %d: no recurrent-state memory line:\n%s\n", k, b.err);
            ok = false;
        }
        if (ok && (!strstr(b.err, "mean acceptance length = ") || !strstr(b.err, k < 2 ? "speculative: mtp" : "speculative: dflash2"))) {
            printf("  case %d: no statistics:\n%s\n", k, b.err);
            ok = false;
        }
        ok = ok && sanitizer_clean(b.err);
        run_free(&b);
    }
    /* no MTP block: a clear error */
    RUN(b, "-m", "tests/data/qwen35/tiny-qwen35-tied.gguf", "--spec-type", "mtp", "-p", "hi", "-n", "4");
    if (b.rc == 0 || !strstr(b.err, "no MTP block")) {
        printf("  tied model with --spec-type mtp: rc %d\n%s\n", b.rc, b.err);
        ok = false;
    }
    run_free(&b);
    run_free(&a);
    CHECK(ok);
}

/* -ctk / -ctv (the target's KV type, llama.cpp's flags): bad types and a K/V mismatch are
 * clear errors; with a Q8_0 cache (read directly by attention, head-major at hd 32)
 * speculative greedy output still equals the target alone's, and the verbose context line
 * names the type. */
TEST(target_kv_type_flags) {
    REQUIRE_BIN();
    const char *m = TINY_QWEN3;
    EXPECT_ERROR(2, "-ctk expects f16, f32 or q8_0", "-m", m, "-ctk", "q4_0", "-p", "hi");
    EXPECT_ERROR(2, "differ (q8_0, f16)", "-m", m, "-ctk", "q8_0", "-ctv", "f16", "-p", "hi");
    EXPECT_ERROR(2, "needs a value", "-m", m, "-p", "hi", "--cache-type-v");
    run_result a, b;
    RUN(a, "-m", m, "-p", "Once upon a time", "-n", "60", "--temp", "0", "-t", "2", "-ctv", "q8_0", "-v");
    RUN(b, "-m", m, "-md", TINY_DRAFT2, "-p", "Once upon a time", "-n", "60", "--temp", "0", "-t", "2",
        "--cache-type-k", "q8_0");
    CHECK_MSG(a.rc == 0 && strstr(a.err, "KV q8_0"), "rc %d:\n%s", a.rc, a.err);
    CHECK_MSG(b.rc == 0 && b.out_len == a.out_len && !memcmp(a.out, b.out, a.out_len),
              "q8_0 KV: speculative output differs from the target alone (rc %d)\n%s", b.rc, b.err);
    run_free(&a);
    run_free(&b);
}

TEST(speculative_flags_and_errors) {
    REQUIRE_BIN();
    const char *m = TINY_QWEN3;
    EXPECT_ERROR(2, "--spec-type", "-m", m, "--spec-type", "eagle3");
    /* mtp needs a target with an MTP block (qwen35 nextn): qwen3 has none */
    EXPECT_ERROR(1, "no MTP block", "-m", m, "--spec-type", "mtp", "-p", "hi", "-n", "4");
    EXPECT_ERROR(2, "needs a drafter", "-m", m, "--spec-type", "dflash");
    EXPECT_ERROR(2, "-ctkd", "-m", m, "-md", TINY_DRAFT2, "-ctkd", "q4_0");
    EXPECT_ERROR(2, "differ", "-m", m, "-md", TINY_DRAFT2, "-ctkd", "f32", "-ctvd", "f16");
    EXPECT_ERROR(2, "--spec-draft-p-min", "-m", m, "-md", TINY_DRAFT2, "--spec-draft-p-min", "1.5");
    EXPECT_ERROR(2, "--spec-draft-sampling", "-m", m, "-md", TINY_DRAFT2, "--spec-draft-sampling", "beam");
    EXPECT_ERROR(2, "expects on, off or auto", "-m", m, "-md", TINY_DRAFT2, "--spec-draft-cut", "maybe");
    EXPECT_ERROR(2, "--spec-guard expects on, off or auto", "-m", m, "-md", TINY_DRAFT2, "--spec-guard", "maybe");
    EXPECT_ERROR(2, "--spec-guard needs a value", "-m", m, "-md", TINY_DRAFT2, "--spec-guard");
    /* Run errors: a drafter for another target, a missing file, a bad override. */
    EXPECT_ERROR(1, "vocabulary", "-m", "tests/data/models/tiny-llama-tied.gguf", "-md", TINY_DRAFT2, "-p", "hi");
    EXPECT_ERROR(1, "nope.gguf", "-m", m, "-md", "nope.gguf", "-p", "hi");
    EXPECT_ERROR(1, "dflash.bogus", "-m", m, "-md", TINY_DRAFT2, "--spec-draft-override-kv", "dflash.bogus=int:3", "-p", "hi");
    /* --spec-type none ignores the drafter; an override and a quantized draft KV run. */
    run_result r;
    RUN(r, "-m", m, "-md", "nope.gguf", "--spec-type", "none", "-p", "hi", "-n", "4");
    CHECK_EQ_INT(r.rc, 0);
    run_free(&r);
    RUN(r, "-m", m, "-md", TINY_DRAFT2, "--spec-draft-override-kv", "dflash.block_size=int:4", "-ctkd", "q8_0", "-p",
        "hi", "-n", "8", "--temp", "0");
    bool ok = r.rc == 0 && strstr(r.err, "block=4") && strstr(r.err, "n_max 3") && strstr(r.err, "quantized draft KV");
    if (!ok) printf("%s\n", r.err);
    run_free(&r);
    CHECK(ok);
    /* Sampled runs take the rejection path (DFlash2) or sample-and-match (penalties, v1). */
    RUN(r, "-m", m, "-md", TINY_DRAFT2, "-p", "hi", "-n", "16", "--temp", "1", "-s", "3");
    ok = r.rc == 0 && strstr(r.err, "path rejection");
    run_free(&r);
    CHECK(ok);
    RUN(r, "-m", m, "-md", TINY_DRAFT2, "-p", "hi", "-n", "16", "--temp", "1", "--repeat-penalty", "1.2", "-s", "3");
    ok = r.rc == 0 && strstr(r.err, "path sample-and-match");
    run_free(&r);
    CHECK(ok);
}

TEST(help_documents_every_flag) {
    REQUIRE_BIN();
    run_result r;
    RUN(r, "--help");
    static const char *flags[] = {"-m,", "-p,", "-f,", "-n,", "--temp", "--top-k", "--top-p", "--min-p",
                                  "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
                                  "--frequency-penalty", "--samplers", "--seed", "--ctx-size", "--batch-size",
                                  "--threads", "--chat", "--system", "--no-think", "--chat-template",
                                  "--no-bos", "--special", "--verbose", "--help", "--model-draft",
                                  "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
                                  "--spec-draft-sampling", "--spec-draft-cut", "--spec-guard", "--spec-draft-override-kv",
                                  "-ctkd", "-ctvd",
                                  "--no-repack"};
    const char *missing = NULL;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr(r.out, flags[i])) missing = flags[i];
    int rc = r.rc;
    run_free(&r);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(!missing, "--help does not mention %s", missing);
}

/* --no-repack: the verbose load line says how much was copied into the R16 layout (none with
 * the flag; some for a Q4_K_M file when this CPU's kernels gain from it), and the generated
 * text is the same either way (the R16 kernels are bit-identical). */
TEST(no_repack_flag) {
    REQUIRE_BIN();
    const char *q4 = "tests/data/models/qwen3-e256-q4_k_m.gguf";
    if (access(q4, R_OK) != 0) SKIP("%s missing (tools/ref/make_fixtures.py)", q4);
    run_result a, b;
    const char *args_a[] = {"-m", q4, "-p", "a b c", "-n", "12", "--temp", "0", "-v", NULL};
    const char *args_b[] = {"-m", q4, "-p", "a b c", "-n", "12", "--temp", "0", "-v", "--no-repack", NULL};
    CHECK(run_spex(args_a, &a));
    CHECK(run_spex(args_b, &b));
    const char *ra = strstr(a.err, "MiB of it in R16"), *rb = strstr(b.err, "MiB of it in R16");
    CHECK(a.rc == 0 && b.rc == 0 && ra && rb);
    CHECK(!strcmp(a.out, b.out));
    /* the number before "MiB of it in R16" */
    double ma = -1, mb = -1;
    for (const char *p = ra; p > a.err && p[-1] != ';'; p--) sscanf(p, "%lf", &ma);
    for (const char *p = rb; p > b.err && p[-1] != ';'; p--) sscanf(p, "%lf", &mb);
    CHECK_MSG(mb == 0.0, "--no-repack still repacked %.2f MiB", mb);
    if (spex_matmul_kernels_get()->r16_fast[SPEX_TYPE_Q4_K]) CHECK_MSG(ma > 0.0, "nothing repacked by default");
    run_free(&a);
    run_free(&b);
}

/* --no-mmap reads the file instead of mapping it: the golden story unchanged. --override-kv
 * changes what the loader reads: a 64-token training context ends the story at "context full"
 * after a prefix of the golden text; a value of the wrong type or a malformed entry stops the
 * load with an error naming it. */
TEST(no_mmap_and_override_kv) {
    REQUIRE_BIN();
    const char *model = test_shared_path("data/stories260K/stories260K.gguf");
    const char *gold = test_shared_path("data/stories260K/stories260K.greedy.txt");
    if (!model || !gold) SKIP("../shared/data/stories260K absent");
    size_t glen = 0;
    char *golden = test_slurp(gold, &glen);
    CHECK(golden && glen == 464);
    run_result r;
    RUN(r, "-m", model, "-n", "200", "--temp", "0", "-t", "1", "--no-mmap");
    CHECK_EQ_INT(r.rc, 0);
    CHECK(r.out_len == glen && !memcmp(r.out, golden, glen));
    run_free(&r);

    RUN(r, "-m", model, "-n", "200", "--temp", "0", "-t", "1", "--override-kv", "llama.context_length=int:64");
    char reason[64];
    stop_reason(r.err, reason, sizeof reason);
    CHECK_EQ_INT(r.rc, 0);
    CHECK_MSG(!strcmp(reason, "context full"), "stop reason '%s'", reason);
    CHECK(r.out_len > 0 && r.out_len < glen && !memcmp(r.out, golden, r.out_len));
    CHECK_EQ_INT(generated_count(r.err), 64);
    run_free(&r);

    RUN(r, "-m", model, "-n", "8", "--override-kv", "llama.context_length=float:64.5");
    CHECK(r.rc != 0 && strstr(r.err, "llama.context_length") && strstr(r.err, "f64"));
    run_free(&r);
    RUN(r, "-m", model, "-n", "8", "--override-kv", "llama.context_length");
    CHECK(r.rc != 0 && strstr(r.err, "KEY=TYPE:VALUE"));
    run_free(&r);
    RUN(r, "-m", model, "-n", "8", "--override-kv", "general.alignment=int:64");
    CHECK(r.rc != 0 && strstr(r.err, "general.alignment"));
    run_free(&r);
    free(golden);
}

/* --jinja / --chat-template-file: the prompt ids are the tokens of the template's render — a
 * file's template, the GGUF's own (here given by --override-kv tokenizer.chat_template), and the
 * built-in ChatML with a note when the file has none; a template that does not parse or raises
 * stops with its message. */
TEST(jinja_chat_templates) {
    REQUIRE_BIN();
    char path[256], tfile[256], bad[256];
    tmp_path(path, sizeof path, "chat_jinja");
    snprintf(tfile, sizeof tfile, "%s/upper.jinja", test_tmp_dir());
    snprintf(bad, sizeof bad, "%s/bad.jinja", test_tmp_dir());
    CHECK_OK(write_variant(TINY_QWEN3, path, &(variant){.chat_vocab = true, .eos = -1}));
    FILE *f = fopen(tfile, "w");
    CHECK(f);
    fputs("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
          f);
    fclose(f);
    f = fopen(bad, "w");
    CHECK(f);
    fputs("{% for %}", f);
    fclose(f);
    const struct {
        const char *args[6], *want;
    } cases[] = {
        {{"--chat-template-file", tfile}, "<|im_start|>user\nHI THERE<|im_end|>\n<|im_start|>assistant\n"},
        {{"--jinja", "--override-kv",
          "tokenizer.chat_template=str:{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
          "{{ '<|im_start|>' if add_generation_prompt }}"},
         "[user:Hi there]<|im_start|>"},
        {{"--jinja"}, "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"},
    };
    for (int c = 0; c < 3; c++) {
        const char *argv[24] = {"-m", path, "--chat", "-p", "Hi there", "-n", "2", "--temp", "0", "-t", "1", "-v"};
        int na = 12;
        for (int i = 0; cases[c].args[i]; i++) argv[na++] = cases[c].args[i];
        argv[na] = NULL;
        run_result r;
        CHECK(run_spex(argv, &r));
        int32_t got[256], want[256];
        int n_got = parse_prompt_ids(r.err, got, 256), n_want = expected_ids(cases[c].want, want, 256);
        bool ok = r.rc == 0 && n_got == n_want && !memcmp(got, want, sizeof *got * (size_t)n_want);
        if (!ok) printf("  case %d: rc %d: %s\n", c, r.rc, r.err);
        CHECK(ok);
        if (c == 2) CHECK(strstr(r.err, "no tokenizer.chat_template") != NULL);
        run_free(&r);
    }
    run_result r;
    setenv("LLAMA_ARG_CHAT_TEMPLATE_FILE", tfile, 1);   /* the variable as the flag */
    RUN(r, "-m", path, "--chat", "-p", "Hi there", "-n", "2", "--temp", "0", "-t", "1", "-v");
    unsetenv("LLAMA_ARG_CHAT_TEMPLATE_FILE");
    {
        int32_t got[256], want[256];
        int n_got = parse_prompt_ids(r.err, got, 256), n_want = expected_ids(cases[0].want, want, 256);
        CHECK_MSG(r.rc == 0 && n_got == n_want && !memcmp(got, want, sizeof *got * (size_t)n_want), "%s", r.err);
    }
    run_free(&r);
    RUN(r, "-m", path, "--chat", "-p", "x", "--chat-template-file", bad);
    CHECK_MSG(r.rc != 0 && strstr(r.err, bad) && strstr(r.err, "jinja: line 1"), "%s", r.err);
    run_free(&r);
    RUN(r, "-m", path, "--chat", "-p", "x", "--jinja", "--override-kv",
        "tokenizer.chat_template=str:{{ raise_exception('no system prompt allowed') }}");
    CHECK_MSG(r.rc != 0 && strstr(r.err, "no system prompt allowed"), "%s", r.err);
    run_free(&r);
    RUN(r, "-m", path, "--chat", "-p", "x", "--chat-template-file", tfile, "--chat-template", "chatml");
    CHECK_MSG(r.rc == 2 && strstr(r.err, "not both"), "%s", r.err);
    run_free(&r);
    remove(tfile);
    remove(bad);
    remove(path);
}

TEST_MAIN()
