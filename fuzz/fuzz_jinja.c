/*
 * fuzz_jinja.c — libFuzzer target for the Jinja engine (src/tok/jinja*.c): arbitrary template
 * text through spex_jinja_parse, then spex_jinja_render and spex_chat_apply_jinja.
 *
 * Input: the template, optionally followed by a NUL byte and a JSON context. A template that
 * parses is rendered three ways: with the input's context (or {} when there is none), with a
 * fixed chat context (system / user / assistant with reasoning and a tool call / tool turns,
 * one tool), and through spex_chat_apply_jinja with the same messages as structs.
 *
 * Checked: no crash, leak, hang or sanitizer report (the engine's step, depth and size limits
 * keep each input's work bounded: see docs/chat-templates.md); a successful render's text is
 * NUL-terminated with the reported length and no NULL output; a failed one leaves *out NULL
 * and a one-line message starting "jinja: ".
 * Run: make fuzz && ./build-fuzz/fuzz_jinja -max_total_time=20 build-fuzz/corpus-jinja fuzz/corpus/jinja
 */
#include "spex.h"
#include "tok/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char chat_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi <b>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\", \"tool_calls\": [{\"type\": "
    "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void check(spex_status st, char *out, size_t n, const spex_error *e) {
    if (st == SPEX_OK) {
        if (!out || out[n] != '\0') abort();
    } else {
        if (out || strncmp(e->msg, "jinja: ", 7) != 0 || strchr(e->msg, '\n')) abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_n = nul ? (size_t)(nul - data) : size;
    const char *ctx = nul ? (const char *)nul + 1 : NULL;
    size_t ctx_n = nul ? size - src_n - 1 : 0;

    spex_jinja *t = NULL;
    spex_error e = {0};
    if (spex_jinja_parse(src, src_n, &t, &e) != SPEX_OK) {
        if (t || strncmp(e.msg, "jinja: ", 7) != 0) abort();
        return 0;
    }
    char *out = NULL;
    size_t n = 0;
    check(spex_jinja_render(t, ctx, ctx_n, &out, &n, &e), out, n, &e);
    out = NULL;
    check(spex_jinja_render(t, chat_ctx, sizeof chat_ctx - 1, &out, &n, &e), out, n, &e);

    spex_chat_tool_call call = {"f", "{\"a\": [1, 2.5, null, true]}"};
    spex_chat_msg msgs[] = {
        {SPEX_CHAT_SYSTEM, "Be brief.", NULL, NULL, 0},
        {SPEX_CHAT_USER, "Hi <b>", NULL, NULL, 0},
        {SPEX_CHAT_ASSISTANT, "", "think", &call, 1},
        {SPEX_CHAT_TOOL, "42", NULL, NULL, 0},
    };
    const char *tools[] = {"{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"};
    spex_jinja_chat o = {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>"};
    out = NULL;
    check(spex_chat_apply_jinja(t, msgs, 4, tools, 1, &o, &out, &n, &e), out, n, &e);
    spex_jinja_free(t);
    return 0;
}
