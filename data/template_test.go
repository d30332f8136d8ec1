package data

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// renderTemplate renders source over vars with the default limits.
func renderTemplate(source string, vars map[string]jinja.Value) (string, error) {
	t, err := tplCompile(source)
	if err != nil {
		return "", err
	}
	if vars == nil {
		vars = map[string]jinja.Value{}
	}
	return t.render(vars, tplDefaultLimits(tplValueSize(vars)))
}

// templateSemantics are templates and their renderings by Python's
// Jinja (3.1.6, as transformers runs it: an ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and its tojson), over semanticsVars:
// Python's answers where the jinja library gave others, panicked or ran
// out of memory, and the rest of the language chat templates use. (A
// tuple here is a list, and prints as one.)
var templateSemantics = []struct{ src, want string }{
	// Python's integers and sequences.
	{`{{ 'a' * -1 }}|{{ 'ab' * 2 }}|{{ 2 * 'ab' }}|{{ [1] * 0 }}|{{ [1, 2] * 2 }}`, "|abab|abab|[]|[1, 2, 1, 2]"},
	{`{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }} {{ 7 // -2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 2 }}`, "-4 1 -1 -4 1024 0.5 3.5 3.0"},
	{`{{ -9223372036854775807 - 1 }} {{ 9223372036854775807 }} {{ (-9223372036854775807 - 1) // 1 }}`, "-9223372036854775808 9223372036854775807 -9223372036854775808"},
	{`{{ 'abc'[::-1] }} {{ [1, 2, 3][::-2] }} {{ 'abc'[::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807 - 1] }}`, "cba [3, 1] a [3] [3]"},
	{`{{ 'abc'[-100:100] }} {{ 'abc'[5:] }}|{{ [1, 2, 3][-2:] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[1] }} {{ s[-1] }}`, "abc |[2, 3] él olléh é o"},
	{`{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-5 }} {{ none }} {{ true }} {{ undefined_thing }}|`, "1.0 0.30000000000000004 1e+16 1.5e-05 None True |"},
	{`{{ {'a': [1, 'b', none, 1.5, "it's"]} }} {{ ['a"b'] }}`, `{'a': [1, 'b', None, 1.5, "it's"]} ['a"b']`},
	// Strings.
	{`{{ '%5.1f|%-3d|%s|%r|%x|%%|%03d' % (3.14159, 7, 'x', 'y', 255, 5) }}`, "  3.1|7  |x|'y'|ff|%|005"},
	{`{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }} {{ '%s, %s'|format(1, 'b') }}`, "x-2 1, b"},
	{`{{ '{:>5}|{:.2f}|{!r}|{x}|{:,}|{:08.3f}|{{}}'.format('a', 1.5, 'b', 12345678, -3.14159, x=1) }}|{{ '{1}{0}{1}'.format('a', 'b') }}`, "    a|1.50|'b'|1|12,345,678|-003.142|{}|bab"},
	{`{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}`, "a b|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']"},
	{`{{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.replace('b', 'XY') }} {{ 'abc'.replace('', '-') }} {{ 'aaa'.replace('a', 'b', 2) }}`, "hello world Hello World Hello aXYc -a-b-c- bba"},
	{`{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'héllo'.find('l') }} {{ ', '.join(['a', 'b']) }} {{ 'x'.center(5) }}|{{ '7'.zfill(3) }}`, "True True 2 a, b   x  |007"},
	{`{{ 'a' ~ 1 ~ none }} {{ 'a' + 'b' }} {{ [1] + [2] }}`, "a1None ab [1, 2]"},
	// Filters.
	{`{{ messages|length }} {{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|first }}`, "2 user,assistant 1 assistant"},
	{`{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['a', 'A', 'b']|unique|list }} {{ [1, 5, 3]|max }} {{ [1, 5, 3]|min }} {{ [1, 2, 3]|sum }}`, "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] ['a', 'b'] 5 1 6"},
	{`{{ ' x '|trim }}|{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'abc'|upper }}|{{ 'x'|default('d') }}|{{ nope|default('d') }}|{{ ''|default('d', true) }}`, "x|a\n  b|  a\n  b|ABC|x|d|d"},
	{`{{ {'b': 1, 'a': [1, 2.5, "é\n"]}|tojson }}|{{ {'a': 1}|tojson(indent=2) }}|{{ []|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}`, "{\"b\": 1, \"a\": [1, 2.5, \"é\\n\"]}|{\n  \"a\": 1\n}|[]|{\"a\": 2, \"b\": 1}"},
	{`{{ {'b': 1, 'a': 2}|dictsort|map('first')|join }} {{ {'a': 1}|items|list|length }} {{ '3'|int + 1 }} {{ '2.5'|float }} {{ 3.7|int }} {{ 2.5|round }} {{ -3|abs }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}`, "ab 1 4 2.5 3 2.0 3 [[1, 2], [3, 4], [5]]"},
	{`{{ 'a b c'|wordcount }} {{ 'hello world foo'|truncate(9) }} {{ '<a>'|e }} {{ [1, 2]|reverse|list }} {{ 'ab'|list }}`, "3 hello... &lt;a&gt; [2, 1] ['a', 'b']"},
	// Tests, operators, control.
	{`{{ n is integer }} {{ n is odd }} {{ 4 is divisibleby 2 }} {{ s is string }} {{ messages is sequence }} {{ none is none }} {{ x is defined }} {{ n is not none }} {{ 'ABC' is upper }} {{ 1 is sameas true }}`, "True True True True True True False True True False"},
	{`{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 'a' in 'cat' }} {{ 'x' not in ['x'] }} {{ 'role' in messages[0] }} {{ 1 == 1.0 }} {{ true == 1 }}`, "True False True True True False True True True"},
	{`{{ 'y' if n > 2 else 'n' }} {{ 'y' if n > 5 }}|{{ n > 2 and 'a' or 'b' }} {{ not n }} {{ -n|abs }} {{ (1, 2)|list }}`, "y |a False 3 [1, 2]"},
	{`{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex0 }}{{ loop.cycle('a', 'b') }}{% if not loop.last %},{% endif %}{% endfor %}`, "1TrueFalse21a,2FalseTrue20b"},
	{`{% for i in range(5) if i is odd %}{{ i }}{% else %}none{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}`, "13|empty|02"},
	{`{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}`, "a=1;b=2;37"},
	{`{% set x = 1 %}{% for i in range(2) %}{% set x = 5 %}{% endfor %}{{ x }}{% set ns = namespace(c=0) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}{% set a, b = 'xy' %}{{ b }}`, "13y"},
	{`{% macro greet(name, greeting='hi') %}{{ greeting }} {{ name }}{{ varargs|list }}{{ kwargs }}{% endmacro %}{{ greet('a') }}|{{ greet('b', greeting='yo') }}|{{ greet('c', 'x', 1, z=2) }}`, "hi a[]{}|yo b[]{}|x c[1]{'z': 2}"},
	{`{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}`, "[in]<1><2>"},
	{`{% set t %}a {{ n }}{% endset %}{{ t }}|{% set u | upper %}b{% endset %}{{ u }}|{% filter upper %}c{{ n }}{% endfilter %}|{% raw %}{{ n }}{% endraw %}`, "a 3|B|C3|{{ n }}"},
	{`{% for x in [[1, [2]], [3]] recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}`, "(1(2))(3)"},
	{`{{ dict(b=1, a=2) }} {{ namespace(x=1).x }} {% set j = joiner('+') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %} {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}`, "{'b': 1, 'a': 2} 1 0+1+2 aba"},
	{`{% set l = [1, 2, 1] %}{{ l.count(1) }} {{ l.index(2) }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'd') }} {{ {'a': 1}.keys()|list }} {{ messages[0].items()|list|length }}`, "2 1 1 d ['a'] 2"},
	// Whitespace control: trim_blocks, lstrip_blocks, - and +.
	{"{% if true %}\n  a\n  {% endif %}\n  {%- if true -%}\n b \n{%- endif %}|{{ 'x' }}\n{# c #}\ny  {%+ if true %}z{% endif +%}\n.", "  a\nb|x\ny  z\n."},
	{"a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", "a\nb\n"},
	// The answers of Qwen 3's idioms.
	{`{{ messages[1].content.split('</think>')[-1].lstrip('\n') }}|{{ messages[1].content.split('</think>')[0].rstrip('\n').split('<think>')[-1] }}`, "ans|r"},
	{`a
  {% if true %}
    b
  {% endif %}
  {# comment #}
c {% if true -%}   d   {%- endif %} e`, "a\n    b\nc d e"},
	{`{%- for m in messages -%}
  [{{ m.role }}]
{%- endfor -%}
  x`, "[user][assistant]x"},
	{`{% raw -%}   {{ x }}   {%- endraw %}|{%+ if true %}y{% endif +%}
z`, "{{ x }}|y\nz"},
	{`{{ 1e22 }} {{ 1e-7 }} {{ 0.1 }} {{ -0.0 }} {{ 100.0 }} {{ 123456789012345680.0 }} {{ 2.5e15 }} {{ 1/3 }} {{ 10**15 }}`, "1e+22 1e-07 0.1 -0.0 100.0 1.2345678901234568e+17 2500000000000000.0 0.3333333333333333 1000000000000000"},
	{`{{ '  12 '|int }} {{ '0x1A'|int(0, 16) }} {{ '1_000'|int }} {{ 'abc'|int }} {{ '3.9'|int }} {{ true|int }} {{ none|int }} {{ 'nan'|float }} {{ ' 1e3 '|float }}`, "12 26 1000 0 3 1 0 nan 1000.0"},
	{`{{ 'abcdefghij klmnop'|truncate(10) }}|{{ 'abcdefghij klmnop'|truncate(10, true) }}|{{ 'abcdefghijklmnop'|truncate(10, false, '!') }}|{{ 'abc'|truncate(3) }}|{{ 'hello world hi'|truncate(12, leeway=0) }}`, "abcdefg...|abcdefg...|abcdefghi!|abc|hello..."},
	{`{{ 'a\n\nb\n'|indent }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ', first=true) }}`, "a\n\n    b\n|a\n  \n  b|> a\n> b"},
	{`{{ '%5s|%-5s|%.2s|%5.1s|%+d|% d|%05d|%x|%X|%#x|%o|%e|%E|%g|%G|%.3g|%c|%c|%%|%r' % ('ab', 'ab', 'abc', 'xyz', 5, 5, -42, 255, 255, 255, 8, 12345.678, 0.00012, 1e-5, 1e20, 3.14159, 65, 'z', 'q') }}`, "   ab|ab   |ab|    x|+5| 5|-0042|ff|FF|0xff|10|1.234568e+04|1.200000E-04|1e-05|1E+20|3.14|A|z|%|'q'"},
	{`{{ '%(x)s and %(y)05.1f' % {'x': [1, 'a'], 'y': 2.25} }} {{ '%s' % none }} {{ '%d%%' % 50 }} {{ '%s' % [1, 2] }} {{ '%i' % 3.9 }}`, "[1, 'a'] and 002.2 None 50% [1, 2] 3"},
	{`{{ '{:<6}|{:^7}|{:*>6}|{:=+8.2f}|{:x}|{:#b}|{:o}|{:e}|{:%}|{:.1%}|{:g}|{:,.2f}|{:_d}|{:c}|{!s:>4}|{}'.format('ab', 'mid', 'r', 3.14159, 255, 5, 8, 1234.5, 0.25, 0.125, 1e-7, 1234567.891, 1000000, 97, 1, none) }}`, "ab    |  mid  |*****r|+   3.14|ff|0b101|10|1.234500e+03|25.000000%|12.5%|1e-07|1,234,567.89|1_000_000|a|   1|None"},
	{`{{ '{0:>{1}}'.format('a', 5) }}`, "    a"},
	{`{{ [3, 1, 2]|sort(attribute='x') }} {{ [{'n': 'b'}, {'n': 'A'}, {'n': 'c'}]|sort(attribute='n')|map(attribute='n')|join }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }} {{ [{'a': {'b': 2}}, {'a': {'b': 1}}]|sort(attribute='a.b')|map(attribute='a.b')|list }}`, "[3, 1, 2] Abc ['A', 'B', 'a', 'b'] [1, 2]"},
	{`{{ ['a', 'A', 'b', 'B']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [{'n': 3}, {'n': 1}]|max(attribute='n') }} {{ ['b', 'A']|min }} {{ ['b', 'A']|max(case_sensitive=true) }} {{ [1, 2.5]|sum(start=10) }} {{ [{'v': 1}, {'v': 2}]|sum(attribute='v') }}`, "['a', 'b'] ['a', 'A'] {'n': 3} A b 13.5 3"},
	{`{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 2, 3]|select('>', 1)|list }} {{ [1, 2, 3]|select('in', [1, 3])|list }} {{ [{'a': 1}, {'a': 0}, {}]|selectattr('a')|list }} {{ [{'a': 1}, {'a': 0}, {}]|rejectattr('a', 'defined')|list }}`, "[1, 3] [1, 3] [1, 'a'] [2, 3] [1, 3] [{'a': 1}] [{}]"},
	{`{{ ['a', 'B']|map('upper')|list }} {{ [' a ', 'b ']|map('trim')|join(',') }} {{ [1.5, 2.5]|map('round')|list }} {{ ['x', 'y']|map('replace', 'x', 'z')|list }} {{ [{'a': 1}, {}]|map(attribute='a', default=9)|list }}`, "['A', 'B'] a,b [2.0, 2.0] ['z', 'y'] [1, 9]"},
	{`{{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }} {{ ''|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab' * true }} {{ [1] * 2 }}`, "[[1, 2], [3, 4], [5, 'x']]  None d bba ab [1, 1]"},
	{`{{ [1, 'a', none, true, 1.5, {'k': [none]}, "q'", 'd"q', "both'\"", '\n\t\x01é\u2028\U0001F600\x7f\xa0'] }}`, "[1, 'a', None, True, 1.5, {'k': [None]}, \"q'\", 'd\"q', 'both\\'\"', '\\n\\t\\x01é\\u2028😀\\x7f\\xa0']"},
	{`{{ ['é', '\u0001', "\"", '\\', '\u2028']|tojson }} {{ {'a': {'b': [1, {}, []]}, 'c': 'd'}|tojson(indent=2) }} {{ [1.0, 1e20, 1e-7, 0.5]|tojson }} {{ {'a': 1, 'b': 2}|tojson(separators=(',', ':')) }} {{ 'x'|tojson(indent='\t') }}`, "[\"é\", \"\\u0001\", \"\\\"\", \"\\\\\", \" \"] {\n  \"a\": {\n    \"b\": [\n      1,\n      {},\n      []\n    ]\n  },\n  \"c\": \"d\"\n} [1.0, 1e+20, 1e-07, 0.5] {\"a\":1,\"b\":2} \"x\""},
	{`{{ 'abc' is sequence }} {{ true is number }} {{ true is integer }} {{ 1.0 is integer }} {{ {} is iterable }} {{ none is mapping }} {{ 'a' is callable }} {{ range is callable }} {{ 3 is gt 2 }} {{ 'x' is in 'xyz' }} {{ 5 is divisibleby 3 }} {{ 'ABC1' is upper }} {{ '123' is lower }} {{ none is sameas none }} {{ false is false }} {{ 0 is false }}`, "True True False False True False False True True True False True False True True False"},
	{`{{ 'héllo wörld'[1:8:2] }} {{ 'héllo'[-2:] }} {{ 'héllo'[10:] }}|{{ [1, 2, 3, 4, 5][1:-1] }} {{ [1, 2, 3, 4, 5][::-3] }} {{ [1, 2, 3, 4, 5][-2:1:-1] }} {{ [1, 2, 3][5:1] }} {{ 'abc'[none:2] }}`, "él ö lo |[2, 3, 4] [5, 2] [4, 3] [] ab"},
	{`{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.revindex }}-{{ loop.index0 }};{% endfor %}{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{% endfor %}{% endfor %}`, "-2-3-0;1-3-2-1;2--1-2;11211222"},
	{`{% set x = 'outer' %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 'later' %}{{ m() }} {% macro n(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ n('q') }} {% macro c() %}<{{ caller('v') }}>{% endmacro %}{% call(z) c() %}{{ z|upper }}{% endcall %}`, "later q! <V>"},
	{`{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }} {% set a, b = [1, 2] %}{{ b }}{{ a }} {% set t = 1, 2 %}{{ t|list }} {% if true %}{% set inner = 5 %}{% endif %}{{ inner }}`, "2x 21 [1, 2] 5"},
	{`{{ 1 if 0 else 2 if 0 else 3 }} {{ none or 'x' }} {{ 0 and 'x' }} {{ not none }} {{ not 'a' == 'b' }} {{ x is not defined and 'u' }}`, "3 x 0 True True u"},
	{`{%- set content = 'A' -%}
{{ content }}
  {{- 'B' -}}
{{ 'C' }}`, "ABC"},
	{`    {% for i in [1, 2] %}
        {{ i }}
    {% endfor %}
end`, "        1\n        2\nend"},
	{`{# c1 #}
x{#- c2 #}
   y  {#- c3 -#}   z
{# c4 +#}
w`, "x   yz\n\nw"},
	{`{% filter upper %}ab{% endfilter %}|{% filter trim|upper %}  cd  {% endfilter %}|{% set s | trim %}  ef  {% endset %}{{ s }}`, "AB|CD|ef"},
	{`{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([['p', 1]]) }} {{ namespace(z=3).z }} {% set j = joiner() %}{{ j() }}{{ j() }}{{ j() }}`, "{'a': 1, 'b': 2} {'x': 1, 'y': 2} {'p': 1} 3 , , "},
	{`{{ 'a' 'b' }} {{ "x\ty" }} {{ 'q\'s' }} {{ "\x41\u00e9\101" }} {{ 'back\\slash' }} {{ 'unknown\qescape' }}`, "ab x\ty q's AéA back\\slash unknown\\qescape"},
	{`{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000_000 }} {{ 1.5e3 }} {{ 1E2 }}`, "31 15 5 1000000 1500.0 100.0"},
}

