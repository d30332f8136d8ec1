package optim_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// The two-step tests: a 3-element parameter, two fixed gradients, and the
// expected values computed here in float64 from the update formulas.
var (
	p0    = []float32{0.5, -1.25, 2}
	grads = [][]float64{{0.1, -0.2, 0.3}, {-0.05, 0.4, 0.25}}
)

// sgdRef is SGD as PyTorch documents it.
func sgdRef(p []float64, gs [][]float64, lr, mom, damp, wd float64, nesterov bool) []float64 {
	p = append([]float64(nil), p...)
	buf := make([]float64, len(p))
	for t, g := range gs {
		for i := range p {
			d := g[i] + wd*p[i]
			if mom != 0 {
				if t == 0 {
					buf[i] = d
				} else {
					buf[i] = mom*buf[i] + (1-damp)*d
				}
				if nesterov {
					d += mom * buf[i]
				} else {
					d = buf[i]
				}
			}
			p[i] -= lr * d
		}
	}
	return p
}

// adamRef is Adam in the paper's form (bias-corrected moments), with L2
// decay in the gradient or, decoupled, decay of the parameter (AdamW).
func adamRef(p []float64, gs [][]float64, lr, b1, b2, eps, wd float64, decoupled bool) []float64 {
	p = append([]float64(nil), p...)
	m := make([]float64, len(p))
	v := make([]float64, len(p))
	for k, g := range gs {
		t := float64(k + 1)
		for i := range p {
			d := g[i]
			if decoupled {
				p[i] *= 1 - lr*wd
			} else {
				d += wd * p[i]
			}
			m[i] = b1*m[i] + (1-b1)*d
			v[i] = b2*v[i] + (1-b2)*d*d
			mhat := m[i] / (1 - math.Pow(b1, t))
			vhat := v[i] / (1 - math.Pow(b2, t))
			p[i] -= lr * mhat / (math.Sqrt(vhat) + eps)
		}
	}
	return p
}

func TestTwoSteps(t *testing.T) {
	start := f64(p0)
	cases := []struct {
		name string
		make func([]*tensor.Tensor) (*optim.Optimizer, error)
		want []float64
	}{
		{"sgd", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1})
		}, sgdRef(start, grads, 0.1, 0, 0, 0, false)},
		{"sgd-weight-decay", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1, WeightDecay: 0.05})
		}, sgdRef(start, grads, 0.1, 0, 0, 0.05, false)},
		{"sgd-momentum", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1, Momentum: 0.9})
		}, sgdRef(start, grads, 0.1, 0.9, 0, 0, false)},
		{"sgd-momentum-dampening-decay", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1, Momentum: 0.9, Dampening: 0.3, WeightDecay: 0.01})
		}, sgdRef(start, grads, 0.1, 0.9, 0.3, 0.01, false)},
		{"sgd-nesterov-decay", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		}, sgdRef(start, grads, 0.1, 0.9, 0, 0.01, true)},
		{"adam", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdam(ps, optim.Adam{LR: 0.01})
		}, adamRef(start, grads, 0.01, 0.9, 0.999, 1e-8, 0, false)},
		{"adam-l2", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdam(ps, optim.Adam{LR: 0.01, Beta1: 0.8, Beta2: 0.95, Eps: 1e-3, WeightDecay: 0.1})
		}, adamRef(start, grads, 0.01, 0.8, 0.95, 1e-3, 0.1, false)},
		{"adamw", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamW{LR: 0.01, WeightDecay: 0.1})
		}, adamRef(start, grads, 0.01, 0.9, 0.999, 1e-8, 0.1, true)},
		{"adamw-betas", func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamW{LR: 0.05, Beta1: 0.5, Beta2: 0.9, Eps: 1e-6, WeightDecay: 0.5})
		}, adamRef(start, grads, 0.05, 0.5, 0.9, 1e-6, 0.5, true)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			p := param(t, dev, "w", p0)
			opt, err := c.make([]*tensor.Tensor{p})
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range grads {
				setGrad(t, p, g)
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
			}
			assertClose(t, "param", p.Float64s(), c.want, 1e-6)
			if opt.Steps() != 2 {
				t.Errorf("Steps() = %d, want 2", opt.Steps())
			}
			// The references differ from the start: the test is not vacuous.
			if d := math.Abs(c.want[0] - start[0]); d < 1e-4 {
				t.Fatalf("reference moved the parameter by only %g", d)
			}
		})
	}
}

