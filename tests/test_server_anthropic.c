/*
 * test_server_anthropic.c — `spex serve`'s Anthropic Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) over raw HTTP, on the synthetic pair tiny-qwen3 +
 * tiny-qwen3.dflash2 (so the speculative path runs) with Qwen3's chat template forced (the
 * tiny model has none, and tools only render through a template).
 *
 * What it checks: a greedy /v1/messages answer equals the /v1/chat/completions answer to the
 * same conversation byte for byte (text and thinking blocks against content and
 * reasoning_content, stop_reason against finish_reason, output_tokens against
 * completion_tokens); usage.input_tokens + cache_read_input_tokens = count_tokens = /tokenize
 * of /apply-template's render of the chat twin, for system as a string and as text blocks and
 * for a tool_use / tool_result history with tools; stop_sequences end with stop_reason
 * stop_sequence and the sequence echoed, the text cut before it; max_tokens ends with
 * stop_reason max_tokens; a stream's events come in Anthropic's order (message_start, blocks
 * with increasing indexes each opened, filled and closed, message_delta, message_stop), each
 * `event:` line naming its data's type, and its deltas concatenate to the non-streaming
 * blocks; malformed bodies get 400 in Anthropic's error shape and the server stays up. The
 * response builders (anthropic_out.c) are also driven without a model: a task's text with
 * <think> and <tool_call> blocks, released a few bytes at a time, streams to exactly the
 * blocks of the final message, tool_use input included.
 * What it is not: a test of the chat template or the tool-call splitter (test_chat,
 * test_toolcall), nor of the official client (tests/node/anthropic_messages.mjs).
 */
#include "spex.h"
#include "server/server.h"
#include "test.h"
#include "srv_client.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"

static shared_server g_srv;

static int main_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "4096", "--chat-template",
                       "chatml-qwen3", "-t", "1", NULL};
    return shared_server_port(&g_srv, a);
}

#define REQUIRE_SERVER(port) REQUIRE_SERVER_FROM(port, main_port)

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static cJSON *jget(const cJSON *o, const char *path) {   /* "a/0/c": nested keys, array indexes */
    char key[128];
    while (o && *path) {
        size_t k = strcspn(path, "/");
        snprintf(key, sizeof key, "%.*s", (int)k, path);
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(key)) : cJSON_GetObjectItemCaseSensitive(o, key);
        path += k + (path[k] == '/');
    }
    return (cJSON *)o;
}
static double jnum(const cJSON *o, const char *path) {
    const cJSON *v = jget(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
static const char *jstr(const cJSON *o, const char *path) { return cJSON_GetStringValue(jget(o, path)); }

/* The concatenated "text" (or "thinking") of a message's content blocks of that type
 * (malloc'd; "" when none). */
static char *blocks_text(const cJSON *msg, const char *type) {
    size_t n = 0;
    char *s = calloc(1, 1);
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(msg, "content")) {
        if (strcmp(jstr(b, "type") ? jstr(b, "type") : "", type)) continue;
        const char *t = jstr(b, type);
        size_t k = t ? strlen(t) : 0;
        s = realloc(s, n + k + 1);
        memcpy(s + n, t, k);
        n += k;
        s[n] = 0;
    }
    return s;
}

/* The prompt tokens of a chat body: /tokenize (add_special) of its /apply-template render. */
static int chat_prompt_tokens(int port, const char *chat_body) {
    cJSON *at = post_json(port, "/apply-template", chat_body, 200);
    const char *prompt = jstr(at, "prompt");
    if (!prompt) return cJSON_Delete(at), -1;
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "content", prompt);
    cJSON_AddBoolToObject(b, "add_special", true);
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    cJSON_Delete(at);
    cJSON *o = post_json(port, "/tokenize", body, 200);
    free(body);
    int n = o ? cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens")) : -1;
    cJSON_Delete(o);
    return n;
}

static int count_tokens(int port, const char *anth_body) {
    cJSON *o = post_json(port, "/v1/messages/count_tokens", anth_body, 200);
    int n = o ? (int)jnum(o, "input_tokens") : -1;
    cJSON_Delete(o);
    return n;
}

/* One SSE event of a stream. */
typedef struct sse_ev {
    char name[64];
    cJSON *data;
} sse_ev;

/* Splits an Anthropic SSE body into events ("event: X\ndata: {...}"; comments skipped).
 * Returns the count (at most cap), or -1 when an event is malformed. */
