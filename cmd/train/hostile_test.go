package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHostileInputs runs the command, as its own process under a 4 GiB
// address-space limit and within 1 GiB of RSS, on the hostile cases of issue #35: model files
// that wrap or lie, FIFOs where files belong, sizes that would build
// without end, outputs onto inputs, settings that were accepted and did
// nothing or the wrong thing. Each must end at once with status 2 (bad
// input) or 1 (a failure while running), never a panic's, with a message
// naming the file, key or flag, and leave every input byte-identical.
// (The deadline is a hang detector, not a speed requirement.)
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the command as processes")
	}
	dir := t.TempDir()
	gpt2, err := filepath.Abs(filepath.Join("..", "..", "hf", "testdata", "gpt2-f32"))
	if err != nil {
		t.Fatal(err)
	}
	model := func(name string, edit func(dir string)) string {
		d := filepath.Join(dir, name)
		copyDir(t, gpt2, d)
		if edit != nil {
			edit(d)
		}
		return d
	}
	fifo := func(d, name string) {
		p := filepath.Join(d, name)
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	header := func(d string, edit func(h map[string]any)) {
		p := filepath.Join(d, "model.safetensors")
		b, _ := os.ReadFile(p)
		n := binary.LittleEndian.Uint64(b)
		var h map[string]any
		json.Unmarshal(b[8:8+n], &h)
		data := b[8+n:]
		edit(h)
		hj, _ := json.Marshal(h)
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
		os.WriteFile(p, append(append(out, hj...), data...), 0o644)
	}
	config := func(d string, key string, v any) {
		p := filepath.Join(d, "config.json")
		b, _ := os.ReadFile(p)
		var c map[string]any
		json.Unmarshal(b, &c)
		c[key] = v
		b, _ = json.Marshal(c)
		os.WriteFile(p, b, 0o644)
	}
	wrapped := model("wrapped", func(d string) {
		header(d, func(h map[string]any) {
			h["transformer.wte.weight"] = map[string]any{"dtype": "F32", "shape": []any{3, 5, 17, 257, 641, 65537, 6700417}, "data_offsets": []any{100, 0}}
		})
	})
	huge := model("huge", func(d string) {
		header(d, func(h map[string]any) {
			h["transformer.wte.weight"] = map[string]any{"dtype": "F32", "shape": []any{1 << 40, 1 << 40}, "data_offsets": []any{0, 0}}
		})
	})
	trailing := model("trailing", func(d string) {
		f, _ := os.OpenFile(filepath.Join(d, "model.safetensors"), os.O_APPEND|os.O_WRONLY, 0)
		f.Write(make([]byte, 64))
		f.Close()
	})
	layers := model("layers", func(d string) { config(d, "n_layer", 1e9) })
	fewer := model("fewer", func(d string) { config(d, "n_layer", 1) })
	negative := model("negative", func(d string) { config(d, "n_head", -1) })
	positions := model("positions", func(d string) { config(d, "n_positions", 1e9) })
	nan := model("nan", func(d string) {
		p := filepath.Join(d, "model.safetensors")
		b, _ := os.ReadFile(p)
		n := binary.LittleEndian.Uint64(b)
		data := b[8+n:]
		for i := 0; i+4 <= len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(math.NaN())))
		}
		os.WriteFile(p, b, 0o644)
	})
	fifoConfig := model("fifo-config", func(d string) { fifo(d, "config.json") })
	fifoModel := model("fifo-model", func(d string) { fifo(d, "model.safetensors") })
	sharded := model("sharded", func(d string) {
		os.Rename(filepath.Join(d, "model.safetensors"), filepath.Join(d, "model-00001-of-00001.safetensors"))
		index := map[string]any{"weight_map": map[string]string{"transformer.wte.weight": "model-00002-of-00002.safetensors"}}
		b, _ := json.Marshal(index)
		os.WriteFile(filepath.Join(d, "model.safetensors.index.json"), b, 0o644)
	})
	fifoIndex := model("fifo-index", func(d string) {
		os.Remove(filepath.Join(d, "model.safetensors"))
		fifo(d, "model.safetensors.index.json")
	})
	badIDs := filepath.Join(dir, "bad-ids.json")
	os.WriteFile(badIDs, []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483648}, "merges": []}}`), 0o644)
	dupIDs := filepath.Join(dir, "dup-ids.json")
	os.WriteFile(dupIDs, []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}`), 0o644)
	fifoTok := filepath.Join(dir, "fifo-tokenizer.json")
	syscall.Mkfifo(fifoTok, 0o644)
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("some text ", 100)), 0o644)
	gptFlags := []string{"-model", "gpt", "-layers", "1", "-width", "16", "-heads", "2", "-context", "8"}
	// Chat records, and byte-level tokenizers whose chat templates are
	// hostile (issue #43): each in a directory of its own, beside its
	// tokenizer_config.json.
	chat := filepath.Join(dir, "chat.jsonl")
	os.WriteFile(chat, []byte(`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`+"\n"), 0o644)
	chatTok := func(name, tmpl string) string {
		d := filepath.Join(dir, name)
		os.MkdirAll(d, 0o755)
		vocab := map[string]int{}
		n := 0
		for b := range 256 {
			r := rune(b)
			if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
				r = rune(256 + n)
				n++
			}
			vocab[string(r)] = b
		}
		tok, _ := json.Marshal(map[string]any{
			"added_tokens":  []any{map[string]any{"id": 256, "content": "<|endoftext|>", "special": true}},
			"pre_tokenizer": map[string]any{"type": "ByteLevel"},
			"decoder":       map[string]any{"type": "ByteLevel"},
			"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		})
		os.WriteFile(filepath.Join(d, "tokenizer.json"), tok, 0o644)
		cfg, _ := json.Marshal(map[string]any{"chat_template": tmpl, "eos_token": "<|endoftext|>"})
		os.WriteFile(filepath.Join(d, "tokenizer_config.json"), cfg, 0o644)
		return filepath.Join(d, "tokenizer.json")
	}
	chatLoop := chatTok("chat-loop", "{% for m in messages %}{{ m.content }}{% endfor %}{% for i in range(10**12) %}{% endfor %}")
	chatDouble := chatTok("chat-double", "{% set ns = namespace(s=messages[0].content) %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}")
	chatRecurse := chatTok("chat-recurse", "{% macro f(m) %}{{ f(m) }}{% endmacro %}{{ f(messages[0]) }}")
	chatZero := chatTok("chat-zero", "{{ messages|length // 0 }}")
	chatDeep := chatTok("chat-deep", "{{ "+strings.Repeat("(", 100000)+"1"+strings.Repeat(")", 100000)+" }}")
	// Records (issue #43): a line of 200 MB, a conversation of 20,000
	// messages, and parquet files whose footer nests a million deep,
	// whose schema is a million nested groups, that hold a million row
	// groups, whose pages declare or inflate to a GiB or hold LZ4 that
	// parquet-go would double its buffer for without end.
	chatML := chatTok("chat-ml", "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}")
	records := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		return p
	}
	longLine := filepath.Join(dir, "long-line.jsonl")
	func() {
		f, _ := os.Create(longLine)
		defer f.Close()
		f.WriteString(`{"text": "`)
		chunk := []byte(strings.Repeat("a", 1<<20))
		for range 200 {
			f.Write(chunk)
		}
		f.WriteString(`"}` + "\n")
	}()
	overLimit := records("over-limit.jsonl", `{"text": "a"}`, `{"text": "b"}`, `{"text": "`+strings.Repeat("c", 2000)+`"}`)
	// (The first message names this test's directory, so that no cache
	// of another run, tokenized under a longer context, stands in.)
	turns := []string{fmt.Sprintf(`{"role": "user", "content": %q}`, dir)}
	for i := 1; i < 20000; i++ {
		turns = append(turns, fmt.Sprintf(`{"role": %q, "content": "turn %d"}`, []string{"user", "assistant"}[i%2], i))
	}
	manyTurns := records("many-turns.jsonl", `{"messages": [`+strings.Join(turns, ", ")+`]}`)
	pq := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	deepFooter := pq("deep-footer.parquet", parquetBytes(append(bytes.Repeat([]byte{0x1c}, 1000000), make([]byte, 1000001)...)))
	var groups []byte // field 2, a list of a million SchemaElements {name "g", num_children 1}
	groups = binary.AppendUvarint(append(groups, 0x29, 0xfc), 1000001)
	for range 1000001 {
		groups = append(groups, 0x48, 1, 'g', 0x15, 2, 0)
	}
	nestedSchema := pq("nested-schema.parquet", parquetBytes(append(groups, 0)))
	manyGroups := pq("row-groups.parquet", parquetBytes(append(append(binary.AppendUvarint([]byte{0x49, 0xfc}, 1000000), make([]byte, 1000000)...), 0)))
	gzip1GiB := pq("gzip-1gib.parquet", parquetText(2, 1<<30, 1, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}))
	lz4Bad := pq("lz4-corrupt.parquet", parquetText(7, 9, 1, []byte{0x1f, 'a', 0, 0, 0x10, 'b'}))
	zstd1GiB := pq("zstd-1gib.parquet", parquetText(6, 9, 1, append(binary.LittleEndian.AppendUint64([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, 1<<30), 1, 0, 0)))
	bigRow := pq("big-row.parquet", parquetText(0, 2*4+1+3000, 2, append(binary.LittleEndian.AppendUint32(append(binary.LittleEndian.AppendUint32(nil, 1), 'a'), 3000), strings.Repeat("b", 3000)...)))

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		// Panics, before.
		{"wrapping shape", []string{"-init", wrapped}, 2, "transformer.wte.weight"},
		{"2^40 x 2^40 over no bytes", []string{"-init", huge}, 2, "transformer.wte.weight"},
		{"token id 2^31", []string{"-model", "gpt", "-data", text, "-tokenizer", badIDs}, 2, "bad-ids.json"},
		{"duplicate token ids", []string{"-model", "gpt", "-data", text, "-tokenizer", dupIDs}, 2, "dup-ids.json"},
		// Memory before any check.
		{"n_layer 1e9", []string{"-init", layers}, 2, "n_layer"},
		{"n_layer 1e9 planned", []string{"-init", layers, "-plan"}, 2, "n_layer"},
		{"-layers 1e9", []string{"-layers", "1000000000"}, 2, "-layers 1000000000"},
		{"-layers 1e9 planned", []string{"-layers", "1000000000", "-plan"}, 2, "-layers 1000000000"},
		{"-layers 1e9 in 64MiB", []string{"-layers", "1000000000", "-mem-limit", "64MiB"}, 2, "-layers 1000000000"},
		{"-ranks 1e9", []string{"-ranks", "1000000000", "-plan", "-dist", "mpi"}, 2, "-ranks 1000000000"},
		{"-ranks 100000 zero 3", []string{"-ranks", "100000", "-zero", "3", "-plan", "-dist", "mpi"}, 2, "-ranks 100000"},
		{"a model far beyond the device", append(append([]string{}, gptFlags[:2]...), "-layers", "64", "-width", "8192", "-heads", "64"), 2, "cannot fit"},
		// Hangs.
		{"config.json a FIFO", []string{"-init", fifoConfig}, 2, "config.json"},
		{"model.safetensors a FIFO", []string{"-init", fifoModel}, 2, "model.safetensors"},
		{"index a FIFO", []string{"-init", fifoIndex}, 2, "model.safetensors.index.json"},
		{"tokenizer a FIFO", []string{"-model", "gpt", "-data", text, "-tokenizer", fifoTok}, 2, "fifo-tokenizer.json"},
		{"-generate 1e9 over huge positions", []string{"-init", positions, "-generate", "1000000000", "-prompt", "1 2"}, 2, "n_positions"},
		{"-generate 1e9 planned", []string{"-init", positions, "-generate", "1000000000", "-prompt", "1 2", "-plan"}, 2, "n_positions"},
		// Overwrites.
		{"-init DIR -save DIR in hf", []string{"-init", gpt2Copy(t, dir), "-save-format", "hf", "-save", filepath.Join(dir, "gpt2-copy"), "-steps", "1"}, 2, "-init input"},
		// Silently accepted.
		{"more layers than config", []string{"-init", fewer}, 2, "transformer.h.1"},
		{"trailing bytes", []string{"-init", trailing}, 2, "model.safetensors"},
		{"index naming the wrong shard", []string{"-init", sharded}, 2, "model-00002-of-00002.safetensors"},
		{"NaN weights generating", []string{"-init", nan, "-generate", "4", "-prompt", "1 2"}, 2, "not finite"},
		{"-temperature +Inf", append(append([]string{}, gptFlags...), "-generate", "2", "-prompt", "1", "-temperature", "+Inf"), 2, "-temperature +Inf"},
		{"prompt over the context", append(append([]string{}, gptFlags...), "-generate", "4", "-prompt", "1 2 3 4 5 6"), 2, "-prompt of 6 tokens"},
		{"-lora above the layer", append(append([]string{}, gptFlags...), "-lora", "64"), 2, "rank 64 is above"},
		{"-lora-targets comma", append(append([]string{}, gptFlags...), "-lora", "2", "-lora-targets", ","), 2, "-lora-targets"},
		{"-offload-prefetch alone", []string{"-offload-prefetch", "2"}, 2, "-offload-prefetch 2: needs -offload activations"},
		{"-init with another -context", []string{"-init", gpt2, "-context", "16"}, 2, "-context 16"},
		{"-init with another -layers", []string{"-init", gpt2, "-layers", "4"}, 2, "-layers 4"},
		// Chat templates (issue #43): an error naming the template's file
		// and key, and the limit, at once.
		{"chat template looping 10^12 times", []string{"-model", "gpt", "-data", chat, "-tokenizer", chatLoop}, 2, "chat-loop/tokenizer_config.json: chat_template: line 1: range() of 1000000000000 items"},
		{"chat template doubling a string", []string{"-model", "gpt", "-data", chat, "-tokenizer", chatDouble}, 2, "chat-double/tokenizer_config.json: chat_template: line 1: the template builds a string of"},
		{"chat template recursing", []string{"-model", "gpt", "-data", chat, "-tokenizer", chatRecurse}, 2, "chat-recurse/tokenizer_config.json: chat_template: line 1: macros, caller() or recursive loops call each other more than 100 deep"},
		{"chat template dividing by zero", []string{"-model", "gpt", "-data", chat, "-tokenizer", chatZero}, 2, "chat-zero/tokenizer_config.json: chat_template: line 1: integer division by zero"},
		{"chat template of 10^5 nested parentheses", []string{"-model", "gpt", "-data", chat, "-tokenizer", chatDeep}, 2, "chat-deep/tokenizer_config.json: chat template: line 1: brackets nest more than 256 deep"},
		// Records (issue #43): refused at once, naming the file, the line
		// or row (and the part of a parquet file) and the limit.
		{"JSON Lines line of 200 MB", []string{"-model", "gpt", "-data", longLine, "-tokenizer", chatML}, 2, "long-line.jsonl: line 1: record over the limit of 16 MiB on one record (-max-record-bytes)"},
		{"record over -max-record-bytes", []string{"-model", "gpt", "-data", overLimit, "-tokenizer", chatML, "-max-record-bytes", "1KiB"}, 2, "over-limit.jsonl: line 3: record over the limit of 1 KiB on one record (-max-record-bytes)"},
		{"-max-record-bytes 2GiB", []string{"-model", "gpt", "-data", overLimit, "-tokenizer", chatML, "-max-record-bytes", "2GiB"}, 2, "-max-record-bytes 2147483648: want a size up to 1024MiB"},
		{"-max-record-bytes without records", []string{"-model", "gpt", "-data", text, "-max-record-bytes", "1KiB"}, 2, "-max-record-bytes 1024: -data"},
		{"chat of 20,000 messages in a context of 8", append(append([]string{}, gptFlags...), "-data", manyTurns, "-tokenizer", chatML), 2, "many-turns.jsonl: line 1: chat record of 20000 messages, more than a context of 8 positions holds"},
		{"parquet footer nested a million deep", []string{"-model", "gpt", "-data", deepFooter, "-tokenizer", chatML}, 2, "deep-footer.parquet: footer: nests deeper than 32 levels, the limit"},
		{"parquet schema of a million nested groups", []string{"-model", "gpt", "-data", nestedSchema, "-tokenizer", chatML}, 2, "nested-schema.parquet: footer: a schema of 1000001 elements, over the limit of 1024"},
		{"parquet of a million row groups", []string{"-model", "gpt", "-data", manyGroups, "-tokenizer", chatML}, 2, "row-groups.parquet: footer: 1000000 row groups, over the limit of 32767"},
		{"parquet GZIP page declaring 1 GiB", []string{"-model", "gpt", "-data", gzip1GiB, "-tokenizer", chatML}, 2, "gzip-1gib.parquet: row group 0, column 0 (text): page 0 (at byte 4): declares 1073741824 bytes decompressed, over the limit of 64 MiB on a page"},
		{"parquet ZSTD frame of 1 GiB", []string{"-model", "gpt", "-data", zstd1GiB, "-tokenizer", chatML}, 2, "zstd-1gib.parquet: row group 0, column 0 (text): page 0 (at byte 4): ZSTD data may decompress to 1073741824 bytes, over the limit of 64 MiB on a page"},
		{"parquet LZ4_RAW that never decodes", []string{"-model", "gpt", "-data", lz4Bad, "-tokenizer", chatML}, 2, "lz4-corrupt.parquet: row group 0, column 0 (text): page 0 (at byte 4): LZ4_RAW data: a match at offset 0"},
		{"parquet row over -max-record-bytes", []string{"-model", "gpt", "-data", bigRow, "-tokenizer", chatML, "-max-record-bytes", "1KiB"}, 2, "big-row.parquet: row 2: record over the limit of 1 KiB on one record (-max-record-bytes)"},
		{"-generate -chat looping 10^12 times", append(append([]string{}, gptFlags...), "-tokenizer", chatLoop, "-generate", "2", "-prompt", "hi", "-chat"), 2, "chat-loop/tokenizer_config.json: chat_template: line 1: range() of 1000000000000 items"},
		// Messages.
		{"negative n_head named by key", []string{"-init", negative}, 2, "config.json: n_head -1"},
		{"-zero 3 without -dist", []string{"-zero", "3", "-plan"}, 2, "-zero 3: needs -dist"},
		{"-generate 2^63-1", append(append([]string{}, gptFlags...), "-generate", "9223372036854775807", "-prompt", "1"), 2, "-generate 9223372036854775807"},
		{"-fit-host past its bound", []string{"-device", "cuda", "-plan", "-fit", "16GiB", "-fit-host", "2000TiB"}, 2, "-fit-host 2199023255552000: want a size up to 1024TiB"},
		{"-fit-host on the CPU", []string{"-plan", "-fit", "16GiB", "-fit-host", "8GiB"}, 2, "-fit-host 8589934592: -device cpu's memory is the host's"},
		{"-fit-host without -fit", []string{"-device", "cuda", "-plan", "-fit-host", "8GiB"}, 2, "-fit-host 8589934592: needs -fit"},
	}
	inputs := func() map[string][32]byte {
		sums := map[string][32]byte{}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				sums[p] = sha256.Sum256(b)
			}
			return nil
		})
		return sums
	}
	before := inputs()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stderr, rss := runLimited(t, dir, append([]string{"-quiet"}, c.args...))
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and a message naming %q", code, stderr, c.code, c.want)
			}
			if rss > 1<<30 {
				t.Errorf("peak RSS %d MiB, over 1 GiB", rss>>20)
			}
		})
	}
	after := inputs()
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("%s changed", p)
		}
	}
}

