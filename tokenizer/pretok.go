package tokenizer

import (
	"regexp"
	"unicode"
	"unicode/utf8"
)

// A splitter finds the first pre-token of s: it returns its length in
// bytes, or 0 when the answer depends on text beyond s and atEOF is false
// (the caller then supplies more, as with bufio.SplitFunc). s is never
// empty. A byte that is not valid UTF-8 counts as a rune that is neither a
// letter, a number nor a space, as U+FFFD would.
type splitter func(s string, atEOF bool) int

// The split patterns of GPT-2 and of Llama 3 (also OpenAI's cl100k_base).
// Both need a negative lookahead that Go's regexp lacks, so each has a
// scanner below, written to match exactly what a backtracking engine
// (Oniguruma in Hugging Face tokenizers, Python's regex, JavaScript)
// returns for it.
const (
	GPT2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
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
func splitLlama3(s string, atEOF bool) int {
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
	// \p{N}{1,3}
	if c == clNumber {
		end := w
		for k := 1; k < 3; k++ {
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