static int parse_sse(char *body, sse_ev *ev, int cap) {
    int n = 0;
    for (char *p = body; p && *p && n < cap;) {
        char *end = strstr(p, "\n\n");
        if (end) *end = 0;
        if (*p != ':') {   /* ": ping" comments carry nothing */
            char *nl = strchr(p, '\n');
            if (strncmp(p, "event: ", 7) || !nl || strncmp(nl + 1, "data: ", 6)) return -1;
            snprintf(ev[n].name, sizeof ev[n].name, "%.*s", (int)(nl - p - 7), p + 7);
            if (!(ev[n].data = cJSON_Parse(nl + 7))) return -1;
            n++;
        }
        p = end ? end + 2 : NULL;
    }
    return n;
}

/* The same conversation as an Anthropic body and as its chat-completions twin. */
static void bodies(char *anth, char *chat, size_t cap, const char *system_anth, const char *system_chat,
                   const char *user, int max_tokens, const char *extra) {
    snprintf(anth, cap, "{\"model\":\"tiny\",\"max_tokens\":%d,\"temperature\":0,%s%s%s\"messages\":[{\"role\":\"user\","
                        "\"content\":%s}]%s}",
             max_tokens, system_anth ? "\"system\":" : "", system_anth ? system_anth : "", system_anth ? "," : "", user,
             extra);
    snprintf(chat, cap, "{\"max_tokens\":%d,\"temperature\":0,\"messages\":[%s%s%s{\"role\":\"user\",\"content\":%s}]%s}",
             max_tokens, system_chat ? "{\"role\":\"system\",\"content\":" : "", system_chat ? system_chat : "",
             system_chat ? "}," : "", user, extra);
}

/* ======================================================================== */
/* Tests                                                                     */
/* ======================================================================== */

/* /v1/messages and /v1/chat/completions answer the same conversation with the same text,
 * and the prompt is counted the same three ways. */
TEST(messages_equal_chat_completions) {
    REQUIRE_SERVER(port);
    static const char *const users[] = {"\"Tell me a story about a cat.\"",
                                        "[{\"type\":\"text\",\"text\":\"Count:\"},{\"type\":\"text\",\"text\":\"one two\"}]"};
    for (int k = 0; k < 2; k++) {
        char anth[2048], chat[2048];
        bodies(anth, chat, sizeof anth, "\"You are terse.\"", "\"You are terse.\"", users[k], 24, "");
        cJSON *a = post_json(port, "/v1/messages", anth, 200);
        cJSON *c = post_json(port, "/v1/chat/completions", chat, 200);
        CHECK(a && c);
        char *text = blocks_text(a, "text"), *thinking = blocks_text(a, "thinking");
        const char *want = jstr(c, "choices/0/message/content"), *want_r = jstr(c, "choices/0/message/reasoning_content");
        const char *finish = jstr(c, "choices/0/finish_reason");
        const char *stop = jstr(a, "stop_reason");
        printf("  case %d: %s, %.0f output tokens, text '%.40s'\n", k, stop ? stop : "?", jnum(a, "usage/output_tokens"),
               text);
        bool same = want && !strcmp(text, want) && !strcmp(thinking, want_r ? want_r : "");
        if (!same)
            printf("  messages '%s' / '%s'\n  chat     '%s' / '%s'\n", text, thinking, want ? want : "(null)",
                   want_r ? want_r : "");
        bool reason = stop && finish && !strcmp(stop, !strcmp(finish, "length") ? "max_tokens" : "end_turn");
        bool shape = jstr(a, "id") && !strncmp(jstr(a, "id"), "msg_", 4) && !strcmp(jstr(a, "type"), "message") &&
                     !strcmp(jstr(a, "role"), "assistant") && !strcmp(jstr(a, "model"), "tiny") &&
                     cJSON_IsNull(cJSON_GetObjectItem(a, "stop_sequence")) && jget(a, "timings/predicted_n");
        int out_a = (int)jnum(a, "usage/output_tokens"), out_c = (int)jnum(c, "usage/completion_tokens");
        int in_a = (int)(jnum(a, "usage/input_tokens") + jnum(a, "usage/cache_read_input_tokens"));
        int counted = count_tokens(port, anth), rendered = chat_prompt_tokens(port, chat);
        int in_c = (int)jnum(c, "usage/prompt_tokens");
        free(text);
        free(thinking);
        cJSON_Delete(a);
        cJSON_Delete(c);
        CHECK(same);
        CHECK(reason);
        CHECK(shape);
        CHECK_EQ_INT(out_a, out_c);
        CHECK(in_a > 0);
        CHECK_EQ_INT(in_a, counted);
        CHECK_EQ_INT(counted, rendered);
        CHECK_EQ_INT(in_c, rendered);
    }
}