// TestSIGTERMInsideAStep: a step that would run for hours (a context of a
// million tokens) ends at once on SIGTERM, with the interrupted status.
func TestSIGTERMInsideAStep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the command as a process")
	}
	cmd := exec.Command(os.Args[0], "-quiet", "-model", "gpt", "-layers", "1", "-context", "1000000", "-width", "64", "-heads", "2", "-batch", "1", "-steps", "2")
	cmd.Env = append(os.Environ(), "MEMFIT_TRAIN_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	time.Sleep(3 * time.Second) // inside the first step's attention
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		// On a loaded machine the signal may come while the model is
		// built: interrupted there, or inside the step, it ends at once.
		if !errors.As(err, &exit) || exit.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted") {
			t.Fatalf("%v, want status 130 and the interruption said; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("still running a minute after SIGTERM (a hang)")
	}
}

// runLimited runs the command (this test binary as main) in dir under a
// 4 GiB address-space limit, with a minute's deadline as a hang detector,
// and returns its status, standard error and peak RSS in bytes.
func runLimited(t *testing.T, dir string, args []string) (int, string, int64) {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	// The cap on address space is 4 GiB (a Go process reserves more
	// address space than it touches); the peak RSS is checked apart.
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -v %d; exec %s %s", 4<<20, os.Args[0], strings.Join(quoted, " ")))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MEMFIT_TRAIN_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running after a minute (a hang); stderr:\n%s", stderr.String())
	}
	rss := int64(0)
	if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = u.Maxrss << 10
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), rss
}

