package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/offload"
)

// offloadCases are configurations trained with and without -offload.
func offloadCases() []struct {
	name string
	cfg  Config
} {
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery, mlp.Data.ValSplit, mlp.Model.Dropout = 3, 64, 32, true, 0, 0.05, 0.1
	gpt := tinyGPT()
	gpt.Model.Layers = 3
	var cases []struct {
		name string
		cfg  Config
	}
	add := func(name string, base Config, f func(*Config)) {
		c := base
		f(&c)
		cases = append(cases, struct {
			name string
			cfg  Config
		}{name, c})
	}
	for _, off := range []string{"activations", "optimizer", "all"} {
		add("mlp/"+off, mlp, func(c *Config) { c.Memory.Offload.Mode = off })
		add("gpt/"+off, gpt, func(c *Config) { c.Memory.Offload.Mode = off })
		add("gpt/"+off+"/bf16-checkpoint-accum-clip", gpt, func(c *Config) {
			c.Memory.Offload.Mode, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum, c.Optim.Clip, c.Optim.Name = off, "bf16", "every", 2, 1, "adamw"
		})
		add("mlp/"+off+"/fp16-prefetch", mlp, func(c *Config) {
			c.Memory.Offload.Mode, c.Precision.AMP = off, "fp16"
			if c.OffloadsActivations() {
				c.Memory.Offload.Prefetch = 1 // refused without activations to bring back
			}
		})
	}
	cnn := Default()
	cnn.Model.Name, cnn.Model.Width, cnn.Optim.Batch, cnn.Output.Quiet, cnn.Output.EvalEvery, cnn.Data.ValSplit = "cnn", 32, 8, true, 0, 0.05
	add("cnn/all", cnn, func(c *Config) { c.Memory.Offload.Mode = "all" })
	add("gpt/activations/step-in-backward-freeze", gpt, func(c *Config) {
		c.Memory.Offload.Mode, c.Memory.StepInBackward, c.Memory.Freeze = "activations", true, []string{"blocks.0.*"}
	})
	add("gpt/activations/full-head-adam8bit", gpt, func(c *Config) {
		c.Memory.Offload.Mode, c.Memory.LMHead, c.Optim.Name = "activations", "full", "adam8bit"
	})
	add("gpt/all/adafactor-sqrt-prefetch2", gpt, func(c *Config) {
		c.Memory.Offload.Mode, c.Optim.Name, c.Memory.Checkpoint, c.Memory.Offload.Prefetch = "all", "adafactor", "sqrt", 2
	})
	// The host's update overlapping backward (no clipping, no fp16):
	// under accumulation, checkpointing and autocast, and with 8-bit
	// state and SGD.
	add("gpt/all/bf16-checkpoint-accum", gpt, func(c *Config) {
		c.Memory.Offload.Mode, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum, c.Optim.Name = "all", "bf16", "every", 2, "adamw"
	})
	add("gpt/optimizer/adam8bit-sqrt", gpt, func(c *Config) {
		c.Memory.Offload.Mode, c.Optim.Name, c.Memory.Checkpoint = "optimizer", "adam8bit", "sqrt"
	})
	add("mlp/optimizer/sgd-accum", mlp, func(c *Config) { c.Memory.Offload.Mode, c.Optim.Name, c.Memory.Accum = "optimizer", "sgd", 2 })
	return cases
}

