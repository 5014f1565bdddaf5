/*
 * sample/grammar_parse.c — the GBNF parser and compiler of sample/grammar.h.
 *
 * Syntax (llama.cpp's grammars/README.md): `name ::= alternatives` rules, names of letters,
 * digits and '-'; `|` alternation; `( )` groups; "literals" and [classes] with the escapes
 * \n \t \r \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH; `[^...]` negation; `.` any character;
 * postfix `* + ? {m} {m,} {m,n} {,n}`; `#` comments. A rule ends at a newline unless inside
 * parentheses or right after `::=` or `|`. Groups and repetition compile into generated rules
 * (x* is R ::= x R | ε, x{m,n} is m copies then a chain of n-m optionals), so the matcher sees
 * only characters, references and alternative ends (grammar_int.h).
 * What it is not: the JSON-schema converter or llama.cpp's token references (<[id]>).
 * Checked after parsing: every referenced rule is defined, the start rule exists, and no rule
 * is left-recursive (directly or through rules that can match nothing), as llama.cpp refuses.
 */
#include "sample/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ebuf {
    g_elem *e;
    uint32_t n, cap;
} ebuf;

typedef struct parser {
    const char *src, *s, *end;
    spex_grammar *g;
    ebuf **bufs;      /* per rule: its alternatives, each ending in G_END (stable while rules are added) */
    uint8_t *defined; /* per rule */
    uint32_t *ref_at; /* per rule: offset of its first reference (for errors) */
    uint32_t *def_at; /* per rule: offset of its definition */
    uint32_t cap_rules, total;
    uint32_t cap_names, n_names, cap_ranges, cap_sets;
    uint32_t cur_rule, n_gen, depth;
    spex_error *err;
    spex_status st;
} parser;

static bool fail_at(parser *p, const char *at, spex_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool fail_at(parser *p, const char *at, spex_status st, const char *fmt, ...) {
    if (p->st != SPEX_OK) return false;
    unsigned line = 1, col = 1;
    for (const char *c = p->src; c < at && c < p->end; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = spex_error_set(p->err, st, "grammar: line %u col %u: %s", line, col, msg);
    return false;
}

static bool grow(void **ptr, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*ptr, (size_t)c * size);
    if (!q) return false;
    *ptr = q;
    *cap = c;
    return true;
}

static bool emit(parser *p, ebuf *b, uint32_t type, uint32_t val) {
    if (++p->total > SPEX_GRAMMAR_MAX_ELEMS)
        return fail_at(p, p->s, SPEX_ERR_RANGE, "grammar too large (over %u elements)", SPEX_GRAMMAR_MAX_ELEMS);
    if (!grow((void **)&b->e, &b->cap, b->n + 1, sizeof *b->e)) return fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    b->e[b->n++] = (g_elem){type, val};
    return true;
}

/* A new rule named name (len bytes); its index, or UINT32_MAX after failing. */
static uint32_t add_rule(parser *p, const char *name, size_t len) {
    spex_grammar *g = p->g;
    if (g->n_rules >= SPEX_GRAMMAR_MAX_RULES) {
        fail_at(p, p->s, SPEX_ERR_RANGE, "too many rules (over %u)", SPEX_GRAMMAR_MAX_RULES);
        return UINT32_MAX;
    }
    uint32_t r = g->n_rules, cap = p->cap_rules;
    bool ok = grow((void **)&g->rules, &cap, r + 1, sizeof *g->rules);
    uint32_t c2 = p->cap_rules, c3 = p->cap_rules;
    ok = ok && grow((void **)&p->bufs, &c2, r + 1, sizeof *p->bufs);
    ok = ok && grow((void **)&p->defined, &c3, r + 1, 1);
    uint32_t c4 = p->cap_rules;
    ok = ok && grow((void **)&p->ref_at, &c4, r + 1, sizeof *p->ref_at);
    uint32_t c5 = p->cap_rules;
    ok = ok && grow((void **)&p->def_at, &c5, r + 1, sizeof *p->def_at);
    ok = ok && grow((void **)&g->names, &p->cap_names, p->n_names + (uint32_t)len + 1, 1);
    if (!ok) {
        fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
        return UINT32_MAX;
    }
    p->cap_rules = cap;
    memcpy(g->names + p->n_names, name, len);
    g->names[p->n_names + len] = 0;
    g->rules[r] = (g_rule){p->n_names, 0, 0};
    p->n_names += (uint32_t)len + 1;
    p->bufs[r] = calloc(1, sizeof **p->bufs);
    if (!p->bufs[r]) {
        fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
        return UINT32_MAX;
    }
    p->defined[r] = 0;
    p->ref_at[r] = p->def_at[r] = (uint32_t)(p->s - p->src);
    g->n_rules++;
    return r;
}

static uint32_t find_rule(parser *p, const char *name, size_t len) {
    for (uint32_t r = 0; r < p->g->n_rules; r++) {
        const char *n = p->g->names + p->g->rules[r].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return r;
    }
    return UINT32_MAX;
}

static uint32_t gen_rule(parser *p) {
    char name[300];
    int k = snprintf(name, sizeof name, "%s_%u", p->g->names + p->g->rules[p->cur_rule].name, ++p->n_gen);
    uint32_t r = add_rule(p, name, (size_t)k < sizeof name ? (size_t)k : sizeof name - 1);
    if (r != UINT32_MAX) p->defined[r] = 1;
    return r;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static void skip_space(parser *p, bool newline_ok) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t') p->s++;
        else if (c == '#') {
            while (p->s < p->end && *p->s != '\n' && *p->s != '\r') p->s++;
        } else if (newline_ok && (c == '\n' || c == '\r')) p->s++;
        else break;
    }
}

