package data

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tplTokKind is what a token of a template is.
type tplTokKind uint8

const (
	tkText       tplTokKind = iota // text between tags, whitespace control applied
	tkVarBegin                     // {{
	tkVarEnd                       // }}
	tkBlockBegin                   // {%
	tkBlockEnd                     // %}
	tkName
	tkInt
	tkFloat
	tkString
	tkOp // an operator or punctuation: val holds it
	tkEOF
)

// tplTok is a token: its kind, its text (the text, name, operator or a
// string literal's value), a number's value, and its line.
type tplTok struct {
	kind tplTokKind
	val  string
	num  int64
	fnum float64
	line int
}

func (t tplTok) String() string {
	switch t.kind {
	case tkText:
		return "text"
	case tkVarBegin:
		return "'{{'"
	case tkVarEnd:
		return "'}}'"
	case tkBlockBegin:
		return "'{%'"
	case tkBlockEnd:
		return "'%}'"
	case tkString:
		return "a string"
	case tkInt, tkFloat:
		return "a number"
	case tkEOF:
		return "the end of the template"
	}
	return strconv.Quote(tplClip(t.val, 40))
}

// tplClip shortens s to at most n bytes (at a character boundary) for a
// message.
func tplClip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// tplLexer splits a template into tokens as Jinja's lexer does under
// transformers' settings: trim_blocks (the first newline after a block or
// comment tag is removed), lstrip_blocks (spaces and tabs before a block
// or comment tag at the start of a line are removed), "-" beside a
// delimiter removing all whitespace on its side and "+" disabling
// lstrip_blocks or trim_blocks there, newlines normalised to "\n" and one
// at the very end dropped (keep_trailing_newline off).
type tplLexer struct {
	src  string
	pos  int
	line int
	toks []tplTok
	// lineStarting says whether the last tag ended at the start of a
	// line (Jinja's line_starting), which lstrip_blocks needs for text
	// with no newline of its own.
	lineStarting bool
}

