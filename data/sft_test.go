package data

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// byteEncoder is a tokenizer for tests: each byte is a token, and the
// special tokens (matched first, as added tokens are) are 256, 257, ....
// Every byte boundary is a token boundary, so labels can be checked to the
// byte.
type byteEncoder struct{ specials []string }

func (e byteEncoder) Encode(text string) []int {
	var ids []int
outer:
	for i := 0; i < len(text); {
		for k, s := range e.specials {
			if strings.HasPrefix(text[i:], s) {
				ids = append(ids, 256+k)
				i += len(s)
				continue outer
			}
		}
		ids = append(ids, int(text[i]))
		i++
	}
	return ids
}

func (e byteEncoder) VocabSize() int      { return 256 + len(e.specials) }
func (e byteEncoder) Fingerprint() string { return "bytes " + strings.Join(e.specials, " ") }

func (e byteEncoder) decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 256 {
			b.WriteString(e.specials[id-256])
		} else {
			b.WriteByte(byte(id))
		}
	}
	return b.String()
}

// trainedText returns the trained runs of an example, decoded, joined by
// "|".
func (e byteEncoder) trainedText(ex TokenizedExample) string {
	var runs []string
	var run []int32
	for t, l := range ex.Labels {
		if l != IgnoreIndex {
			if l != ex.Tokens[t] {
				return "label differs from its token"
			}
			run = append(run, l)
		} else if run != nil {
			runs = append(runs, e.decode(run))
			run = nil
		}
	}
	if run != nil {
		runs = append(runs, e.decode(run))
	}
	return strings.Join(runs, "|")
}

// chatML is ChatML's template (dolphin's, from the fixtures).
const chatML = "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

var chatEnc = byteEncoder{specials: []string{"<|im_start|>", "<|im_end|>", "<s>", "</s>"}}

func mustTemplate(t testing.TB, src string) *ChatTemplate {
	t.Helper()
	ct, err := NewChatTemplate(src, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

func TestTokenizeRecordLabels(t *testing.T) {
	ct := mustTemplate(t, chatML)
	bos, eos := []int{258}, []int{259}
	conv := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1"},
		{Role: "user", Content: "Q2"}, {Role: "assistant", Content: "A2"}}
	cases := []struct {
		name        string
		rec         Record
		loss        LossOn
		text        string // all tokens, decoded
		trained     string // trained runs, decoded, joined by |
		noBOSAndEOS bool
	}{
		{"text", Record{Format: FormatText, Text: "doc"}, LossDefault, "<s>doc</s>", "doc</s>", false},
		{"text, answers", Record{Format: FormatText, Text: "doc"}, LossAnswers, "<s>doc</s>", "doc</s>", false},
		{"prompt/completion", Record{Format: FormatPromptCompletion, Prompt: "2+2=", Completion: "4"}, LossDefault, "<s>2+2=4</s>", "4</s>", false},
		{"prompt/completion, all", Record{Format: FormatPromptCompletion, Prompt: "2+2=", Completion: "4"}, LossAll, "<s>2+2=4</s>", "2+2=4</s>", false},
		{"prompt/completion, no BOS or EOS", Record{Format: FormatPromptCompletion, Prompt: "a", Completion: "b"}, LossDefault, "ab", "b", true},
		{"alpaca", Record{Format: FormatAlpaca, Instruction: "Add.", Input: "2 2", Output: "4"}, LossDefault,
			"<s>Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n2 2\n\n### Response:4</s>", "4</s>", false},
		{"alpaca without input", Record{Format: FormatAlpaca, Instruction: "Hi.", Output: "hi"}, LossDefault,
			"<s>Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\nHi.\n\n### Response:hi</s>", "hi</s>", false},
		{"chat", Record{Format: FormatChat, Messages: conv}, LossDefault,
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n",
			"A1<|im_end|>\n|A2<|im_end|>\n", false},
		{"chat, all", Record{Format: FormatChat, Messages: conv[:3]}, LossAll,
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n",
			"system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n", false},
		{"chat without an answer", Record{Format: FormatChat, Messages: conv[:2]}, LossDefault,
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := SFTOptions{LossOn: c.loss, Template: ct, BOS: bos, EOS: eos}
			if c.noBOSAndEOS {
				opt.BOS, opt.EOS = nil, nil
			}
			ex, err := TokenizeRecord(c.rec, chatEnc, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := chatEnc.decode(ex.Tokens); got != c.text {
				t.Errorf("tokens\n%q\nwant\n%q", got, c.text)
			}
			if got := chatEnc.trainedText(ex); got != c.trained {
				t.Errorf("trained %q, want %q", got, c.trained)
			}
			if ex.Labels[0] != IgnoreIndex {
				t.Errorf("label 0 is %d: nothing predicts the first token", ex.Labels[0])
			}
		})
	}
}

// TestTokenBoundaryStraddling: where a token spans the start of an answer,
// it counts as the answer's.
func TestTokenBoundaryStraddling(t *testing.T) {
	enc := twoByteEncoder{}
	text := "abcd"
	ids := enc.Encode(text) // "ab", "cd"
	for _, c := range []struct{ at, want int }{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}} {
		if got := tokenBoundary(enc, text, c.at, ids); got != c.want {
			t.Errorf("boundary at byte %d: %d tokens before it, want %d", c.at, got, c.want)
		}
	}
}

