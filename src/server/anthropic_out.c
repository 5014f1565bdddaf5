/*
 * anthropic_out.c — Anthropic Messages responses of `spex serve`: the message object of a
 * finished task and the SSE events of a streaming one.
 *
 * What it is: the generated text of a /v1/messages task (a chat task, anthropic.c) cut the
 * way /v1/chat/completions cuts it — the reasoning split at </think> (§6.3), <tool_call>
 * blocks through the tool-call splitter when tools were rendered (toolcall.c) — and written
 * as Anthropic content blocks: `thinking` (with an empty signature: nothing signs a local
 * model's thoughts), `text`, `tool_use` (input: the call's arguments when they are a JSON
 * object, else {}). stop_reason: max_tokens when the budget or the context ran out, tool_use
 * when calls were made, stop_sequence (with the string) when a stop sequence matched, else
 * end_turn. usage follows llama-server: input_tokens are the prompt tokens not read from the
 * slot's cache, cache_read_input_tokens the ones that were.
 * Streams: message_start, ping, then for each block content_block_start, its deltas
 * (thinking_delta and a closing signature_delta, text_delta, one input_json_delta with the
 * whole input of a call), content_block_stop; message_delta (stop_reason, stop_sequence,
 * usage, and llama.cpp's timings) and message_stop. A failure after the headers is an
 * `event: error` with the Anthropic error body.
 * What it is not: the HTTP side (http.c owns the connection and the task's lifetime).
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_anthropic_stream_init(srv_anth_stream *s) {
    memset(s, 0, sizeof *s);
    srv_toolparse_init(&s->tp);
}

void srv_anthropic_stream_free(srv_anth_stream *s) { srv_toolparse_free(&s->tp); }

static const char *stop_reason(const srv_task *t, int n_calls, const char **seq) {
    *seq = NULL;
    if (t->finish && !strcmp(t->finish, "length")) return "max_tokens";
    if (n_calls > 0) return "tool_use";
    if (t->stop_word >= 0 && t->stop_word < t->n_stop) {
        *seq = t->stop[t->stop_word];
        return "stop_sequence";
    }
    return "end_turn";
}

static void add_usage(cJSON *o, const srv_timings *tm, bool output_only_zero) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    int64_t cached = output_only_zero ? 0 : tm->cache_n;
    cJSON_AddNumberToObject(u, "input_tokens", (double)(tm->n_prompt - cached));
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)cached);
    cJSON_AddNumberToObject(u, "output_tokens", output_only_zero ? 0 : (double)tm->predicted_n);
}

/* toolu_<the message id's random part>_<k>: unique, and the same in a stream and a message. */
static void tool_id(char *out, size_t cap, const char *msg_id, int k) {
    const char *p = strchr(msg_id, '_');
    snprintf(out, cap, "toolu_%s_%d", p ? p + 1 : msg_id, k);
}

static cJSON *tool_input(const char *arguments) {
    cJSON *in = cJSON_Parse(arguments);
    if (cJSON_IsObject(in)) return in;
    cJSON_Delete(in);
    return cJSON_CreateObject();
}

