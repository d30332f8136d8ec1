package tile_test

import (
	"fmt"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
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
				m := tiledLlama(b, dev, 1792, 8192, tiles, ckpt)
				defer nn.Release(m)
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
