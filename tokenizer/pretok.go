package tokenizer

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A splitter finds the first pre-token of s: it returns its length in
// bytes, or 0 when the answer depends on text beyond s and atEOF is false
// (the caller then supplies more, as with bufio.SplitFunc). s is never
// empty. A byte that is not valid UTF-8 counts as a rune that is neither a
// letter, a number nor a space, as U+FFFD would.
type splitter func(s string, atEOF bool) int

// The split patterns of GPT-2, of Llama 3 (also OpenAI's cl100k_base,
// SmolLM3 and Phi-4), of Qwen 2 (Qwen2.5 and Qwen3: Llama 3's with single
// digits), of Mistral's Tekken (Mistral Nemo) and of OpenAI's o200k_base
// (GPT-4o, Phi-4-mini). All need a negative lookahead that Go's regexp
// lacks, so each has a scanner below, written to match exactly what a
// backtracking engine (Oniguruma in Hugging Face tokenizers, Python's
// regex, JavaScript) returns for it.
const (
	GPT2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	Qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	TekkenPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|` +
		`\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	O200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// class is a rune's class as the patterns see it.
type class uint8

const (
	clOther class = iota
	clLetter
	clNumber
	clSpace
)

// classOf classifies the rune at the start of s and returns its width.
// \s is Unicode's White_Space property, as in Oniguruma.
func classOf(s string) (class, int) {
	c := s[0]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && n == 1:
		return clOther, 1
	case unicode.IsLetter(r):
		return clLetter, n
	case unicode.IsNumber(r):
		return clNumber, n
	case unicode.IsSpace(r):
		return clSpace, n
	}
	return clOther, n
}

var asciiClass = func() (t [utf8.RuneSelf]class) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clLetter
		case unicode.IsNumber(r):
			t[c] = clNumber
		case unicode.IsSpace(r):
			t[c] = clSpace
		}
	}
	return t
}()

// run returns the end of the run of runes of class k that starts at i, and
// whether it reached the end of s.
func run(s string, i int, k class) (int, bool) {
	for i < len(s) {
		c, n := classOf(s[i:])
		if c != k {
			return i, false
		}
		i += n
	}
	return i, true
}

// runNot returns the end of the run of runes that are not letters,
// numbers or spaces ([^\s\p{L}\p{N}]+) from i.
func runNot(s string, i int) (int, bool) { return run(s, i, clOther) }

// contraction returns the length of 's, 't, 're, 've, 'm, 'll or 'd at the
// start of s (which begins with '), 0 if none, or -1 when s ends too soon
// to tell. fold compares letters case-insensitively (Llama 3's (?i:...)),
// including Unicode's simple case folds (U+017F, long s, matches s).
func contraction(s string, atEOF, fold bool) int {
	eq := func(i int, want byte) (bool, bool) { // match, known
		if i >= len(s) {
			return false, atEOF
		}
		if !fold {
			return s[i] == want, true
		}
		r, _ := utf8.DecodeRuneInString(s[i:])
		return foldEq(r, rune(want)), true
	}
	width := func(i int) int {
		_, n := utf8.DecodeRuneInString(s[i:])
		return n
	}
	// One letter: s t m d; two: re ve ll. Alternation order picks the
	// first that matches, and no one-letter suffix starts a two-letter one.
	for _, c := range []byte{'s', 't'} {
		m, known := eq(1, c)
		if !known {
			return -1
		}
		if m {
			return 1 + width(1)
		}
	}
	for _, p := range []string{"re", "ve", "m", "ll", "d"} {
		m, known := eq(1, p[0])
		if !known {
			return -1
		}
		if !m {
			continue
		}
		if len(p) == 1 {
			return 1 + width(1)
		}
		w := width(1)
		m, known = eq(1+w, p[1])
		if !known {
			return -1
		}
		if m {
			return 1 + w + width(1+w)
		}
	}
	return 0
}

