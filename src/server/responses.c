/*
 * responses.c — OpenAI's Responses API (POST /v1/responses) as llama-server offers it: the
 * request is rewritten into a chat completion body, the chat completion (or its stream) is
 * rewritten into a response object (or typed SSE events).
 *
 * What it is: the stateless subset llama-server implements (tools/server, its Responses-to-chat
 * conversion): `input` as a string or an array of items — messages {role, content} with text
 * parts (input_text / output_text), reasoning, function_call and function_call_output items —
 * `instructions` as a leading system message, flat function `tools`, `tool_choice`,
 * `max_output_tokens`, and every field /v1/chat/completions reads (temperature, top_p, stream,
 * model, reasoning_format, ...) passed through unchanged. Consecutive assistant-side items
 * (assistant message, reasoning, function_call) form one assistant turn, as in a chat request.
 * The answer's items are OpenAI's: reasoning (when the reasoning is split off), message with
 * one output_text part, function_call; status "incomplete" with incomplete_details
 * {reason: "max_output_tokens"} when the token budget ran out.
 * What it is not: storage. previous_response_id, conversation, item_reference and background
 * need stored responses and are refused (400); hosted tools (web search, file search, ...) and
 * structured output (text.format other than text) are refused; `reasoning`, `store`,
 * `metadata`, `include`, `truncation` are accepted and have no effect. No model is needed here
 * (fuzz/fuzz_server_req.c drives the parser and both converters).
 */
#include "server/responses.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static cJSON *get_mut(cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static bool absent(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* ======================================================================== */
/* Request: Responses body -> chat completion body                           */
/* ======================================================================== */

/* Text parts of a Responses content array as chat text parts appended to parts. what: the
 * field, for messages. */
static int conv_parts(const cJSON *c, cJSON *parts, const char *what, char *msg, size_t cap) {
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *ty = get(p, "type"), *tx = get(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(ty))
            return srv_fail(msg, cap, 400, "%s parts must be objects with a string 'type'", what);
        const char *t = ty->valuestring;
        if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
            return srv_fail(msg, cap, 400, "multimodal input is not supported (content part type '%.40s')", t);
        if (strcmp(t, "input_text") && strcmp(t, "output_text"))
            return srv_fail(msg, cap, 400, "%s part type '%.40s' is not supported (input_text or output_text)", what, t);
        if (!cJSON_IsString(tx)) return srv_fail(msg, cap, 400, "a %.40s part needs a string 'text'", t);
        cJSON *q = cJSON_CreateObject();
        cJSON_AddItemToArray(parts, q);
        cJSON_AddStringToObject(q, "type", "text");
        cJSON_AddStringToObject(q, "text", tx->valuestring);
    }
    return 0;
}

