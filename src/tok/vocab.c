/*
 * vocab.c — loads a tokenizer from the tokenizer.ggml.* keys of a GGUF file and answers
 * vocabulary queries.
 *
 * Format (as llama.cpp's converters write it; targets.md §12):
 *   tokenizer.ggml.model        string  "llama" (SentencePiece BPE) | "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre          string  gpt2 only: qwen2 | qwen35 | llama-bpe | gpt-2 | default
 *   tokenizer.ggml.tokens       [string]  the vocabulary, id = index
 *   tokenizer.ggml.token_type   [int]     spex_token_type per token (optional: all normal)
 *   tokenizer.ggml.scores       [f32]     SPM merge priorities (required for "llama")
 *   tokenizer.ggml.merges       [string]  gpt2: "left right", rank = index (required)
 *   tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id   u32; 0xFFFFFFFF or -1 = none
 *   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix   bool
 *
 * What it is not: a converter (tests/tok_fixtures.c builds vocab GGUFs from Hugging Face and
 * SentencePiece files). Everything is copied out of the GGUF, so the tokenizer outlives it.
 * Defaults follow llama.cpp: "llama" has bos/eos/unk 1/2/0, add_bos and add_space_prefix on;
 * "gpt2" has no default ids (llama.cpp's BOS = 11 is never used by spex) and add_bos off.
 */
#include "gguf/api.h"
#include "tok/tok.h"
#include "tok/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* UTF-8 and the GPT-2 byte mapping                                          */
/* ======================================================================== */

size_t spex_tok_utf8_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* no overlongs   */
        if (c == 0xED) hi = 0x9F;      /* no surrogates  */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;      /* no overlongs   */
        if (c == 0xF4) hi = 0x8F;      /* <= U+10FFFF    */
    } else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t spex_tok_utf8_put(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Printable bytes 33-126, 161-172, 174-255 stand for themselves; the other 68 bytes take
 * U+0100.. in increasing byte order: 0-32 -> U+0100-U+0120 (so ' ' = U+0120, '\n' = U+010A),
 * 127-160 -> U+0121-U+0142, 173 -> U+0143. */
uint32_t spex_tok_byte_to_cp(uint8_t b) {
    if (b <= 32) return 0x100u + b;
    if (b >= 127 && b <= 160) return 0x121u + (uint32_t)(b - 127);
    if (b == 173) return 0x143u;
    return b;
}

int spex_tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174 ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(cp - 0x121 + 127);
    return cp == 0x143 ? 173 : -1;
}

bool spex_tok_buf_reserve(spex_tok_buf *b, size_t bytes) {
    if (bytes <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    void *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* ======================================================================== */
/* Hash tables                                                               */
/* ======================================================================== */

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)s[i] << (8 * i);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return x;
}

int32_t spex_tok_lookup(const spex_tokenizer *t, const void *s, size_t n) {
    for (uint64_t h = hash_bytes(s, n) & t->map_mask;; h = (h + 1) & t->map_mask) {
        uint32_t slot = t->map[h];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (spex_tok_text_len(t, id) == n && memcmp(t->text + t->text_off[id], s, n) == 0) return id;
    }
}

/* Later duplicates replace earlier ones, as in llama.cpp's token_to_id map. */
static void map_insert(spex_tokenizer *t, int32_t id) {
    const char *s = t->text + t->text_off[id];
    size_t n = spex_tok_text_len(t, id);
    for (uint64_t h = hash_bytes((const uint8_t *)s, n) & t->map_mask;; h = (h + 1) & t->map_mask) {
        uint32_t slot = t->map[h];
        if (slot == 0 || (spex_tok_text_len(t, (int32_t)(slot - 1)) == n &&
                          memcmp(t->text + t->text_off[slot - 1], s, n) == 0)) {
            t->map[h] = (uint32_t)id + 1;
            return;
        }
    }
}

