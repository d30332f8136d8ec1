package device_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
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

// adamCounter records how device.AdamSteps reaches a device's Adam
// kernels: group calls, and the per-tensor calls (through the group
// kernel or not).
type adamCounter struct {
	device.Device
	groups, singles int
}

func (a *adamCounter) AdamStep(param, grad, m, v device.View, h device.AdamHyper) {
	a.singles++
	device.AdamStep(a.Device, param, grad, m, v, h)
}

func (a *adamCounter) AdamSteps(params, grads, ms, vs []device.View, h device.AdamHyper) {
	a.groups++
	for i := range params {
		a.AdamStep(params[i], grads[i], ms[i], vs[i], h)
	}
}

// TestAdamStepsFallback: device.AdamSteps takes the group kernel where
// the device has it and adam_step, and otherwise one AdamStep per
// tensor (the composed one where adam_step is hidden), with the values
// of AdamStep on each tensor alone.
func TestAdamStepsFallback(t *testing.T) {
	sizes := []int{1, 7, 300}
	h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true,
		BiasCorrection1: 0.1, BiasCorrection2: 0.001, GradScale: 0.5}
	// want is AdamStep tensor by tensor on the CPU.
	c := cpu.New()
	tensors := func() (ps, gs, ms, vs []device.View) {
		for k, n := range sizes {
			for j, lo := range []float64{-1, -1, -0.1, 0} {
				b, err := c.Alloc(int64(4*n), memory.Temporary)
				if err != nil {
					t.Fatal(err)
				}
				vals := make([]float32, n)
				for i := range vals {
					vals[i] = float32(lo + float64((i*7+k*3+j)%11)/11)
				}
				raw := make([]byte, 4*n)
				for i, x := range vals {
					binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
				}
				c.Write(b, 0, raw)
				v := device.View{Buf: b, DType: device.F32, Shape: []int{n}, Strides: []int{1}}
				switch j {
				case 0:
					ps = append(ps, v)
				case 1:
					gs = append(gs, v)
				case 2:
					ms = append(ms, v)
				default:
					vs = append(vs, v)
				}
			}
		}
		return
	}
	read := func(views ...[]device.View) []byte {
		var out []byte
		for _, vv := range views {
			for _, v := range vv {
				b := make([]byte, 4*v.Len())
				c.Read(b, v.Buf, 0)
				out = append(out, b...)
			}
		}
		return out
	}
	ps, gs, ms, vs := tensors()
	for i := range ps {
		c.AdamStep(ps[i], gs[i], ms[i], vs[i], h)
	}
	want := read(ps, ms, vs)
	for _, tc := range []struct {
		name            string
		hide            []string
		groups, singles int
		tol             float64 // 0: bit for bit
	}{
		{"group kernel", nil, 1, len(sizes), 0},
		{"without adam_group_step", []string{device.CapAdamGroupStep}, 0, len(sizes), 0},
		// The composition computes in F32, the kernel in F64.
		{"without adam_step", []string{device.CapAdamStep}, 0, 0, 1e-5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &adamCounter{Device: c}
			d := device.Device(a)
			if tc.hide != nil {
				d = device.Without(a, tc.hide...)
			}
			ps, gs, ms, vs := tensors()
			device.AdamSteps(d, ps, gs, ms, vs, h)
			if a.groups != tc.groups || a.singles != tc.singles {
				t.Errorf("%d group and %d single calls, want %d and %d", a.groups, a.singles, tc.groups, tc.singles)
			}
			got := read(ps, ms, vs)
			for i := 0; i < len(got); i += 4 {
				g := math.Float32frombits(binary.LittleEndian.Uint32(got[i:]))
				w := math.Float32frombits(binary.LittleEndian.Uint32(want[i:]))
				if math.Abs(float64(g-w)) > tc.tol*math.Max(1, math.Abs(float64(w))) {
					t.Fatalf("element %d: %v, AdamStep on each tensor gives %v", i/4, g, w)
				}
			}
		})
	}
}