/* A content value (string or parts) as a chat parts array appended to parts. */
static int conv_content(const cJSON *c, cJSON *parts, const char *what, char *msg, size_t cap) {
    if (cJSON_IsString(c)) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddItemToArray(parts, q);
        cJSON_AddStringToObject(q, "type", "text");
        cJSON_AddStringToObject(q, "text", c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return srv_fail(msg, cap, 400, "%s must be a string or an array of parts", what);
    return conv_parts(c, parts, what, msg, cap);
}

/* The assistant turn that assistant-side items merge into: the last message when it is one,
 * else a new {role: assistant, content: []}. */
static cJSON *assistant_turn(cJSON *msgs, bool *open) {
    int n = cJSON_GetArraySize(msgs);
    if (*open && n > 0) return cJSON_GetArrayItem(msgs, n - 1);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddArrayToObject(m, "content");
    *open = true;
    return m;
}

/* A reasoning item's text: its reasoning_text content, else its summary texts, joined by "\n". */
static int reasoning_text(const cJSON *it, srv_strbuf *b, char *msg, size_t cap) {
    const cJSON *c = get(it, "content"), *s = get(it, "summary");
    const cJSON *src = cJSON_IsArray(c) && cJSON_GetArraySize(c) > 0 ? c : s;
    if (!absent(c) && !cJSON_IsArray(c)) return srv_fail(msg, cap, 400, "a reasoning item's 'content' must be an array");
    if (!absent(s) && !cJSON_IsArray(s)) return srv_fail(msg, cap, 400, "a reasoning item's 'summary' must be an array");
    const cJSON *p;
    cJSON_ArrayForEach(p, src) {
        const cJSON *tx = get(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(tx))
            return srv_fail(msg, cap, 400, "reasoning item parts must be objects with a string 'text'");
        if ((b->len && !srv_strbuf_add(b, "\n", 1)) || !srv_strbuf_add(b, tx->valuestring, strlen(tx->valuestring)))
            return srv_fail(msg, cap, 500, "out of memory");
    }
    return 0;
}

/* One input item appended to msgs; *asst: the last message is an open assistant turn. */
static int conv_item(const cJSON *it, cJSON *msgs, bool *asst, char *msg, size_t cap) {
    if (!cJSON_IsObject(it)) return srv_fail(msg, cap, 400, "each 'input' item must be an object");
    const cJSON *ty = get(it, "type"), *role = get(it, "role");
    if (!absent(ty) && !cJSON_IsString(ty)) return srv_fail(msg, cap, 400, "an input item's 'type' must be a string");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "message";
    if (!strcmp(t, "message")) {
        if (!cJSON_IsString(role)) return srv_fail(msg, cap, 400, "a message item needs a string 'role'");
        const char *r = role->valuestring;
        const cJSON *c = get(it, "content");
        if (!c) return srv_fail(msg, cap, 400, "a message item needs 'content'");
        if (!strcmp(r, "assistant")) {
            cJSON *m = assistant_turn(msgs, asst);
            return conv_content(c, get_mut(m, "content"), "message 'content'", msg, cap);
        }
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer"))
            return srv_fail(msg, cap, 400, "unknown message role '%.40s' (user, system, developer or assistant)", r);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", r);
        *asst = false;
        return conv_content(c, cJSON_AddArrayToObject(m, "content"), "message 'content'", msg, cap);
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *cid = get(it, "call_id"), *nm = get(it, "name"), *ar = get(it, "arguments");
        if (!cJSON_IsString(cid) || !cid->valuestring[0])
            return srv_fail(msg, cap, 400, "a function_call item needs a non-empty string 'call_id'");
        if (!cJSON_IsString(nm) || !nm->valuestring[0])
            return srv_fail(msg, cap, 400, "a function_call item needs a non-empty string 'name'");
        if (!cJSON_IsString(ar)) return srv_fail(msg, cap, 400, "a function_call item needs a string 'arguments'");
        cJSON *m = assistant_turn(msgs, asst), *tc = get_mut(m, "tool_calls");
        if (!tc) tc = cJSON_AddArrayToObject(m, "tool_calls");
        cJSON *call = cJSON_CreateObject(), *fn;
        cJSON_AddItemToArray(tc, call);
        cJSON_AddStringToObject(call, "id", cid->valuestring);
        cJSON_AddStringToObject(call, "type", "function");
        fn = cJSON_AddObjectToObject(call, "function");
        cJSON_AddStringToObject(fn, "name", nm->valuestring);
        cJSON_AddStringToObject(fn, "arguments", ar->valuestring);
        return 0;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *cid = get(it, "call_id"), *out = get(it, "output");
        if (!cJSON_IsString(cid) || !cid->valuestring[0])
            return srv_fail(msg, cap, 400, "a function_call_output item needs a non-empty string 'call_id'");
        if (!out) return srv_fail(msg, cap, 400, "a function_call_output item needs 'output'");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", cid->valuestring);
        *asst = false;
        return conv_content(out, cJSON_AddArrayToObject(m, "content"), "function_call_output 'output'", msg, cap);
    }
    if (!strcmp(t, "reasoning")) {
        srv_strbuf b = {0};
        int rc = reasoning_text(it, &b, msg, cap);
        if (!rc && b.len) {
            cJSON *m = assistant_turn(msgs, asst);
            const cJSON *prev = get(m, "reasoning_content");
            if (cJSON_IsString(prev) && prev->valuestring[0]) {   /* two reasoning items in one turn */
                srv_strbuf j = {0};
                if (!srv_strbuf_add(&j, prev->valuestring, strlen(prev->valuestring)) || !srv_strbuf_add(&j, "\n", 1) ||
                    !srv_strbuf_add(&j, b.p, b.len))
                    rc = srv_fail(msg, cap, 500, "out of memory");
                else
                    cJSON_ReplaceItemInObject(m, "reasoning_content", cJSON_CreateString(j.p));
                srv_strbuf_free(&j);
            } else {
                cJSON_DeleteItemFromObject(m, "reasoning_content");
                cJSON_AddStringToObject(m, "reasoning_content", b.p);
            }
        }
        srv_strbuf_free(&b);
        return rc;
    }
    if (!strcmp(t, "item_reference"))
        return srv_fail(msg, cap, 400, "'item_reference' input items are not supported: spex stores no responses");
    return srv_fail(msg, cap, 400, "input item type '%.40s' is not supported (message, reasoning, function_call, "
                              "function_call_output)", t);
}

/* tools: flat {type: "function", name, description?, parameters?, strict?} -> the chat shape
 * {type: "function", function: {name, description?, parameters?, strict?}} (the other keys in
 * their order), which api.c checks and the template prints. */
static int conv_tools(const cJSON *ts, cJSON *out, char *msg, size_t cap) {
    if (!cJSON_IsArray(ts)) return srv_fail(msg, cap, 400, "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(out, "tools");
    const cJSON *t;
    cJSON_ArrayForEach(t, ts) {
        const cJSON *ty = get(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty)) return srv_fail(msg, cap, 400, "each tool must be an object with a string 'type'");
        if (strcmp(ty->valuestring, "function"))
            return srv_fail(msg, cap, 400, "only function tools are supported (tool type '%.40s')", ty->valuestring);
        cJSON *ct = cJSON_CreateObject(), *fn;
        cJSON_AddItemToArray(arr, ct);
        cJSON_AddStringToObject(ct, "type", "function");
        fn = cJSON_AddObjectToObject(ct, "function");
        const cJSON *kv;
        cJSON_ArrayForEach(kv, t) {
            if (strcmp(kv->string, "type")) cJSON_AddItemToObject(fn, kv->string, cJSON_Duplicate(kv, true));
        }
    }
    return 0;
}

/* tool_choice: "auto" / "none" / "required" as they are; {type: "function", name} -> the chat
 * shape; other objects (allowed_tools, hosted tools) are refused. */
static int conv_tool_choice(const cJSON *tc, cJSON *out, char *msg, size_t cap) {
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(out, "tool_choice", cJSON_Duplicate(tc, false));
        return 0;
    }
    const cJSON *ty = get(tc, "type"), *nm = get(tc, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
        return srv_fail(msg, cap, 400, "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(out, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", nm->valuestring);
    return 0;
}

/* Fields that need storage or features spex lacks: 400 with a reason. */
static int refuse(const cJSON *o, char *msg, size_t cap) {
    const cJSON *v = get(o, "previous_response_id");
    if (!absent(v) && !cJSON_IsString(v)) return srv_fail(msg, cap, 400, "'previous_response_id' must be a string");
    if (cJSON_IsString(v) && v->valuestring[0])
        return srv_fail(msg, cap, 400, "'previous_response_id' is not supported: spex stores no responses (send the whole "
                                  "conversation in 'input')");
    if (!absent(get(o, "conversation")))
        return srv_fail(msg, cap, 400, "'conversation' is not supported: spex stores no conversations");
    v = get(o, "background");
    if (!absent(v) && !cJSON_IsBool(v)) return srv_fail(msg, cap, 400, "'background' must be a boolean");
    if (cJSON_IsTrue(v)) return srv_fail(msg, cap, 400, "'background' responses are not supported: spex stores no responses");
    v = get(o, "instructions");
    if (!absent(v) && !cJSON_IsString(v)) return srv_fail(msg, cap, 400, "'instructions' must be a string");
    v = get(o, "reasoning");
    if (!absent(v) && !cJSON_IsObject(v)) return srv_fail(msg, cap, 400, "'reasoning' must be an object");
    v = get(o, "max_output_tokens");   /* its range is checked as max_tokens' (api.c) */
    if (!absent(v) && !cJSON_IsNumber(v)) return srv_fail(msg, cap, 400, "'max_output_tokens' must be an integer");
    v = get(o, "text");
    if (!absent(v)) {
        const cJSON *f = get(v, "format"), *ft = get(f, "type");
        if (!cJSON_IsObject(v)) return srv_fail(msg, cap, 400, "'text' must be an object");
        if (!absent(f) && (!cJSON_IsObject(f) || !cJSON_IsString(ft)))
            return srv_fail(msg, cap, 400, "'text.format' must be an object with a string 'type'");
        if (cJSON_IsString(ft) && strcmp(ft->valuestring, "text"))
            return srv_fail(msg, cap, 400, "'text.format' type '%.40s' is not supported by spex (only \"text\")", ft->valuestring);
    }
    return 0;
}

/* Keys of a Responses body that are not chat fields: converted above or without effect. */
static const char *const resp_only[] = {"input", "instructions", "tools", "tool_choice", "max_output_tokens", "text",
                                        "reasoning", "previous_response_id", "conversation", "background", "store",
                                        "metadata", "include", "truncation", "user", "prompt_cache_key",
                                        "safety_identifier", "service_tier", "stream_options", "messages", "prompt"};

char *srv_responses_to_chat(const char *body, size_t len, int *code, char *msg, size_t cap) {
    *code = 0;
    if (!srv_utf8_valid(body, len)) return *code = srv_fail(msg, cap, 400, "the request body is not valid UTF-8"), NULL;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return *code = srv_fail(msg, cap, 400, "malformed JSON in the request body"), NULL;
    cJSON *out = NULL;
    int rc = 0;
    const cJSON *in = get(o, "input");
    if (!cJSON_IsObject(o)) rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
    else if (!in) rc = srv_fail(msg, cap, 400, "'input' is required");
    else if (!cJSON_IsString(in) && !cJSON_IsArray(in)) rc = srv_fail(msg, cap, 400, "'input' must be a string or an array of items");
    else if (cJSON_IsArray(in) && cJSON_GetArraySize(in) == 0) rc = srv_fail(msg, cap, 400, "'input' must not be empty");
    else rc = refuse(o, msg, cap);
    if (rc) goto done;

    out = cJSON_CreateObject();
    /* every other field as the chat request would carry it (api.c checks their types) */
    const cJSON *kv;
    cJSON_ArrayForEach(kv, o) {
        bool skip = false;
        for (size_t i = 0; i < sizeof resp_only / sizeof *resp_only && !skip; i++) skip = !strcmp(kv->string, resp_only[i]);
        if (!absent(get(o, "max_output_tokens")))   /* it replaces any other budget field */
            skip = skip || !strcmp(kv->string, "max_tokens") || !strcmp(kv->string, "n_predict") ||
                   !strcmp(kv->string, "max_completion_tokens");
        if (!skip) cJSON_AddItemToObject(out, kv->string, cJSON_Duplicate(kv, true));
    }
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    const cJSON *ins = get(o, "instructions");
    if (cJSON_IsString(ins)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
    }
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
    } else {
        bool asst = false;
        const cJSON *it;
        cJSON_ArrayForEach(it, in) {
            if ((rc = conv_item(it, msgs, &asst, msg, cap))) goto done;
        }
    }
    if (cJSON_GetArraySize(msgs) == 0) {   /* only empty reasoning items */
        rc = srv_fail(msg, cap, 400, "'input' holds no message");
        goto done;
    }
    const cJSON *v = get(o, "tools");
    if (!absent(v) && (rc = conv_tools(v, out, msg, cap))) goto done;
    v = get(o, "tool_choice");
    if (!absent(v) && (rc = conv_tool_choice(v, out, msg, cap))) goto done;
    v = get(o, "max_output_tokens");
    if (!absent(v)) cJSON_AddItemToObject(out, "max_tokens", cJSON_Duplicate(v, false));
    if (cJSON_IsTrue(get(o, "stream")))   /* the last chunk carries the usage response.completed needs */
        cJSON_AddBoolToObject(cJSON_AddObjectToObject(out, "stream_options"), "include_usage", true);
done:;
    char *s = NULL;
    if (!rc && !(s = cJSON_PrintUnformatted(out))) rc = srv_fail(msg, cap, 500, "out of memory");
    cJSON_Delete(out);
    cJSON_Delete(o);
    *code = rc;
    return s;
}

