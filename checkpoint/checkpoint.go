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
	return run(r, fn, params, x, false)
}

// run is Run; with keepHooks the recompute saves what it saves through
// the pass's saved-tensor hooks (tensor.SaveHooks), as the forward did,
// rather than on the device: Nested's outer segments, whose recompute
// keeps the inputs of the blocks inside for their own recompute, so that
// those go where the step puts saved tensors (the host, under offload).
func run(r *nn.Run, fn Func, params []*tensor.Tensor, x *tensor.Tensor, keepHooks bool) *tensor.Tensor {
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
	hooks := r.SavedHooks()
	return r.Function("checkpoint", res, inputs, []*tensor.Tensor{x}, func(_ *tensor.Scope, g *tensor.Tensor, saved []*tensor.Tensor) []*tensor.Tensor {
		var opts []tensor.ScopeOption
		if autocast != device.Invalid {
			opts = append(opts, tensor.Autocast(autocast))
		}
		if keepHooks && hooks != nil {
			opts = append(opts, tensor.SaveHooks(hooks))
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
	nested
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

// Nested checkpoints at two levels: it cuts n blocks into k segments
// (k 0: ⌈√n⌉) of which only the inputs are kept, and a segment's
// recompute in backward keeps only the inputs of its blocks, each block
// recomputed again for its own backward. What is kept at once is about
// k + n/k block inputs (2√n) rather than Every's n, for a second
// recompute of every block outside the last segment. A step whose
// saved tensors go to the host (offloaded activations) saves the inner
// inputs there too.
func Nested(k int) Policy { return Policy{kind: nested, segments: k} }

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
	case nested:
		if p.segments > 0 {
			return fmt.Sprintf("nested(%d)", p.segments)
		}
		return "nested"
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
		return ceilSqrt(n)
	case fixed:
		return min(max(p.segments, 1), n)
	case nested:
		if p.segments > 0 {
			return min(p.segments, n)
		}
		return ceilSqrt(n)
	}
	return 1
}

func ceilSqrt(n int) int {
	k := 1
	for k*k < n {
		k++
	}
	return k
}