bool spex_tok_merge_lookup(const spex_tokenizer *t, int32_t left, int32_t right, uint32_t *rank,
                           int32_t *merged) {
    if (!t->merge_key || left < 0 || right < 0) return false;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t h = hash_u64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        uint64_t k = t->merge_key[h];
        if (k == UINT64_MAX) return false;
        if (k == key) {
            *rank = t->merge_rank[h];
            *merged = t->merge_id[h];
            return true;
        }
    }
}

/* ======================================================================== */
/* Loading                                                                   */
/* ======================================================================== */

static const char *gguf_name(const spex_gguf *g) {
    const char *p = spex_gguf_path(g);
    return p ? p : "(gguf)";
}

/* Optional bool: absent keeps *out; present with another type is an error. */
static spex_status opt_bool(const spex_gguf *g, const char *key, bool *out, spex_error *err) {
    if (spex_gguf_find_key(g, key) < 0) return SPEX_OK;
    return spex_gguf_get_bool(g, key, out, err);
}

/* Optional token id: absent keeps *out; 0xFFFFFFFF or a negative value means "none". */
static spex_status opt_id(const spex_gguf *g, const char *key, int32_t n_vocab, int32_t *out, spex_error *err) {
    if (spex_gguf_find_key(g, key) < 0) return SPEX_OK;
    int64_t v;
    spex_status s = spex_gguf_get_i64(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v < 0 || v == 0xFFFFFFFFll) {
        *out = SPEX_TOKEN_NONE;
        return SPEX_OK;
    }
    if (v >= n_vocab)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s = %lld is outside the vocabulary (%d tokens)",
                              gguf_name(g), key, (long long)v, n_vocab);
    *out = (int32_t)v;
    return SPEX_OK;
}

/* Element i of a fixed-size integer array as int64 (the caller checked the element type). */
static int64_t arr_int(const spex_gguf_value *a, uint64_t i) {
    const uint8_t *p = a->data;
    switch (a->elem_type) {
    case SPEX_GGUF_U8: return p[i];
    case SPEX_GGUF_I8: return (int8_t)p[i];
    case SPEX_GGUF_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case SPEX_GGUF_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case SPEX_GGUF_U32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case SPEX_GGUF_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case SPEX_GGUF_U64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return v > INT64_MAX ? -1 : (int64_t)v; }
    case SPEX_GGUF_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    default: return -1;
    }
}

static bool is_int_vtype(spex_gguf_vtype t) {
    return t == SPEX_GGUF_U8 || t == SPEX_GGUF_I8 || t == SPEX_GGUF_U16 || t == SPEX_GGUF_I16 ||
           t == SPEX_GGUF_U32 || t == SPEX_GGUF_I32 || t == SPEX_GGUF_U64 || t == SPEX_GGUF_I64;
}

static spex_status load_tokens(spex_tokenizer *t, const spex_gguf *g, spex_error *err) {
    const char *key = "tokenizer.ggml.tokens";
    spex_gguf_value arr;
    spex_status s = spex_gguf_get_arr(g, key, &arr, err);
    if (s != SPEX_OK) return s;
    if (arr.elem_type != SPEX_GGUF_STRING)
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is an array of %s, expected strings", gguf_name(g), key,
                              spex_gguf_vtype_name(arr.elem_type));
    if (arr.n == 0 || arr.n > INT32_MAX - 1)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s has %llu tokens (expected 1 .. 2^31-2)", gguf_name(g),
                              key, (unsigned long long)arr.n);
    int32_t n = (int32_t)arr.n;
    /* the payload bounds the text: strings are n x (8-byte length + bytes) */
    uint64_t total = arr.size + (uint64_t)n;
    if (total > UINT32_MAX)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s holds more than 4 GiB of text", gguf_name(g), key);
    t->n_vocab = n;
    t->text = malloc(total);
    t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
    if (!t->text || !t->text_off) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        spex_str str;
        s = spex_gguf_arr_str(g, &arr, (uint64_t)i, &str, err);
        if (s != SPEX_OK) return s;
        t->text_off[i] = off;
        if (str.len) memcpy(t->text + off, str.ptr, str.len);
        off += (uint32_t)str.len;
        t->text[off++] = 0;
    }
    t->text_off[n] = off;
    return SPEX_OK;
}

