package parallel_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// The ZeRO-3 test model: a GPT whose blocks (12·32² + 13·32 = 12704
// parameters each) outweigh its root (embeddings and final norm: 48·32 +
// 16·32 + 64 = 2112), global batches of 8 sequences of 16 tokens.
var gpt3 = models.GPTConfig{Layers: 3, Heads: 2, Dim: 32, Context: 16, Vocab: 48}

const (
	gpt3Rows  = 8
	gpt3Steps = 20
)

// gptBatch is rows [lo, hi) of step's global batch of token sequences.
func gptBatch(dev *cpu.Device, step, lo, hi int) (x, y *tensor.Tensor, err error) {
	T := gpt3.Context
	xs := make([]int32, 0, (hi-lo)*T)
	ys := make([]int32, 0, (hi-lo)*T)
	for r := lo; r < hi; r++ {
		for j := range T {
			xs = append(xs, int32((step*7+r*13+j*j*5+j)%gpt3.Vocab))
			ys = append(ys, int32((step*7+r*13+(j+1)*(j+1)*5+j+1)%gpt3.Vocab))
		}
	}
	if x, err = tensor.FromInt32(dev, xs, []int{hi - lo, T}, memory.Data); err != nil {
		return nil, nil, err
	}
	y, err = tensor.FromInt32(dev, ys, []int{hi - lo, T}, memory.Data)
	return x, y, err
}

type gptRun struct {
	zero3      bool
	accum      int
	checkpoint checkpoint.Policy
	optimizer  func([]*tensor.Tensor) (*optim.Optimizer, error)
	// measure, when set, gets each step's peak of the model states
	// (parameters, gradients, optimizer state) and the ZeRO3.
	measure func(step int, peak int64, z *parallel.ZeRO3)
	// resumeFrom, when set, loads weights and optimizer state before
	// training; save, when set, gets them after training.
	lookups    bool // ZeRO3Config.LookupsBeforeBlocks
	prefetch   bool // ZeRO3Config.Prefetch, over parallel.NewAsync(c)
	deferred   bool // the model built with GPTConfig.Defer
	resumeFrom *fullState
	save       func(fullState)
	// frozen lists parameter path prefixes that do not train.
	frozen []string
}

// fullState is a whole-model checkpoint held in memory.
type fullState struct {
	weights map[string][]float32
	opt     optim.State
}

