/*
 * test_server_responses.c — POST /v1/responses (OpenAI's Responses API, stateless) and
 * GET /v1/models/{id} of `spex serve`, raw HTTP against the build's spex binary with the
 * synthetic pair tiny-qwen3 + tiny-qwen3.dflash2 (speculation on) and the built-in Qwen3
 * template (so tools render), plus the converters of src/server/responses.c without a model.
 *
 * What it checks: a greedy response's text equals /v1/chat/completions' for the same
 * conversation byte for byte, and its usage equals the chat's; `instructions` is the system
 * message; usage.input_tokens equals /tokenize of /apply-template's render of the equivalent
 * chat body; max_output_tokens ends in status "incomplete" (incomplete_details.reason
 * max_output_tokens) and a stop string in "completed"; the streamed output_text deltas join
 * to the non-streamed text, every event's `event:` line names its type, sequence_number
 * counts up from 0, items open and close in order and the last event carries the same
 * response; function_call / function_call_output items and flat tools render as the chat
 * request's tool calls, tool results and tools; the reasoning item (a template that opens
 * <think>), plain and streamed; malformed and unsupported requests get a clean 400 with a
 * message; /v1/models/{id} and /models/{id}. Model-free: function_call items and their events
 * from a chat completion and chunks that carry tool calls (the tiny model never calls tools).
 * What it is not: the chat path itself (test_server.c) or a real client (test_server_node.c
 * runs tests/node/openai_responses.mjs).
 */
#include "spex.h"
#include "server/responses.h"
#include "test.h"
#include "srv_client.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"

static shared_server g_srv, g_think;

static int main_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "2048", "--chat-template",
                       "chatml-qwen3", "-t", "1", NULL};
    return shared_server_port(&g_srv, a);
}

/* qwen35's template opens <think> in the generation prompt: the whole answer is reasoning. */
static int think_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "--chat-template", "qwen35", "-t", "1", NULL};
    return shared_server_port(&g_think, a);
}

#define REQUIRE_SERVER(port) REQUIRE_SERVER_FROM(port, main_port)

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static cJSON *jget(cJSON *o, const char *path) {   /* "a/b/0/c": object keys and array indices */
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, "/");
        snprintf(key, sizeof key, "%.*s", (int)n, path);
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(key)) : cJSON_GetObjectItem(o, key);
        path += n + (path[n] == '/');
    }
    return o;
}

