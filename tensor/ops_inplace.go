package tensor

import (
	"github.com/memfit/memfit/device"
	"slices"
)

// In-place ops write their result into x's storage and return a new handle
// on it that carries the op in its history; x's storage version goes up by
// one. A node that saved x before the write notices the version change in
// backward and fails with an error naming itself, instead of computing a
// wrong gradient. The caller still owns (and releases) x.

func (s *Scope) checkInPlace(op string, x *Tensor) {
	x.mustLive(op)
	if s.grad && x.requiresGrad && x.node == nil {
		panic(errorf(op, "in-place write to %s, a leaf that requires grad", x.describe()))
	}
	if !x.IsContiguous() {
		panic(errorf(op, "in-place write to non-contiguous %s", x.describe()))
	}
}

// inPlaceResult makes the handle an in-place op returns and records bw.
func (s *Scope) inPlaceResult(op string, x *Tensor, inputs []*Tensor, save func(out *Tensor) []*Tensor, bw func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor) *Tensor {
	x.st.version.Add(1)
	out := viewOf(x, x.shape, x.strides, x.offset)
	var saved []*Tensor
	if save != nil {
		saved = save(out)
	}
	s.record(out, op, inputs, saved, bw)
	return s.own(out)
}

// ReluInPlace is Relu writing into x. It saves its output, which is all
// relu's gradient needs, so it is safe whenever nothing else saved x.
func (s *Scope) ReluInPlace(x *Tensor) *Tensor {
	s.checkInPlace("relu_", x)
	x.st.dev.Unary(device.Relu, x.view(), x.view(), 0)
	return s.inPlaceResult("relu_", x, []*Tensor{x}, func(out *Tensor) []*Tensor { return []*Tensor{out} },
		func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
			dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
			g.st.dev.UnaryBackward(device.Relu, dx.view(), saved[0].view(), saved[0].view(), g.view(), 0)
			return []*Tensor{dx}
		})
}

// GeluInPlace is Gelu writing into x when nothing needs x afterwards: in a
// NoGrad scope, or when x needs no gradient. Gelu's gradient needs its
// input, so while recording it falls back to Gelu (which keeps x).
func (s *Scope) GeluInPlace(x *Tensor) *Tensor {
	if s.grad && x.needsGrad() {
		return s.Gelu(x)
	}
	s.checkInPlace("gelu_", x)
	x.st.dev.Unary(device.Gelu, x.view(), x.view(), 0)
	return s.inPlaceResult("gelu_", x, nil, nil, nil)
}

// DropoutInPlace is Dropout writing into x; its mask is regenerated from
// the seed in backward, so it saves nothing.
func (s *Scope) DropoutInPlace(x *Tensor, p float64, seed uint64) *Tensor {
	s.checkInPlace("dropout_", x)
	if p < 0 || p >= 1 {
		panic(errorf("dropout_", "probability %v outside [0, 1)", p))
	}
	x.st.dev.Dropout(x.view(), x.view(), p, seed)
	return s.inPlaceResult("dropout_", x, []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
		g.st.dev.Dropout(dx.view(), g.view(), p, seed)
		return []*Tensor{dx}
	})
}

// AddInPlace adds y (broadcast to x) into x: the residual connection
// x = x + f(x) without a new activation.
func (s *Scope) AddInPlace(x, y *Tensor) *Tensor {
	s.checkInPlace("add_", x)
	sameDevice("add_", x, y)
	if !slices.Equal(broadcastShapes("add_", x.shape, y.shape), x.shape) {
		panic(errorf("add_", "%s does not broadcast into %s", y.describe(), x.describe()))
	}
	if promote(x.dtype, y.dtype) != x.dtype {
		panic(errorf("add_", "adding %s into %s would round the sum to %v; use Add", y.describe(), x.describe(), x.dtype))
	}
	x.st.dev.Binary(device.Add, x.view(), x.view(), y.broadcastView(x.shape))
	yShape := y.shape
	return s.inPlaceResult("add_", x, []*Tensor{x, y}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{g.share(), s.sumTo(g, yShape)}
	})
}

// MulScalarInPlace multiplies x by c in place.
func (s *Scope) MulScalarInPlace(x *Tensor, c float64) *Tensor {
	s.checkInPlace("mul_", x)
	x.st.dev.Unary(device.MulScalar, x.view(), x.view(), c)
	return s.inPlaceResult("mul_", x, []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		return []*Tensor{s.MulScalar(g, c)}
	})
}

// Function records a custom differentiable step: out was computed from
// inputs by code the tape did not see (for example without recording, as
// activation checkpointing does), and backward returns the gradient of each
// input given the gradient of out. save lists tensors backward needs; it
// receives handles on them. Function takes ownership of out's handle and
// returns the recorded result.
func (s *Scope) Function(name string, out *Tensor, inputs, save []*Tensor, backward func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor) *Tensor {
	out.mustLive(name)
	if out.node != nil {
		panic(errorf(name, "Function's output already has a history; compute it without recording"))
	}
	if out.owner != nil {
		out.owner.Keep(out)
	}
	s.record(out, name, inputs, save, backward)
	return s.own(out)
}

// OnBackward returns x through a recorded identity whose backward calls
// fn before the gradient flows on to x: where a block's backward begins
// (on its output) or has ended (on its input), for code that must act
// there (bring weights back, release them). The identity's output is a
// view of x's storage; the caller may release its own handle on x.
func (s *Scope) OnBackward(x *Tensor, name string, fn func()) *Tensor {
	plain := NewScope(NoGrad())
	out := plain.Keep(plain.Detach(x))
	plain.Close()
	return s.Function(name, out, []*Tensor{x}, nil, func(s *Scope, g *Tensor, _ []*Tensor) []*Tensor {
		fn()
		return []*Tensor{s.Detach(g)}
	})
}

// CausalMaskInPlace is CausalMask writing into x (attention scores that
// nothing saved), sparing a copy of the largest activation of attention.
func (s *Scope) CausalMaskInPlace(x *Tensor, value float64) *Tensor {
	s.checkInPlace("causal_mask_", x)
	if x.Dim() < 2 {
		panic(errorf("causal_mask_", "%s needs at least 2 dimensions", x.describe()))
	}
	device.CausalFill(x.st.dev, x.view(), x.view(), value)
	return s.inPlaceResult("causal_mask_", x, []*Tensor{x}, nil, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		dx := mustAlloc(g.st.dev, g.dtype, g.shape, s.cat)
		device.CausalFill(g.st.dev, dx.view(), g.view(), 0)
		return []*Tensor{dx}
	})
}
