package models

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// CNNConfig configures the LeNet-style convolutional network for 28×28
// single-channel images (MNIST, Fashion-MNIST).
type CNNConfig struct {
	Conv1, Conv2 int // output channels of the two 5×5 convolutions
	Hidden       int // width of the hidden fully connected layer
	Classes      int
	// Dropout is applied to the hidden fully connected layer while
	// training (0: none).
	Dropout float64
	Seed    uint64
	// DType of the parameters: F32 (default) or F64 for gradient checks.
	DType tensor.DType
}

// CNN is
//
//	layers.0  conv 5×5, pad 2, 1→Conv1, ReLU    28×28 → 28×28
//	layers.1  max pool 2×2                      → 14×14
//	layers.2  conv 5×5, Conv1→Conv2, ReLU       → 10×10
//	layers.3  max pool 2×2                      → 5×5
//	layers.4  flatten                           → Conv2·25
//	layers.5  linear Conv2·25→Hidden, ReLU (dropout)
//	layers.6  linear Hidden→Classes
//
// Each ReLU (and the dropout) writes into its convolution's or linear
// layer's output (nn.Fused).
type CNN struct {
	Config CNNConfig
	layers []nn.Module
	runner nn.BlockRunner
}

var _ nn.Model = (*CNN)(nil)

// NewCNN builds a CNN on dev.
func NewCNN(dev device.Device, c CNNConfig) (*CNN, error) {
	const name = "CNNConfig"
	if err := checkDevice(name, dev); err != nil {
		return nil, err
	}
	if err := checkPositive(name, "Conv1", c.Conv1, "Conv2", c.Conv2, "Hidden", c.Hidden, "Classes", c.Classes); err != nil {
		return nil, err
	}
	if err := checkDropout(name, c.Dropout); err != nil {
		return nil, err
	}
	if err := checkDType(name, c.DType); err != nil {
		return nil, err
	}
	b := &nn.Builder{Dev: dev, Seed: c.Seed, DType: c.DType}
	fail := func(err error) (*CNN, error) {
		b.Abort()
		return nil, fmt.Errorf("models: cnn: %w", err)
	}
	relu := nn.KaimingUniform(nn.ReLUGain)
	conv1, err := nn.NewConv2d(b, "layers.0", nn.Conv2dConfig{In: 1, Out: c.Conv1, Kernel: 5, Pad: 2, Weight: relu})
	if err != nil {
		return fail(err)
	}
	conv2, err := nn.NewConv2d(b, "layers.2", nn.Conv2dConfig{In: c.Conv1, Out: c.Conv2, Kernel: 5, Weight: relu})
	if err != nil {
		return fail(err)
	}
	fc, err := nn.NewLinear(b, "layers.5", nn.LinearConfig{In: c.Conv2 * 25, Out: c.Hidden, Weight: relu})
	if err != nil {
		return fail(err)
	}
	head, err := nn.NewLinear(b, "layers.6", nn.LinearConfig{In: c.Hidden, Out: c.Classes})
	if err != nil {
		return fail(err)
	}
	var fcTail []nn.Pointwise
	if c.Dropout > 0 {
		d, err := nn.NewDropout("layers.5.dropout", c.Dropout)
		if err != nil {
			return fail(err)
		}
		fcTail = append(fcTail, d)
	}
	return &CNN{Config: c, layers: []nn.Module{
		&nn.Fused{Layer: conv1, Then: []nn.Pointwise{nn.ReLU{}}},
		&nn.MaxPool2d{Kernel: 2},
		&nn.Fused{Layer: conv2, Then: []nn.Pointwise{nn.ReLU{}}},
		&nn.MaxPool2d{Kernel: 2},
		nn.Flatten{},
		&nn.Fused{Layer: fc, Then: append(fcTail, nn.ReLU{})},
		head,
	}}, nil
}

// Forward maps images [B, 1, 28, 28] to logits [B, Classes]. Another input
// shape panics with *tensor.Error (tensor.Catch returns it as an error).
func (m *CNN) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	nn.CheckInference(r)
	s := x.Shape()
	if len(s) != 4 || s[1] != 1 || s[2] != 28 || s[3] != 28 {
		panic(shapeError("cnn", "input %v must be [batch, 1, 28, 28]", x))
	}
	return runBlocks(m.runner, r, m.layers, x)
}

// Parameters lists layers.0, layers.2, layers.5 and layers.6 (weight, then
// bias).
func (m *CNN) Parameters() []*tensor.Tensor { return parametersOf(m.layers...) }

// Blocks returns the seven layers.
func (m *CNN) Blocks() []nn.Module { return m.layers }

// SetBlockRunner makes Forward run the layers through b (nil:
// nn.RunSequential).
func (m *CNN) SetBlockRunner(b nn.BlockRunner) { m.runner = b }
