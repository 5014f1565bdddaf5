/*
 * fuzz_tok.c — libFuzzer target for the tokenizers (src/tok/): arbitrary text through
 * spex_tokenize, spex_detokenize and the detok stream.
 *
 * The vocabularies are synthetic and built here in memory (no file reads): a SentencePiece
 * one shaped like stories260K (<unk> <s> </s>, 256 <0xNN> byte tokens, U+2581 and scored
 * pieces) and a gpt2 one (the 256-character byte alphabet, a few merges, pre-tokenizer qwen2,
 * a control <|im_start|> and a user-defined <think>). Input byte 0 picks the vocab and the
 * flags (bit 0 vocab, bit 1 add_special, bit 2 parse_special, bit 3 NFC); the rest is text.
 *
 * Checked: no crash or sanitizer report; every id is in the vocabulary; a too-small output
 * gives SPEX_ERR_RANGE with the same count; detokenize(tokenize(s)) == s whenever that is
 * promised (SPM: s holds no literal U+2581; BPE: NFC off); the stream emits valid UTF-8 only.
 *
 * Build needs src/tok in the fuzz link set and -lpcre2-8 (see the Makefile's FUZZ_LIB_SRC).
 * Run: make fuzz && ./build-fuzz/fuzz_tok -max_total_time=20 build-fuzz/corpus-tok fuzz/corpus/tok
 */
#include "spex.h"
#include "gguf/api.h"
#include "tok/tok.h"
#include "tok/api.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a GGUF in memory (header | kv; no tensors) ------------------------------------------- */

typedef struct mbuf {
    uint8_t *p;
    size_t n, cap;
} mbuf;

