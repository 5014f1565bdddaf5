/*
 * test_chat.c — the built-in chat templates (src/tok/chat.c) against hand-written renders.
 *
 * The expected strings were written from the Jinja templates' rules (targets.md §13) and
 * cross-checked by rendering the same messages with Python's jinja2 on the real Qwen3 template
 * (shared/data/qwen3-tokenizer/tokenizer_config.json) and on the Qwen3.5 template text; they
 * are literals here so the test needs neither. Detection runs on the real Qwen3 template text
 * when shared data is present (SKIP otherwise).
 */
#include "spex.h"
#include "test.h"
#include "tok/api.h"

#include <cjson/cJSON.h>

#define U(c) {.role = SPEX_CHAT_USER, .content = c}
#define S(c) {.role = SPEX_CHAT_SYSTEM, .content = c}
#define A(c) {.role = SPEX_CHAT_ASSISTANT, .content = c}
#define T(c) {.role = SPEX_CHAT_TOOL, .content = c}
/* An assistant message with reasoning_content and tool calls. */
#define AR(c, r) {SPEX_CHAT_ASSISTANT, c, r, NULL, 0}
#define N(a) (sizeof(a) / sizeof((a)[0]))

static char g_buf[8192];

/* Renders and compares; prints both on mismatch. Returns 1 if equal. */
static int render_eq(spex_chat_template t, const spex_chat_msg *m, size_t n, bool gen, bool think,
                     const char *want) {
    size_t len = 0;
    spex_error e = {0};
    spex_status st = spex_chat_apply(t, m, n, gen, think, g_buf, sizeof g_buf, &len, &e);
    if (st != SPEX_OK) {
        printf("  apply -> %s: %s\n", spex_status_str(st), e.msg);
        return 0;
    }
    if (len != strlen(want) || strcmp(g_buf, want) != 0) {
        printf("  got  [%s]\n  want [%s]\n", g_buf, want);
        return 0;
    }
    return 1;
}

/* ---- Qwen3 ------------------------------------------------------------------------------ */

TEST(qwen3_single_user) {
    spex_chat_msg m[] = {U("Hello, who are you?")};
    /* targets.md §13.1's token-level example, as text. */
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, true,
                    "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(qwen3_system_thinking_off) {
    spex_chat_msg m[] = {S("You are a helpful assistant."), U("Hi")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, false,
                    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(qwen3_no_generation_prompt) {
    spex_chat_msg m[] = {S("You are a helpful assistant."), U("Hi")};
    const char *want = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                       "<|im_start|>user\nHi<|im_end|>\n";
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), false, true, want));
    /* enable_thinking only touches the generation prompt. */
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), false, false, want));
}

/* The 3-message conversation: the earlier assistant turn's reasoning is dropped
 * (it is before the last user query). */
TEST(qwen3_three_turns_thinking_on_off) {
    spex_chat_msg m[] = {U("What is 2+2?"), A("<think>\nAdd the numbers.\n</think>\n\n2+2 = 4."), U("And 3+3?")};
    const char *hist = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                       "<|im_start|>assistant\n2+2 = 4.<|im_end|>\n"
                       "<|im_start|>user\nAnd 3+3?<|im_end|>\n";
    char want[512];
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n", hist);
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, true, want));
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n\n</think>\n\n", hist);
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, false, want));
}

TEST(qwen3_tool_messages_grouped) {
    spex_chat_msg m[] = {U("Weather in Paris and Rome?"), A("<think>\nI need the tool.\n</think>\n\nChecking both."),
                         T("{\"city\": \"Paris\", \"sky\": \"sunny\"}"), T("{\"city\": \"Rome\", \"sky\": \"rain\"}")};
    /* The assistant turn is after the last query and has reasoning: its think block stays. */
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, true,
                    "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nI need the tool.\n</think>\n\nChecking both.<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n{\"city\": \"Paris\", \"sky\": \"sunny\"}\n</tool_response>\n"
                    "<tool_response>\n{\"city\": \"Rome\", \"sky\": \"rain\"}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n"));
}

