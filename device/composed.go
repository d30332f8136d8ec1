package device

import (
	"encoding/binary"
	"math"

	"github.com/memfit/memfit/memory"
)

// The composed fallbacks of the capabilities: each computes what the fused
// kernel computes from core kernels alone, in F32 (F64 for F64 inputs)
// temporaries that it takes from the device's allocator as
// memory.Temporary and frees before returning. They trade memory and
// passes over it for needing nothing but Kernels; the results agree with
// the fused kernels within float tolerance (device/devicetest checks both).
// An allocation that fails panics with the allocator's *memory.OOMError,
// which the tensor package turns into an error at the step boundary, as
// for any op.

// scratch holds one fallback's temporaries.
type scratch struct {
	d    Device
	bufs []Buffer
}

// view allocates a contiguous temporary of dt and shape.
func (s *scratch) view(dt DType, shape ...int) View {
	n := 1
	for _, x := range shape {
		n *= x
	}
	b, err := s.d.Alloc(int64(max(n*dt.Size(), 1)), memory.Temporary)
	if err != nil {
		panic(err)
	}
	s.bufs = append(s.bufs, b)
	return View{Buf: b, DType: dt, Shape: shape, Strides: denseStrides(shape)}
}

// free returns every temporary, newest first.
func (s *scratch) free() {
	for i := len(s.bufs) - 1; i >= 0; i-- {
		s.d.Free(s.bufs[i])
	}
	s.bufs = nil
}

func denseStrides(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = n
		n *= shape[i]
	}
	return st
}

// accumulator is the dtype fallbacks compute in for values of dt.
func accumulator(dt DType) DType {
	if dt == F64 {
		return F64
	}
	return F32
}

// as views a contiguous v as shape (same elements, same order).
func as(v View, shape ...int) View {
	v.Shape, v.Strides = shape, denseStrides(shape)
	return v
}

// lastDim is the length of v's last dimension (1 for a scalar).
func lastDim(v View) int {
	if len(v.Shape) == 0 {
		return 1
	}
	return v.Shape[len(v.Shape)-1]
}

// acrossColumns broadcasts a [rows, 1] view along cols columns.
func acrossColumns(v View, cols int) View {
	return View{Buf: v.Buf, DType: v.DType, Offset: v.Offset, Shape: []int{v.Shape[0], cols}, Strides: []int{v.Strides[0], 0}}
}

// downRows broadcasts a [cols] or [1, cols] view down rows rows.
func downRows(v View, rows int) View {
	last := v.Strides[len(v.Strides)-1]
	return View{Buf: v.Buf, DType: v.DType, Offset: v.Offset, Shape: []int{rows, lastDim(v)}, Strides: []int{0, last}}
}

// arange writes 0, 1, …, n-1 into a new [1, n] temporary of dt.
func (s *scratch) arange(dt DType, n int) View {
	v := s.view(dt, 1, n)
	b := make([]byte, n*dt.Size())
	for i := range n {
		if dt == F64 {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(i)))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
		}
	}
	s.d.Write(v.Buf, 0, b)
	return v
}

func composedSoftmax(d Device, dst, src View, log bool) {
	c := lastDim(src)
	r := src.Len() / max(c, 1)
	if r == 0 || c == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(src.DType)
	x := s.view(wt, r, c)
	d.Copy(x, as(src, r, c))
	m := s.view(wt, r, 1)
	d.Reduce(Max, m, x)
	d.Binary(Sub, x, x, acrossColumns(m, c))
	e := x
	if log {
		e = s.view(wt, r, c) // x stays x - max
	}
	d.Unary(Exp, e, x, 0)
	sum := s.view(wt, r, 1)
	d.Reduce(Sum, sum, e)
	if log {
		d.Unary(Log, sum, sum, 0)
		d.Binary(Sub, x, x, acrossColumns(sum, c))
	} else {
		d.Binary(Div, x, x, acrossColumns(sum, c))
	}
	d.Copy(as(dst, r, c), x)
}