static void put(mbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) __builtin_trap();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(mbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(mbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(mbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void key(mbuf *b, const char *k, uint32_t type) {
    put_str(b, k, strlen(k));
    put_u32(b, type);
}
static void kv_str(mbuf *b, const char *k, const char *v) {
    key(b, k, SPEX_GGUF_STRING);
    put_str(b, v, strlen(v));
}
static void kv_u32(mbuf *b, const char *k, uint32_t v) {
    key(b, k, SPEX_GGUF_U32);
    put_u32(b, v);
}
static void kv_arr_str(mbuf *b, const char *k, char **s, const size_t *len, uint64_t n) {
    key(b, k, SPEX_GGUF_ARRAY);
    put_u32(b, SPEX_GGUF_STRING);
    put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) put_str(b, s[i], len[i]);
}
static void kv_arr(mbuf *b, const char *k, uint32_t elem, const void *data, uint64_t n) {
    key(b, k, SPEX_GGUF_ARRAY);
    put_u32(b, elem);
    put_u64(b, n);
    put(b, data, (size_t)n * 4);
}

#define MAX_TOK 400

/* Pieces of the SPM vocab (after the 259 fixed tokens), best score first. */
#define W "\xe2\x96\x81" /* U+2581 */
static const char *const spm_pieces[] = {W,        "e",      "t",       "a",    "o",    "n",       W "t",
                                         "he",     W "the",  "in",      W "a",  "an",   W "an",    "d",
                                         W "and",  "s",      W "s",     "aw",   W "saw", W W,      "L",
                                         "il",     "Lil",    "y",       "Lily", W "Lily", ".",     ",",
                                         "\xe6\x97\xa5", "<", "s>", "<s"};
#undef W
/* Merges of the gpt2 vocab ("left right"), in rank order; results are added as tokens. */
#define G "\xc4\xa0" /* U+0120, the space byte */
static const char *const bpe_merges[] = {"t h",   "th e",  G " t",      G "t he", "a n",
                                         "an d",  G " a",  G "a nd",    G " " G,  "i n",
                                         "in g",  "\xc4\x8a \xc4\x8a",
                                         /* the bytes of U+65E5 (E6 97 A5) in the byte alphabet */
                                         "\xc3\xa6 \xc4\xb9", "\xc3\xa6\xc4\xb9 \xc2\xa5"};
#undef G

static spex_tokenizer *build(bool gpt2) {
    char *tok[MAX_TOK];
    size_t len[MAX_TOK];
    float score[MAX_TOK];
    int32_t type[MAX_TOK];
    char *merges[32];
    size_t mlen[32];
    int n = 0, nm = 0;
#define ADD(s, l, ty)                                                                    \
    do {                                                                                 \
        tok[n] = malloc((l) + 1);                                                        \
        memcpy(tok[n], (s), (l));                                                        \
        len[n] = (l);                                                                    \
        type[n] = (ty);                                                                  \
        score[n] = -(float)n;                                                            \
        n++;                                                                             \
    } while (0)
    if (!gpt2) {
        ADD("<unk>", 5, SPEX_TOKEN_UNKNOWN);
        ADD("<s>", 3, SPEX_TOKEN_CONTROL);
        ADD("</s>", 4, SPEX_TOKEN_CONTROL);
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            ADD(s, 6, SPEX_TOKEN_BYTE);
        }
        for (size_t i = 0; i < sizeof spm_pieces / sizeof *spm_pieces; i++)
            ADD(spm_pieces[i], strlen(spm_pieces[i]), SPEX_TOKEN_NORMAL);
    } else {
        for (int b = 0; b < 256; b++) {
            uint8_t s[4];
            size_t l = spex_tok_utf8_put(spex_tok_byte_to_cp((uint8_t)b), s);
            ADD((const char *)s, l, SPEX_TOKEN_NORMAL);
        }
        for (size_t i = 0; i < sizeof bpe_merges / sizeof *bpe_merges; i++) {
            const char *m = bpe_merges[i], *sp = strchr(m, ' ');
            merges[nm] = (char *)m;
            mlen[nm++] = strlen(m);
            char joined[32];
            size_t a = (size_t)(sp - m), b = strlen(sp + 1);
            memcpy(joined, m, a);
            memcpy(joined + a, sp + 1, b);
            ADD(joined, a + b, SPEX_TOKEN_NORMAL);
        }
        ADD("<|im_start|>", 12, SPEX_TOKEN_CONTROL);
        ADD("<|im_end|>", 10, SPEX_TOKEN_CONTROL);
        ADD("<think>", 7, SPEX_TOKEN_USER_DEFINED);
    }
    mbuf b = {0};
    put_u32(&b, 0x46554747u);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, gpt2 ? 6 : 5);
    kv_str(&b, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama");
    kv_arr_str(&b, "tokenizer.ggml.tokens", tok, len, (uint64_t)n);
    kv_arr(&b, "tokenizer.ggml.scores", SPEX_GGUF_F32, score, (uint64_t)n);
    kv_arr(&b, "tokenizer.ggml.token_type", SPEX_GGUF_I32, type, (uint64_t)n);
    if (gpt2) {
        kv_str(&b, "tokenizer.ggml.pre", "qwen2");
        kv_arr_str(&b, "tokenizer.ggml.merges", merges, mlen, (uint64_t)nm);
    } else {
        kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    }
    static const uint8_t zeros[32];
    put(&b, zeros, (32 - b.n % 32) % 32);
    spex_gguf *g = NULL;
    spex_tokenizer *t = NULL;
    spex_error err;
    if (spex_gguf_open_memory(b.p, b.n, gpt2 ? "fuzz-gpt2" : "fuzz-spm", &g, &err) != SPEX_OK) __builtin_trap();
    if (spex_tokenizer_load_gguf(g, &t, &err) != SPEX_OK) __builtin_trap();
    spex_gguf_close(g);
    free(b.p);
    for (int i = 0; i < n; i++) free(tok[i]);
    return t;
#undef ADD
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = spex_tok_utf8_len((const uint8_t *)s + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static spex_tokenizer *toks[2];
    if (!toks[0]) {
        toks[0] = build(false);
        toks[1] = build(true);
    }
    if (size == 0) return 0;
    uint8_t mode = data[0];
    spex_tokenizer *t = toks[mode & 1];
    bool add_special = mode & 2, parse_special = mode & 4, nfc = mode & 8;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    spex_tokenizer_set_nfc(t, nfc);

    int n = 0;
    if (spex_tokenize(t, text, len, add_special, parse_special, NULL, 0, &n, NULL) != (n ? SPEX_ERR_RANGE : SPEX_OK))
        __builtin_trap();
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    int n2 = -1;
    if (spex_tokenize(t, text, len, add_special, parse_special, ids, n, &n2, NULL) != SPEX_OK || n2 != n)
        __builtin_trap();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= spex_tokenizer_n_vocab(t)) __builtin_trap();
    if (n > 1 && (spex_tokenize(t, text, len, add_special, parse_special, ids, n / 2, &n2, NULL) != SPEX_ERR_RANGE ||
                  n2 != n))
        __builtin_trap();
    spex_tokenize(t, text, len, add_special, parse_special, ids, n, &n2, NULL);

    /* round trip: the BOS that add_special put first is not part of the text */
    int skip = add_special && n > 0 && ids[0] == spex_token_bos(t) && spex_tokenizer_add_bos(t);
    unsigned flags = SPEX_DETOK_STRIP_SPACE | (parse_special ? SPEX_DETOK_SPECIAL : 0);
    bool promised = (mode & 1) ? !nfc : memmem(text, len, "\xe2\x96\x81", 3) == NULL;
    size_t blen = 0;
    char *back = malloc(len + 1);
    spex_status s = spex_detokenize(t, ids + skip, (size_t)(n - skip), flags, back, len, &blen, NULL);
    if (promised && (s != SPEX_OK || blen != len || memcmp(back, text, len) != 0)) __builtin_trap();
    free(back);

    spex_detok_stream *st = NULL;
    if (spex_detok_stream_create(t, flags, &st, NULL) != SPEX_OK) __builtin_trap();
    for (int i = 0; i < n; i++) {
        spex_str p;
        if (spex_detok_stream_push(st, ids[i], &p, NULL) != SPEX_OK || !valid_utf8(p.ptr, p.len)) __builtin_trap();
    }
    spex_str f = spex_detok_stream_flush(st);
    if (!valid_utf8(f.ptr, f.len)) __builtin_trap();
    spex_detok_stream_free(st);
    free(ids);
    return 0;
}