static double jnum(cJSON *o, const char *path) {
    cJSON *v = jget(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *jstr(cJSON *o, const char *path) {
    const char *v = cJSON_GetStringValue(jget(o, path));
    return v ? v : "";
}

/* The output item of type `type` (first one), or NULL. */
static cJSON *item_of(cJSON *resp_obj, const char *type) {
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(resp_obj, "output")) {
        if (!strcmp(jstr(it, "type"), type)) return it;
    }
    return NULL;
}

/* The text of a response's message item ("" when there is none). */
static const char *resp_text(cJSON *o) { return jstr(item_of(o, "message"), "content/0/text"); }

/* A streamed response, parsed: the joined output_text / reasoning_text deltas, the last
 * event's response, and whether the events were well formed (msg says what was not). */
typedef struct streamed {
    char text[8192], reasoning[8192];
    cJSON *final;             /* the response of the last event (owned)               */
    int n_events, n_calls_done;
    bool ok, done_marker;
    char why[256];
} streamed;

static void sfail(streamed *s, const char *why, const char *type) {
    if (s->ok) snprintf(s->why, sizeof s->why, "%s (%s)", why, type ? type : "");
    s->ok = false;
}

static void cat(char *dst, size_t cap, const char *src) {
    size_t n = strlen(dst), k = strlen(src);
    if (n + k < cap) memcpy(dst + n, src, k + 1);
}

/* The event order of one output item: added, [content_part.added], deltas, done events,
 * output_item.done; one item at a time. */
static void check_events(char *body, streamed *s) {
    s->ok = true;
    int expect_seq = 0, open_index = -1, n_items = 0;
    bool part_open = false, ended = false;
    for (char *p = body; p && *p;) {
        char *e = strstr(p, "\n\n");
        if (!e) break;
        *e = 0;
        if (!strncmp(p, "data: [DONE]", 12)) s->done_marker = true;
        if (p[0] == ':') {   /* an SSE comment (ping) */
            p = e + 2;
            continue;
        }
        if (strncmp(p, "event: ", 7)) {
            sfail(s, "a block without an event: line", p);
            p = e + 2;
            continue;
        }
        char *nl = strchr(p, '\n');
        if (!nl || strncmp(nl + 1, "data: ", 6)) {
            sfail(s, "an event without its data: line", p);
            p = e + 2;
            continue;
        }
        *nl = 0;
        const char *ev = p + 7;
        cJSON *o = cJSON_Parse(nl + 7);
        const char *type = jstr(o, "type");
        s->n_events++;
        if (!o || strcmp(type, ev)) sfail(s, "the event: line differs from the data's type", ev);
        if ((int)jnum(o, "sequence_number") != expect_seq++) sfail(s, "sequence_number out of order", ev);
        if (ended) sfail(s, "an event after the last one", ev);
        if (s->n_events == 1 && strcmp(type, "response.created")) sfail(s, "the first event is not response.created", ev);
        if (!strcmp(type, "response.output_item.added")) {
            if (open_index >= 0) sfail(s, "an item added while another is open", ev);
            open_index = (int)jnum(o, "output_index");
            if (open_index != n_items) sfail(s, "output_index skips", ev);
        } else if (!strcmp(type, "response.content_part.added")) {
            if (open_index < 0 || part_open) sfail(s, "a content part outside an item", ev);
            part_open = true;
        } else if (!strcmp(type, "response.output_text.delta")) {
            if (!part_open) sfail(s, "a text delta outside a content part", ev);
            cat(s->text, sizeof s->text, jstr(o, "delta"));
        } else if (!strcmp(type, "response.reasoning_text.delta")) {
            if (open_index < 0) sfail(s, "a reasoning delta outside an item", ev);
            cat(s->reasoning, sizeof s->reasoning, jstr(o, "delta"));
        } else if (!strcmp(type, "response.output_text.done")) {
            if (strcmp(jstr(o, "text"), s->text)) sfail(s, "output_text.done's text is not the deltas joined", ev);
        } else if (!strcmp(type, "response.reasoning_text.done")) {
            if (strcmp(jstr(o, "text"), s->reasoning)) sfail(s, "reasoning_text.done's text is not the deltas joined", ev);
        } else if (!strcmp(type, "response.content_part.done")) {
            if (!part_open) sfail(s, "content_part.done without content_part.added", ev);
            part_open = false;
        } else if (!strcmp(type, "response.function_call_arguments.done")) {
            s->n_calls_done++;
        } else if (!strcmp(type, "response.output_item.done")) {
            if (open_index != (int)jnum(o, "output_index") || part_open) sfail(s, "output_item.done out of order", ev);
            open_index = -1;
            n_items++;
        } else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
            if (open_index >= 0) sfail(s, "the response ended with an item open", ev);
            ended = true;
            cJSON_Delete(s->final);
            s->final = cJSON_DetachItemFromObject(o, "response");
            if (cJSON_GetArraySize(cJSON_GetObjectItem(s->final, "output")) != n_items)
                sfail(s, "the final output has another number of items than were streamed", ev);
        }
        cJSON_Delete(o);
        p = e + 2;
    }
    if (!ended) sfail(s, "no response.completed / response.incomplete", NULL);
}

static bool stream_response(int port, const char *body, streamed *s) {
    memset(s, 0, sizeof *s);
    resp r;
    if (!http(port, "POST", "/v1/responses", NULL, body, &r)) return false;
    bool sse = r.status == 200 && strstr(r.head, "text/event-stream");
    if (!sse) printf("  stream: %d %s\n", r.status, r.body);
    if (sse) check_events(r.body, s);
    resp_free(&r);
    return sse;
}

/* ======================================================================== */
/* Text, usage and the chat path                                             */
/* ======================================================================== */

