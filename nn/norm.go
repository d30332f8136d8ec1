package nn

import "github.com/memfit/memfit/tensor"

// LayerNorm normalises the last dimension to zero mean and unit variance,
// then scales and shifts it. Parameters: <path>.weight [Dim] (ones) and
// <path>.bias [Dim] (zeros).
type LayerNorm struct {
	Weight, Bias *tensor.Tensor
	Eps          float64
}

// NewLayerNorm makes a LayerNorm over a last dimension of size dim, with
// Eps 1e-5.
func NewLayerNorm(b *Builder, path string, dim int) (*LayerNorm, error) {
	if err := positive("layer_norm", path, "dim", dim); err != nil {
		return nil, err
	}
	w, err := b.Param(Join(path, "weight"), []int{dim}, Ones())
	if err != nil {
		return nil, err
	}
	bias, err := b.Param(Join(path, "bias"), []int{dim}, Zeros())
	if err != nil {
		w.Release()
		return nil, err
	}
	return &LayerNorm{Weight: w, Bias: bias, Eps: 1e-5}, nil
}

// Forward normalises x [..., Dim]. It saves its input (and per-row
// statistics), not its output.
func (l *LayerNorm) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	return r.LayerNorm(x, l.Weight, l.Bias, l.Eps)
}

// Parameters are the scale and the shift.
func (l *LayerNorm) Parameters() []*tensor.Tensor { return params(l.Weight, l.Bias) }

func (l *LayerNorm) freshOutput() {}
