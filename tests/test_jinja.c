/*
 * test_jinja.c — the Jinja engine (src/tok/jinja*.c) against Python's jinja2.
 *
 * Every expected text here came from jinja2 3.1 in the environment transformers builds for
 * chat templates (ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on,
 * loopcontrols, tojson = json.dumps(ensure_ascii=False), raise_exception):
 *  - the unit table below: short templates, their expected output pasted from jinja2;
 *  - error cases: jinja2 raises for each; spex must return a clean status and a one-line
 *    message with the line and column;
 *  - limits: hostile templates end with SPEX_ERR_RANGE, not a crash or a hang;
 *  - fixtures: tests/data/jinja/{cases,expected}.json, written by tools/ref/jinja_fixtures.py,
 *    renders of the tests/data/jinja templates and of the real Qwen3 template over a dozen message
 *    sets, through spex_jinja_render (the JSON context) and spex_chat_apply_jinja (the
 *    message structs); the Qwen3 renders also equal the built-in renderer's (spex_chat_apply).
 *    The Qwen3 template is read from ../shared (SKIP when absent), never stored here.
 */
#include "spex.h"
#include "test.h"
#include "tok/api.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Renders src with a JSON context (NULL: {}); *out malloc'd or NULL with the status. */
static spex_status render(const char *src, const char *ctx, char **out, spex_error *e) {
    spex_jinja *t = NULL;
    *out = NULL;
    spex_status st = spex_jinja_parse(src, strlen(src), &t, e);
    if (st != SPEX_OK) return st;
    size_t n = 0;
    st = spex_jinja_render(t, ctx, ctx ? strlen(ctx) : 0, out, &n, e);
    if (st == SPEX_OK && n != strlen(*out)) st = SPEX_ERR_INTERNAL;
    spex_jinja_free(t);
    return st;
}

/* ---- expressions, statements, filters, whitespace ---------------------------------------- */

