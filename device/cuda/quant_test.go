//go:build cuda || cudaemu

package cuda

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
)

// TestQuantKernels runs the quantized-weight cases on the GPU against the
// CPU device: k_dequant bit for bit, the composed product (tiles
// dequantized for cuBLAS) within tolerance of the CPU's fused one, the
// host path's quantization byte for byte; and with the dequantizing
// kernel hidden, the host path's tiles.
func TestQuantKernels(t *testing.T) {
	d := newTestDevice(t)
	devicetest.RunQuant(t, cpu.New(), d)
	t.Run("host dequantize", func(t *testing.T) {
		devicetest.RunQuant(t, cpu.New(), device.Without(d, device.CapDequantize))
	})
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestLacksQuantGemm: plans for the GPU take the composed product.
func TestLacksQuantGemm(t *testing.T) {
	d := newTestDevice(t)
	if device.Has(d, device.CapQuantGemm) || !device.Has(d, device.CapDequantize) {
		t.Errorf("quant_gemm %v, dequantize %v; want the composed product over k_dequant",
			device.Has(d, device.CapQuantGemm), device.Has(d, device.CapDequantize))
	}
	found := false
	for _, c := range device.Lacks("cuda") {
		found = found || c == device.CapQuantGemm
	}
	if !found {
		t.Error("device.Lacks(\"cuda\") does not list quant_gemm")
	}
}
