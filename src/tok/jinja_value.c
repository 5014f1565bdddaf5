/*
 * jinja_value.c — the Jinja engine's values: the arena they live in, lists, ordered dicts,
 * truth, equality, str() / repr() as Python prints them, json.dumps as transformers' tojson
 * calls it, and JSON text read into values.
 *
 * What it is not: a Python object model. Ints are int64 (a JSON integer beyond it is read as a
 * float; arithmetic that overflows is an error); dict keys are strings.
 *
 * Python facts followed (CPython 3): repr(float) is the shortest string that reads back,
 * positional when the decimal exponent is in [-4, 16), else d.ddde+XX; repr(str) quotes with '
 * unless the text has ' and no "; json.dumps(ensure_ascii=False) escapes only '"', '\\' and
 * characters below 0x20 (\n \r \t \b \f by name, others \u00XX), writes NaN / Infinity, and
 * with indent puts each item on its own line with "," and ": " separators.
 */
#include "tok/jinja_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Arena                                                                     */
/* ======================================================================== */

struct jchunk {
    jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > JINJA_MAX_ARENA) return NULL;
    jchunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        if (a->used_total + cap > JINJA_MAX_ARENA) return NULL;
        h = malloc(sizeof *h + cap);
        if (!h) return NULL;
        h->next = a->head, h->used = 0, h->cap = cap;
        a->head = h;
        a->used_total += cap;
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free(jarena *a) {
    for (jchunk *h = a->head, *next; h; h = next) {
        next = h->next;
        free(h);
    }
    a->head = NULL;
    a->used_total = 0;
}

/* ======================================================================== */
/* Buffers, lists, dicts                                                     */
/* ======================================================================== */

bool jb_put(jarena *a, jbuf *b, const char *s, size_t n) {
    if (n > JINJA_MAX_OUTPUT || b->n + n > JINJA_MAX_OUTPUT) return false;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = ja_alloc(a, cap);
        if (!p) return false;
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

bool jb_puts(jarena *a, jbuf *b, const char *s) { return jb_put(a, b, s, strlen(s)); }

jlist *jl_new(jarena *a, size_t cap) {
    jlist *l = ja_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = ja_alloc(a, cap * sizeof *l->v);
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

bool jl_push(jarena *a, jlist *l, jv v) {
    if (l->n >= JINJA_MAX_ITEMS) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *p = ja_alloc(a, cap * sizeof *p);
        if (!p) return false;
        if (l->n) memcpy(p, l->v, l->n * sizeof *p);
        l->v = p, l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

jdict *jd_new(jarena *a) { return ja_alloc(a, sizeof(jdict)); }

jv *jd_get(const jdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].u.s.n == kn && memcmp(d->k[i].u.s.p, k, kn) == 0) return &d->v[i];
    return NULL;
}

bool jd_set(jarena *a, jdict *d, const char *k, size_t kn, jv v) {
    jv *have = jd_get(d, k, kn);
    if (have) {
        *have = v;
        return true;
    }
    return jd_append(a, d, jv_str(k, kn), v);
}

/* ======================================================================== */
/* Truth, types, equality                                                    */
/* ======================================================================== */

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0 || v.u.d->ns;
    case JV_MACRO:
    case JV_FUNC: return true;
    }
    return false;
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.u.d->ns ? "Namespace" : "dict";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    }
    return "?";
}

bool jv_is_number(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }

double jv_num(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? (double)v.u.b : 0;
}

bool jv_equal(jv a, jv b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n || a.u.d->ns || b.u.d->ns) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jd_get(b.u.d, a.u.d->k[i].u.s.p, a.u.d->k[i].u.s.n);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_FUNC: return a.u.func == b.u.func;
    default: return false;
    }
}

/* ======================================================================== */
/* UTF-8                                                                     */
/* ======================================================================== */

size_t ju_next(const char *s, size_t n, size_t i) {
    unsigned char b = (unsigned char)s[i];
    size_t len = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 1;
    if (i + len > n) return i + 1;
    for (size_t k = 1; k < len; k++)
        if (((unsigned char)s[i + k] & 0xc0) != 0x80) return i + 1;
    return i + len;
}

size_t ju_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i = ju_next(s, n, i)) c++;
    return c;
}

