/*
 * convert_spm.c — SentencePiece tokenizer.model -> tokenizer.ggml.* keys (model "llama").
 *
 * Format: a protobuf ModelProto (sentencepiece_model.proto). Wire types: 0 varint,
 * 1 fixed64, 2 length-delimited, 5 fixed32 (3/4, the deprecated groups, are rejected).
 *   ModelProto      1: repeated SentencePiece  2: TrainerSpec  3: NormalizerSpec
 *   SentencePiece   1: piece (bytes)  2: score (float)  3: type (enum, default NORMAL = 1)
 *   TrainerSpec     3: model_type (UNIGRAM 1 default, BPE 2, WORD 3, CHAR 4)
 *                   40: unk_id  41: bos_id  42: eos_id  43: pad_id (int32, -1 = none)
 *   NormalizerSpec  3: add_dummy_prefix (bool, default true)
 * Piece types use the numbering of spex_token_type (SentencePiece's, kept by llama.cpp).
 * The keys written are those llama.cpp's converter writes for a Llama vocabulary.
 *
 * What it is not: a SentencePiece implementation or a Unigram converter (a Unigram model
 * is refused: spex tokenizes SPM as BPE only). Every length and id read from the file is
 * bounds-checked: the input is untrusted (fuzz/fuzz_spm_model.c). Needs no cJSON.
 */
#include "gguf/api.h"
#include "tok/convert.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- shared helpers ------------------------------------------------------------------------ */

spex_status spex_convert_read_file(const char *path, const char *what, char **data, size_t *size,
                                   spex_error *err) {
    *data = NULL;
    *size = 0;
    if (!path) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: no path given", what);
    FILE *f = fopen(path, "rb");
    if (!f) return spex_error_set(err, SPEX_ERR_IO, "%s: cannot open %s", what, path);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return spex_error_set(err, SPEX_ERR_IO, "%s: %s is not a regular file", what, path);
    }
    if ((uint64_t)st.st_size > SPEX_CONVERT_MAX_FILE) {
        fclose(f);
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s is %lld bytes, more than the %zu accepted", what,
                              path, (long long)st.st_size, SPEX_CONVERT_MAX_FILE);
    }
    size_t n = (size_t)st.st_size;
    char *p = malloc(n + 1);
    if (!p) {
        fclose(f);
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory reading %s (%zu bytes)", what, path, n);
    }
    size_t got = n ? fread(p, 1, n, f) : 0;
    fclose(f);
    if (got != n) {
        free(p);
        return spex_error_set(err, SPEX_ERR_IO, "%s: short read on %s (%zu of %zu bytes)", what, path, got, n);
    }
    p[n] = 0;
    *data = p;
    *size = n;
    return SPEX_OK;
}

spex_status spex_convert_set_failed(spex_status st, const char *key, spex_error *err) {
    return spex_error_set(err, st, "writing %s: %s", key, spex_status_str(st));
}

/* ---- protobuf reader ----------------------------------------------------------------------- */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

typedef struct pb_field {
    uint32_t num, wt;
    uint64_t val;   /* wire types 0, 1, 5 */
    pb sub;         /* wire type 2        */
} pb_field;

