package device_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu" // also registers "cpu"
	"github.com/memfit/memfit/memory"
)

// A device is opened by name; hiding a capability makes the package-level
// function run its composition of core kernels, which agrees with the
// fused kernel.
func ExampleWithout() {
	dev, err := device.Open("cpu", device.Options{Capacity: 64 << 20})
	if err != nil {
		panic(err)
	}
	view := func(d device.Device, vals ...float32) device.View {
		b, err := d.Alloc(int64(4*len(vals)), memory.Activation)
		if err != nil {
			panic(err)
		}
		var raw []byte
		for _, v := range vals {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		d.Write(b, 0, raw)
		return device.View{Buf: b, DType: device.F32, Shape: []int{2, 2}, Strides: []int{2, 1}}
	}
	read := func(d device.Device, v device.View) []float32 {
		raw := make([]byte, 16)
		d.Read(raw, v.Buf, 0)
		out := make([]float32, 4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out
	}
	composed := device.Without(dev, device.CapSoftmax)
	for _, d := range []device.Device{dev, composed} {
		x, y := view(d, 0, 1, 2, 2), view(d, 0, 0, 0, 0)
		device.Softmax(d, y, x, false)
		p := read(d, y)
		fmt.Printf("%v: %.4f %.4f | %.4f %.4f\n", device.Has(d, device.CapSoftmax), p[0], p[1], p[2], p[3])
		d.Free(x.Buf)
		d.Free(y.Buf)
	}
	// Output:
	// true: 0.2689 0.7311 | 0.5000 0.5000
	// false: 0.2689 0.7311 | 0.5000 0.5000
}

// As finds what a wrapper such as Without's holds: the concrete device,
// or an interface of it (device.HostMemory). A hidden capability stays
// hidden from it.
func ExampleAs() {
	dev := cpu.New()
	hidden := device.Without(dev, device.CapSoftmax)
	_, asserted := hidden.(*cpu.Device)
	found, ok := device.As[*cpu.Device](hidden)
	fmt.Println(asserted, ok, found == dev)
	_, ok = device.As[device.SoftmaxKernels](hidden)
	_, adam := device.As[device.AdamStepper](hidden)
	fmt.Println(ok, adam)
	// Output:
	// false true true
	// false true
}

// AdamSteps updates several parameters with one hyperparameter set in
// one call (a GPU's few launches for all of them); each gets the bits
// AdamStep would give it alone.
func ExampleAdamSteps() {
	dev := cpu.New()
	view := func(vals ...float32) device.View {
		b, err := dev.Alloc(int64(4*len(vals)), memory.Activation)
		if err != nil {
			panic(err)
		}
		var raw []byte
		for _, v := range vals {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		dev.Write(b, 0, raw)
		return device.View{Buf: b, DType: device.F32, Shape: []int{len(vals)}, Strides: []int{1}}
	}
	// A weight of three elements and a bias of one, with zero moments.
	params := []device.View{view(1, -1, 0.5), view(0.25)}
	grads := []device.View{view(0.1, 0.2, -0.3), view(1)}
	ms := []device.View{view(0, 0, 0), view(0)}
	vs := []device.View{view(0, 0, 0), view(0)}
	h := device.AdamHyper{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection1: 0.1, BiasCorrection2: 0.001}
	device.AdamSteps(dev, params, grads, ms, vs, h)
	for _, p := range params {
		raw := make([]byte, 4*p.Len())
		dev.Read(raw, p.Buf, 0)
		vals := make([]float32, p.Len())
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		fmt.Printf("%.4f\n", vals)
	}
	// Output:
	// [0.9000 -1.1000 0.6000]
	// [0.1500]
}