// semanticsVars are templateSemantics' variables.
func semanticsVars() map[string]jinja.Value {
	msgs := jinja.NewList([]jinja.Value{
		tplDictOfPairs("role", "user", "content", "hi"),
		tplDictOfPairs("role", "assistant", "content", "<think>r</think>\n\nans"),
	})
	return map[string]jinja.Value{"messages": msgs, "n": jinja.NewInt(3), "s": jinja.NewString("héllo")}
}

// TestTemplateSemantics renders templateSemantics.
func TestTemplateSemantics(t *testing.T) {
	vars := semanticsVars()
	for _, c := range templateSemantics {
		got, err := renderTemplate(c.src, vars)
		if err != nil || got != c.want {
			t.Errorf("%s\nrendered %q (%v)\nwant     %q", c.src, got, err, c.want)
		}
	}
}

// tplDictOfPairs makes a dict of string keys and values.
func tplDictOfPairs(kv ...string) jinja.Value {
	d := jinja.NewDict()
	for i := 0; i+1 < len(kv); i += 2 {
		d.AsDict().Set(kv[i], jinja.NewString(kv[i+1]))
	}
	return d
}

// TestTemplateErrors: Python's errors (where the jinja library gave 0,
// wrapped, or rendered nonsense) and syntax errors, each with its line.
func TestTemplateErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"{{ 1 // 0 }}", "line 1: integer division by zero"},
		{"\n{{ 1 % 0 }}", "line 2: integer modulo by zero"},
		{"{{ 1 / 0 }}", "division by zero"},
		{"{{ 1.5 // 0 }}", "float floor division by zero"},
		{"{{ 9223372036854775807 + 1 }}", "integer overflow"},
		{"{{ -9223372036854775807 - 2 }}", "integer overflow"},
		{"{{ 3037000500 * 3037000500 }}", "integer overflow"},
		{"{{ 2 ** 64 }}", "integer overflow"},
		{"{{ -(-9223372036854775807 - 1) }}", "integer overflow"},
		{"{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"},
		{"{{ (-9223372036854775807 - 1)|abs }}", "integer overflow"},
		{"{{ [1, 2, 3]|sum + 9223372036854775807 }}", "integer overflow"},
		{"{{ 9223372036854775808 }}", "out of range"},
		{"{{ 0 ** -1 }}", "zero cannot be raised to a negative power"},
		{"{{ 2.0 ** 10000 }}", "too large"},
		{"{{ 'abc'[::0] }}", "slice step cannot be zero"},
		{"{{ 'abc'[1.5:] }}", "slice indices must be integers"},
		{"{{ 1 - 'a' }}", "unsupported operand types for -: 'int' and 'str'"},
		{"{{ none + 1 }}", "unsupported operand types"},
		{"{{ 'a' + none }}", `can only concatenate str (not "NoneType") to str`},
		{"{{ 1 + 'a' }}", "unsupported operand types for +: 'int' and 'str'"},
		{"{{ 'a' < 1 }}", "'<' not supported between instances of 'str' and 'int'"},
		{"{{ nope() }}", "nope is undefined"},
		{"{{ 'a'.nope() }}", "no method nope()"},
		{"{{ 1|nope }}", `no filter named "nope"`},
		{"{{ 1 is nope }}", `no test named "nope"`},
		{"{{ range(1, 2, 0) }}", "must not be zero"},
		{"{{ '%d' % 'a' }}", "a number is required"},
		{"{{ '%s %s' % 'a' }}", "not enough arguments"},
		{"{{ '%s' % ('a', 'b') }}", "not all arguments converted"},
		{"{% for a, b in [1] %}{% endfor %}", "cannot unpack"},
		{"{{ raise_exception('no way') }}", "no way"},
		{"{{ 'x' in none }}", "argument of type 'NoneType' is not iterable"},
		{"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable"},
		{"{% set l = [] %}{{ l[5].role }}", "l[...] is undefined, and so has no .role"},
		{"{{ nope['a'] }}", "nope is undefined, and so has no [...]"},
		{"{{ nope[1:] }}", "nope is undefined, and so has no slice"},
		{"{{ '{}{0}'.format(1) }}", "cannot switch from automatic field numbering to manual"},
		{"{{ [].append(1) }}", "list.append() would change a list"},
		{"{{ {}.update({}) }}", "dict.update() would change a dict"},
		{"{% set d = {} %}{% set d.x = 1 %}", "cannot set d.x: d is dict, not a namespace()"},
		{"{% if x %}", "{% if %} is never closed ({% endif %})"},
		{"{% for x in y %}{% endif %}", "unexpected {% endif %}"},
		{"{% endfor %}", "unexpected {% endfor %}"},
		{"{% break %}", "outside a loop"},
		{"{{ x", "never closed"},
		{"{{ 'x }}", "never closed"},
		{"{# x", "never closed"},
		{"{{ (1 }}", `unexpected "}"`},
		{"{{ (1 ", "never closed"},
		{"{{ 1) }}", `unexpected ")"`},
		{"{{ [1} }}", `unexpected "}"`},
		{"{{ 1 + }}", "expected an expression"},
		{"{{ a b }}", `unexpected "b"`},
		{"{{ @ }}", "unexpected character"},
		{"{% frobnicate %}", `unknown tag "frobnicate"`},
		{"{% include 'other.jinja' %}", `unknown tag "include"`},
		{"{% extends 'base' %}", `unknown tag "extends"`},
		{"{% raw %}x", "never closed"},
	} {
		_, err := renderTemplate(c.src, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
	}
}

