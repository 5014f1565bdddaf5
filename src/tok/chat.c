/*
 * chat.c — built-in chat templates: Qwen3 and Qwen3.5 ChatML, and plain completion.
 *
 * What it is: a C renderer for each Jinja chat template spex's targets ship, producing byte
 * for byte what the template renders for the same messages, add_generation_prompt and
 * enable_thinking (targets.md §13), including the `tools` variable and assistant tool_calls,
 * and the choice of renderer from a GGUF's tokenizer.chat_template. What it is not: a Jinja
 * engine, nor a tool-call parser for the model's output (src/server/toolcall.c).
 *
 * Tools and tool-call arguments arrive as JSON text; the templates print them with `tojson`,
 * which in transformers (and llama.cpp's Jinja) is Python's json.dumps(x, ensure_ascii=False):
 * separators ", " and ": ", key order kept, strings re-escaped (only '"', '\\', control
 * characters; "\u00e9" and "\/" come out as "é" and "/"), integers as written, other numbers
 * as Python's float repr ("1.50" -> "1.5", "1e5" -> "100000.0", "1e400" -> "Infinity").
 *
 * SPEX_CHAT_CHATML_QWEN3 — Qwen3's template (shared/data/qwen3-tokenizer/tokenizer_config.json):
 *  - a first system message: "<|im_start|>system\n{content}<|im_end|>\n"; user messages and
 *    later system messages: "<|im_start|>{role}\n{content}<|im_end|>\n";
 *  - the last query: the last user message whose content is not wrapped in
 *    <tool_response>...</tool_response> (none found: index n-1);
 *  - assistant: reasoning = reasoning_content, else if content has "</think>":
 *    content = after the last "</think>", leading '\n's stripped; reasoning = before the first
 *    "</think>", trailing '\n's stripped, after the last "<think>", leading '\n's stripped.
 *    After the last query, if it is the last message or has reasoning:
 *    "<|im_start|>assistant\n<think>\n{reasoning, '\n's stripped}\n</think>\n\n{content,
 *    leading '\n's stripped}"; otherwise (and before the last query: reasoning dropped)
 *    "<|im_start|>assistant\n{content}"; then "<|im_end|>\n";
 *  - tool: "<|im_start|>user" before the first of a run of tool messages, each message
 *    "\n<tool_response>\n{content}\n</tool_response>", "<|im_end|>\n" after the run;
 *  - tools: the first turn becomes "<|im_start|>system\n" + (first system content + "\n\n")
 *    + "# Tools\n\nYou may call ... <tools>" + "\n" + tojson(tool) per tool + "\n</tools>\n\n
 *    For each function call ... </tool_call><|im_end|>\n" (the literals below are the template's);
 *  - assistant tool calls, after the content: "\n" before each (before the first only when
 *    the content variable is non-empty), then "<tool_call>\n{\"name\": \"" + name +
 *    "\", \"arguments\": " + arguments + "}\n</tool_call>";
 *  - generation prompt "<|im_start|>assistant\n", plus "<think>\n\n</think>\n\n" when
 *    thinking is off;
 *  - no messages (where the Jinja template fails on messages[0]): the generation prompt alone.
 * SPEX_CHAT_CHATML_QWEN35 — the Qwen3.5 template (targets.md §13.2) differs: every content is
 *  trimmed (Jinja |trim: Unicode whitespace at both ends), reasoning too; assistant turns after
 *  the last query always get the think block; a tool run's header needs a previous message
 *  (loop.previtem); no messages, no user query or a system message after the first are errors
 *  (the template raises); the generation prompt opens the think block: "<think>\n" when
 *  thinking, "<think>\n\n</think>\n\n" when not. Tools (first written from the Qwen3.6 text of
 *  the same family; since checked line by line against a public copy of the Qwen3.5 default
 *  template, which has the same literals): "<|im_start|>system\n# Tools\n\nYou have access to
 *  the following functions:\n\n<tools>" + "\n" + tojson(tool) per tool + "\n</tools>" + the
 *  "If you choose to call a function ..." instructions + ("\n\n" + trimmed first system
 *  content, if non-empty) + "<|im_end|>\n". Tool calls use the XML form: "<tool_call>\n
 *  <function=NAME>\n" then per argument "<parameter=KEY>\n" + (string value raw, else tojson)
 *  + "\n</parameter>\n", then "</function>\n</tool_call>"; the first call is preceded by
 *  "\n\n" when the content is non-empty (trimmed), later ones by "\n".
 * SPEX_CHAT_NONE — the contents concatenated, nothing added.
 *
 * Recognition (spex_chat_detect), by substrings of the template text:
 *  - Qwen3.5: "<|im_start|>", "render_content", "reasoning_content", "last_query_index",
 *    "<tool_response>" and "<think>" (its render_content macro is what Qwen3 lacks). Variants
 *    with "reasoning_effort" or "preserve_thinking" (Qwen3.6 / 3.8 style) render as Qwen3.5
 *    with a warning, since those variables change their output.
 *  - Qwen3: "<|im_start|>", "enable_thinking", "reasoning_content", "last_query_index" and
 *    "<tool_response>", without "render_content".
 *  - otherwise ChatML with the Qwen3 rules (warned) if the template or the vocabulary has
 *    <|im_start|>, else plain completion (warned if a template was given).
 */
