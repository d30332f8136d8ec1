package data_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/data"
)

// byteTokens is a toy tokenizer: one token per byte, and 256 for
// "</s>". A real run passes a *tokenizer.BPE.
type byteTokens struct{}

func (byteTokens) Encode(s string) []int {
	var ids []int
	for i := 0; i < len(s); i++ {
		if strings.HasPrefix(s[i:], "</s>") {
			ids = append(ids, 256)
			i += 3
			continue
		}
		ids = append(ids, int(s[i]))
	}
	return ids
}
func (byteTokens) VocabSize() int      { return 257 }
func (byteTokens) Fingerprint() string { return "example bytes" }

func ExampleChatTemplate() {
	// ChatML; a model's own template comes from ReadChatTemplate(dir).
	t, err := data.NewChatTemplate("{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}"+
		"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", "", "<|im_end|>")
	if err != nil {
		panic(err)
	}
	s, err := t.Render([]data.Message{{Role: "user", Content: "Hi!"}}, true)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", s)
	// Output:
	// "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
}

func ExampleOpenSFT() {
	dir, err := os.MkdirTemp("", "sft")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "train.jsonl")
	os.WriteFile(path, []byte(`{"prompt": "2+2=", "completion": "4"}`+"\n"+`{"prompt": "3+3=", "completion": "6"}`+"\n"), 0o644)

	ds, err := data.OpenSFT(path, byteTokens{}, data.SFTOptions{Context: 16, Pack: true, EOS: []int{256}}, data.CacheDir(dir))
	if err != nil {
		panic(err)
	}
	defer ds.Close()
	fmt.Println(ds.Stats())
	data.WriteExamples(os.Stdout, ds, 1) // what -show-examples prints

	loader, err := data.NewLoader(ds, data.LoaderConfig{Batch: 1})
	if err != nil {
		panic(err)
	}
	for b, err := range loader.All(context.Background()) {
		if err != nil {
			panic(err)
		}
		fmt.Println("tokens", b.InputShape, b.Tokens)
		fmt.Println("targets", b.Targets)
		fmt.Println("positions", b.Positions)
		fmt.Println("trained", b.TrainedTokens(), "padding", b.PaddingFraction())
	}
	// Output:
	// 2 prompt/completion examples (12 tokens) packed into 1 windows
	// {"tokens":[50,43,50,61,52,256],"labels":[-100,-100,-100,-100,52,256]}
	// tokens [1 10] [50 43 50 61 52 51 43 51 61 54]
	// targets [-100 -100 -100 52 256 -100 -100 -100 54 256]
	// positions [0 1 2 3 4 0 1 2 3 4]
	// trained 4 padding 0
}
