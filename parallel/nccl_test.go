//go:build cuda

package parallel_test

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/cuda"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// TestNCCLOneGPU runs every collective of the NCCL engine on one GPU (a
// group of one rank: what a one-GPU machine can check) and its errors,
// on the device and on the device with its fused kernels hidden
// (device.Without, as -without makes it): the engine finds the GPU
// through the wrapper. Two and more ranks need as many GPUs.
func TestNCCLOneGPU(t *testing.T) {
	gpu, err := cuda.New(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer gpu.Close()
	for _, dev := range []device.Device{gpu, device.Without(gpu)} {
		t.Run(dev.Name(), func(t *testing.T) { testNCCLOneGPU(t, dev) })
	}
}

func testNCCLOneGPU(t *testing.T, dev device.Device) {
	c, err := parallel.NewNCCL(parallel.NewLocal(1)[0], dev)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vals := []float32{1, -2, 3.5, 4}
	mk := func() *tensor.Tensor {
		x, err := tensor.FromFloat32(dev, vals, []int{4}, memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, op := range []parallel.Op{parallel.Sum, parallel.Avg, parallel.Max, parallel.Min} {
		x := mk()
		if err := c.AllReduce(x, op); err != nil {
			t.Fatal(err)
		}
		if got := x.Float32s(); !slices.Equal(got, vals) {
			t.Errorf("all-reduce %v over one rank: %v, want %v", op, got, vals)
		}
		x.Release()
	}
	in, out := mk(), mk()
	out.Fill(0)
	if err := c.ReduceScatter(out, in, parallel.Sum); err != nil || !slices.Equal(out.Float32s(), vals) {
		t.Errorf("reduce-scatter: %v, %v", out.Float32s(), err)
	}
	out.Fill(0)
	if err := c.AllGather(out, in); err != nil || !slices.Equal(out.Float32s(), vals) {
		t.Errorf("all-gather: %v, %v", out.Float32s(), err)
	}
	if err := c.Broadcast(in, 0); err != nil || !slices.Equal(in.Float32s(), vals) {
		t.Errorf("broadcast: %v, %v", in.Float32s(), err)
	}
	if err := c.Barrier(); err != nil {
		t.Error(err)
	}
	in.Release()
	out.Release()
	host, _ := tensor.FromFloat32(cpu.New(), vals, []int{4}, memory.Temporary)
	defer host.Release()
	if err := c.AllReduce(host, parallel.Sum); err == nil {
		t.Error("all-reduce of a CPU tensor over NCCL: no error")
	}
}