// trainGPT trains the test GPT on c's rank (c nil: one process with the
// whole global batch) and returns its parameters, gathered.
func trainGPT(c parallel.Comm, run gptRun, steps int) ([]float32, error) {
	dev := cpu.New(cpu.Threads(1))
	rank, ranks := 0, 1
	if c != nil {
		rank, ranks = c.Rank(), c.Size()
	}
	cfg := gpt3
	cfg.Seed = 1 + uint64(rank)*100 // construction must broadcast rank 0's
	cfg.Defer = run.deferred
	model, err := models.NewGPT(dev, cfg)
	if err != nil {
		return nil, err
	}
	defer nn.Release(model)
	for _, p := range model.Parameters() {
		for _, f := range run.frozen {
			if strings.HasPrefix(p.Name(), f) {
				p.SetRequiresGrad(false)
			}
		}
	}
	newOpt := run.optimizer
	if newOpt == nil {
		newOpt = gptAdamW
	}
	var (
		opt *optim.Optimizer
		z   *parallel.ZeRO3
	)
	if run.zero3 {
		zc := parallel.ZeRO3Config{LookupsBeforeBlocks: run.lookups, Prefetch: run.prefetch}
		if run.prefetch {
			c = parallel.NewAsync(c)
		}
		if z, err = parallel.NewZeRO3(c, model, zc, newOpt); err != nil {
			return nil, err
		}
		defer z.Release()
		opt = z.Optimizer()
		model.SetBlockRunner(z.Runner(run.checkpoint.Runner()))
	} else {
		if opt, err = newOpt(model.Parameters()); err != nil {
			return nil, err
		}
		defer opt.Release()
		model.SetBlockRunner(run.checkpoint.Runner())
	}
	if st := run.resumeFrom; st != nil {
		if z != nil {
			err = z.LoadFull(func(p *tensor.Tensor) []float32 { return st.weights[p.Name()] })
			if err == nil {
				err = z.ImportFull(st.opt)
			}
		} else {
			for _, p := range model.Parameters() {
				if err = p.SetFloat32s(st.weights[p.Name()]); err != nil {
					break
				}
			}
			if err == nil {
				err = opt.Import(st.opt)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	accum := max(run.accum, 1)
	per := gpt3Rows / ranks
	for step := range steps {
		x, y, err := gptBatch(dev, step, rank*per, (rank+1)*per)
		if err != nil {
			return nil, err
		}
		micro, err := accumulate.Split(x, y, accum)
		if err != nil {
			return nil, err
		}
		w := dev.Memory().NewWatermark()
		_, err = accumulate.Window(micro, func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
			if z != nil {
				if err := z.BeforeForward(); err != nil {
					panic(&tensor.Error{Op: "test", Msg: err.Error()})
				}
			}
			return model.TokenLoss(nn.NewRun(s, 0), mb.Inputs, mb.Targets, tensor.CrossEntropyOptions{})
		}, nil)
		for _, mb := range micro {
			mb.Release()
		}
		x.Release()
		y.Release()
		if err == nil {
			if z != nil {
				err = z.Step()
			} else {
				err = opt.Step()
				opt.ZeroGrad()
			}
		}
		if run.measure != nil {
			run.measure(step, w.PeakOfModelState(), z)
		}
		w.Close()
		if err != nil {
			if z != nil && z.Err() != nil {
				err = z.Err()
			}
			return nil, fmt.Errorf("rank %d, step %d: %w", rank, step, err)
		}
	}
	var out []float32
	read := func() error {
		st := fullState{weights: map[string][]float32{}}
		for _, p := range model.Parameters() {
			v := p.Float32s()
			st.weights[p.Name()] = v
			out = append(out, v...)
		}
		var err error
		if z != nil {
			st.opt, err = z.ExportFull() // a collective: every rank
		} else {
			st.opt, err = opt.Export()
		}
		if run.save != nil {
			run.save(st)
		}
		return err
	}
	if z != nil {
		// ExportFull inside GatherAll: every rank runs both collectives.
		err = z.GatherAll(read)
	} else {
		err = read()
	}
	return out, err
}

// TestZero3Equivalence: 20 steps of the GPT with its parameters sharded
// over 2 and 4 ranks equal one process with the same global batch, also
// with activation checkpointing and with accumulation.
func TestZero3Equivalence(t *testing.T) {
	cases := []struct {
		name  string
		ranks int
		run   gptRun
	}{
		{"2 ranks", 2, gptRun{}},
		{"4 ranks", 4, gptRun{}},
		{"2 ranks, checkpoint every block", 2, gptRun{checkpoint: checkpoint.Every}},
		{"4 ranks, checkpoint sqrt", 4, gptRun{checkpoint: checkpoint.Sqrt}},
		{"2 ranks, accumulation 2", 2, gptRun{accum: 2}},
		{"2 ranks, accumulation 2, lookups before the blocks", 2, gptRun{accum: 2, lookups: true}},
		{"2 ranks, checkpoint and accumulation", 2, gptRun{accum: 2, checkpoint: checkpoint.Every}},
		// Block 0 and the embeddings frozen: block 1's input needs no
		// gradient, so its backward ends by its parameters' hooks.
		{"4 ranks, frozen embeddings and first block", 4, gptRun{frozen: []string{"embed.", "blocks.0."}}},
		{"2 ranks, sgd", 2, gptRun{optimizer: func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.05, Momentum: 0.9})
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := trainGPT(nil, gptRun{accum: tc.run.accum, checkpoint: tc.run.checkpoint, optimizer: tc.run.optimizer, frozen: tc.run.frozen}, gpt3Steps)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]float32, tc.ranks)
			run := tc.run
			run.zero3 = true
			errs := runRanks(parallel.NewLocal(tc.ranks), func(c parallel.Comm) error {
				var err error
				got[c.Rank()], err = trainGPT(c, run, gpt3Steps)
				return err
			})
			checkErrs(t, errs)
			for r := range got {
				e := relL2(got[r], want)
				if e > 1e-5 {
					t.Errorf("rank %d: parameters differ from one process by %.3g (relative)", r, e)
				}
				if r == 0 {
					t.Logf("‖Δ‖/‖w‖ = %.2g", e)
				}
			}
		})
	}
}