TEST(text_equals_chat_and_usage) {
    REQUIRE_SERVER(port);
    cJSON *chat = post_json(port, "/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":24,"
                            "\"temperature\":0}", 200);
    cJSON *rs = post_json(port, "/v1/responses",
                          "{\"model\":\"tiny\",\"input\":\"Hello\",\"max_output_tokens\":24,\"temperature\":0,"
                          "\"store\":false,\"reasoning\":{\"effort\":\"low\"},\"metadata\":{\"k\":\"v\"}}", 200);
    CHECK(chat && rs);
    const char *want = jstr(chat, "choices/0/message/content"), *got = resp_text(rs);
    bool same = !strcmp(want, got);
    if (!same) printf("  chat     '%s'\n  response '%s'\n", want, got);
    const bool id_ok = !strncmp(jstr(rs, "id"), "resp_", 5) && !strcmp(jstr(rs, "object"), "response") &&
                       !strcmp(jstr(rs, "model"), "tiny") && jnum(rs, "created_at") > 0;
    const cJSON *msg = item_of(rs, "message");
    const bool item_ok = msg && !strncmp(jstr((cJSON *)msg, "id"), "msg_", 4) &&
                         !strcmp(jstr((cJSON *)msg, "role"), "assistant") &&
                         !strcmp(jstr((cJSON *)msg, "content/0/type"), "output_text") &&
                         cJSON_IsArray(jget((cJSON *)msg, "content/0/annotations"));
    const long in = (long)jnum(rs, "usage/input_tokens"), out = (long)jnum(rs, "usage/output_tokens");
    const long total = (long)jnum(rs, "usage/total_tokens");
    const long c_in = (long)jnum(chat, "usage/prompt_tokens"), c_out = (long)jnum(chat, "usage/completion_tokens");
    const bool incomplete = !strcmp(jstr(rs, "status"), "incomplete") &&
                            !strcmp(jstr(rs, "incomplete_details/reason"), "max_output_tokens") &&
                            !strcmp(jstr((cJSON *)msg, "status"), "incomplete");
    if (!id_ok || !item_ok || !incomplete) jprint("response", rs);
    cJSON_Delete(chat);
    cJSON_Delete(rs);
    CHECK(same);
    CHECK(id_ok);
    CHECK(item_ok);
    CHECK_EQ_INT(in, c_in);
    CHECK_EQ_INT(out, c_out);
    CHECK_EQ_INT(out, 24);
    CHECK_EQ_INT(total, in + out);
    CHECK(incomplete);   /* the 24-token budget ran out (the tiny model does not stop by itself) */
}

/* instructions is a leading system message: the same prompt tokens and text as the chat
 * request with that system message, more tokens than without it; input_tokens equals
 * /tokenize of what /apply-template renders for the chat body. */
TEST(instructions_are_the_system_message) {
    REQUIRE_SERVER(port);
    const char *chat_body = "{\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},"
                            "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}],"
                            "\"max_tokens\":12,\"temperature\":0}";
    const char *rs_body = "{\"instructions\":\"You are terse.\",\"input\":[{\"type\":\"message\",\"role\":\"user\","
                          "\"content\":[{\"type\":\"input_text\",\"text\":\"Hi\"}]}],\"max_output_tokens\":12,"
                          "\"temperature\":0}";
    cJSON *chat = post_json(port, "/v1/chat/completions", chat_body, 200);
    cJSON *rs = post_json(port, "/v1/responses", rs_body, 200);
    cJSON *bare = post_json(port, "/v1/responses", "{\"input\":\"Hi\",\"max_output_tokens\":1}", 200);
    cJSON *at = post_json(port, "/apply-template", chat_body, 200);
    CHECK(chat && rs && bare && at);
    int want_in = tokenize_count(port, jstr(at, "prompt"));
    const bool same = !strcmp(jstr(chat, "choices/0/message/content"), resp_text(rs));
    const long in = (long)jnum(rs, "usage/input_tokens"), c_in = (long)jnum(chat, "usage/prompt_tokens");
    const long in_bare = (long)jnum(bare, "usage/input_tokens");
    printf("  input_tokens %ld with instructions, %ld without, /tokenize of the render %d\n", in, in_bare, want_in);
    cJSON_Delete(chat);
    cJSON_Delete(rs);
    cJSON_Delete(bare);
    cJSON_Delete(at);
    CHECK(same);
    CHECK_EQ_INT(in, c_in);
    CHECK_EQ_INT(in, want_in);
    CHECK(in > in_bare);
}

