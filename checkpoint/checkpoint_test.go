package checkpoint_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// block is a residual unit: x + dropout(gelu(x·wᵀ + b)).
type block struct {
	w, b *tensor.Tensor
	p    float64
	salt uint64
}

func (k *block) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	h := r.Linear(x, k.w, k.b)
	a := r.Gelu(h)
	h.Release()
	if r.Train && k.p > 0 {
		d := r.Dropout(a, k.p, r.SeedFor(k.salt))
		a.Release()
		a = d
	}
	y := r.Add(x, a)
	a.Release()
	return y
}

func (k *block) Parameters() []*tensor.Tensor { return []*tensor.Tensor{k.w, k.b} }

func newBlocks(t testing.TB, dev device.Device, n, d int, p float64) []nn.Module {
	var bs []nn.Module
	for i := 0; i < n; i++ {
		w, err := tensor.Rand(dev, tensor.F32, []int{d, d}, device.Normal, 0, 0.2, uint64(10+i), memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := tensor.Rand(dev, tensor.F32, []int{d}, device.Normal, 0, 0.1, uint64(100+i), memory.Parameter)
		w.SetName(fmt.Sprintf("blocks.%d.w", i)).SetRequiresGrad(true)
		b.SetName(fmt.Sprintf("blocks.%d.b", i)).SetRequiresGrad(true)
		bs = append(bs, &block{w: w, b: b, p: p, salt: nn.Salt(w.Name())})
	}
	return bs
}

func params(bs []nn.Module) []*tensor.Tensor {
	var ps []*tensor.Tensor
	for _, b := range bs {
		ps = append(ps, b.Parameters()...)
	}
	return ps
}

// gradsOf runs one step under policy and returns every parameter gradient
// (and the input's, when it requires grad) as raw float32 bits.
func gradsOf(t *testing.T, bs []nn.Module, x *tensor.Tensor, policy checkpoint.Policy, opts ...tensor.ScopeOption) [][]uint32 {
	for _, p := range params(bs) {
		p.SetGrad(nil)
	}
	x.SetGrad(nil)
	err := tensor.Step(func(s *tensor.Scope) error {
		r := nn.NewRun(s, 7)
		y := policy.Runner()(r, bs, x)
		s.Mean(s.Square(y), false).Backward()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]uint32
	for _, p := range append(params(bs), x) {
		if p.Grad() == nil {
			if p == x && !x.RequiresGrad() {
				continue
			}
			t.Fatalf("%s has no gradient", p.Name())
		}
		var bits []uint32
		for _, v := range p.Grad().Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		out = append(out, bits)
	}
	return out
}

func TestGradientsBitwiseEqual(t *testing.T) {
	policies := []checkpoint.Policy{checkpoint.Every, checkpoint.Sqrt, checkpoint.Segments(2), checkpoint.Segments(3), checkpoint.Nested(0), checkpoint.Nested(1), checkpoint.Nested(4)}
	modes := []struct {
		name    string
		dropout float64
		inGrad  bool
		opts    []tensor.ScopeOption
	}{
		{"plain", 0, true, nil},
		{"dropout0.1", 0.1, true, nil},
		{"bf16-autocast", 0.1, true, []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}},
		{"input-needs-no-grad", 0.1, false, nil},
	}
	for _, m := range modes {
		dev := cpu.New()
		bs := newBlocks(t, dev, 6, 16, m.dropout)
		x, _ := tensor.Rand(dev, tensor.F32, []int{8, 16}, device.Uniform, -1, 1, 3, memory.Data)
		x.SetName("input").SetRequiresGrad(m.inGrad)
		want := gradsOf(t, bs, x, checkpoint.Off, m.opts...)
		for _, p := range policies {
			t.Run(m.name+"/"+p.String(), func(t *testing.T) {
				got := gradsOf(t, bs, x, p, m.opts...)
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("gradient %d element %d: %#x with %s, %#x without", i, j, got[i][j], p, want[i][j])
						}
					}
				}
			})
		}
	}
}