cJSON *srv_anthropic_message(const srv_anth_ctx *x, const srv_task *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", x->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", x->model);
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    size_t r0, r1, c;
    bool split = x->reasoning != SRV_REASONING_NONE &&
                 srv_split_reasoning(t->text, t->len, x->think_open, true, &r0, &r1, &c) == SRV_SPLIT_YES;
    size_t from = split && x->reasoning != SRV_REASONING_LEGACY ? c : 0;
    if (split && r1 > r0) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddItemToArray(content, b);
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking", srv_json_str_n(t->text + r0, r1 - r0));
        cJSON_AddStringToObject(b, "signature", "");
    }
    srv_toolparse tp;
    srv_strbuf body = {0};
    srv_toolparse_init(&tp);
    if (x->tools) {   /* tool calls only after the reasoning, as the chat response */
        size_t tc_from = split ? c : 0;
        srv_strbuf_add(&body, t->text + from, tc_from - from);
        srv_toolparse_feed(&tp, t->text + tc_from, t->len - tc_from, &body);
        srv_toolparse_finish(&tp, &body);
    } else {
        srv_strbuf_add(&body, t->text + from, t->len - from);
    }
    if (body.len > 0) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddItemToArray(content, b);
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddItemToObject(b, "text", srv_json_str_n(body.p, body.len));
    }
    for (int k = 0; k < tp.n_calls; k++) {
        char id[96];
        tool_id(id, sizeof id, x->id, k);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddItemToArray(content, b);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", tp.calls[k].name);
        cJSON_AddItemToObject(b, "input", tool_input(tp.calls[k].arguments));
    }
    const char *seq;
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(t, tp.n_calls, &seq));
    if (seq) cJSON_AddStringToObject(o, "stop_sequence", seq);
    else cJSON_AddNullToObject(o, "stop_sequence");
    add_usage(o, &t->tm, false);
    srv_toolparse_free(&tp);
    srv_strbuf_free(&body);
    return o;
}

/* ---- streams ------------------------------------------------------------ */

enum { BLOCK_NONE = 0, BLOCK_THINKING = 1, BLOCK_TEXT = 2 };

/* An event object {"type": type}. */
static cJSON *event(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* Writes "event: <its type>\ndata: <o>\n\n" and frees o. */
static void emit(srv_strbuf *out, cJSON *o) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
    char *s = cJSON_PrintUnformatted(o);
    if (s && type) {
        srv_strbuf_add(out, "event: ", 7);
        srv_strbuf_add(out, type, strlen(type));
        srv_strbuf_add(out, "\ndata: ", 7);
        srv_strbuf_add(out, s, strlen(s));
        srv_strbuf_add(out, "\n\n", 2);
    }
    free(s);
    cJSON_Delete(o);
}

static void block_stop(srv_anth_stream *s, srv_strbuf *out) {
    if (s->open == BLOCK_NONE) return;
    if (s->open == BLOCK_THINKING) {   /* Anthropic closes a thinking block with its signature */
        cJSON *o = event("content_block_delta"), *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", s->n_blocks - 1);
        cJSON_AddItemToObject(o, "delta", d);
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "");
        emit(out, o);
    }
    cJSON *o = event("content_block_stop");
    cJSON_AddNumberToObject(o, "index", s->n_blocks - 1);
    emit(out, o);
    s->open = BLOCK_NONE;
}

/* A delta of kind (thinking or text) with text[0 .. n), opening its block when needed. */
static void block_delta(srv_anth_stream *s, int kind, const char *text, size_t n, srv_strbuf *out) {
    const char *name = kind == BLOCK_THINKING ? "thinking" : "text";
    if (s->open != kind) {
        block_stop(s, out);
        cJSON *o = event("content_block_start"), *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", s->n_blocks);
        cJSON_AddItemToObject(o, "content_block", b);
        cJSON_AddStringToObject(b, "type", name);
        cJSON_AddStringToObject(b, name, "");
        if (kind == BLOCK_THINKING) cJSON_AddStringToObject(b, "signature", "");
        emit(out, o);
        s->open = kind;
        s->n_blocks++;
    }
    cJSON *o = event("content_block_delta"), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", s->n_blocks - 1);
    cJSON_AddItemToObject(o, "delta", d);
    cJSON_AddStringToObject(d, "type", kind == BLOCK_THINKING ? "thinking_delta" : "text_delta");
    cJSON_AddItemToObject(d, name, srv_json_str_n(text, n));
    emit(out, o);
}

