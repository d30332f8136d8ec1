package hf_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

type reference struct {
	Batch  [][]int   `json:"batch"`
	Logits []float64 `json:"logits"`
	Prompt []int     `json:"prompt"`
	Greedy []int     `json:"greedy"`
}

func readReference(t *testing.T, dir string) reference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func logitsOf(t *testing.T, g *models.GPT, batch [][]int) []float64 {
	t.Helper()
	var ids []int64
	for _, row := range batch {
		for _, v := range row {
			ids = append(ids, int64(v))
		}
	}
	var out []float64
	err := tensor.Step(func(s *tensor.Scope) error {
		tok, err := tensor.FromInt64(g.Tokens.Weight.Device(), ids, []int{len(batch), len(batch[0])}, memory.Data)
		if err != nil {
			return err
		}
		defer tok.Release()
		out = g.Forward(nn.Eval(s), tok).Float64s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A tiny random GPT-2 in Hugging Face's layout (scripts/hf_fixtures.py,
// plain PyTorch) gives PyTorch's logits within 1e-4 and the same 20 greedy
// tokens, from F32 and from BF16 weights.
func TestLoadGPT2MatchesPyTorch(t *testing.T) {
	for _, dir := range []string{"testdata/gpt2-f32", "testdata/gpt2-bf16"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ref := readReference(t, dir)
			g, note, err := hf.LoadGPT2(cpu.New(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(g)
			if note != "" {
				t.Errorf("config.json is there, yet: %s", note)
			}
			got := logitsOf(t, g, ref.Batch)
			var num, den float64
			for i := range got {
				num += (got[i] - ref.Logits[i]) * (got[i] - ref.Logits[i])
				den += ref.Logits[i] * ref.Logits[i]
			}
			if d := math.Sqrt(num / den); d > 1e-4 {
				t.Errorf("logits differ from PyTorch's by %.2g relative (> 1e-4)", d)
			}
			greedy, err := g.Generate(ref.Prompt, len(ref.Greedy), models.SampleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(greedy, ref.Greedy) {
				t.Errorf("greedy tokens %v, PyTorch %v", greedy, ref.Greedy)
			}
		})
	}
}

// Export then import gives the same parameters bit for bit, and the
// exported file is GPT-2's layout (names, Conv1D orientation, no head).
func TestGPT2RoundTrip(t *testing.T) {
	g, _, err := hf.LoadGPT2(cpu.New(), "testdata/gpt2-f32")
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	dir := t.TempDir()
	if err := hf.SaveGPT2(g, dir); err != nil {
		t.Fatal(err)
	}
	back, note, err := hf.LoadGPT2(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(back)
	if note != "" {
		t.Error(note)
	}
	a, b := g.Parameters(), back.Parameters()
	for i := range a {
		if !slices.Equal(a[i].Float32s(), b[i].Float32s()) {
			t.Errorf("%s differs after export and import", a[i].Name())
		}
	}
	c, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	orig, err := hf.Open("testdata/gpt2-f32")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	for _, n := range orig.Names() {
		if strings.HasSuffix(n, ".attn.bias") {
			continue
		}
		x, _ := orig.Tensor(n)
		y, ok := c.Tensor(n)
		if !ok || !slices.Equal(x.Shape, y.Shape) || string(x.Data) != string(y.Data) {
			t.Errorf("%s: exported as %v %v, original %v", n, ok, y.Shape, x.Shape)
		}
	}
}

// Without config.json the shape is inferred from the tensors, and said.
func TestLoadGPT2InfersShape(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/gpt2-f32/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	g, note, err := hf.LoadGPT2(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	if !strings.Contains(note, "inferred") || g.Config.Layers != 2 || g.Config.Dim != 16 || g.Config.Vocab != 50 || g.Config.Context != 32 {
		t.Errorf("inferred %+v, note %q", g.Config, note)
	}
}

// A checkpoint listed by model.safetensors.index.json loads as one.
func TestLoadGPT2Index(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/gpt2-f32/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model-00001-of-00001.safetensors"), b, 0o644)
	cfg, _ := os.ReadFile("testdata/gpt2-f32/config.json")
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	orig, err := hf.Open("testdata/gpt2-f32")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, n := range orig.Names() {
		m[n] = "model-00001-of-00001.safetensors"
	}
	orig.Close()
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]int{"total_size": len(b)}, "weight_map": m})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
	g, _, err := hf.LoadGPT2(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	nn.Release(g)
}

// Malformed checkpoints are errors naming the file and the tensor.
func TestLoadGPT2Errors(t *testing.T) {
	src, err := os.ReadFile("testdata/gpt2-f32/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/gpt2-f32/config.json")
	if err != nil {
		t.Fatal(err)
	}
	const model = "testdata/gpt2-f32/model.safetensors"
	for _, c := range []struct {
		name   string
		model  []byte
		config string
		want   []string
	}{
		{"truncated header", src[:20], string(cfg), []string{"model.safetensors", "header"}},
		{"missing tensor", edit(t, model, []string{"transformer.h.1.mlp.c_fc.weight"}), string(cfg), []string{"h.1.mlp.c_fc.weight", "blocks.1.mlp.fc.weight"}},
		{"shape against config", src, strings.Replace(string(cfg), `"n_embd": 16`, `"n_embd": 32`, 1), []string{"model.safetensors", "wte.weight", "shape"}},
		{"unknown architecture", src, strings.Replace(string(cfg), `"gpt2"`, `"llama"`, 1), []string{"config.json", "llama"}},
		{"byte range past the data", damage(t, model, map[string]string{
			"transformer.wte.weight": `{"dtype":"F32","shape":[50,16],"data_offsets":[999999,1002199]}`,
		}), string(cfg), []string{"model.safetensors", "transformer.wte.weight"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "model.safetensors"), c.model, 0o644)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644)
			g, _, err := hf.LoadGPT2(cpu.New(), dir)
			if err == nil {
				nn.Release(g)
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
