package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenizer turns text into token ids and back.
type Tokenizer interface {
	// Encode returns the tokens of text. Added tokens (special tokens
	// such as <|endoftext|>) written in the text become their ids; no
	// beginning- or end-of-text token is added (see BOS and EOS).
	Encode(text string) []int
	// EncodeReader encodes everything r yields, handing the tokens to fn
	// in pieces, with memory bounded by the longest pre-token rather than
	// the text. The tokens equal Encode's of the whole text.
	EncodeReader(r io.Reader, fn func(ids []int) error) error
	// Decode returns the text of ids; an id outside the vocabulary is an
	// error naming its position.
	Decode(ids []int) (string, error)
	// VocabSize is one more than the largest token id.
	VocabSize() int
	// Special returns the id of the added or vocabulary token whose text
	// is name, such as "<|endoftext|>" or "</s>".
	Special(name string) (id int, ok bool)
	// BOS and EOS return the beginning- and end-of-text tokens, or -1.
	BOS() int
	EOS() int
	// Fingerprint identifies the tokenizer's files and this package's
	// encoding rules, for naming cached encodings.
	Fingerprint() string
}

// Error is a tokenizer file that cannot be used: which file and why.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return "tokenizer: " + e.Path + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// prepend says when a SentencePiece-style tokenizer puts "▁" before text.
type prepend uint8

const (
	prependNever  prepend = iota
	prependAlways         // before every stretch of text between added tokens
	prependFirst          // only before the text's first stretch
)

// addedToken is a token matched in the raw text before anything else.
type addedToken struct {
	content                    string
	id                         int32
	lstrip, rstrip, singleWord bool
}

// BPE is a byte-level or SentencePiece-style BPE tokenizer. It is safe for
// concurrent use.
type BPE struct {
	byteLevel bool
	split     splitter
	// byte-level: the ByteLevel pre-tokenizer's add_prefix_space.
	prefixSpace bool

	vocab        map[string]int32 // byte-level: keyed by raw bytes; else by the normalized piece
	ignoreMerges bool
	model        bpe
	cache        wordCache

	byteID [256]int32 // byte-level: the token of each byte

	// SentencePiece style (byteLevel false).
	replaceSpace bool // " " is "▁" (normalizer Replace, or Metaspace)
	prepend      prepend
	runeID       map[rune]int32
	asciiID      [utf8.RuneSelf]int32
	spaceID      int32 // the token of "▁", or -1
	byteFallback bool
	byteTok      [256]int32 // <0xNN>, or -1
	unk          int32      // -1 when none
	fuseUnk      bool
	strip        int // leading spaces the decoder strips

	added    []addedToken // longest first
	first    [256]bool    // bytes that start an added token
	maxAdded int
	special  map[string]int32

	decoded   []string // id → its bytes in decoded text; "" with valid false for gaps
	valid     []bool
	vocabSize int
	bos, eos  int
	sum       string

	// From tokenizer_config.json (and chat_template.jinja), for chat
	// templates.
	bosText, eosText string
	chatTemplate     string
}

var _ Tokenizer = (*BPE)(nil)

// VocabSize returns one more than the largest token id.
func (t *BPE) VocabSize() int { return t.vocabSize }

// BOS returns the beginning-of-text token, or -1.
func (t *BPE) BOS() int { return t.bos }

// EOS returns the end-of-text token, or -1.
func (t *BPE) EOS() int { return t.eos }

// BOSToken returns the text of the beginning-of-text token: the bos_token
// of tokenizer_config.json when it names one, else the usual name BOS
// was found under, else "". Chat templates use it as bos_token.
func (t *BPE) BOSToken() string { return t.bosText }

// EOSToken is BOSToken for the end-of-text token (eos_token).
func (t *BPE) EOSToken() string { return t.eosText }

// ChatTemplate returns the Jinja chat template of the tokenizer's
// directory: chat_template.jinja when there is one (transformers prefers
// it), else tokenizer_config.json's chat_template (of a list of named
// templates, the one named "default"), else "".
func (t *BPE) ChatTemplate() string { return t.chatTemplate }

// Fingerprint returns a hex SHA-256 of the files the tokenizer was read
// from and of the version of this package's encoding rules.
func (t *BPE) Fingerprint() string { return t.sum }

// Special returns the id of the token whose text is name.
func (t *BPE) Special(name string) (int, bool) {
	if id, ok := t.special[name]; ok {
		return int(id), true
	}
	key := name
	if !t.byteLevel && t.replaceSpace {
		key = strings.ReplaceAll(name, " ", "▁")
	}
	if id, ok := t.vocab[key]; ok {
		return int(id), true
	}
	return -1, false
}

// rulesVersion changes whenever an encoding could change, so that caches
// keyed by Fingerprint are not reused across such a change.
const rulesVersion = "memfit tokenizer rules 1\n"

