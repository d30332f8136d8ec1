package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/tensor"
)

// tinyGPT is a GPT small enough for many runs per test, with dropout on so
// that resuming must reproduce the masks too.
func tinyGPT() Config {
	c := Default()
	c.Model.Name, c.Model.Layers, c.Model.Width, c.Model.Heads, c.Model.Context = "gpt", 2, 32, 4, 16
	c.Optim.Batch, c.Model.Dropout, c.Output.Quiet, c.Output.EvalEvery, c.Data.ValSplit = 8, 0.1, true, 0, 0.05
	return c
}

func newTrainer(t *testing.T, cfg Config) *Trainer {
	t.Helper()
	cfg = cfg.Resolved()
	dev, err := NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(cfg, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func weights(t *testing.T, tr *Trainer) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, p := range tr.Model.Parameters() {
		var b []uint32
		for _, v := range p.Float32s() {
			b = append(b, math.Float32bits(v))
		}
		out[p.Name()] = b
	}
	return out
}

func sameWeights(t *testing.T, a, b map[string][]uint32) {
	t.Helper()
	for name, wa := range a {
		wb := b[name]
		for i := range wa {
			if wa[i] != wb[i] {
				t.Fatalf("%s[%d]: %#x vs %#x", name, i, wa[i], wb[i])
			}
		}
	}
}

func TestInterruptAndResumeIsBitwise(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
	}{
		{"gpt-dropout-accum", func(c *Config) { c.Memory.Accum = 2 }},
		{"mlp-fp16-scaler", func(c *Config) {
			*c = Default()
			c.Model.Width, c.Model.Layers, c.Optim.Batch, c.Output.Quiet, c.Output.EvalEvery, c.Precision.AMP = 32, 2, 16, true, 0, "fp16"
		}},
		{"gpt-unfreeze", func(c *Config) { c.Memory.Freeze, c.Memory.UnfreezeAt, c.Optim.Name = []string{"embed.*"}, 6, "adamw" }},
		{"gpt-adamw8bit-unfreeze-bf16", func(c *Config) {
			c.Memory.Freeze, c.Memory.UnfreezeAt, c.Optim.Name, c.Precision.AMP, c.Memory.Checkpoint = []string{"embed.*"}, 6, "adamw8bit", "bf16", "every"
		}},
		{"gpt-adam8bit-fp16-accum", func(c *Config) { c.Optim.Name, c.Precision.AMP, c.Memory.Accum = "adam8bit", "fp16", 2 }},
		{"gpt-adafactor-accum", func(c *Config) { c.Optim.Name, c.Memory.Accum, c.Memory.Checkpoint = "adafactor", 2, "sqrt" }},
		{"gpt-bf16-weights-adamw-accum", func(c *Config) {
			c.Precision.Weights, c.Optim.Name, c.Precision.AMP, c.Memory.Accum = "bf16", "adamw", "bf16", 2
		}},
		{"gpt-bf16-weights-adam8bit-step-in-backward", func(c *Config) {
			c.Precision.Weights, c.Optim.Name, c.Memory.Checkpoint, c.Memory.StepInBackward = "bf16", "adam8bit", "every", true
		}},
		{"gpt-lora-dropout-accum", func(c *Config) { c.Memory.LoRA.Rank, c.Memory.LoRA.Dropout, c.Memory.Accum = 4, 0.1, 2 }},
		{"gpt-lora-bf16-checkpoint", func(c *Config) {
			c.Memory.LoRA.Rank, c.Memory.LoRA.Alpha, c.Precision.AMP, c.Memory.Checkpoint, c.Optim.Name = 2, 4, "bf16", "every", "adamw"
		}},
		{"mlp-bf16-weights-sgd", func(c *Config) {
			*c = Default()
			c.Model.Width, c.Model.Layers, c.Optim.Batch, c.Output.Quiet, c.Output.EvalEvery, c.Precision.Weights, c.Optim.Name = 32, 2, 16, true, 0, "bf16", "sgd"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyGPT()
			c.mod(&cfg)
			cfg.Optim.Steps = 10
			dir := t.TempDir()

			whole := newTrainer(t, cfg)
			if _, err := whole.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := weights(t, whole)

			cfg.Output.Save = filepath.Join(dir, "state.safetensors")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := newTrainer(t, cfg)
			first.Hooks.AfterStep = func(tr *Trainer, r Record) error {
				if r.Step == 4 {
					cancel() // as SIGINT does
				}
				return nil
			}
			_, err := first.Run(ctx)
			if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), cfg.Output.Save) {
				t.Fatalf("interrupted run: %v", err)
			}
			if first.Step() != 4 {
				t.Fatalf("stopped at step %d, want 4", first.Step())
			}

			cfg.Output.Resume = cfg.Output.Save
			second := newTrainer(t, cfg)
			if second.Step() != 4 {
				t.Fatalf("resumed at step %d", second.Step())
			}
			if _, err := second.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			sameWeights(t, want, weights(t, second))
		})
	}
}

