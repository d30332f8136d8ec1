package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// runRanks trains cfg on every rank of an in-process group (one goroutine
// and one CPU device per rank) and returns each rank's trainer after Run,
// with its summary; fn, if set, runs on each trainer before Run.
func runRanks(t testing.TB, cfg Config, n int, fn func(*Trainer)) ([]*Trainer, []Summary) {
	t.Helper()
	comms := parallel.NewLocal(n, parallel.Timeout(60*time.Second))
	trs := make([]*Trainer, n)
	sums := make([]Summary, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			defer comms[r].Close()
			c := cfg.Resolved()
			tr, err := NewDistributed(c, cpu.New(cpu.Threads(1)), comms[r], nil)
			if err != nil {
				errs[r] = err
				return
			}
			trs[r] = tr
			if fn != nil {
				fn(tr)
			}
			sums[r], errs[r] = tr.Run(context.Background())
			if errs[r] == nil && tr.zero3() != nil {
				// The weights exist whole only while every rank
				// gathers them: read them before the group closes.
				// One group at a time, so that a rank's peaks stay
				// those of its training and saves.
				byName := map[string][]float32{}
				errs[r] = tr.zero3().GatherEach(func(ps []*tensor.Tensor) error {
					for _, p := range ps {
						byName[p.Name()] = p.Float32s()
					}
					return nil
				})
				var w []float32
				for _, p := range tr.Model.Parameters() {
					w = append(w, byName[p.Name()]...)
				}
				gathered.Store(tr, w)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, tr := range trs {
		t.Cleanup(tr.Close)
	}
	return trs, sums
}

// gathered holds the weights of ZeRO-3 trainers, read by runRanks.
var gathered sync.Map

func flatWeights(tr *Trainer) []float32 {
	if w, ok := gathered.Load(tr); ok {
		return w.([]float32)
	}
	return readWeights(tr)
}

func readWeights(tr *Trainer) []float32 {
	var out []float32
	for _, p := range tr.Model.Parameters() {
		out = append(out, p.Float32s()...)
	}
	return out
}

// relDiff is |a-b| / |b| over whole vectors.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// TestDistEquivalence is issue 12's acceptance: 2 ranks × batch B end with
// the parameters of 1 rank × batch 2B after 20 steps, within 1e-5, with
// replicated (DDP) and sharded (ZeRO 1, 2) optimizers, with accumulation
// and with bf16 autocast and fp16 loss scaling.
//
// Under autocast a weight gradient leaves its GEMM rounded to 16 bits, so
// a gradient over 2B examples and the mean of two over B differ by about
// 2⁻⁹ before Adam amplifies it, whoever computes them (PyTorch's autocast
// too). The one-rank reference of a 16-bit case therefore takes its 2B
// examples in micro-batches of B (-accum doubled), the same rounding as
// two ranks, and must then agree within 1e-5 as in f32. Except for one
// thing: f32 sums of the micro-batch gradients associate differently
// ((g1+g2)+(g3+g4) over ranks, ((g1+g2)+g3)+g4 in one process), and the
// attention key bias, whose true gradient is zero (softmax ignores a
// shift), gets gradients of pure rounding noise, above Adam's ε under
// bf16; Adam turns their sign into a full ±lr step, so a 1e-7 difference
// becomes 10% of that tensor within 10 steps. The GPT bf16 case therefore
// trains with SGD. Even then bf16 forward passes round activations to 8
// bits, so a weight 1e-7 away flips a few roundings by 2⁻⁹ and the gap
// grows step by step (measured: 3e-10 after 2 steps, 1.5e-5 after 20), a
// property of 16-bit training, not of the reduction: that case is held to
// 1e-4. Every f32 case, and the bf16 MLP, meets 1e-5.
// With fp16 one
// more thing differs: a rank's gradient is of its own mean loss, twice a
// micro-batch's share of the accumulated one, so at the same loss scale it
// overflows sooner (the first step at 2¹⁶ skips on two ranks, not on one).
// That case starts both at a scale neither overflows at; an agreed skip
// is checked by "fp16 overflow", at a scale its first steps overflow at:
// replicas stay identical and every rank skips the same steps.
//
// Issue 22's state formats (Adafactor, bf16 weights with Adam and 8-bit
// AdamW) run at stages 0 to 2 (stage 3 refuses them), and stages 1 and 2
// must equal stage 0 (DDP) bit for bit: sharding changes nothing of what
// replicated training computes. Their cases say why the GPT ones freeze
// the qkv biases and why bf16 weights on the GPT need 3e-3.
func TestDistEquivalence(t *testing.T) {
	mlp := Default()
	mlp.Model.Layers, mlp.Model.Width, mlp.Optim.Batch, mlp.Output.Quiet, mlp.Output.EvalEvery, mlp.Data.ValSplit, mlp.Data.Workers = 2, 64, 8, true, 0, 0.05, 1
	gpt := tinyGPT()
	gpt.Model.Dropout, gpt.Optim.Batch, gpt.Data.Workers = 0, 4, 1
	cases := []struct {
		name  string
		base  Config
		set   func(*Config)
		tol   float64 // 0: 1e-5
		zeros []int   // the stages to run (nil: 0 to 3)
	}{
		{"mlp", mlp, func(c *Config) {}, 0, nil},
		{"mlp accum 2", mlp, func(c *Config) { c.Memory.Accum = 2 }, 0, nil},
		{"mlp bf16", mlp, func(c *Config) { c.Precision.AMP = "bf16" }, 0, nil},
		{"mlp fp16 clip", mlp, func(c *Config) { c.Precision.AMP = "fp16"; c.Optim.Clip = 0.5 }, 0, nil},
		{"mlp fp16 overflow", mlp, func(c *Config) { c.Precision.AMP = "fp16" }, 0, nil},
		{"gpt", gpt, func(c *Config) {}, 0, nil},
		{"gpt accum 2 bf16 checkpoint", gpt, func(c *Config) {
			c.Memory.Accum, c.Precision.AMP, c.Memory.Checkpoint, c.Optim.Name, c.Optim.LR, c.Data.ValSplit = 2, "bf16", "every", "sgd", 0.05, 0.1
		}, 1e-4, nil},
		{"gpt frozen embeddings", gpt, func(c *Config) { c.Memory.Freeze = []string{"embed.*"} }, 0, nil},
		{"gpt lora", gpt, func(c *Config) { c.Memory.LoRA.Rank, c.Memory.LoRA.Alpha, c.Optim.LR = 4, 8, 1e-2 }, 0, nil},
		// Issue 22's formats under ZeRO 1 and 2 (stage 3 refuses them).
		// Adafactor: each rank steps whole tensors.
		{"mlp adafactor", mlp, func(c *Config) { c.Optim.Name, c.Optim.LR = "adafactor", 0 }, 0, []int{0, 1, 2}},
		// The attention key bias, whose gradient is rounding noise (see
		// above), normalised by Adafactor's √v as by Adam's, moves 27% of
		// that tensor apart (3e-5 overall) whatever the stage, DDP
		// included: the GPT case freezes the qkv biases (freezing
		// composes too) and meets 1e-5.
		{"gpt adafactor", gpt, func(c *Config) {
			c.Optim.Name, c.Optim.LR, c.Memory.Freeze = "adafactor", 0, []string{"blocks.*.attn.qkv.bias"}
		}, 0, []int{0, 1, 2}},
		// bf16 weights: gradients are bf16, so the reference takes its
		// 2B examples in micro-batches of B as for autocast above; the
		// ranks average in F32 and round to nearest into bf16, which is
		// what accumulating two half-batch gradients in bf16 does. Each
		// shard rounds its update with its parameter's bits.
		{"mlp bf16 weights adam", mlp, func(c *Config) { c.Precision.Weights, c.Precision.AMP = "bf16", "bf16" }, 0, []int{0, 1, 2}},
		{"mlp bf16 weights adam8bit clip", mlp, func(c *Config) {
			c.Precision.Weights, c.Precision.AMP, c.Optim.Name, c.Optim.Clip = "bf16", "bf16", "adam8bit", 0.5
		}, 0, []int{0, 1, 2}},
		// The GPT in bf16 weights: the token embedding's gradient is a
		// scatter-add into a bf16 buffer, where a token of both
		// micro-batches adds onto the first one's rounded sum in one
		// process and starts from zero on each rank; the first bf16 unit
		// (2⁻⁸) apart appears there at step 2 and the bf16 forward grows
		// it to 1.2e-3 by step 20, DDP alike. A property of 16-bit
		// accumulation, not of sharding: this case is held to 3e-3, and
		// stages 1 and 2 must equal DDP bit for bit (as every case of
		// these formats must).
		{"gpt bf16 weights adam8bit checkpoint", gpt, func(c *Config) {
			c.Precision.Weights, c.Precision.AMP, c.Optim.Name, c.Memory.Checkpoint, c.Memory.Freeze = "bf16", "bf16", "adamw8bit", "every", []string{"blocks.*.attn.qkv.bias"}
		}, 3e-3, []int{0, 1, 2}},
	}
	for _, tc := range cases {
		cfg := tc.base
		tc.set(&cfg)
		cfg.Optim.Steps = 20
		one := cfg
		one.Optim.Batch *= 2
		if cfg.Precision.AMP != "off" || cfg.Precision.Weights == "bf16" {
			one.Memory.Accum *= 2
		}
		zeros := tc.zeros
		if zeros == nil {
			zeros = []int{0, 1, 2, 3}
		}
		t.Run(tc.name, func(t *testing.T) {
			overflow := tc.name == "mlp fp16 overflow"
			lowScale := func(tr *Trainer) {
				switch {
				case tr.Scaler != nil && overflow:
					// A scale the first steps overflow at: the weights'
					// gradients come F32 from the fp16 products, so only
					// the fp16 activations' gradients can, and at the
					// default 2¹⁶ this MLP's do not.
					tr.Scaler = amp.NewGradScaler(amp.ScalerConfig{InitScale: 1 << 24, Agree: tr.Scaler.Agree()})
				case tr.Scaler != nil:
					tr.Scaler = amp.NewGradScaler(amp.ScalerConfig{InitScale: 256, Agree: tr.Scaler.Agree()})
				}
			}
			ref := newTrainer(t, one)
			lowScale(ref)
			if _, err := ref.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := flatWeights(ref)
			var ddp []float32 // zero 0's weights
			for _, zero := range zeros {
				t.Run(fmt.Sprintf("zero %d", zero), func(t *testing.T) {
					c := cfg
					c.Parallel.Zero = zero
					trs, sums := runRanks(t, c, 2, lowScale)
					w0 := flatWeights(trs[0])
					if zero == 0 {
						ddp = w0
					} else if tc.zeros != nil && ddp != nil {
						// Issue 22's formats: sharding changes no bit of
						// what replicated training computes.
						if d := relDiff(w0, ddp); d != 0 {
							t.Errorf("zero %d differs from zero 0 (DDP) by %.2g", zero, d)
						}
					}
					for r, tr := range trs {
						w := flatWeights(tr)
						if d := relDiff(w, w0); d != 0 {
							t.Errorf("rank %d: replica differs from rank 0's by %.2g", r, d)
						}
						if sums[r].SkippedSteps != sums[0].SkippedSteps {
							t.Errorf("rank %d skipped %d steps, rank 0 %d", r, sums[r].SkippedSteps, sums[0].SkippedSteps)
						}
						if overflow {
							if sums[r].SkippedSteps == 0 {
								t.Errorf("rank %d: no overflow at scale 2²⁴", r)
							}
							continue
						}
						tol := tc.tol
						if tol == 0 {
							tol = 1e-5
						}
						if d := relDiff(w, want); d > tol {
							t.Errorf("rank %d: parameters differ from one rank of batch %d by %.2g > %.2g", r, one.Optim.Batch, d, tol)
						}
						t.Logf("rank %d: %.2g from one rank of batch %d", r, relDiff(w, want), one.Optim.Batch)
					}
				})
			}
		})
	}
}

// TestDistMemory: per-rank optimizer state with ZeRO over 2 ranks is
// 8·P/2 bytes (± the padding of one element), and with stage 2 the
// gradients after the reduction are 4·P/2; with DDP both are whole.
func TestDistMemory(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Steps, cfg.Optim.Batch, cfg.Data.Workers = 0, 2, 4, 1
	for _, zero := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("zero %d", zero), func(t *testing.T) {
			c := cfg
			c.Parallel.Zero = zero
			var mu sync.Mutex
			reduced := map[int]int64{}
			trs, sums := runRanks(t, c, 2, func(tr *Trainer) {
				tr.Hooks.AfterStep = func(tr *Trainer, _ Record) error {
					mu.Lock()
					defer mu.Unlock()
					reduced[tr.rank] = tr.Device.Memory().Stats().Category(memory.OptimizerState).Current
					return nil
				}
			})
			var P int64
			for _, p := range trs[0].Model.Parameters() {
				P += int64(p.Len())
			}
			for r, tr := range trs {
				state := reduced[r]
				want := 8 * P
				if zero > 0 {
					want = 8 * ((P + 1) / 2)
					if r == 1 {
						want = 8 * (P - (P+1)/2)
					}
				}
				if state != want {
					t.Errorf("rank %d: optimizer state %d bytes, want %d (P = %d)", r, state, want, P)
				}
				if got := tr.Opt.StateBytes(); got != want {
					t.Errorf("rank %d: StateBytes %d, want %d", r, got, want)
				}
				switch g := sums[r].PeakBytes.Gradient; {
				case zero < 2 && g != 4*P:
					t.Errorf("rank %d: gradients peaked at %d bytes, want the 4·P = %d of backward", r, g, 4*P)
				case zero == 2 && g >= 4*P:
					// Stage 2 reduces buckets while backward runs and
					// releases full gradients as it goes.
					t.Errorf("rank %d: stage 2's gradients peaked at %d bytes, not below the 4·P = %d of a full backward", r, g, 4*P)
				}
				t.Logf("rank %d: P %d, peak gradient %d, optimizer state %d, peak total %d", r, P, sums[r].PeakBytes.Gradient, state, sums[r].PeakBytes.Total)
			}
		})
	}
}

