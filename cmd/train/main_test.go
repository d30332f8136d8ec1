package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
	"github.com/memfit/memfit/internal/sttest"
	"github.com/memfit/memfit/train"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runCmd(t, "-h")
	if code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	goldenfile.Check(t, "help.golden", out)
	for _, f := range []string{"-model", "-layers", "-width", "-heads", "-context", "-data", "-workers", "-prefetch", "-val-split",
		"-steps", "-epochs", "-batch", "-lr", "-optim", "-wd", "-clip", "-warmup", "-schedule", "-seed",
		"-amp", "-accum", "-checkpoint", "-lm-head", "-freeze", "-unfreeze-at", "-device", "-mem-limit",
		"-dist", "-zero", "-ranks", "-eval-every", "-metrics", "-mem-report", "-summary", "-save", "-save-every", "-resume", "-quiet", "-plan", "-fit"} {
		if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
			t.Errorf("-h does not list %s", f)
		}
	}
}

func TestPlanReport(t *testing.T) {
	code, out, errs := runCmd(t, "-plan", "-model", "gpt", "-layers", "2", "-width", "64", "-heads", "4", "-context", "32", "-batch", "8")
	if code != 0 {
		t.Fatalf("-plan exited %d: %s", code, errs)
	}
	goldenfile.Check(t, "plan.golden", out)
}