// twoByteEncoder makes a token of every two bytes.
type twoByteEncoder struct{}

func (twoByteEncoder) Encode(text string) []int {
	var ids []int
	for i := 0; i < len(text); i += 2 {
		id := int(text[i]) << 8
		if i+1 < len(text) {
			id |= int(text[i+1])
		}
		ids = append(ids, id)
	}
	return ids
}
func (twoByteEncoder) VocabSize() int      { return 1 << 16 }
func (twoByteEncoder) Fingerprint() string { return "pairs" }

// sftFile writes JSON Lines of prompt/completion records: record i has a
// prompt of 1+i%3 bytes and a completion of 1+(7*i)%11 bytes.
func sftRecords(n int) string {
	var b strings.Builder
	for i := range n {
		p := strings.Repeat(string(rune('a'+i%26)), 1+i%3)
		c := strings.Repeat(string(rune('A'+i%26)), 1+(7*i)%11)
		b.WriteString(`{"prompt": "` + p + `", "completion": "` + c + `"}` + "\n")
	}
	return b.String()
}

func openSFT(t testing.TB, path string, opt SFTOptions) *SFTDataset {
	t.Helper()
	d, err := OpenSFT(path, chatEnc, opt, CacheDir(filepath.Join(filepath.Dir(path), "cache")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestSFTGetShiftsLabels(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(`{"prompt": "ab", "completion": "cd"}`+"\n"))
	d := openSFT(t, p, SFTOptions{Context: 16, BOS: []int{258}, EOS: []int{259}})
	ex, err := d.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	s := ex.(Sequence)
	// <s> a b c d </s>: inputs all but the last, targets the next token's label.
	want := Sequence{Input: []int32{258, 'a', 'b', 'c', 'd'}, Target: []int32{IgnoreIndex, IgnoreIndex, 'c', 'd', 259}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("sequence %v, want %v", s, want)
	}
}

// TestJSONLAndParquetGiveSameExamples: the same prompt/completion records
// from JSON Lines and from parquet give identical tokens and labels.
func TestJSONLAndParquetGiveSameExamples(t *testing.T) {
	dir := t.TempDir()
	jsonl := sftRecords(40)
	jp := writeFile(t, filepath.Join(dir, "d.jsonl"), []byte(jsonl))
	pp := writeParquet(t, filepath.Join(dir, "d.parquet"), pyarrowSchema("prompt", "completion"), jsonRows(t, jsonl), 7)
	// And a parquet file of Arrow's writer (scripts/parquet-fixtures.sh).
	fixture := filepath.Join("testdata", "records", "prompt_completion")
	pairs := [][2]string{{jp, pp}, {fixture + ".jsonl", fixture + ".parquet"}}
	for k, pack := range []bool{false, true, false, true} {
		opt := SFTOptions{Context: 12, Pack: pack, BOS: []int{258}, EOS: []int{259}}
		pair := pairs[k/2]
		cache := CacheDir(filepath.Join(dir, "cache"))
		a, err := OpenSFT(pair[0], chatEnc, opt, cache)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := OpenSFT(pair[1], chatEnc, opt, cache)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if a.Len() != b.Len() || a.Len() == 0 {
			t.Fatalf("pack %v: %d and %d examples", pack, a.Len(), b.Len())
		}
		for i := range a.Len() {
			x, err := a.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			y, err := b.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(x, y) {
				t.Fatalf("pack %v, example %d: JSON Lines %v, parquet %v", pack, i, x, y)
			}
		}
		if a.Stats() != b.Stats() {
			t.Errorf("stats %+v and %+v", a.Stats(), b.Stats())
		}
	}
}

// TestPackedHoldsTheSameExamples: packed windows hold, in order, exactly
// the unpacked examples (each restarting its positions at 0), fill the
// context next-fit, and the loader's packed batches are those windows.
func TestPackedHoldsTheSameExamples(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(sftRecords(50)))
	const ctx = 24
	plain := openSFT(t, p, SFTOptions{Context: ctx, BOS: []int{258}, EOS: []int{259}})
	packed := openSFT(t, p, SFTOptions{Context: ctx, Pack: true, BOS: []int{258}, EOS: []int{259}})
	if plain.Examples() != packed.Examples() || packed.Len() >= plain.Len() {
		t.Fatalf("%d examples unpacked, %d packed in %d windows", plain.Examples(), packed.Examples(), packed.Len())
	}
	k := 0
	prevFree := -1
	for w := range packed.Len() {
		ex, err := packed.Get(w)
		if err != nil {
			t.Fatal(err)
		}
		s := ex.(Sequence)
		if len(s.Input) > ctx || len(s.Position) != len(s.Input) || s.Position[0] != 0 {
			t.Fatalf("window %d: %d tokens, positions %v", w, len(s.Input), s.Position)
		}
		for start := 0; start < len(s.Input); {
			end := start + 1
			for end < len(s.Input) && s.Position[end] != 0 {
				if s.Position[end] != s.Position[end-1]+1 {
					t.Fatalf("window %d: positions %v do not count up", w, s.Position)
				}
				end++
			}
			want, err := plain.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			got := Sequence{Input: s.Input[start:end], Target: s.Target[start:end]}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("window %d holds %v where example %d is %v", w, got, k, want)
			}
			k++
			start = end
		}
		// Next-fit: the first example of this window did not fit the
		// last one's free space.
		if prevFree >= 0 {
			first := 1
			for first < len(s.Position) && s.Position[first] != 0 {
				first++
			}
			if first <= prevFree {
				t.Errorf("window %d starts with an example of %d that fits the %d free of the window before", w, first, prevFree)
			}
		}
		prevFree = ctx - len(s.Input)
	}
	if k != plain.Len() {
		t.Errorf("windows hold %d examples, want %d", k, plain.Len())
	}

	// Loader batches: packed rows keep their positions, padded to the
	// longest row of the batch; unpacked rows are padded to their longest.
	for _, d := range []*SFTDataset{plain, packed} {
		l, err := NewLoader(d, LoaderConfig{Batch: 4, Workers: 2, Prefetch: 2})
		if err != nil {
			t.Fatal(err)
		}
		for b, err := range l.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, d, b)
		}
	}
}

