/*
 * tok_fixtures.h — test helpers for tokenizers: vocab-only GGUFs built from the shared
 * tokenizer data, and the llama.cpp .inp/.out test vectors.
 *
 * The GGUFs are written once per process into a temporary directory (removed at exit) and
 * their paths cached, so a test program parses the 11 MB tokenizer.json only once. Linked
 * into every test program: depends on spex.h only (the converters and the GGUF writer).
 */
#ifndef SPEX_TESTS_TOK_FIXTURES_H
#define SPEX_TESTS_TOK_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

/* Each returns the path of the built GGUF, or NULL with the reason in why (data absent
 * or unreadable). */
/* llama2-tokenizer/tokenizer.model (SentencePiece ModelProto) -> model "llama" vocab:
 * pieces, scores and types as stored, unk/bos/eos from the trainer spec, add_bos_token on,
 * add_space_prefix = the normalizer's add_dummy_prefix. */
const char *tok_fixture_llama2_gguf(char *why, size_t why_len);
/* qwen3-tokenizer/tokenizer.json -> model "gpt2", pre "qwen2": vocab, merges ("a b"), added
 * tokens as CONTROL when marked special or shaped <|...|> (llama.cpp's converter rule), else
 * USER_DEFINED; padded with UNUSED "[PADn]" tokens to 151936 as the real GGUFs are;
 * bos/pad = <|endoftext|>, eos = <|im_end|>, add_bos_token off. */
const char *tok_fixture_qwen3_gguf(char *why, size_t why_len);

/* A pair of llama.cpp test-vector files: inputs separated by "\n__ggml_vocab_test__\n",
 * outputs one line of space-prefixed ids per input. */
typedef struct tok_vectors {
    int n;
    char **text;      /* NUL-terminated copies (inputs contain no NUL) */
    size_t *len;
    int32_t **ids;
    int *n_ids;
} tok_vectors;

/* 0 on success; -1 if a file is missing or the two files disagree. */
int tok_vectors_load(const char *inp_path, const char *out_path, tok_vectors *v);
void tok_vectors_free(tok_vectors *v);

/* Whole file into a NUL-terminated malloc'd buffer, or NULL. */
char *tok_read_file(const char *path, size_t *size);

#endif