static bool hex_digits(parser *p, int n, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (p->s >= p->end) return fail_at(p, p->s, SPEX_ERR_FORMAT, "expected %d hex digits", n);
        char c = *p->s;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail_at(p, p->s, SPEX_ERR_FORMAT, "expected %d hex digits", n);
        v = v * 16 + (uint32_t)d;
        p->s++;
    }
    if (v > 0x10FFFF) return fail_at(p, p->s, SPEX_ERR_FORMAT, "code point U+%X beyond U+10FFFF", v);
    *cp = v;
    return true;
}

/* One character of a literal or class: an escape or one UTF-8 encoded code point. */
static bool parse_char(parser *p, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)p->s;
    if (p->s >= p->end) return fail_at(p, p->s, SPEX_ERR_FORMAT, "unexpected end of grammar");
    if (*u == '\\') {
        if (p->s + 1 >= p->end) return fail_at(p, p->s, SPEX_ERR_FORMAT, "unexpected end after '\\'");
        char c = p->s[1];
        p->s += 2;
        switch (c) {
        case 'x': return hex_digits(p, 2, cp);
        case 'u': return hex_digits(p, 4, cp);
        case 'U': return hex_digits(p, 8, cp);
        case 'n': *cp = '\n'; return true;
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint8_t)c; return true;
        default: return fail_at(p, p->s - 2, SPEX_ERR_FORMAT, "unknown escape '\\%c'", c);
        }
    }
    g_partial part = {0};
    uint32_t v = 0;
    for (const char *q = p->s; q < p->end; q++) {
        int r = g_utf8_step(&part, (uint8_t)*q, &v);
        if (r == 0) break;
        if (r == 2) {
            p->s = q + 1;
            *cp = v;
            return true;
        }
    }
    return fail_at(p, p->s, SPEX_ERR_FORMAT, "malformed UTF-8");
}

