package train

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/nn"
)

// peftRun is a LoRA run on hf's Qwen 3 fixture whose adapters, once
// trained, -save-peft writes in PEFT's layout into out.
func peftRun(shard, out string) Config {
	cfg := initLlama(filepath.Join("..", "hf", "testdata", "qwen3-f32"))
	cfg.Data.Path, cfg.Optim.Steps, cfg.Optim.LR = shard, 2, 3e-3
	cfg.Memory.LoRA = LoRAOptions{Rank: 2, Alpha: 4, Dropout: 0.1, Targets: []string{"q_proj", "down_proj"}}
	cfg.Output.SaveFormat, cfg.Output.SavePEFT, cfg.Output.Save = "hf", true, out
	return cfg
}

// fromPEFT is a run on the same base starting from the adapters in dir.
func fromPEFT(shard, dir string) Config {
	cfg := initLlama(filepath.Join("..", "hf", "testdata", "qwen3-f32"))
	cfg.Data.Path, cfg.Optim.Steps, cfg.Optim.LR = shard, 2, 3e-3
	cfg.Memory.LoRA.Init = dir
	return cfg
}

// -init-adapter takes up the adapters a LoRA run wrote with -save-peft:
// its rank, alpha and dropout from adapter_config.json, the same
// adapters bit for bit on the same layers (and nothing else training),
// the same evaluation loss and greedy continuation; it trains them
// further, its plan is its measured peak, and -lora-dropout given
// chooses another dropout.
func TestInitAdapterPEFT(t *testing.T) {
	shard := fixtureData(t)
	out := filepath.Join(t.TempDir(), "tuned")
	first := newTrainer(t, peftRun(shard, out))
	if _, err := first.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, fromPEFT(shard, out))
	if l := tr.Config.Memory.LoRA; l.Rank != 2 || l.Alpha != 4 || l.Dropout != 0.1 {
		t.Errorf("LoRA options %+v, want the file's rank 2, alpha 4, dropout 0.1", l)
	}
	a, b := tr.lora().adapted, first.lora().adapted
	if !slices.Equal(a.Layers, b.Layers) || len(a.Adapters) != 8 {
		t.Fatalf("adapted %v, want %v", a.Layers, b.Layers)
	}
	for i, p := range a.Adapters {
		q := b.Adapters[i]
		if p.Name() != q.Name() || !slices.Equal(p.Float32s(), q.Float32s()) {
			t.Errorf("%s differs from the trained %s", p.Name(), q.Name())
		}
	}
	if got := nn.Trainable(tr.Model); len(got) != len(a.Adapters) {
		t.Errorf("%d parameters train, want the %d adapter matrices", len(got), len(a.Adapters))
	}
	ea, err := tr.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eb, err := first.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ea.Loss != eb.Loss {
		t.Errorf("evaluation loss %v, the run that trained the adapters had %v", ea.Loss, eb.Loss)
	}
	ga, err := tr.Generate("1 2 3", 6, tr.Config.sampleOptions())
	if err != nil {
		t.Fatal(err)
	}
	gb, err := first.Generate("1 2 3", 6, first.Config.sampleOptions())
	if err != nil {
		t.Fatal(err)
	}
	if ga != gb {
		t.Errorf("continuation %q, the run that trained the adapters gives %q", ga, gb)
	}
	before := a.Adapters[1].Float32s()
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(res.FinalLoss) || slices.Equal(before, a.Adapters[1].Float32s()) {
		t.Errorf("training the adapters further: loss %v, B changed: %v", res.FinalLoss, !slices.Equal(before, a.Adapters[1].Float32s()))
	}

	// The plan reads the adapters as the run does: its peak is the run's.
	cfg := fromPEFT(shard, out)
	cfg.Optim.Steps = planSteps
	runAsPlanned(t, cfg)

	cfg = fromPEFT(shard, out)
	cfg.Memory.LoRA.Dropout = 0.25
	other := newTrainer(t, cfg)
	for _, l := range other.lora().adapted.Layers {
		if d := adapterOf(t, other, l).Dropout; d != 0.25 {
			t.Errorf("%s: dropout %v, want -lora-dropout's 0.25", l, d)
		}
	}
}

// adapterOf is the adapter of tr's layer at path.
func adapterOf(t *testing.T, tr *Trainer, path string) *nn.LoRA {
	t.Helper()
	var a *nn.LoRA
	nn.Walk(tr.Model, func(x nn.Module) error {
		if l, ok := x.(*nn.Linear); ok && l.Weight.Name() == path+".weight" {
			a = l.Adapter
		}
		return nil
	})
	if a == nil {
		t.Fatalf("no adapter on %s", path)
	}
	return a
}

// -init-adapter refuses what contradicts its file or has no base to
// adapt, naming the flags.
func TestInitAdapterPEFTRefuses(t *testing.T) {
	shard := fixtureData(t)
	out := filepath.Join(t.TempDir(), "tuned")
	if _, err := newTrainer(t, peftRun(shard, out)).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  func(*Config)
		want []string
	}{
		{"other rank", func(c *Config) { c.Memory.LoRA.Rank = 3 }, []string{"-lora 3", "rank 2", "drop -lora"}},
		{"other alpha", func(c *Config) { c.Memory.LoRA.Alpha = 5 }, []string{"-lora-alpha 5", "alpha 4"}},
		{"targets", func(c *Config) { c.Memory.LoRA.Targets = []string{"v_proj"} }, []string{"-lora-targets", "drop -lora-targets"}},
		{"no base", func(c *Config) { c.Model = tinyLlama().Model }, []string{"-init-adapter", "needs -init"}},
		{"gpt2", func(c *Config) { c.Model.Init = filepath.Join("..", "hf", "testdata", "gpt2-f32") }, []string{"-init-adapter", "decoder families"}},
		{"not adapters", func(c *Config) { c.Memory.LoRA.Init = c.Model.Init }, []string{"-init-adapter", "adapter_config.json: no such file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fromPEFT(shard, out)
			c.set(&cfg)
			dev, err := NewDevice(cfg.Resolved())
			if err != nil {
				t.Fatal(err)
			}
			tr, err := New(cfg.Resolved(), dev, nil)
			if err == nil {
				tr.Close()
				t.Fatal("built")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
