package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

func sameDevice(op string, ts ...*Tensor) device.Device {
	var dev device.Device
	for _, t := range ts {
		if t == nil {
			continue
		}
		t.mustLive(op)
		if t.st.evicted {
			// Here, before the op allocates its result, so that the
			// error leaks nothing (view would raise it later).
			t.view()
		}
		if dev == nil {
			dev = t.st.dev
		} else if t.st.dev != dev {
			panic(errorf(op, "tensors on different devices (%s and %s)", dev.Name(), t.st.dev.Name()))
		}
	}
	return dev
}

// broadcastShapes returns the shape a and b broadcast to, NumPy style.
func broadcastShapes(op string, a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			panic(errorf(op, "shapes %v and %v do not broadcast (dimension %d: %d vs %d)", a, b, i, da, db))
		}
	}
	return out
}

// promote is the dtype of a result computed from a and b.
func promote(a, b DType) DType {
	switch {
	case a == b:
		return a
	case a == F64 || b == F64:
		return F64
	case !a.IsFloat():
		return b
	case !b.IsFloat():
		return a
	}
	return F32 // mixed float widths, or F16 with BF16
}

// sumTo reduces a gradient of a broadcast result back to shape.
func (s *Scope) sumTo(g *Tensor, shape []int) *Tensor {
	if slices.Equal(g.shape, shape) {
		return g.share()
	}
	lead := len(g.shape) - len(shape)
	var axes []int
	for i := range g.shape {
		if i < lead || (shape[i-lead] == 1 && g.shape[i] != 1) {
			axes = append(axes, i)
		}
	}
	r := s.reduce(device.Sum, g, axes, true, 1, g.dtype)
	out := s.Reshape(r, shape...)
	r.Release()
	return out
}

func (s *Scope) binary(op device.BinaryOp, a, b *Tensor) *Tensor {
	return s.binaryAs(op, a, b, promote(a.dtype, b.dtype))
}

// binaryAs is binary with the result in dtype: computed as in the
// operands' promoted dtype and rounded once to dtype.
func (s *Scope) binaryAs(op device.BinaryOp, a, b *Tensor, dtype DType) *Tensor {
	dev := sameDevice(op.String(), a, b)
	shape := broadcastShapes(op.String(), a.shape, b.shape)
	out := mustAlloc(dev, dtype, shape, s.cat)
	dev.Binary(op, out.view(), a.broadcastView(shape), b.broadcastView(shape))
	return out
}

// Add returns a + b with broadcasting.
func (s *Scope) Add(a, b *Tensor) *Tensor {
	out := s.binary(device.Add, a, b)
	s.record(out, "add", []*Tensor{a, b}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.sumTo(g, a.shape), s.sumTo(g, b.shape)}
	})
	return s.own(out)
}

// Sub returns a - b with broadcasting.
func (s *Scope) Sub(a, b *Tensor) *Tensor {
	out := s.binary(device.Sub, a, b)
	bShape := b.shape
	s.record(out, "sub", []*Tensor{a, b}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		ng := s.MulScalar(g, -1)
		defer ng.Release()
		return []*Tensor{s.sumTo(g, a.shape), s.sumTo(ng, bShape)}
	})
	return s.own(out)
}

// Mul returns a * b elementwise with broadcasting.
func (s *Scope) Mul(a, b *Tensor) *Tensor { return s.mul(a, b, promote(a.dtype, b.dtype)) }

// MulAs returns a * b as Mul computes it, rounded once to dtype (a float
// dtype): Cast(Mul(a, b), dtype) without the pass between them, nor the
// cast of the gradient back. Its gradients are Mul's, each in the
// incoming gradient's dtype promoted with both operands' dtypes, so an
// F32 operand's gradient is an F32 product even when the gradient
// arrives in 16 bits. RMSNorm under autocast writes its F32 product in
// 16 bits this way.
func (s *Scope) MulAs(a, b *Tensor, dtype DType) *Tensor {
	if !dtype.IsFloat() {
		panic(errorf("mul", "result dtype %v for %s and %s: want a float dtype", dtype, a.describe(), b.describe()))
	}
	return s.mul(a, b, dtype)
}

