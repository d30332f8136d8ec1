package tokenizer

import (
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Encode returns the tokens of text.
func (t *BPE) Encode(text string) []int {
	e := newEncoder(t)
	_, out := e.encode(text, true, nil)
	return out
}

// EncodeReader encodes r's text, calling fn with the tokens of each piece
// read. Memory is bounded by the read size plus the longest pre-token
// (for a SentencePiece vocabulary whose merges cross spaces, the longest
// stretch between added tokens).
func (t *BPE) EncodeReader(r io.Reader, fn func(ids []int) error) error {
	e := newEncoder(t)
	buf := make([]byte, readChunk)
	var pending string
	var out []int
	for eof := false; !eof; {
		n, err := io.ReadFull(r, buf)
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			eof = true
		default:
			return err
		}
		pending += string(buf[:n])
		var used int
		used, out = e.encode(pending, eof, out[:0])
		pending = pending[used:]
		if len(out) > 0 {
			if err := fn(out); err != nil {
				return err
			}
		}
	}
	return nil
}

// readChunk is how much EncodeReader reads at a time (tests make it small
// to cut text everywhere).
var readChunk = 1 << 20

// Encoding runs in two levels, as the Rust library's does:
//
//  1. The raw text is cut at the added tokens matched in it (encode). Each
//     stretch between them is normalized (segment) into carry.
//  2. The normalized text is cut at the added tokens matched in it (cut
//     again); each stretch between those is pre-tokenized and each
//     pre-token merged (pretok, words).
//
// Text comes in pieces (EncodeReader): each level consumes what no later
// text can change and leaves the rest for the next call; atEOF says no
// more text follows (at the end of the input, or of a stretch before an
// added token).

// encoder carries what one encoding remembers between pieces of text.
type encoder struct {
	t         *BPE
	segStart  bool   // the next raw text starts a stretch between raw added tokens
	subStart  bool   // the next normalized text starts a stretch between any added tokens
	textStart bool   // no token has been consumed yet
	carry     string // normalized text of the current stretch not yet encoded
	raw, norm cutState
	ids       []int32
}

// cutState is what the search for added tokens at one level remembers
// between pieces of text.
type cutState struct {
	skip int  // bytes at the start of the next text that hold no match (single_word)
	prev rune // the last rune before the next text, -1 at the start of the text searched
}

func newEncoder(t *BPE) *encoder {
	return &encoder{t: t, segStart: true, subStart: true, textStart: true, raw: cutState{prev: -1}, norm: cutState{prev: -1}}
}

// encode encodes a prefix of s and returns its length: all of s when
// atEOF, else up to where the tokens no longer depend on what follows.
func (e *encoder) encode(s string, atEOF bool, out []int) (int, []int) {
	return e.cut(e.t.raw, &e.raw, s, atEOF, out, e.segment, func() {
		// A new stretch for the normalizers.
		e.segStart = true
		e.norm = cutState{prev: -1}
	})
}

// cut encodes a prefix of s, the added tokens of m (nil for none) as their
// ids and the stretches between them through seg, and returns its length.
// newStretch is called after each added token.
func (e *encoder) cut(m *matcher, st *cutState, s string, atEOF bool, out []int,
	seg func(string, bool, []int) (int, []int), newStretch func()) (int, []int) {
	if m == nil {
		return seg(s, atEOF, out)
	}
	done := 0
	skip := st.skip // in s
	for done < len(s) || atEOF && done == 0 {
		rest := s[done:]
		prev := st.prev
		if done > 0 {
			prev, _ = utf8.DecodeLastRuneInString(s[:done])
		}
		var at match
		if rest != "" {
			at = m.find(rest, max(0, skip-done), prev, atEOF)
			skip = max(skip, done+at.pass)
		}
		text, textEOF := rest, atEOF
		switch {
		case at.tok != nil:
			text, textEOF = rest[:at.p], true
		case !atEOF:
			text = trimPartial(rest[:at.stop])
			if m.anyLstrip {
				// The spaces before a token yet to come are its own.
				text = strings.TrimRightFunc(text, unicode.IsSpace)
			}
		}
		used, o := seg(text, textEOF, out)
		out = o
		done += used
		if at.tok == nil || used < len(text) {
			break
		}
		if at.tok.rstrip && !atEOF && trimPartial(rest[at.q:]) == "" {
			break // the spaces after it may go on
		}
		out = append(out, int(at.tok.id))
		done += at.q - at.p
		e.subStart, e.textStart = true, false
		newStretch()
	}
	if done > 0 {
		st.prev, _ = utf8.DecodeLastRuneInString(s[:done])
	}
	st.skip = max(0, skip-done)
	return done, out
}

