/*
 * fuzz_server_req.c — libFuzzer target for `spex serve`'s request parsing (src/server/api.c):
 * arbitrary bytes as the JSON body of every endpoint, and through the reasoning split.
 *
 * Input byte 0 picks the endpoint (chat, completions, /completion — as /infill with bit 5 set —,
 * /tokenize, /detokenize; with bit 6 set (bit 7 clear) the embeddings endpoints instead, bit 0
 * choosing /v1/embeddings or /embedding; bit 7 set (bit 6 clear) /v1/responses,
 * src/server/responses.c; bits 6 and 7 set Anthropic's /v1/messages, anthropic.c, bit 0 choosing
 * count_tokens) and the reasoning-split flags; the rest is the body. Needs no model: api.c,
 * embd.c, infill.c, responses.c and anthropic.c depend on cJSON and src/tok only (the Makefile
 * links just those, with toolcall.c for its byte buffer).
 *
 * Checked: no crash, leak or sanitizer report; a parse returns 0 or an HTTP status 400/500/501
 * with a NUL-terminated message; a successful chat or Anthropic parse (anthropic.c) has >= 1 message with non-NULL
 * content, tools (§6.1) that are JSON objects and tool calls with a name and arguments, and
 * renders through both Qwen chat templates with its tools and tool calls (src/tok/chat.c's
 * tojson printer sees fuzzed JSON) without an error other than INVALID_ARG; stop strings are
 * non-empty and fewer than SRV_MAX_STOP; a successful embeddings parse has 1 ..
 * SRV_EMBD_MAX_INPUTS inputs, each text or ids, embd_normalize >= -1, and its response body
 * (built on made-up vectors, in both shapes and both encodings) is valid JSON; split offsets are ordered and within the text; the
 * UTF-8 repair (srv_utf8_repair) of the bytes is valid UTF-8 and leaves valid input unchanged.
 * /v1/responses: the same checks on the chat request it maps to; the body read as a chat
 * completion converts to a response object, and read line by line as stream chunks gives
 * events whose data lines are all JSON objects.
 * Run: make fuzz && ./build-fuzz/fuzz_server_req -max_total_time=20 fuzz/corpus/server_req
 */
#include "server/server.h"
#include "server/responses.h"
#include "spec/api.h"

#include <cjson/cJSON.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Renders a parsed chat request as http.c does (tools and tool calls included): the length
 * query then the render must agree; only INVALID_ARG (where the Jinja template raises) fails. */
static void render(const srv_request *r, spex_chat_template t, bool think) {
    spex_chat_msg *ms = calloc((size_t)r->n_msgs, sizeof *ms);
    if (!ms) return;
    for (int i = 0; i < r->n_msgs; i++)
        ms[i] = (spex_chat_msg){r->msgs[i].role, r->msgs[i].content, r->msgs[i].reasoning, r->msgs[i].tool_calls,
                                (size_t)r->msgs[i].n_tool_calls};
    const char *const *tools = (const char *const *)r->tools;
    size_t need = 0, got = 0;
    spex_status st = spex_chat_apply_tools(t, ms, (size_t)r->n_msgs, tools, (size_t)r->n_tools, true, think, NULL, 0,
                                           &need, NULL);
    if (st == SPEX_ERR_RANGE) {
        char *buf = malloc(need + 1);
        if (buf) {
            st = spex_chat_apply_tools(t, ms, (size_t)r->n_msgs, tools, (size_t)r->n_tools, true, think, buf, need + 1,
                                       &got, NULL);
            if (st != SPEX_OK || got != need || buf[got] != 0) __builtin_trap();
            free(buf);
        }
    } else if (st != SPEX_ERR_INVALID_ARG) {
        __builtin_trap();
    }
    free(ms);
}

