/*
 * anthropic.c — Anthropic Messages request bodies (POST /v1/messages and
 * /v1/messages/count_tokens) turned into the chat request the rest of the server runs, and
 * the Anthropic error body.
 *
 * What it is: a checked translation, field by field, of an Anthropic body into the
 * OpenAI-shaped chat body of server-api.md §6.1, which srv_request_parse (api.c) then reads —
 * so a /v1/messages request renders, tokenizes, samples and speculates exactly as the
 * /v1/chat/completions request with the same conversation (llama-server does the same:
 * its Messages route converts to a chat body first). The mapping (docs/server.md,
 * "Anthropic Messages"): `system` (string or text blocks, concatenated) becomes a system message;
 * content blocks `text` become text parts, `thinking` the assistant's reasoning_content,
 * `tool_use` its tool_calls (input printed compactly as the arguments), `tool_result` a tool
 * message (content a string or text blocks, concatenated) placed before the rest of its user
 * message; `tools` {name, description, input_schema} become function tools; tool_choice
 * auto / any / tool / none become auto / required / the named function / none;
 * stop_sequences become stop; a missing max_tokens is 4096 (llama-server's default);
 * thinking {type: enabled|disabled} sets enable_thinking.
 * What it is not: tokenization or responses (anthropic_out.c builds those from the task);
 * it needs no model, so fuzz/fuzz_server_req.c drives it. Image and document blocks are
 * refused (multimodal input is not supported, §1), as are block types it does not know.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama-server's max_tokens when the body has none (Anthropic itself requires the field). */
#define SRV_ANTHROPIC_DEFAULT_MAX_TOKENS 4096

static bool present(const cJSON *v) { return v && !cJSON_IsNull(v); }

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Appends the text of a string, or of an array of {"type":"text","text"} blocks, to buf
 * (concatenated, as llama-server joins system and tool_result blocks). what: the field's name
 * for messages. Returns 0 or 400 / 500. */
static int text_of(const cJSON *v, const char *what, srv_strbuf *buf, char *msg, size_t cap) {
    if (cJSON_IsString(v)) return srv_strbuf_add(buf, v->valuestring, strlen(v->valuestring)) ? 0 : srv_fail(msg, cap, 500, "out of memory");
    if (!cJSON_IsArray(v)) return srv_fail(msg, cap, 400, "'%s' must be a string or an array of text blocks", what);
    const cJSON *b;
    cJSON_ArrayForEach(b, v) {
        const cJSON *ty = get(b, "type"), *tx = get(b, "text");
        if (!cJSON_IsObject(b) || !cJSON_IsString(ty))
            return srv_fail(msg, cap, 400, "'%s' blocks must be objects with a string 'type'", what);
        if (!strcmp(ty->valuestring, "image") || !strcmp(ty->valuestring, "document"))
            return srv_fail(msg, cap, 400, "multimodal input is not supported (%s block type '%s')", what, ty->valuestring);
        if (strcmp(ty->valuestring, "text"))
            return srv_fail(msg, cap, 400, "'%s' blocks must be text blocks (got '%.40s')", what, ty->valuestring);
        if (!cJSON_IsString(tx)) return srv_fail(msg, cap, 400, "a text block in '%s' needs a string 'text'", what);
        if (!srv_strbuf_add(buf, tx->valuestring, strlen(tx->valuestring))) return srv_fail(msg, cap, 500, "out of memory");
    }
    return 0;
}

/* A string (possibly empty) from a strbuf, added to o under key. */
static bool add_buf(cJSON *o, const char *key, const srv_strbuf *b) {
    return cJSON_AddStringToObject(o, key, b->p ? b->p : "") != NULL;
}

/* What the blocks of one message gather: its text parts, tool calls and reasoning. */
typedef struct msg_parts {
    cJSON *parts, *calls;
    srv_strbuf thinking;
    bool has_thinking;
} msg_parts;

/* A tool_result block into a tool message appended to out (before the message's own text). */
static int tool_result(const cJSON *b, int i, cJSON *out, char *msg, size_t cap) {
    const cJSON *id = get(b, "tool_use_id"), *c = get(b, "content"), *ie = get(b, "is_error");
    if (!cJSON_IsString(id)) return srv_fail(msg, cap, 400, "messages[%d]: a tool_result block needs a string 'tool_use_id'", i);
    if (present(ie) && !cJSON_IsBool(ie))
        return srv_fail(msg, cap, 400, "messages[%d]: a tool_result's 'is_error' must be a boolean", i);
    srv_strbuf txt = {0};
    int rc = present(c) ? text_of(c, "tool_result.content", &txt, msg, cap) : 0;
    if (!rc) {
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddItemToArray(out, tm);
        cJSON_AddStringToObject(tm, "role", "tool");
        cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
        if (!add_buf(tm, "content", &txt)) rc = srv_fail(msg, cap, 500, "out of memory");
    }
    srv_strbuf_free(&txt);
    return rc;
}