// segment normalizes a prefix of a stretch of raw text between added
// tokens into the carry, encodes what it can of the carry, and returns the
// length of the prefix. atEOF ends the stretch: everything is encoded.
func (e *encoder) segment(s string, atEOF bool, out []int) (int, []int) {
	t := e.t
	raw := s
	if !atEOF {
		// A rune cut by a read is not an invalid byte, and the
		// normalizers wait for what may combine with the last runes.
		raw = trimPartial(s)
		raw = raw[:t.normBoundary(raw)]
	}
	if raw == "" && (!atEOF || e.carry == "") {
		return 0, out
	}
	n := t.normalize(raw, e.segStart)
	if raw != "" {
		e.segStart = false
	}
	text := n
	if e.carry != "" {
		text = e.carry + n
	}
	used, out := e.cut(t.normed, &e.norm, text, atEOF, out, e.pretok, func() {})
	e.carry = text[used:]
	return len(raw), out
}

// pretok encodes a prefix of a stretch of normalized text between added
// tokens and returns its length.
func (e *encoder) pretok(s string, atEOF bool, out []int) (int, []int) {
	if len(s) == 0 {
		return 0, out
	}
	t := e.t
	lead := ""
	if e.subStart {
		switch {
		case t.byteLevel && t.prefixSpace && s[0] != ' ':
			lead = " "
		case t.metaspace == prependAlways || t.metaspace == prependFirst && e.textStart:
			if m, _ := isMeta(s); !m {
				lead = "▁"
			}
		}
	}
	used, out := e.words(0, lead+s, atEOF, out)
	if used == 0 {
		return 0, out
	}
	e.subStart, e.textStart = false, false
	return max(0, used-len(lead)), out
}

// words encodes the pre-tokens of a prefix of s by pre-tokenizers
// splits[k:] and returns its length: each pre-tokenizer splits the
// pre-tokens of the one before, as a Sequence does.
func (e *encoder) words(k int, s string, atEOF bool, out []int) (int, []int) {
	t := e.t
	if k == len(t.splits) {
		return len(s), t.word(s, out, &e.ids)
	}
	done := 0
	for done < len(s) {
		n := t.splits[k](s[done:], atEOF)
		if n == 0 {
			break
		}
		_, out = e.words(k+1, s[done:done+n], true, out)
		done += n
	}
	return done, out
}

// trimPartial drops an incomplete UTF-8 sequence from the end of s, so
// that a rune cut by a read is not taken for an invalid byte.
func trimPartial(s string) string {
	for k := 1; k <= utf8.UTFMax && k <= len(s); k++ {
		if utf8.RuneStart(s[len(s)-k]) {
			if !utf8.FullRuneInString(s[len(s)-k:]) {
				return s[:len(s)-k]
			}
			break
		}
	}
	return s
}

// word appends the tokens of one pre-token; scratch is reused between
// calls.
func (t *BPE) word(w string, out []int, scratch *[]int32) []int {
	if ids, ok := t.cache.get(w); ok {
		for _, id := range ids {
			out = append(out, int(id))
		}
		return out
	}
	var ids []int32
	if t.byteLevel {
		ids = t.byteWord(w, (*scratch)[:0])
	} else {
		ids = t.pieceWord(w, (*scratch)[:0])
	}
	*scratch = ids
	for _, id := range ids {
		out = append(out, int(id))
	}
	if len(w) <= 256 {
		t.cache.put(w, append([]int32(nil), ids...))
	}
	return out
}

