package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
)

// familyFixtures lists hf/testdata/families.json's fixtures: tiny random
// models of each decoder family in its own layout, with float64
// references written from transformers' modeling code
// (scripts/family_fixtures.py).
func familyFixtures(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/families.json")
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Fixtures map[string]struct {
			ModelType string   `json:"model_type"`
			Features  []string `json:"features"`
		} `json:"fixtures"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range idx.Fixtures {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Every family's fixture gives the reference's logits within float32
// rounding and its 20 greedy tokens, through the KV cache as through
// recomputing the whole prefix at every token: Qwen 3's head norms and
// free head size, Qwen 2's biases and upper sliding layers, Gemma's
// (1 + w) norms, sandwich norms, scaled embeddings (in the checkpoint's
// dtype), GeGLU, query_pre_attn_scalar, local and global rotary bases
// and soft caps, Mistral's windows and head size, Phi-3's fused
// projections, partial rotary and longrope (whose frequencies change
// past the original context mid-generation), SmolLM 3's layers without
// positions.
func TestFamiliesMatchPyTorch(t *testing.T) {
	for _, name := range familyFixtures(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			ref := readReference(t, dir)
			m, note, err := hf.Load(cpu.New(), dir, hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			if note != "" {
				t.Errorf("config.json is there, yet: %s", note)
			}
			matchReference(t, m.(*models.Decoder), ref, 1e-5)
		})
	}
}

// An export writes the family's own layout: its model_type and class,
// every tensor under the name and shape the checkpoint had (fused ones
// fused), and a config that loads back into the same model, parameter
// for parameter.
func TestFamiliesRoundTrip(t *testing.T) {
	for _, name := range familyFixtures(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			m, _, err := hf.Load(cpu.New(), dir, hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			out := t.TempDir()
			if err := hf.Save(m, out); err != nil {
				t.Fatal(err)
			}
			orig, err := hf.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer orig.Close()
			back, err := hf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			if !slices.Equal(orig.Names(), back.Names()) {
				t.Errorf("exported tensors %v, the checkpoint's %v", back.Names(), orig.Names())
			}
			for _, n := range orig.Names() {
				a, _ := orig.Tensor(n)
				b, ok := back.Tensor(n)
				if !ok || !slices.Equal(a.Shape, b.Shape) {
					t.Errorf("%s: exported %v, was %v", n, b.Shape, a.Shape)
				}
			}
			var oc, bc map[string]any
			for _, f := range []struct {
				dir string
				m   *map[string]any
			}{{dir, &oc}, {out, &bc}} {
				b, err := os.ReadFile(filepath.Join(f.dir, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, f.m); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range []string{"model_type", "architectures"} {
				if !reflect.DeepEqual(oc[k], bc[k]) {
					t.Errorf("config %s %v, was %v", k, bc[k], oc[k])
				}
			}
			again, _, err := hf.Load(cpu.New(), out, hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(again)
			l, al := m.(*models.Decoder), again.(*models.Decoder)
			want := l.Config
			if safetensorsDType(t, dir) != safetensors.F32 {
				// The export is F32: Gemma's embedding scale is then
				// float32's, where the bf16 checkpoint's was bf16's.
				want.EmbedScale = al.Config.EmbedScale
			}
			if !reflect.DeepEqual(al.Config, want) {
				t.Errorf("config %+v after the round trip, was %+v", al.Config, want)
			}
			a, b := m.Parameters(), again.Parameters()
			for i := range a {
				if !slices.Equal(a[i].Float32s(), b[i].Float32s()) {
					t.Errorf("%s differs after export and import", a[i].Name())
				}
			}
		})
	}
}

// safetensorsDType is the dtype of a fixture's embedding.
func safetensorsDType(t *testing.T, dir string) safetensors.DType {
	c, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, _ := c.Tensor("model.embed_tokens.weight")
	return e.DType
}

// A family's config whose keys contradict each other, or that asks for
// math memfit does not compute, is refused naming the file and the key,
// before anything the model's size is allocated.
func TestFamilyConfigErrors(t *testing.T) {
	for _, c := range []struct {
		fixture, old, new string
		want              []string
	}{
		{"gemma3-f32", `"sliding_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",`, `"sliding_attention",`, []string{"layer_types", "one per layer"}},
		{"gemma3-f32", `"full_attention",
    "sliding_attention",
    "sliding_attention",
    "full_attention"`, `"full_attention", "sliding_attention", "sliding_attention", "chunked_attention"`, []string{"layer_types", "chunked_attention"}},
		{"gemma3-f32", `"rope_type": "linear"`, `"rope_type": "yarn"`, []string{"rope_scaling", "yarn"}},
		{"gemma3-f32", `"use_bidirectional_attention": false`, `"use_bidirectional_attention": true`, []string{"use_bidirectional_attention"}},
		{"gemma3-f32", `"hidden_activation": "gelu_pytorch_tanh"`, `"hidden_activation": "relu"`, []string{"hidden_activation", "gelu_pytorch_tanh"}},
		{"gemma3-f32", `"query_pre_attn_scalar": 12`, `"query_pre_attn_scalar": -1`, []string{"query_pre_attn_scalar"}},
		{"gemma3-f32", `"sliding_window": 4`, `"sliding_window": 0`, []string{"sliding_window"}},
		{"qwen3-f32", `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, []string{"num_key_value_heads"}},
		{"qwen3-f32", `"head_dim": 8`, `"head_dim": 9`, []string{"head_dim"}},
		{"qwen3-f32", `"head_dim": 8`, `"head_dim": 12`, []string{"q_proj", "shape"}},
		{"qwen2-f32", `"rope_scaling": null`, `"rope_scaling": null, "attn_logit_softcapping": 30.0`, []string{"attn_logit_softcapping", "qwen2"}},
		{"qwen2-f32", `"rope_scaling": null`, `"rope_scaling": null, "head_dim": 16`, []string{"head_dim"}},
		{"mistral-f32", `"sliding_window": 4`, `"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]`, []string{"layer_types"}},
		{"phi3-f32", `"partial_rotary_factor": 0.75`, `"partial_rotary_factor": 0.1`, []string{"partial_rotary_factor"}},
		{"phi3-f32", `"short_factor": [
      1.0,
      1.1,
      1.3
    ]`, `"short_factor": [1.0, 1.1]`, []string{"rope_scaling.short_factor", "2 factors"}},
		{"phi3-f32", `"lm_head_bias": false`, `"lm_head_bias": true`, []string{"lm_head_bias"}},
		{"smollm3-f32", `"no_rope_layers": [
    1,
    1,
    1,
    0
  ]`, `"no_rope_layers": [1, 1, 0]`, []string{"no_rope_layers", "one per layer"}},
		{"smollm3-f32", `"no_rope_layers": [
    1,
    1,
    1,
    0
  ]`, `"no_rope_layers": [1, 1, 2, 0]`, []string{"no_rope_layers"}},
	} {
		t.Run(c.fixture+"/"+c.want[0], func(t *testing.T) {
			dir := t.TempDir()
			cfg, err := os.ReadFile(filepath.Join("testdata", c.fixture, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cfg), c.old) {
				t.Fatalf("%s's config.json has no %s", c.fixture, c.old)
			}
			b, err := os.ReadFile(filepath.Join("testdata", c.fixture, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(string(cfg), c.old, c.new, 1)), 0o644)
			dev := cpu.New()
			m, _, err := hf.Load(dev, dir, hf.Options{})
			if err == nil {
				nn.Release(m)
				t.Fatal("loaded")
			}
			for _, w := range append(c.want, dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if n := dev.Memory().Stats().Requested.Peak; n != 0 {
				t.Errorf("allocated %d bytes before refusing", n)
			}
		})
	}
}