static const struct {
    const char *tmpl, *ctx, *want;
} units[] = {
    {"{% set x = 'a' %}{% for i in [1,2] %}{% set x = x ~ i %}{{ x }}{% endfor %}|{{ x }}",
     NULL,
     "a1a2|a"},
    {"{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}",
     NULL,
     ""},
    {"{{ foo is defined }}{{ foo|length }}{{ foo ~ 'x' }}{{ 'x' in foo }}",
     NULL,
     "False0xFalse"},
    {"{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}",
     NULL,
     "[1, 'a', None, True, 1.5, {'k': 'v'}]"},
    {"{{ {'a': 1}.items()|list }}{{ (1,2) }}{{ (1,) }}",
     NULL,
     "[('a', 1)](1, 2)(1,)"},
    {"{{ none }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}|{{ 1e3 }}|{{ 0.1 + 0.2 }}",
     NULL,
     "None|3|-4|2|3.5|2.0|1024|1000.0|0.30000000000000004"},
    {"{{ 'abc'[::-1] }}{{ [1,2,3][1:] }}{{ 'x' * 3 }}{{ 'h\303\251llo'[1:3] }}{{ [1,2,3,4,5][::2] }}{{ [1,2,3][-2:] }}{{ 'abc'[-1] }}",
     NULL,
     "cba[2, 3]xxx\303\251l[1, 3, 5][2, 3]c"},
    {"{{ x.y }}",
     "{\"x\": {}}",
     ""},
    {"{{ x['y'] is defined }}",
     "{\"x\": {}}",
     "False"},
    {"{{ 'a\\nb\\x41\\u00e9\\d' }}",
     NULL,
     "a\nbA\303\251\\d"},
    {"  {% if true %}\n  x\n  {% endif %}\n  y  {#c#}\nz",
     NULL,
     "  x\n  y  z"},
    {"a {{- ' b ' -}} c\n{%- if 1 %} d {% endif -%}\n e",
     NULL,
     "a b c d e"},
    {"{{ 1 if false }}|{{ (1 if false) is defined }}",
     NULL,
     "|False"},
    {"{{ true + 1 }}{{ 1 == 1.0 }}{{ true == 1 }}",
     NULL,
     "2TrueTrue"},
    {"{{ [3,1]|tojson(indent=2) }}{{ {'a':[1,{}],'b':[]}|tojson(indent=2) }}",
     NULL,
     "[\n  3,\n  1\n]{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"},
    {"{{ '\303\251\"\\n'|tojson }}{{ 1.0|tojson }}{{ 1e20|tojson }}{{ 1e16 }}{{ 1e-5 }}{{ 123456789.123 }}{{ 0.0001 }}",
     NULL,
     "\"\303\251\\\"\\n\"1.01e+201e+161e-05123456789.1230.0001"},
    {"{% for k, v in {'a':1,'b':2}.items() %}{{k}}={{v}};{% endfor %}",
     NULL,
     "a=1;b=2;"},
    {"{% for x in [1,2,3,4] if x % 2 == 0 %}{{ loop.index }}/{{ loop.length }}{{ loop.last }} {% else %}none{% endfor %}",
     NULL,
     "1/2False 2/2True "},
    {"{% for x in [] %}{% else %}empty{% endfor %}",
     NULL,
     "empty"},
    {"{% for x in [1,2] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}",
     NULL,
     "|2;1|;"},
    {"{% macro m(a, b='d') %}[{{a}}{{b}}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}",
     NULL,
     "[1d][12]"},
    {"{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}",
     NULL,
     "4x"},
    {"{{ '  hi  '|trim }}|{{ 'Hello'|lower }}{{ 'hello world'|upper }}{{ 'hello world'|capitalize }}{{ 'hello world'|title }}",
     NULL,
     "hi|helloHELLO WORLDHello worldHello World"},
    {"{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ 'abc'|first }}{{ [1,2,3]|join(',') }}{{ [1,2]|join }}{{ undefined_x|default('d') }}{{ ''|default('e', true) }}{{ none|default('n') }}",
     NULL,
     "13a1,2,312deNone"},
    {"{{ users|map(attribute='name')|join(', ') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|list|length }}",
     "{\"users\": [{\"name\": \"a\", \"admin\": true}, {\"name\": \"b\", \"admin\": false}, {\"name\": \"c\"}]}",
     "a, b, c|['a']|2"},
    {"{{ 'a-b-c'.split('-') }}{{ ' a  b '.split() }}{{ 'a-b-c'.split('-', 1) }}{{ 'xxhixx'.strip('x') }}{{ '\\n\\nhi\\n'.lstrip('\\n') }}{{ 'hi\\n\\n'.rstrip() }}",
     NULL,
     "['a', 'b', 'c']['a', 'b']['a', 'b-c']hihi\nhi"},
    {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x','a')) }}{{ 'abcabc'.find('c') }}{{ 'abc'.find('z') }}{{ 'a,b'.replace(',', ';') }}{{ 'abc'.upper() }}",
     NULL,
     "TrueTrueTrue2-1a;bABC"},
    {"{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d|items|list }}",
     "{\"d\": {\"a\": 1, \"b\": \"x\"}}",
     "1None5['a', 'b'][1, 'x'][('a', 1), ('b', 'x')]"},
    {"{{ 42|string }}{{ '42'|int + 1 }}{{ 'x'|int }}{{ 3.7|int }}{{ [1,2]|list }}{{ 'ab'|list }}{{ 'a b'|replace(' ', '_') }}{{ 'x'|safe }}",
     NULL,
     "424303[1, 2]['a', 'b']a_bx"},
    {"{{ x is none }}{{ x is string }}{{ x is mapping }}{{ x is iterable }}{{ x is sequence }}{{ x is number }}{{ x is boolean }}{{ x is true }}{{ x is false }}{{ x is undefined }}",
     "{\"x\": null}",
     "TrueFalseFalseFalseFalseFalseFalseFalseFalseFalse"},
    {"{{ x is none }}{{ x is string }}{{ x is mapping }}{{ x is iterable }}{{ x is sequence }}{{ x is number }}{{ x is boolean }}{{ x is true }}{{ x is false }}{{ x is integer }}",
     "{\"x\": true}",
     "FalseFalseFalseFalseFalseTrueTrueTrueFalseFalse"},
    {"{{ x is mapping }}{{ x is iterable }}{{ x is sequence }}{{ y is string }}{{ y is sequence }}{{ z is number }}{{ z is float }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}",
     "{\"x\": {}, \"y\": \"s\", \"z\": 1.5}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' in 'abc' }}{{ 'z' not in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k': 1} }}{{ not true }}{{ true and 'x' }}{{ false or 'y' }}{{ none or 0 }}",
     NULL,
     "TrueFalseTrueTrueTrueTrueFalsexy0"},
    {"{%- for m in messages -%}\n{{ m.role }}: {{ m.content }}\n{% endfor -%}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
     "user: hi\nassistant: yo\n"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     NULL,
     "0134"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [1, 2] %}{{ c }}",
     NULL,
     "12[1, 2]"},
    {"{% set s %}inner {{ 1 + 1 }}{% endset %}[{{ s }}]",
     NULL,
     "[inner 2]"},
    {"{% raw %}{{ not parsed }}{% endraw %}",
     NULL,
     "{{ not parsed }}"},
    {"{{ \"it's\" }}{{ [\"it's\", 'say \"x\"', 'both \\' \"'] }}",
     NULL,
     "it's[\"it's\", 'say \"x\"', 'both \\' \"']"},
    {"{{ 'x' ~ 1 ~ none ~ true }}{{ 10 - 3 * 2 }}{{ (10 - 3) * 2 }}{{ -2 ** 2 }}{{ 2 * -1 }}",
     NULL,
     "x1NoneTrue4144-2"},
    {"{{ [1,2] + [3] }}{{ 'ab' * 2 }}{{ [0] * 3 }}",
     NULL,
     "[1, 2, 3]abab[0, 0, 0]"},
    {"{% if x %}a{% elif y %}b{% else %}c{% endif %}{% if not x and y %}d{% endif %}",
     "{\"y\": 1}",
     "bd"},
    {"{{ messages[0].content }}{{ messages[-1]['role'] }}{{ messages|length }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
     "hiassistant2"},
    {"{% macro render(m) -%}\n<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>\n{%- endmacro %}\n{% for m in messages %}{{ render(m) }}\n{% endfor %}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
     "<user>hi</user>\n<assistant>yo</assistant>\n"},
    {"line1\n    {%- if true %}\n        x\n    {%+ endif %}\nend",
     NULL,
     "line1        x\n    end"},
    {"{{ 'a' }}\n{% if true %}\n  {{ 'b' }}\n{% endif %}\n\n{# comment #}\n    {# indented comment #}\nc\n\n",
     NULL,
     "a\n  b\n\nc\n"},
    {"{{ 1/3 }} {{ 2.5|int }} {{ 10 / 4 }} {{ 1e100 }} {{ -0.0 }} {{ 3.0 }} {{ 1.5e-7 }} {{ 2**0.5 }} {{ 7 // 2.0 }} {{ -7 % 2.5 }}",
     NULL,
     "0.3333333333333333 2 2.5 1e+100 -0.0 3.0 1.5e-07 1.4142135623730951 3.0 0.5"},
    {"{{ none|string }}{{ true|string|lower }}{{ [none]|string }}{{ {'a': \"it's\"}|string }}",
     NULL,
     "Nonetrue[None]{'a': \"it's\"}"},
    {"{{ not x is defined }}{{ x is not defined }}{{ not x }}",
     NULL,
     "TrueTrueTrue"},
    {"{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index0 }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}",
     NULL,
     "0x1y1;0x1y2;"},
    {"{% for c in 'h\303\251llo' %}{{ loop.length }}{{ c }}{% endfor %}",
     NULL,
     "5h5\303\2515l5l5o"},
    {"x\n   {%- if true %}\n\t  {% if true %}y{% endif %}\n   {% endif %}\n\nz",
     NULL,
     "xy\nz"},
    {"  {%+ if true %}a{% endif +%}\nb",
     NULL,
     "  a\nb"},
    {"{% if true -%}\n   a\n{%- endif %}   b\n  {#- c #}   d",
     NULL,
     "a   b   d"},
    {"{{ 'a' ~ 'b' if true else 'c' }}{{ 1 + 2 if false else 3 * 4 }}",
     NULL,
     "ab12"},
    {"{{ [1, 2, 3] | length > 2 }}{{ 'abc' | length }}{{ {'a': 1} | length }}",
     NULL,
     "True31"},
    {"{{ x | tojson(indent=4) }}",
     "{\"x\": [{\"a\": [], \"b\": {}, \"c\": [1, {\"d\": \"\303\251\"}]}, \"s\", 1.5, true, null]}",
     "[\n    {\n        \"a\": [],\n        \"b\": {},\n        \"c\": [\n            1,\n            {\n                \"d\": \"\303\251\"\n            }\n        ]\n    },\n    \"s\",\n    1.5,\n    true,\n    null\n]"},
    {"{% set d = {'b': 2, 'a': 1} %}{{ d | tojson(sort_keys=true) }}{{ d | tojson }}{{ d|dictsortx if false }}",
     NULL,
     "{\"a\": 1, \"b\": 2}{\"b\": 2, \"a\": 1}"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | map(attribute='role') | join(',') }}{{ messages|rejectattr('role', 'in', ['user'])|map(attribute='content')|list }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
     "2user,assistant,user['b']"},
    {"{{ [3, 1, 2] | sort }}{{ ['b', 'a'] | sort(reverse=true) }}{{ [1, 2, 3] | reverse | list }}{{ 'abc' | reverse }}",
     NULL,
     "[1, 2, 3]['b', 'a'][3, 2, 1]cba"},
    {"{{ [-1, 2] | map('abs') | list }}{{ ['a', 'b'] | map('upper') | list }}{{ [1, 0, 2] | select | list }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('even') | list }}",
     NULL,
     "[1, 2]['A', 'B'][1, 2][1, 3][1, 3]"},
    {"{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}",
     NULL,
     "[0, 1, 2][1, 3, 5][5, 3, 1]"},
    {"{% set x %}\n  block {{ 1 }}\n{% endset %}[{{ x }}]",
     NULL,
     "[  block 1\n]"},
    {"{{ \"a\\tb\" }}|{{ 'a\\\\b' }}|{{ '\\'' }}|{{ \"\\\"\" }}|{{ '\\101\\x42\\u0043\\U00000044' }}",
     NULL,
     "a\tb|a\\b|'|\"|ABCD"},
    {"{% macro greet(name, greeting='Hello') -%}\n{{ greeting }}, {{ name }}!\n{%- endmacro %}\n{{ greet('A') }} {{ greet('B', greeting='Hi') }} {{ greet(name='C') }}",
     NULL,
     "Hello, A! Hi, B! Hello, C!"},
    {"{{ 'x' if none }}|{{ none if none else 'y' }}|{{ [] or 'empty' }}|{{ 0 and 1 }}",
     NULL,
     "|y|empty|0"},
    {"{{ 'Hello World'.lower().split(' ') }}{{ '  a b  '.strip().replace(' ', '-') }}{{ 'a.b.c'.split('.')[-1] }}{{ 'abc'.count('b') }}",
     NULL,
     "['hello', 'world']a-bc1"},
    {"{{ \"x\".join(['a', 'b']) }}{{ \", \".join(items) }}",
     "{\"items\": [\"p\", \"q\"]}",
     "axbp, q"},
    {"{{ 1 == true }}{{ 0 == false }}{{ 1.0 == 1 }}{{ 'a' == 'a' }}{{ [1] == [1] }}{{ {'a': 1} == {'a': 1} }}{{ none == none }}{{ u == none }}{{ u is none }}",
     NULL,
     "TrueTrueTrueTrueTrueTrueTrueFalseFalse"},
    {"{{ x[0] }}{{ x[-1] }}{{ x[5] is defined }}{{ x['k'] is defined }}{{ s[0] }}{{ s[-1] }}",
     "{\"x\": [1, 2, 3], \"s\": \"h\303\251llo\"}",
     "13FalseFalseho"},
    {"{{ d.a.b }}{{ d['a']['b'] }}{{ d.get('a').get('b') }}{{ d.a.c is defined }}",
     "{\"d\": {\"a\": {\"b\": \"deep\"}}}",
     "deepdeepdeepFalse"},
    {"{{ 5 > 3 and 2 < 1 or 'fallback' }}{{ not 1 == 2 }}{{ 1 + 2 * 3 - 4 / 2 }}{{ 2 ** 3 ** 2 }}{{ -3 ** 2 }}{{ (-3) ** 2 }}",
     NULL,
     "fallbackTrue5.06499"},
    {"{%- for m in messages %}{% if m.content is string %}S{% elif m.content is iterable %}I{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t1\"}, {\"type\": \"image\"}]}]}",
     "SIt1"},
    {"{{ tools is none }}{{ tools is not none }}{% if tools %}T{% endif %}",
     "{\"tools\": null}",
     "TrueFalse"},
    {"{{ x|default }}|{{ x|d('q') }}|{{ none|d('n', true) }}|{{ false|default('f', boolean=true) }}",
     NULL,
     "|q|n|f"},
    {"{{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }}",
     NULL,
     "{{ }} {'a': {'b': 1}}"},
    {"{{ 1 }}{# multi\nline comment #}{{ 2 }}",
     NULL,
     "12"},
    {"{{ 'ab' in ['ab', 'c'] }}{{ 'b' in 'abc' and 'z' not in 'abc' }}{{ 'k' in {'k': 1} }}{{ 1 in {'k': 1} }}",
     NULL,
     "TrueTrueTrueFalse"},
    {"{{ \"%s\" }}{{ 'a' + 'b' }}{{ 'a' ~ 1.0 }}{{ 1 ~ 2 }}",
     NULL,
     "%saba1.012"},
    {"{{ x.items()|list }}{% for k in x %}{{ k }}{% endfor %}{{ x.values()|list|sum if false }}{{ x|length }}",
     "{\"x\": {\"z\": 1, \"a\": 2}}",
     "[('z', 1), ('a', 2)]za2"},
    {"{% for i in range(5) if i is odd %}{{ i }}{{ loop.last }}{% else %}none{% endfor %}|{% for i in range(5) if i > 10 %}{{ i }}{% else %}none{% endfor %}",
     NULL,
     "1False3True|none"},
    {"{{ 'abcdef'[1:4] }}{{ 'abcdef'[:2] }}{{ 'abcdef'[4:] }}{{ 'abcdef'[-3:-1] }}{{ 'abcdef'[::3] }}{{ [1,2,3,4][3:1:-1] }}{{ [1,2,3][10:] }}",
     NULL,
     "bcdabefdead[4, 3][]"},
    {"{{ \"tab\\there\"|trim }}{{ '\\u3000x\\u00a0'|trim }}{{ 'xxaxx'|trim('x') }}",
     NULL,
     "tab\therexa"},
    {"{{ 'a  b'.split(' ') }}{{ 'a b c'.split(None, 1) }}{{ ''.split() }}{{ ''.split(',') }}{{ 'a,'.split(',') }}",
     NULL,
     "['a', '', 'b']['a', 'b c'][]['']['a', '']"},
    {"{{ \"ABC\".startswith(\"ab\") }}{{ 'x'.endswith(('y', 'x')) }}{{ 'ab'.replace('', '-') }}{{ 'aaa'.replace('a', 'b', 2) }}",
     NULL,
     "FalseTrue-a-b-bba"},
    {"{{ 42 | tojson }}{{ 'x' | tojson }}{{ none | tojson }}{{ [1.0, 2.50, 1e-7, 1e22] | tojson }}{{ \"\\u2028\" | tojson }}{{ \"</script>\" | tojson }}",
     NULL,
     "42\"x\"null[1.0, 2.5, 1e-07, 1e+22]\"\342\200\250\"\"</script>\""},
    {"{%- set ns = namespace() -%}{%- set ns.a = 1 -%}{{ ns.a }}{{ ns.b is defined }}",
     NULL,
     "1False"},
    {"{{ (1, 2) | list }}{{ [(1, 'a')] }}{{ ((1,),) }}{{ () }}",
     NULL,
     "[1, 2][(1, 'a')]((1,),)()"},
    {"{% set a = 1 %}{% if true %}{% set a = 2 %}{% endif %}{{ a }}{% macro m() %}{% set a = 3 %}{{ a }}{% endmacro %}{{ m() }}{{ a }}",
     NULL,
     "232"},
    {"{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}",
     NULL,
     "global"},
    {"{% for x in [1] %}{% set inner = 5 %}{% endfor %}{{ inner is defined }}",
     NULL,
     "False"},
    {"{{ loop is defined }}{% for x in [1] %}{{ loop is defined }}{{ loop.depth }}{% endfor %}",
     NULL,
     "FalseTrue1"},
    {"{{ 10000000000000000.0 }} {{ 1e16 }} {{ 123456789012345678 }} {{ 0.1 * 3 }} {{ 100.0 }} {{ 1.0e15 }}",
     NULL,
     "1e+16 1e+16 123456789012345678 0.30000000000000004 100.0 1000000000000000.0"},
    {"{{ u|upper }}|{{ u|lower }}|{{ u|replace('a','b') }}|{{ u|capitalize }}|{{ u|first }}|{{ u|last }}|{{ u|join(',') }}|{{ u|list }}|{{ u|string }}|{{ u|trim }}|{{ u|length }}|{{ u|title }}|{{ u|map(attribute='x')|list }}|{{ u|selectattr('x')|list }}|{{ u|sort }}|{{ u|safe }}",
     NULL,
     "|||||||[]|||0||[]|[]|[]|"},
    {"{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}",
     NULL,
     "  1\n  2\n"},
    {"<ul>\n{% for i in [1,2] %}\n    <li>{{ i }}</li>\n{% endfor %}\n</ul>",
     NULL,
     "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
    {"a\n  {# c #}\nb\n  {#- c -#}\n  c",
     NULL,
     "a\nbc"},
    {"{% if true %}  x  {% endif %}\n  {% if true %}\ny\n  {%- endif %}",
     NULL,
     "  x  y"},
    {"    {%- set x = 1 %}\n    {{ x }}\n    {%+ set y = 2 +%}\n    {{ y }}",
     NULL,
     "    1\n    \n    2"},
    {"{%- macro m() %}\n  body\n{% endmacro %}\n[{{ m() }}]",
     NULL,
     "[  body\n]"},
    {"{{- 'a' }}\n{{ 'b' -}}\n   \nc",
     NULL,
     "a\nbc"},
    {"{% raw -%}   raw {{ x }}   {%- endraw %}\nafter",
     NULL,
     "raw {{ x }}after"},
    {" {% raw %}\n x\n {% endraw %}\n y",
     NULL,
     "\n x\n y"},
    {"line\n{%- for x in [1] -%}\n  {{ x }}\n{%- endfor -%}\nend",
     NULL,
     "line1end"},
    {"{% if true %}\n{% endif %}",
     NULL,
     ""},
    {"{% if true %}{% endif %}\n",
     NULL,
     ""},
    {"\t{% if true %}\ttab{% endif %}",
     NULL,
     "\ttab"},
    {"text {% if true %}\ninline{% endif %} more",
     NULL,
     "text inline more"},
    {"{{ 'x' }}   {% if true %}y{% endif %}",
     NULL,
     "x   y"},
    {"a {% set x = 1 %}\nb\n",
     NULL,
     "a b"},
    {"{{ x|tojson(ensure_ascii=true) }}{{ x|tojson(separators=(',', ':')) }}{{ x|tojson(indent=2, separators=(', ', ' = ')) }}{{ x|tojson(true) }}{{ x|tojson(false, 1) }}",
     "{\"x\": {\"\303\251\": [\"\346\227\245\346\234\254\", \"\360\237\230\200\", 1, {\"k\": []}], \"b\": \"\\u0001\"}}",
     "{\"\\u00e9\": [\"\\u65e5\\u672c\", \"\\ud83d\\ude00\", 1, {\"k\": []}], \"b\": \"\\u0001\"}{\"\303\251\":[\"\346\227\245\346\234\254\",\"\360\237\230\200\",1,{\"k\":[]}],\"b\":\"\\u0001\"}{\n  \"\303\251\" = [\n    \"\346\227\245\346\234\254\", \n    \"\360\237\230\200\", \n    1, \n    {\n      \"k\" = []\n    }\n  ], \n  \"b\" = \"\\u0001\"\n}{\"\\u00e9\": [\"\\u65e5\\u672c\", \"\\ud83d\\ude00\", 1, {\"k\": []}], \"b\": \"\\u0001\"}{\n \"\303\251\": [\n  \"\346\227\245\346\234\254\",\n  \"\360\237\230\200\",\n  1,\n  {\n   \"k\": []\n  }\n ],\n \"b\": \"\\u0001\"\n}"},
    {"{{ \"a\\nb\\n\\nc\"|indent }}|{{ \"a\\nb\\n\\nc\"|indent(2, true) }}|{{ \"a\\nb\\n\\nc\\n\"|indent(2, blank=true) }}|{{ \"x\"|indent('--', first=true) }}|{{ \"\"|indent }}|{{ \"\\n\"|indent }}|{{ \"a\\r\\nb\"|indent(1) }}",
     NULL,
     "a\n    b\n\n    c|  a\n  b\n\n  c|a\n  b\n  \n  c\n  |--x||\n|a\n b"},
    {"{{ x|tojson(indent=4)|indent(4) }}",
     "{\"x\": {\"a\": [1, 2], \"b\": \"c\"}}",
     "{\n        \"a\": [\n            1,\n            2\n        ],\n        \"b\": \"c\"\n    }"},
    {"{%- for arg_name, arg_val in tc.arguments | items %}{{ arg_name + '=\"' + arg_val + '\"' }}{% if not loop.last %}, {% endif %}{% endfor %}",
     "{\"tc\": {\"arguments\": {\"q\": \"x\", \"lang\": \"en\"}}}",
     "q=\"x\", lang=\"en\""},
    {"{{ builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") }}",
     "{\"builtin_tools\": [\"brave_search\", \"code_interpreter\", \"wolfram\"]}",
     "brave_search, wolfram"},
    {"{%- set ns = namespace(is_first=false, is_tool=false, system_prompt='') %}{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system_prompt = ns.system_prompt + m['content'] %}{% endif %}{% endfor %}{{ ns.system_prompt }}|{{ ns.is_first }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"A\"}, {\"role\": \"system\", \"content\": \"B\"}]}",
     "AB|False"},
    {"{% set ns = namespace(tools=[]) %}{% for t in ['a', 'b'] %}{% set ns.tools = ns.tools + [t|upper] %}{% endfor %}{{ ns.tools }}",
     NULL,
     "['A', 'B']"},
    {"{%- set content = m.content if m.content is string else m.content | map(attribute='text') | join('') %}{{ content }}",
     "{\"m\": {\"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}}",
     "ab"},
    {"{{ m['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | list }}",
     "{\"m\": {\"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}}",
     "['a', 'b']"},
    {"{%- if message.content is defined and message.content %}Y{% else %}N{% endif %}{{ message.content | replace('\\n', '\\\\n') }}",
     "{\"message\": {\"content\": \"a\\nb\"}}",
     "Ya\\nb"},
    {"{{ '<tool_call>' + tool_call | tojson + '</tool_call>' }}",
     "{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}",
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>"},
    {"{% for message in messages %}{% if loop.index0 % 2 == 0 and message.role != 'user' %}{{ raise_exception('bad') }}{% endif %}{{ message.role[0] }}{% endfor %}",
     "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}]}",
     "ua"},
    {"{{ '[gMASK]<sop>' }}{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% endfor %}{{ tools[0] | tojson(ensure_ascii=False) }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \" h\303\251 \"}], \"tools\": [{\"name\": \"\303\251\"}]}",
     "[gMASK]<sop><|user|>h\303\251{\"name\": \"\303\251\"}"},
    {"{{ (messages | last).content }}{{ messages[-1].content }}{{ messages|first|attr if false }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"1\"}, {\"role\": \"user\", \"content\": \"2\"}]}",
     "22"},
    {"{{ x | string | length }}{{ x is not none and x|length > 0 }}",
     "{\"x\": \"abc\"}",
     "3True"},
    {"{%- if messages[0]['role'] == 'system' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}{{ loop_messages|length }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"1\"}, {\"role\": \"user\", \"content\": \"2\"}]}",
     "1"},
    {"{{ message.content.split('</think>')[-1].lstrip('\\n') if '</think>' in message.content else 'none' }}",
     "{\"message\": {\"content\": \"<think>x</think>\\n\\nanswer\"}}",
     "answer"},
    {"{% if message.tool_calls %}{% for tool in message.tool_calls %}{{ tool['function']['name'] + '(' + tool['function']['arguments'] + ')' }}{% endfor %}{% endif %}",
     "{\"message\": {\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}]}}",
     "f({\"a\": 1})"},
    {"{{ tools | map(attribute='function') | map(attribute='name') | list }}{{ tools | map(attribute='function.name') | join }}",
     "{\"tools\": [{\"function\": {\"name\": \"a\"}}, {\"function\": {\"name\": \"b\"}}]}",
     "['a', 'b']ab"},
    {"{{ {'a': 1}['a'] }}{{ {'a': {'b': [1, 2]}}.a.b[1] }}{{ [[1, 2], [3]][0][-1] }}",
     NULL,
     "122"},
    {"{% for k, v in d|dictsort if false %}{% endfor %}{% for i, x in [['a', 1], ['b', 2]] %}{{ i }}{{ x }}{% endfor %}",
     "{\"d\": {}}",
     "a1b2"},
    {"{{ \"\\u00e9\"|length }}{{ \"\360\237\230\200x\"|length }}{{ \"\360\237\230\200x\"[0] }}{{ \"\360\237\230\200x\"|list }}",
     NULL,
     "12\360\237\230\200['\360\237\230\200', 'x']"},
    {"{% set x = none %}{{ x.y is defined }}{{ x.y }}",
     NULL,
     "False"},
    {"{{ 5 is number }}{{ 5.0 is integer }}{{ 'a' is lower }}{{ 'A' is upper }}{{ none is none }}{{ [] is sequence }}{{ 'a' is in 'abc' }}{{ 3 is gt 2 }}{{ 3 is ge(4) }}{{ 1 is eq 1 }}{{ true is sameas true }}",
     NULL,
     "TrueFalseTrueTrueTrueTrueTrueTrueFalseTrueTrue"},
    {"{{ messages | map(attribute='role') | unique | list if false }}{{ messages | length }}",
     "{\"messages\": []}",
     "0"},
    {"{{ 'a' if x else 'b' if y else 'c' }}",
     "{\"y\": 1}",
     "b"},
    {"{{ [1, 2] | join('-') }}{{ [1, none, 'x'] | join }}{{ users | join(', ', attribute='n') }}",
     "{\"users\": [{\"n\": \"a\"}, {\"n\": 1}]}",
     "1-21Nonexa, 1"},
    {"{{ 'x'|capitalize }}{{ 'hELLO wORLD'|capitalize }}{{ 'it''s'|title }}{{ \"o'neil mc-d x1y\"|title }}",
     NULL,
     "XHello worldItsO'neil Mc-D X1y"},
    {"{{ 3 | float }}{{ '3.5' | float }}{{ 'x' | float }}{{ '0x1A' | int }}{{ ' 42 ' | int }}{{ '4.7' | int }}{{ true | int }}{{ none | int }}",
     NULL,
     "3.03.50.0042410"},
    {"{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d|dictsort(true) %}{{ k }}{% endfor %}|{% for k, v in d|dictsort(by='value', reverse=true) %}{{ k }}{% endfor %}{{ 'o\\'neil x1y'.title() }}",
     "{\"d\": {\"b\": 1, \"A\": 3, \"a\": 2}}",
     "A3a2b1|Aab|AabO'Neil X1Y"},
    {"{{ '%}' }}{% if '%}' %}a{% endif %}{{ \"}}\" }}{# {{ x }} {% if %} #}b",
     NULL,
     "%}a}}b"},
    {"{{ x }}\n  {% if true %}y{% endif %}",
     "{\"x\": 1}",
     "1\ny"},
    {"{{- ' a ' -}}   {%- if true -%}   b   {%- endif -%}   {#- c -#}   d",
     NULL,
     " a bd"},
    {"{%- raw -%}   {{ r }}   {%- endraw -%}   e",
     NULL,
     "{{ r }}e"},
    {"x {%- raw %} y {% endraw -%} z",
     NULL,
     "x y z"},
    {"{% for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}",
     NULL,
     "12"},
    {"{% if true %}\n    {% for i in [1] %}\n        {{ i }}\n    {% endfor %}\n{% endif %}",
     NULL,
     "        1\n"},
    {"{% set x = [1, 2,] %}{% set y = {'a': 1,} %}{{ x }}{{ y }}{{ (1, 2,) }}",
     NULL,
     "[1, 2]{'a': 1}(1, 2)"},
    {"{{ 'abc' 'def' }}{{ \"x\" 'y' }}",
     NULL,
     "abcdefxy"},
    {"{%- macro f(x) -%}{{ x * 2 }}{%- endmacro -%}{{ f(2) }}{{ f(x='a') }}{{ f }}{{ f is callable }}",
     NULL,
     "4aa<Macro 'f'>True"},
    {"{% for a, b in {'k': 'v'}.items() %}{{ a }}:{{ b }}{% endfor %}{% for a in {'k': 'v'} %}{{ a }}{% endfor %}",
     NULL,
     "k:vk"},
    {"{% set t = (1, 'two') %}{% set a, b = t %}{{ b }}{{ t[0] }}{{ t | length }}{{ t is sequence }}",
     NULL,
     "two12True"},
    {"{{ 'A' ~ (1 + 2) ~ [1] }}{{ \"a\" < \"b\" }}{{ [1, 2] | sort(reverse=true) | first }}",
     NULL,
     "A3[1]True2"},
    {"{{ x.0 }}{{ x.1.k }}",
     "{\"x\": [\"a\", {\"k\": \"v\"}]}",
     "av"},
    {"{{ x|tojson }}{{ x.a }}{{ x|length }}",
     "{\"x\": {\"a\": 1, \"b\": 2, \"a\": 3, \"c\": {\"z\": 1, \"z\": [2]}, \"b\": 4}}",
     "{\"a\": 3, \"b\": 4, \"c\": {\"z\": [2]}}33"},
    {"{{ x|tojson }}",
     "{\"x\": {\"k\": 1}}",
     "{\"k\": 1}"},
    {"{{ {'a': 1, 'b': 2, 'a': 3} }}{{ dict(a=1, b=2) }}{{ {'z': 1, 'y': {'q': 1, 'q': 2}} | tojson }}\n",
     NULL,
     "{'a': 3, 'b': 2}{'a': 1, 'b': 2}{\"z\": 1, \"y\": {\"q\": 2}}"},
};

