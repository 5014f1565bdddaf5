/*
 * test_tok.c — the tokenizers (src/tok): SentencePiece BPE on stories260K's own vocab and on
 * the Llama 2 tokenizer.model, byte-level BPE on the real Qwen3 tokenizer.json, both against
 * llama.cpp's test vectors (43/43 each) and the derived Qwen3 special-token vectors; every
 * vector decodes back to its input. Then the streaming detokenizer across split UTF-8,
 * NFC, hostile text (empty, NUL, invalid UTF-8, 100 KB), vocab GGUFs with missing or
 * mis-typed keys, and the speed of a long prompt.
 *
 * Data comes from ../shared/data (cases SKIP without it); the vocab GGUFs are built by
 * tests/tok_fixtures.c, once per run, and the loaded tokenizers are cached here.
 */
#include "spex.h"
#include "gguf/api.h"
#include "test.h"
#include "tok/tok.h"
#include "tok_fixtures.h"
#include "tok/api.h"

#include <cjson/cJSON.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

#if defined(__SANITIZE_ADDRESS__)
#define SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOW_BUILD 1
#endif
#endif
#ifndef SLOW_BUILD
#define SLOW_BUILD 0
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static spex_tokenizer *load_path(const char *path, spex_error *err) {
    spex_gguf *g = NULL;
    spex_tokenizer *t = NULL;
    if (spex_gguf_open(path, &g, err) == SPEX_OK) spex_tokenizer_load_gguf(g, &t, err);
    spex_gguf_close(g);   /* the tokenizer copies what it needs */
    return t;
}

/* Cached tokenizers (freed at exit). why gets the skip reason when one is unavailable. */
static spex_tokenizer *tok_stories, *tok_llama2, *tok_qwen3;
static bool tried_stories, tried_llama2, tried_qwen3;
static char why_stories[300], why_llama2[300], why_qwen3[300];

static void free_cached(void) {
    spex_tokenizer_free(tok_stories);
    spex_tokenizer_free(tok_llama2);
    spex_tokenizer_free(tok_qwen3);
}

static spex_tokenizer *cache_load(spex_tokenizer **slot, bool *tried, char *why, const char *path) {
    if (!*tried) {
        *tried = true;
        if (path) {
            spex_error err = {0};
            *slot = load_path(path, &err);
            if (!*slot) snprintf(why, 300, "loading %.100s failed: %.150s", path, err.msg);
        }
        static bool registered;
        if (!registered) {
            registered = true;
            atexit(free_cached);
        }
    }
    return *slot;
}

static spex_tokenizer *stories(void) {
    const char *p = test_shared_path("data/stories260K/stories260K.gguf");
    if (!p) snprintf(why_stories, sizeof why_stories, "../shared/data/stories260K/stories260K.gguf not found");
    return cache_load(&tok_stories, &tried_stories, why_stories, p);
}

static spex_tokenizer *llama2(void) {
    const char *p = tried_llama2 ? NULL : tok_fixture_llama2_gguf(why_llama2, sizeof why_llama2);
    return cache_load(&tok_llama2, &tried_llama2, why_llama2, p);
}

static spex_tokenizer *qwen3(void) {
    const char *p = tried_qwen3 ? NULL : tok_fixture_qwen3_gguf(why_qwen3, sizeof why_qwen3);
    return cache_load(&tok_qwen3, &tried_qwen3, why_qwen3, p);
}

#define NEED(tok, fn, why)                                                          \
    spex_tokenizer *tok = fn();                                                     \
    if (!tok) SKIP("%.250s", why)

/* Tokenizes into a malloc'd array (caller frees); NULL on failure (status in *st). */
static int32_t *tokenize(const spex_tokenizer *t, const char *s, size_t len, bool add_special, bool parse_special,
                         int *n, spex_status *st) {
    spex_error err = {0};
    *st = spex_tokenize(t, s, len, add_special, parse_special, NULL, 0, n, &err);
    if (*st != SPEX_OK && *st != SPEX_ERR_RANGE) return NULL;
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    *st = spex_tokenize(t, s, len, add_special, parse_special, ids, *n, n, &err);
    if (*st != SPEX_OK) {
        printf("  tokenize: %s\n", err.msg);
        free(ids);
        return NULL;
    }
    return ids;
}

/* Decodes into a malloc'd NUL-terminated buffer. */
static char *detokenize(const spex_tokenizer *t, const int32_t *ids, int n, unsigned flags, size_t *len) {
    spex_error err = {0};
    size_t need = 0;
    spex_status st = spex_detokenize(t, ids, (size_t)n, flags, NULL, 0, &need, &err);
    if (st != SPEX_OK && st != SPEX_ERR_RANGE) return NULL;
    char *buf = malloc(need + 1);
    if (spex_detokenize(t, ids, (size_t)n, flags, buf, need, len, &err) != SPEX_OK) {
        free(buf);
        return NULL;
    }
    buf[*len] = 0;
    return buf;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    printf("  %s:", what);
    for (int i = 0; i < n && i < 64; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 64 ? " ..." : "");
}

/* Tokenize -> compare -> detokenize -> compare, for every vector of a file pair. Returns the
 * number of mismatching vectors (each reported). */
static int check_vectors(const spex_tokenizer *t, const char *inp, const char *out, bool parse_special,
                         unsigned detok_flags, int *n_vec) {
    tok_vectors v;
    *n_vec = 0;
    if (tok_vectors_load(inp, out, &v) != 0) {
        printf("  cannot read vectors %s / %s\n", inp ? inp : "?", out ? out : "?");
        return 1;
    }
    int bad = 0;
    for (int i = 0; i < v.n; i++) {
        int n;
        spex_status st;
        int32_t *ids = tokenize(t, v.text[i], v.len[i], false, parse_special, &n, &st);
        bool same = ids && n == v.n_ids[i] && (n == 0 || memcmp(ids, v.ids[i], (size_t)n * sizeof *ids) == 0);
        if (!same) {
            printf("  vector %d \"%.60s\": ids differ\n", i, v.text[i]);
            if (ids) print_ids("got     ", ids, n);
            print_ids("expected", v.ids[i], v.n_ids[i]);
            bad++;
        } else {
            size_t len;
            char *back = detokenize(t, ids, n, detok_flags, &len);
            if (!back || len != v.len[i] || memcmp(back, v.text[i], len) != 0) {
                printf("  vector %d \"%.60s\": decodes to \"%.60s\"\n", i, v.text[i], back ? back : "(error)");
                bad++;
            }
            free(back);
        }
        free(ids);
    }
    *n_vec = v.n;
    tok_vectors_free(&v);
    return bad;
}