func TestFrozenAndNested(t *testing.T) {
	dev := cpu.New()
	bs := newBlocks(t, dev, 4, 8, 0)
	x, _ := tensor.Rand(dev, tensor.F32, []int{4, 8}, device.Uniform, -1, 1, 3, memory.Data)
	// Freeze the first two blocks.
	for _, p := range params(bs[:2]) {
		p.SetRequiresGrad(false)
	}
	err := tensor.Step(func(s *tensor.Scope) error {
		r := nn.NewRun(s, 1)
		// A checkpoint whose function itself checkpoints each block.
		outer := func(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
			return checkpoint.Sequential(r, bs, checkpoint.Every, x)
		}
		y := checkpoint.Run(r, outer, params(bs), x)
		s.Sum(y, false).Backward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range params(bs) {
		if frozen := i < 4; frozen != (p.Grad() == nil) {
			t.Errorf("%s: gradient %v, frozen %v", p.Name(), p.Grad() != nil, frozen)
		}
	}
	if got := dev.Memory().Stats().Category(memory.Activation).Current + dev.Memory().Stats().Category(memory.Temporary).Current; got != 0 {
		t.Errorf("%d activation/temporary bytes left after the step", got)
	}
}

func TestEveryKeepsOnlyBlockInputs(t *testing.T) {
	dev := cpu.New()
	const n, d, rows = 8, 64, 64
	bs := newBlocks(t, dev, n, d, 0)
	x, _ := tensor.Rand(dev, tensor.F32, []int{rows, d}, device.Uniform, -1, 1, 3, memory.Data)
	peak := func(p checkpoint.Policy) int64 {
		dev.Memory().ResetPeak()
		if err := tensor.Step(func(s *tensor.Scope) error {
			y := p.Runner()(nn.NewRun(s, 1), bs, x)
			s.Sum(y, false).Backward()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return dev.Memory().Stats().Category(memory.Activation).Peak
	}
	// Each block saves its input and its pre-activation: 2 activations.
	// Every keeps the n block inputs plus one block being recomputed.
	act := int64(rows * d * 4)
	off, every := peak(checkpoint.Off), peak(checkpoint.Every)
	if off < 2*n*act {
		t.Errorf("Off peaks at %.1f activations, want >= %d", float64(off)/float64(act), 2*n)
	}
	if every > (n+3)*act {
		t.Errorf("Every peaks at %.1f activations, want <= %d (block inputs + one recomputed block)", float64(every)/float64(act), n+3)
	}
}

func TestBudgetPicksFewestSegmentsThatFit(t *testing.T) {
	dev := cpu.New()
	const n, d, rows = 9, 64, 64
	bs := newBlocks(t, dev, n, d, 0)
	x, _ := tensor.Rand(dev, tensor.F32, []int{rows, d}, device.Uniform, -1, 1, 3, memory.Data)
	step := func(p checkpoint.Policy) int64 {
		dev.Memory().ResetPeak()
		if err := tensor.Step(func(s *tensor.Scope) error {
			y := p.Runner()(nn.NewRun(s, 1), bs, x)
			s.Sum(s.Square(y), false).Backward()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, p := range params(bs) {
			p.SetGrad(nil)
		}
		return dev.Memory().Stats().Category(memory.Activation).Peak
	}
	peaks := map[int]int64{}
	for k := 1; k <= n; k++ {
		peaks[k] = step(checkpoint.Segments(k))
	}
	lo, hi := peaks[n], peaks[1]
	for _, frac := range []float64{0.2, 0.5, 0.8} {
		budget := lo + int64(frac*float64(hi-lo))
		p := checkpoint.Budget(budget)
		step(p) // measures
		step(p) // decides
		got := step(p)
		k := p.Decided()
		t.Logf("peaks %v budget %d k %d got %d", peaks, budget, k, got)
		if got > budget {
			t.Errorf("budget %d: chose %d segments, peak %d exceeds it", budget, k, got)
		}
		for j := 1; j < k; j++ {
			if peaks[j] <= budget {
				t.Errorf("budget %d: chose %d segments but %d (peak %d) would have fit", budget, k, j, peaks[j])
			}
		}
	}
}