int srv_parse_responses(srv_request *r, const char *body, size_t len, char *msg, size_t cap) {
    srv_request_init(r, SRV_EP_CHAT);
    int code = 0;
    char *chat = srv_responses_to_chat(body, len, &code, msg, cap);
    if (!chat) return code ? code : srv_fail(msg, cap, 500, "out of memory");
    code = srv_request_parse(r, chat, strlen(chat), msg, cap);
    free(chat);
    if (!code && r->stream) r->include_usage = true;
    return code;
}

/* ======================================================================== */
/* Response: chat completion -> response object                              */
/* ======================================================================== */

/* An item id: prefix + the response id's random part ("resp_XYZ" -> "msg_XYZ"). */
static void item_id(const cJSON *head, const char *prefix, char *out, size_t cap) {
    const char *id = cJSON_GetStringValue(get(head, "id"));
    if (!id) id = "";
    const char *us = strchr(id, '_'), *dash = strchr(id, '-');
    const char *rest = us ? us + 1 : dash ? dash + 1 : id;
    snprintf(out, cap, "%s%.80s", prefix, rest);
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

/* text NULL: an item in progress (content []). */
static cJSON *reasoning_item(const char *id, const char *text, const char *status) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "reasoning");
    cJSON_AddArrayToObject(o, "summary");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddItemToArray(c, p);
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddStringToObject(p, "text", text);
    }
    cJSON_AddStringToObject(o, "status", status);
    return o;
}

