/*
 * sample/grammar_match.c — the GBNF matcher of sample/grammar.h: a pushdown automaton run on
 * a set of stacks (llama.cpp's semantics: every way the text so far can be parsed is kept), fed
 * UTF-8 bytes, with a partial character kept across calls.
 *
 * A stack is an interned (pos, parent) node of the grammar's pool (grammar_int.h). The stacks of
 * a state all have a character element on top (or are empty: the root is complete). Advancing by
 * a code point keeps the stacks whose top set holds it, steps past that element and closes the
 * result again: an alternative's end pops to the parent, a rule reference pushes its
 * continuation (omitted when the reference ends its alternative, so right recursion such as
 * x* = R ::= x R | ε does not grow the stack) and expands into each alternative. The closure is
 * a worklist with a visited mark per node and epoch, so each node is closed once per step.
 * What it is not: the token mask (grammar_mask.c) or the parser (grammar_parse.c).
 */
#include "sample/grammar_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ----------------------------------------------------------------- */

int g_utf8_step(g_partial *p, uint8_t b, uint32_t *cp) {
    if (p->need == 0) {
        if (b < 0x80) {
            *cp = b;
            return 2;
        }
        uint32_t need = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
        if (!need || b == 0xC0 || b == 0xC1 || b > 0xF4) return 0;
        p->need = need;
        p->have = 0;
        p->acc = b & (0x3Fu >> need);
        return 1;
    }
    if ((b & 0xC0) != 0x80) return 0;
    p->acc = (p->acc << 6) | (b & 0x3F);
    p->have++;
    if (p->have < p->need) return 1;
    uint32_t v = p->acc, n = p->need;
    p->need = p->have = p->acc = 0;
    if ((n == 1 && v < 0x80) || (n == 2 && v < 0x800) || (n == 3 && v < 0x10000) || v > 0x10FFFF) return 0;
    *cp = v;
    return 2;
}

bool g_partial_range(const g_partial *p, uint32_t *lo, uint32_t *hi) {
    static const uint32_t shortest[4] = {0, 0x80, 0x800, 0x10000}; /* smallest value per length */
    uint32_t rest = 6 * (p->need - p->have);
    *lo = p->acc << rest;
    *hi = (p->acc << rest) | ((1u << rest) - 1);
    if (*lo < shortest[p->need]) *lo = shortest[p->need];
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
    return *lo <= *hi;
}

/* ---- stack pool ------------------------------------------------------------ */

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static bool pool_init(spex_grammar *g) {
    if (g->cap_nodes) return true;
    g->cap_nodes = 1024;
    g->hcap = 2048;
    g->npos = malloc(g->cap_nodes * sizeof *g->npos);
    g->nparent = malloc(g->cap_nodes * sizeof *g->nparent);
    g->nmark = calloc(g->cap_nodes, sizeof *g->nmark);
    g->htab = calloc(g->hcap, sizeof *g->htab);
    g->scratch = malloc(2 * (size_t)SPEX_GRAMMAR_MAX_STACKS * sizeof *g->scratch);
    if (!g->npos || !g->nparent || !g->nmark || !g->htab || !g->scratch) return false;
    g->npos[0] = UINT32_MAX, g->nparent[0] = 0, g->n_nodes = 1; /* node 0: the empty stack */
    return true;
}

static bool pool_grow(spex_grammar *g) {
    uint32_t cap = g->cap_nodes * 2;
    uint32_t *a = realloc(g->npos, cap * sizeof *a);
    if (a) g->npos = a;
    uint32_t *b = realloc(g->nparent, cap * sizeof *b);
    if (b) g->nparent = b;
    uint32_t *c = realloc(g->nmark, cap * sizeof *c);
    if (c) g->nmark = c;
    uint32_t *h = calloc((size_t)g->hcap * 2, sizeof *h);
    if (!a || !b || !c || !h) {
        free(h);
        return false;
    }
    memset(g->nmark + g->cap_nodes, 0, (cap - g->cap_nodes) * sizeof *c);
    g->cap_nodes = cap;
    free(g->htab);
    g->htab = h;
    g->hcap *= 2;
    for (uint32_t i = 1; i < g->n_nodes; i++) {
        uint32_t k = hash2(g->npos[i], g->nparent[i]) & (g->hcap - 1);
        while (g->htab[k]) k = (k + 1) & (g->hcap - 1);
        g->htab[k] = i + 1;
    }
    return true;
}

