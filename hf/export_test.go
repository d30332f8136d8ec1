package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
)

// readJSON reads a JSON object from path.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// Past ShardBytes an export is sharded as save_pretrained shards:
// model-0000i-of-0000n.safetensors files in name order, none over the
// limit unless one tensor is, and an index mapping every tensor to its
// file; it loads back to the same parameters. Exporting a smaller model
// into the same directory leaves no shard behind, and exporting a
// sharded one over a sharded one never rewrites a file the old index
// lists before the new index is in place (new names, then the old ones
// removed).
func TestExportSharded(t *testing.T) {
	m, _, err := hf.Load(cpu.New(), "testdata/qwen3-f32", hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	dir := t.TempDir()
	const limit = 20000
	if err := hf.SaveWith(m, dir, hf.SaveOptions{ShardBytes: limit}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		t.Error("a sharded export left model.safetensors, which would win over its index")
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 3 {
		t.Fatalf("%d shards of %d bytes at most: %v", len(shards), limit, shards)
	}
	for i, s := range shards {
		if want := filepath.Join(dir, "model-0000"+string(rune('1'+i))+"-of-0000"+string(rune('0'+len(shards)))+".safetensors"); len(shards) < 10 && s != want {
			t.Errorf("shard %d is %s, want %s", i, s, want)
		}
	}
	idx := readJSON(t, filepath.Join(dir, "model.safetensors.index.json"))
	wm := idx["weight_map"].(map[string]any)
	orig, _ := hf.Open("testdata/qwen3-f32")
	defer orig.Close()
	if len(wm) != len(orig.Names()) {
		t.Errorf("the index maps %d tensors, the model has %d", len(wm), len(orig.Names()))
	}
	back, _, err := hf.Load(cpu.New(), dir, hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.Parameters(), back.Parameters()
	for i := range a {
		if !slices.Equal(a[i].Float32s(), b[i].Float32s()) {
			t.Errorf("%s differs after a sharded export", a[i].Name())
		}
	}
	nn.Release(back)

	// Sharded over sharded: the old shards' names are taken, so the new
	// ones carry a tag, and the old ones go once the index commits.
	if err := hf.SaveWith(m, dir, hf.SaveOptions{ShardBytes: limit * 2}); err != nil {
		t.Fatal(err)
	}
	now, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	for _, s := range now {
		if slices.Contains(shards, s) {
			t.Errorf("%s, an old shard, is still there (or was rewritten in place)", s)
		}
	}
	x, err := safetensors.ReadIndex(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Shards(); !slices.Equal(got, now) {
		t.Errorf("files %v, the index lists %v", now, got)
	}
	// Unsharded over sharded: model.safetensors, and nothing else.
	if err := hf.SaveWith(m, dir, hf.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "model-*")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		t.Error("left the index")
	}
}

// An export is a model directory: the tokenizer's files beside the
// weights, the run's chat template in tokenizer_config.json when the
// tokenizer has none, the token ids and generation config of the model
// it was initialized from; and with Adapters, the LoRA adapters in
// PEFT's layout, named as the family names its modules (Phi-3's fused
// qkv_proj and gate_up_proj as they are), with target_modules by suffix
// when every layer of a name is adapted.
func TestExportCompanions(t *testing.T) {
	from := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join("testdata/phi3-f32", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(from, f), b, 0o644)
	}
	os.WriteFile(filepath.Join(from, "generation_config.json"), []byte(`{"eos_token_id": [2, 32007], "do_sample": false}`), 0o644)
	tok := t.TempDir()
	os.WriteFile(filepath.Join(tok, "tokenizer.json"), []byte(`{"model": {"type": "BPE"}}`), 0o644)
	os.WriteFile(filepath.Join(tok, "tokenizer_config.json"), []byte(`{"eos_token": "</s>"}`), 0o644)

	m, _, err := hf.Load(cpu.New(), from, hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	ad, err := lora.Apply(m, nil, lora.Config{Rank: 2, Alpha: 4, Targets: []string{"*.attn.qkv", "blocks.1.mlp.gate_up"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	err = hf.SaveWith(m, out, hf.SaveOptions{Tokenizer: filepath.Join(tok, "tokenizer.json"), ChatTemplate: "{{ messages }}", From: from, Adapters: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "tokenizer.json")); string(b) != `{"model": {"type": "BPE"}}` {
		t.Errorf("tokenizer.json %q", b)
	}
	if tc := readJSON(t, filepath.Join(out, "tokenizer_config.json")); tc["chat_template"] != "{{ messages }}" || tc["eos_token"] != "</s>" {
		t.Errorf("tokenizer_config.json %v", tc)
	}
	if g := readJSON(t, filepath.Join(out, "generation_config.json")); g["do_sample"] != false {
		t.Errorf("generation_config.json %v", g)
	}
	if c := readJSON(t, filepath.Join(out, "config.json")); c["eos_token_id"] != 2.0 || c["bos_token_id"] != 1.0 {
		t.Errorf("config.json's token ids: %v, %v", c["bos_token_id"], c["eos_token_id"])
	}
	ac := readJSON(t, filepath.Join(out, "adapter_config.json"))
	if ac["peft_type"] != "LORA" || ac["r"] != 2.0 || ac["lora_alpha"] != 4.0 || ac["base_model_name_or_path"] != from {
		t.Errorf("adapter_config.json %v", ac)
	}
	if got := ac["target_modules"].([]any); len(got) != 2 || got[0] != "model.layers.1.mlp.gate_up_proj" || got[1] != "qkv_proj" {
		t.Errorf("target_modules %v, want the one gate_up_proj by name and every qkv_proj by suffix", got)
	}
	f, err := safetensors.Open(filepath.Join(out, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []string{
		"base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", "base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight",
		"base_model.model.model.layers.1.mlp.gate_up_proj.lora_A.weight", "base_model.model.model.layers.1.mlp.gate_up_proj.lora_B.weight",
		"base_model.model.model.layers.1.self_attn.qkv_proj.lora_A.weight", "base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight",
	}
	if got := f.Names(); !slices.Equal(got, want) {
		t.Errorf("adapter tensors %v, want %v", got, want)
	}
	a, _ := f.Tensor("base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight")
	if v, _ := a.Float32s(); !slices.Equal(v, ad.Adapters[0].Float32s()) || !slices.Equal(a.Shape, []int{2, 32}) {
		t.Errorf("lora_A %v differs from the adapter", a.Shape)
	}
	// The merged model loads back.
	back, _, err := hf.Load(cpu.New(), out, hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nn.Release(back)
	// GPT-2 has no PEFT layout here.
	g, _, err := hf.Load(cpu.New(), "testdata/gpt2-f32", hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	if err := hf.SaveWith(g, t.TempDir(), hf.SaveOptions{Adapters: true}); err == nil || !strings.Contains(err.Error(), "PEFT") {
		t.Errorf("GPT-2 adapters: %v", err)
	}
}