// TestOffloadMatchesPlainRun: each step's loss and the final weights are
// bit for bit those of the run without offload; the optimizer's state is
// on the host (none on the device) with the master weights; the device
// holds fewer activation bytes; between steps nothing but parameters
// (and state) is left on either allocator.
func TestOffloadMatchesPlainRun(t *testing.T) {
	for _, tc := range offloadCases() {
		t.Run(tc.name, func(t *testing.T) {
			run := func(cfg Config) (*Trainer, []float64) {
				// Metrics: the gradient norm is logged, from the masters'
				// gradients after an overlapped backward.
				cfg.Optim.Steps, cfg.Output.Metrics = 3, filepath.Join(t.TempDir(), "m.jsonl")
				tr := newTrainer(t, cfg)
				var losses []float64
				tr.Hooks.AfterStep = func(tr *Trainer, r Record) error {
					losses = append(losses, r.Loss, r.GradNorm)
					// Between steps: no activation, gradient or
					// temporary left on either side.
					for _, a := range []*memory.Allocator{tr.Device.Memory(), hostMem(tr)} {
						if a == nil {
							continue
						}
						st := a.Stats()
						for _, c := range []memory.Category{memory.Activation, memory.Gradient, memory.Temporary} {
							if n := st.Category(c).Current; n != 0 {
								t.Errorf("step %d: %d %s bytes left", r.Step, n, c)
							}
						}
					}
					return nil
				}
				if _, err := tr.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				return tr, losses
			}
			plain := tc.cfg
			plain.Memory.Offload = OffloadOptions{}
			pTr, pLoss := run(plain)
			oTr, oLoss := run(tc.cfg)
			if !slices.Equal(bits64(oLoss), bits64(pLoss)) {
				t.Errorf("losses and gradient norms %v, without offload %v", oLoss, pLoss)
			}
			// From the second step on the host updates during backward,
			// wherever the update may start before every gradient exists.
			var ov offload.OverlapStats
			if oTr.offloader() != nil && oTr.offloader().opt != nil {
				ov = oTr.offloader().opt.OverlapStats()
			}
			c := oTr.Config
			if c.OffloadsOptimizer() && c.Optim.Clip == 0 && c.Precision.AMP != "fp16" && c.Optim.Name != "adafactor" {
				if ov.Steps != 3 || ov.Background == 0 {
					t.Errorf("overlap %+v, want 3 armed steps with updates during backward", ov)
				}
			} else if ov.Steps != 0 {
				t.Errorf("overlap %+v, want none", ov)
			}
			sameWeights(t, weights(t, pTr), weights(t, oTr))
			p, o := pTr.Peaks(), oTr.Peaks()
			if oTr.Config.OffloadsOptimizer() {
				if o.OptimizerState != 0 || o.HostOptimizerState != p.OptimizerState || o.HostParameter != p.Parameter {
					t.Errorf("optimizer state on the device %d, on the host %d (want %d), masters %d (want %d)", o.OptimizerState, o.HostOptimizerState, p.OptimizerState, o.HostParameter, p.Parameter)
				}
				if o.HostGradient != p.Gradient {
					t.Errorf("host gradient peak %d, want the device's gradients %d", o.HostGradient, p.Gradient)
				}
			}
			if oTr.Config.OffloadsActivations() {
				if o.HostActivation == 0 || o.Activation >= p.Activation {
					t.Errorf("activation peak on the device %d (without offload %d), on the host %d", o.Activation, p.Activation, o.HostActivation)
				}
			} else if o.HostActivation != 0 {
				t.Errorf("%d activation bytes on the host without -offload activations", o.HostActivation)
			}
			t.Logf("device peak %d → %d (activations %d → %d, optimizer state %d → %d); host %d", p.Total, o.Total, p.Activation, o.Activation, p.OptimizerState, o.OptimizerState, o.HostTotal)
		})
	}
}

func bits64(xs []float64) []uint64 {
	var b []uint64
	for _, x := range xs {
		b = append(b, math.Float64bits(x))
	}
	return b
}

func hostMem(tr *Trainer) *memory.Allocator {
	if tr.Host() == nil {
		return nil
	}
	return tr.Host().Memory()
}