#include "spex.h"
#include "tok/api.h"
#include "tok/tok.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Strings                                                                   */
/* ======================================================================== */

typedef struct sv {
    const char *p;
    size_t n;
} sv;

static sv sv_of(const char *s) { return (sv){s ? s : "", s ? strlen(s) : 0}; }

/* Offset of the first / last occurrence of lit in s, or SIZE_MAX. */
static size_t sv_find(sv s, const char *lit) {
    size_t k = strlen(lit);
    if (k > s.n) return SIZE_MAX;
    for (size_t i = 0; i + k <= s.n; i++)
        if (memcmp(s.p + i, lit, k) == 0) return i;
    return SIZE_MAX;
}

static size_t sv_rfind(sv s, const char *lit) {
    size_t k = strlen(lit);
    if (k > s.n) return SIZE_MAX;
    for (size_t i = s.n - k + 1; i-- > 0;)
        if (memcmp(s.p + i, lit, k) == 0) return i;
    return SIZE_MAX;
}

static bool sv_starts(sv s, const char *lit) {
    size_t k = strlen(lit);
    return k <= s.n && memcmp(s.p, lit, k) == 0;
}

static bool sv_ends(sv s, const char *lit) {
    size_t k = strlen(lit);
    return k <= s.n && memcmp(s.p + s.n - k, lit, k) == 0;
}

/* Python's str.lstrip('\n') / rstrip('\n') / strip('\n'). */
static sv lstrip_nl(sv s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static sv rstrip_nl(sv s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static sv strip_nl(sv s) { return rstrip_nl(lstrip_nl(s)); }

/* Code points Python's str.isspace() accepts (what Jinja's |trim strips). */
static bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* Decodes one well-formed UTF-8 sequence at s[0 .. n); returns its length, 0 if malformed.
 * Malformed bytes are never whitespace, so trim stops at them. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char b = s[0];
    size_t len;
    uint32_t c, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if ((b & 0xe0) == 0xc0) {
        len = 2, c = b & 0x1f, min = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
        len = 3, c = b & 0x0f, min = 0x800;
    } else if ((b & 0xf8) == 0xf0) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    *cp = c;
    return len;
}

static sv trim_ws(sv s) {
    for (;;) {
        uint32_t c;
        size_t k = utf8_decode((const unsigned char *)s.p, s.n, &c);
        if (k == 0 || !is_py_space(c)) break;
        s.p += k, s.n -= k;
    }
    while (s.n) {
        /* Start of the last character: back over at most 3 continuation bytes. */
        size_t start = s.n - 1;
        while (start > 0 && s.n - start < 4 && ((unsigned char)s.p[start] & 0xc0) == 0x80) start--;
        uint32_t c;
        size_t k = utf8_decode((const unsigned char *)s.p + start, s.n - start, &c);
        if (k != s.n - start || !is_py_space(c)) break;
        s.n = start;
    }
    return s;
}

/* Output that keeps counting past the buffer's end, so one pass gives the needed size. */
typedef struct sink {
    char *buf;
    size_t cap, len;
    bool overflow;
} sink;

static void put(sink *o, sv s) {
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s.p, s.n < room ? s.n : room);
    }
    if (s.n > SIZE_MAX - 1 - o->len) o->overflow = true;
    else o->len += s.n;
}

static void puts_(sink *o, const char *lit) { put(o, sv_of(lit)); }

/* ======================================================================== */
/* Names and detection                                                       */
/* ======================================================================== */

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

