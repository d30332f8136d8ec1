package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
)

// withConfig copies a fixture's model.safetensors into a new directory
// beside config.json with key set to value (raw JSON), or removed when
// value is "".
func withConfig(t *testing.T, fixture, key, value string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, filepath.Join(fixture, "model.safetensors"), filepath.Join(dir, "model.safetensors"))
	b, err := os.ReadFile(filepath.Join(fixture, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(cfg, key)
	} else {
		cfg[key] = json.RawMessage(value)
	}
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Hostile config.json values are refused, naming the file and the key,
// before anything is built: in well under a second and without the memory
// the values describe.
func TestConfigBounds(t *testing.T) {
	cases := []struct {
		fixture, key, value string
		want                string
	}{
		{"gpt2-f32", "n_layer", "1000000000", "n_layer 1000000000: over 16384"},
		{"gpt2-f32", "n_layer", "-1", "n_layer -1: want at least 1"},
		{"gpt2-f32", "n_layer", "", "n_layer 0: want at least 1"},
		{"gpt2-f32", "n_layer", "1e9", "n_layer"},
		{"gpt2-f32", "n_layer", `"2"`, "n_layer"},
		{"gpt2-f32", "n_embd", "9223372036854775807", "n_embd 9223372036854775807: over 262144"},
		{"gpt2-f32", "n_embd", "9223372036854775808", "n_embd"},
		{"gpt2-f32", "n_head", "3", "n_head 3 does not divide n_embd 16"},
		{"gpt2-f32", "n_head", "32", "n_head 32: over 16"},
		{"gpt2-f32", "n_positions", "1000000000000", "n_positions 1000000000000: over 16777216"},
		{"gpt2-f32", "vocab_size", "0", "vocab_size 0: want at least 1"},
		{"llama-f32", "num_hidden_layers", "1000000000", "num_hidden_layers 1000000000: over 16384"},
		{"llama-f32", "hidden_size", "-16", "hidden_size -16: want at least 1"},
		{"llama-f32", "intermediate_size", "4000000000", "intermediate_size 4000000000: over 1048576"},
		{"llama-f32", "num_attention_heads", "0", "num_attention_heads 0: want at least 1"},
		{"llama-f32", "num_key_value_heads", "64", "num_key_value_heads 64: over 4, more than num_attention_heads"},
		{"llama-f32", "max_position_embeddings", "1000000000000", "max_position_embeddings 1000000000000: over 16777216"},
		{"llama-f32", "vocab_size", "-1", "vocab_size -1: want at least 1"},
		{"llama-f32", "rms_norm_eps", "-1e-6", "rms_norm_eps -1e-06: want a number above 0 and below 1"},
		{"llama-f32", "rms_norm_eps", "2", "rms_norm_eps 2"},
		{"llama-f32", "rope_theta", "-10000", "rope_theta -10000: want a finite number above 0"},
		{"llama-f32", "rope_theta", "1e999", "rope_theta"},
		{"llama3-f32", "rope_scaling", `{"rope_type":"llama3","factor":0,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16}`, "rope_scaling.factor 0"},
		{"llama3-f32", "rope_scaling", `{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":-5}`, "rope_scaling.original_max_position_embeddings -5"},
	}
	for _, c := range cases {
		t.Run(c.fixture+"/"+c.key+"="+c.value, func(t *testing.T) {
			dir := withConfig(t, filepath.Join("testdata", c.fixture), c.key, c.value)
			start := time.Now()
			m, _, err := hf.Load(cpu.New(), dir, hf.Options{})
			if err == nil {
				nn.Release(m)
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want one naming %s and saying %q", err, filepath.Join(dir, "config.json"), c.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// A config within the bounds that does not describe the checkpoint (16384
// layers over a file of two) fails on the first missing tensor, found on
// the meta device: the model is never built.
func TestConfigLargerThanCheckpoint(t *testing.T) {
	for _, c := range []struct{ fixture, key, want string }{
		{"gpt2-f32", "n_layer", "no tensor h.2.ln_1.weight (or transformer.h.2.ln_1.weight) for blocks.2.ln1.weight"},
		{"llama-f32", "num_hidden_layers", "no tensor model.layers.2.input_layernorm.weight for blocks.2.attn_norm.weight"},
	} {
		dir := withConfig(t, filepath.Join("testdata", c.fixture), c.key, "16384")
		start := time.Now()
		m, _, err := hf.Load(cpu.New(), dir, hf.Options{})
		if err == nil {
			nn.Release(m)
			t.Fatalf("%s: loaded", c.fixture)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want %q", c.fixture, err, c.want)
		}
		t.Logf("%s: refused in %v", c.fixture, time.Since(start))
	}
}

// A checkpoint with more layers than its config is refused naming the
// first tensor past n_layer, not cut to the config.
func TestMoreLayersThanConfig(t *testing.T) {
	dir := withConfig(t, "testdata/gpt2-f32", "n_layer", "1")
	_, _, err := hf.Load(cpu.New(), dir, hf.Options{})
	if err == nil || !strings.Contains(err.Error(), "tensor transformer.h.1.attn.c_attn.bias is not part of a GPT-2") || !strings.Contains(err.Error(), "n_layer is 1") {
		t.Errorf("error %v", err)
	}
	dir = withConfig(t, "testdata/llama-f32", "num_hidden_layers", "1")
	if _, _, err := hf.Load(cpu.New(), dir, hf.Options{}); err == nil || !strings.Contains(err.Error(), "tensor model.layers.1.") {
		t.Errorf("Llama: error %v", err)
	}
}

// Without config.json, a tensor named for a layer past MaxLayers is an
// error naming it, not a model of that many layers.
func TestInferredLayersBounded(t *testing.T) {
	for _, c := range []struct{ fixture, name string }{
		{"gpt2-f32", "transformer.h.99999.ln_1.weight"},
		{"gpt2-f32", "h.99999999999999999999.ln_1.weight"},
		{"llama-f32", "model.layers.16384.input_layernorm.weight"},
	} {
		dir := t.TempDir()
		extra := safetensors.Source{Name: c.name, DType: safetensors.F32, Shape: []int{16}, Data: make([]byte, 64)}
		os.WriteFile(filepath.Join(dir, "model.safetensors"), edit(t, filepath.Join("testdata", c.fixture, "model.safetensors"), nil, extra), 0o644)
		_, _, err := hf.Load(cpu.New(), dir, hf.Options{})
		if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), "bound of 16384 layers") {
			t.Errorf("%s: error %v", c.name, err)
		}
	}
}

// Params is the parameter count of the model Load builds, from config.json
// alone.
func TestParams(t *testing.T) {
	for _, dir := range []string{"testdata/gpt2-f32", "testdata/llama-f32", "testdata/llama3-f32"} {
		c, err := hf.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var params int64
		if arch, _ := hf.Architecture(c); arch == "llama" {
			cfg, _, err := hf.ReadDecoderConfig(c)
			if err != nil {
				t.Fatal(err)
			}
			params = cfg.Params()
		} else {
			cfg, _, err := hf.ReadGPT2Config(c)
			if err != nil {
				t.Fatal(err)
			}
			params = cfg.Params()
		}
		c.Close()
		m, _, err := hf.Load(cpu.New(), dir, hf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var built int64
		for _, p := range m.Parameters() {
			built += int64(p.Len())
		}
		nn.Release(m)
		if params != built {
			t.Errorf("%s: Params %d, the built model has %d", dir, params, built)
		}
	}
}

// shard writes the fixture's tensors into two shards and an index in dir,
// the first names (sorted) in the first shard.
func shard(t *testing.T, fixture, dir string) []string {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(fixture, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := f.Names()
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	weightMap := map[string]string{}
	parts := [][]string{names[:len(names)/2], names[len(names)/2:]}
	for i, part := range parts {
		var srcs []safetensors.Source
		for _, n := range part {
			x, _ := f.Tensor(n)
			srcs = append(srcs, safetensors.Source{Name: n, DType: x.DType, Shape: x.Shape, Data: x.Data})
			weightMap[n] = shards[i]
		}
		out, err := os.Create(filepath.Join(dir, shards[i]))
		if err != nil {
			t.Fatal(err)
		}
		if err := safetensors.Write(out, nil, srcs); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]int{}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(fixture, "config.json"), filepath.Join(dir, "config.json"))
	return shards
}

// An export into a directory holding a sharded checkpoint replaces it
// whole: the index and its shards are gone, and the directory loads as
// the exported model. Every state a crash could leave between the steps
// loads a whole model.
func TestSaveReplacesShardedCheckpoint(t *testing.T) {
	src, _, err := hf.LoadGPT2(cpu.New(), "testdata/gpt2-f32")
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(src)
	// A different model to export over the shards: every weight halved.
	for _, p := range src.Parameters() {
		v := p.Float32s()
		for i := range v {
			v[i] /= 2
		}
		if err := p.SetFloat32s(v); err != nil {
			t.Fatal(err)
		}
	}
	same := func(dir string, want *models.GPT) {
		t.Helper()
		g, _, err := hf.LoadGPT2(cpu.New(), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer nn.Release(g)
		a, b := g.Parameters(), want.Parameters()
		for i := range a {
			if !slices.Equal(a[i].Float32s(), b[i].Float32s()) {
				t.Fatalf("%s: %s is not the expected model's", dir, a[i].Name())
			}
		}
	}

	dir := t.TempDir()
	shards := shard(t, "testdata/gpt2-f32", dir)
	other := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(other, []byte("{}"), 0o644)
	if err := hf.Save(src, dir); err != nil {
		t.Fatal(err)
	}
	for _, n := range append(shards, "model.safetensors.index.json") {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the export: %v", n, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the export removed a file that was no part of the checkpoint: %v", err)
	}
	same(dir, src)

	// A crash after model.safetensors was committed, before the removals:
	// the new model loads, not the stale shards.
	crashed := t.TempDir()
	shard(t, "testdata/gpt2-f32", crashed)
	copyFile(t, filepath.Join(dir, "model.safetensors"), filepath.Join(crashed, "model.safetensors"))
	copyFile(t, filepath.Join(dir, "config.json"), filepath.Join(crashed, "config.json"))
	same(crashed, src)
	// A crash among the removals: a shard gone, the index still there.
	os.Remove(filepath.Join(crashed, shards[0]))
	same(crashed, src)
	// The next export finishes the removals.
	if err := hf.Save(src, crashed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(crashed, "model.safetensors.index.json")); !os.IsNotExist(err) {
		t.Errorf("the index of a half-removed checkpoint survived the next export: %v", err)
	}
	// An index naming files outside the directory (or the model itself)
	// removes nothing of them.
	outside := filepath.Join(t.TempDir(), "keep.safetensors")
	os.WriteFile(outside, []byte("x"), 0o644)
	hostile := t.TempDir()
	idx, _ := json.Marshal(map[string]any{"weight_map": map[string]string{"a": "../" + filepath.Base(filepath.Dir(outside)) + "/keep.safetensors", "b": "model.safetensors"}})
	os.WriteFile(filepath.Join(hostile, "model.safetensors.index.json"), idx, 0o644)
	if err := hf.Save(src, hostile); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("an export removed %s, which a hostile index named: %v", outside, err)
	}
	same(hostile, src)
}

// A sharded checkpoint whose index disagrees with its shards is refused,
// naming the index; a directory with neither file is named.
func TestOpenShardedRefuses(t *testing.T) {
	dir := t.TempDir()
	shards := shard(t, "testdata/gpt2-f32", dir)
	for _, p := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
		m, _, err := hf.Load(cpu.New(), p, hf.Options{})
		if err != nil {
			t.Fatalf("the sharded fixture through %s: %v", p, err)
		}
		nn.Release(m)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	var idx map[string]map[string]string
	json.Unmarshal(b, &idx)
	wm := idx["weight_map"]
	if wm["transformer.wte.weight"] == shards[0] { // name the shard that lacks it
		wm["transformer.wte.weight"] = shards[1]
	} else {
		wm["transformer.wte.weight"] = shards[0]
	}
	b, _ = json.Marshal(idx)
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644)
	if _, _, err := hf.Load(cpu.New(), dir, hf.Options{}); err == nil || !strings.Contains(err.Error(), "transformer.wte.weight") || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("an index naming the wrong shard: %v", err)
	}
	empty := t.TempDir()
	if _, err := hf.Open(empty); err == nil || !strings.Contains(err.Error(), "holds neither model.safetensors nor model.safetensors.index.json") {
		t.Errorf("an empty directory: %v", err)
	}
}