/* The node (pos, parent); UINT32_MAX when the pool is full. */
static uint32_t intern(spex_grammar *g, uint32_t pos, uint32_t parent) {
    uint32_t k = hash2(pos, parent) & (g->hcap - 1);
    for (; g->htab[k]; k = (k + 1) & (g->hcap - 1)) {
        uint32_t i = g->htab[k] - 1;
        if (g->npos[i] == pos && g->nparent[i] == parent) return i;
    }
    if (g->n_nodes >= SPEX_GRAMMAR_MAX_NODES) return UINT32_MAX;
    if (g->n_nodes >= g->cap_nodes) {
        if (!pool_grow(g)) return UINT32_MAX;
        return intern(g, pos, parent);
    }
    uint32_t i = g->n_nodes++;
    g->npos[i] = pos;
    g->nparent[i] = parent;
    g->nmark[i] = 0;
    g->htab[k] = i + 1;
    return i;
}

static bool push_work(spex_grammar *g, uint32_t pos, uint32_t parent) {
    if (g->n_work + 2 > g->cap_work) {
        uint32_t cap = g->cap_work ? g->cap_work * 2 : 256;
        uint32_t *w = realloc(g->work, cap * sizeof *w);
        if (!w) return false;
        g->work = w;
        g->cap_work = cap;
    }
    g->work[g->n_work++] = pos;
    g->work[g->n_work++] = parent;
    return true;
}

static bool add_out(spex_grammar *g, uint32_t id, uint32_t *out, uint32_t *n_out, uint32_t cap) {
    if (g->nmark[id] == g->epoch) return true;
    g->nmark[id] = g->epoch;
    if (*n_out >= cap) return false;
    out[(*n_out)++] = id;
    return true;
}

bool g_expand(spex_grammar *g, uint32_t pos, uint32_t parent, uint32_t *out, uint32_t *n_out, uint32_t cap) {
    g->n_work = 0;
    if (!push_work(g, pos, parent)) return false;
    while (g->n_work) {
        parent = g->work[--g->n_work];
        pos = g->work[--g->n_work];
        const g_elem *e = &g->elems[pos];
        if (e->type == G_END) {
            if (parent == 0) {
                if (!add_out(g, 0, out, n_out, cap)) return false;
            } else if (!push_work(g, g->npos[parent], g->nparent[parent])) return false;
            continue;
        }
        uint32_t id = intern(g, pos, parent);
        if (id == UINT32_MAX) return false;
        if (e->type == G_CHAR) {
            if (!add_out(g, id, out, n_out, cap)) return false;
            continue;
        }
        if (g->nmark[id] == g->epoch) continue; /* this reference was expanded already */
        g->nmark[id] = g->epoch;
        uint32_t cont = parent;
        if (g->elems[pos + 1].type != G_END && (cont = intern(g, pos + 1, parent)) == UINT32_MAX) return false;
        const g_rule *r = &g->rules[e->val];
        for (uint32_t a = 0; a < r->n_alt; a++)
            if (!push_work(g, g->alts[r->first_alt + a], cont)) return false;
    }
    return true;
}

static bool set_has(const spex_grammar *g, uint32_t set, uint32_t cp) {
    const g_range *r = g->ranges + g->sets[set].first;
    uint32_t lo = 0, hi = g->sets[set].n;
    while (lo < hi) { /* first range whose hi >= cp */
        uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->sets[set].n && r[lo].lo <= cp;
}

static bool set_meets(const spex_grammar *g, uint32_t set, uint32_t lo_cp, uint32_t hi_cp) {
    const g_range *r = g->ranges + g->sets[set].first;
    for (uint32_t i = 0; i < g->sets[set].n; i++)
        if (r[i].hi >= lo_cp && r[i].lo <= hi_cp) return true;
    return false;
}

void g_new_epoch(spex_grammar *g) {
    if (++g->epoch == 0) { /* wrapped: old marks could alias the new epoch */
        memset(g->nmark, 0, g->cap_nodes * sizeof *g->nmark);
        g->epoch = 1;
    }
}

bool g_advance(spex_grammar *g, const uint32_t *in, uint32_t n, uint32_t cp, uint32_t *out, uint32_t *n_out) {
    g_new_epoch(g);
    *n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = in[i];
        if (id == 0) continue;
        uint32_t pos = g->npos[id];
        if (!set_has(g, g->elems[pos].val, cp)) continue;
        if (!g_expand(g, pos + 1, g->nparent[id], out, n_out, SPEX_GRAMMAR_MAX_STACKS)) return false;
    }
    return true;
}