const char *spex_chat_template_name(spex_chat_template t) {
    switch (t) {
    case SPEX_CHAT_NONE: return "none";
    case SPEX_CHAT_CHATML_QWEN3: return "chatml-qwen3";
    case SPEX_CHAT_CHATML_QWEN35: return "chatml-qwen35";
    }
    return "unknown";
}

bool spex_chat_template_from_name(const char *name, spex_chat_template *out) {
    static const struct {
        const char *name;
        spex_chat_template t;
    } names[] = {
        {"none", SPEX_CHAT_NONE},           {"chatml", SPEX_CHAT_CHATML_QWEN3},
        {"chatml-qwen3", SPEX_CHAT_CHATML_QWEN3}, {"qwen3", SPEX_CHAT_CHATML_QWEN3},
        {"chatml-qwen35", SPEX_CHAT_CHATML_QWEN35}, {"qwen35", SPEX_CHAT_CHATML_QWEN35},
    };
    if (!name || !out) return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].t;
            return true;
        }
    return false;
}

bool spex_chat_role_from_name(const char *name, spex_chat_role *out) {
    if (!name || !out) return false;
    for (int i = 0; i < 4; i++)
        if (strcmp(name, role_names[i]) == 0) {
            *out = (spex_chat_role)i;
            return true;
        }
    return false;
}

void spex_chat_detect(const char *jinja_template, bool vocab_has_im_start, spex_chat_template *out,
                      bool *warned) {
    spex_chat_template t;
    bool w;
    const char *j = jinja_template && *jinja_template ? jinja_template : NULL;
    bool im_start = j && strstr(j, "<|im_start|>");
    bool qwen_common = im_start && strstr(j, "reasoning_content") && strstr(j, "last_query_index") &&
                       strstr(j, "<tool_response>");
    bool render_content = j && strstr(j, "render_content");
    if (qwen_common && render_content && strstr(j, "<think>")) {
        t = SPEX_CHAT_CHATML_QWEN35;
        w = strstr(j, "reasoning_effort") || strstr(j, "preserve_thinking");
    } else if (qwen_common && !render_content && strstr(j, "enable_thinking")) {
        t = SPEX_CHAT_CHATML_QWEN3;
        w = false;
    } else if (im_start || vocab_has_im_start) {
        t = SPEX_CHAT_CHATML_QWEN3;
        w = true;
    } else {
        t = SPEX_CHAT_NONE;
        w = j != NULL;
    }
    if (out) *out = t;
    if (warned) *warned = w;
}

/* ======================================================================== */
/* tojson: Python json.dumps(ensure_ascii=False) of a JSON text              */
/* ======================================================================== */

/* A cursor over JSON text; every reader returns false on malformed input. Nesting is capped
 * so hostile input cannot exhaust the stack. */
typedef struct jcur {
    const char *p, *e;
} jcur;

enum { JSON_MAX_DEPTH = 128 };

static void jws(jcur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static bool hex4(jcur *c, uint32_t *v) {
    if (c->e - c->p < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(c->p[i]);
        if (h < 0) return false;
        *v = *v << 4 | (uint32_t)h;
    }
    c->p += 4;
    return true;
}

static void put_cp(sink *o, uint32_t cp) {
    uint8_t b[4];
    put(o, (sv){(const char *)b, spex_tok_utf8_put(cp, b)});
}

/* Python's escaping of one decoded character (quoted output). Lone surrogates, which UTF-8
 * cannot carry, stay escapes. */
static void put_escaped_cp(sink *o, uint32_t cp) {
    static const char hexd[] = "0123456789abcdef";
    switch (cp) {
    case '"': puts_(o, "\\\""); return;
    case '\\': puts_(o, "\\\\"); return;
    case '\n': puts_(o, "\\n"); return;
    case '\r': puts_(o, "\\r"); return;
    case '\t': puts_(o, "\\t"); return;
    case '\b': puts_(o, "\\b"); return;
    case '\f': puts_(o, "\\f"); return;
    }
    if (cp < 0x20 || (cp >= 0xd800 && cp <= 0xdfff)) {
        char b[6] = {'\\', 'u', hexd[cp >> 12 & 15], hexd[cp >> 8 & 15], hexd[cp >> 4 & 15], hexd[cp & 15]};
        put(o, (sv){b, 6});
        return;
    }
    put_cp(o, cp);
}

/* A string at c->p ('"'): decoded, then written quoted and re-escaped (quoted) or raw (the
 * Jinja value itself, as `+` concatenates it). Raw bytes >= 0x80 pass through unchanged. */
static bool jstring(jcur *c, sink *o, bool quoted) {
    if (c->p >= c->e || *c->p != '"') return false;
    c->p++;
    if (quoted) puts_(o, "\"");
    while (c->p < c->e && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20) return false;
        if (ch != '\\') {
            if (quoted && ch < 0x80) put_escaped_cp(o, ch);
            else put(o, (sv){c->p, 1});
            c->p++;
            continue;
        }
        if (++c->p >= c->e) return false;
        uint32_t cp;
        switch (*c->p++) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            if (!hex4(c, &cp)) return false;
            uint32_t lo;
            if (cp >= 0xd800 && cp <= 0xdbff && c->e - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u') {
                jcur t = {c->p + 2, c->e};
                if (hex4(&t, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    c->p = t.p;
                }
            }
            break;
        }
        default: return false;
        }
        if (quoted) put_escaped_cp(o, cp);
        else if (cp >= 0xd800 && cp <= 0xdfff) put_escaped_cp(o, cp);
        else put_cp(o, cp);
    }
    if (c->p >= c->e) return false;
    c->p++;
    if (quoted) puts_(o, "\"");
    return true;
}

