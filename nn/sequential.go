package nn

import "github.com/memfit/memfit/tensor"

// BlockRunner runs a sequence of blocks on x and returns the last output.
// RunSequential is the plain one; activation checkpointing supplies others
// (package checkpoint), which is how models accept a checkpoint policy
// without depending on it.
type BlockRunner func(r *Run, blocks []Module, x *tensor.Tensor) *tensor.Tensor

// RunSequential feeds x through blocks in order, releasing each
// intermediate output as soon as the next block has consumed it.
func RunSequential(r *Run, blocks []Module, x *tensor.Tensor) *tensor.Tensor {
	h := x
	for _, b := range blocks {
		y := b.Forward(r, h)
		if h != x {
			h.Release()
		}
		h = y
	}
	if h == x {
		// No blocks: hand the caller a handle of its own that keeps x's
		// history (Detach would cut the graph).
		return identity(r, x)
	}
	return h
}

// Sequential is a module made of modules applied in order.
type Sequential struct {
	Layers []Module
	// Runner replaces RunSequential (set by checkpoint policies).
	Runner BlockRunner
}

// NewSequential returns the layers as one module.
func NewSequential(layers ...Module) *Sequential { return &Sequential{Layers: layers} }

// Forward applies the layers in order.
func (s *Sequential) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	if s.Runner != nil {
		return s.Runner(r, s.Layers, x)
	}
	return RunSequential(r, s.Layers, x)
}

// Parameters lists the parameters of every layer in order.
func (s *Sequential) Parameters() []*tensor.Tensor {
	var ps []*tensor.Tensor
	for _, l := range s.Layers {
		ps = append(ps, l.Parameters()...)
	}
	return ps
}

// Blocks returns the layers, for checkpointing and freezing by index.
func (s *Sequential) Blocks() []Module { return s.Layers }

// SetBlockRunner installs a runner for the layers (nil: RunSequential).
func (s *Sequential) SetBlockRunner(b BlockRunner) { s.Runner = b }
