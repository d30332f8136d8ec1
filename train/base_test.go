package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/internal/sttest"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// tinyLlama is a Llama small enough for many runs per test.
func tinyLlama() Config {
	c := Default()
	c.Model = ModelConfig{Name: "llama", Layers: 2, Width: 64, Heads: 4, KVHeads: 2, Context: 32}
	c.Optim.Batch, c.Output.Quiet, c.Output.EvalEvery = 8, true, 0
	return c
}

// initLlama is tinyLlama imported from a checkpoint: the shape flags as
// they default, so that -init sets them.
func initLlama(path string) Config {
	c := tinyLlama()
	c.Model = Default().Model
	c.Model.Init, c.Model.Context = path, 32
	return c
}

// fixtureData is a token shard within the hf fixtures' vocabulary of 50.
func fixtureData(t *testing.T) string {
	t.Helper()
	tokens := make([]int32, 4096)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 50)
	}
	path := filepath.Join(t.TempDir(), "tokens.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := data.WriteShard(f, tokens); err != nil {
		t.Fatal(err)
	}
	return path
}

// llamaF32 is hf's tiny Llama fixture (an untied head); llamaNF4 is the
// same in bitsandbytes' 4-bit layout (scripts/bnb_fixture.py).
var (
	llamaF32 = filepath.Join("..", "hf", "testdata", "llama-f32")
	llamaNF4 = filepath.Join("..", "hf", "testdata", "llama-nf4")
)

// TestBaseChecks: -base's own values and what it needs, named by flag.
func TestBaseChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"unknown", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank = "fp4", 4 }, "-base fp4: unknown storage"},
		{"head alone", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank = "+head", 4 }, "-base +head: +head follows nf4 or int8"},
		{"head bf16", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank, c.Precision.AMP = "bf16+head", 4, "bf16" }, "-base bf16+head: +head goes with nf4 or int8"},
		{"nothing frozen", func(c *Config) { c.Precision.Base = "nf4" }, "-base nf4: nothing is frozen"},
		{"ddp", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank, c.Parallel.Engine = "int8", 4, "mpi" }, "-base int8: -dist without -zero"},
		{"head of an mlp", func(c *Config) {
			*c = Default()
			c.Precision.Base, c.Memory.Freeze = "nf4+head", []string{"layers.0.*"}
		}, "-base nf4+head: -model mlp has no LM head"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyLlama()
			c.set(&cfg)
			cfg = cfg.Resolved()
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want %q", err, c.want)
			}
		})
	}
	// -zero 1 and 2 take the trainable parameters only: allowed.
	cfg := tinyLlama()
	cfg.Precision.Base, cfg.Memory.LoRA.Rank, cfg.Parallel.Engine, cfg.Parallel.Zero = "nf4", 4, "mpi", 1
	if cfg = cfg.Resolved(); cfg.Validate() != nil {
		err := cfg.Validate()
		t.Errorf("-base nf4 -zero 1: %v", err)
	}
}