static int cmp_range(const void *a, const void *b) {
    const g_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges r[0..n), complements it when neg, and stores it as a new set. */
static bool add_set(parser *p, g_range *r, uint32_t n, bool neg, uint32_t *set) {
    spex_grammar *g = p->g;
    qsort(r, n, sizeof *r, cmp_range);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else r[m++] = r[i];
    }
    if (!grow((void **)&g->ranges, &p->cap_ranges, g->n_ranges + m + 1, sizeof *g->ranges) ||
        !grow((void **)&g->sets, &p->cap_sets, g->n_sets + 1, sizeof *g->sets))
        return fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    uint32_t first = g->n_ranges;
    if (!neg) {
        memcpy(g->ranges + first, r, m * sizeof *r);
        g->n_ranges += m;
    } else {
        uint32_t next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (r[i].lo > next) g->ranges[g->n_ranges++] = (g_range){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) g->ranges[g->n_ranges++] = (g_range){next, 0x10FFFF};
    }
    g->sets[g->n_sets] = (g_set){first, g->n_ranges - first};
    *set = g->n_sets++;
    return true;
}

static bool parse_class(parser *p, ebuf *b) {
    const char *open = p->s++;
    bool neg = p->s < p->end && *p->s == '^';
    if (neg) p->s++;
    g_range *r = NULL;
    uint32_t n = 0, cap = 0;
    bool ok = true;
    while (ok) {
        if (p->s >= p->end) {
            ok = fail_at(p, open, SPEX_ERR_FORMAT, "unterminated character class");
            break;
        }
        if (*p->s == ']') break;
        uint32_t lo, hi;
        ok = parse_char(p, &lo);
        hi = lo;
        if (ok && p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            ok = parse_char(p, &hi);
            if (ok && hi < lo) ok = fail_at(p, p->s, SPEX_ERR_FORMAT, "range end U+%X before its start U+%X", hi, lo);
        }
        if (ok && n + 1 > SPEX_GRAMMAR_MAX_ELEMS) ok = fail_at(p, p->s, SPEX_ERR_RANGE, "character class too large");
        if (ok && !grow((void **)&r, &cap, n + 1, sizeof *r)) ok = fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
        if (ok) r[n++] = (g_range){lo, hi};
    }
    uint32_t set = 0;
    if (ok) {
        p->s++;
        ok = add_set(p, r, n, neg, &set) && emit(p, b, G_CHAR, set);
    }
    free(r);
    return ok;
}

static bool parse_literal(parser *p, ebuf *b) {
    const char *open = p->s++;
    while (p->s < p->end && *p->s != '"') {
        if (*p->s == '\n' || *p->s == '\r') break;
        uint32_t cp, set;
        g_range r;
        if (!parse_char(p, &cp)) return false;
        r = (g_range){cp, cp};
        if (!add_set(p, &r, 1, false, &set) || !emit(p, b, G_CHAR, set)) return false;
    }
    if (p->s >= p->end || *p->s != '"') return fail_at(p, open, SPEX_ERR_FORMAT, "unterminated string literal");
    p->s++;
    return true;
}

static bool parse_uint(parser *p, uint32_t *v) {
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail_at(p, p->s, SPEX_ERR_FORMAT, "expected a number");
    uint64_t x = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        x = x * 10 + (uint64_t)(*p->s++ - '0');
        if (x > SPEX_GRAMMAR_MAX_REPEAT)
            return fail_at(p, p->s, SPEX_ERR_RANGE, "repetition count over %u", SPEX_GRAMMAR_MAX_REPEAT);
    }
    *v = (uint32_t)x;
    return true;
}

static bool emit_span(parser *p, ebuf *b, const g_elem *span, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (!emit(p, b, span[i].type, span[i].val)) return false;
    return true;
}