// StepScaled(1/S) on gradients multiplied by S is the plain step; with S a
// power of two the results are bit-identical.
func TestStepScaled(t *testing.T) {
	for _, name := range []string{"sgd", "adamw"} {
		t.Run(name, func(t *testing.T) {
			dev := cpu.New()
			a := param(t, dev, "a", p0)
			b := param(t, dev, "b", p0)
			mk := func(p *tensor.Tensor) *optim.Optimizer {
				var opt *optim.Optimizer
				var err error
				if name == "sgd" {
					opt, err = optim.NewSGD([]*tensor.Tensor{p}, optim.SGD{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01})
				} else {
					opt, err = optim.NewAdamW([]*tensor.Tensor{p}, optim.AdamW{LR: 0.01, WeightDecay: 0.1})
				}
				if err != nil {
					t.Fatal(err)
				}
				return opt
			}
			oa, ob := mk(a), mk(b)
			const scale = 1 << 12
			for _, g := range grads {
				setGrad(t, a, g)
				gs := make([]float64, len(g))
				for i := range g {
					gs[i] = float64(float32(g[i])) * scale
				}
				setGrad(t, b, gs)
				if err := oa.Step(); err != nil {
					t.Fatal(err)
				}
				if err := ob.StepScaled(1.0 / scale); err != nil {
					t.Fatal(err)
				}
			}
			pa, pb := a.Float32s(), b.Float32s()
			for i := range pa {
				if math.Float32bits(pa[i]) != math.Float32bits(pb[i]) {
					t.Errorf("element %d: %v stepped plainly, %v stepped scaled", i, pa[i], pb[i])
				}
			}
			// The gradient buffers themselves are not unscaled.
			if got := b.Grad().Float64s()[0]; got != float64(float32(grads[1][0]))*scale {
				t.Errorf("StepScaled changed the gradient: %v", got)
			}
			if err := ob.StepScaled(0); err == nil {
				t.Error("StepScaled(0) gave no error")
			}
		})
	}
}

// The learning-rate schedule multiplies each step's rate.
func TestScheduleAppliedEachStep(t *testing.T) {
	dev := cpu.New()
	p := param(t, dev, "w", p0)
	opt, err := optim.NewSGD([]*tensor.Tensor{p}, optim.SGD{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.SetSchedule(optim.ScheduleFunc(func(step int) float64 { return []float64{0.5, 2}[step] })); err != nil {
		t.Fatal(err)
	}
	if got := opt.LR(0); got != 0.05 {
		t.Errorf("LR(0) before the first step = %v, want 0.05", got)
	}
	want := f64(p0)
	for k, g := range grads {
		lr := 0.1 * []float64{0.5, 2}[k]
		for i := range want {
			want[i] -= lr * float64(float32(g[i]))
		}
		setGrad(t, p, g)
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
	assertClose(t, "param", p.Float64s(), want, 1e-6)

	if err := opt.SetSchedule(optim.ScheduleFunc(func(int) float64 { return math.NaN() })); err != nil {
		t.Fatal(err)
	}
	before := p.Float64s()
	if err := opt.Step(); err == nil {
		t.Error("a NaN learning-rate factor gave no error")
	}
	assertClose(t, "param after refused step", p.Float64s(), before, 0)
}

// Parameters spanning many chunks get the same update as in one chunk.
func TestChunkedUpdateMatchesWhole(t *testing.T) {
	restore := optim.SetChunkElems(7)
	defer restore()
	dev := cpu.New()
	vals := make([]float32, 50)
	g := make([]float64, 50)
	for i := range vals {
		vals[i] = float32(i)/10 - 2
		g[i] = math.Sin(float64(i))
	}
	for _, name := range []string{"sgd", "adam"} {
		p := param(t, dev, "w", vals, 5, 10)
		var opt *optim.Optimizer
		var err error
		var want []float64
		if name == "sgd" {
			opt, err = optim.NewSGD([]*tensor.Tensor{p}, optim.SGD{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.1})
			want = sgdRef(f64(vals), [][]float64{g, g}, 0.1, 0.9, 0, 0.1, true)
		} else {
			opt, err = optim.NewAdam([]*tensor.Tensor{p}, optim.Adam{LR: 0.01, WeightDecay: 0.1})
			want = adamRef(f64(vals), [][]float64{g, g}, 0.01, 0.9, 0.999, 1e-8, 0.1, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			setGrad(t, p, g)
			if err := opt.Step(); err != nil {
				t.Fatal(err)
			}
		}
		assertClose(t, name, p.Float64s(), want, 1e-5)
		norm, err := optim.GradNorm([]*tensor.Tensor{p})
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, x := range p.Grad().Float64s() {
			sum += x * x
		}
		if math.Abs(norm-math.Sqrt(sum)) > 1e-12*norm {
			t.Errorf("%s: chunked GradNorm %v, want %v", name, norm, math.Sqrt(sum))
		}
		p.Release()
		opt.Release()
	}
	if n := category(dev, memory.Temporary); n != 0 {
		t.Errorf("%d temporary bytes left", n)
	}
}
