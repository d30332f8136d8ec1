package nn

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// RMSNorm scales each row of its input's last dimension to unit root mean
// square, then by a learned gain (Llama's LlamaRMSNorm):
//
//	y = x / √(mean(x²) + Eps) · weight
//
// No mean is subtracted and there is no bias. Parameter: <path>.weight
// [dim] (ones).
type RMSNorm struct {
	Weight *tensor.Tensor
	Eps    float64
}

// NewRMSNorm makes an RMSNorm over a last dimension of size dim.
func NewRMSNorm(b *Builder, path string, dim int, eps float64) (*RMSNorm, error) {
	if err := positive("rms_norm", path, "dim", dim); err != nil {
		return nil, err
	}
	if !(eps > 0) {
		return nil, configError("rms_norm", path, "Eps", "is %v, want > 0", eps)
	}
	w, err := b.Param(Join(path, "weight"), []int{dim}, Ones())
	if err != nil {
		return nil, err
	}
	return &RMSNorm{Weight: w, Eps: eps}, nil
}

// Forward normalises x [..., dim]. It is composed of tensor ops (so its
// gradient is theirs): the statistics run in F32 when x is 16-bit, as
// Hugging Face's does, and the result is x's dtype promoted with the
// weight's (F32 for F32 weights), or under autocast the autocast dtype.
// It saves x, the per-row 1/rms and the normalised x.
func (l *RMSNorm) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(moduleOf(l.Weight))()
	xf := x
	if x.DType().IsLowPrecision() {
		xf = r.Cast(x, tensor.F32)
		defer xf.Release()
	}
	sq := r.Square(xf)
	ms := r.Mean(sq, true, xf.Dim()-1) // [..., 1]
	sq.Release()
	ms2 := r.AddScalar(ms, l.Eps)
	ms.Release()
	inv := r.Pow(ms2, -0.5) // HF's torch.rsqrt
	ms2.Release()
	n := r.Mul(xf, inv)
	inv.Release()
	defer n.Release()
	if ac := r.AutocastDType(); ac != device.Invalid && n.DType() != tensor.F64 && l.Weight.DType() != tensor.F64 && ac != tensor.F32 {
		// Under autocast the consumers are 16-bit products (q, k and v;
		// gate and up): one 16-bit result serves them all, where each
		// would otherwise cast and save its own copy (as LayerNorm does).
		// The product is rounded to it as it is written, and its
		// gradient arrives in 16 bits: no cast pass either way.
		return r.MulAs(n, l.Weight, ac)
	}
	return r.Mul(n, l.Weight)
}

// Parameters is the gain.
func (l *RMSNorm) Parameters() []*tensor.Tensor { return params(l.Weight) }

func (l *RMSNorm) freshOutput() {}
