package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
)

// The fuzz targets' seed corpora are under testdata/fuzz/FuzzName, where
// go test runs them as tests; TestFuzzSeeds writes them (with -update)
// from the seeds below.

var (
	fuzzOnce sync.Once
	fuzzToks []*BPE
)

// fuzzTokenizers are the tiny tokenizers and whichever real vocabularies
// have been fetched.
func fuzzTokenizers(t testing.TB) []*BPE {
	fuzzOnce.Do(func() {
		fuzzToks = []*BPE{tinyByteLevel(t), tinyPieces(t)}
		for _, name := range []string{"gpt2", "llama3", "llama2", "qwen3", "gemma3", "mistral_nemo", "gpt4o"} {
			if tok, err := Open(vocabDir() + "/" + name); err == nil {
				fuzzToks = append(fuzzToks, tok)
			}
		}
	})
	return fuzzToks
}

// roundTripSeeds are texts for FuzzRoundTrip.
var roundTripSeeds = []string{
	"", " ", "Hello world", "  two  spaces  ", "tabs\tand\nnewlines\r\n\n",
	"I'm you're it'S 'll", "1234567 3.14", "Grüße 東京 😀👍🏽 e\u0301",
	"\xff\xfe invalid \xc3 utf-8 \xe2\x96", "<|endoftext|>x<|endoftext|>", "a</s>b <s>",
	"\u00a0\u3000\u2003", "the and then", strings.Repeat(" ", 300) + "x",
	"<|start_header_id|>user<|end_header_id|>\n\nhi<|endoftext|>", "<|start_header_id<|end_header_id|>|>",
}

// FuzzRoundTrip checks Decode(Encode(s)) == s for any bytes (for a
// SentencePiece-style vocabulary: text without "▁" or added tokens, see the
// package documentation), that every id is in the vocabulary, and that
// EncodeReader, reading a few bytes at a time, agrees with Encode.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range roundTripSeeds {
		f.Add(s)
	}
	r := loadReference(f)
	for _, c := range r.GPT2[:8] {
		f.Add(c.Text)
	}
	// Loaded here, not by the first input: a fuzzing worker panics on an
	// input that takes ten seconds, and seven vocabularies can.
	fuzzTokenizers(f)
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
			if !tok.byteLevel && strings.Contains(s, "▁") {
				continue
			}
			want := wantDecoded(tok, s)
			if got != want {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
			checkReader(t, tok, s, ids)
		}
	})
}

// FuzzDecode decodes arbitrary ids (the input read as little-endian
// int32s, negative ones included): an id outside the vocabulary is an
// error, never a panic, and the ids inside decode to their tokens' text.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint32(nil, 0xffffffff))
	f.Add(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 'H'), 'i'))
	f.Add(binary.LittleEndian.AppendUint32(nil, 1<<31))
	tiny := []*BPE{tinyByteLevel(f), tinyPieces(f)}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids := make([]int, len(b)/4)
		for i := range ids {
			ids[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
		for _, tok := range tiny {
			s, err := tok.Decode(ids)
			bad := -1
			for i, id := range ids {
				if id < 0 || id >= tok.VocabSize() || !tok.valid[id] {
					bad = i
					break
				}
			}
			switch {
			case bad >= 0 && err == nil:
				t.Fatalf("Decode(%v) = %q, no error for id %d", ids, s, ids[bad])
			case bad < 0 && err != nil:
				t.Fatalf("Decode(%v): %v", ids, err)
			case bad < 0 && tok.byteLevel:
				var want strings.Builder
				for _, id := range ids {
					want.WriteString(tok.decoded[id])
				}
				if s != want.String() {
					t.Fatalf("Decode(%v) = %q, want %q", ids, s, want.String())
				}
			}
		}
	})
}

