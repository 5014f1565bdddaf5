/*
 * jinja_parse.c — the Jinja engine's parser: tokens to a tree of statements and expressions.
 *
 * What it is: recursive descent with Jinja2's precedence, lowest first: `x if c else y`; or;
 * and; not; comparisons (==, !=, <, <=, >, >=, in, not in; chained as in Python); + -; ~;
 * * / // %; **; unary - +; then postfix .name, [i], [a:b:c], (args), |filter(args) and
 * `is [not] test`. Statements: if / elif / else, for (tuple targets, `if` filter, else), set
 * (name, tuple, ns.attr, block form), macro, break / continue (the loopcontrols extension,
 * which transformers enables) and generation (transformers' marker, rendered as its body).
 * What it is not: call blocks, filter blocks, include / import / extends, `recursive` loops,
 * *args / **kwargs: each is a parse error naming the construct.
 */
#include "tok/jinja_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, pos;
    int depth;
    char *err;
    size_t err_cap;
    bool failed;
} parser;

static const jtok *cur(const parser *P) { return &P->t[P->pos < P->n ? P->pos : P->n - 1]; }

static bool pfail(parser *P, const jtok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool pfail(parser *P, const jtok *at, const char *fmt, ...) {
    if (P->failed) return false;
    P->failed = true;
    int k = snprintf(P->err, P->err_cap, "line %d col %d: ", at->line, at->col);
    if (k < 0 || (size_t)k >= P->err_cap) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err + k, P->err_cap - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static bool is_op(const parser *P, int op) { return cur(P)->kind == JT_OP && cur(P)->op == op; }

static bool is_name(const parser *P, const char *w) {
    const jtok *t = cur(P);
    return t->kind == JT_NAME && t->n == strlen(w) && memcmp(t->p, w, t->n) == 0;
}

static bool skip_op(parser *P, int op) {
    if (!is_op(P, op)) return false;
    P->pos++;
    return true;
}

static bool skip_name(parser *P, const char *w) {
    if (!is_name(P, w)) return false;
    P->pos++;
    return true;
}

static const char *tok_desc(const jtok *t) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_TEXT: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_NAME: return "a name";
    case JT_INT:
    case JT_FLOAT: return "a number";
    case JT_STRING: return "a string";
    case JT_OP: return "an operator";
    }
    return "a token";
}

static bool expect_op(parser *P, int op, const char *what) {
    if (skip_op(P, op)) return true;
    return pfail(P, cur(P), "expected %s, found %s", what, tok_desc(cur(P)));
}

static bool expect_kind(parser *P, jtok_kind k, const char *what) {
    if (cur(P)->kind == k) {
        P->pos++;
        return true;
    }
    return pfail(P, cur(P), "expected %s, found %s", what, tok_desc(cur(P)));
}

static jnode *node(parser *P, jnode_kind kind, const jtok *at) {
    jnode *n = ja_alloc(P->a, sizeof *n);
    if (!n) {
        pfail(P, at, "out of memory");
        return NULL;
    }
    n->kind = kind, n->line = at->line, n->col = at->col;
    return n;
}

static bool push(parser *P, jnodes *v, jnode *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **p = ja_alloc(P->a, cap * sizeof *p);
        if (!p) return pfail(P, cur(P), "out of memory");
        if (v->n) memcpy(p, v->v, v->n * sizeof *p);
        v->v = p, v->cap = cap;
    }
    v->v[v->n++] = n;
    return true;
}

static bool enter(parser *P) {
    if (++P->depth > JINJA_MAX_PARSE_DEPTH) return pfail(P, cur(P), "nesting deeper than %d", JINJA_MAX_PARSE_DEPTH);
    return true;
}

/* ======================================================================== */
/* Expressions                                                               */
/* ======================================================================== */

static jnode *parse_expr(parser *P, bool with_cond);
static jnode *parse_unary(parser *P, bool with_filter);

