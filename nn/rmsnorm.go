package nn

import (
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// RMSNormConfig configures an RMSNorm.
type RMSNormConfig struct {
	Dim int
	Eps float64 // ε (rms_norm_eps); must be above 0
	// Offset is added to the gain before it scales (Gemma's 1 + w, whose
	// gain starts at 0; 0 for Llama's w, which starts at 1).
	Offset float64
}

// RMSNorm scales each row of its input's last dimension to unit root mean
// square, then by a learned gain (Llama's LlamaRMSNorm; Gemma's with
// Offset 1):
//
//	y = x / √(mean(x²) + Eps) · (weight + Offset)
//
// No mean is subtracted and there is no bias. Parameter: <path>.weight
// [dim] (ones, or zeros with an Offset of 1).
type RMSNorm struct {
	Weight *tensor.Tensor
	Eps    float64
	Offset float64
}

// NewRMSNorm makes an RMSNorm over a last dimension of size dim.
func NewRMSNorm(b *Builder, path string, dim int, eps float64) (*RMSNorm, error) {
	return NewRMSNormWith(b, path, RMSNormConfig{Dim: dim, Eps: eps})
}

// NewRMSNormWith makes the RMSNorm c describes.
func NewRMSNormWith(b *Builder, path string, c RMSNormConfig) (*RMSNorm, error) {
	if err := positive("rms_norm", path, "dim", c.Dim); err != nil {
		return nil, err
	}
	if !(c.Eps > 0) {
		return nil, configError("rms_norm", path, "Eps", "is %v, want > 0", c.Eps)
	}
	if math.IsInf(c.Offset, 0) || math.IsNaN(c.Offset) {
		return nil, configError("rms_norm", path, "Offset", "is %v, want a finite number", c.Offset)
	}
	w, err := b.Param(Join(path, "weight"), []int{c.Dim}, Constant(1-c.Offset))
	if err != nil {
		return nil, err
	}
	return &RMSNorm{Weight: w, Eps: c.Eps, Offset: c.Offset}, nil
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
		return r.MulShifted(n, l.Weight, l.Offset, ac)
	}
	return r.MulShifted(n, l.Weight, l.Offset, device.Invalid)
}

// Parameters is the gain.
func (l *RMSNorm) Parameters() []*tensor.Tensor { return params(l.Weight) }

func (l *RMSNorm) freshOutput() {}
