package parallel_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// shapes8 are parameters larger than one 8-bit block (2048 elements), so
// that shards of 3 or 4 ranks cut inside them.
var shapes8 = [][]int{{50, 100}, {64}, {30, 100}, {40}}

func newAdamW8(ps []*tensor.Tensor) (*optim.Optimizer, error) {
	return optim.NewAdamW8bit(ps, optim.AdamW8bit{LR: 1e-2, WeightDecay: 0.01})
}

// run8 steps the parameters of shapes8 with 8-bit AdamW over steps [from,
// to), on c with ZeRO (stage) or unsharded (c nil), with gradients that
// are small multiples of 2⁻¹⁰ (so averaging identical gradients over 2 or
// 4 ranks gives them back exactly), and returns the full state and the
// parameters.
func run8(c parallel.Comm, stage, from, to int, state *optim.State, params0 [][]float32) (optim.State, [][]float32, error) {
	dev := cpu.New(cpu.Threads(1))
	var ps []*tensor.Tensor
	for i, sh := range shapes8 {
		n := 1
		for _, d := range sh {
			n *= d
		}
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(math.Sin(float64(j*3+i))) * 0.1
		}
		if params0 != nil {
			v = params0[i]
		}
		p, err := tensor.FromFloat32(dev, v, sh, memory.Parameter)
		if err != nil {
			return optim.State{}, nil, err
		}
		ps = append(ps, p.SetRequiresGrad(true).SetName("p"+string(rune('0'+i))))
	}
	defer func() {
		for _, p := range ps {
			p.Release()
		}
	}()
	var (
		z   *parallel.ZeRO
		opt *optim.Optimizer
		err error
	)
	if c != nil {
		if z, err = parallel.NewZeRO(c, ps, parallel.ZeROConfig{Stage: stage, BucketBytes: 4096}, newAdamW8); err != nil {
			return optim.State{}, nil, err
		}
		defer z.Release()
	} else if opt, err = newAdamW8(ps); err != nil {
		return optim.State{}, nil, err
	}
	if state != nil {
		if z != nil {
			err = z.ImportFull(*state)
		} else {
			err = opt.Import(*state)
		}
		if err != nil {
			return optim.State{}, nil, err
		}
	}
	for step := from; step < to; step++ {
		for _, p := range ps {
			g := make([]float32, p.Len())
			for j := range g {
				g[j] = float32((j*7+step*13+p.Len())%41-20) / 1024
			}
			gt, err := tensor.FromFloat32(dev, g, p.Shape(), memory.Gradient)
			if err != nil {
				return optim.State{}, nil, err
			}
			p.SetGrad(gt)
		}
		if z != nil {
			err = z.Step()
			z.ZeroGrad()
		} else {
			err = opt.Step()
			opt.ZeroGrad()
		}
		if err != nil {
			return optim.State{}, nil, err
		}
	}
	var st optim.State
	if z != nil {
		st, err = z.ExportFull()
	} else {
		st, err = opt.Export()
	}
	var out [][]float32
	for _, p := range ps {
		out = append(out, p.Float32s())
	}
	return st, out, err
}

// TestZeRO8bitShardsOnBlocks: 8-bit AdamW sharded over 4 ranks exports
// exactly the unsharded optimizer's state (codes and scales: shards begin
// on block boundaries), and a run resumed from it on 2 ranks ends bitwise
// where the unsharded run does.
func TestZeRO8bitShardsOnBlocks(t *testing.T) {
	refMid, refMidParams, err := run8(nil, 0, 0, 3, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	refEnd, refEndParams, err := run8(nil, 0, 0, 6, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, got, want [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.EqualFunc(got[i], want[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Errorf("%s: tensor %d differs", what, i)
			}
		}
	}
	sameState := func(what string, got, want optim.State) {
		t.Helper()
		if len(got.Tensors) != len(want.Tensors) || len(want.Tensors) != 16 {
			t.Fatalf("%s: %d state tensors, unsharded %d", what, len(got.Tensors), len(want.Tensors))
		}
		for k, w := range want.Tensors {
			g := got.Tensors[k]
			if !slices.Equal(g.Shape, w.Shape) {
				t.Errorf("%s: %s has shape %v, unsharded %v", what, k, g.Shape, w.Shape)
			}
			same(what+" "+k, [][]float32{g.Data}, [][]float32{w.Data})
		}
	}
	for _, stage := range []int{1, 2} {
		mids := make([]optim.State, 4)
		mp := make([][][]float32, 4)
		checkErrs(t, runRanks(parallel.NewLocal(4, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			var err error
			mids[c.Rank()], mp[c.Rank()], err = run8(c, stage, 0, 3, nil, nil)
			return err
		}))
		for r := range mids {
			sameState("4 ranks", mids[r], refMid)
			same("4 ranks params", mp[r], refMidParams)
		}
		ends := make([][][]float32, 2)
		endStates := make([]optim.State, 2)
		checkErrs(t, runRanks(parallel.NewLocal(2, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			var err error
			endStates[c.Rank()], ends[c.Rank()], err = run8(c, stage, 3, 6, &mids[0], mp[0])
			return err
		}))
		for r := range ends {
			same("resumed on 2 ranks", ends[r], refEndParams)
			sameState("resumed on 2 ranks", endStates[r], refEnd)
		}
	}
}