/* A stop string taken from the greedy text ends the response early with status completed. */
TEST(stop_string_completes) {
    REQUIRE_SERVER(port);
    cJSON *rs = post_json(port, "/v1/responses", "{\"input\":\"Once\",\"max_output_tokens\":16,\"temperature\":0}", 200);
    CHECK(rs);
    char full[4096], stop[8] = "";
    snprintf(full, sizeof full, "%s", resp_text(rs));
    cJSON_Delete(rs);
    size_t n = strlen(full);
    CHECK_MSG(n >= 8, "greedy text too short: '%s'", full);
    /* two whole characters from the middle (the text may hold multi-byte ones): the stop
     * string is found there or earlier */
    size_t i = n / 2, j;
    while (i < n && (full[i] & 0xC0) == 0x80) i++;
    for (j = i + 1; j < n && (full[j] & 0xC0) == 0x80;) j++;
    for (j++; j < n && (full[j] & 0xC0) == 0x80;) j++;
    CHECK(j <= n && j - i < sizeof stop);
    memcpy(stop, full + i, j - i);
    char body[256];
    cJSON *s = cJSON_CreateString(stop);
    char *sj = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    snprintf(body, sizeof body, "{\"input\":\"Once\",\"max_output_tokens\":16,\"temperature\":0,\"stop\":%s}", sj);
    free(sj);
    rs = post_json(port, "/v1/responses", body, 200);
    CHECK(rs);
    const char *got = resp_text(rs);
    const bool prefix = strlen(got) < n && !strncmp(full, got, strlen(got)) && !strstr(got, stop);
    const bool completed = !strcmp(jstr(rs, "status"), "completed") && cJSON_IsNull(jget(rs, "incomplete_details")) &&
                           !strcmp(jstr(item_of(rs, "message"), "status"), "completed");
    if (!prefix || !completed) jprint("response", rs);
    cJSON_Delete(rs);
    CHECK(prefix);
    CHECK(completed);
}

/* Streamed: typed events in order, deltas joined == the non-streamed text, same usage. */
TEST(stream_events_and_text) {
    REQUIRE_SERVER(port);
    const char *body = "{\"input\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_output_tokens\":20,"
                       "\"temperature\":0%s}";
    char b1[256], b2[256];
    snprintf(b1, sizeof b1, body, "");
    snprintf(b2, sizeof b2, body, ",\"stream\":true,\"stream_options\":{\"include_obfuscation\":false}");
    cJSON *plain = post_json(port, "/v1/responses", b1, 200);
    CHECK(plain);
    streamed s;
    bool got = stream_response(port, b2, &s);
    const bool same = got && !strcmp(s.text, resp_text(plain));
    if (!same) printf("  plain  '%s'\n  stream '%s'\n", resp_text(plain), s.text);
    if (!s.ok) printf("  events: %s\n", s.why);
    const bool final_ok = s.final && !strcmp(resp_text(s.final), s.text) &&
                          !strcmp(jstr(s.final, "status"), "incomplete") &&
                          jnum(s.final, "usage/input_tokens") == jnum(plain, "usage/input_tokens") &&
                          jnum(s.final, "usage/output_tokens") == jnum(plain, "usage/output_tokens") &&
                          !strncmp(jstr(s.final, "id"), "resp_", 5);
    if (!final_ok && s.final) jprint("final", s.final);
    printf("  %d events, %zu bytes of text\n", s.n_events, strlen(s.text));
    cJSON_Delete(plain);
    cJSON_Delete(s.final);
    CHECK(got);
    CHECK(s.ok);
    CHECK(same);
    CHECK(final_ok);
    CHECK(!s.done_marker);
    CHECK(s.n_events >= 8);   /* created, in_progress, added, part, >=1 delta, 3 done, end */
}

/* Tool round trip in Responses items renders exactly as the chat request with tool_calls and
 * a tool message: the same prompt tokens as the chat request and as /tokenize of
 * /apply-template's render, the same greedy text; the flat tools add the tools block. */