func TestResumeRejectsOtherModels(t *testing.T) {
	cfg := tinyGPT()
	cfg.Optim.Steps = 1
	cfg.Output.Save = filepath.Join(t.TempDir(), "s")
	if _, err := newTrainer(t, cfg).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Output.Save, other.Output.Resume, other.Model.Width = "", cfg.Output.Save, 64
	dev, _ := NewDevice(other)
	_, err := New(other, dev, nil)
	if err == nil || !strings.Contains(err.Error(), "checkpoint is for") {
		t.Errorf("resuming a different width: %v", err)
	}
	// A truncated checkpoint is an error naming it, not a panic.
	b, _ := os.ReadFile(cfg.Output.Save)
	os.WriteFile(cfg.Output.Save, b[:len(b)/2], 0o644)
	same := cfg
	same.Output.Save, same.Output.Resume = "", cfg.Output.Save
	_, err = New(same, dev, nil)
	if err == nil || !strings.Contains(err.Error(), cfg.Output.Save) {
		t.Errorf("truncated state: %v", err)
	}
}

func TestNonFiniteLoss(t *testing.T) {
	cfg := tinyGPT()
	cfg.Optim.Steps = 3
	tr := newTrainer(t, cfg)
	tr.Model.Parameters()[0].Fill(math.NaN())
	_, err := tr.Run(context.Background())
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "step 1") {
		t.Errorf("NaN loss gave %v, want an error naming step 1", err)
	}
	cfg.Optim.SkipNonFinite = true
	tr = newTrainer(t, cfg)
	tr.Model.Parameters()[0].Fill(math.NaN())
	s, err := tr.Run(context.Background())
	if err != nil || s.SkippedSteps != 3 {
		t.Errorf("skipping: %v, %d skipped", err, s.SkippedSteps)
	}
}

// TestOOMRecoveryRaisesAccumulation: a step that does not fit is retried
// in more micro-batches, with or without LoRA.
func TestOOMRecoveryRaisesAccumulation(t *testing.T) {
	for _, lora := range []int{0, 2} {
		t.Run(fmt.Sprintf("lora %d", lora), func(t *testing.T) { oomRecovery(t, lora) })
	}
}

// TestEvaluateFitsAfterRecovery: a LoRA GPT under 1 MiB trains only in
// single-example micro-batches, and its evaluation fits too: it runs in
// batches of a micro-batch's size (the whole batch's no-grad forward
// needs more than the limit).
func TestEvaluateFitsAfterRecovery(t *testing.T) {
	cfg := Default()
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch = "gpt", 2, 2, 64, 32, 8
	cfg.Optim.Steps, cfg.Memory.LoRA.Rank, cfg.Device.MemLimit, cfg.Output.EvalEvery, cfg.Output.Quiet = 3, 2, 1<<20, 0, true
	tr := newTrainer(t, cfg)
	s, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Accum() != cfg.Optim.Batch || !(s.Eval.Loss > 0) {
		t.Errorf("accum %d (want %d), evaluation %+v", tr.Accum(), cfg.Optim.Batch, s.Eval)
	}
}

func oomRecovery(t *testing.T, lora int) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Optim.Steps, cfg.Memory.LoRA.Rank = 64, 64, 16, 0, 3, lora
	full, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c4 := cfg
	c4.Memory.Accum = 4
	small, err := Plan(c4)
	if err != nil {
		t.Fatal(err)
	}
	// A limit the full batch cannot meet but four micro-batches can (the
	// limit is on reserved memory, which rounds blocks up).
	cfg.Device.MemLimit = (full.Total + 2*small.Total) / 3
	if cfg.Device.MemLimit >= full.Total || cfg.Device.MemLimit <= small.Total {
		t.Fatalf("no room between %d and %d", small.Total, full.Total)
	}
	var log bytes.Buffer
	dev, _ := NewDevice(cfg)
	tr, err := New(cfg, dev, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s, err := tr.Run(context.Background())
	if err != nil {
		t.Fatalf("run under %d bytes: %v\n%s", cfg.Device.MemLimit, err, log.String())
	}
	if tr.Accum() < 2 || s.OOMRetries == 0 || !strings.Contains(log.String(), "out of memory") || !strings.Contains(log.String(), "-accum") {
		t.Errorf("accum %d, retries %d, log:\n%s", tr.Accum(), s.OOMRetries, log.String())
	}
	t.Logf("limit %d: %s", cfg.Device.MemLimit, log.String())
}

