/*
 * toolcall.c — splits a model's generated text into content and tool calls, piece by piece.
 *
 * What it is: the parser behind `tool_calls` in chat responses (server-api.md §6.2, §8.2):
 * text is fed as it is generated; what can no longer become part of a tool-call block is
 * released as content at once, a completed block becomes a call {name, arguments}. Blocks are
 * what the Qwen templates teach (targets.md §13):
 *   Qwen3   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   Qwen3.5 <tool_call>\n<function=f>\n<parameter=k>\nvalue\n</parameter>\n</function>\n</tool_call>
 * What it is not: a grammar or a schema check (a parameter value of the XML form is taken as
 * JSON when it parses as JSON, else as a string — no schema is consulted), nor the HTTP side
 * (http.c turns calls into JSON with ids).
 *
 * Rules (the decisions the tests pin down):
 *  - "<tool_call>" opens a block anywhere in the text; a tail that may still become that tag
 *    is held back, so a partial tag never reaches the content.
 *  - A JSON body (first non-blank byte '{') closes at the first "</tool_call>" outside a JSON
 *    string: a string argument may contain the closing tag. Any other body closes at the first
 *    "</tool_call>".
 *  - A closed body that is not a valid call (bad JSON, no string "name", arguments neither an
 *    object, a string nor absent) is content, tags included, and yields no call.
 *  - An unclosed block at the end of the text is content.
 *  - Whitespace between a valid block and its neighbours is dropped (so "\n" between two
 *    calls is not content); whitespace is therefore held until the next non-blank byte.
 *  - arguments: the object printed compactly by cJSON (a string "arguments" is passed on as
 *    is; absent or null gives "{}").
 */
#include "server/server.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";
enum { OPEN_N = sizeof k_open - 1, CLOSE_N = sizeof k_close - 1 };

/* ---- buffers ------------------------------------------------------------ */

bool srv_strbuf_add(srv_strbuf *b, const char *s, size_t n) {
    if (n == 0) return true;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (b->len + n + 1 > nc) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) return false;
        b->p = p, b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

void srv_strbuf_free(srv_strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* ---- validating a block ------------------------------------------------- */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

static bool add_call(srv_toolparse *p, char *name, char *args) {
    if (!name || !args) goto fail;
    if (p->n_calls == p->cap_calls) {
        int nc = p->cap_calls ? 2 * p->cap_calls : 4;
        srv_tool_call *c = realloc(p->calls, sizeof *c * (size_t)nc);
        if (!c) goto fail;
        p->calls = c, p->cap_calls = nc;
    }
    p->calls[p->n_calls++] = (srv_tool_call){name, args};
    return true;
fail:
    free(name);
    free(args);
    p->oom = true;
    return false;
}

/* {"name": "f", "arguments": {...}} */
static bool parse_json_call(srv_toolparse *p, const char *s, size_t n) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    bool ok = false;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (cJSON_IsObject(o) && cJSON_IsString(name) && name->valuestring[0]) {
        char *a = NULL;
        if (!args || cJSON_IsNull(args)) a = dup_n("{}", 2);
        else if (cJSON_IsObject(args)) a = cJSON_PrintUnformatted(args);
        else if (cJSON_IsString(args)) a = dup_n(args->valuestring, strlen(args->valuestring));
        else goto done;
        ok = true;   /* valid even when out of memory: the block is not content */
        add_call(p, dup_n(name->valuestring, strlen(name->valuestring)), a);
    }
done:
    cJSON_Delete(o);
    return ok;
}

static bool eat(const char **s, const char *e, const char *lit) {
    size_t k = strlen(lit);
    if ((size_t)(e - *s) < k || memcmp(*s, lit, k)) return false;
    *s += k;
    return true;
}

static void skip_blank(const char **s, const char *e) {
    while (*s < e && is_blank(**s)) (*s)++;
}

/* <function=f>\n<parameter=k>\nvalue\n</parameter>\n...</function> (Qwen3.5 / Qwen3-Coder). */
static bool parse_xml_call(srv_toolparse *p, const char *s, size_t n) {
    const char *e = s + n;
    if (!eat(&s, e, "<function=")) return false;
    const char *nm = s;
    while (s < e && *s != '>' && *s != '\n') s++;
    if (s >= e || *s != '>' || s == nm) return false;
    size_t nm_n = (size_t)(s - nm);
    s++;
    cJSON *args = cJSON_CreateObject();
    if (!args) return p->oom = true, true;
    bool ok = false;
    for (;;) {
        skip_blank(&s, e);
        if (eat(&s, e, "</function>")) {
            skip_blank(&s, e);
            ok = s == e;
            break;
        }
        if (!eat(&s, e, "<parameter=")) break;
        const char *k = s;
        while (s < e && *s != '>' && *s != '\n') s++;
        if (s >= e || *s != '>' || s == k) break;
        char *key = dup_n(k, (size_t)(s - k));
        s++;
        const char *v = s, *end = NULL;
        for (const char *q = s; q + 12 <= e; q++)
            if (!memcmp(q, "</parameter>", 12)) {
                end = q;
                break;
            }
        if (!key || !end) {
            free(key);
            break;
        }
        s = end + 12;
        /* the template writes "\n" + value + "\n" */
        if (v < end && *v == '\n') v++;
        if (end > v && end[-1] == '\n') end--;
        char *val = dup_n(v, (size_t)(end - v));
        cJSON *item = val ? cJSON_Parse(val) : NULL;
        if (!item && val) item = cJSON_CreateString(val);
        free(val);
        if (!item) {
            free(key);
            p->oom = true;
            break;
        }
        cJSON_AddItemToObject(args, key, item);
        free(key);
    }
    if (ok) add_call(p, dup_n(nm, nm_n), cJSON_PrintUnformatted(args));
    cJSON_Delete(args);
    return ok;
}

