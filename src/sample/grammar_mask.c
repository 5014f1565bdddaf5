/*
 * sample/grammar_mask.c — the token-level side of sample/grammar.h: a vocabulary's pieces in a
 * byte trie, and the mask of tokens a grammar state accepts.
 *
 * The mask walks the trie depth first, carrying the set of stacks (and a partial UTF-8
 * character) per depth: a byte that completes a character advances the stacks, one that leaves
 * a character partial only checks that some stack's top set meets the code points it can still
 * become, and a subtree is cut at the first byte no stack accepts. Tokens sharing a prefix share
 * that prefix's work, so the cost is the number of trie nodes reached (at most the vocabulary's
 * total bytes, usually far fewer) times the stacks per state, with no per-token work beyond
 * setting a bit. A state's mask is cached in its grammar under the hash of (stack ids, partial
 * character): interning makes equal states have equal ids, so a repeated state costs a hash and
 * a copy of n_vocab/8 bytes.
 * What it is not: sampling (applying the mask to logits is the sampler's job).
 */
#include "sample/grammar_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 512u /* masks kept per grammar: 512 x 19 KB for a 152k vocabulary */

struct spex_grammar_vocab {
    int32_t n_tokens;
    uint64_t serial; /* tells caches apart from a vocabulary freed and another built there */
    /* trie: node 0 is the root; children in a sibling list */
    uint32_t *first_child, *next_sibling, *first_tok;
    uint8_t *byte;
    uint32_t n_nodes, cap_nodes, max_depth;
    uint32_t *next_tok; /* per token: the next token ending at the same node (UINT32_MAX: none) */
    int32_t *eog;
    uint32_t n_eog;
};

static atomic_uint_fast64_t vocab_serial;

static bool trie_grow(spex_grammar_vocab *v) {
    uint32_t cap = v->cap_nodes ? v->cap_nodes * 2 : 1024;
    uint32_t *a = realloc(v->first_child, cap * sizeof *a);
    if (a) v->first_child = a;
    uint32_t *b = realloc(v->next_sibling, cap * sizeof *b);
    if (b) v->next_sibling = b;
    uint32_t *c = realloc(v->first_tok, cap * sizeof *c);
    if (c) v->first_tok = c;
    uint8_t *d = realloc(v->byte, cap);
    if (d) v->byte = d;
    if (!a || !b || !c || !d) return false;
    v->cap_nodes = cap;
    return true;
}

static uint32_t trie_child(spex_grammar_vocab *v, uint32_t node, uint8_t b) {
    for (uint32_t c = v->first_child[node]; c != UINT32_MAX; c = v->next_sibling[c])
        if (v->byte[c] == b) return c;
    if (v->n_nodes == v->cap_nodes && !trie_grow(v)) return UINT32_MAX;
    uint32_t c = v->n_nodes++;
    v->byte[c] = b;
    v->first_child[c] = UINT32_MAX;
    v->first_tok[c] = UINT32_MAX;
    v->next_sibling[c] = v->first_child[node];
    v->first_child[node] = c;
    return c;
}

spex_status spex_grammar_vocab_build(const char *const *pieces, const uint32_t *lens, const uint8_t *flags,
                                     int32_t n_tokens, spex_grammar_vocab **out, spex_error *err) {
    if (!out || n_tokens < 0 || (n_tokens && (!pieces || !lens)))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "grammar vocab: bad arguments");
    *out = NULL;
    spex_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v || !trie_grow(v)) goto nomem;
    v->n_tokens = n_tokens;
    v->serial = atomic_fetch_add(&vocab_serial, 1) + 1;
    v->next_tok = malloc(((size_t)n_tokens + 1) * sizeof *v->next_tok);
    v->eog = malloc(((size_t)n_tokens + 1) * sizeof *v->eog);
    if (!v->next_tok || !v->eog) goto nomem;
    v->n_nodes = 1;
    v->first_child[0] = v->first_tok[0] = v->next_sibling[0] = UINT32_MAX;
    for (int32_t t = 0; t < n_tokens; t++) {
        uint8_t f = flags ? flags[t] : 0;
        v->next_tok[t] = UINT32_MAX;
        if (f & SPEX_GRAMMAR_TOKEN_EOG) {
            v->eog[v->n_eog++] = t;
            continue;
        }
        if ((f & SPEX_GRAMMAR_TOKEN_CONTROL) || lens[t] == 0 || !pieces[t]) continue;
        uint32_t node = 0;
        for (uint32_t i = 0; i < lens[t] && node != UINT32_MAX; i++) node = trie_child(v, node, (uint8_t)pieces[t][i]);
        if (node == UINT32_MAX) goto nomem;
        if (lens[t] > v->max_depth) v->max_depth = lens[t];
        v->next_tok[t] = v->first_tok[node];
        v->first_tok[node] = (uint32_t)t;
    }
    *out = v;
    return SPEX_OK;
