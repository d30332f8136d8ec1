package checkpoint

import (
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Sequential runs blocks under the policy: it cuts them into contiguous
// segments and runs each but the last under Run, so that only segment
// inputs are kept between forward and backward. The last segment is not
// recomputed: its activations are needed as soon as backward starts, so
// recomputing it would cost time and save nothing. Under Nested each
// segment runs its blocks under Every.
func Sequential(r *nn.Run, blocks []nn.Module, policy Policy, x *tensor.Tensor) *tensor.Tensor {
	k := policy.segmentsFor(len(blocks))
	if policy.kind == budget {
		k = policy.budgetSegments(r, blocks, x)
	}
	if !r.Grad() {
		return nn.RunSequential(r, blocks, x)
	}
	if k <= 1 {
		if policy.kind == nested {
			return Sequential(r, blocks, Every, x) // one segment: its blocks' inputs
		}
		return nn.RunSequential(r, blocks, x)
	}
	h := x
	n := len(blocks)
	for i := 0; i < k; i++ {
		seg := blocks[n*i/k : n*(i+1)/k]
		var y *tensor.Tensor
		inner := nn.RunSequential
		if policy.kind == nested {
			inner = func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
				return Sequential(r, blocks, Every, x)
			}
		}
		if i == k-1 {
			y = inner(r, seg, h)
		} else {
			var params []*tensor.Tensor
			for _, b := range seg {
				params = append(params, b.Parameters()...)
			}
			y = run(r, func(r *nn.Run, x *tensor.Tensor) *tensor.Tensor { return inner(r, seg, x) }, params, h, policy.kind == nested)
		}
		if h != x {
			h.Release()
		}
		h = y
	}
	return h
}

// Runner returns the policy as an nn.BlockRunner, for models'
// SetBlockRunner.
func (p Policy) Runner() nn.BlockRunner {
	if p.kind == off {
		return nn.RunSequential
	}
	return func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
		return Sequential(r, blocks, p, x)
	}
}
