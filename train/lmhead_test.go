package train

import (
	"context"
	"math"
	"testing"

	"github.com/memfit/memfit/memory"
)

// lmHeadRun trains cfg for its steps and returns the losses and the
// weights.
func lmHeadRun(t *testing.T, cfg Config) ([]float64, map[string][]uint32, *Trainer) {
	t.Helper()
	tr := newTrainer(t, cfg)
	var losses []float64
	tr.Hooks.AfterStep = func(_ *Trainer, r Record) error {
		losses = append(losses, r.Loss)
		return nil
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return losses, weights(t, tr), tr
}

// lmHeadConfigs are the techniques the chunked head must combine with;
// 24 rows per chunk cut each micro-batch's 128 (or 32) tokens into
// uneven chunks.
func lmHeadConfigs() []struct {
	name string
	tol  float64
	cfg  Config
} {
	base := tinyGPT()
	base.Optim.Steps, base.Memory.LMHeadChunkRows = 3, 24
	f32, bf16 := base, base
	bf16.Precision.AMP, bf16.Memory.Checkpoint, bf16.Memory.Accum = "bf16", "every", 4
	fp16 := base
	fp16.Precision.AMP, fp16.Memory.Accum = "fp16", 2
	auto := base
	auto.Memory.LMHeadChunkRows = 0
	return []struct {
		name string
		tol  float64
		cfg  Config
	}{
		{"f32", 1e-5, f32},
		{"f32 automatic chunk", 1e-5, auto},
		{"bf16 checkpoint every accum 4", 5e-3, bf16},
		{"fp16 accum 2", 5e-3, fp16},
	}
}

// Training with the chunked head gives the composed head's losses and
// weights within the dtype's tolerance, with every technique.
func TestChunkedHeadMatchesFull(t *testing.T) {
	for _, c := range lmHeadConfigs() {
		t.Run(c.name, func(t *testing.T) {
			full := c.cfg
			full.Memory.LMHead = "full"
			wantLoss, wantW, _ := lmHeadRun(t, full)
			gotLoss, gotW, _ := lmHeadRun(t, c.cfg)
			for i := range wantLoss {
				if d := math.Abs(gotLoss[i]-wantLoss[i]) / math.Abs(wantLoss[i]); d > c.tol {
					t.Errorf("step %d loss: chunked %.9g, full %.9g (relative %.2g)", i+1, gotLoss[i], wantLoss[i], d)
				}
			}
			// Adam divides by √v, so a weight's update can move by
			// more than its gradient did: compare the weights as a
			// whole, relative to their norm (as the composed-kernel
			// test does), at 10× the loss tolerance.
			var num, den float64
			for name, w := range wantW {
				g := gotW[name]
				for j := range w {
					a, b := float64(math.Float32frombits(g[j])), float64(math.Float32frombits(w[j]))
					num += (a - b) * (a - b)
					den += b * b
				}
			}
			if rel := math.Sqrt(num / den); rel > 10*c.tol {
				t.Errorf("weights after %d steps: relative difference %.2g > %.2g", c.cfg.Optim.Steps, rel, 10*c.tol)
			}
		})
	}
}

// The chunked head is bitwise deterministic run to run, and the planner
// predicts its peaks exactly, category by category.
func TestChunkedHeadDeterministicAndPlanned(t *testing.T) {
	for _, c := range lmHeadConfigs() {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Optim.Steps = planSteps
			l1, w1, tr := lmHeadRun(t, c.cfg)
			l2, w2, _ := lmHeadRun(t, c.cfg)
			for i := range l1 {
				if l1[i] != l2[i] {
					t.Errorf("step %d loss: %v then %v", i+1, l1[i], l2[i])
				}
			}
			sameWeights(t, w1, w2)
			pred, err := Plan(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Peaks(); pred != got {
				t.Errorf("plan %+v\nmeasured %+v", pred, got)
			}
		})
	}
}

// TestEvaluateUsesChunkedHead: evaluation of a token model takes the
// training loss's path, so its peak holds no [tokens, vocab] logits.
func TestEvaluateUsesChunkedHead(t *testing.T) {
	cfg := tinyGPT()
	cfg.Data.Path, cfg.Data.ValSplit, cfg.Optim.Batch, cfg.Model.Context = largeVocabShard(t), 0.2, 16, 64
	tr := newTrainer(t, cfg)
	mem := tr.Device.Memory()
	mem.ResetPeak()
	st, err := tr.Evaluate(context.Background())
	if err != nil || !(st.Loss > 0) {
		t.Fatalf("evaluate: %v, loss %v", err, st.Loss)
	}
	peak := mem.Stats().Requested.Peak - mem.Stats().Category(memory.Parameter).Current
	logits := int64(cfg.Optim.Batch * cfg.Model.Context * 50257 * 4)
	if peak >= logits/2 {
		t.Errorf("evaluation peaked at %d bytes beyond the parameters; the whole logits are %d", peak, logits)
	}
}
