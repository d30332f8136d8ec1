package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// BPE is a byte-level BPE tokenizer (GPT-2's).
type BPE struct {
	encoder  map[string]int // token (in the byte alphabet) -> id
	decoder  []string       // id -> token
	ranks    map[[2]string]int
	special  map[string]int // added tokens, matched before pre-tokenizing
	byteChar [256]rune      // byte -> its printable stand-in
	charByte map[rune]byte

	mu    sync.Mutex
	cache map[string][]int

	fingerprint string // hash of the files it was read from
}

// Fingerprint identifies the vocabulary (a hash of the files it was read
// from): caches of tokenized text are keyed by it.
func (t *BPE) Fingerprint() string { return t.fingerprint }

// Open loads a tokenizer from a file or directory: tokenizer.json, or
// encoder.json/vocab.json with vocab.bpe/merges.txt.
func Open(path string) (*BPE, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %v", err)
	}
	dir := path
	if !st.IsDir() {
		if filepath.Base(path) == "tokenizer.json" || strings.HasSuffix(path, ".json") {
			return openHF(path)
		}
		return nil, fmt.Errorf("tokenizer: %s: want tokenizer.json or a directory with encoder.json and vocab.bpe", path)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		return openHF(filepath.Join(dir, "tokenizer.json"))
	}
	enc, bpe := "", ""
	for _, n := range []string{"encoder.json", "vocab.json"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			enc = filepath.Join(dir, n)
			break
		}
	}
	for _, n := range []string{"vocab.bpe", "merges.txt"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			bpe = filepath.Join(dir, n)
			break
		}
	}
	if enc == "" || bpe == "" {
		return nil, fmt.Errorf("tokenizer: %s holds no tokenizer.json, nor encoder.json/vocab.json with vocab.bpe/merges.txt", dir)
	}
	b, err := os.ReadFile(enc)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %v", err)
	}
	var vocab map[string]int
	if err := json.Unmarshal(b, &vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %v", enc, err)
	}
	m, err := os.ReadFile(bpe)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %v", err)
	}
	var merges []string
	for i, line := range strings.Split(string(m), "\n") {
		if i == 0 && strings.HasPrefix(line, "#version") || strings.TrimSpace(line) == "" {
			continue
		}
		merges = append(merges, line)
	}
	tok, err := newBPE(vocab, merges, nil, bpe)
	if err == nil {
		tok.fingerprint = fingerprint(b, m)
	}
	return tok, err
}

