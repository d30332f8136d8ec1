package hf_test

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// loadFixture loads a testdata model.
func loadFixture(t testing.TB, name string) *models.Decoder {
	t.Helper()
	m, _, err := hf.Load(cpu.New(), filepath.Join("testdata", name), hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m.(*models.Decoder)
}

// modelType is a decoder's Hugging Face model_type.
func modelType(m *models.Decoder) string {
	if f := m.Config.Arch.Family; f != "" {
		return f
	}
	return "llama"
}

// adapted is the fixture with rank-2 adapters (α 4, dropout 0.05) on the
// layers targets choose, their B drawn as a run would have trained them.
func adapted(t testing.TB, fixture string, targets ...string) *models.Decoder {
	t.Helper()
	m := loadFixture(t, fixture)
	ad, err := lora.Apply(m, nil, lora.Config{Rank: 2, Alpha: 4, Dropout: 0.05, Targets: targets, Seed: 3,
		Alias: func(p string) (string, bool) { return hf.PEFTName(modelType(m), p+".weight") }})
	if err != nil {
		nn.Release(m)
		t.Fatal(err)
	}
	for i, p := range ad.Adapters {
		if i%2 == 1 {
			v := p.Float32s()
			for j := range v {
				v[j] = float32((j*7919+i*104729)%97-48) / 400
			}
			if err := p.SetFloat32s(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return m
}

// exportPEFT writes m's adapters in PEFT's layout (with the merged model
// beside them, as -save-peft does) into a new directory.
func exportPEFT(t *testing.T, m models.Model, fixture string) string {
	t.Helper()
	out := t.TempDir()
	if err := hf.SaveWith(m, out, hf.SaveOptions{From: filepath.Join("testdata", fixture), Adapters: true}); err != nil {
		t.Fatal(err)
	}
	return out
}

// adaptersOf lists m's adapters by layer path.
func adaptersOf(m nn.Module) map[string]*nn.LoRA {
	out := map[string]*nn.LoRA{}
	nn.Walk(m, func(x nn.Module) error {
		if l, ok := x.(*nn.Linear); ok && l.Adapter != nil {
			out[lora.Path(l)] = l.Adapter
		}
		return nil
	})
	return out
}

// sameAdapters fails unless got's adapters are want's: the same layers,
// ranks, scales and dropouts, A and B bit for bit.
func sameAdapters(t *testing.T, got, want nn.Module) {
	t.Helper()
	g, w := adaptersOf(got), adaptersOf(want)
	if len(g) != len(w) || len(w) == 0 {
		t.Fatalf("%d adapters, want %d", len(g), len(w))
	}
	for p, wa := range w {
		ga := g[p]
		if ga == nil {
			t.Errorf("no adapter on %s", p)
			continue
		}
		if ga.Rank != wa.Rank || ga.Scale != wa.Scale || ga.Dropout != wa.Dropout {
			t.Errorf("%s: rank %d, scale %v, dropout %v; want %d, %v, %v", p, ga.Rank, ga.Scale, ga.Dropout, wa.Rank, wa.Scale, wa.Dropout)
		}
		for _, m := range [][2]*tensor.Tensor{{ga.A, wa.A}, {ga.B, wa.B}} {
			if m[0].DType() != m[1].DType() || !slices.Equal(m[0].Shape(), m[1].Shape()) || !slices.Equal(bits(m[0].Float32s()), bits(m[1].Float32s())) {
				t.Errorf("%s differs from %s", m[0].Name(), m[1].Name())
			}
			if m[0].Name() != m[1].Name() {
				t.Errorf("adapter named %s, want %s", m[0].Name(), m[1].Name())
			}
		}
	}
}

var peftBatch = [][]int{{3, 1, 4, 1, 5, 9, 2, 6}, {2, 7, 1, 8, 2, 8, 1, 8}}

// Adapters written in PEFT's layout load back onto a fresh copy of the
// base as they were: the same layers, rank, scale and dropout, A and B
// bit for bit, and the same logits, for plain projections (Qwen 3, Llama)
// and fused ones (Phi-3's qkv_proj and gate_up_proj), every layer or
// some, named by suffix or in full.
func TestPEFTRoundTrip(t *testing.T) {
	for _, c := range []struct {
		fixture string
		targets []string
	}{
		{"qwen3-f32", nil},
		{"qwen3-f32", []string{"q_proj", "v_proj"}},
		{"llama-f32", []string{"model.layers.1.mlp.down_proj", "o_proj"}},
		{"phi3-f32", []string{"qkv_proj", "gate_up_proj"}},
		{"phi3-f32", []string{"model.layers.0.self_attn.qkv_proj", "down_proj"}},
		{"gemma3-bf16", []string{"k_proj", "up_proj"}},
	} {
		t.Run(c.fixture+"/"+strings.Join(c.targets, ","), func(t *testing.T) {
			want := adapted(t, c.fixture, c.targets...)
			defer nn.Release(want)
			dir := exportPEFT(t, want, c.fixture)
			got := loadFixture(t, c.fixture)
			defer nn.Release(got)
			ad, err := hf.LoadPEFT(got, dir, hf.PEFTOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ad.Rank != 2 || ad.Alpha != 4 || ad.Dropout != 0.05 || ad.Scale() != 2 || ad.RSLoRA || ad.Base != filepath.Join("testdata", c.fixture) {
				t.Errorf("config %+v", ad.PEFTConfig)
			}
			if wl := slices.Sorted(maps.Keys(adaptersOf(want))); !slices.Equal(slices.Sorted(slices.Values(ad.Layers)), wl) {
				t.Errorf("layers %v, want %v", ad.Layers, wl)
			}
			sameAdapters(t, got, want)
			gl, wl := forwardLogits(t, got, got.Tokens.Weight, peftBatch), forwardLogits(t, want, want.Tokens.Weight, peftBatch)
			if !slices.Equal(gl, wl) {
				t.Errorf("logits differ by %.3g relative", relErr(gl, wl))
			}
		})
	}
}

// peftFiles reads an export's adapter_config.json and tensors, for tests
// to change and write again (writePEFT).
func peftFiles(t *testing.T, dir string) (map[string]any, []safetensors.Source) {
	t.Helper()
	cfg := readJSON(t, filepath.Join(dir, "adapter_config.json"))
	f, err := safetensors.Open(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var srcs []safetensors.Source
	for _, n := range f.Names() {
		x, _ := f.Tensor(n)
		srcs = append(srcs, safetensors.Source{Name: n, DType: x.DType, Shape: slices.Clone(x.Shape), Data: slices.Clone(x.Data)})
	}
	return cfg, srcs
}

// writePEFT writes adapter_config.json and adapter_model.safetensors
// into a new directory.
func writePEFT(t *testing.T, cfg map[string]any, srcs []safetensors.Source) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := safetensors.Write(w, map[string]string{"format": "pt"}, srcs); err != nil {
		t.Fatal(err)
	}
	return dir
}

// recast is src's F32 values in dtype d: BF16 rounded, or F16 from the
// values rounded first to multiples of 2⁻¹⁰, which F16 holds exactly
// (they are below 2 in magnitude).
func recast(t *testing.T, src safetensors.Source, d safetensors.DType) safetensors.Source {
	t.Helper()
	v, err := safetensors.Float32s(src.DType, src.Data)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, x := range v {
		var h uint16
		if d == safetensors.BF16 {
			h = safetensors.Float32ToBF16(x)
		} else {
			h = f16(float32(math.Round(float64(x)*1024) / 1024))
		}
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	src.DType, src.Data = d, b
	return src
}

// f16 is x in half precision, for x zero or a multiple of 2⁻¹⁰ below 2
// in magnitude (a normal half with no bits to round).
func f16(x float32) uint16 {
	u := math.Float32bits(x)
	sign := uint16(u>>16) & 0x8000
	if x == 0 {
		return sign
	}
	exp := int(u>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(u&0x7fffff>>13)
}

// PEFT's other spellings load too: tensors named with older PEFT's
// adapter name (lora_A.default.weight) or without base_model.model.,
// weights in BF16 or F16 (widened exactly into F32 adapters, or rounded
// into BF16 ones), a config without task_type, and use_rslora (scale
// α/√r).
func TestPEFTVariants(t *testing.T) {
	want := adapted(t, "qwen3-f32", "q_proj", "down_proj")
	defer nn.Release(want)
	cfg, srcs := peftFiles(t, exportPEFT(t, want, "qwen3-f32"))
	rename := func(f func(string) string) []safetensors.Source {
		out := slices.Clone(srcs)
		for i := range out {
			out[i].Name = f(out[i].Name)
		}
		return out
	}
	for _, c := range []struct {
		name    string
		cfg     func(map[string]any)
		srcs    []safetensors.Source
		o       hf.PEFTOptions
		check   func(t *testing.T, got *models.Decoder, ad *hf.PEFTAdapters)
		logitsE bool // logits equal want's
	}{
		{name: "default", srcs: rename(func(n string) string {
			return strings.Replace(strings.Replace(n, ".lora_A.weight", ".lora_A.default.weight", 1), ".lora_B.weight", ".lora_B.default.weight", 1)
		}), logitsE: true},
		{name: "no-prefix", srcs: rename(func(n string) string { return strings.TrimPrefix(n, "base_model.model.") }), logitsE: true},
		{name: "no-task-type", cfg: func(c map[string]any) { delete(c, "task_type") }, srcs: srcs, logitsE: true},
		{name: "bf16", srcs: func() []safetensors.Source {
			var out []safetensors.Source
			for _, s := range srcs {
				out = append(out, recast(t, s, safetensors.BF16))
			}
			return out
		}(), check: func(t *testing.T, got *models.Decoder, ad *hf.PEFTAdapters) {
			for p, a := range adaptersOf(got) {
				w := adaptersOf(want)[p]
				for _, m := range [][2]*tensor.Tensor{{a.A, w.A}, {a.B, w.B}} {
					if m[0].DType() != tensor.F32 {
						t.Errorf("%s is %v, want F32", m[0].Name(), m[0].DType())
					}
					wv := m[1].Float32s()
					for i, x := range m[0].Float32s() {
						if x != math.Float32frombits(uint32(safetensors.Float32ToBF16(wv[i]))<<16) {
							t.Fatalf("%s[%d] %v, want %v rounded to bf16", m[0].Name(), i, x, wv[i])
						}
					}
				}
			}
		}},
		{name: "f16-into-bf16", srcs: func() []safetensors.Source {
			var out []safetensors.Source
			for _, s := range srcs {
				out = append(out, recast(t, s, safetensors.F16))
			}
			return out
		}(), o: hf.PEFTOptions{DType: tensor.BF16}, check: func(t *testing.T, got *models.Decoder, ad *hf.PEFTAdapters) {
			for _, a := range adaptersOf(got) {
				if a.A.DType() != tensor.BF16 || a.B.DType() != tensor.BF16 {
					t.Errorf("adapters %v and %v, want BF16", a.A.DType(), a.B.DType())
				}
			}
		}},
		{name: "rslora", cfg: func(c map[string]any) { c["use_rslora"], c["r"] = true, 2 }, srcs: srcs,
			check: func(t *testing.T, got *models.Decoder, ad *hf.PEFTAdapters) {
				want := 4 / math.Sqrt(2)
				if ad.Scale() != want || !ad.RSLoRA {
					t.Errorf("scale %v, want 4/√2", ad.Scale())
				}
				for p, a := range adaptersOf(got) {
					if a.Scale != want {
						t.Errorf("%s's scale %v", p, a.Scale)
					}
				}
			}},
		{name: "dropout-option", srcs: srcs, o: hf.PEFTOptions{Dropout: new(0.25)}, check: func(t *testing.T, got *models.Decoder, ad *hf.PEFTAdapters) {
			for p, a := range adaptersOf(got) {
				if a.Dropout != 0.25 {
					t.Errorf("%s's dropout %v, want the option's 0.25", p, a.Dropout)
				}
			}
		}},
		{name: "regexp-targets", cfg: func(c map[string]any) { c["target_modules"] = `.*\.(q_proj|down_proj)` }, srcs: srcs, logitsE: true},
		{name: "all-linear-excluding", cfg: func(c map[string]any) {
			c["target_modules"], c["exclude_modules"] = "all-linear", []string{"k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}
		}, srcs: srcs, logitsE: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writePEFT(t, edited(cfg, c.cfg), c.srcs)
			got := loadFixture(t, "qwen3-f32")
			defer nn.Release(got)
			ad, err := hf.LoadPEFT(got, dir, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(ad.Layers) != 4 {
				t.Errorf("layers %v, want q_proj and down_proj of 2 blocks", ad.Layers)
			}
			if c.logitsE {
				sameAdapters(t, got, want)
				if gl, wl := forwardLogits(t, got, got.Tokens.Weight, peftBatch), forwardLogits(t, want, want.Tokens.Weight, peftBatch); !slices.Equal(gl, wl) {
					t.Errorf("logits differ by %.3g relative", relErr(gl, wl))
				}
			}
			if c.check != nil {
				c.check(t, got, ad)
			}
		})
	}
}

// Files that are not LoRA adapters memfit computes as PEFT does, or that
// do not fit the model, are refused naming the file and the key or
// tensor, before any adapter is attached: the model is left as it was.
func TestLoadPEFTRefuses(t *testing.T) {
	base := adapted(t, "qwen3-f32", "q_proj", "v_proj")
	defer nn.Release(base)
	good := exportPEFT(t, base, "qwen3-f32")
	cfg, srcs := peftFiles(t, good)
	const qA, qB = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
	without := func(name string) []safetensors.Source {
		return slices.DeleteFunc(slices.Clone(srcs), func(s safetensors.Source) bool { return s.Name == name })
	}
	with := func(add ...safetensors.Source) []safetensors.Source { return append(slices.Clone(srcs), add...) }
	replaced := func(name string, f func(*safetensors.Source)) []safetensors.Source {
		out := slices.Clone(srcs)
		for i := range out {
			if out[i].Name == name {
				out[i].Data = slices.Clone(out[i].Data)
				f(&out[i])
			}
		}
		return out
	}
	f32s := func(n int, v float32) []byte {
		var b []byte
		for range n {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	set := func(k string, v any) func(map[string]any) { return func(c map[string]any) { c[k] = v } }
	for _, c := range []struct {
		name string
		cfg  func(map[string]any)
		srcs []safetensors.Source
		want []string
	}{
		{"peft_type", set("peft_type", "PREFIX_TUNING"), srcs, []string{"adapter_config.json", "peft_type \"PREFIX_TUNING\"", "LoRA"}},
		{"no peft_type", func(c map[string]any) { delete(c, "peft_type") }, srcs, []string{"adapter_config.json", "no peft_type"}},
		{"task_type", set("task_type", "SEQ_CLS"), srcs, []string{"task_type \"SEQ_CLS\"", "CAUSAL_LM"}},
		{"use_dora", set("use_dora", true), srcs, []string{"use_dora true", "DoRA"}},
		{"fan_in_fan_out", set("fan_in_fan_out", true), srcs, []string{"fan_in_fan_out true", "Conv1D"}},
		{"bias", set("bias", "lora_only"), srcs, []string{"bias \"lora_only\"", "biases"}},
		{"modules_to_save", set("modules_to_save", []string{"lm_head"}), srcs, []string{"modules_to_save [\"lm_head\"]"}},
		{"layers_to_transform", set("layers_to_transform", []int{0}), srcs, []string{"layers_to_transform [0]"}},
		{"layers_to_transform int", set("layers_to_transform", 1), srcs, []string{"layers_to_transform 1"}},
		{"layers_pattern", set("layers_pattern", "layers"), srcs, []string{"layers_pattern \"layers\""}},
		{"rank_pattern", set("rank_pattern", map[string]int{"q_proj": 4}), srcs, []string{"rank_pattern {\"q_proj\":4}", "per-layer ranks"}},
		{"alpha_pattern", set("alpha_pattern", map[string]int{"q_proj": 4}), srcs, []string{"alpha_pattern", "per-layer lora_alpha"}},
		{"lora_bias", set("lora_bias", true), srcs, []string{"lora_bias true"}},
		{"pissa", set("init_lora_weights", "pissa_niter_4"), srcs, []string{"init_lora_weights \"pissa_niter_4\"", "path_initial_model_for_weight_conversion"}},
		{"r 0", set("r", 0), srcs, []string{"adapter_config.json: r 0", "whole number from 1"}},
		{"r negative", set("r", -2), srcs, []string{"r -2"}},
		{"r fraction", set("r", 2.5), srcs, []string{"r 2.5"}},
		{"r huge", set("r", 1e300), srcs, []string{"r 1e+300"}},
		{"r string", set("r", "2"), srcs, []string{"r \"2\"", "want a number"}},
		{"lora_alpha 0", set("lora_alpha", 0), srcs, []string{"lora_alpha 0", "above 0"}},
		{"lora_dropout 1", set("lora_dropout", 1), srcs, []string{"lora_dropout 1", "[0, 1)"}},
		{"use_rslora string", set("use_rslora", "yes"), srcs, []string{"use_rslora \"yes\""}},
		{"targets match nothing", set("target_modules", []string{"c_attn"}), srcs, []string{"target_modules [\"c_attn\"] choose no Linear layer", "model.layers.0.self_attn.q_proj"}},
		{"targets a number", set("target_modules", 3), srcs, []string{"target_modules 3", "list of module names"}},
		{"targets a bad regexp", set("target_modules", "(?=q).*"), srcs, []string{"target_modules \"(?=q).*\"", "regular expression"}},
		{"tensor outside targets", set("target_modules", []string{"q_proj"}), srcs, []string{"adapter_model.safetensors", "v_proj.lora_A.weight", "not among", "target_modules [\"q_proj\"]"}},
		{"target without tensors", set("target_modules", []string{"q_proj", "v_proj", "k_proj"}), srcs, []string{"target_modules choose model.layers.0.self_attn.k_proj", "no lora_A or lora_B"}},
		{"rank differs", set("r", 4), srcs, []string{qA, "shape [2 24], want [4 24]"}},
		{"lora_A alone", nil, without(qB), []string{"adapter_model.safetensors", "model.layers.0.self_attn.q_proj has a lora_A but no lora_B"}},
		{"lora_B alone", nil, without(qA), []string{"q_proj has a lora_B but no lora_A"}},
		{"B shape", nil, replaced(qB, func(s *safetensors.Source) { s.Shape = []int{2, 32} }), []string{qB, "shape [2 32], want [32 2]"}},
		{"A 3-d", nil, replaced(qA, func(s *safetensors.Source) { s.Shape = []int{2, 24, 1} }), []string{qA, "shape [2 24 1]"}},
		{"NaN", nil, replaced(qB, func(s *safetensors.Source) {
			binary.LittleEndian.PutUint32(s.Data[4*17:], math.Float32bits(float32(math.NaN())))
		}), []string{qB, "element 17 is NaN"}},
		{"Inf", nil, replaced(qA, func(s *safetensors.Source) {
			binary.LittleEndian.PutUint32(s.Data[4*3:], math.Float32bits(float32(math.Inf(-1))))
		}), []string{qA, "element 3 is -Inf"}},
		{"NaN in BF16", nil, replaced(qB, func(s *safetensors.Source) {
			*s = recast(t, *s, safetensors.BF16)
			binary.LittleEndian.PutUint16(s.Data[2*5:], 0x7fc0)
		}), []string{qB, "element 5 is NaN"}},
		{"Inf in F16", nil, replaced(qA, func(s *safetensors.Source) {
			*s = recast(t, *s, safetensors.F16)
			binary.LittleEndian.PutUint16(s.Data[2*40:], 0x7c00)
		}), []string{qA, "element 40 is +Inf"}},
		{"F64", nil, replaced(qA, func(s *safetensors.Source) {
			s.DType, s.Data = safetensors.F64, make([]byte, 8*2*24)
		}), []string{qA, "dtype F64"}},
		{"not a Linear layer", nil, with(safetensors.Source{Name: "base_model.model.model.layers.0.input_layernorm.lora_A.weight", DType: safetensors.F32, Shape: []int{2, 24}, Data: f32s(48, 0)}),
			[]string{"model.layers.0.input_layernorm is not a Linear layer"}},
		{"lm_head", nil, with(safetensors.Source{Name: "base_model.model.lm_head.lora_A.weight", DType: safetensors.F32, Shape: []int{2, 24}, Data: f32s(48, 0)}),
			[]string{"lm_head.lora_A.weight", "the LM head is not a layer memfit adapts"}},
		{"no such module", nil, with(safetensors.Source{Name: "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", DType: safetensors.F32, Shape: []int{2, 24}, Data: f32s(48, 0)}),
			[]string{"has no module model.layers.7.self_attn.q_proj"}},
		{"embedding adapter", nil, with(safetensors.Source{Name: "base_model.model.model.embed_tokens.lora_embedding_A", DType: safetensors.F32, Shape: []int{2, 64}, Data: f32s(128, 0)}),
			[]string{"embed_tokens.lora_embedding_A", "an embedding's adapter"}},
		{"DoRA magnitude", nil, with(safetensors.Source{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", DType: safetensors.F32, Shape: []int{32}, Data: f32s(32, 1)}),
			[]string{"lora_magnitude_vector", "DoRA"}},
		{"another adapter name", nil, with(safetensors.Source{Name: "base_model.model.model.layers.0.self_attn.k_proj.lora_A.other.weight", DType: safetensors.F32, Shape: []int{2, 24}, Data: f32s(48, 0)}),
			[]string{"k_proj.lora_A.other.weight", "another adapter's name"}},
		{"two spellings", nil, with(func() safetensors.Source {
			s := srcs[slices.IndexFunc(srcs, func(s safetensors.Source) bool { return s.Name == qA })]
			s.Name = strings.Replace(s.Name, ".weight", ".default.weight", 1)
			return s
		}()), []string{"a second lora_A of model.layers.0.self_attn.q_proj"}},
		{"a base weight", nil, with(safetensors.Source{Name: "base_model.model.model.norm.weight", DType: safetensors.F32, Shape: []int{24}, Data: f32s(24, 1)}),
			[]string{"model.norm.weight", "not a LoRA adapter's"}},
		{"no tensors", nil, []safetensors.Source{}, []string{"no LoRA adapter tensors"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writePEFT(t, edited(cfg, c.cfg), c.srcs)
			m := loadFixture(t, "qwen3-f32")
			defer nn.Release(m)
			n := len(m.Parameters())
			_, err := hf.LoadPEFT(m, dir, hf.PEFTOptions{})
			if err == nil {
				t.Fatal("loaded")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if len(adaptersOf(m)) != 0 || len(m.Parameters()) != n {
				t.Errorf("the model has %d adapters after the error", len(adaptersOf(m)))
			}
		})
	}
}

// Missing or misplaced files are errors naming them; a GPT-2 has no
// PEFT layout here; a file's bytes are checked by package safetensors
// before anything is read (a header claiming more than the file holds).
func TestLoadPEFTFiles(t *testing.T) {
	base := adapted(t, "qwen3-f32", "q_proj")
	defer nn.Release(base)
	good := exportPEFT(t, base, "qwen3-f32")
	noConfig, noWeights, pickle := t.TempDir(), t.TempDir(), t.TempDir()
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(filepath.Join(good, "adapter_model.safetensors"), filepath.Join(noConfig, "adapter_model.safetensors"))
	copyFile(filepath.Join(good, "adapter_config.json"), filepath.Join(noWeights, "adapter_config.json"))
	copyFile(filepath.Join(good, "adapter_config.json"), filepath.Join(pickle, "adapter_config.json"))
	os.WriteFile(filepath.Join(pickle, "adapter_model.bin"), []byte("PK"), 0o644)
	truncated := t.TempDir()
	copyFile(filepath.Join(good, "adapter_config.json"), filepath.Join(truncated, "adapter_config.json"))
	b, _ := os.ReadFile(filepath.Join(good, "adapter_model.safetensors"))
	os.WriteFile(filepath.Join(truncated, "adapter_model.safetensors"), b[:len(b)-100], 0o644)
	badJSON := t.TempDir()
	copyFile(filepath.Join(good, "adapter_model.safetensors"), filepath.Join(badJSON, "adapter_model.safetensors"))
	os.WriteFile(filepath.Join(badJSON, "adapter_config.json"), []byte(`{"peft_type": "LORA",`), 0o644)
	for _, c := range []struct {
		name, dir string
		want      []string
	}{
		{"no config", noConfig, []string{filepath.Join(noConfig, "adapter_config.json") + ": no such file"}},
		{"no weights", noWeights, []string{filepath.Join(noWeights, "adapter_model.safetensors") + ": no such file"}},
		{"pickle", pickle, []string{"adapter_model.safetensors: no such file", "adapter_model.bin", "safe_serialization"}},
		{"truncated", truncated, []string{filepath.Join(truncated, "adapter_model.safetensors")}},
		{"bad JSON", badJSON, []string{filepath.Join(badJSON, "adapter_config.json")}},
		{"no directory", filepath.Join(good, "nothing"), []string{"nothing/adapter_config.json: no such file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := loadFixture(t, "qwen3-f32")
			defer nn.Release(m)
			_, err := hf.LoadPEFT(m, c.dir, hf.PEFTOptions{})
			if err == nil {
				t.Fatal("loaded")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	g, _, err := hf.Load(cpu.New(), "testdata/gpt2-f32", hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	if _, err := hf.LoadPEFT(g, good, hf.PEFTOptions{}); err == nil || !strings.Contains(err.Error(), "decoder families") {
		t.Errorf("GPT-2: %v", err)
	}
}

// Adopt takes adapters LoadPEFT attached as lora.Apply's: they train,
// the rest is frozen.
func TestPEFTAdopt(t *testing.T) {
	base := adapted(t, "phi3-f32", "qkv_proj")
	defer nn.Release(base)
	dir := exportPEFT(t, base, "phi3-f32")
	m := loadFixture(t, "phi3-f32")
	defer nn.Release(m)
	ad, err := hf.LoadPEFT(m, dir, hf.PEFTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := lora.Adopt(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Layers, ad.Layers) || !slices.Equal(got.Layers, []string{"blocks.0.attn.qkv", "blocks.1.attn.qkv"}) || len(got.Adapters) != 4 {
		t.Errorf("adopted %v, loaded %v", got.Layers, ad.Layers)
	}
	for _, p := range m.Parameters() {
		if p.RequiresGrad() != slices.Contains(got.Adapters, p) {
			t.Errorf("%s requires grad: %v", p.Name(), p.RequiresGrad())
		}
	}
}

// Any adapter_config.json beside a good adapter_model.safetensors loads
// or is an error, never a panic; what loads has a rank in bounds and the
// file's tensors attached.
func FuzzLoadPEFTConfig(f *testing.F) {
	base := adapted(f, "qwen3-f32", "q_proj", "v_proj")
	defer nn.Release(base)
	dir := f.TempDir()
	if err := hf.SaveWith(base, dir, hf.SaveOptions{Adapters: true}); err != nil {
		f.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg)
	f.Add([]byte(`{"peft_type": "LORA", "r": 2, "target_modules": ".*_proj", "use_rslora": true}`))
	f.Fuzz(func(t *testing.T, config []byte) {
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), config, 0o644); err != nil {
			t.Fatal(err)
		}
		m := loadFixture(t, "qwen3-f32")
		defer nn.Release(m)
		ad, err := hf.LoadPEFT(m, dir, hf.PEFTOptions{})
		if err != nil {
			return
		}
		if ad.Rank != 2 || len(ad.Layers) != 4 || len(adaptersOf(m)) != 4 || !(ad.Scale() > 0) || math.IsInf(ad.Scale(), 0) {
			t.Fatalf("loaded %+v onto %d layers", ad.PEFTConfig, len(adaptersOf(m)))
		}
	})
}

// edited is a copy of cfg changed by edit (when not nil).
func edited(cfg map[string]any, edit func(map[string]any)) map[string]any {
	cf := make(map[string]any, len(cfg))
	for k, v := range cfg {
		cf[k] = v
	}
	if edit != nil {
		edit(cf)
	}
	return cf
}
