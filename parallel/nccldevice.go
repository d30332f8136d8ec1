//go:build cuda || cudaemu

package parallel

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda"
	"github.com/memfit/memfit/tensor"
)

// ncclDevice returns the GPU whose stream NCCL's collectives run on for
// dev: dev itself, or the *cuda.Device inside a wrapper such as
// device.Without's (found with device.As), so that a run that hides a
// fused kernel keeps NCCL.
func ncclDevice(dev device.Device) (*cuda.Device, error) {
	if d, ok := device.As[*cuda.Device](dev); ok && d != nil {
		return d, nil
	}
	name := "<nil>"
	if dev != nil {
		name = dev.Name()
	}
	return nil, fmt.Errorf("dist: nccl: device %s is not a CUDA device", name)
}

// onGPU reports whether t's memory is d's: t lies on d or on a wrapper
// of it (the tensors of a run under device.Without).
func onGPU(t *tensor.Tensor, d *cuda.Device) bool {
	g, ok := device.As[*cuda.Device](t.Device())
	return ok && g == d
}
