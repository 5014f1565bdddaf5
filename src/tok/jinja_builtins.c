/*
 * jinja_builtins.c — the Jinja engine's filters, tests, methods and global functions: the
 * ones real chat templates call (docs/chat-templates.md has the list).
 *
 * What it is: jinja2 3.1's behaviour for each, with transformers' additions: tojson is
 * json.dumps(x, ensure_ascii=False, indent=..., sort_keys=...) (not jinja2's HTML-safe one),
 * raise_exception(msg) fails the render with msg, strftime_now(fmt) formats the local time.
 * Python string methods (startswith, strip, split, ...) work on code points, and "whitespace"
 * is str.isspace()'s set. What it is not: case mapping beyond ASCII (lower/upper/title change
 * A-Z / a-z only), printf-style '%' formatting, or filters no chat template uses.
 */
#include "tok/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_IS(lit) (name_n == sizeof(lit) - 1 && memcmp(name, lit, sizeof(lit) - 1) == 0)

/* The i-th positional argument or the keyword kw, else dflt. */
static jv arg(const jargs *a, size_t i, const char *kw, jv dflt) {
    if (i < a->n_pos) return a->pos[i];
    for (size_t k = 0; kw && k < a->n_kw; k++)
        if (a->kw_names[k]->name_n == strlen(kw) && !memcmp(a->kw_names[k]->name, kw, a->kw_names[k]->name_n))
            return a->kw[k];
    return dflt;
}

static bool oom(jctx *c, const jnode *at) { return jx_fail(c, at, SPEX_ERR_RANGE, "memory or size limit reached"); }

static bool need_str(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.t == JV_STR) return true;
    if (v.t == JV_UNDEF && v.why) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "'%s' is undefined", v.why);
    return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "%s needs a string, not '%s'", what, jv_type_name(v));
}


/* ======================================================================== */
/* Strings                                                                   */
/* ======================================================================== */

/* Code points Python's str.isspace() accepts. */
static bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static uint32_t cp_at(const char *s, size_t i, size_t j) {
    unsigned char b = (unsigned char)s[i];
    if (j - i == 1) return b;
    uint32_t c = b & (j - i == 2 ? 0x1f : j - i == 3 ? 0x0f : 0x07);
    for (size_t k = i + 1; k < j; k++) c = c << 6 | ((unsigned char)s[k] & 0x3f);
    return c;
}

/* Whether the character s[i..j) is one to strip: whitespace, or one of chars' characters. */
static bool strip_hit(const char *s, size_t i, size_t j, const jv *chars) {
    if (!chars) return is_py_space(cp_at(s, i, j));
    const char *cs = chars->u.s.p;
    size_t cn = chars->u.s.n;
    for (size_t k = 0, l; k < cn; k = l) {
        l = ju_next(cs, cn, k);
        if (l - k == j - i && !memcmp(cs + k, s + i, j - i)) return true;
    }
    return false;
}

static jv strip(jv s, const jv *chars, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    if (left)
        while (b < e) {
            size_t j = ju_next(p, e, b);
            if (!strip_hit(p, b, j, chars)) break;
            b = j;
        }
    if (right)
        while (e > b) {
            size_t i = e - 1;
            while (i > b && ((unsigned char)p[i] & 0xc0) == 0x80 && e - i < 4) i--;
            if (ju_next(p, e, i) != e) i = e - 1;
            if (!strip_hit(p, i, e, chars)) break;
            e = i;
        }
    return jv_str(p + b, e - b);
}

/* mode 0 lower, 1 upper, 2 capitalize, 3 the title filter (jinja2: words start after
 * whitespace or one of "-({[<"), 4 str.title() (Python: after any character that is not a
 * letter). */
static bool map_case(jctx *c, const jnode *at, jv s, int mode, jv *out) {
    char *p = ja_alloc(c->a, s.u.s.n + 1);
    if (!p) return oom(c, at);
    bool word_start = true;
    for (size_t i = 0; i < s.u.s.n; i++) {
        char ch = s.u.s.p[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode >= 3 && word_start);
        if (alpha) ch = up ? (char)(ch & ~0x20) : (char)(ch | 0x20);
        if (mode == 4) word_start = !alpha && (unsigned char)ch < 0x80;
        else word_start = ch && strchr(" \t\n\r\f\v-({[<", ch) != NULL;
        p[i] = ch;
    }
    *out = jv_str(p, s.u.s.n);
    return true;
}