TEST(unit_table_matches_jinja2) {
    int bad = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        char *out;
        spex_error e = {0};
        spex_status st = render(units[i].tmpl, units[i].ctx, &out, &e);
        if (st != SPEX_OK) {
            printf("  case %zu [%s]: %s: %s\n", i, units[i].tmpl, spex_status_str(st), e.msg);
            bad++;
        } else if (strcmp(out, units[i].want) != 0) {
            printf("  case %zu [%s]\n    got  [%s]\n    want [%s]\n", i, units[i].tmpl, out, units[i].want);
            bad++;
        }
        free(out);
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- errors -------------------------------------------------------------------------------- */

static const struct {
    const char *tmpl, *ctx;
    spex_status st;
    const char *msg;   /* a substring of the message */
} errors[] = {
    {"{{ foo.bar }}", NULL, SPEX_ERR_INVALID_ARG, "line 1 col 8: 'foo' is undefined"},
    {"{{ foo + 'x' }}", NULL, SPEX_ERR_INVALID_ARG, "'foo' is undefined"},
    {"{{ x.y.z }}", "{\"x\": {}}", SPEX_ERR_INVALID_ARG, "'y' is undefined"},
    {"{{ 'a' < 1 }}", NULL, SPEX_ERR_INVALID_ARG, "not supported between instances of 'str' and 'int'"},
    {"ok\n  {{ raise_exception('boom') }}", NULL, SPEX_ERR_INVALID_ARG, "line 2 col 6: raise_exception: boom"},
    {"{{ 1 + }}", NULL, SPEX_ERR_FORMAT, "line 1 col 8: unexpected '}}'"},
    {"{% if %}x{% endif %}", NULL, SPEX_ERR_FORMAT, "line 1 col 7"},
    {"{% for x in y %}", NULL, SPEX_ERR_FORMAT, "missing {% endfor %}"},
    {"{% if x %}", NULL, SPEX_ERR_FORMAT, "missing {% endif %}"},
    {"{% endfor %}", NULL, SPEX_ERR_FORMAT, "unknown or unsupported tag 'endfor'"},
    {"{% include 'x' %}", NULL, SPEX_ERR_FORMAT, "unknown or unsupported tag 'include'"},
    {"{{ x | nosuchfilter }}", NULL, SPEX_ERR_UNSUPPORTED, "line 1 col 6: no filter named 'nosuchfilter'"},
    {"{{ x is nosuchtest }}", NULL, SPEX_ERR_UNSUPPORTED, "no test named 'nosuchtest'"},
    {"{{ 1 / 0 }}", NULL, SPEX_ERR_INVALID_ARG, "division by zero"},
    {"{{ 5 % 0 }}", NULL, SPEX_ERR_INVALID_ARG, "division by zero"},
    {"{{ 'abc }}", NULL, SPEX_ERR_FORMAT, "unterminated string"},
    {"{{ 007 }}", NULL, SPEX_ERR_FORMAT, "leading zeros"},
    {"{{ x ", NULL, SPEX_ERR_FORMAT, "missing '}}'"},
    {"{# never closed", NULL, SPEX_ERR_FORMAT, "missing end of comment tag"},
    {"{{ (1 }}", NULL, SPEX_ERR_FORMAT, "line 1 col"},
    {"{{ [1, 2][0:1:0] }}", NULL, SPEX_ERR_INVALID_ARG, "slice step cannot be zero"},
    {"{{ none.x.y }}", NULL, SPEX_ERR_INVALID_ARG, "'x' is undefined"},
    {"{{ 1 in 2 }}", NULL, SPEX_ERR_INVALID_ARG, "argument of type 'int' is not iterable"},
    {"{% for x in 3 %}{% endfor %}", NULL, SPEX_ERR_INVALID_ARG, "'int' object is not iterable"},
    {"{{ {1: 2} }}", NULL, SPEX_ERR_UNSUPPORTED, "dict keys other than strings"},
    {"{{ x.append(1) }}", "{\"x\": []}", SPEX_ERR_INVALID_ARG, "not allowed in a sandboxed template"},
    {"{{ 3() }}", NULL, SPEX_ERR_INVALID_ARG, "'int' object is not callable"},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, SPEX_ERR_INVALID_ARG, "takes not more than 1"},
    {"{% set x = 1 %}{% set x.y = 2 %}", NULL, SPEX_ERR_INVALID_ARG, "non-namespace object"},
    {"{{ 9223372036854775807 + 1 }}", NULL, SPEX_ERR_RANGE, "integer overflow"},
    {"{{ {'a': 1} | tojson(indent='x') }}", NULL, SPEX_ERR_UNSUPPORTED, "indent"},
    {"{{ x | tojson }}", NULL, SPEX_ERR_INVALID_ARG, "Undefined is not JSON serializable"},
    {"{% for x in y recursive %}{% endfor %}", NULL, SPEX_ERR_FORMAT, "recursive loops are not supported"},
};

