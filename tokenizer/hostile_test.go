package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// byteVocabJSON is the members of a byte-level vocabulary object: every
// byte's character with the byte as its id, then extra, written as is.
func byteVocabJSON(extra string) string {
	var b strings.Builder
	for c := range 256 {
		k, _ := json.Marshal(string(byteChars[c]))
		fmt.Fprintf(&b, "%s:%d,", k, c)
	}
	if extra == "" {
		return strings.TrimSuffix(b.String(), ",")
	}
	return b.String() + extra
}

// hfText is a byte-level tokenizer.json with the given vocabulary
// members, merges and added tokens written as JSON text, so that tests
// can write what encoding/json would not (repeated keys, huge numbers).
func hfText(vocab, merges, added string) string {
	return `{"version":"1.0","added_tokens":[` + added + `],"normalizer":null,` +
		`"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},` +
		`"decoder":{"type":"ByteLevel"},` +
		`"model":{"type":"BPE","vocab":{` + byteVocabJSON(vocab) + `},"merges":[` + merges + `]}}`
}

// writeFiles writes name → content into a new directory and returns it.
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// wantError checks that err is a *Error naming file (a base name) and
// holding every one of want.
func wantError(t *testing.T, err error, file string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %s and %q", file, want)
	}
	var te *Error
	if !errors.As(err, &te) || filepath.Base(te.Path) != file {
		t.Fatalf("error %q does not name %s", err, file)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestHostileTokenizerJSON(t *testing.T) {
	const ab = `"ab":300`
	for _, tc := range []struct {
		name                 string
		vocab, merges, added string
		config               string // tokenizer_config.json, when not ""
		whole                string // the whole tokenizer.json instead
		file                 string // the file the error names; tokenizer.json when ""
		want                 []string
	}{
		{name: "negative id", vocab: `"ab":-1`, want: []string{`model.vocab entry "ab": id -1 is negative`}},
		{name: "id 2^31-1", vocab: `"ab":2147483647`, want: []string{`model.vocab entry "ab": id 2147483647 is beyond 1048575`}},
		{name: "id 2^31", vocab: `"ab":2147483648`, want: []string{`model.vocab entry "ab": id 2147483648 is beyond`}},
		{name: "id 2^32+5", vocab: `"ab":4294967301`, want: []string{`model.vocab entry "ab": id 4294967301 is beyond`}},
		{name: "id past the bound", vocab: `"ab":1048576`, want: []string{`model.vocab entry "ab": id 1048576 is beyond 1048575, the largest token id memfit accepts`}},
		{name: "id past int64", vocab: `"ab":99999999999999999999`, want: []string{`entry "ab": id 99999999999999999999 is not an integer`}},
		{name: "fractional id", vocab: `"ab":5.5`, want: []string{`entry "ab": id 5.5 is not an integer`}},
		{name: "exponent id", vocab: `"ab":3e2`, want: []string{`entry "ab": id 3e2 is not an integer`}},
		{name: "string id", vocab: `"ab":"300"`, want: []string{`entry "ab": id is the string "300", not a number`}},
		{name: "null id", vocab: `"ab":null`, want: []string{`entry "ab": id is null, not a number`}},
		{name: "repeated piece", vocab: ab + `,"ab":301`, want: []string{`model.vocab entry "ab" appears twice (ids 300 and 301)`}},
		{name: "repeated id", vocab: ab + `,"cd":300`, want: []string{`model.vocab entry "cd": id 300 is already "ab"'s`}},
		{name: "byte id reused", vocab: `"ab":32`, want: []string{`model.vocab entry "ab": id 32 is already "Ġ"'s`}},
		{name: "same bytes", vocab: `" ":300`, want: []string{`model.vocab entries "Ġ" (id 32) and " " (id 300) both stand for the bytes " "`}},
		{name: "vocab not an object", whole: `{"model":{"type":"BPE","vocab":[["a",0]],"merges":[]}}`, want: []string{"model.vocab is an array, not an object"}},
		{name: "no vocab", whole: `{"model":{"type":"BPE","merges":[]}}`, want: []string{"model has no vocab"}},
		{name: "not json", whole: `{"model":`, want: []string{"not a tokenizer.json"}},
		{name: "merge of three", vocab: ab, merges: `"a b c"`, want: []string{`model.merges[0]: "a b c" is not two tokens separated by a space`}},
		{name: "merge without space", vocab: ab, merges: `"a b","ab"`, want: []string{`model.merges[1]: "ab" is not two tokens`}},
		{name: "merge piece missing", vocab: ab, merges: `"a b",["x","y"]`, want: []string{`model.merges[1] ("x" "y"): "xy" is not in model.vocab`}},
		{name: "merge of numbers", vocab: ab, merges: `"a b",5`, want: []string{`model.merges[1]: the number 5, want "a b" or ["a", "b"]`}},
		{name: "merge array of three", vocab: ab, merges: `["a","b","c"]`, want: []string{`model.merges[0]: more than two tokens`}},
		{name: "merge array of one", vocab: ab, merges: `["a"]`, want: []string{`model.merges[0]: one token`}},
		{name: "merge array of numbers", vocab: ab, merges: `[1,2]`, want: []string{`model.merges[0]: its first element: want a string, have the number 1`}},
		{name: "added negative id", added: `{"id":-1,"content":"<x>"}`, want: []string{`added token "<x>" (added_tokens[0]): id -1 is negative`}},
		{name: "added id 2^31", added: `{"id":2147483648,"content":"<x>"}`, want: []string{`added token "<x>" (added_tokens[0]): id 2147483648 is beyond 1048575`}},
		{name: "added id 2^32+5", added: `{"id":4294967301,"content":"<x>"}`, want: []string{`added token "<x>" (added_tokens[0]): id 4294967301 is beyond`}},
		{name: "added without content", added: `{"id":300}`, want: []string{`added_tokens[0] has no content`}},
		{name: "added empty", added: `{"id":300,"content":""}`, want: []string{`added_tokens[0] has no content`}},
		{name: "added without id", added: `{"content":"<x>"}`, want: []string{`added token "<x>" (added_tokens[0]) has no id`}},
		{name: "added twice", added: `{"id":300,"content":"<x>"},{"id":301,"content":"<x>"}`, want: []string{`added token "<x>" (added_tokens[1]) has id 300 and also 301`}},
		{name: "added same id", added: `{"id":300,"content":"<x>"},{"id":300,"content":"<y>"}`, want: []string{`added tokens "<x>" and "<y>" (added_tokens[1]) both have id 300`}},
		{name: "added id of another piece", added: `{"id":38,"content":"<x>"}`, want: []string{`added token "<x>" has id 38, which model.vocab gives to "&"`}},
		{name: "added piece with another id", vocab: `"<x>":300`, added: `{"id":301,"content":"<x>"}`, want: []string{`added token "<x>" has id 301, but model.vocab gives it id 300`}},
		{name: "too many added", whole: hfText("", "", strings.Repeat(`{"id":300,"content":"<x>"},`, 1<<18)+`{"id":300,"content":"<x>"}`), want: []string{"added_tokens has more than 262144 entries"}},
		{name: "added not a list", whole: strings.Replace(hfText("", "", ""), `"added_tokens":[]`, `"added_tokens":{}`, 1), want: []string{"added_tokens is not an array"}},
		{name: "Sequence too long", whole: strings.Replace(hfText("", "", ""), `"normalizer":null`,
			`"normalizer":{"type":"Sequence","normalizers":[`+strings.Repeat(`{},`, 100)+`{}]}`, 1), want: []string{"normalizer", "more than 64 members"}},
		{name: "Sequence too deep", whole: strings.Replace(hfText("", "", ""), `"decoder":{"type":"ByteLevel"}`,
			`"decoder":`+strings.Repeat(`{"type":"Sequence","decoders":[`, 10)+`{"type":"ByteLevel"}`+strings.Repeat(`]}`, 10), 1), want: []string{"decoder", "nested more than 4 deep"}},
		{name: "added tokens too long", whole: hfText("", "", strings.Repeat(`{"id":300,"content":"`+strings.Repeat("x", 1<<20)+`"},`, 8)+`{"id":301,"content":"y"}`),
			want: []string{"added_tokens[8]): the added tokens take more than 8388608 bytes"}},
		{name: "normalizer Lowercase", whole: withNormalizer(`{"type":"Lowercase"}`), want: []string{"normalizer Lowercase", "is not supported (only NFC, NFD, NFKC, NFKD"}},
		{name: "two forms", whole: withNormalizer(`{"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"NFC"}]}`),
			want: []string{"normalizer NFC", "more than one Unicode normalization form"}},
		{name: "Replace with byte level", whole: withNormalizer(`{"type":"Replace","pattern":{"String":" "},"content":"▁"}`),
			want: []string{"a ByteLevel pre-tokenizer with Replace, Prepend or Metaspace is not supported"}},
		{name: "regex Removed", whole: withPretok(`{"type":"Split","pattern":{"Regex":"\\d"},"behavior":"Removed","invert":true}`),
			want: []string{"pre_tokenizer Split", "Removed inverted for a pattern memfit knows"}},
		{name: "string Removed", whole: withPretok(`{"type":"Split","pattern":{"String":" "},"behavior":"Removed","invert":false}`),
			want: []string{"a String splits with behavior Isolated, MergedWithPrevious"}},
		{name: "empty string", whole: withPretok(`{"type":"Split","pattern":{"String":""},"behavior":"Isolated","invert":false}`),
			want: []string{"an empty String"}},
		{name: "Split after Metaspace", whole: withPretok(`{"type":"Sequence","pretokenizers":[{"type":"Metaspace"},{"type":"Split","pattern":{"String":"▁"},"behavior":"Isolated","invert":false}]}`),
			want: []string{"pre_tokenizer Split", "after Metaspace is not supported"}},
		{name: "Metaspace second", whole: withPretok(`{"type":"Sequence","pretokenizers":[{"type":"Digits"},{"type":"Metaspace"}]}`),
			want: []string{"pre_tokenizer Metaspace after another pre-tokenizer is not supported"}},
		{name: "bos not a token", config: `{"bos_token":"<nope>"}`, file: "tokenizer_config.json", want: []string{`bos_token "<nope>" is not a token of tokenizer.json`}},
		{name: "eos not a string", config: `{"eos_token":5}`, file: "tokenizer_config.json", want: []string{`eos_token is 5, not a string or an object`}},
		{name: "template not a string", config: `{"chat_template":{"a":1}}`, file: "tokenizer_config.json", want: []string{`chat_template is neither a string nor a list`}},
		{name: "config not json", config: `{"bos_token":`, file: "tokenizer_config.json", want: []string{"unexpected end of JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.whole
			if text == "" {
				text = hfText(tc.vocab, tc.merges, tc.added)
			}
			files := map[string]string{"tokenizer.json": text}
			if tc.config != "" {
				files["tokenizer_config.json"] = tc.config
			}
			file := tc.file
			if file == "" {
				file = "tokenizer.json"
			}
			_, err := Open(writeFiles(t, files))
			wantError(t, err, file, tc.want...)
		})
	}
}

// withNormalizer and withPretok are hfText("", "", "") with another
// normalizer or pre-tokenizer, written as JSON text.
func withNormalizer(n string) string {
	return strings.Replace(hfText("", "", ""), `"normalizer":null`, `"normalizer":`+n, 1)
}

func withPretok(p string) string {
	return strings.Replace(hfText("", "", ""), `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`, `"pre_tokenizer":`+p, 1)
}

// gpt2Text returns an encoder.json of every byte plus extra members, and
// a vocab.bpe of the given lines after "#version: 0.2".
func gpt2Text(extra string, lines ...string) (vocab, merges string) {
	return "{" + byteVocabJSON(extra) + "}", strings.Join(append([]string{"#version: 0.2"}, lines...), "\n") + "\n"
}

func TestHostileGPT2Files(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vocab  string
		lines  []string
		file   string
		want   []string
		vocab2 string // the whole encoder.json instead
	}{
		{name: "negative id", vocab: `"ab":-1`, file: "encoder.json", want: []string{`entry "ab": id -1 is negative`}},
		{name: "id 2^31-1", vocab: `"ab":2147483647`, file: "encoder.json", want: []string{`entry "ab": id 2147483647 is beyond 1048575`}},
		{name: "id 2^32+5", vocab: `"ab":4294967301`, file: "encoder.json", want: []string{`entry "ab": id 4294967301 is beyond`}},
		{name: "repeated id", vocab: `"ab":256,"cd":256`, file: "encoder.json", want: []string{`entry "cd": id 256 is already "ab"'s`}},
		{name: "repeated piece", vocab: `"ab":256,"ab":257`, file: "encoder.json", want: []string{`entry "ab" appears twice (ids 256 and 257)`}},
		{name: "gap", vocab: `"ab":256,"cd":258`, file: "encoder.json", want: []string{"no entry has id 257, but ids go up to 258"}},
		{name: "not an object", vocab2: `[1,2]`, file: "encoder.json", want: []string{"not a JSON object of token ids but an array"}},
		{name: "truncated", vocab2: `{"a":1,`, file: "encoder.json", want: []string{"unexpected end of JSON"}},
		{name: "trailing data", vocab2: `{"a":1} {}`, file: "encoder.json", want: []string{"invalid character"}},
		{name: "merge of one", vocab: `"ab":256`, lines: []string{"a b", "ab"}, file: "vocab.bpe", want: []string{`line 3: "ab" is not two tokens separated by a space`}},
		{name: "merge of three", vocab: `"ab":256`, lines: []string{"a b c"}, file: "vocab.bpe", want: []string{`line 2: "a b c" is not two tokens`}},
		{name: "merge piece missing", vocab: `"ab":256`, lines: []string{"a b", "", "x y"}, file: "vocab.bpe", want: []string{`line 4 ("x" "y"): "xy" is not in encoder.json`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, m := gpt2Text(tc.vocab, tc.lines...)
			if tc.vocab2 != "" {
				v = tc.vocab2
			}
			dir := writeFiles(t, map[string]string{"encoder.json": v, "vocab.bpe": m})
			_, err := Open(dir)
			wantError(t, err, tc.file, tc.want...)
		})
	}
}