/* True if detokenize(tokenize(s)) == s. */
static bool round_trips(const spex_tokenizer *t, const char *s, size_t len, bool add_special, bool parse_special,
                        unsigned flags) {
    int n;
    spex_status st;
    int32_t *ids = tokenize(t, s, len, add_special, parse_special, &n, &st);
    if (!ids) return false;
    size_t blen;
    char *back = detokenize(t, ids, n, flags, &blen);
    bool ok = back && blen == len && memcmp(back, s, len) == 0;
    if (!ok) {
        printf("  round trip of %zu bytes failed (got %zu bytes)\n", len, back ? blen : 0);
        print_ids("ids", ids, n);
    }
    free(back);
    free(ids);
    return ok;
}

static uint64_t rng_state = 0x5EED5EEDull;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* ======================================================================== */
/* SentencePiece: stories260K                                                */
/* ======================================================================== */

TEST(spm_stories_vocab) {
    NEED(t, stories, why_stories);
    CHECK_EQ_INT(spex_tokenizer_get_kind(t), SPEX_TOKENIZER_SPM);
    CHECK_EQ_INT(spex_tokenizer_n_vocab(t), 512);
    CHECK_EQ_INT(spex_token_bos(t), 1);
    CHECK_EQ_INT(spex_token_eos(t), 2);
    CHECK_EQ_INT(spex_token_unk(t), 0);
    CHECK_EQ_INT(spex_token_pad(t), SPEX_TOKEN_NONE);   /* 0xFFFFFFFF in the file */
    CHECK(spex_tokenizer_add_bos(t));
    CHECK(!spex_tokenizer_add_eos(t));
    CHECK_EQ_INT(spex_token_get_type(t, 0), SPEX_TOKEN_UNKNOWN);
    CHECK(spex_token_is_control(t, 1) && spex_token_is_control(t, 2));
    CHECK_EQ_INT(spex_token_get_type(t, 3 + 0x41), SPEX_TOKEN_BYTE);
    CHECK(spex_token_is_eog(t, 2) && !spex_token_is_eog(t, 1));
    CHECK_EQ_INT(spex_token_find(t, "<0x0A>", 6), 3 + 0x0A);
    CHECK_EQ_INT(spex_token_find(t, "no such piece", 13), SPEX_TOKEN_NONE);
    CHECK(strcmp(spex_tokenizer_pre(t), "") == 0);

    /* pieces: a byte token is its byte; a control token renders only when asked */
    spex_str p;
    CHECK_OK(spex_token_to_piece(t, 3 + 0x0A, false, &p, &e_));
    CHECK(p.len == 1 && p.ptr[0] == '\n');
    CHECK_OK(spex_token_to_piece(t, 1, false, &p, &e_));
    CHECK_EQ_INT(p.len, 0);
    CHECK_OK(spex_token_to_piece(t, 1, true, &p, &e_));
    CHECK(p.len == 3 && memcmp(p.ptr, "<s>", 3) == 0);
    spex_error err = {0};
    CHECK_EQ_INT(spex_token_to_piece(t, 512, false, &p, &err), SPEX_ERR_RANGE);
    CHECK(strstr(err.msg, "512") != NULL);
    CHECK_EQ_INT(spex_token_to_piece(t, -1, false, &p, NULL), SPEX_ERR_RANGE);

    /* BOS: added with add_special only, and never for... the empty text gets just BOS */
    int n;
    spex_status st;
    int32_t *a = tokenize(t, "Once upon a time", 16, true, false, &n, &st);
    CHECK(a && n > 2 && a[0] == 1);
    int m;
    int32_t *b = tokenize(t, "Once upon a time", 16, false, false, &m, &st);
    CHECK(b && m == n - 1 && memcmp(a + 1, b, (size_t)m * sizeof *b) == 0);
    spex_str first;
    CHECK_OK(spex_token_to_piece(t, b[0], false, &first, &e_));
    CHECK_MSG(first.len == 5 && memcmp(first.ptr, " Once", 5) == 0, "first piece \"%.*s\"", (int)first.len,
              first.ptr);
    free(a);
    free(b);
    a = tokenize(t, "", 0, true, false, &n, &st);
    CHECK(a && n == 1 && a[0] == 1);
    free(a);
    a = tokenize(t, "", 0, false, false, &n, &st);
    CHECK(a && n == 0);
    free(a);

    /* round trips, with and without BOS; CJK and emoji go through byte fallback */
    static const char *texts[] = {"Once upon a time, there was a little girl named Lily.",
                                  " leading space",
                                  "two  spaces and a\nnewline\n",
                                  "Lily saw \xe6\x97\xa5\xe6\x9c\xac and \xf0\x9f\x99\x82!",
                                  "tab\there"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        CHECK_MSG(round_trips(t, texts[i], strlen(texts[i]), false, false, SPEX_DETOK_STRIP_SPACE), "text %zu", i);
        CHECK_MSG(round_trips(t, texts[i], strlen(texts[i]), true, false, SPEX_DETOK_STRIP_SPACE), "text %zu", i);
    }
    /* unknown characters use byte tokens: the ideograph is three <0xNN> */
    a = tokenize(t, "\xe6\x97\xa5", 3, false, false, &n, &st);
    CHECK(a);
    CHECK_MSG(n == 4 && a[1] == 3 + 0xE6 && a[2] == 3 + 0x97 && a[3] == 3 + 0xA5, "n = %d", n);
    free(a);
}

