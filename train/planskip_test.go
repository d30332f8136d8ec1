package train

import (
	"fmt"
	"testing"

	"github.com/memfit/memfit/internal/plantrace"
)

// A plan traces the first two and the last of the repetitions that
// allocate alike (tiles, the chunked head's chunks, micro-batches) and
// skips the rest:
// its peaks are those of tracing every one, every category, the total
// and the caching allocator's reserve, on a grid of models, contexts
// (tiles of 2048 and a longer last one; heads of several chunks) and
// techniques, for the CPU and for the GPU.
func TestPlanSkipsRepeatsExactly(t *testing.T) {
	base := func(model string, context int) Config {
		c := Default()
		c.Model = ModelConfig{Name: model, Layers: 2, Width: 64, Heads: 4, KVHeads: 2, Hidden: 128, Vocab: 3000, Context: context}
		c.Optim.Batch, c.Optim.Steps, c.Output.Quiet = 1, planSteps, true
		return c
	}
	techniques := []struct {
		name string
		set  func(*Config)
	}{
		{"tile checkpoint", func(c *Config) { c.Memory.Tile, c.Memory.Checkpoint = 2048, "every" }},
		{"tile lora nf4 bf16 checkpoint", func(c *Config) {
			c.Memory.Tile, c.Memory.Checkpoint, c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 2048, "every", 4, "nf4", "bf16"
		}},
		{"tile offload activations", func(c *Config) {
			c.Memory.Tile, c.Memory.Checkpoint, c.Memory.Offload.Mode = 2048, "every", "activations"
		}},
		{"tile step in backward lora", func(c *Config) { c.Memory.Tile, c.Memory.StepInBackward, c.Memory.LoRA.Rank = 2048, true, 4 }},
		{"tile accum", func(c *Config) { c.Memory.Tile, c.Optim.Batch, c.Memory.Accum = 2048, 2, 2 }},
		{"accum 8 checkpoint", func(c *Config) { c.Optim.Batch, c.Memory.Accum, c.Memory.Checkpoint = 8, 8, "every" }},
		{"accum 5 of 8 lora bf16 offload", func(c *Config) {
			c.Optim.Batch, c.Memory.Accum, c.Memory.LoRA.Rank, c.Precision.AMP, c.Memory.Offload.Mode = 8, 5, 4, "bf16", "all"
		}},
		{"head chunks f32", func(c *Config) {}},
		{"head chunks bf16 fp16 scaler", func(c *Config) { c.Precision.AMP = "fp16" }},
	}
	for _, model := range []string{"llama", "gemma2", "phi3", "qwen3", "gpt"} {
		for _, context := range []int{8192, 13312} {
			for _, tech := range techniques {
				for _, dev := range []string{"cpu", "cuda"} {
					name := fmt.Sprintf("%s/%d/%s/%s", model, context, tech.name, dev)
					t.Run(name, func(t *testing.T) {
						c := base(model, context)
						tech.set(&c)
						c.Device.Name = dev
						if r := c.Resolved(); r.Validate() != nil {
							err := r.Validate()
							t.Skip(err)
						}
						skipped, err := Plan(c)
						if err != nil {
							t.Fatal(err)
						}
						restore := plantrace.SetEvery(true)
						every, err := Plan(c)
						restore()
						if err != nil {
							t.Fatal(err)
						}
						if skipped != every {
							t.Errorf("tracing the first, second and last repetitions:\n%+v\ntracing every one:\n%+v", skipped, every)
						}
					})
				}
			}
		}
	}
}

// -fit chooses what it chose when plans traced every tile and chunk:
// the same configuration and peak, since every plan is the same.
func TestFitSkipsRepeatsExactly(t *testing.T) {
	c := Default()
	c.Model = ModelConfig{Name: "llama", Layers: 2, Width: 64, Heads: 4, KVHeads: 2, Hidden: 128, Vocab: 3000, Context: 13312}
	c.Optim.Batch, c.Output.Quiet, c.Device.Name = 1, true, "cuda"
	c.Memory.LoRA.Rank, c.Precision.AMP, c.Precision.Base = 4, "bf16", "nf4"
	const budget = 40 << 20
	skipped, err := Fit(c, budget)
	if err != nil {
		t.Fatal(err)
	}
	restore := plantrace.SetEvery(true)
	every, err := Fit(c, budget)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	if skipped.Flags(c) != every.Flags(c) || skipped.Peak != every.Peak {
		t.Errorf("-fit chose %s (%+v) skipping repeats, %s (%+v) tracing them", skipped.Flags(c), skipped.Peak, every.Flags(c), every.Peak)
	}
	t.Logf("-fit %d MiB: %s", budget>>20, skipped.Flags(c))
}