// MulShifted returns a·(b + shift) with b broadcast over a (a norm's
// gain, Gemma's (1 + w)), rounded once to dtype (Invalid: a's dtype
// promoted with F32 and b's): b + shift is formed in b's dtype widened to
// at least F32, as Hugging Face's Gemma forms 1 + w.float(), and the
// product in that and a's promoted dtype. b's gradient is Mul's,
// Σ g·a over the broadcast rows — continued over tiles like a gain's
// under SumRows, since b is the operand — and a's is g·(b + shift).
// A shift of 0 is MulAs (Mul when dtype is Invalid).
func (s *Scope) MulShifted(a, b *Tensor, shift float64, dtype DType) *Tensor {
	if shift == 0 {
		if dtype == device.Invalid {
			return s.Mul(a, b)
		}
		return s.MulAs(a, b, dtype)
	}
	if !a.dtype.IsFloat() || !b.dtype.IsFloat() || (dtype != device.Invalid && !dtype.IsFloat()) {
		panic(errorf("mul", "%s times %s shifted by %v in %v: want float tensors and a float dtype", a.describe(), b.describe(), shift, dtype))
	}
	wide := promote(b.dtype, F32)
	bs := mustAlloc(b.st.dev, wide, b.shape, memory.Temporary)
	b.st.dev.Copy(bs.view(), b.view())
	b.st.dev.Unary(device.AddScalar, bs.view(), bs.view(), shift)
	defer bs.Release()
	if dtype == device.Invalid {
		dtype = promote(a.dtype, wide)
	}
	return s.mulShifted(a, b, bs, dtype)
}

func (s *Scope) mul(a, b *Tensor, dtype DType) *Tensor { return s.mulShifted(a, b, b, dtype) }

// mulShifted is a·bs recorded as the product of a and b: bs is b itself
// or b shifted (MulShifted), which a's gradient takes and b's does not
// need.
func (s *Scope) mulShifted(a, b, bs *Tensor, dtype DType) *Tensor {
	out := s.binaryAs(device.Mul, a, bs, dtype)
	if s.grad && (a.needsGrad() || b.needsGrad()) {
		aShape, bShape := a.shape, b.shape
		aDT, bDT := a.dtype, b.dtype
		// After MulAs, g may be narrower than the operands.
		narrowed := dtype != promote(aDT, bDT)
		sums := s.rows // a broadcast parameter's sum over rows, when summed over tiles (rowsums.go)
		s.record(out, "mul", []*Tensor{a, b}, []*Tensor{a, bs}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
			sa, sb := saved[0], saved[1]
			// Each operand's gradient in g's dtype promoted with the
			// other operand's; after MulAs, with its own too, so that a
			// 16-bit g times a 16-bit operand is not rounded to 16 bits
			// on its way to an F32 operand.
			gradDT := func(other, own DType) DType {
				d := promote(g.dtype, other)
				if narrowed {
					d = promote(d, own)
				}
				return d
			}
			ga := s.mul(g, sb, gradDT(sb.dtype, aDT))
			gb := s.mul(g, sa, gradDT(sa.dtype, bDT))
			defer ga.Release()
			defer gb.Release()
			grads := []*Tensor{nil, nil}
			for i, x := range []struct {
				t, g  *Tensor
				shape []int
			}{{a, ga, aShape}, {b, gb, bShape}} {
				if sums.has(x.t) {
					sums.columns(s, x.t, x.g, x.g.dtype)
					continue
				}
				grads[i] = s.sumTo(x.g, x.shape)
			}
			return grads
		})
	}
	return s.own(out)
}

