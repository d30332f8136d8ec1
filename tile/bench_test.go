package tile_test

import (
	"fmt"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/tile"
)

// BenchmarkLlamaStep times one LoRA step (rank 8, bf16 autocast) of a
// two-block Llama (width 512, hidden 1792, 8 heads, 2 key/value heads) on
// 8192 tokens, without and with tiles of 2048 tokens, with and without
// activation checkpointing: tiled/untiled is the technique's cost.
func BenchmarkLlamaStep(b *testing.B) {
	for _, ckpt := range []bool{false, true} {
		for _, tiles := range []bool{false, true} {
			b.Run(fmt.Sprintf("checkpoint=%v/tiles=%v", ckpt, tiles), func(b *testing.B) {
				dev := cpu.New()
				m, err := models.NewLlama(dev, models.LlamaConfig{Layers: 2, Heads: 8, KVHeads: 2, Dim: 512, Hidden: 1792, Context: 8192, Vocab: 256, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer nn.Release(m)
				if _, err := lora.Apply(m, nil, lora.Config{Rank: 8}); err != nil {
					b.Fatal(err)
				}
				if ckpt {
					m.SetBlockRunner(checkpoint.Every.Runner())
				}
				if tiles {
					run, _ := tile.New(2048)
					if err := m.SetTokenRunner(run); err != nil {
						b.Fatal(err)
					}
				}
				ids := make([]int32, 8192)
				for i := range ids {
					ids[i] = int32(i*31) % 256
				}
				x, err := tensor.FromInt32(dev, ids, []int{1, 8192}, memory.Data)
				if err != nil {
					b.Fatal(err)
				}
				defer x.Release()
				b.ResetTimer()
				for range b.N {
					err := tensor.Step(func(s *tensor.Scope) error {
						l := m.TokenLoss(nn.NewRun(s, 1), x, x, tensor.CrossEntropyOptions{})
						l.Backward()
						return nil
					}, tensor.Autocast(tensor.BF16))
					if err != nil {
						b.Fatal(err)
					}
					for _, p := range nn.Trainable(m) {
						p.SetGrad(nil)
					}
				}
			})
		}
	}
}