func composedSoftmaxBackward(d Device, dx, y, dy View, log bool) {
	c := lastDim(y)
	r := y.Len() / max(c, 1)
	if r == 0 || c == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(y.DType)
	g := s.view(wt, r, c)
	d.Copy(g, as(dy, r, c))
	u := s.view(wt, r, c)
	d.Copy(u, as(y, r, c))
	sum := s.view(wt, r, 1)
	if log {
		// dx = dy - exp(y)·Σdy
		d.Reduce(Sum, sum, g)
		d.Unary(Exp, u, u, 0)
		d.Binary(Mul, u, u, acrossColumns(sum, c))
		d.Binary(Sub, g, g, u)
	} else {
		// dx = y·(dy - Σ dy·y)
		p := s.view(wt, r, c)
		d.Binary(Mul, p, g, u)
		d.Reduce(Sum, sum, p)
		d.Binary(Sub, g, g, acrossColumns(sum, c))
		d.Binary(Mul, g, g, u)
	}
	d.Copy(as(dx, r, c), g)
}

// widened returns a [1, n] temporary of wt holding v's n elements.
func (s *scratch) widened(wt DType, v View, n int) View {
	w := s.view(wt, 1, n)
	s.d.Copy(w, as(v, 1, n))
	return w
}

func composedLayerNorm(d Device, y, mean, rstd, x, gamma, beta View, eps float64) {
	n := lastDim(x)
	r := x.Len() / max(n, 1)
	if r == 0 || n == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(x.DType)
	inv := 1 / float64(n)
	xw := s.view(wt, r, n)
	d.Copy(xw, as(x, r, n))
	mu := s.view(wt, r, 1)
	d.Reduce(Sum, mu, xw)
	d.Unary(MulScalar, mu, mu, inv)
	d.Binary(Sub, xw, xw, acrossColumns(mu, n))
	sq := s.view(wt, r, n)
	d.Unary(Square, sq, xw, 0)
	rs := s.view(wt, r, 1)
	d.Reduce(Sum, rs, sq)
	d.Unary(MulScalar, rs, rs, inv)
	d.Unary(AddScalar, rs, rs, eps)
	d.Unary(Sqrt, rs, rs, 0)
	d.Unary(Recip, rs, rs, 0)
	d.Binary(Mul, xw, xw, acrossColumns(rs, n))
	d.Binary(Mul, xw, xw, downRows(s.widened(wt, gamma, n), r))
	d.Binary(Add, xw, xw, downRows(s.widened(wt, beta, n), r))
	d.Copy(as(y, r, n), xw)
	d.Copy(as(mean, r, 1), mu)
	d.Copy(as(rstd, r, 1), rs)
}

func composedLayerNormBackward(d Device, dx, dgamma, dbeta, dy, x, mean, rstd, gamma View) {
	n := lastDim(x)
	r := x.Len() / max(n, 1)
	if r == 0 || n == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(x.DType)
	inv := 1 / float64(n)
	// x̂ = (x - mean)·rstd
	xh := s.view(wt, r, n)
	d.Copy(xh, as(x, r, n))
	mu := s.view(wt, r, 1)
	d.Copy(mu, as(mean, r, 1))
	rs := s.view(wt, r, 1)
	d.Copy(rs, as(rstd, r, 1))
	d.Binary(Sub, xh, xh, acrossColumns(mu, n))
	d.Binary(Mul, xh, xh, acrossColumns(rs, n))
	g := s.view(wt, r, n)
	d.Copy(g, as(dy, r, n))
	// dbeta += Σ_rows dy; dgamma += Σ_rows dy·x̂
	col := s.view(wt, 1, n)
	p := s.view(wt, r, n)
	addInto := func(dst View) {
		acc := s.widened(wt, dst, n)
		d.Binary(Add, acc, acc, col)
		d.Copy(as(dst, 1, n), acc)
	}
	d.Reduce(Sum, col, g)
	addInto(dbeta)
	d.Binary(Mul, p, g, xh)
	d.Reduce(Sum, col, p)
	addInto(dgamma)
	// dx = rstd·(ĝ - mean(ĝ) - x̂·mean(ĝ·x̂)) with ĝ = dy·gamma
	d.Binary(Mul, g, g, downRows(s.widened(wt, gamma, n), r))
	a := s.view(wt, r, 1)
	d.Reduce(Sum, a, g)
	d.Unary(MulScalar, a, a, inv)
	d.Binary(Mul, p, g, xh)
	b := s.view(wt, r, 1)
	d.Reduce(Sum, b, p)
	d.Unary(MulScalar, b, b, inv)
	d.Binary(Mul, xh, xh, acrossColumns(b, n))
	d.Binary(Sub, g, g, xh)
	d.Binary(Sub, g, g, acrossColumns(a, n))
	d.Binary(Mul, g, g, acrossColumns(rs, n))
	d.Copy(as(dx, r, n), g)
}

