/*
 * jinja.c — the Jinja engine's entry points (tok/api.h): parse a template, render it with a
 * JSON context, and render spex_chat_msg messages through a GGUF's own chat template.
 *
 * What it is: the glue between the lexer, parser and evaluator (jinja_*.c), each render in an
 * arena of its own so that a parsed template stays read-only and shareable. The chat entry
 * builds the context llama.cpp's --jinja and transformers' apply_chat_template pass:
 * messages, tools (none when there are none, as transformers passes tools=None),
 * add_generation_prompt, enable_thinking, bos_token, eos_token, then any extra keys.
 * What it is not: a template detector (spex_chat_detect) or a tool-call parser.
 */
#include "tok/api.h"
#include "core/file.h"
#include "tok/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spex_jinja {
    jarena arena;
    jnode *root;
};

spex_status spex_jinja_parse(const char *src, size_t len, spex_jinja **out, spex_error *err) {
    if (!out || (!src && len)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: NULL argument");
    *out = NULL;
    if (len > JINJA_MAX_SOURCE)
        return spex_error_set(err, SPEX_ERR_RANGE, "jinja: template of %zu bytes exceeds the %zu MiB limit", len,
                              JINJA_MAX_SOURCE >> 20);
    spex_jinja *t = calloc(1, sizeof *t);
    if (!t) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    char msg[SPEX_ERROR_MSG_MAX - 16];
    jtok *toks;
    size_t n_toks;
    if (!jinja_lex(&t->arena, src ? src : "", len, &toks, &n_toks, msg, sizeof msg) ||
        !jinja_parse(&t->arena, toks, n_toks, &t->root, msg, sizeof msg)) {
        spex_jinja_free(t);
        return spex_error_set(err, SPEX_ERR_FORMAT, "jinja: %s", msg);
    }
    *out = t;
    return SPEX_OK;
}

spex_status spex_jinja_load(const spex_gguf *g, const char *file, spex_jinja **out, char **text_out,
                            size_t *len_out, spex_error *err) {
    if (!out || (!file && !g)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: NULL argument");
    *out = NULL;
    if (text_out) *text_out = NULL;
    spex_mapped_file map = {0};
    spex_str src = {0};
    const char *from = file ? file : "tokenizer.chat_template";
    if (file) {
        spex_status s = spex_file_map(file, &map, err);
        if (s != SPEX_OK) return s;
        src = (spex_str){(const char *)map.data, map.size};
    } else if (spex_gguf_get_str(g, "tokenizer.chat_template", &src, NULL) != SPEX_OK) {
        return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: the model has no tokenizer.chat_template",
                              spex_gguf_path(g));
    }
    spex_status s = spex_jinja_parse(src.ptr, src.len, out, err);
    if (s != SPEX_OK) {
        char msg[SPEX_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        spex_error_set(err, s, "%s: %s", from, msg);
    } else if (text_out) {
        if (!(*text_out = malloc(src.len + 1))) {
            spex_jinja_free(*out), *out = NULL;
            s = spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", from);
        } else {
            if (src.len) memcpy(*text_out, src.ptr, src.len);
            (*text_out)[src.len] = 0;
        }
    }
    if (len_out) *len_out = src.len;
    spex_file_unmap(&map);
    return s;
}

void spex_jinja_free(spex_jinja *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}

/* Renders t with ctx (a dict in arena a) into a malloc'd string. */
static spex_status render(const spex_jinja *t, jarena *a, jdict *ctx, char **out, size_t *out_len, spex_error *err) {
    jbuf buf = {0};
    jframe *root = ja_alloc(a, sizeof *root);
    if (!root) return spex_error_set(err, SPEX_ERR_RANGE, "jinja: memory limit reached");
    root->vars = ctx;
    jctx c = {.a = a, .out = &buf, .globals = root, .status = SPEX_OK};
    if (!jinja_exec(&c, t->root, root)) {
        if (c.status == SPEX_OK) c.status = SPEX_ERR_INTERNAL;
        return spex_error_set(err, c.status, "jinja: %s", c.msg);
    }
    char *s = malloc(buf.n + 1);
    if (!s) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    if (buf.n) memcpy(s, buf.p, buf.n);
    s[buf.n] = '\0';
    *out = s;
    if (out_len) *out_len = buf.n;
    return SPEX_OK;
}

spex_status spex_jinja_render(const spex_jinja *t, const char *context_json, size_t len, char **out,
                              size_t *out_len, spex_error *err) {
    if (!t || !out || (!context_json && len)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    jarena a = {0};
    jv ctx = {0};
    char msg[200];
    spex_status st;
    if (!context_json || len == 0) {
        ctx.t = JV_DICT, ctx.u.d = jd_new(&a);
        st = ctx.u.d ? SPEX_OK : spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    } else if (!jv_from_json(&a, context_json, len, &ctx, msg, sizeof msg)) {
        st = spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: context: %s", msg);
    } else if (ctx.t != JV_DICT) {
        st = spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: context: not a JSON object");
    } else {
        st = SPEX_OK;
    }
    if (st == SPEX_OK) st = render(t, &a, ctx.u.d, out, out_len, err);
    ja_free(&a);
    return st;
}

/* ---- chat messages ------------------------------------------------------------------------- */

static jv cstring(const char *s) { return jv_str(s ? s : "", s ? strlen(s) : 0); }


/* JSON text as a value; the text itself as a string when it is not JSON. */
static jv json_or_text(jarena *a, const char *s) {
    jv v;
    char msg[128];
    if (s && jv_from_json(a, s, strlen(s), &v, msg, sizeof msg)) return v;
    return cstring(s);
}

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

/* The message dict llama.cpp builds (common_chat_msgs_to_json_oaicompat), content as a string. */
static bool message_dict(jarena *a, const spex_chat_msg *m, jv *out) {
    jdict *d = jd_new(a);
    if (!d) return false;
    const char *role = (unsigned)m->role <= SPEX_CHAT_TOOL ? role_names[m->role] : "user";
    if (!jd_set(a, d, "role", 4, cstring(role)) || !jd_set(a, d, "content", 7, cstring(m->content))) return false;
    if (m->reasoning_content && !jd_set(a, d, "reasoning_content", 17, cstring(m->reasoning_content))) return false;
    if (m->n_tool_calls > 0) {
        jlist *calls = jl_new(a, m->n_tool_calls);
        if (!calls) return false;
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            jdict *call = jd_new(a), *fn = jd_new(a);
            if (!call || !fn || !jd_set(a, fn, "name", 4, cstring(m->tool_calls[k].name)) ||
                !jd_set(a, fn, "arguments", 9, json_or_text(a, m->tool_calls[k].arguments)) ||
                !jd_set(a, call, "type", 4, cstring("function")) || !jd_set(a, call, "function", 8, jv_dict(fn)) ||
                !jl_push(a, calls, jv_dict(call)))
                return false;
        }
        if (!jd_set(a, d, "tool_calls", 10, jv_list(calls))) return false;
    }
    *out = jv_dict(d);
    return true;
}

static spex_status chat_context(jarena *a, const spex_chat_msg *msgs, size_t n, const char *const *tools,
                                size_t n_tools, const spex_jinja_chat *o, jdict **out, spex_error *err) {
    jdict *ctx = jd_new(a);
    jlist *ml = jl_new(a, n), *tl = n_tools ? jl_new(a, n_tools) : NULL;
    if (!ctx || !ml || (n_tools && !tl)) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    for (size_t i = 0; i < n; i++)
        if (!message_dict(a, &msgs[i], &ml->v[ml->n++])) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    char msg[200];
    for (size_t i = 0; i < n_tools; i++) {
        if (!tools[i] || !jv_from_json(a, tools[i], strlen(tools[i]), &tl->v[tl->n++], msg, sizeof msg))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: tool %zu is not valid JSON", i);
    }
    bool ok = jd_set(a, ctx, "messages", 8, jv_list(ml)) &&
              jd_set(a, ctx, "tools", 5, tl ? jv_list(tl) : jv_none()) &&
              jd_set(a, ctx, "add_generation_prompt", 21, jv_bool(o->add_generation_prompt)) &&
              jd_set(a, ctx, "enable_thinking", 15, jv_bool(o->enable_thinking)) &&
              jd_set(a, ctx, "bos_token", 9, cstring(o->bos_token)) &&
              jd_set(a, ctx, "eos_token", 9, cstring(o->eos_token));
    if (!ok) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    if (o->extra_json && *o->extra_json) {
        jv extra;
        if (!jv_from_json(a, o->extra_json, strlen(o->extra_json), &extra, msg, sizeof msg) || extra.t != JV_DICT)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: extra context is not a JSON object");
        for (size_t i = 0; i < extra.u.d->n; i++)   /* a key given again takes the extra value */
            if (!jd_append(a, ctx, extra.u.d->k[i], extra.u.d->v[i]))
                return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
        if (!jd_dedup(a, ctx)) return spex_error_set(err, SPEX_ERR_NOMEM, "jinja: out of memory");
    }
    *out = ctx;
    return SPEX_OK;
}

spex_status spex_chat_apply_jinja(const spex_jinja *t, const spex_chat_msg *msgs, size_t n, const char *const *tools,
                                  size_t n_tools, const spex_jinja_chat *opts, char **out, size_t *out_len,
                                  spex_error *err) {
    if (!t || !out || (n && !msgs) || (n_tools && !tools))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned)msgs[i].role > SPEX_CHAT_TOOL || (msgs[i].n_tool_calls && !msgs[i].tool_calls))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "jinja: message %zu: bad role or tool calls", i);
    static const spex_jinja_chat defaults = {.add_generation_prompt = true, .enable_thinking = true};
    jarena a = {0};
    jdict *ctx = NULL;
    spex_status st = chat_context(&a, msgs, n, tools, n_tools, opts ? opts : &defaults, &ctx, err);
    if (st == SPEX_OK) st = render(t, &a, ctx, out, out_len, err);
    ja_free(&a);
    return st;
}
