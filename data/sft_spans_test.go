package data

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The test encoders say what text each token stands for, as
// *tokenizer.BPE does, so that their answers are mapped in one pass.
func (e byteEncoder) Decode(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 256 && id-256 < len(e.specials):
			b.WriteString(e.specials[id-256])
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		default:
			return "", fmt.Errorf("token %d", id)
		}
	}
	return b.String(), nil
}

func (twoByteEncoder) Decode(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		b.WriteByte(byte(id >> 8))
		if id&0xff != 0 {
			b.WriteByte(byte(id))
		}
	}
	return b.String(), nil
}

// noDecode hides an encoder's Decode: its answers are found by encoding
// the text before each boundary (tokenBoundary), as they were before
// spanTokens.
type noDecode struct{ e Encoder }

func (n noDecode) Encode(s string) []int { return n.e.Encode(s) }
func (n noDecode) VocabSize() int        { return n.e.VocabSize() }
func (n noDecode) Fingerprint() string   { return n.e.Fingerprint() }

// spanEncoders are the encoders spans are checked with: the test
// encoders and whichever real vocabularies scripts/fetch-tokenizers.sh
// fetched (SentencePiece's Llama 2/Mistral and Gemma, byte-level Llama 3,
// Qwen with its NFC normalizer, Mistral Nemo's, GPT-4o's).
func spanEncoders(t *testing.T) map[string]Encoder {
	encs := map[string]Encoder{"bytes": chatEnc, "pairs": twoByteEncoder{}}
	for _, name := range []string{"llama3", "llama2", "qwen2_5", "gemma3", "mistral_nemo", "gpt4o"} {
		t.Run("vocabulary "+name, func(t *testing.T) { encs[name] = realTokenizer(t, name) })
	}
	return encs
}

// TestSpanTokensMatchEncodingPrefixes: at every character boundary c of
// random texts — words, spaces and runs of them, new lines, digits,
// accents precomposed and decomposed, CJK, emoji, special tokens, "▁" —
// the tokens spanTokens puts before c are the encoding of text[:c]
// wherever that encoding is a prefix of the whole one (the boundary is
// exact), as the encoding of the text before each boundary
// (tokenBoundary) found them; elsewhere they are the tokens that end at
// c or before, at least as many as the common prefix of the two
// encodings (a token straddling c counts as after it; that prefix can
// stop earlier, as where the text before c ends in two spaces that it
// encodes as one token). And conversations of ordinary text are labelled
// as by encoding the text before each boundary (spansOfConversations).
func TestSpanTokensMatchEncodingPrefixes(t *testing.T) {
	encs := spanEncoders(t)
	t.Run("random text", func(t *testing.T) { spansOfRandomText(t, encs) })
	t.Run("conversations", func(t *testing.T) { spansOfConversations(t, encs) })
}

// spansOfRandomText checks every character boundary of random texts.
func spansOfRandomText(t *testing.T, encs map[string]Encoder) {
	words := []string{"hello", " world", "  ", "\n", "\n\n", " ", "42", "123456", "é", "e\u0301", "日本語", "🙂",
		"don't", "it's", "<|eot_id|>", "<s>", "</s>", "▁", "\t", "x", "Ab", "...", "?!", " the", "ing", "<|im_end|>", "<end_of_turn>"}
	for name, enc := range encs {
		r := rand.New(rand.NewPCG(1, 2))
		checked, inside, earlier := 0, 0, 0
		for range 40 {
			var b strings.Builder
			for range 1 + r.IntN(24) {
				b.WriteString(words[r.IntN(len(words))])
			}
			text := b.String()
			ids := enc.Encode(text)
			var spans [][2]int
			for c := 0; c <= len(text); c++ {
				if c == len(text) || utf8.RuneStart(text[c]) {
					spans = append(spans, [2]int{c, c})
				}
			}
			got, err := spanTokens(enc, text, ids, spans)
			if err != nil {
				t.Fatalf("%s %q: %v", name, text, err)
			}
			for i, s := range spans {
				c, n := s[0], got[i][0]
				pre := enc.Encode(text[:c])
				lcp := tokenBoundary(enc, text, c, ids)
				switch {
				case lcp == len(pre) || c == 0:
					if n != lcp {
						t.Errorf("%s %q: %d tokens before the exact boundary %d, want %d", name, text, n, c, lcp)
					}
				case n < lcp:
					t.Errorf("%s %q: %d tokens before byte %d, fewer than the %d its encoding shares", name, text, n, c, lcp)
				case n > lcp:
					inside++
					earlier++
				default:
					inside++
				}
				checked++
			}
		}
		t.Logf("%s: %d boundaries, %d within a token, at %d of which the encodings' common prefix stops earlier", name, checked, inside, earlier)
	}
}