// TestZero3Memory: the per-rank peak of parameters + gradients +
// optimizer state, measured by the allocator, stays within 16·P/N plus
// twice the largest group's parameters (4 bytes each): the shards, and
// one block whole with its gradient.
func TestZero3Memory(t *testing.T) {
	for _, ranks := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", ranks), func(t *testing.T) {
			peaks := make([]int64, ranks)
			run := gptRun{zero3: true, measure: func(step int, peak int64, z *parallel.ZeRO3) {
				if step == 0 {
					return // Adam's state is made by the first step
				}
				peaks[z.Rank()] = max(peaks[z.Rank()], peak)
			}}
			errs := runRanks(parallel.NewLocal(ranks), func(c parallel.Comm) error {
				_, err := trainGPT(c, run, 3)
				return err
			})
			checkErrs(t, errs)
			D := int64(gpt3.Dim)
			block := 12*D*D + 13*D
			P := int64(gpt3.Vocab+gpt3.Context+2)*D + int64(gpt3.Layers)*block
			bound := 16*P/int64(ranks) + 2*4*block
			for r := range peaks {
				t.Logf("rank %d: model-state peak %d B; 16P/N = %d B, bound %d B", r, peaks[r], 16*P/int64(ranks), bound)
				if peaks[r] > bound {
					t.Errorf("rank %d: model-state peak %d B exceeds 16·P/N + 2·(a block's parameters, 4 B each) = %d B", r, peaks[r], bound)
				}
			}
		})
	}
}