// Released models' config.json files alone (no weights) give their shape
// and exact parameter counts, their family's defaults filling what they
// leave out (a multimodal Gemma 3's text_config gives only its shape);
// loading one for real is refused, planning one builds it on the meta
// device without reading anything.
func TestRealConfigs(t *testing.T) {
	for _, c := range []struct {
		dir, family                          string
		params                               int64
		layers, heads, kvHeads, headDim, win int
		sliding                              int // layers that slide
	}{
		{"qwen3-8b", "qwen3", 8_190_735_360, 36, 32, 8, 128, 0, 0},
		// 11,765,788,416 with Gemma 3's 262,144 text tokens (keras-hub's
		// count), and 64 more rows of 3840 for the image tokens.
		{"gemma-3-12b-it", "gemma3", 11_765_788_416 + 64*3840, 48, 16, 8, 256, 1024, 40},
		{"llama-3.1-8b", "llama", 8_030_261_248, 32, 32, 8, 128, 0, 0},
		{"qwen2.5-7b", "qwen2", 7_615_616_512, 28, 28, 4, 128, 0, 0},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := filepath.Join("testdata", "configs", c.dir)
			ck, err := hf.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Weights() {
				t.Fatal("a config alone has weights")
			}
			cfg, note, err := hf.ReadDecoderConfig(ck)
			if err != nil {
				t.Fatal(err)
			}
			m := cfg.Model()
			if cfg.Family() != c.family || note != "" || cfg.Params() != c.params || m.Layers != c.layers || m.Heads != c.heads ||
				m.KVHeads != c.kvHeads || m.HeadSize() != c.headDim || m.Window != c.win {
				t.Errorf("%s: %d parameters, %+v (note %q)", cfg.Family(), cfg.Params(), m, note)
			}
			n := 0
			for i := range m.Layers {
				if m.Layer(i).Sliding {
					n++
				}
			}
			if n != c.sliding {
				t.Errorf("%d sliding layers, want %d", n, c.sliding)
			}
			if _, _, err := hf.Load(cpu.New(), dir, hf.Options{}); err == nil || !strings.Contains(err.Error(), "planned") {
				t.Errorf("loading a config alone: %v", err)
			}
		})
	}
}