// loadSeeds are tokenizer.json files for FuzzLoadHF: the tiny ones, other
// supported components, and hostile ones.
func loadSeeds() map[string][]byte {
	bl := string(tinyByteLevelJSON())
	seeds := map[string][]byte{
		"byte-level": []byte(bl),
		"pieces":     tinyPiecesJSON(),
		"llama3-split": []byte(strings.Replace(bl,
			`"pre_tokenizer":{"add_prefix_space":false,"type":"ByteLevel","use_regex":true}`,
			`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":`+string(mustJSON(Llama3Pattern))+`},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`, 1)),
		"metaspace": []byte(strings.Replace(string(tinyPiecesJSON()),
			`"pre_tokenizer":null`, `"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}`, 1)),
		"negative-id":    []byte(hfText(`"ab":-1`, "", "")),
		"id-past-uint32": []byte(hfText(`"ab":4294967301`, "", "")),
		"repeated-id":    []byte(hfText(`"ab":300,"cd":300`, "", "")),
		"repeated-piece": []byte(hfText(`"ab":300,"ab":301`, "", "")),
		"added-mismatch": []byte(hfText(`"<x>":300`, "", `{"id":301,"content":"<x>"}`)),
		"added-gap":      []byte(hfText(`"ab":300,"Ġt":301`, `"a b",["Ġ","t"]`, `{"id":400,"content":"<x>","lstrip":true,"rstrip":true}`)),
		"bad-merge":      []byte(hfText(`"ab":300`, `"a b c"`, "")),
	}
	// The shapes of the newer families' files (families_test.go).
	nfc := map[string]any{"type": "NFC"}
	split := func(p, behavior string, invert bool) map[string]any {
		return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": p}, "behavior": behavior, "invert": invert}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}
	seq := func(p ...any) map[string]any { return map[string]any{"type": "Sequence", "pretokenizers": p} }
	merges := []string{"Ġ t", "h e", "Ġt he", "1 2"}
	seeds["qwen"] = byteLevelFile(nfc, seq(split(Qwen2Pattern, "Isolated", false), byteLevel), merges,
		tok("<|im_start|>"), tok("<|im_end|>"), tok("<tool_call>"))
	seeds["tekken"] = byteLevelFile(nil, seq(split(TekkenPattern, "Isolated", false), byteLevel), merges, tok("[INST]"))
	seeds["o200k"] = byteLevelFile(nil, seq(split(O200kPattern, "Removed", true), byteLevel), merges, tok("<|endoftext|>"))
	seeds["digits"] = byteLevelFile(nil, seq(map[string]any{"type": "Digits", "individual_digits": true},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}), merges)
	seeds["added-flags"] = byteLevelFile(map[string]any{"type": "NFKC"}, map[string]any{"type": "ByteLevel", "use_regex": true}, merges,
		tok("<a>", "lstrip"), tok("<b>", "rstrip"), tok("ab", "single_word"), tok("ﬁ", "normalized"))
	replace := map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}
	dec := map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
	}}
	pieces, pmerges := []string{"▁", "a", "b", "n", "d"}, [][2]string{{"▁", "a"}, {"a", "n"}, {"▁a", "nd"}, {"n", "d"}, {"▁", "▁"}}
	seeds["gemma"] = piecesFile(replace, map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
		dec, pieces, pmerges, tok("<start_of_turn>"), tok("\n"), tok("▁▁"))
	seeds["metaspace-first"] = piecesFile(nil, map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
		dec, pieces, pmerges, tok("[INST]"), tok("<|end|>", "rstrip"))
	if len(seeds["llama3-split"]) == len(bl) {
		panic("llama3-split seed: the tiny tokenizer's pre_tokenizer was not found")
	}
	return seeds
}

// FuzzLoadHF loads arbitrary bytes as a tokenizer.json: every failure is
// an *Error naming the file, never a panic; what loads encodes and
// decodes text with ids in its vocabulary.
func FuzzLoadHF(f *testing.F) {
	for _, s := range loadSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := loadHF("tokenizer.json", b, &config{path: "tokenizer_config.json"})
		if err != nil {
			checkNamed(t, err, "tokenizer.json")
			return
		}
		exercise(t, tok, b)
	})
}

// gpt2Seeds are encoder.json and vocab.bpe pairs for FuzzLoadGPT2.
func gpt2Seeds() map[string][2][]byte {
	pair := func(v, m string) [2][]byte { return [2][]byte{[]byte(v), []byte(m)} }
	seeds := map[string][2][]byte{}
	v, m := gpt2Text(`"Ġt":256,"he":257,"Ġthe":258,"<|endoftext|>":259`, "Ġ t", "h e", "Ġt he")
	seeds["tiny"] = pair(v, m)
	seeds["crlf"] = pair(v, strings.ReplaceAll(m, "\n", "\r\n"))
	seeds["no-version"] = pair(v, "Ġ t\n\nh e\nĠt he")
	v, m = gpt2Text(`"ab":256,"cd":258`, "a b")
	seeds["gap"] = pair(v, m)
	v, m = gpt2Text(`"ab":-1`)
	seeds["negative-id"] = pair(v, m)
	v, m = gpt2Text(`"ab":256`, "a b c")
	seeds["bad-line"] = pair(v, m)
	return seeds
}