/* ======================================================================== */
/* str() and repr()                                                          */
/* ======================================================================== */

static bool put_str_repr(jarena *a, jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jb_put(a, b, &q, 1)) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        const char *w = NULL;
        if (ch == '\\') w = "\\\\";
        else if (ch == (unsigned char)q) w = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') w = "\\n";
        else if (ch == '\r') w = "\\r";
        else if (ch == '\t') w = "\\t";
        else if (ch < 0x20 || ch == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", ch), w = esc;
        else if (ch == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0xa0) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)s[++i]);   /* C1 controls, NBSP */
            w = esc;
        }
        if (w ? !jb_puts(a, b, w) : !jb_put(a, b, s + i, 1)) return false;
    }
    return jb_put(a, b, &q, 1);
}

bool jv_str_append(jarena *a, jbuf *b, jv v, bool repr) {
    char num[40];
    switch (v.t) {
    case JV_UNDEF: return repr ? jb_puts(a, b, "Undefined") : true;
    case JV_NONE: return jb_puts(a, b, "None");
    case JV_BOOL: return jb_puts(a, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return jb_puts(a, b, num);
    case JV_FLOAT: spex_tok_float_repr(v.u.f, num); return jb_puts(a, b, num);
    case JV_STR: return repr ? put_str_repr(a, b, v.u.s.p, v.u.s.n) : jb_put(a, b, v.u.s.p, v.u.s.n);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (!jb_puts(a, b, l->tuple ? "(" : "[")) return false;
        for (size_t i = 0; i < l->n; i++)
            if ((i && !jb_puts(a, b, ", ")) || !jv_str_append(a, b, l->v[i], true)) return false;
        if (l->tuple && l->n == 1 && !jb_puts(a, b, ",")) return false;
        return jb_puts(a, b, l->tuple ? ")" : "]");
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->ns) return jb_puts(a, b, "<Namespace>");
        if (!jb_puts(a, b, "{")) return false;
        for (size_t i = 0; i < d->n; i++)
            if ((i && !jb_puts(a, b, ", ")) || !jv_str_append(a, b, d->k[i], true) || !jb_puts(a, b, ": ") ||
                !jv_str_append(a, b, d->v[i], true))
                return false;
        return jb_puts(a, b, "}");
    }
    case JV_MACRO:
        return jb_puts(a, b, "<Macro '") && jb_put(a, b, v.u.macro->name, v.u.macro->name_n) && jb_puts(a, b, "'>");
    case JV_FUNC: return jb_puts(a, b, "<function>");
    }
    return false;
}

/* ======================================================================== */
/* tojson                                                                    */
/* ======================================================================== */

/* The code point of the well-formed UTF-8 character s[i..j). */
static uint32_t cp_of(const char *s, size_t i, size_t j) {
    unsigned char b = (unsigned char)s[i];
    if (j - i == 1) return b;
    uint32_t c = b & (j - i == 2 ? 0x1f : j - i == 3 ? 0x0f : 0x07);
    for (size_t k = i + 1; k < j; k++) c = c << 6 | ((unsigned char)s[k] & 0x3f);
    return c;
}

static bool json_str(jarena *a, jbuf *b, const char *s, size_t n, bool ascii) {
    if (!jb_puts(a, b, "\"")) return false;
    size_t run = 0;   /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0, j; i < n; i = j) {
        j = ju_next(s, n, i);
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        if (ch >= 0x80) {
            if (!ascii || j - i == 1) continue;   /* a malformed byte passes as it is */
            uint32_t cp = cp_of(s, i, j);
            if (cp >= 0x10000)
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff));
            else
                snprintf(esc, sizeof esc, "\\u%04x", cp);
        } else if (ch >= 0x20 && ch != '"' && ch != '\\') {
            continue;
        } else {
            switch (ch) {
            case '"': strcpy(esc, "\\\""); break;
            case '\\': strcpy(esc, "\\\\"); break;
            case '\n': strcpy(esc, "\\n"); break;
            case '\r': strcpy(esc, "\\r"); break;
            case '\t': strcpy(esc, "\\t"); break;
            case '\b': strcpy(esc, "\\b"); break;
            case '\f': strcpy(esc, "\\f"); break;
            default: snprintf(esc, sizeof esc, "\\u%04x", ch);
            }
        }
        if (!jb_put(a, b, s + run, i - run) || !jb_puts(a, b, esc)) return false;
        run = j;
    }
    return jb_put(a, b, s + run, n - run) && jb_puts(a, b, "\"");
}

