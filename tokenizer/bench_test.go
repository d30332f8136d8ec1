package tokenizer

import (
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

// BenchmarkEncode measures encoding speed on English text, single
// goroutine; MB/s is the figure BENCHMARKS.md records.
func BenchmarkEncode(b *testing.B) {
	text := englishText(b)
	for _, name := range []string{"gpt2", "llama3", "llama2"} {
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
	for _, name := range []string{"gpt2", "llama3", "llama2"} {
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