static cJSON *message_item(const char *id, const char *text, const char *status) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text) cJSON_AddItemToArray(c, text_part(text));
    return o;
}

/* A chat tool call {id, function: {name, arguments}} as a function_call item. */
static cJSON *call_item(const cJSON *call, const char *arguments, const char *status) {
    const char *cid = cJSON_GetStringValue(get(call, "id"));
    const cJSON *fn = get(call, "function");
    const char *name = cJSON_GetStringValue(get(fn, "name"));
    if (!arguments) arguments = cJSON_GetStringValue(get(fn, "arguments"));
    if (!cid) cid = "call_";
    char id[112];
    snprintf(id, sizeof id, "fc_%.100s", !strncmp(cid, "call_", 5) ? cid + 5 : cid);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function_call");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "call_id", cid);
    cJSON_AddStringToObject(o, "name", name ? name : "");
    cJSON_AddStringToObject(o, "arguments", arguments ? arguments : "{}");
    return o;
}

static bool incomplete(const char *finish) { return finish && !strcmp(finish, "length"); }

/* The response object: head's id / created_at / model, output (consumed), the chat usage
 * (NULL: in progress) and llama.cpp's timings (NULL: none), both copied. */
static cJSON *response_obj(const cJSON *head, const char *status, cJSON *output, const cJSON *usage,
                           const cJSON *timings) {
    cJSON *o = cJSON_CreateObject();
    const char *id = cJSON_GetStringValue(get(head, "id")), *model = cJSON_GetStringValue(get(head, "model"));
    cJSON_AddStringToObject(o, "id", id ? id : "resp_");
    cJSON_AddStringToObject(o, "object", "response");
    const cJSON *created = get(head, "created_at");
    cJSON_AddNumberToObject(o, "created_at", cJSON_IsNumber(created) ? created->valuedouble : 0);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNullToObject(o, "error");
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", model ? model : "");
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON_AddBoolToObject(o, "store", false);
    if (usage) {
        const cJSON *pt = get(usage, "prompt_tokens"), *ct = get(usage, "completion_tokens");
        const cJSON *cached = get(get(usage, "prompt_tokens_details"), "cached_tokens");
        double in = cJSON_IsNumber(pt) ? pt->valuedouble : 0, outn = cJSON_IsNumber(ct) ? ct->valuedouble : 0;
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", in);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                                cJSON_IsNumber(cached) ? cached->valuedouble : 0);
        cJSON_AddNumberToObject(u, "output_tokens", outn);
        cJSON_AddNumberToObject(u, "total_tokens", in + outn);
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    if (timings) cJSON_AddItemToObject(o, "timings", cJSON_Duplicate(timings, true));
    return o;
}

cJSON *srv_responses_from_chat(cJSON *chat) {
    cJSON *head = cJSON_CreateObject();
    const char *id = cJSON_GetStringValue(get(chat, "id")), *model = cJSON_GetStringValue(get(chat, "model"));
    const cJSON *created = get(chat, "created");
    cJSON_AddStringToObject(head, "id", id ? id : "resp_");
    cJSON_AddNumberToObject(head, "created_at", cJSON_IsNumber(created) ? created->valuedouble : 0);
    cJSON_AddStringToObject(head, "model", model ? model : "");
    const cJSON *c0 = cJSON_GetArrayItem(get(chat, "choices"), 0), *m = get(c0, "message");
    const char *finish = cJSON_GetStringValue(get(c0, "finish_reason"));
    const char *reasoning = cJSON_GetStringValue(get(m, "reasoning_content"));
    const char *content = cJSON_GetStringValue(get(m, "content"));
    const cJSON *calls = get(m, "tool_calls");
    const char *st = incomplete(finish) ? "incomplete" : "completed";
    cJSON *output = cJSON_CreateArray();
    char iid[96];
    if (reasoning && reasoning[0]) {
        item_id(head, "rs_", iid, sizeof iid);
        cJSON_AddItemToArray(output, reasoning_item(iid, reasoning, st));
    }
    int n_calls = cJSON_IsArray(calls) ? cJSON_GetArraySize(calls) : 0;
    if ((content && content[0]) || n_calls == 0) {   /* a plain answer always has its message */
        item_id(head, "msg_", iid, sizeof iid);
        cJSON_AddItemToArray(output, message_item(iid, content ? content : "", st));
    }
    const cJSON *call;
    if (n_calls) cJSON_ArrayForEach(call, calls) cJSON_AddItemToArray(output, call_item(call, NULL, "completed"));
    cJSON *o = response_obj(head, st, output, get(chat, "usage"), get(chat, "timings"));
    cJSON_Delete(head);
    cJSON_Delete(chat);
    return o;
}

/* ======================================================================== */
/* Streams: chat.completion.chunk objects -> Responses events                */
/* ======================================================================== */

void srv_resp_stream_init(srv_resp_stream *s) {
    memset(s, 0, sizeof *s);
    s->output = cJSON_CreateArray();
}

void srv_resp_stream_free(srv_resp_stream *s) {
    cJSON_Delete(s->head);
    cJSON_Delete(s->output);
    srv_strbuf_free(&s->text);
    memset(s, 0, sizeof *s);
}

static cJSON *ev_new(const char *type) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    return e;
}

