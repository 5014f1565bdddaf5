/*
 * jinja_lex.c — the Jinja engine's lexer: template text to tokens, with Jinja2's whitespace
 * control applied as transformers configures it for chat templates.
 *
 * What it is: text, {{ }}, {% %}, {# #} and {% raw %} split into tokens; inside tags names,
 * integers, floats, strings (Python escapes) and operators. Whitespace rules (jinja2 3.1,
 * Environment(trim_blocks=True, lstrip_blocks=True), which transformers' chat templating
 * uses, as do llama.cpp's --jinja and vLLM):
 *  - newlines \r\n and \r read as \n, and one trailing newline of the template is dropped
 *    (keep_trailing_newline=False);
 *  - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
 *  - trim_blocks: one newline right after "%}" or "#}" is dropped ("+%}" keeps it);
 *  - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or "{#" are dropped
 *    ("{%+" keeps them), never before "{{";
 *  - "}}" and "%}" inside open brackets do not end the tag.
 * What it is not: line statements, custom delimiters, or Unicode names.
 */
#include "tok/jinja_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jarena *a;
    const char *s;   /* normalised source */
    size_t n, pos;
    /* line / column of offset lc_pos, advanced monotonically for the tokens' positions */
    size_t lc_pos;
    int line, col;
    jtok *toks;
    size_t n_toks, cap;
    char *err;
    size_t err_cap;
} lexer;

/* Python's str.isspace() for ASCII (what \s and rstrip() take; other Unicode spaces are left). */
static bool is_ws(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f); }

static void at_offset(lexer *L, size_t off, int *line, int *col) {
    for (; L->lc_pos < off && L->lc_pos < L->n; L->lc_pos++) {
        if (L->s[L->lc_pos] == '\n') L->line++, L->col = 1;
        else if (((unsigned char)L->s[L->lc_pos] & 0xc0) != 0x80) L->col++;
    }
    *line = L->line, *col = L->col;
}

static bool lex_fail(lexer *L, size_t off, const char *what) {
    int line, col;
    at_offset(L, off, &line, &col);
    snprintf(L->err, L->err_cap, "line %d col %d: %s", line, col, what);
    return false;
}

static jtok *emit(lexer *L, jtok_kind kind, size_t off) {
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = ja_alloc(L->a, cap * sizeof *t);
        if (!t) return NULL;
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof *t);
        L->toks = t, L->cap = cap;
    }
    jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    at_offset(L, off, &t->line, &t->col);
    return t;
}

static bool emit_text(lexer *L, size_t off, size_t n) {
    if (n == 0) return true;
    jtok *t = emit(L, JT_TEXT, off);
    if (!t) return lex_fail(L, off, "out of memory");
    t->p = L->s + off, t->n = n;
    return true;
}

/* ---- strings and numbers ------------------------------------------------------------------ */