static bool valid_call(srv_toolparse *p, const char *body, size_t n) {
    const char *s = body, *e = body + n;
    skip_blank(&s, e);
    while (e > s && is_blank(e[-1])) e--;
    if (s < e && *s == '{') return parse_json_call(p, s, (size_t)(e - s));
    return parse_xml_call(p, s, (size_t)(e - s));
}

/* ---- feeding ------------------------------------------------------------ */

void srv_toolparse_init(srv_toolparse *p) { memset(p, 0, sizeof *p); }

void srv_toolparse_free(srv_toolparse *p) {
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    srv_strbuf_free(&p->hold);
    srv_strbuf_free(&p->body);
    memset(p, 0, sizeof *p);
}

static void emit(srv_toolparse *p, srv_strbuf *out, const char *s, size_t n) {
    if (!srv_strbuf_add(out, s, n)) p->oom = true;
}

/* Text state: hold = blanks + a proper prefix of "<tool_call>"; release everything before. */
static void text_byte(srv_toolparse *p, char ch, srv_strbuf *out) {
    if (p->after_call && is_blank(ch)) return;
    p->after_call = false;
    if (!srv_strbuf_add(&p->hold, &ch, 1)) {
        p->oom = true;
        return;
    }
    const char *h = p->hold.p;
    size_t n = p->hold.len;
    if (n >= OPEN_N && !memcmp(h + n - OPEN_N, k_open, OPEN_N)) {
        /* the blanks before the tag stay held: dropped if the block is a call */
        p->hold.len = n - OPEN_N;
        p->in_block = true;
        p->body.len = 0;
        p->json_decided = p->json_mode = p->in_str = p->esc = false;
        return;
    }
    size_t k = n < OPEN_N - 1 ? n : OPEN_N - 1;
    for (; k > 0; k--)
        if (!memcmp(h + n - k, k_open, k)) break;
    size_t w = n - k;
    while (w > 0 && is_blank(h[w - 1])) w--;
    if (w > 0) {
        emit(p, out, h, w);
        memmove(p->hold.p, h + w, n - w);
        p->hold.len = n - w;
    }
}

static void block_byte(srv_toolparse *p, char ch, srv_strbuf *out) {
    if (!srv_strbuf_add(&p->body, &ch, 1)) {
        p->oom = true;
        return;
    }
    if (!p->json_decided && !is_blank(ch)) p->json_decided = true, p->json_mode = ch == '{';
    if (p->json_mode) {
        if (p->in_str) {
            if (p->esc) p->esc = false;
            else if (ch == '\\') p->esc = true;
            else if (ch == '"') p->in_str = false;
            return;
        }
        if (ch == '"') {
            p->in_str = true;
            return;
        }
    }
    size_t n = p->body.len;
    if (n < CLOSE_N || memcmp(p->body.p + n - CLOSE_N, k_close, CLOSE_N)) return;
    p->in_block = false;
    if (valid_call(p, p->body.p, n - CLOSE_N)) {
        p->after_call = true;   /* the blanks held before the tag are dropped */
    } else {
        emit(p, out, p->hold.p, p->hold.len);
        emit(p, out, k_open, OPEN_N);
        emit(p, out, p->body.p, n);
    }
    p->hold.len = 0;
    p->body.len = 0;
}

void srv_toolparse_feed(srv_toolparse *p, const char *s, size_t n, srv_strbuf *out) {
    for (size_t i = 0; i < n; i++) {
        if (p->in_block) block_byte(p, s[i], out);
        else text_byte(p, s[i], out);
    }
}

void srv_toolparse_finish(srv_toolparse *p, srv_strbuf *out) {
    emit(p, out, p->hold.p, p->hold.len);
    if (p->in_block) {
        emit(p, out, k_open, OPEN_N);
        emit(p, out, p->body.p, p->body.len);
    }
    p->hold.len = p->body.len = 0;
    p->in_block = false;
}
