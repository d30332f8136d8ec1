package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// englishText is all of Debian's fortunes (about 1.4 MB of English prose,
// quotes and some code), or a skip.
func englishText(b *testing.B) string {
	var sb strings.Builder
	paths, _ := filepath.Glob("/usr/share/games/fortunes/*")
	for _, p := range paths {
		if strings.HasSuffix(p, ".dat") || strings.HasSuffix(p, ".u8") {
			continue
		}
		t, err := os.ReadFile(p)
		if err == nil {
			sb.Write(t)
		}
	}
	if sb.Len() < 1<<19 {
		b.Skip("fortunes not installed (Debian package fortunes)")
	}
	return sb.String()
}

// benchVocabularies are the fetched vocabularies the benchmarks encode with.
var benchVocabularies = []string{"gpt2", "llama3", "llama2", "qwen3", "gemma3", "mistral_nemo", "gpt4o"}

// BenchmarkEncode measures encoding speed on English text, single
// goroutine; MB/s is the figure BENCHMARKS.md records.
func BenchmarkEncode(b *testing.B) {
	text := englishText(b)
	for _, name := range benchVocabularies {
		b.Run(name, func(b *testing.B) {
			tok := openReal(b, name)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.Encode(text)
			}
		})
	}
}

// BenchmarkEncodeCold is the same with an empty word cache every pass,
// the speed on text whose words have not been seen.
func BenchmarkEncodeCold(b *testing.B) {
	text := englishText(b)
	for _, name := range benchVocabularies {
		b.Run(name, func(b *testing.B) {
			tok := openReal(b, name)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.cache = wordCache{}
				tok.Encode(text)
			}
		})
	}
}

// BenchmarkAddedTokens encodes text full of "<" and of added tokens with
// 10 to 100,000 added tokens: the search (a trie walk from each byte that
// starts one) costs the same however many there are (Gemma 3 has 6,415).
func BenchmarkAddedTokens(b *testing.B) {
	var text strings.Builder
	for i := 0; text.Len() < 1<<16; i++ {
		fmt.Fprintf(&text, "<p>line %d <tok_%d> a<b and <tok_%d x</p>\n", i, i%10, i%7)
	}
	gpt2 := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			added := make([]map[string]any, n)
			for i := range added {
				added[i] = tok(fmt.Sprintf("<tok_%d>", i))
			}
			tk := openBytes(b, byteLevelFile(nil, gpt2, nil, added...))
			b.SetBytes(int64(text.Len()))
			for b.Loop() {
				tk.Encode(text.String())
			}
		})
	}
}
