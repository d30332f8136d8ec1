package data

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tplType is the Python type name of v, for messages.
func tplType(v jinja.Value) string {
	switch {
	case v.IsString():
		return "str"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsBool():
		return "bool"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsNone():
		return "NoneType"
	case v.IsCallable():
		return "function"
	}
	return "Undefined"
}

// tplIsInt says whether v is an integer to Python (bools are).
func tplIsInt(v jinja.Value) bool { return v.IsInt() || v.IsBool() }

// tplInt is an integer (or bool) as an int64.
func tplInt(v jinja.Value) int64 {
	if v.IsBool() {
		if v.AsBool() {
			return 1
		}
		return 0
	}
	return v.AsInt()
}

// tplIsNumber says whether v is an int, a float or a bool.
func tplIsNumber(v jinja.Value) bool { return v.IsInt() || v.IsFloat() || v.IsBool() }

func tplFloat(v jinja.Value) float64 {
	if v.IsFloat() {
		return v.AsFloat()
	}
	return float64(tplInt(v))
}

// tplTruthy is Python's truth of v.
func tplTruthy(v jinja.Value) bool { return v.IsTruthy() }

// tplFloatRepr is Python's repr of a float.
func tplFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0 && math.Signbit(f):
		return "-0.0"
	case f == 0:
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// tplScalarStr is Python's str of a value that is not a list or a dict.
// Undefined prints as nothing, none as "None", as Python's Jinja.
func tplScalarStr(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return tplFloatRepr(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsNone():
		return tplNoneText
	case v.IsCallable():
		return "<function " + v.AsCallable().Name + ">"
	}
	return ""
}

// tplNoneText is how none prints: "None", as Python's str(None).
const tplNoneText = "None"

// tplStrRepr is Python's repr of a string.
func tplStrRepr(b *tplBuf, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.byte(q)
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		esc := ""
		switch {
		case r == rune(q) || r == '\\':
			esc = `\` + string(r)
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case r == '\t':
			esc = `\t`
		case r == utf8.RuneError && n == 1:
			esc = fmt.Sprintf(`\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			esc = fmt.Sprintf(`\x%02x`, r)
		case r >= 0x80 && !unicode.IsPrint(r):
			switch {
			case r < 0x100:
				esc = fmt.Sprintf(`\x%02x`, r)
			case r < 0x10000:
				esc = fmt.Sprintf(`\u%04x`, r)
			default:
				esc = fmt.Sprintf(`\U%08x`, r)
			}
		}
		if esc != "" {
			b.str(s[start:i])
			b.str(esc)
			start = i + n
		}
		i += n
	}
	b.str(s[start:])
	b.byte(q)
}

// tplBuf builds a string within the renderer's limit on a string's
// size, charging a step for every value it writes.
type tplBuf struct {
	r   *tplRenderer
	b   strings.Builder
	err error
}

func (b *tplBuf) str(s string) {
	if b.err != nil {
		return
	}
	if int64(b.b.Len())+int64(len(s)) > b.r.lim.Output {
		b.err = b.r.tooLong(int64(b.b.Len()) + int64(len(s)))
		return
	}
	b.b.WriteString(s)
}

func (b *tplBuf) byte(c byte) { b.str(string(rune(c))) }

// value charges a step for a value written depth deep, and says whether
// to go on.
func (b *tplBuf) value(depth int) bool {
	if b.err != nil {
		return false
	}
	if depth > tplMaxValueDepth {
		b.err = b.r.errf("a value nests more than %d deep (the limit; a list or dict holding itself?)", tplMaxValueDepth)
		return false
	}
	b.err = b.r.step()
	return b.err == nil
}

// done returns what was built, its bytes charged.
func (b *tplBuf) done() (string, error) {
	if b.err != nil {
		return "", b.err
	}
	if err := b.r.spend(int64(b.b.Len())); err != nil {
		return "", err
	}
	return b.b.String(), nil
}

// repr writes Python's repr of v.
func (b *tplBuf) repr(v jinja.Value, depth int) {
	if !b.value(depth) {
		return
	}
	switch {
	case v.IsString():
		tplStrRepr(b, v.AsString())
	case v.IsList():
		b.byte('[')
		for i, it := range v.AsList().Items {
			if i > 0 {
				b.str(", ")
			}
			b.repr(it, depth+1)
		}
		b.byte(']')
	case v.IsDict():
		d := v.AsDict()
		b.byte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.str(", ")
			}
			tplStrRepr(b, k)
			b.str(": ")
			b.repr(d.Data[k], depth+1)
		}
		b.byte('}')
	case v.IsUndefined():
		b.str("Undefined")
	case v.IsNone():
		b.str("None")
	default:
		b.str(tplScalarStr(v))
	}
}

