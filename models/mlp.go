package models

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// MLPConfig configures a multi-layer perceptron.
type MLPConfig struct {
	// Widths are the input width, the hidden widths and the number of
	// outputs, e.g. [784, 256, 10]: at least two, all > 0.
	Widths []int
	// Dropout is the probability with which each hidden unit is dropped
	// while training (0: no dropout layers).
	Dropout float64
	Seed    uint64
	// DType of the parameters: F32 (default), F64 for gradient checks, or
	// BF16 for weights stored in 16 bits (train -weights bf16).
	DType tensor.DType
}

// MLP is a stack of fully connected layers with ReLU between them:
// layers.0 … layers.(n-2), where n = len(Widths). Hidden layer i computes
// relu(dropout(x·Wᵢᵀ + bᵢ)) as one nn.Fused layer (dropout commutes with
// ReLU; in place, the pair writes into the linear output and keeps one
// activation); the last layer is linear.
type MLP struct {
	Config MLPConfig
	layers []nn.Module
	runner nn.BlockRunner
}

var _ nn.Model = (*MLP)(nil)

// NewMLP builds an MLP on dev.
func NewMLP(dev device.Device, c MLPConfig) (*MLP, error) {
	const name = "MLPConfig"
	if err := checkDevice(name, dev); err != nil {
		return nil, err
	}
	if len(c.Widths) < 2 {
		return nil, fieldError(name, "Widths", "has %d entries, want at least 2 (inputs and outputs)", len(c.Widths))
	}
	for i, w := range c.Widths {
		if w <= 0 {
			return nil, fieldError(name, fmt.Sprintf("Widths[%d]", i), "is %d, want > 0", w)
		}
	}
	if err := checkDropout(name, c.Dropout); err != nil {
		return nil, err
	}
	if err := checkDType(name, c.DType); err != nil {
		return nil, err
	}
	c.Widths = append([]int(nil), c.Widths...)
	b := &nn.Builder{Dev: dev, Seed: c.Seed, DType: c.DType}
	m := &MLP{Config: c}
	last := len(c.Widths) - 2
	for i := 0; i <= last; i++ {
		path := fmt.Sprintf("layers.%d", i)
		lc := nn.LinearConfig{In: c.Widths[i], Out: c.Widths[i+1], Weight: nn.KaimingUniform(nn.ReLUGain)}
		if i == last {
			lc.Weight = nn.KaimingUniform(1)
		}
		l, err := nn.NewLinear(b, path, lc)
		if err != nil {
			b.Abort()
			return nil, fmt.Errorf("models: mlp: %w", err)
		}
		if i == last {
			m.layers = append(m.layers, l)
			break
		}
		var then []nn.Pointwise
		if c.Dropout > 0 {
			d, err := nn.NewDropout(path+".dropout", c.Dropout)
			if err != nil {
				b.Abort()
				return nil, fmt.Errorf("models: mlp: %w", err)
			}
			then = append(then, d)
		}
		m.layers = append(m.layers, &nn.Fused{Layer: l, Then: append(then, nn.ReLU{})})
	}
	return m, nil
}

// Forward maps x [B, Widths[0]] — or any [B, …] with that many elements per
// example, such as [B, 1, 28, 28], which it flattens — to [B, outputs].
// An input of another size panics with *tensor.Error (tensor.Catch returns
// it as an error).
func (m *MLP) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	nn.CheckInference(r)
	in := m.Config.Widths[0]
	if x.Dim() < 2 || x.Len()/max(x.Shape()[0], 1) != in {
		panic(shapeError("mlp", "input %v must be [batch, %d] (or [batch, …] with %d elements per example)", x, in, in))
	}
	h := x
	if x.Dim() > 2 {
		h = r.Reshape(x, x.Shape()[0], in)
		defer h.Release()
	}
	return runBlocks(m.runner, r, m.layers, h)
}

// Parameters lists layers.N.weight and layers.N.bias in layer order.
func (m *MLP) Parameters() []*tensor.Tensor { return parametersOf(m.layers...) }

// Blocks returns the layers: hidden layers (nn.Fused), then the output
// layer (nn.Linear).
func (m *MLP) Blocks() []nn.Module { return m.layers }

// SetBlockRunner makes Forward run the layers through b (nil:
// nn.RunSequential).
func (m *MLP) SetBlockRunner(b nn.BlockRunner) { m.runner = b }
