package devicetest_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/device/meta"
)

// TestCPU runs the suite on the CPU device, with its threads and on one
// thread (another partition of every kernel's work), against the float64
// reference.
func TestCPU(t *testing.T) {
	t.Run("threads", func(t *testing.T) { devicetest.Run(t, cpu.New()) })
	t.Run("one thread", func(t *testing.T) { devicetest.Run(t, cpu.New(cpu.Threads(1))) })
}

// TestComposedFallbacks checks every capability's composition of core
// kernels against the reference: a device that lacks a fused kernel
// computes the same values.
func TestComposedFallbacks(t *testing.T) {
	devicetest.Run(t, device.Without(cpu.New()))
}

// TestMeta checks that the meta device accounts every case as the CPU
// does, with its fused kernels and, through Without, with the fallbacks'
// temporaries: plans traced on it stay exact either way. It stands for
// the CPU as a plan does, hiding what the CPU lacks (device.Lacks).
func TestMeta(t *testing.T) {
	t.Run("fused", func(t *testing.T) {
		devicetest.RunAccounting(t, cpu.New(), device.Without(meta.New(0), device.Lacks("cpu")...))
	})
	t.Run("composed", func(t *testing.T) {
		devicetest.RunAccounting(t, device.Without(cpu.New()), device.Without(meta.New(0)))
	})
}

func TestCapabilities(t *testing.T) {
	d := cpu.New()
	lacks := device.Lacks("cpu")
	if len(lacks) != 1 || lacks[0] != device.CapTiledAttention {
		t.Errorf("the CPU device says it lacks %v, want tiled_attention alone", lacks)
	}
	for _, name := range device.Capabilities {
		if got, want := device.Has(d, name), name != device.CapTiledAttention; got != want {
			t.Errorf("the CPU device has %s: %v, want %v", name, got, want)
		}
		if device.Has(device.Without(d, name), name) {
			t.Errorf("Without(%s) still has it", name)
		}
		if device.Has(device.Without(d), name) {
			t.Errorf("Without() still has %s", name)
		}
	}
	w := device.Without(d, device.CapSoftmax)
	if !device.Has(w, device.CapAdamStep) {
		t.Error("Without(softmax) hides adam_step too")
	}
	if device.Has(device.Without(w, device.CapAdamStep), device.CapSoftmax) {
		t.Error("Without of a Without forgets what the first hid")
	}
}