static bool pb_varint(pb *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        if (shift == 63 && (b & 0x7E)) return false;   /* more than 64 bits */
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* 1: a field read; 0: the end of r; -1: malformed (truncated, bad wire type, overlong). */
static int pb_next(pb *r, pb_field *f) {
    if (r->p >= r->end) return 0;
    uint64_t key;
    if (!pb_varint(r, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    f->val = 0;
    f->sub = (pb){NULL, NULL};
    size_t left = (size_t)(r->end - r->p);
    switch (f->wt) {
    case 0: return pb_varint(r, &f->val) ? 1 : -1;
    case 1:
        if (left < 8) return -1;
        memcpy(&f->val, r->p, 8);
        r->p += 8;
        return 1;
    case 5: {
        if (left < 4) return -1;
        uint32_t v32;
        memcpy(&v32, r->p, 4);
        f->val = v32;
        r->p += 4;
        return 1;
    }
    case 2: {
        uint64_t len;
        if (!pb_varint(r, &len) || len > (uint64_t)(r->end - r->p)) return -1;
        f->sub = (pb){r->p, r->p + len};
        r->p += len;
        return 1;
    }
    default: return -1;
    }
}

/* ---- ModelProto -------------------------------------------------------------------------- */

typedef struct spm_model {
    size_t n;             /* pieces */
    spex_str *piece;      /* views into the input buffer */
    float *score;
    int32_t *type;
    int64_t unk, bos, eos, pad;   /* -1: none */
    int64_t model_type;
    bool dummy_prefix;
} spm_model;

#define MALFORMED(what) \
    spex_error_set(err, SPEX_ERR_FORMAT, "%s: malformed protobuf in %s at byte %td", name, what, \
                   (const uint8_t *)r.p - base)

static spex_status parse_piece(pb r, size_t i, spm_model *m, const uint8_t *base, const char *name,
                               spex_error *err) {
    pb_field f;
    int rc;
    bool has_piece = false;
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != 2)
                return spex_error_set(err, SPEX_ERR_TYPE, "%s: piece %zu: field 1 (piece) has wire type %u, expected 2",
                                      name, i, f.wt);
            if (memchr(f.sub.p, 0, (size_t)(f.sub.end - f.sub.p)))
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: piece %zu contains a NUL byte", name, i);
            m->piece[i] = (spex_str){(const char *)f.sub.p, (uint64_t)(f.sub.end - f.sub.p)};
            has_piece = true;
        } else if (f.num == 2) {
            if (f.wt != 5)
                return spex_error_set(err, SPEX_ERR_TYPE, "%s: piece %zu: field 2 (score) has wire type %u, expected 5 (float)",
                                      name, i, f.wt);
            uint32_t v32 = (uint32_t)f.val;
            float s;
            memcpy(&s, &v32, 4);
            if (!isfinite(s))
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: piece %zu has a non-finite score", name, i);
            m->score[i] = s;
        } else if (f.num == 3) {
            if (f.wt != 0)
                return spex_error_set(err, SPEX_ERR_TYPE, "%s: piece %zu: field 3 (type) has wire type %u, expected 0",
                                      name, i, f.wt);
            if (f.val < SPEX_TOKEN_NORMAL || f.val > SPEX_TOKEN_BYTE)
                return spex_error_set(err, SPEX_ERR_RANGE, "%s: piece %zu has type %llu, expected 1..6", name, i,
                                      (unsigned long long)f.val);
            m->type[i] = (int32_t)f.val;
        }
    }
    if (rc < 0) return MALFORMED("a SentencePiece");
    if (!has_piece) return spex_error_set(err, SPEX_ERR_FORMAT, "%s: piece %zu has no text (field 1)", name, i);
    return SPEX_OK;
}

/* A TrainerSpec id: int32 varint, negative (disabled) encoded as a 64-bit two's complement. */
static spex_status trainer_id(const pb_field *f, const char *what, int64_t *out, const char *name,
                              spex_error *err) {
    if (f->wt != 0)
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: TrainerSpec.%s has wire type %u, expected 0", name, what, f->wt);
    int64_t v = (int64_t)f->val;
    if (v < INT32_MIN || v > INT32_MAX)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: TrainerSpec.%s = %lld is not an int32", name, what, (long long)v);
    *out = v < 0 ? -1 : v;
    return SPEX_OK;
}

static spex_status parse_model(const uint8_t *base, size_t size, const char *name, spm_model *m,
                               spex_error *err) {
    /* first pass: validate the top level and count the pieces, so the arrays are sized once */
    pb r = {base, base + size};
    pb_field f;
    int rc;
    size_t n = 0;
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num >= 1 && f.num <= 3 && f.wt != 2)
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: ModelProto field %u has wire type %u, expected 2", name,
                                  f.num, f.wt);
        if (f.num == 1 && ++n > SPEX_CONVERT_MAX_VOCAB)
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: more than %d pieces", name, SPEX_CONVERT_MAX_VOCAB);
    }
    if (rc < 0) return MALFORMED("the ModelProto");
    if (n == 0) return spex_error_set(err, SPEX_ERR_FORMAT, "%s: no pieces: not a SentencePiece model", name);

    m->n = n;
    m->piece = calloc(n, sizeof *m->piece);
    m->score = calloc(n, sizeof *m->score);
    m->type = malloc(n * sizeof *m->type);
    if (!m->piece || !m->score || !m->type)
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory for %zu pieces", name, n);
    for (size_t i = 0; i < n; i++) m->type[i] = SPEX_TOKEN_NORMAL;

    r = (pb){base, base + size};
    size_t i = 0;
    spex_status st;
    while (pb_next(&r, &f) > 0) {
        if (f.num == 1) {
            if ((st = parse_piece(f.sub, i++, m, base, name, err)) != SPEX_OK) return st;
        } else if (f.num == 2) {
            pb s = f.sub;
            pb_field g;
            while ((rc = pb_next(&s, &g)) > 0) {
                st = SPEX_OK;
                if (g.num == 3) {
                    if (g.wt != 0)
                        return spex_error_set(err, SPEX_ERR_TYPE, "%s: TrainerSpec.model_type has wire type %u", name, g.wt);
                    m->model_type = (int64_t)g.val;
                } else if (g.num == 40) st = trainer_id(&g, "unk_id", &m->unk, name, err);
                else if (g.num == 41) st = trainer_id(&g, "bos_id", &m->bos, name, err);
                else if (g.num == 42) st = trainer_id(&g, "eos_id", &m->eos, name, err);
                else if (g.num == 43) st = trainer_id(&g, "pad_id", &m->pad, name, err);
                if (st != SPEX_OK) return st;
            }
            if (rc < 0) {
                r = s;
                return MALFORMED("the TrainerSpec");
            }
        } else if (f.num == 3) {
            pb s = f.sub;
            pb_field g;
            while ((rc = pb_next(&s, &g)) > 0)
                if (g.num == 3 && g.wt == 0) m->dummy_prefix = g.val != 0;
            if (rc < 0) {
                r = s;
                return MALFORMED("the NormalizerSpec");
            }
        }
    }
    if (m->model_type != 2)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "%s: TrainerSpec.model_type = %lld (%s); spex converts SentencePiece BPE models only (2)",
                              name, (long long)m->model_type,
                              m->model_type == 1 ? "UNIGRAM" : m->model_type == 3 ? "WORD" : m->model_type == 4 ? "CHAR" : "unknown");
    const struct {
        const char *what;
        int64_t id;
    } ids[] = {{"unk_id", m->unk}, {"bos_id", m->bos}, {"eos_id", m->eos}, {"pad_id", m->pad}};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        if (ids[k].id >= (int64_t)n)
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: TrainerSpec.%s = %lld, but there are only %zu pieces", name,
                                  ids[k].what, (long long)ids[k].id, n);
    return SPEX_OK;
}