func fingerprint(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// openHF reads a Hugging Face tokenizer.json of a byte-level BPE model.
func openHF(path string) (*BPE, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %v", err)
	}
	var f struct {
		Model struct {
			Type   string          `json:"type"`
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
		PreTokenizer *struct {
			Type string `json:"type"`
		} `json:"pre_tokenizer"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %v", path, err)
	}
	if f.Model.Type != "BPE" || f.PreTokenizer == nil || f.PreTokenizer.Type != "ByteLevel" {
		pt := "none"
		if f.PreTokenizer != nil {
			pt = f.PreTokenizer.Type
		}
		return nil, fmt.Errorf("tokenizer: %s: model %q with pre-tokenizer %s: memfit reads byte-level BPE (GPT-2's)", path, f.Model.Type, pt)
	}
	// Merges are "a b" strings (older files) or ["a", "b"] pairs.
	var merges []string
	if err := json.Unmarshal(f.Model.Merges, &merges); err != nil {
		var pairs [][2]string
		if err := json.Unmarshal(f.Model.Merges, &pairs); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: merges: %v", path, err)
		}
		for _, p := range pairs {
			merges = append(merges, p[0]+" "+p[1])
		}
	}
	special := map[string]int{}
	for _, t := range f.AddedTokens {
		special[t.Content] = t.ID
	}
	tok, err := newBPE(f.Model.Vocab, merges, special, path)
	if err == nil {
		tok.fingerprint = fingerprint(b)
	}
	return tok, err
}

func newBPE(vocab map[string]int, merges []string, special map[string]int, where string) (*BPE, error) {
	t := &BPE{encoder: vocab, ranks: map[[2]string]int{}, special: special, charByte: map[rune]byte{}, cache: map[string][]int{}}
	n := 0
	for _, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("tokenizer: %s: negative token id %d", where, id)
		}
		n = max(n, id+1)
	}
	for _, id := range special {
		n = max(n, id+1)
	}
	t.decoder = make([]string, n)
	for s, id := range vocab {
		t.decoder[id] = s
	}
	for s, id := range special {
		t.decoder[id] = s
	}
	for i, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s: merge %d %q is not two symbols", where, i+1, m)
		}
		if _, dup := t.ranks[[2]string{a, b}]; !dup {
			t.ranks[[2]string{a, b}] = i
		}
	}
	// GPT-2's byte alphabet: printable bytes stand for themselves, the
	// others for code points from 256 up.
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff) {
			r = next
			next++
		}
		t.byteChar[b] = r
		t.charByte[r] = byte(b)
	}
	for b := range 256 {
		if _, ok := vocab[string(t.byteChar[b])]; !ok {
			return nil, fmt.Errorf("tokenizer: %s: the vocabulary lacks byte %#02x: not a byte-level BPE", where, b)
		}
	}
	return t, nil
}

// VocabSize is one more than the largest token id.
func (t *BPE) VocabSize() int { return len(t.decoder) }

// Token returns the id of a token or added token by its text.
func (t *BPE) Token(s string) (int, bool) {
	if id, ok := t.special[s]; ok {
		return id, true
	}
	id, ok := t.encoder[s]
	return id, ok
}

// Encode returns the token ids of s.
func (t *BPE) Encode(s string) []int {
	var out []int
	for len(s) > 0 {
		// Added tokens are matched whole, before the pre-tokenizer.
		at, tok, id := -1, "", 0
		for sp, sid := range t.special {
			if i := strings.Index(s, sp); i >= 0 && (at < 0 || i < at || i == at && len(sp) > len(tok)) {
				at, tok, id = i, sp, sid
			}
		}
		chunk := s
		if at >= 0 {
			chunk = s[:at]
		}
		for _, w := range split(chunk) {
			out = append(out, t.word(w)...)
		}
		if at < 0 {
			break
		}
		out = append(out, id)
		s = s[at+len(tok):]
	}
	return out
}

// Decode returns the text of ids; an unknown id is an error.
func (t *BPE) Decode(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id >= len(t.decoder) || t.decoder[id] == "" {
			return "", fmt.Errorf("tokenizer: token id %d is not in the vocabulary of %d", id, len(t.decoder))
		}
		tok := t.decoder[id]
		if _, ok := t.special[tok]; ok {
			b.WriteString(tok)
			continue
		}
		for _, r := range tok {
			c, ok := t.charByte[r]
			if !ok {
				return "", fmt.Errorf("tokenizer: token %d (%q) is not in the byte alphabet", id, tok)
			}
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// word encodes one pre-token: its bytes in the byte alphabet, merged by
// rank.
func (t *BPE) word(w string) []int {
	t.mu.Lock()
	if ids, ok := t.cache[w]; ok {
		t.mu.Unlock()
		return ids
	}
	t.mu.Unlock()
	syms := make([]string, len(w))
	for i := range len(w) {
		syms[i] = string(t.byteChar[w[i]])
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		// Merge every occurrence of the pair, left to right.
		a, b := syms[at], syms[at+1]
		out := syms[:0:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				out = append(out, a+b)
				i++
				continue
			}
			out = append(out, syms[i])
		}
		syms = out
	}
	ids := make([]int, len(syms))
	for i, s := range syms {
		ids[i] = t.encoder[s]
	}
	t.mu.Lock()
	if len(t.cache) < 1<<16 {
		t.cache[w] = ids
	}
	t.mu.Unlock()
	return ids
}

// isSpace is JavaScript's \s.
func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// next decodes the rune at s[i:]; an invalid byte is a rune of its own
// (neither space, letter nor number) one byte wide.
func next(s string, i int) (rune, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n <= 1 {
		return -1, 1
	}
	return r, n
}

func isLetter(r rune) bool { return r >= 0 && unicode.IsLetter(r) }
func isNumber(r rune) bool { return r >= 0 && unicode.IsNumber(r) }
func isOther(r rune) bool {
	return r < 0 || !isSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}

// split is GPT-2's pre-tokenizer:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func split(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		n := matchAt(s, i)
		out = append(out, s[i:i+n])
		i += n
	}
	return out
}

// matchAt is the length of the pattern's match at s[i:] (at least 1).
func matchAt(s string, i int) int {
	for _, c := range []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"} {
		if strings.HasPrefix(s[i:], c) {
			return len(c)
		}
	}
	// ' ?' then a run of one class.
	j := i
	if s[j] == ' ' && j+1 < len(s) {
		j++
	}
	for _, class := range []func(rune) bool{isLetter, isNumber, isOther} {
		r, n := next(s, j)
		if !class(r) {
			continue
		}
		k := j + n
		for k < len(s) {
			r, n := next(s, k)
			if !class(r) {
				break
			}
			k += n
		}
		return k - i
	}
	// Whitespace: \s+(?!\S), else \s+.
	k := i
	var last int
	for k < len(s) {
		r, n := next(s, k)
		if r < 0 || !isSpace(r) {
			break
		}
		last = k
		k += n
	}
	if k == i {
		_, n := next(s, i)
		return n // unreachable in practice: every rune is in some class
	}
	if k == len(s) {
		return k - i
	}
	// Followed by a non-space: leave the last space for the next token,
	// unless the run is one space long.
	if last > i {
		return last - i
	}
	return k - i
}