/* A tool_use block into a tool call of mp. */
static int tool_use(const cJSON *b, int i, msg_parts *mp, char *msg, size_t cap) {
    const cJSON *id = get(b, "id"), *nm = get(b, "name"), *in = get(b, "input");
    if (!cJSON_IsString(nm) || !nm->valuestring[0] || (present(id) && !cJSON_IsString(id)) ||
        (present(in) && !cJSON_IsObject(in)))
        return srv_fail(msg, cap, 400,
                    "messages[%d]: a tool_use block needs a string 'id', a non-empty 'name' and an object 'input'", i);
    char *args = present(in) ? cJSON_PrintUnformatted(in) : NULL;
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddItemToArray(mp->calls, c);
    cJSON_AddStringToObject(c, "id", cJSON_IsString(id) ? id->valuestring : "");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddItemToObject(c, "function", f);
    cJSON_AddStringToObject(f, "name", nm->valuestring);
    cJSON_AddStringToObject(f, "arguments", args ? args : "{}");
    free(args);
    return 0;
}

/* One content block of messages[i]. */
static int convert_block(const cJSON *b, int i, bool assistant, msg_parts *mp, cJSON *out, char *msg, size_t cap) {
    const cJSON *ty = get(b, "type");
    if (!cJSON_IsObject(b) || !cJSON_IsString(ty))
        return srv_fail(msg, cap, 400, "messages[%d]: content blocks must be objects with a string 'type'", i);
    const char *t = ty->valuestring;
    if (!strcmp(t, "text")) {
        const cJSON *tx = get(b, "text");
        if (!cJSON_IsString(tx)) return srv_fail(msg, cap, 400, "messages[%d]: a text block needs a string 'text'", i);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddItemToArray(mp->parts, p);
        cJSON_AddStringToObject(p, "type", "text");
        cJSON_AddStringToObject(p, "text", tx->valuestring);
        return 0;
    }
    if (!strcmp(t, "thinking")) {
        const cJSON *th = get(b, "thinking");
        if (!cJSON_IsString(th)) return srv_fail(msg, cap, 400, "messages[%d]: a thinking block needs a string 'thinking'", i);
        mp->has_thinking = true;
        return srv_strbuf_add(&mp->thinking, th->valuestring, strlen(th->valuestring)) ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    if (!strcmp(t, "redacted_thinking")) return 0;   /* encrypted by Anthropic's service: unreadable here */
    if (!strcmp(t, "tool_use")) {
        if (!assistant) return srv_fail(msg, cap, 400, "messages[%d]: only assistant messages may hold tool_use blocks", i);
        return tool_use(b, i, mp, msg, cap);
    }
    if (!strcmp(t, "tool_result")) {
        if (assistant) return srv_fail(msg, cap, 400, "messages[%d]: only user messages may hold tool_result blocks", i);
        return tool_result(b, i, out, msg, cap);
    }
    if (!strcmp(t, "image") || !strcmp(t, "document"))
        return srv_fail(msg, cap, 400, "multimodal input is not supported (content block type '%s')", t);
    return srv_fail(msg, cap, 400, "messages[%d]: content block type '%.40s' is not supported", i, t);
}

/* One Anthropic message into chat messages appended to out (tool results first, then the
 * message's own text / reasoning / tool calls). Returns 0 or an HTTP status with msg. */
static int convert_message(const cJSON *m, int i, cJSON *out, char *msg, size_t cap) {
    if (!cJSON_IsObject(m)) return srv_fail(msg, cap, 400, "messages[%d] must be an object", i);
    const cJSON *role = get(m, "role"), *content = get(m, "content");
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return srv_fail(msg, cap, 400, "messages[%d].role must be \"user\" or \"assistant\"", i);
    if (!present(content)) return srv_fail(msg, cap, 400, "messages[%d] needs 'content'", i);
    if (cJSON_IsString(content)) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(out, c);
        cJSON_AddStringToObject(c, "role", role->valuestring);
        return cJSON_AddStringToObject(c, "content", content->valuestring) ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    if (!cJSON_IsArray(content))
        return srv_fail(msg, cap, 400, "messages[%d].content must be a string or an array of content blocks", i);
    msg_parts mp = {.parts = cJSON_CreateArray(), .calls = cJSON_CreateArray()};
    int rc = mp.parts && mp.calls ? 0 : srv_fail(msg, cap, 500, "out of memory");
    const cJSON *b;
    cJSON_ArrayForEach(b, content) if (!rc) rc = convert_block(b, i, role->valuestring[0] == 'a', &mp, out, msg, cap);
    if (!rc && (cJSON_GetArraySize(mp.parts) > 0 || cJSON_GetArraySize(mp.calls) > 0 || mp.has_thinking)) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(out, c);
        cJSON_AddStringToObject(c, "role", role->valuestring);
        if (cJSON_GetArraySize(mp.parts) > 0) cJSON_AddItemToObject(c, "content", mp.parts), mp.parts = NULL;
        else cJSON_AddStringToObject(c, "content", "");
        if (cJSON_GetArraySize(mp.calls) > 0) cJSON_AddItemToObject(c, "tool_calls", mp.calls), mp.calls = NULL;
        if (mp.has_thinking && !add_buf(c, "reasoning_content", &mp.thinking)) rc = srv_fail(msg, cap, 500, "out of memory");
    }
    cJSON_Delete(mp.parts);
    cJSON_Delete(mp.calls);
    srv_strbuf_free(&mp.thinking);
    return rc;
}

