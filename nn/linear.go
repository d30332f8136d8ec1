package nn

import (
	"fmt"

	"github.com/memfit/memfit/device"

	"github.com/memfit/memfit/tensor"
)

// configError names the config field that is wrong and the layer it
// belongs to.
func configError(layer, path, field string, format string, args ...any) error {
	return fmt.Errorf("nn: %s %q: %s %s", layer, path, field, fmt.Sprintf(format, args...))
}

func positive(layer, path, field string, v int) error {
	if v <= 0 {
		return configError(layer, path, field, "is %d, want > 0", v)
	}
	return nil
}

// LinearConfig configures a Linear layer.
type LinearConfig struct {
	In, Out int
	NoBias  bool
	// Weight defaults to KaimingUniform(1) (standard deviation 1/√In),
	// Bias to Zeros.
	Weight, Bias Init
}

// Linear computes x·Wᵀ + b over the last dimension of x. Parameters:
// <path>.weight [Out, In] and <path>.bias [Out].
type Linear struct {
	Weight *tensor.Tensor
	Bias   *tensor.Tensor // nil without bias
	// Adapter, when set (AttachLoRA), adds a trained low-rank update to
	// the layer's output.
	Adapter *LoRA
}

// NewLinear makes a Linear layer whose parameters live under path.
func NewLinear(b *Builder, path string, c LinearConfig) (*Linear, error) {
	if err := positive("linear", path, "In", c.In); err != nil {
		return nil, err
	}
	if err := positive("linear", path, "Out", c.Out); err != nil {
		return nil, err
	}
	w, err := b.Param(Join(path, "weight"), []int{c.Out, c.In}, c.Weight.Or(KaimingUniform(1)))
	if err != nil {
		return nil, err
	}
	l := &Linear{Weight: w}
	if !c.NoBias {
		if l.Bias, err = b.Param(Join(path, "bias"), []int{c.Out}, c.Bias.Or(Zeros())); err != nil {
			w.Release()
			return nil, err
		}
	}
	return l, nil
}

// Forward maps x [..., In] to [..., Out]. The result is a new tensor that
// no op saved, so a Fused layer may overwrite it. A quantized weight
// (QuantizeFrozen) is dequantized inside the product, in x's dtype (the
// autocast dtype under autocast), and backward gives x its gradient only;
// with an adapter, x is cast once for the base product and the adapter's,
// and only the adapter's product saves it.
func (l *Linear) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(moduleOf(l.Weight))()
	a := l.Adapter
	if a == nil || a.merged {
		return r.Linear(x, l.Weight, l.Bias)
	}
	if ac := r.AutocastDType(); ac != device.Invalid && x.DType() != ac && x.DType().IsFloat() {
		// Cast once for both products: each would otherwise cast x and
		// save its own 16-bit copy for backward.
		xc := r.Cast(x, ac)
		defer xc.Release()
		x = xc
	}
	return a.forward(r, x, r.Linear(x, l.Weight, l.Bias))
}

// Parameters are the weight, the bias when present, and the adapter's A
// and B when there is one.
func (l *Linear) Parameters() []*tensor.Tensor {
	if a := l.Adapter; a != nil {
		return params(l.Weight, l.Bias, a.A, a.B)
	}
	return params(l.Weight, l.Bias)
}

func (l *Linear) freshOutput() {}

// params lists the non-nil tensors.
func params(ts ...*tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, 0, len(ts))
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

// QuantizeFrozen stores the weight of every Linear layer of m that does
// not train (a LoRA base, a frozen layer) in dtype, tensor.NF4 or
// tensor.Int8, one layer at a time (the peak is the model so far plus one
// layer's weight in both forms), and returns how many it converted.
// keep, when set, spares the layers whose path it accepts (a language
// model's head, which tensor.LinearCrossEntropy reads unquantized).
// Biases, norms and embeddings are not Linear weights and keep their
// dtype. An adapter stays as it is: its A and B train, in their dtype.
func QuantizeFrozen(m Module, dtype tensor.DType, keep func(path string) bool) (int, error) {
	if !dtype.IsQuantized() {
		return 0, fmt.Errorf("nn: QuantizeFrozen: %v is not a quantized dtype", dtype)
	}
	n := 0
	err := Walk(m, func(x Module) error {
		l, ok := x.(*Linear)
		if !ok || l.Weight.RequiresGrad() || l.Weight.DType() == dtype {
			return nil
		}
		path := moduleOf(l.Weight)
		if keep != nil && keep(path) {
			return nil
		}
		if l.Adapter != nil && l.Adapter.merged {
			return fmt.Errorf("nn: quantizing %q: its adapter is merged into the weight; unmerge it first", path)
		}
		if err := l.Weight.ConvertTo(dtype); err != nil {
			return fmt.Errorf("nn: quantizing %q: %w", path, err)
		}
		n++
		return nil
	})
	return n, err
}