static bool str_replace(jctx *c, const jnode *at, jv s, jv old, jv rep, int64_t count, jv *out) {
    jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {   /* Python inserts rep before every character and at the end */
        for (size_t j; i <= s.u.s.n && (count < 0 || done < count); i = j, done++) {
            if (!jb_put(c->a, &b, rep.u.s.p, rep.u.s.n)) return oom(c, at);
            if (i == s.u.s.n) {
                i++;
                break;
            }
            j = ju_next(s.u.s.p, s.u.s.n, i);
            if (!jb_put(c->a, &b, s.u.s.p + i, j - i)) return oom(c, at);
        }
        if (i < s.u.s.n && !jb_put(c->a, &b, s.u.s.p + i, s.u.s.n - i)) return oom(c, at);
    } else {
        while (count < 0 || done < count) {
            const char *hit = memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n);
            if (!hit) break;
            size_t k = (size_t)(hit - s.u.s.p);
            if (!jb_put(c->a, &b, s.u.s.p + i, k - i) || !jb_put(c->a, &b, rep.u.s.p, rep.u.s.n)) return oom(c, at);
            i = k + old.u.s.n, done++;
        }
        if (!jb_put(c->a, &b, s.u.s.p + i, s.u.s.n - i)) return oom(c, at);
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

/* Python's str.split(sep=None, maxsplit=-1). */
static bool str_split(jctx *c, const jnode *at, jv s, jv sep, int64_t maxsplit, jv *out) {
    jlist *l = jl_new(c->a, 0);
    if (!l) return oom(c, at);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    if (sep.t != JV_STR) {
        while (i < n) {
            while (i < n && is_py_space(cp_at(p, i, ju_next(p, n, i)))) i = ju_next(p, n, i);
            if (i >= n) break;
            size_t b = i;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                jv rest = strip(jv_str(p + b, n - b), NULL, false, true);
                if (!jl_push(c->a, l, rest)) return oom(c, at);
                break;
            }
            while (i < n && !is_py_space(cp_at(p, i, ju_next(p, n, i)))) i = ju_next(p, n, i);
            if (!jl_push(c->a, l, jv_str(p + b, i - b))) return oom(c, at);
        }
    } else {
        if (sep.u.s.n == 0) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "empty separator");
        for (;;) {
            const char *hit = maxsplit >= 0 && (int64_t)l->n >= maxsplit ? NULL : memmem(p + i, n - i, sep.u.s.p, sep.u.s.n);
            size_t e = hit ? (size_t)(hit - p) : n;
            if (!jl_push(c->a, l, jv_str(p + i, e - i))) return oom(c, at);
            if (!hit) break;
            i = e + sep.u.s.n;
        }
    }
    *out = jv_list(l);
    return true;
}

static bool affix(jv s, jv x, bool start) {
    if (x.t != JV_STR || x.u.s.n > s.u.s.n) return false;
    return !memcmp(start ? s.u.s.p : s.u.s.p + s.u.s.n - x.u.s.n, x.u.s.p, x.u.s.n);
}

static bool str_method(jctx *c, const jnode *at, jv s, const char *name, size_t name_n, const jargs *a, jv *out,
                       bool *found) {
    jv none = jv_none();
    if (NAME_IS("startswith") || NAME_IS("endswith")) {
        jv x = arg(a, 0, NULL, none);
        bool r = false;
        if (x.t == JV_LIST)
            for (size_t i = 0; i < x.u.l->n; i++) r |= affix(s, x.u.l->v[i], name[0] == 's');
        else if (!need_str(c, at, x, name_n == 10 ? "startswith" : "endswith")) return false;
        else r = affix(s, x, name[0] == 's');
        *out = jv_bool(r);
        return true;
    }
    if (NAME_IS("strip") || NAME_IS("lstrip") || NAME_IS("rstrip")) {
        jv ch = arg(a, 0, NULL, none);
        if (ch.t != JV_NONE && !need_str(c, at, ch, "strip")) return false;
        *out = strip(s, ch.t == JV_STR ? &ch : NULL, name[0] != 'r', name[0] != 'l');
        return true;
    }
    if (NAME_IS("split")) {
        jv sep = arg(a, 0, "sep", none), mx = arg(a, 1, "maxsplit", jv_int(-1));
        if (sep.t != JV_NONE && !need_str(c, at, sep, "split")) return false;
        return str_split(c, at, s, sep, mx.t == JV_INT ? mx.u.i : -1, out);
    }
    if (NAME_IS("replace")) {
        jv o = arg(a, 0, NULL, none), r = arg(a, 1, NULL, none), k = arg(a, 2, NULL, jv_int(-1));
        if (!need_str(c, at, o, "replace") || !need_str(c, at, r, "replace")) return false;
        return str_replace(c, at, s, o, r, k.t == JV_INT ? k.u.i : -1, out);
    }
    if (NAME_IS("upper") || NAME_IS("lower") || NAME_IS("capitalize") || NAME_IS("title"))
        return map_case(c, at, s, NAME_IS("lower") ? 0 : NAME_IS("upper") ? 1 : NAME_IS("capitalize") ? 2 : 4, out);
    if (NAME_IS("find") || NAME_IS("count") || NAME_IS("rfind")) {
        jv x = arg(a, 0, NULL, none);
        if (!need_str(c, at, x, name)) return false;
        int64_t r = NAME_IS("count") ? 0 : -1;
        for (size_t i = 0; i + x.u.s.n <= s.u.s.n;) {
            if (memcmp(s.u.s.p + i, x.u.s.p, x.u.s.n) != 0) {
                i++;
                continue;
            }
            if (NAME_IS("count")) {
                r++;
                i += x.u.s.n ? x.u.s.n : 1;
                continue;
            }
            r = (int64_t)ju_count(s.u.s.p, i);
            if (NAME_IS("find")) break;
            i++;
        }
        *out = jv_int(r);
        return true;
    }
    if (NAME_IS("join")) {
        jlist *items;
        jbuf b = {0};
        if (!jinja_iter(c, at, arg(a, 0, NULL, none), &items)) return false;
        for (size_t i = 0; i < items->n; i++) {
            if (!need_str(c, at, items->v[i], "join")) return false;
            if ((i && !jb_put(c->a, &b, s.u.s.p, s.u.s.n)) || !jb_put(c->a, &b, items->v[i].u.s.p, items->v[i].u.s.n))
                return oom(c, at);
        }
        *out = jv_str(b.p ? b.p : "", b.n);
        return true;
    }
    if (NAME_IS("splitlines")) {
        jlist *l = jl_new(c->a, 0);
        if (!l) return oom(c, at);
        size_t i = 0;
        while (i < s.u.s.n) {
            size_t e = i;
            while (e < s.u.s.n && s.u.s.p[e] != '\n' && s.u.s.p[e] != '\r') e++;
            if (!jl_push(c->a, l, jv_str(s.u.s.p + i, e - i))) return oom(c, at);
            if (e < s.u.s.n && s.u.s.p[e] == '\r' && e + 1 < s.u.s.n && s.u.s.p[e + 1] == '\n') e++;
            i = e + 1;
        }
        *out = jv_list(l);
        return true;
    }
    *found = false;
    return false;
}