/* tools [{name, description?, input_schema?}] into function tools (llama-server's shape:
 * the description "" when absent, the parameters {} when there is no input_schema). */
static int convert_tools(const cJSON *ts, cJSON *oai, char *msg, size_t cap) {
    if (!present(ts)) return 0;
    if (!cJSON_IsArray(ts)) return srv_fail(msg, cap, 400, "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(oai, "tools");
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, ts) {
        const cJSON *nm = get(t, "name"), *ds = get(t, "description"), *sc = get(t, "input_schema"), *ty = get(t, "type");
        if (!cJSON_IsObject(t)) return srv_fail(msg, cap, 400, "tools[%d] must be an object", i);
        if (present(ty) && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "custom")))
            return srv_fail(msg, cap, 400, "tools[%d]: only custom tools are supported (type '%.40s')", i,
                        cJSON_IsString(ty) ? ty->valuestring : "?");
        if (!cJSON_IsString(nm) || !nm->valuestring[0])
            return srv_fail(msg, cap, 400, "tools[%d] needs a non-empty string 'name'", i);
        if (present(ds) && !cJSON_IsString(ds)) return srv_fail(msg, cap, 400, "tools[%d].description must be a string", i);
        if (present(sc) && !cJSON_IsObject(sc)) return srv_fail(msg, cap, 400, "tools[%d].input_schema must be an object", i);
        cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddItemToObject(o, "function", f);
        cJSON_AddStringToObject(f, "name", nm->valuestring);
        cJSON_AddStringToObject(f, "description", cJSON_IsString(ds) ? ds->valuestring : "");
        cJSON_AddItemToObject(f, "parameters", present(sc) ? cJSON_Duplicate(sc, true) : cJSON_CreateObject());
        i++;
    }
    return 0;
}

/* tool_choice {type: auto|any|tool|none, name?, disable_parallel_tool_use?}. */
static int convert_tool_choice(const cJSON *tc, cJSON *oai, char *msg, size_t cap) {
    if (!present(tc)) return 0;
    const cJSON *ty = get(tc, "type"), *nm = get(tc, "name"), *dp = get(tc, "disable_parallel_tool_use");
    static const char err[] = "'tool_choice' must be an object with type auto, any, tool (with a 'name') or none";
    if (!cJSON_IsObject(tc) || !cJSON_IsString(ty)) return srv_fail(msg, cap, 400, err);
    const char *t = ty->valuestring;
    if (!strcmp(t, "auto") || !strcmp(t, "none")) cJSON_AddStringToObject(oai, "tool_choice", t);
    else if (!strcmp(t, "any")) cJSON_AddStringToObject(oai, "tool_choice", "required");
    else if (!strcmp(t, "tool") && cJSON_IsString(nm) && nm->valuestring[0]) {
        cJSON *o = cJSON_AddObjectToObject(oai, "tool_choice");
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", nm->valuestring);
    } else
        return srv_fail(msg, cap, 400, err);
    if (present(dp) && !cJSON_IsBool(dp))
        return srv_fail(msg, cap, 400, "'tool_choice.disable_parallel_tool_use' must be a boolean");
    if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(oai, "parallel_tool_calls");
    return 0;
}