static bool parse_args(parser *P, jnodes *args) {
    /* at '(' */
    P->pos++;
    while (!is_op(P, JOP(')', 0))) {
        if (args->n && !expect_op(P, JOP(',', 0), "',' or ')'")) return false;
        if (is_op(P, JOP(')', 0))) break;
        if (is_op(P, JOP('*', 0)) || is_op(P, JOP('*', '*')))
            return pfail(P, cur(P), "*args and **kwargs are not supported");
        jnode *arg;
        if (cur(P)->kind == JT_NAME && P->pos + 1 < P->n && P->t[P->pos + 1].kind == JT_OP &&
            P->t[P->pos + 1].op == JOP('=', 0)) {
            arg = node(P, JN_KWARG, cur(P));
            if (!arg) return false;
            arg->name = cur(P)->p, arg->name_n = cur(P)->n;
            P->pos += 2;
            if (!(arg->a = parse_expr(P, true))) return false;
        } else if (!(arg = parse_expr(P, true))) {
            return false;
        }
        if (!push(P, args, arg)) return false;
    }
    P->pos++;
    return true;
}

static jnode *parse_list_or_tuple(parser *P, jnode_kind kind, int close, const jtok *at) {
    jnode *n = node(P, kind, at);
    if (!n) return NULL;
    while (!is_op(P, close)) {
        if (n->args.n && !expect_op(P, JOP(',', 0), "','")) return NULL;
        if (is_op(P, close)) break;
        jnode *e = parse_expr(P, true);
        if (!e || !push(P, &n->args, e)) return NULL;
    }
    P->pos++;
    return n;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    jnode *n;
    switch (t->kind) {
    case JT_NAME:
        P->pos++;
        if (!(n = node(P, JN_LIT, t))) return NULL;
        if ((t->n == 4 && (!memcmp(t->p, "true", 4) || !memcmp(t->p, "True", 4)))) n->lit = jv_bool(true);
        else if (t->n == 5 && (!memcmp(t->p, "false", 5) || !memcmp(t->p, "False", 5))) n->lit = jv_bool(false);
        else if (t->n == 4 && (!memcmp(t->p, "none", 4) || !memcmp(t->p, "None", 4))) n->lit = jv_none();
        else n->kind = JN_NAME, n->name = t->p, n->name_n = t->n;
        return n;
    case JT_STRING: {
        jbuf b = {0};
        while (cur(P)->kind == JT_STRING) {   /* adjacent literals concatenate */
            if (!jb_put(P->a, &b, cur(P)->p, cur(P)->n)) return pfail(P, t, "string too long"), NULL;
            P->pos++;
        }
        if (!(n = node(P, JN_LIT, t))) return NULL;
        n->lit = jv_str(b.p ? b.p : "", b.n);
        return n;
    }
    case JT_INT:
    case JT_FLOAT:
        P->pos++;
        if (!(n = node(P, JN_LIT, t))) return NULL;
        n->lit = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        return n;
    case JT_OP:
        if (t->op == JOP('(', 0)) {
            P->pos++;
            if (skip_op(P, JOP(')', 0))) return node(P, JN_TUPLE, t);
            jnode *e = parse_expr(P, true);
            if (!e) return NULL;
            if (!is_op(P, JOP(',', 0))) return expect_op(P, JOP(')', 0), "')'") ? e : NULL;
            P->pos++;
            jnode *tu = parse_list_or_tuple(P, JN_TUPLE, JOP(')', 0), t);
            if (!tu) return NULL;
            if (!push(P, &tu->args, NULL)) return NULL;   /* e goes first: shift */
            memmove(tu->args.v + 1, tu->args.v, (tu->args.n - 1) * sizeof *tu->args.v);
            tu->args.v[0] = e;
            return tu;
        }
        if (t->op == JOP('[', 0)) {
            P->pos++;
            return parse_list_or_tuple(P, JN_LIST, JOP(']', 0), t);
        }
        if (t->op == JOP('{', 0)) {
            P->pos++;
            if (!(n = node(P, JN_DICT, t))) return NULL;
            while (!is_op(P, JOP('}', 0))) {
                if (n->args.n && !expect_op(P, JOP(',', 0), "','")) return NULL;
                if (is_op(P, JOP('}', 0))) break;
                jnode *k = parse_expr(P, true);
                if (!k || !expect_op(P, JOP(':', 0), "':'")) return NULL;
                jnode *v = parse_expr(P, true);
                if (!v || !push(P, &n->args, k) || !push(P, &n->body, v)) return NULL;
            }
            P->pos++;
            return n;
        }
        break;
    default: break;
    }
    pfail(P, t, "unexpected %s in an expression", tok_desc(t));
    return NULL;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    const jtok *t = cur(P);
    if (skip_op(P, JOP('.', 0))) {
        const jtok *nt = cur(P);
        if (nt->kind == JT_NAME) {
            jnode *n = node(P, JN_ATTR, nt);
            if (!n) return NULL;
            n->a = obj, n->name = nt->p, n->name_n = nt->n;
            P->pos++;
            return n;
        }
        if (nt->kind == JT_INT) {
            jnode *n = node(P, JN_INDEX, nt), *k = node(P, JN_LIT, nt);
            if (!n || !k) return NULL;
            k->lit = jv_int(nt->i);
            n->a = obj, n->b = k;
            P->pos++;
            return n;
        }
        pfail(P, nt, "expected a name after '.'");
        return NULL;
    }
    P->pos++;   /* '[' */
    jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(P, JOP(':', 0)) && !is_op(P, JOP(']', 0))) {
            if (!(parts[k] = parse_expr(P, true))) return NULL;
        }
        if (is_op(P, JOP(':', 0)) && k < 2) {
            P->pos++, k++, slice = true;
            continue;
        }
        break;
    }
    if (!expect_op(P, JOP(']', 0), "']'")) return NULL;
    jnode *n = node(P, slice ? JN_SLICE : JN_INDEX, t);
    if (!n) return NULL;
    n->a = obj;
    if (!slice) {
        if (!parts[0]) return pfail(P, t, "empty subscript"), NULL;
        n->b = parts[0];
        return n;
    }
    for (int i = 0; i < 3; i++)
        if (!push(P, &n->args, parts[i])) return NULL;
    return n;
}

