package train

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tile"
)

// tiled is a tiny model of the kind ("gpt" or "llama") at a context where
// -tile 2048 cuts each micro-batch of 2 rows of 2304 tokens into two
// tiles, the second one crossing into the second row.
func tiled(kind string) Config {
	c := tinyLlama()
	if kind == "gpt" {
		c = tinyGPT()
		c.Model.Dropout = 0
	}
	// No held-out data: the final evaluation would run every window of it.
	c.Model.Context, c.Optim.Batch, c.Optim.Steps, c.Data.ValSplit = 2304, 2, 2, 0
	return c
}

// -tile's own values and what it cannot tile are refused naming the flag.
func TestTileChecks(t *testing.T) {
	mlp := Default()
	for _, tc := range []struct {
		name string
		cfg  Config
		set  func(*Config)
		want string
	}{
		{"not a multiple", tiled("llama"), func(c *Config) { c.Memory.Tile = 3000 }, "-tile 3000: want a multiple of 512 of at least 2048"},
		{"too short", tiled("llama"), func(c *Config) { c.Memory.Tile = 1024 }, "-tile 1024: want a multiple of 512 of at least 2048"},
		{"negative", tiled("llama"), func(c *Config) { c.Memory.Tile = -2048 }, "-tile -2048: want a tile"},
		{"no tokens", mlp, func(c *Config) { c.Memory.Tile = 2048 }, "-tile 2048: -model mlp takes no token sequences"},
		{"dropout", tiled("gpt"), func(c *Config) { c.Memory.Tile, c.Model.Dropout = 2048, 0.1 }, "-tile 2048: conflicts with -dropout 0.1"},
		{"lora dropout", tiled("llama"), func(c *Config) { c.Memory.Tile, c.Memory.LoRA.Rank, c.Memory.LoRA.Dropout = 2048, 4, 0.05 }, "-tile 2048: conflicts with -lora-dropout 0.05"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			tc.set(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
	ok := tiled("llama")
	ok.Memory.Tile = 4096
	if err := ok.Validate(); err != nil {
		t.Fatalf("-tile 4096: %v", err)
	}
}

// A run with -tile trains the same weights as without, bit for bit, with
// the techniques it composes with: bf16 autocast, activation checkpointing,
// LoRA (over an nf4 base too), gradient accumulation, activations
// offloaded to host memory, the optimizer step inside backward, bf16
// weights, fp16 loss scaling and ZeRO-3's block runner (2 ranks). Packed
// rows are package tile's test.
func TestTileTrainsTheUntiledWeights(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  string
		set   func(*Config)
		ranks int
	}{
		{"llama f32", "llama", func(c *Config) {}, 0},
		{"llama lora bf16 checkpoint", "llama", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.AMP, c.Memory.Checkpoint = 4, "bf16", "every"
		}, 0},
		{"llama lora nf4 bf16 checkpoint", "llama", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint = 4, "nf4", "bf16", "every"
		}, 0},
		{"llama accum offload activations", "llama", func(c *Config) {
			c.Optim.Batch, c.Memory.Accum, c.Memory.Offload.Mode, c.Precision.AMP = 4, 2, "activations", "bf16"
		}, 0},
		{"llama step in backward", "llama", func(c *Config) { c.Memory.StepInBackward, c.Memory.Checkpoint = true, "sqrt" }, 0},
		{"gpt bf16 checkpoint", "gpt", func(c *Config) { c.Precision.AMP, c.Memory.Checkpoint = "bf16", "every" }, 0},
		{"llama bf16 weights", "llama", func(c *Config) { c.Precision.Weights, c.Precision.AMP = "bf16", "bf16" }, 0},
		{"gpt fp16 loss scaling", "gpt", func(c *Config) { c.Precision.AMP = "fp16" }, 0},
		{"gpt zero3", "gpt", func(c *Config) { c.Optim.Batch, c.Parallel.Engine, c.Parallel.Zero = 4, "mpi", 3 }, 2},
		{"llama lora zero3 checkpoint", "llama", func(c *Config) {
			c.Optim.Batch, c.Parallel.Engine, c.Parallel.Zero, c.Memory.LoRA.Rank, c.Memory.Checkpoint = 4, "mpi", 3, 4, "every"
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tiled(tc.kind)
			tc.set(&c)
			// The weights, and the peak of rank 0 (tiles change it: that
			// is the technique running).
			weightsOf := func(c Config) (map[string][]uint32, int64) {
				if tc.ranks == 0 {
					tr := newTrainer(t, c)
					if _, err := tr.Run(context.Background()); err != nil {
						t.Fatal(err)
					}
					return weights(t, tr), tr.Peaks().Total
				}
				trs, sums := runRanks(t, c, tc.ranks, nil)
				w, _ := gathered.Load(trs[0])
				out := map[string][]uint32{}
				at := 0
				for _, p := range trs[0].Model.Parameters() {
					var b []uint32
					for _, v := range w.([]float32)[at : at+p.Len()] {
						b = append(b, math.Float32bits(v))
					}
					out[p.Name()] = b
					at += p.Len()
				}
				return out, sums[0].PeakBytes.Total
			}
			want, plain := weightsOf(c)
			c.Memory.Tile = 2048
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got, tiledPeak := weightsOf(c)
			if tiledPeak == plain {
				t.Errorf("the same peak, %d bytes, with and without -tile: were the blocks tiled?", plain)
			}
			sameWeights(t, got, want)
		})
	}
}