/* The model's greedy ids (stories260K.golden.json) decode to stories260K.greedy.txt. */
TEST(spm_stories_golden_text) {
    NEED(t, stories, why_stories);
    const char *jp = test_shared_path("data/stories260K/stories260K.golden.json");
    const char *tp = test_shared_path("data/stories260K/stories260K.greedy.txt");
    if (!jp || !tp) SKIP("stories260K golden files not found");
    char *json = tok_read_file(jp, NULL);
    size_t tlen = 0;
    char *text = tok_read_file(tp, &tlen);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    const cJSON *greedy = cJSON_GetObjectItemCaseSensitive(root, "greedy_ids");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
    int n = cJSON_GetArraySize(greedy), ni = cJSON_GetArraySize(input);
    int32_t *ids = malloc((size_t)(n + ni + 1) * sizeof *ids);
    int32_t *in_ids = ids + n;
    for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(greedy, i)->valueint;
    for (int i = 0; i < ni; i++) in_ids[i] = cJSON_GetArrayItem(input, i)->valueint;
    cJSON_Delete(root);
    bool ok = text && n == 200 && ni == 200 && in_ids[0] == 1;
    size_t len = 0;
    char *dec = ok ? detokenize(t, ids, n, SPEX_DETOK_STRIP_SPACE, &len) : NULL;
    /* the inputs are BOS + the greedy ids shifted by one: same text, space dropped after BOS */
    size_t len2 = 0;
    char *dec2 = ok ? detokenize(t, in_ids, ni, SPEX_DETOK_STRIP_SPACE, &len2) : NULL;
    spex_detok_stream *s = NULL;
    char *streamed = malloc(4096);
    size_t sl = 0;
    bool stream_ok = spex_detok_stream_create(t, SPEX_DETOK_STRIP_SPACE, &s, NULL) == SPEX_OK;
    for (int i = 0; stream_ok && i < n; i++) {
        spex_str piece;
        stream_ok = spex_detok_stream_push(s, ids[i], &piece, NULL) == SPEX_OK && sl + piece.len < 4096;
        if (stream_ok) memcpy(streamed + sl, piece.ptr, piece.len), sl += piece.len;
    }
    if (stream_ok) sl += spex_detok_stream_flush(s).len;
    spex_detok_stream_free(s);
    bool same = dec && len == tlen && memcmp(dec, text, len) == 0;
    bool same2 = dec2 && len2 + 0 <= tlen && memcmp(dec2, text, len2) == 0;
    bool same3 = stream_ok && sl == tlen && memcmp(streamed, text, sl) == 0;
    if (!same) printf("  decoded: \"%s\"\n", dec ? dec : "(error)");
    free(dec);
    free(dec2);
    free(streamed);
    free(ids);
    free(text);
    CHECK_MSG(ok, "golden files malformed");
    CHECK_MSG(same, "greedy ids do not decode to stories260K.greedy.txt (%zu vs %zu bytes)", len, tlen);
    CHECK_MSG(same2, "BOS + inputs do not decode to a prefix of the greedy text");
    CHECK_MSG(same3, "the stream differs from detokenize");
}

/* ======================================================================== */
/* SentencePiece: Llama 2 tokenizer.model vs llama.cpp's vectors             */
/* ======================================================================== */

TEST(spm_llama2_vectors) {
    NEED(t, llama2, why_llama2);
    CHECK_EQ_INT(spex_tokenizer_n_vocab(t), 32000);
    CHECK_EQ_INT(spex_token_find(t, "\xe2\x96\x81t", 4), 260);
    CHECK_EQ_INT(spex_token_find(t, "<0x0A>", 6), 13);
    int n_vec;
    int bad = check_vectors(t, test_shared_path("data/llama2-tokenizer/ggml-vocab-llama-spm.gguf.inp"),
                            test_shared_path("data/llama2-tokenizer/ggml-vocab-llama-spm.gguf.out"), false,
                            SPEX_DETOK_STRIP_SPACE, &n_vec);
    CHECK_MSG(bad == 0 && n_vec == 43, "%d of %d vectors wrong", bad, n_vec);
}

/* parse_special: "<s>" in the text is BOS, and the text after it gets a dummy-prefix space. */
TEST(spm_llama2_special) {
    NEED(t, llama2, why_llama2);
    int n, m;
    spex_status st;
    int32_t *a = tokenize(t, "<s>Hello", 8, false, true, &n, &st);
    int32_t *b = tokenize(t, "Hello", 5, true, false, &m, &st);
    CHECK(a && b && n == m && memcmp(a, b, (size_t)n * sizeof *a) == 0 && a[0] == 1);
    free(a);
    free(b);
    a = tokenize(t, "<s>Hello", 8, false, false, &n, &st);
    CHECK(a && n > 2 && a[0] != 1);
    free(a);
    /* with SPEX_DETOK_SPECIAL the partitioned tokens decode to their text, and the dummy-prefix
     * spaces added after them are dropped again */
    CHECK(round_trips(t, "x<s>y</s> z", 11, false, true, SPEX_DETOK_STRIP_SPACE | SPEX_DETOK_SPECIAL));
}

/* ======================================================================== */
/* Byte-level BPE: the Qwen3 tokenizer                                       */
/* ======================================================================== */

TEST(bpe_qwen3_vocab) {
    NEED(t, qwen3, why_qwen3);
    CHECK_EQ_INT(spex_tokenizer_get_kind(t), SPEX_TOKENIZER_BPE);
    CHECK(strcmp(spex_tokenizer_pre(t), "qwen2") == 0);
    CHECK_EQ_INT(spex_tokenizer_n_vocab(t), 151936);
    CHECK(!spex_tokenizer_add_bos(t));
    CHECK_EQ_INT(spex_token_bos(t), 151643);
    CHECK_EQ_INT(spex_token_eos(t), 151645);
    CHECK_EQ_INT(spex_token_eot(t), 151645);
    CHECK_EQ_INT(spex_token_pad(t), 151643);
    CHECK_EQ_INT(spex_token_unk(t), SPEX_TOKEN_NONE);
    CHECK_EQ_INT(spex_token_find(t, "<|im_start|>", 12), 151644);
    CHECK_EQ_INT(spex_token_find(t, "\xc4\x8a", 2), 198);   /* "\n" in the byte alphabet */
    CHECK(spex_token_is_control(t, 151644));
    CHECK_EQ_INT(spex_token_get_type(t, 151667), SPEX_TOKEN_USER_DEFINED);   /* <think> */
    CHECK_EQ_INT(spex_token_get_type(t, 151700), SPEX_TOKEN_UNUSED);          /* padding */
    /* stop set of targets.md §12.2 */
    static const int32_t eog[] = {151645, 151643, 151662, 151663, 151664};
    for (size_t i = 0; i < sizeof eog / sizeof *eog; i++) CHECK_MSG(spex_token_is_eog(t, eog[i]), "%d", eog[i]);
    CHECK(!spex_token_is_eog(t, 151644) && !spex_token_is_eog(t, 198) && !spex_token_is_eog(t, 151667));
    spex_str p;
    CHECK_OK(spex_token_to_piece(t, 220, false, &p, &e_));   /* "Ġ" = one space */
    CHECK(p.len == 1 && p.ptr[0] == ' ');
    CHECK_OK(spex_token_to_piece(t, 151667, false, &p, &e_));   /* user-defined: always shown */
    CHECK(p.len == 7 && memcmp(p.ptr, "<think>", 7) == 0);
    CHECK_OK(spex_token_to_piece(t, 151645, false, &p, &e_));
    CHECK_EQ_INT(p.len, 0);
    CHECK_OK(spex_token_to_piece(t, 151700, true, &p, &e_));   /* unused: nothing */
    CHECK_EQ_INT(p.len, 0);
}

