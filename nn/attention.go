package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/tensor"
)

// AttentionConfig configures a CausalSelfAttention layer.
type AttentionConfig struct {
	Dim, Heads int
	// Dropout is applied, while training, to the attention probabilities
	// and to the output.
	Dropout float64
	// QKV and Proj initialise the weights of the two projections (default
	// Normal(0, 0.02)); biases start at zero.
	QKV, Proj Init
}

// CausalSelfAttention is multi-head self-attention in which position t
// sees positions 0..t only. Parameters: <path>.qkv.weight [3·Dim, Dim],
// <path>.qkv.bias, <path>.proj.weight [Dim, Dim], <path>.proj.bias.
type CausalSelfAttention struct {
	QKV, Proj *Linear
	Heads     int
	Dropout   float64

	attnSalt, outSalt uint64
}

// NewCausalSelfAttention makes the layer under path.
func NewCausalSelfAttention(b *Builder, path string, c AttentionConfig) (*CausalSelfAttention, error) {
	if err := positive("attention", path, "Dim", c.Dim); err != nil {
		return nil, err
	}
	if err := positive("attention", path, "Heads", c.Heads); err != nil {
		return nil, err
	}
	if c.Dim%c.Heads != 0 {
		return nil, configError("attention", path, "Heads", "is %d, which does not divide Dim %d", c.Heads, c.Dim)
	}
	if c.Dropout < 0 || c.Dropout >= 1 {
		return nil, configError("attention", path, "Dropout", "is %v, want 0 <= Dropout < 1", c.Dropout)
	}
	qkv, err := NewLinear(b, Join(path, "qkv"), LinearConfig{In: c.Dim, Out: 3 * c.Dim, Weight: c.QKV.Or(Normal(0, 0.02))})
	if err != nil {
		return nil, err
	}
	proj, err := NewLinear(b, Join(path, "proj"), LinearConfig{In: c.Dim, Out: c.Dim, Weight: c.Proj.Or(Normal(0, 0.02))})
	if err != nil {
		release(qkv)
		return nil, err
	}
	return &CausalSelfAttention{
		QKV: qkv, Proj: proj, Heads: c.Heads, Dropout: c.Dropout,
		attnSalt: Salt(Join(path, "attn_dropout")), outSalt: Salt(Join(path, "out_dropout")),
	}, nil
}

// Forward maps x [B, T, Dim] to [B, T, Dim]:
//
//	q, k, v = split(x·Wqkvᵀ + bqkv) as [B, H, T, Dim/H]
//	y = dropout(softmax(causal(q·kᵀ/√(Dim/H))))·v, heads joined
//	out = dropout(y·Wprojᵀ + bproj)
//
// The attention itself is tensor's CausalSelfAttention (CausalAttention
// reading the heads inside qkv): on a device with fused attention kernels
// no [B, H, T, T] scores or probabilities exist, forward or backward, and
// backward writes qkv's gradient whole; elsewhere it composes CausalScores (only the causal
// triangle computed) with Softmax and CausalMatMul (skipping the
// probabilities' zeros). With r.Segments (a packed batch) each query
// attends its own example only (tensor's SegmentedSelfAttention). Every
// intermediate is released as soon as its consumer has run; the output is
// a new tensor that no op saved.
func (a *CausalSelfAttention) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	d := a.Proj.Weight.Shape()[0]
	if x.Dim() != 3 || x.Shape()[2] != d {
		panic(&tensor.Error{Op: "attention", Msg: fmt.Sprintf("input %v must be [batch, time, %d]", x, d)})
	}
	defer r.Enter(parentOf(moduleOf(a.QKV.Weight)))()
	bsz, t := x.Shape()[0], x.Shape()[1]
	h := a.Heads
	dh := d / h
	train := r.Train && a.Dropout > 0

	qkv := a.QKV.Forward(r, x) // [B, T, 3D]

	// Fused where the device has the kernels (no [B, H, T, T] tensor,
	// forward or backward), else CausalScores, Softmax, Dropout and
	// CausalMatMul; the same dropout masks either way.
	p := 0.0
	if train {
		p = a.Dropout
	}
	y := r.SegmentedSelfAttention(qkv, h, r.Segments, 1/math.Sqrt(float64(dh)), p, r.SeedFor(a.attnSalt)) // [B, H, T, Dh]
	qkv.Release()
	yt := r.Permute(y, 0, 2, 1, 3)
	y.Release()
	joined := r.Reshape(yt, bsz, t, d)
	yt.Release()
	out := a.Proj.Forward(r, joined)
	joined.Release()
	if train {
		var dropped *tensor.Tensor
		if r.InPlace {
			dropped = r.DropoutInPlace(out, a.Dropout, r.SeedFor(a.outSalt))
		} else {
			dropped = r.Dropout(out, a.Dropout, r.SeedFor(a.outSalt))
		}
		out.Release()
		out = dropped
	}
	return out
}

// Parameters are those of the two projections.
func (a *CausalSelfAttention) Parameters() []*tensor.Tensor {
	return append(a.QKV.Parameters(), a.Proj.Parameters()...)
}

func (a *CausalSelfAttention) freshOutput() {}

// release frees the parameters of modules made before a constructor failed.
func release(ms ...Module) {
	for _, m := range ms {
		if m != nil {
			Release(m)
		}
	}
}