/* Rewrites the atom b->e[start..] as min copies then up to max-min more (max UINT32_MAX: any). */
static bool repeat(parser *p, ebuf *b, uint32_t start, uint32_t min, uint32_t max) {
    uint32_t n = b->n - start;
    g_elem *span = malloc((n ? n : 1) * sizeof *span);
    if (!span) return fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    memcpy(span, b->e + start, n * sizeof *span);
    b->n = start;
    bool ok = true;
    for (uint32_t i = 0; ok && i < min; i++) ok = emit_span(p, b, span, n);
    if (ok && n && max == UINT32_MAX) {
        uint32_t r = gen_rule(p);
        ok = r != UINT32_MAX && emit_span(p, p->bufs[r], span, n) && emit(p, p->bufs[r], G_REF, r) &&
             emit(p, p->bufs[r], G_END, 0) && emit(p, p->bufs[r], G_END, 0) && emit(p, b, G_REF, r);
    } else if (ok && n && max > min) {
        uint32_t prev = UINT32_MAX;
        for (uint32_t i = min; ok && i < max; i++) {
            uint32_t r = gen_rule(p);
            ok = r != UINT32_MAX && emit_span(p, p->bufs[r], span, n) &&
                 (prev == UINT32_MAX || emit(p, p->bufs[r], G_REF, prev)) && emit(p, p->bufs[r], G_END, 0) &&
                 emit(p, p->bufs[r], G_END, 0);
            prev = r;
        }
        if (ok) ok = emit(p, b, G_REF, prev);
    }
    free(span);
    return ok;
}

static bool parse_alternates(parser *p, uint32_t rule, bool nested);

static bool parse_repetition(parser *p, ebuf *b, uint32_t start) {
    const char *at = p->s;
    char c = *p->s++;
    if (start == b->n && c != '{' ) return fail_at(p, at, SPEX_ERR_FORMAT, "'%c' with nothing before it to repeat", c);
    if (c == '*') return repeat(p, b, start, 0, UINT32_MAX);
    if (c == '+') return repeat(p, b, start, 1, UINT32_MAX);
    if (c == '?') return repeat(p, b, start, 0, 1);
    if (start == b->n) return fail_at(p, at, SPEX_ERR_FORMAT, "'{' with nothing before it to repeat");
    uint32_t min = 0, max;
    skip_space(p, false);
    if (p->s < p->end && *p->s != ',' && !parse_uint(p, &min)) return false;
    skip_space(p, false);
    max = min;
    if (p->s < p->end && *p->s == ',') {
        p->s++;
        skip_space(p, false);
        max = UINT32_MAX;
        if (p->s < p->end && *p->s != '}' && !parse_uint(p, &max)) return false;
        skip_space(p, false);
    }
    if (p->s >= p->end || *p->s != '}') return fail_at(p, at, SPEX_ERR_FORMAT, "expected '}' to close the repetition");
    p->s++;
    if (max < min) return fail_at(p, at, SPEX_ERR_FORMAT, "repetition {%u,%u}: max below min", min, max);
    return repeat(p, b, start, min, max);
}