// When even single-example micro-batches do not fit, the error's hint
// leaves out what the run already tried (-accum, a smaller -batch, the
// -checkpoint and -amp it has on) and names what it has not.
func TestOOMHintAfterRecoveryNamesOnlyUntried(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Optim.Steps = 16, 256, 4, 0, 1
	cfg.Memory.Checkpoint = "every"
	one := cfg
	one.Memory.Accum = 4
	small, err := Plan(one)
	if err != nil {
		t.Fatal(err)
	}
	// Just short of what single-example micro-batches need.
	cfg.Device.MemLimit = small.Total * 9 / 10
	var log bytes.Buffer
	dev, _ := NewDevice(cfg)
	tr, err := New(cfg, dev, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Run(context.Background())
	if !tensor.IsOOM(err) {
		t.Fatalf("run under %d bytes: %v, want out of memory\n%s", cfg.Device.MemLimit, err, log.String())
	}
	msg := err.Error()
	t.Logf("limit %d bytes (plan %d):\n%s%s", cfg.Device.MemLimit, small.Total, log.String(), msg)
	if !strings.Contains(msg, "micro-batches of 1 example") || !strings.Contains(msg, "try: -amp bf16") {
		t.Errorf("error does not suggest -amp alone:\n%s", msg)
	}
	for _, tried := range []string{"-accum 4", "-checkpoint sqrt", "smaller -batch"} {
		if strings.Contains(msg, tried) {
			t.Errorf("error suggests %q, which the run already tried:\n%s", tried, msg)
		}
	}
}

func TestPlanMatchesMeasuredPeak(t *testing.T) {
	base := tinyGPT()
	base.Model.Dropout = 0
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery = 2, 64, 32, true, 0
	cnn := Default()
	cnn.Model.Name, cnn.Model.Width, cnn.Optim.Batch, cnn.Output.Quiet, cnn.Output.EvalEvery = "cnn", 256, 16, true, 0
	var cases []Config
	add := func(c Config, f func(*Config)) {
		f(&c)
		cases = append(cases, c)
	}
	add(mlp, func(c *Config) {})
	add(mlp, func(c *Config) { c.Precision.AMP = "bf16" })
	add(mlp, func(c *Config) { c.Memory.Accum = 4; c.Optim.Name = "sgd" })
	add(cnn, func(c *Config) {})
	add(cnn, func(c *Config) { c.Precision.AMP = "fp16" })
	add(base, func(c *Config) {})
	add(base, func(c *Config) { c.Precision.AMP = "bf16" })
	add(base, func(c *Config) { c.Memory.Checkpoint = "every" })
	add(base, func(c *Config) { c.Memory.Checkpoint = "sqrt"; c.Precision.AMP = "bf16" })
	add(base, func(c *Config) { c.Memory.Accum = 4 })
	add(base, func(c *Config) { c.Memory.Freeze = []string{"embed.*", "blocks.0.*"} })
	add(base, func(c *Config) { c.Memory.Freeze = []string{"embed.*"}; c.Memory.Accum = 2; c.Memory.Checkpoint = "1" })
	add(base, func(c *Config) { c.Model.Layers = 4; c.Memory.Checkpoint = "2"; c.Precision.AMP = "fp16" })
	add(base, func(c *Config) { c.Memory.LMHead = "full" })
	add(base, func(c *Config) { c.Memory.LMHeadChunkRows = 24 })
	add(base, func(c *Config) {
		c.Memory.LMHeadChunkRows = 24
		c.Precision.AMP = "bf16"
		c.Memory.Checkpoint = "every"
		c.Memory.Accum = 4
	})
	add(base, func(c *Config) { c.Optim.Name = "adam8bit" })
	add(base, func(c *Config) {
		c.Optim.Name = "adamw8bit"
		c.Precision.AMP = "bf16"
		c.Memory.Checkpoint = "every"
		c.Memory.Accum = 2
	})
	add(base, func(c *Config) {
		c.Optim.Name = "adamw8bit"
		c.Memory.Freeze = []string{"embed.*"}
		c.Precision.AMP = "fp16"
	})
	add(base, func(c *Config) { c.Optim.Name = "adafactor" })
	add(mlp, func(c *Config) { c.Memory.StepInBackward = true })
	add(mlp, func(c *Config) { c.Precision.Weights = "bf16" })
	add(base, func(c *Config) {
		c.Precision.Weights = "bf16"
		c.Precision.AMP = "bf16"
		c.Memory.Checkpoint = "every"
		c.Memory.Accum = 2
	})
	add(base, func(c *Config) {
		c.Precision.Weights = "bf16"
		c.Optim.Name = "adafactor"
		c.Memory.StepInBackward = true
	})
	add(base, func(c *Config) { c.Memory.StepInBackward = true })
	add(base, func(c *Config) {
		c.Memory.StepInBackward = true
		c.Precision.AMP = "bf16"
		c.Memory.Checkpoint = "every"
		c.Optim.Name = "adamw8bit"
	})
	add(base, func(c *Config) {
		c.Memory.StepInBackward = true
		c.Memory.Freeze = []string{"blocks.0.*"}
		c.Optim.Name = "sgd"
	})
	add(base, func(c *Config) {
		c.Optim.Name = "adafactor"
		c.Precision.AMP = "bf16"
		c.Memory.Checkpoint = "sqrt"
		c.Memory.Accum = 4
		c.Memory.Freeze = []string{"blocks.0.*"}
	})
	add(base, func(c *Config) { c.Memory.LoRA.Rank = 4 })
	add(base, func(c *Config) {
		c.Memory.LoRA.Rank, c.Memory.LoRA.Targets, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum = 2, []string{"*.mlp.fc"}, "bf16", "every", 2
	})
	add(mlp, func(c *Config) { c.Memory.LoRA.Rank, c.Precision.AMP = 8, "fp16" })
	add(base, func(c *Config) { c.Memory.LoRA.Rank, c.Memory.Offload.Mode, c.Precision.AMP = 4, "all", "bf16" })
	for _, c := range cases {
		c.Optim.Steps = planSteps
		name := modelKey(c) + " optim=" + c.Optim.Name + " amp=" + c.Precision.AMP + " ckpt=" + c.Memory.Checkpoint + " accum=" + string(rune('0'+c.Memory.Accum)) + " freeze=" + strings.Join(c.Memory.Freeze, ",") + " lora=" + strconv.Itoa(c.Memory.LoRA.Rank) + " head=" + c.Memory.LMHead + "/" + strconv.Itoa(c.Memory.LMHeadChunkRows)
		t.Run(name, func(t *testing.T) {
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
				t.Errorf("predicted peak %d, measured %d (%.1f%% off)", pred.Total, got.Total, 100*d/float64(got.Total))
			}
			if pred.OptimizerState != got.OptimizerState || pred.Parameter != got.Parameter || pred.Gradient != got.Gradient {
				t.Errorf("predicted P/G/S %d/%d/%d bytes, measured %d/%d/%d", pred.Parameter, pred.Gradient, pred.OptimizerState, got.Parameter, got.Gradient, got.OptimizerState)
			}
		})
	}
}

