package data

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tplMaxPrecision bounds a format's precision (Python's goes on to
// megabytes of digits).
const tplMaxPrecision = 1000

// readCount reads the digits at s[i:] as a width or precision, an error
// past max.
func (r *tplRenderer) readCount(s string, i int, limit int64) (int64, int, error) {
	n := int64(0)
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int64(s[i]-'0')
		if n > limit {
			return 0, i, r.errf("a format's width or precision of more than %d is over the limit", limit)
		}
		i++
	}
	return n, i, nil
}

// percentFormat is Python's format % arg: a tuple's items (tuple: arg
// is one, not a list), a mapping's values by key, or one value.
func (r *tplRenderer) percentFormat(f string, arg jinja.Value, tuple bool) (jinja.Value, error) {
	undef := jinja.Undefined()
	args := []jinja.Value{arg}
	var mapping *jinja.Dict
	switch {
	case tuple && arg.IsList():
		args = arg.AsList().Items
	case arg.IsDict():
		mapping = arg.AsDict()
	}
	next := 0
	take := func() (jinja.Value, error) {
		if next >= len(args) {
			return undef, r.errf("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	b := &tplBuf{r: r}
	for i := 0; i < len(f); {
		j := strings.IndexByte(f[i:], '%')
		if j < 0 {
			b.str(f[i:])
			break
		}
		b.str(f[i : i+j])
		i += j + 1
		if i >= len(f) {
			return undef, r.errf("incomplete format")
		}
		var key *string
		if f[i] == '(' {
			k := strings.IndexByte(f[i:], ')')
			if k < 0 {
				return undef, r.errf("incomplete format key")
			}
			name := f[i+1 : i+k]
			key = &name
			i += k + 1
		}
		flags := ""
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			flags += f[i : i+1]
			i++
		}
		width, prec := int64(-1), int64(-1)
		var err error
		if i < len(f) && f[i] == '*' {
			i++
			v, err := take()
			if err != nil {
				return undef, err
			}
			if !tplIsInt(v) {
				return undef, r.errf("* wants int")
			}
			if width = tplInt(v); width < 0 {
				flags, width = flags+"-", -width
			}
			if width > r.lim.Output {
				return undef, r.tooLong(width)
			}
		} else if i < len(f) && f[i] >= '0' && f[i] <= '9' {
			if width, i, err = r.readCount(f, i, r.lim.Output); err != nil {
				return undef, err
			}
		}
		if i < len(f) && f[i] == '.' {
			i++
			if i < len(f) && f[i] == '*' {
				i++
				v, err := take()
				if err != nil {
					return undef, err
				}
				if !tplIsInt(v) {
					return undef, r.errf("* wants int")
				}
				prec = max(tplInt(v), 0)
			} else if prec, i, err = r.readCount(f, i, r.lim.Output); err != nil {
				return undef, err
			}
		}
		for i < len(f) && strings.IndexByte("hlL", f[i]) >= 0 {
			i++
		}
		if i >= len(f) {
			return undef, r.errf("incomplete format")
		}
		conv := f[i]
		i++
		if conv == '%' {
			b.byte('%')
			continue
		}
		var v jinja.Value
		if key != nil {
			if mapping == nil {
				return undef, r.errf("format requires a mapping")
			}
			x, ok := mapping.Get(*key)
			if !ok {
				return undef, r.errf("format: no key %q", tplClip(*key, 80))
			}
			v = x
		} else if v, err = take(); err != nil {
			return undef, err
		}
		s, err := r.formatPercent(conv, v, flags, width, prec)
		if err != nil {
			return undef, err
		}
		b.str(s)
		if b.err != nil {
			return undef, b.err
		}
	}
	if mapping == nil && next < len(args) {
		return undef, r.errf("not all arguments converted during string formatting")
	}
	s, err := b.done()
	return jinja.NewString(s), err
}

// formatPercent formats one value of a % format.
func (r *tplRenderer) formatPercent(conv byte, v jinja.Value, flags string, width, prec int64) (string, error) {
	switch conv {
	case 's', 'r', 'a':
		var s string
		var err error
		if conv == 's' {
			s, err = r.str(v)
		} else {
			b := &tplBuf{r: r}
			b.repr(v, 0)
			s, err = b.done()
		}
		if err != nil {
			return "", err
		}
		if prec >= 0 && int64(utf8.RuneCountInString(s)) > prec {
			s = string([]rune(s)[:prec])
		}
		align := byte('>')
		if strings.Contains(flags, "-") {
			align = '<'
		}
		return r.padTo(s, width, " ", align)
	case 'd', 'i', 'u', 'x', 'X', 'o', 'c':
		if !tplIsNumber(v) {
			if conv == 'c' && v.IsString() && utf8.RuneCountInString(v.AsString()) == 1 {
				return r.padTo(v.AsString(), width, " ", map[bool]byte{true: '<', false: '>'}[strings.Contains(flags, "-")])
			}
			return "", r.errf("%%%c format: a number is required, not %s", conv, tplType(v))
		}
		var n int64
		if v.IsFloat() {
			f := v.AsFloat()
			if conv != 'd' && conv != 'i' && conv != 'u' {
				return "", r.errf("%%%c format: an integer is required, not float", conv)
			}
			if math.IsNaN(f) || math.IsInf(f, 0) || f >= 0x1p63 || f < -0x1p63 {
				return "", r.errf("%%%c format: %s cannot be an integer", conv, tplFloatRepr(f))
			}
			n = int64(f)
		} else {
			n = tplInt(v)
		}
		if conv == 'c' {
			if n < 0 || n > 0x10ffff {
				return "", r.errf("%%c arg not in range(0x110000)")
			}
			return r.padTo(string(rune(n)), width, " ", map[bool]byte{true: '<', false: '>'}[strings.Contains(flags, "-")])
		}
		verb := map[byte]string{'d': "d", 'i': "d", 'u': "d", 'x': "x", 'X': "X", 'o': "o"}[conv]
		if conv == 'o' && strings.Contains(flags, "#") {
			verb = "O"
		}
		return r.goFormat(flags, width, prec, verb, n)
	case 'e', 'E', 'f', 'F', 'g', 'G':
		if !tplIsNumber(v) {
			return "", r.errf("%%%c format: a number is required, not %s", conv, tplType(v))
		}
		f := tplFloat(v)
		if prec > tplMaxPrecision {
			return "", r.errf("a format's precision of %d is over the limit of %d", prec, tplMaxPrecision)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			s := map[bool]string{true: "nan", false: "inf"}[math.IsNaN(f)]
			if math.IsInf(f, -1) {
				s = "-inf"
			} else if strings.Contains(flags, "+") {
				s = "+" + s
			}
			if conv >= 'A' && conv <= 'Z' {
				s = strings.ToUpper(s)
			}
			return r.padTo(s, width, " ", map[bool]byte{true: '<', false: '>'}[strings.Contains(flags, "-")])
		}
		if prec < 0 {
			prec = 6
		}
		if conv == 'F' {
			conv = 'f'
		}
		return r.goFormat(flags, width, prec, string(conv), f)
	}
	return "", r.errf("unsupported format character %q", conv)
}

// goFormat formats x with Go's fmt, whose flags are Python's here.
func (r *tplRenderer) goFormat(flags string, width, prec int64, verb string, x any) (string, error) {
	if width > r.lim.Output {
		return "", r.tooLong(width)
	}
	if err := r.spend(max(width, 0) + max(prec, 0) + 32); err != nil {
		return "", err
	}
	spec := "%" + flags
	if width >= 0 {
		spec += strconv.FormatInt(width, 10)
	}
	if prec >= 0 {
		spec += "." + strconv.FormatInt(prec, 10)
	}
	return fmt.Sprintf(spec+verb, x), nil
}

// padTo pads s (by characters) to width with fill, aligned left ('<'),
// right ('>') or centered ('^').
func (r *tplRenderer) padTo(s string, width int64, fill string, align byte) (string, error) {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s, nil
	}
	if width > r.lim.Output {
		return "", r.tooLong(width)
	}
	marg := width - n
	if err := r.newString(int64(len(s)) + marg*int64(len(fill))); err != nil {
		return "", err
	}
	switch align {
	case '<':
		return s + strings.Repeat(fill, int(marg)), nil
	case '^':
		return strings.Repeat(fill, int(marg/2)) + s + strings.Repeat(fill, int(marg-marg/2)), nil
	}
	return strings.Repeat(fill, int(marg)) + s, nil
}

// strFormat is Python's str.format with automatic, numbered and named
// fields, !r and !s, and format specs.
func (r *tplRenderer) strFormat(f string, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	auto, manual := 0, false
	b := &tplBuf{r: r}
	for i := 0; i < len(f); {
		switch c := f[i]; {
		case c == '{' && i+1 < len(f) && f[i+1] == '{':
			b.byte('{')
			i += 2
		case c == '}' && i+1 < len(f) && f[i+1] == '}':
			b.byte('}')
			i += 2
		case c == '}':
			return undef, r.errf("single '}' encountered in format string")
		case c == '{':
			// The field, up to its matching '}' (a spec may hold one
			// level of fields: {0:>{1}}).
			k, depth := 1, 1
			for ; i+k < len(f) && depth > 0; k++ {
				switch f[i+k] {
				case '{':
					depth++
				case '}':
					depth--
				}
			}
			if depth > 0 {
				return undef, r.errf("single '{' encountered in format string")
			}
			field := f[i+1 : i+k-1]
			i += k
			name, spec, _ := strings.Cut(field, ":")
			if strings.ContainsRune(name, '{') || strings.Count(spec, "{") > 1 {
				return undef, r.errf("format fields nest too deep")
			}
			if j := strings.IndexByte(spec, '{'); j >= 0 {
				e := strings.IndexByte(spec[j:], '}')
				if e < 0 {
					return undef, r.errf("unmatched '{' in format spec")
				}
				inner := spec[j+1 : j+e]
				var v jinja.Value
				var ok bool
				switch {
				case inner == "":
					v, ok = a.get(auto, "\x00")
					auto++
				case strings.Trim(inner, "0123456789") == "":
					n, _ := strconv.Atoi(inner)
					v, ok = a.get(n, "\x00")
					manual = true
				default:
					v, ok = a.get(-1, inner)
				}
				if !ok {
					return undef, r.errf("format: no argument for the field {%s}", tplClip(inner, 40))
				}
				s, err := r.str(v)
				if err != nil {
					return undef, err
				}
				spec = spec[:j] + s + spec[j+e+1:]
			}
			conv := ""
			if j := strings.IndexByte(name, '!'); j >= 0 {
				name, conv = name[:j], name[j+1:]
			}
			var v jinja.Value
			var ok bool
			switch {
			case name == "":
				if manual {
					return undef, r.errf("cannot switch from manual field numbering to automatic field numbering")
				}
				v, ok = a.get(auto, "\x00")
				auto++
			case strings.Trim(name, "0123456789") == "":
				if auto > 0 {
					return undef, r.errf("cannot switch from automatic field numbering to manual field numbering")
				}
				manual = true
				n, err := strconv.Atoi(name)
				if err != nil {
					return undef, r.errf("format field %q is out of range", tplClip(name, 40))
				}
				v, ok = a.get(n, "\x00")
			default:
				v, ok = a.get(-1, name)
			}
			if !ok {
				return undef, r.errf("format: no argument for the field {%s}", tplClip(name, 40))
			}
			switch conv {
			case "r", "a":
				rb := &tplBuf{r: r}
				rb.repr(v, 0)
				s, err := rb.done()
				if err != nil {
					return undef, err
				}
				v = jinja.NewString(s)
			case "s":
				s, err := r.str(v)
				if err != nil {
					return undef, err
				}
				v = jinja.NewString(s)
			case "":
			default:
				return undef, r.errf("unknown conversion !%s", tplClip(conv, 10))
			}
			s, err := r.formatSpec(v, spec)
			if err != nil {
				return undef, err
			}
			b.str(s)
		default:
			j := strings.IndexAny(f[i:], "{}")
			if j < 0 {
				j = len(f) - i
			}
			b.str(f[i : i+j])
			i += j
		}
		if b.err != nil {
			return undef, b.err
		}
	}
	s, err := b.done()
	return jinja.NewString(s), err
}

// formatSpec is Python's format(v, spec):
// [[fill]align][sign][#][0][width][,|_][.precision][type].
func (r *tplRenderer) formatSpec(v jinja.Value, spec string) (string, error) {
	if spec == "" {
		return r.str(v)
	}
	fill, align := " ", byte(0)
	if c, n := utf8.DecodeRuneInString(spec); n > 0 && len(spec) > n && strings.IndexByte("<>=^", spec[n]) >= 0 {
		fill, align, spec = string(c), spec[n], spec[n+1:]
	} else if len(spec) > 0 && strings.IndexByte("<>=^", spec[0]) >= 0 {
		align, spec = spec[0], spec[1:]
	}
	sign := ""
	if len(spec) > 0 && strings.IndexByte("+- ", spec[0]) >= 0 {
		sign, spec = spec[:1], spec[1:]
	}
	alt := false
	if len(spec) > 0 && spec[0] == '#' {
		alt, spec = true, spec[1:]
	}
	if len(spec) > 0 && spec[0] == '0' {
		if align == 0 {
			fill, align = "0", '='
		}
		spec = spec[1:]
	}
	width, i, err := r.readCount(spec, 0, r.lim.Output)
	if err != nil {
		return "", err
	}
	if i == 0 {
		width = -1
	}
	spec = spec[i:]
	grouping := ""
	if len(spec) > 0 && (spec[0] == ',' || spec[0] == '_') {
		grouping, spec = spec[:1], spec[1:]
	}
	prec := int64(-1)
	if len(spec) > 0 && spec[0] == '.' {
		if prec, i, err = r.readCount(spec, 1, r.lim.Output); err != nil {
			return "", err
		}
		spec = spec[i:]
	}
	typ := byte(0)
	if len(spec) == 1 {
		typ, spec = spec[0], ""
	}
	if spec != "" {
		return "", r.errf("invalid format spec")
	}
	var body string
	numeric := false
	switch {
	case v.IsString() || typ == 's' || !tplIsNumber(v):
		if typ != 0 && typ != 's' {
			return "", r.errf("unknown format code %q for a %s", typ, tplType(v))
		}
		s, err := r.str(v)
		if err != nil {
			return "", err
		}
		if prec >= 0 && int64(utf8.RuneCountInString(s)) > prec {
			s = string([]rune(s)[:prec])
		}
		body = s
		if align == 0 {
			align = '<'
		}
	case strings.IndexByte("eEfFgG%", typ) >= 0 || typ == 0 && v.IsFloat():
		numeric = true
		f := tplFloat(v)
		if prec > tplMaxPrecision {
			return "", r.errf("a format's precision of %d is over the limit of %d", prec, tplMaxPrecision)
		}
		switch {
		case typ == '%':
			p := prec
			if p < 0 {
				p = 6
			}
			body = strconv.FormatFloat(math.Abs(f)*100, 'f', int(p), 64) + "%"
		case typ == 0 && prec < 0:
			body = tplFloatRepr(math.Abs(f))
		case typ == 0:
			body = strconv.FormatFloat(math.Abs(f), 'g', int(max(prec, 1)), 64)
		default:
			if prec < 0 {
				prec = 6
			}
			t := typ
			if t == 'F' {
				t = 'f'
			}
			body = fmt.Sprintf("%."+strconv.FormatInt(prec, 10)+string(t), math.Abs(f))
		}
		if grouping != "" {
			intPart, rest := body, ""
			if j := strings.IndexFunc(body, func(c rune) bool { return c < '0' || c > '9' }); j >= 0 {
				intPart, rest = body[:j], body[j:]
			}
			body = tplThousands(intPart, grouping) + rest
		}
		if math.Signbit(f) {
			sign = "-"
		} else if sign == "-" {
			sign = ""
		}
	default:
		numeric = true
		if v.IsFloat() {
			return "", r.errf("unknown format code %q for a float", typ)
		}
		n := tplInt(v)
		if typ == 'c' {
			if n < 0 || n > 0x10ffff {
				return "", r.errf("%%c arg not in range(0x110000)")
			}
			body, numeric = string(rune(n)), false
			break
		}
		base, prefix := 10, ""
		switch typ {
		case 'x':
			base, prefix = 16, "0x"
		case 'X':
			base, prefix = 16, "0X"
		case 'o':
			base, prefix = 8, "0o"
		case 'b':
			base, prefix = 2, "0b"
		case 0, 'd', 'n':
		default:
			return "", r.errf("unknown format code %q for an int", typ)
		}
		u := uint64(n)
		if n < 0 {
			u = -u
		}
		body = strconv.FormatUint(u, base)
		if typ == 'X' {
			body = strings.ToUpper(body)
		}
		if grouping != "" && base == 10 {
			body = tplThousands(body, grouping)
		}
		if alt {
			body = prefix + body
		}
		if n < 0 {
			sign = "-"
		} else if sign == "-" {
			sign = ""
		}
	}
	if !numeric {
		sign = ""
	}
	if align == 0 {
		align = '>'
	}
	if align == '=' {
		s, err := r.padTo(body, width-int64(utf8.RuneCountInString(sign)), fill, '>')
		return sign + s, err
	}
	return r.padTo(sign+body, width, fill, align)
}

// tplThousands puts sep between the thousands of the digits d.
func tplThousands(d, sep string) string {
	var g strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			g.WriteString(sep)
		}
		g.WriteRune(c)
	}
	return g.String()
}
