package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/tokenizer"
)

// TestTokenizerSetsVocabulary checks that -tokenizer's vocabulary size
// becomes the GPT's and that the windows hold the tokenizer's encoding.
func TestTokenizerSetsVocabulary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	// A byte-level vocabulary with no merges and <|endoftext|> at 300:
	// 301 tokens, in GPT-2's byte alphabet.
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	raw, _ := json.Marshal(map[string]any{
		"added_tokens":  []any{map[string]any{"id": 300, "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel"},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	tokPath := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(tokPath, raw, 0o644)
	text := strings.Repeat("one document<|endoftext|>another one. ", 20)
	textPath := filepath.Join(dir, "corpus.txt")
	os.WriteFile(textPath, []byte(text), 0o644)

	cfg := Default()
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Width, cfg.Model.Heads, cfg.Model.Context = "gpt", 1, 32, 2, 16
	cfg.Data.Path, cfg.Data.Tokenizer, cfg.Data.ValSplit = textPath, tokPath, 0
	ds, err := openData(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ds.classes != 301 || !ds.tokens {
		t.Fatalf("classes %d (tokens %v), want the tokenizer's 301", ds.classes, ds.tokens)
	}
	tok, err := tokenizer.Open(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	want := tok.Encode(text)
	if got := ds.train.(*data.TokenDataset).Tokens(); got != int64(len(want)) {
		t.Errorf("dataset holds %d tokens, the tokenizer gives %d", got, len(want))
	}
	m, err := buildModel(cpu.New(), cfg, ds, modelBuild{})
	if err != nil {
		t.Fatal(err)
	}
	rows := false
	for _, p := range m.Parameters() {
		if p.Shape()[0] == 301 {
			rows = true
		}
	}
	if !rows {
		t.Errorf("no parameter of the GPT has the tokenizer's 301 rows")
	}
}
