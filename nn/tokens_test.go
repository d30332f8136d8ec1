package nn_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/nn"
)

// RandomInside finds what would draw masks inside a token-wise piece: a
// dropout layer, or a LoRA adapter with dropout (not a merged one).
func TestRandomInside(t *testing.T) {
	b := &nn.Builder{Dev: cpu.New(), Seed: 1}
	l, err := nn.NewLinear(b, "mlp.fc", nn.LinearConfig{In: 4, Out: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l)
	drop, err := nn.NewDropout("mlp.dropout", 0.1)
	if err != nil {
		t.Fatal(err)
	}
	none, err := nn.NewDropout("mlp.none", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := nn.RandomInside(l, none); got != "" {
		t.Errorf("a plain Linear and a dropout of 0: %q", got)
	}
	if got := nn.RandomInside(&nn.Fused{Layer: l, Then: []nn.Pointwise{drop}}); got != "a dropout layer" {
		t.Errorf("a Fused layer ending in dropout: %q", got)
	}
	if err := l.AttachLoRA(nn.LoRAConfig{Rank: 2, Dropout: 0.05}); err != nil {
		t.Fatal(err)
	}
	if got := nn.RandomInside(nn.NewSequential(l)); got != "mlp.fc's LoRA adapter" {
		t.Errorf("an adapter with dropout: %q", got)
	}
	if err := l.MergeLoRA(); err != nil {
		t.Fatal(err)
	}
	if got := nn.RandomInside(l); got != "" {
		t.Errorf("a merged adapter: %q", got)
	}
}