// foldEq reports whether r and ASCII letter c are equal under simple case
// folding.
func foldEq(r, c rune) bool {
	if r == c {
		return true
	}
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// spaceTail resolves \s+(?!\S)|\s+ for the whitespace run [0, end): at the
// end of the text the whole run; before a non-space rune, the run less its
// last rune when that leaves something, else the one rune.
func spaceTail(s string, end int) int {
	if end == len(s) {
		return end
	}
	_, w := utf8.DecodeLastRuneInString(s[:end])
	if end-w > 0 {
		return end - w
	}
	return end
}

// splitGPT2 scans GPT2Pattern.
func splitGPT2(s string, atEOF bool) int {
	if s[0] == '\'' {
		switch n := contraction(s, atEOF, false); {
		case n < 0:
			return 0
		case n > 0:
			return n
		}
	}
	c, w := classOf(s)
	start, k := 0, c
	if s[0] == ' ' { // " ?X+" for X letters, numbers or others
		if len(s) == 1 {
			if !atEOF {
				return 0
			}
			return 1
		}
		if k2, _ := classOf(s[1:]); k2 != clSpace {
			start, k = 1, k2
		}
	}
	if k != clSpace {
		end, atEnd := run(s, start, k)
		if atEnd && !atEOF {
			return 0
		}
		return end
	}
	end, atEnd := run(s, w, clSpace)
	if atEnd && !atEOF {
		return 0
	}
	return spaceTail(s, end)
}

// splitLlama3 scans Llama3Pattern.
func splitLlama3(s string, atEOF bool) int { return scanCL100k(s, atEOF, 3) }

// splitQwen2 scans Qwen2Pattern.
func splitQwen2(s string, atEOF bool) int { return scanCL100k(s, atEOF, 1) }

// scanCL100k scans the pattern Llama 3 and Qwen 2 share, \p{N}{1,digits}
// being where they differ.
func scanCL100k(s string, atEOF bool, digits int) int {
	if s[0] == '\'' {
		switch n := contraction(s, atEOF, true); {
		case n < 0:
			return 0
		case n > 0:
			return n
		}
	}
	c, w := classOf(s)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clLetter {
		end, atEnd := run(s, w, clLetter)
		if atEnd && !atEOF {
			return 0
		}
		return end
	}
	if c != clNumber && s[0] != '\r' && s[0] != '\n' {
		if w == len(s) {
			if !atEOF {
				return 0
			}
		} else if c2, _ := classOf(s[w:]); c2 == clLetter {
			end, atEnd := run(s, w, clLetter)
			if atEnd && !atEOF {
				return 0
			}
			return end
		}
	}
	// \p{N}{1,digits}
	if c == clNumber {
		end := w
		for k := 1; k < digits; k++ {
			if end == len(s) {
				if !atEOF {
					return 0
				}
				break
			}
			c2, w2 := classOf(s[end:])
			if c2 != clNumber {
				break
			}
			end += w2
		}
		return end
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n]*"
	start, k := 0, c
	if s[0] == ' ' && len(s) > 1 {
		if k2, _ := classOf(s[1:]); k2 == clOther {
			start, k = 1, k2
		}
	}
	if k == clOther {
		end, atEnd := runNot(s, start)
		for !atEnd && (s[end] == '\r' || s[end] == '\n') {
			end++
			atEnd = end == len(s)
		}
		if atEnd && !atEOF {
			return 0
		}
		return end
	}
	// c is a space. \s*[\r\n]+: up to the last \r or \n of the run.
	end, atEnd := run(s, 0, clSpace)
	if atEnd && !atEOF {
		return 0
	}
	for i := end - 1; i >= 0; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	// \s+(?!\S)|\s+
	return spaceTail(s, end)
}

// splitRegexp scans a pattern that Go's regexp accepts, the way Hugging
// Face's Split pre-tokenizer with the Isolated behaviour does: each match
// is a pre-token and so is each stretch of text between matches. Before
// the end of the text, a match that reaches within 256 bytes of the end
// of s waits for more text, which serves every pattern whose matches do not
// run longer than that without a break.
func splitRegexp(re *regexp.Regexp) splitter {
	return func(s string, atEOF bool) int {
		loc := re.FindStringIndex(s)
		var n int
		switch {
		case loc == nil:
			n = len(s)
		case loc[0] > 0:
			n = loc[0]
		case loc[1] == 0: // an empty match: skip a rune as HF does
			_, n = utf8.DecodeRuneInString(s)
		default:
			n = loc[1]
		}
		if !atEOF && n > len(s)-256 {
			return 0
		}
		return n
	}
}

// splitWhole makes the whole text one pre-token (no pre-tokenizer).
func splitWhole(s string, atEOF bool) int {
	if !atEOF {
		return 0
	}
	return len(s)
}

// caseClass is a rune's class as the o200k and Tekken patterns see it:
// they tell upper from lower case, and put marks (\p{M}) in both case
// classes while \p{L} leaves them out.
type caseClass uint8

const (
	ccOther caseClass = iota // none of the below: [^\s\p{L}\p{N}] less \p{M}
	ccUpper                  // Lu, Lt: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] only
	ccLower                  // Ll: [\p{Ll}\p{Lm}\p{Lo}\p{M}] only
	ccBoth                   // Lm, Lo: letters in both case classes
	ccMark                   // M: in both case classes, but not a letter
	ccNumber
	ccSpace
)

// inUpper and inLower are membership in [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
// and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func (c caseClass) inUpper() bool { return c == ccUpper || c == ccBoth || c == ccMark }
func (c caseClass) inLower() bool { return c == ccLower || c == ccBoth || c == ccMark }

// symbol is membership in [^\s\p{L}\p{N}].
func (c caseClass) symbol() bool { return c == ccOther || c == ccMark }

// caseClassOf classifies the rune at the start of s and returns its width;
// a byte that is not UTF-8 is ccOther, as U+FFFD (a symbol) would be.
func caseClassOf(s string) (caseClass, int) {
	if c := s[0]; c < utf8.RuneSelf {
		return asciiCase[c], 1
	}
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && n == 1:
		return ccOther, 1
	case unicode.IsUpper(r) || unicode.IsTitle(r):
		return ccUpper, n
	case unicode.IsLower(r):
		return ccLower, n
	case unicode.IsLetter(r):
		return ccBoth, n
	case unicode.IsMark(r):
		return ccMark, n
	case unicode.IsNumber(r):
		return ccNumber, n
	case unicode.IsSpace(r):
		return ccSpace, n
	}
	return ccOther, n
}

