package tensor

import (
	"slices"

	"github.com/memfit/memfit/memory"
)

// gradInto returns the tensor a backward function accumulates t's
// gradient into in place over several products, and whether it is new
// (so that the first product writes rather than adds). For a leaf whose
// gradient is kept in an accumulating dtype (F32, F64) it is the leaf's
// own gradient, made on first use under the leaf's gradient category: the
// backward function returns it as t's gradient, and the engine, seeing
// the leaf's own storage, adds nothing more (isOwnGrad). A weight
// gradient built chunk by chunk then never exists twice, as a temporary
// and as the gradient it is added into. Otherwise it is a new tensor in
// t's accumulating dtype, which the engine handles as any gradient.
func gradInto(t *Tensor, s *Scope) (g *Tensor, fresh bool) {
	if !ownsGrad(t) {
		return mustAlloc(t.st.dev, accumDType(t.dtype), t.shape, s.cat), true
	}
	if t.grad != nil {
		return t.grad.share(), false
	}
	cat := memory.Gradient
	if t.gradCat != 0 {
		cat = t.gradCat
	}
	t.grad = mustAlloc(t.st.dev, t.dtype, t.shape, cat)
	return t.grad.share(), true
}

// ownsGrad reports whether gradInto hands out t's own gradient: t is a
// leaf that wants one, kept in an accumulating dtype.
func ownsGrad(t *Tensor) bool {
	return t.node == nil && t.requiresGrad && accumDType(t.dtype) == t.dtype
}

// isOwnGrad reports whether g is leaf's gradient itself, which a backward
// function has already accumulated into (gradInto).
func isOwnGrad(g, leaf *Tensor) bool {
	return leaf.grad != nil && g.st == leaf.grad.st
}

// inPlace reports whether a product writing t's gradient in dtype adds it
// into t's own gradient, with Beta 1, rather than into a new tensor the
// engine then adds: t owns its gradient (ownsGrad), which exists
// already (a micro-batch after the first, a weight used twice) and is
// of dtype. A first gradient is a new tensor the engine adopts as the
// leaf's, as before.
func inPlace(t *Tensor, dtype DType) bool {
	return ownsGrad(t) && t.grad != nil && t.grad.dtype == dtype && t.grad.IsContiguous() && slices.Equal(t.grad.shape, t.shape)
}
