package amp_test

import (
	"context"
	"os"
	"testing"

	"github.com/memfit/memfit/train"
)

// gptReference is the GPT the issues measure: 6 layers, 6 heads, dim 384,
// context 256, batch 16 (planned on the meta device: nothing computes).
func gptReference(amp string) train.Config {
	c := train.Default()
	c.Model.Name, c.Model.Layers, c.Model.Heads, c.Model.Width, c.Model.Context, c.Optim.Batch, c.Precision.AMP = "gpt", 6, 6, 384, 256, 16, amp
	return c
}

func TestAutocastHalvesActivations(t *testing.T) {
	f32, err := train.Plan(gptReference("off"))
	if err != nil {
		t.Fatal(err)
	}
	for _, amp := range []string{"bf16", "fp16"} {
		p, err := train.Plan(gptReference(amp))
		if err != nil {
			t.Fatal(err)
		}
		ratio := float64(p.Activation) / float64(f32.Activation)
		if ratio > 0.55 {
			t.Errorf("%s: activation peak %d, f32 %d: ratio %.3f > 0.55", amp, p.Activation, f32.Activation, ratio)
		}
		t.Logf("%s: activations %.1f MiB vs f32 %.1f MiB (%.3f)", amp, float64(p.Activation)/(1<<20), float64(f32.Activation)/(1<<20), ratio)
		if p.Parameter != f32.Parameter || p.OptimizerState != f32.OptimizerState {
			t.Errorf("%s changed master-weight or optimizer bytes: %+v vs %+v", amp, p, f32)
		}
	}
}

// finalLoss trains cfg and returns the mean loss of the last n steps.
func finalLoss(t *testing.T, cfg train.Config, n int) float64 {
	t.Helper()
	cfg.Output.Quiet, cfg.Output.EvalEvery = true, 0
	cfg = cfg.Resolved()
	dev, err := train.NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(cfg, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var losses []float64
	tr.Hooks.AfterStep = func(_ *train.Trainer, r train.Record) error {
		losses = append(losses, r.Loss)
		return nil
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, l := range losses[len(losses)-n:] {
		sum += l
	}
	return sum / float64(n)
}

func TestConvergenceParity(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains six small models")
	}
	mlp := train.Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Optim.Steps = 2, 128, 64, 300
	gpt := train.Default()
	gpt.Model.Name, gpt.Model.Layers, gpt.Model.Heads, gpt.Model.Width, gpt.Model.Context, gpt.Optim.Batch, gpt.Optim.Steps = "gpt", 2, 4, 64, 64, 16, 150
	if _, err := os.Stat("/usr/share/games/fortunes/fortunes"); err == nil {
		gpt.Data.Path = "/usr/share/games/fortunes/fortunes"
	}
	for _, c := range []struct {
		name string
		cfg  train.Config
	}{{"mlp", mlp}, {"gpt", gpt}} {
		ref := finalLoss(t, c.cfg, 20)
		for _, amp := range []string{"bf16", "fp16"} {
			cfg := c.cfg
			cfg.Precision.AMP = amp
			got := finalLoss(t, cfg, 20)
			if d := (got - ref) / ref; d > 0.02 || d < -0.02 {
				t.Errorf("%s %s: final loss %.4f vs f32 %.4f (%+.1f%%)", c.name, amp, got, ref, 100*d)
			}
			t.Logf("%s %s: final loss %.4f vs f32 %.4f", c.name, amp, got, ref)
		}
	}
}