// checkBatch compares a loader's batch with the dataset's examples.
func checkBatch(t *testing.T, d *SFTDataset, b *Batch) {
	t.Helper()
	n, width := b.InputShape[0], b.InputShape[1]
	longest, pad, trained := 0, 0, 0
	for j, idx := range b.Indices {
		ex, err := d.Get(idx)
		if err != nil {
			t.Fatal(err)
		}
		s := ex.(Sequence)
		l := len(s.Input)
		longest = max(longest, l)
		pad += width - l
		row := b.Tokens[j*width : (j+1)*width]
		tg := b.Targets[j*width : (j+1)*width]
		if !slices.Equal(row[:l], s.Input) || !slices.Equal(tg[:l], s.Target) {
			t.Fatalf("batch %d row %d differs from example %d", b.Index, j, idx)
		}
		for c := l; c < width; c++ {
			if row[c] != PadToken || tg[c] != IgnoreIndex {
				t.Fatalf("batch %d row %d: padding %d/%d at %d", b.Index, j, row[c], tg[c], c)
			}
		}
		for _, x := range s.Target {
			if x != IgnoreIndex {
				trained++
			}
		}
		if s.Position == nil {
			if b.Positions != nil {
				t.Fatalf("unpacked batch has positions")
			}
			continue
		}
		pos := b.Positions[j*width : (j+1)*width]
		if !slices.Equal(pos[:l], s.Position) {
			t.Fatalf("batch %d row %d: positions %v, want %v", b.Index, j, pos[:l], s.Position)
		}
		for c := max(l, 1); c < width; c++ {
			if pos[c] != pos[c-1]+1 {
				t.Fatalf("batch %d row %d: padding positions %v restart", b.Index, j, pos)
			}
		}
	}
	if width != longest || n != len(b.Indices) || b.Padding != pad || b.TrainedTokens() != trained {
		t.Errorf("batch %d: shape %v, padding %d, trained %d; want width %d, padding %d, trained %d",
			b.Index, b.InputShape, b.Padding, b.TrainedTokens(), longest, pad, trained)
	}
	if f := b.PaddingFraction(); f != float64(pad)/float64(n*width) {
		t.Errorf("padding fraction %v", f)
	}
}