/* The embeddings parser (embd.c) and the response built from its request. */
static void fuzz_embd(unsigned sel, const char *body, size_t len) {
    srv_embd_req r;
    char msg[512];
    msg[0] = 0;
    int rc = srv_parse_embd(&r, body, len, sel & 1, msg, sizeof msg);
    if (rc != 0 && rc != 400 && rc != 500) __builtin_trap();
    if (rc != 0 && !memchr(msg, 0, sizeof msg)) __builtin_trap();
    if (rc == 0) {
        if (r.n_in < 1 || r.n_in > SRV_EMBD_MAX_INPUTS || r.normalize < -1) __builtin_trap();
        int32_t rows[SRV_EMBD_MAX_INPUTS];
        int64_t n_rows = 0;
        for (int i = 0; i < r.n_in; i++) {
            if (!r.in[i].text && !r.in[i].ids) __builtin_trap();
            rows[i] = r.in[i].text ? 1 : r.in[i].n_ids % 3 + 1;
            n_rows += rows[i];
        }
        float *v = calloc((size_t)n_rows * 4, sizeof *v);
        for (int64_t k = 0; v && k < n_rows * 4; k++) v[k] = (float)k * (k % 2 ? -0.25f : 1e30f);
        char *out = v ? srv_embd_response(&r, v, rows, 4, n_rows, "m") : NULL;
        cJSON *o = out ? cJSON_Parse(out) : NULL;
        if (out && !o) __builtin_trap();
        cJSON_Delete(o);
        free(out);
        free(v);
    }
    srv_embd_req_free(&r);
}

/* Every "data: " line of a Responses event stream is a JSON object with a type. */
static void check_events(const char *p) {
    for (; p && (p = strstr(p, "\ndata: ")); p += 7) {
        const char *e = strchr(p + 7, '\n');
        cJSON *o = cJSON_ParseWithLength(p + 7, e ? (size_t)(e - p - 7) : strlen(p + 7));
        if (!cJSON_IsObject(o) || !cJSON_IsString(cJSON_GetObjectItem(o, "type"))) __builtin_trap();
        cJSON_Delete(o);
    }
}

