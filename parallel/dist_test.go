package parallel_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

func f32(t *testing.T, dev *cpu.Device, v ...float32) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromFloat32(dev, v, []int{len(v)}, memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// Every collective of the in-process communicator gives every rank the
// documented result.
func TestLocalCollectives(t *testing.T) {
	const n = 3
	got := make([][][]float32, n)
	errs := runRanks(parallel.NewLocal(n), func(c parallel.Comm) error {
		dev := cpu.New()
		r := float32(c.Rank())
		var out [][]float32
		for _, op := range []parallel.Op{parallel.Sum, parallel.Avg, parallel.Max, parallel.Min} {
			x := f32(t, dev, r, 10*r+1)
			if err := c.AllReduce(x, op); err != nil {
				return err
			}
			out = append(out, x.Float32s())
			x.Release()
		}
		in := f32(t, dev, r, r, r+1, r+1, r+2, r+2) // 2 per rank
		o := f32(t, dev, 0, 0)
		if err := c.ReduceScatter(o, in, parallel.Sum); err != nil {
			return err
		}
		out = append(out, o.Float32s())
		g := f32(t, dev, make([]float32, 2*n)...)
		if err := c.AllGather(g, o); err != nil {
			return err
		}
		out = append(out, g.Float32s())
		b := f32(t, dev, r+5, r+6)
		if err := c.Broadcast(b, 2); err != nil {
			return err
		}
		out = append(out, b.Float32s())
		if err := c.Barrier(); err != nil {
			return err
		}
		got[c.Rank()] = out
		return nil
	})
	checkErrs(t, errs)
	// ranks 0, 1, 2: values (r, 10r+1); reduce-scatter input block q is
	// (r+q, r+q), so the sum over ranks of block q is 3+3q.
	want := [][]float32{{3, 33}, {1, 11}, {2, 21}, {0, 1}}
	for r := range n {
		for i, w := range want {
			if !slices.Equal(got[r][i], w) {
				t.Errorf("rank %d all_reduce %d: %v, want %v", r, i, got[r][i], w)
			}
		}
		if w := []float32{3 + 3*float32(r), 3 + 3*float32(r)}; !slices.Equal(got[r][4], w) {
			t.Errorf("rank %d reduce_scatter: %v, want %v", r, got[r][4], w)
		}
		if w := []float32{3, 3, 6, 6, 9, 9}; !slices.Equal(got[r][5], w) {
			t.Errorf("rank %d all_gather: %v, want %v", r, got[r][5], w)
		}
		if w := []float32{7, 8}; !slices.Equal(got[r][6], w) {
			t.Errorf("rank %d broadcast: %v, want %v", r, got[r][6], w)
		}
	}
}

func TestLocalRejectsBadTensors(t *testing.T) {
	c := parallel.NewLocal(2)[0]
	dev := cpu.New()
	x, _ := tensor.FromFloat64(dev, []float64{1, 2}, []int{2}, memory.Temporary)
	defer x.Release()
	if err := c.AllReduce(x, parallel.Sum); err == nil || !strings.Contains(err.Error(), "want f32") {
		t.Errorf("f64 tensor: %v", err)
	}
	a, b := f32(t, dev, 1, 2, 3), f32(t, dev, 1)
	if err := c.ReduceScatter(b, a, parallel.Sum); err == nil || !strings.Contains(err.Error(), "3 elements against 1 per rank × 2 ranks") {
		t.Errorf("reduce_scatter lengths: %v", err)
	}
	if err := c.Broadcast(b, 2); err == nil {
		t.Error("broadcast from rank 2 of 2 succeeded")
	}
}

// A rank that stops taking part makes the others fail, naming it, within
// the timeout; and the group stays failed.
func TestDeadRankIsNamed(t *testing.T) {
	const timeout = 300 * time.Millisecond
	start := time.Now()
	errs := runRanks(parallel.NewLocal(3, parallel.Timeout(timeout)), func(c parallel.Comm) error {
		dev := cpu.New()
		x := f32(t, dev, 1, 2, 3)
		defer x.Release()
		for step := 0; step < 10; step++ {
			if c.Rank() == 2 && step == 4 {
				return errDied // no Close, no more collectives
			}
			if err := c.AllReduce(x, parallel.Avg); err != nil {
				// a failed group fails at once from then on
				if err2 := c.Barrier(); err2 == nil {
					return errors.New("barrier succeeded on a failed group")
				}
				return err
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	if elapsed > 2*time.Second {
		t.Errorf("took %v, want < 2s", elapsed)
	}
	for r := range 2 {
		var re *parallel.RankError
		if !errors.As(errs[r], &re) || re.Rank != 2 || re.Seq != 5 {
			t.Fatalf("rank %d: %v; want a RankError naming rank 2 at all_reduce #5", r, errs[r])
		}
		t.Logf("rank %d after %v: %v", r, elapsed.Round(time.Millisecond), errs[r])
	}
	if errs[2] != nil {
		t.Errorf("rank 2: %v", errs[2])
	}
}

// A rank that closes (its deferred Close after a crash) fails the others
// at once rather than at the timeout.
func TestClosedRankFailsOthersAtOnce(t *testing.T) {
	start := time.Now()
	errs := runRanks(parallel.NewLocal(2, parallel.Timeout(time.Minute)), func(c parallel.Comm) error {
		if c.Rank() == 1 {
			time.Sleep(20 * time.Millisecond)
			panic("rank 1 crashes") // runRanks closes its communicator
		}
		return c.Barrier()
	})
	var re *parallel.RankError
	if !errors.As(errs[0], &re) || re.Rank != 1 || !strings.Contains(re.Error(), "closed") {
		t.Fatalf("rank 0: %v", errs[0])
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

// Ranks calling different collectives are told which rank is out of step.
func TestMismatchedCollectives(t *testing.T) {
	errs := runRanks(parallel.NewLocal(2, parallel.Timeout(5*time.Second)), func(c parallel.Comm) error {
		dev := cpu.New()
		x := f32(t, dev, 1, 2)
		if c.Rank() == 0 {
			return c.AllReduce(x, parallel.Sum)
		}
		return c.Broadcast(x, 0)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1 called broadcast(root 0, 2 elements) while rank 0 called all_reduce(sum, 2 elements)") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Two ranks with half the batch each end with the parameters of one rank
// with the whole batch, with and without ZeRO, with and without
// accumulation; and accumulation adds no communication, but where stage 2
// reduces every micro-batch's gradients (once more per micro-batch).
func TestEquivalence(t *testing.T) {
	const steps = 20
	ref, err := trainRank(parallel.NewLocal(1)[0], plain, steps, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[mode]int{}
	for _, m := range []mode{ddp, zero1, zero2, zero2ov, zero2each} {
		for _, accum := range []int{1, 2} {
			res := make([]result, 2)
			errs := runRanks(parallel.NewLocal(2, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
				var err error
				res[c.Rank()], err = trainRank(c, m, steps, accum, 64, nil) // 16-element buckets
				return err
			})
			checkErrs(t, errs)
			for r := range res {
				e := relErr(res[r].params, ref.params)
				t.Logf("%v accum %d rank %d: relative error %.2g, %d collectives", m, accum, r, e, res[r].calls)
				if e > 1e-5 {
					t.Errorf("%v accum %d rank %d: relative error %.3g > 1e-5", m, accum, r, e)
				}
			}
			if !slices.Equal(res[0].params, res[1].params) {
				t.Errorf("%v accum %d: ranks disagree", m, accum)
			}
			switch {
			case accum == 1:
				calls[m] = res[0].calls
			case m == zero2each:
				if res[0].calls <= calls[m] {
					t.Errorf("%v: %d collectives with accumulation, %d without: each micro-batch is reduced", m, res[0].calls, calls[m])
				}
			case res[0].calls != calls[m]:
				t.Errorf("%v: %d collectives with accumulation, %d without: accumulation must communicate once per step", m, res[0].calls, calls[m])
			}
		}
	}
}

// Per-rank memory with ZeRO over 2 ranks: optimizer state is 8 bytes per
// owned element (stage 1 and 2), gradients after the reduction 4 bytes per
// parameter (stage 1) or per owned element (stage 2); no temporaries
// survive a step.
func TestZeROMemory(t *testing.T) {
	owned := []int64{195, 194} // ⌈389/2⌉ and the rest
	for _, m := range []mode{ddp, zero1, zero2, zero2ov} {
		type obs struct{ grad, gradPeak, bwdGradPeak, state, param, temp, tempPeak, commPeak int64 }
		got := make([]obs, 2)
		errs := runRanks(parallel.NewLocal(2, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			o := &got[c.Rank()]
			_, err := trainRank(c, m, 2, 1, 256, func(stage string, st memory.Stats) {
				switch stage {
				case "backward":
					o.bwdGradPeak = st.Category(memory.Gradient).Peak
				case "reduced":
					o.grad = st.Category(memory.Gradient).Current
					o.gradPeak = st.Category(memory.Gradient).Peak
					o.commPeak = st.Category(memory.Temporary).Peak
				case "stepped":
					o.state = st.Category(memory.OptimizerState).Current
					o.param = st.Category(memory.Parameter).Current
					o.temp = st.Category(memory.Temporary).Current
					o.tempPeak = st.Category(memory.Temporary).Peak
				}
			})
			return err
		})
		checkErrs(t, errs)
		for r, o := range got {
			t.Logf("%v rank %d: parameter %d B, gradient peak in backward %d B, after the reduction %d B (peak in it %d B), optimizer state %d B, temporary peak in the reduction %d B",
				m, r, o.param, o.bwdGradPeak, o.grad, o.gradPeak, o.state, o.commPeak)
			// a 256 B bucket (64 elements), staged through the host as a
			// 512 B f64 copy and a 256 B f32 copy
			if o.commPeak > 4*256+2048 {
				t.Errorf("%v rank %d: %d B of temporaries while reducing with 256 B buckets", m, r, o.commPeak)
			}
			if o.param != 4*paramCount {
				t.Errorf("%v rank %d: parameters %d B, want %d", m, r, o.param, 4*paramCount)
			}
			if o.temp != 0 {
				t.Errorf("%v rank %d: %d B of temporaries left after the step", m, r, o.temp)
			}
			wantState := int64(8 * paramCount)
			if m != ddp {
				wantState = 8 * owned[r]
			}
			if o.state != wantState {
				t.Errorf("%v rank %d: optimizer state %d B, want %d", m, r, o.state, wantState)
			}
			switch m {
			case zero1:
				if o.grad != 4*paramCount {
					t.Errorf("zero1 rank %d: gradients %d B after the reduction, want %d", r, o.grad, 4*paramCount)
				}
			case zero2ov:
				if o.grad != 4*owned[r] {
					t.Errorf("zero2ov rank %d: gradients %d B after the reduction, want %d", r, o.grad, 4*owned[r])
				}
				// Backward's peak is not asserted here: in this model one
				// parameter is 62% of P, and its full gradient and its owned
				// piece coexist while it is reduced. train's DistMemory
				// checks the peak on a GPT.
			case zero2:
				if o.grad != 4*owned[r] {
					t.Errorf("zero2 rank %d: gradients %d B after the reduction, want %d", r, o.grad, 4*owned[r])
				}
				// The owned gradients are moved out view by view as the full
				// ones are released (non-owned first): never both whole.
				if o.gradPeak >= 4*paramCount+4*owned[r] {
					t.Errorf("zero2 rank %d: gradients peak at %d B during the reduction", r, o.gradPeak)
				}
			}
		}
	}
}

// A one-rank communicator makes DDP and ZeRO plain training.
func TestSingleRank(t *testing.T) {
	ref, err := trainRank(parallel.NewLocal(1)[0], plain, 3, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []mode{ddp, zero1, zero2} {
		res, err := trainRank(parallel.NewLocal(1)[0], m, 3, 1, 0, nil)
		if err != nil {
			t.Fatal(m, err)
		}
		if !slices.Equal(res.params, ref.params) {
			t.Errorf("%v on one rank differs from plain training", m)
		}
	}
}

func TestZeROGradNorm(t *testing.T) {
	norms := map[string][]float64{}
	for _, name := range []string{"ddp", "zero2"} {
		got := make([]float64, 2)
		errs := runRanks(parallel.NewLocal(2, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			dev := cpu.New(cpu.Threads(1))
			model, err := models.NewMLP(dev, models.MLPConfig{Widths: widths, Seed: 1})
			if err != nil {
				return err
			}
			defer nn.Release(model)
			params := model.Parameters()
			x, y, err := batch(dev, 0, c.Rank()*4, c.Rank()*4+4)
			if err != nil {
				return err
			}
			defer x.Release()
			defer y.Release()
			err = tensor.Step(func(s *tensor.Scope) error {
				s.CrossEntropy(model.Forward(nn.NewRun(s, 0), x), y, tensor.CrossEntropyOptions{}).Backward()
				return nil
			})
			if err != nil {
				return err
			}
			if name == "ddp" {
				d, err := parallel.NewDDP(c, params, parallel.DDPConfig{BucketBytes: 100})
				if err != nil {
					return err
				}
				if err := d.ReduceGradients(); err != nil {
					return err
				}
				got[c.Rank()], err = optim.GradNorm(params)
				return err
			}
			z, err := parallel.NewZeRO(c, params, parallel.ZeROConfig{Stage: 2, BucketBytes: 100}, newAdam)
			if err != nil {
				return err
			}
			defer z.Release()
			if err := z.ReduceGradients(); err != nil {
				return err
			}
			n, err := z.ClipGradNorm(0.5)
			if err != nil {
				return err
			}
			got[c.Rank()] = n
			after, err := z.GradNorm()
			if err != nil {
				return err
			}
			if math.Abs(after-0.5) > 1e-6 {
				return fmt.Errorf("norm after clipping %g, want 0.5", after)
			}
			return nil
		})
		checkErrs(t, errs)
		norms[name] = got
	}
	t.Logf("global gradient norm: ddp %v, zero2 %v", norms["ddp"], norms["zero2"])
	for r := range 2 {
		if d := math.Abs(norms["ddp"][r]-norms["zero2"][r]) / norms["ddp"][r]; d > 1e-6 {
			t.Errorf("rank %d: ddp norm %g, zero norm %g", r, norms["ddp"][r], norms["zero2"][r])
		}
	}
}

// TestZeRO2ReducesEachMicroBatch: with accumulation, stage 2 armed for
// every micro-batch starts each micro-batch's forward without a full
// gradient (the earlier micro-batches' are reduced into the shard's),
// where armed for the last micro-batch alone it carries all of them (4P)
// through every forward after the first.
func TestZeRO2ReducesEachMicroBatch(t *testing.T) {
	held := map[mode]int64{} // the most gradient bytes at a micro-batch's start
	for _, m := range []mode{zero2ov, zero2each} {
		got := make([]int64, 2)
		checkErrs(t, runRanks(parallel.NewLocal(2, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			_, err := trainRank(c, m, 2, 4, 256, func(stage string, st memory.Stats) {
				if stage == "micro-batch" {
					got[c.Rank()] = max(got[c.Rank()], st.Category(memory.Gradient).Current)
				}
			})
			return err
		}))
		held[m] = max(got[0], got[1])
	}
	t.Logf("gradient bytes at a micro-batch's start: %d armed for the last, %d armed for each (4P = %d)", held[zero2ov], held[zero2each], 4*paramCount)
	// Reducing each: the shard's gradients only (4 B per owned element,
	// 195 at most); reducing the last: every full gradient.
	if held[zero2each] > 4*195 || held[zero2ov] < 4*paramCount {
		t.Errorf("gradients at a micro-batch's start: %d B reducing each micro-batch (want the shard's, at most %d B), %d B reducing the last (want 4P = %d B)", held[zero2each], 4*195, held[zero2ov], 4*paramCount)
	}
}
