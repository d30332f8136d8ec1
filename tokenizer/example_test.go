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

// A tokenizer_config.json beside tokenizer.json names the BOS and EOS
// tokens and holds the chat template; added tokens written in the text
// (here <s> and </s>) encode as their ids.
func ExampleBPE_ChatTemplate() {
	dir, err := os.MkdirTemp("", "tokenizer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"tokenizer.json": `{
  "added_tokens": [{"id": 1, "content": "<s>"}, {"id": 2, "content": "</s>"}],
  "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
  "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
  "model": {"type": "BPE", "unk_token": "<unk>",
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "h": 4, "i": 5, "▁h": 6, "▁hi": 7},
    "merges": ["▁ h", "▁h i"]}}`,
		"tokenizer_config.json": `{"bos_token": "<s>", "eos_token": {"content": "</s>"},
  "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			fmt.Println(err)
			return
		}
	}
	tok, err := tokenizer.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tok.BOSToken(), tok.BOS(), tok.EOSToken(), tok.EOS())
	fmt.Println(tok.ChatTemplate())
	fmt.Println(tok.Encode("<s>hi</s>"))
	// Output:
	// <s> 1 </s> 2
	// {{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}
	// [1 7 2]
}