static bool parse_sequence(parser *p, ebuf *b, bool nested) {
    uint32_t last = b->n; /* start of the last atom (b->n: none yet) */
    while (p->s < p->end) {
        char c = *p->s;
        uint32_t start = b->n;
        bool ok;
        if (c == '"') ok = parse_literal(p, b);
        else if (c == '[') ok = parse_class(p, b);
        else if (c == '.') {
            g_range r = {0, 0x10FFFF};
            uint32_t set;
            p->s++;
            ok = add_set(p, &r, 1, false, &set) && emit(p, b, G_CHAR, set);
        } else if (is_word(c)) {
            const char *name = p->s;
            while (p->s < p->end && is_word(*p->s)) p->s++;
            uint32_t r = find_rule(p, name, (size_t)(p->s - name));
            if (r == UINT32_MAX) {
                const char *save = p->s;
                p->s = name;
                r = add_rule(p, name, (size_t)(save - name));
                p->s = save;
            }
            ok = r != UINT32_MAX && emit(p, b, G_REF, r);
        } else if (c == '(') {
            const char *open = p->s++;
            if (++p->depth > SPEX_GRAMMAR_MAX_NEST)
                return fail_at(p, open, SPEX_ERR_RANGE, "groups nested deeper than %d", SPEX_GRAMMAR_MAX_NEST);
            uint32_t r = gen_rule(p);
            if (r == UINT32_MAX) return false;
            skip_space(p, true);
            ok = parse_alternates(p, r, true);
            if (ok && (p->s >= p->end || *p->s != ')')) ok = fail_at(p, open, SPEX_ERR_FORMAT, "expected ')' to close the group");
            if (ok) p->s++;
            p->depth--;
            ok = ok && emit(p, b, G_REF, r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            ok = parse_repetition(p, b, last);
            start = last;
        } else break;
        if (!ok) return false;
        last = start;
        skip_space(p, nested);
    }
    return true;
}

static bool parse_alternates(parser *p, uint32_t rule, bool nested) {
    for (;;) {
        if (!parse_sequence(p, p->bufs[rule], nested) || !emit(p, p->bufs[rule], G_END, 0)) return false;
        if (p->s >= p->end || *p->s != '|') return true;
        p->s++;
        skip_space(p, true);
    }
}

static bool parse_rule(parser *p) {
    const char *name = p->s;
    while (p->s < p->end && is_word(*p->s)) p->s++;
    if (p->s == name) return fail_at(p, p->s, SPEX_ERR_FORMAT, "expected a rule name");
    uint32_t r = find_rule(p, name, (size_t)(p->s - name));
    if (r == UINT32_MAX) r = add_rule(p, name, (size_t)(p->s - name));
    if (r == UINT32_MAX) return false;
    if (p->defined[r]) return fail_at(p, name, SPEX_ERR_FORMAT, "rule '%s' defined twice", p->g->names + p->g->rules[r].name);
    p->defined[r] = 1;
    p->def_at[r] = (uint32_t)(name - p->src);
    skip_space(p, false);
    if (p->end - p->s < 3 || memcmp(p->s, "::=", 3) != 0) return fail_at(p, p->s, SPEX_ERR_FORMAT, "expected '::='");
    p->s += 3;
    skip_space(p, true);
    p->cur_rule = r;
    p->n_gen = 0;
    if (!parse_alternates(p, r, false)) return false;
    if (p->s < p->end && *p->s != '\n' && *p->s != '\r')
        return fail_at(p, p->s, SPEX_ERR_FORMAT, "unexpected '%c'", *p->s);
    return true;
}

/* Lays the per-rule buffers out into elems[] and alts[]. */
static bool layout(parser *p) {
    spex_grammar *g = p->g;
    uint32_t n_alts = 0;
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t i = 0; i < p->bufs[r]->n; i++) n_alts += p->bufs[r]->e[i].type == G_END;
    g->elems = malloc((p->total + 1) * sizeof *g->elems);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    if (!g->elems || !g->alts) return fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    for (uint32_t r = 0; r < g->n_rules; r++) {
        ebuf *b = p->bufs[r];
        g->rules[r].first_alt = g->n_alts;
        for (uint32_t i = 0; i < b->n; i++) {
            if (i == 0 || b->e[i - 1].type == G_END) g->alts[g->n_alts++] = g->n_elems;
            g->elems[g->n_elems++] = b->e[i];
        }
        g->rules[r].n_alt = g->n_alts - g->rules[r].first_alt;
    }
    return true;
}