// TestPlanMatchesMeasuredPeakBase: plans with -base are the measured
// peaks exactly (the meta device counts device.Bytes of the quantized
// formats), built from a seed or imported, quantized as built, with LoRA
// or frozen layers, under the techniques that touch frozen weights.
func TestPlanMatchesMeasuredPeakBase(t *testing.T) {
	gpt := tinyGPT()
	gpt.Model.Dropout = 0
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery = 2, 64, 32, true, 0
	shard := fixtureData(t)
	init := func(path string) Config {
		c := initLlama(path)
		c.Data.Path = shard
		c, _, err := c.ApplyInit()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		name string
		cfg  Config
		set  func(*Config)
	}{
		{"llama lora nf4", tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base = 4, "nf4" }},
		{"llama lora nf4 bf16 checkpoint accum", tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum = 4, "nf4", "bf16", "every", 2
		}},
		{"llama lora int8 fp16", tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "int8", "fp16" }},
		{"llama lora nf4 step-in-backward", tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.StepInBackward, c.Precision.AMP = 4, "nf4", true, "bf16"
		}},
		{"llama lora bf16", tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "bf16", "bf16" }},
		{"llama lora f32", tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "f32", "bf16" }},
		{"gpt freeze nf4 bf16", gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.Base, c.Precision.AMP = []string{"blocks.0.*"}, "nf4", "bf16"
		}},
		{"gpt freeze mlp int8 sgd", gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.Base, c.Optim.Name = []string{"blocks.*.mlp.*"}, "int8", "sgd"
		}},
		{"gpt freeze bf16", gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.Base, c.Precision.AMP = []string{"blocks.1.*"}, "bf16", "bf16"
		}},
		{"gpt lora nf4 offload all", gpt, func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.Offload.Mode, c.Precision.AMP = 4, "nf4", "all", "bf16"
		}},
		{"mlp freeze nf4", mlp, func(c *Config) { c.Memory.Freeze, c.Precision.Base = []string{"layers.0.*"}, "nf4" }},
		{"init lora nf4+head full head", init(llamaF32), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.LMHead, c.Precision.AMP = 4, "nf4+head", "full", "bf16"
		}},
		{"init bitsandbytes lora nf4", init(llamaNF4), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "nf4", "bf16" }},
		// The base streamed from host memory (-offload base): at most
		// two blocks' weights on the device, all of them on the host.
		{"llama lora nf4 offload base", tinyLlama(), func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.Offload.Mode = 4, "nf4", "base" }},
		{"llama lora nf4 bf16 checkpoint accum offload base", tinyLlama(), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum, c.Memory.Offload.Mode = 4, "nf4", "bf16", "every", 2, "base"
		}},
		{"llama lora int8 checkpoint sqrt offload activations,base", tinyLlama(), func(c *Config) {
			c.Model.Layers, c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Offload.Mode = 4, 4, "int8", "bf16", "sqrt", "activations,base"
		}},
		{"gpt lora nf4 offload all,base", gpt, func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Memory.Offload.Mode, c.Precision.AMP = 4, "nf4", "all,base", "bf16"
		}},
		{"gpt freeze bf16 offload base", gpt, func(c *Config) {
			c.Memory.Freeze, c.Precision.Base, c.Precision.AMP, c.Memory.Offload.Mode = []string{"blocks.1.*"}, "bf16", "bf16", "base"
		}},
		{"init bitsandbytes lora nf4 offload base step-in-backward", init(llamaNF4), func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Offload.Mode, c.Memory.StepInBackward = 4, "nf4", "bf16", "base", true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			c.set(&cfg)
			cfg.Optim.Steps = planSteps
			tr := runAsPlanned(t, cfg)
			q := cfg.baseQuant()
			n := 0
			for _, p := range tr.Model.Parameters() {
				if p.DType().IsQuantized() {
					n++
					if p.DType() != q || p.RequiresGrad() || p.Grad() != nil {
						t.Errorf("%s: %v, requires grad %v", p.Name(), p.DType(), p.RequiresGrad())
					}
				}
			}
			if (q == device.Invalid) != (n == 0) {
				t.Errorf("-base %s: %d quantized weights", cfg.Precision.Base, n)
			}
		})
	}
}

// TestBaseQuantizesWhatIsFrozen: -base nf4 quantizes exactly the frozen
// Linear weights (all of -lora's base but the LM head; what -freeze
// matches), +head the untied head too; everything else keeps the
// autocast dtype (-base f32: the Linear weights f32).
func TestBaseQuantizesWhatIsFrozen(t *testing.T) {
	dtypes := func(cfg Config) map[string]tensor.DType {
		cfg.Optim.Steps = 1
		tr := newTrainer(t, cfg)
		out := map[string]tensor.DType{}
		for _, p := range tr.Model.Parameters() {
			out[p.Name()] = p.DType()
		}
		return out
	}
	cfg := initLlama(llamaF32)
	cfg.Data.Path = fixtureData(t)
	cfg.Memory.LoRA.Rank, cfg.Precision.AMP, cfg.Precision.Base = 4, "bf16", "nf4"
	for name, dt := range dtypes(cfg) {
		want := tensor.BF16
		switch {
		case strings.Contains(name, "lora_"):
			want = tensor.F32
		case strings.Contains(name, ".attn.") || strings.Contains(name, ".mlp."):
			want = tensor.NF4
		}
		if dt != want {
			t.Errorf("-lora -base nf4: %s is %v, want %v", name, dt, want)
		}
	}
	cfg.Precision.Base, cfg.Memory.LMHead = "nf4+head", "full"
	if dt := dtypes(cfg)["head.weight"]; dt != tensor.NF4 {
		t.Errorf("-base nf4+head: the head is %v", dt)
	}
	cfg.Precision.Base = "f32"
	for name, dt := range dtypes(cfg) {
		want := tensor.BF16
		switch {
		case strings.Contains(name, "lora_") || strings.Contains(name, ".attn.") || strings.Contains(name, ".mlp.") || name == "head.weight":
			want = tensor.F32
		}
		if dt != want {
			t.Errorf("-lora -base f32: %s is %v, want %v", name, dt, want)
		}
	}
	g := tinyGPT()
	g.Memory.Freeze, g.Precision.Base = []string{"blocks.0.*", "embed.*"}, "int8"
	for name, dt := range dtypes(g) {
		want := tensor.F32
		if strings.HasPrefix(name, "blocks.0.") && strings.HasSuffix(name, ".weight") && !strings.Contains(name, "ln") {
			want = tensor.Int8
		}
		if dt != want {
			t.Errorf("-freeze -base int8: %s is %v, want %v", name, dt, want)
		}
	}
	// A tied head (a GPT's) cannot be quantized.
	l := tinyGPT()
	l.Memory.LoRA.Rank, l.Precision.Base, l.Memory.LMHead = 4, "nf4+head", "full"
	dev, _ := NewDevice(l)
	if _, err := New(l.Resolved(), dev, nil); err == nil || !strings.Contains(err.Error(), "no untied LM head") {
		t.Errorf("+head on a tied head: %v", err)
	}
}