/* ======================================================================== */
/* Methods                                                                   */
/* ======================================================================== */

static bool dict_items(jctx *c, const jnode *at, const jdict *d, int which, jv *out) {   /* 0 items 1 keys 2 values */
    jlist *l = jl_new(c->a, d->n);
    if (!l) return oom(c, at);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 1) l->v[i] = d->k[i];
        else if (which == 2) l->v[i] = d->v[i];
        else {
            jlist *pair = jl_new(c->a, 2);
            if (!pair) return oom(c, at);
            pair->v[0] = d->k[i], pair->v[1] = d->v[i], pair->n = 2, pair->tuple = true;
            l->v[i] = jv_list(pair);
        }
    }
    l->n = d->n;
    *out = jv_list(l);
    return true;
}

bool jinja_method(jctx *c, const jnode *at, jv obj, const char *name, size_t name_n, const jargs *a, jv *out,
                  bool *found) {
    *found = true;
    if (obj.t == JV_STR) return str_method(c, at, obj, name, name_n, a, out, found);
    if (obj.t == JV_DICT && obj.u.d->is_loop && NAME_IS("cycle")) {
        jv *i = jd_get(obj.u.d, "index0", 6);
        if (a->n_pos == 0) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "no items for cycling given");
        *out = a->pos[(size_t)i->u.i % a->n_pos];
        return true;
    }
    if (obj.t == JV_DICT && !obj.u.d->ns && !obj.u.d->is_loop) {
        if (NAME_IS("get")) {
            jv k = arg(a, 0, NULL, jv_none());
            jv *v = k.t == JV_STR ? jd_get(obj.u.d, k.u.s.p, k.u.s.n) : NULL;
            *out = v ? *v : arg(a, 1, NULL, jv_none());
            return true;
        }
        if (NAME_IS("items")) return dict_items(c, at, obj.u.d, 0, out);
        if (NAME_IS("keys")) return dict_items(c, at, obj.u.d, 1, out);
        if (NAME_IS("values")) return dict_items(c, at, obj.u.d, 2, out);
    }
    if ((obj.t == JV_DICT && !obj.u.d->ns && !obj.u.d->is_loop) || obj.t == JV_LIST) {
        static const char *const mutating[] = {"append", "pop", "update", "extend", "insert", "remove", "clear", "setdefault", "sort", "reverse", NULL};
        for (size_t i = 0; mutating[i]; i++)
            if (strlen(mutating[i]) == name_n && !memcmp(mutating[i], name, name_n))
                return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "%.*s() modifies a %s: not allowed in a sandboxed template",
                               (int)name_n, name, jv_type_name(obj));
    }
    *found = false;
    return false;
}

/* ======================================================================== */
/* Tests                                                                     */
/* ======================================================================== */