// Div returns a / b elementwise with broadcasting.
func (s *Scope) Div(a, b *Tensor) *Tensor {
	out := s.binary(device.Div, a, b)
	if s.grad && (a.needsGrad() || b.needsGrad()) {
		aShape, bShape := a.shape, b.shape
		s.record(out, "div", []*Tensor{a, b}, []*Tensor{b, out}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
			sb, so := saved[0], saved[1]
			ga := s.Div(g, sb)
			// d(a/b)/db = -(a/b)/b
			t := s.Mul(ga, so)
			gb := s.MulScalar(t, -1)
			t.Release()
			defer ga.Release()
			defer gb.Release()
			return []*Tensor{s.sumTo(ga, aShape), s.sumTo(gb, bShape)}
		})
	}
	return s.own(out)
}

// Maximum returns the elementwise maximum (no gradient).
func (s *Scope) Maximum(a, b *Tensor) *Tensor { return s.own(s.binary(device.Maximum, a, b)) }

// Minimum returns the elementwise minimum (no gradient).
func (s *Scope) Minimum(a, b *Tensor) *Tensor { return s.own(s.binary(device.Minimum, a, b)) }

// f32Ops run in F32 under autocast: their results lose too much in 16 bits.
func f32Policy(op device.UnaryOp) bool {
	return op == device.Exp || op == device.Log || op == device.PowScalar
}

func (s *Scope) unary(op device.UnaryOp, x *Tensor, arg float64) *Tensor {
	dev := sameDevice(op.String(), x)
	if !x.dtype.IsFloat() {
		panic(errorf(op.String(), "%s is not a float tensor", x.describe()))
	}
	in := x
	if s.autocast != device.Invalid && x.dtype.IsLowPrecision() && f32Policy(op) {
		in = s.Cast(x, F32)
		defer s.release(in)
	}
	out := mustAlloc(dev, in.dtype, in.shape, s.cat)
	dev.Unary(op, out.view(), in.view(), arg)
	if s.grad && in.needsGrad() {
		needX, needY := device.UnaryNeeds(op)
		var save []*Tensor
		switch {
		case needX:
			save = []*Tensor{in}
		case needY:
			save = []*Tensor{out}
		}
		s.record(out, op.String(), []*Tensor{in}, save, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
			dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
			v := g.view()
			if len(save) > 0 {
				v = saved[0].view()
			}
			g.st.dev.UnaryBackward(op, dx.view(), v, v, g.view(), arg)
			return []*Tensor{dx}
		})
	}
	return s.own(out)
}

// release drops a handle the scope made for its own use inside an op.
func (s *Scope) release(t *Tensor) {
	if t.owner == s.owning() {
		t.owner = nil
	}
	t.Release()
}

// Neg returns -x.
func (s *Scope) Neg(x *Tensor) *Tensor { return s.unary(device.Neg, x, 0) }

// Exp returns e^x (F32 under autocast).
func (s *Scope) Exp(x *Tensor) *Tensor { return s.unary(device.Exp, x, 0) }

// Log returns the natural logarithm (F32 under autocast).
func (s *Scope) Log(x *Tensor) *Tensor { return s.unary(device.Log, x, 0) }

// Sqrt returns the square root.
func (s *Scope) Sqrt(x *Tensor) *Tensor { return s.unary(device.Sqrt, x, 0) }

// Tanh returns the hyperbolic tangent.
func (s *Scope) Tanh(x *Tensor) *Tensor { return s.unary(device.Tanh, x, 0) }

// Sigmoid returns 1/(1+e^-x).
func (s *Scope) Sigmoid(x *Tensor) *Tensor { return s.unary(device.Sigmoid, x, 0) }

// Relu returns max(x, 0).
func (s *Scope) Relu(x *Tensor) *Tensor { return s.unary(device.Relu, x, 0) }

// Gelu returns the tanh approximation of the Gaussian error linear unit.
func (s *Scope) Gelu(x *Tensor) *Tensor { return s.unary(device.Gelu, x, 0) }

// GeluExact returns the exact Gaussian error linear unit, x·Φ(x) =
// x·(1+erf(x/√2))/2 (PyTorch's default GELU, as BERT uses). It saves x.
func (s *Scope) GeluExact(x *Tensor) *Tensor { return s.unary(device.GeluErf, x, 0) }

// Abs returns |x|.
func (s *Scope) Abs(x *Tensor) *Tensor { return s.unary(device.Abs, x, 0) }

