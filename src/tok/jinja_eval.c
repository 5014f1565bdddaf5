/*
 * jinja_eval.c — the Jinja engine's evaluator: runs the parsed statements, evaluating
 * expressions with Jinja2's semantics as transformers' chat templating configures it.
 *
 * What it is: scopes (a for loop's body gets a fresh scope each iteration, a macro call one
 * of its own; `if` shares its enclosing scope; `set ns.x` writes through to a namespace()),
 * the loop object, macros, attribute / item access, operators and comparisons. Undefined
 * follows jinja2's default Undefined: it prints as "", is falsy, iterates as empty, compares
 * unequal, and raises when its attributes or items are read, or when it is an operand of
 * arithmetic. What it is not: the filters, tests and methods (jinja_builtins.c).
 *
 * Every error is recorded once in the context ("line L col C: ...") and unwinds by returning
 * false. Depth, steps, list sizes and string sizes are bounded (jinja_internal.h).
 */
#include "tok/jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { CTL_NONE = 0, CTL_BREAK, CTL_CONTINUE };

bool jx_fail(jctx *c, const jnode *n, spex_status st, const char *fmt, ...) {
    if (c->status != SPEX_OK) return false;
    c->status = st;
    int k = n ? snprintf(c->msg, sizeof c->msg, "line %d col %d: ", n->line, n->col) : 0;
    if (k < 0 || (size_t)k >= sizeof c->msg) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static bool oom(jctx *c, const jnode *n) {
    return jx_fail(c, n, SPEX_ERR_RANGE, "memory or size limit reached (%zu MiB arena, %zu MiB strings)",
                   JINJA_MAX_ARENA >> 20, JINJA_MAX_OUTPUT >> 20);
}

static bool step(jctx *c, const jnode *n) {
    if (++c->steps > JINJA_MAX_STEPS) return jx_fail(c, n, SPEX_ERR_RANGE, "more than %ld evaluation steps", JINJA_MAX_STEPS);
    return true;
}

static bool undefined_error(jctx *c, const jnode *n, jv v) {
    if (v.why) return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "'%s' is undefined", v.why);
    return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "a value is undefined");
}

/* A NUL-terminated copy of a name (for messages and undefined values). */
static const char *cstr(jctx *c, const char *p, size_t n) {
    if (n > 200) n = 200;
    char *s = ja_alloc(c->a, n + 1);
    if (!s) return "?";
    memcpy(s, p, n);
    return s;
}

/* ======================================================================== */
/* Scopes                                                                    */
/* ======================================================================== */

static jframe *frame_new(jctx *c, jframe *parent) {
    jframe *f = ja_alloc(c->a, sizeof *f);
    if (!f || !(f->vars = jd_new(c->a))) return NULL;
    f->parent = parent;
    return f;
}

