package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// RowSums collects the gradients of parameters that a computation run
// over consecutive runs of rows (package tile's tiles of tokens) sums over
// those rows, so that they come out bit for bit as one pass over all the
// rows makes them.
//
// A parameter's gradient in a layer applied to rows is a sum over the
// rows: a product's (a Linear weight's gᵀ·x, whose K dimension is the
// rows) or a reduction's (a bias, a norm's gain). Computed run by run and
// added up, those sums would be grouped differently from one product or
// one reduction over all the rows, and round differently. In a scope made
// with SumRows, the ops that make such sums (Linear's weight and bias,
// Mul's broadcast operand, a quantized Linear's bias) continue one sum per
// parameter instead of handing a gradient back: a product accumulates into
// the sum with Beta 1, which the CPU's GEMM adds K block by K block in
// order, and a reduction folds the rows onto the sum so far, which the
// CPU's column reduction does row after row. The sums are then those of a
// whole pass when every run starts at a multiple of the products' K block
// and each run's product spans more than one K block (package tile sees to
// both); Gradient rounds each to the dtype the op would have handed on.
// Other devices compute the same sums with their own rounding.
type RowSums struct {
	sums map[*Tensor]*rowSum
}

// rowSum is one parameter's sum so far.
type rowSum struct {
	acc *Tensor // in the accumulating dtype (F32, F64); nil until the first rows
	// round is the dtype the ordinary op hands this gradient on in: the
	// product's dtype for a weight (a 16-bit product rounds its F32 sums
	// once), the reduction's for a bias.
	round DType
}

// NewRowSums returns sums for those of params that require a gradient.
func NewRowSums(params []*Tensor) *RowSums {
	p := &RowSums{sums: map[*Tensor]*rowSum{}}
	for _, t := range params {
		if t.node == nil && t.requiresGrad {
			p.sums[t] = &rowSum{}
		}
	}
	return p
}

// SumRows makes the scope's recording ops continue p's sums for the
// parameters p holds rather than hand their gradients back (RowSums).
// With and WithModes carry it; backward functions use the sums of the
// scope their op was recorded in.
func SumRows(p *RowSums) ScopeOption { return func(s *Scope) { s.rows = p } }

// has reports whether t's gradient is summed here.
func (p *RowSums) has(t *Tensor) bool {
	if p == nil || t == nil {
		return false
	}
	_, ok := p.sums[t]
	return ok
}

// start returns t's sum and whether it is fresh (nothing added yet),
// allocating it (memory.Temporary) on first use.
func (p *RowSums) start(t *Tensor, dtype, round DType) (acc *Tensor, fresh bool) {
	r := p.sums[t]
	if r.acc == nil {
		r.acc = mustAlloc(t.st.dev, dtype, t.shape, memory.Temporary)
		r.round = round
		return r.acc, true
	}
	if r.acc.dtype != dtype || r.round != round {
		panic(errorf("row_sums", "%s: its gradient is summed in %v and handed on in %v, now %v and %v", t.describe(), r.acc.dtype, r.round, dtype, round))
	}
	return r.acc, false
}

// product adds a·b (a [M, K], b [K, N], K the rows) into t's sum: the
// gradient a product op hands on in dtype. into says that the op, run
// over all the rows at once, adds its product into t's own gradient
// where that exists (inPlace): the sum then continues that gradient in
// place too, which Gradient hands on as t's own.
func (p *RowSums) product(s *Scope, t, a, b *Tensor, dtype DType, into bool) {
	if r := p.sums[t]; into && r.acc == nil && inPlace(t, dtype) {
		r.acc, r.round = t.grad.share(), dtype
		gemmInto(r.acc, a, b, 1, 1, s)
		r.acc.st.version.Add(1)
		return
	}
	acc, fresh := p.start(t, accumDType(dtype), dtype)
	beta := 1.0
	if fresh {
		beta = 0
	}
	gemmInto(acc, a, b, 1, beta, s)
	acc.st.version.Add(1)
}

// columns adds the rows of g (summed over its leading dimensions onto t's
// shape, its trailing ones) into t's sum: the gradient a reduction hands
// on in dtype. The first rows are reduced as the op reduces them; later
// ones after the sum so far, as one more row in front, so that the
// device's fold over rows continues from it.
func (p *RowSums) columns(s *Scope, t, g *Tensor, dtype DType) {
	acc, fresh := p.start(t, dtype, dtype)
	lead := g.Dim() - t.Dim()
	if lead < 0 || !slices.Equal(g.shape[lead:], t.shape) {
		panic(errorf("row_sums", "%s: rows %s do not end in its shape", t.describe(), g.describe()))
	}
	rows := numel(g.shape[:lead])
	dev := g.st.dev
	src := g
	if !fresh {
		// [1 + rows, …]: the sum so far, then the rows.
		shape := append([]int{1 + rows}, t.shape...)
		src = mustAlloc(dev, dtype, shape, memory.Temporary)
		defer src.Release()
		head, body := src.view(), src.view()
		head.Shape = t.shape
		head.Strides = contiguousStrides(t.shape)
		dev.Copy(head, acc.view())
		body.Offset += t.Len()
		body.Shape = g.shape
		body.Strides = contiguousStrides(g.shape)
		dev.Copy(body, g.view())
	}
	// The reduction writes the identity into acc first, then folds src.
	dev.Reduce(device.Sum, acc.view(), src.view())
	acc.st.version.Add(1)
}

// Gradient returns t's summed gradient rounded as the op would have handed
// it on (a new tensor the caller owns, memory.Temporary), or nil when no
// rows reached it.
func (p *RowSums) Gradient(t *Tensor) *Tensor {
	r := p.sums[t]
	if r == nil || r.acc == nil {
		return nil
	}
	if r.round == r.acc.dtype {
		return r.acc.share()
	}
	out := mustAlloc(t.st.dev, r.round, t.shape, memory.Temporary)
	t.st.dev.Copy(out.view(), r.acc.view())
	return out
}

// Release frees the sums.
func (p *RowSums) Release() {
	for _, r := range p.sums {
		if r.acc != nil {
			r.acc.Release()
			r.acc = nil
		}
	}
}