TEST(errors_are_clean_statuses_with_positions) {
    int bad = 0;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        char *out;
        spex_error e = {0};
        spex_status st = render(errors[i].tmpl, errors[i].ctx, &out, &e);
        if (st != errors[i].st || !strstr(e.msg, errors[i].msg) || out != NULL || strchr(e.msg, '\n') ||
            strncmp(e.msg, "jinja: ", 7) != 0) {
            printf("  [%s] -> %s: %s (want %s: ...%s...)\n", errors[i].tmpl, spex_status_str(st), e.msg,
                   spex_status_str(errors[i].st), errors[i].msg);
            bad++;
        }
        free(out);
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(bad_context_json) {
    spex_jinja *t;
    CHECK_OK(spex_jinja_parse("{{ x }}", 7, &t, NULL));
    char *out = (char *)1;
    size_t n;
    spex_error e = {0};
    CHECK_EQ_INT(spex_jinja_render(t, "[1, 2]", 6, &out, &n, &e), SPEX_ERR_INVALID_ARG);
    CHECK(out == NULL && strstr(e.msg, "not a JSON object"));
    CHECK_EQ_INT(spex_jinja_render(t, "{\"x\": ", 6, &out, &n, &e), SPEX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "context"));
    const char *ctx = "{\"x\": \"\\u00e9\\ud83d\\ude00\"}";
    CHECK_OK(spex_jinja_render(t, ctx, strlen(ctx), &out, &n, &e));
    CHECK(strcmp(out, "\xc3\xa9\xf0\x9f\x98\x80") == 0);
    free(out);
    spex_jinja_free(t);
}