static bool lookup(jframe *f, const char *name, size_t n, jv *out) {
    for (; f; f = f->parent) {
        jv *v = jd_get(f->vars, name, n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    return false;
}

static const struct {
    const char *name;
    int func;
} g_funcs[] = {
    {"raise_exception", JF_RAISE}, {"namespace", JF_NAMESPACE}, {"range", JF_RANGE},
    {"strftime_now", JF_STRFTIME}, {"dict", JF_DICT},
};

static jv name_value(jctx *c, jframe *f, const jnode *n) {
    jv v;
    if (lookup(f, n->name, n->name_n, &v)) return v;
    for (size_t i = 0; i < sizeof g_funcs / sizeof g_funcs[0]; i++)
        if (strlen(g_funcs[i].name) == n->name_n && !memcmp(g_funcs[i].name, n->name, n->name_n)) {
            v = (jv){0};
            v.t = JV_FUNC, v.u.func = g_funcs[i].func;
            return v;
        }
    return jv_undef(cstr(c, n->name, n->name_n));
}

static bool set_var(jctx *c, const jnode *at, jframe *f, const char *name, size_t n, jv v) {
    return jd_set(c->a, f->vars, name, n, v) || oom(c, at);
}

/* ======================================================================== */
/* Access and operators                                                      */
/* ======================================================================== */

static jv wrap_list(jlist *l) {
    jv v = {0};
    v.t = JV_LIST, v.u.l = l;
    return v;
}

bool jinja_iter(jctx *c, const jnode *at, jv x, jlist **out) {
    switch (x.t) {
    case JV_UNDEF: return (*out = jl_new(c->a, 0)) != NULL || oom(c, at);
    case JV_LIST: *out = x.u.l; return true;
    case JV_DICT: {
        if (x.u.d->ns || x.u.d->is_loop) break;
        jlist *l = jl_new(c->a, x.u.d->n);
        if (!l) return oom(c, at);
        for (size_t i = 0; i < x.u.d->n; i++) l->v[i] = x.u.d->k[i];
        l->n = x.u.d->n;
        *out = l;
        return true;
    }
    case JV_STR: {
        jlist *l = jl_new(c->a, 0);
        if (!l) return oom(c, at);
        for (size_t i = 0, j; i < x.u.s.n; i = j) {
            j = ju_next(x.u.s.p, x.u.s.n, i);
            if (!jl_push(c->a, l, jv_str(x.u.s.p + i, j - i))) return oom(c, at);
        }
        *out = l;
        return true;
    }
    default: break;
    }
    return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "'%s' object is not iterable", jv_type_name(x));
}

bool jinja_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t n, jv *out) {
    if (obj.t == JV_UNDEF) return undefined_error(c, at, obj);
    if (obj.t == JV_DICT) {
        jv *v = jd_get(obj.u.d, name, n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    *out = jv_undef(cstr(c, name, n));
    return true;
}

/* A Python index (negative from the end) into a sequence of len items; false if outside. */
static bool norm_index(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

bool jinja_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out) {
    if (obj.t == JV_UNDEF) return undefined_error(c, at, obj);
    if (obj.t == JV_DICT && key.t == JV_STR) return jinja_getattr(c, at, obj, key.u.s.p, key.u.s.n, out);
    *out = jv_undef(NULL);
    if (key.t == JV_INT || key.t == JV_BOOL) {
        int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
        size_t k;
        if (obj.t == JV_LIST && norm_index(i, obj.u.l->n, &k)) *out = obj.u.l->v[k];
        if (obj.t == JV_STR && norm_index(i, ju_count(obj.u.s.p, obj.u.s.n), &k)) {
            size_t p = 0;
            for (size_t j = 0; j < k; j++) p = ju_next(obj.u.s.p, obj.u.s.n, p);
            *out = jv_str(obj.u.s.p + p, ju_next(obj.u.s.p, obj.u.s.n, p) - p);
        }
    }
    return true;
}

/* Python's slice indices for len items: start, stop, step (step != 0). */
static bool slice_of(jctx *c, const jnode *at, const jv *part, size_t len, int64_t *start, int64_t *stop, int64_t *stepv) {
    for (int i = 0; i < 3; i++)
        if (part[i].t != JV_NONE && part[i].t != JV_INT)
            return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "slice indices must be integers or none");
    int64_t n = (int64_t)len, st = part[2].t == JV_INT ? part[2].u.i : 1;
    if (st == 0) return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "slice step cannot be zero");
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? n - 1 : n;
    int64_t b = st < 0 ? hi : lo, e = st < 0 ? lo : hi;
    if (part[0].t == JV_INT) {
        b = part[0].u.i < 0 ? part[0].u.i + n : part[0].u.i;
        b = b < lo ? lo : b > hi ? hi : b;
    }
    if (part[1].t == JV_INT) {
        e = part[1].u.i < 0 ? part[1].u.i + n : part[1].u.i;
        e = e < lo ? lo : e > hi ? hi : e;
    }
    *start = b, *stop = e, *stepv = st;
    return true;
}

static bool eval_slice(jctx *c, const jnode *n, jframe *f, jv *out) {
    jv obj, part[3];
    if (!jinja_eval(c, n->a, f, &obj)) return false;
    for (int i = 0; i < 3; i++) {
        part[i] = jv_none();
        if (n->args.v[i] && !jinja_eval(c, n->args.v[i], f, &part[i])) return false;
    }
    if (obj.t == JV_UNDEF) return undefined_error(c, n, obj);
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "'%s' object is not subscriptable", jv_type_name(obj));
    jlist *items = NULL;
    if (!jinja_iter(c, n, obj, &items)) return false;
    int64_t b = 0, e = 0, st = 1;
    if (!slice_of(c, n, part, items->n, &b, &e, &st)) return false;
    jlist *l = jl_new(c->a, 0);
    if (!l) return oom(c, n);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
        if (!jl_push(c->a, l, items->v[i])) return oom(c, n);
    if (obj.t == JV_LIST) {
        l->tuple = obj.u.l->tuple;
        *out = wrap_list(l);
        return true;
    }
    jbuf s = {0};
    for (size_t i = 0; i < l->n; i++)
        if (!jb_put(c->a, &s, l->v[i].u.s.p, l->v[i].u.s.n)) return oom(c, n);
    *out = jv_str(s.p ? s.p : "", s.n);
    return true;
}

