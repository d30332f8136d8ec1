package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
)

// viewOf returns a new handle on x's storage with another shape/strides.
func viewOf(x *Tensor, shape, strides []int, offset int) *Tensor {
	x.st.retain()
	t := &Tensor{st: x.st, shape: shape, strides: strides, offset: offset, dtype: x.dtype}
	track(t)
	return t
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(op string, axis, rank int) int {
	if axis < 0 {
		axis += rank
	}
	if axis < 0 || axis >= rank {
		panic(errorf(op, "axis out of range for %d dimensions", rank))
	}
	return axis
}

// inferShape resolves one -1 in shape against n elements.
func inferShape(op string, shape []int, n int, from []int) []int {
	out := append([]int(nil), shape...)
	infer := -1
	known := 1
	for i, d := range out {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			panic(errorf(op, "bad target shape %v", shape))
		default:
			known *= d
		}
	}
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			panic(errorf(op, "cannot reshape %v into %v", from, shape))
		}
		out[infer] = n / known
	} else if known != n {
		panic(errorf(op, "cannot reshape %v (%d elements) into %v (%d elements)", from, n, shape, known))
	}
	return out
}

// Reshape returns x with a new shape (one dimension may be -1). It is a view
// when x is contiguous and a copy otherwise.
func (s *Scope) Reshape(x *Tensor, shape ...int) *Tensor {
	sameDevice("reshape", x)
	shape = inferShape("reshape", shape, x.Len(), x.shape)
	var out *Tensor
	if x.IsContiguous() {
		out = viewOf(x, shape, contiguousStrides(shape), x.offset)
	} else if st, ok := viewStrides(x.shape, x.strides, shape); ok {
		out = viewOf(x, shape, st, x.offset)
	} else {
		c := x.packed(x.dtype, s.cat)
		out = viewOf(c, shape, contiguousStrides(shape), c.offset)
		c.Release()
	}
	from := x.shape
	s.record(out, "reshape", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.Reshape(g, from...)}
	})
	return s.own(out)
}

// Transpose swaps two dimensions (a view).
func (s *Scope) Transpose(x *Tensor, i, j int) *Tensor {
	sameDevice("transpose", x)
	i, j = normAxis("transpose", i, x.Dim()), normAxis("transpose", j, x.Dim())
	perm := make([]int, x.Dim())
	for k := range perm {
		perm[k] = k
	}
	perm[i], perm[j] = perm[j], perm[i]
	return s.Permute(x, perm...)
}

// Permute reorders dimensions: result dimension k is x's dimension perm[k]
// (a view).
func (s *Scope) Permute(x *Tensor, perm ...int) *Tensor {
	sameDevice("permute", x)
	if len(perm) != x.Dim() {
		panic(errorf("permute", "%d axes given for %s", len(perm), x.describe()))
	}
	shape := make([]int, len(perm))
	strides := make([]int, len(perm))
	inv := make([]int, len(perm))
	seen := make([]bool, len(perm))
	for k, p := range perm {
		p = normAxis("permute", p, x.Dim())
		if seen[p] {
			panic(errorf("permute", "axis %d repeated in %v", p, perm))
		}
		seen[p] = true
		shape[k], strides[k] = x.shape[p], x.strides[p]
		inv[p] = k
	}
	out := viewOf(x, shape, strides, x.offset)
	s.record(out, "permute", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.Permute(g, inv...)}
	})
	return s.own(out)
}

// Contiguous returns x densely packed (x's storage when it already is).
func (s *Scope) Contiguous(x *Tensor) *Tensor {
	sameDevice("contiguous", x)
	c := x.packed(x.dtype, s.cat)
	out := viewOf(c, c.shape, c.strides, c.offset)
	c.Release()
	s.record(out, "contiguous", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{g.share()}
	})
	return s.own(out)
}

// Narrow returns elements [start, start+length) of dimension dim (a view).
func (s *Scope) Narrow(x *Tensor, dim, start, length int) *Tensor {
	sameDevice("narrow", x)
	dim = normAxis("narrow", dim, x.Dim())
	if start < 0 || length < 0 || start+length > x.shape[dim] {
		panic(errorf("narrow", "range [%d, %d) outside dimension %d of size %d", start, start+length, dim, x.shape[dim]))
	}
	shape := append([]int(nil), x.shape...)
	shape[dim] = length
	out := viewOf(x, shape, x.strides, x.offset+start*x.strides[dim])
	full := x.shape
	s.record(out, "narrow", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		dx := mustAlloc(g.st.dev, g.dtype, full, s.cat)
		g.st.dev.Fill(dx.view(), 0)
		part := dx.view()
		part.Shape = g.shape
		part.Offset = start * dx.strides[dim]
		g.st.dev.Copy(part, g.view())
		return []*Tensor{dx}
	})
	if out.node != nil {
		out.node.addInto = func(dst, g *Tensor) {
			part := dst.view()
			part.Shape = g.shape
			part.Offset += start * dst.strides[dim]
			g.st.dev.Binary(device.Add, part, part, g.view())
		}
	}
	return s.own(out)
}

