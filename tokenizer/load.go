package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Open reads a tokenizer from path: a Hugging Face tokenizer.json, GPT-2's
// encoder.json (or vocab.json) with vocab.bpe (or merges.txt) beside it
// (either file may be named), or a directory holding either set
// (tokenizer.json preferred). A tokenizer_config.json beside the files
// names the BOS and EOS tokens; without one they are found among the
// usual names.
func Open(path string) (*BPE, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Path: path, Err: unwrapPath(err)}
	}
	dir, name := path, ""
	if !st.IsDir() {
		dir, name = filepath.Dir(path), filepath.Base(path)
	}
	exists := func(n string) bool {
		st, err := os.Stat(filepath.Join(dir, n))
		return err == nil && st.Mode().IsRegular()
	}
	pick := func(names ...string) string {
		for _, n := range names {
			if exists(n) {
				return n
			}
		}
		return ""
	}
	vocabNames := []string{"encoder.json", "vocab.json"}
	mergeNames := []string{"vocab.bpe", "merges.txt"}
	switch {
	case name == "" && exists("tokenizer.json"):
		return openHF(filepath.Join(dir, "tokenizer.json"), dir)
	case name == "":
		v, m := pick(vocabNames...), pick(mergeNames...)
		if v == "" || m == "" {
			return nil, errorf(path, "directory holds neither tokenizer.json nor encoder.json/vocab.json with vocab.bpe/merges.txt")
		}
		return openGPT2(filepath.Join(dir, v), filepath.Join(dir, m), dir)
	case isOneOf(name, vocabNames):
		m := pick(mergeNames...)
		if m == "" {
			return nil, errorf(path, "no vocab.bpe or merges.txt beside it")
		}
		return openGPT2(path, filepath.Join(dir, m), dir)
	case isOneOf(name, mergeNames):
		v := pick(vocabNames...)
		if v == "" {
			return nil, errorf(path, "no encoder.json or vocab.json beside it")
		}
		return openGPT2(filepath.Join(dir, v), path, dir)
	default:
		return openHF(path, dir)
	}
}

func isOneOf(s string, list []string) bool {
	for _, l := range list {
		if s == l {
			return true
		}
	}
	return false
}

// unwrapPath drops the path an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Names tried for BOS and EOS when no tokenizer_config.json says.
var (
	bosNames = []string{"<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>"}
	eosNames = []string{"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"}
)

// readConfig returns the BOS and EOS names of dir's tokenizer_config.json
// ahead of the defaults, and the file's bytes for the fingerprint.
func readConfig(dir string) (bos, eos []string, raw []byte, err error) {
	p := filepath.Join(dir, "tokenizer_config.json")
	raw, err = os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return bosNames, eosNames, nil, nil
	}
	if err != nil {
		return nil, nil, nil, &Error{Path: p, Err: unwrapPath(err)}
	}
	var cfg struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, nil, nil, &Error{Path: p, Err: err}
	}
	// A token is a string or {"content": string, ...}.
	name := func(m json.RawMessage) []string {
		var s string
		if json.Unmarshal(m, &s) == nil && s != "" {
			return []string{s}
		}
		var o struct{ Content string }
		if json.Unmarshal(m, &o) == nil && o.Content != "" {
			return []string{o.Content}
		}
		return nil
	}
	return append(name(cfg.BOS), bosNames...), append(name(cfg.EOS), eosNames...), raw, nil
}

// byteChars is GPT-2's map from bytes to the printable characters that
// stand for them in byte-level vocabularies.
var byteChars, charBytes = func() ([256]rune, map[rune]byte) {
	var m [256]rune
	inv := make(map[rune]byte, 256)
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
		inv[m[b]] = byte(b)
	}
	return m, inv
}()

