package train

import (
	"strings"
	"testing"

	_ "github.com/memfit/memfit/device/cuda" // registers "cuda", the device these plans are for
	"github.com/memfit/memfit/memory"
)

// TestLlama8BTargets holds issue #33's targets on Llama 3.1 8B's shape (32
// blocks, width 4096, 32 heads, 8 key/value heads, SwiGLU 14336, a
// vocabulary of 128256, batch 1), -device cuda plans: LoRA rank 32 on
// every Linear layer over an nf4 base with -amp bf16 -checkpoint every fits
// 8 GiB at context 6,144, 16 GiB at 81,920 and 24 GiB at 163,840, and full
// fine-tuning fits 18 GiB at 8,192, each with the configuration -fit
// chooses there (-fit itself takes seconds to a minute: its choices,
// printed by `train ... -fit SIZE -plan`, are planned here directly).
// Plans are exact (TestPlanMatchesMeasuredPeak), so these are the
// allocator's bytes.
func TestLlama8BTargets(t *testing.T) {
	const shape = "-model llama -layers 32 -heads 32 -kv-heads 8 -width 4096 -hidden 14336 -vocab 128256 -batch 1 -device cuda"
	const lora = " -lora 32 -amp bf16 -checkpoint every -base nf4"
	for _, c := range []struct {
		name, flags string
		budget      int64
	}{
		{"lora/6144/8GiB", lora + " -context 6144 -optim adafactor -lr 0.01 -tile 2048", 8 << 30},
		{"lora/81920/16GiB", lora + " -context 81920 -tile 2048 -offload all", 16 << 30},
		{"lora/163840/24GiB", lora + " -context 163840 -tile 2048 -offload all", 24 << 30},
		{"full/8192/18GiB", " -context 8192 -optim adafactor -lr 0.01 -amp bf16 -weights bf16 -step-in-backward -offload activations", 18 << 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			if err := NewFlags("train", &cfg).Parse(strings.Fields(shape + c.flags)); err != nil {
				t.Fatal(err)
			}
			p, err := Plan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p.Total > c.budget {
				t.Errorf("%s: predicted peak %s, over %s", c.flags, memory.FormatBytes(p.Total), memory.FormatBytes(c.budget))
			}
			t.Logf("peak %s (parameters %s, activations %s, temporaries %s); host %s",
				memory.FormatBytes(p.Total), memory.FormatBytes(p.Parameter), memory.FormatBytes(p.Activation),
				memory.FormatBytes(p.Temporary), memory.FormatBytes(p.HostTotal))
		})
	}
	// The quickest of the searches, whole: 8 GiB at 6,144 tokens.
	t.Run("fit/6144/8GiB", func(t *testing.T) {
		cfg := Default()
		if err := NewFlags("train", &cfg).Parse(strings.Fields(shape + lora + " -context 6144")); err != nil {
			t.Fatal(err)
		}
		c, err := Fit(cfg, 8<<30)
		if err != nil {
			t.Fatal(err)
		}
		if c.Need() > 8<<30 {
			t.Errorf("-fit 8GiB chose %s with a peak of %s", c.Flags(cfg), memory.FormatBytes(c.Need()))
		}
		t.Logf("-fit 8GiB: %s (%s)", c.Flags(cfg), memory.FormatBytes(c.Need()))
	})
}
