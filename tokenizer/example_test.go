package tokenizer_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/tokenizer"
)

// Open a directory holding GPT-2's encoder.json and vocab.bpe (or a
// tokenizer.json), encode and decode. It prints
//
//	[15496 995] Hello world 50257 50256
//
// (compiled, not run: the vocabulary is fetched, not committed;
// TestHelloWorldGPT2 checks the same.)
func Example() {
	home, _ := os.UserHomeDir()
	dir := filepath.Join(home, ".cache", "memfit", "tokenizers", "gpt2") // scripts/fetch-tokenizers.sh
	if d := os.Getenv("MEMFIT_TOKENIZERS"); d != "" {
		dir = filepath.Join(d, "gpt2")
	}
	tok, err := tokenizer.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("Hello world")
	text, _ := tok.Decode(ids)
	fmt.Println(ids, text, tok.VocabSize(), tok.EOS())
}