// rawBytes turns a byte-level piece into the bytes it stands for.
func rawBytes(piece string) (string, bool) {
	var b strings.Builder
	for _, r := range piece {
		c, ok := charBytes[r]
		if !ok {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// mergePair is one merge, written "a b" or ["a", "b"].
type mergePair [2]string

func (m *mergePair) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		a, c, ok := strings.Cut(s, " ")
		if !ok {
			return fmt.Errorf("merge %q is not two tokens separated by a space", s)
		}
		m[0], m[1] = a, c
		return nil
	}
	var p []string
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if len(p) != 2 {
		return fmt.Errorf("merge %q has %d tokens, want 2", p, len(p))
	}
	m[0], m[1] = p[0], p[1]
	return nil
}

// setMerges builds the merge table; pieces are looked up through key (the
// raw bytes of a byte-level piece). A later duplicate of a pair wins, as
// in Hugging Face's loader.
func (t *BPE) setMerges(path string, merges []mergePair, key func(string) (string, bool)) error {
	t.model.merges = make(map[uint64]merge, len(merges))
	look := func(i int, p string) (int32, error) {
		k, ok := key(p)
		if ok {
			if id, ok := t.vocab[k]; ok {
				return id, nil
			}
		}
		return 0, errorf(path, "merge %d (%q %q): %q is not in the vocabulary", i, merges[i][0], merges[i][1], p)
	}
	for i, m := range merges {
		a, err := look(i, m[0])
		if err != nil {
			return err
		}
		b, err := look(i, m[1])
		if err != nil {
			return err
		}
		c, err := look(i, m[0]+m[1])
		if err != nil {
			return err
		}
		t.model.merges[pairKey(a, b)] = merge{rank: int32(i), id: c}
	}
	return nil
}

// setByteLevel keys the vocabulary by raw bytes and finds each byte's
// token.
func (t *BPE) setByteLevel(path string, vocab map[string]int) error {
	t.byteLevel = true
	t.vocab = make(map[string]int32, len(vocab))
	for piece, id := range vocab {
		raw, ok := rawBytes(piece)
		if !ok {
			// Not made of byte characters: no input byte sequence
			// produces it; keep it for Decode as its own text.
			raw = piece
		}
		t.vocab[raw] = int32(id)
	}
	for b := range 256 {
		id, ok := t.vocab[string([]byte{byte(b)})]
		if !ok {
			return errorf(path, "byte-level vocabulary lacks byte 0x%02x (%q)", b, string(byteChars[b]))
		}
		t.byteID[b] = id
	}
	return nil
}

// openGPT2 reads GPT-2's encoder.json and vocab.bpe.
func openGPT2(vocabPath, mergesPath, dir string) (*BPE, error) {
	vraw, err := os.ReadFile(vocabPath)
	if err != nil {
		return nil, &Error{Path: vocabPath, Err: unwrapPath(err)}
	}
	var vocab map[string]int
	if err := json.Unmarshal(vraw, &vocab); err != nil {
		return nil, &Error{Path: vocabPath, Err: err}
	}
	mraw, err := os.ReadFile(mergesPath)
	if err != nil {
		return nil, &Error{Path: mergesPath, Err: unwrapPath(err)}
	}
	var merges []mergePair
	sc := bufio.NewScanner(bytes.NewReader(mraw))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if line == 1 && strings.HasPrefix(s, "#version") || strings.TrimSpace(s) == "" {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 2 {
			return nil, errorf(mergesPath, "line %d: %q is not two tokens separated by a space", line, s)
		}
		merges = append(merges, mergePair{f[0], f[1]})
	}
	t := &BPE{split: splitGPT2, unk: -1}
	if err := t.setByteLevel(vocabPath, vocab); err != nil {
		return nil, err
	}
	if err := t.setMerges(mergesPath, merges, rawBytes); err != nil {
		return nil, err
	}
	bos, eos, craw, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	var added []addedToken
	if id, ok := vocab["<|endoftext|>"]; ok {
		added = append(added, addedToken{content: "<|endoftext|>", id: int32(id)})
	}
	if err := t.finish(vocabPath, added, [][]byte{vraw, mraw, craw}, bos, eos); err != nil {
		return nil, err
	}
	return t, nil
}

// hfComponent is any normalizer, pre-tokenizer or decoder of a
// tokenizer.json, with the fields memfit reads.
type hfComponent struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Decoders       []json.RawMessage `json:"decoders"`
	Pattern        *hfPattern        `json:"pattern"`
	Content        *string           `json:"content"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Prepend        *string           `json:"prepend"`
	Replacement    *string           `json:"replacement"`
	PrependScheme  *string           `json:"prepend_scheme"`
	Split          *bool             `json:"split"`
	Start          int               `json:"start"`
	Stop           int               `json:"stop"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// flatten parses a component and the members of its Sequence.
func flatten(raw json.RawMessage, kind string) ([]hfComponent, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", kind, err)
	}
	if c.Type != "Sequence" {
		return []hfComponent{c}, nil
	}
	var out []hfComponent
	for _, m := range append(append(c.Normalizers, c.Pretokenizers...), c.Decoders...) {
		sub, err := flatten(m, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
	}
	return out, nil
}

type hfFile struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		Lstrip     bool   `json:"lstrip"`
		Rstrip     bool   `json:"rstrip"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type                    string         `json:"type"`
		Dropout                 *float64       `json:"dropout"`
		UnkToken                *string        `json:"unk_token"`
		ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
		FuseUnk                 bool           `json:"fuse_unk"`
		ByteFallback            bool           `json:"byte_fallback"`
		IgnoreMerges            bool           `json:"ignore_merges"`
		Vocab                   map[string]int `json:"vocab"`
		Merges                  []mergePair    `json:"merges"`
	} `json:"model"`
}

// openHF reads a Hugging Face tokenizer.json. Only what the BPE
// tokenizers of GPT-2, Llama 2 and 3 and their kin use is accepted; any
// other component is an error naming it, never a silently different
// encoding.
func openHF(path, dir string) (*BPE, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Path: path, Err: unwrapPath(err)}
	}
	var f hfFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, &Error{Path: path, Err: fmt.Errorf("not a tokenizer.json: %v", err)}
	}
	m := &f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil && m.Merges != nil):
		return nil, errorf(path, "model type %q is not supported (only BPE)", m.Type)
	case m.Vocab == nil:
		return nil, errorf(path, "model has no vocab")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errorf(path, "BPE dropout %g is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, errorf(path, "continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, errorf(path, "end_of_word_suffix is not supported")
	}
	t := &BPE{unk: -1, spaceID: -1, ignoreMerges: m.IgnoreMerges, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback}

	norms, err := flatten(f.Normalizer, "normalizer")
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	for _, n := range norms {
		switch {
		case n.Type == "Prepend" && n.Prepend != nil && *n.Prepend == "▁":
			t.prepend = prependAlways
		case n.Type == "Replace" && n.Pattern != nil && n.Pattern.String != nil && *n.Pattern.String == " " && n.Content != nil && *n.Content == "▁":
			t.replaceSpace = true
		default:
			return nil, errorf(path, "normalizer %s is not supported (only Prepend \"▁\" and Replace \" \" with \"▁\")", describe(n))
		}
	}

	pres, err := flatten(f.PreTokenizer, "pre_tokenizer")
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	byteLevel, metaspace := false, false
	for i, p := range pres {
		switch p.Type {
		case "ByteLevel":
			byteLevel = true
			if p.AddPrefixSpace != nil && *p.AddPrefixSpace {
				if i > 0 {
					return nil, errorf(path, "pre_tokenizer ByteLevel with add_prefix_space after another pre-tokenizer is not supported")
				}
				t.prefixSpace = true
			}
			if p.UseRegex == nil || *p.UseRegex {
				if t.split != nil {
					return nil, errorf(path, "pre_tokenizer: ByteLevel's regex after a Split is not supported")
				}
				t.split = splitGPT2
			}
		case "Split":
			if p.Behavior != "Isolated" || p.Invert || p.Pattern == nil || p.Pattern.Regex == nil {
				return nil, errorf(path, "pre_tokenizer %s is not supported (only Split with a Regex, behavior Isolated, not inverted)", describe(p))
			}
			if t.split != nil {
				return nil, errorf(path, "pre_tokenizer: two splitting pre-tokenizers are not supported")
			}
			if t.split, err = patternSplitter(*p.Pattern.Regex); err != nil {
				return nil, &Error{Path: path, Err: err}
			}
		case "Metaspace":
			if p.Replacement != nil && *p.Replacement != "▁" {
				return nil, errorf(path, "pre_tokenizer Metaspace with replacement %q is not supported", *p.Replacement)
			}
			metaspace, t.replaceSpace = true, true
			t.prepend = prependAlways
			if p.PrependScheme != nil {
				switch *p.PrependScheme {
				case "always":
				case "first":
					t.prepend = prependFirst
				case "never":
					t.prepend = prependNever
				default:
					return nil, errorf(path, "pre_tokenizer Metaspace prepend_scheme %q is not supported", *p.PrependScheme)
				}
			} else if p.AddPrefixSpace != nil && !*p.AddPrefixSpace {
				t.prepend = prependNever
			}
			if p.Split == nil || *p.Split {
				t.split = splitMetaspace
			}
		default:
			return nil, errorf(path, "pre_tokenizer %s is not supported (only ByteLevel, Split and Metaspace)", describe(p))
		}
	}
	if byteLevel && (len(norms) > 0 || metaspace) {
		return nil, errorf(path, "a ByteLevel pre-tokenizer with a normalizer or Metaspace is not supported")
	}

	decs, err := flatten(f.Decoder, "decoder")
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	for _, d := range decs {
		ok := false
		switch d.Type {
		case "ByteLevel":
			ok = byteLevel
		case "Replace":
			ok = !byteLevel && d.Pattern != nil && d.Pattern.String != nil && *d.Pattern.String == "▁" && d.Content != nil && *d.Content == " "
		case "ByteFallback", "Fuse":
			ok = !byteLevel
		case "Strip":
			ok = !byteLevel && d.Content != nil && *d.Content == " " && d.Stop == 0
			t.strip = d.Start
		case "Metaspace":
			ok = !byteLevel
			if d.PrependScheme == nil || *d.PrependScheme != "never" {
				t.strip = 1
			}
		}
		if !ok {
			return nil, errorf(path, "decoder %s is not supported with this pre-tokenizer", describe(d))
		}
	}

	if byteLevel {
		if err := t.setByteLevel(path, m.Vocab); err != nil {
			return nil, err
		}
		if t.split == nil {
			t.split = splitWhole
		}
		if err := t.setMerges(path, m.Merges, rawBytes); err != nil {
			return nil, err
		}
	} else {
		if err := t.setPieces(path, m.Vocab, m.UnkToken); err != nil {
			return nil, err
		}
		if err := t.setMerges(path, m.Merges, func(s string) (string, bool) { return s, true }); err != nil {
			return nil, err
		}
		if t.split == nil {
			t.split = splitWhole
			if t.replaceSpace && t.spaceID >= 0 && !spaceInside(t.vocab) {
				t.split = splitPieces
			}
		}
	}

	added := make([]addedToken, 0, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		added = append(added, addedToken{content: a.Content, id: int32(a.ID), lstrip: a.Lstrip, rstrip: a.Rstrip, singleWord: a.SingleWord})
	}
	bos, eos, craw, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	if err := t.finish(path, added, [][]byte{raw, craw}, bos, eos); err != nil {
		return nil, err
	}
	return t, nil
}

// setPieces indexes a SentencePiece-style vocabulary.
func (t *BPE) setPieces(path string, vocab map[string]int, unk *string) error {
	t.vocab = make(map[string]int32, len(vocab))
	t.runeID = make(map[rune]int32)
	for i := range t.asciiID {
		t.asciiID[i] = -1
	}
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	for piece, id := range vocab {
		t.vocab[piece] = int32(id)
		if r, n := utf8.DecodeRuneInString(piece); n == len(piece) && !(r == utf8.RuneError && n <= 1) {
			if r < utf8.RuneSelf {
				t.asciiID[r] = int32(id)
			} else {
				t.runeID[r] = int32(id)
			}
		}
		if b, ok := byteToken(piece); ok {
			t.byteTok[b] = int32(id)
		}
	}
	if id, ok := t.vocab["▁"]; ok {
		t.spaceID = id
	}
	if unk != nil {
		id, ok := t.vocab[*unk]
		if !ok {
			return errorf(path, "unk_token %q is not in the vocabulary", *unk)
		}
		t.unk = id
	}
	if t.byteFallback {
		for b, id := range t.byteTok {
			if id < 0 {
				return errorf(path, "byte_fallback is on but the vocabulary lacks <0x%02X>", b)
			}
		}
	} else if t.unk < 0 {
		return errorf(path, "neither byte_fallback nor unk_token: some text could not be encoded")
	}
	return nil
}

// spaceInside reports whether a piece has "▁" after another character,
// which would let merges join across spaces.
func spaceInside(vocab map[string]int32) bool {
	for p := range vocab {
		if strings.Contains(strings.TrimLeft(p, "▁"), "▁") {
			return true
		}
	}
	return false
}

// patternSplitter returns the scanner of a Split pattern: the hand-written
// ones for GPT-2's and Llama 3's patterns, else Go's regexp when it
// accepts the pattern.
func patternSplitter(p string) (splitter, error) {
	switch p {
	case GPT2Pattern:
		return splitGPT2, nil
	case Llama3Pattern:
		return splitLlama3, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Split pattern %q: not one memfit knows, and Go's regexp rejects it: %v", p, err)
	}
	return splitRegexp(re), nil
}

func describe(c hfComponent) string {
	b, _ := json.Marshal(c)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return c.Type + " " + s
}
