/*
 * test_convert.c — the tokenizer converters (src/tok/convert.c, convert_spm.c): vocab-only
 * GGUFs built from the shared Qwen3 tokenizer.json (+ tokenizer_config.json) and Llama 2
 * tokenizer.model are reopened with spex_gguf_open + spex_tokenizer_load_gguf and must
 * reproduce llama.cpp's test vectors (issue 3, test 4) and decode them back byte for byte;
 * small synthetic inputs check the keys written without the shared data; malformed,
 * truncated and mistyped inputs must each give a clear error (the status and a message
 * naming the field), never a crash.
 */
#include "spex.h"
#include "tok/api.h"
#include "gguf/api.h"
#include "test.h"
#include "tok_fixtures.h"

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */


static const char *write_tmp(const char *name, const void *data, size_t len) {
    const char *p = test_tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (!f) return p;
    if (len) fwrite(data, 1, len, f);
    fclose(f);
    return p;
}

typedef enum { CONV_HF, CONV_SPM } conv_kind;

/* Runs one converter into a writer and writes out (when given); the status, with err filled. */
static spex_status convert(conv_kind kind, const char *src, const char *cfg, int32_t n_vocab, const char *out,
                           spex_error *err) {
    spex_gguf_writer *w = NULL;
    spex_status st = spex_gguf_writer_init(&w, err);
    if (st == SPEX_OK) st = spex_gguf_writer_set_str(w, "general.architecture", "qwen3", 5);
    if (st == SPEX_OK) {
        if (kind == CONV_SPM) st = spex_vocab_from_spm_model(src, w, err);
        else if (n_vocab) st = spex_vocab_from_hf_json_padded(src, cfg, n_vocab, w, err);
        else st = spex_vocab_from_hf_json(src, cfg, w, err);
    }
    if (st == SPEX_OK && out) st = spex_gguf_writer_write(w, out, err);
    spex_gguf_writer_free(w);
    return st;
}

/* Converts and loads; NULL (with the reason printed) on failure. *g stays open for key checks. */
static spex_tokenizer *convert_load(conv_kind kind, const char *src, const char *cfg, int32_t n_vocab,
                                    const char *name, spex_gguf **g) {
    spex_error err = {0};
    spex_tokenizer *t = NULL;
    const char *out = test_tmp_path(name);
    *g = NULL;
    if (convert(kind, src, cfg, n_vocab, out, &err) != SPEX_OK || spex_gguf_open(out, g, &err) != SPEX_OK ||
        spex_tokenizer_load_gguf(*g, &t, &err) != SPEX_OK) {
        printf("  %s: %s\n", name, err.msg);
        spex_gguf_close(*g);
        *g = NULL;
    }
    return t;
}

/* Expects failure with status want and a message containing needle. */
static bool fails_with(spex_status got, const spex_error *err, spex_status want, const char *needle) {
    bool ok = got == want && err->msg[0] && (!needle || strstr(err->msg, needle));
    if (!ok) printf("  expected %s containing \"%s\", got %s: \"%s\"\n", spex_status_str(want), needle ? needle : "",
                    spex_status_str(got), err->msg);
    return ok;
}

