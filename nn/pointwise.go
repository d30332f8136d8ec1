package nn

import (
	"fmt"

	"github.com/memfit/memfit/tensor"
)

// Pointwise is an elementwise layer: ReLU, GELU, Tanh or Dropout. Used as
// a Module it never writes into its input, which belongs to the caller (and
// may have been saved for backward, or be the input of a segment that
// activation checkpointing will recompute). Inside a Fused layer it writes
// into the tensor made by the layer before it when that is safe.
type Pointwise interface {
	Module
	// apply computes the layer on x. writable says whether x's storage
	// may be overwritten: nobody else holds it and no op saved it. The
	// second result says the same of the result.
	apply(r *Run, x *tensor.Tensor, writable bool) (*tensor.Tensor, bool)
}

// freshProducer marks layers whose Forward returns a new tensor that no op
// saved for backward (Linear, Conv2d, LayerNorm, Embedding, pools,
// attention): Fused may overwrite their output.
type freshProducer interface{ freshOutput() }

// recording reports whether an op on x is recorded for backward.
func recording(r *Run, x *tensor.Tensor) bool { return r.Grad() && x.RequiresGrad() }

// identity is a new handle on x that keeps x's history (a view), unlike
// Detach.
func identity(r *Run, x *tensor.Tensor) *tensor.Tensor { return r.Reshape(x, x.Shape()...) }

// ReLU is max(x, 0). It saves its output for backward.
type ReLU struct{}

// Forward returns relu(x) in a new tensor.
func (l ReLU) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	y, _ := l.apply(r, x, false)
	return y
}

// Parameters is empty.
func (ReLU) Parameters() []*tensor.Tensor { return nil }

func (ReLU) apply(r *Run, x *tensor.Tensor, writable bool) (*tensor.Tensor, bool) {
	rec := recording(r, x)
	if writable && r.InPlace {
		return r.ReluInPlace(x), !rec
	}
	return r.Relu(x), !rec
}

// GELU is the tanh approximation of the Gaussian error linear unit. It
// saves its input for backward, so it runs in place only where nothing
// records (inference).
//
// Exact selects the erf form x·Φ(x) (PyTorch's nn.GELU() default, BERT's)
// over the tanh approximation (GPT-2's, approximate="tanh"); it always
// makes a new tensor.
type GELU struct{ Exact bool }

// Forward returns gelu(x) in a new tensor.
func (l GELU) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	y, _ := l.apply(r, x, false)
	return y
}

// Parameters is empty.
func (GELU) Parameters() []*tensor.Tensor { return nil }

func (l GELU) apply(r *Run, x *tensor.Tensor, writable bool) (*tensor.Tensor, bool) {
	if l.Exact {
		return r.GeluExact(x), true
	}
	if writable && r.InPlace {
		return r.GeluInPlace(x), true // a new tensor when it records
	}
	return r.Gelu(x), true
}

// Tanh is the hyperbolic tangent. It saves its output for backward.
type Tanh struct{}

// Forward returns tanh(x) in a new tensor.
func (l Tanh) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	y, _ := l.apply(r, x, false)
	return y
}

// Parameters is empty.
func (Tanh) Parameters() []*tensor.Tensor { return nil }

func (Tanh) apply(r *Run, x *tensor.Tensor, writable bool) (*tensor.Tensor, bool) {
	return r.Tanh(x), !recording(r, x)
}

// Dropout zeroes each element with probability P while training and
// scales the others by 1/(1-P); in evaluation it is the identity. Its mask
// is a function of the run's seed and the layer's salt (derived from its
// path), so it is regenerated in backward and in a checkpointed recompute
// instead of being stored: dropout saves nothing.
type Dropout struct {
	P    float64
	Salt uint64
}

// NewDropout makes a Dropout layer at path (the path only seeds its masks).
func NewDropout(path string, p float64) (*Dropout, error) {
	if p < 0 || p >= 1 {
		return nil, fmt.Errorf("nn: dropout %q: P is %v, want 0 <= P < 1", path, p)
	}
	return &Dropout{P: p, Salt: Salt(path)}, nil
}

// Forward applies dropout in a new tensor (a view of x in evaluation).
func (l *Dropout) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	y, _ := l.apply(r, x, false)
	return y
}

// Parameters is empty.
func (*Dropout) Parameters() []*tensor.Tensor { return nil }

// Overwrite applies dropout to x, writing into x when r.InPlace is on: x
// must be a tensor the caller made and no op saved (the output of Linear,
// an embedding lookup, a residual sum). The caller still releases its
// handle on x.
func (l *Dropout) Overwrite(r *Run, x *tensor.Tensor) *tensor.Tensor {
	y, _ := l.apply(r, x, true)
	return y
}

func (l *Dropout) apply(r *Run, x *tensor.Tensor, writable bool) (*tensor.Tensor, bool) {
	if !r.Train || l.P == 0 {
		return identity(r, x), writable
	}
	if writable && r.InPlace {
		return r.DropoutInPlace(x, l.P, r.SeedFor(l.Salt)), true
	}
	return r.Dropout(x, l.P, r.SeedFor(l.Salt)), true
}

// Fused runs Layer and then the pointwise layers Then on its output, as
// one layer. When Layer makes a new tensor that no op saves (Linear,
// Conv2d, LayerNorm, Embedding, the pools, attention) and the run allows
// in-place ops, each pointwise layer writes into that tensor instead of
// making a new activation — unless the op before it saved its output for
// backward (ReLU and Tanh do), in which case it makes a new one: in-place
// writes never invalidate a saved tensor. Layers of other types get no
// in-place writes.
//
// Dropout saves nothing and ReLU commutes with it, so Then: [Dropout, ReLU]
// computes exactly what [ReLU, Dropout] does while keeping one activation
// instead of two.
type Fused struct {
	Layer Module
	Then  []Pointwise
}

// Forward runs the layer and its pointwise tail.
func (f *Fused) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	h := f.Layer.Forward(r, x)
	_, writable := f.Layer.(freshProducer)
	for _, p := range f.Then {
		y, w := p.apply(r, h, writable)
		h.Release()
		h, writable = y, w
	}
	return h
}

// Parameters are the layer's.
func (f *Fused) Parameters() []*tensor.Tensor {
	ps := f.Layer.Parameters()
	for _, p := range f.Then {
		ps = append(ps, p.Parameters()...)
	}
	return ps
}

// Residual returns x + branch, the residual connection of a block. With
// r.InPlace the sum is written into branch, which must be a tensor the
// caller made and no op saved: the output of Linear, Conv2d or attention,
// or of a Fused layer ending in GELU or training-mode Dropout — not one
// ending in ReLU, which saves its output (backward would then fail with an
// error naming relu_). The caller still releases its handle on branch, and
// x is never written.
//
// Under autocast a branch may come out in 16 bits while x is F32; the sum
// is then made out of place, in F32, as it is without InPlace: in-place
// writes never change a result's dtype.
func Residual(r *Run, branch, x *tensor.Tensor) *tensor.Tensor {
	if r.InPlace && branch.DType() == x.DType() {
		return r.AddInPlace(branch, x)
	}
	return r.Add(branch, x)
}
