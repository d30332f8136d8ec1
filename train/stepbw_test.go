package train

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/memory"
)

// The step inside backward is the ordinary step, parameter by parameter:
// the same losses and the same weights, bit for bit, with every optimizer
// rule (momentum, weight decay, Adam's bias correction, the 8-bit and
// factored states) and with checkpointing, bf16 and freezing.
func TestStepInBackwardEqualsStep(t *testing.T) {
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery, mlp.Data.ValSplit = 2, 64, 32, true, 0, 0
	gpt := tinyGPT()
	gpt.Output.EvalEvery, gpt.Data.ValSplit = 0, 0
	for _, c := range []struct {
		name string
		base Config
		f    func(*Config)
	}{
		{"mlp sgd momentum wd", mlp, func(c *Config) { c.Optim.Name, c.Optim.WD, c.Optim.LR = "sgd", 0.01, 0.05 }},
		{"mlp adam", mlp, func(c *Config) { c.Optim.Name = "adam" }},
		{"mlp adamw cosine", mlp, func(c *Config) {
			c.Optim.Name, c.Optim.WD, c.Optim.Schedule, c.Optim.Warmup = "adamw", 0.1, "cosine", 2
		}},
		{"gpt adam", gpt, func(c *Config) {}},
		{"gpt adamw8bit bf16 checkpoint", gpt, func(c *Config) { c.Optim.Name, c.Precision.AMP, c.Memory.Checkpoint = "adamw8bit", "bf16", "every" }},
		{"gpt adafactor freeze", gpt, func(c *Config) { c.Optim.Name, c.Memory.Freeze = "adafactor", []string{"embed.*"} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.base
			c.f(&cfg)
			cfg.Optim.Steps = 5
			run := func(inBackward bool) (map[string][]uint32, []float64, Summary) {
				cc := cfg
				cc.Memory.StepInBackward = inBackward
				tr := newTrainer(t, cc)
				var losses []float64
				tr.Hooks.AfterStep = func(_ *Trainer, r Record) error {
					losses = append(losses, r.Loss)
					return nil
				}
				s, err := tr.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return weights(t, tr), losses, s
			}
			w0, l0, s0 := run(false)
			w1, l1, s1 := run(true)
			for i := range l0 {
				if l0[i] != l1[i] {
					t.Errorf("step %d loss %v, in backward %v", i+1, l0[i], l1[i])
				}
			}
			for name, a := range w0 {
				b := w1[name]
				for j := range a {
					if a[j] != b[j] {
						t.Fatalf("%s[%d] differs after %d steps", name, j, cfg.Optim.Steps)
					}
				}
			}
			g0, g1 := s0.PeakBytes.Gradient, s1.PeakBytes.Gradient
			t.Logf("gradient peak %d bytes, in backward %d", g0, g1)
			if g1 >= g0 {
				t.Errorf("gradient peak %d in backward, not below the ordinary step's %d", g1, g0)
			}
		})
	}
}

// The gradient peak is that of the parameters whose gradients become
// final together, not of all of them: on the MLP (one Linear's weight
// and bias at a time, the largest 4 MiB of 1024×1024 weights) at most the
// largest layer's.
func TestStepInBackwardGradientPeak(t *testing.T) {
	cfg := Default()
	cfg.Model.Layers, cfg.Model.Width, cfg.Optim.Batch, cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Optim.Steps = 3, 1024, 32, true, 0, 0, 2
	cfg.Memory.StepInBackward = true
	tr := newTrainer(t, cfg)
	s, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var largest, all int64
	for _, p := range tr.Model.Parameters() {
		all += p.Bytes()
		largest = max(largest, p.Bytes())
	}
	layer := largest + 1024*4 // the largest weight and its bias
	if g := s.PeakBytes.Gradient; g > layer {
		t.Errorf("gradient peak %d bytes: above the largest layer's %d (all gradients: %d)", g, layer, all)
	}
	t.Logf("gradient peak %d bytes; the largest parameter %d; all gradients %d", s.PeakBytes.Gradient, largest, all)
}

// What needs every gradient before any update is refused, naming the
// conflict.
func TestStepInBackwardRefusals(t *testing.T) {
	for _, c := range []struct {
		f    func(*Config)
		want string
	}{
		{func(c *Config) { c.Memory.Accum = 2 }, "-accum 2"},
		{func(c *Config) { c.Precision.AMP = "fp16" }, "-amp fp16"},
		{func(c *Config) { c.Optim.Clip = 1 }, "-clip"},
		{func(c *Config) { c.Parallel.Engine = "mpi" }, "-dist"},
	} {
		cfg := Default()
		cfg.Memory.StepInBackward = true
		c.f(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "-step-in-backward") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming -step-in-backward and %s", c, err, c.want)
		}
	}
}