// TestLargestID checks that the largest id accepted loads, the ids below
// it that no token has being gaps.
func TestLargestID(t *testing.T) {
	tok, err := Open(writeFiles(t, map[string]string{"tokenizer.json": hfText(`"ab":1048575`, `"a b"`, "")}))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != maxTokenID+1 {
		t.Errorf("VocabSize %d, want %d", tok.VocabSize(), maxTokenID+1)
	}
	if got := tok.Encode("ab"); !slices.Equal(got, []int{maxTokenID}) {
		t.Errorf("Encode(\"ab\") = %v, want [%d]", got, maxTokenID)
	}
	if _, err := tok.Decode([]int{maxTokenID - 1}); err == nil {
		t.Errorf("Decode of a gap gave no error")
	}
}

// TestLongMergeLine checks that a merges line longer than any scanner
// buffer is read, and the merges after it too.
func TestLongMergeLine(t *testing.T) {
	long := strings.Repeat("a", 3<<20)
	extra := fmt.Sprintf(`%q:256,%q:257,"Ġt":258`, long, long+"b")
	v, m := gpt2Text(extra, long+" b", "Ġ t")
	tok, err := Open(writeFiles(t, map[string]string{"encoder.json": v, "vocab.bpe": m}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(" t"); !slices.Equal(got, []int{258}) {
		t.Errorf(`Encode(" t") = %v, want [258]: the merge after the long line was dropped`, got)
	}
	if len(tok.model.merges) != 2 {
		t.Errorf("%d merges, want 2", len(tok.model.merges))
	}
}

// TestFileKinds checks that tokenizer files that are not regular files,
// or are too large, are refused at once.
func TestFileKinds(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "tokenizer.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 30); err != nil { // sparse: no disk used
		t.Skip("cannot make a 10 GiB sparse file:", err)
	}
	f.Close()
	_, err = openWithin(t, big)
	wantError(t, err, "tokenizer.json", "10737418240 bytes, over the limit of 128 MiB")

	if _, err := os.Stat("/dev/zero"); err == nil {
		_, err = openWithin(t, "/dev/zero")
		wantError(t, err, "zero", "a character device, not a regular file")
	}
}

// openWithin is Open, failing the test if it does not return in ten
// seconds (a FIFO opened for reading blocks until a writer comes).
func openWithin(t *testing.T, path string) (*BPE, error) {
	t.Helper()
	type result struct {
		tok *BPE
		err error
	}
	done := make(chan result, 1)
	go func() {
		tok, err := Open(path)
		done <- result{tok, err}
	}()
	select {
	case r := <-done:
		return r.tok, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Open(%s) still blocked after 10 s", path)
	}
	return nil, nil
}

// TestDecodeOutside checks that Decode refuses ids outside the
// vocabulary, the gaps between ids included, with an error.
func TestDecodeOutside(t *testing.T) {
	// ids 0-255, then <x> at 300: 256-299 are gaps.
	dir := writeFiles(t, map[string]string{"tokenizer.json": hfText("", "", `{"id":300,"content":"<x>"}`)})
	tok, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 301 {
		t.Fatalf("VocabSize %d, want 301", tok.VocabSize())
	}
	if s, err := tok.Decode([]int{72, 300, 105}); err != nil || s != "H<x>i" {
		t.Errorf("Decode = %q, %v; want \"H<x>i\"", s, err)
	}
	for _, id := range []int{-1, 256, 299, 301, 1 << 31, -1 << 31, 1<<32 + 5, 1<<63 - 1, -1 << 63} {
		s, err := tok.Decode([]int{72, id})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("token %d at position 1 is not in the vocabulary", id)) {
			t.Errorf("Decode([72 %d]) = %q, %v; want an error naming it", id, s, err)
		}
	}
}