static spex_status load_types_scores(spex_tokenizer *t, const spex_gguf *g, spex_error *err) {
    int32_t n = t->n_vocab;
    t->type = malloc((size_t)n);
    t->attr = calloc((size_t)n, 1);
    t->score = calloc((size_t)n, sizeof *t->score);
    if (!t->type || !t->attr || !t->score) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->type, SPEX_TOKEN_NORMAL, (size_t)n);

    const char *key = "tokenizer.ggml.token_type";
    if (spex_gguf_find_key(g, key) >= 0) {
        spex_gguf_value arr;
        spex_status s = spex_gguf_get_arr(g, key, &arr, err);
        if (s != SPEX_OK) return s;
        if (!is_int_vtype(arr.elem_type))
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is an array of %s, expected integers", gguf_name(g),
                                  key, spex_gguf_vtype_name(arr.elem_type));
        if (arr.n != (uint64_t)n)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s has %llu entries for %d tokens", gguf_name(g), key,
                                  (unsigned long long)arr.n, n);
        for (int32_t i = 0; i < n; i++) {
            int64_t v = arr_int(&arr, (uint64_t)i);
            if (v < SPEX_TOKEN_UNDEFINED || v > SPEX_TOKEN_BYTE)
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s[%d] = %lld is not a token type (0..6)",
                                      gguf_name(g), key, i, (long long)v);
            t->type[i] = (uint8_t)v;
        }
    }

    key = "tokenizer.ggml.scores";
    if (spex_gguf_find_key(g, key) >= 0 || t->kind == SPEX_TOKENIZER_SPM) {
        spex_gguf_value arr;
        spex_status s = spex_gguf_get_arr(g, key, &arr, err);
        if (s == SPEX_ERR_NOT_FOUND)
            return spex_error_set(err, s, "%s: %s is required for a SentencePiece (llama) vocabulary",
                                  gguf_name(g), key);
        if (s != SPEX_OK) return s;
        if (arr.elem_type != SPEX_GGUF_F32)
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is an array of %s, expected f32", gguf_name(g), key,
                                  spex_gguf_vtype_name(arr.elem_type));
        if (arr.n != (uint64_t)n)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s has %llu entries for %d tokens", gguf_name(g), key,
                                  (unsigned long long)arr.n, n);
        memcpy(t->score, arr.data, (size_t)n * sizeof(float));
    }
    return SPEX_OK;
}

static spex_status build_map(spex_tokenizer *t, spex_error *err) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)t->n_vocab) cap *= 2;
    t->map = calloc(cap, sizeof *t->map);
    if (!t->map) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    t->map_mask = (uint32_t)(cap - 1);
    for (int32_t i = 0; i < t->n_vocab; i++) map_insert(t, i);
    return SPEX_OK;
}