TEST(function_call_items_render_as_tool_calls) {
    REQUIRE_SERVER(port);
    const char *params = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}},"
                         "\"required\":[\"a\",\"b\"]}";
    char chat_body[4096], rs_body[4096], rs_none[4096];
    snprintf(chat_body, sizeof chat_body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+3?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
             "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"5\"},"
             "{\"role\":\"user\",\"content\":\"And 4+4?\"}],"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds two numbers\","
             "\"parameters\":%s}}],\"max_tokens\":10,\"temperature\":0}",
             params);
    const char *items = "[{\"role\":\"user\",\"content\":\"What is 2+3?\"},"
                        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"add\","
                        "\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\",\"status\":\"completed\"},"
                        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"5\"},"
                        "{\"role\":\"user\",\"content\":\"And 4+4?\"}]";
    snprintf(rs_body, sizeof rs_body,
             "{\"input\":%s,\"tools\":[{\"type\":\"function\",\"name\":\"add\",\"description\":\"Adds two numbers\","
             "\"parameters\":%s}],\"tool_choice\":\"auto\",\"max_output_tokens\":10,\"temperature\":0}",
             items, params);
    snprintf(rs_none, sizeof rs_none,
             "{\"input\":%s,\"tools\":[{\"type\":\"function\",\"name\":\"add\",\"parameters\":%s}],"
             "\"tool_choice\":\"none\",\"max_output_tokens\":1}",
             items, params);
    cJSON *chat = post_json(port, "/v1/chat/completions", chat_body, 200);
    cJSON *rs = post_json(port, "/v1/responses", rs_body, 200);
    cJSON *none = post_json(port, "/v1/responses", rs_none, 200);
    cJSON *at = post_json(port, "/apply-template", chat_body, 200);
    CHECK(chat && rs && none && at);
    const char *prompt = jstr(at, "prompt");
    const bool rendered = strstr(prompt, "<tool_call>") && strstr(prompt, "<tool_response>") && strstr(prompt, "<tools>");
    const int want = tokenize_count(port, prompt);
    const long in = (long)jnum(rs, "usage/input_tokens"), c_in = (long)jnum(chat, "usage/prompt_tokens");
    const long in_none = (long)jnum(none, "usage/input_tokens");
    const bool same = !strcmp(jstr(chat, "choices/0/message/content"), resp_text(rs));
    printf("  input_tokens %ld (chat %ld, render %d), %ld with tool_choice none\n", in, c_in, want, in_none);
    cJSON_Delete(chat);
    cJSON_Delete(rs);
    cJSON_Delete(none);
    cJSON_Delete(at);
    CHECK(rendered);
    CHECK_EQ_INT(in, c_in);
    CHECK_EQ_INT(in, want);
    CHECK(same);
    CHECK(in_none < in);   /* tool_choice none: no tools block */
}

/* ======================================================================== */
/* Reasoning                                                                 */
/* ======================================================================== */

/* A template that opens <think>: the answer is a reasoning item whose text is the chat's
 * reasoning_content, then an empty message; streamed, reasoning_text deltas join to it. */
TEST(reasoning_item_plain_and_streamed) {
    REQUIRE_SERVER_FROM(port, think_port);
    const char *chat_body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":12,\"temperature\":0}";
    const char *rs_body = "{\"input\":\"Hello\",\"max_output_tokens\":12,\"temperature\":0}";
    const char *rs_stream = "{\"input\":\"Hello\",\"max_output_tokens\":12,\"temperature\":0,\"stream\":true}";
    cJSON *chat = post_json(port, "/v1/chat/completions", chat_body, 200);
    cJSON *rs = post_json(port, "/v1/responses", rs_body, 200);
    CHECK(chat && rs);
    streamed s;
    bool got = stream_response(port, rs_stream, &s);
    const char *want = jstr(chat, "choices/0/message/reasoning_content");
    cJSON *ri = item_of(rs, "reasoning");
    const bool plain_ok = ri && want[0] && !strcmp(jstr(ri, "content/0/text"), want) &&
                          !strcmp(jstr(ri, "content/0/type"), "reasoning_text") && !strncmp(jstr(ri, "id"), "rs_", 3) &&
                          !strcmp(jstr(rs, "output/0/type"), "reasoning");
    const bool stream_ok = got && s.ok && !strcmp(s.reasoning, want) && s.final && item_of(s.final, "reasoning") &&
                           !strcmp(jstr(item_of(s.final, "reasoning"), "content/0/text"), want) &&
                           !strcmp(s.text, resp_text(rs));
    if (!plain_ok) jprint("response", rs);
    if (!stream_ok) printf("  stream: %s, reasoning '%s' want '%s'\n", s.why, s.reasoning, want);
    cJSON_Delete(chat);
    cJSON_Delete(rs);
    cJSON_Delete(s.final);
    CHECK(plain_ok);
    CHECK(stream_ok);
    bool clean;
    CHECK_EQ_INT(shared_server_stop(&g_think, &clean), 0);
    CHECK(clean);
}