// Expand repeats x to shape without copying (broadcast view).
func (s *Scope) Expand(x *Tensor, shape ...int) *Tensor {
	sameDevice("expand", x)
	if !slices.Equal(broadcastShapes("expand", x.shape, shape), shape) {
		panic(errorf("expand", "%v cannot expand to %v", x.shape, shape))
	}
	shape = append([]int(nil), shape...)
	v := x.broadcastView(shape)
	out := viewOf(x, shape, v.Strides, x.offset)
	from := x.shape
	s.record(out, "expand", []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.sumTo(g, from)}
	})
	return s.own(out)
}

// Concat joins tensors of equal shape but for dimension dim.
func (s *Scope) Concat(dim int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic(errorf("concat", "no tensors"))
	}
	dev := sameDevice("concat", ts...)
	first := ts[0]
	dim = normAxis("concat", dim, first.Dim())
	shape := append([]int(nil), first.shape...)
	shape[dim] = 0
	dt := first.dtype
	for _, t := range ts {
		if t.Dim() != first.Dim() {
			panic(errorf("concat", "%s and %s differ in rank", first.describe(), t.describe()))
		}
		for i := range t.shape {
			if i != dim && t.shape[i] != first.shape[i] {
				panic(errorf("concat", "%s and %s differ in dimension %d", first.describe(), t.describe(), i))
			}
		}
		shape[dim] += t.shape[dim]
		dt = promote(dt, t.dtype)
	}
	out := mustAlloc(dev, dt, shape, s.cat)
	sizes := make([]int, len(ts))
	at := 0
	for i, t := range ts {
		part := out.view()
		part.Shape = t.shape
		part.Offset = at * out.strides[dim]
		dev.Copy(part, t.view())
		sizes[i] = t.shape[dim]
		at += t.shape[dim]
	}
	s.record(out, "concat", ts, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		grads := make([]*Tensor, len(sizes))
		at := 0
		for i, n := range sizes {
			gs := append([]int(nil), g.shape...)
			gs[dim] = n
			grads[i] = viewOf(g, gs, g.strides, g.offset+at*g.strides[dim])
			at += n
		}
		return grads
	})
	return s.own(out)
}

// Split cuts x along dim into pieces of the given sizes (views).
func (s *Scope) Split(x *Tensor, dim int, sizes ...int) []*Tensor {
	sameDevice("split", x)
	dim = normAxis("split", dim, x.Dim())
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != x.shape[dim] {
		panic(errorf("split", "sizes %v do not add up to dimension %d of %s", sizes, dim, x.describe()))
	}
	out := make([]*Tensor, len(sizes))
	at := 0
	for i, n := range sizes {
		out[i] = s.Narrow(x, dim, at, n)
		at += n
	}
	return out
}

// Unsqueeze inserts a dimension of size 1 at axis.
func (s *Scope) Unsqueeze(x *Tensor, axis int) *Tensor {
	if axis < 0 {
		axis += x.Dim() + 1
	}
	shape := append(append(append([]int(nil), x.shape[:axis]...), 1), x.shape[axis:]...)
	return s.Reshape(x, shape...)
}

// viewStrides returns strides that show a tensor of shape and strides as
// newShape without moving an element, or ok false when none exist. Runs
// of dimensions that are contiguous with each other (each stride the
// next one's times its size) can be split and merged freely; a new
// dimension may not straddle two runs.
func viewStrides(shape, strides, newShape []int) (out []int, ok bool) {
	if numel(shape) == 0 {
		return contiguousStrides(newShape), true
	}
	out = make([]int, len(newShape))
	nd := len(newShape) - 1
	chunkNumel, viewNumel := 1, 1
	chunkStride := 1
	if len(strides) > 0 {
		chunkStride = strides[len(strides)-1]
	}
	for d := len(shape) - 1; d >= 0; d-- {
		chunkNumel *= shape[d]
		// A run ends at d unless dimension d-1 continues it (size-1
		// dimensions never break a run).
		if d > 0 && (shape[d-1] == 1 || strides[d-1] == chunkNumel*chunkStride) {
			continue
		}
		for nd >= 0 && (viewNumel < chunkNumel || newShape[nd] == 1) {
			out[nd] = viewNumel * chunkStride
			viewNumel *= newShape[nd]
			nd--
		}
		if viewNumel != chunkNumel {
			return nil, false
		}
		if d > 0 {
			chunkStride, chunkNumel, viewNumel = strides[d-1], 1, 1
		}
	}
	return out, nd == -1
}
