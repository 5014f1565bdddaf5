/*
 * encode.c — text -> token ids (spex_tokenize), for the two vocab kinds of vocab.c.
 *
 * Pipeline (targets.md §12; llama.cpp's llama_tokenize is the behaviour reference):
 *   1. special partition: scanning left to right, a control/unknown token's text (only with
 *      parse_special) or a user-defined token's text (always) is emitted as that token; the
 *      longest one wins at a position. The text between them is a "raw fragment".
 *   2. SPM (model "llama"): a fragment that starts the text or follows a partitioned token
 *      gets one leading space when add_space_prefix is set; spaces become U+2581; the
 *      fragment is split into UTF-8 characters and adjacent symbols are merged by highest
 *      score of the merged piece (leftmost on ties) with a priority queue; symbols left that
 *      are not pieces become <0xNN> byte tokens.
 *   3. BPE (model "gpt2"): NFC (optional), split by the pre-tokenizer regexes (PCRE2, UTF +
 *      UCP; text between matches is kept as words too), each word's bytes mapped to the GPT-2
 *      byte alphabet, then adjacent symbols merged by lowest merge rank (leftmost on ties).
 *
 * Invalid UTF-8 (define, never crash): SPM treats each invalid byte as its own symbol, which
 * is no piece and so becomes its <0xNN> token; BPE keeps invalid bytes in the gaps between
 * regex matches (PCRE2_MATCH_INVALID_UTF) and maps them through the byte alphabet like any
 * byte. Both are lossless: detokenize gives the input bytes back. (llama.cpp instead turns
 * invalid bytes into U+FFFD for BPE and lets a bad lead byte swallow the next bytes for SPM.)
 *
 * Costs: one priority queue over symbol pairs per fragment (SPM) or word (BPE), so a text of
 * n bytes costs O(n log n); hash lookups only (vocab.c), never a scan of the vocabulary.
 * Scratch memory is per call and grows geometrically; the tokenizer itself is not written.
 */
#include "tok/tok.h"
#include "tok/api.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym {
    int32_t prev, next;   /* neighbours in the current segmentation, -1 at the ends */
    uint32_t start, n;    /* bytes of the symbol; n == 0 once merged into its left  */
    int32_t id;           /* token of the symbol, -1 if it is not one               */
} sym;

typedef struct bigram {
    uint64_t key;         /* priority (high half) | left symbol (low half); min first */
    int32_t right;
    uint32_t size;        /* left.n + right.n when queued (stale if it changed)      */
    int32_t id;           /* token of the merged pair                                */
} bigram;

typedef struct word {
    uint32_t off, len;
} word;

typedef struct enc {
    const spex_tokenizer *t;
    int32_t *out;
    int64_t n_max, n;
    spex_tok_buf esc, norm, syms, heap, words, words2, tmp;
    size_t n_heap;
    pcre2_match_data *md[SPEX_TOK_MAX_REGEX];
    spex_error *err;
} enc;

static void emit(enc *e, int32_t id) {
    if (e->n < e->n_max) e->out[e->n] = id;
    e->n++;
}

static spex_status nomem(enc *e) { return spex_error_set(e->err, SPEX_ERR_NOMEM, "tokenize: out of memory"); }

/* Symbol offsets are 32-bit: a raw fragment may hold up to 1 GiB. */
#define MAX_FRAGMENT (UINT32_MAX / 4)

static spex_status too_long(enc *e) {
    return spex_error_set(e->err, SPEX_ERR_RANGE, "tokenize: a text fragment over %u bytes", (unsigned)MAX_FRAGMENT);
}

/* ---- priority queue of bigrams (binary min-heap on key) ---------------------------------- */

