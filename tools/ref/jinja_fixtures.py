#!/usr/bin/python3
"""jinja_fixtures.py — the expected renders of tests/test_jinja.c, made by Python's jinja2.

What it is: an independent reference for spex's Jinja engine (src/tok/jinja*.c). It renders
the templates of tests/data/jinja/*.jinja (written for spex's tests in the styles of other
model families) and the real Qwen3 template (../shared/data/qwen3-tokenizer/
tokenizer_config.json, read at run time and never copied into the repository) over the
message sets below, and writes

    tests/data/jinja/cases.json     the contexts: [{"name", "ctx"}], ctx as the template sees it
    tests/data/jinja/expected.json  {template: {case: {"out": text} or {"error": message}}}

The environment is the one transformers builds for chat templates
(transformers.utils.chat_template_utils._compile_jinja_template, which llama.cpp's --jinja and
vLLM follow): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[jinja2.ext.loopcontrols]), tojson replaced by json.dumps(x, ensure_ascii=False,
indent=indent, separators=separators, sort_keys=sort_keys), raise_exception(msg) raising a
TemplateError with msg. tools is None when a request has none, as transformers passes it.

Run from the repository root with Debian's Python (apt-get install python3-jinja2):

    /usr/bin/python3 tools/ref/jinja_fixtures.py
    make tests && build/tests/test_jinja

Running it twice gives the same bytes.
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "jinja")
QWEN3 = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer", "tokenizer_config.json")


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in \u00b0C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Z\u00fcrich\""},
        "days": {"type": "integer"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


def msg(role, content, **kw):
    m = {"role": role, "content": content}
    m.update(kw)
    return m


SYS = msg("system", "You are a helpful assistant.")

# name -> (messages, tools, add_generation_prompt, enable_thinking)
CASES = [
    ("user_only", [msg("user", "Hello, who are you?")], None, True, True),
    ("system_user", [SYS, msg("user", "Hi")], None, True, True),
    ("no_gen_prompt", [SYS, msg("user", "Hi")], None, False, True),
    ("thinking_off", [SYS, msg("user", "Hi")], None, True, False),
    ("multi_turn", [msg("user", "What is 2+2?"), msg("assistant", "2+2 = 4."),
                    msg("user", "And 3+3?")], None, True, True),
    ("think_in_content", [msg("user", "What is 2+2?"),
                          msg("assistant", "<think>\nAdd the numbers.\n</think>\n\n2+2 = 4."),
                          msg("user", "And 3+3?"),
                          msg("assistant", "<think>\nAgain.\n</think>\n\n3+3 = 6.")], None, False, True),
    ("reasoning_content", [SYS, msg("user", "Name a prime."),
                           msg("assistant", "7", reasoning_content="\nSmall primes: 2, 3, 5, 7.\n"),
                           msg("user", "Another one?"),
                           msg("assistant", "11", reasoning_content="Next after 7 is 11.")], None, True, True),
    ("tools_offered", [SYS, msg("user", "Weather in Z\u00fcrich?")], [WEATHER, SEARCH], True, True),
    ("tool_call_round", [msg("user", "Weather in Paris for 2 days?"),
                         msg("assistant", "", tool_calls=[call("get_weather", {"city": "Paris", "days": 2})]),
                         msg("tool", "{\"temp\": 21, \"sky\": \"clear\"}"),
                         msg("assistant", "It is 21 \u00b0C and clear."),
                         msg("user", "Thanks!")], [WEATHER], True, True),
    ("two_tool_calls", [SYS, msg("user", "Search cats, and weather in Oslo."),
                        msg("assistant", "Let me check.",
                            tool_calls=[call("search", {"q": "cats \"fluffy\"\n"}),
                                        call("get_weather", {"city": "Oslo", "flags": [True, None, 1.5]})]),
                        msg("tool", "Cats are small mammals that people keep as pets around the world."),
                        msg("tool", "-3 \u00b0C")], [WEATHER, SEARCH], True, False),
    ("assistant_first", [msg("assistant", "I speak first."), msg("user", "Odd.")], None, True, True),
    ("unicode_and_quotes", [msg("user", "Caf\u00e9 \u2615 'single' \"double\" back\\slash\ttab"),
                            msg("assistant", "  padded answer  "), msg("user", "\u65e5\u672c\u8a9e?")],
                           None, True, True),
]

# Cases the built-in Qwen3 renderer (spex_chat_apply, SPEX_CHAT_CHATML_QWEN3) supports: all
# whose roles and fields it has (tests/test_jinja.c compares them with the Jinja render).


def contexts():
    out = []
    for name, messages, tools, gen, think in CASES:
        out.append({"name": name, "ctx": {
            "messages": messages, "tools": tools, "add_generation_prompt": gen,
            "enable_thinking": think, "bos_token": "<s>", "eos_token": "</s>"}})
    return out


def render_all(env, source, cases):
    template = env.from_string(source)
    res = {}
    for c in cases:
        try:
            res[c["name"]] = {"out": template.render(**c["ctx"])}
        except jinja2.exceptions.TemplateError as e:
            res[c["name"]] = {"error": str(e)}
    return res


def main():
    env = environment()
    cases = contexts()
    expected = {}
    for fn in sorted(os.listdir(DATA)):
        if fn.endswith(".jinja"):
            with open(os.path.join(DATA, fn), encoding="utf-8") as f:
                expected[fn[:-6]] = render_all(env, f.read(), cases)
    if os.path.exists(QWEN3):
        with open(QWEN3, encoding="utf-8") as f:
            expected["qwen3"] = render_all(env, json.load(f)["chat_template"], cases)
    else:
        sys.exit("jinja_fixtures: %s is missing (the Qwen3 expectations need it)" % QWEN3)
    with open(os.path.join(DATA, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(DATA, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    n = sum(len(v) for v in expected.values())
    errs = sum(1 for v in expected.values() for r in v.values() if "error" in r)
    print("jinja_fixtures: %d templates x %d cases = %d renders (%d raise)" % (len(expected), len(cases), n, errs))


if __name__ == "__main__":
    main()