static spex_status load_merges(spex_tokenizer *t, const spex_gguf *g, spex_error *err) {
    const char *key = "tokenizer.ggml.merges";
    spex_gguf_value arr;
    spex_status s = spex_gguf_get_arr(g, key, &arr, err);
    if (s == SPEX_ERR_NOT_FOUND)
        return spex_error_set(err, s, "%s: %s is required for a gpt2 (byte-level BPE) vocabulary", gguf_name(g),
                              key);
    if (s != SPEX_OK) return s;
    if (arr.elem_type != SPEX_GGUF_STRING)
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is an array of %s, expected strings", gguf_name(g), key,
                              spex_gguf_vtype_name(arr.elem_type));
    if (arr.n > UINT32_MAX / 4)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s has too many entries", gguf_name(g), key);
    uint64_t cap = 16;
    while (cap < 2 * arr.n) cap *= 2;
    t->merge_key = malloc(cap * sizeof *t->merge_key);
    t->merge_rank = malloc(cap * sizeof *t->merge_rank);
    t->merge_id = malloc(cap * sizeof *t->merge_id);
    if (!t->merge_key || !t->merge_rank || !t->merge_id)
        return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->merge_key, 0xFF, cap * sizeof *t->merge_key);
    t->merge_mask = cap - 1;

    /* Each merge "A B" joins two tokens into the token AB. Merges naming a piece that is not
     * in the vocabulary can never apply and are skipped; a space is searched from the second
     * byte, as in llama.cpp, so that a left part starting with a space still splits. */
    uint8_t *joined = NULL;
    size_t joined_cap = 0;
    for (uint64_t r = 0; r < arr.n; r++) {
        spex_str m;
        s = spex_gguf_arr_str(g, &arr, r, &m, err);
        if (s != SPEX_OK) {
            free(joined);
            return s;
        }
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            free(joined);
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s[%llu] = \"%.*s\" is not \"left right\"",
                                  gguf_name(g), key, (unsigned long long)r, (int)(m.len > 64 ? 64 : m.len), m.ptr);
        }
        size_t nl = (size_t)(sp - m.ptr), nr = m.len - nl - 1;
        int32_t left = spex_tok_lookup(t, m.ptr, nl);
        int32_t right = spex_tok_lookup(t, sp + 1, nr);
        if (left < 0 || right < 0) continue;
        if (joined_cap < nl + nr) {
            free(joined);
            joined_cap = 2 * (nl + nr);
            joined = malloc(joined_cap);
            if (!joined) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
        }
        memcpy(joined, m.ptr, nl);
        memcpy(joined + nl, sp + 1, nr);
        int32_t merged = spex_tok_lookup(t, joined, nl + nr);
        if (merged < 0) continue;
        uint64_t k = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        for (uint64_t h = hash_u64(k) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
            if (t->merge_key[h] == k) break;   /* a duplicate keeps its first (best) rank */
            if (t->merge_key[h] == UINT64_MAX) {
                t->merge_key[h] = k;
                t->merge_rank[h] = (uint32_t)r;
                t->merge_id[h] = merged;
                t->n_merges++;
                break;
            }
        }
    }
    free(joined);
    return SPEX_OK;
}

/* The rendered bytes of every token (detok.c only copies them). */
static spex_status build_pieces(spex_tokenizer *t, spex_error *err) {
    int32_t n = t->n_vocab;
    /* a byte-level code point (2 bytes) decodes to at most 2 bytes; other text is copied */
    uint64_t total = t->text_off[n];
    t->piece = malloc(total + 1);
    t->piece_off = malloc(((size_t)n + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t off = 0;
    t->max_piece = 0;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)t->text + t->text_off[i];
        size_t len = spex_tok_text_len(t, i);
        uint8_t *dst = (uint8_t *)t->piece + off;
        size_t k = 0;
        switch (t->type[i]) {
        case SPEX_TOKEN_UNUSED: break;
        case SPEX_TOKEN_CONTROL:
        case SPEX_TOKEN_UNKNOWN:
        case SPEX_TOKEN_USER_DEFINED:
            memcpy(dst, s, len);
            k = len;
            break;
        case SPEX_TOKEN_BYTE: {
            /* "<0xNN>" is the byte NN; anything else is shown as written */
            unsigned v;
            char tail;
            if (len == 6 && sscanf((const char *)s, "<0x%2X%c", &v, &tail) == 2 && tail == '>') {
                dst[0] = (uint8_t)v;
                k = 1;
            } else {
                memcpy(dst, s, len);
                k = len;
            }
            break;
        }
        default:   /* normal and undefined */
            if (t->kind == SPEX_TOKENIZER_SPM) {
                for (size_t j = 0; j < len;) {
                    if (j + 3 <= len && s[j] == 0xE2 && s[j + 1] == 0x96 && s[j + 2] == 0x81) {
                        dst[k++] = ' ';
                        j += 3;
                    } else dst[k++] = s[j++];
                }
            } else {
                for (size_t j = 0; j < len;) {
                    size_t cl = spex_tok_utf8_len(s + j, len - j);
                    if (cl == 0) {   /* not UTF-8: copy the byte */
                        dst[k++] = s[j++];
                        continue;
                    }
                    uint32_t cp = s[j] & (cl == 1 ? 0x7F : cl == 2 ? 0x1F : cl == 3 ? 0x0F : 0x07);
                    for (size_t q = 1; q < cl; q++) cp = cp << 6 | (s[j + q] & 0x3F);
                    int b = spex_tok_cp_to_byte(cp);
                    if (b >= 0) dst[k++] = (uint8_t)b;
                    else {   /* outside the byte alphabet: keep the character itself */
                        memcpy(dst + k, s + j, cl);
                        k += cl;
                    }
                    j += cl;
                }
            }
            break;
        }
        t->piece_off[i] = off;
        off += (uint32_t)k;
        if (k > t->max_piece) t->max_piece = k;
    }
    t->piece_off[n] = off;
    return SPEX_OK;
}

