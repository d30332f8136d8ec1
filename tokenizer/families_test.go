package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The families whose tokenizer.json no npm package ships (Phi-3/3.5,
// Phi-4-mini, SmolLM2, Mistral v0.3) are checked here on small files of
// the same shape, and the added tokens' flags against the Rust library's
// own tests (added_vocabulary.rs).

// byteLevelFile is a byte-level tokenizer.json: every byte, the merges
// given (each "a b", pieces in GPT-2's byte alphabet) and their results,
// then the added tokens (content and flags; ids are given in order after
// the vocabulary).
func byteLevelFile(normalizer, pretok any, merges []string, added ...map[string]any) []byte {
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteChars[b])] = b
	}
	for _, m := range merges {
		a, b, _ := strings.Cut(m, " ")
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
	}
	return mustJSON(map[string]any{
		"added_tokens":  withIDs(len(vocab), added),
		"normalizer":    normalizer,
		"pre_tokenizer": pretok,
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
}

// piecesFile is a SentencePiece-style tokenizer.json: <unk>, the byte
// tokens, the pieces and the merges' results, byte fallback on.
func piecesFile(normalizer, pretok, decoder any, pieces []string, merges [][2]string, added ...map[string]any) []byte {
	vocab := map[string]int{"<unk>": 0}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	for _, p := range pieces {
		vocab[p] = len(vocab)
	}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	return mustJSON(map[string]any{
		"added_tokens":  withIDs(len(vocab), added),
		"normalizer":    normalizer,
		"pre_tokenizer": pretok,
		"decoder":       decoder,
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": true, "unk_token": "<unk>"},
	})
}

func withIDs(first int, added []map[string]any) []any {
	out := []any{}
	for i, a := range added {
		m := map[string]any{"id": first + i, "special": true}
		for k, v := range a {
			m[k] = v
		}
		out = append(out, m)
	}
	return out
}

// tok is an added token for the files above; flags are "lstrip",
// "rstrip", "single_word" and "normalized".
func tok(content string, flags ...string) map[string]any {
	m := map[string]any{"content": content}
	for _, f := range flags {
		m[f] = true
	}
	return m
}

// render writes an encoding as the text between added tokens and the
// added tokens in brackets: "a b[<x>]c".
func render(t *testing.T, tk *BPE, ids []int) string {
	t.Helper()
	var b strings.Builder
	var run []int
	flush := func() {
		s, err := tk.Decode(run)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
		run = run[:0]
	}
	for _, id := range ids {
		if id >= 256 && isAdded(tk, id) {
			flush()
			fmt.Fprintf(&b, "[%s]", tk.decoded[id])
			continue
		}
		run = append(run, id)
	}
	flush()
	return b.String()
}

func isAdded(tk *BPE, id int) bool {
	for _, m := range []*matcher{tk.raw, tk.normed} {
		if m == nil {
			continue
		}
		for _, a := range m.tokens {
			if int(a.id) == id {
				return true
			}
		}
	}
	return false
}

// TestAddedTokenFlags checks lstrip, rstrip, single_word and normalized
// against the cases of the Rust library's added_vocabulary.rs (its
// Lowercase normalizer, which memfit does not read, replaced by NFKC or
// by text that needs none), and the way its Aho-Corasick search passes
// over a match that single_word refuses without looking inside it.
func TestAddedTokenFlags(t *testing.T) {
	gpt2 := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
	nfkc := map[string]any{"type": "NFKC"}
	for _, tc := range []struct {
		name       string
		normalizer any
		added      []map[string]any
		text, want string
	}{
		{"options", nil, []map[string]any{tok("my", "lstrip", "rstrip"), tok("name"), tok("ony", "single_word"), tok("[CLS]"), tok("[SEP]")},
			"[CLS] my name is anthony [SEP]", "[[CLS]][my][name] is anthony [[SEP]]"},
		{"single word", nil, []map[string]any{tok("<mask>", "single_word")},
			"<mask> My name <mask> A<mask> <mask>ony <mask>", "[<mask>] My name [<mask>] A<mask> <mask>ony [<mask>]"},
		{"single word unicode", nil, []map[string]any{tok("<mask>", "single_word")},
			"<mask>, <mask>- \u25cc\u0330<mask>", "[<mask>], [<mask>]- \u25cc\u0330<mask>"},
		{"strip unicode spaces", nil, []map[string]any{tok("<mask>", "lstrip", "rstrip", "single_word")},
			"Hi <mask> there\t<mask>\t<mask>\u2000", "Hi[<mask>]there[<mask>][<mask>]"},
		{"lstrip not into the previous token", nil, []map[string]any{tok("<a>", "rstrip"), tok("<b>", "lstrip")},
			"x<a>  <b>y", "x[<a>][<b>]y"},
		{"passed over whole", nil, []map[string]any{tok("<ab>", "single_word"), tok("b>")},
			"x<ab> b>", "x<ab> [b>]"},
		{"longest first", nil, []map[string]any{tok("<|a"), tok("<|a|>"), tok("|>")},
			"<|a|> <|a |>", "[<|a|>] [<|a] [|>]"},
		{"single word needs word on neither side", nil, []map[string]any{tok("ab", "single_word")},
			"ab_ _ab ab½ ab", "ab_ _ab [ab]½ [ab]"},
		{"normalized matched in normalized text", nfkc, []map[string]any{tok("ﬁne", "normalized")},
			"ﬁne and fine", "[ﬁne] and [ﬁne]"},
		{"raw matched in raw text", nfkc, []map[string]any{tok("ﬁne")},
			"ﬁne and fine", "[ﬁne] and fine"},
		{"normalized lstrip", nfkc, []map[string]any{tok("ﬁne", "normalized", "lstrip")},
			"a \u3000fine", "a[ﬁne]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := openBytes(t, byteLevelFile(tc.normalizer, gpt2, nil, tc.added...))
			ids := tk.Encode(tc.text)
			if got := render(t, tk, ids); got != tc.want {
				t.Errorf("Encode(%q) = %q, want %q", tc.text, got, tc.want)
			}
			checkReader(t, tk, tc.text, ids)
		})
	}
}