TEST(bpe_qwen2_vectors) {
    NEED(t, qwen3, why_qwen3);
    int n_vec;
    int bad = check_vectors(t, test_shared_path("data/qwen3-tokenizer/ggml-vocab-qwen2.gguf.inp"),
                            test_shared_path("data/qwen3-tokenizer/ggml-vocab-qwen2.gguf.out"), false, 0, &n_vec);
    CHECK_MSG(bad == 0 && n_vec == 43, "%d of %d vectors wrong", bad, n_vec);
}

TEST(bpe_qwen3_special_vectors) {
    NEED(t, qwen3, why_qwen3);
    int n_vec;
    int bad = check_vectors(t, test_shared_path("data/qwen3-tokenizer/qwen3-special.inp"),
                            test_shared_path("data/qwen3-tokenizer/qwen3-special.out"), true, SPEX_DETOK_SPECIAL,
                            &n_vec);
    CHECK_MSG(bad == 0 && n_vec == 8, "%d of %d vectors wrong", bad, n_vec);
}

/* targets.md §13.1: the ChatML turn and the thinking-off suffix, token by token. */
TEST(bpe_qwen3_chat_tokens) {
    NEED(t, qwen3, why_qwen3);
    static const char turn[] = "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n";
    static const int32_t want[] = {151644, 872, 198, 9707, 11, 879, 525, 498, 30, 151645, 198, 151644, 77091, 198};
    int n;
    spex_status st;
    int32_t *ids = tokenize(t, turn, sizeof turn - 1, true, true, &n, &st);   /* add_special: no BOS */
    CHECK(ids && n == 14 && memcmp(ids, want, sizeof want) == 0);
    free(ids);
    static const int32_t off[] = {151667, 271, 151668, 271};
    ids = tokenize(t, "<think>\n\n</think>\n\n", 19, false, true, &n, &st);
    CHECK(ids && n == 4 && memcmp(ids, off, sizeof off) == 0);
    free(ids);
    /* without parse_special, control tokens are plain text; user-defined ones still match */
    ids = tokenize(t, "<|im_start|><think>", 19, false, false, &n, &st);
    CHECK(ids && n > 2 && ids[0] != 151644 && ids[n - 1] == 151667);
    size_t len;
    char *back = ids ? detokenize(t, ids, n, 0, &len) : NULL;
    CHECK(back && len == 19 && memcmp(back, "<|im_start|><think>", 19) == 0);
    free(back);
    free(ids);
    /* control tokens decode to nothing unless SPEX_DETOK_SPECIAL */
    int32_t two[] = {151644, 872};
    back = detokenize(t, two, 2, 0, &len);
    CHECK(back && len == 4 && memcmp(back, "user", 4) == 0);
    free(back);
}

/* NFC on (default): a decomposed é tokenizes like the composed one; off: it does not. */
TEST(bpe_qwen3_nfc) {
    NEED(t, qwen3, why_qwen3);
    int n1, n2, n3;
    spex_status st;
    int32_t *a = tokenize(t, "caf\xc3\xa9", 5, false, false, &n1, &st);
    int32_t *b = tokenize(t, "cafe\xcc\x81", 6, false, false, &n2, &st);
    spex_tokenizer_set_nfc(t, false);
    int32_t *c = tokenize(t, "cafe\xcc\x81", 6, false, false, &n3, &st);
    spex_tokenizer_set_nfc(t, true);
    bool ok = a && b && c && n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof *a) == 0 &&
              (n3 != n1 || memcmp(a, c, (size_t)n1 * sizeof *a) != 0);
    free(a);
    free(b);
    free(c);
    CHECK(ok);
}

/* The GPT-2 byte alphabet (targets.md §12.1): printable bytes map to themselves, the other
 * 68 to U+0100.. in byte order; the inverse undoes it and rejects everything else. */
TEST(byte_alphabet) {
    uint32_t next = 0x100;
    bool seen[0x144] = {false};
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t cp = spex_tok_byte_to_cp((uint8_t)b);
        CHECK_MSG(printable ? cp == (uint32_t)b : cp == next++, "byte %d -> U+%04X", b, (unsigned)cp);
        CHECK(cp < 0x144 && !seen[cp]);
        seen[cp] = true;
        CHECK_EQ_INT(spex_tok_cp_to_byte(cp), b);
    }
    CHECK_EQ_INT(next, 0x100 + 68);
    CHECK_EQ_INT(spex_tok_byte_to_cp(' '), 0x120);
    CHECK_EQ_INT(spex_tok_byte_to_cp('\n'), 0x10A);
    CHECK_EQ_INT(spex_tok_cp_to_byte(0x144), -1);
    CHECK_EQ_INT(spex_tok_cp_to_byte(0xAD), -1);
    CHECK_EQ_INT(spex_tok_cp_to_byte(0x20), -1);
}

/* ======================================================================== */
/* NFC itself                                                                */
/* ======================================================================== */

static bool nfc_is(const char *in, const char *want) {
    spex_tok_buf buf = {0};
    size_t len;
    bool same;
    bool ok = spex_tok_nfc((const uint8_t *)in, strlen(in), &buf, &len, &same);
    const char *got = same ? in : (const char *)buf.p;
    if (same) len = strlen(in);
    ok = ok && len == strlen(want) && memcmp(got, want, len) == 0;
    if (!ok) printf("  NFC(\"%s\") = \"%.*s\", want \"%s\"\n", in, (int)len, got, want);
    free(buf.p);
    return ok;
}

