/*
 * smoke.c — `spex gen-smoke OUT.gguf`: writes the small synthetic llama model used by the
 * smoke run and by tests that need a model larger than stories260K.
 *
 * What it is: a llama-architecture GGUF shaped like stories260K (same keys, same tensor set,
 * untied output) but with n_embd 256, 4 blocks, 8 query / 4 KV heads (head dim 32), FFN 768,
 * a 512-token SentencePiece-style vocabulary (<unk> <s> </s>, the 256 byte-fallback tokens
 * <0x00>..<0xFF>, then "▁"-prefixed words and pieces with decreasing scores), and F32
 * weights from a fixed pseudo-random sequence, so every build produces the same bytes.
 * What it is not: a trained model: its text is gibberish; it exercises shapes and code paths.
 * Weights are generated tensor by tensor through the writer's fill callback.
 */
#include "spex.h"
#include "gguf/api.h"
#include "quant/api.h"
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 256, N_LAYER = 4, N_HEAD = 8, N_HEAD_KV = 4, N_FF = 768, N_VOCAB = 512, N_CTX = 2048 };
#define HEAD_DIM (N_EMBD / N_HEAD)

/* ---- deterministic weights ---------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float unit(uint64_t *s) { return (float)((double)(splitmix64(s) >> 11) * 0x1.0p-52 - 1.0); }

typedef struct smoke_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[2];
    bool norm;
} smoke_tensor;

static spex_status fill_weights(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    const smoke_tensor *t = &((const smoke_tensor *)ctx)[index];
    uint64_t seed = 0x5eed0000ull + (uint64_t)index;
    float *w = dst;
    uint64_t n = nbytes / sizeof(float);
    /* matrices: variance 1/ne[0] keeps activations O(1) through the layers */
    float scale = t->norm ? 0.1f : 1.7320508f / sqrtf((float)t->ne[0]);
    for (uint64_t i = 0; i < n; i++) w[i] = (t->norm ? 1.0f : 0.0f) + scale * unit(&seed);
    return SPEX_OK;
}

/* ---- vocabulary --------------------------------------------------------- */

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's word-start marker */

static const char *const words[] = {
    "the", "and", "a", "to", "was", "he", "she", "it", "they", "of", "in", "her", "his", "said", "with", "that",
    "day", "big", "cat", "dog", "little", "happy", "one", "play", "saw", "friend", "wanted", "time", "upon",
    "once", "Lily", "Tim", "tree", "ball", "sun", "went", "had", "very", "you", "so", "but", "not", "on", "is",
    "for", "up", "mom", "be", "there", "all", "like", "were", "Ben", "girl", "boy", "park", "red", "fun", "home",
};
static const char pieces[] = "thheinerreonatenndedesorteofitisarsttontngsehaasouioleve"; /* common pairs */

typedef struct vocab {
    char tok[N_VOCAB][32];
    float score[N_VOCAB];
    int32_t type[N_VOCAB];
    int n;
} vocab;

static bool vocab_has(const vocab *v, const char *s) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], s)) return true;
    return false;
}

static void vocab_add(vocab *v, const char *s, int32_t type) {
    if (v->n >= N_VOCAB || vocab_has(v, s)) return;
    snprintf(v->tok[v->n], sizeof v->tok[0], "%s", s);
    v->type[v->n] = type;
    v->score[v->n] = type == 1 ? -(float)(v->n - 259) : 0.0f; /* earlier pieces merge first */
    v->n++;
}

static void build_vocab(vocab *v) {
    enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, BYTE = 6 }; /* llama.cpp's token types */
    char buf[32];
    v->n = 0;
    vocab_add(v, "<unk>", UNKNOWN);
    vocab_add(v, "<s>", CONTROL);
    vocab_add(v, "</s>", CONTROL);
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab_add(v, buf, BYTE);
    }
    vocab_add(v, SP, NORMAL);
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        snprintf(buf, sizeof buf, SP "%s", words[i]);
        vocab_add(v, buf, NORMAL);
    }
    for (char c = 'a'; c <= 'z'; c++) {
        snprintf(buf, sizeof buf, "%c", c);
        vocab_add(v, buf, NORMAL);
        snprintf(buf, sizeof buf, SP "%c", c);
        vocab_add(v, buf, NORMAL);
    }
    for (const char *p = ".,!?'\"-:;()0123456789"; *p; p++) {
        snprintf(buf, sizeof buf, "%c", *p);
        vocab_add(v, buf, NORMAL);
    }
    for (char c = 'A'; c <= 'Z'; c++) {
        snprintf(buf, sizeof buf, "%c", c);
        vocab_add(v, buf, NORMAL);
    }
    for (size_t i = 0; i + 1 < sizeof pieces - 1; i += 2) {
        snprintf(buf, sizeof buf, "%c%c", pieces[i], pieces[i + 1]);
        vocab_add(v, buf, NORMAL);
    }
    /* fill the rest with word-start letter pairs, in a fixed order */
    for (char a = 'a'; a <= 'z' && v->n < N_VOCAB; a++)
        for (char b = 'a'; b <= 'z' && v->n < N_VOCAB; b++) {
            snprintf(buf, sizeof buf, SP "%c%c", a, b);
            vocab_add(v, buf, NORMAL);
        }
}

/* ---- the command -------------------------------------------------------- */