// TestNormalizedTokenWithPrepend pins a consequence of the Rust library's
// rule that a normalized added token is matched as the normalizers write
// it: with Llama 2's normalizers (Prepend "▁", Replace " "), "<x>" is
// looked for as "▁<x>", so only after a space or at the start of a
// stretch of text.
func TestNormalizedTokenWithPrepend(t *testing.T) {
	llama2 := map[string]any{"type": "Sequence", "normalizers": []any{
		map[string]any{"type": "Prepend", "prepend": "▁"},
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
	}}
	dec := map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
	}}
	tk := openBytes(t, piecesFile(llama2, nil, dec, []string{"▁", "a"}, [][2]string{{"▁", "a"}}, tok("<x>", "normalized")))
	x := int(tk.special["<x>"])
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"<x>a", []int{x, int(tk.vocab["a"])}},
		{"a <x>", []int{int(tk.vocab["▁a"]), x}},
		{"a<x>", tk.Encode("a") /* no match: "<x>" goes by its bytes */},
	} {
		got := tk.Encode(tc.text)
		if tc.text == "a<x>" {
			if slices.Contains(got, x) {
				t.Errorf("Encode(%q) = %v: matched <x> without the ▁ before it", tc.text, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// pretokens returns the pre-tokens the encoder gives text, through the
// whole pipeline but the merges.
func pretokens(tk *BPE, text string) []string {
	var out []string
	var walk func(k int, s string)
	walk = func(k int, s string) {
		if k == len(tk.splits) {
			out = append(out, s)
			return
		}
		for len(s) > 0 {
			n := tk.splits[k](s, true)
			walk(k+1, s[:n])
			s = s[n:]
		}
	}
	walk(0, text)
	return out
}

// TestFamilyShapes checks the pre-tokenizers of tokenizer.json files
// shaped as the families' that no package ships: SmolLM2's (Digits, then
// GPT-2's regex), Phi-4-mini's (o200k split, kept Isolated), a Sequence of
// two splits, Gemma's no-op split on " " after the normalizer replaced
// every space.
func TestFamilyShapes(t *testing.T) {
	split := func(pattern, behavior string, invert bool) map[string]any {
		return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": behavior, "invert": invert}
	}
	bl := func(regex bool) map[string]any {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": regex}
	}
	seq := func(p ...any) map[string]any { return map[string]any{"type": "Sequence", "pretokenizers": p} }
	for _, tc := range []struct {
		name   string
		pretok any
		text   string
		want   []string
	}{
		{"smollm2", seq(map[string]any{"type": "Digits", "individual_digits": true}, bl(true)),
			"abc 123 x2", []string{"abc", " ", "1", "2", "3", " x", "2"}},
		{"digits contiguous", seq(map[string]any{"type": "Digits", "individual_digits": false}, bl(true)),
			"abc 123 x2", []string{"abc", " ", "123", " x", "2"}},
		{"phi-4-mini", seq(split(O200kPattern, "Isolated", false), bl(false)),
			"Hello WORLD's 12345", []string{"Hello", " WORLD's", " ", "123", "45"}},
		{"gpt-4o", seq(split(O200kPattern, "Removed", true), bl(false)),
			"Hello WORLD's 12345", []string{"Hello", " WORLD's", " ", "123", "45"}},
		{"qwen", seq(split(Qwen2Pattern, "Isolated", false), bl(false)),
			"it's 2024", []string{"it", "'s", " ", "2", "0", "2", "4"}},
		{"split then gpt2", seq(split(`\d`, "Isolated", false), bl(true)),
			"a1 b", []string{"a", "1", " b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := openBytes(t, byteLevelFile(nil, tc.pretok, nil))
			if got := pretokens(tk, tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("pre-tokens of %q: %q, want %q", tc.text, got, tc.want)
			}
			ids := tk.Encode(tc.text)
			if s, _ := tk.Decode(ids); s != tc.text {
				t.Errorf("Decode(Encode(%q)) = %q", tc.text, s)
			}
			checkReader(t, tk, tc.text, ids)
		})
	}
}

// TestSentencePieceShapes checks the SentencePiece-style pipelines of
// Phi-3 (Llama 2's normalizers, chat tokens that strip the spaces after
// them), Mistral v0.3 as transformers now writes it (Metaspace with
// prepend_scheme first and split false, which puts no "▁" before text
// that starts with a space) and Gemma (Replace only, then a Split on " "
// that finds none).
func TestSentencePieceShapes(t *testing.T) {
	prependReplace := map[string]any{"type": "Sequence", "normalizers": []any{
		map[string]any{"type": "Prepend", "prepend": "▁"},
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
	}}
	replace := map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}
	metaspace := func(scheme string, split bool) map[string]any {
		return map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
	}
	dec := map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
	}}
	gemmaSplit := map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false}
	pieces := []string{"▁", "h", "i", "x"}
	merges := [][2]string{{"▁", "h"}, {"▁h", "i"}, {"h", "i"}, {"▁", "▁"}}
	for _, tc := range []struct {
		name               string
		normalizer, pretok any
		added              []map[string]any
		text               string
		want               []string // the pieces of the ids
	}{
		{"phi-3", prependReplace, nil, []map[string]any{tok("<|user|>", "rstrip"), tok("<|end|>", "rstrip")},
			"<|user|>\n  hi<|end|>\nhi", []string{"<|user|>", "▁hi", "<|end|>", "▁hi"}},
		{"mistral v0.3", nil, metaspace("first", false), []map[string]any{tok("[INST]")},
			"hi[INST]hi", []string{"▁hi", "[INST]", "hi"}},
		{"metaspace leading space", nil, metaspace("first", false), nil,
			" hi", []string{"▁hi"}},
		{"metaspace always", nil, metaspace("always", true), []map[string]any{tok("[INST]")},
			"[INST]hi [INST] hi", []string{"[INST]", "▁hi", "▁", "[INST]", "▁hi"}},
		{"gemma", replace, gemmaSplit, []map[string]any{tok("<start_of_turn>")},
			"<start_of_turn>hi hi  x", []string{"<start_of_turn>", "hi", "▁hi", "▁▁", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := openBytes(t, piecesFile(tc.normalizer, tc.pretok, dec, pieces, merges, tc.added...))
			ids := tk.Encode(tc.text)
			var got []string
			for _, id := range ids {
				got = append(got, strings.ReplaceAll(tk.decoded[id], " ", "▁"))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %q, want %q", tc.text, got, tc.want)
			}
			checkReader(t, tk, tc.text, ids)
		})
	}
}