static bool json_nl(jarena *a, jbuf *b, int indent, int level) {
    if (!jb_puts(a, b, "\n")) return false;
    for (long i = 0; i < (long)indent * level; i++)
        if (!jb_puts(a, b, " ")) return false;
    return true;
}

/* Index order of a dict's keys, sorted bytewise (UTF-8 order = code point order) when sort. */
static size_t *key_order(jarena *a, const jdict *d, bool sort) {
    size_t *ix = ja_alloc(a, (d->n + 1) * sizeof *ix);
    if (!ix) return NULL;
    for (size_t i = 0; i < d->n; i++) ix[i] = i;
    if (!sort) return ix;
    for (size_t i = 1; i < d->n; i++)   /* insertion sort: chat-template dicts are small */
        for (size_t j = i; j > 0; j--) {
            jv x = d->k[ix[j - 1]], y = d->k[ix[j]];
            size_t m = x.u.s.n < y.u.s.n ? x.u.s.n : y.u.s.n;
            int c = memcmp(x.u.s.p, y.u.s.p, m);
            if (c < 0 || (c == 0 && x.u.s.n <= y.u.s.n)) break;
            size_t t = ix[j - 1];
            ix[j - 1] = ix[j], ix[j] = t;
        }
    return ix;
}

/* The separator between items, then the newline and indent of the next one (indent >= 0). */
static bool json_item_sep(jarena *a, jbuf *b, const jjson *o, size_t i, int level) {
    if (i && !jb_put(a, b, o->item_sep.u.s.p, o->item_sep.u.s.n)) return false;
    return o->indent < 0 || json_nl(a, b, o->indent, level);
}

static bool tojson_at(jarena *a, jbuf *b, jv v, const jjson *o, int level, const char **bad) {
    char num[40];
    if (level > JINJA_MAX_EVAL_DEPTH) {
        *bad = "nesting too deep";
        return false;
    }
    switch (v.t) {
    case JV_NONE: return jb_puts(a, b, "null");
    case JV_BOOL: return jb_puts(a, b, v.u.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return jb_puts(a, b, num);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jb_puts(a, b, "NaN");
        if (isinf(v.u.f)) return jb_puts(a, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        spex_tok_float_repr(v.u.f, num);
        return jb_puts(a, b, num);
    case JV_STR: return json_str(a, b, v.u.s.p, v.u.s.n, o->ascii);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->n == 0) return jb_puts(a, b, "[]");
        if (!jb_puts(a, b, "[")) return false;
        for (size_t i = 0; i < l->n; i++)
            if (!json_item_sep(a, b, o, i, level + 1) || !tojson_at(a, b, l->v[i], o, level + 1, bad)) return false;
        if (o->indent >= 0 && !json_nl(a, b, o->indent, level)) return false;
        return jb_puts(a, b, "]");
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->ns || d->is_loop) break;
        if (d->n == 0) return jb_puts(a, b, "{}");
        size_t *ix = key_order(a, d, o->sort);
        if (!ix || !jb_puts(a, b, "{")) return false;
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[ix[i]];
            if (!json_item_sep(a, b, o, i, level + 1) || !json_str(a, b, k.u.s.p, k.u.s.n, o->ascii) ||
                !jb_put(a, b, o->key_sep.u.s.p, o->key_sep.u.s.n) || !tojson_at(a, b, d->v[ix[i]], o, level + 1, bad))
                return false;
        }
        if (o->indent >= 0 && !json_nl(a, b, o->indent, level)) return false;
        return jb_puts(a, b, "}");
    }
    default: break;
    }
    *bad = jv_type_name(v);
    return false;
}

bool jv_tojson(jarena *a, jbuf *b, jv v, const jjson *o, const char **bad) {
    *bad = NULL;
    return tojson_at(a, b, v, o, 0, bad);
}

/* ======================================================================== */
/* JSON text to values                                                       */
/* ======================================================================== */