// conversation returns a random conversation of ordinary text: words,
// punctuation, numbers, new lines, an accent, code, white space around.
func conversation(r *rand.Rand, turns int) []Message {
	words := []string{"the", "capital", "of", "France", "is", "Paris", "déjà", "vu", "東京", "😀", "2+2=4", "x := f(y)",
		"don't", "isn't", "—", "(see", "below)", "1.", "2.", "**bold**", "`code`", "naïve", "Köln", "42%", "e.g.,"}
	text := func() string {
		var b strings.Builder
		if r.IntN(5) == 0 {
			b.WriteString([]string{" ", "\n", "  ", "\n\n"}[r.IntN(4)])
		}
		for i := range 1 + r.IntN(20) {
			if i > 0 {
				b.WriteString([]string{" ", " ", " ", "\n", ", ", ". ", "\n\n"}[r.IntN(7)])
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		if r.IntN(5) == 0 {
			b.WriteString([]string{" ", "\n", ".", "\n\n"}[r.IntN(4)])
		}
		return b.String()
	}
	var msgs []Message
	if r.IntN(2) == 0 {
		msgs = append(msgs, Message{Role: "system", Content: text()})
	}
	for range turns {
		msgs = append(msgs, Message{Role: "user", Content: text()}, Message{Role: "assistant", Content: text()})
	}
	return msgs
}

// familyVocab is the vocabulary at hand whose special tokens a family's
// template writes ("" for none): answers end at special tokens, exact
// boundaries, as they do in training.
func familyVocab(fixture string) string {
	for prefix, vocab := range map[string]string{"llama3": "llama3", "mistral-nemo": "mistral_nemo", "mistral": "llama2", "mixtral": "llama2",
		"chatml": "qwen2_5", "qwen": "qwen2_5", "smollm": "qwen2_5", "gemma": "gemma3"} {
		if strings.HasPrefix(fixture, prefix) {
			return vocab
		}
	}
	return ""
}

// spansOfConversations: under every family's chat template
// (data/testdata/chat), with a byte tokenizer of the families' special
// tokens and the family's own vocabulary where it is at hand, random
// conversations of ordinary text, and prompt/completion and Alpaca
// records, are labelled the same whether their answers are mapped in one
// pass or by encoding the text before each boundary.
func spansOfConversations(t *testing.T, encs map[string]Encoder) {
	r := rand.New(rand.NewPCG(3, 4))
	compared := 0
	for _, fx := range loadChatFixtures(t) {
		ct := fx.template(t)
		for name, enc := range map[string]Encoder{"family bytes": familyEnc, familyVocab(fx.name): encs[familyVocab(fx.name)]} {
			if enc == nil {
				continue
			}
			for i := range 4 {
				rec := Record{Format: FormatChat, Messages: conversation(r, 1+i*3)}
				want, werr := TokenizeRecord(rec, noDecode{enc}, SFTOptions{Template: ct})
				got, err := TokenizeRecord(rec, enc, SFTOptions{Template: ct})
				if (err != nil) != (werr != nil) {
					t.Fatalf("%s, %s: %v, want %v", fx.name, name, err, werr)
				}
				if err == nil && !reflect.DeepEqual(got, want) {
					t.Errorf("%s, %s: labels differ from those of the encoded prefixes\n got %v\nwant %v", fx.name, name, got.Labels, want.Labels)
				}
				compared++
			}
		}
	}
	// (The completion after a space or a new line, as in real data: a
	// completion that goes on a word of the prompt has its boundary
	// straddled, which TestSpanTokensMatchEncodingPrefixes checks.)
	for name, enc := range encs {
		for range 20 {
			c := conversation(r, 1)
			q, a := strings.TrimSpace(c[len(c)-2].Content), strings.TrimSpace(c[len(c)-1].Content)
			for _, rec := range []Record{
				{Format: FormatPromptCompletion, Prompt: q, Completion: " " + a},
				{Format: FormatPromptCompletion, Prompt: "Q: " + q + "\nA:", Completion: " " + a},
				{Format: FormatPromptCompletion, Prompt: q + "\n", Completion: a},
				{Format: FormatAlpaca, Instruction: c[0].Content, Input: q, Output: a},
			} {
				opt := SFTOptions{BOS: []int{1}, EOS: []int{2}}
				want, _ := TokenizeRecord(rec, noDecode{enc}, opt)
				got, _ := TokenizeRecord(rec, enc, opt)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s %+v: labels %v, want %v", name, rec, got.Labels, want.Labels)
				}
				compared++
			}
		}
	}
	t.Logf("%d records compared", compared)
}

// manyTurns is a conversation of n messages, user and assistant in turn.
func manyTurns(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Role: "user", Content: fmt.Sprintf("question %d?", i)}
		if i%2 == 1 {
			msgs[i] = Message{Role: "assistant", Content: fmt.Sprintf("answer %d.", i)}
		}
	}
	return msgs
}

