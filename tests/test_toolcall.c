/*
 * test_toolcall.c — the tool-call splitter of `spex serve` (src/server/toolcall.c).
 *
 * Each case states a generated text, the content the client must see and the calls; every
 * text is also fed split in two at every byte position and one byte at a time, and the
 * result must not change (streaming equals non-streaming), and no prefix of the text may
 * release content that the whole text does not start with (no partial tag ever leaks).
 */
#include "server/server.h"
#include "test.h"
#include "spec/api.h"

#include <stdlib.h>
#include <string.h>

typedef struct result {
    srv_strbuf content;
    srv_toolparse p;
} result;

static void run_pieces(result *r, const char *const *pieces, size_t n) {
    memset(&r->content, 0, sizeof r->content);
    srv_toolparse_init(&r->p);
    for (size_t i = 0; i < n; i++) srv_toolparse_feed(&r->p, pieces[i], strlen(pieces[i]), &r->content);
    srv_toolparse_finish(&r->p, &r->content);
}

static void result_free(result *r) {
    srv_strbuf_free(&r->content);
    srv_toolparse_free(&r->p);
}

static const char *cstr(const srv_strbuf *b) { return b->p ? b->p : ""; }

/* calls: "name\targs\n" per call. */
static void calls_str(const srv_toolparse *p, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < p->n_calls && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s\t%s\n", p->calls[i].name, p->calls[i].arguments);
}

/* One-shot, two pieces at every split, byte by byte: all equal to (want_content, want_calls);
 * the content released after each byte is a prefix of the final content. */
static int check_text(const char *text, const char *want_content, const char *want_calls) {
    char got[4096];
    result r;
    const char *one[] = {text};
    run_pieces(&r, one, 1);
    calls_str(&r.p, got, sizeof got);
    int ok = !strcmp(cstr(&r.content), want_content) && !strcmp(got, want_calls) && !r.p.oom;
    if (!ok) printf("  text [%s]\n  content [%s] want [%s]\n  calls [%s] want [%s]\n", text, cstr(&r.content),
                    want_content, got, want_calls);
    result_free(&r);
    size_t n = strlen(text);
    char *a = malloc(n + 1), *b = malloc(n + 1);
    for (size_t k = 0; ok && k <= n; k++) {
        memcpy(a, text, k), a[k] = 0;
        memcpy(b, text + k, n - k + 1);
        const char *two[] = {a, b};
        run_pieces(&r, two, 2);
        calls_str(&r.p, got, sizeof got);
        if (strcmp(cstr(&r.content), want_content) || strcmp(got, want_calls)) {
            printf("  split at %zu: content [%s] calls [%s]\n", k, cstr(&r.content), got);
            ok = 0;
        }
        result_free(&r);
    }
    /* byte by byte, checking what is released before finish */
    srv_strbuf out = {0};
    srv_toolparse p;
    srv_toolparse_init(&p);
    for (size_t i = 0; ok && i < n; i++) {
        srv_toolparse_feed(&p, text + i, 1, &out);
        if (out.len > strlen(want_content) || memcmp(cstr(&out), want_content, out.len)) {
            printf("  after %zu bytes released [%s], not a prefix of [%s]\n", i + 1, cstr(&out), want_content);
            ok = 0;
        }
    }
    srv_toolparse_finish(&p, &out);
    calls_str(&p, got, sizeof got);
    if (ok && (strcmp(cstr(&out), want_content) || strcmp(got, want_calls))) {
        printf("  byte by byte: content [%s] calls [%s]\n", cstr(&out), got);
        ok = 0;
    }
    srv_toolparse_free(&p);
    srv_strbuf_free(&out);
    free(a);
    free(b);
    return ok;
}

#define CALL(name, args) name "\t" args "\n"

TEST(no_tool_calls) {
    CHECK(check_text("", "", ""));
    CHECK(check_text("Hello, world.\n", "Hello, world.\n", ""));
    CHECK(check_text("a < b and <tool is not a tag <tool_cal", "a < b and <tool is not a tag <tool_cal", ""));
}