func TestSFTCutAndLeftOut(t *testing.T) {
	recs := `{"prompt": "p", "completion": "short"}` + "\n" +
		`{"prompt": "p", "completion": "a long completion"}` + "\n" +
		`{"prompt": "a prompt longer than the context", "completion": "x"}` + "\n" +
		`{"prompt": "", "completion": ""}` + "\n"
	p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(recs))
	// Without BOS and EOS the empty record has no tokens at all.
	d := openSFT(t, p, SFTOptions{Context: 8})
	st := d.Stats()
	want := SFTStats{Format: FormatPromptCompletion, Records: 4, Examples: 2, Tokens: 6 + 18 + 33, Short: 1, Cut: 2, Untrained: 1}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	for _, s := range []string{"2 prompt/completion examples (57 tokens)", "2 longer than the context are cut", "1 with no trained token", "1 records of fewer than two tokens"} {
		if !strings.Contains(st.String(), s) {
			t.Errorf("%q does not say %q", st, s)
		}
	}
	ex, err := d.Example(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := chatEnc.decode(ex.Tokens); got != "pa long c" {
		t.Errorf("cut example %q, want its first 9 tokens", got)
	}
	g, _ := d.Get(1)
	if s := g.(Sequence); len(s.Input) != 8 {
		t.Errorf("cut example has %d positions, want the context's 8", len(s.Input))
	}
	// Packed, the same two examples, the one left out skipped.
	packed := openSFT(t, p, SFTOptions{Context: 8, Pack: true})
	var got []Sequence
	for w := range packed.Len() {
		ex, err := packed.Get(w)
		if err != nil {
			t.Fatal(err)
		}
		s := ex.(Sequence)
		for start := 0; start < len(s.Input); {
			end := start + 1
			for end < len(s.Input) && s.Position[end] != 0 {
				end++
			}
			got = append(got, Sequence{Input: s.Input[start:end], Target: s.Target[start:end]})
			start = end
		}
	}
	var plain []Sequence
	for i := range d.Len() {
		ex, _ := d.Get(i)
		plain = append(plain, ex.(Sequence))
	}
	if !reflect.DeepEqual(got, plain) {
		t.Errorf("packed windows hold %v, want %v", got, plain)
	}
	// An example left out inside a window.
	p3 := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(`{"prompt": "a", "completion": "b"}`+"\n"+
		`{"prompt": "a long prompt", "completion": "x"}`+"\n"+`{"prompt": "c", "completion": "d"}`+"\n"))
	w := openSFT(t, p3, SFTOptions{Context: 6, Pack: true})
	win, err := w.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	want3 := Sequence{Input: []int32{'a', 'c'}, Target: []int32{'b', 'd'}, Position: []int32{0, 0}}
	if w.Len() != 1 || !reflect.DeepEqual(win, want3) {
		t.Errorf("%d windows, window 0 %v, want one %v", w.Len(), win, want3)
	}
	// Every example left out: an error that says why.
	p2 := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(`{"prompt": "long long prompt", "completion": "x"}`))
	if _, err := OpenSFT(p2, chatEnc, SFTOptions{Context: 4}, CacheDir(t.TempDir())); err == nil || !strings.Contains(err.Error(), "no example has a trained token within the context of 4") {
		t.Errorf("error %v", err)
	}
}