/* system as text blocks is the concatenation of their texts: the same prompt and answer as
 * the string. */
TEST(system_as_blocks) {
    REQUIRE_SERVER(port);
    char a1[2048], a2[2048], chat[2048];
    bodies(a1, chat, sizeof a1, "\"You are terse.\"", "\"You are terse.\"", "\"Hello there\"", 12, "");
    bodies(a2, chat, sizeof a2, "[{\"type\":\"text\",\"text\":\"You are \"},{\"type\":\"text\",\"text\":\"terse.\"}]",
           "\"You are terse.\"", "\"Hello there\"", 12, "");
    int n1 = count_tokens(port, a1), n2 = count_tokens(port, a2), nc = chat_prompt_tokens(port, chat);
    cJSON *r1 = post_json(port, "/v1/messages", a1, 200), *r2 = post_json(port, "/v1/messages", a2, 200);
    char *t1 = r1 ? blocks_text(r1, "text") : NULL, *t2 = r2 ? blocks_text(r2, "text") : NULL;
    bool same = t1 && t2 && !strcmp(t1, t2);
    free(t1);
    free(t2);
    cJSON_Delete(r1);
    cJSON_Delete(r2);
    /* without a system prompt the count is smaller: the system turn is really rendered */
    char a3[2048];
    bodies(a3, chat, sizeof a3, NULL, NULL, "\"Hello there\"", 12, "");
    int n3 = count_tokens(port, a3);
    printf("  %d tokens with the system prompt, %d without\n", n1, n3);
    CHECK(n1 > 0);
    CHECK_EQ_INT(n1, n2);
    CHECK_EQ_INT(n1, nc);
    CHECK(n3 > 0 && n3 < n1);
    CHECK(same);
}

/* A tool_use / tool_result history with tools renders exactly as its chat twin. */
TEST(tool_round_trip_renders) {
    REQUIRE_SERVER(port);
    const char *anth =
        "{\"model\":\"tiny\",\"max_tokens\":4,\"temperature\":0,"
        "\"tools\":[{\"name\":\"add\",\"description\":\"Adds two numbers\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}},\"required\":[\"a\",\"b\"]}}],"
        "\"tool_choice\":{\"type\":\"auto\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+3?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me add.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"add\",\"input\":{\"a\":2,\"b\":3}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
        "\"content\":[{\"type\":\"text\",\"text\":\"5\"}]},{\"type\":\"text\",\"text\":\"And 4+4?\"}]}]}";
    const char *chat =
        "{\"max_tokens\":4,\"temperature\":0,"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds two numbers\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}},"
        "\"required\":[\"a\",\"b\"]}}}],\"tool_choice\":\"auto\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+3?\"},"
        "{\"role\":\"assistant\",\"content\":\"Let me add.\",\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"5\"},"
        "{\"role\":\"user\",\"content\":\"And 4+4?\"}]}";
    cJSON *at = post_json(port, "/apply-template", chat, 200);
    const char *prompt = jstr(at, "prompt");
    bool rendered = prompt && strstr(prompt, "<tools>") && strstr(prompt, "<tool_call>") &&
                    strstr(prompt, "<tool_response>\n5\n</tool_response>");
    if (!rendered) printf("  render: %s\n", prompt ? prompt : "(none)");
    cJSON_Delete(at);
    int counted = count_tokens(port, anth), want = chat_prompt_tokens(port, chat);
    cJSON *a = post_json(port, "/v1/messages", anth, 200);
    int in_a = a ? (int)(jnum(a, "usage/input_tokens") + jnum(a, "usage/cache_read_input_tokens")) : -1;
    cJSON_Delete(a);
    /* tool_choice none: the tools are not rendered */
    char none[4096];
    snprintf(none, sizeof none, "%s", anth);
    char *p = strstr(none, "{\"type\":\"auto\"}");
    CHECK(p);
    memcpy(p, "{\"type\":\"none\"}", 15);
    int counted_none = count_tokens(port, none);
    printf("  %d prompt tokens (tools rendered), %d with tool_choice none\n", counted, counted_none);
    CHECK(rendered);
    CHECK(want > 0);
    CHECK_EQ_INT(counted, want);
    CHECK_EQ_INT(in_a, want);
    CHECK(counted_none > 0 && counted_none < counted);
}

