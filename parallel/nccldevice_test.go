//go:build cuda || cudaemu

package parallel

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/cuda"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// TestNCCLDevice: the NCCL engine finds its GPU through device.Without
// (a run under -without), and takes tensors made on the GPU or on any
// wrapper of it, but not another device's. It runs without NCCL (under
// cudaemu, the emulated GPU) since it checks only how the engine finds
// the device; TestNCCLOneGPU runs the collectives on a real one.
func TestNCCLDevice(t *testing.T) {
	gpu, err := cuda.New(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer gpu.Close()
	host := cpu.New()
	for _, c := range []struct {
		dev  device.Device
		want *cuda.Device
	}{
		{gpu, gpu},
		{device.Without(gpu), gpu},
		{device.Without(gpu, device.CapSoftmax), gpu},
		{device.Without(device.Without(gpu, device.CapSoftmax), device.CapAttention), gpu},
		{host, nil},
		{device.Without(host), nil},
	} {
		got, err := ncclDevice(c.dev)
		if got != c.want || (err == nil) != (c.want != nil) {
			t.Errorf("ncclDevice(%s) = %v, %v; want %v", c.dev.Name(), got, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), c.dev.Name()+" is not a CUDA device") {
			t.Errorf("ncclDevice(%s): error %q does not name the device", c.dev.Name(), err)
		}
		x, err := tensor.New(c.dev, tensor.F32, []int{4}, memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		if on := onGPU(x, gpu); on != (c.want != nil) {
			t.Errorf("a tensor on %s is on the GPU: %v, want %v", c.dev.Name(), on, c.want != nil)
		}
		x.Release()
	}
	if _, err := ncclDevice(nil); err == nil {
		t.Error("ncclDevice(nil): no error")
	}
}