static int hexv(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static bool put_cp(jarena *a, jbuf *b, uint32_t cp) {
    uint8_t u[4];
    size_t k = spex_tok_utf8_put(cp, u);
    return jb_put(a, b, (const char *)u, k);
}

/* A quoted string at L->pos, decoded with Python's escapes (\n \t \r \\ \' \" \a \b \f \v,
 * \ooo, \xhh, \uhhhh, \Uhhhhhhhh, backslash-newline); an unknown escape keeps its backslash. */
static bool lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->s[L->pos++];
    jbuf b = {0};
    for (;;) {
        if (L->pos >= L->n) return lex_fail(L, start, "unterminated string");
        char ch = L->s[L->pos++];
        if (ch == q) break;
        bool ok = true;
        if (ch != '\\' || L->pos >= L->n) {
            ok = jb_put(L->a, &b, &ch, 1);
        } else {
            char e = L->s[L->pos++];
            const char *simple = strchr("nrt\\'\"abfv", e);
            static const char map[] = "\n\r\t\\'\"\a\b\f\v";
            if (e && simple) {
                ok = jb_put(L->a, &b, &map[simple - "nrt\\'\"abfv"], 1);
            } else if (e == '\n') {
                /* line continuation: nothing */
            } else if (e >= '0' && e <= '7') {
                uint32_t v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && L->pos < L->n && L->s[L->pos] >= '0' && L->s[L->pos] <= '7'; k++)
                    v = v * 8 + (uint32_t)(L->s[L->pos++] - '0');
                ok = put_cp(L->a, &b, v);
            } else if (e == 'x' || e == 'u' || e == 'U') {
                int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t v = 0;
                for (int k = 0; k < digits; k++) {
                    int h = L->pos < L->n ? hexv(L->s[L->pos]) : -1;
                    if (h < 0) return lex_fail(L, L->pos, "truncated \\x, \\u or \\U escape in a string");
                    v = v << 4 | (uint32_t)h, L->pos++;
                }
                if (v > 0x10ffff) return lex_fail(L, L->pos, "escape beyond U+10FFFF in a string");
                ok = put_cp(L->a, &b, v);
            } else {
                char two[2] = {'\\', e};
                ok = jb_put(L->a, &b, two, 2);
            }
        }
        if (!ok) return lex_fail(L, start, "string too long");
    }
    jtok *t = emit(L, JT_STRING, start);
    if (!t) return lex_fail(L, start, "out of memory");
    t->p = b.p ? b.p : "", t->n = b.n;
    return true;
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Digits with single '_' separators from L->pos; appends them to d (no '_'). */
static size_t digits(lexer *L, char *d, size_t dn, size_t cap) {
    while (L->pos < L->n) {
        char ch = L->s[L->pos];
        if (is_digit(ch)) {
            if (dn + 1 < cap) d[dn++] = ch;
            L->pos++;
        } else if (ch == '_' && L->pos + 1 < L->n && is_digit(L->s[L->pos + 1]) && dn > 0) {
            L->pos++;
        } else {
            break;
        }
    }
    return dn;
}

static bool lex_number(lexer *L) {
    size_t start = L->pos;
    char d[400];
    size_t dn = digits(L, d, 0, sizeof d - 4);
    bool is_float = false;
    if (L->pos + 1 < L->n && L->s[L->pos] == '.' && is_digit(L->s[L->pos + 1])) {
        is_float = true;
        d[dn++] = '.', L->pos++;
        dn = digits(L, d, dn, sizeof d - 4);
    }
    if (L->pos < L->n && (L->s[L->pos] == 'e' || L->s[L->pos] == 'E')) {
        size_t p = L->pos + 1;
        if (p < L->n && (L->s[p] == '+' || L->s[p] == '-')) p++;
        if (p < L->n && is_digit(L->s[p])) {
            is_float = true;
            d[dn++] = 'e';
            if (L->s[L->pos + 1] == '-') d[dn++] = '-';
            L->pos = p;
            dn = digits(L, d, dn, sizeof d - 4);
        }
    }
    d[dn] = '\0';
    if (!is_float && d[0] == '0' && strspn(d, "0") != dn)
        return lex_fail(L, start, "leading zeros in an integer literal");   /* jinja2 reads 007 as 00, 7 */
    jtok *t = emit(L, is_float ? JT_FLOAT : JT_INT, start);
    if (!t) return lex_fail(L, start, "out of memory");
    if (is_float) {
        t->f = strtod(d, NULL);
    } else {
        errno = 0;
        t->i = strtoll(d, NULL, 10);
        if (errno == ERANGE) return lex_fail(L, start, "integer literal beyond 64 bits");
    }
    return true;
}

/* ---- tags --------------------------------------------------------------------------------- */

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};