/* Expected strings from Python's unicodedata.normalize('NFC', ...). */
TEST(nfc_cases) {
    CHECK(nfc_is("e\xcc\x81", "\xc3\xa9"));                                 /* e + acute            */
    CHECK(nfc_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"));  /* Hangul L V T         */
    CHECK(nfc_is("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81"));              /* Hangul LV + T        */
    CHECK(nfc_is("a\xcc\x87\xcc\xa3", "\xe1\xba\xa1\xcc\x87"));             /* reorder, then compose */
    CHECK(nfc_is("\xe2\x84\xab", "\xc3\x85"));                              /* singleton (Angstrom) */
    CHECK(nfc_is("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"));              /* composition exclusion */
    CHECK(nfc_is("\xcc\x81" "e", "\xcc\x81" "e"));                          /* leading mark         */
    CHECK(nfc_is("A\xcc\x8a\xcc\x81", "\xc7\xba"));                         /* two-level composite  */
    CHECK(nfc_is("e\xff\xcc\x81", "e\xff\xcc\x81"));                        /* invalid byte blocks  */
    CHECK(nfc_is("plain ASCII", "plain ASCII"));
    CHECK(nfc_is("\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac"));
}

/* Every primary composite: NFC of its decomposition is itself; NFC is idempotent over every
 * code point; and the Unicode version is the one the tables say. */
TEST(nfc_tables) {
    CHECK(strlen(spex_nfc_unicode_version) > 0);
    CHECK(spex_nfc_comp_count > 900 && spex_nfc_decomp_count > 2000 && spex_nfc_ccc_count > 100);
    spex_tok_buf buf = {0}, buf2 = {0};
    size_t len, len2;
    bool same;
    int bad = 0;
    for (size_t i = 0; i < spex_nfc_comp_count && bad < 5; i++) {
        uint8_t in[8];
        size_t k = spex_tok_utf8_put((uint32_t)(spex_nfc_comp_table[i].pair >> 21), in);
        k += spex_tok_utf8_put((uint32_t)(spex_nfc_comp_table[i].pair & 0x1FFFFF), in + k);
        uint8_t want[4];
        size_t wl = spex_tok_utf8_put(spex_nfc_comp_table[i].cp, want);
        if (!spex_tok_nfc(in, k, &buf, &len, &same) || same || len != wl || memcmp(buf.p, want, wl) != 0) {
            printf("  composite U+%04X not recomposed\n", (unsigned)spex_nfc_comp_table[i].cp);
            bad++;
        }
    }
    for (uint32_t cp = 0x300; cp < 0x110000 && bad < 5; cp += (cp < 0x30000 ? 1 : 97)) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t in[4];
        size_t k = spex_tok_utf8_put(cp, in);
        if (!spex_tok_nfc(in, k, &buf, &len, &same)) bad++;
        const uint8_t *once = same ? in : buf.p;
        if (same) len = k;
        if (!spex_tok_nfc(once, len, &buf2, &len2, &same)) bad++;
        if (!same && (len2 != len || memcmp(buf2.p, once, len) != 0)) {
            printf("  NFC not idempotent at U+%04X\n", (unsigned)cp);
            bad++;
        }
    }
    free(buf.p);
    free(buf2.p);
    CHECK_EQ_INT(bad, 0);
}

/* ======================================================================== */
/* Streaming detokenizer                                                     */
/* ======================================================================== */

/* Pushes the byte-level byte tokens of s one byte at a time; returns what each push gave,
 * separated by '|', plus the flush after another '|'. */
static void stream_bytes(spex_tokenizer *t, const char *s, size_t n, char *out, size_t cap) {
    spex_detok_stream *st = NULL;
    size_t k = 0;
    out[0] = 0;
    if (spex_detok_stream_create(t, 0, &st, NULL) != SPEX_OK) return;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[(uint8_t)s[i]];
        spex_str p = {0};
        if (spex_detok_stream_push(st, id, &p, NULL) != SPEX_OK) break;
        if (k + p.len + 2 < cap) memcpy(out + k, p.ptr, p.len), k += p.len;
        out[k++] = '|';
    }
    spex_str f = spex_detok_stream_flush(st);
    if (k + f.len + 1 < cap) memcpy(out + k, f.ptr, f.len), k += f.len;
    out[k] = 0;
    spex_detok_stream_free(st);
}

TEST(detok_stream_utf8) {
    NEED(t, qwen3, why_qwen3);
    char out[256];
    /* a 2-, 3- and 4-byte character split over single-byte tokens: nothing until complete */
    stream_bytes(t, "\xc3\xa9\xe6\x97\xa5\xf0\x9f\x99\x82", 9, out, sizeof out);
    CHECK_MSG(strcmp(out, "|\xc3\xa9|||\xe6\x97\xa5||||\xf0\x9f\x99\x82|") == 0, "got \"%s\"", out);
    /* a lone continuation byte and 0xFF: one U+FFFD each, at once */
    stream_bytes(t, "a\x80" "b\xff", 4, out, sizeof out);
    CHECK_MSG(strcmp(out, "a|\xef\xbf\xbd|b|\xef\xbf\xbd|") == 0, "got \"%s\"", out);
    /* a truncated sequence: U+FFFD when the next byte proves it, then that byte */
    stream_bytes(t, "\xe6\x97" "a", 3, out, sizeof out);
    CHECK_MSG(strcmp(out, "||\xef\xbf\xbd" "a|") == 0, "got \"%s\"", out);
    /* surrogate and overlong encodings are invalid from their second byte */
    stream_bytes(t, "\xed\xa0\x80", 3, out, sizeof out);
    CHECK_MSG(strcmp(out, "|\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd|") == 0, "got \"%s\"", out);
    stream_bytes(t, "\xe0\x80", 2, out, sizeof out);
    CHECK_MSG(strcmp(out, "|\xef\xbf\xbd\xef\xbf\xbd|") == 0, "got \"%s\"", out);
    /* a tail held at the end becomes U+FFFD on flush */
    stream_bytes(t, "ok\xf0\x9f\x99", 5, out, sizeof out);
    CHECK_MSG(strcmp(out, "o|k||||\xef\xbf\xbd") == 0, "got \"%s\"", out);

    /* real tokens: CJK and emoji whose bytes straddle token boundaries stream to the text */
    /* (U+20000 and U+1FAE0 are rare enough to be split into byte tokens) */
    static const char text[] = "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82\xf0\x9f\x8e\x89 "
                               "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xf0\xa0\x80\x80\xf0\x9f\xab\xa0 done";
    int n;
    spex_status stt;
    int32_t *ids = tokenize(t, text, sizeof text - 1, false, false, &n, &stt);
    CHECK(ids);
    spex_detok_stream *s = NULL;
    CHECK_OK(spex_detok_stream_create(t, 0, &s, &e_));
    char acc[256];
    size_t k = 0;
    bool partial_seen = false;
    for (int i = 0; i < n; i++) {
        spex_str p;
        spex_str raw;
        CHECK_OK(spex_detok_stream_push(s, ids[i], &p, &e_));
        CHECK_OK(spex_token_to_piece(t, ids[i], false, &raw, &e_));
        if (p.len != raw.len) partial_seen = true;
        CHECK(k + p.len < sizeof acc);
        memcpy(acc + k, p.ptr, p.len);
        k += p.len;
    }
    k += spex_detok_stream_flush(s).len;
    spex_detok_stream_free(s);
    free(ids);
    CHECK(k == sizeof text - 1 && memcmp(acc, text, k) == 0);
    CHECK_MSG(partial_seen, "no token split a character: the case does not test holding back");
}