// TestDistSaveResumeAcrossRankCounts: a ZeRO run over 2 ranks saves the
// full state; resuming it on 1 rank with the same global batch (and back
// on 2 ranks) ends exactly where an uninterrupted 1-rank run ends.
func TestDistSaveResumeAcrossRankCounts(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Batch, cfg.Data.Workers, cfg.Optim.Steps = 0, 4, 1, 12
	one := cfg
	one.Optim.Batch = 8
	ref := newTrainer(t, one)
	if _, err := ref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := flatWeights(ref)

	dir := t.TempDir()
	first := cfg
	first.Parallel.Zero, first.Optim.Steps, first.Output.Save = 2, 5, filepath.Join(dir, "ck")
	runRanks(t, first, 2, nil)

	// On one rank of batch 8: the position (5 global batches of 8) carries over.
	resumed := one
	resumed.Output.Resume = first.Output.Save
	tr := newTrainer(t, resumed)
	if tr.Step() != 5 {
		t.Fatalf("resumed at step %d, want 5", tr.Step())
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := relDiff(flatWeights(tr), want); d > 1e-5 {
		t.Errorf("2 ranks (ZeRO 2) then 1 rank: parameters differ from 12 steps on 1 rank by %.2g", d)
	}

	// And on two ranks again, DDP this time, from a one-rank save.
	mid := one
	mid.Optim.Steps, mid.Output.Save = 7, filepath.Join(dir, "one")
	m := newTrainer(t, mid)
	if _, err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := cfg
	again.Parallel.Zero, again.Output.Resume = 1, mid.Output.Save
	trs, _ := runRanks(t, again, 2, nil)
	for r, tr := range trs {
		if d := relDiff(flatWeights(tr), want); d > 1e-5 {
			t.Errorf("1 rank then 2 ranks (ZeRO 1), rank %d: parameters differ by %.2g", r, d)
		}
	}

	// 8-bit AdamW under ZeRO 2 on two ranks, resumed on one: blocks shard
	// on their boundaries, so the checkpoint is the unsharded one.
	q := cfg
	q.Optim.Name = "adamw8bit"
	qone := q
	qone.Optim.Batch = 8
	qref := newTrainer(t, qone)
	if _, err := qref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	qfirst := q
	qfirst.Parallel.Zero, qfirst.Optim.Steps, qfirst.Output.Save = 2, 5, filepath.Join(dir, "q")
	runRanks(t, qfirst, 2, nil)
	qres := qone
	qres.Output.Resume = qfirst.Output.Save
	qtr := newTrainer(t, qres)
	if _, err := qtr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The two-rank average of the gradient differs from the one-rank
	// gradient in its last bits (as for Adam above), and a moment that
	// lands on the other side of a code boundary then moves by one code:
	// a tolerance of 1e-4 rather than Adam's 1e-5.
	if d := relDiff(flatWeights(qtr), flatWeights(qref)); d > 1e-4 {
		t.Errorf("adamw8bit, 2 ranks (ZeRO 2) then 1 rank: parameters differ from 12 steps on 1 rank by %.2g", d)
	}

	// A global batch that does not divide the saved position is refused.
	odd := cfg
	odd.Optim.Batch, odd.Output.Resume = 3, first.Output.Save
	odd = odd.Resolved()
	dev := cpu.New()
	if _, err := New(odd, dev, nil); err == nil {
		t.Error("resuming 5 batches of 8 with batches of 3: no error")
	}
}

// TestDistRequiresRanks: -zero without a group is an error.
func TestDistRequiresRanks(t *testing.T) {
	cfg := tinyGPT()
	cfg.Parallel.Zero = 1
	_, err := New(cfg.Resolved(), cpu.New(), nil)
	if err == nil || !strings.Contains(err.Error(), "-zero 1: needs -dist") {
		t.Fatalf("-zero 1 in one process: %v", err)
	}
}

// TestCloseIsIdempotent: Close frees every byte, and a second Close (a
// deferred one after an explicit one) does nothing — with ZeRO too.
func TestCloseIsIdempotent(t *testing.T) {
	for _, zero := range []int{2, 3} {
		cfg := tinyGPT()
		cfg.Optim.Steps, cfg.Parallel.Zero = 2, zero
		trs, _ := runRanks(t, cfg, 2, nil)
		for r, tr := range trs {
			tr.Close()
			tr.Close()
			if n := tr.Device.Memory().Allocated(); n != 0 {
				t.Errorf("zero %d, rank %d: %d bytes allocated after Close", zero, r, n)
			}
		}
	}
}

// TestZero3MemoryAndPlan is issue 25's memory acceptance: with the
// parameters sharded (-zero 3) over N ranks, a rank's peak of parameters
// + gradients + optimizer state, measured by its allocator, is at most
// 16·P/N bytes (Adam: 4 parameter, 4 gradient, 8 state) plus twice the
// largest block's parameters (4 bytes each: the block whole, and its
// gradient until it is reduced), and -plan -dist mpi -ranks N predicts it
// within 5% without running the ranks.
func TestZero3MemoryAndPlan(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Steps, cfg.Optim.Batch, cfg.Data.Workers, cfg.Parallel.Zero = 0, 3, 4, 1, 3
	for _, tc := range []struct {
		ranks    int
		prefetch bool
	}{{2, false}, {4, false}, {2, true}, {4, true}} {
		ranks := tc.ranks
		cfg := cfg
		cfg.Parallel.ZeroPrefetch = tc.prefetch
		t.Run(fmt.Sprintf("%d ranks, prefetch %v", ranks, tc.prefetch), func(t *testing.T) {
			// Between steps a rank holds its shards of the parameters and
			// of the optimizer state, nothing else: no gradient, no
			// gathered block, no activation or temporary left behind.
			var mu sync.Mutex
			between := map[int][]memory.Stats{}
			built := make([]int64, ranks) // parameter peak after NewDistributed
			_, sums := runRanks(t, cfg, ranks, func(tr *Trainer) {
				built[tr.rank] = tr.Device.Memory().Stats().Category(memory.Parameter).Peak
				tr.Hooks.AfterStep = func(tr *Trainer, _ Record) error {
					mu.Lock()
					defer mu.Unlock()
					between[tr.rank] = append(between[tr.rank], tr.Device.Memory().Stats())
					return nil
				}
			})
			for r, sts := range between {
				for i, st := range sts {
					for _, c := range []memory.Category{memory.Gradient, memory.Activation, memory.Temporary} {
						if n := st.Category(c).Current; n != 0 {
							t.Errorf("rank %d, after step %d: %d bytes of %v", r, i+1, n, c)
						}
					}
					if i > 0 && st.Requested.Current != sts[1].Requested.Current {
						t.Errorf("rank %d: %d bytes after step %d, %d after step 2", r, st.Requested.Current, i+1, sts[1].Requested.Current)
					}
				}
			}
			whole := cfg
			whole.Parallel.Zero, whole.Parallel.ZeroPrefetch = 0, false
			ref := newTrainer(t, whole) // the same model, whole, to count
			var P, block int64
			for _, p := range ref.Model.Parameters() {
				P += int64(p.Len())
			}
			for _, b := range ref.Model.(nn.Model).Blocks() {
				block = max(block, int64(nn.Count(b)))
			}
			// The model is drawn block by block as it is sharded
			// (deferred): no rank ever held its 4P bytes, not even
			// while it was built and sharded.
			for r, peak := range built {
				if peak >= 4*P {
					t.Errorf("rank %d: parameters peaked at %d B while the trainer was built, the whole model's 4P = %d B or more", r, peak, 4*P)
				}
			}
			bound := 16*P/int64(ranks) + 2*4*block
			if tc.prefetch {
				bound += 4 * block // the next block's parameters, gathered ahead
			}
			pc := cfg
			pc.Parallel.Engine, pc.Parallel.Ranks = "mpi", ranks
			plan, err := Plan(pc)
			if err != nil {
				t.Fatal(err)
			}
			for r, s := range sums {
				got := s.PeakBytes.ModelState
				t.Logf("rank %d: model state peak %d B (parameters %d, gradients %d, optimizer state %d); 16P/N %d, bound %d, plan %d",
					r, got, s.PeakBytes.Parameter, s.PeakBytes.Gradient, s.PeakBytes.OptimizerState, 16*P/int64(ranks), bound, plan.ModelState)
				if got > bound {
					t.Errorf("rank %d: model state peaked at %d B, above 16·P/N + 2·4·(largest block) = %d B", r, got, bound)
				}
			}
			got := sums[0].PeakBytes.ModelState // the plan is rank 0's
			if d := math.Abs(float64(plan.ModelState-got)) / float64(got); d > 0.05 {
				t.Errorf("plan predicts %d B of model state for rank 0, measured %d B (%.1f%% off)", plan.ModelState, got, 100*d)
			}
			// And the whole peak, to the byte: the collectives of the
			// in-process engine (prefetches included, which run on
			// another goroutine) allocate nothing on the device.
			if got := sums[0].PeakBytes.Total; plan.Total != got {
				t.Errorf("plan predicts a peak of %d B for rank 0, measured %d B", plan.Total, got)
			}
		})
	}
}

// TestZero3SaveResumeAcrossRankCounts: a -zero 3 run over 2 ranks saves
// the whole model (gathered) and the whole optimizer state; it resumes on
// 4 ranks of -zero 3 and on one process, each ending where 12 steps of
// one process end. With 8-bit AdamW too, whose shards begin on its
// blocks' boundaries (1e-4: see TestDistSaveResumeAcrossRankCounts).
func TestZero3SaveResumeAcrossRankCounts(t *testing.T) {
	for _, tc := range []struct {
		optim string
		tol   float64
	}{{"adamw", 1e-5}, {"adamw8bit", 1e-4}} {
		t.Run(tc.optim, func(t *testing.T) {
			cfg := tinyGPT()
			cfg.Model.Dropout, cfg.Data.Workers, cfg.Optim.Steps, cfg.Optim.Name = 0, 1, 12, tc.optim
			one := cfg
			one.Optim.Batch = 8
			ref := newTrainer(t, one)
			if _, err := ref.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := flatWeights(ref)

			first := cfg
			first.Optim.Batch, first.Parallel.Zero, first.Optim.Steps, first.Output.Save = 4, 3, 5, filepath.Join(t.TempDir(), "ck")
			// Built whole, then sharded: the peaks from then on.
			saved, _ := runRanks(t, first, 2, func(tr *Trainer) { tr.Device.Memory().ResetPeak() })
			if tc.optim == "adamw" {
				// The save gathers one block at a time: the parameters
				// never exist whole on a rank (4P bytes). (8-bit state
				// starts each parameter on a 2048-element block: in
				// this tiny model the gaps outweigh the saving.)
				var P int64
				for _, p := range ref.Model.Parameters() {
					P += int64(p.Len())
				}
				for r, tr := range saved {
					if peak := tr.Device.Memory().Stats().Category(memory.Parameter).Peak; peak >= 4*P {
						t.Errorf("rank %d: parameters peaked at %d B, the whole model's 4P = %d", r, peak, 4*P)
					}
				}
			}

			four := cfg
			four.Optim.Batch, four.Parallel.Zero, four.Output.Resume = 2, 3, first.Output.Save
			trs, _ := runRanks(t, four, 4, func(tr *Trainer) {
				if tr.Step() != 5 {
					t.Errorf("rank %d resumed at step %d, want 5", tr.rank, tr.Step())
				}
			})
			for r, tr := range trs {
				if d := relDiff(flatWeights(tr), want); d > tc.tol {
					t.Errorf("2 ranks then 4 (ZeRO 3), rank %d: parameters differ from 12 steps of one process by %.2g", r, d)
				}
			}

			single := one
			single.Output.Resume = first.Output.Save
			tr := newTrainer(t, single)
			if _, err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := relDiff(flatWeights(tr), want); d > tc.tol {
				t.Errorf("2 ranks (ZeRO 3) then one process: parameters differ by %.2g", d)
			}
		})
	}
}

// distFormats are issue 22's state formats that ZeRO 1 and 2 shard: each
// on the test GPT with the qkv biases frozen (see TestDistEquivalence),
// and the tolerance of a run against one process of twice the batch.
var distFormats = []struct {
	name string
	set  func(*Config)
	tol  float64
}{
	{"adafactor", func(c *Config) { c.Optim.Name, c.Optim.LR = "adafactor", 0 }, 1e-5},
	{"bf16 weights adam", func(c *Config) { c.Precision.Weights, c.Precision.AMP, c.Optim.Name = "bf16", "bf16", "adam" }, 3e-3},
	{"bf16 weights adamw8bit checkpoint", func(c *Config) {
		c.Precision.Weights, c.Precision.AMP, c.Optim.Name, c.Memory.Checkpoint = "bf16", "bf16", "adamw8bit", "every"
	}, 3e-3},
}

func distFormatGPT(set func(*Config)) Config {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Data.Workers, cfg.Memory.Freeze = 0, 1, []string{"blocks.*.attn.qkv.bias"}
	set(&cfg)
	return cfg
}

// TestDistFormatsSaveResume: Adafactor and bf16 weights under ZeRO 2 on 2
// ranks save the full state; resumed on 2 ranks (ZeRO 1) the run ends bit
// for bit where 12 uninterrupted steps on 2 ranks end, and resumed on one
// process where one process of twice the batch ends, within the
// equivalence tolerance (TestDistEquivalence says why bf16 needs 3e-3).
func TestDistFormatsSaveResume(t *testing.T) {
	for _, fm := range distFormats {
		t.Run(fm.name, func(t *testing.T) {
			cfg := distFormatGPT(fm.set)
			cfg.Optim.Batch, cfg.Optim.Steps = 4, 12
			one := cfg
			one.Optim.Batch = 8
			if cfg.Precision.Weights == "bf16" {
				one.Memory.Accum = 2 // bf16 gradients: micro-batches of B, as two ranks
			}
			ref := newTrainer(t, one)
			if _, err := ref.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			whole := cfg
			whole.Parallel.Zero = 1
			wtrs, _ := runRanks(t, whole, 2, nil)
			want2 := flatWeights(wtrs[0])

			first := cfg
			first.Parallel.Zero, first.Optim.Steps, first.Output.Save = 2, 5, filepath.Join(t.TempDir(), "ck")
			runRanks(t, first, 2, nil)

			again := cfg
			again.Parallel.Zero, again.Output.Resume = 1, first.Output.Save
			trs, _ := runRanks(t, again, 2, func(tr *Trainer) {
				if tr.Step() != 5 {
					t.Errorf("rank %d resumed at step %d, want 5", tr.rank, tr.Step())
				}
			})
			for r, tr := range trs {
				if d := relDiff(flatWeights(tr), want2); d != 0 {
					t.Errorf("saved on 2 ranks (ZeRO 2), resumed on 2 (ZeRO 1), rank %d: %.2g from 12 uninterrupted steps", r, d)
				}
			}

			single := one
			single.Output.Resume = first.Output.Save
			tr := newTrainer(t, single)
			if tr.Step() != 5 {
				t.Fatalf("resumed at step %d, want 5", tr.Step())
			}
			if _, err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			d := relDiff(flatWeights(tr), flatWeights(ref))
			if d > fm.tol {
				t.Errorf("saved on 2 ranks (ZeRO 2), resumed on one process: %.2g from 12 steps of one process (tolerance %.2g)", d, fm.tol)
			}
			t.Logf("resumed on one process: %.2g from one process throughout", d)
		})
	}
}

// TestDistFormatsMemoryAndPlan: under ZeRO 1 and 2 on 2 ranks each rank's
// optimizer state is exactly that of the pieces it owns (Adafactor: whole
// tensors, a matrix's row and column statistics; Adam: 8 bytes per owned
// element; 8-bit AdamW: 2 per element and 8 per 2048-element block), the
// ranks' add up to one process's, bf16 parameters take 2 bytes each, and
// -plan -dist mpi -ranks 2 predicts rank 0's parameter, gradient and
// state peaks exactly and its total within 5%. (Frozen parameters are
// left out of the shards: before, a plan gave them gradients and state.)
func TestDistFormatsMemoryAndPlan(t *testing.T) {
	for _, fm := range distFormats {
		for _, zero := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s zero %d", fm.name, zero), func(t *testing.T) {
				cfg := distFormatGPT(fm.set)
				cfg.Optim.Batch, cfg.Optim.Steps, cfg.Parallel.Zero = 4, planSteps, zero
				one := cfg
				one.Parallel.Zero, one.Optim.Batch = 0, 8
				ref := newTrainer(t, one)
				if _, err := ref.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				state := map[int]int64{}
				trs, sums := runRanks(t, cfg, 2, func(tr *Trainer) {
					tr.Hooks.AfterStep = func(tr *Trainer, _ Record) error {
						mu.Lock()
						defer mu.Unlock()
						state[tr.rank] = tr.Device.Memory().Stats().Category(memory.OptimizerState).Current
						return nil
					}
				})
				var sum int64
				for r, tr := range trs {
					var want int64
					for _, v := range tr.zero().Shard() {
						want += stateBytes(cfg.Optim.Name, v.Shape())
					}
					if len(tr.zero().Shard()) == 0 {
						t.Errorf("rank %d owns nothing", r)
					}
					if state[r] != want || tr.Opt.StateBytes() != want {
						t.Errorf("rank %d: optimizer state %d bytes (StateBytes %d), its pieces' %s state is %d", r, state[r], tr.Opt.StateBytes(), cfg.Optim.Name, want)
					}
					sum += state[r]
					if cfg.Precision.Weights == "bf16" {
						var P int64
						for _, p := range tr.Model.Parameters() {
							P += int64(p.Len())
						}
						if got := sums[r].PeakBytes.Parameter; got != 2*P {
							t.Errorf("rank %d: parameters peak at %d bytes, want 2P = %d", r, got, 2*P)
						}
					}
				}
				if want := ref.Opt.StateBytes(); sum != want {
					t.Errorf("the ranks hold %d bytes of optimizer state in all, one process %d", sum, want)
				}
				pc := cfg
				pc.Parallel.Engine, pc.Parallel.Ranks = "mpi", 2
				pred, err := Plan(pc)
				if err != nil {
					t.Fatal(err)
				}
				got := sums[0].PeakBytes
				if pred.OptimizerState != got.OptimizerState || pred.Parameter != got.Parameter || pred.Gradient != got.Gradient {
					t.Errorf("plan of rank 0: P/G/S %d/%d/%d bytes, measured %d/%d/%d", pred.Parameter, pred.Gradient, pred.OptimizerState, got.Parameter, got.Gradient, got.OptimizerState)
				}
				// The total too: the in-process engine, like MPI (the
				// engine -plan -dist mpi plans for), reads and writes
				// CPU tensors in place and stages nothing on the device.
				if pred.Total != got.Total {
					t.Errorf("plan of rank 0: total %d, measured %d (%.2f%% off)", pred.Total, got.Total, 100*math.Abs(float64(pred.Total-got.Total))/float64(got.Total))
				}
			})
		}
	}
}

