package nn

import "github.com/memfit/memfit/tensor"

// LayerNorm normalises the trailing dimensions of its parameters' shape
// (usually just the last) to zero mean and unit variance, then scales and
// shifts them. Parameters: <path>.weight (ones) and <path>.bias (zeros),
// both of the normalised shape.
type LayerNorm struct {
	Weight, Bias *tensor.Tensor
	Eps          float64
}

// NewLayerNorm makes a LayerNorm over a last dimension of size dim, with
// Eps 1e-5.
func NewLayerNorm(b *Builder, path string, dim int) (*LayerNorm, error) {
	return NewLayerNormShape(b, path, dim)
}

// NewLayerNormShape makes a LayerNorm over the trailing dimensions shape
// (PyTorch's normalized_shape), with Eps 1e-5.
func NewLayerNormShape(b *Builder, path string, shape ...int) (*LayerNorm, error) {
	if len(shape) == 0 {
		return nil, configError("layer_norm", path, "shape", "is empty")
	}
	for _, d := range shape {
		if err := positive("layer_norm", path, "dim", d); err != nil {
			return nil, err
		}
	}
	w, err := b.Param(Join(path, "weight"), shape, Ones())
	if err != nil {
		return nil, err
	}
	bias, err := b.Param(Join(path, "bias"), shape, Zeros())
	if err != nil {
		w.Release()
		return nil, err
	}
	return &LayerNorm{Weight: w, Bias: bias, Eps: 1e-5}, nil
}

// Forward normalises x [..., shape...]. It saves its input (and per-row
// statistics), not its output.
func (l *LayerNorm) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(moduleOf(l.Weight))()
	return r.LayerNorm(x, l.Weight, l.Bias, l.Eps)
}

// Parameters are the scale and the shift.
func (l *LayerNorm) Parameters() []*tensor.Tensor { return params(l.Weight, l.Bias) }

func (l *LayerNorm) freshOutput() {}