typedef struct special_key {
    uint8_t first;
    uint32_t len;
    int32_t id;
} special_key;

/* By first byte, then longest first, then id: the scan in encode.c tries them in this order. */
static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool is_partition_type(uint8_t ty) {
    return ty == SPEX_TOKEN_CONTROL || ty == SPEX_TOKEN_UNKNOWN || ty == SPEX_TOKEN_USER_DEFINED;
}

static spex_status build_specials(spex_tokenizer *t, spex_error *err) {
    int32_t n_sp = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_partition_type(t->type[i]) && spex_tok_text_len(t, i) > 0) n_sp++;
    special_key *keys = malloc(((size_t)n_sp + 1) * sizeof *keys);
    t->special = malloc(((size_t)n_sp + 1) * sizeof *t->special);
    if (!keys || !t->special) {
        free(keys);
        return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    }
    int32_t k = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_partition_type(t->type[i]) && spex_tok_text_len(t, i) > 0)
            keys[k++] = (special_key){(uint8_t)t->text[t->text_off[i]], spex_tok_text_len(t, i), i};
    qsort(keys, (size_t)n_sp, sizeof *keys, cmp_special);
    int32_t j = 0;
    for (unsigned b = 0; b < 256; b++) {
        t->special_first[b] = (uint32_t)j;
        while (j < n_sp && keys[j].first == b) j++;
    }
    t->special_first[256] = (uint32_t)n_sp;
    for (int32_t i = 0; i < n_sp; i++) t->special[i] = keys[i].id;
    free(keys);
    return SPEX_OK;
}

/* The token with this text, if it is not an ordinary piece. */
static int32_t find_special(const spex_tokenizer *t, const char *text) {
    int32_t id = spex_tok_lookup(t, text, strlen(text));
    if (id < 0) return -1;
    uint8_t ty = t->type[id];
    return ty == SPEX_TOKEN_CONTROL || ty == SPEX_TOKEN_USER_DEFINED ? id : -1;
}

static void mark_eog(spex_tokenizer *t) {
    static const char *const eog_texts[] = {"<|endoftext|>", "<|im_end|>",   "<|fim_pad|>",    "<|repo_name|>",
                                            "<|file_sep|>",  "<|eot_id|>",   "<|end_of_text|>", "<end_of_turn>"};
    if (t->eot == SPEX_TOKEN_NONE) {
        static const char *const eot_texts[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>"};
        for (size_t i = 0; i < sizeof eot_texts / sizeof *eot_texts && t->eot < 0; i++)
            t->eot = find_special(t, eot_texts[i]);
    }
    if (t->eos >= 0) t->attr[t->eos] |= SPEX_TOK_ATTR_EOG;
    if (t->eot >= 0) t->attr[t->eot] |= SPEX_TOK_ATTR_EOG;
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        int32_t id = spex_tok_lookup(t, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && t->type[id] == SPEX_TOKEN_CONTROL) t->attr[id] |= SPEX_TOK_ATTR_EOG;
    }
}

/* Regexes of the supported pre-tokenizers (targets.md §12.1 and llama.cpp's list). */
typedef struct pre_def {
    const char *name;
    bool ignore_merges;
    const char *re[SPEX_TOK_MAX_REGEX];
} pre_def;