// gpt2Copy copies the GPT-2 fixture into dir/gpt2-copy.
func gpt2Copy(t *testing.T, dir string) string {
	d := filepath.Join(dir, "gpt2-copy")
	copyDir(t, filepath.Join("..", "..", "hf", "testdata", "gpt2-f32"), d)
	return d
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(from, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(to, e.Name()), b, 0o644)
		}
	}
}

// parquetBytes is a parquet file of no data and the given footer (its
// FileMetaData's Thrift bytes, raw).
func parquetBytes(footer []byte) []byte {
	b := append([]byte("PAR1"), footer...)
	return append(binary.LittleEndian.AppendUint32(b, uint32(len(footer))), "PAR1"...)
}

// parquetText is a parquet file of one required string column "text"
// holding rows values in one data page of the given codec, declaring
// uncompressed bytes and holding data, written as Thrift's compact
// protocol by hand.
func parquetText(codec, uncompressed, rows int, data []byte) []byte {
	var b []byte
	last := []int{0}
	uv := func(v uint64) { b = binary.AppendUvarint(b, v) }
	field := func(id, typ int) {
		if d := id - last[len(last)-1]; d > 0 && d < 16 {
			b = append(b, byte(d<<4|typ))
		} else {
			b = append(b, byte(typ))
			uv(uint64(id << 1))
		}
		last[len(last)-1] = id
	}
	i32 := func(id, v int) { field(id, 5); uv(uint64(v<<1 ^ v>>63)) }
	i64 := func(id, v int) { field(id, 6); uv(uint64(v<<1 ^ v>>63)) }
	begin := func() { last = append(last, 0) }
	end := func() { b = append(b, 0); last = last[:len(last)-1] }
	str := func(id int, s string) { field(id, 8); uv(uint64(len(s))); b = append(b, s...) }
	list := func(id, typ, n int) { field(id, 9); b = append(b, byte(n<<4|typ)) }
	// The page: a header (DATA_PAGE, PLAIN values, RLE levels), the data.
	begin()
	i32(1, 0)
	i32(2, uncompressed)
	i32(3, len(data))
	field(5, 12)
	begin()
	i32(1, rows)
	i32(2, 0)
	i32(3, 3)
	i32(4, 3)
	end()
	end()
	file := append(append([]byte("PAR1"), b...), data...)
	chunk := len(file) - 4
	// The footer: a schema of one UTF-8 BYTE_ARRAY, one row group.
	b = nil
	begin()
	i32(1, 1)
	list(2, 12, 2)
	begin()
	str(4, "schema")
	i32(5, 1)
	end()
	begin()
	i32(1, 6)
	i32(3, 0)
	str(4, "text")
	i32(6, 0)
	end()
	i64(3, rows)
	list(4, 12, 1)
	begin()
	list(1, 12, 1)
	begin()
	i64(2, 4)
	field(3, 12)
	begin()
	i32(1, 6)
	list(2, 5, 1)
	uv(0)
	list(3, 8, 1)
	uv(4)
	b = append(b, "text"...)
	i32(4, codec)
	i64(5, rows)
	i64(6, chunk)
	i64(7, chunk)
	i64(9, 4)
	end()
	end()
	i64(2, chunk)
	i64(3, rows)
	end()
	end()
	return append(file, parquetBytes(b)[4:]...)
}
