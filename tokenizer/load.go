package tokenizer

import (
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
// names the BOS and EOS tokens (an error if the vocabulary lacks them);
// without one they are found among the usual names. It and
// chat_template.jinja give ChatTemplate.
func Open(path string) (*BPE, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Path: path, Err: unwrapPath(err)}
	}
	dir, name := path, ""
	if !st.IsDir() {
		dir, name = filepath.Dir(path), filepath.Base(path)
	}
	// A name that exists but is not a directory counts: reading it then
	// says what it is (a FIFO, a device) rather than that it is missing.
	exists := func(n string) bool {
		st, err := os.Stat(filepath.Join(dir, n))
		return err == nil && !st.IsDir()
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

// config is what memfit takes from the files beside the vocabulary:
// tokenizer_config.json's bos_token, eos_token and chat_template (the
// chat template of chat_template.jinja instead, when there is one, as
// transformers prefers it). Each is "" when absent.
type config struct {
	bos, eos     string
	noBOS, noEOS bool // the token is null: the tokenizer has none (Qwen's BOS)
	chatTemplate string
	path         string // tokenizer_config.json, for errors
	raw          []byte // its bytes, for the fingerprint
}

// readConfig reads dir's tokenizer_config.json and chat_template.jinja;
// either may be absent.
func readConfig(dir string) (*config, error) {
	p := filepath.Join(dir, "tokenizer_config.json")
	raw, err := readOptional(p, maxConfigJSON)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(p, raw)
	if err != nil {
		return nil, err
	}
	jp := filepath.Join(dir, "chat_template.jinja")
	tmpl, err := readOptional(jp, maxConfigJSON)
	if err != nil {
		return nil, err
	}
	if tmpl != nil {
		if !utf8.Valid(tmpl) {
			return nil, errorf(jp, "not UTF-8 text")
		}
		c.chatTemplate = string(tmpl)
	}
	return c, nil
}

// parseConfig reads the keys memfit uses from a tokenizer_config.json
// (nil raw: no file). A token is a string or {"content": string, ...}; a
// chat_template is a string or a list of {"name", "template"}, of which
// the one named "default" is taken.
func parseConfig(path string, raw []byte) (*config, error) {
	c := &config{path: path, raw: raw}
	if raw == nil {
		return c, nil
	}
	var f struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	token := func(key string, m json.RawMessage) (string, error) {
		if len(m) == 0 || string(m) == "null" {
			return "", nil
		}
		var s string
		if json.Unmarshal(m, &s) == nil {
			return s, nil
		}
		var o struct{ Content *string }
		if json.Unmarshal(m, &o) == nil && o.Content != nil {
			return *o.Content, nil
		}
		return "", errorf(path, "%s is %.40s, not a string or an object with a \"content\" string", key, m)
	}
	var err error
	if c.bos, err = token("bos_token", f.BOS); err != nil {
		return nil, err
	}
	if c.eos, err = token("eos_token", f.EOS); err != nil {
		return nil, err
	}
	// A null token is none, as transformers reads it: Qwen's configs say
	// "bos_token": null, and a guess among the usual names would put
	// <|endoftext|> before its text.
	c.noBOS, c.noEOS = string(f.BOS) == "null", string(f.EOS) == "null"
	if m := f.ChatTemplate; len(m) > 0 && string(m) != "null" {
		if json.Unmarshal(m, &c.chatTemplate) != nil {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if json.Unmarshal(m, &list) != nil {
				return nil, errorf(path, "chat_template is neither a string nor a list of {\"name\", \"template\"}")
			}
			for _, t := range list {
				if t.Name == "default" {
					c.chatTemplate = t.Template
				}
			}
		}
	}
	return c, nil
}

// byteChars is GPT-2's map from bytes to the printable characters that
// stand for them in byte-level vocabularies; charBytes is its inverse,
// one more than the byte (0 for none), for characters below
// len(charBytes), which holds them all (the largest is U+0143).
var byteChars, charBytes = func() ([256]rune, [0x144]int16) {
	var m [256]rune
	var inv [0x144]int16
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
		inv[m[b]] = int16(b) + 1
	}
	return m, inv
}()