static void tool_block(srv_anth_stream *s, const srv_anth_ctx *x, int k, srv_strbuf *out) {
    block_stop(s, out);
    char id[96];
    tool_id(id, sizeof id, x->id, k);
    int index = s->n_blocks++;
    cJSON *o = event("content_block_start"), *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "content_block", b);
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", s->tp.calls[k].name);
    cJSON_AddItemToObject(b, "input", cJSON_CreateObject());
    emit(out, o);
    cJSON *in = tool_input(s->tp.calls[k].arguments);
    char *json = cJSON_PrintUnformatted(in);
    cJSON_Delete(in);
    o = event("content_block_delta");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "delta", d);
    cJSON_AddStringToObject(d, "type", "input_json_delta");
    cJSON_AddStringToObject(d, "partial_json", json ? json : "{}");
    free(json);
    emit(out, o);
    o = event("content_block_stop");
    cJSON_AddNumberToObject(o, "index", index);
    emit(out, o);
}

bool srv_anthropic_stream_step(srv_anth_stream *s, const srv_anth_ctx *x, const srv_task *t, srv_strbuf *out) {
    if (!s->started) {
        cJSON *o = event("message_start"), *m = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "message", m);
        cJSON_AddStringToObject(m, "id", x->id);
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "model", x->model);
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        add_usage(m, &t->tm, true);   /* the cache is matched later: message_delta has the split */
        emit(out, o);
        emit(out, event("ping"));
        s->started = true;
    }
    /* what may be sent, cut as the chat stream cuts it (http.c stream_progress) */
    size_t rel = t->released, r0 = 0, r1 = 0, c0 = s->c_sent;
    int sp = x->reasoning != SRV_REASONING_NONE
                 ? srv_split_reasoning(t->text, rel, x->think_open, t->done, &r0, &r1, &c0)
                 : SRV_SPLIT_NONE;
    bool split = sp == SRV_SPLIT_YES, legacy = x->reasoning == SRV_REASONING_LEGACY;
    if (sp == SRV_SPLIT_WAIT) rel = s->c_sent;   /* maybe "<think>": hold everything */
    if (split) {
        if (s->r_sent < r0) s->r_sent = r0;
        if (r1 > s->r_sent) {
            block_delta(s, BLOCK_THINKING, t->text + s->r_sent, r1 - s->r_sent, out);
            s->r_sent = r1;
        }
        if (!legacy && s->c_sent < c0) s->c_sent = c0;
    }
    srv_strbuf txt = {0};
    if (rel > s->c_sent && (!split || legacy || c0 < rel)) {
        if (x->tools) srv_toolparse_feed(&s->tp, t->text + s->c_sent, rel - s->c_sent, &txt);
        else srv_strbuf_add(&txt, t->text + s->c_sent, rel - s->c_sent);
        s->c_sent = rel;
    }
    if (t->done && x->tools) srv_toolparse_finish(&s->tp, &txt);
    if (txt.len > 0) block_delta(s, BLOCK_TEXT, txt.p, txt.len, out);
    srv_strbuf_free(&txt);
    for (; s->calls_sent < s->tp.n_calls; s->calls_sent++) tool_block(s, x, s->calls_sent, out);
    if (!t->done) return false;
    block_stop(s, out);
    if (t->err_code) {
        char *e = srv_anthropic_error_json(t->err_code == 499 ? 500 : t->err_code, t->err_msg[0] ? t->err_msg : "error");
        if (e) {
            srv_strbuf_add(out, "event: error\ndata: ", 19);
            srv_strbuf_add(out, e, strlen(e));
            srv_strbuf_add(out, "\n\n", 2);
        }
        free(e);
        return true;
    }
    cJSON *o = event("message_delta"), *d = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "delta", d);
    const char *seq;
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(t, s->tp.n_calls, &seq));
    if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
    else cJSON_AddNullToObject(d, "stop_sequence");
    add_usage(o, &t->tm, false);
    srv_add_timings(o, &t->tm);
    emit(out, o);
    emit(out, event("message_stop"));
    return true;
}