bool jinja_to_str(jctx *c, const jnode *at, jv v, jv *out) {
    if (v.t == JV_STR) {
        *out = v;
        return true;
    }
    jbuf b = {0};
    if (!jv_str_append(c->a, &b, v, false)) return oom(c, at);
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

static bool concat(jctx *c, const jnode *at, jv x, jv y, jv *out) {
    jbuf b = {0};
    if (!jv_str_append(c->a, &b, x, false) || !jv_str_append(c->a, &b, y, false)) return oom(c, at);
    *out = jv_str(b.p ? b.p : "", b.n);
    return true;
}

static int64_t as_int(jv v) { return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? v.u.b : 0; }

/* An operator's text for messages (literals: renders may run on several threads at once). */
static const char *op_name(int op) {
    switch (op) {
    case JOP('+', 0): return "+";
    case JOP('-', 0): return "-";
    case JOP('*', 0): return "*";
    case JOP('/', 0): return "/";
    case JOP('/', '/'): return "//";
    case JOP('%', 0): return "%";
    case JOP('*', '*'): return "**";
    case JOP('<', 0): return "<";
    case JOP('<', '='): return "<=";
    case JOP('>', 0): return ">";
    case JOP('>', '='): return ">=";
    default: return "?";
    }
}

static bool arith(jctx *c, const jnode *at, int op, jv x, jv y, jv *out) {
    bool ints = x.t != JV_FLOAT && y.t != JV_FLOAT;
    int64_t a = as_int(x), b = as_int(y), r;
    double fa = jv_num(x), fb = jv_num(y);
    if ((op == JOP('/', 0) || op == JOP('/', '/') || op == JOP('%', 0)) && (ints ? b == 0 : fb == 0))
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "division by zero");
    switch (op) {
    case JOP('+', 0):
        if (ints && __builtin_add_overflow(a, b, &r)) break;
        *out = ints ? jv_int(r) : jv_float(fa + fb);
        return true;
    case JOP('-', 0):
        if (ints && __builtin_sub_overflow(a, b, &r)) break;
        *out = ints ? jv_int(r) : jv_float(fa - fb);
        return true;
    case JOP('*', 0):
        if (ints && __builtin_mul_overflow(a, b, &r)) break;
        *out = ints ? jv_int(r) : jv_float(fa * fb);
        return true;
    case JOP('/', 0): *out = jv_float(fa / fb); return true;
    case JOP('/', '/'):
        if (ints) {
            if (a == INT64_MIN && b == -1) break;
            r = a / b;
            if ((a % b != 0) && ((a < 0) != (b < 0))) r--;
            *out = jv_int(r);
        } else {
            *out = jv_float(floor(fa / fb));
        }
        return true;
    case JOP('%', 0):
        if (ints) {
            if (b == -1) r = 0;
            else r = a % b;
            if (r != 0 && ((r < 0) != (b < 0))) r += b;
            *out = jv_int(r);
        } else {
            double m = fmod(fa, fb);
            if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
            *out = jv_float(m);
        }
        return true;
    case JOP('*', '*'):
        if (ints && b >= 0) {
            int64_t acc = 1;
            if (a == 0 || a == 1) acc = b == 0 ? 1 : a;
            else if (a == -1) acc = b % 2 ? -1 : 1;
            else   /* |a| >= 2: overflows within 63 factors */
                for (int64_t i = 0; i < b; i++)
                    if (__builtin_mul_overflow(acc, a, &acc)) return jx_fail(c, at, SPEX_ERR_RANGE, "integer overflow in **");
            *out = jv_int(acc);
        } else {
            *out = jv_float(pow(fa, fb));
        }
        return true;
    }
    return jx_fail(c, at, SPEX_ERR_RANGE, "integer overflow in '%s'", op_name(op));
}