/* /v1/responses: the request parser, then the body through both response converters. */
static void fuzz_responses(unsigned sel, const char *body, size_t len) {
    srv_request r;
    char msg[512];
    msg[0] = 0;
    int rc = srv_parse_responses(&r, body, len, msg, sizeof msg);
    if (rc != 0 && rc != 400 && rc != 500 && rc != 501) __builtin_trap();
    if (rc != 0 && !memchr(msg, 0, sizeof msg)) __builtin_trap();
    if (rc == 0) {
        if (r.n_msgs < 1 || r.ep != SRV_EP_CHAT) __builtin_trap();
        for (int i = 0; i < r.n_msgs; i++)
            if (!r.msgs[i].content) __builtin_trap();
        render(&r, SPEX_CHAT_CHATML_QWEN3, (sel >> 5) & 1);
    }
    srv_request_free(&r);
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (o) {
        cJSON *resp = srv_responses_from_chat(o);
        char *j = cJSON_PrintUnformatted(resp);
        if (!resp || !j || strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(resp, "object")), "response")) __builtin_trap();
        free(j);
        cJSON_Delete(resp);
    }
    srv_resp_stream rs;
    srv_resp_stream_init(&rs);
    srv_strbuf out = {0};
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(body + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - body - i) : len - i;
        srv_resp_stream_chunk(&rs, cJSON_ParseWithLength(body + i, n), &out);
        i += n + 1;
    }
    if (sel & 1) srv_resp_stream_error(&rs, 500, "boom", &out);
    srv_resp_stream_free(&rs);
    check_events(out.p);
    srv_strbuf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char msg[512];
    msg[0] = 0;
    /* the UTF-8 repair of /detokenize: always valid, and the identity on valid input */
    size_t rl = 0;
    char *rep = srv_utf8_repair(body, len, &rl);
    if (rep && (!srv_utf8_valid(rep, rl) || (srv_utf8_valid(body, len) && (rl != len || memcmp(rep, body, len)))))
        abort();
    free(rep);
    if ((sel & 0xc0) == 0x40) {
        fuzz_embd(sel, body, len);
        return 0;
    }
    if ((sel & 0xc0) == 0x80) {
        fuzz_responses(sel, body, len);
        return 0;
    }
    srv_request r;
    int rc;
    const bool anth = (sel & 0xc0) == 0xc0;   /* Anthropic Messages: parsed into a chat request */
    if (anth) {
        srv_request_init(&r, SRV_EP_CHAT);
        rc = srv_anthropic_parse(&r, body, len, sel & 1, msg, sizeof msg);
        if (rc == 0 && (!r.anthropic || r.ep != SRV_EP_CHAT)) __builtin_trap();
        if (rc == 0 && (sel & 1) == 0 && r.n_predict < 1) __builtin_trap();   /* max_tokens: given >= 1, or 4096 */
        char *e = srv_anthropic_error_json(rc ? rc : 400, msg);
        cJSON *eo = e ? cJSON_Parse(e) : NULL;
        if (e && !cJSON_IsObject(cJSON_GetObjectItem(eo, "error"))) __builtin_trap();
        cJSON_Delete(eo);
        free(e);
    } else {
        switch (sel % 5) {
        case 0: srv_request_init(&r, SRV_EP_CHAT); rc = srv_request_parse(&r, body, len, msg, sizeof msg); break;
        case 1: srv_request_init(&r, SRV_EP_COMPLETIONS); rc = srv_request_parse(&r, body, len, msg, sizeof msg); break;
        case 2:   /* bit 5: as /infill (infill.c's fields) */
            srv_request_init(&r, SRV_EP_COMPLETION);
            r.want_infill = sel & 0x20;
            rc = srv_request_parse(&r, body, len, msg, sizeof msg);
            break;
        case 3: srv_request_init(&r, SRV_EP_COMPLETION); rc = srv_parse_tokenize(&r, body, len, msg, sizeof msg); break;
        default: srv_request_init(&r, SRV_EP_COMPLETION); rc = srv_parse_detokenize(&r, body, len, msg, sizeof msg); break;
        }
    }
    if (rc != 0 && rc != 400 && rc != 500 && rc != 501) __builtin_trap();
    if (rc != 0 && !memchr(msg, 0, sizeof msg)) __builtin_trap();
    if (rc == 0 && (anth || sel % 5 == 0)) {
        if (r.n_msgs < 1) __builtin_trap();
        for (int i = 0; i < r.n_msgs; i++) {
            if (!r.msgs[i].content) __builtin_trap();
            for (int k = 0; k < r.msgs[i].n_tool_calls; k++)
                if (!r.msgs[i].tool_calls[k].name || !r.msgs[i].tool_calls[k].arguments) __builtin_trap();
        }
        for (int i = 0; i < r.n_tools; i++)
            if (!r.tools[i] || r.tools[i][0] != '{') __builtin_trap();
        render(&r, SPEX_CHAT_CHATML_QWEN3, (sel >> 5) & 1);
        render(&r, SPEX_CHAT_CHATML_QWEN35, (sel >> 5) & 1);
    }
    if (rc == 0 && r.want_infill) {
        if (!r.infill || !r.infill->prefix || !r.infill->suffix || r.infill->n_extra < 0) __builtin_trap();
        for (int i = 0; i < r.infill->n_extra; i++)
            if (!r.infill->files[i] || !r.infill->texts[i]) __builtin_trap();
    }
    if (r.n_stop > SRV_MAX_STOP) __builtin_trap();
    for (int i = 0; i < r.n_stop; i++)
        if (!r.stop[i][0] || strlen(r.stop[i]) >= SRV_MAX_STOP_LEN) __builtin_trap();
    srv_request_free(&r);

    size_t r0, r1, c0;
    if (srv_split_reasoning(body, len, (sel >> 3) & 1, (sel >> 4) & 1, &r0, &r1, &c0) == SRV_SPLIT_YES)
        if (!(r0 <= r1 && r1 <= c0 && c0 <= len)) __builtin_trap();
    return 0;
}