TEST(one_call) {
    CHECK(check_text("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
                     CALL("get_weather", "{\"city\":\"Paris\"}")));
    /* arguments absent / null -> {}; a string is passed on as is */
    CHECK(check_text("<tool_call>{\"name\":\"f\"}</tool_call>", "", CALL("f", "{}")));
    CHECK(check_text("<tool_call>{\"name\":\"f\",\"arguments\":null}</tool_call>", "", CALL("f", "{}")));
    CHECK(check_text("<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call>", "",
                     CALL("f", "{\"a\":1}")));
}

TEST(two_calls_blanks_between_dropped) {
    CHECK(check_text("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
                     "", CALL("a", "{\"x\":1}") CALL("b", "{}")));
}

TEST(text_before_and_after) {
    CHECK(check_text("Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nDone. ",
                     "Let me check.Done. ", CALL("a", "{}")));
    /* blanks not next to a call are kept */
    CHECK(check_text("x \n y\n", "x \n y\n", ""));
}

TEST(nested_braces_and_tag_inside_strings) {
    /* JSON bodies close at the first "</tool_call>" outside a string. */
    CHECK(check_text("<tool_call>{\"name\": \"w\", \"arguments\": {\"a\": {\"b\": [1, {\"c\": \"}\"}]}, "
                     "\"s\": \"x</tool_call>y\\\"</tool_call>\"}}</tool_call>tail",
                     "tail", CALL("w", "{\"a\":{\"b\":[1,{\"c\":\"}\"}]},\"s\":\"x</tool_call>y\\\"</tool_call>\"}")));
}

TEST(invalid_json_is_content) {
    const char *t = "A <tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call> B";
    CHECK(check_text(t, t, ""));
    /* valid JSON but not a call */
    const char *t2 = "<tool_call>{\"arguments\": {}}</tool_call>";
    CHECK(check_text(t2, t2, ""));
    const char *t3 = "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>";
    CHECK(check_text(t3, t3, ""));
    /* an invalid block then a valid one */
    CHECK(check_text("<tool_call>nope</tool_call>\n<tool_call>{\"name\":\"ok\"}</tool_call>", "<tool_call>nope</tool_call>",
                     CALL("ok", "{}")));
}

TEST(unclosed_block_is_content) {
    const char *t = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n";
    CHECK(check_text(t, t, ""));
    /* an unclosed string swallows the closing tag: still content at the end */
    const char *t2 = "<tool_call>{\"name\": \"a</tool_call>";
    CHECK(check_text(t2, t2, ""));
    /* a partial opening tag at the end */
    CHECK(check_text("ok <tool_c", "ok <tool_c", ""));
}

TEST(xml_form_qwen35) {
    CHECK(check_text("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                     "<parameter=days>\n2\n</parameter>\n<parameter=opts>\n{\"u\": \"C\"}\n</parameter>\n"
                     "</function>\n</tool_call>",
                     "", CALL("get_weather", "{\"city\":\"Paris\",\"days\":2,\"opts\":{\"u\":\"C\"}}")));
    CHECK(check_text("<tool_call>\n<function=now>\n</function>\n</tool_call>", "", CALL("now", "{}")));
    const char *bad = "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>";
    CHECK(check_text(bad, bad, ""));
}

TEST(many_pieces_calls_appear_when_closed) {
    const char *pieces[] = {"Hi<", "tool", "_call>\n{\"name\": \"a\", ", "\"arguments\": {}}\n</tool", "_call>"};
    srv_strbuf out = {0};
    srv_toolparse p;
    srv_toolparse_init(&p);
    for (int i = 0; i < 5; i++) {
        srv_toolparse_feed(&p, pieces[i], strlen(pieces[i]), &out);
        CHECK_EQ_INT(p.n_calls, i == 4 ? 1 : 0);
        CHECK(!strcmp(cstr(&out), "Hi"));
    }
    srv_toolparse_finish(&p, &out);
    CHECK(!strcmp(cstr(&out), "Hi"));
    srv_toolparse_free(&p);
    srv_strbuf_free(&out);
}

TEST_MAIN()