/* The tokens of one {{ }} or {% %} up to and including its end marker. */
static bool lex_tag(lexer *L, bool block, bool *line_starting) {
    int depth = 0;
    char stack[JINJA_MAX_PARSE_DEPTH];
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
        if (L->pos >= L->n) return lex_fail(L, L->pos, block ? "unexpected end of template: missing '%}'" : "unexpected end of template: missing '}}'");
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        if (depth == 0) {
            const char *end = block ? "%}" : "}}";
            bool minus = left >= 3 && p[0] == '-' && memcmp(p + 1, end, 2) == 0;
            bool plus = block && left >= 3 && p[0] == '+' && memcmp(p + 1, end, 2) == 0;
            if (minus || plus || (left >= 2 && memcmp(p, end, 2) == 0)) {
                if (!emit(L, block ? JT_BLOCK_END : JT_VAR_END, L->pos)) return lex_fail(L, L->pos, "out of memory");
                L->pos += minus || plus ? 3 : 2;
                if (minus)
                    while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
                else if (block && !plus && L->pos < L->n && L->s[L->pos] == '\n')
                    L->pos++;
                *line_starting = L->pos > 0 && L->s[L->pos - 1] == '\n';
                return true;
            }
        }
        char ch = *p;
        if (ch == '"' || ch == '\'') {
            if (!lex_string(L)) return false;
            continue;
        }
        if (is_digit(ch)) {
            if (!lex_number(L)) return false;
            continue;
        }
        if (ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            size_t start = L->pos;
            while (L->pos < L->n && (L->s[L->pos] == '_' || is_digit(L->s[L->pos]) ||
                                     (L->s[L->pos] >= 'a' && L->s[L->pos] <= 'z') || (L->s[L->pos] >= 'A' && L->s[L->pos] <= 'Z')))
                L->pos++;
            jtok *t = emit(L, JT_NAME, start);
            if (!t) return lex_fail(L, start, "out of memory");
            t->p = L->s + start, t->n = L->pos - start;
            continue;
        }
        int op = 0;
        for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
            if (left >= 2 && p[0] == ops2[k][0] && p[1] == ops2[k][1]) op = JOP(p[0], p[1]);
        if (!op && strchr("+-*/%~()[]{},.:|=<>;", ch) && ch) op = JOP(ch, 0);
        if (!op) return lex_fail(L, L->pos, "unexpected character in a tag");
        if (ch == '(' || ch == '[' || ch == '{') {
            if (depth >= JINJA_MAX_PARSE_DEPTH) return lex_fail(L, L->pos, "brackets nested too deep");
            stack[depth++] = ch;
        } else if (ch == ')' || ch == ']' || ch == '}') {
            char open = ch == ')' ? '(' : ch == ']' ? '[' : '{';
            if (depth == 0 || stack[depth - 1] != open) return lex_fail(L, L->pos, "unbalanced bracket");
            depth--;
        }
        jtok *t = emit(L, JT_OP, L->pos);
        if (!t) return lex_fail(L, L->pos, "out of memory");
        t->op = op, t->p = p, t->n = op >> 8 ? 2 : 1;
        L->pos += t->n;
    }
}

/* "raw" / "endraw" then the tag's end at p (after "{%" and its sign): the offset past the
 * end marker, or 0 when the tag is not that word alone; *plain: it ended with a bare "%}". */
static size_t raw_tag(const lexer *L, size_t p, const char *word, bool *plain) {
    *plain = false;
    while (p < L->n && is_ws(L->s[p])) p++;
    size_t w = strlen(word);
    if (L->n - p < w || memcmp(L->s + p, word, w) != 0) return 0;
    p += w;
    if (p < L->n && (L->s[p] == '_' || is_digit(L->s[p]) || ((L->s[p] | 0x20) >= 'a' && (L->s[p] | 0x20) <= 'z'))) return 0;
    while (p < L->n && is_ws(L->s[p])) p++;
    if (L->n - p >= 3 && memcmp(L->s + p, "-%}", 3) == 0) {
        p += 3;
        while (p < L->n && is_ws(L->s[p])) p++;
        return p;
    }
    if (L->n - p >= 3 && memcmp(L->s + p, "+%}", 3) == 0) return p + 3;
    if (L->n - p >= 2 && memcmp(L->s + p, "%}", 2) == 0) return *plain = true, p + 2;
    return 0;
}