// fingerprint is the SHA-256 of the files a tokenizer is read from and of
// rulesVersion.
func fingerprint(files ...[]byte) string {
	h := sha256.New()
	io.WriteString(h, rulesVersion)
	for _, f := range files {
		fmt.Fprintf(h, "%d\n", len(f))
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// finish fills what every loader shares: the added-token index, the
// decode table, the vocabulary size, BOS/EOS and the chat template. The
// loaders have checked the ids: each in [0, maxTokenID],
// an id with one text.
func (t *BPE) finish(path string, added []addedToken, sum string, cfg *config) error {
	t.sum = sum
	t.special = make(map[string]int32, len(added))
	size := int32(0)
	for _, id := range t.vocab {
		size = max(size, id+1)
	}
	for _, a := range added {
		t.special[a.content] = a.id
		size = max(size, a.id+1)
		t.first[a.content[0]] = true
		t.maxAdded = max(t.maxAdded, len(a.content))
	}
	t.added = append([]addedToken(nil), added...)
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	t.vocabSize = int(size)

	t.decoded = make([]string, size)
	t.valid = make([]bool, size)
	for piece, id := range t.vocab {
		t.decoded[id], t.valid[id] = t.decodePiece(piece), true
	}
	for _, a := range added {
		t.decoded[a.id], t.valid[a.id] = a.content, true
	}

	t.chatTemplate = cfg.chatTemplate
	var err error
	if t.bos, t.bosText, err = t.configToken(path, cfg, "bos_token", cfg.bos, bosNames); err != nil {
		return err
	}
	t.eos, t.eosText, err = t.configToken(path, cfg, "eos_token", cfg.eos, eosNames)
	return err
}

// configToken finds the token tokenizer_config.json names under key, or
// without one the first of the usual names the vocabulary has; -1 and ""
// when neither.
func (t *BPE) configToken(path string, cfg *config, key, name string, usual []string) (int, string, error) {
	if name != "" {
		id, ok := t.Special(name)
		if !ok {
			return -1, "", errorf(cfg.path, "%s %q is not a token of %s", key, name, filepath.Base(path))
		}
		return id, name, nil
	}
	for _, n := range usual {
		if id, ok := t.Special(n); ok {
			return id, n, nil
		}
	}
	return -1, "", nil
}

// decodePiece is the text a vocabulary piece stands for.
func (t *BPE) decodePiece(piece string) string {
	if t.byteLevel {
		return piece // already raw bytes
	}
	if t.byteFallback {
		if b, ok := byteToken(piece); ok {
			return string([]byte{b})
		}
	}
	if t.replaceSpace {
		return strings.ReplaceAll(piece, "▁", " ")
	}
	return piece
}

// byteToken parses SentencePiece's byte tokens, <0x00> to <0xFF>.
func byteToken(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range p[3:5] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = byte(c - '0')
		case c >= 'A' && c <= 'F':
			v = byte(c-'A') + 10
		case c >= 'a' && c <= 'f':
			v = byte(c-'a') + 10
		default:
			return 0, false
		}
		b = b<<4 | v
	}
	return b, true
}

// Decode returns the text of ids. Byte tokens and byte-level tokens
// become their bytes as they are, so text that was not valid UTF-8 comes
// back unchanged (Hugging Face would put U+FFFD there).
func (t *BPE) Decode(ids []int) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		if id < 0 || id >= len(t.decoded) || !t.valid[id] {
			return "", fmt.Errorf("tokenizer: token %d at position %d is not in the vocabulary of %d", id, i, t.vocabSize)
		}
		b.WriteString(t.decoded[id])
	}
	s := b.String()
	for k := 0; k < t.strip && strings.HasPrefix(s, " "); k++ {
		s = s[1:]
	}
	return s, nil
}

// Encode returns the tokens of text.
func (t *BPE) Encode(text string) []int {
	e := encoder{t: t, segStart: true, textStart: true}
	_, out := e.encode(text, true, nil)
	return out
}

// EncodeReader encodes r's text, calling fn with the tokens of each piece
// read. Memory is bounded by the read size plus the longest pre-token
// (for a SentencePiece vocabulary whose merges cross spaces, the longest
// stretch between added tokens).
func (t *BPE) EncodeReader(r io.Reader, fn func(ids []int) error) error {
	e := encoder{t: t, segStart: true, textStart: true}
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

// encoder carries what one encoding remembers between pieces of text.
type encoder struct {
	t         *BPE
	segStart  bool // the next text starts a stretch between added tokens
	textStart bool // nothing has been consumed yet
	ids       []int32
}

// encode encodes a prefix of s and returns its length: all of s when
// atEOF, else up to where the tokens no longer depend on what follows.
func (e *encoder) encode(s string, atEOF bool, out []int) (int, []int) {
	t := e.t
	done := 0
	for done < len(s) {
		rest := s[done:]
		a, p, q := t.nextAdded(rest, atEOF)
		seg, segEOF := rest, atEOF
		if a != nil {
			seg, segEOF = rest[:p], true
		} else if !atEOF {
			seg = rest[:max(0, len(rest)-t.maxAdded+1)]
		}
		if !segEOF {
			seg = trimPartial(seg)
		}
		var used int
		used, out = e.segment(seg, segEOF, out)
		done += used
		if a == nil || used < len(seg) {
			break
		}
		if q == len(rest) && a.rstrip && !atEOF {
			break // the spaces after it may go on
		}
		out = append(out, int(a.id))
		done += q - p
		e.segStart, e.textStart = true, false
	}
	return done, out
}

// nextAdded finds the leftmost, longest added token in s, with the text
// it takes (spaces it strips included) as s[p:q]. Starts from which the
// longest token would run past the end of s are not looked at unless
// atEOF.
func (t *BPE) nextAdded(s string, atEOF bool) (a *addedToken, p, q int) {
	if len(t.added) == 0 {
		return nil, 0, 0
	}
	lim := len(s)
	if !atEOF {
		lim = len(s) - t.maxAdded + 1
	}
	for i := 0; i < lim; i++ {
		if !t.first[s[i]] {
			continue
		}
		for k := range t.added {
			c := &t.added[k]
			if !strings.HasPrefix(s[i:], c.content) {
				continue
			}
			end := i + len(c.content)
			if c.singleWord && (isWordBefore(s[:i]) || isWordAfter(s[end:])) {
				continue
			}
			p, q = i, end
			if c.lstrip {
				p = len(strings.TrimRightFunc(s[:i], unicode.IsSpace))
			}
			if c.rstrip {
				q = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			}
			return c, p, q
		}
	}
	return nil, 0, 0
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

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func isWordBefore(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func isWordAfter(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}