static const pre_def pre_defs[] = {
    {"qwen2", false,
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
      "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"qwen35", false,
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
      "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"llama-bpe", true,
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"gpt-2", false, {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
    {"default", false,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
      "\\p{N}+", "[0-9][0-9][0-9]"}},
};

static spex_status setup_pre(spex_tokenizer *t, const spex_gguf *g, spex_error *err) {
    const char *key = "tokenizer.ggml.pre";
    char name[32] = "default";
    if (spex_gguf_find_key(g, key) >= 0) {
        spex_str s;
        spex_status st = spex_gguf_get_str(g, key, &s, err);
        if (st != SPEX_OK) return st;
        if (s.len >= sizeof name)
            return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: %s = \"%.40s...\" is not a known pre-tokenizer",
                                  gguf_name(g), key, s.ptr);
        memcpy(name, s.ptr, s.len);
        name[s.len] = 0;
    }
    const pre_def *def = NULL;
    for (size_t i = 0; i < sizeof pre_defs / sizeof *pre_defs; i++)
        if (strcmp(name, pre_defs[i].name) == 0) def = &pre_defs[i];
    if (!def)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "%s: %s = \"%s\" is not supported (spex knows qwen2, qwen35, llama-bpe, gpt-2, default)",
                              gguf_name(g), key, name);
    snprintf(t->pre, sizeof t->pre, "%s", name);
    t->ignore_merges = def->ignore_merges;
    for (int i = 0; i < SPEX_TOK_MAX_REGEX && def->re[i]; i++) {
        int code;
        PCRE2_SIZE at;
        /* MATCH_INVALID_UTF: invalid bytes never match, so they fall into the gaps between
         * matches (which encode.c keeps as words) instead of making pcre2_match fail. */
        t->re[i] = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
        if (!t->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer %s regex %d: %s at %zu", name,
                                  i, (const char *)msg, (size_t)at);
        }
        t->n_re = i + 1;
        /* JIT is an optimisation only: without it pcre2_match interprets */
        (void)pcre2_jit_compile(t->re[i], PCRE2_JIT_COMPLETE);
    }
    return SPEX_OK;
}

static spex_status load(spex_tokenizer *t, const spex_gguf *g, spex_error *err) {
    const char *key = "tokenizer.ggml.model";
    spex_str model;
    spex_status s = spex_gguf_get_str(g, key, &model, err);
    if (s == SPEX_ERR_NOT_FOUND)
        return spex_error_set(err, s, "%s: %s not found: the file carries no tokenizer", gguf_name(g), key);
    if (s != SPEX_OK) return s;
    if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) t->kind = SPEX_TOKENIZER_SPM;
    else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) t->kind = SPEX_TOKENIZER_BPE;
    else
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "%s: %s = \"%.*s\" is not supported (spex reads \"llama\" and \"gpt2\")", gguf_name(g),
                              key, (int)(model.len > 40 ? 40 : model.len), model.ptr);

    if ((s = load_tokens(t, g, err)) != SPEX_OK) return s;
    if ((s = load_types_scores(t, g, err)) != SPEX_OK) return s;
    if ((s = build_map(t, err)) != SPEX_OK) return s;

    int32_t n = t->n_vocab;
    if (t->kind == SPEX_TOKENIZER_SPM) {
        t->bos = n > 1 ? 1 : SPEX_TOKEN_NONE;
        t->eos = n > 2 ? 2 : SPEX_TOKEN_NONE;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    }
    static const struct { const char *key; size_t off; } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(spex_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(spex_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(spex_tokenizer, eot)},
        {"tokenizer.ggml.unknown_token_id", offsetof(spex_tokenizer, unk)},
        {"tokenizer.ggml.padding_token_id", offsetof(spex_tokenizer, pad)},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if ((s = opt_id(g, ids[i].key, n, (int32_t *)((char *)t + ids[i].off), err)) != SPEX_OK) return s;
    if ((s = opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) != SPEX_OK) return s;
    if ((s = opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) != SPEX_OK) return s;
    if ((s = opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)) != SPEX_OK) return s;
    if (t->bos < 0) t->add_bos = false;   /* nothing to add */
    if (t->eos < 0) t->add_eos = false;

    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if (ty == SPEX_TOKEN_NORMAL || ty == SPEX_TOKEN_UNDEFINED || ty == SPEX_TOKEN_USER_DEFINED)
            t->attr[i] |= SPEX_TOK_ATTR_MERGEABLE;
        if (ty == SPEX_TOKEN_CONTROL || ty == SPEX_TOKEN_UNKNOWN) t->attr[i] |= SPEX_TOK_ATTR_SPECIAL;
    }

    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t len;
        if (t->kind == SPEX_TOKENIZER_SPM) len = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        else len = spex_tok_utf8_put(spex_tok_byte_to_cp((uint8_t)b), (uint8_t *)buf);
        t->byte_tok[b] = spex_tok_lookup(t, buf, len);
    }

    if (t->kind == SPEX_TOKENIZER_BPE) {
        if ((s = setup_pre(t, g, err)) != SPEX_OK) return s;
        if ((s = load_merges(t, g, err)) != SPEX_OK) return s;
    }
    if ((s = build_pieces(t, err)) != SPEX_OK) return s;
    if ((s = build_specials(t, err)) != SPEX_OK) return s;
    mark_eog(t);
    return SPEX_OK;
}