/* The text before a tag, trimmed as the tag's sign and lstrip_blocks say: its new length. */
static size_t trim_before(const lexer *L, size_t start, size_t len, char sign, bool block_or_comment,
                          bool line_starting) {
    const char *t = L->s + start;
    if (sign == '-') {
        while (len && is_ws(t[len - 1])) len--;
        return len;
    }
    if (sign == '+' || !block_or_comment) return len;
    size_t l_pos = len;
    while (l_pos && t[l_pos - 1] != '\n') l_pos--;
    if (l_pos == 0 && !line_starting) return len;
    for (size_t i = l_pos; i < len; i++)
        if (t[i] != ' ' && t[i] != '\t') return len;
    return l_pos;
}

static bool lex_raw(lexer *L, size_t body, bool *line_starting) {
    for (size_t p = body; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = q < L->n && (L->s[q] == '-' || L->s[q] == '+') ? L->s[q++] : 0;
        bool plain;
        size_t end = raw_tag(L, q, "endraw", &plain);
        if (!end) continue;
        if (!emit_text(L, body, trim_before(L, body, p - body, sign, true, false))) return false;
        if (plain && end < L->n && L->s[end] == '\n') end++;   /* trim_blocks */
        L->pos = end;
        *line_starting = L->s[end - 1] == '\n';
        return true;
    }
    return lex_fail(L, body, "missing {% endraw %}");
}

bool jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks, char *err, size_t err_cap) {
    lexer L = {.a = a, .line = 1, .col = 1, .err = err, .err_cap = err_cap};
    char *s = ja_alloc(a, n + 1);
    if (!s) return snprintf(err, err_cap, "out of memory"), false;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n') m--;
    L.s = s, L.n = m;
    bool line_starting = true;
    while (L.pos < L.n) {
        size_t k = L.pos;
        while (k + 1 < L.n && !(L.s[k] == '{' && (L.s[k + 1] == '{' || L.s[k + 1] == '%' || L.s[k + 1] == '#'))) k++;
        if (k + 1 >= L.n) {
            if (!emit_text(&L, L.pos, L.n - L.pos)) return false;
            break;
        }
        char kind = L.s[k + 1];
        size_t after = k + 2;
        char sign = after < L.n && (L.s[after] == '-' || L.s[after] == '+') ? L.s[after++] : 0;
        size_t text_n = trim_before(&L, L.pos, k - L.pos, sign, kind != '{', line_starting);
        if (!emit_text(&L, L.pos, text_n)) return false;
        if (kind == '#') {
            size_t e = after;
            while (e + 1 < L.n && !(L.s[e] == '#' && L.s[e + 1] == '}')) e++;
            if (e + 1 >= L.n) return lex_fail(&L, k, "missing end of comment tag");
            char esign = e > after && (L.s[e - 1] == '-' || L.s[e - 1] == '+') ? L.s[e - 1] : 0;
            L.pos = e + 2;
            if (esign == '-')
                while (L.pos < L.n && is_ws(L.s[L.pos])) L.pos++;
            else if (esign != '+' && L.pos < L.n && L.s[L.pos] == '\n')
                L.pos++;
            line_starting = L.s[L.pos - 1] == '\n';
            continue;
        }
        bool plain;
        size_t raw = kind == '%' ? raw_tag(&L, after, "raw", &plain) : 0;
        if (raw) {
            if (!lex_raw(&L, raw, &line_starting)) return false;
            continue;
        }
        if (!emit(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, k)) return lex_fail(&L, k, "out of memory");
        L.pos = after;
        if (!lex_tag(&L, kind == '%', &line_starting)) return false;
    }
    if (!emit(&L, JT_EOF, L.n)) return lex_fail(&L, L.n, "out of memory");
    *toks = L.toks, *n_toks = L.n_toks;
    return true;
}