/* Writes e ("event: TYPE" + "data: JSON") with the next sequence_number; e consumed. */
static void ev_emit(srv_resp_stream *s, cJSON *e, srv_strbuf *out) {
    cJSON_AddNumberToObject(e, "sequence_number", s->seq++);
    char *j = cJSON_PrintUnformatted(e);
    const char *type = cJSON_GetStringValue(get(e, "type"));
    if (j && type) {
        srv_strbuf_add(out, "event: ", 7);
        srv_strbuf_add(out, type, strlen(type));
        srv_strbuf_add(out, "\ndata: ", 7);
        srv_strbuf_add(out, j, strlen(j));
        srv_strbuf_add(out, "\n\n", 2);
    }
    free(j);
    cJSON_Delete(e);
}

static int n_items(const srv_resp_stream *s) { return cJSON_GetArraySize(s->output); }

/* item_id, output_index and content_index of the open item's events. */
static cJSON *ev_item(const srv_resp_stream *s, const char *type, const char *iid) {
    cJSON *e = ev_new(type);
    cJSON_AddStringToObject(e, "item_id", iid);
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddNumberToObject(e, "content_index", 0);
    return e;
}

static void open_iid(const srv_resp_stream *s, char *iid, size_t cap) {
    item_id(s->head, s->open == 1 ? "rs_" : "msg_", iid, cap);
}