// rawBytes turns a byte-level piece into the bytes it stands for.
func rawBytes(piece string) (string, bool) {
	same := true // printable ASCII stands for itself
	for i := 0; i < len(piece) && same; i++ {
		same = piece[i] >= '!' && piece[i] <= '~'
	}
	if same {
		return piece, true
	}
	b := make([]byte, 0, len(piece))
	for _, r := range piece {
		if r >= rune(len(charBytes)) || charBytes[r] == 0 {
			return "", false
		}
		b = append(b, byte(charBytes[r]-1))
	}
	return string(b), true
}

// addMerge adds the merge of rank (a, b), pieces looked up through key
// (the raw bytes of a byte-level piece), and returns the first of a, b
// and a+b that is not in the vocabulary. A later duplicate of a pair
// wins, as in Hugging Face's loader.
func (t *BPE) addMerge(rank int, a, b string, key func(string) (string, bool)) (missing string, ok bool) {
	ka, oka := key(a)
	x, ok := t.vocab[ka]
	if !oka || !ok {
		return a, false
	}
	kb, okb := key(b)
	y, ok := t.vocab[kb]
	if !okb || !ok {
		return b, false
	}
	// key(a+b) is key(a)+key(b) for both kinds of key.
	z, ok := t.vocab[ka+kb]
	if !ok {
		return a + b, false
	}
	if t.model.merges == nil {
		t.model.merges = make(map[uint64]merge)
	}
	t.model.merges[pairKey(x, y)] = merge{rank: int32(rank), id: z}
	return "", true
}