/* s * k (string or list repetition) */
static bool repeat(jctx *c, const jnode *at, jv s, int64_t k, jv *out) {
    if (k < 0) k = 0;
    if (s.t == JV_STR) {
        if (s.u.s.n && (uint64_t)k > JINJA_MAX_OUTPUT / s.u.s.n) return oom(c, at);
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++)
            if (!jb_put(c->a, &b, s.u.s.p, s.u.s.n)) return oom(c, at);
        *out = jv_str(b.p ? b.p : "", b.n);
        return true;
    }
    jlist *l = jl_new(c->a, 0);
    if (!l) return oom(c, at);
    if (s.u.l->n && (uint64_t)k > JINJA_MAX_ITEMS / s.u.l->n) return oom(c, at);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < s.u.l->n; j++)
            if (!jl_push(c->a, l, s.u.l->v[j])) return oom(c, at);
    l->tuple = s.u.l->tuple;
    *out = wrap_list(l);
    return true;
}

bool jinja_binop(jctx *c, const jnode *at, int op, jv x, jv y, jv *out) {
    if (op == JOP('~', 0)) return concat(c, at, x, y, out);
    if (x.t == JV_UNDEF) return undefined_error(c, at, x);
    if (y.t == JV_UNDEF) return undefined_error(c, at, y);
    if (jv_is_number(x) && jv_is_number(y)) return arith(c, at, op, x, y, out);
    if (op == JOP('+', 0) && x.t == JV_STR && y.t == JV_STR) return concat(c, at, x, y, out);
    if (op == JOP('+', 0) && x.t == JV_LIST && y.t == JV_LIST && x.u.l->tuple == y.u.l->tuple) {
        jlist *l = jl_new(c->a, x.u.l->n + y.u.l->n);
        if (!l) return oom(c, at);
        for (size_t i = 0; i < x.u.l->n; i++) l->v[l->n++] = x.u.l->v[i];
        for (size_t i = 0; i < y.u.l->n; i++) l->v[l->n++] = y.u.l->v[i];
        l->tuple = x.u.l->tuple;
        *out = wrap_list(l);
        return true;
    }
    if (op == JOP('*', 0) && (x.t == JV_STR || x.t == JV_LIST) && (y.t == JV_INT || y.t == JV_BOOL))
        return repeat(c, at, x, as_int(y), out);
    if (op == JOP('*', 0) && (y.t == JV_STR || y.t == JV_LIST) && (x.t == JV_INT || x.t == JV_BOOL))
        return repeat(c, at, y, as_int(x), out);
    return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op),
                   jv_type_name(x), jv_type_name(y));
}

static int bytes_cmp(jv x, jv y) {
    size_t m = x.u.s.n < y.u.s.n ? x.u.s.n : y.u.s.n;
    int r = memcmp(x.u.s.p, y.u.s.p, m);
    return r ? r : x.u.s.n < y.u.s.n ? -1 : x.u.s.n > y.u.s.n;
}

bool jinja_compare(jctx *c, const jnode *at, int op, jv x, jv y, bool *out) {
    if (op == JOP('=', '=') || op == JOP('!', '=')) {
        *out = jv_equal(x, y) == (op == JOP('=', '='));
        return true;
    }
    if (op == 'i' || op == 'n') {
        if (!jinja_contains(c, at, y, x, out)) return false;
        if (op == 'n') *out = !*out;
        return true;
    }
    int r;
    if (jv_is_number(x) && jv_is_number(y)) {
        double a = jv_num(x), b = jv_num(y);
        if (x.t != JV_FLOAT && y.t != JV_FLOAT) r = as_int(x) < as_int(y) ? -1 : as_int(x) > as_int(y);
        else if (isnan(a) || isnan(b)) return *out = false, true;
        else r = a < b ? -1 : a > b;
    } else if (x.t == JV_STR && y.t == JV_STR) {
        r = bytes_cmp(x, y);   /* UTF-8 byte order is code point order */
    } else {
        if (x.t == JV_UNDEF) return undefined_error(c, at, x);
        if (y.t == JV_UNDEF) return undefined_error(c, at, y);
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "'%s' not supported between instances of '%s' and '%s'", op_name(op),
                       jv_type_name(x), jv_type_name(y));
    }
    switch (op) {
    case JOP('<', 0): *out = r < 0; break;
    case JOP('<', '='): *out = r <= 0; break;
    case JOP('>', 0): *out = r > 0; break;
    default: *out = r >= 0; break;
    }
    return true;
}