/* ======================================================================== */
/* Errors and /v1/models/{id}                                                */
/* ======================================================================== */

TEST(malformed_requests_400) {
    REQUIRE_SERVER(port);
    static const char *const bodies[] = {
        "{oops",
        "[1,2]",
        "{}",
        "{\"input\":5}",
        "{\"input\":[]}",
        "{\"input\":[5]}",
        "{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
        "{\"input\":[{\"role\":\"user\"}]}",
        "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"http://x\"}]}]}",
        "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}",
        "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
        "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":{}}]}",
        "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}",
        "{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}",
        "{\"input\":[{\"type\":\"computer_call\"}]}",
        "{\"input\":\"hi\",\"previous_response_id\":\"resp_123\"}",
        "{\"input\":\"hi\",\"conversation\":\"conv_1\"}",
        "{\"input\":\"hi\",\"background\":true}",
        "{\"input\":\"hi\",\"instructions\":7}",
        "{\"input\":\"hi\",\"tools\":[{\"type\":\"web_search\"}]}",
        "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\"}]}",
        "{\"input\":\"hi\",\"tools\":{}}",
        "{\"input\":\"hi\",\"tool_choice\":{\"type\":\"allowed_tools\"}}",
        "{\"input\":\"hi\",\"tool_choice\":\"maybe\"}",
        "{\"input\":\"hi\",\"max_output_tokens\":\"ten\"}",
        "{\"input\":\"hi\",\"temperature\":\"hot\"}",
        "{\"input\":\"hi\",\"stream\":\"yes\"}",
        "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}",
        "{\"input\":\"hi\",\"reasoning\":\"high\"}",
        "{\"input\":\"hi\",\"model\":3}",
        "{\"input\":[{\"type\":\"reasoning\",\"summary\":[]}]}",
        "{\"input\":\"hi\",\"max_output_tokens\":-5}",
    };
    int n_ok = 0;
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        resp r;
        CHECK(http(port, "POST", "/v1/responses", NULL, bodies[i], &r));
        cJSON *o = cJSON_Parse(r.body);
        const char *m = jstr(o, "error/message");
        const bool ok = r.status == 400 && is_error(&r, 400, "invalid_request_error") && strlen(m) > 8;
        if (!ok) printf("  %s -> %d %s\n", bodies[i], r.status, r.body);
        else if (i == 15) printf("  previous_response_id: %s\n", m);
        n_ok += ok;
        cJSON_Delete(o);
        resp_free(&r);
    }
    CHECK_EQ_INT(n_ok, (int)(sizeof bodies / sizeof *bodies));
    /* GET is not allowed; the route also answers without /v1 */
    resp r;
    CHECK(http(port, "GET", "/v1/responses", NULL, NULL, &r));
    const int st = r.status;
    resp_free(&r);
    CHECK_EQ_INT(st, 405);
    cJSON *o = post_json(port, "/responses", "{\"input\":\"hi\",\"max_output_tokens\":2}", 200);
    CHECK(o);
    const bool two = jnum(o, "usage/output_tokens") == 2;
    cJSON_Delete(o);
    CHECK(two);
}

TEST(models_by_id) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "GET", "/v1/models/" TINY_QWEN3, NULL, NULL, &r));
    cJSON *o = cJSON_Parse(r.body);
    const bool one = r.status == 200 && !strcmp(jstr(o, "id"), TINY_QWEN3) && !strcmp(jstr(o, "object"), "model") &&
                     jget(o, "meta/speculative");
    if (!one) printf("  %d %s\n", r.status, r.body);
    cJSON_Delete(o);
    resp_free(&r);
    CHECK(one);
    CHECK(http(port, "GET", "/models/" TINY_QWEN3, NULL, NULL, &r));
    const int st_short = r.status;
    resp_free(&r);
    CHECK_EQ_INT(st_short, 200);
    CHECK(http(port, "GET", "/v1/models/gpt-4o", NULL, NULL, &r));
    const bool nf = is_error(&r, 404, "not_found_error") && strstr(r.body, "gpt-4o");
    resp_free(&r);
    CHECK(nf);
    CHECK(http(port, "POST", "/v1/models/" TINY_QWEN3, NULL, "{}", &r));
    const int st_post = r.status;
    resp_free(&r);
    CHECK_EQ_INT(st_post, 405);
}