/* stop_sequences: the text ends before the first occurrence, stop_reason stop_sequence;
 * max_tokens: stop_reason max_tokens with exactly that many tokens. */
TEST(stop_sequences_and_max_tokens) {
    REQUIRE_SERVER(port);
    char anth[2048], chat[2048];
    bodies(anth, chat, sizeof anth, NULL, NULL, "\"Write a long line.\"", 32, "");
    cJSON *a = post_json(port, "/v1/messages", anth, 200);
    CHECK(a);
    char *full = blocks_text(a, "text");
    int n_out = (int)jnum(a, "usage/output_tokens");
    cJSON_Delete(a);
    size_t len = strlen(full), k = len / 3;
    /* a stop sequence from the middle of the answer: 2 printable ASCII bytes */
    while (k + 2 < len && !(full[k] > 32 && full[k] < 127 && full[k + 1] > 32 && full[k + 1] < 127)) k++;
    printf("  %d tokens: '%.60s'\n", n_out, full);
    if (k + 2 >= len) {
        free(full);
        SKIP("the greedy answer has no two printable ASCII bytes past its first third");
    }
    char seq[3] = {full[k], full[k + 1], 0};
    size_t cut = (size_t)(strstr(full, seq) - full);
    char extra[128];
    snprintf(extra, sizeof extra, ",\"stop_sequences\":[\"%s\",\"zzzzzz\"]", seq);
    bool json_safe = !strchr(seq, '"') && !strchr(seq, '\\');
    if (!json_safe) seq[0] = seq[1] = 0;
    bodies(anth, chat, sizeof anth, NULL, NULL, "\"Write a long line.\"", 32, json_safe ? extra : "");
    a = post_json(port, "/v1/messages", anth, 200);
    char *cut_text = a ? blocks_text(a, "text") : NULL;
    const char *reason = jstr(a, "stop_reason"), *echo = jstr(a, "stop_sequence");
    printf("  stop '%s' at byte %zu: %s '%s'\n", seq, cut, reason ? reason : "?", cut_text ? cut_text : "");
    bool ok = !json_safe || (reason && !strcmp(reason, "stop_sequence") && echo && !strcmp(echo, seq) && cut_text &&
                             strlen(cut_text) == cut && !memcmp(cut_text, full, cut));
    free(cut_text);
    cJSON_Delete(a);
    /* max_tokens 3 of an answer that ran for more: max_tokens */
    bodies(anth, chat, sizeof anth, NULL, NULL, "\"Write a long line.\"", 3, "");
    a = post_json(port, "/v1/messages", anth, 200);
    const char *r3 = jstr(a, "stop_reason");
    bool max_ok = r3 && !strcmp(r3, "max_tokens") && jnum(a, "usage/output_tokens") == 3;
    char *t3 = a ? blocks_text(a, "text") : NULL;
    bool prefix = t3 && !strncmp(full, t3, strlen(t3));
    free(t3);
    cJSON_Delete(a);
    free(full);
    CHECK(json_safe);
    CHECK(ok);
    CHECK(n_out > 3);
    CHECK(max_ok);
    CHECK(prefix);
}