func fashionDir(t *testing.T) string {
	if testing.Short() {
		t.Skip("-short: skipping a full epoch of Fashion-MNIST")
	}
	dir := data.FashionMNISTDir
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not found in %s (apt-get install dataset-fashion-mnist)", dir)
	}
	return dir
}

func TestFashionMNISTAccuracy(t *testing.T) {
	dir := fashionDir(t)
	for _, c := range []struct {
		model string
		want  float64
	}{{"mlp", 0.85}, {"cnn", 0.87}} {
		t.Run(c.model, func(t *testing.T) {
			cfg := Default()
			cfg.Model.Name, cfg.Data.Path, cfg.Optim.Epochs, cfg.Output.Quiet = c.model, dir, 1, true
			tr := newTrainer(t, cfg)
			s, err := tr.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.Eval.Accuracy == nil || *s.Eval.Accuracy < c.want {
				t.Errorf("test accuracy %v after one epoch, want >= %v", s.Eval.Accuracy, c.want)
			}
			t.Logf("%s: test accuracy %.4f, %.0f samples/s", c.model, *s.Eval.Accuracy, s.SamplesPerSec)
		})
	}
}

func TestFitChoosesWhatFits(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout = 64, 64, 16, 0
	full, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	budget := full.Total * 3 / 4
	c, err := Fit(cfg, budget)
	if err != nil {
		t.Fatal(err)
	}
	if c.Peak.Total > budget || (c.Config.Memory.Accum == cfg.Memory.Accum && c.Config.Memory.Checkpoint == cfg.Memory.Checkpoint && c.Config.Precision.AMP == cfg.Precision.AMP) {
		t.Fatalf("Fit(%d) chose %+v with peak %d", budget, c.Config, c.Peak.Total)
	}
	// What Fit chose fits when run for real.
	c.Config.Optim.Steps = planSteps
	tr := newTrainer(t, c.Config)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tr.Peaks().Total; got > budget {
		t.Errorf("measured peak %d exceeds the budget %d", got, budget)
	}
	t.Logf("budget %d: -accum %d -checkpoint %s -amp %s, peak %d", budget, c.Config.Memory.Accum, c.Config.Memory.Checkpoint, c.Config.Precision.AMP, c.Peak.Total)
}

