package optim

import (
	"math"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// GradNorm returns the global L2 norm of the gradients of params, computed
// in float64 over every parameter that requires grad and has a gradient
// (the others are skipped; a parameter listed twice counts once). Its
// temporaries are at most a few MiB, whatever the size of a gradient.
func GradNorm(params []*tensor.Tensor) (float64, error) {
	var norm float64
	err := tensor.Catch(func() error {
		s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
		defer s.Close()
		norm = math.Sqrt(sumSquares(s, grads(params)))
		return nil
	})
	return norm, err
}

// ClipGradNorm scales the gradients of params in place so that their
// global norm (GradNorm) is at most maxNorm, and returns the norm they had.
// Gradients whose norm is within maxNorm are left alone, and so are
// gradients whose norm is inf or NaN: a loss scaler will skip that step.
// maxNorm must be > 0; +Inf only measures.
func ClipGradNorm(params []*tensor.Tensor, maxNorm float64) (float64, error) {
	if math.IsNaN(maxNorm) || maxNorm <= 0 {
		return 0, errorf("ClipGradNorm: max norm %v; want a number > 0", maxNorm)
	}
	var norm float64
	err := tensor.Catch(func() error {
		s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
		defer s.Close()
		gs := grads(params)
		norm = math.Sqrt(sumSquares(s, gs))
		if !(norm > maxNorm) || math.IsInf(norm, 0) {
			return nil
		}
		c := maxNorm / norm
		for _, g := range gs {
			s.MulScalarInPlace(g, c).Release()
		}
		return nil
	})
	return norm, err
}

// grads lists the gradients of the parameters that require grad and have
// one, each once.
func grads(params []*tensor.Tensor) []*tensor.Tensor {
	seen := map[*tensor.Tensor]bool{}
	var out []*tensor.Tensor
	for _, p := range params {
		if p == nil || seen[p] || !p.RequiresGrad() || p.Grad() == nil {
			continue
		}
		seen[p] = true
		out = append(out, p.Grad())
	}
	return out
}

// sumSquares is Σ g² over every element of gs, in float64.
func sumSquares(s *tensor.Scope, gs []*tensor.Tensor) float64 {
	var sum float64
	for _, g := range gs {
		chunked(s, []*tensor.Tensor{g}, func(v []*tensor.Tensor) {
			x := s.Cast(v[0], tensor.F64)
			sq := s.Square(x)
			x.Release()
			t := s.Sum(sq, false)
			sq.Release()
			sum += t.Item()
			t.Release()
		})
	}
	return sum
}
