package tokenizer

import (
	"strings"
	"sync"
	"testing"
)

var (
	fuzzOnce sync.Once
	fuzzToks []*BPE
)

// fuzzTokenizers are the tiny tokenizers and whichever real vocabularies
// have been fetched.
func fuzzTokenizers(t testing.TB) []*BPE {
	fuzzOnce.Do(func() {
		fuzzToks = []*BPE{tinyByteLevel(t), tinyPieces(t)}
		for _, name := range []string{"gpt2", "llama3", "llama2"} {
			if tok, err := Open(vocabDir() + "/" + name); err == nil {
				fuzzToks = append(fuzzToks, tok)
			}
		}
	})
	return fuzzToks
}

// FuzzRoundTrip checks Decode(Encode(s)) == s for any bytes (for a
// SentencePiece-style vocabulary: text without "▁" or added tokens, see the
// package documentation), that every id is in the vocabulary, and that
// EncodeReader, reading a few bytes at a time, agrees with Encode.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{
		"", " ", "Hello world", "  two  spaces  ", "tabs\tand\nnewlines\r\n\n",
		"I'm you're it'S 'll", "1234567 3.14", "Grüße 東京 😀👍🏽 e\u0301",
		"\xff\xfe invalid \xc3 utf-8 \xe2\x96", "<|endoftext|>x<|endoftext|>", "a</s>b <s>",
		"\u00a0\u3000\u2003", "the and then", strings.Repeat(" ", 300) + "x",
	} {
		f.Add(s)
	}
	r := loadReference(f)
	for _, c := range r.GPT2[:8] {
		f.Add(c.Text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range fuzzTokenizers(t) {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave %d, outside [0, %d)", s, id, tok.VocabSize())
				}
			}
			got, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			want := s
			if !tok.byteLevel {
				if strings.Contains(s, "▁") {
					continue
				}
				want = spRoundTrip(tok, s)
			}
			if got != want {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
			checkReader(t, tok, s, ids)
		}
	})
}
