package train

import (
	"testing"

	"github.com/memfit/memfit/memory"
)

// TestLongContextTargetsGPT2Small holds the fused-attention issue's memory
// targets on GPT-2 small's shape (12 layers, 12 heads, width 768, context
// 1024, batch 8, a 50257-token vocabulary, Adam), planned: with
// -amp bf16 the activation peak is at most 0.45 of the 5.29 GiB planned
// before fused attention and the chunked head; with -amp bf16
// -checkpoint every -accum 8 the temporary peak is at most 64 MiB; and
// the activation peak at context 2048 is at most 2.1 times that at 1024
// (linear, not quadratic). The plan equals the measured peak
// (TestPlanMatchesMeasuredPeak), so these are the allocator's bytes.
func TestLongContextTargetsGPT2Small(t *testing.T) {
	base := Default()
	base.Model.Name, base.Model.Layers, base.Model.Width, base.Model.Heads, base.Model.Context, base.Optim.Batch = "gpt", 12, 768, 12, 1024, 8
	base.Data.Path, base.Precision.AMP, base.Output.Quiet = largeVocabShard(t), "bf16", true
	plan := func(set func(*Config)) PeakBytes {
		t.Helper()
		c := base
		set(&c)
		p, err := Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const before = 5.29 * (1 << 30) // -amp bf16's activation peak before the issue
	bf16 := plan(func(*Config) {})
	if float64(bf16.Activation) > 0.45*before {
		t.Errorf("-amp bf16: activation peak %s, above 0.45 × 5.29 GiB", memory.FormatBytes(bf16.Activation))
	}
	accum := plan(func(c *Config) { c.Memory.Checkpoint, c.Memory.Accum = "every", 8 })
	if accum.Temporary > 64<<20 {
		t.Errorf("-amp bf16 -checkpoint every -accum 8: temporary peak %s, above 64 MiB", memory.FormatBytes(accum.Temporary))
	}
	long := plan(func(c *Config) { c.Model.Context = 2048 })
	if r := float64(long.Activation) / float64(bf16.Activation); r > 2.1 {
		t.Errorf("context 2048: activation peak %s, %.2f× context 1024's (want at most 2.1×)", memory.FormatBytes(long.Activation), r)
	}
	t.Logf("activation %s (%.3f× before), temporary with -accum 8 %s, context 2048 %.2f×",
		memory.FormatBytes(bf16.Activation), float64(bf16.Activation)/before, memory.FormatBytes(accum.Temporary), float64(long.Activation)/float64(bf16.Activation))
}