static void heap_push(enc *e, bigram b) {
    bigram *h = (bigram *)e->heap.p;
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= b.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static bigram heap_pop(enc *e) {
    bigram *h = (bigram *)e->heap.p;
    bigram top = h[0], last = h[--e->n_heap];
    size_t n = e->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* Symbols and queue for a segment of n bytes: every merge queues at most two pairs, so the
 * queue never holds more than 3n entries. */
static bool reserve_work(enc *e, size_t n) {
    return spex_tok_buf_reserve(&e->syms, n * sizeof(sym)) && spex_tok_buf_reserve(&e->heap, 3 * n * sizeof(bigram));
}

/* Merges queued pairs until none is left (shared by SPM and BPE: only the queueing differs). */
typedef void (*try_pair_fn)(enc *e, const uint8_t *s, int32_t l, int32_t r);

static void run_merges(enc *e, const uint8_t *s, try_pair_fn try_pair) {
    sym *sy = (sym *)e->syms.p;
    while (e->n_heap) {
        bigram b = heap_pop(e);
        int32_t l = (int32_t)(uint32_t)b.key, r = b.right;
        /* stale: a side was merged away, or grew (sizes only grow, so a change shows) */
        if (sy[l].n == 0 || sy[r].n == 0 || sy[l].n + sy[r].n != b.size) continue;
        sy[l].n += sy[r].n;
        sy[l].id = b.id;
        sy[r].n = 0;
        sy[l].next = sy[r].next;
        if (sy[r].next >= 0) sy[sy[r].next].prev = l;
        try_pair(e, s, sy[l].prev, l);
        try_pair(e, s, l, sy[l].next);
    }
}

/* A symbol that is no token: its bytes as byte tokens, else <unk>, else nothing. */
static void emit_bytes(enc *e, const uint8_t *s, uint32_t n) {
    const spex_tokenizer *t = e->t;
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[s[i]];
        if (id < 0) id = t->unk;
        if (id >= 0) emit(e, id);
    }
}

/* ======================================================================== */
/* SentencePiece BPE                                                          */
/* ======================================================================== */

/* Float -> u32 with the same order (negatives flipped), so "highest score" is a min-key. */
static uint32_t score_order(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static void spm_try_pair(enc *e, const uint8_t *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const spex_tokenizer *t = e->t;
    sym *sy = (sym *)e->syms.p;
    uint32_t size = sy[l].n + sy[r].n;
    int32_t id = spex_tok_lookup(t, s + sy[l].start, size);
    /* only ordinary pieces are merge results (as in SentencePiece; llama.cpp would also
     * form control or byte tokens here if their text appeared in the input) */
    if (id < 0 || !(t->attr[id] & SPEX_TOK_ATTR_MERGEABLE)) return;
    uint64_t key = (uint64_t)~score_order(t->score[id]) << 32 | (uint32_t)l;
    heap_push(e, (bigram){key, r, size, id});
}

static spex_status spm_encode(enc *e, const uint8_t *s, size_t n) {
    const spex_tokenizer *t = e->t;
    if (n == 0) return SPEX_OK;
    if (n > MAX_FRAGMENT) return too_long(e);
    if (!reserve_work(e, n)) return nomem(e);
    sym *sy = (sym *)e->syms.p;
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = spex_tok_utf8_len(s + i, n - i);
        if (cl == 0) cl = 1;   /* an invalid byte is a symbol of its own */
        int32_t id = spex_tok_lookup(t, s + i, cl);
        if (id >= 0 && !(t->attr[id] & SPEX_TOK_ATTR_MERGEABLE)) id = -1;
        sy[ns] = (sym){ns - 1, ns + 1, (uint32_t)i, (uint32_t)cl, id};
        ns++;
        i += cl;
    }
    sy[ns - 1].next = -1;
    e->n_heap = 0;
    for (int32_t i = 1; i < ns; i++) spm_try_pair(e, s, i - 1, i);
    run_merges(e, s, spm_try_pair);
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        if (sy[i].id >= 0) emit(e, sy[i].id);
        else emit_bytes(e, s + sy[i].start, sy[i].n);
    }
    return SPEX_OK;
}

/* One raw fragment: optional dummy-prefix space, then every ' ' written as U+2581. */
static spex_status spm_fragment(enc *e, const uint8_t *s, size_t n, bool prefix) {
    if (n > MAX_FRAGMENT) return too_long(e);
    if (!spex_tok_buf_reserve(&e->esc, 3 * n + 3)) return nomem(e);
    uint8_t *d = e->esc.p;
    size_t k = 0;
    if (prefix) {
        memcpy(d, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(d + k, "\xe2\x96\x81", 3);
            k += 3;
        } else d[k++] = s[i];
    }
    return spm_encode(e, d, k);
}