// stateBytes is the optimizer state of one parameter (or piece) of shape
// sh under optimizer name with its train defaults (Adafactor without a
// first moment).
func stateBytes(name string, sh []int) int64 {
	n := int64(1)
	for _, d := range sh {
		n *= int64(d)
	}
	switch name {
	case "adafactor":
		if len(sh) < 2 {
			return 4 * n
		}
		R, C := int64(sh[len(sh)-2]), int64(sh[len(sh)-1])
		lead := n / (R * C)
		return 4 * lead * (R + C)
	case "adam8bit", "adamw8bit":
		return 2*n + 8*((n+2047)/2048)
	}
	return 8 * n
}

// TestZero3Import: a Hugging Face import under -zero 3 is read block by
// block as it is sharded (hf.Options.Defer): no rank ever holds the
// whole model, and 10 steps over 2 ranks end where one process with the
// same global batch ends (GPT-2 and Llama fixtures, within 1e-4).
func TestZero3Import(t *testing.T) {
	tokens := make([]int32, 4000)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 50) // within the fixtures' vocabulary
	}
	shard := filepath.Join(t.TempDir(), "tokens.bin")
	f, err := os.Create(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := data.WriteShard(f, tokens); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, dir := range []string{"gpt2-f32", "llama-f32"} {
		t.Run(dir, func(t *testing.T) {
			cfg := Default()
			cfg.Model.Init, cfg.Data.Path, cfg.Optim.Steps, cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Model.Dropout = filepath.Join("..", "hf", "testdata", dir), shard, 10, true, 0, 0, 0
			cfg, _, err := cfg.ApplyInit()
			if err != nil {
				t.Fatal(err)
			}
			one := cfg
			one.Optim.Batch = 4
			ref := newTrainer(t, one)
			if _, err := ref.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			var P int64
			for _, p := range ref.Model.Parameters() {
				P += int64(p.Len())
			}
			c := cfg
			c.Optim.Batch, c.Parallel.Zero = 2, 3
			built := make([]int64, 2)
			trs, _ := runRanks(t, c, 2, func(tr *Trainer) {
				built[tr.rank] = tr.Device.Memory().Stats().Category(memory.Parameter).Peak
			})
			for r, tr := range trs {
				// 1e-4: the fixtures' width of 16 amplifies the f32
				// reduction order (2.6e-5 for GPT-2 built whole as
				// well); that the deferred values are the import's,
				// bit for bit, hf's TestLoadDeferred asserts.
				if d := relDiff(flatWeights(tr), flatWeights(ref)); d > 1e-4 {
					t.Errorf("rank %d: 2 ranks of ZeRO-3 differ from one process by %.2g", r, d)
				}
				if built[r] >= 4*P {
					t.Errorf("rank %d: parameters peaked at %d B while the trainer was built, the whole model's 4P = %d B or more", r, built[r], 4*P)
				}
			}
			t.Logf("parameter peak while built: %d B of 4P = %d B", built[0], 4*P)
		})
	}
}

