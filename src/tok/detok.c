/*
 * detok.c — token ids -> bytes: single pieces, whole sequences, and the streaming
 * detokenizer that only ever hands out complete, valid UTF-8.
 *
 * Pieces are rendered once at load (vocab.c build_pieces), so these functions only copy.
 * The dummy-prefix rule (SPEX_DETOK_STRIP_SPACE) inverts encode.c exactly: SentencePiece
 * tokenization adds one space at the start of the text and after every partitioned token
 * (control, unknown, user-defined), so decoding removes one leading space at the same places.
 * llama.cpp strips only the first piece, and keeps the space after a removed BOS.
 *
 * The stream repairs UTF-8 with the "maximal subpart" practice of Unicode §3.9 (U+FFFD per
 * maximal prefix of a valid sequence, or per lone bad byte), the way most decoders do.
 */
#include "tok/tok.h"
#include "tok/api.h"

#include <stdlib.h>
#include <string.h>

static bool strips_space(const spex_tokenizer *t, unsigned flags) {
    return (flags & SPEX_DETOK_STRIP_SPACE) && t->kind == SPEX_TOKENIZER_SPM && t->add_space_prefix;
}

/* Tokens after which SentencePiece tokenization added a space. */
static bool is_partition_token(const spex_tokenizer *t, int32_t id) {
    uint8_t ty = t->type[id];
    return ty == SPEX_TOKEN_CONTROL || ty == SPEX_TOKEN_UNKNOWN || ty == SPEX_TOKEN_USER_DEFINED;
}

static spex_str piece_of(const spex_tokenizer *t, int32_t id, bool special) {
    spex_str s = {t->piece + t->piece_off[id], t->piece_off[id + 1] - t->piece_off[id]};
    if (!special && (t->attr[id] & SPEX_TOK_ATTR_SPECIAL)) s.len = 0;
    return s;
}

spex_status spex_token_to_piece(const spex_tokenizer *t, int32_t id, bool special, spex_str *out,
                                spex_error *err) {
    if (!t || !out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_token_to_piece: bad arguments");
    out->ptr = "";
    out->len = 0;
    if (id < 0 || id >= t->n_vocab)
        return spex_error_set(err, SPEX_ERR_RANGE, "token id %d is outside the vocabulary (%d tokens)", id,
                              t->n_vocab);
    *out = piece_of(t, id, special);
    return SPEX_OK;
}

spex_status spex_detokenize(const spex_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char *out,
                            size_t cap, size_t *n_out, spex_error *err) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (!ids && n) || (!out && cap))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_detokenize: bad arguments");
    bool strip = strips_space(t, flags), at_boundary = true;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab)
            return spex_error_set(err, SPEX_ERR_RANGE, "spex_detokenize: ids[%zu] = %d is outside the vocabulary",
                                  i, id);
        spex_str p = piece_of(t, id, flags & SPEX_DETOK_SPECIAL);
        if (strip && at_boundary && p.len && p.ptr[0] == ' ') {
            p.ptr++;
            p.len--;
        }
        at_boundary = is_partition_token(t, id);
        if (total < cap) memcpy(out + total, p.ptr, p.len <= cap - total ? p.len : cap - total);
        total += p.len;
    }
    *n_out = total;
    if (total > cap)
        return spex_error_set(err, SPEX_ERR_RANGE, "spex_detokenize: %zu bytes do not fit in %zu", total, cap);
    return SPEX_OK;
}

/* ======================================================================== */
/* Streaming                                                                  */
/* ======================================================================== */

struct spex_detok_stream {
    const spex_tokenizer *t;
    unsigned flags;
    bool at_boundary;   /* the next piece may lose a dummy-prefix space        */
    uint8_t pend[4];    /* bytes of an incomplete but so far valid sequence    */
    int n_pend;         /* how many are held                                   */
    int need;           /* total length of the sequence being collected        */
    char *buf;
    size_t cap;
};