bool jinja_test(jctx *c, const jnode *at, const char *name, size_t name_n, jv x, const jargs *a, jv *out) {
    jv y = arg(a, 0, NULL, jv_undef(NULL));
    bool r;
    if (NAME_IS("defined")) r = x.t != JV_UNDEF;
    else if (NAME_IS("undefined")) r = x.t == JV_UNDEF;
    else if (NAME_IS("none")) r = x.t == JV_NONE;
    else if (NAME_IS("string")) r = x.t == JV_STR;
    else if (NAME_IS("mapping")) r = x.t == JV_DICT && !x.u.d->ns && !x.u.d->is_loop;
    else if (NAME_IS("iterable")) r = x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || (x.t == JV_DICT && !x.u.d->ns && !x.u.d->is_loop);
    else if (NAME_IS("sequence")) r = x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || (x.t == JV_DICT && !x.u.d->ns && !x.u.d->is_loop);
    else if (NAME_IS("number")) r = jv_is_number(x);
    else if (NAME_IS("integer")) r = x.t == JV_INT;
    else if (NAME_IS("float")) r = x.t == JV_FLOAT;
    else if (NAME_IS("boolean")) r = x.t == JV_BOOL;
    else if (NAME_IS("true")) r = x.t == JV_BOOL && x.u.b;
    else if (NAME_IS("false")) r = x.t == JV_BOOL && !x.u.b;
    else if (NAME_IS("callable")) r = x.t == JV_MACRO || x.t == JV_FUNC;
    else if (NAME_IS("odd") || NAME_IS("even") || NAME_IS("divisibleby")) {
        int64_t d = NAME_IS("divisibleby") ? (y.t == JV_INT ? y.u.i : 0) : 2;
        if (x.t != JV_INT || d == 0) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "test '%.*s' needs integers", (int)name_n, name);
        int64_t m = x.u.i % d;
        r = NAME_IS("odd") ? m != 0 : m == 0;
    } else if (NAME_IS("lower") || NAME_IS("upper")) {
        if (!need_str(c, at, x, "test lower/upper")) return false;
        jv m;
        if (!map_case(c, at, x, NAME_IS("lower") ? 0 : 1, &m)) return false;
        r = jv_equal(m, x);
    } else if (NAME_IS("eq") || NAME_IS("equalto") || NAME_IS("==")) r = jv_equal(x, y);
    else if (NAME_IS("ne") || NAME_IS("!=")) r = !jv_equal(x, y);
    else if (NAME_IS("sameas")) r = jv_equal(x, y) && (x.t == y.t) && (x.t < JV_STR || x.t == JV_STR || memcmp(&x.u, &y.u, sizeof x.u) == 0);
    else if (NAME_IS("in")) {
        if (!jinja_contains(c, at, y, x, &r)) return false;
    } else {
        static const struct { const char *n; int op; } cmp[] = {
            {"lt", JOP('<', 0)}, {"le", JOP('<', '=')}, {"gt", JOP('>', 0)}, {"ge", JOP('>', '=')},
            {"lessthan", JOP('<', 0)}, {"greaterthan", JOP('>', 0)},
        };
        for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
            if (strlen(cmp[i].n) == name_n && !memcmp(cmp[i].n, name, name_n)) {
                if (!jinja_compare(c, at, cmp[i].op, x, y, &r)) return false;
                *out = jv_bool(r);
                return true;
            }
        return jx_fail(c, at, SPEX_ERR_UNSUPPORTED, "no test named '%.*s'", (int)(name_n > 60 ? 60 : name_n), name);
    }
    *out = jv_bool(r);
    return true;
}

/* ======================================================================== */
/* Filters                                                                   */
/* ======================================================================== */

static bool length_of(jctx *c, const jnode *at, jv x, int64_t *n) {
    switch (x.t) {
    case JV_UNDEF: *n = 0; return true;
    case JV_STR: *n = (int64_t)ju_count(x.u.s.p, x.u.s.n); return true;
    case JV_LIST: *n = (int64_t)x.u.l->n; return true;
    case JV_DICT:
        if (!x.u.d->ns) {
            *n = (int64_t)x.u.d->n;
            return true;
        }
        break;
    default: break;
    }
    return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "object of type '%s' has no len()", jv_type_name(x));
}

/* An attribute path "a.b.0" of x, as map / selectattr / join(attribute=) read it. */
static bool attr_path(jctx *c, const jnode *at, jv x, jv path, jv *out) {
    if (path.t == JV_INT) return jinja_getitem(c, at, x, path, out);
    if (!need_str(c, at, path, "attribute")) return false;
    const char *p = path.u.s.p, *e = p + path.u.s.n;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        size_t k = (size_t)((dot ? dot : e) - p);
        bool digits = k > 0;
        for (size_t i = 0; i < k; i++) digits &= p[i] >= '0' && p[i] <= '9';
        if (x.t == JV_UNDEF) return *out = x, true;
        if (digits && x.t == JV_LIST) {
            if (!jinja_getitem(c, at, x, jv_int(strtoll(p, NULL, 10)), &x)) return false;
        } else if (!jinja_getattr(c, at, x, p, k, &x)) {
            return false;
        }
        if (!dot) break;
        p = dot + 1;
    }
    *out = x;
    return true;
}

