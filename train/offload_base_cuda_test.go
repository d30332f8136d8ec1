//go:build cuda || cudaemu

package train

import (
	"testing"

	"github.com/memfit/memfit/device/cuda"
)

// TestOffloadBaseIsBitwiseOnCUDA: on the GPU (the emulator in CI), where
// the base streams from pinned host memory on the copy stream, every loss
// and every parameter after every step are the run's without -offload
// base, bit for bit, and the plan for -device cuda is the measured peak.
func TestOffloadBaseIsBitwiseOnCUDA(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"llama lora nf4 bf16 checkpoint", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint = 4, "nf4", "bf16", "every"
		}},
		{"llama lora int8 f32 activations", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.Offload.Mode = 4, "int8", "activations"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyLlama()
			cfg.Model.Layers = 3
			c.set(&cfg)
			cfg.Device.Name, cfg.Data.ValSplit, cfg.Optim.Steps = "cuda", 0, planSteps
			if !cuda.Emulated {
				cfg.Optim.Steps = 4
			}
			_, want := traceRun(t, cfg)
			on := withBase(cfg)
			tr, got := traceRun(t, on)
			sameTrace(t, got, want)
			if st := tr.offloader().base.Stats(); st.Prefetches == 0 {
				t.Errorf("%+v: nothing prefetched", st)
			}
			on.Optim.Steps = planSteps
			pred, err := Plan(on)
			if err != nil {
				t.Fatal(err)
			}
			if cuda.Emulated {
				if measured := tr.Peaks(); pred != measured {
					t.Errorf("predicted %+v\nmeasured  %+v", pred, measured)
				}
			}
		})
	}
}