bool jinja_contains(jctx *c, const jnode *at, jv hay, jv needle, bool *out) {
    *out = false;
    switch (hay.t) {
    case JV_UNDEF: return true;
    case JV_STR:
        if (needle.t != JV_STR)
            return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(needle));
        *out = needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
        return true;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n && !*out; i++) *out = jv_equal(hay.u.l->v[i], needle);
        return true;
    case JV_DICT:
        if (!hay.u.d->ns && needle.t == JV_STR) *out = jd_get(hay.u.d, needle.u.s.p, needle.u.s.n) != NULL;
        return true;
    default:
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

/* ======================================================================== */
/* Calls                                                                     */
/* ======================================================================== */

typedef struct evargs {
    jv *pos, *kw;
    const jnode **kw_names;
    size_t n_pos, n_kw;
} evargs;

static bool eval_args(jctx *c, const jnodes *args, jframe *f, evargs *e) {
    e->pos = ja_alloc(c->a, (args->n + 1) * sizeof *e->pos);
    e->kw = ja_alloc(c->a, (args->n + 1) * sizeof *e->kw);
    e->kw_names = ja_alloc(c->a, (args->n + 1) * sizeof *e->kw_names);
    e->n_pos = e->n_kw = 0;
    if (!e->pos || !e->kw || !e->kw_names) return oom(c, NULL);
    for (size_t i = 0; i < args->n; i++) {
        const jnode *a = args->v[i];
        if (a->kind == JN_KWARG) {
            e->kw_names[e->n_kw] = a;
            if (!jinja_eval(c, a->a, f, &e->kw[e->n_kw++])) return false;
        } else if (!jinja_eval(c, a, f, &e->pos[e->n_pos++])) {
            return false;
        }
    }
    return true;
}

static jargs to_jargs(const evargs *e) {
    jargs a = {e->pos, e->n_pos, e->kw, e->kw_names, e->n_kw};
    return a;
}

bool jinja_call_macro(jctx *c, const jnode *at, jv macro, const jv *pos, size_t n_pos, const jv *kw_vals,
                      const jnode *const *kw_names, size_t n_kw, jv *out) {
    const jnode *m = macro.u.macro;
    if (n_pos > m->args.n)
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "macro '%.*s' takes not more than %zu argument(s)", (int)m->name_n,
                       m->name, m->args.n);
    if (++c->depth > JINJA_MAX_EVAL_DEPTH) return jx_fail(c, at, SPEX_ERR_RANGE, "recursion deeper than %d", JINJA_MAX_EVAL_DEPTH);
    jframe *f = frame_new(c, c->globals);
    if (!f) return oom(c, at);
    for (size_t k = 0; k < n_kw; k++) {
        bool known = false;
        for (size_t i = 0; i < m->args.n; i++)
            known |= m->args.v[i]->name_n == kw_names[k]->name_n && !memcmp(m->args.v[i]->name, kw_names[k]->name, kw_names[k]->name_n);
        if (!known)
            return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "macro '%.*s' has no parameter '%.*s'", (int)m->name_n, m->name,
                           (int)kw_names[k]->name_n, kw_names[k]->name);
    }
    for (size_t i = 0; i < m->args.n; i++) {
        const jnode *p = m->args.v[i];
        jv v = jv_undef(cstr(c, p->name, p->name_n));
        bool given = i < n_pos;
        if (given) v = pos[i];
        for (size_t k = 0; k < n_kw; k++)
            if (kw_names[k]->name_n == p->name_n && !memcmp(kw_names[k]->name, p->name, p->name_n)) v = kw_vals[k], given = true;
        if (!given && p->a && !jinja_eval(c, p->a, f, &v)) return false;
        if (!set_var(c, at, f, p->name, p->name_n, v)) return false;
    }
    jbuf *saved = c->out, buf = {0};
    c->out = &buf;
    bool ok = jinja_exec(c, (const jnode *)m, f);
    c->out = saved;
    c->depth--;
    if (!ok) return false;
    *out = jv_str(buf.p ? buf.p : "", buf.n);
    return true;
}