static int32_t *tokenize(const spex_tokenizer *t, const char *s, size_t len, bool parse_special, int *n) {
    if (spex_tokenize(t, s, len, false, parse_special, NULL, 0, n, NULL) != SPEX_ERR_RANGE && *n != 0) return NULL;
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    if (ids && spex_tokenize(t, s, len, false, parse_special, ids, *n, n, NULL) != SPEX_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Number of vectors that differ from llama.cpp's ids or do not decode back to their text. */
static int check_vectors(const spex_tokenizer *t, const char *inp, const char *out, bool parse_special,
                         unsigned flags, int *n_vec) {
    tok_vectors v;
    *n_vec = 0;
    if (tok_vectors_load(inp, out, &v) != 0) return 1;
    int bad = 0;
    for (int i = 0; i < v.n; i++) {
        int n = 0;
        int32_t *ids = tokenize(t, v.text[i], v.len[i], parse_special, &n);
        bool same = ids && n == v.n_ids[i] && (n == 0 || !memcmp(ids, v.ids[i], (size_t)n * sizeof *ids));
        size_t len = 0;
        char *back = NULL;
        if (same && spex_detokenize(t, ids, (size_t)n, flags, NULL, 0, &len, NULL) != SPEX_ERR_INVALID_ARG &&
            (back = malloc(len + 1)) != NULL)
            same = spex_detokenize(t, ids, (size_t)n, flags, back, len, &len, NULL) == SPEX_OK && len == v.len[i] &&
                   !memcmp(back, v.text[i], len);
        if (!same) {
            printf("  vector %d \"%.60s\" differs or does not round-trip\n", i, v.text[i]);
            bad++;
        }
        free(back);
        free(ids);
    }
    *n_vec = v.n;
    tok_vectors_free(&v);
    return bad;
}

static bool str_is(spex_str s, const char *want) {
    return s.len == strlen(want) && !memcmp(s.ptr, want, s.len);
}

/* ======================================================================== */
/* Real tokenizers (shared data)                                             */
/* ======================================================================== */

TEST(qwen3_tokenizer_json_with_config) {
    const char *src = test_shared_path("data/qwen3-tokenizer/tokenizer.json");
    const char *cfg = test_shared_path("data/qwen3-tokenizer/tokenizer_config.json");
    if (!src || !cfg) SKIP("../shared/data/qwen3-tokenizer/tokenizer.json or tokenizer_config.json not found");
    spex_gguf *g;
    spex_tokenizer *t = convert_load(CONV_HF, src, cfg, 0, "qwen3-cfg.gguf", &g);
    CHECK(t);
    int n_vec = 0, bad = check_vectors(t, test_shared_path("data/qwen3-tokenizer/ggml-vocab-qwen2.gguf.inp"),
                                       test_shared_path("data/qwen3-tokenizer/ggml-vocab-qwen2.gguf.out"), false, 0,
                                       &n_vec);
    int n_sp = 0, bad_sp = check_vectors(t, test_shared_path("data/qwen3-tokenizer/qwen3-special.inp"),
                                         test_shared_path("data/qwen3-tokenizer/qwen3-special.out"), true,
                                         SPEX_DETOK_SPECIAL, &n_sp);
    bool meta = spex_tokenizer_get_kind(t) == SPEX_TOKENIZER_BPE && !strcmp(spex_tokenizer_pre(t), "qwen2") &&
                spex_tokenizer_n_vocab(t) == 151669 && spex_token_bos(t) == 151643 && spex_token_eos(t) == 151645 &&
                spex_token_pad(t) == 151643 && !spex_tokenizer_add_bos(t) &&
                spex_token_get_type(t, 151644) == SPEX_TOKEN_CONTROL &&          /* <|im_start|> */
                spex_token_get_type(t, 151665) == SPEX_TOKEN_USER_DEFINED &&     /* <tool_response> */
                spex_token_find(t, "\xc4\xa0the", 5) == 279;                    /* "Ġthe" */
    spex_str tmpl = {0}, arch = {0};
    spex_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL);
    spex_gguf_get_str(g, "general.architecture", &arch, NULL);
    spex_gguf_value merges = {0};
    spex_gguf_get_arr(g, "tokenizer.ggml.merges", &merges, NULL);
    int64_t n_merges = (int64_t)merges.n;
    bool arch_ok = str_is(arch, "qwen3");
    /* the config's template, verbatim: its start and its length as Python's json reads it */
    bool tmpl_ok = tmpl.len == 4116 && !memcmp(tmpl.ptr, "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}", 47);
    spex_tokenizer_free(t);   /* arch and tmpl are views into g: checked before it closes */
    spex_gguf_close(g);
    CHECK_MSG(bad == 0 && n_vec == 43, "ggml-vocab-qwen2: %d of %d vectors wrong", bad, n_vec);
    CHECK_MSG(bad_sp == 0 && n_sp == 8, "qwen3-special: %d of %d vectors wrong", bad_sp, n_sp);
    CHECK(meta);
    CHECK(arch_ok);
    CHECK_EQ_INT(n_merges, 151387);
    CHECK(tmpl_ok);
}

TEST(qwen3_padded_to_model_rows) {
    const char *src = test_shared_path("data/qwen3-tokenizer/tokenizer.json");
    if (!src) SKIP("../shared/data/qwen3-tokenizer/tokenizer.json not found");
    /* test_tok covers the 151936-row vocabulary the fixture builds; here the edges of padding */
    spex_error err = {0};
    CHECK(fails_with(convert(CONV_HF, src, NULL, 151668, NULL, &err), &err, SPEX_ERR_RANGE, "151668"));
    spex_gguf *g;
    spex_tokenizer *t = convert_load(CONV_HF, src, NULL, 151670, "qwen3-pad.gguf", &g);
    CHECK(t);
    spex_str last = spex_token_text(t, 151669);
    bool ok = spex_tokenizer_n_vocab(t) == 151670 && str_is(last, "[PAD151669]") &&
              spex_token_get_type(t, 151669) == SPEX_TOKEN_UNUSED && spex_token_eos(t) == 151645;
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK(ok);
}

TEST(llama2_tokenizer_model) {
    const char *src = test_shared_path("data/llama2-tokenizer/tokenizer.model");
    if (!src) SKIP("../shared/data/llama2-tokenizer/tokenizer.model not found");
    spex_gguf *g;
    spex_tokenizer *t = convert_load(CONV_SPM, src, NULL, 0, "llama2.gguf", &g);
    CHECK(t);
    int n_vec = 0, bad = check_vectors(t, test_shared_path("data/llama2-tokenizer/ggml-vocab-llama-spm.gguf.inp"),
                                       test_shared_path("data/llama2-tokenizer/ggml-vocab-llama-spm.gguf.out"), false,
                                       SPEX_DETOK_STRIP_SPACE, &n_vec);
    bool meta = spex_tokenizer_get_kind(t) == SPEX_TOKENIZER_SPM && spex_tokenizer_n_vocab(t) == 32000 &&
                spex_token_unk(t) == 0 && spex_token_bos(t) == 1 && spex_token_eos(t) == 2 &&
                spex_token_pad(t) == SPEX_TOKEN_NONE && spex_tokenizer_add_bos(t) && !spex_tokenizer_add_eos(t) &&
                spex_token_get_type(t, 0) == SPEX_TOKEN_UNKNOWN && spex_token_get_type(t, 1) == SPEX_TOKEN_CONTROL &&
                spex_token_get_type(t, 3) == SPEX_TOKEN_BYTE && str_is(spex_token_text(t, 3), "<0x00>") &&
                spex_token_get_type(t, 258) == SPEX_TOKEN_BYTE && str_is(spex_token_text(t, 258), "<0xFF>");
    spex_gguf_value scores = {0};
    bool space_prefix = false;
    spex_gguf_get_arr(g, "tokenizer.ggml.scores", &scores, NULL);
    spex_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &space_prefix, NULL);
    /* scores as stored (read independently with a few lines of Python): "▁▁" -1e9, "▁t" -1, "给" -31740 */
    float s259 = 0, s260 = 0, s31999 = 0;
    if (scores.n == 32000) {
        memcpy(&s259, (const float *)scores.data + 259, 4);
        memcpy(&s260, (const float *)scores.data + 260, 4);
        memcpy(&s31999, (const float *)scores.data + 31999, 4);
    }
    bool texts = str_is(spex_token_text(t, 260), "\xe2\x96\x81t") && str_is(spex_token_text(t, 31999), "\xe7\xbb\x99");
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK_MSG(bad == 0 && n_vec == 43, "ggml-vocab-llama-spm: %d of %d vectors wrong", bad, n_vec);
    CHECK(meta);
    CHECK(space_prefix);
    CHECK(texts);
    CHECK(s259 == -1e9f && s260 == -1.0f && s31999 == -31740.0f);
}

