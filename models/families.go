package models

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// A Family is a decoder family as data: its name among the registered
// models, the Hugging Face model_type its checkpoints carry, and the Arch
// its blocks compute. Adding a family built like Llama is an entry here
// (and its tensor names in package hf), not a copy of the decoder.
type Family struct {
	Name string // the registered model (-model)
	HF   string // config.json's model_type
	Arch Arch
	// TiedHead: the family's models compute their logits with the token
	// embedding (Gemma has no head of its own); a model built from a Spec
	// follows it, a checkpoint's config.json says for itself.
	TiedHead bool
}

// families are the decoder families memfit builds, Llama's first.
var families = []Family{
	{Name: "llama", HF: "llama", Arch: Arch{}},
	{Name: "mistral", HF: "mistral", Arch: Arch{Family: "mistral"}},
	{Name: "qwen2", HF: "qwen2", Arch: Arch{Family: "qwen2", QKVBias: true}},
	{Name: "qwen3", HF: "qwen3", Arch: Arch{Family: "qwen3", QKNorm: true}},
	{Name: "gemma2", HF: "gemma2", TiedHead: true, Arch: Arch{Family: "gemma2", NormOffset: 1, SandwichNorms: true,
		Activation: "gelu_tanh", ScaleEmbeddings: true}},
	{Name: "gemma3", HF: "gemma3_text", TiedHead: true, Arch: Arch{Family: "gemma3_text", QKNorm: true, NormOffset: 1,
		SandwichNorms: true, Activation: "gelu_tanh", ScaleEmbeddings: true}},
	{Name: "phi3", HF: "phi3", Arch: Arch{Family: "phi3", FusedQKV: true, FusedGateUp: true}},
	{Name: "smollm3", HF: "smollm3", Arch: Arch{Family: "smollm3"}},
}

// Families lists the decoder families, Llama's first.
func Families() []Family { return append([]Family(nil), families...) }

// FamilyByHF returns the family whose checkpoints carry model_type hf.
func FamilyByHF(hf string) (Family, bool) {
	for _, f := range families {
		if f.HF == hf {
			return f, true
		}
	}
	return Family{}, false
}

// config is the DecoderConfig a Spec names for the family: the shape the
// run gives, the family's Arch and head, and every other number at its
// default (no sliding windows; a checkpoint's config.json sets those).
func (f Family) config(s Spec) DecoderConfig {
	return DecoderConfig{Arch: f.Arch, TiedHead: f.TiedHead, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads, Dim: s.Width,
		Hidden: s.Hidden, Context: s.Context, Vocab: s.Classes, Dropout: s.Dropout, Seed: s.Seed, HeadChunkRows: s.HeadChunkRows,
		DType: s.DType, Defer: s.Defer}
}

// kind is the family's registered Kind.
func (f Family) kind() Kind {
	return Kind{LR: 3e-4, Tokens: true, Recompute: true, DTypes: []tensor.DType{tensor.BF16}, HF: f.HF,
		Params: func(s Spec) int64 { return f.config(s).Params() },
		Key: func(s Spec) string {
			return fmt.Sprintf("%s layers=%d width=%d heads=%d kv_heads=%d hidden=%d context=%d", f.Name, s.Layers, s.Width, s.Heads, s.KVHeads, s.Hidden, s.Context)
		},
		Build: func(dev device.Device, s Spec) (Model, error) { return built(NewDecoder(dev, f.config(s))) }}
}
