package tensor_test

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// moveHooks packs every saved tensor into a copy on another device, one
// copy per pack (no sharing), and counts the calls.
type moveHooks struct {
	to                       device.Device
	packs, unpacks, releases int
}

type moved struct {
	h    *moveHooks
	host *tensor.Tensor
	dev  device.Device
}

func (h *moveHooks) Pack(t *tensor.Tensor) tensor.Packed {
	h.packs++
	return &moved{h: h, host: t.CopyStorage(h.to, memory.Activation), dev: t.Device()}
}

func (m *moved) Unpack() *tensor.Tensor {
	m.h.unpacks++
	return m.host.CopyStorage(m.dev, memory.Activation)
}

func (m *moved) Release() {
	m.h.releases++
	m.host.Release()
}

// TestSavedHooks: every saved tensor goes through the scope's hooks, views
// keep their geometry through CopyStorage, gradients do not change, the
// hooks carry into With and WithModes, and nothing is left on either
// device.
func TestSavedHooks(t *testing.T) {
	dev, other := cpu.New(), cpu.New()
	x, _ := tensor.FromFloat32(dev, []float32{1, -2, 3, -4, 5, -6}, []int{2, 3}, memory.Parameter)
	x.SetRequiresGrad(true)
	defer x.Release()
	grad := func(opts ...tensor.ScopeOption) []float32 {
		x.SetGrad(nil)
		if err := tensor.Step(func(s *tensor.Scope) error {
			c := s.With() // hooks carry into children and views
			v := c.WithModes()
			tr := v.Transpose(v.Tanh(x), 0, 1) // a strided view, saved by Mul
			y := v.Mul(tr, tr)
			v.Sum(v.Exp(y), false).Backward()
			c.Close()
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		return x.Grad().Float32s()
	}
	want := grad()
	h := &moveHooks{to: other}
	got := grad(tensor.SaveHooks(h))
	if !slices.Equal(got, want) {
		t.Fatalf("gradients with hooks %v, without %v", got, want)
	}
	if h.packs == 0 || h.unpacks != h.packs || h.releases != h.packs {
		t.Errorf("packs %d, unpacks %d, releases %d: want equal and nonzero", h.packs, h.unpacks, h.releases)
	}
	if n := other.Memory().Stats().Allocated.Current; n != 0 {
		t.Errorf("%d bytes left on the other device", n)
	}
	if n := dev.Memory().Stats().Category(memory.Activation).Current; n != 0 {
		t.Errorf("%d activation bytes left on the device", n)
	}
}

// TestCopyStorageAcrossDevices: CopyStorage copies a view's whole storage
// between devices with and without host bytes (the meta device's copies
// do nothing but account), Alias rebuilds a view on the copy, and
// AllocStorage allocates what CopyStorage would.
func TestCopyStorageAcrossDevices(t *testing.T) {
	a, b := cpu.New(), cpu.New()
	x, _ := tensor.FromFloat32(a, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, memory.Activation)
	defer x.Release()
	s := tensor.NewScope(tensor.NoGrad())
	defer s.Close()
	view := s.Narrow(x, 1, 1, 2)
	c := view.CopyStorage(b, memory.Activation)
	defer c.Release()
	if got := c.Float32s(); !slices.Equal(got, []float32{2, 3, 5, 6}) {
		t.Errorf("copied view reads %v", got)
	}
	if got := b.Memory().Stats().Category(memory.Activation).Current; got != x.StorageBytes() {
		t.Errorf("copy holds %d bytes, want the whole storage's %d", got, x.StorageBytes())
	}
	full := c.Alias(x)
	defer full.Release()
	if got := full.Float32s(); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("alias reads %v", got)
	}
	if x.StorageKey() != view.StorageKey() || c.StorageKey() == x.StorageKey() {
		t.Error("storage keys: views of one storage must agree, copies differ")
	}
	// AllocStorage is the same allocation without the copy, which
	// CopyStorageFrom makes later.
	d := view.AllocStorage(b, memory.Gradient)
	defer d.Release()
	if got := b.Memory().Stats().Category(memory.Gradient).Current; got != x.StorageBytes() || !slices.Equal(d.Shape(), view.Shape()) {
		t.Errorf("AllocStorage holds %d bytes (want %d), shape %v", got, x.StorageBytes(), d.Shape())
	}
	d.CopyStorageFrom(x)
	if got := d.Float32s(); !slices.Equal(got, []float32{2, 3, 5, 6}) {
		t.Errorf("filled allocation reads %v", got)
	}
	m1, m2 := meta.New(0), meta.New(0)
	y, _ := tensor.New(m1, tensor.F32, []int{1 << 19}, memory.Activation) // 2 MiB: more than one bounce chunk
	defer y.Release()
	z := y.CopyStorage(m2, memory.Activation)
	defer z.Release()
	if got := m2.Memory().Stats().Category(memory.Activation).Current; got != 2<<20 {
		t.Errorf("meta copy accounts %d bytes, want %d", got, 2<<20)
	}
}