/* Every cut of the real file fails cleanly: mid-field is malformed, a cut on a piece boundary
 * loses the TrainerSpec (then model_type defaults to Unigram, which is refused). */
TEST(llama2_truncated) {
    const char *src = test_shared_path("data/llama2-tokenizer/tokenizer.model");
    if (!src) SKIP("../shared/data/llama2-tokenizer/tokenizer.model not found");
    size_t size;
    char *buf = tok_read_file(src, &size);
    CHECK(buf && size > 1000);
    size_t cuts[] = {0, 1, 2, 7, 100, size / 3, size / 2, size - 200, size - 19, size - 3, size - 1};
    int bad = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spex_error err = {0};
        const char *p = write_tmp("cut.model", buf, cuts[i]);
        spex_status st = convert(CONV_SPM, p, NULL, 0, NULL, &err);
        if (st == SPEX_OK || !err.msg[0] || !strstr(err.msg, "cut.model")) {
            printf("  cut at %zu: %s \"%s\"\n", cuts[i], spex_status_str(st), err.msg);
            bad++;
        }
    }
    free(buf);
    CHECK_EQ_INT(bad, 0);
}

/* ======================================================================== */
/* Synthetic inputs (no shared data needed)                                  */
/* ======================================================================== */

static const char tiny_json[] =
    "{\"added_tokens\": [{\"id\": 5, \"content\": \"<|endoftext|>\", \"special\": true},"
    "                   {\"id\": 6, \"content\": \"<|im_end|>\", \"special\": false},"
    "                   {\"id\": 8, \"content\": \"<tool>\", \"special\": false}],"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    "   {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
    "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "    \"behavior\": \"Isolated\"},"
    "   {\"type\": \"ByteLevel\", \"use_regex\": false}]},"
    " \"decoder\": {\"type\": \"ByteLevel\"},"
    " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xc4\xa0\": 3, \"\xc4\xa0" "a\": 4},"
    "            \"merges\": [\"a b\", [\"\xc4\xa0\", \"a\"]]}}";

