//go:build cuda || cudaemu

package train

import (
	"context"
	"math"
	"testing"

	"github.com/memfit/memfit/device/cuda"
)

// TestBaseOnCUDA: a LoRA run over an nf4 base (and an int8 one) on the
// CUDA device, whose products dequantize a tile of the weight at a time
// into an allocator temporary (device.QuantTileElems; cuda lacks
// quant_gemm), trains as on the CPU and peaks where its plan says,
// the tiles included.
func TestBaseOnCUDA(t *testing.T) {
	for _, base := range []string{"nf4", "int8"} {
		t.Run(base, func(t *testing.T) {
			cfg := tinyLlama()
			cfg.Memory.LoRA.Rank, cfg.Precision.Base, cfg.Precision.AMP, cfg.Memory.Checkpoint = 4, base, "bf16", "every"
			cfg.Optim.Steps = planSteps
			if cuda.Emulated {
				cfg.Data.ValSplit = 0
			}
			losses := map[string][]float64{}
			for _, dev := range []string{"cpu", "cuda"} {
				c := cfg
				c.Device.Name = dev
				tr := newTrainer(t, c)
				tr.Hooks.AfterStep = func(_ *Trainer, r Record) error {
					losses[dev] = append(losses[dev], r.Loss)
					return nil
				}
				if _, err := tr.Run(context.Background()); err != nil {
					t.Fatalf("%s: %v", dev, err)
				}
				if dev == "cuda" {
					pred, err := Plan(c)
					if err != nil {
						t.Fatal(err)
					}
					if got := tr.Peaks(); got != pred {
						t.Errorf("cuda: predicted %+v\nmeasured %+v", pred, got)
					}
				}
			}
			for i, l := range losses["cpu"] {
				if g := losses["cuda"][i]; math.Abs(g-l) > 5e-3*math.Abs(l) {
					t.Errorf("step %d: cuda loss %v, cpu %v", i+1, g, l)
				}
			}
		})
	}
}