// FuzzLoadGPT2 loads arbitrary encoder.json and vocab.bpe bytes, as
// FuzzLoadHF does tokenizer.json.
func FuzzLoadGPT2(f *testing.F) {
	for _, s := range gpt2Seeds() {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, v, m []byte) {
		tok, err := loadGPT2("encoder.json", "vocab.bpe", v, m, &config{path: "tokenizer_config.json"})
		if err != nil {
			checkNamed(t, err, "encoder.json", "vocab.bpe")
			return
		}
		exercise(t, tok, m)
	})
}

// checkNamed fails unless err is an *Error naming one of files.
func checkNamed(t *testing.T, err error, files ...string) {
	t.Helper()
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("error %q (%T) is not a *tokenizer.Error", err, err)
	}
	for _, f := range files {
		if te.Path == f {
			return
		}
	}
	t.Fatalf("error %q names %q, not one of %q", err, te.Path, files)
}

// exercise encodes and decodes text with a tokenizer the fuzzer loaded:
// every id in the vocabulary, and with a byte-level vocabulary the text
// back.
func exercise(t *testing.T, tok *BPE, b []byte) {
	t.Helper()
	texts := []string{"Hello world", " the  and\n\nthen", "<|endoftext|> é\xff", "▁a</s>"}
	if len(b) > 200 {
		b = b[:200]
	}
	texts = append(texts, string(b))
	for _, s := range texts {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() || !tok.valid[id] {
				t.Fatalf("Encode(%q) gave %d, not in the vocabulary", s, id)
			}
		}
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", s, err)
		}
		if tok.byteLevel && got != wantDecoded(tok, s) && !tok.prefixSpace && !hasStrip(tok) && !hasOverride(tok) && tok.normed == nil {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	}
	if s, err := tok.Decode([]int{0, -1}); err == nil {
		t.Fatalf("Decode([0 -1]) = %q, no error", s)
	}
	if s, err := tok.Decode([]int{tok.VocabSize()}); err == nil {
		t.Fatalf("Decode([VocabSize]) = %q, no error", s)
	}
}

// hasStrip reports whether an added token strips the spaces around it,
// which no decoding gives back.
func hasStrip(tok *BPE) bool {
	for _, m := range []*matcher{tok.raw, tok.normed} {
		if m == nil {
			continue
		}
		for _, a := range m.tokens {
			if a.lstrip || a.rstrip {
				return true
			}
		}
	}
	return false
}

// hasOverride reports whether an added token's text differs from the
// bytes its id stands for in a byte-level vocabulary (an added token
// written as a byte-level piece, such as "Ġt"): text that merges into the
// id then decodes as the added token's text.
func hasOverride(tok *BPE) bool {
	for raw, id := range tok.vocab {
		if tok.decoded[id] != raw {
			return true
		}
	}
	return false
}

// TestFuzzSeeds writes the seeds above as the fuzz targets' committed
// corpora (go test -run TestFuzzSeeds -update) and checks that the
// committed files are what they would be.
func TestFuzzSeeds(t *testing.T) {
	file := func(args ...string) string {
		return "go test fuzz v1\n" + strings.Join(args, "")
	}
	bytesArg := func(b []byte) string { return fmt.Sprintf("[]byte(%q)\n", b) }
	check := func(target, name, content string) {
		if err := os.MkdirAll(filepath.Join("testdata", "fuzz", target), 0o755); err != nil {
			t.Fatal(err)
		}
		goldenfile.Check(t, filepath.Join("fuzz", target, name), content)
	}
	for name, b := range loadSeeds() {
		check("FuzzLoadHF", name, file(bytesArg(b)))
	}
	for name, p := range gpt2Seeds() {
		check("FuzzLoadGPT2", name, file(bytesArg(p[0]), bytesArg(p[1])))
	}
	for i, s := range roundTripSeeds {
		check("FuzzRoundTrip", fmt.Sprintf("seed-%02d", i), file(fmt.Sprintf("string(%q)\n", s)))
	}
}