// TestAddedTokensInText checks that added tokens written in text become
// their ids, as transformers encodes chat templates' output.
func TestAddedTokensInText(t *testing.T) {
	added := `{"id":300,"content":"<|start_header_id|>","special":true},` +
		`{"id":301,"content":"<|end_header_id|>","special":true},` +
		`{"id":302,"content":"<|eot_id|>","special":true},` +
		`{"id":303,"content":"<|begin_of_text|>","special":true}`
	dir := writeFiles(t, map[string]string{
		"tokenizer.json": hfText(`"us":256,"er":257,"user":258`, `"u s","e r","us er"`, added),
		"tokenizer_config.json": `{"bos_token":{"content":"<|begin_of_text|>","lstrip":false},"eos_token":"<|eot_id|>",` +
			`"chat_template":"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}`,
	})
	tok, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	text := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	want := []int{303, 300, 258, 301, '\n', '\n', 'H', 'i', 302}
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
	if s, _ := tok.Decode(want); s != text {
		t.Errorf("Decode = %q, want %q", s, text)
	}
	if tok.BOS() != 303 || tok.EOS() != 302 || tok.BOSToken() != "<|begin_of_text|>" || tok.EOSToken() != "<|eot_id|>" {
		t.Errorf("BOS %d %q, EOS %d %q; want 303 <|begin_of_text|>, 302 <|eot_id|>", tok.BOS(), tok.BOSToken(), tok.EOS(), tok.EOSToken())
	}
	if got, want := tok.ChatTemplate(), "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"; got != want {
		t.Errorf("ChatTemplate() = %q, want %q", got, want)
	}
}