// TestPlanRanks: -plan -dist mpi -ranks N plans one rank of N without
// mpirun (and without an MPI build): the sharded categories fall with
// the stage, and the report names the ranks and the model-state peak;
// Adafactor and bf16 weights are planned under ZeRO 1 and 2.
func TestPlanRanks(t *testing.T) {
	base := []string{"-plan", "-model", "gpt", "-layers", "2", "-width", "64", "-heads", "4", "-context", "32", "-batch", "8", "-dist", "mpi", "-ranks", "4"}
	var prev int64 = math.MaxInt64
	for _, zero := range []string{"0", "1", "2", "3"} {
		code, out, errs := runCmd(t, append(append([]string{}, base...), "-zero", zero)...)
		if code != 0 {
			t.Fatalf("-zero %s: -plan exited %d: %s", zero, code, errs)
		}
		if !strings.Contains(out, "; one rank of 4, zero "+zero) {
			t.Errorf("-zero %s: the plan does not say it is one rank of 4:\n%s", zero, out)
		}
		m := regexp.MustCompile(`(?m)^model state +([0-9.]+) (B|KiB|MiB)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("-zero %s: no model state row:\n%s", zero, out)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		n := int64(v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m[2]])
		if n >= prev {
			t.Errorf("-zero %s: model state %s, not below the previous stage's", zero, m[1]+" "+m[2])
		}
		prev = n
	}
	// Issue 22's formats shard under stages 1 and 2 and are planned.
	for _, args := range [][]string{
		{"-zero", "2", "-optim", "adafactor"},
		{"-zero", "1", "-weights", "bf16", "-amp", "bf16", "-optim", "adam8bit"},
	} {
		code, out, errs := runCmd(t, append(append([]string{}, base...), args...)...)
		if code != 0 || !strings.Contains(out, "; one rank of 4, zero "+args[1]) {
			t.Errorf("%s: -plan exited %d: %s\n%s", strings.Join(args, " "), code, errs, out)
		}
	}
}

// TestFitRanks: -fit SIZE -plan with -dist mpi -ranks N prints the ZeRO
// stage it chose among the flags, and plans one rank of N at that stage;
// a stage given on the command line that fits is printed as it was.
// parseFlags parses args into cfg as the command does.
func parseFlags(cfg *train.Config, args []string) error {
	fs := train.NewFlags("train", cfg)
	fs.SetOutput(io.Discard)
	return fs.Parse(args)
}

func TestFitRanks(t *testing.T) {
	base := []string{"-model", "gpt", "-layers", "4", "-width", "128", "-heads", "4", "-context", "16", "-batch", "4", "-dropout", "0", "-dist", "mpi", "-ranks", "4"}
	// A budget of stage 2's plan with the flags as given: unsharded and
	// stage 1 need more, whatever the accumulation or checkpointing.
	cfg := train.Default()
	if err := parseFlags(&cfg, append(append([]string{}, base...), "-zero", "2")); err != nil {
		t.Fatal(err)
	}
	p, err := train.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	budget := strconv.FormatInt(p.Total, 10)
	for _, c := range []struct {
		name       string
		args       []string
		flag, plan string // in the printed choice, in the plan's first line
	}{
		{"raised", []string{"-fit", budget, "-plan"}, "-accum 1 -checkpoint off -zero 2 (", "; one rank of 4, zero 2"},
		{"as given", []string{"-fit", budget, "-plan", "-zero", "3"}, "-accum 1 -checkpoint off (", "; one rank of 4, zero 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCmd(t, append(append([]string{}, base...), c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if first, _, _ := strings.Cut(out, "\n"); !strings.Contains(first, c.flag) {
				t.Errorf("the choice %q does not say %q", first, c.flag)
			}
			if !strings.Contains(out, c.plan) {
				t.Errorf("the plan does not say %q:\n%s", c.plan, out)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt")
	os.Mkdir(corrupt, 0o755)
	os.WriteFile(filepath.Join(corrupt, "train-images-idx3-ubyte"), []byte{0, 0, 8, 3, 0, 0, 0, 9}, 0o644)
	os.WriteFile(filepath.Join(corrupt, "train-labels-idx1-ubyte"), []byte{0, 0, 8, 1, 0, 0, 0, 9}, 0o644)
	// A checkpoint of a small MLP, to resume a GPT from.
	ckpt := filepath.Join(dir, "mlp.safetensors")
	if code, _, errs := runCmd(t, "-quiet", "-steps", "2", "-eval-every", "0", "-save", ckpt); code != 0 {
		t.Fatalf("making a checkpoint: %d %s", code, errs)
	}
	damaged := damagedCheckpoints(t, dir, ckpt)
	summary := filepath.Join(dir, "summary.json")
	text := filepath.Join(dir, "corpus.txt")
	os.WriteFile(text, []byte(strings.Repeat("some text to tokenize. ", 40)), 0o644)
	notTokenizer := filepath.Join(dir, "wordpiece.json")
	os.WriteFile(notTokenizer, []byte(`{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`), 0o644)
	tok := writeTokenizer(t, dir)
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown model", []string{"-model", "rnn"}, "-model rnn: unknown model"},
		{"generate without prompt", []string{"-model", "gpt", "-generate", "5"}, "-generate 5: needs -prompt"},
		{"generate from an mlp", []string{"-generate", "5", "-prompt", "x"}, "needs a token model"},
		{"negative temperature", []string{"-model", "gpt", "-generate", "5", "-prompt", "x", "-temperature", "-1"}, "-temperature -1"},
		{"top-p above 1", []string{"-model", "gpt", "-generate", "5", "-prompt", "x", "-top-p", "2"}, "-top-p 2"},
		{"prompt not ids", []string{"-model", "gpt", "-generate", "5", "-prompt", "hello"}, `"hello" is not a token id`},
		{"accum 0", []string{"-accum", "0"}, "-accum 0"},
		{"mem-limit", []string{"-mem-limit", "12XB"}, "mem-limit"},
		{"unknown flag", []string{"-learning-rate", "1"}, "flag provided but not defined: -learning-rate"},
		{"missing data", []string{"-data", filepath.Join(dir, "nope")}, "nope"},
		{"corrupt data", []string{"-data", corrupt}, "train-images-idx3-ubyte"},
		{"missing tokenizer", []string{"-model", "gpt", "-data", text, "-tokenizer", filepath.Join(dir, "no-tokenizer")}, "-tokenizer " + filepath.Join(dir, "no-tokenizer") + ": no such file"},
		{"tokenizer of another kind", []string{"-model", "gpt", "-data", text, "-tokenizer", notTokenizer}, "-tokenizer " + notTokenizer + ": model type \"WordPiece\" is not supported"},
		{"tokenizer without data", []string{"-model", "gpt", "-tokenizer", tok}, "-tokenizer " + tok + ": needs -data"},
		{"tokenizer with images", []string{"-model", "gpt", "-data", corrupt, "-tokenizer", tok}, "-data " + corrupt + " is a directory"},
		{"tokenizer with an MLP", []string{"-model", "mlp", "-data", text, "-tokenizer", tok}, "-model mlp does not take"},
		{"resume another model", []string{"-model", "gpt", "-resume", ckpt}, "checkpoint is for"},
		{"resume a flipped bit", []string{"-resume", damaged.flipped}, damaged.flippedTensor + ": CRC-32C"},
		{"resume overlapping data_offsets", []string{"-resume", damaged.overlap}, "overlap"},
		{"resume a splice of two runs", []string{"-resume", damaged.spliced}, damaged.flippedTensor + ": CRC-32C"},
		{"resume a directory", []string{"-resume", dir}, dir + ": is a directory"},
		{"resume a FIFO", []string{"-resume", damaged.fifo}, damaged.fifo + ": is a named pipe (FIFO)"},
		{"unsupported device", []string{"-amp", "fp16", "-device", "cuda"}, "-tags cuda"},
		{"impossible budget", []string{"-fit", "1KiB"}, "nothing fits"},
		{"unknown dist engine", []string{"-dist", "nccl"}, "-dist nccl: unknown engine"},
		{"zero without dist", []string{"-zero", "1"}, "-zero 1: needs -dist"},
		{"zero stage 4", []string{"-dist", "mpi", "-zero", "4"}, "-zero 4"},
		{"ranks without dist", []string{"-plan", "-ranks", "2"}, "-ranks 2: needs -dist"},
		{"negative ranks", []string{"-plan", "-dist", "mpi", "-ranks", "-1"}, "-ranks -1"},
		{"unknown offload", []string{"-offload", "gradients"}, "-offload gradients: unknown"},
		{"negative offload prefetch", []string{"-offload", "activations", "-offload-prefetch", "-1"}, "-offload-prefetch -1"},
		{"offload optimizer stepping in backward", []string{"-offload", "optimizer", "-step-in-backward"}, "-step-in-backward"},
		{"offload optimizer with freeze", []string{"-offload", "all", "-freeze", "layers.0.*"}, "-freeze"},
		{"zero 3 with adafactor", []string{"-dist", "mpi", "-zero", "3", "-optim", "adafactor"}, "use -zero 1 or 2"},
		{"zero 3 with bf16 weights", []string{"-dist", "mpi", "-zero", "3", "-weights", "bf16"}, "-weights bf16: conflicts with -zero 3"},
		{"zero with unfreeze", []string{"-dist", "mpi", "-zero", "1", "-freeze", "layers.0.*", "-unfreeze-at", "3"}, "-unfreeze-at"},
		{"lora with freeze", []string{"-lora", "4", "-freeze", "layers.0.*"}, "-freeze layers.0.*: conflicts with -lora"},
		{"lora target matching nothing", []string{"-lora", "4", "-lora-targets", "blocks.*"}, `pattern "blocks.*" matches no Linear layer; closest: layers.`},
		{"lora alpha without lora", []string{"-lora-alpha", "16"}, "-lora-alpha 16: needs -lora"},
		{"negative lora rank", []string{"-lora", "-1"}, "-lora -1: want a rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-quiet", "-steps", "2", "-summary", summary}, c.args...)
			code, _, errs := runCmd(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, errs)
			}
			if lines := strings.Count(strings.TrimSpace(errs), "\n") + 1; lines != 1 || !strings.HasPrefix(errs, "train: ") {
				t.Errorf("stderr is not one train: line:\n%s", errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Errorf("stderr %q does not mention %q", errs, c.want)
			}
			if _, err := os.Stat(summary); err == nil {
				t.Errorf("a failed run left %s", summary)
			}
		})
	}
}

// writeTokenizer writes a small byte-level tokenizer.json (GPT-2's byte
// alphabet, a few merges, <|endoftext|>: 263 tokens) into dir.
func writeTokenizer(t *testing.T, dir string) string {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = rune(256 + len(vocab) - countPrintable(b))
		}
		vocab[string(r)] = b
	}
	merges := []string{"Ġ t", "e x", "Ġt ex", "Ġtex t", "o m", "Ġ s"}
	for _, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = len(vocab)
	}
	b, _ := json.Marshal(map[string]any{
		"added_tokens":  []any{map[string]any{"id": len(vocab), "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// countPrintable is how many of the bytes below b stand for themselves in
// GPT-2's byte alphabet.
func countPrintable(b int) int {
	n := 0
	for c := range b {
		if c >= '!' && c <= '~' || c >= 0xa1 && c <= 0xac || c >= 0xae {
			n++
		}
	}
	return n
}

// TestTokenizerTrains trains a GPT on text through -tokenizer: the model's
// vocabulary is the tokenizer's (263 rows of embedding), and the text is
// encoded once into a cached shard.
func TestTokenizerTrains(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	tok := writeTokenizer(t, dir)
	text := filepath.Join(dir, "corpus.txt")
	os.WriteFile(text, []byte(strings.Repeat("some text to tokenize, some more text. ", 60)), 0o644)
	summary := filepath.Join(dir, "s.json")
	args := []string{"-quiet", "-model", "gpt", "-layers", "1", "-width", "32", "-heads", "2", "-context", "16", "-batch", "4",
		"-steps", "2", "-eval-every", "0", "-data", text, "-tokenizer", tok}
	code, out, errs := runCmd(t, append(args, "-plan")...)
	if code != 0 {
		t.Fatalf("-plan exited %d: %s", code, errs)
	}
	// Parameters: 263x32 embedding (tied head), 16x32 positions, one block.
	if !strings.Contains(out, "parameter") {
		t.Fatalf("-plan output lacks parameters:\n%s", out)
	}
	if code, _, errs := runCmd(t, append(args, "-summary", summary)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "cache", "tokens-*.bin"))
	if len(shards) != 1 {
		t.Errorf("cache holds %v, want one token shard", shards)
	}
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Config     train.Config `json:"config"`
		Parameters int64        `json:"parameters"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Config.Data.Tokenizer != tok {
		t.Errorf("summary's config has tokenizer %q, want %q", s.Config.Data.Tokenizer, tok)
	}
}

func TestDefaultLearns(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "m.jsonl")
	summary := filepath.Join(dir, "s.json")
	code, out, errs := runCmd(t, "-quiet", "-steps", "150", "-metrics", metrics, "-summary", summary)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var first, last train.Record
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if !(last.Loss < 0.6*first.Loss) {
		t.Errorf("loss %.3f at step 1, %.3f at step %d: not falling", first.Loss, last.Loss, last.Step)
	}
	var s map[string]any
	sb, _ := os.ReadFile(summary)
	if err := json.Unmarshal(sb, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"steps", "final_loss", "eval", "samples_per_sec", "peak_bytes", "config"} {
		if _, ok := s[k]; !ok {
			t.Errorf("summary lacks %q", k)
		}
	}
	pb, _ := s["peak_bytes"].(map[string]any)
	for _, k := range []string{"total", "parameter", "gradient", "optimizer_state", "activation", "temporary", "data"} {
		if _, ok := pb[k]; !ok {
			t.Errorf("summary peak_bytes lacks %q", k)
		}
	}
	if !strings.Contains(out, "eval accuracy") {
		t.Errorf("final line lacks accuracy: %q", out)
	}
}

// TestDistWithoutMPIBuild: -dist mpi in a build without the mpi tag says
// how to rebuild (the default test binary is such a build).
func TestDistWithoutMPIBuild(t *testing.T) {
	if mpiTagged {
		t.Skip("built with -tags mpi")
	}
	code, _, errs := runCmd(t, "-quiet", "-steps", "2", "-dist", "mpi")
	if code != 2 || !strings.Contains(errs, "-tags mpi") {
		t.Errorf("exit %d, stderr %q; want 2 and how to rebuild", code, errs)
	}
}

type damaged struct {
	flipped, overlap, spliced, fifo string
	flippedTensor                   string // the tensor flipped or spliced
}

// damagedCheckpoints makes damaged copies of the checkpoint ckpt in dir:
// a bit flipped in a tensor, two tensors' byte ranges overlapping, the
// tensor's bytes from another run (another seed), and a FIFO.
func damagedCheckpoints(t *testing.T, dir, ckpt string) damaged {
	t.Helper()
	other := filepath.Join(dir, "other.safetensors")
	if code, _, errs := runCmd(t, "-quiet", "-steps", "2", "-eval-every", "0", "-seed", "2", "-save", other); code != 0 {
		t.Fatalf("making a checkpoint: %d %s", code, errs)
	}
	d := damaged{
		flipped: filepath.Join(dir, "flipped.safetensors"),
		overlap: filepath.Join(dir, "overlap.safetensors"),
		spliced: filepath.Join(dir, "spliced.safetensors"),
		fifo:    filepath.Join(dir, "fifo"),
	}
	f := sttest.Read(t, ckpt)
	names := f.Names() // by offset: names[1] follows names[0] in the data
	sort.Slice(names, func(i, j int) bool { return f.Entry(t, names[i]).Offsets[0] < f.Entry(t, names[j]).Offsets[0] })
	d.flippedTensor = slices.Min(names) // Resume checks tensors in name order

	b := f.Bytes(t, d.flippedTensor)
	b[0] ^= 1
	f.Write(t, d.flipped)
	b[0] ^= 1

	copy(b, sttest.Read(t, other).Bytes(t, d.flippedTensor))
	f.Write(t, d.spliced)

	f = sttest.Read(t, ckpt)
	e := f.Entry(t, names[1])
	e.Offsets[0], e.Offsets[1] = e.Offsets[0]-4, e.Offsets[1]-4
	f.SetEntry(t, names[1], e)
	f.Write(t, d.overlap)

	if err := syscall.Mkfifo(d.fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// A GPT trained on a text file continues a prompt from its checkpoint:
// greedy decoding twice gives the same text, and sampling with a seed is
// repeatable.
func TestGenerateFromCheckpoint(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	text := strings.Repeat("the cat sat on the mat. the dog sat on the log. ", 200)
	if err := os.WriteFile(corpus, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "gpt.st")
	model := []string{"-quiet", "-model", "gpt", "-layers", "2", "-width", "32", "-heads", "2", "-context", "32", "-batch", "16", "-data", corpus}
	if code, _, errs := runCmd(t, append(model, "-steps", "30", "-eval-every", "0", "-save", ckpt)...); code != 0 {
		t.Fatalf("training: %d %s", code, errs)
	}
	gen := func(extra ...string) string {
		t.Helper()
		code, out, errs := runCmd(t, append(append(model, "-resume", ckpt, "-generate", "20", "-prompt", "the cat "), extra...)...)
		if code != 0 {
			t.Fatalf("generate %v: exit %d: %s", extra, code, errs)
		}
		if !strings.HasSuffix(out, "\n") || len(out) != 21 {
			t.Errorf("generate %v printed %q: want 20 bytes and a newline", extra, out)
		}
		return out
	}
	if a, b := gen(), gen(); a != b {
		t.Errorf("greedy decoding gave %q, then %q", a, b)
	}
	// Generation reads no data: a -batch (default 256) that does not
	// divide the checkpoint's position is no error.
	if a, b := gen(), gen("-batch", "256"); a != b {
		t.Errorf("greedy decoding with another -batch gave %q, not %q", b, a)
	}
	hot := []string{"-temperature", "1.2", "-top-k", "10", "-seed", "4"}
	if a, b := gen(hot...), gen(hot...); a != b {
		t.Errorf("seeded sampling gave %q, then %q", a, b)
	}
}

// fixtureShard writes n token ids below the hf fixtures' vocabulary of 50
// as an llm.c shard in dir.
func fixtureShard(t *testing.T, dir string, n int) string {
	t.Helper()
	shard := filepath.Join(dir, "tokens.bin")
	hdr := make([]byte, 1024)
	binary.LittleEndian.PutUint32(hdr[0:], 20240520)
	binary.LittleEndian.PutUint32(hdr[4:], 1)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(n))
	toks := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(toks[2*i:], uint16((i*7)%50))
	}
	if err := os.WriteFile(shard, append(hdr, toks...), 0o644); err != nil {
		t.Fatal(err)
	}
	return shard
}

// A GPT-2 in Hugging Face's layout starts a run (-init): its shape comes
// from config.json, training continues from its weights, and the saved
// state generates.
func TestInitFromHuggingFace(t *testing.T) {
	dir := t.TempDir()
	shard := fixtureShard(t, dir, 5000)
	fixture := filepath.Join("..", "..", "hf", "testdata", "gpt2-f32")
	ckpt := filepath.Join(dir, "ft.st")
	base := []string{"-quiet", "-init", fixture, "-data", shard, "-batch", "8"}
	code, _, errs := runCmd(t, append(base, "-steps", "5", "-eval-every", "0", "-save", ckpt)...)
	if code != 0 {
		t.Fatalf("fine-tuning: exit %d: %s", code, errs)
	}
	code, out, errs := runCmd(t, append(base, "-resume", ckpt, "-generate", "5", "-prompt", "3 1 4")...)
	if code != 0 || len(strings.Fields(out)) != 5 {
		t.Fatalf("generate after -init: exit %d, printed %q: %s", code, out, errs)
	}
	// The fine-tuned weights in the original layout, loadable again.
	exported := filepath.Join(dir, "exported")
	code, _, errs = runCmd(t, append(base, "-steps", "3", "-eval-every", "0", "-save-format", "hf", "-save", exported)...)
	if code != 0 {
		t.Fatalf("-save-format hf: exit %d: %s", code, errs)
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(exported, f)); err != nil {
			t.Errorf("-save-format hf wrote no %s: %v", f, err)
		}
	}
	code, _, errs = runCmd(t, "-quiet", "-init", exported, "-data", shard, "-batch", "8", "-steps", "1", "-eval-every", "0")
	if code != 0 {
		t.Errorf("-init from the export: exit %d: %s", code, errs)
	}

	// LoRA: the checkpoint holds the adapters (a fraction of the model),
	// resumes onto the same -init for generation, and exports merged.
	lora := append(base, "-lora", "4", "-lora-alpha", "8", "-lora-targets", "*.attn.*,*.mlp.fc", "-lr", "0.01")
	adapters := filepath.Join(dir, "adapters.st")
	if code, _, errs := runCmd(t, append(lora, "-steps", "4", "-eval-every", "0", "-save", adapters)...); code != 0 {
		t.Fatalf("LoRA fine-tuning: exit %d: %s", code, errs)
	}
	full, errA := os.Stat(ckpt)
	small, errB := os.Stat(adapters)
	if errA != nil || errB != nil || small.Size()*4 > full.Size() {
		t.Errorf("adapter checkpoint %v bytes, whole checkpoint %v (%v, %v)", small.Size(), full.Size(), errA, errB)
	}
	if code, out, errs := runCmd(t, append(lora, "-resume", adapters, "-generate", "5", "-prompt", "3 1 4")...); code != 0 || len(strings.Fields(out)) != 5 {
		t.Fatalf("generate with adapters: exit %d, printed %q: %s", code, out, errs)
	}
	merged := filepath.Join(dir, "merged")
	if code, _, errs := runCmd(t, append(lora, "-resume", adapters, "-steps", "4", "-save-format", "hf", "-save", merged)...); code != 0 || !strings.Contains(errs, "exported "+adapters+" at step 4") {
		t.Fatalf("LoRA export without training: exit %d: %s", code, errs)
	}
	if code, _, errs := runCmd(t, "-quiet", "-init", merged, "-data", shard, "-batch", "8", "-steps", "1", "-eval-every", "0"); code != 0 {
		t.Errorf("-init from the merged export: exit %d: %s", code, errs)
	}
	if code, _, errs := runCmd(t, append(base, "-resume", adapters, "-steps", "5")...); code != 2 || !strings.Contains(errs, "holds LoRA adapters (rank 4)") {
		t.Errorf("resuming adapters without -lora: exit %d, %q", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-init", filepath.Join(dir, "nope")}, "-init"},
		{[]string{"-init", fixture, "-model", "cnn"}, "-model cnn"},
		{[]string{"-save-format", "hf", "-save", filepath.Join(dir, "x")}, "-save-format hf"},
		{[]string{"-init", fixture, "-data", shard, "-save-format", "hf", "-save", shard}, "want a directory"},
		{[]string{"-init", fixture, "-data", filepath.Join(dir, "tokens.bin") + ".txt"}, "tokens.bin.txt"},
	} {
		code, _, errs := runCmd(t, append([]string{"-quiet", "-steps", "1"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %s", c.args, code, errs, c.want)
		}
	}
}

// A Llama in Hugging Face's layout starts a run (-init): -model llama and
// its shape (grouped-query attention, untied head) come from config.json;
// training continues from its weights, the saved state generates, the
// fine-tuned weights export in the Llama layout (-save-format hf) and
// start a run again.
func TestInitFromHuggingFaceLlama(t *testing.T) {
	dir := t.TempDir()
	shard := fixtureShard(t, dir, 3000)
	fixture := filepath.Join("..", "..", "hf", "testdata", "llama-f32")
	ckpt := filepath.Join(dir, "ft.st")
	base := []string{"-quiet", "-init", fixture, "-data", shard, "-batch", "4", "-context", "16"}
	code, _, errs := runCmd(t, append(base, "-steps", "3", "-eval-every", "0", "-save", ckpt, "-summary", filepath.Join(dir, "summary.json"))...)
	if code != 0 {
		t.Fatalf("fine-tuning: exit %d: %s", code, errs)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name": "llama"`, `"kv_heads": 2`, `"hidden": 40`, `"context": 16`} {
		if !strings.Contains(string(sum), want) {
			t.Errorf("summary does not say %s", want)
		}
	}
	code, out, errs := runCmd(t, append(base, "-resume", ckpt, "-generate", "5", "-prompt", "3 1 4")...)
	if code != 0 || len(strings.Fields(out)) != 5 {
		t.Fatalf("generate after -init: exit %d, printed %q: %s", code, out, errs)
	}
	// Greedy generation straight from the imported weights: PyTorch's
	// tokens (hf/testdata's reference).
	code, out, errs = runCmd(t, "-quiet", "-init", fixture, "-data", shard, "-batch", "4", "-generate", "20", "-prompt", "3 1 4 1 5")
	if code != 0 {
		t.Fatalf("generate from -init: exit %d: %s", code, errs)
	}
	var ref struct{ Greedy []int }
	b, err := os.ReadFile(filepath.Join(fixture, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if want := strings.Trim(fmt.Sprint(ref.Greedy), "[]"); strings.TrimSpace(out) != want {
		t.Errorf("-generate 20 from the Llama fixture printed %q, PyTorch %q", strings.TrimSpace(out), want)
	}
	exported := filepath.Join(dir, "exported")
	code, _, errs = runCmd(t, append(base, "-steps", "2", "-eval-every", "0", "-save-format", "hf", "-save", exported)...)
	if code != 0 {
		t.Fatalf("-save-format hf: exit %d: %s", code, errs)
	}
	cfg, err := os.ReadFile(filepath.Join(exported, "config.json"))
	if err != nil || !strings.Contains(string(cfg), "LlamaForCausalLM") {
		t.Errorf("-save-format hf wrote config.json %s (%v), want a LlamaForCausalLM", cfg, err)
	}
	code, _, errs = runCmd(t, "-quiet", "-init", exported, "-data", shard, "-batch", "4", "-context", "16", "-steps", "1", "-eval-every", "0")
	if code != 0 {
		t.Errorf("-init from the export: exit %d: %s", code, errs)
	}
	// LoRA on the Llama's projections (q, k, v, o, gate, up, down), with
	// bf16 autocast: adapters save, resume and export merged.
	lora := append(base, "-lora", "2", "-amp", "bf16", "-eval-every", "0")
	adapters, merged := filepath.Join(dir, "adapters.st"), filepath.Join(dir, "merged")
	if code, _, errs := runCmd(t, append(lora, "-steps", "2", "-save", adapters)...); code != 0 {
		t.Fatalf("LoRA on the Llama: exit %d: %s", code, errs)
	}
	if code, _, errs := runCmd(t, append(lora, "-resume", adapters, "-steps", "3", "-save-format", "hf", "-save", merged)...); code != 0 {
		t.Fatalf("LoRA on the Llama, resumed and exported: exit %d: %s", code, errs)
	}
	if code, _, errs := runCmd(t, "-quiet", "-init", merged, "-data", shard, "-batch", "4", "-context", "16", "-steps", "1", "-eval-every", "0"); code != 0 {
		t.Errorf("-init from the merged Llama: exit %d: %s", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-init", fixture, "-model", "gpt"}, "-model gpt"},
		{[]string{"-init", fixture, "-model", "cnn"}, "-model cnn"},
	} {
		code, _, errs := runCmd(t, append([]string{"-quiet", "-steps", "1"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %s", c.args, code, errs, c.want)
		}
	}
}

// -model llama trains from scratch with the shape flags, grouped-query
// attention included, and a bad -kv-heads is refused.
func TestModelLlama(t *testing.T) {
	base := []string{"-quiet", "-model", "llama", "-layers", "1", "-width", "16", "-heads", "4", "-context", "8", "-batch", "4", "-steps", "2", "-eval-every", "0"}
	ckpt := filepath.Join(t.TempDir(), "llama.st")
	if code, _, errs := runCmd(t, append(base, "-kv-heads", "2", "-hidden", "24", "-save", ckpt)...); code != 0 {
		t.Fatalf("-model llama: exit %d: %s", code, errs)
	}
	code, out, errs := runCmd(t, append(base, "-kv-heads", "2", "-hidden", "24", "-resume", ckpt, "-generate", "4", "-prompt", "1 2")...)
	if code != 0 || len(strings.Fields(out)) != 4 {
		t.Errorf("-resume -generate 4: exit %d, printed %q: %s", code, out, errs)
	}
	if code, _, errs := runCmd(t, append(base, "-kv-heads", "4", "-hidden", "24", "-resume", ckpt)...); code != 2 || !strings.Contains(errs, "kv_heads") {
		t.Errorf("resuming with other -kv-heads: exit %d, %q; want exit 2 naming the architecture", code, errs)
	}
	if code, _, errs := runCmd(t, append(base, "-kv-heads", "3")...); code != 2 || !strings.Contains(errs, "-kv-heads 3") {
		t.Errorf("-kv-heads 3 of 4 heads: exit %d, %q; want exit 2 naming -kv-heads", code, errs)
	}
}

// A text file through GPT-2's tokenizer (when its vocabulary was fetched:
// scripts/fetch-tokenizers.sh): the model's vocabulary follows the
// tokenizer, the tokens are cached, and generation prints text.
func TestTokenizerData(t *testing.T) {
	vocab := os.Getenv("MEMFIT_TOKENIZERS")
	if vocab == "" {
		home, _ := os.UserHomeDir()
		vocab = filepath.Join(home, ".cache", "memfit", "tokenizers")
	}
	vocab = filepath.Join(vocab, "gpt2")
	if _, err := os.Stat(filepath.Join(vocab, "encoder.json")); err != nil {
		t.Skipf("no GPT-2 vocabulary in %s: run scripts/fetch-tokenizers.sh", vocab)
	}
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 300)), 0o644)
	ckpt := filepath.Join(dir, "tok.st")
	base := []string{"-quiet", "-model", "gpt", "-layers", "1", "-width", "16", "-heads", "2", "-context", "16", "-batch", "4", "-data", corpus, "-tokenizer", vocab}
	if code, _, errs := runCmd(t, append(base, "-steps", "2", "-eval-every", "0", "-save", ckpt)...); code != 0 {
		t.Fatalf("training: exit %d: %s", code, errs)
	}
	code, out, errs := runCmd(t, append(base, "-resume", ckpt, "-generate", "4", "-prompt", "The quick")...)
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("generate: exit %d, %q: %s", code, out, errs)
	}
	if code, _, errs := runCmd(t, append(base[:len(base)-1], filepath.Join(dir, "none"), "-steps", "1")...); code != 2 || !strings.Contains(errs, "-tokenizer") {
		t.Errorf("a missing tokenizer: exit %d, %q", code, errs)
	}
}

// TestNoHeldOutData: without held-out data the final line says there was
// no evaluation instead of an eval loss of 0, and the summary's eval
// counts no examples.
func TestNoHeldOutData(t *testing.T) {
	summary := filepath.Join(t.TempDir(), "s.json")
	code, out, errs := runCmd(t, "-steps", "2", "-val-split", "0", "-eval-every", "1", "-quiet", "-summary", summary)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Contains(out, "eval loss") || !strings.Contains(out, "no evaluation (no held-out data)") {
		t.Errorf("output:\n%s", out)
	}
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(b)), ""), `"examples":0`) {
		t.Errorf("summary: %s", b)
	}
}

// TestPlanSummary: -plan -summary writes the plan's peaks to the byte
// under the keys a run's summary gives its measured ones, and they are
// equal for the same flags (with and without -fit choosing them).
func TestPlanSummary(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"-quiet", "-model", "gpt", "-layers", "2", "-width", "64", "-heads", "4", "-context", "32", "-batch", "8", "-steps", "3", "-eval-every", "0"}
	peaks := func(args ...string) train.PeakBytes {
		t.Helper()
		summary := filepath.Join(dir, "s.json")
		code, _, errs := runCmd(t, append(append(slices.Clip(flags), args...), "-summary", summary)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var s struct {
			PeakBytes train.PeakBytes `json:"peak_bytes"`
		}
		b, err := os.ReadFile(summary)
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s.PeakBytes
	}
	measured := peaks()
	if measured.Total == 0 {
		t.Fatal("the run's summary has no peak")
	}
	for _, args := range [][]string{{"-plan"}, {"-plan", "-fit", "1GiB"}} {
		if planned := peaks(args...); planned != measured {
			t.Errorf("%v: summary %+v, the run's %+v", args, planned, measured)
		}
	}
}