func TestSFTCacheIsReused(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, filepath.Join(dir, "d.jsonl"), []byte(sftRecords(10)))
	cache := filepath.Join(dir, "cache")
	open := func(opt SFTOptions) *SFTDataset {
		d, err := OpenSFT(p, chatEnc, opt, CacheDir(cache))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	a := open(SFTOptions{Context: 8})
	files, _ := filepath.Glob(filepath.Join(cache, "sft-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v", files)
	}
	st0, _ := os.Stat(files[0])
	time.Sleep(20 * time.Millisecond)
	b := open(SFTOptions{Context: 5, Pack: true}) // context and packing are not in the cache
	st1, _ := os.Stat(files[0])
	if !st1.ModTime().Equal(st0.ModTime()) {
		t.Error("the cache was written again for another context")
	}
	if a.Examples() != b.Examples() {
		t.Errorf("%d and %d examples", a.Examples(), b.Examples())
	}
	open(SFTOptions{Context: 8, LossOn: LossAll})
	open(SFTOptions{Context: 8, EOS: []int{259}})
	if files, _ := filepath.Glob(filepath.Join(cache, "sft-*.bin")); len(files) != 3 {
		t.Errorf("loss on all and an EOS make %d cache files, want 3", len(files))
	}
	// A damaged cache is rebuilt.
	x, _ := a.Get(3)
	a.Close()
	os.WriteFile(files[0], []byte("junk"), 0o644)
	c := open(SFTOptions{Context: 8})
	y, err := c.Get(3)
	if err != nil || !reflect.DeepEqual(x, y) {
		t.Errorf("rebuilt cache gives %v (%v), want %v", y, err, x)
	}
}

// TestSFTCacheOfDatedTemplate: a template that renders today's date
// (strftime_now) tokenizes the records again the next day, not the same
// day; one without it reuses its cache whatever the date.
func TestSFTCacheOfDatedTemplate(t *testing.T) {
	day := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	defer func(c func() time.Time) { clock = c }(clock)
	clock = func() time.Time { return day }
	chat := `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}`
	for _, tc := range []struct {
		name, src string
		files     []int // cache files after the first day, later that day, the next day
	}{
		{"dated", `{{ strftime_now('%d') }}{% for m in messages %}{{ m.content }}{% endfor %}`, []int{1, 1, 2}},
		{"undated", `{% for m in messages %}{{ m.content }}{% endfor %}`, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeFile(t, filepath.Join(dir, "c.jsonl"), []byte(chat+"\n"))
			cache := filepath.Join(dir, "cache")
			ct := mustTemplate(t, tc.src)
			for i, at := range []time.Time{day, day.Add(10 * time.Hour), day.Add(24 * time.Hour)} {
				day = at
				d, err := OpenSFT(p, chatEnc, SFTOptions{Context: 8, Template: ct}, CacheDir(cache))
				if err != nil {
					t.Fatal(err)
				}
				d.Close()
				if files, _ := filepath.Glob(filepath.Join(cache, "sft-*.bin")); len(files) != tc.files[i] {
					t.Errorf("at %v: %d cache files, want %d", at, len(files), tc.files[i])
				}
			}
		})
	}
}

func TestSFTErrorsNameTheRecord(t *testing.T) {
	dir := t.TempDir()
	ct := mustTemplate(t, `{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{{ m.content }}{% endfor %}`)
	chat := `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}`
	p := writeFile(t, filepath.Join(dir, "c.jsonl"), []byte(chat+"\n"+chat+"\n"+`{"messages": [{"role": "tool", "content": "x"}]}`+"\n"))
	_, err := OpenSFT(p, chatEnc, SFTOptions{Context: 8, Template: ct}, CacheDir(dir))
	if err == nil || !strings.Contains(err.Error(), p+": line 3: chat template: no tools here") {
		t.Errorf("error %v", err)
	}
	if _, err := OpenSFT(p, chatEnc, SFTOptions{Context: 8}, CacheDir(dir)); err == nil || !strings.Contains(err.Error(), "need the model's chat template") {
		t.Errorf("chat without a template: %v", err)
	}
	for _, opt := range []SFTOptions{{Context: 0}, {Context: 4, LossOn: 7}, {Context: 4, Template: ct, BOS: []int{999}}} {
		if _, err := OpenSFT(p, chatEnc, opt, CacheDir(dir)); err == nil {
			t.Errorf("%+v: no error", opt)
		}
	}
}

