package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The parsers here read the large parts of tokenizer files (vocabularies,
// merges, added tokens) one value at a time, checking each as it comes:
// the first bad entry stops the read, errors name the entry, and memory
// is what the accepted entries take rather than a multiple of the file.

// vocabulary is a JSON object of pieces and their ids, as written in the
// file (byte-level pieces still in GPT-2's byte alphabet).
type vocabulary struct {
	ids    map[string]int32
	pieces []string // id → piece, where has[id]
	has    []bool
}

// size is one more than the largest id.
func (v *vocabulary) size() int { return len(v.has) }

// parseVocab reads a vocabulary object, valid JSON (see validJSON): every
// id an integer in [0, maxTokenID], every piece and every id once. name is
// how errors call the object ("model.vocab"; "" for a whole encoder.json).
func parseVocab(path, name string, raw []byte) (*vocabulary, error) {
	entry := "entry"
	if name != "" {
		entry = name + " entry"
	}
	fail := func(format string, args ...any) (*vocabulary, error) {
		return nil, errorf(path, format, args...)
	}
	l := lexer{b: raw}
	if l.next() != '{' {
		if name == "" {
			return fail("not a JSON object of token ids but %s", l.what())
		}
		return fail("%s is %s, not an object of token ids", name, l.what())
	}
	l.i++
	v := &vocabulary{ids: make(map[string]int32)}
	for {
		c := l.next()
		if c == ',' {
			l.i++
			c = l.next()
		}
		if c == '}' {
			break
		}
		piece, err := l.str()
		if err != nil {
			return fail("%s after %d entries: %v", orFile(name), len(v.ids), err)
		}
		l.next() // ':'
		l.i++
		if c := l.next(); c != '-' && (c < '0' || c > '9') {
			return fail("%s %q: id is %s, not a number", entry, piece, l.what())
		}
		id, err := checkID(l.number())
		if err != nil {
			return fail("%s %q: %v", entry, piece, err)
		}
		if prev, dup := v.ids[piece]; dup {
			return fail("%s %q appears twice (ids %d and %d)", entry, piece, prev, id)
		}
		if int(id) < len(v.has) && v.has[id] {
			return fail("%s %q: id %d is already %q's (ids must be unique)", entry, piece, id, v.pieces[id])
		}
		for len(v.has) <= int(id) {
			v.has = append(v.has, false)
			v.pieces = append(v.pieces, "")
		}
		v.ids[piece], v.pieces[id], v.has[id] = id, piece, true
	}
	return v, nil
}

func orFile(name string) string {
	if name == "" {
		return "vocabulary"
	}
	return name
}

// checkID parses a token id written as a JSON number.
func checkID(s string) (int32, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("id %s is not an integer in [0, %d]", s, maxTokenID)
	case id < 0:
		return 0, fmt.Errorf("id %d is negative", id)
	case id > maxTokenID:
		return 0, fmt.Errorf("id %d is beyond %d, the largest token id memfit accepts", id, maxTokenID)
	}
	return int32(id), nil
}

// validJSON returns b's syntax error, if any. json.Unmarshal checks the
// whole input before it decodes anything, so an invalid b allocates
// nothing.
func validJSON(b []byte) error {
	if json.Valid(b) {
		return nil
	}
	return json.Unmarshal(b, new(any))
}

// lexer walks JSON already known to be valid, one token at a time.
// encoding/json's Decoder.Token does the same but costs about 0.3 µs a
// token (it builds an error for each value's end), 0.15 s of loading
// Llama 3's vocabulary and merges.
type lexer struct {
	b []byte
	i int
}

// next skips white space and returns the next byte, 0 at the end.
func (l *lexer) next() byte {
	for l.i < len(l.b) {
		switch c := l.b[l.i]; c {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return c
		}
	}
	return 0
}

// what names the value at l.i for an error.
func (l *lexer) what() string {
	switch l.next() {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		s, _ := l.str()
		return fmt.Sprintf("the string %.40q", s)
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case 0:
		return "nothing"
	}
	return "the number " + l.number()
}