static bool eval_call(jctx *c, const jnode *n, jframe *f, jv *out) {
    evargs e;
    jv callee;
    if (n->a->kind == JN_ATTR) {
        jv obj;
        if (!jinja_eval(c, n->a->a, f, &obj)) return false;
        if (obj.t == JV_UNDEF) return undefined_error(c, n, obj);
        if (!eval_args(c, &n->args, f, &e)) return false;
        jargs a = to_jargs(&e);
        bool found = true;
        if (jinja_method(c, n, obj, n->a->name, n->a->name_n, &a, out, &found)) return true;
        if (found || c->status != SPEX_OK) return false;
        if (!jinja_getattr(c, n->a, obj, n->a->name, n->a->name_n, &callee)) return false;
    } else {
        if (!jinja_eval(c, n->a, f, &callee)) return false;
        if (!eval_args(c, &n->args, f, &e)) return false;
    }
    if (callee.t == JV_MACRO)
        return jinja_call_macro(c, n, callee, e.pos, e.n_pos, e.kw, (const jnode *const *)e.kw_names, e.n_kw, out);
    if (callee.t == JV_FUNC) {
        jargs a = to_jargs(&e);
        return jinja_call_func(c, n, callee.u.func, &a, out);
    }
    if (callee.t == JV_UNDEF) return undefined_error(c, n, callee);
    return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "'%s' object is not callable", jv_type_name(callee));
}

/* ======================================================================== */
/* Expressions                                                               */
/* ======================================================================== */

static bool eval_compare(jctx *c, const jnode *n, jframe *f, jv *out) {
    jv left;
    if (!jinja_eval(c, n->a, f, &left)) return false;
    bool r = true;
    for (size_t i = 0; i < n->body2.n && r; i++) {
        jv right;
        if (!jinja_eval(c, n->body2.v[i], f, &right) || !jinja_compare(c, n, n->ops[i], left, right, &r)) return false;
        left = right;
    }
    *out = jv_bool(r);
    return true;
}

static bool eval_collection(jctx *c, const jnode *n, jframe *f, jv *out) {
    if (n->kind == JN_DICT) {
        jdict *d = jd_new(c->a);
        if (!d) return oom(c, n);
        for (size_t i = 0; i < n->args.n; i++) {
            jv k, v;
            if (!jinja_eval(c, n->args.v[i], f, &k) || !jinja_eval(c, n->body.v[i], f, &v)) return false;
            if (k.t != JV_STR)
                return jx_fail(c, n->args.v[i], SPEX_ERR_UNSUPPORTED, "dict keys other than strings are not supported");
            if (!jd_append(c->a, d, k, v)) return oom(c, n);
        }
        if (!jd_dedup(c->a, d)) return oom(c, n);
        *out = (jv){0};
        out->t = JV_DICT, out->u.d = d;
        return true;
    }
    jlist *l = jl_new(c->a, n->args.n);
    if (!l) return oom(c, n);
    for (size_t i = 0; i < n->args.n; i++)
        if (!jinja_eval(c, n->args.v[i], f, &l->v[l->n++])) return false;
    l->tuple = n->kind == JN_TUPLE;
    *out = wrap_list(l);
    return true;
}

static bool eval_inner(jctx *c, const jnode *n, jframe *f, jv *out) {
    jv x, y;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; return true;
    case JN_NAME: *out = name_value(c, f, n); return true;
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_collection(c, n, f, out);
    case JN_ATTR: return jinja_eval(c, n->a, f, &x) && jinja_getattr(c, n, x, n->name, n->name_n, out);
    case JN_INDEX: return jinja_eval(c, n->a, f, &x) && jinja_eval(c, n->b, f, &y) && jinja_getitem(c, n, x, y, out);
    case JN_SLICE: return eval_slice(c, n, f, out);
    case JN_CALL: return eval_call(c, n, f, out);
    case JN_FILTER:
    case JN_TEST: {
        evargs e;
        if (!jinja_eval(c, n->a, f, &x) || !eval_args(c, &n->args, f, &e)) return false;
        jargs a = to_jargs(&e);
        if (n->kind == JN_FILTER) return jinja_filter(c, n, n->name, n->name_n, x, &a, f, out);
        if (!jinja_test(c, n, n->name, n->name_n, x, &a, out)) return false;
        if (n->op) out->u.b = !out->u.b;
        return true;
    }
    case JN_NEG:
    case JN_POS:
        if (!jinja_eval(c, n->a, f, &x)) return false;
        if (x.t == JV_UNDEF) return undefined_error(c, n, x);
        if (!jv_is_number(x)) return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name(x));
        if (n->kind == JN_POS) *out = x.t == JV_BOOL ? jv_int(x.u.b) : x;
        else if (x.t == JV_FLOAT) *out = jv_float(-x.u.f);
        else if (as_int(x) == INT64_MIN) return jx_fail(c, n, SPEX_ERR_RANGE, "integer overflow in unary -");
        else *out = jv_int(-as_int(x));
        return true;
    case JN_NOT:
        if (!jinja_eval(c, n->a, f, &x)) return false;
        *out = jv_bool(!jv_truthy(x));
        return true;
    case JN_BINOP: return jinja_eval(c, n->a, f, &x) && jinja_eval(c, n->b, f, &y) && jinja_binop(c, n, n->op, x, y, out);
    case JN_AND:
    case JN_OR:
        if (!jinja_eval(c, n->a, f, &x)) return false;
        if (jv_truthy(x) == (n->kind == JN_OR)) return *out = x, true;
        return jinja_eval(c, n->b, f, out);
    case JN_CMP: return eval_compare(c, n, f, out);
    case JN_COND:
        if (!jinja_eval(c, n->a, f, &x)) return false;
        if (jv_truthy(x)) return jinja_eval(c, n->b, f, out);
        if (n->c) return jinja_eval(c, n->c, f, out);
        *out = jv_undef(NULL);
        return true;
    default: return jx_fail(c, n, SPEX_ERR_INTERNAL, "not an expression (node %d)", (int)n->kind);
    }
}