/* ---- limits -------------------------------------------------------------------------------- */

/* Each hostile template must stop at a documented limit, never crash, hang or eat memory
 * without bound: nesting past the parser's depth is a syntax error (SPEX_ERR_FORMAT), the
 * rest fail while rendering with SPEX_ERR_RANGE. */
TEST(limits_stop_hostile_templates) {
    static char deep[8192];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    static char nested_ifs[16384];
    k = 0;
    for (int i = 0; i < 600; i++) k += (size_t)snprintf(nested_ifs + k, sizeof nested_ifs - k, "{%% if 1 %%}");
    for (int i = 0; i < 600; i++) k += (size_t)snprintf(nested_ifs + k, sizeof nested_ifs - k, "{%% endif %%}");
    const char *hostile[] = {
        deep,
        nested_ifs,
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(0) }}",
        "{{ 'x' * 100000000 }}",
        "{{ range(100000000) | length }}",
        "{{ [1] * 100000000 }}",
        "{% for i in range(3000000) %}{% endfor %}x",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        char *out;
        spex_error e = {0};
        spex_status st = render(hostile[i], NULL, &out, &e);
        spex_status want = i < 2 ? SPEX_ERR_FORMAT : SPEX_ERR_RANGE;
        CHECK_MSG(st == want && out == NULL && (i >= 2 || strstr(e.msg, "deep")), "hostile %zu -> %s: %s", i,
                  spex_status_str(st), e.msg);
    }
}