static spex_status set_metadata(spex_gguf_writer *w, const vocab *v) {
    spex_status s = SPEX_OK;
#define TRY(x) do { if (s == SPEX_OK) s = (x); } while (0)
    TRY(spex_gguf_writer_set_str(w, "general.architecture", "llama", 5));
    TRY(spex_gguf_writer_set_str(w, "general.name", "spex-smoke", 10));
    TRY(spex_gguf_writer_set_u32(w, "general.file_type", SPEX_FTYPE_F32));
    TRY(spex_gguf_writer_set_u32(w, "llama.context_length", N_CTX));
    TRY(spex_gguf_writer_set_u32(w, "llama.embedding_length", N_EMBD));
    TRY(spex_gguf_writer_set_u32(w, "llama.feed_forward_length", N_FF));
    TRY(spex_gguf_writer_set_u32(w, "llama.attention.head_count", N_HEAD));
    TRY(spex_gguf_writer_set_u32(w, "llama.attention.head_count_kv", N_HEAD_KV));
    TRY(spex_gguf_writer_set_u32(w, "llama.block_count", N_LAYER));
    TRY(spex_gguf_writer_set_u32(w, "llama.rope.dimension_count", HEAD_DIM));
    TRY(spex_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f));
    TRY(spex_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    TRY(spex_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5));
    spex_str toks[N_VOCAB];
    for (int i = 0; i < v->n; i++) toks[i] = (spex_str){v->tok[i], strlen(v->tok[i])};
    TRY(spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)v->n));
    TRY(spex_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SPEX_GGUF_F32, v->score, (uint64_t)v->n));
    TRY(spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, v->type, (uint64_t)v->n));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
#undef TRY
    return s;
}

static int list_tensors(smoke_tensor *t) {
    int n = 0;
#define T(nd, a, b, is_norm, ...)                                           \
    do {                                                                    \
        snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                 \
        t[n].n_dims = nd;                                                   \
        t[n].ne[0] = a;                                                     \
        t[n].ne[1] = b;                                                     \
        t[n].norm = is_norm;                                                \
        n++;                                                                \
    } while (0)
    T(2, N_EMBD, N_VOCAB, false, "token_embd.weight");
    T(1, N_EMBD, 1, true, "output_norm.weight");
    T(2, N_EMBD, N_VOCAB, false, "output.weight");
    for (int i = 0; i < N_LAYER; i++) {
        T(2, N_EMBD, N_HEAD * HEAD_DIM, false, "blk.%d.attn_q.weight", i);
        T(2, N_EMBD, N_HEAD_KV * HEAD_DIM, false, "blk.%d.attn_k.weight", i);
        T(2, N_EMBD, N_HEAD_KV * HEAD_DIM, false, "blk.%d.attn_v.weight", i);
        T(2, N_HEAD * HEAD_DIM, N_EMBD, false, "blk.%d.attn_output.weight", i);
        T(1, N_EMBD, 1, true, "blk.%d.attn_norm.weight", i);
        T(2, N_EMBD, N_FF, false, "blk.%d.ffn_gate.weight", i);
        T(2, N_FF, N_EMBD, false, "blk.%d.ffn_down.weight", i);
        T(2, N_EMBD, N_FF, false, "blk.%d.ffn_up.weight", i);
        T(1, N_EMBD, 1, true, "blk.%d.ffn_norm.weight", i);
    }
#undef T
    return n;
}

int cmd_gen_smoke(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: spex gen-smoke OUT.gguf\n\n"
                   "Writes a small synthetic llama model (n_embd %d, %d blocks, %d/%d heads, FFN %d, vocab %d,\n"
                   "deterministic pseudo-random F32 weights) for smoke runs and tests.\n",
                   N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "error: gen-smoke: unknown flag '%s'\n", argv[i]);
            return 2;
        }
        if (out) {
            fprintf(stderr, "error: gen-smoke: one OUT path expected\n");
            return 2;
        }
        out = argv[i];
    }
    if (!out) {
        fprintf(stderr, "usage: spex gen-smoke OUT.gguf\n");
        return 2;
    }
    static vocab v;
    build_vocab(&v);
    if (v.n != N_VOCAB) {
        fprintf(stderr, "error: gen-smoke: built %d tokens, expected %d\n", v.n, N_VOCAB);
        return 1;
    }
    static smoke_tensor tensors[3 + 9 * N_LAYER];
    int n_t = list_tensors(tensors);
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    spex_status s = spex_gguf_writer_init(&w, &err);
    if (s == SPEX_OK && (s = set_metadata(w, &v)) != SPEX_OK)
        spex_error_set(&err, s, "gen-smoke: cannot set metadata: %s", spex_status_str(s));
    for (int i = 0; s == SPEX_OK && i < n_t; i++) {
        uint64_t nbytes = (uint64_t)tensors[i].ne[0] * (uint64_t)tensors[i].ne[1] * sizeof(float);
        s = spex_gguf_writer_add_tensor(w, tensors[i].name, SPEX_TYPE_F32, tensors[i].n_dims, tensors[i].ne, NULL,
                                        nbytes, &err);
    }
    if (s == SPEX_OK) {
        spex_gguf_writer_set_fill(w, fill_weights, tensors);
        s = spex_gguf_writer_write(w, out, &err);
    }
    spex_gguf_writer_free(w);
    if (s != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s: llama, embedding %d, %d blocks, %d/%d heads, FFN %d, vocab %d, %d tensors\n", out, N_EMBD,
           N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, n_t);
    return 0;
}
