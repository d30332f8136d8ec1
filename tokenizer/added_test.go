package tokenizer

import (
	"strings"
	"testing"
)

// TestTrieLongest compares the trie's longest match with a scan of every
// text, on texts with shared prefixes, a wide fan-out (more children than
// the linear search takes) and repeats.
func TestTrieLongest(t *testing.T) {
	seed := uint32(7)
	rand := func(n int) int {
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return int(seed % uint32(n))
	}
	const letters = "abcdefghijklmnopqrstuvwxyz<>|"
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(letters[rand(len(letters))])
		}
		return b.String()
	}
	var texts []string
	for range 500 {
		texts = append(texts, word(1+rand(6)))
	}
	texts = append(texts, texts[3], "<", "<|", "<|a|>") // a repeat keeps its first index
	tr := newTrie(texts)
	for range 20000 {
		s := word(1 + rand(8))
		want, wantLen := -1, 0
		for i, x := range texts {
			if strings.HasPrefix(s, x) && len(x) > wantLen {
				want, wantLen = i, len(x)
			}
		}
		if got, n := tr.longest(s); got != want || n != wantLen {
			t.Fatalf("longest(%q) = %d (%d bytes), want %d (%d bytes)", s, got, n, want, wantLen)
		}
	}
}