// TestZero3Checkpoint: the whole-model state of a 2-rank ZeRO-3 run
// resumes on 4 ranks, on 1 process, and on 2 ranks of ZeRO-3 again, each
// continuing exactly as the uninterrupted run.
func TestZero3Checkpoint(t *testing.T) {
	var saved fullState
	errs := runRanks(parallel.NewLocal(2), func(c parallel.Comm) error {
		run := gptRun{zero3: true}
		if c.Rank() == 0 {
			run.save = func(st fullState) { saved = st }
		}
		_, err := trainGPT(c, run, 4)
		return err
	})
	checkErrs(t, errs)
	if saved.opt.Step != 4 || len(saved.opt.Tensors) == 0 {
		t.Fatalf("saved optimizer state at step %d with %d tensors", saved.opt.Step, len(saved.opt.Tensors))
	}
	// Uninterrupted: 4 + 3 steps in one process. The resumed runs see
	// steps 0..2 of the data again; so does the reference.
	want, err := trainGPT(nil, gptRun{resumeFrom: &saved}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{4, 2} {
		t.Run(fmt.Sprintf("on %d ranks", ranks), func(t *testing.T) {
			got := make([][]float32, ranks)
			errs := runRanks(parallel.NewLocal(ranks), func(c parallel.Comm) error {
				var err error
				got[c.Rank()], err = trainGPT(c, gptRun{zero3: true, resumeFrom: &saved}, 3)
				return err
			})
			checkErrs(t, errs)
			if e := relL2(got[0], want); e > 1e-5 {
				t.Errorf("resumed on %d ranks: parameters differ from the one-process resume by %.3g", ranks, e)
			}
		})
	}
	t.Run("on 1 process", func(t *testing.T) {
		// The one-process resume above is itself the check that the
		// state loads without ZeRO; here, on a ZeRO-3 group of one.
		got := make([][]float32, 1)
		checkErrs(t, runRanks(parallel.NewLocal(1), func(c parallel.Comm) error {
			var err error
			got[0], err = trainGPT(c, gptRun{zero3: true, resumeFrom: &saved}, 3)
			return err
		}))
		if e := relL2(got[0], want); e > 1e-5 {
			t.Errorf("resumed on 1 rank: parameters differ by %.3g", e)
		}
	})
}

// TestZero3DeadRank: a rank that closes its communicator in the middle of
// training makes the others fail with a *parallel.RankError naming it, also
// when their gathers are prefetched (waited for on the Async).
func TestZero3DeadRank(t *testing.T) {
	for _, tc := range []struct {
		ranks    int
		prefetch bool
	}{{2, false}, {4, false}, {2, true}, {4, true}} {
		ranks := tc.ranks
		t.Run(fmt.Sprintf("%d ranks, prefetch %v", ranks, tc.prefetch), func(t *testing.T) {
			const dead = 1
			errs := runRanks(parallel.NewLocal(ranks, parallel.Timeout(10*time.Second)), func(c parallel.Comm) error {
				run := gptRun{zero3: true, prefetch: tc.prefetch}
				if c.Rank() == dead {
					run.measure = func(step int, _ int64, _ *parallel.ZeRO3) {
						if step == 1 {
							c.Close()
						}
					}
				}
				_, err := trainGPT(c, run, 4)
				return err
			})
			for r, err := range errs {
				if r == dead {
					continue
				}
				var re *parallel.RankError
				if !errors.As(err, &re) || re.Rank != dead {
					t.Errorf("rank %d: %v; want a *parallel.RankError naming rank %d", r, err, dead)
				}
			}
		})
	}
}

// relL2 is ‖a-b‖/‖b‖, the measure train's equivalence tests use: an
// element whose true gradient is zero (the attention key bias: softmax
// ignores a shift) trains on rounding noise, which Adam turns into ±lr
// steps whatever the reduction order, so elementwise comparisons of Adam
// runs say nothing about the reduction.
func relL2(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// gptAdamW is the GPT tests' optimizer. Its learning rate is a GPT's
// (1e-3, not the MLP tests' 1e-2): f32 sums of the ranks' gradients
// associate differently from one process's, and the attention key bias,
// whose true gradient is zero (softmax ignores a shift), trains on
// rounding noise that Adam turns into ±lr steps; at 1e-2 that alone moves
// the parameters by 3e-5 in 20 steps (one process with -accum 2 against
// -accum 1, no ranks at all).
func gptAdamW(ps []*tensor.Tensor) (*optim.Optimizer, error) {
	return optim.NewAdamW(ps, optim.AdamW{LR: 1e-3, WeightDecay: 0.01})
}

// TestZero3ParametersNeedTheRunner: once sharded, a parameter holds no
// memory outside its block's gather; a forward that bypasses the runner
// is an error naming the parameter, not a read of freed memory, and leaks
// nothing.
func TestZero3ParametersNeedTheRunner(t *testing.T) {
	checkErrs(t, runRanks(parallel.NewLocal(1), func(c parallel.Comm) error {
		dev := cpu.New(cpu.Threads(1))
		model, err := models.NewGPT(dev, gpt3)
		if err != nil {
			return err
		}
		defer nn.Release(model)
		z, err := parallel.NewZeRO3(c, model, parallel.ZeRO3Config{}, gptAdamW)
		if err != nil {
			return err
		}
		defer z.Release()
		x, y, err := gptBatch(dev, 0, 0, 2)
		if err != nil {
			return err
		}
		defer x.Release()
		defer y.Release()
		before := dev.Memory().Stats().Requested.Current
		err = tensor.Step(func(s *tensor.Scope) error {
			if err := z.BeforeForward(); err != nil {
				return err
			}
			model.TokenLoss(nn.NewRun(s, 0), x, y, tensor.CrossEntropyOptions{}) // no z.Runner installed
			return nil
		})
		var te *tensor.Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "blocks.0.") || !strings.Contains(err.Error(), "evicted") {
			return fmt.Errorf("a forward without the runner: %v; want a *tensor.Error naming a parameter of blocks.0 as evicted", err)
		}
		z.ZeroGrad() // evicts the root BeforeForward gathered
		if after := dev.Memory().Stats().Requested.Current; after != before {
			return fmt.Errorf("%d bytes before the failed forward, %d after", before, after)
		}
		return nil
	}))
}

// TestZero3GatherCounts: a block is gathered before its forward and again
// before its backward, and reduced once; the root is gathered before the
// forward, after the blocks and after their backward, and reduced twice
// (the head's gradient when backward reaches the blocks, the embeddings'
// at the end). Under checkpointing a block is gathered once more for its
// recomputation (the last segment is not recomputed) in the first step;
// from the second on, the recorded trace says the recomputed block's
// backward comes next, so it stays whole (Kept) and is not gathered
// again. Prefetching changes when gathers start, not how many there are.
func TestZero3GatherCounts(t *testing.T) {
	L := gpt3.Layers
	for _, tc := range []struct {
		name         string
		policy       checkpoint.Policy
		first, later int // gathers in the first step and in the others
		reduction    int
		lookups      bool // the root is not gathered after the blocks' backward
		prefetch     bool
	}{
		{"no checkpointing", checkpoint.Off, 2*L + 3, 2*L + 3, L + 2, false, false},
		{"checkpoint every block", checkpoint.Every, 3*L - 1 + 3, 2*L + 3, L + 2, false, false},
		{"lookups before the blocks", checkpoint.Off, 2*L + 2, 2*L + 2, L + 2, true, false},
		{"prefetch", checkpoint.Off, 2*L + 3, 2*L + 3, L + 2, false, true},
		{"prefetch, checkpoint every block", checkpoint.Every, 3*L - 1 + 3, 2*L + 3, L + 2, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrs(t, runRanks(parallel.NewLocal(2), func(c parallel.Comm) error {
				var g0, r0 int
				var errs []error
				run := gptRun{zero3: true, checkpoint: tc.policy, lookups: tc.lookups, prefetch: tc.prefetch, measure: func(step int, _ int64, z *parallel.ZeRO3) {
					want := tc.later
					if step == 0 {
						want = tc.first
					}
					if g, r := z.Gathers-g0, z.Reductions-r0; g != want || r != tc.reduction {
						errs = append(errs, fmt.Errorf("step %d: %d gathers and %d reductions, want %d and %d", step, g, r, want, tc.reduction))
					}
					if step > 0 && tc.prefetch && z.Prefetches == 0 {
						errs = append(errs, fmt.Errorf("step %d: nothing prefetched", step))
					}
					g0, r0 = z.Gathers, z.Reductions
				}}
				_, err := trainGPT(c, run, 3)
				return errors.Join(append(errs, err)...)
			}))
		})
	}
}