static const char tiny_config[] =
    "{\"bos_token\": \"<|endoftext|>\", \"eos_token\": {\"content\": \"<|im_end|>\"}, \"pad_token\": null,"
    " \"add_bos_token\": true, \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
    " {\"name\": \"default\", \"template\": \"D\"}]}";

TEST(hf_tiny) {
    const char *src = write_tmp("tiny.json", tiny_json, sizeof tiny_json - 1);
    const char *cfg = write_tmp("tiny_config.json", tiny_config, sizeof tiny_config - 1);
    spex_gguf *g;
    spex_tokenizer *t = convert_load(CONV_HF, src, NULL, 0, "tiny.gguf", &g);
    CHECK(t);
    /* no config: Qwen's special tokens by name, no BOS added, the hole at 7 filled */
    bool meta = spex_tokenizer_n_vocab(t) == 9 && spex_token_bos(t) == 5 && spex_token_eos(t) == 6 &&
                spex_token_pad(t) == 5 && !spex_tokenizer_add_bos(t) && str_is(spex_token_text(t, 7), "[PAD7]") &&
                spex_token_get_type(t, 7) == SPEX_TOKEN_UNUSED &&
                spex_token_get_type(t, 6) == SPEX_TOKEN_CONTROL &&       /* <|...|> although not special */
                spex_token_get_type(t, 8) == SPEX_TOKEN_USER_DEFINED && spex_gguf_find_key(g, "tokenizer.chat_template") < 0;
    int n = 0;
    int32_t *ids = tokenize(t, "ab a<tool>", 10, false, &n);
    bool enc = ids && n == 3 && ids[0] == 2 && ids[1] == 4 && ids[2] == 8;
    free(ids);
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK(meta);
    CHECK(enc);

    t = convert_load(CONV_HF, src, cfg, 0, "tiny-cfg.gguf", &g);
    CHECK(t);
    spex_str tmpl = {0};
    spex_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL);
    meta = spex_token_bos(t) == 5 && spex_token_eos(t) == 6 && spex_token_pad(t) == 5 && spex_tokenizer_add_bos(t) &&
           str_is(tmpl, "D");
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK(meta);
}

