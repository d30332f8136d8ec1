package hf_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// quantizeAll names dt for every Linear weight but the LM head.
func quantizeAll(dt device.DType) func(string) device.DType {
	return func(name string) device.DType {
		if name == "head.weight" {
			return device.Invalid
		}
		return dt
	}
}

// load imports path on dev with o, failing the test on an error.
func load(t *testing.T, dev device.Device, path string, o hf.Options) models.Model {
	t.Helper()
	g, _, err := hf.Load(dev, path, o)
	if err != nil {
		t.Fatal(err)
	}
	m := g.(models.Model)
	t.Cleanup(func() { nn.Release(m) })
	return m
}

// TestLoadBitsandbytesNF4: hf/testdata/llama-nf4, qwen3-nf4 and phi3-nf4
// (scripts/bnb_fixture.py: llama-f32, qwen3-f32 and phi3-f32 saved in
// bitsandbytes' 4-bit layout by the reference definition, layer 0
// double-quantized, layer 1 not; Phi-3's fused projections quantized
// whole) load into NF4 weights holding exactly what memfit's own
// quantization of the F32 fixture holds, bit for bit; into F32 weights
// as their dequantized values; into Int8 through those values.
// Embeddings, norms (Qwen 3's head norms too) and the head are read as
// stored. The parameter bytes are the formats' exactly.
func TestLoadBitsandbytesNF4(t *testing.T) {
	for _, c := range []struct {
		fixture string
		linear  int // Linear weights, all quantized
	}{{"llama", 14}, {"qwen3", 14}, {"phi3", 8}} {
		t.Run(c.fixture, func(t *testing.T) {
			dev := cpu.New()
			q4 := filepath.Join("testdata", c.fixture+"-nf4")
			bnb := load(t, dev, q4, hf.Options{Quantize: quantizeAll(device.NF4)})
			own := load(t, dev, filepath.Join("testdata", c.fixture+"-f32"), hf.Options{Quantize: quantizeAll(device.NF4)})
			plain := load(t, dev, q4, hf.Options{})
			int8 := load(t, dev, q4, hf.Options{Quantize: quantizeAll(device.Int8)})
			linear := nn.LinearWeights(plain)
			var nf4, want int64
			for i, p := range bnb.Parameters() {
				o, f, q := own.Parameters()[i], plain.Parameters()[i], int8.Parameters()[i]
				quantized := linear[f] && f.Name() != "head.weight"
				wantDT := device.F32
				if quantized {
					wantDT = device.NF4
					nf4++
				}
				if p.DType() != wantDT || o.DType() != wantDT || f.DType() != device.F32 {
					t.Fatalf("%s: %v (own quantization %v, plain %v), want %v", p.Name(), p.DType(), o.DType(), f.DType(), wantDT)
				}
				if quantized && (p.RequiresGrad() || q.DType() != device.Int8) {
					t.Errorf("%s: a quantized weight requires grad, or the int8 import holds %v", p.Name(), q.DType())
				}
				pv := p.Float32s()
				if !slices.Equal(bits(pv), bits(o.Float32s())) {
					t.Errorf("%s: the 4-bit checkpoint's values differ from memfit's quantization of the F32 weights", p.Name())
				}
				if !slices.Equal(bits(pv), bits(f.Float32s())) {
					t.Errorf("%s: loaded as F32, the values are not the dequantized ones", p.Name())
				}
				if quantized {
					ref, err := tensor.QuantizeFloat32(dev, device.Int8, pv, p.Shape(), memory.Temporary)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(bits(q.Float32s()), bits(ref.Float32s())) {
						t.Errorf("%s: the int8 import is not the int8 quantization of the dequantized values", p.Name())
					}
					ref.Release()
				}
				want += p.Bytes()
			}
			if nf4 != int64(c.linear) {
				t.Errorf("%d NF4 weights, want %d", nf4, c.linear)
			}
			if got := paramBytes(bnb); got != want {
				t.Errorf("the NF4 import holds %d parameter bytes, want %d", got, want)
			}
		})
	}
}