/* select / reject / selectattr / rejectattr. */
static bool select_filter(jctx *c, const jnode *at, jv x, const jargs *a, bool attr, bool keep, jv *out) {
    jlist *items, *l = jl_new(c->a, 0);
    if (!l) return oom(c, at);
    if (!jinja_iter(c, at, x, &items)) return false;
    size_t first = attr ? 1 : 0;
    jv test = arg(a, first, NULL, jv_none());
    if (test.t != JV_NONE && !need_str(c, at, test, "select test")) return false;
    jargs rest = {a->n_pos > first + 1 ? a->pos + first + 1 : NULL, a->n_pos > first + 1 ? a->n_pos - first - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i], r;
        if (attr && !attr_path(c, at, v, arg(a, 0, NULL, jv_none()), &v)) return false;
        if (test.t == JV_NONE) r = jv_bool(jv_truthy(v));
        else if (!jinja_test(c, at, test.u.s.p, test.u.s.n, v, &rest, &r)) return false;
        if (jv_truthy(r) == keep && !jl_push(c->a, l, items->v[i])) return oom(c, at);
    }
    *out = jv_list(l);
    return true;
}

static bool map_filter(jctx *c, const jnode *at, jv x, const jargs *a, jframe *f, jv *out) {
    jlist *items, *l = jl_new(c->a, 0);
    if (!l) return oom(c, at);
    if (!jinja_iter(c, at, x, &items)) return false;
    jv attr = arg(a, a->n_pos, "attribute", jv_undef(NULL)), dflt = arg(a, a->n_pos, "default", jv_undef(NULL));
    jv fname = a->n_pos ? a->pos[0] : jv_none();
    if (attr.t == JV_UNDEF && !need_str(c, at, fname, "map")) return false;
    jargs rest = {a->n_pos > 1 ? a->pos + 1 : NULL, a->n_pos > 1 ? a->n_pos - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < items->n; i++) {
        jv v;
        if (attr.t != JV_UNDEF) {
            if (!attr_path(c, at, items->v[i], attr, &v)) return false;
            if (v.t == JV_UNDEF && dflt.t != JV_UNDEF) v = dflt;
        } else if (!jinja_filter(c, at, fname.u.s.p, fname.u.s.n, items->v[i], &rest, f, &v)) {
            return false;
        }
        if (!jl_push(c->a, l, v)) return oom(c, at);
    }
    *out = jv_list(l);
    return true;
}

static bool to_number(jctx *c, const jnode *at, jv x, bool want_int, jv dflt, jv *out) {
    if (x.t == JV_UNDEF) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "'%s' is undefined", x.why ? x.why : "value");
    if (x.t == JV_INT || x.t == JV_BOOL) return *out = want_int ? jv_int(x.t == JV_INT ? x.u.i : x.u.b) : jv_float(jv_num(x)), true;
    if (x.t == JV_FLOAT) {
        if (!want_int) return *out = x, true;
        if (!(fabs(x.u.f) < 9.2e18)) return *out = dflt, true;
        return *out = jv_int((int64_t)x.u.f), true;
    }
    if (x.t == JV_STR && x.u.s.n < 64) {
        char t[64], *end;
        jv s = strip(x, NULL, true, true);
        memcpy(t, s.u.s.p, s.u.s.n);
        t[s.u.s.n] = 0;
        if (s.u.s.n == 0) return *out = dflt, true;
        long long i = strtoll(t, &end, 10);
        if (*end == 0) return *out = want_int ? jv_int(i) : jv_float((double)i), true;
        if (strpbrk(t, "xXpP")) return *out = dflt, true;   /* C reads hex floats; Python does not */
        double d = strtod(t, &end);
        if (*end == 0) return to_number(c, at, jv_float(d), want_int, dflt, out);
    }
    *out = dflt;
    return true;
}