/* A SentencePiece ModelProto written by hand. */
typedef struct pbuf {
    uint8_t b[512];
    size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v) {
    do {
        p->b[p->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}
static void put_bytes(pbuf *p, uint32_t field, const void *d, size_t len) {
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, len);
    memcpy(p->b + p->n, d, len);
    p->n += len;
}
static void put_uint(pbuf *p, uint32_t field, uint64_t v) {
    put_varint(p, (uint64_t)field << 3);
    put_varint(p, v);
}
static void put_piece(pbuf *p, const char *text, float score, int type) {
    pbuf s = {.n = 0};
    put_bytes(&s, 1, text, strlen(text));
    put_varint(&s, 2 << 3 | 5);
    memcpy(s.b + s.n, &score, 4);
    s.n += 4;
    if (type != 1) put_uint(&s, 3, (uint64_t)type);
    put_bytes(p, 1, s.b, s.n);
}
/* model_type 2 unless told; bos_id as given (-1: none, written as SentencePiece does) */
static size_t make_spm(uint8_t *out, int model_type, int64_t bos_id) {
    pbuf p = {.n = 0};
    put_piece(&p, "<unk>", 0, 2);
    put_piece(&p, "<s>", 0, 3);
    put_piece(&p, "</s>", 0, 3);
    put_piece(&p, "\xe2\x96\x81", -1, 1);
    put_piece(&p, "a", -2, 1);
    put_piece(&p, "b", -3, 1);
    put_piece(&p, "\xe2\x96\x81" "a", -0.5f, 1);
    put_piece(&p, "ab", -0.75f, 1);
    pbuf tr = {.n = 0};
    if (model_type) put_uint(&tr, 3, (uint64_t)model_type);
    put_uint(&tr, 40, 0);
    put_uint(&tr, 41, (uint64_t)bos_id);
    put_uint(&tr, 42, 2);
    put_bytes(&p, 2, tr.b, tr.n);
    pbuf nm = {.n = 0};
    put_uint(&nm, 3, 1);
    put_bytes(&p, 3, nm.b, nm.n);
    memcpy(out, p.b, p.n);
    return p.n;
}

TEST(spm_tiny) {
    uint8_t m[512];
    size_t n = make_spm(m, 2, 1);
    spex_gguf *g;
    spex_tokenizer *t = convert_load(CONV_SPM, write_tmp("tiny.model", m, n), NULL, 0, "tiny-spm.gguf", &g);
    CHECK(t);
    int k = 0;
    int32_t *ids = tokenize(t, "a ab", 4, false, &k);
    /* "▁a▁ab": ▁a (-0.5) wins over ab (-0.75) at both places, leaving b */
    bool enc = ids && k == 3 && ids[0] == 6 && ids[1] == 6 && ids[2] == 5;
    free(ids);
    float s7 = 0;
    spex_gguf_value sc = {0};
    if (spex_gguf_get_arr(g, "tokenizer.ggml.scores", &sc, NULL) == SPEX_OK && sc.n == 8)
        memcpy(&s7, (const float *)sc.data + 7, 4);
    bool meta = spex_tokenizer_n_vocab(t) == 8 && spex_token_bos(t) == 1 && spex_tokenizer_add_bos(t) &&
                spex_token_get_type(t, 0) == SPEX_TOKEN_UNKNOWN && s7 == -0.75f;
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK(enc);
    CHECK(meta);

    /* bos_id -1 (as SentencePiece writes "none": a 10-byte varint): no BOS, add_bos off */
    n = make_spm(m, 2, -1);
    t = convert_load(CONV_SPM, write_tmp("nobos.model", m, n), NULL, 0, "nobos.gguf", &g);
    CHECK(t);
    bool nobos = spex_token_bos(t) == SPEX_TOKEN_NONE && !spex_tokenizer_add_bos(t);
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    CHECK(nobos);
}

TEST(spm_errors) {
    uint8_t m[512];
    spex_error err = {0};
    size_t n = make_spm(m, 1, 1);
    CHECK(fails_with(convert(CONV_SPM, write_tmp("uni.model", m, n), NULL, 0, NULL, &err), &err, SPEX_ERR_UNSUPPORTED,
                     "UNIGRAM"));
    n = make_spm(m, 0, 1);   /* model_type absent: SentencePiece's default, Unigram */
    CHECK(fails_with(convert(CONV_SPM, write_tmp("def.model", m, n), NULL, 0, NULL, &err), &err, SPEX_ERR_UNSUPPORTED,
                     "model_type"));
    n = make_spm(m, 2, 8);
    CHECK(fails_with(convert(CONV_SPM, write_tmp("bos.model", m, n), NULL, 0, NULL, &err), &err, SPEX_ERR_RANGE,
                     "bos_id"));
    CHECK(fails_with(convert(CONV_SPM, test_tmp_path("absent.model"), NULL, 0, NULL, &err), &err, SPEX_ERR_IO, "absent.model"));
    CHECK(fails_with(convert(CONV_SPM, test_tmp_dir(), NULL, 0, NULL, &err), &err, SPEX_ERR_IO, "regular"));

    pbuf p = {.n = 0};
    put_uint(&p, 1, 5);   /* pieces must be messages */
    CHECK(fails_with(convert(CONV_SPM, write_tmp("wt.model", p.b, p.n), NULL, 0, NULL, &err), &err, SPEX_ERR_TYPE,
                     "wire type"));
    p.n = 0;
    put_piece(&p, "x", 0, 9);   /* no such piece type */
    CHECK(fails_with(convert(CONV_SPM, write_tmp("ty.model", p.b, p.n), NULL, 0, NULL, &err), &err, SPEX_ERR_RANGE,
                     "type 9"));
    p.n = 0;
    put_piece(&p, "x", NAN, 1);
    CHECK(fails_with(convert(CONV_SPM, write_tmp("nan.model", p.b, p.n), NULL, 0, NULL, &err), &err, SPEX_ERR_FORMAT,
                     "score"));
    static const uint8_t overlong[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK(fails_with(convert(CONV_SPM, write_tmp("ov.model", overlong, sizeof overlong), NULL, 0, NULL, &err), &err,
                     SPEX_ERR_FORMAT, "malformed"));
    static const uint8_t big_len[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 'x'};
    CHECK(fails_with(convert(CONV_SPM, write_tmp("bl.model", big_len, sizeof big_len), NULL, 0, NULL, &err), &err,
                     SPEX_ERR_FORMAT, "malformed"));
    static const uint8_t group[] = {0x0b, 0x0c};   /* wire type 3 (deprecated groups) */
    CHECK(fails_with(convert(CONV_SPM, write_tmp("gr.model", group, sizeof group), NULL, 0, NULL, &err), &err,
                     SPEX_ERR_FORMAT, "malformed"));

    /* every prefix of a valid model: an error, or success for the whole file and for the cut
     * just before the NormalizerSpec (a valid model without one), never a crash */
    n = make_spm(m, 2, 1);
    int ok = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        spex_status st = convert(CONV_SPM, write_tmp("prefix.model", m, cut), NULL, 0, NULL, &err);
        CHECK_MSG(st == SPEX_OK || err.msg[0], "cut %zu: no message", cut);
        ok += st == SPEX_OK;
    }
    CHECK_EQ_INT(ok, 2);
}

/* tokenizer.json variants: tiny_json with one substring replaced. */
static spex_status hf_variant(const char *from, const char *to, const char *cfg_text, spex_error *err) {
    char buf[4096];
    const char *at = strstr(tiny_json, from);
    if (!at) {
        snprintf(err->msg, sizeof err->msg, "test bug: \"%s\" not in tiny_json", from);
        return SPEX_OK;
    }
    size_t pre = (size_t)(at - tiny_json);
    int len = snprintf(buf, sizeof buf, "%.*s%s%s", (int)pre, tiny_json, to, at + strlen(from));
    const char *src = write_tmp("variant.json", buf, (size_t)len);
    const char *cfg = cfg_text ? write_tmp("variant_config.json", cfg_text, strlen(cfg_text)) : NULL;
    memset(err, 0, sizeof *err);
    return convert(CONV_HF, src, cfg, 0, NULL, err);
}

TEST(hf_errors) {
    spex_error err = {0};
    CHECK(fails_with(convert(CONV_HF, test_tmp_path("absent.json"), NULL, 0, NULL, &err), &err, SPEX_ERR_IO, "absent.json"));
    CHECK(fails_with(convert(CONV_HF, write_tmp("trunc.json", tiny_json, 200), NULL, 0, NULL, &err), &err,
                     SPEX_ERR_FORMAT, "not valid JSON"));
    CHECK(fails_with(convert(CONV_HF, write_tmp("empty.json", "", 0), NULL, 0, NULL, &err), &err, SPEX_ERR_FORMAT,
                     "not valid JSON"));
    CHECK(fails_with(convert(CONV_HF, write_tmp("arr.json", "[1,2]", 5), NULL, 0, NULL, &err), &err, SPEX_ERR_TYPE,
                     "top level"));
    CHECK(fails_with(hf_variant("\"vocab\": {\"a\": 0,", "\"vocab\": [0], \"x\": {\"a\": 0,", NULL, &err), &err,
                     SPEX_ERR_TYPE, "model.vocab"));
    CHECK(fails_with(hf_variant("\"a\": 0,", "\"a\": \"zero\",", NULL, &err), &err, SPEX_ERR_RANGE, "vocab[\"a\"]"));
    CHECK(fails_with(hf_variant("\"a\": 0,", "\"a\": -1,", NULL, &err), &err, SPEX_ERR_RANGE, "vocab[\"a\"]"));
    CHECK(fails_with(hf_variant("\"a\": 0,", "\"a\": 0.5,", NULL, &err), &err, SPEX_ERR_RANGE, "vocab[\"a\"]"));
    CHECK(fails_with(hf_variant("\"a\": 0,", "\"a\": 1e12,", NULL, &err), &err, SPEX_ERR_RANGE, "vocab[\"a\"]"));
    CHECK(fails_with(hf_variant("\"b\": 1,", "\"b\": 0,", NULL, &err), &err, SPEX_ERR_FORMAT, "id 0"));
    CHECK(fails_with(hf_variant("\"id\": 8,", "\"id\": \"8\",", NULL, &err), &err, SPEX_ERR_RANGE, "added_tokens[2]"));
    CHECK(fails_with(hf_variant("\"content\": \"<tool>\"", "\"content\": 3", NULL, &err), &err, SPEX_ERR_TYPE,
                     "added_tokens[2].content"));
    CHECK(fails_with(hf_variant("\"a b\"", "7", NULL, &err), &err, SPEX_ERR_TYPE, "merges[0]"));
    CHECK(fails_with(hf_variant("\"a b\"", "\"ab\"", NULL, &err), &err, SPEX_ERR_FORMAT, "merges[0]"));
    CHECK(fails_with(hf_variant("\"merges\": [", "\"merges\": {}, \"x\": [", NULL, &err), &err, SPEX_ERR_TYPE,
                     "model.merges"));
    CHECK(fails_with(hf_variant("\"type\": \"BPE\"", "\"type\": \"WordPiece\"", NULL, &err), &err,
                     SPEX_ERR_UNSUPPORTED, "WordPiece"));
    CHECK(fails_with(hf_variant("\\\\p{N}|", "\\\\p{N}{1,2}|", NULL, &err), &err, SPEX_ERR_UNSUPPORTED, "regex"));
    CHECK(fails_with(hf_variant("\"pre_tokenizer\"", "\"no_pre_tokenizer\"", NULL, &err), &err, SPEX_ERR_UNSUPPORTED,
                     "pre_tokenizer"));
    CHECK(fails_with(hf_variant("{\"type\": \"ByteLevel\", \"use_regex\": false}]}, \"decoder\": {\"type\": \"ByteLevel\"}",
                                 "{\"type\": \"Metaspace\"}]}, \"decoder\": {\"type\": \"Metaspace\"}", "{}", &err),
                     &err, SPEX_ERR_UNSUPPORTED, "byte-level"));
    /* tokenizer_config.json */
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"eos_token\": 5}", &err), &err, SPEX_ERR_TYPE, "eos_token"));
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"pad_token\": \"<pad>\"}", &err), &err, SPEX_ERR_NOT_FOUND,
                     "<pad>"));
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"add_bos_token\": \"yes\"}", &err), &err, SPEX_ERR_TYPE,
                     "add_bos_token"));
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"chat_template\": 1}", &err), &err, SPEX_ERR_TYPE,
                     "chat_template"));
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"chat_template\": [{\"name\": \"x\"}]}", &err), &err,
                     SPEX_ERR_TYPE, "template"));
    CHECK(fails_with(hf_variant("\"a\"", "\"a\"", "{\"eos_token\": ", &err), &err, SPEX_ERR_FORMAT, "not valid JSON"));
    /* the size asked for must cover every id; a NULL writer is refused */
    const char *src = write_tmp("tiny.json", tiny_json, sizeof tiny_json - 1);
    CHECK(fails_with(convert(CONV_HF, src, NULL, 8, NULL, &err), &err, SPEX_ERR_RANGE, "ids up to 8"));
    CHECK_EQ_INT(spex_vocab_from_hf_json(src, NULL, NULL, &err), SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_vocab_from_spm_model(src, NULL, &err), SPEX_ERR_INVALID_ARG);
}

TEST_MAIN()