func bits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return out
}

func paramBytes(m nn.Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		n += device.Bytes(p.DType(), p.Len())
	}
	return n
}

// bigLlama writes a random Llama (F32) with layers blocks into a
// directory and returns it with its config: large enough that a
// tensor's bytes are small beside the model's.
func bigLlama(t *testing.T, layers int) (string, models.DecoderConfig) {
	t.Helper()
	c := models.DecoderConfig{Layers: layers, Heads: 4, KVHeads: 2, Dim: 128, Hidden: 320, Context: 64, Vocab: 96, Seed: 3}
	l, err := models.NewDecoder(cpu.New(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l)
	dir := t.TempDir()
	if err := hf.SaveDecoder(l, dir); err != nil {
		t.Fatal(err)
	}
	return dir, c
}

// TestLoadQuantizedPeak: an import that quantizes holds the quantized
// model plus one tensor at its peak (the F32 copy a float parameter is
// read through; a quantized weight is made from its host values), never
// the model in a float dtype: the allocator's peak is the final
// parameters plus the largest float parameter's F32 bytes, exactly.
func TestLoadQuantizedPeak(t *testing.T) {
	dir, _ := bigLlama(t, 6)
	for _, dt := range []device.DType{device.NF4, device.Int8} {
		t.Run(dt.String(), func(t *testing.T) {
			for _, model := range []device.DType{device.F32, device.BF16} {
				dev := cpu.New()
				mem := dev.Memory()
				m := load(t, dev, dir, hf.Options{DType: model, Quantize: quantizeAll(dt)})
				st := mem.Stats()
				var floatMax, f32Model, bf16Model int64
				for _, p := range m.Parameters() {
					if !p.DType().IsQuantized() {
						floatMax = max(floatMax, 4*int64(p.Len()))
					}
					f32Model += 4 * int64(p.Len())
					bf16Model += 2 * int64(p.Len())
				}
				final := st.Requested.Current
				if final != paramBytes(m) || final != st.Category(memory.Parameter).Current {
					t.Fatalf("after the import %d bytes requested, the parameters are %d", final, paramBytes(m))
				}
				if st.Requested.Peak != final+floatMax {
					t.Errorf("peak %d, want the parameters %d plus one F32 tensor %d", st.Requested.Peak, final, floatMax)
				}
				t.Logf("%v base, other parameters %v: import peak %d B; the model is %d B quantized, %d B in bf16, %d B in f32",
					dt, model, st.Requested.Peak, final, bf16Model, f32Model)
				if st.Requested.Peak >= bf16Model {
					t.Errorf("the import's peak %d reaches the bf16 model's %d", st.Requested.Peak, bf16Model)
				}
			}
		})
	}
}

// TestQuantizedExport: a model holding NF4 weights with LoRA adapters is
// written in BF16 (config.json says so), each tensor its merged F32
// value rounded to nearest even, tensor by tensor: the export's peak on
// the device is three [out, in] F32 temporaries of the largest weight
// (the dequantized weight, B·A and their sum: nn.Linear.MergedWeight),
// never a copy of the model.
// Read back, it is a plain Llama.
func TestQuantizedExport(t *testing.T) {
	src, c := bigLlama(t, 6)
	dev := cpu.New()
	m := load(t, dev, src, hf.Options{Quantize: quantizeAll(device.NF4)})
	ad, err := lora.Apply(m, nil, lora.Config{Rank: 4, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ad.Adapters {
		v := make([]float32, p.Len())
		for j := range v {
			v[j] = float32((i+j)%7-3) * 0.01
		}
		if err := p.SetFloat32s(v); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]float32{}
	var largest, model16 int64
	for _, e := range nn.Export(m) {
		v, err := e.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		want[e.Name] = v
		largest = max(largest, 4*int64(len(v)))
		model16 += 2 * int64(len(v))
	}
	mem := dev.Memory()
	mem.ResetPeak()
	before := mem.Stats().Requested.Current
	dir := t.TempDir()
	if err := hf.Save(m, dir); err != nil {
		t.Fatal(err)
	}
	st := mem.Stats()
	if extra := st.Requested.Peak - before; extra > 3*largest || st.Requested.Current != before {
		t.Errorf("the export took %d bytes beyond the model's (largest weight %d in F32; the model is %d in bf16), and left %d", extra, largest, model16, st.Requested.Current-before)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil || cfg["torch_dtype"] != "bfloat16" {
		t.Errorf("config.json torch_dtype %v (%v), want bfloat16", cfg["torch_dtype"], err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Names() {
		if x, _ := f.Tensor(n); x.DType != safetensors.BF16 {
			t.Errorf("%s is %s, want BF16", n, x.DType)
		}
	}
	f.Close()
	back := load(t, cpu.New(), dir, hf.Options{})
	if got := back.(*models.Decoder).Config; got.Layers != c.Layers || got.Dim != c.Dim || got.KVHeads != c.KVHeads {
		t.Errorf("read back as %+v", got)
	}
	for _, p := range back.Parameters() {
		w := want[p.Name()]
		for i, v := range p.Float32s() {
			if r := bf16Round(w[i]); v != r {
				t.Fatalf("%s[%d] = %v, want %v (%v rounded to bf16)", p.Name(), i, v, r, w[i])
			}
		}
	}
	// Asked for F32, the same model is written in F32.
	if err := hf.SaveWith(m, dir, hf.SaveOptions{DType: safetensors.F32}); err != nil {
		t.Fatal(err)
	}
	f32 := load(t, cpu.New(), dir, hf.Options{})
	for _, p := range f32.Parameters() {
		if !slices.Equal(p.Float32s(), want[p.Name()]) {
			t.Errorf("%s: the F32 export differs from the merged values", p.Name())
		}
	}
	if err := hf.SaveWith(m, dir, hf.SaveOptions{DType: safetensors.F16}); err == nil {
		t.Error("SaveOptions.DType F16 was accepted")
	}
}

// bf16Round rounds x to bfloat16, ties to even (PyTorch's .to(bfloat16)).
func bf16Round(x float32) float32 {
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// TestLoadBitsandbytesRefusals: a 4-bit weight missing one of its
// entries, with a quant_state that contradicts config.json, in fp4, or
// an entry beside a float weight, is an error naming the file and the
// tensor; a 4-bit GPT-2 Conv1D weight is refused; quantizing and
// deferring together is refused.
func TestLoadBitsandbytesRefusals(t *testing.T) {
	src := filepath.Join("testdata", "llama-nf4", "model.safetensors")
	const w = "model.layers.0.self_attn.q_proj.weight"
	state := func(js string) safetensors.Source {
		return safetensors.Source{Name: w + ".quant_state.bitsandbytes__nf4", DType: safetensors.U8, Shape: []int{len(js)}, Data: []byte(js)}
	}
	f, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	qs, _ := f.Tensor(w + ".quant_state.bitsandbytes__nf4")
	orig := string(qs.Data)
	f.Close()
	for _, c := range []struct {
		name string
		data func() []byte
		want []string
	}{
		{"no absmax", func() []byte { return edit(t, src, []string{w + ".absmax"}) }, []string{"model.safetensors", w + ".absmax is missing"}},
		{"no nested map", func() []byte { return edit(t, src, []string{w + ".nested_quant_map"}) }, []string{w + ".nested_quant_map is missing"}},
		{"shape", func() []byte {
			return edit(t, src, []string{w + ".quant_state.bitsandbytes__nf4"}, state(strings.Replace(orig, "[16, 16]", "[8, 32]", 1)))
		}, []string{w, "has shape [8 32] (its quant_state); config.json says [16 16]"}},
		{"fp4", func() []byte {
			js := strings.Replace(orig, `"nf4"`, `"fp4"`, 1)
			s := state(js)
			s.Name = w + ".quant_state.bitsandbytes__fp4"
			return edit(t, src, []string{w + ".quant_state.bitsandbytes__nf4"}, s)
		}, []string{w, "fp4"}},
		{"nested offset infinite in float32", func() []byte {
			js := regexp.MustCompile(`"nested_offset": [^,}]*`).ReplaceAllString(orig, `"nested_offset": 1e39`)
			return edit(t, src, []string{w + ".quant_state.bitsandbytes__nf4"}, state(js))
		}, []string{w, "absmax of block 0", "+Inf", "not finite"}},
		{"infinite level", func() []byte {
			m := make([]byte, 64)
			binary.LittleEndian.PutUint32(m[4*15:], math.Float32bits(float32(math.Inf(1))))
			return edit(t, src, []string{w + ".quant_map"}, safetensors.Source{Name: w + ".quant_map", DType: safetensors.F32, Shape: []int{16}, Data: m})
		}, []string{w + ".quant_map", "value 15 is +Inf"}},
		{"stray absmax", func() []byte {
			return edit(t, filepath.Join("testdata", "llama-f32", "model.safetensors"), nil,
				safetensors.Source{Name: w + ".absmax", DType: safetensors.U8, Shape: []int{4}, Data: make([]byte, 4)})
		}, []string{w + ".absmax is not part of a llama"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, _ := os.ReadFile(filepath.Join("testdata", "llama-nf4", "config.json"))
			os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
			os.WriteFile(filepath.Join(dir, "model.safetensors"), c.data(), 0o644)
			for _, o := range []hf.Options{{}, {Quantize: quantizeAll(device.NF4)}} {
				_, _, err := hf.Load(cpu.New(), dir, o)
				if err == nil {
					t.Fatal("loaded")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v: does not say %q", err, w)
					}
				}
			}
		})
	}
	t.Run("gpt2 conv1d", func(t *testing.T) {
		dir := t.TempDir()
		cfg, _ := os.ReadFile(filepath.Join("testdata", "gpt2-f32", "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
		g := "transformer.h.0.attn.c_proj.weight"
		js := `{"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [16, 16]}`
		os.WriteFile(filepath.Join(dir, "model.safetensors"), edit(t, filepath.Join("testdata", "gpt2-f32", "model.safetensors"), []string{g},
			safetensors.Source{Name: g, DType: safetensors.U8, Shape: []int{128, 1}, Data: make([]byte, 128)},
			safetensors.Source{Name: g + ".absmax", DType: safetensors.F32, Shape: []int{4}, Data: make([]byte, 16)},
			safetensors.Source{Name: g + ".quant_map", DType: safetensors.F32, Shape: []int{16}, Data: make([]byte, 64)},
			safetensors.Source{Name: g + ".quant_state.bitsandbytes__nf4", DType: safetensors.U8, Shape: []int{len(js)}, Data: []byte(js)}), 0o644)
		if _, _, err := hf.Load(cpu.New(), dir, hf.Options{}); err == nil || !strings.Contains(err.Error(), "4-bit Conv1D weight") {
			t.Errorf("a 4-bit GPT-2: %v", err)
		}
	})
	if _, _, err := hf.Load(cpu.New(), filepath.Join("testdata", "llama-f32"), hf.Options{Defer: true, Quantize: quantizeAll(device.NF4)}); err == nil {
		t.Error("Quantize with Defer was accepted")
	}
	if _, _, err := hf.Load(cpu.New(), filepath.Join("testdata", "llama-f32"), hf.Options{Quantize: quantizeAll(device.BF16)}); err == nil || !strings.Contains(err.Error(), "want nf4, int8 or none") {
		t.Errorf("Quantize giving bf16: %v", err)
	}
}
