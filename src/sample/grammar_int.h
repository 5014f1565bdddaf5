/*
 * sample/grammar_int.h — the compiled form of a GBNF grammar and the matcher's stack pool,
 * shared by grammar_parse.c (which builds it), grammar_match.c and grammar_mask.c. Not an
 * interface: nothing outside these three files includes it.
 *
 * Compiled form: every rule is a list of alternatives; an alternative is a run of elements in
 * elems[] ending with a G_END element. Elements are G_CHAR (a set of code-point ranges, sorted,
 * disjoint, negation already complemented) or G_REF (another rule). Groups and repetition were
 * rewritten into generated rules by the parser, so the matcher knows only these three kinds.
 *
 * Stacks: a stack is an interned node (pos, parent): pos is an element position, parent the
 * rest of the stack (node 0 is the empty stack). Interning makes a stack one uint32 id, so a
 * state is a sorted set of ids, a copy is a memcpy and a hash of the state is a hash of ids.
 */
#ifndef SPEX_SAMPLE_GRAMMAR_INT_H
#define SPEX_SAMPLE_GRAMMAR_INT_H

#include "sample/grammar.h"

enum { G_END = 0, G_CHAR = 1, G_REF = 2 };

typedef struct g_elem {
    uint32_t type;
    uint32_t val; /* G_CHAR: set index; G_REF: rule index */
} g_elem;

typedef struct g_range {
    uint32_t lo, hi;
} g_range;

typedef struct g_set {
    uint32_t first, n; /* into ranges[] */
} g_set;

typedef struct g_rule {
    uint32_t name;             /* offset into names */
    uint32_t first_alt, n_alt; /* into alts[] */
} g_rule;

typedef struct g_cache_entry {
    uint64_t hash;
    uint32_t *key; /* n ids then the partial-character word */
    uint32_t n_key;
    uint32_t *mask;
} g_cache_entry;

struct spex_grammar {
    g_elem *elems;
    uint32_t n_elems;
    uint32_t *alts; /* element position where each alternative starts */
    uint32_t n_alts;
    g_rule *rules;
    uint32_t n_rules, root;
    g_set *sets;
    uint32_t n_sets;
    g_range *ranges;
    uint32_t n_ranges;
    char *names;

    /* stack pool: node i is (pos[i], parent[i]); node 0 is the empty stack */
    uint32_t *npos, *nparent, *nmark;
    uint32_t n_nodes, cap_nodes, epoch;
    uint32_t *htab; /* open addressing: node id + 1, 0 = empty */
    uint32_t hcap;
    /* closure scratch, and two sets of SPEX_GRAMMAR_MAX_STACKS ids for accept_bytes and masks */
    uint32_t *scratch;
    uint32_t *work;
    uint32_t n_work, cap_work;

    /* mask cache, bound to one vocabulary at a time */
    g_cache_entry *cache;
    uint32_t cache_cap, cache_n;
    uint64_t cache_vocab;
    /* the mask walk's per-depth sets, kept between masks (grammar_mask.c) */
    struct g_level *levels;
    uint32_t n_levels;
};

/* The partial character: bytes still needed (0: none), bytes seen, bits so far. */
typedef struct g_partial {
    uint32_t need, have, acc;
} g_partial;

struct spex_grammar_state {
    spex_grammar *g;
    uint32_t *ids; /* sorted stack ids */
    uint32_t n, cap;
    g_partial part;
};

/* --- grammar_match.c, used by grammar_mask.c --- */
/* Appends to out (cap entries) the closure of stack (pos, parent), deduplicated against the
 * current epoch; false when a limit is hit. */
bool g_expand(spex_grammar *g, uint32_t pos, uint32_t parent, uint32_t *out, uint32_t *n_out, uint32_t cap);
/* The stacks of in[0..n) that accept code point cp, advanced and closed, into out. */
bool g_advance(spex_grammar *g, const uint32_t *in, uint32_t n, uint32_t cp, uint32_t *out, uint32_t *n_out);
/* Some stack of in[0..n) has a top set meeting [lo, hi]. */
bool g_any_in_range(const spex_grammar *g, const uint32_t *in, uint32_t n, uint32_t lo, uint32_t hi);
/* Feeds one byte to a partial character: 0 bad byte, 1 still partial, 2 complete (*cp). */
int g_utf8_step(g_partial *p, uint8_t b, uint32_t *cp);
/* The code points a partial character can still become, overlong forms and values beyond
 * U+10FFFF excluded; false when there are none. */
bool g_partial_range(const g_partial *p, uint32_t *lo, uint32_t *hi);
void g_sort_ids(uint32_t *ids, uint32_t n);
/* Starts a new set: a fresh epoch for the visited marks. */
void g_new_epoch(spex_grammar *g);
bool g_state_reserve(spex_grammar_state *st, uint32_t n);
/* --- grammar_mask.c, used by spex_grammar_free --- */
void g_mask_free(spex_grammar *g);

#endif