// A fine-tuned model exports as the model it is: each family's fixture
// with LoRA adapters of random B (the update a run trains) exports its
// merged weights in the checkpoint's dtype, and the export computes the
// adapted model's logits (within bf16's rounding of the weights for a
// BF16 checkpoint). With MEMFIT_EXPORT_CHECK=DIR each export is left in
// DIR/<fixture> with memfit's logits of it (memfit.json), which
// scripts/family_fixtures.py --check DIR computes again from the files
// as transformers reads them.
func TestFamiliesExportMerged(t *testing.T) {
	keep := os.Getenv("MEMFIT_EXPORT_CHECK")
	for _, name := range familyFixtures(t) {
		t.Run(name, func(t *testing.T) {
			ref := readReference(t, filepath.Join("testdata", name))
			m, _, err := hf.Load(cpu.New(), filepath.Join("testdata", name), hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			ad, err := lora.Apply(m, nil, lora.Config{Rank: 2, Alpha: 4, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range ad.Adapters {
				if i%2 == 1 { // B, zero until trained
					v := p.Float32s()
					for j := range v {
						v[j] = float32((j*7919+i*104729)%97-48) / 400
					}
					if err := p.SetFloat32s(v); err != nil {
						t.Fatal(err)
					}
				}
			}
			l := m.(*models.Decoder)
			want := forwardLogits(t, l, l.Tokens.Weight, ref.Batch)
			out := t.TempDir()
			if keep != "" {
				out = filepath.Join(keep, name)
			}
			// In the checkpoint's dtype: a BF16 fixture exports in BF16.
			if err := hf.SaveWith(m, out, hf.SaveOptions{From: filepath.Join("testdata", name)}); err != nil {
				t.Fatal(err)
			}
			again, _, err := hf.Load(cpu.New(), out, hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(again)
			a := again.(*models.Decoder)
			tol := 1e-6
			if safetensorsDType(t, out) == safetensors.BF16 {
				tol = 2e-2 // the merged weights rounded to bf16
			}
			got := forwardLogits(t, a, a.Tokens.Weight, ref.Batch)
			if d := relErr(got, want); d > tol {
				t.Errorf("the export's logits differ from the adapted model's by %.2g relative (> %.2g)", d, tol)
			}
			if keep != "" {
				b, err := json.Marshal(map[string]any{"batch": ref.Batch, "logits": got})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, "memfit.json"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