// TestManyTurnsAreLabelledInLinearTime: a conversation of 20,000
// messages (issue #43: it hung, each answer's boundaries found by
// encoding all the text before them) is labelled in about the time of
// rendering and encoding it once, every answer trained.
func TestManyTurnsAreLabelledInLinearTime(t *testing.T) {
	ct := mustTemplate(t, chatML)
	rec := Record{Format: FormatChat, Messages: manyTurns(20000)}
	encs := map[string]Encoder{"bytes": chatEnc}
	t.Run("vocabulary llama3", func(t *testing.T) { encs["llama3"] = realTokenizer(t, "llama3") })
	for name, enc := range encs {
		start := time.Now()
		ex, err := TokenizeRecord(rec, enc, SFTOptions{Template: ct})
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		for i, l := range ex.Labels {
			if l != IgnoreIndex && ex.Labels[i-1] == IgnoreIndex {
				runs++
			}
		}
		if runs != 10000 {
			t.Errorf("%s: %d answers trained, want 10000", name, runs)
		}
		if took > 20*time.Second {
			t.Errorf("%s: %v to label 20,000 messages (%d tokens)", name, took, len(ex.Tokens))
		}
		t.Logf("%s: %d tokens in %v", name, len(ex.Tokens), took)
	}
	// An encoder that cannot say what its tokens stand for maps a few
	// turns by encoding prefixes, and refuses many rather than hang.
	few := Record{Format: FormatChat, Messages: manyTurns(6)}
	want, err := TokenizeRecord(few, chatEnc, SFTOptions{Template: ct})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := TokenizeRecord(few, noDecode{chatEnc}, SFTOptions{Template: ct}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("without Decode: %v, %v; want %v", got, err, want)
	}
	start := time.Now()
	_, err = TokenizeRecord(rec, noDecode{chatEnc}, SFTOptions{Template: ct})
	if err == nil || !strings.Contains(err.Error(), "train with loss on all") || time.Since(start) > 10*time.Second {
		t.Errorf("20,000 messages without Decode: %v after %v, want a refusal at once", err, time.Since(start))
	}
}

// TestChatMessagesBeyondTheContext: a conversation of more messages than
// the context has positions, plus one, is refused, naming its file and
// line and the context; one that fits is not.
func TestChatMessagesBeyondTheContext(t *testing.T) {
	dir := t.TempDir()
	ct := mustTemplate(t, chatML)
	line := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"messages": [`)
		for i, m := range manyTurns(n) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `{"role": %q, "content": %q}`, m.Role, m.Content)
		}
		b.WriteString("]}\n")
		return b.String()
	}
	p := writeFile(t, filepath.Join(dir, "long.jsonl"), []byte(line(4)+line(18)))
	_, err := OpenSFT(p, chatEnc, SFTOptions{Context: 16, Template: ct}, CacheDir(dir))
	wantErr(t, err, p, "line 2", "18 messages", "context of 16 positions")
	for n, ok := range map[int]bool{17: true, 18: true, 19: false} {
		_, err := TokenizeRecord(Record{Format: FormatChat, Messages: manyTurns(n)}, chatEnc, SFTOptions{Context: 17, Template: ct})
		if (err == nil) != ok {
			t.Errorf("%d messages in a context of 17: %v", n, err)
		}
	}
}

func TestSpanTokensZeroWidthAndStrippedTokens(t *testing.T) {
	// A space put before a stretch stands for no bytes and lies after a
	// boundary where it is put; white space an added token strips lies
	// with it.
	enc := stripEncoder{}
	text := "ab  <x>  cd"
	ids := enc.Encode(text)
	cs := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	before, unsure, ok := tokenBoundaries(enc, text, ids, cs)
	// The tokens end at 1, 2, 7 ("<x>" with the spaces before it), 8 (" "
	// put after it, taking a space), 10 and 11.
	if !ok || len(unsure) != 0 || !slices.Equal(before, []int{1, 2, 2, 2, 2, 2, 3, 4, 4, 5}) {
		t.Fatalf("tokens before %v: %v, unsure %v, %v", cs, before, unsure, ok)
	}
	got, err := spanTokens(enc, text, ids, [][2]int{{2, 9}, {3, 7}})
	if err != nil || !reflect.DeepEqual(got, [][2]int{{2, 4}, {2, 3}}) {
		t.Errorf("spans %v, %v", got, err)
	}
}

// stripEncoder encodes bytes, "<x>" as one token eating the spaces on
// its left and right, and puts a token " " (id 1) before the text after
// it, as SentencePiece prepends "▁" to a stretch.
type stripEncoder struct{}

func (stripEncoder) Encode(s string) []int {
	var ids []int
	before, after, found := strings.Cut(s, "<x>")
	for _, c := range []byte(strings.TrimRight(before, " ")) {
		ids = append(ids, int(c))
	}
	if found {
		ids = append(ids, 0, 1)
		for _, c := range []byte(strings.TrimLeft(after, " ")) {
			ids = append(ids, int(c))
		}
	}
	return ids
}
func (stripEncoder) VocabSize() int      { return 256 }
func (stripEncoder) Fingerprint() string { return "strip" }
func (stripEncoder) Decode(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		switch id {
		case 0:
			b.WriteString("<x>")
		case 1:
			b.WriteString(" ")
		default:
			b.WriteByte(byte(id))
		}
	}
	return b.String(), nil
}
