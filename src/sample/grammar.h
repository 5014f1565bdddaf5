/*
 * sample/grammar.h — a GBNF grammar engine (llama.cpp's grammar syntax) for constrained
 * sampling: the parser, a matcher over Unicode code points fed UTF-8 bytes, and the token-level
 * mask over a vocabulary (src/sample/grammar_parse.c, grammar_match.c, grammar_mask.c).
 * What it is not: the sampler, the speculative loop or the server wiring (docs/grammar.md says
 * what remains). Semantics and limits: docs/grammar.md. Dependencies: core, and spex.h.
 *
 * Ownership and threads: a spex_grammar owns its compiled rules, a pool of interned stacks that
 * its states share, and a mask cache. States point into that pool, so a grammar and all of its
 * states are used by one thread at a time (one grammar per sequence). A vocabulary is read-only
 * after it is built and can be shared by any number of grammars and threads.
 */
#ifndef SPEX_SAMPLE_GRAMMAR_H
#define SPEX_SAMPLE_GRAMMAR_H

#include "spex.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spex_grammar spex_grammar;
typedef struct spex_grammar_state spex_grammar_state;
typedef struct spex_grammar_vocab spex_grammar_vocab;

/* Limits (bounded memory on any input; each breach is a clean error). */
#define SPEX_GRAMMAR_MAX_SRC     (1u << 20)  /* bytes of grammar text                       */
#define SPEX_GRAMMAR_MAX_ELEMS   (1u << 20)  /* compiled elements, after repetition expands  */
#define SPEX_GRAMMAR_MAX_RULES   65536u      /* rules, the generated ones included           */
#define SPEX_GRAMMAR_MAX_NEST    64          /* nesting of ( ) groups                        */
#define SPEX_GRAMMAR_MAX_REPEAT  1000u       /* m and n of {m,n}                             */
#define SPEX_GRAMMAR_MAX_NODES   (1u << 22)  /* interned stacks per grammar (the shared pool) */
#define SPEX_GRAMMAR_MAX_STACKS  8192u       /* stacks in one state (ambiguity bound)        */

/* Parses GBNF text src[0..len) and compiles it with start rule root_rule (NULL: "root").
 * Errors: SPEX_ERR_FORMAT with "grammar: line L col C: what" (undefined rules, left recursion,
 * syntax), SPEX_ERR_RANGE for a limit. *out owned by the caller: spex_grammar_free. */
spex_status spex_grammar_parse(const char *src, size_t len, const char *root_rule, spex_grammar **out,
                               spex_error *err);
void spex_grammar_free(spex_grammar *g);
/* Number of rules after compilation (generated rules for groups and repetition included). */
uint32_t spex_grammar_n_rules(const spex_grammar *g);

/* A matcher state at the start of the grammar's root. Owned by the caller: state_free, and
 * freed before its grammar. NULL when out of memory. */
spex_grammar_state *spex_grammar_state_new(spex_grammar *g);
void spex_grammar_state_free(spex_grammar_state *st);
/* dst := src (same grammar). No allocation once dst has grown to src's size, so the speculative
 * walk can keep one scratch state per depth and copy into it each step. False when out of
 * memory (dst is then unchanged). */
bool spex_grammar_state_copy(spex_grammar_state *dst, const spex_grammar_state *src);
/* A new state equal to src (NULL when out of memory). */
spex_grammar_state *spex_grammar_state_clone(const spex_grammar_state *src);

/* Advances st by n UTF-8 bytes. A character may be split across calls: the partial sequence is
 * kept in the state. True when every byte is allowed (the partial tail must still be able to
 * complete to an allowed character); false leaves st unchanged (also on malformed UTF-8 or when
 * a limit is hit). n == 0 is true. */
bool spex_grammar_accept_bytes(spex_grammar_state *st, const void *bytes, size_t n);
/* The root can end here (EOS allowed): some stack is empty and no partial character pends. */
bool spex_grammar_is_complete(const spex_grammar_state *st);
/* No continuation at all (every stack done and none can take a character): only EOS fits. */
bool spex_grammar_is_done(const spex_grammar_state *st);

/* Token flags for spex_grammar_vocab_build. */
enum {
    SPEX_GRAMMAR_TOKEN_EOG = 1,      /* end of generation: allowed iff the state is complete */
    SPEX_GRAMMAR_TOKEN_CONTROL = 2,  /* never allowed (control tokens, no text)              */
};

/* A vocabulary's token pieces (their bytes, as detokenised) in a byte trie. pieces[i] has
 * lens[i] bytes; flags may be NULL (all plain). Empty non-EOG pieces are never allowed. The
 * inputs are copied. *out owned by the caller: spex_grammar_vocab_free. */
spex_status spex_grammar_vocab_build(const char *const *pieces, const uint32_t *lens, const uint8_t *flags,
                                     int32_t n_tokens, spex_grammar_vocab **out, spex_error *err);
void spex_grammar_vocab_free(spex_grammar_vocab *v);
int32_t spex_grammar_vocab_n(const spex_grammar_vocab *v);

/* Bitset words for a mask of v: (n_tokens + 31) / 32. */
size_t spex_grammar_mask_words(const spex_grammar_vocab *v);
static inline bool spex_grammar_mask_test(const uint32_t *mask, int32_t tok) {
    return (mask[(uint32_t)tok >> 5] >> ((uint32_t)tok & 31)) & 1u;
}

/* Sets bit t of allowed (spex_grammar_mask_words(v) words) iff st accepts token t's bytes
 * (EOG: iff complete; CONTROL and empty: never). Cost: one walk of the vocabulary's trie that
 * stops at the first byte no stack accepts; a state seen before (same stacks, same partial
 * character) is a lookup in the grammar's cache. *cached (may be NULL) says which it was.
 * SPEX_ERR_RANGE when the grammar's stack pool is full (the mask is then all clear). */
spex_status spex_grammar_mask(spex_grammar_state *st, const spex_grammar_vocab *v, uint32_t *allowed,
                              bool *cached, spex_error *err);

#ifdef __cplusplus
}
#endif

#endif