/* Objects of many keys (a request's tools, a dict literal) cost O(n log n): 200 000 keys in
 * the context and 20 000 in a literal, each with a repeated key, render well within a second
 * where n^2 key scans would take tens of seconds. */
TEST(many_keys_are_not_quadratic) {
    size_t cap = 4 << 20, k = 0;
    char *ctx = malloc(cap), *lit = malloc(cap);
    CHECK(ctx && lit);
    k += (size_t)snprintf(ctx + k, cap - k, "{\"x\": {");
    for (int i = 0; i < 200000; i++) k += (size_t)snprintf(ctx + k, cap - k, "\"k%d\": %d, ", i, i);
    snprintf(ctx + k, cap - k, "\"k7\": \"last\"}}");
    k = (size_t)snprintf(lit, cap, "{{ {");
    for (int i = 0; i < 20000; i++) k += (size_t)snprintf(lit + k, cap - k, "'k%d': %d, ", i, i);
    snprintf(lit + k, cap - k, "'k7': 'last'} | length }}");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *a, *b;
    spex_status sa = render("{{ x | length }} {{ x.k7 }} {{ x.k199999 }}", ctx, &a, NULL);
    spex_status sb = render(lit, NULL, &b, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(ctx);
    free(lit);
    bool ok = sa == SPEX_OK && sb == SPEX_OK && !strcmp(a, "200000 last 199999") && !strcmp(b, "20000");
    free(a);
    free(b);
    CHECK(ok);
    CHECK_MSG(s < 5.0, "took %.2f s", s);
}

/* ---- fixtures ------------------------------------------------------------------------------ */

static cJSON *load_json(const char *path) {
    size_t n;
    char *s = test_slurp(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

/* The Qwen3 template from shared data, or NULL. */
static char *qwen3_template(void) {
    const char *p = test_shared_path("data/qwen3-tokenizer/tokenizer_config.json");
    cJSON *cfg = p ? load_json(p) : NULL;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    char *s = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(cfg);
    return s;
}

static char *template_source(const char *name) {
    if (strcmp(name, "qwen3") == 0) return qwen3_template();
    char path[256];
    snprintf(path, sizeof path, "tests/data/jinja/%s.jinja", name);
    size_t n;
    return test_slurp(path, &n);
}

/* A case's messages as spex_chat_msg, tool-call arguments printed back to JSON text. Strings
 * point into ctx (or into *keep, freed by the caller). false when a message has a field the
 * structs cannot carry. */
typedef struct chat_case {
    spex_chat_msg msgs[16];
    spex_chat_tool_call calls[16][4];
    char *keep[64];
    size_t n_msgs, n_keep;
    const char *tools[8];
    char *tool_text[8];
    size_t n_tools;
} chat_case;

static void chat_case_free(chat_case *cc) {
    for (size_t i = 0; i < cc->n_keep; i++) free(cc->keep[i]);
    for (size_t i = 0; i < cc->n_tools; i++) free(cc->tool_text[i]);
}

static bool chat_case_of(const cJSON *ctx, chat_case *cc) {
    memset(cc, 0, sizeof *cc);
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(ctx, "messages")) {
        if (cc->n_msgs == 16) return false;
        spex_chat_msg *o = &cc->msgs[cc->n_msgs];
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || !spex_chat_role_from_name(role->valuestring, &o->role)) return false;
        o->content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
        o->reasoning_content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "reasoning_content"));
        const cJSON *tc;
        cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            if (o->n_tool_calls == 4 || cc->n_keep == 64) return false;
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            spex_chat_tool_call *call = &cc->calls[cc->n_msgs][o->n_tool_calls++];
            call->name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
            call->arguments = cc->keep[cc->n_keep++] = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        }
        if (o->n_tool_calls) o->tool_calls = cc->calls[cc->n_msgs];
        cc->n_msgs++;
    }
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(ctx, "tools")) {
        if (cc->n_tools == 8) return false;
        cc->tools[cc->n_tools] = cc->tool_text[cc->n_tools] = cJSON_PrintUnformatted(m);
        cc->n_tools++;
    }
    return true;
}

