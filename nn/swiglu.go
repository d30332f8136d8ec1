package nn

import "github.com/memfit/memfit/tensor"

// SwiGLUConfig configures a SwiGLU MLP.
type SwiGLUConfig struct {
	Dim, Hidden int
	// Weight initialises gate and up (default Normal(0, 0.02)), Down the
	// projection back into the residual stream (default Weight).
	Weight, Down Init
}

// SwiGLU is Llama's gated MLP, without biases:
//
//	out = down(silu(gate(x)) · up(x)),  silu(z) = z·σ(z)
//
// Parameters: <path>.gate.weight and <path>.up.weight [Hidden, Dim],
// <path>.down.weight [Dim, Hidden].
type SwiGLU struct {
	Gate, Up, Down *Linear
}

// NewSwiGLU makes the MLP under path.
func NewSwiGLU(b *Builder, path string, c SwiGLUConfig) (*SwiGLU, error) {
	if err := positive("swiglu", path, "Dim", c.Dim); err != nil {
		return nil, err
	}
	if err := positive("swiglu", path, "Hidden", c.Hidden); err != nil {
		return nil, err
	}
	w := c.Weight.Or(Normal(0, 0.02))
	m := &SwiGLU{}
	var err error
	if m.Gate, err = NewLinear(b, Join(path, "gate"), LinearConfig{In: c.Dim, Out: c.Hidden, NoBias: true, Weight: w}); err != nil {
		return nil, err
	}
	if m.Up, err = NewLinear(b, Join(path, "up"), LinearConfig{In: c.Dim, Out: c.Hidden, NoBias: true, Weight: w}); err != nil {
		release(m.Gate)
		return nil, err
	}
	if m.Down, err = NewLinear(b, Join(path, "down"), LinearConfig{In: c.Hidden, Out: c.Dim, NoBias: true, Weight: c.Down.Or(w)}); err != nil {
		release(m.Gate, m.Up)
		return nil, err
	}
	return m, nil
}

// Forward maps x [..., Dim] to [..., Dim]. silu is composed as z·σ(z)
// (Sigmoid saves its output, Mul its operands), and every intermediate is
// released as soon as its consumer has run.
func (m *SwiGLU) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(parentOf(moduleOf(m.Gate.Weight)))()
	g := m.Gate.Forward(r, x)
	sg := r.Sigmoid(g)
	act := r.Mul(g, sg)
	g.Release()
	sg.Release()
	u := m.Up.Forward(r, x)
	h := r.Mul(act, u)
	act.Release()
	u.Release()
	out := m.Down.Forward(r, h)
	h.Release()
	return out
}

// Parameters lists gate, up and down.
func (m *SwiGLU) Parameters() []*tensor.Tensor {
	return append(append(m.Gate.Parameters(), m.Up.Parameters()...), m.Down.Parameters()...)
}

func (m *SwiGLU) freshOutput() {}