/* A stream: Anthropic's event order, and deltas that add up to the non-streaming message. */
TEST(stream_events_equal_message) {
    REQUIRE_SERVER(port);
    char anth[2048], chat[2048], santh[2100];
    bodies(anth, chat, sizeof anth, "\"You are terse.\"", "\"You are terse.\"", "\"Tell me about dogs.\"", 24, "");
    bodies(santh, chat, sizeof santh, "\"You are terse.\"", "\"You are terse.\"", "\"Tell me about dogs.\"", 24,
           ",\"stream\":true");
    cJSON *a = post_json(port, "/v1/messages", anth, 200);
    CHECK(a);
    char *text = blocks_text(a, "text"), *thinking = blocks_text(a, "thinking");
    char want_reason[32];
    snprintf(want_reason, sizeof want_reason, "%s", jstr(a, "stop_reason") ? jstr(a, "stop_reason") : "");
    int want_out = (int)jnum(a, "usage/output_tokens");
    cJSON_Delete(a);
    resp r;
    CHECK(http(port, "POST", "/v1/messages", NULL, santh, &r));
    bool sse = r.status == 200 && strstr(r.head, "text/event-stream");
    enum { CAP = 512 };
    static sse_ev ev[CAP];
    int n = parse_sse(r.body, ev, CAP);
    resp_free(&r);
    /* the order: message_start, ping, blocks (start, deltas, stop; indexes 0, 1, ...),
     * message_delta, message_stop; each event line names its data's type */
    bool order = n >= 4 && !strcmp(ev[0].name, "message_start") && !strcmp(ev[n - 1].name, "message_stop") &&
                 !strcmp(ev[n - 2].name, "message_delta");
    int open = -1, next = 0, bad = -1;
    char *stext = calloc(1, 1), *sthink = calloc(1, 1);
    for (int i = 0; i < n && bad < 0; i++) {
        const char *ty = jstr(ev[i].data, "type"), *nm = ev[i].name;
        if (!ty || strcmp(ty, nm)) bad = i;
        else if (!strcmp(nm, "content_block_start")) {
            if (open >= 0 || jnum(ev[i].data, "index") != next) bad = i;
            open = next++;
        } else if (!strcmp(nm, "content_block_delta")) {
            if (open < 0 || jnum(ev[i].data, "index") != open) bad = i;
            const char *dt = jstr(ev[i].data, "delta/type");
            char **dst = dt && !strcmp(dt, "text_delta") ? &stext : dt && !strcmp(dt, "thinking_delta") ? &sthink : NULL;
            const char *piece = dst == &stext ? jstr(ev[i].data, "delta/text") : jstr(ev[i].data, "delta/thinking");
            if (dst && piece) {
                size_t a0 = strlen(*dst), b0 = strlen(piece);
                *dst = realloc(*dst, a0 + b0 + 1);
                memcpy(*dst + a0, piece, b0 + 1);
            }
        } else if (!strcmp(nm, "content_block_stop")) {
            if (open < 0 || jnum(ev[i].data, "index") != open) bad = i;
            open = -1;
        } else if (strcmp(nm, "message_start") && strcmp(nm, "ping") && strcmp(nm, "message_delta") &&
                   strcmp(nm, "message_stop"))
            bad = i;
    }
    if (bad >= 0) {
        char *d = cJSON_PrintUnformatted(ev[bad].data);
        printf("  event %d out of order: %s %s\n", bad, ev[bad].name, d);
        free(d);
    }
    const cJSON *md = n >= 2 ? ev[n - 2].data : NULL;
    char sreason[32];
    snprintf(sreason, sizeof sreason, "%s", jstr(md, "delta/stop_reason") ? jstr(md, "delta/stop_reason") : "?");
    int sout = (int)jnum(md, "usage/output_tokens");
    bool start_ok = n > 0 && jstr(ev[0].data, "message/id") && !strncmp(jstr(ev[0].data, "message/id"), "msg_", 4) &&
                    cJSON_IsArray(jget(ev[0].data, "message/content")) && jnum(ev[0].data, "message/usage/input_tokens") > 0;
    bool timings = md && jget(md, "timings/predicted_n");
    printf("  %d events, %d blocks, text '%.40s'\n", n, next, stext);
    bool same = !strcmp(stext, text) && !strcmp(sthink, thinking);
    printf("  stop_reason %s (plain %s), output tokens %d (plain %d)\n", sreason, want_reason, sout,
           want_out);
    if (!same) printf("  stream '%s' / '%s'\n  plain  '%s' / '%s'\n", stext, sthink, text, thinking);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    free(stext);
    free(sthink);
    free(text);
    free(thinking);
    CHECK(sse);
    CHECK(n > 0);
    CHECK(order);
    CHECK_EQ_INT(bad, -1);
    CHECK_EQ_INT(open, -1);
    CHECK(start_ok);
    CHECK(same);
    CHECK(!strcmp(sreason, want_reason));
    CHECK_EQ_INT(sout, want_out);
    CHECK(timings);
}