/* Renders every case of one template both ways and compares with jinja2's text; counts the
 * mismatches (printing each). */
static int check_template(const char *name, const cJSON *cases, const cJSON *expected) {
    char *src = template_source(name);
    spex_jinja *t = NULL;
    spex_error e = {0};
    if (!src || spex_jinja_parse(src, strlen(src), &t, &e) != SPEX_OK) {
        printf("  %s: cannot load or parse: %s\n", name, e.msg);
        free(src);
        return 1;
    }
    free(src);
    int bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(c, "ctx");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(expected, name), cname);
        const char *want_out = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(want, "out"));
        const char *want_err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(want, "error"));
        char *json = cJSON_PrintUnformatted(ctx), *out = NULL;
        size_t n = 0;
        spex_status st = spex_jinja_render(t, json, strlen(json), &out, &n, &e);
        free(json);
        for (int way = 0; way < 2; way++) {
            if (want_out && (st != SPEX_OK || strcmp(out, want_out) != 0)) {
                printf("  %s/%s (%s): %s\n    got  [%s]\n    want [%s]\n", name, cname, way ? "chat structs" : "json",
                       st == SPEX_OK ? "differs" : e.msg, out ? out : "", want_out);
                bad++;
            }
            if (want_err && (st != SPEX_ERR_INVALID_ARG || !strstr(e.msg, want_err))) {
                printf("  %s/%s: want the error [%s], got %s [%s]\n", name, cname, want_err, spex_status_str(st), e.msg);
                bad++;
            }
            free(out);
            out = NULL;
            if (way == 1) break;
            chat_case cc;
            if (!chat_case_of(ctx, &cc)) {
                printf("  %s/%s: case not expressible as spex_chat_msg\n", name, cname);
                chat_case_free(&cc);
                bad++;
                break;
            }
            spex_jinja_chat o = {
                .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt")),
                .enable_thinking = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "enable_thinking")),
                .bos_token = "<s>", .eos_token = "</s>",
            };
            st = spex_chat_apply_jinja(t, cc.msgs, cc.n_msgs, cc.tools, cc.n_tools, &o, &out, &n, &e);
            chat_case_free(&cc);
        }
    }
    spex_jinja_free(t);
    return bad;
}