/* ======================================================================== */
/* Byte-level BPE                                                             */
/* ======================================================================== */

static void bpe_try_pair(enc *e, const uint8_t *s, int32_t l, int32_t r) {
    (void)s;
    if (l < 0 || r < 0) return;
    sym *sy = (sym *)e->syms.p;
    uint32_t rank;
    int32_t merged;
    if (!spex_tok_merge_lookup(e->t, sy[l].id, sy[r].id, &rank, &merged)) return;
    heap_push(e, (bigram){(uint64_t)rank << 32 | (uint32_t)l, r, sy[l].n + sy[r].n, merged});
}

static spex_status bpe_word(enc *e, const uint8_t *s, size_t n) {
    const spex_tokenizer *t = e->t;
    if (n == 0) return SPEX_OK;
    if (n == 1) {
        emit_bytes(e, s, 1);
        return SPEX_OK;
    }
    if (n > MAX_FRAGMENT) return too_long(e);
    if (t->ignore_merges) {
        /* llama-bpe: a word that is a token as a whole is taken as is */
        if (!spex_tok_buf_reserve(&e->tmp, 2 * n)) return nomem(e);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += spex_tok_utf8_put(spex_tok_byte_to_cp(s[i]), e->tmp.p + k);
        int32_t id = spex_tok_lookup(t, e->tmp.p, k);
        if (id >= 0) {
            emit(e, id);
            return SPEX_OK;
        }
    }
    if (!reserve_work(e, n)) return nomem(e);
    sym *sy = (sym *)e->syms.p;
    for (size_t i = 0; i < n; i++)
        sy[i] = (sym){(int32_t)i - 1, (int32_t)i + 1, (uint32_t)i, 1, t->byte_tok[s[i]]};
    sy[n - 1].next = -1;
    e->n_heap = 0;
    for (size_t i = 1; i < n; i++) bpe_try_pair(e, s, (int32_t)i - 1, (int32_t)i);
    run_merges(e, s, bpe_try_pair);
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        if (sy[i].id >= 0) emit(e, sy[i].id);
        else emit_bytes(e, s + sy[i].start, sy[i].n);   /* only if the vocab lacks a byte */
    }
    return SPEX_OK;
}

static bool push_word(spex_tok_buf *b, size_t *n, uint32_t off, uint32_t len) {
    if (!spex_tok_buf_reserve(b, (*n + 1) * sizeof(word))) return false;
    ((word *)b->p)[(*n)++] = (word){off, len};
    return true;
}

/* Splits each word of `in` by regex i into matches and the gaps between them. */
static spex_status split_words(enc *e, int i, const uint8_t *s, const word *in, size_t n_in, spex_tok_buf *out,
                               size_t *n_out) {
    pcre2_code *re = e->t->re[i];
    pcre2_match_data *md = e->md[i];
    *n_out = 0;
    for (size_t w = 0; w < n_in; w++) {
        const uint8_t *subj = s + in[w].off;
        size_t len = in[w].len, pos = 0, gap = 0;
        while (pos < len) {
            int rc = pcre2_match(re, subj, len, pos, 0, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return spex_error_set(e->err, SPEX_ERR_RANGE, "tokenize: pre-tokenizer %s regex %d failed: %s",
                                      e->t->pre, i, (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) {   /* an empty match (no shipped regex has one): step over a character */
                size_t cl = spex_tok_utf8_len(subj + ms, len - ms);
                pos = ms + (cl ? cl : 1);
                continue;
            }
            if (ms > gap && !push_word(out, n_out, in[w].off + (uint32_t)gap, (uint32_t)(ms - gap))) return nomem(e);
            if (!push_word(out, n_out, in[w].off + (uint32_t)ms, (uint32_t)(me - ms))) return nomem(e);
            pos = gap = me;
        }
        if (gap < len && !push_word(out, n_out, in[w].off + (uint32_t)gap, (uint32_t)(len - gap))) return nomem(e);
    }
    return SPEX_OK;
}

static spex_status bpe_fragment(enc *e, const uint8_t *s, size_t n) {
    const spex_tokenizer *t = e->t;
    if (n == 0) return SPEX_OK;
    if (n > MAX_FRAGMENT) return too_long(e);
    if (t->nfc) {
        size_t nn;
        bool same;
        if (!spex_tok_nfc(s, n, &e->norm, &nn, &same)) return nomem(e);
        if (!same) {
            s = e->norm.p;
            n = nn;
        }
    }
    size_t n_words = 0, n_next = 0;
    if (!push_word(&e->words, &n_words, 0, (uint32_t)n)) return nomem(e);
    for (int i = 0; i < t->n_re; i++) {
        spex_status st = split_words(e, i, s, (const word *)e->words.p, n_words, &e->words2, &n_next);
        if (st != SPEX_OK) return st;
        spex_tok_buf tmp = e->words;
        e->words = e->words2;
        e->words2 = tmp;
        n_words = n_next;
    }
    const word *w = (const word *)e->words.p;
    for (size_t i = 0; i < n_words; i++) {
        spex_status st = bpe_word(e, s + w[i].off, w[i].len);
        if (st != SPEX_OK) return st;
    }
    return SPEX_OK;
}

/* ======================================================================== */
/* Front: special partition                                                   */
/* ======================================================================== */

/* The longest special token whose text starts s[0..n), or -1. */
static int32_t match_special(const spex_tokenizer *t, const uint8_t *s, size_t n, bool parse_special,
                             uint32_t *len) {
    for (uint32_t k = t->special_first[s[0]]; k < t->special_first[s[0] + 1]; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] != SPEX_TOKEN_USER_DEFINED) continue;
        uint32_t l = spex_tok_text_len(t, id);
        if (l <= n && memcmp(t->text + t->text_off[id], s, l) == 0) {
            *len = l;
            return id;
        }
    }
    return -1;
}