bool jinja_eval(jctx *c, const jnode *n, jframe *f, jv *out) {
    if (!step(c, n)) return false;
    if (++c->depth > JINJA_MAX_EVAL_DEPTH) return jx_fail(c, n, SPEX_ERR_RANGE, "nesting deeper than %d", JINJA_MAX_EVAL_DEPTH);
    bool ok = eval_inner(c, n, f, out);
    c->depth--;
    return ok;
}

/* ======================================================================== */
/* Statements                                                                */
/* ======================================================================== */

static int exec_body(jctx *c, const jnodes *body, jframe *f);

/* Binds a for / set target list to v (one name: v itself; several: v unpacked). */
static bool bind(jctx *c, const jnode *at, const jnodes *targets, jframe *f, jv v) {
    if (targets->n == 1) return set_var(c, at, f, targets->v[0]->name, targets->v[0]->name_n, v);
    jlist *items;
    if (!jinja_iter(c, at, v, &items)) return false;
    if (items->n != targets->n)
        return jx_fail(c, at, SPEX_ERR_INVALID_ARG, "cannot unpack %zu values into %zu names", items->n, targets->n);
    for (size_t i = 0; i < targets->n; i++)
        if (!set_var(c, at, f, targets->v[i]->name, targets->v[i]->name_n, items->v[i])) return false;
    return true;
}

static bool loop_obj(jctx *c, const jnode *at, const jlist *items, size_t i, jv *out) {
    jdict *d = jd_new(c->a);
    if (!d) return oom(c, at);
    d->is_loop = true;
    int64_t n = (int64_t)items->n, k = (int64_t)i;
    bool ok = jd_set(c->a, d, "index0", 6, jv_int(k)) && jd_set(c->a, d, "index", 5, jv_int(k + 1)) &&
              jd_set(c->a, d, "revindex0", 9, jv_int(n - k - 1)) && jd_set(c->a, d, "revindex", 8, jv_int(n - k)) &&
              jd_set(c->a, d, "first", 5, jv_bool(k == 0)) && jd_set(c->a, d, "last", 4, jv_bool(k == n - 1)) &&
              jd_set(c->a, d, "length", 6, jv_int(n)) && jd_set(c->a, d, "depth", 5, jv_int(1)) &&
              jd_set(c->a, d, "depth0", 6, jv_int(0));
    if (ok && k > 0) ok = jd_set(c->a, d, "previtem", 8, items->v[k - 1]);
    if (ok && k + 1 < n) ok = jd_set(c->a, d, "nextitem", 8, items->v[k + 1]);
    if (!ok) return oom(c, at);
    *out = (jv){0};
    out->t = JV_DICT, out->u.d = d;
    return true;
}