TEST(fixtures_match_jinja2) {
    cJSON *cases = load_json("tests/data/jinja/cases.json"), *expected = load_json("tests/data/jinja/expected.json");
    CHECK(cases && expected);
    int bad = 0, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, expected) {
        if (strcmp(t->string, "qwen3") == 0) continue;
        bad += check_template(t->string, cases, expected);
        n++;
    }
    cJSON_Delete(cases);
    cJSON_Delete(expected);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(bad, 0);
}

TEST(fixtures_qwen3_real_template) {
    char *src = qwen3_template();
    if (!src) SKIP("../shared/data/qwen3-tokenizer/tokenizer_config.json not found");
    free(src);
    cJSON *cases = load_json("tests/data/jinja/cases.json"), *expected = load_json("tests/data/jinja/expected.json");
    CHECK(cases && expected);
    int bad = check_template("qwen3", cases, expected);
    cJSON_Delete(cases);
    cJSON_Delete(expected);
    CHECK_EQ_INT(bad, 0);
}

/* The built-in Qwen3 renderer (src/tok/chat.c) and the Jinja engine on the real template give
 * the same text for every fixture case (all are within what the built-in supports). */
TEST(qwen3_jinja_equals_builtin) {
    char *src = qwen3_template();
    if (!src) SKIP("../shared/data/qwen3-tokenizer/tokenizer_config.json not found");
    spex_jinja *t;
    spex_error e = {0};
    spex_status pst = spex_jinja_parse(src, strlen(src), &t, &e);
    free(src);
    CHECK_MSG(pst == SPEX_OK, "%s", e.msg);
    cJSON *cases = load_json("tests/data/jinja/cases.json");
    CHECK(cases);
    int bad = 0, n = 0;
    const cJSON *c;
    static char buf[1 << 16];
    cJSON_ArrayForEach(c, cases) {
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(c, "ctx");
        chat_case cc;
        if (!chat_case_of(ctx, &cc)) {
            chat_case_free(&cc);
            bad++;
            continue;
        }
        bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt"));
        bool think = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "enable_thinking"));
        spex_jinja_chat o = {.add_generation_prompt = gen, .enable_thinking = think};
        char *out = NULL;
        size_t len = 0, blen = 0;
        spex_status a = spex_chat_apply_jinja(t, cc.msgs, cc.n_msgs, cc.tools, cc.n_tools, &o, &out, &len, &e);
        spex_status b = spex_chat_apply_tools(SPEX_CHAT_CHATML_QWEN3, cc.msgs, cc.n_msgs, cc.tools, cc.n_tools, gen, think,
                                              buf, sizeof buf, &blen, &e);
        if (a != SPEX_OK || b != SPEX_OK || len != blen || memcmp(out, buf, len) != 0) {
            printf("  %s: jinja %s / built-in %s\n    jinja    [%s]\n    built-in [%s]\n",
                   cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name")), spex_status_str(a),
                   spex_status_str(b), out ? out : "", buf);
            bad++;
        }
        n++;
        free(out);
        chat_case_free(&cc);
    }
    cJSON_Delete(cases);
    spex_jinja_free(t);
    CHECK(n >= 12);
    CHECK_EQ_INT(bad, 0);
}

/* One parsed template rendered twice gives the same bytes (renders leave the template as
 * it was), and the chat defaults (NULL opts) are add_generation_prompt and thinking on. */
TEST(template_is_reusable_and_defaults) {
    const char *src = "{% set ns = namespace(k=0) %}{% for m in messages %}{% set ns.k = ns.k + 1 %}{% endfor %}"
                      "{{ ns.k }}{{ add_generation_prompt }}{{ enable_thinking }}{{ tools }}[{{ bos_token }}]";
    spex_jinja *t;
    CHECK_OK(spex_jinja_parse(src, strlen(src), &t, NULL));
    spex_chat_msg m[] = {{.role = SPEX_CHAT_USER, .content = "a"}, {.role = SPEX_CHAT_ASSISTANT, .content = NULL}};
    for (int i = 0; i < 2; i++) {
        char *out;
        size_t n;
        CHECK_OK(spex_chat_apply_jinja(t, m, 2, NULL, 0, NULL, &out, &n, NULL));
        CHECK_MSG(strcmp(out, "2TrueTrueNone[]") == 0, "got [%s]", out);
        free(out);
    }
    spex_jinja_chat o = {.bos_token = "<s>", .extra_json = "{\"enable_thinking\": \"x\", \"bos_token\": \"B\"}"};
    char *out;
    size_t n;
    CHECK_OK(spex_chat_apply_jinja(t, m, 1, NULL, 0, &o, &out, &n, NULL));
    CHECK_MSG(strcmp(out, "1FalsexNone[B]") == 0, "got [%s]", out);
    free(out);
    spex_jinja_free(t);
}

/* One parsed template rendered by several threads at once gives every thread the same text
 * (a render writes only to its own arena; under TSan or ASan this is the data-race check). */
typedef struct thread_job {
    const spex_jinja *t;
    char *out;
    spex_status st;
} thread_job;

static void *render_job(void *p) {
    thread_job *j = p;
    spex_chat_tool_call call = {"get_weather", "{\"city\": \"Paris\", \"days\": 2}"};
    spex_chat_msg m[] = {{SPEX_CHAT_USER, "Weather?", NULL, NULL, 0}, {SPEX_CHAT_ASSISTANT, "", "think", &call, 1},
                         {SPEX_CHAT_TOOL, "21", NULL, NULL, 0}, {SPEX_CHAT_USER, "x", NULL, NULL, 0}};
    for (int i = 0; i < 50 && j->st == SPEX_OK; i++) {
        free(j->out);
        j->out = NULL;
        size_t n;
        j->st = spex_chat_apply_jinja(j->t, m, 4, NULL, 0, NULL, &j->out, &n, NULL);
    }
    return NULL;
}

TEST(renders_from_threads) {
    size_t n;
    char *src = test_slurp("tests/data/jinja/ns_macro.jinja", &n);
    CHECK(src);
    spex_jinja *t;
    spex_status st = spex_jinja_parse(src, n, &t, NULL);
    free(src);
    CHECK_OK(st);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, NULL, SPEX_OK};
        CHECK(pthread_create(&th[i], NULL, render_job, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        bad += jobs[i].st != SPEX_OK || !jobs[i].out || strcmp(jobs[i].out, jobs[0].out) != 0 ||
               !strstr(jobs[i].out, "call:get_weather(city=\"Paris\", days=2)");
        if (i == 0 && jobs[0].out && bad) printf("  got [%s]\n", jobs[0].out);
    }
    for (int i = 0; i < 4; i++) free(jobs[i].out);
    spex_jinja_free(t);
    CHECK_EQ_INT(bad, 0);
}

TEST_MAIN()