/* ======================================================================== */
/* The converters without a model                                            */
/* ======================================================================== */

/* A chat completion with reasoning, text and two tool calls: reasoning, message and two
 * function_call items in that order with OpenAI's fields. */
TEST(from_chat_function_calls) {
    cJSON *chat = cJSON_Parse(
        "{\"id\":\"resp_AbC\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"message\":{\"role\":\"assistant\","
        "\"content\":\"Let me add.\",\"reasoning_content\":\"think\",\"tool_calls\":["
        "{\"id\":\"call_X1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1}\"}},"
        "{\"id\":\"call_X2\",\"type\":\"function\",\"function\":{\"name\":\"mul\",\"arguments\":\"{}\"}}]}}],"
        "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12,"
        "\"prompt_tokens_details\":{\"cached_tokens\":3}}}");
    CHECK(chat);
    cJSON *o = srv_responses_from_chat(chat);
    const bool ok = !strcmp(jstr(o, "status"), "completed") && cJSON_GetArraySize(jget(o, "output")) == 4 &&
                    !strcmp(jstr(o, "output/0/type"), "reasoning") && !strcmp(jstr(o, "output/0/id"), "rs_AbC") &&
                    !strcmp(jstr(o, "output/1/id"), "msg_AbC") && !strcmp(jstr(o, "output/1/content/0/text"), "Let me add.") &&
                    !strcmp(jstr(o, "output/2/type"), "function_call") && !strcmp(jstr(o, "output/2/id"), "fc_X1") &&
                    !strcmp(jstr(o, "output/2/call_id"), "call_X1") && !strcmp(jstr(o, "output/2/name"), "add") &&
                    !strcmp(jstr(o, "output/2/arguments"), "{\"a\":1}") && !strcmp(jstr(o, "output/3/name"), "mul") &&
                    jnum(o, "usage/input_tokens") == 7 && jnum(o, "usage/output_tokens") == 5 &&
                    jnum(o, "usage/total_tokens") == 12 && jnum(o, "usage/input_tokens_details/cached_tokens") == 3 &&
                    jnum(o, "created_at") == 1700000000;
    if (!ok) jprint("response", o);
    cJSON_Delete(o);
    CHECK(ok);
    /* only a tool call: no message item */
    chat = cJSON_Parse("{\"id\":\"resp_Q\",\"choices\":[{\"finish_reason\":\"tool_calls\",\"message\":{\"content\":null,"
                       "\"tool_calls\":[{\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}");
    o = srv_responses_from_chat(chat);
    const bool only = cJSON_GetArraySize(jget(o, "output")) == 1 && !strcmp(jstr(o, "output/0/type"), "function_call");
    cJSON_Delete(o);
    CHECK(only);
}

/* Chunks as http.c streams a tool-calling answer: text, then a whole call, then the finish
 * and usage chunks: the message closes before the function_call item, whose arguments come as
 * one delta; the final response lists both. */
