//go:build cuda || cudaemu

package train

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda" // registers "cuda"
)

// TestTechniquesMatchCPU is the technique half of the device conformance
// suite (device/devicetest is the kernel half): each memory-saving
// technique trains a few steps on the CPU and on the GPU from the same
// seed, and the two must agree on every loss, on the final weights, and
// exactly on the bytes of parameters, gradients and optimizer state. The
// kernels share one counter-based RNG, so initial weights and dropout
// masks are the same on both devices. The CPU runs without the fused
// kernels the GPU lacks (device.Lacks), so that both take the same path.
func TestTechniquesMatchCPU(t *testing.T) {
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery, mlp.Data.ValSplit = 2, 128, 32, true, 0, 0.05
	gpt := tinyGPT()
	shard := fixtureData(t)
	family := func(fixture string) Config {
		c := initLlama(filepath.Join("..", "hf", "testdata", fixture))
		c.Data.Path = shard
		c, _, err := c.ApplyInit()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		name  string
		tol   float64 // relative: each step's loss, and all weights together
		apply func(c *Config)
		base  Config
	}{
		{"mlp f32", 1e-4, func(c *Config) {}, mlp},
		{"mlp bf16", 5e-3, func(c *Config) { c.Precision.AMP = "bf16" }, mlp},
		{"mlp fp16", 5e-3, func(c *Config) { c.Precision.AMP = "fp16" }, mlp},
		{"mlp accum 4", 1e-4, func(c *Config) { c.Memory.Accum = 4 }, mlp},
		{"mlp freeze", 1e-4, func(c *Config) { c.Memory.Freeze = []string{"layers.0.*"} }, mlp},
		{"mlp adamw8bit", 1e-3, func(c *Config) { c.Optim.Name = "adamw8bit" }, mlp},
		{"gpt adafactor", 1e-4, func(c *Config) { c.Optim.Name = "adafactor" }, gpt},
		{"gpt bf16 weights", 5e-3, func(c *Config) { c.Precision.Weights = "bf16"; c.Precision.AMP = "bf16" }, gpt},
		{"gpt step in backward", 1e-4, func(c *Config) { c.Memory.StepInBackward = true; c.Memory.Checkpoint = "every" }, gpt},
		{"gpt adam8bit bf16", 5e-3, func(c *Config) { c.Optim.Name = "adam8bit"; c.Precision.AMP = "bf16" }, gpt},
		{"gpt f32", 1e-4, func(c *Config) {}, gpt},
		{"gpt bf16", 5e-3, func(c *Config) { c.Precision.AMP = "bf16" }, gpt},
		{"gpt checkpoint every", 1e-4, func(c *Config) { c.Memory.Checkpoint = "every" }, gpt},
		{"gpt checkpoint+accum+bf16", 5e-3, func(c *Config) { c.Memory.Checkpoint = "sqrt"; c.Memory.Accum = 2; c.Precision.AMP = "bf16" }, gpt},
		{"gpt freeze", 1e-4, func(c *Config) { c.Memory.Freeze = []string{"embed.*", "blocks.0.*"} }, gpt},
		{"gpt freeze bf16 (frozen held in bf16)", 5e-3, func(c *Config) { c.Memory.Freeze, c.Precision.AMP = []string{"embed.*", "blocks.0.*"}, "bf16" }, gpt},
		{"gpt offload all", 1e-4, func(c *Config) { c.Memory.Offload.Mode = "all" }, gpt},
		{"gpt offload activations checkpoint bf16 prefetch", 5e-3, func(c *Config) {
			c.Memory.Offload.Mode, c.Memory.Checkpoint, c.Precision.AMP, c.Memory.Offload.Prefetch = "activations", "every", "bf16", 1
		}, gpt},
		{"mlp offload optimizer fp16", 5e-3, func(c *Config) { c.Memory.Offload.Mode, c.Precision.AMP = "optimizer", "fp16" }, mlp},
		// The decoder families: soft caps and sliding windows (the
		// kernels' starts) on both devices, head norms, fused
		// projections, partial rotary embeddings and longrope.
		{"gemma2 f32", 1e-4, func(c *Config) {}, family("gemma2-f32")},
		{"gemma3 lora bf16 checkpoint", 5e-3, func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.AMP, c.Memory.Checkpoint = 4, "bf16", "every"
		}, family("gemma3-f32")},
		{"phi3 f32", 1e-4, func(c *Config) {}, family("phi3-f32")},
		{"qwen2 sliding lora nf4 bf16", 5e-3, func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "nf4", "bf16" }, family("qwen2-swa-f32")},
		// The frozen base streamed from pinned host memory on the copy
		// stream, block by block (-offload base).
		{"gpt lora nf4 bf16 checkpoint offload activations,base", 5e-3, func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Offload.Mode = 4, "nf4", "bf16", "every", "activations,base"
		}, gpt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.base
			tc.apply(&cfg)
			cfg.Optim.Steps = 6
			if cuda.Emulated {
				// The CPU emulator runs each CUDA thread as a fiber: no
				// final evaluation over the validation split.
				cfg.Data.ValSplit = 0
			}
			run := func(dev string) (*Trainer, []float64, Summary) {
				c := cfg
				c.Device.Name = dev
				if dev == "cpu" {
					// The same path as the GPU's: compositions where it lacks a
					// fused kernel, so that activation bytes compare.
					c.Device.Without = device.Lacks("cuda")
				}
				tr := newTrainer(t, c) // closed again at cleanup: Close is idempotent
				var losses []float64
				tr.Hooks.AfterStep = func(_ *Trainer, r Record) error {
					losses = append(losses, r.Loss)
					return nil
				}
				s, err := tr.Run(context.Background())
				if err != nil {
					t.Fatalf("%s: %v", dev, err)
				}
				return tr, losses, s
			}
			cpuTr, cpuLoss, cpuSum := run("cpu")
			gpuTr, gpuLoss, gpuSum := run("cuda")
			if len(cpuLoss) != len(gpuLoss) {
				t.Fatalf("%d steps on cpu, %d on cuda", len(cpuLoss), len(gpuLoss))
			}
			for i := range cpuLoss {
				if d := math.Abs(cpuLoss[i]-gpuLoss[i]) / math.Max(math.Abs(cpuLoss[i]), 1e-6); d > tc.tol {
					t.Errorf("step %d loss: cuda %.7g, cpu %.7g (relative %.2g > %.2g)", i+1, gpuLoss[i], cpuLoss[i], d, tc.tol)
				}
			}
			// All weights as one vector: per tensor, Adam turns rounding
			// noise in a gradient that is zero in exact arithmetic (the key
			// bias's, softmax ignores it) into full ±lr steps, so a 16-bit
			// run differs on such a tensor by O(1) relative.
			var num, den float64
			cw, gw := cpuTr.Model.Parameters(), gpuTr.Model.Parameters()
			for i, p := range cw {
				a, b := p.Float32s(), gw[i].Float32s()
				for j := range a {
					num += (float64(a[j]) - float64(b[j])) * (float64(a[j]) - float64(b[j]))
					den += float64(a[j]) * float64(a[j])
				}
			}
			rel := math.Sqrt(num / den)
			if rel > tc.tol {
				t.Errorf("weights after %d steps: relative difference %.2g > %.2g", cfg.Optim.Steps, rel, tc.tol)
			}
			c, g := cpuSum.PeakBytes, gpuSum.PeakBytes
			if c.Parameter != g.Parameter || c.Gradient != g.Gradient || c.OptimizerState != g.OptimizerState {
				t.Errorf("peak P/G/S bytes: cuda %d/%d/%d, cpu %d/%d/%d", g.Parameter, g.Gradient, g.OptimizerState, c.Parameter, c.Gradient, c.OptimizerState)
			}
			if d := math.Abs(float64(g.Activation-c.Activation)) / float64(c.Activation); d > 0.05 {
				t.Errorf("peak activation bytes: cuda %d, cpu %d", g.Activation, c.Activation)
			}
			// Offloaded state: the same bytes on the host (pinned memory
			// for the GPU run), activations within the same tolerance.
			if c.HostParameter != g.HostParameter || c.HostGradient != g.HostGradient || c.HostOptimizerState != g.HostOptimizerState {
				t.Errorf("host peak P/G/S bytes: cuda %d/%d/%d, cpu %d/%d/%d", g.HostParameter, g.HostGradient, g.HostOptimizerState, c.HostParameter, c.HostGradient, c.HostOptimizerState)
			}
			if d := math.Abs(float64(g.HostActivation - c.HostActivation)); d > 0.05*float64(c.HostActivation) {
				t.Errorf("host activation bytes: cuda %d, cpu %d", g.HostActivation, c.HostActivation)
			}
			t.Logf("weights relative difference %.2g; loss %.5f (cpu %.5f); peak activation cuda %d cpu %d; total cuda %d cpu %d", rel, gpuLoss[len(gpuLoss)-1], cpuLoss[len(cpuLoss)-1], g.Activation, c.Activation, g.Total, c.Total)
			gpuTr.Close()
			cpuTr.Close()
			if st := gpuTr.Device.Memory().Stats(); st.Allocated.Current != 0 {
				t.Errorf("cuda: %d bytes still allocated after Close", st.Allocated.Current)
			}
		})
	}
}