// hostileTemplates are templates that ran the jinja library without end,
// out of memory, or to a panic or a fatal stack overflow, and more that
// would: each must end with an error within the limits, at once.
var hostileTemplates = []struct {
	name, src, want string
}{
	{"repeat 10^12", "{{ 'a' * 10**12 }}", "repeats a string of 1 bytes 1000000000000 times"},
	{"repeat list 10^9", "{{ ([0] * 10**9)|length }}", "repeats a list of 1 items 1000000000 times"},
	{"write 3 GB", "{% for i in range(3000) %}{{ 'x' * 1000000 }}{% endfor %}", "the rendering is more than"},
	{"recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "call each other more than 100 deep"},
	{"recursion through call", "{% macro m() %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}", "call each other more than 100 deep"},
	{"recursion through caller", "{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}", "call each other more than 100 deep"},
	{"recursive loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", "call each other more than 100 deep"},
	{"10^6 nested parentheses", "{{ " + strings.Repeat("(", 1e6) + "1" + strings.Repeat(")", 1e6) + " }}", "the template is 2000007 bytes, more than the limit of 1048576"},
	{"4*10^5 nested parentheses", "{{ " + strings.Repeat("(", 4e5) + "1" + strings.Repeat(")", 4e5) + " }}", "brackets nest more than 256 deep"},
	{"10^5 nested lists", "{{ " + strings.Repeat("[", 1e5) + strings.Repeat("]", 1e5) + " }}", "brackets nest more than 256 deep"},
	{"10^5 nested ifs", strings.Repeat("{% if true %}", 1e5) + "x" + strings.Repeat("{% endif %}", 1e5), "the template is 2400001 bytes"},
	{"4*10^4 nested ifs", strings.Repeat("{% if true %}", 4e4) + "x" + strings.Repeat("{% endif %}", 4e4), "nests deeper than 256 levels"},
	{"3*10^4 nested for loops", strings.Repeat("{% for x in y %}", 3e4) + strings.Repeat("{% endfor %}", 3e4), "nests deeper than 256 levels"},
	{"3*10^4 nested macros", strings.Repeat("{% macro m() %}", 3e4) + strings.Repeat("{% endmacro %}", 3e4), "nests deeper than 256 levels"},
	{"10^5 nots", "{{ " + strings.Repeat("not ", 1e5) + "x }}", "nests deeper than 256 levels"},
	{"10^5 minuses", "{{ " + strings.Repeat("-", 1e5) + "1 }}", "nests deeper than 256 levels"},
	{"10^5 additions", "{{ 1" + strings.Repeat(" + 1", 1e5) + " }}", "nests deeper than 256 levels"},
	{"10^5 attributes", "{{ x" + strings.Repeat(".a", 1e5) + " }}", "nests deeper than 256 levels"},
	{"10^5 filters", "{{ x" + strings.Repeat("|trim", 1e5) + " }}", "nests deeper than 256 levels"},
	{"8*10^4 conditionals", "{{ 1" + strings.Repeat(" if x else 1", 8e4) + " }}", "nests deeper than 256 levels"},
	{"range 10^12", "{% for i in range(10**12) %}{% endfor %}", "range() of 1000000000000 items"},
	{"empty loop over range 3*10^7", "{% for i in range(3*10**7) %}{% endfor %}", "range() of 30000000 items"},
	{"range of 2^64 - 1", "{{ range(-9223372036854775807 - 1, 9223372036854775807)|length }}", "range() of 18446744073709551615 items"},
	{"range 2^62 by 1", "{{ range(0, 2**62, 1)|length }}", "range() of 4611686018427387904 items"},
	{"nested loops 10^9", "{% for i in range(30000) %}{% for j in range(30000) %}{% endfor %}{% endfor %}", "steps"},
	{"nested loops over a list 4*10^6", "{% set l = range(2000)|list %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}", "runs more than"},
	{"a million writes", "{% for i in range(1000) %}{% for j in range(1000) %}{{ i }}{% endfor %}{% endfor %}", "runs more than"},
	{"doubling a string", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "builds a string of"},
	{"doubling with +", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "builds a string of"},
	{"doubling a list", "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "builds a list of"},
	{"many strings held", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}", "builds or scans more than"},
	{"huge join", "{{ (['x' * 100000] * 1000)|join }}", "builds a string of"},
	{"join with a huge separator", "{{ range(1000)|join('x' * 1000000) }}", "builds a string of"},
	{"percent width", "{{ '%999999999999s' % 'a' }}", "over the limit"},
	{"percent star width", "{{ '%*d' % (10**12, 1) }}", "builds a string of"},
	{"percent precision", "{{ '%.999999999f' % 1 }}", "over the limit"},
	{"format width", "{{ '{:>999999999999}'.format(1) }}", "over the limit"},
	{"replace amplification", "{{ ('a' * 1000)|replace('a', 'a' * 1000)|replace('a', 'a' * 1000) }}", "builds a string of"},
	{"replace empty amplification", "{{ ('a' * 100000).replace('', 'b' * 1000) }}", "builds a string of"},
	{"center 10^12", "{{ 'x'.center(10**12) }}", "builds a string of"},
	{"center filter 10^12", "{{ 'x'|center(10**12) }}", "builds a string of"},
	{"indent 10^12", "{{ 'x\ny'|indent(10**12) }}", "builds a string of"},
	{"indent of many lines", "{{ ('a\n' * 100000)|indent(1000) }}", "builds a string of"},
	{"tojson indent", "{{ range(100000)|list|tojson(indent=1000) }}", "over the limit"},
	{"strftime_now of a huge format", "{{ strftime_now('%A' * 400000) }}", "builds a string of"},
	{"iterate a huge string", "{% for c in 'x' * 1000000 %}{% endfor %}", "runs more than"},
	{"namespace holding itself, printed", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nests more than 512 deep"},
	{"namespace holding itself twice, as JSON", "{% set ns = namespace() %}{% set ns.a = ns %}{% set ns.b = ns %}{{ ns|tojson }}", "nests more than 512 deep"},
	{"namespace holding itself, compared", "{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns == ns }}", "nests more than 512 deep"},
	{"namespace holding itself, sorted", "{% set ns = namespace() %}{% set ns.me = [ns] %}{{ [ns.me, ns.me]|sort }}", "nests more than 512 deep"},
	{"2^60 paths printed", "{% set ns = namespace(x=1) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}", "builds a string of"},
	{"2^60 paths compared", "{% set ns = namespace(x=1) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x == ns.x }}", "runs more than"},
	{"2^60 paths as JSON", "{% set ns = namespace(x=1) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x|tojson|length }}", "builds a string of"},
	{"map of map 10^5 deep", "{% set ns = namespace(x=[1]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|map(" + strings.Repeat("'map', ", 100000) + "'string')|list|length }}", "|map applies |map more than 100 deep"},
	{"JSON nested 10^5 deep", "{{ ('[' * 100000 ~ ']' * 100000)|fromjson }}", "the JSON nests 100000 deep"},
	{"10^5 nested lists by a loop", "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", "nests more than 512 deep"},
	{"sort of a million", "{{ (range(500000)|list + range(500000)|list)|sort|length }}", "steps"},
	{"big template", strings.Repeat("x", 2<<20), "the template is 2097152 bytes"},
	{"include", "{% include 'x' %}", `unknown tag "include"`},
	{"division by zero", "{{ 1 // 0 }}", "integer division by zero"},
	{"overflow", "{{ 2 ** 63 }}", "integer overflow"},
}

// TestTemplateHostile runs the hostile templates in a process of its own
// under a 2 GiB address-space limit (ulimit -v: 1 GiB leaves cgo's
// threads no stacks) and within 512 MiB of RSS, each within seconds and
// 256 MiB of allocations (TestTemplateHostileCases).
func TestTemplateHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the hostile templates as a process")
	}
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -v %d; exec %s -test.run '^TestTemplateHostileCases$' -test.v", 2<<20, os.Args[0]))
	cmd.Env = append(os.Environ(), "MEMFIT_TEMPLATE_HOSTILE=1", "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestTemplateHostileCases") {
		t.Fatalf("%v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
	if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && u.Maxrss<<10 > 512<<20 {
		t.Errorf("peak RSS %d MiB", u.Maxrss>>10)
	}
}

// TestTemplateHostileCases is TestTemplateHostile's process.
func TestTemplateHostileCases(t *testing.T) {
	if os.Getenv("MEMFIT_TEMPLATE_HOSTILE") == "" {
		t.Skip("run by TestTemplateHostile")
	}
	msgs := jinja.NewList([]jinja.Value{tplDictOfPairs("role", "user", "content", "hi")})
	for _, c := range hostileTemplates {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := renderTemplate(c.src, map[string]jinja.Value{"messages": msgs})
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		if took > 2*time.Second {
			t.Errorf("%s: took %v", c.name, took)
		}
		if alloc > 256<<20 {
			t.Errorf("%s: allocated %d MiB", c.name, alloc>>20)
		}
		msg := ""
		if err != nil {
			msg = tplClip(err.Error(), 160)
		}
		t.Logf("%-36s %8.1f ms %6d MiB  %s", c.name, took.Seconds()*1000, alloc>>20, msg)
	}
}
