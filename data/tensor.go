package data

import (
	"errors"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// ToDevice copies the batch into two new tensors on dev, allocated under
// memory.Data: inputs (F32 of InputShape for images, I32 tokens for
// windows) and targets (I32 of TargetShape). The caller owns both and
// releases them when the step is done; on error nothing stays allocated.
func (b *Batch) ToDevice(dev device.Device) (inputs, targets *tensor.Tensor, err error) {
	switch {
	case b.Inputs != nil:
		inputs, err = tensor.FromFloat32(dev, b.Inputs, b.InputShape, memory.Data)
	case b.Tokens != nil:
		inputs, err = tensor.FromInt32(dev, b.Tokens, b.InputShape, memory.Data)
	default:
		return nil, nil, errors.New("data: batch has no inputs")
	}
	if err != nil {
		return nil, nil, err
	}
	targets, err = tensor.FromInt32(dev, b.Targets, b.TargetShape, memory.Data)
	if err != nil {
		inputs.Release()
		return nil, nil, err
	}
	return inputs, targets, nil
}
