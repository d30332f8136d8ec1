package nn

import (
	"fmt"
	"slices"

	"github.com/memfit/memfit/tensor"
)

// Reduction says how a loss combines per-example values.
type Reduction = tensor.Reduction

// Reductions of a loss: the mean (over targets that are not ignored) or
// the sum.
const (
	MeanReduction = tensor.MeanReduction
	SumReduction  = tensor.SumReduction
)

// CrossEntropyOption configures CrossEntropy.
type CrossEntropyOption func(*tensor.CrossEntropyOptions)

// IgnoreIndex makes targets equal to i contribute nothing; the mean is over
// the other targets. Without it targets equal to tensor.DefaultIgnoreIndex
// (-100) are ignored, as in PyTorch.
func IgnoreIndex(i int) CrossEntropyOption {
	return func(o *tensor.CrossEntropyOptions) { o.Ignore = tensor.IgnoreIndex(i) }
}

// LabelSmoothing mixes the one-hot target with the uniform distribution:
// the target class gets 1-eps+eps/C, the others eps/C (0 <= eps < 1).
func LabelSmoothing(eps float64) CrossEntropyOption {
	return func(o *tensor.CrossEntropyOptions) { o.LabelSmoothing = eps }
}

// Reduce selects the reduction (MeanReduction by default).
func Reduce(r Reduction) CrossEntropyOption {
	return func(o *tensor.CrossEntropyOptions) { o.Reduction = r }
}

// CrossEntropy is the softmax cross-entropy of logits [..., C] against
// integer class targets [...] (I32 or I64), a scalar: Scope.CrossEntropy
// with options. It saves only the logits and targets. A target outside
// [0, C) that is not ignored panics with *device.IndexError.
func CrossEntropy(s *tensor.Scope, logits, targets *tensor.Tensor, opts ...CrossEntropyOption) *tensor.Tensor {
	var o tensor.CrossEntropyOptions
	for _, f := range opts {
		f(&o)
	}
	if o.LabelSmoothing < 0 || o.LabelSmoothing >= 1 {
		panic(&tensor.Error{Op: "cross_entropy", Msg: fmt.Sprintf("label smoothing %v outside [0, 1)", o.LabelSmoothing)})
	}
	if o.Reduction != MeanReduction && o.Reduction != SumReduction {
		panic(&tensor.Error{Op: "cross_entropy", Msg: fmt.Sprintf("unknown reduction %d", o.Reduction)})
	}
	return s.CrossEntropy(logits, targets, o)
}

// MSE is the squared error between pred and target (same shape), averaged
// (MeanReduction) or summed (SumReduction); a scalar.
func MSE(s *tensor.Scope, pred, target *tensor.Tensor, red Reduction) *tensor.Tensor {
	if !slices.Equal(pred.Shape(), target.Shape()) {
		// Broadcasting [N, 1] against [N] would silently compare every
		// prediction with every target.
		panic(&tensor.Error{Op: "mse", Msg: fmt.Sprintf("prediction %v and target %v differ in shape", pred, target)})
	}
	switch red {
	case MeanReduction:
		return s.MSE(pred, target)
	case SumReduction:
		d := s.Sub(pred, target)
		sq := s.Square(d)
		d.Release()
		out := s.Sum(sq, false)
		sq.Release()
		return out
	}
	panic(&tensor.Error{Op: "mse", Msg: fmt.Sprintf("unknown reduction %d", red)})
}
