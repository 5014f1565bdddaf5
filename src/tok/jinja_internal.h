/*
 * jinja_internal.h — the pieces the Jinja engine's files share: the render arena, the value
 * type, the lexer's tokens, the parser's nodes and the evaluator's context.
 *
 * What it is: private to src/tok/jinja_*.c (the public entry points are in tok/api.h). What it
 * is not: a general Jinja2 implementation; docs/chat-templates.md lists the subset and limits.
 *
 * Memory: everything a parse or a render creates lives in one arena (jarena) that is freed as
 * a whole, so values are plain structs copied by value, with no reference counts and no frees
 * on error paths. Strings are (pointer, length) views, often into the template text.
 */
#ifndef SPEX_TOK_JINJA_INTERNAL_H
#define SPEX_TOK_JINJA_INTERNAL_H

#include "spex.h"
#include "tok/tok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits (docs/chat-templates.md): a render that passes one fails with SPEX_ERR_RANGE. */
#define JINJA_MAX_SOURCE ((size_t)4 << 20)     /* template text, bytes                      */
#define JINJA_MAX_ARENA ((size_t)256 << 20)    /* memory of one parse or render             */
#define JINJA_MAX_OUTPUT ((size_t)16 << 20)    /* rendered text and any one string, bytes   */
#define JINJA_MAX_PARSE_DEPTH 200              /* nesting of expressions and blocks         */
#define JINJA_MAX_EVAL_DEPTH 400               /* nesting while rendering (macros included) */
#define JINJA_MAX_STEPS 20000000L              /* nodes evaluated in one render             */
#define JINJA_MAX_ITEMS ((size_t)1 << 20)      /* elements of one list (range(), '*' ...)   */

/* ---- arena ------------------------------------------------------------------------------- */

typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t used_total;   /* bytes taken from malloc, for JINJA_MAX_ARENA */
} jarena;

void *ja_alloc(jarena *a, size_t n);   /* zeroed, 16-aligned; NULL past the limit or OOM */
void ja_free(jarena *a);

/* ---- values ------------------------------------------------------------------------------ */

typedef enum jtype {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_MACRO, JV_FUNC,
} jtype;

typedef struct jlist jlist;
typedef struct jdict jdict;
struct jnode;

typedef struct jv {
    jtype t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        jlist *l;
        jdict *d;
        const struct jnode *macro;
        int func;   /* JV_FUNC: a global function, JF_* */
    } u;
    /* JV_UNDEF: the name or key that was missing (for messages), may be NULL. */
    const char *why;
} jv;

struct jlist {
    size_t n, cap;
    jv *v;
    bool tuple;   /* printed as (a, b): items() pairs and literal tuples */
};

struct jdict {
    size_t n, cap;
    jv *k;         /* string keys */
    jv *v;
    bool ns;       /* a namespace(): `set ns.x = ...` may assign */
    bool is_loop;  /* the `loop` object */
};

enum { JF_RAISE = 1, JF_NAMESPACE, JF_RANGE, JF_STRFTIME, JF_DICT, JF_LOOP_CYCLE };

static inline jv jv_undef(const char *why) { jv v = {0}; v.t = JV_UNDEF; v.why = why; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {0}; v.t = JV_STR; v.u.s.p = p; v.u.s.n = n; return v; }
static inline jv jv_list(jlist *l) { jv v = {0}; v.t = JV_LIST; v.u.l = l; return v; }
static inline jv jv_dict(jdict *d) { jv v = {0}; v.t = JV_DICT; v.u.d = d; return v; }

/* A growing byte buffer in the arena. */
typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

/* false past JINJA_MAX_OUTPUT or the arena limit */
bool jb_put(jarena *a, jbuf *b, const char *s, size_t n);
bool jb_puts(jarena *a, jbuf *b, const char *s);

jlist *jl_new(jarena *a, size_t cap);
bool jl_push(jarena *a, jlist *l, jv v);
jdict *jd_new(jarena *a);
/* Sets key (copied view) to v, replacing an existing value in place (insertion order kept). */
bool jd_set(jarena *a, jdict *d, const char *k, size_t kn, jv v);
/* Building a dict of many keys: jd_append adds without looking for the key, then jd_dedup
 * keeps each repeated key at its first place with its last value (Python's dict literal and
 * json.loads), in O(n log n) where n jd_set calls would take O(n^2). */
bool jd_append(jarena *a, jdict *d, jv key, jv v);
bool jd_dedup(jarena *a, jdict *d);
/* The value of key, or NULL. */
jv *jd_get(const jdict *d, const char *k, size_t kn);

bool jv_truthy(jv v);
const char *jv_type_name(jv v);   /* Python's names: 'str', 'int', 'dict', ... */
bool jv_is_number(jv v);          /* bool, int or float (Python's bool is an int) */
double jv_num(jv v);
/* Python's ==. */
bool jv_equal(jv a, jv b);
/* str(v) (strings raw) or repr(v) (strings quoted) appended to b; false on a limit. */
bool jv_str_append(jarena *a, jbuf *b, jv v, bool repr);
/* json.dumps's options: indent (< 0: None), sort_keys, ensure_ascii, separators (Python's
 * defaults: ", " or, with an indent, "," between items; ": " after keys). */
typedef struct jjson {
    int indent;
    bool sort, ascii;
    jv item_sep, key_sep;   /* strings */
} jjson;

/* json.dumps(v, ...) appended to b. false with *bad set to the unserialisable value's type
 * name, or on a limit. */
bool jv_tojson(jarena *a, jbuf *b, jv v, const jjson *o, const char **bad);
/* UTF-8 helpers: Python indexes strings by code point; a malformed byte counts as one. */
size_t ju_next(const char *s, size_t n, size_t i);   /* offset of the character after s[i] */
size_t ju_count(const char *s, size_t n);            /* characters in s */