// TestBaseImportPeak: -init of an f32 checkpoint with -lora -base nf4
// holds, while the run is built, the quantized model and the adapters
// plus about one tensor, never the 16-bit model; without -base the same
// run holds the bf16 base whole.
func TestBaseImportPeak(t *testing.T) {
	lc := models.DecoderConfig{Layers: 8, Heads: 4, KVHeads: 2, Dim: 128, Hidden: 384, Context: 64, Vocab: 128, Seed: 5}
	l, err := models.NewDecoder(cpuDevice(t), lc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := hf.SaveDecoder(l, dir); err != nil {
		t.Fatal(err)
	}
	var bf16Model, largest int64
	for _, p := range l.Parameters() {
		bf16Model += 2 * int64(p.Len())
		largest = max(largest, 4*int64(p.Len()))
	}
	nn.Release(l)
	peak := func(base string) (peak, params int64) {
		cfg := initLlama(dir)
		cfg.Memory.LoRA.Rank, cfg.Precision.AMP, cfg.Precision.Base = 4, "bf16", base
		tr := newTrainer(t, cfg)
		st := tr.Device.Memory().Stats()
		return st.Requested.Peak, st.Category(memory.Parameter).Current
	}
	q, qParams := peak("nf4")
	b, bParams := peak("")
	t.Logf("-init (bf16 model %d B): with -base nf4 the build peaks at %d B holding %d B of parameters; without, at %d B holding %d B",
		bf16Model, q, qParams, b, bParams)
	if q >= bf16Model || q > qParams+2*largest {
		t.Errorf("-base nf4: the build peaked at %d B: over the bf16 model's %d B, or over the parameters %d B plus two F32 tensors (%d B)", q, bf16Model, qParams, 2*largest)
	}
	if b < bf16Model {
		t.Errorf("without -base the build peaked at %d B, under the bf16 model %d B", b, bf16Model)
	}
}

// cpuDevice is a CPU device of the default capacity.
func cpuDevice(t *testing.T) device.Device {
	dev, err := NewDevice(Default())
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestBaseResume: a run over a quantized base stopped and resumed gives
// the uninterrupted run's weights bit for bit, with -lora (the adapters
// checkpointed) and with -freeze (everything but the quantized weights
// checkpointed: they are built again from the seed); a checkpoint is
// refused by a run whose frozen weights would differ.
func TestBaseResume(t *testing.T) {
	lora := tinyLlama()
	lora.Memory.LoRA.Rank, lora.Precision.Base, lora.Precision.AMP, lora.Memory.Checkpoint = 4, "nf4", "bf16", "every"
	frz := tinyGPT()
	frz.Memory.Freeze, frz.Precision.Base, frz.Optim.Name = []string{"blocks.0.*"}, "int8", "adamw"
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"lora nf4", lora}, {"freeze int8", frz}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Optim.Steps = 8
			whole := newTrainer(t, cfg)
			if _, err := whole.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "state.safetensors")
			saveAfter(t, cfg, 4, path)
			names := sttest.Read(t, path).Names()
			for _, p := range whole.Model.Parameters() {
				if p.DType().IsQuantized() && slices.Contains(names, p.Name()) {
					t.Errorf("the checkpoint holds the quantized weight %s", p.Name())
				}
			}
			cfg.Output.Resume = path
			second := newTrainer(t, cfg)
			if _, err := second.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			sameWeights(t, weights(t, whole), weights(t, second))
			seed := cfg
			seed.Seed = 9
			dev, _ := NewDevice(seed)
			_, err := New(seed.Resolved(), dev, nil)
			if want := map[bool]string{true: "fingerprint", false: "-seed 1, this run has -seed 9"}[cfg.Memory.LoRA.Rank > 0]; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("resumed with another seed: %v, want %q", err, want)
			}
			other := cfg
			if other.Precision.Base == "int8" {
				other.Precision.Base = "nf4"
			} else {
				other.Precision.Base = "int8"
			}
			dev, _ = NewDevice(other)
			if _, err := New(other.Resolved(), dev, nil); err == nil {
				t.Errorf("resumed with -base %s a checkpoint of -base %s", other.Precision.Base, cfg.Precision.Base)
			}
		})
	}
}