// checkTargets panics with the *IndexError the fused kernel raises for a
// target outside [0, classes) that is not ignore. It reads the targets to
// the host: the composition has no other way to fail on one.
func checkTargets(d Device, targets View, rows, classes, ignore int) {
	sz := targets.DType.Size()
	b := make([]byte, rows*sz)
	d.Read(b, targets.Buf, int64(targets.Offset*sz))
	for i := range rows {
		var t int64
		if targets.DType == I64 {
			t = int64(binary.LittleEndian.Uint64(b[8*i:]))
		} else {
			t = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
		if t != int64(ignore) && (t < 0 || t >= int64(classes)) {
			panic(&IndexError{Op: "cross entropy target", Index: t, Limit: classes, At: i})
		}
	}
}

// composedCrossEntropy writes per-row losses (backward false) or
// dlogits = dloss·(softmax - q) (backward true), where q = (1-s)·onehot +
// s/C is the smoothed target distribution; ignored rows get 0.
func composedCrossEntropy(d Device, out, logits, targets, dloss View, backward bool, ignore int, smoothing float64) {
	c := lastDim(logits)
	r := logits.Len() / max(c, 1)
	if r == 0 || c == 0 {
		return
	}
	checkTargets(d, targets, r, c, ignore)
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(logits.DType)
	p := s.view(wt, r, c)
	composedSoftmax(d, p, as(logits, r, c), !backward) // log-probabilities forward, probabilities backward
	t := s.view(wt, r, 1)
	d.Copy(t, as(targets, r, 1))
	q := s.view(wt, r, c)
	d.Binary(Equal, q, acrossColumns(t, c), downRows(s.arange(wt, c), r))
	d.Unary(MulScalar, q, q, 1-smoothing)
	d.Unary(AddScalar, q, q, smoothing/float64(c))
	valid := s.view(wt, r, 1) // 1 - [t == ignore]
	d.Fill(valid, float64(ignore))
	d.Binary(Equal, valid, t, valid)
	d.Unary(MulScalar, valid, valid, -1)
	d.Unary(AddScalar, valid, valid, 1)
	if !backward {
		loss := s.view(wt, r, 1)
		d.Binary(Mul, q, q, p)
		d.Reduce(Sum, loss, q)
		d.Unary(Neg, loss, loss, 0)
		d.Binary(Mul, loss, loss, valid)
		d.Copy(as(out, r, 1), loss)
		return
	}
	w := s.view(wt, r, 1)
	d.Copy(w, as(dloss, r, 1))
	d.Binary(Mul, w, w, valid)
	d.Binary(Sub, p, p, q)
	d.Binary(Mul, p, p, acrossColumns(w, c))
	d.Copy(as(out, r, c), p)
}

// composedCausalFill builds the mask [j > i] of the last two dimensions
// from two aranges and applies it with MaskedFill, broadcast over the
// leading dimensions.
func composedCausalFill(d Device, dst, src View, value float64) {
	k := len(dst.Shape)
	if k < 2 || dst.Len() == 0 {
		d.Copy(dst, src)
		return
	}
	rows, cols := dst.Shape[k-2], dst.Shape[k-1]
	s := scratch{d: d}
	defer s.free()
	mask := s.view(F32, rows, cols)
	i := s.arange(F32, rows)
	i.Shape, i.Strides = []int{rows, cols}, []int{1, 0}
	d.Binary(Sub, mask, downRows(s.arange(F32, cols), rows), i) // j - i
	d.Unary(Relu, mask, mask, 0)
	one := s.view(F32, 1)
	d.Fill(one, 1)
	d.Binary(Minimum, mask, mask, View{Buf: one.Buf, DType: F32, Shape: []int{rows, cols}, Strides: []int{0, 0}})
	m := View{Buf: mask.Buf, DType: F32, Shape: append([]int(nil), dst.Shape...), Strides: make([]int, k)}
	m.Strides[k-2], m.Strides[k-1] = cols, 1
	d.MaskedFill(dst, src, m, value)
}

func composedAdamStep(d Device, param, grad, m, v View, h AdamHyper) {
	n := param.Len()
	if n == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(param.DType)
	P, M, V := as(param, n), as(m, n), as(v, n)
	g := s.view(wt, n)
	d.Copy(g, as(grad, n))
	if h.GradScale != 0 && h.GradScale != 1 {
		d.Unary(MulScalar, g, g, h.GradScale)
	}
	t := s.view(wt, n)
	if h.WeightDecay != 0 && !h.Decoupled {
		d.Unary(MulScalar, t, P, h.WeightDecay) // Adam's L2 term: g += wd·p
		d.Binary(Add, g, g, t)
	}
	d.Unary(MulScalar, M, M, h.Beta1)
	d.Unary(MulScalar, t, g, 1-h.Beta1)
	d.Binary(Add, M, M, t)
	d.Unary(Square, t, g, 0)
	d.Unary(MulScalar, t, t, 1-h.Beta2)
	d.Unary(MulScalar, V, V, h.Beta2)
	d.Binary(Add, V, V, t)
	// p -= lr/bc1 · m / (√v/√bc2 + eps)
	d.Unary(Sqrt, t, V, 0)
	d.Unary(MulScalar, t, t, 1/math.Sqrt(h.BiasCorrection2))
	d.Unary(AddScalar, t, t, h.Eps)
	d.Binary(Div, g, M, t)
	if h.WeightDecay != 0 && h.Decoupled {
		d.Unary(MulScalar, P, P, 1-h.LR*h.WeightDecay)
	}
	d.Unary(MulScalar, g, g, -h.LR/h.BiasCorrection1)
	d.Binary(Add, P, P, g)
}

func composedSGDStep(d Device, param, grad, momentum View, h SGDHyper) {
	n := param.Len()
	if n == 0 {
		return
	}
	s := scratch{d: d}
	defer s.free()
	wt := accumulator(param.DType)
	P := as(param, n)
	g := s.view(wt, n)
	d.Copy(g, as(grad, n))
	if h.GradScale != 0 && h.GradScale != 1 {
		d.Unary(MulScalar, g, g, h.GradScale)
	}
	t := s.view(wt, n)
	if h.WeightDecay != 0 {
		d.Unary(MulScalar, t, P, h.WeightDecay)
		d.Binary(Add, g, g, t)
	}
	if h.Momentum != 0 {
		B := as(momentum, n)
		if h.FirstStep {
			d.Copy(B, g)
		} else {
			d.Unary(MulScalar, B, B, h.Momentum)
			d.Unary(MulScalar, t, g, 1-h.Dampening)
			d.Binary(Add, B, B, t)
		}
		if h.Nesterov {
			d.Unary(MulScalar, t, B, h.Momentum)
			d.Binary(Add, g, g, t)
		} else {
			d.Copy(g, B)
		}
	}
	d.Unary(MulScalar, g, g, -h.LR)
	d.Binary(Add, P, P, g)
}