func (t *BPE) byteWord(w string, ids []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			return append(ids, id)
		}
	}
	for i := 0; i < len(w); i++ {
		ids = append(ids, t.byteID[w[i]])
	}
	return t.model.apply(ids)
}

// pieceWord tokenizes a SentencePiece-style word: each character is its
// token, or its bytes' <0xNN> tokens, or the unknown token, before merges.
func (t *BPE) pieceWord(w string, ids []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[t.pieceKey(w)]; ok {
			return append(ids, id)
		}
	}
	prevUnk := false
	for i := 0; i < len(w); {
		c := w[i]
		var id int32 = -1
		n := 1
		src := w[i : i+1]
		switch {
		case c < utf8.RuneSelf:
			if c == ' ' && t.replaceSpace {
				src = "▁" // its bytes, should it fall back
				id = t.spaceID
			} else {
				id = t.asciiID[c]
			}
		case c == 0xe2 && strings.HasPrefix(w[i:], "▁"): // the commonest
			n, src, id = len("▁"), "▁", t.spaceID
		default:
			var r rune
			r, n = utf8.DecodeRuneInString(w[i:])
			src = w[i : i+n]
			if !(r == utf8.RuneError && n == 1) {
				if v, ok := t.runeID[r]; ok {
					id = v
				}
			}
		}
		switch {
		case id >= 0:
			ids = append(ids, id)
			prevUnk = false
		case t.byteFallback && t.hasBytes(src):
			for k := 0; k < len(src); k++ {
				ids = append(ids, t.byteTok[src[k]])
			}
			prevUnk = false
		case t.fuseUnk && prevUnk:
		default:
			ids = append(ids, t.unk)
			prevUnk = true
		}
		i += n
	}
	return t.model.apply(ids)
}

// hasBytes reports whether the vocabulary has the byte token of every byte
// of src.
func (t *BPE) hasBytes(src string) bool {
	for k := 0; k < len(src); k++ {
		if t.byteTok[src[k]] < 0 {
			return false
		}
	}
	return true
}

// pieceKey is the vocabulary's form of a SentencePiece-style word.
func (t *BPE) pieceKey(w string) string {
	if t.replaceSpace {
		return strings.ReplaceAll(w, " ", "▁")
	}
	return w
}

// isMeta reports whether s starts with a space or "▁", and its length.
func isMeta(s string) (bool, int) {
	if s[0] == ' ' {
		return true, 1
	}
	if strings.HasPrefix(s, "▁") {
		return true, len("▁")
	}
	return false, 0
}

// splitPieces cuts SentencePiece-style text into words of a run of spaces
// (or "▁") and the characters up to the next one: merges never join two
// such words, unless a vocabulary piece has the rune before the run
// followed by "▁" (join, from joinsSpace), where it does not cut. The
// words are then what makes caching and streaming possible.
func splitPieces(join map[rune]bool) splitter {
	return func(s string, atEOF bool) int {
		i := 0
		for i < len(s) {
			m, n := isMeta(s[i:])
			if !m {
				break
			}
			i += n
		}
		for i < len(s) {
			m, _ := isMeta(s[i:])
			if !m {
				i++
				continue
			}
			if r, _ := utf8.DecodeLastRuneInString(s[:i]); !join[r] {
				return i
			}
			for m && i < len(s) { // the run goes with the word
				var n int
				m, n = isMeta(s[i:])
				if m {
					i += n
				}
			}
		}
		if !atEOF {
			return 0
		}
		return i
	}
}

// splitMetaspace is the Metaspace pre-tokenizer with split on: every
// space (or "▁") starts a word.
func splitMetaspace(s string, atEOF bool) int {
	i := 0
	if m, n := isMeta(s); m {
		i = n
	}
	for i < len(s) {
		if m, _ := isMeta(s[i:]); m {
			return i
		}
		i++
	}
	if !atEOF {
		return 0
	}
	return i
}