typedef struct jreader {
    jarena *a;
    const char *p, *e;
    const char *err;
    int depth;
} jreader;

static void rd_ws(jreader *r) {
    while (r->p < r->e && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static bool rd_hex4(jreader *r, uint32_t *cp) {
    if (r->e - r->p < 4) return false;
    uint32_t c = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(r->p[i]);
        if (h < 0) return false;
        c = c << 4 | (uint32_t)h;
    }
    r->p += 4;
    *cp = c;
    return true;
}

/* Appends cp as UTF-8 (a lone surrogate as its 3-byte form, as Python keeps it in the str). */
static bool put_utf8(jarena *a, jbuf *b, uint32_t cp) {
    uint8_t u[4];
    size_t k = spex_tok_utf8_put(cp, u);
    return jb_put(a, b, (const char *)u, k);
}

static bool rd_string(jreader *r, jv *out) {
    jbuf b = {0};
    r->p++;   /* the opening quote */
    for (;;) {
        const char *s = r->p;
        while (r->p < r->e && *r->p != '"' && *r->p != '\\' && (unsigned char)*r->p >= 0x20) r->p++;
        if (!jb_put(r->a, &b, s, (size_t)(r->p - s))) return r->err = "string too long", false;
        if (r->p >= r->e || (unsigned char)*r->p < 0x20) return r->err = "unterminated string", false;
        if (*r->p++ == '"') break;
        if (r->p >= r->e) return r->err = "bad escape", false;
        uint32_t cp;
        switch (*r->p++) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            if (!rd_hex4(r, &cp)) return r->err = "bad \\u escape", false;
            uint32_t lo;
            const char *save = r->p;
            if (cp >= 0xd800 && cp <= 0xdbff && r->e - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
                r->p += 2;
                if (rd_hex4(r, &lo) && lo >= 0xdc00 && lo <= 0xdfff) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else r->p = save;
            }
            break;
        }
        default: return r->err = "bad escape", false;
        }
        if (!put_utf8(r->a, &b, cp)) return r->err = "string too long", false;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

static bool rd_number(jreader *r, jv *out) {
    const char *s = r->p;
    bool is_float = false;
    if (r->p < r->e && *r->p == '-') r->p++;
    if (r->p >= r->e || *r->p < '0' || *r->p > '9') return r->err = "unexpected character", false;
    if (*r->p == '0') r->p++;
    else
        while (r->p < r->e && *r->p >= '0' && *r->p <= '9') r->p++;
    if (r->p < r->e && *r->p == '.') {
        is_float = true, r->p++;
        if (r->p >= r->e || *r->p < '0' || *r->p > '9') return r->err = "bad number", false;
        while (r->p < r->e && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    if (r->p < r->e && (*r->p == 'e' || *r->p == 'E')) {
        is_float = true, r->p++;
        if (r->p < r->e && (*r->p == '+' || *r->p == '-')) r->p++;
        if (r->p >= r->e || *r->p < '0' || *r->p > '9') return r->err = "bad number", false;
        while (r->p < r->e && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    char tmp[64];
    size_t n = (size_t)(r->p - s);
    char *heap = NULL, *t = tmp;
    if (n >= sizeof tmp) {
        heap = malloc(n + 1);
        if (!heap) return r->err = "out of memory", false;
        t = heap;
    }
    memcpy(t, s, n);
    t[n] = '\0';
    if (!is_float) {
        errno = 0;
        long long i = strtoll(t, NULL, 10);
        if (errno != ERANGE) *out = jv_int(i);
        else is_float = true;   /* beyond int64: a float (documented) */
    }
    if (is_float) *out = jv_float(strtod(t, NULL));
    free(heap);
    return true;
}

static bool rd_value(jreader *r, jv *out);

bool jd_append(jarena *a, jdict *d, jv key, jv v) {
    if (d->n >= JINJA_MAX_ITEMS) return false;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(a, cap * sizeof *nk), *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nk || !nv) return false;
        if (d->n) memcpy(nk, d->k, d->n * sizeof *nk), memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = v;
    return true;
}

typedef struct key_ix {
    const char *p;
    size_t n, i;
} key_ix;

static int key_ix_cmp(const void *x, const void *y) {
    const key_ix *a = x, *b = y;
    size_t m = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->p, b->p, m);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

bool jd_dedup(jarena *a, jdict *d) {
    if (d->n < 2) return true;
    key_ix *ix = ja_alloc(a, d->n * sizeof *ix);
    bool *drop = ja_alloc(a, d->n);
    if (!ix || !drop) return false;
    for (size_t i = 0; i < d->n; i++) ix[i] = (key_ix){d->k[i].u.s.p, d->k[i].u.s.n, i};
    qsort(ix, d->n, sizeof *ix, key_ix_cmp);
    for (size_t g = 0, e; g < d->n; g = e) {
        for (e = g + 1; e < d->n && ix[e].n == ix[g].n && !memcmp(ix[e].p, ix[g].p, ix[g].n); e++) drop[ix[e].i] = true;
        if (e - g > 1) d->v[ix[g].i] = d->v[ix[e - 1].i];
    }
    size_t m = 0;
    for (size_t i = 0; i < d->n; i++)
        if (!drop[i]) d->k[m] = d->k[i], d->v[m++] = d->v[i];
    d->n = m;
    return true;
}

static bool rd_container(jreader *r, jv *out) {
    bool obj = *r->p++ == '{';
    char close = obj ? '}' : ']';
    jlist *l = obj ? NULL : jl_new(r->a, 0);
    jdict *d = obj ? jd_new(r->a) : NULL;
    if ((obj && !d) || (!obj && !l)) return r->err = "out of memory", false;
    rd_ws(r);
    if (r->p < r->e && *r->p == close) {
        r->p++;
    } else {
        for (;;) {
            rd_ws(r);
            jv key = {0}, val;
            if (obj) {
                if (r->p >= r->e || *r->p != '"') return r->err = "expected a key", false;
                if (!rd_string(r, &key)) return false;
                rd_ws(r);
                if (r->p >= r->e || *r->p++ != ':') return r->err = "expected ':'", false;
            }
            if (!rd_value(r, &val)) return false;
            if (obj ? !jd_append(r->a, d, key, val) : !jl_push(r->a, l, val)) return r->err = "too many items", false;
            rd_ws(r);
            if (r->p >= r->e) return r->err = "unterminated container", false;
            if (*r->p == close) {
                r->p++;
                break;
            }
            if (*r->p++ != ',') return r->err = "expected ',' or a closing bracket", false;
        }
    }
    if (obj && !jd_dedup(r->a, d)) return r->err = "out of memory", false;
    if (obj) out->t = JV_DICT, out->u.d = d;
    else out->t = JV_LIST, out->u.l = l;
    out->why = NULL;
    return true;
}

static bool rd_value(jreader *r, jv *out) {
    rd_ws(r);
    if (r->p >= r->e) return r->err = "unexpected end", false;
    if (++r->depth > JINJA_MAX_PARSE_DEPTH) return r->err = "nesting too deep", false;
    bool ok;
    size_t left = (size_t)(r->e - r->p);
    switch (*r->p) {
    case '{':
    case '[': ok = rd_container(r, out); break;
    case '"': ok = rd_string(r, out); break;
    case 't':
        ok = left >= 4 && memcmp(r->p, "true", 4) == 0;
        if (ok) r->p += 4, *out = jv_bool(true);
        break;
    case 'f':
        ok = left >= 5 && memcmp(r->p, "false", 5) == 0;
        if (ok) r->p += 5, *out = jv_bool(false);
        break;
    case 'n':
        ok = left >= 4 && memcmp(r->p, "null", 4) == 0;
        if (ok) r->p += 4, *out = jv_none();
        break;
    default: ok = rd_number(r, out); break;
    }
    if (!ok && !r->err) r->err = "unexpected character";
    r->depth--;
    return ok;
}

bool jv_from_json(jarena *a, const char *s, size_t n, jv *out, char *err, size_t err_cap) {
    jreader r = {a, s, s + n, NULL, 0};
    if (rd_value(&r, out)) {
        rd_ws(&r);
        if (r.p == r.e) return true;
        r.err = "text after the value";
    }
    snprintf(err, err_cap, "JSON offset %zu: %s", (size_t)(r.p - s), r.err ? r.err : "bad value");
    return false;
}