// TestOffloadPlanMatchesMeasured: -plan with -offload predicts the
// device's peak within the tolerance of TestPlanMatchesMeasuredPeak, and
// the host's bytes by category exactly.
func TestOffloadPlanMatchesMeasured(t *testing.T) {
	for _, tc := range offloadCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Optim.Steps = planSteps
			pred, err := Plan(c)
			if err != nil {
				t.Fatal(err)
			}
			tr := newTrainer(t, c)
			if _, err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := tr.Peaks()
			if d := math.Abs(float64(pred.Total - got.Total)); d > 0.05*float64(got.Total) {
				t.Errorf("predicted device peak %d, measured %d (%.1f%% off)", pred.Total, got.Total, 100*d/float64(got.Total))
			}
			if pred.OptimizerState != got.OptimizerState || pred.Parameter != got.Parameter || pred.Gradient != got.Gradient {
				t.Errorf("predicted P/G/S %d/%d/%d bytes, measured %d/%d/%d", pred.Parameter, pred.Gradient, pred.OptimizerState, got.Parameter, got.Gradient, got.OptimizerState)
			}
			if pred.HostTotal != got.HostTotal || pred.HostParameter != got.HostParameter || pred.HostGradient != got.HostGradient ||
				pred.HostOptimizerState != got.HostOptimizerState || pred.HostActivation != got.HostActivation {
				t.Errorf("host: predicted %d (P/G/S/A %d/%d/%d/%d), measured %d (%d/%d/%d/%d)",
					pred.HostTotal, pred.HostParameter, pred.HostGradient, pred.HostOptimizerState, pred.HostActivation,
					got.HostTotal, got.HostParameter, got.HostGradient, got.HostOptimizerState, got.HostActivation)
			}
		})
	}
}

// TestPlanOffloadStaysOnMeta: a plan that hides capabilities (a meta
// device behind device.Without) still puts the host on a meta device:
// planning allocates nothing real.
func TestPlanOffloadStaysOnMeta(t *testing.T) {
	cfg := tinyGPT()
	cfg.Memory.Offload.Mode, cfg.Device.Without = "all", []string{device.CapAttention}
	cfg = cfg.Resolved()
	ds, err := openData(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev := device.Without(meta.New(0), cfg.Device.Without...)
	tr, err := assemble(cfg, dev, ds, &shapeBatches{ds: ds, cfg: cfg}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := tr.Host().Memory().Device(); got != "meta" {
		t.Errorf("planning host is a %s device", got)
	}
}

// TestFitOffloadsLast: a budget below every candidate that keeps state on
// the device, but above one that offloads, is met by offloading; a
// budget met without offloading is met without. The device is one with
// memory of its own (the meta device stands for a GPU here); on the CPU,
// whose memory is the host's, offloading saves nothing of the budget
// (TestFitCountsHostOnCPU).
func TestFitOffloadsLast(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Model.Layers, cfg.Optim.Name = 32, 64, 4, 0, 8, "sgd"
	cfg.Device.Name = "meta"
	plan := func(ck, w, off string) int64 {
		c := cfg
		c.Memory.Accum, c.Memory.Checkpoint, c.Precision.AMP, c.Precision.Weights, c.Memory.Offload.Mode = cfg.Optim.Batch, ck, "bf16", w, off
		p, err := Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	onDevice := min(plan("every", "f32", ""), plan("every", "bf16", ""), plan("sqrt", "bf16", ""))
	offloaded := plan("off", "bf16", "activations")
	if offloaded >= onDevice {
		t.Fatalf("offloading's plan %d is not below the device's smallest %d", offloaded, onDevice)
	}
	got, err := Fit(cfg, offloaded)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Config.OffloadsActivations() || got.Peak.Total > offloaded {
		t.Errorf("Fit(%d) chose -offload %q with peak %d", offloaded, got.Config.Memory.Offload.Mode, got.Peak.Total)
	}
	if got, err := Fit(cfg, onDevice); err != nil || got.Config.offloads() {
		t.Errorf("Fit(%d) chose -offload %q (%v); it fits without", onDevice, got.Config.Memory.Offload.Mode, err)
	}
}

// TestOffloadResume: a run resumed with the optimizer offloaded continues
// bit for bit (the host copies follow the loaded weights).
func TestOffloadResume(t *testing.T) {
	cfg := tinyGPT()
	cfg.Memory.Offload.Mode, cfg.Optim.Name, cfg.Model.Dropout = "all", "adamw", 0
	dir := t.TempDir()
	full := cfg
	full.Optim.Steps = 4
	fTr := newTrainer(t, full)
	if _, err := fTr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	half := cfg
	half.Optim.Steps, half.Output.Save = 2, filepath.Join(dir, "ck.safetensors")
	if _, err := newTrainer(t, half).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	rest := cfg
	rest.Optim.Steps, rest.Output.Resume = 4, half.Output.Save
	rTr := newTrainer(t, rest)
	if _, err := rTr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameWeights(t, weights(t, fTr), weights(t, rTr))
}

func TestOffloadValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"unknown", func(c *Config) { c.Memory.Offload.Mode = "gradients" }, "-offload gradients: unknown"},
		{"negative prefetch", func(c *Config) { c.Memory.Offload.Mode, c.Memory.Offload.Prefetch = "activations", -1 }, "-offload-prefetch -1"},
		{"step in backward", func(c *Config) { c.Memory.Offload.Mode, c.Memory.StepInBackward = "optimizer", true }, "-step-in-backward"},
		{"dist", func(c *Config) { c.Memory.Offload.Mode, c.Parallel.Engine = "all", "mpi" }, "-dist"},
		{"freeze", func(c *Config) { c.Memory.Offload.Mode, c.Memory.Freeze = "optimizer", []string{"layers.0.*"} }, "-freeze"},
		{"bf16 weights", func(c *Config) { c.Memory.Offload.Mode, c.Precision.Weights = "all", "bf16" }, "-weights bf16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			c.mod(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate: %v, want an error mentioning %q", err, c.want)
			}
		})
	}
	for _, ok := range []string{"", "off", "activations", "optimizer", "all"} {
		cfg := Default()
		cfg.Memory.Offload.Mode = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("-offload %q: %v", ok, err)
		}
	}
}