// TestZero2AccumKeepsGradientsSharded: under -zero 2 with accumulation
// each micro-batch's gradients are reduced during its backward, so no
// full gradient outlives its micro-batch: the forwards after the first
// run without them, and the step's peak falls below stage 1's (which
// keeps every full gradient, 4P, from the first micro-batch to the
// last); -plan predicts both exactly.
func TestZero2AccumKeepsGradientsSharded(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Steps, cfg.Optim.Batch, cfg.Memory.Accum, cfg.Data.Workers = 0, 2, 8, 4, 1
	peaks := map[int]PeakBytes{}
	for _, zero := range []int{1, 2} {
		c := cfg
		c.Parallel.Zero = zero
		_, sums := runRanks(t, c, 2, nil)
		peaks[zero] = sums[0].PeakBytes
		pc := c
		pc.Parallel.Engine, pc.Parallel.Ranks = "mpi", 2
		plan, err := Plan(pc)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Gradient != peaks[zero].Gradient || plan.Total != peaks[zero].Total {
			t.Errorf("-zero %d: plan gradient %d B, total %d B; measured %d B, %d B", zero, plan.Gradient, plan.Total, peaks[zero].Gradient, peaks[zero].Total)
		}
	}
	t.Logf("4 micro-batches: peak %d B at stage 1, %d B at stage 2 (gradients %d B and %d B)", peaks[1].Total, peaks[2].Total, peaks[1].Gradient, peaks[2].Gradient)
	if peaks[2].Total >= peaks[1].Total {
		t.Errorf("peak %d B at stage 2, not below stage 1's %d B", peaks[2].Total, peaks[1].Total)
	}
}