// str reads the string at l.i.
func (l *lexer) str() (string, error) {
	if l.next() != '"' {
		return "", fmt.Errorf("want a string, have %s", l.what())
	}
	start := l.i
	plain := true
	for l.i++; l.b[l.i] != '"'; l.i++ {
		if l.b[l.i] == '\\' {
			plain = false
			l.i++
		}
	}
	l.i++
	q := l.b[start:l.i]
	if plain && utf8.Valid(q) {
		return string(q[1 : len(q)-1]), nil
	}
	// Escapes, or bytes that are not UTF-8 (which encoding/json turns
	// into U+FFFD): rare, left to encoding/json.
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// number reads the number at l.i as written.
func (l *lexer) number() string {
	start := l.i
	for l.i < len(l.b) && strings.IndexByte("+-.eE0123456789", l.b[l.i]) >= 0 {
		l.i++
	}
	return string(l.b[start:l.i])
}

// parseMerges reads tokenizer.json's model.merges (valid JSON), each
// "a b" or ["a", "b"], handing them to fn in order.
func parseMerges(path string, raw []byte, fn func(i int, a, b string) error) error {
	if isNull(raw) {
		return nil
	}
	l := lexer{b: raw}
	if l.next() != '[' {
		return errorf(path, "model.merges is %s, not an array", l.what())
	}
	l.i++
	for i := 0; ; i++ {
		c := l.next()
		if c == ',' {
			l.i++
			c = l.next()
		}
		if c == ']' {
			return nil
		}
		bad := func(why string) error {
			return errorf(path, "model.merges[%d]: %s, want \"a b\" or [\"a\", \"b\"]", i, why)
		}
		var a, b string
		switch c {
		case '"':
			s, err := l.str()
			if err != nil {
				return bad(err.Error())
			}
			if strings.Count(s, " ") != 1 {
				return bad(fmt.Sprintf("%q is not two tokens separated by a space", s))
			}
			a, b, _ = strings.Cut(s, " ")
		case '[':
			l.i++
			var err error
			if a, err = l.str(); err != nil {
				return bad("its first element: " + err.Error())
			}
			if l.next() != ',' {
				return bad("one token")
			}
			l.i++
			if b, err = l.str(); err != nil {
				return bad("its second element: " + err.Error())
			}
			if l.next() != ']' {
				return bad("more than two tokens")
			}
			l.i++
		default:
			return bad(l.what())
		}
		if err := fn(i, a, b); err != nil {
			return err
		}
	}
}

// parseMergesTxt reads GPT-2's vocab.bpe (merges.txt): an optional
// "#version" first line, then one merge "a b" a line, of any length.
func parseMergesTxt(path string, raw []byte, fn func(line int, a, b string) error) error {
	for line, rest := 1, raw; len(rest) > 0; line++ {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte{'\n'})
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if line == 1 && bytes.HasPrefix(l, []byte("#version")) || len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		f := strings.Fields(string(l))
		if len(f) != 2 {
			return errorf(path, "line %d: %.80q is not two tokens separated by a space", line, l)
		}
		if err := fn(line, f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

// hfAdded is one of tokenizer.json's added_tokens.
type hfAdded struct {
	ID         *json.Number `json:"id"`
	Content    *string      `json:"content"`
	SingleWord bool         `json:"single_word"`
	Lstrip     bool         `json:"lstrip"`
	Rstrip     bool         `json:"rstrip"`
	// Normalized is true in the Rust library when absent; tokenizer.json
	// files always write it, and memfit's tests and older tools leave it
	// out meaning the raw text, as transformers.js matches every token.
	Normalized bool `json:"normalized"`
}

// parseAdded reads added_tokens (part of a valid tokenizer.json) one at a
// time: every id an integer in range, every content non-empty, a content
// with one id and an id with one content (an entry repeated exactly is
// taken once), all contents together at most maxAddedBytes.
func parseAdded(path string, raw []byte) ([]addedToken, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if d, err := dec.Token(); err != nil || d != json.Delim('[') {
		return nil, errorf(path, "added_tokens is not an array")
	}
	var out []addedToken
	byContent := map[string]int32{}
	byID := map[int32]string{}
	size := 0
	for i := 0; dec.More(); i++ {
		if i == maxAddedTokens {
			return nil, errorf(path, "added_tokens has more than %d entries", maxAddedTokens)
		}
		var a hfAdded
		if err := dec.Decode(&a); err != nil {
			return nil, errorf(path, "added_tokens[%d]: %v", i, err)
		}
		switch {
		case a.Content == nil || *a.Content == "":
			return nil, errorf(path, "added_tokens[%d] has no content", i)
		case a.ID == nil:
			return nil, errorf(path, "added token %q (added_tokens[%d]) has no id", *a.Content, i)
		}
		id, err := checkID(a.ID.String())
		if err != nil {
			return nil, errorf(path, "added token %q (added_tokens[%d]): %v", *a.Content, i, err)
		}
		c := *a.Content
		if size += len(c); size > maxAddedBytes {
			return nil, errorf(path, "added token %.40q (added_tokens[%d]): the added tokens take more than %d bytes", c, i, maxAddedBytes)
		}
		if prev, ok := byContent[c]; ok {
			if prev != id {
				return nil, errorf(path, "added token %q (added_tokens[%d]) has id %d and also %d", c, i, prev, id)
			}
			continue
		}
		if prev, ok := byID[id]; ok {
			return nil, errorf(path, "added tokens %q and %q (added_tokens[%d]) both have id %d", prev, c, i, id)
		}
		byContent[c], byID[id] = id, c
		out = append(out, addedToken{content: c, id: id, lstrip: a.Lstrip, rstrip: a.Rstrip, singleWord: a.SingleWord, normalized: a.Normalized})
	}
	return out, nil
}

// checkAdded checks that the added tokens agree with the vocabulary: a
// token that is also a vocabulary piece has the piece's id, and an id the
// vocabulary holds belongs to the same text. what names the vocabulary.
func checkAdded(path, what string, added []addedToken, v *vocabulary) error {
	for _, a := range added {
		if id, ok := v.ids[a.content]; ok && id != a.id {
			return errorf(path, "added token %q has id %d, but %s gives it id %d", a.content, a.id, what, id)
		}
		if int(a.id) < v.size() && v.has[a.id] && v.pieces[a.id] != a.content {
			return errorf(path, "added token %q has id %d, which %s gives to %q", a.content, a.id, what, v.pieces[a.id])
		}
	}
	return nil
}

// maxMembers bounds a Sequence normalizer, pre-tokenizer or decoder
// (real ones hold fewer than ten), and maxNesting how deep Sequences may
// nest (real ones: one level), so that a hostile file cannot make the
// loader allocate per empty member or re-read the file once per level.
const (
	maxMembers = 64
	maxNesting = 4
)

// componentList is the members of a Sequence, read one by one and
// refused past maxMembers.
type componentList []json.RawMessage

func (l *componentList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*l = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if d, err := dec.Token(); err != nil || d != json.Delim('[') {
		return fmt.Errorf("a Sequence's members are not an array")
	}
	for dec.More() {
		if len(*l) == maxMembers {
			return fmt.Errorf("a Sequence of more than %d members is not supported", maxMembers)
		}
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			return err
		}
		*l = append(*l, m)
	}
	return nil
}