// TestOffloadHostOutOfMemory: host memory too small for the offloaded
// optimizer is an error that names the host, at once: more micro-batches
// would not shrink what it holds, so the step is not retried.
func TestOffloadHostOutOfMemory(t *testing.T) {
	hostOptions = []cpu.Option{cpu.Capacity(320 << 10)} // the master weights (4P = 134 KiB) and their gradients, not Adam's state
	defer func() { hostOptions = nil }()
	cfg := tinyGPT()
	cfg.Memory.Offload.Mode, cfg.Optim.Steps = "optimizer", 2
	var log bytes.Buffer
	tr, err := New(cfg.Resolved(), cpu.New(), &log)
	if err == nil {
		defer tr.Close()
		_, err = tr.Run(context.Background())
	}
	var oom *memory.OOMError
	if !errors.As(err, &oom) || oom.Device != "host" || !strings.Contains(err.Error(), "device host") || !strings.Contains(err.Error(), "do not shrink") {
		t.Fatalf("a small host: %v; want an out-of-memory error on the host", err)
	}
	if strings.Contains(log.String(), "retrying") {
		t.Errorf("the step was retried in more micro-batches:\n%s", log.String())
	}
}

// TestFitCountsHostOnCPU: on the CPU device host memory is the same RAM,
// so -fit counts an offloading plan's host bytes in the budget: a budget
// that holds the offloaded plan's device part alone is not met by
// offloading, and the plan reports both together.
func TestFitCountsHostOnCPU(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Model.Layers = 32, 64, 4, 0, 8
	off := cfg
	off.Memory.Offload.Mode = "all"
	p, err := Plan(off)
	if err != nil {
		t.Fatal(err)
	}
	if p.HostTotal == 0 {
		t.Fatal("the offloaded plan has no host memory")
	}
	got, err := Fit(cfg, p.Total)
	if err == nil && got.Config.offloads() && got.Need() > p.Total {
		t.Errorf("Fit(%d) chose -offload %s needing %d with its host memory", p.Total, got.Config.Memory.Offload.Mode, got.Need())
	}
	var b strings.Builder
	WritePlan(&b, off, p)
	if !strings.Contains(b.String(), "together") {
		t.Errorf("the plan does not add device and host:\n%s", b.String())
	}
}
