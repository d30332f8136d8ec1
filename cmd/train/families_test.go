package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tokenizer"
)

// tokenizerDir is a real tokenizer's directory fetched by
// scripts/fetch-tokenizers.sh, or "" (the test skips, saying how).
func tokenizerDir(t *testing.T, name string) string {
	t.Helper()
	root := os.Getenv("MEMFIT_TOKENIZERS")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "memfit", "tokenizers")
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skipf("no %s tokenizer in %s: run scripts/fetch-tokenizers.sh", name, root)
	}
	return dir
}

// tinyFamilyModel writes a tiny random model of a family with a real
// tokenizer's vocabulary into a new directory, as a release ships it:
// config.json, BF16 weights, tokenizer.json and tokenizer_config.json
// with its chat template.
func tinyFamilyModel(t *testing.T, family, tok string, cfg models.DecoderConfig) string {
	t.Helper()
	tk, err := tokenizer.Open(tok)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := models.FamilyByHF(family)
	if !ok {
		t.Fatalf("no family %s", family)
	}
	cfg.Arch, cfg.TiedHead, cfg.Vocab = f.Arch, f.TiedHead, (tk.VocabSize()+63)/64*64
	m, err := models.NewDecoder(cpu.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	dir := filepath.Join(t.TempDir(), family)
	if err := hf.SaveWith(m, dir, hf.SaveOptions{DType: safetensors.BF16, Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Fine-tuning the families people fine-tune, end to end, as a user would:
// tiny Qwen 3, Qwen 2.5 and Gemma 3 models in their releases' layout
// (random BF16 weights, the real tokenizers), chat records with digits,
// runs of spaces, new lines and a decomposed accent rendered through each
// model's own template and trained on their answers with LoRA over an
// nf4 base, exported with -save-format hf and -save-peft, and the export
// used again: it loads with -init (its tokenizer and template beside it),
// generates, and plans from its config.json alone.
func TestFineTuneFamiliesEndToEnd(t *testing.T) {
	records := []string{
		`{"messages": [{"role": "user", "content": "What is 12345 + 678?"}, {"role": "assistant", "content": "12345 + 678 = 13023."}]}`,
		`{"messages": [{"role": "system", "content": "You answer   briefly."}, {"role": "user", "content": "Spell café\nand cafe\u0301."}, {"role": "assistant", "content": "c a f é\n\nc a f e\u0301"}, {"role": "user", "content": "Thanks!"}, {"role": "assistant", "content": "You're welcome."}]}`,
		`{"messages": [{"role": "user", "content": "Count:\t1  2   3"}, {"role": "assistant", "content": "4    5 6"}]}`,
	}
	for _, c := range []struct {
		family, tok string
		cfg         models.DecoderConfig
	}{
		{"qwen3", "qwen3", models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 32, HeadDim: 16, Hidden: 64, Context: 4096, RopeTheta: 1e6, NormEps: 1e-6}},
		{"qwen2", "qwen2_5", models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 32, Hidden: 64, Context: 4096, RopeTheta: 1e6, NormEps: 1e-6}},
		{"gemma3_text", "gemma3", models.DecoderConfig{Layers: 3, Heads: 4, KVHeads: 2, Dim: 32, HeadDim: 16, Hidden: 64, Context: 4096, RopeTheta: 1e6,
			NormEps: 1e-6, LocalRopeTheta: 10000, Window: 16, LayerKinds: []models.LayerKind{{Sliding: true}, {Sliding: true}, {}}}},
	} {
		t.Run(c.family, func(t *testing.T) {
			tok := tokenizerDir(t, c.tok)
			dir := tinyFamilyModel(t, c.family, tok, c.cfg)
			data := filepath.Join(t.TempDir(), "chat.jsonl")
			if err := os.WriteFile(data, []byte(strings.Join(records, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "tuned")
			args := []string{"-init", dir, "-data", data, "-context", "256", "-batch", "1", "-steps", "3", "-lora", "4", "-base", "nf4", "-amp", "bf16",
				"-checkpoint", "every", "-pack", "-quiet", "-save-format", "hf", "-save-peft", "-save", out}
			code, stdout, stderr := runCmd(t, args...)
			if code != 0 {
				t.Fatalf("train exited %d:\n%s\n%s", code, stdout, stderr)
			}
			for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "adapter_model.safetensors", "adapter_config.json"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("the export has no %s", f)
				}
			}
			var cfg map[string]any
			if b, err := os.ReadFile(filepath.Join(out, "config.json")); err != nil || json.Unmarshal(b, &cfg) != nil || cfg["model_type"] != c.family {
				t.Errorf("the export's config.json: %v (%v)", cfg["model_type"], err)
			}
			// The export is a model memfit takes up again.
			code, stdout, stderr = runCmd(t, "-init", out, "-generate", "4", "-prompt", "Hello  12345", "-quiet")
			if code != 0 {
				t.Fatalf("-generate from the export exited %d:\n%s\n%s", code, stdout, stderr)
			}
			code, stdout, stderr = runCmd(t, append(slices.Clone(args[:len(args)-5]), "-init", out, "-steps", "1")...)
			if code != 0 {
				t.Fatalf("training the export again exited %d:\n%s\n%s", code, stdout, stderr)
			}
			// Its config.json alone plans it.
			shape := filepath.Join(t.TempDir(), "shape")
			os.MkdirAll(shape, 0o755)
			b, _ := os.ReadFile(filepath.Join(out, "config.json"))
			os.WriteFile(filepath.Join(shape, "config.json"), b, 0o644)
			code, stdout, stderr = runCmd(t, "-init", shape, "-plan", "-fit", "16GiB", "-device", "cuda", "-lora", "8", "-base", "nf4", "-amp", "bf16", "-context", "4096")
			if code != 0 || !strings.Contains(stdout, "fit 16.00 GiB") {
				t.Fatalf("-plan -fit from config.json alone exited %d:\n%s\n%s", code, stdout, stderr)
			}
		})
	}
}
