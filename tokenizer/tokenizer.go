package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
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

// prepend says when the Metaspace pre-tokenizer puts "▁" before a stretch
// of text between added tokens that does not start with one (or a space).
type prepend uint8

const (
	prependNever  prepend = iota
	prependAlways         // before every stretch
	prependFirst          // only before a stretch that starts the text
)

// addedToken is a token of tokenizer.json's added_tokens, matched in the
// text before anything else (see added.go).
type addedToken struct {
	content                    string
	id                         int32
	lstrip, rstrip, singleWord bool
	normalized                 bool // matched in the normalized text
}

// BPE is a byte-level or SentencePiece-style BPE tokenizer. It is safe for
// concurrent use.
type BPE struct {
	byteLevel bool
	norms     []normOp
	// splits are the pre-tokenizers, each splitting the pre-tokens of the
	// one before (never empty: splitWhole when there is none).
	splits []splitter
	// byte-level: the ByteLevel pre-tokenizer's add_prefix_space.
	prefixSpace bool

	vocab        map[string]int32 // byte-level: keyed by raw bytes; else by the normalized piece
	ignoreMerges bool
	model        bpe
	cache        wordCache

	byteID [256]int32 // byte-level: the token of each byte

	// SentencePiece style (byteLevel false).
	replaceSpace bool    // " " is "▁" (normalizer Replace, or Metaspace)
	metaspace    prepend // when Metaspace puts "▁" before text that lacks one
	runeID       map[rune]int32
	asciiID      [utf8.RuneSelf]int32
	spaceID      int32 // the token of "▁", or -1
	byteFallback bool
	byteTok      [256]int32 // <0xNN>, or -1
	unk          int32      // -1 when none
	fuseUnk      bool
	strip        int // leading spaces the decoder strips

	raw     *matcher // added tokens matched in the raw text, or nil
	normed  *matcher // those matched in the normalized text, or nil
	special map[string]int32

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
// of tokenizer_config.json when it names one, else (unless it is null)
// the usual name BOS was found under, else "". Chat templates use it as
// bos_token.
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
const rulesVersion = "memfit tokenizer rules 2\n"

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
	var raw, normed []addedToken
	var rawText, normText []string
	normBytes := 0
	for _, a := range added {
		t.special[a.content] = a.id
		size = max(size, a.id+1)
		if !a.normalized {
			raw, rawText = append(raw, a), append(rawText, a.content)
			continue
		}
		// Matched as the normalizers write it, as the Rust library does
		// (with Prepend, "▁" before it).
		n := t.normalize(a.content, true)
		if normBytes += len(n); normBytes > maxAddedBytes {
			return errorf(path, "added tokens take more than %d bytes normalized", maxAddedBytes)
		}
		if n != "" {
			normed, normText = append(normed, a), append(normText, n)
		}
	}
	t.raw, t.normed = newMatcher(raw, rawText), newMatcher(normed, normText)
	t.vocabSize = int(size)

	t.decoded = make([]string, size)
	t.valid = make([]bool, size)
	for piece, id := range t.vocab {
		t.decoded[id], t.valid[id] = t.decodePiece(piece), true
	}
	for _, a := range added {
		// The decoders see added tokens as any other (Gemma's "▁▁" is
		// two spaces); byte-level ones are kept as written, as
		// transformers.js keeps them (the Rust library would read one
		// made only of byte characters as bytes: none of the models'
		// is such that the two differ).
		d := a.content
		if !t.byteLevel {
			d = t.decodePiece(d)
		}
		t.decoded[a.id], t.valid[a.id] = d, true
	}

	t.chatTemplate = cfg.chatTemplate
	var err error
	bos, eos := bosNames, eosNames
	if cfg.noBOS {
		bos = nil
	}
	if cfg.noEOS {
		eos = nil
	}
	if t.bos, t.bosText, err = t.configToken(path, cfg, "bos_token", cfg.bos, bos); err != nil {
		return err
	}
	t.eos, t.eosText, err = t.configToken(path, cfg, "eos_token", cfg.eos, eos)
	return err
}

// configToken finds the token tokenizer_config.json names under key, or
// without one the first of the usual names the vocabulary has; -1 and ""
// when neither (or the config says null).
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