spex_status spex_vocab_from_spm_buffer(const void *data, size_t size, const char *name,
                                       spex_gguf_writer *w, spex_error *err) {
    if (!w || (size && !data)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spm vocab: no writer or no data");
    if (!name) name = "tokenizer.model";
    /* SentencePiece's defaults for fields the file may omit (unigram, unk 0, bos 1, eos 2, no pad) */
    spm_model m = {.unk = 0, .bos = 1, .eos = 2, .pad = -1, .model_type = 1, .dummy_prefix = true};
    spex_status st = parse_model((const uint8_t *)data, size, name, &m, err);
    const char *key = NULL;
#define SET(k, call)                                          \
    do {                                                      \
        key = (k);                                            \
        if (st == SPEX_OK && (st = (call)) != SPEX_OK) goto set_failed; \
    } while (0)
    if (st == SPEX_OK) {
        SET("tokenizer.ggml.model", spex_gguf_writer_set_str(w, key, "llama", 5));
        SET("tokenizer.ggml.tokens", spex_gguf_writer_set_arr_str(w, key, m.piece, m.n));
        SET("tokenizer.ggml.scores", spex_gguf_writer_set_arr(w, key, SPEX_GGUF_F32, m.score, m.n));
        SET("tokenizer.ggml.token_type", spex_gguf_writer_set_arr(w, key, SPEX_GGUF_I32, m.type, m.n));
        /* a disabled id (-1) is written as 0xFFFFFFFF, "none": left out, a loader would take
         * llama.cpp's SPM defaults (unk 0, bos 1, eos 2) instead */
        SET("tokenizer.ggml.unknown_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)m.unk));
        SET("tokenizer.ggml.bos_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)m.bos));
        SET("tokenizer.ggml.eos_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)m.eos));
        if (m.pad >= 0) SET("tokenizer.ggml.padding_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)m.pad));
        /* llama.cpp's Llama vocabularies add BOS, never EOS */
        SET("tokenizer.ggml.add_bos_token", spex_gguf_writer_set_bool(w, key, m.bos >= 0));
        SET("tokenizer.ggml.add_eos_token", spex_gguf_writer_set_bool(w, key, false));
        SET("tokenizer.ggml.add_space_prefix", spex_gguf_writer_set_bool(w, key, m.dummy_prefix));
    }
#undef SET
    goto done;
set_failed:
    st = spex_convert_set_failed(st, key, err);
done:
    free(m.piece);
    free(m.score);
    free(m.type);
    return st;
}

spex_status spex_vocab_from_spm_model(const char *tokenizer_model_path, spex_gguf_writer *w, spex_error *err) {
    char *buf;
    size_t size;
    spex_status st = spex_convert_read_file(tokenizer_model_path, "tokenizer.model", &buf, &size, err);
    if (st != SPEX_OK) return st;
    st = spex_vocab_from_spm_buffer(buf, size, tokenizer_model_path, w, err);
    free(buf);
    return st;
}