var tplEndRaw = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%\}`)

func tplLex(src string) ([]tplTok, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	lx := &tplLexer{src: src, line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, tplTok{kind: tkEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *tplLexer) errf(line int, format string, args ...any) error {
	return &tplError{line: line, msg: fmt.Sprintf(format, args...)}
}

// advance moves to position to, counting lines.
func (lx *tplLexer) advance(to int) {
	lx.line += strings.Count(lx.src[lx.pos:to], "\n")
	lx.pos = to
}

func (lx *tplLexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		// The next tag.
		i, from := -1, lx.pos
		for {
			k := strings.IndexByte(src[from:], '{')
			if k < 0 || from+k+1 >= len(src) {
				break
			}
			if c := src[from+k+1]; c == '{' || c == '%' || c == '#' {
				i = from + k
				break
			}
			from += k + 1
		}
		if i < 0 {
			lx.text(src[lx.pos:], lx.line)
			lx.advance(len(src))
			return nil
		}
		kind := src[i+1]
		sign := byte(0)
		if j := i + 2; j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
		}
		text, textLine := lx.leftStrip(src[lx.pos:i], kind != '{', sign), lx.line
		lx.text(text, textLine)
		lx.advance(i)
		tagLine := lx.line
		start := i + 2
		if sign != 0 {
			start++
		}
		if kind == '#' {
			k := strings.Index(src[start:], "#}")
			if k < 0 {
				return lx.errf(tagLine, "a comment is never closed ('#}')")
			}
			end := start + k
			right := byte(0)
			if end > start && (src[end-1] == '-' || src[end-1] == '+') {
				right = src[end-1]
			}
			lx.advance(end + 2)
			lx.rightStrip(right, true)
			continue
		}
		lx.advance(start)
		beginKind, endKind := tkVarBegin, tkVarEnd
		if kind == '%' {
			beginKind, endKind = tkBlockBegin, tkBlockEnd
		}
		first := len(lx.toks)
		lx.toks = append(lx.toks, tplTok{kind: beginKind, line: tagLine})
		right, err := lx.tag(kind == '%', tagLine)
		if err != nil {
			return err
		}
		lx.toks = append(lx.toks, tplTok{kind: endKind, line: lx.line})
		// {% raw %}: the text up to {% endraw %}, as it is.
		if kind == '%' && right != '+' && len(lx.toks)-first == 3 && lx.toks[first+1].kind == tkName && lx.toks[first+1].val == "raw" {
			lx.toks = lx.toks[:first]
			if right == '-' {
				lx.skipSpace()
			}
			lx.lineStarting = lx.pos > 0 && src[lx.pos-1] == '\n'
			m := tplEndRaw.FindStringSubmatchIndex(src[lx.pos:])
			if m == nil {
				return lx.errf(tagLine, "a raw block is never closed ({%% endraw %%})")
			}
			endSign := byte(0)
			if m[3] > m[2] {
				endSign = src[lx.pos+m[2]]
			}
			lx.text(lx.leftStrip(src[lx.pos:lx.pos+m[0]], true, endSign), lx.line)
			lx.advance(lx.pos + m[1])
			right = 0
			if m[5] > m[4] {
				right = src[lx.pos-m[1]+m[4]]
			}
		}
		lx.rightStrip(right, kind == '%')
	}
	return nil
}

// text adds a text token.
func (lx *tplLexer) text(s string, line int) {
	if s != "" {
		lx.toks = append(lx.toks, tplTok{kind: tkText, val: s, line: line})
	}
}

// leftStrip applies a tag's left whitespace control to the text before
// it: "-" strips all whitespace; else, for a block or comment tag and
// unless "+", lstrip_blocks strips the spaces and tabs that are all the
// tag's line holds before it.
func (lx *tplLexer) leftStrip(text string, block bool, sign byte) string {
	switch {
	case sign == '-':
		return strings.TrimRightFunc(text, unicode.IsSpace)
	case sign == '+' || !block:
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if l == 0 && !lx.lineStarting {
		return text
	}
	if strings.Trim(text[l:], " \t") == "" {
		return text[:l]
	}
	return text
}

// rightStrip applies a tag's right whitespace control to what follows:
// "-" skips all whitespace; else, for a block or comment tag and unless
// "+", trim_blocks skips one newline.
func (lx *tplLexer) rightStrip(sign byte, block bool) {
	switch {
	case sign == '-':
		lx.skipSpace()
	case sign != '+' && block && lx.pos < len(lx.src) && lx.src[lx.pos] == '\n':
		lx.advance(lx.pos + 1)
	}
	lx.lineStarting = lx.pos > 0 && lx.src[lx.pos-1] == '\n'
}

func (lx *tplLexer) skipSpace() {
	rest := strings.TrimLeftFunc(lx.src[lx.pos:], unicode.IsSpace)
	lx.advance(len(lx.src) - len(rest))
}

// tag lexes the tokens of a tag up to its closing delimiter (which a
// bracket left open does not close), and returns the delimiter's sign.
func (lx *tplLexer) tag(block bool, tagLine int) (byte, error) {
	src := lx.src
	closer := "}}"
	if block {
		closer = "%}"
	}
	var open []byte // the brackets left open
	for {
		// Whitespace.
		for lx.pos < len(src) && (src[lx.pos] == ' ' || src[lx.pos] == '\t' || src[lx.pos] == '\n' || src[lx.pos] == '\f' || src[lx.pos] == '\v') {
			if src[lx.pos] == '\n' {
				lx.line++
			}
			lx.pos++
		}
		if lx.pos >= len(src) {
			return 0, lx.errf(tagLine, "a tag is never closed (%q)", closer)
		}
		rest := src[lx.pos:]
		if len(open) == 0 {
			switch {
			case strings.HasPrefix(rest, closer):
				lx.pos += 2
				return 0, nil
			case len(rest) > 2 && (rest[0] == '-' || (rest[0] == '+' && block)) && rest[1:3] == closer:
				lx.pos += 3
				return rest[0], nil
			}
		}
		c := rest[0]
		line := lx.line
		switch {
		case c == '\'' || c == '"':
			s, n, err := tplUnquote(rest)
			if err != nil {
				return 0, lx.errf(line, "%v", err)
			}
			lx.toks = append(lx.toks, tplTok{kind: tkString, val: s, line: line})
			lx.advance(lx.pos + n)
		case c >= '0' && c <= '9':
			afterDot := false
			if n := len(lx.toks); n > 0 && lx.toks[n-1].kind == tkOp && lx.toks[n-1].val == "." {
				afterDot = true
			}
			tok, n, err := tplNumber(rest, afterDot)
			if err != nil {
				return 0, lx.errf(line, "%v", err)
			}
			tok.line = line
			lx.toks = append(lx.toks, tok)
			lx.pos += n
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			n := 1
			for n < len(rest) && (rest[n] == '_' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			lx.toks = append(lx.toks, tplTok{kind: tkName, val: rest[:n], line: line})
			lx.pos += n
		default:
			op := ""
			if len(rest) >= 2 {
				switch rest[:2] {
				case "**", "//", "==", "!=", "<=", ">=":
					op = rest[:2]
				}
			}
			if op == "" {
				switch c {
				case '+', '-', '*', '/', '%', '~', '<', '>', '=', ',', '.', ':', '|':
					op = rest[:1]
				case '(', '[', '{':
					op = rest[:1]
					if len(open) >= tplMaxNesting {
						return 0, lx.errf(line, "brackets nest more than %d deep (the limit)", tplMaxNesting)
					}
					open = append(open, c)
				case ')', ']', '}':
					op = rest[:1]
					want := map[byte]byte{')': '(', ']': '[', '}': '{'}[c]
					if len(open) == 0 || open[len(open)-1] != want {
						return 0, lx.errf(line, "unexpected %q", op)
					}
					open = open[:len(open)-1]
				default:
					r, _ := utf8.DecodeRuneInString(rest)
					return 0, lx.errf(line, "unexpected character %q", r)
				}
			}
			lx.toks = append(lx.toks, tplTok{kind: tkOp, val: op, line: line})
			lx.pos += len(op)
		}
	}
}

// tplUnquote reads the string literal s starts with, Python's escapes
// decoded (an unknown escape is kept as it is), and returns its value and
// length.
func tplUnquote(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			j := i + 1
			for j < len(s) && s[j] != q && s[j] != '\\' {
				j++
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n, k := int(e-'0'), 0
			for k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7' {
				n = n*8 + int(s[i]-'0')
				i++
				k++
			}
			b.WriteRune(rune(n))
		case 'x', 'u', 'U':
			w := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+w > len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape in a string", e)
			}
			n, err := strconv.ParseUint(s[i:i+w], 16, 32)
			if err != nil || n > unicode.MaxRune {
				return "", 0, fmt.Errorf("invalid \\%c escape in a string", e)
			}
			b.WriteRune(rune(n))
			i += w
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("a string is never closed (%c)", q)
}

// tplNumber reads the number s starts with: an integer (decimal, 0b, 0o
// or 0x, with underscores) or, unless it follows a dot (foo.0.1 is two
// subscripts), a float.
func tplNumber(s string, afterDot bool) (tplTok, int, error) {
	digits := func(i int, ok func(byte) bool) int {
		for i < len(s) && (ok(s[i]) || s[i] == '_' && i+1 < len(s) && ok(s[i+1])) {
			i++
		}
		return i
	}
	dec := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' {
		base, ok := 0, func(byte) bool { return false }
		switch s[1] {
		case 'b', 'B':
			base, ok = 2, func(c byte) bool { return c == '0' || c == '1' }
		case 'o', 'O':
			base, ok = 8, func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x', 'X':
			base, ok = 16, func(c byte) bool { return dec(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
		}
		if base != 0 && ok(s[2]) {
			n := digits(2, ok)
			v, err := strconv.ParseInt(strings.ReplaceAll(s[2:n], "_", ""), base, 64)
			if err != nil {
				return tplTok{}, 0, fmt.Errorf("integer %s is out of range (64 bits)", tplClip(s[:n], 40))
			}
			return tplTok{kind: tkInt, num: v}, n, nil
		}
	}
	n := digits(0, dec)
	isFloat := false
	if !afterDot {
		if n+1 < len(s) && s[n] == '.' && dec(s[n+1]) {
			n = digits(n+1, dec)
			isFloat = true
		}
		if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
			j := n + 1
			if j < len(s) && (s[j] == '+' || s[j] == '-') {
				j++
			}
			if j < len(s) && dec(s[j]) {
				n = digits(j, dec)
				isFloat = true
			}
		}
	}
	lit := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !math.IsInf(f, 0) {
			return tplTok{}, 0, fmt.Errorf("invalid number %s", tplClip(s[:n], 40))
		}
		return tplTok{kind: tkFloat, fnum: f}, n, nil
	}
	v, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return tplTok{}, 0, fmt.Errorf("integer %s is out of range (64 bits)", tplClip(s[:n], 40))
	}
	return tplTok{kind: tkInt, num: v}, n, nil
}
