/*
 * fuzz_grammar.c — libFuzzer target for the GBNF engine (src/sample/grammar*.c): arbitrary text
 * through spex_grammar_parse; a grammar that parses is then run on fixed strings, on the input's
 * own bytes fed in uneven pieces (characters split across calls), and masked over a small fixed
 * vocabulary (whole and partial UTF-8 pieces, an EOG and a control token).
 *
 * Checked: no crash, leak, hang or sanitizer report (the parser's size, nesting and repetition
 * limits and the matcher's stack bounds keep each input's work bounded: docs/grammar.md); a
 * failed parse leaves *out NULL and a one-line message starting "grammar: "; a refused
 * accept_bytes leaves the state as it was (checked against a copy); the mask of a state agrees
 * with accept_bytes on a copy for every token (the brute-force check of tests/test_grammar.c).
 * Run: make fuzz && ./build-fuzz/fuzz_grammar -max_total_time=60 build-fuzz/corpus-grammar fuzz/corpus/grammar
 */
#include "sample/grammar_int.h" /* to compare states exactly */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const pieces[] = {
    "",   "a",  "b",   " ",     "\"",        "{",      "}",    "[", "]",  ",", ":", "0", "1", "-", ".", "e",
    "ab", "ba", "true", "null", "\n",        "\\",     "(",    ")", "\xce", "\xb1", "\xce\xb1", "\xf0\x9f\x98\x80",
    "\xf0\x9f", "\x98\x80", "x\xce", "\xff", "abc",    " \"k\"", "</s>",
};
#define N_PIECES ((int32_t)(sizeof pieces / sizeof *pieces))

static spex_grammar_vocab *vocab(void) {
    static spex_grammar_vocab *v;
    if (!v) {
        uint32_t lens[N_PIECES];
        uint8_t flags[N_PIECES] = {0};
        for (int32_t i = 0; i < N_PIECES; i++) lens[i] = (uint32_t)strlen(pieces[i]);
        flags[N_PIECES - 1] = SPEX_GRAMMAR_TOKEN_EOG;
        flags[1] = SPEX_GRAMMAR_TOKEN_CONTROL;
        if (spex_grammar_vocab_build(pieces, lens, flags, N_PIECES, &v, NULL) != SPEX_OK) abort();
    }
    return v;
}

/* accept_bytes, checking that a refusal leaves the state as it was. */
static bool feed(spex_grammar_state *st, spex_grammar_state *before, const void *b, size_t n) {
    if (!spex_grammar_state_copy(before, st)) abort();
    bool ok = spex_grammar_accept_bytes(st, b, n);
    if (!ok && (st->n != before->n || memcmp(st->ids, before->ids, st->n * sizeof *st->ids) != 0 ||
                st->part.need != before->part.need || st->part.acc != before->part.acc))
        abort();
    return ok;
}

static void check_mask(spex_grammar_state *st, spex_grammar_state *tmp) {
    spex_grammar_vocab *v = vocab();
    uint32_t mask[8];
    bool cached;
    if (spex_grammar_mask(st, v, mask, &cached, NULL) != SPEX_OK) return;
    for (int32_t t = 0; t < N_PIECES; t++) {
        bool want;
        if (t == N_PIECES - 1) want = spex_grammar_is_complete(st);
        else if (t == 1 || !pieces[t][0]) want = false;
        else {
            if (!spex_grammar_state_copy(tmp, st)) abort();
            want = spex_grammar_accept_bytes(tmp, pieces[t], strlen(pieces[t]));
        }
        if (want != spex_grammar_mask_test(mask, t)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spex_grammar *g = (spex_grammar *)1;
    spex_error err = {0};
    if (spex_grammar_parse((const char *)data, size, NULL, &g, &err) != SPEX_OK) {
        if (g || strncmp(err.msg, "grammar: ", 9) != 0 || strchr(err.msg, '\n')) abort();
        return 0;
    }
    spex_grammar_state *st = spex_grammar_state_new(g), *tmp = st ? spex_grammar_state_clone(st) : NULL;
    if (st && tmp) {
        static const char *const fixed[] = {"a", "{\"a\": [1, 2]}", "\xce\xb1\xf0\x9f\x98\x80", "()", " \n"};
        check_mask(st, tmp);
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
            spex_grammar_state *s = spex_grammar_state_clone(st);
            if (!s) break;
            feed(s, tmp, fixed[i], strlen(fixed[i]));
            spex_grammar_state_free(s);
        }
        /* the input's own bytes, in pieces of 1..4 bytes, masking on the way (bounded) */
        size_t n = size < 256 ? size : 256, masks = 0;
        for (size_t i = 0; i < n;) {
            size_t k = 1 + (data[i] & 3);
            if (k > n - i) k = n - i;
            if (!feed(st, tmp, data + i, k)) break;
            if (masks++ < 8) check_mask(st, tmp);
            i += k;
        }
    }
    spex_grammar_state_free(st);
    spex_grammar_state_free(tmp);
    spex_grammar_free(g);
    return 0;
}