static bool join_filter(jctx *c, const jnode *at, jv x, const jargs *a, jv *out) {
    jlist *items;
    jv sep = arg(a, 0, "d", jv_str("", 0)), attr = arg(a, 1, "attribute", jv_none());
    if (!jinja_iter(c, at, x, &items) || !need_str(c, at, sep, "join separator")) return false;
    jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        if (attr.t != JV_NONE && !attr_path(c, at, v, attr, &v)) return false;
        if ((i && !jb_put(c->a, &b, sep.u.s.p, sep.u.s.n)) || !jv_str_append(c->a, &b, v, false)) return oom(c, at);
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

static bool first_last(jctx *c, const jnode *at, jv x, bool first, jv *out) {
    jlist *items;
    if (!jinja_iter(c, at, x, &items)) return false;
    *out = items->n ? items->v[first ? 0 : items->n - 1] : jv_undef(NULL);
    return true;
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), each overridable by position or keyword. */
static bool tojson_filter(jctx *c, const jnode *at, jv x, const jargs *a, jv *out) {
    jv ascii = arg(a, 0, "ensure_ascii", jv_bool(false)), ind = arg(a, 1, "indent", jv_none());
    jv seps = arg(a, 2, "separators", jv_none()), sort = arg(a, 3, "sort_keys", jv_bool(false));
    if (ind.t != JV_NONE && (ind.t != JV_INT || ind.u.i < 0 || ind.u.i > 64))
        return jx_fail(c, at, SPEX_ERR_UNSUPPORTED, "tojson: indent must be none or an integer 0..64");
    jjson o = {ind.t == JV_INT ? (int)ind.u.i : -1, jv_truthy(sort), jv_truthy(ascii),
               jv_str(ind.t == JV_INT ? "," : ", ", ind.t == JV_INT ? 1 : 2), jv_str(": ", 2)};
    if (seps.t != JV_NONE) {
        if (seps.t != JV_LIST || seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "tojson: separators must be a pair of strings");
        o.item_sep = seps.u.l->v[0], o.key_sep = seps.u.l->v[1];
    }
    jbuf b = {0};
    const char *bad = NULL;
    if (!jv_tojson(c->a, &b, x, &o, &bad)) {
        if (bad) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "tojson: object of type %s is not JSON serializable", bad);
        return oom(c, at);
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

static bool sort_filter(jctx *c, const jnode *at, jv x, const jargs *a, jv *out) {
    jlist *items;
    if (!jinja_iter(c, at, x, &items)) return false;
    jv rev = arg(a, 0, "reverse", jv_bool(false)), attr = arg(a, 2, "attribute", jv_none());
    jlist *l = jl_new(c->a, items->n), *keys = jl_new(c->a, items->n);
    if (!l || !keys) return oom(c, at);
    for (size_t i = 0; i < items->n; i++) {
        l->v[i] = items->v[i], keys->v[i] = items->v[i];
        if (attr.t != JV_NONE && !attr_path(c, at, items->v[i], attr, &keys->v[i])) return false;
    }
    l->n = keys->n = items->n;
    for (size_t i = 1; i < l->n; i++)   /* insertion sort: stable, as Python's */
        for (size_t j = i; j > 0; j--) {
            bool gt;
            if (!jinja_compare(c, at, jv_truthy(rev) ? JOP('<', 0) : JOP('>', 0), keys->v[j - 1], keys->v[j], &gt)) return false;
            if (!gt) break;
            jv t = l->v[j - 1];
            l->v[j - 1] = l->v[j], l->v[j] = t;
            t = keys->v[j - 1], keys->v[j - 1] = keys->v[j], keys->v[j] = t;
        }
    *out = jv_list(l);
    return true;
}

/* jinja2's indent(width=4, first=False, blank=False): lines after the first get the indent,
 * empty ones only with blank; width may be a string. Lines split at \n, \r\n and \r. */
static bool indent_filter(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    jv w = arg(a, 0, "width", jv_int(4)), first = arg(a, 1, "first", jv_bool(false)), blank = arg(a, 2, "blank", jv_bool(false));
    jbuf ind = {0}, b = {0};
    if (w.t == JV_STR) ind.p = (char *)w.u.s.p, ind.n = w.u.s.n;
    else if (w.t == JV_INT && w.u.i >= 0 && w.u.i <= 256)
        for (int64_t i = 0; i < w.u.i; i++)
            if (!jb_puts(c->a, &ind, " ")) return oom(c, at);
    if (w.t != JV_STR && !(w.t == JV_INT && w.u.i >= 0 && w.u.i <= 256))
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "indent: width must be a string or an integer 0..256");
    if (jv_truthy(first) && !jb_put(c->a, &b, ind.p, ind.n)) return oom(c, at);
    /* the lines of s + "\n" (Python's splitlines after jinja2's "s += newline") */
    for (size_t i = 0, line = 0;; line++) {
        size_t e = i;
        while (e < s.u.s.n && s.u.s.p[e] != '\n' && s.u.s.p[e] != '\r') e++;
        if (line > 0 && (!jb_puts(c->a, &b, "\n") || ((e > i || jv_truthy(blank)) && !jb_put(c->a, &b, ind.p, ind.n))))
            return oom(c, at);
        if (!jb_put(c->a, &b, s.u.s.p + i, e - i)) return oom(c, at);
        if (e == s.u.s.n) break;
        i = e + (s.u.s.p[e] == '\r' && e + 1 < s.u.s.n && s.u.s.p[e + 1] == '\n' ? 2 : 1);
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

/* dictsort(case_sensitive=False, by='key', reverse=False): the (key, value) pairs sorted. */
static bool dictsort_filter(jctx *c, const jnode *at, jv x, const jargs *a, jv *out) {
    if (x.t != JV_DICT || x.u.d->ns) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "dictsort: can only sort a mapping");
    bool cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(false))), rev = jv_truthy(arg(a, 2, "reverse", jv_bool(false)));
    jv by = arg(a, 1, "by", jv_str("key", 3));
    bool by_value = by.t == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5);
    if (!dict_items(c, at, x.u.d, 0, out)) return false;
    jlist *l = out->u.l;
    for (size_t i = 1; i < l->n; i++)   /* insertion sort: stable, as Python's */
        for (size_t j = i; j > 0; j--) {
            jv p = l->v[j - 1].u.l->v[by_value], q = l->v[j].u.l->v[by_value];
            if (!cs && p.t == JV_STR && q.t == JV_STR && (!map_case(c, at, p, 0, &p) || !map_case(c, at, q, 0, &q))) return false;
            bool gt;
            if (!jinja_compare(c, at, rev ? JOP('<', 0) : JOP('>', 0), p, q, &gt)) return false;
            if (!gt) break;
            jv t = l->v[j - 1];
            l->v[j - 1] = l->v[j], l->v[j] = t;
        }
    return true;
}

