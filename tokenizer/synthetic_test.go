package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// mustJSON is json.Marshal for values that always marshal.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// tinyByteLevelJSON is a small GPT-2-style tokenizer.json: every byte, a
// few merges, <|endoftext|> and Llama 3's chat header tokens.
func tinyByteLevelJSON() []byte {
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteChars[b])] = b
	}
	merges := []string{"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a n", "Ġa n", "Ġan d", "e r", "Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ"}
	for _, m := range merges {
		var a, b string
		fmt.Sscan(m, &a, &b)
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
	}
	eot := len(vocab)
	return mustJSON(map[string]any{
		"added_tokens": []any{
			map[string]any{"id": eot, "content": "<|endoftext|>", "special": true},
			map[string]any{"id": eot + 1, "content": "<|start_header_id|>", "special": true},
			map[string]any{"id": eot + 2, "content": "<|end_header_id|>", "special": true},
		},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
}

// tinyPiecesJSON is a small Llama-2-style tokenizer.json: byte fallback,
// "▁" for spaces, <unk> <s> </s>.
func tinyPiecesJSON() []byte {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	for _, c := range []string{"▁", "a", "b", "c", "d", "e", "h", "n", "t", "é"} {
		vocab[c] = len(vocab)
	}
	merges := [][2]string{{"▁", "t"}, {"h", "e"}, {"▁t", "he"}, {"▁", "▁"}, {"▁", "a"}, {"a", "n"}, {"▁a", "n"}, {"▁an", "d"}, {"▁▁", "▁▁"}}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	return mustJSON(map[string]any{
		"added_tokens": []any{
			map[string]any{"id": 0, "content": "<unk>", "special": true},
			map[string]any{"id": 1, "content": "<s>", "special": true},
			map[string]any{"id": 2, "content": "</s>", "special": true},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true},
	})
}

// openBytes writes a tokenizer.json into a new directory and opens it.
func openBytes(t testing.TB, b []byte) *BPE {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func tinyByteLevel(t testing.TB) *BPE { return openBytes(t, tinyByteLevelJSON()) }
func tinyPieces(t testing.TB) *BPE    { return openBytes(t, tinyPiecesJSON()) }

func TestTinyTokenizers(t *testing.T) {
	bl := tinyByteLevel(t)
	if got := bl.Encode(" the and"); len(got) != 2 {
		t.Errorf("byte-level %q: %v, want 2 tokens", " the and", got)
	}
	sp := tinyPieces(t)
	if got := pieces(sp.splits[0], "▁the▁▁and▁"); !slices.Equal(got, []string{"▁the", "▁▁and", "▁"}) {
		t.Errorf("SentencePiece-style vocabulary without spaces inside pieces should split into words: %q", got)
	}
	got := sp.Encode("the andé\x01")
	want := []int{int(sp.vocab["▁the"]), int(sp.vocab["▁and"]), int(sp.vocab["é"]), int(sp.byteTok[1])}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pieces %q: got %v, want %v", "the andé\x01", got, want)
	}
	if s, _ := sp.Decode(got); s != "the andé\x01" {
		t.Errorf("decode: %q", s)
	}
}