/* Python's repr(float). */

/* JSON text to a value (objects keep key order; a repeated key keeps its first place and
 * last value, as Python's json.loads). false with a message in err. */
bool jv_from_json(jarena *a, const char *s, size_t n, jv *out, char *err, size_t err_cap);

/* ---- tokens and nodes -------------------------------------------------------------------- */

typedef enum jtok_kind {
    JT_EOF = 0, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_INT, JT_FLOAT, JT_STRING, JT_OP,
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int op;                 /* JT_OP: the operator's characters packed, see JOP() */
    const char *p;          /* text: the token's source, or the decoded string / data */
    size_t n;
    int64_t i;              /* JT_INT */
    double f;               /* JT_FLOAT */
    int line, col;
} jtok;

/* Operators as up to 2 chars packed into an int: JOP('/', '/') is "//". */
#define JOP(a, b) ((int)(unsigned char)(a) | ((int)(unsigned char)(b) << 8))

/* Splits src into tokens (whitespace control applied, trim_blocks and lstrip_blocks on, as
 * transformers renders chat templates). false with a message "line L col C: ..." in err. */
bool jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks, char *err, size_t err_cap);

typedef enum jnode_kind {
    /* expressions */
    JN_LIT = 1, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_INDEX, JN_SLICE, JN_CALL, JN_FILTER,
    JN_TEST, JN_NEG, JN_POS, JN_NOT, JN_BINOP, JN_AND, JN_OR, JN_CMP, JN_COND, JN_KWARG,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE, JN_BODY,
} jnode_kind;

typedef struct jnode jnode;
typedef struct jnodes {
    jnode **v;
    size_t n, cap;
} jnodes;

struct jnode {
    jnode_kind kind;
    int op;                  /* JN_BINOP / JN_CMP operator (JOP), JN_TEST negated flag */
    int line, col;
    jv lit;                  /* JN_LIT, JN_TEXT */
    const char *name;        /* JN_NAME, JN_ATTR, JN_FILTER, JN_TEST, JN_KWARG, JN_SETBLOCK, JN_MACRO */
    size_t name_n;
    jnode *a, *b, *c;        /* operands; for: a = iterable, b = filter; if: a = cond, b = else */
    jnodes args;             /* list items, call/filter/test arguments, macro parameters, for targets */
    jnodes body;             /* statements: if / for / macro / set block body; dict: values */
    jnodes body2;            /* for ... else; JN_CMP: the operands after the first; ops in ops */
    int *ops;                /* JN_CMP: the operator of each comparison */
};

/* Parses tokens into a JN_BODY node. false with "line L col C: ..." in err. */
bool jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **root, char *err, size_t err_cap);

/* ---- evaluation -------------------------------------------------------------------------- */

typedef struct jframe jframe;
struct jframe {
    jframe *parent;
    jdict *vars;
};

typedef struct jctx {
    jarena *a;
    jbuf *out;               /* where text goes now (swapped for macro calls and set blocks) */
    jframe *globals;
    int depth;
    long steps;
    spex_status status;      /* SPEX_OK while rendering goes on */
    char msg[SPEX_ERROR_MSG_MAX];
} jctx;

/* Records the first error ("line L col C: ..." when n is non-NULL); always returns false. */
bool jx_fail(jctx *c, const jnode *n, spex_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Renders root's statements into c->out. */
bool jinja_exec(jctx *c, const jnode *root, jframe *f);
bool jinja_eval(jctx *c, const jnode *n, jframe *f, jv *out);
/* Calls a macro value with evaluated positional and keyword arguments. */
bool jinja_call_macro(jctx *c, const jnode *at, jv macro, const jv *pos, size_t n_pos, const jv *kw_vals,
                      const jnode *const *kw_names, size_t n_kw, jv *out);

/* Builtins (jinja_builtins.c): a filter, a test, a method of a str / dict / list, a global
 * function. Each takes evaluated arguments; kw_names[i]->name names kw[i]. */
typedef struct jargs {
    const jv *pos;
    size_t n_pos;
    const jv *kw;
    const jnode *const *kw_names;
    size_t n_kw;
} jargs;

bool jinja_filter(jctx *c, const jnode *at, const char *name, size_t name_n, jv x, const jargs *a, jframe *f,
                  jv *out);
bool jinja_test(jctx *c, const jnode *at, const char *name, size_t name_n, jv x, const jargs *a, jv *out);
/* false with *found = false when obj has no such method (then the caller reports). */
bool jinja_method(jctx *c, const jnode *at, jv obj, const char *name, size_t name_n, const jargs *a, jv *out,
                  bool *found);
bool jinja_call_func(jctx *c, const jnode *at, int func, const jargs *a, jv *out);

/* Items of an iterable (list: itself; dict: its keys; string: its characters; undefined:
 * empty). false (error set) for anything else. */
bool jinja_iter(jctx *c, const jnode *at, jv x, jlist **out);
/* Attribute or item access as jinja2 does (obj.name falls back to obj['name']). */
bool jinja_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t n, jv *out);
bool jinja_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out);
/* a OP b for + - * / // % ** ~ and comparisons < <= > >=. */
bool jinja_binop(jctx *c, const jnode *at, int op, jv x, jv y, jv *out);
bool jinja_compare(jctx *c, const jnode *at, int op, jv x, jv y, bool *out);
bool jinja_contains(jctx *c, const jnode *at, jv hay, jv needle, bool *out);
/* str(v) as a new string value. */
bool jinja_to_str(jctx *c, const jnode *at, jv v, jv *out);

#endif