// TestAddedTokensStream checks on random strings that EncodeReader, fed a
// few bytes at a time, gives Encode's tokens when added tokens strip
// spaces, need single words and are matched in normalized text: the
// cases where the search must wait for text it has not seen.
func TestAddedTokensStream(t *testing.T) {
	gpt2 := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
	tk := openBytes(t, byteLevelFile(map[string]any{"type": "NFKC"}, gpt2, []string{"Ġ t", "h e"},
		tok("<a>", "lstrip"), tok("<b>", "rstrip"), tok("ab", "single_word"), tok("ﬁ", "normalized", "lstrip", "rstrip"),
		tok("<ab>", "single_word", "lstrip"), tok("b>")))
	alphabet := []string{"<", "a", "b", ">", "<a>", "<b>", "ab", " ", "  ", "\t", "\u3000", "fi", "ﬁ", "e\u0301", "é", "x", "\u0301", "\n"}
	seed := uint32(42)
	rand := func(n int) int { // xorshift32, as the fixtures' script
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return int(seed % uint32(n))
	}
	for range 3000 {
		var b strings.Builder
		for k := 1 + rand(12); k > 0; k-- {
			b.WriteString(alphabet[rand(len(alphabet))])
		}
		s := b.String()
		checkReader(t, tk, s, tk.Encode(s))
		if t.Failed() {
			return
		}
	}
}