// setByteLevel keys the vocabulary by raw bytes and finds each byte's
// token. entry names a vocabulary entry in errors.
func (t *BPE) setByteLevel(path, entry string, v *vocabulary) error {
	t.byteLevel = true
	t.vocab = make(map[string]int32, len(v.ids))
	for id, piece := range v.pieces {
		if !v.has[id] {
			continue
		}
		raw, ok := rawBytes(piece)
		if !ok {
			// Not made of byte characters: no input byte sequence
			// produces it; keep it for Decode as its own text.
			raw = piece
		}
		if prev, dup := t.vocab[raw]; dup {
			return errorf(path, "%s %q (id %d) and %q (id %d) both stand for the bytes %q", entry, v.pieces[prev], prev, piece, id, raw)
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
	vraw, err := readRegular(vocabPath, maxVocabJSON)
	if err != nil {
		return nil, err
	}
	mraw, err := readRegular(mergesPath, maxMergesTxt)
	if err != nil {
		return nil, err
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	return loadGPT2(vocabPath, mergesPath, vraw, mraw, cfg)
}

// loadGPT2 builds a tokenizer from the bytes of GPT-2's files.
func loadGPT2(vocabPath, mergesPath string, vraw, mraw []byte, cfg *config) (*BPE, error) {
	if err := validJSON(vraw); err != nil {
		return nil, &Error{Path: vocabPath, Err: err}
	}
	v, err := parseVocab(vocabPath, "", vraw)
	if err != nil {
		return nil, err
	}
	// transformers' GPT2Tokenizer takes the vocabulary's size to be its
	// number of entries, so ids must be 0 to n-1: with a gap, the largest
	// ids would fall outside a model sized by it.
	if len(v.ids) != v.size() {
		for id, ok := range v.has {
			if !ok {
				return nil, errorf(vocabPath, "no entry has id %d, but ids go up to %d (GPT-2's vocabulary is numbered 0 to n-1 without gaps)", id, v.size()-1)
			}
		}
	}
	t := &BPE{splits: []splitter{splitGPT2}, unk: -1}
	if err := t.setByteLevel(vocabPath, "entries", v); err != nil {
		return nil, err
	}
	rank := 0
	err = parseMergesTxt(mergesPath, mraw, func(line int, a, b string) error {
		if p, ok := t.addMerge(rank, a, b, rawBytes); !ok {
			return errorf(mergesPath, "line %d (%q %q): %q is not in %s", line, a, b, p, filepath.Base(vocabPath))
		}
		rank++
		return nil
	})
	if err != nil {
		return nil, err
	}
	var added []addedToken
	if id, ok := v.ids["<|endoftext|>"]; ok {
		added = append(added, addedToken{content: "<|endoftext|>", id: id})
	}
	if err := t.finish(vocabPath, added, fingerprint(vraw, mraw, cfg.raw), cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// hfComponent is any normalizer, pre-tokenizer or decoder of a
// tokenizer.json, with the fields memfit reads.
type hfComponent struct {
	Type             string        `json:"type"`
	Normalizers      componentList `json:"normalizers"`
	Pretokenizers    componentList `json:"pretokenizers"`
	Decoders         componentList `json:"decoders"`
	Pattern          *hfPattern    `json:"pattern"`
	Content          *string       `json:"content"`
	Behavior         string        `json:"behavior"`
	Invert           bool          `json:"invert"`
	AddPrefixSpace   *bool         `json:"add_prefix_space"`
	UseRegex         *bool         `json:"use_regex"`
	Prepend          *string       `json:"prepend"`
	Replacement      *string       `json:"replacement"`
	PrependScheme    *string       `json:"prepend_scheme"`
	Split            *bool         `json:"split"`
	IndividualDigits *bool         `json:"individual_digits"`
	Start            int           `json:"start"`
	Stop             int           `json:"stop"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// flatten parses a component and the members of its Sequence, at most
// maxMembers in all, Sequences nested at most maxNesting deep.
func flatten(raw json.RawMessage, kind string) ([]hfComponent, error) {
	var out []hfComponent
	if err := flattenInto(&out, raw, kind, 0); err != nil {
		return nil, err
	}
	return out, nil
}

func flattenInto(out *[]hfComponent, raw json.RawMessage, kind string, depth int) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: %v", kind, err)
	}
	if c.Type != "Sequence" {
		if len(*out) == maxMembers {
			return fmt.Errorf("%s: more than %d components are not supported", kind, maxMembers)
		}
		*out = append(*out, c)
		return nil
	}
	if depth == maxNesting {
		return fmt.Errorf("%s: Sequences nested more than %d deep are not supported", kind, maxNesting)
	}
	for _, list := range []componentList{c.Normalizers, c.Pretokenizers, c.Decoders} {
		for _, m := range list {
			if err := flattenInto(out, m, kind, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

type hfFile struct {
	AddedTokens  json.RawMessage `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		FuseUnk                 bool            `json:"fuse_unk"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// openHF reads a Hugging Face tokenizer.json and the configuration beside
// it.
func openHF(path, dir string) (*BPE, error) {
	raw, err := readRegular(path, maxTokenizerJSON)
	if err != nil {
		return nil, err
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	return loadHF(path, raw, cfg)
}

// loadHF builds a tokenizer from a tokenizer.json's bytes. Only what the
// BPE tokenizers of GPT-2, Llama 2 and 3 and their kin use is accepted;
// any other component is an error naming it, never a silently different
// encoding.
func loadHF(path string, raw []byte, cfg *config) (*BPE, error) {
	var f hfFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, &Error{Path: path, Err: fmt.Errorf("not a tokenizer.json: %v", err)}
	}
	// raw is not used past here, nor each part of f past its parse, so
	// that the collector may free them while the tables are built.
	sum := fingerprint(raw, cfg.raw)
	m := &f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && !isNull(m.Vocab) && !isNull(m.Merges)):
		return nil, errorf(path, "model type %q is not supported (only BPE)", m.Type)
	case isNull(m.Vocab):
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
	nforms := 0
	for _, n := range norms {
		if f, ok := forms[n.Type]; ok {
			if nforms++; nforms > 1 {
				return nil, errorf(path, "normalizer %s: more than one Unicode normalization form is not supported", describe(n))
			}
			t.norms = append(t.norms, normOp{kind: normForm, form: f})
			continue
		}
		switch {
		case n.Type == "Prepend" && n.Prepend != nil && *n.Prepend == "▁":
			t.norms = append(t.norms, normOp{kind: normPrepend})
		case n.Type == "Replace" && n.Pattern != nil && n.Pattern.String != nil && *n.Pattern.String == " " && n.Content != nil && *n.Content == "▁":
			t.norms = append(t.norms, normOp{kind: normReplace})
			t.replaceSpace = true
		default:
			return nil, errorf(path, "normalizer %s is not supported (only NFC, NFD, NFKC, NFKD, Prepend \"▁\" and Replace \" \" with \"▁\")", describe(n))
		}
	}

	pres, err := flatten(f.PreTokenizer, "pre_tokenizer")
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	byteLevel, metaspace := false, false
	for i, p := range pres {
		if metaspace && p.Type != "Digits" {
			// Metaspace hands on "▁" where memfit keeps spaces until the
			// pieces are looked up; digits read the same either way.
			return nil, errorf(path, "pre_tokenizer %s after Metaspace is not supported", describe(p))
		}
		switch p.Type {
		case "ByteLevel":
			byteLevel = true
			if p.AddPrefixSpace != nil && *p.AddPrefixSpace {
				// It puts a space before each piece it is given.
				if i > 0 {
					return nil, errorf(path, "pre_tokenizer ByteLevel with add_prefix_space after another pre-tokenizer is not supported")
				}
				t.prefixSpace = true
			}
			if p.UseRegex == nil || *p.UseRegex {
				t.splits = append(t.splits, splitGPT2)
			}
		case "Split":
			sp, err := splitFor(p)
			if err != nil {
				return nil, &Error{Path: path, Err: err}
			}
			t.splits = append(t.splits, sp)
		case "Digits":
			if p.IndividualDigits != nil && *p.IndividualDigits {
				t.splits = append(t.splits, splitDigits)
			} else {
				t.splits = append(t.splits, splitNumbers)
			}
		case "Metaspace":
			// It puts "▁" before each piece it is given, and writes
			// spaces as "▁" for the pre-tokenizers after it; memfit puts
			// it only before a stretch of text and reads spaces as "▁"
			// throughout, so it must come first.
			if i > 0 {
				return nil, errorf(path, "pre_tokenizer Metaspace after another pre-tokenizer is not supported")
			}
			if p.Replacement != nil && *p.Replacement != "▁" {
				return nil, errorf(path, "pre_tokenizer Metaspace with replacement %q is not supported", *p.Replacement)
			}
			metaspace, t.replaceSpace = true, true
			t.metaspace = prependAlways
			if p.PrependScheme != nil {
				switch *p.PrependScheme {
				case "always":
				case "first":
					t.metaspace = prependFirst
				case "never":
					t.metaspace = prependNever
				default:
					return nil, errorf(path, "pre_tokenizer Metaspace prepend_scheme %q is not supported", *p.PrependScheme)
				}
			} else if p.AddPrefixSpace != nil && !*p.AddPrefixSpace {
				t.metaspace = prependNever
			}
			if p.Split == nil || *p.Split {
				t.splits = append(t.splits, splitMetaspace)
			}
		default:
			return nil, errorf(path, "pre_tokenizer %s is not supported (only ByteLevel, Split, Digits and Metaspace)", describe(p))
		}
	}
	if byteLevel && (t.replaceSpace || metaspace || hasPrepend(t.norms)) {
		return nil, errorf(path, "a ByteLevel pre-tokenizer with Replace, Prepend or Metaspace is not supported")
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

	v, err := parseVocab(path, "model.vocab", m.Vocab)
	if err != nil {
		return nil, err
	}
	m.Vocab = nil
	key := func(s string) (string, bool) { return s, true }
	if byteLevel {
		if err := t.setByteLevel(path, "model.vocab entries", v); err != nil {
			return nil, err
		}
		if len(t.splits) == 0 {
			t.splits = []splitter{splitWhole}
		}
		key = rawBytes
	} else {
		if err := t.setPieces(path, v, m.UnkToken); err != nil {
			return nil, err
		}
	}
	err = parseMerges(path, m.Merges, func(i int, a, b string) error {
		if p, ok := t.addMerge(i, a, b, key); !ok {
			return errorf(path, "model.merges[%d] (%q %q): %q is not in model.vocab", i, a, b, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.Merges = nil
	if !byteLevel && len(t.splits) == 0 {
		t.splits = []splitter{splitWhole}
		if t.replaceSpace && t.spaceID >= 0 {
			t.splits[0] = splitPieces(joinsSpace(t.vocab))
		}
	}

	added, err := parseAdded(path, f.AddedTokens)
	if err != nil {
		return nil, err
	}
	if err := checkAdded(path, "model.vocab", added, v); err != nil {
		return nil, err
	}
	if err := t.finish(path, added, sum, cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// setPieces indexes a SentencePiece-style vocabulary.
func (t *BPE) setPieces(path string, v *vocabulary, unk *string) error {
	t.vocab = v.ids
	t.runeID = make(map[rune]int32)
	for i := range t.asciiID {
		t.asciiID[i] = -1
	}
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	for id, piece := range v.pieces {
		if !v.has[id] {
			continue
		}
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
			return errorf(path, "unk_token %q is not in model.vocab", *unk)
		}
		t.unk = id
	}
	// A character missing from the vocabulary becomes its bytes' tokens
	// when there are all, else the unknown token (Gemma 2 has no <0x09>:
	// the tab is a piece of its own).
	if t.unk < 0 {
		if !t.byteFallback {
			return errorf(path, "neither byte_fallback nor unk_token: some text could not be encoded")
		}
		for b, id := range t.byteTok {
			if id < 0 {
				return errorf(path, "byte_fallback is on but model.vocab lacks <0x%02X>, and there is no unk_token", b)
			}
		}
	}
	return nil
}

// joinsSpace returns the runes that some vocabulary piece has right
// before a "▁" (leading ones aside): a merge may join them with the space
// after them, nothing else with a space before it. Nil when there are
// none (Llama 2, Gemma 2; Gemma 3 has one, ">" of ">▁</").
func joinsSpace(vocab map[string]int32) map[rune]bool {
	var join map[rune]bool
	for p := range vocab {
		p = strings.TrimLeft(p, "▁")
		for i := strings.Index(p, "▁"); i > 0; {
			r, _ := utf8.DecodeLastRuneInString(p[:i])
			if r != '▁' {
				if join == nil {
					join = map[rune]bool{}
				}
				join[r] = true
			}
			k := strings.Index(p[i+len("▁"):], "▁")
			if k < 0 {
				break
			}
			i += len("▁") + k
		}
	}
	return join
}

// knownSplitter returns the hand-written scanner of a split pattern, or
// nil.
func knownSplitter(p string) splitter {
	switch p {
	case GPT2Pattern:
		return splitGPT2
	case Llama3Pattern:
		return splitLlama3
	case Qwen2Pattern:
		return splitQwen2
	case TekkenPattern:
		return splitTekken
	case O200kPattern:
		return splitO200k
	}
	return nil
}

// patternSplitter returns the scanner of a Split pattern: the hand-written
// ones for the patterns of knownSplitter, else Go's regexp when it accepts
// the pattern.
func patternSplitter(p string) (splitter, error) {
	if sp := knownSplitter(p); sp != nil {
		return sp, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Split pattern %q: not one memfit knows, and Go's regexp rejects it: %v", p, err)
	}
	return splitRegexp(re), nil
}

// splitFor returns the scanner of a Split pre-tokenizer. A regex splits
// Isolated, or is inverted with its matches kept and the rest Removed
// (GPT-4o's), which is the same for the hand-written patterns: every
// character is in some match of theirs. A string splits with any
// behaviour but Removed.
func splitFor(p hfComponent) (splitter, error) {
	bad := func(why string) (splitter, error) {
		return nil, fmt.Errorf("pre_tokenizer %s is not supported: %s", describe(p), why)
	}
	switch {
	case p.Pattern == nil || (p.Pattern.Regex == nil) == (p.Pattern.String == nil):
		return bad("its pattern is not one Regex or String")
	case p.Pattern.Regex != nil:
		re := *p.Pattern.Regex
		switch {
		case p.Behavior == "Isolated" && !p.Invert:
		case p.Behavior == "Removed" && p.Invert && knownSplitter(re) != nil:
		default:
			return bad("a Regex splits with behavior Isolated, or Removed inverted for a pattern memfit knows")
		}
		return patternSplitter(re)
	}
	str := *p.Pattern.String
	if str == "" {
		return bad("an empty String")
	}
	if p.Invert {
		return bad("an inverted String")
	}
	how, ok := map[string]splitBehavior{
		"Isolated":           splitIsolated,
		"MergedWithPrevious": splitMergedWithPrevious,
		"MergedWithNext":     splitMergedWithNext,
		"Contiguous":         splitContiguous,
	}[p.Behavior]
	if !ok {
		return bad("a String splits with behavior Isolated, MergedWithPrevious, MergedWithNext or Contiguous")
	}
	return splitLiteral(str, how), nil
}

// hasPrepend reports whether a Prepend normalizer is among ops.
func hasPrepend(ops []normOp) bool {
	for _, op := range ops {
		if op.kind == normPrepend {
			return true
		}
	}
	return false
}

func describe(c hfComponent) string {
	b, _ := json.Marshal(c)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return c.Type + " " + s
}
