package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// reduceAxes marks the dimensions of x that axes name (all when empty).
func reduceAxes(op string, x *Tensor, axes []int) []bool {
	red := make([]bool, x.Dim())
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
		return red
	}
	for _, a := range axes {
		red[normAxis(op, a, x.Dim())] = true
	}
	return red
}

// reduce computes op over axes of x, scaled by scale, into dtype.
func (s *Scope) reduce(op device.ReduceOp, x *Tensor, axes []int, keepdim bool, scale float64, dtype DType) *Tensor {
	dev := sameDevice("reduce", x)
	red := reduceAxes("reduce", x, axes)
	kept := make([]int, x.Dim())
	var squeezed []int
	for i, d := range x.shape {
		kept[i] = d
		if red[i] {
			kept[i] = 1
		} else {
			squeezed = append(squeezed, d)
		}
	}
	out := mustAlloc(dev, dtype, kept, s.cat)
	dev.Reduce(op, out.view(), x.view())
	if scale != 1 {
		dev.Unary(device.MulScalar, out.view(), out.view(), scale)
	}
	if !keepdim {
		out.shape = squeezed
		out.strides = contiguousStrides(squeezed)
	}
	return out
}

// accumDType is the dtype reductions produce: F32 for 16-bit inputs.
func accumDType(d DType) DType {
	if d.IsLowPrecision() {
		return F32
	}
	return d
}

// broadcastGrad spreads a reduced gradient back over shape, times scale.
func (s *Scope) broadcastGrad(g *Tensor, shape []int, red []bool, scale float64) *Tensor {
	kept := make([]int, len(shape))
	for i := range shape {
		kept[i] = shape[i]
		if red[i] {
			kept[i] = 1
		}
	}
	gc := g.packed(g.dtype, s.cat)
	defer gc.Release()
	gk := viewOf(gc, kept, contiguousStrides(kept), gc.offset)
	defer gk.Release()
	dx := mustAlloc(g.st.dev, g.dtype, shape, s.cat)
	if scale == 1 {
		g.st.dev.Copy(dx.view(), gk.broadcastView(shape))
	} else {
		g.st.dev.Unary(device.MulScalar, dx.view(), gk.broadcastView(shape), scale)
	}
	return dx
}

// Sum adds the elements over axes (all when none are given); keepdim keeps
// reduced dimensions with size 1. 16-bit inputs are summed into F32.
func (s *Scope) Sum(x *Tensor, keepdim bool, axes ...int) *Tensor {
	return s.sumScaled("sum", x, keepdim, axes, 1)
}

// Mean averages the elements over axes (all when none are given).
func (s *Scope) Mean(x *Tensor, keepdim bool, axes ...int) *Tensor {
	red := reduceAxes("mean", x, axes)
	n := 1
	for i, r := range red {
		if r {
			n *= x.shape[i]
		}
	}
	return s.sumScaled("mean", x, keepdim, axes, 1/float64(max(n, 1)))
}

func (s *Scope) sumScaled(name string, x *Tensor, keepdim bool, axes []int, scale float64) *Tensor {
	out := s.reduce(device.Sum, x, axes, keepdim, scale, accumDType(x.dtype))
	red := reduceAxes(name, x, axes)
	shape := x.shape
	s.record(out, name, []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.broadcastGrad(g, shape, red, scale)}
	})
	return s.own(out)
}

// Max takes the maximum over axes. Its gradient is shared equally between
// tied maxima.
func (s *Scope) Max(x *Tensor, keepdim bool, axes ...int) *Tensor {
	out := s.reduce(device.Max, x, axes, keepdim, 1, x.dtype)
	red := reduceAxes("max", x, axes)
	shape := x.shape
	s.record(out, "max", []*Tensor{x}, []*Tensor{x, out}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sx, so := saved[0], saved[1]
		dev := g.st.dev
		m := s.broadcastGrad(so, shape, red, 1) // the max, spread back
		mask := mustAlloc(dev, g.dtype, shape, s.cat)
		dev.Binary(device.Equal, mask.view(), sx.view(), m.view())
		m.Release()
		count := s.reduce(device.Sum, mask, axesOf(red), true, 1, g.dtype)
		gb := s.broadcastGrad(g, shape, red, 1)
		dx := mustAlloc(dev, g.dtype, shape, s.cat)
		dev.Binary(device.Mul, dx.view(), gb.view(), mask.view())
		dev.Binary(device.Div, dx.view(), dx.view(), count.broadcastView(shape))
		gb.Release()
		mask.Release()
		count.Release()
		return []*Tensor{dx}
	})
	return s.own(out)
}

