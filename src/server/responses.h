/*
 * responses.h — OpenAI's Responses API (POST /v1/responses) on top of the chat completion path
 * (responses.c). Internal to src/server, like server.h.
 *
 * The request is rewritten into a chat completion body and parsed by api.c, so a response runs
 * exactly as the same conversation through /v1/chat/completions would (template, tokenization,
 * sampling, speculation). The answer goes the other way: the chat completion object, or the
 * stream of chat.completion.chunk objects, is turned into a response object or typed
 * `event:` SSE events. Stateless: no response is stored.
 */
#ifndef SPEX_SERVER_RESPONSES_H
#define SPEX_SERVER_RESPONSES_H

#include "server/server.h"

#include <cjson/cJSON.h>

/* Parses a Responses request body into r (initialised here; free with srv_request_free):
 * r->ep is SRV_EP_CHAT and, when streaming, r->include_usage is set (the stream's last event
 * carries the usage). 0, or an HTTP status (400, 500, 501) with msg. Needs no model
 * (fuzz/fuzz_server_req.c). */
int srv_parse_responses(srv_request *r, const char *body, size_t len, char *msg, size_t msg_cap);

/* The chat completion body a Responses body maps to (malloc'd, compact JSON), or NULL with an
 * HTTP status in *code and msg. Exposed for the tests. */
char *srv_responses_to_chat(const char *body, size_t len, int *code, char *msg, size_t msg_cap);

/* The response object for a finished chat completion object (as http.c builds it: id, created,
 * model, choices[0].message / finish_reason, usage, timings); chat is consumed. */
cJSON *srv_responses_from_chat(cJSON *chat);

/* Turns a chat completion stream into Responses events. Feed each chunk object in order
 * (srv_resp_stream_chunk consumes it); the usage chunk (choices [] with usage) ends the stream
 * with response.completed (or response.incomplete when the token budget ran out). */
typedef struct srv_resp_stream {
    /* private */
    cJSON *head;              /* id, created_at, model of the response (from the first chunk) */
    cJSON *output;            /* the items closed so far (array)                              */
    int seq;                  /* next sequence_number                                          */
    int open;                 /* the item being streamed: 0 none, 1 reasoning, 2 message        */
    srv_strbuf text;          /* its text so far                                               */
    char finish[24];          /* chat finish_reason once seen                                  */
    int n_calls;              /* function_call items made                                      */
    bool had_message, ended;
} srv_resp_stream;

void srv_resp_stream_init(srv_resp_stream *s);
void srv_resp_stream_free(srv_resp_stream *s);
/* Appends the events of chunk to out ("event: TYPE\ndata: JSON\n\n" each); chunk consumed. */
void srv_resp_stream_chunk(srv_resp_stream *s, cJSON *chunk, srv_strbuf *out);
/* An error after the stream started: an `error` event (llama-server's error object inside). */
void srv_resp_stream_error(srv_resp_stream *s, int code, const char *msg, srv_strbuf *out);

#endif
