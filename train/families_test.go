package train

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every decoder family trains with the techniques that apply, and its
// plan is its measured peak to the byte: full fine-tuning, LoRA over an
// nf4 base with bf16 autocast, checkpointing and accumulation, LoRA over
// an int8 base under fp16 loss scaling with offloaded activations, and
// frozen blocks in nf4, imported from each family's fixture (hf's: Qwen
// 2 with sliding layers, Qwen 3, Gemma 2 and 3, Mistral, Phi-3 with
// longrope, SmolLM 3). The loss stays finite and falls.
func TestFamiliesTrainAndPlanExactly(t *testing.T) {
	shard := fixtureData(t)
	for _, fixture := range []string{"qwen2-swa-f32", "qwen3-f32", "gemma2-f32", "gemma3-bf16", "mistral-f32", "phi3-f32", "smollm3-f32"} {
		for _, c := range []struct {
			name string
			set  func(*Config)
		}{
			{"full", func(c *Config) {}},
			{"lora nf4 bf16 checkpoint accum", func(c *Config) {
				c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum = 4, "nf4", "bf16", "every", 2
			}},
			{"lora int8 fp16 offload", func(c *Config) {
				c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Offload.Mode = 4, "int8", "fp16", "activations"
			}},
			{"freeze nf4", func(c *Config) { c.Memory.Freeze, c.Precision.Base = []string{"blocks.0.*"}, "nf4" }},
		} {
			t.Run(fixture+"/"+c.name, func(t *testing.T) {
				cfg := initLlama(filepath.Join("..", "hf", "testdata", fixture))
				cfg.Data.Path = shard
				cfg, _, err := cfg.ApplyInit()
				if err != nil {
					t.Fatal(err)
				}
				c.set(&cfg)
				cfg.Optim.LR = 3e-3
				var losses []float64
				for _, steps := range []int{1, 8} {
					cfg.Optim.Steps = steps
					pred, err := Plan(cfg)
					if err != nil {
						t.Fatal(err)
					}
					tr := newTrainer(t, cfg)
					res, err := tr.Run(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if got := tr.Peaks(); steps >= planSteps && pred != got {
						t.Errorf("%d steps: predicted %+v\nmeasured  %+v", steps, pred, got)
					}
					losses = append(losses, res.FinalLoss)
				}
				if math.IsNaN(losses[1]) || !(losses[1] < losses[0]) {
					t.Errorf("loss %v after a step, %v after 8", losses[0], losses[1])
				}
			})
		}
	}
}

// A model is planned from its config.json alone, before its weights are
// downloaded: the plan of Qwen 3 8B's config (QLoRA r32 on the GPU) is
// the plan of a Qwen 3 of its shape built from the flags, to the byte
// (every category and the total),
// and a multimodal Gemma 3 12B's language model plans from its
// text_config.
func TestPlanFromConfigAlone(t *testing.T) {
	qlora := func(c *Config) {
		c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP, c.Memory.Checkpoint, c.Device.Name = 32, "nf4", "bf16", "every", "cuda"
		c.Optim.Batch, c.Optim.Steps, c.Model.Context = 1, planSteps, 1024
	}
	cfg := initLlama(filepath.Join("..", "hf", "testdata", "configs", "qwen3-8b"))
	qlora(&cfg)
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		t.Fatal(err)
	}
	fromConfig, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	flags := tinyLlama()
	flags.Model = ModelConfig{Name: "qwen3", Layers: 36, Width: 4096, Heads: 32, KVHeads: 8, Hidden: 12288, Vocab: 151936}
	qlora(&flags)
	fromFlags, err := Plan(flags)
	if err != nil {
		t.Fatal(err)
	}
	// The caching allocator's segments may differ: an import quantizes
	// each weight from the host, a model built from the flags converts
	// each on the device (both forms for a moment).
	fromConfig.Reserved, fromFlags.Reserved = 0, 0
	if fromConfig != fromFlags {
		t.Errorf("from config.json: %+v\nfrom the flags:   %+v", fromConfig, fromFlags)
	}
	g := initLlama(filepath.Join("..", "hf", "testdata", "configs", "gemma-3-12b-it"))
	qlora(&g)
	if g, _, err = g.ApplyInit(); err != nil {
		t.Fatal(err)
	}
	if g.Model.Name != "gemma3" || g.Model.Layers != 48 {
		t.Errorf("Gemma 3 12B: %+v", g.Model)
	}
	if _, err := Plan(g); err != nil {
		t.Fatal(err)
	}
}

// A model whose parameters went non-finite is never saved over the last
// good save, in either format: the save fails naming the parameter and
// the file there stays as it was.
func TestSaveKeepsLastGoodState(t *testing.T) {
	for _, format := range []string{"memfit", "hf"} {
		t.Run(format, func(t *testing.T) {
			cfg := tinyLlama()
			cfg.Optim.Steps = 1
			cfg.Output.SaveFormat = format
			path := filepath.Join(t.TempDir(), "run")
			if format == "memfit" {
				path += ".safetensors"
			}
			cfg.Output.Save = path
			tr := newTrainer(t, cfg)
			if _, err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			file := path
			if format == "hf" {
				file = filepath.Join(path, "model.safetensors")
			}
			before, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			p := tr.Model.Parameters()[3]
			v := p.Float32s()
			v[1] = float32(math.Inf(-1))
			if err := p.SetFloat32s(v); err != nil {
				t.Fatal(err)
			}
			err = tr.Save(path)
			if err == nil || !strings.Contains(err.Error(), p.Name()) || !strings.Contains(err.Error(), "not finite") {
				t.Fatalf("saving a non-finite model: %v", err)
			}
			if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
				t.Error("the last good save was overwritten")
			}
		})
	}
}

// Size flags are bounded by the run they size, and an error quotes at
// most a few hundred bytes of what the user gave.
func TestFlagsBoundedByTheRun(t *testing.T) {
	c := tinyLlama()
	c.Memory.Tile = 1 << 62
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-tile") || !strings.Contains(err.Error(), "-batch 8 × -context 32") {
		t.Errorf("-tile 2^62: %v", err)
	}
	c = tinyLlama()
	c.Optim.Schedule = strings.Repeat("x", 10<<20)
	err := c.Validate()
	if err == nil || len(err.Error()) > 1000 {
		n := 0
		if err != nil {
			n = len(err.Error())
		}
		t.Errorf("a 10 MB -schedule: an error of %d bytes", n)
	}
}