static bool string_filter(jctx *c, const jnode *at, const char *name, size_t name_n, jv x, const jargs *a, jv *out,
                          bool *found) {
    jv s;
    if (!jinja_to_str(c, at, x, &s)) return false;
    if (NAME_IS("trim")) {
        jv ch = arg(a, 0, "chars", jv_none());
        if (ch.t != JV_NONE && !need_str(c, at, ch, "trim")) return false;
        *out = strip(s, ch.t == JV_STR ? &ch : NULL, true, true);
        return true;
    }
    if (NAME_IS("lower") || NAME_IS("upper") || NAME_IS("capitalize") || NAME_IS("title"))
        return map_case(c, at, s, NAME_IS("lower") ? 0 : NAME_IS("upper") ? 1 : NAME_IS("capitalize") ? 2 : 3, out);
    if (NAME_IS("replace")) {
        jv o = arg(a, 0, "old", jv_none()), r = arg(a, 1, "new", jv_none()), k = arg(a, 2, "count", jv_none());
        if (!need_str(c, at, o, "replace") || !need_str(c, at, r, "replace")) return false;
        return str_replace(c, at, s, o, r, k.t == JV_INT ? k.u.i : -1, out);
    }
    if (NAME_IS("indent")) return indent_filter(c, at, s, a, out);
    if (NAME_IS("string") || NAME_IS("safe")) {
        *out = x.t == JV_STR ? x : s;
        return true;
    }
    *found = false;
    return false;
}

bool jinja_filter(jctx *c, const jnode *at, const char *name, size_t name_n, jv x, const jargs *a, jframe *f,
                  jv *out) {
    int64_t n = 0;
    if (NAME_IS("default") || NAME_IS("d")) {
        bool boolean = jv_truthy(arg(a, 1, "boolean", jv_bool(false)));
        *out = x.t == JV_UNDEF || (boolean && !jv_truthy(x)) ? arg(a, 0, "default_value", jv_str("", 0)) : x;
        return true;
    }
    if (NAME_IS("length") || NAME_IS("count")) return length_of(c, at, x, &n) && (*out = jv_int(n), true);
    if (NAME_IS("tojson")) return tojson_filter(c, at, x, a, out);
    if (NAME_IS("first") || NAME_IS("last")) return first_last(c, at, x, name[0] == 'f', out);
    if (NAME_IS("join")) return join_filter(c, at, x, a, out);
    if (NAME_IS("items")) {
        if (x.t == JV_UNDEF) return (*out = jv_list(jl_new(c->a, 0))).u.l != NULL || oom(c, at);
        if (x.t != JV_DICT || x.u.d->ns) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "items: can only get item pairs from a mapping");
        return dict_items(c, at, x.u.d, 0, out);
    }
    if (NAME_IS("list")) {
        jlist *items;
        if (!jinja_iter(c, at, x, &items)) return false;
        jlist *l = jl_new(c->a, items->n);
        if (!l) return oom(c, at);
        if (items->n) memcpy(l->v, items->v, items->n * sizeof *l->v);
        l->n = items->n;
        *out = jv_list(l);
        return true;
    }
    if (NAME_IS("reverse")) {
        if (x.t == JV_STR) {
            jlist *items;
            if (!jinja_iter(c, at, x, &items)) return false;
            jbuf b = {0};
            for (size_t i = items->n; i-- > 0;)
                if (!jb_put(c->a, &b, items->v[i].u.s.p, items->v[i].u.s.n)) return oom(c, at);
            return *out = jv_str(b.p ? b.p : "", b.n), true;
        }
        jlist *items;
        if (!jinja_iter(c, at, x, &items)) return false;
        jlist *l = jl_new(c->a, items->n);
        if (!l) return oom(c, at);
        for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[items->n - 1 - i];
        l->n = items->n;
        return *out = jv_list(l), true;
    }
    if (NAME_IS("map")) return map_filter(c, at, x, a, f, out);
    if (NAME_IS("select") || NAME_IS("reject")) return select_filter(c, at, x, a, false, name[0] == 's', out);
    if (NAME_IS("selectattr") || NAME_IS("rejectattr")) return select_filter(c, at, x, a, true, name[0] == 's', out);
    if (NAME_IS("sort")) return sort_filter(c, at, x, a, out);
    if (NAME_IS("dictsort")) return dictsort_filter(c, at, x, a, out);
    if (NAME_IS("int")) return to_number(c, at, x, true, arg(a, 0, "default", jv_int(0)), out);
    if (NAME_IS("float")) return to_number(c, at, x, false, arg(a, 0, "default", jv_float(0)), out);
    if (NAME_IS("abs")) {
        if (!jv_is_number(x)) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "bad operand type for abs(): '%s'", jv_type_name(x));
        if (x.t == JV_FLOAT) return *out = jv_float(fabs(x.u.f)), true;
        int64_t i = x.t == JV_INT ? x.u.i : x.u.b;
        if (i == INT64_MIN) return jx_fail(c, at, SPEX_ERR_RANGE, "integer overflow in abs");
        return *out = jv_int(i < 0 ? -i : i), true;
    }
    bool found = true;
    if (string_filter(c, at, name, name_n, x, a, out, &found)) return true;
    if (found) return false;
    return jx_fail(c, at, SPEX_ERR_UNSUPPORTED, "no filter named '%.*s'", (int)(name_n > 60 ? 60 : name_n), name);
}