// Square returns x².
func (s *Scope) Square(x *Tensor) *Tensor { return s.unary(device.Square, x, 0) }

// Pow returns x^p (F32 under autocast).
func (s *Scope) Pow(x *Tensor, p float64) *Tensor { return s.unary(device.PowScalar, x, p) }

// AddScalar returns x + c.
func (s *Scope) AddScalar(x *Tensor, c float64) *Tensor { return s.unary(device.AddScalar, x, c) }

// MulScalar returns x · c.
func (s *Scope) MulScalar(x *Tensor, c float64) *Tensor { return s.unary(device.MulScalar, x, c) }

// Cast returns x converted to dtype (round-to-nearest-even). Its gradient
// is cast back to x's dtype.
func (s *Scope) Cast(x *Tensor, dtype DType) *Tensor {
	dev := sameDevice("cast", x)
	if x.dtype.IsQuantized() || dtype.IsQuantized() {
		// A quantized weight casts to a float dtype: its dequantized
		// values (it has no gradient to pass back). Quantizing is
		// ConvertTo's.
		if !x.dtype.IsQuantized() || !dtype.IsFloat() {
			panic(errorf("cast", "%s to %v: a quantized tensor casts to a float dtype, and quantizing is ConvertTo's", x.describe(), dtype))
		}
		return s.own(x.dequantized(dtype, s.cat))
	}
	out := mustAlloc(dev, dtype, x.shape, s.cat)
	dev.Copy(out.view(), x.view())
	s.record(out, "cast", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{g.share()} // the engine casts to the input's dtype
	})
	return s.own(out)
}

// MaskedFill returns x with value wherever mask (broadcast to x) is non-zero.
func (s *Scope) MaskedFill(x, mask *Tensor, value float64) *Tensor {
	dev := sameDevice("masked_fill", x, mask)
	if !slices.Equal(broadcastShapes("masked_fill", x.shape, mask.shape), x.shape) {
		panic(errorf("masked_fill", "mask %v does not broadcast to %v", mask.shape, x.shape))
	}
	out := mustAlloc(dev, x.dtype, x.shape, s.cat)
	dev.MaskedFill(out.view(), x.view(), mask.broadcastView(x.shape), value)
	s.record(out, "masked_fill", []*Tensor{x}, []*Tensor{mask}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		m := saved[0]
		dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
		g.st.dev.MaskedFill(dx.view(), g.view(), m.broadcastView(g.shape), 0)
		return []*Tensor{dx}
	})
	return s.own(out)
}

// CausalMask returns x (…×T×S) with value above the diagonal of its last
// two dimensions: position t may not attend to positions after t.
func (s *Scope) CausalMask(x *Tensor, value float64) *Tensor {
	dev := sameDevice("causal_mask", x)
	if x.Dim() < 2 {
		panic(errorf("causal_mask", "%s needs at least 2 dimensions", x.describe()))
	}
	out := mustAlloc(dev, x.dtype, x.shape, s.cat)
	device.CausalFill(dev, out.view(), x.view(), value)
	s.record(out, "causal_mask", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
		device.CausalFill(g.st.dev, dx.view(), g.view(), 0)
		return []*Tensor{dx}
	})
	return s.own(out)
}

// Dropout zeroes each element with probability p and scales the rest by
// 1/(1-p). The mask is a pure function of seed and position, so backward
// (and a checkpointed recompute) regenerates it instead of storing it.
func (s *Scope) Dropout(x *Tensor, p float64, seed uint64) *Tensor {
	dev := sameDevice("dropout", x)
	if p < 0 || p >= 1 {
		panic(errorf("dropout", "probability %v outside [0, 1)", p))
	}
	out := mustAlloc(dev, x.dtype, x.shape, s.cat)
	dev.Dropout(out.view(), x.view(), p, seed)
	s.record(out, "dropout", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
		g.st.dev.Dropout(dx.view(), g.view(), p, seed)
		return []*Tensor{dx}
	})
	return s.own(out)
}
