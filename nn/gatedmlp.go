package nn

import "github.com/memfit/memfit/tensor"

// GatedMLPConfig configures a GatedMLP.
type GatedMLPConfig struct {
	Dim, Hidden int
	// Activation of the gate: "silu" (SwiGLU, Llama's; the default) or
	// "gelu_tanh" (GeGLU with GELU's tanh approximation, Gemma's
	// gelu_pytorch_tanh).
	Activation string
	// Fused makes gate and up one projection, <path>.gate_up of
	// [2·Hidden, Dim], the gate's rows first (Phi-3's gate_up_proj).
	Fused bool
	// Weight initialises gate and up (default Normal(0, 0.02)), Down the
	// projection back into the residual stream (default Weight).
	Weight, Down Init
}

// GatedMLP is the gated MLP of Llama (SwiGLU) and Gemma (GeGLU), without
// biases:
//
//	out = down(act(gate(x)) · up(x)),  act(z) = z·σ(z) or gelu_tanh(z)
//
// Parameters: <path>.gate.weight and <path>.up.weight [Hidden, Dim] (or
// <path>.gate_up.weight [2·Hidden, Dim] when fused), <path>.down.weight
// [Dim, Hidden].
type GatedMLP struct {
	Gate, Up   *Linear // nil when fused
	GateUp     *Linear // the fused projection, or nil
	Down       *Linear
	Activation string
	hidden     int
}

// NewGatedMLP makes the MLP under path.
func NewGatedMLP(b *Builder, path string, c GatedMLPConfig) (*GatedMLP, error) {
	if err := positive("gated_mlp", path, "Dim", c.Dim); err != nil {
		return nil, err
	}
	if err := positive("gated_mlp", path, "Hidden", c.Hidden); err != nil {
		return nil, err
	}
	switch c.Activation {
	case "":
		c.Activation = "silu"
	case "silu", "gelu_tanh":
	default:
		return nil, configError("gated_mlp", path, "Activation", "is %q, want silu or gelu_tanh", c.Activation)
	}
	w := c.Weight.Or(Normal(0, 0.02))
	m := &GatedMLP{Activation: c.Activation, hidden: c.Hidden}
	made := func() []Module {
		var ms []Module
		for _, l := range []*Linear{m.Gate, m.Up, m.GateUp} {
			if l != nil {
				ms = append(ms, l)
			}
		}
		return ms
	}
	var err error
	if c.Fused {
		if m.GateUp, err = NewLinear(b, Join(path, "gate_up"), LinearConfig{In: c.Dim, Out: 2 * c.Hidden, NoBias: true, Weight: w}); err != nil {
			return nil, err
		}
	} else {
		if m.Gate, err = NewLinear(b, Join(path, "gate"), LinearConfig{In: c.Dim, Out: c.Hidden, NoBias: true, Weight: w}); err != nil {
			return nil, err
		}
		if m.Up, err = NewLinear(b, Join(path, "up"), LinearConfig{In: c.Dim, Out: c.Hidden, NoBias: true, Weight: w}); err != nil {
			release(made()...)
			return nil, err
		}
	}
	if m.Down, err = NewLinear(b, Join(path, "down"), LinearConfig{In: c.Hidden, Out: c.Dim, NoBias: true, Weight: c.Down.Or(w)}); err != nil {
		release(made()...)
		return nil, err
	}
	return m, nil
}

// Forward maps x [..., Dim] to [..., Dim]. silu is composed as z·σ(z)
// (Sigmoid saves its output, Mul its operands), GELU is the tensor op,
// and every intermediate is released as soon as its consumer has run.
func (m *GatedMLP) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(parentOf(moduleOf(m.Down.Weight)))()
	var g, u *tensor.Tensor
	if m.GateUp != nil {
		y := m.GateUp.Forward(r, x)
		last := y.Dim() - 1
		g, u = r.Narrow(y, last, 0, m.hidden), r.Narrow(y, last, m.hidden, m.hidden)
		y.Release()
	} else {
		g = m.Gate.Forward(r, x)
	}
	var act *tensor.Tensor
	switch m.Activation {
	case "gelu_tanh":
		act = r.Gelu(g)
	default:
		sg := r.Sigmoid(g)
		act = r.Mul(g, sg)
		sg.Release()
	}
	g.Release()
	if u == nil {
		u = m.Up.Forward(r, x)
	}
	h := r.Mul(act, u)
	act.Release()
	u.Release()
	out := m.Down.Forward(r, h)
	h.Release()
	return out
}

// Parameters lists gate and up (or the fused projection), then down.
func (m *GatedMLP) Parameters() []*tensor.Tensor {
	return parametersOfLinear(m.Gate, m.Up, m.GateUp, m.Down)
}

func (m *GatedMLP) freshOutput() {}
