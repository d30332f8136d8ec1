package optim

import (
	"math"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Adafactor configures Adafactor (Shazeer & Stern, "Adafactor: Adaptive
// Learning Rates with Sublinear Memory Cost", 2018, Algorithms 4 and 5
// with the paper's section 8 defaults). The second moment of a parameter
// with two or more dimensions is factored over its last two: one running
// mean of g² per row and one per column (per leading index for more than
// two dimensions), so a [R, C] matrix keeps R + C floats instead of R·C;
// a vector keeps a full second moment. At the t-th update of a parameter
// x with gradient g:
//
//	β̂₂ = 1 - t^Decay
//	r = β̂₂·r + (1-β̂₂)·mean_cols(g² + ε₁)      (per row)
//	c = β̂₂·c + (1-β̂₂)·mean_rows(g² + ε₁)      (per column)
//	u = g / √(r·cᵀ / mean(r))                 (v = g² + ε₁ ... for a vector)
//	û = u / max(1, RMS(u)/ClipThreshold)       (update clipping)
//	m = β₁·m + (1-β₁)·û;  û = m               (only when Beta1 > 0)
//	x = x·(1 - α·WeightDecay) - α·û
//
// The step size α is relative by default: α = max(ε₂, RMS(x))·ρ with
// ρ = min(lr, 1/√t), where lr is the group's learning rate after the
// schedule. The paper's ρ = min(10⁻², 1/√t) is lr = 0.01, which is what
// the train command passes when -lr is left at 0 with -optim adafactor; a
// larger -lr lets ρ follow 1/√t from the start, a smaller one caps it
// lower. With AbsoluteStep, α is the learning rate itself (no parameter
// scale, no 1/√t).
//
// Zero fields take the paper's defaults: Decay -0.8, Eps1 1e-30, Eps2
// 1e-3, ClipThreshold 1; Beta1 0 means no first moment (the default:
// the memory the paper saves). Weight decay is decoupled, scaled by α.
//
// Buffers: "exp_avg_sq_row" (the parameter's shape without its last
// dimension) and "exp_avg_sq_col" (without its second-to-last) for
// parameters of two or more dimensions, "exp_avg_sq" (the parameter's
// shape) for vectors and scalars, and "exp_avg" (the parameter's shape)
// when Beta1 > 0. All F32. The update's temporaries hold at most a chunk
// of rows (about 2¹⁸ elements) at a time.
type Adafactor struct {
	LR            float64 // relative: the ceiling of ρ (0.01 in the paper); AbsoluteStep: α
	Beta1         float64 // in [0, 1); 0: no first moment
	Decay         float64 // in [-1, 0); 0: -0.8
	Eps1          float64 // > 0; 0: 1e-30
	Eps2          float64 // > 0; 0: 1e-3
	ClipThreshold float64 // > 0; 0: 1
	AbsoluteStep  bool
	WeightDecay   float64 // >= 0
}

// NewAdafactor returns an Adafactor optimizer for params (one group with
// cfg's LR and WeightDecay; params may be empty) followed by groups.
func NewAdafactor(params []*tensor.Tensor, cfg Adafactor, groups ...Group) (*Optimizer, error) {
	r := adafactorRule{beta1: cfg.Beta1, decay: cfg.Decay, eps1: cfg.Eps1, eps2: cfg.Eps2, clip: cfg.ClipThreshold, absolute: cfg.AbsoluteStep}
	if r.decay == 0 {
		r.decay = -0.8
	}
	if r.eps1 == 0 {
		r.eps1 = 1e-30
	}
	if r.eps2 == 0 {
		r.eps2 = 1e-3
	}
	if r.clip == 0 {
		r.clip = 1
	}
	if err := checkUnit("Adafactor.Beta1", r.beta1); err != nil {
		return nil, err
	}
	if !(r.decay >= -1 && r.decay < 0) {
		return nil, errorf("Adafactor.Decay = %v is outside [-1, 0)", r.decay)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"Eps1", r.eps1}, {"Eps2", r.eps2}, {"ClipThreshold", r.clip}} {
		if err := checkNonNeg("Adafactor."+f.name, f.v); err != nil {
			return nil, err
		}
	}
	return newOptimizer(r, "Adafactor", params, cfg.LR, cfg.WeightDecay, groups)
}

type adafactorRule struct {
	beta1, decay, eps1, eps2, clip float64
	absolute                       bool
}

func (adafactorRule) name() string { return "adafactor" }

var adafactorBuffers = []string{"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "exp_avg"}

func (adafactorRule) buffers() []string { return adafactorBuffers }

// factored reports whether p's second moment is factored.
func factored(p *tensor.Tensor) bool { return p.Dim() >= 2 }

func (r adafactorRule) specs(p *tensor.Tensor) []bufSpec {
	var out []bufSpec
	if sh := p.Shape(); factored(p) {
		d := len(sh)
		row := append([]int(nil), sh[:d-1]...)
		col := append(append([]int(nil), sh[:d-2]...), sh[d-1])
		out = append(out, bufSpec{name: "exp_avg_sq_row", dtype: tensor.F32, shape: row},
			bufSpec{name: "exp_avg_sq_col", dtype: tensor.F32, shape: col})
	} else {
		out = append(out, bufSpec{name: "exp_avg_sq", dtype: tensor.F32, shape: p.Shape()})
	}
	if r.beta1 > 0 {
		out = append(out, bufSpec{name: "exp_avg", dtype: tensor.F32, shape: p.Shape()})
	}
	return out
}

// elementsPer: the factored statistics do not lie along the elements, so
// an Adafactor state is never cut at element ranges.
func (adafactorRule) elementsPer(string) int { return 0 }

// shardAlignment: every parameter is updated whole (ZeRO gives each rank
// whole tensors): the factored statistics, RMS(x) of the relative step
// and RMS(u) of the update clipping span the whole tensor.
func (adafactorRule) shardAlignment() int { return 0 }

func (r adafactorRule) update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	r.updateWith(s, p, g, bufs, h, nil)
}

// updateRounded is roundingRule's: a matrix of BF16 weights is updated
// row chunk by row chunk as updateMatrix goes (a [128256, 4096]
// embedding would otherwise take two 2 GiB F32 copies); a vector, small,
// is left to the copy.
func (r adafactorRule) updateRounded(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs, rnd rounding) bool {
	if !factored(p) {
		return false
	}
	r.updateWith(s, p, g, bufs, h, &rnd)
	return true
}

// updateWith is the update; with rnd, p and g are BF16 and every chunk of
// them is widened to F32 as it is read (exactly), every chunk of p
// rounded back by rnd as it is written.
func (r adafactorRule) updateWith(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs, rnd *rounding) {
	t := float64(h.t)
	b2 := 1 - math.Pow(t, r.decay)
	alpha := h.lr
	if !r.absolute {
		alpha = math.Max(r.eps2, rms(s, p)) * math.Min(h.lr, 1/math.Sqrt(t))
	}
	var m *tensor.Tensor
	if r.beta1 > 0 {
		m = bufs[len(bufs)-1]
	}
	if !factored(p) {
		r.updateVector(s, p, g, bufs[0], m, b2, alpha, h)
		return
	}
	r.updateMatrix(s, p, g, bufs[0], bufs[1], m, b2, alpha, h, rnd)
}

// rms is the root mean square of x's elements (widened to F32 chunk by
// chunk), read on the host.
func rms(s *tensor.Scope, x *tensor.Tensor) float64 {
	var ss float64
	chunked(s, []*tensor.Tensor{x}, func(v []*tensor.Tensor) {
		w := widen(s, v[0])
		sq := s.Square(w)
		sum := s.Sum(sq, false)
		ss += sum.Item()
		if w != v[0] {
			release(w)
		}
		release(sq, sum)
	})
	return math.Sqrt(ss / float64(max(x.Len(), 1)))
}

// widen returns x in F32: x itself, or its exact F32 copy.
func widen(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	if x.DType() == tensor.F32 {
		return x
	}
	return s.Cast(x, tensor.F32)
}

// scaledSquare is g²·scale² + ε₁ for a chunk of the gradient.
func (r adafactorRule) scaledSquare(s *tensor.Scope, g *tensor.Tensor, scale float64) *tensor.Tensor {
	sq := s.Square(g)
	if scale != 1 {
		s.MulScalarInPlace(sq, scale*scale).Release()
	}
	out := s.AddScalar(sq, r.eps1)
	release(sq)
	return out
}

// apply clips u in place by max(1, rms/d), folds it into the first moment
// when there is one, and steps the parameter chunk pc with it.
func (r adafactorRule) apply(s *tensor.Scope, pc, u, mc *tensor.Tensor, clipDiv, alpha, wd float64) {
	if clipDiv != 1 {
		s.MulScalarInPlace(u, 1/clipDiv).Release()
	}
	if mc != nil {
		s.MulScalarInPlace(mc, r.beta1).Release()
		t := s.MulScalar(u, 1-r.beta1)
		s.AddInPlace(mc, t).Release()
		release(t, u)
		u = s.MulScalar(mc, 1)
	}
	if wd != 0 {
		s.MulScalarInPlace(pc, 1-alpha*wd).Release()
	}
	s.MulScalarInPlace(u, -alpha).Release()
	s.AddInPlace(pc, u).Release()
	release(u)
}

func (r adafactorRule) updateVector(s *tensor.Scope, p, g, v, m *tensor.Tensor, b2, alpha float64, h stepArgs) {
	// v = β̂₂·v + (1-β̂₂)·(g² + ε₁), and the sum of u² for the clip.
	var ss float64
	chunked(s, []*tensor.Tensor{g, v}, func(c []*tensor.Tensor) {
		sq := r.scaledSquare(s, c[0], h.gradScale)
		s.MulScalarInPlace(c[1], b2).Release()
		s.MulScalarInPlace(sq, 1-b2).Release()
		s.AddInPlace(c[1], sq).Release()
		u := r.vectorU(s, c[0], c[1], h.gradScale)
		ss += squareSum(s, u)
		release(sq, u)
	})
	clipDiv := math.Max(1, math.Sqrt(ss/float64(max(p.Len(), 1)))/r.clip)
	chunked(s, []*tensor.Tensor{p, g, v, m}, func(c []*tensor.Tensor) {
		r.apply(s, c[0], r.vectorU(s, c[1], c[2], h.gradScale), c[3], clipDiv, alpha, h.wd)
	})
}

// vectorU is g·scale/√v.
func (r adafactorRule) vectorU(s *tensor.Scope, g, v *tensor.Tensor, scale float64) *tensor.Tensor {
	den := s.Sqrt(v)
	u := s.Div(g, den)
	release(den)
	if scale != 1 {
		s.MulScalarInPlace(u, scale).Release()
	}
	return u
}

func squareSum(s *tensor.Scope, u *tensor.Tensor) float64 {
	sq := s.Square(u)
	sum := s.Sum(sq, false)
	x := sum.Item()
	release(sq, sum)
	return x
}

func (r adafactorRule) updateMatrix(s *tensor.Scope, p, g, row, col, m *tensor.Tensor, b2, alpha float64, h stepArgs, rnd *rounding) {
	sh := p.Shape()
	R, C := sh[len(sh)-2], sh[len(sh)-1]
	B := p.Len() / max(R*C, 1)
	if p.Len() == 0 {
		return
	}
	p2, g2 := s.Reshape(p, B*R, C), s.Reshape(g, B*R, C)
	r2, c2 := s.Reshape(row, B*R), s.Reshape(col, B, C)
	var m2 *tensor.Tensor
	if m != nil {
		m2 = s.Reshape(m, B*R, C)
	}
	defer release(p2, g2, r2, c2, m2)
	k := max(1, min(R, chunkElems/C)) // rows per chunk
	narrow := func(t *tensor.Tensor, lo, n int) *tensor.Tensor {
		if t == nil {
			return nil
		}
		return s.Narrow(t, 0, lo, n)
	}
	// grad is rows [lo, lo+n) of the gradient in F32.
	grad := func(lo, n int) *tensor.Tensor {
		gc := narrow(g2, lo, n)
		w := widen(s, gc)
		if w != gc {
			release(gc)
		}
		return w
	}
	// Statistics: rows chunk by chunk, columns summed over the chunks.
	for b := range B {
		colSum, err := tensor.New(p.Device(), tensor.F32, []int{C}, memory.Temporary)
		if err != nil {
			panic(err) // an *OOMError, returned by Step as an error
		}
		for r0 := 0; r0 < R; r0 += k {
			n := min(k, R-r0)
			gc, rc := grad(b*R+r0, n), narrow(r2, b*R+r0, n)
			sq := r.scaledSquare(s, gc, h.gradScale)
			rm := s.Mean(sq, false, 1)
			s.MulScalarInPlace(rc, b2).Release()
			s.MulScalarInPlace(rm, 1-b2).Release()
			s.AddInPlace(rc, rm).Release()
			cs := s.Sum(sq, false, 0)
			s.AddInPlace(colSum, cs).Release()
			release(gc, rc, sq, rm, cs)
		}
		cb := s.Reshape(narrow(c2, b, 1), C)
		s.MulScalarInPlace(cb, b2).Release()
		s.MulScalarInPlace(colSum, (1-b2)/float64(R)).Release()
		s.AddInPlace(cb, colSum).Release()
		release(cb, colSum)
	}
	// u = g / √(r·cᵀ/mean(r)), twice: once for RMS(u), once to apply it.
	var ss float64
	pass := func(step func(b, r0, n int, u *tensor.Tensor)) {
		for b := range B {
			rb := narrow(r2, b*R, R)
			mean := s.Mean(rb, true) // [1]
			cb := s.Reshape(narrow(c2, b, 1), 1, C)
			csq := s.Sqrt(cb)
			for r0 := 0; r0 < R; r0 += k {
				n := min(k, R-r0)
				gc, rc := grad(b*R+r0, n), narrow(r2, b*R+r0, n)
				rn := s.Div(rc, mean)
				rs := s.Sqrt(rn)
				rcol := s.Reshape(rs, n, 1)
				den := s.Mul(rcol, csq)
				u := s.Div(gc, den)
				if h.gradScale != 1 {
					s.MulScalarInPlace(u, h.gradScale).Release()
				}
				release(gc, rc, rn, rs, rcol, den)
				step(b, r0, n, u)
			}
			release(rb, mean, cb, csq)
		}
	}
	pass(func(_, _, _ int, u *tensor.Tensor) {
		ss += squareSum(s, u)
		release(u)
	})
	clipDiv := math.Max(1, math.Sqrt(ss/float64(p.Len()))/r.clip)
	pass(func(b, r0, n int, u *tensor.Tensor) {
		pc, mc := narrow(p2, b*R+r0, n), narrow(m2, b*R+r0, n)
		if rnd == nil {
			r.apply(s, pc, u, mc, clipDiv, alpha, h.wd)
		} else {
			w := widen(s, pc)
			r.apply(s, w, u, mc, clipDiv, alpha, h.wd)
			rnd.round(pc, w, (b*R+r0)*C)
			release(w)
		}
		release(pc, mc)
	})
}