// TestBaseExportsBF16: -save-format hf of a LoRA run over an nf4 base
// writes the merged model in bf16, which -init reads back.
func TestBaseExportsBF16(t *testing.T) {
	cfg := tinyLlama()
	cfg.Memory.LoRA.Rank, cfg.Precision.Base, cfg.Precision.AMP, cfg.Optim.Steps = 4, "nf4", "bf16", 3
	dir := filepath.Join(t.TempDir(), "out")
	cfg.Output.Save, cfg.Output.SaveFormat = dir, "hf"
	tr := newTrainer(t, cfg)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{}
	for _, e := range nn.Export(tr.Model) {
		v, err := e.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		want[e.Name] = v
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range f.Names() {
		if x, _ := f.Tensor(n); x.DType != safetensors.BF16 {
			t.Errorf("%s is %s", n, x.DType)
		}
	}
	back, _, err := hf.Load(cpuDevice(t), dir, hf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(back)
	for _, p := range back.(models.Model).Parameters() {
		w := want[p.Name()]
		for i, v := range p.Float32s() {
			if d := math.Abs(float64(v - w[i])); d > math.Abs(float64(w[i]))/128 {
				t.Fatalf("%s[%d] = %v read back, %v exported", p.Name(), i, v, w[i])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Error(err)
	}
}

// TestBaseNumerics: a tiny Llama, trained first (the base), fine-tuned
// with LoRA over an nf4 base ends within 2% of the eval loss of the same
// run over a bf16 base; both runs learn (their eval loss falls), and the
// quantized base starts worse than the bf16 one (it is not the same
// base).
func TestBaseNumerics(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a base first")
	}
	dir := filepath.Join(t.TempDir(), "base")
	pre := tinyLlama()
	pre.Optim.Batch, pre.Optim.Steps, pre.Optim.LR = 16, 150, 3e-3
	pre.Output.Save, pre.Output.SaveFormat = dir, "hf"
	tr := newTrainer(t, pre)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tune := func(base string, steps int) float64 {
		c := initLlama(dir)
		c.Optim.Batch, c.Optim.Steps, c.Optim.LR = 16, max(steps, 1), 1e-2
		c.Memory.LoRA.Rank, c.Precision.AMP, c.Precision.Base = 8, "bf16", base
		tr := newTrainer(t, c)
		if steps == 0 {
			e, err := tr.Evaluate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return e.Loss
		}
		s, err := tr.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.Eval.Loss
	}
	b0, q0 := tune("bf16", 0), tune("nf4", 0)
	b, q := tune("bf16", 50), tune("nf4", 50)
	t.Logf("eval loss before fine-tuning: bf16 base %.4f, nf4 base %.4f; after 50 LoRA steps: bf16 %.4f, nf4 %.4f (%+.2f%%)", b0, q0, b, q, 100*(q-b)/b)
	if !(q0 > b0) {
		t.Errorf("the nf4 base evaluates at %v, no worse than the bf16 base's %v: is it quantized?", q0, b0)
	}
	if !(b < b0 && q < q0) {
		t.Errorf("fine-tuning did not lower the eval loss: bf16 %v → %v, nf4 %v → %v", b0, b, q0, q)
	}
	if math.Abs(q-b) > 0.02*b {
		t.Errorf("eval loss over the nf4 base %v, over the bf16 base %v: more than 2%% apart", q, b)
	}
}

// TestFitQuantizesBase: a LoRA run whose base does not fit the budget in
// bf16, whatever the exact techniques and the optimizer's formats do,
// gets -base nf4 from -fit, and the choice runs within the budget.
func TestFitQuantizesBase(t *testing.T) {
	cfg := tinyLlama()
	cfg.Model.Layers, cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch = 4, 128, 16, 1
	cfg.Memory.LoRA.Rank, cfg.Precision.AMP = 4, "bf16"
	plan := func(c Config) int64 {
		p, err := Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	nf4 := cfg
	nf4.Precision.Base = "nf4"
	budget := plan(nf4)
	least := cfg
	least.Memory.Checkpoint, least.Optim.Name, least.Memory.StepInBackward = "every", "adafactor", true
	if l := plan(least); l <= budget {
		t.Fatalf("the bf16 base fits %d with the exact techniques and adafactor (%d): the test needs a larger base", budget, l)
	}
	c, err := Fit(cfg, budget)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Precision.Base != "nf4" || c.Peak.Total > budget {
		t.Fatalf("Fit(%d) chose %s (peak %d)", budget, c.Flags(cfg), c.Peak.Total)
	}
	if !strings.Contains(c.Flags(cfg), "-base nf4") {
		t.Errorf("the choice's flags %q do not say -base nf4", c.Flags(cfg))
	}
	c.Config.Optim.Steps = planSteps
	tr := newTrainer(t, c.Config)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tr.Peaks().Total; got > budget {
		t.Errorf("measured %d over the budget %d", got, budget)
	}
}

// TestBaseUnderZero: ZeRO stages 1 and 2 shard the trainable parameters
// only, so a LoRA run over an nf4 base trains on two ranks as in one
// process (every rank builds the same quantized base from the seed).
func TestBaseUnderZero(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Batch, cfg.Data.Workers, cfg.Optim.Steps = 0, 4, 1, 10
	cfg.Memory.LoRA.Rank, cfg.Memory.LoRA.Alpha, cfg.Optim.LR, cfg.Precision.Base = 4, 8, 1e-2, "nf4"
	one := cfg
	one.Optim.Batch *= 2
	ref := newTrainer(t, one)
	if _, err := ref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, zero := range []int{1, 2} {
		c := cfg
		c.Parallel.Zero = zero
		trs, _ := runRanks(t, c, 2, nil)
		for r, tr := range trs {
			if d := relDiff(flatWeights(tr), flatWeights(ref)); d > 1e-5 {
				t.Errorf("-zero %d rank %d: %.2g from one process", zero, r, d)
			}
		}
	}
}

// TestBaseModelSizeCheck: the arithmetic refusal of a model whose
// parameters alone exceed the device counts -base's quantized bytes (a
// lower bound: embeddings and norms stay wider), so it refuses only a
// model that cannot fit even quantized.
func TestBaseModelSizeCheck(t *testing.T) {
	cfg := tinyLlama()
	cfg.Memory.LoRA.Rank = 4
	k, _ := cfg.kind()
	s := cfg.modelSpec()
	s.Classes = 256 // the synthetic text's vocabulary, at most
	n := int(k.Params(s))
	build := func(base string, limit int64) error {
		c := cfg
		c.Precision.Base, c.Device.MemLimit = base, limit
		c = c.Resolved()
		dev, err := NewDevice(c)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(c, dev, nil)
		if err == nil {
			tr.Close()
		}
		return err
	}
	limit := device.NF4Bytes(n) * 3 / 2
	if err := build("", limit); err == nil || !strings.Contains(err.Error(), "parameters alone are") {
		t.Errorf("without -base under %d B: %v", limit, err)
	}
	if err := build("nf4", limit); err != nil && strings.Contains(err.Error(), "parameters alone are") {
		t.Errorf("-base nf4 under %d B, above the nf4 bytes: %v", limit, err)
	}
	if err := build("nf4", device.NF4Bytes(n)/2); err == nil || !strings.Contains(err.Error(), "in nf4") {
		t.Errorf("-base nf4 under half the nf4 bytes: %v", err)
	}
}