TEST(qwen3_assistant_after_last_query) {
    /* Last message, no reasoning: the template still writes an empty think block. */
    spex_chat_msg a[] = {U("Hi"), A("Hello!")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, a, N(a), false, true,
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n"));
    /* reasoning_content given: used as is, its '\n's stripped; content not split. */
    spex_chat_msg b[] = {U("Hi"), AR("Hello!", "\nThe user greets.\n")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, b, N(b), false, true,
                    "<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nThe user greets.\n</think>\n\nHello!<|im_end|>\n"));
    /* A user message that is only a tool response is not a query: both assistant turns are
     * after the last query (index 0) and keep their reasoning. */
    spex_chat_msg c[] = {U("Q"), A("<think>\nr1\n</think>\n\nA1"), U("<tool_response>\nok\n</tool_response>"),
                         A("<think>\nr2\n</think>\n\nA2")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, c, N(c), false, true,
                    "<|im_start|>user\nQ<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nr1\n</think>\n\nA1<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n"));
    /* Several </think>: content after the last, reasoning before the first. */
    spex_chat_msg d[] = {U("x"), A("<think>a</think>b</think>\n\nc")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, d, N(d), false, true,
                    "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\na\n</think>\n\nc<|im_end|>\n"));
}

TEST(qwen3_later_system_and_empty) {
    spex_chat_msg m[] = {U("a"), S("b")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), true, true,
                    "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n<|im_start|>assistant\n"));
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, NULL, 0, true, false, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    spex_chat_msg n[] = {U(NULL)};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, n, N(n), false, true, "<|im_start|>user\n<|im_end|>\n"));
}

/* ---- tools (Qwen3) ------------------------------------------------------------------------
 * Expected renders derived by hand from the Qwen3 template text: the `if tools` branch writes
 * "<|im_start|>system\n", the first system content + "\n\n" when there is one, the "# Tools"
 * literal up to "<tools>", "\n" + (tool | tojson) per tool, then the closing literal ending in
 * "</tool_call><|im_end|>\n"; the loop then skips the first system message (loop.first). tojson
 * is Python's json.dumps(ensure_ascii=False): ", " / ": " separators, key order kept. The
 * literals were cross-checked with jinja2 on the real template (tojson = that json.dumps). */

#define TOOLS_HEAD "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" \
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL "\n</tools>\n\nFor each function call, return a json object with function name and arguments " \
                   "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "   \
                   "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

static const char *const k_weather_tool =
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}";
#define WEATHER_TOJSON                                                                                          \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", " \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "               \
    "\"required\": [\"city\"]}}}"

static int render_tools_eq(spex_chat_template t, const spex_chat_msg *m, size_t n, const char *const *tools,
                           size_t n_tools, bool gen, bool think, const char *want) {
    size_t len = 0;
    spex_error e = {0};
    spex_status st = spex_chat_apply_tools(t, m, n, tools, n_tools, gen, think, g_buf, sizeof g_buf, &len, &e);
    if (st != SPEX_OK) {
        printf("  apply -> %s: %s\n", spex_status_str(st), e.msg);
        return 0;
    }
    if (len != strlen(want) || strcmp(g_buf, want) != 0) {
        printf("  got  [%s]\n  want [%s]\n", g_buf, want);
        return 0;
    }
    return 1;
}

/* (a) system + tools + user. */
TEST(qwen3_tools_with_system) {
    spex_chat_msg m[] = {S("You are helpful."), U("Weather in Paris?")};
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), &k_weather_tool, 1, true, true,
                          "<|im_start|>system\nYou are helpful.\n\n" TOOLS_HEAD "\n" WEATHER_TOJSON TOOLS_TAIL
                          "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"));
    /* tools == 0 is the plain template. */
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), NULL, 0, true, true,
                          "<|im_start|>system\nYou are helpful.<|im_end|>\n"
                          "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"));
}

/* (b) tools without a system message; the second tool's text exercises tojson: whitespace
 * dropped, "\u00e9" and "\/" decoded, a control character and a quote re-escaped, integers as
 * written ("-0" as Python's int prints it), floats as Python's repr. */