var asciiCase = func() (t [utf8.RuneSelf]caseClass) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsUpper(r):
			t[c] = ccUpper
		case unicode.IsLower(r):
			t[c] = ccLower
		case unicode.IsNumber(r):
			t[c] = ccNumber
		case unicode.IsSpace(r):
			t[c] = ccSpace
		}
	}
	return t
}()

// caseRun returns the end of the run from i of runes whose class satisfies
// in, and whether it reached the end of s.
func caseRun(s string, i int, in func(caseClass) bool) (int, bool) {
	for i < len(s) {
		c, n := caseClassOf(s[i:])
		if !in(c) {
			return i, false
		}
		i += n
	}
	return i, true
}

// splitTekken scans TekkenPattern.
func splitTekken(s string, atEOF bool) int { return scanCased(s, atEOF, false, 1) }

// splitO200k scans O200kPattern.
func splitO200k(s string, atEOF bool) int { return scanCased(s, atEOF, true, 3) }

// scanCased scans the patterns of o200k_base and Tekken, which share their
// shape: two letter branches that tell case, each after an optional
// [^\r\n\p{L}\p{N}] and (o200k) followed by an optional contraction, then
// \p{N}{1,digits}, symbols, newlines and spaces as in Llama 3's.
func scanCased(s string, atEOF, contractions bool, digits int) int {
	c0, w0 := caseClassOf(s)
	// [^\r\n\p{L}\p{N}]: spaces but \r and \n, symbols and marks.
	prefix := c0 == ccOther || c0 == ccMark || c0 == ccSpace && s[0] != '\r' && s[0] != '\n'
	// The engine tries the first letter branch with the prefix, then
	// without it, then the second branch the same way; the first that
	// matches wins.
	for _, branch := range [2]func(string, int, bool) (int, bool){upperLower, upperRun} {
		for _, a := range [2]int{w0, 0} {
			if a == w0 && !prefix {
				continue
			}
			end, ok := branch(s, a, atEOF)
			if end < 0 {
				return 0 // needs the text after s
			}
			if !ok {
				continue
			}
			if contractions && end < len(s) && s[end] == '\'' {
				n := contraction(s[end:], atEOF, true)
				if n < 0 {
					return 0
				}
				end += n
			}
			return end
		}
	}
	// \p{N}{1,digits}
	if c0 == ccNumber {
		end := w0
		for k := 1; k < digits; k++ {
			if end == len(s) {
				if !atEOF {
					return 0
				}
				break
			}
			c, w := caseClassOf(s[end:])
			if c != ccNumber {
				break
			}
			end += w
		}
		return end
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n/]*"
	start, c := 0, c0
	if s[0] == ' ' && len(s) > 1 {
		if c1, _ := caseClassOf(s[1:]); c1.symbol() {
			start, c = 1, c1
		}
	}
	if c.symbol() {
		end, atEnd := caseRun(s, start, caseClass.symbol)
		for !atEnd && (s[end] == '\r' || s[end] == '\n' || s[end] == '/') {
			end++
			atEnd = end == len(s)
		}
		if atEnd && !atEOF {
			return 0
		}
		return end
	}
	// c0 is a space: \s*[\r\n]+, then \s+(?!\S)|\s+ as in Llama 3's.
	end, atEnd := caseRun(s, 0, func(c caseClass) bool { return c == ccSpace })
	if atEnd && !atEOF {
		return 0
	}
	for i := end - 1; i >= 0; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	return spaceTail(s, end)
}

// upperLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// from a and returns its end, or ok false; end -1 when that depends on
// text after s. The engine takes the longest run of the first class, then
// gives it back a rune at a time until the second class matches: either
// the rune after the run is lower case (then the lower-case run from
// there), or the last rune of the run that is in both classes (Lm, Lo, M)
// ends the match, the runes after it being upper case only.
func upperLower(s string, a int, atEOF bool) (int, bool) {
	b, atEnd := caseRun(s, a, caseClass.inUpper)
	if atEnd && !atEOF {
		return -1, false
	}
	if !atEnd {
		if c, w := caseClassOf(s[b:]); c.inLower() {
			end, atEnd := caseRun(s, b+w, caseClass.inLower)
			if atEnd && !atEOF {
				return -1, false
			}
			return end, true
		}
	}
	last := 0
	for i := a; i < b; {
		c, w := caseClassOf(s[i:])
		i += w
		if c.inLower() {
			last = i
		}
	}
	return last, last > 0
}

// upperRun matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
// from a, as upperLower does the other letter branch.
func upperRun(s string, a int, atEOF bool) (int, bool) {
	b, atEnd := caseRun(s, a, caseClass.inUpper)
	if atEnd && !atEOF {
		return -1, false
	}
	if b == a {
		return 0, false
	}
	end, atEnd := caseRun(s, b, caseClass.inLower)
	if atEnd && !atEOF {
		return -1, false
	}
	return end, true
}

