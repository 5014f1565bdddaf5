/*
 * nfc.c — Unicode Normalization Form C (UAX #15) for the byte-level BPE front end.
 *
 * The Qwen tokenizer.json declares an NFC normalizer; targets.md §12.1 asks for NFC on by
 * default and switchable (spex_tokenizer_set_nfc). Algorithm: canonical decomposition
 * (tables + Hangul arithmetic), canonical ordering of combining marks (stable by class),
 * canonical composition (a mark composes with the last starter unless blocked). Tables come
 * from nfc_data.c (generated; its Unicode version is spex_nfc_unicode_version).
 *
 * What it is not: NFKC or NFD for callers, or a quick-check with the full NFC_QC property.
 * The only shortcut is exact: text whose bytes are all below 0xCC (code points below U+0300)
 * is already NFC (gen_nfc_data.py asserts it). Invalid UTF-8 bytes pass through unchanged as
 * starters that compose with nothing.
 */
#include "tok/tok.h"
#include "tok/api.h"

#include <stdlib.h>
#include <string.h>

#define INVALID_BYTE 0x80000000u   /* unit = INVALID_BYTE | byte for a byte that is not UTF-8 */

#define S_BASE 0xAC00u
#define L_BASE 0x1100u
#define V_BASE 0x1161u
#define T_BASE 0x11A7u
#define L_COUNT 19u
#define V_COUNT 21u
#define T_COUNT 28u
#define N_COUNT (V_COUNT * T_COUNT)
#define S_COUNT (L_COUNT * N_COUNT)

static uint8_t ccc_of(uint32_t cp) {
    if (cp < 0x300 || (cp & INVALID_BYTE)) return 0;
    size_t lo = 0, hi = spex_nfc_ccc_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const spex_nfc_ccc *r = &spex_nfc_ccc_table[mid];
        if (cp < r->first) hi = mid;
        else if (cp > r->last) lo = mid + 1;
        else return r->ccc;
    }
    return 0;
}

static const spex_nfc_decomp *decomp_of(uint32_t cp) {
    if (cp < 0xC0 || (cp & INVALID_BYTE)) return NULL;
    size_t lo = 0, hi = spex_nfc_decomp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = spex_nfc_decomp_table[mid].cp;
        if (cp < c) hi = mid;
        else if (cp > c) lo = mid + 1;
        else return &spex_nfc_decomp_table[mid];
    }
    return NULL;
}

/* The primary composite of a b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if ((a | b) & INVALID_BYTE) return 0;
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    if (b < 0x300) return 0;
    uint64_t key = (uint64_t)a << 21 | b;
    size_t lo = 0, hi = spex_nfc_comp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t k = spex_nfc_comp_table[mid].pair;
        if (key < k) hi = mid;
        else if (key > k) lo = mid + 1;
        else return spex_nfc_comp_table[mid].cp;
    }
    return 0;
}

typedef struct units {
    uint32_t *p;
    size_t n, cap;
} units;

static bool units_push(units *u, uint32_t c) {
    if (u->n == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 256;
        uint32_t *p = realloc(u->p, cap * sizeof *p);
        if (!p) return false;
        u->p = p;
        u->cap = cap;
    }
    /* canonical ordering: a mark moves before earlier marks of a higher class */
    uint8_t cc = ccc_of(c);
    size_t i = u->n++;
    if (cc)
        while (i > 0) {
            uint8_t prev = ccc_of(u->p[i - 1]);
            if (prev <= cc) break;
            u->p[i] = u->p[i - 1];
            i--;
        }
    u->p[i] = c;
    return true;
}

static bool decompose(units *u, uint32_t cp) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        if (!units_push(u, L_BASE + s / N_COUNT) || !units_push(u, V_BASE + (s % N_COUNT) / T_COUNT)) return false;
        return s % T_COUNT == 0 || units_push(u, T_BASE + s % T_COUNT);
    }
    const spex_nfc_decomp *d = decomp_of(cp);
    if (!d) return units_push(u, cp);
    /* one step per table entry; decompositions nest at most a few levels deep */
    if (!decompose(u, d->a)) return false;
    return d->b == 0 || decompose(u, d->b);
}

bool spex_tok_nfc(const uint8_t *s, size_t n, spex_tok_buf *out, size_t *out_len, bool *same) {
    *out_len = 0;
    *same = true;
    size_t i = 0;
    while (i < n && s[i] < 0xCC) i++;
    if (i == n) return true;
    *same = false;

    units u = {0};
    bool ok = true;
    for (i = 0; ok && i < n;) {
        size_t cl = spex_tok_utf8_len(s + i, n - i);
        uint32_t cp;
        if (cl == 0) {
            cp = INVALID_BYTE | s[i];
            cl = 1;
        } else {
            cp = s[i] & (cl == 1 ? 0x7F : cl == 2 ? 0x1F : cl == 3 ? 0x0F : 0x07);
            for (size_t q = 1; q < cl; q++) cp = cp << 6 | (s[i + q] & 0x3F);
        }
        ok = decompose(&u, cp);
        i += cl;
    }

    /* composition (UAX #15 §1.3): a character joins the last starter unless a character of
     * the same or higher class, or a starter, stands between them */
    if (ok && u.n) {
        size_t starter = 0, w = 1;
        bool has_starter = ccc_of(u.p[0]) == 0;   /* a leading mark has nothing to join */
        int last = 0;                              /* class of the last kept character    */
        for (size_t r = 1; r < u.n; r++) {
            uint32_t c = u.p[r];
            int cc = ccc_of(c);
            uint32_t comp = has_starter ? compose(u.p[starter], c) : 0;
            if (comp && (last < cc || last == 0)) {
                u.p[starter] = comp;
                continue;
            }
            if (cc == 0) {
                starter = w;
                has_starter = true;
            }
            last = cc;
            u.p[w++] = c;
        }
        u.n = w;
    }

    if (ok && u.n > SIZE_MAX / 4) ok = false;
    if (ok) ok = spex_tok_buf_reserve(out, 4 * u.n);
    if (ok) {
        size_t k = 0;
        for (size_t r = 0; r < u.n; r++) {
            if (u.p[r] & INVALID_BYTE) out->p[k++] = (uint8_t)u.p[r];
            else k += spex_tok_utf8_put(u.p[r], out->p + k);
        }
        *out_len = k;
    }
    free(u.p);
    return ok;
}