TEST(stream_function_call_events) {
    static const char *const chunks[] = {
        "{\"id\":\"resp_S\",\"created\":5,\"model\":\"m\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}",
        "{\"id\":\"resp_S\",\"choices\":[{\"delta\":{\"content\":\"Sure\"}}]}",
        "{\"id\":\"resp_S\",\"choices\":[{\"delta\":{\"content\":\".\"}}]}",
        ("{\"id\":\"resp_S\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_Z\",\"type\":\"function\","
         "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2}\"}}]}}]}"),
        "{\"id\":\"resp_S\",\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        "{\"id\":\"resp_S\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6,\"total_tokens\":10}}",
        "{\"id\":\"resp_S\",\"choices\":[{\"delta\":{\"content\":\"after the end\"}}]}",
    };
    srv_resp_stream rs;
    srv_resp_stream_init(&rs);
    srv_strbuf out = {0};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) srv_resp_stream_chunk(&rs, cJSON_Parse(chunks[i]), &out);
    srv_resp_stream_free(&rs);
    CHECK(out.p);
    streamed s;
    memset(&s, 0, sizeof s);
    check_events(out.p, &s);
    static const char *const order[] = {"response.created", "response.in_progress", "response.output_item.added",
                                        "response.content_part.added", "response.output_text.delta",
                                        "response.output_text.delta", "response.output_text.done",
                                        "response.content_part.done", "response.output_item.done",
                                        "response.output_item.added", "response.function_call_arguments.delta",
                                        "response.function_call_arguments.done", "response.output_item.done",
                                        "response.completed"};
    /* check_events consumed the buffer: rebuild the type sequence from a second run */
    srv_resp_stream_init(&rs);
    srv_strbuf out2 = {0};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) srv_resp_stream_chunk(&rs, cJSON_Parse(chunks[i]), &out2);
    srv_resp_stream_free(&rs);
    int k = 0;
    bool in_order = true;
    for (char *p = out2.p; p && (p = strstr(p, "event: ")); p += 7, k++)
        in_order = in_order && k < (int)(sizeof order / sizeof *order) &&
                   !strncmp(p + 7, order[k], strlen(order[k])) && p[7 + strlen(order[k])] == '\n';
    const bool final_ok = s.final && !strcmp(resp_text(s.final), "Sure.") &&
                          !strcmp(jstr(item_of(s.final, "function_call"), "arguments"), "{\"a\":2}") &&
                          !strcmp(jstr(item_of(s.final, "function_call"), "call_id"), "call_Z") &&
                          jnum(s.final, "usage/total_tokens") == 10 && !strcmp(jstr(s.final, "status"), "completed");
    if (!s.ok || !in_order || !final_ok) printf("  %s\n  %s\n", s.why, out2.p);
    cJSON_Delete(s.final);
    srv_strbuf_free(&out);
    srv_strbuf_free(&out2);
    CHECK(s.ok);
    CHECK(!strcmp(s.text, "Sure."));
    CHECK_EQ_INT(s.n_calls_done, 1);
    CHECK(in_order);
    CHECK_EQ_INT(k, (int)(sizeof order / sizeof *order));
    CHECK(final_ok);
}

/* The request conversion: consecutive assistant items form one assistant turn; reasoning
 * items become its reasoning_content; max_output_tokens replaces max_tokens. */
TEST(request_conversion) {
    const char *body = "{\"input\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"user\",\"content\":\"u\"},"
                       "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"r\"}]},"
                       "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"a\"}]},"
                       "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
                       "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":[{\"type\":\"input_text\",\"text\":\"o\"}]}],"
                       "\"max_output_tokens\":9,\"max_tokens\":100,\"top_k\":3}";
    int code = -1;
    char msg[256] = "";
    char *chat = srv_responses_to_chat(body, strlen(body), &code, msg, sizeof msg);
    CHECK_MSG(chat, "%d %s", code, msg);
    cJSON *o = cJSON_Parse(chat);
    const bool ok = cJSON_GetArraySize(jget(o, "messages")) == 4 && !strcmp(jstr(o, "messages/0/role"), "developer") &&
                    !strcmp(jstr(o, "messages/2/role"), "assistant") &&
                    !strcmp(jstr(o, "messages/2/reasoning_content"), "r") &&
                    !strcmp(jstr(o, "messages/2/content/0/text"), "a") &&
                    !strcmp(jstr(o, "messages/2/tool_calls/0/function/name"), "f") &&
                    !strcmp(jstr(o, "messages/3/role"), "tool") && !strcmp(jstr(o, "messages/3/tool_call_id"), "c1") &&
                    jnum(o, "max_tokens") == 9 && jnum(o, "top_k") == 3 && !jget(o, "input");
    if (!ok) printf("  %s\n", chat);
    cJSON_Delete(o);
    free(chat);
    CHECK(ok);
    srv_request r;
    CHECK_EQ_INT(srv_parse_responses(&r, body, strlen(body), msg, sizeof msg), 0);
    const bool parsed = r.n_msgs == 4 && r.msgs[0].role == SPEX_CHAT_SYSTEM && r.msgs[2].n_tool_calls == 1 &&
                        r.n_predict == 9 && r.msgs[2].reasoning && !strcmp(r.msgs[2].reasoning, "r");
    srv_request_free(&r);
    CHECK(parsed);
}

/* Last: the shared server stops cleanly. */
TEST(server_stops_clean) {
    if (!g_srv.started) SKIP("no server was started (filtered run)");
    bool clean;
    CHECK_EQ_INT(shared_server_stop(&g_srv, &clean), 0);
    CHECK(clean);
}

TEST_MAIN()
