package checkpoint

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Func is a piece of a forward pass that can be run twice with the same
// result: given the same Run (seed, training flag, autocast) and input, it
// must compute the same output.
type Func func(r *nn.Run, x *tensor.Tensor) *tensor.Tensor

// Run computes fn(x) without keeping its activations: only x is saved, and
// fn is run again, recording, when backward reaches it. Gradients flow to x
// (when it needs one) and to params, the parameters fn uses; listing them is
// what makes backward happen when x itself needs no gradient (a first block
// fed by data), and frozen ones are simply skipped. The recompute uses the
// same autocast dtype, seed, training flag and segments, so dropout masks and
// low-precision rounding repeat exactly and gradients are bitwise equal to
// an uncheckpointed run.
//
// In a run that does not record, Run is fn(x).
func Run(r *nn.Run, fn Func, params []*tensor.Tensor, x *tensor.Tensor) *tensor.Tensor {
	if !r.Grad() {
		return fn(r, x)
	}
	inner := r.With(tensor.NoGrad())
	out := fn(r.In(inner), x)
	inner.Keep(out)
	inner.Close()
	// A handle of its own, without history, is what Function records on.
	plain := tensor.NewScope(tensor.NoGrad())
	res := plain.Keep(plain.Detach(out))
	out.Release()
	plain.Close()

	needX := x.RequiresGrad()
	inputs := append([]*tensor.Tensor{x}, params...)
	pass, autocast := *r, r.AutocastDType() // the Run as it is now, segments included
	return r.Function("checkpoint", res, inputs, []*tensor.Tensor{x}, func(_ *tensor.Scope, g *tensor.Tensor, saved []*tensor.Tensor) []*tensor.Tensor {
		var opts []tensor.ScopeOption
		if autocast != device.Invalid {
			opts = append(opts, tensor.Autocast(autocast))
		}
		s := tensor.NewScope(opts...)
		defer s.Close()
		xd := s.Detach(saved[0])
		if needX {
			xd.SetRequiresGrad(true).SetGradCategory(memory.Temporary)
		}
		// Backward needs the recomputed output's graph, not its values,
		// and the output's gradient only until the nodes below have taken
		// it: neither stays for the whole of the segment's backward.
		y := fn(pass.In(s), xd)
		root := y.Root()
		if y != xd { // a segment that returns its input's handle: the leaf stays
			y.Release()
		}
		defer root.Release()
		root.Backward(tensor.WithGradTaken(g))
		grads := make([]*tensor.Tensor, len(inputs))
		if needX {
			grads[0] = xd.TakeGrad()
		}
		// Parameter gradients were accumulated by the inner backward.
		return grads
	})
}

// Module runs m.Forward under Run.
func Module(r *nn.Run, m nn.Module, x *tensor.Tensor) *tensor.Tensor {
	return Run(r, m.Forward, m.Parameters(), x)
}

// Policy decides how a sequence of n blocks is cut into segments whose
// activations are recomputed in backward.
type Policy struct {
	kind     policyKind
	segments int
	budget   int64
	state    *budgetState // what Budget learned; shared by copies
}

type policyKind uint8

const (
	off policyKind = iota
	every
	sqrtN
	fixed
	budget
)

// The policies.
var (
	// Off keeps every activation (no recompute).
	Off = Policy{kind: off}
	// Every recomputes each block.
	Every = Policy{kind: every}
	// Sqrt cuts n blocks into ⌈√n⌉ segments (Chen et al. 2016).
	Sqrt = Policy{kind: sqrtN}
)

// Segments cuts the blocks into k segments.
func Segments(k int) Policy { return Policy{kind: fixed, segments: k} }

// Budget picks the fewest recomputed segments whose activation peak fits in
// bytes, from activation sizes measured on the first step.
func Budget(bytes int64) Policy { return Policy{kind: budget, budget: bytes, state: &budgetState{}} }

func (p Policy) String() string {
	switch p.kind {
	case off:
		return "off"
	case every:
		return "every"
	case sqrtN:
		return "sqrt"
	case fixed:
		return fmt.Sprintf("%d", p.segments)
	}
	return fmt.Sprintf("budget(%d)", p.budget)
}

// IsOff reports whether the policy recomputes nothing.
func (p Policy) IsOff() bool { return p.kind == off }

// segmentsFor is the number of segments the policy cuts n blocks into
// (n+1 or more means one block per segment; 1 means no recompute).
func (p Policy) segmentsFor(n int) int {
	switch p.kind {
	case every:
		return n
	case sqrtN:
		k := 1
		for k*k < n {
			k++
		}
		return k
	case fixed:
		return min(max(p.segments, 1), n)
	}
	return 1
}