TEST(qwen3_tools_without_system_tojson) {
    const char *tools[] = {k_weather_tool,
                           " { \"type\" : \"function\" , \"function\" : { \"name\" : \"caf\\u00e9\\/x\", "
                           "\"description\": \"a \\\"q\\\"\\u0001\\ttab \xe2\x82\xac \\ud83d\\ude00\", "
                           "\"n\": [1, -0, 1.50, 1e5, 2.5E-7, 1e16, 12345678901234567890, true, false, null, {}, []] } } "};
    spex_chat_msg m[] = {U("Hi")};
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), tools, 2, true, false,
                          "<|im_start|>system\n" TOOLS_HEAD "\n" WEATHER_TOJSON
                          "\n{\"type\": \"function\", \"function\": {\"name\": \"caf\xc3\xa9/x\", "
                          "\"description\": \"a \\\"q\\\"\\u0001\\ttab \xe2\x82\xac \xf0\x9f\x98\x80\", "
                          "\"n\": [1, 0, 1.5, 100000.0, 2.5e-07, 1e+16, 12345678901234567890, true, false, null, {}, []]}}"
                          TOOLS_TAIL "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    /* A tool that is not JSON is refused. */
    const char *badt[] = {"{\"type\": \"function\""};
    size_t len;
    spex_error e = {0};
    CHECK_EQ_INT(spex_chat_apply_tools(SPEX_CHAT_CHATML_QWEN3, m, N(m), badt, 1, true, true, g_buf, sizeof g_buf,
                                       &len, &e),
                 SPEX_ERR_INVALID_ARG);
}

/* (c) an assistant turn with two tool calls, two tool results, a new user turn. The assistant
 * turn is before the last query: header + content only; each call is preceded by "\n" except
 * the first when the content is empty; arguments go through tojson ({"city":"Paris"} ->
 * {"city": "Paris"}), text that is not JSON is printed as is. */
TEST(qwen3_assistant_tool_calls_then_results) {
    spex_chat_tool_call calls[] = {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_weather", "{ \"city\" : \"Rome\" }"}};
    spex_chat_msg m[] = {U("Weather in Paris and Rome?"),
                         {SPEX_CHAT_ASSISTANT, "", NULL, calls, 2},
                         T("{\"temp\": 21}"),
                         T("{\"temp\": 18}"),
                         U("Which is warmer?")};
    const char *calls_txt = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    char want[2048];
    snprintf(want, sizeof want,
             "<|im_start|>system\n" TOOLS_HEAD "\n" WEATHER_TOJSON TOOLS_TAIL
             "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
             "<|im_start|>assistant\n%s<|im_end|>\n"
             "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n"
             "<tool_response>\n{\"temp\": 18}\n</tool_response><|im_end|>\n"
             "<|im_start|>user\nWhich is warmer?<|im_end|>\n<|im_start|>assistant\n",
             calls_txt);
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN3, m, N(m), &k_weather_tool, 1, true, true, want));

    /* Content before the calls gets a "\n"; after the last query the think block comes first
     * (multi-step tool use); non-JSON arguments are printed verbatim. */
    spex_chat_tool_call c2[] = {{"f", "not json"}};
    spex_chat_msg m2[] = {U("Q"), {SPEX_CHAT_ASSISTANT, "<think>\nr\n</think>\n\nLet me check.", NULL, c2, 1},
                          T("ok")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN3, m2, N(m2), true, true,
                    "<|im_start|>user\nQ<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nr\n</think>\n\nLet me check.\n"
                    "<tool_call>\n{\"name\": \"f\", \"arguments\": not json}\n</tool_call><|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n"));
}

/* ---- Qwen3.5 ---------------------------------------------------------------------------- */

TEST(qwen35_trim_and_open_think) {
    /* |trim strips Unicode whitespace: U+00A0 (C2 A0) included. */
    spex_chat_msg m[] = {U("  Hello \xc2\xa0\n")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN35, m, N(m), true, true,
                    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n"));
}

TEST(qwen35_three_turns_thinking_off) {
    spex_chat_msg m[] = {S(" S "), U("What is 2+2?"), A("<think>\nAdd.\n</think>\n\n4"), U("And 3+3?")};
    const char *hist = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                       "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n";
    char want[512];
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n\n</think>\n\n", hist);
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN35, m, N(m), true, false, want));
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n", hist);
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN35, m, N(m), true, true, want));
}

TEST(qwen35_tools) {
    spex_chat_msg m[] = {U("Q"), AR("calling", " r "), T(" x "), T("y")};
    CHECK(render_eq(SPEX_CHAT_CHATML_QWEN35, m, N(m), true, true,
                    "<|im_start|>user\nQ<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nr\n</think>\n\ncalling<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\nx\n</tool_response>\n<tool_response>\ny\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n"));
}