// splitDigits is the Digits pre-tokenizer with individual_digits: every
// number (char::is_numeric: Unicode's N, not only 0-9) is a pre-token of
// its own, and so is each stretch between them.
func splitDigits(s string, atEOF bool) int {
	r, w := utf8.DecodeRuneInString(s)
	if unicode.IsNumber(r) {
		return w
	}
	return notNumbers(s, w, atEOF)
}

// splitNumbers is the Digits pre-tokenizer without individual_digits:
// runs of numbers and the stretches between them.
func splitNumbers(s string, atEOF bool) int {
	r, w := utf8.DecodeRuneInString(s)
	if !unicode.IsNumber(r) {
		return notNumbers(s, w, atEOF)
	}
	for i := w; i < len(s); i += w {
		r, w = utf8.DecodeRuneInString(s[i:])
		if !unicode.IsNumber(r) {
			return i
		}
	}
	if !atEOF {
		return 0
	}
	return len(s)
}

// notNumbers returns the end of the stretch from i without a number.
func notNumbers(s string, i int, atEOF bool) int {
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.IsNumber(r) {
			return i
		}
		i += w
	}
	if !atEOF {
		return 0
	}
	return i
}

// splitBehavior is how a Split pre-tokenizer with a string pattern treats
// the matches, as the Rust library's SplitDelimiterBehavior does
// ("Removed" drops them, which a splitter cannot, and is refused).
type splitBehavior uint8

const (
	splitIsolated           splitBehavior = iota // "a b" → "a", " ", "b"
	splitMergedWithPrevious                      // "a b" → "a ", "b"
	splitMergedWithNext                          // "a b" → "a", " b"
	splitContiguous                              // "a  b" → "a", "  ", "b"
)

// splitLiteral is the Split pre-tokenizer with a string pattern p (not
// empty) and behaviour how. Matches are found left to right without
// overlapping; with MergedWithPrevious a match joins the text before it
// unless that was a match too, and MergedWithNext mirrors it (which is
// how Metaspace splits on "▁").
func splitLiteral(p string, how splitBehavior) splitter {
	// match reports whether s starts with p: 1 yes, 0 no, -1 when s is a
	// proper prefix of p and more text could tell.
	match := func(s string, atEOF bool) int {
		switch {
		case strings.HasPrefix(s, p):
			return 1
		case !atEOF && strings.HasPrefix(p, s):
			return -1
		}
		return 0
	}
	// upTo returns the end of the text from i before the next match, 0
	// when it runs to the end of s before atEOF.
	upTo := func(s string, i int, atEOF bool) int {
		if j := strings.Index(s[i:], p); j >= 0 {
			return i + j
		}
		if !atEOF {
			return 0
		}
		return len(s)
	}
	return func(s string, atEOF bool) int {
		m := match(s, atEOF)
		if m < 0 {
			return 0
		}
		switch how {
		case splitMergedWithPrevious:
			if m == 1 {
				return len(p) // after a match, or first: alone
			}
			n := upTo(s, 0, atEOF)
			if n > 0 && n < len(s) {
				n += len(p) // the match after the text
			}
			return n
		case splitMergedWithNext:
			if m == 0 {
				return upTo(s, 0, atEOF)
			}
			rest := s[len(p):]
			if rest == "" {
				if !atEOF {
					return 0
				}
				return len(p)
			}
			switch match(rest, atEOF) {
			case 1:
				return len(p) // the next match takes what follows
			case -1:
				return 0
			}
			return upTo(s, len(p), atEOF)
		case splitContiguous:
			if m == 0 {
				return upTo(s, 0, atEOF)
			}
			i := len(p)
			for {
				switch match(s[i:], atEOF) {
				case 1:
					i += len(p)
					continue
				case -1:
					return 0
				}
				if i == len(s) && !atEOF {
					return 0
				}
				return i
			}
		}
		if m == 1 {
			return len(p)
		}
		return upTo(s, 0, atEOF)
	}
}
