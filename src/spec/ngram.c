/*
 * ngram.c — prompt-lookup drafting: the continuation of the last n-gram's most recent earlier
 * occurrence in the sequence's own tokens (llama.cpp's `ngram-simple`, with its
 * `--spec-ngram-min-hits` of `ngram-map-k`), contract in include/spex.h.
 *
 * What it is: a pure function over a token array. The key is the last size_n tokens (the
 * anchor last); the most recent earlier position where the same size_n tokens stand gives the
 * draft, the tokens that followed it there, at most min(size_m, n_max) and never past the end
 * (the continuation may run into the key itself: a repeated pattern drafts its own next
 * period). With min_hits > 1 the key must stand that many times before the draft is made.
 * What it is not: the loop that keeps the history (spec.c) or verification — a draft is only
 * a proposal; the target's verification keeps the output exactly what it would be without it.
 *
 * Cost: one backwards scan, O(len · size_n) in the worst case and O(len) when the first token
 * of the key rarely repeats: ~50 µs over a 32K-token history, against a target step of
 * milliseconds.
 */
#include "spex.h"
#include "spec/api.h"

#include <string.h>

spex_ngram_params spex_ngram_default_params(void) {
    return (spex_ngram_params){.size_n = 12, .size_m = 48, .min_hits = 1};   /* llama.cpp's defaults */
}

int32_t spex_ngram_lookup(const int32_t *toks, int32_t len, const spex_ngram_params *p, int32_t n_max, int32_t *out) {
    if (!toks || !p || !out || p->size_n < 1 || p->min_hits < 1 || len <= p->size_n) return 0;
    const int32_t n = p->size_n;
    const int32_t *key = toks + len - n;
    int32_t m = p->size_m < n_max ? p->size_m : n_max;
    if (m <= 0) return 0;
    int32_t hits = 0, at = -1;
    for (int32_t j = len - n - 1; j >= 0; j--) {
        if (toks[j] != key[0] || memcmp(toks + j, key, sizeof(int32_t) * (size_t)n) != 0) continue;
        if (at < 0) at = j;
        if (++hits >= p->min_hits) break;
    }
    if (at < 0 || hits < p->min_hits) return 0;
    int32_t from = at + n, k = len - from < m ? len - from : m;
    memcpy(out, toks + from, sizeof(int32_t) * (size_t)k);
    return k;
}
