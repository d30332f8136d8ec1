package devicetest_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/device/meta"
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