/* Qwen3.5 with tools: the tools turn carries the (trimmed) system content after the
 * instructions; tool calls are XML (<function=...><parameter=...>), string values raw, others
 * tojson; the first call after non-empty content gets "\n\n". Hand-derived from the 3.6
 * template text (same family; not rendered with jinja2 here). */
#define TOOLS35_HEAD "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>"
#define TOOLS35_TAIL                                                                                            \
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"      \
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"   \
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple "     \
    "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow "  \
    "the specified format: an inner <function=...></function> block must be nested within "                    \
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional "    \
    "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "      \
    "there is no function call available, answer the question like normal with your current knowledge and do " \
    "not tell the user about function calls\n</IMPORTANT>"

TEST(qwen35_tools_and_calls) {
    spex_chat_tool_call calls[] = {{"get_weather", "{\"city\":\"Paris\",\"days\":2,\"opts\":{\"u\":\"C\"}}"},
                                   {"get_time", "{}"}};
    spex_chat_msg m[] = {S(" Be brief. "), U("Weather?"), {SPEX_CHAT_ASSISTANT, "Checking.", NULL, calls, 2},
                         T("sunny"), U("Thanks")};
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN35, m, N(m), &k_weather_tool, 1, true, true,
                          TOOLS35_HEAD "\n" WEATHER_TOJSON TOOLS35_TAIL "\n\nBe brief.<|im_end|>\n"
                          "<|im_start|>user\nWeather?<|im_end|>\n"
                          "<|im_start|>assistant\nChecking.\n\n<tool_call>\n<function=get_weather>\n"
                          "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                          "<parameter=opts>\n{\"u\": \"C\"}\n</parameter>\n</function>\n</tool_call>\n"
                          "<tool_call>\n<function=get_time>\n</function>\n</tool_call><|im_end|>\n"
                          "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
                          "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    /* No system message, empty content: no "\n\n" anywhere before the first call. */
    spex_chat_tool_call c1[] = {{"f", "{\"a\": \"x\\ny\"}"}};
    spex_chat_msg m2[] = {U("Q"), {SPEX_CHAT_ASSISTANT, "", NULL, c1, 1}};
    CHECK(render_tools_eq(SPEX_CHAT_CHATML_QWEN35, m2, N(m2), &k_weather_tool, 1, false, true,
                          TOOLS35_HEAD "\n" WEATHER_TOJSON TOOLS35_TAIL "<|im_end|>\n"
                          "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                          "<tool_call>\n<function=f>\n<parameter=a>\nx\ny\n</parameter>\n</function>\n</tool_call>"
                          "<|im_end|>\n"));
    /* Arguments that are not an object: the template's |items raises. */
    spex_chat_tool_call bad[] = {{"f", "[1]"}};
    spex_chat_msg m3[] = {U("Q"), {SPEX_CHAT_ASSISTANT, "", NULL, bad, 1}};
    size_t len;
    spex_error e = {0};
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN35, m3, N(m3), true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
}

TEST(qwen35_errors_where_template_raises) {
    size_t len;
    spex_error e = {0};
    spex_chat_msg nouser[] = {S("S")};
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN35, nouser, 1, true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "user query"));
    spex_chat_msg latesys[] = {U("a"), S("b")};
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN35, latesys, 2, true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN35, NULL, 0, true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
    spex_chat_msg badrole[] = {{.role = (spex_chat_role)7, .content = "x"}};
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, badrole, 1, true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_chat_apply((spex_chat_template)9, NULL, 0, true, true, g_buf, sizeof g_buf, &len, &e),
                 SPEX_ERR_INVALID_ARG);
}

/* ---- plain completion, buffer handling, names ------------------------------------------- */

TEST(none_concatenates) {
    spex_chat_msg m[] = {S("Once "), U("upon "), A("a time")};
    CHECK(render_eq(SPEX_CHAT_NONE, m, N(m), true, false, "Once upon a time"));
}