/* Python's repr(float): the shortest digits that read back to x; positional notation when
 * the decimal exponent is in [-4, 16), with ".0" added, else "d.ddde+XX". */
static void put_py_float(sink *o, double x) {
    if (isnan(x) || isinf(x)) {
        puts_(o, isnan(x) ? "NaN" : x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char out[40];
    put(o, (sv){out, spex_tok_float_repr(x, out)});
}

/* A number: integers (no fraction or exponent) as written, as Python's int prints them
 * ("-0" -> "0"); the rest through float. */
static bool jnumber(jcur *c, sink *o) {
    const char *s = c->p;
    if (c->p < c->e && *c->p == '-') c->p++;
    if (c->p >= c->e || *c->p < '0' || *c->p > '9') return false;
    if (*c->p == '0') c->p++;
    else
        while (c->p < c->e && *c->p >= '0' && *c->p <= '9') c->p++;
    bool is_float = false;
    if (c->p < c->e && *c->p == '.') {
        is_float = true;
        c->p++;
        if (c->p >= c->e || *c->p < '0' || *c->p > '9') return false;
        while (c->p < c->e && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    if (c->p < c->e && (*c->p == 'e' || *c->p == 'E')) {
        is_float = true;
        c->p++;
        if (c->p < c->e && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->e || *c->p < '0' || *c->p > '9') return false;
        while (c->p < c->e && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    size_t n = (size_t)(c->p - s);
    if (!is_float) {
        if (n == 2 && s[0] == '-' && s[1] == '0') puts_(o, "0");
        else put(o, (sv){s, n});
        return true;
    }
    char tmp[512];
    if (n >= sizeof tmp) return false;   /* no JSON number that long is worth rendering */
    memcpy(tmp, s, n);
    tmp[n] = 0;
    put_py_float(o, strtod(tmp, NULL));
    return true;
}

static bool jlit(jcur *c, const char *lit, sink *o) {
    size_t k = strlen(lit);
    if ((size_t)(c->e - c->p) < k || memcmp(c->p, lit, k) != 0) return false;
    c->p += k;
    puts_(o, lit);
    return true;
}

static bool jvalue(jcur *c, sink *o, int depth) {
    jws(c);
    if (c->p >= c->e || depth > JSON_MAX_DEPTH) return false;
    char ch = *c->p;
    if (ch == '"') return jstring(c, o, true);
    if (ch == 't') return jlit(c, "true", o);
    if (ch == 'f') return jlit(c, "false", o);
    if (ch == 'n') return jlit(c, "null", o);
    if (ch != '{' && ch != '[') return jnumber(c, o);
    char close = ch == '{' ? '}' : ']';
    put(o, (sv){c->p++, 1});
    jws(c);
    if (c->p < c->e && *c->p == close) {
        put(o, (sv){c->p++, 1});
        return true;
    }
    for (bool first = true;; first = false) {
        if (!first) puts_(o, ", ");
        if (ch == '{') {
            jws(c);
            if (!jstring(c, o, true)) return false;
            jws(c);
            if (c->p >= c->e || *c->p != ':') return false;
            c->p++;
            puts_(o, ": ");
        }
        if (!jvalue(c, o, depth + 1)) return false;
        jws(c);
        if (c->p >= c->e) return false;
        if (*c->p == close) {
            put(o, (sv){c->p++, 1});
            return true;
        }
        if (*c->p != ',') return false;
        c->p++;
    }
}

/* Writes tojson(decode(text)) to o; false (o then holds garbage) when text is not one JSON
 * value with only whitespace around it. */
static bool put_tojson(sink *o, sv text) {
    jcur c = {text.p, text.p + text.n};
    if (!jvalue(&c, o, 0)) return false;
    jws(&c);
    return c.p == c.e;
}

/* Whether text is valid JSON (rendered into a discarding sink). */
static bool is_json(sv text) {
    sink null_sink = {0};
    return put_tojson(&null_sink, text);
}

/* ======================================================================== */
/* Renderers                                                                 */
/* ======================================================================== */

static bool is_tool_response(sv c) { return sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"); }

/* The reasoning / content split both templates do when reasoning_content is absent and the
 * content has "</think>". */
static void split_think(sv c, sv *content, sv *reasoning) {
    size_t last = sv_rfind(c, "</think>");
    size_t first = sv_find(c, "</think>");
    sv after = {c.p + last + 8, c.n - last - 8};
    sv before = rstrip_nl((sv){c.p, first});
    size_t open = sv_rfind(before, "<think>");
    if (open != SIZE_MAX) before = (sv){before.p + open + 7, before.n - open - 7};
    *content = lstrip_nl(after);
    *reasoning = lstrip_nl(before);
}

static void render_none(sink *o, const spex_chat_msg *m, size_t n) {
    for (size_t i = 0; i < n; i++) put(o, sv_of(m[i].content));
}

/* The tools list: "\n" + tojson(tool) each (the caller checked every text is JSON). */
static void put_tools(sink *o, const char *const *tools, size_t n_tools) {
    for (size_t i = 0; i < n_tools; i++) {
        puts_(o, "\n");
        put_tojson(o, sv_of(tools[i]));
    }
}

static void qwen3_tool_calls(sink *o, const spex_chat_msg *msg, sv content) {
    for (size_t k = 0; k < msg->n_tool_calls; k++) {
        const spex_chat_tool_call *tc = &msg->tool_calls[k];
        if (k > 0 || content.n > 0) puts_(o, "\n");
        puts_(o, "<tool_call>\n{\"name\": \"");
        put(o, sv_of(tc->name));
        puts_(o, "\", \"arguments\": ");
        sv args = sv_of(tc->arguments);
        if (is_json(args)) put_tojson(o, args);
        else put(o, args);   /* a string that is not JSON: `arguments is string` prints it */
        puts_(o, "}\n</tool_call>");
    }
}

static void render_qwen3(sink *o, const spex_chat_msg *m, size_t n, const char *const *tools, size_t n_tools,
                         bool gen, bool think) {
    if (n_tools > 0) {
        puts_(o, "<|im_start|>system\n");
        if (n > 0 && m[0].role == SPEX_CHAT_SYSTEM) {
            put(o, sv_of(m[0].content));
            puts_(o, "\n\n");
        }
        puts_(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        put_tools(o, tools, n_tools);
        puts_(o, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                 "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                 "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (n > 0 && m[0].role == SPEX_CHAT_SYSTEM) {
        puts_(o, "<|im_start|>system\n");
        put(o, sv_of(m[0].content));
        puts_(o, "<|im_end|>\n");
    }
    size_t last_query = n - 1;   /* the template's initial value; unused when n == 0 */
    for (size_t i = n; i-- > 0;)
        if (m[i].role == SPEX_CHAT_USER && !is_tool_response(sv_of(m[i].content))) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        sv c = sv_of(m[i].content);
        switch (m[i].role) {
        case SPEX_CHAT_SYSTEM:
        case SPEX_CHAT_USER:
            if (i == 0 && m[i].role == SPEX_CHAT_SYSTEM) break;   /* rendered above */
            puts_(o, "<|im_start|>");
            puts_(o, role_names[m[i].role]);
            puts_(o, "\n");
            put(o, c);
            puts_(o, "<|im_end|>\n");
            break;
        case SPEX_CHAT_ASSISTANT: {
            sv content = c, reasoning = {"", 0};
            if (m[i].reasoning_content) reasoning = sv_of(m[i].reasoning_content);
            else if (sv_find(c, "</think>") != SIZE_MAX) split_think(c, &content, &reasoning);
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                puts_(o, "<|im_start|>assistant\n<think>\n");
                put(o, strip_nl(reasoning));
                puts_(o, "\n</think>\n\n");
                put(o, lstrip_nl(content));
            } else {
                puts_(o, "<|im_start|>assistant\n");
                put(o, content);
            }
            qwen3_tool_calls(o, &m[i], content);
            puts_(o, "<|im_end|>\n");
            break;
        }
        case SPEX_CHAT_TOOL:
            if (i == 0 || m[i - 1].role != SPEX_CHAT_TOOL) puts_(o, "<|im_start|>user");
            puts_(o, "\n<tool_response>\n");
            put(o, c);
            puts_(o, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != SPEX_CHAT_TOOL) puts_(o, "<|im_end|>\n");
            break;
        }
    }
    if (gen) {
        puts_(o, "<|im_start|>assistant\n");
        if (!think) puts_(o, "<think>\n\n</think>\n\n");
    }
}

/* The arguments object's items: "<parameter=KEY>\n" + (a string value raw, else tojson) +
 * "\n</parameter>\n". false when args is not a JSON object (the template's |items raises). */
static bool qwen35_params(sink *o, sv args) {
    jcur c = {args.p, args.p + args.n};
    jws(&c);
    if (c.p >= c.e || *c.p != '{') return false;
    c.p++;
    jws(&c);
    if (c.p < c.e && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            jws(&c);
            puts_(o, "<parameter=");
            if (!jstring(&c, o, false)) return false;
            puts_(o, ">\n");
            jws(&c);
            if (c.p >= c.e || *c.p != ':') return false;
            c.p++;
            jws(&c);
            if (c.p < c.e && *c.p == '"') {
                if (!jstring(&c, o, false)) return false;
            } else if (!jvalue(&c, o, 1)) {
                return false;
            }
            puts_(o, "\n</parameter>\n");
            jws(&c);
            if (c.p >= c.e) return false;
            if (*c.p == '}') {
                c.p++;
                break;
            }
            if (*c.p != ',') return false;
            c.p++;
        }
    }
    jws(&c);
    return c.p == c.e;
}

static spex_status qwen35_tool_calls(sink *o, const spex_chat_msg *msg, size_t i, sv content, spex_error *err) {
    for (size_t k = 0; k < msg->n_tool_calls; k++) {
        const spex_chat_tool_call *tc = &msg->tool_calls[k];
        if (k == 0) puts_(o, trim_ws(content).n > 0 ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
        else puts_(o, "\n<tool_call>\n<function=");
        put(o, sv_of(tc->name));
        puts_(o, ">\n");
        sv args = sv_of(tc->arguments);
        if (args.n > 0 && !qwen35_params(o, args))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "chat template qwen35: message %zu tool call %zu: arguments are not a JSON object", i, k);
        puts_(o, "</function>\n</tool_call>");
    }
    return SPEX_OK;
}

static spex_status render_qwen35(sink *o, const spex_chat_msg *m, size_t n, const char *const *tools,
                                 size_t n_tools, bool gen, bool think, spex_error *err) {
    if (n == 0) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template qwen35: no messages");
    if (n_tools > 0) {
        puts_(o, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
        put_tools(o, tools, n_tools);
        puts_(o, "\n</tools>");
        puts_(o, "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
                 "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                 "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
                 "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
                 "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> "
                 "block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be "
                 "specified\n- You may provide optional reasoning for your function call in natural language "
                 "BEFORE the function call, but NOT after\n- If there is no function call available, answer the "
                 "question like normal with your current knowledge and do not tell the user about function "
                 "calls\n</IMPORTANT>");
        if (m[0].role == SPEX_CHAT_SYSTEM) {
            sv sys = trim_ws(sv_of(m[0].content));
            if (sys.n > 0) {
                puts_(o, "\n\n");
                put(o, sys);
            }
        }
        puts_(o, "<|im_end|>\n");
    }
    size_t last_query = SIZE_MAX;
    for (size_t i = n; i-- > 0;)
        if (m[i].role == SPEX_CHAT_USER && !is_tool_response(trim_ws(sv_of(m[i].content)))) {
            last_query = i;
            break;
        }
    if (last_query == SIZE_MAX)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template qwen35: no user query in the messages");
    for (size_t i = 1; i < n; i++)
        if (m[i].role == SPEX_CHAT_SYSTEM)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "chat template qwen35: system message %zu is not at the beginning", i);
    for (size_t i = 0; i < n; i++) {
        sv c = trim_ws(sv_of(m[i].content));
        switch (m[i].role) {
        case SPEX_CHAT_SYSTEM:
        case SPEX_CHAT_USER:
            if (m[i].role == SPEX_CHAT_SYSTEM && n_tools > 0) break;   /* inside the tools turn */
            puts_(o, "<|im_start|>");
            puts_(o, role_names[m[i].role]);
            puts_(o, "\n");
            put(o, c);
            puts_(o, "<|im_end|>\n");
            break;
        case SPEX_CHAT_ASSISTANT: {
            sv content = c, reasoning = {"", 0};
            if (m[i].reasoning_content) reasoning = sv_of(m[i].reasoning_content);
            else if (sv_find(c, "</think>") != SIZE_MAX) split_think(c, &content, &reasoning);
            reasoning = trim_ws(reasoning);
            if (i > last_query) {
                puts_(o, "<|im_start|>assistant\n<think>\n");
                put(o, reasoning);
                puts_(o, "\n</think>\n\n");
            } else {
                puts_(o, "<|im_start|>assistant\n");
            }
            put(o, content);
            spex_status st = qwen35_tool_calls(o, &m[i], i, content, err);
            if (st != SPEX_OK) return st;
            puts_(o, "<|im_end|>\n");
            break;
        }
        case SPEX_CHAT_TOOL:
            if (i > 0 && m[i - 1].role != SPEX_CHAT_TOOL) puts_(o, "<|im_start|>user");
            puts_(o, "\n<tool_response>\n");
            put(o, c);
            puts_(o, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != SPEX_CHAT_TOOL) puts_(o, "<|im_end|>\n");
            break;
        }
    }
    if (gen) puts_(o, think ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return SPEX_OK;
}

spex_status spex_chat_apply(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, bool enable_thinking, char *buf, size_t cap,
                            size_t *len, spex_error *err) {
    return spex_chat_apply_tools(tmpl, msgs, n, NULL, 0, add_generation_prompt, enable_thinking, buf, cap, len, err);
}

spex_status spex_chat_apply_tools(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                                  const char *const *tools, size_t n_tools, bool add_generation_prompt,
                                  bool enable_thinking, char *buf, size_t cap, size_t *len, spex_error *err) {
    if (!len || (n > 0 && !msgs) || (cap > 0 && !buf) || (n_tools > 0 && !tools))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template: NULL argument");
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)msgs[i].role > SPEX_CHAT_TOOL)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template: message %zu has unknown role %d", i,
                                  (int)msgs[i].role);
        if (msgs[i].n_tool_calls > 0 && (!msgs[i].tool_calls || msgs[i].role != SPEX_CHAT_ASSISTANT))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "chat template: message %zu: tool calls need an assistant message and an array", i);
    }
    for (size_t i = 0; i < n_tools; i++)
        if (!tools[i] || !is_json(sv_of(tools[i])))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template: tool %zu is not valid JSON", i);
    sink o = {.buf = buf, .cap = cap};
    switch (tmpl) {
    case SPEX_CHAT_NONE: render_none(&o, msgs, n); break;
    case SPEX_CHAT_CHATML_QWEN3:
        render_qwen3(&o, msgs, n, tools, n_tools, add_generation_prompt, enable_thinking);
        break;
    case SPEX_CHAT_CHATML_QWEN35: {
        spex_status st = render_qwen35(&o, msgs, n, tools, n_tools, add_generation_prompt, enable_thinking, err);
        if (st != SPEX_OK) return st;
        break;
    }
    default: return spex_error_set(err, SPEX_ERR_INVALID_ARG, "chat template: unknown template %d", (int)tmpl);
    }
    if (o.overflow) return spex_error_set(err, SPEX_ERR_RANGE, "chat template: output too large");
    *len = o.len;
    if (o.len + 1 > cap) {
        if (cap > 0) buf[cap - 1] = '\0';
        return spex_error_set(err, SPEX_ERR_RANGE, "chat template: needs %zu bytes + NUL, buffer has %zu", o.len,
                              cap);
    }
    buf[o.len] = '\0';
    return SPEX_OK;
}