// The plan of a run with -tile is its measured peak.
func TestPlanMatchesMeasuredPeakTile(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind string
		set  func(*Config)
	}{
		{"llama", "llama", func(c *Config) {}},
		{"llama lora bf16 checkpoint", "llama", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.AMP, c.Memory.Checkpoint = 4, "bf16", "every"
		}},
		{"llama lora nf4 offload activations step in backward", "llama", func(c *Config) {
			c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Offload.Mode, c.Memory.StepInBackward = 4, "nf4", "bf16", "activations", true
		}},
		{"gpt bf16 accum", "gpt", func(c *Config) { c.Precision.AMP, c.Optim.Batch, c.Memory.Accum = "bf16", 4, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tiled(tc.kind)
			tc.set(&c)
			c.Memory.Tile, c.Optim.Steps = 2048, planSteps
			runAsPlanned(t, c)
		})
	}
}

// -fit may choose -tile: a budget between the tiled and the untiled peak
// of a run already checkpointed in bf16 gets tiles of 2048 tokens.
func TestFitChoosesTiles(t *testing.T) {
	c := tiled("llama")
	c.Model.Width, c.Model.Heads, c.Model.KVHeads, c.Model.Hidden = 128, 4, 2, 1024
	c.Precision.AMP, c.Memory.Checkpoint, c.Memory.LoRA.Rank, c.Optim.Batch = "bf16", "every", 4, 1
	c.Model.Context = 8192
	untiled, err := Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	with := c
	with.Memory.Tile = tile.MinRows
	tiledPeak, err := Plan(with)
	if err != nil {
		t.Fatal(err)
	}
	if tiledPeak.Total >= untiled.Total {
		t.Fatalf("tiled peak %d B, untiled %d B: tiles save nothing here", tiledPeak.Total, untiled.Total)
	}
	choice, err := Fit(c, (tiledPeak.Total+untiled.Total)/2)
	if err != nil {
		t.Fatal(err)
	}
	if choice.Config.Memory.Tile != tile.MinRows || !strings.Contains(choice.Flags(c), "-tile 2048") {
		t.Errorf("-fit chose %q (tile %d), want -tile 2048", choice.Flags(c), choice.Config.Memory.Tile)
	}
}

// A model that has no token-wise blocks to tile, or that refuses the
// runner, fails to build naming -tile.
func TestTileNeedsTokenTiledBlocks(t *testing.T) {
	run, err := tile.New(2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &tilePart{run}
	tr := &Trainer{Config: Default(), Model: nn.NewSequential()}
	if err := p.adaptModel(tr); err == nil || !strings.Contains(err.Error(), "-tile 2048: -model mlp has no token-wise blocks") {
		t.Errorf("adaptModel on a Sequential: %v", err)
	}
	g, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 1, Heads: 2, Dim: 8, Context: 8, Vocab: 8, Dropout: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	tr.Model = g
	if err := p.adaptModel(tr); err == nil || !strings.Contains(err.Error(), "-tile 2048: models: gpt: token-wise pieces need Dropout 0") {
		t.Errorf("adaptModel on a GPT with dropout: %v", err)
	}
}

// An out-of-memory hint suggests -tile only to a run that could use it:
// token sequences longer than one tile, no dropout, not tiled already.
func TestOOMHintSuggestsTileWhereItHelps(t *testing.T) {
	mlp := Default()
	for _, tc := range []struct {
		name    string
		cfg     Config
		set     func(*Config)
		suggest bool
	}{
		{"llama past one tile", tiled("llama"), func(*Config) {}, true},
		{"gpt past one tile", tiled("gpt"), func(*Config) {}, true},
		{"tiled already", tiled("llama"), func(c *Config) { c.Memory.Tile = 2048 }, false},
		{"one tile of context", tiled("llama"), func(c *Config) { c.Model.Context = 2048 }, false},
		{"dropout", tiled("gpt"), func(c *Config) { c.Model.Dropout = 0.1 }, false},
		{"no tokens", mlp, func(*Config) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			tc.set(&cfg)
			oom := &memory.OOMError{Requested: (1 << 20), Size: (1 << 20), Capacity: 64 * (1 << 20), Device: "cpu"}
			oom.ByCategory[memory.Activation] = 60 * (1 << 20)
			tr := &Trainer{Config: cfg, accum: 1}
			tr.noteTried(oom, false)
			if got := strings.Contains(oom.Error(), "-tile 2048"); got != tc.suggest {
				t.Errorf("hint suggests -tile: %v, want %v:\n%v", got, tc.suggest, oom)
			}
		})
	}
}