/* A dotted filter or test name. */
static bool parse_dotted(parser *P, jnode *n) {
    const jtok *t = cur(P);
    if (t->kind != JT_NAME) return pfail(P, t, "expected a filter or test name");
    n->name = t->p, n->name_n = t->n;
    P->pos++;
    while (is_op(P, JOP('.', 0)) && P->pos + 1 < P->n && P->t[P->pos + 1].kind == JT_NAME) {
        n->name_n = (size_t)(P->t[P->pos + 1].p + P->t[P->pos + 1].n - n->name);
        P->pos += 2;
    }
    return true;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n) {
        if (is_op(P, JOP('.', 0)) || is_op(P, JOP('[', 0))) {
            n = parse_subscript(P, n);
        } else if (is_op(P, JOP('(', 0))) {
            jnode *c = node(P, JN_CALL, cur(P));
            if (!c) return NULL;
            c->a = n, c->line = n->line, c->col = n->col;   /* errors point at the callee */
            if (!parse_args(P, &c->args)) return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_filters(parser *P, jnode *n) {
    while (n) {
        const jtok *t = cur(P);
        if (skip_op(P, JOP('|', 0))) {
            jnode *f = node(P, JN_FILTER, t);
            if (!f || !parse_dotted(P, f)) return NULL;
            f->a = n;
            if (is_op(P, JOP('(', 0)) && !parse_args(P, &f->args)) return NULL;
            n = f;
        } else if (skip_name(P, "is")) {
            jnode *te = node(P, JN_TEST, t);
            if (!te) return NULL;
            te->op = skip_name(P, "not");
            if (!parse_dotted(P, te)) return NULL;
            te->a = n;
            const jtok *u = cur(P);
            if (is_op(P, JOP('(', 0))) {
                if (!parse_args(P, &te->args)) return NULL;
            } else if ((u->kind == JT_NAME || u->kind == JT_STRING || u->kind == JT_INT || u->kind == JT_FLOAT ||
                        is_op(P, JOP('[', 0)) || is_op(P, JOP('{', 0))) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and") && !is_name(P, "is") &&
                       !is_name(P, "if") && !is_name(P, "in") && !is_name(P, "not")) {
                jnode *arg = parse_postfix(P, parse_primary(P));
                if (!arg || !push(P, &te->args, arg)) return NULL;
            }
            n = te;
        } else if (is_op(P, JOP('(', 0))) {
            n = parse_postfix(P, n);
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    if (!enter(P)) return NULL;
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(P, JOP('-', 0)) || is_op(P, JOP('+', 0))) {
        P->pos++;
        n = node(P, t->op == JOP('-', 0) ? JN_NEG : JN_POS, t);
        if (n && !(n->a = parse_unary(P, false))) n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, const jtok *at, int op, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = node(P, JN_BINOP, at);
    if (!n) return NULL;
    n->op = op, n->a = l, n->b = r;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, true);
    while (n && is_op(P, JOP('*', '*'))) {
        const jtok *t = cur(P);
        P->pos++;
        n = binop(P, t, t->op, n, parse_unary(P, true));
    }
    return n;
}

static jnode *parse_math2(parser *P) {
    jnode *n = parse_pow(P);
    while (n && (is_op(P, JOP('*', 0)) || is_op(P, JOP('/', 0)) || is_op(P, JOP('/', '/')) || is_op(P, JOP('%', 0)))) {
        const jtok *t = cur(P);
        P->pos++;
        n = binop(P, t, t->op, n, parse_pow(P));
    }
    return n;
}

static jnode *parse_concat(parser *P) {
    jnode *n = parse_math2(P);
    while (n && is_op(P, JOP('~', 0))) {
        const jtok *t = cur(P);
        P->pos++;
        n = binop(P, t, t->op, n, parse_math2(P));
    }
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *n = parse_concat(P);
    while (n && (is_op(P, JOP('+', 0)) || is_op(P, JOP('-', 0)))) {
        const jtok *t = cur(P);
        P->pos++;
        n = binop(P, t, t->op, n, parse_concat(P));
    }
    return n;
}

/* Comparison operators: JOP codes, plus 'i' for in and 'n' for not in. */
static int cmp_op(parser *P) {
    const jtok *t = cur(P);
    if (t->kind == JT_OP) {
        int op = t->op;
        if (op == JOP('=', '=') || op == JOP('!', '=') || op == JOP('<', 0) || op == JOP('<', '=') ||
            op == JOP('>', 0) || op == JOP('>', '='))
            return P->pos++, op;
        return 0;
    }
    if (skip_name(P, "in")) return 'i';
    if (is_name(P, "not") && P->pos + 1 < P->n && P->t[P->pos + 1].kind == JT_NAME && P->t[P->pos + 1].n == 2 &&
        memcmp(P->t[P->pos + 1].p, "in", 2) == 0) {
        P->pos += 2;
        return 'n';
    }
    return 0;
}

static jnode *parse_compare(parser *P) {
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    const jtok *t = cur(P);
    int op = cmp_op(P);
    if (!op) return first;
    jnode *n = node(P, JN_CMP, t);
    if (!n) return NULL;
    n->a = first;
    int ops[64];
    size_t k = 0;
    while (op) {
        if (k == 64) return pfail(P, t, "more than 64 chained comparisons"), NULL;
        ops[k++] = op;
        jnode *r = parse_math1(P);
        if (!r || !push(P, &n->body2, r)) return NULL;
        op = cmp_op(P);
    }
    n->ops = ja_alloc(P->a, k * sizeof *n->ops);
    if (!n->ops) return pfail(P, t, "out of memory"), NULL;
    memcpy(n->ops, ops, k * sizeof *ops);
    return n;
}

static jnode *parse_not(parser *P) {
    const jtok *t = cur(P);
    if (skip_name(P, "not")) {
        if (!enter(P)) return NULL;
        jnode *n = node(P, JN_NOT, t);
        if (n && !(n->a = parse_not(P))) n = NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and_or(parser *P, bool is_or) {
    jnode *n = is_or ? parse_and_or(P, false) : parse_not(P);
    while (n && is_name(P, is_or ? "or" : "and")) {
        const jtok *t = cur(P);
        P->pos++;
        jnode *m = node(P, is_or ? JN_OR : JN_AND, t);
        if (!m) return NULL;
        m->a = n;
        if (!(m->b = is_or ? parse_and_or(P, false) : parse_not(P))) return NULL;
        n = m;
    }
    return n;
}

static jnode *parse_expr(parser *P, bool with_cond) {
    if (!enter(P)) return NULL;
    jnode *n = parse_and_or(P, true);
    while (n && with_cond && is_name(P, "if")) {
        const jtok *t = cur(P);
        P->pos++;
        jnode *c = node(P, JN_COND, t);
        if (!c) return NULL;
        c->b = n;
        if (!(c->a = parse_and_or(P, true))) return NULL;
        if (skip_name(P, "else") && !(c->c = parse_expr(P, true))) return NULL;
        n = c;
    }
    P->depth--;
    return n;
}

/* An expression, or several separated by ',' as a tuple (set's and for's right-hand side). */
static jnode *parse_tuple(parser *P, bool with_cond) {
    const jtok *t = cur(P);
    jnode *e = parse_expr(P, with_cond);
    if (!e || !is_op(P, JOP(',', 0))) return e;
    jnode *tu = node(P, JN_TUPLE, t);
    if (!tu || !push(P, &tu->args, e)) return NULL;
    while (skip_op(P, JOP(',', 0))) {
        if (cur(P)->kind == JT_BLOCK_END) break;
        if (!(e = parse_expr(P, with_cond)) || !push(P, &tu->args, e)) return NULL;
    }
    return tu;
}

/* ======================================================================== */
/* Statements                                                                */
/* ======================================================================== */

static jnode *parse_body(parser *P, const char *const *stops, const char **stopped);

static bool block_end(parser *P) { return expect_kind(P, JT_BLOCK_END, "'%}'"); }

/* Names of a for / set target: one name or several separated by ','. */
static bool parse_targets(parser *P, jnodes *targets) {
    do {
        const jtok *t = cur(P);
        if (t->kind != JT_NAME) return pfail(P, t, "expected a variable name");
        jnode *n = node(P, JN_NAME, t);
        if (!n || !push(P, targets, n)) return false;
        n->name = t->p, n->name_n = t->n;
        P->pos++;
    } while (skip_op(P, JOP(',', 0)));
    return true;
}

static jnode *parse_if(parser *P, const jtok *at) {
    jnode *n = node(P, JN_IF, at);
    if (!n || !(n->a = parse_tuple(P, true)) || !block_end(P)) return NULL;
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    const char *stopped;
    jnode *body = parse_body(P, stops, &stopped);
    if (!body) return NULL;
    n->body = body->body;
    if (!strcmp(stopped, "elif")) {
        n->b = parse_if(P, cur(P));
        return n->b ? n : NULL;
    }
    if (!strcmp(stopped, "else")) {
        static const char *const end[] = {"endif", NULL};
        if (!block_end(P) || !(n->b = parse_body(P, end, &stopped))) return NULL;
    }
    return block_end(P) ? n : NULL;
}

static jnode *parse_for(parser *P, const jtok *at) {
    jnode *n = node(P, JN_FOR, at);
    if (!n || !parse_targets(P, &n->args)) return NULL;
    if (!skip_name(P, "in")) return pfail(P, cur(P), "expected 'in'"), NULL;
    if (!(n->a = parse_tuple(P, false))) return NULL;
    if (skip_name(P, "if") && !(n->b = parse_expr(P, true))) return NULL;
    if (is_name(P, "recursive")) return pfail(P, cur(P), "recursive loops are not supported"), NULL;
    if (!block_end(P)) return NULL;
    static const char *const stops[] = {"else", "endfor", NULL};
    const char *stopped;
    jnode *body = parse_body(P, stops, &stopped);
    if (!body) return NULL;
    n->body = body->body;
    if (!strcmp(stopped, "else")) {
        static const char *const end[] = {"endfor", NULL};
        if (!block_end(P) || !(body = parse_body(P, end, &stopped))) return NULL;
        n->body2 = body->body;
    }
    return block_end(P) ? n : NULL;
}

static jnode *parse_set(parser *P, const jtok *at) {
    jnode *n = node(P, JN_SET, at);
    if (!n) return NULL;
    const jtok *t = cur(P);
    if (t->kind == JT_NAME && P->pos + 2 < P->n && P->t[P->pos + 1].kind == JT_OP && P->t[P->pos + 1].op == JOP('.', 0)) {
        if (P->t[P->pos + 2].kind != JT_NAME) return pfail(P, &P->t[P->pos + 2], "expected an attribute name"), NULL;
        jnode *target = node(P, JN_ATTR, t), *obj = node(P, JN_NAME, t);
        if (!target || !obj) return NULL;
        obj->name = t->p, obj->name_n = t->n;
        target->a = obj, target->name = P->t[P->pos + 2].p, target->name_n = P->t[P->pos + 2].n;
        P->pos += 3;
        if (!push(P, &n->args, target)) return NULL;
    } else if (!parse_targets(P, &n->args)) {
        return NULL;
    }
    if (skip_op(P, JOP('=', 0))) return (n->a = parse_tuple(P, true)) && block_end(P) ? n : NULL;
    if (n->args.n != 1 || n->args.v[0]->kind != JN_NAME) return pfail(P, cur(P), "expected '='"), NULL;
    if (!block_end(P)) return NULL;
    static const char *const stops[] = {"endset", NULL};
    const char *stopped;
    jnode *body = parse_body(P, stops, &stopped);
    if (!body || !block_end(P)) return NULL;
    n->kind = JN_SETBLOCK;
    n->name = n->args.v[0]->name, n->name_n = n->args.v[0]->name_n;
    n->body = body->body;
    return n;
}

static jnode *parse_macro(parser *P, const jtok *at) {
    jnode *n = node(P, JN_MACRO, at);
    const jtok *t = cur(P);
    if (!n) return NULL;
    if (t->kind != JT_NAME) return pfail(P, t, "expected a macro name"), NULL;
    n->name = t->p, n->name_n = t->n;
    P->pos++;
    if (!expect_op(P, JOP('(', 0), "'('")) return NULL;
    while (!skip_op(P, JOP(')', 0))) {
        if (n->args.n && !expect_op(P, JOP(',', 0), "',' or ')'")) return NULL;
        if (skip_op(P, JOP(')', 0))) break;
        const jtok *pt = cur(P);
        if (pt->kind != JT_NAME) return pfail(P, pt, "expected a parameter name"), NULL;
        jnode *p = node(P, JN_NAME, pt);
        if (!p || !push(P, &n->args, p)) return NULL;
        p->name = pt->p, p->name_n = pt->n;
        P->pos++;
        if (skip_op(P, JOP('=', 0)) && !(p->a = parse_expr(P, true))) return NULL;
    }
    if (!block_end(P)) return NULL;
    static const char *const stops[] = {"endmacro", NULL};
    const char *stopped;
    jnode *body = parse_body(P, stops, &stopped);
    if (!body) return NULL;
    n->body = body->body;
    skip_name(P, "endmacro");
    if (cur(P)->kind == JT_NAME) P->pos++;   /* {% endmacro name %} */
    return block_end(P) ? n : NULL;
}

/* One {% ... %} statement after its keyword; *is_stop when the keyword ends the enclosing body. */
static jnode *parse_statement(parser *P) {
    const jtok *kw = cur(P);
    P->pos++;
    if (kw->n == 2 && !memcmp(kw->p, "if", 2)) return parse_if(P, kw);
    if (kw->n == 3 && !memcmp(kw->p, "for", 3)) return parse_for(P, kw);
    if (kw->n == 3 && !memcmp(kw->p, "set", 3)) return parse_set(P, kw);
    if (kw->n == 5 && !memcmp(kw->p, "macro", 5)) return parse_macro(P, kw);
    if ((kw->n == 5 && !memcmp(kw->p, "break", 5)) || (kw->n == 8 && !memcmp(kw->p, "continue", 8))) {
        jnode *n = node(P, kw->n == 5 ? JN_BREAK : JN_CONTINUE, kw);
        return n && block_end(P) ? n : NULL;
    }
    if (kw->n == 10 && !memcmp(kw->p, "generation", 10)) {
        static const char *const stops[] = {"endgeneration", NULL};
        const char *stopped;
        if (!block_end(P)) return NULL;
        jnode *body = parse_body(P, stops, &stopped);
        return body && block_end(P) ? body : NULL;
    }
    pfail(P, kw, "unknown or unsupported tag '%.*s'", (int)(kw->n > 40 ? 40 : kw->n), kw->p);
    return NULL;
}

/* Statements up to one of stops (a NULL-terminated list; NULL: up to the end of the
 * template). The stopping keyword is consumed; *stopped names it. */
static jnode *parse_body(parser *P, const char *const *stops, const char **stopped) {
    if (!enter(P)) return NULL;
    jnode *body = node(P, JN_BODY, cur(P));
    if (!body) return NULL;
    for (;;) {
        const jtok *t = cur(P);
        jnode *s = NULL;
        if (t->kind == JT_EOF) {
            if (stops) {
                size_t k = 0;
                while (stops[k + 1]) k++;
                return pfail(P, t, "unexpected end of template: missing {%% %s %%}", stops[k]), NULL;
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            if (!(s = node(P, JN_TEXT, t))) return NULL;
            s->lit = jv_str(t->p, t->n);
            P->pos++;
        } else if (t->kind == JT_VAR_BEGIN) {
            P->pos++;
            if (!(s = node(P, JN_OUTPUT, t)) || !(s->a = parse_tuple(P, true)) ||
                !expect_kind(P, JT_VAR_END, "'}}'"))
                return NULL;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            P->pos++;
            const jtok *kw = cur(P);
            if (kw->kind != JT_NAME) return pfail(P, kw, "expected a tag name after '{%%'"), NULL;
            for (size_t i = 0; stops && stops[i]; i++)
                if (kw->n == strlen(stops[i]) && !memcmp(kw->p, stops[i], kw->n)) {
                    P->pos++;
                    *stopped = stops[i];
                    P->depth--;
                    return body;
                }
            if (!(s = parse_statement(P))) return NULL;
        } else {
            return pfail(P, t, "unexpected %s", tok_desc(t)), NULL;
        }
        if (!push(P, &body->body, s)) return NULL;
    }
    P->depth--;
    return body;
}

bool jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **root, char *err, size_t err_cap) {
    parser P = {.a = a, .t = toks, .n = n_toks, .err = err, .err_cap = err_cap};
    *root = parse_body(&P, NULL, NULL);
    return *root != NULL && !P.failed;
}
