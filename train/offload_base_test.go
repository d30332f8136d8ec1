package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/memory"
)

// trace is a run's loss and every parameter's bits after each step.
type trace struct {
	losses  []uint64
	weights []map[string][]uint32
}

// traceRun trains cfg and records its trace.
func traceRun(t *testing.T, cfg Config) (*Trainer, trace) {
	t.Helper()
	tr := newTrainer(t, cfg)
	var tc trace
	tr.Hooks.AfterStep = func(tr *Trainer, r Record) error {
		tc.losses = append(tc.losses, math.Float64bits(r.Loss))
		tc.weights = append(tc.weights, weights(t, tr))
		return nil
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tr, tc
}

// runAsPlanned plans cfg, runs it and reports a measured peak other than
// the plan's; it returns the trainer that ran.
func runAsPlanned(t *testing.T, cfg Config) *Trainer {
	t.Helper()
	pred, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, cfg)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tr.Peaks(); got != pred {
		t.Errorf("predicted %+v\nmeasured  %+v", pred, got)
	}
	return tr
}

// sameTrace reports every step whose loss or weights differ between got
// and want, bit for bit.
func sameTrace(t *testing.T, got, want trace) {
	t.Helper()
	if !slices.Equal(got.losses, want.losses) {
		t.Errorf("losses differ:\n got %v\nwant %v", got.losses, want.losses)
	}
	for i := range want.weights {
		for name, w := range want.weights[i] {
			if !slices.Equal(got.weights[i][name], w) {
				t.Errorf("step %d: %s differs", i+1, name)
			}
		}
	}
}

// offloadBaseCases are runs over a frozen base, each of which streams it
// with -offload base added to its -offload.
func offloadBaseCases(t *testing.T) []struct {
	name string
	cfg  Config
} {
	gpt := tinyGPT()
	gpt.Model.Dropout = 0
	long := tinyLlama()
	long.Model.Context, long.Optim.Batch, long.Data.ValSplit = 4096, 1, 0
	set := func(c Config, f func(*Config)) Config { f(&c); return c }
	return []struct {
		name string
		cfg  Config
	}{
		{"llama lora nf4", set(tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base = 4, "nf4" })},
		{"llama lora nf4 bf16 checkpoint accum", set(tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum = 4, "nf4", "bf16", "every", 2
		})},
		{"llama lora int8 bf16 checkpoint sqrt activations", set(tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Offload.Mode = 4, "int8", "bf16", "sqrt", "activations"
			c.Model.Layers = 4
		})},
		{"llama lora bf16 offload all", set(tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Offload.Mode = 4, "bf16", "bf16", "all"
		})},
		{"llama lora nf4 step-in-backward", set(tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.StepInBackward = 4, "nf4", "bf16", true
		})},
		{"llama lora f32 base", set(tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "f32", "bf16"
		})},
		{"llama lora nf4 tile checkpoint", set(long, func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Tile = 4, "nf4", "bf16", "every", 2048
		})},
		{"gpt freeze nf4 bf16 eval", set(gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.Base, c.Precision.AMP, c.Output.EvalEvery = []string{"blocks.0.*"}, "nf4", "bf16", 2
		})},
		{"gpt freeze mlp bf16 held", set(gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.AMP, c.Memory.Checkpoint = []string{"blocks.*.mlp.*"}, "bf16", "every"
		})},
	}
}

// withBase adds base to c's -offload.
func withBase(c Config) Config {
	if c.offloads() {
		c.Memory.Offload.Mode += ",base"
	} else {
		c.Memory.Offload.Mode = "base"
	}
	return c
}

// TestOffloadBaseIsBitwise: every loss and every parameter after every
// step are the run's without -offload base, bit for bit (the gradients,
// which the update turns into the weights, with them), whatever else the
// run does: checkpointing, accumulation, tiles, offloaded activations and
// optimizer, the step inside backward, evaluations; the streamed weights
// read on the host all along.
func TestOffloadBaseIsBitwise(t *testing.T) {
	for _, c := range offloadBaseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Optim.Steps = 4
			if cfg.Memory.Tile > 0 {
				// 4096 tokens a step: the trace's second pass is the one
				// that prefetches.
				if testing.Short() {
					t.Skip("4096-token steps")
				}
				cfg.Optim.Steps = 2
			}
			_, want := traceRun(t, cfg)
			tr, got := traceRun(t, withBase(cfg))
			sameTrace(t, got, want)
			p := tr.offloader()
			if p == nil || p.base == nil || p.base.Blocks() == 0 {
				t.Fatal("no base streamed")
			}
			if p.base.Fetched() != 0 {
				t.Errorf("%d blocks left on the device between steps", p.base.Fetched())
			}
			st := p.base.Stats()
			if st.Prefetches == 0 {
				t.Errorf("%+v: nothing prefetched", st)
			}
		})
	}
}