// TestFitSwitchesOptimizerLast: a budget below every f32-Adam candidate
// but above an 8-bit one gets adam8bit; a budget every Adam fits keeps
// Adam.
func TestFitSwitchesOptimizerLast(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Model.Layers = 64, 16, 4, 0, 4
	smallest := func(optim string) int64 {
		c := cfg
		c.Optim.Name, c.Memory.Accum, c.Memory.Checkpoint, c.Precision.AMP = optim, cfg.Optim.Batch, "every", "bf16"
		p, err := Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	adam, adam8 := smallest("adam"), smallest("adam8bit")
	if adam8 >= adam {
		t.Fatalf("adam8bit's smallest plan %d is not below adam's %d", adam8, adam)
	}
	c, err := Fit(cfg, adam8)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Optim.Name != "adam8bit" || c.Peak.Total > adam8 {
		t.Errorf("Fit(%d) chose -optim %s with peak %d", adam8, c.Config.Optim.Name, c.Peak.Total)
	}
	if c, err = Fit(cfg, adam); err != nil || c.Config.Optim.Name != "adam" {
		t.Errorf("Fit(%d) chose -optim %s (%v); Adam fits", adam, c.Config.Optim.Name, err)
	}
}

func TestScalerUpdatesOncePerWindow(t *testing.T) {
	cfg := tinyGPT()
	cfg.Precision.AMP, cfg.Memory.Accum, cfg.Optim.Steps, cfg.Model.Dropout = "fp16", 4, 6, 0
	tr := newTrainer(t, cfg)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := tr.Scaler.State()
	if st.GoodSteps+st.Skipped != 6 {
		t.Errorf("scaler saw %d clean + %d skipped steps over 6 windows of 4 micro-batches: it must update once per window", st.GoodSteps, st.Skipped)
	}
}

// TestFitSkipsWhatTheStateExceeds: where a plan's parameters and optimizer
// state alone exceed the budget, -fit plans no other candidate that
// differs from it only in settings that keep them (micro-batches,
// checkpointing, tiles, the step inside backward), and still says what
// the smallest plan was.
func TestFitSkipsWhatTheStateExceeds(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout = 0
	var exact []*fitAxis
	for _, tc := range techniques {
		if tc.fit != nil && tc.fit.tier == 0 {
			exact = append(exact, tc.fit)
		}
	}
	seen := map[string]int{}
	planned = func(c Config) { seen[stateKey(c, exact)]++ }
	defer func() { planned = nil }()
	_, err := Fit(cfg, 1<<10)
	if err == nil || !strings.Contains(err.Error(), "nothing fits") {
		t.Fatalf("Fit(1 KiB): %v", err)
	}
	if len(seen) == 0 {
		t.Fatal("nothing planned")
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%d plans of one model state over the budget: %s", n, k)
		}
	}
	// The search offers several settings of those axes: they were skipped.
	c := cfg.Resolved()
	cands := 1
	for _, a := range exact {
		if a.keepsState != nil {
			cands *= len(a.options(c))
		}
	}
	if cands < 2 {
		t.Fatalf("the exact axes that keep the state offer %d candidates: nothing to skip", cands)
	}
	t.Logf("%d model states planned once each; %d candidates of each", len(seen), cands)
}