/* ======================================================================== */
/* Global functions                                                          */
/* ======================================================================== */

static bool range_func(jctx *c, const jnode *at, const jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "range expects 1 to 3 arguments");
    for (size_t i = 0; i < a->n_pos; i++) {
        if (a->pos[i].t != JV_INT && a->pos[i].t != JV_BOOL) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "range needs integers");
        v[a->n_pos == 1 ? 1 : i] = a->pos[i].t == JV_INT ? a->pos[i].u.i : a->pos[i].u.b;
    }
    if (v[2] == 0) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "range() arg 3 must not be zero");
    jlist *l = jl_new(c->a, 0);
    if (!l) return oom(c, at);
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
        if (!jl_push(c->a, l, jv_int(i))) return oom(c, at);
        if ((v[2] > 0 && i > INT64_MAX - v[2]) || (v[2] < 0 && i < INT64_MIN - v[2])) break;
    }
    *out = jv_list(l);
    return true;
}

bool jinja_call_func(jctx *c, const jnode *at, int func, const jargs *a, jv *out) {
    switch (func) {
    case JF_RAISE: {
        jv s;
        if (!jinja_to_str(c, at, arg(a, 0, NULL, jv_str("", 0)), &s)) return false;
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "raise_exception: %.*s", (int)(s.u.s.n > 300 ? 300 : s.u.s.n), s.u.s.p);
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jdict *d = jd_new(c->a);
        if (!d) return oom(c, at);
        d->ns = func == JF_NAMESPACE;
        for (size_t i = 0; i < a->n_pos; i++) {
            jv p = a->pos[i];
            if (p.t != JV_DICT) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "%s() takes a mapping or keywords", func == JF_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < p.u.d->n; k++)
                if (!jd_set(c->a, d, p.u.d->k[k].u.s.p, p.u.d->k[k].u.s.n, p.u.d->v[k])) return oom(c, at);
        }
        for (size_t k = 0; k < a->n_kw; k++)
            if (!jd_set(c->a, d, a->kw_names[k]->name, a->kw_names[k]->name_n, a->kw[k])) return oom(c, at);
        *out = jv_dict(d);
        return true;
    }
    case JF_RANGE: return range_func(c, at, a, out);
    case JF_STRFTIME: {
        jv fmt = arg(a, 0, NULL, jv_none());
        if (!need_str(c, at, fmt, "strftime_now") || fmt.u.s.n > 200) return false;
        char f[201], buf[512];
        memcpy(f, fmt.u.s.p, fmt.u.s.n);
        f[fmt.u.s.n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(buf, sizeof buf, f, &tm);
        char *p = ja_alloc(c->a, k + 1);
        if (!p) return oom(c, at);
        memcpy(p, buf, k);
        *out = jv_str(p, k);
        return true;
    }
    default: return jx_fail(c, at, SPEX_ERR_INTERNAL, "unknown function %d", func);
    }
}