/* Malformed bodies: 400 in Anthropic's error shape, never a crash. */
TEST(malformed_requests) {
    REQUIRE_SERVER(port);
    static const char *const bad[] = {
        "not json",
        "[1,2]",
        "{\"max_tokens\":8}",
        "{\"max_tokens\":8,\"messages\":[]}",
        "{\"max_tokens\":8,\"messages\":{}}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"system\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\"}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
        "{\"max_tokens\":\"8\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
        "\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"f\","
        "\"input\":{}}]}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
        "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"x\","
        "\"content\":[{\"type\":\"image\"}]}]}]}",
        "{\"max_tokens\":8,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"stop_sequences\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"stop_sequences\":[1],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"temperature\":\"hot\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tools\":{},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tools\":[{\"description\":\"no name\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tools\":[{\"name\":\"f\",\"input_schema\":[]}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],\"messages\":[{\"role\":"
        "\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"tool_choice\":{\"type\":\"tool\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":8,\"thinking\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
    };
    int n_bad = (int)(sizeof bad / sizeof *bad), n_ok = 0;
    for (int k = 0; k < n_bad; k++) {
        for (int ct = 0; ct < 2; ct++) {
            /* count_tokens ignores max_tokens: its type and range errors do not apply there */
            if (ct && strstr(bad[k], "\"max_tokens\":\"8\"")) continue;
            if (ct && strstr(bad[k], "\"max_tokens\":0")) continue;
            if (ct && (strstr(bad[k], "\"stream\"") || strstr(bad[k], "temperature"))) continue;
            resp r;
            CHECK(http(port, "POST", ct ? "/v1/messages/count_tokens" : "/v1/messages", NULL, bad[k], &r));
            cJSON *o = cJSON_Parse(r.body);
            const char *top = jstr(o, "type"), *et = jstr(o, "error/type"), *m = jstr(o, "error/message");
            bool ok = r.status == 400 && top && !strcmp(top, "error") && et && !strcmp(et, "invalid_request_error") &&
                      m && m[0];
            if (!ok) printf("  case %d (%s): %d %s\n", k, ct ? "count_tokens" : "messages", r.status, r.body);
            if (ok && k == 10 && !strstr(m, "multimodal")) ok = false, printf("  image: %s\n", m);
            n_ok += ok;
            cJSON_Delete(o);
            resp_free(&r);
            CHECK(ok);
        }
    }
    printf("  %d malformed requests answered 400\n", n_ok);
    /* a missing max_tokens is accepted (llama-server's default of 4096), as are metadata and
     * unknown fields; GET is 405 */
    cJSON *o = post_json(port, "/v1/messages",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"metadata\":{\"user_id\":\"u\"},"
                         "\"stop_sequences\":[\"a\",\"e\",\"i\",\"o\",\" \"],\"whatever\":1}",
                         200);
    CHECK(o);
    cJSON_Delete(o);
    resp r;
    CHECK(http(port, "GET", "/v1/messages", NULL, NULL, &r));
    int st = r.status;
    resp_free(&r);
    CHECK_EQ_INT(st, 405);
    /* a prompt past the slot's context: 400 with the top-level type of Anthropic's errors */
    size_t big = 40000;
    char *long_body = malloc(big + 200);
    int len = snprintf(long_body, 200, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (size_t i = 0; i < big / 6; i++) len += snprintf(long_body + len, 7, "zebra ");
    snprintf(long_body + len, 8, "\"}]}");
    CHECK(http(port, "POST", "/v1/messages", NULL, long_body, &r));
    free(long_body);
    cJSON *eo = cJSON_Parse(r.body);
    bool exceed = r.status == 400 && jstr(eo, "type") && !strcmp(jstr(eo, "type"), "error") &&
                  jstr(eo, "error/type") && !strcmp(jstr(eo, "error/type"), "exceed_context_size_error");
    if (!exceed) printf("  long prompt: %d %.200s\n", r.status, r.body);
    cJSON_Delete(eo);
    resp_free(&r);
    CHECK(exceed);
    CHECK(http(port, "GET", "/health", NULL, NULL, &r));
    st = r.status;
    resp_free(&r);
    CHECK_EQ_INT(st, 200);
}

/* ---- the response builders without a model ------------------------------ */

/* The task's text released in steps of `step` bytes: the stream's blocks (by type, deltas
 * concatenated; tool_use as name + input JSON) equal the final message's. */
static bool stream_equals_message(const char *text, bool tools, srv_reasoning rf, size_t step, cJSON **msg_out) {
    srv_task t;
    memset(&t, 0, sizeof t);
    t.text = (char *)text;
    t.len = strlen(text);
    t.finish = "stop";
    t.stop_word = -1;
    t.tm.n_prompt = 7;
    t.tm.predicted_n = 5;
    srv_anth_ctx x = {.id = "msg_test", .model = "m", .think_open = false, .tools = tools, .reasoning = rf};
    srv_anth_stream s;
    srv_anthropic_stream_init(&s);
    srv_strbuf out = {0};
    bool ended = false;
    for (size_t rel = 0; !ended; rel += step) {
        t.released = rel < t.len ? rel : t.len;
        t.done = rel >= t.len;
        ended = srv_anthropic_stream_step(&s, &x, &t, &out);
        if (!ended && t.done) break;
    }
    srv_anthropic_stream_free(&s);
    cJSON *m = srv_anthropic_message(&x, &t);
    /* rebuild the message's content from the events */
    static sse_ev ev[4096];
    int n = ended && out.p ? parse_sse(out.p, ev, 4096) : -1;
    cJSON *blocks = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const cJSON *d = ev[i].data;
        if (!strcmp(ev[i].name, "content_block_start")) {
            cJSON *b = cJSON_Duplicate(cJSON_GetObjectItem(d, "content_block"), true);
            cJSON_DeleteItemFromObject(b, "signature");
            if (cJSON_GetObjectItem(b, "input")) cJSON_ReplaceItemInObject(b, "input", cJSON_CreateString(""));
            cJSON_AddItemToArray(blocks, b);
        } else if (!strcmp(ev[i].name, "content_block_delta")) {
            cJSON *b = cJSON_GetArrayItem(blocks, (int)jnum(d, "index"));
            const char *dt = jstr(d, "delta/type");
            const char *key = !strcmp(dt, "text_delta") ? "text" : !strcmp(dt, "thinking_delta") ? "thinking"
                              : !strcmp(dt, "input_json_delta") ? "input" : NULL;
            const char *piece = !key ? NULL : jstr(d, !strcmp(key, "input") ? "delta/partial_json" : !strcmp(key, "text") ? "delta/text" : "delta/thinking");
            if (b && key && piece) {
                const char *had = jstr(b, key);
                char *cat = malloc(strlen(had ? had : "") + strlen(piece) + 1);
                strcpy(cat, had ? had : "");
                strcat(cat, piece);
                cJSON_ReplaceItemInObject(b, key, cJSON_CreateString(cat));
                free(cat);
            }
        }
    }
    /* the message's blocks with input printed and signatures dropped, for comparison */
    cJSON *want = cJSON_Duplicate(cJSON_GetObjectItem(m, "content"), true);
    cJSON *b;
    cJSON_ArrayForEach(b, want) {
        cJSON_DeleteItemFromObject(b, "signature");
        cJSON *in = cJSON_GetObjectItem(b, "input");
        if (in) {
            char *js = cJSON_PrintUnformatted(in);
            cJSON_ReplaceItemInObject(b, "input", cJSON_CreateString(js));
            free(js);
        }
    }
    const char *sr = n >= 2 ? jstr(ev[n - 2].data, "delta/stop_reason") : NULL;
    bool same = n > 0 && cJSON_Compare(blocks, want, true) && sr && !strcmp(sr, jstr(m, "stop_reason"));
    if (!same) {
        char *a = cJSON_PrintUnformatted(blocks), *w = cJSON_PrintUnformatted(want);
        printf("  step %zu: stream %s\n  message %s\n", step, a, w);
        free(a);
        free(w);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
    cJSON_Delete(blocks);
    cJSON_Delete(want);
    srv_strbuf_free(&out);
    *msg_out = m;
    return same;
}

TEST(stream_builder_equals_message_builder) {
    const char *text = "<think>\nI should add.\n</think>\n\nLet me add.\n<tool_call>\n"
                       "{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>";
    static const size_t steps[] = {1, 2, 3, 7, 1000};
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        cJSON *m = NULL;
        CHECK(stream_equals_message(text, true, SRV_REASONING_DEEPSEEK, steps[k], &m));
        if (k == 0) {
            /* thinking, text, tool_use with the arguments as input; stop_reason tool_use */
            const cJSON *c = cJSON_GetObjectItem(m, "content");
            char *s = cJSON_PrintUnformatted(m);
            printf("  %s\n", s);
            free(s);
            CHECK_EQ_INT(cJSON_GetArraySize(c), 3);
            CHECK(!strcmp(jstr(cJSON_GetArrayItem(c, 0), "thinking"), "I should add."));
            CHECK(!strcmp(jstr(cJSON_GetArrayItem(c, 1), "text"), "Let me add."));
            CHECK(!strcmp(jstr(cJSON_GetArrayItem(c, 2), "name"), "add"));
            CHECK_EQ_INT((int)jnum(cJSON_GetArrayItem(c, 2), "input/b"), 3);
            CHECK(!strcmp(jstr(m, "stop_reason"), "tool_use"));
            CHECK_EQ_INT((int)jnum(m, "usage/input_tokens"), 7);
        }
        cJSON_Delete(m);
        /* without tools the tool-call text is plain text; with reasoning none, so is <think> */
        CHECK(stream_equals_message(text, false, SRV_REASONING_DEEPSEEK, steps[k], &m));
        CHECK(!strcmp(jstr(m, "stop_reason"), "end_turn"));
        cJSON_Delete(m);
        CHECK(stream_equals_message(text, false, SRV_REASONING_NONE, steps[k], &m));
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(m, "content")), 1);
        cJSON_Delete(m);
    }
}

