package devicetest_test

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
)

// TestQuantKernels checks the CPU's quantized kernels against themselves
// on one thread and against the composed product and the host paths
// (device.Without hides quant_gemm and dequantize; the host's Quantize
// is the fallback when a device is not a Quantizer, which Without's
// wrapper is not asked for here), and the meta device's accounting of
// both.
func TestQuantKernels(t *testing.T) {
	ref := cpu.New()
	t.Run("one thread", func(t *testing.T) { devicetest.RunQuant(t, ref, cpu.New(cpu.Threads(1))) })
	t.Run("composed", func(t *testing.T) {
		devicetest.RunQuant(t, ref, device.Without(cpu.New(), device.CapQuantGemm, device.CapDequantize))
	})
	t.Run("host paths", func(t *testing.T) { devicetest.RunQuant(t, ref, hostOnly{cpu.New()}) })
	t.Run("meta fused", func(t *testing.T) { devicetest.RunQuantAccounting(t, cpu.New(), meta.New(0)) })
	t.Run("meta composed", func(t *testing.T) {
		devicetest.RunQuantAccounting(t, device.Without(cpu.New(), device.CapQuantGemm), device.Without(meta.New(0), device.CapQuantGemm))
	})
}

// hostOnly is a device with the CPU's core kernels and nothing else: no
// capability and not a Quantizer, so quantizing goes through the host.
type hostOnly struct{ device.Device }

// BenchmarkHostQuantize is the host path's Quantize (a GPU's: it has no
// quantizing kernel) of 2^22 F32 weights into NF4; -cpu 1,2 compares one
// goroutine with several.
func BenchmarkHostQuantize(b *testing.B) {
	d := hostOnly{cpu.New()}
	const n = 1 << 22
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.02)
	}
	src, err := d.Alloc(4*n, memory.Temporary)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := d.Alloc(device.Bytes(device.NF4, n), memory.Temporary)
	if err != nil {
		b.Fatal(err)
	}
	d.Write(src, 0, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*n))
	sv := device.View{Buf: src, DType: device.F32, Shape: []int{n}, Strides: []int{1}}
	qv := device.View{Buf: dst, DType: device.NF4, Shape: []int{n}, Strides: []int{1}}
	b.SetBytes(4 * n)
	for b.Loop() {
		if err := device.Quantize(d, qv, sv); err != nil {
			b.Fatal(err)
		}
	}
}
