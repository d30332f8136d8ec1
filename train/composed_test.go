package train

import (
	"context"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
)

// A device without the fused kernels trains through their compositions
// (device.Without hides them): every technique must give the same losses
// and weights within float tolerance, the same bytes of parameters,
// gradients and optimizer state, and the fallbacks' temporaries must show
// in the accounting.
func TestComposedKernelsMatchFused(t *testing.T) {
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery, mlp.Data.ValSplit = 2, 64, 32, true, 0, 0.05
	gpt := tinyGPT()
	for _, tc := range []struct {
		name  string
		tol   float64
		base  Config
		apply func(c *Config)
	}{
		{"mlp adamw", 1e-4, mlp, func(c *Config) { c.Optim.Name = "adamw"; c.Optim.WD = 0.01 }},
		{"mlp sgd", 1e-4, mlp, func(c *Config) { c.Optim.Name = "sgd" }},
		{"gpt f32", 1e-4, gpt, func(c *Config) {}},
		{"gpt bf16 checkpoint", 5e-3, gpt, func(c *Config) { c.Precision.AMP = "bf16"; c.Memory.Checkpoint = "every" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.base
			tc.apply(&cfg)
			cfg.Optim.Steps = 4
			cfg = cfg.Resolved()
			run := func(dev device.Device) (*Trainer, []float64, Summary) {
				tr, err := New(cfg, dev, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(tr.Close)
				var losses []float64
				tr.Hooks.AfterStep = func(_ *Trainer, r Record) error {
					losses = append(losses, r.Loss)
					return nil
				}
				s, err := tr.Run(context.Background())
				if err != nil {
					t.Fatalf("%s: %v", dev.Name(), err)
				}
				return tr, losses, s
			}
			fTr, fLoss, fSum := run(cpu.New())
			cTr, cLoss, cSum := run(device.Without(cpu.New()))
			for i := range fLoss {
				if d := math.Abs(fLoss[i]-cLoss[i]) / math.Max(math.Abs(fLoss[i]), 1e-6); d > tc.tol {
					t.Errorf("step %d loss: composed %.7g, fused %.7g", i+1, cLoss[i], fLoss[i])
				}
			}
			var num, den float64
			cw := cTr.Model.Parameters()
			for i, p := range fTr.Model.Parameters() {
				a, b := p.Float32s(), cw[i].Float32s()
				for j := range a {
					num += (float64(a[j]) - float64(b[j])) * (float64(a[j]) - float64(b[j]))
					den += float64(a[j]) * float64(a[j])
				}
			}
			if rel := math.Sqrt(num / den); rel > tc.tol {
				t.Errorf("weights after %d steps: relative difference %.2g > %.2g", cfg.Optim.Steps, rel, tc.tol)
			}
			f, c := fSum.PeakBytes, cSum.PeakBytes
			if f.Parameter != c.Parameter || f.Gradient != c.Gradient || f.OptimizerState != c.OptimizerState {
				t.Errorf("peak P/G/S bytes: composed %d/%d/%d, fused %d/%d/%d", c.Parameter, c.Gradient, c.OptimizerState, f.Parameter, f.Gradient, f.OptimizerState)
			}
			ft := fTr.Device.Memory().Stats().Category(memory.Temporary).Allocated
			ct := cTr.Device.Memory().Stats().Category(memory.Temporary).Allocated
			if ct <= ft {
				t.Errorf("temporary bytes allocated over the run: composed %d, fused %d: the fallbacks' temporaries are not accounted", ct, ft)
			}
		})
	}
}

// The planner takes the paths the run will: -without attention plans the
// composed attention (its [B, H, T, T] probabilities included), and so
// does a plan for a device that lacks the capability.
func TestPlanHonoursWithout(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Context, cfg.Model.Dropout = 64, 0
	fused, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Device.Without = []string{device.CapAttention}
	composed, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	probs := int64(cfg.Optim.Batch * cfg.Model.Heads * cfg.Model.Context * cfg.Model.Context * 4)
	if composed.Activation-fused.Activation < probs {
		t.Errorf("activation peak %d with the composed attention, %d fused: want at least one layer's probabilities (%d) apart", composed.Activation, fused.Activation, probs)
	}
	// And the run itself takes the composed path.
	dev, err := NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if device.Has(dev, device.CapAttention) {
		t.Fatal("-without attention left the CPU's fused attention in place")
	}
}
