package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// segment encodes a prefix of a stretch of text that holds no added
// token and returns its length.
func (e *encoder) segment(s string, atEOF bool, out []int) (int, []int) {
	if len(s) == 0 {
		return 0, out
	}
	t := e.t
	lead := ""
	if e.segStart {
		switch {
		case t.byteLevel && t.prefixSpace && s[0] != ' ':
			lead = " "
		case !t.byteLevel && (t.prepend == prependAlways || t.prepend == prependFirst && e.textStart):
			lead = "▁"
		}
	}
	used, out := e.words(lead+s, atEOF, out)
	if used == 0 {
		return 0, out
	}
	e.segStart, e.textStart = false, false
	return used - len(lead), out
}

// words encodes the pre-tokens of a prefix of s and returns its length.
func (e *encoder) words(s string, atEOF bool, out []int) (int, []int) {
	t := e.t
	done := 0
	for done < len(s) {
		n := t.split(s[done:], atEOF)
		if n == 0 {
			break
		}
		out = t.word(s[done:done+n], out, &e.ids)
		done += n
	}
	return done, out
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
		if id, ok := t.vocab[t.normalize(w)]; ok {
			return append(ids, id)
		}
	}
	prevUnk := false
	for i := 0; i < len(w); {
		c := w[i]
		var id int32 = -1
		n := 1
		src := w[i : i+1]
		if c < utf8.RuneSelf {
			if c == ' ' && t.replaceSpace {
				src = "▁" // its bytes, should it fall back
				id = t.spaceID
			} else {
				id = t.asciiID[c]
			}
		} else {
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
		case t.byteFallback:
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

// normalize is the vocabulary's form of a SentencePiece-style word.
func (t *BPE) normalize(w string) string {
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
// (or "▁") and the characters up to the next one. Merges never join two
// such words when no vocabulary token has "▁" after another character,
// which the loader checks before choosing it.
func splitPieces(s string, atEOF bool) int {
	i := 0
	for i < len(s) {
		m, n := isMeta(s[i:])
		if !m {
			break
		}
		i += n
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