func axesOf(red []bool) []int {
	var a []int
	for i, r := range red {
		if r {
			a = append(a, i)
		}
	}
	return a
}

// Argmax returns the I64 position of the largest element of x along dim,
// the first of tied maxima as torch.argmax (a NaN counts as the largest);
// keepdim keeps dim with size 1. It has no gradient. Integers are compared
// as F64 (exact below 2⁵³).
//
// It is a composition of core kernels, so every device has it: the max
// along dim, a mask of the elements equal to it, weighted by n - i (so the
// first maximum weighs most), whose max along dim is n - argmax.
func (s *Scope) Argmax(x *Tensor, dim int, keepdim bool) *Tensor {
	dev := sameDevice("argmax", x)
	d := normAxis("argmax", dim, x.Dim())
	n := x.shape[d]
	if n == 0 {
		panic(errorf("argmax", "dimension %d of %s is empty", dim, x.describe()))
	}
	// F32 holds the weights 1..n exactly for n <= 2²⁴; wider dims use F64.
	dt := F64
	if x.dtype.IsFloat() && x.dtype != F64 && n <= 1<<24 {
		dt = F32
	}
	xc := x.packed(dt, memory.Temporary)
	defer xc.Release()
	m := mustAlloc(dev, dt, keptShape(x.shape, d), memory.Temporary)
	defer m.Release()
	dev.Reduce(device.Max, m.view(), xc.view())
	mask := mustAlloc(dev, dt, x.shape, memory.Temporary)
	defer mask.Release()
	dev.Binary(device.Equal, mask.view(), xc.view(), m.broadcastView(x.shape))
	if x.dtype.IsFloat() {
		// NaN counts as the largest value, as in torch.argmax: the max of a
		// row holding one is NaN, which equals nothing, so mark the NaNs
		// themselves (1 - [x == x]).
		nan := mustAlloc(dev, dt, x.shape, memory.Temporary)
		dev.Binary(device.Equal, nan.view(), xc.view(), xc.view())
		dev.Unary(device.MulScalar, nan.view(), nan.view(), -1)
		dev.Unary(device.AddScalar, nan.view(), nan.view(), 1)
		dev.Binary(device.Maximum, mask.view(), mask.view(), nan.view())
		nan.Release()
	}
	w64 := make([]float64, n)
	for i := range w64 {
		w64[i] = float64(n - i)
	}
	w, err := FromFloat64(dev, w64, []int{n}, memory.Temporary)
	if err != nil {
		panic(err)
	}
	defer w.Release()
	wc := w.packed(dt, memory.Temporary)
	defer wc.Release()
	wv := wc.view()
	wv.Shape = x.shape
	wv.Strides = make([]int, x.Dim())
	wv.Strides[d] = 1
	dev.Binary(device.Mul, mask.view(), mask.view(), wv)
	dev.Reduce(device.Max, m.view(), mask.view())
	dev.Unary(device.MulScalar, m.view(), m.view(), -1)
	dev.Unary(device.AddScalar, m.view(), m.view(), float64(n))
	out := mustAlloc(dev, I64, m.shape, s.cat)
	dev.Copy(out.view(), m.view())
	if !keepdim {
		out.shape = slices.Delete(slices.Clone(x.shape), d, d+1)
		out.strides = contiguousStrides(out.shape)
	}
	return s.own(out)
}

// keptShape is shape with dimension d reduced to 1.
func keptShape(shape []int, d int) []int {
	k := slices.Clone(shape)
	k[d] = 1
	return k
}