TEST(buffer_too_small) {
    spex_chat_msg m[] = {U("Hello, who are you?")};
    const char *want = "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n";
    size_t need = strlen(want), len = 0;
    spex_error e = {0};
    char small[16];
    memset(small, 'x', sizeof small);
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, m, 1, true, true, small, sizeof small, &len, &e),
                 SPEX_ERR_RANGE);
    CHECK_EQ_INT(len, need);
    CHECK(small[15] == '\0' && memcmp(small, want, 15) == 0);
    /* Size query with no buffer. */
    CHECK_EQ_INT(spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, m, 1, true, true, NULL, 0, &len, &e), SPEX_ERR_RANGE);
    CHECK_EQ_INT(len, need);
    /* Exactly length bytes is one short (no room for the NUL); length + 1 fits. */
    char *b = malloc(need + 1);
    CHECK(b);
    spex_status st = spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, m, 1, true, true, b, need, &len, &e);
    int ok1 = st == SPEX_ERR_RANGE;
    st = spex_chat_apply(SPEX_CHAT_CHATML_QWEN3, m, 1, true, true, b, need + 1, &len, &e);
    int ok2 = st == SPEX_OK && len == need && strcmp(b, want) == 0;
    free(b);
    CHECK(ok1);
    CHECK(ok2);
}

TEST(names) {
    spex_chat_template t;
    CHECK(spex_chat_template_from_name("chatml", &t) && t == SPEX_CHAT_CHATML_QWEN3);
    CHECK(spex_chat_template_from_name("qwen35", &t) && t == SPEX_CHAT_CHATML_QWEN35);
    CHECK(spex_chat_template_from_name("none", &t) && t == SPEX_CHAT_NONE);
    CHECK(!spex_chat_template_from_name("llama3", &t));
    CHECK(strcmp(spex_chat_template_name(SPEX_CHAT_CHATML_QWEN35), "chatml-qwen35") == 0);
    spex_chat_role r;
    CHECK(spex_chat_role_from_name("tool", &r) && r == SPEX_CHAT_TOOL);
    CHECK(!spex_chat_role_from_name("developer", &r));
}

/* ---- detection -------------------------------------------------------------------------- */

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

TEST(detect_real_qwen3_template) {
    const char *path = test_shared_path("data/qwen3-tokenizer/tokenizer_config.json");
    if (!path) SKIP("shared/data/qwen3-tokenizer/tokenizer_config.json absent");
    char *text = read_file(path);
    CHECK(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    CHECK(j);
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    int is_str = cJSON_IsString(tmpl);
    spex_chat_template t = SPEX_CHAT_NONE;
    bool warned = true;
    if (is_str) spex_chat_detect(tmpl->valuestring, false, &t, &warned);
    cJSON_Delete(j);
    CHECK(is_str);
    CHECK_EQ_INT(t, SPEX_CHAT_CHATML_QWEN3);
    CHECK(!warned);
}

TEST(detect_fallbacks) {
    spex_chat_template t;
    bool w;
    /* Garbage: ChatML (Qwen3 rules) with a warning if the vocab has <|im_start|>, else none. */
    spex_chat_detect("{{ bos_token }}{% for m in messages %}[INST] {{ m.content }}{% endfor %}", true, &t, &w);
    CHECK(t == SPEX_CHAT_CHATML_QWEN3 && w);
    spex_chat_detect("\x01\xff garbage", false, &t, &w);
    CHECK(t == SPEX_CHAT_NONE && w);
    /* No template at all. */
    spex_chat_detect(NULL, false, &t, &w);
    CHECK(t == SPEX_CHAT_NONE && !w);
    spex_chat_detect("", true, &t, &w);
    CHECK(t == SPEX_CHAT_CHATML_QWEN3 && w);
    /* A plain ChatML template (Qwen2.5 style) is not Qwen3's: ChatML with a warning. */
    spex_chat_detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", false, &t, &w);
    CHECK(t == SPEX_CHAT_CHATML_QWEN3 && w);
}

TEST(detect_qwen35_shape) {
    /* The substrings that tell the Qwen3.5 template from Qwen3's (its render_content macro). */
    const char *q35 = "{%- macro render_content(content, do_vision_count, is_system_content=false) %}"
                      "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
                      "{%- if message.reasoning_content is string %}{{- '<|im_start|>' + message.role }}"
                      "{{- '\\n<tool_response>\\n' }}{{- '<think>\\n' }}";
    spex_chat_template t;
    bool w = true;
    spex_chat_detect(q35, false, &t, &w);
    CHECK(t == SPEX_CHAT_CHATML_QWEN35 && !w);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{%%- if preserve_thinking is undefined %%}", q35);
    spex_chat_detect(buf, false, &t, &w);
    CHECK(t == SPEX_CHAT_CHATML_QWEN35 && w);
}

TEST_MAIN()