// TestOffloadBasePeaks: the device holds the resident parameters and at
// most two blocks' streamed weights, the host all of them (under
// parameter), and the plan says so to the byte.
func TestOffloadBasePeaks(t *testing.T) {
	cfg := tinyLlama()
	cfg.Model.Layers = 4
	cfg.Memory.LoRA.Rank, cfg.Precision.Base, cfg.Precision.AMP, cfg.Memory.Checkpoint = 4, "nf4", "bf16", "every"
	cfg.Optim.Steps = planSteps
	plain := newTrainer(t, cfg)
	if _, err := plain.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	on := withBase(cfg)
	tr := runAsPlanned(t, on)
	got := tr.Peaks() // the plan's, checked
	b := tr.offloader().base
	all, block := b.Bytes(), b.MaxBlockBytes()
	if b.Blocks() != 4 || all != 4*block {
		t.Fatalf("%d blocks of %d bytes streamed, %d in all", b.Blocks(), block, all)
	}
	if want := plain.Peaks().Parameter - all + 2*block; got.Parameter != want {
		t.Errorf("device parameter peak %d, want %d: the resident %d and two blocks of %d", got.Parameter, want, plain.Peaks().Parameter-all, block)
	}
	if got.HostParameter != all || got.HostTotal != all {
		t.Errorf("host parameter peak %d, total %d; want the base's %d", got.HostParameter, got.HostTotal, all)
	}
	if tr.Device.Memory().Stats().Category(memory.Parameter).Current != plain.Peaks().Parameter-all {
		t.Error("streamed weights left on the device after the run")
	}
	var sb strings.Builder
	WritePlan(&sb, on, got)
	if !strings.Contains(sb.String(), "host memory (-offload base)") {
		t.Errorf("the plan shows no host memory:\n%s", sb.String())
	}
}

// TestOffloadBaseSaveResume: a -freeze run that streams bf16 weights
// saves them (read on the host) and resumes into them (written on the
// host): the resumed run goes on as the uninterrupted one.
func TestOffloadBaseSaveResume(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout = 0
	cfg.Memory.Freeze, cfg.Precision.AMP, cfg.Precision.Base = []string{"blocks.0.*"}, "bf16", "bf16"
	cfg = withBase(cfg)
	cfg.Optim.Steps = 4
	_, want := traceRun(t, cfg)
	path := t.TempDir() + "/ck.safetensors"
	first := cfg
	first.Optim.Steps, first.Output.Save = 2, path
	traceRun(t, first)
	second := cfg
	second.Output.Resume = path
	_, got := traceRun(t, second)
	if !slices.Equal(got.losses, want.losses[2:]) {
		t.Errorf("resumed losses %v, want %v", got.losses, want.losses[2:])
	}
	for name, w := range want.weights[3] {
		if !slices.Equal(got.weights[1][name], w) {
			t.Errorf("%s differs after resuming", name)
		}
	}
}