nomem:
    spex_grammar_vocab_free(v);
    return spex_error_set(err, SPEX_ERR_NOMEM, "grammar vocab: out of memory");
}

void spex_grammar_vocab_free(spex_grammar_vocab *v) {
    if (!v) return;
    free(v->first_child);
    free(v->next_sibling);
    free(v->first_tok);
    free(v->byte);
    free(v->next_tok);
    free(v->eog);
    free(v);
}

int32_t spex_grammar_vocab_n(const spex_grammar_vocab *v) { return v->n_tokens; }
size_t spex_grammar_mask_words(const spex_grammar_vocab *v) { return ((size_t)v->n_tokens + 31) / 32; }

/* ---- the cache ------------------------------------------------------------- */

static uint64_t state_hash(const spex_grammar_state *st) {
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)st->part.need << 40 | (uint64_t)st->part.have << 32 | st->part.acc);
    for (uint32_t i = 0; i < st->n; i++) h = (h ^ st->ids[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static bool key_equal(const g_cache_entry *e, const spex_grammar_state *st) {
    return e->n_key == st->n + 3 && memcmp(e->key, st->ids, st->n * sizeof *st->ids) == 0 &&
           e->key[st->n] == st->part.need && e->key[st->n + 1] == st->part.have && e->key[st->n + 2] == st->part.acc;
}

static void cache_clear(spex_grammar *g) {
    for (uint32_t i = 0; i < g->cache_cap; i++) {
        free(g->cache[i].key);
        free(g->cache[i].mask);
        g->cache[i] = (g_cache_entry){0};
    }
    g->cache_n = 0;
}

/* The slot for st: its entry when cached, else the empty slot where it would go. */
static g_cache_entry *cache_slot(spex_grammar *g, uint64_t h, const spex_grammar_state *st) {
    for (uint32_t k = (uint32_t)h & (g->cache_cap - 1);; k = (k + 1) & (g->cache_cap - 1)) {
        g_cache_entry *e = &g->cache[k];
        if (!e->key || (e->hash == h && key_equal(e, st))) return e;
    }
}

static void cache_store(spex_grammar *g, g_cache_entry *e, uint64_t h, const spex_grammar_state *st,
                        const uint32_t *mask, size_t words) {
    uint32_t *key = malloc((st->n + 3) * sizeof *key), *m = malloc(words * sizeof *m);
    if (!key || !m) { /* a cache that cannot grow just misses */
        free(key);
        free(m);
        return;
    }
    memcpy(key, st->ids, st->n * sizeof *key);
    key[st->n] = st->part.need, key[st->n + 1] = st->part.have, key[st->n + 2] = st->part.acc;
    memcpy(m, mask, words * sizeof *m);
    *e = (g_cache_entry){h, key, st->n + 3, m};
    g->cache_n++;
}

/* ---- the walk -------------------------------------------------------------- */

typedef struct g_level {
    const uint32_t *ids; /* this depth's stacks: own buffer, or the parent's while a character is partial */
    uint32_t n;
    g_partial part;
    uint32_t *own;
    uint32_t cap;
    uint32_t node, child; /* trie node at this depth and the next child to visit */
} level;

static void mark_tokens(const spex_grammar_vocab *v, uint32_t node, uint32_t *allowed) {
    for (uint32_t t = v->first_tok[node]; t != UINT32_MAX; t = v->next_tok[t]) allowed[t >> 5] |= 1u << (t & 31);
}

/* Enters trie child c from level d into level d+1; false when no stack takes its byte. */
static bool enter(spex_grammar *g, level *L, uint32_t d, uint8_t b, bool *fail) {
    level *up = &L[d], *dn = &L[d + 1];
    dn->part = up->part;
    uint32_t cp = 0;
    int r = g_utf8_step(&dn->part, b, &cp);
    if (r == 0) return false;
    if (r == 1) {
        uint32_t lo, hi;
        if (!g_partial_range(&dn->part, &lo, &hi) || !g_any_in_range(g, up->ids, up->n, lo, hi)) return false;
        dn->ids = up->ids, dn->n = up->n;
        return true;
    }
    uint32_t n = 0;
    if (!g_advance(g, up->ids, up->n, cp, g->scratch, &n)) {
        *fail = true;
        return false;
    }
    if (n == 0) return false;
    if (n > dn->cap) {
        uint32_t *o = realloc(dn->own, n * sizeof *o);
        if (!o) {
            *fail = true;
            return false;
        }
        dn->own = o, dn->cap = n;
    }
    memcpy(dn->own, g->scratch, n * sizeof *dn->own);
    dn->ids = dn->own, dn->n = n;
    return true;
}

/* The walk itself: allowed gets every trie token st accepts; false when a limit was hit. */
static bool walk(spex_grammar *g, const spex_grammar_vocab *v, const spex_grammar_state *st, uint32_t *allowed) {
    /* the levels are kept in the grammar: no allocation once they have grown to this vocabulary */
    if (g->n_levels < v->max_depth + 2) {
        level *nl = realloc(g->levels, ((size_t)v->max_depth + 2) * sizeof *nl);
        if (!nl) return false;
        memset(nl + g->n_levels, 0, (v->max_depth + 2 - g->n_levels) * sizeof *nl);
        g->levels = nl;
        g->n_levels = v->max_depth + 2;
    }
    level *L = g->levels;
    bool fail = false;
    L[0].ids = st->ids, L[0].n = st->n, L[0].part = st->part;
    L[0].node = 0, L[0].child = v->first_child[0];
    uint32_t d = 0;
    for (;;) {
        uint32_t c = L[d].child;
        if (c == UINT32_MAX) {
            if (d == 0) break;
            d--;
            continue;
        }
        L[d].child = v->next_sibling[c];
        if (!enter(g, L, d, v->byte[c], &fail)) {
            if (fail) break;
            continue;
        }
        /* a token ending mid-character counts too: enter checked that its tail can complete */
        mark_tokens(v, c, allowed);
        d++;
        L[d].node = c, L[d].child = v->first_child[c];
    }
    return !fail;
}

void g_mask_free(spex_grammar *g) {
    for (uint32_t i = 0; i < g->n_levels; i++) free(g->levels[i].own);
    free(g->levels);
    g->levels = NULL;
    g->n_levels = 0;
}

spex_status spex_grammar_mask(spex_grammar_state *st, const spex_grammar_vocab *v, uint32_t *allowed,
                              bool *cached, spex_error *err) {
    spex_grammar *g = st->g;
    size_t words = spex_grammar_mask_words(v);
    if (cached) *cached = false;
    if (g->cache_vocab != v->serial) {
        if (!g->cache) {
            g->cache = calloc(2 * CACHE_SLOTS, sizeof *g->cache);
            if (g->cache) g->cache_cap = 2 * CACHE_SLOTS;
        }
        cache_clear(g);
        g->cache_vocab = v->serial;
    }
    uint64_t h = state_hash(st);
    g_cache_entry *e = g->cache ? cache_slot(g, h, st) : NULL;
    if (e && e->key) {
        memcpy(allowed, e->mask, words * sizeof *allowed);
        if (cached) *cached = true;
        return SPEX_OK;
    }
    memset(allowed, 0, words * sizeof *allowed);
    if (!walk(g, v, st, allowed)) {
        memset(allowed, 0, words * sizeof *allowed);
        return spex_error_set(err, SPEX_ERR_RANGE, "grammar: stack limit or memory exhausted while masking");
    }
    if (spex_grammar_is_complete(st))
        for (uint32_t i = 0; i < v->n_eog; i++) allowed[(uint32_t)v->eog[i] >> 5] |= 1u << ((uint32_t)v->eog[i] & 31);
    if (e) {
        if (g->cache_n >= CACHE_SLOTS) { /* half full: start over rather than probe long chains */
            cache_clear(g);
            e = cache_slot(g, h, st);
        }
        cache_store(g, e, h, st, allowed, words);
    }
    return SPEX_OK;
}
