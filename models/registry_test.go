package models_test

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
)

func TestRegistry(t *testing.T) {
	if got := strings.Join(models.Names(), ","); got != "cnn,gemma2,gemma3,gpt,llama,mistral,mlp,phi3,qwen2,qwen3,smollm3" {
		t.Errorf("Names() = %s", got)
	}
	dev := cpu.New()
	for _, tc := range []struct {
		name   string
		spec   models.Spec
		params int
	}{
		// 8·16+16 + 16·16+16 + 16·3+3
		{"mlp", models.Spec{Layers: 2, Width: 16, InShape: []int{8}, Classes: 3}, 467},
		{"gpt", models.Spec{Layers: 1, Width: 8, Heads: 2, Context: 4, InShape: []int{4}, Classes: 5}, -1},
		// embedding 5·8; a block's two norms 2·8, q and o 2·8·8, k and v
		// 2·4·8, gate, up and down 3·8·16; the final norm 8; the head 5·8
		{"llama", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 40 + 16 + 128 + 64 + 384 + 8 + 40},
		{"cnn", models.Spec{Width: 64, InShape: []int{1, 28, 28}, Classes: 10}, -1},
		// Qwen 2 adds q, k and v biases (8 + 4 + 4) to llama's.
		{"qwen2", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680 + 16},
		// Qwen 3 adds the head norms (2·4).
		{"qwen3", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680 + 8},
		// Gemma 3: two norms more (2·8) and the head norms (2·4), tied.
		{"gemma3", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680 + 16 + 8 - 40},
		{"gemma2", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680 + 16 - 40},
		// Phi-3's fused projections hold what llama's separate ones do.
		{"phi3", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680},
		{"mistral", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680},
		{"smollm3", models.Spec{Layers: 1, Width: 8, Heads: 2, KVHeads: 1, Hidden: 16, Context: 4, InShape: []int{4}, Classes: 5}, 680},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := models.New(tc.name, dev, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			if n := nn.Count(m); n == 0 || (tc.params > 0 && n != tc.params) {
				t.Errorf("%d parameters, want %d", n, tc.params)
			}
			// What the Kind computes without building the model.
			if k, _ := models.KindOf(tc.name); k.Params == nil || k.Params(tc.spec) != int64(nn.Count(m)) {
				t.Errorf("Kind.Params is wrong: the model has %d", nn.Count(m))
			}
		})
	}
	for _, tc := range []struct {
		name, model string
		spec        models.Spec
		want        string
	}{
		{"unknown", "rnn", models.Spec{}, "cnn, gemma2, gemma3, gpt, llama, mistral, mlp, phi3, qwen2, qwen3, smollm3"},
		{"cnn on vectors", "cnn", models.Spec{Width: 64, InShape: []int{32}, Classes: 10}, "28x28"},
		{"gpt without heads", "gpt", models.Spec{Layers: 1, Width: 8, Context: 4, Classes: 5}, "Heads"},
		{"llama with kv heads not dividing heads", "llama", models.Spec{Layers: 1, Width: 8, Heads: 4, KVHeads: 3, Context: 4, Classes: 5}, "KVHeads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := models.New(tc.model, dev, tc.spec)
			if err == nil || m != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, %v; want a nil model and an error naming %q", m, err, tc.want)
			}
		})
	}
}