// TestZero3Prefetch: gathers started ahead (over an Async communicator)
// give bit for bit the parameters of gathers made when needed, with
// checkpointing, accumulation and frozen layers; they do start ahead
// (Prefetches) and the model-state peak grows by at most one block's
// parameters over TestZero3Memory's bound: the price of the overlap.
func TestZero3Prefetch(t *testing.T) {
	D := int64(gpt3.Dim)
	block := 12*D*D + 13*D
	P := int64(gpt3.Vocab+gpt3.Context+2)*D + int64(gpt3.Layers)*block
	for _, tc := range []struct {
		name  string
		ranks int
		run   gptRun
	}{
		{"2 ranks", 2, gptRun{}},
		{"4 ranks, checkpoint sqrt", 4, gptRun{checkpoint: checkpoint.Sqrt}},
		{"2 ranks, checkpoint every block, accumulation 2", 2, gptRun{checkpoint: checkpoint.Every, accum: 2}},
		{"2 ranks, lookups before the blocks", 2, gptRun{lookups: true}},
		{"4 ranks, frozen embeddings and first block", 4, gptRun{frozen: []string{"embed.", "blocks.0."}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			train := func(prefetch bool) ([][]float32, []int64, []int) {
				got := make([][]float32, tc.ranks)
				peaks := make([]int64, tc.ranks)
				fetched := make([]int, tc.ranks)
				run := tc.run
				run.zero3, run.prefetch = true, prefetch
				run.measure = func(step int, peak int64, z *parallel.ZeRO3) {
					if step > 0 {
						peaks[z.Rank()] = max(peaks[z.Rank()], peak)
					}
					fetched[z.Rank()] = z.Prefetches
				}
				checkErrs(t, runRanks(parallel.NewLocal(tc.ranks), func(c parallel.Comm) error {
					var err error
					got[c.Rank()], err = trainGPT(c, run, 4)
					return err
				}))
				return got, peaks, fetched
			}
			want, plain, _ := train(false)
			got, peaks, fetched := train(true)
			bound := 16*P/int64(tc.ranks) + 3*4*block
			for r := range got {
				if !slices.Equal(got[r], want[r]) {
					t.Errorf("rank %d: parameters differ with prefetching (relative %.3g)", r, relL2(got[r], want[r]))
				}
				if fetched[r] == 0 {
					t.Errorf("rank %d: nothing was prefetched", r)
				}
				if peaks[r] > bound {
					t.Errorf("rank %d: model-state peak %d B with prefetching, above 16·P/N + 3·4·(block) = %d B", r, peaks[r], bound)
				}
				if r == 0 {
					t.Logf("model-state peak %d B without prefetching, %d B with (%d prefetches); one block is %d B", plain[r], peaks[r], fetched[r], 4*block)
				}
			}
		})
	}
}

