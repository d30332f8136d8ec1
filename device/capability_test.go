package device_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
)

// pinned stands in for a GPU: a device with host memory to offer
// (device.HostMemory) beside its kernels.
type pinned struct {
	device.Device
	allocs int
}

func (p *pinned) AllocHost(n int) ([]byte, error) { p.allocs++; return make([]byte, n), nil }
func (p *pinned) FreeHost([]byte) error           { return nil }

// wrapper is a device wrapper of another package's: it forwards the core
// and says what it wraps.
type wrapper struct{ device.Device }

func (w wrapper) Unwrap() device.Device { return w.Device }

// TestAs: As finds a device's other interfaces and the device itself
// through Without and through any wrapper with Unwrap, but not a
// capability Without hides.
func TestAs(t *testing.T) {
	c := cpu.New()
	p := &pinned{Device: c}
	hidden := device.Without(p)
	if _, ok := hidden.(device.HostMemory); ok {
		t.Fatal("Without's wrapper has HostMemory itself: the test checks nothing")
	}
	for _, d := range []device.Device{p, hidden, device.Without(hidden, device.CapAdamStep), wrapper{hidden}, device.Without(wrapper{p})} {
		hm, ok := device.As[device.HostMemory](d)
		if !ok || hm != device.HostMemory(p) {
			t.Errorf("As[HostMemory](%s) = %v, %v; want the pinned device", d.Name(), hm, ok)
		}
		if got, ok := device.As[*pinned](d); !ok || got != p {
			t.Errorf("As[*pinned](%s) = %v, %v", d.Name(), got, ok)
		}
	}
	for _, d := range []device.Device{c, device.Without(c), device.Without(device.Without(c, device.CapSoftmax)), wrapper{device.Without(c)}} {
		if got, ok := device.As[*cpu.Device](d); !ok || got != c {
			t.Errorf("As[*cpu.Device](%s) = %v, %v", d.Name(), got, ok)
		}
	}
	for _, d := range []device.Device{c, device.Without(c), meta.New(0), nil} {
		if hm, ok := device.As[device.HostMemory](d); ok || hm != nil {
			t.Errorf("As[HostMemory] of a device without it: %v, %v", hm, ok)
		}
	}
	if _, ok := device.As[*meta.Device](device.Without(c)); ok {
		t.Error("As found a meta device inside a CPU device")
	}
	// A hidden capability stays hidden, one not hidden is found, and so
	// is an interface that includes a hidden one.
	soft := device.Without(c, device.CapSoftmax)
	if k, ok := device.As[device.SoftmaxKernels](soft); ok || k != nil {
		t.Errorf("As[SoftmaxKernels] found softmax behind Without(softmax)")
	}
	if _, ok := device.As[device.SoftmaxKernels](wrapper{soft}); ok {
		t.Errorf("As[SoftmaxKernels] found softmax behind a wrapper of Without(softmax)")
	}
	if _, ok := device.As[interface {
		device.SoftmaxKernels
		device.AdamStepper
	}](soft); ok {
		t.Errorf("As found an interface with softmax behind Without(softmax)")
	}
	if _, ok := device.As[device.AdamStepper](soft); !ok {
		t.Errorf("As[AdamStepper] misses adam_step behind Without(softmax)")
	}
	if _, ok := device.As[device.AttentionKernels](device.Without(soft)); ok {
		t.Errorf("As[AttentionKernels] found attention behind Without()")
	}
	// Through Unwrap alone (another package's wrapper) the dispatch sees
	// no capability at all, as before: Unwrap is for As, not for Has.
	if device.Has(wrapper{c}, device.CapSoftmax) {
		t.Error("Has sees softmax through a wrapper without the method")
	}
}

// TestWithoutUnwrap: Unwrap returns the device itself, once, however
// many Withouts were stacked.
func TestWithoutUnwrap(t *testing.T) {
	c := cpu.New()
	w := device.Without(device.Without(c, device.CapSoftmax), device.CapAttention)
	u, ok := w.(interface{ Unwrap() device.Device })
	if !ok {
		t.Fatal("Without's wrapper has no Unwrap")
	}
	if u.Unwrap() != device.Device(c) {
		t.Errorf("Unwrap = %s, want the CPU device", u.Unwrap().Name())
	}
}