/* The Anthropic body o into the chat body oai; 0 or an HTTP status with msg. */
static int convert(const cJSON *o, bool count_tokens, cJSON *oai, char *msg, size_t cap) {
    cJSON *msgs = cJSON_AddArrayToObject(oai, "messages");
    const cJSON *sys = get(o, "system");
    if (present(sys)) {
        srv_strbuf s = {0};
        int rc = text_of(sys, "system", &s, msg, cap);
        cJSON *m = rc ? NULL : cJSON_CreateObject();
        if (m) {
            cJSON_AddItemToArray(msgs, m);
            cJSON_AddStringToObject(m, "role", "system");
            if (!add_buf(m, "content", &s)) rc = srv_fail(msg, cap, 500, "out of memory");
        }
        srv_strbuf_free(&s);
        if (rc) return rc;
    }
    const cJSON *ms = get(o, "messages");
    if (!present(ms)) return srv_fail(msg, cap, 400, "'messages' is required");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0) return srv_fail(msg, cap, 400, "'messages' must be a non-empty array");
    const cJSON *m;
    int i = 0, rc;
    cJSON_ArrayForEach(m, ms) if ((rc = convert_message(m, i++, msgs, msg, cap))) return rc;
    if ((rc = convert_tools(get(o, "tools"), oai, msg, cap))) return rc;
    if ((rc = convert_tool_choice(get(o, "tool_choice"), oai, msg, cap))) return rc;

    const cJSON *mt = get(o, "max_tokens");
    if (!count_tokens) {
        if (present(mt) && (!cJSON_IsNumber(mt) || !isfinite(mt->valuedouble) || mt->valuedouble != floor(mt->valuedouble) ||
                            mt->valuedouble < 1 || mt->valuedouble > 1e9))
            return srv_fail(msg, cap, 400, "'max_tokens' must be an integer >= 1");
        cJSON_AddNumberToObject(oai, "max_tokens", present(mt) ? mt->valuedouble : SRV_ANTHROPIC_DEFAULT_MAX_TOKENS);
    }
    const cJSON *ss = get(o, "stop_sequences");
    if (present(ss)) {
        if (!cJSON_IsArray(ss)) return srv_fail(msg, cap, 400, "'stop_sequences' must be an array of strings");
        cJSON_AddItemToObject(oai, "stop", cJSON_Duplicate(ss, true));   /* api.c checks the strings */
    }
    /* copied as they are (api.c checks their types): Anthropic's sampling fields and stream,
     * and the llama-server / spex extensions a client may add to the body */
    static const char *const pass[] = {"model", "temperature", "top_p", "top_k", "stream", "chat_template_kwargs",
                                       "reasoning_format", "seed", "min_p", "speculative.n_max",
                                       "speculative.n_min", "speculative.p_min"};
    for (size_t k = 0; k < sizeof pass / sizeof *pass; k++) {
        const cJSON *v = get(o, pass[k]);
        if (count_tokens && !strcmp(pass[k], "stream")) continue;
        if (present(v)) cJSON_AddItemToObject(oai, pass[k], cJSON_Duplicate(v, true));
    }
    const cJSON *th = get(o, "thinking");
    if (present(th)) {
        const cJSON *ty = get(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(ty) ||
            (strcmp(ty->valuestring, "enabled") && strcmp(ty->valuestring, "disabled")))
            return srv_fail(msg, cap, 400, "'thinking' must be an object with type \"enabled\" or \"disabled\"");
        cJSON *kw = cJSON_GetObjectItemCaseSensitive(oai, "chat_template_kwargs");
        if (!cJSON_IsObject(kw)) {
            cJSON_DeleteItemFromObjectCaseSensitive(oai, "chat_template_kwargs");
            kw = cJSON_AddObjectToObject(oai, "chat_template_kwargs");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(kw, "enable_thinking");
        cJSON_AddBoolToObject(kw, "enable_thinking", ty->valuestring[0] == 'e');
    }
    return 0;   /* metadata, service_tier, container, mcp_servers: ignored like any unknown field */
}

int srv_anthropic_parse(srv_request *r, const char *body, size_t len, bool count_tokens, char *msg, size_t cap) {
    if (!srv_utf8_valid(body, len)) return srv_fail(msg, cap, 400, "the request body is not valid UTF-8");
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return srv_fail(msg, cap, 400, "malformed JSON in the request body");
    int rc;
    cJSON *oai = cJSON_CreateObject();
    if (!cJSON_IsObject(o)) rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
    else if (!oai) rc = srv_fail(msg, cap, 500, "out of memory");
    else rc = convert(o, count_tokens, oai, msg, cap);
    char *text = rc ? NULL : cJSON_PrintUnformatted(oai);
    if (!rc && !text) rc = srv_fail(msg, cap, 500, "out of memory");
    cJSON_Delete(o);
    cJSON_Delete(oai);
    if (!rc) {
        r->ep = SRV_EP_CHAT;
        rc = srv_request_parse(r, text, strlen(text), msg, cap);
        r->anthropic = true;
    }
    free(text);
    return rc;
}

/* Anthropic's error types (its API errors page); 501 (a feature spex lacks) reads as a bad request. */
const char *srv_anthropic_error_type(int code) {
    switch (code) {
    case 400: case 405: case 501: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
    }
}

char *srv_anthropic_error_json(int code, const char *message) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", srv_anthropic_error_type(code));
    cJSON_AddItemToObject(e, "message", srv_json_utf8(message));
    cJSON_AddNumberToObject(e, "code", code);   /* llama-server's field, beside Anthropic's two */
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