spex_status spex_detok_stream_create(const spex_tokenizer *t, unsigned flags, spex_detok_stream **out,
                                     spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_detok_stream_create: out is NULL");
    *out = NULL;
    if (!t) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_detok_stream_create: no tokenizer");
    spex_detok_stream *s = calloc(1, sizeof *s);
    /* worst case: every byte of the longest piece plus 3 held ones becomes U+FFFD (3 bytes) */
    size_t cap = 3 * (t->max_piece + 4);
    char *buf = malloc(cap);
    if (!s || !buf) {
        free(s);
        free(buf);
        return spex_error_set(err, SPEX_ERR_NOMEM, "detok stream: out of memory");
    }
    s->t = t;
    s->flags = flags;
    s->buf = buf;
    s->cap = cap;
    spex_detok_stream_reset(s);
    *out = s;
    return SPEX_OK;
}

void spex_detok_stream_free(spex_detok_stream *s) {
    if (!s) return;
    free(s->buf);
    free(s);
}

void spex_detok_stream_reset(spex_detok_stream *s) {
    s->at_boundary = true;
    s->n_pend = 0;
    s->need = 0;
}

static size_t put_fffd(char *d) {
    memcpy(d, "\xef\xbf\xbd", 3);
    return 3;
}

/* Range allowed for byte k (k >= 1) of a sequence that starts with lead (Table 3-7). */
static bool cont_ok(uint8_t lead, int k, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {
        if (lead == 0xE0) lo = 0xA0;
        else if (lead == 0xED) hi = 0x9F;
        else if (lead == 0xF0) lo = 0x90;
        else if (lead == 0xF4) hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

static int lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Feeds one byte; appends what became complete to d. */
static size_t feed(spex_detok_stream *s, uint8_t b, char *d) {
    size_t k = 0;
    if (s->n_pend) {
        if (cont_ok(s->pend[0], s->n_pend, b)) {
            s->pend[s->n_pend++] = b;
            if (s->n_pend == s->need) {
                memcpy(d, s->pend, (size_t)s->n_pend);
                k = (size_t)s->n_pend;
                s->n_pend = 0;
            }
            return k;
        }
        /* the held prefix can never complete: one U+FFFD for it, then b starts afresh */
        k = put_fffd(d);
        s->n_pend = 0;
    }
    int len = lead_len(b);
    if (len == 1) d[k++] = (char)b;
    else if (len == 0) k += put_fffd(d + k);
    else {
        s->pend[0] = b;
        s->n_pend = 1;
        s->need = len;
    }
    return k;
}

spex_status spex_detok_stream_push(spex_detok_stream *s, int32_t id, spex_str *out, spex_error *err) {
    if (!s || !out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_detok_stream_push: bad arguments");
    out->ptr = s->buf;
    out->len = 0;
    const spex_tokenizer *t = s->t;
    if (id < 0 || id >= t->n_vocab)
        return spex_error_set(err, SPEX_ERR_RANGE, "detok stream: token id %d is outside the vocabulary (%d tokens)",
                              id, t->n_vocab);
    spex_str p = piece_of(t, id, s->flags & SPEX_DETOK_SPECIAL);
    if (strips_space(t, s->flags) && s->at_boundary && p.len && p.ptr[0] == ' ') {
        p.ptr++;
        p.len--;
    }
    s->at_boundary = is_partition_token(t, id);
    size_t k = 0;
    for (uint64_t i = 0; i < p.len; i++) k += feed(s, (uint8_t)p.ptr[i], s->buf + k);
    out->len = k;
    return SPEX_OK;
}

spex_str spex_detok_stream_flush(spex_detok_stream *s) {
    spex_str out = {s->buf, 0};
    if (s->n_pend) {
        out.len = put_fffd(s->buf);
        s->n_pend = 0;
    }
    return out;
}

char *spex_token_text_dup(const spex_tokenizer *tok, int32_t id) {
    spex_str p = {0};
    if (id < 0 || spex_token_to_piece(tok, id, true, &p, NULL) != SPEX_OK) p.len = 0;
    char *t = malloc(p.len + 1);
    if (t) {
        if (p.len) memcpy(t, p.ptr, p.len);
        t[p.len] = 0;
    }
    return t;
}