/* Left recursion: an edge A -> B when B can start A (all before it can match nothing). */
static bool check_left_recursion(parser *p) {
    spex_grammar *g = p->g;
    uint32_t n = g->n_rules;
    uint8_t *nullable = calloc(n, 1), *color = calloc(n, 1);
    uint32_t *stack = malloc((size_t)n * 3 * sizeof *stack);
    bool ok = nullable && color && stack;
    if (!ok) fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    for (bool changed = ok; changed;) {
        changed = false;
        for (uint32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = 0; a < g->rules[r].n_alt && !nullable[r]; a++) {
                const g_elem *e = g->elems + g->alts[g->rules[r].first_alt + a];
                while (e->type == G_REF && nullable[e->val]) e++;
                if (e->type == G_END) nullable[r] = 1, changed = true;
            }
        }
    }
    /* left[pos]: every element before pos in its alternative can match nothing (one linear
     * pass, so the search below stays linear in the grammar's size) */
    uint8_t *left = ok ? malloc(g->n_elems ? g->n_elems : 1) : NULL;
    if (ok && !left) ok = fail_at(p, p->s, SPEX_ERR_NOMEM, "out of memory");
    for (uint32_t pos = 0, l = 1; ok && pos < g->n_elems; pos++) {
        left[pos] = (uint8_t)l;
        const g_elem *e = &g->elems[pos];
        l = e->type == G_END ? 1 : l && e->type == G_REF && nullable[e->val];
    }
    /* iterative DFS; color 1 = on the path, 2 = done; a frame is (rule, next element, end) */
    for (uint32_t s0 = 0; ok && s0 < n; s0++) {
        if (color[s0]) continue;
        uint32_t sp = 0;
        color[s0] = 1;
        for (uint32_t r = s0;;) {   /* push r */
            const g_rule *rr = &g->rules[r];
            uint32_t lo = rr->n_alt ? g->alts[rr->first_alt] : 0, hi = lo;
            if (rr->n_alt) {
                hi = g->alts[rr->first_alt + rr->n_alt - 1];
                while (g->elems[hi].type != G_END) hi++;
                hi++;
            }
            stack[sp++] = r, stack[sp++] = lo, stack[sp++] = hi;
            break;
        }
        while (ok && sp) {
            uint32_t r = stack[sp - 3], pos = stack[sp - 2]++, hi = stack[sp - 1];
            if (pos >= hi) {
                color[r] = 2;
                sp -= 3;
                continue;
            }
            if (g->elems[pos].type != G_REF || !left[pos]) continue;
            uint32_t t = g->elems[pos].val;
            if (color[t] == 1) {
                ok = fail_at(p, p->src + p->def_at[t], SPEX_ERR_FORMAT, "rule '%s' is left-recursive",
                             g->names + g->rules[t].name);
            } else if (!color[t]) {
                color[t] = 1;
                const g_rule *tr = &g->rules[t];
                uint32_t lo = tr->n_alt ? g->alts[tr->first_alt] : 0, th = lo;
                if (tr->n_alt) {
                    th = g->alts[tr->first_alt + tr->n_alt - 1];
                    while (g->elems[th].type != G_END) th++;
                    th++;
                }
                stack[sp++] = t, stack[sp++] = lo, stack[sp++] = th;
            }
        }
    }
    free(left);
    free(nullable);
    free(color);
    free(stack);
    return ok;
}

static bool compile(parser *p, const char *root_rule) {
    spex_grammar *g = p->g;
    skip_space(p, true);
    while (p->s < p->end) {
        if (!parse_rule(p)) return false;
        skip_space(p, true);
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!p->defined[r])
            return fail_at(p, p->src + p->ref_at[r], SPEX_ERR_FORMAT, "undefined rule '%s'", g->names + g->rules[r].name);
    const char *root = root_rule ? root_rule : "root";
    g->root = find_rule(p, root, strlen(root));
    if (g->root == UINT32_MAX) return fail_at(p, p->src, SPEX_ERR_FORMAT, "no start rule '%s'", root);
    return layout(p) && check_left_recursion(p);
}

spex_status spex_grammar_parse(const char *src, size_t len, const char *root_rule, spex_grammar **out,
                               spex_error *err) {
    if (!out || (!src && len)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "grammar: NULL argument");
    *out = NULL;
    if (len > SPEX_GRAMMAR_MAX_SRC)
        return spex_error_set(err, SPEX_ERR_RANGE, "grammar: %zu bytes, over the %u limit", len, SPEX_GRAMMAR_MAX_SRC);
    spex_grammar *g = calloc(1, sizeof *g);
    if (!g) return spex_error_set(err, SPEX_ERR_NOMEM, "grammar: out of memory");
    parser p = {.src = src ? src : "", .s = src ? src : "", .end = (src ? src : "") + len, .g = g, .err = err};
    bool ok = compile(&p, root_rule);
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (p.bufs[r]) free(p.bufs[r]->e), free(p.bufs[r]);
    free(p.bufs);
    free(p.defined);
    free(p.ref_at);
    free(p.def_at);
    if (!ok) {
        spex_grammar_free(g);
        return p.st;
    }
    *out = g;
    return SPEX_OK;
}

uint32_t spex_grammar_n_rules(const spex_grammar *g) { return g->n_rules; }