static void close_item(srv_resp_stream *s, srv_strbuf *out) {
    if (!s->open) return;
    char iid[96];
    open_iid(s, iid, sizeof iid);
    const char *text = s->text.p ? s->text.p : "";
    const char *st = incomplete(s->finish) ? "incomplete" : "completed";
    cJSON *item, *e;
    if (s->open == 1) {
        e = ev_item(s, "response.reasoning_text.done", iid);
        cJSON_AddStringToObject(e, "text", text);
        ev_emit(s, e, out);
        item = reasoning_item(iid, text, st);
    } else {
        e = ev_item(s, "response.output_text.done", iid);
        cJSON_AddStringToObject(e, "text", text);
        cJSON_AddArrayToObject(e, "logprobs");
        ev_emit(s, e, out);
        e = ev_item(s, "response.content_part.done", iid);
        cJSON_AddItemToObject(e, "part", text_part(text));
        ev_emit(s, e, out);
        item = message_item(iid, text, st);
    }
    e = ev_new("response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(item, true));
    ev_emit(s, e, out);
    cJSON_AddItemToArray(s->output, item);
    s->open = 0;
    s->text.len = 0;
    if (s->text.p) s->text.p[0] = 0;
}

/* Makes kind (1 reasoning, 2 message) the open item, closing another one first. */
static void open_item(srv_resp_stream *s, int kind, srv_strbuf *out) {
    if (s->open == kind) return;
    close_item(s, out);
    s->open = kind;
    char iid[96];
    open_iid(s, iid, sizeof iid);
    cJSON *e = ev_new("response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddItemToObject(e, "item", kind == 1 ? reasoning_item(iid, NULL, "in_progress")
                                               : message_item(iid, NULL, "in_progress"));
    ev_emit(s, e, out);
    if (kind == 2) {
        s->had_message = true;
        e = ev_item(s, "response.content_part.added", iid);
        cJSON_AddItemToObject(e, "part", text_part(""));
        ev_emit(s, e, out);
    }
}

static void text_delta(srv_resp_stream *s, int kind, const char *d, srv_strbuf *out) {
    if (!d || !d[0]) return;
    open_item(s, kind, out);
    char iid[96];
    open_iid(s, iid, sizeof iid);
    cJSON *e = ev_item(s, kind == 1 ? "response.reasoning_text.delta" : "response.output_text.delta", iid);
    cJSON_AddStringToObject(e, "delta", d);
    if (kind == 2) cJSON_AddArrayToObject(e, "logprobs");
    ev_emit(s, e, out);
    srv_strbuf_add(&s->text, d, strlen(d));
}

/* A whole tool call (the splitter releases calls complete): its item's four events. */
static void call_events(srv_resp_stream *s, const cJSON *call, srv_strbuf *out) {
    close_item(s, out);
    const char *args = cJSON_GetStringValue(get(get(call, "function"), "arguments"));
    cJSON *item = call_item(call, "", "in_progress");
    const char *iid = cJSON_GetStringValue(get(item, "id"));
    cJSON *e = ev_new("response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(item, true));
    ev_emit(s, e, out);
    e = ev_new("response.function_call_arguments.delta");
    cJSON_AddStringToObject(e, "item_id", iid);
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddStringToObject(e, "delta", args ? args : "{}");
    ev_emit(s, e, out);
    e = ev_new("response.function_call_arguments.done");
    cJSON_AddStringToObject(e, "item_id", iid);
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddStringToObject(e, "name", cJSON_GetStringValue(get(item, "name")));
    cJSON_AddStringToObject(e, "arguments", args ? args : "{}");
    ev_emit(s, e, out);
    cJSON_Delete(item);
    item = call_item(call, NULL, "completed");
    e = ev_new("response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", n_items(s));
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(item, true));
    ev_emit(s, e, out);
    cJSON_AddItemToArray(s->output, item);
    s->n_calls++;
}

/* The response so far (status, a copy of the output). */
static cJSON *snapshot(const srv_resp_stream *s, const char *status, const cJSON *usage, const cJSON *timings) {
    return response_obj(s->head, status, cJSON_Duplicate(s->output, true), usage, timings);
}

void srv_resp_stream_chunk(srv_resp_stream *s, cJSON *chunk, srv_strbuf *out) {
    if (s->ended || !cJSON_IsObject(chunk)) {
        cJSON_Delete(chunk);
        return;
    }
    if (!s->head) {
        s->head = cJSON_CreateObject();
        const char *id = cJSON_GetStringValue(get(chunk, "id")), *model = cJSON_GetStringValue(get(chunk, "model"));
        const cJSON *created = get(chunk, "created");
        cJSON_AddStringToObject(s->head, "id", id ? id : "resp_");
        cJSON_AddNumberToObject(s->head, "created_at", cJSON_IsNumber(created) ? created->valuedouble : 0);
        cJSON_AddStringToObject(s->head, "model", model ? model : "");
        cJSON *e = ev_new("response.created");
        cJSON_AddItemToObject(e, "response", snapshot(s, "in_progress", NULL, NULL));
        ev_emit(s, e, out);
        e = ev_new("response.in_progress");
        cJSON_AddItemToObject(e, "response", snapshot(s, "in_progress", NULL, NULL));
        ev_emit(s, e, out);
    }
    const cJSON *c0 = cJSON_GetArrayItem(get(chunk, "choices"), 0), *d = get(c0, "delta");
    text_delta(s, 1, cJSON_GetStringValue(get(d, "reasoning_content")), out);
    text_delta(s, 2, cJSON_GetStringValue(get(d, "content")), out);
    const cJSON *call, *calls = get(d, "tool_calls");
    if (cJSON_IsArray(calls)) cJSON_ArrayForEach(call, calls) call_events(s, call, out);
    const char *fin = cJSON_GetStringValue(get(c0, "finish_reason"));
    if (fin) snprintf(s->finish, sizeof s->finish, "%s", fin);
    const cJSON *usage = get(chunk, "usage");
    if (cJSON_IsObject(usage)) {   /* the last chunk: close what is open and end */
        if (!s->had_message && s->n_calls == 0) open_item(s, 2, out);   /* an empty answer has its message */
        close_item(s, out);
        bool inc = incomplete(s->finish);
        cJSON *e = ev_new(inc ? "response.incomplete" : "response.completed");
        cJSON_AddItemToObject(e, "response", snapshot(s, inc ? "incomplete" : "completed", usage, get(chunk, "timings")));
        ev_emit(s, e, out);
        s->ended = true;
    }
    cJSON_Delete(chunk);
}

void srv_resp_stream_error(srv_resp_stream *s, int code, const char *msg, srv_strbuf *out) {
    cJSON *e = ev_new("error");
    cJSON_AddStringToObject(e, "code", srv_error_type(code));
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddNullToObject(e, "param");
    cJSON *err = cJSON_AddObjectToObject(e, "error");   /* llama-server's error object, for its clients */
    cJSON_AddNumberToObject(err, "code", code);
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", srv_error_type(code));
    ev_emit(s, e, out);
    s->ended = true;
}