static spex_status raw_fragment(enc *e, const uint8_t *s, size_t n, bool prev_special) {
    if (e->t->kind == SPEX_TOKENIZER_SPM) return spm_fragment(e, s, n, e->t->add_space_prefix && prev_special);
    return bpe_fragment(e, s, n);
}

static spex_status encode(enc *e, const uint8_t *s, size_t n, bool add_special, bool parse_special) {
    const spex_tokenizer *t = e->t;
    if (add_special && t->add_bos) emit(e, t->bos);
    bool prev_special = true;   /* SPM: the first fragment gets the dummy prefix */
    size_t frag = 0;
    bool any_special = t->special_first[256] > 0;
    for (size_t i = 0; any_special && i < n;) {
        uint32_t len;
        int32_t id = match_special(t, s + i, n - i, parse_special, &len);
        if (id < 0) {
            i++;
            continue;
        }
        if (i > frag) {
            spex_status st = raw_fragment(e, s + frag, i - frag, prev_special);
            if (st != SPEX_OK) return st;
        }
        emit(e, id);
        prev_special = true;
        i += len;
        frag = i;
    }
    if (n > frag) {
        spex_status st = raw_fragment(e, s + frag, n - frag, prev_special);
        if (st != SPEX_OK) return st;
    }
    if (add_special && t->add_eos) emit(e, t->eos);
    return SPEX_OK;
}

spex_status spex_tokenize(const spex_tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *out, int n_max, int *n_out, spex_error *err) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (!text && len) || n_max < 0 || (!out && n_max > 0))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_tokenize: bad arguments");
    enc e = {.t = t, .out = out, .n_max = n_max, .err = err};
    spex_status st = SPEX_OK;
    for (int i = 0; i < t->n_re; i++) {
        e.md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL);
        if (!e.md[i]) st = nomem(&e);
    }
    if (st == SPEX_OK) st = encode(&e, (const uint8_t *)(text ? text : ""), len, add_special, parse_special);
    for (int i = 0; i < t->n_re; i++) pcre2_match_data_free(e.md[i]);
    free(e.esc.p);
    free(e.norm.p);
    free(e.syms.p);
    free(e.heap.p);
    free(e.words.p);
    free(e.words2.p);
    free(e.tmp.p);
    if (st != SPEX_OK) return st;
    if (e.n > INT_MAX) return spex_error_set(err, SPEX_ERR_RANGE, "spex_tokenize: more than INT_MAX tokens");
    *n_out = (int)e.n;
    if (e.n > n_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "spex_tokenize: %lld tokens do not fit in %d", (long long)e.n,
                              n_max);
    return SPEX_OK;
}