// TestOffloadBaseChecks: what -offload base takes, named by flag.
func TestOffloadBaseChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string // "" accepted
	}{
		{"nothing frozen", func(c *Config) { c.Memory.Offload.Mode = "base" }, "nothing is frozen"},
		{"generate", func(c *Config) {
			c.Memory.Offload.Mode, c.Memory.LoRA.Rank, c.Generate.Tokens, c.Generate.Prompt = "base", 4, 8, "x"
		}, "KV cache"},
		{"unknown", func(c *Config) { c.Memory.Offload.Mode = "activations,weights" }, `unknown "weights"`},
		{"twice", func(c *Config) { c.Memory.Offload.Mode = "base,base" }, "named twice"},
		{"all and optimizer", func(c *Config) { c.Memory.Offload.Mode = "all,optimizer" }, "all is activations and optimizer"},
		{"activations and all", func(c *Config) { c.Memory.Offload.Mode = "activations,all" }, "all is activations and optimizer"},
		{"off and base", func(c *Config) { c.Memory.Offload.Mode = "off,base" }, "name it alone"},
		{"lora", func(c *Config) { c.Memory.Offload.Mode, c.Memory.LoRA.Rank = "base", 4 }, ""},
		{"freeze all base", func(c *Config) { c.Memory.Offload.Mode, c.Memory.Freeze = "all,base", []string{"blocks.0.*"} }, "-freeze"},
		{"lora activations base", func(c *Config) { c.Memory.Offload.Mode, c.Memory.LoRA.Rank = "base,activations", 4 }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyLlama()
			c.set(&cfg)
			cfg = cfg.Resolved()
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%v, want an error naming %q", err, c.want)
			}
		})
	}
	on := tinyLlama()
	on.Memory.Offload.Mode, on.Memory.LoRA.Rank = "activations,base", 4
	if !on.OffloadsActivations() || !on.OffloadsBase() || on.OffloadsOptimizer() {
		t.Error("activations,base read wrong")
	}
	on.Memory.Offload.Mode = "all,base"
	if !on.OffloadsActivations() || !on.OffloadsBase() || !on.OffloadsOptimizer() {
		t.Error("all,base read wrong")
	}
}

// TestOffloadBaseFit: -fit streams the base only after offloading all
// does not fit, and never on a device whose memory is the host's.
func TestOffloadBaseFit(t *testing.T) {
	c := tinyLlama()
	c.Memory.LoRA.Rank = 4
	opts := offloading.fit.options(c)
	if len(opts) != 2 || opts[1].Memory.Offload.Mode != "all" {
		t.Errorf("on the cpu: %v", modes(opts))
	}
	c.Device.Name = "cuda"
	opts = offloading.fit.options(c)
	if got := modes(opts); !slices.Equal(got, []string{"off", "all", "all,base"}) {
		t.Errorf("on cuda: %v", got)
	}
	c.Memory.Offload.Mode = "activations"
	if got := modes(offloading.fit.options(c)); !slices.Equal(got, []string{"activations", "activations,base"}) {
		t.Errorf("on cuda with -offload activations: %v", got)
	}
}

func modes(cs []Config) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Memory.Offload.Mode)
	}
	return out
}

// TestOffloadBaseExport: -save-format hf fetches the streamed base for
// the export (the adapters merge into it on the device), which writes
// the bytes the run without streaming writes, and sends it home again.
func TestOffloadBaseExport(t *testing.T) {
	export := func(cfg Config) []byte {
		cfg.Optim.Steps, cfg.Output.SaveFormat, cfg.Output.Save = 2, "hf", filepath.Join(t.TempDir(), "llama")
		tr := newTrainer(t, cfg)
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p := tr.offloader(); p != nil && p.base.Fetched() != 0 {
			t.Errorf("%d blocks left on the device after the export", p.base.Fetched())
		}
		b, err := os.ReadFile(filepath.Join(cfg.Output.Save, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := tinyLlama()
	cfg.Memory.LoRA.Rank, cfg.Precision.Base, cfg.Precision.AMP = 4, "nf4", "bf16"
	if want, got := export(cfg), export(withBase(cfg)); !bytes.Equal(got, want) {
		t.Error("the export differs with the base streamed")
	}
}

// TestOffloadBaseDistributed: each rank streams its own base under DDP
// and ZeRO 1 and 2 (which take the trainable parameters only), and ends
// with the weights of the ranks without streaming, bit for bit.
func TestOffloadBaseDistributed(t *testing.T) {
	cfg := tinyLlama()
	cfg.Memory.LoRA.Rank, cfg.Precision.Base, cfg.Precision.AMP, cfg.Memory.Checkpoint = 4, "bf16", "bf16", "every"
	cfg.Optim.Steps, cfg.Data.Workers = 3, 1
	for _, zero := range []int{0, 2} {
		t.Run(fmt.Sprintf("zero %d", zero), func(t *testing.T) {
			c := cfg
			c.Parallel.Zero = zero
			plain, _ := runRanks(t, c, 2, nil)
			streamed, _ := runRanks(t, withBase(c), 2, nil)
			for r := range 2 {
				if !slices.Equal(readWeights(streamed[r]), readWeights(plain[r])) {
					t.Errorf("rank %d: the weights differ with the base streamed", r)
				}
				if streamed[r].offloader().base.Blocks() == 0 {
					t.Errorf("rank %d streams nothing", r)
				}
			}
		})
	}
}