// TestLlama3ChatTokens pins the header tokens of Llama 3's chat template
// (ids from Meta's tokenizer.json) in the real vocabulary.
func TestLlama3ChatTokens(t *testing.T) {
	tok := openReal(t, "llama3")
	text := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	want := []int{128000, 128006, 9125, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271}
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
}

func TestConfigFiles(t *testing.T) {
	tj := hfText(`"<s>":256,"</s>":257`, "", "")
	for _, tc := range []struct {
		name         string
		files        map[string]string
		bos, eos     int
		bosT, eosT   string
		chatTemplate string
	}{
		{name: "no config", files: map[string]string{}, bos: 256, eos: 257, bosT: "<s>", eosT: "</s>"},
		// null is none, as transformers reads it (Qwen's BOS).
		{name: "null tokens", files: map[string]string{"tokenizer_config.json": `{"bos_token":null,"eos_token":null}`}, bos: -1, eos: -1},
		{name: "absent tokens", files: map[string]string{"tokenizer_config.json": `{}`}, bos: 256, eos: 257, bosT: "<s>", eosT: "</s>"},
		{name: "strings", files: map[string]string{"tokenizer_config.json": `{"bos_token":"</s>","eos_token":"<s>","chat_template":"T"}`},
			bos: 257, eos: 256, bosT: "</s>", eosT: "<s>", chatTemplate: "T"},
		{name: "template list", files: map[string]string{"tokenizer_config.json": `{"chat_template":[{"name":"tool_use","template":"U"},{"name":"default","template":"D"}]}`},
			bos: 256, eos: 257, bosT: "<s>", eosT: "</s>", chatTemplate: "D"},
		{name: "jinja file first", files: map[string]string{"tokenizer_config.json": `{"chat_template":"C"}`, "chat_template.jinja": "J\n"},
			bos: 256, eos: 257, bosT: "<s>", eosT: "</s>", chatTemplate: "J\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"tokenizer.json": tj}
			for k, v := range tc.files {
				files[k] = v
			}
			tok, err := Open(writeFiles(t, files))
			if err != nil {
				t.Fatal(err)
			}
			if tok.BOS() != tc.bos || tok.EOS() != tc.eos || tok.BOSToken() != tc.bosT || tok.EOSToken() != tc.eosT || tok.ChatTemplate() != tc.chatTemplate {
				t.Errorf("BOS %d %q, EOS %d %q, template %q; want %d %q, %d %q, %q",
					tok.BOS(), tok.BOSToken(), tok.EOS(), tok.EOSToken(), tok.ChatTemplate(), tc.bos, tc.bosT, tc.eos, tc.eosT, tc.chatTemplate)
			}
		})
	}
}