/* Returns -1 on error, else CTL_NONE (break and continue stop at the loop). */
static int exec_for(jctx *c, const jnode *n, jframe *f) {
    jv seq;
    jlist *items;
    if (!jinja_eval(c, n->a, f, &seq) || !jinja_iter(c, n, seq, &items)) return -1;
    if (n->b) {   /* `for x in y if cond`: the loop object counts what passes */
        jlist *kept = jl_new(c->a, 0);
        if (!kept) return oom(c, n), -1;
        for (size_t i = 0; i < items->n; i++) {
            jframe *g = frame_new(c, f);
            jv ok;
            if (!g) return oom(c, n), -1;
            if (!bind(c, n, &n->args, g, items->v[i]) || !jinja_eval(c, n->b, g, &ok)) return -1;
            if (jv_truthy(ok) && !jl_push(c->a, kept, items->v[i])) return oom(c, n), -1;
        }
        items = kept;
    }
    for (size_t i = 0; i < items->n; i++) {
        jframe *g = frame_new(c, f);
        jv lo;
        if (!g) return oom(c, n), -1;
        if (!step(c, n) || !bind(c, n, &n->args, g, items->v[i]) || !loop_obj(c, n, items, i, &lo) ||
            !set_var(c, n, g, "loop", 4, lo))
            return -1;
        int r = exec_body(c, &n->body, g);
        if (r < 0) return -1;
        if (r == CTL_BREAK) break;
    }
    if (items->n == 0 && n->body2.n) return exec_body(c, &n->body2, f) < 0 ? -1 : CTL_NONE;
    return CTL_NONE;
}

static bool exec_set(jctx *c, const jnode *n, jframe *f) {
    jv v;
    if (n->kind == JN_SETBLOCK) {
        jbuf *saved = c->out, buf = {0};
        c->out = &buf;
        int r = exec_body(c, &n->body, f);
        c->out = saved;
        if (r < 0) return false;
        return set_var(c, n, f, n->name, n->name_n, jv_str(buf.p ? buf.p : "", buf.n));
    }
    if (!jinja_eval(c, n->a, f, &v)) return false;
    const jnode *t = n->args.v[0];
    if (t->kind != JN_ATTR) return bind(c, n, &n->args, f, v);
    jv obj = name_value(c, f, t->a);
    if (obj.t != JV_DICT || !obj.u.d->ns)
        return jx_fail(c, n, SPEX_ERR_INVALID_ARG, "cannot assign attribute on non-namespace object");
    return jd_set(c->a, obj.u.d, t->name, t->name_n, v) || oom(c, n);
}

/* One statement: -1 on error, else a CTL_ value. */
static int exec_stmt(jctx *c, const jnode *n, jframe *f) {
    jv v;
    if (!step(c, n)) return -1;
    switch (n->kind) {
    case JN_TEXT: return jb_put(c->a, c->out, n->lit.u.s.p, n->lit.u.s.n) ? CTL_NONE : (oom(c, n), -1);
    case JN_OUTPUT:
        if (!jinja_eval(c, n->a, f, &v)) return -1;
        return jv_str_append(c->a, c->out, v, false) ? CTL_NONE : (oom(c, n), -1);
    case JN_IF:
        for (const jnode *k = n; k; k = k->b) {
            if (k->kind != JN_IF) return exec_body(c, &k->body, f);
            if (!jinja_eval(c, k->a, f, &v)) return -1;
            if (jv_truthy(v)) return exec_body(c, &k->body, f);
        }
        return CTL_NONE;
    case JN_FOR: return exec_for(c, n, f);
    case JN_SET:
    case JN_SETBLOCK: return exec_set(c, n, f) ? CTL_NONE : -1;
    case JN_MACRO:
        v = (jv){0};
        v.t = JV_MACRO, v.u.macro = n;
        return set_var(c, n, f, n->name, n->name_n, v) ? CTL_NONE : -1;
    case JN_BREAK: return CTL_BREAK;
    case JN_CONTINUE: return CTL_CONTINUE;
    case JN_BODY: return exec_body(c, &n->body, f);
    default: return jx_fail(c, n, SPEX_ERR_INTERNAL, "not a statement (node %d)", (int)n->kind), -1;
    }
}

static int exec_body(jctx *c, const jnodes *body, jframe *f) {
    if (++c->depth > JINJA_MAX_EVAL_DEPTH) return jx_fail(c, NULL, SPEX_ERR_RANGE, "nesting deeper than %d", JINJA_MAX_EVAL_DEPTH), -1;
    int r = CTL_NONE;
    for (size_t i = 0; i < body->n && r == CTL_NONE; i++) r = exec_stmt(c, body->v[i], f);
    c->depth--;
    return r;
}

bool jinja_exec(jctx *c, const jnode *root, jframe *f) {
    int r = exec_body(c, &root->body, f);
    return r >= 0;
}