TEST(detok_stream_spm) {
    NEED(t, stories, why_stories);
    spex_detok_stream *s = NULL;
    CHECK_OK(spex_detok_stream_create(t, SPEX_DETOK_STRIP_SPACE, &s, &e_));
    /* BOS, then <0xE6><0x97><0xA5> (one ideograph as byte tokens), then an invalid <0xFF> */
    int32_t ids[] = {1, 3 + 0xE6, 3 + 0x97, 3 + 0xA5, 3 + 0xFF};
    size_t lens[5];
    char acc[64];
    size_t k = 0;
    for (int i = 0; i < 5; i++) {
        spex_str p;
        CHECK_OK(spex_detok_stream_push(s, ids[i], &p, &e_));
        lens[i] = p.len;
        memcpy(acc + k, p.ptr, p.len);
        k += p.len;
    }
    CHECK(lens[0] == 0 && lens[1] == 0 && lens[2] == 0 && lens[3] == 3 && lens[4] == 3);
    CHECK(k == 6 && memcmp(acc, "\xe6\x97\xa5\xef\xbf\xbd", 6) == 0);
    spex_error err = {0};
    spex_str p;
    CHECK_EQ_INT(spex_detok_stream_push(s, 9999, &p, &err), SPEX_ERR_RANGE);
    CHECK(p.len == 0 && err.msg[0]);
    spex_detok_stream_reset(s);
    int32_t once = spex_token_find(t, "\xe2\x96\x81Once", 7);
    CHECK(once >= 0);
    CHECK_OK(spex_detok_stream_push(s, once, &p, &e_));   /* first piece: dummy space dropped */
    CHECK(p.len == 4 && memcmp(p.ptr, "Once", 4) == 0);
    CHECK_OK(spex_detok_stream_push(s, once, &p, &e_));   /* later ones keep it */
    CHECK(p.len == 5 && memcmp(p.ptr, " Once", 5) == 0);
    spex_detok_stream_free(s);
}

/* ======================================================================== */
/* Vocab GGUFs with missing or mis-typed keys                                */
/* ======================================================================== */

static char bad_dir[64];

static void remove_bad_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bad_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", bad_dir);
}

/* A tiny SPM vocab: <unk> <s> </s>, 256 byte tokens, ▁ and a few pieces; `mutate` spoils one
 * key. */
enum { MUT_NONE, MUT_NO_MODEL, MUT_MODEL_BERT, MUT_MODEL_U32, MUT_NO_TOKENS, MUT_TOKENS_U32, MUT_NO_SCORES,
       MUT_SCORES_SHORT, MUT_TYPES_STR, MUT_TYPE_BAD, MUT_BOS_RANGE, MUT_ADD_BOS_U32, MUT_GPT2_NO_MERGES,
       MUT_GPT2_BAD_PRE, MUT_GPT2_BAD_MERGE, MUT_GPT2_OK, MUT_COUNT };

static spex_status load_mutated(int mutate, spex_tokenizer **out, spex_error *err) {
    if (!bad_dir[0]) {
        snprintf(bad_dir, sizeof bad_dir, "/tmp/spex-test-tokbad-XXXXXX");
        if (!mkdtemp(bad_dir)) return SPEX_ERR_IO;
        atexit(remove_bad_dir);
    }
    bool gpt2 = mutate >= MUT_GPT2_NO_MERGES;
    enum { N = 3 + 256 + 4 };
    static char bytes[256][8];
    spex_str tok[N];
    float score[N];
    int32_t type[N];
    tok[0] = (spex_str){"<unk>", 5};
    tok[1] = (spex_str){"<s>", 3};
    tok[2] = (spex_str){"</s>", 4};
    type[0] = SPEX_TOKEN_UNKNOWN;
    type[1] = type[2] = SPEX_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        size_t l = gpt2 ? spex_tok_utf8_put(spex_tok_byte_to_cp((uint8_t)b), (uint8_t *)bytes[b])
                        : (size_t)snprintf(bytes[b], 8, "<0x%02X>", b);
        tok[3 + b] = (spex_str){bytes[b], l};
        type[3 + b] = gpt2 ? SPEX_TOKEN_NORMAL : SPEX_TOKEN_BYTE;
    }
    static const char *extra[4] = {"\xe2\x96\x81", "ab", "\xe2\x96\x81\x61\x62", "abab"};
    for (int i = 0; i < 4; i++) {
        tok[259 + i] = (spex_str){extra[i], strlen(extra[i])};
        type[259 + i] = SPEX_TOKEN_NORMAL;
    }
    if (gpt2) tok[259] = (spex_str){"\xc4\xa0" "a", 3};   /* "Ġa" instead of ▁ */
    for (int i = 0; i < N; i++) score[i] = -(float)i;
    spex_gguf_writer *w = NULL;
    spex_status s = spex_gguf_writer_init(&w, err);
    if (s != SPEX_OK) return s;
    const char *model = gpt2 ? "gpt2" : "llama";
    if (mutate == MUT_MODEL_BERT) model = "bert";
    if (mutate == MUT_MODEL_U32) spex_gguf_writer_set_u32(w, "tokenizer.ggml.model", 1);
    else if (mutate != MUT_NO_MODEL) spex_gguf_writer_set_str(w, "tokenizer.ggml.model", model, strlen(model));
    if (mutate == MUT_TOKENS_U32) spex_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", SPEX_GGUF_I32, type, N);
    else if (mutate != MUT_NO_TOKENS) spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, N);
    if (mutate != MUT_NO_SCORES)
        spex_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SPEX_GGUF_F32, score, mutate == MUT_SCORES_SHORT ? N - 1 : N);
    if (mutate == MUT_TYPE_BAD) type[7] = 9;
    if (mutate == MUT_TYPES_STR) spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.token_type", tok, N);
    else spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, type, N);
    spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", mutate == MUT_BOS_RANGE ? 5000 : 1);
    spex_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    if (mutate == MUT_ADD_BOS_U32) spex_gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    if (gpt2) {
        const char *pre = mutate == MUT_GPT2_BAD_PRE ? "klingon" : "qwen2";
        spex_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
        spex_str merges[2] = {{"a b", 3}, {"ab ab", 5}};
        if (mutate == MUT_GPT2_BAD_MERGE) merges[1] = (spex_str){"abab", 4};
        if (mutate != MUT_GPT2_NO_MERGES) spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/bad%d.gguf", bad_dir, mutate);
    s = spex_gguf_writer_write(w, path, err);
    spex_gguf_writer_free(w);
    if (s != SPEX_OK) return s;
    spex_gguf *g = NULL;
    if ((s = spex_gguf_open(path, &g, err)) != SPEX_OK) return s;
    s = spex_tokenizer_load_gguf(g, out, err);
    spex_gguf_close(g);
    return s;
}

