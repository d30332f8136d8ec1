package models_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// With allocation sites on, what a GPT's layers make is labelled with the
// layer's path, so a report at the peak says which layer holds it.
func TestActivationsNameTheirLayer(t *testing.T) {
	dev := cpu.New()
	mem := dev.Memory()
	tensor.EnableAllocSites(mem)
	defer mem.SetSiteFunc(nil)
	m, err := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 8, Vocab: 11, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	x, y := cycle(t, dev, rand.New(rand.NewPCG(1, 1)), []int32{1, 2, 3}, 2, 8)
	defer x.Release()
	defer y.Release()
	mem.EnableHistory(1 << 16)
	s := tensor.NewScope()
	defer s.Close()
	out := m.Forward(nn.NewRun(s, 1), x) // the graph keeps the activations alive
	defer out.Release()
	seen := map[string]bool{}
	for _, site := range mem.Snapshot().Sites {
		module, _, ok := strings.Cut(site, " · ")
		if ok {
			seen[module] = true
		}
	}
	for _, want := range []string{"embed.tokens", "blocks.0.ln1", "blocks.0.attn", "blocks.0.attn.qkv", "blocks.1.mlp.fc", "blocks.1", "final_norm"} {
		if !seen[want] {
			t.Errorf("no live block is labelled %s; labels: %v", want, seen)
		}
	}
}