/* stop_reason from the task's end (plain and streamed alike), and a failed task's stream ends
 * with an error event in Anthropic's shape. */
TEST(builder_stop_reasons_and_errors) {
    static const struct {
        const char *finish;
        int stop_word;
        int err;
        const char *want;
    } cases[] = {{"stop", -1, 0, "end_turn"}, {"length", -1, 0, "max_tokens"}, {"stop", 0, 0, "stop_sequence"},
                 {"stop", -1, 503, NULL}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        srv_task t;
        memset(&t, 0, sizeof t);
        t.text = (char *)"Hello";
        t.len = t.released = 5;
        t.done = true;
        t.finish = cases[k].finish;
        t.stop_word = cases[k].stop_word;
        t.n_stop = 1;
        snprintf(t.stop[0], SRV_MAX_STOP_LEN, "%s", "\n\n");
        t.err_code = cases[k].err;
        snprintf(t.err_msg, sizeof t.err_msg, "%s", "the server is shutting down");
        srv_anth_ctx x = {.id = "msg_t", .model = "m", .reasoning = SRV_REASONING_DEEPSEEK};
        srv_anth_stream st;
        srv_anthropic_stream_init(&st);
        srv_strbuf out = {0};
        bool ended = srv_anthropic_stream_step(&st, &x, &t, &out);
        srv_anthropic_stream_free(&st);
        static sse_ev ev[64];
        int n = out.p ? parse_sse(out.p, ev, 64) : -1;
        char last[64] = "", sr[32] = "", seq[16] = "", et[32] = "";
        if (n >= 2) {
            snprintf(last, sizeof last, "%s", ev[n - 1].name);
            snprintf(sr, sizeof sr, "%s", jstr(ev[n - 2].data, "delta/stop_reason") ? jstr(ev[n - 2].data, "delta/stop_reason") : "");
            snprintf(seq, sizeof seq, "%s", jstr(ev[n - 2].data, "delta/stop_sequence") ? jstr(ev[n - 2].data, "delta/stop_sequence") : "");
            snprintf(et, sizeof et, "%s", jstr(ev[n - 1].data, "error/type") ? jstr(ev[n - 1].data, "error/type") : "");
        }
        for (int i = 0; i < n; i++) cJSON_Delete(ev[i].data);
        srv_strbuf_free(&out);
        CHECK(ended);
        CHECK(n >= 2);
        if (!cases[k].want) {
            CHECK(!strcmp(last, "error"));
            CHECK(!strcmp(et, "overloaded_error"));
            continue;
        }
        cJSON *m = srv_anthropic_message(&x, &t);
        const char *msr = jstr(m, "stop_reason"), *mseq = jstr(m, "stop_sequence");
        bool plain = msr && !strcmp(msr, cases[k].want) &&
                     (cases[k].stop_word >= 0 ? mseq && !strcmp(mseq, "\n\n") : cJSON_IsNull(cJSON_GetObjectItem(m, "stop_sequence")));
        cJSON_Delete(m);
        CHECK(!strcmp(last, "message_stop"));
        CHECK(!strcmp(sr, cases[k].want));
        CHECK(!strcmp(seq, cases[k].stop_word >= 0 ? "\n\n" : ""));
        CHECK(plain);
    }
}

/* Last: the shared server stops cleanly. */
TEST(shutdown_clean) {
    if (!g_srv.started) SKIP("no server was started (filtered run)");
    bool clean = false;
    CHECK_EQ_INT(shared_server_stop(&g_srv, &clean), 0);
    CHECK(clean);
}

TEST_MAIN()