// A step whose loss is not finite updates no parameter, even though the
// updates would run during backward.
func TestStepInBackwardNonFiniteLoss(t *testing.T) {
	cfg := tinyGPT()
	cfg.Optim.Steps, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Memory.StepInBackward = 3, 0, 0, true
	tr := newTrainer(t, cfg)
	// Poison the embedding so the loss is NaN.
	emb := tr.Model.Parameters()[0]
	vals := emb.Float32s()
	for i := range vals {
		vals[i] = float32(math.NaN())
	}
	if err := emb.SetFloat32s(vals); err != nil {
		t.Fatal(err)
	}
	before := weights(t, tr)
	_, err := tr.Run(context.Background())
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("run with a NaN loss: %v, want ErrNonFinite", err)
	}
	after := weights(t, tr)
	for name, a := range before {
		b := after[name]
		for j := range a {
			if a[j] != b[j] {
				t.Fatalf("%s[%d] changed in a step whose loss was NaN", name, j)
			}
		}
	}
}

// -weights bf16 stores every parameter in 2 bytes, exactly, with nothing
// else of the parameters' size kept in F32; the dtypes it cannot serve
// are refused.
func TestBF16WeightsBytes(t *testing.T) {
	cfg := tinyGPT()
	cfg.Optim.Steps, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Precision.Weights, cfg.Precision.AMP = 2, 0, 0, "bf16", "bf16"
	tr := newTrainer(t, cfg)
	s, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range tr.Model.Parameters() {
		if p.DType().String() != "bf16" {
			t.Errorf("%s is %v", p.Name(), p.DType())
		}
		n += int64(p.Len())
	}
	if got := s.PeakBytes.Parameter; got != 2*n {
		t.Errorf("parameters peak at %d bytes, want 2P = %d", got, 2*n)
	}
	for _, c := range []struct {
		f    func(*Config)
		want string
	}{
		{func(c *Config) { c.Model.Name = "cnn" }, "-weights bf16"},
		{func(c *Config) { c.Precision.Weights = "f8" }, "-weights f8"},
		{func(c *Config) { c.Parallel.Engine, c.Parallel.Zero = "mpi", 3 }, "-zero 3"}, // stages 1 and 2 take bf16 weights
	} {
		bad := Default()
		bad.Precision.Weights = "bf16"
		c.f(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", bad.Precision.Weights, err, c.want)
		}
	}
}

// With amp on, frozen parameters are held in the autocast dtype: a weight
// that does not train keeps no F32 copy. Unfrozen, it trains in F32 again.
func TestFrozenHeldInAutocastDType(t *testing.T) {
	cfg := tinyGPT()
	cfg.Optim.Steps, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Precision.AMP = 4, 0, 0, "bf16"
	cfg.Memory.Freeze, cfg.Memory.UnfreezeAt = []string{"embed.*", "blocks.0.*"}, 3
	tr := newTrainer(t, cfg)
	var frozen, trainable int64
	for _, p := range tr.Model.Parameters() {
		want := "f32"
		if !p.RequiresGrad() {
			want = "bf16"
			frozen += int64(p.Len())
		} else {
			trainable += int64(p.Len())
		}
		if p.DType().String() != want {
			t.Errorf("%s is %v, want %s", p.Name(), p.DType(), want)
		}
	}
	if frozen == 0 {
		t.Fatal("nothing frozen")
	}
	if got, want := tr.Device.Memory().Stats().Category(memory.Parameter).Current, 4*trainable+2*frozen; got != want {
		t.Errorf("parameters take %d bytes, want %d (frozen in bf16)", got, want)
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Model.Parameters() {
		if p.DType().String() != "f32" || !p.RequiresGrad() {
			t.Errorf("after -unfreeze-at: %s is %v (trains: %v)", p.Name(), p.DType(), p.RequiresGrad())
		}
	}
}

// Resuming across -weights converts the weights and says so: exactly
// from bf16 to f32, rounded the other way.
func TestResumeAcrossWeightDTypes(t *testing.T) {
	for _, c := range []struct{ from, to, how string }{{"bf16", "f32", "exactly"}, {"f32", "bf16", "rounded"}} {
		cfg := tinyGPT()
		cfg.Optim.Steps, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Precision.Weights = 2, 0, 0, c.from
		cfg.Output.Save = filepath.Join(t.TempDir(), "s.st")
		tr := newTrainer(t, cfg)
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		saved := weights(t, tr)
		cfg.Precision.Weights, cfg.Output.Resume, cfg.Optim.Steps = c.to, cfg.Output.Save, 3
		var log strings.Builder
		cfg = cfg.Resolved()
		dev, err := NewDevice(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := New(cfg, dev, &log)
		if err != nil {
			t.Fatal(err)
		}
		defer back.Close()
		if !strings.Contains(log.String(), "-weights "+c.from+" run continue as -weights "+c.to) || !strings.Contains(log.String(), c.how) {
			t.Errorf("%s -> %s: log %q does not say the weights were converted %s", c.from, c.to, log.String(), c.how)
		}
		if c.from == "bf16" {
			sameWeights(t, saved, weights(t, back))
		}
	}
}