spex_status spex_tokenizer_load_gguf(const spex_gguf *g, spex_tokenizer **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_tokenizer_load_gguf: out is NULL");
    *out = NULL;
    if (!g) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_tokenizer_load_gguf: no GGUF");
    spex_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return spex_error_set(err, SPEX_ERR_NOMEM, "tokenizer: out of memory");
    t->bos = t->eos = t->eot = t->unk = t->pad = SPEX_TOKEN_NONE;
    t->nfc = true;
    spex_status s = load(t, g, err);
    if (s != SPEX_OK) {
        spex_tokenizer_free(t);
        return s;
    }
    *out = t;
    return SPEX_OK;
}

void spex_tokenizer_free(spex_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->score);
    free(t->type);
    free(t->attr);
    free(t->map);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_id);
    free(t->special);
    free(t);
}

/* ======================================================================== */
/* Queries                                                                   */
/* ======================================================================== */

void spex_tokenizer_set_nfc(spex_tokenizer *t, bool on) { t->nfc = on; }
spex_tokenizer_kind spex_tokenizer_get_kind(const spex_tokenizer *t) { return t->kind; }
const char *spex_tokenizer_pre(const spex_tokenizer *t) { return t->pre; }
int32_t spex_tokenizer_n_vocab(const spex_tokenizer *t) { return t->n_vocab; }
bool spex_tokenizer_add_bos(const spex_tokenizer *t) { return t->add_bos; }
bool spex_tokenizer_add_eos(const spex_tokenizer *t) { return t->add_eos; }
int32_t spex_token_bos(const spex_tokenizer *t) { return t->bos; }
int32_t spex_token_eos(const spex_tokenizer *t) { return t->eos; }
int32_t spex_token_eot(const spex_tokenizer *t) { return t->eot; }
int32_t spex_token_unk(const spex_tokenizer *t) { return t->unk; }
int32_t spex_token_pad(const spex_tokenizer *t) { return t->pad; }
size_t spex_tokenizer_max_piece(const spex_tokenizer *t) { return t->max_piece; }

spex_token_type spex_token_get_type(const spex_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? (spex_token_type)t->type[id] : SPEX_TOKEN_UNDEFINED;
}

bool spex_token_is_control(const spex_tokenizer *t, int32_t id) {
    return spex_token_get_type(t, id) == SPEX_TOKEN_CONTROL;
}

bool spex_token_is_eog(const spex_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->attr[id] & SPEX_TOK_ATTR_EOG);
}

int32_t spex_token_find(const spex_tokenizer *t, const char *text, size_t len) {
    if (!text && len) return SPEX_TOKEN_NONE;
    return spex_tok_lookup(t, text ? text : "", len);
}

spex_str spex_token_text(const spex_tokenizer *t, int32_t id) {
    spex_str s = {NULL, 0};
    if (id >= 0 && id < t->n_vocab) {
        s.ptr = t->text + t->text_off[id];
        s.len = spex_tok_text_len(t, id);
    }
    return s;
}