bool g_any_in_range(const spex_grammar *g, const uint32_t *in, uint32_t n, uint32_t lo, uint32_t hi) {
    for (uint32_t i = 0; i < n; i++)
        if (in[i] != 0 && set_meets(g, g->elems[g->npos[in[i]]].val, lo, hi)) return true;
    return false;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void g_sort_ids(uint32_t *ids, uint32_t n) { qsort(ids, n, sizeof *ids, cmp_u32); }

/* ---- states ---------------------------------------------------------------- */

bool g_state_reserve(spex_grammar_state *st, uint32_t n) {
    if (n <= st->cap) return true;
    uint32_t cap = st->cap ? st->cap : 8;
    while (cap < n) cap *= 2;
    uint32_t *ids = realloc(st->ids, cap * sizeof *ids);
    if (!ids) return false;
    st->ids = ids;
    st->cap = cap;
    return true;
}

spex_grammar_state *spex_grammar_state_new(spex_grammar *g) {
    spex_grammar_state *st = calloc(1, sizeof *st);
    if (!st || !pool_init(g)) {
        free(st);
        return NULL;
    }
    st->g = g;
    g_new_epoch(g);
    const g_rule *r = &g->rules[g->root];
    uint32_t n = 0;
    bool ok = true;
    for (uint32_t a = 0; ok && a < r->n_alt; a++)
        ok = g_expand(g, g->alts[r->first_alt + a], 0, g->scratch, &n, SPEX_GRAMMAR_MAX_STACKS);
    if (!ok || !g_state_reserve(st, n ? n : 1)) {
        spex_grammar_state_free(st);
        return NULL;
    }
    memcpy(st->ids, g->scratch, n * sizeof *st->ids);
    st->n = n;
    g_sort_ids(st->ids, st->n);
    return st;
}

void spex_grammar_state_free(spex_grammar_state *st) {
    if (!st) return;
    free(st->ids);
    free(st);
}

bool spex_grammar_state_copy(spex_grammar_state *dst, const spex_grammar_state *src) {
    if (!g_state_reserve(dst, src->n)) return false;
    memcpy(dst->ids, src->ids, src->n * sizeof *dst->ids);
    dst->n = src->n;
    dst->g = src->g;
    dst->part = src->part;
    return true;
}

spex_grammar_state *spex_grammar_state_clone(const spex_grammar_state *src) {
    spex_grammar_state *st = calloc(1, sizeof *st);
    if (st && spex_grammar_state_copy(st, src)) return st;
    free(st);
    return NULL;
}

bool spex_grammar_accept_bytes(spex_grammar_state *st, const void *bytes, size_t n) {
    spex_grammar *g = st->g;
    const uint8_t *b = bytes;
    if (n == 0) return true;
    /* two scratch sets ping-pong; the state changes only when every byte went through */
    uint32_t *buf = g->scratch;
    uint32_t *cur = st->ids, *next = buf, *spare = buf + SPEX_GRAMMAR_MAX_STACKS, nc = st->n;
    g_partial part = st->part;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        uint32_t cp = 0, nn = 0;
        int r = g_utf8_step(&part, b[i], &cp);
        if (r == 0) ok = false;
        else if (r == 1) {
            uint32_t lo, hi;
            ok = g_partial_range(&part, &lo, &hi) && g_any_in_range(g, cur, nc, lo, hi);
        } else {
            ok = g_advance(g, cur, nc, cp, next, &nn) && nn > 0;
            cur = next, nc = nn;
            next = cur == buf ? spare : buf;
        }
    }
    if (ok && cur != st->ids && !g_state_reserve(st, nc)) ok = false;
    if (ok) {
        if (cur != st->ids) {
            memcpy(st->ids, cur, nc * sizeof *cur);
            st->n = nc;
            g_sort_ids(st->ids, st->n);
        }
        st->part = part;
    }
    return ok;
}

bool spex_grammar_is_complete(const spex_grammar_state *st) {
    return st->part.need == 0 && st->n > 0 && st->ids[0] == 0;
}

bool spex_grammar_is_done(const spex_grammar_state *st) {
    return spex_grammar_is_complete(st) && st->n == 1;
}

void spex_grammar_free(spex_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alts);
    free(g->rules);
    free(g->sets);
    free(g->ranges);
    free(g->names);
    free(g->npos);
    free(g->nparent);
    free(g->nmark);
    free(g->htab);
    free(g->work);
    free(g->scratch);
    for (uint32_t i = 0; i < g->cache_cap; i++) {
        free(g->cache[i].key);
        free(g->cache[i].mask);
    }
    free(g->cache);
    g_mask_free(g);
    free(g);
}