TEST(bad_vocab_keys) {
    static const struct {
        int mutate;
        spex_status want;
        const char *needle;   /* the message must name what is wrong */
    } cases[] = {
        {MUT_NONE, SPEX_OK, ""},
        {MUT_NO_MODEL, SPEX_ERR_NOT_FOUND, "tokenizer.ggml.model"},
        {MUT_MODEL_BERT, SPEX_ERR_UNSUPPORTED, "bert"},
        {MUT_MODEL_U32, SPEX_ERR_TYPE, "tokenizer.ggml.model"},
        {MUT_NO_TOKENS, SPEX_ERR_NOT_FOUND, "tokenizer.ggml.tokens"},
        {MUT_TOKENS_U32, SPEX_ERR_TYPE, "tokenizer.ggml.tokens"},
        {MUT_NO_SCORES, SPEX_ERR_NOT_FOUND, "tokenizer.ggml.scores"},
        {MUT_SCORES_SHORT, SPEX_ERR_FORMAT, "tokenizer.ggml.scores"},
        {MUT_TYPES_STR, SPEX_ERR_TYPE, "tokenizer.ggml.token_type"},
        {MUT_TYPE_BAD, SPEX_ERR_FORMAT, "token_type[7]"},
        {MUT_BOS_RANGE, SPEX_ERR_RANGE, "bos_token_id"},
        {MUT_ADD_BOS_U32, SPEX_ERR_TYPE, "add_bos_token"},
        {MUT_GPT2_NO_MERGES, SPEX_ERR_NOT_FOUND, "tokenizer.ggml.merges"},
        {MUT_GPT2_BAD_PRE, SPEX_ERR_UNSUPPORTED, "klingon"},
        {MUT_GPT2_BAD_MERGE, SPEX_ERR_FORMAT, "tokenizer.ggml.merges[1]"},
        {MUT_GPT2_OK, SPEX_OK, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        spex_error err = {0};
        spex_tokenizer *t = (spex_tokenizer *)&err;   /* must come back NULL on failure */
        spex_status s = load_mutated(cases[i].mutate, &t, &err);
        CHECK_MSG(s == cases[i].want, "case %d: %s (%s), want %s", cases[i].mutate, spex_status_str(s), err.msg,
                  spex_status_str(cases[i].want));
        CHECK_MSG(strstr(err.msg, cases[i].needle) != NULL, "case %d: message \"%s\" lacks \"%s\"", cases[i].mutate,
                  err.msg, cases[i].needle);
        if (s != SPEX_OK) {
            CHECK(t == NULL);
            continue;
        }
        /* the synthetic vocabs work: "abab" merges to one token in both kinds */
        int n;
        spex_status st;
        int32_t *ids = tokenize(t, "abab", 4, false, false, &n, &st);
        bool gpt2 = cases[i].mutate == MUT_GPT2_OK;
        /* gpt2: "a b" then "ab ab" give "abab"; SPM: "▁abab" -> "ab" twice (score -260), then
         * "▁ab" (-261) beats "abab" (-262) */
        CHECK_MSG(ids && n == (gpt2 ? 1 : 2), "n = %d", n);
        CHECK(gpt2 ? ids[0] == 262 : ids[0] == 261 && ids[1] == 260);
        CHECK(round_trips(t, "abab ab\xff", 8, true, true, SPEX_DETOK_STRIP_SPACE));
        free(ids);
        spex_tokenizer_free(t);
    }
    CHECK_EQ_INT(spex_tokenizer_load_gguf(NULL, NULL, NULL), SPEX_ERR_INVALID_ARG);
}

/* ======================================================================== */
/* Hostile input                                                             */
/* ======================================================================== */

/* Synthetic vocabs (load_mutated), cached like the real ones. */
static spex_tokenizer *synth[2];

static void free_synth(void) {
    spex_tokenizer_free(synth[0]);
    spex_tokenizer_free(synth[1]);
}

/* On the real vocabs when the shared data is there, else on the synthetic ones above. */
TEST(hostile_text) {
    spex_tokenizer *ts[2] = {stories(), qwen3()};
    if ((!ts[0] || !ts[1]) && !synth[0]) {
        load_mutated(MUT_NONE, &synth[0], NULL);
        load_mutated(MUT_GPT2_OK, &synth[1], NULL);
        atexit(free_synth);
    }
    if (!ts[0]) ts[0] = synth[0];
    if (!ts[1]) ts[1] = synth[1];
    CHECK(ts[0] && ts[1]);
    for (int v = 0; v < 2; v++) {
        spex_tokenizer *t = ts[v];
        if (!t) continue;
        unsigned flags = v == 0 ? SPEX_DETOK_STRIP_SPACE : 0;
        if (v == 1) spex_tokenizer_set_nfc(t, false);   /* NFC would change non-NFC random text */
        /* NUL bytes, invalid UTF-8 of every kind, truncated sequences at the end */
        static const char *cases[] = {"a\0b", "\xff\xfe\xfd", "\x80\x80", "\xc0\xaf", "\xed\xa0\x80",
                                      "\xf4\x90\x80\x80", "x\xe6\x97", "\xf0\x9f\x99", "\0", " \0 "};
        static const size_t lens[] = {3, 3, 2, 2, 3, 4, 3, 3, 1, 3};
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
            CHECK_MSG(round_trips(t, cases[i], lens[i], false, false, flags), "vocab %d case %zu", v, i);
        /* random bytes (all 256 values), with and without special parsing */
        for (int r = 0; r < 300; r++) {
            char buf[80];
            size_t len = rnd() % sizeof buf;
            for (size_t i = 0; i < len; i++) {
                uint32_t x = rnd();
                /* bias towards spaces, '<' and UTF-8 lead bytes so the paths under test get hit */
                buf[i] = x % 5 == 0 ? " <\xe6\xf0\n"[x / 5 % 5] : (char)(x >> 8);
                /* SPM cannot tell U+2581 from a space, by design: avoid writing it */
                if (v == 0 && i >= 2 && (uint8_t)buf[i - 2] == 0xE2 && (uint8_t)buf[i - 1] == 0x96 &&
                    (uint8_t)buf[i] == 0x81)
                    buf[i] = 'x';
            }
            CHECK_MSG(round_trips(t, buf, len, r & 1, false, flags), "vocab %d random case %d", v, r);
        }
        if (v == 1) spex_tokenizer_set_nfc(t, true);
        /* bad arguments */
        int n = -5;
        int32_t one;
        spex_error err = {0};
        CHECK_EQ_INT(spex_tokenize(t, NULL, 3, false, false, &one, 1, &n, &err), SPEX_ERR_INVALID_ARG);
        CHECK_EQ_INT(spex_tokenize(t, "abc", 3, false, false, NULL, 4, &n, &err), SPEX_ERR_INVALID_ARG);
        CHECK_EQ_INT(spex_tokenize(t, "abc", 3, false, false, &one, -1, &n, &err), SPEX_ERR_INVALID_ARG);
        CHECK_OK(spex_tokenize(t, NULL, 0, false, false, NULL, 0, &n, &e_));
        CHECK_EQ_INT(n, 0);
        /* too small an output: SPEX_ERR_RANGE with the needed count, the prefix written */
        static const char s[] = "Once upon a time there was a cat.";
        int32_t full[64], part[3];
        int nf, np;
        CHECK_OK(spex_tokenize(t, s, sizeof s - 1, true, false, full, 64, &nf, &e_));
        CHECK(nf > 3);
        CHECK_EQ_INT(spex_tokenize(t, s, sizeof s - 1, true, false, part, 3, &np, &err), SPEX_ERR_RANGE);
        CHECK_EQ_INT(np, nf);
        CHECK(memcmp(part, full, sizeof part) == 0);
        CHECK(strstr(err.msg, "do not fit") != NULL);
        /* detokenize: bad id, small buffer */
        size_t len;
        char small[2];
        int32_t bad_id = spex_tokenizer_n_vocab(t);
        CHECK_EQ_INT(spex_detokenize(t, &bad_id, 1, 0, small, 2, &len, &err), SPEX_ERR_RANGE);
        CHECK_EQ_INT(spex_detokenize(t, full, (size_t)nf, 0, small, 2, &len, &err), SPEX_ERR_RANGE);
        CHECK(len > 2);
    }
}

/* 100 KB prompts of several shapes: well under a second each, and lossless. */
TEST(long_prompt_speed) {
    spex_tokenizer *ts[2] = {llama2(), qwen3()};
    if (!ts[0] && !ts[1]) SKIP("%.120s; %.120s", why_llama2, why_qwen3);
    const size_t n = 100 * 1024;
    char *text = malloc(n + 1);
    const char *inp = test_shared_path("data/qwen3-tokenizer/ggml-vocab-qwen2.gguf.inp");
    size_t il = 0;
    char *src = inp ? tok_read_file(inp, &il) : NULL;
    double limit = SLOW_BUILD ? 10.0 : 1.0;
    for (int shape = 0; shape < 5; shape++) {
        for (size_t i = 0; i < n; i++) {
            switch (shape) {
            case 0: text[i] = src && il ? src[i % il] : (char)('a' + i % 26); break;   /* mixed text      */
            case 1: text[i] = 'a'; break;                                               /* one 100 KB word */
            case 2: text[i] = ' '; break;                                               /* one space run   */
            case 3: text[i] = (char)('0' + i % 10); break;                              /* digits          */
            default: text[i] = (char)(rnd() >> 8); break;                               /* random bytes    */
            }
        }
        for (int v = 0; v < 2; v++) {
            if (!ts[v]) continue;
            double t0 = now_s();
            int cnt;
            spex_status st;
            int32_t *ids = tokenize(ts[v], text, n, false, false, &cnt, &st);
            double dt = now_s() - t0;
            CHECK_MSG(ids, "shape %d vocab %d: %s", shape, v, spex_status_str(st));
            if (shape == 0) printf("  100 KB mixed text: %s %d tokens in %.3f s\n", v ? "qwen3" : "llama2", cnt, dt);
            CHECK_MSG(dt < limit, "shape %d vocab %d took %.3f s", shape, v, dt);
            size_t len;
            char *back = detokenize(ts[v], ids, cnt, v == 0 ? SPEX_DETOK_STRIP_SPACE : 0, &len);
            /* random bytes may contain U+2581 (SPM) or non-NFC text (BPE): compare the rest */
            if (shape < 4) CHECK_MSG(back && len == n && memcmp(back, text, n) == 0, "shape %d vocab %d", shape, v);
            free(back);
            free(ids);
        }
    }
    free(src);
    free(text);
}

TEST_MAIN()