func TestWriteExamples(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(`{"prompt": "ab", "completion": "c"}`+"\n"+`{"prompt": "d", "completion": "ef"}`+"\n"))
	d := openSFT(t, p, SFTOptions{Context: 8, Pack: true, BOS: []int{258}, EOS: []int{259}})
	var buf bytes.Buffer
	if err := WriteExamples(&buf, d, 5); err != nil {
		t.Fatal(err)
	}
	want := `{"tokens":[258,97,98,99,259],"labels":[-100,-100,-100,99,259]}` + "\n" +
		`{"tokens":[258,100,101,102,259],"labels":[-100,-100,101,102,259]}` + "\n"
	if buf.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	WriteExamples(&buf, d, 1)
	if strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("first example: %q", buf.String())
	}
	var ex TokenizedExample
	if err := json.Unmarshal(buf.Bytes(), &ex); err != nil || len(ex.Tokens) != len(ex.Labels) {
		t.Errorf("%v %+v", err, ex)
	}
}

// countingSFT counts Get calls.
type countingSFT struct {
	*SFTDataset
	gets chan struct{}
}

func (c countingSFT) Get(i int) (Example, error) {
	c.gets <- struct{}{}
	return c.SFTDataset.Get(i)
}

// TestSFTLoaderPrefetchBound: over a fine-tuning dataset the loader reads
// no more than Prefetch batches ahead, as over any dataset.
func TestSFTLoaderPrefetchBound(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(sftRecords(200)))
	d := openSFT(t, p, SFTOptions{Context: 16})
	for _, tc := range []struct{ workers, prefetch int }{{1, 0}, {2, 1}, {4, 2}} {
		c := countingSFT{d, make(chan struct{}, 1<<12)}
		l, err := NewLoader(c, LoaderConfig{Batch: 5, Shuffle: true, Seed: 1, Workers: tc.workers, Prefetch: tc.prefetch})
		if err != nil {
			t.Fatal(err)
		}
		for b, err := range l.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // let workers run ahead
			if got, limit := len(c.gets), (b.Index+1+tc.prefetch)*5; got > limit {
				t.Fatalf("workers %d prefetch %d: %d examples read while batch %d is in use; at most %d", tc.workers, tc.prefetch, got, b.Index, limit)
			}
			if b.Index == 12 {
				break
			}
		}
	}
}

// TestTokenizeRecordQwen3Turns trains on the answers of a multi-turn
// conversation under Qwen 3's template, which gives only the turns after
// the last question an empty reasoning block: each earlier answer is
// found without it, the last with it (the block is trained, as what the
// template writes for the answer after its generation prompt).
func TestTokenizeRecordQwen3Turns(t *testing.T) {
	var ct *ChatTemplate
	for _, fx := range loadChatFixtures(t) {
		if fx.name == "qwen3" {
			ct = fx.template(t)
		}
	}
	if ct == nil {
		t.Fatal("no qwen3 chat fixture")
	}
	conv := []Message{{Role: "system", Content: "Be terse."}, {Role: "user", Content: "Capital of France?"},
		{Role: "assistant", Content: "Paris."}, {Role: "user", Content: "And of Germany?"}, {Role: "assistant", Content: "Berlin."},
		{Role: "user", Content: "Italy?"}, {Role: "assistant", Content: "Rome."}}
	ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{Template: ct})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := ct.Render(conv, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := chatEnc.decode(ex.Tokens); got != whole {
		t.Errorf("tokens\n%q\nwant the rendering\n%q", got, whole)
	}
	want := "Paris.<|im_end|>\n|Berlin.<|im_end|>\n|<think>\n\n</think>\n\nRome.<|im_end|>\n"
	if got := chatEnc.trainedText(ex); got != want {
		t.Errorf("trained %q, want %q", got, want)
	}
}
