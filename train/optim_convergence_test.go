package train

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/memfit/memfit/data"
)

// TestOptimizerConvergence is the CI-sized form of the optimizer quality
// targets (issue 22; the full GPT reference is in BENCHMARKS.md): a
// 2-layer GPT of width 64 on the fortunes text (the embedded default task
// where it is not installed), 150 steps from the same seed, and the
// final evaluation loss of adam8bit within 1% of f32 Adam's, adafactor
// (paper defaults, -lr 0.01 as the relative-step ceiling) within 3%, and
// Adam on bf16 weights (stochastic rounding, no f32 master) within 1%.
func TestOptimizerConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains three small models")
	}
	cfg := Default()
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Optim.Steps = "gpt", 2, 4, 64, 64, 16, 150
	cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Model.Dropout = true, 0, 0
	if _, err := os.Stat(data.FortunesDir + "/fortunes"); err == nil {
		cfg.Data.Path = data.FortunesDir + "/fortunes"
	}
	eval := func(optim string) float64 {
		c := cfg
		c.Optim.Name = optim
		if o, ok := strings.CutSuffix(optim, " -weights bf16"); ok {
			c.Optim.Name, c.Precision.Weights = o, "bf16"
		}
		tr := newTrainer(t, c)
		s, err := tr.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.Eval.Loss
	}
	ref := eval("adam")
	for _, c := range []struct {
		optim string
		tol   float64
	}{{"adam8bit", 0.01}, {"adafactor", 0.03}, {"adam -weights bf16", 0.01}} {
		got := eval(c.optim)
		d := (got - ref) / ref
		t.Logf("%s: eval loss %.4f, f32 adam %.4f (%+.2f%%)", c.optim, got, ref, 100*d)
		if d > c.tol {
			t.Errorf("%s: eval loss %.4f is %.2f%% above f32 adam's %.4f (allowed %.0f%%)", c.optim, got, 100*d, ref, 100*c.tol)
		}
	}
}
