package train

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/memfit/memfit/data"
)

// largeVocabShard writes a token shard whose tokens span GPT-2's
// vocabulary, so that a model trained on it has 50304 logits per position
// (issue 26: rows wider than any pooled scratch).
func largeVocabShard(t *testing.T) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int32, 1<<14)
	for i := range tokens {
		tokens[i] = rng.Int32N(50257)
	}
	path := filepath.Join(t.TempDir(), "tokens.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := data.WriteShard(f, tokens); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStepGoHeapIsSmall: a training step makes (almost) no Go-heap
// garbage. Every tensor byte goes through the device allocator; what the
// Go heap sees per step is bookkeeping (graph nodes, views, the metrics
// record), a small fixed amount. Kernel scratch on the Go heap made the
// process 2.5× the accounted peak (issue 26), because the collector lets
// garbage grow to the size of the live heap before it runs.
func TestStepGoHeapIsSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	mlp := Default() // the reference MLP: 3 hidden layers of 1024, batch 256
	cnn := Default()
	cnn.Model.Name, cnn.Optim.Batch = "cnn", 32 // conv 16 and 32 channels, hidden 128 (width 1024)
	gpt := tinyGPT()
	gpt.Model.Layers, gpt.Model.Width, gpt.Model.Heads, gpt.Model.Context, gpt.Optim.Batch, gpt.Model.Dropout = 1, 64, 2, 64, 4, 0
	gpt.Data.Path = largeVocabShard(t)
	gptBF16 := gpt
	gptBF16.Precision.AMP, gptBF16.Memory.Checkpoint = "bf16", "every"
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"mlp", mlp},
		{"cnn", cnn},
		{"gpt-vocab50304", gpt},
		{"gpt-vocab50304-bf16-ckpt", gptBF16},
	} {
		t.Run(c.name, func(t *testing.T) {
			const warm, measured = 2, 3
			cfg := c.cfg
			cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Optim.Steps = true, 0, 0, warm+measured
			tr := newTrainer(t, cfg)
			var ms runtime.MemStats
			var heap0, dev0 uint64
			var dev int64
			tr.Hooks.AfterStep = func(tr *Trainer, r Record) error {
				if tr.Step() == warm {
					runtime.ReadMemStats(&ms)
					heap0, dev0 = ms.TotalAlloc, uint64(tr.Device.Memory().Stats().Allocated.Allocated)
				}
				if tr.Step() == warm+measured {
					runtime.ReadMemStats(&ms)
					heap := ms.TotalAlloc - heap0
					dev = int64(uint64(tr.Device.Memory().Stats().Allocated.Allocated) - dev0)
					t.Logf("per step: Go heap %d B, allocator %d B (%.3f%%)", heap/measured, dev/measured, 100*float64(heap)/float64(dev))
					if float64(heap) > 0.01*float64(dev) {
						t.Errorf("Go heap grew by %d B per step, more than 1%% of the allocator's %d B", heap/measured, dev/measured)
					}
				}
				return nil
			}
			if _, err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if dev == 0 {
				t.Fatal("no step was measured")
			}
		})
	}
}