// TestZero3PrefetchNeedsAsync: prefetching over a communicator the rank
// also uses directly would let the two reach the engine in either order,
// so NewZeRO3 refuses it.
func TestZero3PrefetchNeedsAsync(t *testing.T) {
	checkErrs(t, runRanks(parallel.NewLocal(1), func(c parallel.Comm) error {
		dev := cpu.New(cpu.Threads(1))
		model, err := models.NewGPT(dev, gpt3)
		if err != nil {
			return err
		}
		defer nn.Release(model)
		z, err := parallel.NewZeRO3(c, model, parallel.ZeRO3Config{Prefetch: true}, gptAdamW)
		if err == nil {
			z.Release()
			return errors.New("NewZeRO3 prefetches over a synchronous communicator")
		}
		if !strings.Contains(err.Error(), "NewAsync") {
			return fmt.Errorf("error %q does not say what to do", err)
		}
		return nil
	}))
}

// TestZero3DeferredModel: a GPT built deferred (no parameter memory) and
// then sharded is drawn one group at a time: the parameter peak while
// sharding is the shards plus the largest group, not the whole model
// (4P), and training it gives bit for bit what a model built whole gives.
func TestZero3DeferredModel(t *testing.T) {
	const ranks = 2
	for _, deferred := range []bool{false, true} {
		peaks := make([]int64, ranks)
		checkErrs(t, runRanks(parallel.NewLocal(ranks), func(c parallel.Comm) error {
			dev := cpu.New(cpu.Threads(1))
			cfg := gpt3
			cfg.Defer = deferred
			model, err := models.NewGPT(dev, cfg)
			if err != nil {
				return err
			}
			defer nn.Release(model)
			if now := dev.Memory().Stats().Category(memory.Parameter).Current; deferred && now != 0 {
				return fmt.Errorf("a deferred model holds %d B of parameters", now)
			}
			w := dev.Memory().NewWatermark()
			z, err := parallel.NewZeRO3(c, model, parallel.ZeRO3Config{}, gptAdamW)
			if err != nil {
				return err
			}
			defer z.Release()
			peaks[c.Rank()] = w.PeakOf(memory.Parameter)
			w.Close()
			return nil
		}))
		D := int64(gpt3.Dim)
		block := 12*D*D + 13*D
		root := int64(gpt3.Vocab+gpt3.Context+2) * D
		P := root + int64(gpt3.Layers)*block
		for r, peak := range peaks {
			t.Logf("deferred %v, rank %d: parameter peak while sharding %d B (4P = %d B)", deferred, r, peak, 4*P)
			if bound := 4*P/ranks + 4*max(block, root) + 4*2048; deferred && peak > bound {
				t.Errorf("rank %d: a deferred model peaked at %d B of parameters while sharded, above the shards and one group (%d B)", r, peak, bound)
			}
			if !deferred && peak < 4*P {
				t.Errorf("rank %d: a model built whole peaked at %d B, below 4P = %d B: the test measures nothing", r, peak, 4*P)
			}
		}
	}
	want := make([][]float32, ranks)
	got := make([][]float32, ranks)
	for i, deferred := range []bool{false, true} {
		out := [][][]float32{want, got}[i]
		checkErrs(t, runRanks(parallel.NewLocal(ranks), func(c parallel.Comm) error {
			var err error
			out[c.Rank()], err = trainGPT(c, gptRun{zero3: true, deferred: deferred}, 4)
			return err
		}))
	}
	for r := range got {
		if !slices.Equal(got[r], want[r]) {
			t.Errorf("rank %d: the deferred model trains to other parameters (relative %.3g)", r, relL2(got[r], want[r]))
		}
	}
}