// tplJSONOpts are tojson's options: Python's json.dumps with
// ensure_ascii off, as transformers' tojson.
type tplJSONOpts struct {
	indent    string // "" for none
	hasIndent bool
	item, key string // separators
	sortKeys  bool
}

// json writes v as JSON.
func (b *tplBuf) json(v jinja.Value, o *tplJSONOpts, depth int) {
	if !b.value(depth) {
		return
	}
	newline := func(level int) {
		if o.hasIndent {
			b.byte('\n')
			for range level {
				b.str(o.indent)
				if b.err != nil {
					return
				}
			}
		}
	}
	switch {
	case v.IsString():
		tplJSONString(b, v.AsString())
	case v.IsInt():
		b.str(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		switch f := v.AsFloat(); {
		case math.IsNaN(f):
			b.str("NaN")
		case math.IsInf(f, 1):
			b.str("Infinity")
		case math.IsInf(f, -1):
			b.str("-Infinity")
		default:
			b.str(tplFloatRepr(f))
		}
	case v.IsBool():
		if v.AsBool() {
			b.str("true")
		} else {
			b.str("false")
		}
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.str("[]")
			return
		}
		b.byte('[')
		for i, it := range items {
			if i > 0 {
				b.str(o.item)
			}
			newline(depth + 1)
			b.json(it, o, depth+1)
		}
		newline(depth)
		b.byte(']')
	case v.IsDict():
		d := v.AsDict()
		if len(d.Keys) == 0 {
			b.str("{}")
			return
		}
		keys := d.Keys
		if o.sortKeys {
			keys = slices.Clone(keys)
			slices.Sort(keys)
		}
		b.byte('{')
		for i, k := range keys {
			if i > 0 {
				b.str(o.item)
			}
			newline(depth + 1)
			tplJSONString(b, k)
			b.str(o.key)
			b.json(d.Data[k], o, depth+1)
		}
		newline(depth)
		b.byte('}')
	default:
		b.str("null")
	}
}

// tplJSONString writes s as a JSON string as Python's json.dumps does
// with ensure_ascii off: quotes, backslashes and control characters
// escaped, the rest as it is.
func tplJSONString(b *tplBuf, s string) {
	b.byte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		esc := ""
		switch {
		case c == '"':
			esc = `\"`
		case c == '\\':
			esc = `\\`
		case c == '\n':
			esc = `\n`
		case c == '\r':
			esc = `\r`
		case c == '\t':
			esc = `\t`
		case c == '\b':
			esc = `\b`
		case c == '\f':
			esc = `\f`
		case c < 0x20:
			esc = fmt.Sprintf(`\u%04x`, c)
		}
		if esc != "" {
			b.str(s[start:i])
			b.str(esc)
			start = i + 1
		}
	}
	b.str(s[start:])
	b.byte('"')
}

// Integer arithmetic as Python's, an error where 64 bits do not hold the
// result.

func tplAdd(a, b int64) (int64, bool) {
	s := a + b
	return s, (s > a) == (b > 0)
}

func tplSub(a, b int64) (int64, bool) {
	s := a - b
	return s, (s < a) == (b > 0)
}

func tplMul(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if (c < 0) != ((a < 0) != (b < 0)) || c/b != a {
		return 0, false
	}
	return c, true
}

// tplFloorDiv is Python's a // b, b not 0.
func tplFloorDiv(a, b int64) (int64, bool) {
	if a == math.MinInt64 && b == -1 {
		return 0, false
	}
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q, true
}

// tplMod is Python's a % b, b not 0 (the sign of b).
func tplMod(a, b int64) int64 {
	if b == -1 {
		return 0
	}
	m := a % b
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

// tplPow is a ** b for b >= 0.
func tplPow(a, b int64) (int64, bool) {
	r := int64(1)
	for b > 0 {
		if b&1 == 1 {
			var ok bool
			if r, ok = tplMul(r, a); !ok {
				return 0, false
			}
		}
		b >>= 1
		if b > 0 {
			var ok bool
			if a, ok = tplMul(a, a); !ok {
				return 0, false
			}
		}
	}
	return r, true
}

// tplFloatMod is Python's float a % b, b not 0.
func tplFloatMod(a, b float64) float64 {
	m := math.Mod(a, b)
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}
