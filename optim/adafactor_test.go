package optim_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
)

// adafactorRef is the paper's algorithm (Shazeer & Stern 2018, Algorithms
// 4 and 5, relative step, update clipping) for one parameter of shape
// [B, R, C] (B = 1 and R = 1 for a vector, which keeps a full second
// moment), in float64.
type adafactorRef struct {
	shape      []int
	p, m       []float64
	row, col   []float64 // [B·R], [B·C]
	v          []float64 // vectors
	beta1, lr  float64
	wd, gscale float64
	t          int
}

func (a *adafactorRef) step(g []float64) {
	a.t++
	t := float64(a.t)
	b2 := 1 - math.Pow(t, -0.8)
	const eps1, eps2, d = 1e-30, 1e-3, 1.0
	var ss float64
	for _, x := range a.p {
		ss += x * x
	}
	alpha := math.Max(eps2, math.Sqrt(ss/float64(len(a.p)))) * math.Min(a.lr, 1/math.Sqrt(t))
	n := len(a.p)
	u := make([]float64, n)
	gs := make([]float64, n)
	for i := range g {
		gs[i] = g[i] * a.gscale
	}
	if len(a.shape) < 2 {
		for i := range a.v {
			a.v[i] = b2*a.v[i] + (1-b2)*(gs[i]*gs[i]+eps1)
			u[i] = gs[i] / math.Sqrt(a.v[i])
		}
	} else {
		R, C := a.shape[len(a.shape)-2], a.shape[len(a.shape)-1]
		B := n / (R * C)
		for b := range B {
			var rsum float64
			for r := range R {
				var s float64
				for c := range C {
					x := gs[(b*R+r)*C+c]
					s += x*x + eps1
				}
				a.row[b*R+r] = b2*a.row[b*R+r] + (1-b2)*s/float64(C)
				rsum += a.row[b*R+r]
			}
			for c := range C {
				var s float64
				for r := range R {
					x := gs[(b*R+r)*C+c]
					s += x*x + eps1
				}
				a.col[b*C+c] = b2*a.col[b*C+c] + (1-b2)*s/float64(R)
			}
			rmean := rsum / float64(R)
			for r := range R {
				for c := range C {
					i := (b*R+r)*C + c
					u[i] = gs[i] / math.Sqrt(a.row[b*R+r]*a.col[b*C+c]/rmean)
				}
			}
		}
	}
	var us float64
	for _, x := range u {
		us += x * x
	}
	div := math.Max(1, math.Sqrt(us/float64(n))/d)
	for i := range u {
		u[i] /= div
		if a.beta1 > 0 {
			a.m[i] = a.beta1*a.m[i] + (1-a.beta1)*u[i]
			u[i] = a.m[i]
		}
		a.p[i] = a.p[i]*(1-alpha*a.wd) - alpha*u[i]
	}
}

func TestAdafactorMatchesPaper(t *testing.T) {
	for _, tc := range []struct {
		name  string
		beta1 float64
		chunk int // elements per update chunk (0: the default)
	}{{"no first moment", 0, 0}, {"first moment", 0.9, 0}, {"chunked rows", 0, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.chunk > 0 {
				defer optim.SetChunkElems(tc.chunk)()
			}
			dev := cpu.New()
			rng := rand.New(rand.NewPCG(5, 5))
			shapes := [][]int{{9, 13}, {2, 3, 5}, {11}, {1}}
			ps := randomParams(t, dev, rng, shapes...)
			opt, err := optim.NewAdafactor(ps, optim.Adafactor{LR: 1e-2, Beta1: tc.beta1, WeightDecay: 0.05})
			if err != nil {
				t.Fatal(err)
			}
			refs := make([]*adafactorRef, len(ps))
			for i, p := range ps {
				r := &adafactorRef{shape: shapes[i], p: f64(p.Float32s()), beta1: tc.beta1, lr: 1e-2, wd: 0.05, gscale: 0.5}
				r.m = make([]float64, p.Len())
				if len(shapes[i]) >= 2 {
					R, C := shapes[i][len(shapes[i])-2], shapes[i][len(shapes[i])-1]
					B := p.Len() / (R * C)
					r.row, r.col = make([]float64, B*R), make([]float64, B*C)
				} else {
					r.v = make([]float64, p.Len())
				}
				refs[i] = r
			}
			for step := range 6 {
				randomGrads(t, rng, ps)
				for i, p := range ps {
					refs[i].step(f64(p.Grad().Float32s()))
				}
				if err := opt.StepScaled(0.5); err != nil {
					t.Fatal(err)
				}
				for i, p := range ps {
					assertClose(t, p.Name(), f64(p.Float32s()), refs[i].p, 2e-5)
				}
				if t.Failed() {
					t.Fatalf("step %d", step+1)
				}
			}
			// State: R + C floats per matrix, n per vector (+ n for m).
			var want int64
			for _, sh := range shapes {
				n := 1
				for _, d := range sh {
					n *= d
				}
				if len(sh) >= 2 {
					R, C := sh[len(sh)-2], sh[len(sh)-1]
					want += 4 * int64(n/(R*C)*(R+C))
				} else {
					want += 4 * int64(n)
				}
				if tc.beta1 > 0 {
					want += 4 * int64(n)
				}
			}
			if got := category(dev, memory.OptimizerState); got != want {
				t.Errorf("state %d bytes, want %d", got, want)
			}
			if got := category(dev, memory.Temporary); got != 0 {
				t.Errorf("%d bytes of temporaries left", got)
			}
		})
	}
}

func TestAdafactorConfigErrors(t *testing.T) {
	for _, c := range []optim.Adafactor{
		{LR: 1e-2, Beta1: 1},
		{LR: 1e-2, Decay: 0.5},
		{LR: 1e-2, Eps2: -1},
		{LR: 1e-2, ClipThreshold: math.NaN()},
	} {
		if _, err := optim.NewAdafactor(nil, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
